/*
 * test_alloc.c - unit tests of the result allocator (proactor/core.h:
 * px__alloc_init / get / put / fini).
 *
 * The allocator is what lets the library promise that no allocation
 * happens between the start of an operation and its completion: results
 * come from a free list and go back to it.  Checked: a result comes out
 * zeroed, in state INITIALIZED, with fd and new_fd -1, with room for the
 * provider's private bytes, aligned; results handed out at once are
 * distinct and do not overlap; a put result is reused; in steady state
 * (get/put cycles below the high-water mark) the pool does not grow; a
 * thread takes back the result it gave back last even when another thread
 * gave one back since, and takes other threads' free results before the
 * pool grows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"

#if defined(PX_HAVE_MEMCHECK_H) && !defined(NDEBUG)
#include <valgrind/memcheck.h>
#endif

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static void fresh_result_is_initialized(void **state)
{
	(void)state;
	px_allocator a;
	px__alloc_init(&a, 40);
	assert_true(a.size >= PX_RESULT_HDR + 40);
	px_result *r = px__alloc_get(&a);
	assert_non_null(r);
	assert_int_equal(r->state, PX_RS_INITIALIZED);
	assert_int_equal(r->c.fd, -1);
	assert_int_equal(r->c.new_fd, -1);
	assert_int_equal(r->flags, 0);
	assert_int_equal(r->done, 0);
	assert_null(r->cb);
	assert_null(r->proc);
	assert_null(r->c.buf);
	assert_int_equal(r->c.bytes, 0);
	assert_int_equal(r->c.error, 0);
	assert_false(px_link_linked(&r->link));
	assert_false(px_link_linked(&r->plink));
	assert_true(all_zero(px_result_priv(r), 40));
	/* Aligned for any type, and the private space too. */
	assert_int_equal((uintptr_t)r % 16, 0);
	assert_int_equal((uintptr_t)px_result_priv(r) % 16, 0);
	px__alloc_put(&a, r);
	px__alloc_fini(&a);
}

static void reused_result_is_zeroed_again(void **state)
{
	(void)state;
	px_allocator a;
	px__alloc_init(&a, 24);
	px_result *r = px__alloc_get(&a);
	assert_non_null(r);
	/* Dirty everything a user of the result may touch. */
	r->c.fd = 7;
	r->c.new_fd = 8;
	r->c.bytes = 99;
	r->c.error = 5;
	r->flags = 0xff;
	r->done = 1234;
	r->state = PX_RS_COMPLETED;
	memset(px_result_priv(r), 0xab, 24);
	px__alloc_put(&a, r);

	px_result *again = px__alloc_get(&a);
	assert_non_null(again);
	assert_ptr_equal(again, r); /* the free list hands it back */
	assert_int_equal(again->state, PX_RS_INITIALIZED);
	assert_int_equal(again->c.fd, -1);
	assert_int_equal(again->c.new_fd, -1);
	assert_int_equal(again->c.bytes, 0);
	assert_int_equal(again->c.error, 0);
	assert_int_equal(again->flags, 0);
	assert_int_equal(again->done, 0);
	assert_false(px_link_linked(&again->link));
	assert_true(all_zero(px_result_priv(again), 24));
	px__alloc_put(&a, again);
	px__alloc_fini(&a);
}

static int cmp_ptr(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t) * (void *const *)x;
	uintptr_t b = (uintptr_t) * (void *const *)y;
	return a < b ? -1 : a > b;
}

static void many_results_distinct_and_disjoint(void **state)
{
	(void)state;
	enum { N = 1000, PRIV = 56 };
	px_allocator a;
	px__alloc_init(&a, PRIV);
	px_result **r = calloc(N, sizeof *r);
	assert_non_null(r);
	for (int i = 0; i < N; i++) {
		r[i] = px__alloc_get(&a);
		assert_non_null(r[i]);
		/* Write the whole result, header and private space: ASan
		 * catches a result smaller than it claims. */
		memset(px_result_priv(r[i]), i & 0xff, PRIV);
		r[i]->c.offset = (uint64_t)i;
	}
	assert_int_equal(a.ntotal - a.nfree, N);
	qsort(r, N, sizeof *r, cmp_ptr);
	for (int i = 1; i < N; i++)
		assert_true((uintptr_t)r[i] - (uintptr_t)r[i - 1] >=
			    PX_RESULT_HDR + PRIV);
	/* Nothing overwrote anything. */
	for (int i = 0; i < N; i++) {
		int v = (int)r[i]->c.offset;
		const unsigned char *p = px_result_priv(r[i]);
		for (int k = 0; k < PRIV; k++)
			assert_int_equal(p[k], v & 0xff);
	}
	for (int i = 0; i < N; i++)
		px__alloc_put(&a, r[i]);
	assert_int_equal(a.nfree, a.ntotal);
	free(r);
	px__alloc_fini(&a);
}

/* Takes n results at once into r, then gives them all back: the pool
 * holds at least n free results after. */
static void grow_to(px_allocator *a, px_result **r, int n)
{
	for (int i = 0; i < n; i++)
		assert_non_null(r[i] = px__alloc_get(a));
	for (int i = 0; i < n; i++)
		px__alloc_put(a, r[i]);
}

/* Once the pool has grown to the high-water mark, get/put cycles must not
 * allocate: the hot path is free of malloc. */
static void steady_state_does_not_grow(void **state)
{
	(void)state;
	enum { HIGH = 300 };
	px_allocator a;
	px__alloc_init(&a, 32);
	px_result *r[HIGH];
	grow_to(&a, r, HIGH);
	size_t total = a.ntotal, chunks = a.nchunks;
	assert_true(total >= HIGH);

	unsigned seed = 1;
	int out = 0;
	for (int round = 0; round < 100000; round++) {
		seed = seed * 1103515245u + 12345u;
		bool get = out == 0 || (out < HIGH && (seed >> 16) % 2);
		if (get) {
			r[out] = px__alloc_get(&a);
			assert_non_null(r[out]);
			out++;
		} else {
			int k = (int)((seed >> 8) % (unsigned)out);
			px__alloc_put(&a, r[k]);
			r[k] = r[--out];
		}
		if (a.ntotal != total)
			fail_msg("the pool grew from %zu to %zu results with at "
				 "most %d in use",
				 total, a.ntotal, HIGH);
	}
	assert_int_equal(a.nchunks, chunks);
	assert_int_equal(a.ntotal - a.nfree, out);
	while (out)
		px__alloc_put(&a, r[--out]);
	assert_int_equal(a.nfree, a.ntotal);
	px__alloc_fini(&a);
}

/* The allocator runs under the proactor mutex; these tests let one thread
 * at a time call it, in the order the semaphores give. */
typedef struct {
	px_allocator *a;
	px_result *give, *got;
	int n;
	px_result **many;
	sem_t go, done;
} alloc_peer;

/* Gives back `give`, then on the second go takes one result. */
static void *alloc_peer_two_steps(void *arg)
{
	alloc_peer *p = arg;
	sem_wait(&p->go);
	px__alloc_put(p->a, p->give);
	sem_post(&p->done);
	sem_wait(&p->go);
	p->got = px__alloc_get(p->a);
	sem_post(&p->done);
	return NULL;
}

static void *alloc_peer_put(void *arg)
{
	alloc_peer *p = arg;
	px__alloc_put(p->a, p->give);
	return NULL;
}

static void *alloc_peer_get_many(void *arg)
{
	alloc_peer *p = arg;
	for (int i = 0; i < p->n; i++)
		p->many[i] = px__alloc_get(p->a);
	return NULL;
}

/* A thread's next start reuses the record it freed last, whose lines its
 * CPU still holds, not the one another thread freed after it. */
static void thread_takes_back_its_own_result(void **state)
{
	(void)state;
	px_allocator a;
	px__alloc_init(&a, 32);
	px_result *x = px__alloc_get(&a), *y = px__alloc_get(&a);
	assert_non_null(x);
	assert_non_null(y);
	alloc_peer p = {.a = &a, .give = y};
	sem_init(&p.go, 0, 0);
	sem_init(&p.done, 0, 0);
	pthread_t t2, t1;
	assert_int_equal(pthread_create(&t2, NULL, alloc_peer_two_steps, &p), 0);
	sem_post(&p.go);
	sem_wait(&p.done);          /* t2 gave back y */
	alloc_peer q = {.a = &a, .give = x};
	assert_int_equal(pthread_create(&t1, NULL, alloc_peer_put, &q), 0);
	assert_int_equal(pthread_join(t1, NULL), 0);   /* t1 gave back x */
	sem_post(&p.go);
	sem_wait(&p.done);          /* t2 took one */
	assert_int_equal(pthread_join(t2, NULL), 0);
	assert_ptr_equal(p.got, y);
	px__alloc_put(&a, p.got);
	assert_int_equal(a.nfree, a.ntotal);
	sem_destroy(&p.go);
	sem_destroy(&p.done);
	px__alloc_fini(&a);
}

/* Results given back by one thread serve another before the pool grows. */
static void other_threads_results_before_growth(void **state)
{
	(void)state;
	enum { HIGH = 500 };
	px_allocator a;
	px__alloc_init(&a, 32);
	px_result *r[HIGH];
	grow_to(&a, r, HIGH);
	size_t total = a.ntotal;
	alloc_peer p = {.a = &a, .n = HIGH, .many = r};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, alloc_peer_get_many, &p), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 0; i < HIGH; i++)
		assert_non_null(r[i]);
	if (a.ntotal != total)
		fail_msg("the pool grew from %zu to %zu results while %zu were "
			 "free on another thread's list",
			 total, a.ntotal, total);
	for (int i = 0; i < HIGH; i++)
		px__alloc_put(&a, r[i]);
	assert_int_equal(a.nfree, a.ntotal);
	px__alloc_fini(&a);
}

/* Balance check: with a result still out, px__alloc_fini reports it and
 * aborts (unless NDEBUG); run in a child process. */
static void fini_with_result_out_aborts(void **state)
{
	(void)state;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		px_allocator a;
		px__alloc_init(&a, 8);
		for (int i = 0; i < 3; i++)
			if (!px__alloc_get(&a))
				_exit(2);
		px__alloc_fini(&a);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
#ifndef NDEBUG
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
#else
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

/* Balanced: every result given back, fini is quiet, and the allocator can
 * be set up again. */
static void fini_after_all_returned(void **state)
{
	(void)state;
	px_allocator a;
	px_result *r[200];
	px__alloc_init(&a, 8);
	for (int i = 0; i < 200; i++)
		assert_non_null(r[i] = px__alloc_get(&a));
	for (int i = 0; i < 200; i++)
		px__alloc_put(&a, r[i]);
	px__alloc_fini(&a);
	px__alloc_init(&a, 8);
	px_result *one = px__alloc_get(&a);
	assert_non_null(one);
	px__alloc_put(&a, one);
	px__alloc_fini(&a);
}

/* Under valgrind's memcheck (test/memcheck_smoke.sh runs this), a result
 * given back is a freed block: every byte of it but the free list's link
 * unaddressable, so that memcheck reports a use of a record after its
 * callback, with where it was given back.  Results of a new chunk not yet
 * handed out are unaddressable too, and one taken again is addressable.
 * VALGRIND_GET_VBITS answers 3 for memory that is not addressable,
 * without reporting an error.  Skipped outside memcheck, and in builds
 * without its header or with NDEBUG, which have no annotations. */
static void freed_result_unaddressable_under_memcheck(void **state)
{
	(void)state;
#if defined(PX_HAVE_MEMCHECK_H) && !defined(NDEBUG)
	if (!RUNNING_ON_VALGRIND)
		skip();
	unsigned char vbits[sizeof(px_completion)];
	px_allocator a;
	px__alloc_init(&a, 40);
	px_result *r = px__alloc_get(&a);
	assert_non_null(r);
	assert_int_equal(VALGRIND_GET_VBITS(&r->c, vbits, sizeof r->c), 1);
	/* Its neighbour in the chunk was never handed out. */
	px_result *next = (px_result *)(void *)((char *)r + a.size);
	assert_int_equal(VALGRIND_GET_VBITS(&next->c, vbits, sizeof r->c), 3);
	px__alloc_put(&a, r);
	assert_int_equal(VALGRIND_GET_VBITS(&r->c, vbits, sizeof r->c), 3);
	assert_int_equal(VALGRIND_GET_VBITS(&r->state, vbits, 1), 3);
	assert_int_equal(VALGRIND_GET_VBITS((char *)r + a.size - 1, vbits, 1),
			 3);
	/* Taken again (the same record: this thread gave it back last). */
	px_result *again = px__alloc_get(&a);
	assert_ptr_equal(again, r);
	assert_int_equal(VALGRIND_GET_VBITS(again, vbits, 1), 1);
	assert_int_equal(VALGRIND_GET_VBITS(&again->c, vbits, sizeof r->c), 1);
	px__alloc_put(&a, again);
	px__alloc_fini(&a);
#else
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fresh_result_is_initialized),
		cmocka_unit_test(reused_result_is_zeroed_again),
		cmocka_unit_test(many_results_distinct_and_disjoint),
		cmocka_unit_test(steady_state_does_not_grow),
		cmocka_unit_test(thread_takes_back_its_own_result),
		cmocka_unit_test(other_threads_results_before_growth),
		cmocka_unit_test(fini_with_result_out_aborts),
		cmocka_unit_test(fini_after_all_returned),
		cmocka_unit_test(freed_result_unaddressable_under_memcheck),
	};
	return cmocka_run_group_tests_name("alloc", tests, NULL, NULL);
}
