/*
 * list.c - debug checks for the intrusive list in internal.h.
 *
 * A result may be on one list at a time.  Inserting a link that is still
 * linked, or removing one that is not, is a bug in the library; in debug
 * builds it stops the program at the place of the mistake rather than
 * corrupting two lists silently.
 */
#include <assert.h>

#include "internal.h"

#ifndef NDEBUG
void px__list_check_insert(const px_link *l)
{
	assert(l->next == NULL && l->prev == NULL &&
	       "px_list: inserting a link that is already on a list");
}

void px__list_check_remove(const px_list *list, const px_link *l)
{
	assert(list->count > 0 && "px_list: removing from an empty list");
	assert(l->next != NULL && l->prev != NULL &&
	       "px_list: removing a link that is on no list");
	assert(l->next->prev == l && l->prev->next == l &&
	       "px_list: link is not where its neighbours say");
	(void)list;
	(void)l;
}
#endif
