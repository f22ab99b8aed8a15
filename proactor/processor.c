/*
 * processor.c - one provider's started and deferred lists, and its leader.
 *
 * A start goes to the provider at once when it may (room under max_aio, no
 * older deferred operation to overtake, and the provider allows starts from
 * this thread); otherwise it is deferred and the leader starts it later.
 * A start is never refused for lack of room.
 *
 * A shared processor is led by an application thread inside
 * px_handle_events; a dedicated one by its own thread, created with the
 * proactor, that holds leadership until the proactor is destroyed and hands
 * what completes to the dispatcher with a notification.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* The processor the calling thread leads now, if any.  A thread leads one
 * processor at a time, and runs no callback while it leads.  (Naming the
 * thread that began a lead last in the processor does not tell: with
 * several leaders at once that thread's lead may have ended while
 * another's goes on.) */
static __thread const px_processor *proc_tls_leading;

static bool proc_is_leader(const px_processor *p)
{
	return p->has_leader && proc_tls_leading == p;
}

px_provider *px__result_provider(const px_result *r)
{
	return r->proc ? r->proc->prov : NULL;
}

/* Operations that hold a place under max_aio: those started, and those
 * inside the provider's start (the starting list).  The readiness
 * providers and Linux AIO make a call there with the mutex released; when
 * only the started list was counted, another thread's start then found
 * room and went to the provider too, so max_aio=1 had two reads there
 * (TESTING.md, fixed problem 204). */
static size_t proc_at_provider(const px_processor *p)
{
	return px_list_count(&p->started) + px_list_count(&p->starting);
}

bool px__processor_has_work(const px_processor *p)
{
	return !px_list_empty(&p->started) || !px_list_empty(&p->deferred);
}

bool px__processor_may_lead(px_processor *p, bool patient)
{
	if (p->type != PX_PROCESSOR_SHARED || !px__processor_has_work(p))
		return false;
	if (p->max_leaders <= 1)
		return !p->has_leader;
	if (p->nleading >= p->max_leaders)
		return false;
	/* Kept for the prepare() of the lead that may follow.  The calling
	 * thread neither leads nor runs callbacks here.  Only leaders of p
	 * count: a thread leading the other processor of a team does not
	 * come back to p's parts, and counting it left a part with work
	 * unled while the calling thread slept as a follower (20 ms). */
	p->wait->others_busy = patient && p->nleading + p->px->nhandlers > 0;
	p->wait->others_here = px__dispatch_others_here(p->px);
	/* Deferred starts need a leader, whichever part it takes. */
	if (!p->has_leader && !px_list_empty(&p->deferred))
		return true;
	return p->wait->ops->may_lead(p->wait);
}

bool px__processor_led_by_other(const px_processor *p)
{
	/* With several leaders the caller may be one of them: the interrupt
	 * then reaches only those that wait (see px_intr_ops). */
	return p->nleading > (proc_is_leader(p) ? 1 : 0);
}

void px__processor_interrupt(px_processor *p)
{
	if (px__processor_led_by_other(p)) {
		p->st.leader_interrupts++;
		p->intr->ops->interrupt(p->intr);
	}
}

/* The processor just went from idle to having work.  A shared one without a
 * leader needs a thread to lead it; the dispatcher decides which. */
static void proc_became_busy(px_processor *p)
{
	if (p->type == PX_PROCESSOR_SHARED && !p->has_leader)
		px__dispatch_needs_leader(p->px);
}

static int proc_post_level(const px_processor *p)
{
	/* A shared leader returns to the dispatcher itself after collecting;
	 * a dedicated one never does, so others must be told. */
	return p->type == PX_PROCESSOR_DEDICATED ? PX_NOTIFY_STRONG : PX_NOTIFY_NONE;
}

static void proc_defer(px_processor *p, px_result *r)
{
	p->st.deferred++;
	r->state = PX_RS_DEFERRED;
	px_list_push_back(&p->deferred, &r->link);
}

static void proc_cancel_one(px_processor *p, px_result *r, int *count);

/*
 * Give r to the provider's start.  The readiness provider releases the
 * mutex around its system call, and r is then on neither the deferred nor
 * the started list; it waits on the starting list instead, where a cancel
 * finds it and sets cancel_pending, acted on once start has returned
 * (proc_started, proc_cancelled_again).  Without that the cancel would find
 * nothing and a write that stays pending would never end.
 */
static int proc_provider_start(px_processor *p, px_result *r)
{
	if (p->wait->ops->on_start)
		p->wait->ops->on_start(p->wait, r);
	r->cancel_pending = 0;
	px_list_push_back(&p->starting, &r->link);
	int rc = p->prov->ops->start(p->prov, r);
	px_list_remove(&p->starting, &r->link);
	/* A px_destroy that came while the start had the mutex released
	 * waits for it (px__processor_starts_under_way). */
	if (p->px->destroying && px_list_empty(&p->starting))
		pthread_cond_broadcast(&p->px->call_cv);
	return rc;
}

bool px__processor_starts_under_way(const px_processor *p)
{
	return !px_list_empty(&p->starting);
}

/* The provider started r: onto the started list, and cancelled now if a
 * cancel came while it was being started. */
static void proc_started(px_processor *p, px_result *r)
{
	int n = 0;

	r->state = PX_RS_STARTED;
	px_list_push_back(&p->started, &r->link);
	if (r->cancel_pending) {
		r->cancel_pending = 0;
		proc_cancel_one(p, r, &n);
	}
}

/* The provider gave r back (PX_START_AGAIN).  If a cancel came while it was
 * being started, complete it now with ECANCELED and return true; else the caller
 * defers it again. */
static bool proc_cancelled_again(px_processor *p, px_result *r)
{
	if (!r->cancel_pending)
		return false;
	r->cancel_pending = 0;
	px_result_finish(r, r->done, ECANCELED);
	r->state = PX_RS_READY;
	px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
	return true;
}

/* r ended within its start (its result is set): queued for its callback. */
static void proc_done_at_start(px_processor *p, px_result *r)
{
	r->state = PX_RS_READY;
	px__dispatch_post(p->px, r, px__dispatch_level_for_done(p->px));
}

int px__processor_start(px_processor *p, px_result *r)
{
	bool was_idle = !px__processor_has_work(p);
	r->proc = p;

	bool defer = !px_list_empty(&p->deferred) ||
		     proc_at_provider(p) >= p->max_aio;
	if (!defer && !(p->flags & PX_PF_START_ANY_THREAD) && !proc_is_leader(p))
		defer = true;
	if (defer) {
		proc_defer(p, r);
		if (p->has_leader)
			px__processor_interrupt(p);
		else if (was_idle)
			proc_became_busy(p);
		return 0;
	}

	p->nfirst++;
	int rc = proc_provider_start(p, r);
	p->nfirst--;
	/* start() may have released the mutex: look again. */
	was_idle = !px__processor_has_work(p);
	/* A start that came meanwhile was deferred for the place r held;
	 * unless r keeps it, a leader must start that one now (its wait
	 * was interrupted at the deferral, when there was no room yet). */
	bool told = false;
	if (rc != PX_START_STARTED && !px_list_empty(&p->deferred) &&
	    proc_at_provider(p) < p->max_aio) {
		if (p->has_leader)
			px__processor_interrupt(p);
		else
			proc_became_busy(p);
		told = true;
	}
	switch (rc) {
	case PX_START_STARTED:
		proc_started(p, r);
		if (was_idle)
			proc_became_busy(p);
		if (p->flags & PX_PF_START_INTERRUPT)
			px__processor_interrupt(p);
		return 0;
	case PX_START_DONE:
		proc_done_at_start(p, r);
		return 0;
	case PX_START_AGAIN:
		if (proc_cancelled_again(p, r))
			return 0;
		proc_defer(p, r);
		/* Only a leader starts it again (proc_start_deferred): one
		 * that waits must hear of it, as of any deferral above, or
		 * it waits until its bound (io_uring with its SQ full:
		 * TESTING.md, fixed problem 220), but once: the leader
		 * may have been told just above, for the others. */
		if (told)
			return 0;
		if (p->has_leader)
			px__processor_interrupt(p);
		else if (was_idle)
			proc_became_busy(p);
		return 0;
	default:
		r->proc = NULL;
		return rc < 0 ? rc : -EIO;
	}
}

void px__processor_fail_start(px_processor *p, px_result *r, int err)
{
	r->proc = p;
	px_result_finish(r, 0, err);
	proc_done_at_start(p, r);
}

/* Leader: start deferred results while there is room.  Returns true if
 * something finished at once (the wait should then not block). */
static bool proc_start_deferred(px_processor *p)
{
	bool finished = false;
	px_link *l;
	while (proc_at_provider(p) < p->max_aio &&
	       (l = px_list_first(&p->deferred))) {
		px_result *r = px_result_of(l);
		px_list_remove(&p->deferred, l);
		int rc = proc_provider_start(p, r);
		if (rc == PX_START_STARTED) {
			proc_started(p, r);
			continue;
		}
		if (rc == PX_START_AGAIN) {
			if (proc_cancelled_again(p, r)) {
				finished = true;
				continue;
			}
			r->state = PX_RS_DEFERRED;
			px_list_push_front(&p->deferred, &r->link);
			break;
		}
		if (rc == PX_START_DONE) {
			r->state = PX_RS_READY;
		} else {
			/* The caller has gone: the error travels in the
			 * completion. */
			r->state = PX_RS_START_ERROR;
			px_result_finish(r, 0, rc < 0 ? -rc : EIO);
		}
		px__dispatch_post(p->px, r, proc_post_level(p));
		finished = true;
	}
	return finished;
}

static size_t proc_collect(px_processor *p, uint64_t now)
{
	px_result *r;
	size_t n = 0;
	int level = proc_post_level(p);
	/* With several leaders each keeps what it collected (its starts then
	 * go back into the part of the wait it leads). */
	bool own = p->max_leaders > 1;
	p->wait->now_ns = now;
	while ((r = p->wait->ops->next_completed(p->wait))) {
		px_list_remove(&p->started, &r->link);
		r->state = PX_RS_READY;
		if (own)
			px__dispatch_post_own(p->px, r);
		else
			px__dispatch_post(p->px, r, level);
		n++;
	}
	p->wait->now_ns = 0;
	return n;
}

/* ------------------------------------------------------------------ */
/* The idle check                                                       */
/* ------------------------------------------------------------------ */

/*
 * A leader whose waits keep collecting nothing while operations are
 * pending looks at two things that no wait reports (docs/ARCHITECTURE.md,
 * "Closed descriptors" and "max_aio"):
 *
 *   - operations whose descriptor the application has closed: some
 *     mechanisms drop a closed descriptor without an event, others hold
 *     their own reference to the file, so such an operation could wait
 *     forever (docs/ARCHITECTURE.md names them).  One
 *     fcntl(F_GETFD) per descriptor finds them (one per operation when
 *     there is no memory for the table of descriptors, since they may
 *     have no other way to complete); they are cancelled and complete
 *     with EBADF;
 *   - a full max_aio with operations deferred and no completion for more
 *     than a second: the operations holding the slots may be waiting for
 *     input that only a deferred one would produce.  The deferred ones are
 *     started beyond the limit, and stderr says so once per processor.
 *
 * The check runs after PROC_CHECK_MIN_NS of quiet, then at doubling gaps
 * up to PROC_CHECK_MAX_NS while the quiet lasts; waits are bounded by the
 * gap while operations are pending, so a dedicated leader or a thread in
 * px_handle_events(px, -1) gets there too.  Under steady completions it
 * still runs every PROC_CHECK_BUSY_NS, so a closed descriptor among busy
 * ones is found as well; a wait that collects pays one comparison of the
 * clock it has read anyway.  (It used to look at the clock once per 1024
 * such waits, and a completion every few hundred ms, which ends each
 * quiet run before its first check, put the check minutes apart.)
 */
#define PROC_CHECK_MIN_NS 200000000u
#define PROC_CHECK_MAX_NS 1000000000u
#define PROC_CHECK_BUSY_NS 5000000000u

/* A number the library holds now (internal.h, px__is_own_fd) was closed
 * by the application too: the engine of another proactor, made since,
 * took it (a px_create keeps off only its own proactor's numbers).  Open
 * as it is, the operation's file is gone, and the engine's wait watches
 * the library's descriptor in its place. */
static bool proc_fd_closed(int fd)
{
	return px__is_own_fd(fd) || (fcntl(fd, F_GETFD) < 0 && errno == EBADF);
}

/* The descriptors one check looked at, each with what fcntl said: an
 * open-addressing table of fd + 1 (0 = empty slot), negated for a closed
 * descriptor.  Sized for every pending operation, so each descriptor
 * costs one fcntl however many operations it has and wherever they sit
 * in the lists, and the whole check is linear in the pending operations.
 * (It used to walk the list again from its head after each closed
 * descriptor, checking the open ones again: 9,000 pending reads of which
 * 3,000 had been closed held the mutex for 3 s.) */
typedef struct proc_fdset {
	int *slot;
	size_t mask;
} proc_fdset;

static int *proc_fdset_find(const proc_fdset *set, int fd)
{
	size_t i = ((size_t)(unsigned)fd * 2654435761u) & set->mask;
	while (set->slot[i] && set->slot[i] != fd + 1 && set->slot[i] != -(fd + 1))
		i = (i + 1) & set->mask;
	return &set->slot[i];
}

/* Did this check find fd closed?  (Operations always have a descriptor;
 * a negative one is never looked at, nor taken for closed.) */
static bool proc_fdset_closed(const proc_fdset *set, int fd)
{
	return fd >= 0 && *proc_fdset_find(set, fd) == -(fd + 1);
}

/* Which operations a cancel pass takes: every one (all), or those whose
 * descriptor a check found closed.  (px_cancel and px_close find a
 * descriptor's operations through px_proactor.byfd instead.) */
typedef struct proc_match {
	bool all;
	const proc_fdset *closed;
} proc_match;

static bool proc_matches(const proc_match *m, const px_result *r)
{
	return m->all || proc_fdset_closed(m->closed, r->c.fd);
}

static int proc_cancel_matching(px_processor *p, const proc_match *m);

/* A cancel asked before the check found the descriptor closed (by
 * px_cancel, px_close, a deadline) is what ends r: the application
 * cancelled, then closed the number, and r completes with ECANCELED, not
 * EBADF.  (The provider's answer may come after the close: a Linux AIO
 * poll's cancel event comes from a kernel worker.) */
static bool proc_cancel_came_first(const px_result *r)
{
	return r->cancel_asked || r->cancel_pending;
}

/* Mark the operations on list whose descriptor the check found closed. */
static void proc_mark_closed(px_list *list, const proc_fdset *closed)
{
	for (px_link *l = px_list_first(list); l; l = px_list_next(list, l)) {
		px_result *r = px_result_of(l);
		if (proc_fdset_closed(closed, r->c.fd) &&
		    !proc_cancel_came_first(r))
			r->fd_closed = 1;
	}
}

/* Look at the descriptor of each operation on list not yet marked, once
 * per descriptor; count the closed ones.  (The table has room: it is sized
 * for every operation on the lists, which do not change under the
 * mutex.) */
static void proc_look_at(px_list *list, proc_fdset *set, size_t *nclosed)
{
	for (px_link *l = px_list_first(list); l; l = px_list_next(list, l)) {
		px_result *r = px_result_of(l);
		if (r->fd_closed || r->c.fd < 0)
			continue;
		int *slot = proc_fdset_find(set, r->c.fd);
		if (*slot)
			continue;
		bool closed = proc_fd_closed(r->c.fd);
		*slot = closed ? -(r->c.fd + 1) : r->c.fd + 1;
		if (closed)
			(*nclosed)++;
	}
}

static void proc_cancel_one(px_processor *p, px_result *r, int *count);

/* The check without the table, when there is no memory for one: one
 * fcntl per operation rather than per descriptor, still in one pass.
 * Such an operation may have no other way to complete, so finding it must
 * not wait for memory.  Returns how many operations it cancelled. */
static int proc_reap_closed_each(px_processor *p)
{
	px_list *lists[2] = { &p->deferred, &p->started };
	int n = 0;

	for (px_link *l = px_list_first(&p->starting); l;
	     l = px_list_next(&p->starting, l)) {
		px_result *r = px_result_of(l);
		if (!r->fd_closed && !proc_cancel_came_first(r) &&
		    r->c.fd >= 0 && proc_fd_closed(r->c.fd)) {
			r->fd_closed = 1;
			r->cancel_pending = 1;
			n++;
		}
	}
	for (int i = 0; i < 2; i++) {
		px_link *l = px_list_first(lists[i]);
		while (l) {
			px_link *next = px_list_next(lists[i], l);
			px_result *r = px_result_of(l);
			if (!r->fd_closed && !proc_cancel_came_first(r) &&
			    r->c.fd >= 0 && proc_fd_closed(r->c.fd)) {
				r->fd_closed = 1;
				proc_cancel_one(p, r, &n);
			}
			l = next;
		}
	}
	if (n && (p->flags & PX_PF_START_INTERRUPT))
		px__processor_interrupt(p);
	return n;
}

/* Cancel the operations (started or deferred) of descriptors that have
 * been closed without px_close.  An operation marked by an earlier check
 * has had its cancel; its descriptor is looked at again only for another
 * operation that is not marked.  Returns how many descriptors were found
 * closed (without memory for the table: how many operations). */
static int proc_reap_closed(px_processor *p)
{
	size_t n = px_list_count(&p->started) + px_list_count(&p->deferred);
	size_t cap = 16, nclosed = 0;

	if (!n)
		return 0;
	while (cap < 2 * n)
		cap *= 2;
	proc_fdset set = { calloc(cap, sizeof(int)), cap - 1 };
	if (!set.slot)
		return proc_reap_closed_each(p);
	proc_look_at(&p->started, &set, &nclosed);
	proc_look_at(&p->deferred, &set, &nclosed);
	if (nclosed) {
		proc_mark_closed(&p->deferred, &set);
		proc_mark_closed(&p->starting, &set);
		proc_mark_closed(&p->started, &set);
		proc_match m = { .closed = &set };
		proc_cancel_matching(p, &m);
	}
	free(set.slot);
	return (int)nclosed;
}

/* max_aio is full, operations are deferred and nothing has completed for
 * a while: start the deferred ones beyond the limit. */
static void proc_unstarve(px_processor *p)
{
	if (px_list_empty(&p->deferred) ||
	    proc_at_provider(p) < p->max_aio)
		return;
	if (!p->starve_warned) {
		p->starve_warned = true;
		fprintf(stderr,
			"proactor: max_aio=%u is full of operations that wait "
			"(%zu in flight, %zu deferred, nothing completed for "
			"over a second); starting the deferred ones beyond the limit so "
			"that they cannot starve.  Raise max_aio, or leave it 0 "
			"for the default.\n",
			p->max_aio, px_list_count(&p->started),
			px_list_count(&p->deferred));
	}
	unsigned saved = p->max_aio;
	p->max_aio = UINT_MAX;
	proc_start_deferred(p);
	p->max_aio = saved;
}

void px__processor_check_wait(px_processor *p)
{
	if (p->wait->ops->check)
		p->wait->ops->check(p->wait);
	/* The check may have found the wait's ready descriptor replaced
	 * behind the library's back and forgotten it (io_uring's ready
	 * eventfd: TESTING.md, fixed problem 328): the dispatcher asks
	 * ready_fd again rather than believe the other wait watches it. */
	p->ready_offered = false;
}

static void proc_check(px_processor *p, uint64_t now, bool quiet)
{
	p->last_check = now;
	px__processor_check_wait(p);
	proc_reap_closed(p);
	/* Starving once more than PROC_CHECK_MAX_NS passed without a
	 * completion: the third check of a quiet run (200 + 400 + 800 ms). */
	if (quiet && now - p->quiet_start > PROC_CHECK_MAX_NS)
		proc_unstarve(p);
}

/* After a wait that collected n results; now: the clock after it. */
static void proc_after_wait(px_processor *p, size_t n, uint64_t now)
{
	if (n) {
		p->quiet_start = p->quiet_since = 0;
		p->check_gap = PROC_CHECK_MIN_NS;
		if (now - p->last_check >= PROC_CHECK_BUSY_NS)
			proc_check(p, now, false);
		return;
	}
	if (!px__processor_has_work(p)) {
		p->quiet_start = p->quiet_since = 0;
		return;
	}
	if (!p->quiet_since) {
		p->quiet_start = p->quiet_since = now;
		return;
	}
	if (now - p->quiet_since < p->check_gap)
		return;
	proc_check(p, now, true);
	/* The next check after a longer quiet, unless something completes. */
	p->quiet_since = now;
	p->check_gap = p->check_gap < PROC_CHECK_MAX_NS / 2
		       ? p->check_gap * 2 : PROC_CHECK_MAX_NS;
}

/* The longest a leader may wait, in ms: the gap while operations are
 * pending.  A dedicated leader also waits while it has nothing, and only
 * a processor with PX_PF_START_INTERRUPT is interrupted by a start, so an
 * idle one wakes up once per PROC_CHECK_MAX_NS to see whether work came. */
static int proc_wait_bound(const px_processor *p, int timeout_ms)
{
	uint64_t cap = p->check_gap;
	if (!px__processor_has_work(p)) {
		if (p->type != PX_PROCESSOR_DEDICATED)
			return timeout_ms;
		cap = PROC_CHECK_MAX_NS;
	}
	return px__cap_ms(timeout_ms, (int)(cap / 1000000u));
}

/* Fold the time a claim of n descriptors took to collect (the calls, the
 * results let go and queued) into p->claim_ns.  It is wall time, which a
 * preemption or a wait for the mutex can only lengthen: so a sample above
 * the average counts for 1/8 and for at most 4 times the average plus
 * 1 µs, as with the dispatcher's callback times, and one below it for
 * half.  A first sample taken across a preemption is thus gone within a
 * few claims, instead of making the calls look long for hundreds. */
static void proc_note_claim_time(px_processor *p, uint64_t ns, size_t n)
{
	uint64_t per = ns / n;
	uint64_t avg = p->claim_ns;

	if (!avg)
		avg = per;
	else if (per < avg)
		avg = avg / 2 + per / 2;
	else
		avg = avg - avg / 8 + (per > 4 * avg + 1000 ? 4 * avg + 1000 : per) / 8;
	p->claim_ns = avg ? avg : 1;
}

/* The wait failed with EBADF: one of the engine's own descriptors (its
 * epoll instance, its interrupt's, an io_uring ring, whose wait says so
 * once the ring is dead; a descriptor of the
 * application's that a select wait watched, closed meanwhile, too) was
 * closed with close(2), which the record of the library's descriptors
 * (internal.h, px__is_own_fd) cannot refuse.  Every wait would fail at
 * once the same way, and the leader, a dedicated one above all, spun at
 * full CPU (a whole CPU on epoll, poll and select, shared and
 * dedicated).  So it naps instead, at most PX_NO_WAKE_MS, as long as
 * the wait would have lasted at most: nothing may be able to wake it, and
 * px_stop and px_destroy must still get through.  Mutex released. */
static void proc_wait_broken(int timeout_ms)
{
	int ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
	struct timespec nap = { 0, (long)ms * 1000000 };

	nanosleep(&nap, NULL);
}

uint64_t px__processor_handle_aio_events(px_processor *p, int timeout_ms,
					 uint64_t now, size_t release_min,
					 bool *claimed)
{
	struct px_proactor *px = p->px;

	/* A shared leader goes back to run what is queued, so it must not
	 * block meanwhile.  A dedicated one never runs callbacks (the
	 * application's threads do, when they come), and its wait is for
	 * the kernel alone: a zero wait there spun at full CPU, taking the
	 * mutex at every turn, for as long as any completion waited for an
	 * application thread (a long callback, a loop polled now and then).
	 * px_destroy, which leads a stopped dedicated processor itself,
	 * still does not block. */
	bool runs_queue = p->type != PX_PROCESSOR_DEDICATED || p->stop;
	if (proc_start_deferred(p) ||
	    (runs_queue && px__dispatch_has_queued(px)))
		timeout_ms = 0;
	else if (runs_queue && !px_list_empty(&px->owns))
		/* another thread's own completions: see dispatcher.c, step 2 */
		timeout_ms = px__cap_ms(timeout_ms, 1);
	timeout_ms = proc_wait_bound(p, timeout_ms);
	/* (With several leaders px__processor_may_lead set it, from the
	 * dispatcher's patience; alone, or in px_destroy, nobody else
	 * comes.) */
	if (p->max_leaders <= 1 || !px__dispatch_others_here(px))
		p->wait->others_busy = p->wait->others_here = false;
	if (p->wait->ops->prepare(p->wait, &p->started) < 0)
		timeout_ms = 0;
	p->st.leader_turns++;
	/* With several leaders waiting at once (io_uring's rings), wait_end
	 * is the latest end among the waits begun since the last interrupt
	 * (which reaches every leader that waits), and only the last wait
	 * to end clears it.  Cleared by the first to end, it said "nobody
	 * waits" while another leader was in a wait of up to a second, and
	 * a post from a callback that then blocked waited for that wait's
	 * end (test_uring_rings, post_from_blocked_callback_beside_other_ring;
	 * TESTING.md, fixed problem 297).  The wait that set it may have
	 * ended while shorter ones go on: a long_only interrupt then
	 * reaches those, once, which costs them a turn. */
	uint64_t until = timeout_ms < 0 ? UINT64_MAX
				       : now + (uint64_t)timeout_ms * 1000000u;
	if (until > p->wait_end)
		p->wait_end = until;
	p->nwaiting++;
	pthread_mutex_unlock(&px->lock);      /* unlock point 3 */
	if (p->wait->ops->wait(p->wait, timeout_ms) == -EBADF && timeout_ms)
		proc_wait_broken(timeout_ms);
	pthread_mutex_lock(&px->lock);
	if (--p->nwaiting == 0)
		p->wait_end = 0;
	uint64_t end = px__now_ns();
	p->st.wait_ns += end - now;
	size_t n = 0;  /* descriptors claimed, with a claim op */
	/* Whether another thread is here is decided now, under the mutex,
	 * not when the turn began: a wait lasts, and a thread that was
	 * between two px_handle_events calls then (each returns after the
	 * callbacks it ran) may be asleep as a follower by now, ready to
	 * take half of the calls (test/test_epoll_edge.c once saw both
	 * calls of a slow claim made by the leader alone that way).  And
	 * one that left meanwhile cannot take any. */
	if (px->nthreads <= 1)
		release_min = 0;
	if (p->wait->ops->claim) {
		n = p->wait->ops->claim(p->wait);
		if (release_min && n >= release_min) {
			/* The caller ends the lead, then collects. */
			*claimed = true;
			return end;
		}
	}
	/* The claim's cost is measured only where the caller may release
	 * (other threads are here), and only while no thread runs
	 * callbacks, whose starts would meet this thread at the mutex and
	 * make the calls look long: that would be the cost of sharing, not
	 * of the calls, and counting it would make releases breed
	 * releases. */
	bool sample = release_min && n && !px->nhandlers;
	px__processor_collect_claimed(p, end);
	if (sample && !px->nhandlers)
		proc_note_claim_time(p, px__now_ns() - end, n);
	return end;
}

size_t px__processor_share_claimed(px_processor *p)
{
	return p->wait->ops->share ? p->wait->ops->share(p->wait) : 0;
}

bool px__processor_has_shared(const px_processor *p)
{
	return p->wait->ops->has_shared && p->wait->ops->has_shared(p->wait);
}

void px__processor_collect_claimed(px_processor *p, uint64_t end)
{
	size_t n = proc_collect(p, end);
	p->collected = n > 0;
	proc_start_deferred(p);
	proc_after_wait(p, n, end);
}

void px__processor_lead_begin(px_processor *p)
{
	p->nleading++;
	p->has_leader = true;
	proc_tls_leading = p;
	if (p->intr->ops->leader_activated)
		p->intr->ops->leader_activated(p->intr);
}

void px__processor_lead_end(px_processor *p)
{
	if (p->intr->ops->leader_deactivated)
		p->intr->ops->leader_deactivated(p->intr);
	p->nleading--;
	p->has_leader = p->nleading > 0;
	proc_tls_leading = NULL;
}

/* ------------------------------------------------------------------ */
/* Cancel                                                               */
/* ------------------------------------------------------------------ */

static void proc_cancel_one(px_processor *p, px_result *r, int *count)
{
	if (r->state == PX_RS_DEFERRED) {
		px_list_remove(&p->deferred, &r->link);
		px_result_finish(r, r->done, ECANCELED);
		r->state = PX_RS_READY;
		px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
	} else {
		if (p->prov->ops->cancel(p->prov, r) == PX_CANCEL_DONE) {
			px_list_remove(&p->started, &r->link);
			r->state = PX_RS_READY;
			px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
		} else {
			r->cancel_asked = 1;
		}
	}
	(*count)++;
}

static int proc_cancel_list(px_processor *p, px_list *list, const proc_match *m)
{
	int count = 0;
	px_link *l = px_list_first(list);
	while (l) {
		px_link *next = px_list_next(list, l);
		px_result *r = px_result_of(l);
		if (proc_matches(m, r))
			proc_cancel_one(p, r, &count);
		l = next;
	}
	return count;
}

/* Results inside the provider's start: mark them (see proc_provider_start). */
static int proc_cancel_starting(px_processor *p, const proc_match *m)
{
	int count = 0;
	px_link *l;

	for (l = px_list_first(&p->starting); l; l = px_list_next(&p->starting, l)) {
		px_result *r = px_result_of(l);
		if (proc_matches(m, r)) {
			r->cancel_pending = 1;
			count++;
		}
	}
	return count;
}

/* Cancel what m takes, starting, deferred and started. */
static int proc_cancel_matching(px_processor *p, const proc_match *m)
{
	int n = proc_cancel_starting(p, m);
	n += proc_cancel_list(p, &p->deferred, m);
	n += proc_cancel_list(p, &p->started, m);
	if (n && (p->flags & PX_PF_START_INTERRUPT))
		px__processor_interrupt(p);
	return n;
}

int px__processor_cancel_result(px_processor *p, px_result *r)
{
	int n = 0;

	for (px_link *l = px_list_first(&p->starting); l;
	     l = px_list_next(&p->starting, l)) {
		if (l == &r->link) {
			r->cancel_pending = 1;
			return 1;
		}
	}
	if (r->state != PX_RS_DEFERRED && r->state != PX_RS_STARTED)
		return 0;  /* finished already: its own result stands */
	proc_cancel_one(p, r, &n);
	return n;
}

void px__processor_cancelled(px_processor *p)
{
	/* A cancel the provider finished at once may have freed room under
	 * max_aio for deferred operations, and no event comes to end the
	 * leader's wait: only a leader starts deferred operations
	 * (proc_start_deferred), so interrupt it. */
	if ((p->flags & PX_PF_START_INTERRUPT) ||
	    (!px_list_empty(&p->deferred) &&
	     proc_at_provider(p) < p->max_aio))
		px__processor_interrupt(p);
}

void px__processor_cancel_all(px_processor *p)
{
	proc_match all = { .all = true };
	proc_cancel_starting(p, &all);
	proc_cancel_list(p, &p->deferred, &all);
	proc_cancel_list(p, &p->started, &all);
}

/* ------------------------------------------------------------------ */
/* Dedicated leader thread                                              */
/* ------------------------------------------------------------------ */

static void *proc_dedicated_main(void *arg)
{
	px_processor *p = arg;
	struct px_proactor *px = p->px;

	/* Every signal is blocked here (px__processor_run_dedicated); the
	 * interrupt strategy sets the mask its waits use in
	 * leader_activated. */
	pthread_mutex_lock(&px->lock);
	px__processor_lead_begin(p);
	uint64_t now = px__now_ns();
	while (!p->stop)
		now = px__processor_handle_aio_events(p, -1, now, 0, NULL);
	px__processor_lead_end(p);
	pthread_mutex_unlock(&px->lock);
	return NULL;
}

int px__processor_run_dedicated(px_processor *p)
{
	sigset_t all, old;
	sigfillset(&all);
	/* The thread starts with every signal blocked so that none of the
	 * application's signals land on it. */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&p->thread, NULL, proc_dedicated_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	p->thread_running = true;
	return 0;
}

/* Mutex held on entry and exit. */
void px__processor_stop_dedicated(px_processor *p)
{
	if (!p->thread_running)
		return;
	p->stop = true;
	if (p->has_leader) {
		p->st.leader_interrupts++;
		p->intr->ops->interrupt(p->intr);
	}
	pthread_mutex_unlock(&p->px->lock);
	pthread_join(p->thread, NULL);
	pthread_mutex_lock(&p->px->lock);
	p->thread_running = false;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

/* Build the provider of a resolved, non-auto config. */
static int proc_build(const px_processor_config *cfg, px_provider **prov,
			      const char *where, char *err, size_t errlen)
{
	px_proc_spec spec;
	int rc = px__spec_of(cfg, &spec, where, err, errlen);

	if (rc < 0)
		return rc;
	char why[256] = "";
	spec.why = why;
	spec.why_len = sizeof(why);
	rc = spec.cls->ops->create(cfg, &spec, prov);
	if (rc == 0)
		(*prov)->vec_ops = spec.cls->vectored_ops & (*prov)->ops_mask;
	if (rc < 0) {
		/* The call that failed, where the create said (a provider's
		 * own eventfd is named by neither the wait nor the
		 * interrupt), else what the class makes of the error. */
		bool known = why[0] ||
			     (spec.cls->explain &&
			      spec.cls->explain(rc, why, sizeof(why)));
		/* EBUSY alone said nothing of the signal it is about: a
		 * handler of the application's own is never replaced. */
		int isig = cfg->intr_signo ? cfg->intr_signo : SIGURG;
		if (!known && rc == -EBUSY && !strcmp(cfg->interrupt, "signal") &&
		    px__sigwait_holds(isig)) {
			snprintf(why, sizeof(why),
				 "signal %d (signal=) is the real-time signal "
				 "of another proactor's sigwait wait (POSIX "
				 "AIO), which interrupt=signal does not share; "
				 "give another signal=", isig);
			known = true;
		} else if (!known && rc == -EBUSY &&
			   !strcmp(cfg->interrupt, "signal")) {
			snprintf(why, sizeof(why),
				 "signal %d (signal=) has a handler the "
				 "application installed, which interrupt=signal "
				 "does not replace",
				 cfg->intr_signo ? cfg->intr_signo : SIGURG);
			known = true;
		} else if (!known && rc == -EBUSY &&
			   !strcmp(cfg->wait, "sigwait")) {
			snprintf(why, sizeof(why),
				 "the wait's real-time signal (rtsig=) has a "
				 "handler the application installed, or another "
				 "proactor waits on it");
			known = true;
		}
		/* Name the wait and the interrupt too: either may be what
		 * the kernel lacks (epoll, eventfd). */
		if (known)
			px__set_err(err, errlen,
				   "%scannot create provider %s (wait=%s interrupt=%s): "
				   "%s (%s)", where, spec.cls->name, cfg->wait,
				   cfg->interrupt, px_strerror(rc), why);
		else
			px__set_err(err, errlen,
				   "%scannot create provider %s (wait=%s interrupt=%s): %s",
				   where, spec.cls->name, cfg->wait, cfg->interrupt,
				   px_strerror(rc));
	}
	return rc;
}

/* Errors after which "auto" goes on to its next candidate: the mechanism
 * is missing, forbidden, short of memory or of a system-wide resource
 * (EAGAIN: Linux AIO's fs.aio-max-nr), or refuses this combination. */
static bool proc_auto_may_skip(int rc)
{
	return rc == -ENOSYS || rc == -EPERM || rc == -ENOMEM || rc == -EINVAL ||
	       rc == -EAGAIN;
}

/* What auto reports when no candidate worked: the error of the candidate
 * that came closest, ranked by what it says about the machine.  Out of
 * memory, a temporary shortage and a refusal by policy outrank "not
 * offered" (ENOSYS) and a combination the resolver refuses (EINVAL: the
 * linux_rt wait on a shared processor, say), which say nothing about why
 * the others failed. */
static int proc_auto_rank(int rc)
{
	switch (rc) {
	case -ENOMEM:
		return 3;
	case -EAGAIN:
		return 2;
	case -EPERM:
		return 1;
	default:
		return 0;
	}
}

/* Append "name[ wait=W]: why" to auto's list of what it tried. */
static void proc_note_tried(char *tried, size_t len, size_t *pos,
			    const char *name, const char *wait, const char *why)
{
	if (*pos >= len)
		return;
	int w = snprintf(tried + *pos, len - *pos, "%s%s%s%s: %s",
			 *pos ? "; " : "", name, wait[0] ? " wait=" : "", wait,
			 why);
	if (w > 0)
		*pos += (size_t)w;
	if (*pos >= len && len > 4)  /* cut short: say so */
		memcpy(tried + len - 4, "...", 4);
}

/* "auto": the candidates in order (px__auto_candidates), each probed and
 * then built, until one works.  A class whose default wait the kernel
 * lacks or refuses (epoll where CONFIG_EPOLL is off, say) is tried with
 * its other waits in the class's order, and, where the configuration
 * leaves the interrupt open, a wait whose default interrupt fails (no
 * eventfd) with a pipe, before the next class.  A signal interrupt is
 * never chosen this way: it would take a signal number the application
 * did not give.  (An auto config has no wait: a wait names its provider,
 * px__resolve_processor.)  cfg receives the one chosen. */
static int proc_build_auto(px_processor_config *cfg, px_provider **prov,
				   const char *where, char *err, size_t errlen)
{
	const px_provider_class *cand[8];
	unsigned n = px__auto_candidates(cfg, cand, 8);
	char tried[768] = "";
	size_t pos = 0;
	int rc = -ENOSYS;
	int best = -ENOSYS;  /* what to report if nothing works */
	int given_intr = cfg->interrupt[0] ? px__intr_type(cfg->interrupt) : 0;

	for (unsigned i = 0; i < n; i++) {
		const px_provider_class *cls = cand[i];
		char why[256] = "";
		rc = cls->probe ? cls->probe(why, sizeof(why)) : 0;
		if (rc < 0) {
			proc_note_tried(tried, sizeof(tried), &pos, cls->name, "",
					why);
			if (!proc_auto_may_skip(rc))
				goto out;
			if (proc_auto_rank(rc) > proc_auto_rank(best))
				best = rc;
			continue;
		}
		for (unsigned w = 0; w < cls->nwaits; w++) {
			const px_wait_desc *wd = &cls->waits[w];
			if (given_intr > 0 && !(wd->intrs & (1u << given_intr)))
				continue;
			/* The wait's default interrupt, then a pipe. */
			bool pipe_too = !cfg->interrupt[0] &&
					wd->default_intr != PX_INTR_PIPE &&
					(wd->intrs & (1u << PX_INTR_PIPE));
			for (int k = 0; k < (pipe_too ? 2 : 1); k++) {
				px_processor_config c = *cfg;
				px__set_name(c.provider, PX_NAME_MAX, cls->name,
					     strlen(cls->name));
				px__set_name(c.wait, PX_NAME_MAX, wd->name,
					     strlen(wd->name));
				if (k == 1)
					px__set_name(c.interrupt, PX_NAME_MAX, "pipe", 4);
				why[0] = '\0';
				rc = px__resolve_processor(&c, where, why, sizeof(why));
				if (rc == 0)
					rc = proc_build(&c, prov, "", why, sizeof(why));
				if (rc == 0) {
					*cfg = c;
					return 0;
				}
				proc_note_tried(tried, sizeof(tried), &pos, cls->name,
						c.wait, why);
				if (!proc_auto_may_skip(rc))
					goto out;
				if (proc_auto_rank(rc) > proc_auto_rank(best))
					best = rc;
			}
		}
	}
	/* Every candidate was passed over. */
	rc = best;
out:
	px__set_err(err, errlen, "%sauto found no engine that works here (%s)",
		   where, n ? tried : "no candidate");
	return rc < 0 ? rc : -ENOSYS;
}

/* A team's secondary refused with EBUSY on a signal: when that signal is
 * one the primary, just made, holds (its interrupt=signal, or its sigwait
 * wait's real-time signal, given or taken as the first free), the
 * messages of proc_build and of the provider blamed the application or
 * another proactor.  Say whose it is instead. */
static void proc_team_signal_clash(const struct px_proactor *px,
				   const px_processor_config *cfg, char *err,
				   size_t errlen)
{
	const char *key = NULL;
	int want = 0;

	if (px->nproc != 1)
		return;
	if (!strcmp(cfg->interrupt, "signal")) {
		key = "signal=";
		want = cfg->intr_signo ? cfg->intr_signo : SIGURG;
	} else if (!strcmp(cfg->wait, "sigwait")) {
		/* rtsig=N among the provider's words; without it the wait
		 * takes a free signal, never the primary's. */
		key = "rtsig=";
		for (const char *w = cfg->words; (w = strstr(w, key)); w++)
			if (w == cfg->words || w[-1] == ' ') {
				want = atoi(w + strlen(key));
				break;
			}
	}
	if (want <= 0)
		return;
	const px_processor_config *pc = &px->cfg.primary;
	const char *whose = NULL;
	if (!strcmp(pc->interrupt, "signal") &&
	    (pc->intr_signo ? pc->intr_signo : SIGURG) == want)
		whose = "the primary's interrupt (interrupt=signal)";
	else if (px__sigwait_signal_of(px->proc[0]->prov) == want)
		whose = "the real-time signal of the primary's sigwait wait "
			"(POSIX AIO)";
	if (!whose)
		return;
	px__set_err(err, errlen,
		   "secondary: signal %d (%s) is %s, and the two processors of "
		   "a team cannot share it (each would take the other's "
		   "signals): give the secondary another %s, or the primary "
		   "another signal", want, key, whose, key);
}

int px__processor_create(struct px_proactor *px, int index,
			px_processor_config *cfg, px_processor **out,
			char *err, size_t errlen)
{
	const char *where = index ? "secondary: " : "";
	px_processor *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return -ENOMEM;
	if (cfg->provider[0])
		rc = proc_build(cfg, &p->prov, where, err, errlen);
	else
		rc = proc_build_auto(cfg, &p->prov, where, err, errlen);
	if (rc == -EBUSY && index == 1)
		proc_team_signal_clash(px, cfg, err, errlen);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->prov->lock = &px->lock;
	p->prov->px = px;
	p->px = px;
	p->index = index;
	p->wait = p->prov->wait;
	p->intr = p->wait->intr;
	p->type = cfg->processor == PX_PROCESSOR_DEDICATED ? PX_PROCESSOR_DEDICATED
							   : PX_PROCESSOR_SHARED;
	p->flags = p->prov->flags;
	if (cfg->flags & PX_PF_FLAGS_SET)
		p->flags = cfg->flags & (PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT);
	/* START_INTERRUPT only means something with START_ANY_THREAD; and a
	 * provider that needs the interrupt keeps it. */
	if (p->prov->flags & PX_PF_START_INTERRUPT)
		p->flags |= PX_PF_START_INTERRUPT;
	p->max_aio = p->prov->max_aio ? p->prov->max_aio : 1;
	p->max_leaders = 1;
	if (p->type == PX_PROCESSOR_SHARED && p->prov->max_leaders > 1 &&
	    p->wait->ops->may_lead)
		p->max_leaders = p->prov->max_leaders;
	p->ops = p->prov->ops_mask & (cfg->ops ? cfg->ops : PX_OPS_IO);
	p->vec_ops = p->prov->vec_ops & p->ops;
	if (cfg->ops && !p->ops) {
		/* Every start would fail with EOPNOTSUPP: say so now. */
		px__set_err(err, errlen,
			   "%sprovider %s does none of the operations its ops= "
			   "names (mask 0x%x): choose another provider or "
			   "other operations",
			   where, cfg->provider, (unsigned)cfg->ops);
		p->prov->ops->destroy(p->prov);
		free(p);
		return -EINVAL;
	}
	px_list_init(&p->started);
	px_list_init(&p->deferred);
	px_list_init(&p->starting);
	p->check_gap = PROC_CHECK_MIN_NS;
	p->last_check = px__now_ns();
	*out = p;
	return 0;
}

void px__processor_destroy(px_processor *p)
{
	if (!p)
		return;
	if (p->prov)
		p->prov->ops->destroy(p->prov);
	free(p);
}
