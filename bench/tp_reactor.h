/*
 * tp_reactor.h - a thread-pool reactor over epoll, Leader/Followers style:
 * the baseline proactor_test is measured against.
 *
 * Any number of threads call tp_reactor_run().  One of them at a time, the
 * leader, waits in epoll_wait(); the others are followers asleep on their
 * own condition variable (promoted last-in first-out, for cache warmth).
 * When the leader gets events it queues the handlers that have them,
 * promotes a follower to be the next leader (only if one sleeps, so no
 * futex call is wasted) and runs a handler itself.
 *
 * Handlers are edge-triggered (EPOLLET): an event is reported once per
 * change, so a handler must read (and write) until EAGAIN.  A handler is
 * never run by two threads at once: while it runs its handle is
 * deactivated, which here means the events the leader gets for it are
 * added to its pending mask instead of being dispatched, and the thread
 * that runs it runs it again before letting go.  This costs no system call;
 * EPOLLONESHOT would cost an epoll_ctl() per dispatch to re-arm.
 *
 * One mutex guards the reactor and every handler's dispatch state; a
 * handler's own data needs no lock since only one thread runs it.
 */
#ifndef TP_REACTOR_H
#define TP_REACTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* The reactor's hot system calls, made with syscall(2) rather than through
 * glibc's read, write and epoll_wait.  Those three are thread-cancellation
 * points: in a process with more than one thread glibc switches the caller
 * to asynchronous cancellation around each call and back (two atomic
 * read-modify-writes on the thread's cancellation word).  Nothing here uses
 * thread cancellation, so the baseline skips that work.  Measured on a
 * 2-vCPU Intel Xeon VM (kernel 6.18): a recv that finds nothing took
 * 180-207 ns through glibc and 157-162 ns through syscall(2), and
 * tp_reactor_test moved 1.02-1.04 times as many round trips at
 * 1/1/512/1024 (6 alternated rounds of 2 s; docs/PERFORMANCE.md).
 * io_uring_enter, the io_uring engine's one call per round trip, goes
 * through liburing's own system-call code and never had this cost.
 * errno and the return value are those of the glibc calls. */
static inline ssize_t tp_read(int fd, void *buf, size_t n)
{
	return (ssize_t)syscall(SYS_read, fd, buf, n);
}

static inline ssize_t tp_write(int fd, const void *buf, size_t n)
{
	return (ssize_t)syscall(SYS_write, fd, buf, n);
}

typedef struct tp_reactor tp_reactor;
typedef struct tp_handler tp_handler;

/* Called with the EPOLLIN/EPOLLOUT/EPOLLERR/EPOLLHUP bits seen since the
 * last call, without the reactor's lock. */
typedef void tp_handle_fn(tp_handler *h, uint32_t events);

struct tp_handler {
	int fd;
	tp_handle_fn *fn;
	void *user;
	/* Dispatch state, guarded by the reactor's mutex. */
	uint32_t pending;       /* events not yet given to fn */
	bool running;           /* a thread is inside fn */
	bool queued;            /* on the ready list */
	tp_handler *next;       /* ready list link */
};

/* Create a reactor; max_events is the epoll_wait batch (0 = 64).
 * Returns 0 or a negative errno. */
int tp_reactor_create(tp_reactor **out, int max_events);

/* Watch fd (non-blocking) for input and output, edge-triggered, and call fn
 * with h.  h must stay valid until tp_reactor_destroy().  Returns 0 or a
 * negative errno. */
int tp_reactor_add(tp_reactor *r, tp_handler *h, int fd, tp_handle_fn *fn,
		   void *user);

/* Run the event loop in the calling thread until tp_reactor_stop().
 * Returns 0, or a negative errno if epoll_wait failed. */
int tp_reactor_run(tp_reactor *r);

/* Make every tp_reactor_run() return once its current handler is done. */
void tp_reactor_stop(tp_reactor *r);

/* Free the reactor.  No thread may be inside tp_reactor_run(). */
void tp_reactor_destroy(tp_reactor *r);

#endif /* TP_REACTOR_H */
