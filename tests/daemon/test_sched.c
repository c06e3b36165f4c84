/* test_sched: the scheduler's policy, step by step, with exact values.
 *
 * The steps run on a "checking executor" defined here, not on a model: it
 * keeps a shadow KV pool holding the token id written at each position,
 * verifies on every step that the pages of [0, pos) hold exactly the
 * request's tokens (so a wrong page table, a shared page written twice or
 * a bad prefix match is caught), writes the new positions, and samples a
 * token that is a hash of what the KV holds plus the seed and
 * sample_index. Every stream is then compared with the same function run
 * on the request alone, so any scheduling mistake (lost token, wrong
 * position, broken recompute, sample_index jump) changes the stream. The
 * real CPU engine is driven through the scheduler in test_sched_engine. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "kvpool.h"
#include "scheduler.h"

#define VOCAB 1000
#define MAX_REQ 64
#define MAX_TOK 512

/* ---- the checking executor ----------------------------------------------- */

struct exec {
    uint32_t n_pages, page_size;
    uint32_t *kv;                /* [n_pages * page_size] token id or EMPTY */
};
#define EMPTY UINT32_MAX

/* The "model": a hash of every token so far, the seed and the index; or,
 * with exec_window, of the last exec_window tokens and the seed only, into
 * a small alphabet: a model that repeats itself, for speculative decoding
 * to find drafts in. */
static uint32_t exec_window;

static uint32_t next_token(const uint32_t *toks, uint32_t n, uint64_t seed, uint64_t index)
{
    if (exec_window) {
        uint64_t h = 1469598103934665603ULL ^ seed;
        for (uint32_t i = n > exec_window ? n - exec_window : 0; i < n; i++) {
            h ^= toks[i];
            h *= 1099511628211ULL;
        }
        h ^= h >> 29;
        return (uint32_t)(h % 23);
    }
    uint64_t h = 1469598103934665603ULL ^ seed ^ (index * 0x9e3779b97f4a7c15ULL);
    for (uint32_t i = 0; i < n; i++) {
        h ^= toks[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 29;
    return (uint32_t)(h % VOCAB);
}

static int exec_step(struct exec *x, const struct l8_sched *s, struct l8_seq *seqs, uint32_t n)
{
    const struct l8_kvpool *pool = l8_sched_pool(s);
    uint32_t ps = x->page_size;
    for (uint32_t i = 0; i < n; i++) {
        struct l8_seq *q = &seqs[i];
        if (q->n_tokens == 0 || (uint64_t)q->n_pages * ps < (uint64_t)q->pos + q->n_tokens) {
            fprintf(stderr, "exec: seq %u: page table too short\n", i);
            return -EINVAL;
        }
        if (q->n_history != q->pos + q->n_tokens ||
            memcmp(q->history + q->pos, q->tokens, q->n_tokens * sizeof(uint32_t))) {
            fprintf(stderr, "exec: seq %u: history does not end with the fed tokens\n", i);
            return -EINVAL;
        }
        for (uint32_t p = 0; p < q->pos; p++)
            if (x->kv[q->pages[p / ps] * ps + p % ps] != q->history[p]) {
                fprintf(stderr, "exec: seq %u: position %u of the KV holds %u, expected %u\n",
                        i, p, x->kv[q->pages[p / ps] * ps + p % ps], q->history[p]);
                return -EINVAL;
            }
        for (uint32_t p = q->pos; p < q->pos + q->n_tokens; p++) {
            uint32_t pg = q->pages[p / ps];
            if (l8_kvpool_refcount(pool, pg) != 1 || l8_kvpool_is_registered(pool, pg)) {
                fprintf(stderr, "exec: seq %u: writes position %u into shared/cached page %u\n",
                        i, p, pg);
                return -EINVAL;
            }
            x->kv[pg * ps + p % ps] = q->tokens[p - q->pos];
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        struct l8_seq *q = &seqs[i];
        if (!q->sample)
            continue;
        uint32_t end = q->pos + q->n_tokens, buf[MAX_TOK];
        for (uint32_t p = 0; p < end; p++)
            buf[p] = x->kv[q->pages[p / ps] * ps + p % ps];
        /* with drafts: a sample at each of the last n_draft + 1 positions,
         * each from the tokens up to it, as the single steps would */
        for (uint32_t j = 0; j <= q->n_draft; j++) {
            uint32_t upto = end - q->n_draft + j;
            uint32_t t = next_token(buf, upto, q->sampling->seed, q->sample_index + j);
            float lp = -(float)(t % 7) - 0.5f;
            if (q->n_draft)
                q->verify_out[j] = (struct l8_sample_out){ t, lp };
            else
                q->token_out = t, q->logprob_out = lp;
        }
    }
    return 0;
}

/* The same function, one request alone, no scheduler. */
static uint32_t solo(const uint32_t *prompt, uint32_t n_prompt, uint32_t max_new,
                     const uint32_t *stops, uint32_t n_stop, uint64_t seed, uint32_t *out)
{
    uint32_t buf[MAX_TOK], n = n_prompt, g = 0;
    memcpy(buf, prompt, n_prompt * sizeof(uint32_t));
    while (g < max_new) {
        uint32_t t = next_token(buf, n, seed, g);
        out[g++] = t;
        buf[n++] = t;
        for (uint32_t i = 0; i < n_stop; i++)
            if (stops[i] == t)
                return g;
    }
    return g;
}

/* ---- event recording --------------------------------------------------------- */

struct rec {
    uint64_t owner, id;
    uint32_t toks[MAX_TOK];
    float logprobs[MAX_TOK];
    uint32_t n;
    int n_done, n_error, reason, error;
    uint32_t done_index;
    bool bad_order;           /* an index out of sequence, or events after DONE */
};

struct world {
    struct l8_sched *s;
    struct exec x;
    struct rec recs[MAX_REQ];
    uint32_t n_recs;
    /* cancel this owner from inside the callback at this token index */
    bool cancel_in_cb;
    uint64_t cancel_owner;
    uint32_t cancel_at;
};

static struct rec *rec_for(struct world *w, uint64_t owner, uint64_t id)
{
    for (uint32_t i = 0; i < w->n_recs; i++)
        if (w->recs[i].owner == owner && w->recs[i].id == id)
            return &w->recs[i];
    struct rec *r = &w->recs[w->n_recs++];
    memset(r, 0, sizeof(*r));
    r->owner = owner;
    r->id = id;
    return r;
}

static void on_event(void *ctx, const struct l8_sched_event *ev)
{
    struct world *w = ctx;
    struct rec *r = rec_for(w, ev->owner, ev->id);
    if (r->n_done || r->n_error)
        r->bad_order = true;
    switch (ev->kind) {
    case L8_SCHED_EV_TOKEN:
        if (ev->index != r->n)
            r->bad_order = true;
        r->logprobs[r->n] = ev->has_logprob ? ev->logprob : 1.0f;
        r->toks[r->n++] = ev->token;
        if (w->cancel_in_cb && ev->owner == w->cancel_owner && ev->index == w->cancel_at)
            l8_sched_cancel_owner(w->s, ev->owner);
        break;
    case L8_SCHED_EV_DONE:
        r->n_done++;
        r->reason = ev->reason;
        r->done_index = ev->index;
        if (ev->index != r->n || (r->n && ev->token != r->toks[r->n - 1]))
            r->bad_order = true;
        break;
    case L8_SCHED_EV_ERROR:
        r->n_error++;
        r->error = ev->error;
        break;
    }
}

/* The scheduler's `held`: a request's user, when set, is its hold flag. */
static bool held(void *ctx, void *user)
{
    (void)ctx;
    return user && *(const bool *)user;
}

static bool no_prefix_cache;   /* the next world_init's opts.no_prefix_cache */
static uint32_t draft_max;     /* the next world_init's opts.draft_max */
static uint32_t verify_rows = UINT32_MAX;   /* and its opts.verify_rows */
static uint64_t drafted_under_constraint;

/* A stand-in for llama8d's constraint: the step after which it admits
 * nothing (end), or whose token is its end (done), and how often the
 * scheduler freed it. */
struct fake_constraint {
    uint32_t end_at, done_at;   /* a sample index; UINT32_MAX: never */
    int freed;
};
static void free_fake(void *ctx, void *c)
{
    (void)ctx;
    ((struct fake_constraint *)c)->freed++;
}

static int world_init(struct world *w, uint32_t n_pages, uint32_t ps, uint32_t budget,
                      uint32_t max_seqs, uint32_t max_ctx)
{
    memset(w, 0, sizeof(*w));
    struct l8_sched_opts o = {
        .n_pages = n_pages, .page_size = ps, .max_step_tokens = budget,
        .max_seqs = max_seqs, .max_ctx = max_ctx, .vocab = VOCAB,
        .on_event = on_event, .held = held, .free_constraint = free_fake, .ctx = w,
        .no_prefix_cache = no_prefix_cache,
        .draft_max = draft_max, .verify_rows = verify_rows,
    };
    w->x.n_pages = n_pages;
    w->x.page_size = ps;
    w->x.kv = malloc((size_t)n_pages * ps * sizeof(uint32_t));
    for (uint32_t i = 0; i < n_pages * ps; i++)
        w->x.kv[i] = EMPTY;
    return l8_sched_new(&o, &w->s);
}

static void world_fini(struct world *w)
{
    l8_sched_free(w->s);
    free(w->x.kv);
}

static void check_pool(struct world *w, int line)
{
    if (l8_kvpool_check(l8_sched_pool(w->s)) != 0) {
        fprintf(stderr, "line %d: pool inconsistent\n", line);
        t_failures++;
    }
}

/* One step: build, check the budget, execute, done. Returns n. */
static uint32_t step(struct world *w, int line)
{
    struct l8_seq *seqs;
    uint32_t n, total = 0;
    if (l8_sched_build_step(w->s, &seqs, &n) != 0) {
        fprintf(stderr, "line %d: build_step failed\n", line);
        t_failures++;
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        total += seqs[i].n_tokens;
    if (n == 0)
        return 0;
    int rc = exec_step(&w->x, w->s, seqs, n);
    if (rc < 0) {
        fprintf(stderr, "line %d: executor refused the step\n", line);
        t_failures++;
    }
    (void)total;
    CHECK_EQ(l8_sched_step_done(w->s, seqs, n, rc, 0), 0);
    check_pool(w, line);
    return n;
}

static uint32_t run_all(struct world *w, uint32_t budget, uint32_t max_seqs)
{
    uint32_t steps = 0;
    for (;;) {
        struct l8_seq *seqs;
        uint32_t n, total = 0;
        CHECK_EQ(l8_sched_build_step(w->s, &seqs, &n), 0);
        if (n == 0)
            break;
        CHECK(n <= max_seqs);
        for (uint32_t i = 0; i < n; i++)
            total += seqs[i].n_tokens;
        CHECK(total <= budget);
        int rc = exec_step(&w->x, w->s, seqs, n);
        CHECK_EQ(rc, 0);
        CHECK_EQ(l8_sched_step_done(w->s, seqs, n, rc, 0), 0);
        check_pool(w, __LINE__);
        if (++steps > 10000) {
            fprintf(stderr, "run_all: no progress\n");
            t_failures++;
            break;
        }
    }
    CHECK(l8_sched_idle(w->s));
    return steps;
}

static struct l8_sched_req req(uint64_t owner, uint64_t id, const uint32_t *prompt,
                               uint32_t n, uint32_t max_new)
{
    struct l8_sched_req r = {
        .owner = owner, .id = id, .prompt = prompt, .n_prompt = n,
        .sampling = { .temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0,
                      .repetition_penalty = 1, .seed = 0 },
        .max_new_tokens = max_new,
        .speculate = true,      /* drafts only where the world's draft_max is set */
    };
    return r;
}

static void fill(uint32_t *t, uint32_t n, uint32_t base)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = (base + i * 7) % VOCAB;
}

/* The recorded stream equals the solo run, ended by a single DONE. */
static void check_stream(struct world *w, uint64_t owner, uint64_t id, const uint32_t *prompt,
                         uint32_t n, uint32_t max_new, const uint32_t *stops, uint32_t n_stop,
                         uint64_t seed, int line)
{
    uint32_t want[MAX_TOK];
    uint32_t nw = solo(prompt, n, max_new, stops, n_stop, seed, want);
    struct rec *r = rec_for(w, owner, id);
    bool ok = r->n == nw && !memcmp(r->toks, want, nw * sizeof(uint32_t)) && r->n_done == 1 &&
              r->n_error == 0 && !r->bad_order &&
              r->reason == (nw < max_new ? L8_SCHED_DONE_STOP : L8_SCHED_DONE_LENGTH);
    if (!ok) {
        fprintf(stderr, "line %d: stream (%llu,%llu): got %u tokens done %d reason %d bad %d,"
                " want %u\n", line, (unsigned long long)owner, (unsigned long long)id, r->n,
                r->n_done, r->reason, r->bad_order, nw);
        t_failures++;
    }
}

/* ---- tests ------------------------------------------------------------------ */

static void test_validation(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 6, 16, 64, 4, 100), 0);   /* 96 positions */
    uint32_t p[120];
    fill(p, 120, 1);
    struct l8_sched_req r = req(1, 1, p, 10, 5);
    r.n_prompt = 0;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_EMPTY_PROMPT);
    r = req(1, 1, p, 10, 0);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_MAX_NEW_ZERO);
    r = req(1, 1, p, 10, 5);
    p[3] = VOCAB + 7;
    struct l8_sched_refusal why;
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_TOKEN_RANGE);
    CHECK(why.value == VOCAB + 7 && why.limit == VOCAB && isnan(why.fvalue));
    p[3] = VOCAB - 1;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    r = req(1, 2, p, 90, 11);           /* 101 > max_ctx 100 */
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_TOO_LONG);
    CHECK(why.value == 101 && why.limit == 100);
    r = req(1, 2, p, 90, 10);           /* exactly max_ctx, but 99 positions > 6 pages */
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_POOL_TOO_SMALL);
    CHECK(why.value == 7 && why.limit == 6);
    r = req(1, 2, p, 100, 29);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_TOO_LONG);
    r = req(1, 2, p, 90, 7);            /* 96 positions = 6 pages: fits */
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    r = req(1, 2, p, 4, 4);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_DUPLICATE_ID);
    r.owner = 2;                         /* same id, other owner: fine */
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    uint32_t stops[L8_SCHED_MAX_STOP + 1] = {0};
    r = req(1, 3, p, 4, 4);
    r.stop_ids = stops;
    r.n_stop = L8_SCHED_MAX_STOP + 1;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_TOO_MANY_STOPS);
    r.n_stop = 2;
    stops[1] = VOCAB;
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_STOP_RANGE);
    CHECK(why.value == VOCAB && why.limit == VOCAB);
    r.n_stop = 0;
    r.sampling.top_p = 0;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_TOP_P);
    r.sampling.top_p = 1.5f;
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_TOP_P);
    CHECK(why.fvalue == 1.5f);
    r.sampling.top_p = 1;
    r.sampling.temperature = __builtin_nanf("");
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_TEMPERATURE);
    CHECK(isnan(why.fvalue));
    r.sampling.temperature = -1;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_TEMPERATURE);
    r.sampling.temperature = 100.5f;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_TEMPERATURE);
    r.sampling.temperature = 100;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    CHECK_EQ(l8_sched_cancel(w.s, r.owner, r.id), 0);
    r.sampling.temperature = 0.7f;
    r.sampling.repetition_penalty = 101;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_PENALTY);
    r.sampling.repetition_penalty = 0;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), L8_SCHED_E_PENALTY);
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.min_p = -0.1f;
    CHECK_EQ(l8_sched_submit(w.s, &r, &why), L8_SCHED_E_MIN_P);
    CHECK(why.fvalue == -0.1f);
    r.sampling.min_p = 0.05f;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    CHECK_EQ(l8_sched_cancel(w.s, 1, 99), -ENOENT);
    CHECK_EQ(l8_sched_cancel(w.s, 3, 1), -ENOENT);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.waiting, 4);
    CHECK_EQ(st.running, 0);
    CHECK(strcmp(l8_sched_strerror(L8_SCHED_E_TOO_LONG),
                 "prompt + max_new_tokens exceeds the context length") == 0);
    world_fini(&w);

    /* the queue limit */
    struct l8_sched_opts o = { .n_pages = 8, .page_size = 16, .max_step_tokens = 64,
                               .max_seqs = 4, .max_ctx = 100, .vocab = VOCAB,
                               .max_requests = 2, .on_event = on_event, .ctx = &w };
    struct l8_sched *s;
    CHECK_EQ(l8_sched_new(&o, &s), 0);
    r = req(1, 1, p, 4, 4);
    CHECK_EQ(l8_sched_submit(s, &r, NULL), 0);
    r.id = 2;
    r.uid = 7;                           /* one uid alone would have half */
    CHECK_EQ(l8_sched_submit(s, &r, NULL), 0);
    r.id = 3;
    r.uid = 8;
    CHECK_EQ(l8_sched_submit(s, &r, &why), L8_SCHED_E_QUEUE_FULL);
    CHECK(why.value == 2 && why.limit == 2);
    l8_sched_free(s);
    o.max_step_tokens = 3;               /* < max_seqs */
    CHECK_EQ(l8_sched_new(&o, &s), -EINVAL);
    o.max_step_tokens = 64;
    o.on_event = NULL;
    CHECK_EQ(l8_sched_new(&o, &s), -EINVAL);
}

/* Two requests with the same 40-token prefix, page_size 16: the second
 * finds the first's 2 full pages in the prefix cache and starts at 32. */
static void test_prefix_sharing(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 64, 16, 64, 4, 256), 0);
    uint32_t a[40], b[45];
    fill(a, 40, 5);
    memcpy(b, a, sizeof(a));
    fill(b + 40, 5, 900);
    struct l8_sched_req ra = req(1, 1, a, 40, 8), rb = req(2, 1, b, 45, 8);
    CHECK_EQ(l8_sched_submit(w.s, &ra, NULL), 0);
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(seqs[0].pos, 0);
    CHECK_EQ(seqs[0].n_tokens, 40);
    CHECK_EQ(seqs[0].n_pages, 3);
    CHECK(seqs[0].sample);
    CHECK(l8_sched_step_slots(w.s)[0].first);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), -EBUSY);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    const uint32_t a_page0 = seqs[0].pages[0], a_page1 = seqs[0].pages[1];
    const struct l8_kvpool *pool = l8_sched_pool(w.s);
    CHECK(l8_kvpool_is_registered(pool, a_page0));
    CHECK(l8_kvpool_is_registered(pool, a_page1));

    CHECK_EQ(l8_sched_submit(w.s, &rb, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    const struct l8_sched_slot *sl = l8_sched_step_slots(w.s);
    /* a decodes first */
    CHECK_EQ(sl[0].owner, 1);
    CHECK_EQ(seqs[0].pos, 40);
    CHECK_EQ(seqs[0].n_tokens, 1);
    CHECK(!sl[0].prefill);
    /* b starts at 32 on a's pages */
    CHECK_EQ(sl[1].owner, 2);
    CHECK(sl[1].first);
    CHECK(sl[1].prefill);
    CHECK_EQ(sl[1].cached_tokens, 32);
    CHECK_EQ(seqs[1].pos, 32);
    CHECK_EQ(seqs[1].n_tokens, 13);
    CHECK_EQ(seqs[1].pages[0], a_page0);
    CHECK_EQ(seqs[1].pages[1], a_page1);
    CHECK_EQ(l8_kvpool_refcount(pool, a_page0), 2);
    CHECK_EQ(l8_kvpool_refcount(pool, a_page1), 2);
    struct l8_kvpool_stats ps;
    l8_kvpool_get_stats(pool, &ps);
    CHECK_EQ(ps.shared, 2);
    CHECK_EQ(ps.used, 3 + 1);   /* a: 3 pages; b: 2 shared + 1 own */
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    run_all(&w, 64, 4);
    check_stream(&w, 1, 1, a, 40, 8, NULL, 0, 0, __LINE__);
    check_stream(&w, 2, 1, b, 45, 8, NULL, 0, 0, __LINE__);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.cached_tokens, 32);
    CHECK_EQ(st.tokens_generated, 16);
    /* both finished: nothing used; the full pages stay cached: a wrote 47
     * positions (2 full pages + page 2 with 15), b 52 (3 full of its own
     * chain: pages 0,1 shared, page 2 = b[32..48)) */
    CHECK_EQ(st.pages_used, 0);
    CHECK_EQ(st.pages_cached, 3);
    CHECK_EQ(st.pages_free, 61);

    /* A third copy of b's prompt with a different tail: 3 pages cached,
     * capped so one token is still computed. */
    uint32_t c[48];
    memcpy(c, b, 45 * sizeof(uint32_t));
    uint32_t gen_b[8];
    solo(b, 45, 8, NULL, 0, 0, gen_b);
    memcpy(c + 45, gen_b, 3 * sizeof(uint32_t)); /* b's K/V holds its first 3 generated */
    struct l8_sched_req rc = req(3, 1, c, 48, 2);
    CHECK_EQ(l8_sched_submit(w.s, &rc, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(seqs[0].pos, 32);    /* 48 tokens: (48-1)/16 = 2 pages may come from cache */
    CHECK_EQ(seqs[0].n_tokens, 16);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    run_all(&w, 64, 4);
    check_stream(&w, 3, 1, c, 48, 2, NULL, 0, 0, __LINE__);
    world_fini(&w);
}

/* Submit one request and run its first step: its cached prompt tokens. */
static uint32_t first_step_cached(struct world *w, uint64_t owner, uint32_t scope,
                                  const uint32_t *prompt, uint32_t n)
{
    struct l8_sched_req r = req(owner, 1, prompt, n, 4);
    r.cache_scope = scope;
    CHECK_EQ(l8_sched_submit(w->s, &r, NULL), 0);
    struct l8_seq *seqs;
    uint32_t ns;
    CHECK_EQ(l8_sched_build_step(w->s, &seqs, &ns), 0);
    CHECK_EQ(ns, 1);
    uint32_t cached = l8_sched_step_slots(w->s)[0].cached_tokens;
    CHECK_EQ(seqs[0].pos, cached);
    CHECK_EQ(exec_step(&w->x, w->s, seqs, ns), 0);
    CHECK_EQ(l8_sched_step_done(w->s, seqs, ns, 0, 0), 0);
    run_all(w, 64, 4);
    check_stream(w, owner, 1, prompt, n, 4, NULL, 0, 0, __LINE__);
    return cached;
}

/* Cache scopes: a prompt is reused within its scope only; with the cache
 * off, never. */
static void test_prefix_scopes(void)
{
    struct world w;
    uint32_t a[40];
    fill(a, 40, 11);
    CHECK_EQ(world_init(&w, 64, 16, 64, 4, 256), 0);
    CHECK_EQ(first_step_cached(&w, 1, 1000, a, 40), 0);
    CHECK_EQ(first_step_cached(&w, 2, 1001, a, 40), 0);   /* another scope */
    CHECK_EQ(first_step_cached(&w, 3, 1000, a, 40), 32);  /* its own */
    CHECK_EQ(first_step_cached(&w, 4, 1001, a, 40), 32);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.cached_tokens, 64);
    CHECK_EQ(st.pages_cached, 4);   /* two chains of 2 full pages */
    world_fini(&w);

    no_prefix_cache = true;
    CHECK_EQ(world_init(&w, 64, 16, 64, 4, 256), 0);
    no_prefix_cache = false;
    CHECK_EQ(first_step_cached(&w, 1, 0, a, 40), 0);
    CHECK_EQ(first_step_cached(&w, 2, 0, a, 40), 0);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.cached_tokens, 0);
    CHECK_EQ(st.pages_cached, 0);
    CHECK_EQ(st.pages_free, 64);
    world_fini(&w);
}

/* Chunked prefill and the token budget. */
static void test_chunked_prefill(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 32, 4, 8, 4, 128), 0);
    uint32_t p[20], q[3];
    fill(p, 20, 11);
    fill(q, 3, 77);
    struct l8_sched_req r = req(1, 1, p, 20, 3);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    struct l8_seq *seqs;
    uint32_t n;
    /* request 1 alone: chunks of 8, 8 */
    for (uint32_t i = 0; i < 2; i++) {
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        CHECK_EQ(n, 1);
        CHECK_EQ(seqs[0].pos, 8 * i);
        CHECK_EQ(seqs[0].n_tokens, 8);
        CHECK(!seqs[0].sample);
        CHECK_EQ(l8_sched_step_slots(w.s)[0].first, i == 0);
        CHECK(l8_sched_step_slots(w.s)[0].prefill);
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    }
    /* request 2 arrives mid-prefill: it gets what the running prefill
     * leaves of the budget (8 - 4) and takes its whole 3-token prompt */
    struct l8_sched_req r2 = req(1, 2, q, 3, 2);
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(seqs[0].pos, 16);
    CHECK_EQ(seqs[0].n_tokens, 4);
    CHECK(seqs[0].sample);
    CHECK_EQ(seqs[1].pos, 0);
    CHECK_EQ(seqs[1].n_tokens, 3);
    CHECK(seqs[1].sample);
    CHECK(l8_sched_step_slots(w.s)[1].first);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    /* then two decodes */
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(seqs[0].pos, 20);
    CHECK_EQ(seqs[0].n_tokens, 1);
    CHECK_EQ(seqs[0].sample_index, 1);
    CHECK_EQ(seqs[1].pos, 3);
    CHECK_EQ(seqs[1].n_tokens, 1);
    CHECK(!l8_sched_step_slots(w.s)[1].prefill);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    run_all(&w, 8, 4);
    check_stream(&w, 1, 1, p, 20, 3, NULL, 0, 0, __LINE__);
    check_stream(&w, 1, 2, q, 3, 2, NULL, 0, 0, __LINE__);
    world_fini(&w);

    /* Many requests under a budget of 8 and 3 sequences: every step within
     * both, every stream right, FIFO admission. */
    CHECK_EQ(world_init(&w, 64, 4, 8, 3, 128), 0);
    uint32_t prompts[10][30];
    uint32_t lens[10];
    for (int i = 0; i < 10; i++) {
        lens[i] = 1 + (uint32_t)(i * 7) % 29;
        fill(prompts[i], lens[i], 100 + 31 * i);
        struct l8_sched_req ri = req(5, i, prompts[i], lens[i], 1 + i % 5);
        ri.sampling.seed = 1000 + i;
        ri.sampling.temperature = 0.8f;
        CHECK_EQ(l8_sched_submit(w.s, &ri, NULL), 0);
    }
    run_all(&w, 8, 3);
    for (int i = 0; i < 10; i++)
        check_stream(&w, 5, i, prompts[i], lens[i], 1 + i % 5, NULL, 0, 1000 + i, __LINE__);
    /* FIFO: request i's first token comes before request i+3's (3 slots) */
    world_fini(&w);
}

/* Stop ids end a stream; logprobs only where asked. */
static void test_stop_and_logprobs(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 32, 4, 16, 4, 128), 0);
    uint32_t p[6], want[10];
    fill(p, 6, 3);
    solo(p, 6, 10, NULL, 0, 0, want);
    uint32_t stop[1] = { want[3] };
    struct l8_sched_req r = req(1, 1, p, 6, 10);
    r.stop_ids = stop;
    r.n_stop = 1;
    r.logprobs = true;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    struct l8_sched_req r2 = req(1, 2, p, 6, 10);
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), 0);
    run_all(&w, 16, 4);
    check_stream(&w, 1, 1, p, 6, 10, stop, 1, 0, __LINE__);
    check_stream(&w, 1, 2, p, 6, 10, NULL, 0, 0, __LINE__);
    struct rec *a = rec_for(&w, 1, 1), *b = rec_for(&w, 1, 2);
    uint32_t first_stop = 0;
    while (want[first_stop] != stop[0])
        first_stop++;
    CHECK_EQ(a->n, first_stop + 1);
    CHECK_EQ(a->reason, L8_SCHED_DONE_STOP);
    CHECK_EQ(a->done_index, first_stop + 1);
    CHECK_EQ(b->reason, L8_SCHED_DONE_LENGTH);
    CHECK_EQ(b->done_index, 10);
    CHECK(a->logprobs[0] == -(float)(a->toks[0] % 7) - 0.5f);
    CHECK(b->logprobs[0] == 1.0f); /* has_logprob false */
    world_fini(&w);
}

/* Constraints: the sampling sequence of a constrained request points its
 * allowed at a mask and its slot at the constraint (the unconstrained ones
 * at neither); constraint_end ends the request with DONE_GRAMMAR without the
 * step's token, constraint_done too unless the token is a stop id; each
 * constraint is freed once, when its request ends or is cancelled; the
 * unconstrained stream is untouched. */
/* spec: the same under speculative decoding, the model repeating itself
 * so that the constrained requests draft (their ends then fall inside a
 * step's samples: slot.constraint_at). */
static void test_constraints(bool spec)
{
    struct world w;
    draft_max = spec ? 8 : 0;
    exec_window = spec ? 2 : 0;
    CHECK_EQ(world_init(&w, 64, 4, 32, 8, 128), 0);
    uint32_t p[6], want[12];
    fill(p, 6, 9);
    solo(p, 6, 12, NULL, 0, 0, want);
    struct fake_constraint c[4] = { { 5, UINT32_MAX, 0 }, { UINT32_MAX, 3, 0 },
                                    { UINT32_MAX, 4, 0 }, { UINT32_MAX, UINT32_MAX, 0 } };
    uint32_t stop[1] = { want[4] };   /* request 3's done token is a stop id */
    for (uint32_t i = 0; i < 4; i++) {
        struct l8_sched_req r = req(1, i + 1, p, 6, 12);
        r.constraint = &c[i];
        if (i == 2) {
            r.stop_ids = stop;
            r.n_stop = 1;
        }
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    struct l8_sched_req plain = req(1, 5, p, 6, 12);
    CHECK_EQ(l8_sched_submit(w.s, &plain, NULL), 0);
    uint32_t cancel_after = 2, steps = 0;
    for (;;) {
        struct l8_seq *seqs;
        uint32_t n;
        REQUIRE(l8_sched_build_step(w.s, &seqs, &n) == 0);
        if (!n)
            break;
        struct l8_sched_slot *sl = l8_sched_step_slots(w.s);
        for (uint32_t i = 0; i < n; i++) {
            struct fake_constraint *fc = sl[i].constraint;
            bool mine = sl[i].id <= 4;
            CHECK(!seqs[i].sample || mine == (fc != NULL && seqs[i].allowed != NULL),
                  "request %llu: constraint %p mask %p", (unsigned long long)sl[i].id,
                  (void *)fc, (const void *)seqs[i].allowed);
        }
        int rc = exec_step(&w.x, w.s, seqs, n);
        /* as llama8d's constraints do: the samples in order, up to the
         * first that differs from the draft after it */
        for (uint32_t i = 0; i < n; i++) {
            struct fake_constraint *fc = sl[i].constraint;
            const struct l8_seq *q = &seqs[i];
            const uint32_t k = q->n_draft;
            drafted_under_constraint += fc ? k : 0;
            for (uint32_t j = 0; fc; j++) {
                const uint64_t idx = q->sample_index + j;
                const uint32_t tok = k ? q->verify_out[j].token : q->token_out;
                sl[i].constraint_at = j;
                sl[i].constraint_end = idx == fc->end_at;
                sl[i].constraint_done = idx == fc->done_at;
                if (sl[i].constraint_end || sl[i].constraint_done || j == k ||
                    tok != q->tokens[q->n_tokens - k + j])
                    break;
            }
        }
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, rc, 0), 0);
        if (++steps == cancel_after)
            CHECK_EQ(l8_sched_cancel(w.s, 1, 4), 0);
    }
    struct rec *a = rec_for(&w, 1, 1), *b = rec_for(&w, 1, 2), *d = rec_for(&w, 1, 3);
    CHECK(a->n == 5 && !memcmp(a->toks, want, 5 * 4) && a->reason == L8_SCHED_DONE_GRAMMAR,
          "end: %u tokens, reason %d", a->n, a->reason);
    CHECK(b->n == 3 && b->reason == L8_SCHED_DONE_GRAMMAR, "done, not a stop: %u tokens, "
          "reason %d", b->n, b->reason);
    CHECK(d->n == 5 && d->toks[4] == stop[0] && d->reason == L8_SCHED_DONE_STOP,
          "done at a stop id: %u tokens, reason %d", d->n, d->reason);
    check_stream(&w, 1, 5, p, 6, 12, NULL, 0, 0, __LINE__);
    for (int i = 0; i < 4; i++)
        CHECK(c[i].freed == 1, "constraint %d freed %d times", i, c[i].freed);
    world_fini(&w);
    draft_max = exec_window = 0;
    if (spec)
        CHECK(drafted_under_constraint > 0);

    /* without free_constraint, a constraint is refused */
    struct l8_sched_opts o = { .n_pages = 8, .page_size = 4, .max_step_tokens = 8,
                               .max_seqs = 2, .max_ctx = 32, .vocab = VOCAB,
                               .on_event = on_event, .ctx = &w };
    struct l8_sched *s2;
    REQUIRE(l8_sched_new(&o, &s2) == 0);
    struct l8_sched_req r = req(1, 1, p, 6, 4);
    r.constraint = &c[0];
    CHECK_EQ(l8_sched_submit(s2, &r, NULL), -EINVAL);
    l8_sched_free(s2);
}

/* A tiny pool: 6 pages of 4. A and B (4-token prompts, 16 new tokens each,
 * 5 pages each at the end) cannot both finish; at position 12 A needs its
 * 4th page, the pool is empty, and the youngest (B) is preempted. B comes
 * back after A, starts from its one still-cached page, and continues its
 * stream exactly (seeded sampling: sample_index continues). */
static void test_preemption(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 6, 4, 16, 4, 64), 0);
    uint32_t a[4], b[4];
    fill(a, 4, 1);
    fill(b, 4, 500);
    struct l8_sched_req ra = req(1, 1, a, 4, 16), rb = req(2, 1, b, 4, 16);
    ra.sampling.seed = 42;
    ra.sampling.temperature = 1;
    rb.sampling.seed = 43;
    rb.sampling.temperature = 1;
    CHECK_EQ(l8_sched_submit(w.s, &ra, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &rb, NULL), 0);
    struct l8_sched_stats st;
    uint32_t steps = 0, preempt_step = 0, b_back_step = 0, b_back_pos = 0, b_back_len = 0;
    bool b_first_again = false;
    for (;;) {
        struct l8_seq *seqs;
        uint32_t n;
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        if (n == 0)
            break;
        steps++;
        l8_sched_get_stats(w.s, &st);
        const struct l8_sched_slot *sl = l8_sched_step_slots(w.s);
        if (st.preemptions == 1 && !preempt_step) {
            preempt_step = steps;
            /* only A runs; B waits */
            CHECK_EQ(n, 1);
            CHECK_EQ(sl[0].owner, 1);
            CHECK_EQ(seqs[0].pos, 12);
            CHECK_EQ(st.running, 1);
            CHECK_EQ(st.waiting, 1);
        }
        for (uint32_t i = 0; i < n; i++)
            if (preempt_step && sl[i].owner == 2 && !b_back_step) {
                b_back_step = steps;
                b_back_pos = seqs[i].pos;
                b_back_len = seqs[i].n_tokens;
                b_first_again = sl[i].first;
            }
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
        check_pool(&w, __LINE__);
        if (steps > 200)
            break;
    }
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.preemptions, 1);
    /* step 1: both prefill; steps 2..9 decode positions 4..11; step 10:
     * A at 12 needs a page: B is preempted with 9 tokens generated */
    CHECK_EQ(preempt_step, 10);
    /* A finishes at step 10 + 6 (positions 12..18) = 16; B returns at 17
     * from its page 0 (its pages 2 and 1 were reclaimed by A, tail first),
     * recomputing positions 4..12 (prompt 4 + 9 generated = 13 tokens) */
    CHECK_EQ(b_back_step, 17);
    CHECK_EQ(b_back_pos, 4);
    CHECK_EQ(b_back_len, 9);
    CHECK(!b_first_again);
    check_stream(&w, 1, 1, a, 4, 16, NULL, 0, 42, __LINE__);
    check_stream(&w, 2, 1, b, 4, 16, NULL, 0, 43, __LINE__);
    CHECK_EQ(st.tokens_generated, 32);
    CHECK_EQ(st.pages_used, 0);
    world_fini(&w);
}

/* A request needing the whole pool waits for the pool, never fails, and
 * the queue behind it waits too (FIFO). */
static void test_head_of_line(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 4, 4, 32, 4, 64), 0);
    uint32_t a[4], big[12], c[2];
    fill(a, 4, 1);
    fill(big, 12, 2);
    fill(c, 2, 3);
    struct l8_sched_req ra = req(1, 1, a, 4, 6), rbig = req(1, 2, big, 12, 5),
                        rc = req(1, 3, c, 2, 2);
    CHECK_EQ(l8_sched_submit(w.s, &ra, NULL), 0);   /* pages: 3 at the end */
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    CHECK_EQ(l8_sched_submit(w.s, &rbig, NULL), 0); /* 16 positions: the whole pool */
    CHECK_EQ(l8_sched_submit(w.s, &rc, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 1);                  /* big cannot start, c must not pass it */
    CHECK_EQ(l8_sched_step_slots(w.s)[0].id, 1);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    run_all(&w, 32, 4);
    check_stream(&w, 1, 1, a, 4, 6, NULL, 0, 0, __LINE__);
    check_stream(&w, 1, 2, big, 12, 5, NULL, 0, 0, __LINE__);
    check_stream(&w, 1, 3, c, 2, 2, NULL, 0, 0, __LINE__);
    world_fini(&w);
}

/* Higher priority is admitted first; FIFO within a priority. */
static void test_priority(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 64, 4, 64, 1, 64), 0);   /* one at a time */
    uint32_t p[3];
    fill(p, 3, 9);
    static const int32_t prio[5] = {0, 5, 0, 5, -1};
    for (int i = 0; i < 5; i++) {
        struct l8_sched_req r = req(1, i, p, 3, 1);
        r.priority = prio[i];
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    static const uint64_t order[5] = {1, 3, 0, 2, 4};
    for (int i = 0; i < 5; i++) {
        struct l8_seq *seqs;
        uint32_t n;
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        CHECK_EQ(n, 1);
        CHECK_EQ(l8_sched_step_slots(w.s)[0].id, order[i]);
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    }
    CHECK(l8_sched_idle(w.s));
    world_fini(&w);
}

/* Requests of each owner among a step's slots. */
static void owners_in_step(const struct world *w, uint32_t n, uint32_t *n1, uint32_t *n2)
{
    const struct l8_sched_slot *sl = l8_sched_step_slots(w->s);
    *n1 = *n2 = 0;
    for (uint32_t i = 0; i < n; i++) {
        *n1 += sl[i].owner == 1;
        *n2 += sl[i].owner == 2;
    }
}

static uint64_t preemptions(const struct world *w)
{
    struct l8_sched_stats st;
    l8_sched_get_stats(w->s, &st);
    return st.preemptions;
}

/* Fair share of the slots between owners. Owner 1 fills them; owner 2's
 * request gets one (owner 1's youngest preempted for it, and it admitted
 * before owner 1's earlier waiting ones), but not while held, nor one of
 * lower priority; nothing more is preempted at a difference of one. Two
 * owners with 4 each even out at 2 and 2, one preemption a step. A held
 * running request gives its slot up first. Every stream is what it is
 * alone. */
static void test_fair_share(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 256, 4, 64, 4, 64), 0);
    static uint32_t p[6][5], q[2][3];
    for (int i = 0; i < 6; i++)
        fill(p[i], 5, 100 * (uint32_t)i + 1);
    for (int i = 0; i < 2; i++)
        fill(q[i], 3, 100 * (uint32_t)i + 7);
    for (int i = 0; i < 6; i++) {
        struct l8_sched_req r = req(1, (uint64_t)i + 1, p[i], 5, 30);
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    CHECK_EQ(step(&w, __LINE__), 4);                  /* 1-4 run, 5 and 6 wait */
    bool hold = true;
    struct l8_sched_req r21 = req(2, 1, q[0], 3, 8), r22 = req(2, 2, q[1], 3, 8);
    r21.user = &hold;
    r22.priority = -1;
    CHECK_EQ(l8_sched_submit(w.s, &r21, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &r22, NULL), 0);
    uint32_t n1, n2;
    CHECK_EQ(step(&w, __LINE__), 4);                  /* held, lower priority: nothing */
    owners_in_step(&w, 4, &n1, &n2);
    CHECK_EQ(n1, 4);
    CHECK_EQ(preemptions(&w), 0);
    hold = false;
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 4);
    owners_in_step(&w, n, &n1, &n2);
    CHECK_EQ(n1, 3);
    CHECK_EQ(n2, 1);
    CHECK_EQ(preemptions(&w), 1);
    for (uint32_t i = 0; i < n; i++)                  /* the youngest of owner 1 went */
        CHECK(l8_sched_step_slots(w.s)[i].owner != 1 || l8_sched_step_slots(w.s)[i].id != 4);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    CHECK_EQ(step(&w, __LINE__), 4);                  /* 3 and 1: it stays so */
    run_all(&w, 64, 4);
    CHECK_EQ(preemptions(&w), 1);
    for (int i = 0; i < 6; i++)
        check_stream(&w, 1, (uint64_t)i + 1, p[i], 5, 30, NULL, 0, 0, __LINE__);
    check_stream(&w, 2, 1, q[0], 3, 8, NULL, 0, 0, __LINE__);
    check_stream(&w, 2, 2, q[1], 3, 8, NULL, 0, 0, __LINE__);
    world_fini(&w);

    CHECK_EQ(world_init(&w, 256, 4, 64, 4, 64), 0);
    for (uint64_t o = 1; o <= 2; o++) {
        for (int i = 0; i < 4; i++) {
            struct l8_sched_req r = req(o, (uint64_t)i + 1, p[i], 5, 12);
            CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
        }
        if (o == 1)
            CHECK_EQ(step(&w, __LINE__), 4);
    }
    static const uint32_t want1[3] = { 3, 2, 2 };
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        owners_in_step(&w, n, &n1, &n2);
        CHECK_EQ(n1, want1[k]);
        CHECK_EQ(n2, 4 - want1[k]);
        CHECK_EQ(preemptions(&w), k < 2 ? (uint64_t)k + 1 : 2);
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    }
    run_all(&w, 64, 4);
    CHECK_EQ(preemptions(&w), 2);
    for (uint64_t o = 1; o <= 2; o++)
        for (int i = 0; i < 4; i++)
            check_stream(&w, o, (uint64_t)i + 1, p[i], 5, 12, NULL, 0, 0, __LINE__);
    world_fini(&w);

    /* Owners 1 and 3 run one each in the 2 slots, owner 1's held: owner
     * 2's request takes the held one's slot (by counts, 1 and 1 against 0,
     * nothing would be preempted); released, owner 1's comes back. */
    CHECK_EQ(world_init(&w, 256, 4, 64, 2, 64), 0);
    bool held1 = false;
    struct l8_sched_req h1 = req(1, 1, p[0], 5, 12), h3 = req(3, 1, p[1], 5, 12),
                        h2 = req(2, 1, p[2], 5, 12);
    h1.user = &held1;
    CHECK_EQ(l8_sched_submit(w.s, &h1, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &h3, NULL), 0);
    CHECK_EQ(step(&w, __LINE__), 2);
    held1 = true;
    CHECK_EQ(l8_sched_submit(w.s, &h2, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(preemptions(&w), 1);
    for (uint32_t i = 0; i < n; i++)
        CHECK(l8_sched_step_slots(w.s)[i].owner != 1);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    held1 = false;
    run_all(&w, 64, 2);
    CHECK_EQ(preemptions(&w), 1);
    check_stream(&w, 1, 1, p[0], 5, 12, NULL, 0, 0, __LINE__);
    check_stream(&w, 3, 1, p[1], 5, 12, NULL, 0, 0, __LINE__);
    check_stream(&w, 2, 1, p[2], 5, 12, NULL, 0, 0, __LINE__);
    world_fini(&w);
}

/* Turns: three owners with one long request each and two slots. The third
 * gets a slot once the first has run L8_SCHED_QUANTUM steps, and so on
 * round, so none waits for a whole reply; at most one turn a quantum, also
 * where two busy owners split an odd number of slots 3 and 2 for good.
 * Every stream is what it is alone. */
static void test_fair_turns(void)
{
    struct world w;
    enum { NEW = 400 };
    CHECK_EQ(world_init(&w, 512, 4, 64, 2, 512), 0);
    static uint32_t p[3][5];
    for (int i = 0; i < 3; i++)
        fill(p[i], 5, 50 * (uint32_t)i + 3);
    for (uint64_t o = 1; o <= 3; o++) {
        struct l8_sched_req r = req(o, 1, p[o - 1], 5, NEW);
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    uint32_t steps = 0, first3 = 0;
    struct l8_seq *seqs;
    uint32_t n;
    while (l8_sched_build_step(w.s, &seqs, &n) == 0 && n > 0 && steps < 5000) {
        steps++;
        for (uint32_t i = 0; i < n; i++)
            if (l8_sched_step_slots(w.s)[i].owner == 3 && !first3)
                first3 = steps;
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    }
    CHECK(l8_sched_idle(w.s));
    CHECK(first3 >= L8_SCHED_QUANTUM && first3 <= L8_SCHED_QUANTUM + 2);
    /* 3 x 400 tokens on 2 slots: about 600 steps, a turn every 128. */
    CHECK(preemptions(&w) >= 2 && preemptions(&w) <= steps / L8_SCHED_QUANTUM + 1);
    for (uint64_t o = 1; o <= 3; o++)
        check_stream(&w, o, 1, p[o - 1], 5, NEW, NULL, 0, 0, __LINE__);
    world_fini(&w);

    CHECK_EQ(world_init(&w, 512, 4, 64, 5, 512), 0);
    for (uint64_t o = 1; o <= 2; o++)
        for (uint64_t id = 1; id <= 4; id++) {
            struct l8_sched_req r = req(o, id, p[id % 3], 5, 300);
            CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
        }
    steps = run_all(&w, 64, 5);
    CHECK(preemptions(&w) <= steps / L8_SCHED_QUANTUM + 1);
    for (uint64_t o = 1; o <= 2; o++)
        for (uint64_t id = 1; id <= 4; id++)
            check_stream(&w, o, id, p[id % 3], 5, 300, NULL, 0, 0, __LINE__);
    world_fini(&w);
}

/* A held request (its client takes no events) gets no row and no
 * admission while held, keeps its pages, and does not hold up the others;
 * released, every stream is what it would have been alone. */
static void test_held(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 64, 4, 64, 4, 64), 0);
    uint32_t pa[3], pb[3], pc[5], pd[6];
    fill(pa, 3, 11);
    fill(pb, 3, 12);
    fill(pc, 5, 13);
    fill(pd, 6, 14);
    bool hold1 = false, hold2 = false, hold3 = false;
    struct l8_sched_req ra = req(1, 1, pa, 3, 6), rb = req(2, 1, pb, 3, 6),
                        rc = req(1, 2, pc, 5, 4), rd = req(3, 1, pd, 6, 4);
    ra.user = rc.user = &hold1;
    rb.user = &hold2;
    rd.user = &hold3;
    CHECK_EQ(l8_sched_submit(w.s, &ra, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &rb, NULL), 0);
    CHECK_EQ(step(&w, __LINE__), 2);             /* both prefills */
    struct l8_sched_owner_stats st;
    l8_sched_owner_stats(w.s, 1, &st);
    const uint32_t pages = st.pages;
    hold1 = true;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(step(&w, __LINE__), 1);
        CHECK_EQ(l8_sched_step_slots(w.s)[0].owner, 2);
    }
    CHECK_EQ(rec_for(&w, 1, 1)->n, 1);           /* the prefill's token only */
    l8_sched_owner_stats(w.s, 1, &st);
    CHECK_EQ(st.pages, pages);                   /* kept: nothing preempted */
    /* C (owner 1, held) is first in the queue; D passes it */
    CHECK_EQ(l8_sched_submit(w.s, &rc, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &rd, NULL), 0);
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    for (uint32_t i = 0; i < n; i++)
        CHECK(l8_sched_step_slots(w.s)[i].owner != 1);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    /* everyone held: an empty step, not an error, and not idle */
    hold2 = hold3 = true;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 0);
    CHECK(!l8_sched_idle(w.s));
    hold1 = hold2 = hold3 = false;
    run_all(&w, 64, 4);
    check_stream(&w, 1, 1, pa, 3, 6, NULL, 0, 0, __LINE__);
    check_stream(&w, 2, 1, pb, 3, 6, NULL, 0, 0, __LINE__);
    check_stream(&w, 1, 2, pc, 5, 4, NULL, 0, 0, __LINE__);
    check_stream(&w, 3, 1, pd, 6, 4, NULL, 0, 0, __LINE__);
    world_fini(&w);
}

static void test_cancel(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 16, 4, 64, 4, 64), 0);
    uint32_t p[10];
    fill(p, 10, 4);
    struct l8_sched_req r1 = req(1, 1, p, 10, 20), r2 = req(1, 2, p, 6, 20);
    CHECK_EQ(l8_sched_submit(w.s, &r1, NULL), 0);
    step(&w, __LINE__);
    struct l8_sched_owner_stats os;
    l8_sched_owner_stats(w.s, 1, &os);
    CHECK_EQ(os.requests, 1);
    CHECK_EQ(os.pages, 3);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 3);
    /* cancel between steps: pages back now (the 2 full ones stay cached) */
    CHECK_EQ(l8_sched_cancel(w.s, 1, 1), 0);
    CHECK_EQ(l8_sched_cancel(w.s, 1, 1), -ENOENT);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);
    CHECK_EQ(st.pages_cached, 2);
    CHECK_EQ(st.pages_free, 14);
    CHECK_EQ(st.running, 0);
    CHECK(l8_sched_idle(w.s));
    struct rec *rr = rec_for(&w, 1, 1);
    CHECK_EQ(rr->n, 1);
    CHECK_EQ(rr->n_done, 0);          /* cancel emits nothing */

    /* cancel while the step is in flight: pages held until step_done, no
     * events for it from that step */
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), 0);
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(seqs[0].pos, 4);   /* p[0..4) cached from request 1 */
    CHECK_EQ(l8_sched_cancel(w.s, 1, 2), 0);
    l8_sched_owner_stats(w.s, 1, &os);
    CHECK_EQ(os.requests, 0);
    CHECK_EQ(os.pages, 2);
    CHECK(!l8_sched_idle(w.s));
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    CHECK_EQ(rec_for(&w, 1, 2)->n, 0);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);
    CHECK(l8_sched_idle(w.s));
    /* ids of ended requests are free again; live ones are not */
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), L8_SCHED_E_DUPLICATE_ID);
    CHECK_EQ(l8_sched_cancel(w.s, 1, 2), 0);
    CHECK_EQ(l8_sched_cancel(w.s, 1, 2), -ENOENT);
    CHECK(l8_sched_idle(w.s));
    world_fini(&w);
}

static void test_cancel_owner(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 32, 4, 64, 8, 64), 0);
    uint32_t p[5][7];
    for (int i = 0; i < 5; i++)
        fill(p[i], 7, 50 * i + 1);
    for (int i = 0; i < 3; i++) {
        struct l8_sched_req r = req(7, i, p[i], 7, 10);
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    struct l8_sched_req other = req(8, 0, p[3], 7, 10);
    CHECK_EQ(l8_sched_submit(w.s, &other, NULL), 0);
    step(&w, __LINE__);
    step(&w, __LINE__);
    struct l8_sched_req late = req(7, 3, p[4], 7, 10);  /* still waiting */
    CHECK_EQ(l8_sched_submit(w.s, &late, NULL), 0);
    struct l8_sched_owner_stats os;
    l8_sched_owner_stats(w.s, 7, &os);
    CHECK_EQ(os.requests, 4);
    CHECK_EQ(os.pages, 6);
    CHECK_EQ(l8_sched_cancel_owner(w.s, 7), 4);
    l8_sched_owner_stats(w.s, 7, &os);
    CHECK_EQ(os.requests, 0);
    CHECK_EQ(os.pages, 0);
    l8_sched_owner_stats(w.s, 8, &os);
    CHECK_EQ(os.requests, 1);
    CHECK_EQ(os.pages, 2);
    CHECK_EQ(l8_sched_cancel_owner(w.s, 7), 0);
    run_all(&w, 64, 8);
    check_stream(&w, 8, 0, p[3], 7, 10, NULL, 0, 0, __LINE__);
    CHECK_EQ(rec_for(&w, 7, 0)->n, 2);
    CHECK_EQ(rec_for(&w, 7, 0)->n_done, 0);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);

    /* the client vanishes while its events are being delivered: the
     * callback cancels the owner in the middle of step_done */
    for (int i = 0; i < 3; i++) {
        struct l8_sched_req r = req(9, i, p[i], 7, 10);
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    struct l8_sched_req keep = req(10, 0, p[4], 7, 10);
    CHECK_EQ(l8_sched_submit(w.s, &keep, NULL), 0);
    w.cancel_in_cb = true;
    w.cancel_owner = 9;
    w.cancel_at = 2;
    run_all(&w, 64, 8);
    /* (9,0) gets index 2 and its owner goes: (9,1) and (9,2), in the same
     * step, get nothing more */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(rec_for(&w, 9, i)->n, i == 0 ? 3 : 2);
        CHECK_EQ(rec_for(&w, 9, i)->n_done, 0);
    }
    check_stream(&w, 10, 0, p[4], 7, 10, NULL, 0, 0, __LINE__);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);
    CHECK_EQ(st.running + st.waiting, 0);
    world_fini(&w);
}

/* An engine failure ends every request of the step with an ERROR. */
static void test_engine_error(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 16, 4, 64, 4, 64), 0);
    uint32_t p[5];
    fill(p, 5, 8);
    struct l8_sched_req r1 = req(1, 1, p, 5, 4), r2 = req(1, 2, p, 5, 4);
    CHECK_EQ(l8_sched_submit(w.s, &r1, NULL), 0);
    CHECK_EQ(l8_sched_submit(w.s, &r2, NULL), 0);
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n + 1, 0, 0), -EINVAL);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, -EIO, 0), 0);
    CHECK_EQ(rec_for(&w, 1, 1)->n_error, 1);
    CHECK_EQ(rec_for(&w, 1, 1)->error, -EIO);
    CHECK_EQ(rec_for(&w, 1, 2)->n_error, 1);
    CHECK(l8_sched_idle(w.s));
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);
    CHECK_EQ(st.pages_cached, 0);  /* nothing registered from a failed step */
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), -EINVAL); /* not in flight */
    world_fini(&w);
}

/* Many requests, a pool far too small for all at once, shared prefixes,
 * mixed priorities, random cancels: every surviving stream is exact. */
static void test_stress(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 24, 4, 12, 5, 128), 0);
    static uint32_t prompts[48][40];
    uint32_t lens[48], news[48];
    uint64_t rng = 12345;
    for (int i = 0; i < 48; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        lens[i] = 1 + (uint32_t)(rng >> 33) % 39;
        news[i] = 1 + (uint32_t)(rng >> 45) % 24;
        /* half share a 12-token system prompt */
        fill(prompts[i], lens[i], i % 2 ? 777 : 1000 + i);
        if (i % 2 && lens[i] > 12)
            fill(prompts[i] + 12, lens[i] - 12, 3000 + i);
        struct l8_sched_req r = req(i % 6, i, prompts[i], lens[i], news[i]);
        r.sampling.seed = i;
        r.sampling.temperature = 0.9f;
        r.priority = i % 3 == 0;
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    uint32_t steps = 0;
    int cancelled = -1;
    for (;;) {
        struct l8_seq *seqs;
        uint32_t n, total = 0;
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        if (n == 0)
            break;
        for (uint32_t i = 0; i < n; i++)
            total += seqs[i].n_tokens;
        CHECK(total <= 12);
        CHECK(n <= 5);
        if (++steps == 40) {
            /* cancel the newest live request */
            for (int i = 47; i >= 0 && cancelled < 0; i--)
                if (l8_sched_cancel(w.s, i % 6, i) == 0)
                    cancelled = i;
            CHECK(cancelled >= 0);
        }
        CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
        check_pool(&w, __LINE__);
        if (steps > 5000)
            break;
    }
    CHECK(l8_sched_idle(w.s));
    uint32_t finished = 0;
    for (int i = 0; i < 48; i++) {
        struct rec *r = rec_for(&w, i % 6, i);
        if (i == cancelled) {
            CHECK_EQ(r->n_done, 0);
            continue;
        }
        check_stream(&w, i % 6, i, prompts[i], lens[i], news[i], NULL, 0, i, __LINE__);
        finished++;
    }
    CHECK_EQ(finished, 47);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK(st.preemptions > 0);
    CHECK(st.cached_tokens > 0);
    CHECK_EQ(st.pages_used, 0);
    printf("stress: %u steps, %llu preemptions, %llu cached prompt tokens\n", steps,
           (unsigned long long)st.preemptions, (unsigned long long)st.cached_tokens);
    world_fini(&w);
}

/* Random workloads against the checking executor: requests of up to 4
 * owners, 2 cache scopes, priorities at both extremes, holds toggled,
 * cancels before a step, during one and from inside the event callback,
 * whole owners cancelled, engine errors; random pool, page, batch and
 * budget sizes. After every step the pool is consistent and no page is in
 * two scopes' page tables; at the end nothing is held or running, every
 * request not cancelled got exactly one end, and every DONE stream equals
 * its solo run. */
#define RAND_REQS 60
static uint64_t rand_state;
static uint32_t rnd(uint32_t n)
{
    rand_state = rand_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rand_state >> 33) % n;
}

static struct { uint64_t done, errors, preemptions, cached, drafted, accepted; } rand_totals;

struct rand_req {
    uint32_t prompt[40], n, max_new, scope;
    uint64_t owner, seed;
    bool submitted, cancelled, hold;
};

/* The scopes of two sequences of the step that share a page differ. */
static bool cross_scope_page(const struct l8_seq *seqs, const struct l8_sched_slot *sl,
                             uint32_t n, const struct rand_req *q)
{
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = a + 1; b < n; b++)
            if (q[sl[a].id].scope != q[sl[b].id].scope)
                for (uint32_t i = 0; i < seqs[a].n_pages; i++)
                    for (uint32_t j = 0; j < seqs[b].n_pages; j++)
                        if (seqs[a].pages[i] == seqs[b].pages[j])
                            return true;
    return false;
}

static void cancel_owner_marked(struct rand_req *q, uint32_t next, uint64_t owner)
{
    for (uint32_t i = 0; i < next; i++)
        if (q[i].owner == owner)
            q[i].cancelled = true;
}

static int random_run(uint64_t seed)
{
    static struct rand_req q[RAND_REQS];
    struct world w;
    const int fails0 = t_failures;
    rand_state = seed;
    memset(q, 0, sizeof q);
    const uint32_t max_seqs = 1 + rnd(6), budget = max_seqs + rnd(20);
    CHECK_EQ(world_init(&w, 4 + rnd(30), 1 + rnd(8), budget, max_seqs, 200), 0);
    uint32_t next = 0;
    for (uint32_t steps = 0; steps < 3000; steps++) {
        for (uint32_t k = rnd(3); k > 0 && next < RAND_REQS; k--, next++) {
            struct rand_req *r = &q[next];
            r->owner = rnd(4);
            r->scope = rnd(2);
            r->n = 1 + rnd(40);
            r->max_new = 1 + rnd(30);
            r->seed = rnd(1000);
            fill(r->prompt, r->n, rnd(3) * 100);  /* shared starts */
            for (uint32_t i = rnd(2) ? rnd(r->n) : r->n; i < r->n; i++)
                r->prompt[i] = rnd(VOCAB);
            struct l8_sched_req sr = req(r->owner, next, r->prompt, r->n, r->max_new);
            sr.sampling.seed = r->seed;
            sr.sampling.temperature = 0.8f;
            sr.cache_scope = r->scope;
            sr.uid = r->owner % 3;      /* owners 0 and 3 are one user */
            sr.priority = rnd(4) ? (int32_t)rnd(3) : rnd(2) ? INT32_MAX : INT32_MIN;
            sr.user = &r->hold;
            r->submitted = l8_sched_submit(w.s, &sr, NULL) == 0;
        }
        for (uint32_t i = 0; i < next; i++)
            if (rnd(10) == 0)
                q[i].hold = !q[i].hold;
        if (next && rnd(8) == 0) {
            uint32_t i = rnd(next);
            if (q[i].submitted && l8_sched_cancel(w.s, q[i].owner, i) == 0)
                q[i].cancelled = true;
        }
        struct l8_seq *seqs;
        uint32_t n, total = 0;
        CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
        if (n == 0) {
            bool any_held = false;
            for (uint32_t i = 0; i < next; i++) {
                any_held |= q[i].hold;
                q[i].hold = false;
            }
            if (!any_held && next == RAND_REQS)
                break;
            continue;
        }
        for (uint32_t i = 0; i < n; i++)
            total += seqs[i].n_tokens;
        CHECK(n <= max_seqs && total <= budget);
        const struct l8_sched_slot *sl = l8_sched_step_slots(w.s);
        CHECK(!cross_scope_page(seqs, sl, n, q));
        if (rnd(6) == 0) {
            uint64_t id = sl[rnd(n)].id;
            if (l8_sched_cancel(w.s, q[id].owner, id) == 0)
                q[id].cancelled = true;
        }
        if (rnd(15) == 0) {
            uint64_t owner = rnd(4);
            l8_sched_cancel_owner(w.s, owner);
            cancel_owner_marked(q, next, owner);
        }
        int rc = exec_step(&w.x, w.s, seqs, n);
        CHECK_EQ(rc, 0);
        if (rnd(40) == 0)
            rc = -EIO;
        w.cancel_in_cb = rnd(10) == 0;
        if (w.cancel_in_cb) {
            w.cancel_owner = rnd(4);
            w.cancel_at = rnd(6);
            cancel_owner_marked(q, next, w.cancel_owner);
        }
        CHECK_EQ(l8_sched_step_done(w.s, seqs, n, rc, 0), 0);
        w.cancel_in_cb = false;
        check_pool(&w, __LINE__);
    }
    for (uint32_t i = 0; i < next; i++)
        q[i].hold = false;
    for (uint32_t k = 0; k < 5000 && step(&w, __LINE__); k++)
        ;
    CHECK(l8_sched_idle(w.s));
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.pages_used, 0);
    rand_totals.preemptions += st.preemptions;
    rand_totals.cached += st.cached_tokens;
    rand_totals.drafted += st.drafted;
    rand_totals.accepted += st.accepted;
    for (uint32_t i = 0; i < next; i++) {
        if (!q[i].submitted)
            continue;
        struct rec *r = rec_for(&w, q[i].owner, i);
        CHECK(!r->bad_order && r->n_done + r->n_error <= 1);
        CHECK(q[i].cancelled || r->n_done + r->n_error == 1);
        rand_totals.done += (uint32_t)r->n_done;
        rand_totals.errors += (uint32_t)r->n_error;
        if (r->n_done) {
            uint32_t want[MAX_TOK], nw = solo(q[i].prompt, q[i].n, q[i].max_new, NULL, 0,
                                              q[i].seed, want);
            CHECK(r->n == nw && !memcmp(r->toks, want, nw * sizeof(uint32_t)));
        }
    }
    world_fini(&w);
    if (t_failures != fails0)
        fprintf(stderr, "random_run: seed %llu failed\n", (unsigned long long)seed);
    return t_failures != fails0;
}

static void test_random(void)
{
    int bad = 0;
    for (uint64_t seed = 1; seed <= 2000 && bad < 3; seed++)
        bad += random_run(seed);
    printf("random: %llu streams done, %llu ended by engine errors, %llu preemptions, "
           "%llu cached prompt tokens\n", (unsigned long long)rand_totals.done,
           (unsigned long long)rand_totals.errors, (unsigned long long)rand_totals.preemptions,
           (unsigned long long)rand_totals.cached);
    /* Not vacuous: each kind of event happened. */
    CHECK(rand_totals.done > 1000 && rand_totals.errors > 0 && rand_totals.preemptions > 0 &&
          rand_totals.cached > 0);
}

/* Speculative decoding. One request of a model that repeats itself: the
 * stream of its solo run, with fewer steps than tokens, drafts accepted,
 * the pool's pages all back at the end; the same with no room for drafts
 * under verify_rows (then none). Then the random workloads again, their
 * model repeating and draft_max random: every stream still its solo run
 * through preemption, cancels, holds and engine errors. */
static void test_speculation(void)
{
    exec_window = 2;
    uint32_t p[24];
    fill(p, 24, 5);
    for (uint32_t i = 12; i < 24; i++)
        p[i] = p[i - 12];       /* the prompt repeats itself too */
    struct world w;
    draft_max = 8;
    CHECK_EQ(world_init(&w, 64, 4, 64, 4, 400), 0);
    struct l8_sched_req r = req(1, 1, p, 24, 200);
    r.sampling.seed = 9;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    uint32_t steps = run_all(&w, 64, 4);
    check_stream(&w, 1, 1, p, 24, 200, NULL, 0, 9, __LINE__);
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    printf("speculation: 200 tokens in %u steps, %llu drafted, %llu accepted\n", steps,
           (unsigned long long)st.drafted, (unsigned long long)st.accepted);
    CHECK(st.accepted > 100 && st.drafted >= st.accepted && steps < 100);
    CHECK_EQ(st.pages_used, 0);
    world_fini(&w);

    /* Under a stop id, and with max_new one more than the drafts reach. */
    CHECK_EQ(world_init(&w, 64, 4, 64, 4, 400), 0);
    uint32_t want[MAX_TOK], nw = solo(p, 24, 200, NULL, 0, 9, want);
    CHECK(nw == 200);
    uint32_t stop = want[57];
    r = req(1, 2, p, 24, 200);
    r.sampling.seed = 9;
    r.stop_ids = &stop;
    r.n_stop = 1;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    r = req(1, 3, p, 24, 31);
    r.sampling.seed = 9;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    run_all(&w, 64, 4);
    check_stream(&w, 1, 2, p, 24, 200, &stop, 1, 9, __LINE__);
    check_stream(&w, 1, 3, p, 24, 31, NULL, 0, 9, __LINE__);
    world_fini(&w);

    /* A budget of 23 leaves the prompt's last token for a step of its own,
     * a decode row that drafts: one prompt token, not 1 + its drafts. */
    CHECK_EQ(world_init(&w, 64, 4, 23, 4, 400), 0);
    r = req(1, 6, p, 24, 50);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    run_all(&w, 23, 4);
    check_stream(&w, 1, 6, p, 24, 50, NULL, 0, 0, __LINE__);
    l8_sched_get_stats(w.s, &st);
    CHECK(st.drafted > 0 && st.prompt_tokens == 24, "%llu drafted, %llu prompt tokens",
          (unsigned long long)st.drafted, (unsigned long long)st.prompt_tokens);
    world_fini(&w);

    /* No room: verify_rows of 1 leaves none beside the decode row. */
    verify_rows = 1;
    CHECK_EQ(world_init(&w, 64, 4, 64, 4, 400), 0);
    verify_rows = UINT32_MAX;
    r = req(1, 4, p, 24, 50);
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    run_all(&w, 64, 4);
    check_stream(&w, 1, 4, p, 24, 50, NULL, 0, 0, __LINE__);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.drafted, 0);
    world_fini(&w);

    /* Off for the request: none either. */
    CHECK_EQ(world_init(&w, 64, 4, 64, 4, 400), 0);
    r = req(1, 5, p, 24, 50);
    r.speculate = false;
    CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    run_all(&w, 64, 4);
    check_stream(&w, 1, 5, p, 24, 50, NULL, 0, 0, __LINE__);
    l8_sched_get_stats(w.s, &st);
    CHECK_EQ(st.drafted, 0);
    world_fini(&w);

    /* Drafts from the scope's ended requests: B asks what A asked, and A's
     * reply drafts B's from its first decode, where B's own tokens have
     * nothing to repeat yet; of another scope, or with the prefix cache
     * off, they do not. */
    uint64_t acc[3], steps_b[3];
    uint32_t q[24];
    fill(q, 24, 5);             /* no repeat in the prompt */
    for (int c = 0; c < 3; c++) {
        no_prefix_cache = c == 2;
        CHECK_EQ(world_init(&w, 64, 4, 64, 4, 400), 0);
        no_prefix_cache = false;
        r = req(1, 10, q, 24, 120);
        r.cache_scope = 5;
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
        run_all(&w, 64, 4);
        l8_sched_get_stats(w.s, &st);
        const uint64_t acc_a = st.accepted;
        r = req(2, 11, q, 24, 120);
        r.cache_scope = c == 1 ? 6 : 5;
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
        steps_b[c] = run_all(&w, 64, 4);
        check_stream(&w, 1, 10, q, 24, 120, NULL, 0, 0, __LINE__);
        check_stream(&w, 2, 11, q, 24, 120, NULL, 0, 0, __LINE__);
        l8_sched_get_stats(w.s, &st);
        acc[c] = st.accepted - acc_a;
        world_fini(&w);
    }
    printf("speculation from the scope's history: B accepted %llu in %llu steps; another "
           "scope %llu in %llu; prefix cache off %llu in %llu\n",
           (unsigned long long)acc[0], (unsigned long long)steps_b[0],
           (unsigned long long)acc[1], (unsigned long long)steps_b[1],
           (unsigned long long)acc[2], (unsigned long long)steps_b[2]);
    CHECK(acc[0] > acc[1] && steps_b[0] < steps_b[1]);
    CHECK(acc[1] == acc[2] && steps_b[1] == steps_b[2]);

    memset(&rand_totals, 0, sizeof rand_totals);
    int bad = 0;
    for (uint64_t seed = 1; seed <= 1000 && bad < 3; seed++) {
        draft_max = 1 + (uint32_t)(seed % 8);
        bad += random_run(seed);
    }
    printf("random, speculating: %llu streams done, %llu preemptions, %llu drafted, %llu "
           "accepted\n", (unsigned long long)rand_totals.done,
           (unsigned long long)rand_totals.preemptions, (unsigned long long)rand_totals.drafted,
           (unsigned long long)rand_totals.accepted);
    CHECK(rand_totals.done > 500 && rand_totals.preemptions > 0 && rand_totals.accepted > 1000);
    draft_max = 0;
    exec_window = 0;
}

/* The queue between uids: one alone takes half, the next half of what is
 * left, and so on; max_requests_per_uid caps each; a uid's share comes
 * back as its requests end. */
static void test_uid_queue(void)
{
    struct world w;
    memset(&w, 0, sizeof w);
    struct l8_sched_opts o = { .n_pages = 64, .page_size = 16, .max_step_tokens = 64,
                               .max_seqs = 4, .max_ctx = 100, .vocab = VOCAB,
                               .max_requests = 8, .on_event = on_event, .ctx = &w };
    struct l8_sched *s;
    CHECK_EQ(l8_sched_new(&o, &s), 0);
    uint32_t p[4];
    fill(p, 4, 3);
    struct l8_sched_refusal why;
    const uint32_t want[] = { 4, 2, 1, 1 };     /* uids 1..4 in turn */
    uint64_t id = 1;
    for (uint32_t u = 1; u <= 4; u++) {
        for (uint32_t i = 0; i < want[u - 1]; i++) {
            struct l8_sched_req r = req(u, id++, p, 4, 4);
            r.uid = u;
            CHECK_EQ(l8_sched_submit(s, &r, NULL), 0);
        }
        struct l8_sched_req r = req(u, id++, p, 4, 4);
        r.uid = u;
        CHECK_EQ(l8_sched_submit(s, &r, &why), u < 4 ? L8_SCHED_E_UID_QUEUE_FULL
                                                      : L8_SCHED_E_QUEUE_FULL);
        if (u < 4)
            CHECK(why.value == want[u - 1] && why.limit == want[u - 1]);
    }
    /* two of uid 1's end: a fifth uid finds (8 - 6 + 1) / 2 places, uid 2
     * still its 2 */
    CHECK_EQ(l8_sched_cancel(s, 1, 1), 0);
    CHECK_EQ(l8_sched_cancel(s, 1, 2), 0);
    struct l8_sched_req r = req(2, id++, p, 4, 4);
    r.uid = 2;
    CHECK_EQ(l8_sched_submit(s, &r, &why), L8_SCHED_E_UID_QUEUE_FULL);
    r.uid = 5;
    CHECK_EQ(l8_sched_submit(s, &r, NULL), 0);
    l8_sched_free(s);

    o.max_requests_per_uid = 3;
    CHECK_EQ(l8_sched_new(&o, &s), 0);
    for (uint64_t i = 1; i <= 3; i++) {
        struct l8_sched_req q = req(1, i, p, 4, 4);
        CHECK_EQ(l8_sched_submit(s, &q, NULL), 0);
    }
    struct l8_sched_req q = req(2, 9, p, 4, 4);     /* another client, the same uid */
    CHECK_EQ(l8_sched_submit(s, &q, &why), L8_SCHED_E_UID_QUEUE_FULL);
    CHECK(why.value == 3 && why.limit == 3);
    q.uid = 5;
    CHECK_EQ(l8_sched_submit(s, &q, NULL), 0);
    l8_sched_free(s);
}

static bool in_step(const struct world *w, uint32_t n, uint64_t owner)
{
    for (uint32_t i = 0; i < n; i++)
        if (l8_sched_step_slots(w->s)[i].owner == owner)
            return true;
    return false;
}

struct waits { uint32_t n; struct l8_sched_wait w[8]; };
static void on_wait(void *ctx, const struct l8_sched_wait *w)
{
    struct waits *ws = ctx;
    if (ws->n < 8)
        ws->w[ws->n++] = *w;
}

/* Pages between uids. A client of uid 1 prefills long prompts and stops
 * reading (held): its pages are taken for uid 2's request, which is
 * served while uid 1 still holds; when uid 1 reads again its requests are
 * recomputed and their streams are whole. Before that, the waiting
 * request is told why it waits. */
static void test_uid_pages(void)
{
    struct world w;
    CHECK_EQ(world_init(&w, 16, 4, 64, 8, 64), 0);
    uint32_t a[3][16], b[8], c[4];
    bool hold_a = false, hold_c = false;
    for (uint32_t i = 0; i < 3; i++) {
        fill(a[i], 16, 100 * i + 1);
        struct l8_sched_req r = req(1, i, a[i], 16, 8);
        r.uid = 1;
        r.user = &hold_a;
        r.sampling.seed = 10 + i;
        r.sampling.temperature = 1;
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    struct l8_seq *seqs;
    uint32_t n;
    CHECK_EQ(step(&w, __LINE__), 3);             /* the prefills: 12 pages */
    hold_a = true;
    struct l8_sched_owner_stats os;
    l8_sched_owner_stats(w.s, 1, &os);
    CHECK_EQ(os.pages, 12);
    /* uid 1's own next request waits for pages: nothing of its own is taken */
    uint32_t a4[16];
    fill(a4, 16, 900);
    struct l8_sched_req r4 = req(3, 1, a4, 16, 4);
    r4.uid = 1;
    r4.user = &hold_c;
    CHECK_EQ(l8_sched_submit(w.s, &r4, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK_EQ(n, 0);
    struct waits ws = { 0 };
    l8_sched_waiting(w.s, on_wait, &ws);
    CHECK_EQ(ws.n, 1);
    CHECK(ws.w[0].why == L8_SCHED_WAIT_PAGES && ws.w[0].need == 4 + 3 && ws.w[0].have == 4);
    CHECK_EQ(l8_sched_cancel(w.s, 3, 1), 0);
    /* uid 2, fewer pages: preempts held requests of uid 1 */
    fill(b, 8, 7);
    struct l8_sched_req rb = req(2, 1, b, 8, 12);
    rb.uid = 2;
    CHECK_EQ(l8_sched_submit(w.s, &rb, NULL), 0);
    /* a lower priority request behind it waits in the queue */
    fill(c, 4, 77);
    struct l8_sched_req rc = req(4, 1, c, 4, 4);
    rc.uid = 4;
    rc.priority = -1;
    CHECK_EQ(l8_sched_submit(w.s, &rc, NULL), 0);
    CHECK_EQ(l8_sched_build_step(w.s, &seqs, &n), 0);
    CHECK(in_step(&w, n, 2));
    struct l8_sched_stats st;
    l8_sched_get_stats(w.s, &st);
    CHECK(st.preemptions >= 1);
    CHECK_EQ(exec_step(&w.x, w.s, seqs, n), 0);
    CHECK_EQ(l8_sched_step_done(w.s, seqs, n, 0, 0), 0);
    for (int i = 0; i < 100 && !rec_for(&w, 2, 1)->n_done; i++)
        step(&w, __LINE__);
    check_stream(&w, 2, 1, b, 8, 12, NULL, 0, 0, __LINE__);
    l8_sched_owner_stats(w.s, 1, &os);
    CHECK_EQ(rec_for(&w, 1, 0)->n, 1);          /* uid 1 got its first tokens only */
    hold_a = false;
    run_all(&w, 64, 8);
    for (uint32_t i = 0; i < 3; i++)
        check_stream(&w, 1, i, a[i], 16, 8, NULL, 0, 10 + i, __LINE__);
    check_stream(&w, 4, 1, c, 4, 4, NULL, 0, 0, __LINE__);
    world_fini(&w);

    /* Two busy uids on a small pool: pages change hands without a swap
     * back and forth, and every stream is whole. */
    CHECK_EQ(world_init(&w, 12, 4, 32, 8, 64), 0);
    uint32_t p[6][12];
    for (uint32_t i = 0; i < 6; i++) {
        fill(p[i], 12, 50 * i + 3);
        struct l8_sched_req r = req(1 + i % 2, i, p[i], 12, 20);
        r.uid = 1 + i % 2;
        r.sampling.seed = i;
        r.sampling.temperature = 1;
        CHECK_EQ(l8_sched_submit(w.s, &r, NULL), 0);
    }
    uint32_t steps = run_all(&w, 32, 8);
    l8_sched_get_stats(w.s, &st);
    CHECK(steps < 400);
    for (uint32_t i = 0; i < 6; i++)
        check_stream(&w, 1 + i % 2, i, p[i], 12, 20, NULL, 0, i, __LINE__);
    printf("uid pages: two busy uids, 12 pages: %u steps, %llu preemptions\n", steps,
           (unsigned long long)st.preemptions);
    world_fini(&w);
}

int main(void)
{
    test_constraints(false);
    test_constraints(true);
    test_validation();
    test_prefix_sharing();
    test_prefix_scopes();
    test_random();
    test_chunked_prefill();
    test_stop_and_logprobs();
    test_preemption();
    test_head_of_line();
    test_priority();
    test_held();
    test_uid_queue();
    test_uid_pages();
    test_fair_share();
    test_fair_turns();
    test_cancel();
    test_cancel_owner();
    test_engine_error();
    test_stress();
    test_speculation();
    if (t_failures) {
        fprintf(stderr, "test_sched: %d failures\n", t_failures);
        return 1;
    }
    printf("test_sched: ok\n");
    return 0;
}
