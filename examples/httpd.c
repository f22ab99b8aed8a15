/*
 * httpd.c - a static-file HTTP/1.1 server on the proactor's public API.
 *
 *     httpd -p PORT -r ROOT [-t THREADS] [-e CONFIG] [-i IDLE_MS] [-b ADDR]
 *           [-N] [-S]
 *
 * Serves the files below ROOT to GET and HEAD, with keep-alive (HTTP/1.1
 * by default, HTTP/1.0 when asked) and "Connection: close".  Each
 * connection runs one chain of operations: reads of the request, each
 * with a deadline through px_start_op of the time left of IDLE_MS, which
 * a request's headers have in all, counted from the accept or from the
 * end of the previous answer (so a connection silent for IDLE_MS is
 * closed, and so is one that sends its headers a byte at a time: a
 * deadline per read would let it hold the connection for up to REQ_MAX
 * times IDLE_MS); writes with a deadline of IDLE_MS (a write that moved
 * some bytes before its deadline goes on with a new one, so a slow reader
 * is not taken for a silent one); an open confined below ROOT
 * (openat2(2) with RESOLVE_BENEATH: symbolic links that stay below ROOT
 * are followed, those that lead out of it, or are absolute, answer 404;
 * without openat2, or with -S, no symbolic link is followed at all) with
 * O_NONBLOCK, so that a FIFO below ROOT cannot hold the thread, and
 * fstat of the file in the callback, px_read_file of
 * the next chunk into the connection's buffer, placed right after the
 * response header so that header and first chunk leave in one
 * px_write_stream_all (there is no vectored write), and so on until the
 * file is sent; then the next request.  Requests that arrive together
 * (pipelining) are answered in order; empty lines before a request line
 * are skipped.  Files of up to CHUNK bytes, once
 * read, are kept in memory and answered from there while fstatat says
 * they are unchanged (-N turns that off, so that every answer goes
 * through px_read_file); only files whose path has no symbolic link in
 * it are, since that fstatat follows none.
 *
 * Request targets in the origin form ("/path?query") and the absolute
 * form ("http://host/path?query", whose host is ignored, as Host is) are
 * taken.
 *
 * Answers: 200; 400 for a malformed request (among them an HTTP/1.1
 * request without a Host header, any with two, and one whose
 * Content-Length is not a number or is given twice with different
 * numbers); 403 for a path with
 * a ".." segment; 404 for a missing or non-regular file, or a path
 * through a symbolic link that ROOT's confinement refuses; 405 for
 * methods other than GET and HEAD; 414 when the request line does not
 * fit in REQ_MAX bytes, or its path in PATH_LEN (or a segment of it in
 * 255, the longest file name), 431 when the headers do not fit in
 * REQ_MAX bytes; 501 for a request body sent
 * chunked; 503 when the server is out of descriptors.  Errors close the
 * connection after the answer.  A request not complete within IDLE_MS is
 * not answered: the connection is closed.
 *
 * THREADS threads run px_handle_events().  Out of descriptors, accepts
 * back off as in echo_server.  SIGUSR1 prints px_stats; SIGINT or SIGTERM
 * stops: px_stop, join, print the statistics, px_destroy (which cancels
 * what is pending and so closes the open connections).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>  /* struct open_how, RESOLVE_* */
#endif
#endif
#if defined(RESOLVE_BENEATH) && defined(SYS_openat2)
#define HAVE_OPENAT2 1
#endif

#include "example_util.h"   /* listening, accepting, threads, signals */

#define REQ_MAX 8192            /* request line and headers */
#define HDR_ROOM 512            /* room for a response header */
#define CHUNK (32 * 1024)       /* file bytes per read and write */
#define PATH_LEN 1024
#define CACHE_SLOTS 256         /* small files kept in memory */
#define CACHE_FILE_MAX CHUNK    /* bytes; larger files are always read */
#define CACHE_RACY_S 2          /* files younger than this are not cached */
#define LINGER_NS (1000u * 1000u * 1000u) /* draining before a close */
#define LINGER_READS 64

struct server {
	struct ex_server ex;    /* first: the listening and accepting */
	int root;               /* the document root, O_PATH directory */
	uint64_t idle_ns;       /* for a request's headers in all, and for
	                           each write to move some bytes */
	bool cache;             /* keep small files in memory (-N: no) */
	bool beneath;           /* open with openat2 RESOLVE_BENEATH; false:
	                           follow no symbolic link (-S, or no openat2) */
	atomic_ulong requests, cache_hits;
};

struct conn {
	struct server *srv;
	int fd;
	int file;               /* the file being sent, or -1 */
	uint64_t file_off, file_left;
	bool keep_alive;        /* after this response */
	bool head;              /* the request being answered is a HEAD */
	size_t req_len;         /* bytes in req */
	size_t req_used;        /* bytes of req belonging to the answered request */
	uint64_t req_deadline;  /* CLOCK_MONOTONIC ns by which the request
	                           being read must be complete (closing: by
	                           which the drain ends, on_linger) */
	size_t hdr_len;         /* response header waiting for the first chunk */
	bool cacheable;         /* the file being sent may go to the cache */
	unsigned linger_reads;  /* reads left before a closing connection
	                           is closed regardless */
	struct stat st;         /* of that file */
	char path[PATH_LEN];    /* its path below the root */
	char req[REQ_MAX];
	char out[HDR_ROOM + CHUNK];
};

static void on_read(const px_completion *c);
static void on_file(const px_completion *c);
static void on_sent(const px_completion *c);
static void on_error_sent(const px_completion *c);
static void serve(struct conn *k);

/* ------------------------------------------------------------------ */

static void conn_close(struct conn *k)
{
	/* Nothing of the proactor is pending on k->fd or k->file here (a
	 * connection has one operation at a time, and this is called from
	 * its callback or instead of starting one), so close(2) will do. */
	if (k->file >= 0)
		close(k->file);
	close(k->fd);
	atomic_fetch_sub(&k->srv->ex.open, 1);
	free(k);
}

static int start(struct conn *k, px_op op, int fd, void *buf, size_t len,
		 uint64_t off, unsigned flags, px_callback *cb)
{
	px_op_desc d = {
		.op = op, .fd = fd, .buf = buf, .len = len, .offset = off,
		.flags = flags, .cb = cb, .user = k,
		/* Deadlines only on the socket: a peer that stops reading
		 * is the idle connection; a file read is ours.  (Reads of
		 * the request go through read_more.) */
		.timeout_ns = op == PX_OP_READ_FILE ? 0 : k->srv->idle_ns,
	};
	return px_start_op(k->srv->ex.px, &d);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The next request's headers have IDLE_MS from now. */
static void request_clock(struct conn *k)
{
	k->req_deadline = now_ns() + k->srv->idle_ns;
}

/* Start the read of more of the request (now < req_deadline). */
static int start_read(struct conn *k, uint64_t now)
{
	px_op_desc d = {
		.op = PX_OP_READ_STREAM, .fd = k->fd, .buf = k->req + k->req_len,
		.len = sizeof(k->req) - k->req_len,
		.timeout_ns = k->req_deadline - now,
		.cb = on_read, .user = k,
	};
	return px_start_op(k->srv->ex.px, &d);
}

/*
 * Read more of the request, with what is left of its time as the
 * deadline.  A deadline of IDLE_MS per read would restart with every
 * byte, and a client sending one byte a little faster than that would
 * keep the connection (and its descriptor) for up to REQ_MAX times
 * IDLE_MS; a few dozen such clients would then lock everyone else out.
 */
static void read_more(struct conn *k)
{
	uint64_t now = now_ns();

	if (now >= k->req_deadline) {
		conn_close(k);  /* out of time between two reads */
		return;
	}
	if (start_read(k, now) < 0)
		conn_close(k);  /* -ESHUTDOWN while stopping */
}

/* "Date: ..." for the current second, one copy per thread. */
static const char *http_date(void)
{
	static _Thread_local time_t last;
	static _Thread_local char text[40];
	time_t now = time(NULL);

	if (now != last) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		last = now;
	}
	return text;
}

/* An error answer; the connection closes once it is sent. */
static void send_error(struct conn *k, int status, const char *reason)
{
	char *p = k->out;
	int n;

	if (k->file >= 0) {
		close(k->file);
		k->file = -1;
	}
	/* The length of the body a GET would get; a HEAD gets no body. */
	n = snprintf(p, HDR_ROOM + CHUNK,
		     "HTTP/1.1 %d %s\r\nServer: px-httpd\r\nDate: %s\r\n"
		     "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
		     "%sConnection: close\r\n\r\n",
		     status, reason, http_date(), strlen(reason) + 5,
		     status == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (!k->head)
		n += snprintf(p + n, (size_t)(HDR_ROOM + CHUNK - n), "%d %s\n",
			      status, reason);
	if (start(k, PX_OP_WRITE_STREAM, k->fd, p, (size_t)n, 0,
		  PX_OPF_WRITE_ALL, on_error_sent) < 0)
		conn_close(k);
}

/*
 * Closing after an answer: shut our side down so that the peer reads the
 * answer and an end of stream, then read and drop what the peer still
 * sends until it closes too, LINGER_NS have passed, or it has sent
 * LINGER_READS more buffers.  Closing with unread request bytes would
 * send a reset, which can destroy the answer in the peer's receive queue
 * before it reads it.  LINGER_NS is for the whole drain, not for each
 * read: a peer trickling bytes would otherwise keep the connection for
 * LINGER_READS times as long.
 */
static void on_linger(const px_completion *c)
{
	struct conn *k = c->user;
	uint64_t now = now_ns();

	if (c->error || c->bytes == 0 || k->linger_reads-- == 0 ||
	    now >= k->req_deadline) {
		conn_close(k);
		return;
	}
	px_op_desc d = {
		.op = PX_OP_READ_STREAM, .fd = k->fd, .buf = k->req,
		.len = sizeof(k->req), .timeout_ns = k->req_deadline - now,
		.cb = on_linger, .user = k,
	};
	if (px_start_op(k->srv->ex.px, &d) < 0)
		conn_close(k);
}

static void linger_close(struct conn *k)
{
	px_completion c = { .user = k, .bytes = 1 };

	k->linger_reads = LINGER_READS;
	k->req_deadline = now_ns() + LINGER_NS;  /* the drain's, now */
	if (k->file >= 0) {
		close(k->file);
		k->file = -1;
	}
	if (shutdown(k->fd, SHUT_WR) < 0) {
		conn_close(k);
		return;
	}
	on_linger(&c);
}

/* A write to the client ended by its deadline after it had moved some
 * bytes: the client reads, slowly.  Start the rest with a new deadline
 * (true), so that a client is closed only when no byte went into its
 * socket for IDLE_MS.  That is not quite "a client that read nothing":
 * once the socket's send buffer is full, the kernel lets a writer in
 * again only after the client has taken a good part of it (about a third
 * on Linux TCP, which can be megabytes), so a client that reads less
 * than that in IDLE_MS is closed too. */
static bool write_on(struct conn *k, const px_completion *c, px_callback *cb)
{
	if (c->error != ETIMEDOUT || c->bytes == 0 || c->bytes >= c->len)
		return false;
	if (start(k, PX_OP_WRITE_STREAM, k->fd, (char *)c->buf + c->bytes,
		  c->len - c->bytes, 0, PX_OPF_WRITE_ALL, cb) < 0)
		conn_close(k);
	return true;
}

static void on_error_sent(const px_completion *c)
{
	struct conn *k = c->user;

	if (write_on(k, c, on_error_sent))
		return;
	if (c->error || c->bytes != c->len)
		conn_close(k);
	else
		linger_close(k);
}

static const char *content_type(const char *path)
{
	static const struct { const char *ext, *type; } types[] = {
		{ "html", "text/html" }, { "htm", "text/html" },
		{ "css", "text/css" }, { "js", "text/javascript" },
		{ "json", "application/json" }, { "txt", "text/plain" },
		{ "xml", "application/xml" }, { "svg", "image/svg+xml" },
		{ "png", "image/png" }, { "jpg", "image/jpeg" },
		{ "jpeg", "image/jpeg" }, { "gif", "image/gif" },
		{ "webp", "image/webp" }, { "ico", "image/x-icon" },
		{ "pdf", "application/pdf" }, { "wasm", "application/wasm" },
	};
	const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');

	if (dot && (!slash || dot > slash))
		for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
			if (strcasecmp(dot + 1, types[i].ext) == 0)
				return types[i].type;
	return "application/octet-stream";
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/*
 * The absolute form of a request target, "http://host:port/path?query",
 * which a server must take as well as the origin form "/path?query"
 * (RFC 9112, 3.2.2; a client talking to a proxy sends it), to the origin
 * form, in place.  The host is ignored, as the Host header is: this server
 * has one root.  Other targets are returned as they are.
 */
static char *origin_form(char *t)
{
	char *auth, *end;

	if (strncasecmp(t, "http://", 7) == 0)
		auth = t + 7;
	else if (strncasecmp(t, "https://", 8) == 0)
		auth = t + 8;
	else
		return t;
	end = auth + strcspn(auth, "/?");
	if (*end == '/')
		return end;
	/* No path ("http://host" or "http://host?q"): the path is "/", put
	 * over the last character before it (of the host, or the "//"). */
	end[-1] = '/';
	return end - 1;
}

/*
 * The request target (origin form) to a path relative to the root, in
 * place: the query is dropped, %XX decoded, "." segments and repeated
 * slashes removed.  Returns 0, 400 (malformed), 403 (a ".." segment or
 * an encoded NUL or slash) or 414 (a segment longer than a file name can
 * be, or a path longer than outlen: a well-formed target this server will
 * not take, which RFC 9112, 3, answers with 414, not 400).
 */
static int target_to_path(char *t, char *out, size_t outlen)
{
	size_t o = 0;
	char *q = strchr(t, '?');

	if (q)
		*q = '\0';
	if (t[0] != '/')
		return 400;
	while (*t) {
		char seg[256];
		size_t n = 0;

		while (*t == '/')
			t++;
		while (*t && *t != '/') {
			int ch = (unsigned char)*t++;
			if (ch == '%') {
				int hi = hexval(t[0]), lo = hi < 0 ? -1 : hexval(t[1]);
				if (lo < 0)
					return 400;
				ch = hi * 16 + lo;
				t += 2;
				if (ch == 0 || ch == '/')
					return 403;
			}
			if (n + 1 >= sizeof(seg))
				return 414;
			seg[n++] = (char)ch;
		}
		seg[n] = '\0';
		if (n == 0 || strcmp(seg, ".") == 0)
			continue;
		if (strcmp(seg, "..") == 0)
			return 403;
		if (o + n + 2 > outlen)
			return 414;
		if (o)
			out[o++] = '/';
		memcpy(out + o, seg, n);
		o += n;
	}
	out[o] = '\0';
	return 0;
}

/*
 * Open path (from target_to_path: no "..", "." or empty segment) below the
 * root, never reaching a file outside it.  Refusing ".." in the target is
 * not enough: a symbolic link below the root, to a file or a directory,
 * would lead anywhere.  With openat2, RESOLVE_BENEATH makes the kernel
 * refuse (EXDEV) every link that leads out of the root, or is absolute,
 * while those that stay below it work; RESOLVE_NO_MAGICLINKS keeps out
 * the /proc kind.  Without it, each directory on the way is opened with
 * O_NOFOLLOW (a link there gives ENOTDIR) and the file too (ELOOP): no
 * link is followed at all, which is safe, and what -S asks for.
 */
static int open_nofollow(int root, const char *path, int flags)
{
	char name[PATH_LEN];
	const char *p = path, *slash;
	int dir = root, fd, err;

	while ((slash = strchr(p, '/'))) {
		size_t n = (size_t)(slash - p);

		if (n >= sizeof(name)) {
			errno = ENAMETOOLONG;
			fd = -1;
		} else {
			memcpy(name, p, n);
			name[n] = '\0';
			fd = openat(dir, name,
				    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		err = errno;
		if (dir != root)
			close(dir);
		if (fd < 0) {
			errno = err;
			return -1;
		}
		dir = fd;
		p = slash + 1;
	}
	fd = openat(dir, p, flags | O_NOFOLLOW);
	err = errno;
	if (dir != root)
		close(dir);
	errno = err;
	return fd;
}

static int open_below(const struct server *s, const char *path, int flags)
{
#ifdef HAVE_OPENAT2
	if (s->beneath) {
		struct open_how how = {
			.flags = (uint64_t)flags,
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
		};
		return (int)syscall(SYS_openat2, s->root, path, &how,
				    sizeof(how));
	}
#endif
	return open_nofollow(s->root, path, flags);
}

/* openat2 works here (Linux 5.6 and later, and no seccomp filter that
 * answers ENOSYS or EPERM for it). */
static bool openat2_works(int root)
{
#ifdef HAVE_OPENAT2
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, root, ".", &how, sizeof(how));

	if (fd >= 0) {
		close(fd);
		return true;
	}
	fprintf(stderr, "httpd: openat2: %s; following no symbolic link below "
		"the root\n", strerror(errno));
#else
	(void)root;
	fprintf(stderr, "httpd: built without openat2; following no symbolic "
		"link below the root\n");
#endif
	return false;
}

/*
 * fstatat of path below the root for the cache's check, following no
 * symbolic link: each directory on the way is looked at with
 * AT_SYMLINK_NOFOLLOW before the next name is looked up in it.  It takes
 * no descriptor, so that answers from the cache go on at the descriptor
 * limit.  A path with a link in it fails here and is opened (confined)
 * instead.  A directory swapped for a link between two of these calls
 * could have one stat look outside the root, but to no effect: an
 * answer from the cache needs the inode, size and times of a file that
 * was read through open_below, and otherwise comes from open_below.
 */
static int stat_below(int root, const char *path, struct stat *st)
{
	char prefix[PATH_LEN];
	size_t len = strlen(path);

	if (len >= sizeof(prefix)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(prefix, path, len + 1);
	for (char *slash = strchr(prefix, '/'); slash;
	     slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (fstatat(root, prefix, st, AT_SYMLINK_NOFOLLOW) < 0)
			return -1;
		*slash = '/';
		if (!S_ISDIR(st->st_mode)) {
			errno = ENOTDIR;
			return -1;
		}
	}
	return fstatat(root, prefix, st, AT_SYMLINK_NOFOLLOW);
}

static bool token_char(char ch)
{
	return ch > ' ' && ch < 127 && !strchr("()<>@,;:\\\"/[]?={}", ch);
}

/* Header value v (trimmed) contains the word w, comma separated. */
static bool has_word(const char *v, size_t vlen, const char *w)
{
	size_t wl = strlen(w);

	for (size_t i = 0; i + wl <= vlen; i++)
		if (strncasecmp(v + i, w, wl) == 0 &&
		    (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
		    (i + wl == vlen || v[i + wl] == ',' || v[i + wl] == ' '))
			return true;
	return false;
}

/*
 * A Content-Length value: digits, or a comma-separated list of the same
 * number (RFC 9112, 6.3, makes such a list that number; empty elements
 * of a list are ignored, RFC 9110, 5.6.1).  Returns false for anything
 * else, which leaves the request's framing unknown.
 */
static bool content_length(const char *v, size_t vlen, uint64_t *len)
{
	bool any = false;

	for (size_t i = 0; i <= vlen; i++) {     /* one element per turn */
		uint64_t n = 0;
		size_t digits = 0;

		while (i < vlen && (v[i] == ' ' || v[i] == '\t'))
			i++;
		for (; i < vlen && v[i] >= '0' && v[i] <= '9'; i++, digits++) {
			if (n > (UINT64_MAX - 9) / 10)
				return false;
			n = n * 10 + (uint64_t)(v[i] - '0');
		}
		while (i < vlen && (v[i] == ' ' || v[i] == '\t'))
			i++;
		if (i < vlen && v[i] != ',')
			return false;   /* not a number */
		if (!digits)
			continue;       /* an empty element */
		if (any && n != *len)
			return false;   /* two different lengths */
		*len = n;
		any = true;
	}
	return any;
}

/*
 * The small-file cache: a direct-mapped table by path.  An entry is used
 * only while the file's inode, size, modification and change times are
 * those it was read with, so a file edited (or replaced, or made
 * unreadable: its ctime changes) is read again.  Timestamps move in
 * coarse steps, so a file modified within the last CACHE_RACY_S seconds
 * is not cached: a second write within the same step would leave the
 * entry looking current.  Its bytes are copied
 * into the connection's buffer behind the header, so an entry replaced
 * meanwhile is never referred to after the lock is dropped.
 */
struct cache_entry {
	char *path;
	char *data;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

static struct {
	pthread_rwlock_t lock;
	struct cache_entry e[CACHE_SLOTS];
} cache = { .lock = PTHREAD_RWLOCK_INITIALIZER };

static unsigned cache_slot(const char *path)
{
	uint32_t h = 2166136261u;   /* FNV-1a */

	for (; *path; path++)
		h = (h ^ (unsigned char)*path) * 16777619u;
	return h % CACHE_SLOTS;
}

static bool same_file(const struct cache_entry *e, const struct stat *st)
{
	return e->dev == st->st_dev && e->ino == st->st_ino &&
	       e->size == st->st_size &&
	       e->mtime.tv_sec == st->st_mtim.tv_sec &&
	       e->mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       e->ctime.tv_sec == st->st_ctim.tv_sec &&
	       e->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* Copy the cached bytes of path (as st describes it) to dst. */
static bool cache_get(const char *path, const struct stat *st, char *dst)
{
	struct cache_entry *e = &cache.e[cache_slot(path)];
	bool hit;

	pthread_rwlock_rdlock(&cache.lock);
	hit = e->path && same_file(e, st) && strcmp(e->path, path) == 0;
	if (hit)
		memcpy(dst, e->data, (size_t)st->st_size);
	pthread_rwlock_unlock(&cache.lock);
	return hit;
}

static void cache_put(const char *path, const struct stat *st, const char *data)
{
	struct cache_entry n = {
		.path = strdup(path), .data = malloc((size_t)st->st_size + 1),
		.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size,
		.mtime = st->st_mtim, .ctime = st->st_ctim,
	}, old;
	struct cache_entry *e = &cache.e[cache_slot(path)];
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	if (st->st_mtim.tv_sec >= now.tv_sec - CACHE_RACY_S) {
		free(n.path);
		free(n.data);
		return;
	}
	if (!n.path || !n.data) {
		free(n.path);
		free(n.data);
		return;
	}
	memcpy(n.data, data, (size_t)st->st_size);
	pthread_rwlock_wrlock(&cache.lock);
	old = *e;
	*e = n;
	pthread_rwlock_unlock(&cache.lock);
	free(old.path);
	free(old.data);
}

static void cache_free(void)
{
	for (unsigned i = 0; i < CACHE_SLOTS; i++) {
		free(cache.e[i].path);
		free(cache.e[i].data);
	}
}

/* The response header for a file of size bytes, ending at out + HDR_ROOM;
 * returns its length, or -1. */
static int put_header(struct conn *k, const char *path, uint64_t size,
		      bool http11)
{
	char hdr[HDR_ROOM];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 200 OK\r\nServer: px-httpd\r\nDate: %s\r\n"
			 "Content-Type: %s\r\nContent-Length: %llu\r\n%s\r\n",
			 http_date(), content_type(path), (unsigned long long)size,
			 k->keep_alive ? (http11 ? "" : "Connection: keep-alive\r\n")
				       : "Connection: close\r\n");

	if (n < 0 || n >= (int)sizeof(hdr))
		return -1;
	memcpy(k->out + HDR_ROOM - n, hdr, (size_t)n);
	return n;
}

/*
 * Answer the complete request in req[0 .. end) (end is just past the empty
 * line).  Starts the first operation of the answer.
 */
static void answer(struct conn *k, size_t end)
{
	char *line = k->req, *eol = memchr(line, '\r', end);
	char *sp1, *sp2, *method, *target, path[PATH_LEN];
	bool head, http11, has_host = false, conn_close_hdr = false,
	     conn_keep = false, has_length = false;
	uint64_t body_len = 0;
	int status;
	struct stat st, lst;    /* lst: from stat_below, if plain */
	bool plain;             /* path has no symbolic link in it */

	k->req_used = end;
	k->head = false;
	atomic_fetch_add(&k->srv->requests, 1);
	if (!eol || eol[1] != '\n')
		return send_error(k, 400, "Bad Request");
	*eol = '\0';
	sp1 = strchr(line, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' '))
		return send_error(k, 400, "Bad Request");
	*sp1 = *sp2 = '\0';
	method = line;
	target = sp1 + 1;
	for (char *m = method; *m; m++)
		if (!token_char(*m))
			return send_error(k, 400, "Bad Request");
	/* Known from here on: every answer to a HEAD, errors included, goes
	 * without a body. */
	k->head = strcmp(method, "HEAD") == 0;
	if (strcmp(sp2 + 1, "HTTP/1.1") == 0)
		http11 = true;
	else if (strcmp(sp2 + 1, "HTTP/1.0") == 0)
		http11 = false;
	else
		return send_error(k, 400, "Bad Request");

	/* The headers: name ":" value CRLF, up to the empty line. */
	for (char *h = eol + 2; h < k->req + end - 2;) {
		char *e = memchr(h, '\r', (size_t)(k->req + end - h));
		char *colon, *v;
		size_t vlen;

		if (!e || e[1] != '\n')
			return send_error(k, 400, "Bad Request");
		colon = memchr(h, ':', (size_t)(e - h));
		if (!colon || colon == h)
			return send_error(k, 400, "Bad Request");
		for (char *n = h; n < colon; n++)
			if (!token_char(*n))
				return send_error(k, 400, "Bad Request");
		for (v = colon + 1; v < e && (*v == ' ' || *v == '\t'); v++)
			;
		vlen = (size_t)(e - v);
		while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
			vlen--;
		size_t nlen = (size_t)(colon - h);
		if (nlen == 4 && strncasecmp(h, "host", 4) == 0) {
			/* More than one is an error (RFC 9112, 3.2): a
			 * proxy in front might have gone by another. */
			if (has_host)
				return send_error(k, 400, "Bad Request");
			has_host = true;
		} else if (nlen == 10 && strncasecmp(h, "connection", 10) == 0) {
			conn_close_hdr |= has_word(v, vlen, "close");
			conn_keep |= has_word(v, vlen, "keep-alive");
		} else if (nlen == 17 &&
			   strncasecmp(h, "transfer-encoding", 17) == 0) {
			return send_error(k, 501, "Not Implemented");
		} else if (nlen == 14 && strncasecmp(h, "content-length", 14) == 0) {
			/* A length that is no number, or two that differ,
			 * leave the end of the body unknown: 400 and close
			 * (RFC 9112, 6.3).  A body we do not read: answer,
			 * then close. */
			uint64_t len = 0;
			if (!content_length(v, vlen, &len) ||
			    (has_length && len != body_len))
				return send_error(k, 400, "Bad Request");
			has_length = true;
			body_len = len;
			if (len)
				conn_close_hdr = true;
		}
		h = e + 2;
	}
	if (http11 && !has_host)
		return send_error(k, 400, "Bad Request");
	k->keep_alive = !conn_close_hdr && (http11 || conn_keep);

	if (strcmp(method, "GET") == 0)
		head = false;
	else if (strcmp(method, "HEAD") == 0)
		head = true;
	else
		return send_error(k, 405, "Method Not Allowed");

	target = origin_form(target);
	status = target_to_path(target, path, sizeof(path) - 16);
	if (status == 400)
		return send_error(k, 400, "Bad Request");
	if (status == 403)
		return send_error(k, 403, "Forbidden");
	if (status == 414)
		return send_error(k, 414, "URI Too Long");
	if (path[0] == '\0' || target[strlen(target) - 1] == '/')
		strcat(path, path[0] ? "/index.html" : "index.html");

	/* A small file in the cache: answered without opening it. */
	plain = k->srv->cache && stat_below(k->srv->root, path, &lst) == 0;
	if (plain && S_ISREG(lst.st_mode) && lst.st_size <= CACHE_FILE_MAX &&
	    cache_get(path, &lst, k->out + HDR_ROOM)) {
		int n = put_header(k, path, (uint64_t)lst.st_size, http11);
		if (n < 0)
			return send_error(k, 500, "Internal Server Error");
		atomic_fetch_add(&k->srv->cache_hits, 1);
		k->file_left = 0;
		if (start(k, PX_OP_WRITE_STREAM, k->fd, k->out + HDR_ROOM - n,
			  (size_t)n + (head ? 0 : (size_t)lst.st_size), 0,
			  PX_OPF_WRITE_ALL, on_sent) < 0)
			conn_close(k);
		return;
	}

	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer;
	 * taken off again below, since io_uring and Linux AIO would answer
	 * EAGAIN for a regular file's read that has to wait for the disk. */
	k->file = open_below(k->srv, path,
			     O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (k->file < 0) {
		switch (errno) {
		case EACCES:
			return send_error(k, 403, "Forbidden");
		case EMFILE:
		case ENFILE:
		case ENOMEM:
			return send_error(k, 503, "Service Unavailable");
		default:
			/* Missing, and also a symbolic link out of the root
			 * (EXDEV) or any link without openat2 (ELOOP,
			 * ENOTDIR): answered as if there were no such file,
			 * so that nothing is told about what is outside. */
			return send_error(k, 404, "Not Found");
		}
	}
	if (fstat(k->file, &st) < 0 || !S_ISREG(st.st_mode))
		return send_error(k, 404, "Not Found");
	if (fcntl(k->file, F_SETFL, fcntl(k->file, F_GETFL) & ~O_NONBLOCK) < 0)
		return send_error(k, 500, "Internal Server Error");

	/* The header ends right where the body's first chunk will go. */
	int n = put_header(k, path, (uint64_t)st.st_size, http11);
	if (n < 0)
		return send_error(k, 500, "Internal Server Error");
	k->file_off = 0;
	k->file_left = head ? 0 : (uint64_t)st.st_size;
	if (k->file_left == 0) {
		close(k->file);
		k->file = -1;
		if (start(k, PX_OP_WRITE_STREAM, k->fd, k->out + HDR_ROOM - n,
			  (size_t)n, 0, PX_OPF_WRITE_ALL, on_sent) < 0)
			conn_close(k);
		return;
	}
	/* Cached only when the path has no symbolic link in it (the file
	 * opened is the one stat_below saw), since only then will the
	 * check of a later request find it. */
	k->cacheable = k->srv->cache && st.st_size <= CACHE_FILE_MAX && plain &&
		       lst.st_dev == st.st_dev && lst.st_ino == st.st_ino;
	if (k->cacheable) {
		k->st = st;
		strcpy(k->path, path);
	}
	k->hdr_len = (size_t)n;
	if (start(k, PX_OP_READ_FILE, k->file, k->out + HDR_ROOM,
		  k->file_left < CHUNK ? (size_t)k->file_left : CHUNK, 0, 0,
		  on_file) < 0)
		conn_close(k);
}

static void on_file(const px_completion *c)
{
	struct conn *k = c->user;
	size_t hlen = k->hdr_len;

	if (c->error || c->bytes == 0) {
		/* The file shrank or failed: the length is promised, so
		 * all we can do is close. */
		conn_close(k);
		return;
	}
	if (c->bytes > k->file_left) {
		conn_close(k);  /* cannot happen: we asked for no more */
		return;
	}
	if (k->cacheable && c->bytes == (uint64_t)k->st.st_size)
		cache_put(k->path, &k->st, k->out + HDR_ROOM);
	k->cacheable = false;
	k->hdr_len = 0;
	k->file_off += c->bytes;
	k->file_left -= c->bytes;
	if (start(k, PX_OP_WRITE_STREAM, k->fd, k->out + HDR_ROOM - hlen,
		  hlen + c->bytes, 0, PX_OPF_WRITE_ALL, on_sent) < 0)
		conn_close(k);
}

static void on_sent(const px_completion *c)
{
	struct conn *k = c->user;

	if (write_on(k, c, on_sent))
		return;
	if (c->error || c->bytes != c->len) {
		conn_close(k);
		return;
	}
	if (k->file_left) {
		if (start(k, PX_OP_READ_FILE, k->file, k->out + HDR_ROOM,
			  k->file_left < CHUNK ? (size_t)k->file_left : CHUNK,
			  k->file_off, 0, on_file) < 0)
			conn_close(k);
		return;
	}
	if (k->file >= 0) {
		close(k->file);
		k->file = -1;
	}
	if (!k->keep_alive) {
		linger_close(k);
		return;
	}
	/* Keep what followed the request (a pipelined next one), which has
	 * IDLE_MS from now to be complete. */
	size_t used = k->req_used;
	memmove(k->req, k->req + used, k->req_len - used);
	k->req_len -= used;
	k->req_used = 0;
	request_clock(k);
	serve(k);
}

/* Answer the request in req if it is complete, otherwise read more. */
static void serve(struct conn *k)
{
	size_t skip = 0;

	/* Empty lines before a request line are ignored (RFC 9112, 2.2,
	 * asks a server to: some clients send a CRLF after a request).  The
	 * request's deadline still bounds a client that sends only those. */
	while (skip + 2 <= k->req_len && k->req[skip] == '\r' &&
	       k->req[skip + 1] == '\n')
		skip += 2;
	if (skip) {
		memmove(k->req, k->req + skip, k->req_len - skip);
		k->req_len -= skip;
	}
	char *end = k->req_len >= 4 ? memmem(k->req, k->req_len, "\r\n\r\n", 4)
				    : NULL;

	if (end) {
		answer(k, (size_t)(end - k->req) + 4);
		return;
	}
	if (k->req_len == sizeof(k->req)) {
		/* Full without the end of the headers (of a request whose
		 * method is not known yet). */
		k->head = false;
		if (memmem(k->req, k->req_len, "\r\n", 2))
			send_error(k, 431, "Request Header Fields Too Large");
		else
			send_error(k, 414, "URI Too Long");
		return;
	}
	read_more(k);
}

static void on_read(const px_completion *c)
{
	struct conn *k = c->user;

	if (c->error || c->bytes == 0) {
		/* ETIMEDOUT: the request's time is up (a silent
		 * connection, or one sending too slowly); end of stream;
		 * ECANCELED while stopping. */
		conn_close(k);
		return;
	}
	k->req_len += c->bytes;
	serve(k);
}

/* ------------------------------------------------------------------ */

/* A new connection (in the accept's callback): read its first request.
 * Returns 0, or the start's error with fd left open (example_util.h holds
 * the connection for a later try when the engine cannot take fd now). */
static int on_conn(struct ex_server *ex, int fd)
{
	struct server *s = (struct server *)ex;
	struct conn *k = malloc(sizeof(*k));
	int one = 1, rc;

	if (!k)
		return -ENOMEM;
	k->srv = s;
	k->fd = fd;
	k->file = -1;
	k->req_len = k->req_used = 0;
	k->cacheable = false;
	k->head = false;
	k->keep_alive = true;
	setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	request_clock(k);
	atomic_fetch_add(&s->ex.open, 1);
	rc = start_read(k, now_ns());
	if (rc < 0) {
		atomic_fetch_sub(&s->ex.open, 1);
		free(k);
	}
	return rc < 0 ? rc : 0;
}

/* Our counts, at the head of the statistics line. */
static void print_counts(struct ex_server *ex)
{
	struct server *s = (struct server *)ex;

	printf("%lu requests on %lu connections, %lu answered from the cache; ",
	       (unsigned long)atomic_load(&s->requests),
	       (unsigned long)atomic_load(&s->ex.accepted),
	       (unsigned long)atomic_load(&s->cache_hits));
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s -p PORT -r ROOT [-t THREADS] [-e CONFIG] [-i IDLE_MS] "
		"[-b BIND_ADDR] [-N] [-S]\n"
		"  -p PORT       TCP port, 0 for any free one\n"
		"  -r ROOT       directory whose files are served\n"
		"  -t THREADS    threads running the event loop, 1 to %d (default 2)\n"
		"  -e CONFIG     engine configuration text (e.g. \"epoll\"); "
		"PX_ENGINE overrides it\n"
		"  -i IDLE_MS    time for a request's headers in all, and for a\n"
		"                write to move a byte, before the connection is\n"
		"                closed (default 30000)\n"
		"  -b BIND_ADDR  local address to listen on (default: all)\n"
		"  -N            no cache: read every file with px_read_file\n"
		"  -S            follow no symbolic link below ROOT (links that\n"
		"                lead out of ROOT are never followed)\n"
		"SIGUSR1 prints statistics; SIGINT or SIGTERM stops.\n",
		prog, EX_MAX_THREADS);
}

int main(int argc, char **argv)
{
	const char *config = NULL, *port = NULL, *root = NULL, *bind_addr = NULL;
	long nthreads = 2, idle_ms = 30000;
	struct server srv = {
		.ex = { .prog = "httpd", .on_conn = on_conn, .counts = print_counts },
		.root = -1, .cache = true,
	};
	char doing[PATH_MAX + 16];
	int opt, rc;
	bool no_symlinks = false;

	while ((opt = getopt(argc, argv, "e:p:r:t:i:b:NSh")) != -1) {
		switch (opt) {
		case 'e':
			config = optarg;
			break;
		case 'p':
			if (ex_number(optarg, 0, 65535) < 0) {
				fprintf(stderr, "%s: bad port \"%s\"\n", argv[0], optarg);
				return 2;
			}
			port = optarg;
			break;
		case 'r':
			root = optarg;
			break;
		case 't':
			nthreads = ex_number(optarg, 1, EX_MAX_THREADS);
			if (nthreads < 0) {
				fprintf(stderr, "%s: bad thread count \"%s\"\n", argv[0],
					optarg);
				return 2;
			}
			break;
		case 'i':
			idle_ms = ex_number(optarg, 1, 86400000L);
			if (idle_ms < 0) {
				fprintf(stderr, "%s: bad idle time \"%s\"\n", argv[0],
					optarg);
				return 2;
			}
			break;
		case 'b':
			bind_addr = optarg;
			break;
		case 'N':
			srv.cache = false;
			break;
		case 'S':
			no_symlinks = true;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind < argc || !port || !root) {
		usage(stderr, argv[0]);
		return 2;
	}
	srv.idle_ns = (uint64_t)idle_ms * 1000000u;
	srv.root = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (srv.root < 0) {
		fprintf(stderr, "httpd: %s: %s\n", root, strerror(errno));
		return 1;
	}
	srv.beneath = !no_symlinks && openat2_works(srv.root);

	snprintf(doing, sizeof(doing), "serving %s", root);
	rc = ex_serve(&srv.ex, config, bind_addr, port, nthreads, doing);
	close(srv.root);
	cache_free();
	return rc;
}
