/*
 * timer_test.c - the cost of starting and cancelling a timer, as a function
 * of how many timers are pending.
 *
 *     timer_test [-e CONFIG] [-r ROUNDS] [PENDING ...]
 *
 * For each PENDING count (default 10 1000 100000): a fresh proactor gets
 * that many timers due in about an hour (random deadlines within a
 * second), then ROUNDS rounds (default 200) of: start 1,000 timers with
 * random deadlines in the same range, cancel them in random order, and
 * run the loop until their 1,000 ECANCELED callbacks have run.  Prints
 * the median over rounds of the time per start, per cancel and per
 * callback, in nanoseconds, one line per PENDING count.  Uses only the
 * public API, so it measures any version of the library.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proactor.h"

#define BATCH 1000

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long g_calls;

static void cb(const px_completion *c)
{
	(void)c;
	g_calls++;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

static int run(const char *engine, long pending, int rounds)
{
	px_proactor *px;
	char err[256];
	int rc = px_create(&px, engine, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "timer_test: px_create(%s): %s\n", engine, err);
		return 1;
	}
	const uint64_t hour = 3600ull * 1000000000u;
	unsigned seed = 1;
	for (long i = 0; i < pending; i++)
		if (px_timer_start(px, hour + (uint64_t)(rand_r(&seed) % 1000000) * 1000u,
				   cb, NULL) <= 0) {
			fprintf(stderr, "timer_test: px_timer_start failed\n");
			return 1;
		}
	uint64_t *st = calloc((size_t)rounds, sizeof(*st));
	uint64_t *ca = calloc((size_t)rounds, sizeof(*ca));
	uint64_t *di = calloc((size_t)rounds, sizeof(*di));
	int64_t ids[BATCH];
	int order[BATCH];
	if (!st || !ca || !di)
		return 1;
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < BATCH; i++)
			order[i] = i;
		for (int i = BATCH - 1; i > 0; i--) {
			int j = rand_r(&seed) % (i + 1), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		uint64_t t0 = now_ns();
		for (int i = 0; i < BATCH; i++)
			ids[i] = px_timer_start(px, hour + (uint64_t)(rand_r(&seed) % 1000000) * 1000u,
						cb, NULL);
		uint64_t t1 = now_ns();
		for (int i = 0; i < BATCH; i++)
			if (px_timer_cancel(px, ids[order[i]]) != 0) {
				fprintf(stderr, "timer_test: cancel failed\n");
				return 1;
			}
		uint64_t t2 = now_ns();
		g_calls = 0;
		while (g_calls < BATCH)
			if (px_handle_events(px, 0) < 0)
				return 1;
		uint64_t t3 = now_ns();
		st[r] = (t1 - t0) / BATCH;
		ca[r] = (t2 - t1) / BATCH;
		di[r] = (t3 - t2) / BATCH;
	}
	printf("pending %7ld: start %6llu ns, cancel %6llu ns, callback %5llu ns "
	       "(medians of %d rounds of %d)\n",
	       pending, (unsigned long long)median(st, rounds),
	       (unsigned long long)median(ca, rounds),
	       (unsigned long long)median(di, rounds), rounds, BATCH);
	free(st);
	free(ca);
	free(di);
	px_destroy(px);
	return 0;
}

int main(int argc, char **argv)
{
	const char *engine = "provider=select wait=poll";
	int rounds = 200, opt;
	while ((opt = getopt(argc, argv, "e:r:")) != -1) {
		switch (opt) {
		case 'e':
			engine = optarg;
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: timer_test [-e CONFIG] [-r ROUNDS] [PENDING ...]\n");
			return 2;
		}
	}
	if (rounds < 1)
		rounds = 1;
	static const long defaults[] = { 10, 1000, 100000 };
	int fails = 0;
	if (optind == argc) {
		for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
			fails += run(engine, defaults[i], rounds);
	} else {
		for (int i = optind; i < argc; i++)
			fails += run(engine, atol(argv[i]), rounds);
	}
	return fails ? 1 : 0;
}
