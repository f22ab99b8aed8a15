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
	return 0;
}
