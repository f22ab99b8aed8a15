/*
 * dispatcher.c - completed queue and the leader/followers manager (the
 * timers they wait for are in timer.c).
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

static void disp_wake(struct px_proactor *px, px_follower *f)
{
	px_list_remove(&px->followers, &f->link);
	px->st.follower_wakeups++;
	f->woken = true;
	pthread_cond_signal(&f->cond);
}

bool px__dispatch_wake_follower(struct px_proactor *px)
{
	px_link *l = px->order == PX_FOLLOWERS_FIFO ? px_list_first(&px->followers)
						     : px_list_last(&px->followers);
	if (!l)
		return false;
	disp_wake(px, px_container_of(l, px_follower, link));
	return true;
}

/* See step 3 of px__dispatch_handle_events: a follower's first bound on
 * its sleep, which doubles (to PX_FOLLOWER_CHECK_MAX_NS) while the checks
 * find nothing to do (an idle proactor with operations pending). */
#define PX_FOLLOWER_CHECK_NS 20000000u

/* Interrupt the leader of one shared processor (not the caller itself).
 *
 * long_only: only one whose wait in the kernel would last more than
 * PX_FOLLOWER_CHECK_NS, and only once per wait.  For a result queued by a
 * thread that runs a callback, with no follower asleep to wake
 * (PX_NOTIFY_FOLLOWER): that thread takes it when its callback returns,
 * but should the callback block, a shared leader saw the result only when
 * its wait ended, bounded by the idle check's gap, up to a second (a post
 * from a callback that then slept ran 150-755 ms later on every engine
 * with a shared processor; a helper's review of 2026-12-06).  A follower
 * asleep beside a running callback looks within PX_FOLLOWER_CHECK_NS
 * (step 3); so a thread running callbacks costs a busy leader at most one
 * interrupt a turn (test/lifecycle_races.c,
 * post_from_blocked_callback_reaches_leader).
 *
 * beyond (long_only): and only one whose wait ends after that time too
 * (disp_insure); 0 for any. */
static bool disp_interrupt_leader_beyond(struct px_proactor *px,
					bool long_only, uint64_t beyond)
{
	uint64_t soon = 0;  /* read from the clock only when a leader waits */

	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (p->type != PX_PROCESSOR_SHARED ||
		    !px__processor_led_by_other(p))
			continue;
		if (long_only) {
			if (!p->wait_end || p->wait_end <= beyond)
				continue;
			if (!soon)
				soon = px__now_ns() + PX_FOLLOWER_CHECK_NS;
			if (p->wait_end <= soon)
				continue;
		}
		p->wait_end = 0;
		p->st.leader_interrupts++;
		p->intr->ops->interrupt(p->intr);
		return true;
	}
	return false;
}

static bool disp_interrupt_shared_leader(struct px_proactor *px,
					 bool long_only)
{
	return disp_interrupt_leader_beyond(px, long_only, 0);
}

/* A thread running one of px's callbacks queued work that it will take
 * itself when the callback returns (a result its start finished at once,
 * a start on an idle processor), and no follower sleeps to look should
 * the callback block instead.  A shared leader blocked in a long wait is
 * interrupted, as for a post from a callback (long_only), but at most
 * once per PX_FOLLOWER_CHECK_NS: a leader whose wait begins within that
 * time after such an interrupt waits no longer than it (step 2), so that
 * it looks again by itself.  Sent at every such start, they came at the
 * rate of the starts (a chain of file reads from callbacks on
 * posix-aio+epoll, two threads: one per read, 16,000 a second, to the
 * thread leading the sockets, which went back to a long wait each
 * time). */
static bool disp_insured_lately(const struct px_proactor *px, uint64_t now)
{
	/* (now may be a little older than the time another thread noted.) */
	return px->insured_ns &&
	       (px->insured_ns > now || now - px->insured_ns < PX_FOLLOWER_CHECK_NS);
}

static void disp_insure(struct px_proactor *px)
{
	/* No clock read unless some thread leads: a lone thread running
	 * callbacks (one loop thread, the common case) pays two loads. */
	if (px->nfollowers || !px->nleaders)
		return;
	uint64_t now = px__now_ns();
	/* Within PX_FOLLOWER_CHECK_NS of the last interrupt, a wait begun
	 * since then ends by 2 * PX_FOLLOWER_CHECK_NS after it (step 2's
	 * bound), and is left alone.  A wait that ends later began before
	 * that interrupt, which did not reach it: the leader of the other
	 * shared processor (an interrupt goes to one).  That one is
	 * interrupted all the same, since the thread interrupted then may
	 * not look again: it may have run the result it came for and
	 * blocked in that callback, or left px_handle_events.  Skipped, a
	 * result queued meanwhile waited for the end of that other wait,
	 * up to the idle check's second, while the threads that could have
	 * run it were blocked (test_uring_rings,
	 * insured_leader_beside_other_part; TESTING.md, fixed problem
	 * 298). */
	uint64_t beyond = 0;
	if (disp_insured_lately(px, now))
		beyond = px->insured_ns + 2 * (uint64_t)PX_FOLLOWER_CHECK_NS;
	if (disp_interrupt_leader_beyond(px, true, beyond))
		px->insured_ns = now;
}

void px__dispatch_post(struct px_proactor *px, px_result *r, int level)
{
	px_list_push_back(&px->completed, &r->link);
	if (level == PX_NOTIFY_NONE)
		return;
	/* The caller runs it after its callback; but should that callback
	 * block, a follower asleep beside it looks within
	 * PX_FOLLOWER_CHECK_NS (the caller makes this level only while no
	 * follower sleeps longer), and with none a leader blocked in the
	 * kernel must be told, as for a post from a callback. */
	if (level == PX_NOTIFY_CALLER) {
		disp_insure(px);
		return;
	}
	if (px__dispatch_wake_follower(px))
		return;
	disp_interrupt_shared_leader(px, level != PX_NOTIFY_STRONG);
}

/* Own completions.  With a processor that several threads lead at once
 * (one completion ring each, say), a leader keeps what it collected and
 * runs it itself, so each thread keeps its sessions and does their kernel
 * work.  Completions change threads only on purpose, and are then "moved"
 * (px__dispatch_current), which moves their sessions to the new thread's
 * ring: a thread with a large batch hands half of it to a follower it
 * wakes (step 1); a thread that finds nothing to lead takes half of
 * another's own completions if there are enough (step 2b), or any when
 * its follower sleep ran out or its last wait collected nothing (step 1b),
 * so that completions held by a thread blocked in a callback are run by
 * someone. */
typedef struct px_own {
	px_link link;              /* on px->owns while items is not empty */
	px_list items;
	struct px_proactor *px;
	struct px_own *up;         /* the thread's call this one was made in */
} px_own;

static __thread px_own *disp_tls_own;

static px_own *disp_own_of(const struct px_proactor *px)
{
	return disp_tls_own && disp_tls_own->px == px ? disp_tls_own : NULL;
}

void px__dispatch_post_own(struct px_proactor *px, px_result *r)
{
	px_own *o = disp_own_of(px);

	if (!o) {
		px__dispatch_post(px, r, PX_NOTIFY_NONE);
		return;
	}
	if (px_list_empty(&o->items))
		px_list_push_back(&px->owns, &o->link);
	px_list_push_back(&o->items, &r->link);
}

bool px__dispatch_has_queued(const struct px_proactor *px)
{
	px_own *o = disp_own_of(px);

	return !px_list_empty(&px->completed) || (o && !px_list_empty(&o->items));
}

void px__dispatch_visit_own(struct px_proactor *px,
			    void (*fn)(px_result *r, void *arg), void *arg)
{
	for (px_link *l = px_list_first(&px->owns); l;
	     l = px_list_next(&px->owns, l)) {
		px_own *o = px_container_of(l, px_own, link);
		for (px_link *x = px_list_first(&o->items); x;
		     x = px_list_next(&o->items, x))
			fn(px_result_of(x), arg);
	}
}

static px_link *disp_own_pop(struct px_proactor *px, px_own *o)
{
	px_link *l = px_list_pop_front(&o->items);

	if (l && px_list_empty(&o->items))
		px_list_remove(&px->owns, &o->link);
	return l;
}

/* Move half (rounded up) of another thread's own completions to o, if it
 * has at least min. */
static bool disp_own_steal(struct px_proactor *px, px_own *o, size_t min)
{
	px_link *l = px_list_first(&px->owns);

	if (!l)
		return false;
	px_own *v = px_container_of(l, px_own, link);
	if (px_list_count(&v->items) < min)
		return false;
	size_t n = (px_list_count(&v->items) + 1) / 2;
	while (n-- > 0) {
		px_link *x = disp_own_pop(px, v);
		if (px_list_empty(&o->items))
			px_list_push_back(&px->owns, &o->link);
		px_list_push_back(&o->items, x);
	}
	return true;
}

/* Move the last n of o's completions to the shared queue (a follower
 * was woken to run them). */
static void disp_own_give(struct px_proactor *px, px_own *o, size_t n)
{
	while (n-- > 0) {
		px_link *l = px_list_last(&o->items);
		if (!l)
			break;
		px_list_remove(&o->items, l);
		px_list_push_front(&px->completed, l);
	}
	if (px_list_empty(&o->items))
		px_list_remove(&px->owns, &o->link);
}

/* Leaving px_handle_events: what is left goes to the shared queue. */
static void disp_own_leave(struct px_proactor *px, px_own *o)
{
	if (px_list_empty(&o->items))
		return;
	px_list_remove(&px->owns, &o->link);
	px_list_splice_back(&px->completed, &o->items);
	px__dispatch_wake_follower(px);
}

void px__dispatch_wake_all(struct px_proactor *px)
{
	while (px__dispatch_wake_follower(px))
		;
	for (int i = 0; i < px->nproc; i++)
		if (px->proc[i]->has_leader)
			px__processor_interrupt(px->proc[i]);
}

/* A new earliest timer, due at when.  Each sleeping follower computed its
 * bound without it.  One that wakes by then and whose call lasts until
 * then will see it: nothing to do.  Else the follower to wake is one
 * whose call lasts until then (the newest such, or the oldest with
 * followers=fifo): waking merely the newest follower, as before, woke
 * one whose own timeout came first, which went back to sleep until that
 * timeout and left, while a thread in px_handle_events(px, -1) slept on
 * without a bound and the timer never fired (test/timer_races.c,
 * timer_reaches_unbounded_follower).  With no such follower, a shared
 * leader recomputes its wait; with none either, the newest follower is
 * woken all the same.  The follower counted on has the duty: should its
 * call end before the timer (it ran a callback first, and a call that ran
 * callbacks returns), it passes the timer on as it leaves. */
void px__dispatch_timer_moved(struct px_proactor *px, uint64_t when)
{
	px_follower *pick = NULL;

	for (px_link *l = px_list_first(&px->followers); l;
	     l = px_list_next(&px->followers, l)) {
		px_follower *f = px_container_of(l, px_follower, link);
		if (f->deadline < when)
			continue;
		if (f->until <= when) {
			f->timer_duty = true;
			return;
		}
		if (!pick || px->order != PX_FOLLOWERS_FIFO)
			pick = f;
	}
	if (pick) {
		pick->timer_duty = true;
		disp_wake(px, pick);
	} else if (!disp_interrupt_shared_leader(px, false))
		px__dispatch_wake_follower(px);
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                             */
/* ------------------------------------------------------------------ */

/* Statistics: one more callback, classified. */
static void disp_count_delivery(struct px_proactor *px, const px_result *r)
{
	px->st.callbacks++;
	if (r->c.op == PX_OP_POST) {
		px->st.posts++;
	} else if (r->c.op == PX_OP_TIMER) {
		px->st.timer_callbacks++;
	} else if (r->proc) {
		px_proc_stats *st = &r->proc->st;
		if (r->c.error == ECANCELED)
			st->cancelled++;
		else if (r->c.error == ETIMEDOUT && r->timed_out)
			st->timed_out++;
		else
			st->completed++;
	}
}

/* The proactor whose callback this thread is running, if any, the result,
 * its descriptor, and whether it was taken from another thread
 * (disp_own_steal). */
__thread struct px_proactor *px__tls_dispatching;
static __thread px_result *disp_tls_current;
static __thread int disp_tls_fd = -1;
static __thread bool disp_tls_moving;
/* The proactor this thread last gave completions away on (step 1). */
static __thread struct px_proactor *disp_tls_gave;

/* Whether the calling thread (in px_handle_events) shares the loop with
 * others.  A thread that left px_handle_events less than PX_OTHERS_GONE_NS
 * ago still counts: a loop thread leaves and comes back between two calls
 * (after PX_DISPATCH_MORE callbacks, say), and a thread that believed
 * itself alone in such a gap gathered the operations its callbacks started
 * into its own ring (providers/uring.c, u->alone), so that on 100/2/8192/
 * 8192 every session could end up in one ring, led by one thread, with the
 * other asleep (1.1 CPUs busy instead of 1.9, in two runs of five).  The
 * thread that left last is known by the address of disp_tls_me, enough to
 * tell "me" from "another". */
#define PX_OTHERS_GONE_NS 10000000u
static __thread char disp_tls_me;

bool px__dispatch_others_here(const struct px_proactor *px)
{
	if (px->nthreads > 1)
		return true;
	if (px->destroying || !px->left_by ||
	    px->left_by == (const void *)&disp_tls_me)
		return false;
	return px__now_ns() - px->left_ns < PX_OTHERS_GONE_NS;
}

px_result *px__dispatch_current(bool *moved)
{
	*moved = disp_tls_moving;
	return disp_tls_current;
}

int px__dispatch_current_fd(const struct px_proactor *px)
{
	return px__tls_dispatching == px ? disp_tls_fd : -1;
}

int px__dispatch_level_for_caller(struct px_proactor *px)
{
	/* A thread running a callback goes back to the queue by itself, so a
	 * result it queues needs no interrupt of a leader; a sleeping
	 * follower may still help. */
	return px__tls_dispatching == px ? PX_NOTIFY_FOLLOWER : PX_NOTIFY_STRONG;
}

/* A shared processor went from idle to having work, and nobody leads it.
 * A thread that is running one of px's callbacks comes back to the loop
 * when its batch is done and leads it then (step 2 below).  Waking a
 * follower now (or as that thread leaves) costs a futex wake and a
 * context switch per start: with
 * one session whose every operation had finished (64 KiB blocks, two
 * threads) the woken thread took over the lead at every round trip, a
 * context switch each, and the two threads moved 0.7 of what one did.
 * But that thread may instead leave px_handle_events and not come back
 * soon, or block in a callback: then a follower must take the lead by
 * itself.  Every follower asleep meanwhile looks again within
 * PX_FOLLOWER_CHECK_NS, since its sleeps do not grow while a thread runs
 * callbacks (step 3); one asleep without that bound (nothing pending, or
 * a bound grown while the proactor was quiet) is woken, once: it sleeps
 * with the short bound after a wake-up.  Any other caller wakes one.
 * (Before, a follower could sleep on for up to 1.3 s after a polling
 * px_handle_events(px, 0) left with the operations its callback started:
 * test/lifecycle_races.c, leaver_hands_over_to_follower.) */
void px__dispatch_needs_leader(struct px_proactor *px)
{
	if (px__tls_dispatching == px && !px->nfollowers_long) {
		/* With no follower asleep at all, should the callback block,
		 * nobody would look: a thread leading another shared
		 * processor (a team's sockets while this start is a file
		 * read) is interrupted, if its wait lasts long
		 * (disp_insure), and leads both in turn.  A file read started by a
		 * callback that then blocked waited for that wait's end,
		 * about 700 ms, on linux-aio+epoll, posix-aio+epoll and
		 * io_uring for files beside epoll (test/lifecycle_races.c,
		 * idle_processor_start_from_blocked_callback). */
		disp_insure(px);
		return;
	}
	if (px__dispatch_wake_follower(px) || px__tls_dispatching == px)
		return;
	/* Nobody asleep to take it: a thread leading another shared
	 * processor (its wait bounded only by the idle check, up to 1 s)
	 * comes back and leads both in turn. */
	disp_interrupt_shared_leader(px, false);
}

void px__dispatch_one(struct px_proactor *px, px_result *r)
{
	/* An operation with a deadline: its timer goes (timer.c). */
	if (r->peer && r->c.op != PX_OP_TIMER)
		px__timeout_detach(px, r);
	/* Cancelled because its descriptor was found closed: say so (here,
	 * not when queued: a leader's own completions skip the shared
	 * queue). */
	if (r->fd_closed && r->c.error == ECANCELED)
		r->c.error = EBADF;
	/* The providers move an accepted socket off a number that pending
	 * operations name as soon as they have it, before they note the new
	 * file (px__accept_keep_off); this catches the rest (Linux AIO's
	 * accepts, whose old operations hold their own file meanwhile). */
	if (r->c.op == PX_OP_ACCEPT)
		px__accept_keep_off(px, r);
	disp_count_delivery(px, r);
	r->state = PX_RS_COMPLETED;
	px_callback *cb = r->cb;
	struct px_proactor *saved = px__tls_dispatching;
	px_result *saved_r = disp_tls_current;
	int saved_fd = disp_tls_fd;
	px__tls_dispatching = px;
	disp_tls_fd = r->c.fd;
	disp_tls_current = r;
	pthread_mutex_unlock(&px->lock);      /* unlock point 1 */
	cb(&r->c);
	pthread_mutex_lock(&px->lock);
	px__ops_delivered(px, r);
	if (!px_list_empty(&px->closing) && r->c.op < PX_OP_POST)
		px__close_delivered(px, r->c.fd);
	px__tls_dispatching = saved;
	disp_tls_current = saved_r;
	disp_tls_fd = saved_fd;
	/* A periodic timer goes back to the heap instead (timer.c). */
	if (r->c.op == PX_OP_TIMER && px__timer_after_callback(px, r))
		return;
	px__alloc_put(&px->alloc, r);
}

/* Pick a shared processor this thread may lead: it has work, no leader.
 * Rotates the starting point so that with one thread and two processors
 * neither is starved. */
static px_processor *disp_pick_processor(struct px_proactor *px, bool patient)
{
	for (int k = 0; k < px->nproc; k++) {
		px_processor *p = px->proc[(px->next_pick + k) % px->nproc];
		if (px__processor_may_lead(p, patient)) {
			px->next_pick = (unsigned)(p->index + 1);
			return p;
		}
	}
	return NULL;
}

/* Another shared processor besides p that needs a leader nobody can take
 * (no follower sleeps), or NULL. */
static px_processor *disp_other_needs_leader(struct px_proactor *px,
					     px_processor *p)
{
	if (px->nfollowers)
		return NULL;
	for (int i = 0; i < px->nproc; i++) {
		px_processor *q = px->proc[i];
		if (q != p && px__processor_may_lead(q, false))
			return q;
	}
	return NULL;
}

/* The timeout of p's lead while o also needs a leader that nobody else can
 * be: p's leader must come back to lead o.  Without more, it sleeps at
 * most 1 ms, and an operation of o that completes meanwhile waits for the
 * rest of it: a lone thread with one O_DIRECT read in flight at a time on
 * Linux AIO and an idle socket's read on epoll made 709-791 reads a
 * second, where Linux AIO alone made 14,131-14,860 (docs/PERFORMANCE.md).  So where p's wait can watch a descriptor
 * of o's that polls readable when o has something to report (Linux AIO's
 * io_getevents watching the epoll instance), p waits with that watch, and
 * o's own leads, in the other direction, do not block at all: the lone
 * thread sleeps in p's wait, woken by the first completion of either.
 * The 1 ms bound stays, for what o's wait does without a report (its
 * prepare), and for a watch the kernel refused (Linux AIO then stops
 * arming it, and o's completions wait up to 1 ms again). */
static int disp_lone_lead(px_processor *p, px_processor *o, int ms)
{
	const px_wait_ops *pw = p->wait->ops, *ow = o->wait->ops;
	int fd;

	if (pw->watch && ow->ready_fd && (fd = ow->ready_fd(o->wait)) >= 0) {
		o->ready_offered = true;
		pw->watch(p->wait, fd);
	} else if (ow->watch && pw->ready_fd &&
		   (p->ready_offered || pw->ready_fd(p->wait) >= 0)) {
		/* (Asked once only: io_uring's ready_fd also readies itself
		 * for the other's wait, which p's lead about to begin makes
		 * useless, a write and a read of its eventfd.) */
		p->ready_offered = true;
		ms = 0;
	} else if (o->collected) {
		/* Neither can watch the other.  o's latest lead found
		 * results, whose callbacks most likely started more of the
		 * same (a file read at a time): p is only polled, and the
		 * thread sleeps in o's next lead, bounded, for those.  A
		 * poll that finds nothing clears p's flag, so the one that
		 * just delivered gets the bounded sleep; two leads in a row
		 * that find nothing are 1 ms each, as before.  A lone thread
		 * reading one file block at a time through POSIX AIO's
		 * aiocb wait beside an idle socket read on epoll made
		 * 887-900 reads a second with 1 ms for each lead, and
		 * 8,419-9,298 this way (docs/PERFORMANCE.md, "Polling the
		 * processor that did not deliver"). */
		ms = 0;
	}
	return px__cap_ms(ms, 1);
}

/* Hand-offs.  Waking a follower costs a futex wake and a context switch,
 * and when the woken thread finds nothing left to do, a futex wait too.
 * When one wait mechanism serialises the kernel work anyway (a single
 * completion ring), a second thread pays only when there is enough
 * callback work to share.  A thread
 * with n callbacks to run asks for help (a follower to run some of them, or
 * to lead while it runs them) only when the n - 1 it could give away take
 * longer than PX_HANDOFF_NS (core.h) at the callbacks' measured
 * average. */

static bool disp_worth_help(const struct px_proactor *px, size_t n)
{
	/* Before the first batch is measured, help as soon as there are two. */
	return n > 1 && (!px->cb_ns ||
			 (uint64_t)(n - 1) * px->cb_ns >= PX_HANDOFF_NS);
}

/* The level for a result that a start finished at once (a readiness
 * engine's send with room, read with data waiting).  Made by a thread
 * running one of px's callbacks, it is that thread's next batch (step 1
 * runs what its callbacks finished, up to PX_DISPATCH_MORE), so a
 * follower is woken for it only when that batch is worth sharing: the
 * thread still has the rest of its current callback to run, so the new
 * result and those queued before it wait for about one callback and
 * more, and with callbacks of PX_HANDOFF_NS or more on average, or enough
 * results queued, a follower runs them sooner (disp_worth_help, counting
 * the current callback as one of the batch).  A follower that sleeps
 * without the bound that would make it look by itself should this thread
 * block in a callback is woken too (px__dispatch_needs_leader).  Waking
 * one for every such start, as before, handed one session on two threads
 * of the epoll engine back and forth at every message: 1/2/8192/8192 ran
 * 0.64-0.73 of the round trips it runs without those wake-ups.  The
 * level is not "none" but PX_NOTIFY_CALLER: with no follower asleep, a
 * shared leader whose wait would last long is interrupted (disp_insure),
 * since this thread's callback may block; the result waited for the end
 * of that wait, up to the idle check's second (test/lifecycle_races.c,
 * done_at_start_from_blocked_callback_reaches_leader).  In busy loops a
 * leader's waits rarely last that long: a one-session and a 20-session
 * echo on two threads counted 0 to 28 interrupts a second with it, 0 to
 * 32 without, among 3,000 to 140,000 waits a second. */
int px__dispatch_level_for_done(struct px_proactor *px)
{
	if (px__tls_dispatching == px && !px->nfollowers_long &&
	    !disp_worth_help(px, px_list_count(&px->completed) + 2))
		return PX_NOTIFY_CALLER;
	return px__dispatch_level_for_caller(px);
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

/* A processor that several threads may lead at once (one per part of its
 * wait, e.g. one per completion ring) spreads its kernel work over the
 * threads only if each has a part with work; a thread that found no part
 * to lead sleeps as a follower, and its part stays empty unless it runs
 * callbacks (their starts go into the part of the thread that makes
 * them).  So a batch of at least PX_SPREAD_MIN callbacks wakes a follower
 * while fewer threads are busy (leading or running callbacks) than such a
 * processor takes leaders.  Once every thread is busy there is no follower
 * to wake; a small batch (one or two sessions) stays with one thread. */
#define PX_SPREAD_MIN 8u

/* A thread with nothing to lead takes some of another thread's own
 * completions when it has at least this many (half of them): stealing one
 * or two would split a session between two threads, each hop of which
 * then crosses threads. */
#define PX_STEAL_MIN 4u

static bool disp_spread(const struct px_proactor *px, size_t n)
{
	if (n < PX_SPREAD_MIN || !px->nfollowers)
		return false;
	for (int i = 0; i < px->nproc; i++) {
		const px_processor *p = px->proc[i];
		if (p->type == PX_PROCESSOR_SHARED && p->max_leaders > 1 &&
		    px->nleaders + px->nhandlers < p->max_leaders)
			return true;
	}
	return false;
}

/* The most callbacks one px_handle_events runs before it returns, when
 * its batches keep finding more of its own (see step 1). */
#define PX_DISPATCH_MORE 64

/* A leader whose wait claimed system calls on at least this many
 * descriptors lets the lead go before making them (the readiness
 * provider: px_wait_ops.claim), when other threads are here.  With one
 * descriptor the other thread could only wait for the same descriptor's
 * next report: on 1 session, 2 threads, 8 KiB blocks, epoll, a threshold
 * of 1 ran 0.68 of the round trips of no release (6 paired rounds). */
#define PX_RELEASE_MIN 2

/* The release is a hand-off like any other (see PX_HANDOFF_NS): the
 * thread that leads next, and the one that makes the calls, meet at the
 * mutex at every start and every result from then on, and a woken
 * follower costs a context switch.  So the calls are let go only when
 * the n - 1 descriptors another thread could take would keep this one
 * busy for PX_HANDOFF_NS at the measured time per claimed descriptor
 * (px_processor.claim_ns).  Until a claim has been measured, at
 * PX_RELEASE_MIN, as before.  On the epoll engine, 20 sessions, 2
 * threads, 8 KiB blocks, every wait reported about 20 descriptors at
 * about 0.4 µs each; releasing them kept both threads at the mutex and
 * moved 0.63 of the round trips of a leader that made its calls itself
 * (docs/PERFORMANCE.md, "The epoll engine's second thread"). */
static size_t disp_release_min(const px_processor *p)
{
	if (!p->claim_ns)
		return PX_RELEASE_MIN;
	uint64_t n = 1 + (PX_HANDOFF_NS + p->claim_ns - 1) / p->claim_ns;
	if (n < PX_RELEASE_MIN)
		return PX_RELEASE_MIN;
	return n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}
#define PX_FOLLOWER_CHECK_MAX_NS 1000000000u

static bool disp_run_shared(struct px_proactor *px, uint64_t now)
{
	bool ran = false;

	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (p->type == PX_PROCESSOR_SHARED && px__processor_has_shared(p)) {
			px__processor_collect_claimed(p, now);
			ran = true;
		}
	}
	return ran;
}

/* A thread whose callbacks queue new work at every turn (a chain of posts
 * or of 0 ms timers, a periodic timer whose period is shorter than a turn
 * of the loop) always finds something queued in step 1 and never reaches
 * step 2: alone in the loop, it never led a shared processor again, and
 * the I/O of that processor starved for good (test/timer_races.c,
 * io_not_starved_by_due_timers).  So a shared processor with work and no
 * leader that nobody has led for PX_LEAD_OVERDUE_NS is led before the
 * queue is dispatched; with work queued its wait does not block
 * (px__processor_handle_aio_events), so this costs one non-blocking poll
 * per PX_LEAD_OVERDUE_NS at most, and nothing while leads come anyway. */
#define PX_LEAD_OVERDUE_NS 1000000u

static px_processor *disp_overdue_processor(struct px_proactor *px,
					    uint64_t now)
{
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (p->type != PX_PROCESSOR_SHARED || p->has_leader ||
		    !px__processor_has_work(p))
			continue;
		if (!p->led_ns || p->led_ns > now) {
			p->led_ns = now;  /* the clock starts now */
			continue;
		}
		if (now - p->led_ns >= PX_LEAD_OVERDUE_NS &&
		    px__processor_may_lead(p, false))
			return p;
	}
	return NULL;
}

static bool disp_any_work(const struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++)
		if (px->proc[i]->type == PX_PROCESSOR_SHARED &&
		    px__processor_has_work(px->proc[i]))
			return true;
	return false;
}

/* A shared processor with work that no thread leads. */
static bool disp_unled_work(const struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++) {
		const px_processor *p = px->proc[i];
		if (p->type == PX_PROCESSOR_SHARED && !p->nleading &&
		    px__processor_has_work(p))
			return true;
	}
	return false;
}

/* Before this thread blocks (a follower's sleep, a lead that may wait)
 * or leaves: the waits of shared processors that nobody leads and that
 * have nothing to wait for give back what they hold (px_wait_ops.idle). */
static void disp_idle_waits(struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (p->wait->ops->idle && p->type == PX_PROCESSOR_SHARED &&
		    !p->nleading && !px__processor_has_work(p))
			p->wait->ops->idle(p->wait);
	}
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
	bool idle_lead = false;     /* the last wait collected nothing */
	/* Leave another thread's ring and small batches to it (it comes
	 * back for them); false after a follower's sleep ran out, in case
	 * that thread is blocked in a callback. */
	bool patient = true;
	bool stolen = false;        /* own.items was just taken from another */
	bool timer_duty = false;    /* counted on for a timer while asleep */
	px_own own, *saved_own = disp_tls_own;

	px_list_init(&own.items);
	px_link_init(&own.link);
	own.px = px;
	pthread_mutex_lock(&px->lock);
	disp_tls_own = &own;
	/* Called from a callback (a call of this proactor by the same
	 * thread is on the stack, perhaps below a call of another one):
	 * what that call collected as its own waits for it, and it waits
	 * for this one.  This call takes them over (what it leaves goes to
	 * the shared queue, below).  Otherwise, with nobody else in the
	 * loop, a px_handle_events(px, 0) from the callback returned 0 with
	 * them queued, and a loop of such calls waiting for one of them
	 * never ended (io_uring with several rings; test/lifecycle_races.c,
	 * nested_call_runs_held_completions). */
	own.up = saved_own;
	for (px_own *o = saved_own; o; o = o->up) {
		if (o->px != px)
			continue;
		if (!px_list_empty(&o->items)) {
			px_list_remove(&px->owns, &o->link);
			px_list_splice_back(&own.items, &o->items);
			px_list_push_back(&px->owns, &own.link);
		}
		break;
	}
	px->nthreads++;
	for (;;) {
		if (px->stopped || px->destroying) {
			n = -ESHUTDOWN;
			break;
		}

		/* Step 1: dispatch what is queued now. */
		if (px->ntheap)
			px__timers_expire(px, now);
		/* Step 0: unless a processor has waited too long for a
		 * leader (disp_overdue_processor). */
		px_processor *p = NULL;
		if (px__dispatch_has_queued(px) || !px_list_empty(&px->owns))
			p = disp_overdue_processor(px, now);
		if (p)
			goto lead;
		/* Step 1b: nothing of its own, none shared, and nothing came
		 * in its last wait: take some of another thread's. */
		if (idle_lead && px_list_empty(&own.items) &&
		    px_list_empty(&px->completed))
			stolen = disp_own_steal(px, &own, 1);
		idle_lead = false;
		/* Own completions first; shared ones unless this thread has
		 * just handed them to a follower it woke (it leads meanwhile,
		 * and takes them after that if the follower has not). */
		px_list *q = &own.items;
		if (px_list_empty(q) && disp_tls_gave != px)
			q = &px->completed;
		disp_tls_gave = NULL;
		bool moving = stolen || q == &px->completed;
		stolen = false;
		if (!px_list_empty(q)) {
			size_t batch = px_list_count(q);
			int done = 0;
			/* Taken from another thread: their sessions move here. */
			bool saved_moving = disp_tls_moving;
			disp_tls_moving = moving;
			px->nhandlers++;
			if ((disp_worth_help(px, batch) || disp_spread(px, batch)) &&
			    px__dispatch_wake_follower(px) && q == &own.items) {
				/* Give the woken thread the second half. */
				size_t give = batch / 2;
				disp_own_give(px, &own, give);
				batch -= give;
				disp_tls_gave = px;
			}
			/* now is recent: the entry, or the end of the wait
			 * that collected these.  A sample counts only if no
			 * thread led meanwhile: a leader holds the mutex while
			 * it collects, and a start from a callback waits for
			 * it, or submits for it.  That is the cost of handing
			 * off, not of the callbacks, and counting it would
			 * make hand-offs breed hand-offs. */
			bool alone = px->nleaders == 0;
			/* Results wait behind each callback of the batch, and
			 * timers may fall due while it runs: should a callback
			 * block, a thread asleep without a bound would never
			 * look (it fell asleep with nothing to do, or before the
			 * timers, counting on this one).  Woken, it sleeps again
			 * on the short bound (or until the next timer), after
			 * which it takes some of this thread's results (step
			 * 2b).  The same holds for a shared processor that
			 * still has operations pending and nobody leading it
			 * (this thread has just stopped leading it to run what
			 * it collected): a follower whose bound grew while the
			 * proactor was quiet would leave that processor unled
			 * for up to PX_FOLLOWER_CHECK_MAX_NS should even a
			 * single callback block, and data that came for those
			 * operations meanwhile waited 0.2 to 0.9 s
			 * (test/lifecycle_races.c,
			 * blocked_callback_leaves_lead_to_sleeper). */
			if (px->nfollowers_long && disp_tls_gave != px &&
			    (batch > 1 || px->ntheap || disp_unled_work(px)))
				px__dispatch_wake_follower(px);
			while (batch-- > 0 && !px->stopped) {
				px_link *l = q == &own.items ? disp_own_pop(px, &own)
							     : px_list_pop_front(q);
				if (!l)
					break;
				px__dispatch_one(px, px_result_of(l));
				done++;
				alone = alone && px->nleaders == 0;
			}
			uint64_t t1 = px__now_ns();
			px->st.dispatch_ns += t1 - now;
			if (done && (alone || !px->cb_ns))  /* (or a first guess) */
				disp_note_cb_time(px, t1 - now, done);
			n += done;
			px->nhandlers--;
			disp_tls_moving = saved_moving;
			now = t1;
			/* The callbacks' own starts that finished at once (a
			 * send with room, a read with data) are this thread's
			 * next batch: run them in this call, up to a bound,
			 * rather than return and take the mutex again for
			 * them. */
			if (n < PX_DISPATCH_MORE && disp_tls_gave != px &&
			    !px->stopped && !px->destroying &&
			    px__dispatch_has_queued(px))
				continue;
			break;
		}

		/* Step 1c: calls that a thread's wait claimed and shared
		 * (the readiness provider on epoll): make them before
		 * leading, as the woken follower they were meant for. */
		if (disp_run_shared(px, now)) {
			now = px__now_ns();
			continue;
		}

		/* Step 2: lead a processor that has work and no leader. */
		p = disp_pick_processor(px, patient);
lead:
		if (p) {
			uint64_t until = disp_min_u64(deadline, px__timers_next(px));
			/* A call that has run callbacks has had its round: it
			 * may still lead (an overdue processor, step 0) but
			 * not wait, and returns after (below).  It once went
			 * on to lead with no bound when another thread took
			 * what was queued meanwhile, and a loop waiting for
			 * its callback's flag hung (test/lifecycle_races.c,
			 * round_ends_after_callbacks). */
			int ms = n ? 0 : px__ms_until(until, now);
			/* Beside a thread that runs callbacks, with no
			 * follower asleep, this thread is the only one that
			 * would look should one of them block: it waits no
			 * longer than a follower would there (step 3), nor
			 * for PX_FOLLOWER_CHECK_NS after disp_insure
			 * interrupted a leader, whose later calls it leaves
			 * out counting on this bound. */
			if (((px->nhandlers && !px->nfollowers) ||
			     disp_insured_lately(px, now)))
				ms = px__cap_ms(ms, (int)(PX_FOLLOWER_CHECK_NS /
							  1000000u));
			check = PX_FOLLOWER_CHECK_NS;
			if (ms && px->has_idle_waits)
				disp_idle_waits(px);
			px->nleaders++;
			px__processor_lead_begin(p);
			px_processor *o = disp_other_needs_leader(px, p);
			if (o)
				ms = disp_lone_lead(p, o, ms);
			/* With other threads here, a wait that claimed system
			 * calls for this thread to make (the readiness
			 * provider) lets the lead go before they run: another
			 * thread waits meanwhile, woken if it sleeps. */
			bool claimed = false;
			now = px__processor_handle_aio_events(
				p, ms, now, disp_release_min(p),
				&claimed);
			px__processor_lead_end(p);
			px->nleaders--;
			p->led_ns = now;
			if (claimed) {
				/* A sleeping follower makes half of the
				 * calls (and leads after, if this thread
				 * has not by then); without one, it is woken
				 * to lead, if the processor wants a leader. */
				if ((px->nfollowers &&
				     px__processor_share_claimed(p)) ||
				    px__processor_may_lead(p, false))
					px__dispatch_wake_follower(px);
				px__processor_collect_claimed(p, now);
			}
			idle_lead = !px__dispatch_has_queued(px);
			patient = true;
			/* Leadership released: if the processor still has
			 * work, a sleeping thread may take it over while we
			 * dispatch what we collected (after a claim, one was
			 * woken for that already). */
			if (!claimed && px__processor_has_work(p) &&
			    disp_worth_help(px, px_list_count(&px->completed) + 1))
				px__dispatch_wake_follower(px);
			if (!px__dispatch_has_queued(px) &&
			    !(px__timers_next(px) <= now) &&
			    (now >= deadline || n))
				break;
			continue;
		}

		/* Step 2b: nothing to lead: help a thread with completions of
		 * its own. */
		if (disp_own_steal(px, &own, patient ? PX_STEAL_MIN : 1)) {
			patient = true;
			stolen = true;
			continue;
		}

		/* Step 3: sleep as a follower.  While a processor has work,
		 * or a thread runs callbacks (whose starts wake nobody:
		 * px__dispatch_needs_leader), not for longer than the bound
		 * `check`, PX_FOLLOWER_CHECK_NS at first: a thread that
		 * dispatches cheap callbacks leads again afterwards instead of
		 * handing off (disp_worth_help), and should one of its callbacks
		 * block (say, until another operation completes), a follower
		 * must take the lead.  The bound doubles (up to
		 * PX_FOLLOWER_CHECK_MAX_NS, 1 s) after each sleep that ends
		 * unwoken while no thread runs callbacks, so that idle
		 * followers of an idle proactor do not wake 50 times a second;
		 * it is PX_FOLLOWER_CHECK_NS again after a wake-up, and after
		 * a sleep that ends while a thread runs callbacks. */
		uint64_t until = disp_min_u64(deadline, px__timers_next(px));
		if (disp_any_work(px) || px->nhandlers)
			until = disp_min_u64(until, now + check);
		if (n)
			break;  /* its round is over (see the lead above) */
		if (until <= now) {
			if (deadline <= now && !(px__timers_next(px) <= now))
				break;
			continue; /* a timer is due: loop to expire it */
		}
		if (px->has_idle_waits)
			disp_idle_waits(px);
		px_follower f;
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&f.cond, &ca);
		pthread_condattr_destroy(&ca);
		f.woken = false;
		f.timer_duty = false;
		f.until = until;
		f.deadline = deadline;
		px_link_init(&f.link);
		px_list_push_back(&px->followers, &f.link);
		px->nfollowers++;
		/* No bound that px__dispatch_needs_leader may count on: a
		 * thread running callbacks may leave px_handle_events with
		 * operations they started and nobody leading them, and only
		 * a look within PX_FOLLOWER_CHECK_NS takes them over soon. */
		bool long_sleep = until - now > PX_FOLLOWER_CHECK_NS;
		px->nfollowers_long += long_sleep;
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
		px->nfollowers_long -= long_sleep;
		timer_duty = timer_duty || f.timer_duty;
		patient = f.woken;
		if (f.woken) {
			check = PX_FOLLOWER_CHECK_NS;
		} else {
			px_list_remove(&px->followers, &f.link);
			/* Longer sleeps only while nobody runs callbacks (see
			 * px__dispatch_needs_leader). */
			if (px->nhandlers)
				check = PX_FOLLOWER_CHECK_NS;
			else if (check < PX_FOLLOWER_CHECK_MAX_NS / 2)
				check *= 2;
			else
				check = PX_FOLLOWER_CHECK_MAX_NS;
		}
		pthread_cond_destroy(&f.cond);
		uint64_t slept = now;
		now = px__now_ns();
		px->st.follower_sleep_ns += now - slept;
	}
	/* px_stop came while this call ran callbacks or waited: the call
	 * returns -ESHUTDOWN, as px_handle_events(3) says ("as soon as it
	 * has finished the callback it runs"), not the number it ran.  The
	 * batch loop above already stops at the callback that was running;
	 * without this, the call that ran it returned its count (or 0 at a
	 * timeout that coincided), and only the next call said -ESHUTDOWN
	 * (test/lifecycle_races.c). */
	if (px->stopped || px->destroying)
		n = -ESHUTDOWN;
	px->nthreads--;
	px->left_by = &disp_tls_me;  /* see px__dispatch_others_here */
	px->left_ns = now;
	disp_own_leave(px, &own);
	/* Leaving a shared processor with work and no leader (this thread
	 * led it last, or its callbacks started operations): a follower
	 * asleep with the short bound looks again soon by itself, but one
	 * whose bound grew while this thread led would sleep on for up to
	 * PX_FOLLOWER_CHECK_MAX_NS, so one is woken.  (A thread that comes
	 * straight back wakes nobody here in a busy loop: its followers
	 * sleep with the short bound, or are woken once and then do.) */
	if (px->nfollowers_long && !px->stopped && !px->destroying &&
	    disp_unled_work(px))
		px__dispatch_wake_follower(px);
	/* Leaving results queued that no thread was told of: a post made
	 * from one of this call's callbacks woke nobody, counting on this
	 * thread to come back to the queue, and the call returns after its
	 * batch or its timeout.  A follower asleep looks at the queue within
	 * its bound; with none, a leader blocked in the kernel would find
	 * them only when its wait ends (up to its bound: a chain of posts
	 * outliving px_handle_events(px, 100) stalled 250 ms to 1 s,
	 * test/lifecycle_races.c, post_chain_outlives_bounded_call), so it
	 * is interrupted.  (Waking a follower here as well woke one about
	 * every other call on the epoll engine's busy loops; the
	 * interrupts are tens a second there, none on io_uring.) */
	if (!px_list_empty(&px->completed) && !px->nfollowers &&
	    !px->stopped && !px->destroying)
		disp_interrupt_shared_leader(px, false);
	/* Counted on for a timer (px__dispatch_timer_moved) and leaving
	 * before it: another thread must look at it. */
	if (timer_duty && px->ntheap && !px->stopped && !px->destroying)
		px__dispatch_timer_moved(px, px__timers_next(px));
	if (px->has_idle_waits)
		disp_idle_waits(px);

	disp_tls_own = saved_own;
	pthread_mutex_unlock(&px->lock);
	return n;
}
