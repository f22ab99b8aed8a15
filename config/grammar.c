/*
 * grammar.c - the configuration's text form: words, sections, presets
 * (px_config_parse in proactor.h).
 *
 *     [preset] [primary:] key=value ... [; secondary: key=value ...]
 *
 * Words are separated by white space; ';' is a word of its own wherever it
 * stands, and "primary:" / "secondary:" may be glued to the next word.
 * Every key may be given once per section; followers= once per config.
 * A preset fills the whole config first and the words after it override
 * it.  Without a preset the primary starts from "auto".
 *
 * Keys are the generic ones of config.h plus each provider's own, which
 * travel as the section's provider words (px_processor_config.words) and
 * are checked by the provider's class in resolve.c.  Overriding rules, so
 * that one word is enough to switch engine:
 *   - wait=W without provider= keeps the section's provider when it has
 *     W ("linux-aio wait=epoll" is Linux AIO over epoll), else picks the
 *     first class in the class list that has W: "auto wait=poll" is the
 *     readiness provider;
 *   - when a section's provider changes, the wait, interrupt and provider
 *     words it inherited fall back to that provider's defaults (unless
 *     given in the same section), and "auto" stops being auto;
 *   - when only the wait changes, the inherited interrupt falls back to the
 *     new wait's default.
 * The parsed config is resolved (resolve.c) before it is returned.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

struct gr_tok {
	const char *s;
	size_t n;
};

#define GR_TOKF(t) (int)(t).n, (t).s
#define GR_MAX_WORDS 16   /* provider words per section */

static bool gr_is(struct gr_tok t, const char *lit)
{
	return strlen(lit) == t.n && !memcmp(t.s, lit, t.n);
}

static bool gr_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

static bool gr_starts(const char *s, const char *lit)
{
	return !strncmp(s, lit, strlen(lit));
}

/* The next word at *pp: ';' alone, a section marker alone, or a run of
 * other characters.  Returns false at the end of the text. */
static bool gr_next(const char **pp, struct gr_tok *t)
{
	const char *p = *pp;

	while (gr_space(*p))
		p++;
	if (!*p)
		return false;
	t->s = p;
	if (*p == ';') {
		p++;
	} else if (gr_starts(p, "primary:")) {
		p += strlen("primary:");
	} else if (gr_starts(p, "secondary:")) {
		p += strlen("secondary:");
	} else {
		while (*p && !gr_space(*p) && *p != ';')
			p++;
	}
	t->n = (size_t)(p - t->s);
	*pp = p;
	return true;
}

static int gr_lookup(const char *const *names, size_t n, struct gr_tok t)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] && gr_is(t, names[i]))
			return (int)i;
	return -1;
}

/* The words of one section: generic keys by key, provider words in order. */
struct gr_words {
	struct gr_tok val[PX_K_COUNT];
	bool seen[PX_K_COUNT];
	struct gr_tok extra[GR_MAX_WORDS];  /* whole key=value words */
	size_t nextra;
};

struct gr_parser {
	const char *p;          /* next unread character */
	const char *where;      /* "" or "secondary: " */
	char *err;
	size_t errlen;
	bool followers_seen;
	struct gr_tok followers;
};

static int gr_bad_word(struct gr_parser *ps, struct gr_tok t)
{
	char keys[300];

	px__cfg_valid_keys(NULL, keys, sizeof(keys));
	if (px__cfg_preset_exists(t.s, t.n))
		px__set_err(ps->err, ps->errlen,
			   "%spreset \"%.*s\" must be the first word of the text",
			   ps->where, GR_TOKF(t));
	else
		px__set_err(ps->err, ps->errlen,
			   "%s\"%.*s\" is not a key=value word: valid keys are %s",
			   ps->where, GR_TOKF(t), keys);
	return -EINVAL;
}

/* Read the words of a section up to ';' (consumed; *semi set) or the end. */
static int gr_collect(struct gr_parser *ps, struct gr_words *w, bool secondary,
		      bool *semi)
{
	struct gr_tok t;
	bool first = true;

	memset(w, 0, sizeof(*w));
	*semi = false;
	while (gr_next(&ps->p, &t)) {
		if (gr_is(t, ";")) {
			*semi = true;
			return 0;
		}
		if (gr_is(t, "primary:")) {
			if (secondary || !first) {
				px__set_err(ps->err, ps->errlen,
					   "%s\"primary:\" may only open the text "
					   "(after an optional preset)",
					   ps->where);
				return -EINVAL;
			}
			first = false;
			continue;
		}
		first = false;
		if (gr_is(t, "secondary:")) {
			px__set_err(ps->err, ps->errlen,
				   "\"secondary:\" must follow \";\", as in "
				   "\"... ; secondary: provider=%s\"",
				   px__classes[0]->name);
			return -EINVAL;
		}
		const char *eq = memchr(t.s, '=', t.n);
		if (!eq)
			return gr_bad_word(ps, t);
		struct gr_tok key = { t.s, (size_t)(eq - t.s) };
		struct gr_tok val = { eq + 1, t.n - key.n - 1 };
		int k = gr_lookup(px__cfg_key_names, PX_K_COUNT, key);
		if (k < 0) {
			if (px__cfg_class_key(NULL, key.s, key.n) < 0) {
				char keys[300];
				px__cfg_valid_keys(NULL, keys, sizeof(keys));
				px__set_err(ps->err, ps->errlen,
					   "%sunknown key \"%.*s\": valid keys are %s",
					   ps->where, GR_TOKF(key), keys);
				return -EINVAL;
			}
			/* A provider's own key: checked once the section's
			 * provider is known. */
			for (size_t i = 0; i < w->nextra; i++) {
				const char *e = memchr(w->extra[i].s, '=', w->extra[i].n);
				if ((size_t)(e - w->extra[i].s) == key.n &&
				    !memcmp(w->extra[i].s, key.s, key.n)) {
					px__set_err(ps->err, ps->errlen,
						   "%s%.*s is given twice",
						   ps->where, GR_TOKF(key));
					return -EINVAL;
				}
			}
			if (w->nextra == GR_MAX_WORDS) {
				px__set_err(ps->err, ps->errlen,
					   "%stoo many provider words (at most %d)",
					   ps->where, GR_MAX_WORDS);
				return -EINVAL;
			}
			w->extra[w->nextra++] = t;
			continue;
		}
		if (k == PX_K_FOLLOWERS) {
			if (ps->followers_seen) {
				px__set_err(ps->err, ps->errlen,
					   "followers is given twice");
				return -EINVAL;
			}
			ps->followers_seen = true;
			ps->followers = val;
			continue;
		}
		if (w->seen[k]) {
			px__set_err(ps->err, ps->errlen, "%s%s is given twice",
				   ps->where, px__cfg_key_names[k]);
			return -EINVAL;
		}
		w->seen[k] = true;
		w->val[k] = val;
	}
	return 0;
}

/* A decimal number from 0 to max. */
static int gr_num(struct gr_parser *ps, int key, struct gr_tok v,
		  unsigned long max, unsigned long *out)
{
	const char *kn = px__cfg_key_names[key];
	unsigned long n = 0;

	if (v.n && v.s[0] == '-') {
		px__set_err(ps->err, ps->errlen,
			   "%s%s=%.*s: negative numbers are not allowed "
			   "(expected 0 to %lu)",
			   ps->where, kn, GR_TOKF(v), max);
		return -EINVAL;
	}
	if (!v.n) {
		px__set_err(ps->err, ps->errlen,
			   "%s%s has no value: expected a decimal number from 0 to %lu",
			   ps->where, kn, max);
		return -EINVAL;
	}
	for (size_t i = 0; i < v.n; i++) {
		if (v.s[i] < '0' || v.s[i] > '9') {
			px__set_err(ps->err, ps->errlen,
				   "%s%s=%.*s: not a decimal number "
				   "(expected 0 to %lu)",
				   ps->where, kn, GR_TOKF(v), max);
			return -EINVAL;
		}
		unsigned d = (unsigned)(v.s[i] - '0');
		if (n > (max - d) / 10) {
			px__set_err(ps->err, ps->errlen,
				   "%s%s=%.*s: too large (at most %lu)",
				   ps->where, kn, GR_TOKF(v), max);
			return -EINVAL;
		}
		n = n * 10 + d;
	}
	*out = n;
	return 0;
}

/* ops=: a comma list of operation names and groups. */
static int gr_ops(struct gr_parser *ps, struct gr_tok v, uint32_t *out)
{
	uint32_t mask = 0;
	const char *p = v.s, *end = v.s + v.n;

	for (;;) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		struct gr_tok item = { p, (size_t)((c ? c : end) - p) };
		size_t i;
		if (!item.n) {
			px__set_err(ps->err, ps->errlen,
				   "%sops=%.*s: empty name in the list: choose %s",
				   ps->where, GR_TOKF(v), PX_CFG_OPS_CHOICES);
			return -EINVAL;
		}
		for (i = 0; i < PX_CFG_N_OPS; i++)
			if (gr_is(item, px__cfg_op_names[i].name))
				break;
		if (i == PX_CFG_N_OPS) {
			px__set_err(ps->err, ps->errlen,
				   "%sunknown operation \"%.*s\" in ops: choose %s",
				   ps->where, GR_TOKF(item), PX_CFG_OPS_CHOICES);
			return -EINVAL;
		}
		mask |= px__cfg_op_names[i].mask;
		if (!c)
			break;
		p = c + 1;
	}
	*out = mask;
	return 0;
}

/* An enumerated value: its index in names, or a message with the
 * choices. */
static int gr_name(struct gr_parser *ps, const char *what, struct gr_tok v,
		   const char *const *names, size_t n, int *out)
{
	char list[160];
	int i = gr_lookup(names, n, v);

	if (i >= 0) {
		*out = i;
		return 0;
	}
	px__cfg_join(list, sizeof(list), names, n, ~0u, "or");
	px__set_err(ps->err, ps->errlen, "%sunknown %s \"%.*s\": choose %s",
		   ps->where, what, GR_TOKF(v), list);
	return -EINVAL;
}

static int gr_provider(struct gr_parser *ps, struct gr_tok v,
		       px_processor_config *pc)
{
	char list[160];

	if (!px__class_find(v.s, v.n)) {
		int rc = -EINVAL;
		for (const char *const *s = px__classes_not_built; *s; s++)
			if (gr_is(v, *s))
				rc = -ENOSYS;
		if (rc == -ENOSYS) {
			px__class_names(list, sizeof(list), "and");
			px__set_err(ps->err, ps->errlen,
				   "%sprovider=%.*s is not built into this library "
				   "(built in: %s)",
				   ps->where, GR_TOKF(v), list);
		} else {
			px__class_names(list, sizeof(list), "or");
			px__set_err(ps->err, ps->errlen,
				   "%sunknown provider \"%.*s\": choose %s",
				   ps->where, GR_TOKF(v), list);
		}
		return rc;
	}
	px__set_name(pc->provider, PX_NAME_MAX, v.s, v.n);
	return 0;
}

static int gr_wait(struct gr_parser *ps, struct gr_tok v, bool with_provider,
		   px_processor_config *pc)
{
	char list[200];
	const px_provider_class *owner = px__cfg_wait_owner(v.s, v.n);

	/* The section's provider keeps a wait of its own ("linux-aio
	 * wait=epoll" is Linux AIO over epoll); only a wait it lacks moves
	 * the section to the first provider that has it. */
	if (owner && !with_provider && pc->provider[0]) {
		const px_provider_class *cur =
			px__class_find(pc->provider, strlen(pc->provider));
		if (cur && cur != owner && px__cfg_class_has_wait(cur, v.s, v.n))
			owner = cur;
	}

	if (!owner) {
		const px_provider_class *cls =
			with_provider ? px__class_find(pc->provider,
						       strlen(pc->provider))
				      : NULL;
		if (cls) {
			px__cfg_class_waits(cls, list, sizeof(list));
			px__set_err(ps->err, ps->errlen,
				   "%sunknown wait \"%.*s\" for provider=%s: "
				   "choose %s",
				   ps->where, GR_TOKF(v), cls->name, list);
		} else {
			px__cfg_all_waits(list, sizeof(list));
			px__set_err(ps->err, ps->errlen,
				   "%sunknown wait \"%.*s\": choose %s", ps->where,
				   GR_TOKF(v), list);
		}
		return -EINVAL;
	}
	/* A wait of another provider is refused by the combination check,
	 * which names the valid ones. */
	px__set_name(pc->wait, PX_NAME_MAX, v.s, v.n);
	if (!with_provider)
		px__set_name(pc->provider, PX_NAME_MAX, owner->name,
			     strlen(owner->name));
	return 0;
}

/* Provider words of the section: each key must be one of the section's
 * provider (any provider while auto). */
static int gr_extra(struct gr_parser *ps, const struct gr_words *w,
		    px_processor_config *pc)
{
	const px_provider_class *cls =
		pc->provider[0] ? px__class_find(pc->provider, strlen(pc->provider))
				: NULL;
	size_t pos = 0;

	pc->words[0] = '\0';
	for (size_t i = 0; i < w->nextra; i++) {
		struct gr_tok t = w->extra[i];
		size_t kn = (size_t)((const char *)memchr(t.s, '=', t.n) - t.s);
		if (cls && px__cfg_class_key(cls, t.s, kn) < 0) {
			char keys[300];
			px__cfg_valid_keys(cls, keys, sizeof(keys));
			px__set_err(ps->err, ps->errlen,
				   "%s%.*s is not a key of provider=%s: valid keys "
				   "are %s",
				   ps->where, (int)kn, t.s, cls->name, keys);
			return -EINVAL;
		}
		/* The word, the space before it (none before the first)
		 * and the NUL must fit. */
		if (pos + (pos ? 1 : 0) + t.n + 1 > PX_WORDS_MAX) {
			px__set_err(ps->err, ps->errlen,
				   "%sprovider words too long (at most %d bytes)",
				   ps->where, PX_WORDS_MAX - 1);
			return -EINVAL;
		}
		if (pos)
			pc->words[pos++] = ' ';
		memcpy(pc->words + pos, t.s, t.n);
		pos += t.n;
		pc->words[pos] = '\0';
	}
	return 0;
}

/* Apply one section's words to pc, which holds the inherited values. */
static int gr_apply(struct gr_parser *ps, px_processor_config *pc,
		    const struct gr_words *w)
{
	px_processor_config base = *pc;
	unsigned long num;
	int v, rc;

	if (w->seen[PX_K_PROVIDER]) {
		rc = gr_provider(ps, w->val[PX_K_PROVIDER], pc);
		if (rc < 0)
			return rc;
	}
	if (w->seen[PX_K_WAIT]) {
		rc = gr_wait(ps, w->val[PX_K_WAIT], w->seen[PX_K_PROVIDER], pc);
		if (rc < 0)
			return rc;
	}
	if (strcmp(pc->provider, base.provider)) {
		if (!w->seen[PX_K_WAIT])
			pc->wait[0] = '\0';
		if (!w->seen[PX_K_INTERRUPT])
			pc->interrupt[0] = '\0';
	} else if (strcmp(pc->wait, base.wait) && !w->seen[PX_K_INTERRUPT]) {
		pc->interrupt[0] = '\0';
	}
	/* The section's provider words replace the inherited ones; a
	 * changed provider drops them. */
	if (w->nextra || strcmp(pc->provider, base.provider)) {
		rc = gr_extra(ps, w, pc);
		if (rc < 0)
			return rc;
	}
	if (w->seen[PX_K_INTERRUPT]) {
		struct gr_tok t = w->val[PX_K_INTERRUPT];
		char list[160];
		if (t.n >= PX_NAME_MAX || px__intr_type_n(t.s, t.n) < 0) {
			px__cfg_intrs(~0u, list, sizeof(list));
			px__set_err(ps->err, ps->errlen,
				   "%sunknown interrupt \"%.*s\": choose %s",
				   ps->where, GR_TOKF(t), list);
			return -EINVAL;
		}
		px__set_name(pc->interrupt, PX_NAME_MAX, t.s, t.n);
	}
	if (w->seen[PX_K_PROCESSOR]) {
		rc = gr_name(ps, "processor", w->val[PX_K_PROCESSOR],
			     px__cfg_processor_names, 3, &v);
		if (rc < 0)
			return rc;
		pc->processor = v;
	}
	if (w->seen[PX_K_MAX_AIO]) {
		rc = gr_num(ps, PX_K_MAX_AIO, w->val[PX_K_MAX_AIO], UINT_MAX, &num);
		if (rc < 0)
			return rc;
		pc->max_aio = (unsigned)num;
	}
	if (w->seen[PX_K_OPS]) {
		uint32_t bits;
		rc = gr_ops(ps, w->val[PX_K_OPS], &bits);
		if (rc < 0)
			return rc;
		pc->ops = bits;
	}
	if (w->seen[PX_K_START]) {
		rc = gr_name(ps, "start", w->val[PX_K_START], px__cfg_start_names,
			     PX_CFG_N_START, &v);
		if (rc < 0)
			return rc;
		pc->flags = px__cfg_start_flags[v];
	}
	if (w->seen[PX_K_SIGNAL]) {
		rc = gr_num(ps, PX_K_SIGNAL, w->val[PX_K_SIGNAL], NSIG - 1, &num);
		if (rc < 0)
			return rc;
		if (num && !px__cfg_signo_usable((long)num)) {
			px__cfg_signo_error(ps->err, ps->errlen, ps->where, (long)num);
			return -EINVAL;
		}
		pc->intr_signo = (int)num;
	}
	return 0;
}

int px_config_parse(px_config *cfg, const char *text, char *err, size_t errlen)
{
	PX_KEEP_ERRNO;
	struct gr_parser ps = { .p = text ? text : "", .where = "", .err = err,
				.errlen = errlen };
	struct gr_words w;
	px_config c;
	struct gr_tok t;
	bool semi;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg) {
		px__set_err(err, errlen, "px_config_parse: no config to fill");
		return -EINVAL;
	}

	/* A leading bare word is a preset; no preset means "auto". */
	const char *save = ps.p;
	if (gr_next(&ps.p, &t) && !memchr(t.s, '=', t.n) && !gr_is(t, ";") &&
	    !gr_is(t, "primary:") && !gr_is(t, "secondary:")) {
		if (px__cfg_preset_fill(&c, t.s, t.n) < 0) {
			char names[300];
			px__cfg_preset_names(names, sizeof(names));
			px__set_err(err, errlen, "unknown preset \"%.*s\": choose %s",
				   GR_TOKF(t), names);
			return -EINVAL;
		}
	} else {
		ps.p = save;
		px__cfg_preset_fill(&c, "auto", 4);
	}

	rc = gr_collect(&ps, &w, false, &semi);
	if (rc < 0)
		return rc;
	rc = gr_apply(&ps, &c.primary, &w);
	if (rc < 0)
		return rc;

	if (semi) {
		if (!gr_next(&ps.p, &t) || !gr_is(t, "secondary:")) {
			px__set_err(err, errlen,
				   "expected \"secondary:\" after \";\", as in "
				   "\"... ; secondary: provider=%s\"",
				   px__classes[0]->name);
			return -EINVAL;
		}
		ps.where = "secondary: ";
		rc = gr_collect(&ps, &w, true, &semi);
		if (rc < 0)
			return rc;
		if (semi) {
			px__set_err(err, errlen,
				   "a config has at most two processors: only one "
				   "\"; secondary:\" section is allowed");
			return -EINVAL;
		}
		c.secondary.processor = PX_PROCESSOR_SHARED;
		rc = gr_apply(&ps, &c.secondary, &w);
		if (rc < 0)
			return rc;
	}

	if (ps.followers_seen) {
		int v;
		ps.where = "";
		rc = gr_name(&ps, "followers", ps.followers,
			     px__cfg_follower_names, 2, &v);
		if (rc < 0)
			return rc;
		c.followers = v;
	}

	rc = px__config_resolve(&c, err, errlen);
	if (rc < 0)
		return rc;
	*cfg = c;
	return 0;
}
