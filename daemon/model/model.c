/* model.c - bind a checkpoint's tensors to the model's canonical form.
 * See model.h.
 *
 * Two passes: the first finds every tensor, checks its dtype and exact
 * shape against config.json and adds up the bytes the converted forms need;
 * the second allocates one arena and fills it (norms and scales to f32,
 * dense projections quantized to FP8 on nthreads threads). So a checkpoint
 * of the wrong shape fails before any large allocation, and nothing is
 * allocated per tensor.
 *
 * The second pass also checks every value the engines will compute with:
 * a weight_scale that is not finite and positive, an E4M3 NaN code, a NaN
 * or an infinity in a dense tensor is refused with the tensor and the
 * element named. Loaded, any of them makes every logit NaN and every
 * request stream token 0. The big tensors are scanned on the same threads
 * as the quantization, each byte once. */
#include "model.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "numerics.h"
#include "fail.h"

#define ARENA_ALIGN 64          /* cache line: engines stream these rows */
#define ROWS_PER_TASK 64        /* load-time quantization and scan work unit */
#define MAX_LOAD_THREADS 256


static bool is_dense_dtype(enum l8_dtype t)
{
    return t == L8_BF16 || t == L8_F16 || t == L8_F32;
}

/* Element i of a dense tensor as f32. memcpy: mapped data may sit at any
 * offset the header chose. */
static float dense_at(enum l8_dtype t, const void *p, size_t i)
{
    const uint8_t *b = p;
    uint16_t h;
    float f;
    switch (t) {
    case L8_BF16:
        memcpy(&h, b + 2 * i, 2);
        return l8_bf16_to_f32(h);
    case L8_F16:
        memcpy(&h, b + 2 * i, 2);
        return l8_f16_to_f32(h);
    case L8_F32:
        memcpy(&f, b + 4 * i, 4);
        return f;
    default:
        return 0.0f;   /* excluded by the dtype checks */
    }
}

void l8_dense_row(const struct l8_dense *d, uint32_t r, float *out)
{
    const uint8_t *row = (const uint8_t *)d->data + (size_t)r * d->cols * l8_dtype_size(d->dtype);
    for (uint32_t i = 0; i < d->cols; i++)
        out[i] = dense_at(d->dtype, row, i);
}

/* The index of the first NaN or infinity (E4M3: NaN code) of n elements
 * of dtype t at p, or n. */
static size_t find_nonfinite(enum l8_dtype t, const void *p, size_t n)
{
    switch (t) {
    case L8_F8_E4M3: return l8_find_nonfinite_e4m3(p, n);
    case L8_BF16:    return l8_find_nonfinite_bf16(p, n);
    case L8_F16:     return l8_find_nonfinite_f16(p, n);
    case L8_F32:     return l8_find_nonfinite_f32(p, n);
    default:         return n;   /* excluded by the dtype checks */
    }
}

static void num_str(float v, char *buf, size_t len)
{
    if (isnan(v))
        snprintf(buf, len, "NaN");
    else if (isinf(v))
        snprintf(buf, len, "%sInf", v > 0 ? "+" : "-");
    else
        snprintf(buf, len, "%g", (double)v);
}

/* The message for element i of t, found NaN or infinite (or a NaN code). */
static int bad_value(char err[L8_ERRLEN], const struct l8_tensor *t, uint64_t i)
{
    char where[64] = "", num[16];
    if (t->n_dims == 2 && t->shape[1] > 1)
        snprintf(where, sizeof where, " (row %llu, column %llu)",
                 (unsigned long long)(i / t->shape[1]), (unsigned long long)(i % t->shape[1]));
    const size_t es = l8_dtype_size(t->dtype);
    uint32_t bits = 0;
    memcpy(&bits, (const uint8_t *)t->data + i * es, es);
    if (t->dtype == L8_F8_E4M3)
        return l8_fail(err, "%s: %s: element %llu%s is an E4M3 NaN code (0x%02x)", t->file,
                       t->name, (unsigned long long)i, where, bits);
    num_str(dense_at(t->dtype, t->data, i), num, sizeof num);
    return l8_fail(err, "%s: %s: element %llu%s is %s (%s 0x%0*x)", t->file, t->name,
                   (unsigned long long)i, where, num, l8_dtype_name(t->dtype), (int)(2 * es),
                   bits);
}

/* --- pass 1: find and check ------------------------------------------- */

/* What pass 2 does with a big tensor, in tasks of ROWS_PER_TASK rows. */
enum job_kind {
    PROJ_FP8,       /* codes used in place: scanned for NaN codes */
    PROJ_QUANTIZE,  /* dense projection: each row checked, then quantized */
    DENSE_SCAN,     /* embedding, lm_head: used in place, scanned */
};

struct weight_job {
    enum job_kind kind;
    const struct l8_tensor *w;      /* [out, in] */
    const struct l8_tensor *scale;  /* [out, 1] or [out], PROJ_FP8 only */
    struct l8_qweight *dst;         /* NULL for DENSE_SCAN */
    uint32_t out, in;
};

struct loader {
    const char *dir;
    const struct l8_config *c;
    const struct l8_tensor_set *ts;
    bool *used;                     /* [l8_st_count(ts)] */
    struct weight_job *jobs;        /* [7 * n_layers + 2] */
    uint32_t n_jobs;
    size_t arena_bytes;
    char *err;
};

static size_t align_up(size_t x)
{
    return (x + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

/* Carve the next aligned block out of the arena sized in pass 1. */
static void *take(uint8_t **a, size_t bytes)
{
    void *p = *a;
    *a += align_up(bytes);
    return p;
}

static void shape_str(const uint64_t *shape, uint32_t n, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (uint32_t i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "",
                              (unsigned long long)shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* Find a tensor and check its shape; dtype is checked by the caller, which
 * knows what it accepts. A 1-D "want" of n_want == 1 with allow_col also
 * accepts [d0, 1] (weight scales are stored either way). */
static int need(struct loader *L, const char *name, uint32_t n_want, const uint64_t *want,
                bool allow_col, const struct l8_tensor **out)
{
    const struct l8_tensor *t = l8_st_find(L->ts, name);
    if (!t)
        return l8_fail(L->err, "%s: missing tensor %s", L->dir, name);
    bool ok = t->n_dims == n_want;
    for (uint32_t i = 0; ok && i < n_want; i++)
        ok = t->shape[i] == want[i];
    if (!ok && allow_col && n_want == 1)
        ok = t->n_dims == 2 && t->shape[0] == want[0] && t->shape[1] == 1;
    if (!ok) {
        char got[128], exp[128];
        shape_str(t->shape, t->n_dims, got, sizeof got);
        shape_str(want, n_want, exp, sizeof exp);
        return l8_fail(L->err, "%s: %s: shape %s, expected %s%s", t->file, name, got,
                    exp, allow_col ? " or [out, 1]" : "");
    }
    L->used[t - l8_st_at(L->ts, 0)] = true;
    *out = t;
    return 0;
}

static int bad_dtype(struct loader *L, const struct l8_tensor *t, const char *expected)
{
    return l8_fail(L->err, "%s: %s: dtype %s, expected %s", t->file, t->name,
                l8_dtype_name(t->dtype), expected);
}

/* A dense tensor the engines read in place: its rows must be aligned for
 * their element type (safetensors does not promise it; torch's writer and
 * ours always give it). */
static int need_dense(struct loader *L, const char *name, uint32_t rows, uint32_t cols,
                      struct l8_dense *d)
{
    const struct l8_tensor *t;
    uint64_t shape[2] = { rows, cols };
    int r = need(L, name, 2, shape, false, &t);
    if (r)
        return r;
    if (!is_dense_dtype(t->dtype))
        return bad_dtype(L, t, "BF16, F16 or F32");
    if ((uintptr_t)t->data % l8_dtype_size(t->dtype))
        return l8_fail(L->err, "%s: %s: data not aligned to its %zu-byte elements",
                    t->file, name, l8_dtype_size(t->dtype));
    *d = (struct l8_dense){ .dtype = t->dtype, .data = t->data, .rows = rows, .cols = cols };
    L->jobs[L->n_jobs++] = (struct weight_job){ .kind = DENSE_SCAN, .w = t, .out = rows,
                                                .in = cols };
    return 0;
}

static int need_norm(struct loader *L, const char *name, const struct l8_tensor **out)
{
    uint64_t shape[1] = { L->c->hidden };
    int r = need(L, name, 1, shape, false, out);
    if (r)
        return r;
    if (!is_dense_dtype((*out)->dtype))
        return bad_dtype(L, *out, "BF16, F16 or F32");
    L->arena_bytes += align_up(L->c->hidden * sizeof(float));
    return 0;
}

static int need_proj(struct loader *L, uint32_t layer, const char *module, uint32_t out,
                     uint32_t in, struct l8_qweight *dst)
{
    char mod[160], name[192];
    const struct l8_tensor *w, *s = NULL;
    uint64_t shape[2] = { out, in };
    snprintf(mod, sizeof mod, "model.layers.%u.%s", layer, module);
    snprintf(name, sizeof name, "%s.weight", mod);
    int r = need(L, name, 2, shape, false, &w);
    if (r && L->c->kv_heads_absent && (!strcmp(module, "self_attn.k_proj") ||
                                       !strcmp(module, "self_attn.v_proj"))) {
        size_t n = strlen(L->err);
        snprintf(L->err + n, L8_ERRLEN - n, " (config.json has no \"num_key_value_heads\", "
                 "read as \"num_attention_heads\" = %u)", L->c->n_heads);
    }
    if (r)
        return r;

    bool fp8_ckpt = L->c->quant == L8_QUANT_FP8_DYNAMIC;
    /* A projection in quantization_config.ignore is stored dense in an
     * FP8 checkpoint. The engines only have FP8 projections, so it is
     * quantized at load with the same recipe, like a BF16 checkpoint. */
    bool dense_expected = !fp8_ckpt || l8_config_ignores(L->c, mod);
    struct weight_job *j = &L->jobs[L->n_jobs++];
    *j = (struct weight_job){ .w = w, .dst = dst, .out = out, .in = in };
    if (dense_expected) {
        if (!is_dense_dtype(w->dtype))
            return bad_dtype(L, w, fp8_ckpt ? "BF16, F16 or F32 (module is in"
                                              " quantization_config.ignore)"
                                            : "BF16, F16 or F32 (config.json has no"
                                              " quantization_config)");
        j->kind = PROJ_QUANTIZE;
        L->arena_bytes += align_up((size_t)out * in) + align_up(out * sizeof(float));
        return 0;
    }
    if (w->dtype != L8_F8_E4M3)
        return bad_dtype(L, w, "F8_E4M3");
    snprintf(name, sizeof name, "%s.weight_scale", mod);
    uint64_t sshape[1] = { out };
    if ((r = need(L, name, 1, sshape, true, &s)))
        return r;
    if (s->dtype != L8_BF16 && s->dtype != L8_F32)
        return bad_dtype(L, s, "BF16 or F32");
    j->kind = PROJ_FP8;
    j->scale = s;
    L->arena_bytes += align_up(out * sizeof(float));
    return 0;
}

/* --- pass 2: convert and check ----------------------------------------- */

struct load_pool {
    struct weight_job *jobs;
    uint32_t n_jobs;
    uint32_t *task_start;           /* [n_jobs + 1] prefix sums of tasks per job */
    atomic_uint next;
    uint32_t n_tasks;
    uint32_t max_in;                /* longest row quantized (0: none) */
    atomic_int failed;
    /* The first bad element in (job, element) order, whatever thread finds
     * which: so the message is the same at any thread count. Tasks of later
     * jobs than bad_job are skipped. */
    pthread_mutex_t mu;
    atomic_uint bad_job;            /* UINT32_MAX: none */
    uint64_t bad_elem;              /* under mu */
};

static void note_bad(struct load_pool *p, uint32_t j, uint64_t elem)
{
    pthread_mutex_lock(&p->mu);
    uint32_t bj = atomic_load(&p->bad_job);
    if (j < bj || (j == bj && elem < p->bad_elem)) {
        atomic_store(&p->bad_job, j);
        p->bad_elem = elem;
    }
    pthread_mutex_unlock(&p->mu);
}

/* Quantize rows [r0, r1) of j, each checked before it is decoded. Returns
 * the index in j->w of the first non-finite element, or UINT64_MAX. */
static uint64_t quantize_rows(const struct weight_job *j, uint32_t r0, uint32_t r1, float *row)
{
    uint8_t *codes = (uint8_t *)j->dst->w;
    float *scale = (float *)j->dst->scale;
    size_t esz = l8_dtype_size(j->w->dtype);
    for (uint32_t r = r0; r < r1; r++) {
        const uint8_t *src = (const uint8_t *)j->w->data + (size_t)r * j->in * esz;
        size_t bad = find_nonfinite(j->w->dtype, src, j->in);
        if (bad < j->in)
            return (uint64_t)r * j->in + bad;
        /* One loop per dtype: this runs over every weight of a BF16 8B
         * checkpoint, so keep the dtype switch out of it. */
        uint16_t h;
        switch (j->w->dtype) {
        case L8_BF16:
            for (uint32_t i = 0; i < j->in; i++) {
                memcpy(&h, src + 2 * (size_t)i, 2);
                row[i] = l8_bf16_to_f32(h);
            }
            break;
        case L8_F32:
            memcpy(row, src, (size_t)j->in * 4);
            break;
        default:
            for (uint32_t i = 0; i < j->in; i++)
                row[i] = dense_at(j->w->dtype, src, i);
        }
        uint16_t s = l8_quantize_weight_row(row, j->in, codes + (size_t)r * j->in);
        scale[r] = l8_bf16_to_f32(s);
    }
    return UINT64_MAX;
}

static void run_task(struct load_pool *p, uint32_t jn, uint32_t r0, uint32_t r1, float *row)
{
    const struct weight_job *j = &p->jobs[jn];
    uint64_t bad = UINT64_MAX;
    if (j->kind == PROJ_QUANTIZE) {
        bad = quantize_rows(j, r0, r1, row);
    } else {
        const size_t n = (size_t)(r1 - r0) * j->in;
        const uint8_t *src = (const uint8_t *)j->w->data +
                             (size_t)r0 * j->in * l8_dtype_size(j->w->dtype);
        size_t k = find_nonfinite(j->w->dtype, src, n);
        if (k < n)
            bad = (uint64_t)r0 * j->in + k;
    }
    if (bad != UINT64_MAX)
        note_bad(p, jn, bad);
}

static void *load_worker(void *arg)
{
    struct load_pool *p = arg;
    float *row = NULL;
    if (p->max_in && !(row = malloc(p->max_in * sizeof(float)))) {
        atomic_store(&p->failed, 1);
        return NULL;
    }
    uint32_t j = 0;
    for (;;) {
        uint32_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks)
            break;
        while (p->task_start[j + 1] <= t)   /* tasks are taken in order */
            j++;
        if (j > atomic_load(&p->bad_job))
            continue;
        uint32_t r0 = (t - p->task_start[j]) * ROWS_PER_TASK;
        uint32_t r1 = r0 + ROWS_PER_TASK;
        if (r1 > p->jobs[j].out)
            r1 = p->jobs[j].out;
        run_task(p, j, r0, r1, row);
    }
    free(row);
    return NULL;
}

/* Run every job's tasks on nthreads threads (0: one a core). */
static int run_jobs(struct weight_job *jobs, uint32_t n_jobs, int nthreads, char err[L8_ERRLEN])
{
    struct load_pool p = { .jobs = jobs, .n_jobs = n_jobs, .bad_job = UINT32_MAX };
    int r = 0;
    if (!(p.task_start = calloc(n_jobs + 1, sizeof *p.task_start)))
        return l8_fail_code(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&p.mu, NULL);
    for (uint32_t j = 0; j < n_jobs; j++) {
        p.task_start[j + 1] = p.task_start[j] + (jobs[j].out + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
        if (jobs[j].kind == PROJ_QUANTIZE && jobs[j].in > p.max_in)
            p.max_in = jobs[j].in;
    }
    p.n_tasks = p.task_start[n_jobs];
    if (p.n_tasks == 0)
        goto out;

    pthread_t tid[MAX_LOAD_THREADS];
    if (nthreads <= 0)
        nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nthreads < 1 ? 1 : nthreads > MAX_LOAD_THREADS ? MAX_LOAD_THREADS : nthreads;
    int started = 0;
    /* The calling thread is worker 0; a failed pthread_create only means
     * fewer helpers, never a failed load. */
    for (int i = 1; i < nt; i++) {
        if (pthread_create(&tid[started], NULL, load_worker, &p) != 0)
            break;
        started++;
    }
    load_worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (atomic_load(&p.bad_job) != UINT32_MAX)
        r = bad_value(err, jobs[p.bad_job].w, p.bad_elem);
    else if (atomic_load(&p.failed) && atomic_load(&p.next) < p.n_tasks)
        r = l8_fail_code(err, -ENOMEM, "out of memory quantizing weights");
out:
    pthread_mutex_destroy(&p.mu);
    free(p.task_start);
    return r;
}

/* A norm weight [n] to f32, refused if any element is NaN or infinite. */
static int decode_norm(const struct l8_tensor *t, uint32_t n, float *f, char err[L8_ERRLEN])
{
    size_t bad = find_nonfinite(t->dtype, t->data, n);
    if (bad < n)
        return bad_value(err, t, bad);
    for (uint32_t i = 0; i < n; i++)
        f[i] = dense_at(t->dtype, t->data, i);
    return 0;
}

/* A weight_scale [out] to f32. A scale of zero or below, or one that is
 * not finite, turns its whole output row into zeros, NaNs or sign flips:
 * refused. */
static int decode_scale(const struct l8_tensor *t, uint32_t out, float *f, char err[L8_ERRLEN])
{
    for (uint32_t o = 0; o < out; o++) {
        const float v = dense_at(t->dtype, t->data, o);
        if (!(v > 0.0f && v <= FLT_MAX)) {
            char num[16];
            num_str(v, num, sizeof num);
            return l8_fail(err, "%s: %s: element %u is %s, expected a finite scale > 0",
                           t->file, t->name, o, num);
        }
        f[o] = v;
    }
    return 0;
}

/* --- the whole model ---------------------------------------------------- */

void l8_model_free(struct l8_model *m)
{
    if (!m)
        return;
    l8_st_close(m->ts);
    free(m->layers);
    free(m->owned);
    free(m);
}

struct layer_tensors {
    const struct l8_tensor *attn_norm, *mlp_norm;
};

static const char *const proj_names[7] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};

int l8_model_load(const char *dir, int nthreads, struct l8_model **out, char err[L8_ERRLEN])
{
    struct l8_model *m = calloc(1, sizeof *m);
    struct layer_tensors *lt = NULL;
    struct loader L = { .dir = dir, .err = err };
    const struct l8_tensor *final_norm = NULL;
    int r;

    if (!m)
        return l8_fail_code(err, -ENOMEM, "%s: out of memory", dir);
    if (strlen(dir) >= sizeof m->dir) {
        r = l8_fail_code(err, -ENAMETOOLONG, "%s: path too long", dir);
        goto err;
    }
    strcpy(m->dir, dir);
    if ((r = l8_config_load(dir, &m->cfg, err)))
        goto err;
    if ((r = l8_st_open_dir(dir, &m->ts, err)))
        goto err;

    const struct l8_config *c = &m->cfg;
    L.c = c;
    L.ts = m->ts;
    uint32_t q_out = c->n_heads * c->head_dim, kv_out = c->n_kv_heads * c->head_dim;
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    lt = calloc(c->n_layers, sizeof *lt);
    L.used = calloc(l8_st_count(m->ts) + 1, sizeof *L.used);
    L.jobs = calloc((size_t)7 * c->n_layers + 2, sizeof *L.jobs);
    if (!m->layers || !lt || !L.used || !L.jobs) {
        r = l8_fail_code(err, -ENOMEM, "%s: out of memory", dir);
        goto err;
    }

    /* Pass 1. */
    if ((r = need_dense(&L, "model.embed_tokens.weight", c->vocab, c->hidden, &m->embed)))
        goto err;
    const struct l8_tensor *lm = l8_st_find(m->ts, "lm_head.weight");
    if (c->tie_embeddings) {
        /* Tied: lm_head is embed_tokens (Hugging Face ties them even when
         * a copy is stored); a stored copy is accepted and left unused. */
        m->lm_head = m->embed;
        if (lm)
            L.used[lm - l8_st_at(m->ts, 0)] = true;
    } else if (!lm) {
        r = l8_fail(err, "%s: missing tensor lm_head.weight (tie_word_embeddings is false)", dir);
        goto err;
    } else if ((r = need_dense(&L, "lm_head.weight", c->vocab, c->hidden, &m->lm_head))) {
        goto err;
    }
    if ((r = need_norm(&L, "model.norm.weight", &final_norm)))
        goto err;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        char name[160];
        struct l8_layer *ly = &m->layers[l];
        snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", l);
        if ((r = need_norm(&L, name, &lt[l].attn_norm)))
            goto err;
        snprintf(name, sizeof name, "model.layers.%u.post_attention_layernorm.weight", l);
        if ((r = need_norm(&L, name, &lt[l].mlp_norm)))
            goto err;
        struct l8_qweight *dst[7] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo,
                                      &ly->wgate, &ly->wup, &ly->wdown };
        uint32_t outs[7] = { q_out, kv_out, kv_out, c->hidden, c->inter, c->inter, c->hidden };
        uint32_t ins[7] = { c->hidden, c->hidden, c->hidden, q_out, c->hidden, c->hidden,
                            c->inter };
        for (int p = 0; p < 7; p++)
            if ((r = need_proj(&L, l, proj_names[p], outs[p], ins[p], dst[p])))
                goto err;
    }
    /* Anything left over means the checkpoint is not the model config.json
     * describes (more layers, biases, static activation scales): running it
     * anyway would silently compute something else. */
    for (uint32_t i = 0; i < l8_st_count(m->ts); i++) {
        const struct l8_tensor *t = l8_st_at(m->ts, i);
        size_t n = strlen(t->name);
        static const char inv[] = "rotary_emb.inv_freq";   /* old checkpoints */
        if (L.used[i] || (n >= sizeof inv - 1 && !strcmp(t->name + n - (sizeof inv - 1), inv)))
            continue;
        r = l8_fail(err, "%s: %s: unexpected tensor (not part of a LlamaForCausalLM with this"
                 " config.json)", t->file, t->name);
        goto err;
    }
    L.arena_bytes += align_up(c->head_dim / 2 * sizeof(float));

    /* Pass 2. */
    if (posix_memalign(&m->owned, ARENA_ALIGN, L.arena_bytes ? L.arena_bytes : ARENA_ALIGN)) {
        m->owned = NULL;
        r = l8_fail_code(err, -ENOMEM, "%s: out of memory (%zu bytes for converted weights)", dir,
                      L.arena_bytes);
        goto err;
    }
    uint8_t *a = m->owned;
    float *f;

    m->rope_inv_freq = (float *)take(&a, c->head_dim / 2 * sizeof(float));
    l8_rope_inv_freq(c, m->rope_inv_freq);
    m->final_norm = f = (float *)take(&a, c->hidden * sizeof(float));
    if ((r = decode_norm(final_norm, c->hidden, f, err)))
        goto err;
    m->weight_bytes = m->embed.data != m->lm_head.data
                          ? m->embed.rows * (uint64_t)m->embed.cols * l8_dtype_size(m->embed.dtype) +
                            m->lm_head.rows * (uint64_t)m->lm_head.cols * l8_dtype_size(m->lm_head.dtype)
                          : m->embed.rows * (uint64_t)m->embed.cols * l8_dtype_size(m->embed.dtype);
    m->weight_bytes += c->hidden * sizeof(float) * (1 + 2 * (uint64_t)c->n_layers);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        m->layers[l].attn_norm = f = (float *)take(&a, c->hidden * sizeof(float));
        if ((r = decode_norm(lt[l].attn_norm, c->hidden, f, err)))
            goto err;
        m->layers[l].mlp_norm = f = (float *)take(&a, c->hidden * sizeof(float));
        if ((r = decode_norm(lt[l].mlp_norm, c->hidden, f, err)))
            goto err;
    }
    for (uint32_t j = 0; j < L.n_jobs; j++) {
        struct weight_job *pj = &L.jobs[j];
        struct l8_qweight *q = pj->dst;
        if (pj->kind == DENSE_SCAN)
            continue;
        q->out = pj->out;
        q->in = pj->in;
        q->scale = f = (float *)take(&a, pj->out * sizeof(float));
        if (pj->kind == PROJ_FP8) {
            q->w = pj->w->data;     /* in place, in the read-only mapping */
            if ((r = decode_scale(pj->scale, pj->out, f, err)))
                goto err;
        } else {
            q->w = take(&a, (size_t)pj->out * pj->in);
        }
        m->weight_bytes += (uint64_t)pj->out * pj->in + pj->out * sizeof(float);
    }
    if ((r = run_jobs(L.jobs, L.n_jobs, nthreads, err)))
        goto err;

    free(lt);
    free(L.used);
    free(L.jobs);
    *out = m;
    return 0;
err:
    free(lt);
    free(L.used);
    free(L.jobs);
    l8_model_free(m);
    return r;
}
