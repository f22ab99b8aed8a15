/*
 * echo_emfile.c - examples/echo_server under descriptor exhaustion.
 *
 *   echo_emfile PATH_OF_ECHO_SERVER 'ENGINE CONFIG TEXT' [--fd-setsize]
 *
 * Runs the server with RLIMIT_NOFILE at LIMIT and opens more connections
 * than it can hold.  With --fd-setsize (for the select wait, which takes
 * no descriptor at FD_SETSIZE or above) the limit is the engine's instead:
 * the server runs with descriptors to spare but inherits every number
 * below FD_SETSIZE - LIMIT taken, so that the connections past the first
 * few are accepted at numbers the engine refuses; they must wait, as in
 * the backlog, not be closed (they were, each at once, until
 * example_util.h held them and paused accepts).  The server must back off (one message per episode, no
 * accept loop burning a CPU), keep serving the connections it has, and
 * once some of them close, accept and serve the ones that waited in the
 * backlog.  Then, with descriptors to spare: a client that sends 256 KiB
 * and half-closes (shutdown(SHUT_WR)) must get all of it back and then
 * the end of stream; and the server must stop cleanly on SIGTERM while a
 * client that sent 4 MiB without reading holds one of its writes.
 * Loopback only.  Exit 0 on success, 1 on failure, 77 (skip) when the
 * engine is not available here.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { LIMIT = 48, NCONN = 60, NKEEP = 2 };

static pid_t g_child = -1;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "echo_emfile: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	if (g_child > 0)
		kill(g_child, SIGKILL);
	exit(1);
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Append what is readable on fd (non-blocking) to buf. */
static void drain(int fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n;
	while (*len + 1 < cap &&
	       (n = read(fd, buf + *len, cap - 1 - *len)) > 0)
		*len += (size_t)n;
	buf[*len] = '\0';
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* CPU time (user + system) of the child, in clock ticks. */
static long child_cpu(void)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)g_child);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	long ut, st;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld",
			 &ut, &st) != 2)
		return -1;
	return ut + st;
}

/* Send one byte on c and say whether it came back within ms. */
static bool echoes(int c, int ms)
{
	char x = 'x', y;
	if (send(c, &x, 1, MSG_NOSIGNAL) != 1)
		die("send: %s", strerror(errno));
	struct pollfd p = { .fd = c, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return false;
	return recv(c, &y, 1, 0) == 1 && y == 'x';
}

static int connect_to(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
		die("connect: %s", strerror(errno));
	return c;
}

/* Send n bytes (a pattern) and half-close, reading the echo meanwhile; all
 * of it must come back, in order, followed by the end of stream. */
static void half_close_echoes(int port, size_t n)
{
	int c = connect_to(port);
	size_t sent = 0, got = 0;
	bool shut = false;
	char buf[16384];
	long dl = now_ms() + 10000;

	fcntl(c, F_SETFL, O_NONBLOCK);
	for (;;) {
		if (now_ms() > dl)
			die("half-close: %zu of %zu bytes back after 10 s%s", got, n,
			    shut ? " (after the shutdown)" : "");
		struct pollfd p = { .fd = c, .events = POLLIN | (shut ? 0 : POLLOUT) };
		poll(&p, 1, 100);
		while (sent < n) {
			size_t k = n - sent < sizeof buf ? n - sent : sizeof buf;
			for (size_t i = 0; i < k; i++)
				buf[i] = (char)((sent + i) % 251);
			ssize_t w = send(c, buf, k, MSG_NOSIGNAL);
			if (w <= 0)
				break;
			sent += (size_t)w;
		}
		if (sent == n && !shut) {
			if (shutdown(c, SHUT_WR) < 0)
				die("shutdown: %s", strerror(errno));
			shut = true;
		}
		ssize_t r;
		while ((r = recv(c, buf, sizeof buf, 0)) > 0) {
			for (ssize_t i = 0; i < r; i++)
				if (buf[i] != (char)((got + (size_t)i) % 251))
					die("half-close: byte %zu wrong", got + (size_t)i);
			got += (size_t)r;
		}
		if (r == 0) {
			if (!shut || got != n)
				die("half-close: end of stream after %zu of %zu bytes", got, n);
			break;
		}
		if (errno != EAGAIN)
			die("half-close: recv: %s", strerror(errno));
	}
	close(c);
}

int main(int argc, char **argv)
{
	bool fd_setsize = argc == 4 && strcmp(argv[3], "--fd-setsize") == 0;
	if (argc != 3 && !fd_setsize) {
		fprintf(stderr, "usage: echo_emfile ECHO_SERVER 'ENGINE' "
			"[--fd-setsize]\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	int out[2], err[2];
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	g_child = fork();
	if (g_child < 0)
		die("fork: %s", strerror(errno));
	if (g_child == 0) {
		struct rlimit rl;
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = LIMIT;
		if (fd_setsize) {
			rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
			if (rl.rlim_cur < FD_SETSIZE + 2 * NCONN)
				_exit(5);       /* cannot get past FD_SETSIZE */
		}
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(3);
		dup2(out[1], 1);
		dup2(err[1], 2);
		if (fd_setsize) {
			/* Inherited (no close-on-exec): LIMIT numbers below
			 * FD_SETSIZE are left to the server. */
			int nul = open("/dev/null", O_RDONLY);
			if (nul < 0)
				_exit(3);
			for (int fd = 3; fd < FD_SETSIZE - LIMIT; fd++)
				if (fd != nul && dup2(nul, fd) < 0)
					_exit(3);
		}
		unsetenv("PX_ENGINE");
		execl(argv[1], argv[1], "-e", argv[2], "-p", "0", "-b",
		      "127.0.0.1", "-t", "2", (char *)NULL);
		_exit(4);
	}
	close(out[1]);
	close(err[1]);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(err[0], F_SETFL, O_NONBLOCK);

	/* "... listening on 127.0.0.1 port N, ..." */
	char obuf[4096], ebuf[16384];
	size_t olen = 0, elen = 0;
	int port = -1;
	for (long dl = now_ms() + 10000; port < 0 && now_ms() < dl;) {
		struct pollfd p = { .fd = out[0], .events = POLLIN };
		poll(&p, 1, 100);
		drain(out[0], obuf, sizeof obuf, &olen);
		drain(err[0], ebuf, sizeof ebuf, &elen);
		const char *s = strstr(obuf, "port ");
		if (s && strchr(s, ','))
			port = atoi(s + 5);
		int st;
		if (waitpid(g_child, &st, WNOHANG) == g_child) {
			g_child = -1;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 5) {
				printf("echo_emfile: RLIMIT_NOFILE's hard limit "
				       "is below %d: skipped\n", FD_SETSIZE + 2 * NCONN);
				return 77;
			}
			if (strstr(ebuf, "not available") || strstr(ebuf, "not built in") ||
			    strstr(ebuf, "cannot create the proactor")) {
				printf("echo_emfile: engine '%s' not available: %s"
				       ": skipped\n", argv[2], ebuf);
				return 77;
			}
			die("the server exited early: %s", ebuf);
		}
	}
	if (port <= 0)
		die("no port in the server's output: %s / %s", obuf, ebuf);
	printf("echo_emfile: %s", obuf);

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int c[NCONN];
	bool served[NCONN];
	for (int i = 0; i < NCONN; i++) {
		c[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c[i] < 0 || connect(c[i], (struct sockaddr *)&a, sizeof a) < 0)
			die("connection %d: %s", i, strerror(errno));
	}
	/* Those the server could accept echo; the rest wait in its backlog. */
	int nserved = 0;
	for (int i = 0; i < NCONN; i++) {
		served[i] = echoes(c[i], nserved < LIMIT / 2 ? 2000 : 150);
		nserved += served[i];
	}
	printf("echo_emfile: %d of %d connections served with %d descriptor "
	       "numbers %s\n", nserved, NCONN, LIMIT,
	       fd_setsize ? "below FD_SETSIZE free" : "(RLIMIT_NOFILE)");
	if (2 * (nserved - NKEEP) < NCONN || nserved == NCONN)
		die("%d of %d connections served with a limit of %d descriptors",
		    nserved, NCONN, LIMIT);

	/* Out of descriptors for a second: no spinning, one message. */
	long cpu0 = child_cpu();
	long hz = sysconf(_SC_CLK_TCK);
	usleep(1000 * 1000);
	long cpu1 = child_cpu();
	drain(err[0], ebuf, sizeof ebuf, &elen);
	printf("echo_emfile: server CPU over 1 s at EMFILE: %ld ticks of %ld\n",
	       cpu1 - cpu0, hz);
	if (cpu0 >= 0 && cpu1 - cpu0 > hz / 2)
		die("the server used %ld of %ld ticks in one second while out of "
		    "descriptors: its accept spins", cpu1 - cpu0, hz);
	int nmsg = count(ebuf, "accept:");
	if (nmsg < 1 || nmsg > 2)
		die("expected one accept message on stderr, got %d: %s", nmsg, ebuf);

	/* Free descriptors: close all served connections but NKEEP (as many
	 * as wait, or more); the waiting ones are accepted and served. */
	int closed = 0;
	for (int i = 0; i < NCONN && closed < nserved - NKEEP; i++)
		if (served[i]) {
			close(c[i]);
			c[i] = -1;
			closed++;
		}
	long dl = now_ms() + 10000;
	for (int i = 0; i < NCONN; i++) {
		if (c[i] < 0 || served[i])
			continue;
		long left = dl - now_ms();
		if (left < 1 || !echoes(c[i], (int)left))
			die("connection %d was not served after descriptors were "
			    "freed: %s", i, ebuf);
	}
	for (int i = 0; i < NCONN; i++)
		if (c[i] >= 0 && served[i] && !echoes(c[i], 5000))
			die("connection %d stopped being served", i);
	usleep(50 * 1000);
	drain(err[0], ebuf, sizeof ebuf, &elen);
	if (!strstr(ebuf, "accepting again"))
		die("the server never said it accepts again: %s", ebuf);

	for (int i = 0; i < NCONN; i++)
		if (c[i] >= 0)
			close(c[i]);

	half_close_echoes(port, 256 * 1024);
	/* A client that sends and never reads: the server's write of the
	 * echo waits (its memory stays one buffer), and SIGTERM must still
	 * stop it cleanly, cancelling that write. */
	int hog = connect_to(port);
	fcntl(hog, F_SETFL, O_NONBLOCK);
	size_t hogged = 0;
	static char junk[65536];
	for (long hdl = now_ms() + 1000; now_ms() < hdl && hogged < 4u << 20;) {
		ssize_t w = send(hog, junk, sizeof junk, MSG_NOSIGNAL);
		if (w > 0)
			hogged += (size_t)w;
		else
			usleep(10 * 1000);
	}
	kill(g_child, SIGTERM);
	int st;
	if (waitpid(g_child, &st, 0) != g_child)
		die("waitpid: %s", strerror(errno));
	g_child = -1;
	close(hog);
	drain(out[0], obuf, sizeof obuf, &olen);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the server did not stop cleanly (status %#x): %s", st, ebuf);
	printf("echo_emfile: ok: %s", strstr(obuf, "stopped") ? strstr(obuf, "stopped") : "\n");
	return 0;
}
