/*
 * aiocb.c - the POSIX AIO provider's aio_suspend wait (providers/posix_aio.c
 * only) and its native interrupt.
 *
 * The list.  aio_suspend takes an array of aiocb pointers and waits until
 * one of them is no longer in progress.  glibc hooks a waiter onto every
 * request of the array for the length of the call; threads sharing one
 * array while it changed under them have tripped an assertion in glibc.
 * Here the array belongs to the leader alone: prepare() (mutex held)
 * rebuilds it from the provider's in-flight list when that list changed
 * since the last build (px_paio.gen: a request submitted or reaped), and
 * wait() (mutex released) passes it to aio_suspend.  A reaped request must
 * leave the array before the next wait: its aiocb says "finished" (or
 * belongs to another operation by then) and would make aio_suspend return
 * at once forever.  So when the array cannot grow (out of memory) it is
 * filled with what fits, never left as it was, and the wait over it is
 * bounded to AIOCB_SHORT_MS so that the walk finds the requests left out;
 * the first array is allocated at create.  No result in the array can be
 * freed during the wait,
 * since only the leader reaps.  Requests started by other threads are not
 * in the array, so a start from another thread must interrupt the leader
 * (the provider asks for start=any-interrupt).
 *
 * Which finished: next_completed() walks the in-flight list once per wait
 * and reaps every request whose aio_error is no longer EINPROGRESS.
 *
 * The interrupt.  aio_suspend only watches aiocbs (a signal would race
 * with the call, which takes no signal mask), so while requests are in
 * flight the interrupt is one of them: an 8-byte aio_read on an eventfd,
 * in the array whenever glibc has taken it (see below).  interrupt()
 * writes 1 to the eventfd, the helper's read returns and so does
 * aio_suspend; next_completed() sees it finished and queues the next read.
 * The read keeps one glibc helper thread for itself.  At destroy it is
 * finished by one last write.  Should glibc refuse the read (EAGAIN: no
 * memory, no helper thread), the list goes without it and the wait is
 * bounded to AIOCB_SHORT_MS, so that a start from another thread waits at
 * most that long; each prepare tries the read again.
 *
 * Idle.  glibc's helpers are one pool for the whole process, so a read
 * kept by a proactor with nothing in flight takes a helper from every
 * other user of POSIX AIO: idle proactors as many as aio_threads + 1
 * (the pool's size) left the others' requests queued for good.  So the
 * read is made only while requests are in flight (none at create).  With nothing in flight it is
 * given back: taken out of glibc's queue if no helper has it yet, else
 * ended with a write (the helper goes back to the pool at once; the
 * finished aiocb is reaped when next looked at).  That happens in a
 * prepare that finds nothing in flight (a dedicated processor, led all
 * the time), and in idle(), which the dispatcher calls for a shared
 * processor that has no work and no leader when a thread is about to
 * block or leave (a shared processor without work is not led, and its
 * read would otherwise keep the helper until the next request).  A lead
 * with nothing in flight and no read waits in poll(2) on the eventfd
 * itself, drained by the leader: no aiocb, no helper.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../providers/posix_aio.h"

#define AIOCB_LIST_MIN 64   /* entries of the first list (at create) */
#define AIOCB_SHORT_MS 10   /* longest wait over a list that is short */

/* The eventfd was closed behind the library's back (px_paio.efd_gone). */
static bool aiocb_gone(px_paio *p)
{
	return atomic_load_explicit(&p->efd_gone, memory_order_relaxed);
}

static void aiocb_set_gone(px_paio *p)
{
	atomic_store_explicit(&p->efd_gone, true, memory_order_relaxed);
}

static int aiocb_arm(px_paio *p)
{
	if (aiocb_gone(p))
		return -EBADF;  /* its read would fail at once, every time */
	memset(&p->intr_cb, 0, sizeof(p->intr_cb));
	p->intr_cb.aio_fildes = p->intr_efd;
	p->intr_cb.aio_buf = &p->intr_buf;
	p->intr_cb.aio_nbytes = sizeof(p->intr_buf);
	p->intr_cb.aio_sigevent.sigev_notify = SIGEV_NONE;
	if (aio_read(&p->intr_cb) < 0)
		return -errno;
	p->intr_armed = true;
	p->list_valid = false;
	return 0;
}

/* The interrupt's read has finished (mutex held): take it out of glibc. */
static void aiocb_reap_intr(px_paio *p)
{
	if (aio_return(&p->intr_cb) < 0 && aio_error(&p->intr_cb) == EBADF)
		aiocb_set_gone(p);
	p->intr_armed = false;
	p->intr_pending = false;
	/* The list holds the finished read: rebuilt in any case. */
	p->list_valid = false;
}

/* Nothing in flight: give the interrupt's helper back (see "Idle").  A
 * read still queued in glibc is taken back at once; one a helper runs is
 * ended by a write, and reaped when next looked at (its helper is free
 * as soon as it has read the write).  Mutex held. */
static void aiocb_give_back(px_paio *p)
{
	if (!p->intr_armed)
		return;
	if (aio_cancel(p->intr_efd, &p->intr_cb) != AIO_NOTCANCELED &&
	    aio_error(&p->intr_cb) != EINPROGRESS) {
		aiocb_reap_intr(p);
		return;
	}
	if (!p->intr_pending) {
		uint64_t one = 1;
		p->intr_pending = true;
		while (write(p->intr_efd, &one, sizeof(one)) < 0 &&
		       errno == EINTR)
			;
	}
}

static int aiocb_prepare(px_wait *w, px_list *started)
{
	px_paio *p = px_paio_of_wait(w);
	unsigned n = 0, want;

	(void)started;
	p->retry_soon = !px_list_empty(&p->again);
	p->idle_poll = false;
	if (px_list_empty(&p->inflight)) {
		/* The wait over an ended read alone lasts until its helper
		 * has read the write; the next prepare polls. */
		aiocb_give_back(p);
		if (!p->intr_armed) {
			p->idle_poll = true;
			return 0;
		}
	} else if (p->intr_armed && p->intr_pending &&
		   aio_error(&p->intr_cb) != EINPROGRESS) {
		/* Ended while idle (aiocb_idle), or by an interrupt: a new
		 * read now rather than a turn of the loop for the old one. */
		aiocb_reap_intr(p);
		aiocb_arm(p);
	} else if (!p->intr_armed) {
		/* glibc may refuse the interrupt's read (EAGAIN: no memory,
		 * no helper thread).  The list then goes without it, its wait
		 * is bounded like a short list's, and the next prepare tries
		 * again. */
		aiocb_arm(p);
	}
	/* The interrupt's read holds a helper thread.  When glibc cannot
	 * have another (aio_threads reached, or pthread_create refused),
	 * the requests queue behind that read and nothing ever ends it:
	 * after a wait that timed out with requests in flight, end it here,
	 * so that its helper goes on to the requests queued meanwhile. */
	if (p->suspend_idle && p->intr_armed && !p->intr_pending) {
		uint64_t one = 1;
		p->intr_pending = true;
		while (write(p->intr_efd, &one, sizeof(one)) < 0 &&
		       errno == EINTR)
			;
	}
	p->suspend_idle = false;
	if (p->list_valid && p->list_gen == p->gen)
		return 0;
	want = (unsigned)px_list_count(&p->inflight) + 1;
	if (want > p->cap) {
		unsigned cap = p->cap;
		while (cap < want)
			cap *= 2;
		const struct aiocb **l = realloc(p->list, cap * sizeof(*l));
		if (l) {
			p->list = l;
			p->cap = cap;
		}
	}
	/* Out of memory: the list holds what fits, the wait is bounded
	 * (AIOCB_SHORT_MS) and the walk after it finds the others; the next
	 * prepare tries to grow again.  Never the old list: its requests
	 * may have been reaped (their aiocbs say finished, or belong to
	 * other operations by now), and a wait over it returns at once. */
	p->list_short = want > p->cap || !p->intr_armed || aiocb_gone(p);
	if (p->intr_armed)
		p->list[n++] = &p->intr_cb;
	for (px_link *l = px_list_first(&p->inflight); l && n < p->cap;
	     l = px_list_next(&p->inflight, l))
		p->list[n++] = &px_paio_req_of_ilink(l)->cb;
	p->nlist = n;
	p->list_gen = p->gen;
	p->list_valid = !p->list_short;
	p->scan = true;
	return 0;
}

static int aiocb_wait(px_wait *w, int timeout_ms)
{
	px_paio *p = px_paio_of_wait(w);
	struct timespec ts, *tsp = NULL;
	int rc;

	if (p->list_short)
		timeout_ms = px__cap_ms(timeout_ms, AIOCB_SHORT_MS);
	if (p->retry_soon)
		timeout_ms = px__cap_ms(timeout_ms, PX_PAIO_RETRY_MS);
	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tsp = &ts;
	}
	if (p->idle_poll) {
		/* Nothing in flight, no read on the eventfd: wait on it
		 * here.  Only the leader reads it now, so a read after POLLIN
		 * does not block; next_completed() clears intr_pending under
		 * the lock. */
		struct pollfd pfd = { .fd = p->intr_efd, .events = POLLIN };
		uint64_t v;

		/* Closed behind the library's back: poll said POLLNVAL at
		 * once, every time, and a dedicated leader spun at a whole
		 * CPU.  EBADF makes the processor nap instead (TESTING.md,
		 * fixed problem 294). */
		if (aiocb_gone(p))
			return timeout_ms != 0 ? -EBADF : 0;
		rc = poll(&pfd, 1, timeout_ms);
		p->scan = true;
		if (rc < 0)
			return errno == EINTR ? 0 : -errno;
		if (rc == 0)
			return 0;
		if (pfd.revents & POLLNVAL) {
			aiocb_set_gone(p);
			return timeout_ms != 0 ? -EBADF : 0;
		}
		while (read(p->intr_efd, &v, sizeof(v)) < 0 && errno == EINTR)
			;
		p->idle_drained = true;
		return 1;
	}
	if (!p->nlist) {
		/* No interrupt and nothing in flight: sleep out the bound. */
		if (timeout_ms > 0)
			nanosleep(tsp, NULL);
		p->scan = true;   /* reap what finished meanwhile all the same */
		return 0;
	}
	rc = aio_suspend(p->list, (int)p->nlist, tsp);
	p->scan = true;
	if (rc < 0 && errno == EAGAIN && p->nlist > (p->intr_armed ? 1u : 0u))
		p->suspend_idle = true;
	if (rc < 0)
		return errno == EAGAIN ? 0 : -errno;
	return 1;
}

static px_result *aiocb_next_completed(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);
	px_result *r;

	if ((r = px__paio_next_failed(p)))
		return r;
	if (p->idle_drained) {
		p->idle_drained = false;
		p->intr_pending = false;
	}
	if (p->intr_armed && aio_error(&p->intr_cb) != EINPROGRESS) {
		/* A new read while requests are in flight (none if glibc
		 * refuses it, or while nothing is: see "Idle"). */
		aiocb_reap_intr(p);
		if (!px_list_empty(&p->inflight))
			aiocb_arm(p);
	}
	if (!p->scan)
		return NULL;
	return px__paio_scan_next(p);
}

/* A shared processor nobody leads, with nothing to do (the dispatcher,
 * mutex held): without this, the read made while requests were in flight
 * kept its helper until the next request, since only a lead's prepare
 * gives it back, and a shared processor without work is not led. */
static void aiocb_idle(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);

	if (px_list_empty(&p->inflight))
		aiocb_give_back(p);
}

static void aiocb_wait_destroy(px_wait *w)
{
	(void)w;   /* embedded in the provider */
}

/* The processor's idle check: the eventfd's number may name another file
 * now (closed behind the library's back and taken again, by the
 * application or by the library itself: px__own_fd_is), which the idle
 * wait's poll found readable and read at every turn, a leader spinning
 * at a whole CPU (a POSIX AIO dup or a rebuilt epoll instance there), or
 * whose writes the application's file took.  Gone, as for a close
 * (TESTING.md, fixed problem 312). */
static void aiocb_check(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);

	if (!aiocb_gone(p) && !px__own_fd_is(p->intr_efd, &p->intr_id))
		aiocb_set_gone(p);
}

const px_wait_ops px__wait_aiocb_ops = {
	.name = "aiocb",
	.destroy = aiocb_wait_destroy,          /* nothing: in the provider */
	.on_start = NULL,
	.prepare = aiocb_prepare,               /* rebuild the leader's list */
	.wait = aiocb_wait,                     /* aio_suspend over it */
	.next_completed = aiocb_next_completed, /* aio_error walk, reap */
	.idle = aiocb_idle,                     /* give the helper back */
	.check = aiocb_check,                   /* the eventfd still ours? */
};

/* ------------------------------------------------------------------ */
/* Native interrupt                                                     */
/* ------------------------------------------------------------------ */

static void aiocb_intr_interrupt(px_intr *in)
{
	px_paio *p = px_paio_of_intr(in);
	uint64_t one = 1;

	ssize_t n;

	/* (gone: the number may be another file by now, not to be
	 * written) */
	if (p->intr_pending || aiocb_gone(p))
		return;
	p->intr_pending = true;
	while ((n = write(p->intr_efd, &one, sizeof(one))) < 0 && errno == EINTR)
		;
	/* Closed behind the library's back: the read on it, which the
	 * leader's aio_suspend watches, can no longer end; later waits are
	 * bounded instead (aiocb_prepare: list_short). */
	if (n < 0 && errno == EBADF)
		aiocb_set_gone(p);
}

static void aiocb_intr_nop(px_intr *in)
{
	(void)in;   /* next_completed re-arms the read */
}

const px_intr_ops px__intr_aiocb_ops = {
	.name = "native",
	.destroy = aiocb_intr_nop,             /* the provider closes it */
	.interrupt = aiocb_intr_interrupt,     /* one write per drain cycle */
	.leader_activated = NULL,
	.leader_deactivated = NULL,
	.drain = aiocb_intr_nop,
};

int px__paio_aiocb_init(px_paio *p)
{
	/* Blocking: the helper's read waits for the write. */
	p->intr_efd = px__own_fd_id(eventfd(0, EFD_CLOEXEC), &p->intr_id);
	if (p->intr_efd < 0)
		return -errno;
	/* The first list now: prepare always has one to fill. */
	p->list = malloc(AIOCB_LIST_MIN * sizeof(*p->list));
	if (!p->list) {
		px__own_close_id(p->intr_efd, &p->intr_id);
		return -ENOMEM;
	}
	p->cap = AIOCB_LIST_MIN;
	p->wait.ops = &px__wait_aiocb_ops;
	p->intr.ops = &px__intr_aiocb_ops;
	/* No read yet: the first prepare with requests in flight makes it
	 * (see "Idle"). */
	return 0;
}

bool px__paio_aiocb_fini(px_paio *p)
{
	if (p->intr_armed) {
		const struct aiocb *one[1] = { &p->intr_cb };
		uint64_t v = 1;
		ssize_t n = 0;

		/* A running read cannot be cancelled: finish it (not by a
		 * write to a number that is not the eventfd any more). */
		if (aio_cancel(p->intr_efd, &p->intr_cb) != AIO_CANCELED) {
			if (!px__own_fd_is(p->intr_efd, &p->intr_id))
				n = -1;
			else
				while ((n = write(p->intr_efd, &v,
						  sizeof(v))) < 0 &&
				       errno == EINTR)
					;
		}
		if (n < 0 && aio_error(&p->intr_cb) == EINPROGRESS) {
			/* The eventfd was closed behind the library's back
			 * (close(2)) under the read a glibc helper performs:
			 * glibc refuses the cancel for the closed number, the
			 * write fails with EBADF, and nothing can end that
			 * read any more (the helper holds the file).  Waiting
			 * for it held px_destroy for good (TESTING.md, fixed
			 * problem 255).  glibc keeps the aiocb, so the
			 * caller leaves the provider's memory to it; the
			 * number, closed already and maybe the
			 * application's file by now, is only forgotten. */
			px__own_fd_drop_id(p->intr_efd, &p->intr_id);
			free(p->list);
			return true;
		}
		while (aio_error(&p->intr_cb) == EINPROGRESS)
			aio_suspend(one, 1, NULL);
		aio_return(&p->intr_cb);
	}
	px__own_close_id(p->intr_efd, &p->intr_id);
	free(p->list);
	return false;
}
