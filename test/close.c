/*
 * close.c - closing descriptors, per engine: the rule for a descriptor the
 * application closes under pending operations (they complete with EBADF
 * in bounded time), px_close (cancel, wait for the callbacks, close, then
 * one callback; the number may be reused at once), and a max_aio too
 * small for what is pending (the deferred operations are started beyond
 * it instead of starving).  Public API only.
 *
 *   close 'ENGINE CONFIG TEXT' [TEST FILTER]
 */
#include <aio.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

/* Forget a tracked descriptor without closing it (the proactor closes it,
 * or the test did and the number may be reused). */
static void untrack(h_fx *f, int fd)
{
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] == fd)
			f->fds[i] = -1;
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* Make a's send buffer small and fill it, so that a write waits. */
static void fill_sndbuf(int fd)
{
	int small = 4096;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	static char junk[65536];
	while (send(fd, junk, sizeof junk, MSG_NOSIGNAL) > 0)
		;
	fcntl(fd, F_SETFL, fl);
}

/* A listening loopback socket, tracked; its address in *a. */
static int listener(h_fx *f, struct sockaddr_in *a)
{
	int l = h_bound_socket(f, SOCK_STREAM, a);
	assert_int_equal(listen(l, 8), 0);
	return l;
}

/* Open /dev/null until no number below fd is free (tracked), so that
 * closing fd makes its number the lowest free one, the one the kernel
 * gives a new descriptor next. */
static void fill_holes_below(h_fx *f, int fd)
{
	for (;;) {
		int d = open("/dev/null", O_RDONLY | O_CLOEXEC);
		assert_true(d >= 0);
		if (d > fd) {
			close(d);
			return;
		}
		h_track(f, d);
	}
}

static void expect_once(h_rec *r, px_op op, int fd, int error, const char *what)
{
	if (atomic_load(&r->calls) != 1)
		fail_msg("%s: %d callbacks, expected exactly one", what,
			 atomic_load(&r->calls));
	assert_int_equal(r->c.op, op);
	assert_int_equal(r->c.fd, fd);
	if (r->c.error != error)
		fail_msg("%s completed with error %d (%s), expected %d (%s)",
			 what, r->c.error, strerror(r->c.error), error,
			 strerror(error));
}

/* The harness teardown, after the loop threads are gone. */
static int fx_teardown(void **state)
{
	h_loops_join();
	return h_teardown(state);
}

/* Wait without pumping (loop threads do) until r is done. */
static void wait_done(h_rec *r, int ms, const char *what)
{
	uint64_t dl = h_deadline(ms);
	while (!h_rec_done(r)) {
		if (h_now_ms() > dl)
			fail_msg("timed out waiting for %s (engine '%s')", what,
				 h_engine_text);
		h_sleep_ms(1);
	}
}

/* ------------------------------------------------------------------ */
/* The rule: close(2) under pending operations                          */
/* ------------------------------------------------------------------ */

/*
 * A read, a write that waits for room and an accept, each on a descriptor
 * the application then closes with close(2), and no px_cancel: each
 * completes once with EBADF.  No descriptor is opened meanwhile (a reused
 * number would be undefined behaviour).
 */
static void closed_under_pending_ops(void **state)
{
	h_fx *f = *state;
	int a[2], b[2];
	struct sockaddr_in la;
	h_socketpair(f, a);
	h_socketpair(f, b);
	int l = listener(f, &la);
	fill_sndbuf(b[0]);
	enum { LEN = 1 << 20 };
	char *in = h_alloc(f, 64);
	char *out = h_alloc(f, LEN);
	h_rec *rd = h_rec_new(f), *wr = h_rec_new(f), *ac = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	assert_int_equal(px_write_stream_all(f->px, b[0], out, LEN, h_rec_cb, wr), 0);
	assert_int_equal(px_accept(f->px, l, h_rec_cb, ac), 0);
	h_settle(f, 30);
	assert_int_equal(atomic_load(&rd->calls) + atomic_load(&wr->calls) +
			 atomic_load(&ac->calls), 0);
	h_close(f, a[1]);
	h_close(f, b[0]);
	h_close(f, l);
	h_wait_rec(f, rd, 5000, "a read whose descriptor was closed");
	h_wait_rec(f, wr, 5000, "a write whose descriptor was closed");
	h_wait_rec(f, ac, 5000, "an accept whose descriptor was closed");
	h_settle(f, 30);
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the read");
	assert_int_equal(rd->c.bytes, 0);
	expect_once(wr, PX_OP_WRITE_STREAM, b[0], EBADF, "the write");
	assert_true(wr->c.bytes < LEN);
	expect_once(ac, PX_OP_ACCEPT, l, EBADF, "the accept");
	assert_int_equal(ac->c.new_fd, -1);
	h_assert_usable(f);
}

/* The same with threads inside px_handle_events(px, -1) only: no thread
 * comes back on a timeout of its own, the leader's bound does it. */
static void *pump_forever(void *arg)
{
	px_proactor *px = arg;
	while (px_handle_events(px, -1) >= 0)
		;
	return NULL;
}

static void closed_under_read_no_timeout(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, pump_forever, f->px), 0);
	h_sleep_ms(30);
	h_close(f, a[1]);
	uint64_t dl = h_deadline(5000);
	while (!h_rec_done(rd) && h_now_ms() < dl)
		h_sleep_ms(2);
	px_stop(f->px);
	pthread_join(th, NULL);
	if (!h_rec_done(rd))
		fail_msg("a read whose descriptor was closed did not complete "
			 "within 5 s under px_handle_events(px, -1)");
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the read");
}

/* ------------------------------------------------------------------ */
/* px_close                                                             */
/* ------------------------------------------------------------------ */

/* One px_close: its record, and what its callback does at once with the
 * closed number (dup2 another file onto it). */
typedef struct closer {
	h_rec rec;
	int fd;
	int repl;               /* dup2'ed onto fd by the callback, or -1 */
	int dup_rc;
	h_rec *ops[3];          /* operations on fd, all delivered before */
	int nops;
	atomic_int ops_done_before; /* how many were, when the callback ran */
	atomic_int fd_was_closed;
} closer;

static void closer_cb(const px_completion *c)
{
	closer *k = c->user;
	int done = 0;
	for (int i = 0; i < k->nops; i++)
		done += atomic_load(&k->ops[i]->calls) == 1;
	atomic_store(&k->ops_done_before, done);
	atomic_store(&k->fd_was_closed, !fd_open(c->fd));
	/* Reuse the number at once. */
	if (k->repl >= 0)
		k->dup_rc = dup2(k->repl, c->fd);
	h_rec_cb(c);
}

static closer *closer_new(h_fx *f, int fd, int repl)
{
	closer *k = h_alloc(f, sizeof *k);
	k->fd = fd;
	k->repl = repl;
	return k;
}

static void closer_check(closer *k, const char *what)
{
	expect_once(&k->rec, PX_OP_CLOSE, k->fd, 0, what);
	if (atomic_load(&k->ops_done_before) != k->nops)
		fail_msg("%s: its callback ran with %d of the %d operations "
			 "on the descriptor delivered", what,
			 atomic_load(&k->ops_done_before), k->nops);
	if (!atomic_load(&k->fd_was_closed))
		fail_msg("%s: the descriptor was still open in the callback", what);
	if (k->repl >= 0)
		assert_int_equal(k->dup_rc, k->fd);
	for (int i = 0; i < k->nops; i++)
		assert_true(k->ops[i]->seq < k->rec.seq);
}

/*
 * Reads, a write and an accept pending, px_close from the test thread
 * while two other threads run the event loop; each close callback at once
 * puts another file on the number.  The old operations complete before
 * the callback and never touch the new files; new operations on the
 * reused numbers work.
 */
static void close_pending_ops_reuse(void **state)
{
	h_fx *f = *state;
	int a[2], b[2], na[2], nb[2];
	struct sockaddr_in la, la2;
	h_socketpair(f, a);
	h_socketpair(f, b);
	h_socketpair(f, na);    /* goes onto a[1] */
	h_socketpair(f, nb);    /* goes onto b[0] */
	int l = listener(f, &la);
	int l2 = listener(f, &la2);  /* goes onto l */
	fill_sndbuf(b[0]);
	enum { LEN = 1 << 20 };
	char *in = h_alloc(f, 256);
	char *out = h_alloc(f, LEN);
	h_rec *r1 = h_rec_new(f), *r2 = h_rec_new(f), *bw = h_rec_new(f),
	      *br = h_rec_new(f), *ac = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, r1), 0);
	assert_int_equal(px_read_stream(f->px, a[1], in + 64, 64, h_rec_cb, r2), 0);
	assert_int_equal(px_write_stream_all(f->px, b[0], out, LEN, h_rec_cb, bw), 0);
	assert_int_equal(px_read_stream(f->px, b[0], in + 128, 64, h_rec_cb, br), 0);
	assert_int_equal(px_accept(f->px, l, h_rec_cb, ac), 0);

	closer *ka = closer_new(f, a[1], na[0]);
	ka->ops[0] = r1, ka->ops[1] = r2, ka->nops = 2;
	closer *kb = closer_new(f, b[0], nb[0]);
	kb->ops[0] = bw, kb->ops[1] = br, kb->nops = 2;
	closer *kl = closer_new(f, l, l2);
	kl->ops[0] = ac, kl->nops = 1;

	h_loops_start(f, 2, false);
	h_sleep_ms(30);
	assert_int_equal(px_close(f->px, a[1], closer_cb, ka), 0);
	assert_int_equal(px_close(f->px, b[0], closer_cb, kb), 0);
	assert_int_equal(px_close(f->px, l, closer_cb, kl), 0);
	wait_done(&ka->rec, 5000, "px_close of a socket with two reads");
	wait_done(&kb->rec, 5000, "px_close of a socket with a write and a read");
	wait_done(&kl->rec, 5000, "px_close of a listening socket");
	/* From here the numbers name the new files (dup2 in the callbacks):
	 * the harness closes them at teardown; na[0], nb[0] and l2 stay
	 * tracked too. */
	h_sleep_ms(50);
	h_loops_stop();
	closer_check(ka, "px_close(a)");
	closer_check(kb, "px_close(b)");
	closer_check(kl, "px_close(listener)");
	expect_once(r1, PX_OP_READ_STREAM, a[1], ECANCELED, "first read of a");
	expect_once(r2, PX_OP_READ_STREAM, a[1], ECANCELED, "second read of a");
	expect_once(bw, PX_OP_WRITE_STREAM, b[0], ECANCELED, "the write of b");
	assert_true(bw->c.bytes < LEN);
	expect_once(br, PX_OP_READ_STREAM, b[0], ECANCELED, "the read of b");
	expect_once(ac, PX_OP_ACCEPT, l, ECANCELED, "the accept");

	/* Nothing of the old operations reaches the new files. */
	assert_int_equal(send(na[1], "new", 3, MSG_NOSIGNAL), 3);
	assert_int_equal(send(nb[0], "mine", 4, MSG_NOSIGNAL), 4);
	int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	assert_int_equal(connect(c, (struct sockaddr *)&la2, sizeof la2), 0);
	h_settle(f, 50);
	char got[8];
	assert_int_equal(recv(a[1], got, sizeof got, MSG_DONTWAIT), 3);
	assert_memory_equal(got, "new", 3);
	assert_int_equal(recv(nb[1], got, sizeof got, MSG_DONTWAIT), 4);
	assert_memory_equal(got, "mine", 4);
	assert_int_equal(recv(nb[1], got, sizeof got, MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
	int fl = fcntl(l, F_GETFL);
	fcntl(l, F_SETFL, fl | O_NONBLOCK);
	int acc = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (acc < 0)
		fail_msg("the connection to the listener now on the closed "
			 "number was taken: accept4: %s", strerror(errno));
	h_track(f, acc);
	fcntl(l, F_SETFL, fl);

	/* New operations on a reused number work. */
	h_rec *nr = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, nr), 0);
	assert_int_equal(send(na[1], "again", 5, MSG_NOSIGNAL), 5);
	h_wait_rec(f, nr, 5000, "a read on the reused number");
	assert_int_equal(nr->c.error, 0);
	assert_int_equal(nr->c.bytes, 5);
	h_rec *nw = h_rec_new(f);
	assert_int_equal(px_write_stream(f->px, b[0], "hello", 5, h_rec_cb, nw), 0);
	h_wait_rec(f, nw, 5000, "a write on the reused number");
	assert_int_equal(nw->c.error, 0);
	assert_int_equal(recv(nb[1], got, sizeof got, 0), 5);
	h_settle(f, 20);
	assert_int_equal(atomic_load(&r1->calls) + atomic_load(&r2->calls) +
			 atomic_load(&bw->calls) + atomic_load(&br->calls) +
			 atomic_load(&ac->calls), 5);
}

/* Nothing pending: closed in the call, one callback with error 0; a second
 * px_close of the number fails with EBADF; bad arguments are refused. */
static void close_nothing_pending(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	h_rec *k = h_rec_new(f);
	assert_int_equal(px_close(f->px, -1, h_rec_cb, k), -EBADF);
	assert_int_equal(px_close(f->px, a[1], NULL, k), -EINVAL);
	assert_int_equal(px_close(NULL, a[1], h_rec_cb, k), -EINVAL);
	assert_int_equal(px_close(f->px, a[1], h_rec_cb, k), 0);
	untrack(f, a[1]);
	assert_false(fd_open(a[1]));
	h_wait_rec(f, k, 5000, "px_close with nothing pending");
	h_settle(f, 20);
	expect_once(k, PX_OP_CLOSE, a[1], 0, "px_close with nothing pending");
	h_rec *k2 = h_rec_new(f);
	assert_int_equal(px_close(f->px, a[1], h_rec_cb, k2), -EBADF);
	h_settle(f, 20);
	assert_int_equal(atomic_load(&k2->calls), 0);
	h_assert_usable(f);
}

/* Twice on one descriptor while the first waits: the second is refused
 * with EALREADY, and starts on the descriptor with EBADF. */
static void close_twice_and_starts_refused(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f), *k = h_rec_new(f), *never = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	h_settle(f, 20);
	/* No thread dispatches between these calls, so the read's
	 * completion is not delivered yet and the close still waits. */
	assert_int_equal(px_close(f->px, a[1], h_rec_cb, k), 0);
	untrack(f, a[1]);
	assert_int_equal(px_close(f->px, a[1], h_rec_cb, never), -EALREADY);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, never), -EBADF);
	assert_int_equal(px_write_stream(f->px, a[1], "x", 1, h_rec_cb, never), -EBADF);
	assert_int_equal(px_write_stream_all(f->px, a[1], "x", 1, h_rec_cb, never), -EBADF);
	assert_true(fd_open(a[1]));
	h_wait_rec(f, k, 5000, "px_close with a read pending");
	h_settle(f, 20);
	expect_once(rd, PX_OP_READ_STREAM, a[1], ECANCELED, "the read");
	expect_once(k, PX_OP_CLOSE, a[1], 0, "the first px_close");
	assert_true(rd->seq < k->seq);
	assert_false(fd_open(a[1]));
	assert_int_equal(atomic_load(&never->calls), 0);
	h_assert_usable(f);
}

/* px_close from the callback of an operation on the same descriptor (a
 * read that sees the end of the stream), with another read queued behind
 * it: the close waits for that callback to return. */
typedef struct own_close {
	h_rec first;
	h_rec close;
	int rc;
	atomic_int returned;    /* the first callback has returned */
	atomic_int close_after_return;
} own_close;

static void own_close_done(const px_completion *c)
{
	own_close *o = (own_close *)((char *)c->user - offsetof(own_close, close));
	atomic_store(&o->close_after_return, atomic_load(&o->returned));
	h_rec_cb(c);
}

static void own_close_cb(const px_completion *c)
{
	own_close *o = (own_close *)((char *)c->user - offsetof(own_close, first));
	h_rec_cb(c);
	o->rc = px_close(c->proactor, c->fd, own_close_done, &o->close);
	h_sleep_ms(20);          /* the close must wait for this return */
	atomic_store(&o->returned, 1);
}

static void close_from_own_callback(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	own_close *o = h_alloc(f, sizeof *o);
	h_rec *second = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 8, own_close_cb, &o->first), 0);
	assert_int_equal(px_read_stream(f->px, a[1], in + 8, 8, h_rec_cb, second), 0);
	h_loops_start(f, 2, false);
	h_sleep_ms(20);
	shutdown(a[0], SHUT_WR);
	wait_done(&o->close, 5000, "px_close made in a callback");
	h_loops_stop();
	untrack(f, a[1]);
	assert_int_equal(o->rc, 0);
	expect_once(&o->first, PX_OP_READ_STREAM, a[1], 0, "the first read");
	assert_int_equal(o->first.c.bytes, 0);
	/* The second read may have seen the end of the stream too. */
	assert_int_equal(atomic_load(&second->calls), 1);
	assert_true(second->c.error == ECANCELED || second->c.error == 0);
	expect_once(&o->close, PX_OP_CLOSE, a[1], 0, "the close");
	assert_int_equal(atomic_load(&o->close_after_return), 1);
	assert_true(second->seq < o->close.seq);
	assert_false(fd_open(a[1]));
}

/* px_destroy with a px_close waiting: both callbacks run once. */
/* px_close from a thread outside the loop while two loop threads carry
 * traffic on the same descriptors.  Sixteen socket pairs; on end a of
 * each a read is always pending and every read that brings data starts a
 * write and the next read; end b echoes what it reads.  The test thread
 * closes every end a with px_close, one after another, while this goes
 * on.  Then: each px_close called back once; every operation whose start
 * on end a returned 0 called back exactly once, and none after its
 * px_close's callback; a start made after the px_close (from a callback
 * still running) was refused with -EBADF.  This is what px_close keeps
 * in its per-descriptor list (proactor.c): the count it waits for, and
 * the refusal. */
enum { RACE_PAIRS = 16 };

typedef struct race_end {
	px_proactor *px;
	int a, b;                    /* a is closed with px_close */
	atomic_int started;          /* operations on a whose start returned 0 */
	atomic_int called;           /* their callbacks */
	atomic_int refused;          /* starts on a refused with -EBADF */
	atomic_int other_rc;         /* starts on a refused otherwise */
	atomic_int late;             /* callbacks on a after the close's */
	atomic_int closed;           /* px_close callbacks */
	atomic_int close_err;        /* the close's c->error */
	atomic_bool b_done;          /* b saw the end of its stream */
	char abuf[64], wbuf[16], bbuf[64];
} race_end;

static void race_a_read(const px_completion *c);
static void race_b_read(const px_completion *c);

static void race_count_start(race_end *e, int rc)
{
	if (rc == 0)
		atomic_fetch_add(&e->started, 1);
	else if (rc == -EBADF)
		atomic_fetch_add(&e->refused, 1);
	else
		atomic_fetch_add(&e->other_rc, 1);
}

static void race_a_called(race_end *e)
{
	if (atomic_load(&e->closed))
		atomic_fetch_add(&e->late, 1);
	atomic_fetch_add(&e->called, 1);
}

static void race_a_write(const px_completion *c)
{
	race_a_called(c->user);
}

static void race_a_read(const px_completion *c)
{
	race_end *e = c->user;

	if (c->error == 0 && c->bytes > 0) {
		race_count_start(e, px_write_stream(e->px, e->a, e->wbuf,
						    sizeof e->wbuf, race_a_write, e));
		race_count_start(e, px_read_stream(e->px, e->a, e->abuf,
						   sizeof e->abuf, race_a_read, e));
	}
	race_a_called(e);
}

static void race_b_write(const px_completion *c)
{
	(void)c;
}

static void race_b_read(const px_completion *c)
{
	race_end *e = c->user;

	if (c->error != 0 || c->bytes == 0) {
		atomic_store(&e->b_done, true);
		return;
	}
	/* Echo (the peer's writes are small: one write takes them), then
	 * read on; a failure ends b's side quietly. */
	if (px_write_stream(e->px, e->b, e->bbuf, c->bytes, race_b_write, e) == 0 &&
	    px_read_stream(e->px, e->b, e->bbuf, sizeof e->bbuf, race_b_read, e) == 0)
		return;
	atomic_store(&e->b_done, true);
}

static void race_close_cb(const px_completion *c)
{
	race_end *e = c->user;

	atomic_store(&e->close_err, c->error);
	atomic_fetch_add(&e->closed, 1);
}

/* Pair i: a socket pair, a read (a_read, with a_user) and a write on end
 * a, and b's echo loop. */
static void race_begin(h_fx *f, race_end *e, int i, px_callback *a_read,
		       void *a_user)
{
	int sv[2];

	h_socketpair(f, sv);
	e->px = f->px;
	e->a = sv[0];
	e->b = sv[1];
	memset(e->wbuf, 'a' + i, sizeof e->wbuf);
	race_count_start(e, px_read_stream(f->px, e->a, e->abuf, sizeof e->abuf,
					   a_read, a_user));
	race_count_start(e, px_write_stream(f->px, e->a, e->wbuf, sizeof e->wbuf,
					    race_a_write, e));
	assert_int_equal(px_read_stream(f->px, e->b, e->bbuf, sizeof e->bbuf,
					race_b_read, e), 0);
}

static void close_races_traffic(void **state)
{
	h_fx *f = *state;
	race_end *ends = h_alloc(f, RACE_PAIRS * sizeof(*ends));

	for (int i = 0; i < RACE_PAIRS; i++)
		race_begin(f, &ends[i], i, race_a_read, &ends[i]);
	h_loops_start(f, 2, false);
	h_sleep_ms(20);
	for (int i = 0; i < RACE_PAIRS; i++) {
		assert_int_equal(px_close(f->px, ends[i].a, race_close_cb, &ends[i]), 0);
		h_sleep_ms(1);
	}
	uint64_t dl = h_deadline(10000);
	for (int i = 0; i < RACE_PAIRS; i++) {
		while (!atomic_load(&ends[i].closed) || !atomic_load(&ends[i].b_done)) {
			if (h_now_ms() > dl)
				fail_msg("pair %d: px_close %s, b %s (engine '%s')", i,
					 atomic_load(&ends[i].closed) ? "done" : "not done",
					 atomic_load(&ends[i].b_done) ? "done" : "not done",
					 h_engine_text);
			h_sleep_ms(1);
		}
	}
	h_loops_stop();
	for (int i = 0; i < RACE_PAIRS; i++) {
		race_end *e = &ends[i];
		untrack(f, e->a);
		assert_int_equal(atomic_load(&e->closed), 1);
		assert_int_equal(atomic_load(&e->close_err), 0);
		assert_int_equal(atomic_load(&e->called), atomic_load(&e->started));
		assert_int_equal(atomic_load(&e->late), 0);
		assert_int_equal(atomic_load(&e->other_rc), 0);
		assert_true(atomic_load(&e->started) >= 2);
	}
}

/* The same traffic, ended the other way: px_cancel, then close(2) at
 * once.  px_cancel promises that when it returns no thread of the
 * proactor is inside a system call on the descriptor for a cancelled
 * operation (a readiness engine makes those itself, with the mutex
 * released), so the close cannot race with one; TSan checks that on the
 * dedicated engines, whose leader makes the calls in its own thread.  The
 * application's part: no start on end a after the cancel, which the
 * callbacks learn under the end's mutex.  Then: every operation started
 * on end a called back exactly once, and b saw the end of the stream. */
typedef struct cancel_end {
	race_end r;
	pthread_mutex_t mu;
	bool ending;                 /* under mu: no more starts on a */
	atomic_int cancelled;        /* px_cancel's return */
} cancel_end;

static void cancel_a_read(const px_completion *c)
{
	cancel_end *ce = c->user;
	race_end *e = &ce->r;

	pthread_mutex_lock(&ce->mu);
	if (!ce->ending && c->error == 0 && c->bytes > 0) {
		race_count_start(e, px_write_stream(e->px, e->a, e->wbuf,
						    sizeof e->wbuf, race_a_write, e));
		race_count_start(e, px_read_stream(e->px, e->a, e->abuf,
						   sizeof e->abuf, cancel_a_read, ce));
	}
	pthread_mutex_unlock(&ce->mu);
	race_a_called(e);
}

static void cancel_then_close_races_traffic(void **state)
{
	h_fx *f = *state;
	cancel_end *ends = h_alloc(f, RACE_PAIRS * sizeof(*ends));

	for (int i = 0; i < RACE_PAIRS; i++) {
		pthread_mutex_init(&ends[i].mu, NULL);
		race_begin(f, &ends[i].r, i, cancel_a_read, &ends[i]);
	}
	h_loops_start(f, 2, false);
	h_sleep_ms(20);
	for (int i = 0; i < RACE_PAIRS; i++) {
		cancel_end *ce = &ends[i];
		pthread_mutex_lock(&ce->mu);
		ce->ending = true;
		pthread_mutex_unlock(&ce->mu);
		atomic_store(&ce->cancelled, px_cancel(f->px, ce->r.a));
		close(ce->r.a);
		untrack(f, ce->r.a);
		h_sleep_ms(1);
	}
	uint64_t dl = h_deadline(10000);
	for (int i = 0; i < RACE_PAIRS; i++) {
		race_end *e = &ends[i].r;
		while (atomic_load(&e->called) < atomic_load(&e->started) ||
		       !atomic_load(&e->b_done)) {
			if (h_now_ms() > dl)
				fail_msg("pair %d: %d of %d callbacks on the cancelled "
					 "end, b %s (engine '%s')", i,
					 atomic_load(&e->called), atomic_load(&e->started),
					 atomic_load(&e->b_done) ? "done" : "not done",
					 h_engine_text);
			h_sleep_ms(1);
		}
	}
	h_loops_stop();
	for (int i = 0; i < RACE_PAIRS; i++) {
		race_end *e = &ends[i].r;
		assert_int_equal(atomic_load(&e->called), atomic_load(&e->started));
		assert_int_equal(atomic_load(&e->other_rc), 0);
		assert_int_equal(atomic_load(&e->refused), 0);
		assert_true(atomic_load(&ends[i].cancelled) >= 0);
		assert_true(atomic_load(&e->started) >= 2);
		pthread_mutex_destroy(&ends[i].mu);
	}
}

static void close_then_destroy(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f), *k = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	h_settle(f, 20);
	assert_int_equal(px_close(f->px, a[1], h_rec_cb, k), 0);
	untrack(f, a[1]);
	int rc = px_destroy(f->px);
	f->px = NULL;
	assert_int_equal(rc, 0);
	expect_once(rd, PX_OP_READ_STREAM, a[1], ECANCELED, "the read");
	expect_once(k, PX_OP_CLOSE, a[1], 0, "the close");
	assert_true(rd->seq < k->seq);
	assert_false(fd_open(a[1]));
}

/*
 * px_close while a start's own call runs without the mutex: the
 * application (another of its threads, in real life) closes the
 * descriptor with close(2) and calls px_close, which counts the operation
 * being started among those it waits for.  The start then fails with
 * EBADF (the readiness engines), so no callback of the operation comes:
 * the px_close, accepted with 0, used to wait for it for good (its
 * callback came only from px_destroy, which then closed whatever the
 * number named by then), and the number refused every start after it
 * was reused.  The test's recv(2) below makes the two calls at that
 * moment; an engine whose start makes no recv (io_uring) gets them just
 * after the start instead.
 */
static h_fx *cs_fx;
static int cs_fd = -1;
static int cs_rc;
static h_rec *cs_close;

/* The library's recv calls come here (the test links it statically). */
ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	if (fd >= 0 && fd == cs_fd) {
		cs_fd = -1;
		close(fd);
		cs_rc = px_close(cs_fx->px, fd, h_rec_cb, cs_close);
	}
	return syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

static void close_during_start_call(void **state)
{
	h_fx *f = *state;
	int a[2], b[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f);
	cs_fx = f;
	cs_close = h_rec_new(f);
	cs_rc = 1;
	cs_fd = a[1];
	int rc = px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd);
	bool during = cs_fd < 0;
	cs_fd = -1;
	untrack(f, a[1]);
	if (!during) {
		assert_int_equal(rc, 0);
		close(a[1]);
		cs_rc = px_close(f->px, a[1], h_rec_cb, cs_close);
	}
	assert_int_equal(cs_rc, 0);
	h_wait_rec(f, cs_close, 5000, "a px_close made during the start's call");
	h_settle(f, 20);
	expect_once(cs_close, PX_OP_CLOSE, a[1], EBADF, "the px_close");
	if (rc < 0) {
		assert_int_equal(rc, -EBADF);
		assert_int_equal(atomic_load(&rd->calls), 0);
	} else {
		assert_int_equal(atomic_load(&rd->calls), 1);
		assert_true(rd->seq < cs_close->seq);
	}
	/* The number, reused, takes operations again. */
	h_socketpair(f, b);
	int n = b[0] == a[1] ? b[0] : b[1] == a[1] ? b[1] : -1;
	if (n >= 0) {
		h_rec *r2 = h_rec_new(f);
		assert_int_equal(px_read_stream(f->px, n, in, 64, h_rec_cb, r2), 0);
		assert_int_equal(write(n == b[0] ? b[1] : b[0], "ok", 2), 2);
		h_wait_rec(f, r2, 5000, "a read on the reused number");
		expect_once(r2, PX_OP_READ_STREAM, n, 0, "the read on the reused number");
	}
	h_assert_usable(f);
}

/*
 * A number closed with close(2) under a pending read is free in the
 * kernel until the idle check ends that read, and the kernel gives the
 * lowest free number to the next descriptor made.  The library makes some
 * of its own while it works: POSIX AIO's dups of a file with several
 * requests in glibc (file_lanes), among others.  Such a dup on the number
 * would be the file the pending read names (the check finds the number
 * open and leaves the read waiting while the dup lives).  Found by fuzz_api on
 * posix-aio+epoll: a read started on the closed number reached epoll with
 * the dup of a memfd there and failed with EPERM.  Here the closed number
 * is made the lowest free one, eight file reads follow at once, and no
 * request may reach glibc on that number; the read still ends with EBADF.
 * Engines without POSIX AIO make no such request: for them the test only
 * checks the outcomes.
 */
static atomic_int lo_watch = -1;   /* the closed number */
static atomic_int lo_hits;         /* requests made on it */
static h_rec *_Atomic lo_read;     /* the read pending on it */

/* The library's aio_read calls come here (the test links it statically).
 * A request on the closed number counts while the read's callback has not
 * run: until it has returned, the read is among the number's operations.
 * (Once the idle check has ended it, the number is free for anyone; on a
 * machine that stalls the test for the check's 200 ms that can happen
 * before the file reads.) */
int aio_read(struct aiocb *cb)
{
	static int (*real)(struct aiocb *);

	if (!real)
		real = (int (*)(struct aiocb *))dlsym(RTLD_NEXT, "aio_read");
	if (cb->aio_fildes == atomic_load(&lo_watch)) {
		h_rec *r = atomic_load(&lo_read);
		if (r && !h_rec_done(r))
			atomic_fetch_add(&lo_hits, 1);
	}
	return real(cb);
}

static void library_keeps_off_a_closed_number(void **state)
{
	h_fx *f = *state;
	enum { NREAD = 8, BLK = 4096 };
	char path[] = "/tmp/px_close_lanes_XXXXXX";
	int file = mkstemp(path);
	assert_true(file >= 0);
	unlink(path);
	h_track(f, file);
	char *data = h_alloc(f, NREAD * BLK);
	for (int i = 0; i < NREAD * BLK; i++)
		data[i] = (char)(i * 7 + 3);
	assert_int_equal(pwrite(file, data, NREAD * BLK, 0), NREAD * BLK);

	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	h_settle(f, 20);
	fill_holes_below(f, a[1]);
	atomic_store(&lo_hits, 0);
	atomic_store(&lo_read, rd);
	atomic_store(&lo_watch, a[1]);
	h_close(f, a[1]);

	char *out = h_alloc(f, NREAD * BLK);
	h_rec *fr[NREAD];
	for (int i = 0; i < NREAD; i++) {
		fr[i] = h_rec_new(f);
		assert_int_equal(px_read_file(f->px, file, out + i * BLK, BLK,
					      (uint64_t)i * BLK, h_rec_cb, fr[i]),
				 0);
	}
	for (int i = 0; i < NREAD; i++)
		h_wait_rec(f, fr[i], 5000, "a file read");
	h_wait_rec(f, rd, 5000, "a read whose descriptor was closed");
	atomic_store(&lo_watch, -1);
	atomic_store(&lo_read, NULL);
	h_settle(f, 20);
	if (atomic_load(&lo_hits))
		fail_msg("%d file requests reached glibc on the number of the "
			 "closed socket, which a read still named (engine '%s')",
			 atomic_load(&lo_hits), h_engine_text);
	for (int i = 0; i < NREAD; i++) {
		expect_once(fr[i], PX_OP_READ_FILE, file, 0, "a file read");
		assert_int_equal(fr[i]->c.bytes, BLK);
	}
	assert_memory_equal(out, data, NREAD * BLK);
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the read");
	h_assert_usable(f);
}

/*
 * The same for the socket px_accept makes: a server that closes a
 * connection with close(2) under a pending read and then accepts the next
 * one.  The kernel would give the new connection the closed number, which
 * the read still names; the library must hand it out under another number,
 * so that the read still ends with EBADF (the idle check finds its number
 * closed) and the new connection's bytes go to the new connection's read.
 * The client has sent its bytes before the accept, so that a read the
 * library started again on the reused number would take them.
 */
/* The set-up of the two tests below: a listener (*l, its address *la), a
 * socket a[1] with a read pending (returned) closed with close(2) as the
 * lowest free number, and a client cl of the listener's, made before and
 * connected after the close. */
static h_rec *keep_off_setup(h_fx *f, int *l, struct sockaddr_in *la,
			     int a[2], int cl)
{
	*l = listener(f, la);
	h_socketpair(f, a);
	char *in = h_alloc(f, 64);
	h_rec *rd = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 64, h_rec_cb, rd), 0);
	h_settle(f, 20);
	fill_holes_below(f, a[1]);
	h_close(f, a[1]);
	assert_int_equal(connect(cl, (struct sockaddr *)la, sizeof *la), 0);
	return rd;
}

static void accept_keeps_off_a_closed_number(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in la;
	int l, a[2];
	int cl = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	h_rec *rd = keep_off_setup(f, &l, &la, a, cl);
	assert_int_equal(send(cl, "hello", 5, MSG_NOSIGNAL), 5);

	h_rec *acc = h_rec_new(f);
	assert_int_equal(px_accept(f->px, l, h_rec_cb, acc), 0);
	h_wait_rec(f, acc, 5000, "the accept");
	expect_once(acc, PX_OP_ACCEPT, l, 0, "the accept");
	int s = acc->c.new_fd;
	assert_true(s >= 0);
	h_track(f, s);
	if (!h_rec_done(rd) && s == a[1])
		fail_msg("px_accept gave the connection number %d, which a "
			 "pending read still names (engine '%s')", s,
			 h_engine_text);
	char *got = h_alloc(f, 64);
	h_rec *rs = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, s, got, 64, h_rec_cb, rs), 0);
	h_wait_rec(f, rs, 5000, "a read of the accepted connection");
	h_wait_rec(f, rd, 5000, "a read whose descriptor was closed");
	h_settle(f, 20);
	expect_once(rs, PX_OP_READ_STREAM, s, 0, "the new connection's read");
	assert_int_equal(rs->c.bytes, 5);
	assert_memory_equal(got, "hello", 5);
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the old read");
	h_assert_usable(f);
}

/*
 * The same with a connection its client reset (SO_LINGER 0) while it
 * waited in the listen queue.  Its socket has no peer any more
 * (getpeername: ENOTCONN), which the library used to take for "the
 * application's dup2 replaced the connection": the accept ended with
 * ECONNABORTED and no descriptor, the socket stayed open on the closed
 * number for good (nobody was given it), and the old read never got its
 * EBADF (select and poll ran it on the socket instead: ECONNRESET).
 * Found by a helper's review; now the accept delivers the socket under
 * another number, or reports its error, and nothing is left on the old
 * number.
 */
static void accept_keeps_off_a_closed_number_reset(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in la;
	int l, a[2];
	int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cl >= 0);
	h_rec *rd = keep_off_setup(f, &l, &la, a, cl);
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	assert_int_equal(setsockopt(cl, SOL_SOCKET, SO_LINGER, &lg, sizeof lg),
			 0);
	close(cl);  /* a reset, while the connection waits in the queue */
	/* cl's number, below a[1], is free again: taken, so that the
	 * accept gets a[1]'s. */
	int hold = h_track(f, open("/dev/null", O_RDONLY | O_CLOEXEC));
	assert_true(hold >= 0 && hold < a[1]);
	h_settle(f, 20);

	h_rec *acc = h_rec_new(f);
	assert_int_equal(px_accept(f->px, l, h_rec_cb, acc), 0);
	h_wait_rec(f, acc, 5000, "the accept");
	/* (poll and select may have ended the read already: POLLNVAL.) */
	bool read_pending = !h_rec_done(rd);
	int s = acc->c.new_fd;
	if (acc->c.error == 0) {
		assert_true(s >= 0);
		h_track(f, s);
		if (read_pending && s == a[1])
			fail_msg("px_accept gave the connection number %d, "
				 "which a pending read still named (engine "
				 "'%s')", s, h_engine_text);
	} else {
		assert_int_equal(s, -1);
	}
	h_wait_rec(f, rd, 5000, "a read whose descriptor was closed");
	h_settle(f, 20);
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the old read");
	if (s != a[1] && fcntl(a[1], F_GETFD) >= 0)
		fail_msg("number %d is open after the accept, which gave %d "
			 "(error %d: %s): a socket nobody was given (engine "
			 "'%s')", a[1], s, acc->c.error,
			 strerror(acc->c.error), h_engine_text);
	h_assert_usable(f);
}

/*
 * The same when the closed number is the highest that RLIMIT_NOFILE
 * allows: no number is free above it, so the accepted socket cannot move,
 * and px_accept(3) says the connection is closed and the accept completes
 * with EMFILE.  fcntl(F_DUPFD) with a lower bound at the limit says
 * EINVAL, which the accept used to report (a helper's review of
 * 2026-12-05, every engine).
 */
static void accept_keeps_off_at_the_limit(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in la;
	int l, a[2];
	int cl = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	struct rlimit old, low;
	h_rec *rd = keep_off_setup(f, &l, &la, a, cl);

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)a[1] + 1;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	h_rec *acc = h_rec_new(f);
	int rc = px_accept(f->px, l, h_rec_cb, acc);
	if (rc == 0)
		h_wait_rec(f, acc, 5000, "the accept at the descriptor limit");
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(rc, 0);
	if (acc->c.error == 0)
		h_track(f, acc->c.new_fd);
	h_wait_rec(f, rd, 5000, "a read whose descriptor was closed");
	h_settle(f, 20);
	if (acc->c.error != EMFILE)
		fail_msg("an accept whose socket came on number %d, the highest "
			 "the limit allows, which a pending read still named: "
			 "error %d (%s), new_fd %d; expected EMFILE (engine '%s')",
			 a[1], acc->c.error, strerror(acc->c.error),
			 acc->c.new_fd, h_engine_text);
	expect_once(acc, PX_OP_ACCEPT, l, EMFILE, "the accept");
	assert_int_equal(acc->c.new_fd, -1);
	expect_once(rd, PX_OP_READ_STREAM, a[1], EBADF, "the old read");
	if (fcntl(a[1], F_GETFD) >= 0)
		fail_msg("number %d is open after the accept (engine '%s')",
			 a[1], h_engine_text);
	h_assert_usable(f);
}

/*
 * px_cancel(3) lets the application close(2) the number once px_cancel
 * returns.  A read cancelled so, its number closed and given at once to a
 * new socket whose peer sends: the read ends with ECANCELED, or with the
 * old socket's end of stream (the test closes that socket's peer too),
 * and the new socket's bytes stay for the new socket.  On io_uring with a shared processor the
 * read's SQE waited in the ring, unsubmitted, until the next leader's
 * enter, which looked the number up then: the cancelled read took the new
 * socket's bytes and said so (a helper's review of 2026-12-05).
 */
static void cancelled_read_leaves_reused_number_alone(void **state)
{
	h_fx *f = *state;
	char *in = h_alloc(f, 64);

	for (int round = 0; round < 20; round++) {
		int sv[2], nv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv), 0);
		/* one read that completes: the number is known open */
		assert_int_equal(send(sv[1], "x", 1, MSG_NOSIGNAL), 1);
		h_rec *r0 = h_rec_new(f);
		assert_int_equal(px_read_stream(f->px, sv[0], in, 64, h_rec_cb,
						r0), 0);
		h_wait_rec(f, r0, 5000, "a read with data there");
		h_rec *r = h_rec_new(f);
		assert_int_equal(px_read_stream(f->px, sv[0], in, 64, h_rec_cb,
						r), 0);
		int n = px_cancel(f->px, sv[0]);
		assert_true(n == 0 || n == 1);
		int old = sv[0];
		close(sv[0]);
		close(sv[1]);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, nv), 0);
		h_track(f, nv[0]);
		h_track(f, nv[1]);
		int mine = nv[0] == old ? nv[0] : nv[1];
		int peer = mine == nv[0] ? nv[1] : nv[0];
		assert_int_equal(send(peer, "NEWDATA", 7, MSG_NOSIGNAL), 7);
		h_wait_rec(f, r, 5000, "a read cancelled before its number "
			   "was closed and reused");
		h_settle(f, 5);
		assert_int_equal(atomic_load(&r->calls), 1);
		/* Its own result may come first: the end of the old
		 * socket's stream, its peer closed too. */
		if ((r->c.error != ECANCELED && r->c.error != 0) ||
		    r->c.bytes != 0)
			fail_msg("round %d: a read cancelled, its number %d "
				 "closed and given to a new socket, ended with "
				 "error %d (%s) and %zu bytes; expected ECANCELED "
				 "or the old socket's end (engine '%s')", round,
				 old, r->c.error, strerror(r->c.error),
				 r->c.bytes, h_engine_text);
		char b[16];
		ssize_t got = recv(mine, b, sizeof b, MSG_DONTWAIT);
		if (got != 7)
			fail_msg("round %d: the new socket on number %d read %zd "
				 "bytes of its 7: the cancelled read took them "
				 "(engine '%s')", round, old, got, h_engine_text);
	}
	h_assert_usable(f);
}

/*
 * And until a px_close's callback has returned: an application that keys
 * its connections by number must not see a new connection under a number
 * before the callback of the px_close that freed it.  The close's
 * callback waits (in one loop thread) until the accept has called back
 * or 2 s have passed; another loop thread takes the accept meanwhile.
 */
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	h_rec *acc;             /* the accept's record, once started */
	int fd;                 /* the number the px_close freed */
	int seen_new_fd;        /* the accept's socket, -1 if it was not in */
	int calls;
} close_then_accept;

static void cta_close_cb(const px_completion *c)
{
	close_then_accept *k = c->user;
	pthread_mutex_lock(&k->mu);
	k->calls++;
	uint64_t dl = h_deadline(2000);
	while (!(k->acc && h_rec_done(k->acc)) && h_now_ms() < dl)
		h_cond_wait_ms(&k->cv, &k->mu, 10);
	k->seen_new_fd = k->acc && h_rec_done(k->acc) ? k->acc->c.new_fd : -1;
	pthread_mutex_unlock(&k->mu);
}

static void accept_waits_for_close_callback(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in la;
	int l = listener(f, &la);
	int cl = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	int a[2];
	h_socketpair(f, a);
	fill_holes_below(f, a[1]);
	close_then_accept *k = h_alloc(f, sizeof *k);
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cv, NULL);
	k->fd = a[1];
	k->seen_new_fd = -1;
	h_rec *acc = h_rec_new(f);
	assert_int_equal(connect(cl, (struct sockaddr *)&la, sizeof la), 0);
	h_loops_start(f, 2, false);
	untrack(f, a[1]);
	assert_int_equal(px_close(f->px, a[1], cta_close_cb, k), 0);
	pthread_mutex_lock(&k->mu);
	k->acc = acc;
	pthread_mutex_unlock(&k->mu);
	assert_int_equal(px_accept(f->px, l, h_rec_cb, acc), 0);
	wait_done(acc, 5000, "the accept");
	pthread_mutex_lock(&k->mu);
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->mu);
	uint64_t dl = h_deadline(5000);
	for (;;) {
		pthread_mutex_lock(&k->mu);
		int calls = k->calls;
		pthread_mutex_unlock(&k->mu);
		if (calls)
			break;
		if (h_now_ms() > dl)
			fail_msg("the px_close did not call back");
		h_sleep_ms(1);
	}
	h_loops_stop();
	h_settle(f, 20);
	expect_once(acc, PX_OP_ACCEPT, l, 0, "the accept");
	h_track(f, acc->c.new_fd);
	if (k->seen_new_fd < 0)
		fail_msg("the accept did not call back while the px_close's "
			 "callback waited for it (engine '%s')", h_engine_text);
	if (k->seen_new_fd == k->fd)
		fail_msg("px_accept gave number %d while the callback of the "
			 "px_close that freed it ran (engine '%s')", k->fd,
			 h_engine_text);
	pthread_mutex_destroy(&k->mu);
	pthread_cond_destroy(&k->cv);
	h_assert_usable(f);
}

/* ------------------------------------------------------------------ */
/* max_aio too small for what is pending                                */
/* ------------------------------------------------------------------ */

static int setup_aio1(void **state)
{
	return h_setup_max_aio(state, 1, h_setup);
}

/*
 * max_aio=1: a read waiting for data holds the only slot, and the write
 * that would give it the data is deferred behind it.  The processor starts
 * the write beyond the limit (and says so on stderr) instead of waiting
 * forever.
 */
static void tiny_max_aio_does_not_starve(void **state)
{
	h_fx *f = *state;
	int a[2];
	h_socketpair(f, a);
	char *in = h_alloc(f, 8);
	h_rec *rd = h_rec_new(f), *wr = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, a[1], in, 8, h_rec_cb, rd), 0);
	assert_int_equal(px_write_stream(f->px, a[0], "ping", 4, h_rec_cb, wr), 0);
	h_wait_rec(f, wr, 10000, "a write deferred behind a read at max_aio=1");
	h_wait_rec(f, rd, 10000, "the read the deferred write answers");
	h_settle(f, 20);
	expect_once(wr, PX_OP_WRITE_STREAM, a[0], 0, "the write");
	expect_once(rd, PX_OP_READ_STREAM, a[1], 0, "the read");
	assert_int_equal(rd->c.bytes, 4);
	assert_memory_equal(in, "ping", 4);
}

/* ------------------------------------------------------------------ */

#define T(fn) cmocka_unit_test_setup_teardown(fn, h_setup, fx_teardown)

int main(int argc, char **argv)
{
	harness_engine_init(argc, argv, "close");
	if (argc > 2 && argv[2][0])
		cmocka_set_test_filter(argv[2]);
	const struct CMUnitTest tests[] = {
		T(closed_under_pending_ops),
		T(closed_under_read_no_timeout),
		T(close_pending_ops_reuse),
		T(close_nothing_pending),
		T(close_twice_and_starts_refused),
		T(close_from_own_callback),
		T(close_then_destroy),
		T(close_during_start_call),
		T(library_keeps_off_a_closed_number),
		T(accept_keeps_off_a_closed_number),
		T(accept_keeps_off_a_closed_number_reset),
		T(accept_keeps_off_at_the_limit),
		T(cancelled_read_leaves_reused_number_alone),
		T(accept_waits_for_close_callback),
		T(close_races_traffic),
		T(cancel_then_close_races_traffic),
		cmocka_unit_test_setup_teardown(tiny_max_aio_does_not_starve,
						setup_aio1, fx_teardown),
	};
	return cmocka_run_group_tests_name("close", tests, NULL, NULL) ? 1 : 0;
}
