/*
 * nbio.h - the non-blocking calls that perform an operation once its
 * descriptor is ready (providers/nbio.c), shared by the two providers that
 * learn readiness first and then make the call themselves: the readiness
 * provider (providers/select.c, after a poller's report or at start) and
 * the Linux AIO provider (providers/linux_aio.c, after an IOCB_CMD_POLL
 * event or at start).
 *
 * The calls run without the proactor mutex.  They touch only the result
 * they are given (its flags only read), a connect's progress (a byte in
 * the result's private space) and a private copy of what is known of the
 * descriptor (px_nbio), which the provider takes under the mutex and
 * merges back afterwards.  Where the two providers differ, they say so in
 * a px_nbio_rules of their own.
 */
#ifndef PX_PROVIDERS_NBIO_H
#define PX_PROVIDERS_NBIO_H

#include <poll.h>
#include <stdbool.h>

#include "fdq.h"
#include "internal.h"

/* A readiness report of an error with neither the direction dir
 * (PX_FDQ_RD or _WR) nor a hang-up: what a socket with an entry in its
 * error queue (IP_RECVERR, SO_TIMESTAMPING) polls while recv and send say
 * EAGAIN, until the application reads the queue with MSG_ERRQUEUE.
 * revents in poll(2)'s bits, which epoll's equal on Linux. */
static inline bool px__nbio_error_alone(unsigned revents, int dir)
{
	unsigned want = dir == PX_FDQ_RD ? POLLIN : POLLOUT;

	return (revents & POLLERR) && !(revents & (want | POLLHUP | POLLNVAL));
}

/* What a stream descriptor is, learnt on first use; later kinds only
 * refine earlier ones (a provider merging a copy back keeps the larger). */
enum {
	PX_NBIO_KIND_UNKNOWN = 0,
	PX_NBIO_KIND_SOCKET,
	PX_NBIO_KIND_FILE,      /* regular file or block device: always ready */
	PX_NBIO_KIND_NOWAIT,    /* RWF_NOWAIT keeps it from blocking */
	PX_NBIO_KIND_NONBLOCK,  /* O_NONBLOCK: plain read/write */
	PX_NBIO_KIND_BLOCKING,  /* no RWF_NOWAIT: poll(0) first, writes cut
	                           to PIPE_BUF */
	PX_NBIO_KIND_TTY,       /* a blocking terminal: as BLOCKING, but read
	                           and written through a non-blocking
	                           description of its own (nbio.c,
	                           nb_tty_io) */
	PX_NBIO_KIND_ANON,      /* blocking, of no file type (inotify, or
	                           a call the file has no method for):
	                           O_NONBLOCK around the call (nbio.c,
	                           nb_anon_io) */
};

/* px_nbio.flags */
#define PX_NBIO_LISTENER_NB 0x1u /* accept: the listener is O_NONBLOCK */
#define PX_NBIO_ANON 0x2u        /* of no file type, an anonymous inode
                                    (learnt with the kind) */

/* Outcome of one attempt. */
enum {
	PX_NBIO_AGAIN = 0,      /* not ready: nothing finished */
	PX_NBIO_DONE,           /* finished (outputs set) */
	PX_NBIO_DONE_STOP,      /* finished, and the descriptor looks drained
	                           (a short read or write): a provider that
	                           tries the next operation at once may stop */
};

/* Progress of a connect: the byte px__nbio_try is given for it (pending:
 * on a socket that was non-blocking at the start, or blocking). */
enum { PX_NBIO_CONN_NEW = 0, PX_NBIO_CONN_PENDING, PX_NBIO_CONN_PENDING_BLOCKING };

/* What the calls of one descriptor need to know and may learn: the
 * provider's copy of its entry (see the opening comment). */
typedef struct px_nbio {
	int fd;
	uint8_t kind;      /* PX_NBIO_KIND_* */
	uint8_t flags;     /* PX_NBIO_LISTENER_NB, PX_NBIO_ANON */
	uint8_t reported;  /* the wait reported the descriptor (a leader's
	                      attempt, not a start's): a read's EAGAIN is
	                      then checked for a socket shut down for
	                      reading (nbio.c, nb_read_shut); never stored */
} px_nbio;

/* Where the providers differ. */
typedef struct px_nbio_rules {
	/* The most one single-buffer stream read or write asks for (the
	 * Linux AIO provider: the kernel's MAX_RW_COUNT; the readiness
	 * provider: SIZE_MAX, no limit of its own). */
	size_t max_len;
	/* The kernel refused RWF_NOWAIT on a stream that is not a socket:
	 * true, look at O_NONBLOCK and use such a descriptor plainly
	 * (PX_NBIO_KIND_NONBLOCK); false, treat every such descriptor as
	 * blocking (PX_NBIO_KIND_BLOCKING: poll(0) first). */
	bool trust_nonblock;
} px_nbio_rules;

/* One non-blocking attempt at r (a stream, datagram, accept or connect
 * operation) on io's descriptor; *conn is r's connect progress
 * (PX_NBIO_CONN_*, zero at start; other operations leave it alone).
 * Returns PX_NBIO_*; with PX_NBIO_DONE* r's outputs are set (an error
 * included), and a write_all's bytes so far are in r->done either way. */
int px__nbio_try(const px_nbio_rules *rules, px_nbio *io, uint8_t *conn,
		 px_result *r) PX_HIDDEN;

/* r is a connect that px__nbio_try left new after EAGAIN (an AF_UNIX
 * listener's full backlog, on a blocking socket): the provider must try
 * it again after a pause, since no poll reports the room (the socket
 * polls writable all the while). */
static inline bool px__nbio_connect_later(const px_result *r, uint8_t conn)
{
	return r->c.op == PX_OP_CONNECT && conn == PX_NBIO_CONN_NEW;
}

/* A socket shut down for reading (POLLRDHUP now)?  A datagram socket in
 * that state polls readable for good while a non-blocking receive says
 * EAGAIN (nbio.c, nb_read_shut). */
bool px__sock_read_shut(int fd) PX_HIDDEN;

/* read_file / write_file: one pread or pwrite (preadv / pwritev) at r's
 * offset; outputs set. */
void px__nbio_file_io(px_result *r) PX_HIDDEN;

#endif /* PX_PROVIDERS_NBIO_H */
