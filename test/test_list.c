/*
 * test_list.c - unit tests of the intrusive list (proactor/internal.h).
 *
 * Checks order, counts and the "not linked" state after removal, and that
 * the debug checks stop a double insertion or removal (in a child process,
 * since the check aborts).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

typedef struct item {
	int value;
	px_link link;
} item;

static item *item_of(px_link *l) { return px_container_of(l, item, link); }

static void make_items(item *it, int n)
{
	for (int i = 0; i < n; i++) {
		it[i].value = i;
		px_link_init(&it[i].link);
	}
}

/* n items with the values 0 .. n-1, pushed in that order on list, which
 * is initialised first. */
static void list_of_items(px_list *list, item *it, int n)
{
	make_items(it, n);
	px_list_init(list);
	for (int i = 0; i < n; i++)
		px_list_push_back(list, &it[i].link);
}

/* The values of the list front to back, checked against want[]; also
 * walks backwards through prev and checks the count. */
static void assert_list(const px_list *list, const int *want, int n)
{
	assert_int_equal(px_list_count(list), n);
	assert_int_equal(px_list_empty(list), n == 0);
	int i = 0;
	for (px_link *l = px_list_first(list); l; l = px_list_next(list, l)) {
		assert_true(i < n);
		assert_int_equal(item_of(l)->value, want[i]);
		assert_true(px_link_linked(l));
		i++;
	}
	assert_int_equal(i, n);
	/* Backwards, through the prev pointers. */
	const px_link *l = &list->head;
	for (i = n - 1; i >= 0; i--) {
		l = l->prev;
		assert_int_equal(item_of((px_link *)l)->value, want[i]);
	}
	assert_ptr_equal(l->prev, &list->head);
	if (n == 0) {
		assert_null(px_list_first(list));
		assert_null(px_list_last(list));
	} else {
		assert_int_equal(item_of(px_list_first(list))->value, want[0]);
		assert_int_equal(item_of(px_list_last(list))->value,
				 want[n - 1]);
	}
}

static void empty_list(void **state)
{
	(void)state;
	px_list list;
	px_list_init(&list);
	assert_list(&list, NULL, 0);
	assert_null(px_list_pop_front(&list));
	assert_list(&list, NULL, 0);
}

static void push_back_and_front(void **state)
{
	(void)state;
	item it[4];
	make_items(it, 4);
	px_list list;
	px_list_init(&list);
	assert_false(px_link_linked(&it[0].link));
	px_list_push_back(&list, &it[1].link);
	px_list_push_back(&list, &it[2].link);
	px_list_push_front(&list, &it[0].link);
	px_list_push_back(&list, &it[3].link);
	const int want[] = {0, 1, 2, 3};
	assert_list(&list, want, 4);
}

static void insert_after(void **state)
{
	(void)state;
	item it[4];
	make_items(it, 4);
	px_list list;
	px_list_init(&list);
	px_list_push_back(&list, &it[0].link);
	px_list_push_back(&list, &it[3].link);
	px_list_insert_after(&list, &it[0].link, &it[2].link);
	px_list_insert_after(&list, &it[0].link, &it[1].link);
	const int want[] = {0, 1, 2, 3};
	assert_list(&list, want, 4);
}

static void pop_front_in_order(void **state)
{
	(void)state;
	item it[5];
	px_list list;
	list_of_items(&list, it, 5);
	for (int i = 0; i < 5; i++) {
		px_link *l = px_list_pop_front(&list);
		assert_non_null(l);
		assert_int_equal(item_of(l)->value, i);
		/* Removal leaves the link "on no list". */
		assert_null(l->next);
		assert_null(l->prev);
		assert_false(px_link_linked(l));
		assert_int_equal(px_list_count(&list), 4 - i);
	}
	assert_null(px_list_pop_front(&list));
	assert_list(&list, NULL, 0);
}

static void remove_first_middle_last(void **state)
{
	(void)state;
	item it[5];
	px_list list;
	list_of_items(&list, it, 5);

	px_list_remove(&list, &it[2].link);
	assert_null(it[2].link.next);
	assert_null(it[2].link.prev);
	const int w1[] = {0, 1, 3, 4};
	assert_list(&list, w1, 4);

	px_list_remove(&list, &it[0].link);
	assert_false(px_link_linked(&it[0].link));
	const int w2[] = {1, 3, 4};
	assert_list(&list, w2, 3);

	px_list_remove(&list, &it[4].link);
	assert_false(px_link_linked(&it[4].link));
	const int w3[] = {1, 3};
	assert_list(&list, w3, 2);

	px_list_remove(&list, &it[1].link);
	px_list_remove(&list, &it[3].link);
	assert_list(&list, NULL, 0);

	/* A removed link can go on a list again. */
	px_list_push_back(&list, &it[2].link);
	const int w4[] = {2};
	assert_list(&list, w4, 1);
}

/* Removing the current element while walking, the way the processor
 * collects results: take next first. */
static void remove_while_walking(void **state)
{
	(void)state;
	item it[6];
	px_list list;
	list_of_items(&list, it, 6);
	for (px_link *l = px_list_first(&list), *nx; l; l = nx) {
		nx = px_list_next(&list, l);
		if (item_of(l)->value % 2)
			px_list_remove(&list, l);
	}
	const int want[] = {0, 2, 4};
	assert_list(&list, want, 3);
}

static void splice_back(void **state)
{
	(void)state;
	item it[6];
	make_items(it, 6);
	px_list a, b, empty;
	px_list_init(&a);
	px_list_init(&b);
	px_list_init(&empty);

	/* Empty source: nothing changes. */
	px_list_push_back(&a, &it[0].link);
	px_list_splice_back(&a, &empty);
	const int w0[] = {0};
	assert_list(&a, w0, 1);
	assert_list(&empty, NULL, 0);

	px_list_push_back(&a, &it[1].link);
	for (int i = 2; i < 5; i++)
		px_list_push_back(&b, &it[i].link);
	px_list_splice_back(&a, &b);
	const int w1[] = {0, 1, 2, 3, 4};
	assert_list(&a, w1, 5);
	assert_list(&b, NULL, 0);

	/* Into an empty destination. */
	px_list_splice_back(&b, &a);
	assert_list(&b, w1, 5);
	assert_list(&a, NULL, 0);

	/* Both lists stay usable. */
	px_list_push_back(&a, &it[5].link);
	const int w2[] = {5};
	assert_list(&a, w2, 1);
	px_list_remove(&b, &it[4].link);
	const int w3[] = {0, 1, 2, 3};
	assert_list(&b, w3, 4);
}

static void many_elements(void **state)
{
	(void)state;
	enum { N = 1000 };
	item *it = calloc(N, sizeof *it);
	assert_non_null(it);
	px_list list;
	list_of_items(&list, it, N);
	assert_int_equal(px_list_count(&list), N);
	for (int i = 0; i < N; i += 3)
		px_list_remove(&list, &it[i].link);
	size_t n = 0;
	int prev = -1;
	for (px_link *l = px_list_first(&list); l; l = px_list_next(&list, l)) {
		assert_true(item_of(l)->value > prev);
		assert_true(item_of(l)->value % 3 != 0);
		prev = item_of(l)->value;
		n++;
	}
	assert_int_equal(n, px_list_count(&list));
	assert_int_equal(n, N - (N + 2) / 3);
	while (px_list_pop_front(&list))
		;
	assert_list(&list, NULL, 0);
	free(it);
}

/* ------------------------------------------------------------------ */
/* Debug checks                                                         */
/* ------------------------------------------------------------------ */

#ifndef NDEBUG
/* Run fn in a child; true if the child was stopped by a signal (the
 * failed assertion's abort). */
static bool dies(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		/* The assertion message is expected; keep the log clean. */
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		fn();
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFSIGNALED(st);
}

static void double_insert(void)
{
	item it[1];
	make_items(it, 1);
	px_list a, b;
	px_list_init(&a);
	px_list_init(&b);
	px_list_push_back(&a, &it[0].link);
	px_list_push_back(&b, &it[0].link); /* already on a */
}

static void double_remove(void)
{
	item it[2];
	make_items(it, 2);
	px_list a;
	px_list_init(&a);
	px_list_push_back(&a, &it[0].link);
	px_list_push_back(&a, &it[1].link);
	px_list_remove(&a, &it[0].link);
	px_list_remove(&a, &it[0].link); /* on no list any more */
}

static void remove_from_empty(void)
{
	item it[1];
	make_items(it, 1);
	px_list a;
	px_list_init(&a);
	px_list_remove(&a, &it[0].link);
}

static void correct_use(void)
{
	item it[1];
	make_items(it, 1);
	px_list a;
	px_list_init(&a);
	px_list_push_back(&a, &it[0].link);
	px_list_remove(&a, &it[0].link);
	px_list_push_front(&a, &it[0].link);
}

#endif /* !NDEBUG */

static void debug_checks_catch_misuse(void **state)
{
	(void)state;
#ifdef NDEBUG
	skip();
#else
	assert_false(dies(correct_use));
	assert_true(dies(double_insert));
	assert_true(dies(double_remove));
	assert_true(dies(remove_from_empty));
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_list),
		cmocka_unit_test(push_back_and_front),
		cmocka_unit_test(insert_after),
		cmocka_unit_test(pop_front_in_order),
		cmocka_unit_test(remove_first_middle_last),
		cmocka_unit_test(remove_while_walking),
		cmocka_unit_test(splice_back),
		cmocka_unit_test(many_elements),
		cmocka_unit_test(debug_checks_catch_misuse),
	};
	return cmocka_run_group_tests_name("list", tests, NULL, NULL);
}
