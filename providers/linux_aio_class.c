/*
 * linux_aio_class.c - what the library knows of the Linux native AIO
 * provider (providers/linux_aio.c): two waits (io_getevents on the context,
 * or epoll over the context's eventfd), two presets, and one key of its
 * own, depth=, the number of iocbs the context holds at once.
 * Included by providers/classes.c, never compiled alone; it needs no
 * libaio (the probe makes the system calls itself), so the engine list can
 * be printed at configure time.
 */
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/aio_abi.h>

#include "class_keys.h"
#include "linux_aio_class.h"

#ifndef PX_CLASS_LIST_ONLY
extern const px_provider_ops px__provider_laio_ops PX_HIDDEN;
#endif

static const px_wait_desc laioc_waits[] = {
	{ "io_getevents", "io_getevents on the AIO context; woken by a poll "
	  "iocb on an eventfd (native) or a signal",
	  (1u << PX_INTR_NATIVE) | (1u << PX_INTR_SIGNAL), PX_INTR_NATIVE },
	{ "epoll", "epoll over the eventfd every iocb signals (io_set_eventfd)",
	  (1u << PX_INTR_PIPE) | (1u << PX_INTR_EVENTFD) | (1u << PX_INTR_SIGNAL),
	  PX_INTR_EVENTFD },
};

static const px_preset_desc laioc_presets[] = {
	{ "linux-aio", NULL, PX_PROCESSOR_SHARED },
	{ "linux-aio-dedicated", NULL, PX_PROCESSOR_DEDICATED },
};

/* Kernel AIO for the files, the readiness provider on epoll for the rest:
 * a socket costs one poll iocb and then its call here, where epoll, its
 * registration kept, costs the call alone.  It is also what auto builds
 * when it chooses this class (io_uring missing or refused): on the socket
 * 14 rows of the benchmark grid Linux AIO alone ran 0.85-1.00 of the
 * epoll engine's throughput and the team 0.96-1.03 (docs/PERFORMANCE.md). */
#define LAIOC_FILE (PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE))
static const px_team_desc laioc_teams[] = {
	{ .name = "linux-aio+epoll", .processor = PX_PROCESSOR_SHARED,
	  .ops = LAIOC_FILE, .sec_provider = "select", .sec_wait = "epoll",
	  .sec_processor = PX_PROCESSOR_SHARED,
	  .sec_ops = PX_OPS_IO & ~LAIOC_FILE },
};

static const px_key_desc laioc_keys[] = {
	{ "depth", "a number of iocbs from 1 to 1048576 (0: 1024)" },
};

static void laioc_init(void *s)
{
	memset(s, 0, sizeof(px_laio_settings));
}

static int laioc_parse(void *settings, unsigned key, const char *val,
		       size_t vlen, char *err, size_t errlen)
{
	px_laio_settings *s = settings;
	unsigned long n;

	(void)key;  /* depth is the only key */
	if (!px_class_number(val, vlen, PX_LAIO_DEPTH_MAX, &n))
		return px_class_bad_value(&laioc_keys[0], val, vlen, err, errlen);
	s->depth = (unsigned)n;
	return 0;
}

static int laioc_format(const void *settings, char *buf, size_t len)
{
	const px_laio_settings *s = settings;

	if (!s->depth) {
		if (len)
			buf[0] = '\0';
		return 0;
	}
	return snprintf(buf, len, "depth=%u", s->depth);
}

/* A number from a /proc/sys file, or -1. */
static long laioc_sysctl(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* The message for io_setup's EAGAIN: which sysctl is used up. */
static void laioc_limit(char *why, size_t len)
{
	long nr = laioc_sysctl("/proc/sys/fs/aio-nr");
	long max = laioc_sysctl("/proc/sys/fs/aio-max-nr");

	if (why && len)
		snprintf(why, len, "io_setup: the system-wide limit of AIO "
			 "events is used up (fs.aio-nr %ld of fs.aio-max-nr %ld); "
			 "raise the sysctl fs.aio-max-nr or ask for a smaller "
			 "depth=", nr, max);
}

static bool laioc_explain(int rc, char *why, size_t len)
{
	if (rc != -EAGAIN)
		return false;
	laioc_limit(why, len);
	return true;
}

/*
 * Set up a two-event context and destroy it again: refused by a kernel
 * built without AIO (ENOSYS), a seccomp filter (EPERM or ENOSYS), or a
 * system whose fs.aio-max-nr is used up (EAGAIN; auto moves on).  The sockets need IOCB_CMD_POLL (4.18): a poll
 * for POLLOUT on an eventfd completes at once where the command exists,
 * and io_submit refuses it with EINVAL where it does not.
 */
static int laioc_probe(char *why, size_t len)
{
	aio_context_t ctx = 0;
	struct iocb cb, *cbs[1] = { &cb };
	long rc;
	int efd;

	if (syscall(__NR_io_setup, 2, &ctx) < 0) {
		int e = errno;

		if (e == EAGAIN) {
			laioc_limit(why, len);
			return -EAGAIN;
		}
		if (why && len)
			snprintf(why, len, "io_setup: %s", strerror(e));
		return e == EPERM ? -EPERM : e == ENOMEM ? -ENOMEM : -ENOSYS;
	}
	efd = eventfd(0, EFD_CLOEXEC);
	if (efd < 0) {
		rc = -errno;
		syscall(__NR_io_destroy, ctx);
		if (why && len)
			snprintf(why, len, "eventfd: %s", strerror((int)-rc));
		return rc == -ENOMEM || rc == -EMFILE ? -ENOMEM : -ENOSYS;
	}
	memset(&cb, 0, sizeof(cb));
	cb.aio_lio_opcode = IOCB_CMD_POLL;
	cb.aio_fildes = (uint32_t)efd;
	cb.aio_buf = POLLOUT;
	rc = syscall(__NR_io_submit, ctx, 1, cbs);
	syscall(__NR_io_destroy, ctx);  /* reaps the poll's event with it */
	close(efd);
	if (rc < 0 && errno == EINVAL) {
		if (why && len)
			snprintf(why, len, "this kernel's AIO has no IOCB_CMD_POLL "
				 "(Linux 4.18), needed for sockets");
		return -ENOSYS;
	}
	return 0;
}

static const px_provider_class px_laio_class = {
	.name = "linux_aio",
	.summary = "Linux native AIO through libaio: files natively, "
		   "sockets by IOCB_CMD_POLL then the call",
	.native_ops = PX_OPS_IO,
	.vectored_ops = PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |
			PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE),
	.waits = laioc_waits,
	.nwaits = sizeof(laioc_waits) / sizeof(laioc_waits[0]),
	.presets = laioc_presets,
	.npresets = sizeof(laioc_presets) / sizeof(laioc_presets[0]),
	.teams = laioc_teams,
	.nteams = sizeof(laioc_teams) / sizeof(laioc_teams[0]),
	.keys = laioc_keys,
	.nkeys = sizeof(laioc_keys) / sizeof(laioc_keys[0]),
	.settings_size = sizeof(px_laio_settings),
	.settings_init = laioc_init,
	.parse_key = laioc_parse,
	.format = laioc_format,
	.probe = laioc_probe,
	.explain = laioc_explain,
	/* After io_uring (10), before the readiness provider (20), for a
	 * processor that does files: those are what kernel AIO does
	 * asynchronously (with O_DIRECT), where readiness can only block.
	 * For sockets alone, a poll iocb and then the call costs more than
	 * epoll, so "auto ops=socket" goes on to epoll. */
	.auto_rank = 15,
	.auto_ops = PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE),
	.auto_team = &laioc_teams[0],
#ifndef PX_CLASS_LIST_ONLY
	.ops = &px__provider_laio_ops,
#endif
};
