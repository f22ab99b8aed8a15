/*
 * classes.c - the one list of the providers built into this library.
 *
 * Each provider describes itself in providers/NAME_class.c (waits,
 * interrupts, presets, its own keys, a probe): a constant
 * px_provider_class, included here so that this file is the only place
 * that names them all.  The configuration language, the "auto" choice and
 * the messages that list valid choices are all derived from this list
 * (config/), as is the engine list of the test suite (test/engines.c,
 * which compiles this file at configure time with PX_CLASS_LIST_ONLY
 * defined: class data without the providers' code).
 *
 * Adding a provider: write providers/NAME.c and providers/NAME_class.c,
 * add two lines below, and its sources to meson.build (see
 * docs/ARCHITECTURE.md, "Adding a provider").
 */
#include "internal.h"

#include "select_class.c"
#ifdef PX_HAVE_URING
#include "uring_class.c"
#endif
#ifdef PX_HAVE_LIBAIO
#include "linux_aio_class.c"
#endif
#include "posix_aio_class.c"

const px_provider_class *const px__classes[] = {
	&px_select_class,
#ifdef PX_HAVE_URING
	&px_uring_class,
#endif
#ifdef PX_HAVE_LIBAIO
	&px_laio_class,
#endif
	&px_posix_class,
	NULL
};

/* Known providers left out of this build (their library was not found). */
const char *const px__classes_not_built[] = {
#ifndef PX_HAVE_URING
	"uring",
#endif
#ifndef PX_HAVE_LIBAIO
	"linux_aio",
#endif
	NULL
};
