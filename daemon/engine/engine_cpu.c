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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
/* Decode attention split across threads (l8_cpu_attn_split_*): used when
 * a step has fewer attention items than 2 per thread (one sequence with
 * few KV heads) for decode rows at least SPLIT_MIN_CTX keys long. Keys go
 * in chunks of SPLIT_CHUNK, value dims in blocks of SPLIT_DIM_BLOCK. The
 * split gives the tile's bits, so these choices change only speed. */
#define SPLIT_MIN_CTX 512u
#define SPLIT_CHUNK 256u
#define SPLIT_DIM_BLOCK 32u
#define SPLIT_MAX_ITEMS 4u
/* Sample-only rows one lm_head pass takes at least, whatever max_seqs: a
 * verification's n_draft + 1 samples read the lm_head once, not once each. */
#define LOGIT_BATCH_MIN 32u

struct attn_item {
    uint32_t seq;       /* index into the step's seqs */
    uint32_t g;         /* KV head */
    uint32_t t0, t1;    /* the sequence's tokens [t0, t1) of this step */
    uint32_t tok0;      /* step-global index of the sequence's first token */
};

/* A sample the step owes: sample j (0 .. n_draft) of sequence seq, from
 * the logits lm_head writes at dest[row] of the current batch. */
struct pending_sample { uint32_t seq, j, row; };

/* A decode row's attention for one KV head, split over threads. */
struct split_item {
    uint32_t seq, g;    /* sequence (index into the step's seqs), KV head */
    uint32_t n;         /* keys: positions [0, n) */
    uint32_t tok;       /* step-global token index */
    uint32_t chunk0;    /* first of its key chunks in the step's numbering */
    uint32_t task0;     /* first of its pv/sum tasks */
};

struct cpu {
    const struct l8_model *m;
    /* The projections and the lm_head the steps read: copies in the
     * engine's own huge-page memory (resident_weights). */
    struct l8_layer *layers;
    struct l8_dense lm_head;
    void *arena;
    size_t arena_bytes;
    const struct l8_config *c;
    enum l8_numerics numerics;
    uint32_t page_size, n_pages;
    uint32_t max_T, max_seqs;
    uint32_t ctx_cap;           /* most positions one sequence can attend to */
    uint32_t qdim, kvdim, max_in, gqa;
    struct l8_tp *tp;
    struct l8_cpu_ws ws;
    struct l8_qweight lm_q;     /* opts.lm_head_fp8: lm_head as E4M3 codes, else w NULL */
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
    uint8_t *xp;                /* [T, quantize_ld(max_in)] packed for the fp8 kernel */
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
    /* Split decode attention (nthreads > 1 only). */
    struct split_item split[SPLIT_MAX_ITEMS];
    uint32_t n_split, split_chunks, split_tasks;
    float *split_w;             /* [SPLIT_MAX_ITEMS][gqa, ctx_cap] scores, then weights */
    float *split_cmax;          /* [SPLIT_MAX_ITEMS][chunks(ctx_cap), gqa] */
    float *split_mx;            /* [SPLIT_MAX_ITEMS][gqa] */
    double *split_sum;          /* [SPLIT_MAX_ITEMS][gqa] */
    float *split_acc;           /* [SPLIT_MAX_ITEMS][gqa, head_dim] */
    float *logit_scratch;       /* [scratch_rows, vocab] for sample-only rows */
    uint32_t scratch_rows;      /* max_seqs, at least LOGIT_BATCH_MIN */
    float **dest;               /* [T] lm_head destinations */
    struct pending_sample *pend;/* [T] the samples of lm_head's batch */
    struct l8_sampler *sampler;
    /* The step being run (read by the parallel callbacks). */
    struct l8_seq *seqs;
    uint32_t layer;
};

/* Scratch and the pool, counted in *total (what l8_engine_memory reports). */
static void *xalloc(uint64_t *total, size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p)
        *total += bytes;
    return p;
}

/* Read from the checkpoint's file mapping, a decoded token of the 1b
 * preset ran ~10% slower here than from fresh anonymous pages (2 threads:
 * 17.1 against 18.9 tok/s, tests/bench/bench_cpu.sh's machine): page-cache
 * pages are scattered 4 KB ones. So the engine copies the projections and
 * the lm_head it reads into one anonymous region, huge pages where the
 * kernel gives them (the page cache copy stays reclaimable). */
#define HUGE_ALIGN (2u << 20)
#define COPY_PIECE (2u << 20)

struct wcopy { const uint8_t *src; uint8_t *dst; size_t bytes; };
struct wcopy_job { const struct wcopy *p; struct l8_progress *progress; };

static void wcopy_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    const struct wcopy_job *j = ctx;
    (void)tid;
    for (size_t i = b; i < e_; i++) {
        memcpy(j->p[i].dst, j->p[i].src, j->p[i].bytes);
        if (j->progress)
            atomic_fetch_add_explicit(&j->progress->done, j->p[i].bytes, memory_order_relaxed);
    }
}

/* Places `bytes` at the arena's cursor, and the pieces that copy src there. */
static uint8_t *wplace(uint8_t *base, size_t *at, const void *src, size_t bytes,
                       struct wcopy *p, size_t *np)
{
    uint8_t *dst = base + *at;
    *at += (bytes + 4095) & ~(size_t)4095;
    for (size_t o = 0; src && p && o < bytes; o += COPY_PIECE)
        p[(*np)++] = (struct wcopy){ (const uint8_t *)src + o, dst + o,
                                     bytes - o < COPY_PIECE ? bytes - o : COPY_PIECE };
    return dst;
}

/* lm_fp8: room for the FP8 lm_head's codes instead of a copy of the dense one. */
static int resident_weights(struct cpu *e, bool lm_fp8, uint8_t **lm_codes,
                            struct l8_progress *progress)
{
    const struct l8_model *m = e->m;
    const uint32_t nl = e->c->n_layers;
    const struct l8_dense *D = &m->lm_head;
    const size_t lm_bytes = (size_t)D->rows * D->cols * (lm_fp8 ? 1 : l8_dtype_size(D->dtype));
    size_t total = 0, n = (lm_bytes + COPY_PIECE - 1) / COPY_PIECE + 1;
    for (uint32_t l = 0; l < nl; l++) {
        const struct l8_qweight *w[7] = { &m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv,
                                          &m->layers[l].wo, &m->layers[l].wgate,
                                          &m->layers[l].wup, &m->layers[l].wdown };
        for (int i = 0; i < 7; i++) {
            const size_t b = (size_t)w[i]->out * w[i]->in;
            total += (b + 4095) & ~(size_t)4095;
            n += (b + COPY_PIECE - 1) / COPY_PIECE;
        }
    }
    total += (lm_bytes + 4095) & ~(size_t)4095;
    e->arena_bytes = total + HUGE_ALIGN;
    void *a = mmap(NULL, e->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return -ENOMEM;
    e->arena = a;
    uint8_t *base = (uint8_t *)(((uintptr_t)a + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    (void)madvise(base, total, MADV_HUGEPAGE);      /* a hint: 4 KB pages work too */
    struct wcopy *p = malloc(n * sizeof(*p));
    e->layers = malloc(nl * sizeof(*e->layers));
    if (!p || !e->layers) {
        free(p);
        return -ENOMEM;
    }
    size_t at = 0, np = 0;
    for (uint32_t l = 0; l < nl; l++) {
        struct l8_layer *L = &e->layers[l];
        *L = m->layers[l];
        struct l8_qweight *w[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->wup, &L->wdown };
        for (int i = 0; i < 7; i++)
            w[i]->w = wplace(base, &at, w[i]->w, (size_t)w[i]->out * w[i]->in, p, &np);
    }
    e->lm_head = *D;
    if (lm_fp8)
        *lm_codes = wplace(base, &at, NULL, lm_bytes, NULL, NULL);
    else
        e->lm_head.data = wplace(base, &at, D->data, lm_bytes, p, &np);
    struct wcopy_job j = { p, progress };
    if (progress) {
        uint64_t sum = 0;
        for (size_t i = 0; i < np; i++)
            sum += p[i].bytes;
        atomic_store_explicit(&progress->total, sum, memory_order_relaxed);
    }
    l8_tp_for(e->tp, np, 1, wcopy_chunk, &j);
    free(p);
    return 0;
}

struct lmq_job { const struct l8_dense *D; uint8_t *q; float *scale; float **row; };

static void lmq_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    const struct lmq_job *j = ctx;
    for (size_t r = b; r < e_; r++) {
        l8_dense_row(j->D, (uint32_t)r, j->row[tid]);
        j->scale[r] = l8_bf16_to_f32(l8_quantize_weight_row(j->row[tid], j->D->cols,
                                                            j->q + r * j->D->cols));
    }
}

/* opts.lm_head_fp8: lm_head's rows quantized as the checkpoint's
 * projections were (l8_quantize_weight_row), over the pool. */
static int quantize_lm_head(struct cpu *e, uint8_t *q, uint64_t *total)
{
    const struct l8_dense *D = &e->m->lm_head;
    const int nt = l8_tp_nthreads(e->tp);
    *total += (uint64_t)D->rows * D->cols;
    float *scale = xalloc(total, (size_t)D->rows * sizeof(float));
    float **row = calloc((size_t)nt, sizeof(float *));
    int r = q && scale && row ? 0 : -ENOMEM;
    for (int t = 0; t < nt && r == 0; t++)
        if (!(row[t] = malloc(sizeof(float) * D->cols)))
            r = -ENOMEM;
    if (r == 0) {
        struct lmq_job j = { D, q, scale, row };
        l8_tp_for(e->tp, D->rows, 64, lmq_chunk, &j);
        e->lm_q = (struct l8_qweight){ .w = q, .scale = scale, .out = D->rows, .in = D->cols };
    } else {
        free(scale);
    }
    for (int t = 0; row && t < nt; t++)
        free(row[t]);
    free(row);
    return r;
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
    free((void *)e->lm_q.scale);
    if (e->arena)
        munmap(e->arena, e->arena_bytes);
    free(e->layers);
    free(e->att); free(e->gate); free(e->up); free(e->xq); free(e->xp); free(e->xs);
    free(e->rcos); free(e->rsin); free(e->tok_seq); free(e->tok_pos); free(e->tok_id);
    free(e->items); free(e->logit_scratch); free(e->dest); free(e->pend);
    free(e->split_w); free(e->split_cmax); free(e->split_mx); free(e->split_sum);
    free(e->split_acc);
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
                      void **impl, uint32_t *n_pages, struct l8_engine_mem *mem,
                      char err[L8_ERRLEN])
{
    const struct l8_config *c = &m->cfg;
    *mem = (struct l8_engine_mem){ .weights = m->weight_bytes };
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
    uint8_t *lm_codes = NULL;
    if (resident_weights(e, o->lm_head_fp8, &lm_codes, o->progress) < 0)
        goto nomem;
    if (o->lm_head_fp8 && quantize_lm_head(e, lm_codes, &mem->weights) < 0)
        goto nomem;

    const size_t pool = (size_t)e->n_pages * page_bytes;
    if (f32kv)
        e->kv32 = xalloc(&mem->kv_pool, pool);
    else
        e->kv16 = xalloc(&mem->kv_pool, pool);
    if (!e->kv32 && !e->kv16)
        goto nomem;

    const size_t T = e->max_T;
    uint64_t *work = &mem->work;
    e->x = xalloc(work, T * c->hidden * sizeof(float));
    e->xn = xalloc(work, T * c->hidden * sizeof(float));
    e->tmp = xalloc(work, T * c->hidden * sizeof(float));
    e->q = xalloc(work, T * e->qdim * sizeof(float));
    e->k = xalloc(work, T * e->kvdim * sizeof(float));
    e->v = xalloc(work, T * e->kvdim * sizeof(float));
    e->att = xalloc(work, T * e->qdim * sizeof(float));
    e->gate = xalloc(work, T * c->inter * sizeof(float));
    e->up = xalloc(work, T * c->inter * sizeof(float));
    e->xq = xalloc(work, T * e->max_in);
    e->xp = xalloc(work, T * l8_cpu_quantize_ld(&e->ws, e->max_in));
    e->xs = xalloc(work, T * sizeof(float));
    e->rcos = xalloc(work, T * (c->head_dim / 2) * sizeof(float));
    e->rsin = xalloc(work, T * (c->head_dim / 2) * sizeof(float));
    e->tok_seq = xalloc(work, T * sizeof(uint32_t));
    e->tok_pos = xalloc(work, T * sizeof(uint32_t));
    e->tok_id = xalloc(work, T * sizeof(uint32_t));
    e->items = xalloc(work, T * c->n_kv_heads * sizeof(struct attn_item));
    e->scratch_rows = e->max_seqs > LOGIT_BATCH_MIN ? e->max_seqs : LOGIT_BATCH_MIN;
    e->logit_scratch = xalloc(work, (size_t)e->scratch_rows * c->vocab * sizeof(float));
    e->dest = xalloc(work, T * sizeof(float *));
    e->pend = xalloc(work, T * sizeof(*e->pend));
    if (!e->x || !e->xn || !e->tmp || !e->q || !e->k || !e->v || !e->att || !e->gate
        || !e->up || !e->xq || !e->xp || !e->xs || !e->rcos || !e->rsin || !e->tok_seq
        || !e->tok_pos || !e->tok_id || !e->items || !e->logit_scratch || !e->dest
        || !e->pend)
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
        e->scores[i] = xalloc(work, e->score_floats * sizeof(float));
        e->acc[i] = xalloc(work, qt * e->gqa * c->head_dim * sizeof(float));
        e->kvrow[i] = xalloc(work, 2 * c->head_dim * sizeof(float));
        e->sums[i] = xalloc(work, qt * e->gqa * sizeof(double));
        e->rowptr[i] = xalloc(work, 2 * (size_t)e->ctx_cap * sizeof(void *));
        if (!e->scores[i] || !e->acc[i] || !e->kvrow[i] || !e->sums[i] || !e->rowptr[i])
            goto nomem;
    }
    if (nt > 1) {
        const size_t chunks = (e->ctx_cap + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
        e->split_w = xalloc(work, (size_t)SPLIT_MAX_ITEMS * e->gqa * e->ctx_cap * sizeof(float));
        e->split_cmax = xalloc(work, (size_t)SPLIT_MAX_ITEMS * chunks * e->gqa * sizeof(float));
        e->split_mx = xalloc(work, (size_t)SPLIT_MAX_ITEMS * e->gqa * sizeof(float));
        e->split_sum = xalloc(work, (size_t)SPLIT_MAX_ITEMS * e->gqa * sizeof(double));
        e->split_acc = xalloc(work, (size_t)SPLIT_MAX_ITEMS * e->gqa * c->head_dim * sizeof(float));
        if (!e->split_w || !e->split_cmax || !e->split_mx || !e->split_sum || !e->split_acc)
            goto nomem;
    }
    e->sampler = l8_sampler_new(c->vocab);
    if (!e->sampler)
        goto nomem;
    mem->work += (uint64_t)nt * e->ws.floats * sizeof(float);
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

/* Pointers to rows [j0, j1) of K (kv 0) or V (kv 1) of KV head g of
 * sequence s in this layer: rows[j] for j in [j0, j1). */
static void kv_rows(const struct cpu *e, const struct l8_seq *s, uint32_t kv, uint32_t g,
                    uint32_t j0, uint32_t j1, const void **rows)
{
    const uint32_t hd = e->c->head_dim, ps = e->page_size;
    for (uint32_t j = j0; j < j1; ) {
        const uint32_t pg = j / ps, end = (pg + 1) * ps < j1 ? (pg + 1) * ps : j1;
        size_t o = l8_kv_offset(e->c, e->n_pages, ps, e->layer, kv, s->pages[pg], g, 0);
        for (; j < end; j++) {
            size_t d = o + (size_t)(j - pg * ps) * hd;
            rows[j] = e->kv32 ? (const void *)(e->kv32 + d) : (const void *)(e->kv16 + d);
        }
    }
}

static const struct split_item *split_of_chunk(const struct cpu *e, size_t c)
{
    uint32_t i = 0;
    while (i + 1 < e->n_split && c >= e->split[i + 1].chunk0)
        i++;
    return &e->split[i];
}

static float *split_w(const struct cpu *e, const struct split_item *I)
{
    return e->split_w + (size_t)(I - e->split) * e->gqa * e->ctx_cap;
}

static float *split_cmax(const struct cpu *e, const struct split_item *I)
{
    const size_t chunks = (e->ctx_cap + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
    return e->split_cmax + (size_t)(I - e->split) * chunks * e->gqa;
}

/* 1. scores of one chunk of keys, with the chunk's max. */
static void split_scores_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    const uint32_t hd = e->c->head_dim, gqa = e->gqa;
    const float sc = 1.0f / sqrtf((float)hd);
    const void **kr = e->rowptr[tid];
    for (size_t c = b; c < e_; c++) {
        const struct split_item *I = split_of_chunk(e, c);
        const uint32_t k = (uint32_t)(c - I->chunk0);
        const uint32_t j0 = k * SPLIT_CHUNK, j1 = j0 + SPLIT_CHUNK < I->n ? j0 + SPLIT_CHUNK : I->n;
        kv_rows(e, &e->seqs[I->seq], 0, I->g, j0, j1, kr);
        l8_cpu_attn_split_scores(e->q + (size_t)I->tok * e->qdim + (size_t)I->g * gqa * hd, gqa,
                                 hd, kr, e->kv16 != NULL, j0, j1, sc, split_w(e, I), e->ctx_cap,
                                 e->kvrow[tid], split_cmax(e, I) + (size_t)k * gqa);
    }
}

/* 3. weights of one chunk of keys. */
static void split_exp_chunk(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    for (size_t c = b; c < e_; c++) {
        const struct split_item *I = split_of_chunk(e, c);
        const uint32_t j0 = (uint32_t)(c - I->chunk0) * SPLIT_CHUNK;
        const uint32_t j1 = j0 + SPLIT_CHUNK < I->n ? j0 + SPLIT_CHUNK : I->n;
        l8_cpu_attn_split_exp(split_w(e, I), e->ctx_cap, e->gqa, j0, j1,
                              e->split_mx + (size_t)(I - e->split) * e->gqa);
    }
}

/* 4. per item: task 0 the denominators, tasks 1.. one block of value dims. */
static void split_pv_task(void *ctx, size_t b, size_t e_, int tid)
{
    struct cpu *e = ctx;
    const uint32_t hd = e->c->head_dim, gqa = e->gqa;
    const void **vr = e->rowptr[tid] + e->ctx_cap;
    for (size_t t = b; t < e_; t++) {
        uint32_t i = 0;
        while (i + 1 < e->n_split && t >= e->split[i + 1].task0)
            i++;
        const struct split_item *I = &e->split[i];
        const uint32_t k = (uint32_t)(t - I->task0);
        if (k == 0) {
            l8_cpu_attn_split_sum(split_w(e, I), e->ctx_cap, gqa, I->n,
                                  e->split_sum + (size_t)i * gqa);
            continue;
        }
        const uint32_t blk = hd % SPLIT_DIM_BLOCK == 0 ? SPLIT_DIM_BLOCK : hd;
        const uint32_t d0 = (k - 1) * blk;
        kv_rows(e, &e->seqs[I->seq], 1, I->g, 0, I->n, vr);
        l8_cpu_attn_split_pv(split_w(e, I), e->ctx_cap, gqa, I->n, vr, e->kv16 != NULL, hd,
                             d0, d0 + blk, e->split_acc + (size_t)i * gqa * hd);
    }
}

static void attention_split(struct cpu *e)
{
    const uint32_t hd = e->c->head_dim, gqa = e->gqa;
    l8_tp_for(e->tp, e->split_chunks, 1, split_scores_chunk, e);
    for (uint32_t i = 0; i < e->n_split; i++) {
        const struct split_item *I = &e->split[i];
        l8_cpu_attn_split_max(split_cmax(e, I), (I->n + SPLIT_CHUNK - 1) / SPLIT_CHUNK, gqa,
                              split_w(e, I), e->ctx_cap, e->split_mx + (size_t)i * gqa);
    }
    l8_tp_for(e->tp, e->split_chunks, 1, split_exp_chunk, e);
    l8_tp_for(e->tp, e->split_tasks, 1, split_pv_task, e);
    for (uint32_t i = 0; i < e->n_split; i++) {
        const struct split_item *I = &e->split[i];
        float *o = e->att + (size_t)I->tok * e->qdim + (size_t)I->g * gqa * hd;
        const float *a = e->split_acc + (size_t)i * gqa * hd;
        for (uint32_t h = 0; h < gqa; h++) {
            const float inv = (float)(1.0 / e->split_sum[(size_t)i * gqa + h]);
            for (uint32_t d = 0; d < hd; d++)
                o[(size_t)h * hd + d] = a[(size_t)h * hd + d] * inv;
        }
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
    struct l8_cpu_x in = { .f32 = x };
    if (e->numerics == L8_NUMERICS_FP8)
        l8_cpu_quantize_rows(e->tp, &e->ws, x, T, W[0]->in, e->xq, e->xp, e->xs, &in);
    l8_cpu_qmatmul_multi(e->tp, &e->ws, W, n, &in, T, y, ld);
}

static void project(struct cpu *e, const struct l8_qweight *W, const float *x, uint32_t T,
                    float *y)
{
    project_multi(e, &W, 1, x, T, &y);
}

/* The rows of lm_head's current batch (e->xn, e->dest), the samples they
 * owe (e->pend), and the masks' wait (engine.h), NULL once called. */
struct logit_batch {
    uint32_t n_rows, n_scratch, n_pend;
    l8_masks_wait_fn *wait;
    void *wait_ud;
};

/* Sample j of q from its logits, as the decode step it stands for draws
 * it: the history up to that step, its Philox counter and its mask.
 * -EDOM when a logit is NaN or infinite: a weight (or an activation) has
 * overflowed, and whatever the sampler drew from them would be garbage. */
static int sample_one(struct cpu *e, struct l8_seq *q, uint32_t j, const float *logits,
                      struct logit_batch *b)
{
    if (l8_find_nonfinite_f32(logits, e->c->vocab) < e->c->vocab)
        return -EDOM;
    const uint32_t *mask = q->allowed ? q->allowed + (size_t)j * ((e->c->vocab + 31) / 32) : NULL;
    if (mask && b->wait) {
        b->wait(b->wait_ud);
        b->wait = NULL;
    }
    float lp;
    const uint32_t id = l8_sample(e->sampler, logits, q->sampling, q->history,
                                  q->n_history - q->n_draft + j, mask, q->sample_index + j, &lp);
    if (q->n_draft) {
        q->verify_out[j] = (struct l8_sample_out){ id, lp };
    } else {
        q->token_out = id;
        q->logprob_out = lp;
    }
    return 0;
}

/* lm_head over the batch's rows, then the samples they owe; the batch
 * starts empty again. 0, or sample_one's -EDOM. */
static int logit_batch_run(struct cpu *e, struct logit_batch *b)
{
    if (b->n_rows && e->lm_q.w) {
        const struct l8_qweight *W = &e->lm_q;
        float *const *dest = e->dest;
        struct l8_cpu_x in = { .f32 = e->xn };
        if (e->numerics == L8_NUMERICS_FP8)
            l8_cpu_quantize_rows(e->tp, &e->ws, e->xn, b->n_rows, W->in, e->xq, e->xp, e->xs,
                                 &in);
        l8_cpu_qmatmul_to_rows(e->tp, &e->ws, &W, 1, &in, b->n_rows, &dest);
    } else if (b->n_rows) {
        l8_cpu_dense_matmul(e->tp, &e->ws, &e->lm_head, e->xn, b->n_rows, e->dest);
    }
    int r = 0;
    for (uint32_t i = 0; i < b->n_pend && !r; i++) {
        const struct pending_sample *p = &e->pend[i];
        r = sample_one(e, &e->seqs[p->seq], p->j, e->dest[p->row], b);
    }
    b->n_rows = b->n_scratch = b->n_pend = 0;
    return r;
}

static int cpu_step(void *impl, struct l8_seq *seqs, uint32_t n_seqs,
                    l8_masks_wait_fn *wait, void *wait_ud)
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

    /* Few attention items (one sequence, few KV heads): split the long
     * decode rows' attention over the threads instead. */
    e->n_split = e->split_chunks = e->split_tasks = 0;
    if (e->split_w && n_items < 2u * (uint32_t)l8_tp_nthreads(e->tp)) {
        const uint32_t dim_tasks = c->head_dim % SPLIT_DIM_BLOCK == 0
                                   ? c->head_dim / SPLIT_DIM_BLOCK : 1;
        uint32_t kept = 0;
        for (uint32_t it = 0; it < n_items; it++) {
            const struct attn_item *I = &e->items[it];
            const struct l8_seq *q = &seqs[I->seq];
            if (q->n_tokens == 1 && q->pos + 1 >= SPLIT_MIN_CTX && e->n_split < SPLIT_MAX_ITEMS) {
                struct split_item *S = &e->split[e->n_split++];
                S->seq = I->seq;
                S->g = I->g;
                S->n = q->pos + 1;
                S->tok = I->tok0;
                S->chunk0 = e->split_chunks;
                S->task0 = e->split_tasks;
                e->split_chunks += (S->n + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
                e->split_tasks += 1 + dim_tasks;
            } else {
                e->items[kept++] = *I;
            }
        }
        n_items = kept;
    }

    l8_tp_for(e->tp, T, 0, embed_chunk, e);

    for (uint32_t L = 0; L < c->n_layers; L++) {
        const struct l8_layer *ly = &e->layers[L];
        e->layer = L;
        struct norm_job nj = { e, ly->attn_norm };
        l8_tp_for(e->tp, T, 0, norm_chunk, &nj);
        const struct l8_qweight *qkv[3] = { &ly->wq, &ly->wk, &ly->wv };
        float *const qkv_out[3] = { e->q, e->k, e->v };
        project_multi(e, qkv, 3, e->xn, T, qkv_out);
        l8_tp_for(e->tp, T, 0, rope_store_chunk, e);
        l8_tp_for(e->tp, n_items, 1, attn_chunk, e);
        if (e->n_split)
            attention_split(e);
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

    /* Final norm and lm_head only for the rows whose logits are needed, in
     * batches that fill the scratch's rows (those only sampling needs: a
     * verification samples at n_draft + 1 rows of its sequence), each
     * batch's samples drawn after its logits. A row's logits are bitwise
     * the same whatever rows share its batch. */
    struct logit_batch b = { .wait = wait, .wait_ud = wait_ud };
    uint32_t tok = 0;
    int r = 0;
    for (uint32_t s = 0; s < n_seqs && !r; s++) {
        struct l8_seq *q = &seqs[s];
        const uint32_t first_sample = q->n_tokens - 1 - q->n_draft;
        for (uint32_t t = 0; t < q->n_tokens; t++, tok++) {
            float *d = NULL;
            const bool sampled = q->sample && t >= first_sample;
            if (q->logits == L8_LOGITS_ALL)
                d = q->logits_out + (size_t)t * c->vocab;
            else if (q->logits == L8_LOGITS_LAST && t + 1 == q->n_tokens)
                d = q->logits_out;
            else if (sampled)
                d = e->logit_scratch + (size_t)b.n_scratch++ * c->vocab;
            if (!d)
                continue;
            l8_cpu_rmsnorm(e->x + (size_t)tok * H, m->final_norm, H, c->rms_eps,
                           e->xn + (size_t)b.n_rows * H);
            if (sampled)
                e->pend[b.n_pend++] = (struct pending_sample){ s, t - first_sample, b.n_rows };
            e->dest[b.n_rows++] = d;
            if (b.n_scratch == e->scratch_rows && (r = logit_batch_run(e, &b)))
                break;
        }
    }
    if (!r)
        r = logit_batch_run(e, &b);
    e->seqs = NULL;
    return r;
}

const struct l8_engine_ops l8_engine_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .step = cpu_step,
};
