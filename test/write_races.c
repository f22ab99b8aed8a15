/*
 * write_races.c - px_write_stream_all, px_writev_stream_all and the other
 * vectored operations under adversarial conditions, per engine (suite
 * 'fault').  Three tests, each on one proactor (destroying a Linux AIO
 * proactor costs tens of milliseconds, so the cases are grouped):
 *
 *  write_alls_ended_mid_transfer
 *    A write-all of 256 KiB (single-buffer and vectored; over AF_UNIX and
 *    TCP loopback with small socket buffers, and over a 4 KiB pipe) whose
 *    peer reads 96 KiB, so that it has been resumed, and then stops; then
 *    px_cancel, px_close, a deadline (px_start_op), a peer reset (for a
 *    pipe: its reader closed), a peer half-close (which must not end it)
 *    or px_destroy.  One callback, with ECANCELED / ETIMEDOUT (never
 *    before the deadline) / EPIPE or ECONNRESET / success, and the peer
 *    receives exactly the bytes reported, the data's prefix in order
 *    (after a reset: at least what the peer had read).  A write-all
 *    started right after px_cancel (before the cancelled one has called
 *    back), or after a deadline, follows that prefix at once; after
 *    px_close a start is refused (-EBADF), and px_close's callback comes
 *    after the write's.  Then three write-alls queued on one descriptor
 *    (the middle one vectored; the two behind started when the peer has
 *    just made room for the stalled first one): a deadline of the middle
 *    one while it waits ends it with 0 bytes and the other two go whole;
 *    px_cancel (which counts 3), px_close and px_destroy end all three,
 *    and the peer's stream is each write's reported prefix in start
 *    order; a peer reset fails all three, the two waiting ones with 0
 *    bytes.
 *    px_destroy comes last, with three single write-alls and three
 *    queued ones pending at once.
 *
 *  races_order_and_iov_edges
 *    16 writes and reads on fresh pipes (their numbers were sockets just
 *    before) cancelled right after their start: ECANCELED or their own
 *    result, never the ENOTSOCK of io_uring's first try (a SEND) on a
 *    pipe (regression test).  Then 18 rounds with two loop threads: a
 *    write-all (AF_UNIX, TCP, pipe; the writer's end non-blocking in half
 *    of them) to a peer reading as fast as it can, ended by px_cancel
 *    and/or a deadline of 0 to 600 us: one callback, all bytes with error
 *    0 or fewer with ECANCELED/ETIMEDOUT (never ECANCELED when px_cancel
 *    found nothing), exactly the reported bytes arrive, and px_stats
 *    counts each ending as the callback saw it.  Then 40 messages (1 byte
 *    to 24 KiB) written with write-alls (every other one vectored, its
 *    header split) on one TCP socket from three outside threads, their
 *    starts spread over the transfer, and from callbacks: each arrives
 *    whole, never interleaved, each thread's in the order it started them
 *    (px_read_stream(3): writes on one descriptor are performed in the
 *    order they were started), nothing after the last.
 *
 *    And the arrays at their edges (iov_edges, run before the races):
 *    0, -1 and IOV_MAX + 1 elements, totals beyond SSIZE_MAX (also a sum
 *    that wraps around) and arrays of empty elements refused by every
 *    vectored start; IOV_MAX elements with empty ones (NULL base or not)
 *    at both ends and among the others: a write-all to a peer reading odd
 *    small pieces (the array unchanged after), and a file write at an
 *    offset; a chain of vectored reads over 300 tiny buffers with guard
 *    bytes between them, fed a few bytes at a time (each byte lands in
 *    its place, nothing past the reported bytes or between buffers is
 *    touched, a read with nothing sent waits); a vectored file read at
 *    and beyond the end of the file (0 bytes) and across it (short,
 *    guards untouched); a vectored write and write-all to an AF_UNIX
 *    datagram socket (one datagram, whole); write-alls of 5 GiB to
 *    /dev/null, single-buffer and vectored (with an element over 4 GiB):
 *    every byte counted; a plain write of as much stops short and says
 *    so.
 *
 *  max_aio_1_write_alls
 *    max_aio=1: two vectored write-alls queued on each of four sockets
 *    whose readers take small pieces, so that each is resumed many times
 *    through one slot; one more, deferred, cancelled: ECANCELED, and its
 *    peer gets exactly the bytes it reports.
 *
 * Where the engine has no vectored stream operations the cases use the
 * single-buffer forms (no engine tested lacks them; vectored.c asserts
 * the refusals), and vectored file cases check the -EOPNOTSUPP of the
 * POSIX AIO teams.  Callbacks never assert (cmocka longjmps); they count
 * and copy (h_rec).  WR_TRACE=1 in the environment prints what some
 * cases saw.
 *
 *   write_races 'ENGINE CONFIG TEXT' [TEST FILTER]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

/* One turn of the loop without waiting in it, then up to a millisecond's
 * wait for data on rfd, which a test reads between turns. */
static void pump_for(h_fx *f, int rfd, uint64_t deadline,
		     const char *waiting_for)
{
	if (h_now_ms() > deadline)
		fail_msg("timed out waiting for %s (engine '%s')", waiting_for,
			 h_engine_text);
	int rc = px_handle_events(f->px, 0);
	if (rc < 0)
		fail_msg("px_handle_events returned %d (%s) while waiting for %s",
			 rc, px_strerror(rc), waiting_for);
	poll(&(struct pollfd){ .fd = rfd, .events = POLLIN }, 1, 1);
}

/* Forget a tracked descriptor that the library (px_close) or the test
 * closes itself. */
static void untrack(h_fx *f, int fd)
{
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] == fd)
			f->fds[i] = -1;
}

static void small_buffers(int wfd, int rfd)
{
	int sz = 8192;
	setsockopt(wfd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	setsockopt(rfd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
}

/* Transports of a stream. */
enum { T_UNIX, T_TCP, T_PIPE, T_PIPE_NB };
static const char *const kind_name[] = { "AF_UNIX", "TCP", "a pipe",
					 "a non-blocking pipe" };

/* A connected pair, sv[0] to write, sv[1] to read, both tracked, with
 * small buffers: AF_UNIX, TCP over loopback, or a pipe (4 KiB; its read
 * end non-blocking, for recv_now; its write end blocking, as a program
 * leaves it, or for T_PIPE_NB non-blocking). */
static void stream_pair(h_fx *f, int kind, int sv[2])
{
	if (kind == T_UNIX) {
		h_socketpair(f, sv);
	} else if (kind == T_PIPE || kind == T_PIPE_NB) {
		int p[2];
		h_pipe(f, p);
		sv[0] = p[1];
		sv[1] = p[0];
		fcntl(sv[0], F_SETPIPE_SZ, 4096);
		fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
		if (kind == T_PIPE_NB)
			fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
		return;
	} else {
		struct sockaddr_in a;
		int l = h_bound_socket(f, SOCK_STREAM, &a);
		int sz = 8192;
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
		assert_int_equal(listen(l, 1), 0);
		sv[0] = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
		assert_true(sv[0] >= 0);
		assert_int_equal(connect(sv[0], (struct sockaddr *)&a, sizeof a), 0);
		sv[1] = h_track(f, accept4(l, NULL, NULL, SOCK_CLOEXEC));
		assert_true(sv[1] >= 0);
		int one = 1;
		setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		h_close(f, l);
	}
	small_buffers(sv[0], sv[1]);
}

/* The writer is done with fd: the peer is to see the end of the stream
 * (a pipe's write end is closed). */
static void end_writing(h_fx *f, int fd)
{
	if (shutdown(fd, SHUT_WR) < 0 && errno == ENOTSOCK)
		h_close(f, fd);
}

/* Close a descriptor of a finished round if the test still has it. */
static void close_tracked(h_fx *f, int fd)
{
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] == fd) {
			h_close(f, fd);
			return;
		}
}

/* One read without waiting: bytes, 0 at end of stream, -1 when nothing is
 * there, and a test failure on an error. */
static ssize_t recv_now(int fd, void *buf, size_t len)
{
	ssize_t n;
	do {
		n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n < 0 && errno == ENOTSOCK)
			n = read(fd, buf, len);  /* a pipe: O_NONBLOCK */
	} while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -1;
	if (n < 0)
		fail_msg("recv: %s", strerror(errno));
	return n;
}

/* Read fd to its end of stream into dst from *got on (cap: one more than
 * can be right), pumping px between polls when given (a shared processor needs it);
 * at most ms milliseconds. */
static void drain_to_eof(px_proactor *px, int fd, uint8_t *dst,
			 size_t cap, size_t *got, int ms, const char *what)
{
	uint64_t dl = h_deadline(ms);
	for (;;) {
		if (*got >= cap)
			fail_msg("%s: more bytes arrived than were written (%zu)",
				 what, *got);
		ssize_t n = recv_now(fd, dst + *got, cap - *got);
		if (n == 0)
			return;
		if (n > 0) {
			*got += (size_t)n;
			continue;
		}
		if (h_now_ms() > dl)
			fail_msg("%s: no end of stream after %zu bytes", what, *got);
		if (px)
			px_handle_events(px, 1);
		else
			poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, 10);
	}
}

/* The first n bytes of got are those of want. */
static void assert_prefix(const uint8_t *got, const uint8_t *want, size_t n,
			  const char *what)
{
	if (memcmp(got, want, n) == 0)
		return;
	size_t i = 0;
	while (got[i] == want[i])
		i++;
	fail_msg("%s: received byte %zu of %zu is %u, sent %u", what, i, n,
		 got[i], want[i]);
}

/* Cut buf into at most max elements of varied sizes, with empty elements
 * among them (every seventh; every fourteenth with a NULL base) and one
 * at each end.  Returns the count. */
static int cut_iov(struct iovec *iov, int max, uint8_t *buf, size_t len)
{
	int n = 0;
	size_t pos = 0;
	iov[n++] = (struct iovec){ NULL, 0 };
	while (pos < len && n < max - 1) {
		size_t l;
		if (n % 7 == 0 && n < max - 2) {
			iov[n] = (struct iovec){ n % 14 ? buf + pos : NULL, 0 };
			n++;
			continue;
		}
		size_t left_elems = (size_t)(max - 1 - n);
		size_t even = (len - pos) / (left_elems ? left_elems : 1);
		l = 1 + (size_t)(n * 2654435761u) % (2 * even + 16);
		if (l > len - pos || n == max - 2)
			l = len - pos;
		iov[n++] = (struct iovec){ buf + pos, l };
		pos += l;
	}
	assert_true(pos == len);
	iov[n++] = (struct iovec){ buf + len, 0 };
	return n;
}

static int fx_setup(void **state)
{
	return h_setup(state);
}

static int fx_setup_aio1(void **state)
{
	return h_setup_max_aio(state, 1, fx_setup);
}

static int fx_teardown(void **state)
{
	h_loops_join();
	return h_teardown(state);
}

/* Destroy the proactor of f now, asserting success. */
static void destroy_now(h_fx *f)
{
	alarm(H_TEARDOWN_S);
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	alarm(H_WATCHDOG_S);
}

/* ------------------------------------------------------------------ */
/* Write-alls queued on one socket from threads and callbacks           */
/* ------------------------------------------------------------------ */

#define Q_SRC 4                /* 0..2: outside threads; 3: callbacks */
#define Q_PER 10
#define Q_MAX_BODY (24 * 1024)
#define Q_MAGIC 0x574d5347u
#define Q_HDR 16

typedef struct qmsg {
	uint8_t *data;             /* header + body */
	size_t len;
	struct iovec iov[40];
	int iovcnt;
	int src, seq;
	atomic_int calls;
	int error;
	size_t bytes;
} qmsg;

typedef struct qstate {
	px_proactor *px;
	int wfd, rfd;
	qmsg msg[Q_SRC][Q_PER];
	atomic_int next_cb_seq;    /* of source 3 */
	atomic_int completed;
	atomic_int start_failed;
	/* reader */
	int seen[Q_SRC];
	uint8_t seen_cb[Q_PER];
	int messages;
	char problem[160];
	size_t extra;              /* bytes after the last message */
} qstate;

static qstate *g_q;

static size_t q_body_len(int src, int seq)
{
	return 1 + ((size_t)seq * 7919u + (size_t)src * 104729u) % Q_MAX_BODY;
}

static void q_fill(qmsg *m, int src, int seq)
{
	size_t body = q_body_len(src, seq);
	m->src = src;
	m->seq = seq;
	m->len = Q_HDR + body;
	uint32_t hdr[4] = { Q_MAGIC, (uint32_t)src, (uint32_t)seq,
			    (uint32_t)m->len };
	memcpy(m->data, hdr, sizeof hdr);
	h_pattern(m->data + Q_HDR, body, (uint32_t)(src << 16 | seq), 0);
	/* Every other message vectored, its header cut in two. */
	if (seq % 2) {
		int n = 0;
		m->iov[n++] = (struct iovec){ m->data, 5 };
		m->iov[n++] = (struct iovec){ NULL, 0 };
		m->iov[n++] = (struct iovec){ m->data + 5, Q_HDR - 5 };
		n += cut_iov(m->iov + n, 36, m->data + Q_HDR, body);
		m->iovcnt = n;
	}
}

static void q_cb(const px_completion *c);

static int q_start(qstate *q, qmsg *m)
{
	if (m->seq % 2)
		return px_writev_stream_all(q->px, q->wfd, m->iov, m->iovcnt, q_cb,
					    m);
	return px_write_stream_all(q->px, q->wfd, m->data, m->len, q_cb, m);
}

static void q_cb(const px_completion *c)
{
	qmsg *m = c->user;
	qstate *q = g_q;
	if (atomic_fetch_add(&m->calls, 1) == 0) {
		m->error = c->error;
		m->bytes = c->bytes;
	}
	/* Each completed message of thread 0 has a callback start one. */
	if (m->src == 0) {
		int s = atomic_fetch_add(&q->next_cb_seq, 1);
		if (s < Q_PER && q_start(q, &q->msg[3][s]) != 0)
			atomic_fetch_add(&q->start_failed, 1);
	}
	atomic_fetch_add(&q->completed, 1);
}

static void *q_thread(void *arg)
{
	qmsg *row = arg;
	for (int i = 0; i < Q_PER; i++) {
		if (q_start(g_q, &row[i]) != 0)
			atomic_fetch_add(&g_q->start_failed, 1);
		/* Spread the starts over the transfer, so that many come
		 * while another message is half written. */
		nanosleep(&(struct timespec){ 0, 50000 + 20000 * (i % 5) }, NULL);
	}
	return NULL;
}

static bool q_read_exact(int fd, uint8_t *buf, size_t len, size_t piece)
{
	size_t got = 0;
	while (got < len) {
		size_t want = len - got < piece ? len - got : piece;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 20000) != 1)
			return false;
		ssize_t n = recv(fd, buf + got, want, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static void *q_reader(void *arg)
{
	qstate *q = arg;
	uint8_t *body = malloc(Q_MAX_BODY), *want = malloc(Q_MAX_BODY);
	int total = Q_SRC * Q_PER;
	while (body && want && q->messages < total) {
		uint32_t hdr[4];
		if (!q_read_exact(q->rfd, (uint8_t *)hdr, Q_HDR, 7)) {
			snprintf(q->problem, sizeof q->problem,
				 "stream ended or stalled after %d messages",
				 q->messages);
			break;
		}
		if (hdr[0] != Q_MAGIC || hdr[1] >= Q_SRC || hdr[2] >= Q_PER ||
		    hdr[3] != Q_HDR + q_body_len((int)hdr[1], (int)hdr[2])) {
			snprintf(q->problem, sizeof q->problem,
				 "message %d: bad header %08x %u %u %u (an "
				 "interleaved or torn message)", q->messages,
				 hdr[0], hdr[1], hdr[2], hdr[3]);
			break;
		}
		int src = (int)hdr[1], seq = (int)hdr[2];
		size_t blen = hdr[3] - Q_HDR;
		if (!q_read_exact(q->rfd, body, blen, 3000)) {
			snprintf(q->problem, sizeof q->problem,
				 "stream ended inside message %d/%d", src, seq);
			break;
		}
		h_pattern(want, blen, (uint32_t)(src << 16 | seq), 0);
		if (memcmp(body, want, blen) != 0) {
			snprintf(q->problem, sizeof q->problem,
				 "message %d/%d: body differs (interleaved?)", src,
				 seq);
			break;
		}
		if (src < 3) {
			if (seq != q->seen[src]) {
				snprintf(q->problem, sizeof q->problem,
					 "thread %d's message %d came where %d was "
					 "due", src, seq, q->seen[src]);
				break;
			}
		} else if (q->seen_cb[seq]++) {
			snprintf(q->problem, sizeof q->problem,
				 "callback message %d twice", seq);
			break;
		}
		q->seen[src]++;
		q->messages++;
	}
	if (q->problem[0]) {
		/* Read on to the end, so that the writers can finish and the
		 * test report the problem instead of waiting for them. */
		uint8_t b[4096];
		while (poll(&(struct pollfd){ .fd = q->rfd, .events = POLLIN }, 1,
			    20000) == 1 && recv(q->rfd, b, sizeof b, 0) > 0)
			;
	} else {
		/* Nothing may follow. */
		uint8_t b[64];
		struct pollfd p = { .fd = q->rfd, .events = POLLIN };
		if (poll(&p, 1, 20000) == 1) {
			ssize_t n = recv(q->rfd, b, sizeof b, 0);
			if (n > 0)
				q->extra = (size_t)n;
		}
	}
	free(body);
	free(want);
	return NULL;
}

static void write_alls_queued_keep_order(void **state)
{
	h_fx *f = *state;
	qstate *q = h_alloc(f, sizeof *q);
	g_q = q;
	uint8_t *arena = h_alloc(f, (size_t)Q_SRC * Q_PER * (Q_HDR + Q_MAX_BODY));
	for (int s = 0; s < Q_SRC; s++)
		for (int i = 0; i < Q_PER; i++) {
			q->msg[s][i].data = arena + ((size_t)s * Q_PER + i) *
							    (Q_HDR + Q_MAX_BODY);
			q_fill(&q->msg[s][i], s, i);
		}
	int sv[2];
	stream_pair(f, T_TCP, sv);
	q->px = f->px;
	q->wfd = sv[0];
	q->rfd = sv[1];
	pthread_t rd, th[3];
	assert_int_equal(pthread_create(&rd, NULL, q_reader, q), 0);
	h_loops_start(f, 2, false);
	for (int s = 0; s < 3; s++)
		assert_int_equal(pthread_create(&th[s], NULL, q_thread, q->msg[s]),
				 0);
	for (int s = 0; s < 3; s++)
		pthread_join(th[s], NULL);
	bool all = h_wait_at_least(&q->completed, Q_SRC * Q_PER, 20000);
	shutdown(sv[0], SHUT_WR);
	pthread_join(rd, NULL);
	h_loops_stop();
	if (!all)
		fail_msg("%d of %d write-alls completed", atomic_load(&q->completed),
			 Q_SRC * Q_PER);
	assert_int_equal(atomic_load(&q->start_failed), 0);
	if (q->problem[0])
		fail_msg("reader: %s", q->problem);
	if (q->extra)
		fail_msg("%zu bytes after the last message", q->extra);
	for (int s = 0; s < Q_SRC; s++)
		for (int i = 0; i < Q_PER; i++) {
			qmsg *m = &q->msg[s][i];
			if (atomic_load(&m->calls) != 1 || m->error ||
			    m->bytes != m->len)
				fail_msg("message %d/%d: %d calls, %s, %zu of %zu "
					 "bytes", s, i, atomic_load(&m->calls),
					 strerror(m->error), m->bytes, m->len);
		}
}

/* ------------------------------------------------------------------ */
/* Arrays at their edges                                                */
/* ------------------------------------------------------------------ */

static void noop_cb(const px_completion *c)
{
	(void)c;
	h_bad("a refused start called back");
}

static void iov_edges_refused(void **state)
{
	h_fx *f = *state;
	px_proactor *px = f->px;
	int sv[2];
	h_socketpair(f, sv);
	static char b[4];
	struct iovec *big = h_alloc(f, (IOV_MAX + 1) * sizeof *big);
	for (int i = 0; i <= IOV_MAX; i++)
		big[i] = (struct iovec){ b, 1 };
	/* The sum beyond SSIZE_MAX, and the sum that wraps around to a
	 * small number. */
	struct iovec over[2] = { { b, (size_t)SSIZE_MAX }, { b, 1 } };
	struct iovec wrap[3] = { { b, SIZE_MAX }, { b, 2 }, { NULL, 0 } };
	struct iovec *bad[5] = { big, over, wrap, big, big };
	int badcnt[5] = { IOV_MAX + 1, 2, 3, 0, -1 };
	for (int k = 0; k < 5; k++) {
		const struct iovec *v = bad[k];
		int n = badcnt[k];
		assert_int_equal(px_readv_stream(px, sv[0], v, n, noop_cb, NULL),
				 -EINVAL);
		assert_int_equal(px_writev_stream(px, sv[0], v, n, noop_cb, NULL),
				 -EINVAL);
		assert_int_equal(px_writev_stream_all(px, sv[0], v, n, noop_cb, NULL),
				 -EINVAL);
		assert_int_equal(px_readv_file(px, sv[0], v, n, 0, noop_cb, NULL),
				 -EINVAL);
		assert_int_equal(px_writev_file(px, sv[0], v, n, 0, noop_cb, NULL),
				 -EINVAL);
		assert_int_equal(px_start_op(px, &(px_op_desc){
				.op = PX_OP_WRITE_STREAM, .fd = sv[0],
				.flags = PX_OPF_WRITE_ALL | PX_OPF_VECTORED,
				.iov = v, .iovcnt = n, .cb = noop_cb }), -EINVAL);
	}
	/* Only empty elements: nothing to move. */
	struct iovec empty[3] = { { NULL, 0 }, { b, 0 }, { NULL, 0 } };
	assert_int_equal(px_writev_stream_all(px, sv[0], empty, 3, noop_cb, NULL),
			 -EINVAL);
	assert_int_equal(px_readv_stream(px, sv[0], empty, 3, noop_cb, NULL),
			 -EINVAL);
	h_settle(f, 2);
	h_assert_no_bad("refused starts");
}

/* IOV_MAX elements, empty ones among them, written with one write-all to
 * a reader that takes odd small pieces; then the same array to a file. */
static void iov_max_write_all(void **state)
{
	h_fx *f = *state;
	const size_t len = 160 * 1024;
	uint8_t *src = h_alloc(f, len), *dst = h_alloc(f, len + 1);
	h_pattern(src, len, 77, 0);
	struct iovec *iov = h_alloc(f, IOV_MAX * sizeof *iov);
	int n = cut_iov(iov, IOV_MAX, src, len);
	assert_int_equal(n, IOV_MAX);
	struct iovec *copy = h_alloc(f, IOV_MAX * sizeof *copy);
	memcpy(copy, iov, IOV_MAX * sizeof *copy);
	int sv[2];
	stream_pair(f, T_UNIX, sv);
	if (!h_vec_supported(f, PX_OP_WRITE_STREAM)) {
		assert_int_equal(px_writev_stream_all(f->px, sv[0], iov, n, h_rec_cb,
						      NULL), -EOPNOTSUPP);
		return;
	}
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_writev_stream_all(f->px, sv[0], iov, n, h_rec_cb, r), 0);
	size_t got = 0;
	unsigned k = 0;
	uint64_t dl = h_deadline(20000);
	while (got < len) {
		size_t piece = 1 + (k++ * 977) % 6000;
		if (piece > len - got)
			piece = len - got;
		ssize_t m = recv_now(sv[1], dst + got, piece);
		if (m == 0)
			fail_msg("end of stream after %zu bytes", got);
		if (m > 0)
			got += (size_t)m;
		else
			pump_for(f, sv[1], dl, "an IOV_MAX write-all");
	}
	h_wait_rec(f, r, 10000, "an IOV_MAX write-all");
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, len);
	assert_int_equal(r->c.len, len);
	assert_int_equal(r->c.iovcnt, IOV_MAX);
	assert_prefix(dst, src, len, "IOV_MAX write-all");
	/* Resumed many times, inside elements too; the array is as it was. */
	assert_memory_equal(iov, copy, IOV_MAX * sizeof *copy);
	assert_int_equal(recv_now(sv[1], dst, 1), -1);

	/* The same array to a file, at an offset. */
	char path[] = "/tmp/px_write_races_XXXXXX";
	int fd = h_track(f, mkstemp(path));
	assert_true(fd >= 0);
	unlink(path);
	h_rec *w = h_rec_new(f);
	int rc = px_writev_file(f->px, fd, iov, n, 4093, h_rec_cb, w);
	if (!h_vec_supported(f, PX_OP_WRITE_FILE)) {
		assert_int_equal(rc, -EOPNOTSUPP);
		return;
	}
	assert_int_equal(rc, 0);
	h_wait_rec(f, w, 10000, "an IOV_MAX writev_file");
	assert_int_equal(w->c.error, 0);
	assert_int_equal(w->c.bytes, len);
	memset(dst, 0, len);
	assert_int_equal(pread(fd, dst, len + 1, 4093), (ssize_t)len);
	assert_prefix(dst, src, len, "IOV_MAX writev_file");
}

/* A chain of vectored reads over tiny buffers with guards between them,
 * fed a few bytes at a time: each completion's bytes fill the buffers in
 * order, and nothing past them or between them is touched. */
#define SC_BUFS 300
#define SC_GUARD 0xEE

typedef struct scatter {
	uint8_t *arena;
	size_t off[SC_BUFS], len[SC_BUFS];
	size_t total, arena_len;
} scatter;

static void scatter_reads_in_place(void **state)
{
	h_fx *f = *state;
	if (!h_vec_supported(f, PX_OP_READ_STREAM))
		return;  /* vectored.c asserts the refusal */
	scatter *s = h_alloc(f, sizeof *s);
	size_t pos = 0;
	for (int i = 0; i < SC_BUFS; i++) {
		s->len[i] = i % 11 == 4 ? 0 : 1 + (size_t)(i * 31) % 7;
		s->off[i] = pos;
		pos += s->len[i] + 1 + (size_t)i % 3;  /* a guard gap */
		s->total += s->len[i];
	}
	s->arena_len = pos;
	s->arena = h_alloc(f, pos);
	memset(s->arena, SC_GUARD, pos);
	uint8_t *src = h_alloc(f, s->total);
	h_pattern(src, s->total, 5, 0);
	struct iovec *iov = h_alloc(f, SC_BUFS * sizeof *iov);
	int sv[2];
	h_socketpair(f, sv);

	size_t sent = 0, read = 0;
	unsigned k = 0;
	int reads = 0;
	/* One record per read; the total is at most s->total bytes. */
	h_rec *pool = h_alloc(f, (s->total + 1) * sizeof *pool);
	while (read < s->total) {
		/* The rest of the layout, from byte read on. */
		int n = 0;
		size_t skip = read;
		for (int i = 0; i < SC_BUFS; i++) {
			uint8_t *b = s->arena + s->off[i];
			size_t l = s->len[i];
			if (skip >= l && l) {
				skip -= l;
				continue;
			}
			if (!l && skip) {
				continue;
			}
			iov[n++] = (struct iovec){ b + skip, l - skip };
			skip = 0;
		}
		h_rec *r = &pool[reads];
		assert_int_equal(px_readv_stream(f->px, sv[1], iov, n, h_rec_cb, r),
				 0);
		reads++;
		size_t dribble = 0;
		if (sent == read) {
			/* Nothing there yet: it must wait. */
			h_settle(f, reads < 3 ? 2 : 0);
			if (h_rec_done(r))
				fail_msg("a readv completed with nothing sent "
					 "(%s, %zu)", strerror(r->c.error),
					 r->c.bytes);
			dribble = 1 + (k++ * 5) % 13;
			if (dribble > s->total - sent)
				dribble = s->total - sent;
			assert_int_equal(send(sv[0], src + sent, dribble, 0),
					 (ssize_t)dribble);
			sent += dribble;
		}
		h_wait_rec(f, r, 10000, "a readv over tiny buffers");
		if (r->c.error || !r->c.bytes || read + r->c.bytes > sent)
			fail_msg("readv %d: %s, %zu bytes, %zu of %zu unread sent",
				 reads, strerror(r->c.error), r->c.bytes,
				 sent - read, dribble);
		assert_int_equal(atomic_load(&r->calls), 1);
		read += r->c.bytes;
		/* Check the whole arena: the first read bytes in place, the
		 * rest and the gaps still guards. */
		size_t at = 0;
		for (int i = 0; i < SC_BUFS; i++) {
			size_t gap_end = i + 1 < SC_BUFS ? s->off[i + 1]
							 : s->arena_len;
			for (size_t j = s->off[i]; j < gap_end; j++) {
				bool data = j < s->off[i] + s->len[i];
				uint8_t want = data && at < read ? src[at]
								 : SC_GUARD;
				if (s->arena[j] != want)
					fail_msg("after readv %d (%zu bytes read): "
						 "arena byte %zu (buffer %d) is %u, "
						 "expected %u", reads, read, j, i,
						 s->arena[j], want);
				if (data)
					at++;
			}
		}
		/* An unread rest of the dribble goes to the next read. */
	}
	h_settle(f, 2);
	for (int i = 0; i < reads; i++)
		if (atomic_load(&pool[i].calls) != 1)
			fail_msg("readv %d called back %d times", i,
				 atomic_load(&pool[i].calls));
}

/* A vectored file read at the end of the file (0 bytes) and across it
 * (short), with guards. */
static void readv_file_at_and_across_eof(void **state)
{
	h_fx *f = *state;
	char path[] = "/tmp/px_write_races_XXXXXX";
	int fd = h_track(f, mkstemp(path));
	assert_true(fd >= 0);
	unlink(path);
	uint8_t *src = h_alloc(f, 1000);
	h_pattern(src, 1000, 3, 0);
	assert_int_equal(pwrite(fd, src, 1000, 0), 1000);
	uint8_t *buf = h_alloc(f, 400);
	struct iovec iov[40];
	int n = 0;
	for (int i = 0; i < 40; i++)
		iov[n++] = (struct iovec){ buf + i * 10, (size_t)(i % 5 == 2 ? 0 : 9) };
	bool can = h_vec_supported(f, PX_OP_READ_FILE);
	uint64_t offs[3] = { 1000, 5000, 900 };
	for (int k = 0; k < 3; k++) {
		memset(buf, SC_GUARD, 400);
		h_rec *r = h_rec_new(f);
		int rc = px_readv_file(f->px, fd, iov, n, offs[k], h_rec_cb, r);
		if (!can) {
			assert_int_equal(rc, -EOPNOTSUPP);
			return;
		}
		assert_int_equal(rc, 0);
		h_wait_rec(f, r, 10000, "a readv_file near the end");
		assert_int_equal(r->c.error, 0);
		size_t want = offs[k] >= 1000 ? 0 : 1000 - offs[k];
		assert_int_equal(r->c.bytes, want);
		assert_int_equal(r->c.offset, offs[k]);
		size_t at = 0;
		for (int i = 0; i < 400; i++) {
			bool data = (i % 10) < (int)iov[i / 10].iov_len;
			uint8_t w = data && at < want ? src[offs[k] + at] : SC_GUARD;
			if (buf[i] != w)
				fail_msg("readv_file at %llu: byte %d is %u, "
					 "expected %u",
					 (unsigned long long)offs[k], i, buf[i], w);
			if (data)
				at++;
		}
	}
}

/* A vectored write to a datagram socket sends one datagram of the
 * elements in order; a write-all the same. */
static void writev_to_datagram_socket(void **state)
{
	h_fx *f = *state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
	h_track(f, sv[0]);
	h_track(f, sv[1]);
	uint8_t src[300], got[400];
	h_pattern(src, sizeof src, 8, 0);
	struct iovec iov[5] = { { src, 10 }, { NULL, 0 }, { src + 10, 90 },
				{ src + 100, 0 }, { src + 100, 200 } };
	if (!h_vec_supported(f, PX_OP_WRITE_STREAM))
		return;
	for (int all = 0; all < 2; all++) {
		h_rec *r = h_rec_new(f);
		int rc = all ? px_writev_stream_all(f->px, sv[0], iov, 5, h_rec_cb, r)
			     : px_writev_stream(f->px, sv[0], iov, 5, h_rec_cb, r);
		assert_int_equal(rc, 0);
		h_wait_rec(f, r, 10000, "a writev to a datagram socket");
		assert_int_equal(r->c.error, 0);
		assert_int_equal(r->c.bytes, 300);
		memset(got, 0, sizeof got);
		assert_int_equal(recv(sv[1], got, sizeof got, MSG_DONTWAIT), 300);
		assert_memory_equal(got, src, 300);
		assert_int_equal(recv_now(sv[1], got, sizeof got), -1);
	}
}

/* Write-alls of more than 4 GiB (and single elements of more than
 * 4 GiB) to /dev/null, from a read-only anonymous mapping that is never
 * touched: every byte reported, where a length cut to 32 bits or a
 * resume that loses count would show.  A plain write stops at the
 * kernel's largest transfer and says so. */
static void huge_write_alls_to_dev_null(void **state)
{
	h_fx *f = *state;
	const size_t len = (5ull << 30) + 12345;
	void *m = mmap(NULL, len, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		printf("  (no room for a 5 GiB mapping: skipped)\n");
		return;
	}
	int fd = h_track(f, open("/dev/null", O_WRONLY | O_CLOEXEC));
	assert_true(fd >= 0);
	bool vec_ok = h_vec_supported(f, PX_OP_WRITE_STREAM);
	struct iovec iov[4] = { { m, 1ull << 30 }, { NULL, 0 },
				{ m, (4ull << 30) + 7 }, { m, 1000 } };
	const size_t vlen = (5ull << 30) + 1007;
	for (int k = 0; k < 3; k++) {
		if (k == 1 && !vec_ok)
			continue;
		h_rec *r = h_rec_new(f);
		int rc = k == 0 ? px_write_stream_all(f->px, fd, m, len, h_rec_cb, r)
			 : k == 1 ? px_writev_stream_all(f->px, fd, iov, 4, h_rec_cb, r)
				  : px_write_stream(f->px, fd, m, len, h_rec_cb, r);
		if (rc) {
			munmap(m, len);
			fail_msg("a huge write to /dev/null: start %s",
				 px_strerror(rc));
		}
		uint64_t dl = h_deadline(20000);
		while (!h_rec_done(r)) {
			if (h_now_ms() > dl)
				break;
			px_handle_events(f->px, 10);
		}
		size_t want = k == 1 ? vlen : len;
		bool ok = h_rec_done(r) && r->c.error == 0 &&
			  (k == 2 ? r->c.bytes > 0 && r->c.bytes < len
				  : r->c.bytes == want);
		if (!ok) {
			munmap(m, len);
			fail_msg("a %s of %zu bytes to /dev/null: %s, %zu bytes",
				 k == 0 ? "write-all" : k == 1 ? "writev-all" : "write",
				 want, h_rec_done(r) ? strerror(r->c.error)
						     : "no callback", r->c.bytes);
		}
	}
	munmap(m, len);
}

/* ------------------------------------------------------------------ */
/* max_aio=1                                                            */
/* ------------------------------------------------------------------ */

#define MA_SOCKS 4
#define MA_LEN (160 * 1024)

typedef struct ma_reader {
	int fd;
	uint8_t *dst;
	size_t got, cap;
	bool failed;
} ma_reader;

static void *ma_read(void *arg)
{
	ma_reader *m = arg;
	unsigned k = (unsigned)m->fd;
	for (;;) {
		struct pollfd p = { .fd = m->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) != 1) {
			m->failed = true;
			return NULL;
		}
		size_t piece = 512 + (k++ * 613) % 3500;
		if (piece > m->cap - m->got)
			piece = m->cap - m->got;
		ssize_t n = recv(m->fd, m->dst + m->got, piece, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			m->failed = true;
			return NULL;
		}
		if (n == 0)
			return NULL;
		m->got += (size_t)n;
		if (m->got == m->cap) {
			m->failed = true;  /* more than was written */
			return NULL;
		}
	}
}

static void max_aio_1_write_alls(void **state)
{
	h_fx *f = *state;
	if (!h_vec_supported(f, PX_OP_WRITE_STREAM))
		return;
	uint8_t *src = h_alloc(f, 2 * MA_LEN);
	h_pattern(src, 2 * MA_LEN, 21, 0);
	struct iovec *iov[2];
	int iovcnt[2];
	for (int h = 0; h < 2; h++) {
		iov[h] = h_alloc(f, 200 * sizeof(struct iovec));
		iovcnt[h] = cut_iov(iov[h], 200, src + h * MA_LEN, MA_LEN);
	}
	int sv[MA_SOCKS + 1][2];
	ma_reader *rd = h_alloc(f, MA_SOCKS * sizeof *rd);
	h_rec *r[MA_SOCKS][2];
	for (int i = 0; i <= MA_SOCKS; i++)
		stream_pair(f, i % 2 == 1, sv[i]);
	/* Two write-alls per socket, the second queued behind the first. */
	for (int i = 0; i < MA_SOCKS; i++)
		for (int h = 0; h < 2; h++) {
			r[i][h] = h_rec_new(f);
			assert_int_equal(px_writev_stream_all(f->px, sv[i][0], iov[h],
							      iovcnt[h], h_rec_cb,
							      r[i][h]), 0);
		}
	/* One more on a socket nobody reads, cancelled while it waits: it
	 * ends ECANCELED, having sent what it reports. */
	h_rec *c = h_rec_new(f);
	assert_int_equal(px_writev_stream_all(f->px, sv[MA_SOCKS][0], iov[0],
					      iovcnt[0], h_rec_cb, c), 0);
	assert_int_equal(px_cancel(f->px, sv[MA_SOCKS][0]), 1);

	h_loops_start(f, 2, false);
	pthread_t th[MA_SOCKS];
	for (int i = 0; i < MA_SOCKS; i++) {
		rd[i].fd = sv[i][1];
		rd[i].cap = 2 * MA_LEN + 1;
		rd[i].dst = h_alloc(f, rd[i].cap);
		assert_int_equal(pthread_create(&th[i], NULL, ma_read, &rd[i]), 0);
	}
	bool ok = true;
	uint64_t dl = h_deadline(20000);
	for (int i = 0; i < MA_SOCKS; i++)
		for (int h = 0; h < 2; h++)
			while (ok && !h_rec_done(r[i][h])) {
				if (h_now_ms() > dl)
					ok = false;
				h_sleep_ms(2);
			}
	while (ok && !h_rec_done(c))
		if (h_now_ms() > dl)
			ok = false;
		else
			h_sleep_ms(2);
	for (int i = 0; i < MA_SOCKS; i++)
		shutdown(sv[i][0], SHUT_WR);
	for (int i = 0; i < MA_SOCKS; i++)
		pthread_join(th[i], NULL);
	h_loops_stop();
	if (!ok)
		fail_msg("write-alls still pending after 20 s with max_aio=1");
	for (int i = 0; i < MA_SOCKS; i++) {
		for (int h = 0; h < 2; h++) {
			if (r[i][h]->c.error || r[i][h]->c.bytes != MA_LEN)
				fail_msg("socket %d write %d: %s, %zu bytes", i, h,
					 strerror(r[i][h]->c.error),
					 r[i][h]->c.bytes);
			assert_int_equal(atomic_load(&r[i][h]->calls), 1);
		}
		if (rd[i].failed || rd[i].got != 2 * MA_LEN)
			fail_msg("socket %d: the reader got %zu of %u bytes%s", i,
				 rd[i].got, 2 * MA_LEN,
				 rd[i].failed ? " and failed" : "");
		assert_prefix(rd[i].dst, src, 2 * MA_LEN, "max_aio=1 write-alls");
	}
	if (c->c.error != ECANCELED)
		fail_msg("the cancelled write-all: %s, %zu bytes",
			 strerror(c->c.error), c->c.bytes);
	shutdown(sv[MA_SOCKS][0], SHUT_WR);
	uint8_t *dst = h_alloc(f, MA_LEN + 1);
	size_t got = 0;
	drain_to_eof(NULL, sv[MA_SOCKS][1], dst, MA_LEN + 1, &got, 10000,
		     "the cancelled write-all's peer");
	if (got != c->c.bytes)
		fail_msg("the cancelled write-all reported %zu bytes, the peer got "
			 "%zu", c->c.bytes, got);
	assert_prefix(dst, src, got, "the cancelled write-all");
}

/* ------------------------------------------------------------------ */
/* px_cancel and deadlines racing a write-all that moves                */
/* ------------------------------------------------------------------ */

#define ER_ROUNDS 18

typedef struct er_reader {
	int fd;
	uint8_t *dst;
	size_t cap, got;
	bool failed;
} er_reader;

static void *er_read(void *arg)
{
	er_reader *e = arg;
	for (;;) {
		struct pollfd p = { .fd = e->fd, .events = POLLIN };
		if (poll(&p, 1, 20000) != 1) {
			e->failed = true;
			return NULL;
		}
		ssize_t n = recv(e->fd, e->dst + e->got, e->cap - e->got,
				 MSG_DONTWAIT);
		if (n < 0 && errno == ENOTSOCK)
			n = read(e->fd, e->dst + e->got, e->cap - e->got);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			e->failed = n < 0;
			return NULL;
		}
		e->got += (size_t)n;
		if (e->got == e->cap) {
			e->failed = true;
			return NULL;
		}
	}
}

/* A peer that reads as fast as it can while the test cancels the
 * write-all, or its deadline expires, at some point between its start
 * and its end: one callback, all bytes with error 0 or fewer with
 * ECANCELED/ETIMEDOUT, and exactly the reported bytes arrive. */
static void write_all_end_races(void **state)
{
	h_fx *f = *state;
	const size_t max = 96 * 1024 + ER_ROUNDS * 997;
	uint8_t *src = h_alloc(f, max);
	h_pattern(src, max, 61, 0);
	er_reader *e = h_alloc(f, sizeof *e);
	e->cap = max + 1;
	e->dst = h_alloc(f, e->cap);
	struct iovec *iov = h_alloc(f, 300 * sizeof *iov);
	h_rec *recs = h_alloc(f, ER_ROUNDS * sizeof *recs);
	bool vec_ok = h_vec_supported(f, PX_OP_WRITE_STREAM);
	int outcome[3] = { 0, 0, 0 };
	struct px_stats st0, st1;
	assert_int_equal(px_stats(f->px, &st0), 0);
	h_loops_start(f, 2, false);
	for (int i = 0; i < ER_ROUNDS; i++) {
		/* Each transport, vectored or not, through each ending; the
		 * writer's end non-blocking in every other pair of rounds. */
		int transport = i % 3;
		bool vec = vec_ok && (i / 3) % 2;
		int kind = (i / 6) % 3;    /* cancel, deadline, both */
		size_t len = 96 * 1024 + (size_t)i * 997;
		unsigned us = (unsigned)(i * 37) % 600;
		int sv[2];
		stream_pair(f, transport, sv);
		if ((i / 2) % 2)
			fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
		e->fd = sv[1];
		e->got = 0;
		e->failed = false;
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, er_read, e), 0);
		h_rec *r = &recs[i];
		px_op_desc d = { .op = PX_OP_WRITE_STREAM, .fd = sv[0],
				 .flags = PX_OPF_WRITE_ALL, .cb = h_rec_cb,
				 .user = r };
		if (vec) {
			d.flags |= PX_OPF_VECTORED;
			d.iov = iov;
			d.iovcnt = cut_iov(iov, 300, src, len);
		} else {
			d.buf = src;
			d.len = len;
		}
		if (kind)
			d.timeout_ns = (uint64_t)us * 1000 + 1;
		assert_int_equal(px_start_op(f->px, &d), 0);
		int n = -1;
		if (kind != 1) {
			{
				struct timespec ts = { 0, (long)us * 1000 };
				nanosleep(&ts, NULL);
			}
			n = px_cancel(f->px, sv[0]);
		}
		bool done = h_wait_at_least(&r->done, 1, 20000);
		end_writing(f, sv[0]);
		pthread_join(th, NULL);
		if (!done)
			fail_msg("round %d: no callback", i);
		const px_completion *c = &r->c;
		int want_err = kind == 0 ? ECANCELED : kind == 1 ? ETIMEDOUT : 0;
		bool ok_err = c->error == 0 || c->error == want_err ||
			      (kind == 2 && (c->error == ECANCELED ||
					     c->error == ETIMEDOUT));
		if (!ok_err || (c->error == 0) != (c->bytes == len) ||
		    c->bytes > len)
			fail_msg("round %d: %s, %zu of %zu bytes", i,
				 strerror(c->error), c->bytes, len);
		if (n == 0 && c->error == ECANCELED)
			fail_msg("round %d: ECANCELED though px_cancel found "
				 "nothing", i);
		if (e->failed || e->got != c->bytes)
			fail_msg("round %d (%s, %s): the write reported %zu bytes, "
				 "the peer got %zu%s", i, kind_name[transport],
				 strerror(c->error), c->bytes, e->got,
				 e->failed ? " and failed" : "");
		assert_prefix(e->dst, src, e->got, "a write-all ended in a race");
		outcome[c->error == 0 ? 0 : c->error == ECANCELED ? 1 : 2]++;
		close_tracked(f, sv[0]);
		close_tracked(f, sv[1]);
	}
	h_loops_stop();
	for (int i = 0; i < ER_ROUNDS; i++)
		if (atomic_load(&recs[i].calls) != 1)
			fail_msg("round %d called back %d times", i,
				 atomic_load(&recs[i].calls));
	if (getenv("WR_TRACE"))
		printf("  %d whole, %d cancelled, %d timed out\n", outcome[0],
		       outcome[1], outcome[2]);
	/* The statistics count each ending as the callbacks saw it. */
	assert_int_equal(px_stats(f->px, &st1), 0);
	if (st1.started - st0.started != ER_ROUNDS ||
	    st1.completed - st0.completed != (uint64_t)outcome[0] ||
	    st1.cancelled - st0.cancelled != (uint64_t)outcome[1] ||
	    st1.timed_out - st0.timed_out != (uint64_t)outcome[2] ||
	    st1.in_flight != 0)
		fail_msg("px_stats: %llu started, %llu completed, %llu cancelled, "
			 "%llu timed out, %llu in flight; the callbacks saw %d, "
			 "%d, %d, %d",
			 (unsigned long long)(st1.started - st0.started),
			 (unsigned long long)(st1.completed - st0.completed),
			 (unsigned long long)(st1.cancelled - st0.cancelled),
			 (unsigned long long)(st1.timed_out - st0.timed_out),
			 (unsigned long long)st1.in_flight, ER_ROUNDS, outcome[0],
			 outcome[1], outcome[2]);
}

/* ------------------------------------------------------------------ */
/* Write-alls ended in the middle                                       */
/* ------------------------------------------------------------------ */

enum end_mode { END_CANCEL, END_CLOSE, END_DEADLINE, END_DESTROY,
		END_RESET, END_HALF_CLOSE, END_MODES };
static const char *const end_name[END_MODES] = {
	"px_cancel", "px_close", "a deadline", "px_destroy", "a peer reset",
	"a peer half-close" };

#define MID_LEN (256u * 1024)
#define MID_DEADLINE_MS 5
#define MID_TAIL 100

/* One write-all of MID_LEN bytes and its peer. */
typedef struct mid {
	int mode;
	int kind;
	bool vec;
	char what[96];
	uint8_t *src, *dst;
	uint8_t tail[MID_TAIL];
	struct iovec *iov;
	int sv[2];
	h_rec *r, *t, *cl;
	size_t got;
	uint64_t t0;
} mid;

static mid *mid_new(h_fx *f)
{
	mid *m = h_alloc(f, sizeof *m);
	m->src = h_alloc(f, MID_LEN);
	m->dst = h_alloc(f, MID_LEN + MID_TAIL + 1);
	m->iov = h_alloc(f, IOV_MAX * sizeof *m->iov);
	return m;
}

/* Start m's write-all; the peer takes 96 KiB, so that it is resumed
 * (with small buffers, several times), and then stops reading. */
static void mid_start(h_fx *f, mid *m, int mode, bool vec, int kind)
{
	m->mode = mode;
	m->vec = vec;
	m->kind = kind;
	m->t = m->cl = NULL;
	m->got = 0;
	snprintf(m->what, sizeof m->what, "%s write-all over %s ended by %s",
		 vec ? "vectored" : "single-buffer", kind_name[kind],
		 end_name[mode]);
	h_pattern(m->src, MID_LEN, (uint32_t)(mode * 2 + vec + 1), 0);
	stream_pair(f, kind, m->sv);
	m->r = h_rec_new(f);
	px_op_desc d = { .op = PX_OP_WRITE_STREAM, .fd = m->sv[0],
			 .flags = PX_OPF_WRITE_ALL, .cb = h_rec_cb, .user = m->r };
	if (vec) {
		d.flags |= PX_OPF_VECTORED;
		d.iov = m->iov;
		d.iovcnt = cut_iov(m->iov, IOV_MAX, m->src, MID_LEN);
	} else {
		d.buf = m->src;
		d.len = MID_LEN;
	}
	if (mode == END_DEADLINE)
		d.timeout_ns = MID_DEADLINE_MS * 1000000ull;
	m->t0 = h_now_ns();
	assert_int_equal(px_start_op(f->px, &d), 0);
	uint64_t dl = h_deadline(10000);
	while (m->got < 96 * 1024 && !h_rec_done(m->r)) {
		ssize_t n = recv_now(m->sv[1], m->dst + m->got, 4096);
		if (n == 0)
			fail_msg("%s: end of stream", m->what);
		if (n > 0)
			m->got += (size_t)n;
		else
			pump_for(f, m->sv[1], dl, m->what);
	}
	if (mode != END_DEADLINE && h_rec_done(m->r))
		fail_msg("%s: completed (%s, %zu bytes) with the peer reading "
			 "only %zu bytes", m->what, strerror(m->r->c.error),
			 m->r->c.bytes, m->got);
}

/* End it (all but px_destroy, which the caller does). */
static void mid_end(h_fx *f, mid *m)
{
	switch (m->mode) {
	case END_CANCEL:
		assert_int_equal(px_cancel(f->px, m->sv[0]), 1);
		/* The next write is started at once, before the cancelled
		 * one has called back: it must wait for it and follow the
		 * bytes it reports. */
		h_pattern(m->tail, MID_TAIL, 99, 0);
		m->t = h_rec_new(f);
		assert_int_equal(px_write_stream_all(f->px, m->sv[0], m->tail,
						     MID_TAIL, h_rec_cb, m->t), 0);
		break;
	case END_CLOSE:
		m->cl = h_rec_new(f);
		untrack(f, m->sv[0]);
		assert_int_equal(px_close(f->px, m->sv[0], h_rec_cb, m->cl), 0);
		/* Refused from now on. */
		assert_int_equal(px_write_stream_all(f->px, m->sv[0], m->tail,
						     MID_TAIL, h_rec_cb, m->cl),
				 -EBADF);
		break;
	case END_RESET: {
		struct linger lg = { 1, 0 };
		setsockopt(m->sv[1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		h_close(f, m->sv[1]);
		break;
	}
	case END_HALF_CLOSE:
		assert_int_equal(shutdown(m->sv[1], SHUT_WR), 0);
		break;
	default:
		break;
	}
}

/* Wait for the end and check it: one callback, and the peer's stream is
 * exactly the bytes reported (then the next write's, where there is
 * one). */
static void mid_check(h_fx *f, mid *m)
{
	const char *what = m->what;
	uint64_t dl;
	if (m->mode == END_HALF_CLOSE) {
		/* Not an end: the peer reads on, every byte comes. */
		dl = h_deadline(20000);
		while (m->got < MID_LEN) {
			ssize_t n = recv_now(m->sv[1], m->dst + m->got,
					     MID_LEN - m->got);
			if (n == 0)
				fail_msg("%s: end of stream", what);
			if (n > 0)
				m->got += (size_t)n;
			else
				pump_for(f, m->sv[1], dl, what);
		}
	}
	dl = h_deadline(10000);
	while (f->px && !h_rec_done(m->r))
		h_pump(f, dl, what);
	if (!h_rec_done(m->r))
		fail_msg("%s: px_destroy did not call back", what);
	const px_completion *c = &m->r->c;
	if (c->op != PX_OP_WRITE_STREAM || c->fd != m->sv[0])
		fail_msg("%s: completion of op %d fd %d", what, c->op, c->fd);
	if (m->vec ? (c->iov != m->iov || c->buf != NULL)
		   : (c->buf != m->src || c->iov != NULL))
		fail_msg("%s: the completion does not give back the buffer",
			 what);
	if (c->len != MID_LEN)
		fail_msg("%s: len %zu", what, c->len);
	int want_error = m->mode == END_DEADLINE ? ETIMEDOUT
			 : m->mode == END_HALF_CLOSE ? 0 : ECANCELED;
	if (m->mode == END_RESET
		    ? c->error != EPIPE && c->error != ECONNRESET
		    : c->error != want_error)
		fail_msg("%s: error %d (%s), bytes %zu", what, c->error,
			 strerror(c->error), c->bytes);
	if (m->mode == END_DEADLINE &&
	    m->r->at_ns - m->t0 < MID_DEADLINE_MS * 1000000ull)
		fail_msg("%s: ETIMEDOUT after %llu ms, before the deadline", what,
			 (unsigned long long)((m->r->at_ns - m->t0) / 1000000));
	if (m->mode == END_HALF_CLOSE) {
		if (c->bytes != MID_LEN)
			fail_msg("%s: %zu bytes", what, c->bytes);
		assert_prefix(m->dst, m->src, MID_LEN, what);
		goto out;
	}
	if (c->bytes >= MID_LEN)
		fail_msg("%s: reports all %zu bytes", what, c->bytes);
	if (m->mode == END_RESET) {
		/* What the peer had not read is lost with it. */
		if (c->bytes < m->got)
			fail_msg("%s: reports %zu bytes, the peer read %zu", what,
				 c->bytes, m->got);
		assert_prefix(m->dst, m->src, m->got, what);
		goto out;
	}

	/* A write after a cancel or a deadline goes on right after the bytes
	 * the ended one reports. */
	size_t want = c->bytes, more = 0;
	if (m->mode == END_CANCEL || m->mode == END_DEADLINE) {
		more = MID_TAIL;
		if (!m->t) {
			h_pattern(m->tail, MID_TAIL, 99, 0);
			m->t = h_rec_new(f);
			assert_int_equal(px_write_stream_all(f->px, m->sv[0],
							     m->tail, MID_TAIL,
							     h_rec_cb, m->t), 0);
		}
		dl = h_deadline(10000);
		while (!h_rec_done(m->t)) {
			ssize_t n = recv_now(m->sv[1], m->dst + m->got,
					     MID_LEN + MID_TAIL + 1 - m->got);
			if (n > 0)
				m->got += (size_t)n;
			else
				pump_for(f, m->sv[1], dl, what);
		}
		if (m->t->c.error || m->t->c.bytes != MID_TAIL)
			fail_msg("%s: the next write: %s, %zu bytes", what,
				 strerror(m->t->c.error), m->t->c.bytes);
	}
	if (m->mode != END_CLOSE)
		end_writing(f, m->sv[0]);
	drain_to_eof(f->px, m->sv[1], m->dst, MID_LEN + MID_TAIL + 1,
		     &m->got, 10000, what);
	if (m->got != want + more)
		fail_msg("%s: the peer received %zu bytes, the write reported "
			 "%zu%s", what, m->got, want,
			 more ? " (+100 of the next)" : "");
	assert_prefix(m->dst, m->src, want, what);
	assert_prefix(m->dst + want, m->tail, more, what);
	if (m->mode == END_CLOSE) {
		dl = h_deadline(10000);
		while (!h_rec_done(m->cl))
			h_pump(f, dl, "px_close's callback");
		if (m->cl->seq < m->r->seq)
			fail_msg("%s: px_close's callback came before the write's",
				 what);
		assert_int_equal(m->cl->c.error, 0);
	}
out:
	if (getenv("WR_TRACE"))
		printf("  %s: %llu ms, %zu of %u bytes\n", what,
		       (unsigned long long)((h_now_ns() - m->t0) / 1000000),
		       c->bytes, MID_LEN);
}

static void mid_close(h_fx *f, mid *m)
{
	close_tracked(f, m->sv[0]);
	close_tracked(f, m->sv[1]);
}

enum q_end { QE_DEADLINE_QUEUED, QE_CANCEL, QE_CLOSE, QE_RESET, QE_DESTROY,
	     QE_MODES };
static const char *const qe_name[QE_MODES] = {
	"a deadline while queued", "px_cancel", "px_close", "a peer reset",
	"px_destroy" };

#define QW_N 3
static const size_t qw_len[QW_N] = { 256 * 1024, 64 * 1024 + 3,
				     64 * 1024 + 5 };
#define QW_TOTAL (256 * 1024 + 2 * 64 * 1024 + 8)

/* Three write-alls on one socket whose peer does not read yet: the first
 * stalls, the other two wait behind it (the second vectored). */
typedef struct qw {
	int mode;
	char what[96];
	uint8_t *src, *dst;
	struct iovec iov[64];
	int sv[2];
	h_rec *r[QW_N], *cl;
	size_t got;
} qw;

static qw *qw_new(h_fx *f)
{
	qw *q = h_alloc(f, sizeof *q);
	q->src = h_alloc(f, QW_TOTAL);
	q->dst = h_alloc(f, QW_TOTAL + 1);
	return q;
}

static void qw_start(h_fx *f, qw *q, int mode, int kind)
{
	q->mode = mode;
	q->got = 0;
	q->cl = NULL;
	snprintf(q->what, sizeof q->what, "three queued write-alls over %s, %s",
		 kind_name[kind], qe_name[mode]);
	h_pattern(q->src, QW_TOTAL, 40 + (uint32_t)mode, 0);
	stream_pair(f, kind, q->sv);
	size_t at = 0;
	for (int i = 0; i < QW_N; i++) {
		q->r[i] = h_rec_new(f);
		px_op_desc d = { .op = PX_OP_WRITE_STREAM, .fd = q->sv[0],
				 .flags = PX_OPF_WRITE_ALL, .cb = h_rec_cb,
				 .user = q->r[i], .buf = q->src + at,
				 .len = qw_len[i] };
		if (i == 1 && mode == QE_DEADLINE_QUEUED)
			d.timeout_ns = 5 * 1000000ull;
		if (i == 1 && h_vec_supported(f, PX_OP_WRITE_STREAM)) {
			d.flags |= PX_OPF_VECTORED;
			d.buf = NULL;
			d.len = 0;
			d.iov = q->iov;
			d.iovcnt = cut_iov(q->iov, 64, q->src + at, qw_len[i]);
		}
		assert_int_equal(px_start_op(f->px, &d), 0);
		at += qw_len[i];
		if (i > 0)
			continue;
		/* The first one fills the descriptor and stalls.  The peer
		 * then makes room, and the other two are started before the
		 * loop has run again (on a shared processor): they must not
		 * take that room while the first is unfinished. */
		h_settle(f, 2);
		for (ssize_t n = 1; n > 0 && q->got < 16384;) {
			n = recv_now(q->sv[1], q->dst + q->got, 16384 - q->got);
			if (n > 0)
				q->got += (size_t)n;
		}
	}
	/* (The second's deadline may pass meanwhile on a slow machine.) */
	h_settle(f, 1);
	for (int i = 0; i < QW_N; i++)
		if (h_rec_done(q->r[i]) &&
		    !(i == 1 && mode == QE_DEADLINE_QUEUED))
			fail_msg("%s: write %d completed (%s, %zu bytes) with no "
				 "reader", q->what, i, strerror(q->r[i]->c.error),
				 q->r[i]->c.bytes);
}

static void qw_end(h_fx *f, qw *q)
{
	switch (q->mode) {
	case QE_DEADLINE_QUEUED: {
		uint64_t dl = h_deadline(10000);
		while (!h_rec_done(q->r[1]))
			h_pump(f, dl, q->what);
		if (q->r[1]->c.error != ETIMEDOUT || q->r[1]->c.bytes != 0)
			fail_msg("%s: the second ended with %s, %zu bytes",
				 q->what, strerror(q->r[1]->c.error),
				 q->r[1]->c.bytes);
		if (h_rec_done(q->r[0]) || h_rec_done(q->r[2]))
			fail_msg("%s: the others ended too", q->what);
		/* The peer reads: the first and the third go whole. */
		dl = h_deadline(20000);
		while (!h_rec_done(q->r[2])) {
			ssize_t n = recv_now(q->sv[1], q->dst + q->got,
					     QW_TOTAL + 1 - q->got);
			if (n == 0)
				fail_msg("%s: end of stream", q->what);
			if (n > 0)
				q->got += (size_t)n;
			else
				pump_for(f, q->sv[1], dl, q->what);
		}
		for (int i = 0; i < QW_N; i += 2)
			if (q->r[i]->c.error || q->r[i]->c.bytes != qw_len[i])
				fail_msg("%s: write %d: %s, %zu bytes", q->what, i,
					 strerror(q->r[i]->c.error),
					 q->r[i]->c.bytes);
		break;
	}
	case QE_CANCEL:
		assert_int_equal(px_cancel(f->px, q->sv[0]), 3);
		break;
	case QE_RESET: {
		struct linger lg = { 1, 0 };
		setsockopt(q->sv[1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		h_close(f, q->sv[1]);
		break;
	}
	case QE_CLOSE:
		untrack(f, q->sv[0]);
		q->cl = h_rec_new(f);
		assert_int_equal(px_close(f->px, q->sv[0], h_rec_cb, q->cl), 0);
		break;
	default:
		break;
	}
}

/* The peer's stream is each write's reported prefix, in start order:
 * nothing of a write that reports 0 bytes, no gap. */
static void qw_check(h_fx *f, qw *q)
{
	const char *what = q->what;
	uint64_t dl = h_deadline(10000);
	for (int i = 0; i < QW_N; i++) {
		while (f->px && !h_rec_done(q->r[i]))
			h_pump(f, dl, what);
		if (!h_rec_done(q->r[i]))
			fail_msg("%s: px_destroy did not call write %d back", what,
				 i);
	}
	if (q->mode == QE_RESET) {
		/* The first fails having sent some; the two behind it fail
		 * having sent nothing. */
		for (int i = 0; i < QW_N; i++)
			if ((q->r[i]->c.error != EPIPE &&
			     q->r[i]->c.error != ECONNRESET) ||
			    q->r[i]->c.bytes >= (i ? 1 : qw_len[i]))
				fail_msg("%s: write %d: %s, %zu bytes", what, i,
					 strerror(q->r[i]->c.error),
					 q->r[i]->c.bytes);
		close_tracked(f, q->sv[0]);
		return;
	}
	if (q->mode != QE_DEADLINE_QUEUED)
		for (int i = 0; i < QW_N; i++)
			if (q->r[i]->c.error != ECANCELED ||
			    q->r[i]->c.bytes >= qw_len[i])
				fail_msg("%s: write %d: %s, %zu bytes", what, i,
					 strerror(q->r[i]->c.error),
					 q->r[i]->c.bytes);
	if (q->mode != QE_CLOSE)
		end_writing(f, q->sv[0]);
	drain_to_eof(f->px, q->sv[1], q->dst, QW_TOTAL + 1, &q->got, 10000,
		     what);
	size_t pos = 0, at = 0;
	for (int i = 0; i < QW_N; i++) {
		size_t b = q->r[i]->c.bytes;
		if (pos + b > q->got)
			fail_msg("%s: the writes report %zu bytes and more, the "
				 "peer got %zu", what, pos + b, q->got);
		assert_prefix(q->dst + pos, q->src + at, b, what);
		pos += b;
		at += qw_len[i];
	}
	if (pos != q->got)
		fail_msg("%s: the writes report %zu bytes, the peer got %zu", what,
			 pos, q->got);
	if (q->mode == QE_CLOSE) {
		dl = h_deadline(10000);
		while (!h_rec_done(q->cl))
			h_pump(f, dl, "px_close's callback");
		for (int i = 0; i < QW_N; i++)
			if (q->cl->seq < q->r[i]->seq)
				fail_msg("%s: px_close's callback came before "
					 "write %d's", what, i);
	}
	close_tracked(f, q->sv[0]);
	close_tracked(f, q->sv[1]);
}

/* Every way a write-all can end early, single-buffer and vectored, over
 * AF_UNIX and TCP, alone and with others queued behind it; px_destroy
 * last, for three at once (one proactor per test: destroying a Linux AIO
 * one takes tens of milliseconds). */
static void write_alls_ended_mid_transfer(void **state)
{
	h_fx *f = *state;
	mid *m[3] = { mid_new(f), mid_new(f), mid_new(f) };
	qw *q = qw_new(f);
	h_rec *recs[64];
	int nrecs = 0;
	bool vec_ok = h_vec_supported(f, PX_OP_WRITE_STREAM);

	for (int mode = 0; mode < END_MODES; mode++) {
		if (mode == END_DESTROY)
			continue;
		for (int vec = 0; vec < 2; vec++) {
			mid_start(f, m[0], mode, vec && vec_ok,
				  ((mode + vec) & 1) ? T_TCP : T_UNIX);
			mid_end(f, m[0]);
			mid_check(f, m[0]);
			recs[nrecs++] = m[0]->r;
			if (m[0]->t)
				recs[nrecs++] = m[0]->t;
			if (m[0]->cl)
				recs[nrecs++] = m[0]->cl;
			mid_close(f, m[0]);
		}
	}
	/* A pipe, its write end blocking (io_uring may write it from a
	 * worker thread, which a cancel must interrupt). */
	static const int pipe_modes[] = { END_CANCEL, END_CLOSE, END_DEADLINE,
					  END_RESET };
	for (int i = 0; i < 4; i++) {
		mid_start(f, m[0], pipe_modes[i], vec_ok && i % 2,
			  i % 2 ? T_PIPE_NB : T_PIPE);
		mid_end(f, m[0]);
		mid_check(f, m[0]);
		recs[nrecs++] = m[0]->r;
		if (m[0]->t)
			recs[nrecs++] = m[0]->t;
		if (m[0]->cl)
			recs[nrecs++] = m[0]->cl;
		mid_close(f, m[0]);
	}
	for (int mode = 0; mode < QE_MODES; mode++) {
		if (mode == QE_DESTROY)
			continue;
		qw_start(f, q, mode, mode == QE_CLOSE ? T_PIPE
					: mode % 2 ? T_TCP : T_UNIX);
		qw_end(f, q);
		qw_check(f, q);
		for (int i = 0; i < QW_N; i++)
			recs[nrecs++] = q->r[i];
		if (q->cl)
			recs[nrecs++] = q->cl;
	}
	h_settle(f, 2);
	for (int i = 0; i < nrecs; i++)
		if (atomic_load(&recs[i]->calls) != 1)
			fail_msg("record %d called back %d times", i,
				 atomic_load(&recs[i]->calls));

	/* px_destroy with a single-buffer write-all over TCP, a vectored one
	 * over AF_UNIX, and three queued write-alls pending. */
	mid_start(f, m[0], END_DESTROY, false, T_TCP);
	mid_start(f, m[1], END_DESTROY, vec_ok, T_UNIX);
	mid_start(f, m[2], END_DESTROY, vec_ok, T_PIPE);
	qw_start(f, q, QE_DESTROY, T_TCP);
	destroy_now(f);
	for (int i = 0; i < 3; i++) {
		mid_check(f, m[i]);
		assert_int_equal(atomic_load(&m[i]->r->calls), 1);
	}
	qw_check(f, q);
	for (int i = 0; i < QW_N; i++)
		assert_int_equal(atomic_load(&q->r[i]->calls), 1);
}

/* ------------------------------------------------------------------ */
/* A cancel right after the start, on a pipe                            */
/* ------------------------------------------------------------------ */

#define CS_ROUNDS 16

/* A write (or read) on a pipe cancelled at once, before the loop ran: its
 * one callback says ECANCELED or its real result, and a write moved
 * exactly the bytes it reports.  The number was a socket just before, so
 * an engine that learns "not a socket" per number (io_uring: SEND, and on
 * ENOTSOCK WRITE) meets the pipe afresh each round; io_uring reported
 * that first ENOTSOCK as the result of a cancelled operation. */
static void cancel_at_start_on_pipes(void **state)
{
	h_fx *f = *state;
	uint8_t *src = h_alloc(f, 4096), *dst = h_alloc(f, 4097);
	h_pattern(src, 4096, 17, 0);
	struct iovec iov[3] = { { src, 1000 }, { NULL, 0 }, { src + 1000, 3096 } };
	h_rec *recs = h_alloc(f, 2 * CS_ROUNDS * sizeof *recs);
	bool vec_ok = h_vec_supported(f, PX_OP_WRITE_STREAM);
	for (int i = 0; i < CS_ROUNDS; i++) {
		/* A socket on the numbers first, written once. */
		int sv[2];
		h_socketpair(f, sv);
		h_rec *w = &recs[2 * i];
		assert_int_equal(px_write_stream(f->px, sv[0], src, 10, h_rec_cb, w),
				 0);
		h_wait_rec(f, w, 10000, "a write on a socket");
		assert_int_equal(w->c.error, 0);
		h_close(f, sv[0]);
		h_close(f, sv[1]);

		int p[2];
		h_pipe(f, p);
		fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
		h_rec *r = &recs[2 * i + 1];
		int kind = i % 4;  /* write_all, writev_all, write, read */
		int rc;
		if (kind == 0 || (kind == 1 && !vec_ok))
			rc = px_write_stream_all(f->px, p[1], src, 4096, h_rec_cb, r);
		else if (kind == 1)
			rc = px_writev_stream_all(f->px, p[1], iov, 3, h_rec_cb, r);
		else if (kind == 2)
			rc = px_write_stream(f->px, p[1], src, 4096, h_rec_cb, r);
		else
			rc = px_read_stream(f->px, p[0], dst, 4096, h_rec_cb, r);
		assert_int_equal(rc, 0);
		int fd = kind == 3 ? p[0] : p[1];
		int n = px_cancel(f->px, fd);
		h_wait_rec(f, r, 10000, "an operation cancelled at its start");
		const px_completion *c = &r->c;
		if (c->error != ECANCELED && c->error != 0)
			fail_msg("round %d (%s on a pipe, px_cancel %d): %s, %zu "
				 "bytes", i, kind == 3 ? "read" : "write", n,
				 strerror(c->error), c->bytes);
		if (c->error == ECANCELED && n == 0)
			fail_msg("round %d: ECANCELED though px_cancel found nothing",
				 i);
		if (kind != 3) {
			size_t got = 0;
			h_close(f, p[1]);
			drain_to_eof(NULL, p[0], dst, 4097, &got, 10000,
				     "a pipe written once");
			if (got != c->bytes)
				fail_msg("round %d: the write reported %zu bytes, the "
					 "pipe had %zu", i, c->bytes, got);
			assert_prefix(dst, src, got, "a write cancelled at once");
		} else if (c->error == 0) {
			fail_msg("round %d: a read of an empty pipe got %zu bytes",
				 i, c->bytes);
		}
		close_tracked(f, p[0]);
		close_tracked(f, p[1]);
	}
	h_settle(f, 2);
	for (int i = 0; i < 2 * CS_ROUNDS; i++)
		if (atomic_load(&recs[i].calls) != 1)
			fail_msg("record %d called back %d times", i,
				 atomic_load(&recs[i].calls));
}

static void iov_edges(void **state)
{
	iov_edges_refused(state);
	iov_max_write_all(state);
	scatter_reads_in_place(state);
	readv_file_at_and_across_eof(state);
	writev_to_datagram_socket(state);
	huge_write_alls_to_dev_null(state);
}

/* Cases grouped on one proactor, so that the program creates few:
 * destroying a Linux AIO proactor takes tens of milliseconds. */
static void races_order_and_iov_edges(void **state)
{
	cancel_at_start_on_pipes(state);
	iov_edges(state);
	write_all_end_races(state);
	write_alls_queued_keep_order(state);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(int argc, char **argv)
{
	harness_engine_init(argc, argv, "write_races");
	/* A write to a pipe whose reader is gone raises no SIGPIPE where the
	 * kernel has RWF_NOSIGNAL (fault.c asserts it); on an older kernel
	 * io_uring and Linux AIO would, which is documented, not tested here. */
	signal(SIGPIPE, SIG_IGN);
	if (argc > 2 && argv[2][0])
		cmocka_set_test_filter(argv[2]);
	const struct CMUnitTest tests[] = {
		T(write_alls_ended_mid_transfer),
		T(races_order_and_iov_edges),
		cmocka_unit_test_setup_teardown(max_aio_1_write_alls,
						fx_setup_aio1, fx_teardown),
	};
	return cmocka_run_group_tests_name("write_races", tests, NULL, NULL) ? 1
									      : 0;
}
