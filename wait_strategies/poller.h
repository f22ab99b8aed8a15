/*
 * poller.h - readiness pollers: select, poll, epoll and linux_rt
 * (real-time signals) behind one interface that knows nothing of any
 * provider.
 *
 * A poller watches descriptors for an interest (PX_POLL_IN, PX_POLL_OUT),
 * plus the fd of the interrupt it was created with, and after a wait hands
 * back a batch of (descriptor, events).  What to do with a ready
 * descriptor is the caller's business (the readiness provider claims its
 * queue heads and does the system calls; see providers/select.c).
 *
 * Registration.  The caller keeps one px_poll_reg per descriptor, in its
 * own memory, and passes it to every call about that descriptor; the
 * poller keeps there what it needs (so it has no descriptor table of its
 * own).  Once set, a registration must stay at the same address until the
 * poller is destroyed (epoll keeps its address in the kernel).
 *
 * Reports are one-shot: a descriptor handed back by collect() is disarmed
 * (as if set to no interest, even if set() was called again since the
 * wait began), and the caller sets its interest again when it still wants
 * it.  An event may be stale: the descriptor may have been removed, or
 * closed and its number reused, since the wait began, and with epoll a
 * set() that raced with a report can leave the kernel armed while the
 * registration says disarmed (one late report, even after remove()); the
 * caller checks what it is told.
 *
 * Edge pollers (PX_POLLER_EDGE: epoll created by
 * px__poller_epoll_edge_create) work differently.  set() registers the
 * descriptor once, for both directions whatever the interest, and later
 * set() calls cost nothing (remove() deletes the registration).  A report is an edge: the descriptor became
 * readable or writable (or hung up) since it was last reported, and it
 * stays registered; nothing is ever disarmed.  So the caller must keep its
 * own "may be ready" state per direction (set by a report, cleared by
 * EAGAIN) and only wait for a report after an EAGAIN.  The kernel drops a
 * registration silently when the last reference to the file is closed, so
 * a number closed and reused for another file is not watched although the
 * registration says so: forget() tells the poller so (no system call; the
 * next set() registers again), and refresh() checks with the kernel.
 *
 * Changes during a wait.  With PX_POLLER_LIVE (epoll, linux_rt) the
 * interest set lives in the kernel: set() and remove() are system calls
 * and take effect at once, even on a wait in progress in another thread
 * (linux_rt's set() wakes that thread itself when it finds the descriptor
 * ready already).  Without it
 * (select, poll) they only change the poller's own copy, which the next
 * prepare() hands to the wait: whoever changes it while another thread
 * waits must interrupt that thread for the change to count.
 *
 * Locking: every call but wait() is made under one lock the caller holds
 * (the proactor mutex); wait() is made without it, by one thread at a
 * time (the leader), between a prepare() and a collect() of that thread.
 */
#ifndef PX_WAIT_STRATEGIES_POLLER_H
#define PX_WAIT_STRATEGIES_POLLER_H

#include <time.h>

#include "internal.h"

/* Interest and events. */
#define PX_POLL_IN   0x1u /* readable: data, end of stream, a connection */
#define PX_POLL_OUT  0x2u /* writable, or a connect has finished */
#define PX_POLL_ERR  0x4u /* error or hang-up (events only) */
#define PX_POLL_NVAL 0x8u /* not an open descriptor (events only; poll and
                             select, whose waits see closed descriptors) */

/* poll and select notice a descriptor closed while they wait only at
 * their next call (then POLLNVAL, EBADF).  So that operations pending on
 * it complete in bounded time even when nothing else would wake the wait,
 * their waits last at most this long while they watch any descriptor. */
#define PX_POLL_RECHECK_MS 500

/* px_poller.flags */
#define PX_POLLER_LIVE 0x1u /* interest set in the kernel: see above */
#define PX_POLLER_EDGE 0x2u /* registered once, edge reports: see above */

/* One watched descriptor.  Zero it, then set fd, before the first set(). */
typedef struct px_poll_reg {
	int fd;
	unsigned armed;     /* PX_POLL_IN / _OUT the poller watches for (edge
	                       pollers: both once registered) */
	unsigned slot;      /* poll: 1 + index in its array; 0 if not there */
} px_poll_reg;

typedef struct px_poll_event {
	int fd;
	unsigned events;    /* PX_POLL_* */
} px_poll_event;

typedef struct px_poller px_poller;

typedef struct px_poller_ops {
	const char *name;
	/* Free the poller (not its interrupt). */
	void (*destroy)(px_poller *pl);
	/* Watch reg->fd for interest (PX_POLL_IN | PX_POLL_OUT; 0: watch
	 * nothing but keep the registration).  A LIVE poller may go on
	 * watching a direction dropped from interest until the descriptor is
	 * next reported (one spurious report at most) rather than spend a
	 * system call; the others apply interest exactly.  Returns 0, -EMFILE
	 * for a descriptor >= fd_limit, -ENOMEM (poll: the arrays grow here,
	 * never in prepare or wait), or the kernel's -errno (epoll: -EPERM for
	 * a regular file, -EBADF for a closed descriptor). */
	int (*set)(px_poller *pl, px_poll_reg *reg, unsigned interest);
	/* Stop watching reg->fd: no later wait reports it.  Cannot fail. */
	void (*remove)(px_poller *pl, px_poll_reg *reg);
	/* Leader, before wait(): hand the current interest set to the wait.
	 * Never allocates. */
	void (*prepare)(px_poller *pl);
	/* Leader, lock NOT held: wait up to timeout_ms (< 0: no limit) for
	 * readiness or the interrupt.  Returns the number of ready
	 * descriptors (>= 0) or -errno; -EINTR is an ordinary wake-up. */
	int (*wait)(px_poller *pl, int timeout_ms);
	/* Leader, after wait(): copy up to max events of the last wait to
	 * ev, disarming their descriptors (see above); call until it returns
	 * 0.  The interrupt's fd is never among them: it sets fired. */
	size_t (*collect)(px_poller *pl, px_poll_event *ev, size_t max);
	/* Edge pollers only (NULL otherwise).  forget: reg->fd may name
	 * another file now; the next set() registers it again.  No system
	 * call.  refresh: make sure reg->fd's current file is registered
	 * (registering it if the number was closed and reused) and report it
	 * again if it is ready now, as a new edge.  Returns 0 or -errno
	 * (-EBADF: not open; -EPERM: cannot be watched). */
	void (*forget)(px_poller *pl, px_poll_reg *reg);
	int (*refresh)(px_poller *pl, px_poll_reg *reg);
	/* Optional: a descriptor that polls readable while a wait() would
	 * return at once (epoll: the epoll instance), for another processor's
	 * wait to watch (px_wait_ops.ready_fd).  NULL: none. */
	int (*ready_fd)(px_poller *pl);
	/* Optional (NULL: the poller cannot): the next wait() also returns
	 * as soon as fd polls readable, and reports nothing for it.  Made by
	 * the leader under the caller's lock, before prepare(); fd belongs to
	 * another processor of the same proactor (its ready_fd).  Best
	 * effort: a watch the kernel refuses is dropped without a word, and
	 * the caller bounds the wait anyway (the dispatcher's
	 * disp_lone_lead). */
	void (*watch)(px_poller *pl, int fd);
	/* Optional (edge epoll): after px_poller.broken was set, make a new
	 * kernel object that watches the interrupt alone.  Leader, under the
	 * caller's lock, after its wait.  Returns 1 when it made one: no
	 * registration of before is in it, so the caller registers again
	 * whatever it still watches (reg->armed means nothing until then);
	 * 0 when nothing was broken; -errno when no new object could be made
	 * (the waits go on failing with -EBADF: try again after the next). */
	int (*rebuild)(px_poller *pl);
	/* Optional: is the kernel object the waits use still ours (epoll)?
	 * Another one of the same kind may have taken its number, and then
	 * reports nothing of ours.  Marks the poller broken if not.  And is
	 * the interrupt's descriptor still the interrupt's (epoll, poll,
	 * select: px__own_fd_is)?  If not, marks it gone and foreign.
	 * Under the caller's lock, now and then (a system call or two),
	 * maybe while another thread is in the wait, which it leaves
	 * alone. */
	void (*verify)(px_poller *pl);
} px_poller_ops;

struct px_poller {
	const px_poller_ops *ops;
	px_intr *intr;      /* watched; the caller drains it (px_poller_drain) */
	unsigned flags;     /* PX_POLLER_* */
	int fd_limit;       /* descriptors >= this cannot be watched */
	bool fired;         /* the last wait saw the interrupt, not yet drained */
	/* The kernel object the waits use (the epoll instance) was closed
	 * behind the library's back with close(2), or its number is another
	 * instance's now, as a wait, a registration or verify found out;
	 * see rebuild.  Set by the leader's wait without the lock and by
	 * registrations under it, cleared by rebuild under it: atomic,
	 * relaxed. */
	atomic_bool broken;
};

/* Build a poller that watches in->fd (if any) and waits with
 * in->wait_mask.  Returns 0 or -errno (select: -EMFILE when in->fd is
 * beyond FD_SETSIZE). */
int px__poller_select_create(px_intr *in, px_poller **out) PX_HIDDEN;
int px__poller_poll_create(px_intr *in, px_poller **out) PX_HIDDEN;
int px__poller_epoll_create(px_intr *in, px_poller **out) PX_HIDDEN;
/* linux_rt: for one leader thread that never changes (a dedicated
 * processor); -EINVAL for an interrupt whose fd is not a pipe. */
int px__poller_linux_rt_create(px_intr *in, px_poller **out) PX_HIDDEN;
int px__poller_epoll_edge_create(px_intr *in, px_poller **out) PX_HIDDEN;

/* Consume the interrupt if the last wait saw it.  Lock held. */
static inline void px_poller_drain(px_poller *pl)
{
	if (pl->fired) {
		pl->fired = false;
		pl->intr->ops->drain(pl->intr);
	}
}

/* After a wait failed with err: EINTR is how a signal interrupt (or one
 * without a descriptor) arrives. */
static inline void px_poller_wait_failed(px_poller *pl, int err)
{
	if (err == EINTR && (pl->intr->wait_mask || pl->intr->fd < 0))
		pl->fired = true;
}

/* A relative timeout in milliseconds (< 0: none) as a timespec; NULL for
 * "no limit". */
static inline struct timespec *px_poll_timeout(int ms, struct timespec *ts)
{
	if (ms < 0)
		return NULL;
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long)(ms % 1000) * 1000000L;
	return ts;
}

#endif /* PX_WAIT_STRATEGIES_POLLER_H */
