/*
 * linux_aio.h - state shared by the Linux AIO provider (providers/linux_aio.c)
 * and its two waits (wait_strategies/aio_getevents.c, aio_epoll.c).
 *
 * One px_laio holds the AIO context and the three objects the core sees:
 * the provider, the wait and (for the native interrupt) the interrupt,
 * embedded so that each ops function finds the context with
 * px_container_of.  Every field is guarded by the proactor mutex, except
 * the leader's own batch and event array, which the leader uses without it
 * between prepare() and next_completed() (see providers/linux_aio.c).
 */
#ifndef PX_PROVIDERS_LINUX_AIO_H
#define PX_PROVIDERS_LINUX_AIO_H

#include <libaio.h>
#include <stdatomic.h>

#include "../wait_strategies/poller.h"
#include "fdq.h"
#include "internal.h"

/* How long the leader waits before trying again a submit the kernel
 * refused with EAGAIN. */
#define PX_LAIO_STUCK_MS 10

/* How often a write waiting for room is tried again without a report
 * (la_writers_retry in providers/linux_aio.c). */
#define PX_LAIO_RETRY_MS 1000

/* Events the leader takes out of the context per io_getevents. */
#define PX_LAIO_EVENTS 128

/* A batch of iocbs submitted with one io_submit, and what became of each:
 * 0 submitted, else the errno io_submit gave it (EAGAIN: not tried, the
 * context was full). */
typedef struct px_laio_batch {
	struct iocb **v;
	int *err;
	unsigned n;
} px_laio_batch;

/* A batch that la_kick submits (on px_laio.kicks meanwhile). */
typedef struct px_laio_kick {
	px_link link;
	unsigned gen;
} px_laio_kick;

/* A cancelled poll left to the kernel (la_orphan in linux_aio.c): its
 * record, and the tag in its iocb's data. */
typedef struct px_laio_orphan {
	struct px_result *r;
	uint8_t tag;
} px_laio_orphan;

typedef struct px_laio {
	px_provider prov;
	px_wait wait;
	px_intr nintr;              /* the native interrupt (io_getevents) */
	io_context_t ctx;
	unsigned depth;             /* iocbs of results in the kernel at most */
	unsigned inkernel;          /* ... now, claimed batches included */
	unsigned files_inkernel;    /* ... of them, file reads and writes */
	bool use_resfd;             /* every iocb signals resfd (epoll wait) */
	int resfd;                  /* the context's eventfd, or -1 */
	px_own_id res_id;           /* what resfd named when made */

	/* The leader ran prepare() and has not yet collected: it is, or is
	 * about to be, blocked in the kernel, so a start by another thread
	 * submits its own iocbs. */
	bool leader_waiting;
	/* Something finished outside the wait (u->done): the next wait must
	 * not block. */
	bool skip_wait;
	/* io_submit refused everything with EAGAIN while nothing was in the
	 * kernel: the leader waits briefly and tries again. */
	bool submit_stuck;
	/* Batches claimed and not yet settled (being submitted without the
	 * mutex by the leader or a starting thread). */
	unsigned submitting;

	px_list pending;            /* results whose iocb waits for io_submit */
	px_list done;               /* finished outside the wait (plink) */
	px_list recancel;           /* polls whose io_cancel came too early */
	/* Polls let go by a cancel whose events have not come yet (see
	 * la_orphan in providers/linux_aio.c): each result with the tag
	 * its iocb's data carries.  Still counted in inkernel. */
	struct px_laio_orphan *orphans;
	unsigned norphans, orphans_cap;
	uint8_t next_tag;           /* the tag last given to an iocb */
	px_list held;               /* datagram writes backing off (la_hold) */
	int held_ms;                /* prepare: the wait ends within this for
	                               the first of them (-1: none held) */
	px_list writers;            /* stream writes whose poll for room was
	                               issued (la_priv.wlink; la_writers_retry) */
	unsigned wtick;             /* PX_LAIO_RETRY_MS periods counted */
	uint64_t next_wtick;        /* when wtick next advances (ns) */
	int writers_ms;             /* prepare: the wait ends within this for
	                               the next period (-1: no writer waits) */

	/* The leader's batch (prepare -> wait -> next_completed). */
	px_laio_batch lb;
	/* Events of the last wait, for next_completed (leader only). */
	struct io_event ev[PX_LAIO_EVENTS];
	unsigned nev, iev;
	/* Results whose poll fired, claimed for their calls (leader only). */
	struct px_result *claimed[PX_LAIO_EVENTS];
	unsigned nclaimed;
	bool reap_more;             /* the last reap filled ev: look again */
	bool reap_all;              /* empty the ring after each wait (epoll) */
	long reap_max;              /* events taken per io_getevents */
	bool intr_fired;            /* the wait saw its signal interrupt */

	/* epoll wait: a poller watching resfd (and the interrupt). */
	px_poller *pl;
	px_poll_reg reg;            /* resfd's registration */
	bool polled;                /* a poller wait ran, not yet collected */

	/* Native interrupt: a poll iocb on an eventfd in this context. */
	struct iocb intr_cb;
	int intr_fd;
	px_own_id intr_id;          /* what intr_fd named when made */
	bool intr_armed;            /* intr_cb is in the kernel or the batch */
	bool intr_pending;          /* the eventfd was written, not drained */

	/* Another processor's descriptor the next wait also returns on
	 * (px_wait_ops.watch): a one-shot poll iocb, like the interrupt's. */
	struct iocb watch_cb;
	int watch_fd;
	bool watch_want;            /* arm it in the next prepare */
	bool watch_armed;           /* watch_cb is in the kernel or the batch */
	bool watch_off;             /* io_submit refused the watch's poll */

	/* Polls past the context's share for them wait in an epoll set of
	 * their own (la_spill in providers/linux_aio.c), which one poll iocb
	 * watches, so that file operations always find room in the
	 * context.  With the epoll wait every readiness wait goes there, and
	 * the leader's poller watches the set itself (spill_all: see
	 * "Readiness and the epoll wait" in providers/linux_aio.c). */
	unsigned poll_cap;          /* polls in the kernel at most */
	int spill_ep;               /* the set (made with the provider) */
	px_own_id spill_id;         /* what spill_ep named when made */
	struct iocb spill_cb;       /* the poll iocb on spill_ep */
	bool spill_armed;           /* spill_cb is in the kernel or a batch */
	bool spill_fired;           /* it fired: take the set's reports */
	px_list spilled;            /* results waiting in the set (slink) */
	bool spill_all;             /* epoll wait: no poll iocb for streams */
	px_poll_reg spill_reg;      /* spill_all: spill_ep in the poller */

	/* One of the provider's own descriptors (the native interrupt's
	 * eventfd, resfd, the spill set, the epoll wait's poller or its
	 * interrupt) was closed behind the library's back with close(2)
	 * (la_check_own in linux_aio.c).  The context, which is no
	 * descriptor, still works: from then on no iocb names resfd, no
	 * poll goes to the spill set, nothing is armed on the interrupt's
	 * eventfd, and every wait is an io_getevents of at most
	 * PX_NO_WAKE_MS.  Written under the mutex, read by the
	 * leader's wait without it: atomic, relaxed. */
	atomic_bool dead;
	/* Something failed as a closed descriptor of the provider's would
	 * (an interrupt's write, an epoll_ctl or epoll_wait of the spill
	 * set, the poller's wait): look at them at the next safe place. */
	bool check_own;
	/* The poller's wait said EBADF: written by the leader without the
	 * mutex, read by any thread with it (px__laio_check_own). */
	atomic_bool pl_failed;

	/* Batches claimed and not yet through io_submit, which looks each
	 * iocb's descriptor number up only when it comes to it: la_kick's
	 * (px_laio_kick, on the list while the kicking thread submits) and
	 * the leader's (lb, generation lb_gen, lb_unsub until its io_submit
	 * has returned).  A cancelled operation whose iocb one of them holds
	 * waits on subwaiters, marked as a call under way, so that
	 * px_cancel returns only once the number has been looked up: the
	 * application may close it then (la_subwait).  lb_unsub and
	 * lb_waiter are the leader's and a canceller's side of a handshake
	 * without the mutex: each writes its own, then reads the other's. */
	unsigned batch_gen;         /* the last batch's generation (not 0) */
	px_list kicks;
	px_list subwaiters;
	unsigned lb_gen;
	atomic_bool lb_unsub;
	atomic_bool lb_waiter;

	px_fdq fdq;                 /* per-descriptor queues (px_laio_fd) */
} px_laio;

static inline bool px_laio_dead(px_laio *u)
{
	return atomic_load_explicit(&u->dead, memory_order_relaxed);
}

static inline px_laio *px_laio_of_wait(px_wait *w)
{
	return px_container_of(w, px_laio, wait);
}

static inline px_laio *px_laio_of_intr(px_intr *in)
{
	return px_container_of(in, px_laio, nintr);
}

extern const px_provider_ops px__provider_laio_ops PX_HIDDEN;
extern const px_wait_ops px__wait_laio_getevents_ops PX_HIDDEN;
extern const px_wait_ops px__wait_laio_epoll_ops PX_HIDDEN;
extern const px_intr_ops px__intr_laio_ops PX_HIDDEN;

/* The io_submit the provider calls: libaio's, or a test's wrapper that
 * injects EAGAIN and partial submits (test/test_linux_aio.c). */
extern int (*px__laio_io_submit)(io_context_t ctx, long nr,
				 struct iocb **ios) PX_HIDDEN;
/* The io_cancel it calls: libaio's, or a test's that answers EINVAL and
 * cancels later, as when a cancelled poll's event is late. */
extern int (*px__laio_io_cancel)(io_context_t ctx, struct iocb *iocb,
				 struct io_event *ev) PX_HIDDEN;
/* Whether a cancelled poll's operation ends at once (la_orphan): true; a
 * test sets it false to have it wait for the poll's event, as every
 * cancel did before, for what comes after such a late event. */
extern bool px__laio_orphans PX_HIDDEN;

/* Shared by the waits (providers/linux_aio.c). */
/* Leader, mutex held: claim everything pending (and the native interrupt's
 * poll when with_intr) into the leader's batch, to be submitted by
 * px__laio_submit in wait().  Returns 0 or -errno. */
int px__laio_prepare(px_laio *u, bool with_intr) PX_HIDDEN;
/* Leader, mutex NOT held: submit the leader's batch.  Returns how long
 * the wait that follows may block, from the wait's timeout_ms (< 0: no
 * limit): 0 when something is to be handed out already, a short time
 * when io_submit left iocbs over. */
int px__laio_submit_leader(px_laio *u, int timeout_ms) PX_HIDDEN;
/* Leader, mutex NOT held: take up to PX_LAIO_EVENTS events into u->ev,
 * waiting at least min_nr of them up to ts (NULL: no limit), with sigmask
 * (NULL: none) as io_pgetevents takes it.  Returns the count or -errno. */
int px__laio_reap(px_laio *u, long min_nr, struct timespec *ts,
		  const sigset_t *sigmask) PX_HIDDEN;
/* Leader, mutex held: the next finished result (see px_wait_ops). */
px_result *px__laio_next_completed(px_laio *u) PX_HIDDEN;
/* Mutex held: the idle check (px_wait_ops.check) and the failures that
 * u->check_own notes: when one of the provider's own descriptors is
 * closed, go on without them (px_laio.dead). */
void px__laio_check_own(px_laio *u) PX_HIDDEN;

#endif /* PX_PROVIDERS_LINUX_AIO_H */
