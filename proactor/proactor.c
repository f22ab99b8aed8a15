/*
 * proactor.c - the public entry points.
 *
 * Each start function checks its arguments, takes a result from the
 * allocator, fills in the inputs and hands it to the first processor whose
 * operations mask has the operation (primary first).  Everything runs under
 * the proactor mutex.
 */
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"

/* ------------------------------------------------------------------ */
/* fork(2)                                                              */
/* ------------------------------------------------------------------ */

/* A child made by fork(2) holds a copy of a proactor's memory, but the
 * kernel objects behind it (io_uring rings, AIO contexts, epoll sets,
 * interrupt descriptors) are the parent's, shared, and none of its
 * threads came along.  A call in the child would act on the parent's
 * operations (a cancel submitted to the shared ring, an epoll_ctl on the
 * shared set) or wait for events or threads that never come: px_destroy
 * there hung on io_uring and Linux AIO.  So the child's calls on a
 * proactor made before the fork fail with -ECHILD and touch nothing.
 *
 * Each proactor records a process token when created, and every call
 * compares it with the token of the process it runs in: two loads (the
 * token's address, then the token).  The
 * token lives in a page marked MADV_WIPEONFORK (Linux 4.14), which the
 * kernel hands to every child as zeros, however the child was made
 * (fork, _Fork, a raw clone without CLONE_VM); the next px_create there
 * draws a fresh token.  Where that mark is refused, the token is instead
 * a count that a pthread_atfork child handler raises, which sees only
 * children made by fork(2).
 *
 * Tokens are drawn from fac_fork_count, a copy of which every child
 * inherits, so a child's new token is larger than any its parent had
 * handed out before the fork. */
static atomic_uint fac_fork_count;
static atomic_uint *fac_fork_token = &fac_fork_count;
static pthread_once_t fac_fork_once = PTHREAD_ONCE_INIT;

/* Whether the token is the fallback's count, raised by the child
 * handler (the page was refused). */
static bool fac_fork_counts;

/* The process-wide locks of the signal tables, the POSIX AIO set-up and
 * nbio.c's file status flags (internal.h, PX_FORK_PREPARE): none is ever
 * held with another, so any order of taking them is safe. */
static void fac_fork_prepare(void)
{
	px__paio_atfork(PX_FORK_PREPARE);
	px__sigwait_atfork(PX_FORK_PREPARE);
	px__signal_atfork(PX_FORK_PREPARE);
	px__nbio_atfork(PX_FORK_PREPARE);
	px__own_fd_atfork(PX_FORK_PREPARE);
}

static void fac_fork_parent(void)
{
	px__own_fd_atfork(PX_FORK_PARENT);
	px__nbio_atfork(PX_FORK_PARENT);
	px__signal_atfork(PX_FORK_PARENT);
	px__sigwait_atfork(PX_FORK_PARENT);
	px__paio_atfork(PX_FORK_PARENT);
}

static void fac_fork_child(void)
{
	if (fac_fork_counts)
		atomic_fetch_add_explicit(&fac_fork_count, 1,
					  memory_order_relaxed);
	px__own_fd_atfork(PX_FORK_CHILD);
	px__nbio_atfork(PX_FORK_CHILD);
	px__signal_atfork(PX_FORK_CHILD);
	px__sigwait_atfork(PX_FORK_CHILD);
	px__paio_atfork(PX_FORK_CHILD);
}

static void fac_fork_watch(void)
{
	pthread_atfork(fac_fork_prepare, fac_fork_parent, fac_fork_child);
#ifdef MADV_WIPEONFORK
	long pg = sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		if (madvise(p, (size_t)pg, MADV_WIPEONFORK) == 0) {
			fac_fork_token = p;  /* kept for the process's life */
			return;
		}
		munmap(p, (size_t)pg);
	}
#endif
	fac_fork_counts = true;
}

/* The token of this process, drawn on first use in it. */
static unsigned fac_process_token(void)
{
	pthread_once(&fac_fork_once, fac_fork_watch);
	unsigned t = atomic_load_explicit(fac_fork_token, memory_order_relaxed);
	while (t == 0 && fac_fork_token != &fac_fork_count) {
		unsigned fresh = atomic_fetch_add_explicit(
			&fac_fork_count, 1, memory_order_relaxed) + 1;
		if (fresh == 0)
			continue;
		if (atomic_compare_exchange_strong_explicit(
			    fac_fork_token, &t, fresh, memory_order_relaxed,
			    memory_order_relaxed))
			t = fresh;
	}
	return t;
}

static inline bool fac_forked(const struct px_proactor *px)
{
	return atomic_load_explicit(fac_fork_token, memory_order_relaxed) !=
	       px->fork_token;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

static void fac_free(struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++)
		px__processor_destroy(px->proc[i]);
	px__alloc_fini(&px->alloc);
	px__timers_fini(px);
	for (size_t i = 0; i < px->nbyfd; i++)
		free(px->byfd[i]);
	free(px->byfd);
	pthread_cond_destroy(&px->call_cv);
	pthread_mutex_destroy(&px->lock);
	free(px);
}

/* An auto primary whose chosen class names an auto team (Linux AIO), with
 * no secondary given and operations beyond the team's: build the team's
 * secondary for those (asked is the primary's config as given, before
 * auto filled it in) and narrow the primary to the team's operations.
 * Where the secondary cannot be built (the kernel has no epoll, or the
 * interrupt asked for does not fit it), the primary keeps doing
 * everything, as the class can: nothing fails for want of the team. */
static void fac_auto_team(struct px_proactor *px,
			  const px_processor_config *asked)
{
	px_processor *p = px->proc[0];
	const char *chosen = px->cfg.primary.provider;  /* filled in by auto */
	const px_provider_class *cls = px__class_find(chosen, strlen(chosen));
	const px_team_desc *t = cls ? cls->auto_team : NULL;
	uint32_t ops = asked->ops ? asked->ops : PX_OPS_IO;
	if (!t || !(ops & t->sec_ops) || !(ops & t->ops))
		return;
	px_processor_config sc;
	memset(&sc, 0, sizeof(sc));
	sc.processor = asked->processor;
	px__set_name(sc.provider, PX_NAME_MAX, t->sec_provider,
		     strlen(t->sec_provider));
	if (t->sec_wait)
		px__set_name(sc.wait, PX_NAME_MAX, t->sec_wait,
			     strlen(t->sec_wait));
	/* An interrupt asked for goes along (a pipe where eventfd is not
	 * wanted), except a signal: its number is the primary's. */
	if (strcmp(asked->interrupt, "signal") != 0)
		memcpy(sc.interrupt, asked->interrupt, sizeof(sc.interrupt));
	sc.flags = asked->flags;
	sc.max_aio = asked->max_aio;
	sc.ops = ops & t->sec_ops;
	char why[256];
	if (px__resolve_processor(&sc, "secondary: ", why, sizeof(why)) < 0 ||
	    px__processor_create(px, 1, &sc, &px->proc[1], why,
				 sizeof(why)) < 0)
		return;
	px_processor *s = px->proc[1];
	px->nproc = 2;
	sc.max_aio = s->max_aio;
	px->cfg.secondary = sc;
	px->cfg.primary.ops = ops & t->ops;
	p->ops = p->prov->ops_mask & px->cfg.primary.ops;
	p->vec_ops = p->prov->vec_ops & p->ops;
}

/* Operations on one descriptor and direction run in start order
 * (proactor.h), but only within one processor: each keeps its own
 * per-descriptor queues, so a team whose processors share out the socket
 * operations of one direction started a write on the secondary while a
 * connect the primary had queued before it had not even been made (EPIPE
 * on io_uring), and a stream read overtook a datagram read started
 * before it.  Such a team is refused, naming who takes what.  Files are
 * in no such queue and may go anywhere. */
#define FAC_READ_DIR                                                           \
	(PX_OP_BIT(PX_OP_READ_STREAM) | PX_OP_BIT(PX_OP_READ_DGRAM) |          \
	 PX_OP_BIT(PX_OP_ACCEPT))
#define FAC_WRITE_DIR                                                          \
	(PX_OP_BIT(PX_OP_WRITE_STREAM) | PX_OP_BIT(PX_OP_WRITE_DGRAM) |        \
	 PX_OP_BIT(PX_OP_CONNECT))

static void fac_op_list(char *buf, size_t len, uint32_t mask)
{
	size_t pos = 0;

	buf[0] = '\0';
	for (int op = 0; op < PX_OP_POST && pos < len; op++) {
		if (!(mask & PX_OP_BIT(op)))
			continue;
		int w = snprintf(buf + pos, len - pos, "%s%s", pos ? "," : "",
				 px_op_name((px_op)op));
		if (w < 0)
			break;
		pos += (size_t)w;
	}
}

static int fac_check_split(const struct px_proactor *px, char *err,
			   size_t errlen)
{
	static const uint32_t dirs[2] = { FAC_READ_DIR, FAC_WRITE_DIR };
	static const char *const names[2] = { "read", "write" };

	if (px->nproc < 2)
		return 0;
	/* What each processor is routed: the first whose mask has it. */
	uint32_t first = px->proc[0]->ops;
	uint32_t second = px->proc[1]->ops & ~first;
	if (!second) {
		/* Nothing would ever reach it (overlapping lists, or a
		 * primary that does all): a processor, and with
		 * processor=dedicated a thread, for nothing, as silent as
		 * an ops= its provider cannot do, which is refused too. */
		char a[160];
		fac_op_list(a, sizeof(a), px->proc[1]->ops);
		px__set_err(err, errlen,
			   "secondary: no operation would reach it: the "
			   "primary comes first and takes all of the "
			   "secondary's (%s); narrow the primary's ops= "
			   "(ops=file, say) or leave the secondary out",
			   a);
		return -EINVAL;
	}
	for (int d = 0; d < 2; d++) {
		if (!(first & dirs[d]) || !(second & dirs[d]))
			continue;
		char a[96], b[96];
		fac_op_list(a, sizeof(a), first & dirs[d]);
		fac_op_list(b, sizeof(b), second & dirs[d]);
		px__set_err(err, errlen,
			   "the two processors share out the %s operations of a "
			   "socket (the primary takes %s, the secondary %s), so "
			   "their order on one descriptor could not be kept: "
			   "give read_stream, read_dgram and accept to one "
			   "processor, and write_stream, write_dgram and connect "
			   "to one (ops=socket or ops=file on the primary, say)",
			   names[d], a, b);
		return -EINVAL;
	}
	return 0;
}

static int fac_build(struct px_proactor **out, const px_config *cfg, char *err,
		    size_t errlen)
{
	struct px_proactor *px = calloc(1, sizeof(*px));
	if (!px)
		return -ENOMEM;
	px->fork_token = fac_process_token();
	/* Critical sections are short; spinning a little before sleeping in
	 * the kernel saves a futex round trip when two threads meet here. */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
	pthread_mutex_init(&px->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&px->call_cv, NULL);
	px_list_init(&px->completed);
	px_list_init(&px->owns);
	px_list_init(&px->followers);
	px_list_init(&px->closing);
	px->order = cfg->followers;
	px->cfg = *cfg;

	px_processor_config *pc[2] = { &px->cfg.primary, &px->cfg.secondary };
	size_t priv = 0;
	for (int i = 0; i < 2; i++) {
		if (pc[i]->processor == PX_PROCESSOR_NONE)
			continue;
		/* An auto processor learns here which engine it is. */
		int rc = px__processor_create(px, px->nproc, pc[i],
					     &px->proc[px->nproc], err, errlen);
		if (rc < 0) {
			fac_free(px);
			return rc;
		}
		px_processor *p = px->proc[px->nproc++];
		if (p->prov->priv_size > priv)
			priv = p->prov->priv_size;
		/* Record what the provider actually does. */
		pc[i]->max_aio = p->max_aio;
		if (i == 0 && !cfg->primary.provider[0] &&
		    cfg->secondary.processor == PX_PROCESSOR_NONE) {
			fac_auto_team(px, &cfg->primary);
			if (px->nproc == 2 &&
			    px->proc[1]->prov->priv_size > priv)
				priv = px->proc[1]->prov->priv_size;
			break;
		}
	}
	if (!px->nproc) {
		px__set_err(err, errlen, "the configuration names no processor");
		fac_free(px);
		return -EINVAL;
	}
	int src = fac_check_split(px, err, errlen);
	if (src < 0) {
		fac_free(px);
		return src;
	}
	px__alloc_init(&px->alloc, priv);
	px_config_format(&px->cfg, px->engine, sizeof(px->engine));
	for (int i = 0; i < px->nproc; i++)
		if (px->proc[i]->type == PX_PROCESSOR_SHARED &&
		    px->proc[i]->wait->ops->idle)
			px->has_idle_waits = true;

	for (int i = 0; i < px->nproc; i++) {
		if (px->proc[i]->type != PX_PROCESSOR_DEDICATED)
			continue;
		int rc = px__processor_run_dedicated(px->proc[i]);
		if (rc < 0) {
			/* Which one, as every other message of the
			 * secondary says. */
			px__set_err(err, errlen,
				   "%scannot start the dedicated leader thread: %s",
				   i ? "secondary: " : "", px_strerror(rc));
			pthread_mutex_lock(&px->lock);
			for (int j = 0; j < i; j++)
				px__processor_stop_dedicated(px->proc[j]);
			pthread_mutex_unlock(&px->lock);
			fac_free(px);
			return rc;
		}
	}
	*out = px;
	return 0;
}

int px_create_config(px_proactor **out, const px_config *in, char *err,
		     size_t errlen)
{
	PX_KEEP_ERRNO;
	if (err && errlen)
		err[0] = '\0';
	if (!out || !in) {
		px__set_err(err, errlen, "px_create_config: NULL argument");
		return -EINVAL;
	}
	px_config cfg = *in;

	/* The administrator's override; not honoured for setuid/setgid
	 * programs, where the environment belongs to someone else.  Every
	 * message of a create it made says so, "PX_ENGINE: " first: an
	 * application that asked for epoll and heard "cannot create
	 * provider uring" was not told whose choice that was.  The message
	 * is written straight after the prefix, cut only by the caller's
	 * errlen: a copy through a buffer of our own cut a mistyped
	 * preset's list of presets. */
	static const char prefix[] = "PX_ENGINE: ";
	const size_t pl = sizeof(prefix) - 1;
	const char *env = (cfg.flags & PX_CF_NO_ENV) ? NULL : getenv("PX_ENGINE");
	bool from_env = env && *env && !getauxval(AT_SECURE);
	char *msg = err;
	size_t msglen = errlen;
	if (from_env) {
		bool room = err && errlen > pl;
		msg = room ? err + pl : NULL;
		msglen = room ? errlen - pl : 0;
		if (msg)
			msg[0] = '\0';  /* a failure that says nothing */
	}

	int rc = 0;
	if (from_env)
		rc = px_config_parse(&cfg, env, msg, msglen);
	if (rc == 0)
		rc = px__config_resolve(&cfg, msg, msglen);
	if (rc == 0)
		rc = fac_build(out, &cfg, msg, msglen);
	if (rc == 0) {
		if (err && errlen)
			err[0] = '\0';
	} else if (from_env) {
		if (msg)
			memcpy(err, prefix, pl);
		else
			px__set_err(err, errlen, "%s", prefix);
	}
	return rc;
}

int px_create(px_proactor **out, const char *text, char *err, size_t errlen)
{
	PX_KEEP_ERRNO;
	px_config cfg;
	int rc = px_config_parse(&cfg, text ? text : "auto", err, errlen);
	if (rc < 0) {
		/* A broken application text is still overridden by a valid
		 * PX_ENGINE. */
		const char *env = getenv("PX_ENGINE");
		if (!env || !*env || getauxval(AT_SECURE))
			return rc;
		rc = px_config_parse(&cfg, "auto", NULL, 0);
		if (rc < 0)
			return rc;
	}
	return px_create_config(out, &cfg, err, errlen);
}

const char *px_engine_name(const px_proactor *px)
{
	return px ? px->engine : "";
}

int px_stop(px_proactor *px)
{
	PX_KEEP_ERRNO;
	if (!px)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	pthread_mutex_lock(&px->lock);
	px->stopped = true;
	px__dispatch_wake_all(px);
	pthread_mutex_unlock(&px->lock);
	return 0;
}

/* ------------------------------------------------------------------ */
/* px_close                                                             */
/* ------------------------------------------------------------------ */

/* What the core keeps for fd, or NULL if nothing was ever started or
 * closed on that number. */
static px_fdops *fac_ops_of(struct px_proactor *px, int fd)
{
	return fd >= 0 && (size_t)fd < px->nbyfd ? px->byfd[fd] : NULL;
}

/* The entry for fd, made if need be.  The table grows only for a number
 * that is open: -EBADF for one that is not, as a start on it must fail
 * anyway, without sizing the table by a bad number. */
static int fac_ops_get(struct px_proactor *px, int fd, px_fdops **out)
{
	if ((size_t)fd >= px->nbyfd) {
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
			return -EBADF;
		size_t n = px->nbyfd ? px->nbyfd : 64;
		while (n <= (size_t)fd) {
			if (n > SIZE_MAX / 2 / sizeof(px_fdops *))
				return -ENOMEM;
			n *= 2;
		}
		px_fdops **t = realloc(px->byfd, n * sizeof(*t));
		if (!t)
			return -ENOMEM;
		memset(t + px->nbyfd, 0, (n - px->nbyfd) * sizeof(*t));
		px->byfd = t;
		px->nbyfd = n;
	}
	if (!px->byfd[fd]) {
		px_fdops *e = px__zalloc_lines(sizeof(*e));
		if (!e)
			return -ENOMEM;
		px_list_init(&e->ops);
		e->closing = NULL;
		px->byfd[fd] = e;
	}
	*out = px->byfd[fd];
	return 0;
}

/* fd's px_close, if one waits for its operations. */
static px_result *fac_closing_of(struct px_proactor *px, int fd)
{
	px_fdops *e = fac_ops_of(px, fd);
	return e ? e->closing : NULL;
}

/* Operations on fd not yet delivered: anywhere from deferred to a
 * callback that is running (not counting a px_close that has closed it). */
static size_t fac_count_fd(struct px_proactor *px, int fd)
{
	px_fdops *e = fac_ops_of(px, fd);
	return e ? px_list_count(&e->ops) : 0;
}

/* The kernel gives a new descriptor the lowest free number, and a number
 * the application closed with close(2) under pending operations is free
 * until the idle check has ended them (EBADF, "Closed descriptors" in
 * docs/ARCHITECTURE.md).  A descriptor of the library's own put there
 * (POSIX AIO's dups, made while a file is busy) would be the file those
 * operations name: the check finds the number open and leaves them
 * waiting, and a new start on the number meets the library's file.  So
 * it moves up, past every such number; each step closes the number it
 * leaves, which F_DUPFD's lower bound then passes by. */
int px__fd_keep_off_ops(struct px_proactor *px, int fd)
{
	px_fdops *ent;

	/* A px_close whose callback is still to return counts too: an
	 * application that keys its state by number would otherwise see a
	 * new connection under the number before that callback. */
	while (px && fd >= 0 && (ent = fac_ops_of(px, fd)) &&
	       (!px_list_empty(&ent->ops) || ent->closed_uncalled)) {
		int d = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
		int e = errno;

		close(fd);
		/* fd the highest number RLIMIT_NOFILE allows: F_DUPFD says
		 * EINVAL for a lower bound at the limit; no number is free
		 * above it, which is EMFILE (px_accept(3)). */
		if (d < 0)
			return -(e == EINVAL ? EMFILE : e);
		fd = d;
	}
	return fd;
}

/* Does the number an accept returned still hold the connection it
 * accepted?  The kernel may hand an accept a number that px_close has just
 * closed, before the close's callback runs, and that callback may put a
 * file of the application's there with dup2: the accepted socket is then
 * gone (dup2 closed it) and the number is the application's, not to be
 * moved or closed.  An IP connection is told by its peer's address; other
 * families cannot be, and are taken to be still there. */
static bool fac_still_accepted(const px_result *r)
{
	const struct sockaddr_storage *want = &r->c.addr;
	struct sockaddr_storage got;
	socklen_t gl = sizeof(got);

	if (r->c.addrlen < sizeof(sa_family_t) ||
	    (want->ss_family != AF_INET && want->ss_family != AF_INET6))
		return true;
	memset(&got, 0, sizeof(got));
	if (getpeername(r->c.new_fd, (struct sockaddr *)&got, &gl) < 0) {
		/* A connection the peer reset before it was accepted has no
		 * peer any more (ENOTCONN), but it still holds the
		 * listener's local port; a file the application put there
		 * does not (or is no socket at all). */
		struct sockaddr_storage mine, lis;
		socklen_t ml = sizeof(mine), ll = sizeof(lis);
		int acc = 1;
		socklen_t al = sizeof(acc);

		if (errno != ENOTCONN ||
		    getsockopt(r->c.new_fd, SOL_SOCKET, SO_ACCEPTCONN, &acc,
			       &al) < 0 || acc)
			return false;
		memset(&mine, 0, sizeof(mine));
		memset(&lis, 0, sizeof(lis));
		if (getsockname(r->c.new_fd, (struct sockaddr *)&mine, &ml) < 0 ||
		    getsockname(r->c.fd, (struct sockaddr *)&lis, &ll) < 0 ||
		    mine.ss_family != lis.ss_family)
			return false;
		if (mine.ss_family == AF_INET)
			return ((struct sockaddr_in *)&mine)->sin_port ==
			       ((struct sockaddr_in *)&lis)->sin_port;
		return ((struct sockaddr_in6 *)&mine)->sin6_port ==
		       ((struct sockaddr_in6 *)&lis)->sin6_port;
	}
	return gl == r->c.addrlen && memcmp(&got, want, gl) == 0;
}

/* A server that close(2)s a connection under a pending read and accepts
 * the next one would otherwise get the new connection under the number
 * the read still names: the idle check then finds it open and leaves the
 * read waiting, and a readiness provider that watches the number again
 * runs the old read on the new connection and takes its bytes.  A number
 * whose connection the application's dup2 replaced (above) is left alone,
 * and the accept ends with ECONNABORTED: its connection is gone. */
void px__accept_keep_off(struct px_proactor *px, px_result *r)
{
	if (r->c.op != PX_OP_ACCEPT || r->c.error || r->c.new_fd < 0)
		return;
	px_fdops *ent = fac_ops_of(px, r->c.new_fd);
	if (ent && (!px_list_empty(&ent->ops) || ent->closed_uncalled) &&
	    !fac_still_accepted(r)) {
		r->c.new_fd = -1;
		r->c.addrlen = 0;
		px_result_finish(r, 0, ECONNABORTED);
		return;
	}
	int fd = px__fd_keep_off_ops(px, r->c.new_fd);
	if (fd < 0) {
		r->c.new_fd = -1;
		r->c.addrlen = 0;
		px_result_finish(r, 0, -fd);
		return;
	}
	r->c.new_fd = fd;
}

/* Cancel what of fd is deferred, being started or in the kernel (what has
 * finished keeps its own result).  Returns how many were cancelled. */
static int fac_cancel_fd(struct px_proactor *px, int fd)
{
	px_fdops *e = fac_ops_of(px, fd);
	px_list *ops = e ? &e->ops : NULL;
	px_processor *told[2] = { NULL, NULL };
	int n = 0;

	if (!ops)
		return 0;
	/* A cancel only moves results between the processor's lists and
	 * the completed queue; none leaves ops (that happens after its
	 * callback), so the walk is safe. */
	for (px_link *l = px_list_first(ops); l; l = px_list_next(ops, l)) {
		px_result *r = px_container_of(l, px_result, flink);
		if (!r->proc)
			continue;
		int k = px__processor_cancel_result(r->proc, r);
		n += k;
		if (r->in_call)
			r->call_waiter = 1;
		if (k && r->proc != told[0] && r->proc != told[1])
			told[told[0] ? 1 : 0] = r->proc;
	}
	/* One interrupt per processor (a dedicated leader re-reads what it
	 * watches), not one per operation. */
	for (int i = 0; i < 2 && told[i]; i++)
		px__processor_cancelled(told[i]);
	return n;
}

/* Mutex held.  Return once no system call of a cancelled operation of fd
 * is under way in another thread (px_result.in_call: a readiness
 * provider's read or write, made with the mutex released).  The mutex is
 * released while waiting, so fd's list is walked afresh after each wake;
 * operations started after the cancel are not waited for. */
static void fac_wait_calls(struct px_proactor *px, int fd)
{
	px_fdops *e;
again:
	e = fac_ops_of(px, fd);
	if (!e)
		return;
	for (px_link *l = px_list_first(&e->ops); l;
	     l = px_list_next(&e->ops, l)) {
		px_result *r = px_container_of(l, px_result, flink);
		if (r->in_call && r->call_waiter) {
			pthread_cond_wait(&px->call_cv, &px->lock);
			goto again;
		}
	}
}

void px__call_end_wake(px_result *r)
{
	r->call_waiter = 0;
	pthread_cond_broadcast(&r->proc->px->call_cv);
}

/* Its callback has returned: r leaves fd's list (a px_close, fd's count
 * of closes still to call back). */
void px__ops_delivered(struct px_proactor *px, px_result *r)
{
	if (px_link_linked(&r->flink))
		px_list_remove(&px->byfd[r->c.fd]->ops, &r->flink);
	else if (r->c.op == PX_OP_CLOSE && px->byfd[r->c.fd]->closed_uncalled)
		px->byfd[r->c.fd]->closed_uncalled--;
}

/* Close r's descriptor (mutex held, so no start can slip in between the
 * close and the end of the refusal) and queue its callback.
 *
 * close(2) can wait: the last close of a socket with SO_LINGER and data
 * its peer has not taken waits up to the linger time.  Made with the
 * mutex held, that wait held every thread of the proactor (timers, posts,
 * starts, the leaders' collecting).  So the number is closed under the
 * mutex through a dup of the file made first, which keeps that close from
 * being the last, and the dup, the last reference, is closed with the
 * mutex released (unlock point 7): only this thread waits, while the
 * number is already free and takes starts again.  The callback is queued
 * after that last close, and reports its error.  Without a number for
 * the dup, the close is made under the mutex as before. */
static void fac_close_now(struct px_proactor *px, px_result *r)
{
	px_fdops *e = px->byfd[r->c.fd];
	int fd = r->c.fd;
	/* The dup goes above every number the core has an entry for, so it
	 * never sits, not even for a moment, on a number that operations
	 * name or that a px_close has freed and whose callback may be
	 * putting a file there with dup2 (px__fd_keep_off_ops would move it
	 * off such a number, but only after taking it).  EINVAL (that
	 * bound is at the descriptor limit) or EMFILE: no dup. */
	int last = px->nbyfd < INT_MAX ?
		   px__own_fd(fcntl(fd, F_DUPFD_CLOEXEC, (int)px->nbyfd)) : -1;
	px_list_remove(&px->closing, &r->link);
	e->closing = NULL;
	e->closed_uncalled++;
	int err = close(fd) < 0 ? errno : 0;
	/* Linux frees the descriptor even when close is interrupted. */
	if (err == EINTR)
		err = 0;
	/* What the providers learnt of the file is not true of the next
	 * one under the number. */
	for (int i = 0; i < px->nproc; i++) {
		px_provider *pv = px->proc[i]->prov;
		if (pv->ops->closed)
			pv->ops->closed(pv, fd);
	}
	if (last >= 0) {
		px->ncloses_in_call++;
		pthread_mutex_unlock(&px->lock);      /* unlock point 7 */
		int lerr = px__own_close(last) < 0 ? errno : 0;
		pthread_mutex_lock(&px->lock);
		if (--px->ncloses_in_call == 0 && px->destroying)
			pthread_cond_broadcast(&px->call_cv);
		if (!err && lerr != EINTR)
			err = lerr;
	}
	px_result_finish(r, 0, err);
	r->state = PX_RS_POSTED;
	px__dispatch_post(px, r, px__dispatch_level_for_caller(px));
}

void px__close_delivered(struct px_proactor *px, int fd)
{
	px_result *r = fac_closing_of(px, fd);
	if (r && r->done && --r->done == 0)
		fac_close_now(px, r);
}

int px_close(px_proactor *px, int fd, px_callback *cb, void *user)
{
	PX_KEEP_ERRNO;
	if (!px || !cb)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	/* Not the application's to close: a descriptor the library holds
	 * for an engine (internal.h, px__is_own_fd). */
	if (fd < 0 || px__is_own_fd(fd))
		return -EBADF;
	int rc = 0;
	pthread_mutex_lock(&px->lock);
	if (fac_closing_of(px, fd)) {
		rc = -EALREADY;
		goto out;
	}
	size_t pending = fac_count_fd(px, fd);
	if (!pending && fcntl(fd, F_GETFD) < 0) {
		rc = -EBADF;
		goto out;
	}
	px_fdops *e;
	rc = fac_ops_get(px, fd, &e);
	if (rc < 0)
		goto out;
	px_result *r = px__alloc_get(&px->alloc);
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	r->c.proactor = px;
	r->c.user = user;
	r->c.op = PX_OP_CLOSE;
	r->c.fd = fd;
	r->c.new_fd = -1;
	r->cb = cb;
	r->done = pending;
	r->state = PX_RS_CLOSING;
	px_list_push_back(&px->closing, &r->link);
	e->closing = r;
	/* From here on starts on fd are refused; cancel what is pending.
	 * The cancels only move results between lists, so the count above
	 * holds. */
	fac_cancel_fd(px, fd);
	if (!pending)
		fac_close_now(px, r);
out:
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int px_destroy(px_proactor *px)
{
	PX_KEEP_ERRNO;
	if (!px)
		return 0;
	if (fac_forked(px))
		return -ECHILD;
	pthread_mutex_lock(&px->lock);
	/* Refused while a thread is inside px_handle_events, and while
	 * another px_destroy runs: its callbacks run with the mutex
	 * released and nthreads 0, and one of them that called px_destroy
	 * again freed the proactor under the destroy that ran it. */
	if (px->nthreads > 0 || px->destroying) {
		pthread_mutex_unlock(&px->lock);
		return -EBUSY;
	}
	px->destroying = true;
	/* A px_close made by a thread outside the loop may be in its
	 * close(2), with the mutex released (fac_close_now): when the mutex
	 * was held over that call, this waited for it on the mutex. */
	while (px->ncloses_in_call)
		pthread_cond_wait(&px->call_cv, &px->lock);

	for (int i = 0; i < px->nproc; i++)
		px__processor_stop_dedicated(px->proc[i]);
	/* A start made by another thread just before this call may be
	 * inside the provider's system call, with the mutex released
	 * (proc_provider_start): freeing the proactor under it would leave
	 * it to lock freed memory, and its operation without a callback.
	 * Wait for it; starts from now on get -ESHUTDOWN.  (The leaders
	 * stopped above no longer start deferred operations.) */
	for (int i = 0; i < px->nproc; i++)
		while (px__processor_starts_under_way(px->proc[i]))
			pthread_cond_wait(&px->call_cv, &px->lock);
	for (int i = 0; i < px->nproc; i++)
		px__processor_cancel_all(px->proc[i]);

	/* Cancels the provider could not finish at once complete through the
	 * wait: lead each processor until nothing is started.  The wait's
	 * idle check first, so that those leads use no descriptor of the
	 * engine's that the application has replaced since the last check:
	 * an io_uring lead's prepare read the application's eventfd under
	 * the ready eventfd's number and took its count (TESTING.md, fixed
	 * problem 328), and its cancels went to the application's ring under
	 * a ring's number until an idle check of these leads came (fixed
	 * problem 311).  A few system calls, once. */
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		if (!px_list_empty(&p->started) || !px_list_empty(&p->deferred)) {
			px__processor_lead_begin(p);
			px__processor_check_wait(p);
			px__processor_lead_end(p);
		}
		while (!px_list_empty(&p->started) || !px_list_empty(&p->deferred)) {
			px__processor_lead_begin(p);
			px__processor_handle_aio_events(p, 100, px__now_ns(), 0, NULL);
			px__processor_lead_end(p);
			/* Anything started meanwhile (deferred before the
			 * cancel) is cancelled too. */
			px__processor_cancel_all(p);
		}
	}

	px__timers_cancel_all(px);
	px_link *l;
	while ((l = px_list_pop_front(&px->completed)))
		px__dispatch_one(px, px_result_of(l));
	/* Every operation has been delivered, so no px_close still waits;
	 * should one do, it closes now and its callback runs all the same. */
	while ((l = px_list_first(&px->closing))) {
		fac_close_now(px, px_result_of(l));
		while ((l = px_list_pop_front(&px->completed)))
			px__dispatch_one(px, px_result_of(l));
	}
	pthread_mutex_unlock(&px->lock);
	fac_free(px);
	return 0;
}

int px_handle_events(px_proactor *px, int timeout_ms)
{
	PX_KEEP_ERRNO;
	if (!px)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	return px__dispatch_handle_events(px, timeout_ms);
}

/* ------------------------------------------------------------------ */
/* Starting operations                                                  */
/* ------------------------------------------------------------------ */

typedef struct px_start_args {
	px_op op;
	int fd;
	void *buf;
	size_t len;
	uint64_t offset;
	const struct sockaddr *addr;
	socklen_t addrlen;
	unsigned flags;
	uint64_t timeout_ns;       /* 0: no deadline */
	px_callback *cb;
	void *user;
	const struct iovec *iov;   /* with PX_RF_VECTORED in flags */
	int iovcnt;
} px_start_args;

/* Check a vectored start's array and set a->len to its total: 0 or
 * -EINVAL. */
static int fac_check_iov(px_start_args *a)
{
	if (!a->iov || a->iovcnt < 1 || a->iovcnt > IOV_MAX || a->buf || a->len)
		return -EINVAL;
	size_t total = 0;
	for (int i = 0; i < a->iovcnt; i++) {
		size_t l = a->iov[i].iov_len;
		if (l && !a->iov[i].iov_base)
			return -EINVAL;
		if (l > (size_t)SSIZE_MAX - total)
			return -EINVAL;
		total += l;
	}
	if (!total)
		return -EINVAL;
	a->len = total;
	a->flags |= PX_RF_VECTORED;
	return 0;
}

/* Has fd a connect that has not finished (started, deferred, or being
 * started)?  One that finished and waits for its callback, or whose
 * callback runs (a retry from it), does not count.  Mutex held. */
static bool fac_connect_pending(struct px_proactor *px, int fd)
{
	px_fdops *e = fac_ops_of(px, fd);

	if (!e)
		return false;
	for (px_link *l = px_list_first(&e->ops); l; l = px_list_next(&e->ops, l)) {
		const px_result *o = px_container_of(l, px_result, flink);

		if (o->c.op == PX_OP_CONNECT &&
		    (o->state == PX_RS_INITIALIZED || o->state == PX_RS_STARTED ||
		     o->state == PX_RS_DEFERRED))
			return true;
	}
	return false;
}

static int fac_start(struct px_proactor *px, const px_start_args *a)
{
	PX_KEEP_ERRNO;
	if (!px)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	/* A descriptor the library holds (an engine's epoll instance,
	 * eventfd, ring, ...; internal.h, px__is_own_fd) is no operation's:
	 * a read of an interrupt's eventfd took its wake-up. */
	if (a->fd < 0 || px__is_own_fd(a->fd))
		return -EBADF;
	if (!a->cb)
		return -EINVAL;
	if (!a->buf && a->len && !(a->flags & PX_RF_VECTORED))
		return -EINVAL;
	/* No buffer is that large, and the engines would each treat it
	 * their own way; a vectored total is held to the same bound
	 * (fac_check_iov). */
	if (a->len > (size_t)SSIZE_MAX)
		return -EINVAL;
	if (!a->addr != !a->addrlen)
		return -EINVAL;
	if (a->addr && (a->addrlen < sizeof(sa_family_t) ||
			a->addrlen > sizeof(struct sockaddr_storage)))
		return -EINVAL;

	/* Before the mutex: a system call (px__fsize_refused).  An offset
	 * beyond off_t fails here, in the completion, as pread(2) fails it
	 * (a negative position, whatever the file).  Left to the engines,
	 * io_uring passed such an offset to a file whose offsets the
	 * kernel takes as unsigned (/proc/PID/mem: EIO) and moved a pipe's
	 * data, and the two AIO engines said ESPIPE for a pipe. */
	int refused = 0;
	if ((a->op == PX_OP_READ_FILE || a->op == PX_OP_WRITE_FILE) &&
	    a->offset > (uint64_t)INT64_MAX) {
		/* A number that is not open is the start's -EBADF still. */
		if (fcntl(a->fd, F_GETFD) < 0 && errno == EBADF)
			return -EBADF;
		refused = EINVAL;
	} else if (a->op == PX_OP_WRITE_FILE) {
		refused = px__fsize_refused(a->fd, a->offset, a->len);
	}

	pthread_mutex_lock(&px->lock);
	int rc;
	if (px->stopped || px->destroying) {
		rc = -ESHUTDOWN;
		goto out;
	}
	/* A descriptor being closed by px_close takes no new operations. */
	if (!px_list_empty(&px->closing) && fac_closing_of(px, a->fd)) {
		rc = -EBADF;
		goto out;
	}
	/* A connect while another one on fd is still under way: refused, as
	 * connect(2) refuses it.  Queued behind the first, it waited after
	 * that one's deadline or cancel for the socket to turn writable (up
	 * to the kernel's last SYN retry on Linux AIO, about 2 s on the
	 * readiness engines), where io_uring tried it at once. */
	if (a->op == PX_OP_CONNECT && fac_connect_pending(px, a->fd)) {
		rc = -EALREADY;
		goto out;
	}
	px_processor *p = NULL;
	for (int i = 0; i < px->nproc; i++) {
		if (px->proc[i]->ops & PX_OP_BIT(a->op)) {
			p = px->proc[i];
			break;
		}
	}
	if (!p || ((a->flags & PX_RF_VECTORED) && !(p->vec_ops & PX_OP_BIT(a->op)))) {
		rc = -EOPNOTSUPP;
		goto out;
	}
	px_result *r = px__alloc_get(&px->alloc);
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	r->c.proactor = px;
	r->c.user = a->user;
	r->c.op = a->op;
	r->c.fd = a->fd;
	r->c.buf = a->buf;
	r->c.len = a->len;
	r->c.offset = a->offset;
	if (a->flags & PX_RF_VECTORED) {
		r->c.iov = a->iov;
		r->c.iovcnt = a->iovcnt;
	}
	if (a->addrlen) {
		memcpy(&r->c.addr, a->addr, a->addrlen);
		r->c.addrlen = a->addrlen;
	}
	r->cb = a->cb;
	r->flags = (uint8_t)a->flags;
	/* A deadline is a timer whose expiry cancels r (timer.c); it is in
	 * place before the start, which may release the mutex. */
	if (a->timeout_ns && px__timeout_attach(px, r, a->timeout_ns) < 0) {
		px__alloc_put(&px->alloc, r);
		rc = -ENOMEM;
		goto out;
	}
	/* Counted, and on fd's list, before the start: another thread may
	 * deliver it before px__processor_start returns. */
	px_fdops *e;
	rc = fac_ops_get(px, a->fd, &e);
	if (rc < 0) {
		px__timeout_detach(px, r);
		px__alloc_put(&px->alloc, r);
		goto out;
	}
	px_list_push_back(&e->ops, &r->flink);
	p->st.started++;
	if (refused) {
		px__processor_fail_start(p, r, refused);
		rc = 0;
		goto out;
	}
	rc = px__processor_start(p, r);
	if (rc < 0) {
		p->st.started--;
		px_list_remove(&e->ops, &r->flink);
		px__timeout_detach(px, r);
		px__alloc_put(&px->alloc, r);
		/* A px_close of fd made while the start ran without the mutex
		 * (none was there when this call looked, above) counted r
		 * among the callbacks it waits for, and no callback comes:
		 * count it as delivered, or that close would never happen
		 * and the number would refuse every start after its reuse. */
		if (e->closing)
			px__close_delivered(px, a->fd);
	}
out:
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int px_read_stream(px_proactor *px, int fd, void *buf, size_t len,
		   px_callback *cb, void *user)
{
	if (!len)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_READ_STREAM, .fd = fd,
			.buf = buf, .len = len, .cb = cb, .user = user });
}

int px_write_stream(px_proactor *px, int fd, const void *buf, size_t len,
		    px_callback *cb, void *user)
{
	if (!len)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_WRITE_STREAM, .fd = fd,
			.buf = (void *)buf, .len = len, .cb = cb, .user = user });
}

int px_write_stream_all(px_proactor *px, int fd, const void *buf, size_t len,
			px_callback *cb, void *user)
{
	if (!len)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_WRITE_STREAM, .fd = fd,
			.buf = (void *)buf, .len = len, .flags = PX_RF_WRITE_ALL,
			.cb = cb, .user = user });
}

int px_read_file(px_proactor *px, int fd, void *buf, size_t len,
		 uint64_t offset, px_callback *cb, void *user)
{
	if (!len)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_READ_FILE, .fd = fd,
			.buf = buf, .len = len, .offset = offset, .cb = cb,
			.user = user });
}

int px_write_file(px_proactor *px, int fd, const void *buf, size_t len,
		  uint64_t offset, px_callback *cb, void *user)
{
	if (!len)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_WRITE_FILE, .fd = fd,
			.buf = (void *)buf, .len = len, .offset = offset,
			.cb = cb, .user = user });
}

static int fac_start_vec(struct px_proactor *px, px_start_args *a)
{
	int rc = fac_check_iov(a);
	return rc < 0 ? rc : fac_start(px, a);
}

int px_readv_stream(px_proactor *px, int fd, const struct iovec *iov,
		    int iovcnt, px_callback *cb, void *user)
{
	return fac_start_vec(px, &(px_start_args){ .op = PX_OP_READ_STREAM,
			.fd = fd, .iov = iov, .iovcnt = iovcnt, .cb = cb,
			.user = user });
}

int px_writev_stream(px_proactor *px, int fd, const struct iovec *iov,
		     int iovcnt, px_callback *cb, void *user)
{
	return fac_start_vec(px, &(px_start_args){ .op = PX_OP_WRITE_STREAM,
			.fd = fd, .iov = iov, .iovcnt = iovcnt, .cb = cb,
			.user = user });
}

int px_writev_stream_all(px_proactor *px, int fd, const struct iovec *iov,
			 int iovcnt, px_callback *cb, void *user)
{
	return fac_start_vec(px, &(px_start_args){ .op = PX_OP_WRITE_STREAM,
			.fd = fd, .iov = iov, .iovcnt = iovcnt,
			.flags = PX_RF_WRITE_ALL, .cb = cb, .user = user });
}

int px_readv_file(px_proactor *px, int fd, const struct iovec *iov, int iovcnt,
		  uint64_t offset, px_callback *cb, void *user)
{
	return fac_start_vec(px, &(px_start_args){ .op = PX_OP_READ_FILE,
			.fd = fd, .iov = iov, .iovcnt = iovcnt, .offset = offset,
			.cb = cb, .user = user });
}

int px_writev_file(px_proactor *px, int fd, const struct iovec *iov,
		   int iovcnt, uint64_t offset, px_callback *cb, void *user)
{
	return fac_start_vec(px, &(px_start_args){ .op = PX_OP_WRITE_FILE,
			.fd = fd, .iov = iov, .iovcnt = iovcnt, .offset = offset,
			.cb = cb, .user = user });
}

int px_read_dgram(px_proactor *px, int fd, void *buf, size_t len,
		  px_callback *cb, void *user)
{
	return fac_start(px, &(px_start_args){ .op = PX_OP_READ_DGRAM, .fd = fd,
			.buf = buf, .len = len, .cb = cb, .user = user });
}

int px_write_dgram(px_proactor *px, int fd, const void *buf, size_t len,
		   const struct sockaddr *addr, socklen_t addrlen,
		   px_callback *cb, void *user)
{
	return fac_start(px, &(px_start_args){ .op = PX_OP_WRITE_DGRAM, .fd = fd,
			.buf = (void *)buf, .len = len, .addr = addr,
			.addrlen = addrlen, .cb = cb, .user = user });
}

int px_accept(px_proactor *px, int listen_fd, px_callback *cb, void *user)
{
	return fac_start(px, &(px_start_args){ .op = PX_OP_ACCEPT, .fd = listen_fd,
			.cb = cb, .user = user });
}

int px_connect(px_proactor *px, int fd, const struct sockaddr *addr,
	       socklen_t addrlen, px_callback *cb, void *user)
{
	if (!addr || !addrlen)
		return -EINVAL;
	return fac_start(px, &(px_start_args){ .op = PX_OP_CONNECT, .fd = fd,
			.addr = addr, .addrlen = addrlen, .cb = cb, .user = user });
}

int px_start_op(px_proactor *px, const px_op_desc *d)
{
	if (!d)
		return -EINVAL;
	px_start_args a = { .op = d->op, .fd = d->fd, .buf = d->buf,
			    .len = d->len, .offset = d->offset, .addr = d->addr,
			    .addrlen = d->addrlen, .timeout_ns = d->timeout_ns,
			    .cb = d->cb, .user = d->user };
	if (d->flags & ~(PX_OPF_WRITE_ALL | PX_OPF_VECTORED))
		return -EINVAL;
	if (d->flags & PX_OPF_VECTORED) {
		/* The vectored form of a stream or file read or write.  iov
		 * and iovcnt are read only here: a px_op_desc built with an
		 * older header, which lacks them, never sets this flag. */
		if ((unsigned)d->op > PX_OP_WRITE_FILE || d->addr || d->buf ||
		    d->len)
			return -EINVAL;
		if ((d->flags & PX_OPF_WRITE_ALL) && d->op != PX_OP_WRITE_STREAM)
			return -EINVAL;
		if (d->op != PX_OP_READ_FILE && d->op != PX_OP_WRITE_FILE && d->offset)
			return -EINVAL;
		a.iov = d->iov;
		a.iovcnt = d->iovcnt;
		if (d->flags & PX_OPF_WRITE_ALL)
			a.flags = PX_RF_WRITE_ALL;
		return fac_start_vec(px, &a);
	}
	switch (d->op) {
	case PX_OP_READ_STREAM:
	case PX_OP_READ_FILE:
	case PX_OP_WRITE_FILE:
		if (!d->len || d->addr || d->flags)
			return -EINVAL;
		break;
	case PX_OP_WRITE_STREAM:
		if (!d->len || d->addr)
			return -EINVAL;
		if (d->flags & PX_OPF_WRITE_ALL)
			a.flags = PX_RF_WRITE_ALL;
		break;
	case PX_OP_READ_DGRAM:
		if (d->addr || d->flags)
			return -EINVAL;
		break;
	case PX_OP_WRITE_DGRAM:
		if (d->flags)
			return -EINVAL;
		break;
	case PX_OP_ACCEPT:
		if (d->buf || d->len || d->addr || d->flags)
			return -EINVAL;
		break;
	case PX_OP_CONNECT:
		if (!d->addr || !d->addrlen || d->buf || d->len || d->flags)
			return -EINVAL;
		break;
	default:
		return -EINVAL;  /* posts and timers have calls of their own */
	}
	if (d->op != PX_OP_READ_FILE && d->op != PX_OP_WRITE_FILE && d->offset)
		return -EINVAL;
	return fac_start(px, &a);
}

/* ------------------------------------------------------------------ */
/* Posts, cancel, timers                                                */
/* ------------------------------------------------------------------ */

int px_post(px_proactor *px, px_callback *cb, void *user)
{
	PX_KEEP_ERRNO;
	if (!px || !cb)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	int rc = 0;
	pthread_mutex_lock(&px->lock);
	if (px->stopped || px->destroying) {
		rc = -ESHUTDOWN;
	} else {
		px_result *r = px__alloc_get(&px->alloc);
		if (!r) {
			rc = -ENOMEM;
		} else {
			r->c.proactor = px;
			r->c.user = user;
			r->c.op = PX_OP_POST;
			r->cb = cb;
			r->state = PX_RS_POSTED;
			px__dispatch_post(px, r, px__dispatch_level_for_caller(px));
		}
	}
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int px_cancel(px_proactor *px, int fd)
{
	PX_KEEP_ERRNO;
	if (!px)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&px->lock);
	int n = fac_cancel_fd(px, fd);
	if (n > 0)
		fac_wait_calls(px, fd);
	pthread_mutex_unlock(&px->lock);
	return n;
}

int64_t px_timer_start(px_proactor *px, uint64_t delay_ns, px_callback *cb,
		       void *user)
{
	PX_KEEP_ERRNO;
	if (!px || !cb)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	pthread_mutex_lock(&px->lock);
	int64_t rc = px__timer_start(px, delay_ns, 0, cb, user);
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int64_t px_timer_periodic(px_proactor *px, uint64_t first_ns,
			  uint64_t period_ns, px_callback *cb, void *user)
{
	PX_KEEP_ERRNO;
	if (!px || !cb || !period_ns)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	pthread_mutex_lock(&px->lock);
	int64_t rc = px__timer_start(px, first_ns, period_ns, cb, user);
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int px_timer_cancel(px_proactor *px, int64_t id)
{
	PX_KEEP_ERRNO;
	if (!px)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	pthread_mutex_lock(&px->lock);
	int rc = px__timer_cancel(px, id);
	pthread_mutex_unlock(&px->lock);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Statistics                                                           */
/* ------------------------------------------------------------------ */

static void fac_stats_waiting(px_result *r, void *arg)
{
	struct px_stats *out = arg;
	if (r->c.op < PX_OP_POST && r->proc)
		out->proc[r->proc->index].in_flight++;
}

int px_stats(px_proactor *px, struct px_stats *out)
{
	PX_KEEP_ERRNO;
	if (!px || !out)
		return -EINVAL;
	if (fac_forked(px))
		return -ECHILD;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&px->lock);
	out->nproc = (unsigned)px->nproc;
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		out->proc[i] = p->st;
		/* A start still inside the provider for the first time may
		 * yet fail, and is then not counted at all: left out of
		 * both until it is known (TESTING.md, fixed problem 205). */
		out->proc[i].started -= p->nfirst;
		out->proc[i].in_flight = px_list_count(&p->deferred) +
					 px_list_count(&p->starting) +
					 px_list_count(&p->started) - p->nfirst;
	}
	/* Finished operations waiting for a thread to run their callback,
	 * on the shared queue or on a thread's own list. */
	for (px_link *l = px_list_first(&px->completed); l;
	     l = px_list_next(&px->completed, l))
		fac_stats_waiting(px_result_of(l), out);
	px__dispatch_visit_own(px, fac_stats_waiting, out);
	out->posts = px->st.posts;
	out->timer_callbacks = px->st.timer_callbacks;
	out->callbacks = px->st.callbacks;
	out->follower_wakeups = px->st.follower_wakeups;
	out->follower_sleep_ns = px->st.follower_sleep_ns;
	out->dispatch_ns = px->st.dispatch_ns;
	pthread_mutex_unlock(&px->lock);
	for (unsigned i = 0; i < out->nproc; i++) {
		const px_proc_stats *q = &out->proc[i];
		out->started += q->started;
		out->deferred += q->deferred;
		out->completed += q->completed;
		out->cancelled += q->cancelled;
		out->timed_out += q->timed_out;
		out->in_flight += q->in_flight;
		out->leader_turns += q->leader_turns;
		out->leader_interrupts += q->leader_interrupts;
		out->wait_ns += q->wait_ns;
	}
	return 0;
}
