/*
 * intr.c - the interrupt strategy factory and the names of the interrupt
 * types.
 *
 * A wait strategy asks here for the interrupt its config names.  Each
 * strategy lives in its own file (pipe.c, eventfd.c, signal.c) and exports
 * only its constructor.  A "native" interrupt belongs to a wait mechanism
 * that can wake itself; its provider builds it and never comes here.
 */
#include <string.h>

#include "internal.h"

int px__intr_type_n(const char *name, size_t n)
{
	for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++) {
		const char *s = px__intr_name(t);
		if (strlen(s) == n && !memcmp(name, s, n))
			return t;
	}
	return -1;
}

bool px__intr_check_foreign(px_intr *in)
{
	return px__intr_check_foreign_signed(in, 0);
}

bool px__intr_check_foreign_signed(px_intr *in, int stamp)
{
	if (in->fd < 0)
		return false;
	if (atomic_load_explicit(&in->foreign, memory_order_relaxed))
		return true;
	if (px__own_fd_is_signed(in->fd, &in->fd_id, stamp) &&
	    (!in->ops->writes_own || in->ops->writes_own(in)))
		return false;
	/* (a poller's own view, such as poll's intr_gone, follows at its
	 * leader's next prepare) */
	atomic_store_explicit(&in->foreign, true, memory_order_relaxed);
	atomic_store_explicit(&in->gone, true, memory_order_relaxed);
	return true;
}

int px__intr_type(const char *name)
{
	return name ? px__intr_type_n(name, strlen(name)) : -1;
}

int px__intr_create(const px_processor_config *cfg, px_intr **out)
{
	if (!cfg || !out)
		return -EINVAL;
	switch (px__intr_type(cfg->interrupt)) {
	case PX_INTR_PIPE:
		return px__intr_pipe_create(cfg, out);
	case PX_INTR_EVENTFD:
		return px__intr_eventfd_create(cfg, out);
	case PX_INTR_SIGNAL:
		return px__intr_signal_create(cfg, out);
	default:
		return -EINVAL;
	}
}
