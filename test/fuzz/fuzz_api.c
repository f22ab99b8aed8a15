/*
 * fuzz_api.c - libFuzzer target for the public API.
 *
 * Each input is a program of 3-byte steps: the first byte picks a call
 * (stream read, write or write-all on one of 3 socketpairs and 2 pipes,
 * cancel, post, timer start or cancel, a raw write, read or shutdown by
 * the peer, px_handle_events(px, 0), a read or write-all with a deadline
 * through px_start_op, a periodic timer, a vectored read, write or
 * write-all over 1..4 pieces of its buffer); the other two pick its descriptor,
 * length and delay.  The engine is PX_FUZZ_ENGINE (default "epoll").  At the end
 * px_destroy delivers what is still pending.
 *
 * Oracle: exactly-once accounting.  Every start that returned 0 got
 * exactly one callback by the end of px_destroy, with its own user
 * pointer, op and descriptor; every start that failed got none; a
 * completion never reports more bytes than its length.  A periodic timer
 * instead gets any number of expiry callbacks and then exactly one
 * ECANCELED callback (by px_timer_cancel or px_destroy), nothing after
 * it.  A violation (or a
 * SIGPIPE, which the library must never raise) aborts.
 *
 * Built by scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "proactor.h"

enum { MAX_OPS = 512, NPAIRS = 3, NPIPES = 2, NFDS = 2 * (NPAIRS + NPIPES),
       MAX_LEN = 4096, BIG_LEN = 256 * 1024 };

typedef struct rec {
	int started;            /* the start returned 0 */
	int calls;
	px_op op;
	int fd;
	size_t len;
	int64_t timer;
	int periodic;           /* calls counts only its final callback */
} rec;

static rec g_rec[MAX_OPS];
static uint8_t g_buf[MAX_OPS][MAX_LEN];
static uint8_t g_big[BIG_LEN];
static struct iovec g_iov[MAX_OPS][4];

/* Cut g_buf[n] into 1..4 pieces (one may be empty) for a vectored start;
 * returns how many. */
static int cut_iov(int n, size_t len, uint8_t a)
{
	int cnt = 1 + (a >> 4) % 4;
	size_t pos = 0;
	for (int k = 0; k < cnt; k++) {
		size_t piece = k == cnt - 1 ? len - pos : (len - pos) / 2;
		if (k == 1 && k < cnt - 1 && (a & 8))
			piece = 0;
		g_iov[n][k].iov_base = g_buf[n] + pos;
		g_iov[n][k].iov_len = piece;
		pos += piece;
	}
	return cnt;
}
static const char *g_engine;

static void fail(const char *what, int i)
{
	fprintf(stderr, "fuzz_api: %s (operation %d, engine '%s')\n", what, i,
		g_engine);
	abort();
}

static void on_sigpipe(int sig)
{
	(void)sig;
	static const char m[] = "fuzz_api: SIGPIPE raised\n";
	ssize_t rc = write(2, m, sizeof m - 1);
	(void)rc;
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	g_engine = getenv("PX_FUZZ_ENGINE");
	if (!g_engine || !*g_engine)
		g_engine = "epoll";
	signal(SIGPIPE, on_sigpipe);
	return 0;
}

static void cb(const px_completion *c)
{
	rec *r = c->user;
	int i = (int)(r - g_rec);
	if (r < g_rec || r >= g_rec + MAX_OPS)
		fail("callback with a user pointer that is no record", -1);
	if (!r->started)
		fail("callback for an operation whose start failed", i);
	if (r->periodic && r->calls)
		fail("callback of a periodic timer after its last", i);
	if (r->periodic && c->error == 0) {
		if (c->bytes < 1 || c->timer_id != r->timer)
			fail("periodic timer expiry with a bad count or id", i);
		return;
	}
	if (r->op == PX_OP_READ_STREAM && c->error == ETIMEDOUT && c->bytes)
		fail("a timed-out read reports data", i);
	if (++r->calls != 1)
		fail("second callback for one operation", i);
	if (c->op != r->op)
		fail("callback with the wrong op", i);
	if (r->op != PX_OP_POST && r->op != PX_OP_TIMER && c->fd != r->fd)
		fail("callback with the wrong descriptor", i);
	if (c->bytes > r->len)
		fail("more bytes than the length", i);
	if (r->op == PX_OP_TIMER && c->timer_id != r->timer)
		fail("timer callback with the wrong id", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	px_proactor *px = NULL;
	int fds[NFDS];
	char err[256];
	px_config cfg;

	if (px_config_parse(&cfg, g_engine, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz_api: PX_FUZZ_ENGINE '%s': %s\n", g_engine, err);
		exit(1);
	}
	cfg.flags |= PX_CF_NO_ENV;
	if (px_create_config(&px, &cfg, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz_api: px_create '%s': %s\n", g_engine, err);
		exit(1);
	}
	for (int i = 0; i < NPAIRS; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds + 2 * i))
			abort();
	for (int i = 0; i < NPIPES; i++)
		if (pipe2(fds + 2 * (NPAIRS + i), O_CLOEXEC))
			abort();
	memset(g_rec, 0, sizeof g_rec);

	int n = 0;
	size_t pos = 0;
	while (pos < size && n < MAX_OPS) {
		uint8_t op = data[pos++];
		uint8_t a = pos < size ? data[pos++] : 0;
		uint8_t b = pos < size ? data[pos++] : 0;
		int fd = fds[a % NFDS];
		size_t len = 1 + ((size_t)b * 16) % MAX_LEN;
		rec *r = &g_rec[n];
		int rc = 1;

		r->fd = fd;
		r->len = len;
		switch (op % 17) {
		case 0:
			r->op = PX_OP_READ_STREAM;
			rc = px_read_stream(px, fd, g_buf[n], len, cb, r);
			break;
		case 1:
			r->op = PX_OP_WRITE_STREAM;
			rc = px_write_stream(px, fd, g_buf[n], len, cb, r);
			break;
		case 2:
			r->op = PX_OP_WRITE_STREAM;
			if (b & 1) {  /* big: may stay pending, peer not reading */
				r->len = BIG_LEN;
				rc = px_write_stream_all(px, fd, g_big, BIG_LEN, cb, r);
			} else {
				rc = px_write_stream_all(px, fd, g_buf[n], len, cb, r);
			}
			break;
		case 3: {
			int c = px_cancel(px, fd);
			if (c < 0)
				fail("px_cancel of an open descriptor failed", n);
			continue;
		}
		case 4:
			r->op = PX_OP_POST;
			rc = px_post(px, cb, r);
			break;
		case 5: {
			r->op = PX_OP_TIMER;
			r->len = 0;
			r->started = 1; /* the callback may run before the id is known */
			int64_t id = px_timer_start(px, (uint64_t)b * 10000, cb, r);
			if (id <= 0) {
				r->started = 0;
				rc = (int)id;
			} else {
				r->timer = id;
				rc = 0;
			}
			break;
		}
		case 6: {
			/* Cancel one of the timers started so far. */
			for (int k = n - 1, seen = 0; k >= 0; k--) {
				if (g_rec[k].op == PX_OP_TIMER && g_rec[k].started &&
				    seen++ == a % 4) {
					int c = px_timer_cancel(px, g_rec[k].timer);
					if (c != 0 && c != -ENOENT)
						fail("px_timer_cancel", k);
					break;
				}
			}
			continue;
		}
		case 7:
		case 8:
			if (px_handle_events(px, 0) < 0)
				fail("px_handle_events failed", n);
			continue;
		case 9: {
			/* The peer writes raw bytes (never blocks). */
			uint8_t tmp[256];
			memset(tmp, b, sizeof tmp);
			ssize_t w = send(fd, tmp, 1 + b % sizeof tmp, MSG_DONTWAIT |
					 MSG_NOSIGNAL);
			if (w < 0 && errno == ENOTSOCK) {
				int fl = fcntl(fd, F_GETFL);
				fcntl(fd, F_SETFL, fl | O_NONBLOCK);
				w = write(fd, tmp, 1 + b % sizeof tmp);
				fcntl(fd, F_SETFL, fl);
			}
			(void)w;
			continue;
		}
		case 10:
			/* The peer reads raw bytes, making room. */
			{
				uint8_t tmp[4096];
				ssize_t rd = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
				(void)rd;
			}
			continue;
		case 11:
			if (a & 0x80)
				shutdown(fd, SHUT_WR);
			else if (px_handle_events(px, 0) < 0)
				fail("px_handle_events failed", n);
			continue;
		case 12:
			/* A read with a deadline of 0..2.5 ms. */
			r->op = PX_OP_READ_STREAM;
			rc = px_start_op(px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
					.fd = fd, .buf = g_buf[n], .len = len,
					.timeout_ns = 1 + (uint64_t)(b % 26) * 100000u,
					.cb = cb, .user = r });
			break;
		case 13:
			/* A big write-all with a deadline: may time out part way. */
			r->op = PX_OP_WRITE_STREAM;
			r->len = BIG_LEN;
			rc = px_start_op(px, &(px_op_desc){ .op = PX_OP_WRITE_STREAM,
					.fd = fd, .buf = g_big, .len = BIG_LEN,
					.flags = PX_OPF_WRITE_ALL,
					.timeout_ns = 1 + (uint64_t)b * 10000u,
					.cb = cb, .user = r });
			break;
		case 15:
			/* A vectored read. */
			r->op = PX_OP_READ_STREAM;
			rc = px_readv_stream(px, fd, g_iov[n], cut_iov(n, len, a), cb, r);
			break;
		case 16:
			/* A vectored write or write-all. */
			r->op = PX_OP_WRITE_STREAM;
			if (b & 1)
				rc = px_writev_stream_all(px, fd, g_iov[n],
							  cut_iov(n, len, a), cb, r);
			else
				rc = px_writev_stream(px, fd, g_iov[n],
						      cut_iov(n, len, a), cb, r);
			break;
		case 14: {
			r->op = PX_OP_TIMER;
			r->len = 0;
			r->periodic = 1;
			r->started = 1; /* the callback may run before the id is known */
			int64_t id = px_timer_periodic(px, (uint64_t)b * 10000,
						       1 + (uint64_t)a * 5000, cb, r);
			if (id <= 0) {
				r->started = 0;
				rc = (int)id;
			} else {
				r->timer = id;
				rc = 0;
			}
			break;
		}
		}
		if (op % 17 != 5 && op % 17 != 14)
			r->started = rc == 0;
		if (rc != 0 && rc != -EBADF && rc != -EMFILE)
			fail("a start on a valid descriptor failed unexpectedly", n);
		n++;
	}
	if (px_destroy(px) != 0)
		fail("px_destroy failed", -1);
	for (int i = 0; i < n; i++) {
		if (g_rec[i].started && g_rec[i].calls != 1)
			fail(g_rec[i].calls ? "more than one callback"
					    : "no callback by the end of px_destroy",
			     i);
		if (!g_rec[i].started && g_rec[i].calls)
			fail("callback for an operation that did not start", i);
	}
	for (int i = 0; i < NFDS; i++)
		close(fds[i]);
	return 0;
}
