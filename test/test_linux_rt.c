/*
 * test_linux_rt.c - the readiness provider with the linux_rt wait
 * (real-time signals per descriptor) on a dedicated processor, when the
 * signal queue overflows.
 *
 * RLIMIT_SIGPENDING is lowered to a few entries, so that far more
 * descriptors become ready at once than the queue holds: NPAIRS socket
 * pairs each have a read pending, and the main thread writes one byte to
 * every pair, ROUNDS times (each read completion starts the next read).
 * Every read must complete exactly once per round with its byte; the
 * reads still pending at the end complete once, with ECANCELED, in
 * px_destroy.  Two threads run px_handle_events.
 *
 * Also checked: the config refuses the wait on a shared processor with a
 * message that says why; a descriptor is left without O_ASYNC once it has
 * nothing pending, and with the owner and signal it had before; the application's own signal-driven pipe, its signal
 * taken by its own thread, gets every signal when F_SETSIG names one of
 * the application's (with SIGIO, the leader takes them: known problem).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "proactor.h"

#define NPAIRS 300
#define ROUNDS 4
#define SIGQ_LIMIT 8

typedef struct pair {
	int sv[2];            /* [0] read by the proactor, [1] written here */
	char buf[16];
	atomic_int done;      /* reads completed with a byte */
	atomic_int cancelled; /* reads completed with ECANCELED */
	atomic_int other;     /* anything else */
} pair;

static pair pairs[NPAIRS];
static px_proactor *g_px;
static atomic_int g_stop;
static atomic_int g_total;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_read(const px_completion *c);

static int start_read(pair *p)
{
	return px_read_stream(g_px, p->sv[0], p->buf, sizeof(p->buf), on_read, p);
}

static void on_read(const px_completion *c)
{
	pair *p = c->user;

	if (c->error == ECANCELED && c->bytes == 0) {
		atomic_fetch_add(&p->cancelled, 1);
		return;
	}
	if (c->error || c->bytes != 1 || p->buf[0] != 'x') {
		atomic_fetch_add(&p->other, 1);
		return;
	}
	atomic_fetch_add(&p->done, 1);
	atomic_fetch_add(&g_total, 1);
	if (start_read(p) != 0)
		atomic_fetch_add(&p->other, 1);
}

static void *loop(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_stop))
		px_handle_events(g_px, 50);
	return NULL;
}

static void overflow_every_read_once(void **state)
{
	struct rlimit old, rl;
	pthread_t th[2];
	char err[256] = "";
	int rc;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_SIGPENDING, &old), 0);
	rl = old;
	rl.rlim_cur = SIGQ_LIMIT;
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &rl), 0);

	rc = px_create(&g_px, "linux-rt-dedicated", err, sizeof(err));
	if (rc != 0)
		fail_msg("px_create(linux-rt-dedicated): %s: %s", px_strerror(rc),
			 err);
	for (int i = 0; i < NPAIRS; i++) {
		pair *p = &pairs[i];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
							     SOCK_CLOEXEC,
					    0, p->sv),
				 0);
		assert_int_equal(start_read(p), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, loop, NULL), 0);

	for (int round = 1; round <= ROUNDS; round++) {
		uint64_t t0 = now_ms();

		/* Every pair becomes readable at about the same time: far more
		 * state changes than the signal queue holds. */
		for (int i = 0; i < NPAIRS; i++)
			assert_int_equal(send(pairs[i].sv[1], "x", 1, 0), 1);
		while (atomic_load(&g_total) < round * NPAIRS &&
		       now_ms() - t0 < 10000) {
			struct timespec d = { 0, 2 * 1000000L };
			nanosleep(&d, NULL);
		}
		if (atomic_load(&g_total) != round * NPAIRS)
			fail_msg("round %d: %d of %d reads completed", round,
				 atomic_load(&g_total) - (round - 1) * NPAIRS,
				 NPAIRS);
	}
	atomic_store(&g_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(px_destroy(g_px), 0);
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &old), 0);

	for (int i = 0; i < NPAIRS; i++) {
		pair *p = &pairs[i];
		if (p->done != ROUNDS || p->cancelled != 1 || p->other != 0)
			fail_msg("pair %d: %d reads with data (want %d), %d "
				 "cancelled (want 1), %d other", i, p->done, ROUNDS,
				 p->cancelled, p->other);
		/* Nothing pending any more: not left signalling. */
		assert_int_equal(fcntl(p->sv[0], F_GETFL) & O_ASYNC, 0);
		close(p->sv[0]);
		close(p->sv[1]);
	}
}

static void shared_is_refused(void **state)
{
	px_proactor *px = NULL;
	char err[256] = "";

	(void)state;
	assert_int_equal(px_create(&px, "provider=select wait=linux_rt", err,
				   sizeof(err)),
			 -EINVAL);
	assert_null(px);
	assert_non_null(strstr(err, "needs processor=dedicated"));
	assert_non_null(strstr(err, "one thread"));
}

/* interrupt=signal given SIGIO, the signal the kernel sends the poller
 * when its queue overflows: each px_connect from outside the loop (which
 * finishes inside the poller's set, so only the interrupt wakes the
 * leader) completes at once.  The poller took every SIGIO for an
 * overflow and never drained the interrupt, whose pending mark then
 * swallowed every later one: the connects after the first waited for the
 * leader's 1 s bound (a helper's review of 2026-12-05). */
static atomic_int g_connects;

static void on_connect(const px_completion *c)
{
	if (c->error == 0)
		atomic_fetch_add(&g_connects, 1);
}

static void sigio_interrupt_wakes_every_time(void **state)
{
	char text[128], err[256] = "";
	pthread_t th;
	int rc;

	(void)state;
	snprintf(text, sizeof(text), "linux-rt-dedicated interrupt=signal signal=%d",
		 SIGIO);
	rc = px_create(&g_px, text, err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM)
		skip();
	assert_int_equal(rc, 0);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 64), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	atomic_store(&g_stop, 0);
	atomic_store(&g_connects, 0);
	assert_int_equal(pthread_create(&th, NULL, loop, NULL), 0);
	usleep(50 * 1000);
	int slow = 0, fds[6];
	for (int i = 0; i < 6; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
		uint64_t t0 = now_ms();
		assert_int_equal(px_connect(g_px, fds[i], (struct sockaddr *)&a,
					    sizeof(a), on_connect, NULL), 0);
		while (atomic_load(&g_connects) < i + 1 && now_ms() - t0 < 3000)
			usleep(200);
		assert_int_equal(atomic_load(&g_connects), i + 1);
		if (now_ms() - t0 > 300)
			slow++;
		usleep(20 * 1000);
	}
	atomic_store(&g_stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(px_destroy(g_px), 0);
	g_px = NULL;
	for (int i = 0; i < 6; i++)
		close(fds[i]);
	close(l);
	/* One slow connect may be the machine's; each after the first
	 * was, before. */
	if (slow > 1)
		fail_msg("%d of 6 connects from outside took over 300 ms", slow);
}

/* A descriptor the application put in signal-driven mode itself (O_ASYNC,
 * its own owner, SIGIO) is shared with it: the wait polls it and leaves
 * its owner, its signal and O_ASYNC alone, both when its read completes
 * and when px_destroy ends a read still pending (its SIGIO must go on
 * reaching the application after the proactor is gone). */
static atomic_int g_own_reads;

static void on_own_read(const px_completion *c)
{
	if (c->error == 0 && c->bytes == 1)
		atomic_fetch_add(&g_own_reads, 1);
	else if (c->error == ECANCELED)
		atomic_fetch_add(&g_own_reads, 100);
}

static void assert_app_async(int fd)
{
	struct f_owner_ex o;

	assert_int_equal(fcntl(fd, F_GETFL) & O_ASYNC, O_ASYNC);
	assert_int_equal(fcntl(fd, F_GETOWN_EX, &o), 0);
	assert_int_equal(o.type, F_OWNER_PID);
	assert_int_equal(o.pid, getpid());
	assert_int_equal(fcntl(fd, F_GETSIG), 0);
}

static void application_async_left_alone(void **state)
{
	char err[256] = "", buf[2];
	int sv[2];
	sigset_t io, old;
	pthread_t th;

	(void)state;
	/* SIGIO blocked here and in the loop thread created below: the
	 * test's own signals stay pending rather than end the process. */
	sigemptyset(&io);
	sigaddset(&io, SIGIO);
	pthread_sigmask(SIG_BLOCK, &io, &old);
	int rc = px_create(&g_px, "linux-rt-dedicated", err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		skip();
	}
	assert_int_equal(rc, 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETOWN, getpid()), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_ASYNC), 0);
	atomic_store(&g_own_reads, 0);
	atomic_store(&g_stop, 0);
	assert_int_equal(pthread_create(&th, NULL, loop, NULL), 0);
	/* A read that completes: the descriptor goes idle. */
	assert_int_equal(px_read_stream(g_px, sv[0], buf, 1, on_own_read, NULL), 0);
	usleep(20 * 1000);
	assert_int_equal(write(sv[1], "x", 1), 1);
	uint64_t t0 = now_ms();
	while (atomic_load(&g_own_reads) < 1 && now_ms() - t0 < 3000)
		usleep(200);
	assert_int_equal(atomic_load(&g_own_reads), 1);
	assert_app_async(sv[0]);
	/* A read pending when the proactor goes. */
	assert_int_equal(px_read_stream(g_px, sv[0], buf, 1, on_own_read, NULL), 0);
	usleep(20 * 1000);
	atomic_store(&g_stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(px_destroy(g_px), 0);
	g_px = NULL;
	assert_int_equal(atomic_load(&g_own_reads), 101);
	assert_app_async(sv[0]);
	close(sv[0]);
	close(sv[1]);
	/* Drop the SIGIO the test raised, then restore the mask. */
	const struct timespec zero = { 0, 0 };
	while (sigtimedwait(&io, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* What differs from the owner and signal the test gave fd, into bad
 * (kept when it holds a message already). */
static void check_owner_and_signal(int fd, const char *when, char *bad,
				   size_t n)
{
	struct f_owner_ex o = { 0, 0 };

	if (bad[0])
		return;
	if (fcntl(fd, F_GETFL) & O_ASYNC)
		snprintf(bad, n, "%s: O_ASYNC left on", when);
	else if (fcntl(fd, F_GETOWN_EX, &o) != 0 || fcntl(fd, F_GETSIG) != 0 ||
		 o.type != F_OWNER_PID || o.pid != getpid())
		snprintf(bad, n, "%s: the descriptor's signal is %d (was 0), "
			 "its owner type %d id %d (was the process, %d)", when,
			 fcntl(fd, F_GETSIG), o.type, o.pid, (int)getpid());
}

/* The wait sets a descriptor's owner (F_SETOWN_EX, its leader thread) and
 * signal (F_SETSIG) when it turns O_ASYNC on; both belong to the open
 * file, which stays the application's.  When the wait lets the file go
 * (its read done, or px_destroy) they must be as the application left
 * them: here an owner named with F_SETOWN (the process) ahead of an
 * O_ASYNC of its own to come, and no F_SETSIG.  Before, the file kept
 * SIGRTMIN+3 and the leader thread as owner, so the application's own
 * O_ASYNC would later have raised SIGRTMIN+3 (its default action ends
 * the process) at a thread that was gone. */
static void owner_and_signal_given_back(void **state)
{
	char err[256] = "", buf[2], bad[256] = "";
	int sv[2];
	pthread_t th;

	(void)state;
	int rc = px_create(&g_px, "linux-rt-dedicated", err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM)
		skip();
	assert_int_equal(rc, 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETOWN, getpid()), 0);
	/* Failures are kept for the end: the proactor and the loop thread go
	 * first, so that the tests after this one find neither. */
	atomic_store(&g_own_reads, 0);
	atomic_store(&g_stop, 0);
	assert_int_equal(pthread_create(&th, NULL, loop, NULL), 0);
	/* A read that waits, then completes: the descriptor goes idle. */
	rc = px_read_stream(g_px, sv[0], buf, 1, on_own_read, NULL);
	/* The leader turns O_ASYNC on when its wait takes the descriptor:
	 * at once on an idle machine, later on a loaded one (CI). */
	bool async_on = false;
	for (uint64_t t = now_ms(); !async_on && now_ms() - t < 3000;
	     usleep(1000))
		async_on = (fcntl(sv[0], F_GETFL) & O_ASYNC) != 0;
	ssize_t w = write(sv[1], "x", 1);
	uint64_t t0 = now_ms();
	while (atomic_load(&g_own_reads) < 1 && now_ms() - t0 < 3000)
		usleep(200);
	int first = atomic_load(&g_own_reads);
	check_owner_and_signal(sv[0], "after its read completed", bad,
			       sizeof(bad));
	/* A read pending when the proactor goes. */
	int rc2 = px_read_stream(g_px, sv[0], buf, 1, on_own_read, NULL);
	usleep(20 * 1000);
	atomic_store(&g_stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(px_destroy(g_px), 0);
	g_px = NULL;
	check_owner_and_signal(sv[0], "after px_destroy", bad, sizeof(bad));
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(rc, 0);
	assert_true(async_on);
	assert_int_equal(w, 1);
	assert_int_equal(first, 1);
	assert_int_equal(rc2, 0);
	assert_int_equal(atomic_load(&g_own_reads), 101);
	if (bad[0])
		fail_msg("%s", bad);
}

/* The application's own signal-driven descriptor, its signals taken by a
 * thread of its own with sigtimedwait (blocked in every thread), beside a
 * proactor of the wait.  The wait takes SIGIO (its sign of a full signal
 * queue) wherever it is pending: from the process's queue too.  So with
 * the application's SIGIO (F_SETOWN to the process, no F_SETSIG) the
 * leader took nearly all of them (0 or 1 of 100 reached the application's
 * thread, a known problem in TESTING.md); with F_SETSIG naming a signal
 * of the application's own, which README recommends, every one reaches
 * it.  The proactor's own read completes in both. */
enum { APP_SIGNALS = 100 };

static atomic_int g_app_got, g_app_stop;
static int g_app_signo;

static void *app_taker(void *arg)
{
	const struct timespec tick = { 0, 20 * 1000 * 1000 };
	sigset_t set;

	(void)arg;
	sigemptyset(&set);
	sigaddset(&set, g_app_signo);
	while (!atomic_load(&g_app_stop))
		if (sigtimedwait(&set, NULL, &tick) == g_app_signo)
			atomic_fetch_add(&g_app_got, 1);
	return NULL;
}

static atomic_int g_app_reads;

static void on_app_side_read(const px_completion *c)
{
	if (c->error == 0 && c->bytes == 1)
		atomic_fetch_add(&g_app_reads, 1);
}

/* How many of APP_SIGNALS signals of the application's pipe (setsig 0:
 * SIGIO) its own thread took. */
static int app_signals_taken(int setsig)
{
	const struct timespec gap = { 0, 2 * 1000 * 1000 };
	char err[256] = "", b[2];
	sigset_t set, old;
	pthread_t lt, tt;
	int p[2], sv[2];

	g_app_signo = setsig ? setsig : SIGIO;
	sigemptyset(&set);
	sigaddset(&set, g_app_signo);
	sigaddset(&set, SIGIO);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	int rc = px_create(&g_px, "linux-rt-dedicated", err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return -1;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(p[0], F_SETOWN, getpid()), 0);
	if (setsig)
		assert_int_equal(fcntl(p[0], F_SETSIG, setsig), 0);
	assert_int_equal(fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_ASYNC), 0);
	atomic_store(&g_app_got, 0);
	atomic_store(&g_app_stop, 0);
	atomic_store(&g_app_reads, 0);
	atomic_store(&g_stop, 0);
	assert_int_equal(pthread_create(&tt, NULL, app_taker, NULL), 0);
	assert_int_equal(pthread_create(&lt, NULL, loop, NULL), 0);
	/* The proactor waits for a read all along. */
	assert_int_equal(px_read_stream(g_px, sv[0], b, 1, on_app_side_read,
					NULL), 0);
	usleep(20 * 1000);
	for (int i = 0; i < APP_SIGNALS; i++) {
		assert_int_equal(write(p[1], "x", 1), 1);
		nanosleep(&gap, NULL);
		assert_int_equal(read(p[0], b, 1), 1);
		nanosleep(&gap, NULL);
	}
	assert_int_equal(write(sv[1], "y", 1), 1);
	uint64_t t0 = now_ms();
	while (atomic_load(&g_app_reads) < 1 && now_ms() - t0 < 3000)
		usleep(200);
	assert_int_equal(atomic_load(&g_app_reads), 1);
	usleep(100 * 1000);
	atomic_store(&g_app_stop, 1);
	pthread_join(tt, NULL);
	atomic_store(&g_stop, 1);
	pthread_join(lt, NULL);
	assert_int_equal(px_destroy(g_px), 0);
	g_px = NULL;
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
	const struct timespec zero = { 0, 0 };
	while (sigtimedwait(&set, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return atomic_load(&g_app_got);
}

static void application_signals_own_descriptor(void **state)
{
	(void)state;
	int own = app_signals_taken(SIGRTMIN + 6);
	if (own < 0)
		skip();
	int sigio = app_signals_taken(0);
	printf("the application's thread took %d of %d signals with F_SETSIG "
	       "SIGRTMIN+6, %d of %d SIGIOs (known problem: the leader takes "
	       "SIGIO)\n", own, APP_SIGNALS, sigio, APP_SIGNALS);
	assert_int_equal(own, APP_SIGNALS);
}

/*
 * Changes that raise no signal, each with a read pending on a fresh
 * proactor of the wait (its dedicated thread leads, a loop thread runs
 * the callbacks): the application's
 * own shutdown(SHUT_RD) of the socket; a signalfd (SIGUSR2 blocked in
 * every thread, then sent to the process); the socket's owner taken by a
 * forked child (F_SETOWN to itself, the wait's signal blocked there, as
 * a worker that sets up signal-driven I/O of its own on an inherited
 * socket), then a byte sent.  The kernel queues no signal to the leader
 * in any of them.  Each read must end once within 10 s: with the end of
 * stream, with the signal's record, with the byte.  They waited for a
 * cancel, all three (known problems of 2026-12-06); the wait's idle check
 * now polls what is armed (lrt_verify; TESTING.md, fixed problem 325).
 */
enum { NOSIG_SHUT_RD, NOSIG_SIGNALFD, NOSIG_OWNER_TAKEN };

static atomic_int g_ns_calls;
static int g_ns_error;
static size_t g_ns_bytes;

static void on_nosig_read(const px_completion *c)
{
	g_ns_error = c->error;
	g_ns_bytes = c->bytes;
	atomic_fetch_add(&g_ns_calls, 1);
}

static const char *nosig_name(int kind)
{
	return kind == NOSIG_SHUT_RD ? "shutdown(SHUT_RD) by the application"
	     : kind == NOSIG_SIGNALFD ? "a signalfd"
	     : "the owner taken by a forked child";
}

/* One case; false when the engine cannot be made here (skip). */
static bool nosig_case(int kind)
{
	char err[256] = "", buf[256];
	sigset_t usr2, old;
	pthread_t lt;
	pid_t child = -1;
	int fd, sv[2] = { -1, -1 }, ready[2];

	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	/* Blocked before px_create: its dedicated thread inherits the mask. */
	pthread_sigmask(SIG_BLOCK, &usr2, &old);
	int rc = px_create(&g_px, "linux-rt-dedicated", err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return false;
	}
	assert_int_equal(rc, 0);
	if (kind == NOSIG_SIGNALFD) {
		fd = signalfd(-1, &usr2, SFD_NONBLOCK | SFD_CLOEXEC);
		assert_true(fd >= 0);
	} else {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv), 0);
		fd = sv[0];
	}
	atomic_store(&g_ns_calls, 0);
	atomic_store(&g_stop, 0);
	assert_int_equal(pthread_create(&lt, NULL, loop, NULL), 0);
	assert_int_equal(px_read_stream(g_px, fd, buf, sizeof(buf),
					on_nosig_read, NULL), 0);
	usleep(50 * 1000);  /* (the leader has it armed, and waits) */
	switch (kind) {
	case NOSIG_SHUT_RD:
		assert_int_equal(shutdown(fd, SHUT_RD), 0);
		break;
	case NOSIG_SIGNALFD:
		assert_int_equal(kill(getpid(), SIGUSR2), 0);
		break;
	case NOSIG_OWNER_TAKEN:
		assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
		child = fork();
		assert_true(child >= 0);
		if (child == 0) {
			sigset_t s;
			char c = 1;

			sigemptyset(&s);
			sigaddset(&s, SIGRTMIN + 3);
			sigaddset(&s, SIGIO);
			sigprocmask(SIG_BLOCK, &s, NULL);
			if (fcntl(fd, F_SETOWN, getpid()) < 0)
				c = 0;
			if (write(ready[1], &c, 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		close(ready[1]);
		char c = 0;
		assert_int_equal(read(ready[0], &c, 1), 1);
		close(ready[0]);
		assert_int_equal(c, 1);
		assert_int_equal(write(sv[1], "z", 1), 1);
		break;
	}
	uint64_t t0 = now_ms();
	while (atomic_load(&g_ns_calls) < 1 && now_ms() - t0 < 10000)
		usleep(1000);
	uint64_t took = now_ms() - t0;
	usleep(20 * 1000);  /* (a second callback would come now) */
	int calls = atomic_load(&g_ns_calls);
	atomic_store(&g_stop, 1);
	pthread_join(lt, NULL);
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	assert_int_equal(px_destroy(g_px), 0);
	g_px = NULL;
	if (calls == 0)
		fail_msg("%s: the read was still pending after 10 s",
			 nosig_name(kind));
	printf("%s: the read ended after %llu ms\n", nosig_name(kind),
	       (unsigned long long)took);
	assert_int_equal(calls, 1);
	assert_int_equal(g_ns_error, 0);
	switch (kind) {
	case NOSIG_SHUT_RD:
		assert_int_equal(g_ns_bytes, 0);
		break;
	case NOSIG_SIGNALFD: {
		const struct signalfd_siginfo *si = (const void *)buf;

		assert_int_equal(g_ns_bytes, sizeof(*si));
		assert_int_equal(si->ssi_signo, SIGUSR2);
		break;
	}
	case NOSIG_OWNER_TAKEN:
		assert_int_equal(g_ns_bytes, 1);
		assert_int_equal(buf[0], 'z');
		break;
	}
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	} else {
		close(fd);
	}
	const struct timespec zero = { 0, 0 };
	while (sigtimedwait(&usr2, NULL, &zero) > 0)
		;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return true;
}

static void unsignalled_changes_end_reads(void **state)
{
	(void)state;
	for (int kind = NOSIG_SHUT_RD; kind <= NOSIG_OWNER_TAKEN; kind++)
		if (!nosig_case(kind))
			skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shared_is_refused),
		cmocka_unit_test(overflow_every_read_once),
		cmocka_unit_test(sigio_interrupt_wakes_every_time),
		cmocka_unit_test(application_async_left_alone),
		cmocka_unit_test(owner_and_signal_given_back),
		cmocka_unit_test(application_signals_own_descriptor),
		cmocka_unit_test(unsignalled_changes_end_reads),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	unsetenv("PX_ENGINE");
	return cmocka_run_group_tests_name("linux_rt", tests, NULL, NULL);
}
