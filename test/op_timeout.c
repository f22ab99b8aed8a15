/*
 * op_timeout.c - per-operation deadlines (px_start_op with timeout_ns), run
 * by the conformance program for each engine (argv[1]).
 *
 *   - a read on a silent socket completes once, with ETIMEDOUT, no earlier
 *     than its deadline, and the socket still works afterwards;
 *   - a read whose data is there, or comes before the deadline, completes
 *     once with the data and is never also timed out;
 *   - data racing the deadline (100 rounds): one completion each, the data
 *     or ETIMEDOUT, and no byte is lost either way;
 *   - px_cancel racing the deadline (100 rounds): one completion each,
 *     ECANCELED or ETIMEDOUT;
 *   - px_cancel or px_close well before the deadline, the callback run
 *     after it: ECANCELED, counted as cancelled;
 *   - a write_all to a peer that does not read: ETIMEDOUT with the bytes
 *     written so far;
 *   - px_start_op refuses what an operation does not take.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "harness.h"
#include "op_timeout.h"

#define MS 1000000ull

static int read_with_deadline(h_fx *f, int fd, void *buf, size_t len,
			      uint64_t timeout_ns, h_rec *r)
{
	return px_start_op(f->px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = fd, .buf = buf, .len = len,
			.timeout_ns = timeout_ns, .cb = h_rec_cb, .user = r });
}

static void read_on_silent_socket_times_out(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *in = h_alloc(f, 64);
	h_rec *r = h_rec_new(f);
	uint64_t t0 = h_now_ns();
	assert_int_equal(read_with_deadline(f, sv[1], in, 64, 50 * MS, r), 0);
	h_wait_rec(f, r, 5000, "the read with a 50 ms deadline");
	h_settle(f, 100);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->c.op, PX_OP_READ_STREAM);
	assert_int_equal(r->c.fd, sv[1]);
	assert_int_equal(r->c.error, ETIMEDOUT);
	assert_int_equal(r->c.bytes, 0);
	if (r->at_ns - t0 < 50 * MS)
		fail_msg("timed out after %llu us, before its deadline",
			 (unsigned long long)((r->at_ns - t0) / 1000));

	/* The socket works, and no leftover read takes its data. */
	h_assert_reads_back(f, sv[0], sv[1], in, 64, "abc",
			    "a read after the timeout");
	assert_int_equal(atomic_load(&r->calls), 1);
}

static void read_that_completes_first_is_not_timed_out(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *in = h_alloc(f, 64);

	/* Data already there. */
	h_rec *r = h_rec_new(f);
	assert_int_equal(write(sv[0], "hello", 5), 5);
	assert_int_equal(read_with_deadline(f, sv[1], in, 64, 30 * MS, r), 0);
	h_wait_rec(f, r, 5000, "a read with data waiting");
	/* Data that comes after the start, before the deadline. */
	h_rec *r2 = h_rec_new(f);
	assert_int_equal(read_with_deadline(f, sv[1], in + 32, 32, 30 * MS, r2), 0);
	h_settle(f, 5);
	assert_int_equal(write(sv[0], "world", 5), 5);
	h_wait_rec(f, r2, 5000, "a read whose data came later");
	h_settle(f, 80);  /* well past both deadlines */
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, 5);
	assert_memory_equal(in, "hello", 5);
	assert_int_equal(atomic_load(&r2->calls), 1);
	if (r2->c.error == 0) {
		assert_int_equal(r2->c.bytes, 5);
		assert_memory_equal(in + 32, "world", 5);
	} else {
		/* A machine slow enough to let 30 ms pass before the write:
		 * then the data must still be in the socket. */
		assert_int_equal(r2->c.error, ETIMEDOUT);
		char tmp[8];
		assert_int_equal(recv(sv[1], tmp, sizeof tmp, MSG_DONTWAIT), 5);
	}
}

#define ROUNDS 100

static void spin_us(unsigned us)
{
	uint64_t end = h_now_ns() + us * 1000ull;
	while (h_now_ns() < end)
		;
}

static void data_races_deadline(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *in = h_alloc(f, 8);
	h_rec *r = h_alloc(f, ROUNDS * sizeof(h_rec));
	int timed_out = 0;
	for (int i = 0; i < ROUNDS; i++) {
		assert_int_equal(read_with_deadline(f, sv[1], in, 1, 1 * MS, &r[i]), 0);
		px_handle_events(f->px, 0);
		spin_us((unsigned)(i % 20) * 100);
		char b = (char)('a' + i % 26);
		assert_int_equal(write(sv[0], &b, 1), 1);
		h_wait_rec(f, &r[i], 5000, "a read racing its deadline");
		if (r[i].c.error == ETIMEDOUT) {
			assert_int_equal(r[i].c.bytes, 0);
			/* The byte was not taken: read it now. */
			char got = 0;
			uint64_t dl = h_deadline(5000);
			ssize_t n;
			while ((n = recv(sv[1], &got, 1, MSG_DONTWAIT)) < 0 &&
			       h_now_ms() < dl)
				h_settle(f, 1);
			assert_int_equal(n, 1);
			assert_int_equal(got, b);
			timed_out++;
		} else {
			assert_int_equal(r[i].c.error, 0);
			assert_int_equal(r[i].c.bytes, 1);
			assert_int_equal(in[0], b);
		}
	}
	h_settle(f, 20);
	for (int i = 0; i < ROUNDS; i++)
		if (atomic_load(&r[i].calls) != 1)
			fail_msg("round %d: %d completions", i, atomic_load(&r[i].calls));
	printf("# %d of %d timed out\n", timed_out, ROUNDS);
}

static void cancel_races_deadline(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *in = h_alloc(f, 8);
	h_rec *r = h_alloc(f, ROUNDS * sizeof(h_rec));
	int n_to = 0, n_cancel = 0;
	for (int i = 0; i < ROUNDS; i++) {
		assert_int_equal(read_with_deadline(f, sv[1], in, 1, 1 * MS, &r[i]), 0);
		if (i % 2)
			px_handle_events(f->px, 0);
		spin_us((unsigned)(i % 20) * 100);
		int rc = px_cancel(f->px, sv[1]);
		assert_true(rc == 0 || rc == 1);
		h_wait_rec(f, &r[i], 5000, "a read whose cancel races its deadline");
		assert_int_equal(r[i].c.bytes, 0);
		if (r[i].c.error == ETIMEDOUT)
			n_to++;
		else if (r[i].c.error == ECANCELED)
			n_cancel++;
		else
			fail_msg("round %d: error %d", i, r[i].c.error);
	}
	h_settle(f, 20);
	for (int i = 0; i < ROUNDS; i++)
		if (atomic_load(&r[i].calls) != 1)
			fail_msg("round %d: %d completions", i, atomic_load(&r[i].calls));
	printf("# %d timed out, %d cancelled\n", n_to, n_cancel);
	h_assert_usable(f);
}

/* px_cancel or px_close well before the deadline, and the callback run
 * only after it (no thread ran the loop in between, as when the only loop
 * thread is in a slow callback): the operation was cancelled, not timed
 * out, so ECANCELED, counted as cancelled.  The deadline's expiry used to
 * mark it timed out whatever had happened to it, and the delivery turned
 * its ECANCELED into ETIMEDOUT (a helper's review of 2026-12-05, every
 * engine). */
static void cancel_before_deadline_stays_cancelled(void **state)
{
	h_fx *f = *state;
	char *in = h_alloc(f, 16);

	for (int how = 0; how < 2; how++) {
		const char *what = how ? "px_close" : "px_cancel";
		int sv[2];
		struct px_stats st0, st1;
		h_rec *r = h_rec_new(f), *cl = h_rec_new(f);

		if (how) {
			/* px_close closes sv[1]: not tracked by the harness */
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM |
						    SOCK_CLOEXEC, 0, sv), 0);
			h_track(f, sv[0]);
		} else {
			h_socketpair(f, sv);
		}
		assert_int_equal(px_stats(f->px, &st0), 0);
		assert_int_equal(read_with_deadline(f, sv[1], in, 16, 10 * MS, r), 0);
		if (how)
			assert_int_equal(px_close(f->px, sv[1], h_rec_cb, cl), 0);
		else
			assert_int_equal(px_cancel(f->px, sv[1]), 1);
		h_sleep_ms(40);  /* the deadline passes; no callback ran yet */
		h_wait_rec(f, r, 5000, "a read cancelled before its deadline");
		if (how)
			h_wait_rec(f, cl, 5000, "px_close's callback");
		h_settle(f, 20);
		assert_int_equal(atomic_load(&r->calls), 1);
		if (r->c.error != ECANCELED)
			fail_msg("a read cancelled by %s 10 ms before its deadline, "
				 "its callback run after it: error %d (%s), not "
				 "ECANCELED", what, r->c.error,
				 strerror(r->c.error));
		assert_int_equal(px_stats(f->px, &st1), 0);
		assert_int_equal(st1.cancelled - st0.cancelled, 1);
		assert_int_equal(st1.timed_out - st0.timed_out, 0);
	}
}

static void write_all_times_out_with_bytes_so_far(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	const size_t len = 8u << 20;
	char *out = h_alloc(f, len);
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_start_op(f->px, &(px_op_desc){
			.op = PX_OP_WRITE_STREAM, .fd = sv[0], .buf = out,
			.len = len, .flags = PX_OPF_WRITE_ALL,
			.timeout_ns = 100 * MS, .cb = h_rec_cb, .user = r }), 0);
	h_wait_rec(f, r, 5000, "a write_all with a 100 ms deadline");
	h_settle(f, 20);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->c.error, ETIMEDOUT);
	assert_true(r->c.bytes < len);
	/* What was written is in the socket, and that is what bytes says. */
	size_t got = 0;
	char *tmp = h_alloc(f, 65536);
	ssize_t n;
	while ((n = recv(sv[1], tmp, 65536, MSG_DONTWAIT)) > 0)
		got += (size_t)n;
	assert_int_equal(got, r->c.bytes);
}

static void start_op_refuses_what_an_op_does_not_take(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *buf = h_alloc(f, 16);
	h_rec *never = h_rec_new(f);
	struct sockaddr_in sin = { .sin_family = AF_INET };
	assert_int_equal(px_start_op(f->px, NULL), -EINVAL);
	assert_int_equal(px_start_op(NULL, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = sv[1], .buf = buf, .len = 16, .cb = h_rec_cb,
			.user = never }), -EINVAL);
	px_op_desc bad[] = {
		{ .op = PX_OP_POST, .fd = sv[1], .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_TIMER, .fd = sv[1], .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_COUNT, .fd = sv[1], .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_READ_STREAM, .fd = sv[1], .buf = buf, .len = 0,
		  .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_READ_STREAM, .fd = sv[1], .buf = buf, .len = 16,
		  .offset = 5, .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_READ_STREAM, .fd = sv[1], .buf = buf, .len = 16,
		  .flags = PX_OPF_WRITE_ALL, .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_WRITE_STREAM, .fd = sv[1], .buf = buf, .len = 16,
		  .flags = 0x80, .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_ACCEPT, .fd = sv[1], .buf = buf, .len = 16,
		  .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_CONNECT, .fd = sv[1], .cb = h_rec_cb, .user = never },
		{ .op = PX_OP_CONNECT, .fd = sv[1], .addr = (struct sockaddr *)&sin,
		  .addrlen = sizeof sin, .timeout_ns = 1, .cb = NULL },
		{ .op = PX_OP_READ_STREAM, .fd = -1, .buf = buf, .len = 16,
		  .timeout_ns = 1, .cb = h_rec_cb, .user = never },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = px_start_op(f->px, &bad[i]);
		if (rc != -EINVAL && rc != -EBADF)
			fail_msg("bad descriptor %zu: px_start_op returned %d", i, rc);
	}
	h_settle(f, 20);
	assert_int_equal(atomic_load(&never->calls), 0);
	h_assert_usable(f);
}

/*
 * Deadlines of 1 ns to 100 us on operations whose result is ready at the
 * start or just after it (data or a datagram waiting, or sent right after
 * the start; room to write): the deadline may pass before the engine has
 * made the call, or as the data comes, so each ends with its result, or
 * with ETIMEDOUT having taken nothing (the data or the datagram still
 * there), and a write's bytes are exactly those its peer receives.
 * Nothing lost, nothing twice.
 */
#define TINY_ROUNDS 48

static uint64_t tiny_timeout(int i)
{
	static const uint64_t t[] = {1, 1000, 10000, 100000};
	return t[i % 4];
}

static void tiny_wait(h_fx *f, h_rec *r, int i, const char *what)
{
	if (i % 2)
		px_handle_events(f->px, 0);
	h_wait_rec(f, r, 5000, what);
}

static void tiny_deadlines_on_ready_operations(void **state)
{
	h_fx *f = *state;
	int sv[2], dg[2];
	h_socketpair(f, sv);
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg), 0);
	h_track(f, dg[0]);
	h_track(f, dg[1]);
	char *in = h_alloc(f, 16);
	char *out = h_alloc(f, 16 * TINY_ROUNDS);
	h_rec *r = h_alloc(f, 4 * TINY_ROUNDS * sizeof(h_rec));
	int to[4] = {0};
	char got[16];
	for (int i = 0; i < TINY_ROUNDS; i++) {
		uint64_t tmo = tiny_timeout(i);
		char *o = out + 16 * i;
		for (int k = 0; k < 16; k++)
			o[k] = (char)('A' + (i + k) % 26);

		/* A read with its bytes waiting, or sent just after. */
		h_rec *rr = &r[4 * i];
		if (i % 3)
			assert_int_equal(write(sv[0], o, 4), 4);
		assert_int_equal(px_start_op(f->px, &(px_op_desc){
				.op = PX_OP_READ_STREAM, .fd = sv[1], .buf = in,
				.len = 4, .timeout_ns = tmo, .cb = h_rec_cb,
				.user = rr }), 0);
		if (i % 3 == 0)
			assert_int_equal(write(sv[0], o, 4), 4);
		tiny_wait(f, rr, i, "a read with data and a tiny deadline");
		ssize_t n = recv(sv[1], got, sizeof got, MSG_DONTWAIT);
		if (rr->c.error == ETIMEDOUT) {
			to[0]++;
			if (rr->c.bytes != 0 || n != 4 || memcmp(got, o, 4))
				fail_msg("round %d (%llu ns): a read timed out "
					 "with %zu bytes, and %zd left in the "
					 "socket (4 were sent)", i,
					 (unsigned long long)tmo, rr->c.bytes, n);
		} else if (rr->c.error != 0 || rr->c.bytes != 4 ||
			   memcmp(in, o, 4) || n != -1) {
			fail_msg("round %d (%llu ns): a read with 4 bytes "
				 "waiting: error %d, %zu bytes, %zd left", i,
				 (unsigned long long)tmo, rr->c.error,
				 rr->c.bytes, n);
		}

		/* A write and a write-all with room. */
		for (int all = 0; all < 2; all++) {
			h_rec *wr = &r[4 * i + 1 + all];
			assert_int_equal(px_start_op(f->px, &(px_op_desc){
					.op = PX_OP_WRITE_STREAM, .fd = sv[0],
					.buf = o + 4 + 4 * all, .len = 4,
					.flags = all ? PX_OPF_WRITE_ALL : 0,
					.timeout_ns = tmo, .cb = h_rec_cb,
					.user = wr }), 0);
			tiny_wait(f, wr, i, "a write with room and a tiny deadline");
			n = recv(sv[1], got, sizeof got, MSG_DONTWAIT);
			if (n < 0)
				n = 0;
			if (wr->c.error == ETIMEDOUT)
				to[1 + all]++;
			else if (wr->c.error != 0 || wr->c.bytes != 4)
				fail_msg("round %d (%llu ns): a %s with room: "
					 "error %d, %zu bytes", i,
					 (unsigned long long)tmo,
					 all ? "write-all" : "write",
					 wr->c.error, wr->c.bytes);
			if ((size_t)n != wr->c.bytes ||
			    memcmp(got, o + 4 + 4 * all, (size_t)n))
				fail_msg("round %d (%llu ns): a %s said %s with "
					 "%zu bytes, its peer got %zd", i,
					 (unsigned long long)tmo,
					 all ? "write-all" : "write",
					 wr->c.error ? "ETIMEDOUT" : "done",
					 wr->c.bytes, n);
		}

		/* A datagram waiting, or sent just after. */
		h_rec *dr = &r[4 * i + 3];
		if (i % 3)
			assert_int_equal(send(dg[0], o, 3, 0), 3);
		assert_int_equal(px_start_op(f->px, &(px_op_desc){
				.op = PX_OP_READ_DGRAM, .fd = dg[1], .buf = in,
				.len = 16, .timeout_ns = tmo, .cb = h_rec_cb,
				.user = dr }), 0);
		if (i % 3 == 0)
			assert_int_equal(send(dg[0], o, 3, 0), 3);
		tiny_wait(f, dr, i, "a datagram read with a tiny deadline");
		n = recv(dg[1], got, sizeof got, MSG_DONTWAIT);
		if (dr->c.error == ETIMEDOUT) {
			to[3]++;
			if (dr->c.bytes != 0 || n != 3)
				fail_msg("round %d (%llu ns): a datagram read "
					 "timed out with %zu bytes, %zd left",
					 i, (unsigned long long)tmo,
					 dr->c.bytes, n);
		} else if (dr->c.error != 0 || dr->c.bytes != 3 || n != -1) {
			fail_msg("round %d (%llu ns): a datagram read: error "
				 "%d, %zu bytes, %zd left", i,
				 (unsigned long long)tmo, dr->c.error,
				 dr->c.bytes, n);
		}
	}
	h_settle(f, 10);
	for (int i = 0; i < 4 * TINY_ROUNDS; i++)
		if (atomic_load(&r[i].calls) != 1)
			fail_msg("operation %d: %d completions", i,
				 atomic_load(&r[i].calls));
	printf("# timed out: %d reads, %d writes, %d write-alls, %d datagram "
	       "reads of %d each\n", to[0], to[1], to[2], to[3], TINY_ROUNDS);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, h_setup, h_teardown)

int op_timeout_run(void)
{
	const struct CMUnitTest tests[] = {
		T(read_on_silent_socket_times_out),
		T(read_that_completes_first_is_not_timed_out),
		T(data_races_deadline),
		T(cancel_races_deadline),
		T(cancel_before_deadline_stays_cancelled),
		T(write_all_times_out_with_bytes_so_far),
		T(tiny_deadlines_on_ready_operations),
		T(start_op_refuses_what_an_op_does_not_take),
	};
	return cmocka_run_group_tests_name("op_timeout", tests, NULL, NULL);
}
