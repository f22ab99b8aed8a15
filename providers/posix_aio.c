/*
 * posix_aio.c - the POSIX AIO provider: read and write of files and
 * streams through aio_read / aio_write, status through aio_error /
 * aio_return, cancel through aio_cancel.
 *
 * What glibc's AIO is (2.3x, the facts this file is built around):
 *   - There is no kernel AIO underneath: a pool of helper threads performs
 *     plain pread/pwrite calls (read/write after ESPIPE, so sockets and
 *     pipes work).  The helpers block every signal.
 *   - Requests are queued by descriptor number, and the requests of one
 *     number run one after another in one helper.  So a read that waits
 *     for data on a socket holds back every later request on that number:
 *     a write started after it would wait for the peer's data, and a
 *     duplex session (each side reading while it writes) hangs for good.
 *     This provider therefore writes a stream through a dup of its
 *     descriptor (px_paio_fd.wfd): a different number, its own queue in
 *     glibc, its own helper.  The dup lives while the descriptor has
 *     operations pending and is closed when both queues are empty, since
 *     the application may close and reuse the number after that.
 *   - The pool has a maximum number of threads (aio_init's aio_threads, 20
 *     by default); requests beyond it wait for a helper to come free.  A
 *     stream read waiting for data occupies a helper until data comes, so
 *     the provider raises the maximum (key aio_threads=, 256 by default)
 *     with aio_init before the first request of the process.
 *   - aio_cancel cancels only requests still queued (AIO_CANCELED: they
 *     then notify like a finished request, with ECANCELED).  A request a
 *     helper is performing cannot be stopped (AIO_NOTCANCELED): it
 *     completes with its real result when the call returns, which for a
 *     read on a quiet socket may be never.  So cancelling or destroying
 *     with a stream read pending waits for that read; sockets belong on
 *     the readiness provider (preset posix-aio+epoll), and this provider
 *     is meant for files.  AIO_ALLDONE: finished, the notification is on
 *     its way.  Every outcome leads to exactly one completion, through the
 *     wait, as for any request.
 *   - aio_suspend builds a wait list per call from the list it is given;
 *     several threads calling it over one shared, changing list have hit
 *     an assertion in glibc.  Only the leader of the aiocb wait builds and
 *     uses its list (wait_strategies/aiocb.c).
 *
 * Order.  Stream operations keep the shared per-descriptor queues
 * (proactor/fdq.h): only the head of a direction is in glibc.  A head
 * that glibc refuses for now (EAGAIN) when its turn comes waits on
 * p->again, as a refused start waits deferred, and every wait round tries
 * it again (the waits last at most PX_PAIO_RETRY_MS meanwhile).  File
 * operations carry their offset and go straight in, spread over the
 * file's descriptor and file_lanes-1 dups of it (8 lanes by default), since
 * glibc runs the requests of one descriptor one after another.
 *
 * Locking.  start, cancel and the reaping run under the proactor mutex;
 * aio_read/aio_write/aio_cancel only queue work for the helpers and are
 * cheap, so the mutex is never released here.  The helpers touch nothing
 * but the aiocbs; the waits' notifications are described in their files.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbio.h"      /* px__sock_read_shut */
#include "posix_aio.h"

/* Defaults when the config leaves them 0. */
#define PX_PAIO_DEFAULT_THREADS 256u
#define PX_PAIO_DEFAULT_LANES 8u



static px_paio *paio_of_prov(px_provider *p)
{
	return px_container_of(p, px_paio, prov);
}

static bool paio_is_stream(px_op op)
{
	return op == PX_OP_READ_STREAM || op == PX_OP_WRITE_STREAM;
}

static bool paio_is_write(px_op op)
{
	return op == PX_OP_WRITE_STREAM || op == PX_OP_WRITE_FILE;
}

/* Raise glibc's helper thread maximum, once per process and before the
 * first request (glibc ignores it once its pool exists).  The first
 * provider's number wins. */
static struct aioinit paio_ai;
static pthread_once_t paio_ai_once = PTHREAD_ONCE_INIT;

static void paio_ai_apply(void)
{
	aio_init(&paio_ai);
}

static pthread_mutex_t paio_ai_lock = PTHREAD_MUTEX_INITIALIZER;

void px__paio_atfork(int phase)
{
	if (phase == PX_FORK_PREPARE)
		pthread_mutex_lock(&paio_ai_lock);
	else
		pthread_mutex_unlock(&paio_ai_lock);
}

static void paio_init_glibc(unsigned threads)
{
	pthread_mutex_lock(&paio_ai_lock);
	if (!paio_ai.aio_threads) {
		paio_ai.aio_threads = (int)threads;
		paio_ai.aio_num = (int)threads;
		paio_ai.aio_idle_time = 1;
	}
	pthread_mutex_unlock(&paio_ai_lock);
	pthread_once(&paio_ai_once, paio_ai_apply);
}

/* ------------------------------------------------------------------ */
/* Submission                                                           */
/* ------------------------------------------------------------------ */

/* A dup of fd for this provider's own use, on a number no pending
 * operation names (px__fd_keep_off_ops), or -errno. */
static int paio_dup(px_paio *p, int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	/* Marked as the library's once on its final number. */
	return d < 0 ? -errno : px__own_fd(px__fd_keep_off_ops(p->prov.px, d));
}

/*
 * A blocking description of nb_fifo fe's pipe of the provider's own, for
 * one direction (wr: writing), or -1.  glibc's helper makes a plain
 * read(2) or write(2) on the number it is given, which on an O_NONBLOCK
 * pipe says EAGAIN at once instead of waiting for data or room: a stream
 * read of an empty non-blocking pipe ended with EAGAIN, a write-all with
 * EAGAIN once the pipe was full (fixed problem 222).  The pipe is opened
 * again through /proc/self/fd (non-blocking, so that a FIFO with no
 * reader fails with ENXIO instead of waiting in the open), checked to be
 * the same pipe, and made blocking; the application's description keeps
 * its flags.  Kept while the descriptor is busy (paio_fd_idle), like the
 * write dup: a reopen for writing counts as a writer of the pipe, so its
 * reader sees the end of the file only once it is closed.  Where it
 * cannot be made (no /proc, no descriptor number free) the operation
 * goes through the application's description, and an EAGAIN there is
 * tried again at the next wait round (px__paio_reap).  Mutex held.
 */
static int paio_block_fd(px_paio *p, px_paio_fd *fe, bool wr)
{
	char path[40];
	struct stat a, b;
	int d, fl;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fe->fq.fd);
	d = open(path, (wr ? O_WRONLY : O_RDONLY) | O_NONBLOCK | O_CLOEXEC);
	if (d < 0)
		return -1;
	if (fstat(d, &a) < 0 || fstat(fe->fq.fd, &b) < 0 ||
	    a.st_dev != b.st_dev || a.st_ino != b.st_ino ||
	    (fl = fcntl(d, F_GETFL)) < 0 ||
	    fcntl(d, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		close(d);
		return -1;
	}
	d = px__own_fd(px__fd_keep_off_ops(p->prov.px, d));
	return d < 0 ? -1 : d;
}

/* The descriptor a stream read goes through: its own, or for an nb_fifo
 * a blocking reopen (paio_block_fd). */
static int paio_read_fd(px_paio *p, px_paio_fd *fe)
{
	if (!fe->nb_fifo)
		return fe->fq.fd;
	if (!fe->rfd_open) {
		int d = paio_block_fd(p, fe, false);

		if (d < 0)
			return fe->fq.fd;
		fe->rfd = d;
		fe->rfd_open = true;
	}
	return fe->rfd;
}

/* The descriptor a stream write goes through: a dup kept while the
 * descriptor is busy.  Not on a file with offsets, whose two directions
 * take turns in glibc anyway (PAIO_HELD): closing the dup released the
 * process's record locks on the file (paio_posix_locked).  The dup is
 * there only so that the write does not queue in glibc behind a read of
 * the same number; with no read of the descriptor pending, a dup that
 * cannot be made (the process out of descriptors) leaves the write on
 * the descriptor itself, as write(2) would go, rather than failing a
 * write to a pipe with EMFILE. */
static int paio_write_fd(px_paio *p, px_paio_fd *fe)
{
	if (fe->seekable)
		return fe->fq.fd;
	if (!fe->wfd_open) {
		int d = fe->nb_fifo ? paio_block_fd(p, fe, true) : -1;

		if (d < 0)
			d = paio_dup(p, fe->fq.fd);

		if (d < 0 && !px_fdq_head(&fe->fq, PX_FDQ_RD))
			return fe->fq.fd;
		if (d < 0)
			return d;
		fe->wfd = d;
		fe->wfd_open = true;
	}
	return fe->wfd;
}

/* Both queues of fe are empty: forget the dup. */
static void paio_fd_idle(px_paio_fd *fe)
{
	if (!px_fdq_idle(&fe->fq) || fe->files)
		return;
	fe->checked = false;
	fe->lock_seen = false;
	if (fe->wfd_open) {
		px__own_close(fe->wfd);
		fe->wfd_open = false;
	}
	if (fe->rfd_open) {
		px__own_close(fe->rfd);
		fe->rfd_open = false;
	}
	for (unsigned k = 1; fe->lanes_open; k++) {
		if (fe->lanes_open & (1u << k)) {
			px__own_close(fe->lane_fd[k]);
			fe->lanes_open &= ~(1u << k);
		}
	}
}

/* Whether this process holds a POSIX record lock (fcntl F_SETLK) on fd's
 * file.  Closing any descriptor of a file releases every such lock of the
 * process on it (close(2)), a lane's dup closed when the file goes idle
 * included: an application that had locked the file and read it through
 * this provider lost its lock (a helper's review of 2026-12-06).  The
 * kernel lists the locks taken through fd's file description in
 * /proc/self/fdinfo; without /proc, taken as none; with no descriptor
 * number free to read it, as held. */
static bool paio_posix_locked(int fd)
{
	char path[40], buf[1024];
	ssize_t n;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = px__own_fd(open(path, O_RDONLY | O_CLOEXEC));
	/* Out of descriptors, the question cannot be asked: taken as
	 * locked, so that no dup is made while the answer is cached (the
	 * rest of the busy spell, when numbers may be free again). */
	if (f < 0)
		return errno == EMFILE || errno == ENFILE;
	n = read(f, buf, sizeof(buf) - 1);
	px__own_close(f);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, " POSIX ") != NULL;
}

/* The descriptor a file request goes through: glibc performs the requests
 * of one descriptor number one after another, so spreading reads over the
 * file's descriptor and dups of it (file_lanes=) lets several helpers
 * work on one file at once (writes do not spread: below).  The dups live while the file has requests
 * in glibc.  A dup that cannot be made leaves the request on the file's
 * own descriptor. */
static int paio_file_fd(px_paio *p, px_paio_fd *fe, px_op op)
{
	/* As many lanes as the file has requests in glibc (this one
	 * counted), up to file_lanes: a file read one request at a time
	 * costs no dup. */
	unsigned n = fe->files < p->lanes ? fe->files : p->lanes;
	unsigned k = n > 1 ? fe->next_lane++ % n : 0;

	/* Writes keep to the file's own descriptor, where glibc performs
	 * them one after another in the order they were started (writes on
	 * two lanes run at once, and a later write to the same bytes could
	 * land first); reads are spread. */
	if (paio_is_write(op))
		k = 0;
	if (!k)
		return fe->fq.fd;
	if (!(fe->lanes_open & (1u << k))) {
		/* A file the process holds a record lock on gets no dup:
		 * closing it would release the lock.  Looked at once per
		 * busy spell, when the first dup would be made. */
		if (!fe->lock_seen) {
			fe->locked = paio_posix_locked(fe->fq.fd);
			fe->lock_seen = true;
		}
		if (fe->locked)
			return fe->fq.fd;
		int d = paio_dup(p, fe->fq.fd);
		if (d < 0)
			return fe->fq.fd;
		fe->lane_fd[k] = d;
		fe->lanes_open |= 1u << k;
	}
	return fe->lane_fd[k];
}

/* paio_submit: r, a stream operation on a file with offsets, waits as
 * its direction's head until the other direction's head leaves glibc. */
#define PAIO_HELD 1

static int paio_other_dir(int dir)
{
	return dir == PX_FDQ_RD ? PX_FDQ_WR : PX_FDQ_RD;
}

/* Whether the head of the direction other than op's is in glibc. */
static bool paio_other_in_glibc(const px_paio_fd *fe, px_op op)
{
	px_result *h = px_fdq_head(&fe->fq, paio_other_dir(px__fdq_dir(op)));

	return h && px_paio_req_of(h)->submitted;
}

/* Hand r (from r->done on) to glibc.  Returns 0, PAIO_HELD (see above), or
 * -errno (-EAGAIN: glibc is out of room for now). */
static int paio_submit(px_paio *p, px_result *r)
{
	px_paio_req *q = px_paio_req_of(r);
	px_completion *c = &r->c;
	int fd = c->fd, rc;

	if (c->op == PX_OP_WRITE_STREAM) {
		fd = paio_write_fd(p, q->fe);
		if (fd < 0)
			return fd;
	} else if (c->op == PX_OP_READ_STREAM) {
		fd = paio_read_fd(p, q->fe);
	} else if (!paio_is_stream(c->op) && q->fe) {
		fd = paio_file_fd(p, q->fe, c->op);
	}
	memset(&q->cb, 0, sizeof(q->cb));
	q->cb.aio_fildes = fd;
	q->cb.aio_buf = px_buf_rest(r);
	q->cb.aio_nbytes = c->len - r->done;
	if (!paio_is_stream(c->op)) {
		q->cb.aio_offset = (off_t)(c->offset + r->done);
	} else if (q->fe && q->fe->seekable) {
		/* glibc does a request with pread or pwrite at aio_offset,
		 * read or write only where there are no offsets (ESPIPE):
		 * a stream operation on a file (a program's standard input
		 * or output redirected to one) went at offset 0 every time,
		 * so a read never reached the end.  It goes at the file's
		 * position instead, and moves it when it completes
		 * (px__paio_reap).  The operations of one direction of a
		 * descriptor go one at a time, and here the two directions
		 * take turns too: a read and a write in glibc at once would
		 * both start at the same position, the write over the bytes
		 * the read returned (read(2) and write(2) each move the
		 * position before the other looks).  A file read never waits
		 * for data, so the turn is short.  The held head goes in
		 * when the other leaves (paio_dequeue). */
		if (paio_other_in_glibc(q->fe, c->op))
			return PAIO_HELD;
		q->pos = lseek(fd, 0, SEEK_CUR);
		if (q->pos < 0)
			return -errno;
		q->cb.aio_offset = q->pos;
	}
	q->cb.aio_sigevent.sigev_notify = SIGEV_NONE;
	if (q->quiet)
		;   /* found by the sigwait wait's scans */
	else if (p->kind == PX_PAIO_SIGWAIT)
		px__paio_sigwait_notify(p, q);
	else if (p->kind == PX_PAIO_CALLBACK)
		px__paio_callback_notify(p, q);
	atomic_store_explicit(&q->next, NULL, memory_order_relaxed);
	q->owner = p;
	q->cancel_sent = false;
	rc = paio_is_write(c->op) ? aio_write(&q->cb) : aio_read(&q->cb);
	if (rc < 0)
		return -errno;
	q->submitted = true;
	px_list_push_back(&p->inflight, &q->ilink);
	p->gen++;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Completion                                                           */
/* ------------------------------------------------------------------ */

/* r leaves its stream queue; the next head, if any, goes to glibc (or
 * fails there and then, its completion on p's done path). */
static void paio_dequeue(px_paio *p, px_result *r);

static px_result *paio_finish(px_paio *p, px_result *r, size_t bytes, int error)
{
	px_result_finish(r, bytes, error);
	paio_dequeue(p, r);
	return r;
}

/* Hand the head of fe's queue dir to glibc.  A head glibc refuses for
 * good fails (onto p->failed, for the wait to hand out) and the next one
 * is tried; a head it refuses for now (EAGAIN: no memory or no helper
 * thread, as a start that is deferred) stays the head and waits on
 * p->again, where the wait's next round tries it again (paio_retry).  A
 * cancelled one waiting there ends with ECANCELED.  Returns -EAGAIN when
 * a head was left on p->again, else 0. */
static int paio_submit_heads(px_paio *p, px_paio_fd *fe, int dir)
{
	px_result *n;

	while ((n = px_fdq_head(&fe->fq, dir))) {
		px_paio_req *nq = px_paio_req_of(n);
		int rc = nq->cancel_req ? -ECANCELED : paio_submit(p, n);

		if (rc >= 0)
			return 0;   /* in glibc, or held (PAIO_HELD) */
		nq->submitted = false;
		if (rc == -EAGAIN) {
			px_list_push_back(&p->again, &nq->ilink);
			return -EAGAIN;
		}
		px_fdq_remove(&fe->fq, dir, n);
		px_result_finish(n, n->done, -rc);
		px_list_push_back(&p->failed, &nq->ilink);
	}
	return 0;
}

/* The heads on p->again, oldest first, until glibc refuses one again. */
static void paio_retry(px_paio *p)
{
	px_link *l;

	while ((l = px_list_pop_front(&p->again))) {
		px_paio_req *q = px_paio_req_of_ilink(l);
		px_paio_fd *fe = q->fe;

		if (paio_submit_heads(p, fe, px__fdq_dir(px_paio_result_of(q)->c.op)) < 0)
			break;
		paio_fd_idle(fe);
	}
}

static void paio_dequeue(px_paio *p, px_result *r)
{
	px_paio_req *q = px_paio_req_of(r);
	int dir = px__fdq_dir(r->c.op);

	if (dir < 0 && q->fe) {
		/* A file request on lanes. */
		q->fe->files--;
		paio_fd_idle(q->fe);
		q->fe = NULL;
		return;
	}
	if (dir < 0 || !q->fe || !px_link_linked(&r->plink))
		return;
	if (px_fdq_remove(&q->fe->fq, dir, r)) {
		/* On a file with offsets the other direction's head may be
		 * held for r (PAIO_HELD): it goes first, having waited. */
		int other = paio_other_dir(dir);
		px_result *h = px_fdq_head(&q->fe->fq, other);
		if (q->fe->seekable && h && !px_paio_req_of(h)->submitted &&
		    !px_link_linked(&px_paio_req_of(h)->ilink))
			paio_submit_heads(p, q->fe, other);
		paio_submit_heads(p, q->fe, dir);
	}
	paio_fd_idle(q->fe);
}

bool px__paio_is_done_req(px_paio *p, px_paio_req *q)
{
	px_result *r = px_paio_result_of(q);

	return q->owner == p && q->submitted && r->state == PX_RS_STARTED &&
	       px_link_linked(&q->ilink) && px_paio_done(q);
}

/* May a file request that came back with EAGAIN be done again?  Only on
 * a regular file or block device, which never say EAGAIN themselves (a
 * pipe given to read_file might, and would spin). */
static bool paio_redo_safe(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

/* Whether a stream request's EAGAIN was its descriptor's "would block"
 * (O_NONBLOCK), not glibc's failure to notify (fixed problem 223). */
static bool paio_would_block(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

px_result *px__paio_reap(px_paio *p, px_paio_req *q)
{
	px_result *r = px_paio_result_of(q);
	px_completion *c = &r->c;
	int err = aio_error(&q->cb);
	ssize_t n = aio_return(&q->cb);

	px_list_remove(&p->inflight, &q->ilink);
	p->gen++;
	q->submitted = false;
	if (q->quiet) {
		q->quiet = false;
		p->nquiet--;
	}
	if (err == ECANCELED || (err && q->cancel_req && n < 0))
		return paio_finish(p, r, r->done, ECANCELED);
	if (err == EAGAIN && p->kind == PX_PAIO_SIGWAIT && !paio_is_stream(c->op) &&
	    paio_redo_safe(c->fd)) {
		/* glibc could not queue the signal (the queue is full) and
		 * wrote that failure over the result.  A read or write at an
		 * offset of a regular file or block device can be done again,
		 * and those never say EAGAIN themselves.  Done again without a
		 * signal: with the queue full (RLIMIT_SIGPENDING counts every
		 * process of the user) it would fail the same way, over and
		 * over; the wait's scans find it instead. */
		int rc;
		q->retries++;
		p->requeued++;
		q->quiet = true;
		p->nquiet++;
		rc = paio_submit(p, r);
		if (rc == 0)
			return NULL;
		q->quiet = false;
		p->nquiet--;
		return paio_finish(p, r, r->done, -rc);
	}
	if (err == EAGAIN && paio_is_stream(c->op) && q->fe &&
	    paio_would_block(q->cb.aio_fildes)) {
		/* The helper's read(2) or write(2) of an O_NONBLOCK
		 * descriptor found no data or no room: a socket (sockets=aio),
		 * or a pipe that could not be opened again blocking
		 * (paio_block_fd).  Still the head, it waits on p->again and
		 * goes in again at the next wait round (the waits last at
		 * most PX_PAIO_RETRY_MS meanwhile), as every other engine
		 * waits for data or room; a cancel ends it there.  Except a
		 * read of a datagram socket shut down for reading, which says
		 * EAGAIN for good while it polls readable (POLLRDHUP; a
		 * stream socket returns 0 itself): one more try takes a
		 * datagram that came meanwhile, then 0 bytes, as a blocking
		 * read gives and the other engines report (nbio.c,
		 * nb_read_shut). */
		if (c->op == PX_OP_READ_STREAM &&
		    (q->shut_seen || px__sock_read_shut(q->cb.aio_fildes))) {
			if (q->shut_seen)
				return paio_finish(p, r, r->done, 0);
			q->shut_seen = true;
		}
		px_list_push_back(&p->again, &q->ilink);
		return NULL;
	}
	if (err)
		return paio_finish(p, r, r->done, err > 0 ? err : EIO);
	if (n < 0)
		return paio_finish(p, r, r->done, EIO);
	r->done += (size_t)n;
	if (n > 0 && paio_is_stream(c->op) && q->fe && q->fe->seekable) {
		/* Moved as read(2) or write(2) would have (see paio_submit);
		 * O_APPEND writes went to the end, as pwrite's do on Linux. */
		if (paio_is_write(c->op) &&
		    (fcntl(q->cb.aio_fildes, F_GETFL) & O_APPEND))
			lseek(q->cb.aio_fildes, 0, SEEK_END);
		else
			lseek(q->cb.aio_fildes, q->pos + n, SEEK_SET);
	}
	if (c->op == PX_OP_WRITE_STREAM && (r->flags & PX_RF_WRITE_ALL) &&
	    n > 0 && r->done < c->len) {
		int rc;
		if (q->cancel_req)
			return paio_finish(p, r, r->done, ECANCELED);
		rc = paio_submit(p, r);
		if (rc >= 0)
			return NULL;    /* in glibc, or held (PAIO_HELD) */
		if (rc == -EAGAIN) {
			/* Still the head: the rest goes in later. */
			px_list_push_back(&p->again, &q->ilink);
			return NULL;
		}
		return paio_finish(p, r, r->done, -rc);
	}
	return paio_finish(p, r, r->done, 0);
}

px_result *px__paio_next_failed(px_paio *p)
{
	px_link *l;

	if (!px_list_empty(&p->again))
		paio_retry(p);
	l = px_list_pop_front(&p->failed);

	return l ? px_paio_result_of(px_paio_req_of_ilink(l)) : NULL;
}

px_result *px__paio_scan_next(px_paio *p)
{
	px_result *r;

	/* One walk per wait, carried over the calls.  Requests the reaps
	 * submit go to the back, in progress. */
	if (!p->scanning) {
		p->scanning = true;
		p->scan_pos = px_list_first(&p->inflight);
	}
	while (p->scan_pos) {
		px_link *l = p->scan_pos;
		px_paio_req *q = px_paio_req_of_ilink(l);
		p->scan_pos = px_list_next(&p->inflight, l);
		if (px_paio_done(q) && (r = px__paio_reap(p, q)))
			return r;
	}
	p->scanning = false;
	p->scan = false;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Provider ops                                                         */
/* ------------------------------------------------------------------ */

#define PAIO_OPS                                                               \
	(PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_WRITE_STREAM) |        \
	 PX_OP_BIT(PX_OP_READ_FILE) | PX_OP_BIT(PX_OP_WRITE_FILE))

static int paio_start(px_provider *pv, px_result *r)
{
	px_paio *p = paio_of_prov(pv);
	px_paio_req *q = px_paio_req_of(r);
	int dir = px__fdq_dir(r->c.op);
	px_fdq_entry *fq;
	int rc;

	if (!(PX_OP_BIT(r->c.op) & PAIO_OPS))
		return -EOPNOTSUPP;
	memset(q, 0, sizeof(*q));
	r->done = 0;
	if (dir < 0) {
		/* glibc would only find a bad descriptor in its helper; the
		 * API refuses it at the start.  A pipe, a socket or a
		 * terminal has no offsets (px__no_offsets): glibc would read
		 * it as a stream, in a helper that neither a cancel nor
		 * px_destroy can stop while the peer is quiet, so it fails now
		 * with ESPIPE, as pread would; a socket is let through with
		 * sockets=aio.  (A stream start refuses a socket, below.) */
		struct stat st;
		int fr = fstat(r->c.fd, &st);
		if (fr < 0 && errno == EBADF)
			return -EBADF;
		if (fr == 0 && (!p->sockets || !S_ISSOCK(st.st_mode)) &&
		    px__no_offsets(r->c.fd, &st)) {
			px_result_finish(r, 0, ESPIPE);
			return PX_START_DONE;
		}
		if (p->lanes > 1 && fr == 0) {
			px_paio_fd *fe;
			rc = px__fdq_get(&p->fdq, r->c.fd, &fq);
			if (rc < 0)
				return rc;
			fe = px_container_of(fq, px_paio_fd, fq);
			if (!fe->files) {
				fe->dev = st.st_dev;
				fe->ino = st.st_ino;
			}
			/* The application may have closed the number under
			 * requests still in glibc and opened another file
			 * on it: the lanes are dups of the old file, so this
			 * request goes on the descriptor it names. */
			if (!fe->files || (fe->dev == st.st_dev &&
					   fe->ino == st.st_ino)) {
				q->fe = fe;
				fe->files++;
			}
		}
		rc = paio_submit(p, r);
		if (rc < 0 && q->fe) {
			q->fe->files--;
			paio_fd_idle(q->fe);
			q->fe = NULL;
		}
		if (rc == -EAGAIN)
			return PX_START_AGAIN;
		return rc < 0 ? rc : PX_START_STARTED;
	}
	/* glibc would only find a bad descriptor in its helper; the API
	 * refuses it at the start. */
	if (fcntl(r->c.fd, F_GETFD) < 0 && errno == EBADF)
		return -EBADF;
	rc = px__fdq_get(&p->fdq, r->c.fd, &fq);
	if (rc < 0)
		return rc;
	q->fe = px_container_of(fq, px_paio_fd, fq);
	if (!q->fe->checked) {
		/* Once per busy spell of the descriptor (the number may be
		 * reused while it is idle). */
		struct stat st;
		bool known = fstat(r->c.fd, &st) == 0;
		if (known && !p->sockets && S_ISSOCK(st.st_mode))
			return -EOPNOTSUPP;
		q->fe->seekable = known && !px__no_offsets(r->c.fd, &st);
		q->fe->nb_fifo = known && S_ISFIFO(st.st_mode) &&
				 (fcntl(r->c.fd, F_GETFL) & O_NONBLOCK);
		q->fe->checked = true;
	}
	if (!px_fdq_push(fq, dir, r))
		return PX_START_STARTED;  /* goes in when the head leaves */
	rc = paio_submit(p, r);
	if (rc < 0) {
		px_fdq_remove(fq, dir, r);
		paio_fd_idle(q->fe);
		return rc == -EAGAIN ? PX_START_AGAIN : rc;
	}
	return PX_START_STARTED;
}

/* Call aio_cancel for the requests of p on descriptor number fd that
 * were asked to cancel, from the newest one glibc still has back, and
 * stop at the first one that was not asked.  glibc's aio_cancel of the
 * request that heads its number's queue while it waits for a helper takes
 * it out but never hands the next one of that number to a helper
 * (rt/aio_cancel.c: __aio_remove_request without add_request_to_runlist,
 * which a helper's own dequeue does): every later request of the number
 * then stays EINPROGRESS until it is cancelled itself.  Only a request
 * with no live request after it on its number is cancelled in glibc, so
 * none is ever left behind a removed head; the others run to their end
 * (as one a helper performs) unless the ones after them are cancelled
 * too (px_cancel, px_close and px_destroy cancel them all).  Mutex
 * held. */
static void paio_cancel_tail(px_paio *p, int fd)
{
	for (px_link *l = p->inflight.head.prev; l != &p->inflight.head;
	     l = l->prev) {
		px_paio_req *o = px_paio_req_of_ilink(l);
		int rc;

		if (o->cb.aio_fildes != fd || px_paio_done(o))
			continue;
		if (!o->cancel_req)
			return;
		if (o->cancel_sent)
			continue;
		o->cancel_sent = true;
		/* Whatever glibc answers, the request notifies once more
		 * (cancelled, or finished) and the wait hands it out:
		 * exactly one completion. */
		rc = aio_cancel(fd, &o->cb);
		switch (rc) {
		case AIO_CANCELED:
			p->cancels[PX_PAIO_CANCELED]++;
			break;
		case AIO_NOTCANCELED:
			p->cancels[PX_PAIO_NOTCANCELED]++;
			break;
		case AIO_ALLDONE:
			p->cancels[PX_PAIO_ALLDONE]++;
			break;
		default:
			p->cancels[PX_PAIO_CANCEL_ERR]++;
			break;
		}
	}
}

static int paio_cancel(px_provider *pv, px_result *r)
{
	px_paio *p = paio_of_prov(pv);
	px_paio_req *q = px_paio_req_of(r);

	if (!q->submitted) {
		if (px_link_linked(&q->ilink)) {
			/* On p->failed (finished already), or a head on
			 * p->again, which the wait's next retry ends. */
			q->cancel_req = true;
			return PX_CANCEL_PENDING;
		}
		/* Queued behind its descriptor's head: glibc never saw it. */
		px_fdq_remove(&q->fe->fq, px__fdq_dir(r->c.op), r);
		paio_fd_idle(q->fe);
		px_result_finish(r, r->done, ECANCELED);
		return PX_CANCEL_DONE;
	}
	if (q->cancel_req)
		return PX_CANCEL_PENDING;
	q->cancel_req = true;
	if (px_paio_done(q)) {
		/* What aio_cancel would say: the wait hands it out. */
		q->cancel_sent = true;
		p->cancels[PX_PAIO_ALLDONE]++;
		return PX_CANCEL_PENDING;
	}
	paio_cancel_tail(p, q->cb.aio_fildes);
	return PX_CANCEL_PENDING;
}

static void paio_destroy(px_provider *pv)
{
	px_paio *p = paio_of_prov(pv);
	bool keep = false;

	switch (p->kind) {
	case PX_PAIO_AIOCB:
		keep = px__paio_aiocb_fini(p);
		break;
	case PX_PAIO_SIGWAIT:
		px__paio_sigwait_fini(p);
		break;
	default:
		px__paio_callback_fini(p);
		break;
	}
	for (size_t i = 0; i < p->fdq.n; i++) {
		px_paio_fd *fe = (px_paio_fd *)p->fdq.tab[i];
		if (fe && fe->wfd_open)
			px__own_close(fe->wfd);
		if (fe && fe->rfd_open)
			px__own_close(fe->rfd);
		for (unsigned k = 1; fe && k < PX_POSIX_LANES_MAX; k++)
			if (fe->lanes_open & (1u << k))
				px__own_close(fe->lane_fd[k]);
	}
	px__fdq_fini(&p->fdq);
	/* The interrupt's aiocb is in it, and glibc still holds that read
	 * (its eventfd closed behind our back): a few KiB left for the life
	 * of the process rather than freed under glibc's helper. */
	if (!keep)
		free(p);
}

static int paio_create(const px_processor_config *cfg, const px_proc_spec *spec,
		       px_provider **out)
{
	const px_posix_settings *s = (const void *)spec->settings;
	px_paio *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return -ENOMEM;
	if (!strcmp(spec->wait->name, "sigwait"))
		p->kind = PX_PAIO_SIGWAIT;
	else if (!strcmp(spec->wait->name, "callback"))
		p->kind = PX_PAIO_CALLBACK;
	else
		p->kind = PX_PAIO_AIOCB;
	/* The aiocb wait's interrupt read keeps one helper for itself
	 * (wait_strategies/aiocb.c): count it on top, or aio_threads=1 would
	 * leave no helper for the requests, which would wait for ever. */
	paio_init_glibc((s->threads ? s->threads : PX_PAIO_DEFAULT_THREADS) +
			(p->kind == PX_PAIO_AIOCB ? 1u : 0u));
	px__fdq_init(&p->fdq, sizeof(px_paio_fd));
	px_list_init(&p->inflight);
	px_list_init(&p->failed);
	px_list_init(&p->again);
	p->wait.intr = &p->intr;
	p->watch_fd = -1;
	p->sig_fd = -1;
	p->intr.fd = -1;
	p->intr.wait_mask = NULL;
	switch (p->kind) {
	case PX_PAIO_AIOCB:
		rc = px__paio_aiocb_init(p);
		break;
	case PX_PAIO_SIGWAIT:
		rc = px__paio_sigwait_init(p, s);
		break;
	default:
		rc = px__paio_callback_init(p);
		break;
	}
	if (rc < 0) {
		/* The aiocb and callback waits fail for their eventfd, or
		 * for memory. */
		if (p->kind != PX_PAIO_SIGWAIT && rc != -ENOMEM && spec->why_len)
			snprintf(spec->why, spec->why_len, "eventfd: %s",
				 strerror(-rc));
		/* The sigwait wait's EBUSY: say which signal, or that the
		 * default range has none left. */
		else if (p->kind == PX_PAIO_SIGWAIT && rc == -EBUSY &&
			 spec->why_len && s->rtsig)
			snprintf(spec->why, spec->why_len,
				 "rtsig=%d has a handler the application "
				 "installed, or another proactor waits on it",
				 s->rtsig);
		else if (p->kind == PX_PAIO_SIGWAIT && rc == -EBUSY &&
			 spec->why_len)
			snprintf(spec->why, spec->why_len,
				 "no real-time signal from SIGRTMIN+4 (%d) to "
				 "SIGRTMAX (%d) is free for the wait: each has a "
				 "handler the application installed, or another "
				 "proactor waits on it; destroy one or give "
				 "rtsig=", SIGRTMIN + 4, SIGRTMAX);
		px__fdq_fini(&p->fdq);
		free(p);
		return rc;
	}
	p->sockets = s->sockets;
	p->lanes = s->lanes ? s->lanes : PX_PAIO_DEFAULT_LANES;
	p->prov.ops = &px__provider_posix_ops;
	p->prov.wait = &p->wait;
	p->prov.ops_mask = PAIO_OPS;
	/* Any thread may start: aio_read only queues work.  The aiocb wait's
	 * list is the leader's own, so a start must make it rebuild. */
	p->prov.flags = PX_PF_START_ANY_THREAD;
	if (p->kind == PX_PAIO_AIOCB)
		p->prov.flags |= PX_PF_START_INTERRUPT;
	p->prov.max_aio = cfg->max_aio ? cfg->max_aio : px__default_max_aio();
	p->prov.priv_size = sizeof(px_paio_req);
	*out = &p->prov;
	return 0;
}

/* The outcomes of aio_cancel so far (PX_PAIO_NCANCEL counters) and the
 * sigwait wait's full scans, for the tests.  Mutex held. */
void px__paio_stats(px_provider *pv, unsigned long *cancels, unsigned long *scans)
{
	px_paio *p = paio_of_prov(pv);

	if (cancels)
		memcpy(cancels, p->cancels, sizeof(p->cancels));
	if (scans)
		*scans = p->scans;
}

const px_provider_ops px__provider_posix_ops = {
	.name = "posix",
	.create = paio_create,     /* the wait's part, aio_init once */
	.destroy = paio_destroy,   /* the wait's part, the write dups */
	.start = paio_start,       /* aio_read/aio_write, or queue behind */
	.cancel = paio_cancel,     /* aio_cancel; the wait hands it out */
};
