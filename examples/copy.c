/*
 * copy.c - copy a file with many reads and writes in flight.
 *
 *     copy [-e CONFIG] [-d DEPTH] [-b BLOCK] [--direct] SRC DST
 *
 * DEPTH slots (default 16) each own an aligned buffer of BLOCK bytes
 * (default 1 MiB, a multiple of 4096).  A slot takes the next block of the
 * source, reads it with px_read_file, writes it at the same offset with
 * px_write_file, and takes the next block, so that up to DEPTH blocks are
 * moving at once in whatever order the engine completes them.  Short reads
 * and writes are resumed where they stopped.
 *
 * --direct opens both files with O_DIRECT (the page cache is bypassed);
 * a file system that refuses it (open fails with EINVAL) gets a message
 * and a buffered copy of that file.  Under O_DIRECT every transfer must be
 * a multiple of the alignment, so the last block is read and written
 * rounded up (the padding is zeros) and DST is then cut to SRC's size;
 * a device cannot be cut, so one is written through the page cache when
 * SRC's size is not a multiple of the alignment.
 *
 * DST must keep offsets (a regular file or a device): a pipe, a socket or
 * a terminal is refused, since the blocks are written in any order.  So
 * is SRC itself under any name (compared by device and inode once DST is
 * open).
 *
 * A progress line goes to stderr when stderr is a terminal; the rate in
 * MB/s (10^6 bytes per second) is printed at the end, on stdout (on
 * stderr when stdout is DST itself, as in "copy SRC /dev/stdout > FILE",
 * so that the report does not land in the copy).  Exit status 0 on
 * success, 1 on any error (DST is then incomplete), 2 for bad usage.
 * DST is opened only once SRC has been checked and the proactor and
 * buffers made, and cut to nothing only just before the first write, when
 * a first block has been read: an error before that (a mistyped -e, an
 * engine that cannot read files) leaves DST as it was.
 *
 * SIGINT or SIGTERM during the copy stops it cleanly: no block is taken
 * after it, the blocks in flight are read and written to the end, so that
 * DST holds exactly the first bytes of SRC up to where the copy stopped
 * (killed at once, it could be left with holes of zeros among blocks
 * written out of order, and at a length that looked complete); then a
 * message, and the process ends by that signal, as an interrupted
 * program should.  A second one ends it at once.  (One that comes after
 * the last block was taken lets the copy end as usual, complete.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "example_util.h"   /* ex_create */

#define ALIGN 4096u
#define MAX_DEPTH 1024

struct copy;

struct slot {
	struct copy *cp;
	unsigned char *buf;
	uint64_t off;           /* the block's offset in both files */
	size_t len;             /* the block's length in the source */
	size_t done;            /* bytes of the current step done so far */
	size_t xfer;            /* bytes the current step moves (len, or
	                           rounded up under O_DIRECT) */
	bool busy;
};

struct copy {
	px_proactor *px;
	int src, dst;
	bool src_direct, dst_direct;
	uint64_t size;          /* of the source, at the start */
	uint64_t next;          /* offset of the next block to take */
	uint64_t written;       /* bytes of the source written to DST */
	bool dst_reg;           /* DST is a regular file (it can be cut) */
	int cut;                /* DST cut to 0 (cut_dst): 0 not yet, 1 done,
	                           -1 failed (no block is written then) */
	size_t block;
	unsigned busy;          /* slots with an operation in flight */
	int error;              /* first error (positive errno), or 0 */
	const char *what;       /* where it happened */
	struct slot *slots;
};

static void on_read(const px_completion *c);
static void on_write(const px_completion *c);

/* SIGINT or SIGTERM, once received during the copy (0: none).  An atomic,
 * since the handler may run in any thread, as may the callbacks. */
static atomic_int stop_signal;

static void on_stop_signal(int sig)
{
	atomic_store(&stop_signal, sig);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static void fail(struct copy *cp, int err, const char *what)
{
	if (!cp->error) {
		cp->error = err;
		cp->what = what;
	}
}

static void slot_idle(struct slot *s)
{
	s->busy = false;
	s->cp->busy--;
}

static void read_step(struct slot *s)
{
	struct copy *cp = s->cp;
	int rc = px_read_file(cp->px, cp->src, s->buf + s->done, s->xfer - s->done,
			      s->off + s->done, on_read, s);

	if (rc < 0) {
		fail(cp, -rc, "read");
		slot_idle(s);
	}
}

static void write_step(struct slot *s)
{
	struct copy *cp = s->cp;
	int rc = px_write_file(cp->px, cp->dst, s->buf + s->done,
			       s->xfer - s->done, s->off + s->done, on_write, s);

	if (rc < 0) {
		fail(cp, -rc, "write");
		slot_idle(s);
	}
}

/* DST is cut to 0 just before the first write, not when it is opened:
 * so an engine that cannot read files (a config whose ops= leaves files
 * out, say) fails the first read with DST as it was.  Callbacks run in
 * the thread of px_handle_events (one here), so no lock is needed. */
static bool cut_dst(struct copy *cp)
{
	if (cp->cut == 0) {
		cp->cut = 1;
		if (cp->dst_reg && ftruncate(cp->dst, 0) < 0) {
			fail(cp, errno, "truncate");
			cp->cut = -1;
		}
	}
	return cp->cut > 0;
}

/* Give an idle slot the next block, if there is one and all is well. */
static void take_block(struct slot *s)
{
	struct copy *cp = s->cp;
	uint64_t left = cp->size - cp->next;

	if (cp->error || left == 0 || atomic_load(&stop_signal))
		return;
	s->off = cp->next;
	s->len = left < cp->block ? (size_t)left : cp->block;
	cp->next += s->len;
	s->done = 0;
	s->xfer = cp->src_direct ? round_up(s->len) : s->len;
	s->busy = true;
	cp->busy++;
	read_step(s);
}

static void on_read(const px_completion *c)
{
	struct slot *s = c->user;
	struct copy *cp = s->cp;

	if (c->error) {
		fail(cp, c->error, "read");
		slot_idle(s);
		return;
	}
	s->done += c->bytes;
	if (s->done < s->len) {
		if (c->bytes == 0) {
			fail(cp, EIO, "read (the source shrank)");
			slot_idle(s);
		} else {
			read_step(s);   /* a short read: the rest */
		}
		return;
	}
	/* The block is in (a rounded-up direct read may stop at the end of
	 * the file, or, if the file grew, read past our size: ignored).  The
	 * padding of a last block written with O_DIRECT is zeros. */
	s->done = 0;
	if (cp->dst_direct) {
		s->xfer = round_up(s->len);
		memset(s->buf + s->len, 0, s->xfer - s->len);
	} else {
		s->xfer = s->len;
	}
	if (!cut_dst(cp)) {
		slot_idle(s);
		return;
	}
	write_step(s);
}

static void on_write(const px_completion *c)
{
	struct slot *s = c->user;
	struct copy *cp = s->cp;

	if (c->error) {
		fail(cp, c->error, "write");
		slot_idle(s);
		return;
	}
	if (c->bytes == 0) {
		fail(cp, EIO, "write (nothing written)");
		slot_idle(s);
		return;
	}
	s->done += c->bytes;
	if (s->done < s->xfer) {
		write_step(s);
		return;
	}
	cp->written += s->len;
	slot_idle(s);
	take_block(s);
}

static int open_file(const char *path, int flags, bool *direct)
{
	int fd;

	if (*direct) {
		fd = open(path, flags | O_DIRECT, 0666);
		if (fd >= 0 || errno != EINVAL)
			return fd;
		fprintf(stderr, "copy: %s: O_DIRECT refused by the file system; "
			"copying it through the page cache\n", path);
		*direct = false;
	}
	return open(path, flags, 0666);
}

/* Give back what main set up; any part of it may be missing. */
static void release(struct copy *cp, unsigned depth)
{
	if (cp->px)
		px_destroy(cp->px);
	if (cp->dst >= 0)
		close(cp->dst);
	if (cp->src >= 0)
		close(cp->src);
	for (unsigned i = 0; cp->slots && i < depth; i++)
		free(cp->slots[i].buf);
	free(cp->slots);
}

static void progress(const struct copy *cp, double t0, bool last)
{
	double mb = (double)cp->written / 1e6, t = now_s() - t0;

	fprintf(stderr, "\rcopy: %.0f of %.0f MB (%3.0f%%), %.1f MB/s%s",
		mb, (double)cp->size / 1e6,
		cp->size ? 100.0 * (double)cp->written / (double)cp->size : 100.0,
		t > 0 ? mb / t : 0.0, last ? "\n" : "");
}

/* Descriptor fd is open on DST itself (fstat's device and inode). */
static bool is_dst(int fd, const struct stat *dst)
{
	struct stat st;

	return fstat(fd, &st) == 0 && st.st_dev == dst->st_dev &&
	       st.st_ino == dst->st_ino;
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [-e CONFIG] [-d DEPTH] [-b BLOCK] [--direct] SRC DST\n"
		"  -e CONFIG  engine configuration text (e.g. \"uring\", "
		"\"linux-aio\"); PX_ENGINE overrides it\n"
		"  -d DEPTH   blocks in flight, 1 to %d (default 16)\n"
		"  -b BLOCK   block size in bytes, K or M suffix, a multiple of "
		"%u (default 1M)\n"
		"  --direct   bypass the page cache (O_DIRECT) where the file "
		"system allows it\n",
		prog, MAX_DEPTH, ALIGN);
}

static long long size_arg(const char *s)
{
	char *end;
	long long v;

	if (!*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno)
		return -1;
	long long unit = 1;
	if (*end == 'K' || *end == 'k')
		unit = 1024, end++;
	else if (*end == 'M' || *end == 'm')
		unit = 1024 * 1024, end++;
	else if (*end == 'G' || *end == 'g')
		unit = 1024 * 1024 * 1024, end++;
	if (*end || v > LLONG_MAX / unit)
		return -1;
	return v * unit;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "direct", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct copy cp = { .src = -1, .dst = -1, .block = 1024 * 1024 };
	const char *config = NULL;
	long long v;
	unsigned depth = 16;
	bool direct = false, tty;
	char engine[256];
	int opt, rc;
	struct stat sst, dst_st;

	while ((opt = getopt_long(argc, argv, "e:d:b:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'e':
			config = optarg;
			break;
		case 'd':
			v = size_arg(optarg);
			if (v < 1 || v > MAX_DEPTH) {
				fprintf(stderr, "copy: bad depth \"%s\"\n", optarg);
				return 2;
			}
			depth = (unsigned)v;
			break;
		case 'b':
			v = size_arg(optarg);
			if (v < (long long)ALIGN || v % ALIGN || v > (1LL << 30)) {
				fprintf(stderr, "copy: bad block size \"%s\" (a multiple "
					"of %u up to 1G)\n", optarg, ALIGN);
				return 2;
			}
			cp.block = (size_t)v;
			break;
		case 'D':
			direct = true;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr, argv[0]);
		return 2;
	}
	const char *src = argv[optind], *dst = argv[optind + 1];

	cp.src_direct = cp.dst_direct = direct;
	/* O_NONBLOCK only for the open: a FIFO would wait for a writer
	 * before the check below could refuse it.  Taken off once the file
	 * is known to be regular (io_uring and Linux AIO would answer EAGAIN
	 * to a read that has to wait for the disk). */
	cp.src = open_file(src, O_RDONLY | O_CLOEXEC | O_NONBLOCK, &cp.src_direct);
	if (cp.src < 0) {
		fprintf(stderr, "copy: %s: %s\n", src, strerror(errno));
		return 1;
	}
	if (fstat(cp.src, &sst) < 0 || !S_ISREG(sst.st_mode)) {
		fprintf(stderr, "copy: %s: not a regular file\n", src);
		return 1;
	}
	if (fcntl(cp.src, F_SETFL, fcntl(cp.src, F_GETFL) & ~O_NONBLOCK) < 0) {
		fprintf(stderr, "copy: %s: %s\n", src, strerror(errno));
		return 1;
	}
	/* The copy is planned from the size, so a file whose size says 0
	 * but which has data (those of /proc and /sys) would be copied
	 * empty: refuse it rather than claim success.  (A byte read through
	 * a plain descriptor: the source's may be O_DIRECT.) */
	if (sst.st_size == 0) {
		char b;
		int t = open(src, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		ssize_t n = t >= 0 ? pread(t, &b, 1, 0) : -1;
		if (t >= 0)
			close(t);
		if (n > 0) {
			fprintf(stderr, "copy: %s: its size says 0 bytes but "
				"it has data (a file of /proc or /sys?); copy "
				"plans by the size and does not copy such "
				"files\n", src);
			return 1;
		}
	}
	/* Blocks are written at their offsets in whatever order they
	 * finish, so DST must keep offsets: a pipe, a socket or a terminal
	 * would get them scrambled (io_uring writes such a descriptor as a
	 * stream) or refuse them (ESPIPE).  Refused before the open, which
	 * would wait for a FIFO's reader, and again after it, on what was
	 * opened (O_NONBLOCK for the open only, as for SRC). */
	if (stat(dst, &dst_st) == 0 &&
	    (S_ISFIFO(dst_st.st_mode) || S_ISSOCK(dst_st.st_mode))) {
		fprintf(stderr, "copy: %s: a pipe or socket; copy writes blocks "
			"at their offsets, in any order, and needs a file\n", dst);
		return 1;
	}
	/* The proactor and the buffers before DST is opened and cut, so
	 * that whatever can still fail (a mistyped -e, too much memory
	 * asked for) fails while DST is as it was. */
	if (ex_create(&cp.px, config, "copy") < 0)
		return 1;
	snprintf(engine, sizeof(engine), "%s", px_engine_name(cp.px));
	cp.slots = calloc(depth, sizeof(*cp.slots));
	if (!cp.slots) {
		fprintf(stderr, "copy: out of memory\n");
		release(&cp, depth);
		return 1;
	}
	for (unsigned i = 0; i < depth; i++) {
		cp.slots[i].cp = &cp;
		rc = posix_memalign((void **)&cp.slots[i].buf, ALIGN, cp.block);
		if (rc) {
			fprintf(stderr, "copy: %u buffers of %zu bytes: %s\n", depth,
				cp.block, strerror(rc));
			release(&cp, depth);
			return 1;
		}
	}
	/* Opened without O_TRUNC, and cut only once it is known not to be
	 * SRC under another name (a hard link, a symbolic link, the same
	 * path): a check by name before the open could be raced. */
	cp.dst = open_file(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK,
			   &cp.dst_direct);
	if (cp.dst < 0) {
		fprintf(stderr, "copy: %s: %s\n", dst, strerror(errno));
		release(&cp, depth);
		return 1;
	}
	if (fstat(cp.dst, &dst_st) < 0 || S_ISFIFO(dst_st.st_mode) ||
	    S_ISSOCK(dst_st.st_mode) || isatty(cp.dst)) {
		fprintf(stderr, "copy: %s: a pipe, socket or terminal; copy "
			"writes blocks at their offsets, in any order, and needs "
			"a file\n", dst);
		release(&cp, depth);
		return 1;
	}
	if (dst_st.st_dev == sst.st_dev && dst_st.st_ino == sst.st_ino) {
		fprintf(stderr, "copy: %s and %s are the same file\n", src, dst);
		release(&cp, depth);
		return 1;
	}
	cp.dst_reg = S_ISREG(dst_st.st_mode);
	/* A padded last block is cut off afterwards with ftruncate, which
	 * only a regular file takes: on a device the padding would land on
	 * whatever follows SRC's bytes there.  So a device whose copy would
	 * end inside an alignment unit is written through the page cache
	 * (O_DIRECT off, before any write has started). */
	int dst_flags = fcntl(cp.dst, F_GETFL) & ~O_NONBLOCK;
	if (cp.dst_direct && !S_ISREG(dst_st.st_mode) && sst.st_size % ALIGN) {
		fprintf(stderr, "copy: %s: not a regular file, and %s does not "
			"end on a %u-byte boundary; writing it through the "
			"page cache\n", dst, src, ALIGN);
		dst_flags &= ~O_DIRECT;
		cp.dst_direct = false;
	}
	if (fcntl(cp.dst, F_SETFL, dst_flags) < 0) {
		fprintf(stderr, "copy: %s: %s\n", dst, strerror(errno));
		release(&cp, depth);
		return 1;
	}
	cp.size = (uint64_t)sst.st_size;

	/* From here on SIGINT and SIGTERM stop the copy (take_block) rather
	 * than the process; SA_RESETHAND: a second one ends it at once. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART | SA_RESETHAND;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	tty = isatty(STDERR_FILENO);
	double t0 = now_s(), shown = t0;
	for (unsigned i = 0; i < depth; i++)
		take_block(&cp.slots[i]);
	while (cp.busy) {
		rc = px_handle_events(cp.px, 250);
		if (rc < 0) {
			fail(&cp, -rc, "px_handle_events");
			break;
		}
		if (tty && now_s() - shown >= 0.25) {
			shown = now_s();
			progress(&cp, t0, false);
		}
	}
	/* With an error the loop ran on until every operation in flight had
	 * completed; px_destroy delivers the rest if it stopped early.
	 * Stopped by a signal without an error, every block taken has been
	 * written whole: DST holds SRC's first cp.next bytes (cut to that,
	 * for a padded last block). */
	int sig = atomic_load(&stop_signal);
	uint64_t end = sig ? cp.next : cp.size;
	/* No write was started (SRC is empty, or a signal came before the
	 * first block): DST is cut here, to the nothing it now holds. */
	if (!cp.error && !cp.cut)
		cut_dst(&cp);
	if (!cp.error && cp.dst_direct && S_ISREG(dst_st.st_mode) &&
	    ftruncate(cp.dst, (off_t)end) < 0)
		fail(&cp, errno, "truncate");
	double t = now_s() - t0;
	if (tty)
		progress(&cp, t0, true);
	px_destroy(cp.px);
	cp.px = NULL;
	if (close(cp.dst) < 0)
		fail(&cp, errno, "close");
	cp.dst = -1;
	release(&cp, depth);

	if (cp.error) {
		fprintf(stderr, "copy: %s %s to %s: %s\n", cp.what, src, dst,
			strerror(cp.error));
		return 1;
	}
	/* DST may be our own stdout or stderr (copy SRC /dev/stdout > FILE,
	 * or a descriptor number the shell left closed and DST's open took):
	 * a report written there would land over the copy's first bytes or
	 * after its end.  It goes to the other stream then, or nowhere. */
	FILE *report = !is_dst(STDOUT_FILENO, &dst_st) ? stdout
		       : !is_dst(STDERR_FILENO, &dst_st) ? stderr : NULL;
	if (sig && end < cp.size) {
		if (!is_dst(STDERR_FILENO, &dst_st))
			fprintf(stderr, "copy: interrupted by %s: %s holds the "
				"first %llu of the %llu bytes of %s\n",
				sig == SIGINT ? "SIGINT" : "SIGTERM", dst,
				(unsigned long long)end,
				(unsigned long long)cp.size, src);
		signal(sig, SIG_DFL);
		raise(sig);
		return 1;
	}
	if (!report)
		return 0;
	fprintf(report, "copy: %llu bytes in %.3f s, %.1f MB/s (engine \"%s\", depth %u, "
	       "block %zu%s)\n",
	       (unsigned long long)cp.size, t, t > 0 ? (double)cp.size / 1e6 / t : 0.0,
	       engine, depth, cp.block,
	       cp.src_direct || cp.dst_direct
		       ? (cp.src_direct && cp.dst_direct ? ", O_DIRECT"
			  : cp.src_direct ? ", O_DIRECT source" : ", O_DIRECT destination")
		       : "");
	return 0;
}
