/*
 * config.c - the configuration's text form, presets and validation.
 *
 * Text form (see px_config_parse in proactor.h):
 *
 *     [preset] [primary:] key=value ... [; secondary: key=value ...]
 *
 * Words are separated by white space; ';' is a word of its own wherever it
 * stands, and "primary:" / "secondary:" may be glued to the next word.
 * Every key may be given once per section; followers= once per config.
 * A preset fills the whole config first and the words after it override
 * it.  Without a preset the primary starts from "auto".
 *
 * Overriding rules, so that one word is enough to switch engine:
 *   - wait=W without provider= picks the provider that owns W (every wait
 *     belongs to exactly one provider): "auto wait=poll" is provider=select;
 *   - when a section's provider changes, the wait, interrupt and ring
 *     values it inherited fall back to that provider's defaults (unless
 *     given in the same section), and "auto" stops being auto;
 *   - when only the wait changes, the inherited interrupt falls back to the
 *     new wait's default;
 *   - "auto" given an interrupt that io_uring does not take (pipe, eventfd,
 *     signal) becomes epoll, so such text means the same on every build.
 *
 * Parsed configs are resolved (defaults filled in, combination checked),
 * and px_config_format writes every resolved field back (with a leading
 * "auto" while PX_CF_AUTO is set), so parse(format(cfg)) gives cfg again.
 * In the struct, a secondary exists when its processor is not NONE.  Every
 * error message names the valid choices.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* registry.c */

#define BIT(v) (1u << (v))

/* ------------------------------------------------------------------ */
/* Names                                                                */
/* ------------------------------------------------------------------ */

static const char *const provider_names[PX_PROVIDER_COUNT] = {
	[PX_PROVIDER_SELECT] = "select",
	[PX_PROVIDER_URING] = "uring",
};

static const char *const wait_names[PX_WAIT_COUNT] = {
	[PX_WAIT_SELECT] = "select",
	[PX_WAIT_POLL] = "poll",
	[PX_WAIT_EPOLL] = "epoll",
	[PX_WAIT_URING] = "uring",
};

static const char *const intr_names[PX_INTR_COUNT] = {
	[PX_INTR_PIPE] = "pipe",
	[PX_INTR_EVENTFD] = "eventfd",
	[PX_INTR_SIGNAL] = "signal",
	[PX_INTR_NATIVE] = "native",
};

static const char *const processor_names[] = {
	[PX_PROCESSOR_SHARED] = "shared",
	[PX_PROCESSOR_DEDICATED] = "dedicated",
};

static const char *const follower_names[] = {
	[PX_FOLLOWERS_LIFO] = "lifo",
	[PX_FOLLOWERS_FIFO] = "fifo",
};

/* start= values and the processor flags each one stands for. */
static const char *const start_names[] = { "any", "any-interrupt", "leader" };
static const unsigned start_flags[] = {
	PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD,
	PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT,
	PX_PF_FLAGS_SET,
};

static const char *const ring_flag_names[] = { "coop_taskrun", "sqpoll" };
static const unsigned ring_flag_bits[] = { PX_RING_COOP_TASKRUN, PX_RING_SQPOLL };
#define PX_RING_ALL (PX_RING_COOP_TASKRUN | PX_RING_SQPOLL)

/* Operation names and groups, in the order format() prefers them: the
 * widest group that fits first. */
#define OPS_STREAM (PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM))
#define OPS_FILE (PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE))
#define OPS_DGRAM (PX_OP_BIT(PX_OP_READ_DGRAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM))
#define OPS_SOCKET                                                             \
	(OPS_STREAM | OPS_DGRAM | PX_OP_BIT(PX_OP_ACCEPT) | PX_OP_BIT(PX_OP_CONNECT))

static const struct {
	const char *name;
	uint32_t mask;
} op_names[] = {
	{ "all", PX_OPS_IO },
	{ "socket", OPS_SOCKET },
	{ "stream", OPS_STREAM },
	{ "file", OPS_FILE },
	{ "dgram", OPS_DGRAM },
	{ "read_stream", PX_OP_BIT(PX_OP_READ_STREAM) },
	{ "write_stream", PX_OP_BIT(PX_OP_WRITE_STREAM) },
	{ "read_file", PX_OP_BIT(PX_OP_READ_FILE) },
	{ "write_file", PX_OP_BIT(PX_OP_WRITE_FILE) },
	{ "read_dgram", PX_OP_BIT(PX_OP_READ_DGRAM) },
	{ "write_dgram", PX_OP_BIT(PX_OP_WRITE_DGRAM) },
	{ "accept", PX_OP_BIT(PX_OP_ACCEPT) },
	{ "connect", PX_OP_BIT(PX_OP_CONNECT) },
};
#define N_OP_NAMES (sizeof(op_names) / sizeof(op_names[0]))
/* What the ops= error lists: single operations first, then groups. */
#define OPS_CHOICES                                                            \
	"read_stream, write_stream, read_file, write_file, read_dgram, "       \
	"write_dgram, accept, connect, stream, file, dgram, socket or all"

enum px_key {
	K_PROVIDER,
	K_WAIT,
	K_INTERRUPT,
	K_PROCESSOR,
	K_MAX_AIO,
	K_OPS,
	K_START,
	K_SIGNAL,
	K_RING,
	K_RING_FLAGS,
	K_FOLLOWERS,    /* global */
	K_COUNT
};

static const char *const key_names[K_COUNT] = {
	[K_PROVIDER] = "provider",   [K_WAIT] = "wait",
	[K_INTERRUPT] = "interrupt", [K_PROCESSOR] = "processor",
	[K_MAX_AIO] = "max_aio",     [K_OPS] = "ops",
	[K_START] = "start",         [K_SIGNAL] = "signal",
	[K_RING] = "ring",           [K_RING_FLAGS] = "ring_flags",
	[K_FOLLOWERS] = "followers",
};

#define PX_RING_MAX 32768u /* IORING_MAX_ENTRIES */

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Write "a, b or c" (conj = "or"/"and") of the names whose bit is in mask
 * (all non-NULL ones when mask is ~0u). */
static void join_names(char *buf, size_t len, const char *const *names,
		       size_t n, unsigned mask, const char *conj)
{
	size_t total = 0, seen = 0, pos = 0;

	for (size_t i = 0; i < n; i++)
		if (names[i] && (mask & BIT(i)))
			total++;
	buf[0] = '\0';
	for (size_t i = 0; i < n && pos < len; i++) {
		if (!names[i] || !(mask & BIT(i)))
			continue;
		const char *sep = seen == 0 ? "" : seen + 1 == total ? " " : ", ";
		int w = snprintf(buf + pos, len - pos, "%s%s%s%s", sep,
				 seen && seen + 1 == total ? conj : "",
				 seen && seen + 1 == total ? " " : "", names[i]);
		if (w < 0)
			break;
		pos += (size_t)w;
		seen++;
	}
}

static const char *name_of(const char *const *names, size_t n, unsigned v)
{
	return v < n && names[v] ? names[v] : "?";
}

/* ------------------------------------------------------------------ */
/* Presets                                                              */
/* ------------------------------------------------------------------ */

static const struct px_preset {
	const char *name;
	px_provider_type provider;
	px_wait_type wait;
	px_interrupt_type intr;
	px_processor_type processor;
} presets[] = {
	{ "auto", PX_PROVIDER_NONE, 0, 0, 0 },  /* filled in below */
	{ "uring", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE, PX_PROCESSOR_SHARED },
	{ "epoll", PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD, PX_PROCESSOR_SHARED },
	{ "poll", PX_PROVIDER_SELECT, PX_WAIT_POLL, PX_INTR_EVENTFD, PX_PROCESSOR_SHARED },
	{ "select", PX_PROVIDER_SELECT, PX_WAIT_SELECT, PX_INTR_EVENTFD, PX_PROCESSOR_SHARED },
	{ "uring-dedicated", PX_PROVIDER_URING, PX_WAIT_URING, PX_INTR_NATIVE,
	  PX_PROCESSOR_DEDICATED },
	{ "epoll-dedicated", PX_PROVIDER_SELECT, PX_WAIT_EPOLL, PX_INTR_EVENTFD,
	  PX_PROCESSOR_DEDICATED },
	{ "poll-dedicated", PX_PROVIDER_SELECT, PX_WAIT_POLL, PX_INTR_EVENTFD,
	  PX_PROCESSOR_DEDICATED },
	{ "select-dedicated", PX_PROVIDER_SELECT, PX_WAIT_SELECT, PX_INTR_EVENTFD,
	  PX_PROCESSOR_DEDICATED },
};

static void preset_names(char *buf, size_t len)
{
	const char *names[N(presets)];

	for (size_t i = 0; i < N(presets); i++)
		names[i] = presets[i].name;
	join_names(buf, len, names, N(presets), ~0u, "or");
}

static const struct px_preset *preset_find(const char *s, size_t n)
{
	for (size_t i = 0; i < N(presets); i++)
		if (strlen(presets[i].name) == n && !memcmp(presets[i].name, s, n))
			return &presets[i];
	return NULL;
}

static void preset_fill(px_config *cfg, const struct px_preset *p)
{
	memset(cfg, 0, sizeof(*cfg));
	if (!strcmp(p->name, "auto")) {
#ifdef PX_HAVE_URING
		/* io_uring when this kernel offers it; px_create falls back to
		 * epoll when it does not (PX_CF_AUTO). */
		p = preset_find("uring", 5);
		cfg->flags |= PX_CF_AUTO;
#else
		p = preset_find("epoll", 5);
#endif
	}
	cfg->primary.processor = p->processor;
	cfg->primary.provider = p->provider;
	cfg->primary.wait = p->wait;
	cfg->primary.interrupt = p->intr;
	cfg->followers = PX_FOLLOWERS_LIFO;
}

int px_config_preset(px_config *cfg, const char *name)
{
	const struct px_preset *p;

	if (!cfg || !name)
		return -ENOENT;
	p = preset_find(name, strlen(name));
	if (!p)
		return -ENOENT;
	preset_fill(cfg, p);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Validation                                                           */
/* ------------------------------------------------------------------ */

static px_provider_type wait_owner(px_wait_type w)
{
	for (int p = PX_PROVIDER_NONE + 1; p < PX_PROVIDER_COUNT; p++)
		if (px_registry_choices(p, PX_WAIT_DEFAULT, NULL) & BIT(w))
			return p;
	return PX_PROVIDER_NONE;
}

/* The signal numbers an interrupt may use: 1..NSIG-1 except SIGKILL,
 * SIGSTOP and the ones glibc keeps for itself (32 up to SIGRTMIN). */
static bool signo_usable(long s)
{
	if (s < 1 || s >= NSIG || s == SIGKILL || s == SIGSTOP)
		return false;
	return !(s >= 32 && s < SIGRTMIN);
}

static void signo_error(char *err, size_t errlen, const char *where, long s)
{
	if (SIGRTMIN > 32)
		px_set_err(err, errlen,
			   "%ssignal=%ld is not usable: choose 1 to %d except "
			   "%d (SIGKILL), %d (SIGSTOP) and 32 to %d (kept by the "
			   "C library)",
			   where, s, NSIG - 1, SIGKILL, SIGSTOP, SIGRTMIN - 1);
	else
		px_set_err(err, errlen,
			   "%ssignal=%ld is not usable: choose 1 to %d except "
			   "%d (SIGKILL) and %d (SIGSTOP)",
			   where, s, NSIG - 1, SIGKILL, SIGSTOP);
}

static int resolve_one(px_processor_config *pc, const char *where, char *err,
		       size_t errlen)
{
	char list[160];
	unsigned mask;
	int def;

	if (pc->processor == PX_PROCESSOR_NONE)
		pc->processor = PX_PROCESSOR_SHARED;
	if ((unsigned)pc->processor > PX_PROCESSOR_DEDICATED) {
		px_set_err(err, errlen,
			   "%sunknown processor %d: choose shared or dedicated",
			   where, (int)pc->processor);
		return -EINVAL;
	}

	/* Provider, possibly implied by the wait. */
	join_names(list, sizeof(list), provider_names, N(provider_names), ~0u, "or");
	if (pc->provider == PX_PROVIDER_NONE && pc->wait != PX_WAIT_DEFAULT &&
	    (unsigned)pc->wait < PX_WAIT_COUNT)
		pc->provider = wait_owner(pc->wait);
	if (pc->provider == PX_PROVIDER_NONE) {
		px_set_err(err, errlen, "%sno provider given: choose %s", where, list);
		return -EINVAL;
	}
	if ((unsigned)pc->provider >= PX_PROVIDER_COUNT) {
		px_set_err(err, errlen, "%sunknown provider %d: choose %s", where,
			   (int)pc->provider, list);
		return -EINVAL;
	}
	const char *pname = provider_names[pc->provider];

	/* Wait. */
	mask = px_registry_choices(pc->provider, PX_WAIT_DEFAULT, &def);
	join_names(list, sizeof(list), wait_names, N(wait_names), mask, "or");
	if (pc->wait == PX_WAIT_DEFAULT) {
		pc->wait = def;
	} else if ((unsigned)pc->wait >= PX_WAIT_COUNT) {
		px_set_err(err, errlen, "%sunknown wait %d for provider=%s: choose %s",
			   where, (int)pc->wait, pname, list);
		return -EINVAL;
	} else if (!(mask & BIT(pc->wait))) {
		px_set_err(err, errlen,
			   "%sinvalid combination provider=%s wait=%s: provider=%s "
			   "takes wait %s",
			   where, pname, wait_names[pc->wait], pname, list);
		return -EINVAL;
	}
	const char *wname = wait_names[pc->wait];

	/* Interrupt. */
	mask = px_registry_choices(pc->provider, pc->wait, &def);
	join_names(list, sizeof(list), intr_names, N(intr_names), mask, "or");
	if (pc->interrupt == PX_INTR_DEFAULT) {
		pc->interrupt = def;
	} else if ((unsigned)pc->interrupt >= PX_INTR_COUNT) {
		px_set_err(err, errlen, "%sunknown interrupt %d for wait=%s: choose %s",
			   where, (int)pc->interrupt, wname, list);
		return -EINVAL;
	} else if (!(mask & BIT(pc->interrupt))) {
		px_set_err(err, errlen,
			   "%sinvalid combination provider=%s wait=%s interrupt=%s: "
			   "wait=%s takes interrupt %s",
			   where, pname, wname, intr_names[pc->interrupt], wname, list);
		return -EINVAL;
	}

	/* Start flags: meaningful only with PX_PF_FLAGS_SET. */
	if (pc->flags & ~(PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD |
			  PX_PF_START_INTERRUPT)) {
		px_set_err(err, errlen,
			   "%sunknown processor flags 0x%x: use start=any, "
			   "any-interrupt or leader",
			   where, pc->flags);
		return -EINVAL;
	}
	if (!(pc->flags & PX_PF_FLAGS_SET))
		pc->flags = 0;
	else if ((pc->flags & PX_PF_START_INTERRUPT) &&
		 !(pc->flags & PX_PF_START_ANY_THREAD)) {
		px_set_err(err, errlen,
			   "%sinterrupting the leader on start needs starts from "
			   "any thread: choose start=any, any-interrupt or leader",
			   where);
		return -EINVAL;
	}

	if (pc->ops & ~(uint32_t)PX_OPS_IO) {
		px_set_err(err, errlen,
			   "%sops mask 0x%x names operations that are not I/O: "
			   "choose from %s",
			   where, (unsigned)pc->ops, OPS_CHOICES);
		return -EINVAL;
	}

	if (pc->interrupt == PX_INTR_SIGNAL) {
		if (pc->intr_signo && !signo_usable(pc->intr_signo)) {
			signo_error(err, errlen, where, pc->intr_signo);
			return -EINVAL;
		}
	} else if (pc->intr_signo) {
		px_set_err(err, errlen,
			   "%ssignal=%d only applies to interrupt=signal "
			   "(this processor has interrupt=%s)",
			   where, pc->intr_signo, intr_names[pc->interrupt]);
		return -EINVAL;
	}

	if (pc->provider != PX_PROVIDER_URING &&
	    (pc->ring_entries || pc->ring_flags)) {
		px_set_err(err, errlen,
			   "%sring and ring_flags only apply to provider=uring "
			   "(this processor has provider=%s)",
			   where, pname);
		return -EINVAL;
	}
	if (pc->ring_entries > PX_RING_MAX) {
		px_set_err(err, errlen, "%sring=%u is too large (at most %u)", where,
			   pc->ring_entries, PX_RING_MAX);
		return -EINVAL;
	}
	if (pc->ring_flags & ~PX_RING_ALL) {
		px_set_err(err, errlen,
			   "%sunknown ring_flags 0x%x: choose coop_taskrun or sqpoll",
			   where, pc->ring_flags);
		return -EINVAL;
	}
	return 0;
}

int px_processor_config_resolve(px_processor_config *pc, char *err, size_t errlen)
{
	if (!pc) {
		px_set_err(err, errlen, "no processor config");
		return -EINVAL;
	}
	return resolve_one(pc, "", err, errlen);
}


int px_config_resolve(px_config *cfg, char *err, size_t errlen)
{
	int rc;

	if (!cfg) {
		px_set_err(err, errlen, "no config");
		return -EINVAL;
	}
	if (cfg->flags & ~(PX_CF_NO_ENV | PX_CF_AUTO)) {
		px_set_err(err, errlen, "unknown config flags 0x%x", cfg->flags);
		return -EINVAL;
	}
	if ((unsigned)cfg->followers > PX_FOLLOWERS_FIFO) {
		px_set_err(err, errlen, "unknown followers %d: choose lifo or fifo",
			   (int)cfg->followers);
		return -EINVAL;
	}
	rc = resolve_one(&cfg->primary, "", err, errlen);
	if (rc < 0)
		return rc;
	/* As proactor.h says: processor NONE means no secondary, whatever
	 * its other fields hold (cleared, for a canonical form). */
	if (cfg->secondary.processor == PX_PROCESSOR_NONE) {
		memset(&cfg->secondary, 0, sizeof(cfg->secondary));
		return 0;
	}
	return resolve_one(&cfg->secondary, "secondary: ", err, errlen);
}

/* ------------------------------------------------------------------ */
/* Parsing                                                              */
/* ------------------------------------------------------------------ */

struct tok {
	const char *s;
	size_t n;
};

static bool tok_is(struct tok t, const char *lit)
{
	return strlen(lit) == t.n && !memcmp(t.s, lit, t.n);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

static bool starts_with(const char *s, const char *lit)
{
	return !strncmp(s, lit, strlen(lit));
}

/* The next word at *pp: ';' alone, a section marker alone, or a run of
 * other characters.  Returns false at the end of the text. */
static bool next_tok(const char **pp, struct tok *t)
{
	const char *p = *pp;

	while (is_space(*p))
		p++;
	if (!*p)
		return false;
	t->s = p;
	if (*p == ';') {
		p++;
	} else if (starts_with(p, "primary:")) {
		p += strlen("primary:");
	} else if (starts_with(p, "secondary:")) {
		p += strlen("secondary:");
	} else {
		while (*p && !is_space(*p) && *p != ';')
			p++;
	}
	t->n = (size_t)(p - t->s);
	*pp = p;
	return true;
}

/* Where a name is looked up: index of t in names, or -1. */
static int lookup(const char *const *names, size_t n, struct tok t)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] && tok_is(t, names[i]))
			return (int)i;
	return -1;
}

/* The words of one section, by key. */
struct words {
	struct tok val[K_COUNT];
	bool seen[K_COUNT];
};

struct parser {
	const char *p;          /* next unread character */
	const char *where;      /* "" or "secondary: " */
	char *err;
	size_t errlen;
	bool followers_seen;
	struct tok followers;
};

#define TOKF(t) (int)(t).n, (t).s

static int bad_word(struct parser *ps, struct tok t)
{
	char keys[200];

	join_names(keys, sizeof(keys), key_names, K_COUNT, ~0u, "and");
	if (preset_find(t.s, t.n))
		px_set_err(ps->err, ps->errlen,
			   "%spreset \"%.*s\" must be the first word of the text",
			   ps->where, TOKF(t));
	else
		px_set_err(ps->err, ps->errlen,
			   "%s\"%.*s\" is not a key=value word: valid keys are %s",
			   ps->where, TOKF(t), keys);
	return -EINVAL;
}

/* Read the words of a section up to ';' (consumed; *semi set) or the end. */
static int collect(struct parser *ps, struct words *w, bool secondary,
		   bool *semi)
{
	struct tok t;
	bool first = true;

	memset(w, 0, sizeof(*w));
	*semi = false;
	while (next_tok(&ps->p, &t)) {
		if (tok_is(t, ";")) {
			*semi = true;
			return 0;
		}
		if (tok_is(t, "primary:")) {
			if (secondary || !first) {
				px_set_err(ps->err, ps->errlen,
					   "%s\"primary:\" may only open the text "
					   "(after an optional preset)",
					   ps->where);
				return -EINVAL;
			}
			first = false;
			continue;
		}
		first = false;
		if (tok_is(t, "secondary:")) {
			px_set_err(ps->err, ps->errlen,
				   "\"secondary:\" must follow \";\", as in "
				   "\"epoll ; secondary: provider=select wait=poll\"");
			return -EINVAL;
		}
		const char *eq = memchr(t.s, '=', t.n);
		if (!eq)
			return bad_word(ps, t);
		struct tok key = { t.s, (size_t)(eq - t.s) };
		struct tok val = { eq + 1, t.n - key.n - 1 };
		int k = lookup(key_names, K_COUNT, key);
		if (k < 0) {
			char keys[200];
			join_names(keys, sizeof(keys), key_names, K_COUNT, ~0u, "and");
			px_set_err(ps->err, ps->errlen,
				   "%sunknown key \"%.*s\": valid keys are %s",
				   ps->where, TOKF(key), keys);
			return -EINVAL;
		}
		if (k == K_FOLLOWERS) {
			if (ps->followers_seen) {
				px_set_err(ps->err, ps->errlen,
					   "followers is given twice");
				return -EINVAL;
			}
			ps->followers_seen = true;
			ps->followers = val;
			continue;
		}
		if (w->seen[k]) {
			px_set_err(ps->err, ps->errlen, "%s%s is given twice",
				   ps->where, key_names[k]);
			return -EINVAL;
		}
		w->seen[k] = true;
		w->val[k] = val;
	}
	return 0;
}

/* A decimal number from 0 to max. */
static int parse_num(struct parser *ps, int key, struct tok v,
		     unsigned long max, unsigned long *out)
{
	unsigned long n = 0;

	if (v.n && v.s[0] == '-') {
		px_set_err(ps->err, ps->errlen,
			   "%s%s=%.*s: negative numbers are not allowed "
			   "(expected 0 to %lu)",
			   ps->where, key_names[key], TOKF(v), max);
		return -EINVAL;
	}
	if (!v.n) {
		px_set_err(ps->err, ps->errlen,
			   "%s%s has no value: expected a decimal number from 0 to %lu",
			   ps->where, key_names[key], max);
		return -EINVAL;
	}
	for (size_t i = 0; i < v.n; i++) {
		if (v.s[i] < '0' || v.s[i] > '9') {
			px_set_err(ps->err, ps->errlen,
				   "%s%s=%.*s: not a decimal number "
				   "(expected 0 to %lu)",
				   ps->where, key_names[key], TOKF(v), max);
			return -EINVAL;
		}
		unsigned d = (unsigned)(v.s[i] - '0');
		if (n > (max - d) / 10) {
			px_set_err(ps->err, ps->errlen,
				   "%s%s=%.*s: too large (at most %lu)",
				   ps->where, key_names[key], TOKF(v), max);
			return -EINVAL;
		}
		n = n * 10 + d;
	}
	*out = n;
	return 0;
}

/* A comma list of names, each adding bits; names[i] adds bits[i]. */
static int parse_list(struct parser *ps, int key, struct tok v,
		      const char *const *names, const uint32_t *bits, size_t n,
		      const char *choices, uint32_t *out)
{
	uint32_t mask = 0;
	const char *p = v.s, *end = v.s + v.n;

	for (;;) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		struct tok item = { p, (size_t)((c ? c : end) - p) };
		int i = item.n ? lookup(names, n, item) : -1;
		if (!item.n) {
			px_set_err(ps->err, ps->errlen,
				   "%s%s=%.*s: empty name in the list: choose %s",
				   ps->where, key_names[key], TOKF(v), choices);
			return -EINVAL;
		}
		if (i < 0) {
			px_set_err(ps->err, ps->errlen,
				   "%sunknown %s \"%.*s\" in %s: choose %s",
				   ps->where,
				   key == K_OPS ? "operation" : "ring flag",
				   TOKF(item), key_names[key], choices);
			return -EINVAL;
		}
		mask |= bits[i];
		if (!c)
			break;
		p = c + 1;
	}
	*out = mask;
	return 0;
}

/* An enumerated value: its index in names.  A name that exists but does
 * not fit the context (wait=uring for provider=select) is accepted here and
 * refused by the combination check; an unknown one gets the choices that
 * fit (mask) in the message. */
static int parse_name(struct parser *ps, const char *what, struct tok v,
		      const char *const *names, size_t n, unsigned mask,
		      const char *context, int *out)
{
	char list[160];
	int i = lookup(names, n, v);

	if (i >= 0) {
		*out = i;
		return 0;
	}
	join_names(list, sizeof(list), names, n, mask, "or");
	px_set_err(ps->err, ps->errlen, "%sunknown %s \"%.*s\"%s: choose %s",
		   ps->where, what, TOKF(v), context, list);
	return -EINVAL;
}

/* Apply one section's words to pc, which holds the inherited values. */
static int apply(struct parser *ps, px_config *cfg, px_processor_config *pc,
		 const struct words *w, bool secondary, bool implicit_auto)
{
	const px_provider_type base_provider = pc->provider;
	const px_wait_type base_wait = pc->wait;
	char ctx[64] = "";
	unsigned long num;
	uint32_t bits;
	int v, rc;

	if (w->seen[K_PROVIDER]) {
		rc = parse_name(ps, "provider", w->val[K_PROVIDER], provider_names,
				N(provider_names), ~0u, "", &v);
		if (rc < 0)
			return rc;
		pc->provider = v;
	}
	if (w->seen[K_WAIT]) {
		unsigned mask = ~0u;
		if (w->seen[K_PROVIDER]) {
			mask = px_registry_choices(pc->provider, PX_WAIT_DEFAULT, NULL);
			snprintf(ctx, sizeof(ctx), " for provider=%s",
				 provider_names[pc->provider]);
		}
		rc = parse_name(ps, "wait", w->val[K_WAIT], wait_names,
				N(wait_names), mask, ctx, &v);
		if (rc < 0)
			return rc;
		pc->wait = v;
		if (!w->seen[K_PROVIDER])
			pc->provider = wait_owner(pc->wait);
	}
	if (pc->provider != base_provider) {
		if (!w->seen[K_WAIT])
			pc->wait = PX_WAIT_DEFAULT;
		if (!w->seen[K_INTERRUPT])
			pc->interrupt = PX_INTR_DEFAULT;
		if (!w->seen[K_RING])
			pc->ring_entries = 0;
		if (!w->seen[K_RING_FLAGS])
			pc->ring_flags = 0;
	} else if (pc->wait != base_wait && !w->seen[K_INTERRUPT]) {
		pc->interrupt = PX_INTR_DEFAULT;
	}
	/* "auto" stays auto only while the engine is left to it: a named
	 * "auto" preset keeps it when the words repeat its provider (as
	 * format() writes it), text without a preset loses it as soon as it
	 * names an engine. */
	if (!secondary && (pc->provider != base_provider ||
			   (implicit_auto && (w->seen[K_PROVIDER] || w->seen[K_WAIT]))))
		cfg->flags &= ~PX_CF_AUTO;
	if (w->seen[K_INTERRUPT]) {
		/* Name the choices of the wait in force, when known. */
		int wt = pc->wait;
		if (wt == PX_WAIT_DEFAULT)
			px_registry_choices(pc->provider, PX_WAIT_DEFAULT, &wt);
		unsigned mask = px_registry_choices(pc->provider, wt, NULL);
		bool still_auto = !secondary && (cfg->flags & PX_CF_AUTO);
		ctx[0] = '\0';
		if (mask && !still_auto)
			snprintf(ctx, sizeof(ctx), " for wait=%s", wait_names[wt]);
		rc = parse_name(ps, "interrupt", w->val[K_INTERRUPT], intr_names,
				N(intr_names), ctx[0] ? mask : ~0u, ctx, &v);
		if (rc < 0)
			return rc;
		pc->interrupt = v;
		/* Still "auto" (io_uring) but given an interrupt only the
		 * readiness waits take: auto means epoll then, as it does
		 * where io_uring is not built in. */
		if (still_auto && !(mask & BIT(v))) {
			pc->provider = PX_PROVIDER_SELECT;
			pc->wait = PX_WAIT_DEFAULT;
			if (!w->seen[K_RING])
				pc->ring_entries = 0;
			if (!w->seen[K_RING_FLAGS])
				pc->ring_flags = 0;
			cfg->flags &= ~PX_CF_AUTO;
		}
	}
	if (w->seen[K_PROCESSOR]) {
		rc = parse_name(ps, "processor", w->val[K_PROCESSOR],
				processor_names, N(processor_names), ~0u, "", &v);
		if (rc < 0)
			return rc;
		pc->processor = v;
	}
	if (w->seen[K_MAX_AIO]) {
		rc = parse_num(ps, K_MAX_AIO, w->val[K_MAX_AIO], UINT_MAX, &num);
		if (rc < 0)
			return rc;
		pc->max_aio = (unsigned)num;
	}
	if (w->seen[K_OPS]) {
		const char *names[N_OP_NAMES];
		uint32_t masks[N_OP_NAMES];
		for (size_t i = 0; i < N_OP_NAMES; i++) {
			names[i] = op_names[i].name;
			masks[i] = op_names[i].mask;
		}
		rc = parse_list(ps, K_OPS, w->val[K_OPS], names, masks,
				N_OP_NAMES, OPS_CHOICES, &bits);
		if (rc < 0)
			return rc;
		pc->ops = bits;
	}
	if (w->seen[K_START]) {
		rc = parse_name(ps, "start", w->val[K_START], start_names,
				N(start_names), ~0u, "", &v);
		if (rc < 0)
			return rc;
		pc->flags = start_flags[v];
	}
	if (w->seen[K_SIGNAL]) {
		rc = parse_num(ps, K_SIGNAL, w->val[K_SIGNAL], NSIG - 1, &num);
		if (rc < 0)
			return rc;
		if (num && !signo_usable((long)num)) {
			signo_error(ps->err, ps->errlen, ps->where, (long)num);
			return -EINVAL;
		}
		pc->intr_signo = (int)num;
	}
	if (w->seen[K_RING]) {
		rc = parse_num(ps, K_RING, w->val[K_RING], PX_RING_MAX, &num);
		if (rc < 0)
			return rc;
		pc->ring_entries = (unsigned)num;
	}
	if (w->seen[K_RING_FLAGS]) {
		rc = parse_list(ps, K_RING_FLAGS, w->val[K_RING_FLAGS],
				ring_flag_names, ring_flag_bits, N(ring_flag_names),
				"coop_taskrun or sqpoll", &bits);
		if (rc < 0)
			return rc;
		pc->ring_flags = bits;
	}
	return 0;
}

int px_config_parse(px_config *cfg, const char *text, char *err, size_t errlen)
{
	struct parser ps = { .p = text ? text : "", .where = "", .err = err,
			     .errlen = errlen };
	struct words w;
	px_config c;
	struct tok t;
	bool semi, implicit_auto = false;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg) {
		px_set_err(err, errlen, "px_config_parse: no config to fill");
		return -EINVAL;
	}

	/* A leading bare word is a preset; no preset means "auto". */
	const char *save = ps.p;
	if (next_tok(&ps.p, &t) && !memchr(t.s, '=', t.n) && !tok_is(t, ";") &&
	    !tok_is(t, "primary:") && !tok_is(t, "secondary:")) {
		const struct px_preset *p = preset_find(t.s, t.n);
		if (!p) {
			char names[200];
			preset_names(names, sizeof(names));
			px_set_err(err, errlen, "unknown preset \"%.*s\": choose %s",
				   TOKF(t), names);
			return -EINVAL;
		}
		preset_fill(&c, p);
	} else {
		ps.p = save;
		preset_fill(&c, preset_find("auto", 4));
		implicit_auto = true;
	}

	rc = collect(&ps, &w, false, &semi);
	if (rc < 0)
		return rc;
	rc = apply(&ps, &c, &c.primary, &w, false, implicit_auto);
	if (rc < 0)
		return rc;

	if (semi) {
		if (!next_tok(&ps.p, &t) || !tok_is(t, "secondary:")) {
			px_set_err(err, errlen,
				   "expected \"secondary:\" after \";\", as in "
				   "\"epoll ; secondary: provider=select wait=poll\"");
			return -EINVAL;
		}
		ps.where = "secondary: ";
		rc = collect(&ps, &w, true, &semi);
		if (rc < 0)
			return rc;
		if (semi) {
			px_set_err(err, errlen,
				   "a config has at most two processors: only one "
				   "\"; secondary:\" section is allowed");
			return -EINVAL;
		}
		if (c.secondary.processor == PX_PROCESSOR_NONE)
			c.secondary.processor = PX_PROCESSOR_SHARED;
		rc = apply(&ps, &c, &c.secondary, &w, true, false);
		if (rc < 0)
			return rc;
	}

	if (ps.followers_seen) {
		int v;
		ps.where = "";
		rc = parse_name(&ps, "followers", ps.followers, follower_names,
				N(follower_names), ~0u, "", &v);
		if (rc < 0)
			return rc;
		c.followers = v;
	}

	rc = px_config_resolve(&c, err, errlen);
	if (rc < 0)
		return rc;
	*cfg = c;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Formatting                                                           */
/* ------------------------------------------------------------------ */

/* An snprintf-like appender that keeps counting past the end. */
struct out {
	char *buf;
	size_t len;
	size_t pos;
};

static void put(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
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

static void put_processor(struct out *o, const px_processor_config *pc)
{
	put(o, "provider=%s wait=%s interrupt=%s processor=%s max_aio=%u",
	    name_of(provider_names, N(provider_names), pc->provider),
	    name_of(wait_names, N(wait_names), pc->wait),
	    name_of(intr_names, N(intr_names), pc->interrupt),
	    name_of(processor_names, N(processor_names), pc->processor),
	    pc->max_aio);
	if (pc->ops) {
		uint32_t left = pc->ops;
		const char *sep = " ops=";
		for (size_t i = 0; i < N_OP_NAMES && left; i++) {
			if ((left & op_names[i].mask) != op_names[i].mask)
				continue;
			put(o, "%s%s", sep, op_names[i].name);
			left &= ~op_names[i].mask;
			sep = ",";
		}
	}
	if (pc->flags & PX_PF_FLAGS_SET) {
		for (size_t i = 0; i < N(start_flags); i++)
			if (pc->flags == start_flags[i])
				put(o, " start=%s", start_names[i]);
	}
	if (pc->intr_signo)
		put(o, " signal=%d", pc->intr_signo);
	if (pc->ring_entries)
		put(o, " ring=%u", pc->ring_entries);
	if (pc->ring_flags) {
		const char *sep = " ring_flags=";
		for (size_t i = 0; i < N(ring_flag_bits); i++) {
			if (!(pc->ring_flags & ring_flag_bits[i]))
				continue;
			put(o, "%s%s", sep, ring_flag_names[i]);
			sep = ",";
		}
	}
}

int px_config_format(const px_config *cfg, char *buf, size_t len)
{
	struct out o = { buf, buf ? len : 0, 0 };
	px_config c;

	if (!cfg)
		return -EINVAL;
	c = *cfg;
	if (px_config_resolve(&c, NULL, 0) < 0)
		return -EINVAL;
	if (o.len)
		o.buf[0] = '\0';
	if (c.flags & PX_CF_AUTO)
		put(&o, "auto ");
	put_processor(&o, &c.primary);
	if (c.followers != PX_FOLLOWERS_LIFO)
		put(&o, " followers=%s", follower_names[c.followers]);
	if (c.secondary.processor != PX_PROCESSOR_NONE) {
		put(&o, " ; secondary: ");
		put_processor(&o, &c.secondary);
	}
	return o.pos > INT_MAX ? -EINVAL : (int)o.pos;
}

const char *px_provider_type_name(px_provider_type t)
{
	if ((unsigned)t >= PX_PROVIDER_COUNT || !provider_names[t])
		return "?";
	return provider_names[t];
}
