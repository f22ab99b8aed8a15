/*
 * test_uring_sqfill.c - the io_uring engine with a tiny submission queue.
 *
 * ring=8 gives an SQ of 8 entries (2 kept back for cancels and the
 * interrupt), while four threads start about 2000 stream operations in
 * bursts and two threads run px_handle_events.  Starts constantly find the
 * SQ full, submit it themselves and retry, and with SQPOLL (where the
 * kernel thread frees slots at its own pace) get deferred by the processor
 * (PX_START_AGAIN) and started again later.
 *
 * Checked: every callback runs exactly once; each channel's reads, put
 * together in start order, give back exactly the bytes written, in order;
 * no operation fails.
 *
 * Exit 77 (skip) when this kernel has no usable io_uring.
 */
#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "proactor.h"
#include "uring_test.h"

#define STARTERS 4
#define LOOPERS 2
#define PER_STARTER 250      /* writes per starter; as many reads */
#define READ_LEN 64
#define MAX_WRITE 64
#define BURST 20

/* One started operation. */
typedef struct op {
	atomic_int calls;
	int error;
	size_t bytes;
	uint8_t buf[MAX_WRITE > READ_LEN ? MAX_WRITE : READ_LEN];
} op;

/* One starter's channel: a socketpair or a pipe. */
typedef struct chan {
	int wfd, rfd;
	bool pipe;
	op writes[PER_STARTER];
	op reads[PER_STARTER];
	size_t written;            /* bytes the writes carry, in total */
	atomic_int start_errors;
} chan;

static px_proactor *px;
static chan chans[STARTERS];
static atomic_int callbacks, extra_calls;
static atomic_bool looping;

static void op_cb(const px_completion *c)
{
	op *o = c->user;
	if (atomic_fetch_add(&o->calls, 1) != 0) {
		atomic_fetch_add(&extra_calls, 1);
		return;
	}
	o->error = c->error;
	o->bytes = c->bytes;
	atomic_fetch_add(&callbacks, 1);
}

static uint8_t pattern(int ch, size_t pos)
{
	return (uint8_t)(pos * 7 + (pos >> 8) * 13 + (size_t)ch * 31);
}

static void *looper_main(void *arg)
{
	(void)arg;
	uring_test_loop(px, &looping);
	return NULL;
}

static void *starter_main(void *arg)
{
	int ch = (int)(intptr_t)arg;
	chan *c = &chans[ch];
	size_t pos = 0;

	for (int i = 0; i < PER_STARTER; i += BURST) {
		int end = i + BURST < PER_STARTER ? i + BURST : PER_STARTER;
		/* A burst of writes, then as many reads, with no wait
		 * between the starts: the SQ overflows. */
		for (int k = i; k < end; k++) {
			op *o = &c->writes[k];
			size_t len = 1 + (size_t)(k * 37 + ch) % MAX_WRITE;
			for (size_t j = 0; j < len; j++)
				o->buf[j] = pattern(ch, pos + j);
			pos += len;
			if (px_write_stream_all(px, c->wfd, o->buf, len, op_cb, o))
				atomic_fetch_add(&c->start_errors, 1);
		}
		for (int k = i; k < end; k++) {
			op *o = &c->reads[k];
			if (px_read_stream(px, c->rfd, o->buf, READ_LEN, op_cb, o))
				atomic_fetch_add(&c->start_errors, 1);
		}
	}
	c->written = pos;
	return NULL;
}

static bool writes_done(void)
{
	for (int ch = 0; ch < STARTERS; ch++)
		for (int k = 0; k < PER_STARTER; k++)
			if (!atomic_load(&chans[ch].writes[k].calls))
				return false;
	return true;
}

static void wait_until(bool (*cond)(void), int ms, const char *what)
{
	for (int i = 0; i < ms && !cond(); i++)
		usleep(1000);
	if (!cond())
		fail_msg("timed out waiting for %s", what);
}

static bool all_done(void)
{
	return atomic_load(&callbacks) == STARTERS * PER_STARTER * 2;
}

static void run(const char *engine)
{
	char err[256];
	int rc = px_create(&px, engine, err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM) {
		printf("io_uring unavailable here (%s): %s\n", px_strerror(rc), err);
		skip();
	}
	assert_int_equal(rc, 0);
	printf("engine: %s\n", px_engine_name(px));

	memset(chans, 0, sizeof(chans));
	atomic_store(&callbacks, 0);
	atomic_store(&extra_calls, 0);
	for (int ch = 0; ch < STARTERS; ch++) {
		int fds[2];
		chans[ch].pipe = ch % 2;
		if (chans[ch].pipe)
			assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
		else
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
						    0, fds), 0);
		chans[ch].rfd = fds[0];
		chans[ch].wfd = fds[1];
	}

	pthread_t loopers[LOOPERS], starters[STARTERS];
	atomic_store(&looping, true);
	for (int i = 0; i < LOOPERS; i++)
		assert_int_equal(pthread_create(&loopers[i], NULL, looper_main, NULL), 0);
	for (int i = 0; i < STARTERS; i++)
		assert_int_equal(pthread_create(&starters[i], NULL, starter_main,
						(void *)(intptr_t)i), 0);
	for (int i = 0; i < STARTERS; i++)
		pthread_join(starters[i], NULL);

	/* Once every write is done, end the streams: the reads still
	 * pending (the data came in fewer, larger pieces) see end of file. */
	wait_until(writes_done, 20000, "the writes");
	for (int ch = 0; ch < STARTERS; ch++) {
		close(chans[ch].wfd);
		chans[ch].wfd = -1;
	}
	wait_until(all_done, 20000, "every callback");
	usleep(50000);   /* room for a duplicate to show up */
	atomic_store(&looping, false);
	for (int i = 0; i < LOOPERS; i++)
		pthread_join(loopers[i], NULL);

	assert_int_equal(atomic_load(&extra_calls), 0);
	for (int ch = 0; ch < STARTERS; ch++) {
		chan *c = &chans[ch];
		assert_int_equal(atomic_load(&c->start_errors), 0);
		size_t pos = 0;
		for (int k = 0; k < PER_STARTER; k++) {
			assert_int_equal(atomic_load(&c->writes[k].calls), 1);
			assert_int_equal(c->writes[k].error, 0);
		}
		/* The reads in start order carry the stream in order. */
		for (int k = 0; k < PER_STARTER; k++) {
			op *o = &c->reads[k];
			assert_int_equal(atomic_load(&o->calls), 1);
			assert_int_equal(o->error, 0);
			for (size_t j = 0; j < o->bytes; j++)
				if (o->buf[j] != pattern(ch, pos + j))
					fail_msg("channel %d (%s): byte %zu out of "
						 "order in read %d", ch,
						 c->pipe ? "pipe" : "socket",
						 pos + j, k);
			pos += o->bytes;
		}
		assert_int_equal(pos, c->written);
		close(c->rfd);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
}

static void sqfill_ring8(void **state)
{
	(void)state;
	run("uring ring=8");
}

static void sqfill_ring8_coop(void **state)
{
	(void)state;
	run("uring ring=8 ring_flags=coop_taskrun");
}

static void sqfill_ring8_sqpoll(void **state)
{
	(void)state;
	run("uring ring=8 ring_flags=sqpoll");
}

static void sqfill_ring8_dedicated(void **state)
{
	(void)state;
	run("uring ring=8 processor=dedicated");
}

int main(void)
{
	int rc = uring_test_begin("test_uring_sqfill", "uring", 120);
	if (rc)
		return rc;

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sqfill_ring8),
		cmocka_unit_test(sqfill_ring8_coop),
		cmocka_unit_test(sqfill_ring8_sqpoll),
		cmocka_unit_test(sqfill_ring8_dedicated),
	};
	return cmocka_run_group_tests_name("uring_sqfill", tests, NULL, NULL);
}
