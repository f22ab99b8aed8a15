/*
 * linux_aio.c - the Linux native AIO provider (through libaio).
 *
 * Mechanism.  One AIO context (io_setup) per provider.  Files are real
 * asynchronous I/O: read_file and write_file are IO_CMD_PREAD and
 * IO_CMD_PWRITE iocbs (IO_CMD_PREADV / PWRITEV for the vectored forms;
 * vectored stream operations are recvmsg/sendmsg or readv/writev after
 * the poll).  Everything else (streams, datagrams, accept,
 * connect) is readiness by completion: an IOCB_CMD_POLL (4.18) for the
 * event the operation needs, and when its event arrives the non-blocking
 * system call; EAGAIN arms the poll again.  A start on an idle descriptor
 * tries the call at once and polls only when it would block, so a send
 * usually finishes inside its start (reads that keep finding nothing at
 * start go straight to their poll: LA_SPEC_MISSES).
 *
 * Readiness and the epoll wait.  The epoll wait (wait_strategies/
 * aio_epoll.c) learns of events through the eventfd every iocb names
 * (IOCB_FLAG_RESFD).  A poll iocb that names an eventfd and is woken by
 * its descriptor is not completed in the wake-up itself: the kernel hands
 * it to a work item of the system workqueue (aio_poll_wake queues
 * aio_poll_put_work; seen by tracing on 6.18 for UDP, AF_UNIX and pipes),
 * and only that work item puts the event in the ring and signals the
 * eventfd.  On a loaded machine that work item has run 3 to 4 s late
 * (six dgram programs beside three busy loops on two CPUs, 2026-12-06),
 * and for 15 s or more in CI: a read whose datagram had arrived stayed
 * unfinished all that time, its poll in the kernel, the eventfd at zero
 * and the leader's wait armed on it (dgram_same_socket_threads: "the
 * reads stopped taking datagrams", 24 received of 48 sent).  So with
 * the epoll wait no stream operation waits in a poll iocb: every
 * readiness wait goes to the spill set (la_spill; u->spill_all), an
 * epoll set whose reports wake the leader's poller directly, in the
 * wake-up's own context (the poller watches the set: u->spill_reg, armed
 * by la_spill_watch).  A start made while the leader is blocked
 * registers its operation there itself (la_kick), as it would have
 * submitted its poll.  Polls the set refuses (a regular file) still go
 * to the context.  The io_getevents wait names no eventfd, and the
 * kernel completes its polls in the wake-up.
 *
 * Submission.  A start fills the iocb in the result's private space and
 * appends it to u->pending.  The leader claims everything pending in its
 * prepare() and submits it with one io_submit at the start of its wait,
 * without the mutex; a start made while the leader is blocked submits the
 * pending iocbs itself (one io_submit, the mutex released around it).  So
 * the starts made between two waits, or under one lock hold (the leader's
 * deferred starts), go out together.  io_submit takes a prefix of the
 * batch: a partial count is carried on from the first iocb not taken; an
 * error for that first iocb (io_submit reports it alone) completes that
 * operation with the error and the rest goes on; EAGAIN (the context is
 * full, or the kernel is out of memory) puts the rest back at the head of
 * u->pending in order, for the next prepare.  Nothing is dropped.  At most
 * `depth` iocbs of results are claimed or in the kernel at once (the
 * context is set up for three more: the interrupt's poll, the watch's and
 * the spill set's), so EAGAIN is rare; beyond that depth, operations wait
 * in u->pending in start order.  An operation waiting for a descriptor
 * holds a poll iocb, and polls take at most u->poll_cap places (the depth
 * less an eighth): the polls past that wait in an epoll set instead (see
 * la_spill), so many idle descriptors never keep a file operation or an
 * accept out of the context.
 *
 * Locking.  Claim, then unlock (docs/ARCHITECTURE.md, "The mutex"): a
 * claimed iocb is off u->pending and counted in u->inkernel before the
 * mutex is released; the thread that claimed a batch settles it after
 * retaking the mutex, touching only the iocbs io_submit did not take (those
 * it took may already have completed and been handed out).  A cancel that
 * comes while a batch is out marks the result, and retries its io_cancel
 * once every batch has settled (u->recancel); while the batch's io_submit
 * has not looked the descriptor up yet, px_cancel waits for it
 * (la_subwait), since the application may close the number once
 * px_cancel returns.  An event for the
 * operation a start is still submitting (its result is not yet on the
 * processor's started list) is kept on the result (la_priv.early) and the
 * start returns PX_START_DONE.  The calls of streams, datagrams, accept
 * and connect (recv, send, accept4, ...) run without the mutex too: a
 * start tries its own operation before anything can reach it, and the
 * leader claims every operation whose poll fired in one batch of events
 * (la_priv.phase LA_BUSY; a cancel only marks it) and makes their calls
 * under one release of the mutex (la_run).  Each call works on a copy of
 * what is known of the descriptor (px_nbio), stored back afterwards.
 *
 * Reaping.  With file iocbs in the kernel a wait takes at most a quarter
 * of them (LA_REAP_SHARE), so their successors go in while the rest are
 * still in flight and the device's queue stays full; the ring hands the
 * others to the next wait at once.  Polls alone are reaped 128 at a time.
 *
 * Files not opened with O_DIRECT.  The kernel has no asynchronous buffered
 * I/O: such a read or write is performed inside io_submit, which returns
 * when it is done (the event is already in the ring).  It stays correct,
 * only not asynchronous: the thread that submits (the leader in its wait,
 * or a starting thread) blocks for the duration of the I/O, without the
 * proactor mutex.  Use O_DIRECT (aligned buffers, offsets and lengths) for
 * real asynchrony.  A misaligned O_DIRECT buffer completes with EINVAL.
 *
 * Cancel.  An operation not in the kernel (queued behind its descriptor's
 * head, or pending) is forgotten at once, unless it has finished already
 * and waits on u->done for the leader (la_priv.on_done), which hands it
 * out with its own result.  A poll in the kernel gets an io_cancel and
 * its operation completes with ECANCELED at once; the poll's event comes
 * through the ring later and is dropped (la_orphan).  File iocbs cannot
 * be cancelled by this kernel interface (io_cancel says EINVAL): they
 * are marked and complete, once, with their own result when their event
 * arrives.
 *
 * Quirks:
 *   - The calls after a poll are the shared ones of providers/nbio.c
 *     (the readiness provider's too; its quirks are listed there), with
 *     this provider's rules (la_nbio_rules): a single-buffer read or write
 *     asks for at most LA_MAX_RW bytes, and a pipe or terminal whose kernel
 *     refuses RWF_NOWAIT is always checked with poll(0) first and written
 *     at most PIPE_BUF bytes at a time.  What a descriptor is is forgotten
 *     when it goes idle (its number may be reused).
 *   - A start on a descriptor that is not open returns -EBADF (one fcntl)
 *     the first time the provider meets the number; afterwards such an
 *     operation fails in its completion.
 *   - io_setup failing with EAGAIN means the system-wide fs.aio-max-nr is
 *     used up; create returns -EAGAIN and the class explains it.
 */
#include <assert.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "linux_aio.h"
#include "linux_aio_class.h"
#include "nbio.h"

/* The largest transfer one read or write performs (MAX_RW_COUNT). */
#define LA_MAX_RW 0x7ffff000u

/* After LA_SPEC_MISSES reads in a row whose try at start found nothing
 * (request and response: the answer is never there yet), reads on that
 * descriptor go straight to their poll, which completes inside io_submit
 * if the data is there after all; one start in LA_SPEC_PROBE still tries,
 * to notice when the pattern changes. */
#define LA_SPEC_MISSES 2
#define LA_SPEC_PROBE 16

/* A wait takes at most 1/LA_REAP_SHARE of the file iocbs in the kernel
 * (see px__laio_prepare). */
#define LA_REAP_SHARE 4

/* Iocbs a starting thread submits at once. */
#define LA_KICK_MAX 64u

int (*px__laio_io_submit)(io_context_t, long, struct iocb **) = io_submit;
int (*px__laio_io_cancel)(io_context_t, struct iocb *, struct io_event *) =
	io_cancel;
bool px__laio_orphans = true;

/* What the result's iocb is (la_priv.phase). */
enum {
	LA_IDLE = 0,   /* no iocb: queued behind its descriptor's head */
	LA_OP,         /* the file operation */
	LA_POLL,       /* the readiness poll of a stream operation */
	LA_BUSY        /* its poll fired: the leader makes the call without
	                  the mutex (see la_run) */
};

/* Which list la_priv.slink is on. */
enum { LA_NOLIST = 0, LA_ON_PENDING, LA_ON_RECANCEL, LA_ON_HELD,
       LA_ON_SPILL };

typedef struct px_laio_fd {
	px_fdq_entry fq;    /* one FIFO per direction */
	unsigned inflight;  /* started here and not finished, any operation */
	uint8_t kind;       /* PX_NBIO_KIND_* */
	uint8_t nbflags;    /* PX_NBIO_LISTENER_NB, PX_NBIO_ANON */
	bool open_seen;     /* known to be open */
	uint8_t rd_miss;    /* reads tried at start that found nothing, in a
	                       row; a hint only, kept while idle */
	uint8_t rd_skip;    /* read starts since the last such try */
	bool positional;    /* a file operation found it has offsets (not a
	                       pipe, FIFO, socket or terminal: la_no_offsets) */
	uint8_t spill_dirs; /* directions whose head waits in the spill set
	                       (bit PX_FDQ_RD, PX_FDQ_WR): la_spill */
	bool spill_reg;     /* the number was added to the spill set (the
	                       registration may be disabled, or gone with a
	                       close) */
	bool poll_refused;  /* io_submit refused its poll (la_hold_refused),
	                       or it is a signalfd (la_io_store): its polls
	                       go to the spill set; forgotten when idle */
	bool sig_hint;      /* it was a signalfd: its reads try at start,
	                       which tells again; a hint only, kept while
	                       idle */
	/* Its file writes not yet finished, in the order they were started
	 * (by r->plink, which u->done takes only after la_complete), those
	 * in the kernel or pending and those held behind one they overlap;
	 * how many are held (la_fwrite_held). */
	px_list fwrites;
	unsigned fwrites_held;
	bool fwrites_seen;   /* O_APPEND asked this busy spell of fwrites */
	bool fwrites_append; /* ... and set: a write waits for every earlier
	                        one (la_fwrite_blocked) */
} la_fd;

/* The system calls of one operation work on a copy of what is known of
 * its descriptor (px_nbio), taken under the mutex and stored back after,
 * so that a call made without the mutex shares nothing with one on the
 * other direction. */
static void la_io_load(px_nbio *io, const la_fd *fe)
{
	io->fd = fe->fq.fd;
	io->kind = fe->kind;
	io->flags = fe->nbflags;
	io->reported = 0;
}

/* Is fd a signalfd?  By its name in /proc (one readlink). */
static bool la_is_signalfd(int fd)
{
	static const char want[] = "anon_inode:[signalfd]";
	char path[40], name[sizeof(want) + 1];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, name, sizeof(name));
	return n == (ssize_t)sizeof(want) - 1 && memcmp(name, want, (size_t)n) == 0;
}

/* Mutex held.  The entry is not idle (the operation is queued), so
 * nothing was forgotten meanwhile; later kinds only refine earlier ones
 * (socket, file, or RWF_NOWAIT downgraded to blocking).
 *
 * A signalfd polls the signals of the task that polls it, and a poll iocb
 * that had to wait is looked at again, when woken, in a kernel worker,
 * which has none of the process's: a read waited for good with a signal
 * pending (a helper's review of 2026-12-06).  So when a descriptor first
 * shows itself to be an anonymous inode (nb_classify's fstat: a file of
 * no type; never a pipe or terminal), its name is read, and a signalfd's
 * polls go to the spill set, whose epoll wait runs in a thread of the
 * process (poll_refused).  Once per busy period of such a descriptor.  A signalfd's read that skipped its try at start
 * (la_skip_try) would not know it: sig_hint keeps those tries. */
static void la_io_store(la_fd *fe, const px_nbio *io)
{
	if (io->kind > fe->kind) {
		if (fe->kind < PX_NBIO_KIND_NOWAIT) {
			fe->sig_hint = (io->flags & PX_NBIO_ANON) &&
				       la_is_signalfd(io->fd);
			if (fe->sig_hint)
				fe->poll_refused = true;
		}
		fe->kind = io->kind;
	}
	fe->nbflags |= io->flags;
}

struct la_priv {
	struct iocb cb;     /* data: the result */
	px_link slink;      /* u->pending or u->recancel */
	la_fd *fe;
	uint8_t phase;      /* LA_IDLE / LA_OP / LA_POLL */
	uint8_t slist;      /* LA_NOLIST / LA_ON_PENDING / LA_ON_RECANCEL */
	uint8_t conn;       /* PX_NBIO_CONN_* */
	bool cancel_req;    /* a cancel was asked for */
	bool in_start;      /* its start is submitting without the mutex */
	bool early;         /* ... and it finished meanwhile */
	bool on_done;       /* finished, on u->done for next_completed */
	uint8_t tried;      /* LA_BUSY: what the call gave (PX_NBIO_*) */
	uint8_t futile;     /* datagram write: EAGAINs after its poll fired,
	                       in a row (la_hold); any stream operation:
	                       the same after a poll that said POLLERR alone */
	bool err_alone;     /* its last poll fired with POLLERR and not its
	                       direction (an error queue entry) */
	px_nbio io;         /* LA_BUSY: the descriptor, for the call */
	uint64_t held_until; /* LA_ON_HELD: when it polls again */
	px_link wlink;      /* u->writers: a stream write whose poll was
	                       issued */
	unsigned wstamp;    /* u->wtick when its poll was last issued */
	bool retry;         /* its poll was cancelled for a try without a
	                       report (la_writers_retry) */
	bool refused;       /* LA_ON_HELD: io_submit refused its poll
	                       (la_hold_refused); tried, not polled, when
	                       its time comes */
	uint8_t tag;        /* the tag its iocb's data carries (la_tag);
	                       0: none */
	bool wheld;         /* a file write held on fe->fwrites behind an
	                       earlier one to the same bytes */
	int sync_err;       /* LA_SUBMIT_DONE: the call's result (errno) */
	size_t sync_bytes;  /* ... and the bytes it moved */
	unsigned gen;       /* the batch that last claimed its iocb */
	bool subwait;       /* on u->subwaiters (la_subwait) */
	px_link sublink;
};

static struct la_priv *la_priv(px_result *r)
{
	return px_result_priv(r);
}

static px_result *la_result_of_slink(px_link *l)
{
	struct la_priv *pr = px_container_of(l, struct la_priv, slink);

	return (px_result *)(void *)((char *)pr - PX_RESULT_HDR);
}

/*
 * Cancelled polls let go (orphans).  The event of a cancelled poll comes
 * from a kernel worker after io_cancel has answered EINPROGRESS, and that
 * worker has been seen to run 5 and 10 s late on a loaded machine (eight
 * ThreadSanitizer programs on two CPUs, 2026-12-06).  A poll whose
 * submission raced a wakeup is not on the list io_cancel searches (it
 * answers EINVAL; fs/aio.c, aio_poll) and, should its descriptor turn
 * out not ready after all, waits for the descriptor's next wakeup.  The
 * operation used to wait for that event, and with it px_cancel's,
 * px_close's, a deadline's and px_destroy's callbacks.  A poll moves no
 * data, so its operation can end with ECANCELED as soon as the cancel is
 * asked; only the record has to wait, since the event gives back the
 * iocb's data, the record's address, and the record may start another
 * operation meanwhile.  So the data carries a tag in the address's low
 * bits (records are whole cache lines: PX_LINES), a cancelled poll is
 * written down as its record and tag (u->orphans), and its event, when it
 * comes, is dropped; the record's next iocb carries another tag.  Until
 * then the orphan keeps its place in the context (u->inkernel) and its
 * file, which the kernel holds, open.  A record with every tag orphaned
 * (never seen) gets tag 0 and its cancel waits for the event as before.
 */
#define LA_TAG_MASK ((uintptr_t)PX_CACHE_LINE - 1)
_Static_assert(PX_CACHE_LINE >= 16 && (PX_CACHE_LINE & (PX_CACHE_LINE - 1)) == 0,
	       "records are aligned to a power of two of at least 16 bytes");

/* Where (r, tag) is among the orphans, or -1. */
static int la_orphan_find(const px_laio *u, const px_result *r, unsigned tag)
{
	for (unsigned i = 0; i < u->norphans; i++)
		if (u->orphans[i].r == r && u->orphans[i].tag == tag)
			return (int)i;
	return -1;
}

/* The data of r's next iocb: its address and a tag none of its orphans
 * has. */
static void *la_tag(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	unsigned tries = (unsigned)LA_TAG_MASK;

	assert(((uintptr_t)r & LA_TAG_MASK) == 0);
	pr->tag = 0;
	while (tries--) {
		unsigned t = (u->next_tag + 1u) & (unsigned)LA_TAG_MASK;
		u->next_tag = (uint8_t)(t ? t : 1u);
		if (!u->norphans || la_orphan_find(u, r, u->next_tag) < 0) {
			pr->tag = u->next_tag;
			break;
		}
	}
	return (void *)((uintptr_t)r | pr->tag);
}

static px_result *la_untag(void *data, unsigned *tag)
{
	*tag = (unsigned)((uintptr_t)data & LA_TAG_MASK);
	return (px_result *)((uintptr_t)data & ~LA_TAG_MASK);
}

/* r's poll, cancelled, is left to the kernel: true when written down (its
 * operation may end now); false (no tag, no memory) when its event must
 * end it.  Mutex held. */
static bool la_orphan(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);

	if (!pr->tag || !px__laio_orphans)
		return false;
	if (u->norphans == u->orphans_cap) {
		unsigned cap = u->orphans_cap ? 2 * u->orphans_cap : 16;
		px_laio_orphan *v = realloc(u->orphans, cap * sizeof(*v));
		if (!v)
			return false;
		u->orphans = v;
		u->orphans_cap = cap;
	}
	u->orphans[u->norphans].r = r;
	u->orphans[u->norphans].tag = pr->tag;
	u->norphans++;
	return true;
}

/* An event for (r, tag): an orphan's, taken off the list (true), or
 * r's own. */
static bool la_orphan_take(px_laio *u, const px_result *r, unsigned tag)
{
	int i = la_orphan_find(u, r, tag);

	if (i < 0)
		return false;
	u->orphans[i] = u->orphans[--u->norphans];
	return true;
}

static px_laio *la_of_prov(px_provider *p)
{
	return px_container_of(p, px_laio, prov);
}

static bool la_does(px_op op)
{
	return px__fdq_dir(op) >= 0 || op == PX_OP_READ_FILE ||
	       op == PX_OP_WRITE_FILE;
}

/* ------------------------------------------------------------------ */
/* Stream system calls                                                  */
/* ------------------------------------------------------------------ */

/* What the provider asks of the shared calls (nbio.h): single-buffer reads
 * and writes of at most LA_MAX_RW bytes, and a stream whose kernel refuses
 * RWF_NOWAIT is always polled with poll(0) first, O_NONBLOCK or not. */
static const px_nbio_rules la_nbio_rules = {
	.max_len = LA_MAX_RW,
	.trust_nonblock = false,
};

/* Try r's system call once, on a copy of what is known of its descriptor
 * (mutex held or not).  PX_NBIO_AGAIN, or finished: outputs set. */
static int la_try(px_nbio *io, px_result *r)
{
	return px__nbio_try(&la_nbio_rules, io, &la_priv(r)->conn, r);
}

/* ------------------------------------------------------------------ */
/* Lists and completion (mutex held)                                    */
/* ------------------------------------------------------------------ */

static void la_spill_off(px_laio *u, px_result *r);

static void la_unlist(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);

	if (pr->slist == LA_ON_SPILL)
		la_spill_off(u, r);
	else if (pr->slist == LA_ON_PENDING)
		px_list_remove(&u->pending, &pr->slink);
	else if (pr->slist == LA_ON_RECANCEL)
		px_list_remove(&u->recancel, &pr->slink);
	else if (pr->slist == LA_ON_HELD)
		px_list_remove(&u->held, &pr->slink);
	pr->slist = LA_NOLIST;
}

static void la_wake_leader(px_laio *u);

/* A stream write's poll for room is issued (see la_writers_retry).  The
 * first one starts the periods, and wakes a leader blocked in the kernel
 * so that its next prepare caps the wait at the period's end. */
static void la_writers_join(px_laio *u, struct la_priv *pr)
{
	if (px_list_empty(&u->writers)) {
		u->next_wtick =
			px__now_ns() + (uint64_t)PX_LAIO_RETRY_MS * 1000000u;
		la_wake_leader(u);
	}
	px_list_push_back(&u->writers, &pr->wlink);
}

/* Fill r's iocb (its file operation, or the readiness poll of a stream
 * operation) and queue it for the next io_submit. */
static void la_issue(px_laio *u, px_result *r, bool poll)
{
	struct la_priv *pr = la_priv(r);
	px_completion *c = &r->c;

	if (poll) {
		io_prep_poll(&pr->cb, c->fd,
			     px__fdq_dir(c->op) == PX_FDQ_RD ? POLLIN : POLLOUT);
		pr->phase = LA_POLL;
		if (c->op == PX_OP_WRITE_STREAM) {
			/* A wait for room starts (again): la_writers_retry. */
			pr->wstamp = u->wtick;
			if (!px_link_linked(&pr->wlink))
				la_writers_join(u, pr);
		}
	} else if (r->flags & PX_RF_VECTORED) {
		/* The kernel reads the iovec array at io_submit; the caller
		 * keeps it valid until the callback in any case. */
		if (c->op == PX_OP_READ_FILE)
			io_prep_preadv(&pr->cb, c->fd, c->iov, c->iovcnt,
				       (long long)c->offset);
		else
			io_prep_pwritev(&pr->cb, c->fd, c->iov, c->iovcnt,
					(long long)c->offset);
		pr->phase = LA_OP;
	} else {
		size_t n = c->len > LA_MAX_RW ? LA_MAX_RW : c->len;
		if (c->op == PX_OP_READ_FILE)
			io_prep_pread(&pr->cb, c->fd, c->buf, n, (long long)c->offset);
		else
			io_prep_pwrite(&pr->cb, c->fd, c->buf, n, (long long)c->offset);
		pr->phase = LA_OP;
	}
	if (!poll && c->op == PX_OP_WRITE_FILE)
		pr->cb.aio_rw_flags = (unsigned)px__rwf_nosignal();
	pr->cb.data = la_tag(u, r);
	if (u->use_resfd)
		io_set_eventfd(&pr->cb, u->resfd);
	pr->slist = LA_ON_PENDING;
	px_list_push_back(&u->pending, &pr->slink);
}

/*
 * Writes to one place.  Two file writes to the same bytes, started in
 * that order on one descriptor, must land in that order (proactor(3):
 * the operations of one descriptor in one direction run in the order
 * they were started).  io_submit takes them in order, but a direct
 * (O_DIRECT) write is in the kernel's block layer until it completes,
 * and two in flight to the same blocks may be written in either order:
 * eight writes of one block to one new place ended with an earlier
 * one's block in 1 of 40 trials beside a test run (fixed problem 106;
 * io_uring, which hands some of them to a kernel worker, did so far more
 * often).  So a file write waits, on its descriptor's fwrites list, while
 * an earlier unfinished file write on the same descriptor overlaps its
 * bytes, and is issued when the last such one finishes.  Writes to other
 * places go at once as before, for a walk of the list.  Appends to an
 * O_APPEND file take their places in the order io_submit takes them, and
 * io_submit is not called in start order: the leader submits what its
 * prepare claimed without the mutex, and a start made meanwhile submits
 * its own write itself (la_kick), which could go in first, so an append
 * started later landed before an earlier one (fixed problem 224).  So on
 * an O_APPEND descriptor, whose offsets the kernel ignores, a file write
 * waits for every earlier unfinished one, as on io_uring; O_APPEND is
 * asked (F_GETFL) once per busy spell, at the first write that finds
 * another unfinished.
 */

/* Whether r must wait for a file write before it, from the list's first
 * element up to (not including) stop, or to its end when stop is NULL. */
static bool la_fwrite_blocked(la_fd *fe, const px_result *r,
			      const px_link *stop)
{
	if (fe->fwrites_append)
		return px_list_first(&fe->fwrites) != stop;
	return px_fdq_fwrite_overlaps(&fe->fwrites, r, stop);
}

/* At the start of file write r: on fe->fwrites in any case; true when it
 * is held there behind an earlier one (not issued). */
static bool la_fwrite_held(la_fd *fe, px_result *r)
{
	bool held = false;
	int fl;

	if (!fe->fwrites.head.next)
		px_list_init(&fe->fwrites);  /* a new entry is zeroed */
	if (px_list_empty(&fe->fwrites)) {
		fe->fwrites_seen = false;
	} else {
		if (!fe->fwrites_seen) {
			fe->fwrites_append =
				(fl = fcntl(r->c.fd, F_GETFL)) >= 0 &&
				(fl & O_APPEND);
			fe->fwrites_seen = true;
		}
		held = la_fwrite_blocked(fe, r, NULL);
	}
	if (held) {
		la_priv(r)->wheld = true;
		fe->fwrites_held++;
	}
	px_list_push_back(&fe->fwrites, &r->plink);
	return held;
}

/* File write r is over (done, failed, or cancelled while held): off the
 * list, and the held writes it was the last obstacle of are issued (the
 * leader submits them: it reaped r, or a cancel wakes it). */
static void la_fwrite_done(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	la_fd *fe = pr->fe;
	px_link *l, *next;

	if (!px_link_linked(&r->plink))
		return;
	px_list_remove(&fe->fwrites, &r->plink);
	if (pr->wheld) {
		pr->wheld = false;
		fe->fwrites_held--;
	}
	for (l = px_list_first(&fe->fwrites); l && fe->fwrites_held; l = next) {
		px_result *w = px_result_of_plink(l);
		struct la_priv *wp = la_priv(w);

		next = px_list_next(&fe->fwrites, l);
		if (!wp->wheld || la_fwrite_blocked(fe, w, l))
			continue;
		wp->wheld = false;
		fe->fwrites_held--;
		la_issue(u, w, false);
	}
}

/* Make the leader come back to next_completed: it is blocked in the
 * kernel (else its next prepare sees u->done or u->pending by itself). */
static void la_wake_leader(px_laio *u)
{
	if (u->leader_waiting)
		u->wait.intr->ops->interrupt(u->wait.intr);
}

/*
 * A cancelled operation whose iocb a batch holds that io_submit has not
 * taken yet.  The kernel looks the iocb's descriptor number up when
 * io_submit comes to it, so a close of the number and a new file opened
 * under it before then would get the operation: a cancelled write went
 * into the new file (TESTING.md, fixed problem 301).  px_cancel(3)
 * promises that the application may close the number once it returns:
 * so r counts as a call under way (px_call_begin, which px_cancel waits
 * for) until its batch has been through io_submit (la_subwait_release)
 * or r has ended (la_complete).  Mutex held.
 */
static void la_subwait(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);

	pr->subwait = true;
	px_list_push_back(&u->subwaiters, &pr->sublink);
	px_call_begin(r);
}

static void la_subwait_end(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);

	px_list_remove(&u->subwaiters, &pr->sublink);
	pr->subwait = false;
	px_call_end(r);
}

static void la_subwait_release(px_laio *u, unsigned gen)
{
	px_link *l, *next;

	for (l = px_list_first(&u->subwaiters); l; l = next) {
		struct la_priv *pr = px_container_of(l, struct la_priv, sublink);
		next = px_list_next(&u->subwaiters, l);
		if (pr->gen == gen)
			la_subwait_end(u, (px_result *)(void *)((char *)pr -
								PX_RESULT_HDR));
	}
}

/* Is r's iocb in a batch that io_submit has not taken yet?  The leader's
 * batch is submitted without the mutex: this side notes that it waits
 * before it looks, and the leader, after its io_submit, notes that it
 * is done before it looks for a waiter (px__laio_submit_leader), so one
 * of the two sees the other. */
static bool la_unsubmitted(px_laio *u, const struct la_priv *pr)
{
	if (!pr->gen)
		return false;
	for (px_link *l = px_list_first(&u->kicks); l;
	     l = px_list_next(&u->kicks, l))
		if (px_container_of(l, px_laio_kick, link)->gen == pr->gen)
			return true;
	if (!u->lb.n || pr->gen != u->lb_gen)
		return false;
	atomic_store(&u->lb_waiter, true);
	return atomic_load(&u->lb_unsub);
}

/* r is finished (outputs set): forget it, let the next operation of its
 * descriptor and direction go, and hand r out (deliver) or leave that to
 * the caller (a cancel answering PX_CANCEL_DONE). */
static void la_complete(px_laio *u, px_result *r, bool deliver)
{
	struct la_priv *pr = la_priv(r);
	la_fd *fe = pr->fe;
	int dir = px__fdq_dir(r->c.op);

	if (r->c.op == PX_OP_WRITE_FILE)
		la_fwrite_done(u, r);
	la_unlist(u, r);
	if (pr->subwait)
		la_subwait_end(u, r);
	if (px_link_linked(&pr->wlink))
		px_list_remove(&u->writers, &pr->wlink);
	pr->phase = LA_IDLE;
	fe->inflight--;
	fe->open_seen = r->c.error != EBADF;
	/* An error, a cancel or the end of a stream: the application may
	 * close the number next and get it back for another file.  A
	 * listener's read skipped at the start (la_skip_try) would wait in
	 * a poll for a connection instead of failing at once (ENOTCONN,
	 * EINVAL), so the next read on the number tries again. */
	if (px_result_may_close_next(r)) {
		fe->rd_miss = 0;
		fe->positional = false;
	}
	if (dir >= 0 && px_link_linked(&r->plink) &&
	    px_fdq_remove(&fe->fq, dir, r)) {
		px_result *next = px_fdq_head(&fe->fq, dir);
		/* The next one waits for readiness first: a poll iocb
		 * completes inside io_submit when the descriptor is ready. */
		if (next) {
			la_issue(u, next, true);
			/* After a write that failed (EPIPE from a retry:
			 * la_writers_retry), the next is retried at the
			 * next period's end, not a whole period later. */
			if (r->c.error && r->c.op == PX_OP_WRITE_STREAM &&
			    next->c.op == PX_OP_WRITE_STREAM)
				la_priv(next)->wstamp = u->wtick - 1;
		}
	}
	if (px_fdq_idle(&fe->fq)) {
		fe->kind = PX_NBIO_KIND_UNKNOWN;
		fe->nbflags = 0;
		fe->poll_refused = false;
	}
	if (!deliver)
		return;
	if (pr->in_start) {
		pr->early = true;  /* its start returns PX_START_DONE */
		return;
	}
	pr->on_done = true;
	px_list_push_back(&u->done, &r->plink);
}

static void la_fail(px_laio *u, px_result *r, int err, bool deliver)
{
	if (r->c.op == PX_OP_ACCEPT || r->c.op == PX_OP_READ_DGRAM)
		r->c.addrlen = 0;
	px_result_finish(r, r->done, err);
	la_complete(u, r, deliver);
}

/* Retry the io_cancel of polls a cancel could not reach because their
 * batch was still being submitted.  Every batch has settled now: each such
 * poll is in the kernel or its event is on its way, and the operation
 * ends now (la_orphan), or when that event comes. */
static void la_recancel(px_laio *u)
{
	px_link *l;

	while ((l = px_list_first(&u->recancel))) {
		px_result *r = la_result_of_slink(l);
		struct io_event ev;

		la_unlist(u, r);
		px__laio_io_cancel(u->ctx, &la_priv(r)->cb, &ev);
		if (la_orphan(u, r))
			la_fail(u, r, ECANCELED, true);
	}
}

/* ------------------------------------------------------------------ */
/* The provider's own descriptors closed behind its back                */
/* ------------------------------------------------------------------ */

/* libaio's io_set_eventfd sets this bit of u.c.flags (IOCB_FLAG_RESFD). */
#define LA_IOCB_RESFD 1u

/* Is fd, one of the provider's own, closed, or its number another file
 * now (px__own_fd_is: the application's dup2, or its next open after a
 * close behind our back)?  (-1: it has none.)  Such a number is as good
 * as closed to the provider: an epoll instance of the application's in
 * the spill set's place reported nothing of ours, and px_destroy closed
 * it (TESTING.md, fixed problem 312). */
static bool la_own_closed(int fd, const px_own_id *id)
{
	return fd >= 0 && !px__own_fd_is(fd, id);
}

/*
 * The record of the library's descriptors (fixed problem 287) keeps
 * px_close off the provider's eventfds and epoll sets, but close(2) cannot
 * be refused.  Once the native interrupt's eventfd was closed, every
 * prepare armed its poll again, io_submit refused it with EBADF, and the
 * wait returned at once for that failure: a whole CPU; with the epoll
 * wait, an operation waiting in a closed spill set, or behind a closed
 * poller or resfd, never ended.  The context itself is no descriptor and
 * keeps working, so the provider goes on without the others, for good
 * (px_laio.dead): what waited in the spill set goes back to the context
 * as a poll iocb, no iocb names resfd any more, nothing is armed on the
 * interrupt's eventfd, and the waits become io_getevents of at most
 * PX_NO_WAKE_MS (nothing else can wake them).  Every operation
 * still ends once, with its own result.  Mutex held, at a place where no
 * list is being walked.
 */
static void la_go_dead(px_laio *u)
{
	px_link *l;

	atomic_store_explicit(&u->dead, true, memory_order_relaxed);
	u->use_resfd = false;
	u->spill_all = false;
	while ((l = px_list_first(&u->spilled))) {
		px_result *r = la_result_of_slink(l);

		la_unlist(u, r);
		la_issue(u, r, true);
	}
	u->intr_pending = false;
}

void px__laio_check_own(px_laio *u)
{
	u->check_own = false;
	if (px_laio_dead(u))
		return;
	if (atomic_load_explicit(&u->pl_failed, memory_order_relaxed) ||
	    la_own_closed(u->intr_fd, &u->intr_id) ||
	    la_own_closed(u->resfd, &u->res_id) ||
	    la_own_closed(u->spill_ep, &u->spill_id) ||
	    (u->wait.intr != &u->nintr &&
	     la_own_closed(u->wait.intr->fd, &u->wait.intr->fd_id)))
		la_go_dead(u);
}

/* ------------------------------------------------------------------ */
/* Submission                                                           */
/* ------------------------------------------------------------------ */

/* Claim r, whose descriptor is (or is taken as) ready, for its call
 * without the mutex in the next la_run; reported: a poll said so (else it
 * is a try on a timer: la_release_held).  Leader, mutex held. */
static void la_claim_call(px_laio *u, px_result *r, bool reported)
{
	struct la_priv *pr = la_priv(r);

	pr->phase = LA_BUSY;
	px_call_begin(r);
	la_io_load(&pr->io, pr->fe);
	pr->io.reported = reported;
	u->claimed[u->nclaimed++] = r;
}

/*
 * Polls past the context's share.  Every stream operation that waits holds
 * a poll iocb, so an idle server with as many connections waiting as the
 * context's depth used to fill it, and a later accept, file read or read
 * waited behind them in u->pending until one of them completed: for good,
 * on a server whose clients were all quiet.  Now at most u->poll_cap
 * polls (the depth less an eighth, at least one place kept for files) go
 * to the context; the others wait in an epoll set (u->spill_ep, made with
 * the provider), on u->spilled, phase LA_POLL, their descriptor
 * registered one-shot for the directions whose head waits there
 * (la_fd.spill_dirs, bit PX_FDQ_RD or PX_FDQ_WR).  One poll iocb watches
 * the set (u->spill_cb, in the batch of the claim that needs it; with the
 * epoll wait, where every poll waits here, the leader's poller watches it
 * instead: la_spill_watch); when it fires, next_completed takes the set's
 * reports (la_spill_take) and claims their operations for their calls as
 * a fired poll's (LA_BUSY, la_run); one that finds nothing goes back to
 * u->pending and waits again, in the context if it has room by then (not
 * with the epoll wait).  A cancel forgets a spilled operation at once
 * (la_unlist takes its direction off the registration).  The
 * registration is keyed by number: one left behind by a descriptor closed
 * with close(2) is gone with it, and a disabled one (one-shot) reports
 * nothing; a report for a number with no operation in the set is
 * ignored, one for an operation whose descriptor is not ready ends in
 * EAGAIN and a new wait.  Mutex held throughout.
 */
static uint32_t la_spill_events(unsigned dirs)
{
	return (dirs & (1u << PX_FDQ_RD) ? (uint32_t)EPOLLIN : 0u) |
	       (dirs & (1u << PX_FDQ_WR) ? (uint32_t)EPOLLOUT : 0u) |
	       (uint32_t)EPOLLONESHOT;
}

/* fe's registration in the set: the directions dirs (0: none).  Through
 * px__sys_epoll_ctl, as the calls the operations make (px__sys_recv and
 * the others): the application may close(2) the number under a pending
 * operation, which the library is built to meet (EBADF from the idle
 * check), and ThreadSanitizer, which models a descriptor as memory,
 * reported that close against the leader's registration of the number
 * (test/close.c under TSan, once every wait of the epoll wait went to the
 * set; a poll iocb for the number races with the close the same way,
 * unseen). */
static int la_spill_set(px_laio *u, la_fd *fe, unsigned dirs)
{
	struct epoll_event ev = { .events = la_spill_events(dirs) };
	int op = fe->spill_reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

	ev.data.fd = fe->fq.fd;
	if (!dirs) {
		/* (ENOENT: closed, or its number reused since; nothing to
		 * remove) */
		if (fe->spill_reg)
			(void)px__sys_epoll_ctl(u->spill_ep, EPOLL_CTL_DEL,
						fe->fq.fd, NULL);
		fe->spill_reg = false;
		fe->spill_dirs = 0;
		return 0;
	}
	if (px__sys_epoll_ctl(u->spill_ep, op, fe->fq.fd, &ev) < 0) {
		/* What fe remembers is stale: the number was closed (its
		 * registration went with it) or reused after a DEL. */
		if (errno != (op == EPOLL_CTL_MOD ? ENOENT : EEXIST)) {
			/* (EBADF: the set itself may be the one closed) */
			if (errno == EBADF || errno == EINVAL)
				u->check_own = true;
			return -errno;
		}
		op = op == EPOLL_CTL_MOD ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
		if (px__sys_epoll_ctl(u->spill_ep, op, fe->fq.fd, &ev) < 0)
			return -errno;
	}
	fe->spill_reg = true;
	fe->spill_dirs = (uint8_t)dirs;
	return 0;
}

/* r, pending with its poll, waits in the set instead: 0.  Else -errno
 * and r stays where it was: the kernel is out of memory, refuses the
 * descriptor (EPERM: a regular file), or the number is not open
 * (EBADF); or there is no set (ENOSYS: a kernel without epoll). */
static int la_spill(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	unsigned bit = 1u << px__fdq_dir(r->c.op);
	int rc;

	if (u->spill_ep < 0 || px_laio_dead(u))
		return -ENOSYS;  /* no epoll here (la_create), or the set may
		                    be closed (px_laio.dead) */
	rc = la_spill_set(u, pr->fe, pr->fe->spill_dirs | bit);
	if (rc < 0)
		return rc;
	la_unlist(u, r);
	pr->slist = LA_ON_SPILL;
	px_list_push_back(&u->spilled, &pr->slink);
	return 0;
}

/* r leaves the set (its report came, a cancel, a failure). */
static void la_spill_off(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	unsigned bit = 1u << px__fdq_dir(r->c.op);

	px_list_remove(&u->spilled, &pr->slink);
	pr->slist = LA_NOLIST;
	if (pr->fe->spill_dirs & bit)
		(void)la_spill_set(u, pr->fe, pr->fe->spill_dirs & ~bit);
}

/* The set refused to watch fe again for dirs, the directions that did not
 * fire (la_spill_take: ENOMEM or ENOSPC from the kernel, EBADF for a
 * number closed meanwhile).  The one-shot report disarmed the whole
 * registration, so the heads waiting there in those directions would
 * never be reported: they used to stay on u->spilled, and a read whose
 * write had fired waited for good.  Each goes back to u->pending with its
 * poll, as a new wait: the next claim puts it in the set again, or, if
 * the set still refuses, in a poll iocb of its own (la_claim), whose
 * io_submit fails a closed number with EBADF.  Mutex held. */
static void la_spill_rearm_failed(px_laio *u, la_fd *fe, unsigned dirs)
{
	for (int dir = 0; dir < 2; dir++) {
		px_result *r;

		if (!(dirs & (1u << dir)))
			continue;
		r = px_fdq_head(&fe->fq, dir);
		if (!r || la_priv(r)->slist != LA_ON_SPILL)
			continue;
		px_list_remove(&u->spilled, &la_priv(r)->slink);
		la_priv(r)->slist = LA_NOLIST;
		la_issue(u, r, true);
	}
}

/* The watch's poll fired: claim the operations the set reports ready, as
 * many as u->claimed has room for (the rest stay reported: the watch's
 * next poll fires at once). */
static void la_spill_take(px_laio *u)
{
	struct epoll_event ev[PX_LAIO_EVENTS / 2];
	int max = (int)(PX_LAIO_EVENTS - u->nclaimed) / 2, n;

	if (max <= 0 || u->spill_ep < 0)
		return;
	n = epoll_wait(u->spill_ep, ev, max, 0);
	if (n < 0 && errno != EINTR)
		u->check_own = true;  /* the set closed behind our back? */
	for (int i = 0; i < n; i++) {
		px_fdq_entry *fq = px_fdq_lookup(&u->fdq, ev[i].data.fd);
		la_fd *fe;
		unsigned armed, fired = 0;

		if (!fq)
			continue;
		fe = px_container_of(fq, la_fd, fq);
		armed = fe->spill_dirs;
		if (ev[i].events & (EPOLLERR | EPOLLHUP))
			fired = armed;
		if (ev[i].events & EPOLLIN)
			fired |= 1u << PX_FDQ_RD;
		if (ev[i].events & EPOLLOUT)
			fired |= 1u << PX_FDQ_WR;
		fired &= armed;
		/* One-shot: the registration reports nothing more until it is
		 * set again, for the directions still waiting. */
		fe->spill_dirs = 0;
		for (int dir = 0; dir < 2; dir++) {
			px_result *r;
			struct la_priv *pr;

			if (!(fired & (1u << dir)))
				continue;
			r = px_fdq_head(&fe->fq, dir);
			if (!r || la_priv(r)->slist != LA_ON_SPILL)
				continue;
			pr = la_priv(r);
			px_list_remove(&u->spilled, &pr->slink);
			pr->slist = LA_NOLIST;
			/* (an error queue entry: la_hold) */
			pr->err_alone = px__nbio_error_alone(ev[i].events,
							     dir);
			la_claim_call(u, r, true);
		}
		if ((armed & ~fired) && la_spill_set(u, fe, armed & ~fired) < 0)
			la_spill_rearm_failed(u, fe, armed & ~fired);
	}
}

/* Every operation in the set fails with err: the context refused the
 * watch's poll for good. */
static void la_spill_fail(px_laio *u, int err)
{
	px_link *l;

	while ((l = px_list_first(&u->spilled)))
		la_fail(u, la_result_of_slink(l), err, true);
}

/* Operations wait in the spill set: something must wake the leader when
 * it reports.  With the epoll wait the leader's poller watches the set
 * itself (an epoll_ctl takes effect in a wait already under way, so this
 * serves a start made while the leader is blocked too); otherwise, or
 * should the poller refuse it, one poll iocb on the set goes with the
 * batch (v[*n]; the caller left room for it). */
static void la_spill_watch(px_laio *u, struct iocb **v, unsigned *n)
{
	if (px_list_empty(&u->spilled))
		return;
	if (u->spill_all &&
	    (u->spill_reg.armed ||
	     u->pl->ops->set(u->pl, &u->spill_reg, PX_POLL_IN) == 0))
		return;
	if (!u->spill_armed) {
		io_prep_poll(&u->spill_cb, u->spill_ep, POLLIN);
		u->spill_cb.data = NULL;
		if (u->use_resfd)
			io_set_eventfd(&u->spill_cb, u->resfd);
		u->spill_armed = true;
		v[(*n)++] = &u->spill_cb;
	}
}

/* Take up to max - 1 pending iocbs, within the depth, for one io_submit,
 * and the spill set's watch when it must go too (so max >= 2).  Polls past
 * u->poll_cap go to the spill set instead, and so do all of them with the
 * epoll wait (u->spill_all). */
static unsigned la_claim(px_laio *u, struct iocb **v, unsigned max,
			 unsigned gen)
{
	unsigned n = 0;
	px_link *l;

	while (n + 1 < max && (l = px_list_first(&u->pending))) {
		px_result *r = la_result_of_slink(l);
		struct la_priv *pr = la_priv(r);

		if (pr->phase == LA_POLL &&
		    (u->spill_all || pr->fe->poll_refused ||
		     u->inkernel - u->files_inkernel >= u->poll_cap)) {
			int rc = la_spill(u, r);
			if (rc == 0)
				continue;
			/* Closed under it (close(2) without px_close): its
			 * poll would fail so at io_submit; it must not hold
			 * up what is pending behind it while the context is
			 * full. */
			if (rc == -EBADF && u->inkernel >= u->depth) {
				la_fail(u, r, EBADF, true);
				continue;
			}
		}
		if (u->inkernel >= u->depth)
			break;
		la_unlist(u, r);
		u->inkernel++;
		u->files_inkernel += pr->phase == LA_OP;
		if (!u->use_resfd)  /* (issued before the provider died) */
			pr->cb.u.c.flags &= ~LA_IOCB_RESFD;
		pr->gen = gen;
		v[n++] = &pr->cb;
	}
	la_spill_watch(u, v, &n);
	return n;
}

/* la_submit_error's answer for a file operation it did itself: its
 * result is in its la_priv (sync_err, sync_bytes). */
#define LA_SUBMIT_DONE (-1)

/*
 * The error io_submit gave for cb, as the other engines would report it.
 * io_submit refuses with EINVAL a file operation on a file that has only
 * the old read or write method (no read_iter or write_iter), where
 * pread(2) and pwrite(2) work: a write to /dev/full (ENOSPC), a read of
 * most files of /proc (/proc/self/status), and a read of a directory
 * (which read(2), preadv and io_uring refuse with EISDIR).  On that error
 * alone the operation is made here with preadv or pwritev, as the
 * readiness engines make it (the kernel would have made it inside
 * io_submit in any case: such a file has no asynchronous path), and its
 * result kept in its la_priv: LA_SUBMIT_DONE.  An offset whose end passes
 * off_t's largest value fails there with EINVAL again.  Only on the error
 * path, so nothing costs more in the common case.  Mutex NOT held.
 */
static int la_submit_error(struct iocb *cb, int err)
{
	struct la_priv *pr = px_container_of(cb, struct la_priv, cb);
	bool vec = cb->aio_lio_opcode == IO_CMD_PREADV ||
		   cb->aio_lio_opcode == IO_CMD_PWRITEV;
	bool rd = cb->aio_lio_opcode == IO_CMD_PREAD ||
		  cb->aio_lio_opcode == IO_CMD_PREADV;
	struct iovec one;
	const struct iovec *iov = &one;
	int cnt = 1;
	ssize_t n;

	if (err != EINVAL || (!rd && cb->aio_lio_opcode != IO_CMD_PWRITE &&
			      cb->aio_lio_opcode != IO_CMD_PWRITEV))
		return err;
	if (vec) {
		iov = cb->u.v.vec;
		cnt = (int)cb->u.v.nr;
	} else {
		one.iov_base = cb->u.c.buf;
		one.iov_len = cb->u.c.nbytes;
	}
	do {
		n = rd ? preadv(cb->aio_fildes, iov, cnt, (off_t)cb->u.c.offset)
		       : pwritev(cb->aio_fildes, iov, cnt, (off_t)cb->u.c.offset);
	} while (n < 0 && errno == EINTR);
	pr->sync_err = n < 0 ? errno : 0;
	pr->sync_bytes = n < 0 ? 0 : (size_t)n;
	return LA_SUBMIT_DONE;
}

/* Submit v[0..n) with as few io_submit calls as the kernel allows; err[i]
 * says what became of v[i] (0: taken; EAGAIN: not tried).  Mutex NOT
 * held.  Returns true when io_submit said EAGAIN. */
static bool la_submit(px_laio *u, struct iocb **v, int *err, unsigned n)
{
	unsigned i = 0;
	bool again = false;

	while (i < n) {
		int rc = px__laio_io_submit(u->ctx, (long)(n - i), v + i);

		if (rc > 0) {
			for (int k = 0; k < rc; k++)
				err[i++] = 0;
			continue;
		}
		if (rc == 0 || rc == -EAGAIN || rc == -EINTR) {
			again = true;
			break;
		}
		/* io_submit reports the first iocb's error */
		err[i] = la_submit_error(v[i], -rc);
		i++;
	}
	for (; i < n; i++)
		err[i] = EAGAIN;
	return again;
}

/*
 * A poll the kernel refused.  IOCB_CMD_POLL takes a file that waits on one
 * queue only: a terminal (its read and write queues) or a FIFO opened for
 * both directions makes io_submit answer EINVAL.  Such a stream read or
 * write used to end with that EINVAL whenever it had to wait.  Now it
 * waits in the spill set (la_spill: epoll takes such files), and so do
 * the later polls of its descriptor until the descriptor goes idle
 * (la_fd.poll_refused).  Should the set refuse it too, it waits on
 * u->held (no iocb, LA_IDLE: a cancel forgets it at once) and the
 * leader's prepare claims it when its time comes (la_release_held), for
 * its call without the mutex at the start of next_completed (la_run),
 * after 1 ms, then 2, 4 and 8, then every LA_REFUSED_MAX_MS while it
 * still has to wait.  Only stream operations on what is not known as a
 * socket or a file; any other EINVAL stays the operation's.  Mutex held.
 */
#define LA_REFUSED_MAX_MS 16u

static bool la_hold_refused(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	unsigned ms;

	/* (A read whose start skipped its try, la_skip_try, may not know
	 * its descriptor yet: its try here tells.) */
	if (pr->phase != LA_POLL || pr->fe->kind == PX_NBIO_KIND_SOCKET ||
	    pr->fe->kind == PX_NBIO_KIND_FILE ||
	    (r->c.op != PX_OP_READ_STREAM && r->c.op != PX_OP_WRITE_STREAM))
		return false;
	if (la_spill(u, r) == 0) {
		pr->fe->poll_refused = true;
		/* A leader blocked in the kernel waits without the set's
		 * watch: its next prepare sends it. */
		la_wake_leader(u);
		return true;
	}
	if (px_link_linked(&pr->wlink))
		px_list_remove(&u->writers, &pr->wlink);
	pr->phase = LA_IDLE;
	pr->refused = true;
	ms = pr->futile < 4 ? 1u << pr->futile : LA_REFUSED_MAX_MS;
	if (pr->futile < UINT8_MAX)
		pr->futile++;
	pr->held_until = px__now_ns() + (uint64_t)ms * 1000000u;
	pr->slist = LA_ON_HELD;
	px_list_push_back(&u->held, &pr->slink);
	/* A leader blocked in the kernel computed its bound before this. */
	la_wake_leader(u);
	return true;
}

/* Mutex held again after a batch went to io_submit: what it did not take
 * goes back to the head of u->pending in order, or fails. */
static void la_settle(px_laio *u, struct iocb **v, const int *err, unsigned n)
{
	bool again = false;

	for (unsigned k = n; k-- > 0;) {
		if (!err[k])
			continue;
		if (v[k] == &u->intr_cb) {
			u->intr_armed = false;
			again = true;
			/* Refused for another reason than a full context: its
			 * eventfd closed behind our back (EBADF). */
			if (err[k] != EAGAIN)
				u->check_own = true;
			continue;
		}
		if (v[k] == &u->spill_cb) {
			u->spill_armed = false;
			if (err[k] == EAGAIN) {
				again = true;
				/* A leader blocked in the kernel would not
				 * send it again before some other event. */
				la_wake_leader(u);
			} else if (err[k] == EBADF) {
				/* The set was closed behind our back: its
				 * operations go back to the context
				 * (la_check_own, at the end). */
				u->check_own = true;
			} else {
				la_spill_fail(u, err[k]);
			}
			continue;
		}
		if (v[k] == &u->watch_cb) {
			/* Refused (not EAGAIN): never again, or every lead
			 * would return at once on the failure. */
			u->watch_armed = false;
			if (err[k] != EAGAIN)
				u->watch_off = true;
			continue;
		}
		unsigned tag;
		px_result *r = la_untag(v[k]->data, &tag);
		struct la_priv *pr = la_priv(r);
		u->inkernel--;
		u->files_inkernel -= pr->phase == LA_OP;
		if (err[k] == LA_SUBMIT_DONE) {
			/* Made by la_submit_error: done, cancelled or not. */
			px_result_finish(r, pr->sync_bytes, pr->sync_err);
			la_complete(u, r, true);
		} else if (pr->cancel_req) {
			la_fail(u, r, ECANCELED, true);
		} else if (err[k] == EAGAIN ||
			   (err[k] == EBADF && (v[k]->u.c.flags & LA_IOCB_RESFD) &&
			    la_own_closed(u->resfd, &u->res_id))) {
			/* (EBADF for resfd, closed behind our back, and not
			 * for the operation's descriptor: it goes again
			 * without resfd, once la_check_own below has made
			 * the provider dead.) */
			if (err[k] == EBADF)
				u->check_own = true;
			again = true;
			pr->slist = LA_ON_PENDING;
			px_list_push_front(&u->pending, &pr->slink);
		} else if (!(err[k] == EINVAL && la_hold_refused(u, r))) {
			la_fail(u, r, err[k], true);
		}
	}
	/* EAGAIN with nothing in the kernel that will complete: no event
	 * will come to make the leader try again, so it waits briefly. */
	u->submit_stuck = again && u->inkernel == 0;
	if (--u->submitting == 0)
		la_recancel(u);
	if (u->check_own)
		px__laio_check_own(u);
}

/* A new batch's generation (never 0, which no batch has). */
static unsigned la_next_gen(px_laio *u)
{
	if (!++u->batch_gen)
		u->batch_gen = 1;
	return u->batch_gen;
}

/* A start while the leader is blocked in the kernel: nobody else would
 * submit for a while, so this thread does, without the mutex. */
static void la_kick(px_laio *u)
{
	struct iocb *v[LA_KICK_MAX];
	int err[LA_KICK_MAX];
	px_laio_kick k = { .gen = la_next_gen(u) };
	unsigned n = la_claim(u, v, LA_KICK_MAX, k.gen);

	if (n) {
		u->submitting++;
		px_list_push_back(&u->kicks, &k.link);
		pthread_mutex_unlock(u->prov.lock);
		la_submit(u, v, err, n);
		pthread_mutex_lock(u->prov.lock);
		px_list_remove(&u->kicks, &k.link);
		la_subwait_release(u, k.gen);
		la_settle(u, v, err, n);
	}
	/* The leader must come back for: results finished here (a failed
	 * submit), a submit stuck with nothing in the kernel, or iocbs that
	 * became pending meanwhile (the next operation of a descriptor whose
	 * head finished, here or while the mutex was released) with room in
	 * the context to take them. */
	if (!px_list_empty(&u->done) || u->submit_stuck ||
	    (!px_list_empty(&u->pending) && u->inkernel < u->depth))
		la_wake_leader(u);
}

/*
 * A datagram write whose poll fired but whose send said EAGAIN
 * (px__futile_wait_ms, proactor/internal.h): a socket not connected to
 * its full AF_UNIX receiver polls writable while its own buffer has room,
 * so its poll iocb completed again inside io_submit and the leader sent
 * again, a whole CPU for as long as the receiver did not read.  From the
 * PX_FUTILE_MIN-th such round in a row the operation waits on u->held
 * (no iocb, LA_IDLE, so a cancel forgets it at once) for
 * px__futile_wait_ms; the leader's prepare issues its poll again when the
 * time has come, and its wait ends in time for that
 * (px__laio_submit_leader).  The same for any operation whose poll
 * fired (or whose spill set reported, la_spill_take) with POLLERR and
 * not its own direction: a socket's error queue
 * (IP_RECVERR, transmit timestamps) polls so until the application reads
 * it with MSG_ERRQUEUE, while recv and send say EAGAIN, and a poll iocb
 * always takes POLLERR.  Leader, mutex held.
 */
static bool la_hold(px_laio *u, px_result *r)
{
	struct la_priv *pr = la_priv(r);
	bool later = px__nbio_connect_later(r, pr->conn);
	unsigned ms;

	if (r->c.op != PX_OP_WRITE_DGRAM && !pr->err_alone && !later)
		return false;
	/* A connect to a full AF_UNIX backlog on a blocking socket
	 * (px__nbio_connect_later): its poll fires at once however full the
	 * backlog stays, so it is held from the first round. */
	if (later && pr->futile < PX_FUTILE_MIN - 1)
		pr->futile = PX_FUTILE_MIN - 1;
	if (pr->futile < UINT8_MAX)
		pr->futile++;
	ms = px__futile_wait_ms(pr->futile);
	if (!ms)
		return false;
	pr->held_until = px__now_ns() + (uint64_t)ms * 1000000u;
	pr->slist = LA_ON_HELD;
	px_list_push_back(&u->held, &pr->slink);
	return true;
}

/* Leader, prepare: issue the polls of the held datagram writes whose time
 * has come, claim the calls of the held operations whose poll was refused
 * (la_hold_refused) whose time has come, and note how long the wait may
 * last for the others (u->held_ms). */
static void la_release_held(px_laio *u)
{
	uint64_t now, first = UINT64_MAX;
	px_link *l, *next;

	u->held_ms = -1;
	if (px_list_empty(&u->held))
		return;
	now = px__now_ns();
	for (l = px_list_first(&u->held); l; l = next) {
		px_result *r = la_result_of_slink(l);
		struct la_priv *pr = la_priv(r);

		next = px_list_next(&u->held, l);
		if (pr->held_until > now) {
			if (pr->held_until < first)
				first = pr->held_until;
			continue;
		}
		if (!pr->refused) {
			la_unlist(u, r);
			la_issue(u, r, true);
			continue;
		}
		/* A refused poll (la_hold_refused): its call, made as a fired
		 * poll's is, by la_run without the mutex, which next_completed
		 * calls first (the wait does not block meanwhile: prepare's
		 * skip_wait).  Still waiting, it polls again (a descriptor
		 * that no longer refuses waits there), is refused again and
		 * held longer. */
		if (u->nclaimed == PX_LAIO_EVENTS) {
			first = now;  /* no room: the next prepare */
			continue;
		}
		la_unlist(u, r);
		pr->refused = false;
		la_claim_call(u, r, false);
	}
	if (first != UINT64_MAX)
		u->held_ms = (int)((first - now + 999999u) / 1000000u);
}

/*
 * Writers retried.  An AF_UNIX stream socket whose peer called
 * shutdown(SHUT_RD) refuses every send with EPIPE (a blocking send and
 * io_uring's fail so), but its poll never changes: no room comes and no
 * bit tells the shutdown, so a write waiting there in a POLLOUT poll
 * waited for good.  So the leader counts PX_LAIO_RETRY_MS periods while
 * any write has its poll issued (u->writers, wait capped at the period's
 * end), and a write whose poll has been in the kernel over a whole period
 * has it cancelled (la_priv.retry): its event, 0 or ECANCELED, is taken as
 * a report, so the send is made again (one per write per period) and
 * EAGAIN arms a new poll.  Nothing is done while no write waits.  Leader,
 * prepare, mutex held.
 */
static void la_writers_retry(px_laio *u)
{
	uint64_t now, period = (uint64_t)PX_LAIO_RETRY_MS * 1000000u;
	px_link *l;

	u->writers_ms = -1;
	if (px_list_empty(&u->writers))
		return;
	now = px__now_ns();
	if (now >= u->next_wtick) {
		u->wtick++;
		u->next_wtick = now + period;
		for (l = px_list_first(&u->writers); l;
		     l = px_list_next(&u->writers, l)) {
			struct la_priv *pr =
				px_container_of(l, struct la_priv, wlink);
			struct io_event ev;
			int rc;

			/* One waiting in the spill set (la_spill) is taken
			 * out and claimed for its call, as if reported. */
			if (pr->slist == LA_ON_SPILL) {
				px_result *r = la_result_of_slink(&pr->slink);

				if (u->wtick - pr->wstamp < 2 || pr->cancel_req ||
				    u->nclaimed == PX_LAIO_EVENTS)
					continue;
				pr->wstamp = u->wtick;
				la_unlist(u, r);
				pr->retry = true;
				la_claim_call(u, r, true);
				continue;
			}
			/* Only a poll in the kernel (not pending, held, in a
			 * batch being submitted, fired or being cancelled)
			 * that was issued before the last period began. */
			if (u->wtick - pr->wstamp < 2 || pr->phase != LA_POLL ||
			    pr->slist != LA_NOLIST || pr->cancel_req ||
			    pr->retry)
				continue;
			pr->wstamp = u->wtick;
			rc = px__laio_io_cancel(u->ctx, &pr->cb, &ev);
			/* EINVAL: not in the kernel (its event is in the
			 * ring, or a start's batch is still submitting it). */
			if (rc == 0 || rc == -EINPROGRESS)
				pr->retry = true;
		}
	}
	u->writers_ms = (int)((u->next_wtick - now + 999999u) / 1000000u);
}

int px__laio_prepare(px_laio *u, bool with_intr)
{
	unsigned n = 0;

	if (u->check_own)
		px__laio_check_own(u);
	if (with_intr && !u->intr_armed && !px_laio_dead(u)) {
		io_prep_poll(&u->intr_cb, u->intr_fd, POLLIN);
		u->intr_cb.data = NULL;
		u->lb.v[n++] = &u->intr_cb;
		u->intr_armed = true;
	}
	if (u->watch_want && !u->watch_armed) {
		io_prep_poll(&u->watch_cb, u->watch_fd, POLLIN);
		u->watch_cb.data = NULL;
		u->lb.v[n++] = &u->watch_cb;
		u->watch_armed = true;
	}
	u->watch_want = false;
	la_release_held(u);
	la_writers_retry(u);
	u->lb_gen = la_next_gen(u);
	n += la_claim(u, u->lb.v + n, u->depth + 1, u->lb_gen);
	u->lb.n = n;
	if (n) {
		u->submitting++;
		atomic_store(&u->lb_waiter, false);
		atomic_store(&u->lb_unsub, true);
	}
	u->skip_wait = !px_list_empty(&u->done) || u->nclaimed;
	u->leader_waiting = true;
	/* Keep the device's queue full: with files in the kernel, a wait
	 * takes a quarter of them, so the callbacks start their successors
	 * and the next prepare submits them while most of the rest are still
	 * in flight.  Taking all that had completed let a batch of Q drain
	 * to nothing before the next Q went in (the ring gives the rest to
	 * the next wait at once).  The epoll wait must empty the ring: its
	 * eventfd was reset. */
	if (!u->reap_all) {
		unsigned k = u->files_inkernel / LA_REAP_SHARE;
		u->reap_max = !u->files_inkernel ? PX_LAIO_EVENTS
			    : k < 1 ? 1 : k > PX_LAIO_EVENTS ? PX_LAIO_EVENTS : k;
	}
	return 0;
}

int px__laio_submit_leader(px_laio *u, int timeout_ms)
{
	bool again = false;

	if (u->lb.n) {
		again = la_submit(u, u->lb.v, u->lb.err, u->lb.n);
		/* Every number of the batch has been looked up: a cancel
		 * that waits for that (la_unsubmitted) may return. */
		atomic_store(&u->lb_unsub, false);
		if (atomic_load(&u->lb_waiter)) {
			pthread_mutex_lock(u->prov.lock);
			la_subwait_release(u, u->lb_gen);
			pthread_mutex_unlock(u->prov.lock);
		}
	}
	for (unsigned i = 0; i < u->lb.n; i++) {
		if (!u->lb.err[i] || u->lb.err[i] == EAGAIN)
			continue;
		/* The interrupt's poll has nothing to hand out, and refused
		 * other than for room (its eventfd closed behind our back) it
		 * stays refused: returning at once spun the leader at a whole
		 * CPU.  It naps instead, as a dead provider's waits do. */
		if (u->lb.v[i] == &u->intr_cb) {
			timeout_ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
			continue;
		}
		return 0;  /* a failure to hand out */
	}
	if (u->skip_wait)
		return 0;
	/* Nothing but the context's own events can wake a dead provider's
	 * leader (px_laio.dead). */
	if (px_laio_dead(u))
		timeout_ms = px__cap_ms(timeout_ms, PX_NO_WAKE_MS);
	/* Iocbs left over (the native interrupt's poll may be among them):
	 * wait briefly, then try again. */
	if (again)
		timeout_ms = px__cap_ms(timeout_ms, PX_LAIO_STUCK_MS);
	/* A held datagram write polls again then (la_hold). */
	if (u->held_ms >= 0)
		timeout_ms = px__cap_ms(timeout_ms, u->held_ms);
	/* A write waiting for room is tried again then (la_writers_retry). */
	if (u->writers_ms >= 0)
		timeout_ms = px__cap_ms(timeout_ms, u->writers_ms);
	return timeout_ms;
}

int px__laio_reap(px_laio *u, long min_nr, struct timespec *ts,
		  const sigset_t *sigmask)
{
	long nr = u->reap_max;
	int rc;

	if (sigmask)
		rc = io_pgetevents(u->ctx, min_nr, nr, u->ev, ts, (sigset_t *)sigmask);
	else
		rc = io_getevents(u->ctx, min_nr, nr, u->ev, ts);
	if (rc < 0)
		return rc;
	u->nev = (unsigned)rc;
	u->iev = 0;
	u->reap_more = u->reap_all && rc == nr;
	return rc;
}

/* One event out of the context.  Mutex held. */
static void la_event(px_laio *u, const struct io_event *e)
{
	long res = (long)e->res;
	px_result *r;
	struct la_priv *pr;
	unsigned tag;

	if (e->obj == &u->intr_cb) {
		uint64_t v;
		/* The native interrupt fired: reset the eventfd; its poll is
		 * armed again by the next prepare.  Only when the poll says
		 * readable: a poll cancelled because the interrupt's write
		 * failed (age_intr_interrupt) ends with no events, and its
		 * number may name the application's file by then (dup2
		 * behind our back), where a read blocked the leader for good
		 * on a pipe, px_destroy with it, or took the application's
		 * bytes (TESTING.md, fixed problem 312). */
		if (e->res & POLLIN)
			while (read(u->intr_fd, &v, sizeof(v)) < 0 &&
			       errno == EINTR)
				;
		u->intr_armed = false;
		u->intr_pending = false;
		return;
	}
	if (e->obj == &u->watch_cb) {
		/* The watched descriptor is readable: this wait has done its
		 * part (waking the leader); the dispatcher leads its owner. */
		u->watch_armed = false;
		return;
	}
	if (e->obj == &u->spill_cb) {
		/* The spill set has reports: next_completed takes them once
		 * the claims of this batch have run. */
		u->spill_armed = false;
		u->spill_fired = true;
		return;
	}
	r = la_untag(e->data, &tag);
	u->inkernel--;
	/* A cancelled poll's, whose operation has ended (la_orphan): the
	 * record may be another operation's by now. */
	if (u->norphans && la_orphan_take(u, r, tag))
		return;
	pr = la_priv(r);
	u->files_inkernel -= pr->phase == LA_OP;
	la_unlist(u, r);  /* off u->recancel, if its cancel was retried */
	if (pr->phase == LA_OP) {
		/* A file operation: its own result, cancelled or not. */
		if (res < 0) {
			la_fail(u, r, (int)-res, true);
		} else {
			px_result_finish(r, (size_t)res, 0);
			la_complete(u, r, true);
		}
		return;
	}
	/* The readiness poll of a stream operation. */
	pr->phase = LA_IDLE;
	if (pr->cancel_req) {
		pr->retry = false;
		la_fail(u, r, ECANCELED, true);
		return;
	}
	/* A write whose poll la_writers_retry cancelled: try it as if
	 * reported. */
	if (res < 0 && !(pr->retry && res == -ECANCELED)) {
		pr->retry = false;
		la_fail(u, r, (int)-res, true);
		return;
	}
	/* Ready: claim it; its call runs after this batch of events, with
	 * the mutex released (la_run). */
	pr->err_alone = res > 0 &&
			px__nbio_error_alone((unsigned)res,
					     px__fdq_dir(r->c.op));
	la_claim_call(u, r, true);  /* its poll fired */
}

/* The calls of the results la_event claimed, with the mutex released
 * (docs/ARCHITECTURE.md, "The mutex": claim, then unlock).  A claimed
 * result stays at the head of its queue, so a start behind it queues;
 * a cancel meanwhile only marks it.  Leader, mutex held on entry and
 * exit. */
static void la_run(px_laio *u)
{
	unsigned n = u->nclaimed;

	pthread_mutex_unlock(u->prov.lock);
	for (unsigned i = 0; i < n; i++) {
		px_result *r = u->claimed[i];
		struct la_priv *pr = la_priv(r);
		size_t before = r->done;

		pr->tried = (uint8_t)la_try(&pr->io, r);
		if (r->done != before)
			pr->futile = 0;   /* a write-all moved bytes */
	}
	pthread_mutex_lock(u->prov.lock);
	u->nclaimed = 0;
	for (unsigned i = 0; i < n; i++) {
		px_result *r = u->claimed[i];
		struct la_priv *pr = la_priv(r);
		bool retry = pr->retry;

		la_io_store(pr->fe, &pr->io);
		pr->phase = LA_IDLE;
		pr->retry = false;
		px_call_end(r);
		if (pr->tried != PX_NBIO_AGAIN) {
			la_complete(u, r, true);  /* its data, even if cancelled */
		} else if (pr->cancel_req) {
			la_fail(u, r, ECANCELED, true);
		} else if (!la_hold(u, r)) {
			la_issue(u, r, true);
			/* Retried at the period's start: its new poll will
			 * have waited a whole period at the next one. */
			if (retry)
				pr->wstamp = u->wtick - 1;
		}
	}
}

px_result *px__laio_next_completed(px_laio *u)
{
	struct timespec zero = { 0, 0 };
	px_link *l;

	u->leader_waiting = false;
	if (u->lb.n) {
		atomic_store(&u->lb_unsub, false);
		la_subwait_release(u, u->lb_gen);
		la_settle(u, u->lb.v, u->lb.err, u->lb.n);
		u->lb.n = 0;
	}
	if (u->check_own)
		px__laio_check_own(u);
	/* The calls of held operations whose poll was refused, claimed in
	 * prepare (la_release_held); before any event claims more. */
	if (u->nclaimed)
		la_run(u);
	for (;;) {
		if ((l = px_list_pop_front(&u->done))) {
			px_result *r = px_result_of_plink(l);

			la_priv(r)->on_done = false;
			return r;
		}
		if (u->iev < u->nev) {
			/* The whole batch of events, then one unlock for the
			 * calls of every poll that fired. */
			while (u->iev < u->nev)
				la_event(u, &u->ev[u->iev++]);
			if (u->nclaimed)
				la_run(u);
			continue;
		}
		if (u->spill_fired) {
			u->spill_fired = false;
			la_spill_take(u);
			if (u->nclaimed)
				la_run(u);
			if (u->check_own)
				px__laio_check_own(u);
			continue;
		}
		/* The last reap filled the array: there may be more (libaio
		 * answers an empty ring without a system call). */
		if (!u->reap_more || px__laio_reap(u, 0, &zero, NULL) <= 0) {
			u->reap_more = false;
			return NULL;
		}
	}
}

/* ------------------------------------------------------------------ */
/* Provider ops                                                         */
/* ------------------------------------------------------------------ */

/* rd_miss is kept while the descriptor is idle (a request/response
 * exchange keeps skipping), and forgotten on the hints that the number
 * may soon name another file: an error, a cancel, the end of a stream
 * (la_complete), px_close (la_closed).  A number closed with close(2)
 * without such a hint keeps it. */
static bool la_skip_try(la_fd *fe, int dir)
{
	if (dir != PX_FDQ_RD || fe->rd_miss < LA_SPEC_MISSES || fe->sig_hint)
		return false;
	if (++fe->rd_skip < LA_SPEC_PROBE)
		return true;
	fe->rd_skip = 0;
	return false;
}

static void la_learn_try(la_fd *fe, int dir, int rc)
{
	if (dir != PX_FDQ_RD)
		return;
	if (rc != PX_NBIO_AGAIN)
		fe->rd_miss = 0;
	else if (fe->rd_miss < LA_SPEC_MISSES)
		fe->rd_miss++;
}

/*
 * A file operation on a descriptor without offsets (px__no_offsets).  The
 * kernel's AIO takes a read or write of a pipe, a socket, a terminal or
 * an eventfd as a stream call and makes it inside io_submit, blocking
 * the submitting thread (the leader, in px_handle_events) until data or
 * room comes, beyond the reach of px_cancel and px_destroy.  pread(2)
 * fails those with ESPIPE, and so do the readiness engines: so does this
 * provider, at the start.  One fstat per number, then remembered
 * (la_fd.positional) until px_close, an operation on it fails, a stream
 * operation starts on it, or a start finds it idle outside the callback of
 * one of its own operations (it may have been closed with close(2) and
 * reused meanwhile).  The stream start counts because a stream operation
 * pending on the number keeps it busy: a file start behind it, on a
 * number reused for a pipe, would otherwise trust what an earlier file's
 * operation found (a helper's review of 2026-12-05).  A callback that
 * closes its own number with close(2), gets it back for a pipe and starts
 * a file operation there is not caught.  (fstat failing: the operation
 * gets the kernel's answer.)
 */
static bool la_no_offsets(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && px__no_offsets(fd, &st);
}

static int la_start(px_provider *p, px_result *r)
{
	px_laio *u = la_of_prov(p);
	struct la_priv *pr = la_priv(r);
	int dir = px__fdq_dir(r->c.op);
	px_fdq_entry *fq;
	la_fd *fe;
	int rc;

	if (!la_does(r->c.op))
		return -EOPNOTSUPP;
	memset(pr, 0, sizeof(*pr));
	r->done = 0;
	rc = px__fdq_get(&u->fdq, r->c.fd, &fq);
	if (rc < 0)
		return rc;
	fe = pr->fe = px_container_of(fq, la_fd, fq);
	if (!fe->open_seen && !fe->inflight) {
		if (fcntl(r->c.fd, F_GETFD) < 0 && errno == EBADF)
			return -EBADF;
		fe->open_seen = true;
	}
	/* Idle, the number may have been closed with close(2) and reused
	 * for a pipe or a socket, where an IO_CMD_PREAD would block inside
	 * io_submit: look again, unless the start comes from the callback
	 * of an operation on this very number (a read chain, which would
	 * otherwise pay an fstat per read). */
	if (dir >= 0 || (fe->positional && !fe->inflight &&
			 px__dispatch_current_fd(r->c.proactor) != r->c.fd))
		fe->positional = false;
	if (dir < 0 && !fe->positional) {
		if (la_no_offsets(r->c.fd)) {
			px_result_finish(r, 0, ESPIPE);
			return PX_START_DONE;
		}
		fe->positional = true;
	}
	fe->inflight++;
	if (dir >= 0) {
		if (!px_fdq_push(fq, dir, r))
			return PX_START_STARTED;  /* goes when those before it are done */
		/* The head of an idle queue: try the call at once, without
		 * the mutex.  Nothing else can reach r meanwhile: it is not
		 * on the started list yet (no cancel), has no iocb (no
		 * event), and a start behind it queues. */
		if (!la_skip_try(fe, dir)) {
			px_nbio io;
			la_io_load(&io, fe);
			px_call_begin(r);
			pthread_mutex_unlock(u->prov.lock);
			rc = la_try(&io, r);
			pthread_mutex_lock(u->prov.lock);
			px_call_end(r);
			la_io_store(fe, &io);
			la_learn_try(fe, dir, rc);
			if (rc != PX_NBIO_AGAIN) {
				/* A start that queued behind r meanwhile is now
				 * the head, its poll pending: submit it. */
				la_complete(u, r, false);
				if (u->leader_waiting && !px_list_empty(&u->pending))
					la_kick(u);
				return PX_START_DONE;
			}
		}
		la_issue(u, r, true);
	} else if (r->c.op == PX_OP_WRITE_FILE && la_fwrite_held(fe, r)) {
		/* Issued when the earlier write to its bytes is done
		 * ("Writes to one place"). */
		return PX_START_STARTED;
	} else {
		la_issue(u, r, false);
	}
	if (u->leader_waiting) {
		pr->in_start = true;
		/* r is on the processor's starting list, where a px_cancel
		 * only marks it: it waits for this call like any other, so
		 * that it returns only once the batch holding r's iocb has
		 * been through io_submit (la_subwait). */
		px_call_begin(r);
		la_kick(u);
		px_call_end(r);
		pr->in_start = false;
		if (pr->early)
			return PX_START_DONE;
	}
	return PX_START_STARTED;
}

static int la_cancel(px_provider *p, px_result *r)
{
	px_laio *u = la_of_prov(p);
	struct la_priv *pr = la_priv(r);
	struct io_event ev;

	if (pr->cancel_req)
		return PX_CANCEL_PENDING;
	/* Finished already and waiting on u->done for the leader, which may
	 * be making its calls without the mutex (la_run) or be blocked in
	 * the kernel after another thread's submit failed it (la_settle):
	 * next_completed hands it out, with its own result.  Its phase is
	 * LA_IDLE, which below would complete it a second time. */
	if (pr->on_done)
		return PX_CANCEL_PENDING;
	if (pr->phase == LA_IDLE || pr->slist == LA_ON_PENDING ||
	    pr->slist == LA_ON_SPILL) {
		/* Not in the kernel: forget it now.  A descriptor's next
		 * operation may have become pending: the leader submits it. */
		la_fail(u, r, ECANCELED, false);
		if (!px_list_empty(&u->pending))
			la_wake_leader(u);
		return PX_CANCEL_DONE;
	}
	pr->cancel_req = true;
	if (la_unsubmitted(u, pr))
		la_subwait(u, r);
	if (pr->phase == LA_POLL) {
		/* EINPROGRESS: the poll's event comes through the ring.
		 * EINVAL: it is not in the kernel's list, because its event
		 * is already in the ring (or a kernel worker will put it
		 * there), or because its batch is still being submitted;
		 * then try again once every batch has settled.  One of those
		 * batches may be the leader's own, claimed in prepare and
		 * settled only when its wait returns: wake it, or a poll
		 * that never fires (a write to a peer that does not read)
		 * keeps it in io_getevents with the cancel unsent, and the
		 * operation never completes.  Otherwise the operation ends
		 * now and the event is dropped when it comes (la_orphan). */
		if (px__laio_io_cancel(u->ctx, &pr->cb, &ev) == -EINVAL &&
		    u->submitting) {
			pr->slist = LA_ON_RECANCEL;
			px_list_push_back(&u->recancel, &pr->slink);
			la_wake_leader(u);
		} else if (la_orphan(u, r)) {
			la_fail(u, r, ECANCELED, false);
			if (!px_list_empty(&u->pending))
				la_wake_leader(u);
			return PX_CANCEL_DONE;
		}
	}
	return PX_CANCEL_PENDING;
}

/* px_close closed fd: its next start checks that it is open, and its next
 * read tries at the start (la_skip_try). */
static void la_closed(px_provider *p, int fd)
{
	px_fdq_entry *fq = px_fdq_lookup(&la_of_prov(p)->fdq, fd);

	if (fq) {
		la_fd *fe = px_container_of(fq, la_fd, fq);
		fe->open_seen = false;  /* a start on it checks it again */
		fe->rd_miss = 0;
		fe->rd_skip = 0;
		fe->positional = false;
	}
}

static void la_destroy(px_provider *p)
{
	px_laio *u = la_of_prov(p);

	/* Waits for whatever is still in the kernel. */
	io_destroy(u->ctx);
	if (u->pl)
		u->pl->ops->destroy(u->pl);
	if (u->wait.intr && u->wait.intr != &u->nintr)
		u->wait.intr->ops->destroy(u->wait.intr);
	if (u->intr_fd >= 0)
		px__own_close_id(u->intr_fd, &u->intr_id);
	if (u->resfd >= 0)
		px__own_close_id(u->resfd, &u->res_id);
	if (u->spill_ep >= 0)
		px__own_close_id(u->spill_ep, &u->spill_id);
	px__fdq_fini(&u->fdq);
	free(u->orphans);
	free(u->lb.v);
	free(u->lb.err);
	free(u);
}

/* The call that kept the provider from being made, for px_create's
 * message. */
static void la_why(const px_proc_spec *spec, const char *call, int rc)
{
	if (spec->why_len)
		snprintf(spec->why, spec->why_len, "%s: %s", call, strerror(-rc));
}

/*
 * Whether this kernel's AIO polls (IOCB_CMD_POLL, Linux 4.18): every stream
 * operation, accept and connect waits by one, and so does the native
 * interrupt.  The class's probe asks only for auto; a context made for a
 * config that named Linux AIO went without, and on a kernel from 4.13 to
 * 4.17 a socket read that had to wait completed at once with the EINVAL
 * io_submit gave its poll.  So the new context polls an eventfd for
 * POLLOUT, which completes at once, through the provider's io_submit
 * (px__laio_io_submit, which a test may make refuse polls as such a
 * kernel does), and reaps it: four system calls.  0 (also when io_submit
 * refused it for another reason, which says nothing of the command),
 * -ENOSYS (EINVAL from io_submit), or the error of the eventfd or of the
 * reaping.
 */
static int la_poll_check(io_context_t ctx, const px_proc_spec *spec)
{
	struct iocb cb, *v[1] = { &cb };
	struct io_event ev;
	int efd = px__own_fd(eventfd(0, EFD_CLOEXEC)), rc;

	if (efd < 0) {
		rc = -errno;
		la_why(spec, "eventfd", rc);
		return rc;
	}
	io_prep_poll(&cb, efd, POLLOUT);
	cb.data = NULL;
	rc = px__laio_io_submit(ctx, 1, v);
	if (rc == 1) {
		struct timespec ts = { 1, 0 };
		do {
			rc = io_getevents(ctx, 1, 1, &ev, &ts);
		} while (rc == -EINTR);
		rc = rc == 1 ? 0 : rc < 0 ? rc : -ETIMEDOUT;
	} else {
		/* EINVAL: no such command.  Anything else (EAGAIN, a test's
		 * injected refusal) says nothing about it: go on. */
		rc = rc == -EINVAL ? -ENOSYS : 0;
	}
	px__own_close(efd);
	if (rc == -ENOSYS && spec->why_len)
		snprintf(spec->why, spec->why_len, "this kernel's AIO has no "
			 "IOCB_CMD_POLL (Linux 4.18), needed for sockets and "
			 "the interrupt");
	else if (rc < 0)
		la_why(spec, "a poll iocb", rc);
	return rc;
}

static int la_create(const px_processor_config *cfg, const px_proc_spec *spec,
		     px_provider **out)
{
	const px_laio_settings *set = (const void *)spec->settings;
	unsigned depth = set->depth ? set->depth : PX_LAIO_DEPTH_DEFAULT;
	bool epoll = !strcmp(spec->wait->name, "epoll");
	px_laio *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return -ENOMEM;
	(void)px__rwf_nosignal(); /* probed now, not in the first write */
	u->intr_fd = u->resfd = u->watch_fd = u->spill_ep = -1;
	/* Three more events than depth: the native interrupt's poll, the
	 * watch's and the spill set's. */
	rc = io_setup((int)depth + 3, &u->ctx);
	if (rc < 0) {
		/* EAGAIN: fs.aio-max-nr used up (see the class's explain);
		 * ENOSYS: no AIO in this kernel; EPERM: seccomp. */
		if (rc != -EAGAIN)
			la_why(spec, "io_setup", rc);
		free(u);
		return rc;
	}
	rc = la_poll_check(u->ctx, spec);
	if (rc < 0) {
		io_destroy(u->ctx);
		free(u);
		return rc;
	}
	u->depth = depth;
	/* An eighth of the context, at least one place, is kept for file
	 * operations; polls past the rest wait in the spill set. */
	u->poll_cap = depth - (depth / 8 ? depth / 8 : 1);
	px_list_init(&u->spilled);
	px_list_init(&u->pending);
	px_list_init(&u->done);
	px_list_init(&u->recancel);
	px_list_init(&u->kicks);
	px_list_init(&u->subwaiters);
	px_list_init(&u->held);
	u->held_ms = -1;
	px_list_init(&u->writers);
	u->writers_ms = -1;
	px__fdq_init(&u->fdq, sizeof(la_fd));
	u->lb.v = calloc(depth + 3, sizeof(*u->lb.v));
	u->lb.err = calloc(depth + 3, sizeof(*u->lb.err));
	if (!u->lb.v || !u->lb.err) {
		rc = -ENOMEM;
		goto fail;
	}
	/* The spill set is made here, not when an operation first needs it:
	 * a descriptor the library opens in the middle of a start takes the
	 * lowest free number, which may be the one the application has just
	 * closed with close(2) and is about to pass to px_close, which then
	 * closed the set (test/close.c, close_during_start_call, once every
	 * wait of the epoll wait went to the set). */
	u->spill_ep = px__own_fd_id(epoll_create1(EPOLL_CLOEXEC),
				   &u->spill_id);
	if (u->spill_ep < 0) {
		rc = -errno;
		/* A kernel without epoll (CONFIG_EPOLL off), or a sandbox
		 * that refuses it: no spill set, and every poll waits in the
		 * context (la_spill), as before there was one.  The epoll
		 * wait cannot do without it. */
		if (epoll || (rc != -ENOSYS && rc != -EPERM)) {
			la_why(spec, "epoll_create1", rc);
			goto fail;
		}
	}
	u->spill_reg.fd = u->spill_ep;

	if (epoll) {
		px_intr *in;
		rc = px__intr_create(cfg, &in);
		if (rc < 0)
			goto fail;
		u->wait.intr = in;
		u->wait.ops = &px__wait_laio_epoll_ops;
		u->use_resfd = true;
		u->reap_all = true;
		u->reap_max = PX_LAIO_EVENTS;
		u->resfd = px__own_fd_id(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC),
					  &u->res_id);
		if (u->resfd < 0) {
			rc = -errno;
			la_why(spec, "eventfd", rc);
			goto fail;
		}
		rc = px__poller_epoll_create(in, &u->pl);
		if (rc < 0)
			goto fail;
		u->reg.fd = u->resfd;
		/* Readiness waits in the spill set, which the poller watches
		 * (see "Readiness and the epoll wait" above). */
		u->spill_all = true;
	} else if (spec->intr == PX_INTR_NATIVE) {
		u->intr_fd = px__own_fd_id(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC),
					    &u->intr_id);
		if (u->intr_fd < 0) {
			rc = -errno;
			la_why(spec, "eventfd", rc);
			goto fail;
		}
		u->nintr.ops = &px__intr_laio_ops;
		u->nintr.fd = -1;
		u->nintr.wait_mask = NULL;
		u->wait.intr = &u->nintr;
		u->wait.ops = &px__wait_laio_getevents_ops;
		u->reap_max = PX_LAIO_EVENTS;
	} else {
		px_intr *in;
		rc = px__intr_create(cfg, &in);
		if (rc < 0)
			goto fail;
		u->wait.intr = in;
		u->wait.ops = &px__wait_laio_getevents_ops;
		u->reap_max = PX_LAIO_EVENTS;
	}

	u->prov.ops = &px__provider_laio_ops;
	u->prov.wait = &u->wait;
	u->prov.ops_mask = PX_OPS_IO;
	u->prov.flags = PX_PF_START_ANY_THREAD;
	u->prov.max_aio = cfg->max_aio ? cfg->max_aio : px__default_max_aio();
	u->prov.priv_size = sizeof(struct la_priv);
	*out = &u->prov;
	return 0;

fail:
	la_destroy(&u->prov);
	return rc;
}

const px_provider_ops px__provider_laio_ops = {
	.name = "linux_aio",
	.create = la_create,     /* io_setup, wait and interrupt */
	.destroy = la_destroy,   /* io_destroy and the fd table */
	.start = la_start,       /* try a stream call, or queue an iocb */
	.cancel = la_cancel,     /* forget, io_cancel a poll, or mark */
	.closed = la_closed,     /* px_close: forget the read misses */
};
