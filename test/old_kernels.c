/*
 * old_kernels: the default engine ("auto") on kernels and sandboxes that
 * lack the faster mechanisms.
 *
 * Each case runs in a child process that first installs a seccomp filter
 * making some system calls fail with a chosen errno, the way the kernel or
 * a sandbox would:
 *
 *   - io_uring_setup and friends with ENOSYS: a kernel before 5.1, or one
 *     built without CONFIG_IO_URING;
 *   - the same with EPERM: a container's default seccomp profile, or
 *     kernel.io_uring_disabled;
 *   - io_uring_setup with ENOMEM: the locked-memory limit of kernels
 *     before 5.12, or memory pressure;
 *   - io_uring_register with EINVAL: io_uring without the opcode probe
 *     (5.1 to 5.5), which the provider needs to know its opcodes are
 *     there, and with ENOMEM, which must come back as ENOMEM rather
 *     than "not offered" (ENOSYS);
 *   - io_uring and Linux AIO (io_setup ...) with ENOSYS: a kernel built
 *     without CONFIG_AIO;
 *   - those and eventfd with ENOSYS: a kernel without CONFIG_EVENTFD;
 *   - those and epoll with ENOSYS (CONFIG_EPOLL off): what is left is
 *     poll and select;
 *   - io_uring and epoll with ENOSYS: Linux AIO alone;
 *   - madvise(MADV_WIPEONFORK) with EINVAL: a kernel before 4.14, where
 *     the library tells a fork(2) child by its pthread_atfork handler
 *     instead of a page the kernel clears; a child forked from the case
 *     must still get -ECHILD from every call on the inherited proactor,
 *     and the parent's read must still complete;
 *   - pwritev2 with RWF_NOSIGNAL with EOPNOTSUPP: every kernel before
 *     6.18, where the shared non-blocking calls (providers/nbio.c) keep
 *     SIGPIPE blocked around a write to a pipe instead, and so does the
 *     pipe interrupt's wake-up (interrupt/pipe.c), tried with the
 *     interrupt's read end closed behind the library's back;
 *   - preadv2 and pwritev2 with RWF_NOWAIT or RWF_NOSIGNAL with
 *     EOPNOTSUPP: a kernel before 4.14, which knows neither (and, for
 *     RWF_NOWAIT, a pipe of kernels before 5.x), where a pipe is checked
 *     with poll(0) first and written PIPE_BUF bytes at a time;
 *   - preadv2 and pwritev2 with ENOSYS: a kernel before 4.6, which glibc
 *     answers with EOPNOTSUPP as soon as a flag is given;
 *   - eventfd alone with ENOSYS, and engines named explicitly, each made
 *     and run or refused with a message that names eventfd: io_uring's
 *     dedicated ring, its team with epoll, epoll, Linux AIO, POSIX AIO;
 *   - io_uring_setup with EINVAL for IORING_SETUP_COOP_TASKRUN (before
 *     5.19), and for it and IORING_SETUP_SUBMIT_ALL (before 5.18): these
 *     flags are in a structure seccomp cannot read, so those two cases
 *     refuse them through io_uring_queue_init_params, wrapped at link
 *     time; the provider must drop them and auto still choose io_uring;
 *   - io_submit with EINVAL for a poll iocb (IOCB_CMD_POLL, before 4.18),
 *     through the Linux AIO provider's io_submit hook: Linux AIO named
 *     explicitly must fail with ENOSYS and a message naming the command.
 *
 * In every case px_create(NULL) must pick an engine that does not use what
 * is refused (where io_uring is refused and Linux AIO works: Linux AIO for
 * files with epoll for the sockets, a team of two processors, or Linux AIO
 * alone when epoll is refused too), and that engine must keep the
 * promises on a short run: a
 * stream write and read, a file write and read back at an offset, a post,
 * a timer, an accept and a connect, a cancel of a read that waits, and a
 * read still pending at px_destroy, each completed exactly once.  Naming
 * a refused mechanism explicitly must fail with a negative errno and a
 * message, not crash or hang.
 *
 * Exit 0 when every case passed, 1 when one failed, 77 when this system
 * offers no seccomp filters (or this architecture is not known here).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <proactor.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tsan.h"

#if defined(__x86_64__)
#define OK_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OK_ARCH AUDIT_ARCH_AARCH64
#endif

/* The system call groups a case can refuse. */
enum { G_URING = 1, G_URING_SETUP = 2, G_AIO = 4, G_EPOLL = 8, G_EVENTFD = 16,
       G_URING_REGISTER = 32, G_WIPEONFORK = 64, G_NOSIGNAL = 128,
       G_NOWAIT = 256, G_RWV2 = 512,
       /* not seccomp's: Linux AIO's io_submit hook (below) */
       G_AIO_POLL = 1024 };

/* The groups of the read and write flags: the pipe run follows. */
#define G_RWFLAGS (G_NOSIGNAL | G_NOWAIT | G_RWV2)

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
#ifndef RWF_NOSIGNAL
#define RWF_NOSIGNAL 0x00000100 /* linux/fs.h of 6.18 */
#endif

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

static const long uring_calls[] = {
	SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register, -1};
static const long uring_setup_call[] = {SYS_io_uring_setup, -1};
static const long uring_register_call[] = {SYS_io_uring_register, -1};
static const long aio_calls[] = {
	SYS_io_setup, SYS_io_destroy, SYS_io_submit, SYS_io_cancel,
	SYS_io_getevents,
#ifdef SYS_io_pgetevents
	SYS_io_pgetevents,
#endif
	-1};
static const long eventfd_calls[] = {
#ifdef SYS_eventfd
	SYS_eventfd,
#endif
	SYS_eventfd2, -1};
static const long rwv2_calls[] = {SYS_preadv2, SYS_pwritev2, -1};
static const long epoll_calls[] = {
#ifdef SYS_epoll_create
	SYS_epoll_create,
#endif
	SYS_epoll_create1, SYS_epoll_ctl,
#ifdef SYS_epoll_wait
	SYS_epoll_wait,
#endif
	SYS_epoll_pwait,
#ifdef SYS_epoll_pwait2
	SYS_epoll_pwait2,
#endif
	-1};

typedef struct kase {
	const char *name;
	unsigned groups;
	int err;
	/* engine texts that must now fail at px_create */
	const char *refused[3];
	/* a word the chosen engine's name must not contain */
	const char *not_in_name[3];
	/* words it must contain (when Linux AIO is built in) */
	const char *in_name[2];
	/* the error the refused texts must fail with (errno) */
	int want;
	/* engine texts that may be made or refused: made, they run the short
	 * run; refused, with a message */
	const char *also[8];
	/* io_uring setup flags refused with EINVAL (the wrap below) */
	unsigned uring_flags;
	/* what the message of each also engine refused must name */
	const char *also_why;
} kase;

/* io_uring_setup's flags are in a structure seccomp cannot read, so the
 * library's io_uring_queue_init_params is wrapped at link time: with a
 * flag of uring_refused asked for, EINVAL, as a kernel that does not
 * know the flag answers. */
static unsigned uring_refused;
#ifdef OK_URING_WRAP
#include <liburing.h>
int __real_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
				      struct io_uring_params *p);
int __wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
				      struct io_uring_params *p);
int __wrap_io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
				      struct io_uring_params *p)
{
	if (p->flags & uring_refused)
		return -EINVAL;
	return __real_io_uring_queue_init_params(entries, ring, p);
}
#define OK_COOP_TASKRUN IORING_SETUP_COOP_TASKRUN
#define OK_SUBMIT_ALL IORING_SETUP_SUBMIT_ALL
#else
#define OK_COOP_TASKRUN 0
#define OK_SUBMIT_ALL 0
#endif

/* IOCB_CMD_POLL (Linux 4.18) is in the iocb, which seccomp cannot read
 * either: the Linux AIO provider's io_submit (px__laio_io_submit) is
 * replaced by one that refuses a poll with EINVAL, as io_submit does on
 * an older kernel (the first iocb's error, or the count before it). */
#ifdef OK_LAIO_HOOK
#include <libaio.h>
#include "linux_aio.h"
static int no_poll_submit(io_context_t ctx, long nr, struct iocb **v)
{
	long i = 0;
	while (i < nr && v[i]->aio_lio_opcode != IO_CMD_POLL)
		i++;
	if (i == 0 && nr > 0)
		return -EINVAL;
	return io_submit(ctx, i, v);
}
#endif

/* POSIX AIO's engines, but not under TSan, which never sees glibc's
 * helper threads start (tsan.h). */
#if PX_TEST_TSAN
#define POSIX_AIO NULL
#define POSIX_AIO_SIGWAIT NULL
#else
#define POSIX_AIO "posix-aio+epoll"
#define POSIX_AIO_SIGWAIT "posix-aio+epoll wait=sigwait"
#endif

/* "auto ring=0" is io_uring or nothing, as "auto ring=8" is (fixed
 * problem 184); without liburing "ring" is no key at all. */
#ifdef PX_HAVE_URING
#define AUTO_RING0 "auto ring=0"
#else
#define AUTO_RING0 NULL
#endif

/* Without io_uring auto builds Linux AIO for files and epoll for the rest. */
#define LAIO_TEAM {"provider=linux_aio", "secondary: provider=select wait=epoll"}

static const kase cases[] = {
	{"no io_uring (ENOSYS)", G_URING, ENOSYS, {"uring", AUTO_RING0, NULL},
	 {"uring", NULL}, LAIO_TEAM, ENOSYS, {NULL}, 0, NULL},
	{"io_uring refused (EPERM)", G_URING, EPERM, {"uring", NULL},
	 {"uring", NULL}, LAIO_TEAM, EPERM, {NULL}, 0, NULL},
	/* The message names the limit to raise (fixed problem 264). */
	{"io_uring_setup out of locked memory (ENOMEM)", G_URING_SETUP, ENOMEM,
	 {"uring", NULL}, {"uring", NULL}, LAIO_TEAM, ENOMEM, {NULL}, 0,
	 "RLIMIT_MEMLOCK"},
	{"io_uring_register refused (EINVAL: no opcode probe before 5.6)",
	 G_URING_REGISTER, EINVAL, {"uring", NULL}, {"uring", NULL}, LAIO_TEAM,
	 ENOSYS, {NULL}, 0, NULL},
	/* The probe failing for want of memory says nothing of what the
	 * kernel offers: ENOMEM, not ENOSYS. */
	{"io_uring_register out of memory (ENOMEM)", G_URING_REGISTER, ENOMEM,
	 {"uring", NULL}, {"uring", NULL}, LAIO_TEAM, ENOMEM, {NULL}, 0, NULL},
	/* Linux AIO cannot have its team: it does everything alone. */
	/* depth=2: its second poll finds no spill set (fixed problem 131)
	 * and goes to the context. */
	{"no io_uring, no epoll (ENOSYS)", G_URING | G_EPOLL, ENOSYS,
	 {"uring", "epoll", NULL}, {"uring", "secondary", "epoll"},
	 {"provider=linux_aio", NULL}, ENOSYS, {"linux-aio depth=2", NULL}, 0,
	 NULL},
	{"no io_uring, no Linux AIO (ENOSYS)", G_URING | G_AIO, ENOSYS,
	 {"uring", "linux-aio", NULL}, {"uring", "linux_aio", NULL}, {NULL},
	 ENOSYS, {NULL}, 0, NULL},
	{"no io_uring, no Linux AIO, no eventfd (ENOSYS)",
	 G_URING | G_AIO | G_EVENTFD, ENOSYS, {"uring", "linux-aio", NULL},
	 {"uring", "linux_aio", "eventfd"}, {NULL}, ENOSYS, {NULL}, 0, NULL},
	{"no io_uring, no Linux AIO, no epoll (ENOSYS)",
	 G_URING | G_AIO | G_EPOLL, ENOSYS, {"uring", "linux-aio", "epoll"},
	 {"uring", "linux_aio", "epoll"}, {NULL}, ENOSYS, {NULL}, 0, NULL},
	{"madvise(MADV_WIPEONFORK) refused (EINVAL: before 4.14)", G_WIPEONFORK,
	 EINVAL, {NULL}, {NULL}, {NULL}, 0, {NULL}, 0, NULL},
	/* eventfd alone missing: io_uring's dedicated ring goes without its
	 * kick, a team of io_uring and epoll without the ready descriptor
	 * io_uring's lead registers with its ring, and the others' default
	 * interrupt (POSIX AIO's waits: their own) is an eventfd. */
	{"no eventfd (ENOSYS)", G_EVENTFD, ENOSYS, {NULL}, {"eventfd", NULL},
	 {NULL}, 0,
	 {"uring-dedicated", "epoll", "epoll-dedicated", "linux-aio",
	  "provider=uring ops=file ; secondary: provider=select wait=epoll "
	  "interrupt=pipe", POSIX_AIO, POSIX_AIO_SIGWAIT}, 0, "eventfd"},
	/* Linux 5.18 knew SUBMIT_ALL, not COOP_TASKRUN; 5.11 to 5.17 neither.
	 * Each is dropped: auto is still io_uring, and so is a ring that asks
	 * for COOP_TASKRUN by name. */
	{"io_uring_setup without COOP_TASKRUN (EINVAL: before 5.19)", 0,
	 EINVAL, {NULL}, {NULL}, {NULL}, 0,
	 {"uring-dedicated", "uring ring_flags=coop_taskrun", "uring rings=1"},
	 OK_COOP_TASKRUN, NULL},
	{"io_uring_setup without COOP_TASKRUN, SUBMIT_ALL (EINVAL: before "
	 "5.18)", 0, EINVAL, {NULL}, {NULL}, {NULL}, 0,
	 {"uring-dedicated", "uring ring_flags=coop_taskrun", "uring rings=1"},
	 OK_COOP_TASKRUN | OK_SUBMIT_ALL, NULL},
	/* Named explicitly, Linux AIO must say what it lacks; auto's probe
	 * is the kernel's own, which the hook does not reach. */
	{"Linux AIO without IOCB_CMD_POLL (EINVAL: before 4.18)", G_AIO_POLL,
	 EINVAL, {"linux-aio", "linux-aio+epoll", "linux-aio wait=epoll"},
	 {NULL}, {NULL}, ENOSYS, {NULL}, 0, "IOCB_CMD_POLL"},
	{"pwritev2 without RWF_NOSIGNAL (EOPNOTSUPP: before 6.18)", G_NOSIGNAL,
	 EOPNOTSUPP, {NULL}, {NULL}, {NULL}, 0, {NULL}, 0, NULL},
	{"preadv2/pwritev2 without RWF_NOWAIT and RWF_NOSIGNAL (EOPNOTSUPP: "
	 "before 4.14)", G_NOWAIT, EOPNOTSUPP, {NULL}, {NULL}, {NULL}, 0,
	 {NULL}, 0, NULL},
	{"no preadv2/pwritev2 (ENOSYS: before 4.6)", G_RWV2, ENOSYS, {NULL},
	 {NULL}, {NULL}, 0, {NULL}, 0, NULL},
};

static int failures;

static void bad(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("old_kernels: FAILED: ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
	failures++;
}

#ifdef OK_ARCH
static int add_calls(struct sock_filter *f, int n, const long *calls, int err)
{
	for (int i = 0; calls[i] >= 0; i++) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (unsigned)calls[i], 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(
			BPF_RET | BPF_K,
			SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA));
	}
	return n;
}

/* call with any bit of mask in its flags (args[5], an int: the low word of
 * the argument on these little-endian architectures) fails with err.  The
 * call number is loaded again after. */
static int add_flag_call(struct sock_filter *f, int n, long call,
			 unsigned mask, int err)
{
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      (unsigned)call, 0, 4);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		offsetof(struct seccomp_data, args[5]));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K,
					      mask, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(
		BPF_RET | BPF_K,
		SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA));
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		offsetof(struct seccomp_data, nr));
	return n;
}

/* Returns 0, or the errno of prctl (EINVAL: no seccomp filters here). */
static int refuse(unsigned groups, int err)
{
	struct sock_filter f[64];
	int n = 0;
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		offsetof(struct seccomp_data, arch));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
					      OK_ARCH, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_ALLOW);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		offsetof(struct seccomp_data, nr));
	if (groups & G_URING)
		n = add_calls(f, n, uring_calls, err);
	if (groups & G_URING_SETUP)
		n = add_calls(f, n, uring_setup_call, err);
	if (groups & G_URING_REGISTER)
		n = add_calls(f, n, uring_register_call, err);
	if (groups & G_AIO)
		n = add_calls(f, n, aio_calls, err);
	if (groups & G_EPOLL)
		n = add_calls(f, n, epoll_calls, err);
	if (groups & G_EVENTFD)
		n = add_calls(f, n, eventfd_calls, err);
	if (groups & G_RWV2)
		n = add_calls(f, n, rwv2_calls, err);
	if (groups & G_NOSIGNAL)
		n = add_flag_call(f, n, SYS_pwritev2, RWF_NOSIGNAL, err);
	if (groups & G_NOWAIT) {
		n = add_flag_call(f, n, SYS_preadv2, RWF_NOWAIT | RWF_NOSIGNAL,
				  err);
		n = add_flag_call(f, n, SYS_pwritev2, RWF_NOWAIT | RWF_NOSIGNAL,
				  err);
	}
	if (groups & G_WIPEONFORK) {
		/* Last: it leaves the advice, not the call number, loaded. */
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      SYS_madvise, 0, 3);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			offsetof(struct seccomp_data, args[2]));
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      MADV_WIPEONFORK, 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(
			BPF_RET | BPF_K,
			SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA));
	}
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
					      SECCOMP_RET_ALLOW);
	struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return errno;
	return 0;
}
#endif

/* ---- the short run -------------------------------------------------- */

typedef struct rec {
	int calls;
	px_completion c;
} rec;

static void rec_cb(const px_completion *c)
{
	rec *r = c->user;
	r->calls++;
	r->c = *c;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs the loop until r has been called; false after 10 s. */
static bool wait_rec(px_proactor *px, rec *r, const char *what)
{
	uint64_t end = now_ms() + 10000;
	while (r->calls == 0) {
		if (now_ms() > end) {
			bad("%s: no completion within 10 s", what);
			return false;
		}
		int rc = px_handle_events(px, 10);
		if (rc < 0) {
			bad("%s: px_handle_events: %s", what, px_strerror(rc));
			return false;
		}
	}
	return true;
}

static void expect(const rec *r, const char *what, int error, size_t bytes)
{
	if (r->calls != 1)
		bad("%s: %d callbacks, not 1", what, r->calls);
	else if (r->c.error != error)
		bad("%s: error %d (%s), expected %d", what, r->c.error,
		    strerror(r->c.error), error);
	else if (r->c.bytes != bytes)
		bad("%s: %zu bytes, expected %zu", what, r->c.bytes, bytes);
}

static void short_run(px_proactor *px)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		bad("socketpair: %s", strerror(errno));
		return;
	}

	/* A stream write and read. */
	char out[] = "old kernel", in[sizeof out] = {0};
	rec w = {0}, r = {0};
	int rc = px_write_stream_all(px, sv[0], out, sizeof out, rec_cb, &w);
	if (rc < 0)
		bad("px_write_stream_all: %s", px_strerror(rc));
	rc = px_read_stream(px, sv[1], in, sizeof in, rec_cb, &r);
	if (rc < 0)
		bad("px_read_stream: %s", px_strerror(rc));
	if (failures == 0 && wait_rec(px, &w, "stream write") &&
	    wait_rec(px, &r, "stream read")) {
		expect(&w, "stream write", 0, sizeof out);
		if (r.calls == 1 && r.c.error == 0 &&
		    memcmp(in, out, r.c.bytes) != 0)
			bad("stream read: the bytes differ");
	}

	/* A file written at an offset and read back. */
	int fd = memfd_create("old_kernels", MFD_CLOEXEC);
	if (fd < 0) {
		bad("memfd_create: %s", strerror(errno));
	} else {
		char page[512], back[512] = {0};
		memset(page, 'k', sizeof page);
		rec fw = {0}, fr = {0};
		rc = px_write_file(px, fd, page, sizeof page, 8192, rec_cb, &fw);
		if (rc < 0)
			bad("px_write_file: %s", px_strerror(rc));
		else if (wait_rec(px, &fw, "file write")) {
			expect(&fw, "file write", 0, sizeof page);
			rc = px_read_file(px, fd, back, sizeof back, 8192,
					  rec_cb, &fr);
			if (rc < 0)
				bad("px_read_file: %s", px_strerror(rc));
			else if (wait_rec(px, &fr, "file read")) {
				expect(&fr, "file read", 0, sizeof back);
				if (memcmp(page, back, sizeof back) != 0)
					bad("file read: the bytes differ");
			}
		}
	}

	/* A post and a timer. */
	rec p = {0}, t = {0};
	rc = px_post(px, rec_cb, &p);
	if (rc < 0)
		bad("px_post: %s", px_strerror(rc));
	else if (wait_rec(px, &p, "post"))
		expect(&p, "post", 0, 0);
	uint64_t t0 = now_ms();
	int64_t id = px_timer_start(px, 20 * 1000000ull, rec_cb, &t);
	if (id < 0)
		bad("px_timer_start: %s", px_strerror((int)id));
	else if (wait_rec(px, &t, "timer")) {
		expect(&t, "timer", 0, 0);
		if (now_ms() - t0 < 20)
			bad("timer: fired after %llu ms, before its 20",
			    (unsigned long long)(now_ms() - t0));
	}

	/* An accept and a connect over loopback TCP. */
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (ls < 0 || cs < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(ls, 8) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &al) < 0) {
		bad("a listening socket: %s", strerror(errno));
	} else {
		rec ac = {0}, co = {0};
		rc = px_accept(px, ls, rec_cb, &ac);
		if (rc < 0)
			bad("px_accept: %s", px_strerror(rc));
		rc = px_connect(px, cs, (struct sockaddr *)&a, sizeof a, rec_cb,
				&co);
		if (rc < 0)
			bad("px_connect: %s", px_strerror(rc));
		if (failures == 0 && wait_rec(px, &co, "connect") &&
		    wait_rec(px, &ac, "accept")) {
			expect(&co, "connect", 0, 0);
			expect(&ac, "accept", 0, 0);
			if (ac.c.new_fd < 0)
				bad("accept: no new descriptor");
			else
				close(ac.c.new_fd);
		}
	}

	/* A read that waits, cancelled. */
	rec cr = {0};
	char one;
	rc = px_read_stream(px, sv[1], &one, 1, rec_cb, &cr);
	if (rc < 0) {
		bad("px_read_stream (to cancel): %s", px_strerror(rc));
	} else {
		px_handle_events(px, 20);
		if (cr.calls != 0)
			bad("a read of a quiet socket completed (error %d)",
			    cr.c.error);
		rc = px_cancel(px, sv[1]);
		if (rc != 1)
			bad("px_cancel returned %d, not 1", rc);
		if (wait_rec(px, &cr, "cancelled read"))
			expect(&cr, "cancelled read", ECANCELED, 0);
	}

	/* A read still pending at px_destroy. */
	rec dr = {0};
	rc = px_read_stream(px, sv[0], &one, 1, rec_cb, &dr);
	if (rc < 0)
		bad("px_read_stream (left to px_destroy): %s", px_strerror(rc));
	px_handle_events(px, 0);
	rc = px_destroy(px);
	if (rc != 0)
		bad("px_destroy: %s", px_strerror(rc));
	else if (dr.calls != 1 || dr.c.error != ECANCELED)
		bad("the read left to px_destroy: %d callbacks, error %d",
		    dr.calls, dr.c.error);
	close(sv[0]);
	close(sv[1]);
	if (fd >= 0)
		close(fd);
	if (ls >= 0)
		close(ls);
	if (cs >= 0)
		close(cs);
}

/* ---- a fork(2) child, told by the atfork handler alone --------------- */

/* The case's filter must be what the library met: the advice refused. */
static bool wipe_refused(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		bad("mmap: %s", strerror(errno));
		return false;
	}
	int rc = madvise(p, (size_t)pg, MADV_WIPEONFORK);
	int e = errno;
	munmap(p, (size_t)pg);
	if (rc == 0 || e != EINVAL) {
		bad("madvise(MADV_WIPEONFORK) was not refused with EINVAL "
		    "(returned %d, %s)", rc, rc ? strerror(e) : "no error");
		return false;
	}
	return true;
}

/* In the forked child: every call on the parent's proactor -ECHILD. */
static int fork_child_calls(px_proactor *px, int fd)
{
	char b[4];
	rec none = {0};
	struct px_stats st;
	const struct {
		const char *what;
		int64_t rc;
	} calls[] = {
		{"px_read_stream", px_read_stream(px, fd, b, 4, rec_cb, &none)},
		{"px_write_stream", px_write_stream(px, fd, "x", 1, rec_cb, &none)},
		{"px_post", px_post(px, rec_cb, &none)},
		{"px_timer_start", px_timer_start(px, 1000, rec_cb, &none)},
		{"px_cancel", px_cancel(px, fd)},
		{"px_handle_events", px_handle_events(px, 0)},
		{"px_stats", px_stats(px, &st)},
		{"px_destroy", px_destroy(px)},
	};
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
		if (calls[i].rc != -ECHILD) {
			printf("old_kernels: FAILED: fork child: %s returned "
			       "%lld, not -ECHILD\n",
			       calls[i].what, (long long)calls[i].rc);
			return 1;
		}
	return none.calls == 0 ? 0 : 1;
}

static void fork_check(void)
{
	if (!wipe_refused())
		return;
	px_proactor *px = NULL;
	char err[256] = "";
	int rc = px_create(&px, NULL, err, sizeof err);
	if (rc < 0) {
		bad("px_create(NULL) for the fork check: %s: %s",
		    px_strerror(rc), err);
		return;
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		bad("socketpair: %s", strerror(errno));
		px_destroy(px);
		return;
	}
	char buf[8] = {0};
	rec r = {0};
	rc = px_read_stream(px, sv[0], buf, sizeof buf, rec_cb, &r);
	if (rc < 0)
		bad("px_read_stream before the fork: %s", px_strerror(rc));
	px_handle_events(px, 20);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		bad("fork: %s", strerror(errno));
	} else if (pid == 0) {
		alarm(20);
		int e = fork_child_calls(px, sv[0]);
		fflush(NULL);
		_exit(e);
	} else {
		int st;
		if (waitpid(pid, &st, 0) != pid)
			bad("waitpid: %s", strerror(errno));
		else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad("the fork child failed (status %#x)", st);
		else
			printf("  a fork child got -ECHILD from every call\n");
		fflush(stdout);
	}
	if (rc == 0 && write(sv[1], "hello", 5) == 5 &&
	    wait_rec(px, &r, "the parent's read after the fork")) {
		expect(&r, "the parent's read after the fork", 0, 5);
		if (r.calls == 1 && memcmp(buf, "hello", 5) != 0)
			bad("the parent's read after the fork: the bytes differ");
	}
	rc = px_destroy(px);
	if (rc != 0)
		bad("px_destroy after the fork check: %s", px_strerror(rc));
	close(sv[0]);
	close(sv[1]);
}

/* ---- pipes without the read and write flags -------------------------- */

/* The case's filter must be what the library met: the flag refused with
 * the case's errno, as glibc hands it on (ENOSYS with a flag given comes
 * back as EOPNOTSUPP). */
static bool flags_refused(unsigned groups)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		bad("pipe2: %s", strerror(errno));
		return false;
	}
	struct iovec v = {.iov_base = "x", .iov_len = 1};
	ssize_t n = pwritev2(p[1], &v, 1, -1, RWF_NOSIGNAL);
	int e = errno;
	bool ok = n < 0 && e == EOPNOTSUPP;
	if (ok && (groups & (G_NOWAIT | G_RWV2))) {
		char c;
		n = pwritev2(p[1], &v, 1, -1, RWF_NOWAIT);
		e = errno;
		ok = n < 0 && e == EOPNOTSUPP;
		if (ok) {
			v.iov_base = &c;
			n = preadv2(p[0], &v, 1, -1, RWF_NOWAIT);
			e = errno;
			ok = n < 0 && e == EOPNOTSUPP;
		}
	}
	close(p[0]);
	close(p[1]);
	if (!ok)
		bad("a flag of preadv2/pwritev2 was not refused with EOPNOTSUPP "
		    "(returned %zd, %s)", n, n < 0 ? strerror(e) : "no error");
	return ok;
}

/* Is SIGPIPE pending for this thread or the process? */
static bool sigpipe_pending(void)
{
	sigset_t pend;
	return sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
}

/* After a round run with SIGPIPE blocked: a SIGPIPE the library raised
 * must not be left pending (app_raised false), and one the application
 * raised before the round must still be (app_raised true).  Then takes
 * whatever is pending and restores the mask the round started with. */
static void sigpipe_round_end(const char *what, bool app_raised,
			      const sigset_t *pipe_set, const sigset_t *old)
{
	bool pend = sigpipe_pending();
	if (!app_raised && pend)
		bad("%s: SIGPIPE left pending", what);
	if (app_raised && !pend)
		bad("%s: the application's SIGPIPE was taken", what);
	if (pend) {
		const struct timespec zero = {0, 0};
		sigtimedwait(pipe_set, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Writes to a pipe whose reader has gone, with SIGPIPE at its default
 * disposition: each EPIPE, and the process lives (the parent sees a
 * death).  Then with SIGPIPE blocked: none left pending after the write
 * when none was before, and the application's own still pending. */
static void pipe_reader_gone(px_proactor *px, const char *eng)
{
	char what[160];
	static char big[100000];
	struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};

	signal(SIGPIPE, SIG_DFL);
	for (int i = 0; i < 6; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) < 0) {
			bad("pipe2: %s", strerror(errno));
			return;
		}
		close(p[0]);
		sigset_t pipe_set, old;
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		if (i >= 4)
			pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
		if (i == 5)
			raise(SIGPIPE);  /* the application's own */
		rec w = {0};
		int rc;
		const char *form;
		switch (i) {
		case 0:
			form = "px_write_stream";
			rc = px_write_stream(px, p[1], "x", 1, rec_cb, &w);
			break;
		case 1:
			form = "px_write_stream_all";
			rc = px_write_stream_all(px, p[1], big, sizeof big,
						 rec_cb, &w);
			break;
		case 2:
			form = "px_writev_stream";
			rc = px_writev_stream(px, p[1], iov, 2, rec_cb, &w);
			break;
		case 3:
			form = "px_writev_stream_all";
			rc = px_writev_stream_all(px, p[1], iov, 2, rec_cb, &w);
			break;
		default:
			form = i == 4 ? "px_write_stream, SIGPIPE blocked"
				      : "px_write_stream, SIGPIPE blocked and "
					"pending";
			rc = px_write_stream(px, p[1], "x", 1, rec_cb, &w);
			break;
		}
		snprintf(what, sizeof what, "%s: %s to a pipe without reader",
			 eng, form);
		if (rc == -EOPNOTSUPP && (i == 2 || i == 3)) {
			/* not this engine's */
		} else if (rc < 0) {
			bad("%s: %s", what, px_strerror(rc));
		} else if (wait_rec(px, &w, what)) {
			expect(&w, what, EPIPE, 0);
		}
		if (i >= 4)
			sigpipe_round_end(what, i == 5, &pipe_set, &old);
		close(p[1]);
	}
	signal(SIGPIPE, SIG_IGN);
}

/* Blocking pipes: a write-all of four times the pipe's capacity read by
 * the test as it comes, a read that waits (the loop must not wait in the
 * read) and then gets its bytes, a cancelled read and one left pending to
 * px_destroy. */
static void pipe_data(px_proactor *px, const char *eng)
{
	enum { BIG = 256 * 1024 };
	static unsigned char out[BIG], in[BIG];
	char what[160];
	int a[2], b[2];

	if (pipe2(a, O_CLOEXEC) < 0 || pipe2(b, O_CLOEXEC) < 0) {
		bad("pipe2: %s", strerror(errno));
		return;
	}
	/* The test's end of a non-blocking (a description of its own). */
	fcntl(a[0], F_SETFL, O_NONBLOCK);
	for (size_t i = 0; i < BIG; i++)
		out[i] = (unsigned char)(i * 7 + i / 4099);

	snprintf(what, sizeof what, "%s: a 256 KiB write-all into a pipe", eng);
	rec w = {0};
	size_t got = 0;
	int rc = px_write_stream_all(px, a[1], out, BIG, rec_cb, &w);
	if (rc < 0) {
		bad("%s: %s", what, px_strerror(rc));
	} else {
		uint64_t end = now_ms() + 10000;
		while ((w.calls == 0 || got < BIG) && now_ms() < end) {
			rc = px_handle_events(px, 5);
			if (rc < 0) {
				bad("%s: px_handle_events: %s", what,
				    px_strerror(rc));
				break;
			}
			ssize_t n = read(a[0], in + got, BIG - got);
			if (n > 0)
				got += (size_t)n;
		}
		if (w.calls == 0 || got < BIG)
			bad("%s: %d callbacks and %zu bytes read after 10 s",
			    what, w.calls, got);
		else {
			expect(&w, what, 0, BIG);
			if (memcmp(in, out, BIG) != 0)
				bad("%s: the bytes differ", what);
		}
	}

	snprintf(what, sizeof what, "%s: a read of a blocking pipe that waits",
		 eng);
	char buf[64] = {0};
	rec r = {0};
	rc = px_read_stream(px, b[0], buf, sizeof buf, rec_cb, &r);
	if (rc < 0) {
		bad("%s: %s", what, px_strerror(rc));
	} else {
		uint64_t t0 = now_ms();
		px_handle_events(px, 20);
		px_handle_events(px, 20);
		if (now_ms() - t0 > 2000)
			bad("%s: the loop waited %llu ms", what,
			    (unsigned long long)(now_ms() - t0));
		if (r.calls != 0)
			bad("%s: completed on an empty pipe (error %d)", what,
			    r.c.error);
		else if (write(b[1], "pipe data", 9) != 9)
			bad("write: %s", strerror(errno));
		else if (wait_rec(px, &r, what)) {
			expect(&r, what, 0, 9);
			if (r.calls == 1 && memcmp(buf, "pipe data", 9) != 0)
				bad("%s: the bytes differ", what);
		}
	}

	snprintf(what, sizeof what, "%s: a cancelled read of a blocking pipe",
		 eng);
	rec cr = {0};
	rc = px_read_stream(px, b[0], buf, sizeof buf, rec_cb, &cr);
	if (rc < 0) {
		bad("%s: %s", what, px_strerror(rc));
	} else {
		px_handle_events(px, 20);
		rc = px_cancel(px, b[0]);
		if (rc != 1)
			bad("%s: px_cancel returned %d, not 1", what, rc);
		if (wait_rec(px, &cr, what))
			expect(&cr, what, ECANCELED, 0);
	}

	rec dr = {0};
	rc = px_read_stream(px, b[0], buf, sizeof buf, rec_cb, &dr);
	if (rc < 0)
		bad("%s: px_read_stream (left to px_destroy): %s", eng,
		    px_strerror(rc));
	px_handle_events(px, 0);
	rc = px_destroy(px);
	if (rc != 0)
		bad("%s: px_destroy: %s", eng, px_strerror(rc));
	else if (dr.calls != 1 || dr.c.error != ECANCELED)
		bad("%s: the pipe read left to px_destroy: %d callbacks, "
		    "error %d", eng, dr.calls, dr.c.error);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
}

/* The engines whose pipes are tried; sigpipe: their pipe writes are the
 * shared non-blocking calls, which must keep SIGPIPE away. */
static const struct {
	const char *text;
	bool sigpipe;
} pipe_engines[] = {
	{"epoll", true},      {"poll", true},
	{"select", true},     {"linux-aio", true},
	{"linux-aio+epoll", true}, {"uring", false},
};

/* Run body(eng, arg) in a process of its own (a signal that kills it is
 * that engine's failure, and the next engine still runs), with a 40 s
 * alarm; it exits 1 when it counted failures, unless body exits first. */
static void in_child(const char *eng,
		     void (*body)(const char *eng, const void *arg),
		     const void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		bad("fork: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		alarm(40);
		failures = 0;
		body(eng, arg);
		fflush(NULL);
		_exit(failures ? 1 : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		bad("waitpid: %s", strerror(errno));
	else if (WIFSIGNALED(st))
		bad("'%s' was killed by signal %d (%s)", eng, WTERMSIG(st),
		    strsignal(WTERMSIG(st)));
	else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		bad("'%s' failed", eng);
}

static void pipe_run(const char *eng, const void *arg)
{
	bool sigpipe = *(const bool *)arg;
	px_proactor *px = NULL;
	char err[256] = "";
	int rc = px_create(&px, eng, err, sizeof err);
	if (rc < 0) {
		printf("  '%s' not here (%s: %s)\n", eng, px_strerror(rc), err);
		fflush(stdout);
		_exit(rc == -ENOSYS || rc == -EPERM || rc == -EAGAIN ||
		      rc == -EINVAL ? 0 : 1);
	}
	if (sigpipe)
		pipe_reader_gone(px, eng);
	pipe_data(px, eng);  /* destroys px */
	if (failures == 0)
		printf("  '%s': pipes ok\n", eng);
}

/* Each engine's pipe run. */
static void pipe_runs(void)
{
	size_t n = sizeof pipe_engines / sizeof pipe_engines[0];
	for (size_t i = 0; i < n; i++)
		in_child(pipe_engines[i].text, pipe_run,
			 &pipe_engines[i].sigpipe);
}

/* ---- the pipe interrupt without RWF_NOSIGNAL ------------------------- */

/* Engines whose leader the pipe interrupt wakes, each with a dedicated
 * leader, which always waits, so that a post from this thread writes to
 * the pipe (a shared processor's leader would be this thread). */
static const char *const intr_pipe_engines[] = {
	"provider=select wait=epoll interrupt=pipe processor=dedicated",
	"provider=select wait=poll interrupt=pipe processor=dedicated",
	"provider=select wait=select interrupt=pipe processor=dedicated",
	"provider=select wait=linux_rt interrupt=pipe processor=dedicated",
	"provider=linux_aio wait=epoll interrupt=pipe processor=dedicated",
};

/* The read end of a pipe among the numbers below 1024 not open in
 * before[]: the interrupt's, made by px_create.  -1 if none. */
static int new_pipe_reader(const bool *before)
{
	for (int fd = 3; fd < 1024; fd++) {
		struct stat st;
		if (before[fd] || fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))
			continue;
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0 && (fl & O_ACCMODE) == O_RDONLY)
			return fd;
	}
	return -1;
}

/* The pipe interrupt's read end closed behind the library's back with
 * close(2), on a kernel without RWF_NOSIGNAL: a post from this thread
 * (the interrupt's write meets a pipe without reader) and px_destroy
 * must not raise SIGPIPE here, whose default action ends the process
 * (in_child reports the death); with SIGPIPE blocked, none is left
 * pending, and the application's own stays pending.  The post still
 * arrives (the dedicated leader's bounded wait).  Each round on a
 * proactor of its own: the interrupt writes once per drain, and with its
 * read end gone it is never drained again (TESTING.md, fixed problem 292,
 * whose fallback path this kernel never took). */
static void intr_reader_gone(const char *eng, const void *arg)
{
	static bool before[1024];
	sigset_t pipe_set, old;

	(void)arg;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	for (int i = 0; i < 3; i++) {
		char what[240];
		snprintf(what, sizeof what, "%s: a post with the interrupt "
			 "pipe's read end closed%s", eng,
			 i == 0 ? ", SIGPIPE at its default" :
			 i == 1 ? ", SIGPIPE blocked" :
				  ", SIGPIPE blocked and pending");
		for (int fd = 0; fd < 1024; fd++)
			before[fd] = fcntl(fd, F_GETFD) >= 0;
		px_proactor *px = NULL;
		char err[256] = "";
		int rc = px_create(&px, eng, err, sizeof err);
		if (rc < 0) {
			printf("  '%s' not here (%s: %s)\n", eng,
			       px_strerror(rc), err);
			fflush(stdout);
			_exit(rc == -ENOSYS || rc == -EPERM || rc == -EAGAIN ||
			      rc == -EINVAL ? 0 : 1);
		}
		int rfd = new_pipe_reader(before);
		if (rfd < 0) {
			bad("%s: no interrupt pipe among its descriptors", eng);
			px_destroy(px);
			return;
		}
		signal(SIGPIPE, SIG_DFL);
		if (i >= 1)
			pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
		if (i == 2)
			raise(SIGPIPE);  /* the application's own */
		/* The dedicated leader in its wait, then the close. */
		const struct timespec ms20 = {0, 20 * 1000000};
		nanosleep(&ms20, NULL);
		close(rfd);
		rec p = {0};
		rc = px_post(px, rec_cb, &p);
		if (rc != 0)
			bad("%s: px_post: %s", what, px_strerror(rc));
		else if (wait_rec(px, &p, what))
			expect(&p, what, 0, 0);
		rc = px_destroy(px);
		if (rc != 0)
			bad("%s: px_destroy: %s", what, px_strerror(rc));
		if (i >= 1)
			sigpipe_round_end(what, i == 2, &pipe_set, &old);
		signal(SIGPIPE, SIG_IGN);
	}
	if (failures == 0)
		printf("  '%s': interrupt pipe without reader ok\n", eng);
}

static void intr_reader_gone_runs(void)
{
	size_t n = sizeof intr_pipe_engines / sizeof intr_pipe_engines[0];
	for (size_t i = 0; i < n; i++)
		in_child(intr_pipe_engines[i], intr_reader_gone, NULL);
}

static void also_run(const char *eng, const void *arg)
{
	const kase *k = arg;
	px_proactor *px = NULL;
	char err[256] = "";
	int rc = px_create(&px, eng, err, sizeof err);
	if (rc < 0) {
		printf("  '%s' refused: %s (%s)\n", eng, px_strerror(rc), err);
		if (err[0] == 0)
			bad("'%s' failed (%s) without a message", eng,
			    px_strerror(rc));
		else if (k->also_why && !strstr(err, k->also_why))
			bad("'%s': the message does not name %s", eng,
			    k->also_why);
	} else {
		printf("  '%s' made: %s\n", eng, px_engine_name(px));
		fflush(stdout);
		short_run(px);  /* destroys px */
	}
}

/* The case's other engines, each in a process of its own: made, the short
 * run; refused, a message. */
static void also_runs(const kase *k)
{
	for (int i = 0; i < 8 && k->also[i]; i++)
		in_child(k->also[i], also_run, k);
}

/* ---- one case, in a child ------------------------------------------- */

#ifdef OK_ARCH
static int child(const kase *k)
{
	/* The count inherited from main holds the failed cases before this
	 * one; short_run skips its waits when it is not 0. */
	failures = 0;
	if (k->groups == 0 && k->uring_flags == 0) {
		printf("old_kernels: built without liburing; skipped\n");
		fflush(stdout);
		return 77;
	}
	if (k->groups & G_AIO_POLL) {
#ifdef OK_LAIO_HOOK
		px__laio_io_submit = no_poll_submit;
#else
		printf("old_kernels: built without libaio; skipped\n");
		fflush(stdout);
		return 77;
#endif
	}
	/* Whether Linux AIO works here, asked before the filter: asked
	 * under it, a Linux AIO that failed for want of what the filter
	 * refuses (epoll) passed over in_name unseen. */
	bool laio_here = false;
	if (k->in_name[0]) {
		px_proactor *l = NULL;
		laio_here = px_create(&l, "linux-aio", NULL, 0) == 0;
		if (laio_here)
			px_destroy(l);
	}
	/* Where io_uring works here, auto must still choose it when only
	 * its setup flags are refused. */
	bool uring_here = false;
	if (k->uring_flags) {
		px_proactor *u = NULL;
		uring_here = px_create(&u, "uring", NULL, 0) == 0;
		if (uring_here)
			px_destroy(u);
		uring_refused = k->uring_flags;
	}
	int e = refuse(k->groups, k->err);
	if (e != 0) {
		printf("old_kernels: no seccomp filter here (%s)\n", strerror(e));
		fflush(stdout);
		return 77;
	}
	char err[256];
	for (int i = 0; i < 3 && k->refused[i]; i++) {
		px_proactor *px = NULL;
		err[0] = 0;
		int rc = px_create(&px, k->refused[i], err, sizeof err);
		if (rc == 0) {
			bad("'%s' was created: %s", k->refused[i],
			    px_engine_name(px));
			px_destroy(px);
		} else if (err[0] == 0) {
			bad("'%s' failed (%s) without a message", k->refused[i],
			    px_strerror(rc));
		} else if (k->want && rc != -k->want) {
			bad("'%s' failed with %s, expected %s (%s)",
			    k->refused[i], px_strerror(rc),
			    px_strerror(-k->want), err);
		} else if (k->also_why && !strstr(err, k->also_why)) {
			bad("'%s': the message does not name %s (%s)",
			    k->refused[i], k->also_why, err);
		} else {
			printf("  '%s' refused: %s (%s)\n", k->refused[i],
			       px_strerror(rc), err);
		}
	}
	px_proactor *px = NULL;
	err[0] = 0;
	int rc = px_create(&px, NULL, err, sizeof err);
	if (rc < 0) {
		bad("px_create(NULL): %s: %s", px_strerror(rc), err);
		return 1;
	}
	char name[512];
	snprintf(name, sizeof name, "%s", px_engine_name(px));
	printf("  auto chose: %s\n", name);
	fflush(stdout);
	/* First the run (its waits are skipped once something failed). */
	short_run(px);
	if (uring_here && !strstr(name, "uring"))
		bad("auto did not choose io_uring");
	for (int i = 0; i < 3 && k->not_in_name[i]; i++)
		if (strstr(name, k->not_in_name[i]))
			bad("auto chose an engine with '%s'", k->not_in_name[i]);
	/* What auto must have built, where Linux AIO works here. */
	if (laio_here) {
		for (int i = 0; i < 2 && k->in_name[i]; i++)
			if (!strstr(name, k->in_name[i]))
				bad("auto chose an engine without '%s'",
				    k->in_name[i]);
	}
	if (k->groups & G_WIPEONFORK)
		fork_check();
	if ((k->groups & G_RWFLAGS) && flags_refused(k->groups)) {
		pipe_runs();
		if (k->groups == G_NOSIGNAL)
			intr_reader_gone_runs();
	}
	also_runs(k);
	return failures ? 1 : 0;
}
#endif

int main(void)
{
#ifndef OK_ARCH
	puts("old_kernels: seccomp architecture not known here; skipped");
	return 77;
#else
	unsetenv("PX_ENGINE");
	signal(SIGPIPE, SIG_IGN);
	int skipped = 0;
	int ncases = (int)(sizeof cases / sizeof cases[0]);
	for (int i = 0; i < ncases; i++) {
		printf("case: %s\n", cases[i].name);
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			alarm(60);
			_exit(child(&cases[i]));
		}
		int st;
		if (waitpid(pid, &st, 0) < 0) {
			perror("waitpid");
			return 1;
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
			skipped++;
		} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			if (WIFSIGNALED(st))
				printf("old_kernels: FAILED: '%s': killed by "
				       "signal %d\n",
				       cases[i].name, WTERMSIG(st));
			else
				printf("old_kernels: FAILED: '%s'\n",
				       cases[i].name);
			failures++;
		} else {
			printf("  ok\n");
		}
	}
	if (failures)
		return 1;
	return skipped == ncases ? 77 : 0;
#endif
}
