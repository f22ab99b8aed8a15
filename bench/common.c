/*
 * common.c - options, sockets, run clock and result line of the echo
 * benchmarks (see common.h for the protocol).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f, const char *prog, bool with_engine)
{
	fprintf(f,
		"usage: %s [-s SESSIONS] [-n THREADS] [-k BLOCK] [-w WINDOW] [-d USEC] [-z]\n"
		"       %*s [-i SECONDS]%s [--check] [--verify]\n"
		"\n"
		"Echo benchmark over loopback TCP: each session is a client end and a server\n"
		"end in this process; the server echoes, the client sends blocks.\n"
		"\n"
		"  -s N       sessions (client/server socket pairs); default 1\n"
		"  -n N       threads running the event loop; default 1\n"
		"  -k BYTES   block size the client sends (suffix k or m); default 512\n"
		"  -w BYTES   flow-control window: the client keeps sending while fewer than\n"
		"             BYTES are unechoed, reading echoes at the same time (full duplex);\n"
		"             0 = half duplex: send one block, wait for all of its echo;\n"
		"             default 1024\n"
		"  -d USEC    callback delay: after every read that returned data, BUSY-SPIN\n"
		"             for USEC microseconds (emulated work in the callback); default 0\n"
		"  -z         make the -d delay a sleep (nanosleep) instead of a busy spin\n"
		"  -i SECONDS run time (fractions allowed); default 2\n"
		"%s"
		"  --check    exit 1 unless data moved and every session moved data\n"
		"  --verify   compare every echoed byte with what was sent (costs CPU)\n"
		"  -h         show this help\n"
		"\n"
		"SIGINT ends the run early; the figures are still printed.  Output: one\n"
		"line 'result key=value ...' on stdout; bytes_per_s counts client sent +\n"
		"client received + server sent + server received over the run time.\n"
		"Exit: 0 ok, 1 --check failed, 2 bad usage%s.\n",
		prog, (int)strlen(prog), "", with_engine ? " [-e CONFIG] [-b] [--per-thread]" : "",
		with_engine ?
		"  -e CONFIG  engine config text for px_create (a preset such as epoll,\n"
		"             poll, select, epoll-dedicated, uring, or key=value words);\n"
		"             default auto; a set PX_ENGINE environment variable wins\n"
		"  -b         leave the sockets blocking (default: O_NONBLOCK)\n"
		"  --per-thread\n"
		"             a proactor of its own for each loop thread, the sessions\n"
		"             dealt out between them: what the threads would move if\n"
		"             they shared nothing (a reference; not the design measured)\n" :
		"",
		with_engine ? ", 77 engine unavailable" : "");
}

static void bad(const char *prog, bool with_engine, const char *fmt,
		const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	usage(stderr, prog, with_engine);
	exit(BENCH_EXIT_USAGE);
}

/* A byte count with an optional k/m suffix (powers of 1024).  Returns false
 * on junk or overflow. */
static bool parse_size(const char *s, unsigned long long max, size_t *out)
{
	char *end;
	unsigned long long v;

	if (*s == '-' || *s == '\0')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s)
		return false;
	if (*end == 'k' || *end == 'K') {
		v *= 1024;
		end++;
	} else if (*end == 'm' || *end == 'M') {
		v *= 1024 * 1024;
		end++;
	}
	if (*end != '\0' || v > max)
		return false;
	*out = (size_t)v;
	return true;
}

static bool parse_int(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return false;
	*out = v;
	return true;
}

void bench_parse(bench_opts *o, int argc, char **argv, const char *prog,
		 bool with_engine)
{
	static const struct option longopts[] = {
		{ "check", no_argument, NULL, 'C' },
		{ "verify", no_argument, NULL, 'V' },
		{ "per-thread", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *shortopts = with_engine ? ":s:n:k:w:d:zi:e:bh" : ":s:n:k:w:d:zi:h";
	int c;
	long v;
	char *end;

	*o = (bench_opts){
		.sessions = 1, .threads = 1, .block = 512, .window = 1024,
		.delay_us = 0, .seconds = 2.0, .engine = NULL,
	};
	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!parse_int(optarg, 1, 100000, &v))
				bad(prog, with_engine, "-s wants 1..100000 sessions, not '%s'", optarg);
			o->sessions = (int)v;
			break;
		case 'n':
			if (!parse_int(optarg, 1, 1024, &v))
				bad(prog, with_engine, "-n wants 1..1024 threads, not '%s'", optarg);
			o->threads = (int)v;
			break;
		case 'k':
			if (!parse_size(optarg, 64ull << 20, &o->block) || o->block == 0)
				bad(prog, with_engine, "-k wants a block size of 1 byte..64m, not '%s'", optarg);
			break;
		case 'w':
			if (!parse_size(optarg, 1ull << 30, &o->window))
				bad(prog, with_engine, "-w wants a window of 0..1g bytes, not '%s'", optarg);
			break;
		case 'd':
			if (!parse_int(optarg, 0, 10000000, &v))
				bad(prog, with_engine, "-d wants 0..10000000 microseconds, not '%s'", optarg);
			o->delay_us = (unsigned)v;
			break;
		case 'z':
			o->delay_sleep = true;
			break;
		case 'i':
			errno = 0;
			o->seconds = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    !(o->seconds > 0 && o->seconds <= 1e6))
				bad(prog, with_engine, "-i wants a positive number of seconds, not '%s'", optarg);
			break;
		case 'e':
			o->engine = optarg;
			break;
		case 'b':
			o->blocking = true;
			break;
		case 'C':
			o->check = true;
			break;
		case 'V':
			o->verify = true;
			break;
		case 'P':
			if (!with_engine)
				bad(prog, with_engine, "unknown option '%s'", argv[optind - 1]);
			o->per_thread = true;
			break;
		case 'h':
			usage(stdout, prog, with_engine);
			exit(BENCH_EXIT_OK);
		case ':':
			bad(prog, with_engine, "option '%s' needs a value", argv[optind - 1]);
			break;
		default:
			bad(prog, with_engine, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad(prog, with_engine, "unexpected argument '%s'", argv[optind]);
}

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_delay(const bench_opts *o)
{
	struct timespec ts, end;

	if (o->delay_us == 0)
		return;
	if (o->delay_sleep) {
		ts.tv_sec = o->delay_us / 1000000;
		ts.tv_nsec = (long)(o->delay_us % 1000000) * 1000;
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_nsec += (long)o->delay_us * 1000;
	end.tv_sec += end.tv_nsec / 1000000000;
	end.tv_nsec %= 1000000000;
	do
		clock_gettime(CLOCK_MONOTONIC, &ts);
	while (ts.tv_sec < end.tv_sec ||
	       (ts.tv_sec == end.tv_sec && ts.tv_nsec < end.tv_nsec));
}

int bench_raise_nofile(long need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (rlim_t)need)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need) {
		fprintf(stderr, "need %ld file descriptors but the hard limit is %llu "
			"(raise it with ulimit -Hn)\n", need,
			(unsigned long long)rl.rlim_max);
		return -1;
	}
	rl.rlim_cur = (rlim_t)need;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
		perror("setrlimit(RLIMIT_NOFILE)");
		return -1;
	}
	return 0;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		perror("fcntl(O_NONBLOCK)");
		return -1;
	}
	return 0;
}

int bench_tune(int fd, bool nonblock)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
		perror("setsockopt(TCP_NODELAY)");
		return -1;
	}
	return nonblock ? set_nonblock(fd) : 0;
}

int bench_socket(bool nonblock)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		perror("socket");
		return -1;
	}
	if (bench_tune(fd, nonblock) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int bench_listen(struct sockaddr_in *addr, bool nonblock)
{
	socklen_t len = sizeof *addr;
	int one = 1;
	int fd = bench_socket(nonblock);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	memset(addr, 0, sizeof *addr);
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr->sin_port = 0;
	if (bind(fd, (struct sockaddr *)addr, sizeof *addr) != 0 ||
	    listen(fd, SOMAXCONN) != 0 ||
	    getsockname(fd, (struct sockaddr *)addr, &len) != 0) {
		perror("bind/listen on 127.0.0.1");
		close(fd);
		return -1;
	}
	return fd;
}

void bench_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

bool bench_wait_run(const bench_opts *o)
{
	sigset_t set;
	double end = bench_now() + o->seconds;
	double left;
	struct timespec ts;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	while ((left = end - bench_now()) > 0) {
		ts.tv_sec = (time_t)left;
		ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		if (sigtimedwait(&set, NULL, &ts) == SIGINT)
			return true;
	}
	return false;
}

const unsigned char *bench_pattern(size_t block)
{
	static unsigned char *pat;
	static size_t len;

	if (pat == NULL || len != block) {
		free(pat);
		pat = malloc(block);
		if (pat == NULL) {
			fprintf(stderr, "out of memory for a %zu-byte block\n", block);
			exit(BENCH_EXIT_CHECK);
		}
		len = block;
		/* Bytes that differ along the block, so a shifted, dropped
		 * or repeated piece of the stream shows with --verify. */
		for (size_t i = 0; i < block; i++)
			pat[i] = (unsigned char)(i * 131u + (i >> 8) * 7u + 17u);
	}
	return pat;
}

bool bench_verify(const bench_opts *o, uint64_t off, const void *data,
		  size_t n)
{
	const unsigned char *pat = bench_pattern(o->block);
	const unsigned char *p = data;
	size_t at = (size_t)(off % o->block);

	while (n > 0) {
		size_t run = o->block - at < n ? o->block - at : n;

		if (memcmp(p, pat + at, run) != 0)
			return false;
		p += run;
		n -= run;
		at = 0;
	}
	return true;
}

int bench_ring_init(bench_ring *r, const bench_opts *o)
{
	size_t w = o->window > o->block ? o->window : o->block;

	/* Whole blocks: a full window plus one block. */
	r->cap = ((w + o->block - 1) / o->block + 1) * o->block;
	r->head = 0;
	r->len = 0;
	r->buf = malloc(r->cap);
	return r->buf == NULL ? -1 : 0;
}

void bench_ring_free(bench_ring *r)
{
	free(r->buf);
	r->buf = NULL;
}

int bench_report(const bench_opts *o, const char *prog, const char *engine,
		 const bench_counts *per, double seconds)
{
	uint64_t cs = 0, cr = 0, ss = 0, sr = 0, lo = UINT64_MAX, hi = 0;
	int active = 0;
	double total, t = seconds > 0 ? seconds : 1e-9;

	for (int i = 0; i < o->sessions; i++) {
		cs += per[i].client_sent;
		cr += per[i].client_recv;
		ss += per[i].server_sent;
		sr += per[i].server_recv;
		if (per[i].client_recv > 0)
			active++;
		if (per[i].client_recv < lo)
			lo = per[i].client_recv;
		if (per[i].client_recv > hi)
			hi = per[i].client_recv;
	}
	total = (double)cs + (double)cr + (double)ss + (double)sr;
	printf("result prog=%s engine=\"%s\" sessions=%d threads=%d block=%zu "
	       "window=%zu delay_us=%u delay=%s seconds=%.3f bytes=%.0f "
	       "bytes_per_s=%.0f oneway_MBps=%.3f round_trips_per_s=%.0f "
	       "active=%d min_session_MBps=%.3f max_session_MBps=%.3f\n",
	       prog, engine != NULL ? engine : "-", o->sessions, o->threads,
	       o->block, o->window, o->delay_us,
	       o->delay_sleep ? "sleep" : "spin", seconds, total, total / t,
	       (double)cr / t / 1e6, (double)cr / (double)o->block / t, active,
	       (double)lo / t / 1e6, (double)hi / t / 1e6);
	fflush(stdout);
	if (o->check && (total <= 0 || active < o->sessions)) {
		fprintf(stderr, "%s: check failed: %d of %d sessions moved data, "
			"%.0f bytes in all\n", prog, active, o->sessions, total);
		return BENCH_EXIT_CHECK;
	}
	return BENCH_EXIT_OK;
}

int bench_connect_pair(const char *prog, int lfd, const struct sockaddr_in *addr,
		       bool nonblock, int *cfd, int *sfd)
{
	*sfd = -1;
	*cfd = bench_socket(false);
	if (*cfd < 0)
		return -1;
	if (connect(*cfd, (const struct sockaddr *)addr, sizeof *addr) != 0) {
		fprintf(stderr, "%s: connect: %s\n", prog, strerror(errno));
		return -1;
	}
	/* The accepted end must be our client's: a listener on port 0 may
	 * get a port another program has just let go of while one of its
	 * clients still connects to it (seen with test programs running
	 * beside the benchmarks), and pairing that stranger with our client
	 * would leave the session without a byte.  Strangers are closed. */
	struct sockaddr_in mine, peer;
	socklen_t ml = sizeof mine;
	if (getsockname(*cfd, (struct sockaddr *)&mine, &ml) != 0) {
		fprintf(stderr, "%s: getsockname: %s\n", prog, strerror(errno));
		return -1;
	}
	for (int strangers = 0;; strangers++) {
		socklen_t pl = sizeof peer;
		*sfd = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
		if (*sfd < 0) {
			fprintf(stderr, "%s: accept: %s\n", prog, strerror(errno));
			return -1;
		}
		if (peer.sin_port == mine.sin_port &&
		    peer.sin_addr.s_addr == mine.sin_addr.s_addr)
			break;
		close(*sfd);
		*sfd = -1;
		if (strangers == 100) {
			fprintf(stderr, "%s: accept: only connections from other "
					"programs\n", prog);
			return -1;
		}
	}
	if (bench_tune(*sfd, nonblock) != 0 || bench_tune(*cfd, nonblock) != 0)
		return -1;
	return 0;
}
