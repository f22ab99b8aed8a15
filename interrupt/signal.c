/*
 * signal.c - interrupt the leader with pthread_kill(3): its wait sees EINTR.
 *
 * The signal is cfg->intr_signo, or SIGURG when 0 (ignored by default, so a
 * stray one never kills the process).  The first strategy using a signal
 * number installs a handler that does nothing, without SA_RESTART so the
 * wait is not restarted; the last one to go puts the old disposition back.
 * A handler the application installed itself is never replaced (-EBUSY).
 *
 * The race to close: an interrupt sent after the leader decided to wait but
 * before it entered the syscall must not be lost.  So leader_activated()
 * blocks the signal in the leader thread and publishes wait_mask, the old
 * mask minus the signal.  The wait strategy passes wait_mask to ppoll,
 * pselect or epoll_pwait, which unblock it atomically for the duration of
 * the wait: a signal that arrived early stays pending and makes the wait
 * return EINTR at once.  Outside the wait the signal stays blocked, so it
 * never interrupts anything else the leader does (callbacks included).
 *
 * interrupt() (mutex held, so the leader cannot change under it) sends the
 * signal only when a leader is active and no earlier one is pending;
 * drain() clears the flag.  leader_deactivated() swallows any instance
 * still pending with a zero-timeout sigtimedwait before restoring the old
 * mask, so the application never sees a stray EINTR.  px_intr.fd is -1.
 */
#include <stdlib.h>
#include <time.h>

#include "internal.h"


struct px_intr_signal {
	px_intr base;
	int signo;
	bool active;          /* a leader is between activated/deactivated */
	bool pending;         /* a signal was sent and not yet drained */
	pthread_t leader;     /* valid while active */
	sigset_t old_mask;    /* the leader's mask before activation */
	sigset_t wait_set;    /* old_mask without signo; base.wait_mask */
};

/* Per signal number: how many strategies use it, and what was there
 * before the first one installed the handler. */
static pthread_mutex_t px_sig_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	unsigned refs;
	struct sigaction old;
} px_sig_slot[NSIG];

static void px_sig_nop(int signo)
{
	/* Nothing: the point is the EINTR.  errno is left untouched. */
	(void)signo;
}

static bool px_sig_is_ours(const struct sigaction *sa)
{
	return !(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == px_sig_nop;
}

static int px_sig_install(int signo)
{
	struct sigaction cur, sa;
	int rc = 0;

	pthread_mutex_lock(&px_sig_lock);
	if (px_sig_slot[signo].refs == 0) {
		if (sigaction(signo, NULL, &cur) < 0) {
			rc = -errno;
			goto out;
		}
		if (!px_sig_is_ours(&cur) &&
		    ((cur.sa_flags & SA_SIGINFO) ||
		     (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN))) {
			rc = -EBUSY;    /* the application's own handler */
			goto out;
		}
		sa.sa_handler = px_sig_nop;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = 0;        /* no SA_RESTART: the wait must see EINTR */
		if (sigaction(signo, &sa, NULL) < 0) {
			rc = -errno;    /* EINVAL for the C library's own signals */
			goto out;
		}
		px_sig_slot[signo].old = cur;
	}
	px_sig_slot[signo].refs++;
out:
	pthread_mutex_unlock(&px_sig_lock);
	return rc;
}

void px__signal_atfork(int phase)
{
	/* The parent's proactors keep their counts in the child: the handler
	 * stays installed there, harmless, and a new proactor of the child
	 * on the same signal finds it its own. */
	if (phase == PX_FORK_PREPARE)
		pthread_mutex_lock(&px_sig_lock);
	else
		pthread_mutex_unlock(&px_sig_lock);
}

static void px_sig_release(int signo)
{
	struct sigaction cur;

	pthread_mutex_lock(&px_sig_lock);
	if (--px_sig_slot[signo].refs == 0 && sigaction(signo, NULL, &cur) == 0 &&
	    px_sig_is_ours(&cur))
		sigaction(signo, &px_sig_slot[signo].old, NULL);
	pthread_mutex_unlock(&px_sig_lock);
}

static struct px_intr_signal *to_sig(px_intr *in)
{
	return px_container_of(in, struct px_intr_signal, base);
}

static void sig_destroy(px_intr *in)
{
	struct px_intr_signal *s = to_sig(in);

	px_sig_release(s->signo);
	free(s);
}

static void sig_interrupt(px_intr *in)
{
	struct px_intr_signal *s = to_sig(in);

	if (!s->active || s->pending)
		return;
	s->pending = true;
	/* A real-time signal is refused (EAGAIN) while the process's queue
	 * of them is full (RLIMIT_SIGPENDING): then nothing comes for the
	 * drain to clear, and a pending flag left set would swallow every
	 * later interrupt.  The leader still ends its wait at its bound. */
	if (pthread_kill(s->leader, s->signo) != 0)
		s->pending = false;
}

static void sig_leader_activated(px_intr *in)
{
	struct px_intr_signal *s = to_sig(in);
	pthread_t self = pthread_self();
	sigset_t set;

	if (s->active && pthread_equal(s->leader, self))
		return;         /* already set up in this thread */
	sigemptyset(&set);
	sigaddset(&set, s->signo);
	pthread_sigmask(SIG_BLOCK, &set, &s->old_mask);
	s->wait_set = s->old_mask;
	sigdelset(&s->wait_set, s->signo);
	s->leader = self;
	s->active = true;
	s->pending = false;
}

static void sig_leader_deactivated(px_intr *in)
{
	struct px_intr_signal *s = to_sig(in);
	const struct timespec zero = { 0, 0 };
	sigset_t set;
	int rc;

	if (!s->active || !pthread_equal(s->leader, pthread_self()))
		return;
	/* Still blocked here, so sigtimedwait can take it off the pending
	 * set.  Loop: a real-time signal may be queued more than once, and
	 * another signal's handler can interrupt the call. */
	sigemptyset(&set);
	sigaddset(&set, s->signo);
	do {
		rc = sigtimedwait(&set, NULL, &zero);
	} while (rc == s->signo || (rc < 0 && errno == EINTR));
	pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
	s->active = false;
	s->pending = false;
}

static void sig_drain(px_intr *in)
{
	/* The signal was consumed by the handler when the wait returned
	 * EINTR; only the flag is left. */
	to_sig(in)->pending = false;
}

static const px_intr_ops signal_ops = {
	.name = "signal",
	.destroy = sig_destroy,                     /* drop the handler ref */
	.interrupt = sig_interrupt,                 /* pthread_kill the leader */
	.leader_activated = sig_leader_activated,   /* block it, set wait_mask */
	.leader_deactivated = sig_leader_deactivated, /* swallow, restore mask */
	.drain = sig_drain,                         /* clear pending */
};

int px__intr_signal_create(const px_processor_config *cfg, px_intr **out)
{
	struct px_intr_signal *s;
	int signo = cfg->intr_signo ? cfg->intr_signo : SIGURG;
	int rc;

	if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	rc = px_sig_install(signo);
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->signo = signo;
	/* Until a leader activates, a harmless guess: this thread's mask. */
	pthread_sigmask(SIG_BLOCK, NULL, &s->wait_set);
	sigdelset(&s->wait_set, signo);
	s->base.ops = &signal_ops;
	s->base.fd = -1;
	s->base.wait_mask = &s->wait_set;
	*out = &s->base;
	return 0;
}
