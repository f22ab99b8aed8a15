/*
 * syscall_probe - what one system call costs on this machine, right now.
 *
 *     syscall_probe [-n CALLS]
 *
 * Makes CALLS (default 200000) getppid(2) calls through syscall(2), so
 * that no library may answer from a cache, in five batches, and prints
 * the median batch's mean time per call:
 *
 *     result prog=syscall_probe calls=200000 ns_per_call=82.1
 *
 * Why bench/compare prints it beside the machine.  The default engine's
 * lead over TP_Reactor comes largely from the calls it does not make (one
 * io_uring_enter per round trip where TP_Reactor makes six), and what a
 * call is worth differs several times over between the hosts this
 * project has run on: an fstat(2) took about 1.2 us on one AMD host and
 * 157 ns on an Intel one, where getppid took 82 ns (docs/PERFORMANCE.md,
 * "A host with cheap system calls").  A grid's ratios are read with that
 * figure in mind.
 *
 * Exit: 0 ok, 2 bad usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SP_BATCHES 5

static double sp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int sp_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	long calls = 200000;
	double per[SP_BATCHES];

	for (int i = 1; i < argc; i++) {
		char *end;
		if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
			errno = 0;
			calls = strtol(argv[++i], &end, 10);
			if (errno || *end || calls < SP_BATCHES ||
			    calls > 1000000000) {
				fprintf(stderr, "syscall_probe: -n wants %d to "
					"1000000000\n", SP_BATCHES);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: syscall_probe [-n CALLS]\n");
			return 2;
		}
	}
	long batch = calls / SP_BATCHES;
	for (int b = 0; b < SP_BATCHES; b++) {
		double t0 = sp_now_ns();
		for (long i = 0; i < batch; i++)
			(void)syscall(SYS_getppid);
		per[b] = (sp_now_ns() - t0) / (double)batch;
	}
	qsort(per, SP_BATCHES, sizeof(per[0]), sp_cmp);
	printf("result prog=syscall_probe calls=%ld ns_per_call=%.1f\n",
	       batch * SP_BATCHES, per[SP_BATCHES / 2]);
	return 0;
}
