/*
 * core.h - the proactor's own parts: allocator, processor, dispatcher.
 *
 * The proactor mutex (px_proactor.lock) guards every field below unless a
 * comment says otherwise.  It is released at three places only: while a
 * callback runs, while a follower sleeps, and while a leader waits in the
 * operating system.
 */
#ifndef PX_CORE_H
#define PX_CORE_H

#include "internal.h"

/* ------------------------------------------------------------------ */
/* Allocator: a per-proactor free list of results, grown in chunks.     */
/* ------------------------------------------------------------------ */

typedef struct px_allocator {
	px_result *free;      /* singly linked through link.next */
	size_t size;          /* bytes per result, header + private space */
	size_t nfree, ntotal;
	size_t next_chunk;    /* results in the next chunk */
	void **chunks;
	size_t nchunks, cap;
} px_allocator;

/* Set up an allocator for results with priv_size private bytes. */
void px__alloc_init(px_allocator *a, size_t priv_size) PX_HIDDEN;
/* A zeroed result in state INITIALIZED, or NULL when out of memory. */
px_result *px__alloc_get(px_allocator *a) PX_HIDDEN;
/* Give a result back. */
void px__alloc_put(px_allocator *a, px_result *r) PX_HIDDEN;
/* Free every chunk (results still out are freed with them). */
void px__alloc_fini(px_allocator *a) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Processor                                                            */
/* ------------------------------------------------------------------ */

typedef struct px_processor {
	struct px_proactor *px;
	px_provider *prov;
	px_wait *wait;
	px_intr *intr;
	px_list started;
	px_list deferred;
	px_list starting;          /* in the provider's start, which may
	                              release the mutex (see processor.c) */
	px_processor_type type;
	unsigned flags;            /* PX_PF_START_* actually in force */
	unsigned max_aio;
	uint32_t ops;              /* operations routed here */
	bool has_leader;
	pthread_t leader;          /* valid while has_leader */
	bool stop;                 /* dedicated: leave the loop */
	bool thread_running;       /* dedicated: thread was created */
	pthread_t thread;
	int index;                 /* 0 primary, 1 secondary */
} px_processor;

/* Notification levels for px__dispatch_post. */
enum {
	PX_NOTIFY_NONE = 0,     /* queue only */
	PX_NOTIFY_FOLLOWER,     /* and wake a follower if there is one */
	PX_NOTIFY_STRONG        /* or else interrupt a shared leader */
};

/* Build processor index (0 primary, 1 secondary) from a resolved config.
 * An auto config (provider "") becomes the engine chosen, written back to
 * cfg. */
int px__processor_create(struct px_proactor *px, int index,
			px_processor_config *cfg, px_processor **out,
			char *err, size_t errlen) PX_HIDDEN;
void px__processor_destroy(px_processor *p) PX_HIDDEN;
int px__processor_start(px_processor *p, px_result *r) PX_HIDDEN;
int px__processor_cancel_fd(px_processor *p, int fd) PX_HIDDEN;
void px__processor_cancel_all(px_processor *p) PX_HIDDEN;
/* Leader: start deferred, wait up to timeout_ms, move what finished to the
 * dispatcher's queue.  Mutex held on entry and exit. */
void px__processor_handle_aio_events(px_processor *p, int timeout_ms) PX_HIDDEN;
void px__processor_lead_begin(px_processor *p) PX_HIDDEN;
void px__processor_lead_end(px_processor *p) PX_HIDDEN;
bool px__processor_has_work(const px_processor *p) PX_HIDDEN;
int px__processor_run_dedicated(px_processor *p) PX_HIDDEN;
void px__processor_stop_dedicated(px_processor *p) PX_HIDDEN;
/* Interrupt p's leader unless it is the calling thread. */
void px__processor_interrupt(px_processor *p) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Dispatcher                                                           */
/* ------------------------------------------------------------------ */

typedef struct px_follower {
	px_link link;
	pthread_cond_t cond;
	bool woken;
} px_follower;

struct px_proactor {
	pthread_mutex_t lock;
	px_allocator alloc;
	px_list completed;         /* READY, START_ERROR, POSTED results */
	px_list timers;            /* TIMER results sorted by deadline */
	int64_t next_timer_id;
	px_list followers;         /* sleeping threads; the newest at the back */
	unsigned nthreads;         /* inside px_handle_events */
	unsigned nfollowers, nleaders, nhandlers;
	px_follower_order order;
	px_processor *proc[2];
	int nproc;
	unsigned next_pick;        /* rotates which processor is led first */
	uint64_t cb_ns;            /* running average time of one callback */
	bool stopped;              /* px_stop was called */
	bool destroying;
	px_config cfg;             /* as resolved */
	char engine[512];
};

/* Queue r for dispatch and notify at the given level. */
void px__dispatch_post(struct px_proactor *px, px_result *r, int level) PX_HIDDEN;
/* Wake one sleeping follower.  Returns true if there was one. */
bool px__dispatch_wake_follower(struct px_proactor *px) PX_HIDDEN;
/* Wake every follower and interrupt every shared leader. */
void px__dispatch_wake_all(struct px_proactor *px) PX_HIDDEN;
int px__dispatch_handle_events(struct px_proactor *px, int timeout_ms) PX_HIDDEN;
/* Run the callback of a queued result and free it; mutex held on entry and
 * exit, released around the callback. */
void px__dispatch_one(struct px_proactor *px, px_result *r) PX_HIDDEN;
/* PX_NOTIFY_FOLLOWER when the calling thread is running one of px's
 * callbacks (it will come back to the queue), else PX_NOTIFY_STRONG. */
int px__dispatch_level_for_caller(struct px_proactor *px) PX_HIDDEN;
/* Timers. */
void px__timers_insert(struct px_proactor *px, px_result *r) PX_HIDDEN;
bool px__timers_expire(struct px_proactor *px, uint64_t now) PX_HIDDEN;
uint64_t px__timers_next(const struct px_proactor *px) PX_HIDDEN;

#define PX_NS_INF UINT64_MAX

/* Milliseconds from now until deadline_ns, rounded up, for a wait call;
 * -1 when the deadline is infinite. */
int px__ms_until(uint64_t deadline_ns, uint64_t now) PX_HIDDEN;

#endif /* PX_CORE_H */
