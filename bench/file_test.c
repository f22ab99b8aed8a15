/*
 * file_test - random block reads and writes on one file through the
 * proactor (px_read_file / px_write_file), Q operations in flight, T threads
 * in px_handle_events.
 *
 * The file is opened with O_DIRECT, so the figures are the device's and the
 * engine's rather than the page cache's; where the filesystem refuses
 * O_DIRECT (tmpfs, some overlays) it says so on stderr and goes on buffered
 * (direct=0 in the line).  The file is first filled with real data up to
 * its size, so reads are not served from holes.  Without -f a scratch file
 * is made in the current directory and removed at once (it lives while it
 * is open).
 *
 * Each of the Q slots has its own aligned buffer and random generator: when
 * its operation completes it starts the next one at a random block-aligned
 * offset, a read with probability -r percent, else a write.
 *
 * -I N adds N idle connections: socket pairs with a read pending on one
 * end that no data ever answers, as a server has beside its file I/O.  On
 * an engine of two processors (files on one, sockets on the other) the
 * loop threads then have two processors with work to lead.
 *
 * Output: one line 'result key=value ...' on stdout (see usage).
 */
#include <proactor.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "px_bench.h"

typedef struct slot {
	void *buf;
	uint64_t rng;
	uint64_t reads, writes, errors;
} slot;

static struct {
	const char *path;
	uint64_t size;
	size_t block;
	int depth, threads, read_pct, idle;
	double seconds;
	const char *engine;
	bool buffered, check;
} opt = {
	.size = 64u << 20, .block = 4096, .depth = 32, .threads = 1,
	.read_pct = 100, .seconds = 2.0,
};

static px_proactor *px;
static int fd = -1;
static uint64_t nblocks;
static atomic_bool stopping;
static atomic_bool failed_once;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: file_test [-f PATH] [-S SIZE] [-k BLOCK] [-q DEPTH] [-n THREADS]\n"
		"                 [-r READ_PERCENT] [-i SECONDS] [-e CONFIG] [-I IDLE]\n"
		"                 [--buffered] [--check]\n"
		"\n"
		"Random block reads and writes on one file through the proactor.\n"
		"\n"
		"  -f PATH     file to use (made and filled up to SIZE if shorter; kept);\n"
		"              default: a scratch file in the current directory, removed\n"
		"  -S SIZE     file size (suffix k, m or g); default 64m\n"
		"  -k BLOCK    bytes per operation, a multiple of 4096; default 4096\n"
		"  -q DEPTH    operations in flight; default 32\n"
		"  -n THREADS  threads in px_handle_events; default 1\n"
		"  -r PERCENT  share of reads: 100 = random reads only (default),\n"
		"              0 = random writes only, 50 = half and half\n"
		"  -i SECONDS  run time (fractions allowed); default 2\n"
		"  -e CONFIG   engine config text for px_create; default auto (PX_ENGINE wins)\n"
		"  -I IDLE     also keep IDLE socket reads pending that never complete\n"
		"              (idle connections); default 0\n"
		"  --buffered  do not ask for O_DIRECT\n"
		"  --check     exit 1 unless operations completed and none failed\n"
		"  -h          show this help\n"
		"\n"
		"Output: 'result prog=file_test engine=\"...\" ... iops=N MBps=M ...' on stdout;\n"
		"MB = 10^6 bytes.  Exit: 0 ok, 1 failure or --check failed, 2 bad usage,\n"
		"77 engine unavailable or unable to do file operations.\n");
}

static void bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "file_test: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	usage(stderr);
	exit(BENCH_EXIT_USAGE);
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s == '-' || *s == '\0')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s)
		return false;
	if (v > (1ull << 40))
		return false;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	/* At most a tebibyte, which also keeps the shifts from overflowing. */
	if (*end != '\0' || v > (1ull << 40))
		return false;
	*out = v;
	return true;
}

static int parse_range(const char *s, int min, int max, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		bad(what, s);
	return (int)v;
}

static void parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "buffered", no_argument, NULL, 'B' },
		{ "check", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	char *end;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":f:S:k:q:n:r:i:e:I:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			opt.path = optarg;
			break;
		case 'S':
			if (!parse_u64(optarg, &opt.size) || opt.size == 0)
				bad("-S wants a size such as 64m, not '%s'", optarg);
			break;
		case 'k':
			if (!parse_u64(optarg, &v) || v == 0 || v % 4096 != 0 || v > (64u << 20))
				bad("-k wants a multiple of 4096 up to 64m, not '%s'", optarg);
			opt.block = (size_t)v;
			break;
		case 'q':
			opt.depth = parse_range(optarg, 1, 65536, "-q wants 1..65536, not '%s'");
			break;
		case 'n':
			opt.threads = parse_range(optarg, 1, 1024, "-n wants 1..1024 threads, not '%s'");
			break;
		case 'r':
			opt.read_pct = parse_range(optarg, 0, 100, "-r wants a percentage 0..100, not '%s'");
			break;
		case 'i':
			errno = 0;
			opt.seconds = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    !(opt.seconds > 0 && opt.seconds <= 1e6))
				bad("-i wants a positive number of seconds, not '%s'", optarg);
			break;
		case 'e':
			opt.engine = optarg;
			break;
		case 'I':
			opt.idle = parse_range(optarg, 0, 100000, "-I wants 0..100000 idle reads, not '%s'");
			break;
		case 'B':
			opt.buffered = true;
			break;
		case 'C':
			opt.check = true;
			break;
		case 'h':
			usage(stdout);
			exit(BENCH_EXIT_OK);
		case ':':
			bad("option '%s' needs a value", argv[optind - 1]);
			break;
		default:
			bad("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad("unexpected argument '%s'", argv[optind]);
	if (opt.size < opt.block)
		bad("-S must hold at least one block (%s)", "see -k");
}

/* xorshift64*: small, and good enough to spread offsets. */
static uint64_t next_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static void op_done(const px_completion *c);

/* An idle connection's read ends only with the run (ECANCELED). */
static void idle_cb(const px_completion *c)
{
	if (c->error != ECANCELED && !atomic_load(&stopping))
		fprintf(stderr, "file_test: an idle read ended: %s\n",
			c->error ? px_strerror(c->error) : "data");
}

/* Start the slot's next operation.  Returns 0 or a negative errno. */
static int start_op(slot *s)
{
	uint64_t r = next_random(&s->rng);
	uint64_t off = (r >> 16) % nblocks * opt.block;

	/* The low 16 bits pick the kind: 65536 % 100 skews it by 0.05%. */
	if ((int)((r & 0xffff) % 100) < opt.read_pct)
		return px_read_file(px, fd, s->buf, opt.block, off, op_done, s);
	return px_write_file(px, fd, s->buf, opt.block, off, op_done, s);
}

static void op_done(const px_completion *c)
{
	slot *s = c->user;
	int r;

	if (atomic_load_explicit(&stopping, memory_order_relaxed))
		return;
	if (c->error != 0 || c->bytes != opt.block) {
		s->errors++;
		if (!atomic_exchange(&failed_once, true))
			fprintf(stderr, "file_test: %s at %llu: %s\n", px_op_name(c->op),
				(unsigned long long)c->offset,
				c->error != 0 ? px_strerror(c->error) : "short transfer");
		return;         /* this slot stops */
	}
	if (c->op == PX_OP_READ_FILE)
		s->reads++;
	else
		s->writes++;
	r = start_op(s);
	/* The run may end between the check above and this start: px_stop
	 * then refuses it with -ESHUTDOWN, which is the end, not an error. */
	if (r == -ESHUTDOWN && atomic_load(&stopping))
		return;
	if (r < 0) {
		s->errors++;
		if (!atomic_exchange(&failed_once, true))
			fprintf(stderr, "file_test: start: %s\n", px_strerror(r));
	}
}

/* Open (or make) the file and fill it with data up to opt.size.  Sets
 * *direct to whether O_DIRECT is in force.  Returns the fd or -1. */
static int open_file(bool *direct)
{
	char scratch[] = "file_test.XXXXXX";
	const char *path = opt.path;
	struct stat st;
	char *chunk;
	int f;

	if (path == NULL) {
		f = mkstemp(scratch);
		if (f < 0) {
			perror("file_test: mkstemp in the current directory");
			return -1;
		}
		close(f);
		path = scratch;
	}
	f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (f < 0 || fstat(f, &st) != 0) {
		fprintf(stderr, "file_test: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if ((uint64_t)st.st_size < opt.size) {
		size_t n = 1u << 20;
		uint64_t at = (uint64_t)st.st_size / 4096 * 4096;

		chunk = malloc(n);
		if (chunk == NULL)
			return -1;
		for (size_t i = 0; i < n; i++)
			chunk[i] = (char)(i * 7 + 3);
		while (at < opt.size) {
			size_t len = opt.size - at < n ? (size_t)(opt.size - at) : n;
			ssize_t w = pwrite(f, chunk, len, (off_t)at);

			if (w <= 0) {
				fprintf(stderr, "file_test: filling %s: %s\n", path,
					w < 0 ? strerror(errno) : "no progress");
				free(chunk);
				return -1;
			}
			at += (uint64_t)w;
		}
		free(chunk);
		fsync(f);
	}
	/* Start from a cold cache either way. */
	posix_fadvise(f, 0, 0, POSIX_FADV_DONTNEED);
	*direct = false;
	if (!opt.buffered) {
		int d = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);

		if (d >= 0) {
			close(f);
			f = d;
			*direct = true;
		} else {
			fprintf(stderr, "file_test: the filesystem refuses O_DIRECT on %s (%s); "
				"going on with buffered I/O\n", path, strerror(errno));
		}
	}
	if (opt.path == NULL)
		unlink(path);
	return f;
}

int main(int argc, char **argv)
{
	char engine_name[256];
	slot *slots;
	pthread_t *th;
	bool direct;
	double t0, t1, t;
	uint64_t reads = 0, writes = 0, errors = 0, ops;
	int r, code = BENCH_EXIT_OK;

	parse(argc, argv);
	nblocks = opt.size / opt.block;
	slots = calloc((size_t)opt.depth, sizeof *slots);
	th = calloc((size_t)opt.threads, sizeof *th);
	if (slots == NULL || th == NULL)
		return BENCH_EXIT_CHECK;
	for (int i = 0; i < opt.depth; i++) {
		if (posix_memalign(&slots[i].buf, 4096, opt.block) != 0) {
			fprintf(stderr, "file_test: out of memory\n");
			return BENCH_EXIT_CHECK;
		}
		memset(slots[i].buf, 0x5a, opt.block);
		slots[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) ^ (uint64_t)time(NULL);
		if (slots[i].rng == 0)
			slots[i].rng = 1;
	}
	r = bench_px_create("file_test", opt.engine, &px, engine_name,
			    sizeof engine_name);
	if (r != BENCH_EXIT_OK)
		return r;
	fd = open_file(&direct);
	if (fd < 0)
		return BENCH_EXIT_CHECK;

	int (*idle)[2] = opt.idle ? calloc((size_t)opt.idle, sizeof *idle) : NULL;
	static char idle_byte;
	for (int i = 0; i < opt.idle; i++) {
		if (!idle || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
					idle[i]) < 0) {
			fprintf(stderr, "file_test: idle connections: %s\n",
				idle ? strerror(errno) : "out of memory");
			return BENCH_EXIT_CHECK;
		}
		r = px_read_stream(px, idle[i][0], &idle_byte, 1, idle_cb, NULL);
		if (r < 0) {
			fprintf(stderr, "file_test: an idle read: %s\n",
				px_strerror(r));
			return BENCH_EXIT_CHECK;
		}
	}

	bench_signals();
	if (bench_px_start_loops("file_test", px, th, opt.threads) != 0)
		return BENCH_EXIT_CHECK;
	t0 = bench_now();
	for (int i = 0; i < opt.depth; i++) {
		r = start_op(&slots[i]);
		if (r < 0) {
			fprintf(stderr, "file_test: starting a file operation: %s\n",
				px_strerror(r));
			if (r == -EOPNOTSUPP)
				code = BENCH_EXIT_SKIP;
			else
				code = BENCH_EXIT_CHECK;
			slots[i].errors++;
			break;
		}
	}
	if (code == BENCH_EXIT_OK) {
		bench_opts w = { .seconds = opt.seconds };

		if (bench_wait_run(&w))
			fprintf(stderr, "file_test: interrupted\n");
	}
	atomic_store(&stopping, true);
	t1 = bench_now();
	bench_px_finish("file_test", px, th, opt.threads);

	for (int i = 0; i < opt.depth; i++) {
		reads += slots[i].reads;
		writes += slots[i].writes;
		errors += slots[i].errors;
		free(slots[i].buf);
	}
	ops = reads + writes;
	t = t1 - t0 > 0 ? t1 - t0 : 1e-9;
	for (int i = 0; i < opt.idle; i++) {
		close(idle[i][0]);
		close(idle[i][1]);
	}
	free(idle);
	printf("result prog=file_test engine=\"%s\" depth=%d threads=%d idle=%d block=%zu "
	       "size=%llu read_pct=%d direct=%d seconds=%.3f ops=%llu iops=%.0f "
	       "MBps=%.3f reads=%llu writes=%llu errors=%llu\n",
	       engine_name, opt.depth, opt.threads, opt.idle, opt.block,
	       (unsigned long long)opt.size, opt.read_pct, direct ? 1 : 0,
	       t1 - t0, (unsigned long long)ops, (double)ops / t,
	       (double)ops * (double)opt.block / t / 1e6,
	       (unsigned long long)reads, (unsigned long long)writes,
	       (unsigned long long)errors);
	close(fd);
	free(slots);
	free(th);
	if (code == BENCH_EXIT_OK && opt.check && (ops == 0 || errors > 0)) {
		fprintf(stderr, "file_test: check failed: %llu operations, %llu errors\n",
			(unsigned long long)ops, (unsigned long long)errors);
		code = BENCH_EXIT_CHECK;
	}
	return code;
}
