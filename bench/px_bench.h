/*
 * px_bench.h - what the benchmarks on the proactor (proactor_test,
 * file_test) share: creating it from -e, the threads that run its event
 * loop, and the stop at the end.  The per-operation code (the part
 * measured) stays in each program.
 */
#ifndef BENCH_PX_BENCH_H
#define BENCH_PX_BENCH_H

#include <proactor.h>
#include <pthread.h>
#include <stddef.h>

/*
 * px_create(engine) (NULL: "auto"), then "PROG: engine: NAME" on stderr
 * and the name in name[len].  Returns BENCH_EXIT_OK, or after a message
 * the exit code: BENCH_EXIT_SKIP when the engine is not available here,
 * BENCH_EXIT_USAGE for a configuration it refuses, else BENCH_EXIT_CHECK.
 */
int bench_px_create(const char *prog, const char *engine, px_proactor **px,
		    char *name, size_t len);

/* Start n threads running px_handle_events(px) until px_stop (an error
 * ends a thread with a message).  Returns 0, or -1 after a message. */
int bench_px_start_loops(const char *prog, px_proactor *px, pthread_t *th,
			 int n);

/* px_stop, join the n threads, px_destroy (which delivers what is still
 * pending); a message if px_destroy fails.  With PX_BENCH_STATS set (and
 * not "0"), first one line of px_stats on stderr: where the threads' time
 * went (waiting in the OS, running callbacks, sleeping as followers). */
void bench_px_finish(const char *prog, px_proactor *px, pthread_t *th, int n);

#endif /* BENCH_PX_BENCH_H */
