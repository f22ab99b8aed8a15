/*
 * eventfd.c - interrupt the leader through an eventfd (Linux 2.6.27+ for
 * the flags).
 *
 * One descriptor instead of a pipe's two, and an 8-byte counter instead of
 * a buffer: interrupt() adds 1, the fd (px_intr.fd) is readable while the
 * counter is non-zero, and one read(2) in drain() resets it to zero (no
 * EFD_SEMAPHORE).  Non-blocking and close-on-exec.
 *
 * As with the pipe, a "pending" flag guarded by the proactor mutex makes
 * repeated interrupts before a drain cost a single write(2); an interrupt
 * with no leader waiting only makes the next wait return at once.
 */
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"


struct px_intr_eventfd {
	px_intr base;
	bool pending;     /* the counter is non-zero and not yet drained */
};

static struct px_intr_eventfd *to_efd(px_intr *in)
{
	return px_container_of(in, struct px_intr_eventfd, base);
}

static void efd_destroy(px_intr *in)
{
	struct px_intr_eventfd *e = to_efd(in);

	px__own_close_id(e->base.fd, &e->base.fd_id);
	free(e);
}

static void efd_interrupt(px_intr *in)
{
	struct px_intr_eventfd *e = to_efd(in);
	uint64_t one = 1;
	ssize_t n;

	if (e->pending ||
	    atomic_load_explicit(&in->foreign, memory_order_relaxed))
		return;
	e->pending = true;
	/* EAGAIN (counter at its maximum) leaves the fd readable anyway.
	 * EBADF: closed behind the library's back with close(2); nothing
	 * wakes the leader through it any more (px_intr.gone).  (pending
	 * stays set: no drain comes, and no more writes are made.) */
	while ((n = write(e->base.fd, &one, sizeof(one))) < 0 && errno == EINTR)
		;
	if (n < 0 && errno == EBADF)
		atomic_store_explicit(&in->gone, true, memory_order_relaxed);
}

static void efd_drain(px_intr *in)
{
	struct px_intr_eventfd *e = to_efd(in);
	uint64_t v;

	if (!atomic_load_explicit(&in->foreign, memory_order_relaxed))
		while (read(e->base.fd, &v, sizeof(v)) < 0 && errno == EINTR)
			;
	e->pending = false;
}

static const px_intr_ops eventfd_ops = {
	.name = "eventfd",
	.destroy = efd_destroy,            /* close the fd */
	.interrupt = efd_interrupt,        /* add 1, once per drain cycle */
	.leader_activated = NULL,          /* nothing to do per leader */
	.leader_deactivated = NULL,
	.drain = efd_drain,                /* one read resets the counter */
};

int px__intr_eventfd_create(const px_processor_config *cfg, px_intr **out)
{
	struct px_intr_eventfd *e;
	int fd;

	(void)cfg;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		free(e);
		return rc;
	}
	e->base.ops = &eventfd_ops;
	e->base.fd = px__own_fd_id(fd, &e->base.fd_id);
	e->base.wait_mask = NULL;
	*out = &e->base;
	return 0;
}
