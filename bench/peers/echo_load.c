/*
 * echo_load - load client for TCP echo servers (examples/echo_server,
 * bench/peers/epoll_echo, bench/peers/uv_echo): N connections, each sending
 * blocks and checking every byte that comes back.
 *
 *     echo_load -p PORT [-a ADDR] [-c CONNS] [-k BLOCK] [-w WINDOW]
 *               [-i SECONDS] [-B BYTES] [-W]
 *
 * Each connection keeps at most WINDOW bytes unechoed (default one block:
 * ping-pong, send a block and wait for all of it to come back; a larger
 * window pipelines).  One thread drives every connection through one epoll
 * set, edge-triggered, non-blocking, writing and reading until EAGAIN.
 *
 * Every connection sends a different stretch of one pseudo-random byte
 * sequence whose period (a prime) is no multiple of any block size, so a
 * byte echoed on the wrong connection, dropped, repeated or out of order
 * does not match what was sent at that offset.  Every byte read is
 * compared.
 *
 * Warm-up: once every connection is open, each sends one block and waits
 * for its echo, so the server has accepted and served every connection
 * before the clock starts (the time this took is reported as warmup_s: a
 * server slow to accept shows there, not as idle connections in the run).
 * -W leaves the warm-up out.
 *
 * Output on stdout: "ready conns=N warmup_s=W" when the warm-up is over
 * (the run clock starts there), then one line
 *   result prog=echo_load conns=N block=B window=W seconds=S echoed=BYTES
 *   bytes_per_s=R oneway_MBps=M round_trips_per_s=T active=A
 *   min_conn_MBps=L max_conn_MBps=H warmup_s=W verified=BYTES
 * where echoed counts payload bytes that came back during the run (one
 * way: each counts once), active the connections that got any, and
 * verified every byte compared, warm-up included.
 *
 * Exit: 0 ok; 1 a byte differed, a connection was lost (end of stream or
 * an error before the end of the run), a connection got no echo within
 * the warm-up's 60 s, or no byte came back at all; 2 bad usage.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "peer_util.h"

#define PERIOD 65521u           /* prime: no block size divides it */
#define RX_SIZE 65536
#define MAX_EVENTS 256

struct conn {
	int fd;
	int id;
	bool read_ok, write_ok;
	uint64_t sent, recv;    /* stream offsets: bytes written, read back */
	uint64_t recv_at_start; /* recv when the run clock started */
	size_t tx_off;          /* bytes of the current block written */
	uint32_t seed;          /* where in the sequence this stream starts */
};

static size_t block = 8192, window;
static unsigned char *seq;      /* PERIOD + room for one contiguous access */
static unsigned char rx[RX_SIZE];
#define WARMUP_LIMIT 60.0       /* seconds for every connection's first echo */

static uint64_t echoed, budget, verified;
static bool failed;
static bool warming = true;     /* one block per connection until all echoed */
static long warm;               /* connections whose first block is back */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: echo_load -p PORT [-a ADDR] [-c CONNS] [-k BLOCK] [-w WINDOW]\n"
		"                 [-i SECONDS] [-B BYTES] [-W]\n"
		"  -p PORT     the echo server's TCP port (required)\n"
		"  -a ADDR     its IPv4 address (default 127.0.0.1)\n"
		"  -c CONNS    connections (default 1)\n"
		"  -k BLOCK    bytes per block sent (suffix k or m; default 8k)\n"
		"  -w WINDOW   most bytes a connection leaves unechoed (default: one\n"
		"              block, i.e. ping-pong; larger pipelines)\n"
		"  -i SECONDS  run time (default 2)\n"
		"  -B BYTES    stop once this many bytes came back (suffix k, m or g)\n"
		"  -W          no warm-up: start the clock as soon as every connection\n"
		"              is open, before the server has accepted or served them\n"
		"Every echoed byte is checked.  Exit 0 ok, 1 a byte differed or a\n"
		"connection was lost, 2 bad usage.\n");
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A byte count with an optional k/m/g suffix (powers of 1024). */
static bool parse_size(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return false;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end || v > max)
		return false;
	*out = v;
	return true;
}

static void bad(const char *what, const char *arg)
{
	fprintf(stderr, "echo_load: %s, not '%s'\n", what, arg);
	usage(stderr);
	exit(2);
}

/* The sequence: xorshift bytes, repeated so that any access of up to
 * `extra` bytes from an offset below PERIOD is contiguous. */
static int make_seq(size_t extra)
{
	uint32_t x = 2463534242u;

	seq = malloc(PERIOD + extra);
	if (seq == NULL)
		return -1;
	for (size_t i = 0; i < PERIOD; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		seq[i] = (unsigned char)(x >> 24);
	}
	for (size_t i = 0; i < extra; i++)
		seq[PERIOD + i] = seq[i % PERIOD];
	return 0;
}

static const unsigned char *at(const struct conn *c, uint64_t off)
{
	return seq + (size_t)((off + c->seed) % PERIOD);
}

static void lost(struct conn *c, const char *why)
{
	fprintf(stderr, "echo_load: connection %d lost after %llu bytes echoed: %s\n",
		c->id, (unsigned long long)c->recv, why);
	failed = true;
}

/* Write while the window allows, read what came back, until neither
 * direction moves.  Returns false on a failure (already reported). */
static bool conn_run(struct conn *c)
{
	size_t limit = window > block ? window : block;
	ssize_t r;

	for (;;) {
		bool moved = false;

		while (c->write_ok &&
		       (c->tx_off > 0 || c->sent - c->recv + block <= limit) &&
		       (!warming || c->sent < block)) {
			r = write(c->fd, at(c, c->sent), block - c->tx_off);
			if (r < 0) {
				if (errno == EAGAIN) {
					c->write_ok = false;
					break;
				}
				if (errno == EINTR)
					continue;
				lost(c, strerror(errno));
				return false;
			}
			c->sent += (uint64_t)r;
			c->tx_off = (c->tx_off + (size_t)r) % block;
			moved = true;
		}
		if (c->read_ok) {
			r = read(c->fd, rx, sizeof rx);
			if (r > 0) {
				if ((uint64_t)r > c->sent - c->recv) {
					fprintf(stderr, "echo_load: connection %d got %zd bytes "
						"back with only %llu outstanding\n", c->id, r,
						(unsigned long long)(c->sent - c->recv));
					failed = true;
					return false;
				}
				if (memcmp(rx, at(c, c->recv), (size_t)r) != 0) {
					size_t i = 0;

					while (rx[i] == at(c, c->recv)[i])
						i++;
					fprintf(stderr, "echo_load: connection %d: echoed byte "
						"%llu differs from the byte sent\n", c->id,
						(unsigned long long)(c->recv + i));
					failed = true;
					return false;
				}
				c->recv += (uint64_t)r;
				verified += (uint64_t)r;
				if (!warming)
					echoed += (uint64_t)r;
				else if (c->recv == block)
					warm++;
				moved = true;
			} else if (r == 0) {
				lost(c, "the server closed it");
				return false;
			} else if (errno == EAGAIN) {
				c->read_ok = false;
			} else if (errno != EINTR) {
				lost(c, strerror(errno));
				return false;
			}
		}
		if (!moved)
			return true;
	}
}

/* Register every connection, edge-triggered for both directions.  The
 * registration reports each socket writable once: that starts its first
 * block. */
static int add_all(int ep, struct conn *conns, long nconns)
{
	struct epoll_event ev;

	for (long i = 0; i < nconns; i++) {
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = &conns[i];
		if (epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev) != 0) {
			perror("echo_load: epoll_ctl");
			return -1;
		}
	}
	return 0;
}

/*
 * Run the event loop until the deadline, a failure, the byte budget, or,
 * while warming up, until every one of nconns connections is warm.
 */
static void pump(int ep, double deadline, long nconns)
{
	struct epoll_event evs[MAX_EVENTS];
	double t;

	while (!failed && (t = now()) < deadline) {
		int ms, n;

		if (warming ? warm == nconns : (budget != 0 && echoed >= budget))
			return;
		ms = (int)ceil((deadline - t) * 1000);
		n = epoll_wait(ep, evs, MAX_EVENTS, ms);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("echo_load: epoll_wait");
			failed = true;
			return;
		}
		for (int i = 0; i < n && !failed; i++) {
			struct conn *c = evs[i].data.ptr;
			uint32_t e = evs[i].events;

			if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				c->read_ok = true;
			if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
				c->write_ok = true;
			conn_run(c);
		}
	}
}

int main(int argc, char **argv)
{
	const char *addr = "127.0.0.1";
	struct sockaddr_in sa;
	struct conn *conns;
	uint64_t v, lo = UINT64_MAX, hi = 0;
	double seconds = 2, t0, t1, end_time, t, warm_start, warmup;
	long port = -1, nconns = 1;
	int opt, ep, one = 1, active = 0;
	char *endp;

	while ((opt = getopt(argc, argv, "p:a:c:k:w:i:B:Wh")) != -1) {
		switch (opt) {
		case 'p':
			errno = 0;
			port = strtol(optarg, &endp, 10);
			if (errno || endp == optarg || *endp || port < 1 || port > 65535)
				bad("-p wants a port 1..65535", optarg);
			break;
		case 'a':
			addr = optarg;
			break;
		case 'c':
			errno = 0;
			nconns = strtol(optarg, &endp, 10);
			if (errno || endp == optarg || *endp || nconns < 1 || nconns > 100000)
				bad("-c wants 1..100000 connections", optarg);
			break;
		case 'k':
			if (!parse_size(optarg, 16u << 20, &v) || v == 0)
				bad("-k wants a block of 1 byte..16m", optarg);
			block = (size_t)v;
			break;
		case 'w':
			if (!parse_size(optarg, 1u << 30, &v))
				bad("-w wants a window of 0..1g bytes", optarg);
			window = (size_t)v;
			break;
		case 'i':
			errno = 0;
			seconds = strtod(optarg, &endp);
			if (errno || endp == optarg || *endp || !(seconds > 0 && seconds <= 1e6))
				bad("-i wants a positive number of seconds", optarg);
			break;
		case 'B':
			if (!parse_size(optarg, UINT64_MAX >> 1, &budget) || budget == 0)
				bad("-B wants a positive byte count", optarg);
			break;
		case 'W':
			warming = false;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		bad("unexpected argument", argv[optind]);
	if (port < 0) {
		fprintf(stderr, "echo_load: -p PORT is required\n");
		usage(stderr);
		return 2;
	}
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		bad("-a wants an IPv4 address", addr);

	signal(SIGPIPE, SIG_IGN);
	peer_raise_nofile();
	if (make_seq(block > RX_SIZE ? block : RX_SIZE) != 0 ||
	    (conns = calloc((size_t)nconns, sizeof *conns)) == NULL) {
		fprintf(stderr, "echo_load: out of memory\n");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		perror("echo_load: epoll_create1");
		return 1;
	}

	/* Blocking connects, one after the other: the kernel completes them
	 * on its own while the server accepts at its pace. */
	for (long i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];

		c->id = (int)i;
		c->seed = (uint32_t)((uint64_t)i * 7919u % PERIOD);
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0) {
			fprintf(stderr, "echo_load: socket %ld: %s\n", i, strerror(errno));
			return 1;
		}
		if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
			fprintf(stderr, "echo_load: connect %ld to %s port %ld: %s\n",
				i, addr, port, strerror(errno));
			return 1;
		}
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) != 0) {
			perror("echo_load: fcntl");
			return 1;
		}
	}
	warm_start = now();
	if (warming) {
		if (add_all(ep, conns, nconns) != 0)
			return 1;
		pump(ep, warm_start + WARMUP_LIMIT, nconns);
		if (failed)
			return 1;
		if (warm < nconns) {
			fprintf(stderr, "echo_load: %ld of %ld connections got no echo "
				"within %.0f s\n", nconns - warm, nconns, WARMUP_LIMIT);
			return 1;
		}
	}

	t0 = now();
	warmup = t0 - warm_start;
	printf("ready conns=%ld warmup_s=%.3f\n", nconns, warmup);
	fflush(stdout);
	end_time = t0 + seconds;
	if (warming) {
		warming = false;
		/* No event will come for the connections that are idle
		 * after their first echo: start each one's run by hand. */
		for (long i = 0; i < nconns; i++) {
			conns[i].recv_at_start = conns[i].recv;
			conn_run(&conns[i]);
		}
	} else if (add_all(ep, conns, nconns) != 0) {
		return 1;
	}
	pump(ep, end_time, 0);
	t1 = now();

	for (long i = 0; i < nconns; i++) {
		uint64_t got = conns[i].recv - conns[i].recv_at_start;

		if (got > 0)
			active++;
		if (got < lo)
			lo = got;
		if (got > hi)
			hi = got;
	}
	t = t1 - t0;
	printf("result prog=echo_load conns=%ld block=%zu window=%zu seconds=%.3f "
	       "echoed=%llu bytes_per_s=%.0f oneway_MBps=%.3f round_trips_per_s=%.0f "
	       "active=%d min_conn_MBps=%.3f max_conn_MBps=%.3f warmup_s=%.3f "
	       "verified=%llu\n",
	       nconns, block, window > block ? window : block, t,
	       (unsigned long long)echoed, (double)echoed / t, (double)echoed / t / 1e6,
	       (double)echoed / (double)block / t, active, (double)lo / t / 1e6,
	       (double)hi / t / 1e6, warmup, (unsigned long long)verified);
	fflush(stdout);

	for (long i = 0; i < nconns; i++)
		close(conns[i].fd);
	close(ep);
	free(conns);
	free(seq);
	if (!failed && echoed == 0) {
		fprintf(stderr, "echo_load: no byte came back\n");
		failed = true;
	}
	return failed ? 1 : 0;
}
