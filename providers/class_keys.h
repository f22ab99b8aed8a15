/*
 * class_keys.h - what the classes with keys of their own
 * (providers/NAME_class.c) share to parse and write those keys back:
 * the message for a refused value, a bounded decimal number, and the
 * appending of canonical words.  Like the class files, it needs nothing
 * of any provider's code (test/engines.c compiles the class list at
 * configure time).
 */
#ifndef PX_PROVIDERS_CLASS_KEYS_H
#define PX_PROVIDERS_CLASS_KEYS_H

#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

/* A value of key k that parse_key refuses: "KEY=VALUE: expected CHOICES"
 * into err (when there is room), and -EINVAL. */
static inline int px_class_bad_value(const px_key_desc *k, const char *val,
				     size_t vlen, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s=%.*s: expected %s", k->name,
			 (int)vlen, val, k->choices);
	return -EINVAL;
}

/* val (vlen bytes) as a decimal number of at most max, into *out: false
 * when it is empty, has anything but digits, or is larger.  max must
 * leave room for one more digit in an unsigned long. */
static inline bool px_class_number(const char *val, size_t vlen,
				   unsigned long max, unsigned long *out)
{
	unsigned long n = 0;

	if (!vlen)
		return false;
	for (size_t i = 0; i < vlen; i++) {
		if (val[i] < '0' || val[i] > '9')
			return false;
		n = n * 10 + (unsigned)(val[i] - '0');
		if (n > max)
			return false;
	}
	*out = n;
	return true;
}

/* format: append printf-style text at buf + *pos (buf holds len bytes).
 * *pos counts everything asked for, like snprintf's result, even past
 * len, where nothing more is written. */
static inline void px_class_put(char *buf, size_t len, size_t *pos,
				const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static inline void px_class_put(char *buf, size_t len, size_t *pos,
				const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*pos < len ? buf + *pos : NULL,
		      *pos < len ? len - *pos : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

#endif /* PX_PROVIDERS_CLASS_KEYS_H */
