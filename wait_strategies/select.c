/*
 * wait_strategies/select.c - a poller (poller.h) over pselect(2).
 *
 * The most portable wait.  The interest set is a pair of fd_sets kept
 * under the caller's lock; prepare() copies them (with the interrupt's fd)
 * into the wait's own pair, which pselect overwrites, unlocked, with what
 * is ready, and collect() walks the bits it left set.  A change made while
 * another thread waits counts from the next prepare() only (not LIVE).
 *
 * Quirks: an fd_set holds descriptors below FD_SETSIZE (1024) only, so
 * set() refuses higher ones with -EMFILE (and creation fails if the
 * interrupt's own fd is that high).  select fails the whole call with
 * EBADF when one descriptor in the sets is not open; collect() then looks
 * at every watched descriptor (fcntl F_GETFD) and reports the closed ones
 * with PX_POLL_NVAL, as poll does.  Errors and hang-ups show up as
 * readable or writable.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "poller.h"

struct selp {
	px_poller base;
	fd_set rd, wr;            /* interest, under the lock */
	int top;                  /* no descriptor above this is watched */
	fd_set wrd, wwr;          /* the wait's copies, then what is ready */
	int wmax;                 /* highest fd in the wait's sets, or -1 */
	int cur;                  /* next fd collect looks at */
	bool badf;                /* the wait said EBADF */
	px_poll_reg *regs[FD_SETSIZE]; /* the registration of each fd */
};

static struct selp *selp_of(px_poller *pl)
{
	return px_container_of(pl, struct selp, base);
}

static void selp_apply(struct selp *s, int fd, unsigned interest)
{
	if (interest & PX_POLL_IN)
		FD_SET(fd, &s->rd);
	else
		FD_CLR(fd, &s->rd);
	if (interest & PX_POLL_OUT)
		FD_SET(fd, &s->wr);
	else
		FD_CLR(fd, &s->wr);
}

static int selp_set(px_poller *pl, px_poll_reg *reg, unsigned interest)
{
	struct selp *s = selp_of(pl);
	int fd = reg->fd;

	if (fd < 0)
		return -EBADF;
	if (fd >= FD_SETSIZE)
		return -EMFILE;
	s->regs[fd] = reg;
	selp_apply(s, fd, interest);
	reg->armed = interest & (PX_POLL_IN | PX_POLL_OUT);
	if (fd > s->top)
		s->top = fd;
	return 0;
}

static void selp_remove(px_poller *pl, px_poll_reg *reg)
{
	struct selp *s = selp_of(pl);
	int fd = reg->fd;

	reg->armed = 0;
	if (fd < 0 || fd >= FD_SETSIZE || s->regs[fd] != reg)
		return;
	selp_apply(s, fd, 0);
	s->regs[fd] = NULL;
}

static bool selp_watched(const struct selp *s, int fd)
{
	return FD_ISSET(fd, &s->rd) || FD_ISSET(fd, &s->wr);
}

static void selp_prepare(px_poller *pl)
{
	struct selp *s = selp_of(pl);
	int ifd = pl->intr->fd;

	/* Lower the bound past descriptors no longer watched. */
	while (s->top >= 0 && !selp_watched(s, s->top))
		s->top--;
	s->wrd = s->rd;
	s->wwr = s->wr;
	s->wmax = s->top;
	if (ifd >= 0) {
		FD_SET(ifd, &s->wrd);
		if (ifd > s->wmax)
			s->wmax = ifd;
	}
	s->cur = s->wmax + 1;     /* nothing to collect until wait() */
	s->badf = false;
}

static int selp_wait(px_poller *pl, int timeout_ms)
{
	struct selp *s = selp_of(pl);
	const px_intr *in = pl->intr;
	struct timespec ts;
	int n;

	n = pselect(s->wmax + 1, &s->wrd, &s->wwr, NULL,
		    px_poll_timeout(timeout_ms, &ts), in->wait_mask);
	if (n < 0) {
		int err = errno;

		if (err == EBADF) {
			/* The sets are undefined now: collect() finds the
			 * closed descriptors under the lock. */
			s->badf = true;
			s->cur = 0;
			return 0;
		}
		px_poller_wait_failed(pl, err);
		return -err;
	}
	if (n > 0) {
		if (in->fd >= 0 && FD_ISSET(in->fd, &s->wrd)) {
			pl->fired = true;
			FD_CLR(in->fd, &s->wrd);
			n--;
		}
		s->cur = 0;
	}
	return n;
}

static size_t selp_collect(px_poller *pl, px_poll_event *ev, size_t max)
{
	struct selp *s = selp_of(pl);
	size_t n = 0;

	for (; s->cur <= s->wmax && n < max; s->cur++) {
		int fd = s->cur;
		px_poll_reg *reg = s->regs[fd];
		unsigned e = 0;

		if (!reg)
			continue;       /* removed since the wait began */
		if (s->badf) {
			if (selp_watched(s, fd) && fcntl(fd, F_GETFD) < 0 &&
			    errno == EBADF)
				e = PX_POLL_NVAL;
		} else {
			if (FD_ISSET(fd, &s->wrd))
				e |= PX_POLL_IN;
			if (FD_ISSET(fd, &s->wwr))
				e |= PX_POLL_OUT;
		}
		if (!e)
			continue;
		selp_apply(s, fd, 0);   /* one-shot */
		reg->armed = 0;
		ev[n].fd = fd;
		ev[n].events = e;
		n++;
	}
	return n;
}

static void selp_destroy(px_poller *pl)
{
	free(selp_of(pl));
}

static const px_poller_ops selp_ops = {
	.name = "select",
	.destroy = selp_destroy,
	.set = selp_set,              /* bits in the interest sets */
	.remove = selp_remove,
	.prepare = selp_prepare,      /* copy the sets for pselect */
	.wait = selp_wait,            /* pselect with the intr's mask */
	.collect = selp_collect,      /* set bits; NVAL after EBADF */
};

int px_poller_select_create(px_intr *in, px_poller **out)
{
	struct selp *s;

	if (in->fd >= FD_SETSIZE)
		return -EMFILE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &selp_ops;
	s->base.intr = in;
	s->base.fd_limit = FD_SETSIZE;
	FD_ZERO(&s->rd);
	FD_ZERO(&s->wr);
	s->top = -1;
	s->wmax = -1;
	*out = &s->base;
	return 0;
}
