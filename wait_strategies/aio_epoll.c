/*
 * aio_epoll.c - the epoll wait of the Linux AIO provider
 * (providers/linux_aio.c): the leader blocks in epoll over the context's
 * eventfd instead of in io_getevents.
 *
 * Every iocb the provider submits carries IOCB_FLAG_RESFD (libaio's
 * io_set_eventfd), so the kernel adds one to that eventfd per event it
 * posts.  The epoll set holds the eventfd and the interrupt's descriptor
 * (pipe or eventfd; with the signal interrupt, epoll_pwait takes its
 * wait_mask), so the context can sit in one epoll set with other
 * descriptors.  After the wait the eventfd is reset first and the ring
 * reaped second (io_getevents without waiting): an event posted after the
 * reap signals the eventfd after the reset, so none is left unnoticed.
 */
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "../providers/linux_aio.h"

static void aep_destroy(px_wait *w)
{
	(void)w;  /* embedded in the provider, which frees it */
}

static int aep_prepare(px_wait *w, px_list *started)
{
	(void)started;
	return px__laio_prepare(px_laio_of_wait(w), false);
}

static int aep_wait(px_wait *w, int timeout_ms)
{
	px_laio *u = px_laio_of_wait(w);
	struct epoll_event ev[2];
	struct timespec zero = { 0, 0 };
	int n, rc = 0;

	timeout_ms = px__laio_submit_leader(u, timeout_ms);
	n = epoll_pwait(u->epfd, ev, 2, timeout_ms, w->intr->wait_mask);
	if (n < 0) {
		rc = -errno;
		/* EINTR is how the signal interrupt arrives. */
		if (rc == -EINTR && (w->intr->wait_mask || w->intr->fd < 0))
			u->intr_fired = true;
		return rc;
	}
	for (int i = 0; i < n; i++) {
		if (ev[i].data.fd == u->resfd) {
			uint64_t v;
			while (read(u->resfd, &v, sizeof(v)) < 0 && errno == EINTR)
				;
			rc = px__laio_reap(u, 0, &zero, NULL);
		} else {
			u->intr_fired = true;
		}
	}
	return rc;
}

static px_result *aep_next_completed(px_wait *w)
{
	px_laio *u = px_laio_of_wait(w);

	if (u->intr_fired) {
		u->intr_fired = false;
		w->intr->ops->drain(w->intr);
	}
	return px__laio_next_completed(u);
}

const px_wait_ops px_wait_laio_epoll_ops = {
	.name = "epoll",
	.destroy = aep_destroy,                /* nothing: lives in the provider */
	.on_start = NULL,
	.prepare = aep_prepare,                /* claim pending iocbs */
	.wait = aep_wait,                      /* io_submit, epoll, reap the ring */
	.next_completed = aep_next_completed,  /* settle, then one event -> result */
};
