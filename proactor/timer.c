/*
 * timer.c - the proactor's timers: a binary min-heap by deadline, the table
 * of user timer ids, periodic timers and per-operation timeouts.
 *
 * Three kinds of timer record (px_result with op PX_OP_TIMER):
 *   one-shot   px_timer_start: expires once, posted with error 0;
 *   periodic   px_timer_periodic: posted at every expiry and put back in
 *              the heap after its callback, until cancelled;
 *   timeout    an operation's deadline (px_start_op with timeout_ns): never
 *              has a callback of its own; owned by its operation (peer),
 *              whose callback frees it; its expiry cancels the operation.
 *
 * The heap is ordered by (deadline, id), so timers with equal deadlines
 * fire in start order.  Each record in the heap knows its index
 * (heap_idx), so a cancel removes it in O(log n).  Room in the heap is
 * reserved for every live timer record when it starts (tm_reserve), so
 * putting a periodic timer back never allocates and cannot fail.  User
 * timers are found by id through an open-addressing table (linear probing,
 * deletion by backward shift), O(1) on average.
 *
 * Everything here runs under the proactor mutex.
 */
#include <stdlib.h>

#include "core.h"

/* ------------------------------------------------------------------ */
/* Heap                                                                 */
/* ------------------------------------------------------------------ */

static bool tm_before(const px_result *a, const px_result *b)
{
	return a->deadline_ns < b->deadline_ns ||
	       (a->deadline_ns == b->deadline_ns && a->c.timer_id < b->c.timer_id);
}

static void tm_place(struct px_proactor *px, size_t i, px_result *r)
{
	px->theap[i] = r;
	r->heap_idx = i;
}

static void tm_sift_up(struct px_proactor *px, size_t i)
{
	px_result *r = px->theap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!tm_before(r, px->theap[parent]))
			break;
		tm_place(px, i, px->theap[parent]);
		i = parent;
	}
	tm_place(px, i, r);
}

static void tm_sift_down(struct px_proactor *px, size_t i)
{
	px_result *r = px->theap[i];
	size_t n = px->ntheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && tm_before(px->theap[c + 1], px->theap[c]))
			c++;
		if (!tm_before(px->theap[c], r))
			break;
		tm_place(px, i, px->theap[c]);
		i = c;
	}
	tm_place(px, i, r);
}

/* Room in the heap for one more live timer record.  0 or -ENOMEM. */
static int tm_reserve(struct px_proactor *px)
{
	if (px->ntimer_recs == px->theap_cap) {
		size_t cap = px->theap_cap ? px->theap_cap * 2 : 64;
		px_result **h = realloc(px->theap, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		px->theap = h;
		px->theap_cap = cap;
	}
	px->ntimer_recs++;
	return 0;
}

static void tm_unreserve(struct px_proactor *px)
{
	px->ntimer_recs--;
}


void px__timers_insert(struct px_proactor *px, px_result *r)
{
	size_t i = px->ntheap++;
	px->theap[i] = r;
	r->state = PX_RS_TIMER;
	tm_sift_up(px, i);
	/* A new earliest deadline: bounds computed before it are late. */
	if (r->heap_idx == 0)
		px__dispatch_timer_moved(px, r->deadline_ns);
}

/* Take r (state TIMER) out of the heap. */
static void tm_remove(struct px_proactor *px, px_result *r)
{
	size_t i = r->heap_idx;
	px_result *last = px->theap[--px->ntheap];
	if (last != r) {
		tm_place(px, i, last);
		if (i > 0 && tm_before(last, px->theap[(i - 1) / 2]))
			tm_sift_up(px, i);
		else
			tm_sift_down(px, i);
	}
	r->state = PX_RS_INITIALIZED;
}

uint64_t px__timers_next(const struct px_proactor *px)
{
	return px->ntheap ? px->theap[0]->deadline_ns : PX_NS_INF;
}

/* ------------------------------------------------------------------ */
/* Ids of user timers                                                   */
/* ------------------------------------------------------------------ */

static size_t tm_hash(int64_t id, size_t cap)
{
	return (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static int tm_ids_grow(struct px_proactor *px)
{
	size_t cap = px->tids_cap ? px->tids_cap * 2 : 64;
	px_result **t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < px->tids_cap; i++) {
		px_result *r = px->tids[i];
		if (!r)
			continue;
		size_t j = tm_hash(r->c.timer_id, cap);
		while (t[j])
			j = (j + 1) & (cap - 1);
		t[j] = r;
	}
	free(px->tids);
	px->tids = t;
	px->tids_cap = cap;
	return 0;
}

static int tm_ids_add(struct px_proactor *px, px_result *r)
{
	if (2 * (px->ntids + 1) > px->tids_cap && tm_ids_grow(px) < 0)
		return -ENOMEM;
	size_t j = tm_hash(r->c.timer_id, px->tids_cap);
	while (px->tids[j])
		j = (j + 1) & (px->tids_cap - 1);
	px->tids[j] = r;
	px->ntids++;
	return 0;
}

static px_result *tm_ids_find(const struct px_proactor *px, int64_t id)
{
	if (!px->ntids)
		return NULL;
	size_t mask = px->tids_cap - 1;
	for (size_t j = tm_hash(id, px->tids_cap); px->tids[j]; j = (j + 1) & mask)
		if (px->tids[j]->c.timer_id == id)
			return px->tids[j];
	return NULL;
}

/* Forget r's id if it is in the table (so this may be called twice). */
static void tm_ids_del(struct px_proactor *px, px_result *r)
{
	if (!px->ntids)
		return;
	size_t mask = px->tids_cap - 1;
	size_t j = tm_hash(r->c.timer_id, px->tids_cap);
	while (px->tids[j] && px->tids[j] != r)
		j = (j + 1) & mask;
	if (!px->tids[j])
		return;
	/* Backward shift: move up every later entry of the cluster whose
	 * home slot does not lie between the hole and itself. */
	size_t hole = j;
	for (size_t k = (j + 1) & mask; px->tids[k]; k = (k + 1) & mask) {
		size_t home = tm_hash(px->tids[k]->c.timer_id, px->tids_cap);
		bool stays = hole <= k ? (hole < home && home <= k)
				       : (hole < home || home <= k);
		if (!stays) {
			px->tids[hole] = px->tids[k];
			hole = k;
		}
	}
	px->tids[hole] = NULL;
	px->ntids--;
}

/* ------------------------------------------------------------------ */
/* Starting and cancelling                                              */
/* ------------------------------------------------------------------ */

static uint64_t tm_deadline(uint64_t now, uint64_t delay_ns)
{
	return delay_ns > PX_NS_INF - 1 - now ? PX_NS_INF - 1 : now + delay_ns;
}

int64_t px__timer_start(struct px_proactor *px, uint64_t delay_ns,
			uint64_t period_ns, px_callback *cb, void *user)
{
	uint64_t now = px__now_ns();
	if (px->stopped || px->destroying)
		return -ESHUTDOWN;
	px_result *r = px__alloc_get(&px->alloc);
	if (!r)
		return -ENOMEM;
	if (tm_reserve(px) < 0) {
		px__alloc_put(&px->alloc, r);
		return -ENOMEM;
	}
	r->c.proactor = px;
	r->c.user = user;
	r->c.op = PX_OP_TIMER;
	r->c.timer_id = ++px->next_timer_id;
	r->cb = cb;
	r->period_ns = period_ns;
	if (period_ns)
		r->flags = PX_RF_PERIODIC;
	r->deadline_ns = tm_deadline(now, delay_ns);
	/* Every completion of a one-shot timer carries its deadline, the
	 * ECANCELED of px_timer_cancel and px_destroy too (a periodic one's
	 * callbacks with error 0 carry their first expiry's, set at each
	 * expiry). */
	r->c.offset = r->deadline_ns;
	if (tm_ids_add(px, r) < 0) {
		tm_unreserve(px);
		px__alloc_put(&px->alloc, r);
		return -ENOMEM;
	}
	px__timers_insert(px, r);
	return r->c.timer_id;
}

/* A user timer ends for good: its last callback, with error err. */
static void tm_final(struct px_proactor *px, px_result *r, int err, int level)
{
	tm_ids_del(px, r);
	tm_unreserve(px);
	px_result_finish(r, 0, err);
	r->state = PX_RS_POSTED;
	px__dispatch_post(px, r, level);
}

int px__timer_cancel(struct px_proactor *px, int64_t id)
{
	px_result *r = tm_ids_find(px, id);
	if (!r)
		return -ENOENT;
	int level = px__dispatch_level_for_caller(px);
	switch (r->state) {
	case PX_RS_TIMER:
		tm_remove(px, r);
		/* A one-shot timer past its deadline has fired
		 * (px_timer_start(3)), whether or not a thread has taken it
		 * out of the heap yet; after px_stop nothing fires. */
		if (!(r->flags & PX_RF_PERIODIC) && !px->stopped &&
		    !px->destroying && r->deadline_ns <= px__now_ns()) {
			tm_final(px, r, 0, level);
			return -ENOENT;
		}
		tm_final(px, r, ECANCELED, level);
		return 0;
	case PX_RS_POSTED:
		/* A periodic timer's expiry still queued: it becomes the
		 * final callback. */
		tm_ids_del(px, r);
		tm_unreserve(px);
		px_result_finish(r, 0, ECANCELED);
		return 0;
	default:
		/* A periodic timer whose callback runs now: the final
		 * callback follows it (px__timer_after_callback). */
		tm_ids_del(px, r);
		r->cancel_pending = 1;
		return 0;
	}
}

bool px__timer_after_callback(struct px_proactor *px, px_result *r)
{
	if (!(r->flags & PX_RF_PERIODIC) || r->c.error)
		return false;
	if (r->cancel_pending || px->destroying) {
		tm_final(px, r, ECANCELED, PX_NOTIFY_FOLLOWER);
		return true;
	}
	r->c.bytes = 0;
	px__timers_insert(px, r);
	return true;
}

/* ------------------------------------------------------------------ */
/* Per-operation timeouts                                               */
/* ------------------------------------------------------------------ */

int px__timeout_attach(struct px_proactor *px, px_result *op, uint64_t timeout_ns)
{
	uint64_t now = px__now_ns();
	px_result *t = px__alloc_get(&px->alloc);
	if (!t)
		return -ENOMEM;
	if (tm_reserve(px) < 0) {
		px__alloc_put(&px->alloc, t);
		return -ENOMEM;
	}
	t->c.proactor = px;
	t->c.op = PX_OP_TIMER;
	t->c.timer_id = ++px->next_timer_id;
	t->flags = PX_RF_TIMEOUT;
	t->deadline_ns = tm_deadline(now, timeout_ns);
	t->peer = op;
	op->peer = t;
	px__timers_insert(px, t);
	return 0;
}

void px__timeout_detach(struct px_proactor *px, px_result *op)
{
	px_result *t = op->peer;
	if (!t)
		return;
	if (t->state == PX_RS_TIMER) {
		tm_remove(px, t);
		tm_unreserve(px);
	}
	op->peer = NULL;
	px__alloc_put(&px->alloc, t);
	if (op->timed_out && op->c.error == ECANCELED)
		op->c.error = ETIMEDOUT;
}

/* ------------------------------------------------------------------ */
/* Expiry and destroy                                                   */
/* ------------------------------------------------------------------ */

bool px__timers_expire(struct px_proactor *px, uint64_t now)
{
	bool any = false;
	while (px->ntheap && px->theap[0]->deadline_ns <= now) {
		px_result *r = px->theap[0];
		tm_remove(px, r);
		if (r->flags & PX_RF_TIMEOUT) {
			/* The operation's deadline: cancel it, unless it has
			 * finished already.  An operation px_cancel or
			 * px_close had cancelled before (its outcome still to
			 * come, or already queued behind a slow callback) stays
			 * cancelled: only a cancel the deadline itself makes
			 * turns ECANCELED into ETIMEDOUT at delivery. */
			tm_unreserve(px);
			px_result *op = r->peer;
			bool asked = op->cancel_asked || op->cancel_pending;
			op->deadline_cancel = 1;
			int hit = op->proc &&
				  px__processor_cancel_result(op->proc, op);
			op->deadline_cancel = 0;
			if (hit) {
				if (!asked)
					op->timed_out = 1;
				px__processor_cancelled(op->proc);
			}
			continue;
		}
		r->c.offset = r->deadline_ns;
		if (r->flags & PX_RF_PERIODIC) {
			/* Every period that has passed by now is reported in
			 * this one callback, and the next deadline keeps the
			 * phase of the first. */
			uint64_t n = 1 + (now - r->deadline_ns) / r->period_ns;
			r->c.bytes = n;
			uint64_t step = n > (PX_NS_INF - 1) / r->period_ns
						? PX_NS_INF : n * r->period_ns;
			r->deadline_ns = step > PX_NS_INF - 1 - r->deadline_ns
						 ? PX_NS_INF - 1 : r->deadline_ns + step;
		} else {
			tm_ids_del(px, r);
			tm_unreserve(px);
		}
		r->state = PX_RS_POSTED;
		px_list_push_back(&px->completed, &r->link);
		any = true;
	}
	return any;
}

void px__timers_cancel_all(struct px_proactor *px)
{
	while (px->ntheap) {
		px_result *r = px->theap[px->ntheap - 1];
		tm_remove(px, r);
		if (r->flags & PX_RF_TIMEOUT) {
			tm_unreserve(px);  /* its operation frees it */
			continue;
		}
		tm_final(px, r, ECANCELED, PX_NOTIFY_NONE);
	}
}

void px__timers_fini(struct px_proactor *px)
{
	free(px->theap);
	free(px->tids);
	px->theap = NULL;
	px->tids = NULL;
	px->ntheap = px->theap_cap = px->tids_cap = px->ntids = 0;
}
