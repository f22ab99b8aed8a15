/*
 * test_fdq.c - unit tests of the per-descriptor queue (proactor/fdq.h).
 *
 * Checked: the direction of every operation; FIFO order per direction and
 * the "is the head" answers of push and remove; the two directions do not
 * see each other; entries are zeroed, carry the provider's extra bytes and
 * keep their address while the table grows; a number that is not open and
 * lies beyond the table is refused with -EBADF at once, without sizing the
 * table by it.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fdq.h"

/* A provider's entry: the generic part first, then its own fields. */
typedef struct my_entry {
	px_fdq_entry q;
	int marker;
	char pad[40];
} my_entry;

static void make_results(px_result *r, int n)
{
	memset(r, 0, (size_t)n * sizeof(*r));
	for (int i = 0; i < n; i++) {
		px_link_init(&r[i].link);
		px_link_init(&r[i].plink);
		r[i].c.fd = i;
	}
}

static int open_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static void direction_of_each_operation(void **state)
{
	(void)state;
	assert_int_equal(px__fdq_dir(PX_OP_READ_STREAM), PX_FDQ_RD);
	assert_int_equal(px__fdq_dir(PX_OP_READ_DGRAM), PX_FDQ_RD);
	assert_int_equal(px__fdq_dir(PX_OP_ACCEPT), PX_FDQ_RD);
	assert_int_equal(px__fdq_dir(PX_OP_WRITE_STREAM), PX_FDQ_WR);
	assert_int_equal(px__fdq_dir(PX_OP_WRITE_DGRAM), PX_FDQ_WR);
	assert_int_equal(px__fdq_dir(PX_OP_CONNECT), PX_FDQ_WR);
	assert_int_equal(px__fdq_dir(PX_OP_READ_FILE), -1);
	assert_int_equal(px__fdq_dir(PX_OP_WRITE_FILE), -1);
	assert_int_equal(px__fdq_dir(PX_OP_POST), -1);
	assert_int_equal(px__fdq_dir(PX_OP_TIMER), -1);
}

static void fifo_order_per_direction(void **state)
{
	px_fdq t;
	px_fdq_entry *e;
	px_result r[4];
	int fd = open_fd();

	(void)state;
	make_results(r, 4);
	px__fdq_init(&t, sizeof(px_fdq_entry));
	assert_int_equal(px__fdq_get(&t, fd, &e), 0);
	assert_int_equal(e->fd, fd);
	assert_true(px_fdq_idle(e));
	assert_null(px_fdq_head(e, PX_FDQ_RD));

	assert_true(px_fdq_push(e, PX_FDQ_RD, &r[0]));
	assert_false(px_fdq_push(e, PX_FDQ_RD, &r[1]));
	assert_false(px_fdq_push(e, PX_FDQ_RD, &r[2]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[0]);
	assert_false(px_fdq_idle(e));

	/* Leaving from the middle does not change the head. */
	assert_false(px_fdq_remove(e, PX_FDQ_RD, &r[1]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[0]);
	/* The head leaves: the next oldest takes its place. */
	assert_true(px_fdq_remove(e, PX_FDQ_RD, &r[0]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[2]);
	assert_false(px_fdq_push(e, PX_FDQ_RD, &r[3]));
	assert_true(px_fdq_remove(e, PX_FDQ_RD, &r[2]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[3]);
	assert_true(px_fdq_remove(e, PX_FDQ_RD, &r[3]));
	assert_null(px_fdq_head(e, PX_FDQ_RD));
	assert_true(px_fdq_idle(e));
	assert_false(px_link_linked(&r[0].plink));
	px__fdq_fini(&t);
	close(fd);
}

static void directions_are_independent(void **state)
{
	px_fdq t;
	px_fdq_entry *e;
	px_result r[4];
	int fd = open_fd();

	(void)state;
	make_results(r, 4);
	px__fdq_init(&t, sizeof(px_fdq_entry));
	assert_int_equal(px__fdq_get(&t, fd, &e), 0);
	assert_true(px_fdq_push(e, PX_FDQ_RD, &r[0]));
	assert_int_equal(px_fdq_queued(e), 1u << PX_FDQ_RD);
	/* A pending read does not keep a write from being the head. */
	assert_true(px_fdq_push(e, PX_FDQ_WR, &r[1]));
	assert_int_equal(px_fdq_queued(e), (1u << PX_FDQ_RD) | (1u << PX_FDQ_WR));
	assert_false(px_fdq_push(e, PX_FDQ_WR, &r[2]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[0]);
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_WR), &r[1]);
	/* Emptying one direction leaves the other alone. */
	assert_true(px_fdq_remove(e, PX_FDQ_RD, &r[0]));
	assert_int_equal(px_fdq_queued(e), 1u << PX_FDQ_WR);
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_WR), &r[1]);
	assert_true(px_fdq_push(e, PX_FDQ_RD, &r[3]));
	assert_true(px_fdq_remove(e, PX_FDQ_WR, &r[1]));
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_RD), &r[3]);
	assert_ptr_equal(px_fdq_head(e, PX_FDQ_WR), &r[2]);
	assert_true(px_fdq_remove(e, PX_FDQ_WR, &r[2]));
	assert_true(px_fdq_remove(e, PX_FDQ_RD, &r[3]));
	assert_true(px_fdq_idle(e));
	px__fdq_fini(&t);
	close(fd);
}

/* Entries are zeroed with room for the provider's fields, and stay where
 * they are while the table grows past them. */
static void growth_keeps_entries_stable(void **state)
{
	struct rlimit rl;
	px_fdq t;
	px_fdq_entry *e, *again;
	my_entry *low;
	int fd = open_fd(), hi;

	(void)state;
	px__fdq_init(&t, sizeof(my_entry));
	assert_int_equal(px__fdq_get(&t, fd, &e), 0);
	low = (my_entry *)e;
	assert_int_equal(low->marker, 0);
	for (size_t i = 0; i < sizeof(low->pad); i++)
		assert_int_equal(low->pad[i], 0);
	low->marker = 1234;
	assert_ptr_equal(px_fdq_lookup(&t, fd), e);
	assert_null(px_fdq_lookup(&t, fd + 1));
	assert_null(px_fdq_lookup(&t, -1));

	/* A number far beyond the first table size. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	hi = rl.rlim_cur > 1000 ? 1000 : (int)rl.rlim_cur - 1;
	assert_true(hi > 200);
	assert_int_equal(dup2(fd, hi), hi);
	size_t before = t.n;
	assert_int_equal(px__fdq_get(&t, hi, &again), 0);
	assert_true(t.n > (size_t)hi);
	assert_true(t.n > before);
	assert_int_equal(again->fd, hi);
	assert_ptr_equal(px_fdq_lookup(&t, fd), e);
	assert_int_equal(low->marker, 1234);
	assert_int_equal(px__fdq_get(&t, fd, &again), 0);
	assert_ptr_equal(again, e);
	/* A number below the table's size needs no check: its entry is made
	 * even if it is not open (the provider's start finds out). */
	close(hi);
	assert_int_equal(px__fdq_get(&t, hi - 1, &again), 0);
	px__fdq_fini(&t);
	close(fd);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A huge number that is not open must not size the table. */
static void huge_unopened_fd_is_ebadf(void **state)
{
	const int huge[] = { 1 << 26, INT32_MAX - 1, INT32_MAX };
	px_fdq t;
	px_fdq_entry *e = NULL;
	int fd = open_fd();

	(void)state;
	px__fdq_init(&t, sizeof(my_entry));
	assert_int_equal(px__fdq_get(&t, -1, &e), -EBADF);
	assert_int_equal(px__fdq_get(&t, fd, &e), 0);
	size_t n = t.n;
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		uint64_t best = UINT64_MAX;

		assert_int_equal(fcntl(huge[i], F_GETFD), -1);
		/* The quickest of three tries: a table sized for the number
		 * would be slow every time, a preemption only once. */
		for (int k = 0; k < 3; k++) {
			uint64_t t0 = now_ms();

			assert_int_equal(px__fdq_get(&t, huge[i], &e), -EBADF);
			if (now_ms() - t0 < best)
				best = now_ms() - t0;
		}
		assert_true(best < 100);
		assert_int_equal(t.n, n);
		assert_null(px_fdq_lookup(&t, huge[i]));
	}
	/* The table still works. */
	assert_int_equal(px__fdq_get(&t, fd, &e), 0);
	assert_int_equal(e->fd, fd);
	px__fdq_fini(&t);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(direction_of_each_operation),
		cmocka_unit_test(fifo_order_per_direction),
		cmocka_unit_test(directions_are_independent),
		cmocka_unit_test(growth_keeps_entries_stable),
		cmocka_unit_test(huge_unopened_fd_is_ebadf),
	};
	return cmocka_run_group_tests_name("fdq", tests, NULL, NULL);
}
