/*
 * model.c - a seeded random driver checked against a model of the
 * promises, run by the fault program for each engine (argv[1]).
 *
 * One seed is one proactor (its max_aio drawn small: 1 to 8, or the
 * default) with an AF_UNIX stream socketpair, a TCP loopback pair, a pipe,
 * an AF_UNIX datagram socketpair (in half the seeds two unconnected
 * datagram sockets bound to abstract names instead, each write addressed
 * to the other's name) and a regular file, all with small buffers.  One
 * or two driver threads take random steps: stream reads and
 * writes (plain, write-all, vectored, with a deadline through
 * px_start_op), datagram reads and writes, file reads and writes at block
 * offsets, px_cancel, px_close, px_cancel then close(2) by the
 * application, shutdown(SHUT_WR) of a socket (SHUT_RD
 * of an AF_UNIX stream reader), posts,
 * one-shot and periodic timers and their cancels, accepts on a TCP
 * listener and connects of new sockets (or again of one whose connect
 * failed or succeeded) to it, to a port that refuses and to a listener
 * whose backlog is full, and px_handle_events
 * (zero, one or two loop threads besides, which in some seeds leave and
 * are replaced every few milliseconds; PX_MODEL_LOOPS and
 * PX_MODEL_DRIVERS set the numbers of loop threads, 0-8, and drivers,
 * 1-3).  Some operations get a step of
 * their own that their callback takes (a follow-up start, a cancel or a
 * px_close of its descriptor, a post), also while px_destroy delivers.
 * A seed ends either with px_cancel of every descriptor, every callback
 * awaited, then px_destroy, or with px_destroy straight away, or (drawn
 * apart, about one seed in six) with px_stop partway through, by driver
 * 0 or by the first callback after its step, the drivers going on to
 * the end before px_destroy (in half of those seeds the loop threads wait
 * without a bound, px_handle_events(px, -1), and do not come and go, so
 * that px_stop must wake them).  Now and then a step takes a px_stats
 * snapshot, or makes a start the manual refuses (a length 0, no or
 * empty buffers, too many buffers, an unknown flag, an offset on a
 * stream, a short address, a buffer on an accept, a NULL buffer, a
 * period 0, write-all on a read, a vectored datagram, an address on a
 * stream write, -1 buffers; a px_timer_cancel of an id never given) on
 * one of the model's descriptors whatever its state: -EINVAL (-ENOENT;
 * -EBADF on a number px_close has closed, which the library may have
 * taken for itself since), and no
 * callback.  A callback's step may be px_handle_events(px, 0), so that
 * callbacks run nested.  In a third of the seeds (PX_MODEL_RACER=0/1:
 * none, all) the racer, a thread of its own, calls in without the
 * model's lock: px_cancel of the model's descriptor numbers, posts,
 * timers, px_stats, and reads and writes on a stream pair of its own,
 * checked apart (racer_check, racer_stream_check).
 *
 * The model, checked in each callback and after px_destroy:
 *   - every start that returned 0 gets exactly one callback, with its own
 *     op, descriptor and user pointer, bytes <= its length; a start fails
 *     only as the manual allows (-EBADF on a descriptor px_close is
 *     closing, -ESHUTDOWN from callbacks that px_destroy runs,
 *     -EOPNOTSUPP for vectored file operations on POSIX AIO);
 *   - ECANCELED only for an operation started before a px_cancel or
 *     px_close of its descriptor, or during px_destroy (any operation on
 *     a descriptor, in a seed with the racer); ETIMEDOUT only
 *     with a deadline, and not before it; end of stream only once the
 *     writer shut down or closed its end; EPIPE and ECONNRESET only on a
 *     channel one of whose ends was shut down or closed; a write-all
 *     with no error moved every byte;
 *   - streams: each channel's bytes, as the reads report them in start
 *     order and then what is left in the descriptor after px_destroy, are
 *     exactly the prefixes the writes report, in start order (nothing
 *     lost, duplicated or out of order, whatever was cancelled, timed out
 *     or destroyed); a channel whose reader was closed, or a TCP pair one
 *     of whose ends was, only a prefix of that;
 *   - datagrams: each arrives whole and once, in start order, exactly the
 *     writes that reported success (a write that reports ECANCELED or
 *     ETIMEDOUT was not sent); between named sockets a read reports the
 *     writer's name and a write the name it was given;
 *   - connects: 0 to the listener, ECONNREFUSED to the refusing port,
 *     EISCONN on a socket already connected, -EALREADY at the start while
 *     its last connect is pending; accepts: a blocking, close-on-exec
 *     socket whose peer (c->addr) is one of the model's connecting
 *     sockets, and every connection whose connect completed with 0 taken
 *     exactly once, by an accept or from the backlog after px_destroy
 *     (unless the listener was closed or shut down);
 *   - the file: a read of blocks no write is in flight on gives their
 *     last written contents (a write that ended with an error leaves its
 *     blocks unknown until the next one);
 *   - a one-shot timer fires not before its delay, and ends with
 *     ECANCELED exactly when px_timer_cancel returned 0 (or px_destroy
 *     cancelled it); a periodic timer ends with one ECANCELED;
 *   - px_close's callback comes after every callback of an operation
 *     started on its descriptor before it, with error 0;
 *   - each completion echoes its start: buf (NULL for a vectored one),
 *     len, iov and iovcnt, a file operation's offset, a timer's id; a
 *     one-shot timer's deadline (c->offset) not before its delay ends;
 *     a periodic timer's callbacks report each deadline once, in order
 *     (the first not before its delay, each next one period on), at
 *     least one per callback, none before it is due;
 *   - after px_stop returns, every start (post, timer) fails with
 *     -ESHUTDOWN, px_handle_events returns -ESHUTDOWN, and no more
 *     callbacks run before px_destroy than the threads that were in
 *     px_handle_events could have had under way;
 *   - every px_stats snapshot: per processor started = completed +
 *     cancelled + timed_out + in_flight, the sums those of the
 *     processors, started the number of I/O starts that returned 0, in
 *     flight no more than the model has seen no callback of, and no
 *     total below the last snapshot's; after the drain, nothing in
 *     flight.
 *
 * The suite runs a few fixed seeds (model_random_seeds, well under a
 * second per engine).  Any other seed or range runs with
 *
 *   PX_MODEL_SEED=N [PX_MODEL_COUNT=K] [PX_MODEL_STEPS=S] [PX_MODEL_TRACE=1] \
 *     build/test/fault 'ENGINE' model_random_seeds
 *
 * A failure names its seed and the command that runs it again.  With loop
 * threads or two drivers (the seed chooses) a replay takes the same steps
 * but not the same interleaving.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "model.h"

enum {
	M_MAX_OPS = 3000,
	M_MAX_FDS = 40,
	M_MAX_CONNS = 12,       /* connecting sockets per seed */
	M_MAX_CH = 24,
	M_BLK = 512,            /* file block */
	M_NBLK = 16,
	M_DGRAM_MAX = 600,
	M_DEFAULT_SEEDS = 4,
	M_DEFAULT_STEPS = 250,
	M_MAX_LOOPS = 8,        /* PX_MODEL_LOOPS at most */
	M_MAX_DRIVERS = 3,      /* PX_MODEL_DRIVERS at most */
};

/* Thread counts from the environment (-1: the seed draws them), read once
 * by model_random_seeds. */
static int g_env_loops = -1, g_env_drivers = -1;
/* PX_MODEL_RACER: 1 runs the racer (below) in every seed, 0 in none; -1:
 * the seed draws it. */
static int g_env_racer = -1;

/* The racer: in a third of the seeds (drawn apart from the other draws) a
 * thread of its own calls into the library without the model's lock,
 * beside the drivers, loop threads and callbacks: px_cancel of the
 * numbers the model's descriptors have or had (px_close may be closing
 * one at that very moment, or have closed it and a new socket taken the
 * number), posts, one-shot timers and their cancels, px_stats.  Every
 * operation of a descriptor may then end with ECANCELED (the model
 * cannot tell which came before which cancel); all the other checks
 * stay: bytes in order per channel, whatever a cancel cut short, every
 * connection a connect completed taken exactly once, one callback per
 * start.  Its own starts are held to exactly one callback each (checked
 * after px_destroy), a timer's ECANCELED to a px_timer_cancel that
 * returned 0 or to px_destroy, -ESHUTDOWN only once px_stop was called
 * and always after it returned; each px_stats snapshot balances per
 * processor and no total goes below the racer's last one. */
enum { R_MAX_TOK = 1200, R_MAX_SOPS = 600 };
typedef struct rtok {
	int kind;               /* MK_POST, MK_TIMER */
	int64_t id;             /* timer */
	uint64_t due_ns;
	int cancel_rc;          /* 1: not cancelled */
	atomic_int calls;
	atomic_int error;
	atomic_int live_cancel; /* ECANCELED before px_destroy */
	_Atomic int64_t cb_id;  /* the completion's timer_id */
} rtok;
static struct {
	bool on;
	pthread_t th;
	atomic_int stop;
	uint64_t rng;
	atomic_int fds[M_MAX_FDS];      /* numbers the model's descriptors
	                                   had, -1 none */
	atomic_int nfds;
	rtok tok[R_MAX_TOK];
	int ntok;
	int ncancels;
	struct px_stats st_prev;
	bool st_have;
	/* its own AF_UNIX stream pair, fd[0] written, fd[1] read, by
	 * the racer alone (nobody cancels or closes them before
	 * px_destroy): its bytes, in read start order and then what is
	 * left, must be the prefixes its writes report, in start order */
	int sfd[2];
	int snum[2];            /* their numbers (sfd[0] is -1 once
	                           px_close has it) */
	struct rsop {
		bool write, all;
		uint8_t *buf;
		size_t len;
		uint64_t pos;           /* write: where its bytes start in
		                           the pattern */
		atomic_int calls, error, late, eof_ok;
		atomic_size_t bytes;
	} sop[R_MAX_SOPS];
	int nsop;
	uint64_t wpos;
	atomic_uint_fast64_t io_started;        /* counted before the start */
	atomic_uint_fast64_t io_done;           /* callbacks */
	atomic_int wclosed;     /* px_close of fd[0] called */
	atomic_int ccalls;      /* its callbacks */
} g_rc;

enum { MK_READ = 1, MK_WRITE, MK_DREAD, MK_DWRITE, MK_FREAD, MK_FWRITE,
       MK_POST, MK_TIMER, MK_CLOSE, MK_ACCEPT, MK_CONNECT, MK_BAD };

static const char *const kind_name[] = {
	"?", "read", "write", "dread", "dwrite", "fread", "fwrite", "post",
	"timer", "close", "accept", "connect", "bad input"
};

/* Where a connect goes: the seed's listener, a bound port nobody listens
 * on (refused), a listener whose backlog is full (SYNs dropped: it stays
 * pending, or completes if the kernel found room after all). */
enum { T_LIVE, T_REFUSED, T_FULL };
static const char *const target_name[] = { "listener", "refused", "full" };
/* What the model knows of a connecting socket. */
enum { CS_FRESH, CS_PENDING, CS_CONNECTED, CS_FAILED, CS_UNKNOWN };

typedef struct mop {
	int id;
	int kind;
	px_op op;
	int fdi;                /* index in g.fd, -1 */
	int fd;
	int ch;                 /* channel, -1 */
	bool vec, all, timed, periodic;
	uint64_t timeout_ns;
	uint64_t start_ns;
	size_t len;
	uint8_t *buf;
	struct iovec iov[4];
	int iovcnt;
	uint64_t off;
	int blk0, nblk;
	int rc;                 /* what the start returned */
	int calls;              /* final callbacks (a periodic timer's
	                           expiries are counted apart) */
	int expiries;
	int cb_seq;
	int error;
	size_t bytes;
	int act;                /* a step its callback takes: 0 none */
	int64_t timer_id;
	int cancel_rc;          /* px_timer_cancel's return; 1: not called */
	uint64_t due_ns;
	uint64_t period_ns;     /* periodic timer */
	uint64_t next_off;      /* periodic timer: the deadline its next
	                           callback reports first; 0 before the first */
	int thread;             /* which driver started it (0-2) or callback (3) */
	int target;             /* connect: T_* */
	int prev_state;         /* connect: its socket's CS_* at the start */
	bool loose;             /* connect: started while the model still saw
	                           the last one pending: any outcome */
	bool zombie;            /* started on a descriptor px_close was
	                           closing and not refused: px_close(3) refuses
	                           starts until its callback is queued, and
	                           this one came after that (the number closed,
	                           perhaps taken by a new socket since): any
	                           outcome, but once */
} mop;

typedef struct mfd {
	int fd;
	int wch, rch;           /* channel written / read through it, -1 */
	int peer;               /* the other end, -1 */
	int kind;               /* 's' stream, 'd' datagram, 'f' file */
	bool tcp;
	bool closing;           /* px_close called */
	int close_op;
	bool shut_wr, shut_rd;
	int cancel_mark;        /* ops with id below it may be cancelled */
	/* 'c', a connecting socket: */
	int cstate;             /* CS_* */
	bool loose;             /* a connect outcome is not known */
	int port;               /* its local port */
	int live_tries;         /* connects to the listener started */
	bool live_ok;           /* one of them completed with 0 */
	int accepted;           /* its connections accepted (px_accept or the
	                           drain after px_destroy) */
	/* 'd' in a seed with named datagram sockets (g.dg_named): the
	 * abstract name it is bound to, which its peer writes to */
	struct sockaddr_un un;
	socklen_t unlen;
} mfd;

typedef struct mch {
	int wfdi, rfdi;
	bool dgram, tcp;
	bool eof_ok;            /* writer shut down or closing */
	bool broken;            /* a close or a shutdown: EPIPE, ECONNRESET */
	bool inexact;           /* only a prefix must arrive */
	uint8_t *drain;         /* stream: left in the descriptor after destroy */
	size_t ndrain;
	int dg_next;            /* datagram: index of the next write expected */
} mch;

static struct {
	pthread_mutex_t mu;     /* recursive: the model's state */
	px_proactor *px;
	uint64_t seed;
	mop *op[M_MAX_OPS];
	int nops;
	mfd fd[M_MAX_FDS];
	int nfd;
	mch ch[M_MAX_CH];
	int nch;
	int file_fdi;
	int lfdi;               /* the listener ('l'), -1 */
	int lguard;             /* bound to its port, so that it stays ours */
	int refused_fd;         /* bound, not listening */
	int full_fd, full_fill; /* backlog 0, one connection in it */
	struct sockaddr_in taddr[3];    /* T_* */
	int nconn;
	bool net;               /* accept and connect are done (not POSIX
	                           AIO alone) */
	int blk_w[M_NBLK];      /* writes in flight on the block */
	int blk_r[M_NBLK];      /* reads in flight on the block */
	int blk_ver[M_NBLK];    /* id of its last write, 0 zeros, -1 unknown */
	int cbseq;
	bool destroying, draining;
	unsigned max_aio;
	int nloops;
	int ndrivers;
	int steps;
	bool vec_file;
	bool trace;
	atomic_int bad;
	char msg[1536];
	atomic_int loop_stop;
	atomic_int loop_err;
	uint64_t cb_rng;        /* callbacks' steps, under mu */
	/* A seed that ends with px_stop: by driver 0 at step stop_step, or
	 * (stop_in_cb) by the first callback after it; then the drivers go
	 * on (every start must fail with -ESHUTDOWN, cancels and closes
	 * still work) and px_destroy delivers what is left. */
	bool stop_mode, stop_in_cb, stop_armed;
	/* The datagram pair is two unconnected AF_UNIX sockets bound to
	 * abstract names, each write addressed to the other's name, in
	 * place of a connected socketpair (drawn apart, as stop_mode). */
	bool dg_named;
	/* stop_mode: the loop threads wait without a bound
	 * (px_handle_events(px, -1)), so px_stop must wake them */
	bool loop_forever;
	int stop_step;
	atomic_int stop_called; /* px_stop is being or was called */
	atomic_int stop_done;   /* px_stop returned */
	bool stopped;           /* px_stop returned (under mu) */
	int nested;             /* px_handle_events calls from callbacks
	                           under way (do_nested) */
	int cbs_after_stop;     /* callbacks entered after that, before
	                           px_destroy */
	struct px_stats st_prev; /* the last mid-run px_stats snapshot */
	bool st_have;
} g;

/* ------------------------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static unsigned rn(uint64_t *s, unsigned n) { return (unsigned)(rnd(s) % n); }

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
	if (atomic_fetch_add(&g.bad, 1))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g.msg, sizeof g.msg, fmt, ap);
	va_end(ap);
	if (g.trace)
		printf("model: BAD: %s\n", g.msg);
}

static void lock(void) { pthread_mutex_lock(&g.mu); }
static void unlock(void) { pthread_mutex_unlock(&g.mu); }

/* The bytes of write id at pos. */
static void fill(mop *o)
{
	h_pattern(o->buf, o->len, (uint32_t)(g.seed * 31u) ^ (uint32_t)o->id *
		  2654435761u, 0);
	if (o->kind == MK_DWRITE) {
		memcpy(o->buf, &o->id, sizeof o->id);
		uint32_t l = (uint32_t)o->len;
		memcpy(o->buf + 4, &l, 4);
	}
}

static uint8_t pat_at(int id, size_t pos)
{
	uint8_t b;
	h_pattern(&b, 1, (uint32_t)(g.seed * 31u) ^ (uint32_t)id * 2654435761u,
		  pos);
	return b;
}

static mop *new_op(int kind, int fdi, size_t len)
{
	if (g.nops >= M_MAX_OPS)
		return NULL;
	mop *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->id = g.nops + 1;
	g.op[g.nops++] = o;
	o->kind = kind;
	o->fdi = fdi;
	o->fd = fdi >= 0 ? g.fd[fdi].fd : -1;
	o->ch = -1;
	o->len = len;
	o->cancel_rc = 1;
	o->rc = 1;
	if (len) {
		o->buf = calloc(1, len);
		if (!o->buf)
			o->len = 0;
	}
	return o;
}

/* Cut o->buf into 1..4 pieces (one may be empty, not all). */
static void cut(mop *o, uint64_t *r)
{
	int cnt = 1 + (int)rn(r, 4);
	size_t pos = 0;
	for (int k = 0; k < cnt; k++) {
		size_t piece = k == cnt - 1 ? o->len - pos
					    : rn(r, (unsigned)(o->len - pos + 1));
		o->iov[k].iov_base = o->buf + pos;
		o->iov[k].iov_len = piece;
		pos += piece;
	}
	o->iovcnt = cnt;
	o->vec = true;
}

static void trace_start(const mop *o, const char *how)
{
	if (!g.trace)
		return;
	printf("model: #%d %s%s%s%s fd %d len %zu off %" PRIu64 " -> %d (%s)%s\n",
	       o->id, kind_name[o->kind], o->vec ? " vec" : "",
	       o->all ? " all" : "", o->timed ? " timed" : "", o->fd, o->len,
	       o->off, o->rc, how, o->act ? " +act" : "");
}

/* ------------------------------------------------------------------ */
/* Callbacks                                                            */
/* ------------------------------------------------------------------ */

static void cb(const px_completion *c);
static void step(uint64_t *r, int who, mop *self);
static bool can_cancel(const mop *o);
static void do_stop(const char *who);

/* An error any operation may end with here: cancelled, timed out (not
 * early), or EBADF for one started on a descriptor px_close was closing
 * (its close may have been made before the start reached the engine). */
static bool common_error(const mop *o, int e)
{
	if (e == ECANCELED && can_cancel(o))
		return true;
	if (e == EBADF && o->fdi >= 0 && o->id > g.fd[o->fdi].close_op &&
	    g.fd[o->fdi].closing)
		return true;
	if (e == ETIMEDOUT && o->timed) {
		uint64_t now = h_now_ns();
		if (now < o->start_ns + o->timeout_ns)
			bad("#%d %s: ETIMEDOUT after %" PRIu64 " ns, deadline %"
			    PRIu64 " ns", o->id, kind_name[o->kind],
			    now - o->start_ns, o->timeout_ns);
		return true;
	}
	return false;
}

static bool can_cancel(const mop *o)
{
	if (g.destroying)
		return true;
	if (g_rc.on && o->fdi >= 0)
		return true;            /* the racer's px_cancel, at any time */
	return o->fdi >= 0 && o->id < g.fd[o->fdi].cancel_mark;
}

static void check_stream(mop *o, const px_completion *c)
{
	mch *ch = &g.ch[o->ch];
	int e = c->error;
	if (e == 0) {
		if (o->kind == MK_READ && c->bytes == 0 && !ch->eof_ok)
			bad("#%d read: end of stream (0 bytes, no error) but the "
			    "writer neither shut down nor closed", o->id);
		if (o->kind == MK_WRITE && o->all && c->bytes != o->len)
			bad("#%d write-all: error 0 with %zu of %zu bytes", o->id,
			    c->bytes, o->len);
		if (o->kind == MK_WRITE && !o->all && c->bytes == 0)
			bad("#%d write: error 0 with 0 bytes", o->id);
		return;
	}
	if (common_error(o, e))
		return;
	if ((e == EPIPE || e == ECONNRESET) && ch->broken)
		return;
	bad("#%d %s%s%s on fd %d: unexpected error %d (%s), %zu bytes; "
	    "cancel mark %d", o->id, kind_name[o->kind], o->vec ? " vec" : "",
	    o->all ? " all" : "", o->fd, e, strerror(e), c->bytes,
	    g.fd[o->fdi].cancel_mark);
}

static void check_file_read(mop *o, const px_completion *c)
{
	if (c->error == 0 && c->bytes != o->len) {
		bad("#%d file read: %zu of %zu bytes within the file", o->id,
		    c->bytes, o->len);
		return;
	}
	if (c->error) {
		if (!common_error(o, c->error))
			bad("#%d file read: unexpected error %d (%s)", o->id,
			    c->error, strerror(c->error));
		return;
	}
	for (int b = 0; b < o->nblk; b++) {
		int v = g.blk_ver[o->blk0 + b];
		if (v < 0)
			continue;
		const uint8_t *got = o->buf + (size_t)b * M_BLK;
		const mop *w = v ? g.op[v - 1] : NULL;
		for (size_t i = 0; i < M_BLK; i++) {
			uint8_t want = 0;
			if (w) {
				size_t pos = (size_t)(o->blk0 + b - w->blk0) *
					     M_BLK + i;
				want = pat_at(w->id, pos);
			}
			if (got[i] != want) {
				bad("#%d file read: block %d byte %zu is %02x, "
				    "want %02x (version #%d)", o->id,
				    o->blk0 + b, i, got[i], want, v);
				return;
			}
		}
	}
}

static void check_file_write(mop *o, const px_completion *c)
{
	bool whole = c->error == 0 && c->bytes == o->len;
	if (c->error == 0 && !whole)
		bad("#%d file write: %zu of %zu bytes, no error", o->id,
		    c->bytes, o->len);
	if (c->error && !common_error(o, c->error))
		bad("#%d file write: unexpected error %d (%s)", o->id, c->error,
		    strerror(c->error));
	for (int b = 0; b < o->nblk; b++)
		g.blk_ver[o->blk0 + b] = whole ? o->id : -1;
}

static void check_dgram_read(mop *o, const px_completion *c)
{
	mch *ch = &g.ch[o->ch];
	if (c->error) {
		if (!common_error(o, c->error) &&
		    !((c->error == EPIPE || c->error == ECONNRESET) &&
		      ch->broken))
			bad("#%d datagram read: unexpected error %d (%s)", o->id,
			    c->error, strerror(c->error));
		if (c->bytes)
			bad("#%d datagram read: error %d with %zu bytes", o->id,
			    c->error, c->bytes);
		return;
	}
	if (c->bytes == 0) {
		if (!ch->eof_ok)
			bad("#%d datagram read: 0 bytes with no shutdown", o->id);
		return;
	}
	/* named: the sender's name, as getsockname gives it */
	const mfd *w = &g.fd[ch->wfdi];
	if (w->unlen && (c->addrlen != w->unlen ||
			 memcmp(&c->addr, &w->un, w->unlen) != 0))
		bad("#%d datagram read: sender address of length %u (family %d),"
		    " not the writer's name (length %u)", o->id,
		    (unsigned)c->addrlen, c->addr.ss_family, (unsigned)w->unlen);
}

static int addr_port(const struct sockaddr_storage *a, socklen_t len)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)a;
	if (len < sizeof *in || in->sin_family != AF_INET)
		return -1;
	return ntohs(in->sin_port);
}

/* A connection from port was accepted (how: by px_accept #id, or 0 the
 * drain after px_destroy): it must be one a connect of the model made to
 * the listener, and taken once. */
static int add_fd(int fd, int kind, bool tcp);
static void add_ch(int wfdi, int rfdi, bool dgram, bool tcp);

static mfd *note_accepted(int port, int id)
{
	mfd *f = NULL;
	for (int i = 0; i < g.nfd; i++)
		if (g.fd[i].live_tries && g.fd[i].port == port)
			f = &g.fd[i];
	if (!f) {
		bad("%s%d: accepted a connection from port %d, which no connect "
		    "to the listener came from", id ? "accept #" : "drain ",
		    id, port);
		return NULL;
	}
	if (++f->accepted > 1)
		bad("%s%d: the connection from port %d (fd %d) accepted %d times",
		    id ? "accept #" : "drain ", id, port, f->fd, f->accepted);
	return f;
}

static void check_accept(mop *o, const px_completion *c)
{
	if (c->error) {
		if (c->new_fd != -1)
			bad("#%d accept: error %d with new_fd %d", o->id, c->error,
			    c->new_fd);
		if (!common_error(o, c->error) &&
		    !(c->error == EINVAL && g.fd[o->fdi].shut_rd))
			bad("#%d accept: unexpected error %d (%s)", o->id,
			    c->error, strerror(c->error));
		return;
	}
	int nfd = c->new_fd;
	if (nfd < 0) {
		bad("#%d accept: error 0 with new_fd %d", o->id, nfd);
		return;
	}
	int fl = fcntl(nfd, F_GETFL), fdfl = fcntl(nfd, F_GETFD);
	if (fl < 0 || fdfl < 0 || (fl & O_NONBLOCK) || !(fdfl & FD_CLOEXEC))
		bad("#%d accept: new_fd %d: flags %#x, descriptor flags %#x "
		    "(blocking and close-on-exec wanted)", o->id, nfd, fl, fdfl);
	struct sockaddr_storage pa;
	socklen_t pl = sizeof pa;
	int port = addr_port(&c->addr, c->addrlen);
	if (getpeername(nfd, (struct sockaddr *)&pa, &pl) == 0 &&
	    addr_port(&pa, pl) != port)
		bad("#%d accept: c->addr says port %d, the socket's peer is "
		    "port %d", o->id, port, addr_port(&pa, pl));
	mfd *cf = note_accepted(port, o->id);
	/* Now and then the connection becomes a stream pair of the model:
	 * its client end, connected and with nothing of its own pending, and
	 * the accepted socket, used at once from this callback on. */
	bool busy = true;
	if (cf && cf->cstate == CS_CONNECTED && !cf->loose && !cf->closing &&
	    cf->live_ok && g.nfd < M_MAX_FDS && g.nch + 2 <= M_MAX_CH &&
	    rn(&g.cb_rng, 2)) {
		busy = false;
		for (int i = 0; i < g.nops; i++)
			if (g.op[i]->fd == cf->fd && g.op[i]->rc == 0 &&
			    !g.op[i]->calls)
				busy = true;
	}
	if (busy) {
		close(nfd);
		return;
	}
	int a = (int)(cf - g.fd);
	cf->kind = 's';
	cf->tcp = true;
	int one = 1, sz = 4096;
	setsockopt(nfd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	setsockopt(cf->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	setsockopt(nfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(cf->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int b = add_fd(nfd, 's', true);
	if (b < 0)
		return;
	g.fd[a].peer = b;
	g.fd[b].peer = a;
	add_ch(a, b, false, true);
	add_ch(b, a, false, true);
	if (g.trace)
		printf("model: channels %d, %d: fd %d <-> fd %d (accepted)\n",
		       g.nch - 2, g.nch - 1, cf->fd, nfd);
}

static void check_connect(mop *o, const px_completion *c)
{
	mfd *f = &g.fd[o->fdi];
	int e = c->error;
	bool lclosed = g.lfdi >= 0 && (g.fd[g.lfdi].closing ||
					g.fd[g.lfdi].shut_rd);
	bool ok;
	if (o->loose)
		ok = e == 0 || e == EISCONN || e == ECONNREFUSED ||
		     e == EALREADY || e == ECONNABORTED || e == ECONNRESET;
	else if (o->prev_state == CS_CONNECTED)
		ok = e == EISCONN;
	else if (o->target == T_LIVE)
		ok = e == 0 || (lclosed && (e == ECONNREFUSED || e == ECONNRESET));
	else if (o->target == T_REFUSED)
		ok = e == ECONNREFUSED;
	else
		ok = e == 0;    /* the full listener had room after all */
	if (!ok && !common_error(o, e))
		bad("#%d connect of fd %d (%s, to the %s) : unexpected error %d "
		    "(%s)", o->id, o->fd,
		    o->prev_state == CS_CONNECTED ? "connected" :
		    o->prev_state == CS_FAILED ? "failed before" : "new",
		    target_name[o->target], e, strerror(e));
	if (c->addrlen && addr_port(&c->addr, c->addrlen) !=
			  ntohs(g.taddr[o->target].sin_port))
		bad("#%d connect: c->addr says port %d, started to %d", o->id,
		    addr_port(&c->addr, c->addrlen),
		    ntohs(g.taddr[o->target].sin_port));
	if (e == 0 && o->target == T_LIVE && !o->loose &&
	    o->prev_state != CS_CONNECTED)
		f->live_ok = true;
	if (f->loose)
		f->cstate = CS_UNKNOWN;
	else if (e == 0 || e == EISCONN)
		f->cstate = CS_CONNECTED;
	else if (e == ECONNREFUSED)
		f->cstate = CS_FAILED;
	else
		f->cstate = CS_UNKNOWN;
}

static void cb(const px_completion *c)
{
	mop *o = c->user;
	lock();
	/* px_stop: each thread in px_handle_events finishes the callback it
	 * runs, and takes no other (px_handle_events(3)); only a driver
	 * (no loop threads) or the loop threads run them. */
	if (g.stopped && !g.destroying &&
	    ++g.cbs_after_stop > (g.nloops ? g.nloops : 1))
		bad("#%d %s: callback %d after px_stop returned, with %d loop "
		    "threads", o->id, kind_name[o->kind], g.cbs_after_stop,
		    g.nloops);
	if (o->kind == MK_TIMER && c->timer_id != o->timer_id)
		bad("#%d timer: completion says id %" PRId64 ", started as %"
		    PRId64, o->id, c->timer_id, o->timer_id);
	if (o->kind == MK_TIMER && o->periodic && c->error == 0) {
		o->expiries++;
		if (g.trace)
			printf("model: #%d periodic expiry %d (id %" PRId64 ", %zu, "
			       "deadline %" PRIu64 ")\n", o->id, o->expiries,
			       c->timer_id, c->bytes, c->offset);
		if (o->calls)
			bad("#%d periodic timer: an expiry after its end", o->id);
		/* the deadlines are the first plus whole periods, each
		 * reported once, in order, none early (px_timer_periodic(3)) */
		uint64_t now = h_now_ns();
		if (c->bytes < 1)
			bad("#%d periodic timer: a callback reports %zu expiries",
			    o->id, c->bytes);
		else if (o->next_off ? c->offset != o->next_off
				     : c->offset < o->due_ns)
			bad("#%d periodic timer: callback %d reports deadline %"
			    PRIu64 ", want %s%" PRIu64, o->id, o->expiries,
			    c->offset, o->next_off ? "" : "at least ",
			    o->next_off ? o->next_off : o->due_ns);
		else if (now < c->offset + (c->bytes - 1) * o->period_ns)
			bad("#%d periodic timer: %zu expiries reported %" PRIu64
			    " ns before the last is due", o->id, c->bytes,
			    c->offset + (c->bytes - 1) * o->period_ns - now);
		o->next_off = c->offset + c->bytes * o->period_ns;
		unlock();
		return;
	}
	if (++o->calls > 1) {
		bad("#%d %s on fd %d: called back %d times (error %d)", o->id,
		    kind_name[o->kind], o->fd, o->calls, c->error);
		unlock();
		return;
	}
	o->cb_seq = ++g.cbseq;
	o->error = c->error;
	o->bytes = c->bytes;
	if (g.trace)
		printf("model: #%d %s fd %d -> error %d bytes %zu\n", o->id,
		       kind_name[o->kind], o->fd, c->error, c->bytes);
	if (c->op != o->op || c->user != o)
		bad("#%d: completion says op %d, started as %d", o->id, c->op,
		    o->op);
	if (o->fdi >= 0 && c->fd != o->fd)
		bad("#%d: completion says fd %d, started on %d", o->id, c->fd,
		    o->fd);
	if (c->bytes > o->len)
		bad("#%d %s: %zu bytes of %zu", o->id, kind_name[o->kind],
		    c->bytes, o->len);
	/* what the start gave, echoed (px_completion's fields) */
	if (o->kind != MK_CLOSE && o->kind != MK_TIMER &&
	    (c->buf != (o->vec || !o->len ? NULL : (void *)o->buf) ||
	     c->len != o->len || c->iov != (o->vec ? o->iov : NULL) ||
	     c->iovcnt != (o->vec ? o->iovcnt : 0)))
		bad("#%d %s%s: completion says buf %p len %zu iov %p/%d, "
		    "started with %p %zu %p/%d", o->id, kind_name[o->kind],
		    o->vec ? " vec" : "", c->buf, c->len, (void *)c->iov,
		    c->iovcnt, o->vec ? NULL : (void *)o->buf, o->len,
		    o->vec ? (void *)o->iov : NULL, o->vec ? o->iovcnt : 0);
	if ((o->kind == MK_FREAD || o->kind == MK_FWRITE) && c->offset != o->off)
		bad("#%d %s: completion says offset %" PRIu64 ", started at %"
		    PRIu64, o->id, kind_name[o->kind], c->offset, o->off);
	if (o->kind == MK_TIMER && !o->periodic && c->offset < o->due_ns)
		bad("#%d timer: completion says deadline %" PRIu64 ", %" PRIu64
		    " ns before the delay ends", o->id, c->offset,
		    o->due_ns - c->offset);
	if (o->zombie) {
		for (int b = 0; b < o->nblk; b++) {
			if (o->kind == MK_FREAD)
				g.blk_r[o->blk0 + b]--;
			if (o->kind == MK_FWRITE) {
				g.blk_w[o->blk0 + b]--;
				g.blk_ver[o->blk0 + b] = -1;
			}
		}
		if (c->op == PX_OP_ACCEPT && c->new_fd >= 0)
			close(c->new_fd);
		goto act;
	}
	switch (o->kind) {
	case MK_READ:
	case MK_WRITE:
		check_stream(o, c);
		break;
	case MK_DREAD:
		check_dgram_read(o, c);
		break;
	case MK_DWRITE:
		if (g.fd[o->fdi].unlen && g.fd[o->fdi].peer >= 0) {
			/* the destination given, echoed */
			const mfd *to = &g.fd[g.fd[o->fdi].peer];
			if (c->addrlen != to->unlen ||
			    memcmp(&c->addr, &to->un, to->unlen) != 0)
				bad("#%d datagram write: the completion's address "
				    "(length %u) is not the one given (length %u)",
				    o->id, (unsigned)c->addrlen,
				    (unsigned)to->unlen);
		}
		if (c->error == 0 && c->bytes != o->len)
			bad("#%d datagram write: %zu of %zu bytes", o->id,
			    c->bytes, o->len);
		else if (c->error && !common_error(o, c->error) &&
			 !((c->error == EPIPE || c->error == ECONNRESET ||
			    c->error == ECONNREFUSED || c->error == ENOTCONN) &&
			   g.ch[o->ch].broken))
			bad("#%d datagram write: unexpected error %d (%s)",
			    o->id, c->error, strerror(c->error));
		break;
	case MK_FREAD:
		check_file_read(o, c);
		for (int b = 0; b < o->nblk; b++)
			g.blk_r[o->blk0 + b]--;
		break;
	case MK_FWRITE:
		check_file_write(o, c);
		for (int b = 0; b < o->nblk; b++)
			g.blk_w[o->blk0 + b]--;
		break;
	case MK_POST:
		if (c->error)
			bad("#%d post: error %d", o->id, c->error);
		break;
	case MK_ACCEPT:
		check_accept(o, c);
		break;
	case MK_CONNECT:
		check_connect(o, c);
		break;
	case MK_TIMER:
		if (c->error == ECANCELED) {
			if (o->cancel_rc != 0 && !g.destroying)
				bad("#%d timer: ECANCELED, but px_timer_cancel "
				    "returned %d", o->id, o->cancel_rc);
		} else if (c->error == 0) {
			if (o->cancel_rc == 0)
				bad("#%d timer: fired after px_timer_cancel "
				    "returned 0", o->id);
			if (h_now_ns() < o->due_ns)
				bad("#%d timer: fired %" PRIu64 " ns early",
				    o->id, o->due_ns - h_now_ns());
		} else {
			bad("#%d timer: error %d", o->id, c->error);
		}
		if (o->periodic && c->error != ECANCELED)
			bad("#%d periodic timer ended with error %d", o->id,
			    c->error);
		break;
	case MK_CLOSE:
		if (c->error)
			bad("#%d px_close: error %d (%s)", o->id, c->error,
			    strerror(c->error));
		for (int i = 0; i < o->id - 1; i++) {
			mop *p = g.op[i];
			if (p->fdi == o->fdi && p->rc == 0 && p->calls == 0 &&
			    p->kind != MK_CLOSE)
				bad("#%d px_close of fd %d called back before "
				    "#%d %s started on it", o->id, o->fd,
				    p->id, kind_name[p->kind]);
		}
		break;
	}
act:
	if (g.stop_armed && !g.destroying) {
		g.stop_armed = false;
		do_stop("callback");
	}
	if (o->act && !g.draining) {
		uint64_t r = g.cb_rng ^ (uint64_t)o->act;
		g.cb_rng = rnd(&r);
		step(&r, 3, o);
	}
	unlock();
}

/* ------------------------------------------------------------------ */
/* Starts                                                               */
/* ------------------------------------------------------------------ */

/* A connect started on number fd still waits for its callback: the
 * library refuses another connect on the number with -EALREADY, whatever
 * socket the number holds now.  It may be a zombie (started while
 * px_close had the number, see check_rc: seed 4 on linux-aio+epoll,
 * max_aio 1, the zombie sat deferred while a new socket took the
 * number), or the connect of a new socket that took the number after
 * px_close had closed it, its callback not yet run, while the model
 * tries a start on the closing descriptor (probe_ok): that start is a
 * connect of the new socket (seed 900033 on select-poll-pipe-dedicated
 * with the racer, 1 run in 60). */
static bool connect_pending_on(int fd)
{
	for (int i = 0; i < g.nops; i++) {
		mop *z = g.op[i];
		if (z->rc == 0 && !z->calls && z->kind == MK_CONNECT &&
		    z->fd == fd)
			return true;
	}
	return false;
}

/* The start's return: 0, or an error the manual allows here. */
static void check_rc(mop *o)
{
	/* px_stop returned: every start fails (px_handle_events(3)) */
	if (g.stopped && !g.destroying && o->kind != MK_CLOSE &&
	    o->rc != -ESHUTDOWN) {
		bad("#%d %s%s on fd %d: the start returned %d (%s) after px_stop",
		    o->id, kind_name[o->kind], o->vec ? " vec" : "", o->fd,
		    o->rc, px_strerror(o->rc));
		return;
	}
	if (o->rc == -ESHUTDOWN && g.stopped)
		return;
	if (o->rc == 0) {
		if (o->fdi >= 0 && g.fd[o->fdi].closing) {
			o->zombie = true;
			o->ch = -1;
		}
		return;
	}
	if (o->rc == -ESHUTDOWN && g.destroying)
		return;
	if (o->rc == -EBADF && o->fdi >= 0 && g.fd[o->fdi].closing)
		return;
	if (o->rc == -EOPNOTSUPP && o->vec &&
	    (o->kind == MK_FREAD || o->kind == MK_FWRITE) && !g.vec_file)
		return;
	if (o->rc == -EOPNOTSUPP && !g.net &&
	    (o->kind == MK_ACCEPT || o->kind == MK_CONNECT))
		return;
	/* another connect of the socket had not finished */
	if (o->rc == -EALREADY && o->kind == MK_CONNECT &&
	    (o->prev_state == CS_PENDING || connect_pending_on(o->fd)))
		return;
	bad("#%d %s%s on fd %d: the start returned %d (%s)", o->id,
	    kind_name[o->kind], o->vec ? " vec" : "", o->fd, o->rc,
	    px_strerror(o->rc));
}

/* Whether to try a start on a descriptor px_close is closing (it must
 * fail with -EBADF): now and then, with no loop thread and before the
 * close has called back, and not where POSIX AIO's dups may take the
 * number once closed. */
static bool probe_ok(uint64_t *r, const mfd *f)
{
	return !rn(r, 8) && !g.nloops && g.vec_file &&
	       !g.op[f->close_op - 1]->calls;
}

static int pick_fd(uint64_t *r, int kind, bool want_w, bool want_r)
{
	int cand[M_MAX_FDS], n = 0;
	for (int i = 0; i < g.nfd; i++) {
		mfd *f = &g.fd[i];
		if (f->kind != kind)
			continue;
		if (want_w && f->wch < 0)
			continue;
		if (want_r && f->rch < 0)
			continue;
		/* A start on a closing descriptor now and then: -EBADF. */
		if (f->closing && !probe_ok(r, f))
			continue;
		cand[n++] = i;
	}
	return n ? cand[rn(r, (unsigned)n)] : -1;
}

static void start_timed(mop *o, uint64_t *r, px_op_desc *d)
{
	o->timed = true;
	o->timeout_ns = 100000u + rn(r, 3000000);
	d->timeout_ns = o->timeout_ns;
	o->start_ns = h_now_ns();
	o->rc = px_start_op(g.px, d);
}

static void do_stream(uint64_t *r, bool write, int who, int fdi)
{
	if (fdi < 0)
		fdi = pick_fd(r, 's', write, !write);
	if (fdi < 0)
		return;
	mfd *f = &g.fd[fdi];
	size_t len;
	unsigned how = rn(r, 10);
	if (!write)
		len = 1 + rn(r, rn(r, 2) ? 8192 : 64);
	else if (how < 2)
		len = 1 + rn(r, 256 * 1024);   /* write-all likely to wait */
	else
		len = 1 + rn(r, rn(r, 2) ? 16384 : 100);
	mop *o = new_op(write ? MK_WRITE : MK_READ, fdi, len);
	if (!o || !o->len)
		return;
	o->thread = who;
	o->ch = write ? f->wch : f->rch;
	o->op = write ? PX_OP_WRITE_STREAM : PX_OP_READ_STREAM;
	if (write)
		fill(o);
	o->all = write && (how < 2 || rn(r, 3) == 0);
	if (rn(r, 3) == 0)
		cut(o, r);
	if (rn(r, 4) == 0)
		o->act = 1 + (int)rn(r, 1000);
	o->start_ns = h_now_ns();
	if (rn(r, 6) == 0) {
		px_op_desc d = {
			.op = o->op, .fd = o->fd, .cb = cb, .user = o,
			.flags = (o->all ? PX_OPF_WRITE_ALL : 0) |
				 (o->vec ? PX_OPF_VECTORED : 0),
		};
		if (o->vec) {
			d.iov = o->iov;
			d.iovcnt = o->iovcnt;
		} else {
			d.buf = o->buf;
			d.len = o->len;
		}
		start_timed(o, r, &d);
	} else if (!write) {
		o->rc = o->vec ? px_readv_stream(g.px, o->fd, o->iov, o->iovcnt,
						 cb, o)
			       : px_read_stream(g.px, o->fd, o->buf, o->len, cb,
						o);
	} else if (o->vec) {
		o->rc = o->all ? px_writev_stream_all(g.px, o->fd, o->iov,
						      o->iovcnt, cb, o)
			       : px_writev_stream(g.px, o->fd, o->iov,
						  o->iovcnt, cb, o);
	} else {
		o->rc = o->all ? px_write_stream_all(g.px, o->fd, o->buf,
						     o->len, cb, o)
			       : px_write_stream(g.px, o->fd, o->buf, o->len,
						 cb, o);
	}
	trace_start(o, "stream");
	check_rc(o);
}

static void do_dgram(uint64_t *r, bool write, int who, int fdi)
{
	if (fdi < 0)
		fdi = pick_fd(r, 'd', write, !write);
	if (fdi < 0)
		return;
	mfd *f = &g.fd[fdi];
	size_t len = write ? 8 + rn(r, M_DGRAM_MAX - 8) : M_DGRAM_MAX;
	mop *o = new_op(write ? MK_DWRITE : MK_DREAD, fdi, len);
	if (!o || !o->len)
		return;
	o->thread = who;
	o->ch = write ? f->wch : f->rch;
	o->op = write ? PX_OP_WRITE_DGRAM : PX_OP_READ_DGRAM;
	if (write)
		fill(o);
	if (rn(r, 4) == 0)
		o->act = 1 + (int)rn(r, 1000);
	o->start_ns = h_now_ns();
	/* named: to the peer's name */
	const mfd *to = write && f->unlen && f->peer >= 0 ? &g.fd[f->peer] : NULL;
	const struct sockaddr *ta = to ? (const struct sockaddr *)&to->un : NULL;
	socklen_t tl = to ? to->unlen : 0;
	if (rn(r, 6) == 0) {
		px_op_desc d = { .op = o->op, .fd = o->fd, .buf = o->buf,
				 .len = o->len, .cb = cb, .user = o,
				 .addr = ta, .addrlen = tl };
		start_timed(o, r, &d);
	} else if (write) {
		o->rc = px_write_dgram(g.px, o->fd, o->buf, o->len, ta, tl, cb,
				       o);
	} else {
		o->rc = px_read_dgram(g.px, o->fd, o->buf, o->len, cb, o);
	}
	trace_start(o, "dgram");
	check_rc(o);
}

static void do_file(uint64_t *r, bool write, int who)
{
	int fdi = g.file_fdi;
	if (fdi < 0 || (g.fd[fdi].closing && !probe_ok(r, &g.fd[fdi])))
		return;
	int nblk = 1 + (int)rn(r, 3);
	int b0 = (int)rn(r, M_NBLK - (unsigned)nblk + 1);
	for (int b = b0; b < b0 + nblk; b++)
		if (g.blk_w[b] || (write && g.blk_r[b]))
			return;
	mop *o = new_op(write ? MK_FWRITE : MK_FREAD, fdi,
			(size_t)nblk * M_BLK);
	if (!o || !o->len)
		return;
	o->thread = who;
	o->op = write ? PX_OP_WRITE_FILE : PX_OP_READ_FILE;
	o->blk0 = b0;
	o->nblk = nblk;
	o->off = (uint64_t)b0 * M_BLK;
	if (write)
		fill(o);
	if (rn(r, 4) == 0)
		cut(o, r);
	if (rn(r, 4) == 0)
		o->act = 1 + (int)rn(r, 1000);
	o->start_ns = h_now_ns();
	if (rn(r, 8) == 0) {
		px_op_desc d = { .op = o->op, .fd = o->fd, .offset = o->off,
				 .cb = cb, .user = o,
				 .flags = o->vec ? PX_OPF_VECTORED : 0 };
		if (o->vec) {
			d.iov = o->iov;
			d.iovcnt = o->iovcnt;
		} else {
			d.buf = o->buf;
			d.len = o->len;
		}
		start_timed(o, r, &d);
	} else if (write) {
		o->rc = o->vec ? px_writev_file(g.px, o->fd, o->iov, o->iovcnt,
						o->off, cb, o)
			       : px_write_file(g.px, o->fd, o->buf, o->len,
					       o->off, cb, o);
	} else {
		o->rc = o->vec ? px_readv_file(g.px, o->fd, o->iov, o->iovcnt,
					       o->off, cb, o)
			       : px_read_file(g.px, o->fd, o->buf, o->len,
					      o->off, cb, o);
	}
	trace_start(o, "file");
	check_rc(o);
	if (o->rc == 0)
		for (int b = b0; b < b0 + nblk; b++) {
			if (write)
				g.blk_w[b]++;
			else
				g.blk_r[b]++;
		}
}

static void do_cancel(uint64_t *r, int fdi)
{
	if (fdi < 0)
		fdi = (int)rn(r, (unsigned)g.nfd);
	mfd *f = &g.fd[fdi];
	if (f->closing)
		return;
	f->cancel_mark = g.nops + 1;
	/* by number: an operation started after an earlier descriptor under
	 * it was closed (a zombie) is cancelled too */
	int pend = 0;
	for (int i = 0; i < g.nops; i++)
		if (g.op[i]->fd == f->fd && g.op[i]->fdi >= 0 &&
		    g.op[i]->rc == 0 && !g.op[i]->calls)
			pend++;
	int rc = px_cancel(g.px, f->fd);
	if (g.trace)
		printf("model: px_cancel(%d) -> %d (%d not called back)\n",
		       f->fd, rc, pend);
	if (rc < 0 || rc > pend)
		bad("px_cancel(fd %d) returned %d with %d operations not "
		    "called back", f->fd, rc, pend);
}

static void mark_broken(int fdi, bool closed)
{
	mfd *f = &g.fd[fdi];
	if (f->wch >= 0) {
		g.ch[f->wch].eof_ok = true;
		g.ch[f->wch].broken = true;
	}
	if (closed && f->rch >= 0) {
		g.ch[f->rch].broken = true;
		g.ch[f->rch].inexact = true;
		if (g.ch[f->rch].dgram)
			g.ch[f->rch].eof_ok = true;
	}
	/* A TCP close may reset: what either end had in flight may go.  An
	 * AF_UNIX datagram socket whose peer closed drops what it holds as
	 * soon as it notices (unix_dgram_disconnected: "messages are lost"). */
	if (closed && f->kind == 'd' && f->peer >= 0) {
		g.ch[f->wch].inexact = true;
		g.ch[f->rch].inexact = true;
	}
	if (closed && f->tcp) {
		/* both directions of this connection */
		int cs[2] = { f->wch, f->rch };
		for (int k = 0; k < 2; k++)
			if (cs[k] >= 0) {
				g.ch[cs[k]].inexact = true;
				g.ch[cs[k]].broken = true;
			}
	}
	/* AF_UNIX: a shutdown or close shuts the peer's reading of us and
	 * its writing to us as the kernel sees it (unix_shutdown). */
	if (!f->tcp && f->kind != 'f' && f->peer >= 0 && f->rch >= 0) {
		g.ch[f->rch].broken = true;
		if (g.ch[f->rch].dgram)
			g.ch[f->rch].eof_ok = true;
	}
}

static void do_close(uint64_t *r, int who, int fdi)
{
	if (fdi < 0)
		fdi = (int)rn(r, (unsigned)g.nfd);
	mfd *f = &g.fd[fdi];
	if (f->closing)
		return;
	mop *o = new_op(MK_CLOSE, fdi, 0);
	if (!o)
		return;
	o->thread = who;
	o->op = PX_OP_CLOSE;
	f->closing = true;
	f->close_op = o->id;
	f->cancel_mark = o->id;
	mark_broken(fdi, true);
	o->rc = px_close(g.px, f->fd, cb, o);
	trace_start(o, "px_close");
	if (o->rc != 0)
		bad("px_close(fd %d) returned %d (%s)", f->fd, o->rc,
		    px_strerror(o->rc));
}

/* px_cancel, then close(2) by the application, as px_cancel(3) allows:
 * "the application may close(2) fd right after px_cancel".  Only a
 * stream or datagram socket or pipe end, not the file (POSIX AIO and
 * Linux AIO cannot stop a file request under way: px_cancel(3)), and
 * not under TSan, which takes a close beside the library's calls on the
 * number in another thread for a race.  The cancelled operations still
 * end once each, with ECANCELED or their real result; the number is free
 * for the next socket the model makes, whose operations and bytes the
 * cancelled ones must leave alone.  A record of kind close stands for
 * the close(2), called back already, so that the model's checks of a
 * closed descriptor (closing, close_op) hold. */
static void do_cancel_close(uint64_t *r, int fdi)
{
#if PX_TEST_TSAN
	(void)r;
	(void)fdi;
#else
	if (fdi < 0)
		fdi = (int)rn(r, (unsigned)g.nfd);
	mfd *f = &g.fd[fdi];
	if (f->closing || (f->kind != 's' && f->kind != 'd'))
		return;
	mop *o = new_op(MK_CLOSE, fdi, 0);
	if (!o)
		return;
	o->op = PX_OP_CLOSE;
	o->rc = 0;
	o->calls = 1;
	o->cb_seq = ++g.cbseq;
	f->cancel_mark = o->id;
	int rc = px_cancel(g.px, f->fd);
	f->closing = true;
	f->close_op = o->id;
	mark_broken(fdi, true);
	if (g.trace)
		printf("model: #%d px_cancel(%d) -> %d, then close(2)\n", o->id,
		       f->fd, rc);
	if (rc < 0)
		bad("px_cancel(fd %d) before its close(2): %d", f->fd, rc);
	if (close(f->fd) != 0)
		bad("close(%d) after px_cancel: %s", f->fd, strerror(errno));
#endif
}

static void do_shutdown(uint64_t *r, int fdi)
{
	if (fdi < 0)
		fdi = (int)rn(r, (unsigned)g.nfd);
	mfd *f = &g.fd[fdi];
	/* The listener, now and then: what its backlog held is reset,
	 * accepts fail with EINVAL (px_accept(3)), connects are refused. */
	if (f->kind == 'l' && !f->closing && !f->shut_rd) {
		f->shut_rd = true;
		if (g.trace)
			printf("model: shutdown(%d, SHUT_RD) of the listener\n",
			       f->fd);
		if (shutdown(f->fd, SHUT_RD) < 0)
			bad("shutdown(%d, SHUT_RD) of the listener: %s", f->fd,
			    strerror(errno));
		return;
	}
	if (f->closing || f->kind == 'f' || f->peer < 0)
		return;
	/* AF_UNIX stream: SHUT_RD now and then.  What was queued can still
	 * be read, then end of stream; the peer's writes fail with EPIPE
	 * (unix_shutdown shuts the peer's sending), so the channel stays
	 * exact. */
	if (f->kind == 's' && !f->tcp && !f->shut_rd && rn(r, 3) == 0) {
		mch *ch = &g.ch[f->rch];
		f->shut_rd = true;
		ch->broken = true;
		ch->eof_ok = true;
		if (g.trace)
			printf("model: shutdown(%d, SHUT_RD)\n", f->fd);
		if (shutdown(f->fd, SHUT_RD) < 0)
			bad("shutdown(%d, SHUT_RD): %s", f->fd, strerror(errno));
		return;
	}
	if (f->shut_wr || f->wch < 0)
		return;
	bool was_broken = g.ch[f->wch].broken;
	f->shut_wr = true;
	mark_broken(fdi, false);
	if (g.trace)
		printf("model: shutdown(%d, SHUT_WR)\n", f->fd);
	/* ENOTCONN: a TCP peer's reset came first */
	if (shutdown(f->fd, SHUT_WR) < 0 && !(errno == ENOTCONN && was_broken))
		bad("shutdown(%d): %s", f->fd, strerror(errno));
}

static void do_post(int who)
{
	mop *o = new_op(MK_POST, -1, 0);
	if (!o)
		return;
	o->thread = who;
	o->op = PX_OP_POST;
	o->rc = px_post(g.px, cb, o);
	trace_start(o, "post");
	check_rc(o);
}

static void do_timer(uint64_t *r, int who)
{
	if (rn(r, 3) == 0) {
		/* cancel one not yet cancelled */
		for (int i = g.nops - 1, k = 0; i >= 0 && k < 20; i--) {
			mop *t = g.op[i];
			if (t->kind != MK_TIMER || t->rc != 0 || t->cancel_rc != 1)
				continue;
			k++;
			if (rn(r, 3))
				continue;
			t->cancel_rc = px_timer_cancel(g.px, t->timer_id);
			if (g.trace)
				printf("model: px_timer_cancel #%d (id %" PRId64
				       ") -> %d\n", t->id, t->timer_id,
				       t->cancel_rc);
			if (t->cancel_rc == 0 && t->calls && !t->periodic)
				bad("#%d timer: px_timer_cancel returned 0 after "
				    "its callback ran (error %d)", t->id,
				    t->error);
			if (t->cancel_rc != 0 && t->cancel_rc != -ENOENT)
				bad("#%d: px_timer_cancel returned %d", t->id,
				    t->cancel_rc);
			/* px_destroy cancels every timer before it runs
			 * their callbacks: then -ENOENT (px_timer_cancel(3)) */
			if (t->periodic && t->cancel_rc != 0 && !g.destroying)
				bad("#%d periodic timer: px_timer_cancel returned "
				    "%d", t->id, t->cancel_rc);
			return;
		}
		return;
	}
	mop *o = new_op(MK_TIMER, -1, 0);
	if (!o)
		return;
	o->thread = who;
	o->op = PX_OP_TIMER;
	uint64_t delay = rn(r, 4) == 0 ? 0 : rn(r, 3000000);
	o->periodic = rn(r, 6) == 0;
	o->due_ns = h_now_ns() + delay;
	o->period_ns = o->periodic ? 200000 + rn(r, 800000) : 0;
	int64_t id = o->periodic
			     ? px_timer_periodic(g.px, delay, o->period_ns, cb, o)
			     : px_timer_start(g.px, delay, cb, o);
	o->rc = id > 0 ? 0 : (int)id;
	o->timer_id = id;
	trace_start(o, o->periodic ? "periodic" : "timer");
	check_rc(o);
}

/* A TCP socket bound to 127.0.0.1 (port 0: any), its address in *a; -1. */
static int tcp_bound(struct sockaddr_in *a, uint16_t port, bool reuse,
		     bool nonblock)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
				 (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0)
		return -1;
	int one = 1;
	if (reuse)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	*a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = port,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof *a;
	if (bind(fd, (struct sockaddr *)a, sizeof *a) < 0 ||
	    getsockname(fd, (struct sockaddr *)a, &al) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Connect a socket (a new one, or one whose last connect failed or
 * succeeded: the next fails with EISCONN) to the listener, to a refused
 * port or to the full listener.  own: the socket of the callback's
 * connect, -1. */
static void do_connect(uint64_t *r, int who, int own)
{
	int fdi = own;
	if (fdi >= 0 && g.fd[fdi].kind != 'c')
		fdi = -1;
	if (fdi < 0 && g.nconn < M_MAX_CONNS && rn(r, 3)) {
		/* Bound to a port named, not to port 0: the kernel gives a
		 * port it chose back when a connect fails or the socket is
		 * disconnected, and the next connect would come from
		 * another, which the accepts could not place. */
		struct sockaddr_in a;
		bool nb = rn(r, 2);
		int fd = -1;
		for (int tries = 0; fd < 0 && tries < 20; tries++) {
			int t = tcp_bound(&a, 0, false, false);
			if (t < 0)
				break;
			close(t);
			fd = tcp_bound(&a, a.sin_port, false, nb);
		}
		fdi = add_fd(fd, 'c', false);
		if (fdi < 0)
			return;
		g.nconn++;
		g.fd[fdi].port = ntohs(a.sin_port);
	} else if (fdi < 0) {
		int cand[M_MAX_FDS], n = 0;
		for (int i = 0; i < g.nfd; i++)
			if (g.fd[i].kind == 'c')
				cand[n++] = i;
		if (!n)
			return;
		fdi = cand[rn(r, (unsigned)n)];
	}
	mfd *f = &g.fd[fdi];
	if (f->closing && !probe_ok(r, f))
		return;
	/* What the model knows: pending while a connect started on it has
	 * not been called back. */
	int st = f->cstate;
	for (int i = 0; i < g.nops; i++)
		if (g.op[i]->fdi == fdi && g.op[i]->kind == MK_CONNECT &&
		    g.op[i]->rc == 0 && !g.op[i]->calls)
			st = CS_PENDING;
	/* one still pending now and then (-EALREADY); after an outcome the
	 * model cannot know (cancelled, timed out: the kernel's handshake may
	 * go on) any result is taken, but once */
	if (st == CS_PENDING && rn(r, 4))
		return;
	unsigned t = rn(r, 10);
	int target = t < 6 ? T_LIVE : t < 8 ? T_REFUSED : T_FULL;
	if (target == T_LIVE && (g.fd[g.lfdi].closing || g.fd[g.lfdi].shut_rd))
		target = T_REFUSED;
	mop *o = new_op(MK_CONNECT, fdi, 0);
	if (!o)
		return;
	o->thread = who;
	o->op = PX_OP_CONNECT;
	o->target = target;
	o->prev_state = st;
	if (rn(r, 4) == 0)
		o->act = 1 + (int)rn(r, 1000);
	const struct sockaddr *sa = (const struct sockaddr *)&g.taddr[target];
	o->start_ns = h_now_ns();
	if (rn(r, 6) == 0) {
		px_op_desc d = { .op = o->op, .fd = o->fd, .addr = sa,
				 .addrlen = sizeof g.taddr[target], .cb = cb,
				 .user = o };
		start_timed(o, r, &d);
	} else {
		o->rc = px_connect(g.px, o->fd, sa, sizeof g.taddr[target], cb,
				   o);
	}
	if (g.trace)
		printf("model: #%d connect fd %d (port %d, %s) to the %s%s -> "
		       "%d%s\n", o->id, o->fd, f->port,
		       st == CS_FRESH ? "new" : st == CS_PENDING ? "pending" :
		       st == CS_CONNECTED ? "connected" :
		       st == CS_FAILED ? "failed" : "unknown",
		       target_name[target], o->timed ? " timed" : "", o->rc,
		       o->act ? " +act" : "");
	check_rc(o);
	if (o->rc != 0 || o->zombie)
		return;
	if (target == T_LIVE && st != CS_CONNECTED)
		f->live_tries++;
	if (st == CS_PENDING || st == CS_UNKNOWN) {
		/* the last one had finished, its callback not yet run; or
		 * the socket's state is not known */
		o->loose = true;
		f->loose = true;
	}
	f->cstate = CS_PENDING;
}

static void do_accept(uint64_t *r, int who)
{
	int fdi = g.lfdi;
	if (fdi < 0 || (g.fd[fdi].closing && !probe_ok(r, &g.fd[fdi])))
		return;
	int pend = 0;
	for (int i = 0; i < g.nops; i++)
		if (g.op[i]->kind == MK_ACCEPT && g.op[i]->rc == 0 &&
		    !g.op[i]->calls)
			pend++;
	if (pend >= 3)
		return;
	mop *o = new_op(MK_ACCEPT, fdi, 0);
	if (!o)
		return;
	o->thread = who;
	o->op = PX_OP_ACCEPT;
	if (rn(r, 4) == 0)
		o->act = 1 + (int)rn(r, 1000);
	o->start_ns = h_now_ns();
	if (rn(r, 6) == 0) {
		px_op_desc d = { .op = o->op, .fd = o->fd, .cb = cb, .user = o };
		start_timed(o, r, &d);
	} else {
		o->rc = px_accept(g.px, o->fd, cb, o);
	}
	trace_start(o, "accept");
	check_rc(o);
}

/* One random step, under g.mu.  who: 0-2 a driver, 3 a callback (self
 * its operation, whose descriptor it prefers). */
/* px_stop, under mu; from a driver or a callback. */
static void do_stop(const char *who)
{
	if (g.stopped)
		return;
	atomic_store(&g.stop_called, 1);
	int rc = px_stop(g.px);
	if (g.trace)
		printf("model: px_stop (%s) -> %d\n", who, rc);
	if (rc != 0)
		bad("px_stop: %d", rc);
	g.stopped = true;
	atomic_store(&g.stop_done, 1);
}

/* A px_stats snapshot, under mu, checked against the previous one and
 * against the model: per processor, started == completed + cancelled +
 * timed_out + in_flight (px_stats(3)); no total goes down; started is
 * the number of I/O starts that returned 0; in flight are no more than
 * the model has seen no callback of. */
static void do_stats(void)
{
	struct px_stats st;
	int rc = px_stats(g.px, &st);
	if (rc != 0) {
		bad("px_stats: %d", rc);
		return;
	}
	uint64_t started = 0, pend = 0;
	for (int i = 0; i < g.nops; i++) {
		const mop *o = g.op[i];
		if (o->rc != 0 || o->kind == MK_POST || o->kind == MK_TIMER ||
		    o->kind == MK_CLOSE)
			continue;
		started++;
		pend += !o->calls;
	}
	uint64_t ps = 0, pc = 0, pk = 0, pt = 0, pf = 0;
	for (unsigned i = 0; i < st.nproc && i < 2; i++) {
		const px_proc_stats *p = &st.proc[i];
		ps += p->started;
		pc += p->completed;
		pk += p->cancelled;
		pt += p->timed_out;
		pf += p->in_flight;
		if (p->started != p->completed + p->cancelled + p->timed_out +
				  p->in_flight)
			bad("px_stats processor %u: started %" PRIu64 " != "
			    "completed %" PRIu64 " + cancelled %" PRIu64
			    " + timed out %" PRIu64 " + in flight %" PRIu64, i,
			    p->started, p->completed, p->cancelled, p->timed_out,
			    p->in_flight);
	}
	if (ps != st.started || pc != st.completed || pk != st.cancelled ||
	    pt != st.timed_out || pf != st.in_flight)
		bad("px_stats: the sums differ from the processors' counts");
	/* the racer's own stream operations (read after the snapshot:
	 * no fewer than it had) */
	uint64_t rio = g_rc.on ? atomic_load(&g_rc.io_started) : 0;
	if (st.started < started || st.started > started + rio)
		bad("px_stats: started %" PRIu64 ", but %" PRIu64 " I/O starts "
		    "returned 0 (and %" PRIu64 " of the racer's)", st.started,
		    started, rio);
	pend += rio;
	if (st.in_flight > pend)
		bad("px_stats: in flight %" PRIu64 ", but only %" PRIu64
		    " I/O operations not called back", st.in_flight, pend);
	const struct px_stats *q = &g.st_prev;
	if (g.st_have &&
	    (st.started < q->started || st.completed < q->completed ||
	     st.cancelled < q->cancelled || st.timed_out < q->timed_out ||
	     st.posts < q->posts || st.timer_callbacks < q->timer_callbacks ||
	     st.callbacks < q->callbacks || st.leader_turns < q->leader_turns))
		bad("px_stats: a total went down since the last snapshot");
	g.st_prev = st;
	g.st_have = true;
}

/* A start with an argument the manual refuses, on one of the model's
 * descriptors whatever its state (closing, closed, stopped): -EINVAL
 * (-ENOENT for a timer id never given), checked before anything else,
 * and never a callback (run_seed checks that after px_destroy). */
static void do_bad(uint64_t *r, int who)
{
	mop *o = new_op(MK_BAD, (int)rn(r, (unsigned)g.nfd), 64);
	if (!o || !o->len)
		return;
	o->thread = who;
	int fd = o->fd, want = -EINVAL;
	struct iovec *iov = o->iov;
	iov[0] = (struct iovec){ o->buf, 0 };
	iov[1] = (struct iovec){ o->buf + 8, 0 };
	struct sockaddr_storage ss = { .ss_family = AF_UNIX };
	px_op_desc d = { .fd = fd, .buf = o->buf, .len = o->len, .cb = cb,
			 .user = o };
	unsigned k = rn(r, 16);
	const char *what;
	switch (k) {
	case 12:
		what = "px_start_op of a stream read with PX_OPF_WRITE_ALL";
		d.op = o->op = PX_OP_READ_STREAM;
		d.flags = PX_OPF_WRITE_ALL;
		o->rc = px_start_op(g.px, &d);
		break;
	case 13:
		what = "px_start_op of a vectored datagram write";
		d.op = o->op = PX_OP_WRITE_DGRAM;
		d.buf = NULL;
		d.len = 0;
		iov[0].iov_len = 8;
		d.iov = iov;
		d.iovcnt = 1;
		d.flags = PX_OPF_VECTORED;
		o->rc = px_start_op(g.px, &d);
		break;
	case 14:
		what = "px_start_op of a stream write with an address";
		d.op = o->op = PX_OP_WRITE_STREAM;
		d.addr = (struct sockaddr *)&ss;
		d.addrlen = sizeof(struct sockaddr_un);
		o->rc = px_start_op(g.px, &d);
		break;
	case 15:
		what = "px_start_op of a vectored write of -1 buffers";
		d.op = o->op = PX_OP_WRITE_STREAM;
		d.buf = NULL;
		d.len = 0;
		d.iov = iov;
		d.iovcnt = -1;
		d.flags = PX_OPF_VECTORED;
		o->rc = px_start_op(g.px, &d);
		break;
	case 0:
		what = "read of length 0";
		o->op = PX_OP_READ_STREAM;
		o->rc = px_read_stream(g.px, fd, o->buf, 0, cb, o);
		break;
	case 1:
		what = "vectored write of no buffers";
		o->op = PX_OP_WRITE_STREAM;
		o->rc = px_writev_stream(g.px, fd, iov, 0, cb, o);
		break;
	case 2:
		what = "vectored read of empty buffers";
		o->op = PX_OP_READ_STREAM;
		o->rc = px_readv_stream(g.px, fd, iov, 2, cb, o);
		break;
	case 3:
		what = "vectored file write of IOV_MAX + 1 buffers";
		o->op = PX_OP_WRITE_FILE;
		o->rc = px_writev_file(g.px, fd, iov, IOV_MAX + 1, 0, cb, o);
		break;
	case 4:
		what = "px_start_op with an unknown flag";
		d.op = o->op = PX_OP_WRITE_STREAM;
		d.flags = 0x80;
		o->rc = px_start_op(g.px, &d);
		break;
	case 5:
		what = "px_start_op of a stream read with an offset";
		d.op = o->op = PX_OP_READ_STREAM;
		d.offset = M_BLK;
		o->rc = px_start_op(g.px, &d);
		break;
	case 6:
		what = "datagram write with an address of length 0";
		o->op = PX_OP_WRITE_DGRAM;
		o->rc = px_write_dgram(g.px, fd, o->buf, 8,
				       (struct sockaddr *)&ss, 0, cb, o);
		break;
	case 7:
		what = "datagram write with an address of length 1";
		o->op = PX_OP_WRITE_DGRAM;
		o->rc = px_write_dgram(g.px, fd, o->buf, 8,
				       (struct sockaddr *)&ss, 1, cb, o);
		break;
	case 8:
		what = "px_start_op of an accept with a buffer";
		d.op = o->op = PX_OP_ACCEPT;
		o->rc = px_start_op(g.px, &d);
		break;
	case 9:
		what = "file write of a NULL buffer";
		o->op = PX_OP_WRITE_FILE;
		o->rc = px_write_file(g.px, fd, NULL, 8, 0, cb, o);
		break;
	case 10:
		what = "periodic timer of period 0";
		o->op = PX_OP_TIMER;
		o->fdi = -1;
		o->fd = -1;
		int64_t id = px_timer_periodic(g.px, 1000, 0, cb, o);
		o->rc = id > 0 ? 0 : (int)id;
		break;
	default:
		what = "px_timer_cancel of an id never given";
		o->op = PX_OP_TIMER;
		o->fdi = -1;
		o->fd = -1;
		o->rc = px_timer_cancel(g.px, INT64_MAX - (int64_t)rn(r, 1000));
		want = -ENOENT;
		break;
	}
	if (g.trace)
		printf("model: #%d bad input on fd %d: %s -> %d\n", o->id, o->fd,
		       what, o->rc);
	/* A number px_close has closed may be one the library opened since
	 * for itself (POSIX AIO's dups, a ring or epoll set a thread makes
	 * at its first lead): a start there fails with -EBADF, which the
	 * library checks first (px_read_stream(3) lists both errors and no
	 * order; seed 700145 on posix-sigwait-shared+select, its racer). */
	const mfd *bf = o->fdi >= 0 ? &g.fd[o->fdi] : NULL;
	if (o->rc == -EBADF && want == -EINVAL && bf && bf->closing &&
	    g.op[bf->close_op - 1]->calls)
		want = -EBADF;
	if (o->rc != want)
		bad("#%d %s on fd %d: returned %d (%s), expected %d", o->id,
		    what, o->fd, o->rc, px_strerror(o->rc), want);
	if (o->rc == 0)
		o->rc = 1;      /* never pending: a callback is a fault */
}

/* px_handle_events(px, 0) from a callback (px_handle_events(3): it runs
 * what its own outer call had collected, docs/ARCHITECTURE.md), the
 * model's lock held, so that the callbacks it runs come in nested.  It
 * returns -ESHUTDOWN once px_stop was called and from a callback of
 * px_destroy, else the number of callbacks it ran. */
static void do_nested(const mop *self)
{
	if (g.nested >= 2)
		return;
	g.nested++;
	int rc = px_handle_events(g.px, 0);
	g.nested--;
	if (g.trace)
		printf("model: px_handle_events(px, 0) in #%d's callback -> %d\n",
		       self->id, rc);
	if (rc == -ESHUTDOWN ? !g.destroying && !atomic_load(&g.stop_called)
			     : rc < 0)
		bad("px_handle_events in #%d's callback returned %d", self->id,
		    rc);
}

static void step(uint64_t *r, int who, mop *self)
{
	if (g.nops >= M_MAX_OPS - 4)
		return;
	unsigned k = rn(r, 100);
	int own = self && self->fdi >= 0 && rn(r, 2) ? self->fdi : -1;
	if (own >= 0 && g.fd[own].closing)
		own = -1;
	if (k < 20) {
		if (own >= 0 && g.fd[own].kind == 's' && g.fd[own].rch < 0)
			own = -1;
		if (own >= 0 && g.fd[own].kind != 's')
			own = -1;
		do_stream(r, false, who, own);
	} else if (k < 42) {
		if (own >= 0 && (g.fd[own].kind != 's' || g.fd[own].wch < 0))
			own = -1;
		do_stream(r, true, who, own);
	} else if (k < 50) {
		bool w = rn(r, 2);
		if (own >= 0 && (g.fd[own].kind != 'd' ||
				 (w ? g.fd[own].wch : g.fd[own].rch) < 0))
			own = -1;
		do_dgram(r, w, who, own);
	} else if (k < 58) {
		do_file(r, rn(r, 2), who);
	} else if (k < 64) {
		do_cancel(r, own);
	} else if (k < 65) {
		unsigned c = rn(r, 3);
		if (c == 0)
			do_close(r, who, own);
		else if (c == 1 && rn(r, 2) == 0)
			do_cancel_close(r, own);
	} else if (k < 66) {
		if (rn(r, 2) == 0)
			do_shutdown(r, -1);
	} else if (k < 70) {
		do_post(who);
	} else if (k < 75) {
		do_timer(r, who);
	} else if (k < 79) {
		do_connect(r, who, own);
	} else if (k < 82) {
		if (rn(r, 60) == 0)
			do_shutdown(r, g.lfdi);
		else
			do_accept(r, who);
	} else if (k < 84) {
		do_stats();
	} else if (k < 86) {
		do_bad(r, who);
	} else if (k < 89 && self) {
		do_nested(self);
	}
	/* else nothing here: the driver pumps or yields */
}

/* ------------------------------------------------------------------ */
/* One seed                                                             */
/* ------------------------------------------------------------------ */

static int add_fd(int fd, int kind, bool tcp)
{
	if (fd < 0 || g.nfd >= M_MAX_FDS) {
		bad("descriptor set-up failed: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	mfd *f = &g.fd[g.nfd];
	memset(f, 0, sizeof *f);
	f->fd = fd;
	f->kind = kind;
	f->tcp = tcp;
	f->wch = f->rch = f->peer = -1;
	atomic_store(&g_rc.fds[g.nfd], fd);
	atomic_store(&g_rc.nfds, g.nfd + 1);
	return g.nfd++;
}

static void add_ch(int wfdi, int rfdi, bool dgram, bool tcp)
{
	mch *c = &g.ch[g.nch];
	memset(c, 0, sizeof *c);
	c->wfdi = wfdi;
	c->rfdi = rfdi;
	c->dgram = dgram;
	c->tcp = tcp;
	g.fd[wfdi].wch = g.nch;
	g.fd[rfdi].rch = g.nch;
	g.nch++;
}

/* Small buffers, so that writes wait for room.  Not a TCP receive buffer:
 * below two segments (64 KiB on loopback) the receiver keeps its window
 * shut and the sender moves on through zero-window probes, seconds apart. */
static void small_bufs(int fd, bool tcp)
{
	int sz = 4096;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	if (!tcp)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
}

static bool make_pair(int type, bool tcp)
{
	int sv[2] = { -1, -1 };
	if (tcp) {
		int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof a;
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 ||
		    listen(l, 1) < 0 ||
		    getsockname(l, (struct sockaddr *)&a, &al) < 0) {
			if (l >= 0)
				close(l);
			bad("TCP listener: %s", strerror(errno));
			return false;
		}
		sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (sv[0] >= 0)
			small_bufs(sv[0], true);
		if (sv[0] < 0 || connect(sv[0], (struct sockaddr *)&a, al) < 0) {
			bad("TCP connect: %s", strerror(errno));
			close(l);
			return false;
		}
		sv[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		close(l);
		int one = 1;
		setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (sv[1] >= 0) {
			small_bufs(sv[1], true);
			setsockopt(sv[1], IPPROTO_TCP, TCP_NODELAY, &one,
				   sizeof one);
		}
	} else if (type == SOCK_DGRAM && g.dg_named) {
		static atomic_uint serial;
		struct sockaddr_un un[2];
		socklen_t ul[2];
		for (int k = 0; k < 2; k++) {
			memset(&un[k], 0, sizeof un[k]);
			un[k].sun_family = AF_UNIX;
			int n = snprintf(un[k].sun_path + 1, sizeof un[k].sun_path - 1,
					 "px-model-%d-%u", (int)getpid(),
					 atomic_fetch_add(&serial, 1));
			ul[k] = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
					    1 + (size_t)n);
			sv[k] = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			if (sv[k] < 0 ||
			    bind(sv[k], (struct sockaddr *)&un[k], ul[k]) < 0) {
				bad("named datagram socket: %s", strerror(errno));
				if (sv[k] >= 0)
					close(sv[k]);
				if (k)
					close(sv[0]);
				return false;
			}
			small_bufs(sv[k], false);
		}
		int a = add_fd(sv[0], 'd', false), b = add_fd(sv[1], 'd', false);
		if (a < 0 || b < 0)
			return false;
		g.fd[a].un = un[0];
		g.fd[a].unlen = ul[0];
		g.fd[b].un = un[1];
		g.fd[b].unlen = ul[1];
		g.fd[a].peer = b;
		g.fd[b].peer = a;
		add_ch(a, b, true, false);
		add_ch(b, a, true, false);
		return true;
	} else if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) < 0) {
		bad("socketpair: %s", strerror(errno));
		return false;
	} else {
		small_bufs(sv[0], false);
		small_bufs(sv[1], false);
	}
	int kind = type == SOCK_DGRAM ? 'd' : 's';
	int a = add_fd(sv[0], kind, tcp), b = add_fd(sv[1], kind, tcp);
	if (a < 0 || b < 0)
		return false;
	g.fd[a].peer = b;
	g.fd[b].peer = a;
	add_ch(a, b, type == SOCK_DGRAM, tcp);
	add_ch(b, a, type == SOCK_DGRAM, tcp);
	return true;
}

/* The connects' targets: the listener (a descriptor of the model, which
 * px_close may close: a socket bound to its port keeps the port ours, so
 * that a late connect is refused rather than reach another program's
 * listener), a bound port nobody listens on, and a listener with backlog
 * 0 and one connection waiting in it, which drops further SYNs. */
static bool setup_net(void)
{
	struct sockaddr_in a;
	g.lguard = tcp_bound(&a, 0, true, false);
	int l = g.lguard >= 0 ? tcp_bound(&g.taddr[T_LIVE], a.sin_port, true,
					  false) : -1;
	if (l >= 0 && listen(l, 64) < 0) {
		close(l);
		l = -1;
	}
	g.lfdi = add_fd(l, 'l', false);
	if (g.lfdi < 0)
		return false;
	g.refused_fd = tcp_bound(&g.taddr[T_REFUSED], 0, false, false);
	g.full_fd = tcp_bound(&g.taddr[T_FULL], 0, false, false);
	if (g.full_fd >= 0 && listen(g.full_fd, 0) == 0)
		g.full_fill = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g.refused_fd < 0 || g.full_fill < 0 ||
	    connect(g.full_fill, (struct sockaddr *)&g.taddr[T_FULL],
		    sizeof g.taddr[T_FULL]) < 0) {
		bad("connect targets: %s", strerror(errno));
		return false;
	}
	return true;
}

static bool setup_fds(void)
{
	g.file_fdi = -1;
	g.lfdi = -1;
	g.lguard = g.refused_fd = g.full_fd = g.full_fill = -1;
	if (!make_pair(SOCK_STREAM, false) || !make_pair(SOCK_STREAM, true) ||
	    !make_pair(SOCK_DGRAM, false))
		return false;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		bad("pipe2: %s", strerror(errno));
		return false;
	}
	fcntl(p[1], F_SETPIPE_SZ, 4096);
	int a = add_fd(p[1], 's', false), b = add_fd(p[0], 's', false);
	if (a < 0 || b < 0)
		return false;
	add_ch(a, b, false, false);
	char path[] = "/tmp/px_model_XXXXXX";
	int fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0) {
		unlink(path);
		if (ftruncate(fd, (off_t)M_NBLK * M_BLK) < 0) {
			close(fd);
			fd = -1;
		}
	}
	g.file_fdi = add_fd(fd, 'f', false);
	return g.file_fdi >= 0 && setup_net();
}

static void *loop_main(void *arg)
{
	atomic_int *quit = arg;
	while (!atomic_load(&g.loop_stop) && !atomic_load(quit)) {
		int rc = px_handle_events(g.px, g.loop_forever ? -1 : 2);
		if (rc == -ESHUTDOWN && atomic_load(&g.stop_called))
			break;
		if (rc < 0) {
			atomic_store(&g.loop_err, rc);
			break;
		}
	}
	return NULL;
}

/* Loop threads that come and go: every few milliseconds one of them
 * leaves (its thread exits) and a new one takes its place, so that work a
 * thread submitted outlives it. */
static struct {
	pthread_t th[M_MAX_LOOPS];
	atomic_int quit[M_MAX_LOOPS];
	uint64_t rng;
} g_lt;

static void *churn_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&g.loop_stop)) {
		struct timespec ts = { 0, 2000000 + (long)rn(&g_lt.rng, 15000000) };
		nanosleep(&ts, NULL);
		if (atomic_load(&g.loop_stop))
			break;
		int i = (int)rn(&g_lt.rng, (unsigned)g.nloops);
		atomic_store(&g_lt.quit[i], 1);
		pthread_join(g_lt.th[i], NULL);
		atomic_store(&g_lt.quit[i], 0);
		pthread_create(&g_lt.th[i], NULL, loop_main, &g_lt.quit[i]);
	}
	return NULL;
}

static void racer_cb(const px_completion *c)
{
	rtok *t = c->user;
	if (t < g_rc.tok || t >= g_rc.tok + R_MAX_TOK) {
		bad("racer: a callback with a user pointer %p not its own",
		    c->user);
		return;
	}
	if (atomic_fetch_add(&t->calls, 1))
		bad("racer: %s %d called back twice (error %d)",
		    kind_name[t->kind], (int)(t - g_rc.tok), c->error);
	atomic_store(&t->error, c->error);
	if (c->error == ECANCELED && !g.destroying)
		atomic_store(&t->live_cancel, 1);
	if (c->op != (t->kind == MK_POST ? PX_OP_POST : PX_OP_TIMER))
		bad("racer: %s %d: completion says op %d", kind_name[t->kind],
		    (int)(t - g_rc.tok), c->op);
	/* the id is compared after px_destroy: the callback may run
	 * before px_timer_start has returned it */
	atomic_store(&t->cb_id, c->timer_id);
	if (t->kind == MK_TIMER && c->error == 0 && h_now_ns() < t->due_ns)
		bad("racer: timer %d fired %" PRIu64 " ns early",
		    (int)(t - g_rc.tok), t->due_ns - h_now_ns());
	if (c->error && c->error != ECANCELED)
		bad("racer: %s %d: error %d", kind_name[t->kind],
		    (int)(t - g_rc.tok), c->error);
}

/* A start of the racer's returned rc: -ESHUTDOWN only once px_stop was
 * called, and always once it had returned (stopped: read before the
 * start). */
static bool racer_rc(const char *what, int rc, bool stopped)
{
	if (rc == 0 && !stopped)
		return true;
	if (rc == -ESHUTDOWN && atomic_load(&g.stop_called))
		return false;
	bad("racer: %s returned %d%s", what, rc,
	    stopped ? " after px_stop returned" : "");
	return false;
}

static void racer_stats(void)
{
	struct px_stats st;
	int rc = px_stats(g.px, &st);
	if (rc != 0) {
		bad("racer: px_stats: %d", rc);
		return;
	}
	for (unsigned i = 0; i < st.nproc && i < 2; i++) {
		const px_proc_stats *p = &st.proc[i];
		if (p->started != p->completed + p->cancelled + p->timed_out +
				  p->in_flight)
			bad("racer: px_stats processor %u: started %" PRIu64
			    " != completed %" PRIu64 " + cancelled %" PRIu64
			    " + timed out %" PRIu64 " + in flight %" PRIu64, i,
			    p->started, p->completed, p->cancelled,
			    p->timed_out, p->in_flight);
	}
	const struct px_stats *q = &g_rc.st_prev;
	if (g_rc.st_have &&
	    (st.started < q->started || st.completed < q->completed ||
	     st.cancelled < q->cancelled || st.timed_out < q->timed_out ||
	     st.posts < q->posts || st.timer_callbacks < q->timer_callbacks ||
	     st.callbacks < q->callbacks))
		bad("racer: px_stats: a total went down since its last "
		    "snapshot");
	g_rc.st_prev = st;
	g_rc.st_have = true;
}

static void racer_scb(const px_completion *c)
{
	struct rsop *o = c->user;
	if (atomic_fetch_add(&o->calls, 1)) {
		bad("racer: stream op %d called back twice",
		    (int)(o - g_rc.sop));
		return;
	}
	atomic_store(&o->bytes, c->bytes);
	atomic_store(&o->error, c->error);
	atomic_store(&o->late, g.destroying || atomic_load(&g_rc.stop));
	atomic_store(&o->eof_ok, atomic_load(&g_rc.wclosed));
	atomic_fetch_add(&g_rc.io_done, 1);
	if (c->op != (o->write ? PX_OP_WRITE_STREAM : PX_OP_READ_STREAM) ||
	    c->fd != g_rc.snum[o->write ? 0 : 1] || c->bytes > o->len)
		bad("racer: stream op %d: completion says op %d fd %d, %zu "
		    "of %zu bytes", (int)(o - g_rc.sop), c->op, c->fd, c->bytes,
		    o->len);
}

/* A read or write on the racer's own pair, while fewer than three of
 * the kind are waiting. */
static void racer_stream(uint64_t *r, bool stopped)
{
	if (g_rc.sfd[0] < 0 || g_rc.nsop >= R_MAX_SOPS)
		return;
	bool write = rn(r, 2);
	int waiting = 0;
	for (int i = 0; i < g_rc.nsop; i++)
		waiting += g_rc.sop[i].write == write &&
			   !atomic_load(&g_rc.sop[i].calls);
	if (waiting >= 3)
		return;
	struct rsop *o = &g_rc.sop[g_rc.nsop];
	o->write = write;
	o->all = write && rn(r, 2);
	o->len = 1 + rn(r, rn(r, 2) ? 20000 : 300);
	o->buf = calloc(1, o->len);
	if (!o->buf)
		return;
	int rc;
	atomic_fetch_add(&g_rc.io_started, 1);
	if (write) {
		o->pos = g_rc.wpos;
		h_pattern(o->buf, o->len, (uint32_t)g.seed ^ 0x7acce55u, o->pos);
		rc = o->all ? px_write_stream_all(g.px, g_rc.sfd[0], o->buf,
						  o->len, racer_scb, o)
			    : px_write_stream(g.px, g_rc.sfd[0], o->buf, o->len,
					      racer_scb, o);
	} else {
		rc = px_read_stream(g.px, g_rc.sfd[1], o->buf, o->len, racer_scb,
				    o);
	}
	if (!racer_rc(write ? "px_write_stream" : "px_read_stream", rc,
		      stopped)) {
		atomic_fetch_sub(&g_rc.io_started, 1);
		free(o->buf);
		o->buf = NULL;
		return;
	}
	if (write)
		g_rc.wpos += o->len;
	g_rc.nsop++;
}

/* After px_destroy: each of the pair's operations called back once,
 * with error 0 (a write-all with every byte, a read with some: nobody
 * shuts the writer down) or, from px_destroy, ECANCELED; the bytes the
 * reads got, then what is left in fd[1], are the writes' bytes. */
static void racer_stream_check(void)
{
	size_t cap = 0, nw = 0, nr = 0;
	for (int i = 0; i < g_rc.nsop; i++)
		cap += g_rc.sop[i].write ? g_rc.sop[i].len : 0;
	uint8_t *want = malloc(cap + 1), *got = malloc(cap + 1);
	if (!want || !got)
		goto out;
	for (int i = 0; i < g_rc.nsop && !g.bad; i++) {
		struct rsop *o = &g_rc.sop[i];
		int e = atomic_load(&o->error);
		size_t n = atomic_load(&o->bytes);
		if (atomic_load(&o->calls) != 1) {
			bad("racer: stream op %d: %d callbacks after px_destroy",
			    i, atomic_load(&o->calls));
			break;
		}
		if (e && !(e == ECANCELED && atomic_load(&o->late)))
			bad("racer: stream %s %d: error %d (%s)",
			    o->write ? "write" : "read", i, e, strerror(e));
		else if (!e && (o->all ? n != o->len
				       : n == 0 && !atomic_load(&o->eof_ok)))
			bad("racer: stream %s%s %d: error 0 with %zu of %zu bytes",
			    o->write ? "write" : "read", o->all ? "-all" : "", i,
			    n, o->len);
		if (o->write) {
			memcpy(want + nw, o->buf, n);
			nw += n;
		} else if (nr + n <= cap) {
			memcpy(got + nr, o->buf, n);
			nr += n;
		} else {
			bad("racer: the reads got more bytes than were written");
		}
	}
	if (atomic_load(&g_rc.wclosed) && atomic_load(&g_rc.ccalls) != 1)
		bad("racer: px_close of its writer: %d callbacks after "
		    "px_destroy", atomic_load(&g_rc.ccalls));
	if (g.bad)
		goto out;
	for (;;) {
		ssize_t n = cap > nr ? recv(g_rc.sfd[1], got + nr, cap - nr,
					    MSG_DONTWAIT) : 0;
		if (n <= 0)
			break;
		nr += (size_t)n;
	}
	if (nr != nw || memcmp(want, got, nw) != 0) {
		size_t at = 0;
		while (at < nr && at < nw && want[at] == got[at])
			at++;
		bad("racer: its stream got %zu bytes, its writes reported %zu; "
		    "they differ from byte %zu", nr, nw, at);
	}
out:
	free(want);
	free(got);
}

/* px_close of the racer's writer: after every write's callback. */
static void racer_ccb(const px_completion *c)
{
	if (c->op != PX_OP_CLOSE || c->error)
		bad("racer: px_close of its writer: op %d, error %d", c->op,
		    c->error);
	if (atomic_fetch_add(&g_rc.ccalls, 1))
		bad("racer: px_close of its writer called back twice");
	for (int i = 0; i < g_rc.nsop; i++)
		if (g_rc.sop[i].write && !atomic_load(&g_rc.sop[i].calls))
			bad("racer: px_close of its writer called back before "
			    "write %d", i);
	atomic_fetch_add(&g_rc.io_done, 1);
}

/* The racer's stream operations not yet called back. */
static int racer_pending(void)
{
	return g_rc.on ? (int)(atomic_load(&g_rc.io_started) -
			       atomic_load(&g_rc.io_done)) : 0;
}

static void *racer_main(void *arg)
{
	(void)arg;
	uint64_t *r = &g_rc.rng;
	while (!atomic_load(&g_rc.stop) && !atomic_load(&g.bad)) {
		unsigned k = rn(r, 100);
		bool stopped = atomic_load(&g.stop_done);
		if (k < 55) {
			int n = atomic_load(&g_rc.nfds);
			if (n) {
				int fd = atomic_load(&g_rc.fds[rn(r, (unsigned)n)]);
				int rc = px_cancel(g.px, fd);
				g_rc.ncancels++;
				if (rc < 0)
					bad("racer: px_cancel(%d): %d", fd, rc);
			}
		} else if (k < 60) {
			racer_stats();
		} else if (k < 70) {
			racer_stream(r, stopped);
		} else if (k < 80 && g_rc.ntok < R_MAX_TOK) {
			rtok *t = &g_rc.tok[g_rc.ntok];
			t->kind = MK_POST;
			t->cancel_rc = 1;
			if (racer_rc("px_post", px_post(g.px, racer_cb, t),
				     stopped))
				g_rc.ntok++;
		} else if (k < 92 && g_rc.ntok < R_MAX_TOK) {
			rtok *t = &g_rc.tok[g_rc.ntok];
			uint64_t delay = rn(r, 3) ? rn(r, 2000000) : 0;
			t->kind = MK_TIMER;
			t->cancel_rc = 1;
			t->due_ns = h_now_ns() + delay;
			t->id = px_timer_start(g.px, delay, racer_cb, t);
			if (racer_rc("px_timer_start", t->id > 0 ? 0 : (int)t->id,
				     stopped))
				g_rc.ntok++;
		} else if (g_rc.ntok) {
			/* cancel one of the last few timers */
			int i = g_rc.ntok - 1 - (int)rn(r, g_rc.ntok < 8
							  ? (unsigned)g_rc.ntok : 8);
			rtok *t = &g_rc.tok[i];
			if (t->kind == MK_TIMER && t->cancel_rc == 1) {
				t->cancel_rc = px_timer_cancel(g.px, t->id);
				if (t->cancel_rc != 0 && t->cancel_rc != -ENOENT)
					bad("racer: px_timer_cancel: %d",
					    t->cancel_rc);
			}
		}
		if (rn(r, 4)) {
			struct timespec ts = { 0, 5000 + (long)rn(r, 200000) };
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
	}
	/* its reads would wait for px_destroy: the drain's px_stats
	 * wants nothing in flight (ECANCELED is taken from here on).  The
	 * writer goes by px_close in half the seeds: its callback must
	 * come after those of the writes (racer_ccb), and the reads may
	 * then see the end of the stream. */
	if (g_rc.sfd[0] >= 0 && rn(r, 2)) {
		atomic_store(&g_rc.wclosed, 1);
		atomic_fetch_add(&g_rc.io_started, 1);
		int rc = px_close(g.px, g_rc.sfd[0], racer_ccb, &g_rc);
		if (rc != 0) {
			atomic_fetch_sub(&g_rc.io_started, 1);
			if (rc != -ESHUTDOWN || !atomic_load(&g.stop_called))
				bad("racer: px_close of its writer: %d", rc);
			atomic_store(&g_rc.wclosed, 0);
		} else {
			g_rc.sfd[0] = -1;       /* px_close closes it */
		}
	}
	for (int i = 0; i < 2; i++)
		if (g_rc.sfd[i] >= 0)
			px_cancel(g.px, g_rc.sfd[i]);
	return NULL;
}

/* After px_destroy: each start of the racer called back once; a timer
 * ECANCELED only if px_timer_cancel returned 0 or px_destroy took it
 * waiting, and fired (error 0) only if no px_timer_cancel returned 0. */
static void racer_check(void)
{
	for (int i = 0; i < g_rc.ntok && !g.bad; i++) {
		rtok *t = &g_rc.tok[i];
		int n = atomic_load(&t->calls), e = atomic_load(&t->error);
		if (n != 1)
			bad("racer: %s %d: %d callbacks after px_destroy",
			    kind_name[t->kind], i, n);
		else if (t->kind == MK_TIMER && e == 0 && t->cancel_rc == 0)
			bad("racer: timer %d fired after px_timer_cancel "
			    "returned 0", i);
		else if (t->kind == MK_TIMER && atomic_load(&t->live_cancel) &&
			 t->cancel_rc != 0)
			bad("racer: timer %d: ECANCELED before px_destroy, but "
			    "px_timer_cancel returned %d", i, t->cancel_rc);
		else if (t->kind == MK_TIMER && atomic_load(&t->cb_id) != t->id)
			bad("racer: timer %d: completion says id %" PRId64
			    ", started as %" PRId64, i,
			    (int64_t)atomic_load(&t->cb_id), t->id);
		else if (t->kind == MK_POST && e != 0)
			bad("racer: post %d: error %d", i, e);
	}
}

typedef struct driver {
	uint64_t rng;
	int who;
	int steps;
} driver;

static void drive(driver *d)
{
	for (int i = 0; i < d->steps && !g.bad; i++) {
		lock();
		if (g.stop_mode && d->who == 0 && i == g.stop_step) {
			if (g.stop_in_cb)
				g.stop_armed = true;
			else
				do_stop("driver");
		}
		step(&d->rng, d->who, NULL);
		unlock();
		unsigned k = rn(&d->rng, 4);
		if (g.nloops == 0 && d->who == 0) {
			if (k == 0) {
				bool stopped = atomic_load(&g.stop_done);
				int rc = px_handle_events(g.px, rn(&d->rng, 3) ? 0 : 1);
				if (stopped && rc != -ESHUTDOWN) {
					lock();
					bad("px_handle_events after px_stop: %d",
					    rc);
					unlock();
				}
				if (rc == -ESHUTDOWN && atomic_load(&g.stop_called))
					rc = 0;
				if (rc < 0) {
					lock();
					bad("px_handle_events: %d", rc);
					unlock();
				}
			}
		} else if (k == 0) {
			struct timespec ts = { 0, 20000 + (long)rn(&d->rng, 200000) };
			nanosleep(&ts, NULL);
		}
	}
}

static void *driver_main(void *arg)
{
	drive(arg);
	return NULL;
}

/* Pending: started, not yet called back (a periodic timer that was not
 * cancelled counts). */
static int pending_ops(bool io_only)
{
	int n = 0;
	for (int i = 0; i < g.nops; i++) {
		mop *o = g.op[i];
		if (o->rc != 0 || o->calls)
			continue;
		if (io_only && (o->kind == MK_TIMER || o->kind == MK_POST))
			continue;
		n++;
	}
	return n;
}

static void describe_pending(char *out, size_t len)
{
	size_t pos = 0;
	out[0] = '\0';
	for (int i = 0; i < g.nops && pos + 80 < len; i++) {
		mop *o = g.op[i];
		if (o->rc != 0 || o->calls)
			continue;
		pos += (size_t)snprintf(out + pos, len - pos, " #%d %s%s%s fd %d;",
					o->id, kind_name[o->kind],
					o->vec ? " vec" : "", o->all ? " all" : "",
					o->fd);
	}
}

/* After px_destroy: what is left in the readers, and the streams and
 * datagrams against what the writes reported. */
static void drain_and_compare(void)
{
	for (int c = 0; c < g.nch && !g.bad; c++) {
		mch *ch = &g.ch[c];
		mfd *rf = &g.fd[ch->rfdi];
		/* the expected stream */
		size_t elen = 0;
		for (int i = 0; i < g.nops; i++)
			if (g.op[i]->ch == c && g.op[i]->rc == 0 &&
			    (g.op[i]->kind == MK_WRITE || g.op[i]->kind == MK_DWRITE))
				elen += g.op[i]->bytes;
		size_t rlen = 0;        /* what the reads got */
		for (int i = 0; i < g.nops; i++)
			if (g.op[i]->ch == c && g.op[i]->rc == 0 &&
			    g.op[i]->kind == MK_READ)
				rlen += g.op[i]->bytes;
		if (!rf->closing) {
			int fl = fcntl(rf->fd, F_GETFL);
			fcntl(rf->fd, F_SETFL, fl | O_NONBLOCK);
			ch->drain = malloc(elen + M_DGRAM_MAX + 1);
			/* TCP: what the sender's queue still holds comes as the
			 * window opens; wait for it a little while */
			uint64_t quiet = h_deadline(ch->tcp ? 300 : 0);
			for (;;) {
				ssize_t n = read(rf->fd, ch->drain + ch->ndrain,
						 ch->dgram ? M_DGRAM_MAX
							   : elen + 1 - ch->ndrain);
				if (n < 0 && errno == EAGAIN && !ch->dgram &&
				    rlen + ch->ndrain < elen &&
				    h_now_ms() < quiet) {
					struct pollfd pfd = { .fd = rf->fd,
							      .events = POLLIN };
					poll(&pfd, 1, 10);
					continue;
				}
				if (n <= 0)
					break;
				quiet = h_deadline(ch->tcp ? 300 : 0);
				if (ch->dgram) {
					/* one datagram: kept as a read of its own,
					 * after the others */
					mop *o = new_op(MK_DREAD, ch->rfdi, (size_t)n);
					if (!o || !o->len)
						break;
					memcpy(o->buf, ch->drain, (size_t)n);
					o->ch = c;
					o->rc = 0;
					o->calls = 1;
					o->bytes = (size_t)n;
					continue;
				}
				ch->ndrain += (size_t)n;
				if (ch->ndrain > elen)
					break;
			}
		}
		if (ch->dgram) {
			/* the datagrams that arrived, in read start order, must
			 * be the writes that reported success, in start order */
			int wi = 0;
			for (int i = 0; i < g.nops && !g.bad; i++) {
				mop *o = g.op[i];
				if (o->ch != c || o->rc != 0 || o->kind != MK_DREAD ||
				    o->error || o->bytes == 0)
					continue;
				uint32_t id, l;
				memcpy(&id, o->buf, 4);
				memcpy(&l, o->buf + 4, 4);
				mop *w = o->bytes >= 8 && id >= 1 &&
						 (int)id <= g.nops ? g.op[id - 1] : NULL;
				if (!w || w->ch != c || w->kind != MK_DWRITE ||
				    l != w->len || o->bytes != w->len ||
				    memcmp(o->buf + 8, w->buf + 8, w->len - 8)) {
					bad("channel %d: read #%d got %zu bytes that "
					    "are no whole datagram of a write", c,
					    o->id, o->bytes);
					break;
				}
				if (w->rc != 0 || w->error) {
					bad("channel %d: write #%u reported error %d "
					    "(%s) (start %d), but its datagram arrived "
					    "(read #%d)", c, id, w->error,
					    strerror(w->error), w->rc, o->id);
					break;
				}
				while (wi < g.nops &&
				       !(g.op[wi]->ch == c &&
					 g.op[wi]->kind == MK_DWRITE &&
					 g.op[wi]->rc == 0 && g.op[wi]->error == 0))
					wi++;
				if (wi >= g.nops || g.op[wi] != w) {
					bad("channel %d: read #%d got write #%u's "
					    "datagram; expected next: #%d (lost, "
					    "twice or out of order)", c, o->id, id,
					    wi < g.nops ? g.op[wi]->id : -1);
					break;
				}
				wi++;
			}
			if (!ch->inexact && !g.bad)
				for (; wi < g.nops; wi++) {
					mop *x = g.op[wi];
					if (x->ch == c && x->kind == MK_DWRITE &&
					    x->rc == 0 && x->error == 0) {
						bad("channel %d: write #%d reported "
						    "sent, its datagram never arrived",
						    c, x->id);
						break;
					}
				}
			continue;
		}
		/* stream: reads in start order, then the drain */
		int wi = -1;
		size_t wpos = 0, at = 0;
		mop *w = NULL;
		for (int i = 0; i <= g.nops && !g.bad; i++) {
			const uint8_t *src;
			size_t n;
			int rid;
			if (i < g.nops) {
				mop *o = g.op[i];
				if (o->ch != c || o->rc != 0 || o->kind != MK_READ ||
				    o->bytes == 0)
					continue;
				/* the read's bytes, gathered from its pieces */
				src = o->buf;
				n = o->bytes;
				rid = o->id;
			} else {
				src = ch->drain;
				n = ch->ndrain;
				rid = 0;
			}
			for (size_t j = 0; j < n; j++, at++) {
				while (!w || wpos >= w->bytes) {
					w = NULL;
					wpos = 0;
					for (wi++; wi < g.nops; wi++) {
						mop *x = g.op[wi];
						if (x->ch == c && x->kind == MK_WRITE &&
						    x->rc == 0 && x->bytes) {
							w = x;
							break;
						}
					}
					if (!w)
						break;
				}
				if (!w) {
					bad("channel %d (fd %d -> %d): byte %zu "
					    "(%s #%d) beyond the %zu bytes the writes "
					    "report", c, g.fd[ch->wfdi].fd, rf->fd,
					    at, rid ? "read" : "left after destroy,",
					    rid, at);
					break;
				}
				if (src[j] != w->buf[wpos]) {
					bad("channel %d (fd %d -> %d): byte %zu (%s "
					    "#%d, its byte %zu) is %02x, want %02x: "
					    "byte %zu of write #%d (%zu of %zu "
					    "bytes reported, error %d)", c,
					    g.fd[ch->wfdi].fd, rf->fd, at,
					    rid ? "read" : "left after destroy,", rid,
					    j, src[j], w->buf[wpos], wpos, w->id,
					    w->bytes, w->len, w->error);
					break;
				}
				wpos++;
			}
		}
		if (g.bad || ch->inexact)
			continue;
		/* everything reported written arrived */
		if (w && wpos < w->bytes)
			bad("channel %d: %zu bytes arrived; write #%d reported "
			    "%zu, only %zu of them arrived", c, at, w->id,
			    w->bytes, wpos);
		else
			for (wi++; wi < g.nops; wi++) {
				mop *x = g.op[wi];
				if (x->ch == c && x->kind == MK_WRITE && x->rc == 0 &&
				    x->bytes) {
					bad("channel %d: %zu bytes arrived; write "
					    "#%d reported %zu bytes (error %d), none "
					    "arrived", c, at, x->id, x->bytes,
					    x->error);
					break;
				}
			}
	}
}

/* After px_destroy: the connections left in the listener's backlog, and
 * every connect to it that completed with 0 accepted exactly once (unless
 * px_close closed the listener, which drops what it held). */
static void drain_listener(void)
{
	if (g.lfdi < 0 || g.fd[g.lfdi].closing || g.fd[g.lfdi].shut_rd)
		return;
	int l = g.fd[g.lfdi].fd;
	fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK);
	uint64_t dl = h_deadline(300);
	for (;;) {
		struct sockaddr_storage pa;
		socklen_t pl = sizeof pa;
		int nfd = accept4(l, (struct sockaddr *)&pa, &pl, SOCK_CLOEXEC);
		if (nfd >= 0) {
			close(nfd);
			note_accepted(addr_port(&pa, pl), 0);
			continue;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
			bad("accept4 on the listener after px_destroy: %s",
			    strerror(errno));
			return;
		}
		int missing = 0;
		for (int i = 0; i < g.nfd; i++)
			if (g.fd[i].live_ok &&
			    !g.fd[i].accepted)
				missing++;
		if (!missing || g.bad)
			break;
		if (h_now_ms() > dl) {
			for (int i = 0; i < g.nfd; i++)
				if (g.fd[i].live_ok &&
				    !g.fd[i].accepted) {
					bad("fd %d (port %d): its connect to the "
					    "listener completed, the connection was "
					    "neither accepted nor left in the "
					    "backlog", g.fd[i].fd, g.fd[i].port);
					break;
				}
			break;
		}
		struct pollfd p = { .fd = l, .events = POLLIN };
		poll(&p, 1, 10);
	}
}

static void free_seed(void)
{
	for (int i = 0; i < g.nops; i++) {
		free(g.op[i]->buf);
		free(g.op[i]);
	}
	for (int c = 0; c < g.nch; c++)
		free(g.ch[c].drain);
	for (int i = 0; i < g.nfd; i++)
		if (!g.fd[i].closing && g.fd[i].fd >= 0)
			close(g.fd[i].fd);
	int extra[] = { g.lguard, g.refused_fd, g.full_fd, g.full_fill };
	for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
		if (extra[i] >= 0)
			close(extra[i]);
	g.nops = g.nfd = g.nch = 0;
}

static bool run_seed(uint64_t seed, int steps)
{
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	bool trace = g.trace;
	memset(&g, 0, sizeof g);
	g.trace = trace;
	pthread_mutex_init(&g.mu, &ma);
	g.seed = seed;
	uint64_t r = seed * 0x100000001b3ull + 7;
	static const unsigned aio[] = { 0, 0, 1, 2, 3, 4, 8 };
	g.max_aio = aio[rn(&r, sizeof aio / sizeof aio[0])];
	g.nloops = (int)rn(&r, 3);
	g.ndrivers = rn(&r, 3) == 0 ? 2 : 1;
	/* drawn all the same, so that the other draws keep to the seed */
	if (g_env_loops >= 0)
		g.nloops = g_env_loops;
	if (g_env_drivers >= 1)
		g.ndrivers = g_env_drivers;
	g.steps = steps;
	bool destroy_at_once = rn(&r, 3) == 0;
	g.cb_rng = rnd(&r);
	/* px_stop in some seeds, drawn apart so that the other draws keep
	 * to the seed */
	uint64_t rs = seed * 0x9e3779b97f4a7c15ull + 0x5709;
	g.stop_mode = rn(&rs, 6) == 0;
	g.stop_in_cb = rn(&rs, 2);
	g.stop_step = (int)rn(&rs, (unsigned)steps + 1);
	g.dg_named = rn(&rs, 2);
	g.loop_forever = g.stop_mode && rn(&rs, 2);
	memset(&g_rc, 0, sizeof g_rc);
	g_rc.sfd[0] = g_rc.sfd[1] = -1;
	g_rc.on = rn(&rs, 3) == 0;
	g_rc.rng = rnd(&rs);
	if (g_env_racer >= 0)
		g_rc.on = g_env_racer;
	atomic_store(&g.stop_called, 0);
	atomic_store(&g.stop_done, 0);

	px_config cfg = h_cfg;
	cfg.primary.max_aio = g.max_aio;
	if (cfg.secondary.processor != PX_PROCESSOR_NONE)
		cfg.secondary.max_aio = g.max_aio;
	char err[512] = "";
	int rc = px_create_config(&g.px, &cfg, err, sizeof err);
	if (rc != 0) {
		bad("px_create_config: %d %s: %s", rc, px_strerror(rc), err);
		return false;
	}
	px_config ecfg;
	px_config_parse(&ecfg, px_engine_name(g.px), NULL, 0);
	g.vec_file = true;
	const px_processor_config *pc[2] = { &ecfg.primary, &ecfg.secondary };
	for (int i = 0; i < 2; i++)
		if (pc[i]->processor != PX_PROCESSOR_NONE &&
		    (!pc[i]->ops || (pc[i]->ops & PX_OP_BIT(PX_OP_READ_FILE)))) {
			g.vec_file = strcmp(pc[i]->provider, "posix") != 0;
			break;
		}
	for (int i = 0; i < 2; i++)
		if (pc[i]->processor != PX_PROCESSOR_NONE &&
		    (!pc[i]->ops || (pc[i]->ops & PX_OP_BIT(PX_OP_ACCEPT)))) {
			g.net = strcmp(pc[i]->provider, "posix") != 0;
			break;
		}
	if (g.trace)
		printf("model: seed %" PRIu64 ": max_aio %u, %d loop threads, %d "
		       "drivers, %s, %d steps%s\n", seed, g.max_aio, g.nloops,
		       g.ndrivers, g.stop_mode ? "px_stop" :
		       destroy_at_once ? "destroy at once" : "drain", steps,
		       g.dg_named ? ", named datagram sockets" : "");
	if (g.trace && g_rc.on)
		printf("model: the racer cancels, posts and times beside\n");
	if (g.trace && g.loop_forever && g.nloops)
		printf("model: loop threads wait without a bound\n");
	if (!setup_fds())
		goto out;
	if (g_rc.on && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				  g_rc.sfd) == 0) {
		small_bufs(g_rc.sfd[0], false);
		small_bufs(g_rc.sfd[1], false);
		g_rc.snum[0] = g_rc.sfd[0];
		g_rc.snum[1] = g_rc.sfd[1];
	}
	if (g.trace)
		for (int c = 0; c < g.nch; c++)
			printf("model: channel %d: fd %d -> fd %d (%s)\n", c,
			       g.fd[g.ch[c].wfdi].fd, g.fd[g.ch[c].rfdi].fd,
			       g.ch[c].dgram ? "datagram" : g.ch[c].tcp ? "TCP" :
			       g.fd[g.ch[c].wfdi].peer < 0 ? "pipe" : "AF_UNIX");

	pthread_t dt, dt2, ct;
	atomic_store(&g.loop_stop, 0);
	atomic_store(&g.loop_err, 0);
	driver d0 = { .rng = rnd(&r), .who = 0, .steps = steps };
	driver d1 = { .rng = rnd(&r), .who = 1, .steps = steps / 2 };
	bool churn = g.nloops && rn(&r, 3) == 0;
	churn = churn && !g.loop_forever;      /* could not make them leave */
	g_lt.rng = rnd(&r);
	if (g.trace && churn)
		printf("model: loop threads come and go\n");
	for (int i = 0; i < g.nloops; i++) {
		atomic_store(&g_lt.quit[i], 0);
		pthread_create(&g_lt.th[i], NULL, loop_main, &g_lt.quit[i]);
	}
	if (churn)
		pthread_create(&ct, NULL, churn_main, NULL);
	/* a third driver (PX_MODEL_DRIVERS=3) draws its own sequence after
	 * the seed's other draws, which stay as they were */
	uint64_t r3 = rnd(&r) ^ 0x5bd1e995u;
	driver d2 = { .rng = rnd(&r3), .who = 2, .steps = steps / 2 };
	if (g_rc.on)
		pthread_create(&g_rc.th, NULL, racer_main, NULL);
	if (g.ndrivers >= 2)
		pthread_create(&dt, NULL, driver_main, &d1);
	if (g.ndrivers >= 3)
		pthread_create(&dt2, NULL, driver_main, &d2);
	drive(&d0);
	if (g.ndrivers >= 2)
		pthread_join(dt, NULL);
	if (g.ndrivers >= 3)
		pthread_join(dt2, NULL);
	if (g_rc.on) {
		atomic_store(&g_rc.stop, 1);
		pthread_join(g_rc.th, NULL);
	}
	if (g.stop_mode) {
		lock();
		do_stop("at the end");          /* no callback took the arming */
		g.stop_armed = false;
		do_stats();
		unlock();
		int rc2 = px_handle_events(g.px, 0);
		if (rc2 != -ESHUTDOWN) {
			lock();
			bad("px_handle_events after px_stop: %d", rc2);
			unlock();
		}
	}

	if (!destroy_at_once && !g.stop_mode) {
		/* every descriptor cancelled, every callback awaited */
		lock();
		g.draining = true;
		for (int i = 0; i < g.nfd; i++)
			do_cancel(&r, i);
		/* zombies on numbers nobody holds now */
		for (int i = 0; i < g.nops; i++) {
			mop *z = g.op[i];
			bool held = false;
			for (int j = 0; j < g.nfd; j++)
				held |= !g.fd[j].closing && g.fd[j].fd == z->fd;
			if (z->zombie && z->rc == 0 && !z->calls && !held)
				px_cancel(g.px, z->fd);
		}
		for (int i = 0; i < g.nops; i++) {
			mop *t = g.op[i];
			if (t->kind == MK_TIMER && t->rc == 0 && t->cancel_rc == 1 &&
			    t->periodic)
				t->cancel_rc = px_timer_cancel(g.px, t->timer_id);
		}
		unlock();
		uint64_t dl = h_deadline(3000);
		for (;;) {
			lock();
			int n = pending_ops(false) + racer_pending();
			unlock();
			if (!n || g.bad || h_now_ms() > dl)
				break;
			if (g.nloops)
				h_sleep_ms(1);
			else
				px_handle_events(g.px, 5);
		}
		lock();
		struct px_stats st;
		if (!pending_ops(false) && !racer_pending() && !g.bad &&
		    px_stats(g.px, &st) == 0 &&
		    (st.in_flight ||
		     st.started != st.completed + st.cancelled + st.timed_out))
			bad("px_stats with every callback run: started %" PRIu64
			    ", completed %" PRIu64 ", cancelled %" PRIu64
			    ", timed out %" PRIu64 ", in flight %" PRIu64,
			    st.started, st.completed, st.cancelled,
			    st.timed_out, st.in_flight);
		if (pending_ops(false) && !g.bad) {
			char list[600];
			describe_pending(list, sizeof list);
			bad("%d operations not called back 3 s after px_cancel of "
			    "every descriptor:%s", pending_ops(false), list);
		}
		unlock();
	}
	atomic_store(&g.loop_stop, 1);
	if (churn)
		pthread_join(ct, NULL);
	for (int i = 0; i < g.nloops; i++)
		pthread_join(g_lt.th[i], NULL);
	if (atomic_load(&g.loop_err))
		bad("px_handle_events in a loop thread: %d",
		    atomic_load(&g.loop_err));
out:
	g.destroying = true;
	rc = px_destroy(g.px);
	g.px = NULL;
	if (rc != 0)
		bad("px_destroy: %d", rc);
	for (int i = 0; i < g.nops && !g.bad; i++) {
		mop *o = g.op[i];
		if (o->rc == 0 && o->calls != 1)
			bad("#%d %s on fd %d: %d callbacks after px_destroy",
			    o->id, kind_name[o->kind], o->fd, o->calls);
		if (o->rc != 0 && o->calls)
			bad("#%d %s: the start failed (%d) but it was called back",
			    o->id, kind_name[o->kind], o->rc);
	}
	if (g.trace && g_rc.on)
		printf("model: the racer: %d px_cancel, %d posts and timers, "
		       "%d stream operations\n", g_rc.ncancels, g_rc.ntok,
		       g_rc.nsop);
	if (!g.bad)
		racer_check();
	if (!g.bad && g_rc.on)
		racer_stream_check();
	for (int i = 0; i < g_rc.nsop; i++)
		free(g_rc.sop[i].buf);
	for (int i = 0; i < 2; i++)
		if (g_rc.sfd[i] >= 0)
			close(g_rc.sfd[i]);
	if (!g.bad)
		drain_and_compare();
	if (!g.bad)
		drain_listener();
	bool ok = !g.bad;
	if (!ok || g.trace)
		printf("model: seed %" PRIu64 " (max_aio %u, %d loop threads, %d "
		       "drivers%s, %s): %d operations%s%s\n", seed, g.max_aio,
		       g.nloops, g.ndrivers, g_rc.on ? ", the racer" : "",
		       g.stop_mode ? "stopped" :
		       destroy_at_once ? "destroyed at once" : "drained", g.nops,
		       ok ? "" : ": ", ok ? "" : g.msg);
	free_seed();
	pthread_mutex_destroy(&g.mu);
	return ok;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);
	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void model_random_seeds(void **state)
{
	(void)state;
	g.trace = getenv("PX_MODEL_TRACE") != NULL;
	uint64_t first = env_u64("PX_MODEL_SEED", 1);
	uint64_t count = env_u64("PX_MODEL_COUNT",
				 getenv("PX_MODEL_SEED") ? 1 : M_DEFAULT_SEEDS);
	int steps = (int)env_u64("PX_MODEL_STEPS", M_DEFAULT_STEPS);
	g_env_loops = getenv("PX_MODEL_LOOPS")
			      ? (int)env_u64("PX_MODEL_LOOPS", 0) : -1;
	if (g_env_loops > M_MAX_LOOPS)
		g_env_loops = M_MAX_LOOPS;
	g_env_drivers = getenv("PX_MODEL_DRIVERS")
				? (int)env_u64("PX_MODEL_DRIVERS", 1) : -1;
	if (g_env_drivers > M_MAX_DRIVERS)
		g_env_drivers = M_MAX_DRIVERS;
	g_env_racer = getenv("PX_MODEL_RACER")
			      ? (int)env_u64("PX_MODEL_RACER", 0) != 0 : -1;
	uint64_t t0 = h_now_ms();
	for (uint64_t s = first; s < first + count; s++) {
		alarm(H_WATCHDOG_S);
		if (!run_seed(s, steps)) {
			alarm(0);
			char thr[64] = "";
			if (g_env_loops >= 0)
				snprintf(thr, sizeof thr, "PX_MODEL_LOOPS=%d ",
					 g_env_loops);
			if (g_env_drivers >= 1)
				snprintf(thr + strlen(thr), sizeof thr - strlen(thr),
					 "PX_MODEL_DRIVERS=%d ", g_env_drivers);
			if (g_env_racer >= 0)
				snprintf(thr + strlen(thr), sizeof thr - strlen(thr),
					 "PX_MODEL_RACER=%d ", g_env_racer);
			fail_msg("model: seed %" PRIu64 " failed: %s\n  again: "
				 "%sPX_MODEL_SEED=%" PRIu64 " PX_MODEL_STEPS=%d "
				 "PX_MODEL_TRACE=1 build/test/fault '%s' "
				 "model_random_seeds", s, g.msg, thr, s, steps,
				 h_engine_text);
		}
	}
	alarm(0);
	if (count > M_DEFAULT_SEEDS)
		printf("model: %" PRIu64 " seeds from %" PRIu64 " passed in %" PRIu64
		       " ms\n", count, first, h_now_ms() - t0);
}

static const struct CMUnitTest g_tests[] = {
	cmocka_unit_test(model_random_seeds),
};

const struct CMUnitTest *model_tests(size_t *n)
{
	*n = sizeof g_tests / sizeof g_tests[0];
	return g_tests;
}
