/*
 * peer_util.h - the start-up the echo peers (epoll_echo, uv_echo) and
 * their load client share: the server options, and room for many
 * descriptors.  Nothing here runs once the I/O has begun: how each peer
 * moves bytes stays in its own file.
 */
#ifndef BENCH_PEER_UTIL_H
#define BENCH_PEER_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
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

#endif /* BENCH_PEER_UTIL_H */
