/*
 * echo_server.c - a TCP echo server on the proactor's public API.
 *
 *     echo_server [-e CONFIG] [-p PORT] [-t THREADS] [-b BIND_ADDR]
 *
 * The engine comes from -e (configuration text, e.g. "epoll" or
 * "provider=select wait=poll"), or from the PX_ENGINE environment variable,
 * which px_create() prefers; with neither it is "auto".  One accept is kept
 * pending on the listening socket; each connection reads, writes back all
 * it read, and reads again, until end of stream or an error.  THREADS
 * threads run px_handle_events().  SIGINT or SIGTERM stops the server:
 * px_stop(), join the threads, and px_destroy() completes (cancels) what is
 * still pending, which closes the remaining connections.  SIGUSR1 prints
 * the proactor's statistics (px_stats), and so does the exit, before the
 * destroy.  The listening, accepting (with its back-off when out of
 * descriptors), threads and signals are in example_util.h, shared with
 * httpd.c; this file is what an echo server does with the proactor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "example_util.h"   /* listening, accepting, threads, signals */

#define BUF_SIZE 16384

struct conn {
	struct ex_server *srv;
	int fd;
	char buf[BUF_SIZE];
};

static void on_read(const px_completion *c);
static void on_write(const px_completion *c);

static void conn_close(struct conn *k)
{
	close(k->fd);
	atomic_fetch_sub(&k->srv->open, 1);
	free(k);
}

static void conn_read(struct conn *k)
{
	if (px_read_stream(k->srv->px, k->fd, k->buf, sizeof(k->buf), on_read, k) < 0)
		conn_close(k);  /* -ESHUTDOWN while stopping, or a bad fd */
}

static void on_read(const px_completion *c)
{
	struct conn *k = c->user;

	if (c->error || c->bytes == 0) {
		conn_close(k);  /* error, end of stream, or cancelled */
		return;
	}
	if (px_write_stream_all(k->srv->px, k->fd, k->buf, c->bytes, on_write, k) < 0)
		conn_close(k);
}

static void on_write(const px_completion *c)
{
	struct conn *k = c->user;

	if (c->error || c->bytes != c->len)
		conn_close(k);
	else
		conn_read(k);
}

/* A new connection (in the accept's callback): start reading.  Returns 0,
 * or the start's error with fd left open (example_util.h holds the
 * connection for a later try when the engine cannot take fd now). */
static int on_conn(struct ex_server *s, int fd)
{
	struct conn *k = malloc(sizeof(*k));
	int rc;

	if (!k)
		return -ENOMEM;
	k->srv = s;
	k->fd = fd;
	atomic_fetch_add(&s->open, 1);
	rc = px_read_stream(s->px, fd, k->buf, sizeof(k->buf), on_read, k);
	if (rc < 0) {
		atomic_fetch_sub(&s->open, 1);
		free(k);
	}
	return rc < 0 ? rc : 0;
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [-e CONFIG] [-p PORT] [-t THREADS] [-b BIND_ADDR]\n"
		"  -e CONFIG     engine configuration text (e.g. \"epoll\", "
		"\"provider=select wait=poll\");\n"
		"                PX_ENGINE overrides it; default \"auto\"\n"
		"  -p PORT       TCP port, 0 for any free one (default 7777)\n"
		"  -t THREADS    threads running the event loop, 1 to %d (default 2)\n"
		"  -b BIND_ADDR  local address to listen on (default: all)\n"
		"SIGUSR1 prints statistics; SIGINT or SIGTERM stops.\n",
		prog, EX_MAX_THREADS);
}

int main(int argc, char **argv)
{
	const char *config = NULL, *port = "7777", *bind_addr = NULL;
	long nthreads = 2;
	struct ex_server srv = { .prog = "echo_server", .on_conn = on_conn };
	int opt;

	while ((opt = getopt(argc, argv, "e:p:t:b:h")) != -1) {
		switch (opt) {
		case 'e':
			config = optarg;
			break;
		case 'p':
			if (ex_number(optarg, 0, 65535) < 0) {
				fprintf(stderr, "%s: bad port \"%s\"\n", argv[0], optarg);
				usage(stderr, argv[0]);
				return 2;
			}
			port = optarg;
			break;
		case 't':
			nthreads = ex_number(optarg, 1, EX_MAX_THREADS);
			if (nthreads < 0) {
				fprintf(stderr, "%s: bad thread count \"%s\"\n", argv[0],
					optarg);
				usage(stderr, argv[0]);
				return 2;
			}
			break;
		case 'b':
			bind_addr = optarg;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument \"%s\"\n", argv[0], argv[optind]);
		usage(stderr, argv[0]);
		return 2;
	}
	return ex_serve(&srv, config, bind_addr, port, nthreads, "listening");
}
