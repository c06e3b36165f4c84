/* test_fp8_matmul.c - the CPU kernels against f64 references.
 *
 *  - per-token activation quantizer against its definition (scale =
 *    absmax / 448 in f32, each code the nearest E4M3 value found by a scan
 *    of all codes, ties to the even code, saturation at +-448; an all-zero
 *    row gives zeros and a finite scale);
 *  - FP8 x FP8 products (fp8 numerics) and f32 x FP8 products (exact
 *    numerics) against f64 dot products of the same decoded operands:
 *    relative L2 error <= 1e-5 per output row set, and every element
 *    within 1e-5 of the sum of |terms|;
 *  - the matmul's results do not depend on the token count or the thread
 *    count (bitwise);
 *  - NaN weight codes stay in their own outputs at every token count; the
 *    multi-weight matmul equals single calls (bitwise);
 *  - dense (BF16, F32) lm_head rows, RMSNorm, RoPE at position 9000 and the
 *    attention tile against f64, with the tile size changing nothing and
 *    the split decode path (any key and dim cut) giving the tile's bits.
 * Sizes are awkward on purpose (1, 7, 19, 111, 513, 989). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "cpu_ops.h"
#include "numerics.h"
#include "threadpool.h"

#define PROD_TOL 1e-5

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)   /* [0, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static double nrand(void)
{
    double u = urand() + 1e-300, v = urand();
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* Nearest finite E4M3 code to v by scanning every code; ties to the code
 * with an even mantissa; beyond 448 saturates. */
static uint8_t e4m3_scan(float v)
{
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        float f = l8_e4m3_lut[c];
        if (isnan(f) || (c & 0x80) != (signbit(v) ? 0x80 : 0))
            continue;
        double d = fabs((double)f - (double)v);
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)best;
}

/* y = W x in exact numerics (f32 x) or fp8 numerics (x quantized per
 * token and packed for ws's kernel), for n_w weights sharing x. */
static void qmm_multi(struct l8_tp *tp, const struct l8_cpu_ws *ws, const struct l8_qweight *const *W,
                      uint32_t n_w, const float *x, bool fp8, uint32_t T, float *const *y,
                      const size_t *ldy)
{
    struct l8_cpu_x in = { .f32 = x };
    uint8_t *q = NULL, *packed = NULL;
    float *xs = NULL;
    if (fp8) {
        q = malloc((size_t)T * W[0]->in);
        packed = malloc((size_t)T * l8_cpu_quantize_ld(ws, W[0]->in));
        xs = malloc(sizeof(float) * T);
        l8_cpu_quantize_rows(tp, ws, x, T, W[0]->in, q, packed, xs, &in);
    }
    l8_cpu_qmatmul_multi(tp, ws, W, n_w, &in, T, y, ldy);
    free(q); free(packed); free(xs);
}

static void qmm(struct l8_tp *tp, const struct l8_cpu_ws *ws, const struct l8_qweight *W,
                const float *x, bool fp8, uint32_t T, float *y, size_t ldy)
{
    qmm_multi(tp, ws, &W, 1, x, fp8, T, &y, &ldy);
}

static void test_quantizer(struct l8_tp *tp, const struct l8_cpu_ws *ws)
{
    enum { T = 5, N = 989 };
    float *x = malloc(sizeof(float) * T * N), xs[T];
    uint8_t *q = malloc(T * N), *packed = malloc(T * l8_cpu_quantize_ld(ws, N));
    struct l8_cpu_x in;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < N; i++)
            x[t * N + i] = t == 3 ? 0.0f : (float)(nrand() * pow(10.0, t - 2));
    x[1 * N + 17] = 1e3f;                     /* an outlier sets the scale */
    x[4 * N + 5] = -1e-30f;                   /* far below the smallest subnormal */
    l8_cpu_quantize_rows(tp, ws, x, T, N, q, packed, xs, &in);
    CHECK(in.fp8 == packed && in.scale == xs && in.ld == l8_cpu_quantize_ld(ws, N), "quantizer's x");
    uint32_t bad = 0;
    for (int t = 0; t < T; t++) {
        float amax = 0;
        for (int i = 0; i < N; i++)
            amax = fmaxf(amax, fabsf(x[t * N + i]));
        float s = fmaxf(amax / 448.0f, L8_FP8_MIN_ACT_SCALE);
        CHECK(xs[t] == s && isfinite(xs[t]) && xs[t] > 0, "row %d scale %g vs %g", t, xs[t], s);
        for (int i = 0; i < N; i++) {
            uint8_t want = e4m3_scan(x[t * N + i] / s);
            if (q[t * N + i] != want && l8_e4m3_lut[q[t * N + i]] != l8_e4m3_lut[want])
                bad++;
            if (isnan(l8_e4m3_lut[q[t * N + i]]))
                bad++;
        }
    }
    CHECK(bad == 0, "quantizer: %u codes differ from the definition", bad);
    for (int i = 0; i < N; i++)
        CHECK(l8_e4m3_lut[q[3 * N + i]] == 0.0f, "all-zero row gives zeros");
    /* The largest magnitude maps to +-448 exactly. */
    CHECK(l8_e4m3_lut[q[1 * N + 17]] == 448.0f, "absmax -> 448");
    free(x); free(q); free(packed);
}

/* The vector quantizer gives l8_quantize_act_row's scale and codes bit for
 * bit: on rows of every float's high bits (NaN, infinities, subnormals
 * included) and on the rounding boundaries of every exponent, with scale 1
 * (a 448 in the row) and without, at row lengths that end in a tail. */
static void test_quantize_same_bits(const struct l8_cpu_ws *ws)
{
    enum { N = 61, ROWS = 1 << 16 };
    float x[N];
    uint8_t qa[N], qb[N];
    uint32_t bad = 0, rows = 0;
    static const uint32_t low[] = { 0, 1, 0x7ffff, 0x80000, 0x80001, 0xfffff };
    uint32_t edge = 0;
    for (uint32_t r = 0; r < 2 * ROWS; r++) {
        const bool boundary = r >= ROWS;
        for (int i = 0; i < N; i++) {
            uint32_t u;
            if (!boundary) {
                const uint32_t k = r * N + (uint32_t)i;
                u = k * 1031u + (uint32_t)((k * 0x9e3779b9u) >> 22);
            } else {            /* sign, exponent, 3 kept bits, low bits */
                const uint32_t e = edge++ % (2 * 256 * 8 * 6);
                u = (e / (256 * 8 * 6)) << 31 | (e / (8 * 6) % 256) << 23
                    | (e / 6 % 8) << 20 | low[e % 6];
            }
            memcpy(&x[i], &u, 4);
        }
        if (r % 2)
            x[r % N] = 448.0f;
        const int n = N - (int)(r % 17);
        const float sa = l8_quantize_act_row(x, (size_t)n, qa);
        const float sb = l8_fp8_quantize_row(ws->fp8, x, (size_t)n, qb);
        rows++;
        if (memcmp(&sa, &sb, 4) != 0 || memcmp(qa, qb, (size_t)n) != 0)
            bad++;
    }
    CHECK(bad == 0, "%s quantizer: %u of %u rows differ from l8_quantize_act_row",
          l8_fp8_kernel_name(ws->fp8), bad, rows);
}

/* y vs f64 for one configuration. Returns the relative L2 error. */
static double check_qmatmul(struct l8_tp *tp, const struct l8_cpu_ws *ws, uint32_t out,
                            uint32_t in, uint32_t T, bool fp8)
{
    uint8_t *w = malloc((size_t)out * in);
    float *scale = malloc(sizeof(float) * out);
    float *x = malloc(sizeof(float) * T * in), *xd = malloc(sizeof(float) * T * in);
    uint8_t *xq = malloc((size_t)(T ? T : 1) * in);
    float *xs = malloc(sizeof(float) * T);
    float *y = malloc(sizeof(float) * T * out), *y1 = malloc(sizeof(float) * out);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        uint8_t c;
        do c = (uint8_t)(urand() * 256); while ((c & 0x7f) == 0x7f);
        w[i] = c;
    }
    for (uint32_t o = 0; o < out; o++)
        scale[o] = l8_bf16_to_f32(l8_f32_to_bf16((float)(urand() * 1e-3 + 1e-5)));
    for (size_t i = 0; i < (size_t)T * in; i++)
        x[i] = (float)(nrand() * (urand() < 0.01 ? 20 : 1));
    /* The reference's operands: x itself, or its codes by the definition. */
    const float *xin = x, *xsp = NULL;
    if (fp8) {
        for (uint32_t t = 0; t < T; t++) {
            xs[t] = l8_quantize_act_row(x + (size_t)t * in, in, xq + (size_t)t * in);
            for (uint32_t i = 0; i < in; i++)
                xd[(size_t)t * in + i] = l8_e4m3_lut[xq[(size_t)t * in + i]];
        }
        xin = xd;
        xsp = xs;
    }
    struct l8_qweight W = { .w = w, .scale = scale, .out = out, .in = in };
    qmm(tp, ws, &W, x, fp8, T, y, out);
    double num = 0, den = 0;
    uint32_t bad = 0, inv = 0;
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t o = 0; o < out; o++) {
            double r = 0, a = 0;
            for (uint32_t i = 0; i < in; i++) {
                double p = (double)xin[(size_t)t * in + i] * (double)l8_e4m3_lut[w[(size_t)o * in + i]];
                r += p;
                a += fabs(p);
            }
            double f = (double)scale[o] * (xsp ? (double)xsp[t] : 1.0);
            r *= f;
            a *= f;
            double d = (double)y[(size_t)t * out + o] - r;
            num += d * d;
            den += r * r;
            if (fabs(d) > PROD_TOL * a + 1e-30)
                bad++;
        }
        /* The same token alone gives the same bits. */
        qmm(tp, ws, &W, x + (size_t)t * in, fp8, 1, y1, out);
        inv += memcmp(y1, y + (size_t)t * out, sizeof(float) * out) != 0;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(bad == 0 && rel <= PROD_TOL, "%s qmatmul %ux%u T=%u: rel %.3g, %u elements off",
          fp8 ? "fp8" : "exact", out, in, T, rel, bad);
    CHECK(inv == 0, "%s qmatmul %ux%u: %u tokens differ alone vs batched", fp8 ? "fp8" : "exact",
          out, in, inv);
    free(w); free(scale); free(x); free(xd); free(xq); free(xs); free(y); free(y1);
    return rel;
}

/* cpu_fp8.h's order of operations, written out from its definition. */
static float fp8_definition(const uint8_t *w, const uint8_t *xq, uint32_t in, float ws, float xs)
{
    float acc[16] = { 0 }, s8[8], s4[4];
    for (uint32_t b = 0; b < (in + 63) / 64; b++)
        for (uint32_t h = 0; h < 2; h++)
            for (uint32_t j = 0; j < 16; j++) {
                const uint32_t e = 64 * b + 16 * (j / 4) + 8 * h + 2 * (j % 4);
                const float w1 = e + 1 < in ? l8_e4m3_lut[w[e + 1]] : 0.0f;
                const float x1 = e + 1 < in ? l8_e4m3_lut[xq[e + 1]] : 0.0f;
                const float w0 = e < in ? l8_e4m3_lut[w[e]] : 0.0f;
                const float x0 = e < in ? l8_e4m3_lut[xq[e]] : 0.0f;
                acc[j] = (acc[j] + w1 * x1) + w0 * x0;
            }
    for (int j = 0; j < 8; j++)
        s8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++)
        s4[j] = s8[j] + s8[j + 4];
    const float v = (((s4[0] + s4[2]) + (s4[1] + s4[3])) * ws) * xs;
    return isnan(v) ? NAN : v;
}

/* Every fp8 kernel gives the definition's bits at every shape and token
 * count (both paths of each: weights decoded in registers, and once per
 * block of rows), NaN weight codes included. */
static void test_fp8_definition(struct l8_tp *tp, const struct l8_cpu_ws *ws)
{
    static const uint32_t shapes[][3] = {   /* out, in, tokens */
        { 5, 7, 1 }, { 9, 64, 2 }, { 13, 111, 3 }, { 37, 513, 4 }, { 21, 2048, 5 },
        { 8, 200, 9 }, { 33, 1024, 70 }, { 6, 4096, 1 }, { 11, 130, 1 },
        { 600, 4096, 6 },   /* more rows per thread than z_blocked keeps in L2 */ 
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const uint32_t out = shapes[s][0], in = shapes[s][1], T = shapes[s][2];
        uint8_t *w = malloc((size_t)out * in), *xq = malloc((size_t)T * in);
        float *scale = malloc(sizeof(float) * out), *x = malloc(sizeof(float) * T * in);
        float *xs = malloc(sizeof(float) * T), *y = malloc(sizeof(float) * T * out);
        for (size_t i = 0; i < (size_t)out * in; i++)
            w[i] = (uint8_t)(urand() * 256);
        for (size_t i = 0; i < (size_t)out * in; i++)     /* NaN codes in a few rows only */
            if ((w[i] & 0x7f) == 0x7f && (i / in) % 4 != 1)
                w[i] ^= 1;
        for (uint32_t o = 0; o < out; o++)
            scale[o] = l8_bf16_to_f32(l8_f32_to_bf16((float)(urand() * 1e-2 + 1e-5)));
        for (size_t i = 0; i < (size_t)T * in; i++)
            x[i] = (float)(nrand() * (urand() < 0.01 ? 50 : 1));
        for (uint32_t t = 0; t < T; t++)
            xs[t] = l8_quantize_act_row(x + (size_t)t * in, in, xq + (size_t)t * in);
        struct l8_qweight W = { .w = w, .scale = scale, .out = out, .in = in };
        qmm(tp, ws, &W, x, true, T, y, out);
        uint32_t bad = 0;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t o = 0; o < out; o++) {
                const float r = fp8_definition(w + (size_t)o * in, xq + (size_t)t * in, in,
                                               scale[o], xs[t]);
                const float v = y[(size_t)t * out + o];
                if (memcmp(&r, &v, sizeof(r)) != 0) {
                    if (bad++ == 0)
                        printf("  %ux%u T=%u: token %u row %u: %a, definition %a\n", out, in, T,
                               t, o, v, r);
                }
            }
        CHECK(bad == 0, "fp8 kernel %s %ux%u T=%u: %u outputs differ from the definition",
              l8_fp8_kernel_name(ws->fp8), out, in, T, bad);
        free(w); free(xq); free(scale); free(x); free(xs); free(y);
    }
}

static void test_threads_invariance(const struct l8_cpu_ws *ws1, const struct l8_cpu_ws *ws3,
                                    struct l8_tp *tp1, struct l8_tp *tp3, bool fp8)
{
    const uint32_t out = 111, in = 513, T = 7;
    uint8_t *w = malloc((size_t)out * in);
    float *scale = malloc(sizeof(float) * out), *x = malloc(sizeof(float) * T * in);
    float *ya = malloc(sizeof(float) * T * out), *yb = malloc(sizeof(float) * T * out);
    for (size_t i = 0; i < (size_t)out * in; i++)
        w[i] = (uint8_t)(urand() * 126);
    for (uint32_t o = 0; o < out; o++)
        scale[o] = 0.01f;
    for (size_t i = 0; i < (size_t)T * in; i++)
        x[i] = (float)nrand();
    struct l8_qweight W = { .w = w, .scale = scale, .out = out, .in = in };
    qmm(tp1, ws1, &W, x, fp8, T, ya, out);
    qmm(tp3, ws3, &W, x, fp8, T, yb, out);
    CHECK(memcmp(ya, yb, sizeof(float) * T * out) == 0, "%s: 1 vs 3 threads differ",
          fp8 ? "fp8" : "exact");
    free(w); free(scale); free(x); free(ya); free(yb);
}

/* Weight rows holding NaN codes (0x7f/0xff) give NaN exactly in their own
 * outputs and the same bits at every token count (the fused path decodes
 * in registers and must fall back to the table for them); the multi-weight
 * matmul equals one call per weight, bitwise. */
static void test_nan_codes_and_multi(struct l8_tp *tp, const struct l8_cpu_ws *ws, bool fp8)
{
    enum { OUT = 37, IN = 77, T = 9, OUT2 = 5 };
    uint8_t *w = malloc(OUT * IN), *w2 = malloc(OUT2 * IN);
    float scale[OUT], scale2[OUT2];
    float *x = malloc(sizeof(float) * T * IN);
    float *ya = malloc(sizeof(float) * T * OUT), *yb = malloc(sizeof(float) * T * OUT);
    float *y2 = malloc(sizeof(float) * T * OUT2), *y2b = malloc(sizeof(float) * T * OUT2);
    for (size_t i = 0; i < (size_t)OUT * IN; i++)
        w[i] = (uint8_t)(urand() * 126) | (urand() < 0.5 ? 0x80 : 0);
    for (size_t i = 0; i < (size_t)OUT2 * IN; i++)
        w2[i] = (uint8_t)(urand() * 126);
    w[3 * IN + 70] = 0x7f;          /* in the scalar tail */
    w[10 * IN + 5] = 0xff;          /* in the vector body, second of a row pair */
    w[5 * IN + 30] = 0x7f;          /* where a read past row 4's padding would land */
    for (int o = 0; o < OUT; o++)
        scale[o] = 0.01f;
    for (int o = 0; o < OUT2; o++)
        scale2[o] = 0.02f;
    for (size_t i = 0; i < (size_t)T * IN; i++)
        x[i] = (float)nrand();
    struct l8_qweight W = { .w = w, .scale = scale, .out = OUT, .in = IN };
    struct l8_qweight W2 = { .w = w2, .scale = scale2, .out = OUT2, .in = IN };
    qmm(tp, ws, &W, x, fp8, T, ya, OUT);
    uint32_t diff = 0, nan_bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        qmm(tp, ws, &W, x + (size_t)t * IN, fp8, 1, yb, OUT);
        diff += memcmp(yb, ya + (size_t)t * OUT, sizeof(float) * OUT) != 0;
        for (int o = 0; o < OUT; o++)
            nan_bad += (isnan(yb[o]) != 0) != (o == 3 || o == 5 || o == 10);
    }
    CHECK(diff == 0 && nan_bad == 0, "%s NaN codes: %u tokens differ alone vs batched, %u outputs "
          "wrongly NaN or not", fp8 ? "fp8" : "exact", diff, nan_bad);
    for (uint32_t tn = 1; tn <= T; tn += 2) {
        const struct l8_qweight *Ws[2] = { &W, &W2 };
        float *ys[2] = { yb, y2 };
        const size_t ld[2] = { OUT, OUT2 };
        qmm_multi(tp, ws, Ws, 2, x, fp8, tn, ys, ld);
        qmm(tp, ws, &W, x, fp8, tn, ya, OUT);
        qmm(tp, ws, &W2, x, fp8, tn, y2b, OUT2);
        CHECK(memcmp(ya, yb, sizeof(float) * tn * OUT) == 0
              && memcmp(y2, y2b, sizeof(float) * tn * OUT2) == 0,
              "%s multi-weight matmul differs from single calls at T=%u", fp8 ? "fp8" : "exact", tn);
    }
    free(w); free(w2); free(x); free(ya); free(yb); free(y2); free(y2b);
}

/* F32 dense rows (fused path at few rows, decode-once beyond) against f64,
 * and the same bits for one row alone as among 9. */
static void test_dense_f32(struct l8_tp *tp, const struct l8_cpu_ws *ws)
{
    enum { ROWS = 101, COLS = 37, R = 9 };
    float *d = malloc(sizeof(float) * ROWS * COLS), *x = malloc(sizeof(float) * R * COLS);
    float *y = malloc(sizeof(float) * R * ROWS), *y1 = malloc(sizeof(float) * ROWS);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        d[i] = (float)nrand();
    for (size_t i = 0; i < (size_t)R * COLS; i++)
        x[i] = (float)nrand();
    struct l8_dense D = { .dtype = L8_F32, .data = d, .rows = ROWS, .cols = COLS };
    float *out[R];
    for (int r = 0; r < R; r++)
        out[r] = y + (size_t)r * ROWS;
    l8_cpu_dense_matmul(tp, ws, &D, x, R, out);
    double num = 0, den = 0;
    uint32_t diff = 0;
    for (int r = 0; r < R; r++) {
        for (int v = 0; v < ROWS; v++) {
            double ref = 0;
            for (int i = 0; i < COLS; i++)
                ref += (double)x[r * COLS + i] * d[(size_t)v * COLS + i];
            double e = y[(size_t)r * ROWS + v] - ref;
            num += e * e;
            den += ref * ref;
        }
        float *o1[1] = { y1 };
        l8_cpu_dense_matmul(tp, ws, &D, x + (size_t)r * COLS, 1, o1);
        diff += memcmp(y1, out[r], sizeof(float) * ROWS) != 0;
    }
    CHECK(sqrt(num / den) <= PROD_TOL && diff == 0, "dense f32 matmul rel %.3g, %u rows differ "
          "alone vs batched", sqrt(num / den), diff);
    free(d); free(x); free(y); free(y1);
}

static void test_dense(struct l8_tp *tp, const struct l8_cpu_ws *ws)
{
    const uint32_t rows = 989, cols = 111, R = 3;
    uint16_t *d = malloc(sizeof(uint16_t) * rows * cols);
    float *x = malloc(sizeof(float) * R * cols), *y = malloc(sizeof(float) * R * rows);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        d[i] = l8_f32_to_bf16((float)nrand() * 0.05f);
    for (size_t i = 0; i < (size_t)R * cols; i++)
        x[i] = (float)nrand();
    struct l8_dense D = { .dtype = L8_BF16, .data = d, .rows = rows, .cols = cols };
    float *out[3] = { y, y + rows, y + 2 * rows };
    l8_cpu_dense_matmul(tp, ws, &D, x, R, out);
    double num = 0, den = 0;
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t v = 0; v < rows; v++) {
            double ref = 0;
            for (uint32_t i = 0; i < cols; i++)
                ref += (double)x[r * cols + i] * l8_bf16_to_f32(d[(size_t)v * cols + i]);
            double e = y[(size_t)r * rows + v] - ref;
            num += e * e;
            den += ref * ref;
        }
    CHECK(sqrt(num / den) <= PROD_TOL, "dense matmul rel %.3g", sqrt(num / den));
    free(d); free(x); free(y);
}

/* The exact kernels' 16-wide forms give the 8-wide ones' bits: E4M3,
 * BF16 and F32 weights, one to four tokens (the fused path), widths with
 * every tail (16-step body, the 8-wide step, scalars), NaN codes, signed
 * zeros. */
static void test_wide_same_bits(struct l8_tp *tp, struct l8_cpu_ws *ws)
{
    if (!ws->wide) {
        printf("no 16-wide exact kernels on this processor\n");
        return;
    }
    static const uint32_t ins[] = { 1, 7, 8, 15, 16, 24, 31, 111, 513, 2048 };
    uint32_t bad = 0;
    for (size_t s = 0; s < sizeof(ins) / sizeof(ins[0]); s++)
        for (uint32_t T = 1; T <= 4; T++) {
            const uint32_t in = ins[s], out = 13;
            uint8_t *w = malloc((size_t)out * in);
            uint16_t *wb = malloc(sizeof(uint16_t) * out * in);
            float *wf = malloc(sizeof(float) * out * in), scale[13];
            float *x = malloc(sizeof(float) * T * in);
            float *y[2] = { malloc(sizeof(float) * T * out), malloc(sizeof(float) * T * out) };
            for (size_t i = 0; i < (size_t)out * in; i++) {
                w[i] = (uint8_t)(urand() * 256);
                wf[i] = i % 17 == 3 ? -0.0f : (float)nrand();
                wb[i] = l8_f32_to_bf16(wf[i]);
            }
            for (uint32_t o = 0; o < out; o++)
                scale[o] = 0.01f;
            for (size_t i = 0; i < (size_t)T * in; i++)
                x[i] = i % 5 == 1 ? -0.0f : (float)nrand();
            struct l8_qweight W = { .w = w, .scale = scale, .out = out, .in = in };
            struct l8_dense Db = { .dtype = L8_BF16, .data = wb, .rows = out, .cols = in };
            struct l8_dense Df = { .dtype = L8_F32, .data = wf, .rows = out, .cols = in };
            for (int kind = 0; kind < 3; kind++) {
                for (int wide = 0; wide < 2; wide++) {
                    ws->wide = wide;
                    float *rows[4];
                    for (uint32_t t = 0; t < T; t++)
                        rows[t] = y[wide] + (size_t)t * out;
                    if (kind == 0)
                        qmm(tp, ws, &W, x, false, T, y[wide], out);
                    else
                        l8_cpu_dense_matmul(tp, ws, kind == 1 ? &Db : &Df, x, T, rows);
                }
                bad += memcmp(y[0], y[1], sizeof(float) * T * out) != 0;
            }
            free(w); free(wb); free(wf); free(x); free(y[0]); free(y[1]);
        }
    ws->wide = true;
    CHECK(bad == 0, "%u shapes where the 16-wide exact kernels differ from the 8-wide", bad);
}

static void test_norm_rope(void)
{
    enum { N = 513, HD = 128 };
    float x[N], w[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)nrand() * 3;
        w[i] = (float)(1 + 0.1 * nrand());
    }
    l8_cpu_rmsnorm(x, w, N, 1e-5f, y);
    double ss = 0, worst = 0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    double r = 1 / sqrt(ss / N + 1e-5);
    for (int i = 0; i < N; i++) {
        double ref = x[i] * r * w[i];
        worst = fmax(worst, fabs(y[i] - ref) / (fabs(ref) + 1e-3));
    }
    CHECK(worst < 1e-6, "rmsnorm rel %.3g", worst);

    /* RoPE at position 9000, theta 500000 (no scaling: the engine uses the
     * model's inv_freq as given). */
    float inv[HD / 2], cs[HD / 2], sn[HD / 2], q[2 * HD];
    double qd[2 * HD];
    for (int i = 0; i < HD / 2; i++)
        inv[i] = (float)pow(500000.0, -2.0 * i / HD);
    for (int i = 0; i < 2 * HD; i++)
        qd[i] = q[i] = (float)nrand();
    const uint32_t pos = 9000;
    l8_cpu_rope_table(inv, HD, pos, cs, sn);
    l8_cpu_rope_apply(q, 2, HD, cs, sn);
    double num = 0, den = 0;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < HD / 2; i++) {
            double a = (double)pos * (double)inv[i];
            double x1 = qd[h * HD + i], x2 = qd[h * HD + i + HD / 2];
            double o1 = x1 * cos(a) - x2 * sin(a), o2 = x2 * cos(a) + x1 * sin(a);
            num += pow(q[h * HD + i] - o1, 2) + pow(q[h * HD + i + HD / 2] - o2, 2);
            den += o1 * o1 + o2 * o2;
        }
    CHECK(sqrt(num / den) < 1e-6, "rope at 9000 rel %.3g", sqrt(num / den));
}

static void test_attention(bool bf16)
{
    enum { HD = 64, GQA = 4, NT = 5, POS0 = 37, CTX = POS0 + NT };
    float *q = malloc(sizeof(float) * NT * GQA * HD);
    float *kf = malloc(sizeof(float) * CTX * HD), *vf = malloc(sizeof(float) * CTX * HD);
    uint16_t *kh = malloc(sizeof(uint16_t) * CTX * HD), *vh = malloc(sizeof(uint16_t) * CTX * HD);
    const void *kr[CTX], *vr[CTX];
    for (int i = 0; i < NT * GQA * HD; i++)
        q[i] = (float)nrand();
    for (int i = 0; i < CTX * HD; i++) {
        kh[i] = l8_f32_to_bf16((float)nrand());
        vh[i] = l8_f32_to_bf16((float)nrand());
        kf[i] = l8_bf16_to_f32(kh[i]);
        vf[i] = l8_bf16_to_f32(vh[i]);
    }
    /* Rows in reverse memory order: the kernel must follow the pointers. */
    for (int j = 0; j < CTX; j++) {
        int m = CTX - 1 - j;
        kr[j] = bf16 ? (const void *)(kh + m * HD) : (const void *)(kf + m * HD);
        vr[j] = bf16 ? (const void *)(vh + m * HD) : (const void *)(vf + m * HD);
    }
    float *scores = malloc(sizeof(float) * NT * GQA * CTX), *acc = malloc(sizeof(float) * NT * GQA * HD);
    double sums[NT * GQA];
    float kbuf[HD], out[NT * GQA * HD], out1[GQA * HD];
    const float sc = 1.0f / sqrtf(HD);
    l8_cpu_attention_tile(q, GQA * HD, NT, GQA, HD, POS0, kr, vr, bf16, sc, scores, acc, sums,
                          kbuf, out, GQA * HD);
    double num = 0, den = 0;
    uint32_t tile_diff = 0, split_diff = 0;
    for (int i = 0; i < NT; i++) {
        for (int h = 0; h < GQA; h++) {
            const float *qh = q + (i * GQA + h) * HD;
            int n = POS0 + i + 1;
            double s[CTX], mx = -INFINITY, z = 0;
            for (int j = 0; j < n; j++) {
                int m = CTX - 1 - j;
                double d = 0;
                for (int c = 0; c < HD; c++)
                    d += (double)qh[c] * kf[m * HD + c];
                s[j] = d / sqrt((double)HD);
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < n; j++)
                z += exp(s[j] - mx);
            for (int c = 0; c < HD; c++) {
                double o = 0;
                for (int j = 0; j < n; j++)
                    o += exp(s[j] - mx) / z * vf[(CTX - 1 - j) * HD + c];
                double e = out[(i * GQA + h) * HD + c] - o;
                num += e * e;
                den += o * o;
            }
        }
        /* Token i alone (a tile of one) gives the same bits. */
        l8_cpu_attention_tile(q + i * GQA * HD, GQA * HD, 1, GQA, HD, POS0 + i, kr, vr, bf16, sc,
                              scores, acc, sums, kbuf, out1, GQA * HD);
        tile_diff += memcmp(out1, out + i * GQA * HD, sizeof(out1)) != 0;
        /* The split decode path, keys cut in chunks of 7 and dims in two
         * halves (and not at all, the scalar path), gives the same bits. */
        {
            enum { CH = 7, NCH = (CTX + CH - 1) / CH };
            const uint32_t n = POS0 + i + 1, nch = (n + CH - 1) / CH;
            float w[GQA * CTX], cmax[NCH * GQA], mx[GQA], acc1[GQA * HD], acc2[GQA * HD];
            double sm[GQA];
            for (uint32_t c = 0; c < nch; c++)
                l8_cpu_attn_split_scores(q + i * GQA * HD, GQA, HD, kr, bf16, c * CH,
                                         (c + 1) * CH < n ? (c + 1) * CH : n, sc, w, CTX, kbuf,
                                         cmax + c * GQA);
            l8_cpu_attn_split_max(cmax, nch, GQA, w, CTX, mx);
            for (uint32_t c = nch; c-- > 0;)
                l8_cpu_attn_split_exp(w, CTX, GQA, c * CH, (c + 1) * CH < n ? (c + 1) * CH : n, mx);
            l8_cpu_attn_split_sum(w, CTX, GQA, n, sm);
            l8_cpu_attn_split_pv(w, CTX, GQA, n, vr, bf16, HD, HD / 2, HD, acc1);
            l8_cpu_attn_split_pv(w, CTX, GQA, n, vr, bf16, HD, 0, HD / 2, acc1);
            l8_cpu_attn_split_pv(w, CTX, GQA, n, vr, bf16, HD, 0, 8, acc2);
            l8_cpu_attn_split_pv(w, CTX, GQA, n, vr, bf16, HD, 8, HD, acc2);
            uint32_t bad = 0;
            for (int h = 0; h < GQA; h++)
                for (int d = 0; d < HD; d++) {
                    const float inv = (float)(1.0 / sm[h]);
                    const float o1 = acc1[h * HD + d] * inv, o2 = acc2[h * HD + d] * inv;
                    bad += memcmp(&o1, &out1[h * HD + d], 4) != 0 || memcmp(&o2, &o1, 4) != 0;
                }
            split_diff += bad != 0;
        }
    }
    CHECK(split_diff == 0, "attention (%s): %u tokens differ split vs tile", bf16 ? "bf16" : "f32",
          split_diff);
    CHECK(sqrt(num / den) < 1e-5, "attention (%s) rel %.3g", bf16 ? "bf16" : "f32", sqrt(num / den));
    CHECK(tile_diff == 0, "attention (%s): %u tokens differ alone vs in a tile", bf16 ? "bf16" : "f32",
          tile_diff);
    free(q); free(kf); free(vf); free(kh); free(vh); free(scores); free(acc);
}

int main(void)
{
    struct l8_tp *tp = l8_tp_new(2), *tp1 = l8_tp_new(1), *tp3 = l8_tp_new(3);
    struct l8_cpu_ws ws, ws1, ws3;
    if (!tp || !tp1 || !tp3 || l8_cpu_ws_init(&ws, 2, 1024) < 0 || l8_cpu_ws_init(&ws1, 1, 1024) < 0
        || l8_cpu_ws_init(&ws3, 3, 1024) < 0) {
        printf("setup failed\n");
        return 1;
    }
    test_quantizer(tp, &ws);
    test_quantize_same_bits(&ws);
    /* The vectorized E4M3 decoder equals the table on all 256 codes, at
     * every alignment of the 8-wide body and the scalar tail. */
    uint8_t codes[256 + 11];
    float dec[256 + 11];
    for (int off = 0; off < 11; off++) {
        for (int c = 0; c < 256; c++)
            codes[off + c] = (uint8_t)c;
        l8_cpu_decode_e4m3(codes + off, 256, dec);
        for (int c = 0; c < 256; c++)
            CHECK(memcmp(&dec[c], &l8_e4m3_lut[c], 4) == 0
                  || (isnan(dec[c]) && isnan(l8_e4m3_lut[c])), "decode code %d offset %d: %a",
                  c, off, dec[c]);
    }
    static const uint32_t shapes[][3] = {   /* out, in, tokens */
        { 1, 1, 1 }, { 7, 19, 3 }, { 19, 111, 17 }, { 111, 513, 5 }, { 989, 128, 2 },
        { 64, 1024, 9 },
    };
    double worst_exact = 0;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        worst_exact = fmax(worst_exact, check_qmatmul(tp, &ws, shapes[i][0], shapes[i][1], shapes[i][2], false));
    test_threads_invariance(&ws1, &ws3, tp1, tp3, false);
    test_nan_codes_and_multi(tp, &ws, false);
    test_nan_codes_and_multi(tp3, &ws3, false);
    /* Every fp8 kernel this processor runs: the portable one, and both
     * AVX-512 ones where it has AVX-512 BF16. */
    const enum l8_fp8_kernel best = ws.fp8;
    for (int k = L8_FP8_VEC; k <= L8_FP8_AVX512_DP; k++) {
        if (k != L8_FP8_VEC && best == L8_FP8_VEC)
            continue;
        ws.fp8 = ws1.fp8 = ws3.fp8 = (enum l8_fp8_kernel)k;
        double worst_fp8 = 0;
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            worst_fp8 = fmax(worst_fp8, check_qmatmul(tp, &ws, shapes[i][0], shapes[i][1], shapes[i][2], true));
        printf("fp8 kernel %s: worst relative L2 vs f64 %.3g\n", l8_fp8_kernel_name(ws.fp8),
               worst_fp8);
        test_fp8_definition(tp, &ws);
        test_fp8_definition(tp3, &ws3);
        test_threads_invariance(&ws1, &ws3, tp1, tp3, true);
        test_nan_codes_and_multi(tp, &ws, true);
        test_nan_codes_and_multi(tp3, &ws3, true);
    }
    ws.fp8 = ws1.fp8 = ws3.fp8 = best;
    printf("exact qmatmul vs f64: worst relative L2 %.3g\n", worst_exact);
    test_dense(tp, &ws);
    test_dense_f32(tp, &ws);
    test_wide_same_bits(tp, &ws);
    test_norm_rope();
    test_attention(false);
    test_attention(true);
    l8_cpu_ws_free(&ws); l8_cpu_ws_free(&ws1); l8_cpu_ws_free(&ws3);
    l8_tp_free(tp); l8_tp_free(tp1); l8_tp_free(tp3);
    printf("%s\n", t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}
