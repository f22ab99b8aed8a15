/*
 * intr.c - the interrupt strategy factory.
 *
 * A wait strategy asks here for the interrupt its config names.  Each
 * strategy lives in its own file (pipe.c, eventfd.c, signal.c) and exports
 * only its constructor; the io_uring wait has its own native interrupt and
 * never comes here.
 */
#include "internal.h"

/* The constructors, one per strategy file.  Each fills *out or returns
 * -errno. */

int px_intr_create(const px_processor_config *cfg, px_intr **out)
{
	if (!cfg || !out)
		return -EINVAL;
	switch (cfg->interrupt) {
	case PX_INTR_PIPE:
		return px_intr_pipe_create(cfg, out);
	case PX_INTR_EVENTFD:
		return px_intr_eventfd_create(cfg, out);
	case PX_INTR_SIGNAL:
		return px_intr_signal_create(cfg, out);
	default:
		return -EINVAL;
	}
}
