/*
 * peer_util.h - the start-up the echo peers (epoll_echo, uv_echo) and
 * their load client share: the server options, and room for many
 * descriptors.  Nothing here runs once the I/O has begun: how each peer
 * moves bytes stays in its own file.
 */
#ifndef BENCH_PEER_UTIL_H
#define BENCH_PEER_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * A server's options: [-p PORT] (0 to 65535) [-b BIND_ADDR] [-h], and
 * when extra is not 0, one more option letter taking an argument, stored
 * in *extra_arg (checked by the caller).  *port and *bind_addr keep their
 * defaults unless given.  Returns -1 to go on, else the exit status (0
 * after -h, 2 after a bad option, with usage printed).
 */
static inline int peer_server_options_x(int argc, char **argv, const char *prog,
					void (*usage)(FILE *f),
					const char **bind_addr, long *port,
					int extra, const char **extra_arg)
{
	char spec[8] = "p:b:h";
	char *end;
	int opt;

	if (extra) {
		spec[5] = (char)extra;
		spec[6] = ':';
	}
	while ((opt = getopt(argc, argv, spec)) != -1) {
		if (extra && opt == extra) {
			*extra_arg = optarg;
			continue;
		}
		switch (opt) {
		case 'p':
			errno = 0;
			*port = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || *port < 0 ||
			    *port > 65535) {
				fprintf(stderr, "%s: bad port '%s'\n", prog, optarg);
				usage(stderr);
				return 2;
			}
			break;
		case 'b':
			*bind_addr = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		usage(stderr);
		return 2;
	}
	return -1;
}

static inline int peer_server_options(int argc, char **argv, const char *prog,
				      void (*usage)(FILE *f),
				      const char **bind_addr, long *port)
{
	return peer_server_options_x(argc, argv, prog, usage, bind_addr, port,
				     0, NULL);
}

/* Room for many connections: the soft RLIMIT_NOFILE up to the hard one. */
static inline void peer_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/*
 * SIGINT and SIGTERM blocked and delivered through the returned signalfd
 * (sfd_flags: SFD_NONBLOCK and the like; SFD_CLOEXEC is added), and
 * SIGPIPE ignored.  Returns the descriptor, or -1 with a message.
 */
static inline int peer_stop_signals(const char *prog, int sfd_flags)
{
	sigset_t set;
	int sfd;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, sfd_flags | SFD_CLOEXEC);
	if (sfd < 0)
		fprintf(stderr, "%s: signalfd: %s\n", prog, strerror(errno));
	return sfd;
}

/*
 * A TCP listener on bind_addr and port (0: any free one), SO_REUSEADDR,
 * with SOCK_CLOEXEC and type_flags (SOCK_NONBLOCK or 0), its port
 * printed on stdout as "PROG: listening on ADDR port N".  Returns the
 * descriptor, or -1 with a message and *status set to the exit status
 * (2 for an address that is not IPv4, 1 otherwise).
 */
static inline int peer_listen(const char *prog, const char *bind_addr,
			      long port, int type_flags, int *status)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	int lfd, one = 1;

	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "%s: '%s' is not an IPv4 address\n", prog, bind_addr);
		*status = 2;
		return -1;
	}
	*status = 1;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);
	if (lfd < 0) {
		fprintf(stderr, "%s: socket: %s\n", prog, strerror(errno));
		return -1;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    listen(lfd, SOMAXCONN) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
		fprintf(stderr, "%s: cannot listen on %s port %ld: %s\n",
			prog, bind_addr, port, strerror(errno));
		close(lfd);
		return -1;
	}
	printf("%s: listening on %s port %u\n", prog, bind_addr,
	       (unsigned)ntohs(sa.sin_port));
	fflush(stdout);
	return lfd;
}

#endif /* BENCH_PEER_UTIL_H */
