/*
 * test_intr.c - the interrupt strategies (interrupt/) on their own.
 *
 * For each strategy a "leader" thread activates it and blocks in ppoll on
 * px_intr.fd with px_intr.wait_mask, as a wait strategy does, while the
 * test thread interrupts it.  Checked: the wait wakes (fd readable, or
 * EINTR for the signal strategy); an interrupt sent before the wait starts
 * is not lost; after drain a second wait times out; repeated interrupts
 * cost one write; leader_deactivated leaves no signal pending and restores
 * the thread's mask; the signal handler is shared and put back.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static px_processor_config intr_cfg(int t, int signo)
{
	px_processor_config c;
	const char *name = px__intr_name(t);

	memset(&c, 0, sizeof(c));
	c.processor = PX_PROCESSOR_SHARED;
	strcpy(c.provider, "select");
	strcpy(c.wait, "poll");
	snprintf(c.interrupt, sizeof(c.interrupt), "%s", name ? name : "bogus");
	c.intr_signo = signo;
	return c;
}

static px_intr *make(int t, int signo)
{
	px_processor_config c = intr_cfg(t, signo);
	px_intr *in = NULL;

	assert_int_equal(px__intr_create(&c, &in), 0);
	assert_non_null(in);
	assert_non_null(in->ops);
	assert_non_null(in->ops->interrupt);
	assert_non_null(in->ops->drain);
	assert_non_null(in->ops->destroy);
	return in;
}

static void locked_call(px_intr *in, void (*fn)(px_intr *))
{
	if (!fn)
		return;
	pthread_mutex_lock(&mu);
	fn(in);
	pthread_mutex_unlock(&mu);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* One wait as a wait strategy would do it: returns ppoll's result, errno
 * in *e. */
static int wait_once(px_intr *in, int timeout_ms, int *e)
{
	struct pollfd pfd = { .fd = in->fd, .events = POLLIN };
	struct timespec ts = { timeout_ms / 1000, (timeout_ms % 1000) * 1000000L };
	int rc = ppoll(in->fd >= 0 ? &pfd : NULL, in->fd >= 0 ? 1 : 0, &ts,
		       in->wait_mask);

	*e = rc < 0 ? errno : 0;
	return rc;
}

/* ------------------------------------------------------------------ */
/* The leader thread                                                    */
/* ------------------------------------------------------------------ */

struct leader {
	px_intr *in;
	sem_t ready;            /* leader activated */
	sem_t go;               /* test thread lets it wait */
	int rc1, e1;            /* first wait */
	uint64_t ms1;
	int rc2, e2;            /* second wait, after drain */
	bool mask_restored;     /* mask after deactivate == mask before */
	bool signal_left;       /* our signal still pending after deactivate */
	int rc3, e3;            /* a plain wait after deactivate */
	bool wait_only_once;    /* skip the waits: deactivate right away */
	int signo;              /* signal strategy: its signal; else 0 */
	bool pre_block;         /* the thread blocks signo itself */
};

/* Set by the signal tests: leader threads start with the signal blocked,
 * as in an application that blocks it everywhere. */
static bool pre_block;

static void *leader_main(void *arg)
{
	struct leader *l = arg;
	sigset_t before, after, pend;

	if (l->pre_block) {
		sigemptyset(&before);
		sigaddset(&before, l->signo);
		pthread_sigmask(SIG_BLOCK, &before, NULL);
	}
	pthread_sigmask(SIG_BLOCK, NULL, &before);
	locked_call(l->in, l->in->ops->leader_activated);
	sem_post(&l->ready);
	sem_wait(&l->go);
	if (!l->wait_only_once) {
		uint64_t t0 = now_ms();
		l->rc1 = wait_once(l->in, 5000, &l->e1);
		l->ms1 = now_ms() - t0;
		locked_call(l->in, l->in->ops->drain);
		l->rc2 = wait_once(l->in, 100, &l->e2);
	}
	locked_call(l->in, l->in->ops->leader_deactivated);
	pthread_sigmask(SIG_BLOCK, NULL, &after);
	sigpending(&pend);
	l->mask_restored = true;
	for (int s = 1; s < NSIG; s++)
		if (sigismember(&before, s) != sigismember(&after, s))
			l->mask_restored = false;
	l->signal_left = l->signo && sigismember(&pend, l->signo);
	/* With the old mask back, nothing stray may interrupt a wait. */
	struct timespec ts = { 0, 50 * 1000000L };
	l->rc3 = ppoll(NULL, 0, &ts, NULL);
	l->e3 = l->rc3 < 0 ? errno : 0;
	return NULL;
}

static void leader_start(struct leader *l, pthread_t *t, px_intr *in, int signo)
{
	memset(l, 0, sizeof(*l));
	l->in = in;
	l->signo = in->fd < 0 ? (signo ? signo : SIGURG) : 0;
	l->pre_block = pre_block && l->signo;
	sem_init(&l->ready, 0, 0);
	sem_init(&l->go, 0, 0);
	assert_int_equal(pthread_create(t, NULL, leader_main, l), 0);
	sem_wait(&l->ready);
}

static void leader_join(struct leader *l, pthread_t t)
{
	pthread_join(t, NULL);
	sem_destroy(&l->ready);
	sem_destroy(&l->go);
}

static void check_woken(px_intr *in, const struct leader *l)
{
	if (in->fd >= 0) {
		assert_int_equal(l->rc1, 1);
	} else {
		assert_int_equal(l->rc1, -1);
		assert_int_equal(l->e1, EINTR);
	}
	assert_true(l->ms1 < 4000);
	/* Drained: the second wait times out. */
	assert_int_equal(l->rc2, 0);
	assert_true(l->mask_restored);
	assert_false(l->signal_left);
	assert_int_equal(l->rc3, 0);
}

/* Interrupt while the leader is blocked in its wait. */
static void run_during_wait(int t, int signo)
{
	px_intr *in = make(t, signo);
	struct leader l;
	pthread_t th;

	leader_start(&l, &th, in, signo);
	sem_post(&l.go);
	usleep(100 * 1000);
	/* One burst under one lock hold, as several posts queued at once. */
	pthread_mutex_lock(&mu);
	for (int i = 0; i < 3; i++)
		in->ops->interrupt(in);
	pthread_mutex_unlock(&mu);
	leader_join(&l, th);
	check_woken(in, &l);
	in->ops->destroy(in);
}

/* Interrupt after activation but before the wait starts: not lost. */
static void run_before_wait(int t, int signo)
{
	px_intr *in = make(t, signo);
	struct leader l;
	pthread_t th;

	leader_start(&l, &th, in, signo);
	locked_call(in, in->ops->interrupt);
	usleep(20 * 1000);     /* a signal would have been delivered by now */
	sem_post(&l.go);
	leader_join(&l, th);
	check_woken(in, &l);
	assert_true(l.ms1 < 1000);
	in->ops->destroy(in);
}

/* Interrupted, then the leader steps down without waiting. */
static void run_deactivate_pending(int t, int signo)
{
	px_intr *in = make(t, signo);
	struct leader l;
	pthread_t th;

	leader_start(&l, &th, in, signo);
	l.wait_only_once = true;
	locked_call(in, in->ops->interrupt);
	usleep(20 * 1000);
	sem_post(&l.go);
	leader_join(&l, th);
	assert_true(l.mask_restored);
	assert_false(l.signal_left);
	assert_int_equal(l.rc3, 0);    /* no stray EINTR */
	in->ops->destroy(in);
}

static void test_pipe(void **state)
{
	(void)state;
	run_during_wait(PX_INTR_PIPE, 0);
	run_before_wait(PX_INTR_PIPE, 0);
	run_deactivate_pending(PX_INTR_PIPE, 0);
}

static void test_eventfd(void **state)
{
	(void)state;
	run_during_wait(PX_INTR_EVENTFD, 0);
	run_before_wait(PX_INTR_EVENTFD, 0);
	run_deactivate_pending(PX_INTR_EVENTFD, 0);
}

static void test_signal(void **state)
{
	(void)state;
	run_during_wait(PX_INTR_SIGNAL, 0);
	run_before_wait(PX_INTR_SIGNAL, 0);
	run_deactivate_pending(PX_INTR_SIGNAL, 0);
	/* The leader thread had the signal blocked already: the wait still
	 * sees it, and stepping down leaves none pending. */
	pre_block = true;
	run_during_wait(PX_INTR_SIGNAL, 0);
	run_before_wait(PX_INTR_SIGNAL, 0);
	run_deactivate_pending(PX_INTR_SIGNAL, 0);
	pre_block = false;
}

/* A real-time interrupt signal refused while the process's queue of
 * signals is full (RLIMIT_SIGPENDING): the next interrupt, once there is
 * room, still wakes the leader.  The refused one used to leave the
 * strategy's "pending" flag set for good, so that every later interrupt
 * was skipped and a dedicated leader waited for its bound each time (a
 * helper's review of 2026-12-05). */
static void test_signal_after_full_queue(void **state)
{
	(void)state;
	int fill = SIGRTMIN + 10, signo = SIGRTMIN + 8;
	sigset_t s;
	struct rlimit old, rl;
	union sigval v = { 0 };
	struct timespec zero = { 0, 0 };

	/* Blocked before the leader starts, which inherits the mask: the
	 * filling signals must reach no thread. */
	sigemptyset(&s);
	sigaddset(&s, fill);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	px_intr *in = make(PX_INTR_SIGNAL, signo);
	struct leader l;
	pthread_t th;
	leader_start(&l, &th, in, signo);
	sem_post(&l.go);
	usleep(100 * 1000);

	assert_int_equal(getrlimit(RLIMIT_SIGPENDING, &old), 0);
	rl = old;
	rl.rlim_cur = old.rlim_max < 16 ? old.rlim_max : 16;
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &rl), 0);
	int queued = 0;
	while (queued < 100000 && sigqueue(getpid(), fill, v) == 0)
		queued++;
	assert_int_equal(errno, EAGAIN);
	locked_call(in, in->ops->interrupt);     /* refused */
	while (sigtimedwait(&s, NULL, &zero) == fill)
		;
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &old), 0);
	locked_call(in, in->ops->interrupt);     /* goes */

	leader_join(&l, th);
	check_woken(in, &l);
	in->ops->destroy(in);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}

/* ------------------------------------------------------------------ */
/* Properties                                                           */
/* ------------------------------------------------------------------ */

static void check_fd_flags(int fd)
{
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
}

static void test_fd_props(void **state)
{
	px_intr *p = make(PX_INTR_PIPE, 0), *e = make(PX_INTR_EVENTFD, 0);
	struct pollfd pfd = { .events = POLLIN };
	int n = 0;
	uint64_t v = 0;

	(void)state;
	check_fd_flags(p->fd);
	check_fd_flags(e->fd);
	assert_null(p->wait_mask);
	assert_null(e->wait_mask);
	assert_string_equal(p->ops->name, "pipe");
	assert_string_equal(e->ops->name, "eventfd");

	/* Not readable until interrupted; several interrupts, one write. */
	pfd.fd = p->fd;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	for (int i = 0; i < 5; i++)
		locked_call(p, p->ops->interrupt);
	assert_int_equal(poll(&pfd, 1, 0), 1);
	assert_int_equal(ioctl(p->fd, FIONREAD, &n), 0);
	assert_int_equal(n, 1);
	locked_call(p, p->ops->drain);
	assert_int_equal(poll(&pfd, 1, 0), 0);
	/* And again after the drain. */
	locked_call(p, p->ops->interrupt);
	assert_int_equal(poll(&pfd, 1, 0), 1);

	pfd.fd = e->fd;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	for (int i = 0; i < 5; i++)
		locked_call(e, e->ops->interrupt);
	assert_int_equal(poll(&pfd, 1, 0), 1);
	assert_int_equal(read(e->fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	assert_int_equal(v, 1);
	locked_call(e, e->ops->drain);      /* nothing left: must not block */
	assert_int_equal(poll(&pfd, 1, 0), 0);

	p->ops->destroy(p);
	e->ops->destroy(e);
}

static bool handler_is_default(int signo)
{
	struct sigaction sa;

	sigaction(signo, NULL, &sa);
	return !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL;
}

static void test_signal_props(void **state)
{
	struct sigaction sa;
	px_intr *a, *b;

	(void)state;
	assert_true(handler_is_default(SIGUSR1));
	a = make(PX_INTR_SIGNAL, SIGUSR1);
	assert_string_equal(a->ops->name, "signal");
	assert_int_equal(a->fd, -1);
	assert_non_null(a->wait_mask);
	assert_false(sigismember(a->wait_mask, SIGUSR1));
	sigaction(SIGUSR1, NULL, &sa);
	assert_false(handler_is_default(SIGUSR1));
	assert_false(sa.sa_flags & SA_RESTART);

	/* Shared by a second user; put back after the last one. */
	b = make(PX_INTR_SIGNAL, SIGUSR1);
	a->ops->destroy(a);
	assert_false(handler_is_default(SIGUSR1));
	b->ops->destroy(b);
	assert_true(handler_is_default(SIGUSR1));

	/* The whole cycle on a signal other than the default. */
	run_during_wait(PX_INTR_SIGNAL, SIGUSR1);
	run_before_wait(PX_INTR_SIGNAL, SIGUSR1);
	run_deactivate_pending(PX_INTR_SIGNAL, SIGUSR1);
	assert_true(handler_is_default(SIGUSR1));

	/* No leader: an interrupt goes nowhere and breaks nothing. */
	a = make(PX_INTR_SIGNAL, 0);
	locked_call(a, a->ops->interrupt);
	locked_call(a, a->ops->drain);
	a->ops->destroy(a);
}

static void app_handler(int s)
{
	(void)s;
}

static void test_errors(void **state)
{
	static const int bad_types[] = {
		PX_INTR_NONE, PX_INTR_NATIVE, PX_INTR_COUNT, 99
	};
	static const int bad_signals[] = { -1, SIGKILL, SIGSTOP, NSIG, 1000 };
	struct sigaction sa, old;
	px_processor_config c;
	px_intr *in = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
		c = intr_cfg(bad_types[i], 0);
		assert_int_equal(px__intr_create(&c, &in), -EINVAL);
	}
	for (size_t i = 0; i < sizeof(bad_signals) / sizeof(bad_signals[0]); i++) {
		c = intr_cfg(PX_INTR_SIGNAL, bad_signals[i]);
		assert_int_equal(px__intr_create(&c, &in), -EINVAL);
	}
	/* A signal the C library keeps for itself. */
	if (SIGRTMIN > 32) {
		c = intr_cfg(PX_INTR_SIGNAL, 32);
		assert_int_equal(px__intr_create(&c, &in), -EINVAL);
	}
	assert_int_equal(px__intr_create(NULL, &in), -EINVAL);

	/* The application's own handler is never replaced. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = app_handler;
	sigaction(SIGUSR2, &sa, &old);
	c = intr_cfg(PX_INTR_SIGNAL, SIGUSR2);
	assert_int_equal(px__intr_create(&c, &in), -EBUSY);
	sigaction(SIGUSR2, NULL, &sa);
	assert_ptr_equal(sa.sa_handler, app_handler);

	/* px_create says which signal, and why: its message was "cannot
	 * create provider select (...): Device or resource busy". */
	char text[96], err[512] = "";
	px_proactor *px = NULL;
	snprintf(text, sizeof(text), "epoll interrupt=signal signal=%d", SIGUSR2);
	assert_int_equal(px_create(&px, text, err, sizeof(err)), -EBUSY);
	char want[32];
	snprintf(want, sizeof(want), "signal %d", SIGUSR2);
	if (!strstr(err, want) || !strstr(err, "handler"))
		fail_msg("px_create's message does not name the signal and "
			 "the application's handler: %s", err);
	sigaction(SIGUSR2, &old, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd_props),
		cmocka_unit_test(test_pipe),
		cmocka_unit_test(test_eventfd),
		cmocka_unit_test(test_signal),
		cmocka_unit_test(test_signal_after_full_queue),
		cmocka_unit_test(test_signal_props),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
