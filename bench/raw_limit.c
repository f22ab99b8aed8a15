/*
 * raw_limit - the echo benchmark (common.h) with no framework at all:
 * blocking sockets and one thread per connection end, so the kernel's
 * scheduler is the only event demultiplexer.  It is the nearest thing to
 * what this machine can do, the ceiling the other two programs are read
 * against.
 *
 * Server end: one thread reads up to a block, waits the callback delay and
 * writes back what it read.
 * Client end, half duplex (-w 0): one thread writes a block and reads until
 * its whole echo is back.  Full duplex: the end has a sender thread, which
 * writes blocks while the window allows and otherwise sleeps on the
 * session's condition variable, and a receiver thread, which reads echoes
 * and wakes the sender.  (A single blocking thread cannot wait for both
 * directions at once.)
 *
 * -n is ignored: the line reports the threads really used.
 */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct session {
	int cfd, sfd;
	pthread_mutex_t lock;           /* guards the client's sent/recv */
	pthread_cond_t room;            /* the window opened */
	bool sender_waits;
	bench_counts n;
} session;

static bench_opts opt;
static atomic_bool stopping;
/* Every thread waits here until all exist, so that creating a few thousand
 * threads is not counted as run time. */
static pthread_barrier_t gate;
static const unsigned char *pattern;

static bool stopped(void)
{
	return atomic_load_explicit(&stopping, memory_order_relaxed);
}

/* Write all n bytes; false on error or when the run is over. */
static bool write_all(int fd, const void *buf, size_t n, uint64_t *count)
{
	const unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = write(fd, p, n);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (stopped())
			return false;
		*count += (uint64_t)r;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

static void *server_thread(void *arg)
{
	session *s = arg;
	unsigned char *buf = malloc(opt.block);
	ssize_t r;

	pthread_barrier_wait(&gate);
	while (buf != NULL && (r = read(s->sfd, buf, opt.block)) > 0) {
		if (stopped())
			break;
		bench_delay(&opt);
		s->n.server_recv += (uint64_t)r;
		if (!write_all(s->sfd, buf, (size_t)r, &s->n.server_sent))
			break;
	}
	free(buf);
	return NULL;
}

static bool check_echo(session *s, const unsigned char *buf, size_t n)
{
	if (!opt.verify || bench_verify(&opt, s->n.client_recv, buf, n))
		return true;
	fprintf(stderr, "raw_limit: echo differs at byte %llu\n",
		(unsigned long long)s->n.client_recv);
	return false;
}

/* Half duplex: the whole client end in one thread. */
static void *client_thread(void *arg)
{
	session *s = arg;
	unsigned char *buf = malloc(opt.block);

	pthread_barrier_wait(&gate);
	while (buf != NULL && !stopped()) {
		size_t got = 0;

		if (!write_all(s->cfd, pattern, opt.block, &s->n.client_sent))
			break;
		while (got < opt.block) {
			ssize_t r = read(s->cfd, buf, opt.block - got);

			if (r <= 0 || stopped() || !check_echo(s, buf, (size_t)r))
				goto out;
			bench_delay(&opt);
			s->n.client_recv += (uint64_t)r;
			got += (size_t)r;
		}
	}
out:
	free(buf);
	return NULL;
}

/* Full duplex, sending side. */
static void *sender_thread(void *arg)
{
	session *s = arg;
	uint64_t sent = 0;

	pthread_barrier_wait(&gate);
	for (;;) {
		pthread_mutex_lock(&s->lock);
		while (!bench_may_send(&opt, sent, s->n.client_recv) && !stopped()) {
			s->sender_waits = true;
			pthread_cond_wait(&s->room, &s->lock);
		}
		pthread_mutex_unlock(&s->lock);
		if (stopped())
			break;
		/* Only this thread writes client_sent; the receiver reads
		 * only client_recv. */
		if (!write_all(s->cfd, pattern, opt.block, &s->n.client_sent))
			break;
		sent += opt.block;
	}
	return NULL;
}

/* Full duplex, receiving side. */
static void *receiver_thread(void *arg)
{
	session *s = arg;
	unsigned char *buf = malloc(opt.block);
	ssize_t r;

	pthread_barrier_wait(&gate);
	while (buf != NULL && (r = read(s->cfd, buf, opt.block)) > 0) {
		if (stopped() || !check_echo(s, buf, (size_t)r))
			break;
		bench_delay(&opt);
		pthread_mutex_lock(&s->lock);
		s->n.client_recv += (uint64_t)r;
		if (s->sender_waits) {
			s->sender_waits = false;
			pthread_cond_signal(&s->room);
		}
		pthread_mutex_unlock(&s->lock);
	}
	free(buf);
	return NULL;
}

static int spawn(pthread_t *t, const pthread_attr_t *attr,
		 void *(*fn)(void *), void *arg)
{
	int err = pthread_create(t, attr, fn, arg);

	if (err != 0)
		fprintf(stderr, "raw_limit: pthread_create: %s (try fewer sessions)\n",
			strerror(err));
	return err;
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr;
	pthread_attr_t attr;
	session *ss;
	bench_counts *per;
	pthread_t *th;
	int per_session = 0, nth = 0;
	double t0, t1;
	int lfd, code;

	bench_parse(&opt, argc, argv, "raw_limit", false);
	if (bench_raise_nofile(2L * opt.sessions + 64) != 0)
		return BENCH_EXIT_CHECK;
	pattern = bench_pattern(opt.block);
	per_session = opt.window == 0 ? 2 : 3;
	ss = calloc((size_t)opt.sessions, sizeof *ss);
	per = calloc((size_t)opt.sessions, sizeof *per);
	th = calloc((size_t)opt.sessions * (size_t)per_session, sizeof *th);
	if (ss == NULL || per == NULL || th == NULL) {
		fprintf(stderr, "raw_limit: out of memory\n");
		return BENCH_EXIT_CHECK;
	}
	lfd = bench_listen(&addr, false);
	if (lfd < 0)
		return BENCH_EXIT_CHECK;
	for (int i = 0; i < opt.sessions; i++) {
		session *s = &ss[i];

		if (bench_connect_pair("raw_limit", lfd, &addr, false,
				       &s->cfd, &s->sfd) != 0)
			return BENCH_EXIT_CHECK;
		pthread_mutex_init(&s->lock, NULL);
		pthread_cond_init(&s->room, NULL);
	}
	close(lfd);

	bench_signals();
	/* Small stacks: a thousand sessions make three thousand threads. */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_barrier_init(&gate, NULL, (unsigned)(opt.sessions * per_session + 1));
	for (int i = 0; i < opt.sessions; i++) {
		session *s = &ss[i];

		if (spawn(&th[nth++], &attr, server_thread, s) != 0)
			return BENCH_EXIT_CHECK;
		if (opt.window == 0) {
			if (spawn(&th[nth++], &attr, client_thread, s) != 0)
				return BENCH_EXIT_CHECK;
		} else {
			if (spawn(&th[nth++], &attr, receiver_thread, s) != 0 ||
			    spawn(&th[nth++], &attr, sender_thread, s) != 0)
				return BENCH_EXIT_CHECK;
		}
	}
	pthread_barrier_wait(&gate);
	t0 = bench_now();
	if (bench_wait_run(&opt))
		fprintf(stderr, "raw_limit: interrupted\n");
	atomic_store(&stopping, true);
	t1 = bench_now();
	/* Get every thread out of its blocking call. */
	for (int i = 0; i < opt.sessions; i++) {
		session *s = &ss[i];

		shutdown(s->cfd, SHUT_RDWR);
		shutdown(s->sfd, SHUT_RDWR);
		pthread_mutex_lock(&s->lock);
		pthread_cond_broadcast(&s->room);
		pthread_mutex_unlock(&s->lock);
	}
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);

	for (int i = 0; i < opt.sessions; i++)
		per[i] = ss[i].n;
	opt.threads = nth;
	code = bench_report(&opt, "raw_limit", "threads", per, t1 - t0);

	pthread_attr_destroy(&attr);
	pthread_barrier_destroy(&gate);
	for (int i = 0; i < opt.sessions; i++) {
		close(ss[i].cfd);
		close(ss[i].sfd);
		pthread_mutex_destroy(&ss[i].lock);
		pthread_cond_destroy(&ss[i].room);
	}
	free(ss);
	free(per);
	free(th);
	return code;
}
