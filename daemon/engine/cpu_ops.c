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
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "../model/numerics.h"

typedef float v8f __attribute__((vector_size(32)));
typedef uint8_t v8u8 __attribute__((vector_size(8)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));
typedef int32_t v8i32 __attribute__((vector_size(32)));

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

/* E4M3 codes and BF16 bits to f32. The generic versions are table
 * lookups and shifts; on x86 with AVX2 the codes are rebuilt 8 at a time
 * (normals bit by bit with the exponent rebiased 7 -> 127, subnormals as
 * m * 2^-9, 0x7f/0xff as NaN), equal to l8_e4m3_lut for every code. Both
 * are exact, so which one runs never changes a result. */
static void decode_e4m3_generic(const uint8_t *w, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = l8_e4m3_lut[w[i]];
}

static void decode_bf16_generic(const uint16_t *h, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = l8_bf16_to_f32(h[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2")))
static void decode_e4m3_avx2(const uint8_t *w, size_t n, float *out)
{
    const __m256i m7 = _mm256_set1_epi32(7), m15 = _mm256_set1_epi32(15);
    const __m256i m80 = _mm256_set1_epi32(0x80), m7f = _mm256_set1_epi32(0x7f);
    const __m256i qnan = _mm256_set1_epi32(0x7fc00000), rebias = _mm256_set1_epi32(120);
    const __m256 sub_unit = _mm256_set1_ps(0x1p-9f);
    const __m256i zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w + i)));
        __m256i e = _mm256_and_si256(_mm256_srli_epi32(c, 3), m15);
        __m256i m = _mm256_and_si256(c, m7);
        __m256i s = _mm256_slli_epi32(_mm256_and_si256(c, m80), 24);
        __m256i nb = _mm256_or_si256(_mm256_or_si256(s, _mm256_slli_epi32(_mm256_add_epi32(e, rebias), 23)),
                                     _mm256_slli_epi32(m, 20));
        __m256i sb = _mm256_or_si256(_mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), sub_unit)), s);
        __m256i r = _mm256_blendv_epi8(nb, sb, _mm256_cmpeq_epi32(e, zero));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(s, qnan),
                               _mm256_cmpeq_epi32(_mm256_and_si256(c, m7f), m7f));
        _mm256_storeu_si256((__m256i *)(out + i), r);
    }
    decode_e4m3_generic(w + i, n - i, out + i);
}

__attribute__((target("avx2")))
static void decode_bf16_avx2(const uint16_t *h, size_t n, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(v, 16));
    }
    decode_bf16_generic(h + i, n - i, out + i);
}

static bool have_avx2(void)
{
    static int v = -1;   /* benign race: every thread computes the same */
    if (v < 0)
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
    return v == 1;
}

static void decode_e4m3(const uint8_t *w, size_t n, float *out)
{
    if (have_avx2())
        decode_e4m3_avx2(w, n, out);
    else
        decode_e4m3_generic(w, n, out);
}

static void decode_bf16(const uint16_t *h, size_t n, float *out)
{
    if (have_avx2())
        decode_bf16_avx2(h, n, out);
    else
        decode_bf16_generic(h, n, out);
}
#else
#define decode_e4m3 decode_e4m3_generic
#define decode_bf16 decode_bf16_generic
#endif

void l8_cpu_decode_e4m3(const uint8_t *w, size_t n, float *out) { decode_e4m3(w, n, out); }

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
            decode_e4m3(j->W->w + (size_t)o0 * in, (size_t)rows * in, wd);
            scale = j->W->scale + o0;
        } else if (j->D->dtype == L8_BF16) {
            decode_bf16((const uint16_t *)j->D->data + (size_t)o0 * in, (size_t)rows * in, wd);
        } else {
            for (uint32_t r = 0; r < rows; r++)
                l8_dense_row(j->D, o0 + r, wd + (size_t)r * in);
        }
        block_dots(wd, rows, in, j->x, j->T, j->out_rows, o0, scale, j->xs);
    }
}

#define L8_CPU_MAX_ROWPTR 64
/* Below this many multiply-adds a matmul runs on the calling thread:
 * waking the pool would cost more than it saves. */
#define L8_CPU_INLINE_MACS (64u * 1024u)

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
        const bool small = (uint64_t)n * W->out * W->in < L8_CPU_INLINE_MACS;
        l8_tp_for(tp, nblk, small ? nblk : 1, qmm_chunk, &j);
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

/* 8 values of a pool row, f32 or bf16 (bf16 -> f32 is exact: a shift). */
static inline v8f load_kv8(const void *row, size_t i, bool bf16)
{
    if (!bf16)
        return load8((const float *)row + i);
    v8u16 h;
    memcpy(&h, (const uint16_t *)row + i, sizeof(h));
    v8u32 w = __builtin_convertvector(h, v8u32) << 16;
    v8f f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

static inline float load_kv1(const void *row, size_t i, bool bf16)
{
    return bf16 ? l8_bf16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

#define PV_KEY_BLOCK 64u
#define PV_DIM_BLOCK 32u

L8_MULTIVERSION
void l8_cpu_attention_tile(const float *q, size_t ldq, uint32_t nt, uint32_t gqa,
                           uint32_t hd, uint32_t pos0,
                           const void *const *krow, const void *const *vrow, bool kv_bf16,
                           float scale, float *scores, float *acc, double *sums,
                           float *kbuf, float *out, size_t ldo)
{
    const uint32_t ctx = pos0 + nt;       /* keys of the last token */
    const uint32_t nq = nt * gqa;
    /* 1. Scores: key row j loaded once for every query of the tile. */
    for (uint32_t j = 0; j < ctx; j++) {
        const float *k;
        if (kv_bf16) {
            for (uint32_t d = 0; d < hd; d++)
                kbuf[d] = load_kv1(krow[j], d, true);
            k = kbuf;
        } else {
            k = krow[j];
        }
        for (uint32_t i = j > pos0 ? j - pos0 : 0; i < nt; i++) {
            const float *qi = q + (size_t)i * ldq;
            float *srow = scores + (size_t)i * gqa * ctx + j;
            uint32_t h = 0;
            float r[4];
            for (; h + 4 <= gqa; h += 4) {
                dot4(k, qi + (size_t)h * hd, hd, hd, r);
                for (int u = 0; u < 4; u++)
                    srow[(size_t)(h + u) * ctx] = r[u] * scale;
            }
            for (; h < gqa; h++)
                srow[(size_t)h * ctx] = dot_body(qi + (size_t)h * hd, k, hd) * scale;
        }
    }
    /* 2. Softmax weights (unnormalized) and denominators. */
    for (uint32_t qi = 0; qi < nq; qi++) {
        const uint32_t n = pos0 + qi / gqa + 1;
        float *sr = scores + (size_t)qi * ctx;
        float mx = sr[0];
        for (uint32_t j = 1; j < n; j++)
            mx = sr[j] > mx ? sr[j] : mx;
        double sm = 0.0;
        for (uint32_t j = 0; j < n; j++) {
            sr[j] = expf(sr[j] - mx);
            sm += (double)sr[j];
        }
        sums[qi] = sm;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * hd);
    /* 3. Weighted values. Every acc element accumulates in ascending j:
     * the key blocks only bound how long a slice of V stays in cache. */
    if (hd % PV_DIM_BLOCK == 0) {
        for (uint32_t j0 = 0; j0 < ctx; j0 += PV_KEY_BLOCK) {
            const uint32_t j1 = j0 + PV_KEY_BLOCK < ctx ? j0 + PV_KEY_BLOCK : ctx;
            for (uint32_t d0 = 0; d0 < hd; d0 += PV_DIM_BLOCK) {
                for (uint32_t i = j0 > pos0 ? j0 - pos0 : 0; i < nt; i++) {
                    const uint32_t n = pos0 + i + 1;
                    const uint32_t je = j1 < n ? j1 : n;
                    for (uint32_t h0 = 0; h0 < gqa; h0 += 4) {
                        const uint32_t ng = gqa - h0 < 4 ? gqa - h0 : 4;
                        const uint32_t q0 = i * gqa + h0;
                        v8f a[4][4];
                        for (uint32_t g = 0; g < ng; g++)
                            for (int u = 0; u < 4; u++)
                                a[g][u] = load8(acc + (size_t)(q0 + g) * hd + d0 + 8 * u);
                        if (ng == 4) {
                            const float *w0 = scores + (size_t)q0 * ctx;
                            const float *w1 = w0 + ctx, *w2 = w1 + ctx, *w3 = w2 + ctx;
                            for (uint32_t j = j0; j < je; j++) {
                                v8f v0 = load_kv8(vrow[j], d0, kv_bf16);
                                v8f v1 = load_kv8(vrow[j], d0 + 8, kv_bf16);
                                v8f v2 = load_kv8(vrow[j], d0 + 16, kv_bf16);
                                v8f v3 = load_kv8(vrow[j], d0 + 24, kv_bf16);
                                a[0][0] += w0[j] * v0; a[0][1] += w0[j] * v1;
                                a[0][2] += w0[j] * v2; a[0][3] += w0[j] * v3;
                                a[1][0] += w1[j] * v0; a[1][1] += w1[j] * v1;
                                a[1][2] += w1[j] * v2; a[1][3] += w1[j] * v3;
                                a[2][0] += w2[j] * v0; a[2][1] += w2[j] * v1;
                                a[2][2] += w2[j] * v2; a[2][3] += w2[j] * v3;
                                a[3][0] += w3[j] * v0; a[3][1] += w3[j] * v1;
                                a[3][2] += w3[j] * v2; a[3][3] += w3[j] * v3;
                            }
                        } else {
                            for (uint32_t j = j0; j < je; j++)
                                for (uint32_t g = 0; g < ng; g++) {
                                    const float w = scores[(size_t)(q0 + g) * ctx + j];
                                    for (int u = 0; u < 4; u++)
                                        a[g][u] += w * load_kv8(vrow[j], d0 + 8 * u, kv_bf16);
                                }
                        }
                        for (uint32_t g = 0; g < ng; g++)
                            for (int u = 0; u < 4; u++)
                                memcpy(acc + (size_t)(q0 + g) * hd + d0 + 8 * u, &a[g][u],
                                       sizeof(v8f));
                    }
                }
            }
        }
    } else {
        for (uint32_t qi = 0; qi < nq; qi++) {
            const uint32_t n = pos0 + qi / gqa + 1;
            float *a = acc + (size_t)qi * hd;
            for (uint32_t j = 0; j < n; j++) {
                const float w = scores[(size_t)qi * ctx + j];
                for (uint32_t d = 0; d < hd; d++)
                    a[d] += w * load_kv1(vrow[j], d, kv_bf16);
            }
        }
    }
    for (uint32_t qi = 0; qi < nq; qi++) {
        const uint32_t i = qi / gqa, h = qi % gqa;
        const float inv = (float)(1.0 / sums[qi]);
        const float *a = acc + (size_t)qi * hd;
        float *o = out + (size_t)i * ldo + (size_t)h * hd;
        for (uint32_t d = 0; d < hd; d++)
            o[d] = a[d] * inv;
    }
}
