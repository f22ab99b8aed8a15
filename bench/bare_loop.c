/*
 * bare_loop - the echo benchmark (common.h) for one session on one event
 * loop thread, written straight on the kernel interface with nothing else
 * in between: no locks, no queues, no callbacks, no allocation after the
 * start.  Each socket has the I/O shape proactor_test gives it (a receive
 * of up to a block always pending, one send in flight), so that, on the
 * rows of the grid with one session and one thread (1, 2, 3 and 13), what
 * tp_reactor_test and proactor_test add to the kernel's work can be read
 * side by side with a loop that adds next to nothing.  It is a reference,
 * not a proof of a lower bound: a smarter loop (more sends in flight, a
 * bigger receive) may do better, and proactor_test does on some rows.
 *
 *   bare_loop MODE [-k BLOCK] [-w WINDOW] [-d USEC] [-z] [-i SECONDS]
 *              [--check] [--verify]
 *
 * MODE:
 *   epoll        both sockets registered once, edge-triggered, for input
 *                and output; every readiness report is followed by reads
 *                (and writes) until EAGAIN or nothing is left to do.
 *   uring        io_uring with default flags: a receive always pending on
 *                each socket (IORING_RECVSEND_POLL_FIRST, as the library's
 *                io_uring engine does), at most one send in flight per
 *                socket, submit and wait in one io_uring_enter.
 *   uring-coop   the same with IORING_SETUP_COOP_TASKRUN.
 *   uring-mshot  uring, but each socket has one multishot receive armed
 *                for the whole run (5.19), into blocks the loop hands the
 *                kernel through a buffer ring; every completion's bytes
 *                are copied out to where uring would have received them,
 *                as a library serving reads into its callers' buffers
 *                would have to.
 *   uring-defer  the same with IORING_SETUP_SINGLE_ISSUER and
 *                IORING_SETUP_DEFER_TASKRUN (6.1), which a loop that is the
 *                only thread ever to touch its ring may use.
 *
 * -s and -n must be 1 (the default); the other flags mean what they mean in
 * proactor_test.  Exit 77 when the mode is not available on this kernel.
 */
#include "common.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum { TAG_CRECV = 1, TAG_CSEND, TAG_SRECV, TAG_SSEND };

static bench_opts opt;
static const char *mode;
static atomic_bool stopping;
static atomic_int failed;            /* an error code, 0 while all is well */

static int cfd = -1, sfd = -1;
static bench_counts n;
static const unsigned char *pattern;
static unsigned char *rx;             /* the client's echo buffer, a block */
static bench_ring ring;               /* the server's unechoed bytes */
/* Client: bytes of the blocks begun (for the window), and how far into the
 * current block the sends are (0: no block begun and unfinished). */
static uint64_t claimed;
static size_t cpos;

static bool stopped(void)
{
	return atomic_load_explicit(&stopping, memory_order_relaxed) ||
	       atomic_load_explicit(&failed, memory_order_relaxed);
}

static void fail(const char *what, int err)
{
	if (stopped())
		return;  /* a socket torn down at the end is no failure */
	fprintf(stderr, "bare_loop: %s: %s\n", what, strerror(err));
	atomic_store(&failed, err ? err : EIO);
}

/* The start of the measured interval.  The loop thread sets loop_ready
 * once its ring or epoll set is made, then waits for go; main takes the
 * clock when it sees loop_ready and sets go.  On a loaded machine a new
 * thread can start a second late (seen in CI under the sanitizers), and
 * that second is not the loop's. */
static atomic_bool loop_ready, go;

static void wait_for_go(void)
{
	atomic_store(&loop_ready, true);
	while (!atomic_load(&go) && !stopped())
		sched_yield();
}

/* The echo of n bytes came back to the client. */
static void client_got(size_t len)
{
	if (opt.verify && !bench_verify(&opt, n.client_recv, rx, len))
		fail("echo", EILSEQ);
	n.client_recv += len;
	bench_delay(&opt);
}

/* May the client send now?  A block begun is always finished. */
static bool client_wants_send(void)
{
	if (cpos > 0)
		return true;
	if (!bench_may_send(&opt, claimed, n.client_recv))
		return false;
	claimed += opt.block;
	return true;
}

static void client_sent(size_t len)
{
	n.client_sent += len;
	cpos += len;
	if (cpos == opt.block)
		cpos = 0;
}

/* ---- epoll ---------------------------------------------------------- */

static void ep_client(void)
{
	for (;;) {
		ssize_t r = read(cfd, rx, opt.block);

		if (r > 0) {
			client_got((size_t)r);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		fail("client read", r < 0 ? errno : ECONNRESET);
		return;
	}
	while (!stopped() && client_wants_send()) {
		ssize_t w = write(cfd, pattern + cpos, opt.block - cpos);

		if (w > 0) {
			client_sent((size_t)w);
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;  /* the block stays begun: cpos > 0, or claimed */
		fail("client write", errno);
		return;
	}
}

static void ep_server(void)
{
	bool can_read = true, can_write = true;

	while (!stopped() && (can_read || can_write)) {
		size_t room, len;
		unsigned char *p;
		bool moved = false;

		p = bench_ring_space(&ring, opt.block, &room);
		if (can_read && room > 0) {
			ssize_t r = read(sfd, p, room);

			if (r > 0) {
				bench_ring_filled(&ring, (size_t)r);
				n.server_recv += (uint64_t)r;
				bench_delay(&opt);
				moved = true;
			} else if (r < 0 && errno == EAGAIN) {
				can_read = false;
			} else if (!(r < 0 && errno == EINTR)) {
				fail("server read", r < 0 ? errno : ECONNRESET);
				return;
			}
		}
		p = bench_ring_data(&ring, &len);
		if (len > 0) {
			ssize_t w = write(sfd, p, len);

			if (w > 0) {
				bench_ring_drained(&ring, (size_t)w);
				n.server_sent += (uint64_t)w;
				moved = true;
			} else if (w < 0 && errno == EAGAIN) {
				can_write = false;
			} else if (!(w < 0 && errno == EINTR)) {
				fail("server write", errno);
				return;
			}
		}
		if (!moved)
			break;
	}
}

/* What the epoll loop did, for the report of a run that moved nothing
 * (written by the loop thread, read by main after the join). */
static struct {
	unsigned long waits, timeouts, events, client_calls, server_calls;
	double first_wait;   /* seconds from go to the first epoll_wait */
} ep_trace;

static void run_epoll(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET };

	if (ep < 0) {
		fail("epoll_create1", errno);
		return;
	}
	ev.data.fd = sfd;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) != 0)
		fail("epoll_ctl", errno);
	ev.data.fd = cfd;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev) != 0)
		fail("epoll_ctl", errno);
	wait_for_go();
	double t_go = bench_now();
	ep_client();  /* the first block */
	ep_trace.client_calls++;
	while (!stopped()) {
		struct epoll_event evs[4];
		if (ep_trace.waits == 0)
			ep_trace.first_wait = bench_now() - t_go;
		int k = epoll_wait(ep, evs, 4, 100);

		ep_trace.waits++;
		if (k < 0 && errno != EINTR) {
			fail("epoll_wait", errno);
			break;
		}
		if (k == 0)
			ep_trace.timeouts++;
		for (int i = 0; i < k; i++) {
			ep_trace.events++;
			if (evs[i].data.fd == sfd) {
				ep_trace.server_calls++;
				ep_server();
			} else {
				ep_trace.client_calls++;
				ep_client();
			}
		}
	}
	close(ep);
}

/* ---- io_uring -------------------------------------------------------- */

static struct io_uring uring;
static bool csend_busy, ssend_busy, srecv_busy;
static bool mshot;                    /* mode uring-mshot */

static struct io_uring_sqe *sqe_get(void)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&uring);

	if (!sqe) {
		/* Never more than four in flight in an SQ of eight. */
		fail("io_uring_get_sqe", ENOSPC);
	}
	return sqe;
}

static void ur_recv(int fd, void *buf, size_t len, int tag)
{
	struct io_uring_sqe *sqe = sqe_get();

	if (!sqe)
		return;
	io_uring_prep_recv(sqe, fd, buf, len, 0);
	sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, (uint64_t)tag);
}

static void ur_send(int fd, const void *buf, size_t len, int tag)
{
	struct io_uring_sqe *sqe = sqe_get();

	if (!sqe)
		return;
	io_uring_prep_send(sqe, fd, buf, len, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)tag);
}

static void ur_client_send(void)
{
	if (!csend_busy && !stopped() && client_wants_send()) {
		ur_send(cfd, pattern + cpos, opt.block - cpos, TAG_CSEND);
		csend_busy = true;
	}
}

static void ur_server_io(void)
{
	size_t len;
	unsigned char *p;

	if (!srecv_busy && !mshot) {
		p = bench_ring_space(&ring, opt.block, &len);
		if (len > 0) {
			ur_recv(sfd, p, len, TAG_SRECV);
			srecv_busy = true;
		}
	}
	if (!ssend_busy) {
		p = bench_ring_data(&ring, &len);
		if (len > 0) {
			ur_send(sfd, p, len, TAG_SSEND);
			ssend_busy = true;
		}
	}
}

/* uring-mshot: one multishot receive per socket, filling buffers the loop
 * provides through a buffer ring (group 0), each copied out on completion
 * to where the single-shot modes would have received it. */
enum { MS_BUFS = 32 };
static struct io_uring_buf_ring *ms_br;
static unsigned char *ms_mem;
static bool ms_armed[2];              /* client, server */

static void ms_arm(int fd, int tag)
{
	struct io_uring_sqe *sqe = sqe_get();

	if (!sqe)
		return;
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = 0;
	io_uring_sqe_set_data64(sqe, (uint64_t)tag);
	ms_armed[tag == TAG_CRECV ? 0 : 1] = true;
}

static void ms_give_back(unsigned bid)
{
	io_uring_buf_ring_add(ms_br, ms_mem + (size_t)bid * opt.block,
			      (unsigned)opt.block, (unsigned short)bid,
			      io_uring_buf_ring_mask(MS_BUFS), 0);
	io_uring_buf_ring_advance(ms_br, 1);
}

static int ms_setup(void)
{
	struct io_uring_buf_reg reg;
	size_t sz = MS_BUFS * sizeof(struct io_uring_buf);
	int rc;

	ms_br = mmap(NULL, sz < 4096 ? 4096 : sz, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ms_mem = malloc((size_t)MS_BUFS * opt.block);
	if (ms_br == MAP_FAILED || !ms_mem)
		return -ENOMEM;
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (unsigned long)(uintptr_t)ms_br;
	reg.ring_entries = MS_BUFS;
	reg.bgid = 0;
	rc = io_uring_register_buf_ring(&uring, &reg, 0);
	if (rc < 0)
		return rc;
	io_uring_buf_ring_init(ms_br);
	for (unsigned i = 0; i < MS_BUFS; i++)
		ms_give_back(i);
	return 0;
}

static void ms_complete(uint64_t tag, int res, unsigned flags)
{
	const unsigned char *src;
	size_t left;

	if (!(flags & IORING_CQE_F_MORE))
		ms_armed[tag == TAG_CRECV ? 0 : 1] = false;
	if (res == -ENOBUFS && !stopped()) {
		ms_arm(tag == TAG_CRECV ? cfd : sfd, (int)tag);
		return;
	}
	if (res <= 0 || !(flags & IORING_CQE_F_BUFFER)) {
		fail("recv (multishot)", res < 0 ? -res : ECONNRESET);
		return;
	}
	src = ms_mem + (size_t)(flags >> IORING_CQE_BUFFER_SHIFT) * opt.block;
	left = (size_t)res;
	if (tag == TAG_CRECV) {
		memcpy(rx, src, left);
		client_got(left);
		ur_client_send();
	} else {
		while (left > 0) {
			size_t room;
			unsigned char *p = bench_ring_space(&ring, left, &room);

			if (room == 0) {
				fail("server ring", ENOSPC);
				return;
			}
			memcpy(p, src, room);
			bench_ring_filled(&ring, room);
			src += room;
			left -= room;
		}
		n.server_recv += (uint64_t)res;
		bench_delay(&opt);
		ur_server_io();
	}
	ms_give_back(flags >> IORING_CQE_BUFFER_SHIFT);
	if (!ms_armed[tag == TAG_CRECV ? 0 : 1] && !stopped())
		ms_arm(tag == TAG_CRECV ? cfd : sfd, (int)tag);
}

static void ur_complete(uint64_t tag, int res)
{
	if (res <= 0) {
		fail(tag == TAG_CRECV || tag == TAG_SRECV ? "recv" : "send",
		     res < 0 ? -res : ECONNRESET);
		return;
	}
	switch (tag) {
	case TAG_CRECV:
		client_got((size_t)res);
		ur_recv(cfd, rx, opt.block, TAG_CRECV);
		ur_client_send();
		break;
	case TAG_CSEND:
		csend_busy = false;
		client_sent((size_t)res);
		ur_client_send();
		break;
	case TAG_SRECV:
		srecv_busy = false;
		bench_ring_filled(&ring, (size_t)res);
		n.server_recv += (uint64_t)res;
		bench_delay(&opt);
		ur_server_io();
		break;
	case TAG_SSEND:
		ssend_busy = false;
		bench_ring_drained(&ring, (size_t)res);
		n.server_sent += (uint64_t)res;
		ur_server_io();
		break;
	}
}

/* Returns 0, or EXIT 77's reason as a negative errno. */
static int run_uring(void)
{
	struct io_uring_params p;
	int rc;

	memset(&p, 0, sizeof(p));
	mshot = strcmp(mode, "uring-mshot") == 0;
	if (strcmp(mode, "uring-coop") == 0)
		p.flags = IORING_SETUP_COOP_TASKRUN;
	else if (strcmp(mode, "uring-defer") == 0)
		p.flags = IORING_SETUP_SINGLE_ISSUER |
			  IORING_SETUP_DEFER_TASKRUN;
	/* Made in this thread: with SINGLE_ISSUER it is the one submitter. */
	rc = io_uring_queue_init_params(8, &uring, &p);
	if (rc < 0)
		return rc;
	if (mshot) {
		rc = ms_setup();
		if (rc < 0)
			return rc;
	}
	wait_for_go();
	if (mshot) {
		ms_arm(cfd, TAG_CRECV);
		ms_arm(sfd, TAG_SRECV);
	} else {
		ur_recv(cfd, rx, opt.block, TAG_CRECV);
	}
	ur_server_io();
	ur_client_send();
	while (!stopped()) {
		struct __kernel_timespec ts = { .tv_nsec = 100000000 };
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		rc = io_uring_submit_and_wait_timeout(&uring, &cqe, 1, &ts,
						       NULL);
		if (rc < 0 && rc != -ETIME && rc != -EINTR) {
			fail("io_uring_submit_and_wait_timeout", -rc);
			break;
		}
		io_uring_for_each_cqe(&uring, head, cqe) {
			seen++;
			if (mshot && (cqe->user_data == TAG_CRECV ||
				      cqe->user_data == TAG_SRECV))
				ms_complete(cqe->user_data, cqe->res,
					    cqe->flags);
			else
				ur_complete(cqe->user_data, cqe->res);
		}
		io_uring_cq_advance(&uring, seen);
	}
	/* Not io_uring_queue_exit: requests are still in flight on buffers
	 * that live until the process ends, and the process ends next. */
	return 0;
}

static int unavailable;

static void *loop_main(void *arg)
{
	(void)arg;
	if (strcmp(mode, "epoll") == 0) {
		run_epoll();
	} else {
		int rc = run_uring();

		if (rc < 0) {
			unavailable = -rc;
			atomic_store(&failed, -rc);
		}
	}
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bare_loop MODE [-k BLOCK] [-w WINDOW] [-d USEC] [-z] "
		"[-i SECONDS]\n"
		"                  [--check] [--verify]\n"
		"MODE: epoll, uring, uring-coop, uring-mshot or uring-defer.  "
		"One session\non one thread, with nothing but the kernel "
		"interface in the loop; see the\nsource's opening comment.\n");
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	pthread_t th;
	double t0, t1;
	int lfd, code;

	if (argc < 2 || argv[1][0] == '-') {
		usage(argc >= 2 && strcmp(argv[1], "-h") == 0 ? stdout : stderr);
		return argc >= 2 && strcmp(argv[1], "-h") == 0 ? BENCH_EXIT_OK
							     : BENCH_EXIT_USAGE;
	}
	mode = argv[1];
	if (strcmp(mode, "epoll") != 0 && strcmp(mode, "uring") != 0 &&
	    strcmp(mode, "uring-coop") != 0 &&
	    strcmp(mode, "uring-mshot") != 0 &&
	    strcmp(mode, "uring-defer") != 0) {
		fprintf(stderr, "bare_loop: unknown mode '%s'\n", mode);
		usage(stderr);
		return BENCH_EXIT_USAGE;
	}
	/* argv[1] (the mode) stands in for the program name. */
	bench_parse(&opt, argc - 1, argv + 1, "bare_loop", false);
	if (opt.sessions != 1 || opt.threads != 1) {
		fprintf(stderr, "bare_loop: one session on one thread only "
				"(-s 1 -n 1)\n");
		return BENCH_EXIT_USAGE;
	}
	bench_signals();
	pattern = bench_pattern(opt.block);
	rx = malloc(opt.block);
	if (!pattern || !rx || bench_ring_init(&ring, &opt) != 0) {
		fprintf(stderr, "bare_loop: out of memory\n");
		return BENCH_EXIT_CHECK;
	}
	lfd = bench_listen(&addr, false);
	if (lfd < 0 ||
	    bench_connect_pair("bare_loop", lfd, &addr, true, &cfd, &sfd) != 0)
		return BENCH_EXIT_CHECK;
	close(lfd);

	if (pthread_create(&th, NULL, loop_main, NULL) != 0) {
		fprintf(stderr, "bare_loop: pthread_create failed\n");
		return BENCH_EXIT_CHECK;
	}
	while (!atomic_load(&loop_ready) && !atomic_load(&failed))
		usleep(1000);
	t0 = bench_now();
	atomic_store(&go, true);
	while (!atomic_load(&failed) && bench_now() - t0 < opt.seconds) {
		bench_opts slice = opt;

		/* In slices, so that a loop that gave up ends the wait. */
		slice.seconds = opt.seconds - (bench_now() - t0);
		if (slice.seconds > 0.1)
			slice.seconds = 0.1;
		if (bench_wait_run(&slice))
			break;  /* SIGINT */
	}
	t1 = bench_now();
	atomic_store(&stopping, true);
	pthread_join(th, NULL);
	if (unavailable) {
		fprintf(stderr, "bare_loop: %s is not available here: %s\n",
			mode, strerror(unavailable));
		return BENCH_EXIT_SKIP;
	}
	code = bench_report(&opt, "bare_loop", mode, &n, t1 - t0);
	/* A run that moved nothing (seen once under TSan while other test
	 * programs ran beside it; the likely cause, a stranger's connection
	 * accepted as the server end, bench_connect_pair now refuses): say
	 * what the loop did, to tell a thread that never ran from a lost
	 * wake-up. */
	if (n.client_recv == 0 && strcmp(mode, "epoll") == 0)
		fprintf(stderr,
			"bare_loop: epoll loop: first wait %.3f s after go, %lu "
			"waits (%lu timed out), %lu events, client %lu calls, "
			"server %lu; client sent %llu, server received %llu, "
			"sent %llu\n",
			ep_trace.first_wait, ep_trace.waits, ep_trace.timeouts,
			ep_trace.events, ep_trace.client_calls,
			ep_trace.server_calls,
			(unsigned long long)n.client_sent,
			(unsigned long long)n.server_recv,
			(unsigned long long)n.server_sent);
	if (atomic_load(&failed) && code == BENCH_EXIT_OK)
		code = BENCH_EXIT_CHECK;
	return code;
}
