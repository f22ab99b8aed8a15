/*
 * pipe.c - interrupt the leader through a self-pipe.
 *
 * The wait strategy watches the read end (px_intr.fd) for readability next
 * to the operations' descriptors.  interrupt() writes one byte; drain()
 * reads the pipe empty.  Both ends are non-blocking and close-on-exec.
 *
 * The "pending" flag (guarded by the proactor mutex, like every call here)
 * makes a burst of interrupts before the leader drains cost one write(2),
 * so the pipe never fills up.  A byte written while no leader waits is not
 * lost: the next wait finds the fd readable and returns at once, which is
 * merely a spurious wake-up.  Portable to any POSIX system.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"


struct px_intr_pipe {
	px_intr base;
	int wfd;          /* write end */
	px_own_id wfd_id; /* what wfd named when made */
	bool pending;     /* a byte is in the pipe and not yet drained */
};

static struct px_intr_pipe *to_pipe(px_intr *in)
{
	return px_container_of(in, struct px_intr_pipe, base);
}

static void pipe_destroy(px_intr *in)
{
	struct px_intr_pipe *p = to_pipe(in);

	px__own_close_id(p->base.fd, &p->base.fd_id);
	px__own_close_id(p->wfd, &p->wfd_id);
	free(p);
}

/* The interrupt's write failed with err (0: it did not).  EPIPE (the
 * read end closed behind the library's back with close(2)) or EBADF (the
 * write end) mean that nothing can wake the leader through the pipe any
 * more (px_intr.gone).  (pending stays set: no drain comes, and no more
 * writes are made.) */
static void pipe_note_gone(px_intr *in, int err)
{
	if (err == EPIPE || err == EBADF)
		atomic_store_explicit(&in->gone, true, memory_order_relaxed);
}

static void pipe_interrupt(px_intr *in)
{
	struct px_intr_pipe *p = to_pipe(in);
	const char c = 1;

	struct iovec v = { .iov_base = (void *)&c, .iov_len = 1 };
	sigset_t pipe_set, old, pend;
	bool was_pending = false;
	int fl = px__rwf_nosignal();
	ssize_t n;
	int err;

	if (p->pending ||
	    atomic_load_explicit(&in->foreign, memory_order_relaxed))
		return;
	p->pending = true;
	/* EAGAIN would mean the pipe is full: readable already, fine.
	 * EPIPE: the read end was closed behind the library's back with
	 * close(2) (the wait then naps or fails on it); the write must not
	 * raise SIGPIPE, whose default action ended the application's
	 * process in whichever thread interrupted (TESTING.md, fixed problem
	 * 292).  RWF_NOSIGNAL where the kernel takes it (6.18); elsewhere
	 * SIGPIPE blocked around the write and taken off again unless it was
	 * pending before, as the readiness calls' writes to pipes do
	 * (providers/nbio.c, nb_other_write). */
	if (fl) {
		while ((n = pwritev2(p->wfd, &v, 1, -1, fl)) < 0 &&
		       errno == EINTR)
			;
		pipe_note_gone(in, n < 0 ? errno : 0);
		return;
	}
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	if (sigismember(&old, SIGPIPE) && sigpending(&pend) == 0)
		was_pending = sigismember(&pend, SIGPIPE);
	while ((n = write(p->wfd, &c, 1)) < 0 && errno == EINTR)
		;
	err = n < 0 ? errno : 0;
	if (err == EPIPE && !was_pending) {
		const struct timespec zero = { 0, 0 };
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pipe_note_gone(in, err);
}

static void pipe_drain(px_intr *in)
{
	struct px_intr_pipe *p = to_pipe(in);
	char buf[64];
	ssize_t n;

	if (!atomic_load_explicit(&in->foreign, memory_order_relaxed)) {
		do {
			n = read(p->base.fd, buf, sizeof(buf));
		} while (n > 0 || (n < 0 && errno == EINTR));
	}
	p->pending = false;
}

/* The write end replaced behind the library's back (closed with close(2)
 * and its number taken, or dup2'ed over) takes the interrupt's byte into
 * the application's pipe, socket or file, one per drain cycle: checked
 * with the read end, at the idle check, and then written no more
 * (px_intr.foreign; TESTING.md, fixed problem 326). */
static bool pipe_writes_own(px_intr *in)
{
	struct px_intr_pipe *p = to_pipe(in);

	return px__own_fd_is(p->wfd, &p->wfd_id);
}

static const px_intr_ops pipe_ops = {
	.name = "pipe",
	.destroy = pipe_destroy,           /* close both ends */
	.interrupt = pipe_interrupt,       /* one byte per drain cycle */
	.leader_activated = NULL,          /* nothing to do per leader */
	.leader_deactivated = NULL,
	.drain = pipe_drain,               /* read until EAGAIN */
	.writes_own = pipe_writes_own,     /* the write end's identity */
};

int px__intr_pipe_create(const px_processor_config *cfg, px_intr **out)
{
	struct px_intr_pipe *p;
	int fds[2];

	(void)cfg;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0) {
		int rc = -errno;
		free(p);
		return rc;
	}
	p->base.ops = &pipe_ops;
	p->base.fd = px__own_fd_id(fds[0], &p->base.fd_id);
	p->base.wait_mask = NULL;
	p->wfd = px__own_fd_id(fds[1], &p->wfd_id);
	*out = &p->base;
	return 0;
}
