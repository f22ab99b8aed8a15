/*
 * uring_echo - a single-threaded TCP echo server written straight on
 * io_uring (liburing): what the mechanism under the library's default
 * engine costs for the echo service with nothing of the library in
 * between.  A reference for examples/echo_server beside epoll_echo and
 * uv_echo; bench/compare does not run it (the performance goal names the
 * other two), docs/PERFORMANCE.md says where it was measured.
 *
 *     uring_echo [-p PORT] [-b BIND_ADDR] [-m coop|defer|plain]
 *
 * -m chooses the ring's set-up flags:
 *   coop   IORING_SETUP_COOP_TASKRUN (5.19; the default): the kernel runs
 *          a request's task work when the loop next enters it, instead of
 *          interrupting the loop for it, as the library's io_uring engine
 *          sets up its rings;
 *   defer  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN (6.1):
 *          task work runs only while the loop waits in the kernel, which a
 *          ring that one thread alone ever touches may ask for (the
 *          library cannot: any of its threads may submit);
 *   plain  no flags.
 *
 * It gives each connection the I/O shape echo_server has: one buffer of
 * BUF_SIZE bytes, a receive into it, then sends until all that came is
 * echoed, then the next receive.  Receives are armed with
 * IORING_RECVSEND_POLL_FIRST, as the library's io_uring engine arms a
 * read that the peer has yet to feed; the listener has one multishot
 * accept armed; SIGINT and SIGTERM arrive through a signalfd read in the
 * ring.  Every loop turn submits what it queued and waits in one
 * io_uring_enter.  Socket options are left as the kernel gives them, as
 * echo_server and epoll_echo leave them.
 *
 * Prints "uring_echo: listening on ADDR port N" on stdout; on a stop
 * signal closes every connection and exits 0.  Exits 77 when io_uring,
 * the flags of the mode or the multishot accept (5.19) are not available.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_util.h"

#define BUF_SIZE 16384          /* as examples/echo_server.c */
#define RING_SIZE 1024

/* user_data: a connection's address with the request kind in its low
 * bits (struct conn is at least 8-byte aligned), or a bare kind. */
enum { K_ACCEPT = 1, K_SIGNAL = 2, K_RECV = 3, K_SEND = 4, K_MASK = 7 };

struct conn {
	struct conn *next, **pprev;     /* every open connection, for the stop */
	int fd;
	size_t off, len;                /* sent so far, received */
	unsigned char buf[BUF_SIZE];
};

static struct io_uring ring;
static struct conn *conns;
static unsigned long served, open_conns;
static struct signalfd_siginfo sig_info;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uring_echo [-p PORT] [-b BIND_ADDR] [-m MODE]\n"
		"  -p PORT       TCP port, 0 for any free one (default 7777)\n"
		"  -b BIND_ADDR  IPv4 address to listen on (default 127.0.0.1)\n"
		"  -m MODE       the ring's flags: coop (default), defer or plain\n"
		"Single-threaded io_uring echo server; SIGINT/SIGTERM stop it.\n");
}

/* An SQE, submitting what is queued when the SQ is full. */
static struct io_uring_sqe *get_sqe(void)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	while (sqe == NULL) {
		int rc = io_uring_submit(&ring);

		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			fprintf(stderr, "uring_echo: io_uring_submit: %s\n",
				strerror(-rc));
			exit(1);
		}
		sqe = io_uring_get_sqe(&ring);
	}
	return sqe;
}

static void queue_recv(struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe();

	io_uring_prep_recv(sqe, c->fd, c->buf, BUF_SIZE, 0);
	sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | K_RECV);
}

static void queue_send(struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe();

	io_uring_prep_send(sqe, c->fd, c->buf + c->off, c->len - c->off,
			   MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | K_SEND);
}

static void queue_accept(int lfd)
{
	struct io_uring_sqe *sqe = get_sqe();

	io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, K_ACCEPT);
}

/* Closed only from its own completion: a connection has one request in
 * flight at a time, so nothing in the ring refers to it any more. */
static void conn_close(struct conn *c)
{
	*c->pprev = c->next;
	if (c->next != NULL)
		c->next->pprev = c->pprev;
	close(c->fd);
	free(c);
	open_conns--;
}

static void accepted(int lfd, int res, unsigned flags)
{
	struct conn *c;

	if (!(flags & IORING_CQE_F_MORE))
		queue_accept(lfd);      /* the kernel ended the multishot */
	if (res < 0) {
		/* EMFILE and the like: the next connection may fare better. */
		if (res != -ECONNABORTED && res != -EINTR)
			fprintf(stderr, "uring_echo: accept: %s\n", strerror(-res));
		return;
	}
	c = malloc(sizeof *c);
	if (c == NULL) {
		close(res);
		return;
	}
	c->fd = res;
	c->off = c->len = 0;
	c->next = conns;
	c->pprev = &conns;
	if (conns != NULL)
		conns->pprev = &c->next;
	conns = c;
	served++;
	open_conns++;
	queue_recv(c);
}

static void conn_done(struct conn *c, int kind, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		/* Not an end: the same request again. */
		if (kind == K_RECV)
			queue_recv(c);
		else
			queue_send(c);
		return;
	}
	if (res <= 0) {                 /* end of stream, or an error */
		conn_close(c);
		return;
	}
	if (kind == K_RECV) {
		c->off = 0;
		c->len = (size_t)res;
	} else {
		c->off += (size_t)res;
	}
	if (c->off < c->len)
		queue_send(c);
	else
		queue_recv(c);
}

int main(int argc, char **argv)
{
	const char *bind_addr = "127.0.0.1", *mode = "coop";
	struct io_uring_params params;
	long port = 7777;
	int lfd, sfd, rc;
	bool running = true;
	struct io_uring_sqe *sqe;

	int status = peer_server_options_x(argc, argv, "uring_echo", usage,
					   &bind_addr, &port, 'm', &mode);
	if (status >= 0)
		return status;
	memset(&params, 0, sizeof params);
	if (strcmp(mode, "coop") == 0) {
		params.flags = IORING_SETUP_COOP_TASKRUN;
	} else if (strcmp(mode, "defer") == 0) {
		params.flags = IORING_SETUP_SINGLE_ISSUER |
			       IORING_SETUP_DEFER_TASKRUN;
	} else if (strcmp(mode, "plain") != 0) {
		fprintf(stderr, "uring_echo: unknown mode '%s'\n", mode);
		usage(stderr);
		return 2;
	}
	peer_raise_nofile();
	sfd = peer_stop_signals("uring_echo", 0);
	if (sfd < 0)
		return 1;
	/* Made in this thread, the one submitter that SINGLE_ISSUER asks for. */
	rc = io_uring_queue_init_params(RING_SIZE, &ring, &params);
	if (rc < 0) {
		fprintf(stderr, "uring_echo: io_uring (mode %s) is not available "
			"here: %s\n", mode, strerror(-rc));
		return 77;
	}
	/* Listening is the last step: the port printed means ready. */
	lfd = peer_listen("uring_echo", bind_addr, port, 0, &status);
	if (lfd < 0)
		return status;
	queue_accept(lfd);
	sqe = get_sqe();
	io_uring_prep_read(sqe, sfd, &sig_info, sizeof sig_info, 0);
	io_uring_sqe_set_data64(sqe, K_SIGNAL);

	while (running) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			fprintf(stderr, "uring_echo: io_uring_submit_and_wait: %s\n",
				strerror(-rc));
			break;
		}
		io_uring_for_each_cqe(&ring, head, cqe) {
			uint64_t ud = cqe->user_data;
			int kind = (int)(ud & K_MASK);

			seen++;
			if (kind == K_ACCEPT) {
				if (cqe->res == -EINVAL) {
					fprintf(stderr, "uring_echo: no multishot "
						"accept on this kernel\n");
					return 77;
				}
				accepted(lfd, cqe->res, cqe->flags);
			} else if (kind == K_SIGNAL) {
				running = false;
			} else {
				conn_done((struct conn *)(uintptr_t)(ud & ~(uint64_t)K_MASK),
					  kind, cqe->res);
			}
		}
		io_uring_cq_advance(&ring, seen);
	}
	close(lfd);
	printf("uring_echo: stopped; %lu connection%s served, %lu open at the stop\n",
	       served, served == 1 ? "" : "s", open_conns);
	/* The ring goes first: its requests hold the sockets and point into
	 * the connections. */
	io_uring_queue_exit(&ring);
	while (conns != NULL)
		conn_close(conns);
	close(sfd);
	return 0;
}
