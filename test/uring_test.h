/*
 * uring_test.h - the start shared by the io_uring unit tests
 * (test_uring_*.c): skip when this kernel has no usable io_uring, and arm
 * a watchdog that fails the test instead of letting a lost completion hang
 * it.
 */
#ifndef PX_TEST_URING_TEST_H
#define PX_TEST_URING_TEST_H

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proactor.h"

/* Written by the watchdog: "<test>: watchdog: ...", made before it is armed. */
static char uring_test_alarm_msg[160];

static void uring_test_watchdog(int sig)
{
	(void)sig;
	ssize_t n = write(2, uring_test_alarm_msg, strlen(uring_test_alarm_msg));
	(void)n;
	_exit(1);
}

/*
 * Call first in main().  Clears PX_ENGINE (the environment must not pick
 * another engine), makes stdout line-buffered, creates and destroys one
 * proactor on `engine`, and arms a SIGALRM watchdog of `seconds`.
 * Returns 0 to go on, 77 (skip) when io_uring is unavailable here, 1 when
 * the engine cannot be created for another reason (printed).
 */
static int uring_test_begin(const char *test, const char *engine,
			    unsigned seconds)
{
	char err[256];
	px_proactor *probe;

	unsetenv("PX_ENGINE");
	setvbuf(stdout, NULL, _IOLBF, 0);
	int rc = px_create(&probe, engine, err, sizeof(err));
	if (rc == -ENOSYS || rc == -EPERM) {
		printf("skip: io_uring unavailable here: %s\n", err);
		return 77;
	}
	if (rc) {
		printf("px_create(%s): %s\n", engine, err);
		return 1;
	}
	px_destroy(probe);
	snprintf(uring_test_alarm_msg, sizeof(uring_test_alarm_msg),
		 "%s: watchdog: a completion never came (or a hang)\n", test);
	signal(SIGALRM, uring_test_watchdog);
	alarm(seconds);
	return 0;
}

/* The body of a loop thread: px_handle_events until *looping turns false
 * or the proactor fails. */
static inline void uring_test_loop(px_proactor *px, atomic_bool *looping)
{
	while (atomic_load(looping)) {
		int rc = px_handle_events(px, 10);
		if (rc < 0 && rc != -ESHUTDOWN)
			break;
	}
}

#endif
