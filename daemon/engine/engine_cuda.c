/* engine_cuda.c - the CUDA engine: the model resident on one GPU.
 *
 * Numerics (engine.h):
 *   exact: f32 activations into every product (FP8 weights decoded exactly
 *          in the GEMV kernel), f32 KV pool. Slow; it is the layout check
 *          against the golden data and the CPU engine.
 *   fp8:   each projection's input quantized per token to E4M3 (fused into
 *          RMSNorm / SiLU*up / a quantize kernel), FP8 x FP8 products with
 *          f32 accumulation and per-token x per-row scales (weight-streaming
 *          GEMV up to a measured row count per product, cuda_tune.h;
 *          cuBLASLt FP8 GEMM above), bf16 KV.
 *   Residual stream, norms, RoPE, softmax and lm_head are f32 in both (the
 *   lm_head takes bf16 activations through cuBLASLt for many rows in fp8).
 *   Attention: prefill chunks on the bf16 pool go to the tile kernel
 *   (tensor cores: q and the softmax weights rounded to bf16 for the
 *   products); decode rows, and every row in exact, to the row kernel (f32).
 *
 * Weights: q/k/v and gate/up are concatenated along their output rows at
 * load, so each is one product. The upload, fast and verified, is
 * cuda_upload.c's.
 *
 * A step: one packed metadata upload, the layers on one stream, logits for
 * the requested rows in chunks, sampling on the GPU (u from the host's
 * Philox so it is the CPU's number), one synchronization, results copied
 * out. Steps are synchronous (engine.h); the daemon runs them on its engine
 * thread. */
#include "engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <cuda_runtime_api.h>

#include "cuda_profile.h"
#include "cuda_tune.h"
#include "cuda_upload.h"
#include "l8_build.h"
#include "l8_kernels.h"
#include "sampler.h"
#include "../model/numerics.h"

#define FREE_MEM_RESERVE (1ull << 30)     /* left free: cuBLASLt's kernels load lazily */
#define ATTN_MAX_ROWS 65535u              /* l8k_attention: rows are grid.y */
#define GRAPH_MAX 64u                     /* captured decode graphs kept */
#define GRAPH_MIN_KV 1024u                /* smallest kv bucket of a decode graph */

struct gw {                 /* an FP8 projection on the GPU */
    uint8_t *w;             /* [n, k] E4M3 codes */
    float *s;               /* [n] per-row scale */
    uint32_t n, k;
};

struct glayer {
    float *attn_norm, *mlp_norm;  /* [hidden] */
    struct gw qkv;                /* [(nh + 2 nkv) D, hidden]: q rows, then k, then v */
    struct gw o;                  /* [hidden, nh D] */
    struct gw gu;                 /* [2 inter, hidden]: gate rows, then up */
    struct gw down;               /* [hidden, inter] */
};

struct meta_layout {        /* offsets (in int32 units) into the metadata block */
    size_t tok, pos, slot, row_seq, kv_len, logit_rows, tiles, drows, pt, total;
};

struct dgraph {             /* a decode step captured for (B rows, kv bucket) */
    uint32_t B, kvb;
    bool warm;              /* ran once eagerly: the next use captures */
    bool failed;            /* capture failed: this key stays eager */
    cudaGraphExec_t exec;
};

/* 32-bit words of a token mask (l8_seq.allowed) over a vocabulary of V ids. */
static inline uint32_t mask_words(uint32_t V) { return (V + 31) / 32; }

struct cuda_engine {
    l8_engine_log_fn *log;        /* the engine's messages (engine.h) */
    void *log_ud;
    l8_masks_wait_fn *masks_wait; /* this step's (engine.h), until called */
    void *masks_ud;
    const struct l8_model *m;
    const struct l8_config *c;
    enum l8_numerics num;
    uint32_t page_size;           /* positions per KV page */
    uint32_t n_pages, max_tokens, max_seqs, max_pages_seq;
    uint32_t logit_chunk;         /* logit rows computed at once (a step's rows go
                                     through lm_head and sampling in chunks of this
                                     many): max(max_seqs, 64), the rows of fin .. h_lp */
    uint32_t in_max;              /* the widest product input: max(hidden, inter, nh D) */
    struct l8_tune tune;          /* GEMV up to tune.gemv_max_m[product] rows */
    cudaStream_t st;
    struct l8k_blas *blas;
    struct l8_cuda_prof *prof;    /* the step profile (opts' profile_file), or NULL */

    struct glayer *L;             /* [n_layers] */
    void *embed, *lm_head;        /* [vocab, hidden] BF16 or F32 */
    enum l8k_dtype embed_dt, lm_dt;
    bool lm_shared;
    float *final_norm;            /* [hidden] */
    float *inv_freq;              /* [head_dim / 2] */
    int32_t *tune_rope;           /* while measuring the crossover: [64] of -1 */
    uint32_t tune_pinned[L8_TUNE_FP8]; /* while timing candidates: rank + 1 pinned */
    uint32_t refused_seen;        /* l8k_blas_refused when last logged */

    void *kv;                     /* pool[layer][kv][page][kv_head][slot][head_dim] */
    enum l8k_dtype kv_dt;
    size_t kv_half;               /* elements of one (layer, kv) slab */

    /* Activations, [max_tokens, ...]. */
    float *x;                     /* [T, hidden] residual stream */
    float *y;                     /* [T, hidden] projection output */
    float *qkv;                   /* [T, (nh + 2 nkv) D] */
    float *att;                   /* [T, nh D] */
    float *gu;                    /* [T, 2 inter] */
    float *act;                   /* [T, max(hidden, inter, nh D)] f32 product input (exact) */
    uint8_t *xq;                  /* [T, max(...)] E4M3 product input (fp8) */
    float *xs;                    /* [T] per-token scales */
    float *attn_work;
    size_t attn_work_floats;
    float *fin;                   /* [logit_chunk, hidden] final-normed rows (f32) */
    uint16_t *fin16;              /* [logit_chunk, hidden] the same in bf16 (cuBLASLt lm_head) */
    float *logits;                /* [logit_chunk, vocab] */
    float *samp_scr;              /* [logit_chunk, vocab] */
    struct l8k_sample_req *d_req; /* [logit_chunk] */
    uint32_t *d_mask;             /* [logit_chunk, (vocab + 31) / 32] token masks */
    int32_t *d_tok;               /* [logit_chunk] */
    float *d_lp;                  /* [logit_chunk] */
    int32_t *d_hist;              /* history ids, grows */
    size_t hist_cap;

    /* Step metadata: one pinned host block mirrored by one device block. */
    int32_t *h_meta, *d_meta;
    size_t meta_cap;              /* int32 elements */
    float *h_logits;              /* [logit_chunk, vocab] pinned */
    struct l8k_sample_req *h_req; /* [logit_chunk] pinned */
    uint32_t *req_seq;            /* [logit_chunk] the sequence of each h_req */
    uint32_t *req_j;              /* [logit_chunk] and which of its samples (l8_seq.n_draft) */
    uint32_t *h_mask;             /* [logit_chunk, (vocab + 31) / 32] pinned */
    int32_t *h_tok;               /* [logit_chunk] pinned */
    float *h_lp;                  /* [logit_chunk] pinned */
    int32_t *h_hist;              /* pinned, hist_cap */

    /* Host scratch. */
    uint32_t *rows;               /* [max_tokens] logit rows of the step */
    int32_t *rm_first;            /* [max_seqs] each sequence's first logit row */
    uint32_t *rm_cnt;             /* [max_seqs] and how many it has */

    /* Decode graphs. */
    bool use_graphs;
    uint32_t graph_max_b, graph_max_kv;
    struct dgraph graphs[GRAPH_MAX];
    uint32_t n_graphs;
    uint64_t graph_launches;
    int32_t *h_gmeta, *d_gmeta;   /* the graphs' metadata, pinned / device */
};

/* ---- helpers ------------------------------------------------------------ */

/* A message to the engine's log callback, at a syslog level. */
#define SAY(e, level, ...) l8_engine_logf((e)->log, (e)->log_ud, (level), __VA_ARGS__)

/* The length of a report without its trailing newline (for "%.*s"). */
static int chomp(const char *s)
{
    size_t n = strlen(s);
    while (n && s[n - 1] == '\n')
        n--;
    return (int)n;
}

/* A CUDA runtime call of a creation step: on failure err says where and
 * what, and the step returns -ENOMEM or -EIO. */
#define CK(call)                                                              \
    do {                                                                      \
        cudaError_t ck_ = (call);                                             \
        if (ck_ != cudaSuccess) {                                             \
            snprintf(err, L8_ERRLEN, "%s:%d: %s", __FILE__, __LINE__,         \
                     cudaGetErrorString(ck_));                                \
            return ck_ == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;         \
        }                                                                     \
    } while (0)

static int dmalloc(void **p, size_t bytes, uint64_t *total)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    if (cudaMalloc(p, bytes) != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return -ENOMEM;
    }
    *total += bytes;
    return 0;
}

/* ---- create / destroy -------------------------------------------------- */

static void cuda_destroy(void *impl);

/* A dense [rows, cols] matrix in a dtype the kernels read (BF16 as stored,
 * F32 as stored, F16 widened to F32 exactly). *conv holds converted data. */
static int dense_source(const struct l8_dense *d, const void **src, enum l8k_dtype *dt,
                        size_t *bytes, void **conv)
{
    size_t n = (size_t)d->rows * d->cols;
    *conv = NULL;
    if (d->dtype == L8_BF16) {
        *src = d->data;
        *dt = L8K_BF16;
        *bytes = n * 2;
        return 0;
    }
    if (d->dtype == L8_F32) {
        *src = d->data;
        *dt = L8K_F32;
        *bytes = n * 4;
        return 0;
    }
    float *f = malloc(n * 4);
    if (!f)
        return -ENOMEM;
    for (uint32_t r = 0; r < d->rows; r++)
        l8_dense_row(d, r, f + (size_t)r * d->cols);
    *conv = f;
    *src = f;
    *dt = L8K_F32;
    *bytes = n * 4;
    return 0;
}

/* T rows, S sequences, L logit rows, NT prefill tiles, ND decode rows
 * beside them (NT = 0: the row kernel takes every row). */
static void meta_plan(struct cuda_engine *e, uint32_t T, uint32_t S, uint32_t pt_stride,
                      uint32_t L, uint32_t NT, uint32_t ND, struct meta_layout *ml)
{
    size_t o = 0;
    ml->tok = o; o += T;
    ml->pos = o; o += T;
    ml->slot = o; o += T;
    ml->row_seq = o; o += T;
    ml->kv_len = o; o += T;
    ml->logit_rows = o; o += L;
    ml->tiles = o; o += (size_t)4 * NT;
    ml->drows = o; o += ND;
    o = (o + 3) & ~(size_t)3;
    ml->pt = o; o += (size_t)S * pt_stride;
    ml->total = o;
    (void)e;
}

/* Whether product p of T rows runs through the GEMV (else cuBLASLt). */
static bool uses_gemv(const struct cuda_engine *e, enum l8_tune_product p, uint32_t T)
{
    return e->num == L8_NUMERICS_EXACT || T <= e->tune.gemv_max_m[p];
}

/* The dtype product p writes through cuBLASLt: f32, but bf16 for gate/up
 * where the library gives it. Its output is the largest a step makes (a
 * 512-token prefill's is 59 MB a layer in f32, more than the L2), written
 * and read back once by SiLU; in bf16 it is half the bytes and stays in the
 * L2. Its rounding (2^-8 relative at most) is far below the FP8
 * quantization that follows SiLU (2^-4). The GEMV writes f32 (its output
 * is small). */
static enum l8k_dtype gemm_out_dt(const struct cuda_engine *e, enum l8_tune_product p)
{
    return p == L8_TP_GATE_UP && l8k_blas_fp8_path(e->blas, L8K_BF16) != L8K_FP8_NONE
               ? L8K_BF16 : L8K_F32;
}

/* The dtype product p of T rows writes in a step. */
static enum l8k_dtype out_dt(const struct cuda_engine *e, enum l8_tune_product p, uint32_t T)
{
    return uses_gemv(e, p, T) ? L8K_F32 : gemm_out_dt(e, p);
}

/* The weights and output of FP8 product p in layer l. */
static const struct gw *product_w(const struct cuda_engine *e, enum l8_tune_product p, uint32_t l)
{
    const struct glayer *g = &e->L[l];
    return p == L8_TP_QKV ? &g->qkv : p == L8_TP_O ? &g->o : p == L8_TP_GATE_UP ? &g->gu
                                                                              : &g->down;
}
static void *product_y(const struct cuda_engine *e, enum l8_tune_product p)
{
    return p == L8_TP_QKV ? (void *)e->qkv : p == L8_TP_GATE_UP ? (void *)e->gu : (void *)e->y;
}

/* cuda_tune.h's run: product p at M rows over every layer, on inputs that
 * choose_tuning filled (their values do not matter to the time). qkv is
 * timed as each path runs it in a step: the GEMV with RoPE in its epilogue,
 * cuBLASLt followed by rope_kv (tune_rope: positions and slots of -1, so
 * nothing is stored). */
static int tune_run(void *ctx, enum l8_tune_product p, uint32_t M, bool gemm)
{
    struct cuda_engine *e = ctx;
    const uint32_t H = e->c->hidden, V = e->c->vocab, D = e->c->head_dim, nh = e->c->n_heads,
                   nkv = e->c->n_kv_heads;
    if (p == L8_TP_LM_HEAD) {
        if (gemm)
            return e->lm_dt == L8K_BF16
                       ? l8k_gemm_bf16(e->blas, e->lm_head, e->fin16, M, V, H, e->logits, e->st)
                       : -ENOTSUP;
        return l8k_gemv(e->lm_head, e->lm_dt, NULL, e->fin, L8K_F32, NULL, M, V, H, e->logits, V,
                        e->st);
    }
    for (uint32_t l = 0; l < e->c->n_layers; l++) {
        const struct gw *W = product_w(e, p, l);
        float *y = product_y(e, p);
        int rc = gemm ? l8k_gemm_fp8(e->blas, W->w, W->s, e->xq, e->xs, M, W->n, W->k,
                                     gemm_out_dt(e, p), y, e->st)
                 : p == L8_TP_QKV
                     ? l8k_gemv_qkv_rope(W->w, W->s, e->xq, L8K_FP8, e->xs, M, W->k, y, W->n,
                                         e->tune_rope, e->inv_freq, nh, nkv, D, e->kv, e->kv,
                                         e->kv_dt, e->page_size, e->tune_rope, e->st)
                     : l8k_gemv(W->w, L8K_FP8, W->s, e->xq, L8K_FP8, e->xs, M, W->n, W->k, y,
                                W->n, e->st);
        if (!rc && gemm && p == L8_TP_QKV)   /* a step follows cuBLASLt's qkv with rope_kv */
            rc = l8k_rope_kv(y, W->n, e->tune_rope, e->inv_freq, M, nh, nkv, D, e->kv, e->kv,
                             e->kv_dt, e->page_size, e->tune_rope, e->st);
        if (rc)
            return rc;
    }
    return 0;
}

/* Pin cuBLASLt's candidate `rank` for FP8 product p at M rows, every layer. */
static int pin_algo(struct cuda_engine *e, enum l8_tune_product p, uint32_t M, uint32_t rank)
{
    for (uint32_t l = 0; l < e->c->n_layers; l++) {
        const struct gw *W = product_w(e, p, l);
        int rc = l8k_gemm_fp8_pin(e->blas, W->w, W->s, e->xq, e->xs, M, W->n, W->k,
                                  gemm_out_dt(e, p), product_y(e, p), rank);
        if (rc)
            return rc;
    }
    return 0;
}

/* cuda_tune.h's algorithm run: p at M rows through cuBLASLt with its
 * candidate `rank`, every layer (pinned once, outside the timed calls). */
static int tune_algo(void *ctx, enum l8_tune_product p, uint32_t M, uint32_t rank)
{
    struct cuda_engine *e = ctx;
    int rc;
    if (e->tune_pinned[p] != rank + 1) {
        if ((rc = pin_algo(e, p, M, rank)))
            return rc;
        e->tune_pinned[p] = rank + 1;
    }
    for (uint32_t l = 0; l < e->c->n_layers; l++) {
        const struct gw *W = product_w(e, p, l);
        if ((rc = l8k_gemm_fp8(e->blas, W->w, W->s, e->xq, e->xs, M, W->n, W->k,
                               gemm_out_dt(e, p), product_y(e, p), e->st)))
            return rc;
    }
    return 0;
}

/* Product inputs of moderate size for timing, M rows (and the lm_head's
 * too): E4M3 1.0 codes, scales and activations ~0.01 (their values do not
 * matter to the time). */
static int fill_tune_inputs(struct cuda_engine *e, size_t M, bool lm_head)
{
    if (cudaMemsetAsync(e->xq, 0x38, M * e->in_max, e->st) != cudaSuccess ||
        cudaMemsetAsync(e->xs, 0x3c, M * 4, e->st) != cudaSuccess ||
        (lm_head &&
         (cudaMemsetAsync(e->fin, 0x3c, M * e->c->hidden * 4, e->st) != cudaSuccess ||
          cudaMemsetAsync(e->fin16, 0x3c, M * e->c->hidden * 2, e->st) != cudaSuccess))) {
        cudaGetLastError();
        return -EIO;
    }
    return 0;
}

/* Says when cuBLASLt has refused new product shapes on the chosen FP8
 * path (they ran on a slower one: l8k_gemm_fp8), so a slow run shows why. */
static void log_refusals(struct cuda_engine *e)
{
    const uint32_t n = l8k_blas_refused(e->blas);
    if (n == e->refused_seen)
        return;
    SAY(e, LOG_WARNING, "cuda: cuBLASLt refused %u product shape%s on FP8 path %d (bf16 out "
        "%d); %s on the next path whose probe passed", n - e->refused_seen,
        n - e->refused_seen == 1 ? "" : "s", (int)l8k_blas_fp8_path(e->blas, L8K_F32),
        (int)l8k_blas_fp8_path(e->blas, L8K_BF16), n - e->refused_seen == 1 ? "it runs" :
        "they run");
    e->refused_seen = n;
}

/* The rows up to which each product uses the GEMV (fp8 numerics; exact
 * always uses it): o->gemv_max_m for every product when o->gemv_fixed
 * (experiments; then cuBLASLt's default algorithms), else tune_file's line
 * for this device and model, else measured; and cuBLASLt's algorithm for
 * each FP8 product at a full step (cuda_tune.h), from the line or measured,
 * and at the line's other row counts up to a full step. What was measured
 * is kept in tune_file when there is one. Says which in the log. */
static int choose_tuning(struct cuda_engine *e, const struct l8_engine_opts *o,
                         char err[L8_ERRLEN])
{
    const struct l8_config *c = e->c;
    const char *tune_file = o->tune_file;
    if (e->num == L8_NUMERICS_EXACT)
        return 0;
    if (o->gemv_fixed) {
        for (int p = 0; p < L8_TP_N; p++)
            e->tune.gemv_max_m[p] = o->gemv_max_m;
        SAY(e, LOG_INFO, "cuda: GEMV up to %u rows for every product, as given (gemv_max_m)",
            o->gemv_max_m);
        return 0;
    }
    char key[L8_TUNE_KEY_MAX], dev[256], lerr[256], report[2048];
    if (l8k_device_key(dev, sizeof dev) < 0) {
        snprintf(err, L8_ERRLEN, "cannot describe the CUDA device");
        return -EIO;
    }
    snprintf(key, sizeof key, "%s, fp8 path %d/%d | hidden %u inter %u qkv %u layers %u vocab %u "
             "lm_head %s", dev, (int)l8k_blas_fp8_path(e->blas, L8K_F32),
             (int)l8k_blas_fp8_path(e->blas, L8K_BF16), c->hidden, c->inter,
             (c->n_heads + 2 * c->n_kv_heads) * c->head_dim, c->n_layers, c->vocab,
             e->lm_dt == L8K_BF16 ? "bf16" : "f32");
    int rc = tune_file ? l8_tune_load(tune_file, key, &e->tune, lerr, sizeof lerr) : -ENOENT;
    bool changed = false;
    if (rc == 0) {
        SAY(e, LOG_INFO, "cuda: GEMV up to qkv %u, o %u, gate_up %u, down %u, lm_head %u rows "
            "(from %s)", e->tune.gemv_max_m[L8_TP_QKV], e->tune.gemv_max_m[L8_TP_O],
            e->tune.gemv_max_m[L8_TP_GATE_UP], e->tune.gemv_max_m[L8_TP_DOWN],
            e->tune.gemv_max_m[L8_TP_LM_HEAD], tune_file);
    } else {
        if (rc == -EINVAL)
            SAY(e, LOG_WARNING, "cuda: %s; measuring again", lerr);
        const size_t M = L8_TUNE_MAX_M;
        if (fill_tune_inputs(e, M, true)) {
            snprintf(err, L8_ERRLEN, "measuring the GEMV / cuBLASLt crossover: memset failed");
            return -EIO;
        }
        if (cudaMalloc((void **)&e->tune_rope, M * 4) != cudaSuccess ||
            cudaMemsetAsync(e->tune_rope, 0xff, M * 4, e->st) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(e->tune_rope);
            e->tune_rope = NULL;
            snprintf(err, L8_ERRLEN, "measuring the GEMV / cuBLASLt crossover: no device memory");
            return -ENOMEM;
        }
        rc = l8_tune_measure(e->st, tune_run, e, &e->tune, report, sizeof report);
        cudaFree(e->tune_rope);
        e->tune_rope = NULL;
        if (rc) {
            snprintf(err, L8_ERRLEN, "measuring the GEMV / cuBLASLt crossover failed (%d)", rc);
            return rc;
        }
        SAY(e, LOG_INFO, "cuda: GEMV / cuBLASLt crossover measured:\n%.*s", chomp(report), report);
        e->tune.n_sets = 0;
        changed = true;
    }
    /* cuBLASLt's algorithms at a full step (the bf16 decode path takes no pins) */
    const uint32_t M = e->max_tokens;
    if (l8k_blas_fp8_path(e->blas, L8K_F32) != L8K_FP8_BF16 && !l8_tune_algos(&e->tune, M)) {
        if (fill_tune_inputs(e, M, false)) {
            snprintf(err, L8_ERRLEN, "timing cuBLASLt's algorithms: memset failed");
            return -EIO;
        }
        memset(e->tune_pinned, 0, sizeof e->tune_pinned);
        struct l8_algo_set set;
        rc = l8_tune_measure_algos(e->st, tune_algo, e, M, &set, report, sizeof report);
        for (int p = 0; p < L8_TUNE_FP8; p++)   /* back to the default until applied */
            if (e->tune_pinned[p])
                pin_algo(e, (enum l8_tune_product)p, M, 0);
        if (rc) {
            snprintf(err, L8_ERRLEN, "timing cuBLASLt's algorithms failed (%d)", rc);
            return rc;
        }
        SAY(e, LOG_INFO, "cuda: cuBLASLt's algorithms timed:\n%.*s", chomp(report), report);
        l8_tune_add_algos(&e->tune, &set);
        changed = true;
    }
    /* every row count the line has choices for that a step can have (a
     * llama8-run's prompt length: so llama8d runs that prompt as it did) */
    for (uint32_t i = 0; i < e->tune.n_sets; i++) {
        const struct l8_algo_set *set = &e->tune.set[i];
        if (set->m > M)
            continue;
        for (int p = 0; p < L8_TUNE_FP8; p++) {
            const uint32_t r = set->rank[p];
            if (r && set->m > e->tune.gemv_max_m[p] &&
                (rc = pin_algo(e, (enum l8_tune_product)p, set->m, r)))
                SAY(e, LOG_WARNING, "cuda: cannot use cuBLASLt's candidate %u for %s at %u rows "
                    "(%s); its first instead", r, l8_tune_product_name[p], set->m,
                    strerror(-rc));
        }
    }
    if (changed && tune_file && (rc = l8_tune_save(tune_file, key, &e->tune)) < 0)
        SAY(e, LOG_WARNING, "cuda: cannot keep the tuning in %s: %s", tune_file, strerror(-rc));
    return 0;
}

/* What creation allocated and measured: the summary it logs and
 * l8_engine_mem. */
struct create_acct {
    uint64_t weights;     /* device bytes of the weights */
    uint64_t work;        /* activations, scratch and the graphs' metadata */
    uint64_t kv_pool;
    uint64_t uploaded;    /* bytes the upload copied */
    double up_s, ver_s;   /* the upload's copies, and their check */
};

/* The longest context the pool allows a sequence (the model's at most). */
static uint64_t pool_ctx(const struct cuda_engine *e)
{
    const uint64_t ctx = (uint64_t)e->n_pages * e->page_size;
    return ctx < e->c->max_pos ? ctx : e->c->max_pos;
}

/* Creation 1: a device, and the shapes the kernels handle. Nothing is
 * allocated yet. */
static int check_shape(const struct cuda_engine *e, char err[L8_ERRLEN])
{
    const struct l8_config *c = e->c;
    const uint32_t D = c->head_dim, nh = c->n_heads;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        snprintf(err, L8_ERRLEN, "no CUDA device");
        return -ENODEV;
    }
    if (e->max_tokens > ATTN_MAX_ROWS) {
        snprintf(err, L8_ERRLEN, "cuda engine: at most %u tokens per step", ATTN_MAX_ROWS);
        return -EINVAL;
    }
    if (c->hidden % 16 || c->inter % 16 || (nh * D) % 16 || (D != 64 && D != 128) ||
        nh / c->n_kv_heads > 8) {
        snprintf(err, L8_ERRLEN,
                 "cuda engine needs hidden, inter, heads*head_dim multiples of 16, "
                 "head_dim 64 or 128 and at most 8 query heads per KV head");
        return -ENOTSUP;
    }
    return 0;
}

/* Creation 2: the engine's stream and its cuBLASLt handle. */
static int open_stream(struct cuda_engine *e, char err[L8_ERRLEN])
{
    int rc;
    CK(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking));
    if ((rc = l8k_blas_create(e->st, &e->blas)) < 0) {
        snprintf(err, L8_ERRLEN, "cuBLASLt setup failed (%d)", rc);
        return rc;
    }
    return 0;
}

/* l8_upload_add, with err said. */
static int upload_add(struct l8_upload *up, const void *src, void *dst, size_t bytes,
                      const char *what, char err[L8_ERRLEN])
{
    int rc = l8_upload_add(up, src, dst, bytes, what);
    if (rc)
        snprintf(err, L8_ERRLEN, "out of memory");
    return rc;
}

/* Creation 3: the weights on the GPU (q/k/v and gate/up fused along
 * their rows), uploaded and verified (cuda_upload.h). The device buffers are e's
 * (cuda_destroy frees them, whatever happens here); the job list and the
 * host's converted copies are this function's. */
static int upload_weights(struct cuda_engine *e, struct create_acct *a,
                          struct l8_progress *progress, char err[L8_ERRLEN])
{
    const struct l8_model *m = e->m;
    const uint32_t H = e->c->hidden, D = e->c->head_dim, NL = e->c->n_layers;
    struct l8_upload up = { .progress = progress };
    void *conv_embed = NULL, *conv_lm = NULL;
    const void *src;
    size_t bytes;
    char what[96];
    int rc = -ENOMEM;

    e->L = calloc(NL, sizeof *e->L);
    if (!e->L) {
        snprintf(err, L8_ERRLEN, "out of memory");
        goto out;
    }
    for (uint32_t l = 0; l < NL; l++) {
        const struct l8_layer *ml = &m->layers[l];
        struct glayer *g = &e->L[l];
        const struct l8_qweight *parts[2][3] = { { &ml->wq, &ml->wk, &ml->wv },
                                                 { &ml->wgate, &ml->wup, NULL } };
        struct gw *fused[2] = { &g->qkv, &g->gu };
        for (int f = 0; f < 2; f++) {
            uint32_t n = 0, k = parts[f][0]->in;
            for (int p = 0; p < 3 && parts[f][p]; p++)
                n += parts[f][p]->out;
            fused[f]->n = n;
            fused[f]->k = k;
            if (dmalloc((void **)&fused[f]->w, (size_t)n * k, &a->weights) ||
                dmalloc((void **)&fused[f]->s, (size_t)n * 4, &a->weights)) {
                rc = -ENOMEM;
                snprintf(err, L8_ERRLEN, "out of GPU memory for layer %u weights", l);
                goto out;
            }
            uint32_t row = 0;
            for (int p = 0; p < 3 && parts[f][p]; p++) {
                const struct l8_qweight *q = parts[f][p];
                snprintf(what, sizeof what, "layer %u projection %d.%d", l, f, p);
                if ((rc = upload_add(&up, q->w, fused[f]->w + (size_t)row * k,
                                     (size_t)q->out * k, what, err)) ||
                    (rc = upload_add(&up, q->scale, fused[f]->s + row, (size_t)q->out * 4,
                                     what, err)))
                    goto out;
                row += q->out;
            }
        }
        const struct l8_qweight *single[2] = { &ml->wo, &ml->wdown };
        struct gw *dst[2] = { &g->o, &g->down };
        for (int s = 0; s < 2; s++) {
            dst[s]->n = single[s]->out;
            dst[s]->k = single[s]->in;
            size_t cnt = (size_t)dst[s]->n * dst[s]->k;
            if (dmalloc((void **)&dst[s]->w, cnt, &a->weights) ||
                dmalloc((void **)&dst[s]->s, (size_t)dst[s]->n * 4, &a->weights)) {
                rc = -ENOMEM;
                snprintf(err, L8_ERRLEN, "out of GPU memory for layer %u weights", l);
                goto out;
            }
            snprintf(what, sizeof what, "layer %u %s", l, s ? "down_proj" : "o_proj");
            if ((rc = upload_add(&up, single[s]->w, dst[s]->w, cnt, what, err)) ||
                (rc = upload_add(&up, single[s]->scale, dst[s]->s, (size_t)dst[s]->n * 4, what,
                                 err)))
                goto out;
        }
        if (dmalloc((void **)&g->attn_norm, H * 4, &a->weights) ||
            dmalloc((void **)&g->mlp_norm, H * 4, &a->weights)) {
            rc = -ENOMEM;
            snprintf(err, L8_ERRLEN, "out of GPU memory for layer %u norms", l);
            goto out;
        }
        snprintf(what, sizeof what, "layer %u norms", l);
        if ((rc = upload_add(&up, ml->attn_norm, g->attn_norm, H * 4, what, err)) ||
            (rc = upload_add(&up, ml->mlp_norm, g->mlp_norm, H * 4, what, err)))
            goto out;
    }

    if ((rc = dense_source(&m->embed, &src, &e->embed_dt, &bytes, &conv_embed))) {
        snprintf(err, L8_ERRLEN, "out of memory");
        goto out;
    }
    if (dmalloc(&e->embed, bytes, &a->weights)) {
        rc = -ENOMEM;
        snprintf(err, L8_ERRLEN, "out of GPU memory for the embedding");
        goto out;
    }
    if ((rc = upload_add(&up, src, e->embed, bytes, "embed_tokens", err)))
        goto out;
    e->lm_shared = m->lm_head.data == m->embed.data;
    if (e->lm_shared) {
        e->lm_head = e->embed;
        e->lm_dt = e->embed_dt;
    } else {
        if ((rc = dense_source(&m->lm_head, &src, &e->lm_dt, &bytes, &conv_lm))) {
            snprintf(err, L8_ERRLEN, "out of memory");
            goto out;
        }
        if (dmalloc(&e->lm_head, bytes, &a->weights)) {
            rc = -ENOMEM;
            snprintf(err, L8_ERRLEN, "out of GPU memory for lm_head");
            goto out;
        }
        if ((rc = upload_add(&up, src, e->lm_head, bytes, "lm_head", err)))
            goto out;
    }
    if (dmalloc((void **)&e->final_norm, H * 4, &a->weights) ||
        dmalloc((void **)&e->inv_freq, D / 2 * 4, &a->weights)) {
        rc = -ENOMEM;
        snprintf(err, L8_ERRLEN, "out of GPU memory");
        goto out;
    }
    if ((rc = upload_add(&up, m->final_norm, e->final_norm, H * 4, "norm", err)) ||
        (rc = upload_add(&up, m->rope_inv_freq, e->inv_freq, D / 2 * 4, "rope inv_freq", err)))
        goto out;
    rc = l8_upload_run(&up, e->st, &a->up_s, &a->ver_s, err);
    a->uploaded = up.bytes;
out:
    l8_upload_free(&up);
    free(conv_embed);
    free(conv_lm);
    return rc;
}

/* Creation 4: the activations, for max_tokens rows and in fp8 at least
 * the rows the crossover is measured at (so its tune file line suits any
 * budget); the logit chunk's buffers; host scratch; and the bf16 decode
 * path's scratch at its largest. */
static int alloc_activations(struct cuda_engine *e, struct create_acct *a, char err[L8_ERRLEN])
{
    const struct l8_config *c = e->c;
    const uint32_t H = c->hidden, I = c->inter, D = c->head_dim, nh = c->n_heads,
                   nkv = c->n_kv_heads, V = c->vocab, QKV = (nh + 2 * nkv) * D;
    const uint32_t T = e->num == L8_NUMERICS_FP8 && e->max_tokens < L8_TUNE_MAX_M
                           ? L8_TUNE_MAX_M : e->max_tokens;
    int rc;
    e->in_max = H > I ? H : I;
    if (nh * D > e->in_max)
        e->in_max = nh * D;
    /* The widest attention workspace over any row count up to T. */
    for (uint32_t r = 1; r <= T; r++) {
        size_t w = l8k_attention_work_floats(r, nh, D, c->max_pos);
        if (w > e->attn_work_floats)
            e->attn_work_floats = w;
    }
    int f = 0;
    f |= dmalloc((void **)&e->x, (size_t)T * H * 4, &a->work);
    f |= dmalloc((void **)&e->y, (size_t)T * H * 4, &a->work);
    f |= dmalloc((void **)&e->qkv, (size_t)T * QKV * 4, &a->work);
    f |= dmalloc((void **)&e->att, (size_t)T * nh * D * 4, &a->work);
    f |= dmalloc((void **)&e->gu, (size_t)T * 2 * I * 4, &a->work);
    if (e->num == L8_NUMERICS_EXACT)
        f |= dmalloc((void **)&e->act, (size_t)T * e->in_max * 4, &a->work);
    else
        f |= dmalloc((void **)&e->xq, (size_t)T * e->in_max, &a->work);
    f |= dmalloc((void **)&e->xs, (size_t)T * 4, &a->work);
    f |= dmalloc((void **)&e->attn_work, e->attn_work_floats * 4, &a->work);
    f |= dmalloc((void **)&e->fin, (size_t)e->logit_chunk * H * 4, &a->work);
    f |= dmalloc((void **)&e->fin16, (size_t)e->logit_chunk * H * 2, &a->work);
    f |= dmalloc((void **)&e->logits, (size_t)e->logit_chunk * V * 4, &a->work);
    f |= dmalloc((void **)&e->samp_scr, (size_t)e->logit_chunk * V * 4, &a->work);
    f |= dmalloc((void **)&e->d_req, (size_t)e->logit_chunk * sizeof *e->d_req, &a->work);
    f |= dmalloc((void **)&e->d_mask, (size_t)e->logit_chunk * mask_words(V) * 4, &a->work);
    f |= dmalloc((void **)&e->d_tok, (size_t)e->logit_chunk * 4, &a->work);
    f |= dmalloc((void **)&e->d_lp, (size_t)e->logit_chunk * 4, &a->work);
    if (f) {
        snprintf(err, L8_ERRLEN, "out of GPU memory for activations (%u tokens)", T);
        return -ENOMEM;
    }
    CK(cudaHostAlloc((void **)&e->h_logits, (size_t)e->logit_chunk * V * 4, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&e->h_req, (size_t)e->logit_chunk * sizeof *e->h_req,
                     cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&e->h_mask, (size_t)e->logit_chunk * mask_words(V) * 4,
                     cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&e->h_tok, (size_t)e->logit_chunk * 4, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&e->h_lp, (size_t)e->logit_chunk * 4, cudaHostAllocDefault));
    e->rows = malloc((size_t)T * sizeof *e->rows);
    e->rm_first = malloc((size_t)e->max_seqs * sizeof *e->rm_first);
    e->rm_cnt = malloc((size_t)e->max_seqs * sizeof *e->rm_cnt);
    e->req_seq = malloc((size_t)e->logit_chunk * sizeof *e->req_seq);
    e->req_j = malloc((size_t)e->logit_chunk * sizeof *e->req_j);
    if (!e->rows || !e->rm_first || !e->rm_cnt || !e->req_seq || !e->req_j) {
        snprintf(err, L8_ERRLEN, "out of memory");
        return -ENOMEM;
    }

    /* The bf16 decode path (no FP8 tensor cores: sm_80) converts each
     * product's operands into a scratch that grows with the shape, and
     * captured decode graphs keep its address: it gets its largest size
     * now, before any capture. */
    if (e->num == L8_NUMERICS_FP8 && (l8k_blas_fp8_path(e->blas, L8K_F32) == L8K_FP8_BF16 ||
                                      l8k_blas_fp8_path(e->blas, L8K_BF16) == L8K_FP8_BF16)) {
        const uint32_t shape[4][2] = { { QKV, H }, { H, nh * D }, { 2 * I, H }, { H, I } };
        rc = 0;
        for (int i = 0; i < 4 && !rc; i++)
            rc = l8k_blas_reserve(e->blas, T, shape[i][0], shape[i][1]);
        if (rc) {
            snprintf(err, L8_ERRLEN, "out of GPU memory for the bf16 GEMM scratch (%d)", rc);
            return rc;
        }
    }
    return 0;
}

/* Creation 5: the KV pool, of the options' pages or bytes, else one full
 * context of the model within the free memory. */
static int alloc_kv_pool(struct cuda_engine *e, const struct l8_engine_opts *o,
                         struct create_acct *a, char err[L8_ERRLEN])
{
    const struct l8_config *c = e->c;
    e->kv_dt = e->num == L8_NUMERICS_EXACT ? L8K_F32 : L8K_BF16;
    const size_t elt = e->kv_dt == L8K_F32 ? 4 : 2;
    const size_t page_bytes =
        (size_t)c->n_layers * 2 * c->n_kv_heads * e->page_size * c->head_dim * elt;
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    uint64_t want;
    if (o->n_pages)
        want = (uint64_t)o->n_pages * page_bytes;
    else if (o->kv_bytes)
        want = o->kv_bytes;
    else {
        /* One full context of the model (16 GiB for Llama 3.1 8B's
         * 131,072 positions), so any request fits, within free memory. */
        want = (uint64_t)((c->max_pos + e->page_size - 1) / e->page_size) * page_bytes;
        if (free_b > FREE_MEM_RESERVE && want > free_b - FREE_MEM_RESERVE)
            want = free_b - FREE_MEM_RESERVE;
    }
    /* Clamped, not truncated: a huge request must fail the check below. */
    e->n_pages = want / page_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)(want / page_bytes);
    if (e->n_pages == 0 || (uint64_t)e->n_pages * page_bytes + FREE_MEM_RESERVE > free_b) {
        snprintf(err, L8_ERRLEN, "KV pool of %u pages (%.1f MiB) does not fit in %.1f MiB free",
                 e->n_pages, (double)e->n_pages * page_bytes / 1048576.0,
                 (double)free_b / 1048576.0);
        return -ENOMEM;
    }
    e->kv_half = (size_t)e->n_pages * c->n_kv_heads * e->page_size * c->head_dim;
    if (dmalloc(&e->kv, (uint64_t)e->n_pages * page_bytes, &a->kv_pool)) {
        snprintf(err, L8_ERRLEN, "out of GPU memory for the KV pool");
        return -ENOMEM;
    }
    e->max_pages_seq = (uint32_t)((pool_ctx(e) + e->page_size - 1) / e->page_size);
    return 0;
}

/* Creation 6: the step profile when asked for, and the decode graphs'
 * plan and metadata: batches up to max_seqs (and the step budget), kv
 * buckets up to the longest context the pool allows. */
static int alloc_graphs(struct cuda_engine *e, const struct l8_engine_opts *o,
                        struct create_acct *a, char err[L8_ERRLEN])
{
    const struct l8_config *c = e->c;
    const uint32_t H = c->hidden, I = c->inter, D = c->head_dim, nh = c->n_heads,
                   QKV = (nh + 2 * c->n_kv_heads) * D;
    e->prof = l8_prof_create(e->st, o->profile_file, e->log, e->log_ud);
    e->use_graphs = !o->no_graphs && !e->prof;
    l8_prof_product(e->prof, L8_PH_QKV, QKV, H, 1, true);
    l8_prof_product(e->prof, L8_PH_O, H, nh * D, 1, true);
    l8_prof_product(e->prof, L8_PH_GATE_UP, 2 * I, H, 1, true);
    l8_prof_product(e->prof, L8_PH_DOWN, H, I, 1, true);
    l8_prof_product(e->prof, L8_PH_LOGITS, c->vocab, H, e->lm_dt == L8K_BF16 ? 2 : 4, false);
    e->graph_max_b = e->max_seqs < e->max_tokens ? e->max_seqs : e->max_tokens;
    e->graph_max_kv = (uint32_t)pool_ctx(e);
    if (!e->use_graphs)
        return 0;
    struct meta_layout gl;
    meta_plan(e, e->graph_max_b, e->graph_max_b,
              (e->graph_max_kv + e->page_size - 1) / e->page_size, e->graph_max_b, 0, 0, &gl);
    if (dmalloc((void **)&e->d_gmeta, gl.total * 4, &a->work)) {
        snprintf(err, L8_ERRLEN, "out of GPU memory for the graph metadata");
        return -ENOMEM;
    }
    CK(cudaHostAlloc((void **)&e->h_gmeta, gl.total * 4, cudaHostAllocDefault));
    return 0;
}

/* The device's free and total memory. */
static int device_memory(size_t *free_b, size_t *total_b, char err[L8_ERRLEN])
{
    CK(cudaMemGetInfo(free_b, total_b));
    return 0;
}

/* The steps above, then the GEMV / cuBLASLt crossover (choose_tuning); a
 * step that fails leaves what it made in e, and cuda_destroy frees it. */
static int cuda_create(const struct l8_model *m, const struct l8_engine_opts *o, void **impl,
                       uint32_t *n_pages_out, struct l8_engine_mem *mem, char err[L8_ERRLEN])
{
    struct cuda_engine *e = calloc(1, sizeof *e);
    struct create_acct a = { 0 };
    size_t free_b = 0, total_b = 0;
    int rc;

    if (!e) {
        snprintf(err, L8_ERRLEN, "out of memory");
        return -ENOMEM;
    }
    e->log = o->log;
    e->log_ud = o->log_ud;
    e->m = m;
    e->c = &m->cfg;
    e->num = o->numerics;
    e->page_size = o->page_size;
    e->max_tokens = o->max_step_tokens;
    e->max_seqs = o->max_seqs;
    e->logit_chunk = e->max_seqs > 64 ? e->max_seqs : 64;
    if ((rc = check_shape(e, err)))
        goto err;
    l8k_set_pdl(!o->no_pdl);   /* before this engine's first launch */
    if ((rc = open_stream(e, err)) || (rc = upload_weights(e, &a, o->progress, err)) ||
        (rc = alloc_activations(e, &a, err)) || (rc = alloc_kv_pool(e, o, &a, err)) ||
        (rc = alloc_graphs(e, o, &a, err)) || (rc = device_memory(&free_b, &total_b, err)))
        goto err;
    SAY(e, LOG_INFO,
        "cuda: weights %.2f GiB uploaded in %.2f s (%.1f GB/s), checksums equal (%.1f ms); "
        "activations %.1f MiB; KV pool %u pages of %u (%.1f MiB, %s); fp8 GEMM path %d (bf16 "
        "out %d); decode graphs %s; PDL %s; %.1f GiB free of %.1f",
        (double)a.weights / 1073741824.0, a.up_s,
        a.up_s > 0 ? (double)a.uploaded / a.up_s / 1e9 : 0, a.ver_s * 1e3,
        (double)a.work / 1048576.0, e->n_pages, e->page_size, (double)a.kv_pool / 1048576.0,
        e->kv_dt == L8K_F32 ? "f32" : "bf16", (int)l8k_blas_fp8_path(e->blas, L8K_F32),
        (int)l8k_blas_fp8_path(e->blas, L8K_BF16),
        e->use_graphs ? "on" : e->prof ? "off (profiling)" : "off (as asked)",
        l8k_pdl_enabled() ? "on" : "off", (double)free_b / 1073741824.0,
        (double)total_b / 1073741824.0);
    if ((rc = choose_tuning(e, o, err)))
        goto err;
    log_refusals(e);
    if ((rc = device_memory(&free_b, &total_b, err)))
        goto err;
    *mem = (struct l8_engine_mem){ .weights = a.weights, .kv_pool = a.kv_pool, .work = a.work,
                                   .device_used = total_b - free_b, .device_total = total_b };
    *impl = e;
    *n_pages_out = e->n_pages;
    return 0;

err:
    cuda_destroy(e);
    return rc;
}

/* Frees what e holds, a partly made engine's too (every pointer NULL or
 * allocated). */
static void cuda_destroy(void *impl)
{
    struct cuda_engine *e = impl;
    if (!e)
        return;
    /* Everything the engine holds comes after its stream: one that failed
     * before (no device, a shape it cannot run) has nothing to free, and
     * must not touch the device (cudaFree would create a context). */
    if (!e->st) {
        free(e);
        return;
    }
    cudaStreamSynchronize(e->st);
    if (e->L) {
        for (uint32_t l = 0; l < e->c->n_layers; l++) {
            struct glayer *g = &e->L[l];
            cudaFree(g->attn_norm);
            cudaFree(g->mlp_norm);
            struct gw *w[4] = { &g->qkv, &g->o, &g->gu, &g->down };
            for (int i = 0; i < 4; i++) {
                cudaFree(w[i]->w);
                cudaFree(w[i]->s);
            }
        }
        free(e->L);
    }
    if (!e->lm_shared)
        cudaFree(e->lm_head);
    void *dev[] = { e->embed, e->final_norm, e->inv_freq, e->kv, e->x, e->y, e->qkv, e->att,
                    e->gu, e->act, e->xq, e->xs, e->attn_work, e->fin, e->fin16, e->logits,
                    e->samp_scr, e->d_req, e->d_mask, e->d_tok, e->d_lp, e->d_hist,
                    e->d_meta };
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    void *host[] = { e->h_logits, e->h_req, e->h_mask, e->h_tok, e->h_lp, e->h_hist,
                     e->h_meta };
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        cudaFreeHost(host[i]);
    l8k_blas_destroy(e->blas);
    l8_prof_finish(e->prof);
    cudaStreamDestroy(e->st);
    uint32_t captured = 0;
    for (uint32_t i = 0; i < e->n_graphs; i++)
        if (e->graphs[i].exec) {
            cudaGraphExecDestroy(e->graphs[i].exec);
            captured++;
        }
    if (e->use_graphs && e->graph_launches)
        SAY(e, LOG_INFO, "cuda: %llu decode steps ran as graphs (%u shapes captured)",
            (unsigned long long)e->graph_launches, captured);
    cudaFree(e->d_gmeta);
    cudaFreeHost(e->h_gmeta);
    free(e->rows);
    free(e->rm_first);
    free(e->rm_cnt);
    free(e->req_seq);
    free(e->req_j);
    free(e);
}

/* ---- the step ----------------------------------------------------------- */

/* Grow a pinned host / device pair to hold n elements of size sz. */
static int grow_pair(void **h, void **d, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 4096;
    while (nc < n)
        nc *= 2;
    cudaFreeHost(*h);
    cudaFree(*d);
    *h = *d = NULL;
    *cap = 0;
    if (cudaHostAlloc(h, nc * sz, cudaHostAllocDefault) != cudaSuccess) {
        *h = NULL;
        cudaGetLastError();
        return -ENOMEM;
    }
    if (cudaMalloc(d, nc * sz) != cudaSuccess) {
        *d = NULL;
        cudaGetLastError();
        return -ENOMEM;
    }
    *cap = nc;
    return 0;
}

/* y [T, W.n] = (product input) . W^T in the engine's numerics, in
 * out_dt(e, p, T); the input is in_f32 or e->act (exact) or e->xq / e->xs
 * (fp8), [T, W.k]. */
static int project(struct cuda_engine *e, enum l8_tune_product p, const struct gw *W, uint32_t T,
                   const float *in_f32, void *y)
{
    if (e->num == L8_NUMERICS_EXACT)
        return l8k_gemv(W->w, L8K_FP8, W->s, in_f32 ? in_f32 : e->act, L8K_F32, NULL, T, W->n,
                        W->k, y, W->n, e->st);
    if (uses_gemv(e, p, T))
        return l8k_gemv(W->w, L8K_FP8, W->s, e->xq, L8K_FP8, e->xs, T, W->n, W->k, y, W->n, e->st);
    return l8k_gemm_fp8(e->blas, W->w, W->s, e->xq, e->xs, T, W->n, W->k, out_dt(e, p, T), y,
                        e->st);
}

/* The product input for the next projection: dtype and buffer. */
static enum l8k_dtype in_dt(const struct cuda_engine *e)
{
    return e->num == L8_NUMERICS_EXACT ? L8K_F32 : L8K_FP8;
}
static void *in_buf(const struct cuda_engine *e)
{
    return e->num == L8_NUMERICS_EXACT ? (void *)e->act : (void *)e->xq;
}

/* The rows of q that attention takes as decode rows (the row kernel),
 * after the prefill tokens before them: a decode step's one, or a
 * verification's last n_draft + 1, each standing for a decode step. */
static uint32_t decode_rows(const struct l8_seq *q)
{
    return q->n_draft ? q->n_draft + 1 : q->n_tokens == 1;
}

/* sampler.c applies a repetition penalty only when it is positive and not 1. */
static bool uses_penalty(const struct l8_seq *q)
{
    return q->sample && q->n_history && q->sampling->repetition_penalty != 1.0f &&
           q->sampling->repetition_penalty > 0.0f;
}

#define TRY(x)                     \
    do {                           \
        if ((rc = (x)) < 0)        \
            goto out;              \
    } while (0)

/* An operation of a pass (rc and e in scope): return its error, or mark
 * its end for the step profile. */
#define OP(ph, call)                     \
    do {                                 \
        if ((rc = (call)))               \
            return rc;                   \
        l8_prof_mark(e->prof, (ph));     \
    } while (0)

/* One forward pass's shapes and its metadata on the device (meta_plan's
 * layout at d): what the kernels of the pass read, and all they read from
 * the host's side, so a captured pass replays with new metadata. */
struct fwd {
    uint32_t T, pt_stride, max_kv;
    uint32_t n_tiles, n_drows;     /* n_tiles > 0: prefill tiles, and decode rows apart */
    const int32_t *tok, *pos, *slot, *rseq, *kvl, *lrows, *pt, *tiles, *drows;
};

static void fwd_at(struct fwd *f, const int32_t *d, const struct meta_layout *ml, uint32_t T,
                   uint32_t pt_stride, uint32_t max_kv, uint32_t n_tiles, uint32_t n_drows)
{
    f->T = T;
    f->pt_stride = pt_stride;
    f->max_kv = max_kv;
    f->n_tiles = n_tiles;
    f->n_drows = n_drows;
    f->tiles = d + ml->tiles;
    f->drows = d + ml->drows;
    f->tok = d + ml->tok;
    f->pos = d + ml->pos;
    f->slot = d + ml->slot;
    f->rseq = d + ml->row_seq;
    f->kvl = d + ml->kv_len;
    f->lrows = d + ml->logit_rows;
    f->pt = d + ml->pt;
}

/* One layer's attention into e->att: the tile kernel for prefill chunks and
 * the row kernel for the decode rows beside them, or the row kernel for
 * every row (decode steps, and the exact numerics' f32 pool). */
static int attention(struct cuda_engine *e, const struct fwd *f, const void *kb, const void *vb)
{
    const struct l8_config *c = e->c;
    const uint32_t D = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads,
                   QKV = (nh + 2 * nkv) * D;
    const float sm_scale = 1.0f / sqrtf((float)D);
    if (!f->n_tiles)
        return l8k_attention(e->qkv, QKV, kb, vb, e->kv_dt, e->page_size, f->pt, f->pt_stride,
                             f->rseq, f->kvl, NULL, f->T, nh, nkv, D, sm_scale, f->max_kv,
                             e->attn_work, e->att, nh * D, e->st);
    int rc = l8k_attention_prefill(e->qkv, QKV, kb, vb, e->page_size, f->pt, f->pt_stride,
                                   f->tiles, f->n_tiles, nh, nkv, D, sm_scale, f->max_kv,
                                   e->attn_work, e->att, nh * D, e->st);
    if (rc || !f->n_drows)
        return rc;
    return l8k_attention(e->qkv, QKV, kb, vb, e->kv_dt, e->page_size, f->pt, f->pt_stride,
                         f->rseq, f->kvl, f->drows, f->n_drows, nh, nkv, D, sm_scale, f->max_kv,
                         e->attn_work, e->att, nh * D, e->st);
}

/* Embedding and every layer; the last layer's down output stays in e->y
 * (joined to the residual by fwd_logits, for the rows that need it). */
static int fwd_layers(struct cuda_engine *e, const struct fwd *f)
{
    const struct l8_config *c = e->c;
    const uint32_t H = c->hidden, I = c->inter, D = c->head_dim, nh = c->n_heads,
                   nkv = c->n_kv_heads, V = c->vocab, QKV = (nh + 2 * nkv) * D, T = f->T;
    const enum l8k_dtype idt = in_dt(e);
    void *ib = in_buf(e);
    const size_t kv_elt = e->kv_dt == L8K_F32 ? 4 : 2;
    int rc;
    OP(L8_PH_EMBED, l8k_embed(e->embed, e->embed_dt, V, H, f->tok, T, e->x, e->st));
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const struct glayer *g = &e->L[l];
        uint8_t *kb = (uint8_t *)e->kv + (size_t)l * 2 * e->kv_half * kv_elt;
        uint8_t *vb = kb + e->kv_half * kv_elt;
        OP(L8_PH_ATTN_NORM, l8k_rmsnorm(e->x, l ? e->y : NULL, g->attn_norm, c->rms_eps, H, NULL,
                                        T, idt, ib, e->xs, e->st));
        if (uses_gemv(e, L8_TP_QKV, T)) {
            /* RoPE and the KV append in the GEMV's epilogue (the profile's
             * qkv phase then includes them). */
            OP(L8_PH_QKV, l8k_gemv_qkv_rope(g->qkv.w, g->qkv.s, ib, idt,
                                            idt == L8K_FP8 ? e->xs : NULL, T, H, e->qkv, QKV,
                                            f->pos, e->inv_freq, nh, nkv, D, kb, vb, e->kv_dt,
                                            e->page_size, f->slot, e->st));
        } else {
            OP(L8_PH_QKV, project(e, L8_TP_QKV, &g->qkv, T, NULL, e->qkv));
            OP(L8_PH_ROPE_KV, l8k_rope_kv(e->qkv, QKV, f->pos, e->inv_freq, T, nh, nkv, D, kb,
                                          vb, e->kv_dt, e->page_size, f->slot, e->st));
        }
        OP(L8_PH_ATTENTION, attention(e, f, kb, vb));
        if (e->num == L8_NUMERICS_FP8)
            OP(L8_PH_QUANTIZE, l8k_quantize_rows(e->att, T, nh * D, e->xq, e->xs, e->st));
        OP(L8_PH_O, project(e, L8_TP_O, &g->o, T, e->att, e->y));
        OP(L8_PH_MLP_NORM, l8k_rmsnorm(e->x, e->y, g->mlp_norm, c->rms_eps, H, NULL, T, idt, ib,
                                       e->xs, e->st));
        OP(L8_PH_GATE_UP, project(e, L8_TP_GATE_UP, &g->gu, T, NULL, e->gu));
        OP(L8_PH_SILU, l8k_silu_mul(e->gu, out_dt(e, L8_TP_GATE_UP, T), T, I, idt, ib, e->xs,
                                    e->st));
        OP(L8_PH_DOWN, project(e, L8_TP_DOWN, &g->down, T, NULL, e->y));
    }
    return 0;
}

/* Logit rows lrows[r0, r0 + nr) (nr <= logit_chunk): the last residual add, the
 * final norm, lm_head, into e->logits [nr, V]. */
static int fwd_logits(struct cuda_engine *e, const struct fwd *f, uint32_t r0, uint32_t nr)
{
    const struct l8_config *c = e->c;
    const uint32_t H = c->hidden, V = c->vocab;
    int rc;
    if (e->num == L8_NUMERICS_FP8 && nr > e->tune.gemv_max_m[L8_TP_LM_HEAD] &&
        e->lm_dt == L8K_BF16) {
        if ((rc = l8k_rmsnorm(e->x, e->y, e->final_norm, c->rms_eps, H, f->lrows + r0, nr,
                              L8K_BF16, e->fin16, NULL, e->st)))
            return rc;
        OP(L8_PH_LOGITS, l8k_gemm_bf16(e->blas, e->lm_head, e->fin16, nr, V, H, e->logits, e->st));
        return 0;
    }
    if ((rc = l8k_rmsnorm(e->x, e->y, e->final_norm, c->rms_eps, H, f->lrows + r0, nr, L8K_F32,
                          e->fin, NULL, e->st)))
        return rc;
    OP(L8_PH_LOGITS, l8k_gemv(e->lm_head, e->lm_dt, NULL, e->fin, L8K_F32, NULL, nr, V, H,
                              e->logits, V, e->st));
    return 0;
}

/* Which logit rows each sequence owns: rows [first[s], first[s] + cnt[s]),
 * in step order; its sample rows (when sampling) are the last n_draft + 1
 * of them. */
struct rowmap {
    int32_t *first;   /* [n_seqs] */
    uint32_t *cnt;    /* [n_seqs] */
};

/* The history of every penalized sequence, concatenated, on the device. */
static int upload_history(struct cuda_engine *e, const struct l8_seq *seqs, uint32_t n_seqs)
{
    uint32_t total = 0;
    for (uint32_t s = 0; s < n_seqs; s++)
        if (uses_penalty(&seqs[s]))
            total += seqs[s].n_history;
    if (!total)
        return 0;
    if (grow_pair((void **)&e->h_hist, (void **)&e->d_hist, &e->hist_cap, total, 4))
        return -ENOMEM;
    uint32_t off = 0;
    for (uint32_t s = 0; s < n_seqs; s++)
        if (uses_penalty(&seqs[s])) {
            for (uint32_t i = 0; i < seqs[s].n_history; i++)
                e->h_hist[off + i] = (int32_t)seqs[s].history[i];
            off += seqs[s].n_history;
        }
    return cudaMemcpyAsync(e->d_hist, e->h_hist, (size_t)total * 4, cudaMemcpyHostToDevice,
                           e->st) == cudaSuccess ? 0 : -EIO;
}

/* After e->logits holds rows [r0, r0 + nr) of the step: sample on the
 * device for the sequences whose sample row is among them, copy back the
 * tokens and the requested logits, synchronize, and hand them out. The
 * pinned buffers are rewritten only after this synchronization. */
static int sample_and_copy(struct cuda_engine *e, struct l8_seq *seqs, uint32_t n_seqs,
                           const struct rowmap *rm, uint32_t r0, uint32_t nr)
{
    const uint32_t V = e->c->vocab, W = mask_words(V);
    uint32_t ns = 0, hoff = 0, nm = 0;
    bool want = false;
    /* The masks are read below: the forward pass is enqueued by now, so
     * whoever writes them has had the GPU's time to. */
    for (uint32_t s = 0; s < n_seqs && e->masks_wait; s++)
        if (seqs[s].sample && seqs[s].allowed) {
            e->masks_wait(e->masks_ud);
            e->masks_wait = NULL;
        }
    int64_t hi = r0;    /* rows [r0, hi) hold every requested logit row of the chunk */
    for (uint32_t s = 0; s < n_seqs; s++) {
        const struct l8_seq *q = &seqs[s];
        const bool pen = uses_penalty(q);
        const int64_t first = rm->first[s], last = first + (int64_t)rm->cnt[s] - 1;
        if (rm->cnt[s] && q->logits != L8_LOGITS_NONE && first < (int64_t)(r0 + nr) &&
            last >= (int64_t)r0) {
            want = true;
            int64_t end = last + 1 < (int64_t)(r0 + nr) ? last + 1 : (int64_t)(r0 + nr);
            hi = end > hi ? end : hi;
        }
        /* Sample j from row last - n_draft + j, as the decode step it
         * stands for: the history up to it, its counter and its mask. */
        for (uint32_t j = 0; q->sample && rm->cnt[s] && j <= q->n_draft; j++) {
            const int64_t row = last - q->n_draft + j;
            if (row < (int64_t)r0 || row >= (int64_t)(r0 + nr))
                continue;
            struct l8k_sample_req *rq = &e->h_req[ns];
            const struct l8_sampling *sp = q->sampling;
            rq->temperature = sp->temperature;
            rq->top_k = sp->top_k;
            rq->top_p = sp->top_p;
            rq->min_p = sp->min_p;
            rq->rep_penalty = sp->repetition_penalty;
            rq->u = sp->temperature > 0.0f ? l8_philox_uniform(sp->seed, q->sample_index + j)
                                           : 0.0f;
            rq->logits_row = (int32_t)(row - r0);
            rq->hist_off = (int32_t)hoff;
            rq->n_hist = pen ? (int32_t)(q->n_history - q->n_draft + j) : 0;
            rq->mask_row = q->allowed ? (int32_t)nm : -1;
            if (q->allowed)
                memcpy(e->h_mask + (size_t)nm++ * W, q->allowed + (size_t)j * W, (size_t)W * 4);
            e->req_seq[ns] = s;
            e->req_j[ns++] = j;
        }
        if (pen)
            hoff += q->n_history;
    }
    if (ns) {
        int rc;
        if (cudaMemcpyAsync(e->d_req, e->h_req, ns * sizeof *e->h_req, cudaMemcpyHostToDevice,
                            e->st) != cudaSuccess ||
            (nm && cudaMemcpyAsync(e->d_mask, e->h_mask, (size_t)nm * W * 4,
                                   cudaMemcpyHostToDevice, e->st) != cudaSuccess))
            return -EIO;
        if ((rc = l8k_sample(e->logits, V, e->d_req, ns, e->d_hist, nm ? e->d_mask : NULL,
                             e->samp_scr, e->d_tok, e->d_lp, e->st)))
            return rc;
        if (cudaMemcpyAsync(e->h_tok, e->d_tok, ns * 4, cudaMemcpyDeviceToHost, e->st) ||
            cudaMemcpyAsync(e->h_lp, e->d_lp, ns * 4, cudaMemcpyDeviceToHost, e->st))
            return -EIO;
    }
    if (want && cudaMemcpyAsync(e->h_logits, e->logits, (size_t)(hi - r0) * V * 4,
                                cudaMemcpyDeviceToHost, e->st) != cudaSuccess)
        return -EIO;
    l8_prof_mark(e->prof, L8_PH_SAMPLE);
    if (cudaStreamSynchronize(e->st) != cudaSuccess)
        return -EIO;
    /* The kernel's flag for logits with a NaN or an infinity (engine.h). */
    for (uint32_t i = 0; i < ns; i++)
        if (e->h_tok[i] == L8K_SAMPLE_NONFINITE)
            return -EDOM;
    for (uint32_t i = 0; i < ns; i++) {
        struct l8_seq *q = &seqs[e->req_seq[i]];
        if (q->n_draft) {
            q->verify_out[e->req_j[i]] =
                (struct l8_sample_out){ (uint32_t)e->h_tok[i], e->h_lp[i] };
        } else {
            q->token_out = (uint32_t)e->h_tok[i];
            q->logprob_out = e->h_lp[i];
        }
    }
    if (!want)
        return 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        struct l8_seq *q = &seqs[s];
        if (q->logits == L8_LOGITS_NONE || !rm->cnt[s])
            continue;
        /* LAST: its last row (the others are a verification's sample
         * rows), written at logits_out; ALL: row i of the sequence at
         * logits_out + i * V. */
        const bool all = q->logits == L8_LOGITS_ALL;
        for (uint32_t i = all ? 0 : rm->cnt[s] - 1; i < rm->cnt[s]; i++) {
            uint32_t r = (uint32_t)rm->first[s] + i;
            if (r < r0 || r >= r0 + nr)
                continue;
            memcpy(q->logits_out + (all ? (size_t)i * V : 0), e->h_logits + (size_t)(r - r0) * V,
                   (size_t)V * 4);
        }
    }
    return 0;
}

/* ---- CUDA graphs for decode steps --------------------------------------- */

/* A decode step (one token per sequence, logits of the last row at most)
 * of B sequences runs as a graph captured for (bucket(B), kv bucket): the
 * rows past B are padding (token 0, no KV store, kv_len 0: the kernels keep
 * rows independent, see l8_kernels.h), and the attention's split plan is
 * made for the kv bucket, a power of two >= the longest sequence. The
 * metadata lives at a fixed device address (d_gmeta), uploaded before each
 * launch; sampling and the copies back run outside the graph. A key is
 * first run eagerly (warming cuBLASLt's heuristic cache and scratch), then
 * captured on its second use. The options' no_graphs turns graphs off. */

static uint32_t graph_batch(const struct cuda_engine *e, uint32_t B)
{
    uint32_t b = 1;
    while (b < B)
        b <<= 1;
    return b < e->graph_max_b ? b : e->graph_max_b;
}

static uint32_t graph_kv(const struct cuda_engine *e, uint32_t max_kv)
{
    uint32_t k = GRAPH_MIN_KV;
    while (k < max_kv)
        k <<= 1;
    return k < e->graph_max_kv ? k : e->graph_max_kv;
}

static bool graph_eligible(const struct cuda_engine *e, const struct l8_seq *seqs, uint32_t n)
{
    if (!e->use_graphs || n > e->graph_max_b)
        return false;
    for (uint32_t s = 0; s < n; s++)
        if (seqs[s].n_tokens != 1 || seqs[s].logits == L8_LOGITS_ALL)
            return false;
    return true;
}

static int graph_capture(struct cuda_engine *e, struct dgraph *g, const struct fwd *f)
{
    cudaGraph_t graph = NULL;
    int rc;
    if (cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -EIO;
    rc = fwd_layers(e, f);
    if (rc == 0)
        rc = fwd_logits(e, f, 0, f->T);
    /* Always end the capture: the stream must leave capture mode. */
    cudaError_t ce = cudaStreamEndCapture(e->st, &graph);
    if (rc == 0 && ce != cudaSuccess)
        rc = -EIO;
    if (rc == 0 && cudaGraphInstantiate(&g->exec, graph, 0) != cudaSuccess) {
        g->exec = NULL;
        rc = -EIO;
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (rc) {
        cudaGetLastError();
        g->failed = true;
        SAY(e, LOG_WARNING, "cuda: graph capture for batch %u, kv %u failed (%d); that shape runs "
            "eagerly", g->B, g->kvb, rc);
    }
    return rc;
}

static struct dgraph *graph_find(struct cuda_engine *e, uint32_t B, uint32_t kvb)
{
    for (uint32_t i = 0; i < e->n_graphs; i++)
        if (e->graphs[i].B == B && e->graphs[i].kvb == kvb)
            return &e->graphs[i];
    if (e->n_graphs == GRAPH_MAX)
        return NULL;
    struct dgraph *g = &e->graphs[e->n_graphs++];
    memset(g, 0, sizeof *g);
    g->B = B;
    g->kvb = kvb;
    return g;
}

static int graph_step(struct cuda_engine *e, struct l8_seq *seqs, uint32_t n_seqs)
{
    uint32_t max_kv = 0;
    for (uint32_t s = 0; s < n_seqs; s++)
        if (seqs[s].pos + 1 > max_kv)
            max_kv = seqs[s].pos + 1;
    const uint32_t Bb = graph_batch(e, n_seqs), kvb = graph_kv(e, max_kv);
    const uint32_t pt_stride = (kvb + e->page_size - 1) / e->page_size;
    struct meta_layout ml;
    meta_plan(e, Bb, Bb, pt_stride, Bb, 0, 0, &ml);
    int32_t *hm = e->h_gmeta;
    for (uint32_t s = 0; s < Bb; s++) {
        int32_t *pt = hm + ml.pt + (size_t)s * pt_stride;
        hm[ml.logit_rows + s] = (int32_t)s;
        if (s >= n_seqs) {           /* padding row */
            hm[ml.tok + s] = 0;
            hm[ml.pos + s] = 0;
            hm[ml.slot + s] = -1;
            hm[ml.row_seq + s] = (int32_t)s;
            hm[ml.kv_len + s] = 0;
            memset(pt, 0, (size_t)pt_stride * 4);
            continue;
        }
        const struct l8_seq *q = &seqs[s];
        const uint32_t p = q->pos, np = (p + 1 + e->page_size - 1) / e->page_size;
        for (uint32_t i = 0; i < pt_stride; i++)
            pt[i] = i < np ? (int32_t)q->pages[i] : 0;
        hm[ml.tok + s] = (int32_t)q->tokens[0];
        hm[ml.pos + s] = (int32_t)p;
        hm[ml.slot + s] = (int32_t)(q->pages[p / e->page_size] * e->page_size + p % e->page_size);
        hm[ml.row_seq + s] = (int32_t)s;
        hm[ml.kv_len + s] = (int32_t)(p + 1);
    }
    int rc = 0;
    if (cudaMemcpyAsync(e->d_gmeta, hm, ml.total * 4, cudaMemcpyHostToDevice, e->st) !=
        cudaSuccess)
        return -EIO;
    struct fwd f;
    fwd_at(&f, e->d_gmeta, &ml, Bb, pt_stride, kvb, 0, 0);
    struct dgraph *g = graph_find(e, Bb, kvb);
    if (g && g->warm && !g->exec && !g->failed)
        graph_capture(e, g, &f);   /* on failure: eager below, from now on */
    if (g && g->exec) {
        if (cudaGraphLaunch(g->exec, e->st) != cudaSuccess)
            TRY(-EIO);
        e->graph_launches++;
    } else {
        TRY(fwd_layers(e, &f));
        TRY(fwd_logits(e, &f, 0, Bb));
        if (g)
            g->warm = true;
    }
    TRY(upload_history(e, seqs, n_seqs));
    for (uint32_t s = 0; s < n_seqs; s++) {
        e->rm_first[s] = (int32_t)s;
        e->rm_cnt[s] = seqs[s].logits == L8_LOGITS_LAST || seqs[s].sample ? 1 : 0;
    }
    struct rowmap rm = { e->rm_first, e->rm_cnt };
    TRY(sample_and_copy(e, seqs, n_seqs, &rm, 0, Bb));
out:
    return rc;
}

static int cuda_step(void *impl, struct l8_seq *seqs, uint32_t n_seqs,
                     l8_masks_wait_fn *wait, void *wait_ud)
{
    struct cuda_engine *e = impl;
    int rc = 0;
    e->masks_wait = wait;
    e->masks_ud = wait_ud;

    /* Shapes of this step (engine.c has checked each sequence; the totals
     * are checked again here before the max_tokens-sized tables are written). */
    uint32_t T = 0, pt_stride = 1, max_kv = 0, n_rows = 0;
    for (uint32_t s = 0; s < n_seqs; s++)
        T += seqs[s].n_tokens;
    if (T > e->max_tokens || n_seqs > e->max_seqs)
        return -EINVAL;
    if (graph_eligible(e, seqs, n_seqs)) {
        rc = graph_step(e, seqs, n_seqs);
        goto out;
    }
    T = 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const struct l8_seq *q = &seqs[s];
        uint32_t end = q->pos + q->n_tokens;
        uint32_t np = (end + e->page_size - 1) / e->page_size;
        if (np > pt_stride)
            pt_stride = np;
        if (end > max_kv)
            max_kv = end;
        /* Logit rows: requested ones, and the sample rows when sampling
         * (the last, or a verification's last n_draft + 1). */
        e->rm_first[s] = (int32_t)n_rows;
        e->rm_cnt[s] = q->logits == L8_LOGITS_ALL ? q->n_tokens
                       : q->sample ? q->n_draft + 1
                       : q->logits == L8_LOGITS_LAST ? 1 : 0;
        for (uint32_t i = q->n_tokens - e->rm_cnt[s]; i < q->n_tokens; i++)
            e->rows[n_rows++] = T + i;
        T += q->n_tokens;
    }

    /* Prefill chunks go to the tile kernel (bf16 pool); the decode rows of
     * the same step, and a verification's last n_draft + 1 rows (each the
     * row of a decode step), to the row kernel. */
    const uint32_t nh = e->c->n_heads, nkv = e->c->n_kv_heads;
    uint32_t n_tiles = 0, n_drows = 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const uint32_t nd = decode_rows(&seqs[s]);
        n_tiles += l8k_attention_tiles(nh, nkv, 0, seqs[s].n_tokens - nd, 0, 0, NULL);
        n_drows += nd;
    }
    const bool tiles = e->kv_dt == L8K_BF16 && n_tiles > 0;
    if (!tiles)
        n_tiles = n_drows = 0;
    struct meta_layout ml;
    meta_plan(e, T, n_seqs, pt_stride, n_rows, n_tiles, n_drows, &ml);
    if (grow_pair((void **)&e->h_meta, (void **)&e->d_meta, &e->meta_cap, ml.total, 4))
        return -ENOMEM;
    int32_t *hm = e->h_meta;
    uint32_t t = 0, ti = 0, di = 0;
    for (uint32_t s = 0; s < n_seqs; s++) {
        const struct l8_seq *q = &seqs[s];
        int32_t *pt = hm + ml.pt + (size_t)s * pt_stride;
        const uint32_t nd = decode_rows(q);
        if (tiles) {
            ti += l8k_attention_tiles(nh, nkv, t, q->n_tokens - nd, q->pos, s,
                                      hm + ml.tiles + 4 * (size_t)ti);
            for (uint32_t i = q->n_tokens - nd; i < q->n_tokens; i++)
                hm[ml.drows + di++] = (int32_t)(t + i);
        }
        uint32_t np = (q->pos + q->n_tokens + e->page_size - 1) / e->page_size;
        for (uint32_t p = 0; p < pt_stride; p++)
            pt[p] = p < np ? (int32_t)q->pages[p] : 0;
        for (uint32_t i = 0; i < q->n_tokens; i++, t++) {
            uint32_t p = q->pos + i;
            hm[ml.tok + t] = (int32_t)q->tokens[i];
            hm[ml.pos + t] = (int32_t)p;
            hm[ml.slot + t] =
                (int32_t)(q->pages[p / e->page_size] * e->page_size + p % e->page_size);
            hm[ml.row_seq + t] = (int32_t)s;
            hm[ml.kv_len + t] = (int32_t)(p + 1);
        }
    }
    for (uint32_t r = 0; r < n_rows; r++)
        hm[ml.logit_rows + r] = (int32_t)e->rows[r];
    l8_prof_begin(e->prof, T > n_seqs, T);
    if (cudaMemcpyAsync(e->d_meta, hm, ml.total * 4, cudaMemcpyHostToDevice, e->st) != cudaSuccess)
        TRY(-EIO);
    struct fwd f;
    fwd_at(&f, e->d_meta, &ml, T, pt_stride, max_kv, n_tiles, n_drows);
    TRY(upload_history(e, seqs, n_seqs));
    l8_prof_mark(e->prof, L8_PH_UPLOAD);
    TRY(fwd_layers(e, &f));
    /* Logits and sampling, in chunks of logit_chunk rows. */
    struct rowmap rm = { e->rm_first, e->rm_cnt };
    for (uint32_t r0 = 0; r0 < n_rows; r0 += e->logit_chunk) {
        uint32_t nr = n_rows - r0 < e->logit_chunk ? n_rows - r0 : e->logit_chunk;
        TRY(fwd_logits(e, &f, r0, nr));
        TRY(sample_and_copy(e, seqs, n_seqs, &rm, r0, nr));
    }
    if (n_rows == 0 && cudaStreamSynchronize(e->st) != cudaSuccess)
        rc = -EIO;
out:
    if (rc < 0) {
        cudaStreamSynchronize(e->st);
        if (cudaGetLastError() != cudaSuccess || rc == -EIO)
            rc = -EIO;
    }
    l8_prof_end(e->prof, rc == 0);
    log_refusals(e);
    return rc;
}

/* engine.h's l8_engine_verify_rows. A row's logits are its own in a step
 * of up to L8K_ATTN_ROW_PLANS rows (the row kernel splits each row as it
 * would alone), and, in fp8, while every product runs through the GEMV
 * (whose rows do not change each other's sums; cuBLASLt's may): up to the
 * smallest gemv_max_m, the lm_head's when cuBLASLt takes it above. A
 * decode graph pads its rows to a power of two, which must stay there too. */
static uint32_t cuda_verify_rows(const void *impl)
{
    const struct cuda_engine *e = impl;
    uint32_t n = L8K_ATTN_ROW_PLANS;
    for (int p = 0; e->num == L8_NUMERICS_FP8 && p < L8_TP_N; p++)
        if ((p != L8_TP_LM_HEAD || e->lm_dt == L8K_BF16) && e->tune.gemv_max_m[p] < n)
            n = e->tune.gemv_max_m[p];
    if (e->use_graphs)
        while (n & (n - 1))
            n &= n - 1;
    return n ? n : 1;
}

const struct l8_engine_ops l8_engine_cuda_ops = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .step = cuda_step,
    .verify_rows = cuda_verify_rows,
};
