/*
 * test_own_fds.c - unit tests of the record of the library's own
 * descriptors (proactor/internal.h, px__is_own_fd; TESTING.md, fixed
 * problems 287 and 289).
 *
 * Checked: a number is in the record from px__own_fd until px__own_fd_drop
 * or px__own_close, and no other number is; a negative number is never in
 * it and passes through px__own_fd unchanged (the calls it wraps fail that
 * way); numbers above the bitmap (PX_OWN_FD_BITS and up, which this
 * machine's RLIMIT_NOFILE may never give) go to the table, which grows
 * past its first 16 entries and forgets each number alone; px__own_close
 * closes what it drops; and a fork(2) child starts with an empty record
 * while its parent keeps its own.  The record only counts numbers, so the
 * high ones need no open descriptor.  And the identities of the engines'
 * descriptors (px__own_fd_id): a number closed behind the library's back
 * and taken by an application's file, or by another descriptor of the
 * library's, is not taken for the one first made there (fixed problem
 * 310).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

static void low_numbers(void **state)
{
	(void)state;
	int fd = eventfd(0, EFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_false(px__is_own_fd(fd));
	assert_int_equal(px__own_fd(fd), fd);
	assert_true(px__is_own_fd(fd));
	assert_false(px__is_own_fd(fd + 1));
	assert_false(px__is_own_fd(fd - 1) && fd - 1 > 2);
	assert_int_equal(px__own_close(fd), 0);
	assert_false(px__is_own_fd(fd));
	assert_true(fcntl(fd, F_GETFD) < 0 && errno == EBADF);
	/* 63, 64 and the last number of the bitmap: word edges. */
	int edges[] = { 63, 64, (int)PX_OWN_FD_BITS - 1 };
	for (int i = 0; i < 3; i++) {
		px__own_fd(edges[i]);
		assert_true(px__is_own_fd(edges[i]));
		assert_false(px__is_own_fd(edges[i] - 1));
		px__own_fd_drop(edges[i]);
		assert_false(px__is_own_fd(edges[i]));
	}
	assert_int_equal(px__own_fd(-1), -1);
	assert_int_equal(px__own_fd(-EMFILE), -EMFILE);
	assert_false(px__is_own_fd(-1));
	px__own_fd_drop(-1);
}

static void high_numbers(void **state)
{
	(void)state;
	const int base = (int)PX_OWN_FD_BITS;
	assert_false(px__is_own_fd(base));
	for (int i = 0; i < 40; i++)
		assert_int_equal(px__own_fd(base + 3 * i), base + 3 * i);
	for (int i = 0; i < 40; i++) {
		assert_true(px__is_own_fd(base + 3 * i));
		assert_false(px__is_own_fd(base + 3 * i + 1));
	}
	assert_false(px__is_own_fd(INT32_MAX));
	/* Every other one leaves; the rest stay. */
	for (int i = 0; i < 40; i += 2)
		px__own_fd_drop(base + 3 * i);
	for (int i = 0; i < 40; i++)
		assert_int_equal(px__is_own_fd(base + 3 * i), i % 2 == 1);
	for (int i = 1; i < 40; i += 2)
		px__own_fd_drop(base + 3 * i);
	for (int i = 0; i < 40; i++)
		assert_false(px__is_own_fd(base + 3 * i));
	/* A drop of a number not there changes nothing. */
	px__own_fd(base + 7);
	px__own_fd_drop(base + 8);
	assert_true(px__is_own_fd(base + 7));
	px__own_fd_drop(base + 7);
	assert_false(px__is_own_fd(base + 7));
}

/* The child's record is empty; the parent's is what it was.  The
 * library's fork handlers are registered by the first px_create. */
static void fork_child_starts_empty(void **state)
{
	(void)state;
	px_proactor *px = NULL;
	char err[256];
	assert_int_equal(px_create(&px, "poll", err, sizeof err), 0);
	px__own_fd(100);
	px__own_fd((int)PX_OWN_FD_BITS + 5);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(!px__is_own_fd(100) && !px__is_own_fd((int)PX_OWN_FD_BITS + 5)
		      ? 0 : 1);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(px__is_own_fd(100));
	assert_true(px__is_own_fd((int)PX_OWN_FD_BITS + 5));
	px__own_fd_drop(100);
	px__own_fd_drop((int)PX_OWN_FD_BITS + 5);
	assert_int_equal(px_destroy(px), 0);
}

/* The identity of an engine's descriptor (px__own_fd_id, TESTING.md,
 * fixed problem 310): an eventfd of the library's, then under its number
 * in turn a pipe of the application's (dup2), an eventfd of the
 * application's (close and eventfd: same anonymous inode, no stamp), and
 * an eventfd the library made again (the serial): px__own_fd_is says
 * false for the first identity each time, px__own_close_id leaves the
 * application's file open and out of the record, and the library's new
 * one open and in it; the new one's own identity holds, and its close
 * closes it. */
static void identity_of_own_descriptors(void **state)
{
	(void)state;
	px_own_id id, id2;
	int p[2];
	int fd = px__own_fd_id(eventfd(0, EFD_CLOEXEC), &id);
	assert_true(fd >= 0);
	assert_true(px__is_own_fd(fd));
	assert_true(px__own_fd_is(fd, &id));

	/* An application's pipe under the number. */
	assert_int_equal(pipe(p), 0);
	assert_int_equal(dup2(p[0], fd), fd);
	assert_false(px__own_fd_is(fd, &id));
	assert_int_equal(px__own_close_id(fd, &id), -1);
	assert_int_equal(errno, EBADF);
	assert_true(fcntl(fd, F_GETFD) >= 0);   /* left open */
	assert_false(px__is_own_fd(fd));        /* not the library's */
	assert_int_equal(close(fd), 0);

	/* An application's eventfd under it (the lowest free number). */
	fd = px__own_fd_id(eventfd(0, EFD_CLOEXEC), &id);
	assert_true(fd >= 0 && fd < p[0]);
	assert_int_equal(close(fd), 0);
	assert_int_equal(eventfd(0, EFD_CLOEXEC), fd);
	assert_false(px__own_fd_is(fd, &id));
	px__own_fd_drop_id(fd, &id);
	assert_false(px__is_own_fd(fd));
	assert_int_equal(close(fd), 0);

	/* The library's next eventfd under it. */
	fd = px__own_fd_id(eventfd(0, EFD_CLOEXEC), &id);
	assert_int_equal(close(fd), 0);
	assert_int_equal(px__own_fd_id(eventfd(0, EFD_CLOEXEC), &id2), fd);
	assert_false(px__own_fd_is(fd, &id));
	assert_true(px__own_fd_is(fd, &id2));
	assert_int_equal(px__own_close_id(fd, &id), -1);
	px__own_fd_drop_id(fd, &id);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	assert_true(px__is_own_fd(fd));         /* still the library's */
	assert_int_equal(px__own_close_id(fd, &id2), 0);
	assert_false(px__is_own_fd(fd));
	assert_true(fcntl(fd, F_GETFD) < 0);
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(low_numbers),
		cmocka_unit_test(high_numbers),
		cmocka_unit_test(fork_child_starts_empty),
		cmocka_unit_test(identity_of_own_descriptors),
	};
	return cmocka_run_group_tests_name("own_fds", tests, NULL, NULL);
}
