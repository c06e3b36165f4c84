/* model.c - bind a checkpoint's tensors to the model's canonical form.
 * See model.h.
 *
 * Two passes: the first finds every tensor, checks its dtype and exact
 * shape against config.json and adds up the bytes the converted forms need;
 * the second allocates one arena and fills it (norms and scales to f32,
 * dense projections quantized to FP8 on nthreads threads). So a bad
 * checkpoint fails before any large allocation, and nothing is allocated
 * per tensor. */
#include "model.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "fail.h"

#define ARENA_ALIGN 64          /* cache line: engines stream these rows */
#define QUANT_ROWS_PER_TASK 64  /* load-time quantization work unit */
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

/* --- pass 1: find and check ------------------------------------------- */

enum proj_kind { PROJ_FP8, PROJ_QUANTIZE };

struct proj_job {
    enum proj_kind kind;
    const struct l8_tensor *w;      /* [out, in] */
    const struct l8_tensor *scale;  /* [out, 1] or [out], PROJ_FP8 only */
    struct l8_qweight *dst;
    uint32_t out, in;
};

struct loader {
    const char *dir;
    const struct l8_config *c;
    const struct l8_tensor_set *ts;
    bool *used;                     /* [l8_st_count(ts)] */
    struct proj_job *jobs;          /* [7 * n_layers] */
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
    struct proj_job *j = &L->jobs[L->n_jobs++];
    *j = (struct proj_job){ .w = w, .dst = dst, .out = out, .in = in };
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

/* --- pass 2: convert --------------------------------------------------- */

struct quant_pool {
    struct proj_job *jobs;
    uint32_t n_jobs;
    uint32_t *task_start;           /* [n_jobs + 1] prefix sums of tasks per job */
    atomic_uint next;
    uint32_t n_tasks;
    uint32_t max_in;
    atomic_int failed;
};

static void quantize_rows(const struct proj_job *j, uint32_t r0, uint32_t r1, float *row)
{
    uint8_t *codes = (uint8_t *)j->dst->w;
    float *scale = (float *)j->dst->scale;
    size_t esz = l8_dtype_size(j->w->dtype);
    for (uint32_t r = r0; r < r1; r++) {
        const uint8_t *src = (const uint8_t *)j->w->data + (size_t)r * j->in * esz;
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
}

static void *quant_worker(void *arg)
{
    struct quant_pool *p = arg;
    float *row = malloc(p->max_in * sizeof(float));
    if (!row) {
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
        uint32_t r0 = (t - p->task_start[j]) * QUANT_ROWS_PER_TASK;
        uint32_t r1 = r0 + QUANT_ROWS_PER_TASK;
        if (r1 > p->jobs[j].out)
            r1 = p->jobs[j].out;
        quantize_rows(&p->jobs[j], r0, r1, row);
    }
    free(row);
    return NULL;
}

static int run_quantize(struct proj_job *jobs, uint32_t n_jobs, int nthreads, char err[L8_ERRLEN])
{
    struct quant_pool p = { .jobs = jobs, .n_jobs = n_jobs };
    int r = 0;
    if (!(p.task_start = calloc(n_jobs + 1, sizeof *p.task_start)))
        return l8_fail_code(err, -ENOMEM, "out of memory");
    for (uint32_t j = 0; j < n_jobs; j++) {
        uint32_t n = jobs[j].kind == PROJ_QUANTIZE
                         ? (jobs[j].out + QUANT_ROWS_PER_TASK - 1) / QUANT_ROWS_PER_TASK : 0;
        p.task_start[j + 1] = p.task_start[j] + n;
        if (jobs[j].kind == PROJ_QUANTIZE && jobs[j].in > p.max_in)
            p.max_in = jobs[j].in;
    }
    p.n_tasks = p.task_start[n_jobs];
    if (p.n_tasks == 0)
        goto out;

    pthread_t tid[MAX_LOAD_THREADS];
    int nt = nthreads < 1 ? 1 : nthreads > MAX_LOAD_THREADS ? MAX_LOAD_THREADS : nthreads;
    int started = 0;
    /* The calling thread is worker 0; a failed pthread_create only means
     * fewer helpers, never a failed load. */
    for (int i = 1; i < nt; i++) {
        if (pthread_create(&tid[started], NULL, quant_worker, &p) != 0)
            break;
        started++;
    }
    quant_worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (atomic_load(&p.failed) && atomic_load(&p.next) < p.n_tasks)
        r = l8_fail_code(err, -ENOMEM, "out of memory quantizing weights");
out:
    free(p.task_start);
    return r;
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
    L.jobs = calloc((size_t)7 * c->n_layers, sizeof *L.jobs);
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
    for (uint32_t i = 0; i < c->hidden; i++)
        f[i] = dense_at(final_norm->dtype, final_norm->data, i);
    m->weight_bytes = m->embed.data != m->lm_head.data
                          ? m->embed.rows * (uint64_t)m->embed.cols * l8_dtype_size(m->embed.dtype) +
                            m->lm_head.rows * (uint64_t)m->lm_head.cols * l8_dtype_size(m->lm_head.dtype)
                          : m->embed.rows * (uint64_t)m->embed.cols * l8_dtype_size(m->embed.dtype);
    m->weight_bytes += c->hidden * sizeof(float) * (1 + 2 * (uint64_t)c->n_layers);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        m->layers[l].attn_norm = f = (float *)take(&a, c->hidden * sizeof(float));
        for (uint32_t i = 0; i < c->hidden; i++)
            f[i] = dense_at(lt[l].attn_norm->dtype, lt[l].attn_norm->data, i);
        m->layers[l].mlp_norm = f = (float *)take(&a, c->hidden * sizeof(float));
        for (uint32_t i = 0; i < c->hidden; i++)
            f[i] = dense_at(lt[l].mlp_norm->dtype, lt[l].mlp_norm->data, i);
    }
    for (uint32_t j = 0; j < L.n_jobs; j++) {
        struct proj_job *pj = &L.jobs[j];
        struct l8_qweight *q = pj->dst;
        q->out = pj->out;
        q->in = pj->in;
        q->scale = f = (float *)take(&a, pj->out * sizeof(float));
        if (pj->kind == PROJ_FP8) {
            q->w = pj->w->data;     /* in place, in the read-only mapping */
            for (uint32_t o = 0; o < pj->out; o++)
                f[o] = dense_at(pj->scale->dtype, pj->scale->data, o);
        } else {
            q->w = take(&a, (size_t)pj->out * pj->in);
        }
        m->weight_bytes += (uint64_t)pj->out * pj->in + pj->out * sizeof(float);
    }
    if ((r = run_quantize(L.jobs, L.n_jobs, nthreads, err)))
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
