/*
 * internal.h - the contracts between the parts of the library.
 *
 *   result    one record per operation (inputs to start, outputs to dispatch)
 *   list      the typed intrusive list results travel on
 *   provider  "device driver": start / cancel one operation
 *   wait      how the leader waits and learns what completed
 *   intr      how another thread gets the leader out of its wait
 *
 * Locking: one mutex per proactor.  Unless a slot says otherwise, every
 * function below is called with that mutex held.  The only slot called
 * without it is px_wait_ops.wait (the leader's wait in the OS).  A provider
 * given the mutex (px_provider.lock) may also release it inside its start
 * and its wait's next_completed, around a system call, and retakes it
 * before returning (the readiness provider does: see providers/select.c).
 *
 * Nothing here is exported from the shared library.
 */
#ifndef PX_INTERNAL_H
#define PX_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proactor.h"

#define PX_HIDDEN __attribute__((visibility("hidden")))

#define px_container_of(ptr, type, member)                                     \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ------------------------------------------------------------------ */
/* Intrusive doubly linked list                                         */
/* ------------------------------------------------------------------ */

typedef struct px_link {
	struct px_link *next, *prev;
} px_link;

/* A list with a sentinel and a count.  A link not in any list has both
 * pointers NULL (px_link_init / after px_list_remove), so membership can be
 * checked, and a double removal or double insertion trips an assertion in
 * debug builds. */
typedef struct px_list {
	px_link head;
	size_t count;
} px_list;

static inline void px_link_init(px_link *l) { l->next = l->prev = NULL; }
static inline bool px_link_linked(const px_link *l) { return l->next != NULL; }

static inline void px_list_init(px_list *list)
{
	list->head.next = list->head.prev = &list->head;
	list->count = 0;
}

static inline bool px_list_empty(const px_list *list) { return list->count == 0; }
static inline size_t px_list_count(const px_list *list) { return list->count; }

#ifndef NDEBUG
void px_list_check_insert(const px_link *l) PX_HIDDEN;
void px_list_check_remove(const px_list *list, const px_link *l) PX_HIDDEN;
#else
static inline void px_list_check_insert(const px_link *l) { (void)l; }
static inline void px_list_check_remove(const px_list *list, const px_link *l)
{
	(void)list;
	(void)l;
}
#endif

static inline void px_list_insert_after(px_list *list, px_link *pos, px_link *l)
{
	px_list_check_insert(l);
	l->prev = pos;
	l->next = pos->next;
	pos->next->prev = l;
	pos->next = l;
	list->count++;
}

static inline void px_list_push_back(px_list *list, px_link *l)
{
	px_list_insert_after(list, list->head.prev, l);
}

static inline void px_list_push_front(px_list *list, px_link *l)
{
	px_list_insert_after(list, &list->head, l);
}

static inline void px_list_remove(px_list *list, px_link *l)
{
	px_list_check_remove(list, l);
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->next = l->prev = NULL;
	list->count--;
}

static inline px_link *px_list_first(const px_list *list)
{
	return list->count ? list->head.next : NULL;
}

static inline px_link *px_list_last(const px_list *list)
{
	return list->count ? list->head.prev : NULL;
}

/* The element after l, or NULL at the end. */
static inline px_link *px_list_next(const px_list *list, const px_link *l)
{
	return l->next == &list->head ? NULL : l->next;
}

static inline px_link *px_list_pop_front(px_list *list)
{
	px_link *l = px_list_first(list);
	if (l)
		px_list_remove(list, l);
	return l;
}

/* Move every element of src to the end of dst, in order; src ends empty. */
static inline void px_list_splice_back(px_list *dst, px_list *src)
{
	if (!src->count)
		return;
	px_link *first = src->head.next, *last = src->head.prev;
	first->prev = dst->head.prev;
	last->next = &dst->head;
	dst->head.prev->next = first;
	dst->head.prev = last;
	dst->count += src->count;
	px_list_init(src);
}

/* ------------------------------------------------------------------ */
/* Result                                                               */
/* ------------------------------------------------------------------ */

typedef enum px_result_state {
	PX_RS_FREE = 0,      /* on the allocator's free list */
	PX_RS_INITIALIZED,   /* filled in, not yet given to a processor */
	PX_RS_STARTED,       /* on a processor's started list */
	PX_RS_DEFERRED,      /* on a processor's deferred list */
	PX_RS_READY,         /* finished; on the dispatcher's completed queue */
	PX_RS_START_ERROR,   /* a deferred start failed; on the completed queue */
	PX_RS_POSTED,        /* posted or timer; on the completed queue */
	PX_RS_COMPLETED,     /* its callback is running */
	PX_RS_TIMER          /* pending timer, on the dispatcher's timer list */
} px_result_state;

/* px_result.flags */
#define PX_RF_WRITE_ALL  0x01u /* write_stream: keep going until len bytes */
#define PX_RF_CANCEL     0x02u /* processor: px_cancel came while the
                                  provider's start ran (mutex released) */

struct px_processor;

typedef struct px_result {
	px_link link;             /* deferred / started / completed / timers:
	                             owned by whoever owns the state */
	px_link plink;            /* for the provider's own queues */
	px_completion c;          /* inputs (op, fd, buf, len, offset, addr)
	                             and outputs (bytes, error, new_fd, addr) */
	px_callback *cb;
	struct px_processor *proc;/* processor it was given to, or NULL */
	uint8_t state;            /* px_result_state */
	uint8_t flags;            /* PX_RF_* */
	size_t done;              /* bytes already moved, for PX_RF_WRITE_ALL;
	                             providers add each partial transfer here
	                             and report the total in c.bytes */
	uint64_t deadline_ns;     /* timers: CLOCK_MONOTONIC deadline */
	/* provider private space follows (px_result_priv) */
} px_result;

static inline px_result *px_result_of(px_link *l)
{
	return px_container_of(l, px_result, link);
}

static inline px_result *px_result_of_plink(px_link *l)
{
	return px_container_of(l, px_result, plink);
}

/* The provider's private space behind the result: priv_size bytes (see
 * px_provider), aligned for any type. */
#define PX_RESULT_HDR (((sizeof(px_result) + 15) / 16) * 16)
static inline void *px_result_priv(px_result *r)
{
	return (char *)r + PX_RESULT_HDR;
}

/* Set the outputs of a finished operation. */
static inline void px_result_finish(px_result *r, size_t bytes, int error)
{
	r->c.bytes = bytes;
	r->c.error = error;
}

/* ------------------------------------------------------------------ */
/* Interrupt strategy (interrupt/)                                      */
/* ------------------------------------------------------------------ */

typedef struct px_intr px_intr;

typedef struct px_intr_ops {
	const char *name;
	/* Free everything.  No leader is active. */
	void (*destroy)(px_intr *in);
	/* Make the leader's current or next wait return soon.  Any thread,
	 * mutex held.  Cheap when called repeatedly before the leader drains. */
	void (*interrupt)(px_intr *in);
	/* The calling thread became the leader and is about to wait (mutex
	 * held).  Optional. */
	void (*leader_activated)(px_intr *in);
	/* The calling thread stops being the leader (mutex held).  Optional. */
	void (*leader_deactivated)(px_intr *in);
	/* Consume the interrupt after the wait saw it: fd readable, or EINTR.
	 * Leader thread, mutex held.  Never reaches the completed queue. */
	void (*drain)(px_intr *in);
} px_intr_ops;

struct px_intr {
	const px_intr_ops *ops;
	int fd;                    /* readable once interrupted; -1 if none */
	const sigset_t *wait_mask; /* signal mask for the wait (ppoll,
	                              epoll_pwait, pselect), or NULL */
};

/* Factory (interrupt/intr.c): build cfg->interrupt, one of PX_INTR_PIPE,
 * PX_INTR_EVENTFD, PX_INTR_SIGNAL.  Returns 0 or -errno (-EINVAL for a type
 * it does not build). */
int px_intr_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
/* The constructors behind it, one per file of interrupt/. */
int px_intr_pipe_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
int px_intr_eventfd_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
int px_intr_signal_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Wait strategy (wait_strategies/)                                     */
/* ------------------------------------------------------------------ */

typedef struct px_wait px_wait;

typedef struct px_wait_ops {
	const char *name;
	void (*destroy)(px_wait *w);
	/* An operation is about to be given to the provider's start.
	 * Optional (NULL). */
	void (*on_start)(px_wait *w, px_result *r);
	/* Leader only, mutex held: last call before wait().  started is the
	 * processor's started list.  Returns 0 or -errno. */
	int (*prepare)(px_wait *w, px_list *started);
	/* Leader only, mutex NOT held: wait up to timeout_ms (< 0: no limit)
	 * for completions or an interrupt.  Returns >= 0, or -errno; -EINTR is
	 * an ordinary wake-up. */
	int (*wait)(px_wait *w, int timeout_ms);
	/* Leader only, mutex held, after wait(): the next finished operation
	 * (outputs set, forgotten by the provider), or NULL when there are no
	 * more.  Drains the interrupt when it fired. */
	px_result *(*next_completed)(px_wait *w);
} px_wait_ops;

struct px_wait {
	const px_wait_ops *ops;
	px_intr *intr;             /* how to interrupt this wait */
};

/* ------------------------------------------------------------------ */
/* Provider (providers/)                                                */
/* ------------------------------------------------------------------ */

typedef struct px_provider px_provider;

/* Return values of px_provider_ops.start (besides -errno). */
#define PX_START_STARTED 0  /* in progress; completion comes from the wait */
#define PX_START_DONE    1  /* finished at once; outputs are set */
#define PX_START_AGAIN   2  /* no room now: defer and try again later */

/* Return values of px_provider_ops.cancel. */
#define PX_CANCEL_DONE    0 /* provider forgot it; outputs set (ECANCELED,
                               bytes so far) */
#define PX_CANCEL_PENDING 1 /* its completion will come from the wait */

typedef struct px_provider_ops {
	const char *name;
	/* Build the provider with its wait and interrupt strategies from cfg
	 * (validated, defaults resolved).  Returns 0, -ENOSYS when this
	 * kernel lacks the mechanism, -EINVAL for a combination it cannot
	 * do, or another -errno. */
	int (*create)(const px_processor_config *cfg, px_provider **out);
	/* Free everything; no operation is started and no leader active. */
	void (*destroy)(px_provider *p);
	/* Start r (inputs in r->c; r->flags).  Called by a leader, or by any
	 * thread when flags has PX_PF_START_ANY_THREAD.  Returns one of
	 * PX_START_* or -errno (a start error: the caller learns it, or for a
	 * deferred start the completion carries it). */
	int (*start)(px_provider *p, px_result *r);
	/* Cancel a started r.  Any thread.  Returns PX_CANCEL_*. */
	int (*cancel)(px_provider *p, px_result *r);
} px_provider_ops;

struct px_provider {
	const px_provider_ops *ops;
	px_wait *wait;             /* created by ops->create */
	uint32_t ops_mask;         /* PX_OP_BIT of operations it does */
	unsigned flags;            /* PX_PF_START_ANY_THREAD, PX_PF_START_INTERRUPT */
	unsigned max_aio;          /* in flight at once (> 0) */
	size_t priv_size;          /* private bytes per result */
	pthread_mutex_t *lock;     /* the proactor mutex; set by the processor
	                              after create.  start() and next_completed()
	                              may release it around a system call, and
	                              must retake it before returning, after
	                              claiming under it what the call works on
	                              (see providers/select.c). */
};

/* The providers built into this library (config/registry.c). */
extern const px_provider_ops px_provider_select_ops PX_HIDDEN;
#ifdef PX_HAVE_URING
extern const px_provider_ops px_provider_uring_ops PX_HIDDEN;
#endif

/* ------------------------------------------------------------------ */
/* Config helpers (config/)                                             */
/* ------------------------------------------------------------------ */

/* Check one processor config and fill in defaults (provider's default
 * wait, wait's default interrupt, max_aio left 0 for the provider).
 * Returns 0 or -EINVAL with a message naming valid choices in err. */
int px_processor_config_resolve(px_processor_config *pc, char *err,
				size_t errlen) PX_HIDDEN;

/* Check a whole config (resolving both processors). */
int px_config_resolve(px_config *cfg, char *err, size_t errlen) PX_HIDDEN;

/* The provider ops for a type, or NULL if not built in. */
const px_provider_ops *px_provider_lookup(px_provider_type t) PX_HIDDEN;

/* Valid choices, as a mask of (1u << value): the waits of provider p when
 * w is PX_WAIT_DEFAULT, else the interrupts of (p, w).  *def (if not NULL)
 * receives the default.  0 for an invalid pair. */
unsigned px_registry_choices(px_provider_type p, px_wait_type w, int *def) PX_HIDDEN;

/* Name of a provider type ("select", "uring"), or "?". */
const char *px_provider_type_name(px_provider_type t) PX_HIDDEN;

/* Presets: fill cfg for a name ("auto", "epoll", ...).  Returns 0 or
 * -ENOENT. */
int px_config_preset(px_config *cfg, const char *name) PX_HIDDEN;

#define PX_CF_AUTO 0x100u /* internal: from "auto": fall back to epoll when
                             the preferred engine is unavailable */

/* Small helpers shared by providers (proactor/util.c). */
uint64_t px_now_ns(void) PX_HIDDEN;
void px_set_err(char *err, size_t errlen, const char *fmt, ...) PX_HIDDEN
	__attribute__((format(printf, 3, 4)));

#endif /* PX_INTERNAL_H */
