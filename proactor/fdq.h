/*
 * fdq.h - the per-descriptor operation queue shared by the providers.
 *
 * Table.  One entry per descriptor number, created the first time a start
 * uses that number and kept until px__fdq_fini, so its address never
 * changes: a provider may hold a pointer to an entry across an unlock of
 * the proactor mutex, or inside a request the kernel owns, while the table
 * of pointers itself grows.  The table grows by descriptor number (to the
 * next power of two above it); before growing it checks that the number
 * is an open descriptor, so a start on a huge number that is not open
 * fails with -EBADF at once instead of sizing the table by that number.
 * Numbers below the current size get an entry without that check: the
 * provider's own start finds out whether they are open.
 *
 * Queues.  Each entry has one FIFO per direction, of results linked
 * through px_result.plink, oldest first:
 *
 *   PX_FDQ_RD   read_stream, read_dgram, accept
 *   PX_FDQ_WR   write_stream, write_dgram, connect
 *
 * read_file and write_file carry their own offset and are never queued
 * (px__fdq_dir says -1).  The rules every provider keeps:
 *   - only the head of a queue is in progress (tried, or in the kernel);
 *     the next one starts when the head leaves, so operations of one
 *     direction on one descriptor complete in start order and a stream's
 *     bytes are never reordered, whatever the number of threads;
 *   - the two directions are independent: a read waiting for data never
 *     holds back a write, and the reverse;
 *   - a result leaves its queue when it completes or is cancelled, and an
 *     entry with both queues empty is idle (the number may be closed and
 *     reused before its next start, so providers forget what they learnt
 *     about the descriptor then).
 *
 * Providers extend an entry with fields of their own: px__fdq_init takes
 * the size of the provider's entry type, whose first member is a
 * px_fdq_entry.  Entries are zeroed when created.  Nothing here locks:
 * every call is made with the proactor mutex held.
 */
#ifndef PX_FDQ_H
#define PX_FDQ_H

#include "internal.h"

#define PX_FDQ_RD 0
#define PX_FDQ_WR 1

typedef struct px_fdq_entry {
	px_list q[2];      /* pending results (plink), oldest first */
	int fd;            /* the descriptor number of this entry */
} px_fdq_entry;

typedef struct px_fdq {
	px_fdq_entry **tab;   /* indexed by descriptor number */
	size_t n;             /* slots in tab */
	size_t entry_size;    /* bytes per entry, provider fields included */
} px_fdq;

/* An empty table whose entries are entry_size bytes (at least
 * sizeof(px_fdq_entry)). */
void px__fdq_init(px_fdq *t, size_t entry_size) PX_HIDDEN;
/* Free every entry and the table. */
void px__fdq_fini(px_fdq *t) PX_HIDDEN;
/* The entry of fd if it was ever created, else NULL. */
static inline px_fdq_entry *px_fdq_lookup(const px_fdq *t, int fd)
{
	if (fd < 0 || (size_t)fd >= t->n)
		return NULL;
	return t->tab[fd];
}

/* The entry of fd, created (zeroed) on first use.  Returns 0, -EBADF when
 * fd is negative or lies beyond the table and is not open, or -ENOMEM. */
int px__fdq_get_slow(px_fdq *t, int fd, px_fdq_entry **out) PX_HIDDEN;
static inline int px__fdq_get(px_fdq *t, int fd, px_fdq_entry **out)
{
	/* Inline for the common case: an entry that exists. */
	px_fdq_entry *e = px_fdq_lookup(t, fd);

	if (e) {
		*out = e;
		return 0;
	}
	return px__fdq_get_slow(t, fd, out);
}
/* The queue direction of op, or -1 for an operation that is not queued.
 * Inline: a start and its completion ask it several times each. */
static inline int px__fdq_dir(px_op op)
{
	switch (op) {
	case PX_OP_READ_STREAM:
	case PX_OP_READ_DGRAM:
	case PX_OP_ACCEPT:
		return PX_FDQ_RD;
	case PX_OP_WRITE_STREAM:
	case PX_OP_WRITE_DGRAM:
	case PX_OP_CONNECT:
		return PX_FDQ_WR;
	default:
		return -1;
	}
}

/* (1u << PX_FDQ_RD) | (1u << PX_FDQ_WR) for the non-empty queues. */
static inline unsigned px_fdq_queued(const px_fdq_entry *e)
{
	return (px_list_empty(&e->q[PX_FDQ_RD]) ? 0u : 1u << PX_FDQ_RD) |
	       (px_list_empty(&e->q[PX_FDQ_WR]) ? 0u : 1u << PX_FDQ_WR);
}

static inline bool px_fdq_idle(const px_fdq_entry *e)
{
	return px_fdq_queued(e) == 0;
}

/* The oldest result of direction dir, or NULL. */
static inline px_result *px_fdq_head(const px_fdq_entry *e, int dir)
{
	px_link *l = px_list_first(&e->q[dir]);

	return l ? px_result_of_plink(l) : NULL;
}

/* Queue r behind everything older in direction dir.  Returns true when r
 * is the head (nothing older: it may start now). */
static inline bool px_fdq_push(px_fdq_entry *e, int dir, px_result *r)
{
	px_list_push_back(&e->q[dir], &r->plink);
	return px_list_count(&e->q[dir]) == 1;
}

/* Take r out of direction dir.  Returns true when r was the head (the next
 * one, if any, is now the head and may start). */
static inline bool px_fdq_remove(px_fdq_entry *e, int dir, px_result *r)
{
	bool head = px_list_first(&e->q[dir]) == &r->plink;

	px_list_remove(&e->q[dir], &r->plink);
	return head;
}

/* File writes are not queued, but two to the same bytes must still land
 * in start order: the io_uring and Linux AIO providers keep each
 * descriptor's unfinished file writes on a list of their own (through
 * plink, oldest first) and hold back a write that overlaps an earlier one
 * ("Writes to one place" in providers/uring.c and linux_aio.c).  Whether
 * file write r overlaps one on ws before stop (NULL: the whole list); a
 * range reaching past the top of the offsets counts to the top. */
static inline bool px_fdq_fwrite_overlaps(const px_list *ws,
					  const px_result *r,
					  const px_link *stop)
{
	uint64_t lo = r->c.offset;
	uint64_t hi = lo + r->c.len < lo ? UINT64_MAX : lo + r->c.len;

	for (px_link *l = px_list_first(ws); l && l != stop;
	     l = px_list_next(ws, l)) {
		const px_result *w = px_result_of_plink(l);
		uint64_t wlo = w->c.offset;
		uint64_t whi = wlo + w->c.len < wlo ? UINT64_MAX
						    : wlo + w->c.len;

		if (wlo < hi && lo < whi)
			return true;
	}
	return false;
}

#endif /* PX_FDQ_H */
