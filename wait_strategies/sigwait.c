/*
 * sigwait.c - the POSIX AIO provider's real-time signal wait
 * (providers/posix_aio.c only) and its native interrupt.
 *
 * Each request notifies with SIGEV_SIGNAL: glibc's helper queues the
 * signal (the class's rtsig=, SIGRTMIN+4 by default) to the process with
 * the result's address as its value once the result is set.  The signal is
 * blocked in every thread the proactor runs in, so it stays queued until
 * the leader takes it with sigtimedwait; the leader then takes whatever
 * else is queued without waiting (up to 64 per wait) and next_completed()
 * reaps the requests they name.  A value is only a hint: a request found
 * by a scan (below) may have been reaped, and its result reused, before
 * its signal is taken, so a value is reaped only if it is one of this
 * provider's submitted requests and aio_error says it has finished.
 *
 * Overflow.  Real-time signals are queued per user up to RLIMIT_SIGPENDING;
 * beyond that the helper's sigqueue fails and glibc drops the
 * notification without a word.  A dropped signal cannot be seen, so the
 * leader looks at every started request (aio_error, a read of memory)
 * whenever nothing came for a while: when no signal came for 1 s (5 ms
 * while the requests in flight could fill a quarter of the queue) and
 * requests are in flight, it scans; its wait is bounded by that time so
 * that it gets to look.  A signal caught by a thread that did not block
 * it (see posix_aio.h) lands in a handler that asks for the same scan.
 *
 * glibc writes a failed sigqueue's EAGAIN over the request's result; the
 * provider then does a file request again without a signal ("quiet"),
 * since a full queue would fail it the same way over and over, and while
 * quiet requests are in flight the leader waits at most 5 ms and scans
 * after every wait.
 *
 * The interrupt is the same signal, queued to the process with the
 * provider's own address as value: whichever thread leads takes it.  One
 * is in the queue at a time (sig_intr_pending); should the queue be full,
 * the bounded wait stands in for it.
 *
 * One proactor per signal number: the queue is the process's, and a leader
 * cannot tell another proactor's requests from stale ones.  Without rtsig=
 * each proactor takes the first free signal from SIGRTMIN+4 up; an rtsig=
 * already taken fails with -EBUSY.
 */
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../providers/posix_aio.h"

#define SIGW_DEFAULT_OFFSET 4   /* SIGRTMIN + 4 */
#define SIGW_IDLE_MS 1000       /* longest wait with requests in flight */
#define SIGW_BUSY_MS 5          /* ... when overflow is possible */

static pthread_mutex_t sigw_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	px_paio *owner;
	struct sigaction old;
	bool inherited;  /* owned by a proactor of the parent process: old
	                    is what was there before it */
} sigw_slot[NSIG];

/* Set by the handler: the signal reached a thread that did not block it.
 * One flag per signal: with one for the process, the first sigwait
 * proactor to prepare took another's flag, and the one whose request's
 * signal strayed waited out its bound before it scanned. */
static atomic_int sigw_stray[NSIG];

/* Per signal: the thread id of the leader while it is inside
 * sigtimedwait, else 0. */
static atomic_int sigw_waiter[NSIG];

/* Per signal: handlers between their look at sigw_waiter and the end of
 * their hand-on.  A leader whose wait has ended waits for them to finish
 * before its last look at the queue (sigw_wait), so that no handed-on
 * signal is left pending on its thread. */
static atomic_int sigw_handing[NSIG];

/* A signal that reached a thread that did not block it is handed on to
 * the leader inside its wait (with its value, so that the request or
 * interrupt it names is taken at once), else left to the scan the flag
 * asks for.  Without the hand-on the leader waited out its bound, up to
 * a second, for every completion and interrupt: the kernel gives a
 * process's signal to the same willing thread again and again.  Never
 * to this thread itself (it has the signal unblocked: that would loop);
 * sent to the leader thread alone, which keeps the signal blocked, so it
 * cannot land in this handler again.  rt_tgsigqueueinfo and getpid are
 * async-signal-safe system calls. */
static void sigw_handler(int signo, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)uc;
	if (signo <= 0 || signo >= NSIG)
		return;
	atomic_store(&sigw_stray[signo], 1);
	/* Counted before the look (both sequentially consistent): a leader
	 * that clears sigw_waiter after this look sees the count. */
	atomic_fetch_add(&sigw_handing[signo], 1);
	pid_t to = (pid_t)atomic_load(&sigw_waiter[signo]);
	if (si && to > 0 && to != (pid_t)syscall(SYS_gettid)) {
		siginfo_t fw;

		memset(&fw, 0, sizeof(fw));
		fw.si_signo = signo;
		fw.si_code = SI_QUEUE;
		fw.si_pid = getpid();
		fw.si_uid = getuid();
		fw.si_value = si->si_value;
		(void)px__sys_rt_tgsigqueueinfo(getpid(), to, signo, &fw);
	}
	atomic_fetch_sub(&sigw_handing[signo], 1);
	errno = saved;
}

/* Block signo in this thread; was it blocked already? */
static bool sigw_block(int signo)
{
	sigset_t set, old;

	sigemptyset(&set);
	sigaddset(&set, signo);
	if (pthread_sigmask(SIG_BLOCK, &set, &old) != 0)
		return true;
	return sigismember(&old, signo) == 1;
}

void px__paio_sigwait_notify(px_paio *p, px_paio_req *q)
{
	q->cb.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
	q->cb.aio_sigevent.sigev_signo = p->signo;
	q->cb.aio_sigevent.sigev_value.sival_ptr = q;
}

static int sigw_prepare(px_wait *w, px_list *started)
{
	px_paio *p = px_paio_of_wait(w);

	(void)started;
	p->ngot = p->igot = 0;
	p->retry_soon = !px_list_empty(&p->again);
	/* The last wait ended without a signal (ran out, or EINTR: woken
	 * for a signal another thread took first) while an interrupt was
	 * marked as queued: a thread of the application may have taken it
	 * (with sigwaitinfo, sigtimedwait or a signalfd).  Left set, the
	 * mark kept every later interrupt from being sent, and each waited
	 * out the leader's bound.  Cleared, it costs at most one interrupt
	 * more in the queue, taken as a stale one.  A stray that reached
	 * the handler may have been the interrupt too. */
	if (p->took_none) {
		p->took_none = false;
		p->sig_intr_pending = false;
	}
	if (atomic_exchange(&sigw_stray[p->signo], 0)) {
		p->scan = true;
		p->sig_intr_pending = false;
	}
	p->cap_ms = p->nquiet || px_list_count(&p->inflight) >= p->sigq_max / 4
			    ? SIGW_BUSY_MS
			    : SIGW_IDLE_MS;
	return p->scan ? -EAGAIN : 0;  /* scan first: no blocking wait */
}

static int sigw_wait(px_wait *w, int timeout_ms)
{
	px_paio *p = px_paio_of_wait(w);
	const struct timespec zero = { 0, 0 };
	struct timespec ts;
	siginfo_t si;
	sigset_t set;
	int cap, rc, err;

	sigemptyset(&set);
	sigaddset(&set, p->signo);
	/* Bounded, so that a dropped notification costs a scan, not a hang
	 * (next_completed decides on the scan).  p->cap_ms was set under the
	 * mutex by prepare. */
	cap = p->cap_ms;
	if (p->retry_soon && cap > PX_PAIO_RETRY_MS)
		cap = PX_PAIO_RETRY_MS;
	timeout_ms = px__cap_ms(timeout_ms, cap);
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
	if (!p->tid || !pthread_equal(p->tid_of, pthread_self())) {
		p->tid_of = pthread_self();
		p->tid = (pid_t)syscall(SYS_gettid);
	}
	atomic_store_explicit(&sigw_waiter[p->signo], p->tid,
			      memory_order_relaxed);
	rc = sigtimedwait(&set, &si, &ts);
	err = errno;
	/* A handler that read this thread's id just before the store may
	 * still hand its signal on, to this thread alone: a signal directed
	 * at a thread stays with it.  Left there, it waited for this thread
	 * to lead again, and if it never did it was pending, blocked, when
	 * px_destroy gave the signal its old disposition back; the thread's
	 * next unblock of it then ended the process (SIG_DFL).  So wait
	 * until every such handler is done (they are a few system calls
	 * long), and take what they sent: below, a thread's own signals
	 * come off before the process's. */
	atomic_store(&sigw_waiter[p->signo], 0);
	for (int spins = 0; atomic_load(&sigw_handing[p->signo]); spins++)
		if (spins < 64)
			sched_yield();
		else
			nanosleep(&(struct timespec){ 0, 50000 }, NULL);
	if (rc < 0)
		rc = sigtimedwait(&set, &si, &zero);
	if (rc < 0) {
		p->took_none = true;
		return err == EAGAIN ? 0 : -err;
	}
	p->last_seen_ns = px__now_ns();
	do {
		p->got[p->ngot++] = si.si_value.sival_ptr;
	} while (p->ngot < sizeof(p->got) / sizeof(p->got[0]) &&
		 sigtimedwait(&set, &si, &zero) == p->signo);
	return (int)p->ngot;
}

static px_result *sigw_next_completed(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);
	px_result *r;

	if ((r = px__paio_next_failed(p)))
		return r;
	/* Nothing came for a whole bound while requests are in flight: some
	 * notification may have been dropped.  Whatever the timeouts the
	 * callers of px_handle_events use. */
	if (!p->scan && !p->scanning && !px_list_empty(&p->inflight) &&
	    (p->nquiet ||
	     px__now_ns() - p->last_seen_ns >= (uint64_t)p->cap_ms * 1000000u))
		p->scan = true;
	while (p->igot < p->ngot) {
		void *v = p->got[p->igot++];
		if (v == (void *)p) {
			p->sig_intr_pending = false;
			continue;
		}
		px_paio_req *q = v;
		/* Stale (reaped by a scan, maybe reused) unless this holds. */
		if (!q || !px__paio_is_done_req(p, q))
			continue;
		if ((r = px__paio_reap(p, q)))
			return r;
	}
	if (!p->scan)
		return NULL;
	if (!p->scanning) {
		/* A walk begins: count it, and it stands for a signal seen. */
		p->scans++;
		p->last_seen_ns = px__now_ns();
	}
	return px__paio_scan_next(p);
}

/* A signalfd of the signal polls readable while one is queued to the
 * process (a completion's or the interrupt's), which is when the next
 * sigtimedwait would return at once: what another processor's wait needs
 * to watch to wake a lone thread for these completions.  The signal stays
 * blocked and sigtimedwait still takes it; nobody reads the signalfd.
 * Made at the first ask (mutex held).  Refused (no descriptor free), it
 * is not asked for again: the dispatcher's 1 ms bound stands, and no
 * lead pays a failing call. */
static int sigw_ready_fd(px_wait *w)
{
	px_paio *p = px_paio_of_wait(w);
	sigset_t set;

	if (p->sig_fd == -1) {
		sigemptyset(&set);
		sigaddset(&set, p->signo);
		/* Marked once it has its number (the keep-off may move
		 * it). */
		p->sig_fd = px__own_fd_id(px__fd_keep_off_ops(p->prov.px,
				signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)),
				&p->sig_id);
		if (p->sig_fd < 0)
			p->sig_fd = -2;
	}
	return p->sig_fd >= 0 ? p->sig_fd : -1;
}

static void sigw_wait_destroy(px_wait *w)
{
	(void)w;
}

const px_wait_ops px__wait_sigwait_ops = {
	.name = "sigwait",
	.destroy = sigw_wait_destroy,          /* nothing: in the provider */
	.on_start = NULL,
	.prepare = sigw_prepare,               /* no wait while a scan is due */
	.wait = sigw_wait,                     /* sigtimedwait, bounded */
	.ready_fd = sigw_ready_fd,             /* a signalfd of the signal */
	.next_completed = sigw_next_completed, /* signalled ones, then scans */
};

/* ------------------------------------------------------------------ */
/* Native interrupt                                                     */
/* ------------------------------------------------------------------ */

static void sigw_intr_interrupt(px_intr *in)
{
	px_paio *p = px_paio_of_intr(in);
	union sigval v = { .sival_ptr = p };

	if (p->sig_intr_pending)
		return;
	if (sigqueue(getpid(), p->signo, v) == 0)
		p->sig_intr_pending = true;
}

/* The leader must have the signal blocked for sigtimedwait; it stays
 * blocked afterwards (the thread may lead again, and a completion signal
 * must never reach it through the handler). */
static void sigw_intr_activated(px_intr *in)
{
	(void)sigw_block(px_paio_of_intr(in)->signo);
}

static void sigw_intr_nop(px_intr *in)
{
	(void)in;
}

const px_intr_ops px__intr_sigwait_ops = {
	.name = "native",
	.destroy = sigw_intr_nop,              /* the provider releases it */
	.interrupt = sigw_intr_interrupt,      /* sigqueue with p as value */
	.leader_activated = sigw_intr_activated, /* block the signal */
	.leader_deactivated = NULL,
	.drain = sigw_intr_nop,                /* next_completed clears it */
};

bool px__sigwait_holds(int signo)
{
	if (signo <= 0 || signo >= NSIG)
		return false;
	pthread_mutex_lock(&sigw_lock);
	bool held = sigw_slot[signo].owner != NULL;
	pthread_mutex_unlock(&sigw_lock);
	return held;
}

int px__sigwait_signal_of(const px_provider *prov)
{
	int signo = 0;

	pthread_mutex_lock(&sigw_lock);
	for (int s = 1; s < NSIG && !signo; s++)
		if (sigw_slot[s].owner && &sigw_slot[s].owner->prov == prov)
			signo = s;
	pthread_mutex_unlock(&sigw_lock);
	return signo;
}

/* Take signo for p: install the handler unless the application handles
 * the signal itself.  sigw_lock held. */
static int sigw_take(px_paio *p, int signo)
{
	struct sigaction cur, sa;

	if (sigw_slot[signo].owner)
		return -EBUSY;   /* another proactor waits on this signal */
	if (sigaction(signo, NULL, &cur) < 0)
		return -errno;
	if ((cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != sigw_handler
					: cur.sa_handler != SIG_DFL &&
						  cur.sa_handler != SIG_IGN)
		return -EBUSY;   /* the application handles it itself */
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sigw_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(signo, &sa, NULL) < 0)
		return -errno;
	sigw_slot[signo].owner = p;
	/* A slot freed in a forked child keeps what was there before the
	 * parent's proactor, as long as that proactor's handler is still
	 * in place; what the child put there since is what it gets back. */
	if (!sigw_slot[signo].inherited ||
	    !(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != sigw_handler)
		sigw_slot[signo].old = cur;
	sigw_slot[signo].inherited = false;
	return 0;
}

void px__sigwait_atfork(int phase)
{
	if (phase == PX_FORK_PREPARE) {
		pthread_mutex_lock(&sigw_lock);
		return;
	}
	/* In the child the parent's proactors can no longer release their
	 * signals (px_destroy says ECHILD there): free them for the child's
	 * own proactors, which may ask for the same rtsig=. */
	if (phase == PX_FORK_CHILD) {
		for (int s = 0; s < NSIG; s++) {
			/* A handler the fork caught in another thread's
			 * hand-on left its count here, which no thread of
			 * the child would ever take back: the child's
			 * leader on that signal would wait for it for
			 * ever.  Nor is the parent's leader here. */
			atomic_store(&sigw_handing[s], 0);
			atomic_store(&sigw_waiter[s], 0);
			if (sigw_slot[s].owner) {
				sigw_slot[s].owner = NULL;
				sigw_slot[s].inherited = true;
			}
		}
	}
	pthread_mutex_unlock(&sigw_lock);
}

int px__paio_sigwait_init(px_paio *p, const px_posix_settings *s)
{
	struct rlimit rl;
	int signo, rc = -EBUSY;

	pthread_mutex_lock(&sigw_lock);
	if (s->rtsig) {
		signo = s->rtsig;
		rc = signo < SIGRTMIN || signo > SIGRTMAX ? -EINVAL
							  : sigw_take(p, signo);
	} else {
		/* The first free one from SIGRTMIN+4 up: several proactors
		 * may use this wait at once, each on its own signal. */
		for (signo = SIGRTMIN + SIGW_DEFAULT_OFFSET; signo <= SIGRTMAX;
		     signo++)
			if ((rc = sigw_take(p, signo)) == 0)
				break;
	}
	pthread_mutex_unlock(&sigw_lock);
	if (rc < 0)
		return rc;
	/* Threads this one creates from now on inherit the block.  The
	 * thread gets its mask back if it is also the one that destroys the
	 * proactor (px__paio_sigwait_fini), or that undoes a failed create. */
	p->creator = pthread_self();
	p->creator_blocked = sigw_block(signo);
	p->signo = signo;
	p->sigq_max = getrlimit(RLIMIT_SIGPENDING, &rl) == 0 &&
				      rl.rlim_cur != RLIM_INFINITY
			      ? (unsigned long)rl.rlim_cur
			      : 1ul << 20;
	p->wait.ops = &px__wait_sigwait_ops;
	p->intr.ops = &px__intr_sigwait_ops;
	return 0;
}

void px__paio_sigwait_fini(px_paio *p)
{
	const struct timespec zero = { 0, 0 };
	sigset_t set, old;

	/* Nothing is in flight any more; take what is still queued (the
	 * interrupt, notifications already reaped by a scan) so that the
	 * next owner of the signal does not see it. */
	sigemptyset(&set);
	sigaddset(&set, p->signo);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	while (sigtimedwait(&set, NULL, &zero) == p->signo)
		;
	/* This thread's mask as it was before: before this call, or, in the
	 * thread that made the proactor, before px_create blocked it there
	 * (a leader's block stays: docs/ARCHITECTURE.md, "POSIX AIO
	 * provider"). */
	if (!sigismember(&old, p->signo) ||
	    (pthread_equal(pthread_self(), p->creator) && !p->creator_blocked))
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	if (p->sig_fd >= 0)
		px__own_close_id(p->sig_fd, &p->sig_id);
	pthread_mutex_lock(&sigw_lock);
	sigaction(p->signo, &sigw_slot[p->signo].old, NULL);
	sigw_slot[p->signo].owner = NULL;
	sigw_slot[p->signo].inherited = false;
	pthread_mutex_unlock(&sigw_lock);
}
