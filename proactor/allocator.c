/*
 * allocator.c - the per-proactor free list of results.
 *
 * Results are carved from chunks that grow geometrically (64, 128, ... up to
 * 4096 results per chunk) and are never returned to the C library until the
 * proactor is destroyed.  All calls happen under the proactor mutex, at
 * start time (get) and after dispatch (put), so nothing allocates between
 * the start of an operation and its completion: a completion cannot be lost
 * to ENOMEM.  Unless NDEBUG is defined, px__alloc_fini aborts with a message
 * when a result was never given back (see there).
 *
 * The free results are split over PX_ALLOC_SLOTS lists, and a thread gives
 * back to and takes from the list of its own slot (a number it draws at
 * its first call), falling back to the other lists only when its own is
 * empty, and growing only when all are.  A thread mostly starts the next
 * operations of the sessions whose callbacks it runs, so the record it
 * takes is one it freed a moment ago, still in its CPU's cache.  With one
 * shared list two loop threads alternated on it, and each start took (and
 * zeroed) a record whose lines the other CPU held; on a virtual machine
 * whose two vCPUs share no cache each such line costs a few hundred
 * nanoseconds (docs/PERFORMANCE.md, "A free list per thread").
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/*
 * Under valgrind's memcheck (builds with its header and without NDEBUG,
 * as the tests' are), a free result is a freed block of a memory pool:
 * memcheck reports a read or write of a result given back, with where it
 * was given back, as it would for free(3).  Without this the chunks are
 * one live allocation to memcheck and to ASan alike, and a use of a
 * result after its callback (a stale completion, a late cancel) goes
 * unseen.  Only the free list's link (link.next) stays accessible in a
 * free result.  Release builds (NDEBUG) have none of it.
 */
#if defined(PX_HAVE_MEMCHECK_H) && !defined(NDEBUG)
#include <valgrind/memcheck.h>
#define ALLOC_VG 1
/* The link of a free result, the only bytes the free list may touch. */
static void alloc_vg_link(px_result *r)
{
	VALGRIND_MAKE_MEM_DEFINED(&r->link.next, sizeof(r->link.next));
}
#endif

#define PX_CHUNK_MIN 64
#define PX_CHUNK_MAX 4096

void px__alloc_init(px_allocator *a, size_t priv_size)
{
	memset(a, 0, sizeof(*a));
#ifdef ALLOC_VG
	VALGRIND_CREATE_MEMPOOL(a, 0, 0);
#endif
	/* Whole cache lines per result, so that two results never share a
	 * line: each is written by the thread that runs its operation. */
	a->size = PX_LINES(PX_RESULT_HDR + priv_size);
	a->next_chunk = PX_CHUNK_MIN;
}

/* This thread's slot, drawn once per thread from a process-wide count. */
static __thread unsigned alloc_tls_slot;   /* slot + 1; 0 = not drawn */
static atomic_uint alloc_next_slot;

static px_alloc_slot *alloc_my_slot(px_allocator *a)
{
	unsigned s = alloc_tls_slot;
	if (!s) {
		s = atomic_fetch_add_explicit(&alloc_next_slot, 1,
					      memory_order_relaxed) %
			    PX_ALLOC_SLOTS + 1;
		alloc_tls_slot = s;
	}
	return &a->slot[s - 1];
}

static int alloc_grow(px_allocator *a, px_alloc_slot *to)
{
	if (a->nchunks == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		void **c = realloc(a->chunks, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		a->chunks = c;
		a->cap = cap;
	}
	size_t n = a->next_chunk;
	char *mem = aligned_alloc(PX_CACHE_LINE, n * a->size);
	if (!mem)
		return -ENOMEM;
	a->chunks[a->nchunks++] = mem;
	for (size_t i = n; i-- > 0;) {
		px_result *r = (px_result *)(void *)(mem + i * a->size);
		r->state = PX_RS_FREE;
		r->link.next = (px_link *)to->free;
		to->free = r;
	}
#ifdef ALLOC_VG
	VALGRIND_MAKE_MEM_NOACCESS(mem, n * a->size);
	for (size_t i = 0; i < n; i++)
		alloc_vg_link((px_result *)(void *)(mem + i * a->size));
#endif
	a->nfree += n;
	a->ntotal += n;
	if (a->next_chunk < PX_CHUNK_MAX)
		a->next_chunk *= 2;
	return 0;
}

px_result *px__alloc_get(px_allocator *a)
{
	px_alloc_slot *from = alloc_my_slot(a);
	if (!from->free) {
		/* Another thread's list before a new chunk. */
		size_t k = (size_t)(from - a->slot);
		for (size_t i = 1; i < PX_ALLOC_SLOTS; i++) {
			px_alloc_slot *o = &a->slot[(k + i) % PX_ALLOC_SLOTS];
			if (o->free) {
				from = o;
				break;
			}
		}
		if (!from->free && alloc_grow(a, from) < 0)
			return NULL;
	}
	px_result *r = from->free;
	from->free = (px_result *)(void *)r->link.next;
	a->nfree--;
#ifdef ALLOC_VG
	VALGRIND_MEMPOOL_ALLOC(a, r, a->size);
#endif
	memset(r, 0, a->size);
	r->state = PX_RS_INITIALIZED;
	r->c.fd = -1;
	r->c.new_fd = -1;
	return r;
}

void px__alloc_put(px_allocator *a, px_result *r)
{
#ifndef NDEBUG
	/* Still on its descriptor's list (px_proactor.byfd): freeing it
	 * would leave that list pointing into a reused record. */
	if (px_link_linked(&r->flink)) {
		fprintf(stderr, "proactor: an operation record freed while still "
			"listed under its descriptor (fd %d, op %d)\n",
			r->c.fd, (int)r->c.op);
		abort();
	}
	/* Poison so a use after free shows up in tests. */
	memset(r, 0x5a, a->size);
#endif
	r->state = PX_RS_FREE;
	r->plink.next = r->plink.prev = NULL;
	r->link.prev = NULL;
	px_alloc_slot *to = alloc_my_slot(a);
	r->link.next = (px_link *)to->free;
	to->free = r;
	a->nfree++;
#ifdef ALLOC_VG
	VALGRIND_MEMPOOL_FREE(a, r);
	alloc_vg_link(r);
#endif
}

void px__alloc_fini(px_allocator *a)
{
#ifndef NDEBUG
	/* Balance: at destroy every result has been dispatched and given
	 * back.  One still out is a completion that was lost (its callback
	 * never ran) or a record that leaked; say so loudly in the builds
	 * the tests use. */
	if (a->nfree != a->ntotal) {
		fprintf(stderr,
			"proactor: %zu of %zu operation records were not given "
			"back before destroy (a lost completion or a leak)\n",
			a->ntotal - a->nfree, a->ntotal);
		abort();
	}
#endif
#ifdef ALLOC_VG
	/* (A proactor whose creation failed early never set it up.) */
	if (VALGRIND_MEMPOOL_EXISTS(a))
		VALGRIND_DESTROY_MEMPOOL(a);
#endif
	for (size_t i = 0; i < a->nchunks; i++)
		free(a->chunks[i]);
	free(a->chunks);
	memset(a, 0, sizeof(*a));
}
