/*
 * fuzz_api.c - libFuzzer target for the public API.
 *
 * Each input is a program of 3-byte steps: the first byte picks a call
 * (stream read, write or write-all on one of 3 socketpairs and 2 pipes,
 * cancel, post, timer start or cancel, a raw write, read or shutdown by
 * the peer, px_handle_events(px, 0), a read or write-all with a deadline
 * through px_start_op, a periodic timer, a vectored read, write or
 * write-all over 1..4 pieces of its buffer, px_close, close(2) by the
 * application, a file read or write at an offset on a memfd, a datagram
 * read or write on a datagram socketpair; from byte 240 up: an accept on
 * a loopback TCP listener, a connect of one of two TCP sockets to it, a
 * read or write-all on one of those, and px_cancel, px_close or close(2)
 * of any of the three); the other two pick its descriptor, length and
 * delay.  One more step kind takes the 3 bytes
 * after it as the action of the next operation started: its callback
 * performs that step itself (a start, a cancel, a px_close, a close(2),
 * ...), so that callbacks call back into the library, also
 * while px_destroy delivers.  The engine is PX_FUZZ_ENGINE (default
 * "epoll").  At the end px_destroy delivers what is still pending.
 *
 * Oracle: exactly-once accounting.  Every start that returned 0 got
 * exactly one callback by the end of px_destroy, with its own user
 * pointer, op and descriptor; every start that failed got none; a
 * completion never reports more bytes than its length.  A periodic timer
 * instead gets any number of expiry callbacks and then exactly one
 * ECANCELED callback (by px_timer_cancel or px_destroy), nothing after
 * it.  A px_close's callback comes after the callbacks of every operation
 * started on its descriptor before it, and reports error 0 when the
 * application had not closed the descriptor itself.  An accept's
 * callback has a socket exactly when it succeeded, and that socket is
 * never under a number that operations not yet called back still name
 * (the program closes it there; operations started on a number the
 * program had closed do not count: with loop threads the library may have
 * taken the number, for this very accept, just after library_took
 * looked).  Starts fail only
 * with the errors the manual gives for the case.  Before px_destroy
 * (the loop threads gone), px_stats balances per processor, its started
 * is the number of I/O starts that returned 0 and no more are in flight
 * than have not been called back.  A violation (or a SIGPIPE, which the
 * library must never raise) aborts.
 *
 * The application never opens a descriptor during an input (it closes
 * each accepted socket in its accept's callback), so a number it closed
 * stays closed until the input ends (the library requires that of
 * close(2) under pending operations).
 *
 * Built by scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "proactor.h"
#include "../tsan.h"

enum { MAX_OPS = 512, NPAIRS = 3, NPIPES = 2, NSTREAM = 2 * (NPAIRS + NPIPES),
       FILE_SLOT = NSTREAM, DGRAM_SLOT = NSTREAM + 1, NSLOTS = NSTREAM + 3,
       /* The network slots, beyond the ones a step's byte picks: a TCP
        * listener on loopback and two TCP sockets to connect to it. */
       LISTEN_SLOT = NSLOTS, CONN_SLOT = NSLOTS + 1, NALL = NSLOTS + 3,
       MAX_LEN = 4096, BIG_LEN = 256 * 1024, NKINDS = 24,
       /* Step bytes from 240 up pick the network kinds 24.. */
       NET_OP = 240, NNET = 4 };

/* What the application did with a descriptor of its own. */
enum { SLOT_OPEN = 0, SLOT_CLOSED, SLOT_PX_CLOSE };

typedef struct rec {
	int started;            /* the start returned 0 */
	int calls;
	px_op op;
	int fd;
	size_t len;
	int64_t timer;
	int periodic;           /* calls counts only its final callback */
	int fd_was_open;        /* px_close: the application had not closed fd */
	int on_closed;          /* started on a number the program had closed
	                           (the library's then: library_took) */
	int has_act;            /* its callback performs act once */
	uint8_t act[3];
} rec;

static rec g_rec[MAX_OPS];
static uint8_t g_buf[MAX_OPS][MAX_LEN];
static uint8_t g_big[BIG_LEN];
static struct iovec g_iov[MAX_OPS][4];

static px_proactor *g_px;
static int g_fds[NALL];
static int g_slot[NALL];        /* SLOT_* */
static int g_close_rec[NALL];   /* SLOT_PX_CLOSE: the record of its px_close */
static struct sockaddr_in g_listen_addr;
static int g_n;                 /* records used */
static int g_destroying;        /* px_destroy runs: starts fail ESHUTDOWN */
static int g_act_armed;         /* the next start takes g_act */
static int g_nthreads;          /* loop threads (PX_FUZZ_THREADS) */
static uint8_t g_act[3];

/* The library may make descriptors of its own while it runs (POSIX AIO's
 * dups of a busy descriptor, say), and the kernel gives them the lowest
 * free numbers, among them those this program closed.  Such a number is
 * the library's then, and the program must leave it alone, as any program
 * must a number it closed.  The program opens nothing during an input, so
 * a number of a closed slot that is open again is one of those (the
 * library keeps its own off numbers that pending operations still name,
 * which this does not check).  With loop threads the library may take one
 * right after this looked. */
static int library_took(int slot)
{
	if (g_slot[slot] == SLOT_OPEN)
		return 0;
	/* Under TSan with loop threads, as if always: a loop thread's
	 * accept may take the number between this look and the start (even
	 * before px_close's callback, which may come after the close), and
	 * the start then works on the new socket while nothing orders it
	 * after the accept but the kernel, which TSan reports as a race
	 * (the program's, not the library's). */
	if (PX_TEST_TSAN && g_nthreads)
		return 1;
	if (g_slot[slot] == SLOT_PX_CLOSE && !g_rec[g_close_rec[slot]].calls)
		return 0;       /* maybe still open: px_close has not called back */
	return fcntl(g_fds[slot], F_GETFD) >= 0;
}

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
static int g_trace;             /* PX_FUZZ_TRACE set: print each start
                                   and each callback */

/* PX_FUZZ_THREADS=N: N more threads run px_handle_events(px, 1) during the
 * whole input, so that completions are collected and callbacks run beside
 * the program's own calls (a finding may then not replay every time).
 * The program's steps and the callbacks take g_mu (recursive: a step's
 * px_handle_events runs callbacks), so the records stay consistent; the
 * library's own work is what runs side by side. */
static pthread_mutex_t g_mu;
static volatile int g_quit;

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
	g_trace = getenv("PX_FUZZ_TRACE") != NULL;
	const char *t = getenv("PX_FUZZ_THREADS");
	g_nthreads = t ? atoi(t) : 0;
	if (g_nthreads < 0 || g_nthreads > 4)
		g_nthreads = 4;
#if PX_TEST_TSAN
	/* glibc starts its AIO helper threads with its own pthread_create,
	 * which ThreadSanitizer never sees; a helper that starts another
	 * mallocs in a thread TSan does not know and crashes its allocator
	 * with a bare SIGSEGV (the test suite skips those engines under
	 * TSan for the same reason, harness.c). */
	px_config pc;
	char perr[256];
	if (px_config_parse(&pc, g_engine, perr, sizeof perr) == 0 &&
	    (!strcmp(pc.primary.provider, "posix") ||
	     !strcmp(pc.secondary.provider, "posix"))) {
		fprintf(stderr, "fuzz_api: PX_FUZZ_ENGINE '%s': POSIX AIO "
			"cannot run under ThreadSanitizer (glibc's AIO helper "
			"threads are unknown to it); use the ASan build\n",
			g_engine);
		exit(1);
	}
#endif
	/* POSIX AIO alone does no accept or connect (-EOPNOTSUPP), and a
	 * stream operation it started cannot be ended: px_destroy(3) waits
	 * for it, so a write-all nobody reads would hang the run.  Its files
	 * are fuzzed in a team ("posix-aio+epoll"). */
	{
		px_config pc;
		char perr[256];
		if (px_config_parse(&pc, g_engine, perr, sizeof perr) == 0 &&
		    !strcmp(pc.primary.provider, "posix") &&
		    pc.secondary.processor == PX_PROCESSOR_NONE) {
			fprintf(stderr, "fuzz_api: PX_FUZZ_ENGINE '%s': POSIX "
				"AIO alone is not fuzzed (no accept or connect, "
				"and stream operations px_destroy cannot end); "
				"use posix-aio+epoll\n", g_engine);
			exit(1);
		}
	}
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&g_mu, &ma);
	pthread_mutexattr_destroy(&ma);
	signal(SIGPIPE, on_sigpipe);
	return 0;
}

static void step(uint8_t op, uint8_t a, uint8_t b, const uint8_t *more,
		 size_t nmore, size_t *used, int in_cb);
static void check_accept(int i, const px_completion *c);
static void set_linger0(int fd);

/* A px_close's callback: every operation started on its descriptor
 * before the px_close has had its callback. */
static void check_close(const rec *r, int i, const px_completion *c)
{
	if (c->error != 0 && c->error != EBADF)
		fail("px_close reported an error other than EBADF", i);
	if (r->fd_was_open && c->error != 0)
		fail("px_close of an open descriptor reported an error", i);
	for (int k = 0; k < i; k++) {
		const rec *o = &g_rec[k];
		if (o->started && o->fd == r->fd && o->calls == 0 &&
		    o->op != PX_OP_POST && o->op != PX_OP_TIMER &&
		    o->op != PX_OP_CLOSE)
			fail("px_close completed before an operation on its "
			     "descriptor", k);
	}
}

static void cb_locked(const px_completion *c);

static void cb(const px_completion *c)
{
	pthread_mutex_lock(&g_mu);
	cb_locked(c);
	pthread_mutex_unlock(&g_mu);
}

static void *loop_thread(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&g_quit, __ATOMIC_ACQUIRE))
		if (px_handle_events(g_px, 1) < 0)
			fail("px_handle_events failed in a loop thread", -1);
	return NULL;
}

static void cb_locked(const px_completion *c)
{
	rec *r = c->user;
	int i = (int)(r - g_rec);
	if (r < g_rec || r >= g_rec + MAX_OPS)
		fail("callback with a user pointer that is no record", -1);
	if (g_trace)
		fprintf(stderr, "cb %d: op %d fd %d error %d bytes %zd new_fd "
			"%d\n", i, (int)c->op, c->fd, c->error,
			(ssize_t)c->bytes, c->new_fd);
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
	if (r->op == PX_OP_CLOSE)
		check_close(r, i, c);
	if (r->op == PX_OP_ACCEPT)
		check_accept(i, c);
	if (r->has_act) {
		r->has_act = 0;
		size_t used = 0;
		step(r->act[0], r->act[1], r->act[2], NULL, 0, &used, 1);
	}
}

/* An accept's callback: a socket when it succeeded, and never under a
 * number that operations not yet called back still name (the program may
 * have closed that number with close(2) under them: the library keeps its
 * new descriptors off it).  The program owns the socket and closes it. */
static void check_accept(int i, const px_completion *c)
{
	if (c->error == 0 && c->new_fd < 0)
		fail("an accept succeeded without a socket", i);
	if (c->error != 0 && c->new_fd >= 0)
		fail("a failed accept with a socket", i);
	if (c->new_fd < 0)
		return;
	for (int k = 0; k < g_n; k++) {
		const rec *o = &g_rec[k];
		if (o->started && o->calls == 0 && o->fd == c->new_fd &&
		    o->op != PX_OP_POST && o->op != PX_OP_TIMER &&
		    !o->on_closed)
			fail("an accepted socket took a number that a pending "
			     "operation names", k);
	}
	set_linger0(c->new_fd);
	close(c->new_fd);
}

/* Close with a reset rather than a FIN, so that the connections of
 * hundreds of thousands of inputs leave no TIME_WAIT behind. */
static void set_linger0(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
}

/* The listener (127.0.0.1, a port of its own) and two client sockets. */
static void make_net_slots(void)
{
	socklen_t alen = sizeof g_listen_addr;
	memset(&g_listen_addr, 0, sizeof g_listen_addr);
	g_listen_addr.sin_family = AF_INET;
	g_listen_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	g_fds[LISTEN_SLOT] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g_fds[LISTEN_SLOT] < 0 ||
	    bind(g_fds[LISTEN_SLOT], (struct sockaddr *)&g_listen_addr,
		 sizeof g_listen_addr) ||
	    listen(g_fds[LISTEN_SLOT], 16) ||
	    getsockname(g_fds[LISTEN_SLOT], (struct sockaddr *)&g_listen_addr,
			&alen))
		abort();
	for (int i = 0; i < 2; i++) {
		g_fds[CONN_SLOT + i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC,
					      0);
		if (g_fds[CONN_SLOT + i] < 0)
			abort();
		set_linger0(g_fds[CONN_SLOT + i]);
	}
}

static int slot_of(int fd)
{
	for (int s = 0; s < NALL; s++)
		if (g_fds[s] == fd)
			return s;
	return -1;
}

/* Run one step.  more/nmore: the input after it (the action step takes
 * its bytes from there; *used says how many it took).  in_cb: called from
 * a callback, where px_handle_events may not be called. */
static void step(uint8_t op, uint8_t a, uint8_t b, const uint8_t *more,
		 size_t nmore, size_t *used, int in_cb)
{
	px_proactor *px = g_px;
	int n = g_n;
	int slot = a % NSLOTS;
	int fd = g_fds[slot];
	size_t len = 1 + ((size_t)b * 16) % MAX_LEN;
	int rc = 1;
	int kind = op >= NET_OP ? NKINDS + (op - NET_OP) % NNET : op % NKINDS;

	/* The network kinds work on the slots beyond NSLOTS.  Kind 26 is
	 * px_cancel, px_close or close(2) (kinds 3, 17, 18) of the listener
	 * or of a client socket. */
	if (kind >= NKINDS) {
		slot = kind == 24 ? LISTEN_SLOT
		     : kind == 26 ? LISTEN_SLOT + b % 3
		     : CONN_SLOT + (a & 1);  /* kinds 25 and 27 */
		fd = g_fds[slot];
		if (kind == 26)
			kind = a % 3 == 0 ? 3 : a % 3 == 1 ? 17 : 18;
	}

	if (n >= MAX_OPS)
		return;
	/* The record is taken first: a callback that a call below runs
	 * (px_handle_events) takes the ones after it.  A step that makes
	 * none gives it back (NOREC) if nothing took one since. */
	g_n++;
#define NOREC                                                                  \
	do {                                                                   \
		if (g_n == n + 1)                                              \
			g_n = n;                                               \
		return;                                                        \
	} while (0)
	/* Steps on a number the library took (library_took) are left out. */
	switch (kind) {
	case 4: case 5: case 6: case 7: case 8: case 14: case 21:
		break;
	case 11:
		if (!(a & 0x80))
			break;
		/* fall through */
	default:
		if (library_took(kind == 19 || kind == 20 ? FILE_SLOT
				 : kind == 22 || kind == 23 ? DGRAM_SLOT + (a & 1)
				 : slot))
			NOREC;
	}
	rec *r = &g_rec[n];
	memset(r, 0, sizeof *r);
	r->fd = fd;
	r->len = len;
	switch (kind) {
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
			fail("px_cancel of a valid number failed", n);
		NOREC;
	}
	case 4:
		r->op = PX_OP_POST;
		rc = px_post(px, cb, r);
		break;
	case 5:
	case 14: {
		/* A one-shot or a periodic timer. */
		r->op = PX_OP_TIMER;
		r->len = 0;
		r->periodic = kind == 14;
		r->started = 1; /* the callback may run before the id is known */
		int64_t id = kind == 14
			? px_timer_periodic(px, (uint64_t)b * 10000,
					    1 + (uint64_t)a * 5000, cb, r)
			: px_timer_start(px, (uint64_t)b * 10000, cb, r);
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
		NOREC;
	}
	case 7:
	case 8:
		if (!in_cb && px_handle_events(px, 0) < 0)
			fail("px_handle_events failed", n);
		NOREC;
	case 9: {
		/* The peer writes raw bytes (never blocks). */
		uint8_t tmp[256];
		/* (Not on a pipe whose read end was closed: that would
		 * raise SIGPIPE here, in the application.) */
		if (g_slot[slot] != SLOT_OPEN || slot == FILE_SLOT ||
		    (slot >= 2 * NPAIRS && slot < NSTREAM &&
		     g_slot[slot ^ 1] != SLOT_OPEN))
			NOREC;
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
		NOREC;
	}
	case 10:
		/* The peer reads raw bytes, making room. */
		if (g_slot[slot] == SLOT_OPEN && slot != FILE_SLOT) {
			uint8_t tmp[4096];
			ssize_t rd = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
			(void)rd;
		}
		NOREC;
	case 11:
		if (a & 0x80) {
			if (g_slot[slot] == SLOT_OPEN)
				shutdown(fd, SHUT_WR);
		} else if (!in_cb && px_handle_events(px, 0) < 0) {
			fail("px_handle_events failed", n);
		}
		NOREC;
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
	case 17:
		/* px_close: cancels, waits for the callbacks, closes. */
		r->op = PX_OP_CLOSE;
		r->len = 0;
		r->fd_was_open = g_slot[slot] == SLOT_OPEN;
		/* On a closed number library_took looked at: with loop
		 * threads an accept may have taken it since, and this then
		 * closes the library's new socket (the program's mistake,
		 * which the accept oracle leaves out). */
		r->on_closed = !r->fd_was_open;
		r->started = 1; /* its callback may run inside the call */
		rc = px_close(px, fd, cb, r);
		r->started = rc == 0;
		if (g_trace)
			fprintf(stderr, "step %d: px_close fd %d -> %d\n", n,
				fd, rc);
		if (rc == 0) {
			g_slot[slot] = SLOT_PX_CLOSE;
			g_close_rec[slot] = n;
		} else if (rc == -EBADF) {
			if (r->fd_was_open)
				fail("px_close of an open descriptor: EBADF", n);
		} else if (rc != -EALREADY) {
			fail("px_close failed unexpectedly", n);
		}
		goto attach;
	case 18:
		/* The application closes the descriptor itself, maybe under
		 * pending operations (they end with EBADF or ECANCELED).
		 * Not under TSan with loop threads: the manual allows this
		 * close while the library works on the number in another
		 * thread (it cannot know of the close), and TSan reports
		 * that as a race on the descriptor. */
		if (g_slot[slot] == SLOT_OPEN && !(PX_TEST_TSAN && g_nthreads)) {
			close(fd);
			g_slot[slot] = SLOT_CLOSED;
			if (g_trace)
				fprintf(stderr, "step %d: close(2) fd %d\n", n,
					fd);
		}
		NOREC;
	case 19:
	case 20: {
		/* A file read or write at an offset, on the memfd. */
		uint64_t off = (uint64_t)(a % 64) * 1000u;
		if (a & 0x40)
			off = (uint64_t)1 << 62;  /* far beyond the end */
		r->fd = fd = g_fds[FILE_SLOT];
		if (kind == 19) {
			r->op = PX_OP_READ_FILE;
			rc = px_read_file(px, fd, g_buf[n], len, off, cb, r);
		} else {
			r->op = PX_OP_WRITE_FILE;
			rc = px_write_file(px, fd, g_buf[n], len, off, cb, r);
		}
		break;
	}
	case 22:
	case 23:
		/* A datagram received or sent on the datagram socketpair. */
		r->fd = fd = g_fds[DGRAM_SLOT + (a & 1)];
		if (kind == 22) {
			r->op = PX_OP_READ_DGRAM;
			rc = px_read_dgram(px, fd, g_buf[n], len, cb, r);
		} else {
			r->op = PX_OP_WRITE_DGRAM;
			rc = px_write_dgram(px, fd, g_buf[n], len, NULL, 0, cb, r);
		}
		break;
	case 24:
		/* An accept on the listener, plain or with a deadline of
		 * 0..2.5 ms. */
		r->op = PX_OP_ACCEPT;
		r->len = 0;
		if (a & 1)
			rc = px_start_op(px, &(px_op_desc){ .op = PX_OP_ACCEPT,
					.fd = fd, .timeout_ns = 1 +
					(uint64_t)(b % 26) * 100000u,
					.cb = cb, .user = r });
		else
			rc = px_accept(px, fd, cb, r);
		break;
	case 25:
		/* A connect of a client socket to the listener (again, once
		 * connected: EISCONN in the callback), maybe with a deadline. */
		r->op = PX_OP_CONNECT;
		r->len = 0;
		if (b & 1)
			rc = px_start_op(px, &(px_op_desc){ .op = PX_OP_CONNECT,
					.fd = fd, .addr = (struct sockaddr *)
					&g_listen_addr, .addrlen =
					sizeof g_listen_addr, .timeout_ns = 1 +
					(uint64_t)(b % 26) * 100000u,
					.cb = cb, .user = r });
		else
			rc = px_connect(px, fd, (struct sockaddr *)&g_listen_addr,
					sizeof g_listen_addr, cb, r);
		break;
	case 27:
		/* A read or a small write on a client socket: unconnected,
		 * connected, or with the accepted end closed (the error goes
		 * to the callback; no SIGPIPE). */
		if (b & 1) {
			r->op = PX_OP_READ_STREAM;
			rc = px_read_stream(px, fd, g_buf[n], len, cb, r);
		} else {
			r->op = PX_OP_WRITE_STREAM;
			rc = px_write_stream_all(px, fd, g_buf[n], len, cb, r);
		}
		break;
	case 21:
		/* The next 3 bytes are the action of the next operation
		 * started (its callback performs them). */
		if (nmore >= 3) {
			memcpy(g_act, more, 3);
			g_act_armed = 1;
			*used = 3;
		}
		NOREC;
	}
	if (kind != 5 && kind != 14)
		r->started = rc == 0;
	int rs = slot_of(r->fd);
	r->on_closed = rs >= 0 && g_slot[rs] != SLOT_OPEN;
	if (g_trace)
		fprintf(stderr, "step %d: kind %d fd %d len %zu%s -> %d\n", n,
			kind, fd, r->len, in_cb ? " (in a callback)" : "", rc);
	if (rc != 0) {
		int closed = g_slot[slot_of(r->fd)] != SLOT_OPEN;
		if (rc == -ESHUTDOWN) {
			if (!g_destroying)
				fail("a start failed with ESHUTDOWN before "
				     "px_destroy", n);
		} else if (rc == -EBADF) {
			if (!closed)
				fail("a start on an open descriptor failed with "
				     "EBADF", n);
		} else if (rc == -EALREADY && kind == 25) {
			/* Refused while another connect on fd is under way:
			 * one must have been started and not called back. */
			int pending = 0;
			for (int k = 0; k < n; k++)
				if (g_rec[k].op == PX_OP_CONNECT &&
				    g_rec[k].fd == r->fd && g_rec[k].started &&
				    !g_rec[k].calls)
					pending = 1;
			if (!pending)
				fail("a connect was refused with EALREADY with "
				     "no other connect pending on its "
				     "descriptor", n);
		} else if (rc != -EMFILE) {
			fprintf(stderr, "fuzz_api: step kind %d on fd %d "
				"returned %d (%s)\n", kind, fd, rc,
				strerror(-rc));
			fail("a start failed unexpectedly", n);
		}
	} else if (g_destroying && kind != 5 && kind != 14) {
		fail("a start succeeded inside px_destroy", n);
	}
attach:
	if (r->started && g_act_armed) {
		g_act_armed = 0;
		memcpy(r->act, g_act, 3);
		r->has_act = 1;
	}
#undef NOREC
}

/* Before px_destroy, the loop threads gone: px_stats balances per
 * processor (started = completed + cancelled + timed out + in flight),
 * its totals are the processors' sums, started is the number of I/O
 * starts that returned 0, and in flight no more than those not called
 * back yet (px_stats(3)). */
static void check_stats(void)
{
	struct px_stats st;
	if (px_stats(g_px, &st) != 0)
		fail("px_stats failed", -1);
	uint64_t started = 0, pend = 0, s = 0, c = 0, k = 0, t = 0, f = 0;
	for (int i = 0; i < g_n; i++)
		if (g_rec[i].started && g_rec[i].op <= PX_OP_CONNECT) {
			started++;
			pend += !g_rec[i].calls;
		}
	for (unsigned i = 0; i < st.nproc && i < 2; i++) {
		const px_proc_stats *p = &st.proc[i];
		if (p->started != p->completed + p->cancelled + p->timed_out +
				  p->in_flight)
			fail("px_stats: a processor's counts do not balance", -1);
		s += p->started;
		c += p->completed;
		k += p->cancelled;
		t += p->timed_out;
		f += p->in_flight;
	}
	if (s != st.started || c != st.completed || k != st.cancelled ||
	    t != st.timed_out || f != st.in_flight)
		fail("px_stats: the totals are not the processors' sums", -1);
	if (st.started != started)
		fail("px_stats: started is not the I/O starts that returned 0",
		     -1);
	if (st.in_flight > pend)
		fail("px_stats: more in flight than not called back", -1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];
	px_config cfg;

	if (px_config_parse(&cfg, g_engine, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz_api: PX_FUZZ_ENGINE '%s': %s\n", g_engine, err);
		exit(1);
	}
	cfg.flags |= PX_CF_NO_ENV;
	if (px_create_config(&g_px, &cfg, err, sizeof err) != 0) {
		fprintf(stderr, "fuzz_api: px_create '%s': %s\n", g_engine, err);
		exit(1);
	}
	for (int i = 0; i < NPAIRS; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g_fds + 2 * i))
			abort();
	for (int i = 0; i < NPIPES; i++)
		if (pipe2(g_fds + 2 * (NPAIRS + i), O_CLOEXEC))
			abort();
	g_fds[FILE_SLOT] = memfd_create("fuzz_api", MFD_CLOEXEC);
	if (g_fds[FILE_SLOT] < 0)
		abort();
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, g_fds + DGRAM_SLOT))
		abort();
	make_net_slots();
	memset(g_slot, 0, sizeof g_slot);
	memset(g_rec, 0, sizeof g_rec);
	g_n = 0;
	g_destroying = 0;
	g_act_armed = 0;

	pthread_t th[4];
	__atomic_store_n(&g_quit, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < g_nthreads; i++)
		if (pthread_create(&th[i], NULL, loop_thread, NULL))
			abort();
	size_t pos = 0;
	pthread_mutex_lock(&g_mu);
	while (pos < size && g_n < MAX_OPS) {
		uint8_t op = data[pos++];
		uint8_t a = pos < size ? data[pos++] : 0;
		uint8_t b = pos < size ? data[pos++] : 0;
		size_t used = 0;
		step(op, a, b, data + pos, size - pos, &used, 0);
		pos += used;
		if (g_nthreads) {  /* let the loop threads run callbacks */
			pthread_mutex_unlock(&g_mu);
			sched_yield();
			pthread_mutex_lock(&g_mu);
		}
	}
	pthread_mutex_unlock(&g_mu);
	__atomic_store_n(&g_quit, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < g_nthreads; i++)
		pthread_join(th[i], NULL);
	check_stats();
	g_destroying = 1;
	if (px_destroy(g_px) != 0)
		fail("px_destroy failed", -1);
	g_px = NULL;
	for (int i = 0; i < g_n; i++) {
		if (g_rec[i].started && g_rec[i].calls != 1)
			fail(g_rec[i].calls ? "more than one callback"
					    : "no callback by the end of px_destroy",
			     i);
		if (!g_rec[i].started && g_rec[i].calls)
			fail("callback for an operation that did not start", i);
	}
	for (int i = 0; i < NALL; i++)
		if (g_slot[i] == SLOT_OPEN)
			close(g_fds[i]);
	return 0;
}
