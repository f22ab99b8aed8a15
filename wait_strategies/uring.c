/*
 * uring.c - the io_uring wait strategy and its native interrupt.
 *
 * Unlike the readiness pollers beside it (poller.h), this wait serves one
 * provider only: it waits on the ring the io_uring provider submits to,
 * and works on that provider's state (providers/uring.h).  A completion
 * wait has nothing to share with readiness.
 *
 * prepare() (leader, locked) publishes every SQE the starts left in the
 * ring (stores the SQ tail, no system call) and marks the leader as
 * waiting; from then on a start or cancel made by another thread submits its
 * own SQE (see providers/uring.c).  wait() (leader, unlocked) submits what
 * prepare published and waits for CQEs in one io_uring_enter (GETEVENTS,
 * with IORING_FEAT_EXT_ARG (5.11, checked at create) for the timeout).  It
 * reads no SQ field the locked starters move: the kernel takes the SQEs
 * between its head and the published tail, at most to_submit of them, so
 * a concurrent enter by a starter takes the rest.  With nothing to submit
 * (or with SQPOLL, or after a refused submit) it is io_uring_wait_cqe or
 * io_uring_wait_cqe_timeout as before, which enter with to_submit 0.  Other
 * threads never touch the CQ side; only the leader advances its head, in
 * next_completed() (locked).
 *
 * The interrupt is a NOP sent through the ring itself.  Its CQE wakes the
 * leader's io_uring_enter like any completion, and next_completed()
 * swallows it (user_data PX_URING_TAG_NOP), so nothing reaches the
 * completed queue and drain has nothing to do.  A NOP rather than
 * IORING_OP_MSG_RING (5.18): it exists since 5.1, completes inline in the
 * interrupting thread's io_uring_enter, and MSG_RING's only advantage,
 * posting into another ring, is not needed.  Cost control:
 *   - while a NOP is in flight (intr_queued), more interrupts do nothing;
 *   - when no leader is waiting yet, no NOP at all: a flag makes the next
 *     wait return at once without entering the kernel.
 * If the SQ is full and cannot be submitted (EAGAIN/EBUSY from the kernel),
 * the interrupt falls back to that flag, which the leader sees only after
 * its current wait.  (With SQPOLL a full SQ is first given to the kernel
 * thread to take: px__uring_get_sqe_now.)
 *
 * This file has two ops tables, the wait's and the interrupt's: they are
 * one mechanism and share the ring.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include "../providers/uring.h"

/* How long the leader waits before retrying a submit the kernel refused
 * with EAGAIN or EBUSY. */
#define PX_URING_STUCK_MS 10


static void px_uring_wait_destroy(px_wait *w)
{
	(void)w;  /* embedded in the provider, which frees it */
}

/* The ring this thread leads, from prepare() to the next_completed() that
 * finds nothing more (NULL: prepare found every ring led). */
static __thread px_uring_ring *px_uring_tls_lead;

/* This thread's last wait ran out at the bound of its watch (see
 * prepare): the next watch may grow. */
static __thread bool px_uring_tls_watch_ran_out;

/* The most CQEs one lead reaps from each ring it holds; the rest stay in
 * the CQ for the next lead, whose wait then does not block.  (Per ring, so
 * that a lone leader holding several rings serves each of them every
 * time, however busy the first is.)  A leader runs the callbacks of what it
 * reaped before it submits the operations they start (they go into its
 * ring, unsubmitted until it leads again), so a lead that reaps a thousand
 * CQEs holds a thousand sessions back while it runs their callbacks, and
 * the thread leading the other ring, whose sessions talk to those, runs
 * dry and sleeps.  Reaping 64 at a time sends the first replies into the
 * kernel after 64 callbacks.  Measured on 1000/2/4096/4096 (5 rounds of
 * 3 s): 320-430 MB/s one way against 150-300 without the bound, with
 * 1.8-1.9 CPUs busy against 1.0-1.8; 100/2/8192/8192 keeps 1.9-2.0 CPUs
 * busy (without it, 1.1-1.4 in two runs of five).  Fewer (16, 32) did not
 * do better. */
#define PX_URING_REAP_MAX 64u

/* Make rg's SQEs ready for this leader's wait and mark it waiting. */
static int px_uring_prepare_ring(px_uring_ring *rg, bool *stuck)
{
	px__uring_kick_arm(rg);  /* before the flush: this thread submits it */
	px__uring_gate_arm(rg);  /* parked reads whose poll found no SQE */
	int rc = px__uring_flush(rg);

	*stuck = *stuck || rg->submit_stuck;
	rg->waiting = true;
	rg->reaped = 0;
	return rc;
}

static int px_uring_prepare(px_wait *w, px_list *started)
{
	px_uring *u = px_uring_of_wait(w);
	px_uring_ring *rg;
	bool stuck = false;
	int rc, rc2;

	/* The kernel already knows every started operation; the list is
	 * looked at only for a dead ring (next_completed). */
	u->started = started;
	/* Before anything is reaped: a CQE from now on makes it readable. */
	px__uring_ready_drain(u);
	u->alone = !w->others_here;
	rg = px__uring_pick(u, w->others_busy);
	px_uring_tls_lead = rg;
	if (!rg)
		return 0;  /* the wait returns at once */
	rg->nextra = 0;
	rg->orphans = false;
	/* Rings with work and no leader: held as well unless another thread
	 * leads or runs callbacks (others_busy) and will come back to its
	 * ring; then only noted, to keep this wait short, and held once
	 * nobody has led the ring for PX_URING_ORPHAN_MS
	 * (px__uring_orphaned).  (Taking another thread's ring whenever that
	 * thread is between two batches left it with nothing to lead.)
	 * While the other threads sleep as followers nobody comes back to
	 * their rings: with others_here in place of others_busy, an idle
	 * `echo_server -t 2` answered each message on a connection of the
	 * second ring 1.2 ms late, the orphan delay, against 0.15 ms on the
	 * first ring. */
	uint64_t now = 0;
	unsigned worked = 0;   /* of the rings other leaders hold */
	bool watch = false;    /* one of them has work */
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *o = &u->rings[i];
		if (o == rg)
			continue;
		if (o->led) {  /* (every one this loop marks is seen once) */
			worked += o->worked;
			watch = watch || o->pending;
			continue;
		}
		if (!o->pending)
			continue;
		if (w->others_busy && !px__uring_orphaned(o, &now)) {
			rg->orphans = true;
			continue;
		}
		o->led = true;
		rg->extra[rg->nextra++] = o;
	}
	/* The watch.  Another thread leads a ring with work; should it leave
	 * px_handle_events, or block in a callback, after its lead, that
	 * ring's work (the operations its callbacks started, the requests a
	 * completion put in, the completions of those in flight) would wait
	 * until this thread's wait ended for some other reason: the idle
	 * check, 200 ms to 1 s (the ring is taken over at the prepare after
	 * that: px__uring_orphaned).  So this wait lasts at most
	 * PX_URING_WATCH_MS while the others have handed out completions
	 * since the last look, twice as long after each wait that ran out
	 * and found they have not (their callbacks are what might keep them
	 * away: they cannot leave before they wake), up to
	 * PX_URING_WATCH_MAX_MS; and a leader that lets a ring with work go
	 * interrupts a leader whose watch has grown (next_completed).  Busy
	 * rings never see the bound (their waits end sooner); idle ones
	 * wake a few times as it grows.  (Counted in leads that handed out
	 * something: two idle leaders whose watches ended each other's
	 * counted as busy, and woke every 20 ms for good.) */
	bool ran_out = px_uring_tls_watch_ran_out;
	px_uring_tls_watch_ran_out = false;
	if (!watch) {
		rg->watch_next = 0;
	} else if (!rg->watch_next || worked != rg->watch_worked) {
		rg->watch_next = PX_URING_WATCH_MS;
	} else if (ran_out && rg->watch_next < PX_URING_WATCH_MAX_MS) {
		rg->watch_next = rg->watch_next * 2 < PX_URING_WATCH_MAX_MS
				 ? rg->watch_next * 2 : PX_URING_WATCH_MAX_MS;
	}
	rg->watch_worked = worked;
	rg->bound_ms = rg->orphans ? PX_URING_ORPHAN_MS : rg->watch_next;
	for (unsigned i = 0; i < rg->nextra; i++)
		rg->extra[i]->bound_ms = rg->bound_ms;
	px__uring_flush_stalled(u, rg);
	/* After the sends the callbacks started, so a read held since the
	 * last prepare finds what those sends carried (see "Late reads" in
	 * providers/uring.c). */
	bool held = px__uring_late_flush(u, rg);
	for (unsigned i = 0; i < rg->nextra; i++)
		held = px__uring_late_flush(u, rg->extra[i]) || held;
	rc = px_uring_prepare_ring(rg, &stuck);
	for (unsigned i = 0; i < rg->nextra; i++) {
		rc2 = px_uring_prepare_ring(rg->extra[i], &stuck);
		if (rc2 < 0 && rc >= 0)
			rc = rc2;
	}
	rg->wait_short = stuck;
	/* Reads still held are issued by the next prepare, and whether the
	 * ones just issued found their data is read off this lead: either
	 * way this wait must not block. */
	rg->skip_wait = held;
	if (u->intr_deferred) {
		u->intr_deferred = false;
		rg->skip_wait = true;
	}
	return rc;
}

/* Submit what prepare() published on rg and, with flags, wait: one enter. */
static int px_uring_enter(px_uring_ring *rg, int timeout_ms, bool wait)
{
	unsigned n = rg->to_submit;
	unsigned flags = 0, min = 0;
	struct __kernel_timespec ts = {
		.tv_sec = timeout_ms / 1000,
		.tv_nsec = (long long)(timeout_ms % 1000) * 1000000,
	};
	struct io_uring_getevents_arg arg = {
		.sigmask = 0,
		.sigmask_sz = _NSIG / 8,
		.ts = timeout_ms > 0 ? (uint64_t)(uintptr_t)&ts : 0,
	};
	int rc;

	rg->to_submit = 0;
	if (wait && timeout_ms != 0 && !io_uring_cq_ready(&rg->ring)) {
		flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
		min = 1;
	}
	rc = io_uring_enter2((unsigned)rg->ring.ring_fd, n, min, flags,
			     flags ? (sigset_t *)&arg : NULL,
			     flags ? sizeof(arg) : 0);
	/* Its submission is over: a cancel waiting to make one of those SQEs
	 * a NOP may look (ur_void_unsubmitted, providers/uring.c). */
	if (n)
		atomic_store_explicit(&rg->entering, false,
				      memory_order_release);
	/* With SQEs to submit, a failure means the kernel took none of them
	 * (it submits before it waits, and then reports what it took): they
	 * wait for the next prepare, which retries after a short wait.
	 * Whatever the error: an ENOMEM or EINTR that went unmarked had the
	 * next prepare publish them and enter again at once, and the leader
	 * spun for as long as the kernel refused (fixed problem 221). */
	if (rc < 0 && n)
		rg->enter_err = rc;
	px__uring_enter_failed(rg, rc);
	return rc;
}

/* The leader holds several rings: submit into each, then sleep in poll(2)
 * on all of them (a ring's descriptor is readable while its CQ has
 * entries). */
static int px_uring_wait_many(px_uring_ring *rg, int timeout_ms)
{
	struct pollfd fds[PX_URING_RINGS_MAX];
	unsigned n = 0;
	bool ready = false;
	int rc;

	for (unsigned i = 0; i <= rg->nextra; i++) {
		px_uring_ring *o = i ? rg->extra[i - 1] : rg;
		if (o->to_submit)
			px_uring_enter(o, 0, false);
		ready = ready || io_uring_cq_ready(&o->ring);
		fds[n].fd = o->ring.ring_fd;
		fds[n].events = POLLIN;
		fds[n].revents = 0;
		n++;
	}
	if (ready || timeout_ms == 0)
		return 1;
	rc = poll(fds, n, timeout_ms);
	if (rc < 0)
		return -errno;
	/* A ring's descriptor closed behind the library's back. */
	for (unsigned i = 0; i < n; i++)
		if (fds[i].revents & POLLNVAL)
			px__uring_enter_failed(i ? rg->extra[i - 1] : rg, -EBADF);
	return rc;
}

static int px_uring_wait_on(px_uring_ring *rg, int timeout_ms);

static int px_uring_wait(px_wait *w, int timeout_ms)
{
	px_uring_ring *rg = px_uring_tls_lead;
	int rc;

	if (!rg)
		return 0;
	if (px_uring_of_wait(w)->valgrind) {
		/* valgrind hands its lock to another thread in sched_yield
		 * (a call it knows), not in io_uring_enter: PX_URING_VALGRIND_MS. */
		sched_yield();
		timeout_ms = px__cap_ms(timeout_ms, PX_URING_VALGRIND_MS);
	}
	if (rg->skip_wait) {
		rg->skip_wait = false;
		timeout_ms = 0;
	}
	if (rg->wait_short)
		timeout_ms = px__cap_ms(timeout_ms, PX_URING_STUCK_MS);
	/* Orphans (another ring with work and no leader) or the watch (see
	 * prepare). */
	bool watched = false;
	if (rg->bound_ms && (timeout_ms < 0 || timeout_ms > (int)rg->bound_ms)) {
		timeout_ms = (int)rg->bound_ms;
		watched = !rg->orphans;
	}
	rc = px_uring_wait_on(rg, timeout_ms);
	/* Nothing came before the watch's bound: the next may be longer. */
	px_uring_tls_watch_ran_out = watched && rc == 0;
	return rc;
}

/* The wait itself, on rg and the rings it holds besides. */
static int px_uring_wait_on(px_uring_ring *rg, int timeout_ms)
{
	struct io_uring_cqe *cqe;
	int rc;

	if (atomic_load_explicit(&rg->dead, memory_order_relaxed)) {
		/* Its descriptor was closed behind the library's back: every
		 * enter fails at once, and a dedicated leader spun on it at
		 * full CPU.  Nothing can wake a wait through the ring either
		 * (the interrupt is a NOP in it): EBADF makes the processor
		 * nap in its place (proc_wait_broken, processor.c), as for
		 * any wait on a closed descriptor; what the ring holds ends
		 * in next_completed.  (A wait that must not block, such as
		 * skip_wait's, returns at once.)  No enter: a cancel must not
		 * wait for one (ur_void_unsubmitted). */
		for (unsigned i = 0; i <= rg->nextra; i++)
			atomic_store_explicit(&(i ? rg->extra[i - 1] : rg)->entering,
					      false, memory_order_release);
		return timeout_ms != 0 ? -EBADF : 0;
	}
	if (rg->nextra)
		return px_uring_wait_many(rg, timeout_ms);
	if (rg->to_submit) {
		/* Submit what prepare() published and wait, in one enter. */
		rc = px_uring_enter(rg, timeout_ms, true);
		if (rc < 0 && rc != -ETIME && rc != -EAGAIN && rc != -EBUSY)
			return rc;  /* -EINTR included: an ordinary wake-up */
		return (int)io_uring_cq_ready(&rg->ring);
	}
	if (timeout_ms == 0) {
		rc = io_uring_peek_cqe(&rg->ring, &cqe);
	} else if (timeout_ms < 0) {
		rc = io_uring_wait_cqe(&rg->ring, &cqe);
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ms / 1000,
			.tv_nsec = (long long)(timeout_ms % 1000) * 1000000,
		};
		rc = io_uring_wait_cqe_timeout(&rg->ring, &cqe, &ts);
	}
	if (rc == -ETIME || rc == -EAGAIN)
		return 0;
	px__uring_enter_failed(rg, rc);
	if (rc < 0)
		return rc;  /* -EINTR included: an ordinary wake-up */
	return (int)io_uring_cq_ready(&rg->ring);
}

/* The leader is back from its wait on o (locked). */
static void px_uring_reap_end(px_uring_ring *o)
{
	if (o->enter_err) {
		/* The wait's submit was refused: SQEs are still pending. */
		o->enter_err = 0;
		o->submit_stuck = true;
	}
	o->waiting = false;
}

/* Reap one CQE of o, if it has one; *r is what it finished. */
static bool px_uring_reap(px_uring *u, px_uring_ring *o, px_result **r)
{
	struct io_uring_cqe *cqe;

	px_uring_reap_end(o);
	if (io_uring_peek_cqe(&o->ring, &cqe) != 0 || !cqe)
		return false;
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;

	io_uring_cqe_seen(&o->ring, cqe);
	px__uring_prefetch(o);
	*r = px__uring_complete(u, o, ud, res);
	return true;
}

static px_result *px_uring_next_completed(px_wait *w)
{
	px_uring *u = px_uring_of_wait(w);
	px_uring_ring *rg = px_uring_tls_lead;
	px_result *r = NULL;

	if (!rg)
		return NULL;
	for (unsigned i = 0; i <= rg->nextra; i++) {
		px_uring_ring *o = i ? rg->extra[i - 1] : rg;
		if (o->reaped >= PX_URING_REAP_MAX) {
			/* Enough for this lead (the rest waits in the CQ). */
			px_uring_reap_end(o);
			continue;
		}
		while (px_uring_reap(u, o, &r))
			if (r) {
				o->reaped++;
				return r;
			}
		/* Its descriptor is gone: what it holds ends here, once
		 * each, as no CQE will (px__uring_dead_next). */
		if (atomic_load_explicit(&o->dead, memory_order_relaxed)) {
			r = px__uring_dead_next(u, o, u->started);
			if (r)
				return r;
			o->pending = 0;
			o->cancels_inflight = 0;
		}
	}
	/* Nothing more, or enough: let the rings go. */
	/* (Every ring, the home one too, gets the time: it is how long
	 * nobody has led a ring that tells another thread it may.  The
	 * processor's reading at the end of the wait is a few microseconds
	 * old, which is close enough for a measure in milliseconds, and
	 * saves a clock read per lead.) */
	uint64_t now = w->now_ns ? w->now_ns : px__now_ns();
	/* Completions handed out, and work left in the rings let go. */
	bool handed = rg->reaped != 0, work = rg->pending != 0;
	rg->worked += handed;
	for (unsigned i = 0; i < rg->nextra; i++) {
		bool h = rg->extra[i]->reaped != 0;
		handed = handed || h;
		work = work || rg->extra[i]->pending;
		rg->extra[i]->worked += h;
		rg->extra[i]->led = false;
		rg->extra[i]->bound_ms = 0;
		rg->extra[i]->released_ns = now;
	}
	rg->nextra = 0;
	rg->led = false;
	rg->bound_ms = 0;
	rg->released_ns = now;
	px_uring_tls_lead = NULL;
	/* Rings with work are let go, and this thread, about to run the
	 * callbacks of what it handed out, may not come back to them (it may
	 * leave px_handle_events, or block in a callback): a leader that
	 * waits on another ring without a bound, or with a watch grown while
	 * this thread sat in its wait, would not look at them for up to a
	 * second.  Wake it (a NOP); it then waits with a short watch, and
	 * takes them over if nobody comes back to them.  While both threads
	 * are busy, the other's watch is short and nobody is woken.  (Not
	 * after a lead that handed out nothing: two idle leaders then woke
	 * each other in turn without end.) */
	if (handed && work) {
		for (unsigned i = 0; i < u->nrings; i++) {
			px_uring_ring *o = &u->rings[i];
			if (o->led && o->waiting &&
			    (!o->bound_ms || o->bound_ms > PX_URING_WATCH_MS)) {
				u->intr.ops->interrupt(&u->intr);
				break;
			}
		}
	}
	return NULL;
}

/* A ring this thread would lead has work and nobody waiting on it (see
 * px_wait_ops). */
static bool px_uring_may_lead(px_wait *w)
{
	return px__uring_may_lead(px_uring_of_wait(w), w->others_busy);
}

/* An eventfd the kernel signals at every CQE (providers/uring.c, "The
 * ready descriptor"), for a lone thread's other wait to watch. */
static int px_uring_ready_fd(px_wait *w)
{
	return px__uring_ready_fd(px_uring_of_wait(w));
}

/* The processor's idle check: a ring whose number names another file
 * now (px__own_fd_is) is dead, as for EBADF.  Another io_uring ring
 * there (the application's) takes every enter without an error: it
 * submitted that ring's SQEs for the counts of ours, none of ours went
 * in, and px_destroy waited for its cancels for good (TESTING.md, fixed
 * problem 311).  Two system calls a ring. */
static void px_uring_check(px_wait *w)
{
	px_uring *u = px_uring_of_wait(w);

	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];

		if (!atomic_load_explicit(&rg->dead, memory_order_relaxed) &&
		    !px__own_fd_is(rg->ring.ring_fd, &rg->ring_id))
			atomic_store_explicit(&rg->dead, true,
					      memory_order_relaxed);
	}
	/* The kick and ready eventfds and the gate sets (after the rings:
	 * a dead ring is not unregistered from). */
	px__uring_check_own(u);
}

const px_wait_ops px__wait_uring_ops = {
	.name = "uring",
	.destroy = px_uring_wait_destroy,          /* nothing: lives in the provider */
	.on_start = NULL,                          /* the SQE says it all */
	.prepare = px_uring_prepare,               /* submit pending SQEs in one enter */
	.wait = px_uring_wait,                     /* wait for CQEs only, never submit */
	.next_completed = px_uring_next_completed, /* reap one CQE -> result */
	.may_lead = px_uring_may_lead,             /* a ring with work, no leader */
	.ready_fd = px_uring_ready_fd,             /* an eventfd of every ring */
	.check = px_uring_check,                   /* the rings still ours? */
};

/* ------------------------------------------------------------------ */
/* Native interrupt                                                     */
/* ------------------------------------------------------------------ */

static void px_uring_intr_destroy(px_intr *in)
{
	(void)in;  /* embedded in the provider */
}

static void px_uring_intr_interrupt(px_intr *in)
{
	px_uring *u = px_uring_of_intr(in);
	bool any = false;

	/* Every leader that waits: the caller (which may lead a ring itself,
	 * not waiting while it runs this) wants whoever sleeps to look. */
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];
		struct io_uring_sqe *sqe;

		if (!rg->waiting)
			continue;
		any = true;
		if (rg->intr_queued)
			continue;
		/* With SQPOLL the one-entry SQ of ring=1 was still full of
		 * a start the kernel thread had yet to take, and the NOP
		 * fell back to intr_deferred, which a leader blocked in the
		 * kernel sees only when its wait ends: a post made right
		 * after a start waited up to a second (196 of 200 on `uring
		 * ring=1 rings=1 ring_flags=sqpoll`; TESTING.md, fixed
		 * problem 282).  So wait for the thread to take them. */
		sqe = px__uring_get_sqe_now(rg, 0);
		if (!sqe) {
			u->intr_deferred = true;
			continue;
		}
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, PX_URING_TAG_NOP);
		rg->intr_queued = true;
		px__uring_kick(rg);
	}
	if (!any)
		u->intr_deferred = true;
}

static void px_uring_intr_drain(px_intr *in)
{
	(void)in;  /* next_completed already swallowed the NOP's CQE */
}

const px_intr_ops px__intr_uring_ops = {
	.name = "native",
	.destroy = px_uring_intr_destroy,     /* nothing: lives in the provider */
	.interrupt = px_uring_intr_interrupt, /* NOP through the ring, or a flag */
	.leader_activated = NULL,
	.leader_deactivated = NULL,
	.drain = px_uring_intr_drain,         /* nothing to consume */
};
