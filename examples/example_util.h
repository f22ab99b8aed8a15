/*
 * example_util.h - the plumbing the example programs share, so that each
 * example's own file shows what it does with the proactor.
 *
 * Everything here is static inline: each example compiles its own copy and
 * needs no extra object.  It uses only the public API (proactor.h).
 *
 *   ex_number()       a whole decimal number within bounds (option values)
 *   ex_create()       px_create() with a message on failure
 *   ex_listen()       a listening TCP socket on an address and port
 *   struct ex_server  a TCP server: one accept kept pending on the
 *                     listening socket, with a back-off when out of
 *                     descriptors (the process's, or those the engine can
 *                     watch); ex_serve() runs it on THREADS threads
 *                     until SIGINT or SIGTERM (SIGUSR1 prints statistics)
 */
#ifndef EXAMPLE_UTIL_H
#define EXAMPLE_UTIL_H

#include <errno.h>
#include <fcntl.h>
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

#define EX_MAX_THREADS 256
#define EX_ACCEPT_RETRY_NS (100u * 1000u * 1000u) /* after EMFILE and the like */
#define EX_MAX_HELD (EX_MAX_THREADS + 2) /* connections held, below */

/* A whole decimal number from lo to hi, or -1. */
static inline long ex_number(const char *s, long lo, long hi)
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

/* px_create(), saying why it failed (as "PROG: cannot create ..."). */
static inline int ex_create(px_proactor **px, const char *config,
			    const char *prog)
{
	char err[512];
	int rc = px_create(px, config, err, sizeof(err));

	if (rc < 0)
		fprintf(stderr, "%s: cannot create the proactor: %s (%s)\n", prog,
			err[0] ? err : px_strerror(rc), px_strerror(rc));
	return rc;
}

/*
 * A TCP socket listening on addr (NULL: all addresses) and port (0: any
 * free one), close-on-exec; name receives "ADDRESS port N" as bound.
 * Returns the descriptor, or -1 after a message on stderr.
 */
static inline int ex_listen(const char *prog, const char *addr,
			    const char *port, char *name, size_t len)
{
	struct addrinfo hints, *res, *ai;
	int fd = -1, rc, one = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(addr, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "%s: %s port %s: %s\n", prog, addr ? addr : "*",
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
		fprintf(stderr, "%s: cannot listen on %s port %s: %s\n", prog,
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

/* ------------------------------------------------------------------ */

/*
 * A TCP server.  The example fills in prog and on_conn (and counts, if it
 * has counters of its own to print) and calls ex_serve(); on_conn runs in
 * a callback for each accepted connection and starts serving it.  It
 * returns 0 once it has started (it then owns the descriptor), or the
 * negative errno of the start that failed, having undone what it did but
 * left the descriptor open: -EMFILE, -ENFILE or -ENOMEM (the engine cannot
 * take the descriptor now, as the select wait cannot one at FD_SETSIZE or
 * above, or is out of memory) hold the connection for a later try, with
 * accepts paused as for EMFILE; other errors close it.  The example keeps
 * `open` up to date itself (the connections it holds).
 */
struct ex_server {
	const char *prog;       /* for messages: "PROG: ..." */
	int (*on_conn)(struct ex_server *s, int fd);
	void (*counts)(struct ex_server *s); /* optional: printed first in
	                                        the statistics, ending "; " */
	px_proactor *px;
	int lfd;
	atomic_ulong accepted;  /* connections accepted */
	atomic_ulong open;      /* connections not yet closed */
	atomic_bool paused;     /* accepts back off after EMFILE and the like */
	/* Connections accepted whose start the engine refused, tried again
	 * every EX_ACCEPT_RETRY_NS with no accept pending meanwhile: the
	 * select wait takes no descriptor at FD_SETSIZE or above, and an
	 * accept re-armed at once would take, and have to drop, every
	 * connection waiting in the backlog.  Under held_lock. */
	atomic_bool holding;    /* some are held (read without the lock) */
	bool accept_armed;      /* while holding: an accept is still pending */
	unsigned nheld;
	int held[EX_MAX_HELD];
	pthread_mutex_t held_lock;
};

static inline void ex_on_accept(const px_completion *c);

static inline void ex_accept_again(struct ex_server *s)
{
	int rc = px_accept(s->px, s->lfd, ex_on_accept, s);

	if (rc < 0 && rc != -ESHUTDOWN)
		fprintf(stderr, "%s: accept: %s; no longer accepting\n", s->prog,
			px_strerror(rc));
}

static inline void ex_on_accept_retry(const px_completion *c)
{
	if (c->error == 0)
		ex_accept_again(c->user);
}

static inline bool ex_engine_full(int rc)
{
	return rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM;
}

static inline void ex_on_held_retry(const px_completion *c);

/* Hold fd, whose start failed with rc (ex_engine_full), for a later try.
 * Caller holds held_lock. */
static inline void ex_hold(struct ex_server *s, int fd, int rc)
{
	if (s->nheld == EX_MAX_HELD) {
		close(fd);      /* cannot happen: see EX_MAX_HELD */
		return;
	}
	s->held[s->nheld++] = fd;
	if (atomic_load(&s->holding))
		return;
	/* The first: from now on no accept is armed until every held
	 * connection has started; the one pending now is the last. */
	atomic_store(&s->holding, true);
	s->accept_armed = true;
	if (!atomic_exchange(&s->paused, true))
		fprintf(stderr, "%s: accept: connection on descriptor %d not "
			"taken by the engine: %s; pausing accepts, retrying every "
			"%u ms\n", s->prog, fd, px_strerror(-rc),
			EX_ACCEPT_RETRY_NS / 1000000u);
	if (px_timer_start(s->px, EX_ACCEPT_RETRY_NS, ex_on_held_retry, s) < 0) {
		/* Stopping (or out of memory): no retry; ex_serve closes
		 * what is held. */
	}
}

/* Start an accepted connection; one the engine cannot take now is held. */
static inline void ex_start_conn(struct ex_server *s, int fd)
{
	int rc = s->on_conn(s, fd);

	if (rc == 0)
		return;
	if (!ex_engine_full(rc)) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&s->held_lock);
	ex_hold(s, fd, rc);
	pthread_mutex_unlock(&s->held_lock);
}

/* The retry timer: start the held connections, each first moved to the
 * lowest free descriptor number (a number the engine refused stays
 * refused), and accept again once all have started. */
static inline void ex_on_held_retry(const px_completion *c)
{
	struct ex_server *s = c->user;
	unsigned kept = 0;
	int rc = 0;

	if (c->error)
		return;         /* cancelled: stopping */
	pthread_mutex_lock(&s->held_lock);
	for (unsigned i = 0; i < s->nheld; i++) {
		int fd = s->held[i];
		int low = kept ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);

		if (low >= 0 && low < fd) {
			close(fd);
			fd = low;
		} else if (low >= 0) {
			close(low);
		}
		rc = kept ? rc : s->on_conn(s, fd);
		if (kept || ex_engine_full(rc))
			s->held[kept++] = fd;
		else if (rc < 0)
			close(fd);
	}
	s->nheld = kept;
	if (kept) {
		if (px_timer_start(s->px, EX_ACCEPT_RETRY_NS, ex_on_held_retry,
				   s) < 0) {
			/* Stopping: ex_serve closes what is held. */
		}
	} else {
		atomic_store(&s->holding, false);
		if (atomic_exchange(&s->paused, false))
			fprintf(stderr, "%s: accepting again\n", s->prog);
		if (!s->accept_armed)
			ex_accept_again(s);
	}
	pthread_mutex_unlock(&s->held_lock);
}

static inline void ex_on_accept(const px_completion *c)
{
	struct ex_server *s = c->user;

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
			fprintf(stderr, "%s: accept: %s; pausing accepts, "
				"retrying every %u ms\n", s->prog,
				px_strerror(c->error), EX_ACCEPT_RETRY_NS / 1000000u);
		if (px_timer_start(s->px, EX_ACCEPT_RETRY_NS, ex_on_accept_retry,
				   s) < 0)
			ex_accept_again(s);
		return;
	case EBADF:
	case EINVAL:
	case ENOTSOCK:
	case EFAULT:
		/* The listener itself is unusable (closed, shut down, not
		 * listening): every retry would fail at once, so say it and
		 * stop accepting rather than spin. */
		fprintf(stderr, "%s: accept: %s; no longer accepting\n",
			s->prog, px_strerror(c->error));
		return;
	default:
		/* ECONNABORTED, EPROTO, ENETDOWN and the other network
		 * errors of accept(2) concern one connection only. */
		ex_accept_again(s);
		return;
	}

	atomic_fetch_add(&s->accepted, 1);
	if (atomic_load(&s->holding)) {
		/* The engine refused a connection: this one waits with it,
		 * and no accept is armed until the retry timer has started
		 * them all. */
		pthread_mutex_lock(&s->held_lock);
		if (atomic_load(&s->holding)) {
			s->accept_armed = false;
			ex_hold(s, c->new_fd, -EMFILE);
			pthread_mutex_unlock(&s->held_lock);
			return;
		}
		pthread_mutex_unlock(&s->held_lock);
	}
	if (atomic_exchange(&s->paused, false))
		fprintf(stderr, "%s: accepting again\n", s->prog);
	/* Accept again first, so that the next connection does not wait
	 * for this one's setup. */
	ex_accept_again(s);
	ex_start_conn(s, c->new_fd);
}

/* px_stats as one line on stdout, after the example's own counts. */
static inline void ex_print_stats(struct ex_server *s, const char *when)
{
	struct px_stats st;

	if (px_stats(s->px, &st) < 0)
		return;
	printf("%s: stats %s: ", s->prog, when);
	if (s->counts)
		s->counts(s);
	printf("operations started %llu, deferred %llu, "
	       "completed %llu, cancelled %llu, timed out %llu, in flight %llu; "
	       "leader turns %llu, leader interrupts %llu, follower wake-ups "
	       "%llu; leaders waited %.3f s, followers slept %.3f s, callbacks "
	       "took %.3f s\n",
	       (unsigned long long)st.started,
	       (unsigned long long)st.deferred, (unsigned long long)st.completed,
	       (unsigned long long)st.cancelled, (unsigned long long)st.timed_out,
	       (unsigned long long)st.in_flight,
	       (unsigned long long)st.leader_turns,
	       (unsigned long long)st.leader_interrupts,
	       (unsigned long long)st.follower_wakeups, (double)st.wait_ns / 1e9,
	       (double)st.follower_sleep_ns / 1e9, (double)st.dispatch_ns / 1e9);
	fflush(stdout);
}

/*
 * The thread that takes SIGINT, SIGTERM and SIGUSR1 with sigwait (main).
 * Every thread of ours, and every thread the library starts, has them
 * blocked; but POSIX AIO's wait=callback (SIGEV_THREAD) runs each
 * notification in a thread glibc starts with every signal unblocked, and
 * a signal sent to the process while such a thread exists may be given
 * to it.  With the default disposition that would end the process (for
 * SIGUSR1 as well) instead of stopping it cleanly, so a handler is
 * installed that only sends the signal on to this thread, where it is
 * blocked and waits for sigwait.  (pthread_kill is async-signal-safe.)
 */
static pthread_t ex_signal_thread;

static inline void ex_forward_signal(int sig)
{
	int saved = errno;

	pthread_kill(ex_signal_thread, sig);
	errno = saved;
}

/* A thread of the event loop: runs until px_stop(). */
static inline void *ex_worker(void *arg)
{
	struct ex_server *s = arg;
	int rc;

	while ((rc = px_handle_events(s->px, -1)) >= 0)
		;
	if (rc != -ESHUTDOWN) {
		fprintf(stderr, "%s: px_handle_events: %s\n", s->prog,
			px_strerror(rc));
		kill(getpid(), SIGTERM);  /* let main shut everything down */
	}
	return NULL;
}

/*
 * Run the server: create the proactor from config, listen on bind_addr
 * and port, keep one accept pending, and run px_handle_events() on
 * nthreads threads (1 to EX_MAX_THREADS).  Prints "PROG: engine "NAME"
 * DOING on ADDRESS port N, T threads" once serving.  SIGUSR1 prints the
 * statistics; SIGINT or SIGTERM stops: px_stop(), join the threads, print
 * the statistics, and px_destroy() completes (cancels) what is still
 * pending, which closes the remaining connections.  Returns the exit
 * status: 0 after a clean stop, 1 on failure.
 */
static inline int ex_serve(struct ex_server *s, const char *config,
			   const char *bind_addr, const char *port,
			   long nthreads, const char *doing)
{
	pthread_t threads[EX_MAX_THREADS];
	char where[NI_MAXHOST + NI_MAXSERV + 16];
	sigset_t stop_set;	/* SIGINT, SIGTERM; and SIGUSR1 for statistics */
	int rc, sig;

	/* Only main takes SIGINT/SIGTERM (with sigwait): block them before
	 * any thread exists, so every thread inherits the mask; and a
	 * handler for a thread that has them unblocked all the same (glibc's
	 * for wait=callback) sends them on to main, ex_forward_signal.  A
	 * peer that goes away must not kill us with SIGPIPE. */
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGINT);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
	ex_signal_thread = pthread_self();
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ex_forward_signal;
	sa.sa_mask = stop_set;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	s->lfd = -1;
	pthread_mutex_init(&s->held_lock, NULL);
	if (ex_create(&s->px, config, s->prog) < 0)
		return 1;
	s->lfd = ex_listen(s->prog, bind_addr, port, where, sizeof(where));
	if (s->lfd < 0) {
		px_destroy(s->px);
		return 1;
	}
	rc = px_accept(s->px, s->lfd, ex_on_accept, s);
	if (rc < 0) {
		fprintf(stderr, "%s: accept: %s\n", s->prog, px_strerror(rc));
		px_destroy(s->px);
		close(s->lfd);
		return 1;
	}

	long started = 0;
	for (; started < nthreads; started++) {
		rc = pthread_create(&threads[started], NULL, ex_worker, s);
		if (rc) {
			fprintf(stderr, "%s: pthread_create: %s\n", s->prog,
				strerror(rc));
			break;
		}
	}
	if (started == nthreads) {
		printf("%s: engine \"%s\" %s on %s, %ld thread%s\n", s->prog,
		       px_engine_name(s->px), doing, where, nthreads,
		       nthreads == 1 ? "" : "s");
		fflush(stdout);
		while (sigwait(&stop_set, &sig) == 0 && sig == SIGUSR1)
			ex_print_stats(s, "now");
	}

	px_stop(s->px);
	for (long i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	ex_print_stats(s, "at exit");
	rc = px_destroy(s->px);
	if (rc < 0)
		fprintf(stderr, "%s: px_destroy: %s\n", s->prog, px_strerror(rc));
	close(s->lfd);
	for (unsigned i = 0; i < s->nheld; i++)
		close(s->held[i]);  /* accepted, never started */
	s->nheld = 0;
	printf("%s: stopped; %lu connection%s served, %lu left open\n", s->prog,
	       (unsigned long)atomic_load(&s->accepted),
	       atomic_load(&s->accepted) == 1 ? "" : "s",
	       (unsigned long)atomic_load(&s->open));
	return started == nthreads && rc == 0 ? 0 : 1;
}

#endif /* EXAMPLE_UTIL_H */
