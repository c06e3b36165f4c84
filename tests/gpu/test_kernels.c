/* test_kernels.c - every kernel of kernels/ against a plain C reference
 * (f64 where it computes), on fresh random inputs, outputs poisoned with
 * NaN before each launch (so an unwritten element fails), awkward sizes.
 * FP8 products are compared on identical FP8 operands, so they are tight.
 * Exits 77 when no CUDA device is present. */
#include <errno.h>
#include <stdbool.h>
#include <time.h>

#include "gpu_util.h"
#include "l8_kernels.h"
#include "numerics.h"
#include "sampler.h"

#define TOL_F32 2e-6     /* f32 arithmetic, different summation order */
#define TOL_SUM 1e-5     /* long f32 sums */
/* Tensor-core products on exact operands: bf16 MMA sums in f32 but not in
 * IEEE order (and may truncate); Hopper's FP8 MMA adds at ~14 bits inside an
 * instruction before cuBLASLt promotes to f32 (measured: printed below).
 * A wrong scale, operand order or layout is off by O(1), far above both. */
#define TOL_TC 5e-5
#define TOL_FP8_TC 1e-3
/* Prefill attention against a reference on the same bf16 q: what is left is
 * the rounding of the softmax weights to bf16 for P V (<= 2^-9 each, and
 * the row sums add the rounded weights) and the MMA's f32 sums. A masking
 * or indexing mistake moves a row by O(1/length). */
#define TOL_ATTN_TC 3e-3
#define TOL_ATTN_TC_ROW 1e-2   /* one (row, head), fewer terms to average the rounding */

/* ---- quantize ------------------------------------------------------------- */

static void test_quantize(void)
{
    const uint32_t Ks[] = { 16, 100, 4096, 14336 };
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        uint32_t K = Ks[ki], T = 7;
        float *x = malloc((size_t)T * K * 4);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t i = 0; i < K; i++) {
                float v = rnd_n(t == 3 ? 1e-3f : 3.0f);
                if (t == 1)
                    v = 0.0f;                          /* all-zero row: minimum scale */
                if (t == 2 && i == K / 2)
                    v = 1e6f;                           /* one outlier */
                if (t == 4)
                    v = rnd_n(1e-12f);                  /* below the minimum scale */
                x[(size_t)t * K + i] = v;
            }
        float *dx = dup_to_dev(x, (size_t)T * K * 4);
        uint8_t *dq = dalloc((size_t)T * K);
        float *ds = dalloc(T * 4);
        KOK(l8k_quantize_rows(dx, T, K, dq, ds, 0));
        uint8_t *q = malloc((size_t)T * K), *qr = malloc(K);
        float s[16];
        to_host(q, dq, (size_t)T * K);
        to_host(s, ds, T * 4);
        uint32_t bad = 0;
        for (uint32_t t = 0; t < T; t++) {
            float sr = l8_quantize_act_row(x + (size_t)t * K, K, qr);
            if (memcmp(&sr, &s[t], 4) != 0)
                bad++;
            bad += memcmp(qr, q + (size_t)t * K, K) != 0;
        }
        CHECK(bad == 0, "quantize K=%u: %u rows differ from l8_quantize_act_row", K, bad);
        free(x); free(q); free(qr);
        cudaFree(dx); cudaFree(dq); cudaFree(ds);
    }
}

/* ---- rmsnorm / silu ------------------------------------------------------ */

static void test_rmsnorm(void)
{
    const uint32_t Hs[] = { 64, 500, 4096 };
    for (size_t hi = 0; hi < 3; hi++) {
        uint32_t H = Hs[hi], T = 9, n_out = 4;
        const float eps = 1e-5f;
        int32_t rows[4] = { 8, 0, 5, 3 };
        size_t n = (size_t)T * H;
        float *x = malloc(n * 4), *add = malloc(n * 4), *w = malloc(H * 4);
        for (size_t i = 0; i < n; i++) {
            x[i] = rnd_n(2.0f);
            add[i] = rnd_n(1.0f);
        }
        for (uint32_t i = 0; i < H; i++)
            w[i] = 1.0f + rnd_n(0.2f);
        float *dx = dup_to_dev(x, n * 4), *da = dup_to_dev(add, n * 4), *dw = dup_to_dev(w, H * 4);
        int32_t *dr = dup_to_dev(rows, sizeof rows);
        float *dout = dalloc((size_t)n_out * H * 4), *dsc = dalloc(n_out * 4);
        /* F32 output with residual add and gather. */
        KOK(l8k_rmsnorm(dx, da, dw, eps, H, dr, n_out, L8K_F32, dout, NULL, 0));
        float *out = malloc((size_t)n_out * H * 4), *xb = malloc(n * 4);
        double *ref = malloc((size_t)n_out * H * 8);
        to_host(out, dout, (size_t)n_out * H * 4);
        to_host(xb, dx, n * 4);
        for (uint32_t j = 0; j < n_out; j++) {
            const float *xr = x + (size_t)rows[j] * H, *ar = add + (size_t)rows[j] * H;
            double ss = 0;
            for (uint32_t i = 0; i < H; i++) {
                double v = (double)(xr[i] + ar[i]);
                ss += v * v;
            }
            double inv = 1.0 / sqrt(ss / H + eps);
            for (uint32_t i = 0; i < H; i++)
                ref[(size_t)j * H + i] = (double)w[i] * ((double)(xr[i] + ar[i]) * inv);
            /* The residual row was updated in place, bitwise x + add. */
            for (uint32_t i = 0; i < H; i++) {
                float want = xr[i] + ar[i];
                if (memcmp(&want, &xb[(size_t)rows[j] * H + i], 4) != 0) {
                    CHECK(0, "rmsnorm H=%u: residual row %d not updated", H, rows[j]);
                    break;
                }
            }
        }
        double e = rel_err(out, ref, (size_t)n_out * H);
        CHECK(e <= TOL_F32, "rmsnorm f32 H=%u: rel err %.3g", H, e);
        /* Rows outside the gather are untouched. */
        CHECK(memcmp(xb + (size_t)1 * H, x + (size_t)1 * H, H * 4) == 0,
              "rmsnorm H=%u: row 1 was modified", H);

        /* FP8 output (no add, no gather): the codes must be exactly those of
         * l8_quantize_act_row applied to the kernel's own f32 output. */
        float *dx2 = dup_to_dev(x, n * 4), *df = dalloc(n * 4), *ds2 = dalloc(T * 4);
        uint8_t *dq = dalloc(n);
        KOK(l8k_rmsnorm(dx2, NULL, dw, eps, H, NULL, T, L8K_F32, df, NULL, 0));
        KOK(l8k_rmsnorm(dx2, NULL, dw, eps, H, NULL, T, L8K_FP8, dq, ds2, 0));
        float *f = malloc(n * 4), s[16];
        uint8_t *q = malloc(n), *qr = malloc(H);
        to_host(f, df, n * 4);
        to_host(q, dq, n);
        to_host(s, ds2, T * 4);
        uint32_t bad = 0;
        for (uint32_t t = 0; t < T; t++) {
            float sr = l8_quantize_act_row(f + (size_t)t * H, H, qr);
            bad += sr != s[t] || memcmp(qr, q + (size_t)t * H, H) != 0;
        }
        CHECK(bad == 0, "rmsnorm fp8 H=%u: %u rows differ from quantizing its f32 output", H, bad);
        /* BF16 output: the rounding of the f32 output. */
        uint16_t *db = dalloc(n * 2), *b = malloc(n * 2);
        KOK(l8k_rmsnorm(dx2, NULL, dw, eps, H, NULL, T, L8K_BF16, db, NULL, 0));
        to_host(b, db, n * 2);
        bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += b[i] != l8_f32_to_bf16(f[i]);
        CHECK(bad == 0, "rmsnorm bf16 H=%u: %u elements differ", H, bad);
        free(x); free(add); free(w); free(out); free(xb); free(ref); free(f); free(q); free(qr);
        free(b);
        cudaFree(dx); cudaFree(da); cudaFree(dw); cudaFree(dr); cudaFree(dout); cudaFree(dsc);
        cudaFree(dx2); cudaFree(df); cudaFree(ds2); cudaFree(dq); cudaFree(db);
    }
}

static void test_silu(void)
{
    uint32_t T = 5, I = 1000;
    size_t n = (size_t)T * 2 * I;
    float *gu = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        gu[i] = rnd_n(4.0f);
    float *dg = dup_to_dev(gu, n * 4), *df = dalloc((size_t)T * I * 4), *ds = dalloc(T * 4);
    uint8_t *dq = dalloc((size_t)T * I);
    KOK(l8k_silu_mul(dg, L8K_F32, T, I, L8K_F32, df, NULL, 0));
    float *f = malloc((size_t)T * I * 4);
    double *ref = malloc((size_t)T * I * 8);
    to_host(f, df, (size_t)T * I * 4);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < I; i++) {
            double g = gu[(size_t)t * 2 * I + i], u = gu[(size_t)t * 2 * I + I + i];
            ref[(size_t)t * I + i] = g / (1.0 + exp(-g)) * u;
        }
    double e = rel_err(f, ref, (size_t)T * I);
    CHECK(e <= TOL_F32, "silu_mul f32: rel err %.3g", e);
    KOK(l8k_silu_mul(dg, L8K_F32, T, I, L8K_FP8, dq, ds, 0));
    uint8_t *q = malloc((size_t)T * I), *qr = malloc(I);
    float s[8];
    to_host(q, dq, (size_t)T * I);
    to_host(s, ds, T * 4);
    uint32_t bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        float sr = l8_quantize_act_row(f + (size_t)t * I, I, qr);
        bad += sr != s[t] || memcmp(qr, q + (size_t)t * I, I) != 0;
    }
    CHECK(bad == 0, "silu_mul fp8: %u rows differ", bad);
    /* bf16 input (the cuBLASLt gate/up output): bitwise what the f32 input
     * of the same values gives, in both output dtypes. */
    uint16_t *g16 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        g16[i] = l8_f32_to_bf16(gu[i]);
        gu[i] = l8_bf16_to_f32(g16[i]);
    }
    uint16_t *dg16 = dup_to_dev(g16, n * 2);
    CU(cudaMemcpy(dg, gu, n * 4, cudaMemcpyHostToDevice));
    float *f16 = malloc((size_t)T * I * 4), s16[8];
    uint8_t *q16 = malloc((size_t)T * I);
    KOK(l8k_silu_mul(dg, L8K_F32, T, I, L8K_F32, df, NULL, 0));
    to_host(f, df, (size_t)T * I * 4);
    KOK(l8k_silu_mul(dg, L8K_F32, T, I, L8K_FP8, dq, ds, 0));
    to_host(q, dq, (size_t)T * I);
    to_host(s, ds, T * 4);
    poison(df, (size_t)T * I * 4);
    poison(dq, (size_t)T * I);
    KOK(l8k_silu_mul(dg16, L8K_BF16, T, I, L8K_F32, df, NULL, 0));
    to_host(f16, df, (size_t)T * I * 4);
    KOK(l8k_silu_mul(dg16, L8K_BF16, T, I, L8K_FP8, dq, ds, 0));
    to_host(q16, dq, (size_t)T * I);
    to_host(s16, ds, T * 4);
    CHECK(memcmp(f, f16, (size_t)T * I * 4) == 0, "silu_mul bf16 in, f32 out: differs from f32 in");
    CHECK(memcmp(q, q16, (size_t)T * I) == 0 && memcmp(s, s16, T * 4) == 0,
          "silu_mul bf16 in, fp8 out: differs from f32 in");
    CHECK(l8k_silu_mul(dg16, L8K_FP8, T, I, L8K_F32, df, NULL, 0) == -EINVAL,
          "silu_mul: fp8 input accepted");
    free(g16); free(f16); free(q16);
    cudaFree(dg16);
    free(gu); free(f); free(ref); free(q); free(qr);
    cudaFree(dg); cudaFree(df); cudaFree(ds); cudaFree(dq);
}

/* ---- embed ----------------------------------------------------------------- */

static void test_embed(void)
{
    uint32_t V = 1000, H = 96, T = 6;
    uint16_t *tb = malloc((size_t)V * H * 2);
    for (size_t i = 0; i < (size_t)V * H; i++)
        tb[i] = l8_f32_to_bf16(rnd_n(1.0f));
    int32_t ids[6] = { 0, 999, 17, 17, 500, 3 };
    uint16_t *dt = dup_to_dev(tb, (size_t)V * H * 2);
    int32_t *di = dup_to_dev(ids, sizeof ids);
    float *dout = dalloc((size_t)T * H * 4), *out = malloc((size_t)T * H * 4);
    KOK(l8k_embed(dt, L8K_BF16, V, H, di, T, dout, 0));
    to_host(out, dout, (size_t)T * H * 4);
    uint32_t bad = 0;
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < H; i++)
            bad += out[(size_t)t * H + i] != l8_bf16_to_f32(tb[(size_t)ids[t] * H + i]);
    CHECK(bad == 0, "embed bf16: %u elements differ", bad);
    free(tb); free(out);
    cudaFree(dt); cudaFree(di); cudaFree(dout);
}

/* ---- the upload's checksum -------------------------------------------------- */

/* l8_kernels.h's definition, byte by byte. */
static uint64_t checksum_ref(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < (n + 7) / 8; i++) {
        uint64_t w = 0;
        for (size_t b = 0; b < 8 && 8 * i + b < n; b++)
            w |= (uint64_t)p[8 * i + b] << (8 * b);
        s += w ^ (i * L8K_CHECKSUM_K);
    }
    return s;
}

static uint64_t checksum_dev(const uint8_t *d, size_t n, uint64_t *dacc)
{
    uint64_t acc = 0;
    CU(cudaMemset(dacc, 0, 8));
    KOK(l8k_checksum(d, n, dacc, 0));
    to_host(&acc, dacc, 8);
    return acc;
}

/* Sizes around the word and the grid; aligned and misaligned starts; then
 * one flipped bit, and two words swapped, must each change the sum. */
static void test_checksum(void)
{
    const size_t sizes[] = { 1, 7, 8, 9, 1000, 65536 * 8 + 5, 3u << 20 };
    const size_t max = (3u << 20) + 16;
    uint8_t *h = malloc(max), *d = dalloc(max);
    uint64_t *dacc = dalloc(8);
    for (size_t i = 0; i < max; i++)
        h[i] = (uint8_t)rnd_u32();
    CU(cudaMemcpy(d, h, max, cudaMemcpyHostToDevice));
    uint32_t bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t off = 0; off < 4; off += 3)
            bad += checksum_dev(d + off, sizes[si], dacc) != checksum_ref(h + off, sizes[si]);
    CHECK(bad == 0, "checksum: %u of 14 (size, offset) cases differ from the definition", bad);
    const size_t n = 1000;
    const uint64_t base = checksum_ref(h, n);
    uint8_t one = h[517] ^ 0x10;
    CU(cudaMemcpy(d + 517, &one, 1, cudaMemcpyHostToDevice));
    CHECK(checksum_dev(d, n, dacc) != base, "checksum: a flipped bit went unseen");
    CU(cudaMemcpy(d + 517, h + 517, 1, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d + 8 * 3, h + 8 * 40, 8, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d + 8 * 40, h + 8 * 3, 8, cudaMemcpyHostToDevice));
    CHECK(memcmp(h + 8 * 3, h + 8 * 40, 8) == 0 || checksum_dev(d, n, dacc) != base,
          "checksum: two swapped words went unseen");
    CHECK(l8k_checksum(d, 8, (uint64_t *)((uint8_t *)dacc + 4), 0) == -EINVAL,
          "checksum: misaligned accumulator accepted");
    free(h);
    cudaFree(d);
    cudaFree(dacc);
}

/* ---- products --------------------------------------------------------------- */

/* W [N,K] codes + scales, x [M,K] in x_dt; reference in f64 on the decoded
 * operands, so only summation order differs. A few outputs of a short row
 * can cancel to near zero, and then f32 rounding that is no fault is large
 * against the result (M = N = 1, K = 16 gave 1.7e-5 once): such a run
 * passes if the error against the terms' magnitudes, sqrt(sum |x w|^2),
 * is what K f32 additions leave: 4 sqrt(K) x 2^-24 (one term of K = 4096
 * dropped is ~10x that). */
static void check_gemv(uint32_t M, uint32_t N, uint32_t K, enum l8k_dtype x_dt)
{
    uint8_t *w = malloc((size_t)N * K);
    float *ws = malloc(N * 4), *xs = malloc(M * 4);
    size_t xb = x_dt == L8K_F32 ? 4 : x_dt == L8K_BF16 ? 2 : 1;
    uint8_t *x = malloc((size_t)M * K * xb);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = rnd_fp8();
    for (uint32_t i = 0; i < N; i++)
        ws[i] = 1e-3f * (1.0f + rnd_f() * 0.5f);
    for (uint32_t i = 0; i < M; i++)
        xs[i] = 0.02f * (1.0f + rnd_f() * 0.5f);
    double *ref = calloc((size_t)M * N, 8), *mag = calloc((size_t)M * N, 8);
    for (size_t i = 0; i < (size_t)M * K; i++) {
        if (x_dt == L8K_F32)
            ((float *)x)[i] = rnd_n(1.0f);
        else if (x_dt == L8K_BF16)
            ((uint16_t *)x)[i] = l8_f32_to_bf16(rnd_n(1.0f));
        else
            x[i] = rnd_fp8();
    }
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t nn = 0; nn < N; nn++) {
            double acc = 0, abs_acc = 0;
            for (uint32_t k = 0; k < K; k++) {
                size_t xi = (size_t)m * K + k;
                double xv = x_dt == L8K_F32 ? ((float *)x)[xi]
                            : x_dt == L8K_BF16 ? l8_bf16_to_f32(((uint16_t *)x)[xi])
                                               : l8_e4m3_lut[x[xi]];
                acc += xv * l8_e4m3_lut[w[(size_t)nn * K + k]];
                abs_acc += fabs(xv * l8_e4m3_lut[w[(size_t)nn * K + k]]);
            }
            const double scale = ws[nn] * (x_dt == L8K_FP8 ? xs[m] : 1.0);
            ref[(size_t)m * N + nn] = acc * scale;
            mag[(size_t)m * N + nn] = abs_acc * scale;
        }
    void *dw = dup_to_dev(w, (size_t)N * K), *dx = dup_to_dev(x, (size_t)M * K * xb);
    float *dws = dup_to_dev(ws, N * 4), *dxs = dup_to_dev(xs, M * 4);
    float *dy = dalloc((size_t)M * N * 4), *y = malloc((size_t)M * N * 4);
    KOK(l8k_gemv(dw, L8K_FP8, dws, dx, x_dt, x_dt == L8K_FP8 ? dxs : NULL, M, N, K, dy, N, 0));
    to_host(y, dy, (size_t)M * N * 4);
    double e = rel_err(y, ref, (size_t)M * N), num = 0, den = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        den += mag[i] * mag[i];
    }
    const double e_terms = den > 0 ? sqrt(num / den) : INFINITY;
    CHECK(e <= TOL_SUM || e_terms <= 4 * sqrt(K) * 0x1p-24, "gemv fp8 x dt%d M=%u N=%u K=%u: rel err %.3g "
          "(%.3g of the terms' magnitude)", x_dt, M, N, K, e, e_terms);
    free(w); free(ws); free(xs); free(x); free(ref); free(mag); free(y);
    cudaFree(dw); cudaFree(dx); cudaFree(dws); cudaFree(dxs); cudaFree(dy);
}

static void test_gemv_dense(uint32_t M, uint32_t N, uint32_t K)
{
    uint16_t *w = malloc((size_t)N * K * 2);
    float *x = malloc((size_t)M * K * 4);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = l8_f32_to_bf16(rnd_n(0.05f));
    for (size_t i = 0; i < (size_t)M * K; i++)
        x[i] = rnd_n(1.0f);
    double *ref = calloc((size_t)M * N, 8);
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            double a = 0;
            for (uint32_t k = 0; k < K; k++)
                a += (double)x[(size_t)m * K + k] * l8_bf16_to_f32(w[(size_t)n * K + k]);
            ref[(size_t)m * N + n] = a;
        }
    void *dw = dup_to_dev(w, (size_t)N * K * 2), *dx = dup_to_dev(x, (size_t)M * K * 4);
    float *dy = dalloc((size_t)M * N * 4), *y = malloc((size_t)M * N * 4);
    KOK(l8k_gemv(dw, L8K_BF16, NULL, dx, L8K_F32, NULL, M, N, K, dy, N, 0));
    to_host(y, dy, (size_t)M * N * 4);
    double e = rel_err(y, ref, (size_t)M * N);
    CHECK(e <= TOL_SUM, "gemv bf16 weights M=%u N=%u K=%u: rel err %.3g", M, N, K, e);
    free(w); free(x); free(ref); free(y);
    cudaFree(dw); cudaFree(dx); cudaFree(dy);
}

/* A random FP8 product problem: codes w [N, K] and x [M, K], per-row
 * scales ws and xs, and its f64 reference ref [M, N] (all malloc'd). */
static void fp8_gemm_problem(uint32_t M, uint32_t N, uint32_t K, uint8_t **w, uint8_t **x,
                             float **ws, float **xs, double **ref)
{
    *w = malloc((size_t)N * K);
    *x = malloc((size_t)M * K);
    *ws = malloc(N * 4);
    *xs = malloc(M * 4);
    *ref = malloc((size_t)M * N * 8);
    for (size_t i = 0; i < (size_t)N * K; i++)
        (*w)[i] = rnd_fp8();
    for (size_t i = 0; i < (size_t)M * K; i++)
        (*x)[i] = rnd_fp8();
    for (uint32_t i = 0; i < N; i++)
        (*ws)[i] = 1e-3f * (1.0f + rnd_f() * 0.5f);
    for (uint32_t i = 0; i < M; i++)
        (*xs)[i] = 0.02f * (1.0f + rnd_f() * 0.5f);
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            double a = 0;
            for (uint32_t k = 0; k < K; k++)
                a += (double)l8_e4m3_lut[(*x)[(size_t)m * K + k]] *
                     l8_e4m3_lut[(*w)[(size_t)n * K + k]];
            (*ref)[(size_t)m * N + n] = a * (*ws)[n] * (*xs)[m];
        }
}

static void test_gemm(struct l8k_blas *b)
{
    const uint32_t M = 37, N = 200, K = 512;
    uint8_t *w, *x;
    float *ws, *xs;
    double *ref;
    fp8_gemm_problem(M, N, K, &w, &x, &ws, &xs, &ref);
    void *dw = dup_to_dev(w, (size_t)N * K), *dx = dup_to_dev(x, (size_t)M * K);
    float *dws = dup_to_dev(ws, N * 4), *dxs = dup_to_dev(xs, M * 4);
    float *dy = dalloc((size_t)M * N * 4), *y = malloc((size_t)M * N * 4);
    const enum l8k_fp8_path chosen = l8k_blas_fp8_path(b, L8K_F32),
                            chosen16 = l8k_blas_fp8_path(b, L8K_BF16);
    printf("cuBLASLt FP8 path chosen: %d, for bf16 out %d (-1 none, 0 outer-vec, 1 epilogue, "
           "2 bf16 decode)\n", (int)chosen, (int)chosen16);
    double rms = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
        rms += ref[i] * ref[i];
    rms = sqrt(rms / ((double)M * N));
    uint16_t *y16 = malloc((size_t)M * N * 2);
    for (int p = L8K_FP8_OUTER_VEC; p <= L8K_FP8_BF16; p++) {
        const enum l8k_fp8_path fp = (enum l8k_fp8_path)p;
        const double tol = p == L8K_FP8_BF16 ? TOL_TC : TOL_FP8_TC;
        if (l8k_blas_set_fp8_path(b, L8K_F32, fp) != 0) {
            printf("  fp8 path %d: not available here (probe %.3g)\n", p,
                   l8k_blas_probe_err(b, fp, L8K_F32));
        } else {
            poison(dy, (size_t)M * N * 4);
            KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy, 0));
            to_host(y, dy, (size_t)M * N * 4);
            double e = rel_err(y, ref, (size_t)M * N);
            printf("  fp8 path %d: rel err %.3g (probe %.3g, tolerance %.0e)\n", p, e,
                   l8k_blas_probe_err(b, fp, L8K_F32), tol);
            CHECK(e <= tol, "gemm fp8 path %d: rel err %.3g", p, e);
        }
        /* bf16 out: each element within its rounding (2^-8 relative, twice
         * on the epilogue paths) plus the path's own error. */
        if (l8k_blas_set_fp8_path(b, L8K_BF16, fp) != 0) {
            printf("  fp8 path %d, bf16 out: not available here (probe %.3g)\n", p,
                   l8k_blas_probe_err(b, fp, L8K_BF16));
            continue;
        }
        poison(dy, (size_t)M * N * 2);
        KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M, N, K, L8K_BF16, dy, 0));
        to_host(y16, dy, (size_t)M * N * 2);
        uint32_t bad = 0;
        double worst = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            double d = fabs((double)l8_bf16_to_f32(y16[i]) - ref[i]);
            double lim = fabs(ref[i]) * (p == L8K_FP8_OUTER_VEC ? 0x1p-8 : 0x1.01p-7) +
                         4 * tol * rms;
            worst = fmax(worst, d / lim);
            bad += !(d <= lim);   /* NaN is bad */
        }
        printf("  fp8 path %d, bf16 out: worst element at %.2f of its bound (probe %.3g)\n", p,
               worst, l8k_blas_probe_err(b, fp, L8K_BF16));
        CHECK(bad == 0, "gemm fp8 path %d, bf16 out: %u elements outside their rounding", p, bad);
    }
    free(y16);
    l8k_blas_set_fp8_path(b, L8K_F32, chosen);
    l8k_blas_set_fp8_path(b, L8K_BF16, chosen16);
    CHECK(l8k_blas_set_fp8_path(b, L8K_F32, L8K_FP8_NONE) == -EINVAL,
          "blas: f32 output left without a path");
    if (chosen16 != L8K_FP8_NONE) {   /* bf16 refused once its path is none */
        KOK(l8k_blas_set_fp8_path(b, L8K_BF16, L8K_FP8_NONE));
        CHECK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M, N, K, L8K_BF16, dy, 0) == -ENOTSUP,
              "gemm fp8: bf16 out without a path not refused");
        KOK(l8k_blas_set_fp8_path(b, L8K_BF16, chosen16));
    }
    /* Each of the heuristic's candidates, pinned, computes the product. */
    {
        const int n = l8k_gemm_fp8_algos(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy);
        printf("  cuBLASLt candidates for M=%u N=%u K=%u: %d\n", M, N, K, n);
        if (n == -ENOTSUP) {
            printf("  (the bf16 decode path takes no pins)\n");
        } else {
            CHECK(n >= 1 && n <= 8, "gemm fp8: %d candidates", n);
            for (int i = 0; i < n; i++) {
                KOK(l8k_gemm_fp8_pin(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy, (uint32_t)i));
                poison(dy, (size_t)M * N * 4);
                KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy, 0));
                to_host(y, dy, (size_t)M * N * 4);
                double e = rel_err(y, ref, (size_t)M * N);
                CHECK(e <= TOL_FP8_TC, "gemm fp8 candidate %d: rel err %.3g", i, e);
            }
            CHECK(l8k_gemm_fp8_pin(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy, (uint32_t)n) ==
                      -ENOENT, "gemm fp8: pin past the candidates accepted");
            KOK(l8k_gemm_fp8_pin(b, dw, dws, dx, dxs, M, N, K, L8K_F32, dy, 0));
        }
    }
    /* Operands only 16-byte aligned (cuBLASLt assumes 256 unless told). */
    {
        uint8_t *dx16 = dalloc((size_t)M * K + 16);
        float *dy16 = dalloc((size_t)M * N * 4 + 16);
        CU(cudaMemcpy(dx16 + 16, x, (size_t)M * K, cudaMemcpyHostToDevice));
        /* A refusal here must not end the test (KOK would): later kernels still run. */
        int r = l8k_gemm_fp8(b, dw, dws, dx16 + 16, dxs, M, N, K, L8K_F32,
                             (float *)((uint8_t *)dy16 + 16), 0);
        CU(cudaStreamSynchronize(0));
        CHECK(r == 0, "gemm fp8 path %d, 16-byte aligned operands: returned %d", chosen, r);
        if (r == 0) {
            to_host(y, (uint8_t *)dy16 + 16, (size_t)M * N * 4);
            double e = rel_err(y, ref, (size_t)M * N);
            const double tol = chosen == L8K_FP8_BF16 ? TOL_TC : TOL_FP8_TC;
            printf("  fp8 path %d, 16-byte aligned operands: rel err %.3g\n", chosen, e);
            CHECK(e <= tol, "gemm fp8 path %d, 16-byte aligned operands: rel err %.3g", chosen, e);
        }
        cudaGetLastError();
        cudaFree(dx16);
        cudaFree(dy16);
    }
#ifdef L8_CUEMU
    /* A shape the library refuses on the chosen path runs on the next path
     * whose probe passed, and the refusal is remembered (asked once). The
     * emulated heuristic refuses on request (CUEMU_LT_REFUSE); first rows
     * counts not yet cached, since a cached shape is not asked again. */
    if (chosen == L8K_FP8_OUTER_VEC) {
        static const struct { const char *refuse; uint32_t m; enum l8k_fp8_path runs; } cases[] = {
            { "outer:30", 33, L8K_FP8_EPILOGUE },   /* the scaling mode refused */
            { "fp8:30", 34, L8K_FP8_BF16 },         /* every FP8 product refused */
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const uint32_t m = cases[c].m, before = l8k_blas_refused(b);
            if (l8k_blas_probe_err(b, cases[c].runs, L8K_F32) < 0)
                continue;
            setenv("CUEMU_LT_REFUSE", cases[c].refuse, 1);
            for (int rep = 0; rep < 2; rep++) {
                poison(dy, (size_t)m * N * 4);
                KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, m, N, K, L8K_F32, dy, 0));
                to_host(y, dy, (size_t)m * N * 4);
                double e = rel_err(y, ref, (size_t)m * N);
                CHECK(e <= (cases[c].runs == L8K_FP8_BF16 ? TOL_TC : TOL_FP8_TC),
                      "gemm fp8, %s at %u rows: rel err %.3g", cases[c].refuse, m, e);
            }
            const uint32_t got = l8k_blas_refused(b) - before, want =
                cases[c].runs == L8K_FP8_BF16 ? 2 : 1;   /* a refusal per path tried */
            printf("  %s at %u rows: ran on path %d, %u refusals\n", cases[c].refuse, m,
                   (int)cases[c].runs, got);
            CHECK(got == want, "gemm fp8, %s: %u refusals counted, want %u", cases[c].refuse,
                  got, want);
            /* the candidates are the fallback's (none on the bf16 path) */
            const int n = l8k_gemm_fp8_algos(b, dw, dws, dx, dxs, m, N, K, L8K_F32, dy);
            CHECK(cases[c].runs == L8K_FP8_BF16 ? n == -ENOTSUP : n >= 1,
                  "gemm fp8, %s: candidates %d", cases[c].refuse, n);
            unsetenv("CUEMU_LT_REFUSE");
        }
    }
#endif
    /* bf16 x bf16 -> f32 */
    uint16_t *wb = malloc((size_t)N * K * 2), *xb = malloc((size_t)M * K * 2);
    for (size_t i = 0; i < (size_t)N * K; i++)
        wb[i] = l8_f32_to_bf16(rnd_n(0.05f));
    for (size_t i = 0; i < (size_t)M * K; i++)
        xb[i] = l8_f32_to_bf16(rnd_n(1.0f));
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            double a = 0;
            for (uint32_t k = 0; k < K; k++)
                a += (double)l8_bf16_to_f32(xb[(size_t)m * K + k]) *
                     l8_bf16_to_f32(wb[(size_t)n * K + k]);
            ref[(size_t)m * N + n] = a;
        }
    void *dwb = dup_to_dev(wb, (size_t)N * K * 2), *dxb = dup_to_dev(xb, (size_t)M * K * 2);
    poison(dy, (size_t)M * N * 4);
    KOK(l8k_gemm_bf16(b, dwb, dxb, M, N, K, dy, 0));
    to_host(y, dy, (size_t)M * N * 4);
    double e = rel_err(y, ref, (size_t)M * N);
    printf("  bf16 gemm: rel err %.3g\n", e);
    CHECK(e <= TOL_TC, "gemm bf16: rel err %.3g", e);
    free(w); free(x); free(ws); free(xs); free(ref); free(y); free(wb); free(xb);
    cudaFree(dw); cudaFree(dx); cudaFree(dws); cudaFree(dxs); cudaFree(dy); cudaFree(dwb);
    cudaFree(dxb);
}

/* ---- rope + kv, attention ----------------------------------------------- */

static float kv_get(const void *pool, enum l8k_dtype dt, size_t i)
{
    return dt == L8K_F32 ? ((const float *)pool)[i] : l8_bf16_to_f32(((const uint16_t *)pool)[i]);
}

static void test_rope_kv(enum l8k_dtype kv_dt)
{
    const uint32_t T = 5, nh = 8, nkv = 2, D = 128, ps = 16, n_pages = 7;
    const uint32_t ldq = (nh + 2 * nkv) * D;
    float *qkv = malloc((size_t)T * ldq * 4), *invf = malloc(D / 2 * 4);
    for (size_t i = 0; i < (size_t)T * ldq; i++)
        qkv[i] = rnd_n(1.0f);
    for (uint32_t i = 0; i < D / 2; i++)
        invf[i] = (float)pow(500000.0, -2.0 * i / D);
    int32_t pos[5] = { 0, 1, 17, 8191, 9000 };
    int32_t slot[5] = { 3 * ps + 0, 6 * ps + 15, -1, 1 * ps + 7, 0 * ps + 2 };
    size_t elt = kv_dt == L8K_F32 ? 4 : 2, half = (size_t)n_pages * nkv * ps * D;
    float *dq = dup_to_dev(qkv, (size_t)T * ldq * 4), *di = dup_to_dev(invf, D / 2 * 4);
    int32_t *dp = dup_to_dev(pos, sizeof pos), *ds = dup_to_dev(slot, sizeof slot);
    uint8_t *dk = dalloc(half * elt), *dv = dalloc(half * elt);
    KOK(l8k_rope_kv(dq, ldq, dp, di, T, nh, nkv, D, dk, dv, kv_dt, ps, ds, 0));
    float *out = malloc((size_t)T * ldq * 4);
    uint8_t *k = malloc(half * elt), *v = malloc(half * elt);
    to_host(out, dq, (size_t)T * ldq * 4);
    to_host(k, dk, half * elt);
    to_host(v, dv, half * elt);
    double *ref = malloc((size_t)T * ldq * 8);
    for (uint32_t t = 0; t < T; t++) {
        const float *r = qkv + (size_t)t * ldq;
        for (uint32_t c = 0; c < ldq; c++)
            ref[(size_t)t * ldq + c] = r[c];
        for (uint32_t h = 0; h < nh + nkv; h++)
            for (uint32_t i = 0; i < D / 2; i++) {
                double a = (double)pos[t] * invf[i];
                double x0 = r[h * D + i], x1 = r[h * D + i + D / 2];
                ref[(size_t)t * ldq + h * D + i] = x0 * cos(a) - x1 * sin(a);
                ref[(size_t)t * ldq + h * D + i + D / 2] = x1 * cos(a) + x0 * sin(a);
            }
    }
    double e = rel_err(out, ref, (size_t)T * ldq);
    CHECK(e <= TOL_F32, "rope q/k (kv dt %d): rel err %.3g", kv_dt, e);
    /* Stored K/V: the rotated k and the v of each stored token; bf16 is the
     * rounding of the f32 values the kernel wrote back. */
    uint32_t bad = 0;
    for (uint32_t t = 0; t < T; t++) {
        if (slot[t] < 0)
            continue;
        uint32_t page = slot[t] / ps, s = slot[t] % ps;
        for (uint32_t h = 0; h < nkv; h++)
            for (uint32_t d = 0; d < D; d++) {
                size_t off = (((size_t)page * nkv + h) * ps + s) * D + d;
                float kw = out[(size_t)t * ldq + (nh + h) * D + d];
                float vw = out[(size_t)t * ldq + (nh + nkv + h) * D + d];
                if (kv_dt == L8K_BF16) {
                    kw = l8_bf16_to_f32(l8_f32_to_bf16(kw));
                    vw = l8_bf16_to_f32(l8_f32_to_bf16(vw));
                }
                bad += kv_get(k, kv_dt, off) != kw || kv_get(v, kv_dt, off) != vw;
            }
    }
    CHECK(bad == 0, "rope kv store (dt %d): %u elements differ", kv_dt, bad);
    /* Padding row (slot -1) stored nothing: page 2 (no token) still poisoned. */
    CHECK(isnan(kv_get(k, kv_dt, (size_t)2 * nkv * ps * D)), "rope kv: page 2 was written");
    free(qkv); free(invf); free(out); free(k); free(v); free(ref);
    cudaFree(dq); cudaFree(di); cudaFree(dp); cudaFree(ds); cudaFree(dk); cudaFree(dv);
}

/* The fused decode qkv product (l8k_gemv_qkv_rope) against l8k_gemv then
 * l8k_rope_kv (each checked against f64 above) on the same inputs: q, k, v
 * and both pools bitwise equal, poison included (a padding row's slot -1
 * stores nothing); M past one launch's 8 rows. */
static void test_gemv_qkv_rope(uint32_t M, uint32_t nh, uint32_t nkv, uint32_t D,
                               enum l8k_dtype x_dt, enum l8k_dtype kv_dt)
{
    const uint32_t K = 1040, N = (nh + 2 * nkv) * D, ps = 16, n_pages = (M + ps - 1) / ps * 2 + 1;
    const size_t xb = x_dt == L8K_FP8 ? 1 : 4, elt = kv_dt == L8K_F32 ? 4 : 2;
    const size_t pool = (size_t)n_pages * nkv * ps * D * elt;
    uint8_t *w = malloc((size_t)N * K), *x = malloc((size_t)M * K * xb);
    float *ws = malloc(N * 4), *xs = malloc(M * 4), *invf = malloc(D / 2 * 4);
    int32_t *pos = malloc(M * 4), *slot = malloc(M * 4);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = rnd_fp8();
    for (uint32_t i = 0; i < N; i++)
        ws[i] = 1e-3f * (1.0f + rnd_f() * 0.5f);
    for (size_t i = 0; i < (size_t)M * K; i++) {
        if (x_dt == L8K_FP8)
            x[i] = rnd_fp8();
        else
            ((float *)x)[i] = rnd_n(1.0f);
    }
    for (uint32_t i = 0; i < D / 2; i++)
        invf[i] = (float)pow(500000.0, -2.0 * i / D);
    /* Distinct slots in every other page (odd pages stay poisoned), one
     * padding row; positions up to 131071. */
    for (uint32_t m = 0; m < M; m++) {
        xs[m] = 0.02f * (1.0f + rnd_f() * 0.5f);
        pos[m] = (int32_t)(rnd_u32() % 131072);
        slot[m] = m == M / 2 && M > 1 ? -1 : (int32_t)((m / ps) * 2 * ps + m % ps);
    }
    void *dw = dup_to_dev(w, (size_t)N * K), *dx = dup_to_dev(x, (size_t)M * K * xb);
    float *dws = dup_to_dev(ws, N * 4), *dxs = dup_to_dev(xs, M * 4), *di = dup_to_dev(invf, D / 2 * 4);
    int32_t *dp = dup_to_dev(pos, M * 4), *ds = dup_to_dev(slot, M * 4);
    float *y1 = dalloc((size_t)M * N * 4), *y2 = dalloc((size_t)M * N * 4);
    void *k1 = dalloc(pool), *v1 = dalloc(pool), *k2 = dalloc(pool), *v2 = dalloc(pool);
    const float *sc = x_dt == L8K_FP8 ? dxs : NULL;
    KOK(l8k_gemv(dw, L8K_FP8, dws, dx, x_dt, sc, M, N, K, y1, N, 0));
    KOK(l8k_rope_kv(y1, N, dp, di, M, nh, nkv, D, k1, v1, kv_dt, ps, ds, 0));
    KOK(l8k_gemv_qkv_rope(dw, dws, dx, x_dt, sc, M, K, y2, N, dp, di, nh, nkv, D, k2, v2, kv_dt,
                          ps, ds, 0));
    uint8_t *h1 = malloc(pool > (size_t)M * N * 4 ? pool : (size_t)M * N * 4);
    uint8_t *h2 = malloc(pool > (size_t)M * N * 4 ? pool : (size_t)M * N * 4);
    const struct { const char *what; const void *a, *b; size_t n; } cmp[] = {
        { "q/k/v", y1, y2, (size_t)M * N * 4 }, { "K pool", k1, k2, pool }, { "V pool", v1, v2, pool },
    };
    for (int c = 0; c < 3; c++) {
        to_host(h1, cmp[c].a, cmp[c].n);
        to_host(h2, cmp[c].b, cmp[c].n);
        size_t bad = 0;
        for (size_t i = 0; i < cmp[c].n; i++)
            bad += h1[i] != h2[i];
        CHECK(bad == 0, "gemv_qkv_rope M=%u nh=%u nkv=%u D=%u x dt%d kv dt%d: %s: %zu bytes "
              "differ from gemv + rope_kv", M, nh, nkv, D, x_dt, kv_dt, cmp[c].what, bad);
    }
    free(w); free(x); free(ws); free(xs); free(invf); free(pos); free(slot); free(h1); free(h2);
    cudaFree(dw); cudaFree(dx); cudaFree(dws); cudaFree(dxs); cudaFree(di); cudaFree(dp);
    cudaFree(ds); cudaFree(y1); cudaFree(y2); cudaFree(k1); cudaFree(v1); cudaFree(k2);
    cudaFree(v2);
}

/* 0 .. n-1 in a random order (malloc'd): page tables that are not in order. */
static uint32_t *shuffled(uint32_t n)
{
    uint32_t *perm = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = rnd_u32() % (i + 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    return perm;
}

/* subset: only the odd rows, through a rows list in reverse order; the
 * even rows must stay as poisoned. */
static void test_attention(enum l8k_dtype kv_dt, uint32_t D, uint32_t nh, uint32_t nkv,
                           uint32_t R, const uint32_t *kvl, uint32_t max_kv, bool subset)
{
    const uint32_t ps = 16;
    const uint32_t pps = (max_kv + ps - 1) / ps + 1;   /* pages per sequence */
    const uint32_t S = R, n_pages = S * pps + 3;
    const size_t elt = kv_dt == L8K_F32 ? 4 : 2, half = (size_t)n_pages * nkv * ps * D;
    uint8_t *k = malloc(half * elt), *v = malloc(half * elt);
    for (size_t i = 0; i < half; i++) {
        float a = rnd_n(1.0f), b = rnd_n(1.0f);
        if (kv_dt == L8K_F32) {
            ((float *)k)[i] = a;
            ((float *)v)[i] = b;
        } else {
            ((uint16_t *)k)[i] = l8_f32_to_bf16(a);
            ((uint16_t *)v)[i] = l8_f32_to_bf16(b);
        }
    }
    /* Each row its own sequence with a shuffled page table. */
    int32_t *pt = malloc((size_t)S * pps * 4), *rs = malloc(R * 4), *kl = malloc(R * 4);
    uint32_t *perm = shuffled(n_pages);
    for (uint32_t i = 0; i < S * pps; i++)
        pt[i] = (int32_t)perm[i];
    for (uint32_t r = 0; r < R; r++) {
        rs[r] = (int32_t)r;
        kl[r] = (int32_t)kvl[r];
    }
    const uint32_t ldq = nh * D;
    float *q = malloc((size_t)R * ldq * 4);
    for (size_t i = 0; i < (size_t)R * ldq; i++)
        q[i] = rnd_n(1.0f);
    const float scale = 1.0f / sqrtf((float)D);
    double *ref = calloc((size_t)R * ldq, 8);
    double *sc = malloc((size_t)(max_kv + 1) * 8);
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t h = 0; h < nh; h++) {
            uint32_t kh = h / (nh / nkv), L = kvl[r];
            if (L == 0)
                continue;
            double mx = -INFINITY, sum = 0;
            for (uint32_t p = 0; p < L; p++) {
                size_t off = (((size_t)pt[r * pps + p / ps] * nkv + kh) * ps + p % ps) * D;
                double s = 0;
                for (uint32_t d = 0; d < D; d++)
                    s += (double)q[(size_t)r * ldq + h * D + d] * kv_get(k, kv_dt, off + d);
                sc[p] = s * scale;
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (uint32_t p = 0; p < L; p++) {
                sc[p] = exp(sc[p] - mx);
                sum += sc[p];
            }
            for (uint32_t p = 0; p < L; p++) {
                size_t off = (((size_t)pt[r * pps + p / ps] * nkv + kh) * ps + p % ps) * D;
                for (uint32_t d = 0; d < D; d++)
                    ref[(size_t)r * ldq + h * D + d] += sc[p] / sum * kv_get(v, kv_dt, off + d);
            }
        }
    void *dk = dup_to_dev(k, half * elt), *dv = dup_to_dev(v, half * elt);
    int32_t *dpt = dup_to_dev(pt, (size_t)S * pps * 4), *drs = dup_to_dev(rs, R * 4),
            *dkl = dup_to_dev(kl, R * 4);
    float *dq = dup_to_dev(q, (size_t)R * ldq * 4), *dout = dalloc((size_t)R * ldq * 4);
    size_t wf = l8k_attention_work_floats(R, nh, D, max_kv);
    float *dwk = dalloc(wf * 4 + 16);
    int32_t sel[64], n_sel = 0;
    for (uint32_t r = R; subset && r-- > 0;)
        if (r % 2)
            sel[n_sel++] = (int32_t)r;
    int32_t *dsel = subset ? dup_to_dev(sel, n_sel * 4) : NULL;
    KOK(l8k_attention(dq, ldq, dk, dv, kv_dt, ps, dpt, pps, drs, dkl, dsel,
                      subset ? (uint32_t)n_sel : R, nh, nkv, D, scale, max_kv, dwk, dout, ldq,
                      0));
    float *out = malloc((size_t)R * ldq * 4);
    to_host(out, dout, (size_t)R * ldq * 4);
    uint32_t untouched = 0;
    for (uint32_t r = 0; subset && r < R; r++) {
        float *o = out + (size_t)r * ldq;
        if (r % 2 == 0) {
            for (uint32_t i = 0; i < ldq; i++)
                untouched += isnan(o[i]);
            for (uint32_t i = 0; i < ldq; i++)
                o[i] = (float)ref[(size_t)r * ldq + i];   /* not compared */
        }
    }
    CHECK(!subset || untouched == (R + 1) / 2 * ldq, "attention rows list: %u of %u elements "
          "outside the list left alone", untouched, (R + 1) / 2 * ldq);
    double e = rel_err(out, ref, (size_t)R * ldq);
    CHECK(e <= TOL_SUM, "attention kv dt%d D=%u nh=%u nkv=%u R=%u max_kv=%u%s: rel err %.3g",
          kv_dt, D, nh, nkv, R, max_kv, subset ? " (rows list)" : "", e);
    free(k); free(v); free(pt); free(rs); free(kl); free(perm); free(q); free(ref); free(sc);
    free(out);
    cudaFree(dk); cudaFree(dv); cudaFree(dpt); cudaFree(drs); cudaFree(dkl); cudaFree(dq);
    cudaFree(dout); cudaFree(dwk);
    if (dsel)
        cudaFree(dsel);
}

/* Up to L8K_ATTN_ROW_PLANS rows, a row's output is its own: R rows of one
 * sequence at consecutive lengths from L (a verification's rows), launched
 * together under a loose bound (a decode graph's kv bucket), give bitwise
 * what each gives alone under its own length. At these lengths a shared
 * plan would split R rows of 8 KV heads differently from one. bf16 pool. */
static void test_attention_own_plan(uint32_t D, uint32_t nh, uint32_t nkv, uint32_t R,
                                    uint32_t L)
{
    const uint32_t ps = 16, max_kv = 4096, pps = (L + R + ps - 1) / ps, ldq = nh * D;
    const size_t half = (size_t)pps * nkv * ps * D;
    uint16_t *k = malloc(half * 2), *v = malloc(half * 2);
    for (size_t i = 0; i < half; i++) {
        k[i] = l8_f32_to_bf16(rnd_n(1.0f));
        v[i] = l8_f32_to_bf16(rnd_n(1.0f));
    }
    uint32_t *perm = shuffled(pps);
    int32_t pt[64], rs[L8K_ATTN_ROW_PLANS] = { 0 }, kl[L8K_ATTN_ROW_PLANS];
    for (uint32_t i = 0; i < pps; i++)
        pt[i] = (int32_t)perm[i];
    for (uint32_t r = 0; r < R; r++)
        kl[r] = (int32_t)(L + r + 1);
    float *q = malloc((size_t)R * ldq * 4);
    for (size_t i = 0; i < (size_t)R * ldq; i++)
        q[i] = rnd_n(1.0f);
    void *dk = dup_to_dev(k, half * 2), *dv = dup_to_dev(v, half * 2);
    int32_t *dpt = dup_to_dev(pt, pps * 4), *drs = dup_to_dev(rs, R * 4),
            *dkl = dup_to_dev(kl, R * 4);
    float *dq = dup_to_dev(q, (size_t)R * ldq * 4), *dout = dalloc((size_t)R * ldq * 4);
    float *dwk = dalloc(l8k_attention_work_floats(R, nh, D, max_kv) * 4 + 16);
    float *all = malloc((size_t)R * ldq * 4), *one = malloc((size_t)R * ldq * 4);
    const float scale = 1.0f / sqrtf((float)D);
    KOK(l8k_attention(dq, ldq, dk, dv, L8K_BF16, ps, dpt, pps, drs, dkl, NULL, R, nh, nkv, D,
                      scale, max_kv, dwk, dout, ldq, 0));
    to_host(all, dout, (size_t)R * ldq * 4);
    for (uint32_t r = 0; r < R; r++)
        KOK(l8k_attention(dq + (size_t)r * ldq, ldq, dk, dv, L8K_BF16, ps, dpt, pps, drs,
                          dkl + r, NULL, 1, nh, nkv, D, scale, (uint32_t)kl[r], dwk,
                          dout + (size_t)r * ldq, ldq, 0));
    to_host(one, dout, (size_t)R * ldq * 4);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)R * ldq; i++)
        bad += memcmp(&all[i], &one[i], 4) != 0;
    CHECK(bad == 0, "attention D=%u nh=%u nkv=%u: %u rows from %u together: %zu of %zu values "
          "differ from each row alone", D, nh, nkv, R, L, bad, (size_t)R * ldq);
    free(k); free(v); free(perm); free(q); free(all); free(one);
    cudaFree(dk); cudaFree(dv); cudaFree(dpt); cudaFree(drs); cudaFree(dkl); cudaFree(dq);
    cudaFree(dout); cudaFree(dwk);
}

/* Prefill on the tensor cores, as the engine lays out a mixed step: each
 * chunk {pos0, n_tok} is a sequence whose rows follow a decode row of
 * another sequence; tiles for the chunks (l8k_attention_prefill), the row
 * kernel through its rows list for the decode rows. bf16 pool, shuffled
 * pages, poisoned output. */
struct chunk {
    uint32_t pos0, n_tok;
};

static void test_attention_prefill(uint32_t D, uint32_t nh, uint32_t nkv, const struct chunk *ch,
                                   uint32_t n_ch)
{
    const uint32_t ps = 16, G = nh / nkv;
    const uint32_t S = 2 * n_ch;   /* chunk c: sequence 2c; its decode row: sequence 2c + 1 */
    uint32_t max_kv = 0, R = 0, n_tiles = 0;
    uint32_t *seq_len = malloc(S * 4);
    for (uint32_t c = 0; c < n_ch; c++) {
        seq_len[2 * c] = ch[c].pos0 + ch[c].n_tok;
        seq_len[2 * c + 1] = 1 + rnd_u32() % 700;
        for (int j = 0; j < 2; j++)
            max_kv = seq_len[2 * c + j] > max_kv ? seq_len[2 * c + j] : max_kv;
        R += 1 + ch[c].n_tok;
        n_tiles += l8k_attention_tiles(nh, nkv, 0, ch[c].n_tok, 0, 0, NULL);
    }
    const uint32_t pps = (max_kv + ps - 1) / ps, n_pages = S * pps + 2;
    const size_t half = (size_t)n_pages * nkv * ps * D;
    uint16_t *k = malloc(half * 2), *v = malloc(half * 2);
    for (size_t i = 0; i < half; i++) {
        k[i] = l8_f32_to_bf16(rnd_n(1.0f));
        v[i] = l8_f32_to_bf16(rnd_n(1.0f));
    }
    uint32_t *perm = shuffled(n_pages);
    int32_t *pt = malloc((size_t)S * pps * 4), *rs = malloc(R * 4), *kl = malloc(R * 4);
    int32_t *tiles = malloc((size_t)n_tiles * 16), *drows = malloc(n_ch * 4);
    uint32_t *qpos = malloc(R * 4);
    bool *is_dec = malloc(R);
    for (uint32_t i = 0; i < S * pps; i++)
        pt[i] = (int32_t)perm[i];
    uint32_t r = 0, ti = 0;
    for (uint32_t c = 0; c < n_ch; c++) {
        drows[c] = (int32_t)r;
        rs[r] = (int32_t)(2 * c + 1);
        kl[r] = (int32_t)seq_len[2 * c + 1];
        qpos[r] = seq_len[2 * c + 1] - 1;
        is_dec[r++] = true;
        ti += l8k_attention_tiles(nh, nkv, r, ch[c].n_tok, ch[c].pos0, 2 * c, tiles + 4 * ti);
        for (uint32_t i = 0; i < ch[c].n_tok; i++, r++) {
            rs[r] = (int32_t)(2 * c);
            kl[r] = (int32_t)(ch[c].pos0 + i + 1);
            qpos[r] = ch[c].pos0 + i;
            is_dec[r] = false;
        }
    }
    const uint32_t ldq = (nh + 2 * nkv) * D, ldo = nh * D;   /* q inside a qkv row, as the engine */
    float *q = malloc((size_t)R * ldq * 4);
    for (size_t i = 0; i < (size_t)R * ldq; i++)
        q[i] = rnd_n(1.0f);
    const float scale = 1.0f / sqrtf((float)D), qs = scale * 1.44269504088896341f;
    double *ref = calloc((size_t)R * ldo, 8), *sc = malloc((size_t)max_kv * 8);
    for (r = 0; r < R; r++)
        for (uint32_t h = 0; h < nh; h++) {
            const uint32_t kh = h / G, L = qpos[r] + 1;
            const float *qr = q + (size_t)r * ldq + h * D;
            double mx = -INFINITY, sum = 0;
            for (uint32_t p = 0; p < L; p++) {
                size_t off = (((size_t)pt[rs[r] * pps + p / ps] * nkv + kh) * ps + p % ps) * D;
                double s = 0;
                for (uint32_t d = 0; d < D; d++) {
                    /* the tile kernel: bf16(q * scale * log2 e), base-2 softmax */
                    double qd = is_dec[r] ? (double)qr[d] * scale
                                          : l8_bf16_to_f32(l8_f32_to_bf16(qr[d] * qs));
                    s += qd * l8_bf16_to_f32(k[off + d]);
                }
                sc[p] = is_dec[r] ? s : s * 0.69314718055994530942;   /* 2^s = e^(s ln 2) */
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (uint32_t p = 0; p < L; p++) {
                sc[p] = exp(sc[p] - mx);
                sum += sc[p];
            }
            for (uint32_t p = 0; p < L; p++) {
                size_t off = (((size_t)pt[rs[r] * pps + p / ps] * nkv + kh) * ps + p % ps) * D;
                for (uint32_t d = 0; d < D; d++)
                    ref[(size_t)r * ldo + h * D + d] += sc[p] / sum * l8_bf16_to_f32(v[off + d]);
            }
        }
    void *dk = dup_to_dev(k, half * 2), *dv = dup_to_dev(v, half * 2);
    int32_t *dpt = dup_to_dev(pt, (size_t)S * pps * 4), *drs = dup_to_dev(rs, R * 4),
            *dkl = dup_to_dev(kl, R * 4), *dti = dup_to_dev(tiles, (size_t)n_tiles * 16),
            *ddr = dup_to_dev(drows, n_ch * 4);
    float *dq = dup_to_dev(q, (size_t)R * ldq * 4), *dout = dalloc((size_t)R * ldo * 4);
    float *dwk = dalloc(l8k_attention_work_floats(R, nh, D, max_kv) * 4 + 16);
    KOK(l8k_attention_prefill(dq, ldq, dk, dv, ps, dpt, pps, dti, n_tiles, nh, nkv, D, scale,
                              max_kv, dwk, dout, ldo, 0));
    KOK(l8k_attention(dq, ldq, dk, dv, L8K_BF16, ps, dpt, pps, drs, dkl, ddr, n_ch, nh, nkv, D,
                      scale, max_kv, dwk, dout, ldo, 0));
    float *out = malloc((size_t)R * ldo * 4);
    to_host(out, dout, (size_t)R * ldo * 4);
    /* The prefill rows and the decode rows, each against its definition;
     * and the worst (row, head) of the prefill rows on its own, since a long
     * row's output is small (~1/sqrt(length)) and its error would vanish in
     * the sum over all rows. */
    double num[2] = { 0, 0 }, den[2] = { 0, 0 }, worst = 0;
    uint32_t nan = 0;
    for (r = 0; r < R; r++)
        for (uint32_t h = 0; h < nh; h++) {
            double hn = 0, hd = 0;
            for (uint32_t i = h * D; i < (h + 1) * D; i++) {
                float o = out[(size_t)r * ldo + i];
                double d = (double)o - ref[(size_t)r * ldo + i];
                nan += isnan(o) != 0;
                hn += d * d;
                hd += ref[(size_t)r * ldo + i] * ref[(size_t)r * ldo + i];
            }
            num[is_dec[r]] += hn;
            den[is_dec[r]] += hd;
            if (!is_dec[r] && sqrt(hn / hd) > worst)
                worst = sqrt(hn / hd);
        }
    double ep = sqrt(num[0] / den[0]), ed = sqrt(num[1] / den[1]);
    CHECK(nan == 0 && ep <= TOL_ATTN_TC && worst <= TOL_ATTN_TC_ROW && ed <= TOL_SUM,
          "attention prefill D=%u nh=%u nkv=%u, %u tiles, max_kv %u: %u NaN, prefill rows rel "
          "err %.3g, worst row %.3g (tensor cores), decode rows %.3g", D, nh, nkv, n_tiles,
          max_kv, nan, ep, worst, ed);
    printf("  attention prefill D=%u nh=%u nkv=%u, %u tiles, max_kv %u: rel err %.3g, worst "
           "row %.3g\n", D, nh, nkv, n_tiles, max_kv, ep, worst);
    free(seq_len); free(k); free(v); free(perm); free(pt); free(rs); free(kl); free(tiles);
    free(drows); free(qpos); free(is_dec); free(q); free(ref); free(sc); free(out);
    cudaFree(dk); cudaFree(dv); cudaFree(dpt); cudaFree(drs); cudaFree(dkl); cudaFree(dti);
    cudaFree(ddr); cudaFree(dq); cudaFree(dout); cudaFree(dwk);
}

/* ---- sampling -------------------------------------------------------------- */

/* V = 5000: every row 16-byte aligned (the vector loads); 4999: rows at
 * other alignments and a tail (the scalar loads). */
static void test_sample(uint32_t V)
{
    const uint32_t S = 24;
    float *lg = malloc((size_t)S * V * 4);
    for (size_t i = 0; i < (size_t)S * V; i++)
        lg[i] = rnd_n(3.0f);
    /* Ties: row 0 has its maximum twice (lowest id must win). */
    lg[100] = lg[4000] = 50.0f;
    struct l8k_sample_req req[24];
    struct l8_sampling sp[24];
    int32_t hist[64];
    uint32_t histu[64];
    for (int i = 0; i < 64; i++) {
        hist[i] = (int32_t)(rnd_u32() % V);
        histu[i] = (uint32_t)hist[i];
    }
    hist[1] = hist[0];                     /* repeated id: penalized once */
    histu[1] = histu[0];
    /* Token masks (constrained decoding) on every third request: about a
     * third of the ids allowed, the unmasked argmax among those left out. */
    const uint32_t W = (V + 31) / 32;
    uint32_t *mk = calloc((size_t)S * W, 4);
    for (uint32_t s = 1; s < S; s += 3) {
        uint32_t *m = mk + (size_t)(s / 3) * W;
        for (uint32_t v = 0; v < V; v++)
            if (rnd_u32() % 3 == 0)
                m[v >> 5] |= 1u << (v & 31);
        uint32_t best = 0;
        for (uint32_t v = 1; v < V; v++)
            best = lg[(size_t)s * V + v] > lg[(size_t)s * V + best] ? v : best;
        m[best >> 5] &= ~(1u << (best & 31));
    }
    for (uint32_t s = 0; s < S; s++) {
        struct l8_sampling p = { .temperature = s < 4 ? 0.0f : 0.5f + 0.1f * (s % 7),
                                 .top_k = s % 3 == 0 ? 0 : 1 + s * 7,
                                 .top_p = s % 4 == 1 ? 0.9f : 1.0f,
                                 .min_p = s % 5 == 2 ? 0.05f : 0.0f,
                                 /* s = 6: a penalty of 0 is off in sampler.c */
                                 .repetition_penalty = s % 2 ? 1.3f : s == 6 ? 0.0f : 1.0f,
                                 .seed = 1234 + s };
        sp[s] = p;
        req[s] = (struct l8k_sample_req){
            .temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
            .rep_penalty = p.repetition_penalty,
            .u = p.temperature > 0 ? l8_philox_uniform(p.seed, s) : 0.0f,
            .logits_row = (int32_t)s, .hist_off = 0, .n_hist = 64,
            .mask_row = s % 3 == 1 ? (int32_t)(s / 3) : -1 };
    }
    uint32_t *dmk = dup_to_dev(mk, (size_t)S * W * 4);
    float *dl = dup_to_dev(lg, (size_t)S * V * 4), *dscr = dalloc((size_t)S * V * 4);
    float *dlp = dalloc(S * 4);
    int32_t *dh = dup_to_dev(hist, sizeof hist), *dt = dalloc(S * 4);
    struct l8k_sample_req *dr = dup_to_dev(req, sizeof req);
    KOK(l8k_sample(dl, V, dr, S, dh, dmk, dscr, dt, dlp, 0));
    int32_t tok[24], tok2[24];
    float lp[24];
    to_host(tok, dt, S * 4);
    to_host(lp, dlp, S * 4);
    struct l8_sampler *cs = l8_sampler_new(V);
    uint32_t diff = 0;
    for (uint32_t s = 0; s < S; s++) {
        float clp;
        const uint32_t *ms = s % 3 == 1 ? mk + (size_t)(s / 3) * W : NULL;
        uint32_t ct = l8_sample(cs, lg + (size_t)s * V, &sp[s], histu, 64, ms, s, &clp);
        if (ms)
            CHECK(ms[tok[s] >> 5] >> (tok[s] & 31) & 1, "sample %u: gpu token %d outside "
                  "the mask", s, tok[s]);
        if ((uint32_t)tok[s] != ct) {
            diff++;
            printf("  sample %u: gpu %d cpu %u\n", s, tok[s], ct);
        }
        CHECK(fabsf(lp[s] - clp) <= 1e-4f * (1.0f + fabsf(clp)),
              "sample %u: logprob gpu %.7g cpu %.7g", s, lp[s], clp);
    }
    CHECK(tok[0] == 100, "greedy tie: got %d, want 100", tok[0]);
    CHECK(diff == 0, "sampling, V=%u: %u of %u tokens differ from the CPU sampler", V, diff, S);
    /* Same inputs, same tokens. */
    KOK(l8k_sample(dl, V, dr, S, dh, dmk, dscr, dt, dlp, 0));
    to_host(tok2, dt, S * 4);
    CHECK(memcmp(tok, tok2, sizeof tok) == 0, "sampling is not deterministic");
    l8_sampler_free(cs);
    free(lg);
    free(mk);
    cudaFree(dl); cudaFree(dscr); cudaFree(dh); cudaFree(dr); cudaFree(dmk);

    /* Greedy with the maximum planted at each position mod 4 (the lanes
     * of a 16-byte load), at the first and at the last id. */
    const uint32_t G = 8;
    float *gl = malloc((size_t)G * V * 4);
    uint32_t want[8];
    struct l8k_sample_req greq[8];
    for (uint32_t r = 0; r < G; r++) {
        for (uint32_t v = 0; v < V; v++)
            gl[(size_t)r * V + v] = rnd_n(3.0f);
        want[r] = r == 6 ? 0 : r == 7 ? V - 1 : 1 + 4 * (100 + 97 * r) + r % 4;
        gl[(size_t)r * V + want[r]] = 40.0f;
        greq[r] = (struct l8k_sample_req){ .top_p = 1.0f, .rep_penalty = 1.0f,
                                           .logits_row = (int32_t)r };
    }
    float *dgl = dup_to_dev(gl, (size_t)G * V * 4), *dgs = dalloc((size_t)G * V * 4);
    struct l8k_sample_req *dgr = dup_to_dev(greq, sizeof greq);
    KOK(l8k_sample(dgl, V, dgr, G, NULL, NULL, dgs, dt, dlp, 0));
    to_host(tok, dt, G * 4);
    uint32_t gbad = 0;
    for (uint32_t r = 0; r < G; r++)
        gbad += (uint32_t)tok[r] != want[r];
    CHECK(gbad == 0, "greedy, V=%u: %u of %u planted maxima missed", V, gbad, G);
    free(gl);
    cudaFree(dgl); cudaFree(dgs); cudaFree(dgr); cudaFree(dlp); cudaFree(dt);

    /* Philox on the device is the CPU's. */
    float *du = dalloc(1000 * 4), u[1000];
    KOK(l8k_philox_uniform(0xdeadbeef12345678ull, (1ull << 32) - 500, 1000, du, 0));
    to_host(u, du, sizeof u);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < 1000; i++)
        bad += u[i] != l8_philox_uniform(0xdeadbeef12345678ull, (1ull << 32) - 500 + i);
    CHECK(bad == 0, "philox: %u of 1000 uniforms differ from the CPU's", bad);
    cudaFree(du);
}

/* ---- shape checks: bad arguments are refused, not launched -------------- */

static void test_refusals(struct l8k_blas *b)
{
    float *d = dalloc(1024);
    CHECK(l8k_gemv(d, L8K_FP8, d, d, L8K_F32, NULL, 1, 4, 8, d, 4, 0) == -EINVAL, "gemv K%%16");
    CHECK(l8k_gemv(d, L8K_FP8, NULL, d, L8K_F32, NULL, 1, 4, 16, d, 4, 0) == -EINVAL,
          "gemv fp8 without scale");
    CHECK(l8k_attention(d, 128, d, d, L8K_BF16, 16, (int32_t *)d, 1, (int32_t *)d, (int32_t *)d,
                        NULL, 1, 12, 1, 128, 1.0f, 16, d, d, 128 * 12, 0) == -EINVAL,
          "attention G > 8");
    const uint8_t *w8 = (const uint8_t *)d;
    const int32_t *i32 = (const int32_t *)d;
    CHECK(l8k_gemv_qkv_rope(w8, d, d, L8K_FP8, d, 1, 16, d, 4 * 3, i32, d, 1, 1, 3, d, d, L8K_BF16,
                            16, i32, 0) == -EINVAL, "gemv_qkv_rope odd head_dim");
    CHECK(l8k_gemv_qkv_rope(w8, d, d, L8K_FP8, d, 1, 16, d, 4 * 3 - 1, i32, d, 1, 1, 4, d, d,
                            L8K_BF16, 16, i32, 0) == -EINVAL, "gemv_qkv_rope ldy < N");
    CHECK(l8k_gemv_qkv_rope(w8, d, d, L8K_BF16, NULL, 1, 16, d, 4 * 3, i32, d, 1, 1, 4, d, d,
                            L8K_BF16, 16, i32, 0) == -EINVAL, "gemv_qkv_rope bf16 x");
    CHECK(l8k_attention_prefill(d, 128 * 12, d, d, 16, (int32_t *)d, 1, (int32_t *)d, 1, 12, 1,
                                128, 1.0f, 16, d, d, 128 * 12, 0) == -EINVAL,
          "attention prefill G > 8");
    CHECK(l8k_attention_prefill(d, 128 * 4 + 1, d, d, 16, (int32_t *)d, 1, (int32_t *)d, 1, 4, 1,
                                128, 1.0f, 16, d, d, 128 * 4, 0) == -EINVAL,
          "attention prefill odd ldq");
    CHECK(l8k_attention_prefill(d, 96 * 4, d, d, 16, (int32_t *)d, 1, (int32_t *)d, 1, 4, 1, 96,
                                1.0f, 16, d, d, 96 * 4, 0) == -EINVAL,
          "attention prefill D = 96");
    CHECK(l8k_rmsnorm(d, NULL, d, 1e-5f, 16, NULL, 1, L8K_FP8, d, NULL, 0) == -EINVAL,
          "rmsnorm fp8 without scale");
    CHECK(l8k_gemm_fp8(b, (uint8_t *)d, d, (uint8_t *)d, d, 1, 6, 16, L8K_F32, d, 0) == -EINVAL,
          "gemm fp8 N %% 4");
    CHECK(l8k_gemm_fp8(b, (uint8_t *)d, d, (uint8_t *)d, d, 1, 12, 16, L8K_BF16, d, 0) == -EINVAL,
          "gemm fp8 bf16 out, N %% 8");
    CHECK(l8k_gemm_fp8(b, (uint8_t *)d, d, (uint8_t *)d, d, 1, 16, 16, L8K_FP8, d, 0) == -EINVAL,
          "gemm fp8 fp8 out");
    cudaFree(d);
}

/* The attention kernels alone (test_gpu_kernels attention): what
 * tests/gpu/run.sh runs under compute-sanitizer's racecheck and memcheck. */
static void test_attention_all(void)
{
    uint32_t one[1] = { 1 }, longr[1] = { 3001 };
    uint32_t mixed[19];
    for (int i = 0; i < 19; i++)
        mixed[i] = (uint32_t)(i * 53 % 400);   /* includes 0 (a padding row) */
    test_attention(L8K_F32, 128, 4, 1, 1, one, 1, false);
    test_attention(L8K_F32, 128, 32, 8, 1, longr, 3001, false);   /* split-K */
    test_attention(L8K_BF16, 128, 32, 8, 1, longr, 4096, false);  /* bound above the length */
    test_attention(L8K_BF16, 128, 8, 2, 19, mixed, 400, false);
    test_attention(L8K_F32, 64, 8, 8, 19, mixed, 400, false);
    test_attention(L8K_BF16, 128, 8, 2, 19, mixed, 400, true);
    test_attention(L8K_F32, 128, 4, 1, 7, mixed + 5, 4000, true); /* split-K, rows list */
    test_attention(L8K_BF16, 64, 8, 1, 19, mixed, 400, false);   /* G = 8, bf16 at D = 64 */
    test_attention(L8K_BF16, 128, 6, 2, 7, mixed, 400, false);   /* G = 3 */
    test_attention_own_plan(128, 16, 8, 9, 700);
    test_attention_own_plan(64, 8, 8, L8K_ATTN_ROW_PLANS, 300);
    /* One token, partial tiles from 0, one whole tile at an odd position, a
     * chunk after earlier pages, and a long context with few tiles (split
     * across blocks). */
    const struct chunk c1[] = { { 0, 1 }, { 0, 37 }, { 5, 16 }, { 300, 70 }, { 3000, 9 } };
    test_attention_prefill(128, 32, 8, c1, 5);          /* the 8B: G = 4, 16 tokens a tile */
    test_attention_prefill(128, 4, 1, c1 + 1, 3);       /* the golden model's heads */
    const struct chunk c2[] = { { 0, 130 }, { 64, 64 }, { 1100, 3 } };
    test_attention_prefill(64, 8, 8, c2, 3);            /* G = 1: 64 tokens a tile */
    test_attention_prefill(64, 6, 2, c2, 3);            /* G = 3: 21 tokens, rows unused */
}

/* The bf16 path's scratch outgrown after a graph captured it: the graph
 * must still replay into memory it owns (cudaFree'd memory is reused by the
 * next allocation on the device; cuemu leaves it unmapped). A fresh blas on
 * the bf16 path, a product of M1 rows captured, one of M2 > M1 rows run
 * eagerly (the scratch grows), then the graph replayed. */
static void test_gemm_scratch_graph(void)
{
    const uint32_t M1 = 10, M2 = 96, N = 64, K = 256;
    struct l8k_blas *b = NULL;
    KOK(l8k_blas_create(0, &b));
    if (l8k_blas_set_fp8_path(b, L8K_F32, L8K_FP8_BF16) != 0) {
        printf("  bf16 scratch under a graph: the bf16 path is not available here\n");
        l8k_blas_destroy(b);
        return;
    }
    uint8_t *w, *x;
    float *ws, *xs, *y = malloc((size_t)M2 * N * 4);
    double *ref;
    fp8_gemm_problem(M2, N, K, &w, &x, &ws, &xs, &ref);
    void *dw = dup_to_dev(w, (size_t)N * K), *dx = dup_to_dev(x, (size_t)M2 * K);
    float *dws = dup_to_dev(ws, N * 4), *dxs = dup_to_dev(xs, M2 * 4);
    float *dy = dalloc((size_t)M2 * N * 4);
    cudaStream_t st;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M1, N, K, L8K_F32, dy, st));   /* sized eagerly */
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    int rc = l8k_gemm_fp8(b, dw, dws, dx, dxs, M1, N, K, L8K_F32, dy, st);
    CU(cudaStreamEndCapture(st, &graph));
    KOK(rc);
    CU(cudaGraphInstantiate(&exec, graph, 0));
    KOK(l8k_gemm_fp8(b, dw, dws, dx, dxs, M2, N, K, L8K_F32, dy, st));   /* grows */
    CU(cudaStreamSynchronize(st));
    to_host(y, dy, (size_t)M2 * N * 4);
    double e2 = rel_err(y, ref, (size_t)M2 * N);
    poison(dy, (size_t)M1 * N * 4);
    CU(cudaGraphLaunch(exec, st));
    CU(cudaStreamSynchronize(st));
    to_host(y, dy, (size_t)M1 * N * 4);
    double e1 = rel_err(y, ref, (size_t)M1 * N);
    printf("  bf16 scratch under a graph: %u rows eager after the capture %.3g, the graph's %u "
           "rows replayed %.3g\n", M2, e2, M1, e1);
    CHECK(e2 <= TOL_TC && e1 <= TOL_TC, "bf16 scratch under a graph: rel err %.3g / %.3g", e2,
          e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    l8k_blas_destroy(b);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dws);
    cudaFree(dxs);
    cudaFree(dy);
    free(w);
    free(x);
    free(ws);
    free(xs);
    free(y);
    free(ref);
}

int main(int argc, char **argv)
{
    require_gpu();
    g_rng ^= (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;  /* fresh inputs every run */
    if (argc > 1 && strcmp(argv[1], "attention") == 0) {
        test_attention_all();
        printf("%s (%d failures)\n", t_failures ? "FAILED" : "ok", t_failures);
        return t_failures ? 1 : 0;
    }
    printf("decode kernels launched with programmatic dependent launch: %s\n",
           l8k_pdl_enabled() ? "yes" : "no (compute capability < 9)");
    struct l8k_blas *b = NULL;
    int rc = l8k_blas_create(0, &b);
    CHECK(rc == 0, "l8k_blas_create: %d", rc);
    test_quantize();
    test_rmsnorm();
    test_silu();
    test_embed();
    test_checksum();
    const uint32_t Ms[] = { 1, 3, 8, 11 }, Ns[] = { 1, 19, 111, 989 }, Ks[] = { 16, 528, 4096 };
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            uint32_t K = Ks[(i + j) % 3];
            check_gemv(Ms[i], Ns[j], K, L8K_FP8);
            check_gemv(Ms[i], Ns[j], K, L8K_F32);
            check_gemv(Ms[i], Ns[j], K, L8K_BF16);
        }
    test_gemv_dense(3, 1000, 512);
    if (b)
        test_gemm(b);
    test_gemm_scratch_graph();
    test_rope_kv(L8K_F32);
    test_rope_kv(L8K_BF16);
    test_gemv_qkv_rope(1, 32, 8, 128, L8K_FP8, L8K_BF16);   /* the 8B's heads, decode */
    test_gemv_qkv_rope(5, 8, 2, 128, L8K_FP8, L8K_BF16);
    test_gemv_qkv_rope(11, 4, 1, 64, L8K_FP8, L8K_F32);
    test_gemv_qkv_rope(3, 8, 2, 128, L8K_F32, L8K_F32);     /* exact numerics */
    test_gemv_qkv_rope(9, 6, 3, 64, L8K_F32, L8K_BF16);
    test_attention_all();
    test_sample(5000);
    test_sample(4999);
    test_refusals(b);
    l8k_blas_destroy(b);
    printf("%s (%d failures)\n", t_failures ? "FAILED" : "ok", t_failures);
    return t_failures ? 1 : 0;
}
