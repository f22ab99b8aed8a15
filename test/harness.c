/*
 * harness.c - shared helpers of the per-engine test programs.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *h_engine_text;
px_config h_cfg;

static atomic_int h_seq;
/* Set while the teardown destroys the proactor: a hang there usually means
 * the test was left through a crash or failed assertion while the library
 * held its mutex. */
static volatile sig_atomic_t h_in_teardown;

/* ------------------------------------------------------------------ */

uint64_t h_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t h_now_ms(void) { return h_now_ns() / 1000000u; }

uint64_t h_deadline(int ms) { return h_now_ms() + (uint64_t)ms; }

bool h_wait_at_least(atomic_int *v, int want, int ms)
{
	uint64_t dl = h_deadline(ms);
	while (atomic_load(v) < want) {
		if (h_now_ms() > dl)
			return false;
		struct timespec ts = {0, 100000};
		nanosleep(&ts, NULL);
	}
	return true;
}

void h_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void h_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

/* ------------------------------------------------------------------ */

static void h_watchdog(int sig)
{
	(void)sig;
	static const char msg[] =
		"\nWATCHDOG: the running test exceeded its time limit "
		"(a lost completion or a hang); see the last [ RUN ] line\n";
	static const char msg_td[] =
		"\nWATCHDOG: px_destroy in the teardown hung: the test was "
		"probably left (crash or failed assertion) while the proactor "
		"was locked; see the last [ RUN ] line\n";
	ssize_t rc = h_in_teardown
			     ? write(STDOUT_FILENO, msg_td, sizeof(msg_td) - 1)
			     : write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)rc;
	_exit(1);
}

/* The descriptors this process holds from 3 up, one "N target" line
 * each: what a program run by exec(2) inherited.  A test execs its own
 * program in this mode (engine_descriptors_close_on_exec_after_exec). */
static void h_list_fds(void)
{
	struct rlimit rl;
	int top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
			  ? (int)rl.rlim_cur : 65536;
	for (int i = 3; i < top; i++) {
		if (fcntl(i, F_GETFD) < 0)
			continue;
		char path[64], target[256];
		snprintf(path, sizeof path, "/proc/self/fd/%d", i);
		ssize_t n = readlink(path, target, sizeof target - 1);
		target[n > 0 ? n : 0] = '\0';
		printf("%d %s\n", i, target);
	}
	fflush(stdout);
	_exit(0);
}

void harness_engine_init(int argc, char **argv, const char *prog)
{
	if (argc == 2 && !strcmp(argv[1], H_LIST_FDS))
		h_list_fds();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s 'ENGINE CONFIG TEXT' [...]\n", prog);
		exit(1);
	}
	h_engine_text = argv[1];
	char err[512] = "";
	int rc = px_config_parse(&h_cfg, h_engine_text, err, sizeof err);
	if (rc == -ENOSYS) {
		printf("%s: engine '%s' is not built in: %s: skipped\n", prog,
		       h_engine_text, err);
		exit(77);
	}
	if (rc != 0) {
		fprintf(stderr, "%s: config '%s' does not parse: %d %s: %s\n",
			prog, h_engine_text, rc, px_strerror(rc), err);
		exit(1);
	}
	h_cfg.flags |= PX_CF_NO_ENV;
#if PX_TEST_TSAN
	/* glibc starts its AIO helper threads with its own internal
	 * pthread_create, which ThreadSanitizer never sees; a helper that
	 * starts another helper, or sets up a SIGEV_THREAD notification,
	 * mallocs in a thread TSan does not know and crashes its allocator
	 * (seen in handle_fildes_io), before any of our code runs. */
	if (!strcmp(h_cfg.primary.provider, "posix") ||
	    !strcmp(h_cfg.secondary.provider, "posix")) {
		printf("%s: engine '%s': POSIX AIO cannot run under "
		       "ThreadSanitizer (glibc's AIO helper threads are unknown "
		       "to it and crash its allocator): skipped\n",
		       prog, h_engine_text);
		exit(77);
	}
#endif

	px_proactor *px = NULL;
	err[0] = '\0';
	rc = px_create_config(&px, &h_cfg, err, sizeof err);
	if (rc == -ENOSYS || rc == -EPERM) {
		printf("%s: engine '%s' is not available here (%s: %s): "
		       "skipped\n",
		       prog, h_engine_text, px_strerror(rc), err);
		exit(77);
	}
	if (rc != 0) {
		fprintf(stderr, "%s: px_create_config('%s') failed: %d %s: %s\n",
			prog, h_engine_text, rc, px_strerror(rc), err);
		exit(1);
	}
	printf("%s: engine '%s' runs as '%s'\n", prog, h_engine_text,
	       px_engine_name(px));
	rc = px_destroy(px);
	if (rc != 0) {
		fprintf(stderr, "%s: px_destroy of an idle proactor: %d %s\n",
			prog, rc, px_strerror(rc));
		exit(1);
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = h_watchdog;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	/* A peer that closes early must give EPIPE, not kill the program. */
	signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------------ */

static atomic_int g_bad;
static char g_bad_msg[512];

void h_bad(const char *fmt, ...)
{
	if (atomic_fetch_add(&g_bad, 1) != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_bad_msg, sizeof g_bad_msg, fmt, ap);
	va_end(ap);
}

void h_assert_no_bad(const char *where)
{
	int n = atomic_load(&g_bad);
	if (n)
		fail_msg("%s: %d problem(s) seen in callbacks or helper threads; "
			 "the first: %s", where, n, g_bad_msg);
}

int h_bad_count(void) { return atomic_load(&g_bad); }
const char *h_bad_first(void) { return g_bad_msg; }

int h_setup(void **state)
{
	atomic_store(&g_bad, 0);
	g_bad_msg[0] = '\0';
	h_fx *f = calloc(1, sizeof *f);
	if (!f)
		return -1;
	char err[512] = "";
	int rc = px_create_config(&f->px, &h_cfg, err, sizeof err);
	if (rc != 0) {
		print_error("px_create_config('%s'): %d %s: %s\n",
			    h_engine_text, rc, px_strerror(rc), err);
		free(f);
		return -1;
	}
	*state = f;
	alarm(H_WATCHDOG_S);
	return 0;
}

int h_setup_max_aio(void **state, unsigned max_aio, int (*setup)(void **))
{
	px_config save = h_cfg;
	h_cfg.primary.max_aio = max_aio;
	if (h_cfg.secondary.processor != PX_PROCESSOR_NONE)
		h_cfg.secondary.max_aio = max_aio;
	int rc = setup(state);
	h_cfg = save;
	return rc;
}

void h_destroy_now(h_fx *f)
{
	alarm(H_TEARDOWN_S + 5);
	int rc = px_destroy(f->px);
	alarm(H_WATCHDOG_S);
	f->px = NULL;
	assert_int_equal(rc, 0);
}

int h_teardown(void **state)
{
	h_fx *f = *state;
	int ret = 0;
	if (!f)
		return 0;
	if (f->px) {
		h_in_teardown = 1;
		alarm(H_TEARDOWN_S);
		int rc = px_destroy(f->px);
		h_in_teardown = 0;
		if (rc != 0) {
			print_error("teardown: px_destroy: %d %s\n", rc,
				    px_strerror(rc));
			ret = -1;
		}
		f->px = NULL;
	}
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] >= 0)
			close(f->fds[i]);
	for (int i = 0; i < f->nmem; i++)
		free(f->mem[i]);
	free(f);
	*state = NULL;
	alarm(0);
	return ret;
}

void *h_alloc(h_fx *f, size_t n)
{
	assert_true(f->nmem < H_MAX_TRACKED);
	void *p = calloc(1, n ? n : 1);
	assert_non_null(p);
	f->mem[f->nmem++] = p;
	return p;
}

int h_track(h_fx *f, int fd)
{
	if (fd < 0)
		fail_msg("creating a descriptor failed: %s", strerror(errno));
	assert_true(f->nfds < H_MAX_TRACKED);
	f->fds[f->nfds++] = fd;
	return fd;
}

void h_close(h_fx *f, int fd)
{
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] == fd) {
			close(fd);
			f->fds[i] = -1;
			return;
		}
	fail_msg("h_close: fd %d is not tracked", fd);
}

void h_pump(h_fx *f, uint64_t deadline, const char *waiting_for)
{
	if (h_now_ms() > deadline)
		fail_msg("timed out waiting for %s (engine '%s'): a completion "
			 "was lost or is late",
			 waiting_for, h_engine_text);
	int rc = px_handle_events(f->px, 10);
	if (rc < 0)
		fail_msg("px_handle_events returned %d (%s) while waiting for %s",
			 rc, px_strerror(rc), waiting_for);
}

void h_settle(h_fx *f, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;
	while (h_now_ms() < end) {
		int rc = px_handle_events(f->px, 5);
		if (rc < 0)
			fail_msg("px_handle_events returned %d (%s)", rc,
				 px_strerror(rc));
	}
}

void h_assert_usable(h_fx *f)
{
	h_rec *r = h_rec_new(f);
	int rc = px_post(f->px, h_rec_cb, r);
	assert_int_equal(rc, 0);
	h_wait_rec(f, r, 5000, "a post after bad input");
	assert_int_equal(r->c.op, PX_OP_POST);
	assert_int_equal(r->c.error, 0);
	assert_int_equal(atomic_load(&r->calls), 1);
}

/* ------------------------------------------------------------------ */

static struct {
	px_proactor *px;
	pthread_t th[H_MAX_LOOPS];
	int n;
	bool shutdown_ok;
	int wait_ms;
	atomic_int stop;
	atomic_int exited;         /* threads that have left h_loop_main */
	atomic_int error;          /* a px_handle_events error, or 0 */
} h_loops;

static void *h_loop_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&h_loops.stop)) {
		int rc = px_handle_events(h_loops.px, h_loops.wait_ms);
		if (rc < 0 && !(rc == -ESHUTDOWN && h_loops.shutdown_ok)) {
			atomic_store(&h_loops.error, rc);
			break;
		}
	}
	atomic_fetch_add(&h_loops.exited, 1);
	return NULL;
}

void h_loops_start(h_fx *f, int n, bool shutdown_ok)
{
	h_loops_start_ms(f, n, shutdown_ok, 10);
}

void h_loops_start_ms(h_fx *f, int n, bool shutdown_ok, int wait_ms)
{
	assert_true(n <= H_MAX_LOOPS && h_loops.n == 0);
	h_loops.px = f->px;
	h_loops.shutdown_ok = shutdown_ok;
	h_loops.wait_ms = wait_ms;
	atomic_store(&h_loops.stop, 0);
	atomic_store(&h_loops.exited, 0);
	atomic_store(&h_loops.error, 0);
	for (int i = 0; i < n; i++) {
		if (pthread_create(&h_loops.th[i], NULL, h_loop_main, NULL))
			fail_msg("pthread_create failed");
		h_loops.n = i + 1;
	}
}

void h_loops_join(void)
{
	atomic_store(&h_loops.stop, 1);
	for (int i = 0; i < h_loops.n; i++)
		pthread_join(h_loops.th[i], NULL);
	h_loops.n = 0;
}

void h_loops_stop_waking(h_fx *f, px_callback *wake)
{
	atomic_store(&h_loops.stop, 1);
	/* A wake-up posted before the flag was set could let a thread go
	 * back into a long wait; one posted after it cannot.  One thread may
	 * run several, so post until each has left (bounded: a thread stuck
	 * elsewhere is the join's to report). */
	uint64_t dl = h_deadline(10000);
	while (atomic_load(&h_loops.exited) < h_loops.n && h_now_ms() < dl) {
		int rc = px_post(f->px, wake, NULL);
		if (rc != 0) {
			h_loops_join();
			fail_msg("px_post of a wake-up for the loop threads "
				 "returned %d (%s)", rc, px_strerror(rc));
		}
		h_sleep_ms(2);
	}
	h_loops_stop();
}

void h_loops_stop(void)
{
	h_loops_join();
	int err = atomic_load(&h_loops.error);
	if (err)
		fail_msg("px_handle_events returned %d (%s) in a loop thread",
			 err, px_strerror(err));
}

/* ------------------------------------------------------------------ */

h_rec *h_rec_new(h_fx *f) { return h_alloc(f, sizeof(h_rec)); }

void h_rec_cb(const px_completion *c)
{
	h_rec *r = c->user;
	if (atomic_fetch_add(&r->calls, 1) == 0) {
		r->c = *c;
		r->seq = atomic_fetch_add(&h_seq, 1);
		r->at_ns = h_now_ns();
		r->thread = pthread_self();
		atomic_store_explicit(&r->done, 1, memory_order_release);
	}
}

bool h_rec_done(h_rec *r)
{
	return atomic_load_explicit(&r->done, memory_order_acquire) != 0;
}

void h_wait_rec(h_fx *f, h_rec *r, int ms, const char *what)
{
	uint64_t dl = h_deadline(ms);
	while (!h_rec_done(r))
		h_pump(f, dl, what);
}

/* ------------------------------------------------------------------ */

void h_socketpair(h_fx *f, int sv[2])
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		fail_msg("socketpair: %s", strerror(errno));
	h_track(f, sv[0]);
	h_track(f, sv[1]);
}

void h_pipe(h_fx *f, int p[2])
{
	if (pipe2(p, O_CLOEXEC) < 0)
		fail_msg("pipe2: %s", strerror(errno));
	h_track(f, p[0]);
	h_track(f, p[1]);
}

int h_bound_socket(h_fx *f, int type, struct sockaddr_in *addr)
{
	int fd = h_track(f, socket(AF_INET, type | SOCK_CLOEXEC, 0));
	int one = 1;
	/* Not for UDP: there it lets port 0 give a new socket a port that
	 * another SO_REUSEADDR socket holds, and one of them then gets the
	 * other's datagrams. */
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
		fail_msg("bind 127.0.0.1:0: %s", strerror(errno));
	socklen_t len = sizeof a;
	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		fail_msg("getsockname: %s", strerror(errno));
	if (addr)
		*addr = a;
	return fd;
}

int h_port_of(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	return ntohs(a.sin_port);
}

h_rec *h_start_pending_read(h_fx *f, int sv[2], size_t len, char **buf)
{
	h_socketpair(f, sv);
	*buf = h_alloc(f, len);
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, sv[1], *buf, len, h_rec_cb, r), 0);
	return r;
}

void h_assert_reads_back(h_fx *f, int wfd, int rfd, char *buf, size_t len,
			 const char *text, const char *what)
{
	size_t n = strlen(text);

	assert_int_equal(write(wfd, text, n), (ssize_t)n);
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, rfd, buf, len, h_rec_cb, r), 0);
	h_wait_rec(f, r, 5000, what);
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, n);
	assert_memory_equal(buf, text, n);
}

/* ------------------------------------------------------------------ */

static uint64_t h_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void h_pattern(uint8_t *buf, size_t len, uint32_t seed, uint64_t pos)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t p = pos + i;
		uint64_t w = h_mix(((uint64_t)seed << 40) ^ (p >> 3));
		buf[i] = (uint8_t)(w >> ((p & 7) * 8));
	}
}

int h_count_dir(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

const px_processor_config *h_proc_for(h_fx *f, px_op op, px_config *cfg)
{
	assert_int_equal(px_config_parse(cfg, px_engine_name(f->px), NULL, 0), 0);
	const px_processor_config *pc[2] = { &cfg->primary, &cfg->secondary };
	for (int i = 0; i < 2; i++) {
		if (pc[i]->processor == PX_PROCESSOR_NONE)
			continue;
		if (pc[i]->ops && !(pc[i]->ops & PX_OP_BIT(op)))
			continue;
		return pc[i];
	}
	fail_msg("no processor of %s does op %d", px_engine_name(f->px), op);
	return NULL;
}

bool h_vec_supported(h_fx *f, px_op op)
{
	px_config cfg;
	return strcmp(h_proc_for(f, op, &cfg)->provider, "posix") != 0;
}
