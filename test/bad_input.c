/*
 * bad_input.c - bad input (a promise of include/proactor.h) gets a clear error and
 * leaves the proactor usable.  Run by the conformance program for each
 * engine (argv[1]).
 *
 * What the header promises for a start function: -EBADF when fd is
 * negative or not open, -EINVAL for a NULL callback, a zero length where
 * data must move or one over SSIZE_MAX, a NULL buffer with a length, or a
 * bad address length, -EOPNOTSUPP when no processor does the operation,
 * -EMFILE for an fd the wait strategy cannot watch.  A start that fails
 * never calls back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bad_input.h"
#include "harness.h"

/* The start functions, as one table so every test covers all of them. */
typedef enum kind {
	K_READ_STREAM,
	K_WRITE_STREAM,
	K_WRITE_STREAM_ALL,
	K_READ_FILE,
	K_WRITE_FILE,
	K_READ_DGRAM,
	K_WRITE_DGRAM,
	K_ACCEPT,
	K_CONNECT,
	K_COUNT
} kind;

static const char *const kind_name[K_COUNT] = {
	"read_stream", "write_stream", "write_stream_all",
	"read_file",   "write_file",   "read_dgram",
	"write_dgram", "accept",       "connect",
};

static struct sockaddr_in discard_addr(void)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(9);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int start_kind(px_proactor *px, kind k, int fd, void *buf, size_t len,
		      px_callback *cb, void *user)
{
	static struct sockaddr_in to;
	to = discard_addr();
	switch (k) {
	case K_READ_STREAM:
		return px_read_stream(px, fd, buf, len, cb, user);
	case K_WRITE_STREAM:
		return px_write_stream(px, fd, buf, len, cb, user);
	case K_WRITE_STREAM_ALL:
		return px_write_stream_all(px, fd, buf, len, cb, user);
	case K_READ_FILE:
		return px_read_file(px, fd, buf, len, 0, cb, user);
	case K_WRITE_FILE:
		return px_write_file(px, fd, buf, len, 0, cb, user);
	case K_READ_DGRAM:
		return px_read_dgram(px, fd, buf, len, cb, user);
	case K_WRITE_DGRAM:
		return px_write_dgram(px, fd, buf, len, (struct sockaddr *)&to,
				      sizeof to, cb, user);
	case K_ACCEPT:
		return px_accept(px, fd, cb, user);
	case K_CONNECT:
		return px_connect(px, fd, (struct sockaddr *)&to, sizeof to, cb,
				  user);
	default:
		return -9999;
	}
}

/* Descriptors of the right type for each kind, so only the input under
 * test is wrong. */
typedef struct fds {
	int sv[2];
	int file;
	int udp;
	int listener;
	int tcp;
} fds;

static void make_fds(h_fx *f, fds *d)
{
	h_socketpair(f, d->sv);
	char path[] = "/tmp/px-bad-input-XXXXXX";
	d->file = h_track(f, mkostemp(path, O_CLOEXEC));
	unlink(path);
	d->udp = h_bound_socket(f, SOCK_DGRAM, NULL);
	d->listener = h_bound_socket(f, SOCK_STREAM, NULL);
	assert_int_equal(listen(d->listener, 4), 0);
	d->tcp = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

static int fd_for(const fds *d, kind k)
{
	switch (k) {
	case K_READ_STREAM:
	case K_WRITE_STREAM:
	case K_WRITE_STREAM_ALL:
		return d->sv[0];
	case K_READ_FILE:
	case K_WRITE_FILE:
		return d->file;
	case K_READ_DGRAM:
	case K_WRITE_DGRAM:
		return d->udp;
	case K_ACCEPT:
		return d->listener;
	default:
		return d->tcp;
	}
}

static void expect_rc(int rc, int want, kind k, const char *what)
{
	if (rc != want)
		fail_msg("%s with %s returned %d (%s), expected %d (%s)",
			 kind_name[k], what, rc, px_strerror(rc), want,
			 px_strerror(want));
}

/* The rejected starts never call back, and the proactor still works. */
/* ... through a pipe instead of a socketpair, for an engine whose stream
 * provider need not take sockets (POSIX AIO alone refuses them). */
static void assert_no_callback_and_usable_on(h_fx *f, h_rec *never, bool pipe)
{
	h_settle(f, 20);
	if (atomic_load(&never->calls) != 0)
		fail_msg("a start that returned an error called back anyway "
			 "(op %s, error %d)",
			 px_op_name(never->c.op), never->c.error);
	h_assert_usable(f);
	/* A real operation still round-trips too. */
	int sv[2];
	if (pipe) {
		h_pipe(f, sv);
		int t = sv[0];
		sv[0] = sv[1];   /* sv[0] writes, sv[1] reads, as below */
		sv[1] = t;
	} else {
		h_socketpair(f, sv);
	}
	char *in = h_alloc(f, 4), *out = h_alloc(f, 4);
	memcpy(out, "ok!", 4);
	h_rec *r = h_rec_new(f), *w = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, sv[1], in, 4, h_rec_cb, r), 0);
	assert_int_equal(px_write_stream(f->px, sv[0], out, 4, h_rec_cb, w), 0);
	h_wait_rec(f, r, 5000, "a read after bad input");
	h_wait_rec(f, w, 5000, "a write after bad input");
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, 4);
	assert_memory_equal(in, "ok!", 4);
}

static void assert_no_callback_and_usable(h_fx *f, h_rec *never)
{
	assert_no_callback_and_usable_on(f, never, false);
}

/* ------------------------------------------------------------------ */

static void bad_fd_negative(void **state)
{
	h_fx *f = *state;
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	for (kind k = 0; k < K_COUNT; k++)
		expect_rc(start_kind(f->px, k, -1, buf, 16, h_rec_cb, never),
			  -EBADF, k, "fd -1");
	for (kind k = 0; k < K_COUNT; k++)
		expect_rc(start_kind(f->px, k, -42, buf, 16, h_rec_cb, never),
			  -EBADF, k, "fd -42");
	assert_int_equal(px_cancel(f->px, -1), -EBADF);
	assert_no_callback_and_usable(f, never);
}

static void bad_fd_closed(void **state)
{
	h_fx *f = *state;
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	close(fd);
	for (kind k = 0; k < K_COUNT; k++) {
		/* Still closed (nothing else in this process opens files
		 * behind the test's back, but check). */
		assert_int_equal(fcntl(fd, F_GETFD), -1);
		expect_rc(start_kind(f->px, k, fd, buf, 16, h_rec_cb, never),
			  -EBADF, k, "a closed fd");
	}
	assert_no_callback_and_usable(f, never);
}

/* A number the engine has seen open and the application then closed with
 * close(2): every page's ERRORS promise -EBADF from the call, except on
 * the io_uring and Linux AIO providers, which look at a number only until
 * they have seen it open and may instead return 0 and complete with EBADF
 * (px_read_stream(3), px_read_file(3), px_read_dgram(3), px_accept(3)),
 * as may a start that is deferred on any engine.  For each start function: one operation that succeeds on a descriptor
 * of its kind, close(2), then the same start on the number. */
static void bad_fd_closed_after_use(void **state)
{
	h_fx *f = *state;
	char *buf = h_alloc(f, 16);
	memset(buf, 'x', 16);
	for (kind k = 0; k < K_COUNT; k++) {
		px_op op = k == K_WRITE_STREAM_ALL ? PX_OP_WRITE_STREAM :
			   k > K_WRITE_STREAM_ALL ? (px_op)(k - 1) : (px_op)k;
		px_config cfg;
		const char *prov = h_proc_for(f, op, &cfg)->provider;
		bool late_ok = !strcmp(prov, "uring") ||
				 !strcmp(prov, "linux_aio");
		fds d;
		make_fds(f, &d);
		int fd = fd_for(&d, k), peer = -1;
		struct sockaddr_in at;
		socklen_t alen = sizeof at;
		if (k == K_READ_STREAM) {
			assert_int_equal(write(d.sv[1], "hi", 2), 2);
		} else if (k == K_READ_FILE) {
			assert_int_equal(pwrite(fd, "hi", 2, 0), 2);
		} else if (k == K_READ_DGRAM) {
			assert_int_equal(getsockname(fd, (struct sockaddr *)&at,
						     &alen), 0);
			assert_int_equal(sendto(fd, "hi", 2, 0,
						(struct sockaddr *)&at, alen), 2);
		} else if (k == K_ACCEPT) {
			assert_int_equal(getsockname(fd, (struct sockaddr *)&at,
						     &alen), 0);
			peer = h_track(f, socket(AF_INET, SOCK_STREAM |
						 SOCK_CLOEXEC, 0));
			assert_int_equal(connect(peer, (struct sockaddr *)&at,
						 alen), 0);
		}
		h_rec *first = h_rec_new(f), *late = h_rec_new(f);
		int rc = k == K_CONNECT ?
			 /* To the listener, which takes the connection. */
			 (getsockname(d.listener, (struct sockaddr *)&at,
				      &alen),
			  px_connect(f->px, fd, (struct sockaddr *)&at, alen,
				     h_rec_cb, first)) :
			 start_kind(f->px, k, fd, buf, 16, h_rec_cb, first);
		if (rc == -EOPNOTSUPP)
			continue;  /* (POSIX AIO alone: no sockets) */
		expect_rc(rc, 0, k, "a descriptor of its kind");
		h_wait_rec(f, first, 5000, "the operation that sees fd open");
		if (first->c.error != 0)
			fail_msg("%s: the first operation failed: %s",
				 kind_name[k], px_strerror(first->c.error));
		if (k == K_ACCEPT)
			close(first->c.new_fd);
		h_close(f, fd);
		assert_int_equal(fcntl(fd, F_GETFD), -1);
		/* A start deferred (start=leader from a thread not leading,
		 * a full max_aio) makes the engine's checks later, on every
		 * engine (px_read_stream(3)): the stats tell. */
		struct px_stats st0, st1;
		assert_int_equal(px_stats(f->px, &st0), 0);
		rc = k == K_CONNECT ?
		     px_connect(f->px, fd, (struct sockaddr *)&at, alen,
				h_rec_cb, late) :
		     start_kind(f->px, k, fd, buf, 16, h_rec_cb, late);
		assert_int_equal(px_stats(f->px, &st1), 0);
		if (st1.deferred > st0.deferred)
			late_ok = true;
		if (rc == 0 && late_ok) {
			h_wait_rec(f, late, 5000, "a start on a closed number");
			if (late->c.error != EBADF)
				fail_msg("%s on a number closed after use "
					 "(provider %s) completed with %d (%s), "
					 "expected EBADF", kind_name[k], prov,
					 late->c.error,
					 px_strerror(late->c.error));
		} else {
			expect_rc(rc, -EBADF, k, "a number closed after use");
			h_settle(f, 10);
			assert_int_equal(atomic_load(&late->calls), 0);
		}
	}
	h_assert_usable(f);
}

/* px_start_op(3): -EINVAL for a field the operation does not take, with a
 * descriptor of the right kind and a callback, so that nothing else could
 * be the reason (op_timeout.c's start_op_refuses_what_an_op_does_not_take
 * takes -EBADF too): an address, or an address length alone, on anything
 * but a datagram write or a connect (or a length alone on those); an
 * offset on anything but a file; a buffer or length on accept or connect;
 * PX_OPF_WRITE_ALL on anything but a stream write. */
static void start_op_fields_an_op_does_not_take(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	struct sockaddr_in *to = h_alloc(f, sizeof *to);
	*to = discard_addr();
	const struct {
		px_op op;
		kind k;
	} ops[] = {
		{PX_OP_READ_STREAM, K_READ_STREAM},
		{PX_OP_WRITE_STREAM, K_WRITE_STREAM},
		{PX_OP_READ_FILE, K_READ_FILE},
		{PX_OP_WRITE_FILE, K_WRITE_FILE},
		{PX_OP_READ_DGRAM, K_READ_DGRAM},
		{PX_OP_WRITE_DGRAM, K_WRITE_DGRAM},
		{PX_OP_ACCEPT, K_ACCEPT},
		{PX_OP_CONNECT, K_CONNECT},
	};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		px_op op = ops[i].op;
		kind k = ops[i].k;
		bool takes_buf = op != PX_OP_ACCEPT && op != PX_OP_CONNECT;
		bool takes_addr = op == PX_OP_WRITE_DGRAM || op == PX_OP_CONNECT;
		/* What the operation takes, made wrong one field at a time. */
		px_op_desc ok = {
			.op = op, .fd = fd_for(&d, k),
			.buf = takes_buf ? buf : NULL, .len = takes_buf ? 16 : 0,
			.addr = op == PX_OP_CONNECT ? (struct sockaddr *)to : NULL,
			.addrlen = op == PX_OP_CONNECT ? sizeof *to : 0,
			.cb = h_rec_cb, .user = never,
		};
		px_op_desc w;
		if (!takes_addr) {
			w = ok;
			w.addr = (struct sockaddr *)to;
			w.addrlen = sizeof *to;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with an address");
			w.timeout_ns = 1000000000;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with an address and a deadline");
		}
		w = ok;
		w.addr = NULL;
		w.addrlen = sizeof *to;
		expect_rc(px_start_op(f->px, &w), -EINVAL, k,
			  "px_start_op with an address length alone");
		if (takes_addr) {
			w = ok;
			w.addr = (struct sockaddr *)to;
			w.addrlen = 0;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with an address alone");
		}
		if (op != PX_OP_READ_FILE && op != PX_OP_WRITE_FILE) {
			w = ok;
			w.offset = 1;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with an offset");
		}
		if (!takes_buf) {
			w = ok;
			w.buf = buf;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with a buffer");
			w = ok;
			w.len = 16;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with a length");
		}
		if (op != PX_OP_WRITE_STREAM) {
			w = ok;
			w.flags = PX_OPF_WRITE_ALL;
			expect_rc(px_start_op(f->px, &w), -EINVAL, k,
				  "px_start_op with PX_OPF_WRITE_ALL");
		}
	}
	assert_no_callback_and_usable(f, never);
}

/* A huge number that is not open: -EBADF at once.  The providers size
 * their descriptor tables by the number, and used to do so before
 * checking it (1 << 26 cost a GiB and seconds, INT32_MAX - 1 gave
 * -ENOMEM; the select wait said -EMFILE). */
static void bad_fd_huge_unopened(void **state)
{
	h_fx *f = *state;
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	const int huge[] = {1 << 26, INT32_MAX - 1};
	for (int i = 0; i < 2; i++) {
		assert_int_equal(fcntl(huge[i], F_GETFD), -1);
		for (kind k = 0; k < K_COUNT; k++) {
			/* The quickest of three tries: work sized by the
			 * number would be slow every time, a preemption
			 * only once. */
			uint64_t el = UINT64_MAX;
			for (int n = 0; n < 3; n++) {
				uint64_t t0 = h_now_ms();
				expect_rc(start_kind(f->px, k, huge[i], buf, 16,
						     h_rec_cb, never),
					  -EBADF, k, "a huge fd that is not open");
				if (h_now_ms() - t0 < el)
					el = h_now_ms() - t0;
			}
			if (el > 500)
				fail_msg("%s on fd %d took %llu ms to fail",
					 kind_name[k], huge[i],
					 (unsigned long long)el);
		}
	}
	assert_int_equal(px_cancel(f->px, 1 << 26), 0);
	assert_no_callback_and_usable(f, never);
}

static void null_callback(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	char *buf = h_alloc(f, 16);
	for (kind k = 0; k < K_COUNT; k++)
		expect_rc(start_kind(f->px, k, fd_for(&d, k), buf, 16, NULL,
				     NULL),
			  -EINVAL, k, "a NULL callback");
	assert_int_equal(px_post(f->px, NULL, NULL), -EINVAL);
	assert_int_equal(px_timer_start(f->px, 1000, NULL, NULL), -EINVAL);
	h_rec *never = h_rec_new(f);
	assert_no_callback_and_usable(f, never);
}

static void zero_length(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	const kind moving[] = {K_READ_STREAM, K_WRITE_STREAM,
			       K_WRITE_STREAM_ALL, K_READ_FILE, K_WRITE_FILE};
	for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++) {
		kind k = moving[i];
		expect_rc(start_kind(f->px, k, fd_for(&d, k), buf, 0, h_rec_cb,
				     never),
			  -EINVAL, k, "length 0");
	}
	assert_no_callback_and_usable(f, never);
}

static void null_buffer_with_length(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	const kind with_buf[] = {K_READ_STREAM, K_WRITE_STREAM,
				 K_WRITE_STREAM_ALL, K_READ_FILE,
				 K_WRITE_FILE, K_READ_DGRAM, K_WRITE_DGRAM};
	for (size_t i = 0; i < sizeof with_buf / sizeof with_buf[0]; i++) {
		kind k = with_buf[i];
		expect_rc(start_kind(f->px, k, fd_for(&d, k), NULL, 16,
				     h_rec_cb, never),
			  -EINVAL, k, "a NULL buffer of length 16");
	}
	assert_no_callback_and_usable(f, never);
}

/* A length over SSIZE_MAX, which no buffer can have: -EINVAL from every
 * start that takes one, as for a vectored total (engines once took it
 * each their own way: io_uring and Linux AIO moved bytes, the readiness
 * engines failed in the completion with EINVAL or EFAULT). */
static void length_over_ssize_max(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	const kind with_buf[] = {K_READ_STREAM, K_WRITE_STREAM,
				 K_WRITE_STREAM_ALL, K_READ_FILE,
				 K_WRITE_FILE, K_READ_DGRAM, K_WRITE_DGRAM};
	const size_t lens[] = {(size_t)SSIZE_MAX + 1, SIZE_MAX};
	for (size_t i = 0; i < sizeof with_buf / sizeof with_buf[0]; i++) {
		for (size_t j = 0; j < 2; j++) {
			kind k = with_buf[i];
			expect_rc(start_kind(f->px, k, fd_for(&d, k), buf,
					     lens[j], h_rec_cb, never),
				  -EINVAL, k, "a length over SSIZE_MAX");
		}
	}
	px_op_desc od;
	memset(&od, 0, sizeof od);
	od.op = PX_OP_READ_STREAM;
	od.fd = d.sv[0];
	od.buf = buf;
	od.len = SIZE_MAX;
	od.cb = h_rec_cb;
	od.user = never;
	expect_rc(px_start_op(f->px, &od), -EINVAL, K_READ_STREAM,
		  "px_start_op with a length over SSIZE_MAX");
	assert_no_callback_and_usable(f, never);
}

static void bad_address_length(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	struct sockaddr_storage *ss = h_alloc(f, 2 * sizeof *ss);
	struct sockaddr_in to = discard_addr();
	memcpy(ss, &to, sizeof to);
	struct sockaddr *sa = (struct sockaddr *)ss;
	const socklen_t huge = sizeof(struct sockaddr_storage) + 1;

	assert_int_equal(px_connect(f->px, d.tcp, NULL, 0, h_rec_cb, never),
			 -EINVAL);
	assert_int_equal(px_connect(f->px, d.tcp, sa, 0, h_rec_cb, never),
			 -EINVAL);
	assert_int_equal(px_connect(f->px, d.tcp, sa, huge, h_rec_cb, never),
			 -EINVAL);
	assert_int_equal(px_connect(f->px, d.tcp, NULL, sizeof to, h_rec_cb,
				    never),
			 -EINVAL);
	assert_int_equal(px_write_dgram(f->px, d.udp, buf, 4, sa, 0, h_rec_cb,
					never),
			 -EINVAL);
	assert_int_equal(px_write_dgram(f->px, d.udp, buf, 4, sa, huge,
					h_rec_cb, never),
			 -EINVAL);
	assert_int_equal(px_write_dgram(f->px, d.udp, buf, 4, NULL, sizeof to,
					h_rec_cb, never),
			 -EINVAL);
	assert_no_callback_and_usable(f, never);
}

/* A NULL proactor, or a NULL out-pointer, is -EINVAL from every function
 * whose page lists it (px_destroy(NULL) is 0, px_engine_name(NULL) ""),
 * and a failed px_create leaves *out as it was. */
static void null_arguments(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	struct iovec *iov = h_alloc(f, sizeof *iov);
	iov->iov_base = buf;
	iov->iov_len = 16;
	for (kind k = 0; k < K_COUNT; k++)
		expect_rc(start_kind(NULL, k, fd_for(&d, k), buf, 16, h_rec_cb,
				     never),
			  -EINVAL, k, "a NULL proactor");
	const int sfd = d.sv[0];
	const struct {
		const char *what;
		int64_t rc;
	} calls[] = {
		{"px_readv_stream",
		 px_readv_stream(NULL, sfd, iov, 1, h_rec_cb, never)},
		{"px_writev_stream",
		 px_writev_stream(NULL, sfd, iov, 1, h_rec_cb, never)},
		{"px_writev_stream_all",
		 px_writev_stream_all(NULL, sfd, iov, 1, h_rec_cb, never)},
		{"px_readv_file",
		 px_readv_file(NULL, d.file, iov, 1, 0, h_rec_cb, never)},
		{"px_writev_file",
		 px_writev_file(NULL, d.file, iov, 1, 0, h_rec_cb, never)},
		{"px_post", px_post(NULL, h_rec_cb, never)},
		{"px_cancel", px_cancel(NULL, sfd)},
		{"px_close", px_close(NULL, sfd, h_rec_cb, never)},
		{"px_timer_start", px_timer_start(NULL, 1, h_rec_cb, never)},
		{"px_timer_periodic",
		 px_timer_periodic(NULL, 1, 1, h_rec_cb, never)},
		{"px_timer_cancel", px_timer_cancel(NULL, 1)},
		{"px_handle_events", px_handle_events(NULL, 0)},
		{"px_stop", px_stop(NULL)},
		{"px_stats(NULL, NULL)", px_stats(NULL, NULL)},
		{"px_stats(px, NULL)", px_stats(f->px, NULL)},
		{"px_start_op(px, NULL)", px_start_op(f->px, NULL)},
		{"px_close with a NULL callback",
		 px_close(f->px, sfd, NULL, NULL)},
		{"px_timer_periodic with a NULL callback",
		 px_timer_periodic(f->px, 1, 1, NULL, NULL)},
		{"px_timer_periodic with period 0",
		 px_timer_periodic(f->px, 1, 0, h_rec_cb, never)},
		{"px_readv_stream with a NULL callback",
		 px_readv_stream(f->px, sfd, iov, 1, NULL, NULL)},
	};
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
		if (calls[i].rc != -EINVAL)
			fail_msg("%s returned %lld, expected -EINVAL",
				 calls[i].what, (long long)calls[i].rc);
	assert_int_equal(px_destroy(NULL), 0);
	assert_string_equal(px_engine_name(NULL), "");

	unsetenv("PX_ENGINE");
	char err[256];
	px_proactor *out = (px_proactor *)&out; /* a value to see kept */
	assert_int_equal(px_create(NULL, h_engine_text, err, sizeof err),
			 -EINVAL);
	assert_int_equal(px_create_config(NULL, &h_cfg, err, sizeof err),
			 -EINVAL);
	assert_int_equal(px_create_config(&out, NULL, err, sizeof err),
			 -EINVAL);
	assert_ptr_equal(out, &out);
	/* A NULL text is the empty one, auto, as px_create takes it
	 * (px_config_parse(3)); a NULL cfg is refused. */
	px_config from_null, from_empty;
	memset(&from_null, 0xa5, sizeof from_null);
	assert_int_equal(px_config_parse(&from_null, NULL, err, sizeof err), 0);
	assert_int_equal(px_config_parse(&from_empty, "", err, sizeof err), 0);
	char t_null[256], t_empty[256];
	assert_true(px_config_format(&from_null, t_null, sizeof t_null) > 0);
	assert_true(px_config_format(&from_empty, t_empty, sizeof t_empty) > 0);
	assert_string_equal(t_null, t_empty);
	assert_int_equal(px_config_parse(NULL, "epoll", err, sizeof err),
			 -EINVAL);
	/* px_config_format(3): a NULL cfg -EINVAL; a NULL buf, whatever
	 * len, writes nothing and still gives the length. */
	assert_int_equal(px_config_format(NULL, t_null, sizeof t_null),
			 -EINVAL);
	assert_int_equal(px_config_format(&from_null, NULL, sizeof t_null),
			 (int)strlen(t_null));
	err[0] = 'x';
	assert_int_equal(px_create(&out, "frobnicate=3", err, sizeof err),
			 -EINVAL);
	assert_ptr_equal(out, &out);
	assert_true(err[0] != 'x' && strlen(err) > 0);
	/* errlen 1: room for the NUL alone, which is written. */
	err[0] = 'x';
	assert_int_equal(px_create(&out, "frobnicate=3", err, 1), -EINVAL);
	assert_int_equal(err[0], '\0');
	assert_int_equal(px_create(&out, "frobnicate=3", NULL, 0), -EINVAL);
	assert_ptr_equal(out, &out);
	assert_no_callback_and_usable(f, never);
}

/* proactor(3), Conventions: no function reads or sets errno.  Each call
 * below is made with errno set to a value no system call gives, and must
 * leave it so, on its success and on its failure: starts on a number
 * that is not open (the core's fcntl said EBADF), stream, datagram and
 * accept starts that find nothing to do at once (the readiness engines'
 * first try says EAGAIN), a connect (EINPROGRESS), a file write (io_uring
 * looked at the file with a call that says ENOTTY), px_close, the loop
 * that runs those operations and their callbacks, and the calls that
 * need no descriptor.  The starts and px_close once left errno as their
 * system calls had set it. */
#define ERRNO_MARK 4242

static void errno_kept_cb(const px_completion *c)
{
	h_rec_cb(c);
	errno = ERRNO_MARK + 1;   /* a callback's own errno is its affair */
}

static int64_t errno_check(int64_t rc, const char *what)
{
	if (errno != ERRNO_MARK)
		fail_msg("%s (returned %lld) left errno %d (%s), not the "
			 "caller's %d",
			 what, (long long)rc, errno, strerror(errno), ERRNO_MARK);
	return rc;
}

#define KEEP_ERRNO(call)                                                       \
	(errno = ERRNO_MARK, errno_check((int64_t)(call), #call))

static void errno_pump(h_fx *f, h_rec *r, const char *what)
{
	for (int i = 0; i < 500 && !h_rec_done(r); i++)
		KEEP_ERRNO(px_handle_events(f->px, 10));
	if (!h_rec_done(r))
		fail_msg("%s did not complete within 5 s", what);
}

static void errno_left_alone(void **state)
{
	h_fx *f = *state;
	fds d;
	make_fds(f, &d);
	int p[2];
	h_pipe(f, p);
	char *buf = h_alloc(f, 64);
	h_rec *never = h_rec_new(f);
	px_proactor *px = f->px;

	int gone = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(gone >= 0);
	close(gone);
	for (kind k = 0; k < K_COUNT; k++) {
		int64_t rc = KEEP_ERRNO(start_kind(px, k, gone, buf, 16,
						   h_rec_cb, never));
		if (rc != -EBADF && rc != -EOPNOTSUPP)
			fail_msg("%s on a closed number returned %lld",
				 kind_name[k], (long long)rc);
	}
	assert_int_equal(KEEP_ERRNO(px_close(px, gone, h_rec_cb, never)),
			 -EBADF);

	/* Operations that wait: each start returns 0 (or, where the engine
	 * does not do the operation, -EOPNOTSUPP: errno all the same). */
	h_rec *rd = h_rec_new(f), *dg = h_rec_new(f), *ac = h_rec_new(f);
	h_rec *co = h_rec_new(f), *fw = h_rec_new(f), *fr = h_rec_new(f);
	h_rec *po = h_rec_new(f), *ti = h_rec_new(f), *cl = h_rec_new(f);
	assert_int_equal(KEEP_ERRNO(px_read_stream(px, p[0], buf, 8,
						   errno_kept_cb, rd)), 0);
	int64_t dg_rc = KEEP_ERRNO(px_read_dgram(px, d.udp, buf + 8, 8,
						 errno_kept_cb, dg));
	int64_t ac_rc = KEEP_ERRNO(px_accept(px, d.listener, errno_kept_cb,
					     ac));
	struct sockaddr_in to;
	socklen_t tl = sizeof to;
	assert_int_equal(getsockname(d.listener, (struct sockaddr *)&to, &tl),
			 0);
	int64_t co_rc = KEEP_ERRNO(px_connect(px, d.tcp, (struct sockaddr *)&to,
					      tl, errno_kept_cb, co));
	assert_int_equal(KEEP_ERRNO(px_write_file(px, d.file, "abc", 3, 0,
						  errno_kept_cb, fw)), 0);
	errno_pump(f, fw, "the file write");
	assert_int_equal(KEEP_ERRNO(px_read_file(px, d.file, buf + 16, 3, 0,
						 errno_kept_cb, fr)), 0);
	errno_pump(f, fr, "the file read");
	assert_int_equal(fr->c.bytes, 3);
	if (co_rc == 0) {
		errno_pump(f, co, "the connect");
		assert_int_equal(co->c.error, 0);
		if (ac_rc == 0)
			errno_pump(f, ac, "the accept");
	} else if (co_rc != -EOPNOTSUPP) {
		fail_msg("px_connect returned %lld", (long long)co_rc);
	}
	if (ac->c.new_fd >= 0)
		h_track(f, ac->c.new_fd);
	KEEP_ERRNO(px_handle_events(px, 0));
	assert_int_equal(write(p[1], "x", 1), 1);
	errno_pump(f, rd, "the pipe read");
	assert_int_equal(rd->c.bytes, 1);

	assert_int_equal(KEEP_ERRNO(px_post(px, errno_kept_cb, po)), 0);
	errno_pump(f, po, "the post");
	int64_t id = KEEP_ERRNO(px_timer_start(px, 1000, errno_kept_cb, ti));
	assert_true(id > 0);
	errno_pump(f, ti, "the timer");
	assert_int_equal(KEEP_ERRNO(px_timer_cancel(px, id)), -ENOENT);
	struct px_stats st;
	assert_int_equal(KEEP_ERRNO(px_stats(px, &st)), 0);
	if (dg_rc == 0)
		assert_int_equal(KEEP_ERRNO(px_cancel(px, d.udp)), 1);
	KEEP_ERRNO(px_cancel(px, d.sv[0]));
	/* px_close of a descriptor with a read pending (a dup of the pipe's
	 * reading end, which the test does not close itself). */
	int q = fcntl(p[0], F_DUPFD_CLOEXEC, 0);
	assert_true(q >= 0);
	h_rec *qr = h_rec_new(f);
	int64_t qr_rc = KEEP_ERRNO(px_read_stream(px, q, buf + 24, 8,
						  errno_kept_cb, qr));
	assert_int_equal(qr_rc, 0);
	assert_int_equal(KEEP_ERRNO(px_close(px, q, errno_kept_cb, cl)), 0);
	errno_pump(f, cl, "the px_close");
	assert_int_equal(qr->c.error, ECANCELED);
	if (dg_rc == 0)
		errno_pump(f, dg, "the cancelled datagram read");

	/* The calls that need no proactor, and a second proactor's life. */
	px_config cfg;
	char err[256], text[512];
	KEEP_ERRNO(px_config_parse(&cfg, "no=such", err, sizeof err));
	assert_int_equal(KEEP_ERRNO(px_config_parse(&cfg, h_engine_text, err,
						    sizeof err)),
			 0);
	assert_true(KEEP_ERRNO(px_config_format(&h_cfg, text, sizeof text)) > 0);
	KEEP_ERRNO((px_strerror(-EBADF), 0));
	px_proactor *px2 = NULL;
	px_config c2 = h_cfg;
	c2.flags |= PX_CF_NO_ENV;
	assert_int_equal(KEEP_ERRNO(px_create_config(&px2, &c2, err,
						     sizeof err)),
			 0);
	assert_int_equal(KEEP_ERRNO(px_stop(px2)), 0);
	assert_int_equal(KEEP_ERRNO(px_handle_events(px2, 0)), -ESHUTDOWN);
	assert_int_equal(KEEP_ERRNO(px_destroy(px2)), 0);
	assert_int_equal(atomic_load(&never->calls), 0);
}

/* The address given to px_write_dgram and px_connect is copied at the
 * start (px_read_dgram(3), px_accept(3), OWNERSHIP): the caller may reuse
 * it as soon as the call returns.  Here it is overwritten with another
 * family and port right after each start, before the loop runs (io_uring
 * sends and connects only at its next lead), and the datagram and the
 * connection still reach the address given. */
static void addresses_copied_at_start(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in rx_addr, l_addr;
	int rx = h_bound_socket(f, SOCK_DGRAM, &rx_addr);
	int tx = h_track(f, socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	int l = h_bound_socket(f, SOCK_STREAM, &l_addr);
	assert_int_equal(listen(l, 4), 0);
	int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	struct sockaddr_storage *to = h_alloc(f, sizeof *to);
	char *out = h_alloc(f, 4), *in = h_alloc(f, 8);
	memcpy(out, "adr", 4);
	h_rec *w = h_rec_new(f), *r = h_rec_new(f), *co = h_rec_new(f);

	memcpy(to, &rx_addr, sizeof rx_addr);
	int rc = px_write_dgram(f->px, tx, out, 4, (struct sockaddr *)to,
				sizeof rx_addr, h_rec_cb, w);
	if (rc == -EOPNOTSUPP) {
		printf("no datagram or connect operations on this engine: "
		       "skipped\n");
		skip();
	}
	assert_int_equal(rc, 0);
	memset(to, 0xff, sizeof *to);
	to->ss_family = AF_UNIX;
	memcpy(to, &l_addr, sizeof l_addr);
	assert_int_equal(px_connect(f->px, c, (struct sockaddr *)to,
				    sizeof l_addr, h_rec_cb, co),
			 0);
	memset(to, 0xff, sizeof *to);
	to->ss_family = AF_UNIX;
	h_wait_rec(f, w, 5000, "the datagram write");
	h_wait_rec(f, co, 5000, "the connect");
	assert_int_equal(w->c.error, 0);
	assert_int_equal(w->c.bytes, 4);
	assert_int_equal(w->c.addrlen, sizeof rx_addr);
	assert_memory_equal(&w->c.addr, &rx_addr, sizeof rx_addr);
	assert_int_equal(co->c.error, 0);
	assert_memory_equal(&co->c.addr, &l_addr, sizeof l_addr);
	assert_int_equal(px_read_dgram(f->px, rx, in, 8, h_rec_cb, r), 0);
	h_wait_rec(f, r, 5000, "the datagram read");
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, 4);
	assert_memory_equal(in, "adr", 4);
}

/* A start deferred behind a full max_aio (1 here, held by a read that
 * waits) meets the engine's checks later: on a number the proactor has
 * met and the application has since closed with close(2) it returns 0
 * and its callback says EBADF (px_read_stream(3), ERRORS); a negative
 * fd, a NULL callback and a zero length are refused by the call all the
 * same. */
static int setup_max_aio_1(void **state)
{
	return h_setup_max_aio(state, 1, h_setup);
}

static void deferred_start_checks_come_in_the_completion(void **state)
{
	h_fx *f = *state;
	int x[2], sv[2];
	h_socketpair(f, x);
	h_socketpair(f, sv);   /* before x[0] closes: not on its number */
	char *buf = h_alloc(f, 16);
	h_rec *met = h_rec_new(f), *holder = h_rec_new(f);
	h_rec *late = h_rec_new(f), *never = h_rec_new(f);
	assert_int_equal(write(x[1], "met", 3), 3);
	assert_int_equal(px_read_stream(f->px, x[0], buf, 16, h_rec_cb, met),
			 0);
	h_wait_rec(f, met, 5000, "a read of the descriptor to close");
	assert_int_equal(met->c.error, 0);
	const int gone = x[0];
	h_close(f, gone);
	assert_int_equal(px_read_stream(f->px, sv[0], buf, 16, h_rec_cb,
					holder),
			 0);
	h_settle(f, 20);
	struct px_stats st0, st1;
	assert_int_equal(px_stats(f->px, &st0), 0);
	assert_int_equal(fcntl(gone, F_GETFD), -1);
	assert_int_equal(px_read_stream(f->px, gone, buf, 16, h_rec_cb, late),
			 0);
	assert_int_equal(px_stats(f->px, &st1), 0);
	assert_int_equal(st1.deferred, st0.deferred + 1);
	assert_int_equal(px_read_stream(f->px, -1, buf, 16, h_rec_cb, never),
			 -EBADF);
	assert_int_equal(px_read_stream(f->px, sv[1], buf, 16, NULL, NULL),
			 -EINVAL);
	assert_int_equal(px_read_stream(f->px, sv[1], buf, 0, h_rec_cb, never),
			 -EINVAL);
	h_settle(f, 20);
	assert_int_equal(atomic_load(&late->calls), 0);
	assert_int_equal(px_cancel(f->px, sv[0]), 1);
	h_wait_rec(f, holder, 5000, "the cancelled read that held max_aio");
	h_wait_rec(f, late, 5000, "the deferred read of a closed number");
	assert_int_equal(holder->c.error, ECANCELED);
	assert_int_equal(late->c.error, EBADF);
	assert_int_equal(late->c.fd, gone);
	/* (Not assert_no_callback_and_usable: its read would hold the one
	 * place and its write wait behind it for a second.) */
	h_settle(f, 20);
	assert_int_equal(atomic_load(&never->calls), 0);
	h_assert_usable(f);
}

/* An engine narrowed to stream operations refuses the others. */
static void unsupported_operation(void **state)
{
	h_fx *f = *state;
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	px_config cfg = h_cfg;
	cfg.primary.ops =
		PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM);
	memset(&cfg.secondary, 0, sizeof cfg.secondary); /* no secondary */
	char err[256] = "";
	int rc = px_create_config(&f->px, &cfg, err, sizeof err);
	if (rc != 0)
		fail_msg("px_create_config with ops=stream: %s: %s",
			 px_strerror(rc), err);
	fds d;
	make_fds(f, &d);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	for (kind k = K_READ_FILE; k < K_COUNT; k++)
		expect_rc(start_kind(f->px, k, fd_for(&d, k), buf, 16, h_rec_cb,
				     never),
			  -EOPNOTSUPP, k, "an engine narrowed to ops=stream");
	assert_no_callback_and_usable_on(f, never, true);
}


/* RLIMIT_NOFILE's soft limit raised to need if it is lower; the test
 * skipped when the hard limit does not allow it. */
static void nofile_at_least_or_skip(rlim_t need)
{
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < need) {
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
			print_message("RLIMIT_NOFILE hard limit %llu is too "
				      "low: skipped\n",
				      (unsigned long long)rl.rlim_max);
			skip();
		}
		rl.rlim_cur = need;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
}
/* With the select wait strategy, an fd >= FD_SETSIZE cannot be watched. */
static void select_fd_beyond_fd_setsize(void **state)
{
	h_fx *f = *state;
	/* In a team the reads and the writes of a stream may go to
	 * different processors: only those on a select wait are refused. */
	px_config cr, cw;
	bool rd_sel = !strcmp(h_proc_for(f, PX_OP_READ_STREAM, &cr)->wait,
			      "select");
	bool wr_sel = !strcmp(h_proc_for(f, PX_OP_WRITE_STREAM, &cw)->wait,
			      "select");
	if (!rd_sel && !wr_sel) {
		print_message("no stream operation on a select wait "
			      "strategy: skipped\n");
		skip();
	}
	nofile_at_least_or_skip(FD_SETSIZE + 200);
	int sv[2];
	h_socketpair(f, sv);
	h_rec *never = h_rec_new(f);
	char *buf = h_alloc(f, 16);
	const int beyond[] = {FD_SETSIZE, FD_SETSIZE + 76};
	for (int i = 0; i < 2; i++) {
		int hi = h_track(f, dup2(sv[1], beyond[i]));
		assert_int_equal(hi, beyond[i]);
		if (rd_sel)
			expect_rc(px_read_stream(f->px, hi, buf, 16, h_rec_cb,
						 never),
				  -EMFILE, K_READ_STREAM, "an fd >= FD_SETSIZE");
		if (wr_sel)
			expect_rc(px_write_stream(f->px, hi, buf, 16, h_rec_cb,
						  never),
				  -EMFILE, K_WRITE_STREAM, "an fd >= FD_SETSIZE");
	}
	/* The last fd select can watch still works. */
	int top = h_track(f, dup2(sv[1], FD_SETSIZE - 1));
	assert_int_equal(top, FD_SETSIZE - 1);
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, top, buf, 16, h_rec_cb, r), 0);
	assert_int_equal(write(sv[0], "top", 3), 3);
	h_wait_rec(f, r, 5000, "read on fd FD_SETSIZE - 1");
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, 3);
	assert_no_callback_and_usable(f, never);
}

/* A high number: fd moved to the first free number at or above want. */
static int move_high(h_fx *f, int fd, int want)
{
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, want);
	assert_true(hi >= want);
	close(fd);
	return h_track(f, hi);
}

/* Every other wait takes descriptors at and beyond FD_SETSIZE: an engine
 * made while every number below FD_SETSIZE is taken (so that its own
 * descriptors are above it) does each kind of operation on such
 * numbers, and px_close of one with a read pending. */
static void numbers_beyond_fd_setsize_work(void **state)
{
	h_fx *f = *state;
	if (!strcmp(h_cfg.primary.wait, "select") ||
	    !strcmp(h_cfg.secondary.wait, "select")) {
		print_message("a select wait strategy refuses them "
			      "(select_fd_beyond_fd_setsize): skipped\n");
		skip();
	}
	enum { BASE = FD_SETSIZE + 40 };
	nofile_at_least_or_skip(FD_SETSIZE + 300);
	/* Every free number below FD_SETSIZE taken while the engine is
	 * made. */
	int *fill = h_alloc(f, FD_SETSIZE * sizeof(int));
	int nfill = 0, fd;
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 &&
	       fd < FD_SETSIZE)
		fill[nfill++] = fd;
	assert_true(fd >= FD_SETSIZE);
	close(fd);
	px_config cfg = h_cfg;
	cfg.flags |= PX_CF_NO_ENV;
	px_proactor *px = NULL;
	char err[512] = "";
	int rc = px_create_config(&px, &cfg, err, sizeof err);
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	if (rc != 0)
		fail_msg("px_create with every number below FD_SETSIZE taken: "
			 "%s: %s", px_strerror(rc), err);
	assert_int_equal(px_destroy(f->px), 0);
	f->px = px;  /* the teardown destroys it */

	int sv[2], p[2];
	h_socketpair(f, sv);
	sv[0] = move_high(f, sv[0], BASE);
	sv[1] = move_high(f, sv[1], BASE);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	p[0] = move_high(f, p[0], BASE);
	p[1] = move_high(f, p[1], BASE);
	char path[] = "/tmp/px-bad-input-XXXXXX";
	int file = move_high(f, mkostemp(path, O_CLOEXEC), BASE);
	unlink(path);
	struct sockaddr_in ua, la;
	int udp = move_high(f, h_bound_socket(f, SOCK_DGRAM, &ua), BASE);
	int lis = move_high(f, h_bound_socket(f, SOCK_STREAM, &la), BASE);
	assert_int_equal(listen(lis, 4), 0);
	int tcp = move_high(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
			    BASE);
	char *buf = h_alloc(f, 64), *fbuf = h_alloc(f, 64);
	h_rec *r[12];
	for (int i = 0; i < 12; i++)
		r[i] = h_rec_new(f);

	/* Streams: a socket both ways, vectored where the engine has it, and
	 * a pipe. */
	assert_int_equal(px_read_stream(px, sv[0], buf, 64, h_rec_cb, r[0]), 0);
	assert_int_equal(px_write_stream_all(px, sv[1], "beyond", 6, h_rec_cb,
					     r[1]), 0);
	h_wait_rec(f, r[0], 5000, "read on a socket beyond FD_SETSIZE");
	h_wait_rec(f, r[1], 5000, "write on a socket beyond FD_SETSIZE");
	assert_int_equal(r[0]->c.error, 0);
	assert_int_equal(r[0]->c.bytes, 6);
	assert_memory_equal(buf, "beyond", 6);
	if (h_vec_supported(f, PX_OP_WRITE_STREAM)) {
		static const struct iovec out[2] = {
			{ (void *)"vec", 3 }, { (void *)"tor", 3 } };
		struct iovec *in = h_alloc(f, 2 * sizeof *in);
		in[0] = (struct iovec){ buf, 2 };
		in[1] = (struct iovec){ buf + 2, 4 };
		assert_int_equal(px_writev_stream(px, sv[0], out, 2, h_rec_cb,
						  r[2]), 0);
		h_wait_rec(f, r[2], 5000, "writev beyond FD_SETSIZE");
		assert_int_equal(px_readv_stream(px, sv[1], in, 2, h_rec_cb,
						 r[3]), 0);
		h_wait_rec(f, r[3], 5000, "readv beyond FD_SETSIZE");
		assert_int_equal(r[3]->c.error, 0);
		assert_int_equal(r[3]->c.bytes, 6);
		assert_memory_equal(buf, "vector", 6);
	}
	assert_int_equal(px_read_stream(px, p[0], buf, 64, h_rec_cb, r[4]), 0);
	assert_int_equal(px_write_stream(px, p[1], "pipe", 4, h_rec_cb, r[5]),
			 0);
	h_wait_rec(f, r[4], 5000, "read on a pipe beyond FD_SETSIZE");
	h_wait_rec(f, r[5], 5000, "write on a pipe beyond FD_SETSIZE");
	assert_int_equal(r[4]->c.bytes, 4);
	assert_memory_equal(buf, "pipe", 4);

	/* A file. */
	assert_int_equal(px_write_file(px, file, "at 4096", 7, 4096, h_rec_cb,
				       r[6]), 0);
	h_wait_rec(f, r[6], 5000, "file write beyond FD_SETSIZE");
	assert_int_equal(r[6]->c.error, 0);
	assert_int_equal(px_read_file(px, file, fbuf, 64, 4096, h_rec_cb, r[7]),
			 0);
	h_wait_rec(f, r[7], 5000, "file read beyond FD_SETSIZE");
	assert_int_equal(r[7]->c.error, 0);
	assert_int_equal(r[7]->c.bytes, 7);
	assert_memory_equal(fbuf, "at 4096", 7);

	/* A datagram to itself, an accept and a connect. */
	if (px_read_dgram(px, udp, buf, 64, h_rec_cb, r[8]) == 0) {
		assert_int_equal(px_write_dgram(px, udp, "dgram", 5,
						(struct sockaddr *)&ua,
						sizeof ua, h_rec_cb, r[9]), 0);
		h_wait_rec(f, r[8], 5000, "datagram read beyond FD_SETSIZE");
		h_wait_rec(f, r[9], 5000, "datagram write beyond FD_SETSIZE");
		assert_int_equal(r[8]->c.error, 0);
		assert_int_equal(r[8]->c.bytes, 5);
		assert_memory_equal(buf, "dgram", 5);
	}
	if (px_accept(px, lis, h_rec_cb, r[10]) == 0) {
		assert_int_equal(px_connect(px, tcp, (struct sockaddr *)&la,
					    sizeof la, h_rec_cb, r[11]), 0);
		h_wait_rec(f, r[10], 5000, "accept beyond FD_SETSIZE");
		h_wait_rec(f, r[11], 5000, "connect beyond FD_SETSIZE");
		assert_int_equal(r[10]->c.error, 0);
		assert_true(r[10]->c.new_fd >= 0);
		h_track(f, r[10]->c.new_fd);
		assert_int_equal(r[11]->c.error, 0);
	}

	/* px_close of a number beyond FD_SETSIZE with a read pending. */
	h_rec *pend = h_rec_new(f), *closed = h_rec_new(f);
	assert_int_equal(px_read_stream(px, sv[0], buf, 64, h_rec_cb, pend), 0);
	assert_int_equal(px_close(px, sv[0], h_rec_cb, closed), 0);
	h_wait_rec(f, closed, 5000, "px_close beyond FD_SETSIZE");
	assert_int_equal(pend->calls, 1);
	assert_int_equal(pend->c.error, ECANCELED);
	assert_int_equal(closed->c.error, 0);
	assert_true(fcntl(sv[0], F_GETFD) < 0);
	for (int i = 0; i < 12; i++)
		assert_true(r[i]->calls <= 1);
	h_assert_usable(f);
}

/* ------------------------------------------------------------------ */
/* Configuration text                                                   */
/* ------------------------------------------------------------------ */

/* px_create(text) must fail with -EINVAL and an error naming each of
 * the words in names; px_config_parse must agree. */
static void expect_config_error(const char *text, const char *const *names)
{
	unsetenv("PX_ENGINE"); /* it would replace text */
	px_proactor *px = NULL;
	char err[512] = "";
	int rc = px_create(&px, text, err, sizeof err);
	if (rc == 0)
		px_destroy(px);
	if (rc != -EINVAL)
		fail_msg("px_create('%s') returned %d (%s), expected -EINVAL",
			 text, rc, px_strerror(rc));
	if (strlen(err) == 0)
		fail_msg("px_create('%s') gave no error message", text);
	for (; *names; names++)
		if (!strstr(err, *names))
			fail_msg("px_create('%s') error message does not name "
				 "the valid choice '%s': \"%s\"",
				 text, *names, err);
	print_message("'%s' -> \"%s\"\n", text, err);

	px_config cfg;
	char err2[512] = "";
	rc = px_config_parse(&cfg, text, err2, sizeof err2);
	if (rc == 0) {
		/* Some combinations only fail at resolve time: then
		 * px_create_config must refuse the struct. */
		cfg.flags |= PX_CF_NO_ENV;
		rc = px_create_config(&px, &cfg, err2, sizeof err2);
		if (rc == 0)
			px_destroy(px);
	}
	if (rc != -EINVAL)
		fail_msg("'%s' accepted by px_config_parse + "
			 "px_create_config (%d)",
			 text, rc);
}

static void config_unknown_key(void **state)
{
	(void)state;
	const char *keys[] = {"provider", "wait", "interrupt", "processor",
			      NULL};
	expect_config_error("provider=select frobnicate=3", keys);
	expect_config_error("frobnicate=3", keys);
}

static void config_unknown_value(void **state)
{
	(void)state;
	const char *providers[] = {"select", NULL};
	expect_config_error("provider=bogus", providers);
	const char *waits[] = {"select", "poll", "epoll", NULL};
	expect_config_error("provider=select wait=kqueue", waits);
	const char *intrs[] = {"pipe", "eventfd", "signal", NULL};
	expect_config_error("provider=select wait=epoll interrupt=pigeon",
			    intrs);
	const char *procs[] = {"shared", "dedicated", NULL};
	expect_config_error("provider=select processor=sometimes", procs);
	const char *ops[] = {"read_stream", "accept", NULL};
	expect_config_error("provider=select ops=read_stream,teleport", ops);
}

static void config_invalid_combination(void **state)
{
	(void)state;
	const char *waits[] = {"select", "poll", "epoll", NULL};
	expect_config_error("provider=select wait=uring", waits);

	/* The same through a struct. */
	px_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.flags = PX_CF_NO_ENV;
	cfg.primary.processor = PX_PROCESSOR_SHARED;
	strcpy(cfg.primary.provider, "select");
	strcpy(cfg.primary.wait, "uring");
	px_proactor *px = NULL;
	char err[512] = "";
	int rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc == 0)
		px_destroy(px);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(err, "epoll"));

	/* A processor whose provider does none of its operations (POSIX
	 * AIO has no accept or connect): refused at creation, not with
	 * EOPNOTSUPP at every start. */
	const char *none[] = {"posix", "ops=", NULL};
	expect_config_error("provider=posix ops=accept,connect", none);
	expect_config_error("epoll ; secondary: provider=posix ops=connect",
			    none);

	strcpy(cfg.primary.wait, "epoll");
	strcpy(cfg.primary.provider, "nosuch");
	err[0] = '\0';
	rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc == 0)
		px_destroy(px);
	assert_int_equal(rc, -EINVAL);
	assert_true(strlen(err) > 0);
}

/* A team may not share out the socket operations of one direction
 * (read_stream, read_dgram, accept; write_stream, write_dgram, connect):
 * each processor keeps the start order of its own operations only, and a
 * write started right after a connect on the other processor ran before
 * the connect was made (EPIPE, "provider=uring ops=stream ; secondary:
 * provider=uring", every time on loopback).  Refused at creation with a
 * message naming who takes what (fixed problem 127); a team that keeps
 * each direction on one processor, or splits only files, still works. */
static void config_team_splits_a_direction(void **state)
{
	(void)state;
	const char *reads[] = {"read operations", "read_stream",
			       "read_dgram,accept", NULL};
	expect_config_error("provider=select wait=epoll ops=stream ; "
			    "secondary: provider=select wait=poll",
			    reads);
	const char *writes[] = {"write operations", "write_stream",
				"write_dgram,connect", NULL};
	expect_config_error("provider=select wait=epoll "
			    "ops=read_stream,write_stream,read_dgram,accept ; "
			    "secondary: provider=select wait=poll",
			    writes);
	/* Overlapping lists: what the primary takes first counts. */
	const char *over[] = {"write operations", "connect", NULL};
	expect_config_error("provider=select wait=epoll ops=file,read_stream,"
			    "read_dgram,accept,connect ; secondary: "
			    "provider=select wait=poll ops=all",
			    over);
	static const char *const fine[] = {
		"provider=select wait=epoll ops=socket ; secondary: "
		"provider=select wait=poll",
		"provider=select wait=epoll ops=read_stream,read_dgram,accept,"
		"read_file ; secondary: provider=select wait=poll",
		"provider=select wait=poll ops=file ; secondary: "
		"provider=select wait=epoll ops=all",
	};
	unsetenv("PX_ENGINE");
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		px_proactor *px = NULL;
		char err[512] = "";
		int rc = px_create(&px, fine[i], err, sizeof err);
		if (rc != 0)
			fail_msg("px_create('%s'): %d %s: %s", fine[i], rc,
				 px_strerror(rc), err);
		px_destroy(px);
	}
}

/* A secondary that no operation can reach (the primary takes all of its
 * operations first: overlapping lists, or a primary that does all) was
 * created all the same, a processor (and with processor=dedicated a
 * thread) for nothing, where an ops= its provider cannot do is refused.
 * Refused now, with a message naming the secondary's operations (fixed
 * problem 128). */
static void config_team_secondary_gets_nothing(void **state)
{
	(void)state;
	const char *none[] = {"secondary: no operation would reach it",
			      "read_file,write_file", NULL};
	expect_config_error("provider=select wait=epoll ops=all ; secondary: "
			    "provider=select wait=poll ops=file",
			    none);
	const char *all[] = {"secondary: no operation would reach it",
			     "read_stream", "connect", NULL};
	expect_config_error("provider=select wait=epoll ; secondary: "
			    "provider=select wait=poll processor=dedicated",
			    all);
	expect_config_error("auto ; secondary: provider=select wait=poll", all);
}

/* The header: secondary.processor = PX_PROCESSOR_NONE means no secondary,
 * whatever the other fields of the secondary say. */
static void config_struct_secondary_none(void **state)
{
	(void)state;
	px_config cfg = h_cfg;
	cfg.secondary.processor = PX_PROCESSOR_NONE;
	strcpy(cfg.secondary.provider, "select");
	strcpy(cfg.secondary.wait, "poll");
	px_proactor *px = NULL;
	char err[256] = "";
	int rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc != 0)
		fail_msg("px_create_config: %s: %s", px_strerror(rc), err);
	char name[512];
	snprintf(name, sizeof name, "%s", px_engine_name(px));
	bool has_secondary = strstr(name, "secondary") != NULL;
	px_destroy(px);
	if (has_secondary)
		fail_msg("secondary.processor = PX_PROCESSOR_NONE, but the "
			 "engine runs a secondary: '%s'",
			 name);

	/* And the primary's PX_PROCESSOR_NONE, a zeroed struct's, is a
	 * shared processor. */
	assert_int_equal(px_config_parse(&cfg, "provider=select wait=poll "
					 "processor=dedicated", NULL, 0), 0);
	cfg.flags |= PX_CF_NO_ENV;
	cfg.primary.processor = PX_PROCESSOR_NONE;
	rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc != 0)
		fail_msg("px_create_config, primary PX_PROCESSOR_NONE: %s: %s",
			 px_strerror(rc), err);
	snprintf(name, sizeof name, "%s", px_engine_name(px));
	px_destroy(px);
	if (!strstr(name, "processor=shared"))
		fail_msg("primary.processor = PX_PROCESSOR_NONE made '%s', not "
			 "a shared processor", name);
}

/* The engine a text makes, or "" with the error in err. */
static void engine_of(const char *text, const px_config *cfg, char *name,
		      size_t len, int *rc, char *err, size_t errlen)
{
	px_proactor *px = NULL;
	*rc = cfg ? px_create_config(&px, cfg, err, errlen)
		  : px_create(&px, text, err, errlen);
	snprintf(name, len, "%s", *rc == 0 ? px_engine_name(px) : "");
	if (*rc == 0)
		assert_int_equal(px_destroy(px), 0);
}

/* px_create(3): a non-empty PX_ENGINE replaces the application's text
 * (a broken one too) and struct, unless the struct carries
 * PX_CF_NO_ENV; an empty one is ignored, and one that does not parse
 * fails the create with -EINVAL and a message that names PX_ENGINE. */
static void engine_environment_variable(void **state)
{
	(void)state;
	char want[512], got[512], other[512], err[512];
	int rc;
	px_config cfg = h_cfg;
	engine_of(NULL, &cfg, want, sizeof want, &rc, err, sizeof err);
	if (rc != 0)
		fail_msg("the engine under test: %s: %s", px_strerror(rc), err);
	/* Something else the application might ask for. */
	const char *app = strstr(want, "wait=poll") ? "select" : "poll";
	unsetenv("PX_ENGINE");
	engine_of(app, NULL, other, sizeof other, &rc, err, sizeof err);
	assert_int_equal(rc, 0);
	assert_string_not_equal(other, want);

	setenv("PX_ENGINE", h_engine_text, 1);
	engine_of(app, NULL, got, sizeof got, &rc, err, sizeof err);
	if (rc != 0 || strcmp(got, want))
		fail_msg("PX_ENGINE='%s', px_create('%s'): %d '%s', expected "
			 "'%s'", h_engine_text, app, rc, got, want);
	engine_of("frobnicate=3", NULL, got, sizeof got, &rc, err, sizeof err);
	if (rc != 0 || strcmp(got, want))
		fail_msg("PX_ENGINE='%s', px_create of a broken text: %d '%s' "
			 "(%s)", h_engine_text, rc, got, err);
	px_config mine;
	assert_int_equal(px_config_parse(&mine, app, NULL, 0), 0);
	engine_of(NULL, &mine, got, sizeof got, &rc, err, sizeof err);
	if (rc != 0 || strcmp(got, want))
		fail_msg("PX_ENGINE='%s', px_create_config('%s'): %d '%s'",
			 h_engine_text, app, rc, got);
	mine.flags |= PX_CF_NO_ENV;
	engine_of(NULL, &mine, got, sizeof got, &rc, err, sizeof err);
	if (rc != 0 || strcmp(got, other))
		fail_msg("PX_CF_NO_ENV with PX_ENGINE set: %d '%s', expected "
			 "'%s'", rc, got, other);

	setenv("PX_ENGINE", "", 1);
	engine_of(app, NULL, got, sizeof got, &rc, err, sizeof err);
	if (rc != 0 || strcmp(got, other))
		fail_msg("an empty PX_ENGINE: %d '%s', expected '%s'", rc, got,
			 other);

	setenv("PX_ENGINE", "frobnicate=3", 1);
	engine_of(app, NULL, got, sizeof got, &rc, err, sizeof err);
	unsetenv("PX_ENGINE");
	if (rc != -EINVAL || strncmp(err, "PX_ENGINE", 9) != 0)
		fail_msg("a PX_ENGINE that does not parse: %d (%s), message "
			 "'%s'", rc, px_strerror(rc), err);

	/* Its message is px_config_parse's, whole: a mistyped preset's
	 * list of presets (over 250 bytes) lost its end in a 256-byte
	 * buffer (fixed problem 185). */
	const char *typo = "linux-aio-epoll";
	char perr[512], want_err[600];
	px_config pc;
	assert_int_equal(px_config_parse(&pc, typo, perr, sizeof perr), -EINVAL);
	snprintf(want_err, sizeof want_err, "PX_ENGINE: %s", perr);
	setenv("PX_ENGINE", typo, 1);
	engine_of(app, NULL, got, sizeof got, &rc, err, sizeof err);
	unsetenv("PX_ENGINE");
	if (rc != -EINVAL || strcmp(err, want_err) != 0)
		fail_msg("PX_ENGINE='%s': %d (%s), message '%s', expected '%s'",
			 typo, rc, px_strerror(rc), err, want_err);

	/* One that parses but cannot be made says whose choice it was: the
	 * application asked for something else (fixed problem 187). */
	const char *unmade = "epoll ; secondary: wait=poll";
	setenv("PX_ENGINE", unmade, 1);
	engine_of(app, NULL, got, sizeof got, &rc, err, sizeof err);
	unsetenv("PX_ENGINE");
	if (rc != -EINVAL || strncmp(err, "PX_ENGINE: ", 11) != 0 ||
	    !strstr(err, "no operation would reach"))
		fail_msg("PX_ENGINE='%s': %d (%s), message '%s', expected "
			 "'PX_ENGINE: ' and why", unmade, rc, px_strerror(rc), err);
}

/* How many descriptor numbers below 4096 are open. */
static int open_fds(void)
{
	int n = 0;
	for (int i = 0; i < 4096; i++)
		if (fcntl(i, F_GETFD) >= 0)
			n++;
	return n;
}

/* px_create with only k descriptor numbers free (RLIMIT_NOFILE set just
 * above the k-th free one), for k = 0, 1, 2 ...: each attempt either works
 * or fails with -EMFILE (-ENFILE) and a message, and leaves exactly the
 * descriptors it found open; with 8 free it must work. */
static void create_at_descriptor_limit(void **state)
{
	(void)state;
	px_config cfg = h_cfg;
	cfg.flags |= PX_CF_NO_ENV;
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	int worked_at = -1;
	for (int k = 0; k <= 8 && worked_at < 0; k++) {
		int before = open_fds();
		/* The number just above the k-th free one. */
		int lim = 0;
		for (int nfree = 0; lim < 4096; lim++) {
			if (nfree == k)
				break;
			if (fcntl(lim, F_GETFD) < 0)
				nfree++;
		}
		struct rlimit low = old;
		low.rlim_cur = (rlim_t)lim;
		if (low.rlim_cur > old.rlim_cur)
			low.rlim_cur = old.rlim_cur;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
		px_proactor *px = NULL;
		char err[512] = "";
		int rc = px_create_config(&px, &cfg, err, sizeof err);
		int drc = rc == 0 ? px_destroy(px) : 0;
		setrlimit(RLIMIT_NOFILE, &old);
		int after = open_fds();
		if (rc == 0 && worked_at < 0)
			worked_at = k;
		print_message("%d free: %s%s%s\n", k, rc ? px_strerror(rc) : "works",
			      rc ? ": " : "", err);
		assert_int_equal(drc, 0);
		if (rc != 0 && rc != -EMFILE && rc != -ENFILE)
			fail_msg("px_create with %d descriptors free: %d (%s), "
				 "not -EMFILE: %s", k, rc, px_strerror(rc), err);
		if (rc != 0 && !err[0])
			fail_msg("px_create with %d descriptors free failed "
				 "without a message", k);
		if (after != before)
			fail_msg("px_create with %d descriptors free (%s) left "
				 "%d descriptors open, not %d", k,
				 rc ? "failed" : "destroyed", after, before);
	}
	if (worked_at < 0)
		fail_msg("px_create failed with 8 descriptors free");
}

static void cloexec_cb(const px_completion *c)
{
	(*(int *)c->user)++;
}

/* Every descriptor an engine opens, at its creation or later for its
 * work (rings of other threads, dups of busy descriptors), is
 * close-on-exec: a program that forks and runs another must not hand it
 * the engine's rings, epoll sets or interrupts. */
static void engine_descriptors_close_on_exec(void **state)
{
	(void)state;
	enum { NFD = 4096 };
	char *was_open = calloc(NFD, 1);
	assert_non_null(was_open);
	for (int i = 0; i < NFD; i++)
		was_open[i] = fcntl(i, F_GETFD) >= 0;
	px_config cfg = h_cfg;
	cfg.flags |= PX_CF_NO_ENV;
	px_proactor *px = NULL;
	char err[512] = "";
	int rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc != 0)
		fail_msg("px_create_config: %s: %s", px_strerror(rc), err);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int file = memfd_create("cloexec", MFD_CLOEXEC);
	assert_true(file >= 0);
	char in[4], back[4];
	int done = 0, want = 0;
	if (px_read_stream(px, sv[0], in, sizeof in, cloexec_cb, &done) == 0)
		want++;
	if (px_write_stream(px, sv[1], "exec", 4, cloexec_cb, &done) == 0)
		want++;
	/* (-EOPNOTSUPP where the engine has no file processor) */
	if (px_write_file(px, file, "exec", 4, 4096, cloexec_cb, &done) == 0)
		want++;
	if (px_read_file(px, file, back, sizeof back, 0, cloexec_cb, &done) == 0)
		want++;
	uint64_t dl = h_deadline(5000);
	while (done < want && h_now_ms() < dl)
		px_handle_events(px, 10);
	int bad = -1;
	for (int i = 0; i < NFD && bad < 0; i++) {
		if (was_open[i] || i == sv[0] || i == sv[1] || i == file)
			continue;
		int fl = fcntl(i, F_GETFD);
		if (fl >= 0 && !(fl & FD_CLOEXEC))
			bad = i;
	}
	assert_int_equal(px_destroy(px), 0);
	close(sv[0]);
	close(sv[1]);
	close(file);
	free(was_open);
	if (done != want)
		fail_msg("%d of %d operations completed within 5 s", done, want);
	if (bad >= 0)
		fail_msg("descriptor %d, opened by the engine, is not "
			 "close-on-exec", bad);
}

/* Run this program again through fork and exec, in its H_LIST_FDS mode,
 * and compare what it inherited with inheritable[] (the numbers that
 * were open without close-on-exec before the engine existed: the test
 * program's own).  Returns the first other number it held, or -1 (-2:
 * the run failed); what gets its name. */
static int exec_inherits(const char *inheritable, int n, char *what,
			 size_t whatsz)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return -2;
	pid_t pid = fork();
	if (pid == 0) {
		/* Only async-signal-safe calls: other threads run. */
		if (dup2(p[1], 1) == 1) {
			char *const argv[] = {(char *)"conformance",
					      (char *)H_LIST_FDS, NULL};
			execv("/proc/self/exe", argv);
		}
		_exit(127);
	}
	close(p[1]);
	char out[8192];
	size_t len = 0;
	ssize_t got;
	while (pid > 0 && len < sizeof out - 1 &&
	       ((got = read(p[0], out + len, sizeof out - 1 - len)) > 0 ||
		(got < 0 && errno == EINTR)))
		len += got > 0 ? (size_t)got : 0;
	out[len] = '\0';
	close(p[0]);
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		snprintf(what, whatsz, "the exec'd program failed (status %#x)",
			 status);
		return -2;
	}
	char *save = NULL;
	for (char *line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		int fd = atoi(line);
		if (fd >= 0 && fd < n && inheritable[fd])
			continue;
		const char *sp = strchr(line, ' ');
		snprintf(what, whatsz, "%s", sp ? sp + 1 : "?");
		return fd;
	}
	return -1;
}

typedef struct exec_in_cb {
	const char *inheritable;
	int n;
	atomic_int ran;
	int bad;
	char what[256];
} exec_in_cb;

static void exec_from_cb(const px_completion *c)
{
	exec_in_cb *e = c->user;
	e->bad = exec_inherits(e->inheritable, e->n, e->what, sizeof e->what);
	atomic_store(&e->ran, 1);
}

/* What the kernel itself hands a program at exec(2): with the engine
 * live (two loop threads, so io_uring has a ring per thread; a read
 * pending; files and sockets moved), a fork and exec from a callback and
 * from a thread that is not in the loop.  The exec'd program is this one,
 * which lists what it inherited: nothing of the engine's may be there. */
static void engine_descriptors_close_on_exec_after_exec(void **state)
{
	h_fx *f = *state;
	enum { NFD = 4096 };
	/* The list is made without the fixture's proactor, whose
	 * descriptors are the engine's; then a new one. */
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	char *inheritable = h_alloc(f, NFD);
	for (int i = 0; i < NFD; i++) {
		int fl = fcntl(i, F_GETFD);
		inheritable[i] = fl >= 0 && !(fl & FD_CLOEXEC);
	}
	char err[512] = "";
	int rc = px_create_config(&f->px, &h_cfg, err, sizeof err);
	if (rc != 0)
		fail_msg("px_create_config: %s: %s", px_strerror(rc), err);
	int sv[2], file = h_track(f, memfd_create("exec", MFD_CLOEXEC));
	assert_true(file >= 0);
	h_socketpair(f, sv);
	h_loops_start(f, 2, false);
	h_rec *w = h_rec_new(f), *rd = h_rec_new(f), *fw = h_rec_new(f);
	h_rec *fr = h_rec_new(f), *pending = h_rec_new(f);
	char *in = h_alloc(f, 16), *back = h_alloc(f, 16);
	assert_int_equal(px_read_stream(f->px, sv[0], in, 4, h_rec_cb, rd), 0);
	assert_int_equal(px_write_stream(f->px, sv[1], "exec", 4, h_rec_cb, w), 0);
	bool files = px_write_file(f->px, file, "exec", 4, 0, h_rec_cb, fw) == 0;
	assert_true(h_wait_at_least(&rd->calls, 1, 5000));
	assert_true(h_wait_at_least(&w->calls, 1, 5000));
	if (files) {
		assert_true(h_wait_at_least(&fw->calls, 1, 5000));
		assert_int_equal(px_read_file(f->px, file, back, 4, 0, h_rec_cb, fr), 0);
		assert_true(h_wait_at_least(&fr->calls, 1, 5000));
	}
	assert_int_equal(px_read_stream(f->px, sv[1], in + 8, 4, h_rec_cb,
					pending), 0);
	exec_in_cb *e = h_alloc(f, sizeof *e);
	e->inheritable = inheritable;
	e->n = NFD;
	assert_int_equal(px_post(f->px, exec_from_cb, e), 0);
	char what[256] = "";
	int bad = exec_inherits(inheritable, NFD, what, sizeof what);
	bool ran = h_wait_at_least(&e->ran, 1, 10000);
	h_loops_stop();
	assert_int_equal(atomic_load(&pending->calls), 0);
	if (bad != -1)
		fail_msg("exec from a thread outside the loop: %s %d (%s)",
			 bad == -2 ? "" : "the program inherited descriptor",
			 bad, what);
	if (!ran)
		fail_msg("the post that execs never ran");
	if (e->bad != -1)
		fail_msg("exec from a callback: %s %d (%s)",
			 e->bad == -2 ? "" : "the program inherited descriptor",
			 e->bad, e->what);
}

/* ------------------------------------------------------------------ */

#define T(fn) cmocka_unit_test_setup_teardown(fn, h_setup, h_teardown)

int bad_input_run(void)
{
	const struct CMUnitTest tests[] = {
		T(bad_fd_negative),
		T(bad_fd_closed),
		T(bad_fd_closed_after_use),
		T(bad_fd_huge_unopened),
		T(null_callback),
		T(zero_length),
		T(null_buffer_with_length),
		T(length_over_ssize_max),
		T(bad_address_length),
		T(start_op_fields_an_op_does_not_take),
		T(null_arguments),
		T(errno_left_alone),
		T(addresses_copied_at_start),
		cmocka_unit_test_setup_teardown(
			deferred_start_checks_come_in_the_completion,
			setup_max_aio_1, h_teardown),
		T(unsupported_operation),
		T(select_fd_beyond_fd_setsize),
		T(numbers_beyond_fd_setsize_work),
		T(create_at_descriptor_limit),
		T(engine_descriptors_close_on_exec),
		T(engine_descriptors_close_on_exec_after_exec),
		T(config_unknown_key),
		T(config_unknown_value),
		T(config_invalid_combination),
		T(config_struct_secondary_none),
		T(engine_environment_variable),
		T(config_team_splits_a_direction),
		T(config_team_secondary_gets_nothing),
	};
	return cmocka_run_group_tests_name("bad_input", tests, NULL, NULL);
}
