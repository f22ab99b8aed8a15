/*
 * config.h - what the three parts of config/ share:
 *
 *   grammar.c  text to words, words to a px_config (px_config_parse)
 *   resolve.c  defaults and checks through the provider classes, presets,
 *              the "auto" candidates, and the spec a provider is built from
 *   format.c   a px_config back to its canonical text (px_config_format)
 *
 * Nothing in config/ names a provider: providers, their waits, presets and
 * own keys all come from the class list (providers/classes.c).
 */
#ifndef PX_CONFIG_CONFIG_H
#define PX_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define PX_CFG_N(a) (sizeof(a) / sizeof((a)[0]))

/* The keys every processor takes (and one global). */
enum px_cfg_key {
	PX_K_PROVIDER,
	PX_K_WAIT,
	PX_K_INTERRUPT,
	PX_K_PROCESSOR,
	PX_K_MAX_AIO,
	PX_K_OPS,
	PX_K_START,
	PX_K_SIGNAL,
	PX_K_FOLLOWERS,    /* global */
	PX_K_COUNT
};

extern const char *const px__cfg_key_names[PX_K_COUNT] PX_HIDDEN;
extern const char *const px__cfg_processor_names[3] PX_HIDDEN;
extern const char *const px__cfg_follower_names[2] PX_HIDDEN;

/* start= values and the processor flags each one stands for. */
#define PX_CFG_N_START 3
extern const char *const px__cfg_start_names[PX_CFG_N_START] PX_HIDDEN;
extern const unsigned px__cfg_start_flags[PX_CFG_N_START] PX_HIDDEN;

/* Operation names and groups, widest group first (the order the formatter
 * prefers). */
typedef struct px_cfg_op_name {
	const char *name;
	uint32_t mask;
} px_cfg_op_name;
#define PX_CFG_N_OPS 13
extern const px_cfg_op_name px__cfg_op_names[PX_CFG_N_OPS] PX_HIDDEN;
#define PX_CFG_OPS_CHOICES                                                     \
	"read_stream, write_stream, read_file, write_file, read_dgram, "       \
	"write_dgram, accept, connect, stream, file, dgram, socket or all"

/* Write "a, b or c" (conj "or"/"and") of the names whose bit is in mask
 * (every non-NULL one when mask is ~0u). */
void px__cfg_join(char *buf, size_t len, const char *const *names, size_t n,
		  unsigned mask, const char *conj) PX_HIDDEN;

/* The usable signal numbers for signal=, and the message for one that is
 * not. */
bool px__cfg_signo_usable(long s) PX_HIDDEN;
void px__cfg_signo_error(char *err, size_t errlen, const char *where,
			 long s) PX_HIDDEN;

/* Presets: does a preset of that name exist; fill cfg from it (-ENOENT
 * if none); list every preset name. */
bool px__cfg_preset_exists(const char *s, size_t n) PX_HIDDEN;
int px__cfg_preset_fill(px_config *cfg, const char *s, size_t n) PX_HIDDEN;
void px__cfg_preset_names(char *buf, size_t len) PX_HIDDEN;

/* The class that owns a wait of that name (the first in the class list),
 * or NULL; and every wait name of every class, for messages. */
const px_provider_class *px__cfg_wait_owner(const char *s, size_t n) PX_HIDDEN;
/* Whether class cls has the wait named by s (n bytes). */
bool px__cfg_class_has_wait(const px_provider_class *cls, const char *s,
			    size_t n) PX_HIDDEN;
void px__cfg_all_waits(char *buf, size_t len) PX_HIDDEN;
/* The waits of one class ("a, b or c"). */
void px__cfg_class_waits(const px_provider_class *cls, char *buf,
			 size_t len) PX_HIDDEN;
/* The interrupts in mask ("pipe, eventfd or signal"). */
void px__cfg_intrs(unsigned mask, char *buf, size_t len) PX_HIDDEN;

/* Is key (n bytes) one of cls's own keys?  Index or -1.  With cls NULL:
 * is it a key of any class (0) or none (-1). */
int px__cfg_class_key(const px_provider_class *cls, const char *key,
		      size_t n) PX_HIDDEN;
/* "valid keys are ..." for a section whose provider is cls (NULL: auto). */
void px__cfg_valid_keys(const px_provider_class *cls, char *buf,
			size_t len) PX_HIDDEN;

/* True when a NUL ends the n-byte field s. */
static inline bool px_cfg_terminated(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i])
			return true;
	return false;
}

#endif /* PX_CONFIG_CONFIG_H */
