/*
 * fault.c - faults and races, per engine: peers that reset or half-close,
 * connects that fail or never finish, descriptors closed under pending
 * operations, cancels racing with completions and with deferred starts,
 * callbacks that tear down their own or another session, destroy under
 * load, signal storms, descriptor exhaustion, and load with a tiny
 * max_aio.  Public API only.  Every test checks that each started
 * operation completes exactly once, and with which error.
 *
 *   fault 'ENGINE CONFIG TEXT' [test name filter]
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
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* ------------------------------------------------------------------ */
/* Event-loop threads                                                   */
/* ------------------------------------------------------------------ */

enum { MAX_LOOPS = 4 };

static struct {
	px_proactor *px;
	pthread_t th[MAX_LOOPS];
	int n;
	atomic_int stop;
	atomic_int error;          /* a px_handle_events error, or 0 */
} g_loops;

static void *loop_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_loops.stop)) {
		int rc = px_handle_events(g_loops.px, 10);
		if (rc < 0 && rc != -ESHUTDOWN) {
			atomic_store(&g_loops.error, rc);
			break;
		}
	}
	return NULL;
}

/* n threads run px_handle_events until loops_stop. */
static void loops_start(h_fx *f, int n)
{
	assert_true(n <= MAX_LOOPS && g_loops.n == 0);
	g_loops.px = f->px;
	atomic_store(&g_loops.stop, 0);
	atomic_store(&g_loops.error, 0);
	for (int i = 0; i < n; i++) {
		if (pthread_create(&g_loops.th[i], NULL, loop_main, NULL))
			fail_msg("pthread_create failed");
		g_loops.n = i + 1;
	}
}

static void loops_stop(void)
{
	atomic_store(&g_loops.stop, 1);
	for (int i = 0; i < g_loops.n; i++)
		pthread_join(g_loops.th[i], NULL);
	g_loops.n = 0;
	int err = atomic_load(&g_loops.error);
	if (err)
		fail_msg("px_handle_events returned %d (%s) in a loop thread",
			 err, px_strerror(err));
}

/* The harness teardown, after the loop threads are gone (px_destroy
 * refuses while threads are inside px_handle_events). */
static int fx_teardown(void **state)
{
	atomic_store(&g_loops.stop, 1);
	for (int i = 0; i < g_loops.n; i++)
		pthread_join(g_loops.th[i], NULL);
	g_loops.n = 0;
	return h_teardown(state);
}

/* A proactor like h_cfg but with at most max_aio operations in flight per
 * processor (the others are deferred). */
static int setup_max_aio(void **state, unsigned max_aio)
{
	px_config save = h_cfg;
	h_cfg.primary.max_aio = max_aio;
	if (h_cfg.secondary.processor != PX_PROCESSOR_NONE)
		h_cfg.secondary.max_aio = max_aio;
	int rc = h_setup(state);
	h_cfg = save;
	return rc;
}

static int setup_aio1(void **state) { return setup_max_aio(state, 1); }

/* Wait (without pumping: loop threads do) until *flag is set. */
static bool wait_flag(atomic_int *flag, int ms)
{
	uint64_t dl = h_deadline(ms);
	while (!atomic_load(flag)) {
		if (h_now_ms() > dl)
			return false;
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
	}
	return true;
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
 * max_aio=1: a read holds the only slot, a 4 MiB px_write_stream_all on
 * another socket (its peer never reads) is deferred.  Data for the read
 * frees the slot and the leader starts the write, while this thread calls
 * px_cancel on the writer's descriptor after a varying delay.  The write
 * cannot finish, so the cancel must find it (return 1) wherever it is,
 * deferred, being started or started, and the write must complete once
 * with ECANCELED.
 */
enum { RACE_ROUNDS = 300, RACE_WLEN = 4 << 20 };

static void cancel_races_deferred_start(void **state)
{
	h_fx *f = *state;
	uint8_t *wbuf = h_alloc(f, RACE_WLEN);
	char *rbuf = h_alloc(f, 16);
	h_rec *recs = h_alloc(f, 2 * sizeof(h_rec));
	int lost = 0, zero = 0;

	loops_start(f, 2);
	for (int i = 0; i < RACE_ROUNDS; i++) {
		int a[2], b[2];
		h_rec *rd = &recs[0], *wr = &recs[1];

		memset(recs, 0, 2 * sizeof(h_rec));
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, a), 0);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
					    0, b), 0);
		big_sndbuf(b[0], 2 << 20);
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
			loops_stop();
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
	loops_stop();
	/* Late duplicate callbacks would land in recs. */
	h_settle(f, 20);
	assert_int_equal(atomic_load(&recs[0].calls), 1);
	assert_int_equal(atomic_load(&recs[1].calls), 1);
}

/* ------------------------------------------------------------------ */

#define T(fn) cmocka_unit_test_setup_teardown(fn, h_setup, fx_teardown)
#define T1(fn) cmocka_unit_test_setup_teardown(fn, setup_aio1, fx_teardown)

int main(int argc, char **argv)
{
	harness_engine_init(argc, argv, "fault");
	if (argc > 2)
		cmocka_set_test_filter(argv[2]);

	const struct CMUnitTest tests[] = {
		T1(cancel_races_deferred_start),
	};
	return cmocka_run_group_tests_name("fault", tests, NULL, NULL) ? 1 : 0;
}
