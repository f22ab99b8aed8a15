/*
 * aio_callback.c - the POSIX AIO provider's SIGEV_THREAD wait
 * (providers/posix_aio.c only) and its native interrupt.
 *
 * Each request notifies with SIGEV_THREAD: once its result is set, glibc
 * runs cbw_notify in a new thread of its own.  That thread must not take
 * the proactor mutex (the leader may hold it while it reaps, and the
 * application's callbacks run under no promise about such threads), so it
 * only hands the request over: it pushes it on a lock-free stack and, if
 * the stack was empty, writes 1 to an eventfd.  The leader waits in poll
 * on that eventfd, with the mutex released; next_completed() reads the
 * eventfd empty, takes the whole stack at once, puts it back in
 * notification order and reaps the requests one by one.
 *
 * The eventfd is also the interrupt: interrupt() writes to it like a
 * notifier, and a wake-up with an empty stack is just a wake-up.
 *
 * Life time.  A notifier touches the request (its push) and then the
 * provider (the eventfd).  The request stays valid until the leader reaps
 * it, which needs the push first; the provider must outlive the write, so
 * notifiers count themselves in and out (px_paio.notifying) and destroy
 * waits for the count to reach zero before it closes the eventfd.
 *
 * glibc creates one thread per notification and unblocks every signal
 * in it before it calls cbw_notify (its __aio_start_notify_thread), so
 * a signal the application blocks in all its own threads, to take it
 * with sigwait, may be delivered there instead (TESTING.md, known
 * problems); nothing here can block it first.  Should that
 * pthread_create fail, glibc drops the notification without a
 * word and that request is never handed over; nothing here can tell it
 * apart from a request still running.  The aiocb and sigwait waits look
 * at aio_error themselves and have no such hole.
 */
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../providers/posix_aio.h"

/* The eventfd is not ours any more: closed behind the library's back,
 * or its number the application's file since (dup2, its next open).  The
 * waits nap and look at the stack (cbw_wait), and nothing reads or polls
 * the number again (TESTING.md, fixed problem 312). */
static void cbw_efd_gone(px_paio *p)
{
	atomic_store_explicit(&p->efd_gone, true, memory_order_relaxed);
}

static void cbw_kick(px_paio *p)
{
	uint64_t one = 1;
	ssize_t n;

	/* (gone: the number may be another file by now, not to be
	 * written) */
	if (atomic_load_explicit(&p->efd_gone, memory_order_relaxed))
		return;
	while ((n = write(p->cb_efd, &one, sizeof(one))) < 0 && errno == EINTR)
		;
	/* EBADF: closed, or a file not open for writing under the number
	 * (a pipe's read end dup2'd there).  Nothing can wake the wait's
	 * poll through it. */
	if (n < 0 && errno == EBADF)
		cbw_efd_gone(p);
}

/* Runs in a thread glibc creates for the notification. */
static void cbw_notify(union sigval v)
{
	px_paio_req *q = v.sival_ptr;
	px_paio *p = q->owner;
	px_paio_req *head;

	atomic_fetch_add(&p->notifying, 1);
	head = atomic_load_explicit(&p->stack, memory_order_relaxed);
	do {
		atomic_store_explicit(&q->next, head, memory_order_relaxed);
	} while (!atomic_compare_exchange_weak_explicit(&p->stack, &head, q,
							memory_order_release,
							memory_order_relaxed));
	if (!head)
		cbw_kick(p);
	atomic_fetch_sub(&p->notifying, 1);
}

void px__paio_callback_notify(px_paio *p, px_paio_req *q)
{
	(void)p;
	q->cb.aio_sigevent.sigev_notify = SIGEV_THREAD;
	q->cb.aio_sigevent.sigev_notify_function = cbw_notify;
	q->cb.aio_sigevent.sigev_notify_attributes = NULL;
	q->cb.aio_sigevent.sigev_value.sival_ptr = q;
}

static int cbw_prepare(px_wait *w, px_list *started)
{
	px_paio *p = px_paio_of_wait(w);

	(void)started;
	p->retry_soon = !px_list_empty(&p->again);
	return 0;
}

static int cbw_wait(px_wait *w, int timeout_ms)
{
	px_paio *p = px_paio_of_wait(w);
	struct pollfd pfd[2] = { { .fd = p->cb_efd, .events = POLLIN },
				 { .fd = p->watch_fd, .events = POLLIN } };
	int rc;

	/* The watch (cbw_watch) is for this one wait. */
	p->watch_fd = -1;
	if (atomic_load_explicit(&p->stack, memory_order_acquire))
		return 1;
	if (p->retry_soon)
		timeout_ms = px__cap_ms(timeout_ms, PX_PAIO_RETRY_MS);
	/* The eventfd was closed behind the library's back: the notifier
	 * threads' writes and the interrupt's are lost, and poll said
	 * POLLNVAL at once, every time (a dedicated leader spun at a whole
	 * CPU).  EBADF makes the processor nap (at most 10 ms) instead; the
	 * stack is looked at after each nap (TESTING.md, fixed problem
	 * 294). */
	if (atomic_load_explicit(&p->efd_gone, memory_order_relaxed))
		return timeout_ms != 0 ? -EBADF : 0;
	rc = poll(pfd, pfd[1].fd >= 0 ? 2 : 1, timeout_ms);
	if (rc < 0)
		return -errno;
	if (pfd[0].revents & POLLNVAL) {
		cbw_efd_gone(p);
		return timeout_ms != 0 ? -EBADF : 0;
	}
	/* Woken by the watch alone: nothing of ours to report. */
	return pfd[0].revents ? 1 : 0;
}

/* The eventfd is readable while the stack holds a request (a push onto an
 * empty stack writes it; next_completed reads it before it takes the
 * stack) or an interrupt is pending: what another processor's wait needs
 * to watch to wake a lone thread for these completions. */
static int cbw_ready_fd(px_wait *w)
{
	return px_paio_of_wait(w)->cb_efd;
}

static void cbw_watch(px_wait *w, int fd)
{
	px_paio_of_wait(w)->watch_fd = fd;
}

static px_result *cbw_next_completed(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);
	px_result *r;

	if ((r = px__paio_next_failed(p)))
		return r;
	for (;;) {
		if (!p->ready) {
			uint64_t v;
			px_paio_req *s, *rev = NULL;

			/* Read first: a push after the read writes again.
			 * Not once the number may be the application's file:
			 * on a blocking pipe there, the read held the leader
			 * for good, and px_destroy with it (fixed problem
			 * 312). */
			if (atomic_load_explicit(&p->efd_gone,
						 memory_order_relaxed))
				p->cb_intr_pending = false;
			else if (read(p->cb_efd, &v, sizeof(v)) > 0)
				p->cb_intr_pending = false;
			s = atomic_exchange_explicit(&p->stack, NULL,
						     memory_order_acquire);
			while (s) {
				px_paio_req *n = atomic_load_explicit(
					&s->next, memory_order_relaxed);
				atomic_store_explicit(&s->next, rev,
						      memory_order_relaxed);
				rev = s;
				s = n;
			}
			p->ready = rev;
			if (!p->ready)
				return NULL;
		}
		px_paio_req *q = p->ready;
		p->ready = atomic_load_explicit(&q->next, memory_order_relaxed);
		atomic_store_explicit(&q->next, NULL, memory_order_relaxed);
		if ((r = px__paio_reap(p, q)))
			return r;
	}
}

static void cbw_wait_destroy(px_wait *w)
{
	(void)w;
}

/* The processor's idle check: the eventfd may have been replaced behind
 * the library's back by a file that takes the writes (the application's
 * eventfd or pipe under the number), where the waits' poll never woke. */
static void cbw_check(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);

	if (!atomic_load_explicit(&p->efd_gone, memory_order_relaxed) &&
	    !px__own_fd_is(p->cb_efd, &p->cb_id))
		cbw_efd_gone(p);
}

const px_wait_ops px__wait_aio_callback_ops = {
	.name = "callback",
	.destroy = cbw_wait_destroy,          /* nothing: in the provider */
	.on_start = NULL,
	.prepare = cbw_prepare,               /* nothing: the stack is ready */
	.wait = cbw_wait,                     /* poll on the eventfd */
	.next_completed = cbw_next_completed, /* take the stack, reap */
	.ready_fd = cbw_ready_fd,             /* the eventfd */
	.watch = cbw_watch,                   /* a second fd in the poll */
	.check = cbw_check,                   /* the eventfd still ours? */
};

/* ------------------------------------------------------------------ */
/* Native interrupt                                                     */
/* ------------------------------------------------------------------ */

static void cbw_intr_interrupt(px_intr *in)
{
	px_paio *p = px_paio_of_intr(in);

	if (p->cb_intr_pending)
		return;
	p->cb_intr_pending = true;
	cbw_kick(p);
}

static void cbw_intr_nop(px_intr *in)
{
	(void)in;
}

const px_intr_ops px__intr_aio_callback_ops = {
	.name = "native",
	.destroy = cbw_intr_nop,             /* the provider closes it */
	.interrupt = cbw_intr_interrupt,     /* write the eventfd */
	.leader_activated = NULL,
	.leader_deactivated = NULL,
	.drain = cbw_intr_nop,               /* next_completed reads it */
};

int px__paio_callback_init(px_paio *p)
{
	p->cb_efd = px__own_fd_id(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC),
				  &p->cb_id);
	if (p->cb_efd < 0)
		return -errno;
	atomic_init(&p->stack, NULL);
	atomic_init(&p->notifying, 0);
	p->wait.ops = &px__wait_aio_callback_ops;
	p->intr.ops = &px__intr_aio_callback_ops;
	return 0;
}

void px__paio_callback_fini(px_paio *p)
{
	/* Every request was reaped, so every notifier has pushed; wait for
	 * the last ones to be done with the eventfd. */
	while (atomic_load(&p->notifying))
		sched_yield();
	px__own_close_id(p->cb_efd, &p->cb_id);
}
