/* cpu_ops.h - the CPU engine's kernels, exposed for tests (and as the
 * reference the GPU tests compare against).
 *
 * Every kernel computes each output element with a summation order that
 * depends only on that element's own inputs (never on how many tokens are
 * in the step, nor on which thread runs it), which is what makes the CPU
 * engine's logits bitwise identical alone and batched. No FMA contraction:
 * the engine is built with -ffp-contract=off. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../model/model.h"
#include "cpu_fp8.h"
#include "threadpool.h"

/* Dot product in the engine's fixed order (two 8-wide accumulators over
 * 16-element steps, an 8-wide tail into the first, a fixed lane tree, then
 * the scalar tail). */
float l8_cpu_dot(const float *a, const float *b, size_t n);

/* E4M3 codes to f32 (vectorized; equal to l8_e4m3_lut for all 256 codes). */
void l8_cpu_decode_e4m3(const uint8_t *w, size_t n, float *out);

/* Per-thread scratch for the matmuls: nthreads buffers of `floats` each,
 * and the fp8 kernel this processor runs (tests may set another). */
struct l8_cpu_ws {
    float **buf;        /* [nthreads][floats] */
    size_t floats;      /* >= L8_CPU_MM_BUDGET_FLOATS and >= 4 * (max in + 64) */
    int nthreads;
    enum l8_fp8_kernel fp8;
    bool wide;          /* exact kernels in 16-wide vectors (same bits) */
    struct l8_fp8_tables tab;
};
#define L8_CPU_MM_BUDGET_FLOATS (64u * 1024u)   /* decoded weight block per thread */
int  l8_cpu_ws_init(struct l8_cpu_ws *ws, int nthreads, size_t max_in);
void l8_cpu_ws_free(struct l8_cpu_ws *ws);

/* A projection's input, in the engine's numerics. */
struct l8_cpu_x {
    const float *f32;   /* exact: [T, in] f32 activations; NULL in fp8 */
    const void *fp8;    /* fp8: T tokens of packed E4M3 codes, ld bytes each */
    size_t ld;
    bool tiled;         /* fp8: in l8_fp8_pack_tiled's format */
    const float *scale; /* fp8: [T] per-token scales */
};

/* Exact numerics: y[t][o] = scale[o] * sum_i x[t][i] * lut[W.w[o][i]] in
 * l8_cpu_dot's order. Up to 4 tokens the weights are decoded in registers
 * next to the dot (decode is the cost: nothing is stored); beyond, each
 * block of rows is decoded once into the thread's scratch and dotted
 * against every token.
 * Fp8 numerics: the order of cpu_fp8.h, scaled by the token's scale.
 *   y [T, ldy] f32, columns [0, W.out) written; rows split over the pool. */
void l8_cpu_qmatmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                    const struct l8_qweight *W, const struct l8_cpu_x *x,
                    uint32_t T, float *y, size_t ldy);

/* The same for n_w weights that share W[i]->in and the input x (q/k/v,
 * gate/up) as one parallel-for: y[i] [T, ldy[i]], columns [0, W[i]->out).
 * Each output is bitwise what l8_cpu_qmatmul on W[i] alone gives. */
void l8_cpu_qmatmul_multi(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                          const struct l8_qweight *const *W, uint32_t n_w,
                          const struct l8_cpu_x *x, uint32_t T,
                          float *const *y, const size_t *ldy);
/* ... with one destination row pointer per token: out[i][t] -> [W[i]->out]. */
void l8_cpu_qmatmul_to_rows(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                            const struct l8_qweight *const *W, uint32_t n_w,
                            const struct l8_cpu_x *x, uint32_t T, float *const *const *out);

/* out[r][v] = sum_i x[r][i] * D[v][i] for a dense [rows, cols] matrix
 * (embedding / lm_head), one destination row pointer per input row:
 *   x [R, D.cols], out[r] -> [D.rows]. */
void l8_cpu_dense_matmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                         const struct l8_dense *D, const float *x, uint32_t R,
                         float *const *out);

/* Per-token FP8 activation quantization (l8_quantize_act_row on each row)
 * packed for ws's fp8 kernel: x [T, n], q [T, n] u8 codes, packed [T,
 * l8_cpu_quantize_ld(ws, n)] bytes, xs [T] scales; *out describes them. */
size_t l8_cpu_quantize_ld(const struct l8_cpu_ws *ws, size_t n);
void l8_cpu_quantize_rows(struct l8_tp *tp, const struct l8_cpu_ws *ws, const float *x,
                          uint32_t T, size_t n, uint8_t *q, void *packed, float *xs,
                          struct l8_cpu_x *out);

/* y = x / sqrt(mean(x^2) + eps) * w  (sum of squares in f64). y may be x. */
void l8_cpu_rmsnorm(const float *x, const float *w, size_t n, float eps, float *y);

/* RoPE angle table of one position: angle_i = pos * inv_freq[i] in f64,
 * cos/sin in f64 stored f32.  inv_freq, cos, sin: [head_dim / 2]. */
void l8_cpu_rope_table(const float *inv_freq, uint32_t head_dim, uint32_t pos,
                       float *cos_out, float *sin_out);
/* Hugging Face rotate_half on n_heads heads of head_dim: element i pairs
 * with i + head_dim/2:
 *   x[i]      = x[i] cos_i - x[i+h/2] sin_i
 *   x[i+h/2]  = x[i+h/2] cos_i + x[i] sin_i     (x [n_heads, head_dim]) */
void l8_cpu_rope_apply(float *x, uint32_t n_heads, uint32_t head_dim,
                       const float *cos_t, const float *sin_t);

/* Causal attention of a tile of consecutive query tokens of one sequence
 * for the gqa query heads that read one KV head.
 *   q    token i's heads at q + i*ldq, head h at + h*head_dim (f32, RoPE'd)
 *   token i (position pos0 + i) attends keys [0, pos0 + i]
 *   krow, vrow [pos0 + nt] row pointers into the pool: f32, or bf16 bits
 *        when kv_bf16
 *   out  token i, head h at out + i*ldo + h*head_dim
 *   scratch: scores [nt*gqa, pos0+nt] f32, acc [nt*gqa, head_dim] f32,
 *        sums [nt*gqa] f64, kbuf [head_dim] f32.
 * For every query: s_j = dot(q, k_j) * scale (l8_cpu_dot's order),
 * w_j = expf(s_j - max), denominator summed in f64 in j order,
 * out = (sum_j w_j v_j, accumulated in j order in f32) * (1 / denominator).
 * The tile size changes no result. */
void l8_cpu_attention_tile(const float *q, size_t ldq, uint32_t nt, uint32_t gqa,
                           uint32_t head_dim, uint32_t pos0,
                           const void *const *krow, const void *const *vrow, bool kv_bf16,
                           float scale, float *scores, float *acc, double *sums,
                           float *kbuf, float *out, size_t ldo);

/* Decode attention of one query token (its gqa heads over keys [0, n))
 * split so that threads can share it, with bitwise the tile's result:
 *  1. scores: keys [j0, j1) (any cut), s_j = dot * scale into
 *     scores[h*ld + j], and cmax[h] the chunk's running max (-inf start,
 *     NaN skipped);
 *  2. max: mx[h] over the chunk maxima in chunk order (cmax [n_chunks,
 *     gqa]), the tile's NaN-at-key-0 rule included;
 *  3. exp: w_j = expf(s_j - mx) in place, for any cut of the keys;
 *  4. sum: the f64 denominators in j order (sums [gqa]);
 *     pv: acc[h*hd + d] for d in [d0, d1) (cuts at multiples of 32 keep
 *     the vector path) = sum_j w_j v_j[d] in ascending j;
 *  5. the caller: out = acc * (float)(1 / sums[h]).
 * Only the max needs all chunks first; every value is computed by the same
 * operations in the same order as in l8_cpu_attention_tile. */
void l8_cpu_attn_split_scores(const float *q, uint32_t gqa, uint32_t hd,
                              const void *const *krow, bool kv_bf16, uint32_t j0, uint32_t j1,
                              float scale, float *scores, size_t ld, float *kbuf, float *cmax);
void l8_cpu_attn_split_max(const float *cmax, uint32_t n_chunks, uint32_t gqa,
                           const float *scores, size_t ld, float *mx);
void l8_cpu_attn_split_exp(float *scores, size_t ld, uint32_t gqa, uint32_t j0, uint32_t j1,
                           const float *mx);
void l8_cpu_attn_split_sum(const float *w, size_t ld, uint32_t gqa, uint32_t n, double *sums);
void l8_cpu_attn_split_pv(const float *w, size_t ld, uint32_t gqa, uint32_t n,
                          const void *const *vrow, bool kv_bf16, uint32_t hd,
                          uint32_t d0, uint32_t d1, float *acc);
