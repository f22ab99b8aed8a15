/*
 * wait_strategies/select.c - readiness through pselect(2).
 *
 * The most portable wait.  prepare() fills a read and a write fd_set from
 * the provider's active descriptors plus the interrupt's fd; pselect works
 * on the wait's own copies, unlocked, and next_completed walks the bits it
 * left set.  A start from another thread must interrupt the leader so the
 * sets are rebuilt (PX_PF_START_INTERRUPT).
 *
 * Quirks: an fd_set holds descriptors below FD_SETSIZE (1024) only, so a
 * start on a higher one fails with -EMFILE (and creation fails if the
 * interrupt's own fd is that high).  select fails the whole call with EBADF
 * when one descriptor was closed with operations pending; next_completed
 * then finds the closed ones (fcntl F_GETFD) and completes their operations
 * with EBADF.  Errors and hang-ups show up as readable or writable.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "../providers/select.h"

struct select_wait {
	px_sel_wait sw;
	fd_set rd, wr;            /* filled by prepare, results of wait */
	int maxfd;                /* highest fd in the sets, or -1 */
	int cur;                  /* next fd to look at; > maxfd: done */
	bool fired;               /* the interrupt went off: drain it */
	bool badf;                /* select said EBADF */
	bool no_block;
};

static struct select_wait *to_select(px_wait *w)
{
	return px_container_of(w, struct select_wait, sw.base);
}

static void select_drain(struct select_wait *w)
{
	if (w->fired) {
		w->fired = false;
		w->sw.base.intr->ops->drain(w->sw.base.intr);
	}
}

static int select_prepare(px_wait *pw, px_list *started)
{
	struct select_wait *w = to_select(pw);
	px_list *active = px_sel_active(w->sw.sel);
	int ifd = pw->intr->fd, maxfd = -1;
	px_link *l;

	(void)started;
	select_drain(w);
	FD_ZERO(&w->rd);
	FD_ZERO(&w->wr);
	if (ifd >= 0) {
		FD_SET(ifd, &w->rd);
		maxfd = ifd;
	}
	for (l = px_list_first(active); l; l = px_list_next(active, l)) {
		px_sel_fd *e = px_sel_fd_of(l);
		/* Claimed directions too (see poll.c). */
		unsigned want = px_sel_fd_queued(e);

		/* The provider refuses fds >= FD_SETSIZE at start. */
		if (want & PX_SEL_IN)
			FD_SET(e->fd, &w->rd);
		if (want & PX_SEL_OUT)
			FD_SET(e->fd, &w->wr);
		if (e->fd > maxfd)
			maxfd = e->fd;
	}
	w->maxfd = maxfd;
	w->cur = maxfd + 1;       /* nothing to look at until wait() */
	w->no_block = px_sel_has_done(w->sw.sel);
	return 0;
}

static int select_wait_fn(px_wait *pw, int timeout_ms)
{
	struct select_wait *w = to_select(pw);
	const px_intr *in = pw->intr;
	struct timespec ts;
	int n;

	if (w->no_block)
		timeout_ms = 0;
	n = pselect(w->maxfd + 1, &w->rd, &w->wr, NULL,
		    px_sel_timeout(timeout_ms, &ts), in->wait_mask);
	if (n < 0) {
		int err = errno;
		if (err == EBADF) {
			/* The sets are undefined now; sort it out locked. */
			w->badf = true;
			return 0;
		}
		if (err == EINTR && (in->wait_mask || in->fd < 0))
			w->fired = true;
		return -err;
	}
	if (n > 0) {
		if (in->fd >= 0 && FD_ISSET(in->fd, &w->rd)) {
			w->fired = true;
			FD_CLR(in->fd, &w->rd);
		}
		w->cur = 0;
	}
	return n;
}

static px_result *select_next_completed(px_wait *pw)
{
	struct select_wait *w = to_select(pw);
	px_result *r;

	select_drain(w);
	if (w->badf) {
		w->badf = false;
		px_sel_check_closed(w->sw.sel);
	}
	r = px_sel_pop_done(w->sw.sel);
	if (r || w->cur > w->maxfd)
		return r;
	/* Claim every ready descriptor, then one run (the provider releases
	 * the mutex around the I/O; the sets are only the leader's). */
	for (; w->cur <= w->maxfd; w->cur++) {
		int fd = w->cur;
		unsigned ev = 0;
		px_sel_fd *e;

		if (FD_ISSET(fd, &w->rd))
			ev |= PX_SEL_IN;
		if (FD_ISSET(fd, &w->wr))
			ev |= PX_SEL_OUT;
		if (ev && (e = px_sel_lookup(w->sw.sel, fd)))
			px_sel_claim(w->sw.sel, e, ev);
	}
	px_sel_run(w->sw.sel, true);
	return px_sel_pop_done(w->sw.sel);
}

static void select_destroy(px_wait *pw)
{
	struct select_wait *w = to_select(pw);

	if (pw->intr)
		pw->intr->ops->destroy(pw->intr);
	free(w);
}

static int select_create(px_sel *sel, const px_processor_config *cfg,
			 px_sel_wait **out);

const px_sel_wait_class px_sel_wait_select = {
	.wait = {
		.name = "select",
		.destroy = select_destroy,         /* interrupt */
		.on_start = NULL,
		.prepare = select_prepare,         /* fd_sets from active fds */
		.wait = select_wait_fn,            /* pselect with the intr's mask */
		.next_completed = select_next_completed, /* all set bits, one unlock */
	},
	.create = select_create,
	.arm = NULL,                  /* prepare rebuilds everything */
	.reserve = NULL,              /* fd_sets have a fixed size */
	.fd_limit = FD_SETSIZE,
	.pf_flags = PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT,
};

static int select_create(px_sel *sel, const px_processor_config *cfg,
			 px_sel_wait **out)
{
	struct select_wait *w = calloc(1, sizeof(*w));
	px_intr *in;
	int rc;

	if (!w)
		return -ENOMEM;
	w->sw.base.ops = &px_sel_wait_select.wait;
	w->sw.cls = &px_sel_wait_select;
	w->sw.sel = sel;
	w->maxfd = -1;
	rc = px_intr_create(cfg, &in);
	if (rc < 0)
		goto fail;
	w->sw.base.intr = in;
	if (in->fd >= FD_SETSIZE) {
		rc = -EMFILE;
		goto fail;
	}
	*out = &w->sw;
	return 0;
fail:
	select_destroy(&w->sw.base);
	return rc;
}
