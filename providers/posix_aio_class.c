/*
 * posix_aio_class.c - what the library knows of the POSIX AIO provider
 * (providers/posix_aio.c): three waits, each with its own native
 * interrupt, three presets (one of them a team with the readiness
 * provider), and keys of its own: rtsig=, aio_threads=, sockets= and
 * file_lanes=.  Included
 * by providers/classes.c, never compiled alone; it needs nothing of the
 * provider's code, so the engine list can be printed at configure time.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "class_keys.h"
#include "posix_aio_class.h"

#ifndef PX_CLASS_LIST_ONLY
extern const px_provider_ops px__provider_posix_ops PX_HIDDEN;
#endif

static const px_wait_desc posixc_waits[] = {
	{ "aiocb", "aio_suspend over the leader's own list of requests",
	  1u << PX_INTR_NATIVE, PX_INTR_NATIVE },
	{ "sigwait", "a real-time signal per request, taken with sigtimedwait",
	  1u << PX_INTR_NATIVE, PX_INTR_NATIVE },
	{ "callback", "SIGEV_THREAD hands each request over through an eventfd",
	  1u << PX_INTR_NATIVE, PX_INTR_NATIVE },
};

#define POSIXC_FILE (PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE))

/* posix-aio+epoll: files here, everything else on the readiness provider
 * over epoll (accept, connect and datagrams are not POSIX AIO operations,
 * and a socket read cannot be cancelled once a glibc helper performs it). */
static const px_preset_desc posixc_presets[] = {
	{ "posix-aio", NULL, PX_PROCESSOR_SHARED },
	{ "posix-aio-dedicated", NULL, PX_PROCESSOR_DEDICATED },
};

static const px_team_desc posixc_teams[] = {
	{ .name = "posix-aio+epoll", .processor = PX_PROCESSOR_SHARED,
	  .ops = POSIXC_FILE, .sec_provider = "select", .sec_wait = "epoll",
	  .sec_processor = PX_PROCESSOR_SHARED,
	  .sec_ops = PX_OPS_IO & ~POSIXC_FILE },
};

enum { POSIXC_RTSIG, POSIXC_THREADS, POSIXC_SOCKETS, POSIXC_LANES };

static const px_key_desc posixc_keys[] = {
	[POSIXC_RTSIG] = { "rtsig", "a real-time signal number, SIGRTMIN to "
				    "SIGRTMAX but SIGRTMIN+3 (the linux_rt "
				    "wait's), for wait=sigwait" },
	[POSIXC_THREADS] = { "aio_threads", "a number of glibc helper threads "
					    "from 1 to 4096" },
	[POSIXC_SOCKETS] = { "sockets", "refuse (default) or aio" },
	[POSIXC_LANES] = { "file_lanes", "a number of descriptors per file "
					  "from 1 to 16" },
};

static void posixc_init(void *s)
{
	memset(s, 0, sizeof(px_posix_settings));
}

static int posixc_bad(char *err, size_t errlen, unsigned key, const char *val,
		      size_t vlen)
{
	return px_class_bad_value(&posixc_keys[key], val, vlen, err, errlen);
}

static int posixc_parse(void *settings, unsigned key, const char *val,
			size_t vlen, char *err, size_t errlen)
{
	px_posix_settings *s = settings;
	unsigned long n = 0;

	if (key == POSIXC_SOCKETS) {
		if (vlen == 3 && !memcmp(val, "aio", 3))
			s->sockets = true;
		else if (vlen == 6 && !memcmp(val, "refuse", 6))
			s->sockets = false;
		else
			return posixc_bad(err, errlen, key, val, vlen);
		return 0;
	}
	/* The largest bound of the three numbers; each has its own below. */
	if (!px_class_number(val, vlen, PX_POSIX_THREADS_MAX, &n))
		return posixc_bad(err, errlen, key, val, vlen);
	if (key == POSIXC_RTSIG) {
		/* SIGRTMIN+3 is the readiness provider's linux_rt wait's,
		 * which takes it with sigtimedwait without the sigwait
		 * wait's table knowing: a proactor of each would share it,
		 * and the linux_rt thread took POSIX AIO's completions. */
		if ((long)n < SIGRTMIN || (long)n > SIGRTMAX ||
		    (long)n == SIGRTMIN + 3)
			return posixc_bad(err, errlen, key, val, vlen);
		s->rtsig = (int)n;
	} else if (key == POSIXC_LANES) {
		if (!n || n > PX_POSIX_LANES_MAX)
			return posixc_bad(err, errlen, key, val, vlen);
		s->lanes = (unsigned)n;
	} else {
		if (!n)
			return posixc_bad(err, errlen, key, val, vlen);
		s->threads = (unsigned)n;
	}
	return 0;
}

/* rtsig= names the signal of wait=sigwait; the other waits take no
 * signal, and one given to them would be silently ignored. */
static int posixc_validate(const void *settings, const px_processor_config *pc,
			   char *err, size_t errlen)
{
	const px_posix_settings *s = settings;

	if (!s->rtsig || !strcmp(pc->wait, "sigwait"))
		return 0;
	if (err && errlen)
		snprintf(err, errlen,
			 "rtsig=%d is for wait=sigwait; wait=%s takes no signal",
			 s->rtsig, pc->wait);
	return -EINVAL;
}

static int posixc_format(const void *settings, char *buf, size_t len)
{
	const px_posix_settings *s = settings;
	size_t pos = 0;

	if (len)
		buf[0] = '\0';
	if (s->rtsig)
		px_class_put(buf, len, &pos, "rtsig=%d", s->rtsig);
	if (s->threads)
		px_class_put(buf, len, &pos, "%saio_threads=%u", pos ? " " : "",
			     s->threads);
	if (s->sockets)
		px_class_put(buf, len, &pos, "%ssockets=aio", pos ? " " : "");
	if (s->lanes)
		px_class_put(buf, len, &pos, "%sfile_lanes=%u", pos ? " " : "",
			     s->lanes);
	return (int)pos;
}

static const px_provider_class px_posix_class = {
	.name = "posix",
	.summary = "POSIX AIO (glibc's helper threads): files and streams",
	.native_ops = PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |
		      POSIXC_FILE,
	/* aio_read and aio_write take one buffer: no vectored form (0). */
	.vectored_ops = 0,
	.waits = posixc_waits,
	.nwaits = sizeof(posixc_waits) / sizeof(posixc_waits[0]),
	.presets = posixc_presets,
	.npresets = sizeof(posixc_presets) / sizeof(posixc_presets[0]),
	.teams = posixc_teams,
	.nteams = sizeof(posixc_teams) / sizeof(posixc_teams[0]),
	.keys = posixc_keys,
	.nkeys = sizeof(posixc_keys) / sizeof(posixc_keys[0]),
	.settings_size = sizeof(px_posix_settings),
	.settings_init = posixc_init,
	.parse_key = posixc_parse,
	.validate = posixc_validate,
	.format = posixc_format,
	.probe = NULL,
	.auto_rank = 0,   /* never chosen by auto: sockets are its weak side */
#ifndef PX_CLASS_LIST_ONLY
	.ops = &px__provider_posix_ops,
#endif
};
