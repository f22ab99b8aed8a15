/*
 * util.c - small helpers: clock, error text, operation names.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

ssize_t px__sys_recv(int fd, void *buf, size_t len, int flags)
{
	return (ssize_t)syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

ssize_t px__sys_send(int fd, const void *buf, size_t len, int flags)
{
	return (ssize_t)syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

ssize_t px__sys_recvfrom(int fd, void *buf, size_t len, int flags,
			 struct sockaddr *from, socklen_t *fromlen)
{
	return (ssize_t)syscall(SYS_recvfrom, fd, buf, len, flags, from,
				fromlen);
}

ssize_t px__sys_sendto(int fd, const void *buf, size_t len, int flags,
		       const struct sockaddr *to, socklen_t tolen)
{
	return (ssize_t)syscall(SYS_sendto, fd, buf, len, flags, to,
				(size_t)tolen);
}

ssize_t px__sys_recvmsg(int fd, struct msghdr *m, int flags)
{
	return (ssize_t)syscall(SYS_recvmsg, fd, m, flags);
}

ssize_t px__sys_sendmsg(int fd, const struct msghdr *m, int flags)
{
	return (ssize_t)syscall(SYS_sendmsg, fd, m, flags);
}

/* ThreadSanitizer follows descriptors through the libc calls that make
 * and close them.  A socket made by a bare syscall(2) it never sees open:
 * a race it found on one (the accept keep-off closing it) stopped TSan on
 * a check of its own while it wrote the report, which then named nothing
 * (fuzz_api, select on poll with two loop threads).  So under TSan the
 * accept goes through glibc. */
#if defined(__SANITIZE_THREAD__)
#define PX_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PX_UNDER_TSAN 1
#endif
#endif

int px__sys_accept4(int fd, struct sockaddr *addr, socklen_t *addrlen,
		    int flags)
{
#ifdef PX_UNDER_TSAN
	return accept4(fd, addr, addrlen, flags);
#else
	return (int)syscall(SYS_accept4, fd, addr, addrlen, flags);
#endif
}

/* ThreadSanitizer takes a connect(2) that succeeds as making the
 * descriptor anew, so another thread's call on the same descriptor at that
 * moment (the edge poller's epoll_ctl for a second px_connect queued behind
 * the first, say) showed as a race (fuzz_api under TSan, epoll with a
 * dedicated processor), although the kernel allows both.  The descriptor
 * exists before and after; made by syscall(2), the connect is out of
 * TSan's sight and the model stays true. */
int px__sys_connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	return (int)syscall(SYS_connect, fd, addr, (size_t)addrlen);
}

int px__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev);
}

int px__sys_rt_tgsigqueueinfo(pid_t tgid, pid_t tid, int sig, siginfo_t *si)
{
	return (int)syscall(SYS_rt_tgsigqueueinfo, tgid, tid, sig, si);
}

int px__sys_epoll_pwait(int epfd, struct epoll_event *ev, int max,
			int timeout_ms, const sigset_t *mask)
{
	/* The kernel's signal set is _NSIG bits, not glibc's sigset_t. */
	return (int)syscall(SYS_epoll_pwait, epfd, ev, max, timeout_ms, mask,
			    (size_t)(_NSIG / 8));
}

uint64_t px__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

unsigned px__default_max_aio(void)
{
	/* Four operations per descriptor the process may open (a session
	 * keeps a read, a write and maybe a connect or an accept pending),
	 * never below 65536 and never above 2^24.  A default below what the
	 * application keeps pending would be filled by reads that wait for
	 * data while the writes that answer them sit deferred. */
	struct rlimit rl;
	uint64_t n = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (1u << 22))
			n = 1u << 24;
		else if (4 * (uint64_t)rl.rlim_cur > n)
			n = 4 * (uint64_t)rl.rlim_cur;
	}
	return (unsigned)n;
}

/*
 * A file write that the kernel would refuse for RLIMIT_FSIZE: it answers
 * a write that starts at or past the soft limit with EFBIG and sends
 * SIGXFSZ to the thread that made it, whose default action ends the
 * process.  The engines write in the application's threads (the
 * readiness engines in the start, Linux AIO in io_submit, io_uring in
 * io_uring_enter), so the application died of a write it had asked the
 * proactor for, the error never delivered.  Such a write is refused here
 * instead, with EFBIG and no call.  The limit applies to regular files
 * only, at the offset given or, on an O_APPEND descriptor, at the end of
 * the file.  The kernel's own checks come first: an offset beyond off_t,
 * or one whose end passes it, fails with EINVAL, which the call gives.
 * One getrlimit per file write; the fcntl and the fstat only under a
 * finite limit.  (An append started while earlier ones are in flight is
 * checked against the file's size at its start.)
 */
int px__fsize_refused(int fd, uint64_t offset, size_t len)
{
	struct rlimit rl;
	struct stat st;
	uint64_t pos = offset;
	int fl;

	if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	if (offset > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - offset)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_APPEND) && offset < rl.rlim_cur))
		return 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	if (fl & O_APPEND)
		pos = (uint64_t)st.st_size;
	return pos >= rl.rlim_cur ? EFBIG : 0;
}

/* The same for a stream write (px_write_stream and its forms) on fd, a
 * regular file or block device (nbio's PX_NBIO_KIND_FILE, never a socket
 * or a pipe: no cost on their path), which writes at the descriptor's
 * file position or, with O_APPEND, at the end of the file.  One getrlimit
 * per such write; the fcntl, the fstat and the lseek only under a finite
 * limit.  (Another writer on the same description may move the position
 * between this look and the write.) */
int px__fsize_refused_here(int fd)
{
	struct rlimit rl;
	struct stat st;
	off_t pos;
	int fl;

	if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	pos = (fl & O_APPEND) ? st.st_size : lseek(fd, 0, SEEK_CUR);
	return pos >= 0 && (uint64_t)pos >= rl.rlim_cur ? EFBIG : 0;
}

#ifndef RWF_NOSIGNAL
#define RWF_NOSIGNAL 0x00000100 /* linux/fs.h of 6.18 */
#endif

int px__rwf_nosignal(void)
{
	/* 0: not probed yet; 1: the kernel takes the flag; 2: it does not.
	 * Two threads may both probe the first time; they agree. */
	static atomic_int known;
	int k = atomic_load_explicit(&known, memory_order_relaxed);
	if (k == 0) {
		/* One byte into a fresh pipe with the flag: a kernel that
		 * does not know it refuses the write with EOPNOTSUPP before
		 * looking at the pipe. */
		int p[2];
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
			return 0; /* out of descriptors: ask again next time */
		px__own_fd(p[0]);
		px__own_fd(p[1]);
		struct iovec v = {.iov_base = "x", .iov_len = 1};
		k = pwritev2(p[1], &v, 1, -1, RWF_NOSIGNAL) == 1 ? 1 : 2;
		px__own_close(p[0]);
		px__own_close(p[1]);
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 1 ? RWF_NOSIGNAL : 0;
}

int px__ms_until(uint64_t deadline_ns, uint64_t now)
{
	if (deadline_ns == PX_NS_INF)
		return -1;
	if (deadline_ns <= now)
		return 0;
	uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

void px__set_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

const char *px_strerror(int err)
{
	/* -INT_MIN is no int (an overflow); no errno is near it anyway. */
	if (err == INT_MIN)
		return "unknown error";
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
	case EOPNOTSUPP:
		/* The start's meaning, and the kernel's in a completion
		 * (an accept on a datagram socket). */
		return "operation not supported by any processor of this engine, or by the descriptor";
	case ESHUTDOWN:
		return "proactor is stopped or being destroyed";
	case ENOSYS:
		return "engine not built in or not offered by this kernel";
	case EMFILE:
		return "descriptor beyond what the wait strategy can watch, or too many open files";
	case ECHILD:
		return "proactor belongs to the parent process (called after fork)";
	default:
		break;
	}
	/* strerror is not required to be thread safe; strerrordesc_np is
	 * (glibc 2.32+) and returns static text. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
	const char *s = strerrordesc_np(err);
	return s ? s : "unknown error";
#else
	return "unknown error";
#endif
}

static const char *const px_op_names[PX_OP_COUNT] = {
	[PX_OP_READ_STREAM] = "read_stream",   [PX_OP_WRITE_STREAM] = "write_stream",
	[PX_OP_READ_FILE] = "read_file",       [PX_OP_WRITE_FILE] = "write_file",
	[PX_OP_READ_DGRAM] = "read_dgram",     [PX_OP_WRITE_DGRAM] = "write_dgram",
	[PX_OP_ACCEPT] = "accept",             [PX_OP_CONNECT] = "connect",
	[PX_OP_POST] = "post",                 [PX_OP_TIMER] = "timer",
	[PX_OP_CLOSE] = "close",
};

const char *px_op_name(px_op op)
{
	if ((unsigned)op >= PX_OP_COUNT)
		return "unknown";
	return px_op_names[op];
}

bool px__no_offsets(int fd, const struct stat *st)
{
	if (S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode))
		return true;
	/* No file type at all: an anonymous inode (eventfd, signalfd,
	 * timerfd, epoll, inotify, ...), which pread(2) refuses although
	 * lseek may say 0. */
	if ((st->st_mode & S_IFMT) == 0)
		return true;
	/* A terminal has none; /dev/zero and the like do. */
	return S_ISCHR(st->st_mode) && lseek(fd, 0, SEEK_CUR) < 0 &&
	       errno == ESPIPE;
}

void *px__zalloc_lines(size_t size)
{
	size_t n = size ? PX_LINES(size) : PX_CACHE_LINE;
	if (n < size)           /* the rounding wrapped around */
		return NULL;
	void *p = aligned_alloc(PX_CACHE_LINE, n);
	if (p)
		memset(p, 0, n);
	return p;
}

/* ------------------------------------------------------------------ */
/* The library's own descriptors (internal.h, px__is_own_fd)            */
/* ------------------------------------------------------------------ */

_Atomic unsigned long px__own_fd_bits[PX_OWN_FD_BITS /
				      (8 * sizeof(unsigned long))];
_Atomic unsigned px__own_fd_high;   /* entries in own_high */
static pthread_mutex_t own_high_lock = PTHREAD_MUTEX_INITIALIZER;
static int *own_high;
static size_t own_high_n, own_high_cap;

/*
 * What each of the engines' own descriptors named when it was made
 * (px__own_fd_id), so that its owner can tell whether the number still
 * names it (px__own_fd_is): the application may have closed it with
 * close(2) and taken the number for a file of its own since, by dup2(2)
 * or its next open, socket or epoll_create1, and px_destroy closed that
 * file (TESTING.md, fixed problem 310).  The owner keeps the identity
 * (px_own_id): the device and inode, which tell a pipe, an io_uring ring
 * (each its own inode) or any ordinary file apart, and a stamp on the
 * open file description, since eventfds, epoll instances and signalfds
 * share one anonymous inode: F_SETSIG's signal number, which only a file
 * with O_ASYNC (or a lease, a directory notification) ever uses, and
 * which a new file of the application's has at 0.  (The one O_ASYNC of
 * ours, the linux_rt wait's on a pipe interrupt, changes it while the
 * wait lives and puts it back when it lets the file go.)  The
 * library may also have been given the number again for a descriptor of
 * its own (a rebuilt epoll instance, a POSIX AIO dup), which the stamp
 * does not tell from the first: so a table here says, by number, which
 * identity (its serial) the library made last under it, and any new
 * descriptor of the library's under a number (px__own_fd) takes it over.
 * The table holds the numbers made with px__own_fd_id, under own_high's
 * lock, with a bit per number below PX_OWN_FD_BITS saying it holds one,
 * so that a number without one (the POSIX AIO dups, made per busy spell)
 * pays one relaxed load.  Looked at only when a descriptor is made,
 * checked (an idle check) or closed: never per operation.
 */
#define OWN_STAMP_SIG 61
typedef struct own_entry {
	int fd;
	uint64_t serial;
} own_entry;
static _Atomic unsigned long own_id_bits[PX_OWN_FD_BITS /
					 (8 * sizeof(unsigned long))];
static own_entry *own_ids;
static size_t own_ids_n, own_ids_cap;
static uint64_t own_serial;   /* the last one given, under the lock */

bool px__own_fd_high_has(int fd)
{
	bool found = false;

	pthread_mutex_lock(&own_high_lock);
	for (size_t i = 0; i < own_high_n && !found; i++)
		found = own_high[i] == fd;
	pthread_mutex_unlock(&own_high_lock);
	return found;
}

static void own_id_forget(int fd);

int px__own_fd(int fd)
{
	const unsigned w = 8 * sizeof(unsigned long);

	if (fd < 0)
		return fd;
	/* A fresh number: an entry of it is a descriptor of the library's
	 * closed behind its back (own_entry), which its owner must not take
	 * for this one. */
	own_id_forget(fd);
	if ((unsigned)fd < PX_OWN_FD_BITS) {
		atomic_fetch_or_explicit(&px__own_fd_bits[(unsigned)fd / w],
					 1ul << ((unsigned)fd % w),
					 memory_order_relaxed);
		return fd;
	}
	pthread_mutex_lock(&own_high_lock);
	if (own_high_n == own_high_cap) {
		size_t cap = own_high_cap ? own_high_cap * 2 : 16;
		int *t = realloc(own_high, cap * sizeof(*t));
		if (t) {
			own_high = t;
			own_high_cap = cap;
		}
	}
	if (own_high_n < own_high_cap) {
		own_high[own_high_n++] = fd;
		atomic_store_explicit(&px__own_fd_high, (unsigned)own_high_n,
				      memory_order_relaxed);
	}
	pthread_mutex_unlock(&own_high_lock);
	return fd;
}

/* Whether the table may hold an entry for fd (see own_entry). */
static bool own_id_maybe(int fd)
{
	const unsigned w = 8 * sizeof(unsigned long);

	if ((unsigned)fd < PX_OWN_FD_BITS)
		return atomic_load_explicit(&own_id_bits[(unsigned)fd / w],
					    memory_order_relaxed) &
		       (1ul << ((unsigned)fd % w));
	return fd >= 0;
}

/* The serial of fd's entry, 0 for none.  Lock held. */
static uint64_t own_serial_of(int fd)
{
	for (size_t i = 0; i < own_ids_n; i++)
		if (own_ids[i].fd == fd)
			return own_ids[i].serial;
	return 0;
}

/* Forget fd's entry, if the table holds one.  Lock held. */
static void own_id_forget_locked(int fd)
{
	const unsigned w = 8 * sizeof(unsigned long);

	for (size_t i = 0; i < own_ids_n; i++) {
		if (own_ids[i].fd == fd) {
			own_ids[i] = own_ids[--own_ids_n];
			break;
		}
	}
	/* Empty once the last proactor is gone: given back, so that a
	 * library unloaded with dlclose leaves no table behind (LeakSanitizer
	 * in dlopen_shared: the pointer went with the library's data). */
	if (!own_ids_n && own_ids) {
		free(own_ids);
		own_ids = NULL;
		own_ids_cap = 0;
	}
	if ((unsigned)fd < PX_OWN_FD_BITS)
		atomic_fetch_and_explicit(&own_id_bits[(unsigned)fd / w],
					  ~(1ul << ((unsigned)fd % w)),
					  memory_order_relaxed);
}

static void own_id_forget(int fd)
{
	if (!own_id_maybe(fd))
		return;
	pthread_mutex_lock(&own_high_lock);
	own_id_forget_locked(fd);
	pthread_mutex_unlock(&own_high_lock);
}

/* fd's device and inode: 0, or -1 with errno.  By statx(2) through
 * syscall(2), out of ThreadSanitizer's sight: the check looks at a number
 * the application may be closing at that moment, which TSan, modelling a
 * descriptor as memory, reports against that close (as for
 * px__sys_epoll_ctl). */
static int own_stat(int fd, dev_t *dev, ino_t *ino)
{
#ifdef SYS_statx
	struct statx sx;

	if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_INO, &sx) != 0)
		return -1;
	*dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
	*ino = (ino_t)sx.stx_ino;
#else
	struct stat st;

	if (fstat(fd, &st) != 0)
		return -1;
	*dev = st.st_dev;
	*ino = st.st_ino;
#endif
	return 0;
}

int px__own_fd_id(int fd, px_own_id *id)
{
	const unsigned w = 8 * sizeof(unsigned long);

	memset(id, 0, sizeof(*id));
	if (px__own_fd(fd) < 0)
		return fd;
	if (own_stat(fd, &id->dev, &id->ino) != 0)
		return fd;   /* unchecked, as before the identity */
	id->stamped = fcntl(fd, F_SETSIG, OWN_STAMP_SIG) == 0;
	pthread_mutex_lock(&own_high_lock);
	if (own_ids_n == own_ids_cap) {
		size_t cap = own_ids_cap ? own_ids_cap * 2 : 16;
		own_entry *t = realloc(own_ids, cap * sizeof(*t));
		if (t) {
			own_ids = t;
			own_ids_cap = cap;
		}
	}
	/* (px__own_fd above forgot any entry of the number's.) */
	if (own_ids_n < own_ids_cap) {
		id->serial = ++own_serial;
		own_ids[own_ids_n].fd = fd;
		own_ids[own_ids_n++].serial = id->serial;
		if ((unsigned)fd < PX_OWN_FD_BITS)
			atomic_fetch_or_explicit(&own_id_bits[(unsigned)fd / w],
						 1ul << ((unsigned)fd % w),
						 memory_order_relaxed);
	}
	pthread_mutex_unlock(&own_high_lock);
	return fd;
}

/* px__own_fd_is's answer: OWN_YES, OWN_APPS (the number is not the
 * library's any more: closed, or the application's file), OWN_OTHER (the
 * library has made another descriptor under it since). */
enum { OWN_YES, OWN_APPS, OWN_OTHER };

static int own_check(int fd, const px_own_id *id, int stamp)
{
	dev_t dev;
	ino_t ino;
	uint64_t serial = 0;

	if (fd < 0 || !id->serial)
		return OWN_YES;   /* nothing kept: taken as ours, as before */
	if (own_id_maybe(fd)) {
		pthread_mutex_lock(&own_high_lock);
		serial = own_serial_of(fd);
		pthread_mutex_unlock(&own_high_lock);
	}
	if (serial != id->serial)
		return px__is_own_fd(fd) ? OWN_OTHER : OWN_APPS;
	/* Closed (EBADF), another file, or another file description of
	 * the same anonymous inode (no stamp, or another signal).  Any
	 * other failure of statx or fcntl tells nothing: taken as ours. */
	if (own_stat(fd, &dev, &ino) != 0)
		return errno == EBADF ? OWN_APPS : OWN_YES;
	if (dev != id->dev || ino != id->ino)
		return OWN_APPS;
	if (id->stamped && fcntl(fd, F_GETSIG) != (stamp ? stamp : OWN_STAMP_SIG))
		return OWN_APPS;
	return OWN_YES;
}

bool px__own_fd_is(int fd, const px_own_id *id)
{
	return own_check(fd, id, 0) == OWN_YES;
}

bool px__own_fd_is_signed(int fd, const px_own_id *id, int stamp)
{
	return own_check(fd, id, stamp) == OWN_YES;
}

int px__own_close_id(int fd, const px_own_id *id)
{
	switch (own_check(fd, id, 0)) {
	case OWN_YES:
		return px__own_close(fd);
	case OWN_APPS:
		/* Not the library's any more: forgotten, left alone. */
		px__own_fd_drop(fd);
		break;
	default:
		/* Another descriptor of the library's now: its owner's. */
		break;
	}
	errno = EBADF;
	return -1;
}

void px__own_fd_drop_id(int fd, const px_own_id *id)
{
	if (own_check(fd, id, 0) != OWN_OTHER)
		px__own_fd_drop(fd);
}

void px__own_fd_drop(int fd)
{
	const unsigned w = 8 * sizeof(unsigned long);

	if (fd < 0)
		return;
	own_id_forget(fd);
	if ((unsigned)fd < PX_OWN_FD_BITS) {
		atomic_fetch_and_explicit(&px__own_fd_bits[(unsigned)fd / w],
					  ~(1ul << ((unsigned)fd % w)),
					  memory_order_relaxed);
		return;
	}
	pthread_mutex_lock(&own_high_lock);
	for (size_t i = 0; i < own_high_n; i++) {
		if (own_high[i] == fd) {
			own_high[i] = own_high[--own_high_n];
			break;
		}
	}
	atomic_store_explicit(&px__own_fd_high, (unsigned)own_high_n,
			      memory_order_relaxed);
	pthread_mutex_unlock(&own_high_lock);
}

void px__own_fd_atfork(int phase)
{
	if (phase == PX_FORK_PREPARE) {
		pthread_mutex_lock(&own_high_lock);
		return;
	}
	if (phase == PX_FORK_CHILD) {
		for (size_t i = 0; i < sizeof(px__own_fd_bits) /
				       sizeof(px__own_fd_bits[0]); i++)
			atomic_store_explicit(&px__own_fd_bits[i], 0,
					      memory_order_relaxed);
		own_high_n = 0;
		atomic_store_explicit(&px__own_fd_high, 0, memory_order_relaxed);
		for (size_t i = 0; i < sizeof(own_id_bits) /
				       sizeof(own_id_bits[0]); i++)
			atomic_store_explicit(&own_id_bits[i], 0,
					      memory_order_relaxed);
		own_ids_n = 0;
	}
	pthread_mutex_unlock(&own_high_lock);
}

int px__own_close(int fd)
{
	px__own_fd_drop(fd);
	return close(fd);
}
