/*
 * select_class.c - what the library knows of the readiness provider
 * (providers/select.c): its waits, interrupts and presets.  It has no keys
 * of its own; its validate hook refuses wait=linux_rt on a shared
 * processor.  Included by providers/classes.c, never compiled alone.
 */
#include <stdio.h>
#include <string.h>

#ifndef PX_CLASS_LIST_ONLY
extern const px_provider_ops px__provider_select_ops PX_HIDDEN;
#endif

#define SELC_GENERIC_INTRS                                                     \
	((1u << PX_INTR_PIPE) | (1u << PX_INTR_EVENTFD) | (1u << PX_INTR_SIGNAL))

static const px_wait_desc selc_waits[] = {
	{ "epoll", "an epoll set (Linux); any number of descriptors",
	  SELC_GENERIC_INTRS, PX_INTR_EVENTFD },
	{ "poll", "poll(2) over an array rebuilt by the leader",
	  SELC_GENERIC_INTRS, PX_INTR_EVENTFD },
	{ "select", "select(2); descriptors below FD_SETSIZE only",
	  SELC_GENERIC_INTRS, PX_INTR_EVENTFD },
	/* An eventfd raises no signal (no O_ASYNC): pipe or signal only. */
	{ "linux_rt", "a real-time signal per descriptor (F_SETSIG, O_ASYNC) "
		      "taken with sigtimedwait (Linux); dedicated processor only",
	  (1u << PX_INTR_PIPE) | (1u << PX_INTR_SIGNAL), PX_INTR_PIPE },
};

static const px_preset_desc selc_presets[] = {
	{ "epoll", "epoll", PX_PROCESSOR_SHARED },
	{ "poll", "poll", PX_PROCESSOR_SHARED },
	{ "select", "select", PX_PROCESSOR_SHARED },
	{ "epoll-dedicated", "epoll", PX_PROCESSOR_DEDICATED },
	{ "poll-dedicated", "poll", PX_PROCESSOR_DEDICATED },
	{ "select-dedicated", "select", PX_PROCESSOR_DEDICATED },
	{ "linux-rt-dedicated", "linux_rt", PX_PROCESSOR_DEDICATED },
};

/* The kernel sends a descriptor's signal to one thread named in advance
 * (F_SETOWN_EX); only a dedicated processor has one thread that always
 * leads. */
static int selc_validate(const void *settings, const px_processor_config *pc,
			 char *err, size_t errlen)
{
	(void)settings;
	if (strcmp(pc->wait, "linux_rt") || pc->processor == PX_PROCESSOR_DEDICATED)
		return 0;
	if (err && errlen)
		snprintf(err, errlen,
			 "wait=linux_rt needs processor=dedicated: the kernel "
			 "sends each descriptor's signal to one thread named in "
			 "advance, and only a dedicated processor has one thread "
			 "that always leads");
	return -EINVAL;
}

static const px_provider_class px_select_class = {
	.name = "select",
	.summary = "completions emulated over readiness (select, poll or epoll)",
	.native_ops = PX_OPS_IO,
	.vectored_ops = PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |
			PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE),
	.waits = selc_waits,
	.nwaits = sizeof(selc_waits) / sizeof(selc_waits[0]),
	.presets = selc_presets,
	.npresets = sizeof(selc_presets) / sizeof(selc_presets[0]),
	.validate = selc_validate,
	.auto_rank = 20,
#ifndef PX_CLASS_LIST_ONLY
	.ops = &px__provider_select_ops,
#endif
};
