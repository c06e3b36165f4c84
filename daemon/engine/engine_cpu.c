/* engine_cpu.c - the Llama forward pass on the CPU over the paged KV pool.
 *
 * One step processes every token of every sequence together: the
 * projections decode each FP8 weight row once per step and dot it against
 * all the step's tokens (rows split over the thread pool); attention runs
 * per (sequence, KV head, tile of query tokens) over the sequence's pages.
 * Each output value is computed with an order of operations that depends
 * only on its own sequence's data, so a sequence's logits are bitwise the
 * same alone or batched, chunked or whole, on any page layout.
 *
 * Numerics (engine.h): exact = f32 activations, KV pool f32; fp8 = each
 * projection's input quantized per token to E4M3 (l8_quantize_act_row),
 * KV pool bf16 (f32 with opts.kv_f32). Norms, RoPE, softmax, residuals and lm_head are f32 in
 * both (lm_head is not an FP8 projection: it stays in its checkpoint
 * dtype, as the FP8-dynamic recipe's ignore list says). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_ops.h"
#include "engine.h"
#include "sampler.h"
#include "../model/numerics.h"

/* Attention score scratch per thread, in floats; the query tile shrinks
 * to fit (but never below one token's heads over the longest context). */
#define ATTN_SCORE_BUDGET (1u << 20)
#define ATTN_MAX_TILE 16u
#define DEFAULT_KV_BYTES (1ull << 30)

struct attn_item {
    uint32_t seq;       /* index into the step's seqs */
    uint32_t g;         /* KV head */
    uint32_t t0, t1;    /* the sequence's tokens [t0, t1) of this step */
    uint32_t tok0;      /* step-global index of the sequence's first token */
};

struct cpu {
    const struct l8_model *m;
    const struct l8_config *c;
    enum l8_numerics numerics;
    uint32_t page_size, n_pages;
    uint32_t max_T, max_seqs;
    uint32_t ctx_cap;           /* most positions one sequence can attend to */
    uint32_t qdim, kvdim, max_in, gqa;
    struct l8_tp *tp;
    struct l8_cpu_ws ws;
    /* KV pool, layout of engine.h: [layer][kv][page][kv_head][slot][head_dim] */
    float *kv32;                /* exact numerics */
    uint16_t *kv16;             /* fp8 numerics: bf16 bits */
    /* Activations, allocated for max_T tokens. */
    float *x;                   /* [T, hidden] residual stream */
    float *xn;                  /* [T, hidden] normed */
    float *tmp;                 /* [T, hidden] o / down projection output */
    float *q;                   /* [T, n_heads*head_dim] */
    float *k, *v;               /* [T, n_kv_heads*head_dim] */
    float *att;                 /* [T, n_heads*head_dim] attention output */
    float *gate, *up;           /* [T, inter] */
    uint8_t *xq;                /* [T, max_in] fp8 codes */
    float *xd;                  /* [T, max_in] decoded fp8 activations */
    float *xs;                  /* [T] per-token activation scales */
    float *rcos, *rsin;         /* [T, head_dim/2] RoPE table per token */
    uint32_t *tok_seq, *tok_pos, *tok_id; /* [T] */
    struct attn_item *items;    /* [T * n_kv_heads] */
    uint32_t qtile;             /* query tokens per attention item */
    size_t score_floats;        /* per thread */
    float **scores;             /* [nthreads][qtile*gqa, ctx] */
    float **acc;                /* [nthreads][qtile*gqa, head_dim] */
    float **kvrow;              /* [nthreads][2, head_dim] bf16 rows decoded */
    double **sums;              /* [nthreads][qtile*gqa] softmax denominators */
    const void ***rowptr;       /* [nthreads][2, ctx_cap] K and V row pointers */
    float *logit_scratch;       /* [max_seqs, vocab] for sample-only rows */
    float **dest;               /* [T] lm_head destinations */
    struct l8_sampler *sampler;
    /* The step being run (read by the parallel callbacks). */
    struct l8_seq *seqs;
    uint32_t layer;
};

static void *xalloc(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_destroy(void *impl)
{
    struct cpu *e = impl;
    if (!e)
        return;
    int nt = e->tp ? l8_tp_nthreads(e->tp) : 0;
    l8_tp_free(e->tp);
    l8_cpu_ws_free(&e->ws);
    free(e->kv32); free(e->kv16);
    free(e->x); free(e->xn); free(e->tmp); free(e->q); free(e->k); free(e->v);
    free(e->att); free(e->gate); free(e->up); free(e->xq); free(e->xd); free(e->xs);
    free(e->rcos); free(e->rsin); free(e->tok_seq); free(e->tok_pos); free(e->tok_id);
    free(e->items); free(e->logit_scratch); free(e->dest);
    for (int i = 0; i < nt; i++) {
        if (e->scores) free(e->scores[i]);
        if (e->acc) free(e->acc[i]);
        if (e->kvrow) free(e->kvrow[i]);
        if (e->sums) free(e->sums[i]);
        if (e->rowptr) free(e->rowptr[i]);
    }
    free(e->scores); free(e->acc); free(e->kvrow); free(e->sums); free(e->rowptr);
    l8_sampler_free(e->sampler);
    free(e);
}

static int cpu_create(const struct l8_model *m, const struct l8_engine_opts *o,
                      void **impl, uint32_t *n_pages, char err[L8_ERRLEN])
{
    const struct l8_config *c = &m->cfg;
    struct cpu *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(err, L8_ERRLEN, "cpu engine: out of memory");
        return -ENOMEM;
    }
    e->m = m;
    e->c = c;
    e->numerics = o->numerics;
    e->page_size = o->page_size;
    e->max_T = o->max_step_tokens;
    e->max_seqs = o->max_seqs;
    e->qdim = c->n_heads * c->head_dim;
    e->kvdim = c->n_kv_heads * c->head_dim;
    e->gqa = c->n_heads / c->n_kv_heads;
    e->max_in = c->hidden;
    if (e->qdim > e->max_in) e->max_in = e->qdim;
    if (c->inter > e->max_in) e->max_in = c->inter;

    const bool f32kv = o->numerics == L8_NUMERICS_EXACT || o->kv_f32;
    const size_t elem = f32kv ? sizeof(float) : sizeof(uint16_t);
    const size_t page_bytes = (size_t)c->n_layers * 2 * c->n_kv_heads * o->page_size
                              * c->head_dim * elem;
    uint64_t np = o->n_pages;
    if (np == 0) {
        uint64_t bytes = o->kv_bytes;
        if (bytes == 0) {
            /* Default: 1 GiB, but no more than max_seqs full contexts. */
            uint64_t full = (uint64_t)o->max_seqs
                            * ((c->max_pos + o->page_size - 1) / o->page_size) * page_bytes;
            bytes = full < DEFAULT_KV_BYTES ? full : DEFAULT_KV_BYTES;
        }
        np = bytes / page_bytes;
    }
    if (np == 0 || np > UINT32_MAX) {
        snprintf(err, L8_ERRLEN, "cpu engine: KV pool of %llu pages of %zu bytes is unusable",
                 (unsigned long long)np, page_bytes);
        cpu_destroy(e);
        return -EINVAL;
    }
    e->n_pages = (uint32_t)np;
    uint64_t cap = (uint64_t)e->n_pages * o->page_size;
    e->ctx_cap = cap < c->max_pos ? (uint32_t)cap : c->max_pos;

    int nt = o->nthreads > 0 ? o->nthreads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1)
        nt = 1;
    e->tp = l8_tp_new(nt);
    if (!e->tp)
        goto nomem;
    if (l8_cpu_ws_init(&e->ws, nt, e->max_in > c->hidden ? e->max_in : c->hidden) < 0)
        goto nomem;

    const size_t pool = (size_t)e->n_pages * page_bytes;
    if (f32kv)
        e->kv32 = xalloc(pool);
    else
        e->kv16 = xalloc(pool);
    if (!e->kv32 && !e->kv16)
        goto nomem;

    const size_t T = e->max_T;
    e->x = xalloc(T * c->hidden * sizeof(float));
    e->xn = xalloc(T * c->hidden * sizeof(float));
    e->tmp = xalloc(T * c->hidden * sizeof(float));
    e->q = xalloc(T * e->qdim * sizeof(float));
    e->k = xalloc(T * e->kvdim * sizeof(float));
    e->v = xalloc(T * e->kvdim * sizeof(float));
    e->att = xalloc(T * e->qdim * sizeof(float));
    e->gate = xalloc(T * c->inter * sizeof(float));
    e->up = xalloc(T * c->inter * sizeof(float));
    e->xq = xalloc(T * e->max_in);
    e->xd = xalloc(T * e->max_in * sizeof(float));
    e->xs = xalloc(T * sizeof(float));
    e->rcos = xalloc(T * (c->head_dim / 2) * sizeof(float));
    e->rsin = xalloc(T * (c->head_dim / 2) * sizeof(float));
    e->tok_seq = xalloc(T * sizeof(uint32_t));
    e->tok_pos = xalloc(T * sizeof(uint32_t));
    e->tok_id = xalloc(T * sizeof(uint32_t));
    e->items = xalloc(T * c->n_kv_heads * sizeof(struct attn_item));
    e->logit_scratch = xalloc((size_t)e->max_seqs * c->vocab * sizeof(float));
    e->dest = xalloc(T * sizeof(float *));
    if (!e->x || !e->xn || !e->tmp || !e->q || !e->k || !e->v || !e->att || !e->gate
        || !e->up || !e->xq || !e->xd || !e->xs || !e->rcos || !e->rsin || !e->tok_seq
        || !e->tok_pos || !e->tok_id || !e->items || !e->logit_scratch || !e->dest)
        goto nomem;

    size_t per_tok = (size_t)e->gqa * e->ctx_cap;
    size_t qt = ATTN_SCORE_BUDGET / (per_tok ? per_tok : 1);
    if (qt > ATTN_MAX_TILE) qt = ATTN_MAX_TILE;
    if (qt < 1) qt = 1;
    e->qtile = (uint32_t)qt;
    e->score_floats = qt * per_tok;
    e->scores = calloc((size_t)nt, sizeof(float *));
    e->acc = calloc((size_t)nt, sizeof(float *));
    e->kvrow = calloc((size_t)nt, sizeof(float *));
    e->sums = calloc((size_t)nt, sizeof(double *));
    e->rowptr = calloc((size_t)nt, sizeof(void *));
    if (!e->scores || !e->acc || !e->kvrow || !e->sums || !e->rowptr)
        goto nomem;
    for (int i = 0; i < nt; i++) {
        e->scores[i] = xalloc(e->score_floats * sizeof(float));
        e->acc[i] = xalloc(qt * e->gqa * c->head_dim * sizeof(float));
        e->kvrow[i] = xalloc(2 * c->head_dim * sizeof(float));
        e->sums[i] = xalloc(qt * e->gqa * sizeof(double));
        e->rowptr[i] = xalloc(2 * (size_t)e->ctx_cap * sizeof(void *));
        if (!e->scores[i] || !e->acc[i] || !e->kvrow[i] || !e->sums[i] || !e->rowptr[i])
            goto nomem;
    }
    e->sampler = l8_sampler_new(c->vocab);
    if (!e->sampler)
        goto nomem;
    *impl = e;
    *n_pages = e->n_pages;
    return 0;
nomem:
    snprintf(err, L8_ERRLEN, "cpu engine: out of memory (KV pool %u pages, %u step tokens)",
             e->n_pages, e->max_T);
    cpu_destroy(e);
    return -ENOMEM;
}

/* ---- per-token stages ---------------------------------------------------- */

static void embed_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    for (size_t t = b; t < e_; t++) {
        l8_dense_row(&e->m->embed, e->tok_id[t], e->x + t * e->c->hidden);
        const uint32_t h2 = e->c->head_dim / 2;
        l8_cpu_rope_table(e->m->rope_inv_freq, e->c->head_dim, e->tok_pos[t],
                          e->rcos + t * h2, e->rsin + t * h2);
    }
}

struct norm_job { struct cpu *e; const float *w; };

static void norm_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    const struct norm_job *j = ctx;
    const size_t H = j->e->c->hidden;
    for (size_t t = b; t < e_; t++)
        l8_cpu_rmsnorm(j->e->x + t * H, j->w, H, j->e->c->rms_eps, j->e->xn + t * H);
}

/* RoPE on q and k, then K and V into the pool. */
static void rope_store_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    const struct l8_config *c = e->c;
    const uint32_t hd = c->head_dim, h2 = hd / 2;
    for (size_t t = b; t < e_; t++) {
        float *qt = e->q + t * e->qdim, *kt = e->k + t * e->kvdim, *vt = e->v + t * e->kvdim;
        l8_cpu_rope_apply(qt, c->n_heads, hd, e->rcos + t * h2, e->rsin + t * h2);
        l8_cpu_rope_apply(kt, c->n_kv_heads, hd, e->rcos + t * h2, e->rsin + t * h2);
        const struct l8_seq *s = &e->seqs[e->tok_seq[t]];
        const uint32_t p = e->tok_pos[t];
        const uint32_t page = s->pages[p / e->page_size], slot = p % e->page_size;
        for (uint32_t g = 0; g < c->n_kv_heads; g++) {
            size_t ko = l8_kv_offset(c, e->n_pages, e->page_size, e->layer, 0, page, g, slot);
            size_t vo = l8_kv_offset(c, e->n_pages, e->page_size, e->layer, 1, page, g, slot);
            const float *ks = kt + (size_t)g * hd, *vs = vt + (size_t)g * hd;
            if (e->kv32) {
                memcpy(e->kv32 + ko, ks, hd * sizeof(float));
                memcpy(e->kv32 + vo, vs, hd * sizeof(float));
            } else {
                for (uint32_t i = 0; i < hd; i++) {
                    e->kv16[ko + i] = l8_f32_to_bf16(ks[i]);
                    e->kv16[vo + i] = l8_f32_to_bf16(vs[i]);
                }
            }
        }
    }
}

/* Causal attention of one tile of query tokens of one sequence for the
 * heads that read KV head g (l8_cpu_attention_tile), over the sequence's
 * pages. */
static void attn_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    const struct l8_config *c = e->c;
    const uint32_t hd = c->head_dim, gqa = e->gqa;
    const float sc = 1.0f / sqrtf((float)hd);
    const void **kr = e->rowptr[tid], **vr = kr + e->ctx_cap;
    for (size_t it = b; it < e_; it++) {
        const struct attn_item *I = &e->items[it];
        const struct l8_seq *s = &e->seqs[I->seq];
        const uint32_t pos0 = s->pos + I->t0, n = pos0 + (I->t1 - I->t0);
        for (uint32_t j0 = 0, pg = 0; j0 < n; j0 += e->page_size, pg++) {
            size_t ko = l8_kv_offset(c, e->n_pages, e->page_size, e->layer, 0, s->pages[pg], I->g, 0);
            size_t vo = l8_kv_offset(c, e->n_pages, e->page_size, e->layer, 1, s->pages[pg], I->g, 0);
            for (uint32_t j = j0; j < n && j < j0 + e->page_size; j++) {
                size_t d = (size_t)(j - j0) * hd;
                if (e->kv32) {
                    kr[j] = e->kv32 + ko + d;
                    vr[j] = e->kv32 + vo + d;
                } else {
                    kr[j] = e->kv16 + ko + d;
                    vr[j] = e->kv16 + vo + d;
                }
            }
        }
        const size_t tok = (size_t)I->tok0 + I->t0;
        l8_cpu_attention_tile(e->q + tok * e->qdim + (size_t)I->g * gqa * hd, e->qdim,
                              I->t1 - I->t0, gqa, hd, pos0, kr, vr, e->kv16 != NULL, sc,
                              e->scores[tid], e->acc[tid], e->sums[tid], e->kvrow[tid],
                              e->att + tok * e->qdim + (size_t)I->g * gqa * hd, e->qdim);
    }
}

struct add_job { float *x; const float *y; size_t n; };

static void add_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    const struct add_job *j = ctx;
    for (size_t t = b; t < e_; t++)
        for (size_t i = 0; i < j->n; i++)
            j->x[t * j->n + i] += j->y[t * j->n + i];
}

static void swiglu_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    const size_t I = e->c->inter;
    for (size_t t = b; t < e_; t++) {
        float *g = e->gate + t * I;
        const float *u = e->up + t * I;
        for (size_t i = 0; i < I; i++)
            g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* y[i] = x W[i]^T for the step's T tokens, in the engine's numerics, for
 * n weights that read the same x [T, W[0].in] (q/k/v, gate/up): one
 * quantization of x and one parallel-for for all of them. */
static void project_multi(struct cpu *e, const struct l8_qweight *const *W, uint32_t n,
                          const float *x, uint32_t T, float *const *y)
{
    size_t ld[3];
    for (uint32_t i = 0; i < n; i++)
        ld[i] = W[i]->out;
    if (e->numerics == L8_NUMERICS_FP8) {
        l8_cpu_quantize_rows(e->tp, x, T, W[0]->in, e->xq, e->xd, e->xs);
        l8_cpu_qmatmul_multi(e->tp, &e->ws, W, n, e->xd, e->xs, T, y, ld);
    } else {
        l8_cpu_qmatmul_multi(e->tp, &e->ws, W, n, x, NULL, T, y, ld);
    }
}

static void project(struct cpu *e, const struct l8_qweight *W, const float *x, uint32_t T,
                    float *y)
{
    project_multi(e, &W, 1, x, T, &y);
}

static int cpu_step(void *impl, struct l8_seq *seqs, uint32_t n_seqs)
{
    struct cpu *e = impl;
    const struct l8_config *c = e->c;
    const struct l8_model *m = e->m;
    const uint32_t H = c->hidden;
    e->seqs = seqs;

    uint32_t T = 0, n_items = 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const struct l8_seq *q = &seqs[s];
        for (uint32_t g = 0; g < c->n_kv_heads; g++)
            for (uint32_t t0 = 0; t0 < q->n_tokens; t0 += e->qtile) {
                struct attn_item *I = &e->items[n_items++];
                I->seq = s;
                I->g = g;
                I->t0 = t0;
                I->t1 = t0 + e->qtile < q->n_tokens ? t0 + e->qtile : q->n_tokens;
                I->tok0 = T;
            }
        for (uint32_t t = 0; t < q->n_tokens; t++, T++) {
            e->tok_seq[T] = s;
            e->tok_pos[T] = q->pos + t;
            e->tok_id[T] = q->tokens[t];
        }
    }

    l8_tp_for(e->tp, T, 0, embed_chunk, e);

    for (uint32_t L = 0; L < c->n_layers; L++) {
        const struct l8_layer *ly = &m->layers[L];
        e->layer = L;
        struct norm_job nj = { e, ly->attn_norm };
        l8_tp_for(e->tp, T, 0, norm_chunk, &nj);
        const struct l8_qweight *qkv[3] = { &ly->wq, &ly->wk, &ly->wv };
        float *const qkv_out[3] = { e->q, e->k, e->v };
        project_multi(e, qkv, 3, e->xn, T, qkv_out);
        l8_tp_for(e->tp, T, 0, rope_store_chunk, e);
        l8_tp_for(e->tp, n_items, 1, attn_chunk, e);
        project(e, &ly->wo, e->att, T, e->tmp);
        struct add_job aj = { e->x, e->tmp, H };
        l8_tp_for(e->tp, T, 0, add_chunk, &aj);

        nj.w = ly->mlp_norm;
        l8_tp_for(e->tp, T, 0, norm_chunk, &nj);
        const struct l8_qweight *gu[2] = { &ly->wgate, &ly->wup };
        float *const gu_out[2] = { e->gate, e->up };
        project_multi(e, gu, 2, e->xn, T, gu_out);
        l8_tp_for(e->tp, T, 0, swiglu_chunk, e);
        project(e, &ly->wdown, e->gate, T, e->tmp);
        l8_tp_for(e->tp, T, 0, add_chunk, &aj);
    }

    /* Final norm and lm_head only for the rows whose logits are needed. */
    uint32_t R = 0, tok = 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        struct l8_seq *q = &seqs[s];
        for (uint32_t t = 0; t < q->n_tokens; t++, tok++) {
            float *d = NULL;
            bool last = t + 1 == q->n_tokens;
            if (q->logits == L8_LOGITS_ALL)
                d = q->logits_out + (size_t)t * c->vocab;
            else if (q->logits == L8_LOGITS_LAST && last)
                d = q->logits_out;
            else if (q->sample && last)
                d = e->logit_scratch + (size_t)s * c->vocab;
            if (!d)
                continue;
            l8_cpu_rmsnorm(e->x + (size_t)tok * H, m->final_norm, H, c->rms_eps,
                           e->xn + (size_t)R * H);
            e->dest[R++] = d;
        }
    }
    if (R)
        l8_cpu_dense_matmul(e->tp, &e->ws, &m->lm_head, e->xn, R, e->dest);

    for (uint32_t s = 0; s < n_seqs; s++) {
        struct l8_seq *q = &seqs[s];
        if (!q->sample)
            continue;
        const float *row;
        if (q->logits == L8_LOGITS_ALL)
            row = q->logits_out + (size_t)(q->n_tokens - 1) * c->vocab;
        else if (q->logits == L8_LOGITS_LAST)
            row = q->logits_out;
        else
            row = e->logit_scratch + (size_t)s * c->vocab;
        q->token_out = l8_sample(e->sampler, row, q->sampling, q->history, q->n_history,
                                 q->sample_index, &q->logprob_out);
    }
    e->seqs = NULL;
    return 0;
}

const struct l8_engine_ops l8_engine_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .step = cpu_step,
};
