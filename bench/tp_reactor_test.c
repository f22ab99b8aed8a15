/*
 * tp_reactor_test - the echo benchmark (common.h) on the Leader/Followers
 * thread-pool reactor of tp_reactor.c: non-blocking sockets, edge-triggered
 * handlers that read and write until EAGAIN.
 *
 * Each socket has its handler.  A handler remembers, per direction, whether
 * the socket may be ready (set by an event, cleared by EAGAIN), so it makes
 * no system call that is known to fail.  It alternates: write what may be
 * written, read one chunk, and again, until neither direction can move.
 */
#include "common.h"
#include "tp_reactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct session {
	tp_handler client_h;
	tp_handler server_h;
	int cfd, sfd;
	/* client end */
	bool c_read_ok, c_write_ok, c_dead;
	size_t tx_off;                  /* bytes of the current block sent */
	unsigned char *rx;
	/* server end */
	bool s_read_ok, s_write_ok, s_dead;
	bench_ring ring;
	bench_counts n;
} session;

static bench_opts opt;
static atomic_bool stopping;
static const unsigned char *pattern;

static bool stopped(void)
{
	return atomic_load_explicit(&stopping, memory_order_relaxed);
}

static void note_events(uint32_t ev, bool *read_ok, bool *write_ok)
{
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
		*read_ok = true;
	if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
		*write_ok = true;
}

static void client_fn(tp_handler *h, uint32_t ev)
{
	session *s = h->user;
	bool moved = true;
	ssize_t r;

	note_events(ev, &s->c_read_ok, &s->c_write_ok);
	while (moved && !s->c_dead && !stopped()) {
		moved = false;
		while (s->c_write_ok &&
		       (s->tx_off > 0 ||
			bench_may_send(&opt, s->n.client_sent, s->n.client_recv))) {
			r = tp_write(s->cfd, pattern + s->tx_off, opt.block - s->tx_off);
			if (r < 0) {
				if (errno == EAGAIN)
					s->c_write_ok = false;
				else if (errno != EINTR)
					s->c_dead = true;
				break;
			}
			s->n.client_sent += (uint64_t)r;
			s->tx_off = (s->tx_off + (size_t)r) % opt.block;
			moved = true;
		}
		if (s->c_read_ok && !s->c_dead) {
			r = tp_read(s->cfd, s->rx, opt.block);
			if (r > 0) {
				if (opt.verify && !bench_verify(&opt, s->n.client_recv, s->rx, (size_t)r)) {
					fprintf(stderr, "tp_reactor_test: echo differs at byte %llu\n",
						(unsigned long long)s->n.client_recv);
					s->c_dead = true;
					break;
				}
				bench_delay(&opt);
				s->n.client_recv += (uint64_t)r;
				moved = true;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				s->c_dead = true;
			} else if (errno == EAGAIN) {
				s->c_read_ok = false;
			}
		}
	}
}

static void server_fn(tp_handler *h, uint32_t ev)
{
	session *s = h->user;
	bool moved = true;
	unsigned char *p;
	size_t n;
	ssize_t r;

	note_events(ev, &s->s_read_ok, &s->s_write_ok);
	while (moved && !s->s_dead && !stopped()) {
		moved = false;
		while (s->s_write_ok && s->ring.len > 0) {
			p = bench_ring_data(&s->ring, &n);
			r = tp_write(s->sfd, p, n);
			if (r < 0) {
				if (errno == EAGAIN)
					s->s_write_ok = false;
				else if (errno != EINTR)
					s->s_dead = true;
				break;
			}
			bench_ring_drained(&s->ring, (size_t)r);
			s->n.server_sent += (uint64_t)r;
			moved = true;
		}
		bench_ring_rewind(&s->ring);
		p = bench_ring_space(&s->ring, opt.block, &n);
		if (s->s_read_ok && n > 0 && !s->s_dead) {
			r = tp_read(s->sfd, p, n);
			if (r > 0) {
				bench_delay(&opt);
				bench_ring_filled(&s->ring, (size_t)r);
				s->n.server_recv += (uint64_t)r;
				moved = true;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				s->s_dead = true;
			} else if (errno == EAGAIN) {
				s->s_read_ok = false;
			}
		}
	}
}

/* Every loop thread and main meet here before the clock starts: on a
 * loaded machine a new thread can start late, and that time is not the
 * reactor's (proactor_test, likewise, starts its clock once its loop
 * threads have connected every session). */
static pthread_barrier_t started;

static void *loop_thread(void *arg)
{
	pthread_barrier_wait(&started);
	int err = tp_reactor_run(arg);

	if (err != 0)
		fprintf(stderr, "tp_reactor_test: event loop failed: %s\n", strerror(-err));
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	tp_reactor *reactor;
	session *ss;
	bench_counts *per;
	pthread_t *th;
	double t0, t1;
	int lfd, err, code;

	bench_parse(&opt, argc, argv, "tp_reactor_test", false);
	if (bench_raise_nofile(2L * opt.sessions + 64) != 0)
		return BENCH_EXIT_CHECK;
	pattern = bench_pattern(opt.block);
	ss = calloc((size_t)opt.sessions, sizeof *ss);
	per = calloc((size_t)opt.sessions, sizeof *per);
	th = calloc((size_t)opt.threads, sizeof *th);
	if (ss == NULL || per == NULL || th == NULL) {
		fprintf(stderr, "tp_reactor_test: out of memory\n");
		return BENCH_EXIT_CHECK;
	}
	err = tp_reactor_create(&reactor, 0);
	if (err != 0) {
		fprintf(stderr, "tp_reactor_test: epoll: %s\n", strerror(-err));
		return BENCH_EXIT_CHECK;
	}
	lfd = bench_listen(&addr, false);
	if (lfd < 0)
		return BENCH_EXIT_CHECK;

	/* Connect and accept one session at a time: the accepted socket is
	 * then the peer of the client just connected. */
	for (int i = 0; i < opt.sessions; i++) {
		session *s = &ss[i];

		if (bench_connect_pair("tp_reactor_test", lfd, &addr, true,
				       &s->cfd, &s->sfd) != 0)
			return BENCH_EXIT_CHECK;
		s->rx = malloc(opt.block);
		if (s->rx == NULL || bench_ring_init(&s->ring, &opt) != 0) {
			fprintf(stderr, "tp_reactor_test: out of memory\n");
			return BENCH_EXIT_CHECK;
		}
	}
	close(lfd);

	bench_signals();
	for (int i = 0; i < opt.sessions; i++) {
		session *s = &ss[i];

		err = tp_reactor_add(reactor, &s->server_h, s->sfd, server_fn, s);
		if (err == 0)
			err = tp_reactor_add(reactor, &s->client_h, s->cfd, client_fn, s);
		if (err != 0) {
			fprintf(stderr, "tp_reactor_test: epoll_ctl: %s\n", strerror(-err));
			return BENCH_EXIT_CHECK;
		}
	}
	pthread_barrier_init(&started, NULL, (unsigned)opt.threads + 1);
	for (int i = 0; i < opt.threads; i++) {
		err = pthread_create(&th[i], NULL, loop_thread, reactor);
		if (err != 0) {
			fprintf(stderr, "tp_reactor_test: pthread_create: %s\n", strerror(err));
			return BENCH_EXIT_CHECK;
		}
	}
	pthread_barrier_wait(&started);
	t0 = bench_now();
	if (bench_wait_run(&opt))
		fprintf(stderr, "tp_reactor_test: interrupted\n");
	atomic_store(&stopping, true);
	t1 = bench_now();
	tp_reactor_stop(reactor);
	for (int i = 0; i < opt.threads; i++)
		pthread_join(th[i], NULL);

	for (int i = 0; i < opt.sessions; i++)
		per[i] = ss[i].n;
	code = bench_report(&opt, "tp_reactor", "epoll-lf", per, t1 - t0);

	tp_reactor_destroy(reactor);
	for (int i = 0; i < opt.sessions; i++) {
		close(ss[i].cfd);
		close(ss[i].sfd);
		free(ss[i].rx);
		bench_ring_free(&ss[i].ring);
	}
	free(ss);
	free(per);
	free(th);
	return code;
}
