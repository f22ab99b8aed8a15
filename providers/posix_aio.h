/*
 * posix_aio.h - state shared by the POSIX AIO provider (providers/posix_aio.c)
 * and its three waits (wait_strategies/aiocb.c, sigwait.c, aio_callback.c).
 *
 * One px_paio holds the provider, the wait and the interrupt the core
 * sees, embedded so that each ops function finds the rest with
 * px_container_of.  Every field is guarded by the proactor mutex unless
 * its comment says otherwise; the C library's helper threads only touch
 * the aiocbs they were given, and the notification each one sends.
 *
 * sigwait: the application's duty.  The real-time signal the sigwait wait
 * uses (the class's key rtsig=N; without it the first one from SIGRTMIN+4
 * up that no other proactor uses and the application does not handle)
 * must be blocked in every thread of the process that is not inside the
 * proactor; blocking SIGRTMIN+4 to SIGRTMAX in every thread the
 * application creates is the simple way.  The library blocks it in the
 * thread that creates the proactor (threads created afterwards inherit the
 * mask), in every thread that leads the processor (for good), and in its
 * own dedicated thread.  A thread that leaves it unblocked may catch a
 * completion signal in the handler the library installs; that completion
 * is then found by a scan of every started request, up to a second late,
 * but never lost.  An rtsig= another proactor uses fails with -EBUSY.
 */
#ifndef PX_PROVIDERS_POSIX_AIO_H
#define PX_PROVIDERS_POSIX_AIO_H

#include <aio.h>
#include <sys/types.h>
#include <stdatomic.h>

#include "fdq.h"
#include "internal.h"
#include "posix_aio_class.h"

/* Which wait the provider was built with. */
enum { PX_PAIO_AIOCB = 0, PX_PAIO_SIGWAIT, PX_PAIO_CALLBACK };

/* Outcomes of aio_cancel, counted for the tests. */
enum { PX_PAIO_CANCELED = 0, PX_PAIO_NOTCANCELED, PX_PAIO_ALLDONE,
       PX_PAIO_CANCEL_ERR, PX_PAIO_NCANCEL };

/* Per stream descriptor: the shared queues and the descriptor the writes
 * go through (see posix_aio.c: glibc queues requests by descriptor). */
typedef struct px_paio_fd {
	px_fdq_entry fq;
	int wfd;            /* dup of fq.fd for writes while busy (of an
	                       nb_fifo: a blocking reopen, paio_block_fd) */
	bool wfd_open;      /* wfd is valid */
	bool checked;       /* not a socket (or sockets=aio): looked at when
	                       the entry left idle */
	bool seekable;      /* a file with offsets (looked at with checked):
	                       its stream operations go at the file's
	                       position, which they then move */
	bool nb_fifo;       /* an O_NONBLOCK pipe or FIFO (looked at with
	                       checked): its stream operations go through
	                       blocking descriptions of the provider's own,
	                       rfd and wfd (paio_block_fd) */
	int rfd;            /* reads of an nb_fifo go through it while busy */
	bool rfd_open;      /* rfd is valid */
	unsigned files;     /* file requests in glibc */
	unsigned next_lane; /* file_lanes: where the next file request goes */
	unsigned lanes_open;/* bit k: lane_fd[k] is a dup kept open */
	bool lock_seen;     /* looked for a POSIX record lock this busy spell */
	bool locked;        /* ... and found one: no lanes (paio_file_fd) */
	int lane_fd[PX_POSIX_LANES_MAX];
	dev_t dev;          /* the file the lanes are dups of (set when the */
	ino_t ino;          /* first file request comes to an idle entry) */
} px_paio_fd;

/* The provider's private space in every result. */
typedef struct px_paio_req {
	struct aiocb cb;            /* what glibc works on */
	px_link ilink;              /* p->inflight while glibc has it */
	px_paio_fd *fe;             /* stream: its descriptor's entry */
	struct px_paio *owner;      /* the provider that submitted it */
	struct px_paio_req *_Atomic next; /* callback wait: hand-over stack */
	bool submitted;             /* glibc has it (cb valid) */
	bool cancel_req;            /* px_cancel asked for it */
	bool cancel_sent;           /* aio_cancel was called for it */
	off_t pos;                  /* stream on a seekable file: where it went */
	unsigned retries;           /* sigwait: redone after a lost signal */
	bool quiet;                 /* sigwait: submitted without a signal */
	bool shut_seen;             /* a read's EAGAIN found its datagram
	                               socket shut down for reading: one more
	                               try, then 0 bytes (px__paio_reap) */
} px_paio_req;

typedef struct px_paio px_paio;

struct px_paio {
	px_provider prov;
	px_wait wait;
	px_intr intr;
	int kind;                   /* PX_PAIO_* */
	bool sockets;               /* sockets=aio */
	unsigned lanes;             /* file_lanes (1: the descriptor only) */
	px_fdq fdq;                 /* stream queues (px_paio_fd) */
	px_list inflight;           /* submitted requests (req ilink) */
	px_list failed;             /* queued stream operations glibc refused
	                               when their turn came (req ilink); the
	                               wait hands them out first */
	px_list again;              /* stream heads glibc refused for now
	                               (EAGAIN; req ilink, not submitted):
	                               tried again by every next_completed,
	                               and the waits are short meanwhile */
	bool retry_soon;            /* again was not empty at prepare */
	unsigned gen;               /* bumped when inflight changes */
	unsigned long cancels[PX_PAIO_NCANCEL];
	unsigned long scans;        /* sigwait: full scans made */
	unsigned long requeued;     /* sigwait: requests done again */
	unsigned nquiet;            /* sigwait: quiet requests in flight */

	/* aiocb wait: the leader's own list (rebuilt in prepare), and the
	 * interrupt: an aio_read on an eventfd that stays in the list. */
	const struct aiocb **list;
	unsigned nlist, cap, list_gen;
	bool list_valid;
	bool list_short;            /* could not grow: some requests are not
	                               in it, so the wait is bounded */
	int intr_efd;
	px_own_id intr_id;          /* what intr_efd named when made */
	struct aiocb intr_cb;
	uint64_t intr_buf;          /* where its reads land */
	bool intr_armed;            /* intr_cb is in glibc */
	bool intr_pending;          /* written and not yet drained */
	bool suspend_idle;          /* the last aio_suspend timed out with
	                               requests in it (leader only) */
	bool idle_poll;             /* nothing in flight and no read made:
	                               the next wait polls the eventfd */
	bool idle_drained;          /* that poll read the eventfd (leader) */
	/* The aiocb or callback wait's eventfd was closed behind the
	 * library's back (close(2)): an interrupt's write or the leader's
	 * poll said so.  Nothing can wake the leader any more: its waits
	 * say EBADF, so the processor naps (PX_NO_WAKE_MS) instead, and the
	 * aiocb wait makes no read on it.  Written by the leader without the
	 * mutex too: atomic, relaxed. */
	atomic_bool efd_gone;

	/* sigwait wait: the signal, the pointers the leader took off the
	 * queue during its wait (leader only), and whether to scan. */
	int signo;
	unsigned long sigq_max;     /* RLIMIT_SIGPENDING when created */
	pthread_t creator;          /* the thread px_create ran in, and */
	bool creator_blocked;       /* whether it blocked signo before */
	void *got[64];
	unsigned ngot, igot;
	bool scan;                  /* look at every started request */
	bool scanning;
	px_link *scan_pos;
	bool sig_intr_pending;
	bool took_none;             /* the last wait ended without a signal
	                               (ran out, or EINTR; leader only) */
	pthread_t tid_of;           /* the thread tid belongs to */
	pid_t tid;                  /* the leader's thread id, 0: not known */
	int cap_ms;                 /* bound of the next wait (prepare) */
	uint64_t last_seen_ns;      /* last signal taken, or last scan */

	/* callback wait: the stack the notifier threads push on, the eventfd
	 * that wakes the leader (also the interrupt), and how many notifier
	 * threads are between their push and their write. */
	px_paio_req *_Atomic stack;
	px_paio_req *ready;         /* popped from the stack, oldest first */
	int cb_efd;
	px_own_id cb_id;            /* what cb_efd named when made */
	atomic_uint notifying;
	bool cb_intr_pending;

	/* For a lone thread leading this processor and another
	 * (px_wait_ops.ready_fd and watch): the callback wait's poll also
	 * watches watch_fd for its next wait (leader only; -1: none), and the
	 * sigwait wait offers sig_fd, a signalfd of its signal made at the
	 * first ask (-1: none yet; -2: refused). */
	int watch_fd;
	int sig_fd;
	px_own_id sig_id;           /* what sig_fd named when made */
};

static inline px_paio *px_paio_of_wait(px_wait *w)
{
	return px_container_of(w, px_paio, wait);
}

static inline px_paio *px_paio_of_intr(px_intr *in)
{
	return px_container_of(in, px_paio, intr);
}

static inline px_paio_req *px_paio_req_of(px_result *r)
{
	return px_result_priv(r);
}

static inline px_result *px_paio_result_of(px_paio_req *q)
{
	return (px_result *)(void *)((char *)q - PX_RESULT_HDR);
}

static inline px_paio_req *px_paio_req_of_ilink(px_link *l)
{
	return px_container_of(l, px_paio_req, ilink);
}

/* The provider (providers/posix_aio.c), for its class. */
extern const px_provider_ops px__provider_posix_ops PX_HIDDEN;

/* Has glibc finished q (aio_error is no longer EINPROGRESS)?  Any thread. */
static inline bool px_paio_done(const px_paio_req *q)
{
	return aio_error(&q->cb) != EINPROGRESS;
}

/* q is finished in glibc: take its result.  Returns its px_result with
 * outputs set, off the in-flight list and its descriptor's queue (the next
 * one is submitted), or NULL when q went back to glibc for the rest of a
 * write-all.  Leader, mutex held. */
px_result *px__paio_reap(px_paio *p, px_paio_req *q) PX_HIDDEN;

/* The next result of p->failed, or NULL, after trying p->again once more.
 * Leader, mutex held: every wait's next_completed asks this first, and
 * while p->again is not empty (p->retry_soon, set by prepare) each wait
 * lasts at most PX_PAIO_RETRY_MS. */
#define PX_PAIO_RETRY_MS 10
px_result *px__paio_next_failed(px_paio *p) PX_HIDDEN;

/* The next finished request of the walk over every started one that
 * p->scan asks for (begun by the first call, carried over the calls),
 * reaped; or NULL when the walk is over, which clears p->scan.  Leader,
 * mutex held: the aiocb and sigwait waits' next_completed. */
px_result *px__paio_scan_next(px_paio *p) PX_HIDDEN;

/* Is ptr a request of p that glibc has and has finished?  For the
 * notifications that carry a pointer, which may be stale. */
bool px__paio_is_done_req(px_paio *p, px_paio_req *q) PX_HIDDEN;

/* The outcomes of aio_cancel so far (PX_PAIO_NCANCEL counters) and the
 * sigwait wait's full scans, for the tests.  Mutex held. */
void px__paio_stats(px_provider *pv, unsigned long *cancels,
		    unsigned long *scans) PX_HIDDEN;

/* The waits (wait_strategies/): set up and tear down their part of p, and
 * fill in the notification of a request. */
int px__paio_aiocb_init(px_paio *p) PX_HIDDEN;
/* true: glibc still holds the interrupt's aiocb (a read that nothing can
 * end, px__paio_aiocb_fini): p must not be freed. */
bool px__paio_aiocb_fini(px_paio *p) PX_HIDDEN;
int px__paio_sigwait_init(px_paio *p, const px_posix_settings *s) PX_HIDDEN;
void px__paio_sigwait_fini(px_paio *p) PX_HIDDEN;
int px__paio_callback_init(px_paio *p) PX_HIDDEN;
void px__paio_callback_fini(px_paio *p) PX_HIDDEN;
void px__paio_sigwait_notify(px_paio *p, px_paio_req *q) PX_HIDDEN;
void px__paio_callback_notify(px_paio *p, px_paio_req *q) PX_HIDDEN;

extern const px_wait_ops px__wait_aiocb_ops PX_HIDDEN;
extern const px_intr_ops px__intr_aiocb_ops PX_HIDDEN;
extern const px_wait_ops px__wait_sigwait_ops PX_HIDDEN;
extern const px_intr_ops px__intr_sigwait_ops PX_HIDDEN;
extern const px_wait_ops px__wait_aio_callback_ops PX_HIDDEN;
extern const px_intr_ops px__intr_aio_callback_ops PX_HIDDEN;

#endif /* PX_PROVIDERS_POSIX_AIO_H */
