/*
 * test_uring_rings.c - a lone loop thread that holds both rings of the
 * io_uring engine serves both, however busy one of them is.
 *
 * A lead reaps a bounded number of completions (PX_URING_REAP_MAX in
 * wait_strategies/uring.c), and a thread alone in the loop leads every
 * ring with work at once.  Were the bound shared by the rings, a first
 * ring that always had more ready than the bound would keep the second
 * ring's completions waiting for ever.
 *
 * Set-up: "uring rings=2", CHAINS socketpairs, each with data queued on
 * its read end.  The main thread starts one read per chain before any
 * loop thread runs: such starts go into the rings in turn, so both rings
 * get reads.  Then one thread runs the loop.  Each read's callback tops
 * up the data it took (write(2) on the other end) and starts the next
 * read on the same descriptor, so every chain always has a read that
 * completes at once; the callbacks' starts go into the loop thread's own
 * ring.  That ring then holds more ready reads than the bound at every
 * lead, the chains whose first read went into the other ring must be
 * served all the same.
 *
 * Checked: every chain completes reads within RUN_MS (a chain whose first
 * read was never reaped has none); every read succeeds and calls back
 * once; once the chains are told to stop, every started read has called
 * back and the proactor is destroyed cleanly.
 *
 * Exit 77 (skip) when this kernel has no usable io_uring.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proactor.h"
#include "uring_test.h"

#define CHAINS 256
#define READ_LEN 16
#define PREFILL 4096       /* bytes queued on every read end at the start */
#define RUN_MS 1500

typedef struct chain {
	int rfd, wfd;
	uint8_t buf[READ_LEN];
	atomic_long reads;      /* reads that completed with data */
	atomic_int inflight;    /* 1 while a read is started and not called back */
	atomic_int errors;
} chain;

static px_proactor *px;
static chain chains[CHAINS];
static atomic_bool stopping, looping;
static atomic_long started, called;

static void read_cb(const px_completion *c);

static int start_read(chain *ch)
{
	atomic_store(&ch->inflight, 1);
	atomic_fetch_add(&started, 1);
	int rc = px_read_stream(px, ch->rfd, ch->buf, sizeof(ch->buf), read_cb, ch);
	if (rc < 0) {
		atomic_fetch_sub(&started, 1);
		atomic_store(&ch->inflight, 0);
	}
	return rc;
}

static void read_cb(const px_completion *c)
{
	chain *ch = c->user;

	if (atomic_exchange(&ch->inflight, 0) != 1)
		atomic_fetch_add(&ch->errors, 1);  /* a second callback */
	if (c->error || c->bytes == 0) {
		atomic_fetch_add(&ch->errors, 1);
	} else {
		atomic_fetch_add(&ch->reads, 1);
		/* Put back what was taken, so the next read finds data at
		 * once. */
		if (write(ch->wfd, ch->buf, c->bytes) != (ssize_t)c->bytes)
			atomic_fetch_add(&ch->errors, 1);
		else if (!atomic_load(&stopping) && start_read(ch) < 0)
			atomic_fetch_add(&ch->errors, 1);
	}
	/* Last: once called equals started, no callback is left that could
	 * still start a read. */
	atomic_fetch_add(&called, 1);
}

static void *looper_main(void *arg)
{
	(void)arg;
	uring_test_loop(px, &looping);
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void lone_leader_serves_both_rings(void **state)
{
	(void)state;
	char err[256];
	uint8_t fill[PREFILL];

	memset(fill, 'x', sizeof(fill));
	assert_int_equal(px_create(&px, "uring rings=2", err, sizeof(err)), 0);
	for (int i = 0; i < CHAINS; i++) {
		int sv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		chains[i].rfd = sv[0];
		chains[i].wfd = sv[1];
		assert_int_equal(write(sv[1], fill, sizeof(fill)), (ssize_t)sizeof(fill));
	}
	/* Started before any thread leads: they go into both rings. */
	for (int i = 0; i < CHAINS; i++)
		assert_int_equal(start_read(&chains[i]), 0);

	pthread_t th;
	atomic_store(&looping, true);
	assert_int_equal(pthread_create(&th, NULL, looper_main, NULL), 0);

	/* Every chain must make progress; stop waiting as soon as all have. */
	uint64_t end = now_ms() + RUN_MS;
	int idle = CHAINS;
	while (now_ms() < end) {
		idle = 0;
		for (int i = 0; i < CHAINS; i++)
			if (atomic_load(&chains[i].reads) == 0)
				idle++;
		if (!idle)
			break;
		usleep(10000);
	}

	atomic_store(&stopping, true);
	/* Let the chains run out: each stops after its current read. */
	uint64_t drain_end = now_ms() + 10000;
	while (atomic_load(&called) != atomic_load(&started) && now_ms() < drain_end)
		usleep(1000);
	long s = atomic_load(&started), c = atomic_load(&called);

	atomic_store(&looping, false);
	px_stop(px);
	pthread_join(th, NULL);

	if (idle)
		fail_msg("%d of %d chains completed no read in %d ms: a ring "
			 "was not served", idle, CHAINS, RUN_MS);
	assert_int_equal(c, s);
	for (int i = 0; i < CHAINS; i++) {
		assert_int_equal(atomic_load(&chains[i].errors), 0);
		assert_int_equal(atomic_load(&chains[i].inflight), 0);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	for (int i = 0; i < CHAINS; i++) {
		close(chains[i].rfd);
		close(chains[i].wfd);
	}
}

int main(void)
{
	int rc = uring_test_begin("test_uring_rings", "uring", 60);
	if (rc)
		return rc;

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lone_leader_serves_both_rings),
	};
	return cmocka_run_group_tests_name("uring_rings", tests, NULL, NULL);
}
