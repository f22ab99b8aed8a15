/*
 * tp_reactor.c - Leader/Followers thread-pool reactor over epoll (see
 * tp_reactor.h for the rules it keeps).
 *
 * Thread roles, all decided under r->lock:
 *   dispatcher  there is a queued handler: take it, promote a follower if
 *               nobody leads or more handlers wait, run it unlocked;
 *   leader      nothing queued and nobody leads: wait in epoll_wait()
 *               unlocked, then queue the handlers that got events;
 *   follower    otherwise: sleep until promoted.
 */
#include "tp_reactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A sleeping thread; followers form a stack (LIFO promotion). */
typedef struct follower {
	pthread_cond_t cond;
	bool promoted;
	struct follower *next;
} follower;

struct tp_reactor {
	pthread_mutex_t lock;
	int epfd;
	int wakefd;             /* eventfd, written once by tp_reactor_stop */
	int max_events;
	bool leading;           /* a thread is in epoll_wait */
	bool stopped;
	tp_handler *ready_head, *ready_tail;
	follower *followers;
};

/* The epoll data of the wake eventfd; no handler has this address. */
static char wake_mark;

int tp_reactor_create(tp_reactor **out, int max_events)
{
	tp_reactor *r = calloc(1, sizeof *r);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &wake_mark };
	int err;

	if (r == NULL)
		return -ENOMEM;
	r->max_events = max_events > 0 ? max_events : 64;
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->epfd < 0 || r->wakefd < 0 ||
	    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &ev) != 0) {
		err = -errno;
		if (r->epfd >= 0)
			close(r->epfd);
		if (r->wakefd >= 0)
			close(r->wakefd);
		free(r);
		return err;
	}
	pthread_mutex_init(&r->lock, NULL);
	*out = r;
	return 0;
}

int tp_reactor_add(tp_reactor *r, tp_handler *h, int fd, tp_handle_fn *fn,
		   void *user)
{
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLET,
		.data.ptr = h,
	};

	h->fd = fd;
	h->fn = fn;
	h->user = user;
	h->pending = 0;
	h->running = false;
	h->queued = false;
	h->next = NULL;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		return -errno;
	return 0;
}

/* Lock held.  Queue h unless it is queued already or running (then its
 * runner sees the pending bits when it finishes). */
static void make_ready(tp_reactor *r, tp_handler *h)
{
	if (h->queued || h->running)
		return;
	h->queued = true;
	h->next = NULL;
	if (r->ready_tail != NULL)
		r->ready_tail->next = h;
	else
		r->ready_head = h;
	r->ready_tail = h;
}

/* Lock held. */
static tp_handler *take_ready(tp_reactor *r)
{
	tp_handler *h = r->ready_head;

	if (h != NULL) {
		r->ready_head = h->next;
		if (r->ready_head == NULL)
			r->ready_tail = NULL;
		h->queued = false;
	}
	return h;
}

/* Lock held.  Wake the most recently idle follower, if any. */
static void promote(tp_reactor *r)
{
	follower *f = r->followers;

	if (f == NULL)
		return;
	r->followers = f->next;
	f->promoted = true;
	pthread_cond_signal(&f->cond);
}

int tp_reactor_run(tp_reactor *r)
{
	struct epoll_event *evs = malloc(sizeof *evs * (size_t)r->max_events);
	follower me;
	int ret = 0;

	if (evs == NULL)
		return -ENOMEM;
	pthread_cond_init(&me.cond, NULL);
	pthread_mutex_lock(&r->lock);
	while (!r->stopped) {
		tp_handler *h = take_ready(r);

		if (h != NULL) {
			uint32_t ev = h->pending;

			/* Someone must lead (or take the next handler)
			 * while this thread is busy. */
			if (!r->leading || r->ready_head != NULL)
				promote(r);
			h->pending = 0;
			h->running = true;
			pthread_mutex_unlock(&r->lock);
			h->fn(h, ev);
			pthread_mutex_lock(&r->lock);
			h->running = false;
			/* Events that came while it ran: back in the
			 * queue, behind the handlers already waiting. */
			if (h->pending != 0)
				make_ready(r, h);
			continue;
		}
		if (!r->leading) {
			int n;

			r->leading = true;
			pthread_mutex_unlock(&r->lock);
			/* epoll_pwait without a mask is epoll_wait, and is
			 * the call every architecture has (tp_reactor.h: why
			 * not through glibc). */
			n = (int)syscall(SYS_epoll_pwait, r->epfd, evs,
					 r->max_events, -1, NULL, 0);
			if (n < 0 && errno != EINTR)
				ret = -errno;
			pthread_mutex_lock(&r->lock);
			r->leading = false;
			if (ret != 0)
				break;
			for (int i = 0; i < n; i++) {
				if (evs[i].data.ptr == &wake_mark)
					continue;
				h = evs[i].data.ptr;
				h->pending |= evs[i].events;
				make_ready(r, h);
			}
			continue;
		}
		me.promoted = false;
		me.next = r->followers;
		r->followers = &me;
		while (!me.promoted && !r->stopped)
			pthread_cond_wait(&me.cond, &r->lock);
		if (!me.promoted) {
			/* Stopped while asleep: leave the stack. */
			follower **p = &r->followers;

			while (*p != &me)
				p = &(*p)->next;
			*p = me.next;
		}
	}
	pthread_mutex_unlock(&r->lock);
	pthread_cond_destroy(&me.cond);
	free(evs);
	return ret;
}

void tp_reactor_stop(tp_reactor *r)
{
	uint64_t one = 1;

	pthread_mutex_lock(&r->lock);
	r->stopped = true;
	for (follower *f = r->followers; f != NULL; f = f->next)
		pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&r->lock);
	/* Get the leader out of epoll_wait. */
	if (write(r->wakefd, &one, sizeof one) < 0) {
		/* The counter cannot overflow from one write; nothing to do. */
	}
}

void tp_reactor_destroy(tp_reactor *r)
{
	close(r->epfd);
	close(r->wakefd);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
