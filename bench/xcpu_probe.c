/*
 * xcpu_probe - how long one cache line takes to go from one CPU to another
 * and back, right now.
 *
 *     xcpu_probe [-r ROUND_TRIPS]
 *
 * Two threads, pinned to the first two CPUs this process may run on, pass
 * a flag back and forth through one cache line ROUND_TRIPS times (default
 * 200000) and the first prints the mean time of a round trip:
 *
 *     result prog=xcpu_probe cpus=0,1 round_trips=200000 ns_per_round_trip=61.2
 *
 * Why bench/compare runs it.  On a virtual machine the hypervisor decides
 * where the two vCPUs run, and it moves them.  On this project's 2-vCPU
 * test machine the figure is either about 60 ns (the two vCPUs share a
 * cache) or about 330 ns (they do not), and it changes every few seconds.
 * Anything that two threads share (a mutex, a list head, a socket's data)
 * costs five times as much in the second state, so a two-thread run of
 * any of the benchmark programs is much slower while it lasts.  The probe
 * before and after each two-thread run says which state the run met.
 *
 * Exit: 0 ok, 2 bad usage, 77 fewer than two CPUs available.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long rounds = 200000;
static int cpu_a = -1, cpu_b = -1;

/* The line the two threads pass between them, alone in its cache line. */
static struct {
	_Alignas(64) atomic_int turn;   /* 1: the other thread's move */
	char pad[64 - sizeof(atomic_int)];
} line;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *answer(void *arg)
{
	(void)arg;
	for (long i = 0; i < rounds; i++) {
		while (atomic_load_explicit(&line.turn, memory_order_acquire) != 1)
			;
		atomic_store_explicit(&line.turn, 0, memory_order_release);
	}
	return NULL;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	cpu_set_t allowed;
	pthread_attr_t attr;
	cpu_set_t other;
	pthread_t th;
	int rc;

	for (int i = 1; i < argc; i++) {
		char *end;
		if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
			errno = 0;
			rounds = strtol(argv[++i], &end, 10);
			if (errno || *end || rounds < 1 || rounds > 100000000) {
				fprintf(stderr, "xcpu_probe: -r wants 1 to 100000000\n");
				return 2;
			}
		} else {
			fprintf(stderr, "usage: xcpu_probe [-r ROUND_TRIPS]\n");
			return 2;
		}
	}
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
		perror("xcpu_probe: sched_getaffinity");
		return 77;
	}
	for (int c = 0; c < CPU_SETSIZE && cpu_b < 0; c++) {
		if (!CPU_ISSET(c, &allowed))
			continue;
		if (cpu_a < 0)
			cpu_a = c;
		else
			cpu_b = c;
	}
	if (cpu_b < 0) {
		fprintf(stderr, "xcpu_probe: fewer than two CPUs to run on\n");
		return 77;
	}
	if (pin(cpu_a) != 0) {
		fprintf(stderr, "xcpu_probe: cannot pin to CPU %d\n", cpu_a);
		return 77;
	}
	/* The answering thread is created on its CPU, so it cannot start
	 * anywhere else (nor fail to get there after the loop began). */
	CPU_ZERO(&other);
	CPU_SET(cpu_b, &other);
	pthread_attr_init(&attr);
	rc = pthread_attr_setaffinity_np(&attr, sizeof(other), &other);
	if (rc == 0)
		rc = pthread_create(&th, &attr, answer, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		fprintf(stderr, "xcpu_probe: pthread_create: %s\n", strerror(rc));
		return 77;
	}
	double t0 = now_ns();
	for (long i = 0; i < rounds; i++) {
		atomic_store_explicit(&line.turn, 1, memory_order_release);
		while (atomic_load_explicit(&line.turn, memory_order_acquire) != 0)
			;
	}
	double t1 = now_ns();
	pthread_join(th, NULL);
	printf("result prog=xcpu_probe cpus=%d,%d round_trips=%ld ns_per_round_trip=%.1f\n",
	       cpu_a, cpu_b, rounds, (t1 - t0) / (double)rounds);
	return 0;
}
