/*
 * fdq.c - the per-descriptor table and queues of fdq.h.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "fdq.h"

#define FDQ_MIN_SLOTS 64u

void px__fdq_init(px_fdq *t, size_t entry_size)
{
	t->tab = NULL;
	t->n = 0;
	t->entry_size = entry_size < sizeof(px_fdq_entry) ? sizeof(px_fdq_entry)
							  : entry_size;
}

void px__fdq_fini(px_fdq *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->tab[i]);
	free(t->tab);
	t->tab = NULL;
	t->n = 0;
}

/* Make room for slot fd.  Only for a descriptor that is open: the table is
 * sized by the number, and a number nobody opened must cost nothing. */
static int fdq_grow(px_fdq *t, int fd)
{
	size_t n = t->n ? t->n : FDQ_MIN_SLOTS;
	px_fdq_entry **tab;

	if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		return -EBADF;
	while (n <= (size_t)fd) {
		if (n > SIZE_MAX / 2 / sizeof(*tab))
			return -ENOMEM;
		n *= 2;
	}
	tab = realloc(t->tab, n * sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	memset(tab + t->n, 0, (n - t->n) * sizeof(*tab));
	t->tab = tab;
	t->n = n;
	return 0;
}

int px__fdq_get_slow(px_fdq *t, int fd, px_fdq_entry **out)
{
	px_fdq_entry *e;
	int rc;

	if (fd < 0)
		return -EBADF;
	if ((size_t)fd >= t->n && (rc = fdq_grow(t, fd)) < 0)
		return rc;
	e = t->tab[fd];
	if (!e) {
		e = px__zalloc_lines(t->entry_size);
		if (!e)
			return -ENOMEM;
		px_list_init(&e->q[PX_FDQ_RD]);
		px_list_init(&e->q[PX_FDQ_WR]);
		e->fd = fd;
		t->tab[fd] = e;
	}
	*out = e;
	return 0;
}
