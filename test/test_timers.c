/*
 * test_timers.c - the timer heap and periodic timers.
 *
 *   - 100,000 one-shot timers with random deadlines (0..100 ms), started
 *     by four threads that also run the loop, every other one cancelled
 *     (some before, some after they fire): each completes exactly once,
 *     ECANCELED exactly when px_timer_cancel returned 0, and none fires
 *     before its deadline (checked against the clock read before the start
 *     and against the deadline the completion reports);
 *   - the heap's order: timers started in a shuffled order with distinct
 *     deadlines, run by one thread, fire in deadline order, and equal
 *     deadlines in start order;
 *   - a periodic timer over 50 periods: the deadlines it reports are the
 *     first plus whole periods (no drift, whatever the callbacks' lateness),
 *     no callback comes before its deadline, cancel ends it with one
 *     ECANCELED callback and nothing after it;
 *   - a callback that stalls for several periods: the next callback
 *     reports the missed expiries in one (c->bytes > 1), not as a burst;
 *   - cancel from inside the timer's own callback, and px_destroy with a
 *     periodic timer pending: exactly one final ECANCELED each.
 *
 * No check depends on the machine being quiet: lateness is allowed
 * everywhere, earliness nowhere.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proactor.h"

#define ENGINE "provider=select wait=poll"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void watchdog(int sig)
{
	static const char msg[] = "\nWATCHDOG: a timer test hung\n";
	ssize_t rc = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)rc;
	(void)sig;
	_exit(1);
}

static px_proactor *make_px(void)
{
	px_config cfg;
	char err[256];
	assert_int_equal(px_config_parse(&cfg, ENGINE, err, sizeof err), 0);
	cfg.flags |= PX_CF_NO_ENV;
	px_proactor *px = NULL;
	int rc = px_create_config(&px, &cfg, err, sizeof err);
	if (rc < 0)
		fail_msg("px_create_config: %s", err);
	return px;
}

/* ------------------------------------------------------------------ */
/* 100,000 timers, four threads, half cancelled                         */
/* ------------------------------------------------------------------ */

#define MANY 100000
#define THREADS 4

typedef struct trec {
	atomic_int calls;
	int error;
	int cancel_rc;       /* 1: not cancelled; else px_timer_cancel's answer */
	uint64_t started_ns; /* clock read before px_timer_start */
	uint64_t delay_ns;
	uint64_t fired_ns;   /* clock read in the callback */
	uint64_t deadline;   /* c->offset */
	int64_t id;
} trec;

static trec *g_recs;
static px_proactor *g_px;
static atomic_int g_done;

static void many_cb(const px_completion *c)
{
	trec *t = c->user;
	uint64_t now = now_ns();
	if (atomic_fetch_add(&t->calls, 1) == 0) {
		t->fired_ns = now;
		t->error = c->error;
		t->deadline = c->offset;
	}
	atomic_fetch_add(&g_done, 1);
}

static void *many_thread(void *arg)
{
	int k = (int)(intptr_t)arg;
	unsigned seed = 12345u + (unsigned)k;
	int per = MANY / THREADS;
	trec *mine = g_recs + (size_t)k * (size_t)per;

	for (int i = 0; i < per; i++) {
		trec *t = &mine[i];
		t->cancel_rc = 1;
		t->delay_ns = (uint64_t)(rand_r(&seed) % 100000) * 1000u;
		t->started_ns = now_ns();
		t->id = px_timer_start(g_px, t->delay_ns, many_cb, t);
		if (t->id <= 0)
			return (void *)"px_timer_start failed";
		/* Cancel every other timer: half of those at once, the
		 * other half 200 starts later (by then the short ones have
		 * fired), the last of them after the loop. */
		if (i % 4 == 1)
			t->cancel_rc = px_timer_cancel(g_px, t->id);
		if (i % 4 == 3 && i >= 200)
			mine[i - 200].cancel_rc = px_timer_cancel(g_px, mine[i - 200].id);
		if (i % 64 == 0 && px_handle_events(g_px, 0) < 0)
			return (void *)"px_handle_events failed";
	}
	for (int i = per - 200; i < per; i++)
		if (i % 4 == 3)
			mine[i].cancel_rc = px_timer_cancel(g_px, mine[i].id);
	uint64_t limit = now_ns() + 20000000000ull;
	while (atomic_load(&g_done) < MANY && now_ns() < limit)
		if (px_handle_events(g_px, 10) < 0)
			return (void *)"px_handle_events failed";
	return NULL;
}

static void many_timers_four_threads(void **state)
{
	(void)state;
	g_recs = calloc(MANY, sizeof(*g_recs));
	assert_non_null(g_recs);
	atomic_store(&g_done, 0);
	g_px = make_px();

	pthread_t th[THREADS];
	for (int k = 0; k < THREADS; k++)
		assert_int_equal(pthread_create(&th[k], NULL, many_thread,
						(void *)(intptr_t)k), 0);
	const char *err = NULL;
	for (int k = 0; k < THREADS; k++) {
		void *ret;
		pthread_join(th[k], &ret);
		if (ret)
			err = ret;
	}
	/* Anything extra would show up here. */
	for (int i = 0; i < 5; i++)
		px_handle_events(g_px, 10);
	assert_int_equal(px_destroy(g_px), 0);
	if (err)
		fail_msg("%s", err);

	int cancelled = 0, fired = 0;
	for (int i = 0; i < MANY; i++) {
		trec *t = &g_recs[i];
		int calls = atomic_load(&t->calls);
		if (calls != 1)
			fail_msg("timer %d: %d callbacks", i, calls);
		if (t->cancel_rc == 0) {
			if (t->error != ECANCELED)
				fail_msg("timer %d: cancelled, error %d", i, t->error);
			cancelled++;
			continue;
		}
		if (t->cancel_rc != 1 && t->cancel_rc != -ENOENT)
			fail_msg("timer %d: px_timer_cancel returned %d", i, t->cancel_rc);
		if (t->error != 0)
			fail_msg("timer %d: fired with error %d", i, t->error);
		if (t->fired_ns < t->started_ns + t->delay_ns)
			fail_msg("timer %d of %llu us fired %llu us early", i,
				 (unsigned long long)(t->delay_ns / 1000),
				 (unsigned long long)((t->started_ns + t->delay_ns -
						       t->fired_ns) / 1000));
		if (t->deadline < t->started_ns + t->delay_ns ||
		    t->fired_ns < t->deadline)
			fail_msg("timer %d: deadline %llu, started %llu + %llu, fired %llu",
				 i, (unsigned long long)t->deadline,
				 (unsigned long long)t->started_ns,
				 (unsigned long long)t->delay_ns,
				 (unsigned long long)t->fired_ns);
		fired++;
	}
	printf("# %d fired, %d cancelled before firing\n", fired, cancelled);
	/* A quarter of the timers are cancelled right after their start:
	 * nearly all of those must be found pending. */
	if (cancelled < MANY / 8)
		fail_msg("only %d of %d cancels came before the timer fired",
			 cancelled, MANY / 2);
	free(g_recs);
}

/* ------------------------------------------------------------------ */
/* Order                                                                */
/* ------------------------------------------------------------------ */

#define ORD 2000

static int g_order[ORD];
static uint64_t g_order_dl[ORD];
static atomic_int g_norder;

static void order_cb(const px_completion *c)
{
	int n = atomic_fetch_add(&g_norder, 1);
	if (n < ORD) {
		g_order[n] = (int)(intptr_t)c->user;
		g_order_dl[n] = c->offset;
	}
}

/* One thread: callbacks run in the order the heap hands timers out, which
 * must be by deadline, and by start order for equal delays. */
static void heap_fires_in_deadline_order(void **state)
{
	(void)state;
	px_proactor *px = make_px();
	static int perm[ORD];
	unsigned seed = 7;
	for (int i = 0; i < ORD; i++)
		perm[i] = i;
	for (int i = ORD - 1; i > 0; i--) {
		int j = rand_r(&seed) % (i + 1);
		int tmp = perm[i];
		perm[i] = perm[j];
		perm[j] = tmp;
	}
	atomic_store(&g_norder, 0);
	/* Timer v waits 20 ms + (v / 2) us: the two of a pair have the same
	 * delay. */
	for (int i = 0; i < ORD; i++) {
		int v = perm[i];
		assert_true(px_timer_start(px, 20000000u + (uint64_t)(v / 2) * 1000u,
					   order_cb, (void *)(intptr_t)v) > 0);
	}
	uint64_t limit = now_ns() + 10000000000ull;
	while (atomic_load(&g_norder) < ORD && now_ns() < limit)
		px_handle_events(px, 10);
	assert_int_equal(atomic_load(&g_norder), ORD);
	assert_int_equal(px_destroy(px), 0);
	for (int k = 1; k < ORD; k++)
		if (g_order_dl[k] < g_order_dl[k - 1])
			fail_msg("callback %d: deadline %llu after one of %llu", k,
				 (unsigned long long)g_order_dl[k],
				 (unsigned long long)g_order_dl[k - 1]);
	/* Of a pair, the one started first fires first. */
	int pos[ORD];
	for (int k = 0; k < ORD; k++)
		pos[g_order[k]] = k;
	int first_start[ORD / 2];
	for (int i = ORD - 1; i >= 0; i--)
		first_start[perm[i] / 2] = perm[i];
	for (int p = 0; p < ORD / 2; p++) {
		int a = first_start[p], b = a ^ 1;
		if (pos[a] > pos[b])
			fail_msg("timers %d and %d (same delay): the later start fired first",
				 a, b);
	}
}

/* ------------------------------------------------------------------ */
/* Periodic                                                             */
/* ------------------------------------------------------------------ */

#define PMAX 256

typedef struct prec {
	atomic_int calls;
	int ncancel;           /* ECANCELED callbacks */
	int after_cancel;      /* callbacks after the ECANCELED one */
	uint64_t offset[PMAX];
	uint64_t bytes[PMAX];
	uint64_t at[PMAX];
	int n;                 /* expiry callbacks recorded */
	uint64_t total;        /* sum of bytes */
	int stall_at;          /* sleep in this callback, -1: never */
	int stall_ms;
	int cancel_at;         /* cancel from this callback, -1: never */
	int cancel_rc, cancel_again_rc;
	int64_t id;
	px_proactor *px;
	atomic_int running;
	int overlap;
} prec;

static void periodic_cb(const px_completion *c)
{
	prec *p = c->user;
	if (atomic_fetch_add(&p->running, 1) != 0)
		p->overlap++;
	atomic_fetch_add(&p->calls, 1);
	if (p->ncancel)
		p->after_cancel++;
	if (c->error == ECANCELED) {
		p->ncancel++;
	} else if (p->n < PMAX) {
		p->offset[p->n] = c->offset;
		p->bytes[p->n] = c->bytes;
		p->at[p->n] = now_ns();
		p->total += c->bytes;
		int k = p->n++;
		if (k == p->stall_at) {
			struct timespec ts = { 0, (long)p->stall_ms * 1000000L };
			nanosleep(&ts, NULL);
		}
		if (k == p->cancel_at) {
			p->cancel_rc = px_timer_cancel(p->px, p->id);
			p->cancel_again_rc = px_timer_cancel(p->px, p->id);
		}
	}
	atomic_fetch_sub(&p->running, 1);
}

static void pump_until(px_proactor *px, atomic_int *calls, int n, int ms)
{
	uint64_t limit = now_ns() + (uint64_t)ms * 1000000u;
	while (atomic_load(calls) < n && now_ns() < limit)
		assert_true(px_handle_events(px, 10) >= 0);
}

/* The reported deadlines are first + k periods, k the running total. */
static void check_phase(const prec *p, uint64_t period)
{
	uint64_t sum = 0;
	for (int k = 0; k < p->n; k++) {
		if (p->offset[k] != p->offset[0] + sum * period)
			fail_msg("callback %d: deadline %llu, expected %llu (drift)", k,
				 (unsigned long long)p->offset[k],
				 (unsigned long long)(p->offset[0] + sum * period));
		if (p->at[k] < p->offset[k] + (p->bytes[k] - 1) * period)
			fail_msg("callback %d ran before its deadline", k);
		if (p->bytes[k] < 1)
			fail_msg("callback %d reports %llu expiries", k,
				 (unsigned long long)p->bytes[k]);
		sum += p->bytes[k];
	}
}

static void periodic_keeps_its_phase(void **state)
{
	(void)state;
	const uint64_t period = 10000000u, first = 5000000u;
	prec *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->stall_at = p->cancel_at = -1;
	px_proactor *px = make_px();
	p->px = px;
	uint64_t t0 = now_ns();
	p->id = px_timer_periodic(px, first, period, periodic_cb, p);
	uint64_t t1 = now_ns();
	assert_true(p->id > 0);
	/* 50 periods of expiries. */
	uint64_t limit = now_ns() + 20000000000ull;
	while (p->total < 50 && now_ns() < limit)
		assert_true(px_handle_events(px, 10) >= 0);
	assert_true(p->total >= 50);
	assert_int_equal(px_timer_cancel(px, p->id), 0);
	assert_int_equal(px_timer_cancel(px, p->id), -ENOENT);
	int seen = atomic_load(&p->calls);
	pump_until(px, &p->calls, seen + 1, 5000);
	/* Three more periods: nothing may follow the final callback. */
	uint64_t end = now_ns() + 3 * period;
	while (now_ns() < end)
		px_handle_events(px, 5);
	assert_int_equal(px_destroy(px), 0);

	assert_int_equal(p->ncancel, 1);
	assert_int_equal(p->after_cancel, 0);
	assert_int_equal(p->overlap, 0);
	if (p->offset[0] < t0 + first || p->offset[0] > t1 + first)
		fail_msg("first deadline %llu outside [%llu, %llu]",
			 (unsigned long long)p->offset[0],
			 (unsigned long long)(t0 + first),
			 (unsigned long long)(t1 + first));
	check_phase(p, period);
	printf("# %d callbacks for %llu periods\n", p->n,
	       (unsigned long long)p->total);
	free(p);
}

static void periodic_reports_missed_periods(void **state)
{
	(void)state;
	const uint64_t period = 10000000u;
	prec *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->stall_at = 2;
	p->stall_ms = 35;
	p->cancel_at = -1;
	px_proactor *px = make_px();
	p->px = px;
	p->id = px_timer_periodic(px, period, period, periodic_cb, p);
	assert_true(p->id > 0);
	pump_until(px, &p->calls, 5, 10000);
	assert_true(atomic_load(&p->calls) >= 5);
	assert_int_equal(px_destroy(px), 0);
	assert_int_equal(p->ncancel, 1);
	assert_int_equal(p->after_cancel, 0);
	check_phase(p, period);
	/* The callback after the 35 ms stall covers at least three periods. */
	if (p->bytes[3] < 3)
		fail_msg("after a stall of 3.5 periods the next callback reports "
			 "%llu expiries", (unsigned long long)p->bytes[3]);
	free(p);
}

static void periodic_cancel_from_own_callback(void **state)
{
	(void)state;
	prec *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->stall_at = -1;
	p->cancel_at = 3;
	px_proactor *px = make_px();
	p->px = px;
	p->id = px_timer_periodic(px, 0, 2000000u, periodic_cb, p);
	assert_true(p->id > 0);
	pump_until(px, &p->calls, 5, 10000);
	uint64_t end = now_ns() + 20000000u;
	while (now_ns() < end)
		px_handle_events(px, 5);
	assert_int_equal(px_destroy(px), 0);
	assert_int_equal(p->cancel_rc, 0);
	assert_int_equal(p->cancel_again_rc, -ENOENT);
	assert_int_equal(p->n, 4);
	assert_int_equal(p->ncancel, 1);
	assert_int_equal(p->after_cancel, 0);
	free(p);
}

static void periodic_cancelled_by_destroy(void **state)
{
	(void)state;
	prec *p = calloc(1, sizeof(*p));
	prec *q = calloc(1, sizeof(*q));
	assert_non_null(p);
	assert_non_null(q);
	p->stall_at = p->cancel_at = q->stall_at = q->cancel_at = -1;
	px_proactor *px = make_px();
	p->px = q->px = px;
	/* One due in an hour, one that has expired and waits in the queue. */
	p->id = px_timer_periodic(px, 3600000000000ull, 1000000u, periodic_cb, p);
	q->id = px_timer_periodic(px, 0, 3600000000000ull, periodic_cb, q);
	assert_true(p->id > 0 && q->id > 0);
	assert_int_equal(px_timer_periodic(px, 0, 0, periodic_cb, p), -EINVAL);
	assert_int_equal(px_timer_periodic(px, 0, 1, NULL, p), -EINVAL);
	assert_int_equal(px_destroy(px), 0);
	assert_int_equal(atomic_load(&p->calls), 1);
	assert_int_equal(p->ncancel, 1);
	assert_int_equal(p->n, 0);
	/* q: its expiry (if destroy found it due) and then the final one. */
	assert_int_equal(q->ncancel, 1);
	assert_int_equal(q->after_cancel, 0);
	assert_true(q->n <= 1);
	free(p);
	free(q);
}

int main(void)
{
	signal(SIGALRM, watchdog);
	alarm(120);
	setvbuf(stdout, NULL, _IOLBF, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(many_timers_four_threads),
		cmocka_unit_test(heap_fires_in_deadline_order),
		cmocka_unit_test(periodic_keeps_its_phase),
		cmocka_unit_test(periodic_reports_missed_periods),
		cmocka_unit_test(periodic_cancel_from_own_callback),
		cmocka_unit_test(periodic_cancelled_by_destroy),
	};
	return cmocka_run_group_tests_name("timers", tests, NULL, NULL);
}
