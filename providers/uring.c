/*
 * uring.c - the io_uring provider (through liburing).
 *
 * Mechanism.  A start fills one submission queue entry (SQE) and returns;
 * the kernel performs the operation and posts a completion (CQE) whose
 * user_data is the px_result.  SQEs are submitted in batches: by the
 * leader, in the io_uring_enter that also waits (wait_strategies/uring.c),
 * or by the starting thread when a leader is already blocked in the kernel
 * (nobody else would submit for a while).  So N starts between two waits
 * cost one io_uring_enter.  SQEs are filled and published (the SQ tail
 * stored) under the proactor mutex only.  The leader's io_uring_enter,
 * which submits what prepare() published and waits, runs without it:
 * sends and reads that find data run inline in that enter, and holding the
 * mutex there kept every other thread out for the length of the network
 * stack's work.  A starter's enter (leader blocked) stays under the mutex:
 * its start must be in the kernel before the start call returns, or a
 * callback that waits for its own operation could wait forever.
 *
 * Rings.  The kernel does everything for one ring (inline sends and reads
 * in a submitting enter, task work retrying a poll-armed read) under that
 * ring's submission lock, so one ring keeps about one CPU busy however many
 * threads lead it in turn.  There are therefore several rings (rings=;
 * one per CPU, at most 4, by default), and the processor lets one leader
 * wait on each at once (px_provider.max_leaders, px_wait_ops.may_lead).
 * Each thread that leads gets a home ring (px__uring_pick) and leads it.
 * A start from a callback goes into the ring of the operation whose
 * callback runs (its home's, if the dispatcher moved that completion to
 * this thread), a start from outside the callbacks into a ring whose
 * leader waits when one thread alone runs the loop (ur_outside_ring), a
 * start from outside the callbacks of a thread that never led into the
 * ring of its descriptor's last start, the first start on a descriptor an
 * accept returned, or by a thread that never led, into the ring with the
 * fewest descriptors (ur_place_new; an accepted end of a loopback
 * connection this provider made, into the ring of its other end), other
 * starts into the thread's home
 * ring, a resubmission or the next queue head into the ring of the
 * request before it (ur_start_ring,
 * ur_issue_or_stall): so the thread that leads a ring is normally the one
 * that submits to it and runs its task work.  A cancel goes into the ring
 * of the request it aims at.  An outside start or cancel that lands in a
 * ring nobody leads wakes the waiting leaders (ur_wake_for).  Under light
 * load (both rings with a few requests at most) starts gather in ring 0
 * instead, so that one session is not split over two threads
 * (ur_gather_light); a ring that holds far more requests than another
 * one's that has a leader sends the starts from callbacks and home rings
 * there (ur_balance), so that the sessions spread over the threads.
 *
 * Kernel features relied on:
 *   - IORING_FEAT_EXT_ARG (5.11, required): a wait with a timeout passes the
 *     timeout to io_uring_enter instead of queueing a TIMEOUT SQE, so the
 *     unlocked leader never takes an SQE from under the starting threads.
 *   - IORING_SETUP_CQSIZE (5.5) and CLAMP (5.6): the CQ is made larger than
 *     the SQ, so more operations can be in flight than the SQ has slots.
 *   - IORING_FEAT_NODROP (5.5): should the CQ ever fill up, the kernel keeps
 *     the extra CQEs instead of dropping them.  max_aio is chosen so that it
 *     does not fill (unless the config forces a larger max_aio).
 *   - IORING_SETUP_SUBMIT_ALL (5.18, used when accepted): one bad SQE does
 *     not stop the rest of the batch.
 *   - IORING_SETUP_COOP_TASKRUN (5.19, with several rings or on request;
 *     dropped when refused): completions are not
 *     forced on the submitting thread by an IPI; they run when that thread
 *     next enters the kernel or is woken from a sleep.  Less overhead, more
 *     latency when the submitter spins in user code.
 *   - IORING_SETUP_SQPOLL (on request; unprivileged since 5.11): a kernel
 *     thread consumes the SQ, submission costs no syscall.
 * Not used: SINGLE_ISSUER (6.0) and DEFER_TASKRUN (6.1), because any
 * application thread may submit into any ring (under the mutex: a thread
 * that has not led yet, a cancel, a start while another thread leads its
 * home ring) and threads may lead other rings than their home; with DEFER_TASKRUN completions of requests submitted by one
 * thread would only be posted when that same thread waits on the ring.
 * Nor a registered ring fd (5.18): the registration is per thread.
 *
 * Quirks handled here:
 *   - io_uring does not order two requests in flight on the same file: two
 *     sends on one socket may be performed in either order.  Stream,
 *     datagram, accept and connect operations therefore wait in the
 *     shared per-descriptor queue (proactor/fdq.h, through r->plink): only
 *     the head of each direction is in the kernel, the next one is
 *     submitted when it completes.  File operations carry their own offset
 *     and go straight in.
 *   - read_stream on a socket is IORING_OP_RECV with
 *     IORING_RECVSEND_POLL_FIRST (5.19): the kernel arms the readiness
 *     poll before it tries, instead of a receive that finds nothing first.
 *     An echo or request/response read is nearly always started before its
 *     data comes; measured on 1/1/512/1024 (six rounds of 1 s), 17% more
 *     round trips at 11% less CPU per byte; on 100/2/8192/8192 (five
 *     rounds) 14% less CPU per byte, throughput within the noise.
 *     On ENOTSOCK (a pipe, a terminal) it is redone as IORING_OP_READ at
 *     offset -1 (the current position, 5.6), which works on anything,
 *     and the descriptor remembered as "not a socket", as it is from
 *     the first check of a number whose getsockopt says ENOTSOCK.  On
 *     EINVAL it is redone as READ too, and if that READ succeeds, the
 *     kernel refused the flag (before 5.19) and gets READ from then
 *     on; an AF_UNIX stream socket that is not connected answers EINVAL
 *     to both, a READ on a number closed meanwhile EBADF, and neither
 *     changes anything.  A read of a
 *     listening socket goes without the flag: a listener polls readable
 *     only when a connection waits, and the read would wait for one
 *     before failing (ENOTCONN, EINVAL).  It is known as one from the
 *     check of a number met for the first time (below), or from an
 *     accept started on it.
 *     (A read held back, below, goes in without the flag.)
 *     write_stream
 *     is IORING_OP_SEND with MSG_NOSIGNAL, so a socket whose peer has gone
 *     fails with EPIPE instead of raising SIGPIPE; on ENOTSOCK (a pipe) it is
 *     redone as IORING_OP_WRITE at offset -1 and the descriptor remembered
 *     as "not a socket" until one of its stream operations fails, or
 *     until a write that finds nothing in flight on it sees a socket
 *     there (fstat: the number was closed and reused).  A terminal
 *     without O_NONBLOCK (ur_tty_blocks: at the first look at a number
 *     that is no socket, at a SEND's ENOTSOCK, and at that fstat) has
 *     its WRITEs go with IOSQE_ASYNC (ur_prep_op).
 *   - Vectored operations are IORING_OP_READV / WRITEV (offset -1 for
 *     streams), and IORING_OP_SENDMSG with the iovec array for a vectored
 *     write_stream on a socket (MSG_NOSIGNAL, as SEND).  A write_all
 *     resumed inside an element sends the rest of that element alone
 *     (ur_prep_vec), so no copy of the caller's array is needed.
 *   - On an O_NONBLOCK descriptor a request that ends up in an io-wq worker
 *     (and, on older 5.x kernels, any READ/WRITE or accept) may complete
 *     with -EAGAIN instead of waiting.  The provider then waits for
 *     readiness with IORING_OP_POLL_ADD and tries again, so the application
 *     never sees that EAGAIN.  (6.18 polls internally even in io-wq; the
 *     path was tested with injected results.)
 *   - A request belongs to the thread that submitted it (whichever thread
 *     held the mutex: a starter or the leader).  Its task work runs in that
 *     thread; once the thread has exited, the kernel completes such a
 *     request with -ECANCELED without performing it, and cancels io-wq work
 *     queued by it (one a worker is performing ends with -EINTR).  An
 *     ECANCELED or EINTR nobody asked for is therefore submitted
 *     again, from the leader; a connect submitted again treats EISCONN as
 *     success and EALREADY as "still in progress" (poll, then ask again).
 *   - IORING_OP_ASYNC_CANCEL (5.5) may interrupt a request running in io-wq
 *     with a signal; it then ends with -EINTR, reported as ECANCELED.  It
 *     answers -ENOENT for a request caught between two rounds of task work
 *     (a send whose internal poll keeps firing goes to io-wq after 128 of
 *     them): the cancel is then sent again (ur_cancel_done).
 *   - Each pending read on a pipe occupies an io-wq worker on kernels whose
 *     pipes do not support non-blocking reads from io_uring (FMODE_NOWAIT).
 *   - A start on a descriptor that is not open returns -EBADF (one
 *     getsockopt(SO_ACCEPTCONN), which tells a listener too; an fcntl
 *     as well when it says EBADF, which an open O_PATH descriptor does)
 *     the first time the provider meets that descriptor number, and again
 *     at its next start with nothing in flight after px_close closed it
 *     (ur_closed) or after an operation on it ended with an error (EBADF
 *     among them), a cancel or the end of a stream: hints that the
 *     application may close the number next, with close(2) too, which
 *     the provider does not see, and get it back for another file (a
 *     listener, whose reads must not go with POLL_FIRST).  Otherwise,
 *     once it has been seen open, the check is skipped: it would double
 *     the syscalls of a request/response exchange.  So a number closed
 *     with close(2) after operations that all went well is not looked at
 *     again: a read of a listener that took it waits for a connection,
 *     and a start on it once closed fails in the completion (EBADF), not
 *     in the start.  A number an accept returned is known (a connected
 *     socket) without a check.  Operations pending when it is closed
 *     keep the file open in the kernel; the processor's idle check
 *     (proactor/processor.c) finds the closed number and cancels them
 *     (EBADF).  A number beyond the descriptor table is checked by the
 *     table itself before it grows, so a huge number that is not open
 *     costs no memory.
 *
 * Late reads (ur_hold_late, px__uring_late_flush):
 *   A socket read in the kernel before its data comes costs a poll arm,
 *   a wake-up and a round of task work when the data arrives.  In a
 *   ping-pong within one ring (a request/response exchange over
 *   loopback, both ends in this process, their operations in the same
 *   ring) every read is like that: the callback that starts it also
 *   starts the send to the peer, the peer's callback answers in the next
 *   batch, and the answer reaches a read that has been armed for a whole
 *   batch.  Such a read is held back one lead of its ring: the ring's
 *   prepare after its start leaves it out, the one after that puts it in
 *   the ring behind the sends the callbacks of the previous lead started,
 *   as a plain RECV, and it finds the answer at once.  Measured on
 *   1/1/8192/8192: 1.04 of TP_Reactor, in six paired rounds and in a run
 *   of the README's command, instead of 0.88-0.98; 20/1/8192/8192 +17%
 *   in six paired rounds; with two threads, 1/2/8192/8192 +17% and
 *   20/2/8192/8192 +9% (see docs/PERFORMANCE.md).  Held back are only reads
 *   that
 *     - are started by a callback of this proactor, into a ring that no
 *       thread leads at that moment (so no wait on it is under way that
 *       the held read would have to end; the read counts as the ring's
 *       pending work, so a thread comes to lead it, and that thread's
 *       prepare deals with it before its wait);
 *     - are on a socket whose last read, submitted as usual, ended in the
 *       lead after the one that submitted it.  A read that ends in its own
 *       lead found data there, or waited for a remote peer: holding it
 *       back would only add a lead (on 1/1/512/1024, held reads doubled
 *       the enters per round trip).
 *   Held reads feed no such verdict, so for 8 prepares in every 1,024
 *   nothing is held late, and the ordinary reads of those prepares decide
 *   afresh for every socket (ur_late_probing).
 *   The other socket reads such callbacks start (not late, or in a probe)
 *   are held too, but only until the ring's next prepare: "soon" reads.
 *   That prepare issues them after the sends the same callbacks started,
 *   still with POLL_FIRST, so a read whose data one of those sends
 *   carries finds it when the poll is armed instead of waiting for it
 *   (1/1/512/1024, where every read ends in its own lead: 1.0 poll arms
 *   per round trip before, none after).  Otherwise a soon read is an
 *   ordinary read: it goes into the kernel by the same prepare that would
 *   have submitted it, gives the verdict, and does not stop the wait from
 *   blocking.
 *   A prepare that issues held reads, or still holds some, in any ring it
 *   leads does not block in its wait.  A held read that does not end in
 *   the lead that issued it had to wait after all (with two threads: its
 *   data came from a send in the other ring, say): its descriptor starts
 *   its next 64 reads at once.  Held reads are on their ring's list
 *   (rg->late) and in its pending count, are cancelled like any read not
 *   yet in the kernel, and have no SQE until they are issued.  Not with
 *   SQPOLL.
 *   The order of the held reads decides how many acknowledgments TCP
 *   sends of its own, when both ends of a connection exchange through one
 *   ring.  TCP acknowledges at once a socket that has more than one
 *   segment unacknowledged when it is read (and, when the data comes,
 *   one whose window has not shrunk since it last told the peer), and
 *   otherwise lets the next send carry the acknowledgment.  Reads of up
 *   to a segment are issued oldest first: on 1/1/512/1024 no
 *   acknowledgment goes out alone (2.0 segments per round trip; 3.0 with
 *   newest first, and for TP_Reactor and the bare loop), and newest first
 *   lost 13% there.  Reads of more than a segment (TCP_MAXSEG, asked once
 *   per socket) are issued newest first: oldest first, one end always
 *   sent while it still held its peer's unread block, advertised the
 *   smaller window, and drew an immediate acknowledgment for the next
 *   block (6.0 segments per round trip on 1/1/65536/131072, where
 *   TP_Reactor makes 5.0); newest first, the ends take turns and only
 *   the acknowledgment of the read that comes last remains (5.0):
 *   1.10 of TP_Reactor instead of 1.04, at 0.92 of its CPU per byte
 *   instead of 0.96 (10 paired rounds of 2 s).
 *
 * Gated reads (read_gate=N; ur_gate_wants, ur_gate_fire):
 *   A RECV armed before its data comes leaves a poll entry on the
 *   socket, and the peer's send that feeds it runs that entry's wake
 *   there and then: task work queued for the thread that submitted the
 *   RECV, that thread flagged or woken.  When the peer is another
 *   process on another CPU, that peer pays for it in every message, in
 *   lines of this process's request, task list and thread it has to
 *   fetch.  An epoll set's wake is cheaper for the peer: the socket goes
 *   on the set's ready list, and nobody is woken while the set's one
 *   waiter is away.  So when N or more socket reads would wait in a ring
 *   (RECVs with POLL_FIRST in the kernel, and reads already gated,
 *   counting the new one), a new read is gated instead of armed: an
 *   EPOLL_CTL (5.6) puts one-shot readable interest in the ring's own
 *   epoll set, keyed by the descriptor number, and the read is parked.
 *   One POLL_ADD on the set stays in the ring while reads are parked;
 *   its completion has the leader drain the set (epoll_wait with no
 *   timeout, one call for up to 64 descriptors) and issue the reads of
 *   the descriptors it reports as RECVs without POLL_FIRST, which find
 *   their data inline in the next enter.  The provider keeps a guess
 *   per descriptor of which set holds its interest (MOD, else ADD), and
 *   the EPOLL_CTL's answer corrects it: ENOENT to a MOD (the number was
 *   closed and reused, or moved to another ring) and EEXIST to an ADD
 *   send the other one.  Any other answer (epoll refuses the file, as
 *   for a regular file; no watches left) sends the read in ungated.  A
 *   report whose descriptor has no parked read in that ring only spends
 *   the one-shot interest.  A parked read is cancelled, closed and
 *   destroyed like a read held late (nothing in the kernel refers to
 *   it); one whose EPOLL_CTL is in flight ends with that CTL's CQE.
 *   Costs: an EPOLL_CTL per gated read, an epoll_wait per batch, and a
 *   lead between the data's arrival and the read (the report, then the
 *   RECV).  That lead is what an exchange within this process pays
 *   for: 20 sessions of 8 KiB on two threads ran at half the speed
 *   gated, while the echo example's client on another CPU paid 0.1-0.7
 *   µs less a message (docs/PERFORMANCE.md, "Gated reads").  Not with
 *   SQPOLL.
 *
 * Whose peer is here (the default gate; ur_peer_here):
 *   Without read_gate= the threshold is PX_URING_GATE_DEFAULT (8), and
 *   only reads of a socket whose other end this provider does not serve
 *   are gated: where the peer's send would have completed an armed
 *   receive in the peer's own enter, gating only adds the lead.  The
 *   first read the gate would take since the number was seen open asks
 *   where the peer is.  An AF_UNIX socket's peer is here when this
 *   process made it (SO_PEERCRED).  A TCP socket's is here when the
 *   peer's address is on this host (loopback, or the socket's own
 *   address) and its port is held by one of the provider's sockets:
 *   u->ports counts, per local port, the listeners it accepts on (noted
 *   at the accept's start), the sockets it connected (at the connect's
 *   completion) and the sockets it asked about (their own port, at the
 *   ask).  The port is looked up at every read the gate would take, as
 *   the other end may be noted later than this one.  Anything else,
 *   another family, a call that fails, counts as elsewhere.  The cost:
 *   getsockname and getpeername (or SO_PEERCRED) once per socket, only
 *   once eight reads wait in its ring, and a getsockname per connect
 *   and per listener.  A mistake costs speed only, either way: an
 *   in-process end it cannot pair (connected with connect(2), never
 *   read from) is gated; a peer in another process of this host that
 *   uses a port number one of ours also holds is not.
 */
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nbio.h"
#include "uring.h"
#include "uring_class.h"

#ifdef PX_HAVE_MEMCHECK_H
#include <valgrind/memcheck.h>
/* The kernel wrote the n bytes of r's buffer(s) from offset from: say so
 * to valgrind's memcheck, which sees the system calls a program makes
 * but not what the kernel does for an io_uring request, and would take
 * the bytes read for uninitialised.  Outside valgrind the request is a
 * few instructions that do nothing. */
static void ur_mark_filled(const px_result *r, size_t from, size_t n)
{
	if (!RUNNING_ON_VALGRIND || !n)
		return;
	if (!(r->flags & PX_RF_VECTORED)) {
		VALGRIND_MAKE_MEM_DEFINED((char *)r->c.buf + from, n);
		return;
	}
	for (int i = 0; i < r->c.iovcnt && n; i++) {
		size_t len = r->c.iov[i].iov_len;
		if (from >= len) {
			from -= len;
			continue;
		}
		size_t k = len - from < n ? len - from : n;
		VALGRIND_MAKE_MEM_DEFINED((char *)r->c.iov[i].iov_base + from, k);
		n -= k;
		from = 0;
	}
}
#else
static void ur_mark_filled(const px_result *r, size_t from, size_t n)
{
	(void)r;
	(void)from;
	(void)n;
}
#endif

_Static_assert(PX_URING_RINGS_MAX == PX_URING_RINGS_KEY_MAX,
	       "rings= and the ring array agree");

/* The largest transfer one read or write performs (MAX_RW_COUNT). */
#define PX_URING_MAX_RW 0x7ffff000u

/* Ring sizes when the config leaves them 0.  The SQ holds what callbacks
 * start between two of the leader's enters; when it fills, the starting
 * thread submits itself, under the proactor mutex, and the network work of
 * those sends then keeps every other thread out.  With 1,000 sessions on
 * two threads a batch of completions restarts a few thousand operations:
 * 256 entries ran that row at 140 MB/s one way, 4096 at 250 (tp_reactor
 * 270).  4096 SQEs are 256 KiB per ring. */
#define PX_URING_DEFAULT_ENTRIES 4096u
#define PX_URING_MIN_ENTRIES 64u  /* the least a default SQ shrinks to */
#define PX_URING_DEFAULT_CQ 65536u  /* the largest the kernel makes */

/* Where a result's request is. */
enum {
	PX_URING_IDLE = 0,  /* not in the kernel: queued behind a head, or
	                       waiting for an SQE (on u->stalled) */
	PX_URING_OP,        /* the operation itself is in the kernel */
	PX_URING_POLL,      /* a readiness poll before a retry is in the kernel */
	PX_URING_GATE       /* a gated read: its EPOLL_CTL is in the kernel,
	                       or it is parked until its ring's epoll set
	                       reports the descriptor ("Gated reads") */
};

/* Which of the provider's lists slink is on. */
enum { PX_URING_NOLIST = 0, PX_URING_STALLED, PX_URING_CANCEL_STALLED,
       PX_URING_LATE };

/* Per descriptor: the shared queues (proactor/fdq.h), and what the fd
 * turned out to be. */
struct px_uring_fd {
	px_fdq_entry fq;    /* one FIFO per direction */
	unsigned inflight;  /* started here and not finished, any operation */
	bool notsock;       /* a stream operation got ENOTSOCK, or the first
	                       look at the number found no socket: READ and
	                       WRITE */
	bool tty_block;     /* not a socket but a terminal without
	                       O_NONBLOCK, as of the last look
	                       (ur_tty_blocks): its stream writes go to
	                       io-wq (IOSQE_ASYNC), see ur_prep_op */
	uint8_t late_skip;  /* reads to start at once before trying a late
	                       one again (see "Late reads") */
	bool late_pays;     /* its last read ended in the lead after the one
	                       that submitted it */
	bool open_seen;     /* checked (or returned by an accept) since the
	                       last hint that the number may name another
	                       file: px_close, or an operation on it that
	                       ended with an error, a cancel or end of stream */
	bool listener;      /* a listening socket: found so when its number
	                       was checked, or an accept was started on it */
	bool fresh;         /* returned by an accept of this provider, and
	                       not started on since (ur_place_new) */
	bool type_seen;     /* msg_sock holds since the last hint (as
	                       open_seen) */
	bool msg_sock;      /* a datagram or seqpacket socket: its stream
	                       writes go with MSG_DONTWAIT (ur_prep_op) */
	uint32_t seg;       /* its TCP segment size (TCP_MAXSEG), asked once:
	                       0 not asked yet, UINT32_MAX none (ur_seg) */
	struct px_uring_ring *rg;  /* the ring of its last start, or NULL */
	/* The ring whose gate epoll set it was last added to, as far as
	 * this provider knows (an EPOLL_CTL's answer corrects it). */
	struct px_uring_ring *gate_rg;
	/* For the default gate ("Whose peer is here"): where its other end
	 * is (PX_PEER_*), asked at its first read the gate would take since
	 * the number was last seen open (a listener: AWAY once its own port
	 * was asked, at its first accept), and the port of a peer on this
	 * host; the local port it counts in u->ports (0: none). */
	uint8_t peer;
	uint16_t peer_port;
	uint16_t own_port;
	/* Returned by an accept from a peer at this port on loopback: while
	 * fresh, where its other end may be (u->port_ring; 0: nowhere). */
	uint16_t pair_port;
	/* A connected socket whose port is in u->port_ring (ur_note_pair):
	 * a move to another ring updates it. */
	bool pair_src;
	/* Its file writes not yet finished, in the order they were started
	 * (by r->plink), those in the kernel and those held behind one
	 * they overlap (ur_fwrite_held); how many are held; and whether
	 * the descriptor was O_APPEND when asked, once per busy spell of
	 * its file writes (fwrites_seen).  See "Writes to one place". */
	px_list fwrites;
	unsigned fwrites_held;
	bool fwrites_seen;
	bool fwrites_append;
};

/* px_uring_fd.peer */
enum {
	PX_PEER_UNKNOWN = 0,  /* not asked since the number was seen open */
	PX_PEER_AWAY,         /* elsewhere, or nobody can tell */
	PX_PEER_HERE,         /* an AF_UNIX peer made by this process */
	PX_PEER_PORT          /* a TCP peer on this host, at peer_port: here
	                         while one of the provider's sockets holds
	                         that port (u->ports) */
};

static void ur_own_port(px_uring *u, px_uring_fd *fe, uint16_t port);
static uint16_t ur_port_of(const struct sockaddr_storage *ss);

/* The provider's private space in every result. */
struct px_uring_priv {
	px_link slink;      /* u->stalled, u->cancel_stalled or rg->late */
	struct msghdr msg;  /* datagrams */
	struct iovec iov;
	px_uring_fd *fe;    /* the descriptor's entry */
	px_uring_ring *rg;  /* the ring its request went into */
	uint8_t phase;      /* PX_URING_IDLE / _OP / _POLL */
	uint8_t slist;      /* which list slink is on */
	bool want_poll;     /* next request to issue is the readiness poll */
	bool as_send;       /* a stream operation went out as a socket call
	                       (SEND, SENDMSG, RECV) */
	bool cancel_req;    /* a cancel was asked for */
	bool cancel_sent;   /* ... and its ASYNC_CANCEL is in the ring, its
	                       CQE not yet reaped */
	bool held;          /* finished while that CQE was still to come:
	                       handed out with it (ur_cancel_done) */
	bool reissued;      /* submitted again after the kernel dropped it */
	bool rdhup;         /* its last readiness poll reported POLLRDHUP: the
	                       socket is shut down for reading, for good */
	bool shut_seen;     /* a datagram read found its socket shut down for
	                       reading: one more receive, then 0 bytes */
	bool pf_retry;      /* a RECV with POLL_FIRST said EINVAL: redone as
	                       READ, which tells whether the flag was refused */
	bool late;          /* a socket read held back by one prepare */
	bool late_issued;   /* ... and issued by a later one */
	bool soon;          /* a socket read held until its ring's next
	                       prepare only (not late: "Late reads") */
	unsigned late_gen;  /* its ring's late_gen when it was held, then issued */
	unsigned issue_gen; /* its ring's late_gen when a read was started */
	/* A datagram write: how many of its sends failed with EAGAIN
	 * (ur_backoff), and the wait before the next try, which its TIMEOUT
	 * reads at submission. */
	uint8_t futile;
	struct __kernel_timespec backoff;
	/* Its last poll reported POLLERR without its own direction (an
	 * error queue entry: ur_backoff), and whether the request now in
	 * the kernel in the poll's place is the back-off's TIMEOUT. */
	bool err_alone;
	bool in_backoff;
	/* A gated read ("Gated reads"): the event its EPOLL_CTL reads at
	 * submission and which operation that was; the CTL is in flight;
	 * the set reported the descriptor; it failed to gate, so it goes
	 * as an ordinary read.  pf_armed: a RECV with POLL_FIRST of it is in
	 * the kernel, counted in its ring's pf_reads. */
	struct epoll_event gate_ev;
	uint8_t gate_op;
	bool gate_ctl;
	bool gate_fired;
	bool gate_pass;
	bool pf_armed;
	/* Its RECV with POLL_FIRST said EAGAIN (a file io_uring cannot poll,
	 * a regular file say): the next one goes without the flag. */
	bool pf_skip;
	/* A file write held on fe->fwrites behind an earlier one to the
	 * same bytes ("Writes to one place"). */
	bool wheld;
	/* Cancelled while its SQE was still in the SQ, unsubmitted, with the
	 * kernel refusing submissions: that SQE was made a NOP
	 * (ur_void_unsubmitted), whose CQE ends it with ECANCELED. */
	bool voided;
};

static struct px_uring_priv *ur_priv(px_result *r)
{
	return px_result_priv(r);
}

static px_result *ur_result_of_slink(px_link *l)
{
	struct px_uring_priv *pr = px_container_of(l, struct px_uring_priv, slink);
	return (px_result *)(void *)((char *)pr - PX_RESULT_HDR);
}

static px_uring *ur_of_prov(px_provider *p)
{
	return px_container_of(p, px_uring, prov);
}

/* The operations this provider does: the queued ones (fdq.h) and the
 * file operations, which carry their own offset and go straight in. */
static bool ur_does(px_op op)
{
	return px__fdq_dir(op) >= 0 || op == PX_OP_READ_FILE ||
	       op == PX_OP_WRITE_FILE;
}

/* Operations that wait for readiness and retry after -EAGAIN.  Not a
 * connect: its EAGAIN (a full AF_UNIX backlog, which the kernel gives
 * only on a non-blocking socket: on a blocking one io_uring waits for
 * room itself) is its result, as for connect(2).  Nor a file operation:
 * regular files do not return it. */
static bool ur_pollable(px_op op)
{
	return op == PX_OP_READ_STREAM || op == PX_OP_WRITE_STREAM ||
	       op == PX_OP_READ_DGRAM || op == PX_OP_WRITE_DGRAM ||
	       op == PX_OP_ACCEPT;
}

/*
 * A datagram write that keeps failing with EAGAIN although its poll says
 * the socket has room (px__futile_wait_ms in proactor/internal.h): an
 * AF_UNIX datagram socket not connected to its full receiver (the syslog
 * pattern) polls writable as long as its own buffer has room, and a poll,
 * a SEND and an EAGAIN followed each other at a whole CPU for as long as
 * the receiver did not read.  So from the PX_FUTILE_MIN-th such round in
 * a row the write waits on a TIMEOUT in the poll's place, as long as
 * px__futile_wait_ms says, until a send goes out (the count is the
 * operation's own).  The receiver's reads wake nobody here, so a write
 * may go out up to PX_FUTILE_MAX_MS after there is room.  Only datagram
 * writes: a stream's poll says room only when there is some.  A datagram
 * socket connected to its receiver polls writable only when that
 * receiver's queue has room, so its sends fail this way only when other
 * senders take the room first three times running; it then waits the
 * same way.
 *
 * Any other operation waits so too while its poll reports POLLERR
 * without its own direction and its call says EAGAIN: a socket's error
 * queue (IP_RECVERR's reports, transmit timestamps) polls POLLERR until
 * the application reads it with MSG_ERRQUEUE, while receives and sends
 * find nothing to do.  On an O_NONBLOCK socket the EAGAIN comes back
 * here, and a poll and a receive followed each other at a whole CPU
 * (fixed problem 179; on a blocking socket the kernel waits itself).
 * After each TIMEOUT such an operation polls once more (err_alone is
 * cleared), so once the queue is read it waits on its poll again.
 */
static void ur_backoff(struct px_uring_priv *pr, px_op op)
{
	if ((op != PX_OP_WRITE_DGRAM && !pr->err_alone) ||
	    pr->futile == UINT8_MAX)
		return;
	pr->futile++;
	unsigned ms = px__futile_wait_ms(pr->futile);
	if (!ms)
		return;
	pr->backoff.tv_sec = 0;
	pr->backoff.tv_nsec = (long long)ms * 1000000;
}

/* ------------------------------------------------------------------ */
/* Submission                                                           */
/* ------------------------------------------------------------------ */

unsigned px__uring_publish(px_uring_ring *rg)
{
	struct io_uring_sq *sq = &rg->ring.sq;
	unsigned tail = sq->sqe_tail;

	if (sq->sqe_head != tail) {
		sq->sqe_head = tail;
		/* Release: another thread's io_uring_enter, already in the
		 * kernel, may read the SQEs as soon as it sees the tail. */
		io_uring_smp_store_release(sq->ktail, tail);
	}
	return tail - io_uring_smp_load_acquire(sq->khead);
}

/* io_uring_submit, remembering whether SQEs were left behind. */
static int ur_submit(px_uring_ring *rg)
{
	int rc;
	unsigned took = 0;

	/* Store the tail with release semantics ourselves: the leader may be
	 * in its own io_uring_enter right now (wait_strategies/uring.c), and
	 * liburing's plain store is only ordered for the entering thread. */
	px__uring_publish(rg);
	do {
		rc = io_uring_submit(&rg->ring);
		if (rc > 0)
			took += (unsigned)rc;
		/* Without SUBMIT_ALL the kernel stops at an SQE that fails
		 * early; what follows it is still pending.  (With SQPOLL the
		 * kernel thread consumes at its own pace: no loop.) */
	} while (rc > 0 && io_uring_sq_ready(&rg->ring) &&
		 !(rg->ring.flags & IORING_SETUP_SQPOLL));
	/* Taken while the leader waits: its enter, should it not have
	 * submitted yet, may now take SQEs published after its prepare
	 * (ur_void_unsubmitted tells its part of the head's moves from
	 * ours). */
	if (rg->waiting)
		rg->foreign_n += took;
	px__uring_enter_failed(rg, rc);
	if (rc == -EAGAIN || rc == -EBUSY || rc == -EINTR || rc == -ENOMEM) {
		rg->submit_stuck = true;
		return 0;
	}
	rg->submit_stuck = false;
	return rc < 0 ? rc : 0;
}

/* With SQPOLL, wait until the kernel thread has taken every SQE published
 * on rg (ur_submit published them and woke it); at once without.  Mutex
 * held: the other threads wait with it. */
static void ur_sqpoll_taken(px_uring_ring *rg)
{
	struct io_uring_sq *sq = &rg->ring.sq;
	unsigned spins = 0;

	if (!(rg->ring.flags & IORING_SETUP_SQPOLL))
		return;
	/* With SQPOLL the kernel thread takes the SQEs when it runs, and it
	 * competes for the CPUs with the application: on two loaded vCPUs it
	 * was seen to take over 10 ms, the bound this wait used to have, and
	 * a read cancelled and closed meanwhile took the data of the socket
	 * that got its number next (a helper's review of 2026-12-05).  So
	 * wait until it has taken them all, waking it whenever it has gone
	 * to sleep; after the first yields, in 50 us naps.  One exception:
	 * older kernels (5.10 among them) refuse submissions while
	 * completions overflow the CQ, until they are reaped, which the
	 * mutex held here keeps from happening; with the overflow flag up
	 * the wait still ends after 10 ms. */
	unsigned tail = sq->sqe_tail;
	uint64_t overflow_end = 0;
	while ((int)(tail - io_uring_smp_load_acquire(sq->khead)) > 0) {
		unsigned kflags = IO_URING_READ_ONCE(*sq->kflags);
		if (kflags & IORING_SQ_NEED_WAKEUP)
			(void)io_uring_enter((unsigned)rg->ring.ring_fd, 0, 0,
					     IORING_ENTER_SQ_WAKEUP, NULL);
		if (kflags & IORING_SQ_CQ_OVERFLOW) {
			uint64_t now = px__now_ns();
			if (!overflow_end)
				overflow_end = now + 10000000u;
			else if (now >= overflow_end)
				break;
		}
		if (++spins < 64) {
			sched_yield();
		} else {
			struct timespec nap = { 0, 50000 };
			nanosleep(&nap, NULL);
		}
	}
}

struct io_uring_sqe *px__uring_get_sqe_now(px_uring_ring *rg, unsigned reserve)
{
	struct io_uring_sqe *sqe = px__uring_get_sqe(rg, reserve);

	if (!sqe && (rg->ring.flags & IORING_SETUP_SQPOLL)) {
		ur_sqpoll_taken(rg);
		sqe = px__uring_get_sqe(rg, reserve);
	}
	return sqe;
}

struct io_uring_sqe *px__uring_get_sqe(px_uring_ring *rg, unsigned reserve)
{
	struct io_uring_sqe *sqe;

	if (io_uring_sq_space_left(&rg->ring) <= reserve) {
		ur_submit(rg);
		if (io_uring_sq_space_left(&rg->ring) <= reserve)
			return NULL;
	}
	sqe = io_uring_get_sqe(&rg->ring);
	if (sqe)
		rg->pending++;  /* every SQE gets exactly one CQE */
	return sqe;
}

/*
 * The kick.  A request's task work (a poll-armed RECV finding its data, a
 * SEND retried when there is room) runs in the thread that submitted it,
 * and the kernel wakes that thread for it.  On a shared processor the
 * submitter is normally the ring's leader, which is waiting anyway.  On a
 * dedicated one the starts are made by application threads that sleep on
 * the dispatcher between callbacks, so a start that submitted its SQE
 * itself made that thread the one the kernel woke for every readiness of
 * its socket: a wake-up, a run of task work and a sleep again, besides
 * the leader's.  20 sessions of 8 KiB on `uring-dedicated` moved 230-260
 * MB/s with 1.1 context switches per message (1,700 on the shared
 * processor, 1,300 with SQPOLL, whose kernel thread submits).  So on a
 * dedicated processor the leader keeps a READ of an eventfd in the ring,
 * and a start that finds the leader blocked writes that eventfd (once
 * per lead) instead of entering: the READ completes, the leader wakes,
 * and its next prepare submits what the starts put in, as the task those
 * requests belong to.  Where the READ is not in the ring (no SQE was
 * free for it) the start submits as before.
 */
void px__uring_kick_arm(px_uring_ring *rg)
{
	struct io_uring_sqe *sqe;

	if (rg->kick_fd < 0 || rg->kick == PX_URING_KICK_ARMED ||
	    rg->kick == PX_URING_KICK_SENT)
		return;
	rg->kick = PX_URING_KICK_OFF;
	/* Not px__uring_get_sqe: the READ is no work of the ring's (pending),
	 * and it must not submit, nor take a start's last slot. */
	if (io_uring_sq_space_left(&rg->ring) < 2)
		return;
	sqe = io_uring_get_sqe(&rg->ring);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, rg->kick_fd, &rg->kick_buf,
			   sizeof(rg->kick_buf), 0);
	io_uring_sqe_set_data64(sqe, PX_URING_TAG_KICK);
	rg->kick = PX_URING_KICK_ARMED;
}

void px__uring_kick(px_uring_ring *rg)
{
	/* Under the mutex, at once: deferring this enter until the starting
	 * callback returned (tried, measured a little cheaper) stalls a
	 * callback that waits for its own operation while the leader sleeps
	 * on something else. */
	if (!rg->waiting || !io_uring_sq_ready(&rg->ring))
		return;
	switch (rg->kick) {
	case PX_URING_KICK_SENT:
	case PX_URING_KICK_DONE:
		return;  /* the leader is on its way to its next prepare */
	case PX_URING_KICK_ARMED: {
		uint64_t one = 1;
		if (write(rg->kick_fd, &one, sizeof(one)) == (ssize_t)sizeof(one)) {
			rg->kick = PX_URING_KICK_SENT;
			return;
		}
		break;  /* (an eventfd write fails only at a count of 2^64 - 2) */
	}
	case PX_URING_KICK_OFF:
		break;
	}
	ur_submit(rg);
}

/*
 * The ready descriptor.  With one thread in px_handle_events and work on
 * this processor and another (a team: io_uring for files, epoll for
 * sockets), the thread leads the two in turn, and the dispatcher has the
 * other's wait watch a descriptor of ours that polls readable when a lead
 * of ours has something to do (disp_lone_lead).  Without it each lead
 * slept up to 1 ms in epoll while a file read's CQE waited: 760-796 reads
 * a second at depth 1 beside one idle socket read, against 13,349-14,981
 * without the idle read (docs/PERFORMANCE.md).
 *
 * The descriptor is an eventfd registered with every ring
 * (io_uring_register_eventfd): the kernel adds to it at each CQE it
 * posts.  Made only when the dispatcher first asks, so an engine that is
 * never led by a lone thread beside another processor pays nothing; from
 * then on every CQE costs the kernel an eventfd signal, and every prepare
 * a read that empties it (px__uring_ready_drain), before the lead reaps,
 * so that a CQE posted after that read makes it readable again.  Some
 * work needs a lead without posting a CQE, and ready_fd, called just
 * before the other processor's wait, sees to it: SQEs the callbacks
 * filled into a ring nobody leads (submitted here, as a start does while
 * the leader waits, so their CQEs will come); CQEs left in a CQ by a lead
 * that reaped its fill (PX_URING_REAP_MAX), held late reads, starts
 * stalled for want of an SQE and a deferred interrupt, for which the
 * descriptor is made readable at once.  Only what a lead settles makes it
 * readable: a refused submission does not (no lead can make the kernel
 * take it sooner), so the lone thread never goes round its two leads
 * without sleeping.
 */
int px__uring_ready_fd(px_uring *u)
{
	bool lead_now = u->intr_deferred, stuck = false;

	if (u->ready_efd == -1) {
		int fd = px__own_fd_id(px__fd_keep_off_ops(u->prov.px,
				eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
				&u->ready_id);
		unsigned i = 0;

		if (fd >= 0)
			for (; i < u->nrings; i++)
				if (io_uring_register_eventfd(&u->rings[i].ring,
							      fd) < 0)
					break;
		if (fd < 0 || i < u->nrings) {
			while (i--)
				io_uring_unregister_eventfd(&u->rings[i].ring);
			if (fd >= 0)
				px__own_close_id(fd, &u->ready_id);
			u->ready_efd = -2;   /* the dispatcher's bound stays */
			return -1;
		}
		u->ready_efd = fd;
	}
	if (u->ready_efd < 0)
		return -1;
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];

		if (!rg->led && io_uring_sq_ready(&rg->ring))
			ur_submit(rg);
		stuck = stuck || rg->submit_stuck;
		lead_now = lead_now || io_uring_cq_ready(&rg->ring) ||
			   !px_list_empty(&rg->late) ||
			   (rg->parked && !rg->gate_armed);
	}
	/* Starts waiting for an SQE go in at the next prepare, unless the
	 * kernel refuses submissions for now: then only the other wait's
	 * bound brings the next try, since a readable eventfd would have the
	 * lone thread go round its two leads without sleeping until the
	 * kernel takes SQEs again.  (Cancels waiting for room wait for CQEs,
	 * which make it readable themselves.) */
	lead_now = lead_now || (!stuck && !px_list_empty(&u->stalled));
	if (lead_now) {
		uint64_t one = 1;

		(void)!write(u->ready_efd, &one, sizeof(one));
	}
	return u->ready_efd;
}

void px__uring_ready_drain(px_uring *u)
{
	uint64_t v;

	if (u->ready_efd >= 0)
		(void)!read(u->ready_efd, &v, sizeof(v));
}

/* The thread's home ring, per provider.  A thread that uses several
 * proactors in turn just gets a new home now and then. */
static __thread uint64_t ur_tls_serial;
static __thread unsigned ur_tls_home;
/* Gives every provider a serial of its own: the thread's home is keyed on
 * it, not on the provider's address, which a later proactor may get once
 * this one is destroyed (then a thread that led the first one believed it
 * had a home in the second, and its outside starts went there instead of
 * following their descriptors: test_uring_rings under TSan). */
static _Atomic uint64_t ur_serials;

static bool ur_has_home(px_uring *u)
{
	return ur_tls_serial == u->serial && ur_tls_home < u->nrings;
}

px_uring_ring *px__uring_home(px_uring *u)
{
	if (ur_has_home(u))
		return &u->rings[ur_tls_home];
	/* A thread that has never led (say, the one setting up before the
	 * loop threads run): its starts take the rings in turn, from ring 0,
	 * the first leader's home. */
	return &u->rings[u->next_spread++ % u->nrings];
}

/* The ring for a start made outside this proactor's callbacks while one
 * thread alone runs the loop.  The starting thread will not lead soon, so
 * the start goes into a ring the lone leader waits on (its kick submits
 * the SQE at once, and the leader sees the CQE): put into the starting
 * thread's home or the next ring in turn, it sat unsubmitted until the
 * leader's wait ended for some other reason (as long as the processor's
 * idle check, 200 ms; measured at the start of every one-thread
 * benchmark).  With no leader waiting, as before: its home, or the rings
 * in turn for a thread that never led; the lone thread takes that ring at
 * its next prepare.  With several loop threads the rings' own leaders
 * come back to them, and the starts keep spreading over the rings (sent
 * all to the waiting ones, 1000 sessions started at once piled into one
 * ring, each submitted by the starting thread under the mutex: 10% less
 * throughput on 1000/2/4096/4096). */
static px_uring_ring *ur_outside_ring(px_uring *u)
{
	for (unsigned k = 0; k < u->nrings; k++) {
		unsigned i = (u->next_spread + k) % u->nrings;
		if (u->rings[i].waiting) {
			u->next_spread = i + 1;
			return &u->rings[i];
		}
	}
	return px__uring_home(u);
}

/* Light load: a start that would go into a ring other than the first
 * (the ring of the callback's operation, or the thread's home ring), where
 * both that ring and the first hold only a few requests (PX_URING_LIGHT,
 * about one session's), goes into the first ring instead.  A conversation
 * whose two ends sit in two rings led by two threads (an echo over
 * loopback in one process, one session on two threads) otherwise wakes
 * the other thread for every message: on 1/2/8192/8192 such runs moved
 * 110-300 MB/s one way against about 480 when both ends shared a ring,
 * and which one happened depended on which rings the first operations of
 * the two ends took.  Gathered in one ring, one thread does the work
 * while the other sleeps as a follower, as with one thread.  With more
 * load the rings keep their sessions (the first ring then holds more than
 * a few), so the work still spreads over the threads.  Starts from
 * outside the callbacks while one thread runs the loop keep
 * ur_outside_ring's choice. */
static px_uring_ring *ur_gather_light(px_uring *u, px_uring_ring *rg)
{
	px_uring_ring *first = &u->rings[0];

	if (rg != first && rg->pending <= PX_URING_LIGHT &&
	    first->pending <= PX_URING_LIGHT)
		return first;
	return rg;
}

/* Balance: a start that would go into a ring holding more than three
 * times as many requests as a ring that has a leader, plus
 * PX_URING_BALANCE, goes into that ring instead.  Sessions stay in the
 * ring their operations went into, and nothing else moves them from a
 * busy thread to a quiet one: the dispatcher hands completions only to a
 * follower asleep in px_handle_events, never to a thread waiting in its
 * own ring, and that thread steals only when a wait of its own came back
 * empty.  So a ring left nearly empty stayed so for the whole run: on
 * 40/2/8192/8192 with 10 us of callback work, about one run in four had
 * 50 to 120 requests in one ring and 1 to 10 in the other from its first
 * tenth of a second on, and on 1000/2/4096/4096 one in four had about
 * 2950 against 1 to 50; the second thread idled in the kernel, 1.0 to 1.25
 * CPUs were busy, and the throughput fell to about 60%.  An uneven split
 * short of that is no trouble (400 against 2500 requests on the second
 * row kept both CPUs busy at 518 MB/s, among the best), and moving
 * operations costs: with a margin of half as many again plus 8, about a
 * thousand moved at the start of every run of that row, and its CPU per
 * byte grew by 4-11%. */
static px_uring_ring *ur_balance(px_uring *u, px_uring_ring *rg)
{
	px_uring_ring *least = rg;

	if (u->nrings < 2 || u->alone || rg->pending <= PX_URING_BALANCE)
		return rg;
	for (unsigned i = 0; i < u->nrings; i++)
		if (u->rings[i].led && u->rings[i].pending < least->pending)
			least = &u->rings[i];
	if (least != rg &&
	    rg->pending > 3 * least->pending + PX_URING_BALANCE)
		return least;
	return rg;
}

/* New descriptors.  A descriptor that an accept of this provider returned
 * is marked fresh when the accept's CQE is reaped (ur_mark_fresh); its
 * first start, and the first start on a descriptor by a thread that never
 * led (one that connects and leaves the loop to others), go into the
 * ring that holds the fewest descriptors (nfd) among the rings threads
 * lead or are about to lead (ur_place_new).  Without the first rule every
 * connection of a server began in its accept's ring, and only
 * ur_balance's wide margin sent later starts elsewhere: echo_server on two
 * threads with 1,000 connections had 247 requests in one ring and 754 in
 * the other.  Counting descriptors rather than requests, and counting a
 * second ring as soon as a second thread is in the loop (it leads that
 * ring when the ring has work: px__uring_may_lead), matters where the
 * descriptors come at set-up, before the second thread has led and while
 * the request counts say little: proactor_test at 100 sessions on two
 * threads began with every server end in ring 0, the rings settled at
 * about 120 and 80 descriptors, and the sessions of the fuller ring moved
 * 0.6-0.8 of what the mean one did (docs/PERFORMANCE.md, "How evenly the
 * sessions are served").  Nothing of a new descriptor is in flight, so it
 * moves whole, and its later starts follow it from its callbacks.
 *
 * Loopback pairs: an accepted socket whose peer (the address its accept
 * returned) is on loopback at a port that a socket this provider
 * connected holds (u->port_ring, ur_note_pair) goes into that socket's
 * ring instead, past ur_gather_light and ur_balance: both ends of the
 * connection then stay with one thread, and its data with one CPU. */
static void ur_mark_fresh(px_uring *u, int fd, uint16_t pair_port)
{
	px_fdq_entry *fq = px_fdq_lookup(&u->fdq, fd);

	if (fq) {
		/* A connected socket, whatever the number named before: what
		 * the first look at a number would find, so it need not look
		 * (ur_start). */
		px_uring_fd *fe = px_container_of(fq, px_uring_fd, fq);
		fe->listener = false;
		fe->notsock = false;
		fe->open_seen = true;
		fe->type_seen = false;  /* (an AF_UNIX seqpacket listener's) */
		fe->seg = 0;
		fe->peer = PX_PEER_UNKNOWN;
		ur_own_port(u, fe, 0);  /* (a socket closed with close(2)) */
	}
	if (u->nrings < 2 || px__fdq_get(&u->fdq, fd, &fq) < 0)
		return;  /* (no memory for the entry: it is placed as before) */
	px_uring_fd *fe = px_container_of(fq, px_uring_fd, fq);
	fe->fresh = true;
	fe->pair_port = pair_port;
}

int px__uring_fd_ring(px_uring *u, int fd)
{
	px_fdq_entry *fq = px_fdq_lookup(&u->fdq, fd);
	px_uring_ring *rg = fq ? px_container_of(fq, px_uring_fd, fq)->rg
			       : NULL;

	return rg ? (int)(rg - u->rings) : -1;
}

/* A connected socket's local port goes into u->port_ring with the ring of
 * its connect, for the accepted end of the same loopback connection
 * (ur_place_new).  Several rings only.  A port whose last holder let it
 * go is cleared in ur_own_port; a stale entry costs placement only. */
static void ur_note_pair(px_uring *u, px_uring_fd *fe, int fd,
			 px_uring_ring *rg)
{
	if (u->nrings < 2 || !rg)
		return;
	if (!fe->own_port) {
		struct sockaddr_storage me;
		socklen_t ml = sizeof(me);
		if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
			return;
		ur_own_port(u, fe, ur_port_of(&me));
		if (!fe->own_port)
			return;  /* not bound yet, or not TCP */
	}
	if (!u->port_ring) {
		u->port_ring = calloc(65536, 1);
		if (!u->port_ring)
			return;
	}
	u->port_ring[fe->own_port] = (uint8_t)(1 + (rg - u->rings));
	fe->pair_src = true;
}

/* The ring with the fewest descriptors among the rings given to a thread
 * (at least the first, and the first two once a second thread is in the
 * loop); rg, if not NULL, unless one holds fewer. */
static px_uring_ring *ur_fewest_fds(px_uring *u, px_uring_ring *rg)
{
	unsigned homes = u->next_home, least = u->alone ? 1 : 2;

	if (homes < least)
		homes = least;
	if (homes > u->nrings)
		homes = u->nrings;
	for (unsigned i = 0; i < homes; i++)
		if (!rg || u->rings[i].nfd < rg->nfd)
			rg = &u->rings[i];
	return rg;
}

static px_uring_ring *ur_place_new(px_uring *u, px_result *r,
				   px_uring_ring *rg, bool *paired)
{
	struct px_uring_fd *fe = ur_priv(r)->fe;
	unsigned pair;

	*paired = false;
	if (!fe->fresh)
		return rg;
	fe->fresh = false;
	pair = fe->pair_port && u->port_ring ? u->port_ring[fe->pair_port]
					     : 0;
	fe->pair_port = 0;
	if (u->alone || fe->inflight)
		return rg;
	/* The other end of a loopback connection is served here: join its
	 * ring, if a thread leads it or is about to (ur_fewest_fds). */
	if (pair && pair <= u->nrings &&
	    (pair <= u->next_home || pair <= 2)) {
		*paired = true;
		return &u->rings[pair - 1];
	}
	return ur_fewest_fds(u, rg);
}

/* The calling thread's home ring, for a start from a callback whose
 * completion the dispatcher moved to this thread: the session follows the
 * thread that now serves it.  But a descriptor of the callback's own ring
 * moves only when that leaves the two rings' descriptor counts closer
 * (nfd): the dispatcher moves completions to whichever follower sleeps,
 * which as often as not is the thread of the fuller ring: in one run of
 * 100/2/8192/8192 with 10 us of callback work those moves took the rings
 * from 102 and 98 descriptors after set-up to 117 and 83.  With the rule,
 * the slowest session of rows 6-14 moved 0.91-0.99 of the mean one
 * instead of 0.77-0.91, at 0.97-1.08 of the throughput in one set of
 * paired rounds; in a second set row 12 moved 0.95 of the bytes
 * (docs/PERFORMANCE.md, "How evenly the sessions are served"). */
static px_uring_ring *ur_home_unless_fuller(px_uring *u, px_result *r,
					    px_result *cur)
{
	px_uring_ring *home = px__uring_home(u), *own;

	if (!cur || u->alone || px__result_provider(cur) != &u->prov)
		return home;
	own = ur_priv(cur)->rg;
	if (own && own != home && ur_priv(r)->fe->rg == own &&
	    own->nfd <= home->nfd + 1)
		return own;
	return home;
}

/* The ring a start goes into: from a callback, the ring of the operation
 * whose callback runs, so that a session stays in its ring whichever
 * thread collected it (a thread that leads another's ring while that one
 * runs callbacks moves nothing); else, and when the dispatcher moved that
 * completion from another thread (it balances the load), the calling
 * thread's home (unless the descriptor's ring holds at most one
 * descriptor more than the home: ur_home_unless_fuller); from outside the
 * callbacks, while one thread alone runs the loop, ur_outside_ring; from
 * outside the callbacks of a thread that
 * has never led (one that sets up connections and leaves the loop to
 * others), the ring of the descriptor's last start (for its first, the
 * ring with the fewest descriptors: ur_place_new).  That thread used to
 * take the rings in turn start by start, which put a connection's read in
 * one ring and its write in the other: in 1000/2/4096/4096, where the
 * main thread starts every client's first read and write, one ring ended
 * up with three times the requests of the other, and the slowest session
 * moved half of what the mean one did (medians of 0.50 and 0.53 in two
 * README runs; 0.97 in the first run with the descriptor's ring kept).
 * Then ur_place_new, ur_balance and ur_gather_light. */
static px_uring_ring *ur_start_ring(px_uring *u, px_result *r)
{
	bool moved, paired;
	px_result *cur = px__dispatch_current(&moved);
	px_uring_ring *rg;

	if (u->nrings > 1 && u->alone && !px__dispatch_in_callback(r))
		return ur_outside_ring(u);
	if (cur && !moved && !u->alone && px__result_provider(cur) == &u->prov &&
	    ur_priv(cur)->rg)
		rg = ur_priv(cur)->rg;
	else if (!cur && !ur_has_home(u))
		rg = ur_priv(r)->fe->rg ? ur_priv(r)->fe->rg
					: ur_fewest_fds(u, NULL);
	else
		rg = ur_home_unless_fuller(u, r, cur);
	rg = ur_place_new(u, r, rg, &paired);
	/* (A paired one stays with its other end, light load or not.) */
	return paired ? rg : ur_gather_light(u, ur_balance(u, rg));
}

/* rg got an SQE from a thread outside this proactor's callbacks (a start
 * with several loop threads, or a cancel, which must go into its
 * request's ring), and nobody leads rg: wake the leaders that wait, so
 * that one of them takes rg (at once when it is the only thread, or when
 * rg's own leader has been away PX_URING_ORPHAN_MS, say blocked in a
 * callback).  Without this such a start waited for the end of the other
 * leader's wait: the processor's idle check, 200 ms.  A start wakes them
 * only with several loop threads (a lone one waits on the ring
 * ur_outside_ring chose, or takes every ring with work at its next
 * prepare) and only when rg is orphaned already: a leader that is merely
 * running callbacks comes back to its ring, and waking the others for
 * every start of a burst (1000 sessions started at once) cost 10% of
 * throughput on 1000/2/4096/4096 (226 against 255 MB/s, medians of 8). */
static void ur_wake_for(px_uring *u, px_uring_ring *rg, const px_result *r,
			bool orphaned_only)
{
	uint64_t now = 0;

	if (u->nrings < 2 || rg->led || px__dispatch_in_callback(r))
		return;
	if (orphaned_only && (u->alone || !px__uring_orphaned(rg, &now)))
		return;
	u->intr.ops->interrupt(&u->intr);
}

/* The ring the calling thread leads first: its home, or the one it will
 * get as its home when it first leads. */
static px_uring_ring *ur_lead_home(px_uring *u)
{
	if (ur_has_home(u))
		return &u->rings[ur_tls_home];
	return &u->rings[u->next_home % u->nrings];
}

bool px__uring_orphaned(px_uring_ring *rg, uint64_t *now)
{
	if (rg->led || !rg->pending)
		return false;
	if (!*now)
		*now = px__now_ns();
	return *now - rg->released_ns >= PX_URING_ORPHAN_MS * 1000000ull;
}

bool px__uring_may_lead(px_uring *u, bool others_busy)
{
	px_uring_ring *home = ur_lead_home(u);
	uint64_t now = 0;

	if (!home->led && home->pending)
		return true;
	/* Results and cancels waiting for an SQE are in no ring's pending
	 * count: any lead's prepare issues them (px__uring_flush_stalled).
	 * Once every ring had reaped its last CQE, nobody led, and they
	 * waited for good (TESTING.md, fixed problem 282). */
	if (!px_list_empty(&u->stalled) || !px_list_empty(&u->cancel_stalled))
		for (unsigned i = 0; i < u->nrings; i++)
			if (!u->rings[i].led)
				return true;
	/* Another thread's ring, while other threads are about: the one that
	 * led it last comes back to it (unless it stays away too long), and
	 * the sessions would move between threads. */
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];
		if (!rg->led && rg->pending &&
		    (!others_busy || px__uring_orphaned(rg, &now)))
			return true;
	}
	return false;
}

px_uring_ring *px__uring_pick(px_uring *u, bool others_busy)
{
	px_uring_ring *home, *rg = NULL;

	if (!ur_has_home(u)) {
		/* First lead: homes are handed out in turn, so two leading
		 * threads start into two rings and the kernel work of each
		 * ring runs mostly in its own thread. */
		ur_tls_serial = u->serial;
		ur_tls_home = u->next_home++ % u->nrings;
	}
	home = &u->rings[ur_tls_home];
	if (!home->led && home->pending)
		rg = home;
	uint64_t now = 0;
	for (unsigned i = 0; !rg && i < u->nrings; i++)
		if (!u->rings[i].led && u->rings[i].pending &&
		    (!others_busy || px__uring_orphaned(&u->rings[i], &now)))
			rg = &u->rings[i];
	if (!rg && !home->led)
		rg = home;
	for (unsigned i = 0; !rg && i < u->nrings; i++)
		if (!u->rings[i].led)
			rg = &u->rings[i];
	if (rg)
		rg->led = true;
	return rg;
}

/* The offset to give the kernel for r's file operation.  io_uring takes
 * an offset of -1 (UINT64_MAX) on a READ or WRITE to mean "the file
 * position", which it then uses and advances, where px_read_file(3)
 * promises that the position is neither used nor changed and every other
 * engine fails such an offset (negative as an off_t) with EINVAL, as
 * pread(2) does.  The core fails every offset beyond off_t before it
 * gets here (fac_start: /proc/PID/mem takes them as addresses); should
 * one come, -1 becomes the most negative one. */
static uint64_t ur_file_offset(const px_completion *c)
{
	return c->offset == UINT64_MAX ? (uint64_t)INT64_MIN : c->offset;
}

/* Fill sqe with r's vectored read or write, from r->done on.  The
 * elements handed to the kernel are the caller's own (which stay valid
 * until the callback) or, when a write_all resumes inside an element, the
 * rest of it in pr->iov (valid as long as r): px_iov_rest.  So the array
 * is stable from the prep here to the completion, whether or not the
 * kernel copies it at submission (IORING_FEAT_SUBMIT_STABLE) and however
 * late the SQE is submitted. */
static void ur_prep_vec(px_result *r, struct io_uring_sqe *sqe)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_completion *c = &r->c;
	int cnt;
	const struct iovec *iov = px_iov_rest(r, r->done, &pr->iov, &cnt);

	switch (c->op) {
	case PX_OP_READ_STREAM:
		pr->as_send = false;
		io_uring_prep_readv(sqe, c->fd, iov, (unsigned)cnt, (uint64_t)-1);
		break;
	case PX_OP_WRITE_STREAM:
		pr->as_send = !pr->fe->notsock;
		if (pr->as_send) {
			memset(&pr->msg, 0, sizeof(pr->msg));
			pr->msg.msg_iov = (struct iovec *)iov;
			pr->msg.msg_iovlen = (size_t)cnt;
			/* A message socket: MSG_DONTWAIT, as in ur_prep_op (the
			 * kernel's own retry after a full receiver sent an empty
			 * datagram and answered 0). */
			io_uring_prep_sendmsg(sqe, c->fd, &pr->msg,
					      MSG_NOSIGNAL |
					      (pr->fe->msg_sock ? MSG_DONTWAIT : 0));
		} else {
			io_uring_prep_writev(sqe, c->fd, iov, (unsigned)cnt,
					     (uint64_t)-1);
			sqe->rw_flags = px__rwf_nosignal();
			if (pr->fe->tty_block)  /* as in ur_prep_op */
				sqe->flags |= IOSQE_ASYNC;
		}
		break;
	case PX_OP_READ_FILE:
		io_uring_prep_readv(sqe, c->fd, iov, (unsigned)cnt,
				    ur_file_offset(c));
		break;
	default: /* PX_OP_WRITE_FILE: the class allows no other */
		io_uring_prep_writev(sqe, c->fd, iov, (unsigned)cnt,
				     ur_file_offset(c));
		sqe->rw_flags = px__rwf_nosignal();
		break;
	}
}

/* Set when a RECV with IORING_RECVSEND_POLL_FIRST came back EINVAL and
 * the same read redone as READ did not (a kernel before 5.19 refuses the
 * flag; an unconnected AF_UNIX stream socket refuses both): a property of
 * the kernel, so one for the process. */
static atomic_bool ur_no_poll_first;

bool px__uring_poll_first_refused(void)
{
	return atomic_load_explicit(&ur_no_poll_first, memory_order_relaxed);
}

/* Whether fd, not a socket, is a terminal in blocking mode: its stream
 * writes then go with IOSQE_ASYNC (ur_prep_op).  Asked at the first look
 * at a number that is no socket, when a SEND says ENOTSOCK (a socket's
 * number reused for one), and before a write on a "not a socket" number
 * that has nothing in flight (it may have changed since). */
static bool ur_tty_blocks(int fd)
{
	int fl;
	return isatty(fd) && (fl = fcntl(fd, F_GETFL)) >= 0 &&
	       !(fl & O_NONBLOCK);
}

/* Fill sqe with r's operation (the part from r->done on). */
static void ur_prep_op(px_result *r, struct io_uring_sqe *sqe)
{
	if (r->flags & PX_RF_VECTORED) {
		ur_prep_vec(r, sqe);
		return;
	}
	struct px_uring_priv *pr = ur_priv(r);
	px_completion *c = &r->c;
	char *buf = px_buf_rest(r);
	size_t left = c->len - r->done;
	unsigned n = left > PX_URING_MAX_RW ? PX_URING_MAX_RW : (unsigned)left;

	switch (c->op) {
	case PX_OP_READ_STREAM:
		pr->as_send = !pr->fe->notsock && !pr->pf_retry &&
			      !atomic_load_explicit(&ur_no_poll_first,
						    memory_order_relaxed);
		if (pr->as_send) {
			io_uring_prep_recv(sqe, c->fd, buf, n, 0);
			/* Not on a listener: it is readable only when a
			 * connection waits, so the poll would hold back the
			 * receive's error (ENOTCONN, EINVAL) until then. */
			if (!pr->late && !pr->fe->listener &&
			    !pr->gate_fired && !pr->pf_skip) {
				sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
				pr->pf_armed = true;
				pr->rg->pf_reads++;
			}
		} else {
			io_uring_prep_read(sqe, c->fd, buf, n, (uint64_t)-1);
		}
		break;
	case PX_OP_WRITE_STREAM:
		pr->as_send = !pr->fe->notsock;
		if (pr->as_send) {
			/* A message socket: MSG_DONTWAIT, as for the datagram
			 * writes below (the kernel's own retry of a send whose
			 * data it had taken sent an empty datagram). */
			io_uring_prep_send(sqe, c->fd, buf, n,
					   MSG_NOSIGNAL |
					   (pr->fe->msg_sock ? MSG_DONTWAIT : 0));
		} else {
			io_uring_prep_write(sqe, c->fd, buf, n, (uint64_t)-1);
			sqe->rw_flags = px__rwf_nosignal();
			/* A terminal's write ignores the kernel's "do not
			 * block" (n_tty_write waits for room unless the file
			 * is O_NONBLOCK), so made inline it would hold the
			 * submitting thread until the reader drains it: send
			 * it to an io-wq worker, where waiting is harmless
			 * and a cancel interrupts it. */
			if (pr->fe->tty_block)
				sqe->flags |= IOSQE_ASYNC;
		}
		break;
	case PX_OP_READ_FILE:
		io_uring_prep_read(sqe, c->fd, buf, n, ur_file_offset(c));
		break;
	case PX_OP_WRITE_FILE:
		io_uring_prep_write(sqe, c->fd, buf, n, ur_file_offset(c));
		sqe->rw_flags = px__rwf_nosignal();
		break;
	case PX_OP_READ_DGRAM:
	case PX_OP_WRITE_DGRAM:
		memset(&pr->msg, 0, sizeof(pr->msg));
		pr->iov.iov_base = c->buf;
		pr->iov.iov_len = n;
		pr->msg.msg_iov = &pr->iov;
		pr->msg.msg_iovlen = 1;
		if (c->op == PX_OP_READ_DGRAM) {
			pr->msg.msg_name = &c->addr;
			pr->msg.msg_namelen = sizeof(c->addr);
			io_uring_prep_recvmsg(sqe, c->fd, &pr->msg, 0);
		} else {
			pr->msg.msg_name = c->addrlen ? &c->addr : NULL;
			pr->msg.msg_namelen = c->addrlen;
			/* MSG_DONTWAIT: an EAGAIN comes back here (a poll,
			 * then this SQE made afresh) instead of the kernel
			 * trying again itself.  An AF_UNIX datagram socket
			 * copies the data out of the iterator before it finds
			 * the receiver's queue full, and the kernel's own retry
			 * (6.18) then sent an empty datagram and answered 0. */
			io_uring_prep_sendmsg(sqe, c->fd, &pr->msg,
					      MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		break;
	case PX_OP_ACCEPT:
		c->addrlen = sizeof(c->addr);
		io_uring_prep_accept(sqe, c->fd, (struct sockaddr *)&c->addr,
				     &c->addrlen, SOCK_CLOEXEC);
		break;
	case PX_OP_CONNECT:
		/* The kernel copies the address at submission. */
		io_uring_prep_connect(sqe, c->fd, (struct sockaddr *)&c->addr,
				      c->addrlen);
		break;
	default:
		io_uring_prep_nop(sqe);  /* not reached: start refuses these */
		break;
	}
}

/* Whose peer is here (the default gate; see "Gated reads").  The port of
 * an AF_INET or AF_INET6 address, 0 for another family. */
static uint16_t ur_port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return 0;
}

/* Is the address `peer`, seen from a socket bound to `me`, on this host:
 * a loopback address, or the socket's own? */
static bool ur_same_host(const struct sockaddr_storage *me,
			 const struct sockaddr_storage *peer)
{
	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *p = (const struct sockaddr_in *)peer;
		const struct sockaddr_in *m = (const struct sockaddr_in *)me;
		return (ntohl(p->sin_addr.s_addr) >> 24) == 127 ||
		       (me->ss_family == AF_INET &&
			p->sin_addr.s_addr == m->sin_addr.s_addr);
	}
	if (peer->ss_family == AF_INET6) {
		const struct in6_addr *p =
			&((const struct sockaddr_in6 *)peer)->sin6_addr;
		const struct in6_addr *m =
			&((const struct sockaddr_in6 *)me)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(p) ||
		       (IN6_IS_ADDR_V4MAPPED(p) && p->s6_addr[12] == 127) ||
		       (me->ss_family == AF_INET6 &&
			IN6_ARE_ADDR_EQUAL(p, m));
	}
	return false;
}

/* The peer port of an accept's completion when the peer is on loopback,
 * else 0 (from the address the accept returned: no system call). */
static uint16_t ur_loopback_port(const px_completion *c)
{
	struct sockaddr_storage none = {.ss_family = AF_UNSPEC};

	if (c->addrlen < sizeof(struct sockaddr_in) ||
	    !ur_same_host(&none, &c->addr))
		return 0;
	return ur_port_of(&c->addr);
}

/* fe's socket now holds the local port `port` (0: none) in u->ports. */
static void ur_own_port(px_uring *u, px_uring_fd *fe, uint16_t port)
{
	if (fe->own_port == port)
		return;
	fe->pair_src = false;
	if (fe->own_port && u->ports && --u->ports[fe->own_port] == 0 &&
	    u->port_ring)
		u->port_ring[fe->own_port] = 0;
	fe->own_port = 0;
	if (!port)
		return;
	if (!u->ports) {
		u->ports = calloc(65536, sizeof(*u->ports));
		if (!u->ports)
			return;  /* peers look away: their reads are gated */
	}
	u->ports[port]++;
	fe->own_port = port;
}

/* Count the local port of fd, an AF_INET or AF_INET6 socket this provider
 * connected or accepts on, in u->ports (one getsockname). */
static void ur_note_port(px_uring *u, px_uring_fd *fe, int fd)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);

	if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0)
		ur_own_port(u, fe, ur_port_of(&me));
}

/* Is fd's other end served by this provider?  Asked once per opening of
 * the number (two or three syscalls, and only for reads the gate would
 * take); a TCP peer on this host is looked up in u->ports at every ask,
 * as its end may be noted after this one. */
static bool ur_peer_here(px_uring *u, int fd, px_uring_fd *fe)
{
	if (fe->peer == PX_PEER_UNKNOWN) {
		struct sockaddr_storage me, peer;
		socklen_t ml = sizeof(me), pl = sizeof(peer);
		fe->peer = PX_PEER_AWAY;
		if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
			return false;
		if (me.ss_family == AF_UNIX) {
			/* Who made the other end: socketpair(2) or connect(2)
			 * in this process, or another. */
			struct ucred cr;
			socklen_t cl = sizeof(cr);
			if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
			    cr.pid == u->pid)
				fe->peer = PX_PEER_HERE;
			return fe->peer == PX_PEER_HERE;
		}
		uint16_t port = ur_port_of(&me);
		if (!port || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
			return false;
		/* Its own port too, for the peer's ask. */
		ur_own_port(u, fe, port);
		if (!ur_same_host(&me, &peer))
			return false;
		fe->peer = PX_PEER_PORT;
		fe->peer_port = ur_port_of(&peer);
	}
	return fe->peer == PX_PEER_HERE ||
	       (fe->peer == PX_PEER_PORT && u->ports && u->ports[fe->peer_port]);
}

/* Gated reads: see "Gated reads" in the opening comment.  Should r, a
 * socket read about to go into rg, wait on rg's epoll set?  Makes the
 * set at the first yes. */
static bool ur_gate_wants(px_uring_ring *rg, px_result *r,
			  const struct px_uring_priv *pr)
{
	if (!rg->gate_min || r->c.op != PX_OP_READ_STREAM || pr->gate_fired ||
	    pr->gate_pass || pr->pf_skip || pr->late || pr->pf_retry ||
	    pr->cancel_req ||
	    pr->fe->notsock || pr->fe->listener ||
	    (r->flags & PX_RF_VECTORED) || rg->gate_ep == -2 ||
	    rg->pf_reads + rg->gated + 1 < rg->gate_min ||
	    atomic_load_explicit(&ur_no_poll_first, memory_order_relaxed))
		return false;
	if (rg->owner->gate_peers && ur_peer_here(rg->owner, r->c.fd, pr->fe))
		return false;
	if (rg->gate_ep == -1) {
		rg->gate_ep = px__own_fd_id(px__fd_keep_off_ops(r->c.proactor,
					epoll_create1(EPOLL_CLOEXEC)), &rg->gate_id);
		if (rg->gate_ep < 0) {
			rg->gate_ep = -2;  /* ordinary reads from now on */
			return false;
		}
	}
	return true;
}

/* Fill sqe with the EPOLL_CTL that gates r: one-shot readable interest in
 * rg's set, keyed by the descriptor number (never by r, which a cancel
 * may free while the interest stays).  The gated read counts in the
 * ring's pending work until it leaves the gate (ur_gate_leave). */
static void ur_gate_prep(px_uring_ring *rg, px_result *r,
			 struct px_uring_priv *pr, struct io_uring_sqe *sqe)
{
	int op = pr->fe->gate_rg == rg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

	pr->gate_ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
	pr->gate_ev.data.u64 = (uint64_t)(unsigned)r->c.fd;
	pr->gate_op = (uint8_t)op;
	io_uring_prep_epoll_ctl(sqe, rg->gate_ep, r->c.fd, op, &pr->gate_ev);
	io_uring_sqe_set_data64(sqe, (uintptr_t)r | PX_URING_UD_GATE);
	pr->phase = PX_URING_GATE;
	pr->gate_ctl = true;
	pr->gate_fired = false;
	pr->fe->gate_rg = rg;
	rg->gated++;
	rg->pending++;
}

/* r leaves rg's gate (issued after all, finished or cancelled): parked
 * says whether its EPOLL_CTL was over. */
static void ur_gate_leave(px_uring_ring *rg, struct px_uring_priv *pr,
			  bool parked)
{
	rg->gated--;
	rg->pending--;
	if (parked)
		rg->parked--;
	pr->phase = PX_URING_IDLE;
}

void px__uring_gate_arm(px_uring_ring *rg)
{
	struct io_uring_sqe *sqe;

	if (!rg->parked || rg->gate_armed)
		return;
	/* The interrupt's NOP keeps its slot, unless the SQ has only that
	 * one (ring=1: sq_reserve 0), where a reserve of 1 would never let
	 * the POLL_ADD in and the parked reads would wait for good. */
	sqe = px__uring_get_sqe(rg, rg->owner->sq_reserve ? 1 : 0);
	if (!sqe)
		return;  /* the next prepare tries again */
	/* No work of the ring's (pending), as the kick's READ is not: the
	 * parked reads count.  Once they have all left (reported, or
	 * cancelled with their interest still armed) the POLL_ADD may stay
	 * in the kernel until the set reports something, and the ring must
	 * not look busy meanwhile (the other leaders' watch, orphans). */
	rg->pending--;
	io_uring_prep_poll_add(sqe, rg->gate_ep, POLLIN);
	io_uring_sqe_set_data64(sqe, PX_URING_TAG_GATE);
	rg->gate_armed = true;
}

/* Put r's next request (the operation, or its readiness poll) into an SQE
 * of rg.  Returns false when no SQE is free. */
static bool ur_issue(px_uring_ring *rg, px_result *r, unsigned reserve)
{
	struct px_uring_priv *pr = ur_priv(r);
	/* With SQPOLL a small SQ still holds, a moment after the submit
	 * that woke the kernel thread, what its neighbours put in: a start
	 * given back for that was deferred, and the leader waited for a
	 * completion that could not come before it went in (10 ms and more
	 * a round trip on ring=1 or ring=2; TESTING.md, fixed problem 290).
	 * So wait for the thread to take them, as the interrupt does. */
	struct io_uring_sqe *sqe = px__uring_get_sqe_now(rg, reserve);

	if (!sqe)
		return false;
	pr->rg = rg;
	if (pr->want_poll) {
		/* A read asks for POLLRDHUP too: an accept or a datagram
		 * read that then says EAGAIN learns from the poll's result
		 * whether the socket was shut down (ur_done). */
		unsigned mask = px__fdq_dir(r->c.op) == PX_FDQ_RD ?
				POLLIN | POLLRDHUP : POLLOUT;
		pr->in_backoff = pr->futile >= PX_FUTILE_MIN &&
				 (r->c.op == PX_OP_WRITE_DGRAM || pr->err_alone);
		if (pr->in_backoff)
			/* In the poll's place, and taken for it (phase,
			 * user_data, cancel): see ur_backoff. */
			io_uring_prep_timeout(sqe, &pr->backoff, 0, 0);
		else
			io_uring_prep_poll_add(sqe, r->c.fd, mask);
		io_uring_sqe_set_data64(sqe, (uintptr_t)r | PX_URING_UD_POLL);
		pr->phase = PX_URING_POLL;
	} else if (ur_gate_wants(rg, r, pr)) {
		ur_gate_prep(rg, r, pr, sqe);
	} else {
		ur_prep_op(r, sqe);
		io_uring_sqe_set_data64(sqe, (uintptr_t)r);
		pr->phase = PX_URING_OP;
	}
	return true;
}

/* Issue r from inside the provider (a resubmission, or a new queue head
 * whose predecessor went into near) into its ring, near, or the calling
 * thread's ring, the first known; without an SQE it waits on u->stalled
 * for the next prepare().  Called by the leader reaping that ring (or by
 * a cancel), so the SQE is submitted when the ring is led again: by the
 * same thread after its callbacks, or, should it leave px_handle_events
 * or block in a callback, by another leader whose watch runs out
 * (wait_strategies/uring.c, prepare; docs/ARCHITECTURE.md, "Rings"). */
static void ur_issue_or_stall(px_uring *u, px_result *r, px_uring_ring *near)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_uring_ring *rg = u->alone ? px__uring_home(u)
				     : pr->rg ? pr->rg : near ? near : px__uring_home(u);

	if (ur_issue(rg, r, 0))
		return;
	pr->phase = PX_URING_IDLE;
	pr->slist = PX_URING_STALLED;
	px_list_push_back(&u->stalled, &pr->slink);
}

static void ur_unstall(px_uring *u, px_result *r)
{
	struct px_uring_priv *pr = ur_priv(r);

	if (pr->slist == PX_URING_STALLED)
		px_list_remove(&u->stalled, &pr->slink);
	else if (pr->slist == PX_URING_CANCEL_STALLED)
		px_list_remove(&u->cancel_stalled, &pr->slink);
	else if (pr->slist == PX_URING_LATE) {
		px_list_remove(&pr->rg->late, &pr->slink);
		pr->rg->pending--;
	}
	pr->slist = PX_URING_NOLIST;
}

/* Queue an ASYNC_CANCEL for r's request, in the ring the request went
 * into (a cancel looks in its own ring only).  Returns false when it has to
 * wait (no SQE, or too many cancels in flight for the CQ).  asked: the
 * cancel of a px_cancel or px_close, which must reach the kernel before
 * the call returns, so it is not held at the cap (u->cancel_cap, the SQ's
 * size, which is 1 or 2 with a tiny ring=): held there, it waited for the
 * next lead, and a read cancelled meanwhile took data its peer sent after
 * px_cancel had returned (TESTING.md, fixed problem 281).  Held while the
 * CQ looked full instead (the ring's pending count, with max_aio=3 and
 * ring=2 an 8-entry CQ), it still did so now and then.  Past the cap,
 * with nearly max_aio operations in flight in one ring, the CQ may fill;
 * the kernel then keeps the CQEs beyond it (IORING_FEAT_NODROP) until the
 * leader reaps room, as for operations the starvation guard starts
 * beyond max_aio. */
static bool ur_send_cancel(px_uring *u, px_result *r, bool asked)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_uring_ring *rg = pr->rg;
	struct io_uring_sqe *sqe;
	uint64_t target = (uintptr_t)r;

	if (rg->cancels_inflight >= u->cancel_cap && !asked)
		return false;
	sqe = px__uring_get_sqe(rg, 0);
	if (!sqe)
		return false;
	if (pr->phase == PX_URING_POLL)
		target |= PX_URING_UD_POLL;
	io_uring_prep_cancel64(sqe, target, 0);
	/* Its CQE names r (ur_cancel_done), which is not handed out
	 * before that CQE is reaped, so the address is not reused while the
	 * cancel can still hit it. */
	io_uring_sqe_set_data64(sqe, (uintptr_t)r | PX_URING_UD_CANCEL);
	rg->cancels_inflight++;
	pr->cancel_sent = true;
	return true;
}

void px__uring_flush_stalled(px_uring *u, px_uring_ring *rg)
{
	px_link *l;

	while ((l = px_list_first(&u->stalled))) {
		px_result *r = ur_result_of_slink(l);
		if (!ur_issue(rg, r, 0))
			break;
		ur_unstall(u, r);
	}
	while ((l = px_list_first(&u->cancel_stalled))) {
		px_result *r = ur_result_of_slink(l);
		px_uring_ring *crg = ur_priv(r)->rg;
		if (!ur_send_cancel(u, r, false))
			break;
		ur_unstall(u, r);
		px__uring_kick(crg);  /* its ring may be led by another */
	}
}

/* The first PX_URING_LATE_PROBE prepares of a ring in every
 * PX_URING_LATE_PERIOD hold nothing back for it.  Whether a read pays
 * for holding is learnt from ordinary reads only (late_pays), and once
 * every socket of an exchange within one ring holds, none has ordinary
 * reads left to learn from: a start-up hiccup that made a few reads end a
 * lead late would keep the engine holding for good, at two leads per
 * round trip where ordinary reads take one (1/1/512/1024: 2.0 enters per
 * round trip instead of 1.0).  One socket alone cannot find out, because
 * its peer's held reads set the pace; so for a few leads no socket of
 * the ring holds, and the ordinary reads of those leads decide afresh. */
#define PX_URING_LATE_PERIOD 1024u
#define PX_URING_LATE_PROBE 8u
_Static_assert((PX_URING_LATE_PERIOD & (PX_URING_LATE_PERIOD - 1)) == 0,
	       "the probe period is a power of two");
static bool ur_late_probing(const px_uring_ring *rg)
{
	return (rg->late_gen & (PX_URING_LATE_PERIOD - 1)) < PX_URING_LATE_PROBE;
}

/* The TCP segment size of fe's socket, asked the first time one of its
 * reads is held (once per socket: the answer only orders held reads, so
 * an old one costs no more than an order that is not the best);
 * UINT32_MAX for a socket that is not TCP. */
static uint32_t ur_seg(px_uring_fd *fe, int fd)
{
	if (fe->seg == 0) {
		int v = 0;
		socklen_t len = sizeof(v);

		if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &v, &len) == 0 && v > 0)
			fe->seg = (uint32_t)v;
		else
			fe->seg = UINT32_MAX;
	}
	return fe->seg;
}

/* Late reads: see the opening comment.  Should r, a new head bound for
 * rg, be held back?  A read on a socket, started by a callback of this
 * proactor while nobody leads rg (whoever leads it next flushes it).  It
 * is held one lead (late) on a descriptor whose last ordinary read ended
 * in the lead after its submission, outside a probe of rg; else only
 * until rg's next prepare (soon), which issues it after the sends the
 * same callbacks started. */
static bool ur_hold_late(px_uring *u, px_result *r, px_uring_ring *rg)
{
	struct px_uring_priv *pr = ur_priv(r);
	bool late = true;

	pr->issue_gen = rg->late_gen;
	if (!u->late_ok || rg->led || r->c.op != PX_OP_READ_STREAM ||
	    pr->fe->notsock || (r->flags & PX_RF_VECTORED) ||
	    atomic_load_explicit(&ur_no_poll_first, memory_order_relaxed) ||
	    !px__dispatch_in_callback(r))
		return false;
	if (!pr->fe->late_pays || ur_late_probing(rg)) {
		late = false;
	} else if (pr->fe->late_skip) {
		pr->fe->late_skip--;
		late = false;
	}
	pr->late = late;
	pr->soon = !late;
	pr->late_gen = rg->late_gen;
	pr->phase = PX_URING_IDLE;
	pr->slist = PX_URING_LATE;
	pr->rg = rg;
	rg->pending++;  /* work for its ring: somebody leads it */
	if (r->c.len > ur_seg(pr->fe, r->c.fd))
		px_list_push_front(&rg->late, &pr->slink);
	else
		px_list_push_back(&rg->late, &pr->slink);
	return true;
}

/* A late read is over.  The prepare that issued it made its wait return
 * at once, so if it ended in that same lead it found data there (the
 * sends before it in the ring had carried it); if not, it had to wait
 * for a peer after all, and holding it back only cost a lead: start the
 * next PX_URING_LATE_SKIP reads on its descriptor at once. */
#define PX_URING_LATE_SKIP 64u
static void ur_late_done(px_result *r, struct px_uring_priv *pr)
{
	if (pr->late_issued) {
		if (pr->late_gen != pr->rg->late_gen) {
			pr->fe->late_skip = PX_URING_LATE_SKIP;
			pr->fe->late_pays = false;
		}
	} else if (r->c.op == PX_OP_READ_STREAM && !pr->late && pr->rg) {
		/* Submitted by the prepare after its start: ended in that
		 * lead (data there, or a wait for a peer) or in the next. */
		pr->fe->late_pays = pr->rg->late_gen - pr->issue_gen == 2;
	}
}

bool px__uring_late_flush(px_uring *u, px_uring_ring *rg)
{
	px_link *l, *next;
	bool issued = false;

	for (l = px_list_first(&rg->late); l; l = next) {
		px_result *r = ur_result_of_slink(l);
		struct px_uring_priv *pr = ur_priv(r);
		bool soon = pr->soon;

		next = px_list_next(&rg->late, l);
		if (!soon && pr->late_gen == rg->late_gen)
			continue;  /* late, held by the callbacks since the last
			              prepare: the next prepare issues it */
		px_list_remove(&rg->late, l);
		rg->pending--;
		pr->slist = PX_URING_NOLIST;
		pr->soon = false;
		if (!ur_issue(rg, r, 0)) {
			/* No SQE: like any other start, it waits for one. */
			pr->slist = PX_URING_STALLED;
			px_list_push_back(&u->stalled, &pr->slink);
			continue;
		}
		if (soon)
			continue;  /* an ordinary read from here on */
		pr->late_issued = true;
		pr->late_gen = rg->late_gen + 1;  /* this lead's */
		issued = true;
	}
	rg->late_gen++;
	return issued || !px_list_empty(&rg->late);
}

int px__uring_flush(px_uring_ring *rg)
{
	rg->to_submit = 0;
	rg->enter_takes = false;
	if (!io_uring_sq_ready(&rg->ring))
		return 0;
	if (!(rg->ring.flags & IORING_SETUP_SQPOLL) && !rg->submit_stuck) {
		/* The leader enters without the mutex, in its wait. */
		rg->to_submit = px__uring_publish(rg);
		if (rg->to_submit) {
			/* For ur_void_unsubmitted (uring.h). */
			rg->enter_takes = true;
			rg->enter_n = rg->to_submit;
			rg->enter_head = rg->ring.sq.sqe_tail - rg->to_submit;
			rg->foreign_n = 0;
			atomic_store_explicit(&rg->entering, true,
					      memory_order_relaxed);
		}
		return 0;
	}
	return ur_submit(rg);
}

/* ------------------------------------------------------------------ */
/* Per-descriptor queues                                                */
/* ------------------------------------------------------------------ */

/* The head of a queue went away: issue the next one. */
static void ur_advance(px_uring *u, px_list *q, px_uring_ring *near)
{
	px_link *l = px_list_first(q);

	if (!l)
		return;
	if (u->advance_later) {
		/* The head before it was cancelled by px_cancel or px_close
		 * while it waited outside the kernel (ur_cancel), and the
		 * same call cancels this one next: into the kernel now, a
		 * write whose socket had room went out at that cancel's own
		 * submit, after the cancelled write before it, and a read
		 * took data (TESTING.md, fixed problem 283).  On the stalled
		 * list it is issued by a prepare, should it be left. */
		struct px_uring_priv *pr = ur_priv(px_result_of_plink(l));
		pr->phase = PX_URING_IDLE;
		pr->slist = PX_URING_STALLED;
		px_list_push_back(&u->stalled, &pr->slink);
		return;
	}
	ur_issue_or_stall(u, px_result_of_plink(l), near);
}

/*
 * Writes to one place.  proactor(3) promises that the operations of one
 * descriptor in one direction run in the order they were started, so two
 * file writes to the same bytes must land in that order, and appends to
 * an O_APPEND file must follow each other in it.  io_uring makes a write
 * without waiting first, and one the file system cannot make so goes to
 * a kernel worker, while the writes behind it may still go in at once: a
 * direct (O_DIRECT) write that extends the file needs its inode's lock
 * alone, ext4 refuses to wait for it there, and the eight writes of one
 * block to one new place ended with an earlier one's bytes in 117 of 300
 * trials, eight appends out of order in 286 of 300 (fixed problem 106).
 * The kernel orders nothing between requests that are not linked, and a
 * link can only be made within one submission.  So a file write waits
 * here, on its descriptor's fwrites list, while an earlier file write
 * on the same descriptor whose bytes overlap its own is unfinished (any
 * earlier one, on an O_APPEND descriptor, whose offset the kernel
 * ignores), and goes in when the last such one finishes.  Writes to
 * other places, the usual case, go in at once as before and cost a walk
 * of the list.  O_APPEND is asked (F_GETFL) once per busy spell, at the
 * first write that finds another unfinished: a flag changed with
 * F_SETFL while writes are in flight counts from the next spell.
 */

/* Whether r must wait for a file write before it, from the list's first
 * element up to (not including) stop, or to its end when stop is NULL. */
static bool ur_fwrite_blocked(px_uring_fd *fe, const px_result *r,
			      const px_link *stop)
{
	if (fe->fwrites_append)
		return px_list_first(&fe->fwrites) != stop;
	return px_fdq_fwrite_overlaps(&fe->fwrites, r, stop);
}

/* At the start of file write r: true when it is held behind an earlier
 * one (then on fe->fwrites, counted in flight, not in the kernel); else
 * false, and the caller puts it on fe->fwrites once it is issued. */
static bool ur_fwrite_held(px_uring_fd *fe, px_result *r)
{
	int fl;

	if (!fe->fwrites.head.next)
		px_list_init(&fe->fwrites);  /* a new entry is zeroed */
	if (px_list_empty(&fe->fwrites))
		return false;
	if (!fe->fwrites_seen) {
		fe->fwrites_append = (fl = fcntl(r->c.fd, F_GETFL)) >= 0 &&
				     (fl & O_APPEND);
		fe->fwrites_seen = true;
	}
	if (!ur_fwrite_blocked(fe, r, NULL))
		return false;
	ur_priv(r)->wheld = true;
	fe->fwrites_held++;
	px_list_push_back(&fe->fwrites, &r->plink);
	fe->inflight++;
	return true;
}

/* File write r is over (done, failed, or cancelled while held): off the
 * list, and the held writes it was the last obstacle of go in. */
static void ur_fwrite_done(px_uring *u, px_result *r)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_uring_fd *fe = pr->fe;
	px_link *l, *next;

	if (!px_link_linked(&r->plink))
		return;
	px_list_remove(&fe->fwrites, &r->plink);
	if (pr->wheld) {
		pr->wheld = false;
		fe->fwrites_held--;
	}
	if (px_list_empty(&fe->fwrites)) {
		fe->fwrites_seen = false;
		return;
	}
	for (l = px_list_first(&fe->fwrites); l && fe->fwrites_held; l = next) {
		px_result *w = px_result_of_plink(l);
		struct px_uring_priv *wp = ur_priv(w);

		next = px_list_next(&fe->fwrites, l);
		if (!wp->wheld || ur_fwrite_blocked(fe, w, l))
			continue;
		wp->wheld = false;
		fe->fwrites_held--;
		ur_issue_or_stall(u, w, pr->rg);
	}
}

/* Take r off its queue; if it was the head, the next one goes in. */
static void ur_dequeue(px_uring *u, px_result *r)
{
	struct px_uring_priv *pr = ur_priv(r);
	int dir = px__fdq_dir(r->c.op);

	if (r->c.op == PX_OP_WRITE_FILE) {
		ur_fwrite_done(u, r);
		return;
	}
	if (dir < 0 || !px_link_linked(&r->plink))
		return;
	if (px_fdq_remove(&pr->fe->fq, dir, r))
		ur_advance(u, &pr->fe->fq.q[dir], pr->rg);
}

/* ------------------------------------------------------------------ */
/* Completion                                                           */
/* ------------------------------------------------------------------ */

/*
 * A TCP connect that failed (refused, unreachable, timed out, reset):
 * the kernel's connect request, woken with an error on the socket, takes
 * that error (SO_ERROR) without calling connect(2) again, so the socket
 * stays marked as connecting, with both directions shut by the failure.
 * A read started next then said 0 bytes, the end of a stream there never
 * was, where a failed connect(2) (which ends by disconnecting the socket)
 * and the other engines (nb_connect_finish in nbio.c) leave a socket
 * that is not connected: ENOTCONN.  A connect(2) to AF_UNSPEC clears the
 * mark on a socket the failure closed and starts nothing; a socket still
 * under way is left alone, and a cancelled connect (ECANCELED: px_cancel,
 * px_close, a deadline) is not looked at, as the other engines leave it.
 * Only on a failure, so never on the path of a connection; nor on
 * EISCONN, a socket connected before (fixed problem 254), nor on
 * EALREADY, a connect under way that is not this one's (fixed problem
 * 266).
 */
static void ur_connect_failed(int fd)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && tl > 0 &&
	    ti.tcpi_state == TCP_CLOSE) {
		struct sockaddr un = { .sa_family = AF_UNSPEC };

		(void)px__sys_connect(fd, &un, sizeof(un));
	}
}

/* r is done with res (bytes, or -errno): set its outputs and forget it. */
static px_result *ur_finish(px_uring *u, px_result *r, int res)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_completion *c = &r->c;

	ur_unstall(u, r);
	ur_late_done(r, pr);
	pr->phase = PX_URING_IDLE;
	pr->fe->inflight--;
	/* An error, a cancel or the end of a stream: the application may
	 * close the number next (with close(2), which the provider does not
	 * see) and get it back for another file, a listener say, whose reads
	 * must not go with POLL_FIRST.  So its next start with nothing in
	 * flight looks at the number again (one getsockopt per such end;
	 * never on a read or write that moved bytes). */
	if (res < 0 || (res == 0 && c->op == PX_OP_READ_STREAM && c->len)) {
		pr->fe->open_seen = false;  /* px_result_may_close_next, on res */
		pr->fe->type_seen = false;
	}
	if (res == -EBADF)
		pr->fe->seg = 0;
	if (res >= 0) {
		size_t bytes = r->done + (size_t)res;
		int error = 0;
		if (c->op == PX_OP_READ_STREAM || c->op == PX_OP_READ_FILE ||
		    c->op == PX_OP_READ_DGRAM)
			ur_mark_filled(r, r->done, (size_t)res);
		if (c->op == PX_OP_READ_STREAM && res > 0)
			pr->fe->listener = false;  /* the number was reused */
		switch (c->op) {
		case PX_OP_ACCEPT:
			c->new_fd = res;
			bytes = 0;
			break;
		case PX_OP_CONNECT:
			bytes = 0;
			/* Its port, for the default gate of the end it
			 * reached, should that be served here. */
			if (u->gate_peers)
				ur_note_port(u, pr->fe, c->fd);
			ur_note_pair(u, pr->fe, c->fd, pr->fe->rg);
			break;
		case PX_OP_READ_DGRAM:
			c->addrlen = pr->msg.msg_namelen;
			break;
		case PX_OP_WRITE_STREAM:
			/* A cancelled write-all stops short. */
			if ((r->flags & PX_RF_WRITE_ALL) && bytes < c->len &&
			    pr->cancel_req)
				error = ECANCELED;
			break;
		default:
			break;
		}
		px_result_finish(r, bytes, error);
		if (c->op == PX_OP_ACCEPT) {
			/* Off a number pending requests name, then noted. */
			px__accept_keep_off(u->prov.px, r);
			if (c->new_fd >= 0)
				ur_mark_fresh(u, c->new_fd,
					      ur_loopback_port(c));
		}
	} else {
		if (c->op == PX_OP_ACCEPT || c->op == PX_OP_READ_DGRAM)
			c->addrlen = 0;
		/* Whatever the descriptor was, it may be something else
		 * by the next operation. */
		if ((c->op == PX_OP_WRITE_STREAM || c->op == PX_OP_READ_STREAM) &&
		    res != -ECANCELED)
			pr->fe->notsock = false;
		/* EISCONN is no failed connect: the socket was connected
		 * before this one, and stays so (its connection may have
		 * been reset since, which left it closed, and the AF_UNSPEC
		 * would unmark it: the next px_connect a new connection).
		 * Nor is EALREADY: the connect under way is someone else's,
		 * the application's own connect(2) say, and so is its end;
		 * one that failed since (closed by now) must keep its mark
		 * for the connect(2) that will ask for its result (fixed
		 * problem 266). */
		if (c->op == PX_OP_CONNECT && res != -EBADF &&
		    res != -ECANCELED && res != -EISCONN && res != -EALREADY)
			ur_connect_failed(c->fd);
		px_result_finish(r, r->done, -res);
	}
	ur_dequeue(u, r);
	return r;
}

/* r's own request is over (res: bytes, or -errno): finish it, and hand it
 * out unless the CQE of an ASYNC_CANCEL aimed at it is still to come. */
static px_result *ur_end(px_uring *u, px_result *r, int res)
{
	struct px_uring_priv *pr = ur_priv(r);

	ur_finish(u, r, res);
	if (pr->cancel_sent) {
		pr->held = true;
		return NULL;
	}
	return r;
}

/* The CQE of the ASYNC_CANCEL aimed at r.  -ENOENT while r's request has
 * not ended: the kernel had it in none of the places a cancel looks, but
 * between two of its own steps.  A send on a socket whose peer shut down
 * its write side is such a case: each internal poll wakes at once (the
 * kernel adds POLLRDHUP to every poll), the send fails with EAGAIN again,
 * and after 128 such rounds of task work the kernel hands it to an io-wq
 * worker, where the send blocks.  A cancel that arrives during the rounds
 * finds nothing; sent again it finds the worker and interrupts the send
 * (-EALREADY: the worker is signalled and the send ends with -EINTR or
 * its partial count).  So ask again; the request completes anyway if it
 * was merely about to. */
static px_result *ur_cancel_done(px_uring *u, px_uring_ring *rg,
				  px_result *r, int res)
{
	struct px_uring_priv *pr = ur_priv(r);

	rg->cancels_inflight--;
	pr->cancel_sent = false;
	if (pr->held) {
		pr->held = false;
		return r;
	}
	if (res == -ENOENT && pr->phase != PX_URING_IDLE &&
	    pr->slist == PX_URING_NOLIST) {
		if (!ur_send_cancel(u, r, false)) {
			pr->slist = PX_URING_CANCEL_STALLED;
			px_list_push_back(&u->cancel_stalled, &pr->slink);
		}
	}
	return NULL;
}

/* The EPOLL_CTL of r, a gated read, is over.  Done: r is parked until
 * the set reports its descriptor (at once if it already did).  ENOENT to
 * a MOD (the number was closed and reused, or added to another ring's
 * set) and EEXIST to an ADD correct what fe->gate_rg said: the other one
 * goes in.  Any other error (a file epoll refuses, EBADF, no memory or
 * watches left): r goes in as an ordinary read, whose own completion
 * tells the application what is wrong. */
static px_result *ur_gate_ctl_done(px_uring *u, px_result *r, int res)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_uring_ring *grg = pr->rg;

	pr->gate_ctl = false;
	if (pr->cancel_req) {
		ur_gate_leave(grg, pr, false);
		return ur_end(u, r, -ECANCELED);
	}
	/* (Not once the ring has stopped gating, its set replaced behind
	 * the library's back: px__uring_check_own.  The read goes in.) */
	if (res == 0 && !pr->gate_fired && grg->gate_ep >= 0) {
		grg->parked++;
		px__uring_gate_arm(grg);
		return NULL;
	}
	ur_gate_leave(grg, pr, false);
	if (res == -ENOENT && pr->gate_op == EPOLL_CTL_MOD) {
		pr->fe->gate_rg = NULL;
	} else if (res == -EEXIST && pr->gate_op == EPOLL_CTL_ADD) {
		pr->fe->gate_rg = grg;
	} else if (res < 0) {
		pr->fe->gate_rg = NULL;
		pr->gate_pass = true;
	}
	ur_issue_or_stall(u, r, grg);
	return NULL;
}

/* The POLL_ADD on rg's gate set ended: issue the parked reads whose
 * descriptors it reports, as RECVs without POLL_FIRST (their data is
 * there; should it not be, the kernel arms its poll as for any read).
 * A report for a number whose read is elsewhere (no read, one in
 * another ring, one not parked) only spends the one-shot interest. */
static void ur_gate_fire(px_uring *u, px_uring_ring *rg)
{
	struct epoll_event ev[64];
	int n;

	rg->gate_armed = false;
	if (rg->gate_ep < 0)
		return;
	do {
		n = epoll_wait(rg->gate_ep, ev, 64, 0);
		for (int i = 0; i < n; i++) {
			px_fdq_entry *fq = px_fdq_lookup(&u->fdq,
							 (int)ev[i].data.u64);
			px_link *l = fq ? px_list_first(&fq->q[PX_FDQ_RD]) : NULL;

			if (!l)
				continue;
			px_result *r = px_result_of_plink(l);
			struct px_uring_priv *pr = ur_priv(r);

			if (pr->phase != PX_URING_GATE || pr->rg != rg ||
			    pr->gate_fired)
				continue;
			pr->gate_fired = true;
			if (pr->gate_ctl)
				continue;  /* its CTL's completion issues it */
			ur_gate_leave(rg, pr, true);
			ur_issue_or_stall(u, r, rg);
		}
	} while (n == (int)(sizeof(ev) / sizeof(ev[0])));
	px__uring_gate_arm(rg);
}

void px__uring_prefetch(px_uring_ring *rg)
{
	struct io_uring_cq *cq = &rg->ring.cq;
	unsigned head = *cq->khead;
	unsigned ready = io_uring_smp_load_acquire(cq->ktail) - head;

	/* The next CQE is handled after the caller's one, the two after it
	 * later still: enough distance to hide a miss on this machine
	 * (docs/PERFORMANCE.md, "Prefetching the results of the next
	 * CQEs"). */
	for (unsigned k = 0; k < 3 && k < ready; k++) {
		uint64_t ud = cq->cqes[(head + k) & cq->ring_mask].user_data;

		if (ud < PX_URING_TAG_MAX)
			continue;
		px_result *r = (px_result *)(uintptr_t)(ud &
			~PX_URING_UD_BITS);
		__builtin_prefetch(r, 1);
		__builtin_prefetch(&r->c, 1);
		__builtin_prefetch(&ur_priv(r)->phase, 1);
	}
}

px_result *px__uring_complete(px_uring *u, px_uring_ring *rg,
			      uint64_t user_data, int res)
{
	if (user_data == PX_URING_TAG_KICK) {
		/* Not counted in pending (px__uring_kick_arm); whatever it
		 * ended with, the next prepare puts another in. */
		/* (With the kick forgotten, px__uring_check_own, it stays
		 * off.) */
		rg->kick = rg->kick_fd >= 0 ? PX_URING_KICK_DONE
					    : PX_URING_KICK_OFF;
		return NULL;
	}
	if (user_data == PX_URING_TAG_GATE) {
		/* Not counted in pending either (px__uring_gate_arm). */
		ur_gate_fire(u, rg);
		return NULL;
	}
	rg->pending--;
	if (user_data < PX_URING_TAG_MAX) {
		if (user_data == PX_URING_TAG_NOP)
			rg->intr_queued = false;
		return NULL;
	}

	px_result *r = (px_result *)(uintptr_t)(user_data &
		~PX_URING_UD_BITS);
	struct px_uring_priv *pr = ur_priv(r);

	if (user_data & PX_URING_UD_CANCEL)
		return ur_cancel_done(u, rg, r, res);
	if (user_data & PX_URING_UD_GATE)
		return ur_gate_ctl_done(u, r, res);
	bool was_pf = pr->pf_armed;
	if (was_pf) {
		pr->pf_armed = false;
		pr->rg->pf_reads--;
	}
	pr->phase = PX_URING_IDLE;

	if (user_data & PX_URING_UD_POLL) {
		/* The descriptor is ready (or the poll failed): retry. */
		if (pr->cancel_req)
			return ur_end(u, r, -ECANCELED);
		if (pr->in_backoff) {
			if (res == -ETIME)
				res = 0;  /* the back-off's TIMEOUT ran out */
			/* Poll once more before the next pause. */
			pr->err_alone = false;
		} else if (res > 0) {
			unsigned dir = px__fdq_dir(r->c.op) == PX_FDQ_RD ?
				       POLLIN : POLLOUT;
			pr->err_alone = (res & POLLERR) && !(res & dir);
		}
		if (res == -ECANCELED) {
			/* Its submitter exited (see below): poll again. */
			ur_issue_or_stall(u, r, NULL);
			return NULL;
		}
		if (res < 0)
			return ur_end(u, r, res);
		pr->want_poll = false;
		/* (A back-off's timeout keeps what the last poll said: a
		 * shut-down read side is never reopened.) */
		if (!pr->in_backoff)
			pr->rdhup = (res & POLLRDHUP) != 0;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}

	if (pr->cancel_req) {
		/* Its SQE was made a NOP before the kernel took it
		 * (ur_void_unsubmitted): nothing was done. */
		if (pr->voided)
			res = -ECANCELED;
		/* Cancelled while running in io-wq: interrupted by signal.
		 * EBADF: the cancel came too late to stop the request (its
		 * SQE was already in the ring) and the application closed
		 * the descriptor after asking for the cancel, as it may:
		 * for the application the operation was cancelled. */
		if (res == -EAGAIN || res == -EINTR || res == -EALREADY ||
		    res == -EBADF)
			res = -ECANCELED;
		/* The answers below that make a stream operation go in again
		 * in another form say that this form did nothing: not the
		 * operation's result, which the cancel now is.  (ENOTSOCK is
		 * still worth knowing for the next operation.) */
		if (pr->as_send && res == -ENOTSOCK &&
		    (r->c.op == PX_OP_WRITE_STREAM ||
		     r->c.op == PX_OP_READ_STREAM)) {
			pr->fe->notsock = true;
			pr->fe->tty_block = ur_tty_blocks(r->c.fd);
			res = -ECANCELED;
		}
		if (pr->as_send && res == -EINVAL &&
		    r->c.op == PX_OP_READ_STREAM &&
		    !(r->flags & PX_RF_VECTORED))
			res = -ECANCELED;
		return ur_end(u, r, res);
	}

	if (res == -ECANCELED || res == -EINTR) {
		/* Nobody asked for this cancel: the thread that submitted
		 * the request has exited, and the kernel dropped the request
		 * before performing it (task work that cannot run in that
		 * thread any more, or io-wq work of that thread), or, for one
		 * an io-wq worker was performing, interrupted it with a
		 * signal: -EINTR, nothing moved by this request (a send
		 * that moved bytes returns their count).  Submit it again
		 * from this one (fixed problem 149). */
		pr->reissued = true;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	if (r->c.op == PX_OP_CONNECT && pr->reissued) {
		/* A connect reissued after the above: the first one may have
		 * got the handshake going, or even through. */
		if (res == -EISCONN)
			res = 0;
		if (res == -EALREADY) {
			pr->want_poll = true;
			ur_issue_or_stall(u, r, NULL);
			return NULL;
		}
	}
	if (res == -EAGAIN && was_pf && !pr->cancel_req) {
		/* A RECV with POLL_FIRST on a file io_uring cannot poll (a
		 * regular file) answers EAGAIN at once, and would again after
		 * every poll: the flag goes, the RECV then tells ENOTSOCK and
		 * the read goes in as READ. */
		pr->pf_skip = true;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	if (res == -EAGAIN &&
	    (r->c.op == PX_OP_READ_DGRAM || r->c.op == PX_OP_READ_STREAM) &&
	    (pr->shut_seen || pr->rdhup)) {
		/* A datagram socket shut down for reading (O_NONBLOCK: on a
		 * blocking one the kernel's receive returns 0 itself) polls
		 * readable for good while its receive says EAGAIN: a poll and
		 * a receive for ever, at full CPU.  One more receive takes a
		 * datagram that came meanwhile; then 0 bytes and no sender, as
		 * a blocking receive gives (providers/nbio.c, nb_read_shut).
		 * A stream read comes here too: a vectored one goes in as
		 * READV, which hands the EAGAIN back the same way (fixed
		 * problem 214; a stream socket in that state returns 0
		 * itself, and a pipe never reports POLLRDHUP). */
		if (!pr->shut_seen) {
			pr->shut_seen = true;
			ur_issue_or_stall(u, r, NULL);
			return NULL;
		}
		pr->msg.msg_namelen = 0;
		return ur_end(u, r, 0);
	}
	if (res == -EAGAIN && r->c.op == PX_OP_ACCEPT && pr->rdhup) {
		/* An AF_UNIX listener shut down with shutdown(2) polls
		 * readable for good while an accept of it says EAGAIN when
		 * it is O_NONBLOCK (a blocking one: EINVAL, which io-wq's
		 * blocking retry gets, as TCP's does either way): a poll and
		 * an accept for ever, at full CPU.  EINVAL, as accept(2) of
		 * a blocking listener and the other engines
		 * (providers/nbio.c, nb_accept) give. */
		return ur_end(u, r, -EINVAL);
	}
	if (res == -EAGAIN && ur_pollable(r->c.op)) {
		ur_backoff(pr, r->c.op);
		pr->want_poll = true;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	if (res == -ENOTSOCK && pr->as_send &&
	    (r->c.op == PX_OP_WRITE_STREAM || r->c.op == PX_OP_READ_STREAM)) {
		pr->fe->notsock = true;
		pr->fe->tty_block = ur_tty_blocks(r->c.fd);
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	if (res == -EINVAL && pr->as_send && r->c.op == PX_OP_READ_STREAM &&
	    !(r->flags & PX_RF_VECTORED)) {
		/* The flag, or the socket: an AF_UNIX stream socket that is
		 * not connected (or listens) answers EINVAL to any receive.
		 * The same read as READ tells which (below). */
		pr->pf_retry = true;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	if (pr->pf_retry && !pr->as_send && res >= 0) {
		/* READ did what RECV refused: it was the flag, a property
		 * of the kernel, so one for the process.  (Set on the
		 * RECV's EINVAL alone, one read of an unconnected socket
		 * took POLL_FIRST and the late reads from every socket read
		 * of the process for good; set on any answer but EINVAL, so
		 * did one whose number was closed before the READ went in:
		 * EBADF, fixed problem 230.  A READ that fails for another
		 * reason tells nothing, and the next read asks again.) */
		atomic_store_explicit(&ur_no_poll_first, true,
				      memory_order_relaxed);
	}
	if (res > 0 && r->c.op == PX_OP_WRITE_STREAM &&
	    (r->flags & PX_RF_WRITE_ALL) && r->done + (size_t)res < r->c.len) {
		/* Short write: the rest goes next, still at the head. */
		r->done += (size_t)res;
		ur_issue_or_stall(u, r, NULL);
		return NULL;
	}
	return ur_end(u, r, res);
}

/* ------------------------------------------------------------------ */
/* Provider ops                                                         */
/* ------------------------------------------------------------------ */

static int ur_start(px_provider *p, px_result *r)
{
	px_uring *u = ur_of_prov(p);
	struct px_uring_priv *pr = ur_priv(r);
	int dir = px__fdq_dir(r->c.op);
	px_fdq_entry *fq;
	int rc;

	if (!ur_does(r->c.op))
		return -EOPNOTSUPP;
	memset(pr, 0, sizeof(*pr));
	r->done = 0;
	/* -EBADF for a negative number, or one beyond the table that is not
	 * open (the table never grows for those). */
	rc = px__fdq_get(&u->fdq, r->c.fd, &fq);
	if (rc < 0)
		return rc;
	pr->fe = px_container_of(fq, px_uring_fd, fq);
	/* A descriptor that is not open is refused at once, as the API says,
	 * instead of failing later in the completion.  The check costs a
	 * syscall, as much as the io_uring_enter it shares with the other
	 * starts, so it is made only for a descriptor not yet seen open
	 * (see the opening comment).  It is SO_ACCEPTCONN, which says at
	 * the same price whether the socket listens (ENOTSOCK: open, not a
	 * socket). */
	if (!pr->fe->open_seen && !pr->fe->inflight) {
		int acc = 0;
		socklen_t alen = sizeof(acc);
		int e = getsockopt(r->c.fd, SOL_SOCKET, SO_ACCEPTCONN, &acc,
				   &alen) < 0 ? errno : 0;
		/* (EBADF for an O_PATH descriptor too, which is open: fcntl
		 * tells.) */
		if (e == EBADF && fcntl(r->c.fd, F_GETFD) < 0 && errno == EBADF)
			return -EBADF;
		if (e)
			acc = 0;
		/* No socket (a pipe, a file): its stream operations go as
		 * READ and WRITE from the first, without a RECV or SEND that
		 * says ENOTSOCK. */
		pr->fe->notsock = e == ENOTSOCK;
		pr->fe->tty_block = e == ENOTSOCK && ur_tty_blocks(r->c.fd);
		pr->fe->listener = acc != 0;
		pr->fe->open_seen = true;
		pr->fe->seg = 0;  /* maybe another socket */
		pr->fe->peer = PX_PEER_UNKNOWN;
	}
	if (r->c.op == PX_OP_ACCEPT) {
		pr->fe->listener = true;
		/* Its port, for the peers of the default gate: a socket that
		 * connects to it from here is served here.  Asked once per
		 * opening of the number (peer says so: a listener has none),
		 * also for an AF_UNIX listener, which has no port. */
		if (u->gate_peers && pr->fe->peer == PX_PEER_UNKNOWN) {
			ur_note_port(u, pr->fe, r->c.fd);
			pr->fe->peer = PX_PEER_AWAY;
		}
	}
	/* A stream write on a datagram or seqpacket socket sends one
	 * message, and its SEND must not be retried by the kernel
	 * (ur_prep_op): which kind of socket it is, asked at the first
	 * stream write since the number was last seen open.  A number
	 * closed with close(2) and reused unseen keeps the old answer: a
	 * stream socket's writes then go with MSG_DONTWAIT (a poll of our
	 * own on EAGAIN, correct, a little dearer); a message socket's
	 * without (the empty datagram again, when its receiver is full). */
	if (r->c.op == PX_OP_WRITE_STREAM && !pr->fe->type_seen) {
		int type = 0;
		socklen_t tlen = sizeof(type);
		pr->fe->msg_sock = getsockopt(r->c.fd, SOL_SOCKET, SO_TYPE,
					      &type, &tlen) == 0 &&
				   (type == SOCK_DGRAM || type == SOCK_SEQPACKET);
		pr->fe->type_seen = true;
	}
	/* "Not a socket" was learnt about whatever the number was then.  With
	 * nothing in flight it may have been closed and reused for a socket,
	 * which a WRITE would raise SIGPIPE on (SEND has MSG_NOSIGNAL): look
	 * again, once per idle spell, for writes.  (A READ on a socket only
	 * misses POLL_FIRST.) */
	if (pr->fe->notsock && !pr->fe->inflight &&
	    r->c.op == PX_OP_WRITE_STREAM) {
		struct stat st;
		if (fstat(r->c.fd, &st) == 0) {
			if (S_ISSOCK(st.st_mode))
				pr->fe->notsock = false;
			pr->fe->tty_block = S_ISCHR(st.st_mode) &&
					    ur_tty_blocks(r->c.fd);
		}
	}
	if (dir >= 0 && !px_list_empty(&fq->q[dir])) {
		/* Goes in when everything before it is done. */
		px_fdq_push(fq, dir, r);
		pr->fe->inflight++;
		return PX_START_STARTED;
	}
	/* A file write to bytes an earlier one still covers: goes in when
	 * that one is done ("Writes to one place"). */
	if (r->c.op == PX_OP_WRITE_FILE && ur_fwrite_held(pr->fe, r))
		return PX_START_STARTED;
	px_uring_ring *rg = ur_start_ring(u, r);
	if (pr->fe->rg != rg) {
		if (pr->fe->rg)
			pr->fe->rg->nfd--;
		rg->nfd++;
		pr->fe->rg = rg;
		if (pr->fe->pair_src)
			u->port_ring[pr->fe->own_port] =
				(uint8_t)(1 + (rg - u->rings));
	}
	/* A socket bound before its connect: its port is known now, before
	 * the other end's accept may complete (else at the completion). */
	if (r->c.op == PX_OP_CONNECT)
		ur_note_pair(u, pr->fe, r->c.fd, rg);
	if (ur_hold_late(u, r, rg)) {
		px_fdq_push(fq, dir, r);
		pr->fe->inflight++;
		return PX_START_STARTED;
	}
	if (!ur_issue(rg, r, u->sq_reserve))
		return PX_START_AGAIN;
	if (dir >= 0)
		px_fdq_push(fq, dir, r);
	else if (r->c.op == PX_OP_WRITE_FILE)
		px_list_push_back(&pr->fe->fwrites, &r->plink);
	pr->fe->inflight++;
	px__uring_kick(pr->rg);
	ur_wake_for(u, pr->rg, r, true);
	return PX_START_STARTED;
}

/* ur_cancel: submit the SQEs waiting in rg's ring and, with SQPOLL (whose
 * kernel thread takes them on its own schedule, after io_uring_submit has
 * only published the tail and woken it), wait until it has taken them:
 * the kernel looks a request's descriptor number up as it takes it.
 * Mutex held: the other threads wait with it. */
static void ur_submit_taken(px_uring_ring *rg)
{
	ur_submit(rg);
	ur_sqpoll_taken(rg);
}

/* The submit of ur_cancel.  A cancel made for r's deadline (timer.c, with
 * the mutex held since the expiry) returns to no application call: r's
 * callback comes only with its CQE, after the kernel took its SQE, so the
 * number cannot be closed and reused under it meanwhile, and the wait
 * for the SQPOLL thread is not needed (a px_cancel that follows makes it,
 * below).  Made all the same, it held the
 * mutex for a scheduler slice or more at every yield while that thread
 * ran elsewhere (a helper's review of 2026-12-06: eight sessions reading
 * with deadlines of 1-300 us and two loop threads took 11-42 s instead
 * of 0.3 s; TESTING.md, fixed problem 211). */
static void ur_cancel_submit(px_uring_ring *rg, const px_result *r)
{
	if (r->deadline_cancel)
		ur_submit(rg);
	else
		ur_submit_taken(rg);
}

/* r was cancelled by px_cancel (or px_close) and its request is still in
 * rg's SQ: the submit ur_cancel made for it was refused (EAGAIN, EBUSY,
 * ENOMEM, EINTR: submit_stuck).  The kernel looks a request's descriptor
 * number up only when it takes the SQE, and the application may close the
 * number as soon as px_cancel returns and get it back for another file,
 * whose data the request would then take at the next lead's submit (the
 * ASYNC_CANCEL behind it comes too late for a read whose data is there).
 * So the SQE becomes a NOP with the same user_data: it looks nothing up,
 * and its CQE ends r with ECANCELED (px__uring_complete).
 *
 * The SQE is rewritten only where no enter of rg's leader, made without
 * the mutex, may be reading it.  That enter takes at most enter_n SQEs
 * from the kernel's head on, and the kernel stores its head once, at
 * the end of a submission: so with the mutex held (no other thread's
 * submit under way), a head moved by more than the SQEs other threads'
 * submits took since the prepare (foreign_n) says the enter took its SQEs
 * and takes no more, and a head moved by just that many says it has not
 * taken any yet, and then may take those from the head up to enter_n
 * further.  When r's SQE is among those, wait (holding the mutex, as
 * ur_sqpoll_taken does) until the enter has taken it or returned
 * without: a few microseconds, which the leader spends in its own wait()
 * without the mutex.  Left alone, the SQE was taken by that enter, or
 * by the next lead's submit after an enter refused too, on whatever the
 * number named by then: a cancelled read took the data of the socket the
 * application had opened under it (TESTING.md, fixed problem 317).  If
 * that enter took it, the descriptor was looked up before px_cancel
 * returns, and the kernel takes submissions again: the ASYNC_CANCEL
 * behind goes in now.  Not with SQPOLL (ur_submit_taken waits for its
 * kernel thread instead).  Mutex held.  Returns whether it made the NOP. */
static bool ur_void_unsubmitted(px_uring_ring *rg, px_result *r)
{
	struct io_uring_sq *sq = &rg->ring.sq;
	uint64_t ud = (uintptr_t)r;
	unsigned spins = 0;

	if (rg->ring.flags & IORING_SETUP_SQPOLL)
		return false;
	for (;;) {
		/* The flag before the head: cleared, the enter's whole
		 * submission is behind (its release, after the syscall). */
		bool live = rg->waiting && rg->enter_takes &&
			    atomic_load_explicit(&rg->entering,
						 memory_order_acquire);
		unsigned head = io_uring_smp_load_acquire(sq->khead);
		unsigned pos = head;
		struct io_uring_sqe *sqe = NULL;
		uint64_t d = 0;

		for (; pos != sq->sqe_tail; pos++) {
			sqe = &sq->sqes[pos & sq->ring_mask];
			d = sqe->user_data;
			/* Its operation or its readiness poll (never its
			 * cancel). */
			if (d == ud || d == (ud | PX_URING_UD_POLL))
				break;
		}
		if (pos == sq->sqe_tail) {
			/* Taken (by the leader's enter, if it was waited
			 * for). */
			if (spins)
				ur_submit(rg);
			return false;
		}
		if (!live || head - rg->enter_head != rg->foreign_n ||
		    pos - head >= rg->enter_n) {
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, d);
			return true;
		}
		/* The leader's enter may be taking it at this moment. */
		if (++spins < 64) {
			sched_yield();
		} else {
			struct timespec nap = { 0, 50000 };
			nanosleep(&nap, NULL);
		}
	}
}

/* Whether an SQE with user_data ud waits in rg's SQ, unsubmitted. */
static bool ur_in_sq(px_uring_ring *rg, uint64_t ud)
{
	struct io_uring_sq *sq = &rg->ring.sq;

	for (unsigned pos = io_uring_smp_load_acquire(sq->khead);
	     pos != sq->sqe_tail; pos++)
		if (sq->sqes[pos & sq->ring_mask].user_data == ud)
			return true;
	return false;
}

/* The argument of IORING_REGISTER_SYNC_CANCEL (6.0), spelt out here as
 * the kernel's header has it, so that an older liburing builds too. */
struct ur_sync_cancel_reg {
	uint64_t addr;
	int32_t fd;
	uint32_t flags;
	struct __kernel_timespec timeout;
	uint64_t pad[4];
};
#define PX_URING_REGISTER_SYNC_CANCEL 24u

/* r's request is in the kernel, and the ASYNC_CANCEL that px_cancel (or
 * px_close) queued behind it still waits in the SQ: the kernel refused
 * its submit (EAGAIN, EBUSY, ENOMEM, EINTR), or, the SQ full of what it
 * refused, waits for an SQE on the stalled-cancel list.  Left so,
 * px_cancel returned with the request armed, and a read took the data
 * its peer sent after the call, which a cancelled read must leave alone
 * (fixed problem 278), a terminal write went on writing, and one queued
 * for an io-wq worker was run on the file that had taken its number: the
 * cancel reached the kernel only once submissions went through again
 * (TESTING.md, fixed problem 318).  The kernel's synchronous cancel takes
 * no SQE: it cancels the request with the given user_data at once (a poll
 * armed read or write, a request queued for an io-wq worker, which would
 * look its descriptor up only when it ran), and waits for one an io-wq
 * worker is performing (interrupted, it ends soon), up to
 * PX_URING_SYNC_CANCEL_MS.  The request's CQE then comes as usual, and the
 * ASYNC_CANCEL, submitted later, finds nothing (ur_cancel_done).  Mutex
 * held.  Kernels before 6.0 refuse the call (EINVAL): as before there. */
#define PX_URING_SYNC_CANCEL_MS 100
static void ur_sync_cancel(px_uring *u, px_result *r)
{
	struct px_uring_priv *pr = ur_priv(r);
	px_uring_ring *rg = pr->rg;
	uint64_t ud = (uintptr_t)r;
	uint64_t target = pr->phase == PX_URING_POLL ? ud | PX_URING_UD_POLL
						       : ud;

	/* Its ASYNC_CANCEL unsubmitted, or not even queued (no SQE: on the
	 * stalled-cancel list); its own SQE taken by the kernel.  (Not on a
	 * dead ring, whose number may name another file by now.) */
	if (u->sync_cancel_off ||
	    atomic_load_explicit(&rg->dead, memory_order_relaxed) ||
	    (pr->cancel_sent ? !ur_in_sq(rg, ud | PX_URING_UD_CANCEL)
			     : pr->slist != PX_URING_CANCEL_STALLED) ||
	    ur_in_sq(rg, ud) || ur_in_sq(rg, ud | PX_URING_UD_POLL))
		return;
	struct ur_sync_cancel_reg reg;
	memset(&reg, 0, sizeof(reg));
	reg.addr = target;
	reg.fd = -1;
	reg.timeout.tv_sec = 0;
	reg.timeout.tv_nsec = PX_URING_SYNC_CANCEL_MS * 1000000LL;
	long rc = syscall(__NR_io_uring_register, rg->ring.ring_fd,
			  PX_URING_REGISTER_SYNC_CANCEL, &reg, 1);
	if (rc < 0 && errno == EINVAL)
		u->sync_cancel_off = true;
}

static int ur_cancel(px_provider *p, px_result *r)
{
	px_uring *u = ur_of_prov(p);
	struct px_uring_priv *pr = ur_priv(r);

	if (pr->held)
		return PX_CANCEL_PENDING;  /* over, handed out with its cancel's CQE */
	if (pr->phase == PX_URING_GATE) {
		pr->cancel_req = true;
		if (pr->gate_ctl)
			return PX_CANCEL_PENDING;  /* its CTL's completion ends it */
		/* Parked: nothing in the kernel refers to it. */
		ur_gate_leave(pr->rg, pr, true);
	}
	if (pr->phase == PX_URING_IDLE) {
		/* Not in the kernel: forget it now.  A px_cancel or px_close
		 * cancels every operation of the descriptor, in start order,
		 * so the next head of r's queue, if r was the head (waiting
		 * for an SQE, held late, parked at the gate), is cancelled
		 * next: it waits (u->advance_later).  A deadline's cancel
		 * ends r alone: the next goes in. */
		pr->cancel_req = true;
		u->advance_later = !r->deadline_cancel;
		ur_finish(u, r, -ECANCELED);
		u->advance_later = false;
		for (unsigned i = 0; i < u->nrings; i++)
			px__uring_kick(&u->rings[i]);  /* the next head, if any */
		return PX_CANCEL_DONE;
	}
	pr->cancel_req = true;
	/* Its SQE may still wait in the ring, unsubmitted (no leader was in
	 * the kernel to take it, or a dedicated leader is yet to wake for
	 * it).  The kernel looks the descriptor number up at submission, and
	 * once px_cancel returns the application may close the number and
	 * get it back for another file, whose data the request would then
	 * take (a helper's review of 2026-12-05): submit what waits now, the
	 * cancel, if it finds room, going right behind. */
	bool unsubmitted = io_uring_sq_ready(&pr->rg->ring) != 0;
	bool asked = !r->deadline_cancel;
	if (!pr->cancel_sent && pr->slist == PX_URING_CANCEL_STALLED &&
	    asked)
		ur_unstall(u, r);  /* its deadline's cancel waits: this one goes */
	if (!pr->cancel_sent && pr->slist == PX_URING_NOLIST) {
		bool sent = ur_send_cancel(u, r, asked);
		if (!sent && asked) {
			/* No SQE: the SQ is full of what its submit could not
			 * hand over yet (the SQPOLL thread takes the SQEs on
			 * its own schedule).  Wait until the kernel has taken
			 * them (ur_submit_taken: with SQPOLL; otherwise one
			 * more submit), and try again: what the SQ held is
			 * submitted, nothing of it dropped, and the cancel
			 * goes behind. */
			ur_submit_taken(pr->rg);
			sent = ur_send_cancel(u, r, asked);
		}
		if (sent) {
			/* A px_cancel's (or px_close's) ASYNC_CANCEL goes in
			 * now, also when r's own request is in the kernel
			 * already: the kernel marks a poll-armed request
			 * cancelled inside this submit, and it then performs
			 * nothing more.  Left for the leader (a dedicated
			 * one's kick, or a shared ring's leader busy with its
			 * callbacks), the cancel came after px_cancel had
			 * returned, and the read took the data, or the reset,
			 * that came meanwhile, though the application had
			 * cancelled it before those were sent: on
			 * uring-dedicated 145 of 150 reads took the byte the
			 * peer wrote right after px_cancel (a helper's review
			 * of 2026-12-07; TESTING.md, fixed problem 278).  A
			 * deadline's cancel returns to no application call
			 * (ur_cancel_submit): as before. */
			if (unsubmitted || !r->deadline_cancel)
				ur_cancel_submit(pr->rg, r);
			px__uring_kick(pr->rg);
			ur_wake_for(u, pr->rg, r, false);
		} else {
			pr->slist = PX_URING_CANCEL_STALLED;
			px_list_push_back(&u->cancel_stalled, &pr->slink);
			if (unsubmitted)
				ur_cancel_submit(pr->rg, r);
		}
	} else if (unsubmitted && !r->deadline_cancel) {
		/* Asked already, by its deadline, which did not wait: r's own
		 * SQE may still be in the ring, and px_cancel must not return
		 * before the kernel thread has looked its number up. */
		ur_submit_taken(pr->rg);
	}
	/* The submit was refused: r's SQE may still wait in the SQ. */
	if (unsubmitted && !r->deadline_cancel && !pr->voided &&
	    io_uring_sq_ready(&pr->rg->ring) &&
	    ur_void_unsubmitted(pr->rg, r))
		pr->voided = true;
	/* The request is in the kernel, its ASYNC_CANCEL refused. */
	if (asked && !pr->voided && pr->rg->submit_stuck)
		ur_sync_cancel(u, r);
	return PX_CANCEL_PENDING;
}

px_result *px__uring_dead_next(px_uring *u, px_uring_ring *rg,
			       px_list *started)
{
	if (!started)
		return NULL;
	for (px_link *l = px_list_first(started); l;
	     l = px_list_next(started, l)) {
		px_result *r = px_result_of(l);
		struct px_uring_priv *pr = ur_priv(r);

		if (pr->rg != rg)
			continue;
		/* No CQE comes any more: not its own, not its cancel's. */
		if (pr->cancel_sent) {
			pr->cancel_sent = false;
			rg->cancels_inflight--;
		}
		if (pr->held) {
			pr->held = false;  /* finished already */
			return r;
		}
		if (pr->phase == PX_URING_GATE && !pr->gate_ctl)
			ur_gate_leave(rg, pr, true);
		return ur_finish(u, r, pr->cancel_req ? -ECANCELED : -EBADF);
	}
	return NULL;
}

/*
 * The idle check (px_uring_check) for the provider's descriptors other
 * than the rings: the kick eventfd, the ready eventfd and the gate sets,
 * any of which the application may have closed with close(2) and taken
 * the number of for a file of its own, or replaced with dup2(2)
 * (TESTING.md, fixed problems 310 and 327-329).  A number that names
 * another file now (px__own_fd_is) is forgotten: never written, read,
 * registered or closed again, each mechanism off as when it could not
 * be made.  Two system calls a descriptor, here only; nothing per
 * operation.  Mutex held (the leader's idle check).
 */
void px__uring_check_own(px_uring *u)
{
	/* The kick: the READ in the ring holds the old eventfd, which
	 * nobody can write any more, and every kick wrote 8 bytes into the
	 * application's file while the leader slept on.  Off: the starts
	 * submit themselves, as when no eventfd could be made.  (The READ
	 * stays in the kernel until the ring goes; its CQE, should one
	 * come, leaves the kick off: px__uring_complete.) */
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];

		if (rg->kick_fd >= 0 && !px__own_fd_is(rg->kick_fd, &rg->kick_id)) {
			px__own_fd_drop_id(rg->kick_fd, &rg->kick_id);
			rg->kick_fd = -1;
			rg->kick = PX_URING_KICK_OFF;
		}
	}
	/* The ready eventfd: each prepare's drain read the application's
	 * eventfd (its count) and ready_fd's writes added to it, while the
	 * other processor's wait watched its number.  Forgotten for good
	 * (-2, as when it could not be made: ready_fd answers -1, and the
	 * dispatcher's 1 ms bound stands), and unregistered from every ring
	 * still ours (the kernel signalled the old eventfd at every CQE for
	 * nothing; a ring whose number is another's now is dead and left
	 * alone, as its number may name the application's ring). */
	if (u->ready_efd >= 0 && !px__own_fd_is(u->ready_efd, &u->ready_id)) {
		px__own_fd_drop_id(u->ready_efd, &u->ready_id);
		u->ready_efd = -2;
		for (unsigned i = 0; i < u->nrings; i++)
			if (!atomic_load_explicit(&u->rings[i].dead,
						  memory_order_relaxed))
				io_uring_unregister_eventfd(&u->rings[i].ring);
	}
	/* A gate set: ur_gate_fire's epoll_wait took the application's
	 * events and never saw the parked reads' interest (in the old set,
	 * which the POLL_ADD holds), so they waited for good, and each new
	 * EPOLL_CTL put one of our sockets into the application's instance.
	 * The ring gates no more (-2, as when epoll_create1 failed), and its
	 * parked reads go in as ordinary reads, in their queues' order.  A
	 * read whose EPOLL_CTL is in flight goes in when that CTL ends
	 * (ur_gate_ctl_done), and the POLL_ADD's CQE, if it ever comes, is
	 * taken once as before (ur_gate_fire, which finds no set). */
	bool issued = false;
	for (unsigned i = 0; i < u->nrings; i++) {
		px_uring_ring *rg = &u->rings[i];

		if (rg->gate_ep < 0 || px__own_fd_is(rg->gate_ep, &rg->gate_id))
			continue;
		px__own_fd_drop_id(rg->gate_ep, &rg->gate_id);
		rg->gate_ep = -2;
		for (px_link *l = u->started ? px_list_first(u->started) : NULL;
		     l && rg->parked; l = px_list_next(u->started, l)) {
			px_result *r = px_result_of(l);
			struct px_uring_priv *pr = ur_priv(r);

			if (pr->phase != PX_URING_GATE || pr->rg != rg ||
			    pr->gate_ctl)
				continue;
			ur_gate_leave(rg, pr, true);
			ur_issue_or_stall(u, r, rg);
			issued = true;
		}
	}
	/* (Into rg, or a lone leader's home ring: a leader blocked in the
	 * kernel on it submits them now.) */
	for (unsigned i = 0; issued && i < u->nrings; i++)
		px__uring_kick(&u->rings[i]);
}

/* px_close closed fd: whatever the number names next is unknown, so its
 * next start looks at it (getsockopt(SO_ACCEPTCONN): a listener's reads
 * go without POLL_FIRST).  Its ring stays counted in nfd, as for a
 * number closed with close(2), until the number is started on again. */
static void ur_closed(px_provider *p, int fd)
{
	px_uring *u = ur_of_prov(p);
	px_fdq_entry *fq = px_fdq_lookup(&u->fdq, fd);

	if (!fq)
		return;
	px_uring_fd *fe = px_container_of(fq, px_uring_fd, fq);
	fe->open_seen = false;
	fe->type_seen = false;
	fe->listener = false;
	fe->notsock = false;
	fe->fresh = false;
	fe->late_pays = false;
	fe->late_skip = 0;
	fe->seg = 0;
	fe->gate_rg = NULL;  /* closed: out of every epoll set */
	fe->peer = PX_PEER_UNKNOWN;
	ur_own_port(u, fe, 0);
}

/* io_uring_queue_exit, the ring's descriptor leaving the library's
 * record first (internal.h, px__is_own_fd).  A number that no longer
 * names the ring (closed behind the library's back, and maybe the
 * application's file since: px__own_fd_is) is not closed: liburing closes
 * ring_fd, which -1 turns into nothing (TESTING.md, fixed problem 310).
 * The ring's memory is unmapped all the same. */
static void ur_ring_exit(struct io_uring *ring)
{
	const px_own_id *id = &px_container_of(ring, px_uring_ring,
					       ring)->ring_id;
	bool ours = px__own_fd_is(ring->ring_fd, id);

	px__own_fd_drop_id(ring->ring_fd, id);
	if (!ours)
		ring->ring_fd = -1;
	io_uring_queue_exit(ring);
}

static void ur_destroy(px_provider *p)
{
	px_uring *u = ur_of_prov(p);

	for (unsigned i = 0; i < u->nrings; i++) {
		ur_ring_exit(&u->rings[i].ring);
		if (u->rings[i].kick_fd >= 0)
			px__own_close_id(u->rings[i].kick_fd,
					 &u->rings[i].kick_id);
		if (u->rings[i].gate_ep >= 0)
			px__own_close_id(u->rings[i].gate_ep,
					 &u->rings[i].gate_id);
	}
	if (u->ready_efd >= 0)
		px__own_close_id(u->ready_efd, &u->ready_id);
	px__fdq_fini(&u->fdq);
	free(u->ports);
	free(u->port_ring);
	free(u->rings);
	free(u);
}

static unsigned ur_pow2(unsigned v)
{
	unsigned n = 1;

	while (n < v && n < (1u << 31))
		n <<= 1;
	return n;
}

/* Every opcode a start, cancel or interrupt may put in the ring. */
static const uint8_t ur_opcodes[] = {
	IORING_OP_NOP, IORING_OP_READ, IORING_OP_WRITE, IORING_OP_SEND,
	IORING_OP_RECVMSG, IORING_OP_SENDMSG, IORING_OP_ACCEPT,
	IORING_OP_CONNECT, IORING_OP_ASYNC_CANCEL, IORING_OP_POLL_ADD,
	IORING_OP_READV, IORING_OP_WRITEV,
};

/* -ENOSYS when the kernel lacks an opcode or the probe itself, or the
 * error that kept the probe from being made (ENOMEM, EAGAIN...), which
 * says nothing about what the kernel offers.  (liburing's
 * io_uring_get_probe_ring answers NULL for all of them alike.) */
static int ur_probe(struct io_uring *ring)
{
	enum { NOPS = 256 };
	struct io_uring_probe *probe =
		calloc(1, sizeof(*probe) + NOPS * sizeof(probe->ops[0]));
	if (!probe)
		return -ENOMEM;
	int rc = io_uring_register_probe(ring, probe, NOPS);
	if (rc < 0) {
		free(probe);
		/* EINVAL: no IORING_REGISTER_PROBE (before 5.6). */
		return rc == -EINVAL ? -ENOSYS : rc;
	}
	rc = 0;
	for (size_t i = 0; i < sizeof(ur_opcodes); i++) {
		if (!io_uring_opcode_supported(probe, ur_opcodes[i]))
			rc = -ENOSYS;
	}
	free(probe);
	return rc;
}

/* Set the ring up, asking less of the kernel while it refuses: optional
 * flags go on EINVAL (older kernels), CQ size halves on ENOMEM (kernels
 * before 5.12 charge the rings to RLIMIT_MEMLOCK, 64 KiB by default), then
 * the SQ too, down to min_entries (the size asked for when the config
 * named one: that is kept). */
static int ur_setup(struct io_uring *ring, unsigned entries,
		    unsigned min_entries, unsigned flags, unsigned cq,
		    struct io_uring_params *prm)
{
	static const unsigned optional[] = {
		IORING_SETUP_COOP_TASKRUN, IORING_SETUP_SUBMIT_ALL,
	};
	size_t dropped = 0;
	int rc;

	for (;;) {
		memset(prm, 0, sizeof(*prm));
		prm->flags = flags;
		prm->cq_entries = cq;
		rc = io_uring_queue_init_params(entries, ring, prm);
		if (rc == 0)
			px__own_fd_id(ring->ring_fd,
				      &px_container_of(ring, px_uring_ring,
						       ring)->ring_id);
		if (rc == -EINVAL && dropped < sizeof(optional) / sizeof(optional[0]))
			flags &= ~optional[dropped++];
		else if (rc == -ENOMEM && cq > 2 * ur_pow2(entries))
			cq /= 2;
		else if (rc == -ENOMEM && entries / 2 >= min_entries)
			entries /= 2;
		else
			return rc;
	}
}

/* Whether the process runs under valgrind, which preloads its own
 * library into the program it runs (vgpreload_core-ARCH.so). */
static bool ur_under_valgrind(void)
{
	const char *pre = getenv("LD_PRELOAD");

	return pre && strstr(pre, "vgpreload_");
}

static int ur_create(const px_processor_config *cfg,
			   const px_proc_spec *spec, px_provider **out)
{
	const px_uring_settings *set = (const void *)spec->settings;
	unsigned entries = set->entries ? set->entries : PX_URING_DEFAULT_ENTRIES;
	struct io_uring_params prm;
	unsigned flags, sq, cq;
	int rc;

	/* Probe RWF_NOSIGNAL now, not in the first write's prepare. */
	(void)px__rwf_nosignal();
	if (entries > 32768)
		entries = 32768;  /* IORING_MAX_ENTRIES */
	sq = ur_pow2(entries);
	/* The CQ bounds what can be in flight (one CQE each, plus the cancels,
	 * at most sq at a time, and the interrupt); the SQ only what is
	 * started between two submits.  So the CQ is large even for a small
	 * SQ: a small max_aio starves an application whose pending reads wait
	 * for writes that cannot start. */
	if (cfg->max_aio) {
		/* In 64 bits: a max_aio within sq + 3 of UINT_MAX wrapped to
		 * a small CQ (ur_pow2 and IORING_SETUP_CLAMP cap it). */
		uint64_t want = (uint64_t)cfg->max_aio + sq + 3;
		cq = ur_pow2(want > (1u << 31) ? (1u << 31) : (unsigned)want);
	} else
		cq = PX_URING_DEFAULT_CQ;
	if (cq < 4 * sq)
		cq = 4 * sq;

	/* Rings: one per CPU by default (at most 4), so that two leading
	 * threads do not queue on one ring's submission lock (see the opening
	 * comment); one for a dedicated processor, whose single thread
	 * leads. */
	unsigned nrings = set->rings;
	if (!nrings) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		nrings = ncpu < 1 ? 1 : ncpu > 4 ? 4 : (unsigned)ncpu;
	}
	if (cfg->processor == PX_PROCESSOR_DEDICATED)
		nrings = 1;
	if (nrings > PX_URING_RINGS_MAX)
		nrings = PX_URING_RINGS_MAX;

	px_uring *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->serial = atomic_fetch_add_explicit(&ur_serials, 1,
					      memory_order_relaxed) + 1;
	u->rings = calloc(nrings, sizeof(*u->rings));
	if (!u->rings) {
		free(u);
		return -ENOMEM;
	}

	flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | IORING_SETUP_SUBMIT_ALL;
	/* With several rings a thread's send often completes another
	 * thread's read: without COOP_TASKRUN the kernel interrupts that
	 * thread (an IPI) to run it, with it the thread runs it at its next
	 * entry into the kernel or wake-up (at worst a timer tick later).
	 * Measured: 20 sessions, 2 threads, 8 KiB blocks, 528 against
	 * 463 MB/s (medians of 5). */
	if ((set->flags & PX_URING_COOP_TASKRUN) || nrings > 1)
		flags |= IORING_SETUP_COOP_TASKRUN;
	if (set->flags & PX_URING_SQPOLL)
		flags |= IORING_SETUP_SQPOLL;
	rc = ur_setup(&u->rings[0].ring, entries,
		      set->entries ? entries : PX_URING_MIN_ENTRIES, flags, cq, &prm);
	if (rc < 0) {
		/* ENOSYS: no io_uring; EPERM: kernel.io_uring_disabled (6.6)
		 * or seccomp; ENOMEM: out of memory or memlock, even at the
		 * smallest ring ur_setup would try: say where to look. */
		if (rc == -ENOMEM && spec->why_len) {
			struct rlimit ml;
			char lim[32] = "unlimited";

			if (getrlimit(RLIMIT_MEMLOCK, &ml) == 0 &&
			    ml.rlim_cur != RLIM_INFINITY)
				snprintf(lim, sizeof(lim), "%llu KiB",
					 (unsigned long long)ml.rlim_cur / 1024);
			snprintf(spec->why, spec->why_len,
				 "io_uring_setup: out of memory down to %u "
				 "entries; kernels before 5.12 charge the rings "
				 "to RLIMIT_MEMLOCK (%s here): raise it (ulimit "
				 "-l) or ask for a smaller ring=",
				 set->entries ? entries : PX_URING_MIN_ENTRIES,
				 lim);
		}
		free(u->rings);
		free(u);
		return rc;
	}
	u->nrings = 1;
	if (!(prm.features & IORING_FEAT_EXT_ARG)) {
		rc = -ENOSYS;
		goto fail;
	}
	rc = ur_probe(&u->rings[0].ring);
	if (rc < 0)
		goto fail;

	sq = u->rings[0].ring.sq.ring_entries;
	cq = u->rings[0].ring.cq.ring_entries;
	/* The others as the first turned out (flags the kernel took, CQ size
	 * it gave); any that cannot be had leaves fewer rings, not an
	 * error. */
	flags = u->rings[0].ring.flags;
	while (u->nrings < nrings) {
		px_uring_ring *rg = &u->rings[u->nrings];
		memset(&prm, 0, sizeof(prm));
		prm.flags = flags;
		prm.cq_entries = cq;
		if (io_uring_queue_init_params(sq, &rg->ring, &prm) < 0)
			break;
		px__own_fd_id(rg->ring.ring_fd, &rg->ring_id);
		if (rg->ring.cq.ring_entries < cq || rg->ring.sq.ring_entries < sq) {
			ur_ring_exit(&rg->ring);
			break;
		}
		u->nrings++;
	}
	for (unsigned i = 0; i < u->nrings; i++) {
		u->rings[i].index = i;
		u->rings[i].kick_fd = -1;
		u->rings[i].gate_ep = -1;
		u->rings[i].owner = u;
		/* Not with SQPOLL, whose kernel thread reads the EPOLL_CTL's
		 * event at a time of its own. */
		if (!(u->rings[0].ring.flags & IORING_SETUP_SQPOLL))
			u->rings[i].gate_min = set->gate1 ? set->gate1 - 1
							  : PX_URING_GATE_DEFAULT;
		px_list_init(&u->rings[i].late);
	}
	u->gate_peers = !set->gate1;
	u->pid = getpid();
	/* The kick, for a dedicated processor's ring (not with SQPOLL, whose
	 * kernel thread submits; without an eventfd, starts submit). */
	if (cfg->processor == PX_PROCESSOR_DEDICATED &&
	    !(u->rings[0].ring.flags & IORING_SETUP_SQPOLL))
		u->rings[0].kick_fd = px__own_fd_id(eventfd(0, EFD_CLOEXEC),
						    &u->rings[0].kick_id);

	u->sq_reserve = sq > PX_URING_SQ_RESERVE ? PX_URING_SQ_RESERVE : sq - 1;
	u->cancel_cap = sq;
	px_list_init(&u->stalled);
	px_list_init(&u->cancel_stalled);
	u->late_ok = !(u->rings[0].ring.flags & IORING_SETUP_SQPOLL);
	u->valgrind = ur_under_valgrind();
	u->ready_efd = -1;
	px__fdq_init(&u->fdq, sizeof(px_uring_fd));

	u->intr.ops = &px__intr_uring_ops;
	u->intr.fd = -1;
	u->intr.wait_mask = NULL;
	u->wait.ops = &px__wait_uring_ops;
	u->wait.intr = &u->intr;

	u->prov.ops = &px__provider_uring_ops;
	u->prov.wait = &u->wait;
	u->prov.ops_mask = PX_OPS_IO;
	u->prov.flags = PX_PF_START_ANY_THREAD;
	/* Any ring's CQ holds them all: everything may end up in one. */
	u->prov.max_aio = cfg->max_aio ? cfg->max_aio : cq - u->cancel_cap - 3;
	u->prov.max_leaders = u->nrings;
	u->prov.priv_size = sizeof(struct px_uring_priv);
	*out = &u->prov;
	return 0;

fail:
	ur_ring_exit(&u->rings[0].ring);
	free(u->rings);
	free(u);
	return rc;
}

const px_provider_ops px__provider_uring_ops = {
	.name = "uring",
	.create = ur_create,     /* ring, probe, wait and interrupt */
	.destroy = ur_destroy,   /* io_uring_queue_exit and the fd table */
	.start = ur_start,       /* fill an SQE, or queue behind the fd's head */
	.cancel = ur_cancel,     /* drop a queued op, or ASYNC_CANCEL */
	.closed = ur_closed,     /* px_close: look at the number again */
};
