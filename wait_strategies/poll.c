/*
 * wait_strategies/poll.c - a poller (poller.h) over ppoll(2).
 *
 * The interest set is an array of pollfd, one slot per registered
 * descriptor (reg->slot), kept under the caller's lock; removal moves the
 * last slot into the hole.  prepare() copies it behind the interrupt's fd
 * into the wait's own array, which ppoll uses unlocked, so a change made
 * while another thread waits counts from the next prepare() only (not
 * LIVE).  The arrays grow in set(), at start time: when the interest
 * array grows, a wait array to match is allocated too and swapped in by
 * the next prepare(), so nothing allocates between a start and its
 * completion, and never while the wait runs.
 *
 * Quirks: POLLNVAL (a watched descriptor was closed) is reported as
 * PX_POLL_NVAL; ppoll only sees the close at its next call, so a wait
 * lasts at most PX_POLL_RECHECK_MS while any descriptor is registered.  A registration with no interest is kept with fd -1, which
 * ppoll skips: it must not report a hang-up nobody asked about.  No
 * descriptor limit.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "poller.h"

#define POLLP_MIN_CAP 64

struct pollp {
	px_poller base;
	struct pollfd *pfd;       /* interest, under the lock */
	px_poll_reg **reg;        /* the registration of each slot */
	size_t n, cap;            /* slots used; room in pfd and reg */
	struct pollfd *wpfd;      /* the wait's array: [0] the interrupt */
	px_poll_reg **wreg;       /* registrations at prepare time */
	size_t wcap;
	struct pollfd *spare;     /* bigger wait arrays for the next prepare */
	px_poll_reg **spare_reg;
	size_t spare_cap;
	nfds_t wn, pos, first;    /* filled; next to collect; 1 if [0] is the
	                             interrupt */
	bool bounded;             /* the wait watches descriptors: bound it */
	bool intr_gone;           /* the interrupt's descriptor was closed
	                             behind our back: no longer watched */
};

static struct pollp *pollp_of(px_poller *pl)
{
	return px_container_of(pl, struct pollp, base);
}

static unsigned pollp_events(short revents)
{
	unsigned ev = 0;

	if (revents & (POLLIN | POLLPRI))
		ev |= PX_POLL_IN;
	if (revents & POLLOUT)
		ev |= PX_POLL_OUT;
	if (revents & (POLLERR | POLLHUP))
		ev |= PX_POLL_ERR;
	if (revents & POLLNVAL)
		ev |= PX_POLL_NVAL;
	return ev;
}

/* Room for one more slot, and a wait array that can hold them all. */
static int pollp_grow(struct pollp *p)
{
	size_t cap = p->cap * 2;
	struct pollfd *pfd, *wpfd;
	px_poll_reg **reg, **wreg;

	pfd = realloc(p->pfd, cap * sizeof(*pfd));
	if (!pfd)
		return -ENOMEM;
	p->pfd = pfd;
	reg = realloc(p->reg, cap * sizeof(*reg));
	if (!reg)
		return -ENOMEM;
	p->reg = reg;
	/* The wait may be using wpfd now: the bigger one waits aside. */
	wpfd = malloc((cap + 1) * sizeof(*wpfd));
	wreg = malloc((cap + 1) * sizeof(*wreg));
	if (!wpfd || !wreg) {
		free(wpfd);
		free(wreg);
		return -ENOMEM;
	}
	free(p->spare);
	free(p->spare_reg);
	p->spare = wpfd;
	p->spare_reg = wreg;
	p->spare_cap = cap + 1;
	p->cap = cap;
	return 0;
}

static int pollp_set(px_poller *pl, px_poll_reg *reg, unsigned interest)
{
	struct pollp *p = pollp_of(pl);
	struct pollfd *q;

	if (reg->fd < 0)
		return -EBADF;
	if (!reg->slot) {
		if (p->n == p->cap) {
			int rc = pollp_grow(p);

			if (rc < 0)
				return rc;
		}
		p->reg[p->n] = reg;
		reg->slot = (unsigned)++p->n;
	}
	q = &p->pfd[reg->slot - 1];
	interest &= PX_POLL_IN | PX_POLL_OUT;
	q->fd = interest ? reg->fd : -1;
	q->events = (short)((interest & PX_POLL_IN ? POLLIN : 0) |
			    (interest & PX_POLL_OUT ? POLLOUT : 0));
	q->revents = 0;
	reg->armed = interest;
	return 0;
}

static void pollp_remove(px_poller *pl, px_poll_reg *reg)
{
	struct pollp *p = pollp_of(pl);
	size_t i, last;

	reg->armed = 0;
	if (!reg->slot)
		return;
	i = reg->slot - 1;
	last = --p->n;
	if (i != last) {
		p->pfd[i] = p->pfd[last];
		p->reg[i] = p->reg[last];
		p->reg[i]->slot = (unsigned)i + 1;
	}
	reg->slot = 0;
}

static void pollp_prepare(px_poller *pl)
{
	struct pollp *p = pollp_of(pl);
	nfds_t n = 0;

	if (p->spare) {
		free(p->wpfd);
		free(p->wreg);
		p->wpfd = p->spare;
		p->wreg = p->spare_reg;
		p->wcap = p->spare_cap;
		p->spare = NULL;
		p->spare_reg = NULL;
		p->spare_cap = 0;
	}
	if (atomic_load_explicit(&pl->intr->foreign, memory_order_relaxed))
		p->intr_gone = true;   /* pollp_verify */
	if (pl->intr->fd >= 0 && !p->intr_gone) {
		p->wpfd[0].fd = pl->intr->fd;
		p->wpfd[0].events = POLLIN;
		p->wpfd[0].revents = 0;
		p->wreg[0] = NULL;
		n = 1;
	}
	p->first = n;
	memcpy(p->wpfd + n, p->pfd, p->n * sizeof(*p->pfd));
	memcpy(p->wreg + n, p->reg, p->n * sizeof(*p->reg));
	p->wn = n + p->n;
	p->pos = p->wn;           /* nothing to collect until wait() */
	p->bounded = p->n > 0;
}

static int pollp_wait(px_poller *pl, int timeout_ms)
{
	struct pollp *p = pollp_of(pl);
	struct timespec ts;
	int n;

	if (p->bounded)
		timeout_ms = px__cap_ms(timeout_ms, PX_POLL_RECHECK_MS);
	if (p->intr_gone)
		timeout_ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
	n = ppoll(p->wpfd, p->wn, px_poll_timeout(timeout_ms, &ts),
		  pl->intr->wait_mask);
	if (n < 0) {
		int err = errno;

		px_poller_wait_failed(pl, err);
		return -err;
	}
	if (n > 0) {
		/* The interrupt's descriptor was closed behind the library's
		 * back (close(2)): every wait would end here at once.  It is
		 * watched no more, and waits last at most PX_NO_WAKE_MS
		 * (nothing can wake them), while the rest is still watched:
		 * failing the wait with EBADF made the processor nap, and the
		 * operations it watched were never served (TESTING.md, fixed
		 * problem 293). */
		if (p->first && (p->wpfd[0].revents & POLLNVAL)) {
			p->intr_gone = true;
			p->wpfd[0].revents = 0;
			n--;
		}
		if (p->first && p->wpfd[0].revents) {
			pl->fired = true;
			n--;
		}
		p->pos = p->first;
	}
	return n;
}

static size_t pollp_collect(px_poller *pl, px_poll_event *ev, size_t max)
{
	struct pollp *p = pollp_of(pl);
	size_t n = 0;

	for (; p->pos < p->wn && n < max; p->pos++) {
		struct pollfd *q = &p->wpfd[p->pos];
		px_poll_reg *reg = p->wreg[p->pos];

		if (!q->revents || !reg->slot)
			continue;       /* removed since the wait began */
		/* One-shot: disarm its current slot. */
		p->pfd[reg->slot - 1].fd = -1;
		p->pfd[reg->slot - 1].events = 0;
		reg->armed = 0;
		ev[n].fd = q->fd;
		ev[n].events = pollp_events(q->revents);
		n++;
	}
	return n;
}

static void pollp_destroy(px_poller *pl)
{
	struct pollp *p = pollp_of(pl);

	free(p->pfd);
	free(p->reg);
	free(p->wpfd);
	free(p->wreg);
	free(p->spare);
	free(p->spare_reg);
	free(p);
}

/* poller.h, at the processor's idle check: the interrupt's descriptor
 * replaced behind the library's back (px__intr_check_foreign), which the
 * next prepare then leaves out (intr_gone, the leader's). */
static void pollp_verify(px_poller *pl)
{
	(void)px__intr_check_foreign(pl->intr);
}

static const px_poller_ops pollp_ops = {
	.name = "poll",
	.destroy = pollp_destroy,
	.set = pollp_set,             /* a slot per descriptor; grows here */
	.remove = pollp_remove,       /* the last slot fills the hole */
	.prepare = pollp_prepare,     /* copy behind the interrupt's fd */
	.wait = pollp_wait,           /* ppoll with the intr's mask */
	.collect = pollp_collect,     /* every revents */
	.verify = pollp_verify,       /* the interrupt's fd still ours? */
};

int px__poller_poll_create(px_intr *in, px_poller **out)
{
	struct pollp *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->base.ops = &pollp_ops;
	p->base.intr = in;
	p->base.fd_limit = INT32_MAX;
	p->cap = POLLP_MIN_CAP;
	p->wcap = POLLP_MIN_CAP + 1;
	p->pfd = malloc(p->cap * sizeof(*p->pfd));
	p->reg = malloc(p->cap * sizeof(*p->reg));
	p->wpfd = malloc(p->wcap * sizeof(*p->wpfd));
	p->wreg = malloc(p->wcap * sizeof(*p->wreg));
	if (!p->pfd || !p->reg || !p->wpfd || !p->wreg) {
		pollp_destroy(&p->base);
		return -ENOMEM;
	}
	*out = &p->base;
	return 0;
}
