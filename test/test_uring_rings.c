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
 * abandoned_ring_is_taken_over: two loop threads, each leading its own
 * ring (16 sessions of reads, fed until each ring has a leader of its
 * own; the rings' state is read under the proactor mutex), both waiting.
 * A read completes in one ring; its callback makes its thread leave the
 * loop for good, and the read queued behind it is left unsubmitted in
 * that ring.  Its data comes: the thread still waiting on the other ring
 * must take the abandoned ring over within AB_LATE_MS.  Before, it went
 * on waiting until its wait ended for another reason (the processor's
 * idle check: 196 ms right after traffic, 347 ms after a quiet spell of
 * AB_QUIET_MS).  abandoned_ring_after_a_quiet_spell: the same after the
 * quiet spell.
 *
 * cq_size_at_huge_max_aio: a max_aio near 2^32 gets a completion ring
 * at least as large as max_aio=100000 does (the kernel's report in
 * /proc/self/fdinfo); the sum that sizes it wrapped in 32 bits.
 *
 * Exit 77 (skip) when this kernel has no usable io_uring.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proactor.h"
#include "core.h"
#include "uring.h"
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

/* ------------------------------------------------------------------ */
/* A ring whose leader leaves the loop is taken over                    */
/* ------------------------------------------------------------------ */

#define AB_SESS 16
#define AB_LATE_MS 100
#define AB_TRIES 25
/* AB_R2_POST: the longest the victim's callback waits for its post. */
#define AB_BLOCK_MS 2000
/* Who starts the read behind the victim's: the main thread before the
 * victim's data; the victim's callback; the main thread right after the
 * victim's thread left.  AB_R2_POST: no read behind; the victim's
 * callback posts and then blocks (its thread stays), waiting for the
 * post's callback.  AB_R2_BLOCK: as AB_R2_QUEUED, but the victim's
 * callback blocks until the read behind has called back. */
enum { AB_R2_QUEUED, AB_R2_CB, AB_R2_OUTSIDE, AB_R2_POST, AB_R2_BLOCK };

static struct {
	int sv[AB_SESS][2];
	char buf[AB_SESS][8];
	char buf2[8];
	atomic_int victim;       /* its next callback makes its thread leave */
	atomic_bool looping;
	pthread_t leaver;        /* written before leave is set (release) */
	atomic_int leave, parked;
	atomic_long done;        /* callbacks of the sessions' reads */
	atomic_ullong r2_ns;     /* when the queued read called back */
	atomic_ullong post_ns;   /* AB_R2_POST: when the post was made */
	atomic_int unblocked;    /* AB_R2_POST, _BLOCK: the victim's callback
	                            returned */
	atomic_int in_block;     /* AB_R2_BLOCK: the victim's callback began */
	atomic_int r2_calls, errors;
	size_t r2_bytes;
	int r2_error;
	int r2_mode;             /* AB_R2_*: who starts the read behind */
} ab;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ab_cb(const px_completion *c);
static void ab_r2_cb(const px_completion *c);

static int ab_read(int i)
{
	return px_read_stream(px, ab.sv[i][0], ab.buf[i], sizeof ab.buf[i],
			      ab_cb, (void *)(intptr_t)i);
}

static void ab_cb(const px_completion *c)
{
	int i = (int)(intptr_t)c->user;

	atomic_fetch_add(&ab.done, 1);
	if (c->error || c->bytes == 0) {
		if (c->error != ECANCELED)  /* (px_destroy's) */
			atomic_fetch_add(&ab.errors, 1);
		return;
	}
	if (i == atomic_load(&ab.victim) &&
	    (ab.r2_mode == AB_R2_POST || ab.r2_mode == AB_R2_BLOCK)) {
		atomic_store(&ab.post_ns, now_ns());
		if (ab.r2_mode == AB_R2_POST && px_post(px, ab_r2_cb, NULL) < 0)
			atomic_fetch_add(&ab.errors, 1);
		atomic_store(&ab.in_block, 1);
		uint64_t dl = now_ns() + AB_BLOCK_MS * 1000000ull;
		while (!atomic_load(&ab.r2_calls) && now_ns() < dl)
			usleep(200);
		atomic_store(&ab.unblocked, 1);
		return;
	}
	if (i == atomic_load(&ab.victim)) {
		if (ab.r2_mode == AB_R2_CB &&
		    px_read_stream(px, ab.sv[i][0], ab.buf2, sizeof ab.buf2,
				   ab_r2_cb, NULL) < 0)
			atomic_fetch_add(&ab.errors, 1);
		ab.leaver = pthread_self();
		atomic_store_explicit(&ab.leave, 1, memory_order_release);
		return;
	}
	if (ab_read(i) < 0)
		atomic_fetch_add(&ab.errors, 1);
}

static void ab_r2_cb(const px_completion *c)
{
	ab.r2_bytes = c->bytes;
	ab.r2_error = c->error;
	atomic_store(&ab.r2_ns, now_ns());
	atomic_fetch_add(&ab.r2_calls, 1);
}

/* A loop thread; the one whose callback was the victim's parks, out of
 * px_handle_events, until the test ends. */
static void *ab_loop(void *arg)
{
	(void)arg;
	while (atomic_load(&ab.looping)) {
		if (atomic_load_explicit(&ab.leave, memory_order_acquire) &&
		    pthread_equal(ab.leaver, pthread_self())) {
			atomic_store(&ab.parked, 1);
			while (atomic_load(&ab.looping))
				usleep(1000);
			break;
		}
		if (px_handle_events(px, -1) < 0)
			break;
	}
	return NULL;
}

/* Each ring led by a thread of its own, both waiting in the kernel. */
static bool ab_two_leaders(void)
{
	px_uring *u = px_container_of(px->proc[0]->prov, px_uring, prov);
	bool ok;

	pthread_mutex_lock(&px->lock);
	ok = u->nrings == 2 && u->rings[0].led && u->rings[1].led &&
	     u->rings[0].waiting && u->rings[1].waiting &&
	     !u->rings[0].nextra && !u->rings[1].nextra;
	pthread_mutex_unlock(&px->lock);
	return ok;
}

/* Feed every session but the victim (index 0) for ms, then wait until
 * their reads have all called back. */
static void ab_feed(int ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
	do {
		long before = atomic_load(&ab.done);
		for (int i = 1; i < AB_SESS; i++)
			assert_int_equal(write(ab.sv[i][1], "x", 1), 1);
		uint64_t dl = now_ns() + 1000000000u;
		while (atomic_load(&ab.done) < before + AB_SESS - 1 &&
		       now_ns() < dl)
			usleep(100);
		assert_true(atomic_load(&ab.done) >= before + AB_SESS - 1);
	} while (now_ns() < end);
}

/* quiet_ms: how long nothing happens between the last traffic and the
 * read whose callback makes its thread leave (or, AB_R2_POST, post and
 * block).  Returns how late the read behind (the post) called back. */
static uint64_t ab_run(int quiet_ms, int r2_mode)
{
	char err[256];
	pthread_t th[2];

	memset(&ab, 0, sizeof ab);
	ab.r2_mode = r2_mode;
	atomic_store(&ab.victim, -1);
	assert_int_equal(px_create(&px, "uring rings=2", err, sizeof(err)), 0);
	for (int i = 0; i < AB_SESS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, ab.sv[i]), 0);
		assert_int_equal(ab_read(i), 0);
	}
	atomic_store(&ab.looping, true);
	for (int k = 0; k < 2; k++)
		assert_int_equal(pthread_create(&th[k], NULL, ab_loop, NULL), 0);
	/* Traffic until both threads lead a ring each (the usual outcome of
	 * the first round), then one more round so that both waits are
	 * fresh: the remaining thread's wait would not end on its own for
	 * about 200 ms (the idle check). */
	int tries = 0;
	bool two = false, missed = false;
	while (!two && tries++ < AB_TRIES) {
		ab_feed(40);
		usleep(10000);
		ab_feed(0);
		usleep(3000);
		two = ab_two_leaders();
	}
	uint64_t late_ns = 0;
	bool parked = false;
	int victim = 0;
	if (two && r2_mode != AB_R2_QUEUED && r2_mode != AB_R2_BLOCK) {
		/* Only two sessions stay, one in each ring; the others are
		 * cancelled.  The victim's ring then holds nothing but its
		 * read when that completes. */
		px_uring *u = px_container_of(px->proc[0]->prov, px_uring,
					      prov);
		int keep = -1;
		victim = -1;
		pthread_mutex_lock(&px->lock);
		for (int i = 1; i < AB_SESS; i++) {
			int r = px__uring_fd_ring(u, ab.sv[i][0]);
			if (r == 1 && victim < 0)
				victim = i;
			else if (r == 0 && keep < 0)
				keep = i;
		}
		pthread_mutex_unlock(&px->lock);
		if (victim < 0 || keep < 0) {
			two = false;
		} else {
			long before = atomic_load(&ab.done);
			int n = 0;
			for (int i = 0; i < AB_SESS; i++)
				if (i != victim && i != keep)
					n += px_cancel(px, ab.sv[i][0]);
			uint64_t dl = now_ns() + 1000000000u;
			while (atomic_load(&ab.done) < before + n &&
			       now_ns() < dl)
				usleep(100);
			usleep(5000);
			/* Both waits start again after the cancels; a slow
			 * build (TSan) may take a while to get there. */
			uint64_t dl2 = now_ns() + 1000000000u;
			while (!(two = ab_two_leaders()) && now_ns() < dl2)
				usleep(1000);
			missed = !two;
		}
	}
	if (two) {
		usleep((useconds_t)quiet_ms * 1000u);
		/* The victim's read completes; its thread leaves the loop.
		 * The read queued behind it is its ring's next request. */
		atomic_store(&ab.victim, victim);
		if (r2_mode == AB_R2_QUEUED || r2_mode == AB_R2_BLOCK)
			assert_int_equal(px_read_stream(px, ab.sv[0][0], ab.buf2,
							sizeof ab.buf2,
							ab_r2_cb, NULL), 0);
		assert_int_equal(write(ab.sv[victim][1], "1", 1), 1);
		uint64_t dl = now_ns() + 2000000000u;
		if (r2_mode == AB_R2_POST) {
			dl += AB_BLOCK_MS * 1000000ull;
			while (!(parked = atomic_load(&ab.unblocked)) &&
			       now_ns() < dl)
				usleep(100);
			if (atomic_load(&ab.r2_calls))
				late_ns = atomic_load(&ab.r2_ns) -
					  atomic_load(&ab.post_ns);
			goto ended;
		}
		if (r2_mode == AB_R2_BLOCK) {
			/* The victim's callback blocks; the read behind
			 * gets its data. */
			while (!atomic_load(&ab.in_block) && now_ns() < dl)
				usleep(100);
			uint64_t t0 = now_ns();
			assert_int_equal(write(ab.sv[victim][1], "2", 1), 1);
			dl = t0 + 2000000000u + AB_BLOCK_MS * 1000000ull;
			while (!(parked = atomic_load(&ab.unblocked)) &&
			       now_ns() < dl)
				usleep(100);
			if (atomic_load(&ab.r2_calls))
				late_ns = atomic_load(&ab.r2_ns) - t0;
			goto ended;
		}
		while (!(parked = atomic_load(&ab.parked)) && now_ns() < dl)
			usleep(100);
		uint64_t t0 = now_ns();
		if (r2_mode == AB_R2_OUTSIDE)
			assert_int_equal(px_read_stream(px, ab.sv[victim][0],
							ab.buf2,
							sizeof ab.buf2,
							ab_r2_cb, NULL), 0);
		assert_int_equal(write(ab.sv[victim][1], "2", 1), 1);
		dl = t0 + 3000000000u;
		while (!atomic_load(&ab.r2_calls) && now_ns() < dl)
			usleep(100);
		if (atomic_load(&ab.r2_calls))
			late_ns = atomic_load(&ab.r2_ns) - t0;
	}
ended:
	atomic_store(&ab.looping, false);
	px_stop(px);
	for (int k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	for (int i = 0; i < AB_SESS; i++) {
		close(ab.sv[i][0]);
		close(ab.sv[i][1]);
	}
	if (missed) {
		/* The state this case is about was not reached: nothing was
		 * checked, and the test says so. */
		printf("abandoned ring: after the cancels the two loop threads "
		       "did not lead a ring each within 1 s: skipped\n");
		skip();
	}
	if (!two)
		fail_msg("after %d rounds of traffic the two loop threads did "
			 "not lead a ring each", AB_TRIES);
	if (r2_mode == AB_R2_POST || r2_mode == AB_R2_BLOCK) {
		printf("two ring leaders, %d ms quiet: set up in %d round(s); "
		       "the %s ran %.1f ms after %s\n", quiet_ms, tries,
		       r2_mode == AB_R2_POST ? "post from the blocked callback"
					     : "read behind the blocked callback's",
		       (double)late_ns / 1e6,
		       r2_mode == AB_R2_POST ? "it was made" : "its data");
		if (!parked)
			fail_msg("the victim's callback did not return");
		assert_int_equal(atomic_load(&ab.r2_calls), 1);
		assert_int_equal(ab.r2_error, 0);
		assert_int_equal(ab.r2_bytes, r2_mode == AB_R2_POST ? 0 : 1);
		assert_int_equal(atomic_load(&ab.errors), 0);
		return late_ns;
	}
	printf("abandoned ring, %d ms quiet: set up in %d round(s); the "
	       "queued read completed %.1f ms after its data\n", quiet_ms,
	       tries, (double)late_ns / 1e6);
	if (!parked)
		fail_msg("the thread that ran the victim's callback did not "
			 "leave the loop");
	assert_int_equal(atomic_load(&ab.r2_calls), 1);
	assert_int_equal(ab.r2_error, 0);
	assert_int_equal(ab.r2_bytes, 1);
	assert_int_equal(atomic_load(&ab.errors), 0);
	if (late_ns > (uint64_t)AB_LATE_MS * 1000000u)
		fail_msg("the read queued in the ring of the thread that left "
			 "completed %.1f ms after its data (at most %d ms): the "
			 "thread waiting on the other ring did not take that "
			 "ring over", (double)late_ns / 1e6, AB_LATE_MS);
	return late_ns;
}

/* Right after traffic: the waiting thread's watch is short. */
static void abandoned_ring_is_taken_over(void **state)
{
	(void)state;
	ab_run(0, AB_R2_QUEUED);
}

/* After AB_QUIET_MS without traffic the waiting thread's watch has grown
 * (its wait then ends about 170 ms after the read's data; before the
 * watch, its idle check ended it about 350 ms after): the thread that
 * lets its ring go must wake it. */
#define AB_QUIET_MS 450
static void abandoned_ring_after_a_quiet_spell(void **state)
{
	(void)state;
	ab_run(AB_QUIET_MS, AB_R2_QUEUED);
}

/* The same, but the read behind the victim's is started by the victim's
 * callback (into its ring: a start from a callback wakes nobody), and
 * that ring holds nothing else: the lead that reaped the victim's read
 * let go of a ring without work, and the thread then left with the new
 * read in it.  Sessions but the victim and one in the other ring are
 * cancelled first, so that the other thread still leads a ring of its
 * own.  After a quiet spell, whose waits grew the other leader's watch. */
static void ring_left_with_a_callbacks_start(void **state)
{
	(void)state;
	ab_run(AB_QUIET_MS, AB_R2_CB);
}

/* The same, the read behind the victim's started right after its thread
 * left, from outside the loop (the main thread, which never led: into
 * the descriptor's ring), within the orphan delay of that ring's last
 * lead. */
static void ring_left_then_an_outside_start(void **state)
{
	(void)state;
	ab_run(AB_QUIET_MS, AB_R2_OUTSIDE);
}

/* Two threads each leading a ring, both waiting; after PB2_QUIET_MS the
 * victim's read completes, and its callback posts and then waits (up to
 * AB_BLOCK_MS) for the post's callback.  The thread still waiting on the
 * other ring must run the post within AB_LATE_MS, in one of three
 * rounds.  A post from a callback with no follower asleep interrupts a
 * shared leader whose wait lasts long (fixed problem 102), known by the
 * processor's wait_end; with two leaders, the end of the victim's wait
 * set it to "nobody waits", and the other leader, whose watch had grown
 * in the quiet, was left to its wait: the post ran 100 to 1000 ms late
 * (a helper's review of 2026-12-07, the dispatcher changes of 272-274,
 * second look). */
#define PB2_QUIET_MS 1200
static void ab_late_rounds(int quiet_ms, int r2_mode, const char *what)
{
	uint64_t late[3];
	int round;

	for (round = 0; round < 3; round++) {
		late[round] = ab_run(quiet_ms, r2_mode);
		if (late[round] <= (uint64_t)AB_LATE_MS * 1000000u)
			break;
	}
	if (round == 3)
		fail_msg("%s ran %.1f, %.1f and %.1f ms late while another "
			 "thread waited on the other ring (at most %d ms)", what,
			 (double)late[0] / 1e6, (double)late[1] / 1e6,
			 (double)late[2] / 1e6, AB_LATE_MS);
}

static void post_from_blocked_callback_beside_other_ring(void **state)
{
	(void)state;
	ab_late_rounds(PB2_QUIET_MS, AB_R2_POST,
		       "a post from a callback that then blocked");
}

/* As abandoned_ring_after_a_quiet_spell, but the victim's thread stays
 * in its callback, which waits (up to AB_BLOCK_MS) for the read queued
 * behind: the ring is left unled by a thread blocked in a callback while
 * the other thread leads the other ring (the case TESTING.md left open
 * after fixed problem 272).  The read behind must complete within
 * AB_LATE_MS of its data, in one of three rounds. */
static void ring_left_by_blocked_callback(void **state)
{
	(void)state;
	ab_late_rounds(AB_QUIET_MS, AB_R2_BLOCK,
		       "a read queued behind a callback that blocked");
}

/* ------------------------------------------------------------------ */
/* The team's lone thread                                               */
/* ------------------------------------------------------------------ */

#define TEAM "provider=uring ops=file ; secondary: provider=select wait=epoll"
#define LONE_READS 500
#define LONE_BLOCK 4096

typedef struct lone_rec {
	atomic_int calls;
	int error;
	size_t bytes;
} lone_rec;

static void lone_rec_cb(const px_completion *c)
{
	lone_rec *r = c->user;

	r->error = c->error;
	r->bytes = c->bytes;
	atomic_fetch_add(&r->calls, 1);
}

/* A scratch file of blocks * LONE_BLOCK bytes, block i filled with i+1. */
static int lone_file(int blocks)
{
	char path[] = "/tmp/px_uring_lone_XXXXXX";
	uint8_t b[LONE_BLOCK];
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	for (int i = 0; i < blocks; i++) {
		memset(b, i + 1, sizeof(b));
		assert_int_equal(pwrite(fd, b, sizeof(b), (off_t)i * LONE_BLOCK),
				 LONE_BLOCK);
	}
	return fd;
}

/* Whether fd polls readable within ms (a wake-up by task work is no
 * answer: poll again). */
static bool polls_in(int fd, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = (int)(end - now_ms());
		int rc = poll(&p, 1, left > 0 ? left : 0);
		if (rc > 0)
			return true;
		if ((rc == 0 || errno != EINTR) || now_ms() >= end)
			return false;
	}
}

static void ready_fd_polls_for_a_lead(void **state)
{
	(void)state;
	char err[256];
	px_proactor *t;
	lone_rec r = { 0 };
	uint8_t buf[LONE_BLOCK];
	int file = lone_file(2), fd, fd2;

	assert_int_equal(px_create(&t, TEAM, err, sizeof(err)), 0);
	assert_int_equal(t->nproc, 2);
	px_wait *w = t->proc[0]->wait;
	assert_non_null(w->ops->ready_fd);
	pthread_mutex_lock(&t->lock);
	fd = w->ops->ready_fd(w);
	pthread_mutex_unlock(&t->lock);
	assert_true(fd >= 0);
	assert_false(polls_in(fd, 0));
	/* No thread leads: the read waits in the ring until somebody
	 * submits it.  Asking for the descriptor does. */
	assert_int_equal(px_read_file(t, file, buf, sizeof(buf), LONE_BLOCK,
				      lone_rec_cb, &r), 0);
	pthread_mutex_lock(&t->lock);
	fd2 = w->ops->ready_fd(w);
	pthread_mutex_unlock(&t->lock);
	assert_int_equal(fd2, fd);
	if (!polls_in(fd, 5000))
		fail_msg("the ready descriptor did not poll readable for a "
			 "posted CQE");
	assert_int_equal(atomic_load(&r.calls), 0);
	for (int i = 0; i < 100 && atomic_load(&r.calls) == 0; i++)
		px_handle_events(t, 50);
	assert_int_equal(atomic_load(&r.calls), 1);
	assert_int_equal(r.error, 0);
	assert_int_equal(r.bytes, LONE_BLOCK);
	for (int i = 0; i < LONE_BLOCK; i++)
		assert_int_equal(buf[i], 2);
	/* Reaped by a lead that emptied it first: nothing to do now. */
	assert_false(polls_in(fd, 0));
	assert_int_equal(px_destroy(t), 0);
	close(file);
}

typedef struct lone_chain {
	px_proactor *px;
	int file, done, bad;
	uint8_t buf[LONE_BLOCK];
} lone_chain;

static void lone_chain_cb(const px_completion *c)
{
	lone_chain *l = c->user;
	int block = l->done % 4;

	if (c->error || c->bytes != LONE_BLOCK || l->buf[0] != block + 1 ||
	    l->buf[LONE_BLOCK - 1] != block + 1) {
		l->bad++;
		return;
	}
	if (++l->done < LONE_READS &&
	    px_read_file(l->px, l->file, l->buf, LONE_BLOCK,
			 (uint64_t)(l->done % 4) * LONE_BLOCK, lone_chain_cb,
			 l) < 0)
		l->bad++;
}

static void file_chain_beside_idle_read_one_thread(void **state)
{
	(void)state;
	char err[256];
	lone_chain l = { 0 };
	lone_rec idle = { 0 };
	int sv[2];
	char byte;

	assert_int_equal(px_create(&l.px, TEAM, err, sizeof(err)), 0);
	l.file = lone_file(4);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	assert_int_equal(px_read_stream(l.px, sv[0], &byte, 1, lone_rec_cb,
					&idle), 0);
	assert_int_equal(px_read_file(l.px, l.file, l.buf, LONE_BLOCK, 0,
				      lone_chain_cb, &l), 0);
	uint64_t end = now_ms() + 30000;
	while (l.done < LONE_READS && !l.bad && now_ms() < end)
		px_handle_events(l.px, 100);
	if (l.bad || l.done < LONE_READS)
		fail_msg("file chain: %d reads done, %d bad", l.done, l.bad);
	assert_int_equal(atomic_load(&idle.calls), 0);
	assert_int_equal(px_cancel(l.px, sv[0]), 1);
	for (int i = 0; i < 100 && atomic_load(&idle.calls) == 0; i++)
		px_handle_events(l.px, 50);
	assert_int_equal(atomic_load(&idle.calls), 1);
	assert_int_equal(idle.error, ECANCELED);
	assert_int_equal(px_destroy(l.px), 0);
	close(sv[0]);
	close(sv[1]);
	close(l.file);
}

/* The number of the secondary's epoll instance's entry for fd in
 * /proc/self/fdinfo (its "tfd:" lines), and its events mask, or -1. */
static long epoll_entry_events(int epfd, int fd)
{
	char path[64], line[256];
	long events = -1;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp)) {
		int tfd;
		unsigned ev;
		if (sscanf(line, "tfd: %d events: %x", &tfd, &ev) == 2 && tfd == fd)
			events = (long)ev;
	}
	fclose(fp);
	return events;
}

static void lone_spin(px_proactor *t, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end)
		px_handle_events(t, 20);
}

/*
 * The ready eventfd replaced with dup2(2) by an eventfd of the
 * application's (count 5) while one thread leads the team alone, a file
 * read of a pipe pending on io_uring and an idle socket read on epoll
 * (each lead of io_uring drains the ready eventfd; the epoll wait watches
 * it): after 1.5 s of that loop (the idle check has come), the
 * application sets its count to 7, and for the next 0.5 s, then while
 * both reads get their data and 0.2 s more, the library neither reads nor
 * writes it: it still counts 7.  ready_fd answers -1 from then on, and
 * both reads end once with their data, the secondary's epoll instance
 * holds no armed entry for the number, and px_destroy leaves the
 * application's eventfd open.  Before, each prepare's drain read the
 * application's count and ready_fd's writes added 1 to it (TESTING.md,
 * fixed problem 328).
 */
static void ready_fd_replaced_on(const char *team)
{
	char err[256];
	px_proactor *t;
	lone_rec rf = { 0 }, rs = { 0 };
	uint8_t fbuf[16], sbuf[16];
	int p[2], sv[2];

	assert_int_equal(px_create(&t, team, err, sizeof(err)), 0);
	assert_int_equal(t->nproc, 2);
	px_wait *w = t->proc[0]->wait, *w2 = t->proc[1]->wait;
	px_uring *u = px_uring_of_wait(w);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	assert_int_equal(px_read_stream(t, sv[0], sbuf, sizeof(sbuf),
					lone_rec_cb, &rs), 0);
	assert_int_equal(px_read_file(t, p[0], fbuf, sizeof(fbuf), 0,
				      lone_rec_cb, &rf), 0);
	lone_spin(t, 200);
	pthread_mutex_lock(&t->lock);
	int ready = u->ready_efd;
	int epfd = w2->ops->ready_fd ? w2->ops->ready_fd(w2) : -1;
	pthread_mutex_unlock(&t->lock);
	if (ready < 0)
		fail_msg("the lone thread never asked for the ready eventfd");
	int app = eventfd(5, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(app >= 0);
	assert_int_equal(dup2(app, ready), ready);
	lone_spin(t, 1500);
	uint64_t v = 0, seven = 7;
	(void)!read(app, &v, sizeof(v));
	assert_int_equal(write(app, &seven, sizeof(seven)), sizeof(seven));
	lone_spin(t, 500);
	assert_int_equal(write(p[1], "file", 4), 4);
	assert_int_equal(write(sv[1], "sock", 4), 4);
	uint64_t end = now_ms() + 3000;
	while ((!atomic_load(&rf.calls) || !atomic_load(&rs.calls)) &&
	       now_ms() < end)
		px_handle_events(t, 20);
	lone_spin(t, 200);
	v = 0;
	ssize_t got = read(app, &v, sizeof(v));
	pthread_mutex_lock(&t->lock);
	int later = w->ops->ready_fd(w);
	pthread_mutex_unlock(&t->lock);
	long ev = epfd >= 0 ? epoll_entry_events(epfd, ready) : -1;
	printf("# %s: ready eventfd %d replaced: the application's count %lld "
	       "(7 set), ready_fd %d; the epoll instance's entry for it: %lx\n",
	       team, ready, got > 0 ? (long long)v : -1LL, later, ev);
	if (got != sizeof(v) || v != 7)
		fail_msg("the application's eventfd under the ready eventfd's "
			 "number %d counted %lld after the idle check where the "
			 "application had set 7", ready,
			 got > 0 ? (long long)v : -1LL);
	if (later != -1)
		fail_msg("ready_fd gave %d after the idle check, its eventfd "
			 "replaced", later);
	/* The secondary's epoll wait watches the number no more: no entry
	 * for it, or one a one-shot report has disarmed. */
	if (ev >= 0 && (ev & EPOLLIN))
		fail_msg("the secondary's epoll instance still watches the "
			 "ready eventfd's number %d (events %lx)", ready, ev);
	assert_int_equal(atomic_load(&rf.calls), 1);
	assert_int_equal(rf.error, 0);
	assert_int_equal(rf.bytes, 4);
	assert_memory_equal(fbuf, "file", 4);
	assert_int_equal(atomic_load(&rs.calls), 1);
	assert_int_equal(rs.error, 0);
	assert_int_equal(rs.bytes, 4);
	assert_memory_equal(sbuf, "sock", 4);
	assert_int_equal(px_destroy(t), 0);
	assert_true(fcntl(ready, F_GETFD) >= 0);  /* still the application's */
	close(ready);
	close(app);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void ready_fd_replaced_by_apps_eventfd(void **state)
{
	(void)state;
	ready_fd_replaced_on(TEAM);
	/* One ring, its SQ polled by the kernel's thread. */
	ready_fd_replaced_on("provider=uring rings=1 ring_flags=sqpoll ops=file ; "
			     "secondary: provider=select wait=epoll");
}

/* The ready eventfd made (ready_fd asked as the dispatcher does), then
 * replaced with dup2(2) by an eventfd of the test's with a count of 3, a
 * file read of a pipe pending, and px_destroy at once, before any idle
 * check: the read ends once with ECANCELED, and the test's eventfd is
 * still under the number with its count.  px_destroy's lead, which ends
 * the read, drained the number in its prepare and took the count (it
 * never closed it: px__own_close_id, TESTING.md, fixed problem 310); it
 * now makes the wait's idle check first (fixed problem 328). */
static void ready_fd_replaced_then_destroy(void **state)
{
	(void)state;
	char err[256];
	px_proactor *t;
	lone_rec rf = { 0 };
	uint8_t fbuf[16];
	int p[2];

	assert_int_equal(px_create(&t, TEAM, err, sizeof(err)), 0);
	px_wait *w = t->proc[0]->wait;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(px_read_file(t, p[0], fbuf, sizeof(fbuf), 0,
				      lone_rec_cb, &rf), 0);
	pthread_mutex_lock(&t->lock);
	int ready = w->ops->ready_fd(w);
	pthread_mutex_unlock(&t->lock);
	assert_true(ready >= 0);
	int app = eventfd(3, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(app >= 0);
	assert_int_equal(dup2(app, ready), ready);
	assert_int_equal(px_destroy(t), 0);
	assert_int_equal(atomic_load(&rf.calls), 1);
	assert_int_equal(rf.error, ECANCELED);
	uint64_t v = 0;
	ssize_t got = read(ready, &v, sizeof(v));
	if (got != (ssize_t)sizeof(v) || v != 3)
		fail_msg("the application's eventfd under the ready eventfd's "
			 "number %d after px_destroy: read %zd, count %llu where "
			 "the application had set 3", ready, got,
			 (unsigned long long)v);
	close(ready);
	close(app);
	close(p[0]);
	close(p[1]);
}

#define CHURN_CHAINS 8

typedef struct churn {
	px_proactor *px;
	int file;
	long started, called, bad, cancelled;
	struct churn_slot {
		struct churn *c;
		int n;
		uint8_t buf[LONE_BLOCK];
	} slot[CHURN_CHAINS];
} churn;

static void churn_cb(const px_completion *c);

static int churn_start(struct churn_slot *s)
{
	int rc = px_read_file(s->c->px, s->c->file, s->buf, LONE_BLOCK,
			      (uint64_t)(s->n % 4) * LONE_BLOCK, churn_cb, s);
	if (rc == 0)
		s->c->started++;
	return rc;
}

static void churn_cb(const px_completion *c)
{
	struct churn_slot *s = c->user;
	int block = s->n % 4;

	s->c->called++;
	if (c->error == ECANCELED) {
		s->c->cancelled++;
		return;
	}
	if (c->error || c->bytes != LONE_BLOCK || s->buf[0] != block + 1 ||
	    s->buf[LONE_BLOCK - 1] != block + 1) {
		s->c->bad++;
		return;
	}
	s->n++;
	/* Starts from px_destroy's own callbacks fail with ESHUTDOWN. */
	int rc = churn_start(s);
	if (rc < 0 && rc != -ESHUTDOWN)
		s->c->bad++;
}

static void team_churn_then_destroy(void **state)
{
	(void)state;
	char err[256];
	churn c = { 0 };
	lone_rec idle[6] = { 0 }, closed[6] = { 0 };
	int sv[6][2];
	char byte[6];

	assert_int_equal(px_create(&c.px, TEAM, err, sizeof(err)), 0);
	c.file = lone_file(4);
	for (int i = 0; i < CHURN_CHAINS; i++) {
		c.slot[i].c = &c;
		c.slot[i].n = i;
		assert_int_equal(churn_start(&c.slot[i]), 0);
	}
	for (int k = 0; k < 6; k++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[k]), 0);
		assert_int_equal(px_read_stream(c.px, sv[k][0], &byte[k], 1,
						lone_rec_cb, &idle[k]), 0);
		for (int i = 0; i < 20; i++)
			px_handle_events(c.px, 5);
		if (k == 5)
			break;   /* the last one stays for px_destroy */
		/* Cancelled while the chains run, then closed (px_close), its
		 * callback run before the next socket's read starts. */
		if (k % 2)
			assert_int_equal(px_cancel(c.px, sv[k][0]), 1);
		else
			assert_int_equal(px_close(c.px, sv[k][0], lone_rec_cb,
						  &closed[k]), 0);
		for (int i = 0; i < 200 && (atomic_load(&idle[k].calls) == 0 ||
					    (k % 2 == 0 &&
					     atomic_load(&closed[k].calls) == 0));
		     i++)
			px_handle_events(c.px, 5);
		assert_int_equal(atomic_load(&idle[k].calls), 1);
		assert_int_equal(idle[k].error, ECANCELED);
		if (k % 2 == 0) {
			assert_int_equal(atomic_load(&closed[k].calls), 1);
			assert_int_equal(closed[k].error, 0);
		}
		if (k % 2)
			close(sv[k][0]);
		close(sv[k][1]);
	}
	assert_true(c.called > CHURN_CHAINS);
	/* Reads of both kinds in flight; px_destroy's callbacks restart the
	 * chains and are refused (ESHUTDOWN). */
	assert_int_equal(px_destroy(c.px), 0);
	assert_int_equal(c.bad, 0);
	assert_int_equal(c.called, c.started);
	assert_int_equal(atomic_load(&idle[5].calls), 1);
	assert_int_equal(idle[5].error, ECANCELED);
	for (int k = 0; k < 5; k++)
		assert_int_equal(atomic_load(&idle[k].calls), 1);
	close(sv[5][0]);
	close(sv[5][1]);
	close(c.file);
	printf("team churn: %ld file reads, %ld of them cancelled by px_destroy\n",
	       c.called, c.cancelled);
}

/* ------------------------------------------------------------------ */
/* A post from a thread whose lead ended interrupts the leader left     */
/* ------------------------------------------------------------------ */

/* "uring rings=2": thread A leads in px_handle_events(px, -1) (200 reads
 * without data keep the rings busy).  The main thread B leads the other
 * ring for px_handle_events(px, 5), returns, and posts from outside the
 * loop: A must be interrupted and run the post at once.  Before, the
 * processor took B for its leader as long as B was the last thread to
 * begin a lead, so B's post interrupted nobody and waited for A's next
 * bound (13 to 17 ms, 25 of 60 posts over SL_LATE_MS).  With the fix
 * every post took under 2 ms.  A round of SL_POSTS posts fails when
 * SL_MAX_LATE or more are late; three failed rounds fail the test. */
#define SL_PAIRS 200
#define SL_POSTS 60
#define SL_LATE_MS 8
#define SL_MAX_LATE 6

static struct {
	px_proactor *px;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int ran;
	atomic_bool done;
} sl = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void sl_post_cb(const px_completion *c)
{
	(void)c;
	pthread_mutex_lock(&sl.m);
	sl.ran = 1;
	pthread_cond_broadcast(&sl.cv);
	pthread_mutex_unlock(&sl.m);
}

static void sl_read_cb(const px_completion *c)
{
	(void)c;
}

static void *sl_loop(void *arg)
{
	(void)arg;
	while (!atomic_load(&sl.done))
		if (px_handle_events(sl.px, -1) == -ESHUTDOWN)
			break;
	return NULL;
}

/* Posts from the main thread after each of its leads: how many late. */
static int sl_round(void)
{
	int late = 0;

	for (int i = 0; i < SL_POSTS; i++) {
		px_handle_events(sl.px, 5);  /* lead the other ring a while */
		usleep(2000);
		pthread_mutex_lock(&sl.m);
		sl.ran = 0;
		pthread_mutex_unlock(&sl.m);
		uint64_t t0 = now_ns();
		assert_int_equal(px_post(sl.px, sl_post_cb, NULL), 0);
		pthread_mutex_lock(&sl.m);
		while (!sl.ran)
			pthread_cond_wait(&sl.cv, &sl.m);
		pthread_mutex_unlock(&sl.m);
		if (now_ns() - t0 > SL_LATE_MS * 1000000ull)
			late++;
	}
	return late;
}

static void post_after_own_lead_interrupts(void **state)
{
	(void)state;
	char err[256];
	int sv[SL_PAIRS][2];
	char buf[SL_PAIRS][8];
	pthread_t a;

	assert_int_equal(px_create(&sl.px, "uring rings=2", err, sizeof(err)), 0);
	for (int i = 0; i < SL_PAIRS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[i]), 0);
		assert_int_equal(px_read_stream(sl.px, sv[i][0], buf[i], 8,
						sl_read_cb, NULL), 0);
	}
	atomic_store(&sl.done, false);
	assert_int_equal(pthread_create(&a, NULL, sl_loop, NULL), 0);
	int late[3], round;
	for (round = 0; round < 3; round++) {
		late[round] = sl_round();
		printf("round %d: %d of %d posts more than %d ms late\n",
		       round + 1, late[round], SL_POSTS, SL_LATE_MS);
		if (late[round] < SL_MAX_LATE)
			break;
	}
	atomic_store(&sl.done, true);
	px_stop(sl.px);
	pthread_join(a, NULL);
	assert_int_equal(px_destroy(sl.px), 0);
	for (int i = 0; i < SL_PAIRS; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
	if (round == 3)
		fail_msg("posts made after the poster's own lead ran more than "
			 "%d ms late: %d, %d and %d of %d in three rounds (the "
			 "other thread leading was not interrupted)", SL_LATE_MS,
			 late[0], late[1], late[2], SL_POSTS);
}

/* team_outside_file_reads_two_threads: the TEAM engine (io_uring for
 * files, epoll for sockets), two loop threads in px_handle_events(-1), a
 * socket read idle in the epoll part and a file read pending on an empty
 * pipe in the io_uring part.  The test thread, outside the loop, reads a
 * file block after block (O_DIRECT where the file system takes it), each
 * started when the one before has called back: the median of their
 * latencies must stay under OT_MEDIAN_MS.  Before, each waited 20-40 ms:
 * a thread leading the epoll part counted as "busy" for the io_uring
 * part (px->nleaders, all processors), whose may_lead then refused a
 * ring released less than 1 ms ago, and the spare thread slept out a
 * follower's check (20 ms) instead of leading it (fixed problem 63).  The
 * median keeps a load spike of the machine from failing it; the fault
 * made every read wait (median 38 ms), when the reads began as the loop
 * threads started: begun 50 ms later, they found the threads settled in a
 * way the fault spared. */
#define OT_READS 41
#define OT_MEDIAN_MS 10

static atomic_bool ot_looping;
static px_proactor *ot_px;

static void *ot_loop(void *arg)
{
	(void)arg;
	while (atomic_load(&ot_looping))
		if (px_handle_events(ot_px, -1) < 0)
			break;
	return NULL;
}

static int ot_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void team_outside_file_reads_two_threads(void **state)
{
	(void)state;
	char err[256], path[] = "/tmp/px_uring_ot_XXXXXX";
	static uint8_t blk[4096] __attribute__((aligned(4096)));
	static uint8_t idle_b[64], pipe_b[64];
	lone_rec idle = {0}, piped = {0};
	uint64_t lat[OT_READS];
	pthread_t th[2];
	int sv[2], pp[2];

	int wfd = mkstemp(path);
	assert_true(wfd >= 0);
	memset(blk, 7, sizeof(blk));
	for (int i = 0; i < 64; i++)
		assert_int_equal(pwrite(wfd, blk, sizeof(blk), (off_t)i * 4096),
				 4096);
	assert_int_equal(fsync(wfd), 0);
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	unlink(path);
	close(wfd);

	assert_int_equal(px_create(&ot_px, TEAM, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	assert_int_equal(px_read_stream(ot_px, sv[0], idle_b, sizeof(idle_b),
					lone_rec_cb, &idle), 0);
	assert_int_equal(px_read_file(ot_px, pp[0], pipe_b, sizeof(pipe_b), 0,
				      lone_rec_cb, &piped), 0);
	atomic_store(&ot_looping, true);
	for (int t = 0; t < 2; t++)
		assert_int_equal(pthread_create(&th[t], NULL, ot_loop, NULL), 0);
	for (int i = 0; i < OT_READS; i++) {
		lone_rec r = {0};
		uint64_t t0 = now_ns();
		assert_int_equal(px_read_file(ot_px, fd, blk, sizeof(blk),
					      (uint64_t)(i % 64) * 4096,
					      lone_rec_cb, &r), 0);
		while (atomic_load(&r.calls) == 0) {
			assert_true(now_ns() - t0 < 5000000000u);
			usleep(50);
		}
		lat[i] = now_ns() - t0;
		assert_int_equal(r.error, 0);
		assert_int_equal(r.bytes, sizeof(blk));
		usleep(500 + (unsigned)(i % 7) * 300);
	}
	atomic_store(&ot_looping, false);
	px_stop(ot_px);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	px_destroy(ot_px);
	assert_int_equal(atomic_load(&idle.calls), 1);
	assert_int_equal(atomic_load(&piped.calls), 1);
	close(fd);
	close(sv[0]);
	close(sv[1]);
	close(pp[0]);
	close(pp[1]);
	qsort(lat, OT_READS, sizeof(lat[0]), ot_cmp);
	printf("outside file reads on the team, two loop threads: median "
	       "%.2f ms, highest %.2f ms\n", (double)lat[OT_READS / 2] / 1e6,
	       (double)lat[OT_READS - 1] / 1e6);
	if (lat[OT_READS / 2] >= (uint64_t)OT_MEDIAN_MS * 1000000u)
		fail_msg("a file read started outside the loop took %.1f ms "
			 "(median of %d) to call back, with two loop threads "
			 "and both parts of the team holding work",
			 (double)lat[OT_READS / 2] / 1e6, OT_READS);
}

/* ------------------------------------------------------------------ */
/* A result queued within 20 ms of an interrupt to the other part's     */
/* leader                                                              */
/* ------------------------------------------------------------------ */

/* The TEAM engine with three loop threads in px_handle_events(px, -1): a
 * file read on an empty pipe keeps one thread waiting in the io_uring
 * part, a read on a quiet socket another in the epoll part, and the
 * third sleeps.  After IS_QUIET_MS a post from outside wakes the sleeper,
 * whose callback C writes X to a socket with room (the epoll part makes
 * the send inside the start, and queues X for C's thread:
 * PX_NOTIFY_CALLER), waits until X's callback runs on another thread,
 * then writes Y the same way and waits for Y's callback.  X's callback
 * waits for Y's too.  X's result interrupted one leader (disp_insure),
 * which ran X; Y came within 20 ms of that interrupt, and the other
 * leader, whose wait had begun long before, must still be told: C's and
 * X's threads both wait for Y.  Before, disp_insure sent no interrupt
 * within 20 ms of the last one, counting on the thread it had
 * interrupted to look again, and Y waited for the other leader's wait to
 * end, up to the processor's idle check (a helper's review of
 * 2026-12-07, the dispatcher changes of 272-274, second look).  Y must
 * call back within IS_LATE_MS, in one of three rounds. */
#define IS_QUIET_MS 700
#define IS_WAIT_MS 3000
#define IS_LATE_MS 150
#define IS_WARM 40

static struct {
	px_proactor *px;
	int sv[2];               /* X and Y: writes on sv[0] */
	bool x_leaves;           /* X's thread leaves the loop, not waits */
	pthread_t leaver;        /* written before leave is set (release) */
	atomic_int leave, parked, stop;
	atomic_int warm, x_in, y_done, c_done, bad;
	atomic_ullong y_start_ns, y_ns;
	int x_error, y_error;
	size_t x_bytes, y_bytes;
} is;

static bool is_wait_for(atomic_int *flag, int ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	while (!atomic_load(flag)) {
		if (now_ns() > end)
			return false;
		usleep(200);
	}
	return true;
}

static void is_warm_cb(const px_completion *c)
{
	(void)c;
	atomic_fetch_add(&is.warm, 1);
}

static void is_y_cb(const px_completion *c)
{
	is.y_error = c->error;
	is.y_bytes = c->bytes;
	atomic_store(&is.y_ns, now_ns());
	atomic_store(&is.y_done, 1);
}

static void is_x_cb(const px_completion *c)
{
	is.x_error = c->error;
	is.x_bytes = c->bytes;
	if (is.x_leaves) {
		is.leaver = pthread_self();
		atomic_store_explicit(&is.leave, 1, memory_order_release);
		atomic_store(&is.x_in, 1);
		return;
	}
	atomic_store(&is.x_in, 1);
	if (!is_wait_for(&is.y_done, IS_WAIT_MS))
		atomic_store(&is.bad, 1);
}

static void is_c_cb(const px_completion *c)
{
	(void)c;
	/* (A thread that leaves must be gone: before, it would run Y.) */
	if (px_write_stream(is.px, is.sv[0], "x", 1, is_x_cb, NULL) ||
	    !is_wait_for(is.x_leaves ? &is.parked : &is.x_in, IS_WAIT_MS)) {
		atomic_store(&is.bad, 1);
		atomic_store(&is.c_done, 1);
		return;
	}
	atomic_store(&is.y_start_ns, now_ns());
	if (px_write_stream(is.px, is.sv[0], "y", 1, is_y_cb, NULL) ||
	    !is_wait_for(&is.y_done, IS_WAIT_MS))
		atomic_store(&is.bad, 1);
	atomic_store(&is.c_done, 1);
}

static void *is_loop(void *arg)
{
	(void)arg;
	for (;;) {
		if (atomic_load_explicit(&is.leave, memory_order_acquire) &&
		    pthread_equal(is.leaver, pthread_self())) {
			atomic_store(&is.parked, 1);
			while (!atomic_load(&is.stop))
				usleep(1000);
			break;
		}
		if (px_handle_events(is.px, -1) < 0)
			break;
	}
	return NULL;
}

/* One round: how late Y called back (ms), or -1 if it never did. */
static long is_round(bool x_leaves)
{
	char err[256], idle_b[8], pipe_b[8], got[2];
	lone_rec idle = { 0 }, piped = { 0 };
	pthread_t th[3];
	int sv[2], pp[2];

	memset(&is, 0, sizeof is);
	is.x_leaves = x_leaves;
	assert_int_equal(px_create(&is.px, TEAM, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    is.sv), 0);
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	assert_int_equal(px_read_stream(is.px, sv[0], idle_b, sizeof(idle_b),
					lone_rec_cb, &idle), 0);
	assert_int_equal(px_read_file(is.px, pp[0], pipe_b, sizeof(pipe_b), 0,
				      lone_rec_cb, &piped), 0);
	for (int t = 0; t < 3; t++)
		assert_int_equal(pthread_create(&th[t], NULL, is_loop, NULL), 0);
	/* Callbacks measured cheap: a result finished within its start is
	 * then queued for its caller (before, it is worth help). */
	for (int i = 0; i < IS_WARM; i++) {
		assert_int_equal(px_post(is.px, is_warm_cb, NULL), 0);
		if (i % 8 == 7)
			usleep(1000);
	}
	uint64_t dl = now_ns() + (uint64_t)IS_WAIT_MS * 1000000u;
	while (atomic_load(&is.warm) < IS_WARM && now_ns() < dl)
		usleep(1000);
	assert_int_equal(atomic_load(&is.warm), IS_WARM);
	usleep(IS_QUIET_MS * 1000);
	assert_int_equal(px_post(is.px, is_c_cb, NULL), 0);
	bool done = is_wait_for(&is.c_done, 2 * IS_WAIT_MS);
	atomic_store(&is.stop, 1);
	px_stop(is.px);
	for (int t = 0; t < 3; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(px_destroy(is.px), 0);
	assert_int_equal(atomic_load(&idle.calls), 1);
	assert_int_equal(atomic_load(&piped.calls), 1);
	assert_true(done);
	assert_int_equal(atomic_load(&is.bad), 0);
	assert_int_equal(is.x_error, 0);
	assert_int_equal(is.x_bytes, 1);
	assert_int_equal(is.y_error, 0);
	assert_int_equal(is.y_bytes, 1);
	assert_int_equal(recv(is.sv[1], got, sizeof(got), MSG_DONTWAIT), 2);
	assert_memory_equal(got, "xy", 2);
	close(sv[0]);
	close(sv[1]);
	close(is.sv[0]);
	close(is.sv[1]);
	close(pp[0]);
	close(pp[1]);
	return (long)((atomic_load(&is.y_ns) - atomic_load(&is.y_start_ns)) /
		      1000000u);
}

static void is_rounds(bool x_leaves)
{
	long late[3];
	int round;

	for (round = 0; round < 3; round++) {
		late[round] = is_round(x_leaves);
		printf("round %d: Y called back %ld ms after its start\n",
		       round + 1, late[round]);
		if (late[round] <= IS_LATE_MS)
			break;
	}
	if (round == 3)
		fail_msg("a result finished within its start, queued within "
			 "20 ms of an interrupt that reached the other part's "
			 "leader (whose thread then %s), called back %ld, %ld "
			 "and %ld ms late while the thread leading the sockets "
			 "waited (at most %d ms)",
			 x_leaves ? "left the loop" : "blocked in a callback",
			 late[0], late[1], late[2], IS_LATE_MS);
}

static void insured_leader_beside_other_part(void **state)
{
	(void)state;
	is_rounds(false);
}

/* The same, the thread that ran X leaving the loop after it. */
static void insured_leader_leaves_other_part(void **state)
{
	(void)state;
	is_rounds(true);
}

/* loopback_ends_share_a_ring: with two loop threads on "uring rings=2",
 * LP_PAIRS loopback TCP connections made in this process, each client
 * bound before its px_connect.  The accepted end's first read (started in
 * the accept's callback) must go into the ring of its client end (that of
 * its connect, where the main thread then starts the client's read),
 * whichever ring the accept completed in: a session whose two ends are
 * served by two threads moves every block between two CPUs
 * (docs/PERFORMANCE.md, "What the second thread loses to sharing").
 * Before, an accepted socket went into the ring with the fewest
 * descriptors, and 11 of the 16 pairs were split.  The pairing is for
 * several threads in the loop: a thread that found the other out of
 * px_handle_events for PX_OTHERS_GONE_NS believes itself alone and
 * gathers everything into its own ring, the accepted ends included.
 * Under TSan, or on a loaded machine, that happens during a round (4 and
 * 10 of 16 split, in two rounds of six), so a round may split up to
 * LP_SPLIT_MAX pairs and the test wants one such round of LP_ROUNDS.
 * Each round ends with px_destroy: every read ECANCELED, one callback
 * each. */
#define LP_PAIRS 16
#define LP_SPLIT_MAX 3
#define LP_ROUNDS 3

static struct {
	px_proactor *px;
	int lfd;
	int srv[LP_PAIRS], cli[LP_PAIRS];
	uint8_t buf[2 * LP_PAIRS];
	atomic_int accepted, connected, reads, calls, errors;
	atomic_bool looping;
} lp;

static void lp_read_cb(const px_completion *c)
{
	if (c->error != ECANCELED)
		atomic_fetch_add(&lp.errors, 1);
	atomic_fetch_add(&lp.calls, 1);
}

static void lp_accept_cb(const px_completion *c)
{
	if (c->error) {
		atomic_fetch_add(&lp.errors, 1);
		return;
	}
	int i = atomic_fetch_add(&lp.accepted, 1);
	lp.srv[i] = c->new_fd;
	if (px_read_stream(lp.px, c->new_fd, &lp.buf[i], 1, lp_read_cb,
			   NULL) == 0)
		atomic_fetch_add(&lp.reads, 1);
	else
		atomic_fetch_add(&lp.errors, 1);
	if (i + 1 < LP_PAIRS &&
	    px_accept(lp.px, lp.lfd, lp_accept_cb, NULL) != 0)
		atomic_fetch_add(&lp.errors, 1);
}

static void lp_connect_cb(const px_completion *c)
{
	if (c->error)
		atomic_fetch_add(&lp.errors, 1);
	atomic_fetch_add(&lp.connected, 1);
}

static void *lp_loop(void *arg)
{
	(void)arg;
	uring_test_loop(lp.px, &lp.looping);
	return NULL;
}

static uint16_t lp_port(int fd, bool peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&a, &l)
		      : getsockname(fd, (struct sockaddr *)&a, &l);
	assert_int_equal(rc, 0);
	return ntohs(a.sin_port);
}

/* One round; returns how many pairs were split. */
static int lp_round(void)
{
	char err[256];
	pthread_t th[2];
	struct sockaddr_in addr = {.sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(addr);

	memset(&lp, 0, sizeof(lp));
	assert_int_equal(px_create(&lp.px, "uring rings=2", err, sizeof(err)), 0);
	px_uring *u = px_container_of(lp.px->proc[0]->prov, px_uring, prov);
	atomic_store(&lp.looping, true);
	for (int t = 0; t < 2; t++)
		assert_int_equal(pthread_create(&th[t], NULL, lp_loop, NULL), 0);
	/* Both threads in the loop: placement is for several threads. */
	uint64_t end = now_ms() + 5000;
	for (;;) {
		pthread_mutex_lock(&lp.px->lock);
		bool both = lp.px->nthreads >= 2;
		pthread_mutex_unlock(&lp.px->lock);
		if (both)
			break;
		assert_true(now_ms() < end);
		usleep(1000);
	}

	lp.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(lp.lfd >= 0);
	assert_int_equal(bind(lp.lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(lp.lfd, (struct sockaddr *)&addr, &al), 0);
	assert_int_equal(listen(lp.lfd, LP_PAIRS), 0);
	assert_int_equal(px_accept(lp.px, lp.lfd, lp_accept_cb, NULL), 0);
	for (int i = 0; i < LP_PAIRS; i++) {
		struct sockaddr_in me = {.sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		lp.cli[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK |
				   SOCK_CLOEXEC, 0);
		assert_true(lp.cli[i] >= 0);
		assert_int_equal(bind(lp.cli[i], (struct sockaddr *)&me,
				      sizeof(me)), 0);
		assert_int_equal(px_connect(lp.px, lp.cli[i],
					    (struct sockaddr *)&addr,
					    sizeof(addr), lp_connect_cb, NULL), 0);
	}
	end = now_ms() + 5000;
	while (atomic_load(&lp.connected) < LP_PAIRS ||
	       atomic_load(&lp.accepted) < LP_PAIRS) {
		assert_true(now_ms() < end);
		usleep(1000);
	}
	assert_int_equal(atomic_load(&lp.errors), 0);
	/* The client ends' reads, from this thread, which never led: they
	 * go into the ring of the connect. */
	for (int i = 0; i < LP_PAIRS; i++) {
		assert_int_equal(px_read_stream(lp.px, lp.cli[i],
						&lp.buf[LP_PAIRS + i], 1,
						lp_read_cb, NULL), 0);
		atomic_fetch_add(&lp.reads, 1);
	}

	int split = 0, in[2] = {0, 0};
	pthread_mutex_lock(&lp.px->lock);
	for (int i = 0; i < LP_PAIRS; i++) {
		uint16_t peer = lp_port(lp.srv[i], true);
		int k = 0;
		while (k < LP_PAIRS && lp_port(lp.cli[k], false) != peer)
			k++;
		assert_true(k < LP_PAIRS);
		int rs = px__uring_fd_ring(u, lp.srv[i]);
		int rc = px__uring_fd_ring(u, lp.cli[k]);
		if (rs != rc)
			split++;
		if (rc == 0 || rc == 1)
			in[rc]++;
	}
	pthread_mutex_unlock(&lp.px->lock);

	atomic_store(&lp.looping, false);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	px_destroy(lp.px);
	assert_int_equal(atomic_load(&lp.calls), atomic_load(&lp.reads));
	assert_int_equal(atomic_load(&lp.errors), 0);
	for (int i = 0; i < LP_PAIRS; i++) {
		close(lp.srv[i]);
		close(lp.cli[i]);
	}
	close(lp.lfd);
	printf("loopback pairs: %d of %d split, client ends %d and %d in "
	       "rings 0 and 1\n", split, LP_PAIRS, in[0], in[1]);
	return split;
}

static void loopback_ends_share_a_ring(void **state)
{
	(void)state;
	int split[LP_ROUNDS];

	for (int i = 0; i < LP_ROUNDS; i++) {
		split[i] = lp_round();
		if (split[i] <= LP_SPLIT_MAX)
			return;
	}
	fail_msg("loopback connections with their two ends in different "
		 "rings: %d, %d and %d of %d in three rounds (at most %d "
		 "wanted in one)", split[0], split[1], split[2], LP_PAIRS,
		 LP_SPLIT_MAX);
}

/* The CQ size of the ring of an engine made with max_aio=m, from the
 * kernel's report of the one io_uring descriptor the process holds
 * (CqMask in /proc/self/fdinfo), or 0 if none was found. */
static unsigned cq_entries_for_max_aio(unsigned long m)
{
	char text[96], path[64], link[64], line[128];
	px_proactor *px = NULL;
	unsigned cq = 0;

	snprintf(text, sizeof(text), "provider=uring rings=1 max_aio=%lu", m);
	char err[256] = "";
	if (px_create(&px, text, err, sizeof(err)) != 0)
		fail_msg("%s: %s", text, err);
	for (int fd = 0; fd < 1024 && !cq; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		if (!strstr(link, "io_uring"))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "CqMask: %x", &cq) == 1) {
				cq++;
				break;
			}
		fclose(f);
	}
	px_destroy(px);
	return cq;
}

/* max_aio near UINT_MAX: the CQ was sized from max_aio + SQ + 3 in 32
 * bits, which wrapped to a few entries (4 times the SQ) instead of the
 * largest ring the kernel allows (IORING_SETUP_CLAMP). */
static void cq_size_at_huge_max_aio(void **state)
{
	(void)state;
	unsigned big = cq_entries_for_max_aio(100000);
	if (!big)
		skip();  /* no CqMask in fdinfo on this kernel */
	unsigned huge = cq_entries_for_max_aio(4294967295ul);
	printf("CQ entries: max_aio=100000 %u, max_aio=4294967295 %u\n", big,
	       huge);
	assert_true(huge >= big);
	assert_true(cq_entries_for_max_aio(4294967290ul) >= big);
}

int main(int argc, char **argv)
{
	int rc = uring_test_begin("test_uring_rings", "uring", 60);
	if (rc)
		return rc;
	/* argv[1]: a cmocka test filter, to run one test. */
	if (argc > 1 && argv[1][0])
		cmocka_set_test_filter(argv[1]);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lone_leader_serves_both_rings),
		cmocka_unit_test(abandoned_ring_is_taken_over),
		cmocka_unit_test(abandoned_ring_after_a_quiet_spell),
		cmocka_unit_test(ring_left_with_a_callbacks_start),
		cmocka_unit_test(ring_left_then_an_outside_start),
		cmocka_unit_test(post_from_blocked_callback_beside_other_ring),
		cmocka_unit_test(ring_left_by_blocked_callback),
		cmocka_unit_test(ready_fd_polls_for_a_lead),
		cmocka_unit_test(file_chain_beside_idle_read_one_thread),
		cmocka_unit_test(ready_fd_replaced_by_apps_eventfd),
		cmocka_unit_test(ready_fd_replaced_then_destroy),
		cmocka_unit_test(team_churn_then_destroy),
		cmocka_unit_test(post_after_own_lead_interrupts),
		cmocka_unit_test(loopback_ends_share_a_ring),
		cmocka_unit_test(team_outside_file_reads_two_threads),
		cmocka_unit_test(insured_leader_beside_other_part),
		cmocka_unit_test(insured_leader_leaves_other_part),
		cmocka_unit_test(cq_size_at_huge_max_aio),
	};
	return cmocka_run_group_tests_name("uring_rings", tests, NULL, NULL);
}
