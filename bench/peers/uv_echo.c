/*
 * uv_echo - a single-threaded TCP echo server on libuv: the second peer
 * examples/echo_server is measured against (bench/compare --echo).
 *
 *     uv_echo [-p PORT] [-b BIND_ADDR]
 *
 * The usual libuv shape, with its per-message allocations taken out: each
 * connection owns NBUF buffers of BUF_SIZE bytes (the size echo_server
 * uses).  alloc_cb lends a free one to the next read; read_cb hands it to
 * uv_write, which returns it in write_cb.  Reading goes on while a write is
 * in flight, and stops (uv_read_stop) only while every buffer is waiting on
 * a write, so a slow reader at the other end holds back at most
 * NBUF * BUF_SIZE bytes per connection.
 *
 * The port (0 = any free one) is printed on stdout:
 * "uv_echo: listening on 127.0.0.1 port N".  SIGINT or SIGTERM close every
 * handle; the loop then runs dry and the program exits 0.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "peer_util.h"

#define BUF_SIZE 16384          /* as examples/echo_server.c */
#define NBUF 2

struct conn;

struct slot {
	uv_write_t req;
	struct conn *conn;
	bool busy;              /* lent to a read, or its data being written */
	char data[BUF_SIZE];
};

struct conn {
	uv_tcp_t tcp;           /* first: the handle's address is the conn's */
	bool reading;
	bool eof;               /* the peer will send no more */
	bool closing;
	int writes;             /* writes in flight */
	struct slot slot[NBUF];
};

static uv_loop_t *loop;
static uv_tcp_t server;
static uv_signal_t sig_int, sig_term;
static unsigned long served, open_conns, open_at_stop;
static bool stopping;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uv_echo [-p PORT] [-b BIND_ADDR]\n"
		"  -p PORT       TCP port, 0 for any free one (default 7777)\n"
		"  -b BIND_ADDR  IPv4 address to listen on (default 127.0.0.1)\n"
		"Single-threaded libuv echo server; SIGINT/SIGTERM stop it.\n");
}

static void on_closed(uv_handle_t *h)
{
	free(h);                /* the conn, whose first member is the handle */
	open_conns--;
}

static void on_closed_unused(uv_handle_t *h)
{
	free(h);                /* a conn that was never counted */
}

static void conn_close(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct conn *c = (struct conn *)h;

	(void)hint;
	for (int i = 0; i < NBUF; i++) {
		if (!c->slot[i].busy) {
			c->slot[i].busy = true;
			*buf = uv_buf_init(c->slot[i].data, BUF_SIZE);
			return;
		}
	}
	/* Not reached: reading stops while every slot is busy.  An empty
	 * buffer makes libuv report UV_ENOBUFS, handled in on_read. */
	*buf = uv_buf_init(NULL, 0);
}

/* The slot whose data buf->base points into. */
static struct slot *slot_of(struct conn *c, const uv_buf_t *buf)
{
	for (int i = 0; i < NBUF; i++)
		if (buf->base == c->slot[i].data)
			return &c->slot[i];
	return NULL;
}

static bool all_busy(const struct conn *c)
{
	for (int i = 0; i < NBUF; i++)
		if (!c->slot[i].busy)
			return false;
	return true;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_write(uv_write_t *req, int status)
{
	struct slot *sl = req->data;
	struct conn *c = sl->conn;

	sl->busy = false;
	c->writes--;
	if (status < 0 || (c->eof && c->writes == 0)) {
		conn_close(c);
		return;
	}
	if (!c->reading && !c->closing && !c->eof) {
		if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
			conn_close(c);
		else
			c->reading = true;
	}
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct conn *c = (struct conn *)s;
	struct slot *sl = buf->base != NULL ? slot_of(c, buf) : NULL;
	uv_buf_t out;

	if (n <= 0) {
		if (sl != NULL)
			sl->busy = false;
		if (n == 0)
			return;         /* EAGAIN: nothing this time */
		if (n == UV_ENOBUFS) {
			uv_read_stop(s);
			c->reading = false;
			return;
		}
		if (n == UV_EOF) {
			/* The peer is done sending: echo what is in
			 * flight, then close. */
			uv_read_stop(s);
			c->reading = false;
			c->eof = true;
			if (c->writes == 0)
				conn_close(c);
			return;
		}
		conn_close(c);          /* an error */
		return;
	}
	out = uv_buf_init(sl->data, (unsigned int)n);
	sl->req.data = sl;
	if (uv_write(&sl->req, s, &out, 1, on_write) != 0) {
		sl->busy = false;
		conn_close(c);
		return;
	}
	c->writes++;
	if (all_busy(c)) {
		uv_read_stop(s);
		c->reading = false;
	}
}

static void on_connection(uv_stream_t *srv, int status)
{
	struct conn *c;

	if (status < 0) {
		fprintf(stderr, "uv_echo: listen: %s\n", uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL)
		return;
	for (int i = 0; i < NBUF; i++)
		c->slot[i].conn = c;
	uv_tcp_init(loop, &c->tcp);
	if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
		uv_close((uv_handle_t *)&c->tcp, on_closed_unused);
		return;
	}
	served++;
	open_conns++;
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
		conn_close(c);
	else
		c->reading = true;
}

static void close_any(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (uv_is_closing(h))
		return;
	if (h->type == UV_TCP && h != (uv_handle_t *)&server)
		conn_close((struct conn *)h);
	else
		uv_close(h, NULL);
}

static void on_signal(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	if (stopping)
		return;
	stopping = true;
	open_at_stop = open_conns;
	uv_walk(loop, close_any, NULL);
}

int main(int argc, char **argv)
{
	const char *bind_addr = "127.0.0.1";
	long port = 7777;
	struct sockaddr_in sa;
	int namelen = sizeof sa;
	int r;

	int status = peer_server_options(argc, argv, "uv_echo", usage, &bind_addr, &port);
	if (status >= 0)
		return status;
	/* Room for many connections, as far as the hard limit allows. */
	peer_raise_nofile();
	signal(SIGPIPE, SIG_IGN);

	loop = uv_default_loop();
	if (uv_ip4_addr(bind_addr, (int)port, &sa) != 0) {
		fprintf(stderr, "uv_echo: '%s' is not an IPv4 address\n", bind_addr);
		return 2;
	}
	uv_tcp_init(loop, &server);
	r = uv_tcp_bind(&server, (const struct sockaddr *)&sa, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&server, SOMAXCONN, on_connection);
	if (r == 0)
		r = uv_tcp_getsockname(&server, (struct sockaddr *)&sa, &namelen);
	if (r != 0) {
		fprintf(stderr, "uv_echo: cannot listen on %s port %ld: %s\n",
			bind_addr, port, uv_strerror(r));
		return 1;
	}
	uv_signal_init(loop, &sig_int);
	uv_signal_init(loop, &sig_term);
	uv_signal_start(&sig_int, on_signal, SIGINT);
	uv_signal_start(&sig_term, on_signal, SIGTERM);
	printf("uv_echo: listening on %s port %u (libuv %s)\n", bind_addr,
	       (unsigned)ntohs(sa.sin_port), uv_version_string());
	fflush(stdout);

	uv_run(loop, UV_RUN_DEFAULT);
	printf("uv_echo: stopped; %lu connection%s served, %lu open at the stop\n",
	       served, served == 1 ? "" : "s", open_at_stop);
	r = uv_loop_close(loop);
	if (r != 0)
		fprintf(stderr, "uv_echo: uv_loop_close: %s\n", uv_strerror(r));
	return r == 0 ? 0 : 1;
}
