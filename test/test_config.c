/*
 * test_config.c - the configuration language, presets, validation and the
 * provider registry (config/).
 *
 * Every key with every value, every preset, every error message (each
 * must name the valid choices), the secondary section, and the round trip
 * parse(format(cfg)) == cfg.  Runs the same on builds with and without
 * io_uring: what differs ("auto", the uring lookup) is checked per build.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static bool pc_equal(const px_processor_config *a, const px_processor_config *b)
{
	return a->processor == b->processor && a->provider == b->provider &&
	       a->wait == b->wait && a->interrupt == b->interrupt &&
	       a->flags == b->flags && a->max_aio == b->max_aio &&
	       a->ops == b->ops && a->intr_signo == b->intr_signo &&
	       a->ring_entries == b->ring_entries && a->ring_flags == b->ring_flags;
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
		fail_msg("\"%s\" should parse: %s", text ? text : "(null)", err);
	assert_string_equal(err, "");
	return c;
}

/* Parse text that must fail; every needle must be in the message. */
static void parse_bad(const char *text, ...)
{
	px_config c, before;
	char err[512] = "";
	const char *needle;
	va_list ap;
	int rc;

	memset(&c, 0x5a, sizeof(c));
	before = c;
	rc = px_config_parse(&c, text, err, sizeof(err));
	if (rc != -EINVAL)
		fail_msg("\"%s\" should fail with -EINVAL, got %d", text, rc);
	assert_true(strlen(err) > 0);
	va_start(ap, text);
	while ((needle = va_arg(ap, const char *)) != NULL) {
		if (!strstr(err, needle))
			fail_msg("\"%s\": message \"%s\" lacks \"%s\"", text, err,
				 needle);
	}
	va_end(ap);
	/* A failed parse leaves the output alone. */
	assert_memory_equal(&c, &before, sizeof(c));
	/* And works without a message buffer. */
	assert_int_equal(px_config_parse(&c, text, NULL, 0), -EINVAL);
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
}

static void expect_pc(const px_processor_config *pc, px_processor_type proc,
		      px_provider_type prov, px_wait_type w, px_interrupt_type in)
{
	assert_int_equal(pc->processor, proc);
	assert_int_equal(pc->provider, prov);
	assert_int_equal(pc->wait, w);
	assert_int_equal(pc->interrupt, in);
}

static void expect_format(const char *text, const char *want)
{
	px_config c = parse_ok(text);
	char buf[512];

	assert_true(px_config_format(&c, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, want);
	round_trip(&c);
}

/* ------------------------------------------------------------------ */
/* Presets                                                              */
/* ------------------------------------------------------------------ */

static const struct {
	const char *name;
	px_processor_type proc;
	px_provider_type prov;
	px_wait_type wait;
	px_interrupt_type intr;
} presets[] = {
	{ "uring", PX_PROCESSOR_SHARED, PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE },
	{ "epoll", PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD },
	{ "poll", PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT, PX_WAIT_POLL, PX_INTR_EVENTFD },
	{ "select", PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT, PX_WAIT_SELECT, PX_INTR_EVENTFD },
	{ "uring-dedicated", PX_PROCESSOR_DEDICATED, PX_PROVIDER_URING, PX_WAIT_URING,
	  PX_INTR_NATIVE },
	{ "epoll-dedicated", PX_PROCESSOR_DEDICATED, PX_PROVIDER_SELECT, PX_WAIT_EPOLL,
	  PX_INTR_EVENTFD },
	{ "poll-dedicated", PX_PROCESSOR_DEDICATED, PX_PROVIDER_SELECT, PX_WAIT_POLL,
	  PX_INTR_EVENTFD },
	{ "select-dedicated", PX_PROCESSOR_DEDICATED, PX_PROVIDER_SELECT, PX_WAIT_SELECT,
	  PX_INTR_EVENTFD },
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

static void test_presets(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_PRESETS; i++) {
		px_config c, p;
		assert_int_equal(px_config_preset(&p, presets[i].name), 0);
		expect_pc(&p.primary, presets[i].proc, presets[i].prov,
			  presets[i].wait, presets[i].intr);
		assert_int_equal(p.secondary.processor, PX_PROCESSOR_NONE);
		assert_int_equal(p.flags, 0);
		assert_int_equal(p.followers, PX_FOLLOWERS_LIFO);
		assert_int_equal(px_config_resolve(&p, NULL, 0), 0);
		c = parse_ok(presets[i].name);
		assert_true(cfg_equal(&c, &p));
		round_trip(&c);
	}
	assert_int_equal(px_config_preset(NULL, "epoll"), -ENOENT);
	assert_int_equal(px_config_preset(&(px_config){ 0 }, NULL), -ENOENT);
	assert_int_equal(px_config_preset(&(px_config){ 0 }, "nope"), -ENOENT);
	assert_int_equal(px_config_preset(&(px_config){ 0 }, "Epoll"), -ENOENT);
}

static void check_auto(const px_config *c)
{
#ifdef PX_HAVE_URING
	expect_pc(&c->primary, PX_PROCESSOR_SHARED, PX_PROVIDER_URING,
		  PX_WAIT_URING, PX_INTR_NATIVE);
	assert_int_equal(c->flags, PX_CF_AUTO);
#else
	expect_pc(&c->primary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_EVENTFD);
	assert_int_equal(c->flags, 0);
#endif
	assert_int_equal(c->secondary.processor, PX_PROCESSOR_NONE);
}

static void test_auto(void **state)
{
	static const char *const texts[] = { "auto", "", "   ", " \t\n ", NULL };
	px_config c;

	(void)state;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		c = parse_ok(texts[i]);
		check_auto(&c);
		round_trip(&c);
	}
	assert_int_equal(px_config_preset(&c, "auto"), 0);
	check_auto(&c);

	/* auto keeps choosing while the words leave the engine alone... */
	c = parse_ok("max_aio=64");
	check_auto(&c);
	assert_int_equal(c.primary.max_aio, 64);
	c = parse_ok("auto processor=dedicated followers=fifo");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_DEDICATED);
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	round_trip(&c);

	/* ...and stops as soon as they name one. */
	c = parse_ok("auto wait=poll");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_POLL, PX_INTR_EVENTFD);
	assert_int_equal(c.flags, 0);
	c = parse_ok("provider=uring");
	assert_int_equal(c.flags, 0);
	c = parse_ok("auto interrupt=signal");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_SIGNAL);
	assert_int_equal(c.flags, 0);
#ifdef PX_HAVE_URING
	/* As format writes it. */
	expect_format("auto", "auto provider=uring wait=uring interrupt=native "
			      "processor=shared max_aio=0");
#endif
}

/* ------------------------------------------------------------------ */
/* Keys                                                                 */
/* ------------------------------------------------------------------ */

static void test_provider_wait_interrupt(void **state)
{
	static const struct {
		const char *text;
		px_provider_type prov;
		px_wait_type wait;
		px_interrupt_type intr;
	} t[] = {
		{ "provider=select", PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD },
		{ "provider=uring", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE },
		{ "provider=select wait=select", PX_PROVIDER_SELECT, PX_WAIT_SELECT,
		  PX_INTR_EVENTFD },
		{ "provider=select wait=poll", PX_PROVIDER_SELECT, PX_WAIT_POLL,
		  PX_INTR_EVENTFD },
		{ "provider=select wait=epoll", PX_PROVIDER_SELECT, PX_WAIT_EPOLL,
		  PX_INTR_EVENTFD },
		{ "provider=uring wait=uring", PX_PROVIDER_URING, PX_WAIT_URING,
		  PX_INTR_NATIVE },
		{ "provider=select interrupt=pipe", PX_PROVIDER_SELECT, PX_WAIT_EPOLL,
		  PX_INTR_PIPE },
		{ "provider=select interrupt=eventfd", PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_EVENTFD },
		{ "provider=select interrupt=signal", PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_SIGNAL },
		{ "provider=uring interrupt=native", PX_PROVIDER_URING, PX_WAIT_URING,
		  PX_INTR_NATIVE },
		{ "wait=poll interrupt=pipe", PX_PROVIDER_SELECT, PX_WAIT_POLL,
		  PX_INTR_PIPE },
		{ "wait=select", PX_PROVIDER_SELECT, PX_WAIT_SELECT, PX_INTR_EVENTFD },
		{ "wait=uring", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE },
		/* A preset's provider follows a wait of another provider. */
		{ "uring wait=epoll", PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD },
		{ "epoll wait=uring", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE },
		{ "epoll provider=uring", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE },
		{ "uring provider=select", PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD },
		{ "epoll wait=poll", PX_PROVIDER_SELECT, PX_WAIT_POLL, PX_INTR_EVENTFD },
		{ "select interrupt=pipe", PX_PROVIDER_SELECT, PX_WAIT_SELECT, PX_INTR_PIPE },
		{ "poll-dedicated interrupt=signal", PX_PROVIDER_SELECT, PX_WAIT_POLL,
		  PX_INTR_SIGNAL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		px_config c = parse_ok(t[i].text);
		assert_int_equal(c.primary.provider, t[i].prov);
		assert_int_equal(c.primary.wait, t[i].wait);
		assert_int_equal(c.primary.interrupt, t[i].intr);
		assert_int_equal(c.flags, 0);
		round_trip(&c);
	}
}

static void test_processor_key(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("epoll processor=dedicated");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_DEDICATED);
	c = parse_ok("epoll-dedicated processor=shared");
	assert_int_equal(c.primary.processor, PX_PROCESSOR_SHARED);
	round_trip(&c);
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
	c = parse_ok("uring ring=256");
	assert_int_equal(c.primary.ring_entries, 256);
	c = parse_ok("uring ring=32768");
	assert_int_equal(c.primary.ring_entries, 32768);
	round_trip(&c);
	c = parse_ok("epoll interrupt=signal signal=10");
	assert_int_equal(c.primary.intr_signo, 10);
	round_trip(&c);
	c = parse_ok("epoll interrupt=signal signal=0");
	assert_int_equal(c.primary.intr_signo, 0);
	c = parse_ok("epoll interrupt=signal signal=64");
	assert_int_equal(c.primary.intr_signo, 64);

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
	parse_bad("uring ring=32769", "too large", "at most 32768", NULL);
	parse_bad("uring ring=-3", "negative", NULL);
	parse_bad("epoll interrupt=signal signal=65", "too large", "at most 64", NULL);
	parse_bad("epoll interrupt=signal signal=abc", "not a decimal number", NULL);
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
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(text, sizeof(text), "epoll ops=%s", t[i].v);
		px_config c = parse_ok(text);
		assert_int_equal(c.primary.ops, t[i].mask);
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
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (size_t j = 0; j < sizeof(choices) / sizeof(choices[0]); j++)
			parse_bad(bad[i], choices[j], NULL);
	}
	parse_bad("epoll ops=bogus", "unknown operation \"bogus\"", NULL);
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
	c = parse_ok("epoll");
	assert_int_equal(c.primary.flags, 0);
	parse_bad("epoll start=now", "unknown start \"now\"", "any", "any-interrupt",
		  "leader", NULL);
}

static void test_ring_flags(void **state)
{
	px_config c;

	(void)state;
	c = parse_ok("uring ring_flags=coop_taskrun");
	assert_int_equal(c.primary.ring_flags, PX_RING_COOP_TASKRUN);
	c = parse_ok("uring ring_flags=sqpoll");
	assert_int_equal(c.primary.ring_flags, PX_RING_SQPOLL);
	c = parse_ok("uring ring_flags=sqpoll,coop_taskrun ring=64");
	assert_int_equal(c.primary.ring_flags, PX_RING_SQPOLL | PX_RING_COOP_TASKRUN);
	round_trip(&c);
	expect_format("uring-dedicated ring_flags=sqpoll,coop_taskrun ring=64",
		      "provider=uring wait=uring interrupt=native "
		      "processor=dedicated max_aio=0 ring=64 "
		      "ring_flags=coop_taskrun,sqpoll");
	parse_bad("uring ring_flags=fast", "unknown ring flag \"fast\"",
		  "coop_taskrun or sqpoll", NULL);
	parse_bad("uring ring_flags=", "coop_taskrun or sqpoll", NULL);
	/* Ring values given for a provider that has no ring. */
	parse_bad("epoll ring=64", "ring and ring_flags only apply to provider=uring",
		  NULL);
	parse_bad("epoll ring_flags=sqpoll", "only apply to provider=uring", NULL);
	parse_bad("uring ring=64 wait=poll", "only apply to provider=uring", NULL);
}

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
	parse_bad("uring signal=10", "only applies to interrupt=signal", NULL);
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
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_EVENTFD);
	assert_int_equal(c.primary.ops,
			 PX_OP_BIT(PX_OP_ACCEPT) | PX_OP_BIT(PX_OP_CONNECT));
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_POLL, PX_INTR_EVENTFD);
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
	c = parse_ok("uring primary: ops=file ;secondary:provider=select "
		     "wait=select interrupt=signal signal=12 processor=dedicated "
		     "max_aio=100 ops=socket start=any-interrupt followers=fifo");
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, PX_PROVIDER_URING,
		  PX_WAIT_URING, PX_INTR_NATIVE);
	assert_int_equal(c.primary.ops,
			 PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE));
	expect_pc(&c.secondary, PX_PROCESSOR_DEDICATED, PX_PROVIDER_SELECT,
		  PX_WAIT_SELECT, PX_INTR_SIGNAL);
	assert_int_equal(c.secondary.intr_signo, 12);
	assert_int_equal(c.secondary.max_aio, 100);
	assert_int_equal(c.secondary.flags, PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD |
						    PX_PF_START_INTERRUPT);
	assert_int_equal(c.followers, PX_FOLLOWERS_FIFO);
	round_trip(&c);

	/* The secondary's provider may come from its wait. */
	c = parse_ok("epoll ; secondary: wait=poll");
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_POLL, PX_INTR_EVENTFD);
	c = parse_ok("primary: provider=select ; secondary: provider=uring "
		     "processor=dedicated ring=128");
	expect_pc(&c.secondary, PX_PROCESSOR_DEDICATED, PX_PROVIDER_URING,
		  PX_WAIT_URING, PX_INTR_NATIVE);
	assert_int_equal(c.secondary.ring_entries, 128);
	round_trip(&c);

	/* Without a secondary section there is none. */
	c = parse_ok("epoll");
	assert_int_equal(c.secondary.processor, PX_PROCESSOR_NONE);
	assert_int_equal(c.secondary.provider, PX_PROVIDER_NONE);

	parse_bad("epoll ; secondary:", "secondary: no provider given",
		  "select or uring", NULL);
	parse_bad("epoll ; secondary: max_aio=4", "secondary: no provider given",
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
	parse_bad("epoll ; secondary: wait=aiocb", "secondary: unknown wait \"aiocb\"",
		  "select, poll, epoll or uring", NULL);
	parse_bad("epoll ; secondary: provider=uring wait=poll",
		  "secondary: invalid combination provider=uring wait=poll", NULL);
	parse_bad("epoll ; secondary: poll", "secondary:", "must be the first word",
		  NULL);
}

/* ------------------------------------------------------------------ */
/* Errors                                                               */
/* ------------------------------------------------------------------ */

static void test_errors(void **state)
{
	(void)state;
	parse_bad("foo", "unknown preset \"foo\"", "auto", "uring", "epoll", "poll",
		  "select", "uring-dedicated", "epoll-dedicated", "poll-dedicated",
		  "select-dedicated", NULL);
	parse_bad("epoll foo=1", "unknown key \"foo\"", "provider", "wait",
		  "interrupt", "processor", "max_aio", "ops", "start", "signal",
		  "ring", "ring_flags", "followers", NULL);
	parse_bad("epoll =1", "unknown key \"\"", "provider", NULL);
	parse_bad("epoll Wait=poll", "unknown key \"Wait\"", NULL);
	parse_bad("epoll bar", "\"bar\" is not a key=value word", "provider",
		  "followers", NULL);
	parse_bad("epoll poll", "preset \"poll\" must be the first word", NULL);
	parse_bad("provider=select wait=aiocb",
		  "unknown wait \"aiocb\" for provider=select: choose select, poll or "
		  "epoll",
		  NULL);
	parse_bad("provider=uring wait=aiocb",
		  "unknown wait \"aiocb\" for provider=uring: choose uring", NULL);
	parse_bad("wait=aiocb", "unknown wait \"aiocb\": choose select, poll, epoll "
				"or uring",
		  NULL);
	parse_bad("epoll wait=", "unknown wait \"\"", NULL);
	parse_bad("provider=posix", "unknown provider \"posix\": choose select or "
				    "uring",
		  NULL);
	parse_bad("epoll interrupt=semaphore",
		  "unknown interrupt \"semaphore\" for wait=epoll: choose pipe, "
		  "eventfd or signal",
		  NULL);
	parse_bad("uring interrupt=semaphore",
		  "unknown interrupt \"semaphore\" for wait=uring: choose native", NULL);
	parse_bad("epoll processor=none", "unknown processor \"none\": choose shared "
					  "or dedicated",
		  NULL);
	parse_bad("epoll wait=poll wait=select", "wait is given twice", NULL);
	parse_bad("epoll max_aio=1 max_aio=2", "max_aio is given twice", NULL);

	/* Combinations. */
	parse_bad("provider=uring wait=epoll",
		  "invalid combination provider=uring wait=epoll",
		  "provider=uring takes wait uring", NULL);
	parse_bad("provider=select wait=uring",
		  "invalid combination provider=select wait=uring",
		  "provider=select takes wait select, poll or epoll", NULL);
	parse_bad("epoll interrupt=native",
		  "invalid combination provider=select wait=epoll interrupt=native",
		  "wait=epoll takes interrupt pipe, eventfd or signal", NULL);
	parse_bad("uring interrupt=signal",
		  "invalid combination provider=uring wait=uring interrupt=signal",
		  "wait=uring takes interrupt native", NULL);
	parse_bad("provider=uring interrupt=pipe", "wait=uring takes interrupt native",
		  NULL);

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
}

/* ------------------------------------------------------------------ */
/* Round trip                                                           */
/* ------------------------------------------------------------------ */

static void test_round_trip(void **state)
{
	static const char *const texts[] = {
		"epoll",
		"provider=select wait=epoll interrupt=eventfd processor=shared max_aio=0",
		"select interrupt=pipe max_aio=17 start=leader",
		"poll-dedicated interrupt=signal signal=12 ops=stream,accept",
		"uring ring=1024 ring_flags=coop_taskrun max_aio=4096",
		"uring-dedicated followers=fifo",
		"epoll ops=read_file,write_dgram,connect start=any",
		"provider=select wait=epoll ops=accept,connect ; secondary: "
		"provider=select wait=poll",
		"epoll-dedicated ops=file ; secondary: wait=select interrupt=pipe "
		"processor=dedicated max_aio=3 start=any-interrupt",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		px_config c = parse_ok(texts[i]);
		round_trip(&c);
	}

	/* Every preset with each start flag, follower order and interrupt. */
	for (size_t i = 0; i < N_PRESETS; i++) {
		static const char *const extra[] = { "", " start=any", " followers=fifo",
						     " max_aio=9 ops=dgram" };
		for (size_t j = 0; j < sizeof(extra) / sizeof(extra[0]); j++) {
			char text[128];
			snprintf(text, sizeof(text), "%s%s", presets[i].name, extra[j]);
			px_config c = parse_ok(text);
			round_trip(&c);
		}
	}

	/* A struct filled by hand formats its resolved form. */
	px_config c;
	memset(&c, 0, sizeof(c));
	c.primary.provider = PX_PROVIDER_SELECT;
	char buf[256];
	assert_true(px_config_format(&c, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "provider=select wait=epoll interrupt=eventfd "
				 "processor=shared max_aio=0");
	assert_int_equal(px_config_format(NULL, buf, sizeof(buf)), -EINVAL);
	c.primary.wait = PX_WAIT_URING;
	assert_int_equal(px_config_format(&c, buf, sizeof(buf)), -EINVAL);
}

/* ------------------------------------------------------------------ */
/* The struct path: resolve and the registry                            */
/* ------------------------------------------------------------------ */

static void resolve_bad(px_config *c, const char *needle, const char *needle2)
{
	char err[512] = "";

	assert_int_equal(px_config_resolve(c, err, sizeof(err)), -EINVAL);
	if (!strstr(err, needle) || (needle2 && !strstr(err, needle2)))
		fail_msg("resolve message \"%s\" lacks \"%s\" / \"%s\"", err, needle,
			 needle2 ? needle2 : "");
}

static void test_resolve(void **state)
{
	px_config c;
	px_processor_config pc;
	char err[256];

	(void)state;
	memset(&c, 0, sizeof(c));
	resolve_bad(&c, "no provider given", "select or uring");

	memset(&c, 0, sizeof(c));
	c.primary.provider = PX_PROVIDER_SELECT;
	assert_int_equal(px_config_resolve(&c, err, sizeof(err)), 0);
	expect_pc(&c.primary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_EPOLL, PX_INTR_EVENTFD);
	assert_int_equal(c.secondary.processor, PX_PROCESSOR_NONE);

	memset(&c, 0, sizeof(c));
	c.primary.wait = PX_WAIT_POLL;     /* the provider follows */
	assert_int_equal(px_config_resolve(&c, NULL, 0), 0);
	assert_int_equal(c.primary.provider, PX_PROVIDER_SELECT);

	/* A secondary exists when its processor is not NONE; with NONE the
	 * rest of it is ignored (and cleared). */
	memset(&c, 0, sizeof(c));
	c.primary.provider = PX_PROVIDER_SELECT;
	c.secondary.provider = PX_PROVIDER_SELECT;
	c.secondary.wait = PX_WAIT_SELECT;
	c.secondary.max_aio = 5;
	assert_int_equal(px_config_resolve(&c, NULL, 0), 0);
	expect_pc(&c.secondary, PX_PROCESSOR_NONE, PX_PROVIDER_NONE,
		  PX_WAIT_DEFAULT, PX_INTR_DEFAULT);
	assert_int_equal(c.secondary.max_aio, 0);
	c.secondary.processor = PX_PROCESSOR_SHARED;
	c.secondary.provider = PX_PROVIDER_SELECT;
	c.secondary.wait = PX_WAIT_SELECT;
	assert_int_equal(px_config_resolve(&c, NULL, 0), 0);
	expect_pc(&c.secondary, PX_PROCESSOR_SHARED, PX_PROVIDER_SELECT,
		  PX_WAIT_SELECT, PX_INTR_EVENTFD);
	c.secondary.processor = PX_PROCESSOR_DEDICATED;
	c.secondary.interrupt = PX_INTR_NATIVE;
	resolve_bad(&c, "secondary: invalid combination", "pipe, eventfd or signal");
	memset(&c, 0, sizeof(c));
	c.primary.provider = PX_PROVIDER_SELECT;
	c.secondary.processor = PX_PROCESSOR_SHARED;
	resolve_bad(&c, "secondary: no provider given", NULL);

	/* Out-of-range values name the choices. */
	px_config base;
	memset(&base, 0, sizeof(base));
	base.primary.provider = PX_PROVIDER_SELECT;
	c = base;
	c.primary.provider = (px_provider_type)7;
	resolve_bad(&c, "unknown provider 7", "select or uring");
	c = base;
	c.primary.wait = (px_wait_type)9;
	resolve_bad(&c, "unknown wait 9 for provider=select", "select, poll or epoll");
	c = base;
	c.primary.interrupt = (px_interrupt_type)9;
	resolve_bad(&c, "unknown interrupt 9 for wait=epoll", "pipe, eventfd or signal");
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
	resolve_bad(&c, "only applies to interrupt=signal", NULL);
	c = base;
	c.primary.interrupt = PX_INTR_SIGNAL;
	c.primary.intr_signo = SIGKILL;
	resolve_bad(&c, "is not usable", NULL);
	c = base;
	c.primary.ring_entries = 8;
	resolve_bad(&c, "only apply to provider=uring", NULL);
	c = base;
	c.primary.provider = PX_PROVIDER_URING;
	c.primary.ring_flags = 0x100;
	resolve_bad(&c, "unknown ring_flags", "coop_taskrun or sqpoll");
	c = base;
	c.primary.provider = PX_PROVIDER_URING;
	c.primary.ring_entries = 100000;
	resolve_bad(&c, "too large", NULL);

	/* Flags without PX_PF_FLAGS_SET mean "the provider's": dropped. */
	c = base;
	c.primary.flags = PX_PF_START_ANY_THREAD;
	assert_int_equal(px_config_resolve(&c, NULL, 0), 0);
	assert_int_equal(c.primary.flags, 0);
	/* PX_CF_NO_ENV is kept. */
	c = base;
	c.flags = PX_CF_NO_ENV;
	assert_int_equal(px_config_resolve(&c, NULL, 0), 0);
	assert_int_equal(c.flags, PX_CF_NO_ENV);

	/* One processor on its own. */
	memset(&pc, 0, sizeof(pc));
	pc.provider = PX_PROVIDER_URING;
	assert_int_equal(px_processor_config_resolve(&pc, err, sizeof(err)), 0);
	expect_pc(&pc, PX_PROCESSOR_SHARED, PX_PROVIDER_URING, PX_WAIT_URING,
		  PX_INTR_NATIVE);
	pc.wait = PX_WAIT_EPOLL;
	assert_int_equal(px_processor_config_resolve(&pc, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "provider=uring takes wait uring"));
	assert_int_equal(px_processor_config_resolve(NULL, err, sizeof(err)), -EINVAL);
	assert_int_equal(px_config_resolve(NULL, NULL, 0), -EINVAL);
}

static void test_registry(void **state)
{
	(void)state;
	assert_ptr_equal(px_provider_lookup(PX_PROVIDER_SELECT), &px_provider_select_ops);
#ifdef PX_HAVE_URING
	assert_ptr_equal(px_provider_lookup(PX_PROVIDER_URING), &px_provider_uring_ops);
#else
	assert_null(px_provider_lookup(PX_PROVIDER_URING));
	/* Not built in, still valid text: px_create says -ENOSYS. */
	(void)parse_ok("uring");
#endif
	assert_null(px_provider_lookup(PX_PROVIDER_NONE));
	assert_null(px_provider_lookup(PX_PROVIDER_COUNT));
	assert_null(px_provider_lookup((px_provider_type)-1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_auto),
		cmocka_unit_test(test_provider_wait_interrupt),
		cmocka_unit_test(test_processor_key),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_ops),
		cmocka_unit_test(test_start),
		cmocka_unit_test(test_ring_flags),
		cmocka_unit_test(test_followers),
		cmocka_unit_test(test_signal_key),
		cmocka_unit_test(test_secondary),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_registry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
