/* bench_kernels.c - the two ceilings and the kernels against them, on the
 * Llama 3.1 8B shapes (the method: measure the copy bandwidth and the matrix
 * rate, then time each kernel with events, median of many, on random data,
 * rotating buffers so the 60 MB L2 is not what is measured).
 *
 * Prints a table on stderr and one JSON object on stdout:
 *   {"copy_gbs":..., "rows":[{"name","M","N","K","us","gbs","bw_frac","tflops"}...],
 *    "decode_projection_us":..., "decode_bw_frac":..., "crossover_m":...,
 *    "qkv_rope_fused_us":..., "qkv_then_rope_kv_us":..., ...}
 * `bench_gpu_kernels attention` runs only the attention rows.
 * Exits 77 without a device. */
#include <json-c/json.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "gpu_util.h"
#include "l8_kernels.h"
#include "numerics.h"

#define REPS 20
#define ROT_MAX 16        /* weight copies rotated through, at most */
#define ROT_BYTES (256u << 20) /* ... enough of them to cover 4x the 60 MB L2 */

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*bench_fn)(void *ctx, int i);

/* Median of REPS timed calls (after 3 warm-ups), microseconds. */
static float time_us(bench_fn f, void *ctx)
{
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    float t[REPS];
    for (int i = 0; i < 3; i++)
        if (f(ctx, i))
            return -1;
    for (int i = 0; i < REPS; i++) {
        CU(cudaEventRecord(a, 0));
        if (f(ctx, i))
            return -1;
        CU(cudaEventRecord(b, 0));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&t[i], a, b));
    }
    CU(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    qsort(t, REPS, sizeof t[0], cmp_f);
    return t[REPS / 2] * 1000.0f;
}

struct copy_ctx { void *src, *dst; size_t n; };
static int do_copy(void *c_, int i)
{
    struct copy_ctx *c = c_;
    (void)i;
    return cudaMemcpyAsync(c->dst, c->src, c->n, cudaMemcpyDeviceToDevice, 0) != cudaSuccess;
}

struct prod_ctx {
    uint8_t *w[ROT_MAX];
    int rot;
    float *ws;
    void *x;
    float *xs;
    float *y;
    uint32_t M, N, K;
    enum l8k_dtype w_dt, x_dt;
    struct l8k_blas *blas;
    int use_blas;
    enum l8k_dtype y_dt;          /* cuBLASLt's output dtype (F32 unless set) */
    /* after the product, SiLU*up into FP8 as a step does (N = 2 I) */
    bool silu;
    uint8_t *hq;
    float *hs;
    /* the qkv product with RoPE and the KV append (8B heads): 1 fused
     * (l8k_gemv_qkv_rope), 2 l8k_gemv then l8k_rope_kv */
    int rope;
    int32_t *pos, *slot;
    float *inv_freq;
    void *kpool, *vpool;
};
static int do_prod(void *c_, int i)
{
    struct prod_ctx *c = c_;
    if (c->rope == 1)
        return l8k_gemv_qkv_rope(c->w[i % c->rot], c->ws, c->x, c->x_dt, c->xs, c->M, c->K, c->y,
                                 c->N, c->pos, c->inv_freq, 32, 8, 128, c->kpool, c->vpool,
                                 L8K_BF16, 16, c->slot, 0);
    if (c->rope == 2)
        return l8k_gemv(c->w[i % c->rot], c->w_dt, c->ws, c->x, c->x_dt, c->xs, c->M, c->N, c->K,
                        c->y, c->N, 0) ||
               l8k_rope_kv(c->y, c->N, c->pos, c->inv_freq, c->M, 32, 8, 128, c->kpool, c->vpool,
                           L8K_BF16, 16, c->slot, 0);
    if (c->use_blas)
        return l8k_gemm_fp8(c->blas, c->w[i % c->rot], c->ws, c->x, c->xs, c->M, c->N, c->K,
                            c->y_dt, c->y, 0) ||
               (c->silu && l8k_silu_mul(c->y, c->y_dt, c->M, c->N / 2, L8K_FP8, c->hq, c->hs, 0));
    return l8k_gemv(c->w[i % c->rot], c->w_dt, c->w_dt == L8K_FP8 ? c->ws : NULL, c->x, c->x_dt,
                    c->x_dt == L8K_FP8 ? c->xs : NULL, c->M, c->N, c->K, c->y, c->N, 0);
}

static void fill_random(void *d, size_t bytes, int fp8)
{
    uint8_t *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) {
        h[i] = (uint8_t)rnd_u32();
        if (fp8 && (h[i] & 0x7f) == 0x7f)
            h[i] = 0x3f;
    }
    CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    free(h);
}

/* n values in [-1, 1) as bf16 or f32 (random bytes would be NaNs and
 * infinities, which attention must not be timed on). */
static void fill_values(void *d, size_t n, bool bf16)
{
    void *h = malloc(n * (bf16 ? 2 : 4));
    for (size_t i = 0; i < n; i++) {
        float f = rnd_f();
        if (bf16)
            ((uint16_t *)h)[i] = l8_f32_to_bf16(f);
        else
            ((float *)h)[i] = f;
    }
    CU(cudaMemcpy(d, h, n * (bf16 ? 2 : 4), cudaMemcpyHostToDevice));
    free(h);
}

static void prod_init(struct prod_ctx *c, uint32_t M, uint32_t N, uint32_t K, enum l8k_dtype w_dt,
                      enum l8k_dtype x_dt, struct l8k_blas *b)
{
    memset(c, 0, sizeof *c);
    size_t wb = (size_t)N * K * (w_dt == L8K_BF16 ? 2 : 1);
    /* Each timed call reads a different copy, so the weights come from HBM,
     * not from the L2 a smaller set would sit in. */
    c->rot = (int)((ROT_BYTES + wb - 1) / wb);
    if (c->rot < 2)
        c->rot = 2;
    if (c->rot > ROT_MAX)
        c->rot = ROT_MAX;
    for (int r = 0; r < c->rot; r++) {
        c->w[r] = dalloc(wb);
        if (w_dt == L8K_FP8)
            fill_random(c->w[r], wb, 1);
        else {
            uint16_t *h = malloc(wb);
            for (size_t i = 0; i < wb / 2; i++)
                h[i] = (uint16_t)(0x3c00 + (rnd_u32() & 0x3ff)) ^ (rnd_u32() & 0x8000);
            CU(cudaMemcpy(c->w[r], h, wb, cudaMemcpyHostToDevice));
            free(h);
        }
    }
    float *hs = malloc((N > M ? N : M) * 4);
    for (uint32_t i = 0; i < (N > M ? N : M); i++)
        hs[i] = 1e-3f * (1 + rnd_f() * 0.5f);
    c->ws = dup_to_dev(hs, N * 4);
    c->xs = dup_to_dev(hs, M * 4);
    free(hs);
    size_t xb = (size_t)M * K * (x_dt == L8K_F32 ? 4 : 1);
    c->x = dalloc(xb);
    if (x_dt == L8K_FP8)
        fill_random(c->x, xb, 1);
    else {
        float *h = malloc(xb);
        for (size_t i = 0; i < xb / 4; i++)
            h[i] = rnd_n(1.0f);
        CU(cudaMemcpy(c->x, h, xb, cudaMemcpyHostToDevice));
        free(h);
    }
    c->y = dalloc((size_t)M * N * 4);
    c->hq = dalloc((size_t)M * N / 2);
    c->hs = dalloc((size_t)M * 4);
    c->M = M; c->N = N; c->K = K;
    c->w_dt = w_dt; c->x_dt = x_dt;
    c->blas = b;
}

static void prod_free(struct prod_ctx *c)
{
    for (int r = 0; r < c->rot; r++)
        cudaFree(c->w[r]);
    cudaFree(c->ws); cudaFree(c->xs); cudaFree(c->x); cudaFree(c->y); cudaFree(c->hq);
    cudaFree(c->hs);
}

static json_object *row(const char *name, uint32_t M, uint32_t N, uint32_t K, float us,
                        double bytes, double copy_gbs, double flops)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_add(o, "M", json_object_new_int(M));
    json_object_object_add(o, "N", json_object_new_int(N));
    json_object_object_add(o, "K", json_object_new_int(K));
    json_object_object_add(o, "us", json_object_new_double(us));
    double gbs = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0;
    json_object_object_add(o, "gbs", json_object_new_double(gbs));
    json_object_object_add(o, "bw_frac", json_object_new_double(copy_gbs > 0 ? gbs / copy_gbs : 0));
    json_object_object_add(o, "tflops",
                           json_object_new_double(us > 0 ? flops / (us * 1e-6) / 1e12 : 0));
    fprintf(stderr, "%-24s M=%-4u N=%-6u K=%-6u %9.1f us %7.0f GB/s (%.2f of copy) %7.1f TFLOP/s\n",
            name, M, N, K, us, gbs, copy_gbs > 0 ? gbs / copy_gbs : 0,
            us > 0 ? flops / (us * 1e-6) / 1e12 : 0);
    return o;
}

/* Paged attention on the 8B's heads (32 query, 8 KV, head_dim 128, bf16 KV
 * pages of 16). Decode: one row per sequence at its full length, n_seq
 * sequences of kv positions. Prefill: the last n_tok positions of one
 * sequence of kv, causal, through the tile kernel (what the engine runs) or,
 * as the baseline, through the row kernel (a row per token). */
enum attn_kind { ATTN_DECODE, ATTN_PREFILL_ROWS, ATTN_PREFILL_TILES };

struct attn_ctx {
    enum attn_kind kind;
    float *q, *out, *work;
    void *k, *v;
    int32_t *pt, *rs, *kl, *tiles;
    uint32_t R, n_tiles, max_kv, pps;
};
static int do_attn(void *c_, int i)
{
    struct attn_ctx *c = c_;
    (void)i;
    if (c->kind == ATTN_PREFILL_TILES)
        return l8k_attention_prefill(c->q, 32 * 128, c->k, c->v, 16, c->pt, c->pps, c->tiles,
                                     c->n_tiles, 32, 8, 128, 0.08838835f, c->max_kv, c->work,
                                     c->out, 32 * 128, 0);
    return l8k_attention(c->q, 32 * 128, c->k, c->v, L8K_BF16, 16, c->pt, c->pps, c->rs, c->kl,
                         NULL, c->R, 32, 8, 128, 0.08838835f, c->max_kv, c->work, c->out,
                         32 * 128, 0);
}

static json_object *bench_attention(const char *name, enum attn_kind kind, uint32_t n,
                                    uint32_t kv, double copy_gbs)
{
    const bool prefill = kind != ATTN_DECODE;
    const uint32_t n_seq = prefill ? 1 : n, pos0 = prefill ? kv - n : 0;
    struct attn_ctx c = { .kind = kind, .R = prefill ? n : n_seq, .max_kv = kv,
                          .pps = (kv + 15) / 16 };
    size_t pages = (size_t)n_seq * c.pps, half = pages * 8 * 16 * 128 * 2;
    c.k = dalloc(half);
    c.v = dalloc(half);
    fill_values(c.k, half / 2, true);
    fill_values(c.v, half / 2, true);
    int32_t *pt = malloc(pages * 4), *rs = malloc(c.R * 4), *kl = malloc(c.R * 4);
    if (prefill)
        c.n_tiles = l8k_attention_tiles(32, 8, 0, c.R, pos0, 0, NULL);
    int32_t *tiles = malloc((size_t)c.n_tiles * 16 + 16);
    if (prefill)
        l8k_attention_tiles(32, 8, 0, c.R, pos0, 0, tiles);
    for (size_t i = 0; i < pages; i++)
        pt[i] = (int32_t)i;
    for (uint32_t r = 0; r < c.R; r++) {
        rs[r] = prefill ? 0 : (int32_t)r;
        kl[r] = prefill ? (int32_t)(pos0 + r + 1) : (int32_t)kv;
    }
    c.pt = dup_to_dev(pt, pages * 4);
    c.rs = dup_to_dev(rs, c.R * 4);
    c.kl = dup_to_dev(kl, c.R * 4);
    c.tiles = dup_to_dev(tiles, (size_t)c.n_tiles * 16 + 16);
    c.q = dalloc((size_t)c.R * 32 * 128 * 4);
    fill_values(c.q, (size_t)c.R * 32 * 128, false);
    c.out = dalloc((size_t)c.R * 32 * 128 * 4);
    size_t wf = l8k_attention_work_floats(c.R, 32, 128, kv);
    c.work = dalloc(wf * 4 + 16);
    float us = time_us(do_attn, &c);
    /* K and V of every sequence read once: what the kernel cannot do without. */
    double bytes = 2.0 * half, flops = 0;
    for (uint32_t r = 0; r < c.R; r++)
        flops += 4.0 * 32 * 128 * kl[r];   /* q.k and p.v, 2 flop each */
    json_object *o = row(name, c.R, kv, 128, us, bytes, copy_gbs, flops);
    fprintf(stderr, "  %s: x 32 layers = %.2f ms per step\n", name, 32 * us / 1000.0);
    free(pt); free(rs); free(kl); free(tiles);
    cudaFree(c.k); cudaFree(c.v); cudaFree(c.pt); cudaFree(c.rs); cudaFree(c.kl);
    cudaFree(c.tiles); cudaFree(c.q); cudaFree(c.out); cudaFree(c.work);
    return o;
}

int main(int argc, char **argv)
{
    require_gpu();
    const bool only_attn = argc > 1 && !strcmp(argv[1], "attention");
    json_object *out = json_object_new_object(), *rows = json_object_new_array();
    struct l8k_blas *b = NULL;
    if (l8k_blas_create(0, &b)) {
        printf("FAIL: cuBLASLt setup\n");
        return 1;
    }
    json_object_object_add(out, "fp8_gemm_path",
                           json_object_new_int(l8k_blas_fp8_path(b, L8K_F32)));
    json_object_object_add(out, "fp8_gemm_path_bf16",
                           json_object_new_int(l8k_blas_fp8_path(b, L8K_BF16)));

    /* Ceiling 1: device-to-device copy, 2 GiB, bytes read + written. */
    struct copy_ctx cc = { .n = 2ull << 30 };
    cc.src = dalloc(cc.n);
    cc.dst = dalloc(cc.n);
    float cus = time_us(do_copy, &cc);
    double copy_gbs = 2.0 * cc.n / (cus * 1e-6) / 1e9;
    fprintf(stderr, "copy D2D 2 GiB: %.1f us, %.0f GB/s (read + write)\n", cus, copy_gbs);
    json_object_object_add(out, "copy_gbs", json_object_new_double(copy_gbs));
    cudaFree(cc.src);
    cudaFree(cc.dst);
    if (only_attn)
        goto attention;

    /* Decode projections of one 8B layer at M = 1 (FP8 activations), and lm_head. */
    struct { const char *name; uint32_t N, K; } P[] = {
        { "qkv", 6144, 4096 }, { "o", 4096, 4096 }, { "gate_up", 28672, 4096 },
        { "down", 4096, 14336 } };
    double layer_us = 0, layer_bytes = 0;
    for (int i = 0; i < 4; i++) {
        struct prod_ctx c;
        prod_init(&c, 1, P[i].N, P[i].K, L8K_FP8, L8K_FP8, b);
        float us = time_us(do_prod, &c);
        double bytes = (double)P[i].N * P[i].K + P[i].N * 4.0 + P[i].K + P[i].N * 4.0;
        json_object_array_add(rows, row(P[i].name, 1, P[i].N, P[i].K, us, bytes, copy_gbs,
                                        2.0 * P[i].N * P[i].K));
        layer_us += us;
        layer_bytes += bytes;
        prod_free(&c);
    }
    /* The qkv product with RoPE and the KV append: fused into the GEMV (the
     * engine's decode path) against the GEMV then rope_kv, M = 1, position
     * 640: the fusion's gain, a layer's worth. */
    {
        struct prod_ctx c;
        prod_init(&c, 1, 6144, 4096, L8K_FP8, L8K_FP8, b);
        int32_t pos = 640, slot = 640;
        float invf[64];
        for (int i = 0; i < 64; i++)
            invf[i] = (float)pow(500000.0, -2.0 * i / 128);
        c.pos = dup_to_dev(&pos, 4);
        c.slot = dup_to_dev(&slot, 4);
        c.inv_freq = dup_to_dev(invf, sizeof invf);
        c.kpool = dalloc((size_t)41 * 8 * 16 * 128 * 2);   /* 41 pages: slot 640 is page 40 */
        c.vpool = dalloc((size_t)41 * 8 * 16 * 128 * 2);
        double bytes = 6144.0 * 4096;
        float us[2];
        for (int r = 0; r < 2; r++) {
            c.rope = r + 1;
            us[r] = time_us(do_prod, &c);
            json_object_array_add(rows, row(r ? "qkv_then_rope_kv" : "qkv_rope_fused", 1, 6144,
                                            4096, us[r], bytes, copy_gbs, 2.0 * 6144 * 4096));
        }
        fprintf(stderr, "qkv + RoPE + KV append: fused %.2f us, GEMV then rope_kv %.2f us\n",
                us[0], us[1]);
        json_object_object_add(out, "qkv_rope_fused_us", json_object_new_double(us[0]));
        json_object_object_add(out, "qkv_then_rope_kv_us", json_object_new_double(us[1]));
        cudaFree(c.pos); cudaFree(c.slot); cudaFree(c.inv_freq); cudaFree(c.kpool);
        cudaFree(c.vpool);
        prod_free(&c);
    }
    {
        struct prod_ctx c;
        prod_init(&c, 1, 128256, 4096, L8K_BF16, L8K_F32, b);
        float us = time_us(do_prod, &c);
        double bytes = 128256.0 * 4096 * 2;
        json_object_array_add(rows, row("lm_head_bf16", 1, 128256, 4096, us, bytes, copy_gbs,
                                        2.0 * 128256 * 4096));
        double dec_us = 32 * layer_us + us, dec_bytes = 32 * layer_bytes + bytes;
        double frac = dec_bytes / (dec_us * 1e-6) / 1e9 / copy_gbs;
        fprintf(stderr, "decode projections (32 layers + lm_head): %.0f us/token -> %.0f tok/s "
                        "bound from products alone; %.2f of copy bandwidth\n",
                dec_us, 1e6 / dec_us, frac);
        json_object_object_add(out, "decode_projection_us", json_object_new_double(dec_us));
        json_object_object_add(out, "decode_bw_frac", json_object_new_double(frac));
        prod_free(&c);
    }

    /* Crossover GEMV -> cuBLASLt on the gate/up shape. */
    uint32_t cross = 0;
    const uint32_t Ms[] = { 1, 2, 4, 8, 16, 32, 64 };
    for (int i = 0; i < 7; i++) {
        struct prod_ctx c;
        prod_init(&c, Ms[i], 28672, 4096, L8K_FP8, L8K_FP8, b);
        float g = time_us(do_prod, &c);
        c.use_blas = 1;
        float l = time_us(do_prod, &c);
        double fl = 2.0 * Ms[i] * 28672 * 4096;
        json_object_array_add(rows, row("gate_up_gemv", Ms[i], 28672, 4096, g,
                                        28672.0 * 4096, copy_gbs, fl));
        json_object_array_add(rows, row("gate_up_cublaslt", Ms[i], 28672, 4096, l,
                                        28672.0 * 4096, copy_gbs, fl));
        if (g <= l)
            cross = Ms[i];
        prod_free(&c);
    }
    fprintf(stderr, "GEMV faster up to M = %u (the engine measures its own at start, "
                    "cuda_tune.h)\n", cross);
    json_object_object_add(out, "crossover_m", json_object_new_int(cross));

    /* Ceiling 2: FP8 tensor throughput, our cuBLASLt FP8 path on a shape
     * that fills the GPU (8192^3). */
    double fp8_tflops = 0;
    {
        struct prod_ctx c;
        prod_init(&c, 8192, 8192, 8192, L8K_FP8, L8K_FP8, b);
        c.use_blas = 1;
        float us = time_us(do_prod, &c);
        fp8_tflops = us > 0 ? 2.0 * 8192 * 8192 * 8192 / (us * 1e-6) / 1e12 : 0;
        fprintf(stderr, "FP8 GEMM 8192^3: %.1f us, %.0f TFLOP/s\n", us, fp8_tflops);
        json_object_object_add(out, "fp8_gemm_tflops", json_object_new_double(fp8_tflops));
        prod_free(&c);
    }

    /* Prefill products, 512 tokens, and their fraction of that ceiling
     * (gate/up in bf16, as a step writes it). */
    double pre_us = 0, pre_flops = 0;
    for (int i = 0; i < 4; i++) {
        struct prod_ctx c;
        prod_init(&c, 512, P[i].N, P[i].K, L8K_FP8, L8K_FP8, b);
        c.use_blas = 1;
        c.y_dt = i == 2 && l8k_blas_fp8_path(b, L8K_BF16) != L8K_FP8_NONE ? L8K_BF16 : L8K_F32;
        float us = time_us(do_prod, &c);
        double fl = 2.0 * 512 * P[i].N * P[i].K;
        json_object_array_add(rows, row(P[i].name, 512, P[i].N, P[i].K, us,
                                        (double)P[i].N * P[i].K + 512.0 * P[i].K, copy_gbs, fl));
        pre_us += us;
        pre_flops += fl;
        prod_free(&c);
    }
    double tc_frac = pre_us > 0 && fp8_tflops > 0 ? pre_flops / (pre_us * 1e-6) / 1e12 / fp8_tflops : 0;
    fprintf(stderr, "prefill products (512 tokens, one layer): %.1f us, %.2f of the FP8 ceiling; "
                    "x 32 layers = %.2f ms\n", pre_us, tc_frac, 32 * pre_us / 1000.0);
    json_object_object_add(out, "prefill_products_us", json_object_new_double(pre_us));
    json_object_object_add(out, "prefill_tc_frac", json_object_new_double(tc_frac));
    /* cuBLASLt's candidates for the same products: the heuristic's first
     * (what the rows above used) against the fastest (what timing them at
     * start would gain; l8k_gemm_fp8_pin). */
    {
        double first = 0, best = 0;
        json_object *cand = json_object_new_object();
        for (int i = 0; i < 4; i++) {
            struct prod_ctx c;
            prod_init(&c, 512, P[i].N, P[i].K, L8K_FP8, L8K_FP8, b);
            c.use_blas = 1;
            c.y_dt = i == 2 && l8k_blas_fp8_path(b, L8K_BF16) != L8K_FP8_NONE ? L8K_BF16 : L8K_F32;
            const int n = l8k_gemm_fp8_algos(b, c.w[0], c.ws, c.x, c.xs, 512, P[i].N, P[i].K,
                                             c.y_dt, c.y);
            json_object *arr = json_object_new_array();
            float f = -1, bst = -1;
            int bi = -1;
            for (int a = 0; a < n; a++) {
                float us = -1;
                /* rotated weight copies share one alignment: one pin serves all */
                if (l8k_gemm_fp8_pin(b, c.w[0], c.ws, c.x, c.xs, 512, P[i].N, P[i].K, c.y_dt, c.y,
                                     (uint32_t)a) == 0)
                    us = time_us(do_prod, &c);
                json_object_array_add(arr, json_object_new_double(us));
                if (a == 0)
                    f = us;
                if (us > 0 && (bst < 0 || us < bst)) {
                    bst = us;
                    bi = a;
                }
            }
            l8k_gemm_fp8_pin(b, c.w[0], c.ws, c.x, c.xs, 512, P[i].N, P[i].K, c.y_dt, c.y, 0);
            fprintf(stderr, "cuBLASLt candidates, %s at 512: %d, first %.1f us, fastest %.1f us "
                            "(#%d)\n", P[i].name, n, f, bst, bi);
            json_object_object_add(cand, P[i].name, arr);
            first += f;
            best += bst;
            prod_free(&c);
        }
        json_object_object_add(out, "prefill_algo_us", cand);
        json_object_object_add(out, "prefill_products_first_algo_us", json_object_new_double(first));
        json_object_object_add(out, "prefill_products_best_algo_us", json_object_new_double(best));
    }
    /* gate/up then SiLU*up at 512 tokens, the product's output in f32 (59 MB,
     * more than the L2) against bf16 (the engine's choice): what it saves. */
    {
        struct prod_ctx c;
        prod_init(&c, 512, 28672, 4096, L8K_FP8, L8K_FP8, b);
        c.use_blas = 1;
        c.silu = true;
        float us[2];
        for (int o = 0; o < 2; o++) {
            c.y_dt = o ? L8K_BF16 : L8K_F32;
            us[o] = time_us(do_prod, &c);   /* -1: this output refused here */
            json_object_array_add(rows, row(o ? "gate_up_silu_bf16" : "gate_up_silu_f32", 512,
                                            28672, 4096, us[o], 28672.0 * 4096, copy_gbs,
                                            2.0 * 512 * 28672 * 4096));
        }
        fprintf(stderr, "gate/up + SiLU, 512 tokens: f32 between them %.1f us, bf16 %.1f us "
                        "(x 32 layers: %.2f ms saved)\n", us[0], us[1],
                32 * (us[0] - us[1]) / 1000.0);
        json_object_object_add(out, "gate_up_silu_f32_us", json_object_new_double(us[0]));
        json_object_object_add(out, "gate_up_silu_bf16_us", json_object_new_double(us[1]));
        prod_free(&c);
    }
attention:
    /* Attention: the prefill of the single-stream benchmark (512 causal rows,
     * one layer) on the tile kernel and, as its baseline, the row kernel; a
     * 512-token chunk after 3.5k of context; decode at batch 1 over long
     * contexts, and the serving benchmark's decode (64 sequences of ~512). */
    json_object_array_add(rows, bench_attention("attn_prefill_512", ATTN_PREFILL_TILES, 512, 512,
                                                copy_gbs));
    json_object_array_add(rows, bench_attention("attn_prefill_512_rows", ATTN_PREFILL_ROWS, 512,
                                                512, copy_gbs));
    json_object_array_add(rows, bench_attention("attn_prefill_512_at_3584", ATTN_PREFILL_TILES,
                                                512, 4096, copy_gbs));
    json_object_array_add(rows, bench_attention("attn_decode_1x640", ATTN_DECODE, 1, 640,
                                                copy_gbs));   /* the single-stream benchmark's end */
    json_object_array_add(rows, bench_attention("attn_decode_1x4k", ATTN_DECODE, 1, 4096,
                                                copy_gbs));
    json_object_array_add(rows, bench_attention("attn_decode_1x32k", ATTN_DECODE, 1, 32768,
                                                copy_gbs));
    json_object_array_add(rows, bench_attention("attn_decode_64x512", ATTN_DECODE, 64, 512,
                                                copy_gbs));
    json_object_object_add(out, "rows", rows);
    printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PRETTY));
    json_object_put(out);
    l8k_blas_destroy(b);
    return 0;
}
