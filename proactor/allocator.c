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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define PX_CHUNK_MIN 64
#define PX_CHUNK_MAX 4096

void px__alloc_init(px_allocator *a, size_t priv_size)
{
	memset(a, 0, sizeof(*a));
	a->size = PX_RESULT_HDR + ((priv_size + 15) / 16) * 16;
	a->next_chunk = PX_CHUNK_MIN;
}

static int alloc_grow(px_allocator *a)
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
	char *mem = aligned_alloc(16, n * a->size);
	if (!mem)
		return -ENOMEM;
	a->chunks[a->nchunks++] = mem;
	for (size_t i = n; i-- > 0;) {
		px_result *r = (px_result *)(void *)(mem + i * a->size);
		r->state = PX_RS_FREE;
		r->link.next = (px_link *)a->free;
		a->free = r;
	}
	a->nfree += n;
	a->ntotal += n;
	if (a->next_chunk < PX_CHUNK_MAX)
		a->next_chunk *= 2;
	return 0;
}

px_result *px__alloc_get(px_allocator *a)
{
	if (!a->free && alloc_grow(a) < 0)
		return NULL;
	px_result *r = a->free;
	a->free = (px_result *)(void *)r->link.next;
	a->nfree--;
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
	r->link.next = (px_link *)a->free;
	a->free = r;
	a->nfree++;
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
	for (size_t i = 0; i < a->nchunks; i++)
		free(a->chunks[i]);
	free(a->chunks);
	memset(a, 0, sizeof(*a));
}
