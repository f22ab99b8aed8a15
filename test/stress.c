/*
 * stress.c - exactly one completion and bytes in order, under load: every started
 * operation completes exactly once, and stream bytes arrive in order, never
 * lost or duplicated, with several threads in px_handle_events.
 *
 *   stress 'ENGINE CONFIG TEXT' [seconds]        (default 1.5 s)
 *
 * 64 sessions, each a client and an echo server joined by a socketpair or a
 * TCP loopback connection.  The client writes a pseudo-random byte stream
 * (seeded per session) and reads the echo back, checking every byte in
 * order.  Half the clients keep two px_write_stream_all calls in flight (so
 * the order of started writes matters); the others use px_write_stream and
 * write the rest of a short write again.  The server reads and echoes each
 * chunk with px_write_stream_all.  Four threads run the event loop.
 *
 * After the time is up, clients stop starting writes; the program waits
 * until every echo came back, cancels the two reads each session still has
 * pending, stops the threads and destroys the proactor, then checks the
 * counts.  Exit 0 pass, 1 fail, 77 engine unavailable.
 *
 * Beside the sessions, a few idle socketpairs keep a chain of reads with
 * short deadlines (px_start_op), each ending in ETIMEDOUT; and the main
 * thread samples px_stats every few milliseconds, checking at every sample
 * that started == completed + cancelled + timed_out + in_flight, in total
 * and per processor, and at the end that the counts match the program's
 * own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"  /* h_now_ns, h_sleep_ms */

enum { NSESS = 64, NTHREADS = 4, WSLOTS = 2 };

struct session;

typedef struct wslot {
	struct session *s;
	uint8_t *buf;
	size_t len;              /* block length */
	size_t done;             /* bytes of the block written so far */
	bool busy;
} wslot;

typedef struct session {
	int idx;
	int cfd, sfd;            /* client end, server end */
	uint32_t seed;
	bool write_all;          /* 2 x px_write_stream_all, else 1 x
				    px_write_stream with rewrite of the rest */
	bool tcp;
	size_t block;

	pthread_mutex_t wlock;   /* slots and next_off: assigning a stream
				    offset and starting the write are one
				    step, so writes start in stream order */
	uint64_t next_off;
	wslot slot[WSLOTS];

	uint8_t *sbuf;           /* server: read, then echo the same bytes */
	size_t scap;
	uint8_t *rbuf;           /* client: read the echo */
	size_t rcap;
	uint64_t recv_off;       /* client read chain only */

	_Atomic uint64_t sent, echoed_in, echoed_out, received;
	_Atomic int mismatch;
	uint64_t mismatch_at;
	unsigned mismatch_want, mismatch_got;
	_Atomic int error;       /* first unexpected error (errno or -rc) */
	const char *error_what;
} session;

static px_proactor *g_px;

/* Idle socketpairs with a chain of reads that time out. */
enum { NIDLE = 4 };
static int g_idle_fd[NIDLE][2];
static char g_idle_buf[NIDLE][16];
static _Atomic uint64_t g_idle_timeouts, g_idle_other;
static _Atomic uint64_t g_stat_samples;
static session g_sess[NSESS];
static _Atomic uint64_t g_starts, g_completions;
static atomic_int g_stopping, g_done, g_loop_error;
static atomic_int g_shutting; /* reads are being cancelled on purpose */

/* ------------------------------------------------------------------ */

/* The stream of a session: 8 bytes per mixed word. */
static inline uint64_t pat_word(uint32_t seed, uint64_t w)
{
	uint64_t x = ((uint64_t)seed << 40) ^ w;
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint8_t pat_byte(uint32_t seed, uint64_t pos)
{
	return (uint8_t)(pat_word(seed, pos >> 3) >> ((pos & 7) * 8));
}

/* off is a multiple of 8 (blocks are). */
static void pat_fill(uint8_t *buf, size_t len, uint32_t seed, uint64_t off)
{
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pat_word(seed, (off + i) >> 3);
		for (int b = 0; b < 8; b++)
			buf[i + b] = (uint8_t)(w >> (b * 8));
	}
	for (; i < len; i++)
		buf[i] = pat_byte(seed, off + i);
}

/* Index of the first byte that differs from the stream, or len. */
static size_t pat_check(const uint8_t *buf, size_t len, uint32_t seed,
			uint64_t off)
{
	uint64_t cur = UINT64_MAX, w = 0;
	for (size_t i = 0; i < len; i++) {
		uint64_t p = off + i;
		if ((p >> 3) != cur) {
			cur = p >> 3;
			w = pat_word(seed, cur);
		}
		if (buf[i] != (uint8_t)(w >> ((p & 7) * 8)))
			return i;
	}
	return len;
}

static void record_error(session *s, const char *what, int err)
{
	int zero = 0;
	if (atomic_compare_exchange_strong(&s->error, &zero, err))
		s->error_what = what;
}

static bool counted(int rc)
{
	if (rc == 0)
		atomic_fetch_add(&g_starts, 1);
	return rc == 0;
}

/* ------------------------------------------------------------------ */
/* Client writes                                                        */
/* ------------------------------------------------------------------ */

static void client_write_cb(const px_completion *c);

/* Start writes into free slots (wlock held). */
static void client_fill_locked(session *s)
{
	int nslots = s->write_all ? WSLOTS : 1;
	for (int i = 0; i < nslots; i++) {
		wslot *w = &s->slot[i];
		if (w->busy)
			continue;
		if (atomic_load(&g_stopping))
			return;
		w->len = s->block;
		w->done = 0;
		pat_fill(w->buf, w->len, s->seed, s->next_off);
		int rc = s->write_all
				 ? px_write_stream_all(g_px, s->cfd, w->buf,
						       w->len, client_write_cb, w)
				 : px_write_stream(g_px, s->cfd, w->buf, w->len,
						   client_write_cb, w);
		if (!counted(rc)) {
			record_error(s, "starting a client write", -rc);
			return;
		}
		w->busy = true;
		s->next_off += w->len;
	}
}

static void client_write_cb(const px_completion *c)
{
	atomic_fetch_add(&g_completions, 1);
	wslot *w = c->user;
	session *s = w->s;
	pthread_mutex_lock(&s->wlock);
	if (c->error) {
		record_error(s, "client write", c->error);
		w->busy = false; /* the stream is broken: write no more */
		pthread_mutex_unlock(&s->wlock);
		return;
	}
	atomic_fetch_add(&s->sent, c->bytes);
	w->done += c->bytes;
	if (s->write_all && w->done != w->len) {
		record_error(s, "write_stream_all completed short", EIO);
		w->busy = false;
		pthread_mutex_unlock(&s->wlock);
		return;
	}
	if (w->done < w->len) {
		if (c->bytes == 0) {
			record_error(s, "write_stream wrote 0 bytes", EIO);
			w->busy = false;
			pthread_mutex_unlock(&s->wlock);
			return;
		}
		/* Short write: the rest of this block goes next. */
		int rc = px_write_stream(g_px, s->cfd, w->buf + w->done,
					 w->len - w->done, client_write_cb, w);
		if (!counted(rc)) {
			record_error(s, "restarting a short write", -rc);
			w->busy = false;
		}
		pthread_mutex_unlock(&s->wlock);
		return;
	}
	w->busy = false;
	client_fill_locked(s);
	pthread_mutex_unlock(&s->wlock);
}

/* ------------------------------------------------------------------ */
/* Client reads (verify the echo)                                       */
/* ------------------------------------------------------------------ */

static void client_read_cb(const px_completion *c)
{
	atomic_fetch_add(&g_completions, 1);
	session *s = c->user;
	if (c->error) {
		if (!(c->error == ECANCELED && atomic_load(&g_shutting)))
			record_error(s, "client read", c->error);
		return;
	}
	if (c->bytes == 0) {
		record_error(s, "client read: unexpected end of stream", EPIPE);
		return;
	}
	size_t bad = pat_check(s->rbuf, c->bytes, s->seed, s->recv_off);
	if (bad < c->bytes && !atomic_load(&s->mismatch)) {
		s->mismatch_at = s->recv_off + bad;
		s->mismatch_want = pat_byte(s->seed, s->recv_off + bad);
		s->mismatch_got = s->rbuf[bad];
		atomic_store(&s->mismatch, 1);
	}
	s->recv_off += c->bytes;
	atomic_fetch_add(&s->received, c->bytes);
	int rc = px_read_stream(g_px, s->cfd, s->rbuf, s->rcap, client_read_cb,
				s);
	if (!counted(rc))
		record_error(s, "restarting the client read", -rc);
}

/* ------------------------------------------------------------------ */
/* Echo server                                                          */
/* ------------------------------------------------------------------ */

static void server_echo_cb(const px_completion *c);

static void server_read_cb(const px_completion *c)
{
	atomic_fetch_add(&g_completions, 1);
	session *s = c->user;
	if (c->error) {
		if (!(c->error == ECANCELED && atomic_load(&g_shutting)))
			record_error(s, "server read", c->error);
		return;
	}
	if (c->bytes == 0) {
		record_error(s, "server read: unexpected end of stream", EPIPE);
		return;
	}
	atomic_fetch_add(&s->echoed_in, c->bytes);
	int rc = px_write_stream_all(g_px, s->sfd, s->sbuf, c->bytes,
				     server_echo_cb, s);
	if (!counted(rc))
		record_error(s, "starting the echo", -rc);
}

static void server_echo_cb(const px_completion *c)
{
	atomic_fetch_add(&g_completions, 1);
	session *s = c->user;
	if (c->error) {
		record_error(s, "server echo", c->error);
		return;
	}
	if (c->bytes != c->len) {
		record_error(s, "write_stream_all (echo) completed short", EIO);
		return;
	}
	atomic_fetch_add(&s->echoed_out, c->bytes);
	int rc = px_read_stream(g_px, s->sfd, s->sbuf, s->scap, server_read_cb,
				s);
	if (!counted(rc))
		record_error(s, "restarting the server read", -rc);
}

/* ------------------------------------------------------------------ */
/* Deadline chains and statistics                                       */
/* ------------------------------------------------------------------ */

static void idle_read_cb(const px_completion *c);

static void idle_read_start(int i)
{
	int rc = px_start_op(g_px, &(px_op_desc){ .op = PX_OP_READ_STREAM,
			.fd = g_idle_fd[i][1], .buf = g_idle_buf[i],
			.len = sizeof g_idle_buf[i],
			.timeout_ns = (uint64_t)(1 + i) * 1000000u,
			.cb = idle_read_cb, .user = (void *)(intptr_t)i });
	if (!counted(rc) && rc != -ESHUTDOWN)
		atomic_fetch_add(&g_idle_other, 1);
}

static void idle_read_cb(const px_completion *c)
{
	int i = (int)(intptr_t)c->user;
	if (c->error == ETIMEDOUT)
		atomic_fetch_add(&g_idle_timeouts, 1);
	else if (!(c->error == ECANCELED && atomic_load(&g_shutting)))
		atomic_fetch_add(&g_idle_other, 1);
	bool again = c->error == ETIMEDOUT && !atomic_load(&g_stopping);
	atomic_fetch_add(&g_completions, 1);
	if (again)
		idle_read_start(i);
}

/* One sample: the balance must hold, in total and per processor. */
static int check_stats(const char *when)
{
	struct px_stats st;
	int rc = px_stats(g_px, &st);
	if (rc) {
		printf("stress: FAIL: px_stats: %s\n", px_strerror(rc));
		return 1;
	}
	atomic_fetch_add(&g_stat_samples, 1);
	int bad = 0;
	for (unsigned i = 0; i <= st.nproc; i++) {
		const char *who = i < st.nproc ? (i ? "secondary" : "primary") : "total";
		uint64_t started = i < st.nproc ? st.proc[i].started : st.started;
		uint64_t sum = i < st.nproc
			? st.proc[i].completed + st.proc[i].cancelled +
				  st.proc[i].timed_out + st.proc[i].in_flight
			: st.completed + st.cancelled + st.timed_out + st.in_flight;
		if (started != sum) {
			printf("stress: FAIL: px_stats %s, %s: started %" PRIu64
			       " != completed + cancelled + timed out + in flight "
			       "= %" PRIu64 "\n", when, who, started, sum);
			bad = 1;
		}
	}
	return bad;
}

static void print_stats(void)
{
	struct px_stats st;
	if (px_stats(g_px, &st))
		return;
	printf("stress: stats: started %" PRIu64 ", deferred %" PRIu64
	       ", completed %" PRIu64 ", cancelled %" PRIu64 ", timed out %" PRIu64
	       ", in flight %" PRIu64 "; leader turns %" PRIu64 ", interrupts %"
	       PRIu64 ", follower wake-ups %" PRIu64 "; waiting %.3f s, "
	       "sleeping %.3f s, dispatching %.3f s; %" PRIu64 " samples\n",
	       st.started, st.deferred, st.completed, st.cancelled, st.timed_out,
	       st.in_flight, st.leader_turns, st.leader_interrupts,
	       st.follower_wakeups, (double)st.wait_ns / 1e9,
	       (double)st.follower_sleep_ns / 1e9, (double)st.dispatch_ns / 1e9,
	       (uint64_t)atomic_load(&g_stat_samples));
}

/* ------------------------------------------------------------------ */

static void *loop_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_done)) {
		int rc = px_handle_events(g_px, 50);
		if (rc < 0) {
			atomic_store(&g_loop_error, rc);
			break;
		}
	}
	return NULL;
}

static void watchdog(int sig)
{
	(void)sig;
	static const char msg[] = "\nstress: WATCHDOG: time limit exceeded "
				  "(hang or lost completion)\n";
	ssize_t rc = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)rc;
	_exit(1);
}

static int tcp_pair(int listener, const struct sockaddr_in *la, int *a,
		    int *b)
{
	*a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*a < 0 || connect(*a, (const struct sockaddr *)la, sizeof *la) < 0)
		return -1;
	*b = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	return *b < 0 ? -1 : 0;
}

static bool drained(void)
{
	for (int i = 0; i < NSESS; i++) {
		session *s = &g_sess[i];
		uint64_t sent = atomic_load(&s->sent);
		if (atomic_load(&s->error))
			continue; /* reported below; it will never drain */
		pthread_mutex_lock(&s->wlock);
		bool busy = s->slot[0].busy || s->slot[1].busy;
		pthread_mutex_unlock(&s->wlock);
		if (busy || atomic_load(&s->received) != sent ||
		    atomic_load(&s->echoed_out) != sent)
			return false;
	}
	return true;
}

static void print_sessions(void)
{
	for (int i = 0; i < NSESS; i++) {
		session *s = &g_sess[i];
		printf("  session %2d (%s, %s, block %zu): sent %" PRIu64
		       " echoed %" PRIu64 "/%" PRIu64 " received %" PRIu64
		       " writes busy %d/%d\n",
		       i, s->tcp ? "tcp" : "unix",
		       s->write_all ? "2 x write_all" : "write+rest", s->block,
		       (uint64_t)atomic_load(&s->sent),
		       (uint64_t)atomic_load(&s->echoed_in),
		       (uint64_t)atomic_load(&s->echoed_out),
		       (uint64_t)atomic_load(&s->received), s->slot[0].busy,
		       s->slot[1].busy);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: stress 'ENGINE CONFIG' [seconds]\n");
		return 1;
	}
	double seconds = argc > 2 ? atof(argv[2]) : 1.5;
	if (seconds <= 0 || seconds > 600)
		seconds = 1.5;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, watchdog);
	alarm((unsigned)seconds + 90);

	px_config cfg;
	char err[512] = "";
	int rc = px_config_parse(&cfg, argv[1], err, sizeof err);
	if (rc) {
		fprintf(stderr, "stress: config '%s': %s: %s\n", argv[1],
			px_strerror(rc), err);
		return 1;
	}
	cfg.flags |= PX_CF_NO_ENV;
	rc = px_create_config(&g_px, &cfg, err, sizeof err);
	if (rc == -ENOSYS || rc == -EPERM) {
		printf("stress: engine '%s' not available here (%s: %s): "
		       "skipped\n",
		       argv[1], px_strerror(rc), err);
		return 77;
	}
	if (rc) {
		fprintf(stderr, "stress: px_create_config('%s'): %s: %s\n",
			argv[1], px_strerror(rc), err);
		return 1;
	}
	printf("stress: engine '%s' runs as '%s'\n", argv[1],
	       px_engine_name(g_px));

	/* Sessions: even ones over socketpairs, odd ones over TCP. */
	int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in la;
	memset(&la, 0, sizeof la);
	la.sin_family = AF_INET;
	la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t lalen = sizeof la;
	if (listener < 0 || bind(listener, (struct sockaddr *)&la, sizeof la) ||
	    getsockname(listener, (struct sockaddr *)&la, &lalen) ||
	    listen(listener, NSESS)) {
		perror("stress: listener");
		return 1;
	}
	for (int i = 0; i < NSESS; i++) {
		session *s = &g_sess[i];
		s->idx = i;
		s->seed = 0x5eed0000u + (uint32_t)i * 7919u;
		s->tcp = i % 2;
		s->write_all = (i / 2) % 2 == 0;
		s->block = (size_t)1024 << (i % 6); /* 1 KiB .. 32 KiB */
		s->scap = (size_t)4096 << (i % 4);  /* 4 KiB .. 32 KiB */
		s->rcap = (size_t)65536 >> (i % 5); /* 4 KiB .. 64 KiB */
		pthread_mutex_init(&s->wlock, NULL);
		for (int k = 0; k < WSLOTS; k++) {
			s->slot[k].s = s;
			s->slot[k].buf = malloc(s->block);
		}
		s->sbuf = malloc(s->scap);
		s->rbuf = malloc(s->rcap);
		if (!s->slot[0].buf || !s->slot[1].buf || !s->sbuf || !s->rbuf)
			return 1;
		int sv[2];
		if (s->tcp) {
			if (tcp_pair(listener, &la, &sv[0], &sv[1])) {
				perror("stress: tcp pair");
				return 1;
			}
		} else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				      sv)) {
			perror("stress: socketpair");
			return 1;
		}
		s->cfd = sv[0];
		s->sfd = sv[1];
	}
	close(listener);
	for (int i = 0; i < NIDLE; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g_idle_fd[i])) {
			perror("stress: socketpair");
			return 1;
		}

	pthread_t th[NTHREADS];
	for (int t = 0; t < NTHREADS; t++)
		if (pthread_create(&th[t], NULL, loop_main, NULL)) {
			perror("stress: pthread_create");
			return 1;
		}

	/* Start everything from this thread while the loop threads run. */
	uint64_t t0 = h_now_ns();
	for (int i = 0; i < NSESS; i++) {
		session *s = &g_sess[i];
		if (!counted(px_read_stream(g_px, s->sfd, s->sbuf, s->scap,
					    server_read_cb, s)))
			record_error(s, "starting the server read", EIO);
		if (!counted(px_read_stream(g_px, s->cfd, s->rbuf, s->rcap,
					    client_read_cb, s)))
			record_error(s, "starting the client read", EIO);
		pthread_mutex_lock(&s->wlock);
		client_fill_locked(s);
		pthread_mutex_unlock(&s->wlock);
	}
	for (int i = 0; i < NIDLE; i++)
		idle_read_start(i);
	int failures = 0;
	uint64_t run_ns = (uint64_t)(seconds * 1e9);
	while (h_now_ns() - t0 < run_ns && !atomic_load(&g_loop_error)) {
		h_sleep_ms(3);
		if (failures < 5)
			failures += check_stats("under load");
	}
	atomic_store(&g_stopping, 1);
	double elapsed = (double)(h_now_ns() - t0) / 1e9;

	/* Drain: every block written, echoed and read back. */
	uint64_t dl = h_now_ns() + 20ull * 1000000000u;
	while (!drained() && h_now_ns() < dl && !atomic_load(&g_loop_error))
		h_sleep_ms(5);
	if (!drained()) {
		printf("stress: FAIL: the echoes did not drain within 20 s\n");
		print_sessions();
		failures++;
	}
	/* Now each session has exactly its two reads pending. */
	dl = h_now_ns() + 5ull * 1000000000u;
	while (atomic_load(&g_starts) - atomic_load(&g_completions) !=
		       2 * NSESS &&
	       h_now_ns() < dl)
		h_sleep_ms(2);
	uint64_t pending =
		atomic_load(&g_starts) - atomic_load(&g_completions);
	if (pending != 2 * NSESS) {
		printf("stress: FAIL: %" PRIu64 " operations pending after the "
		       "drain, expected %d (one client and one server read "
		       "per session)\n",
		       pending, 2 * NSESS);
		failures++;
	}
	/* Quiet: the statistics agree with the program's own counts. */
	{
		struct px_stats st;
		failures += check_stats("after the drain");
		if (px_stats(g_px, &st) == 0 &&
		    (st.in_flight != pending || st.started != atomic_load(&g_starts) ||
		     st.timed_out != atomic_load(&g_idle_timeouts))) {
			printf("stress: FAIL: px_stats after the drain: started %"
			       PRIu64 " in flight %" PRIu64 " timed out %" PRIu64
			       "; the program counted %" PRIu64 ", %" PRIu64
			       ", %" PRIu64 "\n", st.started, st.in_flight,
			       st.timed_out, (uint64_t)atomic_load(&g_starts),
			       pending, (uint64_t)atomic_load(&g_idle_timeouts));
			failures++;
		}
	}
	if (atomic_load(&g_idle_timeouts) == 0 || atomic_load(&g_idle_other)) {
		printf("stress: FAIL: deadline chains: %" PRIu64 " timeouts, %"
		       PRIu64 " other outcomes\n",
		       (uint64_t)atomic_load(&g_idle_timeouts),
		       (uint64_t)atomic_load(&g_idle_other));
		failures++;
	}
	atomic_store(&g_shutting, 1);
	int cancelled = 0;
	for (int i = 0; i < NSESS; i++) {
		int a = px_cancel(g_px, g_sess[i].cfd);
		int b = px_cancel(g_px, g_sess[i].sfd);
		if (a < 0 || b < 0) {
			printf("stress: FAIL: px_cancel: %s\n",
			       px_strerror(a < 0 ? a : b));
			failures++;
		} else {
			cancelled += a + b;
		}
	}
	if ((uint64_t)cancelled != pending) {
		printf("stress: FAIL: px_cancel reported %d operations, %" PRIu64
		       " were pending\n",
		       cancelled, pending);
		failures++;
	}
	dl = h_now_ns() + 10ull * 1000000000u;
	while (atomic_load(&g_completions) < atomic_load(&g_starts) &&
	       h_now_ns() < dl)
		h_sleep_ms(2);
	if (atomic_load(&g_completions) != atomic_load(&g_starts)) {
		printf("stress: FAIL: after cancel, %" PRIu64 " completions for "
		       "%" PRIu64 " started operations\n",
		       (uint64_t)atomic_load(&g_completions),
		       (uint64_t)atomic_load(&g_starts));
		failures++;
	}

	failures += check_stats("after the cancels");
	print_stats();
	atomic_store(&g_done, 1);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	if (atomic_load(&g_loop_error)) {
		printf("stress: FAIL: px_handle_events returned %d (%s)\n",
		       atomic_load(&g_loop_error),
		       px_strerror(atomic_load(&g_loop_error)));
		failures++;
	}
	rc = px_destroy(g_px);
	if (rc) {
		printf("stress: FAIL: px_destroy: %s\n", px_strerror(rc));
		failures++;
	}
	uint64_t starts = atomic_load(&g_starts), done = atomic_load(&g_completions);
	if (starts != done) {
		printf("stress: FAIL: %" PRIu64 " operations started, %" PRIu64
		       " completions\n",
		       starts, done);
		failures++;
	}

	uint64_t total = 0;
	for (int i = 0; i < NSESS; i++) {
		session *s = &g_sess[i];
		uint64_t sent = atomic_load(&s->sent);
		total += sent;
		if (atomic_load(&s->error)) {
			printf("stress: FAIL: session %d: %s: %s\n", i,
			       s->error_what, strerror(atomic_load(&s->error)));
			failures++;
		}
		if (atomic_load(&s->mismatch)) {
			printf("stress: FAIL: session %d: echoed byte at stream "
			       "offset %" PRIu64 " is %u, sent %u (bytes out "
			       "of order, lost or duplicated)\n",
			       i, s->mismatch_at, s->mismatch_got,
			       s->mismatch_want);
			failures++;
		}
		if (sent == 0) {
			printf("stress: FAIL: session %d moved no data\n", i);
			failures++;
		}
		if (atomic_load(&s->received) != sent ||
		    atomic_load(&s->echoed_in) != sent ||
		    atomic_load(&s->echoed_out) != sent) {
			printf("stress: FAIL: session %d: sent %" PRIu64
			       ", server read %" PRIu64 ", echoed %" PRIu64
			       ", client read back %" PRIu64 "\n",
			       i, sent, (uint64_t)atomic_load(&s->echoed_in),
			       (uint64_t)atomic_load(&s->echoed_out),
			       (uint64_t)atomic_load(&s->received));
			failures++;
		}
		close(s->cfd);
		close(s->sfd);
		free(s->slot[0].buf);
		free(s->slot[1].buf);
		free(s->sbuf);
		free(s->rbuf);
		pthread_mutex_destroy(&s->wlock);
	}
	printf("stress: %d sessions, %d threads, %.2f s: %.1f MiB echoed "
	       "(%.1f MiB/s), %" PRIu64 " operations, each completed once: %s\n",
	       NSESS, NTHREADS, elapsed, (double)total / (1 << 20),
	       (double)total / (1 << 20) / elapsed, starts,
	       failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
