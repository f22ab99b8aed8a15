/*
 * uring.h - state shared by the io_uring provider (providers/uring.c) and
 * its wait strategy and native interrupt (wait_strategies/uring.c).
 *
 * One px_uring holds its rings and the three objects the core sees: the
 * provider, the wait and the interrupt, embedded so that each ops function
 * finds the provider with px_container_of.  Every field is guarded by the
 * proactor mutex, except that a leader reads the completion side of the
 * rings it holds in wait() without it (see wait_strategies/uring.c).
 */
#ifndef PX_PROVIDERS_URING_H
#define PX_PROVIDERS_URING_H

#include <liburing.h>

#include "fdq.h"
#include "internal.h"

/* user_data values below this are tags, not results.  A result is at least
 * 8-byte aligned, so a result's address never falls in this range, and its
 * low bits are free to mark the readiness poll of its EAGAIN retry and the
 * ASYNC_CANCEL aimed at it. */
#define PX_URING_TAG_NOP    1ull   /* the native interrupt's NOP */
#define PX_URING_TAG_KICK   2ull   /* the read of the kick eventfd */
#define PX_URING_TAG_GATE   3ull   /* the poll of a ring's gate epoll set */
#define PX_URING_TAG_MAX    16ull
#define PX_URING_UD_POLL    1ull   /* low bit: readiness poll of a result */
#define PX_URING_UD_CANCEL  2ull   /* bit 1: the ASYNC_CANCEL of a result */
#define PX_URING_UD_GATE    4ull   /* bit 2: the EPOLL_CTL that gates a read */
#define PX_URING_UD_BITS    7ull

/* Never start into the last few SQ slots: they are kept for the interrupt
 * NOP and for cancels, which cannot be deferred like a start. */
#define PX_URING_SQ_RESERVE 2u

typedef struct px_uring_fd px_uring_fd;

/* Rings one provider may have (the config's rings=). */
#define PX_URING_RINGS_MAX 16u

/* One ring.  Every field is guarded by the proactor mutex, except those
 * marked "leader only", which the thread that holds the ring (led) reads
 * in its unlocked wait. */
/* px_uring_ring.kick */
enum px_uring_kick {
	PX_URING_KICK_OFF,    /* no READ in the ring: starts submit themselves */
	PX_URING_KICK_ARMED,  /* put in by the leader's last prepare */
	PX_URING_KICK_SENT,   /* ... and the eventfd written since */
	PX_URING_KICK_DONE    /* its CQE reaped; the next prepare puts another */
};

typedef struct px_uring_ring {
	struct io_uring ring;
	px_own_id ring_id;          /* what ring.ring_fd named when made */
	unsigned index;
	/* A leader holds this ring, from its prepare() to the
	 * next_completed() that finds no more CQEs. */
	bool led;
	/* Its leader has run prepare() and has not yet reaped: it is, or is
	 * about to be, blocked in the kernel, so a start or cancel made by
	 * another thread into this ring must submit its SQE itself. */
	bool waiting;
	/* Interrupt NOP is in the ring and its CQE not yet reaped. */
	bool intr_queued;
	/* The last submit was refused (EAGAIN, EBUSY, EINTR, ENOMEM): SQEs
	 * are still pending, so the leader waits with a short timeout and
	 * retries. */
	bool submit_stuck;
	/* SQEs filled whose CQE is not reaped yet (but the kick's READ and
	 * the gate's POLL_ADD), reads held back for this ring (late or
	 * soon) and reads gated here: the ring has work. */
	unsigned pending;
	unsigned cancels_inflight;  /* ASYNC_CANCELs whose CQE is not reaped */
	/* Descriptors whose last start went into this ring (ur_place_new).
	 * One the application closed counts until its number is started on
	 * again: the provider does not see the close. */
	unsigned nfd;
	/* When its last leader let it go (px__now_ns). */
	uint64_t released_ns;
	/* Leads of it that handed out completions: another leader sees from
	 * it whether this ring's leader has been at work, and may leave or
	 * block in a callback (its watch, in wait_strategies/uring.c).  A
	 * wait that ends with nothing does not count. */
	unsigned worked;
	/* The bound, in ms, that prepare() put on the wait of the leader
	 * holding this ring for the rings of other leaders (its watch) or
	 * for a ring without one (orphans); 0: none.  Set on every ring
	 * the leader holds; read by other leaders. */
	unsigned bound_ms;
	/* The watch of the leader whose own ring this is: its next bound
	 * (grows while the other leaders hand out nothing), and the sum of
	 * their rings' worked when it was set. */
	unsigned watch_next;
	unsigned watch_worked;

	/* Published SQEs the leader submits in its wait's io_uring_enter,
	 * without the mutex (set by prepare; leader only). */
	unsigned to_submit;
	/* That enter failed, so submitted nothing (leader only, read back
	 * under the mutex in next_completed). */
	int enter_err;
	/* An enter on it failed with EBADF: its descriptor was closed
	 * behind the library's back with close(2) (px_close refuses the
	 * number).  No CQE can be waited for and no cancel submitted any
	 * more, so its leader ends what it holds (px__uring_dead_next);
	 * px_destroy retried its cancels for good (fixed problem 288).
	 * Atomic: set under the mutex, read by the leader's wait without it
	 * (px_uring_wait_on). */
	atomic_bool dead;
	/* For a cancel that would make an unsubmitted SQE a NOP while the
	 * leader waits (ur_void_unsubmitted), set by prepare under the
	 * mutex: the leader's enter may take SQEs (enter_takes: its prepare
	 * published enter_n of them, the kernel's SQ head then at
	 * enter_head); the SQEs other threads' submits have taken since
	 * (foreign_n, under the mutex).  The kernel moves its head only at
	 * the end of a submission, so once the head has moved by more than
	 * foreign_n, the leader's enter has taken its SQEs and takes no more;
	 * before, it may take up to enter_n from the head on.  entering:
	 * set by that prepare, cleared by the leader once the enter has
	 * returned (release; atomic, as the leader stores it without the
	 * mutex).  One store of each per lead that submits. */
	bool enter_takes;
	atomic_bool entering;
	unsigned enter_head;
	unsigned enter_n;
	unsigned foreign_n;
	/* CQEs reaped by the current lead (leader only; PX_URING_REAP_MAX). */
	unsigned reaped;

	/* When this ring is a leader's own (the first it holds), set by
	 * prepare() for the wait that follows (leader only): */
	bool skip_wait;             /* return at once (a deferred interrupt) */
	bool wait_short;            /* a submit is stuck: retry soon */
	bool orphans;               /* another ring has work and no leader */
	unsigned nextra;            /* other rings held by the same leader */
	struct px_uring_ring *extra[PX_URING_RINGS_MAX];

	/* Socket reads held back for this ring (see "Late reads" in
	 * uring.c), in the order they were started: late ones for one lead,
	 * each with the late_gen it was held under, soon ones until the next
	 * prepare; late_gen counts this ring's prepares. */
	px_list late;
	unsigned late_gen;

	/* The kick (a dedicated processor's one ring; -1 elsewhere, and once
	 * its number named another file: px__uring_check_own): an
	 * eventfd whose READ the leader keeps in the ring, so that a start
	 * made by another thread wakes the leader to submit it instead of
	 * submitting it itself (see "The kick" in uring.c).  kick, under
	 * the mutex: where that READ is (px_uring_kick). */
	int kick_fd;
	px_own_id kick_id;          /* what kick_fd named when made */
	uint8_t kick;
	uint64_t kick_buf;          /* where the READ puts the count */

	/* Gated reads ("Gated reads" in uring.c).  gate_ep: the ring's
	 * epoll set, made at its first gated read (-1 not yet, -2 refused,
	 * or forgotten once its number named another file:
	 * px__uring_check_own);
	 * gate_armed: the POLL_ADD on it is in the ring, its CQE not yet
	 * reaped.  pf_reads: RECVs with POLL_FIRST in the kernel; gated:
	 * reads gated here (their EPOLL_CTL in flight, or parked waiting for
	 * the set), each also counted in pending; parked: of those, the ones
	 * whose EPOLL_CTL is done, which the POLL_ADD must be in for. */
	int gate_ep;
	px_own_id gate_id;          /* what gate_ep named when made */
	bool gate_armed;
	unsigned gate_min;          /* u's threshold (0: never gate) */
	struct px_uring *owner;     /* the provider (for its port table) */
	unsigned pf_reads;
	unsigned gated;
	unsigned parked;
} px_uring_ring;

/* The provider: its rings and the three objects the core sees. */
typedef struct px_uring {
	px_provider prov;
	px_wait wait;
	px_intr intr;

	px_uring_ring *rings;       /* nrings of them */
	unsigned nrings;
	uint64_t serial;            /* this provider's, from 1 (ur_has_home) */
	unsigned next_home;         /* the home ring the next leader gets */
	unsigned next_spread;       /* the ring of the next start made by a
	                               thread that has no home */

	/* Interrupt requested while no leader was waiting: the next wait must
	 * return at once. */
	bool intr_deferred;
	/* The last leader was the only thread in px_handle_events: operations
	 * gather in its home ring instead of staying where they were (one
	 * thread leading two rings pays an enter per ring). */
	bool alone;

	unsigned cancel_cap;        /* cancels in flight per ring, to bound its CQ */
	unsigned sq_reserve;        /* SQ slots a start leaves free */

	px_list stalled;            /* results waiting for an SQE (priv slink) */
	px_list *started;           /* the processor's, from prepare() */
	px_list cancel_stalled;     /* results whose cancel waits for an SQE */
	/* Set while ur_cancel finishes a queue head that was not in the
	 * kernel for px_cancel or px_close: the next head goes on stalled
	 * instead of into the kernel (ur_advance), since the same call
	 * cancels it next. */
	bool advance_later;

	bool late_ok;               /* the config allows them (no SQPOLL) */
	/* The kernel has no IORING_REGISTER_SYNC_CANCEL (before 6.0; see
	 * ur_sync_cancel in uring.c): not asked again. */
	bool sync_cancel_off;
	/* The process runs under valgrind: every wait is bounded by
	 * PX_URING_VALGRIND_MS (see there). */
	bool valgrind;

	/* For a lone thread that leads this processor and another in turn
	 * (px_wait_ops.ready_fd; "The ready descriptor" in uring.c): an
	 * eventfd registered with every ring, made at the first ask.  -1:
	 * not asked yet; -2: refused (no eventfd, or the kernel would not
	 * register it), or forgotten once its number named another file
	 * (px__uring_check_own). */
	int ready_efd;
	px_own_id ready_id;         /* what ready_efd named when made */

	px_fdq fdq;                 /* per-descriptor queues (px_uring_fd) */

	/* The default gate ("Gated reads" in uring.c, "Whose peer is
	 * here"): read_gate= was not given, so a read is gated only when
	 * its socket's other end is not one of this provider's.  ports:
	 * how many of its TCP sockets hold each local port (listeners,
	 * connected ends), made at the first; pid: this process's. */
	bool gate_peers;
	uint32_t *ports;
	pid_t pid;
	/* Loopback pairs ("New descriptors" in uring.c): per local TCP
	 * port, 1 + the index of the ring a socket connected from that port
	 * went into (0: none), made at the first connect with several
	 * rings. */
	uint8_t *port_ring;
} px_uring;

static inline px_uring *px_uring_of_wait(px_wait *w)
{
	return px_container_of(w, px_uring, wait);
}

static inline px_uring *px_uring_of_intr(px_intr *in)
{
	return px_container_of(in, px_uring, intr);
}

/* The provider itself (providers/uring.c), for its class. */
extern const px_provider_ops px__provider_uring_ops PX_HIDDEN;

/* The wait strategy and interrupt built by the provider (wait_strategies/). */
extern const px_wait_ops px__wait_uring_ops PX_HIDDEN;
extern const px_intr_ops px__intr_uring_ops PX_HIDDEN;

/* A free SQE of rg, keeping `reserve` slots free for cancels and the
 * interrupt, counted in rg->pending.  When the ring looks full it submits
 * what is pending and looks again once.  NULL when there is still no room.
 * Mutex held. */
struct io_uring_sqe *px__uring_get_sqe(px_uring_ring *rg, unsigned reserve) PX_HIDDEN;

/* px__uring_get_sqe for what cannot wait for a later lead (the interrupt's
 * NOP): with SQPOLL, when the ring is still full after the submit (its
 * kernel thread has not taken the SQEs yet), wait until it has and look
 * again.  NULL when there is still no room.  Mutex held. */
struct io_uring_sqe *px__uring_get_sqe_now(px_uring_ring *rg, unsigned reserve) PX_HIDDEN;

/* The calling thread's ring: where its starts go.  A thread gets one, in
 * turn, the first time it leads (px__uring_pick); before that ring 0.
 * Mutex held. */
px_uring_ring *px__uring_home(px_uring *u) PX_HIDDEN;

/* prepare(): choose the ring the calling thread will lead (its home if
 * that has work and no leader, else, unless others_busy, another with work
 * and none, else any without a leader), mark it led, and make it the
 * thread's home if it had none.  NULL when every ring has a leader.  Mutex
 * held. */
px_uring_ring *px__uring_pick(px_uring *u, bool others_busy) PX_HIDDEN;

/* may_lead (px_wait_ops): the ring px__uring_pick would give the calling
 * thread has work and no leader.  Mutex held. */
bool px__uring_may_lead(px_uring *u, bool others_busy) PX_HIDDEN;

/* How long a ring may stay without a leader, its work waiting for the
 * thread that led it last to come back, before another thread takes it:
 * that thread may be asleep, gone, or blocked in a callback. */
#define PX_URING_ORPHAN_MS 1

/* valgrind (3.19, Debian 12's) runs one thread of the program at a time
 * and lets the others run while one blocks only in system calls it knows
 * may block; io_uring_enter is not among them.  A loop thread waiting in
 * it would hold up every other thread of the program: the one that would
 * start the work it waits for, or call px_stop (proactor_test never got
 * past connecting its sessions, an echo server did not stop on SIGTERM).
 * So under valgrind a leader calls sched_yield(2) before each wait, which
 * valgrind does treat as a point to switch threads, and waits at most
 * this long, so that a thread that needs to run waits that long at most.
 * proactor_test then runs under valgrind as it does without. */
#define PX_URING_VALGRIND_MS 10

/* Requests in flight in a ring (px_uring_ring.pending) up to which it
 * counts as lightly loaded, about one echo session's: see
 * ur_gather_light (uring.c). */
#define PX_URING_LIGHT 4u
/* A new socket read is gated when, with it, this many reads would wait
 * in its ring (RECVs with POLL_FIRST in the kernel, and reads already
 * gated), unless the config's read_gate= says otherwise ("Gated reads"
 * in uring.c).  1: every read that would wait; 0: never.  Without
 * read_gate= only the reads of sockets whose other end is not served by
 * the same provider are gated (u->gate_peers). */
#define PX_URING_GATE_DEFAULT 8u

/* ur_balance's margin, in requests (a few echo sessions'). */
#define PX_URING_BALANCE 16u

/* A leader waiting on its ring while another thread leads a ring with
 * work waits at most this long (its watch) while the other leaders hand
 * out completions, then twice as long after each wait that ran out while
 * they did not, up to PX_URING_WATCH_MAX_MS: that thread may leave
 * px_handle_events or block in a callback, and then nobody else looks at
 * its ring (see prepare in wait_strategies/uring.c). */
#define PX_URING_WATCH_MS 20u
#define PX_URING_WATCH_MAX_MS 1000u

/* rg has work, no leader, and nobody led it for PX_URING_ORPHAN_MS.
 * now: px__now_ns(), or 0 to have it read.  Mutex held. */
bool px__uring_orphaned(px_uring_ring *rg, uint64_t *now) PX_HIDDEN;

/* Issue the results and cancels that were waiting for an SQE (into rg, the
 * caller's ring, and into their own rings).  Mutex held (prepare). */
void px__uring_flush_stalled(px_uring *u, px_uring_ring *rg) PX_HIDDEN;

/* Issue into rg the socket reads held back for it: the soon ones, and
 * the late ones held since one of its earlier prepares (late ones held
 * since its last one wait for the next); count this prepare.  True if it
 * issued late reads or still holds some: the leader's wait must then not
 * block (soon reads are ordinary once issued).  Mutex held (prepare). */
bool px__uring_late_flush(px_uring *u, px_uring_ring *rg) PX_HIDDEN;

/* Put the POLL_ADD on rg's gate epoll set into rg if a gated read is
 * parked there and it is not in yet.  Mutex held (prepare). */
void px__uring_gate_arm(px_uring_ring *rg) PX_HIDDEN;

/* Make rg's SQEs ready for its leader's wait: published for the unlocked
 * enter (to_submit), or submitted now with SQPOLL or after a refused
 * submit.  Returns 0 or -errno.  Mutex held (prepare). */
int px__uring_flush(px_uring_ring *rg) PX_HIDDEN;

/* Submit now if rg's leader is blocked in the kernel (else its prepare
 * will).  Mutex held. */
void px__uring_kick(px_uring_ring *rg) PX_HIDDEN;
void px__uring_kick_arm(px_uring_ring *rg) PX_HIDDEN;

/* The ready descriptor ("The ready descriptor" in uring.c).  ready_fd:
 * make it (first call), submit what unled rings hold and make it readable
 * if a lead has something to do already; returns it, or -1.  drain: at a
 * lead's prepare, before it reaps.  Mutex held, both. */
int px__uring_ready_fd(px_uring *u) PX_HIDDEN;
void px__uring_ready_drain(px_uring *u) PX_HIDDEN;

/* The idle check of the kick and ready eventfds and the gate sets: one
 * whose number names another file now is forgotten, its mechanism off
 * ("px__uring_check_own" in uring.c).  Mutex held (px_uring_check). */
void px__uring_check_own(px_uring *u) PX_HIDDEN;

/* The index of the ring of fd's last start, or -1 (none; the number is
 * unknown).  Mutex held.  For the tests. */
int px__uring_fd_ring(px_uring *u, int fd) PX_HIDDEN;

/* Make the SQEs filled so far visible to the kernel (no system call).
 * Returns how many it has not taken yet.  Mutex held. */
unsigned px__uring_publish(px_uring_ring *rg) PX_HIDDEN;

/* A socket read's IORING_RECVSEND_POLL_FIRST was refused by this kernel
 * (EINVAL before 5.19), so socket reads go in as READ in this process
 * (for the tests). */
bool px__uring_poll_first_refused(void) PX_HIDDEN;

/* Handle one CQE reaped from rg.  Returns the result it finished (outputs
 * set, forgotten by the provider), or NULL when it was internal
 * (interrupt, cancel, readiness poll) or the operation was resubmitted.
 * Leader, mutex held. */
px_result *px__uring_complete(px_uring *u, px_uring_ring *rg,
			      uint64_t user_data, int res) PX_HIDDEN;

/* rg is dead (px_uring_ring.dead): finish one operation of started that
 * rg holds and return it, or NULL when none is left.  Each ends once:
 * with ECANCELED if a cancel was asked, else EBADF.  Leader, mutex
 * held. */
px_result *px__uring_dead_next(px_uring *u, px_uring_ring *rg,
			       px_list *started) PX_HIDDEN;
/* An enter on rg returned rc: EBADF marks it dead, and so does
 * EOPNOTSUPP, the kernel's answer for a number that names a file other
 * than a ring: the ring's closed behind the library's back and the number
 * taken by the application's file (dup2, its next open), where every
 * enter failed so and a read pending on the ring never ended (TESTING.md,
 * fixed problem 311). */
static inline void px__uring_enter_failed(px_uring_ring *rg, int rc)
{
	if (rc == -EBADF || rc == -EOPNOTSUPP)
		atomic_store_explicit(&rg->dead, true, memory_order_relaxed);
}

/* Ask the CPU to start loading what px__uring_complete and ur_finish will
 * touch first for the next few CQEs of rg (the result's header, its
 * completion and the provider's phase byte).  With hundreds of sessions
 * those results were last written by another thread or long ago, and
 * each first touch was a cache miss taken in turn.  Changes nothing; a
 * CQE's user_data that is a tag is skipped.  Leader, mutex held. */
void px__uring_prefetch(px_uring_ring *rg) PX_HIDDEN;

#endif /* PX_PROVIDERS_URING_H */
