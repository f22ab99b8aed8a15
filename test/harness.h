/*
 * harness.h - shared helpers of the per-engine test programs
 * (conformance with bad_input, op_timeout and vectored; close; fault).
 * stress and load, which are not cmocka programs, use only the clock.
 *
 * Every engine test program takes the engine configuration text as argv[1].
 * harness_engine_init() parses it, checks that this kernel offers the engine
 * (exit 77, "skipped", when it does not) and keeps the parsed config in
 * h_cfg for the tests.
 *
 * Buffers, records and descriptors handed to the proactor by a test belong
 * to the test's fixture, not to the test function's stack: when an
 * assertion fails, cmocka leaves the test function at once and the teardown
 * destroys the proactor, whose pending callbacks must still find valid
 * memory.  The fixture frees them only after px_destroy returned.
 */
#ifndef PX_TEST_HARNESS_H
#define PX_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <pthread.h>

#include "proactor.h"

#include "tsan.h"

/* The engine under test (from argv[1]), parsed once by
 * harness_engine_init. */
extern const char *h_engine_text;
extern px_config h_cfg;

/*
 * Parse argv[1] (px_config_parse), set PX_CF_NO_ENV, and try
 * px_create_config once.  On a parse error: message, exit 1.  When the
 * engine is unavailable here (-ENOSYS or -EPERM): message, exit 77.
 * Also makes stdout line buffered so a watchdog's report follows the last
 * "[ RUN ]" line in the log.
 */
void harness_engine_init(int argc, char **argv, const char *prog);
/* argv[1] that makes harness_engine_init list the descriptors the
 * process holds from 3 up ("N target" a line) and exit 0: run through
 * exec(2), it shows what an exec inherits. */
#define H_LIST_FDS "--list-fds"

/* CLOCK_MONOTONIC in nanoseconds / milliseconds. */
uint64_t h_now_ns(void);
uint64_t h_now_ms(void);
/* A deadline ms milliseconds from now (h_now_ms scale). */
uint64_t h_deadline(int ms);
void h_sleep_ms(int ms);
/* pthread_cond_timedwait for at most ms milliseconds (cv uses the default
 * CLOCK_REALTIME); mu held by the caller. */
void h_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
/* Poll, without pumping (other threads run the loop), until *v >= want;
 * false if ms pass first. */
bool h_wait_at_least(atomic_int *v, int want, int ms);

/* Problems seen where cmocka may not assert (callbacks, helper threads):
 * h_bad counts them and keeps the first message; h_assert_no_bad fails the
 * test when there was any.  h_setup clears them for each test. */
void h_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void h_assert_no_bad(const char *where);
int h_bad_count(void);
const char *h_bad_first(void);

/* ------------------------------------------------------------------ */
/* Fixture                                                              */
/* ------------------------------------------------------------------ */

#define H_MAX_TRACKED 128

typedef struct h_fx {
	px_proactor *px;           /* NULL once a test destroyed it */
	int fds[H_MAX_TRACKED];
	int nfds;
	void *mem[H_MAX_TRACKED];
	int nmem;
} h_fx;

/* cmocka setup/teardown: a fresh proactor for h_cfg per test, and a
 * watchdog (alarm) that ends the program with a message if one test runs
 * longer than H_WATCHDOG_S. */
#define H_WATCHDOG_S 30
/* Limit for px_destroy in the teardown (it should take milliseconds). */
#define H_TEARDOWN_S 10
int h_setup(void **state);
int h_teardown(void **state);
/* setup (h_setup, or a fixture's own that calls it) with every processor
 * of h_cfg limited to max_aio operations in flight; h_cfg is restored. */
int h_setup_max_aio(void **state, unsigned max_aio, int (*setup)(void **));

/* Zeroed memory owned by the fixture (freed after px_destroy). */
void *h_alloc(h_fx *f, size_t n);
/* Keep fd, closed in teardown after px_destroy; returns fd. */
int h_track(h_fx *f, int fd);
/* Close a tracked fd now and forget it. */
void h_close(h_fx *f, int fd);

/*
 * Run px_handle_events(px, 10) once; fail the test when the deadline has
 * passed (the condition the caller waits for did not come: a lost or late
 * completion) or when handle_events returns an error.
 */
void h_pump(h_fx *f, uint64_t deadline, const char *waiting_for);
/* Run the event loop for ms milliseconds (to see late, extra callbacks). */
void h_settle(h_fx *f, int ms);
/* Check that the proactor still works: a post round-trips. */
void h_assert_usable(h_fx *f);
/* Destroy the fixture's proactor now, in the test (the callbacks of
 * everything pending run here), under a watchdog of H_TEARDOWN_S + 5
 * seconds, then the test's own again: px_destroy must return 0.  The
 * fixture's memory and descriptors stay until the teardown. */
void h_destroy_now(h_fx *f);

/* ------------------------------------------------------------------ */
/* Event-loop threads                                                   */
/* ------------------------------------------------------------------ */

#define H_MAX_LOOPS 4

/*
 * Start n threads (at most H_MAX_LOOPS, none running yet) that call
 * px_handle_events(f->px, 10) until h_loops_stop.  A thread that gets an
 * error stops and keeps it for h_loops_stop; -ESHUTDOWN (after px_stop)
 * is not an error when shutdown_ok.
 */
void h_loops_start(h_fx *f, int n, bool shutdown_ok);
/* The same with px_handle_events(f->px, wait_ms): a test that must see
 * how long a loop thread's wait lasts (h_loops_stop then takes up to
 * wait_ms, unless something wakes the threads). */
void h_loops_start_ms(h_fx *f, int n, bool shutdown_ok, int wait_ms);
/* Stop and join the threads; fail the test if one got an error. */
void h_loops_stop(void);
/* The same for threads started with a long wait_ms: after asking them to
 * stop, post wake (a callback that does nothing with a NULL user) until
 * each thread has left, so that none waits out its wait. */
void h_loops_stop_waking(h_fx *f, px_callback *wake);
/* Stop and join the threads without a verdict (for teardowns, which must
 * run before h_teardown: px_destroy refuses while threads are inside
 * px_handle_events). */
void h_loops_join(void);

/* ------------------------------------------------------------------ */
/* Completion records                                                   */
/* ------------------------------------------------------------------ */

/*
 * One record per started operation.  h_rec_cb counts the calls and keeps a
 * copy of the first completion; tests assert on it from their own thread
 * (cmocka assertions must never run inside a callback: they longjmp).
 */
typedef struct h_rec {
	atomic_int calls;
	atomic_int done;           /* first completion copied */
	px_completion c;
	int seq;                   /* global order of first completion */
	uint64_t at_ns;            /* when the first call happened */
	pthread_t thread;          /* thread that ran it */
} h_rec;

h_rec *h_rec_new(h_fx *f);
void h_rec_cb(const px_completion *c);
bool h_rec_done(h_rec *r);
/* Pump until r completed (deadline ms from now). */
void h_wait_rec(h_fx *f, h_rec *r, int ms, const char *what);

/* ------------------------------------------------------------------ */
/* Descriptors                                                          */
/* ------------------------------------------------------------------ */

/* AF_UNIX stream socketpair, tracked. */
void h_socketpair(h_fx *f, int sv[2]);
/* pipe (blocking, close-on-exec), tracked. */
void h_pipe(h_fx *f, int p[2]);
/* An AF_INET socket of type bound to 127.0.0.1:0, tracked; its address
 * in *addr. */
int h_bound_socket(h_fx *f, int type, struct sockaddr_in *addr);
/* The port of a bound socket (host order). */
int h_port_of(int fd);
/* Entries of a directory, "." and ".." left out (/proc/self/fd counts the
 * descriptor that reads it); -1 if it cannot be opened. */
int h_count_dir(const char *path);
/* The processor of the engine under test (as created, so an auto
 * processor counts as what it became) that op is routed to: the first
 * whose ops include it.  cfg receives the parsed engine; fails the test
 * when no processor does op. */
const px_processor_config *h_proc_for(h_fx *f, px_op op, px_config *cfg);

/* Whether the engine under test does op vectored: the processor the
 * operation is routed to (the first whose ops include it) is not the POSIX
 * AIO provider, the one provider without a vectored form.  Taken from the
 * engine as created, so an auto processor counts as what it became. */
bool h_vec_supported(h_fx *f, px_op op);

/* ------------------------------------------------------------------ */
/* Common steps                                                         */
/* ------------------------------------------------------------------ */

/*
 * Start a read of up to len bytes on sv[1] of a new tracked socketpair sv,
 * into fixture memory (*buf).  Nothing is written, so it stays pending.
 * Returns its record.
 */
h_rec *h_start_pending_read(h_fx *f, int sv[2], size_t len, char **buf);

/*
 * Write text to wfd, and read it from rfd into buf (room for len bytes)
 * with a new read: it must come back whole and unchanged -- the descriptor
 * still works, and no earlier read left behind takes the data.
 */
void h_assert_reads_back(h_fx *f, int wfd, int rfd, char *buf, size_t len,
			 const char *text, const char *what);

/* Fill buf with a pattern depending on seed and position. */
void h_pattern(uint8_t *buf, size_t len, uint32_t seed, uint64_t pos);

#endif /* PX_TEST_HARNESS_H */
