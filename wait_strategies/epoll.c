/*
 * wait_strategies/epoll.c - a poller (poller.h) over an epoll instance.
 *
 * A descriptor is registered one-shot (EPOLLONESHOT, level-triggered) for
 * the directions asked for, with its px_poll_reg as the event's data.
 * Once the kernel reports it, the registration stays but is disarmed until
 * the next set(), an EPOLL_CTL_MOD.  MOD failing with ENOENT means the
 * number now names another open file (closed and reused, or never added):
 * then EPOLL_CTL_ADD.  reg->armed spares the MOD when the kernel already
 * watches every direction asked for; a direction no longer wanted stays
 * armed until the next report (a spurious wake-up at most) rather than
 * cost a system call.  remove() is EPOLL_CTL_DEL only while something is
 * armed: a disarmed registration never reports, and the common way out
 * (reported, handled, nothing more to do) costs nothing.
 *
 * epoll_ctl is safe while another thread sits in epoll_pwait, so changes
 * take effect at once (PX_POLLER_LIVE): a thread that wants a descriptor
 * watched never needs to interrupt the waiting one.  The interrupt's fd
 * (if any) is registered once, level-triggered.  One wait takes up to
 * EP_BATCH events.
 *
 * The edge poller (px__poller_epoll_edge_create, PX_POLLER_EDGE) shares
 * the wait and the interrupt but registers a descriptor once, with
 * EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, and never disarms it: set() is an
 * EPOLL_CTL_ADD the first time only (EEXIST counts as done: the same file
 * is registered at that number already), collect() leaves reg->armed
 * alone, forget() clears it without a system call, and refresh() is an
 * EPOLL_CTL_MOD with the same events, which makes the kernel look at the
 * file again and queue an edge if it is ready, or an ADD (which looks at
 * the file too) when the number is not registered.  refresh() starts with
 * the call the registration most likely needs: ADD when this poller never
 * registered the number (reg->armed clear: a connect socket, a number
 * just accepted), else MOD; ENOENT from MOD or EEXIST from ADD sends it to
 * the other, so a new descriptor costs one epoll_ctl, not two.
 *
 * Quirks: a descriptor closed while registered leaves the interest list
 * silently (no event ever comes, no PX_POLL_NVAL) once the file itself
 * is gone; while another descriptor of the same file stays open (a dup,
 * or the copy a forked child inherited) the registration stays and may
 * still report the file's events under the old number, which the
 * callers treat as a spurious wake-up.  Regular files cannot be
 * registered: set() fails with -EPERM.
 *
 * The instance closed behind the library's back (an application's
 * close(2) of the number; px_close refuses it, close(2) cannot).  A wait
 * already inside epoll_pwait keeps the instance alive and goes on; the
 * next one fails with EBADF, or EINVAL once the number names another
 * file, and so does every epoll_ctl.  Before, the readiness provider's
 * stream operations then waited for good.  The edge poller marks itself
 * broken (px_poller.broken) when its wait, or an epoll_ctl whose target is
 * open, fails that way, and the provider's leader has rebuild() make a
 * new instance after its wait and registers again what it watches
 * (providers/select.c, sel_rebuilt).  The old number is dropped from the
 * record of the library's descriptors without a close: it is not ours
 * any more, and may be the application's next file.
 *
 * The number may also be taken by another epoll instance: the
 * application's own (epoll_create1 gets the lowest free number), or
 * another proactor's.  Then the waits and the epoll_ctl calls succeed on
 * it, and its events carry data that is not ours: taken for a
 * px_poll_reg pointer, an event of the application's crashed the leader
 * (TESTING.md, fixed problem 309).  So an event's data is checked before
 * use: each poller stamps its own (ep_key), the edge poller's with the
 * descriptor number in place of the pointer, so that its events are never
 * dereferenced at all.  An event without the poller's stamp means the
 * instance is not ours: the poller marks itself broken, as for EBADF, and
 * the wait fails.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "poller.h"

#define EP_BATCH 256
#define EP_INTR_KEY UINT64_MAX   /* epoll_event.data of the interrupt fd */
#define EP_WATCH_KEY (UINT64_MAX - 1) /* ... of the watched fd (ep_watch) */

/* A registration's epoll_event.data: the poller's stamp in the top 16
 * bits (struct ep.stamp: from 0x8000 up, never 0 nor 0xffff, so neither
 * a pointer, a small number nor the two keys above carries it), then the
 * edge poller's descriptor number (bits 0-31) or the one-shot poller's
 * px_poll_reg pointer (user-space addresses fit in 48 bits). */
#define EP_STAMP_SHIFT 48
#define EP_LOW_MASK ((UINT64_C(1) << EP_STAMP_SHIFT) - 1)

struct ep {
	px_poller base;
	int epfd;
	px_own_id ep_id;          /* what epfd named when made */
	int nev, pos;             /* events from the last wait; next to hand */
	/* The other processor's descriptor this one watches for a lone
	 * thread (ep_watch): registered one-shot under EP_WATCH_KEY, armed
	 * until a wait reports it. */
	int watch_fd;             /* -1: none registered */
	bool watch_armed;
	uint64_t stamp;           /* this poller's mark on its events' data */
	struct epoll_event ev[EP_BATCH];
};

static struct ep *ep_of(px_poller *pl)
{
	return px_container_of(pl, struct ep, base);
}

/* The data of reg's registration (see EP_STAMP_SHIFT). */
static uint64_t ep_key(const struct ep *w, const px_poll_reg *reg)
{
	if (w->base.flags & PX_POLLER_EDGE)
		return w->stamp | (uint32_t)reg->fd;
	return w->stamp | (uint64_t)(uintptr_t)reg;
}

/* Is data one of this poller's registrations?  Only then may the one-shot
 * poller take it for a pointer. */
static bool ep_key_ours(const struct ep *w, uint64_t data)
{
	if ((data & ~EP_LOW_MASK) != w->stamp)
		return false;
	if (w->base.flags & PX_POLLER_EDGE)
		return (data & EP_LOW_MASK) <= UINT32_MAX;
	return (data & EP_LOW_MASK) &&
	       !(data & (_Alignof(px_poll_reg) - 1));
}

static unsigned ep_events(uint32_t events)
{
	unsigned ev = 0;

	if (events & (EPOLLIN | EPOLLRDHUP))
		ev |= PX_POLL_IN;
	if (events & EPOLLOUT)
		ev |= PX_POLL_OUT;
	if (events & (EPOLLERR | EPOLLHUP))
		ev |= PX_POLL_ERR;
	return ev;
}

static int ep_set(px_poller *pl, px_poll_reg *reg, unsigned interest)
{
	struct ep *w = ep_of(pl);
	struct epoll_event ev = { .events = EPOLLONESHOT };

	interest &= PX_POLL_IN | PX_POLL_OUT;
	if (!(interest & ~reg->armed))
		return 0;
	if (interest & PX_POLL_IN)
		ev.events |= EPOLLIN;
	if (interest & PX_POLL_OUT)
		ev.events |= EPOLLOUT;
	if ((uintptr_t)reg > EP_LOW_MASK)
		return -EINVAL;       /* no room for the stamp (never seen) */
	ev.data.u64 = ep_key(w, reg);
	if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, reg->fd, &ev) < 0) {
		if (errno != ENOENT)
			return -errno;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, reg->fd, &ev) < 0)
			return -errno;
	}
	reg->armed = interest;
	return 0;
}

static void ep_remove(px_poller *pl, px_poll_reg *reg)
{
	struct ep *w = ep_of(pl);

	/* Errors mean it is not there any more (closed): fine. */
	if (reg->armed)
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, reg->fd, NULL);
	reg->armed = 0;
}

/* Edge registration: both directions, hang-ups, once. */
#define EP_EDGE_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

/* An epoll_ctl of the edge poller failed with err: was it the instance
 * that failed, closed behind the library's back, rather than the target?
 * EINVAL says the number is no epoll instance any more (closed and taken
 * by another file); EBADF may be either number's, so the instance is
 * asked.  If so, the poller is marked broken and its leader woken to
 * make a new one; returns true.  Under the caller's lock; costs nothing
 * unless epoll_ctl failed. */
static bool ep_broken(px_poller *pl, int err)
{
	struct ep *w = ep_of(pl);

	if (err != EINVAL &&
	    (err != EBADF || fcntl(w->epfd, F_GETFD) >= 0 || errno != EBADF))
		return false;
	if (!atomic_exchange_explicit(&pl->broken, true, memory_order_relaxed))
		pl->intr->ops->interrupt(pl->intr);
	return true;
}

/* A registration refused because the instance is gone (ep_broken): fine
 * for now if the target is open, as the rebuild registers it again;
 * -EBADF if it is not.  Else -err, as before. */
static int ep_edge_failed(px_poller *pl, px_poll_reg *reg, int err)
{
	reg->armed = 0;
	if (!ep_broken(pl, err))
		return -err;
	return fcntl(reg->fd, F_GETFD) < 0 ? -EBADF : 0;
}

static int ep_edge_set(px_poller *pl, px_poll_reg *reg, unsigned interest)
{
	struct ep *w = ep_of(pl);
	struct epoll_event ev = { .events = EP_EDGE_EVENTS,
				  .data.u64 = ep_key(w, reg) };

	(void)interest;
	if (reg->armed)
		return 0;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, reg->fd, &ev) < 0 && errno != EEXIST)
		return ep_edge_failed(pl, reg, errno);
	reg->armed = PX_POLL_IN | PX_POLL_OUT;
	return 0;
}

static void ep_edge_forget(px_poller *pl, px_poll_reg *reg)
{
	(void)pl;
	reg->armed = 0;
}

static int ep_edge_refresh(px_poller *pl, px_poll_reg *reg)
{
	struct ep *w = ep_of(pl);
	struct epoll_event ev = { .events = EP_EDGE_EVENTS,
				  .data.u64 = ep_key(w, reg) };
	/* Guess which call the number needs first: a registration this
	 * poller never made (a new connection, a number just accepted) is
	 * most likely absent, so ADD; one it made is most likely still
	 * there, so MOD.  A wrong guess costs the other call. */
	int first = reg->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	int rc = epoll_ctl(w->epfd, first, reg->fd, &ev);

	if (rc < 0 && errno == (first == EPOLL_CTL_MOD ? ENOENT : EEXIST))
		rc = epoll_ctl(w->epfd,
			       first == EPOLL_CTL_MOD ? EPOLL_CTL_ADD : EPOLL_CTL_MOD,
			       reg->fd, &ev);
	/* EEXIST from the ADD after a MOD said ENOENT: another thread's
	 * ADD came between the two; it is registered, which is all we want. */
	if (rc < 0 && errno != EEXIST)
		return ep_edge_failed(pl, reg, errno);
	reg->armed = PX_POLL_IN | PX_POLL_OUT;
	return 0;
}

static void ep_prepare(px_poller *pl)
{
	(void)pl;                 /* the kernel keeps the interest list */
}

static int ep_wait(px_poller *pl, int timeout_ms)
{
	struct ep *w = ep_of(pl);
	bool foreign = false;
	int n;

	/* The interrupt's descriptor was closed behind the library's back
	 * (px_intr.gone): the instance dropped it without a word, and every
	 * wake-up was late by the wait's whole bound (the idle check's, up to
	 * a second) for the rest of the proactor's life (TESTING.md, fixed
	 * problem 256).  One relaxed load on the healthy path. */
	if (atomic_load_explicit(&pl->intr->gone, memory_order_relaxed))
		timeout_ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
	/* The instance is gone (see the top): waiting on the number again
	 * would fail at once, or wait on whatever file it names now. */
	if (atomic_load_explicit(&pl->broken, memory_order_relaxed)) {
		w->nev = w->pos = 0;
		return -EBADF;
	}
	n = px__sys_epoll_pwait(w->epfd, w->ev, EP_BATCH, timeout_ms,
				pl->intr->wait_mask);
	if (n < 0) {
		int err = errno;

		w->nev = w->pos = 0;
		px_poller_wait_failed(pl, err);
		/* EBADF, or EINVAL (the number names another file now): the
		 * instance was closed behind our back.  Only the edge poller
		 * can be rebuilt (its provider, the readiness one, asks); the
		 * one-shot poller's (Linux AIO's) stops waiting on it, and
		 * either drops the number at destroy instead of closing what
		 * it names now. */
		if (err == EBADF || err == EINVAL)
			atomic_store_explicit(&pl->broken, true,
					      memory_order_relaxed);
		return -err;
	}
	w->nev = n;
	w->pos = 0;
	/* Take the interrupt and the watch out of the batch: neither is a
	 * descriptor of the caller's.  The watch was one-shot; the kernel
	 * disarmed it.  And an event without our stamp: another epoll
	 * instance took the number (see the top). */
	for (int i = 0; i < w->nev;) {
		if (w->ev[i].data.u64 == EP_INTR_KEY) {
			pl->fired = true;
			w->ev[i] = w->ev[--w->nev];
		} else if (w->ev[i].data.u64 == EP_WATCH_KEY) {
			w->watch_armed = false;
			w->ev[i] = w->ev[--w->nev];
		} else if (!ep_key_ours(w, w->ev[i].data.u64)) {
			foreign = true;
			w->ev[i] = w->ev[--w->nev];
		} else {
			i++;
		}
	}
	if (foreign) {
		/* What of ours it reported the rebuild tries anyway
		 * (providers/select.c, sel_rebuilt). */
		w->nev = 0;
		atomic_store_explicit(&pl->broken, true, memory_order_relaxed);
		return -EBADF;
	}
	/* Woken by the watch alone: 0 events, as a timeout would be. */
	return w->nev;
}

static size_t ep_collect(px_poller *pl, px_poll_event *out, size_t max)
{
	struct ep *w = ep_of(pl);
	bool edge = (pl->flags & PX_POLLER_EDGE) != 0;
	size_t n = 0;

	for (; w->pos < w->nev && n < max; w->pos++) {
		struct epoll_event *ev = &w->ev[w->pos];

		if (edge) {
			out[n].fd = (int)(uint32_t)ev->data.u64;
		} else {
			px_poll_reg *reg = (px_poll_reg *)(uintptr_t)
					   (ev->data.u64 & EP_LOW_MASK);

			reg->armed = 0;   /* one-shot: the kernel disarmed it */
			out[n].fd = reg->fd;
		}
		out[n].events = ep_events(ev->events);
		n++;
	}
	return n;
}

/* Close the instance, or only forget its number when it is not ours any
 * more, and free w. */
static void ep_release(struct ep *w)
{
	if (w->epfd < 0)
		;
	else if (atomic_load_explicit(&w->base.broken, memory_order_relaxed))
		px__own_fd_drop_id(w->epfd, &w->ep_id);   /* not ours any more */
	else
		px__own_close_id(w->epfd, &w->ep_id);
	free(w);
}

static void ep_verify(px_poller *pl);

static void ep_destroy(px_poller *pl)
{
	/* No wait may have found out yet that another epoll instance took
	 * the number (the application's): that one is not ours to close
	 * (TESTING.md, fixed problem 309).  One epoll_ctl. */
	ep_verify(pl);
	ep_release(ep_of(pl));
}

/* Register the interrupt's descriptor (if it has one, and it is still
 * the interrupt's: px_intr.foreign) with the instance. */
static int ep_add_intr(struct ep *w, px_intr *in)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_INTR_KEY };

	if (in->fd < 0 ||
	    atomic_load_explicit(&in->foreign, memory_order_relaxed) ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, in->fd, &ev) == 0)
		return 0;
	return -errno;
}

/* poller.h: a new instance for one closed behind our back (see the top).
 * What the old one watched the caller registers again; the watch of
 * another processor's descriptor is made again by the next ep_watch. */
static int ep_rebuild(px_poller *pl)
{
	struct ep *w = ep_of(pl);
	px_own_id id;
	int fd;

	if (!atomic_load_explicit(&pl->broken, memory_order_relaxed))
		return 0;
	fd = px__own_fd_id(epoll_create1(EPOLL_CLOEXEC), &id);
	if (fd < 0)
		return -errno;
	/* (The new instance may well have the old number, the lowest free
	 * one: then it stays in the record.) */
	if (fd != w->epfd)
		px__own_fd_drop_id(w->epfd, &w->ep_id);
	w->epfd = fd;
	w->ep_id = id;
	w->nev = w->pos = 0;
	w->watch_fd = -1;
	w->watch_armed = false;
	/* An interrupt descriptor closed too cannot be watched: the waits
	 * bound themselves as for px_intr.gone. */
	if (ep_add_intr(w, pl->intr) < 0)
		atomic_store_explicit(&pl->intr->gone, true,
				      memory_order_relaxed);
	atomic_store_explicit(&pl->broken, false, memory_order_relaxed);
	return 1;
}

/* poller.h: the instance under our number is ours if it is the file we
 * made (px__own_fd_is) and our interrupt's descriptor is registered in it
 * (an EPOLL_CTL_MOD that changes nothing).
 * ENOENT: another instance took the number, one that reports nothing of
 * ours, where the waits missed every report and every wake-up (TESTING.md,
 * fixed problem 309).  Without an interrupt descriptor (a signal, or one
 * closed behind our back) the identity alone tells; an event of the other
 * instance's does too (ep_wait). */
static void ep_verify(px_poller *pl)
{
	struct ep *w = ep_of(pl);
	px_intr *in = pl->intr;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_INTR_KEY };

	if (atomic_load_explicit(&pl->broken, memory_order_relaxed))
		return;
	/* First what the number names: the instance we made (its stamp,
	 * px__own_fd_is), or another file, or another epoll instance.  This
	 * is the only way to tell with a signal for an interrupt, or one
	 * whose descriptor was closed: an empty instance of the
	 * application's under our number went unnoticed there, the reads
	 * whose registrations died with ours waited until px_destroy, which
	 * then closed the application's instance (TESTING.md, fixed problem
	 * 312).  Two system calls, at the idle check. */
	if (!px__own_fd_is(w->epfd, &w->ep_id)) {
		atomic_store_explicit(&pl->broken, true, memory_order_relaxed);
		return;
	}
	if (in->fd < 0 || atomic_load_explicit(&in->gone, memory_order_relaxed))
		return;
	/* Then the interrupt's: an application's file under its number was
	 * not registered here, so the MOD below made a rebuild take it for
	 * the interrupt, whose drains then read its data, and whose writes
	 * went into it (fixed problem 312).  Gone now: the waits bound
	 * themselves, and it is neither written, drained nor watched. */
	if (px__intr_check_foreign(in))
		return;
	/* Through px__sys_epoll_ctl: the point is to look at a number the
	 * application may have closed or reused meanwhile, which
	 * ThreadSanitizer, modelling a descriptor as memory, reports against
	 * that close (as for Linux AIO's spill set). */
	if (px__sys_epoll_ctl(w->epfd, EPOLL_CTL_MOD, in->fd, &ev) == 0)
		return;
	if (errno == ENOENT)
		atomic_store_explicit(&pl->broken, true, memory_order_relaxed);
	else
		(void)ep_broken(pl, errno);   /* EBADF, EINVAL: gone */
}

/* Readable while events (or the interrupt) wait in the ready list. */
static int ep_ready_fd(px_poller *pl)
{
	return ep_of(pl)->epfd;
}

/* Watch another processor's descriptor for one wait (poller.h): one-shot,
 * level-triggered, so that a descriptor readable already reports at once.
 * Re-armed with a MOD only after a report (or for another descriptor), so
 * a lone thread that leads this poller again and again while the other
 * stays quiet pays one epoll_ctl, not one per lead.  That skip trusts the
 * number to name the same file while armed, which holds for what the
 * dispatcher passes (another processor's eventfd, epoll instance or
 * signalfd, open until the proactor is destroyed).  After a report, a
 * number closed and reused meanwhile makes MOD fail with ENOENT (the
 * kernel dropped the old file's registration at its close), and ADD
 * registers the new file. */
static void ep_watch(px_poller *pl, int fd)
{
	struct ep *w = ep_of(pl);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT,
				  .data.u64 = EP_WATCH_KEY };

	if (fd == w->watch_fd && w->watch_armed)
		return;
	if (w->watch_fd >= 0 && fd != w->watch_fd)
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, w->watch_fd, NULL);
	if (w->watch_fd != fd ||
	    epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 &&
		    (errno != EEXIST ||
		     epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)) {
			w->watch_fd = -1;   /* refused: the bound stands */
			w->watch_armed = false;
			return;
		}
	}
	w->watch_fd = fd;
	w->watch_armed = true;
}

static const px_poller_ops ep_ops = {
	.name = "epoll",
	.destroy = ep_destroy,        /* the epoll fd */
	.set = ep_set,                /* MOD one-shot, ADD on ENOENT */
	.remove = ep_remove,          /* DEL while armed */
	.prepare = ep_prepare,        /* nothing to build */
	.wait = ep_wait,              /* epoll_pwait, EP_BATCH events */
	.collect = ep_collect,
	.ready_fd = ep_ready_fd,
	.watch = ep_watch,            /* another's fd, one-shot */
	.verify = ep_verify,          /* our interrupt still registered? */
};

static const px_poller_ops ep_edge_ops = {
	.name = "epoll-edge",
	.destroy = ep_destroy,
	.set = ep_edge_set,           /* ADD once, both directions, EPOLLET */
	.remove = ep_remove,          /* DEL while registered */
	.prepare = ep_prepare,
	.wait = ep_wait,
	.collect = ep_collect,        /* nothing disarmed */
	.forget = ep_edge_forget,     /* no system call */
	.refresh = ep_edge_refresh,   /* MOD or ADD, the other on failure */
	.ready_fd = ep_ready_fd,
	.watch = ep_watch,
	.rebuild = ep_rebuild,        /* a new instance for a closed one */
	.verify = ep_verify,          /* our interrupt still registered? */
};

static atomic_uint ep_stamps;

static int ep_create(px_intr *in, bool edge, px_poller **out)
{
	struct ep *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	w->base.ops = edge ? &ep_edge_ops : &ep_ops;
	w->base.intr = in;
	w->base.flags = PX_POLLER_LIVE | (edge ? PX_POLLER_EDGE : 0);
	w->base.fd_limit = INT32_MAX;
	w->watch_fd = -1;
	/* One stamp per poller, so that another proactor's instance under
	 * our number is told apart too (0x8000 to 0xfffe). */
	w->stamp = (uint64_t)(0x8000u + atomic_fetch_add_explicit(
			&ep_stamps, 1, memory_order_relaxed) % 0x7fffu)
		   << EP_STAMP_SHIFT;
	w->epfd = px__own_fd_id(epoll_create1(EPOLL_CLOEXEC), &w->ep_id);
	if (w->epfd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = ep_add_intr(w, in);
	if (rc < 0)
		goto fail;
	*out = &w->base;
	return 0;
fail:
	ep_release(w);
	return rc;
}

int px__poller_epoll_create(px_intr *in, px_poller **out)
{
	return ep_create(in, false, out);
}

int px__poller_epoll_edge_create(px_intr *in, px_poller **out)
{
	return ep_create(in, true, out);
}
