/*
 * providers/select_io.c - the readiness provider's system calls: one
 * non-blocking attempt at one operation.
 *
 * Everything here runs without the proactor mutex (select.c claims the
 * result first and hands over a private copy of what is known about the
 * descriptor, px_sel_io), so it reads and writes nothing shared: only the
 * claimed result and that copy, which select.c merges back under the
 * mutex.  The same code also runs under the mutex where select.c has no
 * reason to release it.
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
 *  - read_file / write_file: one pread / pwrite, never queued.
 *  - Vectored forms (PX_RF_VECTORED): recvmsg/sendmsg on sockets,
 *    readv/writev or preadv2/pwritev2 elsewhere, preadv/pwritev on files.
 *    A write_all resumed inside a buffer first writes the rest of that
 *    buffer alone (px_iov_rest), then whole buffers again.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "select.h"

/* ------------------------------------------------------------------ */
/* Streams that are not sockets                                         */
/* ------------------------------------------------------------------ */

/* e said ENOTSOCK: is it a file (always ready) or something to wait on? */
static int sio_classify(px_sel_io *e)
{
	struct stat st;

	if (fstat(e->fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		e->kind = PX_SEL_KIND_FILE;
	else
		e->kind = PX_SEL_KIND_NOWAIT;
	return 0;
}

/* The kernel refused RWF_NOWAIT: go by the file status flags. */
static int sio_downgrade(px_sel_io *e)
{
	int fl = fcntl(e->fd, F_GETFL);

	if (fl < 0)
		return -errno;
	e->kind = (fl & O_NONBLOCK) ? PX_SEL_KIND_NONBLOCK : PX_SEL_KIND_BLOCKING;
	return 0;
}

/* 1 if fd shows events (or an error or hang-up) right now, 0 if not. */
static int sio_poll_now(int fd, short events)
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

/* Bytes read into the cnt buffers of iov, or -errno (-EAGAIN: not
 * ready). */
static ssize_t sio_other_read(px_sel_io *e, const struct iovec *iov, int cnt)
{
	for (;;) {
		ssize_t n;
		int rc;

		switch (e->kind) {
		case PX_SEL_KIND_NOWAIT:
			n = preadv2(e->fd, iov, cnt, -1, RWF_NOWAIT);
			if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
				rc = sio_downgrade(e);
				if (rc < 0)
					return rc;
				continue;
			}
			break;
		case PX_SEL_KIND_BLOCKING:
			rc = sio_poll_now(e->fd, POLLIN);
			if (rc <= 0)
				return rc ? rc : -EAGAIN;
			n = readv(e->fd, iov, cnt);
			break;
		default:
			n = readv(e->fd, iov, cnt);
			break;
		}
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return -errno;
	}
}

static ssize_t sio_other_write_raw(px_sel_io *e, const struct iovec *iov,
				   int cnt)
{
	for (;;) {
		struct iovec one;
		ssize_t n;
		int rc;

		switch (e->kind) {
		case PX_SEL_KIND_NOWAIT:
			n = pwritev2(e->fd, iov, cnt, -1, RWF_NOWAIT);
			if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
				rc = sio_downgrade(e);
				if (rc < 0)
					return rc;
				continue;
			}
			break;
		case PX_SEL_KIND_BLOCKING:
			/* POLLOUT promises room for PIPE_BUF bytes, no more. */
			rc = sio_poll_now(e->fd, POLLOUT);
			if (rc <= 0)
				return rc ? rc : -EAGAIN;
			/* So the first buffer only, cut to PIPE_BUF: a short
			 * write, which the caller handles. */
			one = iov[0];
			if (one.iov_len > PIPE_BUF)
				one.iov_len = PIPE_BUF;
			n = writev(e->fd, &one, 1);
			break;
		default:
			n = writev(e->fd, iov, cnt);
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
static ssize_t sio_other_write(px_sel_io *e, const struct iovec *iov, int cnt)
{
	sigset_t pipe_set, old, pend;
	bool was_pending = false;
	ssize_t n;

	if (e->kind == PX_SEL_KIND_FILE)
		return sio_other_write_raw(e, iov, cnt);
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	if (sigismember(&old, SIGPIPE) && sigpending(&pend) == 0)
		was_pending = sigismember(&pend, SIGPIPE);
	n = sio_other_write_raw(e, iov, cnt);
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

static int sio_read_stream(px_sel_io *e, px_result *r)
{
	struct iovec one = { .iov_base = r->c.buf, .iov_len = r->c.len };
	const struct iovec *iov = &one;
	int cnt = 1;
	ssize_t n;

	if (r->flags & PX_RF_VECTORED) {
		iov = r->c.iov;
		cnt = r->c.iovcnt;
	}
	if (e->kind <= PX_SEL_KIND_SOCKET) {
		do {
			if (cnt == 1 && iov == &one) {
				n = recv(e->fd, r->c.buf, r->c.len, MSG_DONTWAIT);
			} else {
				struct msghdr m = { .msg_iov = (struct iovec *)iov,
						    .msg_iovlen = (size_t)cnt };
				n = recvmsg(e->fd, &m, MSG_DONTWAIT);
			}
		} while (n < 0 && errno == EINTR);
		if (n >= 0 || errno != ENOTSOCK) {
			e->kind = PX_SEL_KIND_SOCKET;
			if (n < 0)
				n = -errno;
			goto out;
		}
		n = sio_classify(e);
		if (n < 0)
			goto out;
	}
	n = sio_other_read(e, iov, cnt);
out:
	if (n == -EAGAIN || n == -EWOULDBLOCK)
		return PX_SEL_AGAIN;
	if (n < 0) {
		px_result_finish(r, 0, (int)-n);
		return PX_SEL_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	/* A short read emptied the buffer: the next one would say EAGAIN.
	 * End of stream is different: every later read sees it at once. */
	return n && (size_t)n < r->c.len ? PX_SEL_DONE_STOP : PX_SEL_DONE;
}

static int sio_write_stream(px_sel_io *e, px_result *r)
{
	for (;;) {
		/* What is left: of a vectored write, the buffers after the
		 * first done bytes (px_iov_rest; the caller's array is not
		 * touched). */
		struct iovec one;
		const struct iovec *iov = &one;
		int cnt = 1;
		ssize_t n;

		if (r->flags & PX_RF_VECTORED) {
			iov = px_iov_rest(r, r->done, &one, &cnt);
		} else {
			one.iov_base = (char *)r->c.buf + r->done;
			one.iov_len = r->c.len - r->done;
		}
		size_t want = cnt == 1 ? iov->iov_len : r->c.len - r->done;
		if (e->kind <= PX_SEL_KIND_SOCKET) {
			do {
				if (cnt == 1) {
					n = send(e->fd, iov->iov_base, iov->iov_len,
						 MSG_DONTWAIT | MSG_NOSIGNAL);
				} else {
					struct msghdr m = {
						.msg_iov = (struct iovec *)iov,
						.msg_iovlen = (size_t)cnt
					};
					n = sendmsg(e->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
				}
			} while (n < 0 && errno == EINTR);
			if (n >= 0 || errno != ENOTSOCK) {
				e->kind = PX_SEL_KIND_SOCKET;
				if (n < 0)
					n = -errno;
				goto got;
			}
			n = sio_classify(e);
			if (n < 0)
				goto got;
		}
		n = sio_other_write(e, iov, cnt);
got:
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return PX_SEL_AGAIN;
		if (n < 0) {
			/* After partial progress too: bytes says how much. */
			px_result_finish(r, r->done, (int)-n);
			return PX_SEL_DONE;
		}
		r->done += (size_t)n;
		if (r->done < r->c.len && px_sel_priv(r)->write_all) {
			/* A short send means the socket buffer is full; other
			 * descriptors may just take less per call. */
			if ((e->kind == PX_SEL_KIND_SOCKET && (size_t)n < want) ||
			    n == 0)
				return PX_SEL_AGAIN;
			continue;
		}
		px_result_finish(r, r->done, 0);
		return r->done < r->c.len ? PX_SEL_DONE_STOP : PX_SEL_DONE;
	}
}

static int sio_read_dgram(px_sel_io *e, px_result *r)
{
	socklen_t alen = sizeof(r->c.addr);
	ssize_t n;

	do {
		n = recvfrom(e->fd, r->c.buf, r->c.len, MSG_DONTWAIT,
			     (struct sockaddr *)&r->c.addr, &alen);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return PX_SEL_AGAIN;
		r->c.addrlen = 0;
		px_result_finish(r, 0, errno);
		return PX_SEL_DONE;
	}
	r->c.addrlen = alen;
	px_result_finish(r, (size_t)n, 0);
	return PX_SEL_DONE;
}

static int sio_write_dgram(px_sel_io *e, px_result *r)
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
			return PX_SEL_AGAIN;
		px_result_finish(r, 0, errno);
		return PX_SEL_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	return PX_SEL_DONE;
}

/* accept4 has no MSG_DONTWAIT: the listener itself must be non-blocking. */
static int sio_listener_nonblock(px_sel_io *e)
{
	int fl;

	if (e->flags & PX_SEL_NONBLOCK_OK)
		return 0;
	fl = fcntl(e->fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(e->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	e->flags |= PX_SEL_NONBLOCK_OK;
	return 0;
}

static int sio_accept(px_sel_io *e, px_result *r)
{
	int rc = sio_listener_nonblock(e);

	if (rc < 0) {
		px_result_finish(r, 0, -rc);
		return PX_SEL_DONE;
	}
	for (;;) {
		socklen_t alen = sizeof(r->c.addr);
		int nfd = accept4(e->fd, (struct sockaddr *)&r->c.addr, &alen,
				  SOCK_CLOEXEC);

		if (nfd >= 0) {
			r->c.new_fd = nfd;
			r->c.addrlen = alen;
			px_result_finish(r, 0, 0);
			return PX_SEL_DONE;
		}
		switch (errno) {
		case EAGAIN:
#if EWOULDBLOCK != EAGAIN
		case EWOULDBLOCK:
#endif
			return PX_SEL_AGAIN;
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
			return PX_SEL_DONE;
		}
	}
}

static int sio_connect(px_sel_io *e, px_result *r)
{
	struct px_sel_priv *pv = px_sel_priv(r);
	int err;

	if (pv->conn == PX_SEL_CONN_NEW) {
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
			pv->conn = PX_SEL_CONN_PENDING;
			return PX_SEL_AGAIN;
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
			return PX_SEL_AGAIN;
		else
			err = errno;
	}
out:
	px_result_finish(r, 0, err);
	return PX_SEL_DONE;
}

int px__sel_try(px_sel_io *e, px_result *r)
{
	switch (r->c.op) {
	case PX_OP_READ_STREAM:
		return sio_read_stream(e, r);
	case PX_OP_WRITE_STREAM:
		return sio_write_stream(e, r);
	case PX_OP_READ_DGRAM:
		return sio_read_dgram(e, r);
	case PX_OP_WRITE_DGRAM:
		return sio_write_dgram(e, r);
	case PX_OP_ACCEPT:
		return sio_accept(e, r);
	case PX_OP_CONNECT:
		return sio_connect(e, r);
	default:
		px_result_finish(r, 0, EOPNOTSUPP);
		return PX_SEL_DONE;
	}
}

void px__sel_file_io(px_result *r)
{
	ssize_t n;

	do {
		if (r->flags & PX_RF_VECTORED) {
			if (r->c.op == PX_OP_READ_FILE)
				n = preadv(r->c.fd, r->c.iov, r->c.iovcnt,
					   (off_t)r->c.offset);
			else
				n = pwritev(r->c.fd, r->c.iov, r->c.iovcnt,
					    (off_t)r->c.offset);
		} else if (r->c.op == PX_OP_READ_FILE) {
			n = pread(r->c.fd, r->c.buf, r->c.len, (off_t)r->c.offset);
		} else {
			n = pwrite(r->c.fd, r->c.buf, r->c.len, (off_t)r->c.offset);
		}
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		px_result_finish(r, 0, errno);
	else
		px_result_finish(r, (size_t)n, 0);
}
