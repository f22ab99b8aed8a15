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
 * destroy.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proactor.h"

#define BUF_SIZE 16384
#define MAX_THREADS 256
#define ACCEPT_RETRY_NS (100u * 1000u * 1000u) /* after EMFILE and the like */

struct server {
	px_proactor *px;
	int lfd;
	atomic_ulong accepted;
	atomic_ulong open;
	atomic_bool paused;     /* accepts back off after EMFILE and the like */
};

struct conn {
	struct server *srv;
	int fd;
	char buf[BUF_SIZE];
};

static void on_read(const px_completion *c);
static void on_write(const px_completion *c);
static void on_accept(const px_completion *c);

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

static void accept_again(struct server *s)
{
	int rc = px_accept(s->px, s->lfd, on_accept, s);

	if (rc < 0 && rc != -ESHUTDOWN)
		fprintf(stderr, "echo_server: accept: %s; no longer accepting\n",
			px_strerror(rc));
}

static void on_accept_retry(const px_completion *c)
{
	if (c->error == 0)
		accept_again(c->user);
}

static void on_accept(const px_completion *c)
{
	struct server *s = c->user;
	struct conn *k;

	switch (c->error) {
	case 0:
		break;
	case ECANCELED:
	case ESHUTDOWN:
		return;         /* stopping */
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM:
		/* Out of descriptors or memory: give the connections being
		 * served a moment to close some before trying again (an
		 * accept re-armed at once would fail at once, and spin).
		 * Said once per episode, not per retry. */
		if (!atomic_exchange(&s->paused, true))
			fprintf(stderr, "echo_server: accept: %s; pausing accepts, "
				"retrying every %u ms\n", px_strerror(c->error),
				ACCEPT_RETRY_NS / 1000000u);
		if (px_timer_start(s->px, ACCEPT_RETRY_NS, on_accept_retry, s) < 0)
			accept_again(s);
		return;
	default:
		/* ECONNABORTED and friends concern one connection only. */
		accept_again(s);
		return;
	}

	if (atomic_exchange(&s->paused, false))
		fprintf(stderr, "echo_server: accepting again\n");
	atomic_fetch_add(&s->accepted, 1);
	k = malloc(sizeof(*k));
	if (!k) {
		close(c->new_fd);
	} else {
		k->srv = s;
		k->fd = c->new_fd;
		atomic_fetch_add(&s->open, 1);
		conn_read(k);
	}
	accept_again(s);
}

static void print_stats(px_proactor *px, const char *when)
{
	struct px_stats st;

	if (px_stats(px, &st) < 0)
		return;
	printf("echo_server: stats %s: operations started %llu, deferred %llu, "
	       "completed %llu, cancelled %llu, timed out %llu, in flight %llu; "
	       "leader turns %llu, leader interrupts %llu, follower wake-ups "
	       "%llu; leaders waited %.3f s, followers slept %.3f s, callbacks "
	       "took %.3f s\n",
	       when, (unsigned long long)st.started,
	       (unsigned long long)st.deferred, (unsigned long long)st.completed,
	       (unsigned long long)st.cancelled, (unsigned long long)st.timed_out,
	       (unsigned long long)st.in_flight,
	       (unsigned long long)st.leader_turns,
	       (unsigned long long)st.leader_interrupts,
	       (unsigned long long)st.follower_wakeups, (double)st.wait_ns / 1e9,
	       (double)st.follower_sleep_ns / 1e9, (double)st.dispatch_ns / 1e9);
	fflush(stdout);
}

static void *worker(void *arg)
{
	struct server *s = arg;
	int rc;

	while ((rc = px_handle_events(s->px, -1)) >= 0)
		;
	if (rc != -ESHUTDOWN) {
		fprintf(stderr, "echo_server: px_handle_events: %s\n", px_strerror(rc));
		kill(getpid(), SIGTERM);  /* let main shut everything down */
	}
	return NULL;
}

static int listen_on(const char *addr, const char *port, char *name, size_t len)
{
	struct addrinfo hints, *res, *ai;
	int fd = -1, rc, one = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(addr, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "echo_server: %s port %s: %s\n", addr ? addr : "*",
			port, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, SOMAXCONN) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		fprintf(stderr, "echo_server: cannot listen on %s port %s: %s\n",
			addr ? addr : "*", port, strerror(errno));
		return -1;
	}

	/* The address and port actually bound (port 0 picks one). */
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv,
			sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(name, len, "%s port %s", host, serv);
	else
		snprintf(name, len, "port %s", port);
	return fd;
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
		prog, MAX_THREADS);
}

/* A whole decimal number from lo to hi, or -1. */
static long number(const char *s, long lo, long hi)
{
	char *end;
	long v;

	if (!*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	return v;
}

int main(int argc, char **argv)
{
	const char *config = NULL, *port = "7777", *bind_addr = NULL;
	long nthreads = 2;
	struct server srv = { .lfd = -1 };
	pthread_t threads[MAX_THREADS];
	char err[512], where[NI_MAXHOST + NI_MAXSERV + 16];
	sigset_t stop_set;	/* SIGINT, SIGTERM; and SIGUSR1 for statistics */
	int opt, rc, sig;

	while ((opt = getopt(argc, argv, "e:p:t:b:h")) != -1) {
		switch (opt) {
		case 'e':
			config = optarg;
			break;
		case 'p':
			if (number(optarg, 0, 65535) < 0) {
				fprintf(stderr, "%s: bad port \"%s\"\n", argv[0], optarg);
				usage(stderr, argv[0]);
				return 2;
			}
			port = optarg;
			break;
		case 't':
			nthreads = number(optarg, 1, MAX_THREADS);
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

	/* Only main takes SIGINT/SIGTERM (with sigwait): block them before
	 * any thread exists, so every thread inherits the mask.  A peer that
	 * goes away must not kill us with SIGPIPE. */
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGINT);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = px_create(&srv.px, config, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "echo_server: cannot create the proactor: %s (%s)\n",
			err[0] ? err : px_strerror(rc), px_strerror(rc));
		return 1;
	}
	srv.lfd = listen_on(bind_addr, port, where, sizeof(where));
	if (srv.lfd < 0) {
		px_destroy(srv.px);
		return 1;
	}
	rc = px_accept(srv.px, srv.lfd, on_accept, &srv);
	if (rc < 0) {
		fprintf(stderr, "echo_server: accept: %s\n", px_strerror(rc));
		px_destroy(srv.px);
		close(srv.lfd);
		return 1;
	}

	long started = 0;
	for (; started < nthreads; started++) {
		rc = pthread_create(&threads[started], NULL, worker, &srv);
		if (rc) {
			fprintf(stderr, "echo_server: pthread_create: %s\n", strerror(rc));
			break;
		}
	}
	if (started == nthreads) {
		printf("echo_server: engine \"%s\" listening on %s, %ld thread%s\n",
		       px_engine_name(srv.px), where, nthreads,
		       nthreads == 1 ? "" : "s");
		fflush(stdout);
		while (sigwait(&stop_set, &sig) == 0 && sig == SIGUSR1)
			print_stats(srv.px, "now");
	}

	px_stop(srv.px);
	for (long i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	print_stats(srv.px, "at exit");
	rc = px_destroy(srv.px);
	if (rc < 0)
		fprintf(stderr, "echo_server: px_destroy: %s\n", px_strerror(rc));
	close(srv.lfd);
	printf("echo_server: stopped; %lu connection%s served, %lu left open\n",
	       (unsigned long)atomic_load(&srv.accepted),
	       atomic_load(&srv.accepted) == 1 ? "" : "s",
	       (unsigned long)atomic_load(&srv.open));
	return started == nthreads && rc == 0 ? 0 : 1;
}
