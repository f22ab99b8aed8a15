/*
 * epoll_echo - a single-threaded TCP echo server on plain epoll: the peer
 * examples/echo_server is measured against (bench/compare --echo).
 *
 *     epoll_echo [-p PORT] [-b BIND_ADDR]
 *
 * Written to be as good as a small hand-made server gets, not a straw man:
 *
 * - every socket is non-blocking and registered once, edge-triggered, for
 *   both directions (EPOLLIN | EPOLLOUT | EPOLLET): no epoll_ctl on the
 *   data path;
 * - each connection remembers per direction whether the socket may be
 *   ready (set by an event, cleared by EAGAIN), so it makes no system call
 *   it knows would fail;
 * - a connection has one buffer of BUF_SIZE bytes, the size echo_server
 *   uses; it reads into the free space and writes from the filled space,
 *   so a partial write keeps its remainder and reading pauses only while
 *   the buffer is full;
 * - the listener accepts until EAGAIN (accept4 with SOCK_NONBLOCK, so no
 *   fcntl per connection).  Socket options are left as the kernel gives
 *   them, as echo_server leaves them (no TCP_NODELAY on the server side).
 *
 * The port (0 = any free one) and the address actually bound are printed
 * on stdout: "epoll_echo: listening on 127.0.0.1 port N".  SIGINT or
 * SIGTERM end the loop (signalfd), every connection is closed, and the
 * program exits 0.
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_util.h"

#define BUF_SIZE 16384          /* as examples/echo_server.c */
#define MAX_EVENTS 256

struct conn {
	struct conn *prev, *next;       /* every open connection, for the stop */
	int fd;
	bool read_ok, write_ok;
	bool eof;               /* the peer will send no more */
	size_t head, len;       /* filled bytes: buf[head .. head + len) */
	unsigned char buf[BUF_SIZE];
};

/* Tags for the two descriptors that are not connections. */
static char listen_tag, signal_tag;

static unsigned long served, open_conns;
static struct conn *conns;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: epoll_echo [-p PORT] [-b BIND_ADDR]\n"
		"  -p PORT       TCP port, 0 for any free one (default 7777)\n"
		"  -b BIND_ADDR  IPv4 address to listen on (default 127.0.0.1)\n"
		"Single-threaded edge-triggered epoll echo server; SIGINT/SIGTERM stop it.\n");
}

static void conn_close(struct conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	close(c->fd);           /* also leaves the epoll set */
	free(c);
	open_conns--;
}

/*
 * Move what can be moved: write the filled part, read into the free part,
 * until neither direction can go on.  Returns false when the connection is
 * over (end of stream or an error) and has been closed.
 */
static bool conn_run(struct conn *c)
{
	ssize_t r;

	for (;;) {
		bool moved = false;

		while (c->write_ok && c->len > 0) {
			r = write(c->fd, c->buf + c->head, c->len);
			if (r < 0) {
				if (errno == EAGAIN) {
					c->write_ok = false;
					break;
				}
				if (errno == EINTR)
					continue;
				goto gone;
			}
			c->head += (size_t)r;
			c->len -= (size_t)r;
			moved = true;
		}
		if (c->len == 0)
			c->head = 0;
		if (c->read_ok && c->head + c->len < BUF_SIZE) {
			size_t tail = c->head + c->len;

			r = read(c->fd, c->buf + tail, BUF_SIZE - tail);
			if (r > 0) {
				c->len += (size_t)r;
				moved = true;
			} else if (r == 0) {
				/* The peer is done sending: echo what is
				 * left, then close. */
				c->eof = true;
				c->read_ok = false;
			} else if (errno == EAGAIN) {
				c->read_ok = false;
			} else if (errno != EINTR) {
				goto gone;
			}
		}
		/* The buffer is full only up to its end: move the data down
		 * so the next read has room. */
		if (c->read_ok && c->head > 0 && c->head + c->len == BUF_SIZE) {
			memmove(c->buf, c->buf + c->head, c->len);
			c->head = 0;
			moved = true;
		}
		if (!moved) {
			if (c->eof && c->len == 0)
				goto gone;
			return true;
		}
	}
gone:
	conn_close(c);
	return false;
}

static void accept_all(int ep, int lfd)
{
	for (;;) {
		struct epoll_event ev;
		struct conn *c;
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			if (errno == ECONNABORTED || errno == EPROTO)
				continue;
			/* EMFILE and the like: try again on the next event
			 * (the listener stays readable, level-triggered). */
			perror("epoll_echo: accept4");
			return;
		}
		c = malloc(sizeof *c);
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->read_ok = c->write_ok = c->eof = false;
		c->head = c->len = 0;
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
			perror("epoll_echo: epoll_ctl");
			close(fd);
			free(c);
			continue;
		}
		c->prev = NULL;
		c->next = conns;
		if (conns != NULL)
			conns->prev = c;
		conns = c;
		served++;
		open_conns++;
	}
}

int main(int argc, char **argv)
{
	const char *bind_addr = "127.0.0.1";
	long port = 7777;
	struct epoll_event ev, evs[MAX_EVENTS];
	int ep, lfd, sfd;
	bool running = true;

	int status = peer_server_options(argc, argv, "epoll_echo", usage, &bind_addr, &port);
	if (status >= 0)
		return status;
	/* Room for many connections, as far as the hard limit allows. */
	peer_raise_nofile();
	sfd = peer_stop_signals("epoll_echo", SFD_NONBLOCK);
	if (sfd < 0)
		return 1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		perror("epoll_echo: epoll_create1");
		return 1;
	}
	ev.events = EPOLLIN;
	ev.data.ptr = &signal_tag;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) != 0) {
		perror("epoll_echo: epoll_ctl");
		return 1;
	}
	/* Listening is the last step: the port printed means ready. */
	lfd = peer_listen("epoll_echo", bind_addr, port, SOCK_NONBLOCK, &status);
	if (lfd < 0)
		return status;
	ev.events = EPOLLIN;
	ev.data.ptr = &listen_tag;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) {
		perror("epoll_echo: epoll_ctl");
		return 1;
	}

	while (running) {
		int n = epoll_wait(ep, evs, MAX_EVENTS, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("epoll_echo: epoll_wait");
			break;
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			uint32_t e = evs[i].events;
			struct conn *c;

			if (p == &listen_tag) {
				accept_all(ep, lfd);
				continue;
			}
			if (p == &signal_tag) {
				running = false;
				continue;
			}
			c = p;
			if ((e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !c->eof)
				c->read_ok = true;
			if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
				c->write_ok = true;
			conn_run(c);
		}
	}
	close(lfd);
	close(sfd);
	printf("epoll_echo: stopped; %lu connection%s served, %lu open at the stop\n",
	       served, served == 1 ? "" : "s", open_conns);
	while (conns != NULL)
		conn_close(conns);
	close(ep);
	return 0;
}
