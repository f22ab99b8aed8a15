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
 * with PX_POLL_NVAL, as poll does.  It sees a close only at its next
 * call, so a wait lasts at most PX_POLL_RECHECK_MS while any descriptor
 * is watched.  Errors show up as readable or
 * writable, a hang-up as readable only: a descriptor watched for writing
 * alone is also put in the read set, for its hang-up (a socket shut down
 * while its send buffer is full is never writable again, and its pending
 * write would wait forever).  When it turns out readable without a
 * hang-up (poll with no events, at collect time), it is plain data nobody
 * asked for: not reported, and the descriptor stays out of the read set
 * until removed (it would wake every wait).  While such quiet descriptors
 * exist, a wait lasts at most SELP_QUIET_MS, and every SELP_QUIET_MS
 * collect looks at each of them for a hang-up the same way: a late
 * answer, but an answer.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "poller.h"

/* How often quiet descriptors are looked at for a hang-up. */
#define SELP_QUIET_MS 100

struct selp {
	px_poller base;
	fd_set rd, wr;            /* interest, under the lock */
	fd_set quiet;             /* watched for writing; readable data made
	                             them leave the read set (see above) */
	int nquiet;               /* descriptors in quiet */
	uint64_t quiet_due;       /* CLOCK_MONOTONIC ns of the next look */
	bool wquiet;              /* the wait's copy of nquiet != 0 */
	bool bounded;             /* the wait watches descriptors: bound it */
	bool check_quiet;         /* this collect looks at them */
	int top;                  /* no descriptor above this is watched */
	fd_set wrd, wwr;          /* the wait's copies, then what is ready */
	int wmax;                 /* highest fd in the wait's sets, or -1 */
	int cur;                  /* next fd collect looks at */
	bool badf;                /* the wait said EBADF */
	bool intr_gone;           /* the interrupt's descriptor was closed
	                             behind our back: no longer watched */
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
	if (FD_ISSET(fd, &s->quiet)) {
		FD_CLR(fd, &s->quiet);
		s->nquiet--;
	}
	s->regs[fd] = NULL;
}

static bool selp_watched(const struct selp *s, int fd)
{
	return FD_ISSET(fd, &s->rd) || FD_ISSET(fd, &s->wr);
}

/* dst = rd | (wr & ~quiet), a word at a time. */
static void selp_or_writers(fd_set *dst, const fd_set *rd, const fd_set *wr,
			    const fd_set *quiet)
{
	enum { W = sizeof(fd_set) / sizeof(unsigned long) };
	unsigned long d[W], w[W], q[W];

	memcpy(d, rd, sizeof(d));
	memcpy(w, wr, sizeof(w));
	memcpy(q, quiet, sizeof(q));
	for (size_t i = 0; i < W; i++)
		d[i] |= w[i] & ~q[i];
	memcpy(dst, d, sizeof(d));
}

/* fd was readable without being watched for reading: a hang-up (or an
 * error), or only data? */
static bool selp_hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = 0 };

	return poll(&p, 1, 0) > 0 &&
	       (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

static void selp_prepare(px_poller *pl)
{
	struct selp *s = selp_of(pl);
	int ifd = pl->intr->fd;

	/* Lower the bound past descriptors no longer watched. */
	while (s->top >= 0 && !selp_watched(s, s->top))
		s->top--;
	/* The read set also holds the descriptors watched for writing
	 * (their hang-up shows there only), but the quiet ones. */
	selp_or_writers(&s->wrd, &s->rd, &s->wr, &s->quiet);
	s->wwr = s->wr;
	s->wmax = s->top;
	if (atomic_load_explicit(&pl->intr->foreign, memory_order_relaxed))
		s->intr_gone = true;   /* selp_verify */
	if (ifd >= 0 && !s->intr_gone) {
		FD_SET(ifd, &s->wrd);
		if (ifd > s->wmax)
			s->wmax = ifd;
	}
	s->cur = s->wmax + 1;     /* nothing to collect until wait() */
	s->badf = false;
	s->wquiet = s->nquiet != 0;
	s->bounded = s->top >= 0;
	s->check_quiet = false;
}

static int selp_wait(px_poller *pl, int timeout_ms)
{
	struct selp *s = selp_of(pl);
	const px_intr *in = pl->intr;
	struct timespec ts;
	int n;

	if (s->bounded)
		timeout_ms = px__cap_ms(timeout_ms, PX_POLL_RECHECK_MS);
	if (s->wquiet)
		timeout_ms = px__cap_ms(timeout_ms, SELP_QUIET_MS);
	if (s->intr_gone)
		timeout_ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
	n = pselect(s->wmax + 1, &s->wrd, &s->wwr, NULL,
		    px_poll_timeout(timeout_ms, &ts), in->wait_mask);
	if (n < 0) {
		int err = errno;

		/* The interrupt's own descriptor closed behind the
		 * library's back (close(2)): every wait would fail at once.
		 * It is watched no more, and waits last at most
		 * PX_NO_WAKE_MS (nothing can wake them); this one
		 * returns at once, and the next watches the rest without it
		 * (failing with EBADF made the processor nap, and what it
		 * watched was never served: TESTING.md, fixed problem 293).
		 * One fcntl, on this path only. */
		if (err == EBADF && in->fd >= 0 && !s->intr_gone &&
		    fcntl(in->fd, F_GETFD) < 0) {
			s->intr_gone = true;
			s->cur = s->wmax + 1;  /* nothing to collect */
			return 0;
		}
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
		if (in->fd >= 0 && !s->intr_gone && FD_ISSET(in->fd, &s->wrd)) {
			pl->fired = true;
			FD_CLR(in->fd, &s->wrd);
			n--;
		}
		s->cur = 0;
	}
	/* Time to look at the quiet ones (see the opening comment)? */
	if (s->wquiet) {
		uint64_t now = px__now_ns();

		if (now >= s->quiet_due) {
			s->quiet_due = now + SELP_QUIET_MS * 1000000ull;
			s->check_quiet = true;
			s->cur = 0;
		}
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
			if (FD_ISSET(fd, &s->wrd)) {
				if (FD_ISSET(fd, &s->rd))
					e |= PX_POLL_IN;
				else if (selp_hung_up(fd))
					e |= PX_POLL_ERR;
				else if (!FD_ISSET(fd, &s->quiet)) {
					FD_SET(fd, &s->quiet);
					s->nquiet++;
				}
			} else if (s->check_quiet && FD_ISSET(fd, &s->quiet) &&
				   FD_ISSET(fd, &s->wr) && selp_hung_up(fd)) {
				e |= PX_POLL_ERR;
			}
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

/* poller.h, at the processor's idle check: the interrupt's descriptor
 * replaced behind the library's back (px__intr_check_foreign), which the
 * next prepare then leaves out (intr_gone, the leader's). */
static void selp_verify(px_poller *pl)
{
	(void)px__intr_check_foreign(pl->intr);
}

static const px_poller_ops selp_ops = {
	.name = "select",
	.destroy = selp_destroy,
	.set = selp_set,              /* bits in the interest sets */
	.remove = selp_remove,
	.prepare = selp_prepare,      /* copy the sets for pselect */
	.wait = selp_wait,            /* pselect with the intr's mask */
	.collect = selp_collect,      /* set bits; NVAL after EBADF */
	.verify = selp_verify,        /* the interrupt's fd still ours? */
};

int px__poller_select_create(px_intr *in, px_poller **out)
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
	FD_ZERO(&s->quiet);
	s->top = -1;
	s->wmax = -1;
	*out = &s->base;
	return 0;
}
