/*
 * wait_strategies/poll.c - readiness through ppoll(2).
 *
 * prepare() rebuilds the pollfd array from the provider's active
 * descriptors (plus the interrupt's fd, first) every time, so a start from
 * another thread must interrupt the leader for its descriptor to be
 * watched (PX_PF_START_INTERRUPT).  The array is owned by the wait and used
 * unlocked by wait(); when the active set outgrows it, a bigger one is
 * allocated at start time (reserve) and swapped in by the next prepare, so
 * nothing allocates between start and completion.
 *
 * Quirks: POLLNVAL (descriptor closed with operations pending) completes
 * those operations with EBADF instead of spinning.  No descriptor limit.
 */
#include <poll.h>
#include <stdlib.h>

#include "../providers/select.h"

#define POLL_MIN_CAP 64

struct poll_wait {
	px_sel_wait sw;
	struct pollfd *pfd;       /* in use by prepare/wait/next_completed */
	size_t cap;
	struct pollfd *spare;     /* bigger array for the next prepare */
	size_t spare_cap;
	nfds_t n, pos;            /* entries filled; next to look at */
	nfds_t first;             /* 1 when pfd[0] is the interrupt */
	bool fired;               /* the interrupt went off: drain it */
	bool no_block;
};

static struct poll_wait *to_poll(px_wait *w)
{
	return px_container_of(w, struct poll_wait, sw.base);
}

static unsigned poll_to_sel(short revents)
{
	unsigned ev = 0;

	if (revents & (POLLIN | POLLPRI))
		ev |= PX_SEL_IN;
	if (revents & POLLOUT)
		ev |= PX_SEL_OUT;
	if (revents & (POLLERR | POLLHUP))
		ev |= PX_SEL_ERR;
	if (revents & POLLNVAL)
		ev |= PX_SEL_NVAL;
	return ev;
}

static void poll_drain(struct poll_wait *w)
{
	if (w->fired) {
		w->fired = false;
		w->sw.base.intr->ops->drain(w->sw.base.intr);
	}
}

static int poll_reserve(px_sel_wait *sw, size_t nactive)
{
	struct poll_wait *w = px_container_of(sw, struct poll_wait, sw);
	size_t need = nactive + 1, have = w->spare ? w->spare_cap : w->cap;
	struct pollfd *p;
	size_t cap;

	if (need <= have)
		return 0;
	cap = have < POLL_MIN_CAP ? POLL_MIN_CAP : have;
	while (cap < need)
		cap *= 2;
	p = malloc(cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	free(w->spare);           /* never used by wait() */
	w->spare = p;
	w->spare_cap = cap;
	return 0;
}

static int poll_prepare(px_wait *pw, px_list *started)
{
	struct poll_wait *w = to_poll(pw);
	px_list *active = px_sel_active(w->sw.sel);
	px_link *l;
	nfds_t n = 0;

	(void)started;
	poll_drain(w);
	if (w->spare) {
		free(w->pfd);
		w->pfd = w->spare;
		w->cap = w->spare_cap;
		w->spare = NULL;
		w->spare_cap = 0;
	}
	if (pw->intr->fd >= 0) {
		w->pfd[n].fd = pw->intr->fd;
		w->pfd[n].events = POLLIN;
		w->pfd[n].revents = 0;
		n++;
	}
	w->first = n;
	for (l = px_list_first(active); l; l = px_list_next(active, l)) {
		px_sel_fd *e = px_sel_fd_of(l);
		/* Claimed directions too: whoever holds the claim does not
		 * tell the leader when it lets go. */
		unsigned want = px_sel_fd_queued(e);

		w->pfd[n].fd = e->fd;
		w->pfd[n].events = (short)((want & PX_SEL_IN ? POLLIN : 0) |
					   (want & PX_SEL_OUT ? POLLOUT : 0));
		w->pfd[n].revents = 0;
		n++;
	}
	w->n = n;
	w->pos = n;               /* nothing to look at until wait() */
	w->no_block = px_sel_has_done(w->sw.sel);
	return 0;
}

static int poll_wait_fn(px_wait *pw, int timeout_ms)
{
	struct poll_wait *w = to_poll(pw);
	const px_intr *in = pw->intr;
	struct timespec ts;
	int n;

	if (w->no_block)
		timeout_ms = 0;
	n = ppoll(w->pfd, w->n, px_sel_timeout(timeout_ms, &ts), in->wait_mask);
	if (n < 0) {
		int err = errno;
		if (err == EINTR && (in->wait_mask || in->fd < 0))
			w->fired = true;
		return -err;
	}
	if (n > 0) {
		if (w->first && w->pfd[0].revents)
			w->fired = true;
		w->pos = w->first;
	}
	return n;
}

static px_result *poll_next_completed(px_wait *pw)
{
	struct poll_wait *w = to_poll(pw);
	px_result *r;

	poll_drain(w);
	r = px_sel_pop_done(w->sw.sel);
	if (r || w->pos >= w->n)
		return r;
	/* Claim every ready descriptor, then one run (the provider releases
	 * the mutex around the I/O; the array is only the leader's). */
	for (; w->pos < w->n; w->pos++) {
		struct pollfd *p = &w->pfd[w->pos];
		px_sel_fd *e;

		if (p->revents && (e = px_sel_lookup(w->sw.sel, p->fd)))
			px_sel_claim(w->sw.sel, e, poll_to_sel(p->revents));
	}
	px_sel_run(w->sw.sel, true);
	return px_sel_pop_done(w->sw.sel);
}

static void poll_destroy(px_wait *pw)
{
	struct poll_wait *w = to_poll(pw);

	if (pw->intr)
		pw->intr->ops->destroy(pw->intr);
	free(w->pfd);
	free(w->spare);
	free(w);
}

static int poll_create(px_sel *sel, const px_processor_config *cfg,
		       px_sel_wait **out);

const px_sel_wait_class px_sel_wait_poll = {
	.wait = {
		.name = "poll",
		.destroy = poll_destroy,           /* interrupt, arrays */
		.on_start = NULL,
		.prepare = poll_prepare,           /* pollfd array from active fds */
		.wait = poll_wait_fn,              /* ppoll with the intr's mask */
		.next_completed = poll_next_completed, /* all revents, one unlock */
	},
	.create = poll_create,
	.arm = NULL,                  /* prepare rebuilds everything */
	.reserve = poll_reserve,      /* grow the array at start time */
	.fd_limit = INT32_MAX,
	.pf_flags = PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT,
};

static int poll_create(px_sel *sel, const px_processor_config *cfg,
		       px_sel_wait **out)
{
	struct poll_wait *w = calloc(1, sizeof(*w));
	px_intr *in;
	int rc;

	if (!w)
		return -ENOMEM;
	w->sw.base.ops = &px_sel_wait_poll.wait;
	w->sw.cls = &px_sel_wait_poll;
	w->sw.sel = sel;
	w->cap = POLL_MIN_CAP;
	w->pfd = malloc(w->cap * sizeof(*w->pfd));
	if (!w->pfd) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = px_intr_create(cfg, &in);
	if (rc < 0)
		goto fail;
	w->sw.base.intr = in;
	*out = &w->sw;
	return 0;
fail:
	poll_destroy(&w->sw.base);
	return rc;
}
