/*
 * uring_class.c - what the library knows of the io_uring provider
 * (providers/uring.c): one wait (the ring itself) woken by its own native
 * interrupt, two presets, and four keys of its own, ring=, ring_flags=,
 * rings= and read_gate=.
 * Included by providers/classes.c, never compiled alone; it needs no
 * liburing, so the engine list can be printed at configure time.
 */
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/io_uring.h>

#include "class_keys.h"
#include "uring_class.h"

#ifndef PX_CLASS_LIST_ONLY
extern const px_provider_ops px__provider_uring_ops PX_HIDDEN;
#endif

static const px_wait_desc uringc_waits[] = {
	{ "uring", "the completion queue of the ring (io_uring_enter)",
	  1u << PX_INTR_NATIVE, PX_INTR_NATIVE },
};

static const px_preset_desc uringc_presets[] = {
	{ "uring", NULL, PX_PROCESSOR_SHARED },
	{ "uring-dedicated", NULL, PX_PROCESSOR_DEDICATED },
};

enum { URINGC_RING, URINGC_RING_FLAGS, URINGC_RINGS, URINGC_READ_GATE };

static const px_key_desc uringc_keys[] = {
	[URINGC_RING] = { "ring", "a number of SQ entries from 0 (default) to 32768" },
	[URINGC_RING_FLAGS] = { "ring_flags", "a comma list of coop_taskrun and sqpoll" },
	[URINGC_RINGS] = { "rings", "a number of rings from 0 (default: one per CPU, at most 4) to 16" },
	[URINGC_READ_GATE] = { "read_gate", "socket reads waiting in a ring from which new ones wait on an epoll set, 0 (never) to 1000000; not given: 8, only for sockets whose peer this engine does not serve" },
};

static const struct {
	const char *name;
	unsigned bit;
} uringc_flags[] = {
	{ "coop_taskrun", PX_URING_COOP_TASKRUN },
	{ "sqpoll", PX_URING_SQPOLL },
};

static void uringc_init(void *s)
{
	memset(s, 0, sizeof(px_uring_settings));
}

static int uringc_bad(char *err, size_t errlen, unsigned key, const char *val,
		      size_t vlen)
{
	return px_class_bad_value(&uringc_keys[key], val, vlen, err, errlen);
}

static int uringc_parse(void *settings, unsigned key, const char *val,
			size_t vlen, char *err, size_t errlen)
{
	px_uring_settings *s = settings;

	if (key == URINGC_READ_GATE) {
		unsigned long n;
		if (!px_class_number(val, vlen, PX_URING_GATE_MAX, &n))
			return uringc_bad(err, errlen, key, val, vlen);
		s->gate1 = (unsigned)n + 1;
		return 0;
	}
	if (key == URINGC_RING || key == URINGC_RINGS) {
		unsigned long n;
		unsigned long max = key == URINGC_RING ? PX_URING_RING_MAX
						       : PX_URING_RINGS_KEY_MAX;
		if (!px_class_number(val, vlen, max, &n))
			return uringc_bad(err, errlen, key, val, vlen);
		if (key == URINGC_RING)
			s->entries = (unsigned)n;
		else
			s->rings = (unsigned)n;
		return 0;
	}
	/* ring_flags: a comma list of names. */
	unsigned bits = 0;
	const char *p = val, *end = val + vlen;
	for (;;) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		size_t n = (size_t)((c ? c : end) - p);
		size_t i;
		for (i = 0; i < sizeof(uringc_flags) / sizeof(uringc_flags[0]); i++)
			if (strlen(uringc_flags[i].name) == n &&
			    !memcmp(uringc_flags[i].name, p, n))
				break;
		if (i == sizeof(uringc_flags) / sizeof(uringc_flags[0]))
			return uringc_bad(err, errlen, key, val, vlen);
		bits |= uringc_flags[i].bit;
		if (!c)
			break;
		p = c + 1;
	}
	s->flags = bits;
	return 0;
}

/* A dedicated processor has one thread that leads, and the provider
 * gives it one ring: rings= above 1 would be run as one while the
 * engine's name said otherwise, so it is refused, as the POSIX AIO
 * class refuses rtsig= beside a wait that takes no signal. */
static int uringc_validate(const void *settings, const px_processor_config *pc,
			   char *err, size_t errlen)
{
	const px_uring_settings *s = settings;

	if (s->rings <= 1 || pc->processor != PX_PROCESSOR_DEDICATED)
		return 0;
	if (err && errlen)
		snprintf(err, errlen,
			 "rings=%u is for processor=shared: with "
			 "processor=dedicated one thread leads, on one ring "
			 "(rings=0 or 1)",
			 s->rings);
	return -EINVAL;
}

static int uringc_format(const void *settings, char *buf, size_t len)
{
	const px_uring_settings *s = settings;
	size_t pos = 0;

	if (len)
		buf[0] = '\0';
	if (s->entries)
		px_class_put(buf, len, &pos, "ring=%u", s->entries);
	if (s->flags) {
		const char *sep = pos ? " ring_flags=" : "ring_flags=";
		for (size_t i = 0; i < sizeof(uringc_flags) / sizeof(uringc_flags[0]); i++) {
			if (!(s->flags & uringc_flags[i].bit))
				continue;
			px_class_put(buf, len, &pos, "%s%s", sep, uringc_flags[i].name);
			sep = ",";
		}
	}
	if (s->rings)
		px_class_put(buf, len, &pos, "%srings=%u", pos ? " " : "", s->rings);
	if (s->gate1)
		px_class_put(buf, len, &pos, "%sread_gate=%u", pos ? " " : "",
			     s->gate1 - 1);
	return (int)pos;
}

/* Set up a two-entry ring and close it again: refused by a kernel without
 * io_uring (ENOSYS), one where it is switched off or filtered (EPERM), or
 * one short of locked memory (ENOMEM).  The provider also needs
 * IORING_FEAT_EXT_ARG (5.11) for its timed wait. */
static int uringc_probe(char *why, size_t len)
{
	struct io_uring_params p;
	int fd, rc = 0;

	memset(&p, 0, sizeof(p));
	fd = (int)syscall(__NR_io_uring_setup, 2, &p);
	if (fd < 0) {
		rc = -errno;
		if (why && len)
			snprintf(why, len, "io_uring_setup: %s", strerror(errno));
		return rc;
	}
	if (!(p.features & IORING_FEAT_EXT_ARG)) {
		rc = -ENOSYS;
		if (why && len)
			snprintf(why, len, "this kernel's io_uring has no timed "
				 "wait (IORING_FEAT_EXT_ARG, Linux 5.11)");
	}
	close(fd);
	return rc;
}

static const px_provider_class px_uring_class = {
	.name = "uring",
	.summary = "io_uring through liburing: every operation native",
	.native_ops = PX_OPS_IO,
	.vectored_ops = PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |
			PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE),
	.waits = uringc_waits,
	.nwaits = sizeof(uringc_waits) / sizeof(uringc_waits[0]),
	.presets = uringc_presets,
	.npresets = sizeof(uringc_presets) / sizeof(uringc_presets[0]),
	.keys = uringc_keys,
	.nkeys = sizeof(uringc_keys) / sizeof(uringc_keys[0]),
	.settings_size = sizeof(px_uring_settings),
	.settings_init = uringc_init,
	.parse_key = uringc_parse,
	.validate = uringc_validate,
	.format = uringc_format,
	.probe = uringc_probe,
	.auto_rank = 10,
#ifndef PX_CLASS_LIST_ONLY
	.ops = &px__provider_uring_ops,
#endif
};
