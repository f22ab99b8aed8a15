/*
 * px_bench.c - see px_bench.h.
 */
#include "px_bench.h"

#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_px_create(const char *prog, const char *engine, px_proactor **px,
		    char *name, size_t len)
{
	char err[256] = "";
	int r = px_create(px, engine, err, sizeof err);

	if (r < 0) {
		fprintf(stderr, "%s: engine '%s': %s%s%s\n", prog,
			engine != NULL ? engine : "auto", px_strerror(r),
			err[0] != '\0' ? ": " : "", err);
		return r == -ENOSYS ? BENCH_EXIT_SKIP :
		       r == -EINVAL ? BENCH_EXIT_USAGE : BENCH_EXIT_CHECK;
	}
	snprintf(name, len, "%s", px_engine_name(*px));
	fprintf(stderr, "%s: engine: %s\n", prog, name);
	return BENCH_EXIT_OK;
}

/* The program's name, for messages of the loop threads. */
static const char *bench_px_prog;

/* A loop thread of the proactor arg. */
static void *bench_px_loop_main(void *arg)
{
	px_proactor *px = arg;

	for (;;) {
		int r = px_handle_events(px, 100);

		if (r == -ESHUTDOWN)
			break;
		if (r < 0) {
			fprintf(stderr, "%s: px_handle_events: %s\n",
				bench_px_prog, px_strerror(r));
			break;
		}
	}
	return NULL;
}

int bench_px_start_loops(const char *prog, px_proactor *px, pthread_t *th,
			 int n)
{
	bench_px_prog = prog;
	for (int i = 0; i < n; i++) {
		int r = pthread_create(&th[i], NULL, bench_px_loop_main, px);

		if (r != 0) {
			fprintf(stderr, "%s: pthread_create: %s\n", prog, strerror(r));
			return -1;
		}
	}
	return 0;
}

/* The engine's own account of the run (px_stats), on stderr. */
static void bench_px_print_stats(const char *prog, px_proactor *px)
{
	struct px_stats st;

	if (px_stats(px, &st) < 0)
		return;
	fprintf(stderr,
		"%s: stats: callbacks=%llu leader_turns=%llu "
		"leader_interrupts=%llu wait_s=%.3f dispatch_s=%.3f "
		"follower_wakeups=%llu follower_sleep_s=%.3f deferred=%llu\n",
		prog, (unsigned long long)st.callbacks,
		(unsigned long long)st.leader_turns,
		(unsigned long long)st.leader_interrupts, st.wait_ns / 1e9,
		st.dispatch_ns / 1e9, (unsigned long long)st.follower_wakeups,
		st.follower_sleep_ns / 1e9, (unsigned long long)st.deferred);
}

void bench_px_finish(const char *prog, px_proactor *px, pthread_t *th, int n)
{
	int r;
	const char *s = getenv("PX_BENCH_STATS");

	if (s && *s && strcmp(s, "0") != 0)
		bench_px_print_stats(prog, px);
	px_stop(px);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	r = px_destroy(px);
	if (r < 0)
		fprintf(stderr, "%s: px_destroy: %s\n", prog, px_strerror(r));
}
