/*
 * aio_getevents.c - the io_getevents wait of the Linux AIO provider
 * (providers/linux_aio.c), and its native interrupt.
 *
 * prepare() (leader, locked) claims the pending iocbs into the leader's
 * batch; wait() (leader, unlocked) submits that batch with one io_submit
 * and then blocks in io_getevents for at least one event, with the
 * timeout; next_completed() (locked) settles the batch and turns the
 * events into finished results.  With the signal interrupt the wait is
 * io_pgetevents (4.18) with the interrupt's wait_mask, so a signal sent
 * before the leader entered the kernel is not lost, and the interrupt is
 * drained after every wait (see age_wait).
 *
 * The native interrupt is a poll iocb on an eventfd, armed in the same
 * context: interrupt() writes the eventfd, the poll completes, and its
 * event wakes io_getevents like any other.  (A poll on a pipe would do as
 * well; what the older designs lacked was IOCB_CMD_POLL itself, 4.18.)
 * The poll is one-shot: next_completed() resets the eventfd when it sees
 * the event and the next prepare() arms the poll again, in the same
 * io_submit as the operations.  Written while no poll is armed, the
 * eventfd stays readable and the next poll completes inside its io_submit,
 * so the next wait returns at once.  Repeated interrupts before the event
 * is reaped cost one write.
 */
#include <time.h>
#include <unistd.h>

#include "../providers/linux_aio.h"

static void age_destroy(px_wait *w)
{
	(void)w;  /* embedded in the provider, which frees it */
}

static int age_prepare(px_wait *w, px_list *started)
{
	px_laio *u = px_laio_of_wait(w);

	(void)started;  /* the provider keeps its own lists */
	return px__laio_prepare(u, w->intr == &u->nintr);
}

static int age_wait(px_wait *w, int timeout_ms)
{
	px_laio *u = px_laio_of_wait(w);
	struct timespec ts, *tsp = NULL;
	int rc;

	timeout_ms = px__laio_submit_leader(u, timeout_ms);
	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tsp = &ts;
	}
	rc = px__laio_reap(u, timeout_ms == 0 ? 0 : 1, tsp, w->intr->wait_mask);
	/* The signal interrupt: drained after every wait, not only after
	 * EINTR.  Unlike ppoll and epoll_pwait, io_pgetevents keeps the
	 * signal unblocked until its handler has run whenever a signal is
	 * pending as it returns, even when it returns events: the signal is
	 * then consumed without EINTR.  Left undrained, the interrupt still
	 * thinks it pending and sends no other, and a dedicated leader (which
	 * never deactivates, where the flag is reset) slept through every
	 * later interrupt, px_destroy's included.  Draining when the signal
	 * is in fact still pending costs at most one early return. */
	if (w->intr != &u->nintr)
		u->intr_fired = true;
	return rc;
}

static void age_watch(px_wait *w, int fd)
{
	px_laio *u = px_laio_of_wait(w);

	/* A watch still armed from an earlier lead is on the same fd (the
	 * other processor's epoll instance never changes). */
	u->watch_fd = fd;
	u->watch_want = !u->watch_off;
}

static void age_check(px_wait *w)
{
	px__laio_check_own(px_laio_of_wait(w));
}

static px_result *age_next_completed(px_wait *w)
{
	px_laio *u = px_laio_of_wait(w);

	if (u->intr_fired) {
		u->intr_fired = false;
		w->intr->ops->drain(w->intr);
	}
	return px__laio_next_completed(u);
}

const px_wait_ops px__wait_laio_getevents_ops = {
	.name = "io_getevents",
	.destroy = age_destroy,                /* nothing: lives in the provider */
	.on_start = NULL,                      /* the iocb says it all */
	.prepare = age_prepare,                /* claim pending iocbs, arm the poll */
	.wait = age_wait,                      /* io_submit, then io_getevents */
	.next_completed = age_next_completed,  /* settle, then one event -> result */
	.watch = age_watch,                    /* a poll iocb on another's fd */
	.check = age_check,                    /* own descriptors closed? */
};

/* ------------------------------------------------------------------ */
/* Native interrupt                                                     */
/* ------------------------------------------------------------------ */

static void age_intr_destroy(px_intr *in)
{
	(void)in;  /* embedded in the provider, which closes the eventfd */
}

static void age_intr_interrupt(px_intr *in)
{
	px_laio *u = px_laio_of_intr(in);
	uint64_t one = 1;

	ssize_t n;

	if (u->intr_pending || px_laio_dead(u))
		return;  /* (dead: the leader naps; px_laio.dead) */
	u->intr_pending = true;
	/* EAGAIN (counter at its maximum) leaves the eventfd readable
	 * anyway. */
	while ((n = write(u->intr_fd, &one, sizeof(one))) < 0 && errno == EINTR)
		;
	if (n < 0 && errno == EBADF) {
		/* The eventfd was closed behind our back, under the poll
		 * that holds its file: nothing can make that poll fire.
		 * Its cancel puts an event in the ring, which wakes the
		 * leader; the provider then goes on without the eventfd
		 * (px__laio_check_own). */
		struct io_event ev;

		u->intr_pending = false;
		u->check_own = true;
		if (u->intr_armed)
			(void)px__laio_io_cancel(u->ctx, &u->intr_cb, &ev);
	}
}

static void age_intr_drain(px_intr *in)
{
	(void)in;  /* next_completed reset the eventfd when it saw the event */
}

const px_intr_ops px__intr_laio_ops = {
	.name = "native",
	.destroy = age_intr_destroy,     /* nothing: lives in the provider */
	.interrupt = age_intr_interrupt, /* write the eventfd the poll watches */
	.leader_activated = NULL,
	.leader_deactivated = NULL,
	.drain = age_intr_drain,         /* nothing to consume */
};
