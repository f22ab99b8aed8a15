/*
 * providers/nbio.c - the calls that perform an operation once its
 * descriptor is ready: one non-blocking attempt at one operation, for the
 * readiness provider (providers/select.c) and the Linux AIO provider
 * (providers/linux_aio.c).  See nbio.h for what the calls may touch; they
 * run without the proactor mutex, or under it where a provider has no
 * reason to release it.
 *
 * Quirks:
 *  - Sockets use recv/send/recvfrom/sendto with MSG_DONTWAIT, so a blocking
 *    socket never blocks the caller; sends add MSG_NOSIGNAL (a closed peer
 *    gives EPIPE in the completion, not SIGPIPE).
 *  - Other streams are recognised by ENOTSOCK.  Regular files and block
 *    devices are always ready: plain read/write at once (a write at or
 *    past RLIMIT_FSIZE fails with EFBIG before the call, which would
 *    raise SIGXFSZ in the caller's thread: px__fsize_refused_here).
 *    Pipes, FIFOs and terminals use preadv2/pwritev2 with RWF_NOWAIT
 *    (pipes honour it on recent kernels), so a blocking pipe is never
 *    made non-blocking.  Where the kernel refuses RWF_NOWAIT, the
 *    descriptor is checked with poll(0) first and written at most
 *    PIPE_BUF bytes at a time, unless the provider's rules trust
 *    O_NONBLOCK and it is set (then it is used as it is).  Those writes carry RWF_NOSIGNAL where the kernel takes it
 *    (6.18); elsewhere SIGPIPE is blocked around the call and swallowed.
 *    Either way EPIPE comes in the completion.
 *  - A terminal is the exception to "PIPE_BUF bytes after POLLOUT": it
 *    polls writable with a single byte of room, and its write then waits
 *    until everything given has gone, whatever RWF_NOWAIT says.  So a
 *    terminal in blocking mode is read and written through a description
 *    of its own, opened non-blocking for that one call (nb_tty_io).
 *  - accept sets O_NONBLOCK on a blocking listening socket (and leaves it
 *    so): a connection reset between readiness and accept4 must not block
 *    the caller.  connect sets O_NONBLOCK only around connect(2) and puts
 *    the saved file status flags back at once, whatever the outcome.  A
 *    connect is finished with one more connect(2) (the kernel's
 *    "connecting" mark), to AF_UNSPEC when the TCP socket is closed
 *    already (nb_connect_finish).  A blocking AF_UNIX socket whose
 *    listener's backlog is full (EAGAIN, where connect(2) itself would
 *    wait) keeps the connect new, to be made again: nothing reports room
 *    in a backlog, so the providers try it again after a growing pause
 *    (px__nbio_connect_later).
 *  - Vectored forms (PX_RF_VECTORED): recvmsg/sendmsg on sockets,
 *    readv/writev or preadv2/pwritev2 elsewhere, preadv/pwritev on files.
 *    A write_all resumed inside a buffer first writes the rest of that
 *    buffer alone (px_iov_rest), then whole buffers again.
 *  - A socket shut down for reading that says EAGAIN although the wait
 *    reported it (datagram sockets: poll says readable, a non-blocking
 *    receive says EAGAIN) gives 0 bytes, as a blocking receive would
 *    (nb_read_shut); an AF_UNIX listener in that state gives EINVAL to
 *    the accept, as a blocking accept4 would.
 */
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nbio.h"

/* ------------------------------------------------------------------ */
/* Streams that are not sockets                                         */
/* ------------------------------------------------------------------ */

/* io said ENOTSOCK: is it a file (always ready) or something to wait on? */
static int nb_classify(px_nbio *io)
{
	struct stat st;

	if (fstat(io->fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		io->kind = PX_NBIO_KIND_FILE;
	else
		io->kind = PX_NBIO_KIND_NOWAIT;
	if ((st.st_mode & S_IFMT) == 0)
		io->flags |= PX_NBIO_ANON;
	return 0;
}

/*
 * The O_NONBLOCK that nb_anon_io sets on the application's description for
 * the length of one call is the library's, not the application's: no other
 * call of the library may take it for the application's.  Two threads
 * calling at once on two numbers of one file (a dup), or on one number in
 * both directions, did (a helper's review of 2026-12-07): the second
 * found the flag set, so it neither set it (nb_anon_io) nor took the file
 * for blocking (nb_downgrade, which then learnt PX_NBIO_KIND_NONBLOCK for
 * good), the first cleared it, and the second's read(2) slept, holding its
 * thread (a loop thread, or the application's inside the start) until the
 * next event.  So every look at and change of the file status flags for
 * such a call is made under this process-wide lock, held for the few
 * non-blocking system calls of one call only (never with another of the
 * library's process-wide locks: internal.h, PX_FORK_PREPARE).  Another
 * process sharing the description is not covered (nb_anon_io).
 */
static pthread_mutex_t nb_flags_lock = PTHREAD_MUTEX_INITIALIZER;

void px__nbio_atfork(int phase)
{
	if (phase == PX_FORK_PREPARE)
		pthread_mutex_lock(&nb_flags_lock);
	else
		pthread_mutex_unlock(&nb_flags_lock);
}

/* The same lock for every other read, change and write-back of a file
 * status flag the library makes on the application's descriptors (a
 * connect's O_NONBLOCK, a listener's, the linux_rt wait's O_ASYNC:
 * internal.h, px__flags_lock). */
void px__flags_lock(void)
{
	pthread_mutex_lock(&nb_flags_lock);
}

void px__flags_unlock(void)
{
	pthread_mutex_unlock(&nb_flags_lock);
}

/* Take back the O_NONBLOCK a call set on fd for its length (flags lock
 * held): the flags are read again, so that only that bit changes and a
 * flag someone set meanwhile (the application's own O_ASYNC, say) stays. */
static void nb_nonblock_off(int fd)
{
	int now = fcntl(fd, F_GETFL);

	if (now >= 0 && (now & O_NONBLOCK))
		(void)fcntl(fd, F_SETFL, now & ~O_NONBLOCK);
}

/* The kernel refused RWF_NOWAIT: blocking, unless the rules trust the file
 * status flags and those say O_NONBLOCK; a blocking terminal is told apart
 * (its calls go through nb_tty_io), and so is a file of no type
 * (nb_anon_io). */
static int nb_downgrade(const px_nbio_rules *rules, px_nbio *io)
{
	int fl;

	if (rules->trust_nonblock) {
		/* Not while a call of nb_anon_io has its own O_NONBLOCK on
		 * the file (nb_flags_lock). */
		pthread_mutex_lock(&nb_flags_lock);
		fl = fcntl(io->fd, F_GETFL);
		if (fl < 0)
			fl = -errno;
		pthread_mutex_unlock(&nb_flags_lock);
		if (fl < 0)
			return fl;
		if (fl & O_NONBLOCK) {
			io->kind = PX_NBIO_KIND_NONBLOCK;
			return 0;
		}
	}
	if (isatty(io->fd))
		io->kind = PX_NBIO_KIND_TTY;
	else if (io->flags & PX_NBIO_ANON)  /* nb_classify's fstat */
		io->kind = PX_NBIO_KIND_ANON;
	else
		io->kind = PX_NBIO_KIND_BLOCKING;
	return 0;
}

/* 1 if fd shows events (or an error or hang-up) right now, 0 if not. */
static int nb_poll_now(int fd, short events)
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

/* writev(2) with RWF_NOSIGNAL where the kernel takes it (no SIGPIPE from
 * a pipe without reader).  A file with no write_iter (some character
 * devices) refuses any flag with EOPNOTSUPP; it is no pipe, so it gets a
 * plain writev. */
static ssize_t nb_writev(int fd, const struct iovec *iov, int cnt)
{
	int fl = px__rwf_nosignal();

	if (fl) {
		ssize_t n = pwritev2(fd, iov, cnt, -1, fl);
		if (n >= 0 || errno != EOPNOTSUPP)
			return n;
	}
	return writev(fd, iov, cnt);
}

/*
 * A read or write of a terminal in blocking mode, which the wait (or
 * poll(0)) reported ready.  The kernel's terminal write (n_tty_write)
 * sleeps until all it was given has gone unless the file is O_NONBLOCK,
 * and a terminal polls writable with one byte of room: a reader that
 * stopped (a pseudo-terminal nobody reads, a terminal stopped with ^S)
 * would hold the calling thread, the application's leader, for as long.
 * A read is safe after POLLIN only while no other process reads the same
 * terminal.  Making the application's description O_NONBLOCK would change
 * it for every process that shares it; so the call goes through a
 * description of our own, opened non-blocking from /proc/self/fd for this
 * call only and closed after it (no cache: nothing can go stale when the
 * application closes or reuses the number).  It is the same terminal (the
 * same device), and its settings and queues belong to the terminal, not
 * to the description.  Five more system calls (two ioctls, the open, one
 * more ioctl, the close).
 *
 * The description must reach the very terminal the application's does,
 * which a path does not promise: a pseudo-terminal's master side (its
 * name, /dev/ptmx, opens a new terminal; TIOCGPTN answers only there), a
 * hung-up terminal (its files answer EIO, and a new open would undo the
 * hang-up: the read would lose its end of file, a write would reach the
 * next session), /dev/tty or /dev/tty0 (they open whatever terminal is
 * the controlling or foreground one now).  So the two must name the same
 * device by TIOCGDEV, asked of the application's description after the
 * open (a hang-up before the open shows there; one after it hangs up
 * ours too).  Where that fails, where /proc is missing or the device
 * refuses the open (permissions, TIOCEXCL): -ENOTTY, and the caller uses
 * the application's description as before.  Bytes, or -errno (-EAGAIN:
 * no data or no room).
 */
static ssize_t nb_tty_io(int fd, const struct iovec *iov, int cnt, bool wr)
{
	char path[40];
	unsigned int ptn, dev, own_dev;
	ssize_t n;
	int own, err;

	if (ioctl(fd, TIOCGPTN, &ptn) == 0 || errno == EIO)
		return -ENOTTY;  /* a master side, or hung up */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	own = px__own_fd(open(path, (wr ? O_WRONLY : O_RDONLY) | O_NOCTTY |
				    O_NONBLOCK | O_CLOEXEC));
	if (own < 0)
		return -ENOTTY;
	if (ioctl(own, TIOCGDEV, &own_dev) < 0 ||
	    ioctl(fd, TIOCGDEV, &dev) < 0 || dev != own_dev) {
		px__own_close(own);
		return -ENOTTY;
	}
	n = wr ? nb_writev(own, iov, cnt) : readv(own, iov, cnt);
	err = errno;
	px__own_close(own);
	return n < 0 ? -err : n;
}

/*
 * A read or write of a blocking file of no type (an anonymous inode)
 * whose preadv2/pwritev2 with RWF_NOWAIT failed with EOPNOTSUPP or
 * EINVAL: inotify's read on 6.18 (timerfd, eventfd and signalfd reads
 * take the flag), and every call such a file has no method for (a read
 * of an epoll instance, a write to a timerfd or signalfd).  A poll(0)
 * before the call is no help: another reader of the same file (a thread
 * of the application) may take what it saw before the call, which would
 * then sleep, holding the loop thread, and with it px_cancel and
 * px_destroy, until the next event, if one ever comes (a helper's review
 * of 2026-12-06); and a call the file has no method for never polls
 * ready, so it waited until cancelled where read(2) and write(2) say
 * EINVAL at once (the same review).  Such a file cannot be opened again
 * from /proc (ENXIO), so unlike a terminal's it has no description of our
 * own: the call sets O_NONBLOCK on the application's description and
 * clears it after, unless it was there already.  For that call's length
 * another thread's blocking read of the same description would get EAGAIN;
 * such a file is shared between processes only by inheritance or
 * SCM_RIGHTS.  Four more system calls per call (F_GETFL and F_SETFL,
 * before and after), made whether or not the file is ready: once at the
 * start and once per readiness report.
 */
static ssize_t nb_anon_io(int fd, const struct iovec *iov, int cnt, bool wr)
{
	ssize_t n;
	int fl, err;

	/* The flags' look, the call and the clearing as one, against the
	 * library's other calls (nb_flags_lock). */
	pthread_mutex_lock(&nb_flags_lock);
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 ||
	    (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
		err = errno;
		pthread_mutex_unlock(&nb_flags_lock);
		return -err;
	}
	do {
		n = wr ? nb_writev(fd, iov, cnt) : readv(fd, iov, cnt);
	} while (n < 0 && errno == EINTR);
	err = errno;
	if (!(fl & O_NONBLOCK))
		nb_nonblock_off(fd);
	pthread_mutex_unlock(&nb_flags_lock);
	return n < 0 ? -err : n;
}

/* One read or write of the cnt buffers of iov on a stream that is not a
 * socket.  Bytes, or -errno (-EAGAIN: not ready). */
static ssize_t nb_other_io(const px_nbio_rules *rules, px_nbio *io,
			   const struct iovec *iov, int cnt, bool wr)
{
	for (;;) {
		struct iovec one;
		ssize_t n;
		int rc;

		switch (io->kind) {
		case PX_NBIO_KIND_NOWAIT:
			n = wr ? pwritev2(io->fd, iov, cnt, -1,
					  RWF_NOWAIT | px__rwf_nosignal())
			       : preadv2(io->fd, iov, cnt, -1, RWF_NOWAIT);
			if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
				rc = nb_downgrade(rules, io);
				if (rc < 0)
					return rc;
				continue;
			}
			break;
		case PX_NBIO_KIND_ANON:
			/* No poll(0) first: the call cannot sleep, and a
			 * file that never polls ready for it (a read of an
			 * epoll instance, a write to a timerfd) fails at
			 * once with EINVAL, as read(2) and write(2) do. */
			return nb_anon_io(io->fd, iov, cnt, wr);
		case PX_NBIO_KIND_BLOCKING:
		case PX_NBIO_KIND_TTY:
			rc = nb_poll_now(io->fd, wr ? POLLOUT : POLLIN);
			if (rc <= 0)
				return rc ? rc : -EAGAIN;
			if (io->kind == PX_NBIO_KIND_TTY) {
				n = nb_tty_io(io->fd, iov, cnt, wr);
				if (n == -EINTR)
					continue;
				if (n != -ENOTTY)
					return n;
			}
			if (!wr) {
				n = readv(io->fd, iov, cnt);
				break;
			}
			/* POLLOUT promises room for PIPE_BUF bytes, no more:
			 * so the first buffer only, cut to that (a short
			 * write, which the caller handles). */
			one = iov[0];
			if (one.iov_len > PIPE_BUF)
				one.iov_len = PIPE_BUF;
			n = nb_writev(io->fd, &one, 1);
			break;
		default:
			n = wr ? nb_writev(io->fd, iov, cnt)
			       : readv(io->fd, iov, cnt);
			break;
		}
		if (n >= 0)
			return n;
		if (errno != EINTR)
			return -errno;
	}
}

/* Bytes written, or -errno.  A pipe without reader raises SIGPIPE on a
 * write, unless the write carries RWF_NOSIGNAL (which nb_other_io gives
 * every such write where the kernel takes it: Linux 6.18).  Where it does
 * not, keep SIGPIPE blocked in this thread for the call and take it off
 * the pending set again unless it was pending before (three more system
 * calls). */
static ssize_t nb_other_write(const px_nbio_rules *rules, px_nbio *io,
			      const struct iovec *iov, int cnt)
{
	sigset_t pipe_set, old, pend;
	bool was_pending = false;
	ssize_t n;

	if (io->kind == PX_NBIO_KIND_FILE) {
		/* At or past RLIMIT_FSIZE the kernel would answer EFBIG and
		 * send SIGXFSZ, whose default action ends the process, to
		 * the thread that writes (the application's, in a start):
		 * EFBIG without the call, as for file writes (fac_start). */
		int big = px__fsize_refused_here(io->fd);
		if (big)
			return -big;
		return nb_other_io(rules, io, iov, cnt, true);
	}
	if (px__rwf_nosignal())
		return nb_other_io(rules, io, iov, cnt, true);
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	if (sigismember(&old, SIGPIPE) && sigpending(&pend) == 0)
		was_pending = sigismember(&pend, SIGPIPE);
	n = nb_other_io(rules, io, iov, cnt, true);
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

/* One read (wr false) or write of the cnt buffers of iov on a stream: the
 * socket call while it is, or may be, a socket (recv/send when single,
 * else recvmsg/sendmsg), else the calls above.  Bytes, or -errno.  This is
 * the epoll engine's hot path: inlined into the read and the write, each
 * with its own wr, as when each had its own copy. */
__attribute__((always_inline))
static inline ssize_t nb_stream_io(const px_nbio_rules *rules, px_nbio *io,
				   const struct iovec *iov, int cnt,
				   bool single, bool wr)
{
	if (io->kind <= PX_NBIO_KIND_SOCKET) {
		ssize_t n;
		int rc;

		do {
			if (single) {
				n = wr ? px__sys_send(io->fd, iov->iov_base,
						      iov->iov_len,
						      MSG_DONTWAIT | MSG_NOSIGNAL)
				       : px__sys_recv(io->fd, iov->iov_base,
						      iov->iov_len, MSG_DONTWAIT);
			} else {
				struct msghdr m = { .msg_iov = (struct iovec *)iov,
						    .msg_iovlen = (size_t)cnt };
				n = wr ? px__sys_sendmsg(io->fd, &m,
							 MSG_DONTWAIT | MSG_NOSIGNAL)
				       : px__sys_recvmsg(io->fd, &m, MSG_DONTWAIT);
			}
		} while (n < 0 && errno == EINTR);
		if (n >= 0 || errno != ENOTSOCK) {
			io->kind = PX_NBIO_KIND_SOCKET;
			return n < 0 ? -errno : n;
		}
		rc = nb_classify(io);
		if (rc < 0)
			return rc;
	}
	return wr ? nb_other_write(rules, io, iov, cnt)
		  : nb_other_io(rules, io, iov, cnt, false);
}

/*
 * A datagram socket shut down for reading (shutdown(2) with SHUT_RD or
 * SHUT_RDWR) polls readable for good (POLLIN | POLLRDHUP) while a
 * non-blocking receive of it says EAGAIN; a blocking one returns 0, and so
 * does io_uring's.  Taken for "not ready", a read pending there never
 * completed: epoll's one edge was spent, and poll, select and Linux AIO's
 * poll reported it again at once, so their leader spun at full CPU.  So an
 * EAGAIN after the wait reported the descriptor is checked: with POLLRDHUP
 * the read ends as a blocking one would.  (A stream socket in that state
 * returns 0 itself and never gets here; a start's own EAGAIN is not
 * checked, since the wait then reports the descriptor at once.)
 */
bool px__sock_read_shut(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	int n;

	do {
		n = poll(&p, 1, 0);
	} while (n < 0 && errno == EINTR);
	return n > 0 && (p.revents & POLLRDHUP);
}

static bool nb_read_shut(const px_nbio *io)
{
	if (!io->reported || io->kind > PX_NBIO_KIND_SOCKET)
		return false;     /* a start's try, or not a socket */
	return px__sock_read_shut(io->fd);
}

static int nb_read_stream(const px_nbio_rules *rules, px_nbio *io,
			  px_result *r)
{
	size_t len = r->c.len > rules->max_len ? rules->max_len : r->c.len;
	struct iovec one = { .iov_base = r->c.buf, .iov_len = len };
	const struct iovec *iov = &one;
	int cnt = 1;
	bool vec = (r->flags & PX_RF_VECTORED) != 0;
	ssize_t n;

	/* Vectored: the kernel bounds the total itself (MAX_RW_COUNT). */
	if (vec) {
		iov = r->c.iov;
		cnt = r->c.iovcnt;
	}
	n = nb_stream_io(rules, io, iov, cnt, !vec, false);
	if ((n == -EAGAIN || n == -EWOULDBLOCK) && nb_read_shut(io)) {
		/* Shut down for reading: a datagram that came meanwhile,
		 * else the end of the stream. */
		n = nb_stream_io(rules, io, iov, cnt, !vec, false);
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			n = 0;
	}
	if (n == -EAGAIN || n == -EWOULDBLOCK)
		return PX_NBIO_AGAIN;
	if (n < 0) {
		px_result_finish(r, 0, (int)-n);
		return PX_NBIO_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	/* A short read emptied the buffer: the next one would say EAGAIN.
	 * End of stream is different: every later read sees it at once. */
	return n && (size_t)n < r->c.len ? PX_NBIO_DONE_STOP : PX_NBIO_DONE;
}

static int nb_write_stream(const px_nbio_rules *rules, px_nbio *io,
			   px_result *r)
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
			one.iov_base = px_buf_rest(r);
			one.iov_len = r->c.len - r->done;
			if (one.iov_len > rules->max_len)
				one.iov_len = rules->max_len;
		}
		size_t want = cnt == 1 ? iov->iov_len : r->c.len - r->done;
		n = nb_stream_io(rules, io, iov, cnt, cnt == 1, true);
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return PX_NBIO_AGAIN;
		if (n < 0) {
			/* After partial progress too: bytes says how much. */
			px_result_finish(r, r->done, (int)-n);
			return PX_NBIO_DONE;
		}
		r->done += (size_t)n;
		if (r->done < r->c.len && (r->flags & PX_RF_WRITE_ALL)) {
			/* A short send means the socket buffer is full; other
			 * descriptors may just take less per call. */
			if ((io->kind == PX_NBIO_KIND_SOCKET && (size_t)n < want) ||
			    n == 0)
				return PX_NBIO_AGAIN;
			continue;
		}
		px_result_finish(r, r->done, 0);
		return r->done < r->c.len ? PX_NBIO_DONE_STOP : PX_NBIO_DONE;
	}
}

static int nb_read_dgram(px_nbio *io, px_result *r)
{
	socklen_t alen;
	ssize_t n;
	bool shut = false;

again:
	alen = sizeof(r->c.addr);
	do {
		n = px__sys_recvfrom(io->fd, r->c.buf, r->c.len, MSG_DONTWAIT,
				     (struct sockaddr *)&r->c.addr, &alen);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			/* Shut down for reading (nb_read_shut): a datagram
			 * that came meanwhile, else 0 bytes and no sender,
			 * as a blocking recvfrom gives. */
			if (shut) {
				r->c.addrlen = 0;
				px_result_finish(r, 0, 0);
				return PX_NBIO_DONE;
			}
			if (!nb_read_shut(io))
				return PX_NBIO_AGAIN;
			shut = true;
			goto again;
		}
		r->c.addrlen = 0;
		px_result_finish(r, 0, errno);
		return PX_NBIO_DONE;
	}
	r->c.addrlen = alen;
	px_result_finish(r, (size_t)n, 0);
	return PX_NBIO_DONE;
}

static int nb_write_dgram(px_nbio *io, px_result *r)
{
	const struct sockaddr *to =
		r->c.addrlen ? (const struct sockaddr *)&r->c.addr : NULL;
	ssize_t n;

	do {
		n = px__sys_sendto(io->fd, r->c.buf, r->c.len,
				   MSG_DONTWAIT | MSG_NOSIGNAL, to, r->c.addrlen);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return PX_NBIO_AGAIN;
		px_result_finish(r, 0, errno);
		return PX_NBIO_DONE;
	}
	px_result_finish(r, (size_t)n, 0);
	return PX_NBIO_DONE;
}

/* accept4 has no MSG_DONTWAIT: the listener itself must be non-blocking.
 * Only a listening socket is switched, the first time: px_accept(3)
 * promises no more, and a pipe, a file or an unlistened socket given by
 * mistake used to be left non-blocking after its accept failed (the
 * flag belongs to the open file description, shared with whoever else
 * holds it).  Anything else cannot block in accept4, which gives it its
 * own answer at once (ENOTSOCK, EINVAL, EOPNOTSUPP). */
static int nb_listener_nonblock(px_nbio *io)
{
	int fl, on = 0;
	socklen_t len = sizeof(on);

	if (io->flags & PX_NBIO_LISTENER_NB)
		return 0;
	if (getsockopt(io->fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) < 0 || !on)
		return 0;
	/* (Under the flags lock: the linux_rt wait may be turning O_ASYNC
	 * on for the listener from another thread.) */
	pthread_mutex_lock(&nb_flags_lock);
	fl = fcntl(io->fd, F_GETFL);
	if (fl < 0 ||
	    (!(fl & O_NONBLOCK) && fcntl(io->fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
		int err = errno;

		pthread_mutex_unlock(&nb_flags_lock);
		return -err;
	}
	pthread_mutex_unlock(&nb_flags_lock);
	io->flags |= PX_NBIO_LISTENER_NB;
	return 0;
}

/* A failed accept has no address (an accept starts with none: the
 * facade takes no address for it). */
static int nb_accept_fail(px_result *r, int err)
{
	r->c.addrlen = 0;
	px_result_finish(r, 0, err);
	return PX_NBIO_DONE;
}

static int nb_accept(px_nbio *io, px_result *r)
{
	int rc = nb_listener_nonblock(io);

	if (rc < 0)
		return nb_accept_fail(r, -rc);
	for (;;) {
		socklen_t alen = sizeof(r->c.addr);
		int nfd = px__sys_accept4(io->fd, (struct sockaddr *)&r->c.addr,
					  &alen, SOCK_CLOEXEC);

		if (nfd >= 0) {
			r->c.new_fd = nfd;
			r->c.addrlen = alen;
			px_result_finish(r, 0, 0);
			return PX_NBIO_DONE;
		}
		switch (errno) {
		case EAGAIN:
#if EWOULDBLOCK != EAGAIN
		case EWOULDBLOCK:
#endif
			/* An AF_UNIX listener shut down with shutdown(2)
			 * polls readable for good while a non-blocking accept
			 * says EAGAIN (a blocking one says EINVAL, as TCP's
			 * does either way): taken for "not ready", epoll
			 * waited for good and poll, select and Linux AIO
			 * spun.  Checked only after the wait reported it. */
			if (nb_read_shut(io))
				return nb_accept_fail(r, EINVAL);
			return PX_NBIO_AGAIN;
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
			return nb_accept_fail(r, errno);
		}
	}
}

/*
 * A connect found finished (the peer known), or one that SO_ERROR and
 * getpeername cannot place (no error, no peer: still under way, or failed
 * with its error taken by another call): call connect(2) once more.
 * Linux keeps a socket whose non-blocking connect has finished marked as
 * connecting until its next connect(2), which returns 0 and marks it
 * connected; without this call a second px_connect on the socket would
 * complete with 0, where a socket connected any other way (and the
 * io_uring engine) gives EISCONN.  The call must not block: on a socket
 * that was blocking it is made with O_NONBLOCK set for its length (a
 * handshake still under way, as in a simultaneous open, would wait).
 * Returns 0, EALREADY (still under way) or the connection's error
 * (ECONNABORTED when that error was taken already).
 *
 * A TCP socket found closed is the exception: its connect failed, or the
 * application ended it with shutdown(2) or a connect(2) to AF_UNSPEC,
 * which clear the mark themselves.  connect(2) to the address would then
 * start a new handshake that nobody asked for (the socket in SYN_SENT
 * after the callback, and EINPROGRESS in the completion when a read had
 * taken the reset); a blocking connect(2) ended that way leaves the
 * socket closed.  A connect(2) to AF_UNSPEC clears the mark where it is
 * still set and starts nothing.
 */
static int nb_connect_finish(px_nbio *io, uint8_t conn, px_result *r)
{
	int fl = 0;
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);

	if (getsockopt(io->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
	    tl > 0 && ti.tcpi_state == TCP_CLOSE) {
		struct sockaddr un = { .sa_family = AF_UNSPEC };
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		/* The error that closed it, if nobody took it yet: a reset
		 * that came after the caller's look at SO_ERROR (a listener
		 * shut down just as the connection was made) is the
		 * connect's result, as connect(2) would report it; only an
		 * error taken already leaves ECONNABORTED. */
		if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = 0;
		(void)px__sys_connect(io->fd, &un, sizeof(un));
		return soerr ? soerr : ECONNABORTED;
	}
	/* O_NONBLOCK for the call's length, under the flags lock, as in
	 * nb_connect. */
	if (conn == PX_NBIO_CONN_PENDING_BLOCKING) {
		pthread_mutex_lock(&nb_flags_lock);
		fl = fcntl(io->fd, F_GETFL);
		if (fl < 0 ||
		    (!(fl & O_NONBLOCK) &&
		     fcntl(io->fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
			int e = errno;

			pthread_mutex_unlock(&nb_flags_lock);
			return e;
		}
	}
	int err = px__sys_connect(io->fd,
				  (const struct sockaddr *)&r->c.addr,
				  r->c.addrlen) < 0 ? errno : 0;
	if (conn == PX_NBIO_CONN_PENDING_BLOCKING) {
		if (!(fl & O_NONBLOCK))
			nb_nonblock_off(io->fd);
		pthread_mutex_unlock(&nb_flags_lock);
	}
	/* Marked connected by someone else meanwhile: connected all the
	 * same. */
	return err == EISCONN ? 0 : err;
}

/* The socket's address family, or -errno (EBADF: closed meanwhile). */
static int nb_family(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	return ss.ss_family;
}

/* A blocking AF_UNIX socket's connect refused for a full backlog: is
 * the wait over?  connect(2) waits at most the socket's SO_SNDTIMEO (then
 * EAGAIN), and so does io_uring's connect, made blocking in the kernel;
 * with no timeout it waits for good.  The first refusal notes when the
 * wait ends in r->deadline_ns, which a started operation does not use
 * otherwise (timers do; the allocator zeroes it), and later ones compare.
 * Only the thread that holds r's call touches it. */
static bool nb_connect_wait_over(int fd, px_result *r)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);
	uint64_t now;

	if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len) < 0 ||
	    (tv.tv_sec <= 0 && tv.tv_usec <= 0))
		return false;
	now = px__now_ns();
	if (!r->deadline_ns) {
		/* Beyond the clock's range (seconds near the kernel's
		 * limit): a wait without end. */
		if ((uint64_t)tv.tv_sec >= (UINT64_MAX - now) / 1000000000u - 1)
			return false;
		r->deadline_ns = now + (uint64_t)tv.tv_sec * 1000000000u +
				 (uint64_t)tv.tv_usec * 1000u;
		return false;
	}
	return now >= r->deadline_ns;
}

static int nb_connect(px_nbio *io, uint8_t *conn, px_result *r)
{
	int err;

	if (*conn == PX_NBIO_CONN_NEW) {
		int fl;

		/*
		 * O_NONBLOCK is set for the connect(2) of a blocking socket
		 * and taken back after it.  The write-back used to put back
		 * the flags read before, which undid any flag changed in
		 * between: the linux_rt wait turns O_ASYNC on for a socket
		 * it starts watching, from another thread (a read started
		 * there meanwhile), and that read, never signalled, waited
		 * for good; a change read while O_NONBLOCK was ours would
		 * have left the socket non-blocking the other way round.  So
		 * the look, the change, the call and the write-back are made
		 * under the flags lock, which the linux_rt wait takes for its
		 * own changes, and the write-back clears O_NONBLOCK alone
		 * (nb_nonblock_off), keeping what the application may have
		 * set meanwhile.
		 */
		pthread_mutex_lock(&nb_flags_lock);
		fl = fcntl(io->fd, F_GETFL);
		if (fl < 0 ||
		    (!(fl & O_NONBLOCK) &&
		     fcntl(io->fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
			err = errno;
			pthread_mutex_unlock(&nb_flags_lock);
			goto out;
		}
		err = px__sys_connect(io->fd,
				      (const struct sockaddr *)&r->c.addr,
				      r->c.addrlen) < 0 ? errno : 0;
		/* A connect made before on the socket, the application's
		 * own non-blocking connect(2) say, failed and its error was
		 * taken (SO_ERROR): Linux kept the socket marked as
		 * connecting, and this call only cleared the mark.  The
		 * connect asked for is still to be made, as io_uring's
		 * kernel connect makes it (it tries once more after an
		 * ECONNABORTED): px_connect(3), a socket whose connect
		 * failed connects at the next px_connect. */
		if (err == ECONNABORTED)
			err = px__sys_connect(io->fd,
					      (const struct sockaddr *)&r->c.addr,
					      r->c.addrlen) < 0 ? errno : 0;
		if (!(fl & O_NONBLOCK))
			nb_nonblock_off(io->fd);
		pthread_mutex_unlock(&nb_flags_lock);
		/* An AF_UNIX listener's backlog is full: connect(2) on the
		 * blocking socket would wait for room, as io_uring's connect
		 * does; on a non-blocking one it says EAGAIN, and so does
		 * this.  Nothing polls when room comes (the socket polls
		 * writable all along): the connect stays new and is made
		 * again after a pause (px__nbio_connect_later), until the
		 * socket's SO_SNDTIMEO, if it has one, has passed: then
		 * EAGAIN, as connect(2) gives it (nb_connect_wait_over). */
		if (err == EAGAIN && !(fl & O_NONBLOCK)) {
			int fam = nb_family(io->fd);

			/* Closed with close(2) since the call: EBADF, as
			 * the next attempt would say, not the refusal. */
			if (fam == -EBADF)
				err = EBADF;
			else if (fam == AF_UNIX &&
				 !nb_connect_wait_over(io->fd, r))
				return PX_NBIO_AGAIN;
		}
		/* Interrupted, a non-blocking connect carries on regardless. */
		if (err == EINPROGRESS || err == EINTR) {
			*conn = fl & O_NONBLOCK ? PX_NBIO_CONN_PENDING
						: PX_NBIO_CONN_PENDING_BLOCKING;
			return PX_NBIO_AGAIN;
		}
		goto out;
	}

	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) {
		err = errno;
	} else if (soerr) {
		/* Failed (refused, unreachable, timed out).  Linux keeps the
		 * socket marked as connecting until its next connect(2), so
		 * a later px_connect on it would say ECONNABORTED where a
		 * blocking connect(2), and the io_uring engine, leave it
		 * ready to connect again: this call (ECONNABORTED, the error
		 * taken) clears the mark. */
		err = soerr;
		(void)nb_connect_finish(io, *conn, r);
	} else {
		/* No error: connected, or a stale wake-up while still in
		 * progress. */
		struct sockaddr_storage ss;
		socklen_t al = sizeof(ss);
		if (getpeername(io->fd, (struct sockaddr *)&ss, &al) == 0 ||
		    errno == ENOTCONN) {
			/* Either way connect(2) asked again has the last
			 * word.  Connected: EISCONN.  ENOTCONN: still under
			 * way, or failed with its error taken already (a
			 * read or write on the socket, or anyone's SO_ERROR,
			 * reports a pending error once and clears it; a read
			 * started with the connect sees the ECONNREFUSED).
			 * connect(2) tells those apart: EALREADY, or the
			 * failure (ECONNABORTED once the error is gone).
			 * Taken for a stale wake-up, the failed connect never
			 * completed: the poll and select engines spun on its
			 * hang-up, epoll waited for an edge that would not
			 * come. */
			err = nb_connect_finish(io, *conn, r);
			if (err == EALREADY)
				return PX_NBIO_AGAIN;
		} else {
			err = errno;
		}
	}
out:
	px_result_finish(r, 0, err);
	return PX_NBIO_DONE;
}

int px__nbio_try(const px_nbio_rules *rules, px_nbio *io, uint8_t *conn,
		 px_result *r)
{
	switch (r->c.op) {
	case PX_OP_READ_STREAM:
		return nb_read_stream(rules, io, r);
	case PX_OP_WRITE_STREAM:
		return nb_write_stream(rules, io, r);
	case PX_OP_READ_DGRAM:
		return nb_read_dgram(io, r);
	case PX_OP_WRITE_DGRAM:
		return nb_write_dgram(io, r);
	case PX_OP_ACCEPT:
		return nb_accept(io, r);
	case PX_OP_CONNECT:
		return nb_connect(io, conn, r);
	default:
		px_result_finish(r, 0, EOPNOTSUPP);
		return PX_NBIO_DONE;
	}
}

void px__nbio_file_io(px_result *r)
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
