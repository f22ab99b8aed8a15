/*
 * load.c - many concurrent loopback sessions through one proactor.
 *
 *   load 'ENGINE CONFIG TEXT' [sessions [seconds]]   (default 2000, 2 s)
 *
 * N TCP loopback connections (127.0.0.1).  The servers run in this
 * process, the clients in a child process, each with its own proactor on
 * the same engine and two event-loop threads (so each process holds N
 * descriptors).  Phase 1 (server): one read pending on every connection,
 * no data: the growth of the resident set over that, divided by N, is the
 * memory one pending operation costs (library records and descriptor
 * table; the buffers existed before).  The reads are then cancelled.
 * Phase 2: checksummed echo for the given time: each client writes blocks
 * of a pattern seeded per session with px_write_stream_all and reads the
 * echo back, checking every byte; each server reads and echoes with
 * px_write_stream_all.  Then the clients drain their echoes and shut
 * their write side; each server sees end of stream and shuts its own,
 * which ends the client's last read, so every chain ends by itself.  Both sides check completions == starts (and that no operation
 * was reported twice), and the bytes the clients wrote must equal those
 * the servers echoed.  Prints peak RSS of both and the memory per pending
 * operation.
 *
 * RLIMIT_NOFILE is raised to fit N + 64 descriptors; when it cannot be,
 * or the engine's max_aio is below what the load keeps in flight (reads
 * waiting for data would then hold every slot: see max_aio in
 * proactor.h), the program says so and exits 77.  Exit 0 pass, 1 fail.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"  /* h_now_ns, h_sleep_ms */

enum { BLOCK = 1024, NTHREADS = 2, PER_SESSION = 3 };

typedef struct sess {
	int cfd, sfd;
	uint32_t seed;
	uint8_t wbuf[BLOCK], rbuf[BLOCK], sbuf[BLOCK];
	_Atomic uint64_t woff, roff;  /* client: written, read back */
	atomic_int block_wait;        /* write callback + echo of a block */
	atomic_int cw_busy, cr_busy, s_busy;
	atomic_int error, mismatch;
	_Atomic uint64_t echoed;      /* server: bytes echoed */
	atomic_int ended;             /* end of stream seen (either side) */
} sess;

static px_proactor *g_px;
static sess *g_s;
static int g_n;
static atomic_int g_stop, g_loop_stop, g_loop_error;
static atomic_long g_starts, g_done;
static atomic_int g_ended;
static const char *g_side = "load";

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, res = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%ld %ld", &pages, &res) != 2)
		res = 0;
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void watchdog(int sig)
{
	(void)sig;
	static const char m[] = "load: WATCHDOG: time limit exceeded (a lost "
				"completion or a hang)\n";
	ssize_t rc = write(1, m, sizeof m - 1);
	(void)rc;
	_exit(1);
}

/* The byte at stream offset pos of a session's pattern. */
static uint8_t pat(uint32_t seed, uint64_t pos)
{
	uint64_t x = ((uint64_t)seed << 32) ^ (pos >> 3);
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (uint8_t)(x >> ((pos & 7) * 8));
}

static void fail_sess(sess *s, int err)
{
	int zero = 0;
	atomic_compare_exchange_strong(&s->error, &zero, err ? err : EIO);
}

static bool counted(int rc)
{
	if (rc == 0)
		atomic_fetch_add(&g_starts, 1);
	return rc == 0;
}

static void client_write_cb(const px_completion *c);
static void client_read_cb(const px_completion *c);
static void server_read_cb(const px_completion *c);
static void server_write_cb(const px_completion *c);

static void client_write(sess *s)
{
	/* Busy before looking at the stop flag: the drain (which sets the
	 * flag, then looks at busy) sees one or the other. */
	atomic_store(&s->cw_busy, 1);
	if (atomic_load(&g_stop)) {
		atomic_store(&s->cw_busy, 0);
		return;
	}
	uint64_t off = atomic_load(&s->woff);
	for (size_t i = 0; i < BLOCK; i++)
		s->wbuf[i] = pat(s->seed, off + i);
	atomic_store(&s->block_wait, 2);
	int rc = px_write_stream_all(g_px, s->cfd, s->wbuf, BLOCK,
				     client_write_cb, s);
	if (!counted(rc)) {
		atomic_store(&s->cw_busy, 0);
		fail_sess(s, -rc);
	}
}

static void client_write_cb(const px_completion *c)
{
	sess *s = c->user;
	atomic_fetch_add(&g_done, 1);
	if (c->error || c->bytes != BLOCK)
		fail_sess(s, c->error);
	else
		atomic_fetch_add(&s->woff, BLOCK);
	/* Not busy only once woff says what was written (the drain). */
	if (!atomic_exchange(&s->cw_busy, 0))
		fail_sess(s, EALREADY);
	if (c->error || c->bytes != BLOCK)
		return;
	if (atomic_fetch_sub(&s->block_wait, 1) == 1)
		client_write(s);
}

static void client_read(sess *s)
{
	atomic_store(&s->cr_busy, 1);
	size_t want = BLOCK - (size_t)(atomic_load(&s->roff) % BLOCK);
	int rc = px_read_stream(g_px, s->cfd, s->rbuf, want, client_read_cb, s);
	if (!counted(rc)) {
		atomic_store(&s->cr_busy, 0);
		fail_sess(s, -rc);
	}
}

static void client_read_cb(const px_completion *c)
{
	sess *s = c->user;
	atomic_fetch_add(&g_done, 1);
	if (!atomic_exchange(&s->cr_busy, 0))
		fail_sess(s, EALREADY);
	if (c->error == 0 && c->bytes == 0) {
		atomic_store(&s->ended, 1);  /* the server shut its side */
		atomic_fetch_add(&g_ended, 1);
		return;
	}
	if (c->error) {
		fail_sess(s, c->error);
		return;
	}
	uint64_t off = atomic_load(&s->roff);
	const uint8_t *b = c->buf;
	for (size_t i = 0; i < c->bytes; i++)
		if (b[i] != pat(s->seed, off + i)) {
			atomic_store(&s->mismatch, 1);
			break;
		}
	off = atomic_fetch_add(&s->roff, c->bytes) + c->bytes;
	bool block_back = off % BLOCK == 0;
	client_read(s);
	if (block_back && atomic_fetch_sub(&s->block_wait, 1) == 1)
		client_write(s);
}

static void server_read(sess *s)
{
	atomic_store(&s->s_busy, 1);
	int rc = px_read_stream(g_px, s->sfd, s->sbuf, BLOCK, server_read_cb, s);
	if (!counted(rc)) {
		atomic_store(&s->s_busy, 0);
		fail_sess(s, -rc);
	}
}

static void server_read_cb(const px_completion *c)
{
	sess *s = c->user;
	atomic_fetch_add(&g_done, 1);
	if (!atomic_exchange(&s->s_busy, 0))
		fail_sess(s, EALREADY);
	if (c->error == ECANCELED)
		return;
	if (c->error == 0 && c->bytes == 0) {
		/* The client shut its side: shut ours, which ends the
		 * client's last read. */
		shutdown(s->sfd, SHUT_WR);
		atomic_store(&s->ended, 1);
		atomic_fetch_add(&g_ended, 1);
		return;
	}
	if (c->error) {
		fail_sess(s, c->error);
		return;
	}
	atomic_fetch_add(&s->echoed, c->bytes);
	atomic_store(&s->s_busy, 1);
	int rc = px_write_stream_all(g_px, s->sfd, s->sbuf, c->bytes,
				     server_write_cb, s);
	if (!counted(rc)) {
		atomic_store(&s->s_busy, 0);
		fail_sess(s, -rc);
	}
}

static void server_write_cb(const px_completion *c)
{
	sess *s = c->user;
	atomic_fetch_add(&g_done, 1);
	if (!atomic_exchange(&s->s_busy, 0))
		fail_sess(s, EALREADY);
	if (c->error) {
		fail_sess(s, c->error);
		return;
	}
	server_read(s);
}

/* Phase 1 reads: only counted. */
static void idle_cb(const px_completion *c)
{
	(void)c;
	atomic_fetch_add(&g_done, 1);
}

static void *loop_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_loop_stop)) {
		int rc = px_handle_events(g_px, 20);
		if (rc < 0) {
			atomic_store(&g_loop_error, rc);
			break;
		}
	}
	return NULL;
}

static bool wait_done(int ms)
{
	uint64_t dl = h_now_ns() + (uint64_t)ms * 1000000u;
	while (atomic_load(&g_done) < atomic_load(&g_starts)) {
		if (h_now_ns() > dl)
			return false;
		h_sleep_ms(2);
	}
	return true;
}

/* max_aio of the engine, from its canonical name (the primary's). */
static unsigned long engine_max_aio(const char *name)
{
	const char *p = strstr(name, "max_aio=");
	return p ? strtoul(p + 8, NULL, 10) : 0;
}

static int raise_nofile(rlim_t need)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (rl.rlim_cur >= need)
		return 0;
	if (rl.rlim_max < need) {
		rl.rlim_max = need;   /* needs CAP_SYS_RESOURCE */
		rl.rlim_cur = need;
	} else {
		rl.rlim_cur = need;
	}
	return setrlimit(RLIMIT_NOFILE, &rl) < 0 ? -errno : 0;
}

/* Parent: accept n connections on l. */
static int accept_all(int l)
{
	for (int i = 0; i < g_n; i++) {
		sess *s = &g_s[i];
		s->sfd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (s->sfd < 0) {
			fprintf(stderr, "load: accept %d: %s\n", i, strerror(errno));
			return -1;
		}
		int one = 1;
		setsockopt(s->sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return 0;
}

/* Child: connect n clients to a. */
static int connect_all(const struct sockaddr_in *a)
{
	for (int i = 0; i < g_n; i++) {
		sess *s = &g_s[i];
		s->cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s->cfd < 0 ||
		    connect(s->cfd, (const struct sockaddr *)a, sizeof *a) < 0) {
			fprintf(stderr, "load: connect %d: %s\n", i, strerror(errno));
			return -1;
		}
		int one = 1;
		setsockopt(s->cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return 0;
}

static int create_px(const char *text)
{
	px_config cfg;
	char err[512] = "";
	int rc = px_config_parse(&cfg, text, err, sizeof err);
	if (rc) {
		fprintf(stderr, "load: config '%s': %s\n", text, err);
		return rc;
	}
	cfg.flags |= PX_CF_NO_ENV;
	rc = px_create_config(&g_px, &cfg, err, sizeof err);
	if (rc)
		fprintf(stderr, "load: px_create_config('%s'): %s: %s\n", text,
			px_strerror(rc), err);
	return rc;
}

static pthread_t g_th[NTHREADS];

static int loops_start(void)
{
	for (int t = 0; t < NTHREADS; t++)
		if (pthread_create(&g_th[t], NULL, loop_main, NULL)) {
			perror("load: pthread_create");
			return -1;
		}
	return 0;
}

/* Stop the loop threads and destroy the proactor; check the counts. */
static int finish_px(void)
{
	int failures = 0;
	atomic_store(&g_loop_stop, 1);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(g_th[t], NULL);
	if (atomic_load(&g_loop_error)) {
		printf("%s: FAIL: px_handle_events: %s\n", g_side,
		       px_strerror(atomic_load(&g_loop_error)));
		failures++;
	}
	int rc = px_destroy(g_px);
	if (rc) {
		printf("%s: FAIL: px_destroy: %s\n", g_side, px_strerror(rc));
		failures++;
	}
	if (atomic_load(&g_starts) != atomic_load(&g_done)) {
		printf("%s: FAIL: %ld operations started, %ld completions\n",
		       g_side, atomic_load(&g_starts), atomic_load(&g_done));
		failures++;
	}
	return failures;
}

static int check_sessions(bool client)
{
	int failures = 0, idle = 0;
	for (int i = 0; i < g_n; i++) {
		sess *s = &g_s[i];
		int e = atomic_load(&s->error);
		if (e && failures < 20) {
			printf("%s: FAIL: session %d: error %d (%s)\n", g_side, i,
			       e, e == EALREADY ? "a second callback" : strerror(e));
			failures++;
		}
		if (!client)
			continue;
		if (atomic_load(&s->mismatch) && failures < 20) {
			printf("%s: FAIL: session %d: echoed bytes differ from "
			       "those sent\n", g_side, i);
			failures++;
		}
		if (atomic_load(&s->roff) != atomic_load(&s->woff) && failures < 20) {
			printf("%s: FAIL: session %d: %" PRIu64 " bytes written, "
			       "%" PRIu64 " read back\n", g_side, i,
			       (uint64_t)atomic_load(&s->woff),
			       (uint64_t)atomic_load(&s->roff));
			failures++;
		}
		if (atomic_load(&s->woff) == 0)
			idle++;
	}
	if (idle) {
		printf("%s: FAIL: %d sessions moved no data\n", g_side, idle);
		failures++;
	}
	return failures;
}

/*
 * The client process: connect, wait for the go byte, echo for the given
 * time, drain, cancel the reads left, check every session.  Writes the
 * number of bytes echoed to res_fd; exit status 0 or 1.
 */
static int client_main(const char *text, const struct sockaddr_in *a,
		       int ready_fd, int go_fd, double seconds)
{
	g_side = "load(client)";
	if (connect_all(a) < 0 || create_px(text) < 0)
		return 1;
	char b = 'r';
	if (write(ready_fd, &b, 1) != 1 || read(go_fd, &b, 1) != 1)
		return 1;
	if (loops_start() < 0)
		return 1;
	uint64_t t0 = h_now_ns();
	for (int i = 0; i < g_n; i++) {
		client_read(&g_s[i]);
		client_write(&g_s[i]);
	}
	uint64_t run_ns = (uint64_t)(seconds * 1e9);
	while (h_now_ns() - t0 < run_ns && !atomic_load(&g_loop_error))
		h_sleep_ms(10);
	atomic_store(&g_stop, 1);
	double elapsed = (double)(h_now_ns() - t0) / 1e9;
	int failures = 0;
	uint64_t dl = h_now_ns() + 30ull * 1000000000u;
	for (;;) {
		bool all = true;
		for (int i = 0; i < g_n && all; i++)
			if (atomic_load(&g_s[i].cw_busy) ||
			    atomic_load(&g_s[i].roff) != atomic_load(&g_s[i].woff) ||
			    atomic_load(&g_s[i].error))
				all = false;
		if (all || h_now_ns() > dl)
			break;
		h_sleep_ms(5);
	}
	/* Close down: shut the write side; the server shuts its own on end
	 * of stream, which ends each client's last read. */
	for (int i = 0; i < g_n; i++)
		shutdown(g_s[i].cfd, SHUT_WR);
	dl = h_now_ns() + 30ull * 1000000000u;
	while ((atomic_load(&g_ended) < g_n ||
		atomic_load(&g_done) < atomic_load(&g_starts)) &&
	       h_now_ns() < dl && !atomic_load(&g_loop_error))
		h_sleep_ms(5);
	if (atomic_load(&g_ended) != g_n) {
		printf("%s: FAIL: %d of %d clients saw the server's end of "
		       "stream\n", g_side, atomic_load(&g_ended), g_n);
		failures++;
		for (int i = 0; i < g_n; i++)
			px_cancel(g_px, g_s[i].cfd);
		wait_done(10000);
	}
	failures += finish_px();
	failures += check_sessions(true);
	uint64_t bytes = 0;
	for (int i = 0; i < g_n; i++) {
		bytes += atomic_load(&g_s[i].woff);
		close(g_s[i].cfd);
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("%s: %d sessions, %d threads, %.2f s: %.1f MiB echoed "
	       "(%.1f MiB/s, %.0f round trips/s), %ld operations, each "
	       "completed once; peak RSS %.1f MiB\n",
	       g_side, g_n, NTHREADS, elapsed, (double)bytes / (1 << 20),
	       (double)bytes / (1 << 20) / elapsed,
	       (double)bytes / BLOCK / elapsed, atomic_load(&g_starts),
	       (double)ru.ru_maxrss / 1024);
	if (write(ready_fd, &bytes, sizeof bytes) != sizeof bytes)
		failures++;
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: load 'ENGINE CONFIG' [sessions [seconds]]\n");
		return 1;
	}
	g_n = argc > 2 ? atoi(argv[2]) : 2000;
	double seconds = argc > 3 ? atof(argv[3]) : 2;
	if (g_n < 1 || g_n > 200000 || seconds <= 0 || seconds > 600) {
		fprintf(stderr, "load: bad sessions or seconds\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, watchdog);
	unsigned limit = (unsigned)seconds + 100 + (unsigned)(g_n / 500);
	alarm(limit);

	/* Server ends here, client ends in a child process: each holds N
	 * descriptors. */
	rlim_t need = (rlim_t)g_n + 64;
	int rc = raise_nofile(need);
	if (rc < 0) {
		printf("load: cannot raise RLIMIT_NOFILE to %llu for %d sessions "
		       "(%s): skipped\n",
		       (unsigned long long)need, g_n, strerror(-rc));
		return 77;
	}
	rc = create_px(argv[1]);
	if (rc == -ENOSYS || rc == -EPERM) {
		printf("load: engine '%s' not available here: skipped\n", argv[1]);
		return 77;
	}
	if (rc)
		return 1;
	const char *name = px_engine_name(g_px);
	printf("load: engine '%s' runs as '%s'\n", argv[1], name);
	unsigned long max_aio = engine_max_aio(name);
	px_destroy(g_px);
	if (max_aio && max_aio < (unsigned long)g_n * PER_SESSION) {
		printf("load: max_aio %lu is below the %d operations %d sessions "
		       "keep in flight (reads waiting for data would hold every "
		       "slot); give a bigger ring= or max_aio=: skipped\n",
		       max_aio, g_n * PER_SESSION, g_n);
		return 77;
	}

	g_s = calloc((size_t)g_n, sizeof *g_s);
	if (!g_s)
		return 1;
	for (int i = 0; i < g_n; i++)
		g_s[i].seed = 0x10ad0000u + (uint32_t)i;

	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a;
	socklen_t alen = sizeof a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) < 0 ||
	    listen(l, 4096) < 0) {
		perror("load: listener");
		return 1;
	}
	int up[2], go[2];
	if (pipe2(up, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
		perror("load: pipe");
		return 1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("load: fork");
		return 1;
	}
	if (pid == 0) {
		close(l);
		close(up[0]);
		close(go[1]);
		alarm(limit);
		_exit(client_main(argv[1], &a, up[1], go[0], seconds));
	}
	close(up[1]);
	close(go[0]);
	g_side = "load(server)";
	uint64_t t_setup = h_now_ns();
	char b;
	if (accept_all(l) < 0 || read(up[0], &b, 1) != 1) {
		kill(pid, SIGKILL);
		return 1;
	}
	close(l);
	printf("load: %d loopback connections in %.2f s\n", g_n,
	       (double)(h_now_ns() - t_setup) / 1e9);
	if (create_px(argv[1]) < 0 || loops_start() < 0) {
		kill(pid, SIGKILL);
		return 1;
	}

	/* Phase 1: N idle reads; what they cost. */
	static uint8_t idle_buf[16];
	int failures = 0;
	long rss0 = rss_kib();
	for (int i = 0; i < g_n; i++)
		if (!counted(px_read_stream(g_px, g_s[i].sfd, idle_buf, 16,
					    idle_cb, NULL))) {
			printf("load: FAIL: starting idle read %d\n", i);
			kill(pid, SIGKILL);
			return 1;
		}
	h_sleep_ms(200);
	long rss1 = rss_kib();
	long pending1 = atomic_load(&g_starts) - atomic_load(&g_done);
	double per_op = pending1 > 0 ? (double)(rss1 - rss0) * 1024.0 / (double)pending1 : 0;
	long cancelled = 0;
	for (int i = 0; i < g_n; i++)
		cancelled += px_cancel(g_px, g_s[i].sfd);
	if (!wait_done(20000) || cancelled != pending1) {
		printf("%s: FAIL: %ld idle reads pending, px_cancel reported "
		       "%ld, %ld completions of %ld starts\n", g_side,
		       pending1, cancelled, atomic_load(&g_done),
		       atomic_load(&g_starts));
		failures++;
	}

	/* Phase 2: echo until every client has shut its side. */
	for (int i = 0; i < g_n; i++)
		server_read(&g_s[i]);
	if (write(go[1], "g", 1) != 1) {
		kill(pid, SIGKILL);
		return 1;
	}
	uint64_t dl = h_now_ns() + (uint64_t)(seconds * 1e9) + 90ull * 1000000000u;
	while ((atomic_load(&g_ended) < g_n ||
		atomic_load(&g_done) < atomic_load(&g_starts)) &&
	       h_now_ns() < dl && !atomic_load(&g_loop_error))
		h_sleep_ms(10);
	if (atomic_load(&g_ended) != g_n) {
		printf("%s: FAIL: %d of %d sessions saw the client close\n",
		       g_side, atomic_load(&g_ended), g_n);
		failures++;
		for (int i = 0; i < g_n; i++)
			px_cancel(g_px, g_s[i].sfd);
		wait_done(10000);
	}
	failures += finish_px();
	failures += check_sessions(false);
	uint64_t echoed = 0, sent = 0;
	for (int i = 0; i < g_n; i++) {
		echoed += atomic_load(&g_s[i].echoed);
		close(g_s[i].sfd);
	}
	int st = 0;
	if (read(up[0], &sent, sizeof sent) != sizeof sent) {
		printf("%s: FAIL: no result from the client process\n", g_side);
		failures++;
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("%s: FAIL: the client process failed (status 0x%x)\n",
		       g_side, st);
		failures++;
	}
	if (echoed != sent) {
		printf("%s: FAIL: the clients wrote %" PRIu64 " bytes, the "
		       "servers echoed %" PRIu64 "\n", g_side, sent, echoed);
		failures++;
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("%s: %ld operations, each completed once; peak RSS %.1f MiB; "
	       "%ld idle pending reads cost %.0f bytes each (resident set "
	       "growth)\n",
	       g_side, atomic_load(&g_starts), (double)ru.ru_maxrss / 1024,
	       pending1, per_op);
	printf("load: %s\n", failures ? "FAIL" : "PASS");
	free(g_s);
	return failures ? 1 : 0;
}
