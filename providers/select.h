/*
 * select.h - between the readiness provider (providers/select.c) and its
 * wait strategies (wait_strategies/select.c, poll.c, epoll.c).
 *
 * The provider owns a table of per-descriptor entries, each with two FIFO
 * queues of pending operations (read and write direction), the list of
 * entries that have something pending ("active"), and a list of finished
 * results waiting to be handed out by next_completed.  A wait strategy
 * learns which descriptors are ready, claims their queue heads with
 * px_sel_claim(), has them run with px_sel_run() (which does the system
 * calls with the proactor mutex released), and pops finished results with
 * px_sel_pop_done().  Everything here is called with the mutex held; a
 * strategy's wait() must touch none of it.  See providers/select.c for who
 * may touch what while the mutex is released.
 */
#ifndef PX_PROVIDERS_SELECT_H
#define PX_PROVIDERS_SELECT_H

#include <time.h>

#include "internal.h"

/* Readiness as a wait strategy reports it to the provider. */
#define PX_SEL_IN   0x1u /* readable: data, end of stream, a connection */
#define PX_SEL_OUT  0x2u /* writable, or a connect has finished */
#define PX_SEL_ERR  0x4u /* error or hang-up: try both directions */
#define PX_SEL_NVAL 0x8u /* poll says the descriptor is not open */

/* Queue index of each direction. */
#define PX_SEL_RD 0
#define PX_SEL_WR 1

typedef struct px_sel px_sel;
typedef struct px_sel_wait px_sel_wait;

/* What the I/O on one descriptor needs to know and may learn (the
 * provider's kind and flags of an entry).  A thread about to work without
 * the mutex takes a copy, and writes back what it learnt after retaking it,
 * so that two threads on the two directions of one descriptor share
 * nothing. */
typedef struct px_sel_io {
	int fd;
	uint8_t kind;
	uint8_t flags;
} px_sel_io;

/* One descriptor number.  Allocated the first time the number is used and
 * kept until the provider is destroyed, so the address is stable. */
typedef struct px_sel_fd {
	px_list q[2];      /* pending results (through plink), oldest first */
	px_link alink;     /* on the provider's active list while q[] has any */
	int fd;
	unsigned armed;    /* epoll: PX_SEL_IN / PX_SEL_OUT armed in the kernel;
	                      the provider clears it when the entry goes idle,
	                      so the next use re-arms (the number may have been
	                      closed and reused meanwhile) */
	uint8_t kind;      /* provider: what the descriptor is, known while
	                      active (forgotten when idle: the number may be
	                      closed and reused) */
	uint8_t flags;     /* provider private */
	uint8_t rd_miss;   /* provider: recent reads tried at start that found
	                      nothing; a hint only, kept while idle */
	uint8_t rd_skip;   /* provider: starts since the last such try */
	uint8_t busy;      /* provider: PX_SEL_IN / PX_SEL_OUT whose queue head
	                      is claimed by a thread working without the mutex */
	/* Leader only (provider's batch; used while the mutex is released,
	 * so nobody else may touch these): */
	uint8_t in_batch;  /* on the batch list */
	struct px_sel_fd *bnext;
	struct px_result *chain[2]; /* claimed results per direction */
	px_sel_io bio;     /* the leader's private copy for its I/O */
} px_sel_fd;

/* The directions with something queued (claimed or not). */
static inline unsigned px_sel_fd_queued(const px_sel_fd *e)
{
	return (px_list_empty(&e->q[PX_SEL_RD]) ? 0 : PX_SEL_IN) |
	       (px_list_empty(&e->q[PX_SEL_WR]) ? 0 : PX_SEL_OUT);
}

/* The readiness to arm for (epoll): queued directions whose head nobody is
 * working on.  A claimed direction is armed when its claim ends. */
static inline unsigned px_sel_fd_want(const px_sel_fd *e)
{
	return px_sel_fd_queued(e) & ~(unsigned)e->busy;
}

static inline px_sel_fd *px_sel_fd_of(px_link *l)
{
	return px_container_of(l, px_sel_fd, alink);
}

/*
 * A readiness wait strategy: the generic wait slots plus what the provider
 * needs from it.  Each wait_strategies/ file exports exactly one.
 */
typedef struct px_sel_wait_class {
	px_wait_ops wait;   /* the processor's view (wait.name is the name) */
	/* Build the strategy with the interrupt cfg names.  Returns 0 or
	 * -errno. */
	int (*create)(px_sel *sel, const px_processor_config *cfg,
		      px_sel_wait **out);
	/* e now needs want (non-zero) readiness, from start or after an event
	 * was handled.  Any thread, mutex held.  NULL: prepare() rebuilds the
	 * interest set anyway.  Returns 0 or -errno. */
	int (*arm)(px_sel_wait *w, px_sel_fd *e, unsigned want);
	/* nactive entries are about to be active: make sure the next prepare
	 * can watch them without allocating.  Any thread, mutex held, possibly
	 * while the leader sits in wait().  NULL: nothing to reserve. */
	int (*reserve)(px_sel_wait *w, size_t nactive);
	int fd_limit;       /* descriptors >= this cannot be watched (-EMFILE) */
	unsigned pf_flags;  /* PX_PF_START_* the provider advertises */
} px_sel_wait_class;

struct px_sel_wait {
	px_wait base;                 /* base.ops == &cls->wait */
	const px_sel_wait_class *cls;
	px_sel *sel;                  /* the provider that owns this wait */
};

/* The provider itself (providers/select.c), for its class. */
extern const px_provider_ops px_provider_select_ops PX_HIDDEN;

extern const px_sel_wait_class px_sel_wait_select PX_HIDDEN;
extern const px_sel_wait_class px_sel_wait_poll PX_HIDDEN;
extern const px_sel_wait_class px_sel_wait_epoll PX_HIDDEN;

/* What the provider offers its wait strategies (mutex held for all). */

/* The entry for fd, or NULL if fd was never used. */
px_sel_fd *px_sel_lookup(px_sel *sel, int fd) PX_HIDDEN;
/* The active entries (linked through alink). */
px_list *px_sel_active(px_sel *sel) PX_HIDDEN;
/* fd reported ev (PX_SEL_*) in the last wait: claim the ready queue heads
 * of e (at most once per wait) for the next px_sel_run.  Leader only. */
void px_sel_claim(px_sel *sel, px_sel_fd *e, unsigned ev) PX_HIDDEN;
/* Perform the I/O of everything claimed since the last run, with the mutex
 * released around the system calls when unlock is true (re-taken before
 * returning), then move what finished to the done list and re-arm what
 * still waits.  Leader only. */
void px_sel_run(px_sel *sel, bool unlock) PX_HIDDEN;
/* select() said EBADF: fail the operations of every active descriptor
 * that is no longer open. */
void px_sel_check_closed(px_sel *sel) PX_HIDDEN;
/* The oldest finished result, forgotten by the provider; or NULL. */
px_result *px_sel_pop_done(px_sel *sel) PX_HIDDEN;
/* True when finished results are waiting for next_completed. */
bool px_sel_has_done(const px_sel *sel) PX_HIDDEN;

/* A relative timeout in milliseconds (< 0: none) as a timespec; returns
 * NULL for "no limit". */
static inline struct timespec *px_sel_timeout(int ms, struct timespec *ts)
{
	if (ms < 0)
		return NULL;
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long)(ms % 1000) * 1000000L;
	return ts;
}

#endif /* PX_PROVIDERS_SELECT_H */
