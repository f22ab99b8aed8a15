/*
 * registry.c - the providers built into this library, and which
 * provider / wait / interrupt combinations make sense.
 *
 * The combination table knows every engine the configuration language can
 * name, built in or not, so a config naming io_uring parses everywhere;
 * px_provider_lookup() is what says whether it was built (NULL if not, and
 * px_create then fails with -ENOSYS).
 */
#include "internal.h"

/* Used by config.c: the valid choices for a provider (w == DEFAULT: its
 * waits) or for a provider and wait (its interrupts), as a mask of
 * (1u << value); *def gets the default choice.  0 when p (or p with w) is
 * not a valid engine. */

#define BIT(v) (1u << (v))

/* The readiness provider's waits share the three generic interrupts. */
#define PX_INTRS_GENERIC (BIT(PX_INTR_PIPE) | BIT(PX_INTR_EVENTFD) | BIT(PX_INTR_SIGNAL))

static const struct px_provider_info {
	const px_provider_ops *ops;   /* NULL when not built in */
	unsigned waits;               /* BIT(PX_WAIT_*) */
	px_wait_type default_wait;
} px_providers[PX_PROVIDER_COUNT] = {
	[PX_PROVIDER_SELECT] = {
		.ops = &px_provider_select_ops,
		.waits = BIT(PX_WAIT_SELECT) | BIT(PX_WAIT_POLL) | BIT(PX_WAIT_EPOLL),
		.default_wait = PX_WAIT_EPOLL,
	},
	[PX_PROVIDER_URING] = {
#ifdef PX_HAVE_URING
		.ops = &px_provider_uring_ops,
#endif
		.waits = BIT(PX_WAIT_URING),
		.default_wait = PX_WAIT_URING,
	},
};

static const struct px_wait_info {
	unsigned intrs;               /* BIT(PX_INTR_*) */
	px_interrupt_type default_intr;
} px_waits[PX_WAIT_COUNT] = {
	[PX_WAIT_SELECT] = { PX_INTRS_GENERIC, PX_INTR_EVENTFD },
	[PX_WAIT_POLL] = { PX_INTRS_GENERIC, PX_INTR_EVENTFD },
	[PX_WAIT_EPOLL] = { PX_INTRS_GENERIC, PX_INTR_EVENTFD },
	/* io_uring is woken by a message through its own ring. */
	[PX_WAIT_URING] = { BIT(PX_INTR_NATIVE), PX_INTR_NATIVE },
};

const px_provider_ops *px_provider_lookup(px_provider_type t)
{
	if ((unsigned)t >= PX_PROVIDER_COUNT)
		return NULL;
	return px_providers[t].ops;
}

unsigned px_registry_choices(px_provider_type p, px_wait_type w, int *def)
{
	if ((unsigned)p >= PX_PROVIDER_COUNT || !px_providers[p].waits)
		return 0;
	if (w == PX_WAIT_DEFAULT) {
		if (def)
			*def = px_providers[p].default_wait;
		return px_providers[p].waits;
	}
	if ((unsigned)w >= PX_WAIT_COUNT || !(px_providers[p].waits & BIT(w)))
		return 0;
	if (def)
		*def = px_waits[w].default_intr;
	return px_waits[w].intrs;
}
