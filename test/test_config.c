/*
 * test_config.c - the configuration language, presets, validation and the
 * provider classes (config/, providers/classes.c).
 *
 * Every key with every value, every preset, every error message (each
 * must name the valid choices), the secondary section, and the round trip
 * parse(format(cfg)) == cfg.  What a provider offers (waits, interrupts,
 * presets, own keys) is also walked generically through px__classes, so a
 * new class is covered as soon as it is listed.  Runs the same on builds
 * with and without io_uring: what differs (the uring texts, "auto", the
 * -ENOSYS of a provider not built in) is checked per build.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"
#include "../config/config.h"
#ifdef PX_HAVE_URING
#include "../providers/uring_class.h"
#endif

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The lists messages give, by the providers built in. */
#define TC_PX_WAITS "aiocb, sigwait or callback"
#define TC_PX_KEYS "rtsig, aio_threads, sockets and file_lanes"
#if defined(PX_HAVE_URING) && defined(PX_HAVE_LIBAIO)
#define TC_PROVIDERS "select, uring, linux_aio or posix"
#define TC_WAITS "epoll, poll, select, linux_rt, uring, io_getevents, " TC_PX_WAITS
#define TC_KEYS "followers, ring, ring_flags, rings, read_gate, depth, " TC_PX_KEYS
#elif defined(PX_HAVE_URING)
#define TC_PROVIDERS "select, uring or posix"
#define TC_WAITS "epoll, poll, select, linux_rt, uring, " TC_PX_WAITS
#define TC_KEYS "followers, ring, ring_flags, rings, " TC_PX_KEYS
#elif defined(PX_HAVE_LIBAIO)
#define TC_PROVIDERS "select, linux_aio or posix"
#define TC_WAITS "epoll, poll, select, linux_rt, io_getevents, " TC_PX_WAITS
#define TC_KEYS "followers, depth, " TC_PX_KEYS
#else
#define TC_PROVIDERS "select or posix"
#define TC_WAITS "epoll, poll, select, linux_rt, " TC_PX_WAITS
#define TC_KEYS "followers, " TC_PX_KEYS
#endif

static bool pc_equal(const px_processor_config *a, const px_processor_config *b)
{
	return a->processor == b->processor &&
	       !strcmp(a->provider, b->provider) && !strcmp(a->wait, b->wait) &&
	       !strcmp(a->interrupt, b->interrupt) && a->flags == b->flags &&
	       a->max_aio == b->max_aio && a->ops == b->ops &&
	       a->intr_signo == b->intr_signo && !strcmp(a->words, b->words);
}

static bool cfg_equal(const px_config *a, const px_config *b)
{
	return pc_equal(&a->primary, &b->primary) &&
	       pc_equal(&a->secondary, &b->secondary) &&
	       a->followers == b->followers && a->flags == b->flags;
}

/* Parse text that must be valid. */
static px_config parse_ok(const char *text)
{
	px_config c;
	char err[512] = "x";
	int rc;

	memset(&c, 0x5a, sizeof(c));
	rc = px_config_parse(&c, text, err, sizeof(err));
	if (rc != 0)
		fail_msg("\"%s\" should parse: %d %s", text ? text : "(null)", rc,
			 err);
	assert_string_equal(err, "");
	return c;
}

/* Parse text that must fail with rc; every needle must be in the
 * message. */
static void parse_bad_va(int want, const char *text, va_list ap)
{
	px_config c, before;
	char err[512] = "";
	const char *needle;
	int rc;

	memset(&c, 0x5a, sizeof(c));
	before = c;
	rc = px_config_parse(&c, text, err, sizeof(err));
	if (rc != want)
		fail_msg("\"%s\" should fail with %d, got %d (%s)", text, want, rc,
			 err);
	assert_true(strlen(err) > 0);
	while ((needle = va_arg(ap, const char *)) != NULL) {
		if (!strstr(err, needle))
			fail_msg("\"%s\": message \"%s\" lacks \"%s\"", text, err,
				 needle);
	}
	/* A failed parse leaves the output alone. */
	assert_memory_equal(&c, &before, sizeof(c));
	/* And works without a message buffer. */
	assert_int_equal(px_config_parse(&c, text, NULL, 0), want);
	assert_memory_equal(&c, &before, sizeof(c));
}

static void parse_bad(const char *text, ...)
{
	va_list ap;

	va_start(ap, text);
	parse_bad_va(-EINVAL, text, ap);
	va_end(ap);
}

static void parse_bad_rc(int want, const char *text, ...)
{
	va_list ap;

	va_start(ap, text);
	parse_bad_va(want, text, ap);
	va_end(ap);
}

/* format, check the length contract, parse back, compare. */
static void round_trip(const px_config *c)
{
	char buf[512], small[8];
	px_config back;
	int n = px_config_format(c, buf, sizeof(buf));

	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_int_equal(px_config_format(c, NULL, 0), n);
	assert_int_equal(px_config_format(c, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, buf, sizeof(small) - 1);
	back = parse_ok(buf);
	if (!cfg_equal(c, &back))
		fail_msg("round trip changed the config: \"%s\"", buf);
	/* The canonical text is a fixed point. */
	char again[512];
	assert_int_equal(px_config_format(&back, again, sizeof(again)), n);
	assert_string_equal(again, buf);
}

static void resolve_bad(px_config *c, const char *needle, const char *needle2);

static void expect_pc(const px_processor_config *pc, px_processor_type proc,
		      const char *prov, const char *w, const char *in)
{
	assert_int_equal(pc->processor, proc);
	assert_string_equal(pc->provider, prov);
	assert_string_equal(pc->wait, w);
	assert_string_equal(pc->interrupt, in);
}

static void expect_format_cfg(const px_config *c, const char *want)
{
	char buf[512];

	assert_int_equal(px_config_format(c, buf, sizeof(buf)), (int)strlen(want));
	assert_string_equal(buf, want);
	round_trip(c);
}

static void expect_format(const char *text, const char *want)
{
	px_config c = parse_ok(text);

	expect_format_cfg(&c, want);
}

static const char *proc_name(px_processor_type p)
{
	return p == PX_PROCESSOR_DEDICATED ? "dedicated" : "shared";
}

/* The first class in the list that has a wait of that name (the one a
 * wait= without provider= picks). */
static const px_provider_class *wait_owner(const char *wait)
{
	for (const px_provider_class *const *c = px__classes; *c; c++)
		for (unsigned i = 0; i < (*c)->nwaits; i++)
			if (!strcmp((*c)->waits[i].name, wait))
				return *c;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Presets                                                              */
/* ------------------------------------------------------------------ */

static const struct {
	const char *name;
	px_processor_type proc;
	const char *prov, *wait, *intr;
} presets[] = {
#ifdef PX_HAVE_URING
	{ "uring", PX_PROCESSOR_SHARED, "uring", "uring", "native" },
	{ "uring-dedicated", PX_PROCESSOR_DEDICATED, "uring", "uring", "native" },
#endif
#ifdef PX_HAVE_LIBAIO
	{ "linux-aio", PX_PROCESSOR_SHARED, "linux_aio", "io_getevents", "native" },
	{ "linux-aio-dedicated", PX_PROCESSOR_DEDICATED, "linux_aio",
	  "io_getevents", "native" },
#endif
	{ "epoll", PX_PROCESSOR_SHARED, "select", "epoll", "eventfd" },
	{ "poll", PX_PROCESSOR_SHARED, "select", "poll", "eventfd" },
	{ "select", PX_PROCESSOR_SHARED, "select", "select", "eventfd" },
	{ "epoll-dedicated", PX_PROCESSOR_DEDICATED, "select", "epoll", "eventfd" },
	{ "poll-dedicated", PX_PROCESSOR_DEDICATED, "select", "poll", "eventfd" },
	{ "select-dedicated", PX_PROCESSOR_DEDICATED, "select", "select", "eventfd" },
	{ "linux-rt-dedicated", PX_PROCESSOR_DEDICATED, "select", "linux_rt", "pipe" },
	{ "posix-aio", PX_PROCESSOR_SHARED, "posix", "aiocb", "native" },
	{ "posix-aio-dedicated", PX_PROCESSOR_DEDICATED, "posix", "aiocb", "native" },
};
#define N_PRESETS N_OF(presets)

static void test_presets(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_PRESETS; i++) {
		px_config c, p;
		char want[256];
		assert_int_equal(px__config_preset(&p, presets[i].name), 0);
		assert_int_equal(p.secondary.processor, PX_PROCESSOR_NONE);
		assert_int_equal(p.flags, 0);
		assert_int_equal(p.followers, PX_FOLLOWERS_LIFO);
		assert_string_equal(p.primary.provider, presets[i].prov);
		assert_int_equal(px__config_resolve(&p, NULL, 0), 0);
		expect_pc(&p.primary, presets[i].proc, presets[i].prov,
			  presets[i].wait, presets[i].intr);
		assert_string_equal(p.primary.words, "");
		c = parse_ok(presets[i].name);
		assert_true(cfg_equal(&c, &p));
		snprintf(want, sizeof(want),
			 "provider=%s wait=%s interrupt=%s processor=%s max_aio=0",
			 presets[i].prov, presets[i].wait, presets[i].intr,
			 proc_name(presets[i].proc));
		expect_format_cfg(&c, want);
	}
	assert_int_equal(px__config_preset(NULL, "epoll"), -ENOENT);
	assert_int_equal(px__config_preset(&(px_config){ 0 }, NULL), -ENOENT);
	assert_int_equal(px__config_preset(&(px_config){ 0 }, "nope"), -ENOENT);
	assert_int_equal(px__config_preset(&(px_config){ 0 }, "Epoll"), -ENOENT);
	assert_int_equal(px__config_preset(&(px_config){ 0 }, ""), -ENOENT);
}

/* Does cls's validate hook accept this processor?  NULL, or its message
 * in err. */
static const char *class_refuses(const px_provider_class *cls,
				 const px_wait_desc *wd, int intr,
				 px_processor_type proc, char *err, size_t len)
{
	_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
	px_processor_config pc;

	if (!cls->validate)
		return NULL;
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, sizeof(pc.provider), "%s", cls->name);
	snprintf(pc.wait, sizeof(pc.wait), "%s", wd->name);
	snprintf(pc.interrupt, sizeof(pc.interrupt), "%s", px__intr_name(intr));
	pc.processor = proc;
	if (cls->settings_init)
		cls->settings_init(settings);
	err[0] = '\0';
	if (cls->validate(settings, &pc, err, len) == 0)
		return NULL;
	assert_true(strlen(err) > 0);
	return err;
}

/* Every preset of every class, walked through the class list: it parses
 * to its class, wait and processor, formats as such and round-trips; and
 * the words after it override it. */
static void test_class_presets(void **state)
{
	size_t seen = 0;

	(void)state;
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		for (unsigned i = 0; i < cls->npresets; i++) {
			const px_preset_desc *pd = &cls->presets[i];
			const char *wait = pd->wait ? pd->wait : cls->waits[0].name;
			const px_wait_desc *wd = NULL;
			char want[256], text[128];
			for (unsigned w = 0; w < cls->nwaits; w++)
				if (!strcmp(cls->waits[w].name, wait))
					wd = &cls->waits[w];
			if (!wd)
				fail_msg("preset %s names wait %s, not one of "
					 "provider=%s", pd->name, wait, cls->name);
			const char *intr = px__intr_name(wd->default_intr);
			assert_non_null(intr);

			px_config c = parse_ok(pd->name);
			expect_pc(&c.primary, pd->processor, cls->name, wait, intr);
			assert_int_equal(c.secondary.processor, PX_PROCESSOR_NONE);
			assert_string_equal(c.primary.words, "");
			snprintf(want, sizeof(want),
				 "provider=%s wait=%s interrupt=%s processor=%s "
				 "max_aio=0",
				 cls->name, wait, intr, proc_name(pd->processor));
			expect_format_cfg(&c, want);

			/* In the table above too. */
			size_t j;
			for (j = 0; j < N_PRESETS; j++)
				if (!strcmp(presets[j].name, pd->name))
					break;
			if (j == N_PRESETS)
				fail_msg("preset %s is missing from the test's table",
					 pd->name);
			seen++;

			/* Words after a preset override it (unless the class
			 * refuses the other processor for that wait, and says
			 * why). */
			char why[256];
			snprintf(text, sizeof(text), "%s processor=%s max_aio=5",
				 pd->name,
				 pd->processor == PX_PROCESSOR_SHARED ? "dedicated"
								      : "shared");
			if (pd->processor == PX_PROCESSOR_DEDICATED &&
			    class_refuses(cls, wd, wd->default_intr,
					  PX_PROCESSOR_SHARED, why, sizeof(why))) {
				parse_bad(text, why, NULL);
				snprintf(text, sizeof(text), "%s max_aio=5",
					 pd->name);
			}
			c = parse_ok(text);
			if (!strstr(text, "processor="))
				assert_int_equal(c.primary.processor, pd->processor);
			else
				assert_int_equal(c.primary.processor,
						 pd->processor == PX_PROCESSOR_SHARED
							 ? PX_PROCESSOR_DEDICATED
							 : PX_PROCESSOR_SHARED);
			assert_int_equal(c.primary.max_aio, 5);
			assert_string_equal(c.primary.provider, cls->name);
			round_trip(&c);

			/* A preset is the first word only. */
			snprintf(text, sizeof(text), "max_aio=1 %s", pd->name);
			parse_bad(text, "preset", "must be the first word", NULL);
		}
	}
	assert_int_equal(seen, N_PRESETS);
}

/* Team presets (a class as primary for some operations, another class as
 * secondary for the rest), walked through the class list: the secondary
 * names a built-in class and one of its waits, the two operation masks
 * split the I/O operations, and the preset parses, formats and
 * round-trips, words after it overriding the primary only. */
static void test_team_presets(void **state)
{
	size_t seen = 0;

	(void)state;
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		for (unsigned i = 0; i < cls->nteams; i++) {
			const px_team_desc *t = &cls->teams[i];
			const px_provider_class *sec =
				px__class_find(t->sec_provider,
					       strlen(t->sec_provider));
			char text[160];

			assert_non_null(sec);
			assert_true(t->ops != 0);
			assert_int_equal(t->ops & t->sec_ops, 0);
			assert_int_equal((t->ops | t->sec_ops) & PX_OPS_IO,
					 PX_OPS_IO);
			assert_false(px__config_preset(&(px_config){ 0 },
						      t->name) < 0);
			px_config c = parse_ok(t->name);
			assert_string_equal(c.primary.provider, cls->name);
			assert_int_equal(c.primary.ops, t->ops);
			assert_int_equal(c.primary.processor, t->processor);
			assert_string_equal(c.secondary.provider, sec->name);
			assert_string_equal(c.secondary.wait,
					    t->sec_wait ? t->sec_wait
							: sec->waits[0].name);
			assert_int_equal(c.secondary.ops, t->sec_ops);
			round_trip(&c);
			snprintf(text, sizeof(text), "%s max_aio=7", t->name);
			c = parse_ok(text);
			assert_int_equal(c.primary.max_aio, 7);
			assert_int_equal(c.secondary.max_aio, 0);
			assert_string_equal(c.secondary.provider, sec->name);
			round_trip(&c);
			seen++;
		}
	}
	/* The one this library ships, in full. */
	expect_format("posix-aio+epoll",
		      "provider=posix wait=aiocb interrupt=native "
		      "processor=shared max_aio=0 ops=file ; secondary: "
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=socket");
	expect_format("posix-aio+epoll wait=sigwait rtsig=40",
		      "provider=posix wait=sigwait interrupt=native "
		      "processor=shared max_aio=0 ops=file rtsig=40 ; "
		      "secondary: provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=socket");
	parse_bad("foo", "posix-aio+epoll", NULL);
#ifdef PX_HAVE_LIBAIO
	/* Also what auto builds when it chooses Linux AIO. */
	expect_format("linux-aio+epoll",
		      "provider=linux_aio wait=io_getevents interrupt=native "
		      "processor=shared max_aio=0 ops=file ; secondary: "
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=socket");
	/* Linux AIO has an epoll wait of its own: the team keeps it. */
	expect_format("linux-aio+epoll wait=epoll depth=64",
		      "provider=linux_aio wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=file depth=64 ; "
		      "secondary: provider=select wait=epoll "
		      "interrupt=eventfd processor=shared max_aio=0 "
		      "ops=socket");
	parse_bad("foo", "linux-aio+epoll", NULL);
#endif
	assert_true(seen >= 1);
}

/* ------------------------------------------------------------------ */
/* README's engine table, generated from the class list                 */
/* ------------------------------------------------------------------ */

#define ET_BEGIN "<!-- engine table: begin -->"
#define ET_END "<!-- engine table: end -->"

struct et_buf {
	char *p;
	size_t len, pos;
};

static void et_put(struct et_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b->p + b->pos, b->len - b->pos, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < b->len - b->pos);
	b->pos += (size_t)n;
}

/* Operation names of mask, one by one ("all eight operations" for all). */
static void et_ops(struct et_buf *b, uint32_t mask)
{
	const char *sep = "";

	if (mask == (uint32_t)PX_OPS_IO) {
		et_put(b, "all eight operations");
		return;
	}
	for (size_t i = 0; i < PX_CFG_N_OPS; i++) {
		uint32_t m = px__cfg_op_names[i].mask;
		if ((m & (m - 1)) || !(mask & m))
			continue;
		et_put(b, "%s`%s`", sep, px__cfg_op_names[i].name);
		sep = ", ";
	}
}

/* A wait and its interrupts, the default first. */
static void et_wait(struct et_buf *b, const px_wait_desc *wd)
{
	et_put(b, "`%s` (`%s`", wd->name, px__intr_name(wd->default_intr));
	for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++)
		if (t != wd->default_intr && (wd->intrs & (1u << t)))
			et_put(b, ", `%s`", px__intr_name(t));
	et_put(b, ")");
}

/* The processors each wait of cls takes, by its validate hook. */
static void et_procs(struct et_buf *b, const px_provider_class *cls)
{
	const char *sep = "";
	char why[256];

	for (unsigned w = 0; w < cls->nwaits; w++) {
		const px_wait_desc *wd = &cls->waits[w];
		bool sh = !class_refuses(cls, wd, wd->default_intr,
					 PX_PROCESSOR_SHARED, why, sizeof(why));
		bool de = !class_refuses(cls, wd, wd->default_intr,
					 PX_PROCESSOR_DEDICATED, why, sizeof(why));
		assert_true(sh || de);
		if (sh && de)
			continue;
		et_put(b, "%s`%s`: %s only", sep, wd->name,
		       sh ? "shared" : "dedicated");
		sep = "; ";
	}
	if (!*sep)
		et_put(b, "shared or dedicated");
	else
		et_put(b, "; the others: shared or dedicated");
}

static void et_waits(struct et_buf *b, const px_provider_class *cls)
{
	for (unsigned w = 0; w < cls->nwaits; w++) {
		et_put(b, w ? ", " : "");
		et_wait(b, &cls->waits[w]);
	}
}

/* One line per engine: every class alone, then every team preset. */
static void engine_table(char *out, size_t len)
{
	struct et_buf b = { out, len, 0 };

	et_put(&b, "| engine | does natively | hands to a secondary | waits "
		   "(interrupts, default first; the first wait is the "
		   "default) | processor |\n|---|---|---|---|---|\n");
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		et_put(&b, "| `provider=%s` | ", cls->name);
		et_ops(&b, cls->native_ops);
		if (cls->native_ops == (uint32_t)PX_OPS_IO)
			et_put(&b, " | nothing | ");
		else {
			et_put(&b, " | nothing: ");
			et_ops(&b, PX_OPS_IO & ~cls->native_ops);
			et_put(&b, " fail with `-EOPNOTSUPP` unless a "
				   "secondary does them | ");
		}
		et_waits(&b, cls);
		et_put(&b, " | ");
		et_procs(&b, cls);
		et_put(&b, " |\n");
	}
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		for (unsigned i = 0; i < cls->nteams; i++) {
			const px_team_desc *td = &cls->teams[i];
			const px_provider_class *sec =
				px__class_find(td->sec_provider,
					       strlen(td->sec_provider));
			const px_wait_desc *sw = NULL;
			assert_non_null(sec);
			for (unsigned w = 0; w < sec->nwaits; w++)
				if (!td->sec_wait ||
				    !strcmp(sec->waits[w].name, td->sec_wait)) {
					sw = &sec->waits[w];
					break;
				}
			assert_non_null(sw);
			et_put(&b, "| `%s` | ", td->name);
			et_ops(&b, td->ops);
			et_put(&b, " (`%s`) | ", cls->name);
			et_ops(&b, td->sec_ops ? td->sec_ops
					       : sec->native_ops & ~td->ops);
			et_put(&b, " (`%s` over ", sec->name);
			et_wait(&b, sw);
			et_put(&b, ", %s) | ",
			       td->sec_processor == PX_PROCESSOR_DEDICATED
				       ? "dedicated"
				       : "shared");
			et_waits(&b, cls);
			et_put(&b, " | ");
			et_procs(&b, cls);
			et_put(&b, " |\n");
		}
	}
}

/* Is the table row line (up to its newline) one of the generated ones? */
static bool et_has_line(const char *table, const char *line, size_t n)
{
	for (const char *p = table; *p;) {
		const char *nl = strchr(p, '\n');
		size_t m = nl ? (size_t)(nl - p) : strlen(p);
		if (m == n && !memcmp(p, line, n))
			return true;
		p += m + (nl ? 1 : 0);
	}
	return false;
}

/* README's table between the markers: every generated row is there
 * as generated, and every other row belongs to a provider left out of
 * this build. */
static void check_engine_table(const char *text)
{
	static char want[16384];
	const char *beg = strstr(text, ET_BEGIN);
	const char *end = beg ? strstr(beg, ET_END) : NULL;

	engine_table(want, sizeof(want));
	if (!beg || !end)
		fail_msg("README has no " ET_BEGIN " ... " ET_END " section; "
			 "it should hold:\n%s", want);
	beg += strlen(ET_BEGIN);
	for (const char *p = want; *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = (size_t)(nl - p);
		bool found = false;
		for (const char *q = beg; q < end;) {
			const char *qn = strchr(q, '\n');
			size_t m = qn ? (size_t)(qn - q) : strlen(q);
			if (m == n && !memcmp(p, q, n))
				found = true;
			q += m + 1;
		}
		if (!found)
			fail_msg("README's engine table lacks, or has otherwise, "
				 "the line\n%.*s\n(test_config --engine-table "
				 "prints the whole table)", (int)n, p);
		p = nl + 1;
	}
	for (const char *q = beg; q < end;) {
		const char *qn = strchr(q, '\n');
		size_t m = qn ? (size_t)(qn - q) : strlen(q);
		bool other = false;
		if (m > 2 && q[0] == '|' && !et_has_line(want, q, m)) {
			for (const char *const *nb = px__classes_not_built; *nb;
			     nb++) {
				char cell[64], team[64];
				snprintf(cell, sizeof(cell), "| `provider=%s` |", *nb);
				other |= !strncmp(q, cell, strlen(cell));
				/* A team whose primary is that provider
				 * names it in its second cell. */
				snprintf(team, sizeof(team), "(`%s`) |", *nb);
				const char *c2 = memchr(q + 1, '|', m - 1);
				const char *c3 = c2 ? memchr(c2 + 1, '|',
							     (size_t)(q + m - c2 - 1))
						    : NULL;
				size_t tl = strlen(team);
				other |= c3 && (size_t)(c3 + 1 - q) >= tl &&
					 !memcmp(c3 + 1 - tl, team, tl);
			}
			if (!other)
				fail_msg("README's engine table has a line the "
					 "class list does not give:\n%.*s", (int)m,
					 q);
		}
		q += m + 1;
	}
}

/* README's engine tables name every class, wait, preset, team and own
 * key of the class list (as `name`), so that a class cannot be added, or
 * renamed, without its row.  The build passes README's path in
 * PX_README; without it the check is skipped. */
static bool readme_names(const char *text, const char *name)
{
	char quoted[80];

	snprintf(quoted, sizeof(quoted), "`%s`", name);
	return strstr(text, quoted) != NULL;
}

static void test_readme_tables(void **state)
{
	const char *path = getenv("PX_README");
	static char text[1 << 17];
	size_t n;
	FILE *f;

	(void)state;
	if (!path || !(f = fopen(path, "r"))) {
		print_message("PX_README not set or unreadable: skipped\n");
		skip();
		return;
	}
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		if (!readme_names(text, cls->name))
			fail_msg("README does not name provider `%s`", cls->name);
		for (unsigned i = 0; i < cls->nwaits; i++)
			if (!readme_names(text, cls->waits[i].name))
				fail_msg("README does not name wait `%s` of %s",
					 cls->waits[i].name, cls->name);
		for (unsigned i = 0; i < cls->nteams; i++) {
			if (!readme_names(text, cls->teams[i].name))
				fail_msg("README does not name team preset `%s`",
					 cls->teams[i].name);
		}
		for (unsigned i = 0; i < cls->nkeys; i++)
			if (!readme_names(text, cls->keys[i].name))
				fail_msg("README does not name key `%s` of %s",
					 cls->keys[i].name, cls->name);
		for (unsigned i = 0; i < cls->npresets; i++) {
			const char *pn = cls->presets[i].name;
			const char *dash = strstr(pn, "-dedicated");
			char base[64];
			/* "-dedicated variants" covers those. */
			snprintf(base, sizeof(base), "%.*s",
				 (int)(dash ? (size_t)(dash - pn) : strlen(pn)), pn);
			if (!readme_names(text, base))
				fail_msg("README does not name preset `%s`", base);
		}
	}
	check_engine_table(text);
}

static void check_auto(const px_config *c)
{
	expect_pc(&c->primary, PX_PROCESSOR_SHARED, "", "", "");
	assert_string_equal(c->primary.words, "");
	assert_int_equal(c->flags, 0);
	assert_int_equal(c->secondary.processor, PX_PROCESSOR_NONE);
}

static void test_auto(void **state)
{
	static const char *const texts[] = { "auto", "", "   ", " \t\n ",
					     "primary:", "auto primary:", NULL };
	px_config c;

	(void)state;
	for (size_t i = 0; i < N_OF(texts); i++) {
		c = parse_ok(texts[i]);
		check_auto(&c);
		expect_format_cfg(&c, "auto processor=shared max_aio=0");
	}
	assert_int_equal(px__config_preset(&c, "auto"), 0);
	check_auto(&c);

	/* auto stays auto while the words leave the engine alone... */
	c = parse_ok("max_aio=64");
	check_auto(&c);
	assert_int_equal(c.primary.max_aio, 64);
	expect_format_cfg(&c, "auto processor=shared max_aio=64");
	c = parse_ok("auto processor=dedicated followers=fifo");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_DEDICATED);
	assert_string_equal(c.primary.provider, "");
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	expect_format_cfg(&c, "auto processor=dedicated max_aio=0 followers=fifo");
	expect_format("auto ops=file start=any max_aio=3",
		      "auto processor=shared max_aio=3 ops=file start=any");

	/* ...an interrupt narrows it but leaves it auto... */
	c = parse_ok("auto interrupt=pipe");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "pipe");
	expect_format_cfg(&c, "auto interrupt=pipe processor=shared max_aio=0");
	c = parse_ok("auto interrupt=signal signal=12");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "signal");
	assert_int_equal(c.primary.intr_signo, 12);
	expect_format_cfg(&c, "auto interrupt=signal processor=shared max_aio=0 "
			      "signal=12");
	c = parse_ok("interrupt=eventfd");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "eventfd");
#ifdef PX_HAVE_URING
	c = parse_ok("auto interrupt=native");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "native");
	expect_format_cfg(&c, "auto interrupt=native processor=shared max_aio=0");
	/* ...and so do a provider's own words... */
	c = parse_ok("auto ring=8");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "");
	assert_string_equal(c.primary.words, "ring=8");
	expect_format_cfg(&c, "auto processor=shared max_aio=0 ring=8");
	c = parse_ok("ring_flags=sqpoll max_aio=2");
	assert_string_equal(c.primary.provider, "");
	assert_string_equal(c.primary.words, "ring_flags=sqpoll");
	round_trip(&c);
	/* but not to nothing. */
	parse_bad("auto ring=8 interrupt=pipe", "no engine that auto may choose",
		  "interrupt=pipe", "ring=8", "name a provider",
		  "provider=select (interrupt pipe, eventfd or signal)",
		  "provider=uring (interrupt native)", NULL);
	/* A bad value: the class that owns the key says what it takes. */
	parse_bad("auto ring=99999", "ring=99999", "0 (default) to 32768", NULL);
	/* Words on auto come back in the canonical form. */
	c = parse_ok("auto ring=0008 ring_flags=sqpoll,coop_taskrun");
	assert_string_equal(c.primary.words,
			    "ring=8 ring_flags=coop_taskrun,sqpoll");
#else
	parse_bad("auto interrupt=native", "no engine that auto may choose",
		  "interrupt=native", "name a provider",
		  "provider=select (interrupt pipe, eventfd or signal)", NULL);
#endif
	parse_bad("auto signal=10", "signal=10 only applies to interrupt=signal",
		  NULL);
	parse_bad("auto interrupt=pipe signal=10",
		  "signal=10 only applies to interrupt=signal",
		  "interrupt=pipe", NULL);

	/* ...and stops as soon as they name a provider or a wait. */
	c = parse_ok("auto wait=poll");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "poll", "eventfd");
	c = parse_ok("auto provider=select interrupt=pipe");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "epoll", "pipe");
	c = parse_ok("auto interrupt=signal provider=select");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "epoll", "signal");
#ifdef PX_HAVE_URING
	c = parse_ok("provider=uring");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "uring", "uring", "native");
	c = parse_ok("auto ring=8 wait=uring");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "uring", "uring", "native");
	assert_string_equal(c.primary.words, "ring=8");
	parse_bad("auto ring=8 provider=select",
		  "ring is not a key of provider=select", NULL);
#endif
}

/* ------------------------------------------------------------------ */
/* The auto candidates                                                  */
/* ------------------------------------------------------------------ */

static unsigned candidates(const char *intr, const char *words,
			   const px_provider_class **out, unsigned max)
{
	px_processor_config pc;

	memset(&pc, 0, sizeof(pc));
	pc.processor = PX_PROCESSOR_SHARED;
	snprintf(pc.interrupt, sizeof(pc.interrupt), "%s", intr);
	snprintf(pc.words, sizeof(pc.words), "%s", words);
	return px__auto_candidates(&pc, out, max);
}

static void test_auto_candidates(void **state)
{
	const px_provider_class *out[8];
	const px_provider_class *sel = px__class_find("select", 6);
	unsigned n;

	(void)state;
	assert_non_null(sel);
	memset(out, 0, sizeof(out));
	n = candidates("", "", out, N_OF(out));
#ifdef PX_HAVE_LIBAIO
	/* Linux AIO comes between io_uring and readiness: its default wait
	 * takes native and signal interrupts, and its own key depth=. */
	const px_provider_class *la = px__class_find("linux_aio", 9);
	assert_non_null(la);
	assert_ptr_equal(out[n - 2], la);
	assert_ptr_equal(out[n - 1], sel);
	memset(out, 0, sizeof(out));
	assert_int_equal(candidates("signal", "", out, N_OF(out)), 2);
	assert_ptr_equal(out[0], la);
	assert_ptr_equal(out[1], sel);
	memset(out, 0, sizeof(out));
	assert_int_equal(candidates("", "depth=64", out, N_OF(out)), 1);
	assert_ptr_equal(out[0], la);
	assert_int_equal(candidates("", "depth=x", out, N_OF(out)), 0);
	/* Only where files are in play. */
	{
		px_processor_config pc;
		memset(&pc, 0, sizeof(pc));
		pc.processor = PX_PROCESSOR_SHARED;
		pc.ops = PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_ACCEPT);
		unsigned k = px__auto_candidates(&pc, out, N_OF(out));
		for (unsigned i = 0; i < k; i++)
			assert_ptr_not_equal(out[i], la);
		assert_ptr_equal(out[k - 1], sel);
		pc.ops |= PX_OP_BIT(PX_OP_WRITE_FILE);
		assert_int_equal(px__auto_candidates(&pc, out, N_OF(out)), k + 1);
	}
	assert_int_equal(candidates("pipe", "depth=64", out, N_OF(out)), 0);
	memset(out, 0, sizeof(out));
	n = candidates("", "", out, N_OF(out)) - 1;  /* as without it */
	const unsigned n_native = 1;
#else
	const unsigned n_native = 0;
#endif
#ifdef PX_HAVE_URING
	const px_provider_class *ur = px__class_find("uring", 5);
	assert_non_null(ur);
	assert_int_equal(n, 2);
	assert_ptr_equal(out[0], ur);
	assert_ptr_equal(out[1 + n_native], sel);
	assert_null(out[2 + n_native]);
	/* max cuts the list, best first. */
	memset(out, 0, sizeof(out));
	assert_int_equal(candidates("", "", out, 1), 1);
	assert_ptr_equal(out[0], ur);
	assert_null(out[1]);
	assert_int_equal(candidates("", "", out, 0), 0);

	/* An interrupt keeps the classes whose default wait takes it. */
	assert_int_equal(candidates("native", "", out, N_OF(out)), 1 + n_native);
	assert_ptr_equal(out[0], ur);
	/* Provider words keep the classes that accept them. */
	memset(out, 0, sizeof(out));
	assert_int_equal(candidates("", "ring=8", out, N_OF(out)), 1);
	assert_ptr_equal(out[0], ur);
	assert_null(out[1]);
	assert_int_equal(candidates("", "  ring=8   ring_flags=sqpoll ", out,
				    N_OF(out)), 1);
	assert_ptr_equal(out[0], ur);
	assert_int_equal(candidates("", "ring=99999", out, N_OF(out)), 0);
	assert_int_equal(candidates("pipe", "ring=8", out, N_OF(out)), 0);
#else
	assert_int_equal(n, 1);
	assert_ptr_equal(out[n_native], sel);
	assert_int_equal(candidates("native", "", out, N_OF(out)), n_native);
	assert_int_equal(candidates("", "ring=8", out, N_OF(out)), 0);
#endif
	memset(out, 0, sizeof(out));
	assert_int_equal(candidates("pipe", "", out, N_OF(out)), 1);
	assert_ptr_equal(out[0], sel);
	assert_null(out[1]);
	assert_int_equal(candidates("eventfd", "", out, N_OF(out)), 1);
	assert_ptr_equal(out[0], sel);
#ifndef PX_HAVE_LIBAIO
	assert_int_equal(candidates("signal", "", out, N_OF(out)), 1);
	assert_ptr_equal(out[0], sel);
#endif
	assert_int_equal(candidates("semaphore", "", out, N_OF(out)), 0);
	assert_int_equal(candidates("", "nokey=1", out, N_OF(out)), 0);
	assert_int_equal(candidates("", "bare", out, N_OF(out)), 0);

	/* Generic: the candidates are the ranked classes in rank order. */
	n = candidates("", "", out, N_OF(out));
	unsigned ranked = 0;
	for (const px_provider_class *const *c = px__classes; *c; c++)
		if ((*c)->auto_rank && (*c)->keys == NULL)
			ranked++;
	assert_true(n >= ranked);
	for (unsigned i = 0; i < n; i++) {
		assert_true(out[i]->auto_rank > 0);
		if (i)
			assert_true(out[i - 1]->auto_rank <= out[i]->auto_rank);
	}

	/* A parsed auto config gives the same answer. */
	px_config c = parse_ok("auto interrupt=pipe");
	memset(out, 0, sizeof(out));
	assert_int_equal(px__auto_candidates(&c.primary, out, N_OF(out)), 1);
	assert_ptr_equal(out[0], sel);

	/* A provider word narrows auto at its default value too: "auto
	 * ring=0" is io_uring or nothing, as "auto ring=8" is.  Resolving
	 * used to write the words in the first candidate's canonical form,
	 * which leaves a default out, and the parsed config was plain auto
	 * (Linux AIO where io_uring is refused, fixed problem 184). */
	static const struct {
		const char *text, *cls, *words;
	} narrow[] = {
		{ "auto ring=0", "uring", "ring=0" },
		{ "auto rings=0 ring=0", "uring", "rings=0 ring=0" },
		{ "auto ring=00 ring_flags=sqpoll", "uring",
		  "ring_flags=sqpoll ring=00" },
		{ "auto depth=0", "linux_aio", "depth=0" },
		{ "auto depth=064", "linux_aio", "depth=64" },
	};
	for (size_t i = 0; i < N_OF(narrow); i++) {
		const px_provider_class *want =
			px__class_find(narrow[i].cls, strlen(narrow[i].cls));
		if (!want)
			continue;  /* not built in */
		c = parse_ok(narrow[i].text);
		assert_string_equal(c.primary.provider, "");
		assert_string_equal(c.primary.words, narrow[i].words);
		memset(out, 0, sizeof(out));
		n = px__auto_candidates(&c.primary, out, N_OF(out));
		if (n != 1 || out[0] != want)
			fail_msg("\"%s\": %u candidates, the first %s; expected "
				 "%s alone",
				 narrow[i].text, n, n ? out[0]->name : "none",
				 narrow[i].cls);
		round_trip(&c);
	}
}

/* ------------------------------------------------------------------ */
/* Keys                                                                 */
/* ------------------------------------------------------------------ */

static void test_provider_wait_interrupt(void **state)
{
	static const struct {
		const char *text;
		const char *prov, *wait, *intr;
	} t[] = {
		{ "provider=select", "select", "epoll", "eventfd" },
		{ "provider=select wait=select", "select", "select", "eventfd" },
		{ "provider=select wait=poll", "select", "poll", "eventfd" },
		{ "provider=select wait=epoll", "select", "epoll", "eventfd" },
		{ "provider=select interrupt=pipe", "select", "epoll", "pipe" },
		{ "provider=select interrupt=eventfd", "select", "epoll", "eventfd" },
		{ "provider=select interrupt=signal", "select", "epoll", "signal" },
		{ "wait=poll interrupt=pipe", "select", "poll", "pipe" },
		{ "wait=select", "select", "select", "eventfd" },
		{ "epoll wait=poll", "select", "poll", "eventfd" },
		{ "select interrupt=pipe", "select", "select", "pipe" },
		{ "select interrupt=pipe wait=poll", "select", "poll", "pipe" },
		{ "poll-dedicated interrupt=signal", "select", "poll", "signal" },
		{ "epoll provider=select", "select", "epoll", "eventfd" },
		/* The example of px_config_parse(3): a readiness preset with
		 * POSIX AIO's wait is POSIX AIO. */
		{ "poll wait=sigwait", "posix", "sigwait", "native" },
		{ "epoll wait=callback", "posix", "callback", "native" },
#ifdef PX_HAVE_URING
		{ "provider=uring", "uring", "uring", "native" },
		{ "provider=uring wait=uring", "uring", "uring", "native" },
		{ "provider=uring interrupt=native", "uring", "uring", "native" },
		{ "wait=uring", "uring", "uring", "native" },
		/* A preset's provider follows a wait of another provider. */
		{ "uring wait=epoll", "select", "epoll", "eventfd" },
		{ "uring wait=select interrupt=pipe", "select", "select", "pipe" },
		{ "epoll wait=uring", "uring", "uring", "native" },
		{ "epoll provider=uring", "uring", "uring", "native" },
		{ "uring provider=select", "select", "epoll", "eventfd" },
		{ "uring provider=select wait=poll", "select", "poll", "eventfd" },
#endif
#ifdef PX_HAVE_LIBAIO
		/* A wait the preset's provider has too keeps the provider
		 * (epoll is both Linux AIO's and the readiness provider's):
		 * it used to switch to the readiness provider. */
		{ "linux-aio wait=epoll", "linux_aio", "epoll", "eventfd" },
		{ "linux-aio-dedicated wait=epoll", "linux_aio", "epoll",
		  "eventfd" },
		{ "linux-aio wait=poll", "select", "poll", "eventfd" },
#endif
	};

	(void)state;
	for (size_t i = 0; i < N_OF(t); i++) {
		px_config c = parse_ok(t[i].text);
		assert_string_equal(c.primary.provider, t[i].prov);
		assert_string_equal(c.primary.wait, t[i].wait);
		assert_string_equal(c.primary.interrupt, t[i].intr);
		assert_string_equal(c.primary.words, "");
		assert_int_equal(c.flags, 0);
		round_trip(&c);
	}
#ifdef PX_HAVE_URING
	/* A changed provider keeps the processor but drops the inherited
	 * wait and interrupt. */
	px_config c = parse_ok("poll-dedicated provider=uring");
	expect_pc(&c.primary, PX_PROCESSOR_DEDICATED, "uring", "uring", "native");
	c = parse_ok("uring-dedicated wait=select");
	expect_pc(&c.primary, PX_PROCESSOR_DEDICATED, "select", "select", "eventfd");
#endif
}

/* Check the list after "takes interrupt " in msg: every interrupt of
 * mask is in it, no other. */
static void check_intr_list(const char *text, const char *msg, unsigned mask)
{
	const char *tail = strstr(msg, "takes interrupt ");

	if (!tail)
		fail_msg("\"%s\": message \"%s\" lacks \"takes interrupt \"", text,
			 msg);
	tail += strlen("takes interrupt ");
	for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++) {
		const char *name = px__intr_name(t);
		bool there = strstr(tail, name) != NULL;
		if (there != !!(mask & (1u << t)))
			fail_msg("\"%s\": message \"%s\" %s \"%s\"", text, msg,
				 there ? "wrongly offers" : "lacks", name);
	}
}

/* Every wait of every class with every interrupt it takes, shared and
 * dedicated, as primary and as secondary; every interrupt it does not
 * take is refused naming those it does; a processor the class refuses
 * (linux_rt on a shared one) is refused with the class's reason. */
static void test_class_combinations(void **state)
{
	static const px_processor_type procs[] = { PX_PROCESSOR_SHARED,
						   PX_PROCESSOR_DEDICATED };
	unsigned combos = 0, refused = 0;

	(void)state;
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		assert_true(cls->nwaits > 0);
		for (unsigned w = 0; w < cls->nwaits; w++) {
			const px_wait_desc *wd = &cls->waits[w];
			for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++) {
				const char *in = px__intr_name(t);
				char text[256], want[512];
				px_config c;
				if (!(wd->intrs & (1u << t))) {
					char err[512] = "";
					snprintf(text, sizeof(text),
						 "provider=%s wait=%s interrupt=%s",
						 cls->name, wd->name, in);
					parse_bad(text, "invalid combination", text,
						  NULL);
					assert_int_equal(px_config_parse(&c, text, err,
									 sizeof(err)),
							 -EINVAL);
					check_intr_list(text, err, wd->intrs);
					snprintf(text, sizeof(text),
						 "epoll ; secondary: provider=%s "
						 "wait=%s interrupt=%s",
						 cls->name, wd->name, in);
					parse_bad(text, "secondary: invalid combination",
						  NULL);
					continue;
				}
				for (size_t p = 0; p < N_OF(procs); p++) {
					const char *pn = proc_name(procs[p]);
					char why[256];
					snprintf(text, sizeof(text),
						 "provider=%s wait=%s interrupt=%s "
						 "processor=%s",
						 cls->name, wd->name, in, pn);
					if (class_refuses(cls, wd, t, procs[p], why,
							  sizeof(why))) {
						/* Only a shared processor, and
						 * the message says what to use. */
						assert_int_equal(procs[p],
								 PX_PROCESSOR_SHARED);
						assert_non_null(strstr(
							why, "processor=dedicated"));
						parse_bad(text, why, NULL);
						snprintf(text, sizeof(text),
							 "select ; secondary: "
							 "provider=%s wait=%s "
							 "interrupt=%s processor=%s",
							 cls->name, wd->name, in, pn);
						snprintf(want, sizeof(want),
							 "secondary: %s", why);
						parse_bad(text, want, NULL);
						refused++;
						continue;
					}
					c = parse_ok(text);
					expect_pc(&c.primary, procs[p], cls->name,
						  wd->name, in);
					snprintf(want, sizeof(want), "%s max_aio=0",
						 text);
					expect_format_cfg(&c, want);
					combos++;

					/* As a secondary. */
					snprintf(text, sizeof(text),
						 "select ; secondary: provider=%s "
						 "wait=%s interrupt=%s processor=%s",
						 cls->name, wd->name, in, pn);
					c = parse_ok(text);
					expect_pc(&c.secondary, procs[p], cls->name,
						  wd->name, in);
					snprintf(want, sizeof(want),
						 "provider=select wait=select "
						 "interrupt=eventfd processor=shared "
						 "max_aio=0 ; secondary: provider=%s "
						 "wait=%s interrupt=%s processor=%s "
						 "max_aio=0",
						 cls->name, wd->name, in, pn);
					expect_format_cfg(&c, want);

					/* The wait alone picks its owner. */
					if (wait_owner(wd->name) == cls) {
						snprintf(text, sizeof(text),
							 "wait=%s interrupt=%s "
							 "processor=%s",
							 wd->name, in, pn);
						c = parse_ok(text);
						expect_pc(&c.primary, procs[p],
							  cls->name, wd->name, in);
						round_trip(&c);
					}
				}
				if (t == PX_INTR_SIGNAL) {
					char why[256];
					snprintf(text, sizeof(text),
						 "provider=%s wait=%s interrupt=signal "
						 "signal=10%s",
						 cls->name, wd->name,
						 class_refuses(cls, wd, t,
							       PX_PROCESSOR_SHARED,
							       why, sizeof(why))
							 ? " processor=dedicated"
							 : "");
					c = parse_ok(text);
					assert_int_equal(c.primary.intr_signo, 10);
					round_trip(&c);
				}
			}
			/* Without interrupt=, the wait's default. */
			char text[128];
			snprintf(text, sizeof(text),
				 "provider=%s wait=%s processor=dedicated",
				 cls->name, wd->name);
			px_config c = parse_ok(text);
			assert_true(wd->intrs & (1u << wd->default_intr));
			assert_string_equal(c.primary.interrupt,
					    px__intr_name(wd->default_intr));
		}
		/* A wait of no class is refused naming the class's waits. */
		char text[128], err[512] = "";
		px_config c;
		snprintf(text, sizeof(text), "provider=%s wait=kqueue", cls->name);
		assert_int_equal(px_config_parse(&c, text, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "unknown wait \"kqueue\" for provider="));
		for (unsigned w = 0; w < cls->nwaits; w++)
			assert_non_null(strstr(err, cls->waits[w].name));
		/* And a wait of another class names the class's waits too. */
		for (const px_provider_class *const *op = px__classes; *op; op++) {
			bool shared = false;
			for (unsigned w = 0; w < cls->nwaits; w++)
				shared |= !strcmp(cls->waits[w].name,
						  (*op)->waits[0].name);
			if (*op == cls || shared)
				continue;  /* (a wait name two classes share) */
			snprintf(text, sizeof(text), "provider=%s wait=%s",
				 cls->name, (*op)->waits[0].name);
			assert_int_equal(px_config_parse(&c, text, err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, "invalid combination"));
			const char *tail = strstr(err, "takes wait ");
			assert_non_null(tail);
			for (unsigned w = 0; w < cls->nwaits; w++)
				assert_non_null(strstr(tail, cls->waits[w].name));
		}
	}
	/* 3 waits x 3 interrupts x 2 processors for select and linux_rt's 2
	 * interrupts x dedicated, 1 x 1 x 2 uring, (2 + 3) x 2 linux_aio,
	 * 3 x 1 x 2 posix; linux_rt's 2 interrupts x shared are refused. */
	unsigned want = 18 + 2 + 6;
	assert_int_equal(refused, 2);
#ifdef PX_HAVE_URING
	want += 2;
#endif
#ifdef PX_HAVE_LIBAIO
	want += 10;
#endif
	assert_int_equal(combos, want);
}

static void test_processor_key(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("epoll processor=dedicated");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_DEDICATED);
	round_trip(&c);
	c = parse_ok("epoll-dedicated processor=shared");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_SHARED);
	round_trip(&c);
	parse_bad("epoll processor=none", "unknown processor \"none\": choose shared "
					  "or dedicated",
		  NULL);
	parse_bad("epoll processor=", "unknown processor \"\"", "shared or dedicated",
		  NULL);
}

static void test_numbers(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("epoll max_aio=0");
	assert_int_equal(c.primary.max_aio, 0);
	c = parse_ok("epoll max_aio=1");
	assert_int_equal(c.primary.max_aio, 1);
	c = parse_ok("epoll max_aio=007");
	assert_int_equal(c.primary.max_aio, 7);
	c = parse_ok("epoll max_aio=4294967295");
	assert_int_equal(c.primary.max_aio, 4294967295u);
	round_trip(&c);
	c = parse_ok("epoll interrupt=signal signal=10");
	assert_int_equal(c.primary.intr_signo, 10);
	round_trip(&c);
	c = parse_ok("epoll interrupt=signal signal=0");
	assert_int_equal(c.primary.intr_signo, 0);
	c = parse_ok("epoll interrupt=signal signal=64");
	assert_int_equal(c.primary.intr_signo, 64);
	round_trip(&c);

	parse_bad("epoll max_aio=-1", "negative", "0 to 4294967295", NULL);
	parse_bad("epoll max_aio=12x", "max_aio=12x", "not a decimal number",
		  "0 to 4294967295", NULL);
	parse_bad("epoll max_aio=0x10", "not a decimal number", NULL);
	parse_bad("epoll max_aio=+5", "not a decimal number", NULL);
	parse_bad("epoll max_aio= ", "max_aio has no value", "0 to 4294967295",
		  NULL);
	parse_bad("epoll max_aio=4294967296", "too large", "at most 4294967295",
		  NULL);
	parse_bad("epoll max_aio=99999999999999999999999", "too large", NULL);
	parse_bad("epoll interrupt=signal signal=65", "too large", "at most 64", NULL);
	parse_bad("epoll interrupt=signal signal=abc", "not a decimal number", NULL);
	parse_bad("epoll interrupt=signal signal=-1", "negative", NULL);
}

static void test_ops(void **state)
{
	static const struct {
		const char *v;
		uint32_t mask;
	} t[] = {
		{ "read_stream", PX_OP_BIT(PX_OP_READ_STREAM) },
		{ "write_stream", PX_OP_BIT(PX_OP_WRITE_STREAM) },
		{ "read_file", PX_OP_BIT(PX_OP_READ_FILE) },
		{ "write_file", PX_OP_BIT(PX_OP_WRITE_FILE) },
		{ "read_dgram", PX_OP_BIT(PX_OP_READ_DGRAM) },
		{ "write_dgram", PX_OP_BIT(PX_OP_WRITE_DGRAM) },
		{ "accept", PX_OP_BIT(PX_OP_ACCEPT) },
		{ "connect", PX_OP_BIT(PX_OP_CONNECT) },
		{ "stream", PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) },
		{ "file", PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE) },
		{ "dgram", PX_OP_BIT(PX_OP_READ_DGRAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM) },
		{ "socket", PX_OPS_IO & ~(PX_OP_BIT(PX_OP_READ_FILE) |
					  PX_OP_BIT(PX_OP_WRITE_FILE)) },
		{ "all", PX_OPS_IO },
		{ "accept,connect", PX_OP_BIT(PX_OP_ACCEPT) | PX_OP_BIT(PX_OP_CONNECT) },
		{ "file,accept,file", PX_OP_BIT(PX_OP_READ_FILE) |
					      PX_OP_BIT(PX_OP_WRITE_FILE) |
					      PX_OP_BIT(PX_OP_ACCEPT) },
		{ "socket,file", PX_OPS_IO },
	};
	char text[128];

	(void)state;
	for (size_t i = 0; i < N_OF(t); i++) {
		snprintf(text, sizeof(text), "epoll ops=%s", t[i].v);
		px_config c = parse_ok(text);
		assert_int_equal(c.primary.ops, t[i].mask);
		round_trip(&c);
		/* The same on auto. */
		snprintf(text, sizeof(text), "ops=%s", t[i].v);
		c = parse_ok(text);
		assert_int_equal(c.primary.ops, t[i].mask);
		assert_string_equal(c.primary.provider, "");
		round_trip(&c);
	}
	/* The canonical text uses the widest group that fits. */
	expect_format("epoll ops=read_stream,write_stream,accept",
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=stream,accept");
	expect_format("epoll ops=file,socket",
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=all");

	static const char *const choices[] = {
		"read_stream", "write_stream", "read_file", "write_file",
		"read_dgram", "write_dgram", "accept", "connect", "stream", "file",
		"dgram", "socket", "all"
	};
	const char *bad[] = { "epoll ops=bogus", "epoll ops=", "epoll ops=accept,",
			      "epoll ops=,accept", "epoll ops=accept,,connect",
			      "epoll ops=post", "epoll ops=timer" };
	for (size_t i = 0; i < N_OF(bad); i++) {
		for (size_t j = 0; j < N_OF(choices); j++)
			parse_bad(bad[i], choices[j], NULL);
	}
	parse_bad("epoll ops=bogus", "unknown operation \"bogus\"", NULL);
	parse_bad("epoll ops=accept,", "empty name", NULL);
}

static void test_start(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("epoll start=any");
	assert_int_equal(c.primary.flags, PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD);
	round_trip(&c);
	c = parse_ok("epoll start=any-interrupt");
	assert_int_equal(c.primary.flags, PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD |
						  PX_PF_START_INTERRUPT);
	round_trip(&c);
	c = parse_ok("epoll start=leader");
	assert_int_equal(c.primary.flags, PX_PF_FLAGS_SET);
	round_trip(&c);
	expect_format("epoll start=leader",
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 start=leader");
	c = parse_ok("epoll");
	assert_int_equal(c.primary.flags, 0);
	parse_bad("epoll start=now", "unknown start \"now\"", "any", "any-interrupt",
		  "leader", NULL);
}

/* The own keys of every class: a valid value, an invalid one, and the
 * words a valid value needs beside it (with; NULL: none).  Every class
 * key must have a row here (a new class's keys fail until added). */
static const struct {
	const char *cls, *key, *good, *canon, *bad, *with;
} own_keys[] = {
	{ "uring", "ring", "256", "ring=256", "32769", NULL },
	{ "uring", "ring_flags", "sqpoll,coop_taskrun",
	  "ring_flags=coop_taskrun,sqpoll", "fast", NULL },
	{ "uring", "rings", "2", "rings=2", "17", NULL },
	{ "uring", "read_gate", "8", "read_gate=8", "1000001", NULL },
	{ "posix", "rtsig", "40", "rtsig=40", "1", "wait=sigwait" },
	{ "posix", "aio_threads", "64", "aio_threads=64", "0", NULL },
	{ "posix", "sockets", "aio", "sockets=aio", "maybe", NULL },
	{ "posix", "file_lanes", "4", "file_lanes=4", "17", NULL },
	{ "linux_aio", "depth", "64", "depth=64", "1048577", NULL },
};

/* rtsig= is the signal of wait=sigwait: refused beside the other waits
 * (default or named, primary or secondary, text or struct), where it
 * would do nothing. */
static void test_rtsig_needs_sigwait(void **state)
{
	(void)state;
	px_config c = parse_ok("posix-aio wait=sigwait rtsig=40");
	assert_string_equal(c.primary.words, "rtsig=40");
	parse_bad("posix-aio rtsig=40", "rtsig=40 is for wait=sigwait",
		  "wait=aiocb takes no signal", NULL);
	parse_bad("posix-aio wait=callback rtsig=40", "rtsig=40 is for wait=sigwait",
		  "wait=callback", NULL);
	parse_bad("epoll ; secondary: provider=posix rtsig=40", "secondary: ",
		  "rtsig=40 is for wait=sigwait", NULL);
	/* SIGRTMIN+3 is the linux_rt wait's signal. */
	char text[96], want[32];
	snprintf(text, sizeof(text), "posix-aio wait=sigwait rtsig=%d", SIGRTMIN + 3);
	snprintf(want, sizeof(want), "rtsig=%d", SIGRTMIN + 3);
	parse_bad(text, want, "but SIGRTMIN+3", NULL);
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "posix");
	snprintf(c.primary.wait, PX_NAME_MAX, "callback");
	snprintf(c.primary.words, PX_WORDS_MAX, "rtsig=40");
	char err[256] = "";
	assert_int_equal(px__config_resolve(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "rtsig=40 is for wait=sigwait"));
}

static void test_class_keys(void **state)
{
	(void)state;
	for (const px_provider_class *const *cp = px__classes; *cp; cp++) {
		const px_provider_class *cls = *cp;
		for (unsigned k = 0; k < cls->nkeys; k++) {
			size_t i;
			assert_non_null(cls->keys[k].choices);
			assert_non_null(cls->parse_key);
			assert_non_null(cls->format);
			assert_true(cls->settings_size <= PX_SETTINGS_MAX);
			for (i = 0; i < N_OF(own_keys); i++)
				if (!strcmp(own_keys[i].cls, cls->name) &&
				    !strcmp(own_keys[i].key, cls->keys[k].name))
					break;
			if (i == N_OF(own_keys))
				fail_msg("provider=%s key %s has no row in own_keys",
					 cls->name, cls->keys[k].name);
		}
	}

	for (size_t i = 0; i < N_OF(own_keys); i++) {
		const px_provider_class *cls =
			px__class_find(own_keys[i].cls, strlen(own_keys[i].cls));
		char text[256], want[64];
		px_config c;
		if (!cls)
			continue;   /* not built: see test_not_built */
		const char *k = own_keys[i].key;

		const char *with = own_keys[i].with ? own_keys[i].with : "";
		const char *sp = *with ? " " : "";

		/* Accepted with a valid value, written back canonically. */
		snprintf(text, sizeof(text), "provider=%s%s%s %s=%s", cls->name,
			 sp, with, k, own_keys[i].good);
		c = parse_ok(text);
		assert_string_equal(c.primary.words, own_keys[i].canon);
		round_trip(&c);
		/* Also in the secondary. */
		snprintf(text, sizeof(text),
			 "epoll ; secondary: provider=%s%s%s %s=%s", cls->name,
			 sp, with, k, own_keys[i].good);
		c = parse_ok(text);
		assert_string_equal(c.secondary.words, own_keys[i].canon);
		assert_string_equal(c.primary.words, "");
		round_trip(&c);

		/* Refused with an invalid one, naming the key and its
		 * choices. */
		snprintf(text, sizeof(text), "provider=%s %s=%s", cls->name, k,
			 own_keys[i].bad);
		snprintf(want, sizeof(want), "%s=%s", k, own_keys[i].bad);
		unsigned ki = 0;
		while (strcmp(cls->keys[ki].name, k))
			ki++;
		parse_bad(text, want, cls->keys[ki].choices, NULL);
		snprintf(text, sizeof(text), "epoll ; secondary: provider=%s %s=%s",
			 cls->name, k, own_keys[i].bad);
		parse_bad(text, "secondary: ", want, NULL);
		/* With a long value: the whole of the choices still named
		 * (they were cut at 199 bytes, read_gate's after "does not"). */
		char longv[100];
		memset(longv, '9', 80);
		longv[80] = '\0';
		snprintf(text, sizeof(text), "provider=%s %s=%s", cls->name, k,
			 longv);
		parse_bad(text, longv, cls->keys[ki].choices, NULL);
		/* With no value. */
		snprintf(text, sizeof(text), "provider=%s %s=", cls->name, k);
		snprintf(want, sizeof(want), "%s=", k);
		parse_bad(text, want, cls->keys[ki].choices, NULL);
		/* Given twice. */
		snprintf(text, sizeof(text), "provider=%s %s=%s %s=%s", cls->name,
			 k, own_keys[i].good, k, own_keys[i].good);
		snprintf(want, sizeof(want), "%s is given twice", k);
		parse_bad(text, want, NULL);

		/* Refused for every other class, listing that class's keys. */
		for (const px_provider_class *const *op = px__classes; *op; op++) {
			if (*op == cls)
				continue;
			snprintf(text, sizeof(text), "provider=%s %s=%s",
				 (*op)->name, k, own_keys[i].good);
			snprintf(want, sizeof(want), "%s is not a key of provider=%s",
				 k, (*op)->name);
			parse_bad(text, want, "valid keys are", "provider", "wait",
				  "followers", NULL);
			/* Including through a preset of that class. */
			if ((*op)->npresets) {
				snprintf(text, sizeof(text), "%s %s=%s",
					 (*op)->presets[0].name, k,
					 own_keys[i].good);
				parse_bad(text, want, NULL);
			}
			/* And in the struct form. */
			memset(&c, 0, sizeof(c));
			snprintf(c.primary.provider, PX_NAME_MAX, "%s", (*op)->name);
			snprintf(c.primary.words, PX_WORDS_MAX, "%s=%s", k,
				 own_keys[i].good);
			char err[512] = "";
			assert_int_equal(px__config_resolve(&c, err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, want));
		}
	}
}

#ifdef PX_HAVE_URING
static void test_uring_keys(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("uring ring=256");
	assert_string_equal(c.primary.words, "ring=256");
	c = parse_ok("uring ring=32768");
	assert_string_equal(c.primary.words, "ring=32768");
	round_trip(&c);
	c = parse_ok("uring ring=0");       /* the default: not written */
	assert_string_equal(c.primary.words, "");
	c = parse_ok("uring ring=00064");
	assert_string_equal(c.primary.words, "ring=64");
	c = parse_ok("uring ring_flags=coop_taskrun");
	assert_string_equal(c.primary.words, "ring_flags=coop_taskrun");
	c = parse_ok("uring ring_flags=sqpoll");
	assert_string_equal(c.primary.words, "ring_flags=sqpoll");
	c = parse_ok("uring ring_flags=sqpoll,sqpoll");
	assert_string_equal(c.primary.words, "ring_flags=sqpoll");
	c = parse_ok("uring ring_flags=sqpoll,coop_taskrun ring=64");
	assert_string_equal(c.primary.words, "ring=64 ring_flags=coop_taskrun,sqpoll");
	round_trip(&c);
	expect_format("uring-dedicated ring_flags=sqpoll,coop_taskrun ring=64",
		      "provider=uring wait=uring interrupt=native "
		      "processor=dedicated max_aio=0 ring=64 "
		      "ring_flags=coop_taskrun,sqpoll");
	expect_format("uring ring=8 ops=file start=any max_aio=7",
		      "provider=uring wait=uring interrupt=native "
		      "processor=shared max_aio=7 ops=file start=any ring=8");

	parse_bad("uring ring=32769", "ring=32769", "32768", NULL);
	parse_bad("uring ring=-3", "ring=-3", "0 (default) to 32768", NULL);
	parse_bad("uring ring=12x", "ring=12x", "32768", NULL);
	parse_bad("uring ring=", "ring=", "32768", NULL);
	parse_bad("uring ring_flags=fast", "ring_flags=fast",
		  "coop_taskrun and sqpoll", NULL);
	parse_bad("uring ring_flags=", "coop_taskrun and sqpoll", NULL);
	parse_bad("uring ring_flags=sqpoll,", "coop_taskrun and sqpoll", NULL);
	parse_bad("uring ring_flags=,sqpoll", "coop_taskrun and sqpoll", NULL);
	parse_bad("uring ring=1 ring=2", "ring is given twice", NULL);

	/* Ring values given for a provider that has no ring. */
	parse_bad("epoll ring=64", "ring is not a key of provider=select",
		  "valid keys are provider, wait, interrupt, processor, max_aio, "
		  "ops, start, signal and followers",
		  NULL);
	parse_bad("epoll ring_flags=sqpoll", "ring_flags is not a key of "
					     "provider=select",
		  NULL);
	parse_bad("uring ring=64 wait=poll", "ring is not a key of provider=select",
		  NULL);
	parse_bad("uring ring=64 provider=select", "ring is not a key of "
						   "provider=select",
		  NULL);
	parse_bad("epoll ; secondary: wait=poll ring=8",
		  "secondary: ring is not a key of provider=select", NULL);
	/* A changed provider drops the words it inherited: none here, as a
	 * preset has none, but the section's own words go with it. */
	c = parse_ok("uring ring=64 ; secondary: provider=select");
	assert_string_equal(c.primary.words, "ring=64");
	assert_string_equal(c.secondary.words, "");

	/* A dedicated processor has one ring, its leader's: more rings are
	 * refused, not run as one while px_engine_name says "rings=4"
	 * (fixed problem 188).  One, or the default, is fine. */
	c = parse_ok("uring-dedicated rings=1");
	assert_string_equal(c.primary.words, "rings=1");
	round_trip(&c);
	c = parse_ok("uring-dedicated rings=0");
	assert_string_equal(c.primary.words, "");
	parse_bad("uring-dedicated rings=4", "rings=4",
		  "processor=dedicated", "one ring", NULL);
	parse_bad("uring rings=2 processor=dedicated", "rings=2",
		  "processor=dedicated", NULL);
	parse_bad("epoll ops=file ; secondary: provider=uring rings=2 "
		  "processor=dedicated",
		  "secondary: rings=2", "processor=dedicated", NULL);
	memset(&c, 0, sizeof(c));
	c.primary.processor = PX_PROCESSOR_DEDICATED;
	snprintf(c.primary.provider, PX_NAME_MAX, "uring");
	snprintf(c.primary.words, PX_WORDS_MAX, "rings=3");
	resolve_bad(&c, "rings=3", "processor=dedicated");
	/* Auto, which only io_uring's words narrow to io_uring, says so at
	 * the parse (not ENOSYS at the create, "auto found no engine"). */
	parse_bad("auto processor=dedicated rings=2", "rings=2",
		  "processor=dedicated", NULL);
	c = parse_ok("auto processor=dedicated rings=1");
	assert_string_equal(c.primary.words, "rings=1");
	round_trip(&c);
}
#endif

static void test_followers(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("epoll followers=fifo");
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	round_trip(&c);
	c = parse_ok("epoll followers=lifo");
	assert_int_equal(c.followers, PX_FOLLOWERS_LIFO);
	c = parse_ok("followers=fifo provider=select");
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	/* A global: allowed in the secondary section too. */
	c = parse_ok("epoll ; secondary: wait=poll followers=fifo");
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	round_trip(&c);
	expect_format("epoll followers=fifo",
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 followers=fifo");
	expect_format("followers=fifo", "auto processor=shared max_aio=0 "
					"followers=fifo");
	parse_bad("epoll followers=random", "unknown followers \"random\"",
		  "lifo or fifo", NULL);
	parse_bad("epoll followers=fifo ; secondary: wait=poll followers=lifo",
		  "followers is given twice", NULL);
}

static void test_signal_key(void **state)
{
	char want[64];

	(void)state;
	parse_bad("epoll interrupt=signal signal=9", "signal=9 is not usable",
		  "SIGKILL", "SIGSTOP", NULL);
	parse_bad("epoll interrupt=signal signal=19", "signal=19 is not usable", NULL);
	if (SIGRTMIN > 32) {
		snprintf(want, sizeof(want), "32 to %d", SIGRTMIN - 1);
		parse_bad("epoll interrupt=signal signal=32", "not usable", want, NULL);
	}
	parse_bad("epoll signal=10", "signal=10 only applies to interrupt=signal",
		  "interrupt=eventfd", NULL);
	parse_bad("epoll interrupt=pipe signal=10", "only applies to interrupt=signal",
		  "interrupt=pipe", NULL);
#ifdef PX_HAVE_URING
	parse_bad("uring signal=10", "only applies to interrupt=signal",
		  "interrupt=native", NULL);
#endif
}

/* ------------------------------------------------------------------ */
/* Sections                                                             */
/* ------------------------------------------------------------------ */

static void test_secondary(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("provider=select wait=epoll ops=accept,connect ; "
		     "secondary: provider=select wait=poll");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "epoll", "eventfd");
	assert_int_equal(c.primary.ops,
			 PX_OP_BIT(PX_OP_ACCEPT) | PX_OP_BIT(PX_OP_CONNECT));
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, "select", "poll", "eventfd");
	assert_int_equal(c.secondary.ops, 0);
	assert_int_equal(c.flags, 0);
	round_trip(&c);
	expect_format("provider=select wait=epoll ops=accept,connect ; "
		      "secondary: provider=select wait=poll",
		      "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ops=accept,connect ; "
		      "secondary: provider=select wait=poll interrupt=eventfd "
		      "processor=shared max_aio=0");

	/* Every key in the secondary; spacing around the markers is free. */
	c = parse_ok("epoll primary: ops=file ;secondary:provider=select "
		     "wait=select interrupt=signal signal=12 processor=dedicated "
		     "max_aio=100 ops=socket start=any-interrupt followers=fifo");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "epoll", "eventfd");
	assert_int_equal(c.primary.ops,
			 PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE));
	expect_pc(&c.secondary, PX_PROCESSOR_DEDICATED, "select", "select", "signal");
	assert_int_equal(c.secondary.intr_signo, 12);
	assert_int_equal(c.secondary.max_aio, 100);
	assert_int_equal(c.secondary.flags, PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD |
						    PX_PF_START_INTERRUPT);
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	round_trip(&c);

	/* The secondary's provider may come from its wait. */
	c = parse_ok("epoll ; secondary: wait=poll");
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, "select", "poll", "eventfd");
	/* Nothing is inherited from the primary. */
	c = parse_ok("poll-dedicated interrupt=pipe max_aio=4 ; secondary: wait=select");
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, "select", "select", "eventfd");
	assert_int_equal(c.secondary.max_aio, 0);
	/* An auto primary with a secondary. */
	c = parse_ok("auto ; secondary: wait=poll");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "", "", "");
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, "select", "poll", "eventfd");
	expect_format_cfg(&c, "auto processor=shared max_aio=0 ; secondary: "
			      "provider=select wait=poll interrupt=eventfd "
			      "processor=shared max_aio=0");
	c = parse_ok("ops=stream ; secondary: provider=select ops=file");
	assert_string_equal(c.primary.provider, "");
	round_trip(&c);
#ifdef PX_HAVE_URING
	c = parse_ok("uring primary: ops=file ; secondary: wait=epoll");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "uring", "uring", "native");
	c = parse_ok("primary: provider=select ; secondary: provider=uring "
		     "processor=dedicated ring=128");
	expect_pc(&c.secondary, PX_PROCESSOR_DEDICATED, "uring", "uring", "native");
	assert_string_equal(c.secondary.words, "ring=128");
	expect_format_cfg(&c, "provider=select wait=epoll interrupt=eventfd "
			      "processor=shared max_aio=0 ; secondary: "
			      "provider=uring wait=uring interrupt=native "
			      "processor=dedicated max_aio=0 ring=128");
	c = parse_ok("epoll ; secondary: wait=uring ring_flags=sqpoll");
	assert_string_equal(c.secondary.words, "ring_flags=sqpoll");
	round_trip(&c);
#endif

	/* Without a secondary section there is none. */
	c = parse_ok("epoll");
	assert_int_equal(c.secondary.processor, PX_PROCESSOR_NONE);
	assert_string_equal(c.secondary.provider, "");
	assert_string_equal(c.secondary.wait, "");
	assert_string_equal(c.secondary.interrupt, "");
	assert_string_equal(c.secondary.words, "");

#ifdef PX_HAVE_URING
	parse_bad("epoll ; secondary:", "secondary: no provider given",
		  TC_PROVIDERS, "auto is for the primary only", NULL);
	parse_bad("epoll ; secondary: ring=8", "secondary: no provider given",
		  TC_PROVIDERS, NULL);
#else
	parse_bad("epoll ; secondary:", "secondary: no provider given",
		  "choose select or posix", NULL);
#endif
	parse_bad("epoll ; secondary: max_aio=4", "secondary: no provider given",
		  NULL);
	parse_bad("epoll ; secondary: interrupt=pipe", "secondary: no provider given",
		  NULL);
	parse_bad("epoll ;", "expected \"secondary:\" after \";\"", NULL);
	parse_bad("epoll ; poll", "expected \"secondary:\" after \";\"", NULL);
	parse_bad("epoll ; primary: wait=poll", "expected \"secondary:\"", NULL);
	parse_bad("epoll secondary: wait=poll", "\"secondary:\" must follow \";\"",
		  NULL);
	parse_bad("epoll ; secondary: wait=poll ; secondary: wait=select",
		  "only one \"; secondary:\" section", NULL);
	parse_bad("epoll ; secondary: primary: wait=poll", "\"primary:\" may only",
		  NULL);
	parse_bad("max_aio=2 primary: wait=poll", "\"primary:\" may only open", NULL);
#ifdef PX_HAVE_URING
	parse_bad("epoll ; secondary: wait=kqueue", "secondary: unknown wait \"kqueue\"",
		  TC_WAITS, NULL);
	parse_bad("epoll ; secondary: provider=uring wait=poll",
		  "secondary: invalid combination provider=uring wait=poll",
		  "provider=uring takes wait uring", NULL);
#else
	parse_bad("epoll ; secondary: wait=kqueue", "secondary: unknown wait \"kqueue\"",
		  TC_WAITS, NULL);
#endif
	parse_bad("epoll ; secondary: poll", "secondary:", "must be the first word",
		  NULL);
	parse_bad("epoll ; secondary: wait=poll wait=select",
		  "secondary: wait is given twice", NULL);
	parse_bad("epoll ; secondary: wait=poll interrupt=native",
		  "secondary: invalid combination", "pipe, eventfd or signal", NULL);
}

/* ------------------------------------------------------------------ */
/* Errors                                                               */
/* ------------------------------------------------------------------ */

static void test_errors(void **state)
{
	(void)state;
	parse_bad("foo", "unknown preset \"foo\"", "auto", "epoll", "poll",
		  "select", "epoll-dedicated", "poll-dedicated",
		  "select-dedicated", NULL);
	parse_bad("epoll foo=1", "unknown key \"foo\"", "provider", "wait",
		  "interrupt", "processor", "max_aio", "ops", "start", "signal",
		  "followers", NULL);
#ifdef PX_HAVE_URING
	parse_bad("foo", "uring", "uring-dedicated", NULL);
	parse_bad("epoll foo=1", "valid keys are provider, wait, interrupt, "
				 "processor, max_aio, ops, start, signal, "
				 TC_KEYS,
		  NULL);
#endif
	/* Every preset of every class is named. */
	{
		char err[512] = "";
		px_config c;
		assert_int_equal(px_config_parse(&c, "foo", err, sizeof(err)),
				 -EINVAL);
		for (const px_provider_class *const *cp = px__classes; *cp; cp++)
			for (unsigned i = 0; i < (*cp)->npresets; i++)
				assert_non_null(strstr(err, (*cp)->presets[i].name));
		assert_int_equal(px_config_parse(&c, "epoll foo=1", err,
						 sizeof(err)),
				 -EINVAL);
		for (const px_provider_class *const *cp = px__classes; *cp; cp++)
			for (unsigned i = 0; i < (*cp)->nkeys; i++)
				assert_non_null(strstr(err, (*cp)->keys[i].name));
	}
	parse_bad("epoll =1", "unknown key \"\"", "provider", NULL);
	parse_bad("epoll Wait=poll", "unknown key \"Wait\"", NULL);
	parse_bad("epoll bar", "\"bar\" is not a key=value word", "provider",
		  "followers", NULL);
	parse_bad("epoll poll", "preset \"poll\" must be the first word", NULL);
	parse_bad("auto auto", "preset \"auto\" must be the first word", NULL);
	parse_bad("provider=select wait=kqueue",
		  "unknown wait \"kqueue\" for provider=select: choose epoll, poll, "
		  "select or linux_rt",
		  NULL);
#ifdef PX_HAVE_URING
	parse_bad("provider=uring wait=kqueue",
		  "unknown wait \"kqueue\" for provider=uring: choose uring", NULL);
	parse_bad("wait=kqueue", "unknown wait \"kqueue\": choose " TC_WAITS, NULL);
	parse_bad("provider=iocp", "unknown provider \"iocp\": choose "
				   TC_PROVIDERS,
		  NULL);
	parse_bad("provider=", "unknown provider \"\": choose " TC_PROVIDERS, NULL);
#else
	parse_bad("wait=kqueue", "unknown wait \"kqueue\": choose " TC_WAITS, NULL);
	parse_bad("provider=iocp", "unknown provider \"iocp\": choose " TC_PROVIDERS,
		  NULL);
#endif
	parse_bad("epoll wait=", "unknown wait \"\"", NULL);
	parse_bad("epoll interrupt=semaphore",
		  "unknown interrupt \"semaphore\": choose pipe, eventfd, signal or "
		  "native",
		  NULL);
	parse_bad("interrupt=semaphore", "unknown interrupt \"semaphore\"", NULL);
	parse_bad("epoll interrupt=", "unknown interrupt \"\"", NULL);
	parse_bad("epoll interrupt=eventfdeventfdeventfd", "unknown interrupt", NULL);
	parse_bad("epoll processor=none", "unknown processor \"none\": choose shared "
					  "or dedicated",
		  NULL);
	parse_bad("epoll wait=poll wait=select", "wait is given twice", NULL);
	parse_bad("epoll max_aio=1 max_aio=2", "max_aio is given twice", NULL);
	parse_bad("epoll provider=select provider=select", "provider is given twice",
		  NULL);

	/* Combinations. */
	parse_bad("wait=linux_rt", "wait=linux_rt needs processor=dedicated",
		  "one thread named in advance", NULL);
	parse_bad("linux-rt-dedicated processor=shared",
		  "wait=linux_rt needs processor=dedicated", NULL);
	parse_bad("epoll ; secondary: wait=linux_rt",
		  "secondary: wait=linux_rt needs processor=dedicated", NULL);
	parse_bad("wait=linux_rt interrupt=eventfd processor=dedicated",
		  "invalid combination provider=select wait=linux_rt "
		  "interrupt=eventfd",
		  "wait=linux_rt takes interrupt pipe or signal", NULL);
	parse_ok("epoll ; secondary: wait=linux_rt processor=dedicated");
	parse_bad("epoll interrupt=native",
		  "invalid combination provider=select wait=epoll interrupt=native",
		  "wait=epoll takes interrupt pipe, eventfd or signal", NULL);
#ifdef PX_HAVE_URING
	parse_bad("provider=uring wait=epoll",
		  "invalid combination provider=uring wait=epoll",
		  "provider=uring takes wait uring", NULL);
	parse_bad("provider=select wait=uring",
		  "invalid combination provider=select wait=uring",
		  "provider=select takes wait epoll, poll, select or linux_rt",
		  NULL);
	parse_bad("uring interrupt=signal",
		  "invalid combination provider=uring wait=uring interrupt=signal",
		  "wait=uring takes interrupt native", NULL);
	parse_bad("provider=uring interrupt=pipe", "wait=uring takes interrupt native",
		  NULL);
#endif

	/* Provider words fill their field: 159 bytes in all (a NUL ends
	 * them), in one word or several.  One word of 159 was refused,
	 * "at most 159 bytes" (fixed problem 186). */
	{
		char text[512], words[PX_WORDS_MAX + 8];
		int w = snprintf(words, sizeof(words), "aio_threads=");
		while (w < PX_WORDS_MAX - 2)
			words[w++] = '0';
		words[w++] = '7';
		words[w] = '\0';
		assert_int_equal(strlen(words), PX_WORDS_MAX - 1);
		snprintf(text, sizeof(text), "posix-aio %s", words);
		px_config c = parse_ok(text);
		assert_string_equal(c.primary.words, "aio_threads=7");
		/* Two words, 159 bytes with the space between them. */
		snprintf(text, sizeof(text), "posix-aio sockets=aio %s",
			 words + strlen("sockets=aio "));
		memcpy(text + strlen("posix-aio sockets=aio "), "aio_threads=", 12);
		c = parse_ok(text);
		assert_string_equal(c.primary.words, "aio_threads=7 sockets=aio");
		/* One byte more is refused, in either form. */
		snprintf(text, sizeof(text), "posix-aio aio_threads=0%s",
			 words + strlen("aio_threads="));
		parse_bad(text, "provider words too long", "at most 159 bytes",
			  NULL);
		snprintf(text, sizeof(text), "posix-aio sockets=aio %s", words);
		parse_bad(text, "provider words too long", NULL);
	}

	/* The message is always terminated, even when cut short. */
	char small[16];
	memset(small, 'x', sizeof(small));
	px_config c;
	assert_int_equal(px_config_parse(&c, "epoll foo=1", small, sizeof(small)),
			 -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_int_equal(px_config_parse(NULL, "epoll", small, sizeof(small)),
			 -EINVAL);
	assert_true(strlen(small) > 0);
	/* A good parse clears a message buffer. */
	memset(small, 'x', sizeof(small));
	assert_int_equal(px_config_parse(&c, "epoll", small, sizeof(small)), 0);
	assert_string_equal(small, "");
}

/* ------------------------------------------------------------------ */
/* Round trip                                                           */
/* ------------------------------------------------------------------ */

static void test_round_trip(void **state)
{
	static const char *const texts[] = {
		"auto",
		"auto interrupt=pipe max_aio=3",
		"epoll",
		"provider=select wait=epoll interrupt=eventfd processor=shared max_aio=0",
		"select interrupt=pipe max_aio=17 start=leader",
		"poll-dedicated interrupt=signal signal=12 ops=stream,accept",
		"epoll ops=read_file,write_dgram,connect start=any",
		"provider=select wait=epoll ops=accept,connect ; secondary: "
		"provider=select wait=poll",
		"epoll-dedicated ops=file ; secondary: wait=select interrupt=pipe "
		"processor=dedicated max_aio=3 start=any-interrupt",
#ifdef PX_HAVE_URING
		"uring ring=1024 ring_flags=coop_taskrun max_aio=4096",
		"uring-dedicated followers=fifo",
		"auto ring=16 ring_flags=sqpoll",
		"epoll ; secondary: provider=uring ring=8 ring_flags=sqpoll "
		"processor=dedicated",
#endif
	};

	(void)state;
	for (size_t i = 0; i < N_OF(texts); i++) {
		px_config c = parse_ok(texts[i]);
		round_trip(&c);
	}

	/* Every preset with each start flag, follower order and more. */
	for (size_t i = 0; i < N_PRESETS; i++) {
		static const char *const extra[] = { "", " start=any", " followers=fifo",
						     " max_aio=9 ops=dgram",
						     " ; secondary: wait=poll" };
		for (size_t j = 0; j < N_OF(extra); j++) {
			char text[128];
			snprintf(text, sizeof(text), "%s%s", presets[i].name, extra[j]);
			px_config c = parse_ok(text);
			round_trip(&c);
		}
	}
	assert_int_equal(px_config_format(NULL, NULL, 0), -EINVAL);
}

/* ------------------------------------------------------------------ */
/* The struct form                                                      */
/* ------------------------------------------------------------------ */

static void resolve_bad_rc(int want, px_config *c, const char *needle,
			   const char *needle2)
{
	char err[512] = "";
	char buf[256];
	px_config copy = *c;

	assert_int_equal(px__config_resolve(&copy, err, sizeof(err)), want);
	if (!strstr(err, needle) || (needle2 && !strstr(err, needle2)))
		fail_msg("resolve message \"%s\" lacks \"%s\" / \"%s\"", err, needle,
			 needle2 ? needle2 : "");
	/* Such a struct does not format either. */
	assert_int_equal(px_config_format(c, buf, sizeof(buf)), -EINVAL);
}

static void resolve_bad(px_config *c, const char *needle, const char *needle2)
{
	resolve_bad_rc(-EINVAL, c, needle, needle2);
}

/* A struct filled by hand: format gives its canonical text, which parses
 * to the struct as resolve fills it. */
static void struct_ok(const px_config *c, const char *want)
{
	char buf[512];
	px_config res = *c;

	assert_int_equal(px__config_resolve(&res, NULL, 0), 0);
	assert_int_equal(px_config_format(c, buf, sizeof(buf)), (int)strlen(want));
	assert_string_equal(buf, want);
	px_config back = parse_ok(buf);
	if (!cfg_equal(&back, &res))
		fail_msg("struct and its text \"%s\" differ", buf);
	round_trip(&res);
}

static void test_struct_form(void **state)
{
	px_config c, base;

	(void)state;
	/* All zero: auto. */
	memset(&c, 0, sizeof(c));
	struct_ok(&c, "auto processor=shared max_aio=0");
	snprintf(c.primary.interrupt, PX_NAME_MAX, "pipe");
	c.primary.max_aio = 8;
	struct_ok(&c, "auto interrupt=pipe processor=shared max_aio=8");

	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "select");
	struct_ok(&c, "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0");
	snprintf(c.primary.wait, PX_NAME_MAX, "poll");
	snprintf(c.primary.interrupt, PX_NAME_MAX, "pipe");
	c.primary.processor = PX_PROCESSOR_DEDICATED;
	c.primary.ops = PX_OP_BIT(PX_OP_ACCEPT);
	c.primary.flags = PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD;
	c.followers = PX_FOLLOWERS_FIFO;
	struct_ok(&c, "provider=select wait=poll interrupt=pipe processor=dedicated "
		      "max_aio=0 ops=accept start=any followers=fifo");

	/* The provider follows the wait. */
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.wait, PX_NAME_MAX, "select");
	struct_ok(&c, "provider=select wait=select interrupt=eventfd "
		      "processor=shared max_aio=0");

	/* A secondary. */
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "select");
	c.secondary.processor = PX_PROCESSOR_SHARED;
	snprintf(c.secondary.wait, PX_NAME_MAX, "poll");
	snprintf(c.secondary.interrupt, PX_NAME_MAX, "signal");
	c.secondary.intr_signo = 12;
	struct_ok(&c, "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0 ; secondary: provider=select "
		      "wait=poll interrupt=signal processor=shared max_aio=0 "
		      "signal=12");

#ifdef PX_HAVE_URING
	/* Words in any spacing come back canonical. */
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "uring");
	snprintf(c.primary.words, PX_WORDS_MAX,
		 "  ring_flags=sqpoll,coop_taskrun \t ring=064 ");
	struct_ok(&c, "provider=uring wait=uring interrupt=native processor=shared "
		      "max_aio=0 ring=64 ring_flags=coop_taskrun,sqpoll");
	px_config r = c;
	assert_int_equal(px__config_resolve(&r, NULL, 0), 0);
	assert_string_equal(r.primary.words, "ring=64 ring_flags=coop_taskrun,sqpoll");
	/* Auto words select the candidates. */
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.words, PX_WORDS_MAX, "ring=8");
	struct_ok(&c, "auto processor=shared max_aio=0 ring=8");
	snprintf(c.primary.interrupt, PX_NAME_MAX, "eventfd");
	resolve_bad(&c, "no engine that auto may choose", "interrupt=eventfd");
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "uring");
	snprintf(c.primary.words, PX_WORDS_MAX, "ring_flags=fast");
	resolve_bad(&c, "ring_flags=fast", "coop_taskrun and sqpoll");
	snprintf(c.primary.words, PX_WORDS_MAX, "ring=100000");
	resolve_bad(&c, "ring=100000", "32768");
	snprintf(c.primary.words, PX_WORDS_MAX, "ring");
	resolve_bad(&c, "expected key=value", NULL);
	snprintf(c.primary.words, PX_WORDS_MAX, "ring=1 ring=2");
	resolve_bad(&c, "ring is given twice", NULL);
	snprintf(c.primary.words, PX_WORDS_MAX, "sqpoll=1");
	resolve_bad(&c, "sqpoll is not a key of provider=uring",
		    "ring, ring_flags, rings and read_gate");
#endif

	/* Names not NUL-terminated. */
	memset(&base, 0, sizeof(base));
	snprintf(base.primary.provider, PX_NAME_MAX, "select");
	c = base;
	memset(c.primary.provider, 'a', PX_NAME_MAX);
	resolve_bad(&c, "not NUL-terminated", NULL);
	c = base;
	memset(c.primary.wait, 'a', PX_NAME_MAX);
	resolve_bad(&c, "not NUL-terminated", NULL);
	c = base;
	memset(c.primary.interrupt, 'a', PX_NAME_MAX);
	resolve_bad(&c, "not NUL-terminated", NULL);
	c = base;
	memset(c.primary.words, 'a', PX_WORDS_MAX);
	resolve_bad(&c, "not NUL-terminated", NULL);
	c = base;
	c.secondary.processor = PX_PROCESSOR_SHARED;
	memset(c.secondary.provider, 's', PX_NAME_MAX);
	resolve_bad(&c, "secondary: ", "not NUL-terminated");
	/* Exactly one byte short is fine. */
	c = base;
	memset(c.primary.words, ' ', PX_WORDS_MAX - 1);
	struct_ok(&c, "provider=select wait=epoll interrupt=eventfd "
		      "processor=shared max_aio=0");

	/* Unknown names list the valid ones. */
	c = base;
	snprintf(c.primary.provider, PX_NAME_MAX, "iocp");
#ifdef PX_HAVE_URING
	resolve_bad(&c, "unknown provider \"iocp\"", "choose " TC_PROVIDERS);
#else
	resolve_bad(&c, "unknown provider \"iocp\"", "choose select or posix");
#endif
	c = base;
	snprintf(c.primary.provider, PX_NAME_MAX, "Select");
	resolve_bad(&c, "unknown provider \"Select\"", NULL);
	c = base;
	snprintf(c.primary.wait, PX_NAME_MAX, "aiocb");
	resolve_bad(&c, "invalid combination provider=select wait=aiocb",
		    "provider=select takes wait epoll, poll, select or linux_rt");
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.wait, PX_NAME_MAX, "kqueue");
#ifdef PX_HAVE_URING
	resolve_bad(&c, "unknown wait \"kqueue\"", TC_WAITS);
#else
	resolve_bad(&c, "unknown wait \"kqueue\"", TC_WAITS);
#endif
	c = base;
	snprintf(c.primary.interrupt, PX_NAME_MAX, "bogus");
	resolve_bad(&c, "unknown interrupt \"bogus\" for wait=epoll",
		    "pipe, eventfd or signal");
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.interrupt, PX_NAME_MAX, "bogus");
	resolve_bad(&c, "unknown interrupt \"bogus\"", "pipe, eventfd, signal or native");
	c = base;
	snprintf(c.primary.interrupt, PX_NAME_MAX, "native");
	resolve_bad(&c, "invalid combination provider=select wait=epoll "
			"interrupt=native",
		    "wait=epoll takes interrupt pipe, eventfd or signal");
	c = base;
	snprintf(c.primary.words, PX_WORDS_MAX, "ring=8");
	resolve_bad(&c, "ring is not a key of provider=select",
		    "it has no keys of its own");
}

/* A property over generated structs: every struct that resolves
 * formats to a text that parses back to it (resolved, without the flags,
 * which have no text form) and formats to the same text again; every
 * struct that does not resolve does not format either.  The structs are
 * drawn from every class's providers, waits, interrupts and own keys
 * (good values and defaults, at the bounds of own_keys), with some
 * names of the wrong class and some garbage, so that about one in four
 * resolves. */
static uint64_t prop_state = 0x9e3779b97f4a7c15ull;

static unsigned prop_rand(unsigned n)
{
	prop_state ^= prop_state << 13;
	prop_state ^= prop_state >> 7;
	prop_state ^= prop_state << 17;
	return (unsigned)(prop_state % n);
}

static const char *prop_pick(const char *const *v, size_t n)
{
	return v[prop_rand((unsigned)n)];
}

static void prop_processor(px_processor_config *pc, bool secondary)
{
	static const char *const intrs[] = { "", "", "pipe", "eventfd",
					     "signal", "native", "bogus" };
	static const char *const extra_words[] = { "ring=0", "depth=0",
						   "rings=1", "read_gate=0",
						   "sockets=refuse", "nokey=1" };
	static const unsigned flags[] = {
		0, 0, PX_PF_FLAGS_SET, PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD,
		PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT,
		PX_PF_START_ANY_THREAD, PX_PF_FLAGS_SET | PX_PF_START_INTERRUPT,
	};
	static const unsigned max_aio[] = { 0, 0, 1, 7, 65536, UINT_MAX };
	static const int signos[] = { 0, 0, 0, 10, 12, 40, 64, 9, 33 };
	size_t ncls = 0;
	const px_provider_class *cls = NULL;

	memset(pc, 0, sizeof(*pc));
	pc->processor = (px_processor_type)prop_rand(3);
	if (secondary && prop_rand(2) == 0)
		pc->processor = PX_PROCESSOR_NONE;
	while (px__classes[ncls])
		ncls++;
	/* A provider (or none: auto, or the wait's), a wait of it (or of
	 * any class, or none), an interrupt. */
	unsigned r = prop_rand((unsigned)ncls + 2);
	if (r < ncls) {
		cls = px__classes[r];
		snprintf(pc->provider, PX_NAME_MAX, "%s", cls->name);
	}
	const px_provider_class *wc = cls ? cls : px__classes[prop_rand((unsigned)ncls)];
	r = prop_rand(4);
	if (r == 1 || r == 2)
		snprintf(pc->wait, PX_NAME_MAX, "%s",
			 wc->waits[prop_rand(wc->nwaits)].name);
	else if (r == 3)
		snprintf(pc->wait, PX_NAME_MAX, "%s",
			 px__classes[prop_rand((unsigned)ncls)]->waits[0].name);
	/* Mostly the wait's default or one of its interrupts. */
	const px_wait_desc *wd = NULL;
	for (unsigned i = 0; i < wc->nwaits; i++)
		if (!strcmp(wc->waits[i].name, pc->wait[0] ? pc->wait : "-"))
			wd = &wc->waits[i];
	r = prop_rand(8);
	if (r < 3 && wd) {
		unsigned t;
		do
			t = prop_rand(PX_INTR_COUNT);
		while (!(wd->intrs & (1u << t)));
		snprintf(pc->interrupt, PX_NAME_MAX, "%s", px__intr_name((int)t));
	} else if (r == 7) {
		snprintf(pc->interrupt, PX_NAME_MAX, "%s",
			 prop_pick(intrs, N_OF(intrs)));
	}
	pc->flags = flags[prop_rand(N_OF(flags))];
	pc->max_aio = max_aio[prop_rand(N_OF(max_aio))];
	pc->ops = prop_rand(5) ? 0 : prop_rand(PX_OPS_IO + 1);
	pc->intr_signo = signos[prop_rand(N_OF(signos))];
	if (!strcmp(pc->interrupt, "signal") || prop_rand(4) == 0)
		;
	else
		pc->intr_signo = 0;
	/* Up to three provider words, own keys of the class (or any). */
	size_t pos = 0, nw = prop_rand(2) ? 0 : 1 + prop_rand(3);
	for (size_t i = 0; i < nw; i++) {
		const char *w;
		char buf[64];
		if (prop_rand(5) == 0) {
			w = prop_pick(extra_words, N_OF(extra_words));
		} else {
			/* Mostly a key of the section's class. */
			size_t k = prop_rand((unsigned)N_OF(own_keys));
			for (unsigned t = 0; cls && t < 8 &&
			     strcmp(own_keys[k].cls, cls->name); t++)
				k = prop_rand((unsigned)N_OF(own_keys));
			snprintf(buf, sizeof(buf), "%s=%s", own_keys[k].key,
				 own_keys[k].good);
			w = buf;
		}
		int n = snprintf(pc->words + pos, PX_WORDS_MAX - pos, "%s%s",
				 pos ? (prop_rand(2) ? " " : " \t ") : "", w);
		if (n < 0 || pos + (size_t)n >= PX_WORDS_MAX)
			break;
		pos += (size_t)n;
	}
}

static void test_struct_round_trip_property(void **state)
{
	unsigned resolved = 0, refused = 0;

	(void)state;
	for (unsigned i = 0; i < 20000; i++) {
		px_config c, r;
		char buf[1024], again[1024];

		memset(&c, 0, sizeof(c));
		prop_processor(&c.primary, false);
		prop_processor(&c.secondary, true);
		c.followers = (px_follower_order)prop_rand(2);
		c.flags = prop_rand(4) == 0 ? PX_CF_NO_ENV : 0;
		r = c;
		int rc = px__config_resolve(&r, NULL, 0);
		int n = px_config_format(&c, buf, sizeof(buf));
		if (rc < 0) {
			refused++;
			if (n != -EINVAL)
				fail_msg("struct %u: refused by resolve (%d) but "
					 "formats: \"%s\"", i, rc, buf);
			continue;
		}
		resolved++;
		if (n < 0 || (size_t)n >= sizeof(buf))
			fail_msg("struct %u: resolves but format gives %d", i, n);
		/* Resolving is idempotent. */
		px_config r2 = r;
		assert_int_equal(px__config_resolve(&r2, NULL, 0), 0);
		if (!cfg_equal(&r, &r2))
			fail_msg("struct %u: resolving twice changed it: \"%s\"",
				 i, buf);
		px_config back;
		char err[512] = "";
		rc = px_config_parse(&back, buf, err, sizeof(err));
		if (rc != 0)
			fail_msg("struct %u: its text \"%s\" does not parse: %s",
				 i, buf, err);
		r.flags = 0;
		if (!cfg_equal(&back, &r))
			fail_msg("struct %u: its text \"%s\" parses to another "
				 "config (words \"%s\" against \"%s\")",
				 i, buf, back.primary.words, r.primary.words);
		assert_int_equal(px_config_format(&back, again, sizeof(again)), n);
		assert_string_equal(again, buf);
	}
	/* Neither side vacuous. */
	if (resolved < 500 || refused < 500)
		fail_msg("%u structs resolved, %u refused: the generator drifted",
			 resolved, refused);
}

/* ------------------------------------------------------------------ */
/* The resolver                                                         */
/* ------------------------------------------------------------------ */

static void test_resolve(void **state)
{
	px_config c;
	px_processor_config pc;
	char err[256];

	(void)state;
	memset(&c, 0, sizeof(c));
	assert_int_equal(px__config_resolve(&c, err, sizeof(err)), 0);
	check_auto(&c);

	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "select");
	assert_int_equal(px__config_resolve(&c, err, sizeof(err)), 0);
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, "select", "epoll", "eventfd");
	assert_int_equal(c.secondary.processor, PX_PROCESSOR_NONE);

	memset(&c, 0, sizeof(c));
	snprintf(c.primary.wait, PX_NAME_MAX, "poll");   /* the provider follows */
	assert_int_equal(px__config_resolve(&c, NULL, 0), 0);
	assert_string_equal(c.primary.provider, "select");

	/* A secondary exists when its processor is not NONE; with NONE the
	 * rest of it is ignored (and cleared). */
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "select");
	snprintf(c.secondary.provider, PX_NAME_MAX, "select");
	snprintf(c.secondary.wait, PX_NAME_MAX, "select");
	snprintf(c.secondary.words, PX_WORDS_MAX, "junk");
	c.secondary.max_aio = 5;
	assert_int_equal(px__config_resolve(&c, NULL, 0), 0);
	expect_pc(&c.secondary, PX_PROCESSOR_NONE, "", "", "");
	assert_string_equal(c.secondary.words, "");
	assert_int_equal(c.secondary.max_aio, 0);
	c.secondary.processor = PX_PROCESSOR_SHARED;
	snprintf(c.secondary.provider, PX_NAME_MAX, "select");
	snprintf(c.secondary.wait, PX_NAME_MAX, "select");
	assert_int_equal(px__config_resolve(&c, NULL, 0), 0);
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, "select", "select", "eventfd");
	c.secondary.processor = PX_PROCESSOR_DEDICATED;
	snprintf(c.secondary.interrupt, PX_NAME_MAX, "native");
	resolve_bad(&c, "secondary: invalid combination", "pipe, eventfd or signal");
	memset(&c, 0, sizeof(c));
	snprintf(c.primary.provider, PX_NAME_MAX, "select");
	c.secondary.processor = PX_PROCESSOR_SHARED;
	resolve_bad(&c, "secondary: no provider given", "auto is for the primary");
	snprintf(c.secondary.interrupt, PX_NAME_MAX, "pipe");
	resolve_bad(&c, "secondary: no provider given", NULL);

	/* Out-of-range values name the choices. */
	px_config base;
	memset(&base, 0, sizeof(base));
	snprintf(base.primary.provider, PX_NAME_MAX, "select");
	c = base;
	c.primary.processor = (px_processor_type)5;
	resolve_bad(&c, "unknown processor 5", "shared or dedicated");
	c = base;
	c.followers = (px_follower_order)3;
	resolve_bad(&c, "unknown followers 3", "lifo or fifo");
	c = base;
	c.flags = 0x4000;
	resolve_bad(&c, "unknown config flags", NULL);
	c = base;
	c.primary.flags = 0x40;
	resolve_bad(&c, "unknown processor flags", "start=any, any-interrupt or leader");
	c = base;
	c.primary.flags = PX_PF_FLAGS_SET | PX_PF_START_INTERRUPT;
	resolve_bad(&c, "needs starts from any thread", NULL);
	c = base;
	c.primary.ops = PX_OP_BIT(PX_OP_POST);
	resolve_bad(&c, "not I/O", "read_stream");
	c = base;
	c.primary.intr_signo = 10;
	resolve_bad(&c, "only applies to interrupt=signal", "interrupt=eventfd");
	c = base;
	snprintf(c.primary.interrupt, PX_NAME_MAX, "signal");
	c.primary.intr_signo = SIGKILL;
	resolve_bad(&c, "is not usable", "SIGKILL");
	c = base;
	snprintf(c.primary.interrupt, PX_NAME_MAX, "signal");
	c.primary.intr_signo = 200;
	resolve_bad(&c, "is not usable", NULL);
	/* The same checks on an auto processor. */
	memset(&c, 0, sizeof(c));
	c.primary.intr_signo = 10;
	resolve_bad(&c, "only applies to interrupt=signal", NULL);
	memset(&c, 0, sizeof(c));
	c.primary.ops = PX_OP_BIT(PX_OP_TIMER);
	resolve_bad(&c, "not I/O", NULL);

	/* Flags without PX_PF_FLAGS_SET mean "the provider's": dropped. */
	c = base;
	c.primary.flags = PX_PF_START_ANY_THREAD;
	assert_int_equal(px__config_resolve(&c, NULL, 0), 0);
	assert_int_equal(c.primary.flags, 0);
	/* PX_CF_NO_ENV is kept. */
	c = base;
	c.flags = PX_CF_NO_ENV;
	assert_int_equal(px__config_resolve(&c, NULL, 0), 0);
	assert_int_equal(c.flags, PX_CF_NO_ENV);

	/* One processor on its own. */
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, PX_NAME_MAX, "select");
	snprintf(pc.wait, PX_NAME_MAX, "poll");
	assert_int_equal(px__resolve_processor(&pc, "", err, sizeof(err)), 0);
	expect_pc(&pc, PX_PROCESSOR_SHARED, "select", "poll", "eventfd");
	snprintf(pc.interrupt, PX_NAME_MAX, "native");
	assert_int_equal(px__resolve_processor(&pc, "here: ", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "here: invalid combination"));
	assert_non_null(strstr(err, "pipe, eventfd or signal"));
	memset(&pc, 0, sizeof(pc));
	assert_int_equal(px__resolve_processor(&pc, "", err, sizeof(err)), 0);
	expect_pc(&pc, PX_PROCESSOR_SHARED, "", "", "");
#ifdef PX_HAVE_URING
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, PX_NAME_MAX, "uring");
	assert_int_equal(px__resolve_processor(&pc, "", err, sizeof(err)), 0);
	expect_pc(&pc, PX_PROCESSOR_SHARED, "uring", "uring", "native");
	snprintf(pc.wait, PX_NAME_MAX, "epoll");
	assert_int_equal(px__resolve_processor(&pc, "", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "provider=uring takes wait uring"));
#endif
	assert_int_equal(px__config_resolve(NULL, NULL, 0), -EINVAL);
}

/* px__spec_of: what a provider is built from. */
static void test_spec(void **state)
{
	px_processor_config pc;
	px_proc_spec spec;
	char err[256];

	(void)state;
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, PX_NAME_MAX, "select");
	snprintf(pc.wait, PX_NAME_MAX, "poll");
	snprintf(pc.interrupt, PX_NAME_MAX, "pipe");
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), 0);
	assert_ptr_equal(spec.cls, px__class_find("select", 6));
	assert_non_null(spec.wait);
	assert_string_equal(spec.wait->name, "poll");
	assert_int_equal(spec.intr, PX_INTR_PIPE);
	/* pc itself is left alone. */
	assert_int_equal(pc.processor, PX_PROCESSOR_NONE);

	/* Defaults filled in. */
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.wait, PX_NAME_MAX, "select");
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), 0);
	assert_string_equal(spec.cls->name, "select");
	assert_string_equal(spec.wait->name, "select");
	assert_int_equal(spec.intr, PX_INTR_EVENTFD);

	/* An auto processor has no spec; a bad one says why. */
	memset(&pc, 0, sizeof(pc));
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no provider chosen"));
	snprintf(pc.provider, PX_NAME_MAX, "select");
	snprintf(pc.interrupt, PX_NAME_MAX, "native");
	assert_int_equal(px__spec_of(&pc, &spec, "secondary: ", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "secondary: invalid combination"));

#ifdef PX_HAVE_URING
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.provider, PX_NAME_MAX, "uring");
	snprintf(pc.words, PX_WORDS_MAX, "ring_flags=sqpoll ring=128");
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), 0);
	assert_string_equal(spec.cls->name, "uring");
	assert_string_equal(spec.wait->name, "uring");
	assert_int_equal(spec.intr, PX_INTR_NATIVE);
	const px_uring_settings *us = (const px_uring_settings *)spec.settings;
	assert_int_equal(us->entries, 128);
	assert_int_equal(us->flags, PX_URING_SQPOLL);
	/* Defaults without words. */
	pc.words[0] = '\0';
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), 0);
	assert_int_equal(us->entries, 0);
	assert_int_equal(us->flags, 0);
	snprintf(pc.words, PX_WORDS_MAX, "ring=40000");
	assert_int_equal(px__spec_of(&pc, &spec, "", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "32768"));
#endif
}

/* ------------------------------------------------------------------ */
/* The class list                                                       */
/* ------------------------------------------------------------------ */

static void test_classes(void **state)
{
	unsigned n = 0;

	(void)state;
	for (const px_provider_class *const *cp = px__classes; *cp; cp++, n++) {
		const px_provider_class *cls = *cp;
		assert_non_null(cls->name);
		assert_true(strlen(cls->name) > 0 && strlen(cls->name) < PX_NAME_MAX);
		assert_non_null(cls->summary);
		assert_ptr_equal(px__class_find(cls->name, strlen(cls->name)), cls);
		assert_null(px__class_find(cls->name, strlen(cls->name) - 1));
		assert_non_null(cls->ops);
		assert_string_equal(cls->ops->name, cls->name);
		assert_non_null(cls->ops->create);
		assert_true(cls->nwaits > 0 && cls->waits);
		assert_int_equal(cls->native_ops & ~(uint32_t)PX_OPS_IO, 0);
		for (unsigned w = 0; w < cls->nwaits; w++) {
			const px_wait_desc *wd = &cls->waits[w];
			assert_true(strlen(wd->name) < PX_NAME_MAX);
			assert_non_null(wd->summary);
			assert_true(wd->intrs != 0);
			assert_int_equal(wd->intrs & ~(((1u << PX_INTR_COUNT) - 1) &
						       ~1u),
					 0);
			assert_true(wd->intrs & (1u << wd->default_intr));
			for (unsigned v = 0; v < w; v++)
				assert_string_not_equal(cls->waits[v].name, wd->name);
		}
		/* Preset names are unique across classes and never "auto". */
		for (unsigned i = 0; i < cls->npresets; i++) {
			const char *name = cls->presets[i].name;
			assert_string_not_equal(name, "auto");
			assert_true(cls->presets[i].processor == PX_PROCESSOR_SHARED ||
				    cls->presets[i].processor ==
					    PX_PROCESSOR_DEDICATED);
			for (const px_provider_class *const *op = px__classes;
			     *op; op++)
				for (unsigned j = 0; j < (*op)->npresets; j++)
					if (!(*op == cls && j == i))
						assert_string_not_equal(
							(*op)->presets[j].name, name);
		}
		/* Own keys never shadow a generic key. */
		static const char *const generic[] = {
			"provider", "wait", "interrupt", "processor", "max_aio",
			"ops", "start", "signal", "followers"
		};
		for (unsigned k = 0; k < cls->nkeys; k++)
			for (size_t g = 0; g < N_OF(generic); g++)
				assert_string_not_equal(cls->keys[k].name, generic[g]);
		/* Not listed as not built. */
		for (const char *const *s = px__classes_not_built; *s; s++)
			assert_string_not_equal(*s, cls->name);
	}
	assert_true(n >= 1);
	assert_null(px__class_find("", 0));
	assert_null(px__class_find("iocp", 4));
	assert_ptr_equal(px__class_find("selectXX", 6), px__class_find("select", 6));
	assert_string_equal(px__classes[0]->name, "select");
	{
		unsigned want = 1, i = 1, nb = 0;
#ifdef PX_HAVE_URING
		assert_string_equal(px__classes[i++]->name, "uring");
		want++;
#else
		assert_string_equal(px__classes_not_built[nb++], "uring");
#endif
#ifdef PX_HAVE_LIBAIO
		assert_string_equal(px__classes[i++]->name, "linux_aio");
		want++;
#else
		assert_string_equal(px__classes_not_built[nb++], "linux_aio");
#endif
		assert_string_equal(px__classes[i++]->name, "posix");
		want++;
		assert_int_equal(n, want);
		assert_null(px__classes_not_built[nb]);
	}

	/* Interrupt names. */
	assert_null(px__intr_name(PX_INTR_NONE));
	assert_null(px__intr_name(PX_INTR_COUNT));
	assert_null(px__intr_name(-1));
	for (int t = PX_INTR_NONE + 1; t < PX_INTR_COUNT; t++) {
		const char *name = px__intr_name(t);
		assert_non_null(name);
		assert_int_equal(px__intr_type(name), t);
		assert_int_equal(px__intr_type_n(name, strlen(name)), t);
	}
	assert_string_equal(px__intr_name(PX_INTR_PIPE), "pipe");
	assert_string_equal(px__intr_name(PX_INTR_EVENTFD), "eventfd");
	assert_string_equal(px__intr_name(PX_INTR_SIGNAL), "signal");
	assert_string_equal(px__intr_name(PX_INTR_NATIVE), "native");
	assert_int_equal(px__intr_type("bogus"), -1);
	assert_int_equal(px__intr_type(""), -1);
	assert_int_equal(px__intr_type(NULL), -1);
	assert_int_equal(px__intr_type_n("pipes", 4), PX_INTR_PIPE);
}

/* A provider this build lacks: -ENOSYS with a "not built" message. */
static void test_not_built(void **state)
{
	(void)state;
	for (const char *const *s = px__classes_not_built; *s; s++) {
		char text[128], want[128];
		px_config c;
		snprintf(text, sizeof(text), "provider=%s", *s);
		snprintf(want, sizeof(want), "provider=%s is not built into this "
					     "library", *s);
		parse_bad_rc(-ENOSYS, text, want, "built in: select", NULL);
		snprintf(text, sizeof(text), "epoll ; secondary: provider=%s", *s);
		parse_bad_rc(-ENOSYS, text, "secondary: ", want, NULL);
		memset(&c, 0, sizeof(c));
		snprintf(c.primary.provider, PX_NAME_MAX, "%s", *s);
		resolve_bad_rc(-ENOSYS, &c, want, "built in: select");
	}
#ifndef PX_HAVE_URING
	/* Its presets, waits and keys are simply unknown. */
	parse_bad("uring", "unknown preset \"uring\"", "epoll", NULL);
	parse_bad("wait=uring", "unknown wait \"uring\"", TC_WAITS, NULL);
	parse_bad("epoll ring=8", "unknown key \"ring\"", "followers", NULL);
	parse_bad("ring=8", "unknown key \"ring\"", NULL);
#endif
}

/* px_strerror and px_op_name take any value (px_strerror(3)): a number
 * gives the same text negative or positive, the library's own meanings
 * come first, and the extremes of int are "unknown error".  (px_strerror
 * once negated INT_MIN, an overflow that UBSan reports.) */
static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(px_strerror(0), "success");
	assert_string_equal(px_strerror(-EINVAL), px_strerror(EINVAL));
	assert_string_equal(px_strerror(-ESHUTDOWN),
			    "proactor is stopped or being destroyed");
	assert_string_equal(px_strerror(INT_MIN), "unknown error");
	assert_string_equal(px_strerror(INT_MIN + 1), "unknown error");
	assert_string_equal(px_strerror(INT_MAX), "unknown error");
	/* The values px_strerror(3) names as the library's own each have
	 * a text of its own, not the C library's. */
	static const int own[] = { EOPNOTSUPP, ESHUTDOWN, ENOSYS, EMFILE,
				   ECHILD };
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (!strcmp(px_strerror(own[i]), strerror(own[i])))
			fail_msg("px_strerror(%d) is the C library's text \"%s\"",
				 own[i], strerror(own[i]));
	assert_string_equal(px_op_name((px_op)-1), "unknown");
	assert_string_equal(px_op_name(PX_OP_COUNT), "unknown");
	assert_string_equal(px_op_name(PX_OP_CLOSE), "close");
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--engine-table")) {
		/* README's table between its markers, as the class list
		 * gives it. */
		static char table[16384];
		engine_table(table, sizeof(table));
		fputs(table, stdout);
		return 0;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_class_presets),
		cmocka_unit_test(test_team_presets),
		cmocka_unit_test(test_readme_tables),
		cmocka_unit_test(test_auto),
		cmocka_unit_test(test_auto_candidates),
		cmocka_unit_test(test_provider_wait_interrupt),
		cmocka_unit_test(test_class_combinations),
		cmocka_unit_test(test_processor_key),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_ops),
		cmocka_unit_test(test_start),
		cmocka_unit_test(test_class_keys),
		cmocka_unit_test(test_rtsig_needs_sigwait),
#ifdef PX_HAVE_URING
		cmocka_unit_test(test_uring_keys),
#endif
		cmocka_unit_test(test_followers),
		cmocka_unit_test(test_signal_key),
		cmocka_unit_test(test_secondary),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_struct_form),
		cmocka_unit_test(test_struct_round_trip_property),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_spec),
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_not_built),
		cmocka_unit_test(test_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
