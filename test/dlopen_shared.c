/*
 * dlopen_shared - the shared library loaded late with dlopen(3), the way a
 * plugin host or a language binding loads it, into a process that already
 * runs threads.
 *
 *     dlopen_shared PATH/libproactor.so ENGINE_TEXT...
 *
 * The library's thread-local variables use the initial-exec model
 * (meson.build says why).  A module loaded late gets such variables only
 * from the static TLS space glibc set aside at start-up, and glibc must
 * give every thread its own copy, the threads that existed before the
 * dlopen included.  If the space were too small the dlopen would fail
 * ("cannot allocate memory in static TLS block"); if two threads shared
 * one copy, the dispatcher's per-thread state (the thread's own queue of
 * completions, the callback it runs, the proactor it dispatches for) and
 * the providers' (the ring a thread submits to, the calls a thread has
 * claimed) would mix, and completions would be lost or run twice.  So,
 * after a dlopen made while a thread is already waiting:
 *
 *  - for each engine (those not built in or not offered here are skipped;
 *    POSIX AIO under ThreadSanitizer, as in the harness), three rounds of
 *    PIPES pipes: one run by the thread from before the dlopen alone, one
 *    by a thread made after it alone, one by both at once;
 *  - each pipe's read callback calls back in: px_close of its own
 *    descriptor (the close then completes after the callback returns)
 *    and a px_post;
 *  - every read, post and close callback runs exactly once, with the
 *    result it should have, within the watchdog, and px_destroy succeeds.
 *
 * Checked to fail when the library's thread-local block outgrows the
 * space: a scratch 16 KiB __thread array in the library made the dlopen
 * fail with glibc's message, and this program exit 1.
 *
 * The program does not link the library: it includes proactor.h for the
 * types and resolves every call with dlsym.  Exit 0, 1 on a failure, 77
 * when no engine given could run.
 */
#include "proactor.h"
#include "tsan.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PIPES 32
#define WATCHDOG_S 60

static struct {
	int (*config_parse)(px_config *, const char *, char *, size_t);
	int (*create_config)(px_proactor **, const px_config *, char *, size_t);
	int (*destroy)(px_proactor *);
	const char *(*engine_name)(const px_proactor *);
	int (*handle_events)(px_proactor *, int);
	int (*read_stream)(px_proactor *, int, void *, size_t, px_callback *, void *);
	int (*post)(px_proactor *, px_callback *, void *);
	int (*close)(px_proactor *, int, px_callback *, void *);
	const char *(*strerror)(int);
} lib;

typedef struct pipe_ctx {
	int rfd, wfd;
	char byte;
	atomic_int reads, posts, closes;
	atomic_int bad;          /* a callback saw something wrong */
} pipe_ctx;

static px_proactor *px;
static pipe_ctx ctx[PIPES];
static atomic_int done;          /* close callbacks and posts of the round */
static atomic_int failed;

/* The early thread: started before the dlopen; runs a round's loop when
 * told to. */
static pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t early_cond = PTHREAD_COND_INITIALIZER;
static int early_job;            /* rounds asked for */
static int early_done;           /* rounds finished */
static bool early_quit;

static void fail(const char *what)
{
	fprintf(stderr, "dlopen_shared: %s\n", what);
	atomic_store(&failed, 1);
}

static void on_post(const px_completion *c)
{
	pipe_ctx *p = c->user;

	if (c->error != 0 || c->op != PX_OP_POST)
		atomic_store(&p->bad, 1);
	atomic_fetch_add(&p->posts, 1);
	atomic_fetch_add(&done, 1);
}

static void on_close(const px_completion *c)
{
	pipe_ctx *p = c->user;

	if (c->error != 0 || c->op != PX_OP_CLOSE || c->fd != p->rfd)
		atomic_store(&p->bad, 1);
	atomic_fetch_add(&p->closes, 1);
	atomic_fetch_add(&done, 1);
}

static void on_read(const px_completion *c)
{
	pipe_ctx *p = c->user;

	if (c->error != 0 || c->bytes != 1 || p->byte != 'x')
		atomic_store(&p->bad, 1);
	atomic_fetch_add(&p->reads, 1);
	/* From the descriptor's own callback: must not wait for itself. */
	if (lib.close(c->proactor, p->rfd, on_close, p) != 0)
		atomic_store(&p->bad, 1);
	if (lib.post(c->proactor, on_post, p) != 0)
		atomic_store(&p->bad, 1);
}

/* Runs px_handle_events until the round's callbacks have all run. */
static void loop_round(void)
{
	while (atomic_load(&done) < 2 * PIPES && !atomic_load(&failed)) {
		int r = lib.handle_events(px, 50);
		if (r < 0) {
			fail("px_handle_events failed");
			return;
		}
	}
}

static void *early_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&early_lock);
	for (;;) {
		while (early_job == early_done && !early_quit)
			pthread_cond_wait(&early_cond, &early_lock);
		if (early_quit)
			break;
		pthread_mutex_unlock(&early_lock);
		loop_round();
		pthread_mutex_lock(&early_lock);
		early_done++;
		pthread_cond_broadcast(&early_cond);
	}
	pthread_mutex_unlock(&early_lock);
	return NULL;
}

static void *late_main(void *arg)
{
	(void)arg;
	loop_round();
	return NULL;
}

static void early_start(void)
{
	pthread_mutex_lock(&early_lock);
	early_job++;
	pthread_cond_broadcast(&early_cond);
	pthread_mutex_unlock(&early_lock);
}

static void early_wait(void)
{
	pthread_mutex_lock(&early_lock);
	while (early_done != early_job)
		pthread_cond_wait(&early_cond, &early_lock);
	pthread_mutex_unlock(&early_lock);
}

/* One round: PIPES pipes, a read each, then a byte each; run by the early
 * thread, the late one, or both.  Returns 0 or -1. */
static int round_run(bool use_early, bool use_late, const char *label)
{
	atomic_store(&done, 0);
	for (int i = 0; i < PIPES; i++) {
		pipe_ctx *p = &ctx[i];
		int fds[2];

		if (pipe(fds) != 0) {
			perror("dlopen_shared: pipe");
			return -1;
		}
		p->rfd = fds[0];
		p->wfd = fds[1];
		p->byte = 0;
		atomic_store(&p->reads, 0);
		atomic_store(&p->posts, 0);
		atomic_store(&p->closes, 0);
		atomic_store(&p->bad, 0);
		int r = lib.read_stream(px, p->rfd, &p->byte, 1, on_read, p);
		if (r != 0) {
			fprintf(stderr, "dlopen_shared: %s: px_read_stream: %s\n",
				label, lib.strerror(r));
			return -1;
		}
	}
	pthread_t late;
	if (use_late && pthread_create(&late, NULL, late_main, NULL) != 0) {
		fail("pthread_create");
		return -1;
	}
	if (use_early)
		early_start();
	for (int i = 0; i < PIPES; i++) {
		if (write(ctx[i].wfd, "x", 1) != 1) {
			perror("dlopen_shared: write");
			atomic_store(&failed, 1);
		}
	}
	if (use_early)
		early_wait();
	if (use_late)
		pthread_join(late, NULL);
	int rc = atomic_load(&failed) ? -1 : 0;
	for (int i = 0; i < PIPES; i++) {
		pipe_ctx *p = &ctx[i];
		if (atomic_load(&p->reads) != 1 || atomic_load(&p->posts) != 1 ||
		    atomic_load(&p->closes) != 1 || atomic_load(&p->bad)) {
			fprintf(stderr, "dlopen_shared: %s: pipe %d: %d reads, "
				"%d posts, %d closes (1 each wanted)%s\n",
				label, i, atomic_load(&p->reads),
				atomic_load(&p->posts), atomic_load(&p->closes),
				atomic_load(&p->bad) ? ", a callback saw a wrong result" : "");
			rc = -1;
		}
		close(p->wfd);
		/* (p->rfd was closed by px_close.) */
	}
	return rc;
}

/* 0: passed, 1: failed, 77: the engine cannot run here. */
static int engine_run(const char *text)
{
	px_config cfg;
	char err[512] = "";
	int r;

	if (PX_TEST_TSAN && strstr(text, "posix")) {
		printf("dlopen_shared: '%s': POSIX AIO does not run under "
		       "ThreadSanitizer: skipped\n", text);
		return 77;
	}
	r = lib.config_parse(&cfg, text, err, sizeof err);
	if (r == -ENOSYS) {
		printf("dlopen_shared: '%s' is not built in: skipped\n", text);
		return 77;
	}
	if (r != 0) {
		fprintf(stderr, "dlopen_shared: '%s' does not parse: %s\n", text, err);
		return 1;
	}
	cfg.flags |= PX_CF_NO_ENV;
	r = lib.create_config(&px, &cfg, err, sizeof err);
	if (r == -ENOSYS || r == -EPERM) {
		printf("dlopen_shared: '%s' is not available here (%s): skipped\n",
		       text, err);
		return 77;
	}
	if (r != 0) {
		fprintf(stderr, "dlopen_shared: px_create_config('%s'): %s: %s\n",
			text, lib.strerror(r), err);
		return 1;
	}
	int rc = 0;
	if (round_run(true, false, "thread from before the dlopen") != 0 ||
	    round_run(false, true, "thread from after the dlopen") != 0 ||
	    round_run(true, true, "both threads") != 0)
		rc = 1;
	printf("dlopen_shared: %s: %s\n", lib.engine_name(px),
	       rc ? "FAILED" : "ok");
	r = lib.destroy(px);
	if (r != 0) {
		fprintf(stderr, "dlopen_shared: px_destroy: %s\n", lib.strerror(r));
		rc = 1;
	}
	px = NULL;
	return rc;
}

#define RESOLVE(field, name)                                                 \
	do {                                                                 \
		*(void **)&lib.field = dlsym(h, name);                       \
		if (!lib.field) {                                            \
			fprintf(stderr, "dlopen_shared: dlsym %s: %s\n", name,  \
				dlerror());                                  \
			return 1;                                            \
		}                                                            \
	} while (0)

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s PATH/libproactor.so ENGINE_TEXT...\n",
			argv[0]);
		return 1;
	}
	alarm(WATCHDOG_S);

	pthread_t early;
	if (pthread_create(&early, NULL, early_main, NULL) != 0) {
		perror("dlopen_shared: pthread_create");
		return 1;
	}

	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen_shared: dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	RESOLVE(config_parse, "px_config_parse");
	RESOLVE(create_config, "px_create_config");
	RESOLVE(destroy, "px_destroy");
	RESOLVE(engine_name, "px_engine_name");
	RESOLVE(handle_events, "px_handle_events");
	RESOLVE(read_stream, "px_read_stream");
	RESOLVE(post, "px_post");
	RESOLVE(close, "px_close");
	RESOLVE(strerror, "px_strerror");

	int ran = 0, failures = 0;
	for (int i = 2; i < argc; i++) {
		int r = engine_run(argv[i]);
		if (r == 0)
			ran++;
		else if (r != 77)
			failures++;
	}

	pthread_mutex_lock(&early_lock);
	early_quit = true;
	pthread_cond_broadcast(&early_cond);
	pthread_mutex_unlock(&early_lock);
	pthread_join(early, NULL);
	if (dlclose(h) != 0) {
		fprintf(stderr, "dlopen_shared: dlclose: %s\n", dlerror());
		failures++;
	}
	if (failures)
		return 1;
	if (!ran) {
		printf("dlopen_shared: no engine could run here: skipped\n");
		return 77;
	}
	return 0;
}
