/*
 * fuzz_config.c - libFuzzer target for the configuration parser.
 *
 * The input is configuration text.  Oracles:
 *  - px_config_parse never overruns, and its message is NUL-terminated
 *    within any errlen (a second parse with a tiny buffer checks it);
 *  - a text that parses formats (px_config_format) to a canonical text
 *    that parses again to the same configuration, and formats to the same
 *    text again (a round trip, then a fixed point);
 *  - px_config_format reports the length it needs, like snprintf, and
 *    never writes past len.
 *  - for one text in eight that parses (by a hash of the text, so that an
 *    input replays; PX_FUZZ_CREATE=1 every one, 0 none): px_create on it
 *    succeeds or fails with one of the errors px_create(3) gives, its
 *    message NUL-terminated and not empty; a proactor it made names a
 *    text (px_engine_name) that parses again to a configuration with the
 *    same provider, wait, interrupt, processor and ops per processor as
 *    the text resolved (unless the primary is auto, which px_create picks
 *    on this kernel), and px_destroy returns 0 (LeakSanitizer checks
 *    that nothing is left).
 * A violation aborts, which libFuzzer reports with the input.
 *
 * Built by scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"  /* px__config_resolve: compare resolved configs */
#include "proactor.h"

#define MAX_TEXT 4096

static void die(const char *what, const char *a, const char *b)
{
	fprintf(stderr, "fuzz_config: %s\n  first:  '%s'\n  second: '%s'\n",
		what, a ? a : "", b ? b : "");
	abort();
}

static int same_proc(const px_processor_config *a, const px_processor_config *b)
{
	return a->processor == b->processor &&
	       !strcmp(a->provider, b->provider) && !strcmp(a->wait, b->wait) &&
	       !strcmp(a->interrupt, b->interrupt) && a->flags == b->flags &&
	       a->max_aio == b->max_aio && a->ops == b->ops &&
	       a->intr_signo == b->intr_signo && !strcmp(a->words, b->words);
}

static int same(const px_config *a, const px_config *b)
{
	return same_proc(&a->primary, &b->primary) &&
	       same_proc(&a->secondary, &b->secondary) &&
	       a->followers == b->followers && a->flags == b->flags;
}

/* The engine a proactor runs is the one the text named, resolved: the
 * same provider, wait, interrupt, processor and operations per
 * processor (max_aio may differ: px_create sizes the default by the
 * engine, px__config_resolve by RLIMIT_NOFILE). */
static int same_engine(const px_processor_config *a,
		       const px_processor_config *b)
{
	return a->processor == b->processor &&
	       !strcmp(a->provider, b->provider) && !strcmp(a->wait, b->wait) &&
	       !strcmp(a->interrupt, b->interrupt) && a->ops == b->ops;
}

static int create_wanted(const char *text, size_t size)
{
	static int mode = -2;
	if (mode == -2) {
		const char *e = getenv("PX_FUZZ_CREATE");
		mode = e && *e ? atoi(e) != 0 : -1;
	}
	if (mode >= 0)
		return mode;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < size; i++)
		h = (h ^ (uint8_t)text[i]) * 16777619u;
	return h % 8 == 0;
}

static void try_create(const char *text, const px_config *c1)
{
	char err[256];
	px_proactor *px = NULL;
	memset(err, 'x', sizeof err);
	int rc = px_create(&px, text, err, sizeof err);
	if (memchr(err, '\0', sizeof err) == NULL)
		die("px_create's message not NUL-terminated", text, NULL);
	if (rc != 0) {
		if (px)
			die("px_create failed but gave a proactor", text, NULL);
		/* px_create(3): -EINVAL, -ENOSYS, -ENOMEM or another errno
		 * of the system (a resource it ran out of); never a
		 * positive value or 0 with no proactor */
		if (rc > 0 || rc < -4095)
			die("px_create returned no errno", text, err);
		if (!err[0])
			die("px_create failed without a message", text, NULL);
		return;
	}
	if (!px)
		die("px_create returned 0 without a proactor", text, NULL);
	const char *name = px_engine_name(px);
	px_config e, r1 = *c1;
	if (px_config_parse(&e, name, NULL, 0) != 0)
		die("px_engine_name does not parse", text, name);
	if (px__config_resolve(&r1, NULL, 0) != 0 ||
	    px__config_resolve(&e, NULL, 0) != 0)
		die("a config does not resolve", text, name);
	/* an auto primary (no provider, no wait: resolved, it stays so)
	 * is what px_create finds on this kernel, maybe with a secondary */
	if (r1.primary.provider[0] &&
	    (!same_engine(&r1.primary, &e.primary) ||
	     !same_engine(&r1.secondary, &e.secondary)))
		die("px_engine_name is not the engine the text named", text,
		    name);
	rc = px_destroy(px);
	if (rc != 0)
		die("px_destroy failed", text, name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char text[MAX_TEXT + 1];
	char err[256], tiny[4];
	char out1[2048], out2[2048];
	px_config c1, c2;

	if (size > MAX_TEXT)
		size = MAX_TEXT;
	memcpy(text, data, size);
	text[size] = '\0';

	memset(err, 'x', sizeof err);
	int rc = px_config_parse(&c1, text, err, sizeof err);
	if (memchr(err, '\0', sizeof err) == NULL)
		die("error message not NUL-terminated", text, NULL);
	memset(tiny, 'x', sizeof tiny);
	size_t tl = size % sizeof tiny; /* 0..3: 0 must not be written */
	int rc_tiny = px_config_parse(&c2, text, tl ? tiny : NULL, tl);
	if (tl && memchr(tiny, '\0', tl) == NULL)
		die("short error buffer not NUL-terminated", text, NULL);
	if (rc_tiny != rc)
		die("the result depends on the error buffer", text, NULL);
	if (rc != 0) {
		/* -ENOSYS: a provider this build leaves out (no liburing,
		 * say), as px_config_parse(3) says. */
		if (rc != -EINVAL && rc != -ENOSYS)
			die("parse failed with something other than -EINVAL "
			    "or -ENOSYS", text, NULL);
		return 0;
	}

	int n1 = px_config_format(&c1, out1, sizeof out1);
	if (n1 < 0)
		die("a parsed config does not format", text, NULL);
	if ((size_t)n1 >= sizeof out1)
		return 0; /* absurdly long canonical form: not this oracle */
	if (strlen(out1) != (size_t)n1)
		die("format's return is not the length it wrote", text, out1);

	/* Length query and truncation, like snprintf. */
	char small[8];
	memset(small, 'x', sizeof small);
	if (px_config_format(&c1, small, sizeof small) != n1)
		die("format's length depends on the buffer", text, out1);
	if (memchr(small, '\0', sizeof small) == NULL)
		die("truncated format not NUL-terminated", text, out1);
	if (px_config_format(&c1, NULL, 0) != n1)
		die("format(NULL, 0) does not give the length", text, out1);

	rc = px_config_parse(&c2, out1, err, sizeof err);
	if (rc != 0)
		die("the canonical text does not parse", text, out1);
	int n2 = px_config_format(&c2, out2, sizeof out2);
	if (n2 != n1 || strcmp(out1, out2) != 0)
		die("format(parse(format(c))) differs from format(c)", out1, out2);

	/* The same configuration: both resolved (defaults filled in, as
	 * px_create does) compare equal field by field. */
	px_config r1 = c1, r2 = c2;
	if (px__config_resolve(&r1, NULL, 0) != 0 ||
	    px__config_resolve(&r2, NULL, 0) != 0)
		die("a parsed config does not resolve", text, out1);
	if (!same(&r1, &r2))
		die("parse(format(parse(text))) is not parse(text)", text, out1);
	if (create_wanted(text, size))
		try_create(text, &c1);
	return 0;
}
