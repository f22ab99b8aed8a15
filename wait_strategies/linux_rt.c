/*
 * wait_strategies/linux_rt.c - a poller (poller.h) over Linux real-time
 * signals: every watched descriptor raises a queued signal at each change
 * of its state, addressed to the leader thread, which takes them with
 * sigtimedwait.  For a dedicated processor only (its class refuses it
 * otherwise): the kernel sends a descriptor's signal to one thread named
 * in advance.
 *
 * Registration (the first set() of a descriptor): F_SETOWN_EX with
 * F_OWNER_TID (the leader), F_SETSIG (LRT_SIGNO, SIGRTMIN+3), then O_ASYNC.
 * The kernel then queues one signal per state change (data arrived, room
 * to write, a connection, a hang-up, an error) with the descriptor in
 * si_fd and the poll bits in si_band.  remove() clears O_ASYNC (the
 * descriptor may be closed and its number reused once idle), and so does
 * destroy for everything still registered.
 *
 * Signals are edge-like: nothing is sent for a state that was already
 * there when O_ASYNC went on, or when a direction is armed again.  So
 * set() looks (poll with a zero timeout) at every direction it arms that
 * was not armed before, and queues what it finds for the next collect()
 * (waking the leader when another thread armed it).  After that, any
 * change raises a signal: taken while the direction is armed, it is
 * reported; taken while it is not, it is dropped, since the next set()
 * looks again.  Several signals of one descriptor in one wait become one
 * event.
 *
 * Writing.  Most sockets raise the "room to write" signal only after
 * something found them full (a send that failed, or TCP's poll).  An
 * AF_UNIX stream socket does not count its own poll: once a send filled
 * it past a quarter without failing, room comes back without a signal.
 * So while some descriptor is armed for writing after set() found it not
 * writable, the wait lasts at most LRT_OUT_RECHECK_MS, and one that runs
 * out polls every armed descriptor.
 *
 * Overflow.  Queued real-time signals count against RLIMIT_SIGPENDING;
 * when the queue is full the kernel sends a plain SIGIO instead.  The
 * leader waits for SIGIO too; after one it empties the queue and the next
 * collect() polls every armed descriptor (one poll(2) under the lock), so
 * no change is missed.  The same full poll follows a change of leader
 * thread (the first wait included): the descriptors are handed to the new
 * thread, and signals queued to the old one stay there.
 *
 * Interrupts.  A pipe's read end raises the same signal (O_ASYNC on it,
 * si_fd tells it apart); an eventfd cannot, so its fd is refused
 * (-EINVAL).  A signal interrupt blocks its signal in the leader and
 * publishes a wait mask without it; the wait takes every signal the
 * thread blocks but the mask lets through, so that signal wakes it too.
 *
 * Each wait takes the first signal with sigtimedwait and up to
 * LRT_BATCH - 1 more without waiting, one system call each.
 *
 * Locking: as poller.h says.  wait() writes only raw[], nraw, overflow
 * and base.fired, which collect() (same thread) reads under the lock.
 *
 * Dups.  F_SETOWN_EX, F_SETSIG and O_ASYNC belong to the open file, not
 * to the number, and its signals carry one number in si_fd: a socket
 * registered under two numbers (y = dup(a), or stdin and stdout of an
 * inetd-style service) raised signals for one of them only, and the first
 * to go idle turned O_ASYNC off for both, so a read pending on the other
 * waited for good.  So only the registration that turned O_ASYNC on turns
 * it off, and one that found it on already (a dup registered too, or the
 * application's own O_ASYNC) is polled as a writer is: the wait lasts at
 * most LRT_OUT_RECHECK_MS while there is one.
 *
 * Quirks: a descriptor whose driver has no asynchronous notification
 * (eventfd, timerfd, regular files, signalfd) is reported when set()
 * finds it ready, or at the next idle check (lrt_verify).  The signals
 * land on the leader thread: SIGRTMIN+3 and SIGIO stay blocked in every
 * thread that led (for good: the dedicated thread, or a thread that led
 * during px_destroy); a process-directed SIGIO the
 * application sends may be taken by the leader (it only costs a full
 * poll).  A descriptor the application itself set to O_ASYNC keeps its
 * owner, its signal and O_ASYNC: it is polled (see "Dups"), never owned.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "poller.h"

#define LRT_SIGNO (SIGRTMIN + 3)
#define LRT_BATCH 256           /* signals taken per wait, at most */
#define LRT_MIN_CAP 64
#define LRT_OUT_RECHECK_MS 10   /* see "Writing" */

/* What a descriptor had before this wait turned its O_ASYNC on: the
 * owner and the signal belong to the open file, the application's, and
 * are put back when the wait lets it go (lrt_disown). */
typedef struct lrt_saved {
	struct f_owner_ex owner;
	int signo;
	bool have;
} lrt_saved;

/* One registered descriptor (reg->slot - 1). */
typedef struct lrt_slot {
	px_poll_reg *reg;
	unsigned pend;          /* events to report at the next collect */
	bool queued;            /* on the ready stack */
	bool async;             /* owned by the leader, O_ASYNC on */
	bool mine;              /* its registration turned O_ASYNC on */
	bool shared;            /* O_ASYNC was on already: the file's signals
	                           may name another number (a dup), so it is
	                           polled as a writer is (see "Dups") */
	bool outw;              /* armed for writing, found not writable */
	lrt_saved saved;        /* with mine: owner and signal before */
} lrt_slot;

/* One signal taken by the last wait. */
typedef struct lrt_raw {
	int fd;
	unsigned events;
} lrt_raw;

struct lrt {
	px_poller base;
	int signo;
	/* Under the caller's lock: */
	lrt_slot *slot;         /* registrations */
	struct pollfd *pfd;     /* the full poll: one per slot, + interrupt */
	px_poll_reg **ready;    /* registrations with pend (a stack) */
	size_t n, cap, nready;
	px_poll_reg **byfd;     /* descriptor number -> registration */
	size_t nbyfd;
	bool full;              /* poll every armed descriptor at collect */
	size_t nout;            /* slots with outw */
	size_t nshared;         /* slots with shared */
	bool have_leader;
	bool intr_async;        /* the interrupt's fd raises the signal */
	/* The interrupt's owner and signal before the wait took them: its
	 * signal is the stamp that tells the library's descriptor from
	 * another file under its number (util.c, px__own_fd_id), which
	 * destroy must put back, or px_destroy took the interrupt for the
	 * application's file and left it open (one pipe end per proactor). */
	lrt_saved intr_saved;
	pthread_t leader;
	pid_t tid;
	sigset_t wset;          /* what the wait takes */
	bool wset_ok;
	bool nowait;            /* something to report: do not block */
	bool bounded;           /* nout or nshared > 0: LRT_OUT_RECHECK_MS at
	                           most */
	/* The leader's, between wait and collect: */
	bool overflow;          /* SIGIO, or a bounded wait ran out */
	size_t nraw;
	lrt_raw raw[LRT_BATCH];
};

static struct lrt *lrt_of(px_poller *pl)
{
	return px_container_of(pl, struct lrt, base);
}

static unsigned lrt_band(long band)
{
	unsigned ev = 0;

	if (band & (POLLIN | POLLRDNORM | POLLRDBAND | POLLPRI | POLLMSG))
		ev |= PX_POLL_IN;
	if (band & (POLLOUT | POLLWRNORM | POLLWRBAND))
		ev |= PX_POLL_OUT;
	if (band & (POLLERR | POLLHUP))
		ev |= PX_POLL_ERR;
	return ev;
}

static short lrt_pollev(unsigned interest)
{
	return (short)((interest & PX_POLL_IN ? POLLIN : 0) |
		       (interest & PX_POLL_OUT ? POLLOUT : 0));
}

static unsigned lrt_revents(short revents)
{
	unsigned ev = lrt_band(revents);

	if (revents & POLLNVAL)
		ev |= PX_POLL_NVAL;
	return ev;
}

/* Hand fd's signals to the leader thread.  Returns 1 if this turned
 * O_ASYNC on (or, with ours, found it on: fd was this wait's already, and
 * its owner moves to a new leader), 0 if it was on already, or -errno.
 * When it was on and not ours, the
 * owner and the signal are someone else's and stay so: another number of
 * the same file here, the application, or another process sharing the
 * open file (a forked worker's proactor, or its parent's, on an
 * inherited listener: the owner is a property of the open file, and
 * taking it sent the parent's signals to the child, and after the child
 * exited to nobody).  Such a descriptor is polled as shared. */
static int lrt_own_locked(struct lrt *w, int fd, bool ours, lrt_saved *sv)
{
	struct f_owner_ex o = { .type = F_OWNER_TID, .pid = w->tid };
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	if ((fl & O_ASYNC) && !ours)
		return 0;
	/* Turning O_ASYNC on: keep what the file had (the application's
	 * owner and signal, or the interrupt's stamp). */
	if (sv && !(fl & O_ASYNC)) {
		int sig = fcntl(fd, F_GETSIG);

		sv->have = sig >= 0 && fcntl(fd, F_GETOWN_EX, &sv->owner) == 0;
		sv->signo = sig;
	}
	if (fcntl(fd, F_SETOWN_EX, &o) < 0 || fcntl(fd, F_SETSIG, w->signo) < 0)
		return -errno;
	if (!(fl & O_ASYNC) && fcntl(fd, F_SETFL, fl | O_ASYNC) < 0)
		return -errno;
	return 1;
}

/* O_ASYNC is one of the file status flags, which the readiness calls of
 * providers/nbio.c change too from other threads (a connect's O_NONBLOCK
 * around its connect(2)): both read, change and write them back under
 * the library's flags lock (internal.h, px__flags_lock), so that neither
 * writes back a copy that misses the other's change. */
static int lrt_own(struct lrt *w, int fd, bool ours, lrt_saved *sv)
{
	int rc;

	px__flags_lock();
	rc = lrt_own_locked(w, fd, ours, sv);
	px__flags_unlock();
	return rc;
}

/* s was just owned, lrt_own said rc (>= 0). */
static void lrt_owned(struct lrt *w, lrt_slot *s, int rc)
{
	s->async = true;
	s->mine = rc == 1;
	if (!s->mine && !s->shared) {
		s->shared = true;
		w->nshared++;
	}
}

static void lrt_disown(int fd, const lrt_saved *sv)
{
	int fl;

	/* (Under the flags lock, as in lrt_own.) */
	px__flags_lock();
	fl = fcntl(fd, F_GETFL);
	/* EBADF: closed already, nothing to undo. */
	if (fl < 0 || !(fl & O_ASYNC)) {
		px__flags_unlock();
		return;
	}
	fcntl(fd, F_SETFL, fl & ~O_ASYNC);
	px__flags_unlock();
	/* O_ASYNC off first: no signal goes to the old owner meanwhile. */
	if (sv && sv->have) {
		fcntl(fd, F_SETOWN_EX, &sv->owner);
		fcntl(fd, F_SETSIG, sv->signo);
	}
}

static lrt_slot *lrt_slot_of(struct lrt *w, const px_poll_reg *reg)
{
	return &w->slot[reg->slot - 1];
}

static void lrt_outw(struct lrt *w, lrt_slot *s, bool on)
{
	if (s->outw != on) {
		s->outw = on;
		if (on)
			w->nout++;
		else
			w->nout--;
	}
}

/* Events ev (PX_POLL_*) of a registration, for the next collect().  wake:
 * the caller may not be the leader, which must then be woken. */
static void lrt_push(struct lrt *w, px_poll_reg *reg, unsigned ev, bool wake)
{
	lrt_slot *s = lrt_slot_of(w, reg);

	s->pend |= ev;
	if (s->queued)
		return;
	s->queued = true;
	w->ready[w->nready++] = reg;
	/* Through the interrupt, which knows whether its leader is there
	 * (signalling the thread directly could reach a thread that has
	 * ended, or another one with its identity). */
	if (wake && w->have_leader && !pthread_equal(pthread_self(), w->leader))
		w->base.intr->ops->interrupt(w->base.intr);
}

static void lrt_unqueue(struct lrt *w, px_poll_reg *reg)
{
	for (size_t i = 0; i < w->nready; i++) {
		if (w->ready[i] == reg) {
			w->ready[i] = w->ready[--w->nready];
			break;
		}
	}
	lrt_slot_of(w, reg)->queued = false;
}

static int lrt_grow(struct lrt *w)
{
	size_t cap = w->cap * 2;
	lrt_slot *slot;
	struct pollfd *pfd;
	px_poll_reg **ready;

	slot = realloc(w->slot, cap * sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	w->slot = slot;
	pfd = realloc(w->pfd, (cap + 1) * sizeof(*pfd));
	if (!pfd)
		return -ENOMEM;
	w->pfd = pfd;
	ready = realloc(w->ready, cap * sizeof(*ready));
	if (!ready)
		return -ENOMEM;
	w->ready = ready;
	w->cap = cap;
	return 0;
}

static int lrt_byfd_grow(struct lrt *w, int fd)
{
	size_t n = w->nbyfd ? w->nbyfd : 64;
	px_poll_reg **t;

	while (n <= (size_t)fd)
		n *= 2;
	t = realloc(w->byfd, n * sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t + w->nbyfd, 0, (n - w->nbyfd) * sizeof(*t));
	w->byfd = t;
	w->nbyfd = n;
	return 0;
}

static int lrt_register(struct lrt *w, px_poll_reg *reg)
{
	lrt_slot *s;
	int rc, owned = -1;
	lrt_saved sv = { .have = false };

	if ((size_t)reg->fd >= w->nbyfd && (rc = lrt_byfd_grow(w, reg->fd)) < 0)
		return rc;
	if (w->n == w->cap && (rc = lrt_grow(w)) < 0)
		return rc;
	/* Without a leader yet, its first prepare() hands it over. */
	if (w->have_leader && (owned = lrt_own(w, reg->fd, false, &sv)) < 0) {
		lrt_disown(reg->fd, &sv);
		return owned;
	}
	s = &w->slot[w->n];
	memset(s, 0, sizeof(*s));
	s->reg = reg;
	s->saved = sv;
	if (owned >= 0) {
		lrt_owned(w, s, owned);
		/* The first such slot: a wait already under way in another
		 * thread has no bound yet. */
		if (s->shared && w->nshared == 1 &&
		    !pthread_equal(pthread_self(), w->leader))
			w->base.intr->ops->interrupt(w->base.intr);
	}
	reg->slot = (unsigned)++w->n;
	reg->armed = 0;
	w->byfd[reg->fd] = reg;
	return 0;
}

static int lrt_set(px_poller *pl, px_poll_reg *reg, unsigned interest)
{
	struct lrt *w = lrt_of(pl);
	struct pollfd q;
	lrt_slot *s;
	unsigned fresh;
	int rc;

	if (reg->fd < 0)
		return -EBADF;
	if (!reg->slot && (rc = lrt_register(w, reg)) < 0)
		return rc;
	s = lrt_slot_of(w, reg);
	interest &= PX_POLL_IN | PX_POLL_OUT;
	fresh = interest & ~reg->armed;
	reg->armed = interest;
	s->pend &= interest | PX_POLL_ERR | PX_POLL_NVAL;
	if (!(interest & PX_POLL_OUT))
		lrt_outw(w, s, false);
	if (!fresh || !s->async)
		return 0;       /* no leader yet: its full poll looks */
	/* A state that is already there raises no signal: look now. */
	q.fd = reg->fd;
	q.events = lrt_pollev(fresh);
	q.revents = 0;
	while ((rc = poll(&q, 1, 0)) < 0 && errno == EINTR)
		;
	if (rc < 0)
		return -errno;
	if (q.revents & POLLNVAL)
		return -EBADF;
	if ((fresh & PX_POLL_OUT) && !q.revents) {
		lrt_outw(w, s, true);
		/* The first such writer: a wait already under way in another
		 * thread has no bound yet. */
		if (w->nout == 1 && w->have_leader &&
		    !pthread_equal(pthread_self(), w->leader))
			w->base.intr->ops->interrupt(w->base.intr);
	}
	if (q.revents)
		lrt_push(w, reg, lrt_revents(q.revents), true);
	return 0;
}

static void lrt_remove(px_poller *pl, px_poll_reg *reg)
{
	struct lrt *w = lrt_of(pl);
	size_t i, last;

	reg->armed = 0;
	if (!reg->slot)
		return;
	i = reg->slot - 1;
	lrt_outw(w, &w->slot[i], false);
	/* O_ASYNC belongs to the file, not to the number: turned off only
	 * by the registration that turned it on (a dup of the file that is
	 * registered too keeps its signals). */
	if (w->slot[i].async && w->slot[i].mine)
		lrt_disown(reg->fd, &w->slot[i].saved);
	if (w->slot[i].shared)
		w->nshared--;
	if (w->slot[i].queued)
		lrt_unqueue(w, reg);
	if ((size_t)reg->fd < w->nbyfd && w->byfd[reg->fd] == reg)
		w->byfd[reg->fd] = NULL;
	last = --w->n;
	if (i != last) {
		w->slot[i] = w->slot[last];
		w->slot[i].reg->slot = (unsigned)i + 1;
	}
	reg->slot = 0;
}

/* The interrupt's descriptor is another file now (lrt_verify). */
static bool lrt_intr_foreign(const struct lrt *w)
{
	return atomic_load_explicit(&w->base.intr->foreign,
				    memory_order_relaxed);
}

/* A new leader thread: block the signals there and hand it every
 * descriptor; what was queued to the old one is lost, so poll them all. */
static void lrt_take_leader(struct lrt *w)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, w->signo);
	sigaddset(&s, SIGIO);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	w->leader = pthread_self();
	w->tid = gettid();
	w->have_leader = true;
	w->wset_ok = false;
	for (size_t i = 0; i < w->n; i++) {
		/* A failure (closed) shows in the full poll as NVAL. */
		lrt_slot *sl = &w->slot[i];
		int rc = lrt_own(w, sl->reg->fd, sl->async && sl->mine,
				 &sl->saved);

		if (rc >= 0 && !sl->async)
			lrt_owned(w, sl, rc);
	}
	if (w->base.intr->fd >= 0 && !lrt_intr_foreign(w) &&
	    lrt_own(w, w->base.intr->fd, w->intr_async, &w->intr_saved) >= 0)
		w->intr_async = true;
	w->full = true;
}

/* The signals the wait takes: its own, SIGIO, and those the interrupt's
 * wait mask lets through although this thread blocks them (looked up at
 * every wait with a signal interrupt: its leader_activated blocks its
 * signal in the thread at a time of its own). */
static void lrt_make_wset(struct lrt *w)
{
	const sigset_t *wm = w->base.intr->wait_mask;
	sigset_t cur;

	if (w->wset_ok && !wm)
		return;
	sigemptyset(&w->wset);
	sigaddset(&w->wset, w->signo);
	sigaddset(&w->wset, SIGIO);
	if (wm && pthread_sigmask(SIG_BLOCK, NULL, &cur) == 0)
		for (int sig = 1; sig < NSIG; sig++)
			if (sigismember(&cur, sig) == 1 &&
			    sigismember(wm, sig) == 0)
				sigaddset(&w->wset, sig);
	w->wset_ok = true;
}

static void lrt_prepare(px_poller *pl)
{
	struct lrt *w = lrt_of(pl);

	if (!w->have_leader || !pthread_equal(pthread_self(), w->leader))
		lrt_take_leader(w);
	lrt_make_wset(w);
	w->nowait = w->nready > 0 || w->full;
	/* (No wake-up comes through an interrupt that is gone: bounded as
	 * the other waits are, PX_NO_WAKE_MS.) */
	w->bounded = w->nout > 0 || w->nshared > 0 ||
		     atomic_load_explicit(&pl->intr->gone, memory_order_relaxed);
}

static int lrt_wait(px_poller *pl, int timeout_ms)
{
	struct lrt *w = lrt_of(pl);
	const struct timespec zero = { 0, 0 };
	struct timespec ts;
	siginfo_t si;
	int sig;

	w->nraw = 0;
	w->overflow = false;
	if (w->nowait)
		timeout_ms = 0;
	else if (w->bounded)
		timeout_ms = px__cap_ms(timeout_ms, LRT_OUT_RECHECK_MS);
	sig = sigtimedwait(&w->wset, &si, px_poll_timeout(timeout_ms, &ts));
	if (sig < 0) {
		if (errno != EAGAIN)
			return -errno;
		/* Ran out with a writer waiting: look at them all. */
		w->overflow = w->bounded;
		return w->nowait ? 1 : 0;
	}
	do {
		if (sig == SIGIO) {
			/* The queue overflowed: empty it, then poll all.  Or
			 * an interrupt=signal given SIGIO itself: count it as
			 * the interrupt too (a drain with none pending costs
			 * nothing), or the strategy's pending mark, never
			 * drained, swallowed every later interrupt. */
			w->overflow = true;
			pl->fired = true;
		} else if (sig != w->signo ||
			   si.si_code < POLL_IN || si.si_code > POLL_HUP) {
			/* The interrupt's signal, or ours sent by hand (as by
			 * a signal interrupt given our number): a wake-up. */
			pl->fired = true;
		} else if (w->intr_async && si.si_fd == pl->intr->fd) {
			pl->fired = true;
		} else if (!w->overflow) {
			w->raw[w->nraw].fd = si.si_fd;
			w->raw[w->nraw].events = lrt_band(si.si_band);
			w->nraw++;
		}
		if (!w->overflow && w->nraw == LRT_BATCH)
			break;     /* the rest waits for the next wait */
	} while ((sig = sigtimedwait(&w->wset, &si, &zero)) > 0);
	/* (An estimate: collect() merges, and may add what set() found.) */
	return (int)w->nraw + (w->overflow || w->nowait ? 1 : 0);
}

/* Every armed descriptor (and the interrupt's), under the lock. */
static void lrt_poll_all(struct lrt *w)
{
	px_poller *pl = &w->base;
	size_t n = w->n;
	int rc;

	for (size_t i = 0; i < n; i++) {
		px_poll_reg *reg = w->slot[i].reg;

		w->pfd[i].fd = reg->armed ? reg->fd : -1;
		w->pfd[i].events = lrt_pollev(reg->armed);
		w->pfd[i].revents = 0;
	}
	w->pfd[n].fd = lrt_intr_foreign(w) ? -1 : pl->intr->fd;
	w->pfd[n].events = POLLIN;
	w->pfd[n].revents = 0;
	while ((rc = poll(w->pfd, n + 1, 0)) < 0 && errno == EINTR)
		;
	if (rc < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		/* A writer found not writable counts on the bound too. */
		if (w->slot[i].reg->armed & PX_POLL_OUT)
			lrt_outw(w, &w->slot[i], !w->pfd[i].revents);
		if (w->pfd[i].revents)
			lrt_push(w, w->slot[i].reg, lrt_revents(w->pfd[i].revents),
				 false);
	}
	if (w->pfd[n].revents & POLLIN)
		pl->fired = true;
}

static size_t lrt_collect(px_poller *pl, px_poll_event *out, size_t max)
{
	struct lrt *w = lrt_of(pl);
	size_t n = 0;

	/* What the wait took, merged per descriptor. */
	for (size_t i = 0; i < w->nraw; i++) {
		int fd = w->raw[i].fd;
		px_poll_reg *reg;
		unsigned ev;

		if (fd < 0 || (size_t)fd >= w->nbyfd || !(reg = w->byfd[fd]))
			continue;       /* stale: no longer watched */
		ev = reg->armed ? w->raw[i].events & (reg->armed | PX_POLL_ERR)
				: 0;
		if (ev)
			lrt_push(w, reg, ev, false);
	}
	w->nraw = 0;
	if (w->overflow || w->full) {
		w->overflow = false;
		w->full = false;
		lrt_poll_all(w);
	}
	while (n < max && w->nready) {
		px_poll_reg *reg = w->ready[--w->nready];
		lrt_slot *s = lrt_slot_of(w, reg);
		unsigned ev = reg->armed ? s->pend & (reg->armed | PX_POLL_ERR |
						      PX_POLL_NVAL)
					 : 0;

		s->queued = false;
		s->pend = 0;
		if (!ev)
			continue;
		reg->armed = 0;         /* one-shot */
		lrt_outw(w, s, false);
		out[n].fd = reg->fd;
		out[n].events = ev;
		n++;
	}
	return n;
}

static void lrt_destroy(px_poller *pl)
{
	struct lrt *w = lrt_of(pl);

	for (size_t i = 0; i < w->n; i++) {
		/* As in lrt_remove: only what this wait turned on. */
		if (w->slot[i].async && w->slot[i].mine)
			lrt_disown(w->slot[i].reg->fd, &w->slot[i].saved);
		w->slot[i].reg->slot = 0;
		w->slot[i].reg->armed = 0;
	}
	/* (Looked at here too: a number taken since the last idle check,
	 * or before the first, is the application's file, whose O_ASYNC,
	 * owner and signal the disown would change.) */
	if (w->intr_async &&
	    !px__intr_check_foreign_signed(pl->intr, w->signo))
		lrt_disown(pl->intr->fd, &w->intr_saved);
	if (w->have_leader && pthread_equal(pthread_self(), w->leader)) {
		/* Leave nothing of ours queued to this thread. */
		const struct timespec zero = { 0, 0 };
		sigset_t s;

		sigemptyset(&s);
		sigaddset(&s, w->signo);
		sigaddset(&s, SIGIO);
		while (sigtimedwait(&s, NULL, &zero) > 0)
			;
	}
	free(w->slot);
	free(w->pfd);
	free(w->ready);
	free(w->byfd);
	free(w);
}

/*
 * The processor's idle check (mutex held; the wait is a dedicated
 * thread's, which makes the check itself after a wait that collected
 * nothing, or every few seconds under load).
 *
 * Some changes of a descriptor raise no signal: the application's own
 * shutdown(SHUT_RD) of a socket, a terminal's hang-up, an AF_UNIX
 * listener shut down, a signalfd or a pidfd becoming readable, and every
 * change of a descriptor whose owner another process set to itself (a
 * forked child's F_SETOWN on an inherited socket: the owner belongs to
 * the open file).  What waits there used to wait for a cancel.  So each
 * check polls every armed descriptor once at the next collect (w->full:
 * one poll(2)), and such an operation ends within the check's gap
 * instead, 200 ms to a second.
 *
 * And the interrupt's pipe: still the one made for it?  Its stamp
 * signal is ours while the wait holds it (lrt_own), the usual one
 * before.  Foreign, it is neither owned, polled nor given back at
 * destroy (TESTING.md, fixed problem 325).
 */
static void lrt_verify(px_poller *pl)
{
	struct lrt *w = lrt_of(pl);

	(void)px__intr_check_foreign_signed(pl->intr,
					    w->intr_async ? w->signo : 0);
	w->full = true;
}

static const px_poller_ops lrt_ops = {
	.name = "linux_rt",
	.destroy = lrt_destroy,       /* O_ASYNC off everywhere */
	.set = lrt_set,               /* own + O_ASYNC once; look at new arms */
	.remove = lrt_remove,         /* O_ASYNC off */
	.prepare = lrt_prepare,       /* a new leader takes every descriptor */
	.wait = lrt_wait,             /* sigtimedwait, then the queue */
	.collect = lrt_collect,       /* merged per descriptor; full poll */
	.verify = lrt_verify,         /* a full poll; the interrupt's pipe */
};

int px__poller_linux_rt_create(px_intr *in, px_poller **out)
{
	struct lrt *w;
	struct stat st;

	/* The interrupt's descriptor must raise the signal: a pipe (an
	 * eventfd has no asynchronous notification). */
	if (in->fd >= 0 &&
	    (fstat(in->fd, &st) < 0 || !(S_ISFIFO(st.st_mode) ||
					 S_ISSOCK(st.st_mode))))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->base.ops = &lrt_ops;
	w->base.intr = in;
	w->base.flags = PX_POLLER_LIVE;
	w->base.fd_limit = INT32_MAX;
	w->signo = LRT_SIGNO;
	w->cap = LRT_MIN_CAP;
	w->slot = malloc(w->cap * sizeof(*w->slot));
	w->pfd = malloc((w->cap + 1) * sizeof(*w->pfd));
	w->ready = malloc(w->cap * sizeof(*w->ready));
	if (!w->slot || !w->pfd || !w->ready) {
		lrt_destroy(&w->base);
		return -ENOMEM;
	}
	*out = &w->base;
	return 0;
}
