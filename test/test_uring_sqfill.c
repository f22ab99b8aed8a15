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
 * deferred_start_wakes_leader: io_uring_submit is wrapped at link time
 * (test/meson.build) so that the kernel seems to refuse submissions
 * (EAGAIN) for a while.  One loop thread waits on a four-entry SQ
 * (two kept back) in px_handle_events(px, -1) with a read pending; the
 * main thread starts three reads: the first two fill the slots a start
 * may take, their own submissions refused, and the third finds no slot,
 * its submission refused too, and is given back to the processor
 * (PX_START_AGAIN), which defers it.  The refusals then end and data
 * comes for the three reads: they must complete within DS_LATE_MS.
 * Before, nobody told the waiting leader about the deferred start, and
 * the three reads waited until its wait ended at the processor's bound
 * (the idle check, 200 ms or more).  A full SQ under SQPOLL, whose
 * kernel thread takes SQEs at its own pace, gives the same PX_START_AGAIN.
 *
 * enter_refused_backs_off: the leader's own io_uring_enter, which submits
 * what its prepare published and waits (io_uring_enter2, wrapped too),
 * fails with each error a refused submission may bring (EAGAIN, EBUSY,
 * ENOMEM, EINTR) for ER_MS while a read waits to be submitted: the
 * leader must retry at a measured pace (at most ER_TURNS leader turns),
 * not at once and for ever, and the read must complete once the enters
 * go through again.
 *
 * cancel_submit_refused_then_reuse: a read waits unsubmitted in the SQ
 * when px_cancel's submit of it is refused (with no loop thread, and
 * with one waiting in the kernel for another read); the number is then
 * closed and reused for another socket with data waiting: the read must
 * end with ECANCELED and leave that data alone (fixed problem 229).
 *
 * cancel_during_held_enter_then_reuse: the same, with the leader held
 * (io_uring_enter2's wrap) between its prepare and the enter that may
 * take the read's SQE (fixed problem 317; the comment of the test).
 * two_cancels_during_held_enter: two such cancels at once, from two
 * threads (the comment of the test).
 *
 * cancel_from_callback_refused: a write and a read started and cancelled
 * by a callback of the lone loop thread while submissions are refused,
 * their numbers reused at once (the comment of the test).
 *
 * cancel_in_callback_during_held_enter: as the first case of
 * cancel_during_held_enter_then_reuse, the cancel made by a callback of
 * a second loop thread (the comment of the test).
 *
 * cancel_refused_reuse_callbacks: reads on pipes started and cancelled
 * by callbacks of two loop threads, their numbers reused at once, while
 * the kernel refuses now and then (the comment of the test).
 *
 * cancel_refused_reuse_threads: the window of the held enter met by
 * chance, with threads cancelling and reusing numbers while the kernel
 * refuses now and then, also on ring_flags=sqpoll (the comment of the
 * test).
 *
 * cancel_refused_in_kernel_then_data, cancel_refused_tty_write,
 * cancel_refused_queued_tty_write: a read armed in the kernel, a terminal
 * write held in an io-wq worker and one queued behind it, cancelled while
 * the kernel refuses the cancel's submit: none goes on after px_cancel
 * returns (fixed problem 318).
 * cancel_refused_after_enter_took_none: px_cancel does not wait for a
 * leader's enter that took none of its SQEs (the comment of each).
 *
 * stalled_head_cancel_sends_nothing, stalled_head_deadline_rest_in_order,
 * stalled_head_close_sends_nothing, stalled_read_head_cancel_takes_nothing,
 * start_on_full_sqpoll_ring_not_deferred,
 * post_after_start_on_full_sqpoll_ring, cq_overflow_then_destroy,
 * destroy_with_full_sq_refused: one-entry SQs (TESTING.md, fixed
 * problems 282, 283 and 290, and the comment of each).
 * argv[1], if given: a cmocka glob of the tests to run.
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
#include <sys/socket.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cmocka.h>
#include <liburing.h>
#include <time.h>

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

/* ------------------------------------------------------------------ */
/* A start the provider gives back while the leader waits               */
/* ------------------------------------------------------------------ */

/* io_uring_submit calls still to refuse with EAGAIN, as a kernel short of
 * memory for requests does. */
static atomic_int submit_refusals;

int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring)
{
	int left = atomic_load(&submit_refusals);

	while (left > 0)
		if (atomic_compare_exchange_weak(&submit_refusals, &left,
						 left - 1))
			return -EAGAIN;
	return __real_io_uring_submit(ring);
}

/* The error the leader's submitting io_uring_enter2 fails with (0: none),
 * and how many times it did. */
static atomic_int enter_error, enter_refused;

int __real_io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min,
			   unsigned flags, sigset_t *sig, size_t sz);
int __wrap_io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min,
			   unsigned flags, sigset_t *sig, size_t sz);
/* A submitting enter held on request (cancel_during_held_enter_then_reuse):
 * hold_next arms the hold for the next one, which says so (hold_in) and
 * waits until the test lets it go (hold_go); hold_refuse, if set then,
 * is the error it fails with, once, instead of entering. */
static atomic_int hold_next, hold_refuse;
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool hold_in, hold_go;

int __wrap_io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min,
			   unsigned flags, sigset_t *sig, size_t sz)
{
	if (to_submit && atomic_exchange(&hold_next, 0)) {
		pthread_mutex_lock(&hold_mu);
		hold_in = true;
		pthread_cond_broadcast(&hold_cv);
		while (!hold_go)
			pthread_cond_wait(&hold_cv, &hold_mu);
		pthread_mutex_unlock(&hold_mu);
		int r = atomic_exchange(&hold_refuse, 0);
		if (r)
			return -r;
	}
	int e = atomic_load(&enter_error);

	if (e && to_submit) {
		atomic_fetch_add(&enter_refused, 1);
		return -e;
	}
	return __real_io_uring_enter2(fd, to_submit, min, flags, sig, sz);
}

#define DS_READS 4      /* one to keep the leader waiting, three started
                           while it waits */
#define DS_LATE_MS 100  /* the leader's wait ran to its bound: 180 ms */

static atomic_int ds_done[DS_READS];
static uint64_t ds_at_ms[DS_READS];
static atomic_bool ds_looping;

static uint64_t ds_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void ds_cb(const px_completion *c)
{
	int i = (int)(intptr_t)c->user;

	ds_at_ms[i] = ds_now_ms();
	atomic_fetch_add(&ds_done[i], 1);
}

static void *ds_loop(void *arg)
{
	(void)arg;
	while (atomic_load(&ds_looping))
		if (px_handle_events(px, -1) < 0)
			break;
	return NULL;
}

static void deferred_start_wakes_leader(void **state)
{
	char err[256], bufs[DS_READS][8];
	int sv[DS_READS][2];
	pthread_t loop;

	(void)state;
	assert_int_equal(px_create(&px, "uring ring=4 rings=1", err,
				   sizeof(err)), 0);
	for (int i = 0; i < DS_READS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[i]), 0);
		atomic_store(&ds_done[i], 0);
	}
	atomic_store(&ds_looping, true);
	assert_int_equal(px_read_stream(px, sv[0][0], bufs[0], sizeof(bufs[0]),
					ds_cb, (void *)(intptr_t)0), 0);
	assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	usleep(20000);  /* the leader waits in the kernel */

	atomic_store(&submit_refusals, 3);
	for (int i = 1; i < DS_READS; i++)
		assert_int_equal(px_read_stream(px, sv[i][0], bufs[i],
						sizeof(bufs[i]), ds_cb,
						(void *)(intptr_t)i), 0);
	/* Each start's own submission, and the third's try for a slot. */
	assert_int_equal(atomic_load(&submit_refusals), 0);
	uint64_t t0 = ds_now_ms();
	for (int i = 1; i < DS_READS; i++)
		assert_int_equal(write(sv[i][1], "x", 1), 1);
	for (int k = 0; k < 1500; k++) {
		bool all = true;
		for (int i = 1; i < DS_READS; i++)
			all = all && atomic_load(&ds_done[i]);
		if (all)
			break;
		usleep(1000);
	}
	for (int i = 1; i < DS_READS; i++) {
		if (!atomic_load(&ds_done[i]))
			fail_msg("read %d never completed", i);
		printf("read %d completed after %llu ms\n", i,
		       (unsigned long long)(ds_at_ms[i] - t0));
		if (ds_at_ms[i] - t0 > DS_LATE_MS)
			fail_msg("read %d completed %llu ms after its data "
				 "(at most %d)", i,
				 (unsigned long long)(ds_at_ms[i] - t0),
				 DS_LATE_MS);
	}
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(loop, NULL);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&ds_done[0]), 1);  /* ECANCELED */
	for (int i = 1; i < DS_READS; i++)
		assert_int_equal(atomic_load(&ds_done[i]), 1);
	for (int i = 0; i < DS_READS; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
}

#define ER_MS 50
#define ER_TURNS 30

static void enter_refused_backs_off(void **state)
{
	static const int errs[] = { EAGAIN, EBUSY, ENOMEM, EINTR };
	char err[256], buf[8];
	int sv[2];
	pthread_t loop;

	(void)state;
	assert_int_equal(px_create(&px, "uring rings=1", err, sizeof(err)), 0);
	atomic_store(&ds_looping, true);
	assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	for (size_t e = 0; e < sizeof(errs) / sizeof(errs[0]); e++) {
		struct px_stats st0, st1;

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv), 0);
		atomic_store(&ds_done[0], 0);
		atomic_store(&enter_refused, 0);
		atomic_store(&enter_error, errs[e]);
		assert_int_equal(px_stats(px, &st0), 0);
		/* No leader waits: the read is submitted by the enter of the
		 * thread that comes to lead. */
		assert_int_equal(px_read_stream(px, sv[0], buf, sizeof(buf),
						ds_cb, (void *)(intptr_t)0), 0);
		usleep(ER_MS * 1000);
		assert_int_equal(px_stats(px, &st1), 0);
		atomic_store(&enter_error, 0);
		unsigned long long turns = st1.leader_turns - st0.leader_turns;
		printf("%s: %d refused enters, %llu leader turns in %d ms\n",
		       strerror(errs[e]), atomic_load(&enter_refused), turns,
		       ER_MS);
		assert_int_equal(write(sv[1], "x", 1), 1);
		for (int k = 0; k < 2000 && !atomic_load(&ds_done[0]); k++)
			usleep(1000);
		if (atomic_load(&ds_done[0]) != 1)
			fail_msg("%s: the read never completed", strerror(errs[e]));
		if (turns > ER_TURNS)
			fail_msg("%s: %llu leader turns in %d ms (at most %d)",
				 strerror(errs[e]), turns, ER_MS, ER_TURNS);
		close(sv[0]);
		close(sv[1]);
	}
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(loop, NULL);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
}

/* ------------------------------------------------------------------ */
/* A cancel whose submission the kernel refuses                         */
/* ------------------------------------------------------------------ */

typedef struct cr_rec {
	atomic_int calls;
	int error;
	size_t bytes;
	char buf[16];
} cr_rec;

static void cr_cb(const px_completion *c)
{
	cr_rec *r = c->user;

	r->error = c->error;
	r->bytes = c->bytes;
	atomic_fetch_add(&r->calls, 1);
}

/* A read started with no leader in the kernel waits in the SQ, unsubmitted;
 * px_cancel submits it (with its ASYNC_CANCEL behind it) so that the
 * kernel has looked its descriptor number up before the application may
 * close the number (proactor.h, px_cancel).  Here that submission is
 * refused (EAGAIN, as a kernel short of memory for requests answers), the
 * application closes the number and gets it back for another socket with
 * data waiting: the cancelled read must end with ECANCELED and leave that
 * data to the new socket's reader.  Before the fix the read went into the
 * kernel at the next lead, on the new socket, and took its bytes. */
static void cr_post_cb(const px_completion *c)
{
	(void)c;
}

/* looper: with a loop thread waiting in px_handle_events(px, -1) on the
 * ring (its start, the kick, is refused too). */
static void cancel_submit_refused_then_reuse_with(const char *engine,
						  bool looper)
{
	char err[256];
	int a[2], b[2], k[2];
	cr_rec rd, keep;
	pthread_t loop;

	memset(&rd, 0, sizeof(rd));
	memset(&keep, 0, sizeof(keep));
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	/* A read that keeps the leader waiting in the kernel. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, k),
			 0);
	if (looper)
		assert_int_equal(px_read_stream(px, k[0], keep.buf,
						sizeof(keep.buf), cr_cb, &keep),
				 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a),
			 0);
	if (looper) {
		atomic_store(&ds_looping, true);
		assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
		usleep(20000);  /* the leader waits in the kernel */
		atomic_store(&submit_refusals, 1000);
	}
	assert_int_equal(px_read_stream(px, a[0], rd.buf, sizeof(rd.buf), cr_cb,
					&rd), 0);
	atomic_store(&submit_refusals, 1000);
	assert_int_equal(px_cancel(px, a[0]), 1);
	atomic_store(&submit_refusals, 0);
	int num = a[0];
	close(a[0]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b),
			 0);
	if (b[0] != num)
		skip();  /* (the number went elsewhere) */
	assert_int_equal(write(b[1], "hello", 5), 5);
	if (looper) {
		/* Wakes the leader, whose interrupt's submit takes the rest. */
		assert_int_equal(px_post(px, cr_post_cb, NULL), 0);
		for (int i = 0; i < 500 && !atomic_load(&rd.calls); i++)
			usleep(1000);
		atomic_store(&ds_looping, false);
		px_stop(px);
		pthread_join(loop, NULL);
	}
	for (int i = 0; i < 100 && !atomic_load(&rd.calls); i++)
		px_handle_events(px, 2);
	for (int i = 0; i < 5; i++)
		px_handle_events(px, 2);
	assert_int_equal(atomic_load(&rd.calls), 1);
	assert_int_equal(rd.error, ECANCELED);
	assert_int_equal(rd.bytes, 0);
	char got[8] = { 0 };
	assert_int_equal(recv(b[0], got, sizeof(got), MSG_DONTWAIT), 5);
	assert_memory_equal(got, "hello", 5);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	assert_int_equal(atomic_load(&keep.calls), looper ? 1 : 0);
	close(a[1]);
	close(b[0]);
	close(b[1]);
	close(k[0]);
	close(k[1]);
}

static void cancel_submit_refused_then_reuse(void **state)
{
	(void)state;
	cancel_submit_refused_then_reuse_with("uring rings=1", false);
	cancel_submit_refused_then_reuse_with("uring rings=2", false);
	cancel_submit_refused_then_reuse_with("uring rings=1", true);
	cancel_submit_refused_then_reuse_with("uring rings=2", true);
	/* With SQPOLL px_cancel waits for the ring's kernel thread to take
	 * the SQEs, whatever io_uring_submit said. */
	cancel_submit_refused_then_reuse_with("uring rings=1 ring_flags=sqpoll",
					      false);
	cancel_submit_refused_then_reuse_with("uring rings=1 ring_flags=sqpoll",
					      true);
}

/* ------------------------------------------------------------------ */
/* A cancel while the leader's enter may be taking the SQE              */
/* ------------------------------------------------------------------ */

/* The leader submits what its prepare published in the io_uring_enter
 * that also waits, made without the mutex.  Here a read's SQE is among
 * those, and the leader is held between its prepare and that enter (the
 * wrap of io_uring_enter2); px_cancel's own submit is refused (EAGAIN),
 * the application closes the number and gets it back for a new
 * socketpair with data waiting; only then (or after HE_HOLD_MS, should
 * px_cancel not return while the enter is held) is the enter let go, to
 * go on or to be refused once more (EAGAIN).  The cancelled read must
 * end once with ECANCELED and 0 bytes, and the new socket's "hello" stay
 * where it is.  Before the fix the enter, or the next lead's submit,
 * sent the read on the new socket, which took its data.
 *
 * How the read's SQE gets published by the leader's prepare:
 *   HE_NO_LEADER: started while no thread leads, the loop thread comes
 *     after it;
 *   HE_FOREIGN: the prepare published another read's SQE, and while the
 *     enter is held a start's submit takes it (a submit of another
 *     thread's), then the read is started, its start's submit refused:
 *     the held enter, which may take as many SQEs as its prepare
 *     published, from the kernel's head on, would take the read's;
 *   HE_KICK: on a dedicated processor, started while its leader waits:
 *     the start wakes the leader through the kick, and the leader's next
 *     prepare publishes it;
 *   HE_BEYOND: as HE_FOREIGN, but a read on a third socketpair is
 *     started before it, its submit refused too: the held enter would
 *     take that one only, and the cancelled read's SQE is out of its
 *     reach (px_cancel need not wait for the enter: printed); that read
 *     ends with the byte then sent to it. */
enum { HE_NO_LEADER, HE_FOREIGN, HE_KICK, HE_BEYOND };
#define HE_HOLD_MS 150

static atomic_bool he_reused;

/* Lets the held enter go once the number is reused, or after HE_HOLD_MS,
 * the submits no longer refused; arg: the error it then fails with (0:
 * it goes on). */
static void *he_release_main(void *arg)
{
	for (int i = 0; i < HE_HOLD_MS && !atomic_load(&he_reused); i++)
		usleep(1000);
	atomic_store(&submit_refusals, 0);
	atomic_store(&hold_refuse, (int)(intptr_t)arg);
	pthread_mutex_lock(&hold_mu);
	hold_go = true;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
	return NULL;
}

static void he_wait_held(void)
{
	pthread_mutex_lock(&hold_mu);
	for (int i = 0; i < 2000 && !hold_in; i++) {
		pthread_mutex_unlock(&hold_mu);
		usleep(1000);
		pthread_mutex_lock(&hold_mu);
	}
	bool in = hold_in;
	pthread_mutex_unlock(&hold_mu);
	if (!in)
		fail_msg("the leader's enter never came to be held");
}

static void he_run(const char *engine, int how, int refuse)
{
	char err[256];
	int a[2], b[2], k[2], x[2], y[2];
	cr_rec rd, keep, other, first;
	pthread_t loop = 0, rel;
	bool dedicated = how == HE_KICK;

	memset(&rd, 0, sizeof(rd));
	memset(&keep, 0, sizeof(keep));
	memset(&other, 0, sizeof(other));
	memset(&first, 0, sizeof(first));
	atomic_store(&he_reused, false);
	atomic_store(&hold_refuse, 0);
	hold_in = hold_go = false;
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, k),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, y),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a),
			 0);
	atomic_store(&ds_looping, true);
	switch (how) {
	case HE_NO_LEADER:
		assert_int_equal(px_read_stream(px, a[0], rd.buf,
						sizeof(rd.buf), cr_cb, &rd), 0);
		atomic_store(&hold_next, 1);
		assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
		he_wait_held();
		break;
	case HE_FOREIGN:
	case HE_BEYOND:
		assert_int_equal(px_read_stream(px, k[0], keep.buf,
						sizeof(keep.buf), cr_cb, &keep),
				 0);
		atomic_store(&hold_next, 1);
		assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
		he_wait_held();
		/* Its submit takes the keep read's SQE and its own. */
		assert_int_equal(px_read_stream(px, x[0], other.buf,
						sizeof(other.buf), cr_cb,
						&other), 0);
		atomic_store(&submit_refusals, 1000);
		if (how == HE_BEYOND)
			assert_int_equal(px_read_stream(px, y[0], first.buf,
							sizeof(first.buf),
							cr_cb, &first), 0);
		assert_int_equal(px_read_stream(px, a[0], rd.buf,
						sizeof(rd.buf), cr_cb, &rd), 0);
		break;
	case HE_KICK:
		/* The dedicated leader waits in the kernel for this one. */
		assert_int_equal(px_read_stream(px, k[0], keep.buf,
						sizeof(keep.buf), cr_cb, &keep),
				 0);
		usleep(20000);
		atomic_store(&hold_next, 1);
		assert_int_equal(px_read_stream(px, a[0], rd.buf,
						sizeof(rd.buf), cr_cb, &rd), 0);
		he_wait_held();
		break;
	}
	assert_int_equal(pthread_create(&rel, NULL, he_release_main,
					(void *)(intptr_t)refuse), 0);
	atomic_store(&submit_refusals, 1000);
	assert_int_equal(px_cancel(px, a[0]), 1);
	pthread_mutex_lock(&hold_mu);
	bool before = !hold_go;
	pthread_mutex_unlock(&hold_mu);
	int num = a[0];
	close(a[0]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b),
			 0);
	bool reused = b[0] == num;
	if (reused)
		assert_int_equal(write(b[1], "hello", 5), 5);
	atomic_store(&he_reused, true);
	pthread_join(rel, NULL);
	printf("%s, %s, enter %s: px_cancel returned %s the enter was let "
	       "go\n", engine,
	       how == HE_NO_LEADER ? "no leader" :
	       how == HE_FOREIGN ? "another's submit" :
	       how == HE_BEYOND ? "out of the enter's reach" : "kick",
	       refuse ? "refused" : "goes on", before ? "before" : "after");
	if (how == HE_BEYOND)
		assert_int_equal(write(y[1], "y", 1), 1);
	/* (A dedicated processor's callbacks run in the application's
	 * threads.) */
	for (int i = 0; i < 1000 && (!atomic_load(&rd.calls) ||
				     (how == HE_BEYOND &&
				      !atomic_load(&first.calls))); i++)
		if (dedicated)
			px_handle_events(px, 2);
		else
			usleep(2000);
	if (!dedicated) {
		atomic_store(&ds_looping, false);
		px_stop(px);
		pthread_join(loop, NULL);
	}
	if (atomic_load(&rd.calls) != 1 || rd.error != ECANCELED ||
	    rd.bytes != 0)
		fail_msg("%s: the cancelled read: %d callbacks, error %d, %zu "
			 "bytes (\"%.*s\")", engine, atomic_load(&rd.calls),
			 rd.error, rd.bytes, (int)rd.bytes, rd.buf);
	char got[8] = { 0 };
	if (reused) {
		ssize_t n = recv(b[0], got, sizeof(got), MSG_DONTWAIT);
		if (n != 5 || memcmp(got, "hello", 5))
			fail_msg("%s: the new socket under the number: recv %zd",
				 engine, n);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	assert_int_equal(atomic_load(&keep.calls), how == HE_NO_LEADER ? 0 : 1);
	assert_int_equal(atomic_load(&other.calls),
			 how == HE_FOREIGN || how == HE_BEYOND ? 1 : 0);
	if (how == HE_BEYOND) {
		assert_int_equal(atomic_load(&first.calls), 1);
		assert_int_equal(first.error, 0);
		assert_int_equal(first.bytes, 1);
	}
	close(a[1]);
	close(b[0]);
	close(b[1]);
	close(k[0]);
	close(k[1]);
	close(x[0]);
	close(x[1]);
	close(y[0]);
	close(y[1]);
	if (!reused)
		skip();  /* (the number went elsewhere) */
}

/* As HE_NO_LEADER, but px_cancel comes from a callback of a second loop
 * thread while the first, leading, is held in its enter: the read is
 * started with no loop thread, loop thread L comes and is held between
 * its prepare (which published the read's SQE) and its enter; loop thread
 * C, asleep as a follower, runs a post made from outside, whose callback
 * cancels the read with the submits refused, closes the number, takes it
 * back for a new socketpair with "hello" waiting and only then lets the
 * enter go (or HE_HOLD_MS after, should px_cancel not return while the
 * enter is held).  The read must end once with ECANCELED and 0 bytes and
 * "hello" stay; the cancel's wait for L's enter must not need anything of
 * C, which is inside px_handle_events.  Passes (added by a helper's
 * review of 2026-12-07, rare failures of today's new tests); with the
 * library part of fixed problem 317 undone it fails. */
static struct {
	int a0, b[2], n;
	bool reused, before;
	atomic_bool done;
} hc;

static void hc_cancel_cb(const px_completion *c)
{
	(void)c;
	atomic_store(&submit_refusals, 1000);
	hc.n = px_cancel(px, hc.a0);
	pthread_mutex_lock(&hold_mu);
	hc.before = !hold_go;
	pthread_mutex_unlock(&hold_mu);
	int num = hc.a0;
	close(hc.a0);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hc.b))
		abort();
	hc.reused = hc.b[0] == num;
	if (write(hc.b[1], "hello", 5) != 5)
		abort();
	atomic_store(&he_reused, true);
	atomic_store(&hc.done, true);
}

static void hc_run(const char *engine, int refuse)
{
	char err[256];
	int a[2];
	cr_rec rd;
	pthread_t lead, other, rel;

	memset(&rd, 0, sizeof(rd));
	memset(&hc, 0, sizeof(hc));
	atomic_store(&he_reused, false);
	atomic_store(&hold_refuse, 0);
	hold_in = hold_go = false;
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a),
			 0);
	hc.a0 = a[0];
	atomic_store(&ds_looping, true);
	assert_int_equal(px_read_stream(px, a[0], rd.buf, sizeof(rd.buf), cr_cb,
					&rd), 0);
	atomic_store(&hold_next, 1);
	assert_int_equal(pthread_create(&lead, NULL, ds_loop, NULL), 0);
	he_wait_held();
	assert_int_equal(pthread_create(&other, NULL, ds_loop, NULL), 0);
	usleep(20000);  /* C asleep as a follower */
	assert_int_equal(pthread_create(&rel, NULL, he_release_main,
					(void *)(intptr_t)refuse), 0);
	assert_int_equal(px_post(px, hc_cancel_cb, NULL), 0);
	for (int i = 0; i < 3000 && !atomic_load(&hc.done); i++)
		usleep(1000);
	bool done = atomic_load(&hc.done);
	atomic_store(&he_reused, true);  /* (lets it go in any case) */
	pthread_join(rel, NULL);
	for (int i = 0; i < 2000 && !atomic_load(&rd.calls); i++)
		usleep(1000);
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(lead, NULL);
	pthread_join(other, NULL);
	if (!done)
		fail_msg("%s: the callback that cancels did not finish in 3 s",
			 engine);
	printf("%s, enter %s: px_cancel in the callback returned %s the "
	       "enter was let go\n", engine, refuse ? "refused" : "goes on",
	       hc.before ? "before" : "after");
	assert_int_equal(hc.n, 1);
	if (atomic_load(&rd.calls) != 1 || rd.error != ECANCELED || rd.bytes)
		fail_msg("%s: the cancelled read: %d callbacks, error %d, %zu "
			 "bytes (\"%.*s\")", engine, atomic_load(&rd.calls),
			 rd.error, rd.bytes, (int)rd.bytes, rd.buf);
	char got[8] = { 0 };
	ssize_t g = recv(hc.b[0], got, sizeof(got), MSG_DONTWAIT);
	if (g != 5 || memcmp(got, "hello", 5))
		fail_msg("%s: the new socket under the number: recv %zd", engine,
			 g);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	close(a[1]);
	close(hc.b[0]);
	close(hc.b[1]);
	if (!hc.reused)
		skip();  /* (the number went elsewhere) */
}

static void cancel_in_callback_during_held_enter(void **state)
{
	(void)state;
	for (int refuse = 0; refuse <= EAGAIN; refuse += EAGAIN) {
		hc_run("uring rings=1", refuse);
		hc_run("uring rings=2", refuse);
	}
}

static void cancel_during_held_enter_then_reuse(void **state)
{
	(void)state;
	for (int refuse = 0; refuse <= EAGAIN; refuse += EAGAIN) {
		he_run("uring rings=1", HE_NO_LEADER, refuse);
		he_run("uring rings=2", HE_NO_LEADER, refuse);
		he_run("uring rings=1", HE_FOREIGN, refuse);
		he_run("uring rings=1", HE_BEYOND, refuse);
		he_run("uring rings=1 processor=dedicated", HE_KICK, refuse);
	}
}

/* Two px_cancel calls at once, from two threads, of two reads whose SQEs
 * the held leader's enter may take (both published by its prepare: started
 * while no thread led), their own submits refused: neither returns while
 * the enter is held (the first waits for it holding the mutex, the second
 * for the mutex), both return 1 once it is let go, to go on or to be
 * refused once (EAGAIN); the numbers, closed only then, are taken by two
 * new socketpairs with "hello" waiting, and each read must end once with
 * ECANCELED and 0 bytes, each "hello" staying where it is.  (Added by a
 * helper's review of 2026-12-07, a second look at fixed problem 317.) */
static atomic_int tc_returned;

static void *tc_cancel_main(void *arg)
{
	int n = px_cancel(px, (int)(intptr_t)arg);

	atomic_fetch_add(&tc_returned, 1);
	return (void *)(intptr_t)n;
}

static void two_cancels_during_held_enter_with(const char *engine,
					       int refuse)
{
	char err[256];
	int a[2][2], b[2][2];
	cr_rec rd[2];
	pthread_t loop, rel, cancel[2];

	memset(rd, 0, sizeof(rd));
	atomic_store(&he_reused, false);
	atomic_store(&hold_refuse, 0);
	atomic_store(&tc_returned, 0);
	hold_in = hold_go = false;
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, a[i]), 0);
		assert_int_equal(px_read_stream(px, a[i][0], rd[i].buf,
						sizeof(rd[i].buf), cr_cb,
						&rd[i]), 0);
	}
	atomic_store(&ds_looping, true);
	atomic_store(&hold_next, 1);
	assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	he_wait_held();
	atomic_store(&submit_refusals, 1000000);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&cancel[i], NULL, tc_cancel_main,
						(void *)(intptr_t)a[i][0]), 0);
	usleep(30000);
	int early = atomic_load(&tc_returned);
	assert_int_equal(pthread_create(&rel, NULL, he_release_main,
					(void *)(intptr_t)refuse), 0);
	atomic_store(&he_reused, true);  /* lets the enter go at once */
	for (int i = 0; i < 2; i++) {
		void *n;
		pthread_join(cancel[i], &n);
		assert_int_equal((int)(intptr_t)n, 1);
	}
	pthread_join(rel, NULL);
	bool reused = true;
	for (int i = 0; i < 2; i++) {
		int num = a[i][0];
		close(a[i][0]);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, b[i]), 0);
		reused = reused && b[i][0] == num;
		assert_int_equal(write(b[i][1], "hello", 5), 5);
	}
	for (int i = 0; i < 1000 && (!atomic_load(&rd[0].calls) ||
				     !atomic_load(&rd[1].calls)); i++)
		usleep(1000);
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(loop, NULL);
	printf("%s, enter %s: %d of the two px_cancel calls returned while "
	       "the enter was held\n", engine, refuse ? "refused" : "goes on",
	       early);
	assert_int_equal(early, 0);
	for (int i = 0; i < 2; i++)
		if (atomic_load(&rd[i].calls) != 1 ||
		    rd[i].error != ECANCELED || rd[i].bytes != 0)
			fail_msg("%s: cancelled read %d: %d callbacks, error %d, "
				 "%zu bytes", engine, i,
				 atomic_load(&rd[i].calls), rd[i].error,
				 rd[i].bytes);
	for (int i = 0; i < 2; i++) {
		char got[8] = { 0 };
		assert_int_equal(recv(b[i][0], got, sizeof(got), MSG_DONTWAIT),
				 5);
		assert_memory_equal(got, "hello", 5);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(atomic_load(&rd[i].calls), 1);
		close(a[i][1]);
		close(b[i][0]);
		close(b[i][1]);
	}
	if (!reused)
		skip();  /* (the numbers went elsewhere) */
}

static void two_cancels_during_held_enter(void **state)
{
	(void)state;
	for (int refuse = 0; refuse <= EAGAIN; refuse += EAGAIN) {
		two_cancels_during_held_enter_with("uring rings=1", refuse);
		two_cancels_during_held_enter_with("uring rings=2", refuse);
	}
}

/* px_cancel from a callback of the thread that leads, while the kernel
 * refuses submissions: the loop thread (the test's own, alone) runs the
 * callback of a trigger read, which starts a 3-byte write on socketpair
 * w and a read on pipe p, cancels both, closes the two numbers and gets
 * them back as the two ends of a new socketpair b, each end then holding
 * 5 bytes its peer sent ("hello", "world").  Once submissions go through
 * again, both must end with ECANCELED and 0 bytes, and each end of b
 * hold exactly its 5 bytes: the write's SQE, went in, would have sent
 * "bad" on one end, the read's taken the bytes of the other.  (The read
 * goes to the kernel as a READ: a socket's read started by a callback is
 * held back until the next prepare, with no SQE.)  The thread that
 * cancels leads no enter meanwhile, so nothing waits.  Passes before and
 * after fixed problem 317. */
typedef struct cc_state {
	int w[2], p[2], b[2];
	int ncw, ncr;
	cr_rec wr, rd;
	bool done;
} cc_state;

static void cc_trigger_cb(const px_completion *c)
{
	cc_state *s = c->user;

	atomic_store(&submit_refusals, 1000);
	assert_int_equal(px_write_stream(px, s->w[0], "bad", 3, cr_cb,
					 &s->wr), 0);
	assert_int_equal(px_read_stream(px, s->p[0], s->rd.buf,
					sizeof(s->rd.buf), cr_cb, &s->rd), 0);
	s->ncw = px_cancel(px, s->w[0]);
	s->ncr = px_cancel(px, s->p[0]);
	close(s->w[0]);
	close(s->p[0]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    s->b), 0);
	assert_int_equal(write(s->b[1], "hello", 5), 5);
	assert_int_equal(write(s->b[0], "world", 5), 5);
	atomic_store(&submit_refusals, 0);
	s->done = true;
}

static void cancel_from_callback_refused_with(const char *engine)
{
	char err[256], tb[4];
	int t[2];
	cc_state s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, t),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    s.w), 0);
	assert_int_equal(pipe2(s.p, O_CLOEXEC), 0);
	int lo = s.w[0] < s.p[0] ? s.w[0] : s.p[0];
	int hi = s.w[0] < s.p[0] ? s.p[0] : s.w[0];
	assert_int_equal(px_read_stream(px, t[0], tb, sizeof(tb),
					cc_trigger_cb, &s), 0);
	assert_int_equal(write(t[1], "x", 1), 1);
	for (int i = 0; i < 500 && !s.done; i++)
		px_handle_events(px, 2);
	assert_true(s.done);
	assert_int_equal(s.ncw, 1);
	assert_int_equal(s.ncr, 1);
	for (int i = 0; i < 500 && (!atomic_load(&s.wr.calls) ||
				    !atomic_load(&s.rd.calls)); i++)
		px_handle_events(px, 2);
	for (int i = 0; i < 5; i++)
		px_handle_events(px, 2);
	if (atomic_load(&s.wr.calls) != 1 || s.wr.error != ECANCELED ||
	    s.wr.bytes)
		fail_msg("%s: the cancelled write: %d callbacks, error %d, %zu "
			 "bytes", engine, atomic_load(&s.wr.calls), s.wr.error,
			 s.wr.bytes);
	if (atomic_load(&s.rd.calls) != 1 || s.rd.error != ECANCELED ||
	    s.rd.bytes)
		fail_msg("%s: the cancelled read: %d callbacks, error %d, %zu "
			 "bytes", engine, atomic_load(&s.rd.calls), s.rd.error,
			 s.rd.bytes);
	bool reused = s.b[0] == lo && s.b[1] == hi;
	char got[16];
	ssize_t n0 = recv(s.b[0], got, sizeof(got), MSG_DONTWAIT);
	if (n0 != 5 || memcmp(got, "hello", 5))
		fail_msg("%s: one end of the new socketpair: recv %zd", engine,
			 n0);
	ssize_t n1 = recv(s.b[1], got, sizeof(got), MSG_DONTWAIT);
	if (n1 != 5 || memcmp(got, "world", 5))
		fail_msg("%s: the other end of the new socketpair: recv %zd",
			 engine, n1);
	/* Nor did the write reach its own peer: the end of stream at once
	 * (the number was closed). */
	assert_int_equal(recv(s.w[1], got, sizeof(got), MSG_DONTWAIT), 0);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	close(t[0]);
	close(t[1]);
	close(s.w[1]);
	close(s.p[1]);
	close(s.b[0]);
	close(s.b[1]);
	if (!reused)
		skip();  /* (the numbers went elsewhere) */
}

static void cancel_from_callback_refused(void **state)
{
	(void)state;
	cancel_from_callback_refused_with("uring rings=1");
	cancel_from_callback_refused_with("uring rings=2");
}

/* Threads cancelling reads while the kernel refuses now and then: two loop
 * threads, two threads each making ST_ROUNDS rounds of a read started on
 * a new socketpair and cancelled with px_cancel, its submit refused
 * (io_uring_submit refused twice: the cancel's, and the start's or the
 * kick's; the other worker's read may be on the number too, and
 * cancelled with it), the number closed and taken at once by a new socketpair with
 * "hello" waiting, while a third thread has every submitting enter of
 * the leaders fail with EAGAIN in one millisecond of two.  Each
 * cancelled read must end once with ECANCELED and 0 bytes (its peer
 * never writes), and the new socket keep its "hello".  Without the hold
 * of cancel_during_held_enter_then_reuse, the window of fixed problem
 * 317 is met now and then: before the fix, 4 runs of 15 failed ("the
 * read: 1 callbacks, error 0, 5 bytes; the new socket: recv -1"); after
 * it, 0 of 40, and 0 of 8 under TSan.  It also asks that the wait the
 * fix added neither hangs nor loses a completion among several
 * threads.  Last on ring_flags=sqpoll, where px_cancel waits for the
 * ring's kernel thread to take the SQEs instead (ur_submit_taken). */
#define ST_ROUNDS 100
#define ST_THREADS 2

static atomic_bool st_flipping;
static atomic_int st_bad, st_skipped, st_finished;
static char st_msg[256];

static void *st_flip_main(void *arg)
{
	(void)arg;
	while (atomic_load(&st_flipping)) {
		atomic_store(&enter_error, EAGAIN);
		usleep(1000);
		atomic_store(&enter_error, 0);
		usleep(1000);
	}
	return NULL;
}

static void *st_worker_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < ST_ROUNDS && !atomic_load(&st_bad); i++) {
		int a[2], b[2];
		cr_rec rd;

		memset(&rd, 0, sizeof(rd));
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a))
			abort();
		if (px_read_stream(px, a[0], rd.buf, sizeof(rd.buf), cr_cb, &rd))
			abort();
		atomic_store(&submit_refusals, 2);
		int n = px_cancel(px, a[0]);
		int num = a[0];
		close(a[0]);
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b))
			abort();
		if (write(b[1], "hello", 5) != 5)
			abort();
		if (b[0] != num && b[1] != num)
			atomic_fetch_add(&st_skipped, 1);
		for (int k = 0; k < 3000 && !atomic_load(&rd.calls); k++)
			usleep(1000);
		char got[8];
		ssize_t g = recv(b[0], got, sizeof(got), MSG_DONTWAIT);
		/* (n is 2 when the other worker's read went onto the
		 * number meanwhile: it cancels that one too.) */
		if (n < 1 || atomic_load(&rd.calls) != 1 ||
		    rd.error != ECANCELED || rd.bytes || g != 5) {
			if (!atomic_exchange(&st_bad, 1))
				snprintf(st_msg, sizeof(st_msg),
					 "round %d: px_cancel %d, the read: %d "
					 "callbacks, error %d, %zu bytes; the new "
					 "socket: recv %zd", i, n,
					 atomic_load(&rd.calls), rd.error,
					 rd.bytes, g);
		}
		close(a[1]);
		close(b[0]);
		close(b[1]);
	}
	atomic_fetch_add(&st_finished, 1);
	return NULL;
}

static void cancel_refused_reuse_threads_with(const char *engine,
					      bool dedicated)
{
	char err[256];
	pthread_t loops[2], workers[ST_THREADS], flip;

	atomic_store(&st_bad, 0);
	atomic_store(&st_skipped, 0);
	atomic_store(&st_finished, 0);
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	atomic_store(&ds_looping, true);
	if (!dedicated)
		for (int i = 0; i < 2; i++)
			assert_int_equal(pthread_create(&loops[i], NULL, ds_loop,
							NULL), 0);
	atomic_store(&st_flipping, true);
	assert_int_equal(pthread_create(&flip, NULL, st_flip_main, NULL), 0);
	for (int i = 0; i < ST_THREADS; i++)
		assert_int_equal(pthread_create(&workers[i], NULL,
						st_worker_main, NULL), 0);
	/* A dedicated processor's callbacks run in the application's
	 * threads: this one. */
	while (dedicated && atomic_load(&st_finished) < ST_THREADS)
		px_handle_events(px, 2);
	for (int i = 0; i < ST_THREADS; i++)
		pthread_join(workers[i], NULL);
	atomic_store(&st_flipping, false);
	pthread_join(flip, NULL);
	atomic_store(&enter_error, 0);
	atomic_store(&submit_refusals, 0);
	if (!dedicated) {
		atomic_store(&ds_looping, false);
		px_stop(px);
		for (int i = 0; i < 2; i++)
			pthread_join(loops[i], NULL);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	printf("%s: %d of %d rounds with the number taken elsewhere\n",
	       engine, atomic_load(&st_skipped), ST_THREADS * ST_ROUNDS);
	if (atomic_load(&st_bad))
		fail_msg("%s: %s", engine, st_msg);
}

static void cancel_refused_reuse_threads(void **state)
{
	(void)state;
	cancel_refused_reuse_threads_with("uring rings=1", false);
	cancel_refused_reuse_threads_with("uring rings=2", false);
	cancel_refused_reuse_threads_with("uring rings=1 processor=dedicated",
					  true);
	cancel_refused_reuse_threads_with("uring rings=1 ring_flags=sqpoll",
					  false);
}

/* The same from callbacks: two chains of posts, each of whose CB_ROUNDS
 * callbacks starts a read on the read end of a new pipe (a pipe's read
 * gets its SQE at the start, where a socket's started by a callback is
 * held back until the next prepare), cancels it with its submits refused
 * (io_uring_submit refused twice), closes the number and takes it back at
 * once for a new socketpair with "hello" waiting, then posts the next
 * round.  Two loop threads run the chains (or, on a dedicated processor,
 * this thread, beside the processor's own leader) while a third thread
 * has every submitting enter of the leaders fail with EAGAIN one
 * millisecond in two.  So a cancel comes from a loop thread while the
 * other thread leads and its enter may be taking the read's SQE: the
 * wait of fixed problem 317, made in a callback.  Each cancelled read
 * must end once with ECANCELED and 0 bytes (its pipe's writer stays open
 * until the end and never writes), and each new socket keep its "hello";
 * no hang.  Passes (added by a helper's review of 2026-12-07, rare
 * failures of today's new tests).  It seldom if ever meets the window
 * itself (not in 5 runs with that fix undone): a callback's start wakes
 * no leader, so the SQE is rarely published by another thread's prepare
 * before the cancel; cancel_in_callback_during_held_enter stages it. */
#define CB_CHAINS 2
#define CB_ROUNDS 100

typedef struct cb_round {
	cr_rec rd;
	int a1, b[2], num, n, start_rc;
} cb_round;

static cb_round cb_rounds[CB_CHAINS][CB_ROUNDS];
static atomic_int cb_next[CB_CHAINS], cb_chains_done;

static void cb_round_cb(const px_completion *c)
{
	int ch = (int)(intptr_t)c->user;
	int i = atomic_load(&cb_next[ch]);
	cb_round *r = &cb_rounds[ch][i];
	int a[2];

	if (pipe2(a, O_CLOEXEC))
		abort();
	r->start_rc = px_read_stream(px, a[0], r->rd.buf, sizeof(r->rd.buf),
				     cr_cb, &r->rd);
	atomic_store(&submit_refusals, 2);
	r->n = r->start_rc ? 0 : px_cancel(px, a[0]);
	r->num = a[0];
	r->a1 = a[1];
	close(a[0]);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, r->b))
		abort();
	if (write(r->b[1], "hello", 5) != 5)
		abort();
	atomic_store(&cb_next[ch], i + 1);
	if (i + 1 == CB_ROUNDS || px_post(px, cb_round_cb, c->user))
		atomic_fetch_add(&cb_chains_done, 1);
}

static bool cb_all_called(void)
{
	for (int ch = 0; ch < CB_CHAINS; ch++)
		for (int i = 0; i < atomic_load(&cb_next[ch]); i++)
			if (!atomic_load(&cb_rounds[ch][i].rd.calls))
				return false;
	return true;
}

static void cancel_refused_reuse_callbacks_with(const char *engine,
						bool dedicated)
{
	char err[256];
	pthread_t loops[2], flip;

	memset(cb_rounds, 0, sizeof(cb_rounds));
	atomic_store(&cb_chains_done, 0);
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	atomic_store(&ds_looping, true);
	if (!dedicated)
		for (int i = 0; i < 2; i++)
			assert_int_equal(pthread_create(&loops[i], NULL, ds_loop,
							NULL), 0);
	atomic_store(&st_flipping, true);
	assert_int_equal(pthread_create(&flip, NULL, st_flip_main, NULL), 0);
	for (int ch = 0; ch < CB_CHAINS; ch++) {
		atomic_store(&cb_next[ch], 0);
		assert_int_equal(px_post(px, cb_round_cb, (void *)(intptr_t)ch),
				 0);
	}
	/* (A dedicated processor's callbacks run in this thread.) */
	for (int k = 0; k < 20000 && (atomic_load(&cb_chains_done) <
				      CB_CHAINS || !cb_all_called()); k++)
		if (dedicated)
			px_handle_events(px, 1);
		else
			usleep(1000);
	atomic_store(&st_flipping, false);
	pthread_join(flip, NULL);
	atomic_store(&enter_error, 0);
	atomic_store(&submit_refusals, 0);
	bool chains = atomic_load(&cb_chains_done) == CB_CHAINS;
	bool called = cb_all_called();
	if (!dedicated) {
		atomic_store(&ds_looping, false);
		px_stop(px);
		for (int i = 0; i < 2; i++)
			pthread_join(loops[i], NULL);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	if (!chains || !called)
		fail_msg("%s: within 20 s the chains came to %d and %d rounds of "
			 "%d, and %s cancelled read had called back", engine,
			 atomic_load(&cb_next[0]), atomic_load(&cb_next[1]),
			 CB_ROUNDS, called ? "every" : "not every");
	int reused = 0;
	for (int ch = 0; ch < CB_CHAINS; ch++)
		for (int i = 0; i < CB_ROUNDS; i++) {
			cb_round *r = &cb_rounds[ch][i];
			char got[8];
			ssize_t g = recv(r->b[0], got, sizeof(got), MSG_DONTWAIT);

			reused += r->b[0] == r->num || r->b[1] == r->num;
			/* (n is 2 when the other chain's cancelled read was
			 * still on the number: it is cancelled again.) */
			if (r->start_rc || r->n < 1 ||
			    atomic_load(&r->rd.calls) != 1 ||
			    r->rd.error != ECANCELED || r->rd.bytes || g != 5 ||
			    memcmp(got, "hello", 5))
				fail_msg("%s: chain %d, round %d: start %d, "
					 "px_cancel %d, the read: %d callbacks, "
					 "error %d, %zu bytes; the new socket: "
					 "recv %zd", engine, ch, i, r->start_rc,
					 r->n, atomic_load(&r->rd.calls),
					 r->rd.error, r->rd.bytes, g);
			close(r->a1);
			close(r->b[0]);
			close(r->b[1]);
		}
	printf("%s: %d of %d rounds with the number taken back by the new "
	       "socketpair\n", engine, reused, CB_CHAINS * CB_ROUNDS);
}

static void cancel_refused_reuse_callbacks(void **state)
{
	(void)state;
	cancel_refused_reuse_callbacks_with("uring rings=1", false);
	cancel_refused_reuse_callbacks_with("uring rings=2", false);
	cancel_refused_reuse_callbacks_with("uring rings=1 processor=dedicated",
					    true);
}

/* ------------------------------------------------------------------ */
/* A cancel refused while its read is in the kernel                     */
/* ------------------------------------------------------------------ */

/* A read already in the kernel (armed on its socket's poll) is cancelled
 * while the kernel refuses submissions: px_cancel's ASYNC_CANCEL stays in
 * the SQ (its submit refused with EAGAIN, and the leaders' submitting
 * enters too, for IK_MS), and the peer then writes a byte.  The read must
 * end once with ECANCELED and 0 bytes, and the byte stay in the socket:
 * px_cancel(3) promises that a cancelled read takes nothing sent after the
 * call returned (fixed problem 278).  Before the fix (fixed problem 318)
 * the read took the byte: the cancel reached the kernel only once the
 * refusals ended.
 *
 * how: IK_NONE, no loop thread (the test's px_handle_events(px, 0) put
 * the read in the kernel); IK_LOOP, a loop thread waiting in the kernel,
 * the read submitted by its start; IK_DEDICATED, the dedicated leader,
 * woken by the start's kick, submitted it; IK_FULL, as IK_NONE on a
 * one-entry SQ that another read's SQE fills before px_cancel, whose
 * ASYNC_CANCEL then finds no SQE (its submit refused) and waits on the
 * provider's stalled-cancel list; IK_CLOSE, as IK_NONE with px_close in
 * place of px_cancel (the byte is then sent with MSG_NOSIGNAL, and
 * refused once the socket has gone: the read must not take it either). */
enum { IK_NONE, IK_LOOP, IK_DEDICATED, IK_FULL, IK_CLOSE };
#define IK_MS 30

static void cancel_refused_in_kernel_with(const char *engine, int how)
{
	char err[256];
	int a[2], k[2];
	cr_rec rd, keep;
	pthread_t loop = 0;

	memset(&rd, 0, sizeof(rd));
	memset(&keep, 0, sizeof(keep));
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, k),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a),
			 0);
	if (how == IK_LOOP || how == IK_DEDICATED)
		/* Keeps the leader waiting in the kernel. */
		assert_int_equal(px_read_stream(px, k[0], keep.buf,
						sizeof(keep.buf), cr_cb, &keep),
				 0);
	if (how == IK_LOOP) {
		atomic_store(&ds_looping, true);
		assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	}
	usleep(20000);
	assert_int_equal(px_read_stream(px, a[0], rd.buf, sizeof(rd.buf), cr_cb,
					&rd), 0);
	if (how == IK_NONE || how == IK_FULL || how == IK_CLOSE)
		for (int i = 0; i < 3; i++)
			px_handle_events(px, 0);
	usleep(20000);  /* in the kernel, armed on the socket's poll */
	atomic_store(&enter_error, EAGAIN);
	atomic_store(&submit_refusals, 1000000);
	if (how == IK_FULL)
		assert_int_equal(px_read_stream(px, k[0], keep.buf,
						sizeof(keep.buf), cr_cb, &keep),
				 0);
	cr_rec closed;
	memset(&closed, 0, sizeof(closed));
	if (how == IK_CLOSE) {
		assert_int_equal(px_close(px, a[0], cr_cb, &closed), 0);
		ssize_t n = send(a[1], "x", 1, MSG_NOSIGNAL);
		assert_true(n == 1 || (n < 0 && errno == EPIPE));
	} else {
		assert_int_equal(px_cancel(px, a[0]), 1);
		assert_int_equal(write(a[1], "x", 1), 1);
	}
	usleep(IK_MS * 1000);
	atomic_store(&submit_refusals, 0);
	atomic_store(&enter_error, 0);
	if (how == IK_LOOP)
		assert_int_equal(px_post(px, cr_post_cb, NULL), 0);
	for (int i = 0; i < 1000 && !atomic_load(&rd.calls); i++)
		if (how == IK_LOOP)
			usleep(1000);
		else
			px_handle_events(px, 2);
	if (how == IK_LOOP) {
		atomic_store(&ds_looping, false);
		px_stop(px);
		pthread_join(loop, NULL);
	}
	printf("%s, %s: the cancelled read: %d callbacks, error %d, %zu "
	       "bytes\n", engine, how == IK_NONE ? "no loop thread" :
	       how == IK_LOOP ? "a loop thread" :
	       how == IK_FULL ? "SQ full" :
	       how == IK_CLOSE ? "px_close" : "dedicated",
	       atomic_load(&rd.calls), rd.error, rd.bytes);
	if (atomic_load(&rd.calls) != 1 || rd.error != ECANCELED ||
	    rd.bytes != 0)
		fail_msg("%s: the cancelled read: %d callbacks, error %d, %zu "
			 "bytes", engine, atomic_load(&rd.calls), rd.error,
			 rd.bytes);
	char got[4] = { 0 };
	if (how != IK_CLOSE) {
		assert_int_equal(recv(a[0], got, sizeof(got), MSG_DONTWAIT), 1);
		assert_int_equal(got[0], 'x');
	} else {
		for (int i = 0; i < 1000 && !atomic_load(&closed.calls); i++)
			px_handle_events(px, 2);
		assert_int_equal(atomic_load(&closed.calls), 1);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	assert_int_equal(atomic_load(&keep.calls),
			 how == IK_NONE || how == IK_CLOSE ? 0 : 1);
	if (how != IK_CLOSE)
		close(a[0]);
	close(a[1]);
	close(k[0]);
	close(k[1]);
}

static void cancel_refused_in_kernel_then_data(void **state)
{
	(void)state;
	cancel_refused_in_kernel_with("uring rings=1", IK_NONE);
	cancel_refused_in_kernel_with("uring rings=2", IK_NONE);
	cancel_refused_in_kernel_with("uring rings=1", IK_LOOP);
	cancel_refused_in_kernel_with("uring rings=2", IK_LOOP);
	cancel_refused_in_kernel_with("uring rings=1 processor=dedicated",
				      IK_DEDICATED);
	cancel_refused_in_kernel_with("uring ring=1 rings=1", IK_FULL);
	cancel_refused_in_kernel_with("uring rings=1", IK_CLOSE);
	cancel_refused_in_kernel_with("uring rings=2", IK_CLOSE);
}

/* ------------------------------------------------------------------ */
/* A cancel after an enter that took none of the SQEs                   */
/* ------------------------------------------------------------------ */

/* The leader's prepare published one read's SQE, and while its enter was
 * held (io_uring_enter2's wrap) another start's submit took that SQE and
 * its own: let go, the enter finds the SQ empty and takes nothing.  Then
 * a read is started and cancelled while the kernel refuses submissions,
 * for TN_REFUSE_MS: its SQE waits in the SQ, and the SQ head, moved by
 * just what the other start's submit took, cannot tell that enter from
 * one yet to take the SQE, so the cancel waits for the enter to return
 * (ur_void_unsubmitted).  Should such an enter go on to wait for
 * completions, px_cancel would hold the mutex until the leader's wait ran
 * out (200 ms or more here): it must return within TN_LATE_MS of the
 * refusals' end.  It passes: the kernel's io_uring_enter returns at once,
 * without waiting, when it submitted fewer SQEs than it was asked to
 * (printed: px_cancel returns while the kernel still refuses).  The read
 * ends once with ECANCELED and 0 bytes, and the socket that then takes
 * its number keeps its "hello". */
#define TN_REFUSE_MS 20
#define TN_LATE_MS 100

static atomic_bool tn_refusing;
static uint64_t tn_end_ms;

static void *tn_unrefuse_main(void *arg)
{
	(void)arg;
	usleep(TN_REFUSE_MS * 1000);
	tn_end_ms = ds_now_ms();
	atomic_store(&submit_refusals, 0);
	atomic_store(&tn_refusing, false);
	return NULL;
}

static void cancel_refused_after_enter_took_none_with(const char *engine)
{
	char err[256];
	int a[2], b[2], k[2], x[2];
	cr_rec rd, keep, other;
	pthread_t loop, unrefuse;

	memset(&rd, 0, sizeof(rd));
	memset(&keep, 0, sizeof(keep));
	memset(&other, 0, sizeof(other));
	atomic_store(&hold_refuse, 0);
	hold_in = hold_go = false;
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, k),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a),
			 0);
	assert_int_equal(px_read_stream(px, k[0], keep.buf, sizeof(keep.buf),
					cr_cb, &keep), 0);
	atomic_store(&ds_looping, true);
	atomic_store(&hold_next, 1);
	assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	he_wait_held();
	/* Its submit takes the keep read's SQE and its own. */
	assert_int_equal(px_read_stream(px, x[0], other.buf, sizeof(other.buf),
					cr_cb, &other), 0);
	pthread_mutex_lock(&hold_mu);
	hold_go = true;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
	usleep(20000);  /* the enter took nothing and waits in the kernel */
	atomic_store(&submit_refusals, 1000000);
	atomic_store(&tn_refusing, true);
	assert_int_equal(px_read_stream(px, a[0], rd.buf, sizeof(rd.buf), cr_cb,
					&rd), 0);
	assert_int_equal(pthread_create(&unrefuse, NULL, tn_unrefuse_main, NULL),
			 0);
	assert_int_equal(px_cancel(px, a[0]), 1);
	uint64_t back = ds_now_ms();
	bool refusing = atomic_load(&tn_refusing);
	pthread_join(unrefuse, NULL);
	int num = a[0];
	close(a[0]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b),
			 0);
	bool reused = b[0] == num;
	if (reused)
		assert_int_equal(write(b[1], "hello", 5), 5);
	/* (The post wakes the leader, whose interrupt's submit takes the
	 * NOP.) */
	assert_int_equal(px_post(px, cr_post_cb, NULL), 0);
	for (int i = 0; i < 1000 && !atomic_load(&rd.calls); i++)
		usleep(1000);
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(loop, NULL);
	long late = refusing ? 0 : (long)(back - tn_end_ms);
	printf("%s: px_cancel returned %s, %ld ms after the refusals ended\n",
	       engine, refusing ? "while the kernel refused" : "after",
	       late);
	if (late > TN_LATE_MS)
		fail_msg("%s: px_cancel returned %ld ms after the refusals "
			 "ended (at most %d)", engine, late, TN_LATE_MS);
	if (atomic_load(&rd.calls) != 1 || rd.error != ECANCELED ||
	    rd.bytes != 0)
		fail_msg("%s: the cancelled read: %d callbacks, error %d, %zu "
			 "bytes", engine, atomic_load(&rd.calls), rd.error,
			 rd.bytes);
	if (reused) {
		char got[8] = { 0 };
		assert_int_equal(recv(b[0], got, sizeof(got), MSG_DONTWAIT), 5);
		assert_memory_equal(got, "hello", 5);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	assert_int_equal(atomic_load(&keep.calls), 1);
	assert_int_equal(atomic_load(&other.calls), 1);
	close(a[1]);
	close(b[0]);
	close(b[1]);
	close(k[0]);
	close(k[1]);
	close(x[0]);
	close(x[1]);
	if (!reused)
		skip();  /* (the number went elsewhere) */
}

static void cancel_refused_after_enter_took_none(void **state)
{
	(void)state;
	cancel_refused_after_enter_took_none_with("uring rings=1");
	cancel_refused_after_enter_took_none_with("uring rings=2");
}

/* ------------------------------------------------------------------ */
/* A terminal write in an io-wq worker, its cancel refused              */
/* ------------------------------------------------------------------ */

/* A write to a blocking terminal goes to an io-wq worker (IOSQE_ASYNC),
 * which the kernel's terminal write holds while the terminal's output is
 * full (its master unread).  px_cancel of it while the kernel refuses
 * submissions (io_uring_submit and the submitting enters, for IK_MS):
 * its ASYNC_CANCEL stays in the SQ.  Then the master is read until
 * nothing more comes: the write must have stopped when px_cancel
 * returned, so the master gets exactly the bytes the write reports
 * (ECANCELED or its partial count), fewer than it was given.  Before the
 * fix (fixed problem 318) the worker went on writing as the master
 * drained and the write completed whole.  Skipped without a
 * pseudo-terminal. */
#define TW_LEN (1u << 20)

static void cancel_refused_tty_write_with(const char *engine)
{
	char err[256], name[128];
	struct termios tio;
	cr_rec w;
	static char big[TW_LEN], got[65536];

	memset(&w, 0, sizeof(w));
	memset(big, 'z', sizeof(big));
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0 ||
	    ptsname_r(m, name, sizeof(name)) != 0)
		skip();
	int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0 || tcgetattr(s, &tio) != 0)
		skip();
	cfmakeraw(&tio);
	assert_int_equal(tcsetattr(s, TCSANOW, &tio), 0);
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	assert_int_equal(px_write_stream(px, s, big, sizeof(big), cr_cb, &w), 0);
	for (int i = 0; i < 5; i++)
		px_handle_events(px, 10);
	assert_int_equal(atomic_load(&w.calls), 0);  /* held by the kernel */
	atomic_store(&enter_error, EAGAIN);
	atomic_store(&submit_refusals, 1000000);
	assert_int_equal(px_cancel(px, s), 1);
	size_t total = 0;
	struct pollfd pf = { .fd = m, .events = POLLIN };
	while (poll(&pf, 1, 50) > 0) {
		ssize_t n = read(m, got, sizeof(got));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	atomic_store(&submit_refusals, 0);
	atomic_store(&enter_error, 0);
	for (int i = 0; i < 500 && !atomic_load(&w.calls); i++)
		px_handle_events(px, 2);
	printf("%s: the cancelled terminal write: %d callbacks, error %d, "
	       "%zu bytes; the master got %zu after px_cancel\n", engine,
	       atomic_load(&w.calls), w.error, w.bytes, total);
	assert_int_equal(atomic_load(&w.calls), 1);
	if (total >= TW_LEN || w.bytes != total ||
	    (w.error != 0 && w.error != ECANCELED))
		fail_msg("%s: the cancelled write went on after px_cancel: "
			 "error %d, %zu bytes reported, %zu on the master",
			 engine, w.error, w.bytes, total);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&w.calls), 1);
	close(s);
	close(m);
}

static void cancel_refused_tty_write(void **state)
{
	(void)state;
	cancel_refused_tty_write_with("uring rings=1");
	cancel_refused_tty_write_with("uring rings=2");
}

/* A terminal write queued for an io-wq worker, not yet run, cancelled
 * while the kernel refuses the cancel's submit, its number then closed
 * and taken by a socketpair.  The worker looks the write's descriptor
 * number up only when it runs it: here the ring's io-wq may have one
 * worker for such work (IORING_REGISTER_IOWQ_MAX_WORKERS on the
 * library's ring, found in /proc/self/fd), which a 1 MiB write to a
 * first terminal, its master unread, holds.  The master is then read
 * whole, the kernel still refusing submissions, which frees the worker
 * for what is queued: the queued write must end once with ECANCELED and
 * 0 bytes, and the socket under its old number receive nothing.  Before the fix
 * (fixed problem 318) the worker ran it on the socket, which got its
 * "hello".  Skipped without a pseudo-terminal or the register call. */
static int tq_open_pty(int *m, int *s)
{
	char name[128];
	struct termios tio;

	*m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*m < 0 || grantpt(*m) != 0 || unlockpt(*m) != 0 ||
	    ptsname_r(*m, name, sizeof(name)) != 0)
		return -1;
	*s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*s < 0 || tcgetattr(*s, &tio) != 0)
		return -1;
	cfmakeraw(&tio);
	return tcsetattr(*s, TCSANOW, &tio);
}

/* One unbound io-wq worker for every io_uring instance of the process;
 * how many instances were found. */
static int tq_one_worker(void)
{
	char path[64], link[64];
	int found = 0;

	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, "anon_inode:[io_uring]") != 0)
			continue;
		unsigned vals[2] = { 0, 1 };  /* bounded unchanged, unbound 1 */
		if (syscall(__NR_io_uring_register, fd,
			    IORING_REGISTER_IOWQ_MAX_WORKERS, vals, 2) != 0)
			return -1;
		found++;
	}
	return found;
}

static void cancel_refused_queued_tty_write_with(const char *engine)
{
	char err[256];
	int m1, s1, m2, s2, sp[2];
	cr_rec w1, w2;
	static char big[TW_LEN];

	memset(&w1, 0, sizeof(w1));
	memset(&w2, 0, sizeof(w2));
	memset(big, 'z', sizeof(big));
	if (tq_open_pty(&m1, &s1) != 0 || tq_open_pty(&m2, &s2) != 0)
		skip();
	assert_int_equal(px_create(&px, engine, err, sizeof(err)), 0);
	if (tq_one_worker() <= 0) {
		px_destroy(px);
		px = NULL;
		skip();
	}
	assert_int_equal(px_write_stream(px, s1, big, sizeof(big), cr_cb, &w1),
			 0);
	for (int i = 0; i < 5; i++)
		px_handle_events(px, 10);
	assert_int_equal(px_write_stream(px, s2, "hello", 5, cr_cb, &w2), 0);
	for (int i = 0; i < 5; i++)
		px_handle_events(px, 10);
	/* Both held: the first by its terminal, the second behind it. */
	assert_int_equal(atomic_load(&w1.calls), 0);
	assert_int_equal(atomic_load(&w2.calls), 0);
	atomic_store(&enter_error, EAGAIN);
	atomic_store(&submit_refusals, 1000000);
	assert_int_equal(px_cancel(px, s2), 1);
	int num = s2;
	close(s2);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp),
			 0);
	bool reused = sp[0] == num;
	/* Frees the worker: the first write ends once its master has read
	 * all of it. */
	static char drain[65536];
	size_t total = 0;
	struct pollfd pf = { .fd = m1, .events = POLLIN };
	while (total < TW_LEN && poll(&pf, 1, 1000) > 0) {
		ssize_t k = read(m1, drain, sizeof(drain));
		if (k <= 0)
			break;
		total += (size_t)k;
	}
	assert_int_equal(total, TW_LEN);
	usleep(20000);  /* (time for the worker to run what it finds) */
	atomic_store(&submit_refusals, 0);
	atomic_store(&enter_error, 0);
	for (int i = 0; i < 500 && (!atomic_load(&w1.calls) ||
				    !atomic_load(&w2.calls)); i++)
		px_handle_events(px, 2);
	usleep(20000);
	char got[8];
	ssize_t n = recv(sp[1], got, sizeof(got), MSG_DONTWAIT);
	printf("%s: the queued terminal write: %d callbacks, error %d, %zu "
	       "bytes; the socket under its number got %zd\n", engine,
	       atomic_load(&w2.calls), w2.error, w2.bytes, n);
	assert_int_equal(atomic_load(&w1.calls), 1);
	if (atomic_load(&w2.calls) != 1 || w2.error != ECANCELED ||
	    w2.bytes != 0 || n > 0)
		fail_msg("%s: the cancelled queued write: %d callbacks, error "
			 "%d, %zu bytes; the socket under its number got %zd",
			 engine, atomic_load(&w2.calls), w2.error, w2.bytes, n);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	close(s1);
	close(m1);
	close(m2);
	close(sp[0]);
	close(sp[1]);
	if (!reused)
		skip();  /* (the number went elsewhere) */
}

static void cancel_refused_queued_tty_write(void **state)
{
	(void)state;
	cancel_refused_queued_tty_write_with("uring rings=1");
	cancel_refused_queued_tty_write_with("uring rings=2");
}

/* ------------------------------------------------------------------ */
/* A queue head waiting for an SQE, cancelled                           */
/* ------------------------------------------------------------------ */

/* Three writes queued on one socket behind a fourth, on a one-entry SQ:
 * the fourth completes while the SQ is full and the kernel refuses
 * submissions, so the first of the three, now its queue's head, waits on
 * the provider's stalled list for an SQE.  The refusals end and px_cancel
 * cancels the three, in start order: each must end with ECANCELED and
 * send nothing (their bytes would follow a cancelled write's, and
 * writes go out in start order: the ones that went out are a prefix).
 * Before the fix the stalled head's cancel handed its place to the
 * second write at once, and px_cancel's own submit sent it.  No loop
 * thread: the test leads with px_handle_events(px, 0).  The fourth
 * write's CQE is kept out of the first lead by 70 file reads before it
 * (a lead reaps at most 64 CQEs per ring). */
#define SH_FILL 70

typedef struct sh_rec {
	atomic_int calls;
	int error;
	size_t bytes;
} sh_rec;

static void sh_cb(const px_completion *c)
{
	sh_rec *r = c->user;

	r->error = c->error;
	r->bytes = c->bytes;
	atomic_fetch_add(&r->calls, 1);
}

/* px on "uring ring=1 rings=1" (an SQ of one entry), socketpairs s and t,
 * and /dev/zero open (returned). */
static int sh_begin(int s[2], int t[2])
{
	char err[256];

	assert_int_equal(px_create(&px, "uring ring=1 rings=1", err,
				   sizeof(err)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, t),
			 0);
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	assert_true(zero >= 0);
	return zero;
}

/* SH_FILL file reads of zero started, each submitting the one before
 * (the SQ has one entry). */
static void sh_fill(int zero, char fbuf[SH_FILL][8], sh_rec *fill)
{
	for (int i = 0; i < SH_FILL; i++)
		assert_int_equal(px_read_file(px, zero, fbuf[i],
					      sizeof(fbuf[i]), 0, sh_cb,
					      &fill[i]), 0);
}

/* With prev and three operations after it started on the stream behind
 * the fill: a turn submits the last one's SQE and reaps 64 of the CQEs (the
 * test skipped when prev's came among them); a read of rfd fills the
 * SQE, unsubmitted as nobody leads; then, io_uring_submit refused
 * refusals times and the enter failing with EAGAIN, a turn reaps the
 * rest: prev completes, and the first of the three finds no SQE.  The caller
 * ends the refusals. */
static void sh_stall(sh_rec *prev, int rfd, char *rbuf, size_t len,
		     sh_rec *rd, int refusals)
{
	assert_int_equal(px_handle_events(px, 0) >= 0, 1);
	if (atomic_load(&prev->calls))
		skip();  /* (its CQE came among the first 64) */
	assert_int_equal(px_read_stream(px, rfd, rbuf, len, sh_cb, rd), 0);
	atomic_store(&submit_refusals, refusals);
	atomic_store(&enter_error, EAGAIN);
	assert_int_equal(px_handle_events(px, 0) >= 0, 1);
}

/* After sh_stall: prev completed with its byte, none of w yet. */
static void sh_stalled(sh_rec *prev, sh_rec *w)
{
	assert_int_equal(atomic_load(&prev->calls), 1);
	assert_int_equal(prev->bytes, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(atomic_load(&w[i].calls), 0);
}

static void stalled_head_cancel_sends_nothing(void **state)
{
	char fbuf[SH_FILL][8], rbuf[8];
	int s[2], t[2], zero;
	sh_rec fill[SH_FILL], prev, w[3], rd;

	(void)state;
	memset(fill, 0, sizeof(fill));
	memset(&prev, 0, sizeof(prev));
	memset(w, 0, sizeof(w));
	memset(&rd, 0, sizeof(rd));
	zero = sh_begin(s, t);
	sh_fill(zero, fbuf, fill);
	assert_int_equal(px_write_stream(px, s[0], "p", 1, sh_cb, &prev), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(px_write_stream(px, s[0], "w", 1, sh_cb,
						 &w[i]), 0);
	sh_stall(&prev, t[0], rbuf, sizeof(rbuf), &rd, 1000);
	atomic_store(&submit_refusals, 0);
	atomic_store(&enter_error, 0);
	sh_stalled(&prev, w);
	assert_int_equal(px_cancel(px, s[0]), 3);
	for (int k = 0; k < 100; k++) {
		bool all = true;
		for (int i = 0; i < 3; i++)
			all = all && atomic_load(&w[i].calls);
		if (all)
			break;
		px_handle_events(px, 2);
	}
	char got[8];
	ssize_t n = recv(s[1], got, sizeof(got), MSG_DONTWAIT);
	for (int i = 0; i < 3; i++) {
		if (atomic_load(&w[i].calls) != 1)
			fail_msg("write %d: %d callbacks", i,
				 atomic_load(&w[i].calls));
		if (w[i].error != ECANCELED || w[i].bytes)
			fail_msg("write %d of the three cancelled: error %d, "
				 "%zu bytes (the peer got %zd)", i, w[i].error,
				 w[i].bytes, n);
	}
	assert_int_equal(n, 1);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	for (int i = 0; i < SH_FILL; i++)
		assert_int_equal(atomic_load(&fill[i].calls), 1);
	close(zero);
	close(s[0]);
	close(s[1]);
	close(t[0]);
	close(t[1]);
}

/* The state of stalled_head_cancel_sends_nothing (a queue's head waits on
 * the provider's stalled list for an SQE of a one-entry SQ, two more
 * queued behind it), ended three other ways.  how: 0, the head is a
 * write-all whose deadline (px_start_op, 30 ms) passes while it waits
 * and the kernel still refuses submissions: it ends with ETIMEDOUT and
 * nothing sent, and the two behind it, which a deadline does not end,
 * must still go out, once each and in order, once the refusals end;
 * 1, px_close of the writes: all three ECANCELED, nothing of theirs
 * sent, the peer sees the end of the stream right after the first
 * write's byte; 2, three reads instead of writes, px_cancel: all
 * ECANCELED with no bytes, the peer's bytes still in the socket, and a
 * read on a new socketpair (given the cancelled one's number when it is
 * closed) gets its own byte. */
static void sh_cb_close(const px_completion *c)
{
	sh_cb(c);
}

static void stalled_head_other_ends(int how)
{
	char fbuf[SH_FILL][8], rbuf[8], rb[3], pb;
	int s[2], t[2], zero;
	sh_rec fill[SH_FILL], prev, w[3], rd, closed;
	const char *wdata[3] = { "abcdefgh", "B", "C" };
	bool reads = how == 2;

	memset(fill, 0, sizeof(fill));
	memset(&prev, 0, sizeof(prev));
	memset(w, 0, sizeof(w));
	memset(&rd, 0, sizeof(rd));
	memset(&closed, 0, sizeof(closed));
	zero = sh_begin(s, t);
	if (reads)  /* the first read takes "p", the three find "xyz" */
		assert_int_equal(write(s[1], "pxyz", 4), 4);
	sh_fill(zero, fbuf, fill);
	if (reads) {
		assert_int_equal(px_read_stream(px, s[0], &pb, 1, sh_cb, &prev),
				 0);
		for (int i = 0; i < 3; i++)
			assert_int_equal(px_read_stream(px, s[0], &rb[i], 1,
							sh_cb, &w[i]), 0);
	} else {
		assert_int_equal(px_write_stream(px, s[0], "p", 1, sh_cb, &prev),
				 0);
		px_op_desc d = { .op = PX_OP_WRITE_STREAM, .fd = s[0],
				 .buf = (void *)wdata[0], .len = 8,
				 .flags = PX_OPF_WRITE_ALL,
				 .timeout_ns = how == 0 ? 30000000u : 0,
				 .cb = sh_cb, .user = &w[0] };
		assert_int_equal(px_start_op(px, &d), 0);
		for (int i = 1; i < 3; i++)
			assert_int_equal(px_write_stream_all(px, s[0],
							     wdata[i], 1, sh_cb,
							     &w[i]), 0);
	}
	sh_stall(&prev, t[0], rbuf, sizeof(rbuf), &rd, 1000000);
	sh_stalled(&prev, w);
	if (how == 0) {
		/* The deadline passes with the head still waiting. */
		uint64_t end = ds_now_ms() + 2000;
		while (!atomic_load(&w[0].calls) && ds_now_ms() < end)
			px_handle_events(px, 5);
	}
	atomic_store(&submit_refusals, 0);
	atomic_store(&enter_error, 0);
	if (how == 0)
		assert_int_equal(atomic_load(&w[0].calls), 1);
	else if (how == 1)
		assert_int_equal(px_close(px, s[0], sh_cb_close, &closed), 0);
	else
		assert_int_equal(px_cancel(px, s[0]), 3);
	for (int k = 0; k < 200; k++) {
		bool all = how != 1 || atomic_load(&closed.calls);
		for (int i = 0; i < 3; i++)
			all = all && atomic_load(&w[i].calls);
		if (all)
			break;
		px_handle_events(px, 5);
	}
	char got[16];
	ssize_t n = reads ? recv(s[0], got, sizeof(got), MSG_DONTWAIT)
			  : recv(s[1], got, sizeof(got), MSG_DONTWAIT);
	for (int i = 0; i < 3; i++)
		if (atomic_load(&w[i].calls) != 1)
			fail_msg("%s %d: %d callbacks", reads ? "read" : "write",
				 i, atomic_load(&w[i].calls));
	if (how == 0) {
		if (w[0].error != ETIMEDOUT || w[0].bytes)
			fail_msg("the write-all past its deadline: error %d, %zu "
				 "bytes", w[0].error, w[0].bytes);
		for (int i = 1; i < 3; i++)
			if (w[i].error || w[i].bytes != 1)
				fail_msg("write %d behind it: error %d, %zu bytes",
					 i, w[i].error, w[i].bytes);
		if (n != 3 || memcmp(got, "pBC", 3))
			fail_msg("the peer got %zd bytes, \"%.*s\", not \"pBC\"",
				 n, n > 0 ? (int)n : 0, got);
	} else {
		for (int i = 0; i < 3; i++)
			if (w[i].error != ECANCELED || w[i].bytes)
				fail_msg("%s %d of the three %s: error %d, %zu "
					 "bytes", reads ? "read" : "write", i,
					 how == 1 ? "closed" : "cancelled",
					 w[i].error, w[i].bytes);
		if (how == 1) {
			assert_int_equal(atomic_load(&closed.calls), 1);
			assert_int_equal(closed.error, 0);
			if (n != 1 || got[0] != 'p')
				fail_msg("the peer got %zd bytes, not the first "
					 "write's one", n);
			assert_int_equal(recv(s[1], got, sizeof(got),
					      MSG_DONTWAIT), 0);  /* closed */
		} else if (n != 3 || memcmp(got, "xyz", 3)) {
			fail_msg("after the cancelled reads the socket held "
				 "%zd bytes, not \"xyz\"", n);
		}
	}
	if (reads) {
		/* The number comes back for a new socket, whose read gets
		 * its own byte. */
		int u[2];
		sh_rec nr;
		char nb = 0;
		memset(&nr, 0, sizeof(nr));
		close(s[0]);
		close(s[1]);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, u), 0);
		assert_int_equal(px_read_stream(px, u[0], &nb, 1, sh_cb, &nr),
				 0);
		assert_int_equal(write(u[1], "n", 1), 1);
		for (int k = 0; k < 200 && !atomic_load(&nr.calls); k++)
			px_handle_events(px, 5);
		assert_int_equal(atomic_load(&nr.calls), 1);
		if (nr.error || nr.bytes != 1 || nb != 'n')
			fail_msg("the read on the reused number: error %d, %zu "
				 "bytes", nr.error, nr.bytes);
		close(u[0]);
		close(u[1]);
	} else {
		if (how != 1)
			close(s[0]);
		close(s[1]);
	}
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	assert_int_equal(atomic_load(&rd.calls), 1);
	for (int i = 0; i < SH_FILL; i++)
		assert_int_equal(atomic_load(&fill[i].calls), 1);
	close(zero);
	close(t[0]);
	close(t[1]);
}

static void stalled_head_deadline_rest_in_order(void **state)
{
	(void)state;
	stalled_head_other_ends(0);
}

static void stalled_head_close_sends_nothing(void **state)
{
	(void)state;
	stalled_head_other_ends(1);
}

static void stalled_read_head_cancel_takes_nothing(void **state)
{
	(void)state;
	stalled_head_other_ends(2);
}

/* ------------------------------------------------------------------ */
/* Starts on a full SQPOLL ring                                         */
/* ------------------------------------------------------------------ */

/* `uring ring=1 rings=1 ring_flags=sqpoll`, one thread: a ping-pong of
 * 64-byte messages over a socketpair whose every write and read is
 * started by a callback, so each start finds the one-entry SQ holding the
 * SQE its neighbour put there a moment before, which the kernel thread
 * has not taken yet.  Such a start was given back (PX_START_AGAIN) and
 * deferred, and the leader then waited for a completion that could not
 * come before the deferred start went in: about 18 ms a round, and
 * ping_pong_one_thread_cancel_close (conformance) ran out of its 20 s.
 * Checked without timing: every round comes back (a guard of 20 s, for a
 * hang), and px_stats counts no deferred start. */
#define PP2_ROUNDS 300
#define PP2_LEN 64

typedef struct pp2 {
	int sv[2];
	int rounds;
	bool failed;
	uint8_t out[PP2_LEN], echo[PP2_LEN], back[PP2_LEN];
} pp2;

static void pp2_cb_write(const px_completion *c)
{
	pp2 *p = c->user;

	if (c->error || c->bytes != PP2_LEN)
		p->failed = true;
}

static void pp2_send(pp2 *p)
{
	memset(p->out, (uint8_t)p->rounds, PP2_LEN);
	if (px_write_stream_all(px, p->sv[0], p->out, PP2_LEN, pp2_cb_write,
				p) != 0)
		p->failed = true;
}

static void pp2_server(const px_completion *c);

static void pp2_client(const px_completion *c)
{
	pp2 *p = c->user;

	if (c->error || c->bytes != PP2_LEN ||
	    p->back[0] != (uint8_t)p->rounds) {
		p->failed = true;
		return;
	}
	if (++p->rounds == PP2_ROUNDS)
		return;
	pp2_send(p);
	if (px_read_stream(px, p->sv[0], p->back, PP2_LEN, pp2_client,
			       p) != 0)
		p->failed = true;
}

static void pp2_server(const px_completion *c)
{
	pp2 *p = c->user;

	if (c->error || c->bytes != PP2_LEN) {
		p->failed = true;
		return;
	}
	if (px_write_stream_all(px, p->sv[1], p->echo, PP2_LEN, pp2_cb_write,
				p) != 0 ||
	    (p->rounds + 1 < PP2_ROUNDS &&
	     px_read_stream(px, p->sv[1], p->echo, PP2_LEN, pp2_server,
				p) != 0))
		p->failed = true;
}

static void start_on_full_sqpoll_ring_not_deferred(void **state)
{
	char err[256];
	pp2 p;
	struct px_stats st;

	(void)state;
	memset(&p, 0, sizeof(p));
	if (px_create(&px, "uring ring=1 rings=1 ring_flags=sqpoll", err,
		      sizeof(err)) != 0) {
		print_message("no SQPOLL ring: %s\n", err);
		skip();
	}
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    p.sv), 0);
	assert_int_equal(px_read_stream(px, p.sv[1], p.echo, PP2_LEN,
					pp2_server, &p), 0);
	pp2_send(&p);
	assert_int_equal(px_read_stream(px, p.sv[0], p.back, PP2_LEN,
					    pp2_client, &p), 0);
	uint64_t end = ds_now_ms() + 20000;
	while (p.rounds < PP2_ROUNDS && !p.failed && ds_now_ms() < end)
		px_handle_events(px, 10);
	assert_false(p.failed);
	if (p.rounds < PP2_ROUNDS)
		fail_msg("%d of %d rounds in 20 s", p.rounds, PP2_ROUNDS);
	assert_int_equal(px_stats(px, &st), 0);
	if (st.deferred)
		fail_msg("%llu of %llu starts deferred on the full SQPOLL SQ "
			 "(%d rounds)", (unsigned long long)st.deferred,
			 (unsigned long long)st.started, p.rounds);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	close(p.sv[0]);
	close(p.sv[1]);
}

/* ------------------------------------------------------------------ */
/* The interrupt on a full SQPOLL ring                                  */
/* ------------------------------------------------------------------ */

/* `uring ring=1 rings=1 ring_flags=sqpoll`, one loop thread in
 * px_handle_events(px, -1): a read started from outside takes the SQ's
 * one entry and wakes the kernel thread; a px_post right after must wake
 * the leader, whose interrupt NOP needs that entry before the kernel
 * thread has taken the read.  Before the fix the NOP fell back to a flag
 * the blocked leader saw only at the end of its wait: 196 of 200 posts
 * ran 0.1 to 1 s late. */
#define PS_ROUNDS 50
#define PS_LATE_MS 200

static atomic_int ps_posted;

static void ps_post_cb(const px_completion *c)
{
	(void)c;
	atomic_fetch_add(&ps_posted, 1);
}

static void ps_read_cb(const px_completion *c)
{
	(void)c;
}

static void post_after_start_on_full_sqpoll_ring(void **state)
{
	char err[256], bufs[PS_ROUNDS][4];
	int sv[PS_ROUNDS][2], late = 0;
	uint64_t worst = 0;
	pthread_t loop;

	(void)state;
	assert_int_equal(px_create(&px, "uring ring=1 rings=1 ring_flags=sqpoll",
				   err, sizeof(err)), 0);
	atomic_store(&ps_posted, 0);
	atomic_store(&ds_looping, true);
	assert_int_equal(pthread_create(&loop, NULL, ds_loop, NULL), 0);
	usleep(20000);  /* the leader waits in the kernel */
	for (int i = 0; i < PS_ROUNDS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[i]), 0);
		int before = atomic_load(&ps_posted);
		assert_int_equal(px_read_stream(px, sv[i][0], bufs[i],
						sizeof(bufs[i]), ps_read_cb,
						NULL), 0);
		assert_int_equal(px_post(px, ps_post_cb, NULL), 0);
		uint64_t t0 = ds_now_ms();
		while (atomic_load(&ps_posted) == before &&
		       ds_now_ms() - t0 < 3000)
			usleep(100);
		uint64_t took = ds_now_ms() - t0;
		if (atomic_load(&ps_posted) == before)
			fail_msg("round %d: the post never ran", i);
		worst = took > worst ? took : worst;
		late += took > PS_LATE_MS;
		usleep(1000);
	}
	printf("%d of %d posts later than %d ms, the latest after %llu ms\n",
	       late, PS_ROUNDS, PS_LATE_MS, (unsigned long long)worst);
	atomic_store(&ds_looping, false);
	px_stop(px);
	pthread_join(loop, NULL);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	for (int i = 0; i < PS_ROUNDS; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
	/* A loaded machine may hold a thread up now and then. */
	if (late > 2)
		fail_msg("%d of %d posts made right after a start ran more "
			 "than %d ms late", late, PS_ROUNDS, PS_LATE_MS);
}

/* ------------------------------------------------------------------ */
/* More completions than the CQ holds                                   */
/* ------------------------------------------------------------------ */

/* max_aio=1 on a one-entry SQ gives a CQ of 8 entries (max_aio + SQ + 3,
 * rounded up).  48 reads started at once wait deferred behind the first
 * until the processor's starvation guard starts them all beyond the
 * limit (nothing completed for over a second), so 48 reads are in the
 * kernel on a CQ of 8.  Data for 24 of them at once, with a loop thread
 * leading: 24 CQEs, 16 beyond the CQ, which the kernel keeps
 * (IORING_FEAT_NODROP) until the leader has reaped room.  Then the loop
 * thread leaves, data comes for the other 24 with nobody reaping, a 49th
 * read waits deferred, and px_destroy: every callback exactly once, a
 * read that says 1 byte has its peer's byte and took it from the socket,
 * one that says ECANCELED left it there. */
#define CO_READS 48

typedef struct co_rec {
	atomic_int calls;
	int error;
	size_t bytes;
	uint8_t byte;
} co_rec;

static void co_cb(const px_completion *c)
{
	co_rec *r = c->user;

	r->error = c->error;
	r->bytes = c->bytes;
	atomic_fetch_add(&r->calls, 1);
}

static void cq_overflow_then_destroy(void **state)
{
	char err[256];
	int sv[CO_READS + 1][2];
	co_rec recs[CO_READS + 1];
	pthread_t loop;

	(void)state;
	memset(recs, 0, sizeof(recs));
	assert_int_equal(px_create(&px, "uring ring=1 rings=1 max_aio=1", err,
				   sizeof(err)), 0);
	for (int i = 0; i <= CO_READS; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[i]), 0);
	for (int i = 0; i < CO_READS; i++)
		assert_int_equal(px_read_stream(px, sv[i][0], &recs[i].byte, 1,
						co_cb, &recs[i]), 0);
	atomic_store(&looping, true);
	assert_int_equal(pthread_create(&loop, NULL, looper_main, NULL), 0);
	/* The guard's third check of a quiet run: 1.4 s. */
	usleep(1800 * 1000);
	for (int i = 0; i < CO_READS / 2; i++) {
		uint8_t b = (uint8_t)(i + 1);
		assert_int_equal(write(sv[i][1], &b, 1), 1);
	}
	for (int k = 0; k < 5000; k++) {
		bool all = true;
		for (int i = 0; i < CO_READS / 2; i++)
			all = all && atomic_load(&recs[i].calls);
		if (all)
			break;
		usleep(1000);
	}
	for (int i = 0; i < CO_READS / 2; i++) {
		if (atomic_load(&recs[i].calls) != 1)
			fail_msg("read %d: %d callbacks after its data", i,
				 atomic_load(&recs[i].calls));
		if (recs[i].error || recs[i].bytes != 1 ||
		    recs[i].byte != (uint8_t)(i + 1))
			fail_msg("read %d: error %d, %zu bytes, byte %u", i,
				 recs[i].error, recs[i].bytes, recs[i].byte);
	}
	atomic_store(&looping, false);
	pthread_join(loop, NULL);
	/* Nobody leads now: these CQEs stay in the CQ, and beyond it. */
	for (int i = CO_READS / 2; i < CO_READS; i++) {
		uint8_t b = (uint8_t)(i + 1);
		assert_int_equal(write(sv[i][1], &b, 1), 1);
	}
	assert_int_equal(px_read_stream(px, sv[CO_READS][0],
					&recs[CO_READS].byte, 1, co_cb,
					&recs[CO_READS]), 0);
	usleep(20000);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	for (int i = 0; i <= CO_READS; i++) {
		co_rec *r = &recs[i];
		uint8_t b = 0;
		ssize_t n = recv(sv[i][0], &b, 1, MSG_DONTWAIT);

		if (atomic_load(&r->calls) != 1)
			fail_msg("read %d: %d callbacks after px_destroy", i,
				 atomic_load(&r->calls));
		if (i < CO_READS / 2)
			continue;
		if (r->error == 0 && r->bytes == 1) {
			if (r->byte != (uint8_t)(i + 1) || n != -1)
				fail_msg("read %d: byte %u (want %u), recv "
					 "after it %zd", i, r->byte,
					 (unsigned)(uint8_t)(i + 1), n);
		} else if (r->error == ECANCELED && r->bytes == 0) {
			if (i < CO_READS && (n != 1 || b != (uint8_t)(i + 1)))
				fail_msg("read %d: ECANCELED, but its byte is "
					 "gone (recv %zd)", i, n);
		} else {
			fail_msg("read %d: error %d, %zu bytes", i, r->error,
				 r->bytes);
		}
	}
	for (int i = 0; i <= CO_READS; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
}

/* ------------------------------------------------------------------ */
/* px_destroy with a full SQ the kernel will not take for a while       */
/* ------------------------------------------------------------------ */

/* `uring ring=1 rings=1`, no loop thread: a read takes the SQ's one entry
 * unsubmitted, then, with submissions refused, 15 more reads on the same
 * and on other sockets (given back for want of an SQE: deferred) and
 * their peers' bytes for some; px_destroy while the kernel still refuses
 * the next 40 submits and enters (it must retry, not give up or spin
 * for good): every read called back once, ECANCELED with its byte left
 * in the socket, or the byte. */
#define DF_READS 16

static void *df_undo_main(void *arg)
{
	(void)arg;
	usleep(30000);
	atomic_store(&enter_error, 0);
	return NULL;
}

static void destroy_with_full_sq_refused(void **state)
{
	char err[256];
	int sv[DF_READS][2];
	co_rec recs[DF_READS];

	(void)state;
	memset(recs, 0, sizeof(recs));
	assert_int_equal(px_create(&px, "uring ring=1 rings=1", err,
				   sizeof(err)), 0);
	for (int i = 0; i < DF_READS; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv[i]), 0);
	assert_int_equal(px_read_stream(px, sv[0][0], &recs[0].byte, 1, co_cb,
					&recs[0]), 0);
	atomic_store(&submit_refusals, 1000);
	for (int i = 1; i < DF_READS; i++)
		assert_int_equal(px_read_stream(px, sv[i][0], &recs[i].byte, 1,
						co_cb, &recs[i]), 0);
	for (int i = 0; i < DF_READS; i += 3) {
		uint8_t b = (uint8_t)(i + 1);
		assert_int_equal(write(sv[i][1], &b, 1), 1);
	}
	atomic_store(&submit_refusals, 40);
	atomic_store(&enter_error, EAGAIN);
	atomic_store(&enter_refused, 0);
	pthread_t undo;
	/* The enters are refused until a thread says otherwise. */
	assert_int_equal(pthread_create(&undo, NULL, df_undo_main, NULL), 0);
	assert_int_equal(px_destroy(px), 0);
	px = NULL;
	pthread_join(undo, NULL);
	atomic_store(&enter_error, 0);
	int left = atomic_load(&submit_refusals);
	atomic_store(&submit_refusals, 0);
	printf("px_destroy met %d refused submits and %d refused enters\n",
	       40 - left, atomic_load(&enter_refused));
	assert_true(40 - left + atomic_load(&enter_refused) > 0);
	for (int i = 0; i < DF_READS; i++) {
		co_rec *r = &recs[i];
		uint8_t b = 0;
		ssize_t n = recv(sv[i][0], &b, 1, MSG_DONTWAIT);
		bool sent = i % 3 == 0;

		if (atomic_load(&r->calls) != 1)
			fail_msg("read %d: %d callbacks after px_destroy", i,
				 atomic_load(&r->calls));
		if (r->error == 0 && r->bytes == 1) {
			if (!sent || r->byte != (uint8_t)(i + 1) || n != -1)
				fail_msg("read %d: byte %u, recv after it %zd",
					 i, r->byte, n);
		} else if (r->error == ECANCELED && r->bytes == 0) {
			if (sent && (n != 1 || b != (uint8_t)(i + 1)))
				fail_msg("read %d: ECANCELED, but its byte is "
					 "gone (recv %zd)", i, n);
		} else {
			fail_msg("read %d: error %d, %zu bytes", i, r->error,
				 r->bytes);
		}
		close(sv[i][0]);
		close(sv[i][1]);
	}
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

int main(int argc, char **argv)
{
	int rc = uring_test_begin("test_uring_sqfill", "uring", 120);
	if (rc)
		return rc;
	if (argc > 1 && argv[1][0])
		cmocka_set_test_filter(argv[1]);  /* a cmocka glob */

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sqfill_ring8),
		cmocka_unit_test(sqfill_ring8_coop),
		cmocka_unit_test(sqfill_ring8_sqpoll),
		cmocka_unit_test(sqfill_ring8_dedicated),
		cmocka_unit_test(deferred_start_wakes_leader),
		cmocka_unit_test(enter_refused_backs_off),
		cmocka_unit_test(cancel_submit_refused_then_reuse),
		cmocka_unit_test(cancel_during_held_enter_then_reuse),
		cmocka_unit_test(two_cancels_during_held_enter),
		cmocka_unit_test(cancel_from_callback_refused),
		cmocka_unit_test(cancel_refused_reuse_threads),
		cmocka_unit_test(cancel_refused_in_kernel_then_data),
		cmocka_unit_test(cancel_refused_after_enter_took_none),
		cmocka_unit_test(cancel_refused_tty_write),
		cmocka_unit_test(cancel_refused_queued_tty_write),
		cmocka_unit_test(cancel_in_callback_during_held_enter),
		cmocka_unit_test(cancel_refused_reuse_callbacks),
		cmocka_unit_test(stalled_head_cancel_sends_nothing),
		cmocka_unit_test(stalled_head_deadline_rest_in_order),
		cmocka_unit_test(stalled_head_close_sends_nothing),
		cmocka_unit_test(stalled_read_head_cancel_takes_nothing),
		cmocka_unit_test(post_after_start_on_full_sqpoll_ring),
		cmocka_unit_test(start_on_full_sqpoll_ring_not_deferred),
		cmocka_unit_test(cq_overflow_then_destroy),
		cmocka_unit_test(destroy_with_full_sq_refused),
	};
	return cmocka_run_group_tests_name("uring_sqfill", tests, NULL, NULL);
}
