/*
 * proactor_test - the echo benchmark (common.h) on the proactor, through
 * the public API only.
 *
 * Client end: one read always pending; a block write (px_write_stream_all)
 * started whenever none is pending and the window allows.  Server end: the
 * echo ring of common.h, with at most one read (into its free space) and
 * one write (from its filled space) pending at a time.  Read and write
 * completions of one end can run at the same time in two threads, so each
 * end has a mutex around its counters and flags; operations are started
 * after it is released.
 *
 * Shutdown: when the time is up the callbacks stop starting operations,
 * px_stop() ends the px_handle_events() loops, and px_destroy() delivers
 * what is still pending (ECANCELED) to callbacks that only note it.  The
 * session memory is freed after px_destroy(), so no late callback can touch
 * freed memory.
 *
 * --per-thread gives each loop thread a proactor of its own and deals the
 * sessions out between them (session i to proactor i mod threads; the
 * accepts all go through the first, and the accepted end then follows its
 * client).  The threads then share no engine state at all: the figure is
 * a reference for what sharing one proactor costs, not a run of the
 * leader/followers design.
 */
#include "common.h"
#include "px_bench.h"

#include <proactor.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct client {
	pthread_mutex_t lock;
	int fd;
	in_port_t port;                 /* local port, bound before the connect */
	bool paired;                    /* its server end was accepted (setup_lock) */
	uint64_t started;               /* bytes of the blocks whose write began */
	bool writing;
	unsigned char *rx;
	bench_counts n;                 /* client_sent, client_recv */
	px_proactor *px;                /* the proactor of its operations */
} client;

typedef struct server {
	pthread_mutex_t lock;
	int fd;
	bool reading, writing;
	bench_ring ring;
	bench_counts n;                 /* server_sent, server_recv */
	px_proactor *px;                /* its client's */
} server;

static bench_opts opt;
static px_proactor *px;                /* the accepts' (and the only one) */
static px_proactor **pxs;               /* --per-thread: one per thread */
static int npx = 1;
static atomic_bool stopping;
static atomic_bool failed_once;
static const unsigned char *pattern;
static client *clients;
static server *servers;

/* Set-up progress, guarded by setup_lock. */
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t setup_cond = PTHREAD_COND_INITIALIZER;
static int connected, accepted, setup_errors;
static int clients_bound;               /* clients[0..n) have their port */
static int listen_fd = -1;

static bool stopped(void)
{
	return atomic_load_explicit(&stopping, memory_order_relaxed);
}

/* Report the first unexpected failure of the run (later ones would only
 * repeat it); --check catches the sessions it starves. */
static void failure(const char *what, int err)
{
	if (!atomic_exchange(&failed_once, true))
		fprintf(stderr, "proactor_test: %s: %s\n", what, px_strerror(err));
}

/* Returns true if the callback must do nothing more: the run is over, or
 * the completion ends this end's traffic (an error, the end of the stream,
 * the cancellation px_destroy delivers). */
static bool finished(const px_completion *c)
{
	if (c->error == 0 && c->bytes > 0)
		return stopped();
	if (!stopped() && c->error != ECANCELED)
		failure(px_op_name(c->op), c->error != 0 ? c->error : EPIPE);
	return true;
}

static void client_write_done(const px_completion *c);
static void client_read_done(const px_completion *c);
static void server_write_done(const px_completion *c);
static void server_read_done(const px_completion *c);

static void start_client_write(client *cl)
{
	int r = px_write_stream_all(cl->px, cl->fd, pattern, opt.block,
				    client_write_done, cl);

	if (r < 0 && !stopped())
		failure("px_write_stream_all", r);
}

static void start_client_read(client *cl)
{
	int r = px_read_stream(cl->px, cl->fd, cl->rx, opt.block, client_read_done, cl);

	if (r < 0 && !stopped())
		failure("px_read_stream", r);
}

/* Lock held.  Claim the next block if the window allows it. */
static bool client_claim_block(client *cl)
{
	if (cl->writing || !bench_may_send(&opt, cl->started, cl->n.client_recv))
		return false;
	cl->writing = true;
	cl->started += opt.block;
	return true;
}

static void client_write_done(const px_completion *c)
{
	client *cl = c->user;
	bool more;

	if (finished(c))
		return;
	pthread_mutex_lock(&cl->lock);
	cl->writing = false;
	cl->n.client_sent += c->bytes;
	more = client_claim_block(cl);
	pthread_mutex_unlock(&cl->lock);
	if (more)
		start_client_write(cl);
}

static void client_read_done(const px_completion *c)
{
	client *cl = c->user;
	bool more;

	if (finished(c))
		return;
	/* Only this callback changes client_recv, and one read is pending
	 * at a time, so it may be read here without the lock. */
	if (opt.verify && !bench_verify(&opt, cl->n.client_recv, cl->rx, c->bytes)) {
		failure("echo check", EILSEQ);
		return;
	}
	bench_delay(&opt);
	pthread_mutex_lock(&cl->lock);
	cl->n.client_recv += c->bytes;
	more = client_claim_block(cl);
	pthread_mutex_unlock(&cl->lock);
	if (more)
		start_client_write(cl);
	start_client_read(cl);
}

/* Lock held.  What the server end may start now: the echo of what it holds
 * and a read into its free space.  Marks them pending. */
static void server_next(server *sv, unsigned char **wp, size_t *wn,
			unsigned char **rp, size_t *rn)
{
	*wn = 0;
	*rn = 0;
	if (!sv->writing && sv->ring.len > 0) {
		*wp = bench_ring_data(&sv->ring, wn);
		sv->writing = true;
	}
	if (!sv->reading) {
		bench_ring_rewind(&sv->ring);
		*rp = bench_ring_space(&sv->ring, opt.block, rn);
		sv->reading = *rn > 0;
	}
}

static void server_start(server *sv, unsigned char *wp, size_t wn,
			 unsigned char *rp, size_t rn)
{
	int r;

	if (wn > 0) {
		r = px_write_stream(sv->px, sv->fd, wp, wn, server_write_done, sv);
		if (r < 0 && !stopped())
			failure("px_write_stream", r);
	}
	if (rn > 0) {
		r = px_read_stream(sv->px, sv->fd, rp, rn, server_read_done, sv);
		if (r < 0 && !stopped())
			failure("px_read_stream", r);
	}
}

static void server_read_done(const px_completion *c)
{
	server *sv = c->user;
	unsigned char *wp = NULL, *rp = NULL;
	size_t wn, rn;

	if (finished(c))
		return;
	bench_delay(&opt);
	pthread_mutex_lock(&sv->lock);
	sv->reading = false;
	bench_ring_filled(&sv->ring, c->bytes);
	sv->n.server_recv += c->bytes;
	server_next(sv, &wp, &wn, &rp, &rn);
	pthread_mutex_unlock(&sv->lock);
	server_start(sv, wp, wn, rp, rn);
}

static void server_write_done(const px_completion *c)
{
	server *sv = c->user;
	unsigned char *wp = NULL, *rp = NULL;
	size_t wn, rn;

	if (finished(c))
		return;
	pthread_mutex_lock(&sv->lock);
	sv->writing = false;
	bench_ring_drained(&sv->ring, c->bytes);
	sv->n.server_sent += c->bytes;
	server_next(sv, &wp, &wn, &rp, &rn);
	pthread_mutex_unlock(&sv->lock);
	server_start(sv, wp, wn, rp, rn);
}

/* ---- set-up ---------------------------------------------------------- */

static void setup_error(const char *what, int err)
{
	fprintf(stderr, "proactor_test: %s: %s\n", what, px_strerror(err));
	pthread_mutex_lock(&setup_lock);
	setup_errors++;
	pthread_cond_broadcast(&setup_cond);
	pthread_mutex_unlock(&setup_lock);
}

/* The client not yet accepted whose local address is the peer of an
 * accepted connection, or NULL.  Called with setup_lock held. */
static client *find_client(const px_completion *c)
{
	const struct sockaddr_in *peer = (const struct sockaddr_in *)&c->addr;

	if (c->addrlen < sizeof *peer || peer->sin_family != AF_INET ||
	    peer->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
		return NULL;
	for (int i = 0; i < clients_bound; i++)
		if (clients[i].port == peer->sin_port && !clients[i].paired)
			return &clients[i];
	return NULL;
}

static void accept_done(const px_completion *c)
{
	server *sv;
	int more, r;

	if (c->error != 0) {
		if (c->error != ECANCELED)
			setup_error("accept", c->error);
		return;
	}
	/* The accepted end must come from one of our clients: a listener on
	 * port 0 may get a port another program has just let go of while
	 * one of its clients still connects to it, and counting that
	 * stranger would leave one of our sessions without a server.
	 * Strangers are closed and the accept goes on. */
	pthread_mutex_lock(&setup_lock);
	client *own = find_client(c);
	if (own == NULL) {
		pthread_mutex_unlock(&setup_lock);
		close(c->new_fd);
		r = px_accept(px, listen_fd, accept_done, NULL);
		if (r < 0)
			setup_error("px_accept", r);
		return;
	}
	own->paired = true;
	sv = &servers[accepted];
	more = ++accepted < opt.sessions;
	pthread_cond_broadcast(&setup_cond);
	pthread_mutex_unlock(&setup_lock);

	sv->fd = c->new_fd;
	sv->px = own->px;
	if (bench_tune(sv->fd, !opt.blocking) != 0) {
		setup_error("accepted socket", EIO);
		return;
	}
	/* The end is not shared yet: no lock needed for its first read. */
	sv->reading = true;
	r = px_read_stream(sv->px, sv->fd, sv->ring.buf, opt.block, server_read_done, sv);
	if (r < 0)
		setup_error("px_read_stream", r);
	if (more) {
		r = px_accept(px, listen_fd, accept_done, NULL);
		if (r < 0)
			setup_error("px_accept", r);
	}
}

static void connect_done(const px_completion *c)
{
	if (c->error != 0) {
		if (c->error != ECANCELED)
			setup_error("connect", c->error);
		return;
	}
	pthread_mutex_lock(&setup_lock);
	connected++;
	pthread_cond_broadcast(&setup_cond);
	pthread_mutex_unlock(&setup_lock);
}

/* Wait until every session is connected and accepted.  Returns false on a
 * failure or after 30 s. */
static bool wait_setup(void)
{
	double end = bench_now() + 30;
	bool ok;

	pthread_mutex_lock(&setup_lock);
	while ((connected < opt.sessions || accepted < opt.sessions) &&
	       setup_errors == 0 && bench_now() < end) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&setup_cond, &setup_lock, &ts);
	}
	ok = connected == opt.sessions && accepted == opt.sessions;
	if (!ok && setup_errors == 0)
		fprintf(stderr, "proactor_test: set-up timed out: %d connected, "
			"%d accepted of %d\n", connected, accepted, opt.sessions);
	pthread_mutex_unlock(&setup_lock);
	return ok;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	char engine_name[256];
	bench_counts *per;
	pthread_t *th;
	double t0, t1;
	int r, code = BENCH_EXIT_CHECK;
	bool ok;

	bench_parse(&opt, argc, argv, "proactor_test", true);
	if (bench_raise_nofile(2L * opt.sessions + 128) != 0)
		return BENCH_EXIT_CHECK;
	pattern = bench_pattern(opt.block);
	clients = calloc((size_t)opt.sessions, sizeof *clients);
	servers = calloc((size_t)opt.sessions, sizeof *servers);
	per = calloc((size_t)opt.sessions, sizeof *per);
	th = calloc((size_t)opt.threads, sizeof *th);
	if (clients == NULL || servers == NULL || per == NULL || th == NULL) {
		fprintf(stderr, "proactor_test: out of memory\n");
		return BENCH_EXIT_CHECK;
	}
	for (int i = 0; i < opt.sessions; i++) {
		clients[i].fd = servers[i].fd = -1;
		pthread_mutex_init(&clients[i].lock, NULL);
		pthread_mutex_init(&servers[i].lock, NULL);
		clients[i].rx = malloc(opt.block);
		if (clients[i].rx == NULL || bench_ring_init(&servers[i].ring, &opt) != 0) {
			fprintf(stderr, "proactor_test: out of memory\n");
			return BENCH_EXIT_CHECK;
		}
	}

	if (opt.per_thread)
		npx = opt.threads;
	pxs = calloc((size_t)npx, sizeof *pxs);
	if (pxs == NULL) {
		fprintf(stderr, "proactor_test: out of memory\n");
		return BENCH_EXIT_CHECK;
	}
	for (int k = 0; k < npx; k++) {
		r = bench_px_create("proactor_test", opt.engine, &pxs[k],
				    engine_name, sizeof engine_name);
		if (r != BENCH_EXIT_OK)
			return r;
	}
	px = pxs[0];
	if (opt.per_thread) {
		size_t len = strlen(engine_name);

		snprintf(engine_name + len, sizeof engine_name - len,
			 " per-thread=%d", npx);
	}
	for (int i = 0; i < opt.sessions; i++)
		clients[i].px = pxs[i % npx];

	bench_signals();
	for (int k = 0; k < npx; k++) {
		int n = opt.per_thread ? 1 : opt.threads;

		if (bench_px_start_loops("proactor_test", pxs[k], th + k, n) != 0)
			return BENCH_EXIT_CHECK;
	}

	/* Connect every client while the loop threads accept. */
	listen_fd = bench_listen(&addr, !opt.blocking);
	ok = listen_fd >= 0;
	if (ok) {
		r = px_accept(px, listen_fd, accept_done, NULL);
		if (r < 0) {
			setup_error("px_accept", r);
			ok = false;
		}
	}
	for (int i = 0; ok && i < opt.sessions; i++) {
		clients[i].fd = bench_socket(!opt.blocking);
		if (clients[i].fd < 0) {
			ok = false;
			break;
		}
		/* Bound first, so that its port is known before the server
		 * end can be accepted (find_client). */
		struct sockaddr_in local = {
			.sin_family = AF_INET,
			.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		};
		socklen_t ll = sizeof local;
		if (bind(clients[i].fd, (struct sockaddr *)&local, sizeof local) != 0 ||
		    getsockname(clients[i].fd, (struct sockaddr *)&local, &ll) != 0) {
			perror("proactor_test: bind the client to 127.0.0.1");
			ok = false;
			break;
		}
		pthread_mutex_lock(&setup_lock);
		clients[i].port = local.sin_port;
		clients_bound = i + 1;
		pthread_mutex_unlock(&setup_lock);
		r = px_connect(clients[i].px, clients[i].fd, (struct sockaddr *)&addr,
			       sizeof addr, connect_done, &clients[i]);
		if (r < 0) {
			setup_error("px_connect", r);
			ok = false;
		}
	}
	ok = ok && wait_setup();

	t0 = bench_now();
	if (ok) {
		for (int i = 0; i < opt.sessions; i++) {
			client *cl = &clients[i];
			bool go;

			start_client_read(cl);
			pthread_mutex_lock(&cl->lock);
			go = client_claim_block(cl);
			pthread_mutex_unlock(&cl->lock);
			if (go)
				start_client_write(cl);
		}
		if (bench_wait_run(&opt))
			fprintf(stderr, "proactor_test: interrupted\n");
	}
	atomic_store(&stopping, true);
	t1 = bench_now();
	for (int k = 0; k < npx; k++)
		bench_px_finish("proactor_test", pxs[k], th + k,
				opt.per_thread ? 1 : opt.threads);

	if (ok) {
		for (int i = 0; i < opt.sessions; i++) {
			per[i].client_sent = clients[i].n.client_sent;
			per[i].client_recv = clients[i].n.client_recv;
			per[i].server_sent = servers[i].n.server_sent;
			per[i].server_recv = servers[i].n.server_recv;
		}
		code = bench_report(&opt, "proactor", engine_name, per, t1 - t0);
	}

	if (listen_fd >= 0)
		close(listen_fd);
	for (int i = 0; i < opt.sessions; i++) {
		if (clients[i].fd >= 0)
			close(clients[i].fd);
		if (servers[i].fd >= 0)
			close(servers[i].fd);
		free(clients[i].rx);
		bench_ring_free(&servers[i].ring);
		pthread_mutex_destroy(&clients[i].lock);
		pthread_mutex_destroy(&servers[i].lock);
	}
	free(clients);
	free(servers);
	free(per);
	free(th);
	free(pxs);
	return code;
}
