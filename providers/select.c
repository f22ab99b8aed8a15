/*
 * providers/select.c - the readiness ("select") provider: completion I/O
 * emulated on top of readiness notification (select, poll or epoll, one
 * poller of wait_strategies/poller.h).  This file is the half that runs
 * under the proactor mutex; the system calls are the shared ones of
 * nbio.c (also the Linux AIO provider's), with this provider's rules.
 *
 * A start whose direction queue is empty first tries the real call at once,
 * without blocking; most of the time it finishes right there and no wait is
 * involved (with epoll, a direction known not to be ready goes straight to
 * the wait: see "Edge-triggered watching").  Otherwise the result
 * joins its descriptor's queue for that direction (proactor/fdq.h) and the
 * poller watches the descriptor.  When it is ready the leader performs the
 * call for the queue head, and for the next ones while they finish.  Only
 * a queue head is ever tried, and only by one thread at a time, so a
 * stream's bytes go in start order whatever the number of threads.
 *
 * The system calls run without the proactor mutex (a change to the locking
 * model of DESIGN.md: with the mutex held, a second thread in
 * px_handle_events spent its time blocked behind the leader's recv/send).
 * The rule is claim, then unlock:
 *  - Under the mutex, the results about to be worked on are marked busy
 *    (px_sel_priv.busy) and their direction too (sel_fd.busy).  They stay
 *    on their queue, so a start in that direction finds it non-empty and
 *    queues behind them instead of trying at once.  With a LIVE poller
 *    (epoll) a busy direction is not watched; whoever holds the claim asks
 *    for it again when letting go.  The other pollers watch it anyway: a
 *    thread letting go of a claim cannot reach their wait in progress.
 *  - The mutex is released around the calls.  The calls use a private copy
 *    of the entry's kind and flags (px_nbio) and write only the claimed
 *    results: nobody else touches those while they are busy.  Entries are
 *    never freed or moved before destroy (fdq.h), so pointers to them
 *    survive the unlock (the table of pointers may grow meanwhile).
 *  - With the mutex retaken, each claimed result is let go: finished (data,
 *    end of stream, an error) it leaves its queue for the done list; not
 *    ready, it stays at the head and the descriptor is watched again,
 *    unless a cancel came meanwhile, which then completes it with ECANCELED
 *    (bytes moved so far).  A cancel of a busy result only marks it and
 *    answers PX_CANCEL_PENDING: the result is still on the processor's
 *    started list, and the leader hands it out through next_completed.
 *  - start() claims the new result alone (at the head of its empty queue).
 *    If it finishes and starts queued behind it meanwhile, the descriptor
 *    is watched for them (or, where it cannot be watched, they are done
 *    there and the leader is interrupted to hand them out).
 *  - The leader (claim, the only caller of sel_claim/sel_edge_claim)
 *    claims the ready heads of every descriptor reported by one wait, up to
 *    CLAIM_MAX a queue; then one unlock for all of their calls (sel_run, in
 *    next_completed).  With the edge poller the claimed batch becomes the
 *    claiming thread's (sel_tls_run), and the processor may end its lead
 *    before the calls, so that another thread waits and claims meanwhile
 *    (docs/ARCHITECTURE.md, "Giving up the lead before the calls"), or
 *    share half of the batch with a sleeping follower (px_sel.shared,
 *    sel_wait_share), which makes those calls while this thread makes the
 *    rest.
 *
 * The processor sees this provider's own px_wait (the end of this file):
 * prepare, wait and collect of the poller, plus the claims and the run.
 * poll and select report a descriptor once per arming; the provider arms it
 * again (sel_update) after every report it handles.  epoll is the edge
 * poller: registered once, no arming (see "Edge-triggered watching").
 *
 * Quirks:
 *  - A descriptor closed with operations pending: poll and select notice
 *    (PX_POLL_NVAL) at their next wait, which comes within
 *    PX_POLL_RECHECK_MS, and its operations complete with EBADF.  epoll
 *    drops a closed descriptor silently; the processor's idle check
 *    (proactor/processor.c) cancels such operations (EBADF), and so does
 *    the provider's own check of an unverified registration.
 *  - The epoll instance itself closed behind the library's back: the
 *    poller marks itself broken and the leader makes a new instance after
 *    its wait (sel_rebuilt).
 *  - Nothing allocates between start and completion: the descriptor table
 *    (fdq.h) and the poll poller's arrays grow at start time, which may
 *    fail with -ENOMEM.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "../wait_strategies/poller.h"
#include "fdq.h"
#include "select.h"

/* Claimed queue heads tried per direction and event, at most. */
#define SEL_CLAIM_MAX 16

/* Events taken from the poller at a time. */
#define SEL_EVENTS 256

/* Where a started result is (px_sel_priv.at). */
enum { SEL_AT_NONE = 0, SEL_AT_QUEUE, SEL_AT_DONE };

/* Which batch an entry is on (sel_fd.in_batch): none, the one the leader is
 * claiming (px_sel.batch), or one a thread took away to run (sel_tls_run, or
 * px_sel.shared until a thread takes it from there): an entry on such a
 * batch is not claimed again until the thread that runs it lets it go
 * (which puts it on the retry list if a report came meanwhile). */
enum { SEL_BATCH_NONE = 0, SEL_BATCH_CLAIMING, SEL_BATCH_RUNNING };

#define SEL_UNTRIED 0     /* px_sel_priv.res before the batch tried it */

/* One descriptor: the shared queues, then what this provider keeps. */
typedef struct sel_fd {
	px_fdq_entry fq;   /* queues (through plink) and the number */
	px_poll_reg reg;   /* the poller's registration */
	uint8_t kind;      /* PX_NBIO_KIND_*, known while queued (forgotten when
	                      idle: the number may be closed and reused) */
	uint8_t flags;     /* PX_NBIO_LISTENER_NB */
	uint8_t rd_miss;   /* recent reads tried at start that found nothing;
	                      a hint only, kept while idle */
	uint8_t rd_skip;   /* starts since the last such try */
	uint8_t busy;      /* PX_POLL_IN / _OUT whose queue head is claimed by
	                      a thread working without the mutex */
	/* The batch's (used while the mutex is released, so nobody else may
	 * touch these while in_batch is set): */
	uint8_t in_batch;  /* SEL_BATCH_*: on a batch list, and which */
	struct sel_fd *bnext;
	px_result *chain[2]; /* claimed results per direction */
	px_nbio bio;       /* the leader's private copy for its I/O */
	uint32_t bgen[2];  /* gen[] when the leader claimed the direction */
	/* Edge poller only (see "Edge-triggered watching" below): */
	uint8_t nready;    /* PX_POLL_IN / _OUT known not ready: EAGAIN seen
	                      and no report since */
	uint8_t verified;  /* registration made or checked since the entry
	                      was last idle */
	uint8_t recheck;   /* a hint that the number may name another file
	                      soon: check the registration before waiting */
	uint32_t gen[2];   /* reports seen per direction (RD, WR) */
	unsigned stamp;    /* px_sel.tick when it joined px_sel.suspect */
	px_link rlink;     /* on px_sel.retry */
	px_link slink;     /* on px_sel.suspect */
	/* A datagram write to a full receiver (see "Futile writes"): */
	uint8_t futile;    /* write-queue heads' EAGAINs after a report, in a
	                      row (datagram writes only) */
	uint8_t held;      /* PX_POLL_OUT: the write queue is neither watched
	                      nor tried until held_until; PX_POLL_IN |
	                      PX_POLL_OUT: neither queue (an error alone: sel_run) */
	/* An error with nothing to take (see "Futile error reports"),
	 * level-triggered pollers only: */
	uint8_t rerr;      /* batch: PX_POLL_IN / _OUT whose call said EAGAIN
	                      while the descriptor polled an error alone;
	                      SEL_RERR_MOVED: a write-all moved bytes first */
	uint8_t efutile;   /* batches in a row that moved nothing on it and
	                      had such a direction */
	uint64_t held_until;
	px_link hlink;     /* on px_sel.held while held */
	/* Writes waiting for room (see "Writers retried"): */
	px_link wlink;     /* on px_sel.writers while writes are queued */
	unsigned wstamp;   /* px_sel.wtick when it joined, or last wrote */
} sel_fd;

typedef struct px_sel {
	px_provider base;
	px_wait wait;         /* what the processor sees: see the end */
	px_wait_ops wait_ops; /* sel_wait_ops, without watch unless pl can */
	px_poller *pl;
	px_fdq fdq;           /* sel_fd entries */
	px_list done;         /* finished, for next_completed (plink) */
	sel_fd *batch;        /* leader: entries claimed from one wait (bnext),
	                         until the edge poller's claim takes them */
	sel_fd *shared;       /* edge: claimed entries put up for any thread
	                         (bnext, SEL_BATCH_RUNNING): sel_wait_share */
	bool no_block;        /* leader: results are waiting, do not block */
	bool edge;            /* the poller is PX_POLLER_EDGE */
	bool in_wait;         /* leader between prepare and next_completed */
	bool kicked;          /* interrupted since that prepare */
	bool retry_due;       /* leader: retry list not yet taken since then */
	int wait_cap_ms;      /* leader: longest wait (-1: none), set in prepare */
	px_list retry;        /* edge: entries with a head to try (rlink) */
	px_list suspect;      /* edge: entries waiting on an unchecked
	                         registration (slink), oldest first */
	px_list held;         /* entries whose writes back off (hlink) */
	px_list writers;      /* entries with writes queued (wlink) */
	unsigned wtick;       /* SEL_CHECK_MS periods counted for them */
	uint64_t next_wtick;  /* when wtick next advances (ns), 0: unset */
	unsigned tick;        /* edge: SEL_CHECK_MS periods counted */
	uint64_t next_tick;   /* edge: when tick next advances (ns) */
	px_poll_event ev[SEL_EVENTS]; /* leader: events being claimed */
} px_sel;

static px_sel *sel_of(px_provider *p)
{
	return px_container_of(p, px_sel, base);
}

static px_sel *sel_of_wait(px_wait *w)
{
	return px_container_of(w, px_sel, wait);
}

static sel_fd *sel_fd_of(px_fdq_entry *fq)
{
	return px_container_of(fq, sel_fd, fq);
}

static struct px_sel_priv *sel_priv(px_result *r)
{
	return px_sel_priv(r);
}

/* The readiness bit of a queue direction. */
static unsigned sel_bit(int dir)
{
	return dir == PX_FDQ_RD ? PX_POLL_IN : PX_POLL_OUT;
}

/* The directions with something queued (claimed or not), as PX_POLL_*. */
static unsigned sel_queued(const sel_fd *e)
{
	return (px_list_empty(&e->fq.q[PX_FDQ_RD]) ? 0 : PX_POLL_IN) |
	       (px_list_empty(&e->fq.q[PX_FDQ_WR]) ? 0 : PX_POLL_OUT);
}

static bool sel_live(const px_sel *sel)
{
	return (sel->pl->flags & PX_POLLER_LIVE) != 0;
}

static bool sel_fd_closed(int fd)
{
	return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

static void sel_io_load(px_nbio *io, const sel_fd *e)
{
	io->fd = e->fq.fd;
	io->kind = e->kind;
	io->flags = e->flags;
	io->reported = 0;
}

/* Mutex held.  The entry is not idle (a claimed result is queued), so
 * nothing was forgotten meanwhile; later kinds only refine earlier ones. */
static void sel_io_store(sel_fd *e, const px_nbio *io)
{
	if (io->kind > e->kind)
		e->kind = io->kind;
	e->flags |= io->flags;
}

/* What the provider asks of the shared calls (nbio.h): no length limit of
 * its own, and an O_NONBLOCK stream whose kernel refuses RWF_NOWAIT is
 * read and written without a poll(0) first. */
static const px_nbio_rules sel_nbio_rules = {
	.max_len = SIZE_MAX,
	.trust_nonblock = true,
};

/* One attempt at r, a queue head (claimed, or under the mutex), on io's
 * descriptor: PX_NBIO_*. */
static inline int sel_try(px_nbio *io, px_result *r)
{
	return px__nbio_try(&sel_nbio_rules, io, &sel_priv(r)->conn, r);
}

/* ------------------------------------------------------------------ */
/* Queues and watching                                                  */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Edge-triggered watching (PX_POLLER_EDGE)                             */
/* ------------------------------------------------------------------ */

/*
 * With an edge poller a descriptor is registered once, the first time one
 * of its operations has to wait, and stays registered: no system call per
 * operation.  The entry keeps what a hand-written edge-triggered server
 * keeps: per direction, whether it may be ready (nready clear: a report
 * came, or nothing was learnt yet) or is known not to be (nready set: a
 * call said EAGAIN and no report came since).  A queue head that nobody
 * works on is then in one of two states, and every change of the entry
 * under the mutex restores this (sel_edge_update):
 *   - its direction may be ready: the entry is on the retry list, which
 *     the leader takes after every wait (a start from another thread
 *     interrupts the leader's wait for it: sel_kick);
 *   - its direction is not ready: the descriptor is registered, so the
 *     next change of state is reported.
 * A head claimed by a thread (busy) is that thread's business until it
 * lets go.  Reports count per direction (gen); a thread that claimed a
 * head notes gen first, and when its call says EAGAIN marks the direction
 * not ready only if no report came meanwhile.  A report that came while the
 * call ran (the leader found the head busy and left it) therefore leaves
 * the direction ready and the head is tried again: the edge is not lost.
 *
 * The kernel drops a registration when the file is closed, so a number
 * closed and reused for another file is silently not watched.  What
 * reveals that costs a system call (refresh: EPOLL_CTL_MOD, or ADD for a
 * number never registered, the other one on ENOENT / EEXIST; both report
 * the file's readiness again), so it is paid only where a reuse is
 * plausible.  The application can close a number only while
 * its entry is idle (else its operations would be lost with it), so a
 * registration counts as unverified from then on, and the first wait after
 * that is checked at once (recheck) when:
 *   - the operation was started from anywhere but the callback of an
 *     operation on the same descriptor (from another thread, or a callback
 *     about another descriptor): the number may have changed hands since;
 *   - or a hint says so: accept returned the number (a new file: it is
 *     registered again, no check needed), a connect starts on it, or an
 *     operation on it ended with an error, end of stream or a cancel (the
 *     application often closes it next).
 * A start from the callback of the number's own operation (the common
 * case: read, answer, read again) is trusted; its wait goes on the suspect
 * list, and the leader checks those that have waited unverified while
 * its tick advanced twice (sel_edge_check_suspects: the tick moves at a
 * check that finds its SEL_CHECK_MS period over, and checks follow waits
 * capped at SEL_CHECK_MS, so one to about three periods).  So a callback
 * that closes its own descriptor with close(2), opens another file that
 * gets the same number (not through px_accept), and starts an operation
 * there that must wait, waits that long for data that was already there,
 * once.  px_close tells the provider (sel_closed), which forgets the
 * registration, so its callback's starts on the number are not caught.
 */
#define SEL_CHECK_MS 1000
#define SEL_CHECK_NS ((uint64_t)SEL_CHECK_MS * 1000000u)

/* Interrupt the leader's wait, once per wait: something for it to do
 * came from another thread. */
static void sel_kick(px_sel *sel)
{
	if (sel->in_wait && !sel->kicked) {
		sel->kicked = true;
		sel->wait.intr->ops->interrupt(sel->wait.intr);
	}
}

static void sel_edge_unsuspect(px_sel *sel, sel_fd *e)
{
	if (px_link_linked(&e->slink))
		px_list_remove(&sel->suspect, &e->slink);
}

/* e is idle: forget what was learnt (the number may be closed and reused
 * before its next use).  The registration stays; it is checked when an
 * operation next waits on it for long (or at once on a hint). */
static void sel_edge_idle(px_sel *sel, sel_fd *e)
{
	e->nready = 0;
	e->verified = 0;
	sel_edge_unsuspect(sel, e);
	if (px_link_linked(&e->rlink))
		px_list_remove(&sel->retry, &e->rlink);
}

/* Make sure the queue heads of e nobody works on will be tried: on the
 * retry list if their direction may be ready, else registered.  Returns 0
 * or -errno from registering. */
static int sel_edge_update(px_sel *sel, sel_fd *e)
{
	unsigned queued = sel_queued(e) & ~(unsigned)e->busy & ~(unsigned)e->held;
	px_poller *pl = sel->pl;
	int rc;

	if (queued & ~(unsigned)e->nready) {
		if (!px_link_linked(&e->rlink)) {
			px_list_push_back(&sel->retry, &e->rlink);
			sel_kick(sel);
		}
	}
	if (!(queued & e->nready))
		return 0;
	if (e->recheck || !e->reg.armed) {
		rc = e->recheck ? pl->ops->refresh(pl, &e->reg)
				: pl->ops->set(pl, &e->reg, PX_POLL_IN | PX_POLL_OUT);
		if (rc < 0)
			return rc;
		e->recheck = 0;
		e->verified = 1;
		sel_edge_unsuspect(sel, e);
	} else if (!e->verified && !px_link_linked(&e->slink)) {
		e->stamp = sel->tick;
		px_list_push_back(&sel->suspect, &e->slink);
	}
	return 0;
}

/* A report (PX_POLL_*) for e: its directions may be ready. */
static void sel_edge_report(sel_fd *e, unsigned ev)
{
	if (ev & (PX_POLL_IN | PX_POLL_ERR | PX_POLL_NVAL)) {
		e->gen[PX_FDQ_RD]++;
		e->nready &= (uint8_t)~PX_POLL_IN;
	}
	if (ev & (PX_POLL_OUT | PX_POLL_ERR | PX_POLL_NVAL)) {
		e->gen[PX_FDQ_WR]++;
		e->nready &= (uint8_t)~PX_POLL_OUT;
	}
}

/*
 * Futile writes.  A datagram socket not connected to its AF_UNIX receiver
 * polls writable while its own buffer has room, however full the
 * receiver's queue: every report is followed by a send that says EAGAIN,
 * and each failed send (freeing its buffer) makes a new edge for epoll.
 * That was a whole CPU for as long as the receiver did not read.  So the
 * leader's batch counts the EAGAINs of datagram writes after a report
 * (e->futile), and from PX_FUTILE_MIN in a row on, the write queue is
 * held: not watched and not tried for px__futile_wait_ms (1 to 64 ms).
 * The leader's wait ends in time for the earliest such entry (prepare),
 * and the queue is tried again then.  Any write that finishes, and an
 * empty write queue, reset the count.  A start's own try does not count:
 * it was not told the socket had room.
 */
/*
 * Writers retried.  An AF_UNIX stream socket whose peer called
 * shutdown(SHUT_RD) refuses every send with EPIPE (a blocking send and
 * io_uring's fail so), but its poll never changes: no room comes, and no
 * bit tells the shutdown.  A write-all waiting for room there waited for
 * good on every poller.  So the write queue heads that have waited for
 * room over a whole SEL_CHECK_MS period are tried again, as if reported
 * (one send each per period; the leader's wait is capped for it while
 * any waits).
 */
static void sel_writers_join(px_sel *sel, sel_fd *e)
{
	if (!px_link_linked(&e->wlink)) {
		e->wstamp = sel->wtick;
		px_list_push_back(&sel->writers, &e->wlink);
	}
}

static void sel_writers_leave(px_sel *sel, sel_fd *e)
{
	if (px_link_linked(&e->wlink))
		px_list_remove(&sel->writers, &e->wlink);
}

static void sel_unhold(px_sel *sel, sel_fd *e)
{
	if (e->held) {
		e->held = 0;
		px_list_remove(&sel->held, &e->hlink);
	}
}

/* One more futile attempt on e in a row (*count, mutex held): from the
 * threshold on, hold the directions dirs of e (see sel_run's two callers
 * below).  A leader blocked meanwhile (the caller ran a batch after giving
 * up the lead) must shorten its wait: interrupted. */
static void sel_hold(px_sel *sel, sel_fd *e, uint8_t *count, unsigned dirs)
{
	unsigned ms;

	if (*count < UINT8_MAX)
		(*count)++;
	ms = px__futile_wait_ms(*count);
	if (!ms)
		return;
	e->held_until = px__now_ns() + (uint64_t)ms * 1000000u;
	if (!e->held)
		px_list_push_back(&sel->held, &e->hlink);
	e->held |= (uint8_t)dirs;
	sel_kick(sel);
}

/* A connect to an AF_UNIX listener whose backlog is full, on a blocking
 * socket (px__nbio_connect_later): connect(2) would wait for room, and
 * nothing reports it (the socket polls writable all along, and edge
 * pollers get no new edge from the refusal).  Its write queue is held at
 * once, 1 ms and doubling up to PX_FUTILE_MAX_MS while the backlog stays
 * full, and the connect is made again when the hold ends. */
static void sel_hold_connect(px_sel *sel, sel_fd *e)
{
	if (e->futile < PX_FUTILE_MIN - 1)
		e->futile = PX_FUTILE_MIN - 1;
	sel_hold(sel, e, &e->futile, PX_POLL_OUT);
}

/*
 * Futile error reports.  poll and select report POLLERR whether asked or
 * not, and a socket's error queue (IP_RECVERR's ICMP reports, transmit
 * timestamps, MSG_ZEROCOPY notices) keeps it set until the application
 * reads the queue with MSG_ERRQUEUE, while recv and send say EAGAIN: with
 * a read or a write waiting there, every wait returned at once, a whole
 * CPU for as long as the entry stayed (select shows the error as
 * readable).  epoll's edge poller and io_uring are told once.  So after a
 * claimed head says EAGAIN, the batch asks poll(2) whether the descriptor
 * shows an error without that direction (sel_error_alone), counts the
 * batches in a row that moved nothing on it and met that (e->efutile),
 * and from PX_FUTILE_MIN on holds the descriptor as a futile write is,
 * both queues: not watched and not tried for px__futile_wait_ms.
 * Anything on it that finishes or moves bytes, and empty queues, reset
 * the count.
 *
 * sel_error_alone: after an EAGAIN (batch, unlocked), does fd poll an
 * error and not the direction dir?  One poll(2), on this path only.
 */
#define SEL_RERR_MOVED 0x80u

static bool sel_error_alone(int fd, int dir)
{
	struct pollfd p = { .fd = fd,
			    .events = dir == PX_FDQ_RD ? POLLIN : POLLOUT };

	return poll(&p, 1, 0) > 0 && px__nbio_error_alone(p.revents, dir);
}

/* Bring the poller's watch of e in line with e's queues: nothing when
 * idle, else the queued directions (with a LIVE poller, only those whose
 * head nobody is working on: the thread holding a claim calls this again
 * when it lets go).  Returns 0 or -errno (only when the watched set
 * grew).  With an edge poller: sel_edge_update. */
static int sel_update(px_sel *sel, sel_fd *e)
{
	unsigned queued = sel_queued(e);

	if (!(queued & e->held))
		sel_unhold(sel, e);
	if (!queued)
		e->efutile = 0;
	if (!(queued & PX_POLL_OUT)) {
		e->futile = 0;
		sel_writers_leave(sel, e);
	} else {
		sel_writers_join(sel, e);
	}
	if (!queued && sel->edge) {
		sel_edge_idle(sel, e);
		e->kind = PX_NBIO_KIND_UNKNOWN;
		e->flags = 0;
		return 0;
	}
	if (sel->edge)
		return sel_edge_update(sel, e);
	if (!queued) {
		sel->pl->ops->remove(sel->pl, &e->reg);
		/* Idle: the number may be closed and reused before its next
		 * use, so forget all we learnt about it. */
		e->kind = PX_NBIO_KIND_UNKNOWN;
		e->flags = 0;
		return 0;
	}
	if (sel_live(sel))
		queued &= ~(unsigned)e->busy;
	return sel->pl->ops->set(sel->pl, &e->reg, queued & ~(unsigned)e->held);
}

static void sel_to_done(px_sel *sel, px_result *r)
{
	sel_priv(r)->at = SEL_AT_DONE;
	px_list_push_back(&sel->done, &r->plink);
}

/* r, an operation on e, has finished (mutex held).  Take the hints that
 * a number names another file, or soon may: an error, a cancel or the
 * end of a stream (the application often closes the number next).  The
 * edge poller checks its registration (see "Edge-triggered watching");
 * the next read tries its call at the start again (sel_skip_try). */
static void sel_note_done(px_sel *sel, sel_fd *e, px_result *r)
{
	px_fdq_entry *fq;
	bool ended;

	/* First of all, before the new file is noted under its number. */
	px__accept_keep_off(sel->base.px, r);
	ended = px_result_may_close_next(r);

	if (ended)
		e->rd_miss = 0;
	if (!sel->edge)
		return;
	if (ended)
		e->recheck = 1;
	if (r->c.op != PX_OP_ACCEPT || r->c.error || r->c.new_fd < 0)
		return;
	fq = px_fdq_lookup(&sel->fdq, r->c.new_fd);
	if (fq) {
		/* A new file: whatever was registered under its number is
		 * not it. */
		sel_fd *n = sel_fd_of(fq);

		sel->pl->ops->forget(sel->pl, &n->reg);
		n->recheck = 0;
		n->nready = 0;
		sel_edge_update(sel, n);   /* cannot fail: nothing waits */
	}
}

/* Complete everything queued on e with err, except the claimed results:
 * the threads working on them finish them. */
static void sel_fail_all(px_sel *sel, sel_fd *e, int err)
{
	for (int dir = 0; dir < 2; dir++) {
		px_list *q = &e->fq.q[dir];
		px_link *l = px_list_first(q);

		while (l) {
			px_link *next = px_list_next(q, l);
			px_result *r = px_result_of_plink(l);

			if (!sel_priv(r)->busy) {
				px_list_remove(q, l);
				px_result_finish(r, r->done, err);
				sel_to_done(sel, r);
			}
			l = next;
		}
	}
}

/* Mutex held: the heads of one queue, tried under the mutex until one is
 * not ready (only where nobody else can be waiting for them; see
 * sel_start_followers). */
static void sel_run_queue_locked(px_sel *sel, sel_fd *e, int dir)
{
	px_result *r;

	while ((r = px_fdq_head(&e->fq, dir))) {
		px_nbio io;
		int rc;

		if (sel_priv(r)->busy)
			break;
		sel_io_load(&io, e);
		rc = sel_try(&io, r);
		sel_io_store(e, &io);
		if (rc == PX_NBIO_AGAIN)
			break;
		px__accept_keep_off(sel->base.px, r);
		px_fdq_remove(&e->fq, dir, r);
		sel_to_done(sel, r);
		if (rc == PX_NBIO_DONE_STOP)
			break;
	}
}

/* Let go of a claimed result (mutex held) after its attempt gave rc (not
 * tried: tried false).  It leaves the queue if it finished, or if it did
 * not and a cancel came meanwhile; then true. */
static bool sel_unclaim(sel_fd *e, px_result *r, int rc, bool tried)
{
	struct px_sel_priv *pv = sel_priv(r);

	pv->busy = 0;
	px_call_end(r);
	if (tried && rc != PX_NBIO_AGAIN) {
		px_fdq_remove(&e->fq, pv->dir, r);
		pv->at = SEL_AT_NONE;
		return true;
	}
	if (pv->cancel) {
		px_fdq_remove(&e->fq, pv->dir, r);
		pv->at = SEL_AT_NONE;
		px_result_finish(r, r->done, ECANCELED);
		return true;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* The leader's batch                                                   */
/* ------------------------------------------------------------------ */

/* Mark up to SEL_CLAIM_MAX results of e's queue dir, from the head, busy
 * and chain them.  Nothing when the head is already claimed by a start. */
static void sel_claim_queue(sel_fd *e, int dir)
{
	px_list *q = &e->fq.q[dir];
	px_result **tail = &e->chain[dir];
	px_link *l = px_list_first(q);
	int n = 0;

	if (e->busy & sel_bit(dir))
		return;         /* claimed already (its chain is not ours) */
	*tail = NULL;
	if (!l)
		return;
	e->busy |= sel_bit(dir);
	e->bgen[dir] = e->gen[dir];
	for (; l && n < SEL_CLAIM_MAX; l = px_list_next(q, l), n++) {
		px_result *r = px_result_of_plink(l);
		struct px_sel_priv *pv = sel_priv(r);

		pv->busy = 1;
		px_call_begin(r);
		pv->res = SEL_UNTRIED;
		pv->cnext = NULL;
		*tail = r;
		tail = &pv->cnext;
	}
}

/* The poller reported ev (PX_POLL_*) for e: claim its ready queue heads
 * (at most once per wait) for the next sel_run.  Leader only. */
static void sel_claim(px_sel *sel, sel_fd *e, unsigned ev)
{
	if (e->in_batch)
		return;         /* one event per descriptor and wait */
	if (ev & PX_POLL_NVAL) {
		if (sel_fd_closed(e->fq.fd)) {
			sel_fail_all(sel, e, EBADF);
			sel_update(sel, e);
			return;
		}
		ev |= PX_POLL_ERR;  /* stale: it was reopened since */
	}
	e->chain[PX_FDQ_RD] = e->chain[PX_FDQ_WR] = NULL;  /* not in a batch */
	if ((ev & (PX_POLL_IN | PX_POLL_ERR)) && !(e->held & PX_POLL_IN))
		sel_claim_queue(e, PX_FDQ_RD);
	if ((ev & (PX_POLL_OUT | PX_POLL_ERR)) && !(e->held & PX_POLL_OUT))
		sel_claim_queue(e, PX_FDQ_WR);
	if (!e->chain[PX_FDQ_RD] && !e->chain[PX_FDQ_WR]) {
		/* Nothing to do now; the report disarmed it, so watch it
		 * again for what is still queued. */
		int rc = sel_update(sel, e);

		if (rc < 0) {
			sel_fail_all(sel, e, -rc);
			sel_update(sel, e);
		}
		return;
	}
	sel_io_load(&e->bio, e);
	e->bio.reported = 1;
	e->in_batch = SEL_BATCH_CLAIMING;
	e->bnext = sel->batch;
	sel->batch = e;
}

/* Edge poller: claim e's queue heads whose direction may be ready and that
 * nobody works on, for the next sel_run (joining the batch if e is not in
 * it yet).  Leader only. */
static void sel_edge_claim(px_sel *sel, sel_fd *e)
{
	unsigned can = sel_queued(e) & ~(unsigned)e->busy &
		       ~(unsigned)e->nready & ~(unsigned)e->held;

	if (px_link_linked(&e->rlink))
		px_list_remove(&sel->retry, &e->rlink);
	/* On another thread's batch, running: that thread puts e back on the
	 * retry list when it lets go, if this report left work to try. */
	if (!can || e->in_batch == SEL_BATCH_RUNNING)
		return;
	if (!e->in_batch) {
		e->chain[PX_FDQ_RD] = e->chain[PX_FDQ_WR] = NULL;
		sel_io_load(&e->bio, e);
		e->bio.reported = 1;
		e->in_batch = SEL_BATCH_CLAIMING;
		e->bnext = sel->batch;
		sel->batch = e;
	}
	if (can & PX_POLL_IN)
		sel_claim_queue(e, PX_FDQ_RD);
	if (can & PX_POLL_OUT)
		sel_claim_queue(e, PX_FDQ_WR);
}

/* Perform the I/O of the batch that starts at *batch, with the mutex
 * released around the system calls (re-taken before returning), then move
 * what finished to the done list and watch again what still waits.  Only
 * the thread that holds the batch: the leader that claimed it, or the
 * thread that took it away to run (sel_tls_run). */
static void sel_run(px_sel *sel, sel_fd **batch)
{
	sel_fd *e;

	if (!*batch)
		return;
	if (sel->base.lock)
		pthread_mutex_unlock(sel->base.lock);
	/* Unlocked: only the claimed results and e's batch fields are ours. */
	for (e = *batch; e; e = e->bnext) {
		for (int dir = 0; dir < 2; dir++) {
			for (px_result *r = e->chain[dir]; r;
			     r = sel_priv(r)->cnext) {
				size_t before = r->done;
				int rc = sel_try(&e->bio, r);

				sel_priv(r)->res = (uint8_t)(rc + 1);
				if (rc == PX_NBIO_AGAIN && !sel->edge) {
					if (r->done != before)
						e->rerr |= SEL_RERR_MOVED;
					else if (sel_error_alone(e->bio.fd, dir))
						e->rerr |= (uint8_t)sel_bit(dir);
				}
				if (rc != PX_NBIO_DONE)
					break;
			}
		}
	}
	if (sel->base.lock)
		pthread_mutex_lock(sel->base.lock);
	while ((e = *batch)) {
		bool futile_err = false, moved = false;
		int rc;

		*batch = e->bnext;
		e->in_batch = SEL_BATCH_NONE;
		sel_io_store(e, &e->bio);
		for (int dir = 0; dir < 2; dir++) {
			px_result *r = e->chain[dir], *next;
			bool again = false, dgram = false, later = false;

			if (!r)
				continue;
			for (; r; r = next) {
				struct px_sel_priv *pv = sel_priv(r);
				bool tried = pv->res != SEL_UNTRIED;

				next = pv->cnext;
				pv->cnext = NULL;
				if (tried && pv->res - 1 == PX_NBIO_AGAIN) {
					again = true;
					dgram = r->c.op == PX_OP_WRITE_DGRAM;
					later = px__nbio_connect_later(
						r, pv->conn);
				} else if (tried) {
					moved = true;
					if (dir == PX_FDQ_WR) {
						e->futile = 0;  /* one went out */
						e->wstamp = sel->wtick;
					}
				}
				if (sel_unclaim(e, r, tried ? pv->res - 1 : 0, tried)) {
					sel_note_done(sel, e, r);
					sel_to_done(sel, r);
				}
			}
			if (again && later && px_fdq_head(&e->fq, dir))
				sel_hold_connect(sel, e);
			else if (again && dgram && px_fdq_head(&e->fq, dir))
				sel_hold(sel, e, &e->futile, PX_POLL_OUT);
			if (again && (e->rerr & sel_bit(dir)))
				futile_err = true;
			/* Not ready, unless a report came while we tried. */
			if (again && e->gen[dir] == e->bgen[dir])
				e->nready |= (uint8_t)sel_bit(dir);
			e->busy &= ~sel_bit(dir);
			e->chain[dir] = NULL;
		}
		if (moved || (e->rerr & SEL_RERR_MOVED))
			e->efutile = 0;
		else if (futile_err)
			sel_hold(sel, e, &e->efutile,
				 PX_POLL_IN | PX_POLL_OUT);
		e->rerr = 0;
		rc = sel_update(sel, e);
		if (rc < 0) {
			/* Cannot watch it any more (closed: EBADF); nothing
			 * else would ever complete these. */
			sel_fail_all(sel, e, -rc);
			sel_update(sel, e);
		}
	}
}

/* The oldest finished result, forgotten by the provider; or NULL. */
static px_result *sel_pop_done(px_sel *sel)
{
	px_link *l = px_list_pop_front(&sel->done);
	px_result *r;

	if (!l)
		return NULL;
	r = px_result_of_plink(l);
	sel_priv(r)->at = SEL_AT_NONE;
	return r;
}

/* ------------------------------------------------------------------ */
/* Provider slots                                                       */
/* ------------------------------------------------------------------ */

/*
 * Reading at start pays when data is often there already (streaming,
 * pipelined requests); in a request/response exchange the read is usually
 * started before the peer answers, and the try is a wasted EAGAIN.  After
 * SEL_SPEC_MISSES such misses in a row, reads on that descriptor go
 * straight to the wait, except one start in SEL_SPEC_PROBE that still
 * tries (and re-enables trying when it finds data).  Writes are always
 * tried.  Only with a LIVE poller (epoll): there watching costs a syscall
 * either way; with poll and select a skipped try would cost an interrupt
 * of the leader instead.
 */
#define SEL_SPEC_MISSES 2
#define SEL_SPEC_PROBE 8

/* rd_miss is kept while the descriptor is idle, so that a request/
 * response exchange keeps skipping; it is forgotten on the hints that the
 * number may soon name another file (sel_note_done, a cancel, px_close:
 * sel_closed).  Kept for another file, it made a read of a listener that
 * took the number skip its call, which fails at once (ENOTCONN, EINVAL),
 * and wait for a connection instead (a listener polls readable only
 * then).  A number closed with close(2) without such a hint keeps it. */
static bool sel_skip_try(const px_sel *sel, sel_fd *e, int dir)
{
	/* Only where watching is a syscall anyway (epoll_ctl), which then
	 * also catches a closed descriptor at start. */
	if (dir != PX_FDQ_RD || e->rd_miss < SEL_SPEC_MISSES || !sel_live(sel) ||
	    sel->edge)
		return false;     /* an edge poller knows better: nready */
	if (++e->rd_skip < SEL_SPEC_PROBE)
		return true;
	e->rd_skip = 0;
	return false;
}

static void sel_learn_try(sel_fd *e, int rc)
{
	if (rc != PX_NBIO_AGAIN)
		e->rd_miss = 0;
	else if (e->rd_miss < SEL_SPEC_MISSES)
		e->rd_miss++;
}

/* The start's own try of r, the only result in queue dir: claim r at the
 * head so that later starts in that direction queue behind it, do the
 * call unlocked, and let go.  Returns the attempt's PX_NBIO_*; r has left
 * the queue unless PX_NBIO_AGAIN (a cancel meanwhile counts as finished). */
static int sel_try_at_start(px_sel *sel, sel_fd *e, int dir, px_result *r)
{
	struct px_sel_priv *pv = sel_priv(r);
	px_nbio io;
	int rc, tries = 0;

	px_fdq_push(&e->fq, dir, r);
	pv->at = SEL_AT_QUEUE;
	pv->dir = (uint8_t)dir;
	pv->busy = 1;
	px_call_begin(r);
	e->busy |= sel_bit(dir);
	sel_io_load(&io, e);
	for (;;) {
		uint32_t gen = e->gen[dir];

		if (sel->base.lock)
			pthread_mutex_unlock(sel->base.lock);
		rc = sel_try(&io, r);
		if (sel->base.lock)
			pthread_mutex_lock(sel->base.lock);
		if (rc != PX_NBIO_AGAIN || !sel->edge)
			break;
		if (e->gen[dir] == gen) {
			/* No report since before the call: not ready. */
			e->nready |= (uint8_t)sel_bit(dir);
			break;
		}
		/* The leader saw a report while the call ran and left the
		 * head to us: try again (a few times; then the retry list). */
		if (pv->cancel || ++tries >= 3)
			break;
	}
	e->busy &= ~sel_bit(dir);
	sel_io_store(e, &io);
	if (dir == PX_FDQ_RD)
		sel_learn_try(e, rc);
	if (sel_unclaim(e, r, rc, true)) {
		sel_note_done(sel, e, r);
		if (rc == PX_NBIO_AGAIN)
			rc = PX_NBIO_DONE;       /* cancelled meanwhile */
	}
	return rc;
}

/* Starts that came while r was claimed queued behind it (a LIVE poller
 * was not asked to watch for them).  Now that r is out of the way, watch
 * for them; if the descriptor cannot be watched (a regular file: EPERM;
 * or closed), do them here under the mutex, fail what remains, and wake
 * the leader to hand them out. */
static void sel_start_followers(px_sel *sel, sel_fd *e)
{
	int rc = sel_update(sel, e);

	if (rc < 0) {
		sel_run_queue_locked(sel, e, PX_FDQ_RD);
		sel_run_queue_locked(sel, e, PX_FDQ_WR);
		sel_fail_all(sel, e, -rc);
		sel_update(sel, e);
		if (!px_list_empty(&sel->done)) {
			if (sel->edge)
				sel_kick(sel);
			else
				sel->wait.intr->ops->interrupt(sel->wait.intr);
		}
	}
}

/* r finished within start. */
static int sel_done_at_start(px_sel *sel, sel_fd *e, px_result *r)
{
	sel_start_followers(sel, e);    /* or, if idle, forget what we learnt */
	if (r->c.error == EBADF && sel_fd_closed(r->c.fd))
		return -EBADF;
	return PX_START_DONE;
}

static int sel_start(px_provider *p, px_result *r)
{
	px_sel *sel = sel_of(p);
	struct px_sel_priv *pv = sel_priv(r);
	int fd = r->c.fd, dir, rc;
	bool tried = false;
	px_fdq_entry *fq;
	sel_fd *e;

	memset(pv, 0, sizeof(*pv));
	r->done = 0;
	if (fd < 0)
		return -EBADF;
	if (r->c.op == PX_OP_READ_FILE || r->c.op == PX_OP_WRITE_FILE) {
		/* r is on no queue of this provider, so no event reaches it:
		 * the disk wait needs no claim.  But px_cancel finds it on
		 * the processor's starting list, and must not return while
		 * the call is under way (the application may close fd then,
		 * and a number reused before a deferred start's pread(2)
		 * got there would be read or written in its place): it is a
		 * call as the socket ones are, which px_cancel waits for. */
		px_call_begin(r);
		if (sel->base.lock)
			pthread_mutex_unlock(sel->base.lock);
		px__nbio_file_io(r);
		if (sel->base.lock)
			pthread_mutex_lock(sel->base.lock);
		px_call_end(r);
		if (r->c.error == EBADF && sel_fd_closed(fd))
			return -EBADF;
		return PX_START_DONE;
	}
	dir = px__fdq_dir(r->c.op);
	if (dir < 0)
		return -EOPNOTSUPP;
	if (fd >= sel->pl->fd_limit)
		return sel_fd_closed(fd) ? -EBADF : -EMFILE;
	/* -EBADF at once for a number beyond the table that is not open. */
	rc = px__fdq_get(&sel->fdq, fd, &fq);
	if (rc < 0)
		return rc;
	e = sel_fd_of(fq);
	e->reg.fd = fd;           /* entries are created zeroed */
	if (r->c.op == PX_OP_ACCEPT)
		r->c.new_fd = -1;
	if (sel->edge && (r->c.op == PX_OP_CONNECT ||
			  (px_fdq_idle(fq) &&
			   px__dispatch_current_fd(r->c.proactor) != fd)))
		e->recheck = 1;   /* the number may name another file now */

	/* Nothing older in this direction: try it now (e stays valid across
	 * the unlock: entries are never freed or moved before destroy), unless
	 * an edge poller knows it is not ready. */
	if (px_list_empty(&fq->q[dir]) && !sel_skip_try(sel, e, dir) &&
	    !(sel->edge && (e->nready & sel_bit(dir)))) {
		tried = true;
		rc = sel_try_at_start(sel, e, dir, r);
		if (rc != PX_NBIO_AGAIN)
			return sel_done_at_start(sel, e, r);
		if (px__nbio_connect_later(r, pv->conn))
			sel_hold_connect(sel, e);
		/* Still at the head of its queue. */
	} else {
		px_fdq_push(fq, dir, r);
		pv->at = SEL_AT_QUEUE;
		pv->dir = (uint8_t)dir;
	}
	rc = sel_update(sel, e);
	if (rc < 0) {
		bool head = px_fdq_remove(fq, dir, r);

		pv->at = SEL_AT_NONE;
		/* Cannot be watched (epoll: EPERM for a regular file that took
		 * a socket's number): if it was not tried, and nothing older
		 * is queued or claimed, try it now. */
		if (!tried && head) {
			px_nbio io;

			e->rd_miss = 0;
			sel_io_load(&io, e);
			rc = sel_try(&io, r);
			sel_io_store(e, &io);
			if (rc != PX_NBIO_AGAIN) {
				px__accept_keep_off(sel->base.px, r);
				return sel_done_at_start(sel, e, r);
			}
		}
		sel_start_followers(sel, e);
		if (!r->done)
			return rc;
		/* Some bytes already went out: report them. */
		px_result_finish(r, r->done, -rc);
		return PX_START_DONE;
	}
	return PX_START_STARTED;
}

static int sel_cancel(px_provider *p, px_result *r)
{
	px_sel *sel = sel_of(p);
	struct px_sel_priv *pv = sel_priv(r);

	if (pv->at == SEL_AT_DONE)
		return PX_CANCEL_PENDING;   /* finished; next_completed has it */
	if (pv->busy) {
		/* A thread is in the middle of its call: it finishes it, with
		 * ECANCELED if the call found nothing. */
		pv->cancel = 1;
		return PX_CANCEL_PENDING;
	}
	if (pv->at == SEL_AT_QUEUE) {
		sel_fd *e = sel_fd_of(px_fdq_lookup(&sel->fdq, r->c.fd));

		px_fdq_remove(&e->fq, pv->dir, r);
		pv->at = SEL_AT_NONE;
		e->rd_miss = 0;           /* it may be closed next */
		if (sel->edge)
			e->recheck = 1;
		/* Only shrinks what e wants (the next head, with an edge
		 * poller, may go to the retry list); a wake-up still armed
		 * for it finds nothing to do.  But the edge poller checks its
		 * registration on the hint first, and when the number was
		 * closed and reused the check must register the new file:
		 * refused (ENOMEM, ENOSPC), nothing is registered for what
		 * still waits on e, which used to wait for good.  It fails
		 * with the error, as after a batch (sel_run), and the leader
		 * hands it out. */
		int rc = sel_update(sel, e);

		if (rc < 0) {
			sel_fail_all(sel, e, -rc);
			sel_update(sel, e);
			sel_kick(sel);
		}
	}
	px_result_finish(r, r->done, ECANCELED);
	return PX_CANCEL_DONE;
}

/* ------------------------------------------------------------------ */
/* The processor's wait: a poller plus the claims and the run           */
/* ------------------------------------------------------------------ */

/* Leader, prepare: the held write queues whose time has come are watched
 * (or, edge, retried) again; the wait ends in time for the others. */
static void sel_release_held(px_sel *sel)
{
	uint64_t now, first = UINT64_MAX;
	px_link *l, *next;

	if (px_list_empty(&sel->held))
		return;
	now = px__now_ns();
	for (l = px_list_first(&sel->held); l; l = next) {
		sel_fd *e = px_container_of(l, sel_fd, hlink);
		int rc;

		next = px_list_next(&sel->held, l);
		if (e->held_until > now) {
			if (e->held_until < first)
				first = e->held_until;
			continue;
		}
		sel_unhold(sel, e);
		e->nready &= (uint8_t)~PX_POLL_OUT;  /* edge: try, not wait */
		rc = sel_update(sel, e);
		if (rc < 0) {
			sel_fail_all(sel, e, -rc);
			sel_update(sel, e);
		}
	}
	if (first != UINT64_MAX) {
		uint64_t ms = (first - now + 999999u) / 1000000u;

		if (sel->wait_cap_ms < 0 || (uint64_t)sel->wait_cap_ms > ms)
			sel->wait_cap_ms = (int)ms;
	}
}

static int sel_wait_prepare(px_wait *w, px_list *started)
{
	px_sel *sel = sel_of_wait(w);

	(void)started;
	px_poller_drain(sel->pl);
	/* Suspects are checked after a wait: wake up in time for them. */
	sel->wait_cap_ms = px_list_empty(&sel->suspect) &&
			   px_list_empty(&sel->writers) ? -1 : SEL_CHECK_MS;
	sel_release_held(sel);
	sel->pl->ops->prepare(sel->pl);
	sel->no_block = !px_list_empty(&sel->done) ||
			!px_list_empty(&sel->retry);
	sel->in_wait = true;
	sel->kicked = false;
	sel->retry_due = true;
	return 0;
}

static int sel_wait_wait(px_wait *w, int timeout_ms)
{
	px_sel *sel = sel_of_wait(w);

	if (sel->no_block)
		timeout_ms = 0;
	else if (sel->wait_cap_ms >= 0)
		timeout_ms = px__cap_ms(timeout_ms, sel->wait_cap_ms);
	return sel->pl->ops->wait(sel->pl, timeout_ms);
}

/* Edge poller, leader: check the registrations of entries that have waited
 * on them unverified while the tick advanced twice (one to about three
 * SEL_CHECK_MS periods: see "Edge-triggered watching" above). */
static void sel_edge_check_suspects(px_sel *sel)
{
	uint64_t now;
	px_link *l;

	if (px_list_empty(&sel->suspect))
		return;
	now = px__now_ns();
	if (now >= sel->next_tick) {
		sel->tick++;
		sel->next_tick = now + SEL_CHECK_NS;
	}
	while ((l = px_list_first(&sel->suspect))) {
		sel_fd *e = px_container_of(l, sel_fd, slink);
		int rc;

		if (sel->tick - e->stamp < 2)
			break;          /* this one and the later ones: too young */
		px_list_remove(&sel->suspect, l);
		rc = sel->pl->ops->refresh(sel->pl, &e->reg);
		if (rc == 0) {
			e->verified = 1;
			continue;
		}
		/* Closed (EBADF) or unwatchable now: nothing would ever
		 * complete what waits there. */
		sel_fail_all(sel, e, -rc);
		sel_update(sel, e);
	}
}

/* Leader, after a wait: claim the write queue heads that have waited for
 * room over a whole period (see "Writers retried"). */
static void sel_writers_retry(px_sel *sel)
{
	uint64_t now;
	px_link *l, *next;

	if (px_list_empty(&sel->writers))
		return;
	now = px__now_ns();
	if (!sel->next_wtick)
		sel->next_wtick = now + SEL_CHECK_NS;
	if (now < sel->next_wtick)
		return;
	sel->wtick++;
	sel->next_wtick = now + SEL_CHECK_NS;
	for (l = px_list_first(&sel->writers); l; l = next) {
		sel_fd *e = px_container_of(l, sel_fd, wlink);

		next = px_list_next(&sel->writers, l);
		if (sel->wtick - e->wstamp < 2 || (e->busy & PX_POLL_OUT) ||
		    e->held || e->in_batch)
			continue;
		e->wstamp = sel->wtick;
		if (sel->edge) {
			e->nready &= (uint8_t)~PX_POLL_OUT;
			sel_edge_claim(sel, e);
		} else {
			sel_claim(sel, e, PX_POLL_OUT);
		}
	}
}

/* The batch an edge poller's claim took away from px_sel.batch, for the
 * calling thread to run in its next_completed calls, which may come after
 * it stopped leading while another thread leads and claims (so the batch
 * cannot stay in px_sel).  Set and used by one thread only. */
static __thread struct {
	px_sel *sel;
	sel_fd *batch;
} sel_tls_run;

/* The edge poller made a new epoll instance for one closed behind the
 * library's back, or whose number another instance took
 * (wait_strategies/epoll.c): nothing of before is registered there, and
 * reports may have been lost meanwhile.  So every entry forgets its
 * registration, and one with heads queued forgets what it knew of
 * readiness too: its heads go on the retry list, are tried by this
 * claim (the next one after sel_wait_check), and an EAGAIN registers the
 * descriptor with the new instance, which reports it at once if it
 * became ready in between.
 * (Before, such heads waited for good: TESTING.md, fixed problem 308.)
 * Leader, mutex held; rare, so a walk of the whole table. */
static void sel_rebuilt(px_sel *sel)
{
	px_poller *pl = sel->pl;

	for (size_t i = 0; i < sel->fdq.n; i++) {
		px_fdq_entry *fq = sel->fdq.tab[i];
		sel_fd *e;

		if (!fq)
			continue;
		e = sel_fd_of(fq);
		pl->ops->forget(pl, &e->reg);
		e->recheck = 0;
		if (!sel_queued(e))
			continue;
		e->nready = 0;
		e->verified = 0;
		sel_edge_unsuspect(sel, e);
		(void)sel_edge_update(sel, e);  /* no call: all may be ready */
	}
}

/* Claim every descriptor the last wait reported, for one unlock for all
 * of their calls.  With an edge poller (LIVE: what the calls leave to wait
 * for reaches a wait in progress at once), the batch becomes the calling
 * thread's, which need not lead to run it: returns how many descriptors
 * it holds (0 with the other pollers, whose batch stays the leader's). */
static size_t sel_wait_claim(px_wait *w)
{
	px_sel *sel = sel_of_wait(w);
	px_poller *pl = sel->pl;
	size_t n;

	px_poller_drain(pl);
	sel->in_wait = false;
	if (atomic_load_explicit(&pl->broken, memory_order_relaxed) &&
	    pl->ops->rebuild(pl) > 0)
		sel_rebuilt(sel);
	while ((n = pl->ops->collect(pl, sel->ev, SEL_EVENTS)) > 0) {
		for (size_t i = 0; i < n; i++) {
			px_fdq_entry *fq = px_fdq_lookup(&sel->fdq, sel->ev[i].fd);

			if (!fq)
				continue;
			/* An error to report ends a write's pause: its send
			 * takes the error (else poll would report it at
			 * every wait meanwhile). */
			if (sel->ev[i].events & (PX_POLL_ERR | PX_POLL_NVAL))
				sel_unhold(sel, sel_fd_of(fq));
			if (sel->edge) {
				sel_edge_report(sel_fd_of(fq), sel->ev[i].events);
				sel_edge_claim(sel, sel_fd_of(fq));
			} else {
				sel_claim(sel, sel_fd_of(fq), sel->ev[i].events);
			}
		}
	}
	sel_writers_retry(sel);
	if (sel->edge && sel->retry_due) {
		px_link *l;

		sel->retry_due = false;
		sel_edge_check_suspects(sel);
		/* What may be ready and waits to be tried: once per wait
		 * (what this run puts back waits for the next one). */
		while ((l = px_list_first(&sel->retry)))
			sel_edge_claim(sel, px_container_of(l, sel_fd, rlink));
	}
	if (!sel->edge || !sel->batch)
		return 0;
	n = 0;
	for (sel_fd *e = sel->batch; e; e = e->bnext, n++)
		e->in_batch = SEL_BATCH_RUNNING;
	sel_tls_run.sel = sel;
	sel_tls_run.batch = sel->batch;
	sel->batch = NULL;
	return n;
}

/* After claim: the finished operations, after running the caller's batch
 * when there is nothing else to hand out.  (No drain of the interrupt: the
 * caller may have stopped leading, and the poller's fired flag is then the
 * new leader's; the next prepare drains it.) */
static px_result *sel_wait_next_completed(px_wait *w)
{
	px_sel *sel = sel_of_wait(w);
	px_result *r;

	r = sel_pop_done(sel);
	if (r)
		return r;
	sel_run(sel, &sel->batch);
	if (sel_tls_run.sel == sel) {
		sel_tls_run.sel = NULL;
		sel_run(sel, &sel_tls_run.batch);
	}
	/* Shared calls nobody took yet: this thread makes them (the one that
	 * shared them always gets here, so they never stay behind). */
	if (sel->shared) {
		sel_fd *b = sel->shared;

		sel->shared = NULL;
		sel_run(sel, &b);
	}
	return sel_pop_done(sel);
}

/* Split the calling thread's claimed batch: the second half goes to
 * px_sel.shared, where the next thread to collect (a follower the
 * dispatcher wakes for it, or this thread when it is done with its own
 * half) runs it.  A thread-pool reactor does the same with its ready
 * handlers: whoever is free takes the next one, and the first thread out
 * of work leads.  With one thread leading and one making all the calls,
 * the leader mostly blocked in epoll_pwait for reports the other thread's
 * sends had not caused yet (docs/PERFORMANCE.md, "Sharing a wait's
 * calls"). */
static size_t sel_wait_share(px_wait *w)
{
	px_sel *sel = sel_of_wait(w);
	size_t total = 0, give;
	sel_fd **pp, **tail;

	if (sel_tls_run.sel != sel)
		return 0;
	for (sel_fd *e = sel_tls_run.batch; e; e = e->bnext)
		total++;
	give = total / 2;
	if (!give)
		return 0;
	pp = &sel_tls_run.batch;
	for (size_t i = 0; i < total - give; i++)
		pp = &(*pp)->bnext;
	for (tail = &sel->shared; *tail; tail = &(*tail)->bnext)
		;
	*tail = *pp;
	*pp = NULL;
	return give;
}

static bool sel_wait_has_shared(px_wait *w)
{
	return sel_of_wait(w)->shared != NULL;
}

static void sel_wait_destroy(px_wait *w)
{
	(void)w;                  /* the provider's destroy frees it all */
}

/* The processor's idle check (mutex held): an epoll instance of the
 * application's (or another proactor's) under our instance's number
 * reports nothing of ours, so the waits would never learn that ours is
 * gone (TESTING.md, fixed problem 309); the poller looks.  The check may
 * run in a thread that gave up the lead after its claim, while another
 * thread leads and sits in the wait, which uses the instance without the
 * mutex: then the poller is only marked broken, that wait ends by its
 * bound (our interrupt is not in the other instance), the next fails at
 * once, and the leader's claim makes the new instance.  With nobody in
 * the wait (in_wait clear) it is made here. */
static void sel_wait_check(px_wait *w)
{
	px_sel *sel = sel_of_wait(w);
	px_poller *pl = sel->pl;

	pl->ops->verify(pl);
	if (!sel->in_wait &&
	    atomic_load_explicit(&pl->broken, memory_order_relaxed) &&
	    pl->ops->rebuild(pl) > 0)
		sel_rebuilt(sel);
}

static int sel_wait_ready_fd(px_wait *w)
{
	px_poller *pl = sel_of_wait(w)->pl;

	return pl->ops->ready_fd ? pl->ops->ready_fd(pl) : -1;
}

/* Only where the poller can (epoll): the provider's copy of the table has
 * no watch otherwise (sel_create), so that the dispatcher never counts on
 * a watch that would not happen. */
static void sel_wait_watch(px_wait *w, int fd)
{
	px_poller *pl = sel_of_wait(w)->pl;

	pl->ops->watch(pl, fd);
}

static const px_wait_ops sel_wait_ops = {
	.name = "readiness",
	.destroy = sel_wait_destroy,
	.on_start = NULL,                  /* start watches for itself */
	.prepare = sel_wait_prepare,       /* the poller's interest set */
	.wait = sel_wait_wait,             /* the poller's wait, unlocked */
	.next_completed = sel_wait_next_completed, /* one unlock for all */
	.claim = sel_wait_claim,           /* what the wait reported */
	.share = sel_wait_share,           /* half of a claim, for a follower */
	.has_shared = sel_wait_has_shared,
	.ready_fd = sel_wait_ready_fd,     /* epoll: the epoll instance */
	.watch = sel_wait_watch,           /* epoll: one-shot in the set */
	.check = sel_wait_check,           /* epoll: is the instance ours? */
};

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

/* The pollers behind this provider's waits, by the wait names of its
 * class (providers/select_class.c). */
static const struct {
	const char *wait;
	int (*create)(px_intr *in, px_poller **out);
} sel_pollers[] = {
	{ "epoll", px__poller_epoll_edge_create },
	{ "poll", px__poller_poll_create },
	{ "select", px__poller_select_create },
	{ "linux_rt", px__poller_linux_rt_create },
};

static int sel_poller_create(const px_wait_desc *wd, px_intr *in,
			     px_poller **out)
{
	for (size_t i = 0; i < sizeof(sel_pollers) / sizeof(sel_pollers[0]); i++)
		if (!strcmp(sel_pollers[i].wait, wd->name))
			return sel_pollers[i].create(in, out);
	return -EINVAL;
}

static void sel_destroy(px_provider *p)
{
	px_sel *sel = sel_of(p);

	if (sel->pl)
		sel->pl->ops->destroy(sel->pl);
	if (sel->wait.intr)
		sel->wait.intr->ops->destroy(sel->wait.intr);
	px__fdq_fini(&sel->fdq);
	free(sel);
}

static int sel_create(const px_processor_config *cfg, const px_proc_spec *spec,
		      px_provider **out)
{
	px_sel *sel;
	int rc;

	sel = calloc(1, sizeof(*sel));
	if (!sel)
		return -ENOMEM;
	/* Probed now, not at the first pipe write: the probe's pipe takes
	 * the lowest free numbers for a moment, which by then may be one
	 * the application closed under pending operations. */
	(void)px__rwf_nosignal();
	px_list_init(&sel->done);
	px_list_init(&sel->retry);
	px_list_init(&sel->suspect);
	px_list_init(&sel->held);
	px_list_init(&sel->writers);
	px__fdq_init(&sel->fdq, sizeof(sel_fd));
	sel->wait_ops = sel_wait_ops;
	sel->wait.ops = &sel->wait_ops;
	rc = px__intr_create(cfg, &sel->wait.intr);
	if (rc < 0)
		goto fail;
	rc = sel_poller_create(spec->wait, sel->wait.intr, &sel->pl);
	if (rc < 0)
		goto fail;
	if (!sel->pl->ops->watch)
		sel->wait_ops.watch = NULL;
	if (!sel->pl->ops->verify)
		sel->wait_ops.check = NULL;
	sel->edge = (sel->pl->flags & PX_POLLER_EDGE) != 0;
	sel->base.ops = &px__provider_select_ops;
	sel->base.wait = &sel->wait;
	sel->base.ops_mask = PX_OPS_IO;
	/* A poller that is not LIVE sees a new descriptor only at its next
	 * prepare: a start from another thread must interrupt the leader. */
	sel->base.flags = PX_PF_START_ANY_THREAD;
	if (!sel_live(sel))
		sel->base.flags |= PX_PF_START_INTERRUPT;
	sel->base.max_aio = cfg->max_aio ? cfg->max_aio : px__default_max_aio();
	sel->base.priv_size = sizeof(struct px_sel_priv);
	*out = &sel->base;
	return 0;
fail:
	sel_destroy(&sel->base);
	return rc;
}

/* px_close closed fd (nothing is queued on it: px_close waited for its
 * operations).  Its next read tries at the start (sel_skip_try), and the
 * edge poller forgets the registration: the kernel dropped it with the
 * file, and a start on the next file under the number, even one from the
 * px_close callback (whose descriptor is this number, so the start is
 * trusted), must register that file instead of waiting for the suspect
 * check to notice. */
static void sel_closed(px_provider *p, int fd)
{
	px_sel *sel = sel_of(p);
	px_fdq_entry *fq = px_fdq_lookup(&sel->fdq, fd);
	sel_fd *e;

	if (!fq)
		return;
	e = sel_fd_of(fq);
	e->rd_miss = 0;
	e->rd_skip = 0;
	if (sel->edge) {
		sel->pl->ops->forget(sel->pl, &e->reg);
		e->recheck = 0;
		sel_edge_idle(sel, e);
	}
}

const px_provider_ops px__provider_select_ops = {
	.name = "select",
	.create = sel_create,     /* provider, interrupt, the poller of its wait */
	.destroy = sel_destroy,   /* poller, interrupt, descriptor table */
	.start = sel_start,       /* try at once (unlocked), else queue and watch */
	.cancel = sel_cancel,     /* unqueue: done; finished or busy: pending */
	.closed = sel_closed,     /* px_close: forget the read misses */
};
