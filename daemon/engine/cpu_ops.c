/* cpu_ops.c - CPU kernels: dot products, FP8 matmul, quantize, norm, RoPE.
 * See cpu_ops.h for the contracts.
 *
 * The vector code uses GCC vector extensions (8 x f32). The hot kernels
 * are compiled twice (AVX2 and baseline x86-64) and picked at load time;
 * both perform the same IEEE operations in the same order (no FMA, no
 * reassociation), so the results are bitwise identical on any machine. */
#include "cpu_ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../model/numerics.h"

typedef float v8f __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define L8_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define L8_MULTIVERSION
#endif

static inline v8f load8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* The fixed lane tree used by every dot: ((0+4)+(1+5)) + ((2+6)+(3+7)). */
static inline float hsum8(v8f v)
{
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

static inline float dot_body(const float *a, const float *b, size_t n)
{
    v8f a0 = { 0 }, a1 = { 0 };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 += load8(a + i) * load8(b + i);
        a1 += load8(a + i + 8) * load8(b + i + 8);
    }
    if (i + 8 <= n) {
        a0 += load8(a + i) * load8(b + i);
        i += 8;
    }
    float tail = 0.0f;
    for (; i < n; i++)
        tail += a[i] * b[i];
    return hsum8(a0 + a1) + tail;
}

L8_MULTIVERSION
float l8_cpu_dot(const float *a, const float *b, size_t n)
{
    return dot_body(a, b, n);
}

/* Four dots of x against rows w, w+ldw, w+2ldw, w+3ldw, each in exactly
 * the order of l8_cpu_dot. */
L8_MULTIVERSION
static void dot4(const float *x, const float *w, size_t ldw, size_t n, float r[4])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    v8f p0 = { 0 }, q0 = { 0 }, p1 = { 0 }, q1 = { 0 };
    v8f p2 = { 0 }, q2 = { 0 }, p3 = { 0 }, q3 = { 0 };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8f xa = load8(x + i), xb = load8(x + i + 8);
        p0 += xa * load8(w0 + i); q0 += xb * load8(w0 + i + 8);
        p1 += xa * load8(w1 + i); q1 += xb * load8(w1 + i + 8);
        p2 += xa * load8(w2 + i); q2 += xb * load8(w2 + i + 8);
        p3 += xa * load8(w3 + i); q3 += xb * load8(w3 + i + 8);
    }
    if (i + 8 <= n) {
        v8f xa = load8(x + i);
        p0 += xa * load8(w0 + i);
        p1 += xa * load8(w1 + i);
        p2 += xa * load8(w2 + i);
        p3 += xa * load8(w3 + i);
        i += 8;
    }
    float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
    for (; i < n; i++) {
        t0 += x[i] * w0[i];
        t1 += x[i] * w1[i];
        t2 += x[i] * w2[i];
        t3 += x[i] * w3[i];
    }
    r[0] = hsum8(p0 + q0) + t0;
    r[1] = hsum8(p1 + q1) + t1;
    r[2] = hsum8(p2 + q2) + t2;
    r[3] = hsum8(p3 + q3) + t3;
}

int l8_cpu_ws_init(struct l8_cpu_ws *ws, int nthreads, size_t max_in)
{
    memset(ws, 0, sizeof(*ws));
    ws->nthreads = nthreads;
    ws->floats = L8_CPU_MM_BUDGET_FLOATS;
    if (ws->floats < 4 * max_in)
        ws->floats = 4 * max_in;
    ws->buf = calloc((size_t)nthreads, sizeof(float *));
    if (!ws->buf)
        return -ENOMEM;
    for (int i = 0; i < nthreads; i++) {
        ws->buf[i] = aligned_alloc(64, (ws->floats * sizeof(float) + 63) & ~(size_t)63);
        if (!ws->buf[i]) {
            l8_cpu_ws_free(ws);
            return -ENOMEM;
        }
    }
    return 0;
}

void l8_cpu_ws_free(struct l8_cpu_ws *ws)
{
    if (!ws->buf)
        return;
    for (int i = 0; i < ws->nthreads; i++)
        free(ws->buf[i]);
    free(ws->buf);
    ws->buf = NULL;
}

/* Rows per block: as many as fit the per-thread budget, but few enough
 * that every thread gets a few blocks; a multiple of 4 for dot4. The
 * choice changes only the work split, never a result. */
static uint32_t rows_per_block(const struct l8_cpu_ws *ws, uint32_t out, uint32_t in, int nthreads)
{
    size_t rb = ws->floats / (in ? in : 1);
    size_t fair = ((size_t)out + 4u * (size_t)nthreads - 1) / (4u * (size_t)nthreads);
    if (rb > fair)
        rb = fair;
    rb &= ~(size_t)3;
    if (rb < 4)
        rb = 4;
    return (uint32_t)rb;
}

/* Dots of T input rows against a decoded block of rows. */
static void block_dots(const float *wd, uint32_t rows, uint32_t in, const float *x,
                       uint32_t T, float *const *out_rows, size_t out_col0,
                       const float *scale, const float *xs)
{
    for (uint32_t t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * in;
        float *yt = out_rows[t] + out_col0;
        uint32_t r = 0;
        float d[4];
        for (; r + 4 <= rows; r += 4) {
            dot4(xt, wd + (size_t)r * in, in, in, d);
            for (int j = 0; j < 4; j++) {
                float v = scale ? d[j] * scale[r + j] : d[j];
                yt[r + j] = xs ? v * xs[t] : v;
            }
        }
        for (; r < rows; r++) {
            float v = l8_cpu_dot(xt, wd + (size_t)r * in, in);
            v = scale ? v * scale[r] : v;
            yt[r] = xs ? v * xs[t] : v;
        }
    }
}

struct qmm_job {
    const struct l8_cpu_ws *ws;
    const struct l8_qweight *W;
    const struct l8_dense *D;
    const float *x, *xs;
    uint32_t T, rb;
    float *const *out_rows;
};

static void qmm_chunk(void *ctx, size_t b, size_t e, int tid)
{
    const struct qmm_job *j = ctx;
    float *wd = j->ws->buf[tid];
    const uint32_t in = j->W ? j->W->in : j->D->cols;
    const uint32_t out = j->W ? j->W->out : j->D->rows;
    for (size_t blk = b; blk < e; blk++) {
        uint32_t o0 = (uint32_t)blk * j->rb;
        uint32_t rows = out - o0 < j->rb ? out - o0 : j->rb;
        const float *scale = NULL;
        if (j->W) {
            const uint8_t *w = j->W->w + (size_t)o0 * in;
            for (size_t i = 0; i < (size_t)rows * in; i++)
                wd[i] = l8_e4m3_lut[w[i]];
            scale = j->W->scale + o0;
        } else {
            for (uint32_t r = 0; r < rows; r++)
                l8_dense_row(j->D, o0 + r, wd + (size_t)r * in);
        }
        block_dots(wd, rows, in, j->x, j->T, j->out_rows, o0, scale, j->xs);
    }
}

#define L8_CPU_MAX_ROWPTR 64

void l8_cpu_qmatmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                    const struct l8_qweight *W, const float *x, const float *xs,
                    uint32_t T, float *y, size_t ldy)
{
    /* Row pointers into y, in bounded groups of tokens to stay off the heap. */
    float *rows[L8_CPU_MAX_ROWPTR];
    const int nt = l8_tp_nthreads(tp);
    const uint32_t rb = rows_per_block(ws, W->out, W->in, nt);
    const size_t nblk = (W->out + rb - 1) / rb;
    for (uint32_t t0 = 0; t0 < T; t0 += L8_CPU_MAX_ROWPTR) {
        uint32_t n = T - t0 < L8_CPU_MAX_ROWPTR ? T - t0 : L8_CPU_MAX_ROWPTR;
        for (uint32_t t = 0; t < n; t++)
            rows[t] = y + (size_t)(t0 + t) * ldy;
        struct qmm_job j = { .ws = ws, .W = W, .x = x + (size_t)t0 * W->in,
                             .xs = xs ? xs + t0 : NULL, .T = n, .rb = rb, .out_rows = rows };
        l8_tp_for(tp, nblk, 1, qmm_chunk, &j);
    }
}

void l8_cpu_dense_matmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                         const struct l8_dense *D, const float *x, uint32_t R,
                         float *const *out)
{
    const int nt = l8_tp_nthreads(tp);
    const uint32_t rb = rows_per_block(ws, D->rows, D->cols, nt);
    const size_t nblk = (D->rows + rb - 1) / rb;
    for (uint32_t r0 = 0; r0 < R; r0 += L8_CPU_MAX_ROWPTR) {
        uint32_t n = R - r0 < L8_CPU_MAX_ROWPTR ? R - r0 : L8_CPU_MAX_ROWPTR;
        struct qmm_job j = { .ws = ws, .D = D, .x = x + (size_t)r0 * D->cols,
                             .T = n, .rb = rb, .out_rows = out + r0 };
        l8_tp_for(tp, nblk, 1, qmm_chunk, &j);
    }
}

struct quant_job { const float *x; size_t n; uint8_t *q; float *xd, *xs; };

static void quant_chunk(void *ctx, size_t b, size_t e, int tid)
{
    const struct quant_job *j = ctx;
    for (size_t t = b; t < e; t++) {
        const float *xt = j->x + t * j->n;
        uint8_t *qt = j->q + t * j->n;
        float *dt = j->xd + t * j->n;
        j->xs[t] = l8_quantize_act_row(xt, j->n, qt);
        for (size_t i = 0; i < j->n; i++)
            dt[i] = l8_e4m3_lut[qt[i]];
    }
}

void l8_cpu_quantize_rows(struct l8_tp *tp, const float *x, uint32_t T, size_t n,
                          uint8_t *q, float *xd, float *xs)
{
    struct quant_job j = { .x = x, .n = n, .q = q, .xd = xd, .xs = xs };
    l8_tp_for(tp, T, 0, quant_chunk, &j);
}

void l8_cpu_rmsnorm(const float *x, const float *w, size_t n, float eps, float *y)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (size_t i = 0; i < n; i++)
        y[i] = (x[i] * r) * w[i];
}

void l8_cpu_rope_table(const float *inv_freq, uint32_t head_dim, uint32_t pos,
                       float *cos_out, float *sin_out)
{
    for (uint32_t i = 0; i < head_dim / 2; i++) {
        double a = (double)pos * (double)inv_freq[i];
        cos_out[i] = (float)cos(a);
        sin_out[i] = (float)sin(a);
    }
}

void l8_cpu_rope_apply(float *x, uint32_t n_heads, uint32_t head_dim,
                       const float *cos_t, const float *sin_t)
{
    const uint32_t h2 = head_dim / 2;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        for (uint32_t i = 0; i < h2; i++) {
            float a = xh[i], b = xh[i + h2];
            xh[i] = a * cos_t[i] - b * sin_t[i];
            xh[i + h2] = b * cos_t[i] + a * sin_t[i];
        }
    }
}
