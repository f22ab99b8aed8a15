/*
 * select.h - between the two halves of the readiness provider, split
 * along its lock boundary:
 *
 *   providers/select.c     under the proactor mutex: the per-descriptor
 *                          queues, claims, start, cancel, and the wait the
 *                          processor sees (over a poller, poller.h)
 *   providers/select_io.c  without the mutex: one attempt at one operation,
 *                          the system calls themselves
 *
 * The unlocked half works on a claimed result and on a private copy of
 * what is known about its descriptor (px_sel_io), never on shared state:
 * see the opening comment of select.c for the claim rules.
 */
#ifndef PX_PROVIDERS_SELECT_H
#define PX_PROVIDERS_SELECT_H

#include "internal.h"

/* The provider itself (providers/select.c), for its class. */
extern const px_provider_ops px__provider_select_ops PX_HIDDEN;

/* What a descriptor is, learnt on first use; later kinds only refine
 * earlier ones. */
enum {
	PX_SEL_KIND_UNKNOWN = 0,
	PX_SEL_KIND_SOCKET,
	PX_SEL_KIND_FILE,      /* regular file or block device: always ready */
	PX_SEL_KIND_NOWAIT,    /* RWF_NOWAIT keeps it from blocking */
	PX_SEL_KIND_NONBLOCK,  /* O_NONBLOCK: plain read/write */
	PX_SEL_KIND_BLOCKING,  /* blocking and no RWF_NOWAIT: poll(0) first */
};

/* px_sel_io.flags */
#define PX_SEL_NONBLOCK_OK 0x1u /* accept: listener known to be O_NONBLOCK */

/* Outcome of one attempt at a queue head. */
enum {
	PX_SEL_AGAIN = 0,      /* not ready: stays at the head */
	PX_SEL_DONE,           /* finished (outputs set); go on with the next */
	PX_SEL_DONE_STOP,      /* finished, and the descriptor looks drained */
};

/* Progress of a connect (px_sel_priv.conn). */
enum { PX_SEL_CONN_NEW = 0, PX_SEL_CONN_PENDING };

/* What the I/O on one descriptor needs to know and may learn.  A thread
 * about to work without the mutex takes a copy from the descriptor's
 * entry, and writes back what it learnt after retaking it, so that two
 * threads on the two directions of one descriptor share nothing. */
typedef struct px_sel_io {
	int fd;
	uint8_t kind;      /* PX_SEL_KIND_* */
	uint8_t flags;     /* PX_SEL_NONBLOCK_OK */
} px_sel_io;

/* Per result private space.  busy, cnext and res belong to the thread
 * that claimed the result; cancel is set under the mutex by anyone; the
 * unlocked half reads write_all and keeps conn. */
struct px_sel_priv {
	uint8_t at;        /* where it is (select.c) */
	uint8_t dir;       /* queue it is on, while queued */
	uint8_t conn;      /* PX_SEL_CONN_* */
	uint8_t write_all; /* PX_RF_WRITE_ALL, copied at start so the
	                      unlocked half reads only provider state */
	uint8_t busy;      /* claimed: a thread works on it without the mutex */
	uint8_t cancel;    /* a cancel came while busy */
	uint8_t res;       /* batch: untried (0) or the attempt's PX_SEL_* + 1 */
	px_result *cnext;  /* batch: next claimed result of the same queue */
};

static inline struct px_sel_priv *px_sel_priv(px_result *r)
{
	return px_result_priv(r);
}

/* One non-blocking attempt at r (a queued operation) on io's descriptor.
 * Mutex not needed: touches only r's outputs, r's private conn, and io.
 * Returns PX_SEL_*. */
int px__sel_try(px_sel_io *io, px_result *r) PX_HIDDEN;

/* read_file / write_file: one pread or pwrite at r's offset; outputs set. */
void px__sel_file_io(px_result *r) PX_HIDDEN;

#endif /* PX_PROVIDERS_SELECT_H */
