/*
 * uring_echo - a single-threaded TCP echo server written straight on
 * io_uring (liburing): what the mechanism under the library's default
 * engine costs for the echo service with nothing of the library in
 * between.  A reference for examples/echo_server beside epoll_echo and
 * uv_echo; bench/compare does not run it (the performance goal names the
 * other two), docs/PERFORMANCE.md says where it was measured.
 *
 *     uring_echo [-p PORT] [-b BIND_ADDR] [-m coop|defer|plain|epoll|oneshot]
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
 *   plain  no flags;
 *   epoll  as coop, but a receive is armed only once an epoll set says
 *          its socket is readable: every connection is in the set,
 *          edge-triggered, from its accept; the ring holds one POLL_ADD
 *          on the set, whose completion has the loop drain the set
 *          (epoll_wait, no timeout) and queue the receives, with
 *          MSG_DONTWAIT (an EAGAIN parks the connection again).  A
 *          receive after a full buffer, or on a socket reported while
 *          its send was going on, is tried at once;
 *   oneshot as epoll, but the interest is one-shot and put back by an
 *          IORING_OP_EPOLL_CTL (MOD; ADD the first time) each time a
 *          connection parks, the shape providers/uring.c's gated reads
 *          have (read_gate=).
 * The last two measure what a peer on another CPU pays for the armed
 * poll's wake (docs/PERFORMANCE.md, "Gated reads").
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
#include <poll.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_util.h"

#define BUF_SIZE 16384          /* as examples/echo_server.c */
#define RING_SIZE 1024

/* user_data: a connection's address with the request kind in its low
 * bits (struct conn is at least 8-byte aligned), or a bare kind. */
enum { K_ACCEPT = 1, K_SIGNAL = 2, K_RECV = 3, K_SEND = 4, K_EPOLL = 5,
       K_CTL = 6, K_MASK = 7 };

struct conn {
	struct conn *next, **pprev;     /* every open connection, for the stop */
	int fd;
	size_t off, len;                /* sent so far, received */
	bool ready, want;               /* -m epoll: reported, waiting */
	bool reg;                       /* -m oneshot: added to ep */
	struct epoll_event ev;          /* -m oneshot: read at submission */
	unsigned char buf[BUF_SIZE];
};

static struct io_uring ring;
static struct conn *conns;
static unsigned long served, open_conns;
static struct signalfd_siginfo sig_info;
static int ep = -1;                     /* -m epoll: the readiness set */
static bool oneshot;

static void queue_ctl(struct conn *c, int op);

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uring_echo [-p PORT] [-b BIND_ADDR] [-m MODE]\n"
		"  -p PORT       TCP port, 0 for any free one (default 7777)\n"
		"  -b BIND_ADDR  IPv4 address to listen on (default 127.0.0.1)\n"
		"  -m MODE       coop (default), defer or plain (the ring's flags), or\n"
		"                epoll or oneshot (receives wait on an epoll set)\n"
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

	if (ep >= 0) {
		c->ready = false;
		io_uring_prep_recv(sqe, c->fd, c->buf, BUF_SIZE, MSG_DONTWAIT);
	} else {
		io_uring_prep_recv(sqe, c->fd, c->buf, BUF_SIZE, 0);
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	}
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
	c->ready = c->want = false;
	c->reg = false;
	if (ep >= 0 && !oneshot) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET,
					  .data.ptr = c };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
			perror("uring_echo: epoll_ctl");
			exit(1);
		}
	}
	queue_recv(c);
}

static void park(struct conn *c)
{
	c->want = true;
	if (oneshot)
		queue_ctl(c, c->reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD);
}

static void queue_ctl(struct conn *c, int op)
{
	struct io_uring_sqe *sqe = get_sqe();

	c->ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
	c->ev.data.ptr = c;
	c->reg = true;
	io_uring_prep_epoll_ctl(sqe, ep, c->fd, op, &c->ev);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | K_CTL);
}

static void ctl_done(struct conn *c, int res)
{
	if (res == -ENOENT) {
		queue_ctl(c, EPOLL_CTL_ADD);
	} else if (res == -EEXIST) {
		queue_ctl(c, EPOLL_CTL_MOD);
	} else if (res < 0) {
		fprintf(stderr, "uring_echo: epoll_ctl: %s\n", strerror(-res));
		exit(1);
	}
}

static void conn_done(struct conn *c, int kind, int res)
{
	if (ep >= 0 && kind == K_RECV && res == -EAGAIN) {
		if (c->ready)
			queue_recv(c);
		else
			park(c);
		return;
	}
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
	else if (ep < 0 || c->ready || c->len == BUF_SIZE)
		queue_recv(c);
	else
		park(c);
}

static void queue_epoll(void)
{
	struct io_uring_sqe *sqe = get_sqe();

	io_uring_prep_poll_add(sqe, ep, POLLIN);
	io_uring_sqe_set_data64(sqe, K_EPOLL);
}

static void epoll_ready(void)
{
	struct epoll_event evs[256];
	int n, i;

	do {
		n = epoll_wait(ep, evs, 256, 0);
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c->want) {
				c->want = false;
				queue_recv(c);
			} else {
				c->ready = true;
			}
		}
	} while (n == 256);
	queue_epoll();
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
	} else if (strcmp(mode, "epoll") == 0 || strcmp(mode, "oneshot") == 0) {
		oneshot = mode[0] == 'o';
		params.flags = IORING_SETUP_COOP_TASKRUN;
		ep = epoll_create1(EPOLL_CLOEXEC);
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
	if (ep >= 0)
		queue_epoll();

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
			} else if (kind == K_EPOLL) {
				epoll_ready();
			} else if (kind == K_CTL) {
				ctl_done((struct conn *)(uintptr_t)(ud & ~(uint64_t)K_MASK),
					 cqe->res);
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
	if (ep >= 0)
		close(ep);
	close(sfd);
	return 0;
}
