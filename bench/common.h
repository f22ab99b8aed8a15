/*
 * common.h - what the echo benchmarks share: options, the session protocol,
 * the run clock, the result line.
 *
 * The protocol (proactor_test, tp_reactor_test, raw_limit):
 *   S sessions; each is a client end and a server end, two sockets of one
 *   loopback TCP connection (TCP_NODELAY) inside this process.
 *   The server end echoes every byte it receives.
 *   The client end sends blocks of k bytes.  With a window w > 0 it keeps
 *   sending while fewer than w bytes are unechoed, and reads echoes at the
 *   same time (full duplex).  With w = 0 it sends one block and waits until
 *   the whole block came back before it sends the next (half duplex).
 *   Every read that returns data is followed by the callback delay (d µs of
 *   busy spinning by default, sleeping with -z) before anything else is done
 *   with that data: it stands for the work an application does per message.
 *
 * The result line counts, as the source document does, every byte four
 * times: client sent + client received + server sent + server received,
 * divided by the run time (from the moment every session is connected to
 * the moment the run is stopped; bytes moved after the stop are not
 * counted).
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

/* Exit codes shared by every program (meson understands 77). */
enum {
	BENCH_EXIT_OK = 0,
	BENCH_EXIT_CHECK = 1,   /* --check: no data moved or a session starved */
	BENCH_EXIT_USAGE = 2,   /* bad flags */
	BENCH_EXIT_SKIP = 77,   /* the engine is not available here */
};

typedef struct bench_opts {
	int sessions;           /* -s */
	int threads;            /* -n */
	size_t block;           /* -k */
	size_t window;          /* -w; 0 = half duplex */
	unsigned delay_us;      /* -d */
	bool delay_sleep;       /* -z: sleep instead of spinning */
	double seconds;         /* -i */
	const char *engine;     /* -e (proactor_test only); NULL = "auto" */
	bool blocking;          /* -b (proactor_test only): leave sockets
	                           blocking instead of O_NONBLOCK */
	bool check;             /* --check */
	bool verify;            /* --verify: check every echoed byte */
	bool per_thread;        /* --per-thread (proactor_test only): one
	                           proactor per loop thread */
} bench_opts;

/* Parse argv into *o.  prog names the program in messages; with_engine
 * allows -e and -b.  Prints the usage and exits 2 on a bad flag, 0 on -h. */
void bench_parse(bench_opts *o, int argc, char **argv, const char *prog,
		 bool with_engine);

/* Monotonic time in seconds. */
double bench_now(void);

/* The callback delay: spin (or sleep) for o->delay_us microseconds. */
void bench_delay(const bench_opts *o);

/* Raise the soft RLIMIT_NOFILE to at least need (up to the hard limit).
 * Returns 0, or -1 with a message on stderr when the hard limit is lower. */
int bench_raise_nofile(long need);

/* A listening TCP socket on 127.0.0.1, kernel-chosen port, backlog big
 * enough for every session; its address goes to *addr.  nonblock sets
 * O_NONBLOCK.  Returns the fd or -1 with a message on stderr. */
int bench_listen(struct sockaddr_in *addr, bool nonblock);

/* A new TCP socket (close-on-exec, TCP_NODELAY, O_NONBLOCK if asked).
 * Returns the fd or -1 with a message on stderr. */
int bench_socket(bool nonblock);

/* TCP_NODELAY and, if asked, O_NONBLOCK on an accepted socket.
 * Returns 0 or -1 with a message on stderr. */
int bench_tune(int fd, bool nonblock);

/* Connect a new client socket to the listener lfd (at addr) and accept its
 * peer, blocking; both tuned with bench_tune(fd, nonblock).  Returns 0, or
 * -1 after printing why (prefixed with prog). */
int bench_connect_pair(const char *prog, int lfd, const struct sockaddr_in *addr,
		       bool nonblock, int *cfd, int *sfd);

/* Block SIGINT in the calling thread and every thread it creates later
 * (bench_wait_run takes it), and ignore SIGPIPE (a write to a socket whose
 * peer is gone fails with EPIPE instead).  Call before creating threads. */
void bench_signals(void);

/* Wait until o->seconds have passed or SIGINT arrives (the signal must be
 * blocked, see bench_signals).  Returns true if interrupted. */
bool bench_wait_run(const bench_opts *o);

/* ---- the client's window ------------------------------------------- */

/* May the client start another block, with sent bytes started and recv
 * bytes echoed back so far? */
static inline bool bench_may_send(const bench_opts *o, uint64_t sent,
				  uint64_t recv)
{
	if (o->window == 0)
		return sent == recv;
	return sent - recv < o->window;
}

/* The bytes every client sends: block-sized, the same for every block. */
const unsigned char *bench_pattern(size_t block);

/* With --verify: do n echoed bytes at stream offset off match what was
 * sent?  Returns true if they do. */
bool bench_verify(const bench_opts *o, uint64_t off, const void *data,
		  size_t n);

/* ---- the server's echo buffer ---------------------------------------- */

/* A byte ring: data is read into the free space at the tail and written
 * from the filled space at the head.  Not locked. */
typedef struct bench_ring {
	unsigned char *buf;
	size_t cap;
	size_t head;            /* first filled byte */
	size_t len;             /* filled bytes */
} bench_ring;

/* Room for a full window plus one block.  Returns 0 or -1 (no memory). */
int bench_ring_init(bench_ring *r, const bench_opts *o);
void bench_ring_free(bench_ring *r);

/* Where the next read may go: *n contiguous free bytes, at most max. */
static inline unsigned char *bench_ring_space(const bench_ring *r, size_t max,
					      size_t *n)
{
	size_t tail = (r->head + r->len) % r->cap;
	size_t contig;

	if (r->len == r->cap)
		contig = 0;
	else if (tail >= r->head)
		contig = r->cap - tail;         /* free up to the end */
	else
		contig = r->head - tail;        /* free up to the head */
	*n = contig < max ? contig : max;
	return r->buf + tail;
}

/* Where the next write comes from: *n contiguous filled bytes. */
static inline unsigned char *bench_ring_data(const bench_ring *r, size_t *n)
{
	size_t contig = r->cap - r->head;

	*n = r->len < contig ? r->len : contig;
	return r->buf + r->head;
}

static inline void bench_ring_filled(bench_ring *r, size_t n) { r->len += n; }

static inline void bench_ring_drained(bench_ring *r, size_t n)
{
	r->head = (r->head + n) % r->cap;
	r->len -= n;
}

/* When empty, start again at the beginning, so reads stay whole blocks.
 * Only while no read is in flight into the ring. */
static inline void bench_ring_rewind(bench_ring *r)
{
	if (r->len == 0)
		r->head = 0;
}

/* ---- results ---------------------------------------------------------- */

/* What one session moved while the run was on. */
typedef struct bench_counts {
	uint64_t client_sent;
	uint64_t client_recv;
	uint64_t server_sent;
	uint64_t server_recv;
} bench_counts;

/*
 * Print the one result line on stdout:
 *   result prog=P engine=E sessions=S threads=T block=K window=W delay_us=D
 *   seconds=X bytes=B bytes_per_s=R oneway_MBps=M round_trips_per_s=N
 *   active=A min_session_MBps=L max_session_MBps=H
 * per holds the S sessions' counts; engine may be NULL ("-").  Returns the
 * exit code: 0, or with --check 1 unless data moved in every session.
 */
int bench_report(const bench_opts *o, const char *prog, const char *engine,
		 const bench_counts *per, double seconds);

#endif /* BENCH_COMMON_H */
