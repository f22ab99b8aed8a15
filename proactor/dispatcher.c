/*
 * dispatcher.c - completed queue, timers and the leader/followers manager.
 *
 * Every thread inside px_handle_events is, at any moment, one of:
 *   handler   running callbacks of completed results (mutex released
 *             around each callback);
 *   leader    waiting in the OS for one shared processor (mutex released
 *             while it waits);
 *   follower  asleep on its own condition variable (mutex released).
 *
 * A call first dispatches what is queued (at most what was queued when it
 * looked, so a callback that keeps completing work at once cannot pin the
 * thread); if nothing is queued it tries to lead a processor that has work
 * and no leader; otherwise it sleeps as a follower until woken, until the
 * next timer is due, or until its timeout.
 *
 * Followers are kept in a list; the newest sleeper is woken first (LIFO,
 * warm caches) unless the config asks for FIFO.  Each follower has its own
 * condition variable, so a wake-up reaches exactly one chosen thread.
 */
#include <stdlib.h>
#include <time.h>

#include "core.h"

/* ------------------------------------------------------------------ */
/* Notification                                                         */
/* ------------------------------------------------------------------ */

bool px__dispatch_wake_follower(struct px_proactor *px)
{
	px_link *l = px->order == PX_FOLLOWERS_FIFO ? px_list_first(&px->followers)
						     : px_list_last(&px->followers);
	if (!l)
		return false;
	px_follower *f = px_container_of(l, px_follower, link);
	px_list_remove(&px->followers, l);
	f->woken = true;
	pthread_cond_signal(&f->cond);
	return true;
}

/* Interrupt the leader of one shared processor (not the caller itself). */
static bool disp_interrupt_shared_leader(struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (p->type == PX_PROCESSOR_SHARED && p->has_leader &&
		    !pthread_equal(p->leader, pthread_self())) {
			p->intr->ops->interrupt(p->intr);
			return true;
		}
	}
	return false;
}

void px__dispatch_post(struct px_proactor *px, px_result *r, int level)
{
	px_list_push_back(&px->completed, &r->link);
	if (level == PX_NOTIFY_NONE)
		return;
	if (px__dispatch_wake_follower(px))
		return;
	if (level == PX_NOTIFY_STRONG)
		disp_interrupt_shared_leader(px);
}

void px__dispatch_wake_all(struct px_proactor *px)
{
	while (px__dispatch_wake_follower(px))
		;
	for (int i = 0; i < px->nproc; i++)
		if (px->proc[i]->has_leader)
			px__processor_interrupt(px->proc[i]);
}

/* ------------------------------------------------------------------ */
/* Timers: a list sorted by deadline (ties keep start order).           */
/* ------------------------------------------------------------------ */

void px__timers_insert(struct px_proactor *px, px_result *r)
{
	px_link *pos = px_list_last(&px->timers);
	while (pos && px_result_of(pos)->deadline_ns > r->deadline_ns)
		pos = pos->prev == &px->timers.head ? NULL : pos->prev;
	px_list_insert_after(&px->timers, pos ? pos : &px->timers.head, &r->link);
	r->state = PX_RS_TIMER;
	if (px_list_first(&px->timers) == &r->link) {
		/* A new earliest deadline: whoever sleeps must recompute. */
		if (!px__dispatch_wake_follower(px))
			disp_interrupt_shared_leader(px);
	}
}

bool px__timers_expire(struct px_proactor *px, uint64_t now)
{
	bool any = false;
	px_link *l;
	while ((l = px_list_first(&px->timers)) &&
	       px_result_of(l)->deadline_ns <= now) {
		px_list_remove(&px->timers, l);
		px_result *r = px_result_of(l);
		r->state = PX_RS_POSTED;
		px_list_push_back(&px->completed, l);
		any = true;
	}
	return any;
}

uint64_t px__timers_next(const struct px_proactor *px)
{
	px_link *l = px_list_first(&px->timers);
	return l ? px_result_of(l)->deadline_ns : PX_NS_INF;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                             */
/* ------------------------------------------------------------------ */

/* The proactor whose callback this thread is running, if any, and the
 * descriptor of that callback's operation. */
static __thread struct px_proactor *disp_tls_dispatching;
static __thread int disp_tls_fd = -1;

int px__dispatch_current_fd(const struct px_proactor *px)
{
	return disp_tls_dispatching == px ? disp_tls_fd : -1;
}

int px__dispatch_level_for_caller(struct px_proactor *px)
{
	/* A thread running a callback goes back to the queue by itself, so a
	 * result it queues needs no interrupt of a leader; a sleeping
	 * follower may still help. */
	return disp_tls_dispatching == px ? PX_NOTIFY_FOLLOWER : PX_NOTIFY_STRONG;
}

void px__dispatch_one(struct px_proactor *px, px_result *r)
{
	r->state = PX_RS_COMPLETED;
	px_callback *cb = r->cb;
	struct px_proactor *saved = disp_tls_dispatching;
	int saved_fd = disp_tls_fd;
	disp_tls_dispatching = px;
	disp_tls_fd = r->c.fd;
	pthread_mutex_unlock(&px->lock);      /* unlock point 1 */
	cb(&r->c);
	pthread_mutex_lock(&px->lock);
	disp_tls_dispatching = saved;
	disp_tls_fd = saved_fd;
	px__alloc_put(&px->alloc, r);
}

/* Pick a shared processor this thread may lead: it has work, no leader.
 * Rotates the starting point so that with one thread and two processors
 * neither is starved. */
static px_processor *disp_pick_processor(struct px_proactor *px)
{
	for (int k = 0; k < px->nproc; k++) {
		px_processor *p = px->proc[(px->next_pick + k) % px->nproc];
		if (p->type == PX_PROCESSOR_SHARED && !p->has_leader &&
		    px__processor_has_work(p)) {
			px->next_pick = (unsigned)(p->index + 1);
			return p;
		}
	}
	return NULL;
}

/* Another shared processor besides p needs a leader and nobody can take it:
 * p's leader must not sleep for long. */
static bool disp_other_needs_leader(struct px_proactor *px, px_processor *p)
{
	if (px->nfollowers)
		return false;
	for (int i = 0; i < px->nproc; i++) {
		px_processor *q = px->proc[i];
		if (q != p && q->type == PX_PROCESSOR_SHARED && !q->has_leader &&
		    px__processor_has_work(q))
			return true;
	}
	return false;
}

/* Hand-offs.  Waking a follower costs a futex wake and a context switch,
 * and when the woken thread finds nothing left to do, a futex wait too.
 * When one wait mechanism serialises the kernel work anyway (a single
 * completion ring), a second thread pays only when there is enough
 * callback work to share.  A thread
 * with n callbacks to run asks for help (a follower to run some of them, or
 * to lead while it runs them) only when the n - 1 it could give away take
 * longer than PX_HANDOFF_NS at the callbacks' measured average. */
#define PX_HANDOFF_NS 50000u

static bool disp_worth_help(const struct px_proactor *px, size_t n)
{
	/* Before the first batch is measured, help as soon as there are two. */
	return n > 1 && (!px->cb_ns ||
			 (uint64_t)(n - 1) * px->cb_ns >= PX_HANDOFF_NS);
}

/* Fold the time of a batch of n callbacks into the average (1/8 weight).
 * The time is wall time, so a batch in which the thread was preempted
 * looks slow: a sample counts for at most 4 times the average (plus 1 µs),
 * so that one preemption does not make the callbacks look long for the next
 * hundred batches, while a lasting change still shows within a few. */
static void disp_note_cb_time(struct px_proactor *px, uint64_t ns, int n)
{
	uint64_t per = ns / (uint64_t)n;
	uint64_t cap = 4 * px->cb_ns + 1000;
	if (px->cb_ns && per > cap)
		per = cap;
	px->cb_ns = px->cb_ns - px->cb_ns / 8 + per / 8;
}

/* See step 3 of px__dispatch_handle_events: the first bound, and how far it
 * doubles while the checks find nothing to do (an idle proactor with
 * operations pending). */
#define PX_FOLLOWER_CHECK_NS 20000000u
#define PX_FOLLOWER_CHECK_MAX_NS 1000000000u

static bool disp_any_work(const struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++)
		if (px->proc[i]->type == PX_PROCESSOR_SHARED &&
		    px__processor_has_work(px->proc[i]))
			return true;
	return false;
}

static uint64_t disp_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static void disp_abs_timespec(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

int px__dispatch_handle_events(struct px_proactor *px, int timeout_ms)
{
	uint64_t now = px__now_ns();
	uint64_t deadline = timeout_ms < 0 ? PX_NS_INF
					   : now + (uint64_t)timeout_ms * 1000000u;
	int n = 0;
	uint64_t check = PX_FOLLOWER_CHECK_NS;

	pthread_mutex_lock(&px->lock);
	px->nthreads++;
	for (;;) {
		if (px->stopped || px->destroying) {
			n = -ESHUTDOWN;
			break;
		}

		/* Step 1: dispatch what is queued now. */
		if (px_list_first(&px->timers))
			px__timers_expire(px, now);
		if (!px_list_empty(&px->completed)) {
			size_t batch = px_list_count(&px->completed);
			int done = 0;
			px->nhandlers++;
			if (disp_worth_help(px, batch))
				px__dispatch_wake_follower(px);
			uint64_t t0 = px__now_ns();
			/* A sample counts only if no thread led meanwhile: a
			 * leader holds the mutex while it collects, and a start
			 * from a callback waits for it, or submits for it.
			 * That is the cost of handing off, not of the
			 * callbacks, and counting it would make hand-offs
			 * breed hand-offs. */
			bool alone = px->nleaders == 0;
			while (batch-- > 0 && !px->stopped) {
				px_link *l = px_list_pop_front(&px->completed);
				if (!l)
					break;
				px__dispatch_one(px, px_result_of(l));
				done++;
				alone = alone && px->nleaders == 0;
			}
			if (done && (alone || !px->cb_ns))  /* (or a first guess) */
				disp_note_cb_time(px, px__now_ns() - t0, done);
			n += done;
			px->nhandlers--;
			break;
		}

		/* Step 2: lead a processor that has work and no leader. */
		px_processor *p = disp_pick_processor(px);
		if (p) {
			uint64_t until = disp_min_u64(deadline, px__timers_next(px));
			int ms = px__ms_until(until, now);
			check = PX_FOLLOWER_CHECK_NS;
			px->nleaders++;
			px__processor_lead_begin(p);
			if (disp_other_needs_leader(px, p) && (ms < 0 || ms > 1))
				ms = 1;
			px__processor_handle_aio_events(p, ms);
			px__processor_lead_end(p);
			px->nleaders--;
			/* Leadership released: if the processor still has
			 * work, a sleeping thread may take it over while we
			 * dispatch what we collected. */
			if (px__processor_has_work(p) &&
			    disp_worth_help(px, px_list_count(&px->completed) + 1))
				px__dispatch_wake_follower(px);
			now = px__now_ns();
			if (px_list_empty(&px->completed) &&
			    !(px__timers_next(px) <= now) && now >= deadline)
				break;
			continue;
		}

		/* Step 3: sleep as a follower.  While a processor has work,
		 * not for longer than PX_FOLLOWER_CHECK_NS: a thread that
		 * dispatches cheap callbacks leads again afterwards instead of
		 * handing off (disp_worth_help), and should one of its callbacks
		 * block (say, until another operation completes), a follower
		 * must take the lead.  The bound doubles (up to 1 s) while
		 * the checks find a leader in place, so that idle followers
		 * of an idle proactor do not wake 50 times a second. */
		uint64_t until = disp_min_u64(deadline, px__timers_next(px));
		if (disp_any_work(px))
			until = disp_min_u64(until, now + check);
		if (until <= now) {
			if (deadline <= now && !(px__timers_next(px) <= now))
				break;
			continue; /* a timer is due: loop to expire it */
		}
		px_follower f;
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&f.cond, &ca);
		pthread_condattr_destroy(&ca);
		f.woken = false;
		px_link_init(&f.link);
		px_list_push_back(&px->followers, &f.link);
		px->nfollowers++;
		if (until == PX_NS_INF) {
			while (!f.woken)
				pthread_cond_wait(&f.cond, &px->lock);
		} else {
			struct timespec ts;
			disp_abs_timespec(until, &ts);
			while (!f.woken) {
				if (pthread_cond_timedwait(&f.cond, &px->lock, &ts) ==
				    ETIMEDOUT)
					break;
			}
		}
		px->nfollowers--;
		if (!f.woken) {
			px_list_remove(&px->followers, &f.link);
			if (check < PX_FOLLOWER_CHECK_MAX_NS)
				check *= 2;
		}
		pthread_cond_destroy(&f.cond);
		now = px__now_ns();
	}
	px->nthreads--;
	pthread_mutex_unlock(&px->lock);
	return n;
}
