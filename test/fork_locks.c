/*
 * fork_locks.c - a child made by fork(2) can make a proactor of its own
 * (proactor(3)), whatever the parent's threads were doing at the fork.
 *
 *   fork_locks 'ENGINE CONFIG TEXT'
 *
 * 1. The parent holds a proactor of ENGINE; a child made then creates
 *    one of the same text, posts to it and destroys it.  (A sigwait wait
 *    with an explicit rtsig= was refused there with EBUSY: the slot
 *    still named the parent's proactor, which the child cannot destroy.)
 * 2. A thread of the parent creates and destroys proactors of ENGINE
 *    without pause while the main thread forks 100 times; each child
 *    does as in 1 within 5 s.  (A child forked while that thread held
 *    the process-wide lock of the signal interrupt's or the sigwait
 *    wait's table waited on it for ever.)
 *
 * 3. The pre-fork server: the parent's accept pending on a listener, a
 *    child that makes its own proactor, accepts on the inherited
 *    listener for a moment and exits; then a client connects, and the
 *    parent's accept must complete.  (The linux_rt wait took the
 *    listener's signal owner, a property of the open file both share,
 *    for the child's thread; after the child exited no signal came and
 *    the parent's accept waited for good.)
 *
 * Exit 0 pass, 1 fail, 77 skip (under TSan, which ends a child of a
 * threaded process that starts threads, and under ASan: below).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proactor.h"
#include "tsan.h"

/* AddressSanitizer's allocator (clang 14) keeps a lock of its own that a
 * child forked while another thread allocates may inherit held (a
 * dedicated processor's thread starting, a loop thread, part 2's
 * thread): the child's first new thread then waits on it for good.  So
 * the program skips under ASan, as under TSan. */
#if defined(__SANITIZE_ADDRESS__)
#define FL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FL_ASAN 1
#endif
#endif
#ifndef FL_ASAN
#define FL_ASAN 0
#endif

static px_config g_cfg;
static const char *g_text;
static atomic_bool g_stop;

static void count_cb(const px_completion *c)
{
	(*(int *)c->user)++;
}

/* In the child: a proactor of its own that runs a post.  0 or 1. */
static int child_own(void)
{
	px_proactor *px;
	char err[512];
	int rc = px_create_config(&px, &g_cfg, err, sizeof(err));
	if (rc != 0) {
		printf("fork_locks: child: px_create: %s: %s\n",
		       px_strerror(rc), err);
		return 1;
	}
	int posted = 0;
	rc = px_post(px, count_cb, &posted);
	for (int i = 0; rc == 0 && i < 200 && !posted; i++)
		rc = px_handle_events(px, 10);
	px_destroy(px);
	if (!posted) {
		printf("fork_locks: child: the post never ran (%d)\n", rc);
		return 1;
	}
	return 0;
}

/* Fork a child that runs child_own; 0 if it exited 0 within 5 s. */
static int fork_one(const char *what)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		alarm(5);
		int rc = child_own();
		fflush(NULL);
		_exit(rc);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid) {
		perror("waitpid");
		return 1;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
		printf("fork_locks: %s: the child was still in px_create, "
		       "px_handle_events or px_destroy after 5 s\n", what);
	else
		printf("fork_locks: %s: the child failed (status %#x)\n", what,
		       st);
	return 1;
}

static atomic_int g_accepted;

static void accept_cb(const px_completion *c)
{
	if (c->error == 0) {
		close(c->new_fd);
		atomic_fetch_add(&g_accepted, 1);
	}
}

static void *loop_main(void *arg)
{
	while (!atomic_load(&g_stop))
		if (px_handle_events(arg, 50) == -ESHUTDOWN)
			break;
	return NULL;
}

/* 3: 0 or 1. */
static int prefork_listener(void)
{
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(l, 8) != 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) != 0) {
		perror("fork_locks: listener");
		return 1;
	}
	px_proactor *px;
	char err[512];
	int rc = px_create_config(&px, &g_cfg, err, sizeof(err));
	if (rc != 0) {
		printf("fork_locks: px_create: %s: %s\n", px_strerror(rc), err);
		return 1;
	}
	atomic_store(&g_stop, false);
	pthread_t th;
	if (pthread_create(&th, NULL, loop_main, px) != 0)
		return 1;
	int fails = 0;
	rc = px_accept(px, l, accept_cb, NULL);
	if (rc != 0) {
		printf("fork_locks: px_accept: %s\n", px_strerror(rc));
		fails++;
	}
	usleep(50 * 1000);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(5);
		px_proactor *own;
		if (px_create_config(&own, &g_cfg, NULL, 0) != 0)
			_exit(3);
		if (px_accept(own, l, accept_cb, NULL) != 0)
			_exit(4);
		px_handle_events(own, 100);
		px_cancel(own, l);
		px_destroy(own);  /* the accept ends, ECANCELED */
		_exit(0);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0) {
		printf("fork_locks: the pre-fork worker failed (status %#x)\n",
		       st);
		fails++;
	}
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("fork_locks: connect");
		fails++;
	}
	for (int i = 0; i < 300 && !atomic_load(&g_accepted); i++)
		usleep(10 * 1000);
	if (atomic_load(&g_accepted) != 1) {
		printf("fork_locks: the parent's accept on the listener its "
		       "worker had used did not complete within 3 s\n");
		fails++;
	}
	atomic_store(&g_stop, true);
	px_stop(px);
	pthread_join(th, NULL);
	px_destroy(px);
	close(c);
	close(l);
	return fails ? 1 : 0;
}

static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_stop)) {
		px_proactor *px;
		if (px_create_config(&px, &g_cfg, NULL, 0) == 0)
			px_destroy(px);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fork_locks 'ENGINE CONFIG TEXT'\n");
		return 2;
	}
	if (PX_TEST_TSAN || FL_ASAN) {
		puts("fork_locks: children of a threaded process that start "
		     "threads: not under the sanitizers; skipped");
		return 77;
	}
	g_text = argv[1];
	char err[512];
	if (px_config_parse(&g_cfg, g_text, err, sizeof(err)) < 0) {
		fprintf(stderr, "fork_locks: '%s': %s\n", g_text, err);
		return 1;
	}
	g_cfg.flags |= PX_CF_NO_ENV;
	int fails = 0;

	/* 1. The parent's proactor alive across the fork. */
	px_proactor *px;
	int rc = px_create_config(&px, &g_cfg, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "fork_locks: px_create: %s: %s\n",
			px_strerror(rc), err);
		return 1;
	}
	fails += fork_one("beside the parent's proactor");
	px_destroy(px);

	/* 2. Forks while another thread creates and destroys proactors. */
	pthread_t th;
	if (pthread_create(&th, NULL, churn, NULL) != 0)
		return 1;
	int bad = 0;
	for (int i = 0; i < 100 && !bad; i++)
		bad = fork_one("forked while a thread creates proactors");
	atomic_store(&g_stop, true);
	pthread_join(th, NULL);
	fails += bad;

	/* 3. A listener shared with a pre-fork worker. */
	fails += prefork_listener();

	printf("fork_locks: %s on '%s'\n", fails ? "FAIL" : "ok", g_text);
	return fails ? 1 : 0;
}
