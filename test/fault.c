/*
 * fault.c - faults and races, per engine: peers that reset, half-close or
 * stop reading and close, TCP urgent data, connects that fail or never
 * finish, descriptors closed under pending
 * operations, cancels racing with completions and with deferred starts,
 * callbacks that tear down their own or another session, destroy under
 * load, signal storms, descriptor exhaustion, and load with a tiny
 * max_aio; and the seeded random model check of model.c
 * (model_random_seeds).  Public API only.  Every test checks that each started
 * operation completes exactly once, and with which error.
 *
 *   fault 'ENGINE CONFIG TEXT' [TEST FILTER [KNOWN,PROBLEMS]]   ('' = none)
 *
 * Only loopback addresses are used.  Each test runs under the harness
 * watchdog; waits inside a test are bounded too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "model.h"

static void storm_stop(void);

/* The harness teardown, after the loop threads are gone (px_destroy
 * refuses while threads are inside px_handle_events). */
static int fx_teardown(void **state)
{
	storm_stop();
	h_loops_join();
	return h_teardown(state);
}

/* A proactor like h_cfg but with at most max_aio operations in flight per
 * processor (the others are deferred). */
static unsigned g_max_aio; /* of the running test's proactor; 0: default */

static int setup_max_aio(void **state, unsigned max_aio)
{
	g_max_aio = max_aio;
	return h_setup_max_aio(state, max_aio, h_setup);
}

static int setup_aio1(void **state) { return setup_max_aio(state, 1); }

static int fx_setup(void **state)
{
	g_max_aio = 0;
	return h_setup(state);
}

/* Wait (without pumping: loop threads do) until *flag is set. */
static bool wait_flag(atomic_int *flag, int ms)
{
	return h_wait_at_least(flag, 1, ms);
}

static void spin_ns(uint64_t ns)
{
	uint64_t end = h_now_ns() + ns;
	while (h_now_ns() < end)
		;
}

/* Make a socket's send buffer big, so that one send(2) of a large write
 * takes a while (root may go past wmem_max). */
static void big_sndbuf(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

/* ------------------------------------------------------------------ */
/* Cancel racing with a deferred start                                  */
/* ------------------------------------------------------------------ */

/*
 * max_aio=N: reads hold the N slots (N-1 of them all along), a 4 MiB
 * px_write_stream_all on another socket (its peer never reads) is
 * deferred.  Data for the read
 * frees the slot and the leader starts the write, while this thread calls
 * px_cancel on the writer's descriptor after a varying delay.  The write
 * cannot finish, so the cancel must find it (return 1) wherever it is,
 * deferred, being started or started, and the write must complete once
 * with ECANCELED.
 */
enum { RACE_ROUNDS = 200, RACE_WLEN = 4 << 20 };

static void cancel_races_deferred_start(void **state)
{
	h_fx *f = *state;
	uint8_t *wbuf = h_alloc(f, RACE_WLEN);
	char *rbuf = h_alloc(f, 16);
	h_rec *recs = h_alloc(f, 2 * sizeof(h_rec));
	int lost = 0, zero = 0;
	int nhold = (int)g_max_aio - 1;
	int (*hold)[2] = h_alloc(f, sizeof(int[2]) * 4);
	h_rec *hrec = h_alloc(f, sizeof(h_rec) * 4);

	assert_true(nhold >= 0 && nhold <= 4);
	for (int i = 0; i < nhold; i++) {
		h_socketpair(f, hold[i]);
		assert_int_equal(px_read_stream(f->px, hold[i][1], rbuf + 8, 8,
						h_rec_cb, &hrec[i]), 0);
	}
	h_loops_start(f, 2, true);
	for (int i = 0; i < RACE_ROUNDS; i++) {
		int a[2], b[2];
		h_rec *rd = &recs[0], *wr = &recs[1];

		memset(recs, 0, 2 * sizeof(h_rec));
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, a), 0);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, b), 0);
		big_sndbuf(b[0], 1 << 20);  /* the kernel doubles it: 2 MiB */
		assert_int_equal(px_read_stream(f->px, a[0], rbuf, 16, h_rec_cb,
						rd), 0);
		assert_int_equal(px_write_stream_all(f->px, b[0], wbuf,
						     RACE_WLEN, h_rec_cb, wr), 0);
		/* Let the leader go back to its wait. */
		h_sleep_ms(1);
		assert_int_equal(write(a[1], "x", 1), 1);
		spin_ns((uint64_t)(i % 50) * 4000);
		int n = px_cancel(f->px, b[0]);
		if (n == 0)
			zero++;
		if (!wait_flag(&wr->done, 2000)) {
			/* Lost: cancel again so the round can end. */
			lost++;
			px_cancel(f->px, b[0]);
			wait_flag(&wr->done, 2000);
		}
		bool rd_ok = wait_flag(&rd->done, 2000);
		close(a[0]);
		close(a[1]);
		close(b[0]);
		close(b[1]);
		if (lost || zero) {
			h_loops_stop();
			fail_msg("round %d: px_cancel returned %d for a pending "
				 "deferred write; the write %s (engine '%s')",
				 i, n, lost ? "never completed" : "completed later",
				 h_engine_text);
		}
		assert_true(rd_ok);
		assert_int_equal(n, 1);
		assert_int_equal(atomic_load(&rd->calls), 1);
		assert_int_equal(rd->c.error, 0);
		assert_int_equal(rd->c.bytes, 1);
		assert_int_equal(atomic_load(&wr->calls), 1);
		assert_int_equal(wr->c.error, ECANCELED);
		assert_true(wr->c.bytes < RACE_WLEN);
	}
	for (int i = 0; i < nhold; i++) {
		assert_int_equal(px_cancel(f->px, hold[i][1]), 1);
		assert_true(wait_flag(&hrec[i].done, 5000));
	}
	h_loops_stop();
	/* Late duplicate callbacks would land in recs. */
	h_settle(f, 20);
	assert_int_equal(atomic_load(&recs[0].calls), 1);
	assert_int_equal(atomic_load(&recs[1].calls), 1);
	for (int i = 0; i < nhold; i++) {
		assert_int_equal(atomic_load(&hrec[i].calls), 1);
		assert_int_equal(hrec[i].c.error, ECANCELED);
	}
}

static void cancel_races_deferred_start_2(void **state)
{
	cancel_races_deferred_start(state);
}

static void cancel_races_deferred_start_3(void **state)
{
	cancel_races_deferred_start(state);
}

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

static void assert_once(h_rec *r, px_op op, int fd)
{
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->c.op, op);
	assert_int_equal(r->c.fd, fd);
}

static void expect_error(h_rec *r, int want, const char *what)
{
	if (r->c.error != want)
		fail_msg("%s completed with error %d (%s), expected %d (%s)",
			 what, r->c.error, strerror(r->c.error), want,
			 strerror(want));
}

/* A connected TCP loopback pair: *c the client, *s the accepted end; all
 * three descriptors tracked.  rcvbuf/sndbuf (> 0) are set before the
 * connection exists, so they hold for the whole connection. */
static void tcp_pair(h_fx *f, int *c, int *s, int rcvbuf, int sndbuf)
{
	struct sockaddr_in la;
	int l = h_bound_socket(f, SOCK_STREAM, &la);
	if (rcvbuf > 0)
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	assert_int_equal(listen(l, 4), 0);
	*c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (sndbuf > 0)
		setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	if (connect(*c, (struct sockaddr *)&la, sizeof la) < 0)
		fail_msg("connect to 127.0.0.1:%d: %s", ntohs(la.sin_port),
			 strerror(errno));
	*s = h_track(f, accept4(l, NULL, NULL, SOCK_CLOEXEC));
	h_close(f, l);
}

/* Close fd with a reset (RST) instead of an orderly FIN. */
static void close_reset(h_fx *f, int fd)
{
	struct linger lg = {1, 0};
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
	h_close(f, fd);
}

static atomic_int g_sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	atomic_fetch_add(&g_sigpipes, 1);
}

/* Count SIGPIPE instead of ignoring it (the harness ignores it). */
static void sigpipe_count(bool on)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on ? on_sigpipe : SIG_IGN;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
	atomic_store(&g_sigpipes, 0);
}

/* ------------------------------------------------------------------ */
/* Peers that go away                                                   */
/* ------------------------------------------------------------------ */

#ifndef RWF_NOSIGNAL
#define RWF_NOSIGNAL 0x00000100 /* linux/fs.h of 6.18 */
#endif

/* Whether this kernel takes RWF_NOSIGNAL on a write (Linux 6.18), which
 * the io_uring and Linux AIO engines need to write a pipe whose reader
 * has gone without SIGPIPE. */
static bool kernel_has_rwf_nosignal(void)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return false;
	struct iovec v = {.iov_base = "x", .iov_len = 1};
	bool yes = pwritev2(p[1], &v, 1, -1, RWF_NOSIGNAL) == 1;
	close(p[0]);
	close(p[1]);
	return yes;
}

/* Writes of every kind to a pipe whose reader has gone: each completes
 * once with EPIPE and nothing moved (a file write may also fail with
 * ESPIPE, as on the readiness engines), and none raises SIGPIPE, counted
 * by a handler.  (io_uring ran such writes as IORING_OP_WRITE, and the
 * kernel's pipe raised SIGPIPE in the thread that submitted them: on the
 * default engine, an application's own thread.) */
static void pipe_reader_gone_no_sigpipe(void **state)
{
	h_fx *f = *state;
	const char *name = px_engine_name(f->px);
	if ((strstr(name, "uring") || strstr(name, "linux_aio")) &&
	    !kernel_has_rwf_nosignal()) {
		print_message("this kernel has no RWF_NOSIGNAL (Linux 6.18): "
			      "%s raises SIGPIPE here, as documented; "
			      "skipped\n", name);
		skip();
	}
	int p[2];
	h_pipe(f, p);
	h_close(f, p[0]);
	static const char data[8] = "abcdefgh";
	struct iovec iov[2] = {{(void *)data, 4}, {(void *)(data + 4), 4}};
	static const char *what[] = {"px_write_stream", "px_write_stream_all",
				     "px_writev_stream", "px_writev_stream_all",
				     "px_write_file"};
	int started = 0;
	sigpipe_count(true);
	for (int i = 0; i < 5; i++) {
		h_rec *r = h_rec_new(f);
		int rc;
		switch (i) {
		case 0:
			rc = px_write_stream(f->px, p[1], data, 8, h_rec_cb, r);
			break;
		case 1:
			rc = px_write_stream_all(f->px, p[1], data, 8, h_rec_cb, r);
			break;
		case 2:
			rc = px_writev_stream(f->px, p[1], iov, 2, h_rec_cb, r);
			break;
		case 3:
			rc = px_writev_stream_all(f->px, p[1], iov, 2, h_rec_cb, r);
			break;
		default:
			rc = px_write_file(f->px, p[1], data, 8, 0, h_rec_cb, r);
			break;
		}
		if (rc == -EOPNOTSUPP)  /* vectored or file: not everywhere */
			continue;
		if (rc != 0)
			fail_msg("%s on a pipe without reader: start %d (%s)",
				 what[i], rc, px_strerror(rc));
		started++;
		h_wait_rec(f, r, 5000, what[i]);
		assert_once(r, i == 4 ? PX_OP_WRITE_FILE : PX_OP_WRITE_STREAM, p[1]);
		if (r->c.error != EPIPE && !(i == 4 && r->c.error == ESPIPE))
			fail_msg("%s on a pipe without reader completed with "
				 "error %d (%s), expected EPIPE", what[i],
				 r->c.error, strerror(r->c.error));
		assert_int_equal(r->c.bytes, 0);
	}
	h_settle(f, 20);
	int pipes = atomic_load(&g_sigpipes);
	sigpipe_count(false);
	assert_true(started >= 2);
	if (pipes != 0)
		fail_msg("%d SIGPIPE raised by %d writes to a pipe without "
			 "reader", pipes, started);
}


/* In a forked child: SIGPIPE's default action back (the test is whether
 * the library raises it), and a proactor of the engine under test; NULL,
 * said on stdout, when it cannot be made. */
static px_proactor *child_proactor(void)
{
	px_proactor *px;
	char err[256];

	signal(SIGPIPE, SIG_DFL);
	if (px_create_config(&px, &h_cfg, err, sizeof err) < 0) {
		printf("child: px_create_config: %s\n", err);
		return NULL;
	}
	return px;
}
/* One child of sigpipe_default_disposition: SIGPIPE at its default
 * disposition (the process dies of it), a proactor of its own, and every
 * write form on descriptor kind `kind`; each must complete once with
 * EPIPE (ECONNRESET allowed on TCP) and nothing written.  Exit 0, or 1
 * with a message on stdout. */
static int sigpipe_child(int kind, bool pipes)
{
	static const char *what[] = {"px_write_stream", "px_writev_stream",
				     "px_write_stream_all",
				     "px_writev_stream_all", "px_write_dgram"};
	static char data[200];
	struct iovec iov[2] = {{data, 100}, {data + 100, 100}};
	px_proactor *px = child_proactor();
	if (!px)
		return 1;
	int bad = 0;
	for (int form = 0; form < 5; form++) {
		int sv[2] = {-1, -1}, fd, keep = -1;
		if (kind == 3 && (!pipes || form == 4))
			continue;  /* a pipe takes no datagram */
		switch (kind) {
		case 0: /* AF_UNIX stream, peer closed */
		case 1: /* AF_UNIX seqpacket, peer closed */
			socketpair(AF_UNIX, kind ? SOCK_SEQPACKET : SOCK_STREAM,
				   0, sv);
			close(sv[1]);
			fd = sv[0];
			break;
		case 2: { /* TCP, own side shut down for writing */
			struct sockaddr_in a = {.sin_family = AF_INET};
			socklen_t al = sizeof a;
			a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			int l = socket(AF_INET, SOCK_STREAM, 0);
			if (bind(l, (struct sockaddr *)&a, al) < 0 ||
			    listen(l, 1) < 0 ||
			    getsockname(l, (struct sockaddr *)&a, &al) < 0)
				return 1;
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(fd, (struct sockaddr *)&a, al) < 0)
				return 1;
			keep = accept(l, NULL, NULL);
			close(l);
			shutdown(fd, SHUT_WR);
			break;
		}
		default: /* pipe, reader closed */
			if (pipe(sv) < 0)
				return 1;
			close(sv[0]);
			fd = sv[1];
			break;
		}
		h_rec r;
		memset(&r, 0, sizeof r);
		int rc;
		switch (form) {
		case 0:
			rc = px_write_stream(px, fd, data, 200, h_rec_cb, &r);
			break;
		case 1:
			rc = px_writev_stream(px, fd, iov, 2, h_rec_cb, &r);
			break;
		case 2:
			rc = px_write_stream_all(px, fd, data, 200, h_rec_cb, &r);
			break;
		case 3:
			rc = px_writev_stream_all(px, fd, iov, 2, h_rec_cb, &r);
			break;
		default:
			rc = px_write_dgram(px, fd, data, 200, NULL, 0,
					    h_rec_cb, &r);
			break;
		}
		if (rc == 0) {
			uint64_t dl = h_deadline(5000);
			while (!h_rec_done(&r) && h_now_ms() < dl)
				px_handle_events(px, 10);
			int e = r.c.error;
			if (atomic_load(&r.calls) != 1) {
				printf("child: %s on kind %d: %d callbacks\n",
				       what[form], kind, atomic_load(&r.calls));
				bad++;
			} else if ((e != EPIPE && !(kind == 2 && e == ECONNRESET)) ||
				   r.c.bytes != 0) {
				printf("child: %s on kind %d: error %d (%s), "
				       "%zu bytes; expected EPIPE, 0 bytes\n",
				       what[form], kind, e, strerror(e),
				       r.c.bytes);
				bad++;
			}
		} else if (rc != -EOPNOTSUPP) { /* vectored, dgram: not everywhere */
			printf("child: %s on kind %d: start %d (%s)\n",
			       what[form], kind, rc, px_strerror(rc));
			bad++;
		}
		close(fd);
		if (keep >= 0)
			close(keep);
	}
	px_destroy(px);
	fflush(stdout);
	return bad ? 1 : 0;
}

/* Writes to a peer that has gone, with SIGPIPE at its default
 * disposition (the harness ignores it; a counting handler would hide a
 * death's cause no better), each kind in a forked child so that a
 * SIGPIPE shows as a failure, not as the end of the suite: an AF_UNIX
 * stream socket and a seqpacket socket whose peer closed, a TCP socket
 * shut down for writing by its own side, a pipe whose reader closed
 * (every write form, px_write_dgram on the sockets): each completes with
 * EPIPE and nothing written, and the child lives.  The pipe is left out
 * on io_uring and Linux AIO when the kernel has no RWF_NOSIGNAL, where
 * the manual says SIGPIPE comes (pipe_reader_gone_no_sigpipe). */
static void sigpipe_default_disposition(void **state)
{
	h_fx *f = *state;
	char name[512];
	snprintf(name, sizeof name, "%s", px_engine_name(f->px));
	bool pipes = !((strstr(name, "uring") || strstr(name, "linux_aio")) &&
		       !kernel_has_rwf_nosignal());
	/* The children make proactors of their own: fork without the
	 * fixture's (and its dedicated thread, if any; TSan ends a child of
	 * a threaded process that starts threads). */
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	static const char *kinds[] = {"AF_UNIX stream socket, peer closed",
				      "AF_UNIX seqpacket socket, peer closed",
				      "TCP socket shut down for writing",
				      "pipe, reader closed"};
	if (!pipes)
		print_message("this kernel has no RWF_NOSIGNAL: the pipe "
			      "is left out on %s\n", name);
	fflush(stdout);
	for (int kind = 0; kind < 4; kind++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			_exit(sigpipe_child(kind, pipes));
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (WIFSIGNALED(st))
			fail_msg("%s: the child died of signal %d (%s)",
				 kinds[kind], WTERMSIG(st),
				 strsignal(WTERMSIG(st)));
		if (WEXITSTATUS(st) != 0)
			fail_msg("%s: the child exited with %d (its message "
				 "above)", kinds[kind], WEXITSTATUS(st));
	}
}

/* A descriptor number that was a pipe, closed with close(2) (not
 * px_close) and reused for a socket whose peer has gone: a write on it
 * fails with EPIPE, without SIGPIPE.  (io_uring remembers that a number
 * is not a socket, to write it with WRITE instead of SEND; the reused
 * number once kept that, and the WRITE on the socket raised SIGPIPE.) */
static void reused_pipe_number_socket_write(void **state)
{
	h_fx *f = *state;
	int p[2], sv[2];
	h_pipe(f, p);
	char *buf = h_alloc(f, 8);
	h_rec *w1 = h_rec_new(f);
	assert_int_equal(px_write_stream(f->px, p[1], "ab", 2, h_rec_cb, w1), 0);
	h_wait_rec(f, w1, 5000, "a write on a pipe");
	assert_int_equal(w1->c.error, 0);
	assert_int_equal(w1->c.bytes, 2);
	/* Same number, now a socket whose peer is closed. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(dup2(sv[0], p[1]), p[1]);
	close(sv[0]);
	close(sv[1]);
	h_rec *w2 = h_rec_new(f);
	sigpipe_count(true);
	assert_int_equal(px_write_stream(f->px, p[1], buf, 8, h_rec_cb, w2), 0);
	h_wait_rec(f, w2, 5000, "a write on the reused number");
	h_settle(f, 20);
	int pipes = atomic_load(&g_sigpipes);
	sigpipe_count(false);
	assert_once(w2, PX_OP_WRITE_STREAM, p[1]);
	if (w2->c.error != EPIPE && w2->c.error != ECONNRESET)
		fail_msg("a write to a socket whose peer closed completed with "
			 "error %d (%s), expected EPIPE", w2->c.error,
			 strerror(w2->c.error));
	assert_int_equal(pipes, 0);
}

static void peer_reset_during_read(void **state)
{
	h_fx *f = *state;
	int c, s;
	tcp_pair(f, &c, &s, 0, 0);
	char *buf = h_alloc(f, 64);
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, c, buf, 64, h_rec_cb, r), 0);
	h_settle(f, 20);
	assert_false(h_rec_done(r));
	close_reset(f, s);
	h_wait_rec(f, r, 5000, "the read on a reset connection");
	h_settle(f, 20);
	assert_once(r, PX_OP_READ_STREAM, c);
	expect_error(r, ECONNRESET, "a read whose peer reset the connection");
	assert_int_equal(r->c.bytes, 0);
}

static void peer_reset_during_write(void **state)
{
	h_fx *f = *state;
	enum { LEN = 8 << 20 };
	int c, s;
	/* Small buffers, so the write stays pending. */
	tcp_pair(f, &c, &s, 32768, 32768);
	uint8_t *buf = h_alloc(f, LEN);
	h_rec *r = h_rec_new(f);
	sigpipe_count(true);
	assert_int_equal(px_write_stream_all(f->px, c, buf, LEN, h_rec_cb, r), 0);
	h_settle(f, 50);
	if (h_rec_done(r)) {
		sigpipe_count(false);
		fail_msg("an 8 MiB write to a peer that does not read "
			 "completed (error %d, %zu bytes)",
			 r->c.error, r->c.bytes);
	}
	close_reset(f, s);
	h_wait_rec(f, r, 5000, "the write on a reset connection");
	h_settle(f, 20);
	int pipes = atomic_load(&g_sigpipes);
	sigpipe_count(false);
	assert_once(r, PX_OP_WRITE_STREAM, c);
	if (r->c.error != ECONNRESET && r->c.error != EPIPE)
		fail_msg("a write whose peer reset completed with error %d "
			 "(%s), expected ECONNRESET or EPIPE",
			 r->c.error, strerror(r->c.error));
	assert_true(r->c.bytes < LEN);
	assert_int_equal(pipes, 0);
	/* The direction is dead: a new write fails in its completion. */
	h_rec *r2 = h_rec_new(f);
	sigpipe_count(true);
	assert_int_equal(px_write_stream(f->px, c, buf, 64, h_rec_cb, r2), 0);
	h_wait_rec(f, r2, 5000, "a write after the reset");
	pipes = atomic_load(&g_sigpipes);
	sigpipe_count(false);
	assert_once(r2, PX_OP_WRITE_STREAM, c);
	if (r2->c.error != EPIPE && r2->c.error != ECONNRESET)
		fail_msg("a write after a reset completed with error %d (%s)",
			 r2->c.error, strerror(r2->c.error));
	assert_int_equal(pipes, 0);
}

static void half_close(void **state)
{
	h_fx *f = *state;
	int c, s;
	tcp_pair(f, &c, &s, 0, 0);
	char *in = h_alloc(f, 64), *back = h_alloc(f, 64);
	h_rec *r = h_rec_new(f), *w = h_rec_new(f), *rb = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, s, in, 64, h_rec_cb, r), 0);
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	h_wait_rec(f, r, 5000, "the read after the peer's shutdown");
	assert_once(r, PX_OP_READ_STREAM, s);
	assert_int_equal(r->c.error, 0);
	assert_int_equal(r->c.bytes, 0);
	/* The other direction still works, both ways of reading it. */
	assert_int_equal(px_write_stream_all(f->px, s, "reply", 5, h_rec_cb, w), 0);
	assert_int_equal(px_read_stream(f->px, c, back, 64, h_rec_cb, rb), 0);
	h_wait_rec(f, w, 5000, "the write on the open direction");
	h_wait_rec(f, rb, 5000, "the read of the reply");
	h_settle(f, 20);
	assert_once(w, PX_OP_WRITE_STREAM, s);
	assert_int_equal(w->c.error, 0);
	assert_int_equal(w->c.bytes, 5);
	assert_once(rb, PX_OP_READ_STREAM, c);
	assert_int_equal(rb->c.error, 0);
	assert_int_equal(rb->c.bytes, 5);
	assert_memory_equal(back, "reply", 5);
	assert_int_equal(atomic_load(&r->calls), 1);
}

/*
 * A write-all is pending (the peer does not read) and the peer shuts down
 * its own write side; the write is then cancelled.  It must end once with
 * ECANCELED and px_destroy must not wait for it.  early: the shutdown
 * comes right after the start, before the loop ever ran (on io_uring,
 * before the request was submitted), then one px_handle_events(px, 0) and
 * the cancel; late: shutdown and cancel after the write has been pending
 * a while.  fuzz_api found the early order hanging px_destroy on
 * io_uring: the cancel reached the kernel while the send was between two
 * rounds of task work and found nothing (fixed; TESTING.md, known
 * problems).
 */
static void cancel_write_after_peer_shutdown(void **state, bool early)
{
	h_fx *f = *state;
	enum { LEN = 8 << 20 };
	int sv[2];
	h_socketpair(f, sv);
	uint8_t *buf = h_alloc(f, LEN);
	h_rec *w = h_rec_new(f);
	assert_int_equal(px_write_stream_all(f->px, sv[0], buf, LEN, h_rec_cb, w),
			 0);
	if (!early) {
		h_settle(f, 30);
		assert_false(h_rec_done(w));
	}
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	if (early)
		assert_true(px_handle_events(f->px, 0) >= 0);
	else
		h_settle(f, 30);
	assert_false(h_rec_done(w));
	assert_int_equal(px_cancel(f->px, sv[0]), 1);
	h_wait_rec(f, w, 5000, "the write cancelled after the peer's shutdown");
	h_settle(f, 20);
	assert_once(w, PX_OP_WRITE_STREAM, sv[0]);
	expect_error(w, ECANCELED, "a cancelled write-all");
	assert_true(w->c.bytes < LEN);
}

static void cancel_write_peer_shutdown_late(void **state)
{
	cancel_write_after_peer_shutdown(state, false);
}

static void cancel_write_peer_shutdown_early(void **state)
{
	cancel_write_after_peer_shutdown(state, true);
}

/* A write-all waiting for room on an AF_UNIX stream socket whose peer
 * then calls shutdown(SHUT_RD) and keeps its socket open.  Every send
 * from then on fails with EPIPE, as a blocking send(2) would, but no poll
 * of the socket changes: no room comes and no bit says so.  The write must
 * still end, with EPIPE, within seconds (the readiness engines retry a
 * write head that waited a whole period once a second).  It waited for
 * good on every engine but io_uring (fixed; TESTING.md, fixed problem 57). */
static void write_all_then_shutdown(void **state, bool own)
{
	h_fx *f = *state;
	enum { LEN = 8 << 20 };
	int sv[2];
	const char *what = own ? "a write-all whose own socket was shut down "
				 "for writing"
			       : "a write-all whose peer shut down its reading";
	h_socketpair(f, sv);
	uint8_t *buf = h_alloc(f, LEN);
	h_rec *w = h_rec_new(f);
	assert_int_equal(px_write_stream_all(f->px, sv[0], buf, LEN, h_rec_cb, w),
			 0);
	h_settle(f, 50);
	assert_false(h_rec_done(w));
	if (own)
		assert_int_equal(shutdown(sv[0], SHUT_WR), 0);
	else
		assert_int_equal(shutdown(sv[1], SHUT_RD), 0);
	h_wait_rec(f, w, 6000, what);
	h_settle(f, 20);
	assert_once(w, PX_OP_WRITE_STREAM, sv[0]);
	expect_error(w, EPIPE, what);
	assert_true(w->c.bytes < LEN);
}

static void write_all_peer_shut_rd(void **state)
{
	write_all_then_shutdown(state, false);
}

/* The same when the writer's own socket is shut down for writing (by the
 * application, from another thread): Linux AIO's poll never fired there
 * either (a helper's review, 2026-12-05); the retry covers it. */
static void write_all_own_shut_wr(void **state)
{
	write_all_then_shutdown(state, true);
}

/* A write-all started by a thread that then exits, on a socketpair whose
 * peer has shut down its writing, the thread leading the loop for a
 * while before it leaves (so that on io_uring the send, its
 * internal poll firing at once every time, goes to an io-wq worker, as in
 * fixed problem 2).  The kernel cancels the io-wq work of an exiting
 * thread by signalling the worker: the send ended with EINTR, which
 * io_uring handed to the application (found by model_random_seeds, seed
 * 1117, in px_destroy after the loop threads had left).  The write must
 * go on from another thread and move every byte to a peer that reads
 * them (TESTING.md, fixed problem 149). */
typedef struct exiting_starter {
	px_proactor *px;
	int fd;
	const uint8_t *buf;
	size_t len;
	h_rec *rec;
	int rc;
} exiting_starter;

static void *exiting_starter_main(void *arg)
{
	exiting_starter *e = arg;
	e->rc = px_write_stream_all(e->px, e->fd, e->buf, e->len, h_rec_cb,
				    e->rec);
	/* a loop thread for a while: it submits (and leads) */
	uint64_t dl = h_deadline(50);
	while (h_now_ms() < dl)
		px_handle_events(e->px, 5);
	return NULL;
}

typedef struct drain_peer {
	int fd;
	size_t want, got;
} drain_peer;

static void *drain_peer_main(void *arg)
{
	drain_peer *d = arg;
	static uint8_t sink[65536];
	uint64_t dl = h_deadline(5000);
	while (d->got < d->want && h_now_ms() < dl) {
		struct pollfd pfd = { .fd = d->fd, .events = POLLIN };
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		ssize_t n = read(d->fd, sink, sizeof sink);
		if (n <= 0)
			break;
		d->got += (size_t)n;
	}
	return NULL;
}

static void write_all_starter_thread_exits(void **state)
{
	h_fx *f = *state;
	enum { LEN = 1 << 20 };
	int sv[2];
	h_socketpair(f, sv);
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	uint8_t *buf = h_alloc(f, LEN);
	h_rec *w = h_rec_new(f);
	exiting_starter e = { f->px, sv[0], buf, LEN, w, 1 };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, exiting_starter_main, &e), 0);
	pthread_join(th, NULL);
	assert_int_equal(e.rc, 0);
	h_settle(f, 20);
	drain_peer d = { sv[1], LEN, 0 };
	assert_int_equal(pthread_create(&th, NULL, drain_peer_main, &d), 0);
	uint64_t dl = h_deadline(5000);
	while (!h_rec_done(w) && h_now_ms() < dl)
		px_handle_events(f->px, 10);
	pthread_join(th, NULL);
	h_wait_rec(f, w, 1000, "a write-all whose starting thread exited");
	assert_once(w, PX_OP_WRITE_STREAM, sv[0]);
	if (w->c.error)
		fail_msg("write-all whose starting thread exited: error %d (%s) "
			 "after %zu of %d bytes", w->c.error,
			 strerror(w->c.error), w->c.bytes, LEN);
	assert_int_equal(w->c.bytes, LEN);
	assert_int_equal(d.got, LEN);
}

/* One socket under two numbers (y = dup(a), as stdin and stdout of an
 * inetd-style service): a read pending on y while a write-all on a has to
 * wait for room and then ends (a goes idle).  Data the peer sends next
 * must reach the read on y.  The linux_rt wait once turned O_ASYNC off the
 * shared file when a went idle, and the read on y waited for good (fixed;
 * TESTING.md, fixed problem 58). */
static void read_on_dup_after_other_number_idles(void **state)
{
	h_fx *f = *state;
	enum { LEN = 2 << 20 };
	int sv[2];
	h_socketpair(f, sv);
	int a = sv[0], y = h_track(f, dup(sv[0]));
	assert_true(y >= 0);
	char *rb = h_alloc(f, 64), *sink = h_alloc(f, 1 << 16);
	uint8_t *big = h_alloc(f, LEN);
	h_rec *r = h_rec_new(f), *w = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, y, rb, 64, h_rec_cb, r), 0);
	h_settle(f, 20);
	assert_int_equal(px_write_stream_all(f->px, a, big, LEN, h_rec_cb, w), 0);
	/* The peer drains the write, the loop running in between. */
	int fl = fcntl(sv[1], F_GETFL);
	assert_int_equal(fcntl(sv[1], F_SETFL, fl | O_NONBLOCK), 0);
	size_t got = 0;
	uint64_t dl = h_deadline(10000);
	while (got < LEN || !h_rec_done(w)) {
		ssize_t n = read(sv[1], sink, 1 << 16);
		if (n > 0)
			got += (size_t)n;
		else
			h_pump(f, dl, "the write-all on the first number");
	}
	assert_int_equal(got, LEN);
	assert_once(w, PX_OP_WRITE_STREAM, a);
	expect_error(w, 0, "the write-all on the first number");
	assert_false(h_rec_done(r));
	h_settle(f, 50);
	assert_int_equal(write(sv[1], "hello", 5), 5);
	h_wait_rec(f, r, 5000, "a read on the dup after the first number idled");
	h_settle(f, 20);
	assert_once(r, PX_OP_READ_STREAM, y);
	expect_error(r, 0, "the read on the dup");
	assert_int_equal(r->c.bytes, 5);
	assert_memory_equal(rb, "hello", 5);
}

/* ------------------------------------------------------------------ */
/* Stream sockets at their edges                                        */
/* ------------------------------------------------------------------ */

/*
 * End of stream, exactly once per read: TCP and AF_UNIX stream, the peer
 * ending with shutdown(SHUT_WR) or with close(2), after 3 bytes.  Two
 * reads are pending when it comes: the first gets the 3 bytes, the second
 * the end (0 bytes, error 0); two reads started afterwards get the end
 * again, at once; none is called twice.
 */
static void eof_pending_and_later_reads(void **state)
{
	h_fx *f = *state;
	static const char *kinds[] = {"TCP, peer shutdown(SHUT_WR)",
				      "TCP, peer close",
				      "AF_UNIX stream, peer shutdown(SHUT_WR)",
				      "AF_UNIX stream, peer close"};
	for (int kind = 0; kind < 4; kind++) {
		int c, s;
		if (kind < 2) {
			tcp_pair(f, &c, &s, 0, 0);
		} else {
			int sv[2];
			h_socketpair(f, sv);
			c = sv[0];
			s = sv[1];
		}
		char *buf = h_alloc(f, 4 * 64);
		h_rec *r[4];
		for (int i = 0; i < 4; i++)
			r[i] = h_rec_new(f);
		for (int i = 0; i < 2; i++)
			assert_int_equal(px_read_stream(f->px, s, buf + 64 * i, 64,
							h_rec_cb, r[i]), 0);
		h_settle(f, 20);
		assert_false(h_rec_done(r[0]));
		assert_int_equal(send(c, "abc", 3, MSG_NOSIGNAL), 3);
		if (kind & 1)
			h_close(f, c);
		else
			assert_int_equal(shutdown(c, SHUT_WR), 0);
		h_wait_rec(f, r[0], 5000, kinds[kind]);
		h_wait_rec(f, r[1], 5000, kinds[kind]);
		for (int i = 2; i < 4; i++) {
			assert_int_equal(px_read_stream(f->px, s, buf + 64 * i,
							64, h_rec_cb, r[i]), 0);
			h_wait_rec(f, r[i], 5000, kinds[kind]);
		}
		h_settle(f, 20);
		for (int i = 0; i < 4; i++) {
			assert_once(r[i], PX_OP_READ_STREAM, s);
			if (r[i]->c.error != 0 || r[i]->c.bytes != (i ? 0u : 3u))
				fail_msg("%s: read %d (%s) completed with error "
					 "%d (%s), %zu bytes; expected %s", kinds[kind],
					 i + 1, i < 2 ? "pending" : "started after",
					 r[i]->c.error, strerror(r[i]->c.error),
					 r[i]->c.bytes, i ? "the end of stream"
						      : "the 3 bytes");
		}
		assert_memory_equal(buf, "abc", 3);
	}
}

/* A connected TCP pair (small buffers on the client when small) made
 * without the fixture, for a forked child. */
static int child_tcp_pair(int *c, int *s, bool small)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof a;
	int sz = 32768;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -1;
	if (small)
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	if (bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return -1;
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (small)
		setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	if (*c < 0 || connect(*c, (struct sockaddr *)&a, al) < 0)
		return -1;
	*s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	return *s < 0 ? -1 : 0;
}

/* Pump px until r completed or ms passed (a forked child's loop). */
static bool child_wait(px_proactor *px, h_rec *r, int ms)
{
	uint64_t dl = h_deadline(ms);
	while (!h_rec_done(r) && h_now_ms() < dl)
		px_handle_events(px, 10);
	return h_rec_done(r);
}

/*
 * One child of peer_gone_sigpipe_default: SIGPIPE at its default
 * disposition, a proactor of its own, an 8 MiB px_write_stream_all to a
 * peer that does not read (and, kinds 0 and 1, a read pending beside it);
 * then the peer goes:
 *   0  TCP, the peer closes with a reset (SO_LINGER 0);
 *   1  AF_UNIX stream, the peer closes with data unread (the kernel then
 *      reports ECONNRESET on this side);
 *   2  TCP, the peer reads 64 KiB, stops, and closes with data unread;
 *   3  TCP, the peer drains what came and closes (FIN first: the sends
 *      after it are answered with a reset);
 *   4  AF_UNIX stream, the peer reads 64 KiB, stops, and closes.
 * The kernel reports a reset once, to whichever call asks first: the
 * read ends with ECONNRESET or, when the write took it, with the end of
 * the stream; the write with ECONNRESET or EPIPE, fewer bytes than asked
 * and at least what the peer read; at least one of them says
 * ECONNRESET in kinds 0 and 1.  A write started afterwards fails the
 * same way.  Exit 0, or 1 with a message on stdout.
 */
static int peer_gone_child(int kind)
{
	enum { LEN = 8 << 20, PEEK = 64 << 10 };
	static const char *what[] = {"TCP reset", "AF_UNIX close, data unread",
				     "TCP peer stopped reading, closed",
				     "TCP peer drained, closed",
				     "AF_UNIX peer stopped reading, closed"};
	px_proactor *px = child_proactor();
	if (!px)
		return 1;
	int c, s, bad = 0;
	bool tcp = kind == 0 || kind == 2 || kind == 3;
	if (tcp) {
		if (child_tcp_pair(&c, &s, true) < 0) {
			printf("child: TCP pair: %s\n", strerror(errno));
			return 1;
		}
	} else {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return 1;
		c = sv[0];
		s = sv[1];
	}
	uint8_t *out = calloc(1, LEN), *in = malloc(PEEK);
	static char rbuf[64];
	h_rec r, w, w2;
	memset(&r, 0, sizeof r);
	memset(&w, 0, sizeof w);
	memset(&w2, 0, sizeof w2);
	if (!out || !in)
		return 1;
	if (kind == 1 && write(c, "unread", 6) != 6)
		return 1;
	if (kind <= 1 && px_read_stream(px, c, rbuf, sizeof rbuf, h_rec_cb, &r))
		return 1;
	if (px_write_stream_all(px, c, out, LEN, h_rec_cb, &w))
		return 1;
	uint64_t dl = h_deadline(50);
	while (h_now_ms() < dl)
		px_handle_events(px, 10);
	if (h_rec_done(&w) || h_rec_done(&r)) {
		printf("child: %s: an operation ended before the peer went\n",
		       what[kind]);
		return 1;
	}
	size_t peer_got = 0;
	if (kind >= 2) {
		/* The peer reads (or drains) while the write goes on. */
		fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
		dl = h_deadline(3000);
		while (peer_got < PEEK && h_now_ms() < dl) {
			ssize_t n = read(s, in, PEEK - peer_got);
			if (n > 0)
				peer_got += (size_t)n;
			else
				px_handle_events(px, 1);
		}
		for (ssize_t n; kind == 3 && (n = read(s, in, PEEK)) > 0;)
			peer_got += (size_t)n;
	}
	if (kind == 0) {
		struct linger lg = {1, 0};
		setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	close(s);
	if (!child_wait(px, &w, 5000) || (kind <= 1 && !child_wait(px, &r, 5000))) {
		printf("child: %s: the %s did not end within 5 s\n", what[kind],
		       h_rec_done(&w) ? "read" : "write-all");
		return 1;
	}
	if (px_write_stream(px, c, out, 100, h_rec_cb, &w2) ||
	    !child_wait(px, &w2, 5000)) {
		printf("child: %s: a later write did not end\n", what[kind]);
		return 1;
	}
	dl = h_deadline(20);
	while (h_now_ms() < dl)
		px_handle_events(px, 10);
	if (atomic_load(&w.calls) != 1 || atomic_load(&w2.calls) != 1 ||
	    (kind <= 1 && atomic_load(&r.calls) != 1)) {
		printf("child: %s: callbacks: write %d, read %d, later write "
		       "%d\n", what[kind], atomic_load(&w.calls),
		       atomic_load(&r.calls), atomic_load(&w2.calls));
		bad++;
	}
	if ((w.c.error != ECONNRESET && w.c.error != EPIPE) ||
	    w.c.bytes >= LEN || w.c.bytes < peer_got) {
		printf("child: %s: the write-all ended with error %d (%s), %zu "
		       "bytes (the peer read %zu); expected ECONNRESET or EPIPE\n",
		       what[kind], w.c.error, strerror(w.c.error), w.c.bytes,
		       peer_got);
		bad++;
	}
	if (kind <= 1) {
		bool eos = r.c.error == 0 && r.c.bytes == 0;
		if ((r.c.error != ECONNRESET && !eos) ||
		    (r.c.error != ECONNRESET && w.c.error != ECONNRESET)) {
			printf("child: %s: the read ended with error %d (%s), "
			       "%zu bytes, the write with %d (%s): the reset "
			       "was not reported\n", what[kind], r.c.error,
			       strerror(r.c.error), r.c.bytes, w.c.error,
			       strerror(w.c.error));
			bad++;
		}
	}
	if ((w2.c.error != EPIPE && w2.c.error != ECONNRESET) || w2.c.bytes) {
		printf("child: %s: a later write ended with error %d (%s), %zu "
		       "bytes\n", what[kind], w2.c.error, strerror(w2.c.error),
		       w2.c.bytes);
		bad++;
	}
	px_destroy(px);
	close(c);
	fflush(stdout);
	return bad ? 1 : 0;
}

/* Peers that go while a write-all (and a read) is pending, with SIGPIPE
 * at its default disposition: each kind of peer_gone_child in a forked
 * child, so that a SIGPIPE shows as a failure. */
static void peer_gone_sigpipe_default(void **state)
{
	h_fx *f = *state;
	/* The children make proactors of their own: fork without the
	 * fixture's (sigpipe_default_disposition says why). */
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	fflush(stdout);
	for (int kind = 0; kind < 5; kind++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			_exit(peer_gone_child(kind));
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (WIFSIGNALED(st))
			fail_msg("kind %d: the child died of signal %d (%s)",
				 kind, WTERMSIG(st), strsignal(WTERMSIG(st)));
		if (WEXITSTATUS(st) != 0)
			fail_msg("kind %d: the child exited with %d (its "
				 "message above)", kind, WEXITSTATUS(st));
	}
}

/* CPU seconds of this process so far. */
static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/*
 * TCP urgent data (send with MSG_OOB) beside a stream read.  Linux takes
 * the urgent byte out of the stream (unless SO_OOBINLINE) and reports it
 * with POLLPRI, not POLLIN, so a read must neither end on it nor spin:
 *   - the urgent byte alone, read pending: over 150 ms the read stays
 *     pending and the process uses under a third of a CPU; in-band bytes
 *     sent next complete it;
 *   - "ab", urgent "!", "cd": two reads get "ab" and "cd";
 *   - the urgent byte then the end of the stream: the read gets the end;
 *   - SO_OOBINLINE: the read gets the byte.
 */
static void tcp_urgent_data(void **state)
{
	h_fx *f = *state;
	int c, s;
	char *buf = h_alloc(f, 4 * 64);
	h_rec *r = h_rec_new(f);

	tcp_pair(f, &c, &s, 0, 0);
	assert_int_equal(px_read_stream(f->px, s, buf, 64, h_rec_cb, r), 0);
	h_settle(f, 20);
	assert_int_equal(send(c, "!", 1, MSG_OOB), 1);
	h_settle(f, 20);
	double c0 = cpu_s();
	uint64_t t0 = h_now_ms();
	h_settle(f, 150);
	double used = cpu_s() - c0, wall = (double)(h_now_ms() - t0) / 1e3;
	if (h_rec_done(r))
		fail_msg("a read ended (error %d, %zu bytes) with only an urgent "
			 "byte there", r->c.error, r->c.bytes);
	if (used > wall / 3)
		fail_msg("spun: %.3f CPU seconds in %.3f s with a read waiting "
			 "beside an urgent byte", used, wall);
	assert_int_equal(send(c, "zz", 2, 0), 2);
	h_wait_rec(f, r, 5000, "a read after an urgent byte");
	assert_once(r, PX_OP_READ_STREAM, s);
	expect_error(r, 0, "a read after an urgent byte");
	assert_int_equal(r->c.bytes, 2);
	assert_memory_equal(buf, "zz", 2);

	/* Around the urgent byte. */
	h_rec *a = h_rec_new(f), *b = h_rec_new(f);
	assert_int_equal(send(c, "ab", 2, 0), 2);
	assert_int_equal(send(c, "!", 1, MSG_OOB), 1);
	assert_int_equal(send(c, "cd", 2, 0), 2);
	h_settle(f, 20);
	assert_int_equal(px_read_stream(f->px, s, buf + 64, 64, h_rec_cb, a), 0);
	h_wait_rec(f, a, 5000, "a read before the urgent mark");
	assert_int_equal(px_read_stream(f->px, s, buf + 128, 64, h_rec_cb, b), 0);
	h_wait_rec(f, b, 5000, "a read after the urgent mark");
	expect_error(a, 0, "a read before the urgent mark");
	expect_error(b, 0, "a read after the urgent mark");
	if (a->c.bytes != 2 || memcmp(buf + 64, "ab", 2) != 0 ||
	    b->c.bytes != 2 || memcmp(buf + 128, "cd", 2) != 0)
		fail_msg("reads around an urgent byte got \"%.*s\" and \"%.*s\", "
			 "expected \"ab\" and \"cd\"", (int)a->c.bytes, buf + 64,
			 (int)b->c.bytes, buf + 128);

	/* The urgent byte, then the end of the stream. */
	h_rec *e = h_rec_new(f);
	assert_int_equal(px_read_stream(f->px, s, buf + 192, 64, h_rec_cb, e), 0);
	h_settle(f, 20);
	assert_int_equal(send(c, "!", 1, MSG_OOB), 1);
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	h_wait_rec(f, e, 5000, "the end of stream after an urgent byte");
	h_settle(f, 20);
	assert_once(e, PX_OP_READ_STREAM, s);
	expect_error(e, 0, "the end of stream after an urgent byte");
	assert_int_equal(e->c.bytes, 0);

	/* Inline. */
	int c2, s2, on = 1;
	h_rec *i = h_rec_new(f);
	tcp_pair(f, &c2, &s2, 0, 0);
	assert_int_equal(setsockopt(s2, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on),
			 0);
	assert_int_equal(px_read_stream(f->px, s2, buf, 64, h_rec_cb, i), 0);
	h_settle(f, 20);
	assert_int_equal(send(c2, "!", 1, MSG_OOB), 1);
	h_wait_rec(f, i, 5000, "a read of an inline urgent byte");
	h_settle(f, 20);
	assert_once(i, PX_OP_READ_STREAM, s2);
	expect_error(i, 0, "a read of an inline urgent byte");
	assert_int_equal(i->c.bytes, 1);
	assert_int_equal(buf[0], '!');
}

/* ------------------------------------------------------------------ */
/* Connect                                                              */
/* ------------------------------------------------------------------ */

static void connect_refused(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in *dst = h_alloc(f, sizeof *dst);
	/* Bound and never listening, kept open: a SYN to it is refused, and
	 * no other test program can listen on the port meanwhile. */
	(void)h_bound_socket(f, SOCK_STREAM, dst);
	int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_connect(f->px, c, (struct sockaddr *)dst,
				    sizeof *dst, h_rec_cb, r), 0);
	h_wait_rec(f, r, 5000, "a refused connect");
	h_settle(f, 20);
	assert_once(r, PX_OP_CONNECT, c);
	expect_error(r, ECONNREFUSED, "a connect to a closed loopback port");
}

/* The same, with a read started on the socket right after the connect,
 * blocking and non-blocking.  The kernel reports the connection's error
 * once: whichever of the two asks first gets ECONNREFUSED.  Both
 * complete, within 1 s: the connect with ECONNREFUSED, or ECONNABORTED
 * when the read took the error; the read with an error or end of stream.
 * The readiness and Linux AIO engines once took the connect whose error
 * the read had taken for one still under way (poll and select spinning
 * on its hang-up, epoll waiting for good). */
static void connect_refused_read_pending(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in *dst = h_alloc(f, sizeof *dst);
	(void)h_bound_socket(f, SOCK_STREAM, dst); /* kept: see above */
	for (int nb = 0; nb < 2; nb++) {
		int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
						  (nb ? SOCK_NONBLOCK : 0), 0));
		char *buf = h_alloc(f, 16);
		h_rec *rc = h_rec_new(f), *rr = h_rec_new(f);
		assert_int_equal(px_connect(f->px, c, (struct sockaddr *)dst,
					    sizeof *dst, h_rec_cb, rc), 0);
		assert_int_equal(px_read_stream(f->px, c, buf, 16, h_rec_cb, rr), 0);
		h_wait_rec(f, rc, 1000, "a refused connect with a read pending");
		h_wait_rec(f, rr, 1000, "a read pending on a refused connect");
		h_settle(f, 10);
		assert_once(rc, PX_OP_CONNECT, c);
		assert_once(rr, PX_OP_READ_STREAM, c);
		if (rc->c.error != ECONNREFUSED && rc->c.error != ECONNABORTED)
			fail_msg("the connect completed with %d (%s), expected "
				 "ECONNREFUSED or ECONNABORTED", rc->c.error,
				 strerror(rc->c.error));
		if (rr->c.bytes != 0)
			fail_msg("the read of a refused connection got %zu bytes",
				 rr->c.bytes);
	}
}

/* A loopback listener with backlog 0 filled until it drops SYNs, so that
 * a connect to *la stays under way; fails the test when it cannot be
 * filled. */
static void fill_backlog(h_fx *f, struct sockaddr_in *la)
{
	int l = h_bound_socket(f, SOCK_STREAM, la);
	assert_int_equal(listen(l, 0), 0);
	for (int i = 0; i < 16; i++) {
		int fd = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
						      SOCK_NONBLOCK, 0));
		int rc = connect(fd, (struct sockaddr *)la, sizeof *la);
		if (rc < 0 && errno != EINPROGRESS)
			fail_msg("filling the backlog: connect: %s",
				 strerror(errno));
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (rc < 0 && poll(&p, 1, 200) == 0)
			return;
	}
	fail_msg("a loopback listener with backlog 0 kept accepting "
		 "connections: cannot make a connect that stays pending");
}

/* A loopback listener that never accepts, backlog 0: once its queue is
 * full the kernel drops further SYNs, and a connect stays in progress
 * (retransmitting) for a long time. */
static void connect_stuck_then_cancel(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in *la = h_alloc(f, sizeof *la);
	fill_backlog(f, la);
	int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	h_rec *r = h_rec_new(f);
	assert_int_equal(px_connect(f->px, c, (struct sockaddr *)la,
				    sizeof *la, h_rec_cb, r), 0);
	h_settle(f, 200);
	if (h_rec_done(r))
		fail_msg("a connect to a full backlog completed (error %d %s)",
			 r->c.error, strerror(r->c.error));
	assert_int_equal(px_cancel(f->px, c), 1);
	h_wait_rec(f, r, 5000, "the cancelled connect");
	h_settle(f, 20);
	assert_once(r, PX_OP_CONNECT, c);
	expect_error(r, ECANCELED, "a cancelled connect");
}

/*
 * The application ends a connect under way with shutdown(2) (or a
 * connect(2) to AF_UNSPEC), as a blocking connect(2) in another thread is
 * ended: the connect completes within 1 s with the reset (ECONNRESET, or
 * ECONNABORTED when a read pending on the socket took it first, as in
 * connect_refused_read_pending), and the socket stays closed, with its
 * file status flags as before.  The readiness and Linux AIO engines
 * finished such a connect with one more connect(2) to the same address,
 * to clear the kernel's "connecting" mark (fixed problem 94), but the
 * shutdown had already cleared it: that call started a new handshake
 * behind the application's back (the socket in SYN_SENT after the
 * callback), and with a read pending, which took the reset, the connect
 * completed with EINPROGRESS (a helper's review of 2026-12-06).
 */
static void connect_shut_down_one(h_fx *f, bool read_pending)
{
	struct sockaddr_in *la = h_alloc(f, sizeof *la);
	fill_backlog(f, la);
	for (int k = 0; k < 4; k++) {
		bool nb = k & 1, unspec = k & 2;
		int c = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
						  (nb ? SOCK_NONBLOCK : 0), 0));
		int flags_before = fcntl(c, F_GETFL);
		char *buf = h_alloc(f, 16);
		h_rec *rc = h_rec_new(f), *rr = h_rec_new(f);
		const char *how = unspec ? "connect(AF_UNSPEC)" : "shutdown(2)";

		assert_int_equal(px_connect(f->px, c, (struct sockaddr *)la,
					    sizeof *la, h_rec_cb, rc), 0);
		if (read_pending)
			assert_int_equal(px_read_stream(f->px, c, buf, 16,
							h_rec_cb, rr), 0);
		h_settle(f, 50);
		if (h_rec_done(rc))
			fail_msg("a connect to a full backlog completed (error "
				 "%d %s)", rc->c.error, strerror(rc->c.error));
		if (unspec) {
			struct sockaddr un = {.sa_family = AF_UNSPEC};
			assert_int_equal(connect(c, &un, sizeof un), 0);
		} else {
			assert_int_equal(shutdown(c, SHUT_RDWR), 0);
		}
		h_wait_rec(f, rc, 1000, "a connect ended by the application");
		if (read_pending)
			h_wait_rec(f, rr, 1000, "a read on a connect ended by "
				   "the application");
		h_settle(f, 20);
		assert_once(rc, PX_OP_CONNECT, c);
		if (rc->c.error != ECONNRESET && rc->c.error != ECONNABORTED)
			fail_msg("a %sblocking connect ended by %s%s completed "
				 "with %d (%s), expected ECONNRESET or "
				 "ECONNABORTED", nb ? "non-" : "", how,
				 read_pending ? " with a read pending" : "",
				 rc->c.error, strerror(rc->c.error));
		if (read_pending) {
			assert_once(rr, PX_OP_READ_STREAM, c);
			assert_int_equal(rr->c.bytes, 0);
		}
		struct tcp_info ti;
		socklen_t tl = sizeof ti;
		assert_int_equal(getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &tl), 0);
		if (ti.tcpi_state != TCP_CLOSE)
			fail_msg("a %sblocking socket whose connect %s ended%s is "
				 "in TCP state %d after the callback, not closed: "
				 "a new handshake was started", nb ? "non-" : "",
				 how, read_pending ? " (read pending)" : "",
				 ti.tcpi_state);
		assert_int_equal(fcntl(c, F_GETFL), flags_before);
	}
}

static void connect_shut_down_under_way(void **state)
{
	connect_shut_down_one(*state, false);
}

/* The same with a read pending, which takes the reset first.  Not run on
 * io_uring (TESTING.md, known problems): the kernel's own retry of the
 * connect starts the new handshake there. */
static void connect_shut_down_read_pending(void **state)
{
	connect_shut_down_one(*state, true);
}

/* ------------------------------------------------------------------ */
/* Descriptor closed under a pending operation                          */
/* ------------------------------------------------------------------ */

static void close_pending_then_cancel(void **state)
{
	h_fx *f = *state;
	int sv[2];
	char *buf;
	h_rec *r = h_start_pending_read(f, sv, 64, &buf);
	h_settle(f, 20);
	int fd = sv[1];
	h_close(f, fd);
	/* No descriptor is opened before the cancel: the number stays free. */
	h_settle(f, 50);
	int n = px_cancel(f->px, fd);
	assert_true(n == 0 || n == 1);
	h_wait_rec(f, r, 5000, "the read whose descriptor was closed");
	h_settle(f, 50);
	assert_once(r, PX_OP_READ_STREAM, fd);
	if (r->c.error != EBADF && r->c.error != ECANCELED)
		fail_msg("a read whose descriptor was closed completed with "
			 "error %d (%s), expected EBADF or ECANCELED",
			 r->c.error, strerror(r->c.error));
	print_message("descriptor closed under a read: %s, px_cancel found %d\n",
		      strerror(r->c.error), n);
	/* A cancel that found nothing: the read had already ended. */
	if (n == 0 && r->c.error != EBADF)
		fail_msg("px_cancel found nothing, yet the read was cancelled");
	h_assert_usable(f);
}

/* ------------------------------------------------------------------ */
/* Cancel racing with completion                                        */
/* ------------------------------------------------------------------ */

enum { RACE2_ROUNDS = 300 };

static void cancel_races_completion(void **state)
{
	h_fx *f = *state;
	char *buf = h_alloc(f, 16);
	h_rec *r = h_rec_new(f);
	int cancelled = 0, completed = 0;

	h_loops_start(f, 2, true);
	for (int i = 0; i < RACE2_ROUNDS; i++) {
		int sv[2];
		memset(r, 0, sizeof *r);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, sv), 0);
		assert_int_equal(px_read_stream(f->px, sv[1], buf, 16, h_rec_cb,
						r), 0);
		h_sleep_ms(1);
		/* A loop thread completes the read while this one cancels
		 * it, a little later each round. */
		assert_int_equal(write(sv[0], "y", 1), 1);
		spin_ns((uint64_t)(i % 40) * 2500);
		int n = px_cancel(f->px, sv[1]);
		bool ok = wait_flag(&r->done, 5000);
		h_sleep_ms(1);
		close(sv[0]);
		close(sv[1]);
		if (!ok) {
			h_loops_stop();
			fail_msg("round %d: the read never completed (cancel "
				 "returned %d)", i, n);
		}
		assert_true(n == 0 || n == 1);
		assert_int_equal(atomic_load(&r->calls), 1);
		if (r->c.error == ECANCELED) {
			assert_int_equal(n, 1);
			cancelled++;
		} else {
			assert_int_equal(r->c.error, 0);
			assert_int_equal(r->c.bytes, 1);
			completed++;
		}
	}
	h_loops_stop();
	h_settle(f, 20);
	assert_int_equal(atomic_load(&r->calls), 1);
	print_message("cancel vs completion: %d cancelled, %d completed\n",
		      cancelled, completed);
}

/* ------------------------------------------------------------------ */
/* Callbacks that tear sessions down                                    */
/* ------------------------------------------------------------------ */

typedef struct teardown_ctx {
	h_fx *f;
	bool close_own;
	int own, other;
	int n_own, n_other;       /* px_cancel results inside the callback */
	h_rec first;
} teardown_ctx;

static void teardown_cb(const px_completion *c)
{
	teardown_ctx *t = c->user;
	if (atomic_fetch_add(&t->first.calls, 1) == 0) {
		t->first.c = *c;
		t->n_own = px_cancel(c->proactor, t->own);
		if (t->close_own)
			close(t->own);
		t->n_other = px_cancel(c->proactor, t->other);
		atomic_store(&t->first.done, 1);
	}
}

/*
 * The callback of a read on session A cancels A's other operations (a read
 * and a pending 8 MiB write), closes A's descriptor if close_own, and
 * cancels session B's two reads.  Each of those completes once with
 * ECANCELED.
 */
static void callback_tears_down(void **state, bool close_own)
{
	h_fx *f = *state;
	int a[2], b[2];
	h_socketpair(f, a);
	h_socketpair(f, b);
	char *buf = h_alloc(f, 64);
	teardown_ctx *t = h_alloc(f, sizeof *t);
	h_rec *a2 = h_rec_new(f), *aw = h_rec_new(f), *b1 = h_rec_new(f),
	      *b2 = h_rec_new(f);
	t->f = f;
	t->close_own = close_own;
	t->own = a[1];
	t->other = b[1];
	/* Session A: two reads and a pending big write; session B: two
	 * reads. */
	assert_int_equal(px_read_stream(f->px, a[1], buf, 8, teardown_cb, t), 0);
	assert_int_equal(px_read_stream(f->px, a[1], buf + 8, 8, h_rec_cb, a2), 0);
	enum { LEN = 8 << 20 };
	uint8_t *big = h_alloc(f, LEN);
	assert_int_equal(px_write_stream_all(f->px, a[1], big, LEN, h_rec_cb,
					     aw), 0);
	assert_int_equal(px_read_stream(f->px, b[1], buf + 16, 8, h_rec_cb, b1), 0);
	assert_int_equal(px_read_stream(f->px, b[1], buf + 24, 8, h_rec_cb, b2), 0);
	h_settle(f, 20);
	assert_int_equal(write(a[0], "1", 1), 1);
	h_wait_rec(f, &t->first, 5000, "the read whose callback tears down");
	h_wait_rec(f, a2, 5000, "the second read of the torn-down session");
	h_wait_rec(f, aw, 5000, "the write of the torn-down session");
	h_wait_rec(f, b1, 5000, "the other session's first read");
	h_wait_rec(f, b2, 5000, "the other session's second read");
	/* The callback closed a[1]; keep the harness from closing it again
	 * (the number may be reused). */
	for (int i = 0; close_own && i < f->nfds; i++)
		if (f->fds[i] == a[1])
			f->fds[i] = -1;
	h_settle(f, 30);
	assert_int_equal(atomic_load(&t->first.calls), 1);
	assert_int_equal(t->first.c.error, 0);
	assert_int_equal(t->first.c.bytes, 1);
	assert_int_equal(t->n_own, 2);
	assert_int_equal(t->n_other, 2);
	h_rec *rest[] = {a2, aw, b1, b2};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(atomic_load(&rest[i]->calls), 1);
		if (rest[i]->c.error != ECANCELED)
			fail_msg("operation %d (%s) cancelled from a callback "
				 "completed with error %d (%s), expected ECANCELED",
				 i, px_op_name(rest[i]->c.op), rest[i]->c.error,
				 strerror(rest[i]->c.error));
	}
	assert_true(aw->c.bytes < LEN);
	h_assert_usable(f);
}

static void callback_cancels_sessions(void **state)
{
	callback_tears_down(state, false);
}

static void callback_cancels_and_closes_own(void **state)
{
	callback_tears_down(state, true);
}

/* ------------------------------------------------------------------ */
/* Destroy with thousands of operations in flight                       */
/* ------------------------------------------------------------------ */

enum { D_PAIRS = 256, D_READS = 8, D_POSTS = 1000, D_TIMERS = 500 };
enum { D_OPS = D_PAIRS * D_READS + D_POSTS + D_TIMERS };

static atomic_int *g_dcalls;

static void d_cb(const px_completion *c)
{
	atomic_fetch_add(&g_dcalls[(intptr_t)c->user], 1);
}

static void destroy_with_thousands_pending(void **state)
{
	h_fx *f = *state;
	int (*sv)[2] = h_alloc(f, sizeof(int[2]) * D_PAIRS);
	char *buf = h_alloc(f, D_PAIRS * D_READS);
	atomic_int *calls = h_alloc(f, sizeof(atomic_int) * D_OPS);
	int *err = h_alloc(f, sizeof(int) * D_OPS);
	g_dcalls = calls;
	int k = 0;
	(void)err;
	for (int i = 0; i < D_PAIRS; i++) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]) < 0)
			fail_msg("socketpair %d: %s", i, strerror(errno));
		for (int j = 0; j < D_READS; j++, k++)
			assert_int_equal(px_read_stream(f->px, sv[i][1],
							buf + k, 1, d_cb,
							(void *)(intptr_t)k), 0);
	}
	for (int i = 0; i < D_POSTS; i++, k++)
		assert_int_equal(px_post(f->px, d_cb, (void *)(intptr_t)k), 0);
	for (int i = 0; i < D_TIMERS; i++, k++)
		assert_true(px_timer_start(f->px, (uint64_t)(i % 2) * 3600000000000ull,
					   d_cb, (void *)(intptr_t)k) > 0);
	/* Some data, so a few reads finish for real. */
	for (int i = 0; i < D_PAIRS; i += 7)
		assert_int_equal(write(sv[i][0], "zz", 2), 2);
	px_handle_events(f->px, 0);
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	for (int i = 0; i < D_PAIRS; i++) {
		close(sv[i][0]);
		close(sv[i][1]);
	}
	for (int i = 0; i < D_OPS; i++)
		if (atomic_load(&calls[i]) != 1)
			fail_msg("operation %d of %d had %d callbacks after "
				 "px_destroy", i, D_OPS, atomic_load(&calls[i]));
}

/* ------------------------------------------------------------------ */
/* Echo sessions (EINTR storm, max_aio load)                            */
/* ------------------------------------------------------------------ */

/*
 * A client writes blocks of a seeded pattern with px_write_stream_all and
 * reads the echo back, checking every byte; the server reads a chunk and
 * echoes it with px_write_stream_all before reading on.  Each side has at
 * most one operation in flight per direction, so 'busy' catches a second
 * callback for one operation.
 */
enum { E_BLOCK = 16384, E_CHUNK = 4096 };

typedef struct echo {
	int cfd, sfd;
	uint32_t seed;
	uint8_t wbuf[E_BLOCK], rbuf[E_BLOCK], sbuf[E_CHUNK];
	_Atomic uint64_t woff, roff; /* client: stream offsets written / read */
	atomic_int block_wait;    /* write callback and echo of the block:
				     the later of the two writes the next */
	atomic_int cw_busy, cr_busy, s_busy;
	atomic_int c_end, s_end;  /* end of stream seen (the close-down) */
	atomic_int error;
	atomic_int mismatch;
} echo;

static atomic_int g_e_stop;
static atomic_long g_e_starts, g_e_done;

static void e_fail(echo *e, int err)
{
	int zero = 0;
	atomic_compare_exchange_strong(&e->error, &zero, err ? err : EIO);
}

static int e_count(int rc)
{
	if (rc == 0)
		atomic_fetch_add(&g_e_starts, 1);
	return rc;
}

static void e_client_write_cb(const px_completion *c);
static void e_client_read_cb(const px_completion *c);
static void e_server_read_cb(const px_completion *c);

static void e_client_write(px_proactor *px, echo *e)
{
	/* Busy before looking at the stop flag: the drain (which sets the
	 * flag, then looks at busy) sees one or the other. */
	atomic_store(&e->cw_busy, 1);
	if (atomic_load(&g_e_stop)) {
		atomic_store(&e->cw_busy, 0);
		return;
	}
	h_pattern(e->wbuf, E_BLOCK, e->seed, e->woff);
	atomic_store(&e->block_wait, 2);
	int rc = e_count(px_write_stream_all(px, e->cfd, e->wbuf, E_BLOCK,
					     e_client_write_cb, e));
	if (rc) {
		atomic_store(&e->cw_busy, 0);
		e_fail(e, -rc);
	}
}

static void e_client_write_cb(const px_completion *c)
{
	echo *e = c->user;
	atomic_fetch_add(&g_e_done, 1);
	if (c->error || c->bytes != E_BLOCK)
		e_fail(e, c->error);
	else
		e->woff += E_BLOCK;
	/* Not busy only once woff says what was written (the drain). */
	if (!atomic_exchange(&e->cw_busy, 0))
		e_fail(e, EALREADY);
	if (c->error || c->bytes != E_BLOCK)
		return;
	if (atomic_fetch_sub(&e->block_wait, 1) == 1)
		e_client_write(c->proactor, e);
}

static void e_client_read(px_proactor *px, echo *e)
{
	atomic_store(&e->cr_busy, 1);
	size_t want = E_BLOCK - (size_t)(e->roff % E_BLOCK);
	int rc = e_count(px_read_stream(px, e->cfd, e->rbuf, want,
					e_client_read_cb, e));
	if (rc) {
		atomic_store(&e->cr_busy, 0);
		e_fail(e, -rc);
	}
}

static void e_client_read_cb(const px_completion *c)
{
	echo *e = c->user;
	uint8_t want[E_BLOCK];
	atomic_fetch_add(&g_e_done, 1);
	if (!atomic_exchange(&e->cr_busy, 0))
		e_fail(e, EALREADY);
	if (c->error == 0 && c->bytes == 0) {
		atomic_store(&e->c_end, 1);  /* the server shut its side */
		return;
	}
	if (c->error) {
		e_fail(e, c->error);
		return;
	}
	h_pattern(want, c->bytes, e->seed, e->roff);
	if (memcmp(want, c->buf, c->bytes))
		atomic_store(&e->mismatch, 1);
	e->roff += c->bytes;
	/* Read on first: the next write's echo may come at once. */
	bool block_back = e->roff % E_BLOCK == 0;
	e_client_read(c->proactor, e);
	if (block_back && atomic_fetch_sub(&e->block_wait, 1) == 1)
		e_client_write(c->proactor, e);
}

static void e_server_write_cb(const px_completion *c)
{
	echo *e = c->user;
	atomic_fetch_add(&g_e_done, 1);
	if (!atomic_exchange(&e->s_busy, 0))
		e_fail(e, EALREADY);
	if (c->error) {
		e_fail(e, c->error);
		return;
	}
	atomic_store(&e->s_busy, 1);
	int rc = e_count(px_read_stream(c->proactor, e->sfd, e->sbuf, E_CHUNK,
					e_server_read_cb, e));
	if (rc) {
		atomic_store(&e->s_busy, 0);
		e_fail(e, -rc);
	}
}

static void e_server_read_cb(const px_completion *c)
{
	echo *e = c->user;
	atomic_fetch_add(&g_e_done, 1);
	if (!atomic_exchange(&e->s_busy, 0))
		e_fail(e, EALREADY);
	if (c->error == 0 && c->bytes == 0) {
		/* The client shut its side: shut ours, which ends the
		 * client's read. */
		shutdown(e->sfd, SHUT_WR);
		atomic_store(&e->s_end, 1);
		return;
	}
	if (c->error) {
		e_fail(e, c->error);
		return;
	}
	atomic_store(&e->s_busy, 1);
	int rc = e_count(px_write_stream_all(c->proactor, e->sfd, e->sbuf,
					     c->bytes, e_server_write_cb, e));
	if (rc) {
		atomic_store(&e->s_busy, 0);
		e_fail(e, -rc);
	}
}

/* Run n echo sessions for ms milliseconds on f's proactor with the loop
 * threads running; then let the echoes drain, close down with shutdowns
 * (each side's last read sees end of stream), and check the counts and
 * bytes. */
static void run_echo(h_fx *f, int n, int ms)
{
	echo *es = h_alloc(f, sizeof(echo) * (size_t)n);
	atomic_store(&g_e_stop, 0);
	atomic_store(&g_e_starts, 0);
	atomic_store(&g_e_done, 0);
	for (int i = 0; i < n; i++) {
		int sv[2];
		h_socketpair(f, sv);
		es[i].cfd = sv[0];
		es[i].sfd = sv[1];
		es[i].seed = 0xec40u + (uint32_t)i;
	}
	for (int i = 0; i < n; i++) {
		echo *e = &es[i];
		atomic_store(&e->s_busy, 1);
		assert_int_equal(e_count(px_read_stream(f->px, e->sfd, e->sbuf,
							E_CHUNK,
							e_server_read_cb, e)),
				 0);
		e_client_read(f->px, e);
		e_client_write(f->px, e);
	}
	h_sleep_ms(ms);
	atomic_store(&g_e_stop, 1);
	/* Drain: every block written has come back. */
	uint64_t dl = h_deadline(20000);
	for (;;) {
		bool all = true;
		for (int i = 0; i < n; i++)
			if (atomic_load(&es[i].cw_busy) ||
			    es[i].roff != es[i].woff || atomic_load(&es[i].error))
				all = false;
		if (all || h_now_ms() > dl)
			break;
		h_sleep_ms(2);
	}
	/* Close down: the client shuts its side, the server sees end of
	 * stream and shuts its own, the client's read sees end of stream.
	 * Every chain then ends by itself. */
	for (int i = 0; i < n; i++)
		shutdown(es[i].cfd, SHUT_WR);
	dl = h_deadline(10000);
	while (atomic_load(&g_e_done) < atomic_load(&g_e_starts) &&
	       h_now_ms() < dl)
		h_sleep_ms(2);
	h_loops_stop();
	h_settle(f, 20);
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		echo *e = &es[i];
		if (atomic_load(&e->error))
			fail_msg("echo session %d: error %d (%s)", i,
				 atomic_load(&e->error),
				 strerror(atomic_load(&e->error)));
		if (atomic_load(&e->mismatch))
			fail_msg("echo session %d: an echoed byte differs from "
				 "what was sent", i);
		if (e->roff != e->woff)
			fail_msg("echo session %d: %llu bytes written, %llu "
				 "read back", i, (unsigned long long)e->woff,
				 (unsigned long long)e->roff);
		if (e->woff == 0)
			fail_msg("echo session %d moved no data", i);
		if (!atomic_load(&e->c_end) || !atomic_load(&e->s_end))
			fail_msg("echo session %d: end of stream not seen by "
				 "the %s", i,
				 atomic_load(&e->s_end) ? "client" : "server");
		bytes += e->woff;
	}
	if (atomic_load(&g_e_done) != atomic_load(&g_e_starts))
		fail_msg("%ld operations started, %ld completions",
			 atomic_load(&g_e_starts), atomic_load(&g_e_done));
	print_message("echo: %d sessions, %.1f MiB echoed, %ld operations\n", n,
		      (double)bytes / (1 << 20), atomic_load(&g_e_starts));
}

/* ------------------------------------------------------------------ */
/* EINTR storm                                                          */
/* ------------------------------------------------------------------ */

static void on_storm(int sig)
{
	(void)sig;
}

static struct {
	bool on;
	timer_t tm;
	struct sigaction old;
} g_storm;

static void storm_stop(void)
{
	if (!g_storm.on)
		return;
	timer_delete(g_storm.tm);
	sigaction(SIGUSR2, &g_storm.old, NULL);
	g_storm.on = false;
}

/* SIGUSR2 every period_ns from a POSIX timer, handled without
 * SA_RESTART, so waits and other calls in every thread keep seeing
 * EINTR; storm_stop (also in the teardown) ends it. */
static void storm_start(long period_ns)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_storm;
	sa.sa_flags = 0; /* no SA_RESTART */
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR2, &sa, &g_storm.old), 0);
	struct sigevent sev;
	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGUSR2;
	/* The kernel gives a POSIX timer its signal at creation, counted
	 * against RLIMIT_SIGPENDING, whose count every process of the user
	 * shares: on a machine shared with other test runs (the linux_rt
	 * wait's queue overflow tests, the sigwait engines) it can be full
	 * for a moment, and timer_create then fails with EAGAIN.  Try again
	 * for up to 2 s before failing. */
	int tries = 0;
	while (timer_create(CLOCK_MONOTONIC, &sev, &g_storm.tm) < 0) {
		if (errno != EAGAIN || ++tries > 200) {
			int e = errno;
			sigaction(SIGUSR2, &g_storm.old, NULL);
			fail_msg("timer_create: %s (%d tries)", strerror(e),
				 tries);
		}
		struct timespec ten_ms = {0, 10000000};
		nanosleep(&ten_ms, NULL);
	}
	g_storm.on = true;
	struct itimerspec its = {{0, period_ns}, {0, period_ns}};
	assert_int_equal(timer_settime(g_storm.tm, 0, &its, NULL), 0);
}

/* SIGUSR2 at 10 kHz during 8 echo sessions with 2 loop threads. */
static void eintr_storm(void **state)
{
	h_fx *f = *state;
	storm_start(100000); /* 10 kHz */
	h_loops_start(f, 2, true);
	run_echo(f, 8, 700);
	storm_stop();
}

static atomic_int g_storm_calls;

static void storm_count_cb(const px_completion *c)
{
	(void)c;
	atomic_fetch_add(&g_storm_calls, 1);
}

/* px_handle_events(px, -1) until *done >= want: a return of 0 means the
 * call gave up waiting without a timeout, which the manual does not
 * allow (EINTR must not end it early); an error fails too. */
static void storm_pump(h_fx *f, atomic_int *done, int want, const char *what)
{
	while (atomic_load(done) < want) {
		int rc = px_handle_events(f->px, -1);
		if (rc == 0)
			fail_msg("px_handle_events(px, -1) returned 0 while "
				 "waiting for %s", what);
		if (rc < 0)
			fail_msg("px_handle_events(px, -1) returned %d (%s) "
				 "while waiting for %s", rc, px_strerror(rc),
				 what);
	}
}

static void storm_pump_once(h_fx *f, const char *what)
{
	int rc = px_handle_events(f->px, -1);
	if (rc <= 0)
		fail_msg("px_handle_events(px, -1) returned %d while waiting "
			 "for %s%s", rc, what,
			 rc == 0 ? " (0: gave up without a timeout)" : "");
}

/* Forget a tracked descriptor that something else closed. */
static void forget_fd(h_fx *f, int fd)
{
	for (int i = 0; i < f->nfds; i++)
		if (f->fds[i] == fd)
			f->fds[i] = -1;
}

/* SIGUSR2 at 5 kHz (handler without SA_RESTART) hits the test's own
 * calls, one thread: px_handle_events(px, 100) with nothing to do
 * returns 0 after its 100 ms, not early; px_handle_events(px, -1) never
 * returns 0, and a 150 ms timer fires on time; 4 rounds of 32 file
 * reads complete with their bytes; px_close of a descriptor with a read
 * pending gives ECANCELED and the close's callback; px_destroy with 200
 * reads pending calls each back once (h_teardown's check). */
static void eintr_storm_waits(void **state)
{
	h_fx *f = *state;
	storm_start(200000); /* 5 kHz */
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = h_now_ns();
		int rc = px_handle_events(f->px, 100);
		uint64_t ms = (h_now_ns() - t0) / 1000000u;
		if (rc != 0 || ms < 95)
			fail_msg("px_handle_events(px, 100) with nothing to do "
				 "returned %d after %llu ms", rc,
				 (unsigned long long)ms);
	}
	int sv[2];
	char *rbuf;
	h_rec *rd = h_start_pending_read(f, sv, 16, &rbuf);
	atomic_store(&g_storm_calls, 0);
	uint64_t t0 = h_now_ns();
	assert_true(px_timer_start(f->px, 150000000u, storm_count_cb, NULL) > 0);
	storm_pump(f, &g_storm_calls, 1, "a 150 ms timer");
	uint64_t ms = (h_now_ns() - t0) / 1000000u;
	if (ms < 145)
		fail_msg("a 150 ms timer fired after %llu ms",
			 (unsigned long long)ms);

	char path[] = "/tmp/px_fault_eintr_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	h_track(f, fd);
	enum { NR = 32, BLK = 4096 };
	uint8_t *fbuf = h_alloc(f, NR * BLK), *dst = h_alloc(f, NR * BLK);
	h_rec *recs = h_alloc(f, NR * sizeof *recs);
	h_pattern(fbuf, NR * BLK, 7, 0);
	assert_int_equal(pwrite(fd, fbuf, NR * BLK, 0), NR * BLK);
	for (int round = 0; round < 4; round++) {
		h_rec *r[NR];
		memset(dst, 0, NR * BLK);
		memset(recs, 0, NR * sizeof *recs);
		for (int i = 0; i < NR; i++) {
			r[i] = &recs[i];
			assert_int_equal(px_read_file(f->px, fd, dst + i * BLK,
						      BLK, (uint64_t)i * BLK,
						      h_rec_cb, r[i]), 0);
		}
		for (int i = 0; i < NR; i++)
			while (!h_rec_done(r[i]))
				storm_pump_once(f, "file reads");
		for (int i = 0; i < NR; i++) {
			assert_once(r[i], PX_OP_READ_FILE, fd);
			assert_int_equal(r[i]->c.error, 0);
			assert_int_equal(r[i]->c.bytes, BLK);
		}
		assert_memory_equal(dst, fbuf, NR * BLK);
	}

	h_rec *cl = h_rec_new(f);
	assert_int_equal(px_close(f->px, sv[1], h_rec_cb, cl), 0);
	while (!h_rec_done(cl) || !h_rec_done(rd))
		storm_pump_once(f, "px_close");
	forget_fd(f, sv[1]);
	assert_once(rd, PX_OP_READ_STREAM, sv[1]);
	expect_error(rd, ECANCELED, "a read ended by px_close");
	assert_once(cl, PX_OP_CLOSE, sv[1]);
	assert_int_equal(cl->c.error, 0);

	int pv[2];
	h_socketpair(f, pv);
	char *b = h_alloc(f, 200);
	for (int i = 0; i < 200; i++)
		assert_int_equal(px_read_stream(f->px, pv[0], b + i, 1,
						storm_count_cb, NULL), 0);
	atomic_store(&g_storm_calls, 0);
	assert_int_equal(px_destroy(f->px), 0);
	f->px = NULL;
	storm_stop();
	assert_int_equal(atomic_load(&g_storm_calls), 200);
}

/* The mixed storm: chains of accepts and connects, datagrams and file
 * writes read back, each link started from the callback of the last. */
static struct {
	px_proactor *px;
	atomic_int stopping;
	atomic_long starts, done, errors, first_error;
	atomic_long rounds[3];          /* accept+connect, dgram, file */
	atomic_long cstarts[3], cdone[3];  /* per chain */
	atomic_int pair_left;           /* the accept and connect of a round */
	int lfd, cfd, afd;
	struct sockaddr_in addr;
	int dg[2];
	char dbuf[8];
	int ffd;
	char wbuf[512], rbuf[512];
} g_mix;

static void mix_done(const px_completion *c, bool ok, int k)
{
	atomic_fetch_add(&g_mix.cdone[k], 1);
	if (!ok || c->error) {
		atomic_fetch_add(&g_mix.errors, 1);
		long none = 0;
		atomic_compare_exchange_strong(&g_mix.first_error, &none,
					       (long)c->op * 1000 + c->error);
	}
	atomic_fetch_add(&g_mix.done, 1);
}

/* Counted before the start (mix_pre), so that the count of started
 * operations never lags behind a completion that came first. */
static void mix_pre(int k)
{
	atomic_fetch_add(&g_mix.starts, 1);
	atomic_fetch_add(&g_mix.cstarts[k], 1);
}

static bool mix_start(int k, int rc)
{
	if (rc == 0)
		return true;
	atomic_fetch_sub(&g_mix.starts, 1);
	atomic_fetch_sub(&g_mix.cstarts[k], 1);
	atomic_fetch_add(&g_mix.errors, 1);
	long none = 0;
	atomic_compare_exchange_strong(&g_mix.first_error, &none, 900000 - rc);
	return false;
}

static void mix_pair_cb(const px_completion *c);

static void mix_pair_round(void)
{
	g_mix.cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (g_mix.cfd < 0) {
		atomic_fetch_add(&g_mix.errors, 1);
		return;
	}
	atomic_store(&g_mix.pair_left, 2);
	mix_pre(0);
	if (px_accept(g_mix.px, g_mix.lfd, mix_pair_cb, NULL) != 0) {
		atomic_fetch_sub(&g_mix.starts, 1);
		atomic_fetch_sub(&g_mix.cstarts[0], 1);
		atomic_fetch_add(&g_mix.errors, 1);
		close(g_mix.cfd);
		return;
	}
	mix_pre(0);
	mix_start(0, px_connect(g_mix.px, g_mix.cfd,
			     (struct sockaddr *)&g_mix.addr,
			     sizeof g_mix.addr, mix_pair_cb, NULL));
}

/* Each callback counts its operation done last, after it started the
 * next link: the started count then never equals the completed one
 * while a chain still moves, so the test's drain cannot end between a
 * completion and the start it makes. */
static void mix_pair_cb(const px_completion *c)
{
	if (c->op == PX_OP_ACCEPT && !c->error)
		g_mix.afd = c->new_fd;
	if (atomic_fetch_sub(&g_mix.pair_left, 1) == 1) {
		close(g_mix.cfd);
		close(g_mix.afd);
		atomic_fetch_add(&g_mix.rounds[0], 1);
		if (!atomic_load(&g_mix.stopping))
			mix_pair_round();
	}
	mix_done(c, true, 0);
}

static void mix_dgram_cb(const px_completion *c)
{
	bool ok = c->op != PX_OP_READ_DGRAM || c->bytes == 1;
	if (c->op == PX_OP_READ_DGRAM) {
		atomic_fetch_add(&g_mix.rounds[1], 1);
		if (!atomic_load(&g_mix.stopping)) {
			mix_pre(1);
			if (mix_start(1, px_read_dgram(g_mix.px, g_mix.dg[0],
						       g_mix.dbuf,
						       sizeof g_mix.dbuf,
						       mix_dgram_cb, NULL))) {
				mix_pre(1);
				mix_start(1, px_write_dgram(g_mix.px,
							    g_mix.dg[1], "d", 1,
							    NULL, 0,
							    mix_dgram_cb,
							    NULL));
			}
		}
	}
	mix_done(c, ok, 1);
}

static void mix_file_cb(const px_completion *c)
{
	long n = atomic_load(&g_mix.rounds[2]);
	if (c->op == PX_OP_WRITE_FILE) {
		mix_pre(2);
		mix_start(2, px_read_file(g_mix.px, g_mix.ffd, g_mix.rbuf,
					  sizeof g_mix.rbuf, c->offset,
					  mix_file_cb, NULL));
		mix_done(c, c->bytes == sizeof g_mix.wbuf, 2);
		return;
	}
	bool ok = c->bytes == sizeof g_mix.rbuf &&
		  !memcmp(g_mix.rbuf, g_mix.wbuf, sizeof g_mix.rbuf);
	atomic_fetch_add(&g_mix.rounds[2], 1);
	if (!atomic_load(&g_mix.stopping)) {
		memset(g_mix.wbuf, 'a' + (int)(n % 26), sizeof g_mix.wbuf);
		mix_pre(2);
		mix_start(2, px_write_file(g_mix.px, g_mix.ffd, g_mix.wbuf,
					   sizeof g_mix.wbuf,
					   (uint64_t)(n % 64) * sizeof g_mix.wbuf,
					   mix_file_cb, NULL));
	}
	mix_done(c, ok, 2);
}

/* SIGALRM from setitimer every 100 us, handled with SA_RESTART, and
 * SIGCHLD from a child forked and reaped every 20 ms, while chains of
 * accept+connect, datagrams and file write-then-read run for 80 ms.
 * The loop threads block every signal, so each signal lands on the test
 * thread, itself in px_handle_events(px, 20): no operation fails or
 * completes twice, every chain moves, and a return of 0 (nothing to do)
 * comes only after the 20 ms. */
static void eintr_storm_restart_mixed(void **state)
{
	h_fx *f = *state;
	memset(&g_mix, 0, sizeof g_mix);
	g_mix.px = f->px;
	g_mix.lfd = h_track(f, socket(AF_INET, SOCK_STREAM, 0));
	g_mix.addr.sin_family = AF_INET;
	g_mix.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof g_mix.addr;
	assert_int_equal(bind(g_mix.lfd, (struct sockaddr *)&g_mix.addr, al), 0);
	assert_int_equal(getsockname(g_mix.lfd, (struct sockaddr *)&g_mix.addr,
				     &al), 0);
	assert_int_equal(listen(g_mix.lfd, 16), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, g_mix.dg), 0);
	h_track(f, g_mix.dg[0]);
	h_track(f, g_mix.dg[1]);
	char path[] = "/tmp/px_fault_mix_XXXXXX";
	g_mix.ffd = h_track(f, mkstemp(path));
	assert_true(g_mix.ffd >= 0);
	unlink(path);

	sigset_t all, old_mask;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old_mask);
	h_loops_start(f, 2, true);
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	struct sigaction sa, old_alrm, old_chld;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_storm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGALRM, &sa, &old_alrm), 0);
	assert_int_equal(sigaction(SIGCHLD, &sa, &old_chld), 0);
	struct itimerval it = {{0, 100}, {0, 100}}, off, old_it;
	memset(&off, 0, sizeof off);
	assert_int_equal(setitimer(ITIMER_REAL, &it, &old_it), 0);

	mix_pair_round();
	mix_pre(1);
	if (mix_start(1, px_read_dgram(f->px, g_mix.dg[0], g_mix.dbuf,
				    sizeof g_mix.dbuf, mix_dgram_cb, NULL))) {
		mix_pre(1);
		mix_start(1, px_write_dgram(f->px, g_mix.dg[1], "d", 1, NULL, 0,
					 mix_dgram_cb, NULL));
	}
	memset(g_mix.wbuf, 'a', sizeof g_mix.wbuf);
	mix_pre(2);
	mix_start(2, px_write_file(f->px, g_mix.ffd, g_mix.wbuf, sizeof g_mix.wbuf,
				0, mix_file_cb, NULL));

	int early = 0, rc = 0;
	uint64_t t0 = h_now_ms(), next_fork = t0;
	for (;;) {
		uint64_t now = h_now_ms();
		if (now >= t0 + 80)
			atomic_store(&g_mix.stopping, 1);  /* the chains end */
		if ((atomic_load(&g_mix.stopping) &&
		     atomic_load(&g_mix.done) == atomic_load(&g_mix.starts)) ||
		    now > t0 + 3000)
			break;
		if (h_now_ms() >= next_fork) {
			pid_t pid = fork();
			if (pid == 0)
				_exit(0);
			next_fork += 20;
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		uint64_t c0 = h_now_ns();
		rc = px_handle_events(f->px, 20);
		if (rc < 0)
			break;
		if (rc == 0 && h_now_ns() - c0 < 19000000u)
			early++;
	}
	setitimer(ITIMER_REAL, &old_it, NULL);
	/* SIG_IGN first discards an instance still pending (its default
	 * would end the process). */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGALRM, &old_alrm, NULL);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	sigaction(SIGCHLD, &old_chld, NULL);
	h_loops_stop();
	print_message("storm: %ld operations; rounds: %ld accept+connect, %ld "
		      "datagram, %ld file\n", atomic_load(&g_mix.starts),
		      atomic_load(&g_mix.rounds[0]),
		      atomic_load(&g_mix.rounds[1]),
		      atomic_load(&g_mix.rounds[2]));
	if (rc < 0)
		fail_msg("px_handle_events(px, 20) returned %d (%s)", rc,
			 px_strerror(rc));
	if (atomic_load(&g_mix.errors))
		fail_msg("%ld operations failed or were refused (first: op %ld, "
			 "error %ld)", atomic_load(&g_mix.errors),
			 atomic_load(&g_mix.first_error) / 1000,
			 atomic_load(&g_mix.first_error) % 1000);
	if (atomic_load(&g_mix.done) != atomic_load(&g_mix.starts))
		fail_msg("%ld operations started, %ld completions after %llu ms "
			 "(accept+connect %ld/%ld, datagram %ld/%ld, file "
			 "%ld/%ld)", atomic_load(&g_mix.starts),
			 atomic_load(&g_mix.done),
			 (unsigned long long)(h_now_ms() - t0),
			 atomic_load(&g_mix.cdone[0]),
			 atomic_load(&g_mix.cstarts[0]),
			 atomic_load(&g_mix.cdone[1]),
			 atomic_load(&g_mix.cstarts[1]),
			 atomic_load(&g_mix.cdone[2]),
			 atomic_load(&g_mix.cstarts[2]));
	for (int i = 0; i < 3; i++)
		if (!atomic_load(&g_mix.rounds[i]))
			fail_msg("chain %d made no round under the signals", i);
	if (early)
		fail_msg("px_handle_events(px, 20) returned 0 before its 20 ms "
			 "%d times", early);
}

static void nop_wake(const px_completion *c)
{
	(void)c;
}

/* interrupt=signal only: the application sets the interrupt's signal to
 * SIG_IGN, then to SIG_DFL (ignored by default for SIGURG), after
 * px_create, which px_create(3) asks it not to do.  A signal that finds
 * the leader inside its wait is then discarded by the kernel, and a post
 * from another thread reaches a leader in px_handle_events(px, -1) only
 * when its wait runs out: as the manual says, within about a second (2 s
 * allowed), never a hang.  The library's handler is put back after. */
static void signal_interrupt_disposition_changed(void **state)
{
	h_fx *f = *state;
	const char *name = px_engine_name(f->px);
	if (!strstr(name, "interrupt=signal")) {
		print_message("no signal interrupt in %s; skipped\n", name);
		skip();
	}
	const char *sn = strstr(name, " signal=");
	int signo = sn ? atoi(sn + 8) : SIGURG;
	struct sigaction ours, sa;
	assert_int_equal(sigaction(signo, NULL, &ours), 0);
	int sv[2];
	char *rbuf;
	h_rec *rd = h_start_pending_read(f, sv, 16, &rbuf);
	h_loops_start_ms(f, 1, true, -1);
	h_sleep_ms(50);
	uint64_t worst = 0;
	int late = 0;
	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 6; i++) {
		sa.sa_handler = i < 3 ? SIG_IGN : SIG_DFL;
		sigaction(signo, &sa, NULL);
		h_sleep_ms(30);
		h_rec *r = h_rec_new(f);
		uint64_t t0 = h_now_ms();
		assert_int_equal(px_post(f->px, h_rec_cb, r), 0);
		/* About a second at most on a quiet machine (974 ms
		 * seen); the rest is room for a loaded one.  What it
		 * tells apart is a post that never runs. */
		uint64_t dl = h_deadline(4000);
		while (!h_rec_done(r) && h_now_ms() < dl)
			h_sleep_ms(1);
		uint64_t ms = h_now_ms() - t0;
		worst = ms > worst ? ms : worst;
		late += !h_rec_done(r);
	}
	sigaction(signo, &ours, NULL);
	h_loops_stop_waking(f, nop_wake);
	print_message("signal %d ignored by the application: posts ran "
		      "after at most %llu ms\n", signo,
		      (unsigned long long)worst);
	if (late)
		fail_msg("%d of 6 posts did not run within 4 s with signal "
			 "%d ignored", late, signo);
	assert_int_equal(atomic_load(&rd->calls), 0);
}

/* interrupt=signal only: proactors on one interrupt signal made and
 * destroyed at once from four threads.  The handler is the process's,
 * installed by the first proactor on the signal and given back by the
 * last, so a make in one thread races the give-back of another.  The
 * signal is SIGUSR1, whose default action ends the process: should the
 * give-back leave the default in place while another proactor uses the
 * signal, that proactor's next interrupt kills the test.  Each proactor
 * has a loop thread in px_handle_events(px, -1), woken by posts from its
 * own worker: each post runs (within 2 s; an interrupt lost another way
 * would wait for the wait's end, about a second), and the handler is not
 * the default while the proactor lives; after the last, SIGUSR1 is at its
 * default again. */
enum { SIGC_THREADS = 4, SIGC_ROUNDS = 25, SIGC_POSTS = 3 };

static struct {
	px_config cfg;
	atomic_int rounds, late, dfl, create_err, other;
} g_sigc;

static void sigc_post_cb(const px_completion *c)
{
	atomic_fetch_add((atomic_int *)c->user, 1);
}

static void *sigc_loop(void *arg)
{
	px_proactor *px = arg;
	while (px_handle_events(px, -1) >= 0)
		;
	return NULL;
}

static void *sigc_worker(void *arg)
{
	(void)arg;
	for (int r = 0; r < SIGC_ROUNDS; r++) {
		px_proactor *px;
		char err[256];
		int rc = px_create_config(&px, &g_sigc.cfg, err, sizeof err);
		if (rc < 0) {
			atomic_store(&g_sigc.create_err, rc);
			return NULL;
		}
		pthread_t t;
		if (pthread_create(&t, NULL, sigc_loop, px) != 0) {
			atomic_fetch_add(&g_sigc.other, 1);
			px_destroy(px);
			return NULL;
		}
		atomic_int ran = 0;
		for (int i = 0; i < SIGC_POSTS; i++) {
			h_sleep_ms(1);
			if (px_post(px, sigc_post_cb, &ran) != 0) {
				atomic_fetch_add(&g_sigc.other, 1);
				continue;
			}
			uint64_t dl = h_deadline(2000);
			while (atomic_load(&ran) < i + 1 && h_now_ms() < dl)
				usleep(100);
			if (atomic_load(&ran) < i + 1)
				atomic_fetch_add(&g_sigc.late, 1);
		}
		struct sigaction sa;
		if (sigaction(SIGUSR1, NULL, &sa) == 0 &&
		    sa.sa_handler == SIG_DFL)
			atomic_fetch_add(&g_sigc.dfl, 1);
		px_stop(px);
		pthread_join(t, NULL);
		if (px_destroy(px) != 0)
			atomic_fetch_add(&g_sigc.other, 1);
		atomic_fetch_add(&g_sigc.rounds, 1);
	}
	return NULL;
}

static void signal_interrupt_shared_by_threads(void **state)
{
	h_fx *f = *state;
	const char *name = px_engine_name(f->px);
	if (!strstr(name, "interrupt=signal")) {
		print_message("no signal interrupt in %s; skipped\n", name);
		skip();
	}
	struct sigaction sa;
	assert_int_equal(sigaction(SIGUSR1, NULL, &sa), 0);
	if (sa.sa_handler != SIG_DFL) {
		print_message("SIGUSR1 is not at its default here; skipped\n");
		skip();
	}
	memset(&g_sigc, 0, sizeof g_sigc);
	g_sigc.cfg = h_cfg;
	g_sigc.cfg.flags |= PX_CF_NO_ENV;
	if (!strcmp(g_sigc.cfg.primary.interrupt, "signal"))
		g_sigc.cfg.primary.intr_signo = SIGUSR1;
	if (!strcmp(g_sigc.cfg.secondary.interrupt, "signal"))
		g_sigc.cfg.secondary.intr_signo = SIGUSR1;
	pthread_t w[SIGC_THREADS];
	uint64_t t0 = h_now_ms();
	for (int i = 0; i < SIGC_THREADS; i++)
		assert_int_equal(pthread_create(&w[i], NULL, sigc_worker, NULL),
				 0);
	for (int i = 0; i < SIGC_THREADS; i++)
		pthread_join(w[i], NULL);
	print_message("%d proactors on SIGUSR1 made and destroyed by %d "
		      "threads in %llu ms\n", atomic_load(&g_sigc.rounds),
		      SIGC_THREADS, (unsigned long long)(h_now_ms() - t0));
	if (atomic_load(&g_sigc.create_err))
		fail_msg("px_create_config on SIGUSR1 failed: %d (%s)",
			 atomic_load(&g_sigc.create_err),
			 px_strerror(atomic_load(&g_sigc.create_err)));
	assert_int_equal(atomic_load(&g_sigc.other), 0);
	if (atomic_load(&g_sigc.dfl))
		fail_msg("%d times SIGUSR1 was at SIG_DFL while a proactor "
			 "used it", atomic_load(&g_sigc.dfl));
	if (atomic_load(&g_sigc.late))
		fail_msg("%d posts did not run within 2 s",
			 atomic_load(&g_sigc.late));
	assert_int_equal(atomic_load(&g_sigc.rounds),
			 SIGC_THREADS * SIGC_ROUNDS);
	assert_int_equal(sigaction(SIGUSR1, NULL, &sa), 0);
	if (sa.sa_handler != SIG_DFL)
		fail_msg("SIGUSR1 not given back to its default after the last "
			 "proactor on it");
}

/* ------------------------------------------------------------------ */
/* Tiny max_aio under load                                              */
/* ------------------------------------------------------------------ */

/*
 * Echo with every operation through max_aio slots would deadlock by design
 * (reads waiting for data hold every slot while the writes that would
 * answer them sit deferred: see px_processor_config.max_aio).  Here the
 * peers are plain threads, so every proactor operation can finish on its
 * own: per session a chain of px_write_stream_all blocks whose bytes a
 * plain thread reads and checks, and a chain of reads of bytes a plain
 * thread writes.  Two loop threads; reads, writes and cancels all queue
 * for 1, 2 or 3 slots.
 */
enum { L_SESS = 8, L_TOTAL = 512 << 10, L_BLOCK = 8192 };

typedef struct lsess {
	int pw, pr;               /* proactor writes pw / reads pr */
	int qr, qw;               /* plain peer: reads qr / writes qw */
	uint32_t seed;
	uint8_t wbuf[L_BLOCK], rbuf[L_BLOCK];
	uint64_t woff, roff;      /* proactor side */
	uint64_t qroff, qwoff;    /* plain side */
	atomic_int wbusy, rbusy, error, mismatch;
	atomic_int wdone, rdone;
} lsess;

static atomic_long g_l_starts, g_l_done;

static void l_fail(lsess *s, int err)
{
	int zero = 0;
	atomic_compare_exchange_strong(&s->error, &zero, err ? err : EIO);
}

static void l_write_cb(const px_completion *c);
static void l_read_cb(const px_completion *c);

static void l_write(px_proactor *px, lsess *s)
{
	size_t len = L_BLOCK - (size_t)(s->woff % 3) * 1000;
	if (len > L_TOTAL - s->woff)
		len = L_TOTAL - s->woff;
	h_pattern(s->wbuf, len, s->seed, s->woff);
	atomic_store(&s->wbusy, 1);
	int rc = px_write_stream_all(px, s->pw, s->wbuf, len, l_write_cb, s);
	if (rc) {
		atomic_store(&s->wbusy, 0);
		l_fail(s, -rc);
	} else {
		atomic_fetch_add(&g_l_starts, 1);
	}
}

static void l_write_cb(const px_completion *c)
{
	lsess *s = c->user;
	atomic_fetch_add(&g_l_done, 1);
	if (!atomic_exchange(&s->wbusy, 0))
		l_fail(s, EALREADY);
	if (c->error || c->bytes != c->len) {
		l_fail(s, c->error);
		return;
	}
	s->woff += c->bytes;
	if (s->woff < L_TOTAL)
		l_write(c->proactor, s);
	else
		atomic_store(&s->wdone, 1);
}

static void l_read(px_proactor *px, lsess *s)
{
	atomic_store(&s->rbusy, 1);
	int rc = px_read_stream(px, s->pr, s->rbuf,
				L_BLOCK - (size_t)(s->roff % 5) * 1000,
				l_read_cb, s);
	if (rc) {
		atomic_store(&s->rbusy, 0);
		l_fail(s, -rc);
	} else {
		atomic_fetch_add(&g_l_starts, 1);
	}
}

static void l_read_cb(const px_completion *c)
{
	lsess *s = c->user;
	uint8_t want[L_BLOCK];
	atomic_fetch_add(&g_l_done, 1);
	if (!atomic_exchange(&s->rbusy, 0))
		l_fail(s, EALREADY);
	if (c->error || c->bytes == 0) {
		l_fail(s, c->error ? c->error : EPIPE);
		return;
	}
	h_pattern(want, c->bytes, s->seed ^ 0xffu, s->roff);
	if (memcmp(want, c->buf, c->bytes))
		atomic_store(&s->mismatch, 1);
	s->roff += c->bytes;
	if (s->roff < L_TOTAL)
		l_read(c->proactor, s);
	else
		atomic_store(&s->rdone, 1);
}

/* The plain peer of every session: poll, write the pattern the proactor
 * reads, read and check what it writes. */
static void l_peer(lsess *ss, uint64_t deadline)
{
	struct pollfd p[2 * L_SESS];
	uint8_t buf[L_BLOCK], want[L_BLOCK];
	for (;;) {
		int n = 0;
		for (int i = 0; i < L_SESS; i++) {
			lsess *s = &ss[i];
			if (s->qwoff < L_TOTAL)
				p[n++] = (struct pollfd){.fd = s->qw, .events = POLLOUT};
			if (s->qroff < L_TOTAL)
				p[n++] = (struct pollfd){.fd = s->qr, .events = POLLIN};
		}
		if (!n || h_now_ms() > deadline)
			return;
		if (poll(p, (nfds_t)n, 100) < 0 && errno != EINTR)
			fail_msg("poll: %s", strerror(errno));
		for (int k = 0; k < n; k++) {
			if (!p[k].revents)
				continue;
			for (int i = 0; i < L_SESS; i++) {
				lsess *s = &ss[i];
				if (p[k].fd == s->qw) {
					size_t len = L_BLOCK;
					if (len > L_TOTAL - s->qwoff)
						len = L_TOTAL - s->qwoff;
					h_pattern(buf, len, s->seed ^ 0xffu, s->qwoff);
					ssize_t w = send(s->qw, buf, len, MSG_DONTWAIT);
					if (w > 0)
						s->qwoff += (uint64_t)w;
				} else if (p[k].fd == s->qr) {
					ssize_t r = recv(s->qr, buf, sizeof buf,
							 MSG_DONTWAIT);
					if (r > 0) {
						h_pattern(want, (size_t)r, s->seed,
							  s->qroff);
						if (memcmp(want, buf, (size_t)r))
							atomic_store(&s->mismatch, 2);
						s->qroff += (uint64_t)r;
					}
				}
			}
		}
	}
}

static void max_aio_load(void **state)
{
	h_fx *f = *state;
	lsess *ss = h_alloc(f, sizeof(lsess) * L_SESS);
	atomic_store(&g_l_starts, 0);
	atomic_store(&g_l_done, 0);
	for (int i = 0; i < L_SESS; i++) {
		int a[2], b[2];
		h_socketpair(f, a);
		h_socketpair(f, b);
		ss[i].pw = a[0];
		ss[i].qr = a[1];
		ss[i].pr = b[0];
		ss[i].qw = b[1];
		ss[i].seed = 0x10adu * (uint32_t)(i + 1);
	}
	h_loops_start(f, 2, true);
	for (int i = 0; i < L_SESS; i++) {
		l_read(f->px, &ss[i]);
		l_write(f->px, &ss[i]);
	}
	l_peer(ss, h_deadline(30000));
	uint64_t dl = h_deadline(5000);
	while (atomic_load(&g_l_done) < atomic_load(&g_l_starts) &&
	       h_now_ms() < dl)
		h_sleep_ms(2);
	h_loops_stop();
	h_settle(f, 20);
	for (int i = 0; i < L_SESS; i++) {
		lsess *s = &ss[i];
		if (atomic_load(&s->error))
			fail_msg("session %d: error %d (%s)", i,
				 atomic_load(&s->error),
				 strerror(atomic_load(&s->error)));
		if (atomic_load(&s->mismatch))
			fail_msg("session %d: bytes out of order, lost or "
				 "duplicated (%s side)", i,
				 atomic_load(&s->mismatch) == 1 ? "proactor read"
								: "peer read");
		if (s->woff != L_TOTAL || s->roff != L_TOTAL ||
		    s->qroff != L_TOTAL || s->qwoff != L_TOTAL)
			fail_msg("session %d unfinished: proactor wrote %llu "
				 "read %llu, peer read %llu wrote %llu of %d", i,
				 (unsigned long long)s->woff,
				 (unsigned long long)s->roff,
				 (unsigned long long)s->qroff,
				 (unsigned long long)s->qwoff, L_TOTAL);
	}
	if (atomic_load(&g_l_done) != atomic_load(&g_l_starts))
		fail_msg("%ld operations started, %ld completions",
			 atomic_load(&g_l_starts), atomic_load(&g_l_done));
}

static void max_aio_1_load(void **state) { max_aio_load(state); }
static void max_aio_2_load(void **state) { max_aio_load(state); }
static void max_aio_3_load(void **state) { max_aio_load(state); }

static int setup_aio2(void **state) { return setup_max_aio(state, 2); }
static int setup_aio3(void **state) { return setup_max_aio(state, 3); }

/* ------------------------------------------------------------------ */
/* Thousands pending at once through a tiny max_aio                     */
/* ------------------------------------------------------------------ */

/* max_aio 1, 2, 3: 48 socketpairs with 8 writes and 8 reads of 32 bytes
 * each (every write started before the read that takes it, so nothing
 * waits on a deferred operation), 600 file writes at distinct offsets,
 * and posts and timers among them, all started before two loop threads
 * run: each completes once, each socket's reads hold its writes' bytes in
 * start order, and the file holds every write. */
enum { MX_PAIRS = 48, MX_PER = 8, MX_LEN = 32, MX_FILE = 600, MX_EXTRA = 96 };

static uint8_t mx_byte(int pair, size_t pos)
{
	return (uint8_t)(pair * 31 + pos * 7 + pos / 251);
}

static void max_aio_mixed_thousands(void **state)
{
	h_fx *f = *state;
	enum { NREC = MX_PAIRS * MX_PER * 2 + MX_FILE + MX_EXTRA * 2 };
	h_rec *recs = h_alloc(f, NREC * sizeof(h_rec));
	uint8_t *wbuf = h_alloc(f, MX_PAIRS * MX_PER * MX_LEN);
	uint8_t *rbuf = h_alloc(f, MX_PAIRS * MX_PER * MX_LEN);
	uint8_t *fbuf = h_alloc(f, MX_FILE * MX_LEN);
	int (*sv)[2] = h_alloc(f, MX_PAIRS * sizeof *sv);
	h_rec *rd[MX_PAIRS][MX_PER];
	int nrec = 0, started = 0;
	char path[] = "/tmp/px-fault-mixed-XXXXXX";
	int file = h_track(f, mkostemp(path, O_CLOEXEC));
	assert_true(file >= 0);
	unlink(path);
	for (int i = 0; i < MX_PAIRS; i++)
		h_socketpair(f, sv[i]);
	for (size_t b = 0; b < (size_t)MX_PAIRS * MX_PER * MX_LEN; b++)
		wbuf[b] = mx_byte((int)(b / (MX_PER * MX_LEN)),
				  b % (MX_PER * MX_LEN));
	for (size_t b = 0; b < (size_t)MX_FILE * MX_LEN; b++)
		fbuf[b] = (uint8_t)(b * 13 + 5);
	for (int k = 0; k < MX_FILE; k++) {
		/* (-EOPNOTSUPP: no processor of this engine does files) */
		int rc = px_write_file(f->px, file, fbuf + k * MX_LEN, MX_LEN,
				       (uint64_t)k * MX_LEN, h_rec_cb,
				       &recs[nrec]);
		if (rc == -EOPNOTSUPP)
			break;
		assert_int_equal(rc, 0);
		nrec++;
		started++;
	}
	int nfile = started;
	for (int j = 0; j < MX_PER; j++) {
		for (int i = 0; i < MX_PAIRS; i++) {
			size_t at = ((size_t)i * MX_PER + j) * MX_LEN;
			assert_int_equal(px_write_stream_all(f->px, sv[i][0],
							     wbuf + at, MX_LEN,
							     h_rec_cb,
							     &recs[nrec++]), 0);
			rd[i][j] = &recs[nrec++];
			assert_int_equal(px_read_stream(f->px, sv[i][1],
							rbuf + at, MX_LEN,
							h_rec_cb, rd[i][j]), 0);
			started += 2;
			if ((i + j) % 4 == 0) {
				assert_int_equal(px_post(f->px, h_rec_cb,
							 &recs[nrec++]), 0);
				assert_true(px_timer_start(f->px,
							   (uint64_t)(i % 10) * 1000000,
							   h_rec_cb,
							   &recs[nrec++]) > 0);
				started += 2;
			}
		}
	}
	assert_true(nrec <= NREC);
	h_loops_start(f, 2, false);
	uint64_t dl = h_deadline(10000);
	for (int k = 0; k < nrec; k++)
		while (!h_rec_done(&recs[k]) && h_now_ms() < dl)
			h_sleep_ms(1);
	h_loops_stop();
	int missing = 0;
	for (int k = 0; k < nrec; k++)
		if (!h_rec_done(&recs[k]))
			missing++;
	if (missing)
		fail_msg("%d of %d operations not completed within 10 s", missing,
			 started);
	for (int k = 0; k < nrec; k++) {
		if (atomic_load(&recs[k].calls) != 1)
			fail_msg("operation %d (%s): %d callbacks", k,
				 px_op_name(recs[k].c.op),
				 atomic_load(&recs[k].calls));
		if (recs[k].c.error)
			fail_msg("operation %d (%s): %s", k,
				 px_op_name(recs[k].c.op),
				 px_strerror(-recs[k].c.error));
	}
	/* A read may take less than 32 bytes: the reads of a socket, in
	 * start order, hold a prefix of its stream, the rest still in the
	 * socket. */
	for (int i = 0; i < MX_PAIRS; i++) {
		uint8_t got[MX_PER * MX_LEN];
		size_t pos = 0;
		for (int j = 0; j < MX_PER; j++) {
			size_t at = ((size_t)i * MX_PER + j) * MX_LEN;
			memcpy(got + pos, rbuf + at, rd[i][j]->c.bytes);
			pos += rd[i][j]->c.bytes;
		}
		ssize_t more = recv(sv[i][1], got + pos, sizeof got - pos,
				    MSG_DONTWAIT);
		if (more > 0)
			pos += (size_t)more;
		if (pos != sizeof got ||
		    memcmp(got, wbuf + (size_t)i * MX_PER * MX_LEN, pos))
			fail_msg("socket %d: its reads and what was left hold "
				 "%zu bytes, or not its writes' bytes in order",
				 i, pos);
	}
	if (nfile) {
		uint8_t *back = h_alloc(f, (size_t)nfile * MX_LEN);
		assert_int_equal(pread(file, back, (size_t)nfile * MX_LEN, 0),
				 nfile * MX_LEN);
		assert_memory_equal(back, fbuf, (size_t)nfile * MX_LEN);
	}
	print_message("%d operations started at once\n", started);
}

static void max_aio_1_mixed_thousands(void **state)
{
	max_aio_mixed_thousands(state);
}
static void max_aio_2_mixed_thousands(void **state)
{
	max_aio_mixed_thousands(state);
}
static void max_aio_3_mixed_thousands(void **state)
{
	max_aio_mixed_thousands(state);
}

/* ------------------------------------------------------------------ */
/* Accept at the descriptor limit                                       */
/* ------------------------------------------------------------------ */

static void accept_at_fd_limit(void **state)
{
	h_fx *f = *state;
	struct sockaddr_in la;
	int l = h_bound_socket(f, SOCK_STREAM, &la);
	assert_int_equal(listen(l, 8), 0);
	int c1 = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	int c2 = h_track(f, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	assert_int_equal(connect(c1, (struct sockaddr *)&la, sizeof la), 0);
	assert_int_equal(connect(c2, (struct sockaddr *)&la, sizeof la), 0);

	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	/* Fill every number below a low limit. */
	enum { LOW = 256, MAXFILL = LOW };
	int *fill = h_alloc(f, sizeof(int) * MAXFILL);
	int nfill = 0;
	low = old;
	low.rlim_cur = LOW;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	int fd;
	while (nfill < MAXFILL && (fd = dup(l)) >= 0)
		fill[nfill++] = fd;
	int full_errno = errno;
	h_rec *r1 = h_rec_new(f), *r2 = h_rec_new(f);
	int rc = px_accept(f->px, l, h_rec_cb, r1);
	if (rc == 0)
		h_wait_rec(f, r1, 5000, "an accept with no descriptor free");
	/* Free the descriptors again before any assertion. */
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	setrlimit(RLIMIT_NOFILE, &old);
	assert_int_equal(full_errno, EMFILE);
	assert_int_equal(rc, 0);
	assert_once(r1, PX_OP_ACCEPT, l);
	if (r1->c.error != EMFILE && r1->c.error != ENFILE)
		fail_msg("an accept at the descriptor limit completed with "
			 "error %d (%s), new_fd %d; expected EMFILE or ENFILE",
			 r1->c.error, strerror(r1->c.error), r1->c.new_fd);
	assert_int_equal(r1->c.new_fd, -1);
	/* Descriptors free again: the connection waiting is accepted. */
	assert_int_equal(px_accept(f->px, l, h_rec_cb, r2), 0);
	h_wait_rec(f, r2, 5000, "an accept after descriptors were freed");
	h_settle(f, 20);
	assert_once(r2, PX_OP_ACCEPT, l);
	assert_int_equal(r2->c.error, 0);
	assert_true(r2->c.new_fd >= 0);
	h_track(f, r2->c.new_fd);
	assert_int_equal(atomic_load(&r1->calls), 1);
}

/* ------------------------------------------------------------------ */

/*
 * max_aio=1: a read with nothing to read holds the slot, a second read is
 * deferred behind it, then gets its data.  A px_cancel of the first frees
 * the slot: the deferred read must start (and complete) at once, not when
 * the leader's wait happens to end.  A cancel that the engine finishes on
 * the spot (the readiness engines) causes no event in that wait, and the
 * leader of a processor that a start does not interrupt (epoll, dedicated;
 * or shared, with the cancel's completion handed to a sleeping follower)
 * was not told: the read waited out the idle check's gap, 200 ms to 1.6 s.
 *
 * The bug made every round late; a machine too loaded to schedule the
 * loop threads makes one late now and then (CI once saw 210 ms under
 * ASan, four test programs at a time on two CPUs).  So a late round is
 * run again, up to three rounds in all, and only three late rounds fail.
 */
static void cancel_frees_slot_for_deferred(void **state)
{
	h_fx *f = *state;
	unsigned long long late[3];
	int round;

	for (round = 0; round < 3; round++) {
		int a[2], b[2];
		char *buf = h_alloc(f, 16);
		h_rec *r1 = h_rec_new(f), *r2 = h_rec_new(f);

		h_socketpair(f, a);
		h_socketpair(f, b);
		h_loops_start(f, 2, true);
		assert_int_equal(px_read_stream(f->px, a[1], buf, 8, h_rec_cb, r1), 0);
		assert_int_equal(px_read_stream(f->px, b[1], buf + 8, 8, h_rec_cb, r2), 0);
		h_sleep_ms(20);  /* the leader goes back to its wait */
		assert_int_equal(write(b[0], "y", 1), 1);
		uint64_t t0 = h_now_ns();
		assert_int_equal(px_cancel(f->px, a[1]), 1);
		/* 150 ms: well under the 190 ms the read waited before the
		 * fix (fixed problem 13), and above the 129 ms one run took
		 * under TSan with four tests at a time on two CPUs. */
		bool soon = wait_flag(&r2->done, 150);
		assert_true(wait_flag(&r2->done, 3000));
		/* (Read once the deferred read is done: read at the 150 ms
		 * bound, every late round would say 150.) */
		late[round] = (h_now_ns() - t0) / 1000000u;
		assert_true(wait_flag(&r1->done, 2000));
		h_loops_stop();
		assert_once(r1, PX_OP_READ_STREAM, a[1]);
		expect_error(r1, ECANCELED, "the cancelled read");
		assert_once(r2, PX_OP_READ_STREAM, b[1]);
		expect_error(r2, 0, "the deferred read");
		assert_int_equal(r2->c.bytes, 1);
		if (soon)
			break;
		print_message("round %d: the deferred read completed %llu ms "
			      "after the cancel; once more\n", round + 1,
			      late[round]);
	}
	if (round == 3)
		fail_msg("the deferred read completed %llu, %llu and %llu ms "
			 "after the cancel that freed its slot, in three "
			 "rounds (engine '%s')", late[0], late[1], late[2],
			 h_engine_text);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
#define T1(fn) cmocka_unit_test_setup_teardown(fn, setup_aio1, fx_teardown)
#define T2(fn) cmocka_unit_test_setup_teardown(fn, setup_aio2, fx_teardown)
#define T3(fn) cmocka_unit_test_setup_teardown(fn, setup_aio3, fx_teardown)

int main(int argc, char **argv)
{
	harness_engine_init(argc, argv, "fault");
	if (argc > 2 && argv[2][0])
		cmocka_set_test_filter(argv[2]);
	const struct CMUnitTest tests[] = {
		T(peer_reset_during_read),
		T(peer_reset_during_write),
		T(reused_pipe_number_socket_write),
		T(pipe_reader_gone_no_sigpipe),
		T(sigpipe_default_disposition),
		T(half_close),
		T(cancel_write_peer_shutdown_late),
		T(cancel_write_peer_shutdown_early),
		T(write_all_peer_shut_rd),
		T(write_all_own_shut_wr),
		T(write_all_starter_thread_exits),
		T(read_on_dup_after_other_number_idles),
		T(eof_pending_and_later_reads),
		T(peer_gone_sigpipe_default),
		T(tcp_urgent_data),
		T(connect_refused),
		T(connect_refused_read_pending),
		T(connect_stuck_then_cancel),
		T(connect_shut_down_under_way),
		T(connect_shut_down_read_pending),
		T(close_pending_then_cancel),
		T(cancel_races_completion),
		T1(cancel_races_deferred_start),
		T2(cancel_races_deferred_start_2),
		T3(cancel_races_deferred_start_3),
		T1(cancel_frees_slot_for_deferred),
		T(callback_cancels_sessions),
		T(callback_cancels_and_closes_own),
		T(destroy_with_thousands_pending),
		T(eintr_storm),
		T(eintr_storm_waits),
		T(eintr_storm_restart_mixed),
		T(signal_interrupt_disposition_changed),
		T(signal_interrupt_shared_by_threads),
		T(accept_at_fd_limit),
		T1(max_aio_1_load),
		T2(max_aio_2_load),
		T3(max_aio_3_load),
		T1(max_aio_1_mixed_thousands),
		T2(max_aio_2_mixed_thousands),
		T3(max_aio_3_mixed_thousands),
	};
	/* Tests that show a known problem of this engine: a comma list
	 * (meson passes it; TESTING.md lists them), left out here. */
	const char *known = argc > 3 ? argv[3] : "";
	/* and the seeded random model check (model.c) */
	size_t nmodel;
	const struct CMUnitTest *model = model_tests(&nmodel);
	size_t ntests = sizeof tests / sizeof tests[0];
	struct CMUnitTest all[sizeof tests / sizeof tests[0] + 4];
	if (nmodel > 4)
		nmodel = 4;
	memcpy(all, tests, sizeof tests);
	memcpy(all + ntests, model, nmodel * sizeof *model);
	ntests += nmodel;
	struct CMUnitTest run[sizeof all / sizeof all[0]];
	size_t n = 0;
	for (size_t i = 0; i < ntests; i++) {
		size_t len = strlen(all[i].name);
		const char *p = known;
		bool skip = false;
		while (*p && !skip) {
			const char *end = strchr(p, ',');
			size_t plen = end ? (size_t)(end - p) : strlen(p);
			skip = plen == len && strncmp(p, all[i].name, len) == 0;
			p += plen + (end ? 1 : 0);
		}
		if (skip)
			printf("fault: %s: not run on this engine (known problem, "
			       "see TESTING.md)\n", all[i].name);
		else
			run[n++] = all[i];
	}
	return _cmocka_run_group_tests("fault", run, n, NULL, NULL) ? 1 : 0;
}
