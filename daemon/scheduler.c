/* scheduler.c - continuous batching, chunked prefill, prefix reuse, preemption.
 * The policy is described in scheduler.h; the reasons for the order of
 * things are here. */
#include "scheduler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "proto/l8_hash.h"
#include "proto/llama8_event.h"  /* the sampling ranges */
#include "draft_len.h"
#include "history.h"
#include "ngram.h"

struct req {
    struct req *prev, *next;    /* in s->waiting, s->running or s->doomed */
    struct req *hnext;          /* in s->by_id while live (not doomed) */
    int list;                   /* which one (LIST_*) */
    uint64_t owner, id;
    void *user;
    uint64_t arrival;           /* submit order: FIFO within a priority */
    int32_t priority;
    uint32_t cache_scope;
    uint32_t uid;
    uint32_t *tokens;           /* [cap_tokens] prompt, then generated */
    uint32_t n_tokens, n_prompt, cap_tokens;
    uint32_t *pages;            /* [cap_pages] page table */
    uint32_t n_pages, cap_pages;
    uint32_t n_computed;        /* positions whose K/V is in the pages */
    uint32_t n_linked;          /* leading pages in the prefix cache chain */
    bool chain_broken;          /* an equal page was cached by someone else:
                                   our later pages cannot chain from it */
    uint32_t n_generated, max_new;
    uint32_t stops[L8_SCHED_MAX_STOP];
    uint32_t n_stop;
    struct l8_sampling sampling;
    bool logprobs;
    bool started;               /* ever put in a step */
    uint64_t admitted;          /* s->steps when it last became running */
    bool yielded;               /* waiting since it gave its slot to another
                                   owner's request (preempt_for_fair_share) */
    bool in_flight;             /* in the step the engine is running */
    bool cancelled;             /* cancelled while in flight */
    uint32_t fed;               /* tokens fed in the step in flight */
    void *constraint;           /* NULL, or its constraint and its mask */
    uint32_t *mask;             /* [vocab / 32 rounded up] */
    /* Speculative decoding (NULL vout: off for this request). */
    struct l8_ngram *ng;        /* index over tokens[0, l8_ngram_len), made at
                                   the first decode, freed at a preemption */
    struct l8_draft_len dl;     /* how many to draft next */
    uint32_t n_draft;           /* drafted in the step in flight */
    struct l8_sample_out *vout; /* [draft_max + 1] the step's samples */
    uint32_t drafted, accepted;
};

enum { LIST_WAITING, LIST_RUNNING, LIST_DOOMED, LIST_COUNT };

struct list { struct req *head, *tail; uint32_t n; };

struct owner_count { uint64_t owner; uint32_t n; bool used; };

/* A uid with live requests: few (users of one machine), so a list. */
struct uid_share { uint32_t uid, live, pages; };

struct l8_sched {
    struct l8_sched_opts o;
    struct l8_kvpool *pool;
    struct list lists[LIST_COUNT];
    /* live requests by (owner, id): submit and cancel stay O(1) with
     * thousands queued */
    struct req **by_id;         /* [n_buckets] */
    uint32_t n_buckets;         /* power of two */
    uint64_t next_arrival;
    /* the step: [max_seqs] each */
    struct l8_seq *seqs;
    struct l8_sched_slot *slots;
    struct req **step_req;
    uint32_t n_step;
    bool in_flight;
    /* running requests per owner while a step is built (fair share):
     * open addressing, [n_owner_slots], a power of two >= 4 * max_seqs */
    struct owner_count *owners;
    uint32_t n_owner_slots;
    uint64_t last_turn;         /* steps when a request last gave its slot up
                                   for a turn (preempt_for_fair_share) */
    struct l8_history *history; /* speculating: each cache_scope's recent
                                   requests, a second draft source */
    struct uid_share *uids;     /* [n_uids] of cap_uids: live counts; pages
                                   counted when needed (count_uid_pages) */
    uint32_t n_uids, cap_uids;
    struct req *blocked;        /* the last build's admission that the pool
                                   could not hold, and its numbers */
    uint32_t blocked_need, blocked_have;
    uint64_t done_t_ns;         /* step_done's t_ns, for its events */
    /* stats */
    uint64_t preemptions, tokens_generated, prompt_tokens, cached_tokens, steps;
    uint64_t drafted, accepted;
};

static uint32_t div_up(uint64_t a, uint32_t b) { return (uint32_t)((a + b - 1) / b); }

/* ---- lists ------------------------------------------------------------ */

static void list_remove(struct l8_sched *s, struct req *r)
{
    struct list *l = &s->lists[r->list];
    if (r->prev) r->prev->next = r->next; else l->head = r->next;
    if (r->next) r->next->prev = r->prev; else l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

/* a runs before b */
static bool before(const struct req *a, const struct req *b)
{
    return a->priority != b->priority ? a->priority > b->priority
                                      : a->arrival < b->arrival;
}

/* Insert in (priority desc, arrival asc) order. New arrivals land at the
 * tail, so the walk from the tail is short in the common case. */
static void list_insert_sorted(struct l8_sched *s, int which, struct req *r)
{
    struct list *l = &s->lists[which];
    struct req *after = l->tail;
    while (after && before(r, after))
        after = after->prev;
    r->list = which;
    r->prev = after;
    r->next = after ? after->next : l->head;
    if (r->prev) r->prev->next = r; else l->head = r;
    if (r->next) r->next->prev = r; else l->tail = r;
    l->n++;
}

static uint32_t id_bucket(const struct l8_sched *s, uint64_t owner, uint64_t id)
{
    return (uint32_t)l8_mix64(owner * L8_GOLDEN_GAMMA ^ id) & (s->n_buckets - 1);
}

static struct req *find_req(const struct l8_sched *s, uint64_t owner, uint64_t id)
{
    for (struct req *r = s->by_id[id_bucket(s, owner, id)]; r; r = r->hnext)
        if (r->owner == owner && r->id == id)
            return r;
    return NULL;
}

static void id_insert(struct l8_sched *s, struct req *r)
{
    struct req **b = &s->by_id[id_bucket(s, r->owner, r->id)];
    r->hnext = *b;
    *b = r;
}

static void id_remove(struct l8_sched *s, struct req *r)
{
    struct req **link = &s->by_id[id_bucket(s, r->owner, r->id)];
    while (*link && *link != r)
        link = &(*link)->hnext;
    if (*link)
        *link = r->hnext;
    r->hnext = NULL;
}

/* ---- uids ---------------------------------------------------------------- */

static struct uid_share *uid_find(struct l8_sched *s, uint32_t uid)
{
    for (uint32_t i = 0; i < s->n_uids; i++)
        if (s->uids[i].uid == uid)
            return &s->uids[i];
    return NULL;
}

/* Room for one more uid, so that uid_add_live() cannot fail. */
static int uid_room(struct l8_sched *s)
{
    if (s->n_uids < s->cap_uids)
        return 0;
    uint32_t cap = s->cap_uids ? 2 * s->cap_uids : 8;
    struct uid_share *t = realloc(s->uids, cap * sizeof *t);
    if (!t)
        return -ENOMEM;
    s->uids = t;
    s->cap_uids = cap;
    return 0;
}

static void uid_add_live(struct l8_sched *s, uint32_t uid)
{
    struct uid_share *u = uid_find(s, uid);
    if (!u) {
        u = &s->uids[s->n_uids++];
        *u = (struct uid_share){ .uid = uid };
    }
    u->live++;
}

/* r is no longer live (freed, or cancelled while in flight). */
static void unlive(struct l8_sched *s, struct req *r)
{
    id_remove(s, r);
    struct uid_share *u = uid_find(s, r->uid);
    if (u && --u->live == 0)
        *u = s->uids[--s->n_uids];
}

/* Each uid's pages now: page-table entries of its running requests. */
static void count_uid_pages(struct l8_sched *s)
{
    for (uint32_t i = 0; i < s->n_uids; i++)
        s->uids[i].pages = 0;
    for (const struct req *r = s->lists[LIST_RUNNING].head; r; r = r->next) {
        struct uid_share *u = uid_find(s, r->uid);
        if (u)
            u->pages += r->n_pages;
    }
}

/* ---- pages -------------------------------------------------------------- */

static void release_pages(struct l8_sched *s, struct req *r)
{
    /* Last page first: see l8_kvpool_unref(). */
    while (r->n_pages > 0)
        l8_kvpool_unref(s->pool, r->pages[--r->n_pages]);
    r->n_computed = 0;
    r->n_linked = 0;
    r->chain_broken = false;
}

static void req_free(struct l8_sched *s, struct req *r)
{
    /* Its tokens become drafts for the scope's later requests (no memory:
     * they do not) */
    if (s->history && r->started)
        (void)l8_history_add(s->history, r->cache_scope, r->tokens, r->n_tokens);
    if (r->list != LIST_DOOMED)
        unlive(s, r);
    if (s->blocked == r)
        s->blocked = NULL;
    list_remove(s, r);
    release_pages(s, r);
    if (r->constraint)
        s->o.free_constraint(s->o.ctx, r->constraint);
    free(r->mask);
    l8_ngram_free(r->ng);
    free(r->vout);
    free(r->tokens);
    free(r->pages);
    free(r);
}

/* ---- fair share ---------------------------------------------------------- */

/* owner's running count, added (at 0) if add and absent; NULL if absent. */
static uint32_t *owner_slot(struct l8_sched *s, uint64_t owner, bool add)
{
    uint32_t mask = s->n_owner_slots - 1;
    for (uint32_t i = (uint32_t)(owner * L8_GOLDEN_GAMMA >> 40) & mask;; i = (i + 1) & mask) {
        struct owner_count *o = &s->owners[i];
        if (o->used && o->owner == owner)
            return &o->n;
        if (!o->used) {
            if (!add)
                return NULL;
            *o = (struct owner_count){ .owner = owner, .used = true };
            return &o->n;
        }
    }
}

static uint32_t running_of(struct l8_sched *s, uint64_t owner)
{
    const uint32_t *n = owner_slot(s, owner, false);
    return n ? *n : 0;
}

/* The table holds the owners running when the step's build starts and
 * those of the requests it admits (preempted owners keep their entries),
 * each at most max_seqs: at most half full, so every probe ends. */
static void count_owners(struct l8_sched *s)
{
    memset(s->owners, 0, s->n_owner_slots * sizeof(*s->owners));
    for (struct req *r = s->lists[LIST_RUNNING].head; r; r = r->next)
        (*owner_slot(s, r->owner, true))++;
}

static bool held(const struct l8_sched *s, const struct req *r)
{
    return s->o.held && s->o.held(s->o.ctx, r->user);
}

/* The waiting request to admit next: of the highest priority waiting, the
 * one whose owner runs the fewest requests; of those, one that did not
 * just give its slot up for another owner's (else it would take it right
 * back); then the earliest. Held ones are passed over. NULL if none. */
static struct req *next_admission(struct l8_sched *s)
{
    struct req *best = NULL;
    uint32_t best_n = UINT32_MAX;
    for (struct req *r = s->lists[LIST_WAITING].head; r; r = r->next) {
        if (best && r->priority < best->priority)
            break;
        if (held(s, r))
            continue;
        const uint32_t n = running_of(s, r->owner);
        if (n < best_n || (n == best_n && best->yielded && !r->yielded)) {
            best = r;
            best_n = n;
        }
        if (best_n == 0 && !best->yielded)
            break;   /* nothing comes before it */
    }
    return best;
}

static void preempt(struct l8_sched *s, struct req *r)
{
    /* Its registered pages stay in the prefix cache (LRU), so the
     * recompute may find most of them again. */
    release_pages(s, r);
    l8_ngram_free(r->ng);       /* made again at its next decode */
    r->ng = NULL;
    list_remove(s, r);
    list_insert_sorted(s, LIST_WAITING, r);
    s->preemptions++;
    uint32_t *n = owner_slot(s, r->owner, false);
    if (n && *n)
        (*n)--;
}

/* With every sequence slot taken, the request next_admission() picks gets
 * the slot of a running request of no higher priority, preempted for it:
 *  - one that is held (its client reads no events: the slot does nothing);
 *  - else the youngest of the owner that runs the most, if that is at
 *    least two more than the waiting one's owner (shares even out);
 *  - else, where an owner runs just one more, its request that has run
 *    longest, once that is L8_SCHED_QUANTUM steps and the last such turn
 *    as long ago: turns, so that with more owners than slots none waits
 *    for a whole reply, at one recomputation a quantum.
 * One a step, so there is no burst of recomputation; preempting at once
 * for a difference of one would swap two owners back and forth. */
static void preempt_for_fair_share(struct l8_sched *s)
{
    if (s->lists[LIST_RUNNING].n < s->o.max_seqs)
        return;
    const struct req *w = next_admission(s);
    if (!w)
        return;
    struct req *victim = NULL, *turn = NULL;
    const uint32_t mine = running_of(s, w->owner);
    uint32_t most = mine + 1;
    /* From the tail: the lowest priority and the youngest first. */
    for (struct req *r = s->lists[LIST_RUNNING].tail; r && r->priority <= w->priority;
         r = r->prev) {
        if (held(s, r)) {
            victim = r;
            break;
        }
        const uint32_t n = running_of(s, r->owner);
        if (n > most) {
            victim = r;
            most = n;
        } else if (n == mine + 1 && s->steps - r->admitted >= L8_SCHED_QUANTUM &&
                   s->steps - s->last_turn >= L8_SCHED_QUANTUM &&
                   (!turn || r->admitted <= turn->admitted)) {
            turn = r;
        }
    }
    if (!victim && turn) {
        victim = turn;
        s->last_turn = s->steps;
    }
    if (victim) {
        preempt(s, victim);
        victim->yielded = true;
    }
}

/* Give r pages covering positions [0, npos). When the pool is empty,
 * preempt a held running request, else the youngest, possibly r itself
 * (then false).
 * Only called while walking the running list oldest first, so a victim
 * (younger than r) is never already in the step. */
static bool grow_pages(struct l8_sched *s, struct req *r, uint32_t npos)
{
    uint32_t ps = s->o.page_size;
    while ((uint64_t)r->n_pages * ps < npos) {
        uint32_t pg;
        if (l8_kvpool_alloc(s->pool, &pg) == 0) {
            r->pages[r->n_pages++] = pg;
            continue;
        }
        /* A held request's pages do nothing (none is in the step). */
        struct req *victim = s->lists[LIST_RUNNING].tail;
        for (struct req *v = victim; v; v = v->prev)
            if (v != r && held(s, v)) {
                victim = v;
                break;
            }
        preempt(s, victim);
        if (victim == r)
            return false;
    }
    return true;
}

/* ---- submit / cancel ----------------------------------------------------- */

static bool finite_in(float x, float lo, float hi) { return isfinite(x) && x >= lo && x <= hi; }

int l8_sched_new(const struct l8_sched_opts *o, struct l8_sched **out)
{
    if (!o || !o->n_pages || !o->page_size || !o->max_step_tokens || !o->max_seqs ||
        !o->max_ctx || !o->vocab || o->max_step_tokens < o->max_seqs || !o->on_event ||
        o->max_seqs > L8_SCHED_MAX_SEQS || o->draft_max > L8_SCHED_DRAFT_MAX)
        return -EINVAL;
    struct l8_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *o;
    if (!s->o.max_requests)
        s->o.max_requests = L8_SCHED_DEFAULT_MAX_REQUESTS;
    if (!s->o.max_requests_per_uid || s->o.max_requests_per_uid > s->o.max_requests)
        s->o.max_requests_per_uid = s->o.max_requests;
    int rc = l8_kvpool_new(o->n_pages, o->page_size, &s->pool);
    if (rc < 0)
        goto err;
    rc = -ENOMEM;
    s->seqs = calloc(o->max_seqs, sizeof(*s->seqs));
    s->slots = calloc(o->max_seqs, sizeof(*s->slots));
    s->step_req = calloc(o->max_seqs, sizeof(*s->step_req));
    s->n_owner_slots = 16;
    while (s->n_owner_slots < 4 * o->max_seqs)
        s->n_owner_slots <<= 1;
    s->owners = calloc(s->n_owner_slots, sizeof(*s->owners));
    s->n_buckets = 16;
    while (s->n_buckets < 2 * (uint64_t)s->o.max_requests && s->n_buckets < (1u << 24))
        s->n_buckets <<= 1;
    s->by_id = calloc(s->n_buckets, sizeof(*s->by_id));
    if (!s->seqs || !s->slots || !s->step_req || !s->by_id || !s->owners)
        goto err;
    /* Drafts from the scope's recent requests share what the prefix cache
     * shares: none where it is off. */
    if (o->draft_max && !o->no_prefix_cache &&
        (rc = l8_history_new(L8_SCHED_HISTORY_SCOPES, L8_SCHED_HISTORY_CAP, &s->history)) < 0)
        goto err;
    *out = s;
    return 0;
err:
    l8_sched_free(s);
    return rc;
}

void l8_sched_free(struct l8_sched *s)
{
    if (!s)
        return;
    l8_history_free(s->history);
    s->history = NULL;          /* nobody drafts from what is freed now */
    for (int w = 0; w < LIST_COUNT; w++)
        while (s->lists[w].head)
            req_free(s, s->lists[w].head);
    l8_kvpool_free(s->pool);
    free(s->by_id);
    free(s->seqs);
    free(s->slots);
    free(s->step_req);
    free(s->owners);
    free(s->uids);
    free(s);
}

const char *l8_sched_strerror(int err)
{
    switch (err) {
    case 0: return "ok";
    case L8_SCHED_E_EMPTY_PROMPT: return "empty prompt";
    case L8_SCHED_E_TOKEN_RANGE: return "prompt token id out of vocabulary";
    case L8_SCHED_E_STOP_RANGE: return "stop id out of vocabulary";
    case L8_SCHED_E_TOO_LONG: return "prompt + max_new_tokens exceeds the context length";
    case L8_SCHED_E_MAX_NEW_ZERO: return "max_new_tokens is 0";
    case L8_SCHED_E_POOL_TOO_SMALL: return "request needs more KV pages than the pool has";
    case L8_SCHED_E_TOO_MANY_STOPS: return "too many stop token ids";
    case L8_SCHED_E_TEMPERATURE: return "temperature is not in [0, 100]";
    case L8_SCHED_E_TOP_P: return "top_p is not in (0, 1]";
    case L8_SCHED_E_MIN_P: return "min_p is not in [0, 1]";
    case L8_SCHED_E_PENALTY: return "repetition_penalty is not in (0, 100]";
    case L8_SCHED_E_DUPLICATE_ID: return "request id already in use";
    case L8_SCHED_E_QUEUE_FULL: return "too many requests queued";
    case L8_SCHED_E_UID_QUEUE_FULL: return "this user's share of the request queue is taken";
    default: return err < 0 && err > -4096 ? strerror(-err) : "unknown error";
    }
}

/* Refuse with err, saying value and limit (or the float value) in *why. */
static int refuse(struct l8_sched_refusal *why, int err, uint32_t value, uint32_t limit,
                  float fvalue)
{
    if (why)
        *why = (struct l8_sched_refusal){ .value = value, .limit = limit, .fvalue = fvalue };
    return err;
}

int l8_sched_submit(struct l8_sched *s, const struct l8_sched_req *q,
                    struct l8_sched_refusal *why)
{
    const struct l8_sampling *sp = &q->sampling;
    if (q->n_prompt == 0 || !q->prompt)
        return refuse(why, L8_SCHED_E_EMPTY_PROMPT, 0, 0, NAN);
    if (q->max_new_tokens == 0)
        return refuse(why, L8_SCHED_E_MAX_NEW_ZERO, 0, 0, NAN);
    if (q->n_stop > L8_SCHED_MAX_STOP || (q->n_stop && !q->stop_ids))
        return refuse(why, L8_SCHED_E_TOO_MANY_STOPS, q->n_stop, L8_SCHED_MAX_STOP, NAN);
    for (uint32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] >= s->o.vocab)
            return refuse(why, L8_SCHED_E_TOKEN_RANGE, q->prompt[i], s->o.vocab, NAN);
    for (uint32_t i = 0; i < q->n_stop; i++)
        if (q->stop_ids[i] >= s->o.vocab)
            return refuse(why, L8_SCHED_E_STOP_RANGE, q->stop_ids[i], s->o.vocab, NAN);
    if (!finite_in(sp->temperature, 0, L8_TEMPERATURE_MAX))
        return refuse(why, L8_SCHED_E_TEMPERATURE, 0, 0, sp->temperature);
    if (!finite_in(sp->top_p, 0, 1) || !(sp->top_p > 0))
        return refuse(why, L8_SCHED_E_TOP_P, 0, 0, sp->top_p);
    if (!finite_in(sp->min_p, 0, 1))
        return refuse(why, L8_SCHED_E_MIN_P, 0, 0, sp->min_p);
    if (!finite_in(sp->repetition_penalty, 0, L8_PENALTY_MAX) || !(sp->repetition_penalty > 0))
        return refuse(why, L8_SCHED_E_PENALTY, 0, 0, sp->repetition_penalty);
    uint64_t total = (uint64_t)q->n_prompt + q->max_new_tokens;
    if (total > s->o.max_ctx)
        return refuse(why, L8_SCHED_E_TOO_LONG, (uint32_t)(total > UINT32_MAX ? UINT32_MAX : total),
                      s->o.max_ctx, NAN);
    /* The last sampled token is never fed, so the KV holds total - 1. */
    uint32_t pages = div_up(total - 1, s->o.page_size);
    if (pages > s->o.n_pages)
        return refuse(why, L8_SCHED_E_POOL_TOO_SMALL, pages, s->o.n_pages, NAN);
    if (q->constraint && !s->o.free_constraint)
        return -EINVAL;
    if (find_req(s, q->owner, q->id))
        return refuse(why, L8_SCHED_E_DUPLICATE_ID, 0, 0, NAN);
    uint32_t live = s->lists[LIST_WAITING].n + s->lists[LIST_RUNNING].n;
    if (live >= s->o.max_requests)
        return refuse(why, L8_SCHED_E_QUEUE_FULL, live, s->o.max_requests, NAN);
    /* The uid's share (scheduler.h): half of what the others left, rounded
     * up so the last place can be taken. */
    const struct uid_share *u = uid_find(s, q->uid);
    const uint32_t mine = u ? u->live : 0;
    const uint32_t share = (s->o.max_requests - (live - mine) + 1) / 2;
    const uint32_t cap = share < s->o.max_requests_per_uid ? share : s->o.max_requests_per_uid;
    if (mine >= cap)
        return refuse(why, L8_SCHED_E_UID_QUEUE_FULL, mine, cap, NAN);

    struct req *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->cap_tokens = (uint32_t)total;
    r->cap_pages = div_up(total, s->o.page_size);
    r->tokens = malloc(r->cap_tokens * sizeof(uint32_t));
    r->pages = malloc(r->cap_pages * sizeof(uint32_t));
    const bool spec = q->speculate && s->o.draft_max && q->max_new_tokens > 1;
    if (q->constraint)      /* a mask for each position a step samples at */
        r->mask = calloc((size_t)(s->o.vocab + 31) / 32 * (spec ? s->o.draft_max + 1 : 1),
                         sizeof(uint32_t));
    if (spec) {
        r->vout = malloc((s->o.draft_max + 1) * sizeof *r->vout);
        l8_draft_len_init(&r->dl, s->o.draft_max);
    }
    if (!r->tokens || !r->pages || (q->constraint && !r->mask) || (spec && !r->vout) ||
        uid_room(s) < 0) {
        free(r->tokens);
        free(r->pages);
        free(r->mask);
        free(r->vout);
        free(r);
        return -ENOMEM;
    }
    r->constraint = q->constraint;
    memcpy(r->tokens, q->prompt, q->n_prompt * sizeof(uint32_t));
    r->n_tokens = r->n_prompt = q->n_prompt;
    r->owner = q->owner;
    r->id = q->id;
    r->user = q->user;
    r->arrival = s->next_arrival++;
    r->priority = q->priority;
    r->cache_scope = q->cache_scope;
    r->uid = q->uid;
    r->max_new = q->max_new_tokens;
    r->n_stop = q->n_stop;
    if (q->n_stop)
        memcpy(r->stops, q->stop_ids, q->n_stop * sizeof(uint32_t));
    r->sampling = *sp;
    r->logprobs = q->logprobs;
    uid_add_live(s, r->uid);
    list_insert_sorted(s, LIST_WAITING, r);
    id_insert(s, r);
    return 0;
}

static void cancel_one(struct l8_sched *s, struct req *r)
{
    if (r->in_flight) {
        /* The engine is reading its tokens and writing its pages: keep
         * both until step_done. */
        r->cancelled = true;
        unlive(s, r);
        list_remove(s, r);
        r->list = LIST_DOOMED;
        struct list *l = &s->lists[LIST_DOOMED];
        r->prev = l->tail;
        r->next = NULL;
        if (l->tail) l->tail->next = r; else l->head = r;
        l->tail = r;
        l->n++;
    } else {
        req_free(s, r);
    }
}

int l8_sched_cancel(struct l8_sched *s, uint64_t owner, uint64_t id)
{
    struct req *r = find_req(s, owner, id);
    if (!r)
        return -ENOENT;
    cancel_one(s, r);
    return 0;
}

uint32_t l8_sched_cancel_owner(struct l8_sched *s, uint64_t owner)
{
    uint32_t n = 0;
    for (int w = LIST_WAITING; w <= LIST_RUNNING; w++) {
        struct req *r = s->lists[w].head;
        while (r) {
            struct req *next = r->next;
            if (r->owner == owner) {
                cancel_one(s, r);
                n++;
            }
            r = next;
        }
    }
    return n;
}

/* ---- steps ----------------------------------------------------------------- */

/* r's next take tokens (the last k of them drafts, after r's known ones)
 * as the step's next sequence. */
static void add_seq(struct l8_sched *s, struct req *r, uint32_t take, uint32_t k,
                    uint32_t *budget)
{
    uint32_t i = s->n_step++;
    struct l8_seq *q = &s->seqs[i];
    memset(q, 0, sizeof(*q));
    q->tokens = r->tokens + r->n_computed;
    q->n_tokens = take + k;
    q->n_draft = k;
    q->verify_out = k ? r->vout : NULL;
    r->n_draft = k;
    q->pos = r->n_computed;
    q->pages = r->pages;
    q->n_pages = r->n_pages;
    q->logits = L8_LOGITS_NONE;
    q->sample = r->n_computed + take == r->n_tokens;
    q->sampling = &r->sampling;
    /* Repetition penalty sees the prompt and everything generated: all
     * tokens up to the last one fed (as llama8-run passes them); with
     * drafts, the engine cuts each position's history at it. */
    q->history = r->tokens;
    q->n_history = r->n_computed + take + k;
    q->sample_index = r->n_generated;
    struct l8_sched_slot *sl = &s->slots[i];
    sl->owner = r->owner;
    sl->id = r->id;
    sl->user = r->user;
    sl->first = !r->started;
    /* A decode feeds only the latest sampled token; anything else is
     * prompt (or recompute after preemption). */
    sl->prefill = r->n_computed + 1 < r->n_tokens || r->n_generated == 0;
    sl->cached_tokens = sl->first ? r->n_computed : 0;
    sl->constraint = q->sample ? r->constraint : NULL;
    sl->constraint_end = sl->constraint_done = false;
    sl->constraint_at = 0;
    if (sl->constraint)
        q->allowed = r->mask;
    s->step_req[i] = r;
    r->started = true;
    r->in_flight = true;
    r->fed = take + k;
    *budget -= take + k;
}

/* Speculative decoding: up to `room` drafts for r's decode row, written
 * after its known tokens, from the longest repeat of its latest tokens
 * among its earlier ones (ngram.h) or its scope's recent requests
 * (history.h); as many as r's recent acceptance
 * says (l8_draft_len), never more than it may still generate less one
 * (the sample after the last draft), and only into pages the pool can
 * spare without taking the headroom of the running requests. */
static uint32_t draft(struct l8_sched *s, struct req *r, uint32_t room)
{
    uint32_t k = r->vout ? r->dl.k : 0, left = r->max_new - r->n_generated - 1;
    k = k < left ? k : left;
    k = k < room ? k : room;
    if (!k)
        return 0;
    if (!r->ng && l8_ngram_new(r->cap_tokens < L8_SCHED_NGRAM_CAP ? r->cap_tokens
                                                                  : L8_SCHED_NGRAM_CAP,
                               &r->ng) < 0)
        return 0;               /* no memory: no drafts this step */
    const uint32_t have = l8_ngram_len(r->ng);
    if (l8_ngram_push(r->ng, r->tokens + have, r->n_tokens - have) < 0) {
        free(r->vout);          /* past the index's bound: the request drafts no more */
        r->vout = NULL;
        return 0;
    }
    /* Its own tokens first; the scope's recent requests where they match
     * a longer suffix. */
    uint32_t n_match, n_hist, d[L8_SCHED_DRAFT_MAX];
    const struct l8_ngram *hg = s->history ? l8_history_index(s->history, r->cache_scope)
                                           : NULL;
    const uint32_t k_own = l8_ngram_propose(r->ng, r->tokens, r->n_tokens, 1, k,
                                            r->tokens + r->n_tokens, &n_match);
    const uint32_t k_hist = hg && n_match < L8_NGRAM_MAX_N
                            ? l8_ngram_propose(hg, r->tokens, r->n_tokens, n_match + 1, k, d,
                                               &n_hist)
                            : 0;
    if (k_hist)
        memcpy(r->tokens + r->n_tokens, d, sizeof(uint32_t) * k_hist);
    k = k_hist ? k_hist : k_own;
    const uint32_t ps = s->o.page_size, spare_from = s->lists[LIST_RUNNING].n;
    while (k && (uint64_t)r->n_pages * ps < r->n_computed + 1 + k) {
        uint32_t pg;
        if (l8_kvpool_available(s->pool) <= spare_from || l8_kvpool_alloc(s->pool, &pg) < 0) {
            k = (uint32_t)((uint64_t)r->n_pages * ps - r->n_computed - 1);
            break;
        }
        r->pages[r->n_pages++] = pg;
    }
    return k;
}

/* Whether the pool can give r's need pages plus a page of headroom per
 * running request; if not, pages are freed by preempting requests of the
 * uid holding the most, when that is more than r's would with them
 * (scheduler.h): held ones first, then the youngest, of no higher priority
 * and not in the step being built. */
static bool pages_for(struct l8_sched *s, const struct req *r, uint32_t need)
{
    if ((uint64_t)need + s->lists[LIST_RUNNING].n <= l8_kvpool_available(s->pool))
        return true;
    count_uid_pages(s);
    const struct uid_share *me = uid_find(s, r->uid);
    const uint64_t mine = (uint64_t)(me ? me->pages : 0) + need;
    while ((uint64_t)need + s->lists[LIST_RUNNING].n > l8_kvpool_available(s->pool)) {
        struct uid_share *top = NULL;
        for (uint32_t i = 0; i < s->n_uids; i++)
            if (s->uids[i].uid != r->uid && (!top || s->uids[i].pages > top->pages))
                top = &s->uids[i];
        if (!top || top->pages <= mine)
            return false;
        struct req *victim = NULL;
        for (struct req *v = s->lists[LIST_RUNNING].tail; v; v = v->prev) {
            if (v->uid != top->uid || v->in_flight || v->priority > r->priority || !v->n_pages)
                continue;
            if (held(s, v)) {
                victim = v;
                break;
            }
            if (!victim)
                victim = v;
        }
        if (!victim)
            return false;
        top->pages -= victim->n_pages;
        preempt(s, victim);
    }
    return true;
}

/* Admit r: take its cached prefix, then pages for the rest of its known
 * tokens. false (and nothing held) if the pool cannot give them while
 * keeping a page of headroom per running request, which would otherwise
 * be preempted right back out at their next page boundary. */
static bool admit(struct l8_sched *s, struct req *r)
{
    uint32_t ps = s->o.page_size;
    uint32_t parent = L8_KVPOOL_ROOT;
    /* At least one token is computed: the sample needs its logits. */
    uint32_t max_cached = s->o.no_prefix_cache ? 0 : (r->n_tokens - 1) / ps;
    while (r->n_pages < max_cached) {
        uint32_t pg;
        if (l8_kvpool_lookup(s->pool, r->cache_scope, parent,
                             r->tokens + (size_t)r->n_pages * ps, &pg) < 0)
            break;
        r->pages[r->n_pages++] = pg;
        parent = pg;
    }
    uint32_t k = r->n_pages;
    uint32_t need = div_up(r->n_tokens, ps) - k;
    if (!pages_for(s, r, need)) {
        s->blocked = r;
        s->blocked_need = need + s->lists[LIST_RUNNING].n;
        s->blocked_have = l8_kvpool_available(s->pool);
        release_pages(s, r);
        return false;
    }
    for (uint32_t i = 0; i < need; i++) {
        uint32_t pg;
        if (l8_kvpool_alloc(s->pool, &pg) < 0) { /* cannot happen: counted */
            release_pages(s, r);
            return false;
        }
        r->pages[r->n_pages++] = pg;
    }
    r->n_computed = k * ps;
    r->n_linked = k;
    s->cached_tokens += (uint64_t)k * ps;
    return true;
}

int l8_sched_build_step(struct l8_sched *s, struct l8_seq **seqs, uint32_t *n)
{
    if (s->in_flight)
        return -EBUSY;
    uint32_t budget = s->o.max_step_tokens;
    s->n_step = 0;
    s->blocked = NULL;
    count_owners(s);
    preempt_for_fair_share(s);

    /* 1. Decodes, oldest first: they never wait behind prefill, so the
     * per-token latency of running streams stays one step. Their drafts
     * share what is left of the rows under which the engine's logits stay
     * those of single steps (verify_rows) and a quarter of the budget, so
     * prefill goes on beside them. */
    uint32_t rows = 0;
    for (struct req *r = s->lists[LIST_RUNNING].head; r; r = r->next)
        rows += r->n_tokens - r->n_computed == 1 && !held(s, r);
    uint32_t spec_room = 0;
    if (s->o.draft_max) {
        const uint32_t cap = s->o.verify_rows < s->o.max_step_tokens / 4
                             ? s->o.verify_rows : s->o.max_step_tokens / 4;
        spec_room = cap > rows ? cap - rows : 0;
    }
    for (struct req *r = s->lists[LIST_RUNNING].head, *next; r; r = next) {
        next = r->next;
        if (r->n_tokens - r->n_computed != 1 || held(s, r))
            continue;
        if (!grow_pages(s, r, r->n_computed + 1))
            break;              /* r was the youngest: nothing follows */
        uint32_t k = draft(s, r, spec_room);
        spec_room -= k;
        add_seq(s, r, 1, k, &budget);
        /* grow_pages may have preempted the old `next` */
        next = r->next;
    }
    /* 2. Prefill chunks of running requests. Their pages were all taken at
     * admission, so nothing is allocated here and nobody already in the
     * step can be preempted. */
    for (struct req *r = s->lists[LIST_RUNNING].head; r && budget > 0; r = r->next) {
        uint32_t left = r->n_tokens - r->n_computed;
        if (left <= 1 || r->in_flight || held(s, r))
            continue;
        add_seq(s, r, left < budget ? left : budget, 0, &budget);
    }
    /* 3. Admit while budget, slots and pages last, in next_admission()'s
     * order. The one it picks is never skipped for a later one that would
     * fit, so a large request is not starved by small ones. */
    for (struct req *r; budget > 0 && s->lists[LIST_RUNNING].n < s->o.max_seqs &&
                        (r = next_admission(s));) {
        if (!admit(s, r))
            break;
        list_remove(s, r);
        list_insert_sorted(s, LIST_RUNNING, r);
        r->admitted = s->steps;
        r->yielded = false;
        (*owner_slot(s, r->owner, true))++;
        uint32_t left = r->n_tokens - r->n_computed;
        add_seq(s, r, left < budget ? left : budget, 0, &budget);
    }

    /* (a prompt's last token can come alone, as a decode row with drafts) */
    for (uint32_t i = 0; i < s->n_step; i++)
        if (s->slots[i].prefill)
            s->prompt_tokens += s->seqs[i].n_tokens - s->seqs[i].n_draft;
    s->in_flight = s->n_step > 0;
    if (s->in_flight)
        s->steps++;
    *seqs = s->seqs;
    *n = s->n_step;
    return 0;
}

struct l8_sched_slot *l8_sched_step_slots(struct l8_sched *s)
{
    return s->slots;
}

static void emit(struct l8_sched *s, struct req *r, enum l8_sched_ev_kind kind,
                 uint32_t token, uint32_t index, float logprob,
                 enum l8_sched_done_reason reason, int error)
{
    struct l8_sched_event ev = {
        .kind = kind, .owner = r->owner, .id = r->id, .user = r->user,
        .token = token, .index = index, .reason = reason, .error = error,
        .drafted = r->drafted, .accepted = r->accepted, .t_ns = s->done_t_ns,
    };
    if (kind == L8_SCHED_EV_TOKEN && r->logprobs) {
        ev.logprob = logprob;
        ev.has_logprob = true;
    }
    s->o.on_event(s->o.ctx, &ev);
}

/* Register the newly written full pages in the prefix cache. */
static void link_pages(struct l8_sched *s, struct req *r)
{
    uint32_t ps = s->o.page_size;
    uint32_t full = r->n_computed / ps;
    while (!s->o.no_prefix_cache && !r->chain_broken && r->n_linked < full) {
        uint32_t i = r->n_linked;
        uint32_t parent = i ? r->pages[i - 1] : L8_KVPOOL_ROOT;
        if (l8_kvpool_register(s->pool, r->pages[i], r->cache_scope, parent,
                               r->tokens + (size_t)i * ps) < 0) {
            r->chain_broken = true;
            break;
        }
        r->n_linked++;
    }
}

static bool is_stop(const struct req *r, uint32_t tok)
{
    for (uint32_t i = 0; i < r->n_stop; i++)
        if (r->stops[i] == tok)
            return true;
    return false;
}

/* One sampled token for r, appended and sent; true when it ends r (a stop
 * id, or max_new_tokens reached), whose DONE is then sent too. */
static bool deliver(struct l8_sched *s, struct req *r, uint32_t tok, float logprob)
{
    r->tokens[r->n_tokens++] = tok;
    uint32_t index = r->n_generated++;
    s->tokens_generated++;
    emit(s, r, L8_SCHED_EV_TOKEN, tok, index, logprob, L8_SCHED_DONE_NONE, 0);
    enum l8_sched_done_reason why = L8_SCHED_DONE_NONE;
    if (is_stop(r, tok))
        why = L8_SCHED_DONE_STOP;
    else if (r->n_generated >= r->max_new)
        why = L8_SCHED_DONE_LENGTH;
    if (why == L8_SCHED_DONE_NONE || r->cancelled)
        return false;
    emit(s, r, L8_SCHED_EV_DONE, tok, r->n_generated, 0, why, 0);
    return true;
}

/* r's sequence of the step done: its K/V written, and when it sampled,
 * the samples delivered. With drafts each position's sample is the token
 * plain decoding would have drawn there, so the drafts are accepted up to
 * the first that differs from the sample before it, and that sample
 * follows them; the K/V of the rejected positions lies past n_computed, to
 * be overwritten, and the pages only they used go back. A constraint that
 * ended at a position (the slot's constraint_at) ends the request there:
 * its sample is not delivered, unless it is the language's end and one of
 * the request's stop ids. Returns whether r is finished. */
static bool took(struct l8_sched *s, struct req *r, const struct l8_seq *q,
                 const struct l8_sched_slot *sl)
{
    const uint32_t k = q->n_draft;
    uint32_t drafts[L8_SCHED_DRAFT_MAX];
    memcpy(drafts, r->tokens + r->n_tokens, k * sizeof *drafts);   /* deliver overwrites */
    r->n_computed += r->fed - k;        /* the known tokens; then each accepted draft */
    uint32_t a = 0;
    bool finished = false;
    for (uint32_t j = 0; q->sample && !finished && !r->cancelled; j++) {
        const uint32_t tok = k ? r->vout[j].token : q->token_out;
        const float lp = k ? r->vout[j].logprob : q->logprob_out;
        if (sl->constraint && j == sl->constraint_at &&
            (sl->constraint_end || (sl->constraint_done && !is_stop(r, tok)))) {
            emit(s, r, L8_SCHED_EV_DONE, L8_SCHED_NO_TOKEN, r->n_generated, 0,
                 L8_SCHED_DONE_GRAMMAR, 0);
            finished = true;
            break;
        }
        finished = deliver(s, r, tok, lp);
        if (j == k || tok != drafts[j])
            break;
        a++;
        r->n_computed++;                /* drafts[j] is the token delivered: its K/V holds */
    }
    if (r->vout && q->sample && !sl->prefill)
        l8_draft_len_update(&r->dl, k, a);
    r->drafted += k;
    r->accepted += a;
    s->drafted += k;
    s->accepted += a;
    link_pages(s, r);
    if (k) {
        const uint32_t keep = div_up((uint64_t)r->n_computed + 1, s->o.page_size);
        while (r->n_pages > keep)
            l8_kvpool_unref(s->pool, r->pages[--r->n_pages]);
    }
    return finished;
}

int l8_sched_step_done(struct l8_sched *s, struct l8_seq *seqs, uint32_t n, int status,
                       uint64_t t_ns)
{
    if (!s->in_flight || seqs != s->seqs || n != s->n_step)
        return -EINVAL;
    s->done_t_ns = t_ns;
    /* Each request stays in_flight until we are done touching it, so an
     * on_event callback that cancels it (or its whole owner) only marks it,
     * and it is freed here afterwards. */
    for (uint32_t i = 0; i < n; i++) {
        struct req *r = s->step_req[i];
        const struct l8_seq *q = &seqs[i];
        bool finished = false;
        if (r->cancelled) {
            /* nothing */
        } else if (status < 0) {
            emit(s, r, L8_SCHED_EV_ERROR, L8_SCHED_NO_TOKEN, r->n_generated, 0,
                 L8_SCHED_DONE_NONE, status);
            finished = true;
        } else {
            finished = took(s, r, q, &s->slots[i]);
        }
        r->in_flight = false;
        r->fed = 0;
        if (finished || r->cancelled)
            req_free(s, r);
    }
    s->in_flight = false;
    s->n_step = 0;
    return 0;
}

/* ---- stats ---------------------------------------------------------------- */

void l8_sched_get_stats(const struct l8_sched *s, struct l8_sched_stats *out)
{
    struct l8_kvpool_stats ps;
    l8_kvpool_get_stats(s->pool, &ps);
    memset(out, 0, sizeof(*out));
    out->running = s->lists[LIST_RUNNING].n;
    out->waiting = s->lists[LIST_WAITING].n;
    out->preemptions = s->preemptions;
    out->pages_total = ps.total;
    out->pages_free = ps.free;
    out->pages_used = ps.used;
    out->pages_cached = ps.cached;
    out->tokens_generated = s->tokens_generated;
    out->prompt_tokens = s->prompt_tokens;
    out->cached_tokens = s->cached_tokens;
    out->steps = s->steps;
    out->drafted = s->drafted;
    out->accepted = s->accepted;
    out->step_in_flight = s->in_flight;
}

void l8_sched_owner_stats(const struct l8_sched *s, uint64_t owner,
                          struct l8_sched_owner_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int w = 0; w < LIST_COUNT; w++)
        for (const struct req *r = s->lists[w].head; r; r = r->next)
            if (r->owner == owner) {
                out->requests += w != LIST_DOOMED;
                out->running += w == LIST_RUNNING;
                out->pages += r->n_pages;
            }
}

void l8_sched_waiting(struct l8_sched *s,
                      void (*fn)(void *ctx, const struct l8_sched_wait *w), void *ctx)
{
    uint32_t ahead = 0;
    for (struct req *r = s->lists[LIST_WAITING].head; r; r = r->next) {
        if (held(s, r))
            continue;
        struct l8_sched_wait w = { .owner = r->owner, .id = r->id, .user = r->user,
                                   .why = L8_SCHED_WAIT_QUEUE, .ahead = ahead++ };
        if (r == s->blocked) {
            w.why = L8_SCHED_WAIT_PAGES;
            w.need = s->blocked_need;
            w.have = s->blocked_have;
        } else if (s->lists[LIST_RUNNING].n >= s->o.max_seqs) {
            w.why = L8_SCHED_WAIT_SLOTS;
        }
        fn(ctx, &w);
    }
}

bool l8_sched_idle(const struct l8_sched *s)
{
    return !s->in_flight && !s->lists[LIST_WAITING].n && !s->lists[LIST_RUNNING].n &&
           !s->lists[LIST_DOOMED].n;
}

const struct l8_kvpool *l8_sched_pool(const struct l8_sched *s)
{
    return s->pool;
}
