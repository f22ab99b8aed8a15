/*
 * wait_strategies/epoll.c - readiness through an epoll instance (Linux).
 *
 * A descriptor with pending operations is registered one-shot
 * (EPOLLONESHOT, level-triggered) for the directions it needs.  Once the
 * kernel reports it, the registration stays but is disarmed until the
 * provider re-arms it with EPOLL_CTL_MOD after handling the event.  MOD
 * failing with ENOENT means the number now names another open file (closed
 * and reused, or never added): then EPOLL_CTL_ADD.  The provider forgets
 * the arming of an idle descriptor, so a reused number is always re-armed.
 *
 * epoll_ctl is safe while the leader sits in epoll_pwait, so a start from
 * any thread arms directly and never needs to interrupt the leader.  The
 * interrupt's fd (if any) is registered once, level-triggered.  The leader
 * takes up to EP_BATCH events per wait; next_completed has the provider
 * claim the ready queue heads of all of them and do their I/O in one go,
 * with the proactor mutex released (providers/select.c).
 *
 * Quirks: a descriptor closed with operations pending leaves the interest
 * list silently (no event ever comes; those operations wait for px_cancel).
 * Regular files cannot be registered (EPERM); the provider never queues
 * them.
 */
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../providers/select.h"

#define EP_BATCH 256
#define EP_INTR_KEY UINT64_MAX   /* epoll_event.data of the interrupt fd */

struct ep_wait {
	px_sel_wait sw;
	int epfd;
	int nev, pos;         /* events from the last wait; next to handle */
	bool fired;           /* the interrupt went off: drain it */
	bool no_block;        /* results are waiting: do not block */
	struct epoll_event ev[EP_BATCH];
};

static struct ep_wait *to_ep(px_wait *w)
{
	return px_container_of(w, struct ep_wait, sw.base);
}

static unsigned ep_to_sel(uint32_t events)
{
	unsigned ev = 0;

	if (events & EPOLLIN)
		ev |= PX_SEL_IN;
	if (events & EPOLLOUT)
		ev |= PX_SEL_OUT;
	if (events & (EPOLLERR | EPOLLHUP))
		ev |= PX_SEL_ERR;
	return ev;
}

static void ep_drain(struct ep_wait *w)
{
	if (w->fired) {
		w->fired = false;
		w->sw.base.intr->ops->drain(w->sw.base.intr);
	}
}

/* Claim the I/O of the event at w->pos for the provider's next run. */
static void ep_claim_one(struct ep_wait *w)
{
	struct epoll_event *ev = &w->ev[w->pos++];
	px_sel_fd *e;

	if (ev->data.u64 == EP_INTR_KEY) {
		w->fired = true;
		ep_drain(w);
		return;
	}
	e = px_sel_lookup(w->sw.sel, (int)ev->data.u64);
	if (!e)
		return;
	e->armed = 0;   /* one-shot: the kernel disarmed it */
	px_sel_claim(w->sw.sel, e, ep_to_sel(ev->events));
}

/* Claim every event of the last wait, then one run for all of them. */
static void ep_handle_all(struct ep_wait *w, bool unlock)
{
	while (w->pos < w->nev)
		ep_claim_one(w);
	px_sel_run(w->sw.sel, unlock);
}

static int ep_arm(px_sel_wait *sw, px_sel_fd *e, unsigned want)
{
	struct ep_wait *w = px_container_of(sw, struct ep_wait, sw);
	struct epoll_event ev = { .events = EPOLLONESHOT };

	if (!(want & ~e->armed))
		return 0;
	if (want & PX_SEL_IN)
		ev.events |= EPOLLIN;
	if (want & PX_SEL_OUT)
		ev.events |= EPOLLOUT;
	ev.data.u64 = (uint64_t)e->fd;
	if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, e->fd, &ev) < 0) {
		if (errno != ENOENT)
			return -errno;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, e->fd, &ev) < 0)
			return -errno;
	}
	e->armed = want;
	return 0;
}

static int ep_prepare(px_wait *pw, px_list *started)
{
	struct ep_wait *w = to_ep(pw);

	(void)started;
	ep_drain(w);
	/* Events the processor did not ask for yet would leave their
	 * descriptors disarmed: handle them now. */
	if (w->pos < w->nev)
		ep_handle_all(w, false);
	w->nev = w->pos = 0;
	w->no_block = px_sel_has_done(w->sw.sel);
	return 0;
}

static int ep_wait_fn(px_wait *pw, int timeout_ms)
{
	struct ep_wait *w = to_ep(pw);
	const px_intr *in = pw->intr;
	int n;

	if (w->no_block)
		timeout_ms = 0;
	n = epoll_pwait(w->epfd, w->ev, EP_BATCH, timeout_ms, in->wait_mask);
	if (n < 0) {
		int err = errno;
		/* EINTR is how the signal interrupt arrives. */
		if (err == EINTR && (in->wait_mask || in->fd < 0))
			w->fired = true;
		return -err;
	}
	w->nev = n;
	w->pos = 0;
	return n;
}

static px_result *ep_next_completed(px_wait *pw)
{
	struct ep_wait *w = to_ep(pw);
	px_result *r;

	ep_drain(w);
	r = px_sel_pop_done(w->sw.sel);
	if (!r && w->pos < w->nev) {
		/* The provider releases the mutex around the I/O. */
		ep_handle_all(w, true);
		r = px_sel_pop_done(w->sw.sel);
	}
	return r;
}

static void ep_destroy(px_wait *pw)
{
	struct ep_wait *w = to_ep(pw);

	if (w->sw.base.intr)
		w->sw.base.intr->ops->destroy(w->sw.base.intr);
	if (w->epfd >= 0)
		close(w->epfd);
	free(w);
}

static int ep_create(px_sel *sel, const px_processor_config *cfg,
		     px_sel_wait **out);

const px_sel_wait_class px_sel_wait_epoll = {
	.wait = {
		.name = "epoll",
		.destroy = ep_destroy,             /* interrupt, epoll fd */
		.on_start = NULL,                  /* the provider arms */
		.prepare = ep_prepare,             /* nothing to build */
		.wait = ep_wait_fn,                /* epoll_pwait, EP_BATCH events */
		.next_completed = ep_next_completed, /* all events, one unlock */
	},
	.create = ep_create,
	.arm = ep_arm,                /* MOD one-shot, ADD on ENOENT */
	.reserve = NULL,              /* the kernel keeps the interest list */
	.fd_limit = INT32_MAX,
	.pf_flags = PX_PF_START_ANY_THREAD,
};

static int ep_create(px_sel *sel, const px_processor_config *cfg,
		     px_sel_wait **out)
{
	struct ep_wait *w = calloc(1, sizeof(*w));
	px_intr *in;
	int rc;

	if (!w)
		return -ENOMEM;
	w->sw.base.ops = &px_sel_wait_epoll.wait;
	w->sw.cls = &px_sel_wait_epoll;
	w->sw.sel = sel;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = px_intr_create(cfg, &in);
	if (rc < 0)
		goto fail;
	w->sw.base.intr = in;
	if (in->fd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN,
					  .data.u64 = EP_INTR_KEY };
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, in->fd, &ev) < 0) {
			rc = -errno;
			goto fail;
		}
	}
	*out = &w->sw;
	return 0;
fail:
	ep_destroy(&w->sw.base);
	return rc;
}
