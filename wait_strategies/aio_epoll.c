/*
 * aio_epoll.c - the epoll wait of the Linux AIO provider
 * (providers/linux_aio.c): the leader blocks in epoll, through the epoll
 * poller (poller.h), over the context's eventfd instead of in io_getevents.
 *
 * Every iocb the provider submits carries IOCB_FLAG_RESFD (libaio's
 * io_set_eventfd), so the kernel adds one to that eventfd per event it
 * posts.  The poller watches the eventfd and the interrupt's descriptor
 * (pipe or eventfd; with the signal interrupt, its wait_mask), so the
 * context's completions are one more readable descriptor among those of
 * an epoll set.  Stream operations do not wait in poll iocbs here but in
 * the provider's epoll set (the spill set), which the poller watches too
 * (u->spill_reg, armed by the provider when operations wait there): the
 * kernel completes a poll iocb that carries IOCB_FLAG_RESFD from a work
 * item, which a loaded machine has run seconds late (see "Readiness and
 * the epoll wait" in providers/linux_aio.c).  Reports are one-shot:
 * prepare() arms the eventfd again when the last wait reported it.
 * After a report the eventfd is reset first and the ring reaped second
 * (io_getevents without waiting): an event posted after the reap signals
 * the eventfd after the reset, so none goes unnoticed.
 */
#include <time.h>
#include <unistd.h>

#include "../providers/linux_aio.h"

static void aep_destroy(px_wait *w)
{
	(void)w;  /* embedded in the provider, which frees it */
}

static int aep_prepare(px_wait *w, px_list *started)
{
	px_laio *u = px_laio_of_wait(w);
	int rc;

	(void)started;
	if (px_laio_dead(u) ||
	    atomic_load_explicit(&u->pl_failed, memory_order_relaxed))
		return px__laio_prepare(u, false);  /* no poller: see aep_wait */
	px_poller_drain(u->pl);
	rc = px__laio_prepare(u, false);
	if (!u->reg.armed) {
		int r2 = u->pl->ops->set(u->pl, &u->reg, PX_POLL_IN);
		if (r2 < 0)
			rc = r2;  /* the wait must not block on nothing */
	}
	u->pl->ops->prepare(u->pl);
	return rc;
}

static int aep_wait(px_wait *w, int timeout_ms)
{
	px_laio *u = px_laio_of_wait(w);
	int rc;

	timeout_ms = px__laio_submit_leader(u, timeout_ms);
	if (px_laio_dead(u) ||
	    atomic_load_explicit(&u->pl_failed, memory_order_relaxed)) {
		/* One of the provider's descriptors was closed behind our back
		 * (px_laio.dead): no iocb names resfd, nothing waits in the
		 * spill set, and the leader waits in the context itself, at
		 * most PX_NO_WAKE_MS (submit_leader's bound). */
		struct timespec ts, *tsp = NULL;

		if (timeout_ms >= 0) {
			ts.tv_sec = timeout_ms / 1000;
			ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
			tsp = &ts;
		}
		return px__laio_reap(u, timeout_ms == 0 ? 0 : 1, tsp, NULL);
	}
	u->polled = true;
	rc = u->pl->ops->wait(u->pl, timeout_ms);
	/* The poller's epoll instance (or a descriptor it watched) was
	 * closed behind our back: every wait would fail at once, and what
	 * resfd and the spill set report would never be seen. */
	if (rc == -EBADF) {
		atomic_store_explicit(&u->pl_failed, true, memory_order_relaxed);
		u->polled = false;
	}
	return rc;
}

/* The processor's idle check (leader, after its wait, mutex held).  The
 * poller's instance may have been closed and its number taken by another
 * epoll instance (the application's): the waits there succeed and report
 * nothing of ours, and resfd's completions were never reaped (TESTING.md,
 * fixed problem 309).  The poller looks (ep_verify); if the instance is
 * not ours, the provider stops using the poller as for a failed wait. */
static void aep_check(px_wait *w)
{
	px_laio *u = px_laio_of_wait(w);

	if (u->pl && u->pl->ops->verify && !px_laio_dead(u) &&
	    !atomic_load_explicit(&u->pl_failed, memory_order_relaxed)) {
		u->pl->ops->verify(u->pl);
		if (atomic_load_explicit(&u->pl->broken, memory_order_relaxed))
			atomic_store_explicit(&u->pl_failed, true,
					      memory_order_relaxed);
	}
	px__laio_check_own(u);
}

static px_result *aep_next_completed(px_wait *w)
{
	px_laio *u = px_laio_of_wait(w);
	px_poll_event ev[4];
	size_t n;

	if (u->polled) {
		u->polled = false;
		while ((n = u->pl->ops->collect(u->pl, ev, 4)) > 0) {
			for (size_t i = 0; i < n; i++) {
				struct timespec zero = { 0, 0 };
				uint64_t v;

				/* The provider's spill set, where every
				 * readiness wait is (u->spill_all): its
				 * reports are taken by next_completed. */
				if (ev[i].fd == u->spill_ep) {
					u->spill_fired = true;
					continue;
				}
				if (ev[i].fd != u->resfd)
					continue;
				while (read(u->resfd, &v, sizeof(v)) < 0 &&
				       errno == EINTR)
					;
				px__laio_reap(u, 0, &zero, NULL);
			}
		}
		px_poller_drain(u->pl);
	}
	if (atomic_load_explicit(&u->pl_failed, memory_order_relaxed))
		u->check_own = true;  /* (px__laio_check_own makes it dead) */
	return px__laio_next_completed(u);
}

const px_wait_ops px__wait_laio_epoll_ops = {
	.name = "epoll",
	.destroy = aep_destroy,                /* nothing: lives in the provider */
	.on_start = NULL,
	.prepare = aep_prepare,                /* claim pending iocbs, arm resfd */
	.wait = aep_wait,                      /* io_submit, then the poller */
	.next_completed = aep_next_completed,  /* reap, settle, event -> result */
	.check = aep_check,                    /* own descriptors closed? */
};
