/*
 * vectored.c - px_readv_stream, px_writev_stream(_all), px_readv_file and
 * px_writev_file, run by the conformance program for each engine (argv[1]).
 *
 *   - 1,000 small buffers of different sizes written with one vectored
 *     write arrive in order, read back with vectored reads whose buffers
 *     are cut differently;
 *   - a vectored write_all of several MiB to a socketpair (and a pipe)
 *     whose peer reads in small pieces: the short writes, which end inside
 *     a buffer, are resumed until every byte went, in order;
 *   - vectored file writes and reads at offsets, checked with pread;
 *   - the completion gives back iov and iovcnt, buf NULL and len the total;
 *   - bad arrays are refused with -EINVAL, and px_start_op takes the
 *     vectored form;
 *   - a vectored write to a full datagram receiver sends one whole
 *     datagram once there is room;
 *   - an engine whose processor for the operation has no vectored form
 *     (POSIX AIO) refuses with -EOPNOTSUPP: asserted, not skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "vectored.h"

/* A start that the engine may refuse: returns true when it was started;
 * on an engine without the vectored form asserts -EOPNOTSUPP and returns
 * false (the test then has nothing more to check). */
static bool vec_started(h_fx *f, px_op op, int rc, const char *what)
{
	if (h_vec_supported(f, op)) {
		if (rc != 0)
			fail_msg("%s: start failed: %s", what, px_strerror(rc));
		return true;
	}
	if (rc != -EOPNOTSUPP)
		fail_msg("%s on %s: expected -EOPNOTSUPP, got %d", what,
			 px_engine_name(f->px), rc);
	printf("  (%s: refused with EOPNOTSUPP on this engine, as documented)\n",
	       what);
	return false;
}

/* ------------------------------------------------------------------ */
/* A chain of vectored reads into one destination                       */
/* ------------------------------------------------------------------ */

#define VR_MAX 1000

typedef struct vread {
	int fd;
	uint8_t *dst;
	size_t want, got;
	struct iovec *iov;         /* VR_MAX elements, rebuilt per read */
	unsigned cut;              /* varies the piece sizes */
	int reads;
	int error, start_rc;
	bool eof, bad_echo;
	atomic_int done;
} vread;

static void vread_cb(const px_completion *c);

/* The next read: the rest of dst cut into pieces of 1 to 29 bytes, at
 * most VR_MAX of them. */
static int vread_next(px_proactor *px, vread *v)
{
	size_t pos = v->got;
	int n = 0;
	while (pos < v->want && n < VR_MAX) {
		size_t len = 1 + (v->cut++ * 7) % 29;
		if (len > v->want - pos)
			len = v->want - pos;
		v->iov[n].iov_base = v->dst + pos;
		v->iov[n].iov_len = len;
		pos += len;
		n++;
	}
	return px_readv_stream(px, v->fd, v->iov, n, vread_cb, v);
}

static void vread_cb(const px_completion *c)
{
	vread *v = c->user;
	if (c->iov != v->iov || c->buf != NULL || c->iovcnt < 1)
		v->bad_echo = true;
	if (c->error || c->bytes == 0) {
		v->error = c->error;
		v->eof = !c->error;
		atomic_store(&v->done, 1);
		return;
	}
	v->reads++;
	v->got += c->bytes;
	if (v->got >= v->want) {
		atomic_store(&v->done, 1);
		return;
	}
	int rc = vread_next(c->proactor, v);
	if (rc) {
		v->start_rc = rc;
		atomic_store(&v->done, 1);
	}
}

static vread *vread_start(h_fx *f, int fd, size_t want)
{
	vread *v = h_alloc(f, sizeof *v);
	v->fd = fd;
	v->dst = h_alloc(f, want);
	v->want = want;
	v->iov = h_alloc(f, VR_MAX * sizeof *v->iov);
	assert_int_equal(vread_next(f->px, v), 0);
	return v;
}

static void vread_wait(h_fx *f, vread *v, const uint8_t *expect,
		       const char *what)
{
	uint64_t dl = h_deadline(20000);
	while (!atomic_load(&v->done))
		h_pump(f, dl, what);
	if (v->bad_echo)
		fail_msg("%s: a readv completion did not give back its iov "
			 "(or had a buf)", what);
	if (v->start_rc)
		fail_msg("%s: starting the next readv failed: %s", what,
			 px_strerror(v->start_rc));
	if (v->error)
		fail_msg("%s: readv failed with %s after %zu of %zu bytes", what,
			 strerror(v->error), v->got, v->want);
	if (v->got != v->want)
		fail_msg("%s: end of stream after %zu of %zu bytes", what,
			 v->got, v->want);
	if (memcmp(v->dst, expect, v->want) != 0) {
		size_t i = 0;
		while (v->dst[i] == expect[i])
			i++;
		fail_msg("%s: byte %zu differs (sent %u, received %u)", what, i,
			 expect[i], v->dst[i]);
	}
}

/* n buffers with the sizes size_of(i) cut from one pattern, so that the
 * bytes in array order are the pattern. */
static struct iovec *cut_buffers(h_fx *f, uint8_t **whole, int n,
				 size_t (*size_of)(int), size_t *total)
{
	size_t sum = 0;
	for (int i = 0; i < n; i++)
		sum += size_of(i);
	uint8_t *buf = h_alloc(f, sum);
	h_pattern(buf, sum, 11, 0);
	struct iovec *iov = h_alloc(f, (size_t)n * sizeof *iov);
	size_t pos = 0;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = buf + pos;
		iov[i].iov_len = size_of(i);
		pos += size_of(i);
	}
	*whole = buf;
	*total = sum;
	return iov;
}

/* 1 to 37 bytes, and now and then an empty buffer. */
static size_t small_size(int i)
{
	return i % 97 == 5 ? 0 : 1 + (size_t)(i * 13) % 37;
}

/* Around 64 KiB, never a multiple of a page. */
static size_t big_size(int i)
{
	return 65536 + (size_t)(i * 4099) % 8191 - 3000;
}

/* ------------------------------------------------------------------ */
/* Streams                                                              */
/* ------------------------------------------------------------------ */

static void writev_of_1000_small_buffers(h_fx *f, int wfd, int rfd, bool all,
					 const char *what)
{
	uint8_t *whole;
	size_t total;
	struct iovec *iov = cut_buffers(f, &whole, 1000, small_size, &total);
	h_rec *w = h_rec_new(f);
	int rc = all ? px_writev_stream_all(f->px, wfd, iov, 1000, h_rec_cb, w)
		     : px_writev_stream(f->px, wfd, iov, 1000, h_rec_cb, w);
	if (!vec_started(f, PX_OP_WRITE_STREAM, rc, what)) {
		struct iovec one = { .iov_base = whole, .iov_len = 1 };
		assert_int_equal(px_readv_stream(f->px, rfd, &one, 1, h_rec_cb,
						 w),
				 -EOPNOTSUPP);
		return;
	}
	vread *v = vread_start(f, rfd, total);
	h_wait_rec(f, w, 5000, what);
	assert_int_equal(atomic_load(&w->calls), 1);
	assert_int_equal(w->c.op, PX_OP_WRITE_STREAM);
	assert_int_equal(w->c.fd, wfd);
	assert_int_equal(w->c.error, 0);
	assert_null(w->c.buf);
	assert_ptr_equal(w->c.iov, iov);
	assert_int_equal(w->c.iovcnt, 1000);
	assert_int_equal(w->c.len, total);
	/* Well under the room of an empty socketpair or pipe: all of it. */
	assert_int_equal(w->c.bytes, total);
	vread_wait(f, v, whole, what);
	h_settle(f, 20);
	assert_int_equal(atomic_load(&w->calls), 1);
}

static void writev_1000_small_buffers_socketpair(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	writev_of_1000_small_buffers(f, sv[0], sv[1], true,
				     "writev_stream_all of 1000 buffers, socketpair");
	writev_of_1000_small_buffers(f, sv[1], sv[0], false,
				     "writev_stream of 1000 buffers, socketpair");
}

static void writev_1000_small_buffers_pipe(void **state)
{
	h_fx *f = *state;
	int p[2];
	h_pipe(f, p);
	/* Under PIPE_BUF * 4: a pipe holds it (64 KiB by default); the
	 * plain writev may still be cut where a kernel's pipe takes less at
	 * a time, so only the write_all form is used here. */
	writev_of_1000_small_buffers(f, p[1], p[0], true,
				     "writev_stream_all of 1000 buffers, pipe");
}

/* A reader that takes 4 KiB at a time, so that the writer keeps finding
 * the socket full and its short writes end inside a buffer. */
static void writev_all_to_slow_reader(h_fx *f, int wfd, int rfd, int nbuf,
				      const char *what)
{
	uint8_t *whole;
	size_t total;
	struct iovec *iov = cut_buffers(f, &whole, nbuf, big_size, &total);
	/* The caller's array must not change: keep a copy to compare. */
	struct iovec *copy = h_alloc(f, (size_t)nbuf * sizeof *copy);
	memcpy(copy, iov, (size_t)nbuf * sizeof *copy);
	h_rec *w = h_rec_new(f);
	int rc = px_writev_stream_all(f->px, wfd, iov, nbuf, h_rec_cb, w);
	if (!vec_started(f, PX_OP_WRITE_STREAM, rc, what))
		return;
	uint8_t *dst = h_alloc(f, total), *chunk = h_alloc(f, 4096);
	size_t got = 0;
	int reads = 0;
	uint64_t dl = h_deadline(20000);
	h_rec *r = h_rec_new(f);
	while (got < total) {
		/* One record for every read: the last one has been
		 * delivered before the next starts. */
		atomic_store(&r->calls, 0);
		atomic_store(&r->done, 0);
		assert_int_equal(px_read_stream(f->px, rfd, chunk, 4096, h_rec_cb,
						r),
				 0);
		while (!h_rec_done(r))
			h_pump(f, dl, what);
		if (atomic_load(&r->calls) != 1 || r->c.error || !r->c.bytes)
			fail_msg("%s: read %d ended with %s after %zu of %zu bytes",
				 what, reads, r->c.error ? strerror(r->c.error)
							  : "end of stream",
				 got, total);
		assert_true(got + r->c.bytes <= total);
		memcpy(dst + got, chunk, r->c.bytes);
		got += r->c.bytes;
		reads++;
	}
	h_wait_rec(f, w, 5000, what);
	assert_int_equal(atomic_load(&w->calls), 1);
	assert_int_equal(w->c.error, 0);
	assert_int_equal(w->c.bytes, total);
	assert_int_equal(w->c.len, total);
	assert_ptr_equal(w->c.iov, iov);
	assert_int_equal(w->c.iovcnt, nbuf);
	assert_memory_equal(iov, copy, (size_t)nbuf * sizeof *copy);
	if (memcmp(dst, whole, total) != 0) {
		size_t i = 0;
		while (dst[i] == whole[i])
			i++;
		fail_msg("%s: byte %zu differs (sent %u, received %u)", what, i,
			 whole[i], dst[i]);
	}
}

static void writev_all_4mib_socketpair_slow_reader(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	writev_all_to_slow_reader(f, sv[0], sv[1], 64,
				  "writev_stream_all of 64 buffers (4 MiB), socketpair");
}

static void writev_all_1mib_pipe_slow_reader(void **state)
{
	h_fx *f = *state;
	int p[2];
	h_pipe(f, p);
	writev_all_to_slow_reader(f, p[1], p[0], 16,
				  "writev_stream_all of 16 buffers (1 MiB), pipe");
}

/* ------------------------------------------------------------------ */
/* Files                                                                */
/* ------------------------------------------------------------------ */

static int temp_file(h_fx *f)
{
	char path[] = "/tmp/px-vectored-XXXXXX";
	int fd = h_track(f, mkostemp(path, O_CLOEXEC));
	unlink(path);
	return fd;
}

static h_rec *file_vec(h_fx *f, bool write, int fd, const struct iovec *iov,
		       int n, uint64_t off)
{
	h_rec *r = h_rec_new(f);
	int rc = write ? px_writev_file(f->px, fd, iov, n, off, h_rec_cb, r)
		       : px_readv_file(f->px, fd, iov, n, off, h_rec_cb, r);
	assert_int_equal(rc, 0);
	h_wait_rec(f, r, 5000, write ? "writev_file" : "readv_file");
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->c.op, write ? PX_OP_WRITE_FILE : PX_OP_READ_FILE);
	assert_int_equal(r->c.fd, fd);
	if (r->c.error)
		fail_msg("%s at %llu: %s", write ? "writev_file" : "readv_file",
			 (unsigned long long)off, strerror(r->c.error));
	assert_int_equal(r->c.offset, off);
	assert_ptr_equal(r->c.iov, iov);
	assert_int_equal(r->c.iovcnt, n);
	assert_null(r->c.buf);
	return r;
}

static void readv_writev_file_at_offsets(void **state)
{
	h_fx *f = *state;
	int fd = temp_file(f);
	const uint64_t far = 5ull << 30; /* beyond 32 bits */
	uint8_t *a = h_alloc(f, 100), *b = h_alloc(f, 4000), *c = h_alloc(f, 7);
	memset(a, 'A', 100);
	h_pattern(b, 4000, 5, 0);
	memset(c, 'C', 7);
	struct iovec *out = h_alloc(f, 3 * sizeof *out);
	out[0] = (struct iovec){ a, 100 };
	out[1] = (struct iovec){ b, 4000 };
	out[2] = (struct iovec){ c, 7 };

	h_rec *r0 = h_rec_new(f);
	int rc = px_writev_file(f->px, fd, out, 3, 8192, h_rec_cb, r0);
	if (!vec_started(f, PX_OP_WRITE_FILE, rc, "writev_file")) {
		assert_int_equal(px_readv_file(f->px, fd, out, 3, 0, h_rec_cb, r0),
				 -EOPNOTSUPP);
		return;
	}
	h_wait_rec(f, r0, 5000, "writev_file at 8192");
	assert_int_equal(r0->c.error, 0);
	assert_int_equal(r0->c.bytes, 4107);
	assert_int_equal(r0->c.len, 4107);
	h_rec *r = file_vec(f, true, fd, out, 3, far);
	assert_int_equal(r->c.bytes, 4107);

	/* What the kernel has, read without the proactor. */
	uint8_t *chk = h_alloc(f, 4107), *want = h_alloc(f, 4107);
	memcpy(want, a, 100);
	memcpy(want + 100, b, 4000);
	memcpy(want + 4100, c, 7);
	assert_int_equal(pread(fd, chk, 4107, 8192), 4107);
	assert_memory_equal(chk, want, 4107);
	assert_int_equal(pread(fd, chk, 4107, (off_t)far), 4107);
	assert_memory_equal(chk, want, 4107);

	/* Read back cut differently: 1 + 2048 + 4000 bytes from 8192 - 1 (a
	 * zero of the hole first, and of the hole after), then a short read
	 * at the end of the file and one at the end. */
	uint8_t *x = h_alloc(f, 1), *y = h_alloc(f, 2048), *z = h_alloc(f, 4000);
	struct iovec *in = h_alloc(f, 4 * sizeof *in);
	in[0] = (struct iovec){ x, 1 };
	in[1] = (struct iovec){ y, 2048 };
	in[2] = (struct iovec){ NULL, 0 };
	in[3] = (struct iovec){ z, 4000 };
	x[0] = 0xff;
	memset(z, 0xff, 4000);
	r = file_vec(f, false, fd, in, 4, 8191);
	assert_int_equal(r->c.len, 6049);
	assert_int_equal(r->c.bytes, 6049);
	assert_int_equal(x[0], 0);
	assert_memory_equal(y, want, 2048);
	assert_memory_equal(z, want + 2048, 4107 - 2048);
	for (size_t i = 4107 - 2048; i < 4000; i++)
		if (z[i] != 0)
			fail_msg("readv_file: byte %zu of the hole is %u", i, z[i]);

	r = file_vec(f, false, fd, in, 4, far + 4000);
	assert_int_equal(r->c.bytes, 107);
	assert_int_equal(x[0], want[4000]);
	assert_memory_equal(y, want + 4001, 106);
	r = file_vec(f, false, fd, in, 4, far + 4107);
	assert_int_equal(r->c.bytes, 0);
}

/* ------------------------------------------------------------------ */
/* Refusals and px_start_op                                             */
/* ------------------------------------------------------------------ */

static void bad_iov_refused(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	char *buf = h_alloc(f, 16);
	struct iovec *iov = h_alloc(f, (IOV_MAX + 1) * sizeof *iov);
	for (int i = 0; i <= IOV_MAX; i++)
		iov[i] = (struct iovec){ buf, 1 };
	h_rec *r = h_rec_new(f);
	px_proactor *px = f->px;

	assert_int_equal(px_readv_stream(px, sv[0], iov, 0, h_rec_cb, r), -EINVAL);
	assert_int_equal(px_readv_stream(px, sv[0], iov, -1, h_rec_cb, r), -EINVAL);
	assert_int_equal(px_writev_stream(px, sv[0], iov, IOV_MAX + 1, h_rec_cb, r),
			 -EINVAL);
	assert_int_equal(px_writev_stream_all(px, sv[0], NULL, 1, h_rec_cb, r),
			 -EINVAL);
	assert_int_equal(px_readv_file(px, sv[0], iov, INT_MAX, 0, h_rec_cb, r),
			 -EINVAL);
	assert_int_equal(px_writev_stream(px, sv[0], iov, 1, NULL, r), -EINVAL);
	assert_int_equal(px_writev_stream(px, -1, iov, 1, h_rec_cb, r), -EBADF);
	/* Nothing to move, a NULL base with a length, a total past SSIZE_MAX. */
	struct iovec *odd = h_alloc(f, 2 * sizeof *odd);
	odd[0] = (struct iovec){ buf, 0 };
	odd[1] = (struct iovec){ NULL, 0 };
	assert_int_equal(px_readv_stream(px, sv[0], odd, 2, h_rec_cb, r), -EINVAL);
	odd[1] = (struct iovec){ NULL, 4 };
	assert_int_equal(px_writev_file(px, sv[0], odd, 2, 0, h_rec_cb, r), -EINVAL);
	odd[0] = (struct iovec){ buf, (size_t)SSIZE_MAX };
	odd[1] = (struct iovec){ buf, 2 };
	assert_int_equal(px_writev_stream(px, sv[0], odd, 2, h_rec_cb, r), -EINVAL);
	/* px_start_op: a vectored op with a buffer too, on an operation that
	 * has no vectored form, an offset on a stream. */
	const unsigned V = PX_OPF_VECTORED;
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = sv[0], .iov = iov, .iovcnt = 1, .buf = buf, .len = 1,
			.flags = V, .cb = h_rec_cb, .user = r }), -EINVAL);
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_DGRAM,
			.fd = sv[0], .iov = iov, .iovcnt = 1, .flags = V,
			.cb = h_rec_cb, .user = r }), -EINVAL);
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_WRITE_STREAM,
			.fd = sv[0], .iov = iov, .iovcnt = 1, .offset = 4,
			.flags = V, .cb = h_rec_cb, .user = r }), -EINVAL);
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = sv[0], .iov = iov, .iovcnt = 0, .flags = V,
			.cb = h_rec_cb, .user = r }), -EINVAL);
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_FILE,
			.fd = sv[0], .iov = iov, .iovcnt = 1,
			.flags = V | PX_OPF_WRITE_ALL, .cb = h_rec_cb, .user = r }),
			 -EINVAL);
	/* Without the flag the fields are not looked at: no buffer, no
	 * length, so -EINVAL as for any read without one. */
	assert_int_equal(px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = sv[0], .iov = iov, .iovcnt = 1,
			.cb = h_rec_cb, .user = r }), -EINVAL);
	/* The largest count is taken (readv on a socket with no data: left
	 * pending, cancelled). */
	int rc = px_readv_stream(px, sv[0], iov, IOV_MAX, h_rec_cb, r);
	if (vec_started(f, PX_OP_READ_STREAM, rc, "readv_stream of IOV_MAX")) {
		assert_int_equal(px_cancel(px, sv[0]), 1);
		h_wait_rec(f, r, 5000, "the cancelled readv");
		assert_int_equal(r->c.error, ECANCELED);
		assert_int_equal(r->c.len, IOV_MAX);
	}
	h_settle(f, 10);
	assert_true(atomic_load(&r->calls) <= 1);
	h_assert_usable(f);
}

static void start_op_vectored_with_deadline(void **state)
{
	h_fx *f = *state;
	int sv[2];
	h_socketpair(f, sv);
	uint8_t *whole;
	size_t total;
	struct iovec *iov = cut_buffers(f, &whole, 200, small_size, &total);
	h_rec *w = h_rec_new(f);
	int rc = px_start_op(f->px, &(px_op_desc){ .op = PX_OP_WRITE_STREAM,
			.fd = sv[0], .iov = iov, .iovcnt = 200,
			.flags = PX_OPF_WRITE_ALL | PX_OPF_VECTORED,
			.timeout_ns = 5000000000ull,
			.cb = h_rec_cb, .user = w });
	if (!vec_started(f, PX_OP_WRITE_STREAM, rc, "px_start_op writev_all"))
		return;
	vread *v = vread_start(f, sv[1], total);
	h_wait_rec(f, w, 5000, "px_start_op writev_all");
	assert_int_equal(w->c.error, 0);
	assert_int_equal(w->c.bytes, total);
	assert_ptr_equal(w->c.iov, iov);
	vread_wait(f, v, whole, "px_start_op writev_all");

	/* A vectored read with a deadline on a silent socket times out. */
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_start_op(f->px, &(px_op_desc){
			.op = PX_OP_READ_STREAM, .fd = sv[1], .iov = iov,
			.iovcnt = 3, .flags = PX_OPF_VECTORED,
			.timeout_ns = 20000000ull,
			.cb = h_rec_cb, .user = r }), 0);
	h_wait_rec(f, r, 5000, "a readv with a 20 ms deadline");
	assert_int_equal(r->c.error, ETIMEDOUT);
	assert_int_equal(r->c.bytes, 0);
	h_settle(f, 20);
	assert_int_equal(atomic_load(&r->calls), 1);
}

/* ------------------------------------------------------------------ */
/* A vectored write on a datagram socket whose receiver is full         */
/* ------------------------------------------------------------------ */

/* An AF_UNIX datagram socket connected to a receiver that holds as many
 * datagrams as it takes (net.unix.max_dgram_qlen).  A vectored write of
 * three 100-byte buffers, plain and write-all (and the single-buffer
 * write beside them), waits for room and then sends one datagram of 300
 * bytes, counted in the completion.  On io_uring the vectored SENDMSG
 * went without MSG_DONTWAIT, and the kernel's own retry once room came
 * sent an empty datagram and answered 0: the completion said 0 bytes
 * and no error, the data was never sent (fixed problem 54). */
static void writev_to_full_datagram_receiver(void **state)
{
	h_fx *f = *state;
	static const char *what[] = { "px_writev_stream",
				      "px_writev_stream_all",
				      "px_write_stream" };

	for (int mode = 0; mode < 3; mode++) {
		/* The receiver bound, the sender connected to it (the
		 * queue's length limits a receiver that is not the sender's
		 * own peer, so no socketpair). */
		int sv[2];
		struct sockaddr_un ua = { .sun_family = AF_UNIX };
		snprintf(ua.sun_path + 1, sizeof(ua.sun_path) - 1,
			 "px-vectored-%d-%d", (int)getpid(), mode);
		socklen_t ual = (socklen_t)(offsetof(struct sockaddr_un,
						     sun_path) + 1 +
					    strlen(ua.sun_path + 1));
		sv[1] = h_track(f, socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		sv[0] = h_track(f, socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		assert_int_equal(bind(sv[1], (struct sockaddr *)&ua, ual), 0);
		assert_int_equal(connect(sv[0], (struct sockaddr *)&ua, ual), 0);
		int big = 4 << 20;
		(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
		char fill[100], b[1000];
		memset(fill, 'f', sizeof fill);
		int nfill = 0;
		while (send(sv[0], fill, sizeof fill, MSG_DONTWAIT) ==
		       (ssize_t)sizeof fill)
			nfill++;
		assert_true(nfill > 0);
		uint8_t *src = h_alloc(f, 300);
		for (int i = 0; i < 300; i++)
			src[i] = (uint8_t)('a' + i % 26);
		struct iovec *iov = h_alloc(f, 3 * sizeof(*iov));
		for (int i = 0; i < 3; i++)
			iov[i] = (struct iovec){ src + 100 * i, 100 };
		h_rec *w = h_rec_new(f);
		int rc = mode == 0 ? px_writev_stream(f->px, sv[0], iov, 3,
						      h_rec_cb, w)
		       : mode == 1 ? px_writev_stream_all(f->px, sv[0], iov, 3,
							  h_rec_cb, w)
		       : px_write_stream(f->px, sv[0], src, 300, h_rec_cb, w);
		if (mode < 2 && !vec_started(f, PX_OP_WRITE_STREAM, rc, what[mode]))
			continue;
		if (mode == 2)
			assert_int_equal(rc, 0);
		h_settle(f, 20);
		/* Room: the fillers are read. */
		for (int i = 0; i < nfill; i++)
			assert_int_equal(recv(sv[1], b, sizeof b, 0), 100);
		h_wait_rec(f, w, 5000, what[mode]);
		if (w->c.error || w->c.bytes != 300)
			fail_msg("%s of 300 bytes to a full datagram receiver: "
				 "error %d, %zu bytes", what[mode], w->c.error,
				 w->c.bytes);
		ssize_t n = recv(sv[1], b, sizeof b, 0);
		if (n != 300 || memcmp(b, src, 300) != 0)
			fail_msg("%s: the receiver got a datagram of %zd bytes "
				 "instead of the 300 written", what[mode], n);
		assert_int_equal(recv(sv[1], b, sizeof b, MSG_DONTWAIT), -1);
		assert_int_equal(errno, EAGAIN);
		h_settle(f, 5);
		assert_int_equal(atomic_load(&w->calls), 1);
	}
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, h_setup, h_teardown)

int vectored_run(void)
{
	const struct CMUnitTest tests[] = {
		T(writev_1000_small_buffers_socketpair),
		T(writev_1000_small_buffers_pipe),
		T(writev_all_4mib_socketpair_slow_reader),
		T(writev_all_1mib_pipe_slow_reader),
		T(readv_writev_file_at_offsets),
		T(bad_iov_refused),
		T(start_op_vectored_with_deadline),
		T(writev_to_full_datagram_receiver),
	};
	return cmocka_run_group_tests_name("vectored", tests, NULL, NULL);
}
