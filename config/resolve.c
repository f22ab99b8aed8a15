/*
 * resolve.c - checking a configuration and filling in its defaults, all
 * through the provider classes (providers/classes.c).
 *
 * A processor config names its provider, wait and interrupt by text.
 * Resolution turns "" into the defaults (the class's first wait, the
 * wait's default interrupt), checks that the combination is one the class
 * offers, runs the class's own words through its parse and validate hooks
 * and writes them back in canonical form.  A processor with no provider
 * and no wait is "auto": it stays so here, and px__processor_create picks
 * the engine (px__auto_candidates).  Every message names the valid
 * choices.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

/* ------------------------------------------------------------------ */
/* Generic names                                                        */
/* ------------------------------------------------------------------ */

const char *const px__cfg_key_names[PX_K_COUNT] = {
	[PX_K_PROVIDER] = "provider",   [PX_K_WAIT] = "wait",
	[PX_K_INTERRUPT] = "interrupt", [PX_K_PROCESSOR] = "processor",
	[PX_K_MAX_AIO] = "max_aio",     [PX_K_OPS] = "ops",
	[PX_K_START] = "start",         [PX_K_SIGNAL] = "signal",
	[PX_K_FOLLOWERS] = "followers",
};

const char *const px__cfg_processor_names[3] = {
	[PX_PROCESSOR_SHARED] = "shared",
	[PX_PROCESSOR_DEDICATED] = "dedicated",
};

const char *const px__cfg_follower_names[2] = {
	[PX_FOLLOWERS_LIFO] = "lifo",
	[PX_FOLLOWERS_FIFO] = "fifo",
};

const char *const px__cfg_start_names[PX_CFG_N_START] = {
	"any", "any-interrupt", "leader"
};
const unsigned px__cfg_start_flags[PX_CFG_N_START] = {
	PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD,
	PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT,
	PX_PF_FLAGS_SET,
};

#define RES_STREAM (PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM))
#define RES_FILE (PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE))
#define RES_DGRAM (PX_OP_BIT(PX_OP_READ_DGRAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM))

const px_cfg_op_name px__cfg_op_names[PX_CFG_N_OPS] = {
	{ "all", PX_OPS_IO },
	{ "socket", RES_STREAM | RES_DGRAM | PX_OP_BIT(PX_OP_ACCEPT) |
			    PX_OP_BIT(PX_OP_CONNECT) },
	{ "stream", RES_STREAM },
	{ "file", RES_FILE },
	{ "dgram", RES_DGRAM },
	{ "read_stream", PX_OP_BIT(PX_OP_READ_STREAM) },
	{ "write_stream", PX_OP_BIT(PX_OP_WRITE_STREAM) },
	{ "read_file", PX_OP_BIT(PX_OP_READ_FILE) },
	{ "write_file", PX_OP_BIT(PX_OP_WRITE_FILE) },
	{ "read_dgram", PX_OP_BIT(PX_OP_READ_DGRAM) },
	{ "write_dgram", PX_OP_BIT(PX_OP_WRITE_DGRAM) },
	{ "accept", PX_OP_BIT(PX_OP_ACCEPT) },
	{ "connect", PX_OP_BIT(PX_OP_CONNECT) },
};

void px__cfg_join(char *buf, size_t len, const char *const *names, size_t n,
		  unsigned mask, const char *conj)
{
	size_t total = 0, seen = 0, pos = 0;

	if (!len)
		return;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++)
		if (names[i] && (i >= 32 || (mask & (1u << i))))
			total++;
	for (size_t i = 0; i < n && pos < len; i++) {
		if (!names[i] || (i < 32 && !(mask & (1u << i))))
			continue;
		bool last = seen && seen + 1 == total;
		int w = snprintf(buf + pos, len - pos, "%s%s%s%s",
				 seen == 0 ? "" : last ? " " : ", ",
				 last ? conj : "", last ? " " : "", names[i]);
		if (w < 0)
			break;
		pos += (size_t)w;
		seen++;
	}
}

void px__set_name(char *dst, size_t size, const char *src, size_t n)
{
	if (!size)
		return;
	if (n >= size)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ------------------------------------------------------------------ */
/* Classes                                                              */
/* ------------------------------------------------------------------ */

static bool res_eq(const char *name, const char *s, size_t n)
{
	return strlen(name) == n && !memcmp(name, s, n);
}

const px_provider_class *px__class_find(const char *name, size_t n)
{
	for (const px_provider_class *const *c = px__classes; *c; c++)
		if (res_eq((*c)->name, name, n))
			return *c;
	return NULL;
}

static bool res_not_built(const char *name, size_t n)
{
	for (const char *const *s = px__classes_not_built; *s; s++)
		if (res_eq(*s, name, n))
			return true;
	return false;
}

/* Up to 32 names gathered for px__cfg_join. */
struct res_names {
	const char *v[32];
	size_t n;
};

static void res_add(struct res_names *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], name))
			return;
	if (l->n < PX_CFG_N(l->v))
		l->v[l->n++] = name;
}

void px__class_names(char *buf, size_t len, const char *conj)
{
	struct res_names l = { .n = 0 };

	for (const px_provider_class *const *c = px__classes; *c; c++)
		res_add(&l, (*c)->name);
	px__cfg_join(buf, len, l.v, l.n, ~0u, conj);
}

static const px_wait_desc *res_wait(const px_provider_class *cls, const char *s,
				    size_t n)
{
	for (unsigned i = 0; i < cls->nwaits; i++)
		if (res_eq(cls->waits[i].name, s, n))
			return &cls->waits[i];
	return NULL;
}

bool px__cfg_class_has_wait(const px_provider_class *cls, const char *s,
			    size_t n)
{
	return res_wait(cls, s, n) != NULL;
}

const px_provider_class *px__cfg_wait_owner(const char *s, size_t n)
{
	for (const px_provider_class *const *c = px__classes; *c; c++)
		if (res_wait(*c, s, n))
			return *c;
	return NULL;
}

void px__cfg_all_waits(char *buf, size_t len)
{
	struct res_names l = { .n = 0 };

	for (const px_provider_class *const *c = px__classes; *c; c++)
		for (unsigned i = 0; i < (*c)->nwaits; i++)
			res_add(&l, (*c)->waits[i].name);
	px__cfg_join(buf, len, l.v, l.n, ~0u, "or");
}

void px__cfg_class_waits(const px_provider_class *cls, char *buf, size_t len)
{
	struct res_names l = { .n = 0 };

	for (unsigned i = 0; i < cls->nwaits; i++)
		res_add(&l, cls->waits[i].name);
	px__cfg_join(buf, len, l.v, l.n, ~0u, "or");
}

void px__cfg_intrs(unsigned mask, char *buf, size_t len)
{
	const char *names[PX_INTR_COUNT];

	for (int t = 0; t < PX_INTR_COUNT; t++)
		names[t] = px__intr_name(t);
	px__cfg_join(buf, len, names, PX_INTR_COUNT, mask, "or");
}

int px__cfg_class_key(const px_provider_class *cls, const char *key, size_t n)
{
	if (!cls) {
		for (const px_provider_class *const *c = px__classes; *c; c++)
			if (px__cfg_class_key(*c, key, n) >= 0)
				return 0;
		return -1;
	}
	for (unsigned i = 0; i < cls->nkeys; i++)
		if (res_eq(cls->keys[i].name, key, n))
			return (int)i;
	return -1;
}

void px__cfg_valid_keys(const px_provider_class *cls, char *buf, size_t len)
{
	struct res_names l = { .n = 0 };

	for (int k = 0; k < PX_K_COUNT; k++)
		res_add(&l, px__cfg_key_names[k]);
	for (const px_provider_class *const *c = px__classes; *c; c++) {
		if (cls && *c != cls)
			continue;
		for (unsigned i = 0; i < (*c)->nkeys; i++)
			res_add(&l, (*c)->keys[i].name);
	}
	px__cfg_join(buf, len, l.v, l.n, ~0u, "and");
}

/* ------------------------------------------------------------------ */
/* Presets                                                              */
/* ------------------------------------------------------------------ */

/* Find a preset by name, single or team, as a team description (a
 * single preset has no secondary). */
static bool res_preset(const char *s, size_t n, const px_provider_class **cls,
		       px_team_desc *out)
{
	for (const px_provider_class *const *c = px__classes; *c; c++) {
		for (unsigned i = 0; i < (*c)->npresets; i++) {
			const px_preset_desc *p = &(*c)->presets[i];
			if (res_eq(p->name, s, n)) {
				*cls = *c;
				memset(out, 0, sizeof(*out));
				out->name = p->name;
				out->wait = p->wait;
				out->processor = p->processor;
				return true;
			}
		}
		for (unsigned i = 0; i < (*c)->nteams; i++) {
			if (res_eq((*c)->teams[i].name, s, n)) {
				*cls = *c;
				*out = (*c)->teams[i];
				return true;
			}
		}
	}
	return false;
}

bool px__cfg_preset_exists(const char *s, size_t n)
{
	const px_provider_class *cls;
	px_team_desc t;

	return res_eq("auto", s, n) || res_preset(s, n, &cls, &t);
}

int px__cfg_preset_fill(px_config *cfg, const char *s, size_t n)
{
	const px_provider_class *cls = NULL;
	px_team_desc t;
	bool found = false;

	if (!res_eq("auto", s, n) && !(found = res_preset(s, n, &cls, &t)))
		return -ENOENT;
	memset(cfg, 0, sizeof(*cfg));
	cfg->followers = PX_FOLLOWERS_LIFO;
	cfg->primary.processor = PX_PROCESSOR_SHARED;
	if (!found)
		return 0;   /* auto: no provider, decided at creation */
	cfg->primary.processor = t.processor;
	px__set_name(cfg->primary.provider, PX_NAME_MAX, cls->name,
		     strlen(cls->name));
	if (t.wait)
		px__set_name(cfg->primary.wait, PX_NAME_MAX, t.wait,
			     strlen(t.wait));
	cfg->primary.ops = t.ops;
	if (t.sec_provider) {
		px_processor_config *sc = &cfg->secondary;
		sc->processor = t.sec_processor ? t.sec_processor
						: PX_PROCESSOR_SHARED;
		px__set_name(sc->provider, PX_NAME_MAX, t.sec_provider,
			     strlen(t.sec_provider));
		if (t.sec_wait)
			px__set_name(sc->wait, PX_NAME_MAX, t.sec_wait,
				     strlen(t.sec_wait));
		sc->ops = t.sec_ops;
	}
	return 0;
}

void px__cfg_preset_names(char *buf, size_t len)
{
	struct res_names l = { .n = 0 };

	res_add(&l, "auto");
	for (const px_provider_class *const *c = px__classes; *c; c++)
	{
		for (unsigned i = 0; i < (*c)->npresets; i++)
			res_add(&l, (*c)->presets[i].name);
		for (unsigned i = 0; i < (*c)->nteams; i++)
			res_add(&l, (*c)->teams[i].name);
	}
	px__cfg_join(buf, len, l.v, l.n, ~0u, "or");
}

int px__config_preset(px_config *cfg, const char *name)
{
	if (!cfg || !name)
		return -ENOENT;
	return px__cfg_preset_fill(cfg, name, strlen(name));
}

/* ------------------------------------------------------------------ */
/* Signals                                                              */
/* ------------------------------------------------------------------ */

/* 1..NSIG-1 except SIGKILL, SIGSTOP and the ones glibc keeps for itself
 * (32 up to SIGRTMIN). */
bool px__cfg_signo_usable(long s)
{
	if (s < 1 || s >= NSIG || s == SIGKILL || s == SIGSTOP)
		return false;
	return !(s >= 32 && s < SIGRTMIN);
}

void px__cfg_signo_error(char *err, size_t errlen, const char *where, long s)
{
	if (SIGRTMIN > 32)
		px__set_err(err, errlen,
			   "%ssignal=%ld is not usable: choose 1 to %d except "
			   "%d (SIGKILL), %d (SIGSTOP) and 32 to %d (kept by the "
			   "C library)",
			   where, s, NSIG - 1, SIGKILL, SIGSTOP, SIGRTMIN - 1);
	else
		px__set_err(err, errlen,
			   "%ssignal=%ld is not usable: choose 1 to %d except "
			   "%d (SIGKILL) and %d (SIGSTOP)",
			   where, s, NSIG - 1, SIGKILL, SIGSTOP);
}

/* ------------------------------------------------------------------ */
/* Provider words                                                       */
/* ------------------------------------------------------------------ */

static bool res_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

/* The next word of the list at *p (words are separated by white space):
 * its first byte, its length in *n, and *p moved past it; NULL at the
 * end of the list. */
static const char *res_word(const char **p, size_t *n)
{
	const char *s = *p, *w;

	while (res_space(*s))
		s++;
	*p = s;
	if (!*s)
		return NULL;
	w = s;
	while (*s && !res_space(*s))
		s++;
	*n = (size_t)(s - w);
	*p = s;
	return w;
}

/* The length of the key of the n-byte word w: up to its '=', or all. */
static size_t res_key_len(const char *w, size_t n)
{
	const char *eq = memchr(w, '=', n);

	return eq ? (size_t)(eq - w) : n;
}

/* Run words through cls's hooks into settings.  With err NULL, just say
 * whether they are acceptable. */
static int res_words(const px_provider_class *cls, const char *words,
		     void *settings, const char *where, char *err, size_t errlen)
{
	unsigned seen = 0;
	const char *p = words;

	if (cls->settings_init)
		cls->settings_init(settings);
	for (;;) {
		size_t n;
		const char *w = res_word(&p, &n);
		if (!w)
			return 0;
		const char *eq = memchr(w, '=', n);
		if (!eq) {
			px__set_err(err, errlen,
				   "%sprovider words \"%.*s\": expected key=value",
				   where, (int)n, w);
			return -EINVAL;
		}
		size_t kn = (size_t)(eq - w);
		int k = px__cfg_class_key(cls, w, kn);
		if (k < 0) {
			char keys[200] = "";
			struct res_names l = { .n = 0 };
			for (unsigned i = 0; i < cls->nkeys; i++)
				res_add(&l, cls->keys[i].name);
			px__cfg_join(keys, sizeof(keys), l.v, l.n, ~0u, "and");
			if (cls->nkeys)
				px__set_err(err, errlen,
					   "%s%.*s is not a key of provider=%s "
					   "(its own keys are %s)",
					   where, (int)kn, w, cls->name, keys);
			else
				px__set_err(err, errlen,
					   "%s%.*s is not a key of provider=%s "
					   "(it has no keys of its own)",
					   where, (int)kn, w, cls->name);
			return -EINVAL;
		}
		if (seen & (1u << k)) {
			px__set_err(err, errlen, "%s%s is given twice", where,
				   cls->keys[k].name);
			return -EINVAL;
		}
		seen |= 1u << k;
		/* Room for a whole word (PX_WORDS_MAX) and the key's
		 * choices: a 200-byte buffer cut read_gate's after a long
		 * value. */
		char msg[PX_WORDS_MAX + 352] = "";
		int rc = cls->parse_key(settings, (unsigned)k, eq + 1,
					n - kn - 1, msg, sizeof(msg));
		if (rc < 0) {
			px__set_err(err, errlen, "%s%s", where, msg);
			return rc;
		}
	}
}

/* ------------------------------------------------------------------ */
/* Resolution                                                           */
/* ------------------------------------------------------------------ */

static int res_generic(px_processor_config *pc, const char *where, char *err,
		       size_t errlen)
{
	if (pc->flags & ~(PX_PF_FLAGS_SET | PX_PF_START_ANY_THREAD |
			  PX_PF_START_INTERRUPT)) {
		px__set_err(err, errlen,
			   "%sunknown processor flags 0x%x: use start=any, "
			   "any-interrupt or leader",
			   where, pc->flags);
		return -EINVAL;
	}
	if (!(pc->flags & PX_PF_FLAGS_SET))
		pc->flags = 0;
	else if ((pc->flags & PX_PF_START_INTERRUPT) &&
		 !(pc->flags & PX_PF_START_ANY_THREAD)) {
		px__set_err(err, errlen,
			   "%sinterrupting the leader on start needs starts from "
			   "any thread: choose start=any, any-interrupt or leader",
			   where);
		return -EINVAL;
	}
	if (pc->ops & ~(uint32_t)PX_OPS_IO) {
		px__set_err(err, errlen,
			   "%sops mask 0x%x names operations that are not I/O: "
			   "choose from %s",
			   where, (unsigned)pc->ops, PX_CFG_OPS_CHOICES);
		return -EINVAL;
	}
	if (pc->intr_signo && !px__cfg_signo_usable(pc->intr_signo)) {
		px__cfg_signo_error(err, errlen, where, pc->intr_signo);
		return -EINVAL;
	}
	return 0;
}

/* signal= goes with interrupt=signal only. */
static int res_signo(const px_processor_config *pc, const char *where,
		     char *err, size_t errlen)
{
	if (!pc->intr_signo || !strcmp(pc->interrupt, "signal"))
		return 0;
	if (pc->interrupt[0])
		px__set_err(err, errlen,
			   "%ssignal=%d only applies to interrupt=signal "
			   "(this processor has interrupt=%s)",
			   where, pc->intr_signo, pc->interrupt);
	else
		px__set_err(err, errlen,
			   "%ssignal=%d only applies to interrupt=signal",
			   where, pc->intr_signo);
	return -EINVAL;
}

/* Words with runs of white space folded to one space, none at the ends. */
static void res_fold(char *s)
{
	char *d = s;
	const char *p = s;

	while (*p) {
		while (res_space(*p))
			p++;
		if (!*p)
			break;
		if (d != s)
			*d++ = ' ';
		while (*p && !res_space(*p))
			*d++ = *p++;
	}
	*d = '\0';
}

/* Would auto's class cls take pc's words: its parse hook takes them and
 * its validate hook the processor they would be on (its default wait,
 * pc's processor)?  Words that cls's validate refuses (rings=2 with
 * processor=dedicated, say) leave cls out, as words it does not know do. */
static int res_auto_takes(const px_provider_class *cls,
			  const px_processor_config *pc, void *settings,
			  const char *where, char *err, size_t errlen)
{
	int rc = res_words(cls, pc->words, settings, where, err, errlen);

	if (rc < 0 || !cls->validate)
		return rc;
	px_processor_config c = *pc;
	char msg[PX_WORDS_MAX + 352] = "";
	px__set_name(c.provider, PX_NAME_MAX, cls->name, strlen(cls->name));
	px__set_name(c.wait, PX_NAME_MAX, cls->waits[0].name,
		     strlen(cls->waits[0].name));
	rc = cls->validate(settings, &c, msg, sizeof(msg));
	if (rc < 0)
		px__set_err(err, errlen, "%s%s", where, msg);
	return rc;
}

unsigned px__auto_candidates(const px_processor_config *pc,
			     const px_provider_class **out, unsigned max)
{
	unsigned n = 0;
	int intr = pc->interrupt[0] ? px__intr_type(pc->interrupt) : 0;
	uint32_t ops = pc->ops ? pc->ops : PX_OPS_IO;

	if (intr < 0)
		return 0;
	for (const px_provider_class *const *c = px__classes; *c; c++) {
		const px_provider_class *cls = *c;
		_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
		if (!cls->auto_rank || !cls->nwaits)
			continue;
		if (cls->auto_ops && !(cls->auto_ops & ops))
			continue;
		if (intr && !(cls->waits[0].intrs & (1u << intr)))
			continue;
		if (res_auto_takes(cls, pc, settings, "", NULL, 0) < 0)
			continue;
		/* Insert by rank. */
		unsigned i = n < max ? n : max;
		while (i > 0 && out[i - 1]->auto_rank > cls->auto_rank) {
			if (i < max)
				out[i] = out[i - 1];
			i--;
		}
		if (i < max) {
			out[i] = cls;
			if (n < max)
				n++;
		}
	}
	return n;
}

/* Are all the keys of words keys of cls? */
static bool res_keys_known(const px_provider_class *cls, const char *words)
{
	const char *w;
	size_t n;

	for (const char *p = words; (w = res_word(&p, &n));)
		if (px__cfg_class_key(cls, w, res_key_len(w, n)) < 0)
			return false;
	return true;
}

/* Does the word list s hold a word whose key is the n bytes at key? */
static bool res_has_key(const char *s, const char *key, size_t n)
{
	const char *w;
	size_t wn;

	for (const char *p = s; (w = res_word(&p, &wn));)
		if (res_key_len(w, wn) == n && !memcmp(w, key, n))
			return true;
	return false;
}

/* An auto processor's words in the canonical form of the engine auto
 * tries first, cls, whose hooks took them into settings.  A word that
 * form leaves out (a value at its default: ring=0, depth=0) is kept as
 * given, after the others: the key alone is what narrows auto to the
 * classes that have it, and without it "auto ring=0" would be plain
 * auto, Linux AIO where io_uring is refused. */
static void res_auto_words(const px_provider_class *cls, const void *settings,
			   char *words)
{
	char canon[PX_WORDS_MAX];
	int len = cls->format(settings, canon, sizeof(canon));
	size_t pos;

	if (len < 0 || (size_t)len >= sizeof(canon))
		return;  /* keep the words as given */
	pos = (size_t)len;
	const char *w;
	size_t n;
	for (const char *p = words; (w = res_word(&p, &n));) {
		size_t kn = res_key_len(w, n);
		if (kn == n || res_has_key(canon, w, kn))
			continue;
		if (pos + (pos ? 1 : 0) + n >= sizeof(canon))
			return;  /* keep the words as given */
		if (pos)
			canon[pos++] = ' ';
		memcpy(canon + pos, w, n);
		pos += n;
		canon[pos] = '\0';
	}
	memcpy(words, canon, pos + 1);
}

static int res_auto(px_processor_config *pc, const char *where, char *err,
		    size_t errlen)
{
	const px_provider_class *cand[1];
	char list[300];
	size_t pos = 0;

	if (pc->interrupt[0] && px__intr_type(pc->interrupt) < 0) {
		px__cfg_intrs(~0u, list, sizeof(list));
		px__set_err(err, errlen, "%sunknown interrupt \"%s\": choose %s",
			   where, pc->interrupt, list);
		return -EINVAL;
	}
	int rc = res_signo(pc, where, err, errlen);
	if (rc < 0)
		return rc;
	if (px__auto_candidates(pc, cand, 1)) {
		/* Words in the canonical form of the engine auto tries
		 * first. */
		_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
		if (pc->words[0] && cand[0]->format &&
		    res_words(cand[0], pc->words, settings, "", NULL, 0) == 0)
			res_auto_words(cand[0], settings, pc->words);
		return 0;
	}
	/* Why not: a word whose class refuses its value says so itself. */
	for (const px_provider_class *const *c = px__classes; *c; c++) {
		_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
		if (!(*c)->auto_rank || !pc->words[0] ||
		    !res_keys_known(*c, pc->words))
			continue;
		rc = res_auto_takes(*c, pc, settings, where, err, errlen);
		if (rc < 0)
			return rc;
	}
	/* Otherwise list what auto chooses from. */
	list[0] = '\0';
	for (const px_provider_class *const *c = px__classes; *c; c++) {
		char intrs[100];
		if (!(*c)->auto_rank || !(*c)->nwaits || pos >= sizeof(list))
			continue;
		px__cfg_intrs((*c)->waits[0].intrs, intrs, sizeof(intrs));
		int w = snprintf(list + pos, sizeof(list) - pos,
				 "%sprovider=%s (interrupt %s)", pos ? ", " : "",
				 (*c)->name, intrs);
		if (w > 0)
			pos += (size_t)w;
	}
	px__set_err(err, errlen,
		   "%sno engine that auto may choose takes %s%s%s%s: it chooses "
		   "among %s; name a provider",
		   where, pc->interrupt[0] ? "interrupt=" : "", pc->interrupt,
		   pc->interrupt[0] && pc->words[0] ? " with " : "", pc->words,
		   list);
	return -EINVAL;
}

int px__resolve_processor(px_processor_config *pc, const char *where,
			  char *err, size_t errlen)
{
	char list[200];
	const px_provider_class *cls;
	int rc;

	if (pc->processor == PX_PROCESSOR_NONE)
		pc->processor = PX_PROCESSOR_SHARED;
	if ((unsigned)pc->processor > PX_PROCESSOR_DEDICATED) {
		px__set_err(err, errlen,
			   "%sunknown processor %d: choose shared or dedicated",
			   where, (int)pc->processor);
		return -EINVAL;
	}
	if (!px_cfg_terminated(pc->provider, PX_NAME_MAX) ||
	    !px_cfg_terminated(pc->wait, PX_NAME_MAX) ||
	    !px_cfg_terminated(pc->interrupt, PX_NAME_MAX) ||
	    !px_cfg_terminated(pc->words, PX_WORDS_MAX)) {
		px__set_err(err, errlen,
			   "%sa provider, wait, interrupt or words field is not "
			   "NUL-terminated",
			   where);
		return -EINVAL;
	}
	res_fold(pc->words);
	rc = res_generic(pc, where, err, errlen);
	if (rc < 0)
		return rc;

	/* Provider, possibly implied by the wait, or auto. */
	if (!pc->provider[0] && pc->wait[0]) {
		cls = px__cfg_wait_owner(pc->wait, strlen(pc->wait));
		if (!cls) {
			px__cfg_all_waits(list, sizeof(list));
			px__set_err(err, errlen, "%sunknown wait \"%s\": choose %s",
				   where, pc->wait, list);
			return -EINVAL;
		}
		px__set_name(pc->provider, PX_NAME_MAX, cls->name,
			     strlen(cls->name));
	}
	if (!pc->provider[0])
		return res_auto(pc, where, err, errlen);
	cls = px__class_find(pc->provider, strlen(pc->provider));
	if (!cls) {
		px__class_names(list, sizeof(list), "and");
		if (res_not_built(pc->provider, strlen(pc->provider))) {
			px__set_err(err, errlen,
				   "%sprovider=%s is not built into this library "
				   "(built in: %s)",
				   where, pc->provider, list);
			return -ENOSYS;
		}
		px__class_names(list, sizeof(list), "or");
		px__set_err(err, errlen, "%sunknown provider \"%s\": choose %s",
			   where, pc->provider, list);
		return -EINVAL;
	}

	/* Wait. */
	const px_wait_desc *wd = cls->waits;
	if (pc->wait[0] && !(wd = res_wait(cls, pc->wait, strlen(pc->wait)))) {
		px__cfg_class_waits(cls, list, sizeof(list));
		px__set_err(err, errlen,
			   "%sinvalid combination provider=%s wait=%s: provider=%s "
			   "takes wait %s",
			   where, cls->name, pc->wait, cls->name, list);
		return -EINVAL;
	}
	px__set_name(pc->wait, PX_NAME_MAX, wd->name, strlen(wd->name));

	/* Interrupt. */
	int intr = wd->default_intr;
	if (pc->interrupt[0]) {
		intr = px__intr_type(pc->interrupt);
		px__cfg_intrs(wd->intrs, list, sizeof(list));
		if (intr < 0) {
			px__set_err(err, errlen,
				   "%sunknown interrupt \"%s\" for wait=%s: choose %s",
				   where, pc->interrupt, wd->name, list);
			return -EINVAL;
		}
		if (!(wd->intrs & (1u << intr))) {
			px__set_err(err, errlen,
				   "%sinvalid combination provider=%s wait=%s "
				   "interrupt=%s: wait=%s takes interrupt %s",
				   where, cls->name, wd->name, pc->interrupt,
				   wd->name, list);
			return -EINVAL;
		}
	}
	const char *iname = px__intr_name(intr);
	px__set_name(pc->interrupt, PX_NAME_MAX, iname, strlen(iname));
	rc = res_signo(pc, where, err, errlen);
	if (rc < 0)
		return rc;

	/* The provider's own words, back in canonical form. */
	_Alignas(16) unsigned char settings[PX_SETTINGS_MAX];
	rc = res_words(cls, pc->words, settings, where, err, errlen);
	if (rc < 0)
		return rc;
	if (cls->validate) {
		char msg[PX_WORDS_MAX + 352] = "";
		rc = cls->validate(settings, pc, msg, sizeof(msg));
		if (rc < 0) {
			px__set_err(err, errlen, "%s%s", where, msg);
			return rc;
		}
	}
	pc->words[0] = '\0';
	if (cls->format && cls->format(settings, pc->words, PX_WORDS_MAX) >=
				   (int)PX_WORDS_MAX) {
		px__set_err(err, errlen, "%sprovider=%s words too long", where,
			   cls->name);
		return -EINVAL;
	}
	return 0;
}

int px__spec_of(const px_processor_config *pc, px_proc_spec *spec,
		const char *where, char *err, size_t errlen)
{
	px_processor_config c = *pc;
	int rc = px__resolve_processor(&c, where, err, errlen);

	if (rc < 0)
		return rc;
	if (!c.provider[0]) {
		px__set_err(err, errlen, "%sno provider chosen", where);
		return -EINVAL;
	}
	memset(spec, 0, sizeof(*spec));
	spec->cls = px__class_find(c.provider, strlen(c.provider));
	spec->wait = res_wait(spec->cls, c.wait, strlen(c.wait));
	spec->intr = px__intr_type(c.interrupt);
	if (spec->cls->settings_size > PX_SETTINGS_MAX)
		return -EINVAL;
	return res_words(spec->cls, c.words, spec->settings, where, err, errlen);
}

int px__config_resolve(px_config *cfg, char *err, size_t errlen)
{
	int rc;

	if (!cfg) {
		px__set_err(err, errlen, "no config");
		return -EINVAL;
	}
	if (cfg->flags & ~PX_CF_NO_ENV) {
		px__set_err(err, errlen, "unknown config flags 0x%x", cfg->flags);
		return -EINVAL;
	}
	if ((unsigned)cfg->followers > PX_FOLLOWERS_FIFO) {
		px__set_err(err, errlen, "unknown followers %d: choose lifo or fifo",
			   (int)cfg->followers);
		return -EINVAL;
	}
	rc = px__resolve_processor(&cfg->primary, "", err, errlen);
	if (rc < 0)
		return rc;
	/* As proactor.h says: processor NONE means no secondary, whatever
	 * its other fields hold (cleared, for a canonical form). */
	if (cfg->secondary.processor == PX_PROCESSOR_NONE) {
		memset(&cfg->secondary, 0, sizeof(cfg->secondary));
		return 0;
	}
	if (!cfg->secondary.provider[0] && !cfg->secondary.wait[0]) {
		char list[160];
		px__class_names(list, sizeof(list), "or");
		px__set_err(err, errlen,
			   "secondary: no provider given: choose %s (auto is "
			   "for the primary only)",
			   list);
		return -EINVAL;
	}
	return px__resolve_processor(&cfg->secondary, "secondary: ", err, errlen);
}
