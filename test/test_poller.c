/*
 * test_poller.c - the readiness pollers (wait_strategies/poller.h) on
 * their own, without any provider: select, poll and epoll in turn.
 *
 * Checked: a pipe that becomes readable is reported with PX_POLL_IN (and
 * not before); a report disarms until the next set(); after remove() it
 * is not reported; a writable end is reported with PX_POLL_OUT; the
 * interrupt wakes a wait from another thread and is reported through
 * fired, not as an event; poll and select report a closed descriptor as
 * PX_POLL_NVAL; the hang-up of a socket watched for writing only is
 * reported, data arriving on it is not; with more registrations than the
 * arrays start with, removed out of order, exactly the right descriptors
 * are reported; select refuses a descriptor >= FD_SETSIZE.  linux_rt
 * (real-time signals) runs the same checks with a pipe instead of an
 * eventfd interrupt (an eventfd raises no signal, so it is refused), and
 * a check of its own: more ready descriptors than the signal queue holds
 * are all reported, exactly once.  The pollers that can watch another
 * processor's descriptor for a lone thread (epoll, level and edge): a
 * watched pipe that becomes readable, or is readable already, ends the
 * next wait at once with nothing reported and the interrupt not fired;
 * the watch is for one report (a wait after it blocks again until watched
 * again), and watching another descriptor drops the first.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../wait_strategies/poller.h"

typedef int (*create_fn)(px_intr *in, px_poller **out);

typedef struct kind {
	const char *name;
	create_fn create;
	bool sees_closed;       /* reports a closed fd as NVAL */
	bool live;              /* PX_POLLER_LIVE */
	bool no_eventfd;        /* refuses an eventfd interrupt: a pipe then */
} kind;

static const kind kinds[] = {
	{ "select", px__poller_select_create, true, false, false },
	{ "poll", px__poller_poll_create, true, false, false },
	{ "epoll", px__poller_epoll_create, false, true, false },
	{ "linux_rt", px__poller_linux_rt_create, false, true, true },
};

typedef struct fx {
	const kind *k;
	px_intr *in;
	px_poller *pl;
	int p[2];               /* a pipe: p[0] to watch, p[1] to write */
} fx;

static fx *setup_kind(const kind *k, int it)
{
	px_processor_config c;
	fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	memset(&c, 0, sizeof(c));
	c.processor = PX_PROCESSOR_SHARED;
	strcpy(c.provider, "select");
	strcpy(c.wait, "poll");
	strcpy(c.interrupt, px__intr_name(it));
	f->k = k;
	if (k->no_eventfd && it == PX_INTR_EVENTFD) {
		/* Refused, with a pipe taken instead. */
		assert_int_equal(px__intr_create(&c, &f->in), 0);
		assert_int_equal(k->create(f->in, &f->pl), -EINVAL);
		f->in->ops->destroy(f->in);
		strcpy(c.interrupt, px__intr_name(PX_INTR_PIPE));
	}
	assert_int_equal(px__intr_create(&c, &f->in), 0);
	assert_int_equal(k->create(f->in, &f->pl), 0);
	assert_ptr_equal(f->pl->intr, f->in);
	assert_false(f->pl->fired);
	/* One empty wait first: linux_rt takes this thread as its leader
	 * then, and the first wait of a new leader does not block. */
	f->pl->ops->prepare(f->pl);
	assert_true(f->pl->ops->wait(f->pl, 0) >= 0);
	assert_int_equal(f->pl->ops->collect(f->pl, NULL, 0), 0);
	assert_int_equal(pipe2(f->p, O_CLOEXEC | O_NONBLOCK), 0);
	return f;
}

static void teardown_fx(fx *f)
{
	f->pl->ops->destroy(f->pl);
	f->in->ops->destroy(f->in);
	if (f->p[0] >= 0)
		close(f->p[0]);
	close(f->p[1]);
	free(f);
}

/* One wait: prepare, wait, collect everything.  Returns the events of fd
 * (0 if not reported); *nev gets the number of events in all. */
static unsigned wait_for(fx *f, int fd, int timeout_ms, size_t *nev)
{
	px_poll_event ev[8];
	unsigned got = 0;
	size_t n, total = 0;
	int rc;

	f->pl->ops->prepare(f->pl);
	rc = f->pl->ops->wait(f->pl, timeout_ms);
	assert_true(rc >= 0 || rc == -EINTR);
	while ((n = f->pl->ops->collect(f->pl, ev, 8)) > 0) {
		for (size_t i = 0; i < n; i++) {
			assert_true(ev[i].fd != f->in->fd);
			if (ev[i].fd == fd)
				got |= ev[i].events;
		}
		total += n;
	}
	if (nev)
		*nev = total;
	return got;
}

static void readable_is_reported(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	px_poll_reg reg = { .fd = f->p[0] };
	size_t n;

	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	/* Nothing to read yet. */
	assert_int_equal(wait_for(f, f->p[0], 0, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(write(f->p[1], "x", 1), 1);
	assert_true(wait_for(f, f->p[0], 1000, &n) & PX_POLL_IN);
	assert_int_equal(n, 1);
	/* One-shot: still readable, but not reported until set again. */
	assert_int_equal(wait_for(f, f->p[0], 0, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	assert_true(wait_for(f, f->p[0], 1000, NULL) & PX_POLL_IN);
	f->pl->ops->remove(f->pl, &reg);
	teardown_fx(f);
}

static void removed_is_not_reported(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_PIPE);
	px_poll_reg reg = { .fd = f->p[0] };
	px_poll_reg wreg = { .fd = f->p[1] };
	size_t n;

	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	assert_int_equal(f->pl->ops->set(f->pl, &wreg, PX_POLL_OUT), 0);
	f->pl->ops->remove(f->pl, &reg);
	assert_int_equal(write(f->p[1], "x", 1), 1);
	/* The write end is still watched and writable. */
	assert_int_equal(wait_for(f, f->p[0], 100, &n), 0);
	assert_int_equal(n, 1);
	f->pl->ops->remove(f->pl, &wreg);
	assert_int_equal(wait_for(f, f->p[1], 50, &n), 0);
	assert_int_equal(n, 0);
	/* And can be watched again. */
	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	assert_true(wait_for(f, f->p[0], 1000, NULL) & PX_POLL_IN);
	f->pl->ops->remove(f->pl, &reg);
	teardown_fx(f);
}

static void writable_is_reported(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	px_poll_reg reg = { .fd = f->p[1] };

	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_OUT), 0);
	assert_true(wait_for(f, f->p[1], 1000, NULL) & PX_POLL_OUT);
	f->pl->ops->remove(f->pl, &reg);
	teardown_fx(f);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *interrupter(void *arg)
{
	px_intr *in = arg;
	struct timespec d = { 0, 50 * 1000000L };

	nanosleep(&d, NULL);
	in->ops->interrupt(in);
	return NULL;
}

static void interrupt_wakes_wait(const kind *k, int it)
{
	fx *f = setup_kind(k, it);
	px_poll_reg reg = { .fd = f->p[0] };
	pthread_t t;
	uint64_t t0, el;
	size_t n;

	/* Something watched that never becomes ready. */
	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	if (f->in->ops->leader_activated)
		f->in->ops->leader_activated(f->in);
	t0 = now_ms();
	assert_int_equal(pthread_create(&t, NULL, interrupter, f->in), 0);
	assert_int_equal(wait_for(f, f->p[0], 5000, &n), 0);
	el = now_ms() - t0;
	pthread_join(t, NULL);
	if (el > 3000)
		fail_msg("%s: interrupt %s did not wake the wait (%llu ms)",
			 k->name, px__intr_name(it), (unsigned long long)el);
	assert_int_equal(n, 0);
	assert_true(f->pl->fired);
	px_poller_drain(f->pl);
	assert_false(f->pl->fired);
	/* Drained: the next wait times out. */
	assert_int_equal(wait_for(f, f->p[0], 20, &n), 0);
	assert_false(f->pl->fired);
	if (f->in->ops->leader_deactivated)
		f->in->ops->leader_deactivated(f->in);
	f->pl->ops->remove(f->pl, &reg);
	teardown_fx(f);
}

/* A socket watched for writing alone, whose send buffer is full: data
 * arriving is not reported, but a shutdown both ways is (as an error or
 * hang-up), though it never becomes writable. */
static void writer_hangup_is_reported(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	static char junk[65536];
	int sv[2];
	unsigned ev;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
					     SOCK_CLOEXEC, 0, sv), 0);
	while (send(sv[0], junk, sizeof(junk), 0) > 0)
		;
	assert_int_equal(errno, EAGAIN);
	px_poll_reg reg = { .fd = sv[0] };
	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_OUT), 0);
	assert_int_equal(send(sv[1], "data", 4, 0), 4);
	assert_int_equal(wait_for(f, sv[0], 50, NULL), 0);
	assert_int_equal(shutdown(sv[0], SHUT_RDWR), 0);
	ev = wait_for(f, sv[0], 1000, NULL);
	if (!(ev & PX_POLL_ERR))
		fail_msg("%s: the hang-up of a socket watched for writing was "
			 "not reported (events 0x%x)", k->name, ev);
	f->pl->ops->remove(f->pl, &reg);
	close(sv[0]);
	close(sv[1]);
	teardown_fx(f);
}

/* More descriptors than the poll arrays start with, removed in an order
 * that moves slots around: exactly the written ones are reported. */
#define MANY 150
static void many_registrations(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	static int p[MANY][2];
	static px_poll_reg reg[MANY];
	px_poll_event ev[16];
	bool seen[MANY];
	size_t n;

	for (int i = 0; i < MANY; i++) {
		assert_int_equal(pipe2(p[i], O_CLOEXEC | O_NONBLOCK), 0);
		memset(&reg[i], 0, sizeof(reg[i]));
		reg[i].fd = p[i][0];
		assert_int_equal(f->pl->ops->set(f->pl, &reg[i], PX_POLL_IN), 0);
	}
	/* Every third one goes; then write to every one. */
	for (int i = 0; i < MANY; i += 3)
		f->pl->ops->remove(f->pl, &reg[i]);
	for (int i = 0; i < MANY; i++)
		assert_int_equal(write(p[i][1], "x", 1), 1);
	memset(seen, 0, sizeof(seen));
	f->pl->ops->prepare(f->pl);
	assert_true(f->pl->ops->wait(f->pl, 1000) > 0);
	while ((n = f->pl->ops->collect(f->pl, ev, 16)) > 0) {
		for (size_t j = 0; j < n; j++) {
			int i;

			for (i = 0; i < MANY && p[i][0] != ev[j].fd; i++)
				;
			assert_true(i < MANY);
			assert_false(seen[i]);
			assert_true(ev[j].events & PX_POLL_IN);
			seen[i] = true;
		}
	}
	for (int i = 0; i < MANY; i++)
		if (seen[i] != (i % 3 != 0))
			fail_msg("%s: descriptor %d of %d %s reported", k->name,
				 i, MANY, seen[i] ? "was" : "was not");
	for (int i = 0; i < MANY; i++) {
		f->pl->ops->remove(f->pl, &reg[i]);
		close(p[i][0]);
		close(p[i][1]);
	}
	teardown_fx(f);
}

static void closed_is_nval(const kind *k)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	px_poll_reg reg = { .fd = f->p[0] };
	px_poll_reg other = { .fd = f->p[1] };
	unsigned ev;

	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	assert_int_equal(f->pl->ops->set(f->pl, &other, PX_POLL_OUT), 0);
	close(f->p[0]);
	ev = wait_for(f, reg.fd, 1000, NULL);
	if (k->sees_closed)
		assert_true(ev & PX_POLL_NVAL);
	else
		assert_int_equal(ev, 0);  /* epoll forgets it silently */
	f->p[0] = -1;
	f->pl->ops->remove(f->pl, &reg);
	f->pl->ops->remove(f->pl, &other);
	teardown_fx(f);
}

/* The watch (poller.h): kinds whose ops have one. */
static void *late_writer(void *arg)
{
	int fd = *(int *)arg;
	struct timespec d = { 0, 50 * 1000000L };

	nanosleep(&d, NULL);
	if (write(fd, "w", 1) != 1)
		abort();
	return NULL;
}

/* One wait of at most timeout_ms; fails unless it ended before `within`
 * ms (or, with within < 0, after at least -within ms), with no event. */
static void watched_wait(fx *f, int timeout_ms, int within, const char *what)
{
	size_t n;
	uint64_t t0 = now_ms(), el;

	assert_int_equal(wait_for(f, -1, timeout_ms, &n), 0);
	el = now_ms() - t0;
	if (within >= 0 && el >= (uint64_t)within)
		fail_msg("%s: %s: the wait lasted %llu ms", f->k->name, what,
			 (unsigned long long)el);
	if (within < 0 && el < (uint64_t)-within)
		fail_msg("%s: %s: the wait ended after %llu ms", f->k->name,
			 what, (unsigned long long)el);
	assert_int_equal(n, 0);
	assert_false(f->pl->fired);
}

static void watch_wakes_wait(const kind *k, create_fn create)
{
	fx *f = setup_kind(k, PX_INTR_EVENTFD);
	px_poll_reg reg = { .fd = f->p[0] };
	int q[2], r[2];
	pthread_t t;
	char c;

	if (create != k->create) {
		/* Another poller of the same family (epoll's edge poller). */
		f->pl->ops->destroy(f->pl);
		assert_int_equal(create(f->in, &f->pl), 0);
	}
	if (!f->pl->ops->watch) {
		teardown_fx(f);
		return;
	}
	assert_int_equal(pipe2(q, O_CLOEXEC | O_NONBLOCK), 0);
	assert_int_equal(pipe2(r, O_CLOEXEC | O_NONBLOCK), 0);
	/* Something of its own watched that never becomes ready. */
	assert_int_equal(f->pl->ops->set(f->pl, &reg, PX_POLL_IN), 0);
	/* Not readable yet: the wait runs out. */
	f->pl->ops->watch(f->pl, q[0]);
	watched_wait(f, 30, -20, "nothing to read on the watched pipe");
	/* Becomes readable during the wait: the wait ends. */
	f->pl->ops->watch(f->pl, q[0]);
	assert_int_equal(pthread_create(&t, NULL, late_writer, &q[1]), 0);
	watched_wait(f, 5000, 3000, "written during the wait");
	pthread_join(t, NULL);
	/* Reported once: still readable, but not watched any more. */
	watched_wait(f, 30, -20, "a wait after the report, not watched again");
	/* Watched again while readable: at once. */
	f->pl->ops->watch(f->pl, q[0]);
	watched_wait(f, 5000, 3000, "readable before the wait");
	/* Watching another descriptor drops the first: q stays readable. */
	f->pl->ops->watch(f->pl, q[0]);
	f->pl->ops->watch(f->pl, r[0]);
	watched_wait(f, 30, -20, "the first dropped for another");
	assert_int_equal(write(r[1], "r", 1), 1);
	watched_wait(f, 5000, 3000, "the other one readable");
	/* Nothing was read from either pipe. */
	assert_int_equal(read(q[0], &c, 1), 1);
	assert_int_equal(read(r[0], &c, 1), 1);
	f->pl->ops->remove(f->pl, &reg);
	close(q[0]);
	close(q[1]);
	close(r[0]);
	close(r[1]);
	teardown_fx(f);
}

static void watch_wakes_wait_all(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		watch_wakes_wait(&kinds[i], kinds[i].create);
	watch_wakes_wait(&kinds[2], px__poller_epoll_edge_create);
}

/* ------------------------------------------------------------------ */

#define PER_KIND(fn)                                                           \
	static void fn##_all(void **state)                                     \
	{                                                                      \
		(void)state;                                                   \
		for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) \
			fn(&kinds[i]);                                         \
	}

PER_KIND(readable_is_reported)
PER_KIND(removed_is_not_reported)
PER_KIND(writable_is_reported)
PER_KIND(closed_is_nval)
PER_KIND(writer_hangup_is_reported)
PER_KIND(many_registrations)

static void interrupt_wakes_wait_all(void **state)
{
	const int its[] = { PX_INTR_EVENTFD, PX_INTR_PIPE,
					  PX_INTR_SIGNAL };

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		for (size_t j = 0; j < sizeof(its) / sizeof(its[0]); j++)
			if (!kinds[i].no_eventfd || its[j] != PX_INTR_EVENTFD)
				interrupt_wakes_wait(&kinds[i], its[j]);
}

static void flags_and_limits(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		fx *f = setup_kind(&kinds[i], PX_INTR_EVENTFD);
		px_poll_reg hi = { .fd = FD_SETSIZE };
		bool is_select = kinds[i].create == px__poller_select_create;

		assert_int_equal((f->pl->flags & PX_POLLER_LIVE) != 0,
				 kinds[i].live);
		assert_non_null(f->pl->ops->name);
		if (is_select) {
			assert_int_equal(f->pl->fd_limit, FD_SETSIZE);
			assert_int_equal(f->pl->ops->set(f->pl, &hi, PX_POLL_IN),
					 -EMFILE);
		} else {
			assert_true(f->pl->fd_limit > FD_SETSIZE);
		}
		teardown_fx(f);
	}
}

/* linux_rt: with the real-time signal queue limited to a few entries,
 * RT_MANY pipes become readable before any wait.  At most RT_LIMIT
 * signals can be queued, so most readiness is only found by the full poll
 * that follows the overflow (SIGIO); every pipe is reported exactly once,
 * and again after being read, armed again and written again. */
#define RT_MANY 400
#define RT_LIMIT 8
static void linux_rt_overflow(void **state)
{
	const kind *k = &kinds[3];
	static int p[RT_MANY][2];
	static px_poll_reg reg[RT_MANY];
	struct rlimit old, rl;
	px_poll_event ev[32];
	int seen[RT_MANY];
	size_t n;

	(void)state;
	assert_string_equal(k->name, "linux_rt");
	assert_int_equal(getrlimit(RLIMIT_SIGPENDING, &old), 0);
	rl = old;
	rl.rlim_cur = RT_LIMIT;
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &rl), 0);
	fx *f = setup_kind(k, PX_INTR_PIPE);
	for (int i = 0; i < RT_MANY; i++) {
		assert_int_equal(pipe2(p[i], O_CLOEXEC | O_NONBLOCK), 0);
		memset(&reg[i], 0, sizeof(reg[i]));
		reg[i].fd = p[i][0];
		assert_int_equal(f->pl->ops->set(f->pl, &reg[i], PX_POLL_IN), 0);
	}
	/* A first wait makes this thread the leader (and owner). */
	assert_int_equal(wait_for(f, -1, 0, &n), 0);
	assert_int_equal(n, 0);
	for (int round = 0; round < 3; round++) {
		uint64_t t0 = now_ms();
		size_t total = 0;
		char c;

		memset(seen, 0, sizeof(seen));
		for (int i = 0; i < RT_MANY; i++)
			assert_int_equal(write(p[i][1], "x", 1), 1);
		while (total < RT_MANY && now_ms() - t0 < 5000) {
			f->pl->ops->prepare(f->pl);
			assert_true(f->pl->ops->wait(f->pl, 100) >= 0);
			while ((n = f->pl->ops->collect(f->pl, ev, 32)) > 0) {
				for (size_t j = 0; j < n; j++) {
					int i;

					for (i = 0; i < RT_MANY && p[i][0] != ev[j].fd;
					     i++)
						;
					assert_true(i < RT_MANY);
					assert_true(ev[j].events & PX_POLL_IN);
					if (seen[i]++)
						fail_msg("round %d: pipe %d reported "
							 "twice", round, i);
					total++;
				}
			}
		}
		if (total != RT_MANY)
			fail_msg("round %d: %zu of %d ready pipes reported", round,
				 total, RT_MANY);
		/* Nothing more, once read and armed again. */
		for (int i = 0; i < RT_MANY; i++) {
			assert_int_equal(read(p[i][0], &c, 1), 1);
			assert_int_equal(f->pl->ops->set(f->pl, &reg[i], PX_POLL_IN),
					 0);
		}
		assert_int_equal(wait_for(f, -1, 20, &n), 0);
		assert_int_equal(n, 0);
	}
	for (int i = 0; i < RT_MANY; i++) {
		f->pl->ops->remove(f->pl, &reg[i]);
		/* Unregistered: O_ASYNC is off again. */
		assert_int_equal(fcntl(p[i][0], F_GETFL) & O_ASYNC, 0);
		close(p[i][0]);
		close(p[i][1]);
	}
	teardown_fx(f);
	assert_int_equal(setrlimit(RLIMIT_SIGPENDING, &old), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(readable_is_reported_all),
		cmocka_unit_test(removed_is_not_reported_all),
		cmocka_unit_test(writable_is_reported_all),
		cmocka_unit_test(interrupt_wakes_wait_all),
		cmocka_unit_test(watch_wakes_wait_all),
		cmocka_unit_test(closed_is_nval_all),
		cmocka_unit_test(writer_hangup_is_reported_all),
		cmocka_unit_test(many_registrations_all),
		cmocka_unit_test(flags_and_limits),
		cmocka_unit_test(linux_rt_overflow),
	};
	return cmocka_run_group_tests_name("poller", tests, NULL, NULL);
}
