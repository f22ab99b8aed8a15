/*
 * uring.h - state shared by the io_uring provider (providers/uring.c) and
 * its wait strategy and native interrupt (wait_strategies/uring.c).
 *
 * One px_uring holds the ring and the three objects the core sees: the
 * provider, the wait and the interrupt, embedded so that each ops function
 * finds the ring with px_container_of.  Every field is guarded by the
 * proactor mutex, except that the leader reads the ring's completion side
 * in wait() without it (see wait_strategies/uring.c).
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
#define PX_URING_TAG_MAX    16ull
#define PX_URING_UD_POLL    1ull   /* low bit: readiness poll of a result */
#define PX_URING_UD_CANCEL  2ull   /* bit 1: the ASYNC_CANCEL of a result */

/* Never start into the last few SQ slots: they are kept for the interrupt
 * NOP and for cancels, which cannot be deferred like a start. */
#define PX_URING_SQ_RESERVE 2u

typedef struct px_uring_fd px_uring_fd;

typedef struct px_uring {
	px_provider prov;
	px_wait wait;
	px_intr intr;
	struct io_uring ring;

	/* The leader has run prepare() and has not yet reaped: it is, or is
	 * about to be, blocked in the kernel, so a start or cancel made by
	 * another thread must submit its SQE itself. */
	bool leader_waiting;
	/* Interrupt NOP is in the ring and its CQE not yet reaped. */
	bool intr_queued;
	/* Interrupt requested while no leader was waiting: the next wait must
	 * return at once. */
	bool intr_deferred;
	/* Set by prepare() for the wait that follows (leader only). */
	bool skip_wait;
	/* The last submit failed with EAGAIN/EBUSY: SQEs are still pending,
	 * so the leader waits with a short timeout and retries. */
	bool submit_stuck;
	/* prepare() saw submit_stuck: this wait is short (leader only). */
	bool wait_short;

	/* Published SQEs the leader submits in its wait's io_uring_enter,
	 * without the mutex (set by prepare; leader only). */
	unsigned to_submit;
	/* That enter failed with EAGAIN/EBUSY (leader only, read back under
	 * the mutex in next_completed). */
	int enter_err;

	unsigned cancels_inflight;  /* ASYNC_CANCELs whose CQE is not reaped */
	unsigned cancel_cap;        /* at most this many, to bound the CQ */
	unsigned sq_reserve;        /* SQ slots a start leaves free */

	px_list stalled;            /* results waiting for an SQE (priv slink) */
	px_list cancel_stalled;     /* results whose cancel waits for an SQE */

	px_fdq fdq;                 /* per-descriptor queues (px_uring_fd) */
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

/* A free SQE, keeping `reserve` slots free for cancels and the interrupt.
 * When the ring looks full it submits what is pending and looks again once.
 * NULL when there is still no room.  Mutex held. */
struct io_uring_sqe *px__uring_get_sqe(px_uring *u, unsigned reserve) PX_HIDDEN;

/* Submit everything pending: first the results and cancels that were
 * waiting for an SQE, then the SQ ring.  Leader, mutex held (prepare).
 * Returns 0 or -errno; EAGAIN and EBUSY leave the SQEs for the next try and
 * set submit_stuck. */
int px__uring_flush(px_uring *u) PX_HIDDEN;

/* Submit now if the leader is blocked in the kernel (else its prepare will).
 * Mutex held. */
void px__uring_kick(px_uring *u) PX_HIDDEN;

/* Make the SQEs filled so far visible to the kernel (no system call).
 * Returns how many it has not taken yet.  Mutex held. */
unsigned px__uring_publish(px_uring *u) PX_HIDDEN;

/* Handle one reaped CQE.  Returns the result it finished (outputs set,
 * forgotten by the provider), or NULL when it was internal (interrupt,
 * cancel, readiness poll) or the operation was resubmitted.  Leader, mutex
 * held. */
px_result *px__uring_complete(px_uring *u, uint64_t user_data, int res) PX_HIDDEN;

#endif /* PX_PROVIDERS_URING_H */
