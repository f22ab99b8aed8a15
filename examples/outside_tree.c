/*
 * outside_tree.c - built outside the source tree against the installed
 * library (pkg-config --cflags --libs proactor), to check the installed
 * header, shared library and .pc file are usable.  Posts one completion,
 * runs a timer, moves bytes through a pipe, and exits 0 when all callbacks
 * ran exactly once.
 */
#include <proactor.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int posted, fired, wrote, readn;
static char in[6];

static void on_post(const px_completion *c) { (void)c; posted++; }
static void on_timer(const px_completion *c) { fired += c->error == 0; }
static void on_write(const px_completion *c) { wrote += c->bytes == 5; }
static void on_read(const px_completion *c)
{
	readn += c->bytes == 5 && memcmp(c->buf, "hello", 5) == 0;
}

int main(int argc, char **argv)
{
	px_proactor *px;
	char err[256];
	int fds[2];
	if (pipe(fds) < 0)
		return 1;
	int rc = px_create(&px, argc > 1 ? argv[1] : NULL, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "px_create: %s (%s)\n", err, px_strerror(rc));
		return 1;
	}
	printf("engine: %s\n", px_engine_name(px));
	if (px_post(px, on_post, NULL) < 0 ||
	    px_timer_start(px, 1000000, on_timer, NULL) < 0 ||
	    px_read_stream(px, fds[0], in, 5, on_read, NULL) < 0 ||
	    px_write_stream(px, fds[1], "hello", 5, on_write, NULL) < 0) {
		fprintf(stderr, "start failed\n");
		return 1;
	}
	for (int i = 0; i < 100 && posted + fired + wrote + readn < 4; i++)
		px_handle_events(px, 100);
	px_destroy(px);
	close(fds[0]);
	close(fds[1]);
	int ok = posted == 1 && fired == 1 && wrote == 1 && readn == 1;
	printf("%s: posted=%d timer=%d write=%d read=%d\n", ok ? "ok" : "FAILED",
	       posted, fired, wrote, readn);
	return ok ? 0 : 1;
}
