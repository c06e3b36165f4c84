/* l8_kernels.h - the CUDA kernels of the llama8 GPU engine, C-callable.
 *
 * One exported entry point per op. Each checks its shapes and alignment,
 * launches on the given stream, checks the launch, and returns 0 or a
 * negative errno (-EINVAL: shape/alignment/argument outside what the op
 * supports; -EIO: the launch or a library call failed). Nothing here
 * synchronizes the stream; nothing allocates except l8k_blas_*.
 *
 * Conventions: row-major everywhere; [rows, cols] shapes; "f32", "bf16"
 * (uint16_t bits), "fp8" (E4M3 codes, float8_e4m3fn, uint8_t). Per-token
 * activation scales and per-output-row weight scales are f32. All device
 * pointers. Token rows are independent: row t of an output depends only on
 * row t of its inputs (what lets the engine pad CUDA-graph batches). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum l8k_dtype { L8K_F32 = 0, L8K_BF16 = 1, L8K_FP8 = 2 };

/* ---- quantize.cu ------------------------------------------------------ */

/* Per-token FP8 quantization, the definition of l8_quantize_act_row():
 *   scale[t] = max(absmax(x[t]) / 448, 1 / (448 * 512))  (IEEE f32 division)
 *   q[t][i]  = E4M3(x[t][i] / scale[t])  nearest even, saturating.
 * x [T, K] f32 -> q [T, K] fp8, scale [T] f32. */
int l8k_quantize_rows(const float *x, uint32_t T, uint32_t K, uint8_t *q, float *scale,
                      cudaStream_t st);

/* Fused residual add + RMSNorm (+ quantize). For output row j (j < n_out),
 * source row r = rows ? rows[j] : j:
 *   if add: x[r] += add[r]               (written back: x is the residual)
 *   y = w * (x[r] * (1 / sqrt(mean(x[r]^2) + eps)))
 *   out_dt F32: out[j] = y (f32 [n_out, H]); BF16: bf16 [n_out, H];
 *   FP8: out[j] = codes of y as l8k_quantize_rows, out_scale[j] its scale.
 * x [*, H] f32, add [*, H] f32 or NULL, w [H] f32. */
int l8k_rmsnorm(float *x, const float *add, const float *w, float eps, uint32_t H,
                const int32_t *rows, uint32_t n_out, enum l8k_dtype out_dt, void *out,
                float *out_scale, cudaStream_t st);

/* MLP activation: h[t][i] = silu(gu[t][i]) * gu[t][I + i], silu(g) = g / (1 + exp(-g)).
 * gu [T, 2I] f32 or bf16 (gu_dt; gate then up, as the fused gate/up product
 * writes them); out as l8k_rmsnorm (F32, BF16, or FP8 codes + out_scale [T]). */
int l8k_silu_mul(const void *gu, enum l8k_dtype gu_dt, uint32_t T, uint32_t I,
                 enum l8k_dtype out_dt, void *out, float *out_scale, cudaStream_t st);

/* ---- embed.cu ---------------------------------------------------------- */

/* out[t] = table[ids[t]] as f32. table [vocab, H] BF16 or F32. ids out of
 * range give a row of NaN (the engine checks ids before; NaN makes a miss loud). */
int l8k_embed(const void *table, enum l8k_dtype table_dt, uint32_t vocab, uint32_t H,
              const int32_t *ids, uint32_t T, float *out, cudaStream_t st);

/* ---- gemv_fp8.cu: weight streaming for small M ------------------------- */

/* y[m][n] = scale_w[n] * scale_x[m] * sum_k x[m][k] * W[n][k]   (m < M, n < N)
 *   W [N, K]: FP8 codes (w_dt FP8, w_scale [N] required) or BF16/F32 dense
 *             (w_scale NULL);
 *   x [M, K]: F32, BF16, or FP8 codes (then x_scale [M] required; the
 *             product of the two E4M3 values is exact in f32);
 *   y [M, N] f32 (row stride ldy >= N).
 * Every weight byte is read once per 8 rows of x, 16 bytes per load; the
 * accumulation is f32. K % 16 == 0 and 16-byte aligned W and x rows. */
int l8k_gemv(const void *w, enum l8k_dtype w_dt, const float *w_scale,
             const void *x, enum l8k_dtype x_dt, const float *x_scale,
             uint32_t M, uint32_t N, uint32_t K, float *y, uint32_t ldy, cudaStream_t st);
/* The qkv product (FP8 weights [(nh + 2 nkv) D, K]; x FP8 with scales or
 * f32) ending in RoPE and the KV append: y and the pool end bitwise as
 * l8k_gemv then l8k_rope_kv leave them (the decode path: one kernel fewer). */
int l8k_gemv_qkv_rope(const uint8_t *w, const float *w_scale, const void *x,
                      enum l8k_dtype x_dt, const float *x_scale, uint32_t M, uint32_t K,
                      float *y, uint32_t ldy, const int32_t *pos, const float *inv_freq,
                      uint32_t nh, uint32_t nkv, uint32_t D, void *k_base, void *v_base,
                      enum l8k_dtype kv_dt, uint32_t page_size, const int32_t *slot_map,
                      cudaStream_t st);

/* ---- gemm.cu: cuBLASLt for large M ------------------------------------ */

enum l8k_fp8_path {
    L8K_FP8_NONE      = -1, /* no path computes this output correctly here */
    L8K_FP8_OUTER_VEC = 0,  /* FP8 tensor cores, per-token x per-channel scales in cuBLASLt */
    L8K_FP8_EPILOGUE  = 1,  /* FP8 tensor cores at unit scale, scales in our epilogue */
    L8K_FP8_BF16      = 2,  /* codes decoded to bf16 (exact), bf16 GEMM, our epilogue (sm_80) */
};

struct l8k_blas;
/* Creates the cuBLASLt handle and a workspace, then picks the FP8 path for
 * each output dtype (f32, bf16) by running each candidate on a small random
 * problem and comparing with l8k_gemv (so a mode the library accepts but
 * computes differently is never used). -ENOTSUP if none gives f32. */
int  l8k_blas_create(cudaStream_t st, struct l8k_blas **out);
void l8k_blas_destroy(struct l8k_blas *b);
/* The path l8k_gemm_fp8 takes for output y_dt (L8K_FP8_NONE: refused). */
enum l8k_fp8_path l8k_blas_fp8_path(const struct l8k_blas *b, enum l8k_dtype y_dt);
/* Force output y_dt's path (tests): -ENOTSUP when p failed that probe;
 * L8K_FP8_NONE refuses bf16 output (f32 always has a path). */
int  l8k_blas_set_fp8_path(struct l8k_blas *b, enum l8k_dtype y_dt, enum l8k_fp8_path p);
/* The probe's relative error for path p with output y_dt, F32 or BF16
 * (-1: the library refused it). */
double l8k_blas_probe_err(const struct l8k_blas *b, enum l8k_fp8_path p, enum l8k_dtype y_dt);
/* How many product shapes cuBLASLt refused on the path chosen for them
 * (each then ran on the next path whose probe passed; see l8k_gemm_fp8). */
uint32_t l8k_blas_refused(const struct l8k_blas *b);
/* Make l8k_gemm_fp8 of up to [M, N, K] allocation-free on every path (the
 * bf16 decode path's scratch), so it can be captured in a CUDA graph. A
 * scratch a capture has used is kept until l8k_blas_destroy when it grows. */
int  l8k_blas_reserve(struct l8k_blas *b, uint32_t M, uint32_t N, uint32_t K);

/* y [M, N] = x_scale[m] * w_scale[n] * (xq [M, K] . wq [N, K]^T), FP8 codes;
 * y_dt F32, or BF16 (nearest even; half the bytes to write and read back,
 * for a product whose output is large: prefill's gate/up; -ENOTSUP where
 * l8k_blas_fp8_path(b, L8K_BF16) is L8K_FP8_NONE).
 * K % 16 == 0, and 16-byte output rows (N % 4 in f32, N % 8 in bf16). A
 * shape the library refuses on the chosen path takes the next path whose
 * probe passed (counted by l8k_blas_refused); -EIO if all refuse it. The
 * BF16 path grows a scratch buffer (not graph-capturable on first use at a
 * new size: see l8k_blas_reserve). */
int l8k_gemm_fp8(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                 const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N, uint32_t K,
                 enum l8k_dtype y_dt, void *y, cudaStream_t st);
/* cuBLASLt's algorithm for a product is its heuristic's first unless
 * pinned. l8k_gemm_fp8_algos: how many candidates (at most 8) the heuristic
 * offers for l8k_gemm_fp8 with these arguments, best guess first;
 * l8k_gemm_fp8_pin: from now on the index-th of them for this shape, output
 * and operand alignment (0 restores the default; at most 32 shapes pinned,
 * then -ENOSPC; -ENOENT: fewer candidates). The engine times the candidates
 * and keeps the fastest. On the path l8k_gemm_fp8 takes for the shape, FP8
 * tensor-core paths only (-ENOTSUP on the bf16 decode path); nothing is
 * enqueued. */
int l8k_gemm_fp8_algos(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                       const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N, uint32_t K,
                       enum l8k_dtype y_dt, const void *y);
int l8k_gemm_fp8_pin(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                     const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N, uint32_t K,
                     enum l8k_dtype y_dt, const void *y, uint32_t index);
/* y [M, N] f32 = x [M, K] bf16 . w [N, K]^T bf16, f32 accumulation. K % 8 == 0. */
int l8k_gemm_bf16(struct l8k_blas *b, const uint16_t *w, const uint16_t *x, uint32_t M,
                  uint32_t N, uint32_t K, float *y, cudaStream_t st);

/* ---- rope.cu ------------------------------------------------------------ */

/* RoPE (rotate_half convention) and KV append, for T tokens.
 * qkv [T, ldq] f32: q heads at cols [0, nh*D), k at [nh*D, (nh+nkv)*D),
 * v at [(nh+nkv)*D, (nh+2nkv)*D); D even, <= 512. q and k are rotated in
 * place by angle pos[t] * inv_freq[i] (angle and its sine/cosine in f64);
 * then k and v of token t go to the pool at slot_map[t] = page * page_size + slot
 * (slot_map[t] < 0: not stored, a padding row).
 * k_base: this layer's K pool [n_pages][nkv][page_size][D] of kv_dt (F32 or
 * BF16); v_base: the same for V. */
int l8k_rope_kv(float *qkv, uint32_t ldq, const int32_t *pos, const float *inv_freq,
                uint32_t T, uint32_t nh, uint32_t nkv, uint32_t D,
                void *k_base, void *v_base, enum l8k_dtype kv_dt, uint32_t page_size,
                const int32_t *slot_map, cudaStream_t st);

/* ---- attention.cu ------------------------------------------------------- */

/* Paged causal attention for R query rows (decode rows, or the tokens of
 * prefill chunks: each row is one token).
 *   q [*, ldq] f32, heads at cols [h*D, (h+1)*D), already rotated;
 *   rows: the rows to compute, rows[i] for i < R (NULL: rows 0 .. R-1);
 *   row r attends to positions [0, kv_len[r]) of sequence row_seq[r], whose
 *   pages are page_table[row_seq[r] * pt_stride + p / page_size];
 *   query head h reads KV head h / (nh / nkv) (one block serves all the
 *   query heads of a KV head, so each K/V element is loaded once for them);
 *   out [*, ldo] f32, head h at cols [h*D, (h+1)*D).
 * Rows with kv_len 0 write zeros. Sequences longer than a split's span are
 * split across blocks (flash-decoding) and combined. With R <=
 * L8K_ATTN_ROW_PLANS each row is split as it would be alone, from its own
 * kv_len: its output is bitwise the same whatever R, the other rows and
 * max_kv_len (what lets a verification row stand for a decode step); more
 * rows share one plan chosen from R and max_kv_len. max_kv_len must bound
 * every kv_len[r] (checked on the device: rows beyond it are truncated,
 * never read out of bounds). work holds l8k_attention_work_floats()
 * floats. D in {64, 128}; nh/nkv <= 8. */
#define L8K_ATTN_ROW_PLANS 16u
size_t l8k_attention_work_floats(uint32_t R, uint32_t nh, uint32_t D, uint32_t max_kv_len);
int l8k_attention(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                  enum l8k_dtype kv_dt, uint32_t page_size, const int32_t *page_table,
                  uint32_t pt_stride, const int32_t *row_seq, const int32_t *kv_len,
                  const int32_t *rows, uint32_t R, uint32_t nh, uint32_t nkv, uint32_t D,
                  float softmax_scale, uint32_t max_kv_len, float *work, float *out,
                  uint32_t ldo, cudaStream_t st);

/* The tiles of one prefill chunk for l8k_attention_prefill: rows row0 ..
 * row0 + n_tok - 1 are the tokens at positions pos0 .. of sequence seq.
 * Writes them at tiles (4 int32 each; NULL: only counts) and returns how
 * many there are (64 / (nh / nkv) tokens a tile); 0 for a head layout the
 * tile kernel does not take. */
uint32_t l8k_attention_tiles(uint32_t nh, uint32_t nkv, uint32_t row0, uint32_t n_tok,
                             uint32_t pos0, uint32_t seq, int32_t *tiles);

/* Causal attention for prefill chunks on the tensor cores, bf16 K/V pools
 * only (flash-attention: each K/V element read serves a tile of tokens and
 * their query heads; q and the softmax weights are rounded to bf16 for the
 * products, accumulation is f32). Tile i is tiles[4i .. 4i+3] = {row0,
 * n_tok, pos0, seq}: rows row0 .. row0 + n_tok - 1 are the tokens at
 * positions pos0 .. pos0 + n_tok - 1 of sequence seq, and each attends to
 * positions [0, its own] (as l8k_attention_tiles writes them). Shapes,
 * page table, max_kv_len (bounds every pos0 + n_tok, checked on the device)
 * and work as l8k_attention; ldq and ldo even. */
int l8k_attention_prefill(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                          uint32_t page_size, const int32_t *page_table, uint32_t pt_stride,
                          const int32_t *tiles, uint32_t n_tiles, uint32_t nh, uint32_t nkv,
                          uint32_t D, float softmax_scale, uint32_t max_kv_len, float *work,
                          float *out, uint32_t ldo, cudaStream_t st);

/* ---- sample.cu ----------------------------------------------------------- */

/* One sequence's sampling request (plain data, same layout in C and CUDA). */
struct l8k_sample_req {
    float temperature;      /* <= 0: greedy */
    uint32_t top_k;         /* 0 = off */
    float top_p;            /* 1 = off */
    float min_p;            /* 0 = off */
    float rep_penalty;      /* 1 = off */
    float u;                /* l8_philox_uniform(seed, index), in [0, 1) */
    int32_t logits_row;     /* row of logits to sample from */
    int32_t hist_off;       /* history ids at history[hist_off, hist_off + n_hist) */
    int32_t n_hist;
    int32_t mask_row;       /* -1: every id; else the allowed ids are the bits of
                               masks[mask_row * (V + 31) / 32 ...] (sampler.h 1b) */
};

/* The definition of sampler.h, one block per request: repetition penalty
 * (from the original logits, so repeated ids are penalized once), the mask
 * (ids outside it at -inf), logprob of the chosen id under the resulting
 * log-softmax, greedy argmax (lowest id on ties), or temperature / top-k /
 * top-p / min-p selection by radix select on (logit descending, id
 * ascending) keys and the pick by u. logits [*, V] f32 (unchanged); masks
 * [*, (V + 31) / 32] (may be NULL when no request has one); scratch [S, V]
 * f32; tok [S]; logprob [S]. A request whose logits row holds a NaN or an
 * infinity gets tok L8K_SAMPLE_NONFINITE: the flag comes back with the
 * tokens, in the same copy, and costs one test per logit the kernel reads
 * anyway. */
#define L8K_SAMPLE_NONFINITE (-1)
int l8k_sample(const float *logits, uint32_t V, const struct l8k_sample_req *req, uint32_t S,
               const int32_t *history, const uint32_t *masks, float *scratch, int32_t *tok,
               float *logprob, cudaStream_t st);

/* Philox4x32-10 uniform on the device, for checking against the CPU's
 * l8_philox_uniform(): out[i] = uniform(seed, index0 + i). */
int l8k_philox_uniform(uint64_t seed, uint64_t index0, uint32_t n, float *out, cudaStream_t st);

/* ---- misc ----------------------------------------------------------------- */

/* Multiprocessor count of the current device (cached per process). */
int l8k_sm_count(void);

/* Whether the kernels of a decode step are launched with programmatic
 * dependent launch (each is scheduled while the one before runs; the GEMV
 * streams its first weights before it waits): a device of compute
 * capability 9 or more (looked up once per process), unless l8k_set_pdl
 * turned it off. */
bool l8k_pdl_enabled(void);
/* Allow (the default) or forbid programmatic dependent launch for every
 * launch from now on, in the whole process: the engine sets it at creation
 * (its no_pdl, the benchmark's baseline). */
void l8k_set_pdl(bool allowed);

/* One line that names the device and the software that decide how fast a
 * product runs: its name, compute capability, SM count, memory, the
 * driver's, the CUDA runtime's and cuBLASLt's versions. 0 or a negative
 * errno. */
int l8k_device_key(char *buf, size_t n);

/* ---- checksum.cu ----------------------------------------------------------- */

/* acc[0] += the checksum of p[0, n) (device memory), mod 2^64: the sum over
 * its 8-byte little-endian words w_i (the last one zero-padded) of
 * (w_i XOR i * L8K_CHECKSUM_K). One changed byte always changes it; bytes
 * at the wrong offset almost always do. acc: device, 8-byte aligned. */
#define L8K_CHECKSUM_K 0x9E3779B97F4A7C15ull
int l8k_checksum(const void *p, size_t n, uint64_t *acc, cudaStream_t st);

/* ---- profile.cu ------------------------------------------------------------ */

/* One thread that keeps st busy for us microseconds (the step profile queues
 * a step behind it, so the step's kernels then run back to back). */
int l8k_hold_stream(uint32_t us, cudaStream_t st);

#ifdef __cplusplus
}
#endif
