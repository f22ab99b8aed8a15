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
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "proactor.h"

#define PX_HIDDEN __attribute__((visibility("hidden")))

/* proactor(3), Conventions: no public function reads or sets errno.  The
 * first statement of each that makes system calls (or calls the C library
 * that may set errno): whatever those calls leave there, the caller's
 * errno is put back on every return. */
static inline void px__errno_put_back(const int *saved)
{
	errno = *saved;
}
#define PX_KEEP_ERRNO                                                          \
	const int px__caller_errno                                             \
		__attribute__((cleanup(px__errno_put_back), unused)) = errno

/* The cache line size the library pads and aligns to, so that data written
 * by different threads stays on different lines (x86-64 and most arm64). */
#define PX_CACHE_LINE 64
/* n rounded up to whole cache lines. */
#define PX_LINES(n) (((n) + PX_CACHE_LINE - 1) / PX_CACHE_LINE * PX_CACHE_LINE)

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
void px__list_check_insert(const px_link *l) PX_HIDDEN;
void px__list_check_remove(const px_list *list, const px_link *l) PX_HIDDEN;
#else
static inline void px__list_check_insert(const px_link *l) { (void)l; }
static inline void px__list_check_remove(const px_list *list, const px_link *l)
{
	(void)list;
	(void)l;
}
#endif

static inline void px_list_insert_after(px_list *list, px_link *pos, px_link *l)
{
	px__list_check_insert(l);
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
	px__list_check_remove(list, l);
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
	PX_RS_TIMER,         /* pending timer, on the dispatcher's timer list */
	PX_RS_CLOSING        /* px_close waiting for the operations of its
	                        descriptor; on the proactor's closing list */
} px_result_state;

/* px_result.flags */
#define PX_RF_WRITE_ALL  0x01u /* write_stream: keep going until len bytes */
#define PX_RF_PERIODIC   0x02u /* timer: periodic (timer.c) */
#define PX_RF_TIMEOUT    0x04u /* timer: an operation's deadline (timer.c) */
#define PX_RF_VECTORED   0x08u /* read/write stream/file: the data is in
                                  c.iov/c.iovcnt (c.buf NULL, c.len their
                                  total) */

struct px_processor;

typedef struct px_result {
	px_link link;             /* deferred / started / completed / timers:
	                             owned by whoever owns the state */
	px_link plink;            /* for the provider's own queues */
	px_link flink;            /* core: on px->byfd[c.fd] from its start
	                             until its callback has returned (stream,
	                             file, datagram, accept, connect) */
	px_completion c;          /* inputs (op, fd, buf, len, offset, addr)
	                             and outputs (bytes, error, new_fd, addr) */
	px_callback *cb;
	struct px_processor *proc;/* processor it was given to, or NULL */
	uint8_t state;            /* px_result_state */
	uint8_t flags;            /* PX_RF_*: set before the provider's start,
	                             then only read (providers read them
	                             without the mutex) */
	uint8_t cancel_pending;   /* processor: px_cancel came while the
	                             provider's start ran (the result was on
	                             the starting list); acted on once start
	                             has returned.  A byte of its own, apart
	                             from flags, for that reason. */
	uint8_t in_call;          /* provider: a thread makes (or is about to
	                             make) r's system call with the mutex
	                             released; set and cleared under the mutex
	                             with px_call_begin / px_call_end */
	uint8_t call_waiter;      /* core: cancelled while in_call; whoever
	                             clears in_call wakes px_cancel, which
	                             waits so that the application may close
	                             the descriptor once it returns */
	uint8_t fd_closed;        /* processor: cancelled because its descriptor
	                             was found closed (px__processor_idle_check);
	                             an ECANCELED outcome is reported as EBADF */
	uint8_t cancel_asked;     /* processor: its provider was asked to cancel
	                             it and the outcome is still to come; a
	                             check that finds its descriptor closed
	                             meanwhile leaves it alone (the application
	                             cancelled, then closed: ECANCELED) */
	size_t done;              /* bytes already moved, for PX_RF_WRITE_ALL;
	                             providers add each partial transfer here
	                             and report the total in c.bytes.
	                             PX_OP_CLOSE: completions still to deliver
	                             before the descriptor is closed */
	uint64_t deadline_ns;     /* timers: CLOCK_MONOTONIC deadline; a
	                             connect waiting for room in a full
	                             AF_UNIX backlog: when its socket's
	                             SO_SNDTIMEO ends (providers/nbio.c,
	                             nb_connect_wait_over) */
	uint64_t period_ns;       /* periodic timers: the period */
	size_t heap_idx;          /* timers: position in the heap (timer.c) */
	struct px_result *peer;   /* an operation: its timeout timer; a
	                             timeout timer: its operation.  Core only,
	                             under the mutex. */
	uint8_t timed_out;        /* core: the operation's deadline passed
	                             and it was cancelled for it */
	uint8_t deadline_cancel;  /* core: set while its deadline's expiry
	                             asks the provider to cancel it (timer.c).
	                             No application call returns on that
	                             cancel, so the provider need not wait for
	                             what px_cancel waits for (io_uring with
	                             SQPOLL: the kernel thread taking the
	                             SQEs, ur_cancel) */
	/* provider private space follows (px_result_priv) */
} px_result;

/* Wake px_cancel waiting for r's call (proactor.c). */
void px__call_end_wake(px_result *r) PX_HIDDEN;

/* fd is a descriptor the library has just made while px runs (a dup, or
 * a descriptor made at its first need): move it off the number if
 * operations of px still name that number, which the application then
 * closed with close(2) under them.  Taking it would hand those
 * operations the library's own file (proactor.c).  Returns the
 * descriptor to keep, fd or a dup of it above it, or -errno with fd
 * closed.  Mutex held; px may be NULL (a provider made alone). */
int px__fd_keep_off_ops(struct px_proactor *px, int fd) PX_HIDDEN;
/* The same for the socket of an accept r that has just succeeded
 * (r->c.new_fd; anything else is left alone).  The kernel gives it the
 * lowest free number, which may be one the application closed under
 * pending operations.  Without a free number the connection is closed and
 * r fails with that error (EMFILE).  Mutex held; px may be NULL. */
void px__accept_keep_off(struct px_proactor *px, px_result *r) PX_HIDDEN;

/* A provider claims r for a system call it makes with the mutex released
 * (mutex held). */
static inline void px_call_begin(px_result *r)
{
	r->in_call = 1;
}

/* The claim of r is let go (mutex held). */
static inline void px_call_end(px_result *r)
{
	r->in_call = 0;
	if (r->call_waiter)
		px__call_end_wake(r);
}

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

/* The result whose callback the calling thread is running (NULL outside
 * callbacks), for a provider that places new operations near the one that
 * completed.  *moved is set when the thread took that result from another
 * thread's own completions (proactor/dispatcher.c): its session is moving
 * to the calling thread. */
px_result *px__dispatch_current(bool *moved) PX_HIDDEN;
/* Whether the calling thread runs a callback of the proactor r is being
 * started on (r->proc set): it goes back into px_handle_events afterwards.
 * A thread that does not (the application's own, or one running another
 * proactor's callbacks) may not come back for a long time. */
extern __thread struct px_proactor *px__tls_dispatching PX_HIDDEN;
static inline bool px__dispatch_in_callback(const px_result *r)
{
	/* r->c.proactor is set with r->proc (inline: asked several times
	 * per start). */
	return r->proc && px__tls_dispatching == r->c.proactor;
}

struct px_provider;
/* The provider r was given to, or NULL (a timer, a post). */
struct px_provider *px__result_provider(const px_result *r) PX_HIDDEN;

/* The part of a vectored operation's buffers after its first skip bytes:
 * returns the elements to pass and their number in *n (0 when nothing is
 * left).  When skip ends inside an element, only the rest of that element
 * is returned, through *tmp, so the caller's array is never changed and
 * nothing is copied; the next call goes on from the following element. */
static inline const struct iovec *px_iov_rest(const px_result *r, size_t skip,
					      struct iovec *tmp, int *n)
{
	const struct iovec *iov = r->c.iov;
	int i = 0;

	while (i < r->c.iovcnt && skip >= iov[i].iov_len) {
		skip -= iov[i].iov_len;
		i++;
	}
	while (i < r->c.iovcnt && !skip && !iov[i].iov_len)
		i++;
	if (i == r->c.iovcnt) {
		*n = 0;
		return NULL;
	}
	if (!skip) {
		*n = r->c.iovcnt - i;
		return iov + i;
	}
	tmp->iov_base = (char *)iov[i].iov_base + skip;
	tmp->iov_len = iov[i].iov_len - skip;
	*n = 1;
	return tmp;
}

/* Where the rest of r's flat buffer begins, r->done bytes in.  A
 * datagram of length 0 may come with no buffer at all, and an offset
 * added to a null pointer is undefined even when it is 0, so that case
 * stays NULL. */
static inline void *px_buf_rest(const px_result *r)
{
	return r->c.buf ? (char *)r->c.buf + r->done : NULL;
}

/* Set the outputs of a finished operation. */
static inline void px_result_finish(px_result *r, size_t bytes, int error)
{
	r->c.bytes = bytes;
	r->c.error = error;
}

/* A finished r ended the way after which applications often close the
 * descriptor, so that its number may come back naming another file: an
 * error (a cancel among them) or the end of a stream.  The providers then
 * forget what they learnt of the number (see "Closed descriptors and
 * px_close" in docs/ARCHITECTURE.md). */
static inline bool px_result_may_close_next(const px_result *r)
{
	return r->c.error ||
	       (r->c.op == PX_OP_READ_STREAM && !r->c.bytes && r->c.len);
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
	/* Are the descriptors it writes to, other than fd (the pipe's write
	 * end), still the ones made for it (px__own_fd_is)?  At an idle
	 * check (px__intr_check_foreign), mutex held.  Optional. */
	bool (*writes_own)(px_intr *in);
} px_intr_ops;

/* What one of the engines' own descriptors named when it was made, kept
 * by its owner beside the number (util.c, own_entry): its device and
 * inode, whether its file description carries the library's stamp, and
 * the serial of the library's record of the number.  All zero: nothing
 * kept (every check says ours, as before the identity). */
typedef struct px_own_id {
	uint64_t serial;
	dev_t dev;
	ino_t ino;
	bool stamped;
} px_own_id;

struct px_intr {
	const px_intr_ops *ops;
	int fd;                    /* readable once interrupted; -1 if none */
	px_own_id fd_id;           /* what fd named when made (px__own_fd_id) */
	const sigset_t *wait_mask; /* signal mask for the wait (ppoll,
	                              the wait call, as ppoll and pselect take), or NULL */
	/* interrupt() found its descriptor closed behind the library's back
	 * (close(2)): the write said EBADF, or EPIPE for a pipe whose read
	 * end is gone, and no wake-up can come through it any more.  A wait
	 * that sees nothing else of the close (epoll: the instance drops the
	 * descriptor without a word) bounds itself by PX_NO_WAKE_MS
	 * instead (wait_strategies/epoll.c).  Set by any thread with the
	 * mutex, read by the leader without it: atomic, relaxed. */
	atomic_bool gone;
	/* fd's number names another file than the one made for it (an idle
	 * check found so: px__own_fd_is against fd_id), the application's
	 * maybe: gone too, and the interrupt neither writes nor drains it any
	 * more, where it wrote into the application's file and read its
	 * data (TESTING.md, fixed problem 312).  Atomic, relaxed. */
	atomic_bool foreign;
};

/* Interrupt strategies by number (px_processor_config.interrupt names one;
 * a wait strategy lists those it takes as a mask of 1u << type).  pipe,
 * eventfd and signal live in interrupt/; "native" is a wait mechanism's own
 * way to wake itself, built by its provider. */
enum {
	PX_INTR_NONE = 0,
	PX_INTR_PIPE,
	PX_INTR_EVENTFD,
	PX_INTR_SIGNAL,
	PX_INTR_NATIVE,
	PX_INTR_COUNT
};

/* Name of an interrupt type, or NULL. */
static inline const char *px__intr_name(int type)
{
	switch (type) {
	case PX_INTR_PIPE: return "pipe";
	case PX_INTR_EVENTFD: return "eventfd";
	case PX_INTR_SIGNAL: return "signal";
	case PX_INTR_NATIVE: return "native";
	default: return NULL;
	}
}

/* The type of an interrupt name, or -1 (interrupt/intr.c). */
int px__intr_type(const char *name) PX_HIDDEN;
int px__intr_type_n(const char *name, size_t n) PX_HIDDEN;

/* Factory (interrupt/intr.c): build the interrupt cfg->interrupt names,
 * one of pipe, eventfd or signal.  Returns 0 or -errno (-EINVAL for a type
 * it does not build). */
int px__intr_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
/* The constructors behind it, one per file of interrupt/. */
int px__intr_pipe_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
int px__intr_eventfd_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
int px__intr_signal_create(const px_processor_config *cfg, px_intr **out) PX_HIDDEN;
/* At a processor's idle check (the pollers' verify): is in's descriptor,
 * or one it writes to (writes_own: a pipe's write end, fixed problem
 * 326), another file now than the one made for it (px__own_fd_is against
 * fd_id), the application's maybe, put there with dup2 or by its next
 * open after a close behind the library's back?  Then it is marked
 * foreign and gone: neither watched, written, drained nor registered
 * again, where the waits watched it, the drains read its data and the
 * interrupts wrote into it (TESTING.md, fixed problem 312).  Returns
 * whether it is foreign.  Two system calls (four for a pipe), unless
 * known already. */
bool px__intr_check_foreign(px_intr *in) PX_HIDDEN;
/* The same for a descriptor whose stamp signal is stamp for now (0: the
 * usual one; px__own_fd_is_signed). */
bool px__intr_check_foreign_signed(px_intr *in, int stamp) PX_HIDDEN;
/* Whether a proactor's POSIX AIO sigwait wait holds signo
 * (wait_strategies/sigwait.c): for the message of an interrupt=signal
 * refused on it. */
bool px__sigwait_holds(int signo) PX_HIDDEN;
/* The signal a POSIX AIO provider's sigwait wait holds, 0 for none: for
 * the message of a team whose secondary asks for the primary's. */
int px__sigwait_signal_of(const struct px_provider *prov) PX_HIDDEN;

/* fork(2): the library's process-wide locks (the signal tables of the
 * signal interrupt and of the sigwait wait, the POSIX AIO set-up, the
 * file status flags lock, px__flags_lock below) are
 * taken before a fork and released after it in both processes, so that a
 * child never inherits one held by a thread it does not have; in the
 * child each module also frees what the parent's proactors held, which
 * the child can no longer release (their calls fail there with ECHILD).
 * proactor.c registers the handlers at the first px_create. */
enum { PX_FORK_PREPARE, PX_FORK_PARENT, PX_FORK_CHILD };
void px__signal_atfork(int phase) PX_HIDDEN;
void px__sigwait_atfork(int phase) PX_HIDDEN;
void px__paio_atfork(int phase) PX_HIDDEN;
void px__nbio_atfork(int phase) PX_HIDDEN;
/* The record of the library's own descriptors (px__is_own_fd): its lock,
 * and in the child the record is emptied.  The descriptors the child
 * inherited are the parent's proactors', which it can neither use nor
 * close through the library (ECHILD); it may close them with close(2)
 * (closefrom, a daemon's clean-up) and get the numbers back for files of
 * its own, which a record kept would refuse. */
void px__own_fd_atfork(int phase) PX_HIDDEN;

/* The file status flags (F_GETFL, F_SETFL) of the application's
 * descriptors: the library reads, changes and writes them back in several
 * places (nbio.c's O_NONBLOCK around one call, a listener's O_NONBLOCK,
 * the linux_rt wait's O_ASYNC), from different threads, and a write-back
 * made from a copy read before another's change undoes that change.  Each
 * such read-modify-write is made under this process-wide lock (nbio.c's,
 * the one of the fork handlers above), held for a few system calls and
 * never with another process-wide lock; it may be taken with a proactor
 * mutex held, never the other way round. */
void px__flags_lock(void) PX_HIDDEN;
void px__flags_unlock(void) PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Wait strategy                                                        */
/* ------------------------------------------------------------------ */

/* The processor's view of how its provider's leader waits.  Each provider
 * builds its own, over one of the readiness pollers of
 * wait_strategies/poller.h (which know nothing of any provider) or over a
 * wait of its own mechanism (docs/ARCHITECTURE.md). */

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
	 * more.  Drains the interrupt when it fired (a wait with claim, below,
	 * drains it in claim instead: then it is the thread that claimed that
	 * calls next_completed, and it need not lead any more). */
	px_result *(*next_completed)(px_wait *w);
	/* Optional (NULL: next_completed does it all).  Leader only, mutex
	 * held, right after wait() and before next_completed: take in what
	 * the wait reported and claim the work it makes possible (the
	 * readiness provider's system calls).  Returns how many descriptors
	 * have work that the calling thread is to do without the mutex in
	 * its next_completed calls, which need not lead: the processor may
	 * then end the lead first, so that another thread waits meanwhile
	 * (px__processor_handle_aio_events).  Only a wait whose changes reach
	 * a wait in progress (a LIVE poller) may return more than 0. */
	size_t (*claim)(px_wait *w);
	/* Optional, with claim.  Mutex held, by the thread whose claim just
	 * returned more than 0: move about half of the descriptors it
	 * claimed to a place where any thread's next_completed runs them, so
	 * that a follower woken for them makes those calls while the
	 * claiming thread makes the rest.  Returns how many it moved (0:
	 * nothing to share). */
	size_t (*share)(px_wait *w);
	/* Optional, with share.  Mutex held: whether shared descriptors wait
	 * for a thread to run them (px__processor_collect_claimed does). */
	bool (*has_shared)(px_wait *w);
	/* Mutex held, while at least one thread leads the processor: whether
	 * one more thread could lead it now (a part of the wait has work and
	 * nobody waiting on it).  Only for a provider with max_leaders > 1;
	 * prepare, wait and next_completed then run in several leaders at
	 * once, each on its own part.  Optional (NULL: one leader). */
	bool (*may_lead)(px_wait *w);
	/* Optional, for a lone thread and two shared processors that both
	 * have work (the dispatcher's disp_lone_lead).  ready_fd (mutex
	 * held): a descriptor that polls readable while this wait has
	 * something to report (epoll: its epoll instance), or -1; once it
	 * gave one, the same one until destroy, or until an idle check
	 * (check) forgets it, after which -1 (io_uring's ready eventfd
	 * replaced behind the library's back).  Called just before the
	 * other processor's wait watches it, so it may ready itself for
	 * that (io_uring submits what its rings hold).  watch
	 * (leader, mutex held, before prepare): the next wait() also returns
	 * as soon as fd polls readable; nothing is reported for it.  Best
	 * effort: it may do nothing (a kernel that refuses), and the
	 * dispatcher bounds the wait all the same.  NULL where the wait can
	 * never watch: the dispatcher then counts on the other wait's watch,
	 * if it has one, and else on its bound. */
	int (*ready_fd)(px_wait *w);
	void (*watch)(px_wait *w, int fd);
	/* Optional (mutex held): the processor is shared, has no work and
	 * no leader, and a thread is about to block elsewhere (asleep as a
	 * follower, in another processor's wait) or to leave
	 * px_handle_events, so nobody may lead it for a long time.  A wait
	 * that holds something shared while it waits gives it back here
	 * (the aiocb wait: one of glibc's helper threads). */
	void (*idle)(px_wait *w);
	/* Optional (leader, mutex held): the processor's idle check runs
	 * (processor.c, proc_check).  Look at what no wait reports, such as
	 * the wait's or its provider's own descriptors closed with close(2)
	 * behind the library's back (the Linux AIO waits). */
	void (*check)(px_wait *w);
} px_wait_ops;

struct px_wait {
	const px_wait_ops *ops;
	px_intr *intr;             /* how to interrupt this wait */
	/* Set by the processor before may_lead() and prepare() (several
	 * leaders only).  others_busy: other threads lead or run callbacks
	 * and will come back to their own parts, so this one should take its
	 * own part only (the dispatcher clears it when a follower's sleep ran
	 * out).  others_here: other threads are in px_handle_events at all,
	 * or one left it a moment ago (px__dispatch_others_here). */
	bool others_busy;
	bool others_here;
	/* Set by the processor while it calls next_completed(): its clock
	 * reading at the end of the wait (px__now_ns), for a wait that
	 * stamps what it lets go; 0 otherwise. */
	uint64_t now_ns;
};

/* ------------------------------------------------------------------ */
/* Provider (providers/)                                                */
/* ------------------------------------------------------------------ */

typedef struct px_provider px_provider;
struct px_proc_spec;

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
	 * (resolved: names filled in) and spec (its wait, interrupt type and
	 * parsed settings).  Returns 0, -ENOSYS when this kernel lacks the
	 * mechanism, -EINVAL for a combination it cannot do, or another
	 * -errno. */
	int (*create)(const px_processor_config *cfg,
		      const struct px_proc_spec *spec, px_provider **out);
	/* Free everything; no operation is started and no leader active. */
	void (*destroy)(px_provider *p);
	/* Start r (inputs in r->c; r->flags).  Called by a leader, or by any
	 * thread when flags has PX_PF_START_ANY_THREAD.  Returns one of
	 * PX_START_* or -errno (a start error: the caller learns it, or for a
	 * deferred start the completion carries it). */
	int (*start)(px_provider *p, px_result *r);
	/* Cancel a started r.  Any thread.  Returns PX_CANCEL_*. */
	int (*cancel)(px_provider *p, px_result *r);
	/* Optional.  px_close has just closed fd (mutex held; no operation
	 * of the proactor refers to it): forget what was learnt about the
	 * file under that number, which may name another one at the next
	 * start.  (A close(2) by the application is not seen.) */
	void (*closed)(px_provider *p, int fd);
} px_provider_ops;

struct px_provider {
	const px_provider_ops *ops;
	px_wait *wait;             /* created by ops->create */
	uint32_t ops_mask;         /* PX_OP_BIT of operations it does */
	uint32_t vec_ops;          /* of those, the ones it also does with
	                              PX_RF_VECTORED (set from its class's
	                              vectored_ops by the processor) */
	unsigned flags;            /* PX_PF_START_ANY_THREAD, PX_PF_START_INTERRUPT */
	unsigned max_aio;          /* in flight at once (> 0) */
	unsigned max_leaders;      /* threads that may wait on it at once: 0 or
	                              1 for one; more only with a wait that has
	                              may_lead (see px_wait_ops) */
	size_t priv_size;          /* private bytes per result */
	struct px_proactor *px;    /* its proactor, set with lock; NULL for a
	                              provider made alone (unit tests) */
	pthread_mutex_t *lock;     /* the proactor mutex; set by the processor
	                              after create.  start() and next_completed()
	                              may release it around a system call, and
	                              must retake it before returning, after
	                              claiming under it what the call works on
	                              (see providers/select.c). */
};

/* ------------------------------------------------------------------ */
/* Provider class (providers/classes.c lists them all)                  */
/* ------------------------------------------------------------------ */

/* One wait strategy a provider offers. */
typedef struct px_wait_desc {
	const char *name;          /* unique within its class */
	const char *summary;       /* one line, for messages and listings */
	unsigned intrs;            /* 1u << PX_INTR_* it takes */
	int default_intr;          /* PX_INTR_* */
} px_wait_desc;

/* A named starting point of the text form (a provider's shortcut, such
 * as NAME-dedicated). */
typedef struct px_preset_desc {
	const char *name;          /* unique across all classes */
	const char *wait;          /* NULL: the class's default wait */
	px_processor_type processor;
} px_preset_desc;

/* A preset of two processors: this class as the primary, narrowed to ops,
 * and another class (by name) as the secondary for the rest, so that a
 * class can say which provider does what it does not (a class for files
 * only can name a readiness class for its sockets). */
typedef struct px_team_desc {
	const char *name;          /* unique across all presets of all classes */
	const char *wait;          /* primary's wait; NULL: the default */
	px_processor_type processor;
	uint32_t ops;              /* primary's operations (PX_OP_BIT) */
	const char *sec_provider;  /* the secondary's class */
	const char *sec_wait;      /* NULL: that class's default wait */
	px_processor_type sec_processor;
	uint32_t sec_ops;          /* 0: all it does */
} px_team_desc;

/* One configuration key only this provider takes. */
typedef struct px_key_desc {
	const char *name;
	const char *choices;       /* what a value may be, for messages */
} px_key_desc;

/* Room for a class's parsed settings (px_provider_class.settings_size). */
#define PX_SETTINGS_MAX 64

/*
 * Everything the rest of the library knows about a provider.  One constant
 * of this type per provider, named in providers/classes.c; config/ and
 * proactor/ reach providers only through it.
 */
typedef struct px_provider_class {
	const char *name;          /* provider=NAME */
	const char *summary;       /* one line */
	uint32_t native_ops;       /* PX_OP_BIT of the operations it does */
	uint32_t vectored_ops;     /* of those, the ones its start also takes
	                              with PX_RF_VECTORED (iovec arrays); a
	                              vectored start of another is refused
	                              with -EOPNOTSUPP before it is made */
	const px_wait_desc *waits; /* waits[0] is the default */
	unsigned nwaits;
	const px_preset_desc *presets;
	unsigned npresets;
	const px_team_desc *teams; /* team presets, may be none */
	unsigned nteams;
	const px_key_desc *keys;   /* its own keys (words), may be none */
	unsigned nkeys;
	/* Settings: a private block of settings_size bytes (at most
	 * PX_SETTINGS_MAX), filled with defaults by settings_init, changed by
	 * parse_key for each word (key is an index in keys; -EINVAL with a
	 * message naming the valid values), checked as a whole against the
	 * processor config by validate (optional), and written back as words
	 * by format: only values that differ from the defaults, in keys order,
	 * separated by single spaces; returns the length like snprintf. */
	size_t settings_size;
	void (*settings_init)(void *settings);
	int (*parse_key)(void *settings, unsigned key, const char *val,
			 size_t vlen, char *err, size_t errlen);
	int (*validate)(const void *settings, const px_processor_config *pc,
			char *err, size_t errlen);
	int (*format)(const void *settings, char *buf, size_t len);
	/* Does this kernel offer the mechanism?  0, or -ENOSYS / -EPERM /
	 * -ENOMEM with the reason in why.  NULL: always. */
	int (*probe)(char *why, size_t len);
	/* Why create failed with rc, when the errno alone does not say (for
	 * instance a system-wide limit, and the setting that raises it):
	 * writes why and returns true.  NULL: nothing to add. */
	bool (*explain)(int rc, char *why, size_t len);
	/* Order in which "auto" tries classes (lower first); 0: never. */
	unsigned auto_rank;
	/* PX_OP_BIT of operations that make the class worth choosing: auto
	 * considers it only for a processor whose ops include one of them
	 * (Linux AIO: files).  0: any processor. */
	uint32_t auto_ops;
	/* When auto chooses this class for a primary processor that also
	 * does operations outside the team's ops, with no secondary given:
	 * the team it builds instead, the secondary taking those operations
	 * (Linux AIO: the readiness provider for sockets).  When the
	 * secondary cannot be built, the class does everything alone.
	 * NULL: none. */
	const px_team_desc *auto_team;
	const px_provider_ops *ops;
} px_provider_class;

/* The classes built into this library, NULL-terminated; and the names of
 * providers this library knows of but was built without. */
extern const px_provider_class *const px__classes[] PX_HIDDEN;
extern const char *const px__classes_not_built[] PX_HIDDEN;

/* ------------------------------------------------------------------ */
/* Config helpers (config/)                                             */
/* ------------------------------------------------------------------ */

/* A processor config resolved for creation: its class and wait, the
 * interrupt type and the class's parsed settings. */
struct px_proc_spec {
	const px_provider_class *cls;
	const px_wait_desc *wait;
	int intr;                  /* PX_INTR_* */
	_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
	/* Where a failing create may say which call failed ("eventfd:
	 * Function not implemented"), for px_create's message; NULL or
	 * why_len 0: nowhere. */
	char *why;
	size_t why_len;
};
typedef struct px_proc_spec px_proc_spec;

/* Check one processor config, fill in the defaults (wait, interrupt) and
 * write its words in canonical form.  An auto processor (provider "")
 * stays auto.  where prefixes messages ("" or "secondary: ").  Returns 0,
 * -EINVAL with a message naming the valid choices, or -ENOSYS for a
 * provider not built in. */
int px__resolve_processor(px_processor_config *pc, const char *where,
			  char *err, size_t errlen) PX_HIDDEN;

/* Check a whole config (resolving both processors). */
int px__config_resolve(px_config *cfg, char *err, size_t errlen) PX_HIDDEN;

/* Make the spec of a resolved, non-auto processor config.  Returns 0 or
 * -EINVAL/-ENOSYS with a message. */
int px__spec_of(const px_processor_config *pc, px_proc_spec *spec,
		const char *where, char *err, size_t errlen) PX_HIDDEN;

/* The candidates of an auto processor, best first: the classes with an
 * auto rank whose default wait takes pc's interrupt (if any) and which
 * accept pc's words.  Fills at most max, returns how many. */
unsigned px__auto_candidates(const px_processor_config *pc,
			     const px_provider_class **out, unsigned max) PX_HIDDEN;

/* Find a class by name (n bytes), or NULL. */
const px_provider_class *px__class_find(const char *name, size_t n) PX_HIDDEN;

/* Write the built-in provider names ("a or b") to buf. */
void px__class_names(char *buf, size_t len, const char *conj) PX_HIDDEN;

/* Presets: fill cfg for a name ("auto" or a class's preset).  Returns 0 or
 * -ENOENT. */
int px__config_preset(px_config *cfg, const char *name) PX_HIDDEN;

/* Copy a string into a fixed-size name field (truncating). */
void px__set_name(char *dst, size_t size, const char *src, size_t n) PX_HIDDEN;

/* Small helpers shared by providers (proactor/util.c). */
uint64_t px__now_ns(void) PX_HIDDEN;
/* size zeroed bytes on cache lines of their own (PX_CACHE_LINE-aligned,
 * the size rounded up to whole lines, at least one), for free(); NULL
 * when out of memory.
 * For per-descriptor records: packed by malloc, the records of two
 * descriptors served by different threads shared lines, and every start
 * and completion on one pulled the line from the other's CPU. */
void *px__zalloc_lines(size_t size) PX_HIDDEN;
/* The readiness engines' socket calls and epoll wait, made with syscall(2)
 * instead of glibc's recv, send, recvfrom, sendto, recvmsg, sendmsg,
 * accept4 and epoll_pwait.  Those are thread-cancellation points, and in
 * a threaded process glibc switches the caller to asynchronous cancellation
 * and back around each one (two atomic operations, 20-45 ns a call on the
 * Intel host of docs/PERFORMANCE.md).  The library must not be cancelled
 * inside its own calls anyway (it holds state other threads wait on), so
 * nothing is lost.  Same arguments, return value and errno as the glibc
 * calls.  Out of line, in their own file, so that a test can wrap them at
 * link time (-Wl,--wrap=px__sys_recv) as it wraps a libc call. */
ssize_t px__sys_recv(int fd, void *buf, size_t len, int flags) PX_HIDDEN;
ssize_t px__sys_send(int fd, const void *buf, size_t len, int flags) PX_HIDDEN;
ssize_t px__sys_recvfrom(int fd, void *buf, size_t len, int flags,
			 struct sockaddr *from, socklen_t *fromlen) PX_HIDDEN;
ssize_t px__sys_sendto(int fd, const void *buf, size_t len, int flags,
		       const struct sockaddr *to, socklen_t tolen) PX_HIDDEN;
ssize_t px__sys_recvmsg(int fd, struct msghdr *m, int flags) PX_HIDDEN;
ssize_t px__sys_sendmsg(int fd, const struct msghdr *m, int flags) PX_HIDDEN;
int px__sys_accept4(int fd, struct sockaddr *addr, socklen_t *addrlen,
		    int flags) PX_HIDDEN;
/* Also out of ThreadSanitizer's sight, where that matters: see util.c. */
int px__sys_connect(int fd, const struct sockaddr *addr,
		    socklen_t addrlen) PX_HIDDEN;
struct epoll_event;
int px__sys_epoll_pwait(int epfd, struct epoll_event *ev, int max,
			int timeout_ms, const sigset_t *mask) PX_HIDDEN;
/* epoll_ctl(2) on a descriptor of the application's (the Linux AIO
 * provider's set, providers/linux_aio.c, la_spill_set): out of
 * ThreadSanitizer's sight like the calls above. */
int px__sys_epoll_ctl(int epfd, int op, int fd,
		      struct epoll_event *ev) PX_HIDDEN;
/* rt_tgsigqueueinfo(2), which glibc does not wrap: the POSIX AIO sigwait
 * wait's handler hands a stray signal on to the leader's thread with it
 * (wait_strategies/sigwait.c).  A function of its own so that a test can
 * wrap it at link time (test_posix_aio).  Async-signal-safe. */
int px__sys_rt_tgsigqueueinfo(pid_t tgid, pid_t tid, int sig,
			      siginfo_t *si) PX_HIDDEN;
/* The default max_aio of a provider whose in-flight operations are not
 * bounded by a kernel resource: RLIMIT_NOFILE-scale, at least 65536
 * (docs/ARCHITECTURE.md, "max_aio"). */
unsigned px__default_max_aio(void) PX_HIDDEN;
/* RWF_NOSIGNAL when the kernel takes it on a write (Linux 6.18), else 0:
 * the flag that keeps a write to a pipe whose reader has gone (or to a
 * socket written as a file) from raising SIGPIPE in whichever thread the
 * kernel runs it.  Probed once per process. */
int px__rwf_nosignal(void) PX_HIDDEN;
/* EFBIG when a file write of len bytes at offset on fd would start at or
 * past RLIMIT_FSIZE (at the end of the file for an O_APPEND descriptor),
 * where the kernel would raise SIGXFSZ in the writing thread; else 0. */
int px__fsize_refused(int fd, uint64_t offset, size_t len) PX_HIDDEN;
/* The same for a stream write on fd, a regular file, at its file
 * position (or its end, with O_APPEND). */
int px__fsize_refused_here(int fd) PX_HIDDEN;
/* Whether fd (whose fstat is st) has no offsets, so that pread(2) would
 * fail on it with ESPIPE: a pipe or FIFO, a socket, a terminal, a file
 * without a type (eventfd, signalfd, timerfd and other anonymous
 * inodes).  A file operation on one is a stream call to the kernel's AIO
 * and to glibc's, which wait for data or room where no cancel reaches
 * (Linux AIO inside io_submit, POSIX AIO in a helper thread), so those
 * providers answer ESPIPE at the start. */
struct stat;
bool px__no_offsets(int fd, const struct stat *st) PX_HIDDEN;

/*
 * A datagram write whose descriptor keeps polling writable while every
 * send says EAGAIN: a socket not connected to its AF_UNIX receiver has
 * room in its own buffer, and the receiver's queue is full.  No poll can
 * wait for that receiver, so each provider counts such tries in a row
 * ("futile") and, from PX_FUTILE_MIN on, waits px__futile_wait_ms()
 * before the next try instead of polling again at once (1 ms, doubling,
 * at most PX_FUTILE_MAX_MS).  docs/ARCHITECTURE.md, "A datagram write to
 * a full receiver".
 */
#define PX_FUTILE_MIN 3u
#define PX_FUTILE_MAX_MS 64u

static inline unsigned px__futile_wait_ms(unsigned futile)
{
	unsigned step;

	if (futile < PX_FUTILE_MIN)
		return 0;
	step = futile - PX_FUTILE_MIN;
	return step < 6 ? 1u << step : PX_FUTILE_MAX_MS;
}

/*
 * Wait bounds.  px__cap_ms(timeout_ms, cap) is the wait of timeout_ms
 * (negative: no limit) cut to cap ms at most, for the many places where a
 * condition (a descriptor to check again, a retry due, an engine that
 * nothing can wake) shortens a wait.
 *
 * PX_NO_WAKE_MS: the longest wait of a leader that no wake-up can reach
 * any more, because one of the engine's own descriptors was closed with
 * close(2) behind the library's back (docs/ARCHITECTURE.md, "Closed
 * descriptors and px_close"): the processor's nap after a wait that says
 * EBADF, a poll or select poller or an epoll wait whose interrupt
 * descriptor is gone, a dead Linux AIO provider.  Short enough that
 * px_stop, px_destroy and the posts of other threads get through soon;
 * long enough that a dedicated leader costs next to nothing.
 */
#define PX_NO_WAKE_MS 10

static inline int px__cap_ms(int timeout_ms, int cap)
{
	return timeout_ms < 0 || timeout_ms > cap ? cap : timeout_ms;
}

/*
 * The descriptors the library holds for its own use: the engines' epoll
 * instances, eventfds, pipes, io_uring rings and signalfds, and the dups
 * and reopens the providers make of an application's file.  One record
 * for the whole process, as a number is the process's: px_close and every
 * start refuse such a number with -EBADF (it is not the application's),
 * where closing it or operating on it broke the engine that held it, of
 * this proactor or another (TESTING.md, fixed problem 287).  A number is
 * marked right after the call that made it and unmarked right before its
 * close, never after: once closed, the number may already be another
 * thread's new descriptor of the library's, which an unmark after the
 * close would wipe.  A bit per number below PX_OWN_FD_BITS (8 KiB); the
 * rare number above goes to a small locked table, looked at only while
 * it holds something.  The test is one or two relaxed loads: it is on
 * every start.  Marking is best effort (a table that cannot grow leaves
 * the number unmarked, as it was before the record existed).
 */
#define PX_OWN_FD_BITS 65536u
extern _Atomic unsigned long px__own_fd_bits[PX_OWN_FD_BITS /
					     (8 * sizeof(unsigned long))];
extern _Atomic unsigned px__own_fd_high;
bool px__own_fd_high_has(int fd) PX_HIDDEN;
/* Mark fd (ignored when negative) and return it: wraps the call that
 * makes it, fd = px__own_fd(eventfd(...)). */
int px__own_fd(int fd) PX_HIDDEN;
/* Unmark fd; the caller closes it next. */
void px__own_fd_drop(int fd) PX_HIDDEN;
/* Unmark fd and close it (close(2)'s result). */
int px__own_close(int fd) PX_HIDDEN;
/* px_own_id (above, before struct px_intr): what one of the engines' own
 * descriptors named when it was made. */
/* px__own_fd, and fill *id with what fd names, for px__own_fd_is.  For
 * the descriptors an engine makes for itself, never for a dup of the
 * application's file (the stamp is set on the open file description).
 * Two system calls, when the descriptor is made. */
int px__own_fd_id(int fd, px_own_id *id) PX_HIDDEN;
/* Does fd still name what px__own_fd_id made (id)?  False when it was
 * closed behind the library's back, and its number is free, the
 * application's file (its dup2, open, socket, epoll_create1...), or
 * another descriptor the library has made since.  True when nothing was
 * kept, or it cannot tell.  Two system calls: at an idle check or a
 * close only. */
bool px__own_fd_is(int fd, const px_own_id *id) PX_HIDDEN;
/* px__own_fd_is for a descriptor whose stamp signal its owner has set to
 * stamp for a while (the linux_rt wait sets its own signal on a pipe
 * interrupt's read end, and puts the stamp back when it lets it go). */
bool px__own_fd_is_signed(int fd, const px_own_id *id, int stamp) PX_HIDDEN;
/* px__own_close of what px__own_fd_id made, only while the number still
 * names it; else -1 with EBADF, the number unmarked if it is not the
 * library's any more, left marked if another descriptor of the library's
 * has it now (TESTING.md, fixed problem 310). */
int px__own_close_id(int fd, const px_own_id *id) PX_HIDDEN;
/* px__own_fd_drop the same way: not when another descriptor of the
 * library's has the number now. */
void px__own_fd_drop_id(int fd, const px_own_id *id) PX_HIDDEN;

static inline bool px__is_own_fd(int fd)
{
	const unsigned w = 8 * sizeof(unsigned long);

	if ((unsigned)fd < PX_OWN_FD_BITS)
		return atomic_load_explicit(&px__own_fd_bits[(unsigned)fd / w],
					    memory_order_relaxed) &
		       (1ul << ((unsigned)fd % w));
	return fd >= 0 &&
	       atomic_load_explicit(&px__own_fd_high, memory_order_relaxed) &&
	       px__own_fd_high_has(fd);
}

/* The descriptor of the operation whose callback the calling thread is
 * running for px (its c.fd), or -1 when it runs none (proactor/dispatcher.c).
 * A start made from there continues work on a number that was open a
 * moment ago. */
int px__dispatch_current_fd(const struct px_proactor *px) PX_HIDDEN;
void px__set_err(char *err, size_t errlen, const char *fmt, ...) PX_HIDDEN
	__attribute__((format(printf, 3, 4)));

#endif /* PX_INTERNAL_H */
