/*
 * test_epoll_edge.c - the edge-triggered epoll poller and the readiness
 * provider's use of it.
 *
 * Linked with --wrap for the library's px__sys_recv and px__sys_epoll_pwait
 * (its recv and epoll_pwait, made with syscall(2): proactor/util.c) and for
 * epoll_ctl (test/meson.build), so the program counts the provider's
 * epoll_ctl calls, sees what its waits report, and can act inside the
 * provider's own recv.  The test's own recv calls are not wrapped.
 *
 * Checked:
 *  - the edge poller: registered once; a report per change of state, none
 *    for a descriptor that stays readable; refresh reports the current
 *    readiness again; a number closed and reused is not watched until
 *    refresh (or forget + set) registers the new file;
 *  - no epoll_ctl per operation: 200 round trips on one socket pair, each
 *    read started from the previous read's callback, make at most a few;
 *  - the lost-edge race: data arrives after a start's recv said EAGAIN and
 *    before the provider took that in, and another loop thread's wait
 *    reports it while the read is still claimed.  The read must complete
 *    from that report, without a later epoll_ctl check (which would only
 *    rescue it after a second or so); and the same race in the leader's
 *    batch: a wait reports two descriptors, the calls go to the thread
 *    that claimed them after it let the lead go, one call finds nothing
 *    and its data comes and is reported by the other thread's wait while
 *    the read is claimed (batch_edge_is_not_lost);
 *  - a wait that reports several descriptors at once while another loop
 *    thread sleeps as a follower: the claiming thread shares half of the
 *    calls, and the follower makes them (the recvs of that batch run on
 *    both threads), each read completing once with its own byte; and the
 *    same with px_cancel of every read, or px_stop and px_destroy, while
 *    those calls are under way: each read still completes exactly once,
 *    with its byte or with ECANCELED and the byte left in the socket;
 *  - a read started in px_close's callback on the next file under the
 *    closed number is registered at its start and completes from the
 *    wait's report, not from a later check;
 *  - epoll_ctl refused (ENOMEM, ENOSPC) at a start, after a batch and at
 *    a cancel, with one and two loop threads: one callback per started
 *    operation, with its data or the error, none for a start that
 *    failed, and no hang (epoll_ctl_refused_*; see refusals_run); a
 *    start deferred by max_aio=1 gets the refusal in its completion, and
 *    so does a trusted read whose later check is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../wait_strategies/poller.h"
#include "core.h"

/* ------------------------------------------------------------------ */
/* The wrappers                                                         */
/* ------------------------------------------------------------------ */

ssize_t __real_px__sys_recv(int fd, void *buf, size_t len, int flags);
int __real_px__sys_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
		       const sigset_t *mask);
int __real_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);

static atomic_long g_ctl;            /* epoll_ctl calls */
static atomic_long g_enter;          /* epoll_pwait calls begun */
static atomic_long g_in_reports;     /* waits that reported EPOLLIN */
static atomic_long g_enter_at_report;/* g_enter when the last one did */
static atomic_int g_race_fd = -1;    /* recv on it saying EAGAIN: act, once */
static int g_race_peer = -1;         /* where to write meanwhile */
static atomic_bool g_race_done, g_race_timeout;
/* The same for a call of the leader's batch (batch_edge_is_not_lost): on
 * g_batch_fd, once, another reader takes the data first (the wrapper, as
 * a process sharing the socket would), and the call says EAGAIN. */
static atomic_int g_batch_fd = -1;
static int g_batch_peer = -1;
static atomic_int g_batch_stolen;
static atomic_bool g_batch_done, g_batch_timeout;
/* The sharing test: the wait that enters while g_hold is set waits for
 * g_go before it looks; recvs that got data on a descriptor in
 * [g_share_lo, g_share_hi] are counted per thread, the first of them
 * napping a while so that the other half's thread has time to wake. */
static atomic_bool g_hold, g_go, g_held;
static atomic_int g_share_lo = -1, g_share_hi = -1;
static atomic_bool g_share_napped;
static atomic_int g_share_nap_fd = -1;  /* the descriptor of that recv
                                           (set before g_share_napped) */
/* Where the test expects the calls shared, the napping recv naps on
 * (up to 5 s) until the other thread has made a recv too: on a loaded
 * machine (CI runs four test programs at once on two CPUs) a woken
 * follower may take longer than the nap to come, and the leader then
 * makes the shared half itself when done with its own.  How long the
 * other thread took, from the start of the nap, in g_share_other_ms. */
static atomic_bool g_share_wait_other;
static atomic_ullong g_share_nap_t0, g_share_other_ms;
static atomic_int g_share_recvs[2];
static pthread_t g_share_thread[2];
static atomic_int g_share_nthreads;
static pthread_mutex_t g_share_lock = PTHREAD_MUTEX_INITIALIZER;
/* The warm-up of the sharing tests: a recv that gets data on this
 * descriptor naps 2 ms, so that the claims measured look long. */
static atomic_int g_slow_fd = -1;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap_us(long us)
{
	struct timespec ts = { 0, us * 1000L };

	nanosleep(&ts, NULL);
}

/* Refusals: while g_refuse_left is not 0, epoll_ctl with op g_refuse_op
 * on g_refuse_fd fails with g_refuse_err (g_refuse_left counted down when
 * > 0; < 0: every time), counted in g_refused. */
static atomic_int g_refuse_fd = -1, g_refuse_op, g_refuse_left, g_refused;
static atomic_int g_refuse_err;

int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	atomic_fetch_add(&g_ctl, 1);
	if (fd == atomic_load(&g_refuse_fd) && op == atomic_load(&g_refuse_op)) {
		int left = atomic_load(&g_refuse_left);

		if (left != 0) {
			if (left > 0)
				atomic_fetch_sub(&g_refuse_left, 1);
			atomic_fetch_add(&g_refused, 1);
			errno = atomic_load(&g_refuse_err);
			return -1;
		}
	}
	return __real_epoll_ctl(epfd, op, fd, ev);
}

int __wrap_px__sys_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
		       const sigset_t *mask)
{
	int n;

	atomic_fetch_add(&g_enter, 1);
	if (atomic_load(&g_hold)) {
		bool want = true;

		if (atomic_compare_exchange_strong(&g_hold, &want, false)) {
			uint64_t dl = now_ms() + 5000;

			atomic_store(&g_held, true);
			while (!atomic_load(&g_go) && now_ms() < dl)
				nap_us(200);
		}
	}
	n = __real_px__sys_epoll_pwait(epfd, ev, max, timeout, mask);
	for (int i = 0; i < n; i++) {
		/* Not the interrupt (its data is all ones). */
		if ((ev[i].events & EPOLLIN) && ev[i].data.u64 != UINT64_MAX) {
			atomic_store(&g_enter_at_report, atomic_load(&g_enter));
			atomic_fetch_add(&g_in_reports, 1);
			break;
		}
	}
	return n;
}

/* The provider's recv (it runs without the proactor mutex).  On the race
 * descriptor, once: after the kernel said EAGAIN, make data arrive and
 * wait until another thread's wait has reported it and that thread has
 * gone back to waiting, i.e. it took the report in while the read was
 * still claimed here; then hand the EAGAIN back. */
ssize_t __wrap_px__sys_recv(int fd, void *buf, size_t len, int flags)
{
	int bfd = atomic_load(&g_batch_fd);

	if (bfd >= 0 && fd == bfd &&
	    atomic_compare_exchange_strong(&g_batch_fd, &bfd, -1)) {
		/* A batch's call: someone else takes the data first, so the
		 * call finds nothing; new data comes while it is claimed and
		 * another thread's wait reports it; then the EAGAIN. */
		char tmp[8];
		ssize_t got = __real_px__sys_recv(fd, tmp, sizeof(tmp),
						  MSG_DONTWAIT);
		ssize_t n = __real_px__sys_recv(fd, buf, len, flags);

		atomic_store(&g_batch_stolen, (int)got);
		if (n >= 0 || errno != EAGAIN) {
			atomic_store(&g_batch_timeout, true);
			atomic_store(&g_batch_done, true);
			return n;
		}
		long r0 = atomic_load(&g_in_reports);
		uint64_t dl = now_ms() + 5000;

		if (write(g_batch_peer, "z", 1) != 1)
			atomic_store(&g_batch_timeout, true);
		while (!(atomic_load(&g_in_reports) > r0 &&
			 atomic_load(&g_enter) > atomic_load(&g_enter_at_report))) {
			if (now_ms() > dl) {
				atomic_store(&g_batch_timeout, true);
				break;
			}
			nap_us(100);
		}
		atomic_store(&g_batch_done, true);
		errno = EAGAIN;
		return -1;
	}

	ssize_t n = __real_px__sys_recv(fd, buf, len, flags);
	int err = errno;
	int want = atomic_load(&g_race_fd);

	if (n > 0 && fd == atomic_load(&g_slow_fd))
		nap_us(2000);

	if (n > 0 && fd >= atomic_load(&g_share_lo) &&
	    fd <= atomic_load(&g_share_hi)) {
		pthread_t me = pthread_self();
		int k;
		int no_fd = -1;

		pthread_mutex_lock(&g_share_lock);
		for (k = 0; k < atomic_load(&g_share_nthreads); k++)
			if (pthread_equal(g_share_thread[k], me))
				break;
		if (k == atomic_load(&g_share_nthreads) && k < 2) {
			g_share_thread[k] = me;
			atomic_store(&g_share_nthreads, k + 1);
			if (k == 1)
				atomic_store(&g_share_other_ms,
					     atomic_load(&g_share_nap_t0) ?
					     now_ms() -
					     atomic_load(&g_share_nap_t0) : 0);
		}
		if (k < 2)
			atomic_fetch_add(&g_share_recvs[k], 1);
		pthread_mutex_unlock(&g_share_lock);
		if (atomic_compare_exchange_strong(&g_share_nap_fd, &no_fd, fd)) {
			/* The descriptor first: whoever sees the flag
			 * reads it. */
			atomic_store(&g_share_nap_t0, now_ms());
			atomic_store(&g_share_napped, true);
			nap_us(200000);   /* time enough for a wake-up, mostly */
			uint64_t dl = now_ms() + 5000;
			while (atomic_load(&g_share_wait_other) &&
			       atomic_load(&g_share_nthreads) < 2 &&
			       now_ms() < dl)
				nap_us(1000);
		}
		errno = err;
		return n;
	}

	if (want < 0 || fd != want || n >= 0 || err != EAGAIN ||
	    !atomic_compare_exchange_strong(&g_race_fd, &want, -1)) {
		errno = err;
		return n;
	}
	long r0 = atomic_load(&g_in_reports);
	uint64_t dl = now_ms() + 5000;

	if (write(g_race_peer, "z", 1) != 1)
		atomic_store(&g_race_timeout, true);
	while (!(atomic_load(&g_in_reports) > r0 &&
		 atomic_load(&g_enter) > atomic_load(&g_enter_at_report))) {
		if (now_ms() > dl) {
			atomic_store(&g_race_timeout, true);
			break;
		}
		nap_us(100);
	}
	atomic_store(&g_race_done, true);
	errno = EAGAIN;
	return -1;
}

/* ------------------------------------------------------------------ */
/* The edge poller on its own                                           */
/* ------------------------------------------------------------------ */

static unsigned wait_for(px_poller *pl, int fd, int timeout_ms)
{
	px_poll_event ev[8];
	unsigned got = 0;
	size_t n;

	pl->ops->prepare(pl);
	assert_true(pl->ops->wait(pl, timeout_ms) >= 0);
	while ((n = pl->ops->collect(pl, ev, 8)) > 0)
		for (size_t i = 0; i < n; i++)
			if (ev[i].fd == fd)
				got |= ev[i].events;
	return got;
}

/* An edge poller over an eventfd interrupt, as the epoll engine makes it. */
static void make_edge_poller(px_intr **in, px_poller **pl)
{
	px_processor_config c;

	memset(&c, 0, sizeof(c));
	c.processor = PX_PROCESSOR_SHARED;
	strcpy(c.provider, "select");
	strcpy(c.wait, "epoll");
	strcpy(c.interrupt, "eventfd");
	assert_int_equal(px__intr_create(&c, in), 0);
	assert_int_equal(px__poller_epoll_edge_create(*in, pl), 0);
}

static void edge_poller_reports_changes(void **state)
{
	px_intr *in;
	px_poller *pl;
	int p[2], q[2];
	char b[8];

	(void)state;
	make_edge_poller(&in, &pl);
	assert_true(pl->flags & PX_POLLER_EDGE);
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);

	px_poll_reg reg = { .fd = p[0] };
	long ctl0 = atomic_load(&g_ctl);
	assert_int_equal(pl->ops->set(pl, &reg, PX_POLL_IN), 0);
	assert_int_equal(pl->ops->set(pl, &reg, PX_POLL_IN), 0);
	assert_int_equal(pl->ops->set(pl, &reg, PX_POLL_OUT), 0);
	assert_int_equal(atomic_load(&g_ctl) - ctl0, 1);   /* once */
	assert_int_equal(wait_for(pl, p[0], 0), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);
	/* Still readable, but no new edge: not reported. */
	assert_int_equal(wait_for(pl, p[0], 20), 0);
	assert_int_equal(write(p[1], "y", 1), 1);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);
	/* refresh: the current readiness as a new edge. */
	assert_int_equal(pl->ops->refresh(pl, &reg), 0);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);
	assert_int_equal(read(p[0], b, sizeof(b)), 2);

	/* Close the number and reuse it for another pipe's read end: the
	 * registration says armed, yet the new file is not watched. */
	close(p[0]);
	close(p[1]);
	assert_int_equal(pipe2(q, O_CLOEXEC | O_NONBLOCK), 0);
	if (q[0] != reg.fd) {
		int moved = dup3(q[0], reg.fd, O_CLOEXEC);

		assert_int_equal(moved, reg.fd);
		close(q[0]);
		q[0] = moved;
	}
	assert_int_equal(pl->ops->set(pl, &reg, PX_POLL_IN), 0);  /* no-op */
	assert_int_equal(write(q[1], "z", 1), 1);
	assert_int_equal(wait_for(pl, q[0], 20), 0);
	assert_int_equal(pl->ops->refresh(pl, &reg), 0);   /* MOD, then ADD */
	assert_true(wait_for(pl, q[0], 1000) & PX_POLL_IN);
	/* forget + set registers again too (EEXIST: the same file). */
	pl->ops->forget(pl, &reg);
	assert_int_equal(reg.armed, 0);
	assert_int_equal(pl->ops->set(pl, &reg, PX_POLL_IN), 0);
	assert_int_not_equal(reg.armed, 0);
	close(q[0]);
	/* Closed: refresh says so. */
	assert_int_equal(pl->ops->refresh(pl, &reg), -EBADF);
	close(q[1]);
	pl->ops->destroy(pl);
	in->ops->destroy(in);
}

/* refresh() picks its first call by reg->armed: ADD for a number it never
 * registered, MOD for one it did; the other call follows only when the
 * guess was wrong.  Each way the file's readiness comes back as an edge. */
static void edge_refresh_guesses_add_or_mod(void **state)
{
	px_intr *in;
	px_poller *pl;
	int p[2];
	long ctl0;

	(void)state;
	make_edge_poller(&in, &pl);
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	assert_int_equal(write(p[1], "x", 1), 1);

	/* Never registered: one ADD, and the data there is reported. */
	px_poll_reg reg = { .fd = p[0] };
	ctl0 = atomic_load(&g_ctl);
	assert_int_equal(pl->ops->refresh(pl, &reg), 0);
	assert_int_equal(atomic_load(&g_ctl) - ctl0, 1);
	assert_int_not_equal(reg.armed, 0);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);

	/* Registered: one MOD, which reports it again. */
	ctl0 = atomic_load(&g_ctl);
	assert_int_equal(pl->ops->refresh(pl, &reg), 0);
	assert_int_equal(atomic_load(&g_ctl) - ctl0, 1);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);

	/* Forgotten but still registered in the kernel: the ADD says
	 * EEXIST and the MOD that follows still reports the data. */
	pl->ops->forget(pl, &reg);
	ctl0 = atomic_load(&g_ctl);
	assert_int_equal(pl->ops->refresh(pl, &reg), 0);
	assert_int_equal(atomic_load(&g_ctl) - ctl0, 2);
	assert_int_not_equal(reg.armed, 0);
	assert_true(wait_for(pl, p[0], 1000) & PX_POLL_IN);

	/* Closed, either guess: -EBADF and the registration is cleared. */
	close(p[0]);
	assert_int_equal(pl->ops->refresh(pl, &reg), -EBADF);
	assert_int_equal(reg.armed, 0);
	assert_int_equal(pl->ops->refresh(pl, &reg), -EBADF);
	close(p[1]);
	pl->ops->destroy(pl);
	in->ops->destroy(in);
}

/* ------------------------------------------------------------------ */
/* The provider over it                                                 */
/* ------------------------------------------------------------------ */

static px_proactor *g_px;
static atomic_bool g_stop;

static void *loop(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_stop))
		px_handle_events(g_px, 20);
	return NULL;
}

static void make_px(void)
{
	px_config cfg;
	char err[256] = "";

	assert_int_equal(px_config_parse(&cfg, "epoll", err, sizeof(err)), 0);
	cfg.flags |= PX_CF_NO_ENV;
	assert_int_equal(px_create_config(&g_px, &cfg, err, sizeof(err)), 0);
	atomic_store(&g_stop, false);
}

static void socket_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
					     SOCK_CLOEXEC, 0, sv), 0);
}

/* Ping-pong: the read callback answers and reads again. */
enum { PING_ROUNDS = 200 };
static int g_ping[2];
static atomic_int g_pings;
static char g_pbuf[16];

static void ping_cb(const px_completion *c)
{
	assert_int_equal(c->error, 0);
	assert_int_equal(c->bytes, 1);
	if (atomic_fetch_add(&g_pings, 1) + 1 >= PING_ROUNDS)
		return;
	assert_int_equal(px_read_stream(g_px, g_ping[1], g_pbuf, sizeof(g_pbuf),
					ping_cb, NULL), 0);
	assert_int_equal(write(g_ping[0], "p", 1), 1);
}

static void no_epoll_ctl_per_operation(void **state)
{
	uint64_t dl;
	long ctl0;

	(void)state;
	make_px();
	socket_pair(g_ping);
	atomic_store(&g_pings, 0);
	ctl0 = atomic_load(&g_ctl);
	assert_int_equal(px_read_stream(g_px, g_ping[1], g_pbuf, sizeof(g_pbuf),
					ping_cb, NULL), 0);
	assert_int_equal(write(g_ping[0], "p", 1), 1);
	dl = now_ms() + 10000;
	while (atomic_load(&g_pings) < PING_ROUNDS && now_ms() < dl)
		px_handle_events(g_px, 20);
	assert_int_equal(atomic_load(&g_pings), PING_ROUNDS);
	/* Registered once (and at most a check or two), not per read. */
	long used = atomic_load(&g_ctl) - ctl0;
	if (used > 4)
		fail_msg("%ld epoll_ctl calls for %d reads", used, PING_ROUNDS);
	print_message("%d reads, %ld epoll_ctl calls\n", PING_ROUNDS, used);
	px_destroy(g_px);
	close(g_ping[0]);
	close(g_ping[1]);
}

static int g_sv[2];
static char g_rbuf[16];
static atomic_int g_second_calls;
static atomic_long g_ctl_at_second, g_ctl_at_done;
static px_completion g_second;

static void second_cb(const px_completion *c)
{
	g_second = *c;
	atomic_store(&g_ctl_at_done, atomic_load(&g_ctl));
	atomic_fetch_add(&g_second_calls, 1);
}

/* The first read's callback starts the second from the same descriptor
 * (trusted: no check before its wait) and arms the race for its recv. */
static void first_cb(const px_completion *c)
{
	assert_int_equal(c->error, 0);
	assert_int_equal(c->bytes, 1);
	g_race_peer = g_sv[0];
	atomic_store(&g_ctl_at_second, atomic_load(&g_ctl));
	atomic_store(&g_race_fd, g_sv[1]);
	assert_int_equal(px_read_stream(g_px, g_sv[1], g_rbuf, sizeof(g_rbuf),
					second_cb, NULL), 0);
}

static atomic_int g_first_calls;
static void first_cb_counted(const px_completion *c)
{
	atomic_fetch_add(&g_first_calls, 1);
	first_cb(c);
}

static void ignore_cb(const px_completion *c)
{
	(void)c;
}

static void edge_during_claimed_try_is_not_lost(void **state)
{
	pthread_t t[2];
	int keep[2];
	char kbuf[4];
	uint64_t dl;

	(void)state;
	make_px();
	socket_pair(g_sv);
	socket_pair(keep);
	atomic_store(&g_race_done, false);
	atomic_store(&g_race_timeout, false);
	atomic_store(&g_second_calls, 0);
	atomic_store(&g_first_calls, 0);
	/* A read that never completes keeps the processor busy, so a
	 * follower takes the lead while the other thread is in a callback. */
	assert_int_equal(px_read_stream(g_px, keep[1], kbuf, sizeof(kbuf),
					ignore_cb, NULL), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, loop, NULL), 0);
	/* The first read waits (so the descriptor gets registered), then
	 * data completes it. */
	assert_int_equal(px_read_stream(g_px, g_sv[1], g_rbuf, sizeof(g_rbuf),
					first_cb_counted, NULL), 0);
	nap_us(2000);
	assert_int_equal(write(g_sv[0], "a", 1), 1);
	dl = now_ms() + 10000;
	while (atomic_load(&g_second_calls) == 0 && now_ms() < dl)
		nap_us(1000);
	atomic_store(&g_stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&g_first_calls), 1);
	assert_true(atomic_load(&g_race_done));
	if (atomic_load(&g_race_timeout))
		fail_msg("no other thread's wait reported the data while the "
			 "read was claimed (the race was not set up)");
	assert_int_equal(atomic_load(&g_second_calls), 1);
	assert_int_equal(g_second.error, 0);
	assert_int_equal(g_second.bytes, 1);
	assert_int_equal(g_rbuf[0], 'z');
	if (atomic_load(&g_ctl_at_done) != atomic_load(&g_ctl_at_second))
		fail_msg("the read completed only after %ld epoll_ctl call(s): "
			 "the report that came during its recv was lost",
			 atomic_load(&g_ctl_at_done) - atomic_load(&g_ctl_at_second));
	assert_int_equal(px_cancel(g_px, keep[1]), 1);
	px_destroy(g_px);
	close(g_sv[0]);
	close(g_sv[1]);
	close(keep[0]);
	close(keep[1]);
}

/*
 * The lost-edge race in the leader's batch (sel_run) rather than in a
 * start's own try: a wait reports two descriptors, the leader claims both
 * reads and lets the lead go before the calls (no claim measured yet: two
 * are worth a hand-off), and the call on the first finds nothing (another
 * reader took the byte: the wrapper).  Data comes meanwhile and the other
 * thread's wait reports it while the read is still claimed.  The provider
 * must keep that direction "may be ready" (the report count moved since
 * the claim) and try the read again; marked "not ready" instead, it
 * waited for an edge that had come already, for good.  Mutation testing
 * of 2026-12-07 (TESTING.md): with the count left out of that rule in
 * sel_run no test failed; edge_during_claimed_try_is_not_lost holds the
 * same rule in the start's try.
 */
static atomic_int g_batch_calls[2];
static px_completion g_batch_c[2];
static char g_batch_buf[2][4];

static void batch_cb(const px_completion *c)
{
	int i = (int)(intptr_t)c->user;

	g_batch_c[i] = *c;
	atomic_fetch_add(&g_batch_calls[i], 1);
}

static void batch_edge_is_not_lost(void **state)
{
	pthread_t t[2];
	int a[2], b[2], keep[2];
	char kbuf[4];
	uint64_t dl;

	(void)state;
	make_px();
	socket_pair(a);
	socket_pair(b);
	socket_pair(keep);
	/* A read that never completes: the processor wants a leader while
	 * the two reads are claimed, so the other thread leads and waits. */
	assert_int_equal(px_read_stream(g_px, keep[1], kbuf, sizeof(kbuf),
					ignore_cb, NULL), 0);
	atomic_store(&g_batch_done, false);
	atomic_store(&g_batch_timeout, false);
	atomic_store(&g_batch_stolen, -2);
	for (int i = 0; i < 2; i++) {
		atomic_store(&g_batch_calls[i], 0);
		memset(g_batch_buf[i], 0, sizeof(g_batch_buf[i]));
	}
	/* Both reads wait (their starts' calls say EAGAIN), registered. */
	assert_int_equal(px_read_stream(g_px, a[1], g_batch_buf[0], 1,
					batch_cb, (void *)(intptr_t)0), 0);
	assert_int_equal(px_read_stream(g_px, b[1], g_batch_buf[1], 1,
					batch_cb, (void *)(intptr_t)1), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, loop, NULL), 0);
	nap_us(50000);
	g_batch_peer = a[0];
	atomic_store(&g_batch_fd, a[1]);
	/* One wait reports both: the next wait is held before it looks
	 * until both bytes are there. */
	atomic_store(&g_go, false);
	atomic_store(&g_held, false);
	atomic_store(&g_hold, true);
	dl = now_ms() + 5000;
	while (!atomic_load(&g_held) && now_ms() < dl)
		nap_us(1000);
	bool held = atomic_load(&g_held);
	bool wrote = write(a[0], "a", 1) == 1 && write(b[0], "b", 1) == 1;
	atomic_store(&g_go, true);
	dl = now_ms() + 5000;
	while ((atomic_load(&g_batch_calls[0]) == 0 ||
		atomic_load(&g_batch_calls[1]) == 0) && now_ms() < dl)
		nap_us(1000);
	nap_us(20000);   /* a second completion would show by now */
	atomic_store(&g_stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	int done0 = atomic_load(&g_batch_calls[0]);
	int cancelled = done0 ? 0 : px_cancel(g_px, a[1]);
	atomic_store(&g_batch_fd, -1);
	assert_int_equal(px_cancel(g_px, keep[1]), 1);
	px_destroy(g_px);
	close(keep[0]);
	close(keep[1]);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
	if (!held || !wrote)
		fail_msg("no loop thread's wait was held (%d), or a write "
			 "failed (%d)", held, wrote);
	assert_true(atomic_load(&g_batch_done));
	if (atomic_load(&g_batch_timeout))
		fail_msg("the batch's call found data, or no other thread's "
			 "wait reported the new byte while the read was claimed "
			 "(the race was not set up; %d bytes taken first)",
			 atomic_load(&g_batch_stolen));
	assert_int_equal(atomic_load(&g_batch_stolen), 1);
	assert_int_equal(atomic_load(&g_batch_calls[1]), 1);
	assert_int_equal(g_batch_c[1].error, 0);
	assert_int_equal(g_batch_c[1].bytes, 1);
	assert_int_equal(g_batch_buf[1][0], 'b');
	if (!done0)
		fail_msg("the read whose call said EAGAIN while the wait of "
			 "another thread reported its data did not complete "
			 "within 5 s (px_cancel found %d): the report was lost",
			 cancelled);
	assert_int_equal(atomic_load(&g_batch_calls[0]), 1);
	assert_int_equal(g_batch_c[0].error, 0);
	assert_int_equal(g_batch_c[0].bytes, 1);
	assert_int_equal(g_batch_buf[0][0], 'z');
}

/* A read started in px_close's callback on the next file under the closed
 * number.  That start comes from a callback about the same number, so the
 * provider trusts what it registered before; the old file's registration
 * left the epoll set with it, so the provider must register the new file
 * (px_close tells it of the close) rather than wait on nothing until its
 * check of suspect registrations, a second or two later. */
static int g_reuse_old[2], g_reuse_new[2] = {-1, -1};
static atomic_int g_reuse_calls;
static atomic_long g_ctl_before_start, g_ctl_after_start;
static atomic_bool g_reuse_started;
static px_completion g_reuse_done;

static void reuse_read_cb(const px_completion *c)
{
	g_reuse_done = *c;
	atomic_store(&g_ctl_at_done, atomic_load(&g_ctl));
	atomic_fetch_add(&g_reuse_calls, 1);
}

static void reuse_close_cb(const px_completion *c)
{
	int sv[2];

	assert_int_equal(c->error, 0);
	socket_pair(sv);
	/* The new file under the closed number (the lowest free one, unless
	 * something else took it meanwhile). */
	if (sv[0] != c->fd && sv[1] != c->fd) {
		assert_int_equal(dup3(sv[1], c->fd, O_CLOEXEC), c->fd);
		close(sv[1]);
		sv[1] = c->fd;
	} else if (sv[0] == c->fd) {
		int t = sv[0];

		sv[0] = sv[1];
		sv[1] = t;
	}
	g_reuse_new[0] = sv[0];
	g_reuse_new[1] = sv[1];
	atomic_store(&g_ctl_before_start, atomic_load(&g_ctl));
	assert_int_equal(px_read_stream(g_px, sv[1], g_rbuf, sizeof(g_rbuf),
					reuse_read_cb, NULL), 0);
	atomic_store(&g_ctl_after_start, atomic_load(&g_ctl));
	atomic_store(&g_reuse_started, true);
}

static void reuse_first_cb(const px_completion *c)
{
	assert_int_equal(c->error, 0);
	assert_int_equal(c->bytes, 1);
	assert_int_equal(px_close(g_px, c->fd, reuse_close_cb, NULL), 0);
}

static void a_number_reused_in_the_close_callback_is_watched(void **state)
{
	uint64_t dl;

	(void)state;
	make_px();
	socket_pair(g_reuse_old);
	atomic_store(&g_reuse_calls, 0);
	atomic_store(&g_reuse_started, false);
	/* The first read waits, so the number gets registered. */
	assert_int_equal(px_read_stream(g_px, g_reuse_old[1], g_rbuf,
					sizeof(g_rbuf), reuse_first_cb, NULL), 0);
	px_handle_events(g_px, 10);
	assert_int_equal(write(g_reuse_old[0], "a", 1), 1);
	dl = now_ms() + 10000;
	while (!atomic_load(&g_reuse_started) && now_ms() < dl)
		px_handle_events(g_px, 20);
	assert_true(atomic_load(&g_reuse_started));
	/* The new read found nothing and waits: now its byte. */
	px_handle_events(g_px, 10);
	assert_int_equal(atomic_load(&g_reuse_calls), 0);
	assert_int_equal(write(g_reuse_new[0], "b", 1), 1);
	dl = now_ms() + 10000;
	while (atomic_load(&g_reuse_calls) == 0 && now_ms() < dl)
		px_handle_events(g_px, 20);
	assert_int_equal(atomic_load(&g_reuse_calls), 1);
	assert_int_equal(g_reuse_done.error, 0);
	assert_int_equal(g_reuse_done.bytes, 1);
	assert_int_equal(g_rbuf[0], 'b');
	print_message("epoll_ctl calls: %ld in the start, %ld after it\n",
		      atomic_load(&g_ctl_after_start) -
			      atomic_load(&g_ctl_before_start),
		      atomic_load(&g_ctl_at_done) -
			      atomic_load(&g_ctl_after_start));
	if (atomic_load(&g_ctl_after_start) == atomic_load(&g_ctl_before_start))
		fail_msg("the read on the new file was not registered at its "
			 "start");
	if (atomic_load(&g_ctl_at_done) != atomic_load(&g_ctl_after_start))
		fail_msg("the read completed only after %ld more epoll_ctl "
			 "call(s): a check found what its registration missed",
			 atomic_load(&g_ctl_at_done) -
				 atomic_load(&g_ctl_after_start));
	px_destroy(g_px);
	close(g_reuse_old[0]);
	close(g_reuse_new[0]);
	close(g_reuse_new[1]);
}

/* Eight reads waiting on eight socket pairs; a wait is held until every
 * peer has written, so that it reports all eight while the other loop
 * thread sleeps as a follower.  The claiming thread must share about half
 * of the calls with it.  The first recv that gets data naps 200 ms, so
 * that the calls of the batch are still under way, or still waiting on the
 * shared list, when the main thread acts (SHARE_CANCEL, SHARE_STOP). */
enum { SHARE_N = 8 };
enum share_mode {
	SHARE_PLAIN,     /* let the calls finish */
	SHARE_CANCEL,    /* px_cancel every read meanwhile */
	SHARE_STOP,      /* px_stop meanwhile, then px_destroy */
};
static int g_sh[SHARE_N][2];
static char g_shbuf[SHARE_N][4];
static atomic_int g_sh_calls[SHARE_N];
static atomic_int g_sh_error[SHARE_N];
static atomic_size_t g_sh_bytes[SHARE_N];

static void share_cb(const px_completion *c)
{
	int i = (int)(intptr_t)c->user;

	/* Checked by the main thread, which can fail the test. */
	atomic_store(&g_sh_error[i], c->error);
	atomic_store(&g_sh_bytes[i], c->bytes);
	atomic_fetch_add(&g_sh_calls[i], 1);
}

static void *loop_long(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_stop))
		if (px_handle_events(g_px, 2000) == -ESHUTDOWN)
			break;
	return NULL;
}

/* Every read completed once: with its byte, or (cancelled, stopped) with
 * ECANCELED and nothing read, the byte still waiting in the socket. */
static void share_check_outcomes(bool may_cancel, int nreads)
{
	for (int i = 0; i < nreads; i++) {
		int err = atomic_load(&g_sh_error[i]);
		size_t bytes = atomic_load(&g_sh_bytes[i]);

		if (atomic_load(&g_sh_calls[i]) != 1)
			fail_msg("read %d: %d completions", i,
				 atomic_load(&g_sh_calls[i]));
		if (err == 0) {
			assert_int_equal(bytes, 1);
			assert_int_equal(g_shbuf[i][0], 'a' + i);
			continue;
		}
		if (!may_cancel || err != ECANCELED)
			fail_msg("read %d: error %d", i, err);
		char b = 0;
		assert_int_equal(bytes, 0);
		assert_int_equal(recv(g_sh[i][1], &b, 1, MSG_DONTWAIT), 1);
		assert_int_equal(b, 'a' + i);
	}
}

/* Before the held wait: claims the leader collects itself, measured
 * (px_processor.claim_ns), so that the leader's choice to let the calls
 * go depends on what they cost. */
enum share_warm {
	WARM_NONE,       /* none: the first guess, let go from two on */
	WARM_CHEAP,      /* the recvs as they are, a few µs */
	WARM_SLOW,       /* each recv naps 2 ms */
};
enum { WARM_ROUNDS = 12 };
static atomic_int g_warm_calls;

static void warm_cb(const px_completion *c)
{
	(void)c;
	atomic_fetch_add(&g_warm_calls, 1);
}

/* One read at a time on sv[1], each waiting before its byte comes, so
 * that a wait reports it alone while the other loop thread sleeps. */
static void share_warm_up(const int sv[2], enum share_warm warm)
{
	char b[4];

	if (warm == WARM_NONE)
		return;
	atomic_store(&g_slow_fd, warm == WARM_SLOW ? sv[1] : -1);
	for (int i = 0; i < WARM_ROUNDS; i++) {
		uint64_t dl = now_ms() + 5000;

		atomic_store(&g_warm_calls, 0);
		assert_int_equal(px_read_stream(g_px, sv[1], b, 1, warm_cb,
						NULL), 0);
		nap_us(10000);
		assert_int_equal(write(sv[0], "w", 1), 1);
		while (atomic_load(&g_warm_calls) == 0 && now_ms() < dl)
			nap_us(500);
		assert_int_equal(atomic_load(&g_warm_calls), 1);
	}
	atomic_store(&g_slow_fd, -1);
}

/* late: the second loop thread comes only while the first one's wait is
 * held, i.e. after that turn began with the first thread alone. */
static void share_run_n(enum share_mode mode, enum share_warm warm, int nreads,
			bool late)
{
	pthread_t t[2];
	uint64_t dl;
	int lo = 1 << 30, hi = -1, all, cancelled = 0;
	int warm_sv[2];
	bool expect_shared = warm != WARM_CHEAP;
	bool not_cheap = false;
	uint64_t claim_ns = 0;

	make_px();
	socket_pair(warm_sv);
	for (int i = 0; i < nreads; i++) {
		socket_pair(g_sh[i]);
		lo = g_sh[i][1] < lo ? g_sh[i][1] : lo;
		hi = g_sh[i][1] > hi ? g_sh[i][1] : hi;
		atomic_store(&g_sh_calls[i], 0);
		atomic_store(&g_sh_error[i], -1);
		atomic_store(&g_sh_bytes[i], 0);
		memset(g_shbuf[i], 0, sizeof(g_shbuf[i]));
	}
	/* Other numbers in [lo, hi] are the peers, which nobody reads. */
	atomic_store(&g_share_nthreads, 0);
	atomic_store(&g_share_recvs[0], 0);
	atomic_store(&g_share_recvs[1], 0);
	atomic_store(&g_share_napped, false);
	atomic_store(&g_share_nap_fd, -1);
	atomic_store(&g_share_nap_t0, 0);
	atomic_store(&g_share_other_ms, ULLONG_MAX);
	atomic_store(&g_share_wait_other, false);
	atomic_store(&g_go, false);
	atomic_store(&g_held, false);
	for (int i = 0; i < nreads; i++)
		assert_int_equal(px_read_stream(g_px, g_sh[i][1], g_shbuf[i], 1,
						share_cb, (void *)(intptr_t)i), 0);
	/* The first thread leads; once the second is in px_handle_events
	 * too (a leader lets the lead go before its calls only when another
	 * thread is there when its turn begins), the first thread's next
	 * turn (its waits are bounded while reads are pending) is held
	 * before it waits, and the second sleeps as a follower meanwhile
	 * (its px_handle_events calls last 2 s). */
	assert_int_equal(pthread_create(&t[0], NULL, loop_long, NULL), 0);
	nap_us(100000);
	if (!late) {
		assert_int_equal(pthread_create(&t[1], NULL, loop_long, NULL),
				 0);
		nap_us(50000);
	}
	share_warm_up(warm_sv, warm);
	if (warm == WARM_CHEAP) {
		/* What the leader will weigh: the warm-up's last claim is
		 * noted before its callback runs, and nothing claims again
		 * until the held wait.  A sanitizer's build can make even
		 * these calls cost tens of µs; then the leader must let them
		 * go (disp_release_min: when the nreads - 1 calls another
		 * thread could make take PX_HANDOFF_NS), and that is what is
		 * checked instead. */
		pthread_mutex_lock(&g_px->lock);
		claim_ns = g_px->proc[0]->claim_ns;
		pthread_mutex_unlock(&g_px->lock);
		not_cheap = claim_ns == 0 ||
			    (uint64_t)(nreads - 1) * claim_ns >= PX_HANDOFF_NS;
		expect_shared = not_cheap;
		print_message("warm-up: %llu ns per claimed call\n",
			      (unsigned long long)claim_ns);
	}
	/* (Cancel and stop act during the nap: it stays 200 ms there.) */
	atomic_store(&g_share_wait_other, expect_shared && mode == SHARE_PLAIN);
	atomic_store(&g_hold, true);
	dl = now_ms() + 5000;
	while (!atomic_load(&g_held) && now_ms() < dl)
		nap_us(1000);
	assert_true(atomic_load(&g_held));
	if (late) {
		/* It finds the processor led and sleeps as a follower. */
		int asleep = 0;

		assert_int_equal(pthread_create(&t[1], NULL, loop_long, NULL),
				 0);
		dl = now_ms() + 5000;
		do {
			nap_us(1000);
			pthread_mutex_lock(&g_px->lock);
			asleep = g_px->nfollowers;
			pthread_mutex_unlock(&g_px->lock);
		} while (asleep < 1 && now_ms() < dl);
		assert_int_equal(asleep, 1);
	}
	nap_us(50000);
	/* What the held leader will find when its wait returns, for the
	 * message of a failure. */
	int nthreads_at_hold, nfollowers_at_hold;
	uint64_t claim_at_hold;
	pthread_mutex_lock(&g_px->lock);
	nthreads_at_hold = g_px->nthreads;
	nfollowers_at_hold = g_px->nfollowers;
	claim_at_hold = g_px->proc[0]->claim_ns;
	pthread_mutex_unlock(&g_px->lock);
	atomic_store(&g_share_lo, lo);
	atomic_store(&g_share_hi, hi);
	for (int i = 0; i < nreads; i++) {
		char b = (char)('a' + i);
		assert_int_equal(write(g_sh[i][0], &b, 1), 1);
	}
	atomic_store(&g_go, true);
	if (mode != SHARE_PLAIN) {
		/* Act while the first recv with data naps: the batch's
		 * calls are claimed, some made, some to come. */
		dl = now_ms() + 5000;
		while (!atomic_load(&g_share_napped) && now_ms() < dl)
			nap_us(200);
		assert_true(atomic_load(&g_share_napped));
		if (mode == SHARE_CANCEL) {
			/* The napping call's descriptor last: the others'
			 * reads may still be claimed and not yet called. */
			int nap_fd = atomic_load(&g_share_nap_fd);
			int n;

			assert_true(nap_fd >= lo && nap_fd <= hi);
			for (int i = 0; i < nreads; i++) {
				if (g_sh[i][1] == nap_fd)
					continue;
				n = px_cancel(g_px, g_sh[i][1]);
				assert_true(n >= 0 && n <= 1);
				cancelled += n;
			}
			n = px_cancel(g_px, nap_fd);
			assert_true(n >= 0 && n <= 1);
			cancelled += n;
		} else {
			assert_int_equal(px_stop(g_px), 0);
		}
	}
	if (mode != SHARE_STOP) {
		dl = now_ms() + 10000;
		do {
			all = 0;
			for (int i = 0; i < nreads; i++)
				all += atomic_load(&g_sh_calls[i]) > 0;
			if (all < nreads)
				nap_us(1000);
		} while (all < nreads && now_ms() < dl);
		nap_us(20000);   /* a second completion would show by now */
	}
	atomic_store(&g_stop, true);
	px_stop(g_px);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&g_share_lo, -1);
	atomic_store(&g_share_hi, -1);
	/* Whatever the threads left undelivered, destroy delivers. */
	assert_int_equal(px_destroy(g_px), 0);
	share_check_outcomes(mode != SHARE_PLAIN, nreads);
	int ncancelled = 0;
	for (int i = 0; i < nreads; i++)
		ncancelled += atomic_load(&g_sh_error[i]) == ECANCELED;
	print_message("recvs by thread: %d and %d; cancels requested: %d, "
		      "completed with ECANCELED: %d\n",
		      atomic_load(&g_share_recvs[0]),
		      atomic_load(&g_share_recvs[1]), cancelled, ncancelled);
	unsigned long long other_ms = atomic_load(&g_share_other_ms);
	if (other_ms == ULLONG_MAX)
		print_message("at the hold: %d threads in the loop, %d asleep, "
			      "%llu ns per claimed call; no recv on a second "
			      "thread\n", nthreads_at_hold, nfollowers_at_hold,
			      (unsigned long long)claim_at_hold);
	else
		print_message("at the hold: %d threads in the loop, %d asleep, "
			      "%llu ns per claimed call; the second thread's "
			      "first recv %llu ms into the nap\n",
			      nthreads_at_hold, nfollowers_at_hold,
			      (unsigned long long)claim_at_hold, other_ms);
	/* (A stop may come before the woken follower took its half; then
	 * the sharing thread makes those calls itself.) */
	if (expect_shared && mode != SHARE_STOP &&
	    atomic_load(&g_share_nthreads) != 2)
		fail_msg("all reads of one wait's report ran on one thread: "
			 "the claimed calls were not shared");
	/* Cheap calls: the leader makes them itself, and the other thread
	 * could take one during the first recv's 200 ms nap only if they
	 * had been let go. */
	if (!expect_shared && atomic_load(&g_share_nthreads) != 1)
		fail_msg("the recvs of %d cheap calls (%llu ns each, as "
			 "measured) ran on %d threads: the leader let them go",
			 nreads, (unsigned long long)claim_ns,
			 atomic_load(&g_share_nthreads));
	if (mode == SHARE_PLAIN)
		assert_int_equal(atomic_load(&g_share_recvs[0]) +
				 atomic_load(&g_share_recvs[1]), nreads);
	for (int i = 0; i < nreads; i++) {
		close(g_sh[i][0]);
		close(g_sh[i][1]);
	}
	close(warm_sv[0]);
	close(warm_sv[1]);
	if (not_cheap) {
		/* The leader let them go, as it should at that cost; the
		 * case this test is for did not arise. */
		print_message("skipped: the warm-up measured %llu ns per "
			      "claimed call, not cheap against the %u ns "
			      "hand-off in this build\n",
			      (unsigned long long)claim_ns, PX_HANDOFF_NS);
		skip();
	}
}

static void share_run(enum share_mode mode)
{
	share_run_n(mode, WARM_NONE, SHARE_N, false);
}

static void a_wait_s_calls_are_shared(void **state)
{
	(void)state;
	share_run(SHARE_PLAIN);
}

/* The same after claims measured at 2 ms a descriptor: the release of
 * the calls follows the measurement, and two descriptors are worth it. */
static void slow_calls_are_shared(void **state)
{
	(void)state;
	share_run_n(SHARE_PLAIN, WARM_SLOW, 2, false);
}

/* A thread that comes while the leader waits (here: after the leader's
 * turn began alone) counts when the wait ends: the calls of the wait's
 * report are shared with it.  (Whether another thread is here used to be
 * read when the turn began; a thread between two px_handle_events calls
 * at that moment then got nothing, which made slow_calls_are_shared fail
 * once in CI under ASan.) */
static void a_thread_that_came_during_the_wait_shares(void **state)
{
	(void)state;
	share_run_n(SHARE_PLAIN, WARM_NONE, SHARE_N, true);
}

/* After claims measured at their real cost (a few µs a descriptor in a
 * plain build, far below the 50 µs hand-off), a wait that reports two
 * descriptors keeps its calls: the leader makes both, and the follower
 * sleeps on.  Where the build makes them cost the hand-off or more
 * (ThreadSanitizer on a host with dear system calls: 20-84 µs a claim
 * seen), the leader must let them go instead; that is checked, and the
 * case is reported skipped. */
static void cheap_calls_stay_with_the_leader(void **state)
{
	(void)state;
	share_run_n(SHARE_PLAIN, WARM_CHEAP, 2, false);
}

/* px_cancel of every read while the shared calls are under way or still
 * on the shared list: each returns only when no call on its descriptor is
 * under way, and each read completes once, with its byte or with
 * ECANCELED and its byte left in the socket. */
static void cancel_during_shared_calls(void **state)
{
	(void)state;
	share_run(SHARE_CANCEL);
}

/* px_stop while the shared calls are under way: both threads leave, and
 * px_destroy delivers what they did not, each read exactly once. */
static void stop_during_shared_calls(void **state)
{
	(void)state;
	share_run(SHARE_STOP);
}

/*
 * epoll_ctl refused (ENOMEM, ENOSPC: the kernel's memory, or
 * max_user_watches) on every path of the readiness provider that
 * registers or checks a descriptor, with one loop thread and with two:
 *  - at a start: a read that would wait fails its start with the error
 *    (no callback), a write-all that moved bytes first ends once with
 *    the error and those bytes, exactly what the peer receives; the next
 *    start, once the kernel takes the registration, waits and ends with
 *    its data;
 *  - after a batch: a read ends at the end of the stream, the check of
 *    the registration that follows (the end is a hint that the number may
 *    be closed next) is refused, and the write-all waiting for room on
 *    the socket ends once, with the error and its bytes;
 *  - at a cancel: a read and a write-all wait on a socket whose number
 *    the application moves to another socket with dup2(2); the write's
 *    deadline ends it, and the check of the registration its cancel makes
 *    (a cancel is a hint too) finds the number unregistered and cannot
 *    register it.  The read used to wait for good, its data never
 *    reported (the cancel ignored the refusal, fixed problem 286 in
 *    TESTING.md); it now ends at once with the error.
 */
struct seen {
	atomic_int calls;
	atomic_int error;
	atomic_size_t bytes;
};

static void seen_cb(const px_completion *c)
{
	struct seen *o = c->user;

	atomic_store(&o->error, c->error);
	atomic_store(&o->bytes, c->bytes);
	atomic_fetch_add(&o->calls, 1);
}

static bool seen_within(struct seen *o, int ms)
{
	uint64_t dl = now_ms() + (uint64_t)ms;

	while (!atomic_load(&o->calls) && now_ms() < dl)
		px_handle_events(g_px, 5);
	return atomic_load(&o->calls) != 0;
}

/* Everything the peer end can read now (non-blocking). */
static size_t drain_peer(int fd)
{
	static char sink[65536];
	size_t got = 0;
	ssize_t n;

	while ((n = read(fd, sink, sizeof(sink))) > 0)
		got += (size_t)n;
	return got;
}

static void refuse(int fd, int op, int err, int times)
{
	atomic_store(&g_refused, 0);
	atomic_store(&g_refuse_err, err);
	atomic_store(&g_refuse_op, op);
	atomic_store(&g_refuse_left, times);
	atomic_store(&g_refuse_fd, fd);
}

static void refuse_none(void)
{
	atomic_store(&g_refuse_left, 0);
	atomic_store(&g_refuse_fd, -1);
}

#define REFUSE_WLEN (1u << 20)

static void refusals_run(int loopers)
{
	static char wbuf[REFUSE_WLEN];
	char rbuf[8];
	int a[2], b[2];
	pthread_t lt;
	struct seen r1 = { 0 }, w1 = { 0 }, r2 = { 0 }, w2 = { 0 };
	struct seen r3 = { 0 }, w3 = { 0 };

	memset(wbuf, 'w', sizeof(wbuf));
	make_px();
	if (loopers)
		assert_int_equal(pthread_create(&lt, NULL, loop, NULL), 0);

	/* At a start. */
	socket_pair(a);
	refuse(a[1], EPOLL_CTL_ADD, ENOMEM, -1);
	assert_int_equal(px_read_stream(g_px, a[1], rbuf, sizeof(rbuf), seen_cb,
					&r1), -ENOMEM);
	assert_int_equal(px_write_stream_all(g_px, a[1], wbuf, sizeof(wbuf),
					     seen_cb, &w1), 0);
	if (!seen_within(&w1, 3000))
		fail_msg("a write-all whose registration was refused at its "
			 "start did not end");
	assert_int_equal(atomic_load(&w1.error), ENOMEM);
	assert_true(atomic_load(&w1.bytes) > 0);
	assert_int_equal(drain_peer(a[0]), atomic_load(&w1.bytes));
	assert_true(atomic_load(&g_refused) >= 2);
	refuse(a[1], EPOLL_CTL_ADD, ENOSPC, 1);
	assert_int_equal(px_read_stream(g_px, a[1], rbuf, sizeof(rbuf), seen_cb,
					&r1), -ENOSPC);
	assert_int_equal(px_read_stream(g_px, a[1], rbuf, sizeof(rbuf), seen_cb,
					&r1), 0);
	refuse_none();
	px_handle_events(g_px, 5);
	assert_int_equal(write(a[0], "x", 1), 1);
	if (!seen_within(&r1, 3000))
		fail_msg("a read registered after a refusal did not end");
	assert_int_equal(atomic_load(&r1.error), 0);
	assert_int_equal(atomic_load(&r1.bytes), 1);

	/* After a batch. */
	socket_pair(b);
	assert_int_equal(px_read_stream(g_px, b[1], rbuf, sizeof(rbuf), seen_cb,
					&r2), 0);
	assert_int_equal(px_write_stream_all(g_px, b[1], wbuf, sizeof(wbuf),
					     seen_cb, &w2), 0);
	px_handle_events(g_px, 5);
	assert_int_equal(atomic_load(&r2.calls) + atomic_load(&w2.calls), 0);
	refuse(b[1], EPOLL_CTL_MOD, ENOMEM, -1);
	assert_int_equal(shutdown(b[0], SHUT_WR), 0);
	if (!seen_within(&r2, 3000))
		fail_msg("a read at the end of its stream did not end");
	assert_int_equal(atomic_load(&r2.error), 0);
	assert_int_equal(atomic_load(&r2.bytes), 0);
	if (!seen_within(&w2, 3000))
		fail_msg("a write-all whose registration check was refused "
			 "after a batch did not end");
	refuse_none();
	assert_true(atomic_load(&w2.error) == ENOMEM ||
		    atomic_load(&w2.error) == 0);
	assert_int_equal(drain_peer(b[0]), atomic_load(&w2.bytes));

	/* At a cancel. */
	int c[2], d[2];
	socket_pair(c);
	socket_pair(d);
	assert_int_equal(px_read_stream(g_px, c[1], rbuf, sizeof(rbuf), seen_cb,
					&r3), 0);
	px_op_desc wd = { .op = PX_OP_WRITE_STREAM, .fd = c[1], .buf = wbuf,
			  .len = sizeof(wbuf), .flags = PX_OPF_WRITE_ALL,
			  .timeout_ns = 100000000u, .cb = seen_cb,
			  .user = &w3 };
	assert_int_equal(px_start_op(g_px, &wd), 0);
	px_handle_events(g_px, 5);
	assert_int_equal(atomic_load(&r3.calls) + atomic_load(&w3.calls), 0);
	/* The number now names d[1]'s socket; the old one is closed and
	 * its registration gone with it. */
	assert_int_equal(dup2(d[1], c[1]), c[1]);
	refuse(c[1], EPOLL_CTL_ADD, ENOMEM, 1);
	if (!seen_within(&w3, 3000))
		fail_msg("a write-all's deadline did not end it");
	assert_int_equal(atomic_load(&w3.error), ETIMEDOUT);
	assert_int_equal(write(d[0], "y", 1), 1);
	if (!seen_within(&r3, 3000))
		fail_msg("a read whose registration could not be checked at "
			 "another operation's cancel (%d refusal(s)) did not "
			 "end within 3 s of its data", atomic_load(&g_refused));
	refuse_none();
	/* Its data, had the registration been made after all, or the
	 * refusal. */
	if (atomic_load(&r3.error) != ENOMEM)
		assert_int_equal(atomic_load(&r3.bytes), 1);

	atomic_store(&g_stop, true);
	if (loopers)
		pthread_join(lt, NULL);
	assert_int_equal(px_destroy(g_px), 0);
	assert_int_equal(atomic_load(&r1.calls), 1);
	assert_int_equal(atomic_load(&w1.calls), 1);
	assert_int_equal(atomic_load(&r2.calls), 1);
	assert_int_equal(atomic_load(&w2.calls), 1);
	assert_int_equal(atomic_load(&r3.calls), 1);
	assert_int_equal(atomic_load(&w3.calls), 1);
	int fds[] = { a[0], a[1], b[0], b[1], c[0], c[1], d[0], d[1] };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		close(fds[i]);
}

static void epoll_ctl_refused_one_thread(void **state)
{
	(void)state;
	refusals_run(0);
}

static void epoll_ctl_refused_two_threads(void **state)
{
	(void)state;
	refusals_run(1);
}

/*
 * A start deferred by max_aio=1 whose registration the kernel refuses
 * when its turn comes: the refusal arrives in its completion (ENOMEM),
 * once, as px_read_stream(3) says of deferred starts; the read before it
 * and one started after end with their data.
 */
static void epoll_ctl_refused_deferred(void **state)
{
	px_config cfg;
	char err[256] = "", buf[3][4];
	int a[2], b[2], c[2];
	struct seen r[3] = { 0 };

	(void)state;
	assert_int_equal(px_config_parse(&cfg, "epoll max_aio=1", err,
					 sizeof(err)), 0);
	cfg.flags |= PX_CF_NO_ENV;
	assert_int_equal(px_create_config(&g_px, &cfg, err, sizeof(err)), 0);
	socket_pair(a);
	socket_pair(b);
	socket_pair(c);
	assert_int_equal(px_read_stream(g_px, a[1], buf[0], 4, seen_cb, &r[0]),
			 0);
	px_handle_events(g_px, 5);
	/* Deferred: a's read holds the only place. */
	assert_int_equal(px_read_stream(g_px, b[1], buf[1], 4, seen_cb, &r[1]),
			 0);
	refuse(b[1], EPOLL_CTL_ADD, ENOMEM, -1);
	assert_int_equal(write(a[0], "a", 1), 1);
	if (!seen_within(&r[0], 3000) || !seen_within(&r[1], 3000))
		fail_msg("a deferred read whose registration was refused did "
			 "not end");
	refuse_none();
	assert_int_equal(atomic_load(&r[0].error), 0);
	assert_int_equal(atomic_load(&r[1].error), ENOMEM);
	assert_true(atomic_load(&g_refused) >= 1);
	assert_int_equal(px_read_stream(g_px, c[1], buf[2], 4, seen_cb, &r[2]),
			 0);
	assert_int_equal(write(c[0], "c", 1), 1);
	if (!seen_within(&r[2], 3000))
		fail_msg("a read after the refusal did not end");
	assert_int_equal(atomic_load(&r[2].error), 0);
	assert_int_equal(buf[2][0], 'c');
	assert_int_equal(px_destroy(g_px), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(atomic_load(&r[i].calls), 1);
	int fds[] = { a[0], a[1], b[0], b[1], c[0], c[1] };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		close(fds[i]);
}

/*
 * The check of a trusted wait's registration (a read started from the
 * callback of a read on the same socket waits unverified; the leader
 * checks it after one to three SEL_CHECK_MS periods) refused: the read
 * ends once with the error, within about three seconds.
 */
static int g_chk[2];
static char g_chkbuf[2][4];
static struct seen g_chk_r[2];

static void chk_first_cb(const px_completion *c)
{
	seen_cb(c);
	refuse(g_chk[1], EPOLL_CTL_MOD, ENOMEM, -1);
	assert_int_equal(px_read_stream(g_px, g_chk[1], g_chkbuf[1], 4, seen_cb,
					&g_chk_r[1]), 0);
}

static void epoll_ctl_refused_at_the_check(void **state)
{
	(void)state;
	memset(g_chk_r, 0, sizeof(g_chk_r));
	make_px();
	socket_pair(g_chk);
	assert_int_equal(px_read_stream(g_px, g_chk[1], g_chkbuf[0], 4,
					chk_first_cb, &g_chk_r[0]), 0);
	px_handle_events(g_px, 5);
	assert_int_equal(write(g_chk[0], "a", 1), 1);
	if (!seen_within(&g_chk_r[0], 3000))
		fail_msg("the first read did not end");
	uint64_t t0 = now_ms();
	if (!seen_within(&g_chk_r[1], 6000))
		fail_msg("a read whose registration check was refused did not "
			 "end within 6 s (%d refusal(s))",
			 atomic_load(&g_refused));
	refuse_none();
	print_message("the trusted read ended after %llu ms\n",
		      (unsigned long long)(now_ms() - t0));
	assert_int_equal(atomic_load(&g_chk_r[1].error), ENOMEM);
	assert_true(atomic_load(&g_refused) >= 1);
	assert_int_equal(px_destroy(g_px), 0);
	assert_int_equal(atomic_load(&g_chk_r[0].calls), 1);
	assert_int_equal(atomic_load(&g_chk_r[1].calls), 1);
	close(g_chk[0]);
	close(g_chk[1]);
}

int main(int argc, char **argv)
{
	/* argv[1], if given: a cmocka glob of the tests to run. */
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(edge_poller_reports_changes),
		cmocka_unit_test(edge_refresh_guesses_add_or_mod),
		cmocka_unit_test(no_epoll_ctl_per_operation),
		cmocka_unit_test(edge_during_claimed_try_is_not_lost),
		cmocka_unit_test(batch_edge_is_not_lost),
		cmocka_unit_test(a_number_reused_in_the_close_callback_is_watched),
		cmocka_unit_test(a_wait_s_calls_are_shared),
		cmocka_unit_test(slow_calls_are_shared),
		cmocka_unit_test(a_thread_that_came_during_the_wait_shares),
		cmocka_unit_test(cheap_calls_stay_with_the_leader),
		cmocka_unit_test(cancel_during_shared_calls),
		cmocka_unit_test(stop_during_shared_calls),
		cmocka_unit_test(epoll_ctl_refused_one_thread),
		cmocka_unit_test(epoll_ctl_refused_two_threads),
		cmocka_unit_test(epoll_ctl_refused_deferred),
		cmocka_unit_test(epoll_ctl_refused_at_the_check),
	};

	alarm(60);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
