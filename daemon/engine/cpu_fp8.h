/* cpu_fp8.h - the fp8 numerics' products: E4M3 weights times per-token
 * E4M3 activations as BF16 dot products with f32 accumulation.
 *
 * Every E4M3 value is exact in BF16 and the product of two is exact in
 * f32, so an output depends only on the order of its f32 additions. That
 * order is one definition, the one vdpbf16ps gives, and every kernel
 * keeps it (so they agree bitwise, whatever the token count, the thread
 * count or the processor):
 *   - the input width is padded with zeros to nb = ceil(in / 64) blocks;
 *   - 16 f32 lanes start at +0; for block b, half h (0 then 1), lane j:
 *       e = 64b + 16(j / 4) + 8h + 2(j % 4)
 *       acc[j] = (acc[j] + w[e+1] x[e+1]) + w[e] x[e];
 *   - r = the lane tree s8[j] = acc[j] + acc[j+8], s4 = s8[j] + s8[j+4],
 *     s2 = s4[j] + s4[j+2], r = s2[0] + s2[1];
 *   - y = (r * weight_scale) * token_scale, a NaN as the quiet NaN.
 * No intermediate is ever subnormal (all are multiples of 2^-18), so the
 * instruction's flush-to-zero never applies.
 *
 * Kernels, chosen at run time (l8_fp8_best):
 *   L8_FP8_AVX512_DP  vdpbf16ps, weights decoded in registers by two
 *                 128-entry byte tables (vpermi2b), up to 4 tokens at a time
 *                 (more: over blocks of rows kept in L2): AVX-512 BF16 and
 *                 VBMI where vdpbf16ps runs at the rate of FMA (AMD Zen 4);
 *   L8_FP8_AVX512 the same up to 4 tokens; beyond, f32 FMA (the tiled
 *                 format, see cpu_fp8.c), where vdpbf16ps does half the
 *                 multiply-adds of FMA (Intel);
 *   L8_FP8_VEC    f32 vectors (the AVX2 and the baseline x86-64 clones, or
 *                 any GCC target), the same additions one by one.
 * Activations are packed for the kernel (l8_fp8_pack), in the lane order
 * above, so the weights stream straight from the checkpoint. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum l8_fp8_kernel { L8_FP8_VEC = 0, L8_FP8_AVX512 = 1, L8_FP8_AVX512_DP = 2 };

/* The fastest kernel this processor (and OS) runs. */
enum l8_fp8_kernel l8_fp8_best(void);
const char *l8_fp8_kernel_name(enum l8_fp8_kernel k);

/* The AVX-512 kernel's decode tables (low and high byte of the BF16 value
 * of each 7-bit magnitude code). */
struct l8_fp8_tables { uint8_t lo[128], hi[128]; uint16_t bf16[128]; };
void l8_fp8_tables_init(struct l8_fp8_tables *t);

/* Bytes one token's packed activations take for an input width n (in
 * either format, so T tokens take T times this). */
size_t l8_fp8_packed_bytes(enum l8_fp8_kernel k, size_t n);

/* Whether T tokens (all of a product's, not one group's) are packed in the
 * tiled format for kernel k: AVX-512 beyond a few tokens. */
bool l8_fp8_tiled(enum l8_fp8_kernel k, uint32_t T);
#define L8_FP8_TILE_T 64u   /* tokens per group of the tiled format */

/* l8_quantize_act_row (model/numerics.h), bitwise, in kernel k's vectors. */
float l8_fp8_quantize_row(enum l8_fp8_kernel k, const float *x, size_t n, uint8_t *q);

/* Packs n E4M3 codes of one token for kernel k (zero padded), one token
 * per l8_fp8_packed_bytes. */
void l8_fp8_pack(enum l8_fp8_kernel k, const struct l8_fp8_tables *t, const uint8_t *codes,
                 size_t n, void *packed);
/* Packs token t of T into the tiled format: groups of L8_FP8_TILE_T tokens
 * (the last one shorter) at token offsets 64g, each [lane element][token]
 * f32. */
void l8_fp8_pack_tiled(const uint8_t *codes, size_t n, uint32_t t, uint32_t T, void *packed);

/* Scratch bytes per weight row for the tiled path and for VEC. */
size_t l8_fp8_panel_row_bytes(enum l8_fp8_kernel k, size_t in);

/* y[t][col0 + r] = the definition above, for `rows` rows of E4M3 codes w
 * (row stride in), their scales, and T packed tokens: per token (xp,
 * stride ld bytes; T <= 4 for AVX-512) or, tiled, from the start of a
 * group (a multiple of L8_FP8_TILE_T tokens into the packing); scales xs. scratch: rows * l8_fp8_panel_row_bytes
 * (unused by the fused AVX-512 path), 64-byte aligned. */
void l8_fp8_block(enum l8_fp8_kernel k, const struct l8_fp8_tables *t, const uint8_t *w,
                  uint32_t rows, uint32_t in, const float *scale, const void *xp, size_t ld,
                  bool tiled, const float *xs, uint32_t T, float *const *out_rows, size_t col0,
                  void *scratch);
