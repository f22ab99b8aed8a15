/*
 * providers/select.c - the readiness ("select") provider: completion I/O
 * emulated on top of readiness notification (select, poll or epoll).
 *
 * A start whose direction queue is empty first tries the real call at once,
 * without blocking; most of the time it finishes right there and no wait is
 * involved (with epoll, reads on a descriptor where such tries keep finding
 * nothing go straight to the wait: see skip_try).  Otherwise the result
 * joins one of the descriptor's two FIFO queues (read: read_stream,
 * read_dgram, accept; write: write_stream, write_dgram, connect) and the
 * wait strategy watches the descriptor.  When it is ready the leader
 * performs the call for the queue head, and for the next ones while they
 * finish.  Only a queue head is ever tried, and only by one thread at a
 * time, so a stream's bytes go in start order whatever the number of
 * threads.
 *
 * The system calls run without the proactor mutex (a change to the locking
 * model of DESIGN.md: with the mutex held, a second thread in
 * px_handle_events spent its time blocked behind the leader's recv/send).
 * The rule is claim, then unlock:
 *  - Under the mutex, the results about to be worked on are marked busy
 *    (sel_priv.busy) and their direction too (px_sel_fd.busy).  They stay
 *    on their queue, so a start in that direction finds it non-empty and
 *    queues behind them instead of trying at once.  A busy direction is
 *    not armed in epoll; whoever holds the claim arms it when letting go.
 *  - The mutex is released around the calls.  The calls use a private copy
 *    of the entry's kind and flags (px_sel_io) and write only the claimed
 *    results: nobody else touches those while they are busy.  Entries are
 *    never freed or moved before destroy, so pointers to them survive the
 *    unlock (the table of pointers may grow meanwhile).
 *  - With the mutex retaken, each claimed result is let go: finished (data,
 *    end of stream, an error) it leaves its queue for the done list; not
 *    ready, it stays at the head and the descriptor is re-armed, unless a
 *    cancel came meanwhile, which then completes it with ECANCELED (bytes
 *    moved so far).  A cancel of a busy result only marks it and answers
 *    PX_CANCEL_PENDING: the result is still on the processor's started
 *    list, and the leader hands it out through next_completed.
 *  - start() claims the new result alone (at the head of its empty queue).
 *    If it finishes and starts queued behind it meanwhile, the descriptor
 *    is armed for them (or, where it cannot be armed, they are done there
 *    and the leader is interrupted to hand them out).
 *  - The leader (next_completed, the only caller of px_sel_claim/run)
 *    claims the ready heads of every descriptor reported by one wait, up to
 *    CLAIM_MAX a queue, then one unlock for all of their calls.
 *
 * Quirks:
 *  - Sockets use recv/send/recvfrom/sendto with MSG_DONTWAIT, so a blocking
 *    socket never blocks the caller; sends add MSG_NOSIGNAL (a closed peer
 *    gives EPIPE in the completion, not SIGPIPE).
 *  - Other streams are recognised by ENOTSOCK.  Regular files and block
 *    devices are always ready: plain read/write at once.  Pipes, FIFOs and
 *    terminals use preadv2/pwritev2 with RWF_NOWAIT (pipes honour it on
 *    recent kernels), so a blocking pipe is never made non-blocking.  Where
 *    the kernel refuses RWF_NOWAIT, an O_NONBLOCK descriptor is used as it
 *    is, and a blocking one is checked with poll(0) first and written at
 *    most PIPE_BUF bytes at a time.  SIGPIPE from those writes is blocked
 *    around the call and swallowed: EPIPE comes in the completion.
 *  - accept sets O_NONBLOCK on a blocking listening socket (and leaves it
 *    so): a connection reset between readiness and accept4 must not block
 *    the leader.  connect sets O_NONBLOCK only around connect(2) and puts
 *    the saved file status flags back at once, whatever the outcome.
 *  - read_file / write_file: pread / pwrite at start, never queued.
 *  - A descriptor closed with operations pending: poll and select notice,
 *    and its operations complete with EBADF.  epoll drops a closed
 *    descriptor silently; such operations stay pending until px_cancel.
 *  - Nothing allocates between start and completion: the descriptor table
 *    (and the poll wait's array) grow at start time, which may fail with
 *    -ENOMEM.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "select.h"

#define SEL_DEFAULT_MAX_AIO 65536u

/* What a descriptor is (px_sel_fd.kind), learnt on first use. */
enum {
	KIND_UNKNOWN = 0,
	KIND_SOCKET,
	KIND_FILE,      /* regular file or block device: always ready */
	KIND_NOWAIT,    /* RWF_NOWAIT keeps it from blocking */
	KIND_NONBLOCK,  /* O_NONBLOCK: plain read/write */
	KIND_BLOCKING,  /* blocking and no RWF_NOWAIT: poll(0) first */
};

/* px_sel_fd.flags */
#define FDF_NONBLOCK_OK 0x1u /* accept: listener known to be O_NONBLOCK */

/* Claimed queue heads tried per direction and event, at most. */
#define CLAIM_MAX 16

/* Where a started result is (sel_priv.at). */
enum { AT_NONE = 0, AT_QUEUE, AT_DONE };

/* Progress of a connect (sel_priv.conn). */
enum { CONN_NEW = 0, CONN_PENDING };

/* Per result private space.  busy, cnext and res belong to the thread
 * that claimed the result (see the opening comment); cancel is set under
 * the mutex by anyone. */
struct sel_priv {
	uint8_t at;
	uint8_t dir;       /* queue it is on, while AT_QUEUE */
	uint8_t conn;
	uint8_t write_all; /* PX_RF_WRITE_ALL, copied at start so the
	                      unlocked path reads only provider state */
	uint8_t busy;      /* claimed: a thread works on it without the mutex */
	uint8_t cancel;    /* a cancel came while busy */
	uint8_t res;       /* batch: RES_UNTRIED or the try's TRY_* + 1 */
	px_result *cnext;  /* batch: next claimed result of the same queue */
};

#define RES_UNTRIED 0

/* Outcome of one attempt at a queue head. */
enum {
	TRY_AGAIN = 0,  /* not ready: stays at the head */
	TRY_DONE,       /* finished (outputs set); go on with the next */
	TRY_DONE_STOP,  /* finished, and the descriptor looks drained */
};

struct px_sel {
	px_provider base;
	px_sel_wait *w;
	px_sel_fd **fds;      /* indexed by descriptor number */
	size_t nfds;
	px_list active;       /* entries with something queued (alink) */
	px_list done;         /* finished, for next_completed (plink) */
	px_sel_fd *batch;     /* leader: entries claimed from one wait (bnext) */
};

static px_sel *to_sel(px_provider *p)
{
	return px_container_of(p, px_sel, base);
}

static struct sel_priv *priv(px_result *r)
{
	return px_result_priv(r);
}

static int op_dir(px_op op)
{
	switch (op) {
	case PX_OP_READ_STREAM:
	case PX_OP_READ_DGRAM:
	case PX_OP_ACCEPT:
		return PX_SEL_RD;
	case PX_OP_WRITE_STREAM:
	case PX_OP_WRITE_DGRAM:
	case PX_OP_CONNECT:
		return PX_SEL_WR;
	default:
		return -1;
	}
}

static bool fd_closed(int fd)
{
	return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* A descriptor's copy for I/O without the mutex (see select.h). */
typedef px_sel_io sel_io;

static void io_load(sel_io *io, const px_sel_fd *e)
{
	io->fd = e->fd;
	io->kind = e->kind;
	io->flags = e->flags;
}

/* Mutex held.  The entry is not idle (a claimed result is queued), so
 * nothing was forgotten meanwhile; later kinds only refine earlier ones. */
static void io_store(px_sel_fd *e, const sel_io *io)
{
	if (io->kind > e->kind)
		e->kind = io->kind;
	e->flags |= io->flags;
}

/* ------------------------------------------------------------------ */
/* Streams that are not sockets                                         */
/* ------------------------------------------------------------------ */

/* e said ENOTSOCK: is it a file (always ready) or something to wait on? */
static int classify(sel_io *e)
{
	struct stat st;

	if (fstat(e->fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		e->kind = KIND_FILE;
	else
		e->kind = KIND_NOWAIT;
	return 0;
}

/* The kernel refused RWF_NOWAIT: go by the file status flags. */
static int downgrade(sel_io *e)
{
	int fl = fcntl(e->fd, F_GETFL);

	if (fl < 0)
		return -errno;
	e->kind = (fl & O_NONBLOCK) ? KIND_NONBLOCK : KIND_BLOCKING;
	return 0;
}

/* 1 if fd shows events (or an error or hang-up) right now, 0 if not. */
static int poll_now(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;

	do {
		n = poll(&p, 1, 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n && (p.revents & POLLNVAL))
		return -EBADF;
	return n > 0;
}

/* Bytes read, or -errno (-EAGAIN: not ready). */
static ssize_t other_read(sel_io *e, void *buf, size_t len)
{
	for (;;) {
		struct iovec iov = { .iov_base = buf, .iov_len = len };
		ssize_t n;
		int rc;

		switch (e->kind) {
		case KIND_NOWAIT:
			n = preadv2(e->fd, &iov, 1, -1, RWF_NOWAIT);
			if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
				rc = downgrade(e);
				if (rc < 0)
					return rc;
				continue;
			}
			break;
		case KIND_BLOCKING:
			rc = poll_now(e->fd, POLLIN);
			if (rc <= 0)
				return rc ? rc : -EAGAIN;
			n = read(e->fd, buf, len);
			break;
		default:
			n = read(e->fd, buf, len);
			break;
		}
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return -errno;
	}
}

static ssize_t other_write_raw(sel_io *e, const void *buf, size_t len)
{
	for (;;) {
		struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
		ssize_t n;
		int rc;

		switch (e->kind) {
		case KIND_NOWAIT:
			n = pwritev2(e->fd, &iov, 1, -1, RWF_NOWAIT);
			if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
				rc = downgrade(e);
				if (rc < 0)
					return rc;
				continue;
			}
			break;
		case KIND_BLOCKING:
			/* POLLOUT promises room for PIPE_BUF bytes, no more. */
			rc = poll_now(e->fd, POLLOUT);
			if (rc <= 0)
				return rc ? rc : -EAGAIN;
			n = write(e->fd, buf, len > PIPE_BUF ? PIPE_BUF : len);
			break;
		default:
			n = write(e->fd, buf, len);
			break;
		}
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return -errno;
	}
}

/* Bytes written, or -errno.  A pipe without reader raises SIGPIPE on
 * write(2); keep it blocked in this thread for the call and take it off the
 * pending set again unless it was pending before. */
static ssize_t other_write(sel_io *e, const void *buf, size_t len)
{
	sigset_t pipe_set, old, pend;
	bool was_pending = false;
	ssize_t n;

	if (e->kind == KIND_FILE)
		return other_write_raw(e, buf, len);
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	if (sigismember(&old, SIGPIPE) && sigpending(&pend) == 0)
		was_pending = sigismember(&pend, SIGPIPE);
	n = other_write_raw(e, buf, len);
	if (n == -EPIPE && !was_pending) {
		const struct timespec zero = { 0, 0 };
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return n;
}

/* ------------------------------------------------------------------ */
/* One attempt per operation                                            */
/* ------------------------------------------------------------------ */

static int try_read_stream(sel_io *e, px_result *r)
{
	ssize_t n;

	if (e->kind <= KIND_SOCKET) {
		do {
			n = recv(e->fd, r->c.buf, r->c.len, MSG_DONTWAIT);
		} while (n < 0 && errno == EINTR);
		if (n >= 0 || errno != ENOTSOCK) {
			e->kind = KIND_SOCKET;
			if (n < 0)
				n = -errno;
			goto out;
		}
		n = classify(e);
		if (n < 0)
			goto out;
	}
	n = other_read(e, r->c.buf, r->c.len);
out:
	if (n == -EAGAIN || n == -EWOULDBLOCK)
		return TRY_AGAIN;
	if (n < 0) {
		px_result_finish(r, 0, (int)-n);
		return TRY_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	/* A short read emptied the buffer: the next one would say EAGAIN.
	 * End of stream is different: every later read sees it at once. */
	return n && (size_t)n < r->c.len ? TRY_DONE_STOP : TRY_DONE;
}

static int try_write_stream(sel_io *e, px_result *r)
{
	for (;;) {
		const char *buf = (const char *)r->c.buf + r->done;
		size_t len = r->c.len - r->done;
		ssize_t n;

		if (e->kind <= KIND_SOCKET) {
			do {
				n = send(e->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			} while (n < 0 && errno == EINTR);
			if (n >= 0 || errno != ENOTSOCK) {
				e->kind = KIND_SOCKET;
				if (n < 0)
					n = -errno;
				goto got;
			}
			n = classify(e);
			if (n < 0)
				goto got;
		}
		n = other_write(e, buf, len);
got:
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return TRY_AGAIN;
		if (n < 0) {
			/* After partial progress too: bytes says how much. */
			px_result_finish(r, r->done, (int)-n);
			return TRY_DONE;
		}
		r->done += (size_t)n;
		if (r->done < r->c.len && priv(r)->write_all) {
			/* A short send means the socket buffer is full; other
			 * descriptors may just take less per call. */
			if (e->kind == KIND_SOCKET || n == 0)
				return TRY_AGAIN;
			continue;
		}
		px_result_finish(r, r->done, 0);
		return r->done < r->c.len ? TRY_DONE_STOP : TRY_DONE;
	}
}

static int try_read_dgram(sel_io *e, px_result *r)
{
	socklen_t alen = sizeof(r->c.addr);
	ssize_t n;

	do {
		n = recvfrom(e->fd, r->c.buf, r->c.len, MSG_DONTWAIT,
			     (struct sockaddr *)&r->c.addr, &alen);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return TRY_AGAIN;
		r->c.addrlen = 0;
		px_result_finish(r, 0, errno);
		return TRY_DONE;
	}
	r->c.addrlen = alen;
	px_result_finish(r, (size_t)n, 0);
	return TRY_DONE;
}

static int try_write_dgram(sel_io *e, px_result *r)
{
	const struct sockaddr *to =
		r->c.addrlen ? (const struct sockaddr *)&r->c.addr : NULL;
	ssize_t n;

	do {
		n = sendto(e->fd, r->c.buf, r->c.len, MSG_DONTWAIT | MSG_NOSIGNAL,
			   to, r->c.addrlen);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return TRY_AGAIN;
		px_result_finish(r, 0, errno);
		return TRY_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	return TRY_DONE;
}

/* accept4 has no MSG_DONTWAIT: the listener itself must be non-blocking. */
static int listener_nonblock(sel_io *e)
{
	int fl;

	if (e->flags & FDF_NONBLOCK_OK)
		return 0;
	fl = fcntl(e->fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(e->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	e->flags |= FDF_NONBLOCK_OK;
	return 0;
}

static int try_accept(sel_io *e, px_result *r)
{
	int rc = listener_nonblock(e);

	if (rc < 0) {
		px_result_finish(r, 0, -rc);
		return TRY_DONE;
	}
	for (;;) {
		socklen_t alen = sizeof(r->c.addr);
		int nfd = accept4(e->fd, (struct sockaddr *)&r->c.addr, &alen,
				  SOCK_CLOEXEC);

		if (nfd >= 0) {
			r->c.new_fd = nfd;
			r->c.addrlen = alen;
			px_result_finish(r, 0, 0);
			return TRY_DONE;
		}
		switch (errno) {
		case EAGAIN:
#if EWOULDBLOCK != EAGAIN
		case EWOULDBLOCK:
#endif
			return TRY_AGAIN;
		/* Linux hands pending network errors of the new connection
		 * to accept(2); that connection is gone, try the next. */
		case EINTR:
		case ECONNABORTED:
		case EPROTO:
		case ENETDOWN:
		case ENOPROTOOPT:
		case EHOSTDOWN:
		case ENONET:
		case EHOSTUNREACH:
		case ENETUNREACH:
			continue;
		default:
			px_result_finish(r, 0, errno);
			return TRY_DONE;
		}
	}
}

static int try_connect(sel_io *e, px_result *r)
{
	struct sel_priv *pv = priv(r);
	int err;

	if (pv->conn == CONN_NEW) {
		int fl = fcntl(e->fd, F_GETFL);

		if (fl < 0) {
			err = errno;
			goto out;
		}
		if (!(fl & O_NONBLOCK) && fcntl(e->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			err = errno;
			goto out;
		}
		err = connect(e->fd, (const struct sockaddr *)&r->c.addr,
			      r->c.addrlen) < 0 ? errno : 0;
		if (!(fl & O_NONBLOCK))
			fcntl(e->fd, F_SETFL, fl);
		/* Interrupted, a non-blocking connect carries on regardless. */
		if (err == EINPROGRESS || err == EINTR) {
			pv->conn = CONN_PENDING;
			return TRY_AGAIN;
		}
		goto out;
	}

	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) {
		err = errno;
	} else if (soerr) {
		err = soerr;
	} else {
		/* No error: connected, or a stale wake-up while still in
		 * progress. */
		struct sockaddr_storage ss;
		socklen_t al = sizeof(ss);
		if (getpeername(e->fd, (struct sockaddr *)&ss, &al) == 0)
			err = 0;
		else if (errno == ENOTCONN)
			return TRY_AGAIN;
		else
			err = errno;
	}
out:
	px_result_finish(r, 0, err);
	return TRY_DONE;
}

static int try_op(sel_io *e, px_result *r)
{
	switch (r->c.op) {
	case PX_OP_READ_STREAM:
		return try_read_stream(e, r);
	case PX_OP_WRITE_STREAM:
		return try_write_stream(e, r);
	case PX_OP_READ_DGRAM:
		return try_read_dgram(e, r);
	case PX_OP_WRITE_DGRAM:
		return try_write_dgram(e, r);
	case PX_OP_ACCEPT:
		return try_accept(e, r);
	case PX_OP_CONNECT:
		return try_connect(e, r);
	default:
		px_result_finish(r, 0, EOPNOTSUPP);
		return TRY_DONE;
	}
}

static void file_io(px_result *r)
{
	ssize_t n;

	do {
		if (r->c.op == PX_OP_READ_FILE)
			n = pread(r->c.fd, r->c.buf, r->c.len, (off_t)r->c.offset);
		else
			n = pwrite(r->c.fd, r->c.buf, r->c.len, (off_t)r->c.offset);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		px_result_finish(r, 0, errno);
	else
		px_result_finish(r, (size_t)n, 0);
}

/* ------------------------------------------------------------------ */
/* Descriptor table and queues                                          */
/* ------------------------------------------------------------------ */

static px_sel_fd *get_entry(px_sel *sel, int fd)
{
	px_sel_fd *e;

	if ((size_t)fd >= sel->nfds) {
		size_t n = sel->nfds ? sel->nfds : 64;
		px_sel_fd **t;

		while (n <= (size_t)fd)
			n *= 2;
		t = realloc(sel->fds, n * sizeof(*t));
		if (!t)
			return NULL;
		memset(t + sel->nfds, 0, (n - sel->nfds) * sizeof(*t));
		sel->fds = t;
		sel->nfds = n;
	}
	e = sel->fds[fd];
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e)
			return NULL;
		px_list_init(&e->q[PX_SEL_RD]);
		px_list_init(&e->q[PX_SEL_WR]);
		px_link_init(&e->alink);
		e->fd = fd;
		sel->fds[fd] = e;
	}
	return e;
}

/* Bring e's membership of the active list, and its arming, in line with
 * its queues.  A direction whose head is claimed is not armed: the thread
 * working on it calls this again when it lets go.  Returns 0 or -errno
 * (only when the wanted set grew). */
static int sel_update(px_sel *sel, px_sel_fd *e)
{
	const px_sel_wait_class *cls = sel->w->cls;
	unsigned want;
	int rc;

	if (!px_sel_fd_queued(e)) {
		if (px_link_linked(&e->alink))
			px_list_remove(&sel->active, &e->alink);
		/* Idle: the number may be closed and reused before its next
		 * use, so forget all we learnt about it. */
		e->kind = KIND_UNKNOWN;
		e->flags = 0;
		e->armed = 0;
		return 0;
	}
	if (!px_link_linked(&e->alink)) {
		if (cls->reserve) {
			rc = cls->reserve(sel->w, px_list_count(&sel->active) + 1);
			if (rc < 0)
				return rc;
		}
		px_list_push_back(&sel->active, &e->alink);
	}
	want = px_sel_fd_want(e);
	return cls->arm && want ? cls->arm(sel->w, e, want) : 0;
}

static void to_done(px_sel *sel, px_result *r)
{
	priv(r)->at = AT_DONE;
	px_list_push_back(&sel->done, &r->plink);
}

/* Complete everything queued on e with err, except the claimed results:
 * the threads working on them finish them. */
static void fail_all(px_sel *sel, px_sel_fd *e, int err)
{
	for (int dir = 0; dir < 2; dir++) {
		px_link *l = px_list_first(&e->q[dir]);

		while (l) {
			px_link *next = px_list_next(&e->q[dir], l);
			px_result *r = px_result_of_plink(l);

			if (!priv(r)->busy) {
				px_list_remove(&e->q[dir], l);
				px_result_finish(r, r->done, err);
				to_done(sel, r);
			}
			l = next;
		}
	}
}

/* Mutex held: the heads of one queue, tried under the mutex until one is
 * not ready (only where nobody else can be waiting for them; see
 * start_followers). */
static void run_queue_locked(px_sel *sel, px_sel_fd *e, int dir)
{
	px_link *l;

	while ((l = px_list_first(&e->q[dir]))) {
		px_result *r = px_result_of_plink(l);
		sel_io io;
		int rc;

		if (priv(r)->busy)
			break;
		io_load(&io, e);
		rc = try_op(&io, r);
		io_store(e, &io);
		if (rc == TRY_AGAIN)
			break;
		px_list_remove(&e->q[dir], l);
		to_done(sel, r);
		if (rc == TRY_DONE_STOP)
			break;
	}
}

/* Let go of a claimed result (mutex held) after its try gave rc
 * (RES_UNTRIED: not tried).  It leaves the queue if it finished, or if it
 * did not and a cancel came meanwhile; then true. */
static bool unclaim(px_sel_fd *e, px_result *r, int rc, bool tried)
{
	struct sel_priv *pv = priv(r);

	pv->busy = 0;
	if (tried && rc != TRY_AGAIN) {
		px_list_remove(&e->q[pv->dir], &r->plink);
		pv->at = AT_NONE;
		return true;
	}
	if (pv->cancel) {
		px_list_remove(&e->q[pv->dir], &r->plink);
		pv->at = AT_NONE;
		px_result_finish(r, r->done, ECANCELED);
		return true;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* Services for the wait strategies                                     */
/* ------------------------------------------------------------------ */

px_sel_fd *px_sel_lookup(px_sel *sel, int fd)
{
	if (fd < 0 || (size_t)fd >= sel->nfds)
		return NULL;
	return sel->fds[fd];
}

px_list *px_sel_active(px_sel *sel)
{
	return &sel->active;
}

/* Mark up to CLAIM_MAX results of e's queue dir, from the head, busy and
 * chain them.  Nothing when the head is already claimed by a start. */
static void claim_queue(px_sel_fd *e, int dir)
{
	px_result **tail = &e->chain[dir];
	px_link *l = px_list_first(&e->q[dir]);
	unsigned bit = dir == PX_SEL_RD ? PX_SEL_IN : PX_SEL_OUT;
	int n = 0;

	*tail = NULL;
	if (!l || (e->busy & bit))
		return;
	e->busy |= bit;
	for (; l && n < CLAIM_MAX; l = px_list_next(&e->q[dir], l), n++) {
		px_result *r = px_result_of_plink(l);
		struct sel_priv *pv = priv(r);

		pv->busy = 1;
		pv->res = RES_UNTRIED;
		pv->cnext = NULL;
		*tail = r;
		tail = &pv->cnext;
	}
}

void px_sel_claim(px_sel *sel, px_sel_fd *e, unsigned ev)
{
	if (e->in_batch)
		return;         /* one event per descriptor and wait */
	if (ev & PX_SEL_NVAL) {
		if (fd_closed(e->fd)) {
			fail_all(sel, e, EBADF);
			sel_update(sel, e);
			return;
		}
		ev |= PX_SEL_ERR;   /* stale: it was reopened since */
	}
	e->chain[PX_SEL_RD] = e->chain[PX_SEL_WR] = NULL;
	if (ev & (PX_SEL_IN | PX_SEL_ERR))
		claim_queue(e, PX_SEL_RD);
	if (ev & (PX_SEL_OUT | PX_SEL_ERR))
		claim_queue(e, PX_SEL_WR);
	if (!e->chain[PX_SEL_RD] && !e->chain[PX_SEL_WR]) {
		/* Nothing to do now (a one-shot registration still needs
		 * renewing). */
		int rc = sel_update(sel, e);

		if (rc < 0) {
			fail_all(sel, e, -rc);
			sel_update(sel, e);
		}
		return;
	}
	io_load(&e->bio, e);
	e->in_batch = 1;
	e->bnext = sel->batch;
	sel->batch = e;
}

void px_sel_run(px_sel *sel, bool unlock)
{
	px_sel_fd *e;

	if (!sel->batch)
		return;
	if (unlock && sel->base.lock)
		pthread_mutex_unlock(sel->base.lock);
	/* Unlocked: only the claimed results and e's batch fields are ours. */
	for (e = sel->batch; e; e = e->bnext) {
		for (int dir = 0; dir < 2; dir++) {
			for (px_result *r = e->chain[dir]; r; r = priv(r)->cnext) {
				int rc = try_op(&e->bio, r);

				priv(r)->res = (uint8_t)(rc + 1);
				if (rc != TRY_DONE)
					break;
			}
		}
	}
	if (unlock && sel->base.lock)
		pthread_mutex_lock(sel->base.lock);
	while ((e = sel->batch)) {
		int rc;

		sel->batch = e->bnext;
		e->in_batch = 0;
		io_store(e, &e->bio);
		for (int dir = 0; dir < 2; dir++) {
			px_result *r = e->chain[dir], *next;

			if (!r)
				continue;
			for (; r; r = next) {
				struct sel_priv *pv = priv(r);
				bool tried = pv->res != RES_UNTRIED;

				next = pv->cnext;
				pv->cnext = NULL;
				if (unclaim(e, r, tried ? pv->res - 1 : 0, tried))
					to_done(sel, r);
			}
			e->busy &= ~(dir == PX_SEL_RD ? PX_SEL_IN : PX_SEL_OUT);
			e->chain[dir] = NULL;
		}
		rc = sel_update(sel, e);
		if (rc < 0) {
			/* Cannot watch it any more (closed: EBADF); nothing
			 * else would ever complete these. */
			fail_all(sel, e, -rc);
			sel_update(sel, e);
		}
	}
}

void px_sel_check_closed(px_sel *sel)
{
	px_link *l = px_list_first(&sel->active);

	while (l) {
		px_link *next = px_list_next(&sel->active, l);
		px_sel_fd *e = px_sel_fd_of(l);

		if (fd_closed(e->fd)) {
			fail_all(sel, e, EBADF);
			sel_update(sel, e);
		}
		l = next;
	}
}

px_result *px_sel_pop_done(px_sel *sel)
{
	px_link *l = px_list_pop_front(&sel->done);
	px_result *r;

	if (!l)
		return NULL;
	r = px_result_of_plink(l);
	priv(r)->at = AT_NONE;
	return r;
}

bool px_sel_has_done(const px_sel *sel)
{
	return !px_list_empty(&sel->done);
}

/* ------------------------------------------------------------------ */
/* Provider slots                                                       */
/* ------------------------------------------------------------------ */

/*
 * Reading at start pays when data is often there already (streaming,
 * pipelined requests); in a request/response exchange the read is usually
 * started before the peer answers, and the try is a wasted EAGAIN.  After
 * SPEC_MISSES such misses in a row, reads on that descriptor go straight
 * to the wait, except one start in SPEC_PROBE that still tries (and
 * re-enables trying when it finds data).  Writes are always tried.  Only
 * with epoll: there arming costs a syscall either way; with poll and select
 * a skipped try would cost an interrupt of the leader instead.
 */
#define SPEC_MISSES 2
#define SPEC_PROBE 8

static bool skip_try(const px_sel *sel, px_sel_fd *e, int dir)
{
	/* Only where arming is a syscall anyway (epoll_ctl), which then
	 * also catches a closed descriptor at start. */
	if (dir != PX_SEL_RD || e->rd_miss < SPEC_MISSES || !sel->w->cls->arm)
		return false;
	if (++e->rd_skip < SPEC_PROBE)
		return true;
	e->rd_skip = 0;
	return false;
}

static void learn_try(px_sel_fd *e, int rc)
{
	if (rc != TRY_AGAIN)
		e->rd_miss = 0;
	else if (e->rd_miss < SPEC_MISSES)
		e->rd_miss++;
}

/* The start's own try of r, the only result in queue dir: claim r at the
 * head so that later starts in that direction queue behind it, do the
 * call unlocked, and let go.  Returns the try's TRY_*; r has left the
 * queue unless TRY_AGAIN (a cancel meanwhile counts as finished). */
static int try_at_start(px_sel *sel, px_sel_fd *e, int dir, px_result *r)
{
	struct sel_priv *pv = priv(r);
	unsigned bit = dir == PX_SEL_RD ? PX_SEL_IN : PX_SEL_OUT;
	sel_io io;
	int rc;

	px_list_push_back(&e->q[dir], &r->plink);
	pv->at = AT_QUEUE;
	pv->dir = (uint8_t)dir;
	pv->busy = 1;
	e->busy |= bit;
	io_load(&io, e);
	if (sel->base.lock)
		pthread_mutex_unlock(sel->base.lock);
	rc = try_op(&io, r);
	if (sel->base.lock)
		pthread_mutex_lock(sel->base.lock);
	e->busy &= ~bit;
	io_store(e, &io);
	if (dir == PX_SEL_RD)
		learn_try(e, rc);
	if (unclaim(e, r, rc, true) && rc == TRY_AGAIN)
		rc = TRY_DONE;          /* cancelled meanwhile */
	return rc;
}

/* Starts that came while r was claimed queued behind it without arming.
 * Now that r is out of the way, arm for them; if the descriptor cannot be
 * armed (a regular file: EPERM; or closed), do them here under the mutex,
 * fail what remains, and wake the leader to hand them out. */
static void start_followers(px_sel *sel, px_sel_fd *e)
{
	int rc = sel_update(sel, e);

	if (rc < 0) {
		run_queue_locked(sel, e, PX_SEL_RD);
		run_queue_locked(sel, e, PX_SEL_WR);
		fail_all(sel, e, -rc);
		sel_update(sel, e);
		if (px_sel_has_done(sel))
			sel->w->base.intr->ops->interrupt(sel->w->base.intr);
	}
}

/* r finished within start. */
static int done_at_start(px_sel *sel, px_sel_fd *e, px_result *r)
{
	start_followers(sel, e);        /* or, if idle, forget what we learnt */
	if (r->c.error == EBADF && fd_closed(r->c.fd))
		return -EBADF;
	return PX_START_DONE;
}

static int sel_start(px_provider *p, px_result *r)
{
	px_sel *sel = to_sel(p);
	struct sel_priv *pv = priv(r);
	int fd = r->c.fd, dir, rc;
	bool tried = false;
	px_sel_fd *e;

	memset(pv, 0, sizeof(*pv));
	pv->write_all = (r->flags & PX_RF_WRITE_ALL) != 0;
	r->done = 0;
	if (fd < 0)
		return -EBADF;
	if (r->c.op == PX_OP_READ_FILE || r->c.op == PX_OP_WRITE_FILE) {
		/* r is on no list yet, so nothing else can reach it: the
		 * disk wait needs no claim and no mutex. */
		if (sel->base.lock)
			pthread_mutex_unlock(sel->base.lock);
		file_io(r);
		if (sel->base.lock)
			pthread_mutex_lock(sel->base.lock);
		if (r->c.error == EBADF && fd_closed(fd))
			return -EBADF;
		return PX_START_DONE;
	}
	dir = op_dir(r->c.op);
	if (dir < 0)
		return -EOPNOTSUPP;
	if (fd >= sel->w->cls->fd_limit)
		return -EMFILE;
	e = get_entry(sel, fd);
	if (!e)
		return -ENOMEM;
	if (r->c.op == PX_OP_ACCEPT)
		r->c.new_fd = -1;

	/* Nothing older in this direction: try it now (e stays valid across
	 * the unlock: entries are never freed or moved before destroy). */
	if (px_list_empty(&e->q[dir]) && !skip_try(sel, e, dir)) {
		tried = true;
		rc = try_at_start(sel, e, dir, r);
		if (rc != TRY_AGAIN)
			return done_at_start(sel, e, r);
		/* Still at the head of its queue. */
	} else {
		px_list_push_back(&e->q[dir], &r->plink);
		pv->at = AT_QUEUE;
		pv->dir = (uint8_t)dir;
	}
	rc = sel_update(sel, e);
	if (rc < 0) {
		bool head = px_list_first(&e->q[dir]) == &r->plink;

		px_list_remove(&e->q[dir], &r->plink);
		pv->at = AT_NONE;
		/* Cannot be watched (epoll: EPERM for a regular file that took
		 * a socket's number): if it was not tried, and nothing older
		 * is queued or claimed, try it now. */
		if (!tried && head) {
			sel_io io;

			e->rd_miss = 0;
			io_load(&io, e);
			rc = try_op(&io, r);
			io_store(e, &io);
			if (rc != TRY_AGAIN)
				return done_at_start(sel, e, r);
		}
		start_followers(sel, e);
		if (!r->done)
			return rc;
		/* Some bytes already went out: report them. */
		px_result_finish(r, r->done, -rc);
		return PX_START_DONE;
	}
	return PX_START_STARTED;
}

static int sel_cancel(px_provider *p, px_result *r)
{
	px_sel *sel = to_sel(p);
	struct sel_priv *pv = priv(r);

	if (pv->at == AT_DONE)
		return PX_CANCEL_PENDING;   /* finished; next_completed has it */
	if (pv->busy) {
		/* A thread is in the middle of its call: it finishes it, with
		 * ECANCELED if the call found nothing. */
		pv->cancel = 1;
		return PX_CANCEL_PENDING;
	}
	if (pv->at == AT_QUEUE) {
		px_sel_fd *e = sel->fds[r->c.fd];

		px_list_remove(&e->q[pv->dir], &r->plink);
		pv->at = AT_NONE;
		/* Only shrinks what e wants; a wake-up still armed for it
		 * finds nothing to do. */
		sel_update(sel, e);
	}
	px_result_finish(r, r->done, ECANCELED);
	return PX_CANCEL_DONE;
}

static void sel_destroy(px_provider *p)
{
	px_sel *sel = to_sel(p);

	if (sel->w)
		sel->w->base.ops->destroy(&sel->w->base);
	for (size_t i = 0; i < sel->nfds; i++)
		free(sel->fds[i]);
	free(sel->fds);
	free(sel);
}

/* The wait strategy of a wait name of this provider's class. */
static const px_sel_wait_class *sel_wait_class(const char *name)
{
	static const px_sel_wait_class *const all[] = {
		&px_sel_wait_epoll, &px_sel_wait_poll, &px_sel_wait_select,
	};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!strcmp(all[i]->wait.name, name))
			return all[i];
	return NULL;
}

static int sel_create(const px_processor_config *cfg, const px_proc_spec *spec,
		      px_provider **out)
{
	const px_sel_wait_class *cls = sel_wait_class(spec->wait->name);
	px_sel *sel;
	int rc;

	if (!cls)
		return -EINVAL;
	sel = calloc(1, sizeof(*sel));
	if (!sel)
		return -ENOMEM;
	px_list_init(&sel->active);
	px_list_init(&sel->done);
	rc = cls->create(sel, cfg, &sel->w);
	if (rc < 0) {
		free(sel);
		return rc;
	}
	sel->base.ops = &px_provider_select_ops;
	sel->base.wait = &sel->w->base;
	sel->base.ops_mask = PX_OPS_IO;
	sel->base.flags = cls->pf_flags;
	sel->base.max_aio = cfg->max_aio ? cfg->max_aio : SEL_DEFAULT_MAX_AIO;
	sel->base.priv_size = sizeof(struct sel_priv);
	*out = &sel->base;
	return 0;
}

const px_provider_ops px_provider_select_ops = {
	.name = "select",
	.create = sel_create,     /* provider, then the wait cfg->wait names */
	.destroy = sel_destroy,   /* wait (and its interrupt), table, entries */
	.start = sel_start,       /* try at once (unlocked), else queue and arm */
	.cancel = sel_cancel,     /* unqueue: done; finished or busy: pending */
};
