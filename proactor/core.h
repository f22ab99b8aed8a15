/*
 * core.h - the proactor's own parts: allocator, processor, dispatcher.
 *
 * The proactor mutex (px_proactor.lock) guards every field below unless a
 * comment says otherwise.  Where it is released is listed in
 * docs/ARCHITECTURE.md ("The mutex").
 */
#ifndef PX_CORE_H
#define PX_CORE_H

#include "internal.h"

/* ------------------------------------------------------------------ */
/* Allocator: a per-proactor free list of results, grown in chunks.     */
/* ------------------------------------------------------------------ */

/* Free results are kept in a few lists, one per group of threads
 * (allocator.c), each head on a cache line of its own. */
#define PX_ALLOC_SLOTS 4
typedef struct px_alloc_slot {
	px_result *free;      /* singly linked through link.next */
	char pad[PX_CACHE_LINE - sizeof(px_result *)];
} px_alloc_slot;

typedef struct px_allocator {
	px_alloc_slot slot[PX_ALLOC_SLOTS];
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

/* What handing work to another thread is taken to cost: the dispatcher
 * asks for help with callbacks, and a leader lets a wait's claimed calls
 * go, only when the work given away would take at least this long at its
 * measured average (px_proactor.cb_ns, px_processor.claim_ns;
 * dispatcher.c says how).  test_epoll_edge reads it too. */
#define PX_HANDOFF_NS 50000u

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
	uint32_t vec_ops;          /* of those, the ones it does vectored */
	bool has_leader;           /* nleading > 0 */
	unsigned nleading;         /* threads leading it now */
	unsigned max_leaders;      /* at most this many (the provider's, >= 1) */
	bool stop;                 /* dedicated: leave the loop */
	bool thread_running;       /* dedicated: thread was created */
	pthread_t thread;
	int index;                 /* 0 primary, 1 secondary */
	/* The idle check (px__processor_handle_aio_events): */
	uint64_t quiet_start;      /* first wait of the current run of waits
	                              that collected nothing; 0: not quiet */
	uint64_t quiet_since;      /* the later of quiet_start and the last
	                              check; 0: not quiet */
	uint64_t check_gap;        /* quiet time before the next check */
	uint64_t last_check;       /* when the last check ran */
	bool starve_warned;        /* the max_aio warning was printed */
	uint64_t claim_ns;         /* running average time of the work one
	                              claimed descriptor gave its leader
	                              (px__processor_handle_aio_events);
	                              0: not measured yet */
	uint64_t led_ns;           /* shared: when a lead of it last ended
	                              (px__dispatch_handle_events); 0: not
	                              yet seen with work */
	bool ready_offered;        /* its wait's ready_fd gave a descriptor
	                              once, so it will again (disp_lone_lead);
	                              cleared at each idle check, which may
	                              have forgotten it (proc_check) */
	bool collected;            /* its latest collection found results
	                              (disp_lone_lead) */
	uint64_t wait_end;         /* shared: the latest end of its leaders'
	                              waits in the kernel (CLOCK_MONOTONIC ns,
	                              UINT64_MAX: none); 0 when no leader
	                              waits, or those that wait were
	                              interrupted for a result queued
	                              meanwhile (dispatcher.c,
	                              disp_interrupt_shared_leader) */
	unsigned nwaiting;         /* shared: its leaders in that wait now
	                              (several with io_uring's rings) */
	px_proc_stats st;          /* counters (px_stats; in_flight unused) */
	unsigned nfirst;           /* results inside their first start
	                              (px__processor_start), counted in
	                              st.started already but taken back if
	                              that start fails: px_stats leaves them
	                              out, so started never goes down */
} px_processor;

/* Notification levels for px__dispatch_post. */
enum {
	PX_NOTIFY_NONE = 0,     /* queue only */
	PX_NOTIFY_FOLLOWER,     /* and wake a follower if there is one */
	PX_NOTIFY_STRONG,       /* or else interrupt a shared leader */
	PX_NOTIFY_CALLER        /* the calling thread, running a callback,
	                           runs it next: wake nobody, but with no
	                           follower asleep interrupt a shared leader
	                           whose wait lasts long, at most once per
	                           20 ms (disp_insure in dispatcher.c) */
};

/* Build processor index (0 primary, 1 secondary) from a resolved config.
 * An auto config (provider "") becomes the engine chosen, written back to
 * cfg. */
int px__processor_create(struct px_proactor *px, int index,
			px_processor_config *cfg, px_processor **out,
			char *err, size_t errlen) PX_HIDDEN;
void px__processor_destroy(px_processor *p) PX_HIDDEN;
int px__processor_start(px_processor *p, px_result *r) PX_HIDDEN;
/* r failed before its provider saw it (err): its completion, as for a
 * start that finished at once. */
void px__processor_fail_start(px_processor *p, px_result *r, int err) PX_HIDDEN;
void px__processor_cancel_all(px_processor *p) PX_HIDDEN;
/* Cancel one operation of p if it is deferred, starting or started
 * (px_cancel, px_close, a timeout); nothing when it has finished already.
 * Returns 1 if it was cancelled (or marked, inside its start), else 0. */
int px__processor_cancel_result(px_processor *p, px_result *r) PX_HIDDEN;
/* After one or more px__processor_cancel_result calls on p that returned 1:
 * interrupt p's leader so that it stops watching for them, or starts the
 * deferred operations the cancels made room for under max_aio. */
void px__processor_cancelled(px_processor *p) PX_HIDDEN;
/* Leader: start deferred, wait up to timeout_ms, move what finished to the
 * dispatcher's queue.  Mutex held on entry and exit.  now is the caller's
 * recent px__now_ns() (it starts the wait time of px_stats); returns the
 * clock read after the wait, for the caller to go on with (a clock read
 * costs about as much as a lock round trip here).
 * release_min: 0, or how many descriptors must have work that the calling
 * thread can do without leading (px_wait_ops.claim) for this call to stop
 * there and set *claimed, should another thread be in px_handle_events
 * when the wait ends (px->nthreads, read then).  Then nothing was
 * collected yet: the caller ends its lead (another thread may lead
 * meanwhile) and calls px__processor_collect_claimed(p, the returned
 * clock), which does that work, collects and ends what this call began.
 * When the call collects a claim itself, with release_min not 0, another
 * thread there and no thread running callbacks before or after, it
 * folds the time per claimed descriptor into p->claim_ns, from which the
 * caller sets release_min. */
uint64_t px__processor_handle_aio_events(px_processor *p, int timeout_ms,
					 uint64_t now, size_t release_min,
					 bool *claimed) PX_HIDDEN;
void px__processor_collect_claimed(px_processor *p, uint64_t end) PX_HIDDEN;
/* After a lead that ended with claimed calls: put about half of them up for
 * another thread (px_wait_ops.share); returns how many descriptors moved. */
size_t px__processor_share_claimed(px_processor *p) PX_HIDDEN;
/* Whether calls another thread shared wait to be made; any thread may then
 * make them with px__processor_collect_claimed. */
bool px__processor_has_shared(const px_processor *p) PX_HIDDEN;
/* The wait's part of the idle check (px_wait_ops.check): are its own
 * descriptors still its own?  Leader (px__processor_lead_begin), mutex
 * held; also made by px_destroy before its leads. */
void px__processor_check_wait(px_processor *p) PX_HIDDEN;
void px__processor_lead_begin(px_processor *p) PX_HIDDEN;
void px__processor_lead_end(px_processor *p) PX_HIDDEN;
bool px__processor_has_work(const px_processor *p) PX_HIDDEN;
/* A shared processor the calling thread may lead now: it has work and no
 * leader, or (several leaders allowed) a part of it needs one.  patient:
 * a thread running callbacks will come back to lead its own part, so the
 * caller takes only its own (see px_wait.others_busy). */
bool px__processor_may_lead(px_processor *p, bool patient) PX_HIDDEN;
/* Another thread than the caller leads p. */
bool px__processor_led_by_other(const px_processor *p) PX_HIDDEN;
int px__processor_run_dedicated(px_processor *p) PX_HIDDEN;
void px__processor_stop_dedicated(px_processor *p) PX_HIDDEN;
/* Whether a start of p is inside the provider with the mutex released
 * (its starting list): px_destroy waits for it.  Mutex held. */
bool px__processor_starts_under_way(const px_processor *p) PX_HIDDEN;
/* Interrupt p's leader unless it is the calling thread. */
void px__processor_interrupt(px_processor *p) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Dispatcher                                                           */
/* ------------------------------------------------------------------ */

typedef struct px_follower {
	px_link link;
	pthread_cond_t cond;
	bool woken;
	uint64_t until;            /* when it wakes by itself (PX_NS_INF: never) */
	uint64_t deadline;         /* when its px_handle_events call ends */
	bool timer_duty;           /* px__dispatch_timer_moved counted on it */
} px_follower;

/* What the core keeps per descriptor number (px_proactor.byfd). */
typedef struct px_fdops {
	/* Operations started on it whose callback has not returned yet
	 * (px_result.flink), wherever they are: deferred, in the kernel,
	 * queued or running.  px_close counts them, and it and px_cancel
	 * cancel them, without walking every pending operation. */
	px_list ops;
	px_result *closing;        /* its px_close, waiting for them, or NULL */
	/* px_closes that have closed the number and whose callback has not
	 * returned yet: the library's new descriptors keep off it until
	 * then (px__fd_keep_off_ops). */
	unsigned closed_uncalled;
} px_fdops;

struct px_proactor {
	pthread_mutex_t lock;
	pthread_cond_t call_cv;    /* px_cancel waits here for a cancelled
	                              operation's system call to return
	                              (px_result.in_call, call_waiter) */
	px_allocator alloc;
	px_list completed;         /* READY, START_ERROR, POSTED results */
	/* Timers (timer.c): TIMER results in a binary min-heap by deadline,
	 * and the user timers by id. */
	px_result **theap;
	size_t ntheap, theap_cap;
	size_t ntimer_recs;        /* live timer records: room reserved in
	                              theap for each */
	px_result **tids;          /* open addressing, keyed by timer id */
	size_t tids_cap, ntids;
	px_list closing;           /* px_close results (CLOSING) waiting for
	                              their descriptor's operations */
	/* Per descriptor number (px_fdops): the operations started on it
	 * whose callback has not returned yet, and its px_close if one
	 * waits.  A table of entries made on first use, grown only for a
	 * number that is open (so a huge bad number costs nothing); freed
	 * with the proactor. */
	struct px_fdops **byfd;
	size_t nbyfd;
	int64_t next_timer_id;
	bool has_idle_waits;       /* a shared processor's wait has an idle
	                              op (disp_idle_waits); set at create */
	px_list followers;         /* sleeping threads; the newest at the back */
	px_list owns;              /* threads' own completions, those not
	                              empty (px_own, dispatcher.c) */
	unsigned nthreads;         /* inside px_handle_events */
	unsigned ncloses_in_call;  /* px_close's close(2) under way, mutex
	                              released (fac_close_now); px_destroy
	                              waits for them on call_cv */
	const void *left_by;       /* the thread that last left it, and when
	                              (px__dispatch_others_here) */
	uint64_t left_ns;
	unsigned nfollowers, nleaders, nhandlers;
	unsigned nfollowers_long;  /* of them, asleep with no bound of at most
	                              PX_FOLLOWER_CHECK_NS (dispatcher.c) */
	uint64_t insured_ns;       /* when a thread running callbacks last
	                              interrupted a leader in case they
	                              block (disp_insure, dispatcher.c) */
	px_follower_order order;
	px_processor *proc[2];
	int nproc;
	unsigned next_pick;        /* rotates which processor is led first */
	uint64_t cb_ns;            /* running average time of one callback */
	bool stopped;              /* px_stop was called */
	bool destroying;
	unsigned fork_token;       /* the creating process's token (a
	                              child of it has another; proactor.c) */
	struct {                   /* px_stats: the proactor's own counters */
		uint64_t posts, timer_callbacks, callbacks;
		uint64_t follower_wakeups, follower_sleep_ns, dispatch_ns;
	} st;
	px_config cfg;             /* as resolved */
	char engine[512];
};

/* px_close bookkeeping (proactor.c): a completion on fd was delivered
 * (its callback returned), or a start it counted failed without one
 * (fac_start); a px_close waiting for it may now close. */
void px__close_delivered(struct px_proactor *px, int fd) PX_HIDDEN;
/* An operation's callback has returned: it leaves its descriptor's list
 * (px_proactor.byfd).  Mutex held. */
void px__ops_delivered(struct px_proactor *px, px_result *r) PX_HIDDEN;

/* Queue r for dispatch and notify at the given level. */
void px__dispatch_post(struct px_proactor *px, px_result *r, int level) PX_HIDDEN;
/* A leader of a processor with several leaders queues r for itself: the
 * calling thread runs it next, unless another thread with nothing to do
 * takes it (see dispatcher.c).  Elsewhere the same as
 * px__dispatch_post(px, r, PX_NOTIFY_NONE). */
void px__dispatch_post_own(struct px_proactor *px, px_result *r) PX_HIDDEN;
/* Call fn for every completion held on a thread's own list (px_stats
 * counts them with the shared queue). */
void px__dispatch_visit_own(struct px_proactor *px,
			    void (*fn)(px_result *r, void *arg), void *arg) PX_HIDDEN;
/* Completions wait that the calling thread should run before it sleeps:
 * in the shared queue or its own. */
bool px__dispatch_has_queued(const struct px_proactor *px) PX_HIDDEN;
/* Other threads run the loop (in px_handle_events now, or left it a
 * moment ago). */
bool px__dispatch_others_here(const struct px_proactor *px) PX_HIDDEN;
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
void px__dispatch_needs_leader(struct px_proactor *px) PX_HIDDEN;
int px__dispatch_level_for_done(struct px_proactor *px) PX_HIDDEN;
/* A timer is now the earliest, due at when: see that a thread in
 * px_handle_events looks at it in time (dispatcher.c). */
void px__dispatch_timer_moved(struct px_proactor *px, uint64_t when) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Timers (timer.c)                                                     */
/* ------------------------------------------------------------------ */

/* Put r (deadline_ns set, room reserved) into the heap; a new earliest
 * deadline wakes a follower or interrupts a leader. */
void px__timers_insert(struct px_proactor *px, px_result *r) PX_HIDDEN;
/* Move every timer due at now to the completed queue (timeouts cancel
 * their operation instead).  True if anything was queued. */
bool px__timers_expire(struct px_proactor *px, uint64_t now) PX_HIDDEN;
/* The earliest deadline, or PX_NS_INF. */
uint64_t px__timers_next(const struct px_proactor *px) PX_HIDDEN;
/* A user timer: one-shot (period_ns 0) or periodic.  The id, or -errno. */
int64_t px__timer_start(struct px_proactor *px, uint64_t delay_ns,
			uint64_t period_ns, px_callback *cb, void *user) PX_HIDDEN;
int px__timer_cancel(struct px_proactor *px, int64_t id) PX_HIDDEN;
/* After a timer's callback: true if the timer lives on (a periodic one,
 * back in the heap, or its final callback queued) and r must not be
 * freed. */
bool px__timer_after_callback(struct px_proactor *px, px_result *r) PX_HIDDEN;
/* Give op a deadline timeout_ns from now.  0 or -ENOMEM. */
int px__timeout_attach(struct px_proactor *px, px_result *op,
		       uint64_t timeout_ns) PX_HIDDEN;
/* op is about to be delivered (or was never started): free its timer; an
 * op cancelled because its deadline passed reports ETIMEDOUT. */
void px__timeout_detach(struct px_proactor *px, px_result *op) PX_HIDDEN;
/* Destroy: every user timer in the heap completes with ECANCELED. */
void px__timers_cancel_all(struct px_proactor *px) PX_HIDDEN;
void px__timers_fini(struct px_proactor *px) PX_HIDDEN;

#define PX_NS_INF UINT64_MAX

/* Milliseconds from now until deadline_ns, rounded up, for a wait call;
 * -1 when the deadline is infinite. */
int px__ms_until(uint64_t deadline_ns, uint64_t now) PX_HIDDEN;

#endif /* PX_CORE_H */
