/*
 * processor.c - one provider's started and deferred lists, and its leader.
 *
 * A start goes to the provider at once when it may (room under max_aio, no
 * older deferred operation to overtake, and the provider allows starts from
 * this thread); otherwise it is deferred and the leader starts it later.
 * A start is never refused for lack of room.
 *
 * A shared processor is led by an application thread inside
 * px_handle_events; a dedicated one by its own thread, created with the
 * proactor, that holds leadership until the proactor is destroyed and hands
 * what completes to the dispatcher with a notification.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static bool proc_is_leader(const px_processor *p)
{
	return p->has_leader && pthread_equal(p->leader, pthread_self());
}

bool px__processor_has_work(const px_processor *p)
{
	return !px_list_empty(&p->started) || !px_list_empty(&p->deferred);
}

void px__processor_interrupt(px_processor *p)
{
	if (p->has_leader && !proc_is_leader(p))
		p->intr->ops->interrupt(p->intr);
}

/* The processor just went from idle to having work.  A shared one without a
 * leader needs a thread to lead it. */
static void proc_became_busy(px_processor *p)
{
	if (p->type == PX_PROCESSOR_SHARED && !p->has_leader)
		px__dispatch_wake_follower(p->px);
}

static int proc_post_level(const px_processor *p)
{
	/* A shared leader returns to the dispatcher itself after collecting;
	 * a dedicated one never does, so others must be told. */
	return p->type == PX_PROCESSOR_DEDICATED ? PX_NOTIFY_STRONG : PX_NOTIFY_NONE;
}

static void proc_defer(px_processor *p, px_result *r)
{
	r->state = PX_RS_DEFERRED;
	px_list_push_back(&p->deferred, &r->link);
}

static void proc_cancel_one(px_processor *p, px_result *r, int *count);

/*
 * Give r to the provider's start.  The readiness provider releases the
 * mutex around its system call, and r is then on neither the deferred nor
 * the started list; it waits on the starting list instead, where a cancel
 * finds it and sets cancel_pending, acted on once start has returned
 * (proc_started, proc_cancelled_again).  Without that the cancel would find
 * nothing and a write that stays pending would never end.
 */
static int proc_provider_start(px_processor *p, px_result *r)
{
	if (p->wait->ops->on_start)
		p->wait->ops->on_start(p->wait, r);
	r->cancel_pending = 0;
	px_list_push_back(&p->starting, &r->link);
	int rc = p->prov->ops->start(p->prov, r);
	px_list_remove(&p->starting, &r->link);
	return rc;
}

/* The provider started r: onto the started list, and cancelled now if a
 * cancel came while it was being started. */
static void proc_started(px_processor *p, px_result *r)
{
	int n = 0;

	r->state = PX_RS_STARTED;
	px_list_push_back(&p->started, &r->link);
	if (r->cancel_pending) {
		r->cancel_pending = 0;
		proc_cancel_one(p, r, &n);
	}
}

/* The provider gave r back (PX_START_AGAIN).  If a cancel came while it was
 * being started, complete it now with ECANCELED and return true; else the caller
 * defers it again. */
static bool proc_cancelled_again(px_processor *p, px_result *r)
{
	if (!r->cancel_pending)
		return false;
	r->cancel_pending = 0;
	px_result_finish(r, r->done, ECANCELED);
	r->state = PX_RS_READY;
	px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
	return true;
}

int px__processor_start(px_processor *p, px_result *r)
{
	bool was_idle = !px__processor_has_work(p);
	r->proc = p;

	bool defer = !px_list_empty(&p->deferred) ||
		     px_list_count(&p->started) >= p->max_aio;
	if (!defer && !(p->flags & PX_PF_START_ANY_THREAD) && !proc_is_leader(p))
		defer = true;
	if (defer) {
		proc_defer(p, r);
		if (p->has_leader)
			px__processor_interrupt(p);
		else if (was_idle)
			proc_became_busy(p);
		return 0;
	}

	int rc = proc_provider_start(p, r);
	/* start() may have released the mutex: look again. */
	was_idle = !px__processor_has_work(p);
	switch (rc) {
	case PX_START_STARTED:
		proc_started(p, r);
		if (was_idle)
			proc_became_busy(p);
		if (p->flags & PX_PF_START_INTERRUPT)
			px__processor_interrupt(p);
		return 0;
	case PX_START_DONE:
		r->state = PX_RS_READY;
		px__dispatch_post(p->px, r, px__dispatch_level_for_caller(p->px));
		return 0;
	case PX_START_AGAIN:
		if (proc_cancelled_again(p, r))
			return 0;
		proc_defer(p, r);
		if (was_idle)
			proc_became_busy(p);
		return 0;
	default:
		r->proc = NULL;
		return rc < 0 ? rc : -EIO;
	}
}

/* Leader: start deferred results while there is room.  Returns true if
 * something finished at once (the wait should then not block). */
static bool proc_start_deferred(px_processor *p)
{
	bool finished = false;
	px_link *l;
	while (px_list_count(&p->started) < p->max_aio &&
	       (l = px_list_first(&p->deferred))) {
		px_result *r = px_result_of(l);
		px_list_remove(&p->deferred, l);
		int rc = proc_provider_start(p, r);
		if (rc == PX_START_STARTED) {
			proc_started(p, r);
			continue;
		}
		if (rc == PX_START_AGAIN) {
			if (proc_cancelled_again(p, r)) {
				finished = true;
				continue;
			}
			r->state = PX_RS_DEFERRED;
			px_list_push_front(&p->deferred, &r->link);
			break;
		}
		if (rc == PX_START_DONE) {
			r->state = PX_RS_READY;
		} else {
			/* The caller has gone: the error travels in the
			 * completion. */
			r->state = PX_RS_START_ERROR;
			px_result_finish(r, 0, rc < 0 ? -rc : EIO);
		}
		px__dispatch_post(p->px, r, proc_post_level(p));
		finished = true;
	}
	return finished;
}

static void proc_collect(px_processor *p)
{
	px_result *r;
	int level = proc_post_level(p);
	while ((r = p->wait->ops->next_completed(p->wait))) {
		px_list_remove(&p->started, &r->link);
		r->state = PX_RS_READY;
		px__dispatch_post(p->px, r, level);
	}
}

void px__processor_handle_aio_events(px_processor *p, int timeout_ms)
{
	struct px_proactor *px = p->px;

	if (proc_start_deferred(p) || !px_list_empty(&px->completed))
		timeout_ms = 0;
	if (p->wait->ops->prepare(p->wait, &p->started) < 0)
		timeout_ms = 0;
	pthread_mutex_unlock(&px->lock);      /* unlock point 3 */
	p->wait->ops->wait(p->wait, timeout_ms);
	pthread_mutex_lock(&px->lock);
	proc_collect(p);
	proc_start_deferred(p);
}

void px__processor_lead_begin(px_processor *p)
{
	p->has_leader = true;
	p->leader = pthread_self();
	if (p->intr->ops->leader_activated)
		p->intr->ops->leader_activated(p->intr);
}

void px__processor_lead_end(px_processor *p)
{
	if (p->intr->ops->leader_deactivated)
		p->intr->ops->leader_deactivated(p->intr);
	p->has_leader = false;
}

/* ------------------------------------------------------------------ */
/* Cancel                                                               */
/* ------------------------------------------------------------------ */

static void proc_cancel_one(px_processor *p, px_result *r, int *count)
{
	if (r->state == PX_RS_DEFERRED) {
		px_list_remove(&p->deferred, &r->link);
		px_result_finish(r, r->done, ECANCELED);
		r->state = PX_RS_READY;
		px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
	} else {
		if (p->prov->ops->cancel(p->prov, r) == PX_CANCEL_DONE) {
			px_list_remove(&p->started, &r->link);
			r->state = PX_RS_READY;
			px__dispatch_post(p->px, r, PX_NOTIFY_STRONG);
		}
	}
	(*count)++;
}

static int proc_cancel_list(px_processor *p, px_list *list, int fd, bool all)
{
	int count = 0;
	px_link *l = px_list_first(list);
	while (l) {
		px_link *next = px_list_next(list, l);
		px_result *r = px_result_of(l);
		if (all || r->c.fd == fd)
			proc_cancel_one(p, r, &count);
		l = next;
	}
	return count;
}

/* Results inside the provider's start: mark them (see proc_provider_start). */
static int proc_cancel_starting(px_processor *p, int fd, bool all)
{
	int count = 0;
	px_link *l;

	for (l = px_list_first(&p->starting); l; l = px_list_next(&p->starting, l)) {
		px_result *r = px_result_of(l);
		if (all || r->c.fd == fd) {
			r->cancel_pending = 1;
			count++;
		}
	}
	return count;
}

int px__processor_cancel_fd(px_processor *p, int fd)
{
	int n = proc_cancel_starting(p, fd, false);
	n += proc_cancel_list(p, &p->deferred, fd, false);
	n += proc_cancel_list(p, &p->started, fd, false);
	if (n && (p->flags & PX_PF_START_INTERRUPT))
		px__processor_interrupt(p);
	return n;
}

void px__processor_cancel_all(px_processor *p)
{
	proc_cancel_starting(p, -1, true);
	proc_cancel_list(p, &p->deferred, -1, true);
	proc_cancel_list(p, &p->started, -1, true);
}

/* ------------------------------------------------------------------ */
/* Dedicated leader thread                                              */
/* ------------------------------------------------------------------ */

static void *proc_dedicated_main(void *arg)
{
	px_processor *p = arg;
	struct px_proactor *px = p->px;

	/* The application's signal mask is inherited; the interrupt strategy
	 * sets what it needs in leader_activated. */
	pthread_mutex_lock(&px->lock);
	px__processor_lead_begin(p);
	while (!p->stop)
		px__processor_handle_aio_events(p, -1);
	px__processor_lead_end(p);
	pthread_mutex_unlock(&px->lock);
	return NULL;
}

int px__processor_run_dedicated(px_processor *p)
{
	sigset_t all, old;
	sigfillset(&all);
	/* The thread starts with every signal blocked so that none of the
	 * application's signals land on it. */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&p->thread, NULL, proc_dedicated_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	p->thread_running = true;
	return 0;
}

/* Mutex held on entry and exit. */
void px__processor_stop_dedicated(px_processor *p)
{
	if (!p->thread_running)
		return;
	p->stop = true;
	if (p->has_leader)
		p->intr->ops->interrupt(p->intr);
	pthread_mutex_unlock(&p->px->lock);
	pthread_join(p->thread, NULL);
	pthread_mutex_lock(&p->px->lock);
	p->thread_running = false;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

/* Build the provider of a resolved, non-auto config. */
static int proc_build(const px_processor_config *cfg, px_provider **prov,
			      const char *where, char *err, size_t errlen)
{
	px_proc_spec spec;
	int rc = px__spec_of(cfg, &spec, where, err, errlen);

	if (rc < 0)
		return rc;
	rc = spec.cls->ops->create(cfg, &spec, prov);
	if (rc < 0) {
		char why[256];
		if (spec.cls->explain && spec.cls->explain(rc, why, sizeof(why)))
			px__set_err(err, errlen, "%scannot create provider %s: %s (%s)",
				   where, spec.cls->name, px_strerror(rc), why);
		else
			px__set_err(err, errlen, "%scannot create provider %s: %s",
				   where, spec.cls->name, px_strerror(rc));
	}
	return rc;
}

/* Errors after which "auto" goes on to its next candidate: the mechanism
 * is missing, forbidden, short of memory or of a system-wide resource
 * (EAGAIN: Linux AIO's fs.aio-max-nr), or refuses this combination. */
static bool proc_auto_may_skip(int rc)
{
	return rc == -ENOSYS || rc == -EPERM || rc == -ENOMEM || rc == -EINVAL ||
	       rc == -EAGAIN;
}

/* "auto": the candidates in order (px__auto_candidates), each probed and
 * then built, until one works.  cfg receives the one chosen. */
static int proc_build_auto(px_processor_config *cfg, px_provider **prov,
				   const char *where, char *err, size_t errlen)
{
	const px_provider_class *cand[8];
	unsigned n = px__auto_candidates(cfg, cand, 8);
	char why[256] = "", tried[512] = "";
	size_t pos = 0;
	int rc = -ENOSYS;

	for (unsigned i = 0; i < n; i++) {
		px_processor_config c = *cfg;
		px__set_name(c.provider, PX_NAME_MAX, cand[i]->name,
			     strlen(cand[i]->name));
		why[0] = '\0';
		rc = cand[i]->probe ? cand[i]->probe(why, sizeof(why)) : 0;
		if (rc == 0)
			rc = px__resolve_processor(&c, where, why, sizeof(why));
		if (rc == 0)
			rc = proc_build(&c, prov, "", why, sizeof(why));
		if (rc == 0) {
			*cfg = c;
			return 0;
		}
		if (pos < sizeof(tried)) {
			int w = snprintf(tried + pos, sizeof(tried) - pos, "%s%s: %s",
					 pos ? "; " : "", cand[i]->name, why);
			if (w > 0)
				pos += (size_t)w;
		}
		if (!proc_auto_may_skip(rc))
			break;
	}
	px__set_err(err, errlen, "%sauto found no engine that works here (%s)",
		   where, n ? tried : "no candidate");
	return rc < 0 ? rc : -ENOSYS;
}

int px__processor_create(struct px_proactor *px, int index,
			px_processor_config *cfg, px_processor **out,
			char *err, size_t errlen)
{
	const char *where = index ? "secondary: " : "";
	px_processor *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return -ENOMEM;
	if (cfg->provider[0])
		rc = proc_build(cfg, &p->prov, where, err, errlen);
	else
		rc = proc_build_auto(cfg, &p->prov, where, err, errlen);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->prov->lock = &px->lock;
	p->px = px;
	p->index = index;
	p->wait = p->prov->wait;
	p->intr = p->wait->intr;
	p->type = cfg->processor == PX_PROCESSOR_DEDICATED ? PX_PROCESSOR_DEDICATED
							   : PX_PROCESSOR_SHARED;
	p->flags = p->prov->flags;
	if (cfg->flags & PX_PF_FLAGS_SET)
		p->flags = cfg->flags & (PX_PF_START_ANY_THREAD | PX_PF_START_INTERRUPT);
	/* START_INTERRUPT only means something with START_ANY_THREAD; and a
	 * provider that needs the interrupt keeps it. */
	if (p->prov->flags & PX_PF_START_INTERRUPT)
		p->flags |= PX_PF_START_INTERRUPT;
	p->max_aio = p->prov->max_aio ? p->prov->max_aio : 1;
	p->ops = p->prov->ops_mask & (cfg->ops ? cfg->ops : PX_OPS_IO);
	px_list_init(&p->started);
	px_list_init(&p->deferred);
	px_list_init(&p->starting);
	*out = p;
	return 0;
}

void px__processor_destroy(px_processor *p)
{
	if (!p)
		return;
	if (p->prov)
		p->prov->ops->destroy(p->prov);
	free(p);
}
