/*
 * oom.c - the library's out-of-memory paths, per engine (suite 'fault').
 *
 * The program is linked with -Wl,--wrap for malloc, calloc, realloc,
 * reallocarray, aligned_alloc, posix_memalign, memalign, strdup, strndup
 * and free (test/meson.build), so every call the statically linked library
 * makes to them comes here first; glibc's own internal allocations (POSIX
 * AIO, stdio) and those of shared libraries (cmocka, liburing) do not.
 * That works under ASan and TSan too: __real_malloc is whatever the
 * sanitizer put behind malloc.
 *
 * While armed, the wrappers count allocation calls from every thread and
 * make the Nth one fail (NULL, errno ENOMEM), or the Nth and every one
 * after it (memory stays short).  A scenario is run for N = 1, 2, 3, ...
 * until a run makes fewer than N calls, i.e. completes with no failure
 * injected.  The short scenario: px_create_config from the engine text,
 * then reads and writes (single and vectored) on socketpairs, a file write
 * and read, a post, a timer, a periodic timer cancelled at once, a read
 * with a deadline, a datagram read and write, an accept and a connect, a
 * read ended by px_cancel and one ended by px_close, a post whose callback
 * starts a write and a timer; the loop runs until every callback has come;
 * px_destroy.  The long scenario (big_once, below) makes the tables grow.
 * For every N:
 *
 *  - each call succeeds or fails with a documented error (-ENOMEM, or
 *    -EOPNOTSUPP where the engine does not do the operation), and a
 *    completion's error is the operation's own result or ENOMEM;
 *  - a failed px_create_config leaves no descriptor open (/proc/self/fd
 *    counted), no thread running (/proc/self/task; not counted on io_uring
 *    and POSIX AIO, whose helper threads come and go by themselves, nor
 *    under TSan, which adds one of its own) and no memory allocated (the
 *    wrappers count live blocks);
 *  - every start that returned 0 calls back exactly once, none that
 *    failed calls back (and a failed px_close leaves the descriptor open);
 *  - nothing hangs: each wait is bounded, and alarm() ends a stuck run;
 *  - after px_destroy the live blocks and the threads are as many as
 *    before px_create_config, and no descriptor of the library is left
 *    open.
 *
 * The short scenario runs with the test thread running the loop and with
 * two loop threads (the starts made from the test thread), each with one
 * failure and with failures from N on; the long one with one loop thread,
 * and with two and max_aio 8 (starts deferred, so that the engine's tables
 * are grown later, by the loop, and a failure there must reach the
 * completion).  oom_idle_check: a read on a descriptor closed with
 * close(2) must end while every allocation fails; oom_aiocb_list (POSIX
 * AIO's aiocb wait only): the wait must not spin while its list cannot
 * grow, and the reads left out of it still complete.  OOM_TRACE=1 in the
 * environment prints where each injected failure and each call site of
 * the long scenario are.
 *
 * The program's own bookkeeping is static: nothing of it allocates while
 * a run is armed.
 *
 *   oom 'ENGINE CONFIG TEXT' [TEST FILTER]
 */
#include <execinfo.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------ */
/* The allocation wrappers                                              */
/* ------------------------------------------------------------------ */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_reallocarray(void *p, size_t k, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **out, size_t a, size_t n);
void *__real_memalign(size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_reallocarray(void *p, size_t k, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **out, size_t a, size_t n);
void *__wrap_memalign(size_t a, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void __wrap_free(void *p);

static atomic_bool armed;
static atomic_long calls;        /* allocation calls while armed */
static atomic_long fail_at;      /* the call to fail (1-based), 0: none */
static atomic_bool sticky;       /* and every one after it too */
static atomic_long failed;       /* failures injected */
static atomic_long live;         /* blocks handed out and not freed */
static bool trace;

/* Where each allocation of a run was called from (return addresses in
 * the library), for picking which ones to fail in the long scenario. */
#define MAX_SITES 8192
static void *sites[MAX_SITES];

/* True when this allocation (made from site) is to fail. */
static bool inject(void *site)
{
	if (!atomic_load(&armed))
		return false;
	long n = atomic_fetch_add(&calls, 1) + 1;
	if (n <= MAX_SITES)
		sites[n - 1] = site;
	long at = atomic_load(&fail_at);
	if (!at || (atomic_load(&sticky) ? n < at : n != at))
		return false;
	atomic_fetch_add(&failed, 1);
	if (trace) {
		/* OOM_TRACE=1: where each injected failure is (debugging). */
		void *bt[16];
		int k = backtrace(bt, 16);
		fprintf(stderr, "oom: allocation %ld fails here:\n", n);
		backtrace_symbols_fd(bt, k, 2);
	}
	errno = ENOMEM;
	return true;
}

/* The return address is the library's call. */
#define INJECT() inject(__builtin_return_address(0))

static void *counted(void *p)
{
	if (p)
		atomic_fetch_add(&live, 1);
	return p;
}

void *__wrap_malloc(size_t n)
{
	return INJECT() ? NULL : counted(__real_malloc(n));
}

void *__wrap_calloc(size_t k, size_t n)
{
	return INJECT() ? NULL : counted(__real_calloc(k, n));
}

void *__wrap_realloc(void *p, size_t n)
{
	if (INJECT())
		return NULL;
	void *q = __real_realloc(p, n);
	if (!p)
		return counted(q);
	if (!n && !q)                    /* glibc: realloc(p, 0) frees p */
		atomic_fetch_sub(&live, 1);
	return q;
}

void *__wrap_reallocarray(void *p, size_t k, size_t n)
{
	if (INJECT())
		return NULL;
	void *q = __real_reallocarray(p, k, n);
	if (!p)
		return counted(q);
	if ((!k || !n) && !q)
		atomic_fetch_sub(&live, 1);
	return q;
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
	return INJECT() ? NULL : counted(__real_aligned_alloc(a, n));
}

int __wrap_posix_memalign(void **out, size_t a, size_t n)
{
	if (INJECT())
		return ENOMEM;
	int rc = __real_posix_memalign(out, a, n);
	if (!rc)
		counted(*out);
	return rc;
}

void *__wrap_memalign(size_t a, size_t n)
{
	return INJECT() ? NULL : counted(__real_memalign(a, n));
}

char *__wrap_strdup(const char *s)
{
	return INJECT() ? NULL : counted(__real_strdup(s));
}

char *__wrap_strndup(const char *s, size_t n)
{
	return INJECT() ? NULL : counted(__real_strndup(s, n));
}

void __wrap_free(void *p)
{
	if (p)
		atomic_fetch_sub(&live, 1);
	__real_free(p);
}

static void arm(long n)
{
	atomic_store(&calls, 0);
	atomic_store(&failed, 0);
	atomic_store(&fail_at, n);
	atomic_store(&armed, true);
}

static void disarm(void)
{
	atomic_store(&armed, false);
}

/* ------------------------------------------------------------------ */
/* Descriptors                                                          */
/* ------------------------------------------------------------------ */

/* Open descriptors, less the one that reads the directory. */
static int count_fds(void)
{
	return h_count_dir("/proc/self/fd") - 1;
}

/* Threads of the process, or 0 where the count says nothing about the
 * library's: io_uring's kernel workers (iou-wrk) and glibc's POSIX AIO
 * helpers come and go by themselves, auto may choose io_uring, and TSan
 * starts a thread of its own at a time of its choosing. */
static int count_threads(void)
{
	if (PX_TEST_TSAN)
		return 0;
	const char *prov[2] = { h_cfg.primary.provider,
				h_cfg.secondary.processor == PX_PROCESSOR_NONE
					? "select" : h_cfg.secondary.provider };
	for (int i = 0; i < 2; i++)
		if (!strcmp(prov[i], "uring") || !strcmp(prov[i], "posix") ||
		    !prov[i][0])
			return 0;
	return h_count_dir("/proc/self/task");
}

/* How many threads more than want there are, once those on their way out
 * are gone: a joined thread may still be listed for a moment (pthread_join
 * returns when the kernel clears its id, a little before the task goes). */
static int threads_over(int want)
{
	int n = count_threads();
	for (int i = 0; i < 200 && n != want; i++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
		n = count_threads();
	}
	return n - want;
}

/* fd is open and still the file whose inode is ino (the number of a
 * descriptor the library closed may have been reused since, by an accept
 * that completed later). */
static bool fd_open(int fd, ino_t ino)
{
	struct stat st;
	return fstat(fd, &st) == 0 && st.st_ino == ino;
}

/* ------------------------------------------------------------------ */
/* The scenario                                                         */
/* ------------------------------------------------------------------ */

enum slot {
	S_READ,          /* read of data already waiting */
	S_WRITE,         /* write into an empty socket buffer */
	S_WFILE,         /* file write at 4096 */
	S_RFILE,         /* file read at 0 of what is already there */
	S_POST,
	S_TIMER,         /* 1 ms */
	S_CANCELLED,     /* read that waits, ended by px_cancel */
	S_CLOSED,        /* read that waits, ended by px_close */
	S_CLOSE,         /* px_close's own callback */
	S_RDGRAM,        /* datagram read of one already waiting */
	S_WDGRAM,        /* datagram write */
	S_ACCEPT,        /* accept of a connection already in the backlog */
	S_CONNECT,       /* connect to the listener */
	S_READ2,         /* a second read on the first socket (nothing comes
	                    but what the test writes once the run is done) */
	S_DEADLINE,      /* read with a 2 ms deadline that nothing answers */
	S_PERIODIC,      /* periodic timer cancelled before its first tick */
	S_WRITEV,        /* px_writev_stream_all of two buffers */
	S_CHAIN,         /* a post whose callback starts the two below */
	S_CHAIN_WRITE,   /* write started by that callback */
	S_CHAIN_TIMER,   /* timer started by that callback */
	NSLOTS
};

static const char *const slot_name[NSLOTS] = {
	"read", "write", "write_file", "read_file", "post", "timer",
	"cancelled read", "closed read", "close", "read_dgram", "write_dgram",
	"accept", "connect", "second read", "read with deadline",
	"periodic timer", "writev_all", "post that starts more",
	"write started by a callback", "timer started by a callback",
};

typedef struct rec {
	atomic_int start_rc;        /* what the start returned (1: none) */
	atomic_int calls;
	int error;
	size_t bytes;
	int new_fd;
	px_op op;
} rec;

static rec recs[NSLOTS];
static atomic_int enomem_calls; /* completions with ENOMEM, all runs */
static atomic_int ncalls;       /* callbacks run, all slots */

static struct run {
	px_proactor *px;
	int sv[2], sv2[2], sv3[2], sv4[2], ds[2];
	int file;
	int lfd, client, cfd;
	struct sockaddr_in laddr;
	char rbuf[64], rbuf2[64], wbuf[16], fbuf[64], fwbuf[32];
	char dbuf[64], dwbuf[16], cbuf[16], c3buf[16], dlbuf[16];
	struct iovec iov[2];
	bool closed_by_px;          /* sv3[0] given to px_close */
	ino_t sv3_ino;
} R;

static void cb(const px_completion *c)
{
	rec *r = c->user;
	if (atomic_fetch_add(&r->calls, 1) == 0) {
		r->error = c->error;
		r->bytes = c->bytes;
		r->new_fd = c->new_fd;
		r->op = c->op;
	}
	atomic_fetch_add(&ncalls, 1);
	if (c->error == ENOMEM)
		atomic_fetch_add(&enomem_calls, 1);
}

/* S_CHAIN's callback: starts from inside a callback. */
static void chain_cb(const px_completion *c)
{
	px_proactor *px = c->proactor;
	recs[S_CHAIN_WRITE].start_rc =
		px_write_stream(px, R.sv4[0], R.wbuf, 4, cb,
				&recs[S_CHAIN_WRITE]);
	int64_t id = px_timer_start(px, 1000000, cb, &recs[S_CHAIN_TIMER]);
	recs[S_CHAIN_TIMER].start_rc = id > 0 ? 0 : (int)id;
	cb(c);
}

/* Every start that returned 0 has called back. */
static bool all_called_back(void)
{
	for (int s = 0; s < NSLOTS; s++)
		if (atomic_load(&recs[s].start_rc) == 0 &&
		    !atomic_load(&recs[s].calls))
			return false;
	return true;
}

/* What a completion of slot s may carry, besides ENOMEM. */
static bool error_ok(int s, int err)
{
	if (err == 0 || err == ENOMEM)
		return s != S_CANCELLED && s != S_CLOSED && s != S_DEADLINE &&
		       s != S_PERIODIC ? true : err == ENOMEM;
	switch (s) {
	case S_CANCELLED:
	case S_CLOSED:
	case S_PERIODIC:
		return err == ECANCELED;
	case S_DEADLINE:
		return err == ETIMEDOUT;
	default:
		return false;
	}
}

/* Documented refusals of a start (the engine may not do an operation). */
static bool start_ok(int rc)
{
	return rc == 0 || rc == -ENOMEM || rc == -EOPNOTSUPP;
}

static void xsocketpair(int type, int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv), 0);
}

/* Descriptors and data for one run, made before arming. */
static void run_prepare(void)
{
	memset(&R, 0, sizeof(R));
	for (int i = 0; i < NSLOTS; i++) {
		recs[i].start_rc = 1;           /* not started */
		atomic_store(&recs[i].calls, 0);
		recs[i].new_fd = -1;
	}
	atomic_store(&ncalls, 0);
	xsocketpair(SOCK_STREAM, R.sv);
	xsocketpair(SOCK_STREAM, R.sv2);
	xsocketpair(SOCK_STREAM, R.sv3);
	struct stat st;
	assert_int_equal(fstat(R.sv3[0], &st), 0);
	R.sv3_ino = st.st_ino;
	xsocketpair(SOCK_STREAM, R.sv4);
	xsocketpair(SOCK_DGRAM, R.ds);
	assert_int_equal(write(R.sv[1], "ping", 4), 4);
	assert_int_equal(send(R.ds[1], "dgram", 5, 0), 5);
	memcpy(R.wbuf, "pong", 4);
	memcpy(R.dwbuf, "back", 4);
	R.iov[0] = (struct iovec){ R.wbuf, 2 };
	R.iov[1] = (struct iovec){ R.wbuf + 2, 2 };

	char path[] = "/tmp/px_oom_XXXXXX";
	R.file = mkostemp(path, O_CLOEXEC);
	assert_true(R.file >= 0);
	unlink(path);
	memset(R.fbuf, 'f', sizeof(R.fbuf));
	assert_int_equal(pwrite(R.file, R.fbuf, sizeof(R.fbuf), 0),
			 (ssize_t)sizeof(R.fbuf));
	memset(R.fbuf, 0, sizeof(R.fbuf));
	memset(R.fwbuf, 'w', sizeof(R.fwbuf));

	R.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(R.lfd >= 0);
	R.laddr.sin_family = AF_INET;
	R.laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(R.lfd, (struct sockaddr *)&R.laddr,
			      sizeof(R.laddr)), 0);
	socklen_t al = sizeof(R.laddr);
	assert_int_equal(getsockname(R.lfd, (struct sockaddr *)&R.laddr, &al),
			 0);
	assert_int_equal(listen(R.lfd, 8), 0);
	/* One connection waits in the backlog for the accept. */
	R.client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(R.client >= 0);
	assert_int_equal(connect(R.client, (struct sockaddr *)&R.laddr,
				 sizeof(R.laddr)), 0);
	R.cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(R.cfd >= 0);
}

/* Start everything (armed).  Returns how many callbacks to expect. */
static int run_start(void)
{
	px_proactor *px = R.px;
	int want = 0;
#define START(s, call)                                              \
	do {                                                        \
		recs[s].start_rc = (call);                          \
		if (recs[s].start_rc == 0)                          \
			want++;                                     \
	} while (0)
	START(S_READ, px_read_stream(px, R.sv[0], R.rbuf, sizeof(R.rbuf), cb,
				     &recs[S_READ]));
	START(S_WRITE, px_write_stream(px, R.sv[0], R.wbuf, 4, cb,
				       &recs[S_WRITE]));
	START(S_WFILE, px_write_file(px, R.file, R.fwbuf, sizeof(R.fwbuf), 4096,
				     cb, &recs[S_WFILE]));
	START(S_RFILE, px_read_file(px, R.file, R.fbuf, sizeof(R.fbuf), 0, cb,
				    &recs[S_RFILE]));
	START(S_POST, px_post(px, cb, &recs[S_POST]));
	int64_t id = px_timer_start(px, 1000000, cb, &recs[S_TIMER]);
	recs[S_TIMER].start_rc = id > 0 ? 0 : (int)id;
	if (id > 0)
		want++;
	START(S_CANCELLED, px_read_stream(px, R.sv2[0], R.cbuf, sizeof(R.cbuf),
					  cb, &recs[S_CANCELLED]));
	START(S_CLOSED, px_read_stream(px, R.sv3[0], R.c3buf, sizeof(R.c3buf),
				       cb, &recs[S_CLOSED]));
	START(S_RDGRAM, px_read_dgram(px, R.ds[0], R.dbuf, sizeof(R.dbuf), cb,
				      &recs[S_RDGRAM]));
	START(S_WDGRAM, px_write_dgram(px, R.ds[0], R.dwbuf, 4, NULL, 0, cb,
				       &recs[S_WDGRAM]));
	START(S_ACCEPT, px_accept(px, R.lfd, cb, &recs[S_ACCEPT]));
	START(S_CONNECT, px_connect(px, R.cfd, (struct sockaddr *)&R.laddr,
				    sizeof(R.laddr), cb, &recs[S_CONNECT]));
	START(S_READ2, px_read_stream(px, R.sv[0], R.rbuf2, sizeof(R.rbuf2),
				      cb, &recs[S_READ2]));
	START(S_DEADLINE, px_start_op(px, &(px_op_desc){
		.op = PX_OP_READ_STREAM, .fd = R.sv2[1], .buf = R.dlbuf,
		.len = sizeof(R.dlbuf), .timeout_ns = 2000000, .cb = cb,
		.user = &recs[S_DEADLINE] }));
	id = px_timer_periodic(px, 3600ull * 1000000000, 1000000, cb,
			       &recs[S_PERIODIC]);
	recs[S_PERIODIC].start_rc = id > 0 ? 0 : (int)id;
	if (id > 0) {
		want++;
		assert_int_equal(px_timer_cancel(px, id), 0);
	}
	START(S_WRITEV, px_writev_stream_all(px, R.sv4[0], R.iov, 2, cb,
					     &recs[S_WRITEV]));
	START(S_CHAIN, px_post(px, chain_cb, &recs[S_CHAIN]));

	/* 0 is right too when the read has ended already (with ENOMEM from
	 * a deferred start); one still pending after a 0 shows as a hang. */
	assert_true(px_cancel(px, R.sv2[0]) >= 0);
	START(S_CLOSE, px_close(px, R.sv3[0], cb, &recs[S_CLOSE]));
	if (recs[S_CLOSE].start_rc == 0) {
		R.closed_by_px = true;
	} else {
		/* The read stays pending: end it with a cancel. */
		assert_true(px_cancel(px, R.sv3[0]) >= 0);
	}
#undef START
	return want;
}

/* Check one slot after px_destroy. */
static void check_slot(long n, int s)
{
	rec *r = &recs[s];
	int calls_ = atomic_load(&r->calls);
	if (r->start_rc == 1)
		return;
	if (!start_ok(r->start_rc) ||
	    (s == S_CLOSE && r->start_rc == -EOPNOTSUPP))
		fail_msg("N=%ld: %s: start returned %d (%s), not a documented "
			 "error", n, slot_name[s], r->start_rc,
			 px_strerror(r->start_rc));
	if (r->start_rc < 0) {
		if (calls_)
			fail_msg("N=%ld: %s: start failed (%s) and its "
				 "callback ran %d times", n, slot_name[s],
				 px_strerror(r->start_rc), calls_);
		return;
	}
	if (calls_ != 1)
		fail_msg("N=%ld: %s: started, callback ran %d times", n,
			 slot_name[s], calls_);
	if (!error_ok(s, r->error))
		fail_msg("N=%ld: %s: completed with %d (%s)", n, slot_name[s],
			 r->error, px_strerror(r->error));
	if (r->error == 0) {
		size_t want = s == S_READ || s == S_WRITE || s == S_WDGRAM ||
			      s == S_WRITEV || s == S_CHAIN_WRITE ? 4
			    : s == S_WFILE ? sizeof(R.fwbuf)
			    : s == S_RFILE ? sizeof(R.fbuf)
			    : s == S_RDGRAM ? 5 : 0;
		/* The second read gets "x", or "ping" and maybe "x" when the
		 * first read did not take it. */
		bool first_ok = recs[S_READ].start_rc == 0 &&
				recs[S_READ].error == 0;
		if (s == S_READ2 && (first_ok ? r->bytes == 1
				     : r->bytes == 4 || r->bytes == 5))
			want = r->bytes;
		if (r->bytes != want)
			fail_msg("N=%ld: %s: %zu bytes, expected %zu", n,
				 slot_name[s], r->bytes, want);
	}
	if (s == S_ACCEPT && r->error == 0 && r->new_fd < 0)
		fail_msg("N=%ld: accept: no new descriptor", n);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Loop threads of the threaded variant. */
static atomic_bool loops_stop;
static atomic_int loops_err;

static void *loop_main(void *arg)
{
	px_proactor *px = arg;
	while (!atomic_load(&loops_stop)) {
		int rc = px_handle_events(px, 10);
		if (rc == -ESHUTDOWN && atomic_load(&loops_stop))
			break;
		if (rc < 0) {
			int zero = 0;
			atomic_compare_exchange_strong(&loops_err, &zero, rc);
			break;
		}
	}
	return NULL;
}

/* One run with allocation n made to fail.  Returns true when a failure
 * was injected (so the next n is worth trying). */
static bool run_once(long n, int nloops)
{
	run_prepare();
	int fd0 = count_fds();
	int th0 = count_threads();
	long live0 = atomic_load(&live);
	char err[256] = "";

	alarm(10);
	arm(n);
	int rc = px_create_config(&R.px, &h_cfg, err, sizeof(err));
	if (rc < 0) {
		disarm();
		if (rc != -ENOMEM)
			fail_msg("N=%ld: px_create_config: %d (%s): %s, not "
				 "-ENOMEM", n, rc, px_strerror(rc), err);
		if (atomic_load(&live) != live0)
			fail_msg("N=%ld: failed px_create_config left %ld "
				 "blocks allocated", n,
				 atomic_load(&live) - live0);
		if (count_fds() != fd0)
			fail_msg("N=%ld: failed px_create_config left %d "
				 "descriptors open", n, count_fds() - fd0);
		int more = threads_over(th0);
		if (more)
			fail_msg("N=%ld: failed px_create_config left %d "
				 "threads running", n, more);
		goto close_all;
	}

	pthread_t th[2];
	atomic_store(&loops_stop, false);
	atomic_store(&loops_err, 0);
	for (int i = 0; i < nloops; i++)
		assert_int_equal(pthread_create(&th[i], NULL, loop_main, R.px),
				 0);

	int want = run_start();
	/* Every started operation can complete by itself except the second
	 * read, which waits for data: written once the first read is done, so
	 * that the first one cannot take it too. */
	bool fed = false;
	uint64_t deadline = now_ms() + 3000;
	while (!all_called_back()) {
		if (now_ms() > deadline)
			break;
		if (!fed && (recs[S_READ].start_rc != 0 ||
			     atomic_load(&recs[S_READ].calls))) {
			assert_int_equal(write(R.sv[1], "x", 1), 1);
			fed = true;
		}
		if (nloops) {
			struct timespec ts = { 0, 500000 };
			nanosleep(&ts, NULL);
			continue;
		}
		int hr = px_handle_events(R.px, 10);
		if (hr < 0) {
			disarm();
			fail_msg("N=%ld: px_handle_events: %d (%s)", n, hr,
				 px_strerror(hr));
		}
	}
	bool all = all_called_back();
	atomic_store(&loops_stop, true);
	if (nloops)
		px_stop(R.px);   /* wakes them */
	for (int i = 0; i < nloops; i++)
		pthread_join(th[i], NULL);
	if (!all) {
		disarm();
		char missing[512] = "";
		for (int s = 0; s < NSLOTS; s++) {
			size_t room = sizeof(missing) - strlen(missing) - 1;
			if (recs[s].start_rc != 0 ||
			    atomic_load(&recs[s].calls))
				continue;
			strncat(missing, " ", room);
			strncat(missing, slot_name[s], room > 0 ? room - 1 : 0);
		}
		fail_msg("N=%ld: callbacks missing after 3 s:%s", n, missing);
	}
	int lerr = atomic_load(&loops_err);
	if (lerr)
		fail_msg("N=%ld: a loop thread's px_handle_events: %d (%s)", n,
			 lerr, px_strerror(lerr));
	rc = px_destroy(R.px);
	disarm();
	if (rc != 0)
		fail_msg("N=%ld: px_destroy: %d (%s)", n, rc, px_strerror(rc));
	R.px = NULL;
	for (int s = 0; s < NSLOTS; s++)
		check_slot(n, s);
	for (int s = 0; s < NSLOTS; s++)
		want += recs[s].start_rc == 0 && (s == S_CHAIN_WRITE ||
						  s == S_CHAIN_TIMER);
	if (atomic_load(&ncalls) != want)
		fail_msg("N=%ld: %d callbacks, %d expected", n,
			 atomic_load(&ncalls), want);
	if (atomic_load(&live) != live0)
		fail_msg("N=%ld: after px_destroy %ld blocks are still "
			 "allocated", n, atomic_load(&live) - live0);
	int more = threads_over(th0);
	if (more)
		fail_msg("N=%ld: after px_destroy %d more threads than before",
			 n, more);
	if (R.closed_by_px && fd_open(R.sv3[0], R.sv3_ino))
		fail_msg("N=%ld: px_close called back (error %d) but left "
			 "the descriptor open", n, recs[S_CLOSE].error);
	if (!R.closed_by_px && !fd_open(R.sv3[0], R.sv3_ino))
		fail_msg("N=%ld: a px_close that failed closed the "
			 "descriptor", n);

close_all:
	alarm(0);
	if (recs[S_ACCEPT].new_fd >= 0 && recs[S_ACCEPT].error == 0)
		close(recs[S_ACCEPT].new_fd);
	int own[] = { R.sv[0], R.sv[1], R.sv2[0], R.sv2[1], R.sv3[1],
		      R.sv4[0], R.sv4[1],
		      R.ds[0], R.ds[1], R.file, R.lfd, R.client, R.cfd };
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		close(own[i]);
	if (!R.closed_by_px)
		close(R.sv3[0]);
	/* What is open now must be what was open before this run's own
	 * descriptors were made (fd0 counted them). */
	int fds = count_fds();
	int made = (int)(sizeof(own) / sizeof(own[0])) + 1;
	if (fds != fd0 - made)
		fail_msg("N=%ld: %d descriptors open after the run, %d "
			 "before it", n, fds, fd0 - made);
	return atomic_load(&failed) > 0;
}

static void run_all(int nloops, bool all_after)
{
	atomic_store(&sticky, all_after);
	long n = 1;
	uint64_t t0 = now_ms();
	while (run_once(n, nloops)) {
		n++;
		if (n > 2000)
			fail_msg("more than 2000 allocations in one run");
	}
	atomic_store(&sticky, false);
	printf("oom: %s, %d loop thread(s): %ld runs, allocation 1 to %ld "
	       "failed in turn%s, %d completions with ENOMEM, %llu ms\n",
	       h_engine_text, nloops ? nloops : 1, n, n - 1,
	       all_after ? " and all after it" : "",
	       atomic_exchange(&enomem_calls, 0),
	       (unsigned long long)(now_ms() - t0));
}

/* ------------------------------------------------------------------ */
/* The long scenario: enough at once for the tables to grow             */
/* ------------------------------------------------------------------ */

/*
 * 34 socketpairs with a read pending on each end (68 descriptors, numbers
 * past 64: the core's per-descriptor table, the readiness provider's
 * queues, poll's and linux_rt's arrays grow), 70 posts (a second chunk of
 * operation records), 40 timers (the heap grows), half of them due in an
 * hour.  Then a byte for a quarter of the pairs, px_cancel for a quarter,
 * px_close for a quarter; what is left pending is ended by px_destroy.
 * With max_aio 8 most reads are deferred and reach the engine later, from
 * the loop, where a table that cannot grow must end them with ENOMEM.
 *
 * Failing each allocation in turn would take some 200 runs, most of them
 * at the same two calls (one entry per descriptor); instead a first run
 * without a failure notes where each allocation is called from, and the
 * runs fail the first two and the last allocation of each call site.
 */
#define NPAIRS 34
#define NPOSTS 70
#define NTIMERS 40
#define NFREADS 70

enum { B_READ0, B_READ1 = B_READ0 + NPAIRS, B_CLOSE = B_READ1 + NPAIRS,
       B_POST = B_CLOSE + NPAIRS, B_TIMER = B_POST + NPOSTS,
       B_FREAD = B_TIMER + NTIMERS, B_N = B_FREAD + NFREADS };

static rec brecs[B_N];
static int bpair[NPAIRS][2];
static char bbuf[NPAIRS][2][8];
static char bfbuf[NFREADS][8];
static int bfile;
static bool bclosed[NPAIRS];         /* end 1 given to px_close */
/* With a small max_aio, reads that never complete would hold every slot
 * and the rest would wait a second for the processor to start them beyond
 * the limit: then every end gets a byte. */
static bool bfeed_all;

static int big_ends_early(int i)
{
	return i % 4;                    /* 0 fed, 1 cancelled, 2 closed */
}

/* Must slot b have called back before px_destroy? */
static bool big_early(int b)
{
	if (brecs[b].start_rc != 0)
		return false;
	if (b >= B_FREAD || (b >= B_POST && b < B_TIMER))
		return true;
	if (b >= B_TIMER)
		return (b - B_TIMER) % 2 == 0;
	if (b >= B_CLOSE)
		return true;
	if (bfeed_all)
		return true;
	if (b >= B_READ1)
		return big_ends_early(b - B_READ1) == 2 && bclosed[b - B_READ1];
	int i = b - B_READ0;
	return big_ends_early(i) == 0 || big_ends_early(i) == 1 ||
	       (big_ends_early(i) == 2 && bclosed[i]);
}

static bool big_error_ok(int b, const rec *r)
{
	if (r->error == ENOMEM && (b < B_CLOSE || b >= B_FREAD))
		return true;
	if (b >= B_FREAD)
		return r->error == 0 && r->bytes == 8 &&
		       !memcmp(bfbuf[b - B_FREAD], "01234567", 8);
	if (b >= B_TIMER) {
		bool late = (b - B_TIMER) % 2;
		return r->error == (late ? ECANCELED : 0);
	}
	if (b >= B_POST || b >= B_CLOSE)
		return r->error == 0;
	/* Reads: a byte, the end of the stream (the peer was closed), or
	 * cancelled by px_cancel, px_close or px_destroy. */
	return (r->error == 0 && r->bytes <= 1) || r->error == ECANCELED;
}

static bool big_once(long n, int nloops, const px_config *cfg)
{
	memset(brecs, 0, sizeof(brecs));
	memset(bclosed, 0, sizeof(bclosed));
	for (int b = 0; b < B_N; b++)
		brecs[b].start_rc = 1;
	atomic_store(&ncalls, 0);
	int fd00 = count_fds();
	for (int i = 0; i < NPAIRS; i++)
		xsocketpair(SOCK_STREAM, bpair[i]);
	char path[] = "/tmp/px_oom_XXXXXX";
	bfile = mkostemp(path, O_CLOEXEC);
	assert_true(bfile >= 0);
	unlink(path);
	for (int i = 0; i < NFREADS; i++)
		assert_int_equal(pwrite(bfile, "01234567", 8, 8 * i), 8);
	memset(bfbuf, 0, sizeof(bfbuf));
	long live0 = atomic_load(&live);
	char err[256] = "";
	px_proactor *px = NULL;

	alarm(10);
	arm(n);
	int rc = px_create_config(&px, cfg, err, sizeof(err));
	if (rc < 0) {
		disarm();
		if (rc != -ENOMEM)
			fail_msg("N=%ld: px_create_config: %d (%s): %s", n, rc,
				 px_strerror(rc), err);
		if (atomic_load(&live) != live0)
			fail_msg("N=%ld: failed px_create_config left %ld "
				 "blocks allocated", n,
				 atomic_load(&live) - live0);
		goto close_all;
	}
	pthread_t th[2];
	atomic_store(&loops_stop, false);
	atomic_store(&loops_err, 0);
	for (int i = 0; i < nloops; i++)
		assert_int_equal(pthread_create(&th[i], NULL, loop_main, px),
				 0);

	for (int i = 0; i < NPAIRS; i++)
		for (int e = 0; e < 2; e++) {
			rec *r = &brecs[(e ? B_READ1 : B_READ0) + i];
			r->start_rc = px_read_stream(px, bpair[i][e],
						     bbuf[i][e],
						     sizeof(bbuf[i][e]), cb, r);
		}
	for (int i = 0; i < NPOSTS; i++)
		brecs[B_POST + i].start_rc =
			px_post(px, cb, &brecs[B_POST + i]);
	for (int i = 0; i < NFREADS; i++)
		brecs[B_FREAD + i].start_rc =
			px_read_file(px, bfile, bfbuf[i], 8, 8 * i, cb,
				     &brecs[B_FREAD + i]);
	for (int i = 0; i < NTIMERS; i++) {
		uint64_t ns = i % 2 ? 3600ull * 1000000000 : 1000000;
		int64_t id = px_timer_start(px, ns, cb, &brecs[B_TIMER + i]);
		brecs[B_TIMER + i].start_rc = id > 0 ? 0 : (int)id;
	}
	for (int i = 0; bfeed_all && i < NPAIRS; i++) {
		assert_int_equal(write(bpair[i][0], "b", 1), 1);
		assert_int_equal(write(bpair[i][1], "b", 1), 1);
	}
	for (int i = 0; i < NPAIRS; i++) {
		switch (big_ends_early(i)) {
		case 0:
			if (!bfeed_all)
				assert_int_equal(write(bpair[i][1], "b", 1), 1);
			break;
		case 1:
			assert_true(px_cancel(px, bpair[i][0]) >= 0);
			break;
		case 2:
			rc = px_close(px, bpair[i][1], cb, &brecs[B_CLOSE + i]);
			brecs[B_CLOSE + i].start_rc = rc;
			if (rc == 0)
				bclosed[i] = true;
			break;
		}
	}

	uint64_t deadline = now_ms() + 3000;
	int b = 0;
	while (b < B_N) {
		if (!big_early(b) || atomic_load(&brecs[b].calls)) {
			b++;
			continue;
		}
		if (now_ms() > deadline) {
			disarm();
			atomic_store(&loops_stop, true);
			fail_msg("N=%ld: slot %d (started %d) did not call "
				 "back within 3 s", n, b, brecs[b].start_rc);
		}
		if (nloops) {
			struct timespec ts = { 0, 500000 };
			nanosleep(&ts, NULL);
			continue;
		}
		int hr = px_handle_events(px, 10);
		if (hr < 0) {
			disarm();
			fail_msg("N=%ld: px_handle_events: %d (%s)", n, hr,
				 px_strerror(hr));
		}
	}
	atomic_store(&loops_stop, true);
	if (nloops)
		px_stop(px);
	for (int i = 0; i < nloops; i++)
		pthread_join(th[i], NULL);
	int lerr = atomic_load(&loops_err);
	if (lerr) {
		disarm();
		fail_msg("N=%ld: a loop thread's px_handle_events: %d (%s)", n,
			 lerr, px_strerror(lerr));
	}
	rc = px_destroy(px);
	disarm();
	if (rc != 0)
		fail_msg("N=%ld: px_destroy: %d (%s)", n, rc, px_strerror(rc));
	int want = 0;
	for (b = 0; b < B_N; b++) {
		rec *r = &brecs[b];
		int k = atomic_load(&r->calls);
		if (r->start_rc == 1)
			continue;
		if (r->start_rc < 0) {
			if (r->start_rc != -ENOMEM &&
			    r->start_rc != -EOPNOTSUPP)
				fail_msg("N=%ld: slot %d: start returned %d "
					 "(%s)", n, b, r->start_rc,
					 px_strerror(r->start_rc));
			if (k)
				fail_msg("N=%ld: slot %d: start failed, %d "
					 "callbacks", n, b, k);
			continue;
		}
		want++;
		if (k != 1)
			fail_msg("N=%ld: slot %d: started, %d callbacks", n, b,
				 k);
		if (!big_error_ok(b, r))
			fail_msg("N=%ld: slot %d: error %d (%s), %zu bytes", n,
				 b, r->error, px_strerror(r->error), r->bytes);
	}
	if (atomic_load(&ncalls) != want)
		fail_msg("N=%ld: %d callbacks for %d starts", n,
			 atomic_load(&ncalls), want);
	if (atomic_load(&live) != live0)
		fail_msg("N=%ld: after px_destroy %ld blocks are still "
			 "allocated", n, atomic_load(&live) - live0);

close_all:
	alarm(0);
	for (int i = 0; i < NPAIRS; i++) {
		close(bpair[i][0]);
		if (!bclosed[i])
			close(bpair[i][1]);
	}
	close(bfile);
	int fds = count_fds();
	if (fds != fd00)
		fail_msg("N=%ld: %d descriptors open after the run, %d before",
			 n, fds, fd00);
	return atomic_load(&failed) > 0;
}

static void big_all(int nloops, unsigned max_aio)
{
	px_config cfg = h_cfg;
	bfeed_all = max_aio != 0;
	if (max_aio) {
		cfg.primary.max_aio = max_aio;
		if (cfg.secondary.processor != PX_PROCESSOR_NONE)
			cfg.secondary.max_aio = max_aio;
	}
	uint64_t t0 = now_ms();
	/* The run without a failure, noting the call sites. */
	assert_false(big_once(0, nloops, &cfg));
	long total = atomic_load(&calls);
	if (total > MAX_SITES)
		total = MAX_SITES;
	static void *seen[MAX_SITES];
	static int seen_n[MAX_SITES];
	static long pick[MAX_SITES];
	int nseen = 0, npick = 0;
	for (long i = 0; i < total; i++) {
		int k = 0;
		while (k < nseen && seen[k] != sites[i])
			k++;
		if (k == nseen) {
			seen[nseen] = sites[i];
			seen_n[nseen++] = 0;
		}
		bool last = true;
		for (long j = i + 1; j < total && last; j++)
			last = sites[j] != sites[i];
		if (++seen_n[k] <= 2 || last)
			pick[npick++] = i + 1;
	}
	for (int i = 0; trace && i < nseen; i++) {
		fprintf(stderr, "oom: site %d, %d calls: ", i, seen_n[i]);
		backtrace_symbols_fd(&seen[i], 1, 2);
	}
	for (int i = 0; i < npick; i++)
		big_once(pick[i], nloops, &cfg);
	atomic_store(&sticky, true);
	for (int i = 0; i < npick; i++)
		big_once(pick[i], nloops, &cfg);
	atomic_store(&sticky, false);
	printf("oom: %s, %d loop thread(s), max_aio %u: %ld allocations "
	       "from %d call sites, %d of them failed in turn, %d "
	       "completions with ENOMEM, %llu ms\n",
	       h_engine_text, nloops ? nloops : 1, max_aio, total, nseen,
	       npick, atomic_exchange(&enomem_calls, 0),
	       (unsigned long long)(now_ms() - t0));
}

static void oom_many(void **state)
{
	(void)state;
	big_all(0, 0);
}

static void oom_many_max_aio_8(void **state)
{
	(void)state;
	big_all(2, 8);
}

static void oom_one_loop(void **state)
{
	(void)state;
	run_all(0, false);
}

static void oom_stays(void **state)
{
	(void)state;
	run_all(0, true);
}

static void oom_two_loop_threads(void **state)
{
	(void)state;
	run_all(2, false);
}

static void oom_stays_two_loop_threads(void **state)
{
	(void)state;
	run_all(2, true);
}

/*
 * The processor's idle check (proactor/processor.c) finds descriptors
 * closed with close(2) under pending operations, which some waits (epoll,
 * io_uring, Linux AIO) never report.  It must still do so while every
 * allocation fails: the read's only way to complete must not depend on
 * memory.  (poll and select report the closed descriptor themselves.)
 */
static void oom_idle_check(void **state)
{
	(void)state;
	static rec r;
	static char buf[8];
	int sv[2];
	px_proactor *px;
	char err[256];

	memset(&r, 0, sizeof(r));
	xsocketpair(SOCK_STREAM, sv);
	assert_int_equal(px_create_config(&px, &h_cfg, err, sizeof(err)), 0);
	r.start_rc = px_read_stream(px, sv[0], buf, sizeof(buf), cb, &r);
	assert_int_equal(r.start_rc, 0);
	px_handle_events(px, 0);
	close(sv[0]);
	alarm(10);
	atomic_store(&sticky, true);
	arm(1);
	uint64_t t0 = now_ms();
	while (!atomic_load(&r.calls) && now_ms() - t0 < 5000)
		px_handle_events(px, 50);
	uint64_t took = now_ms() - t0;
	disarm();
	atomic_store(&sticky, false);
	long f = atomic_load(&failed);
	assert_int_equal(px_destroy(px), 0);
	alarm(0);
	close(sv[1]);
	printf("oom: idle check: %ld allocation(s) failed, the read ended with "
	       "%d after %llu ms\n", f, r.error, (unsigned long long)took);
	if (atomic_load(&r.calls) != 1)
		fail_msg("read: %d callbacks", atomic_load(&r.calls));
	if (took >= 5000)
		fail_msg("the read on the closed descriptor did not end within "
			 "5 s while allocations failed (px_destroy ended it "
			 "with %d)", r.error);
	if (r.error != EBADF)
		fail_msg("read: error %d (%s), not EBADF", r.error,
			 px_strerror(r.error));
}

/*
 * POSIX AIO's aiocb wait builds the leader's aio_suspend list in prepare
 * and grows it there.  When it cannot grow, the wait must neither spin
 * (it once returned at once, wait after wait, for as long as memory was
 * short) nor use the old list, whose requests may have been reaped: 70
 * reads pending (more than the first list holds), every allocation
 * failing, a 100 ms px_handle_events takes a handful of leader turns, and
 * each read then completes once with its byte.  The reads are file reads
 * of quiet sockets, which stay in glibc: the engine's posix processor gets
 * sockets=aio for them (a pipe, which has no offsets either, it refuses
 * with ESPIPE whatever the key says: fixed problem 35).
 */
#define AIOCB_READS 70

static void oom_aiocb_list(void **state)
{
	(void)state;
	static rec r[AIOCB_READS];
	static char buf[AIOCB_READS][4];
	static int pf[AIOCB_READS][2];
	struct px_stats st0, st1;
	px_proactor *px;
	char err[256];

	if (!strstr(h_engine_text, "wait=aiocb"))
		skip();
	memset(r, 0, sizeof(r));
	/* The aiocb wait is the posix processor's, the first one named. */
	char text[512];
	const char *rest = strchr(h_engine_text, ';');
	int first = rest ? (int)(rest - h_engine_text) : (int)strlen(h_engine_text);
	snprintf(text, sizeof(text), "%.*s sockets=aio %s", first, h_engine_text,
		 rest ? rest : "");
	if (px_create(&px, text, err, sizeof(err)) != 0)
		fail_msg("px_create(\"%s\"): %s", text, err);
	for (int i = 0; i < AIOCB_READS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
					    pf[i]), 0);
		r[i].start_rc = px_read_file(px, pf[i][0], buf[i], sizeof(buf[i]),
					     0, cb, &r[i]);
		assert_int_equal(r[i].start_rc, 0);
	}
	alarm(10);
	atomic_store(&sticky, true);
	arm(1);
	assert_int_equal(px_stats(px, &st0), 0);
	px_handle_events(px, 100);
	assert_int_equal(px_stats(px, &st1), 0);
	for (int i = 0; i < AIOCB_READS; i++)
		assert_int_equal(write(pf[i][1], "x", 1), 1);
	uint64_t t0 = now_ms();
	int ndone = 0;
	while (ndone < AIOCB_READS && now_ms() - t0 < 2000) {
		px_handle_events(px, 20);
		ndone = 0;
		for (int i = 0; i < AIOCB_READS; i++)
			ndone += atomic_load(&r[i].calls) > 0;
	}
	disarm();
	atomic_store(&sticky, false);
	long f = atomic_load(&failed);
	assert_int_equal(px_destroy(px), 0);
	alarm(0);
	for (int i = 0; i < AIOCB_READS; i++) {
		close(pf[i][0]);
		close(pf[i][1]);
	}
	unsigned long long turns = st1.leader_turns - st0.leader_turns;
	printf("oom: aiocb list: %ld allocation(s) failed, %llu leader turns "
	       "in 100 ms, %d of %d reads done\n", f, turns, ndone, AIOCB_READS);
	if (turns > 40)
		fail_msg("%llu leader turns in a 100 ms px_handle_events while "
			 "the aiocb list could not grow: the wait spins", turns);
	for (int i = 0; i < AIOCB_READS; i++) {
		if (atomic_load(&r[i].calls) != 1)
			fail_msg("read %d: %d callbacks", i,
				 atomic_load(&r[i].calls));
		if (r[i].error || r[i].bytes != 1)
			fail_msg("read %d: error %d, %zu bytes", i, r[i].error,
				 r[i].bytes);
	}
}

/* After a failed assertion: the wrappers must not go on failing. */
static int disarm_teardown(void **state)
{
	(void)state;
	disarm();
	atomic_store(&sticky, false);
	return 0;
}

int main(int argc, char **argv)
{
	harness_engine_init(argc, argv, "oom");
	trace = getenv("OOM_TRACE") != NULL;
	if (argc > 2 && argv[2][0])
		cmocka_set_test_filter(argv[2]);
#define T(t) cmocka_unit_test_teardown(t, disarm_teardown)
	const struct CMUnitTest tests[] = {
		T(oom_one_loop),
		T(oom_two_loop_threads),
		T(oom_stays),
		T(oom_stays_two_loop_threads),
		T(oom_many),
		T(oom_many_max_aio_8),
		T(oom_idle_check),
		T(oom_aiocb_list),
	};
	return cmocka_run_group_tests_name("oom", tests, NULL, NULL) ? 1 : 0;
}
