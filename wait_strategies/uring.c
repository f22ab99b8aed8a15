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
 * its current wait.
 *
 * This file has two ops tables, the wait's and the interrupt's: they are
 * one mechanism and share the ring.
 */
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

static int px_uring_prepare(px_wait *w, px_list *started)
{
	px_uring *u = px_uring_of_wait(w);
	int rc;

	(void)started;  /* the kernel already knows every started operation */
	rc = px__uring_flush(u);
	u->wait_short = u->submit_stuck;
	if (u->intr_deferred) {
		u->intr_deferred = false;
		u->skip_wait = true;
	}
	u->leader_waiting = true;
	return rc;
}

static int px_uring_wait(px_wait *w, int timeout_ms)
{
	px_uring *u = px_uring_of_wait(w);
	struct io_uring_cqe *cqe;
	int rc;

	if (u->skip_wait) {
		u->skip_wait = false;
		timeout_ms = 0;
	}
	if (u->wait_short && (timeout_ms < 0 || timeout_ms > PX_URING_STUCK_MS))
		timeout_ms = PX_URING_STUCK_MS;

	if (u->to_submit) {
		/* Submit what prepare() published and wait, in one enter. */
		unsigned n = u->to_submit;
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

		u->to_submit = 0;
		if (timeout_ms != 0 && !io_uring_cq_ready(&u->ring)) {
			flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
			min = 1;
		}
		rc = io_uring_enter2((unsigned)u->ring.ring_fd, n, min, flags,
				     flags ? (sigset_t *)&arg : NULL,
				     flags ? sizeof(arg) : 0);
		if (rc == -EAGAIN || rc == -EBUSY)
			u->enter_err = rc;
		if (rc < 0 && rc != -ETIME && rc != -EAGAIN && rc != -EBUSY)
			return rc;  /* -EINTR included: an ordinary wake-up */
		return (int)io_uring_cq_ready(&u->ring);
	}
	if (timeout_ms == 0) {
		rc = io_uring_peek_cqe(&u->ring, &cqe);
	} else if (timeout_ms < 0) {
		rc = io_uring_wait_cqe(&u->ring, &cqe);
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ms / 1000,
			.tv_nsec = (long long)(timeout_ms % 1000) * 1000000,
		};
		rc = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
	}
	if (rc == -ETIME || rc == -EAGAIN)
		return 0;
	if (rc < 0)
		return rc;  /* -EINTR included: an ordinary wake-up */
	return (int)io_uring_cq_ready(&u->ring);
}

static px_result *px_uring_next_completed(px_wait *w)
{
	px_uring *u = px_uring_of_wait(w);
	struct io_uring_cqe *cqe;

	u->leader_waiting = false;
	if (u->enter_err) {
		/* The wait's submit was refused: SQEs are still pending. */
		u->enter_err = 0;
		u->submit_stuck = true;
	}
	while (io_uring_peek_cqe(&u->ring, &cqe) == 0 && cqe) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&u->ring, cqe);
		px_result *r = px__uring_complete(u, ud, res);
		if (r)
			return r;
	}
	return NULL;
}

const px_wait_ops px__wait_uring_ops = {
	.name = "uring",
	.destroy = px_uring_wait_destroy,          /* nothing: lives in the provider */
	.on_start = NULL,                          /* the SQE says it all */
	.prepare = px_uring_prepare,               /* submit pending SQEs in one enter */
	.wait = px_uring_wait,                     /* wait for CQEs only, never submit */
	.next_completed = px_uring_next_completed, /* reap one CQE -> result */
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
	struct io_uring_sqe *sqe;

	if (u->intr_queued)
		return;
	if (!u->leader_waiting) {
		u->intr_deferred = true;
		return;
	}
	sqe = px__uring_get_sqe(u, 0);
	if (!sqe) {
		u->intr_deferred = true;
		return;
	}
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, PX_URING_TAG_NOP);
	u->intr_queued = true;
	px__uring_kick(u);
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
