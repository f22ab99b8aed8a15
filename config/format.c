/*
 * format.c - a configuration back to its canonical text
 * (px_config_format in proactor.h).
 *
 * The config is resolved first, then every field is written back: the
 * provider, wait, interrupt, processor and max_aio always, the rest when
 * it differs from the default, and the provider words as its class wrote
 * them.  An auto processor is written as "auto" followed by what narrows
 * it.  parse(format(cfg)) gives cfg again.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

/* An snprintf-like appender that keeps counting past the end. */
struct fmt_out {
	char *buf;
	size_t len;
	size_t pos;
};

static void fmt_put(struct fmt_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fmt_put(struct fmt_out *o, const char *fmt, ...)
{
	va_list ap;
	char *dst = o->pos < o->len ? o->buf + o->pos : NULL;
	size_t room = o->pos < o->len ? o->len - o->pos : 0;

	va_start(ap, fmt);
	int n = vsnprintf(dst, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

static void fmt_processor(struct fmt_out *o, const px_processor_config *pc)
{
	const char *proc = px__cfg_processor_names[pc->processor];

	if (pc->provider[0])
		fmt_put(o, "provider=%s wait=%s interrupt=%s processor=%s max_aio=%u",
			pc->provider, pc->wait, pc->interrupt, proc, pc->max_aio);
	else if (pc->interrupt[0])
		fmt_put(o, "interrupt=%s processor=%s max_aio=%u", pc->interrupt,
			proc, pc->max_aio);
	else
		fmt_put(o, "processor=%s max_aio=%u", proc, pc->max_aio);
	if (pc->ops) {
		uint32_t left = pc->ops;
		const char *sep = " ops=";
		for (size_t i = 0; i < PX_CFG_N_OPS && left; i++) {
			const px_cfg_op_name *on = &px__cfg_op_names[i];
			if ((left & on->mask) != on->mask)
				continue;
			fmt_put(o, "%s%s", sep, on->name);
			left &= ~on->mask;
			sep = ",";
		}
	}
	if (pc->flags & PX_PF_FLAGS_SET) {
		for (size_t i = 0; i < PX_CFG_N_START; i++)
			if (pc->flags == px__cfg_start_flags[i])
				fmt_put(o, " start=%s", px__cfg_start_names[i]);
	}
	if (pc->intr_signo)
		fmt_put(o, " signal=%d", pc->intr_signo);
	if (pc->words[0])
		fmt_put(o, " %s", pc->words);
}

int px_config_format(const px_config *cfg, char *buf, size_t len)
{
	PX_KEEP_ERRNO;
	struct fmt_out o = { buf, buf ? len : 0, 0 };
	px_config c;

	if (!cfg)
		return -EINVAL;
	c = *cfg;
	if (px__config_resolve(&c, NULL, 0) < 0)
		return -EINVAL;
	if (o.len)
		o.buf[0] = '\0';
	if (!c.primary.provider[0])
		fmt_put(&o, "auto ");
	fmt_processor(&o, &c.primary);
	if (c.followers != PX_FOLLOWERS_LIFO)
		fmt_put(&o, " followers=%s", px__cfg_follower_names[c.followers]);
	if (c.secondary.processor != PX_PROCESSOR_NONE) {
		fmt_put(&o, " ; secondary: ");
		fmt_processor(&o, &c.secondary);
	}
	return o.pos > INT_MAX ? -EINVAL : (int)o.pos;
}
