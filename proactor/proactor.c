/*
 * proactor.c - the public entry points.
 *
 * Each start function checks its arguments, takes a result from the
 * allocator, fills in the inputs and hands it to the first processor whose
 * operations mask has the operation (primary first).  Everything runs under
 * the proactor mutex.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "core.h"

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

static void fac_free(struct px_proactor *px)
{
	for (int i = 0; i < px->nproc; i++)
		px__processor_destroy(px->proc[i]);
	px__alloc_fini(&px->alloc);
	pthread_mutex_destroy(&px->lock);
	free(px);
}

static int fac_build(struct px_proactor **out, const px_config *cfg, char *err,
		    size_t errlen)
{
	struct px_proactor *px = calloc(1, sizeof(*px));
	if (!px)
		return -ENOMEM;
	/* Critical sections are short; spinning a little before sleeping in
	 * the kernel saves a futex round trip when two threads meet here. */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
	pthread_mutex_init(&px->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	px_list_init(&px->completed);
	px_list_init(&px->owns);
	px_list_init(&px->timers);
	px_list_init(&px->followers);
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
	}
	if (!px->nproc) {
		px__set_err(err, errlen, "the configuration names no processor");
		fac_free(px);
		return -EINVAL;
	}
	px__alloc_init(&px->alloc, priv);
	px_config_format(&px->cfg, px->engine, sizeof(px->engine));

	for (int i = 0; i < px->nproc; i++) {
		if (px->proc[i]->type != PX_PROCESSOR_DEDICATED)
			continue;
		int rc = px__processor_run_dedicated(px->proc[i]);
		if (rc < 0) {
			px__set_err(err, errlen, "cannot start the dedicated leader thread: %s",
				   px_strerror(rc));
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
	if (err && errlen)
		err[0] = '\0';
	if (!out || !in) {
		px__set_err(err, errlen, "px_create_config: NULL argument");
		return -EINVAL;
	}
	px_config cfg = *in;

	/* The administrator's override; not honoured for setuid/setgid
	 * programs, where the environment belongs to someone else. */
	const char *env = (cfg.flags & PX_CF_NO_ENV) ? NULL : getenv("PX_ENGINE");
	if (env && *env && !getauxval(AT_SECURE)) {
		char msg[256];
		int rc = px_config_parse(&cfg, env, msg, sizeof(msg));
		if (rc < 0) {
			px__set_err(err, errlen, "PX_ENGINE: %s", msg);
			return rc;
		}
	}

	int rc = px__config_resolve(&cfg, err, errlen);
	if (rc < 0)
		return rc;
	rc = fac_build(out, &cfg, err, errlen);
	if (rc == 0 && err && errlen)
		err[0] = '\0';
	return rc;
}

int px_create(px_proactor **out, const char *text, char *err, size_t errlen)
{
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
	if (!px)
		return -EINVAL;
	pthread_mutex_lock(&px->lock);
	px->stopped = true;
	px__dispatch_wake_all(px);
	pthread_mutex_unlock(&px->lock);
	return 0;
}

int px_destroy(px_proactor *px)
{
	if (!px)
		return 0;
	pthread_mutex_lock(&px->lock);
	if (px->nthreads > 0) {
		pthread_mutex_unlock(&px->lock);
		return -EBUSY;
	}
	px->destroying = true;

	for (int i = 0; i < px->nproc; i++)
		px__processor_stop_dedicated(px->proc[i]);
	for (int i = 0; i < px->nproc; i++)
		px__processor_cancel_all(px->proc[i]);

	/* Cancels the provider could not finish at once complete through the
	 * wait: lead each processor until nothing is started. */
	for (int i = 0; i < px->nproc; i++) {
		px_processor *p = px->proc[i];
		while (!px_list_empty(&p->started) || !px_list_empty(&p->deferred)) {
			px__processor_lead_begin(p);
			px__processor_handle_aio_events(p, 100);
			px__processor_lead_end(p);
			/* Anything started meanwhile (deferred before the
			 * cancel) is cancelled too. */
			px__processor_cancel_all(p);
		}
	}

	px_link *l;
	while ((l = px_list_pop_front(&px->timers))) {
		px_result *r = px_result_of(l);
		px_result_finish(r, 0, ECANCELED);
		r->state = PX_RS_POSTED;
		px_list_push_back(&px->completed, l);
	}
	while ((l = px_list_pop_front(&px->completed)))
		px__dispatch_one(px, px_result_of(l));
	pthread_mutex_unlock(&px->lock);
	fac_free(px);
	return 0;
}

int px_handle_events(px_proactor *px, int timeout_ms)
{
	if (!px)
		return -EINVAL;
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
	px_callback *cb;
	void *user;
} px_start_args;

static int fac_start(struct px_proactor *px, const px_start_args *a)
{
	if (!px)
		return -EINVAL;
	if (a->fd < 0)
		return -EBADF;
	if (!a->cb)
		return -EINVAL;
	if (!a->buf && a->len)
		return -EINVAL;
	if (!a->addr != !a->addrlen)
		return -EINVAL;
	if (a->addr && (a->addrlen < sizeof(sa_family_t) ||
			a->addrlen > sizeof(struct sockaddr_storage)))
		return -EINVAL;

	pthread_mutex_lock(&px->lock);
	int rc;
	if (px->stopped || px->destroying) {
		rc = -ESHUTDOWN;
		goto out;
	}
	px_processor *p = NULL;
	for (int i = 0; i < px->nproc; i++) {
		if (px->proc[i]->ops & PX_OP_BIT(a->op)) {
			p = px->proc[i];
			break;
		}
	}
	if (!p) {
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
	if (a->addrlen) {
		memcpy(&r->c.addr, a->addr, a->addrlen);
		r->c.addrlen = a->addrlen;
	}
	r->cb = a->cb;
	r->flags = (uint8_t)a->flags;
	rc = px__processor_start(p, r);
	if (rc < 0)
		px__alloc_put(&px->alloc, r);
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

/* ------------------------------------------------------------------ */
/* Posts, cancel, timers                                                */
/* ------------------------------------------------------------------ */

int px_post(px_proactor *px, px_callback *cb, void *user)
{
	if (!px || !cb)
		return -EINVAL;
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
	if (!px)
		return -EINVAL;
	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&px->lock);
	int n = 0;
	for (int i = 0; i < px->nproc; i++)
		n += px__processor_cancel_fd(px->proc[i], fd);
	pthread_mutex_unlock(&px->lock);
	return n;
}

int64_t px_timer_start(px_proactor *px, uint64_t delay_ns, px_callback *cb,
		       void *user)
{
	if (!px || !cb)
		return -EINVAL;
	uint64_t now = px__now_ns();
	int64_t rc;
	pthread_mutex_lock(&px->lock);
	if (px->stopped || px->destroying) {
		rc = -ESHUTDOWN;
		goto out;
	}
	px_result *r = px__alloc_get(&px->alloc);
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	r->c.proactor = px;
	r->c.user = user;
	r->c.op = PX_OP_TIMER;
	r->c.timer_id = ++px->next_timer_id;
	r->cb = cb;
	r->deadline_ns = delay_ns > PX_NS_INF - 1 - now ? PX_NS_INF - 1 : now + delay_ns;
	px__timers_insert(px, r);
	rc = r->c.timer_id;
out:
	pthread_mutex_unlock(&px->lock);
	return rc;
}

int px_timer_cancel(px_proactor *px, int64_t id)
{
	if (!px)
		return -EINVAL;
	int rc = -ENOENT;
	pthread_mutex_lock(&px->lock);
	for (px_link *l = px_list_first(&px->timers); l;
	     l = px_list_next(&px->timers, l)) {
		px_result *r = px_result_of(l);
		if (r->c.timer_id == id) {
			px_list_remove(&px->timers, l);
			px_result_finish(r, 0, ECANCELED);
			r->state = PX_RS_POSTED;
			px__dispatch_post(px, r, px__dispatch_level_for_caller(px));
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&px->lock);
	return rc;
}
