/*
 * select.h - the readiness provider's private space of a result.  The
 * provider is split along its lock boundary:
 *
 *   providers/select.c  under the proactor mutex: the per-descriptor
 *                       queues, claims, start, cancel, and the wait the
 *                       processor sees (over a poller, poller.h)
 *   providers/nbio.c    without the mutex: one attempt at one operation,
 *                       the system calls themselves (shared with the
 *                       Linux AIO provider)
 *
 * The unlocked half works on a claimed result and on a private copy of
 * what is known about its descriptor (px_nbio), never on shared state:
 * see the opening comment of select.c for the claim rules.
 */
#ifndef PX_PROVIDERS_SELECT_H
#define PX_PROVIDERS_SELECT_H

#include "internal.h"
#include "nbio.h"

/* The provider itself (providers/select.c), for its class. */
extern const px_provider_ops px__provider_select_ops PX_HIDDEN;

/* Per result private space.  busy, cnext and res belong to the thread
 * that claimed the result; cancel is set under the mutex by anyone; the
 * unlocked calls keep conn. */
struct px_sel_priv {
	uint8_t at;        /* where it is (select.c) */
	uint8_t dir;       /* queue it is on, while queued */
	uint8_t conn;      /* PX_NBIO_CONN_* */
	uint8_t busy;      /* claimed: a thread works on it without the mutex */
	uint8_t cancel;    /* a cancel came while busy */
	uint8_t res;       /* batch: untried (0) or the attempt's PX_NBIO_* + 1 */
	px_result *cnext;  /* batch: next claimed result of the same queue */
};

static inline struct px_sel_priv *px_sel_priv(px_result *r)
{
	return px_result_priv(r);
}

#endif /* PX_PROVIDERS_SELECT_H */
