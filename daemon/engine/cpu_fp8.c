/* cpu_fp8.c - the fp8 numerics' products (see cpu_fp8.h for the order of
 * operations every kernel keeps).
 *
 * AVX-512: vpermi2b looks the 7 magnitude bits of 64 codes up in two
 * 128-byte tables (the BF16 value's low and high byte), vpternlogd adds
 * the sign, and the byte unpacks pair them into BF16 words. The words of
 * 64 codes come out as two vectors, A (codes 16q + 0..7 of each 128-bit
 * lane q) and B (16q + 8..15): that is where the lane order of the
 * definition comes from, and activations are packed the same way, so each
 * weight is loaded once, decoded in 6 instructions per 64 and multiplied
 * by vdpbf16ps, for up to L8_FP8_FUSED_MAX_T tokens (decode). With more
 * tokens (prefill, large batches) L8_FP8_AVX512_DP does the same for each
 * group of 4 over blocks of rows that stay in L2 (z_blocked).
 *
 * L8_FP8_AVX512 with more tokens: on Intel vdpbf16ps runs at half the
 * multiply-add rate of f32 FMA (Emerald Rapids: 1.3 G/s against 5.5 G/s
 * per core, 32 and 16 products each; Zen 4: 3.4 and 3.6 G/s, so there
 * vdpbf16ps does twice the products), and every product of two E4M3
 * values is exact in f32, so fma(x, w, acc) is the definition's add.
 * Each of the 16 lanes of the definition is a separate sum over its own
 * quarter of the block, so the product is 16 small GEMMs, one per lane,
 * over that lane's elements, written as an ordinary register-tiled GEMM:
 * the activations are packed per 64-token group as [lane element][token]
 * f32 (l8_fp8_pack_tiled), the weights decoded once per block of rows into
 * f32 in their own order, broadcast one at a time against 16 tokens. The
 * lane tree then runs on the 16 partial sums of each output.
 *
 * VEC: the same additions in f32 vectors, with the weights decoded by
 * the exponent-rebias trick (cpu_ops.c) into the packed lane order. */
#include "cpu_fp8.h"

#include <math.h>
#include <string.h>
#include "../model/numerics.h"

#define L8_FP8_FUSED_MAX_T 4u
#define BLOCK 64u                   /* codes per block */
#define TILE_T L8_FP8_TILE_T

/* Not under ThreadSanitizer: see cpu_ops.c. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define L8_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define L8_MULTIVERSION
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX512_KERNEL 1
#include <immintrin.h>
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#endif

#define INLINE static inline __attribute__((always_inline))

/* ---- the definition's shared parts ------------------------------------------ */

/* Code index of packed position p (0..63) of a block for VEC:
 * [A lanes 0-7 odd, even][A 8-15 odd, even][B 0-7 ...][B 8-15 ...].
 * (AVX-512's order is zdec's: word p of [A 32][B 32].) */
static uint32_t vec_pos_code(uint32_t p)
{
    const uint32_t g = p / 16, h = g / 2, j = 8 * (g % 2) + p % 8;
    const uint32_t odd = (p / 8) % 2 == 0;
    return 16 * (j / 4) + 8 * h + 2 * (j % 4) + odd;
}

/* The lane tree, the scales, NaN made one NaN. */
INLINE float finish(const float a[16], float ws, float xs)
{
    float s8[8], s4[4];
    for (int j = 0; j < 8; j++)
        s8[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        s4[j] = s8[j] + s8[j + 4];
    const float r = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    const float v = (r * ws) * xs;
    return isnan(v) ? NAN : v;
}

void l8_fp8_tables_init(struct l8_fp8_tables *t)
{
    for (int c = 0; c < 128; c++) {
        const uint16_t b = l8_f32_to_bf16(l8_e4m3_lut[c]);   /* exact (NaN stays NaN) */
        t->lo[c] = (uint8_t)b;
        t->hi[c] = (uint8_t)(b >> 8);
        t->bf16[c] = b;
    }
}

const char *l8_fp8_kernel_name(enum l8_fp8_kernel k)
{
    return k == L8_FP8_AVX512_DP ? "avx512-bf16" : k == L8_FP8_AVX512 ? "avx512-bf16+fma"
                                                                       : "f32-vector";
}

enum l8_fp8_kernel l8_fp8_best(void)
{
#ifdef HAVE_AVX512_KERNEL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512bf16"))
        return __builtin_cpu_is("amd") ? L8_FP8_AVX512_DP : L8_FP8_AVX512;
#endif
    return L8_FP8_VEC;
}

/* f32 per element in both formats (BF16 words of the fused one use half). */
size_t l8_fp8_packed_bytes(enum l8_fp8_kernel k, size_t n)
{
    (void)k;
    return (n + BLOCK - 1) / BLOCK * BLOCK * 4;
}

/* The tiled path's scratch per row: its decoded weights and 16 lanes of
 * partial sums for up to 64 tokens. */
size_t l8_fp8_panel_row_bytes(enum l8_fp8_kernel k, size_t in)
{
    return l8_fp8_packed_bytes(k, in) + (k == L8_FP8_AVX512 ? 16 * TILE_T * 4 : 0);
}

bool l8_fp8_tiled(enum l8_fp8_kernel k, uint32_t T)
{
    return k == L8_FP8_AVX512 && T > L8_FP8_FUSED_MAX_T;
}

/* Element e of a lane's sequence (s = 4b + q) is code 64b + lane_code[j] +
 * step_code[q]: odd before even, half 0 before half 1. */
static const uint8_t lane_code[16] = { 0, 2, 4, 6, 16, 18, 20, 22, 32, 34, 36, 38, 48, 50, 52, 54 };
static const uint8_t step_code[4] = { 1, 0, 9, 8 };

void l8_fp8_pack_tiled(const uint8_t *codes, size_t n, uint32_t t, uint32_t T, void *packed)
{
    const size_t nb = (n + BLOCK - 1) / BLOCK, kl = 4 * nb;
    const uint32_t g = t / TILE_T, u = t % TILE_T;
    const uint32_t nt = T - g * TILE_T < TILE_T ? T - g * TILE_T : TILE_T;
    float *base = (float *)((char *)packed + (size_t)g * TILE_T * l8_fp8_packed_bytes(L8_FP8_AVX512, n));
    for (uint32_t j = 0; j < 16; j++)
        for (size_t b = 0; b < nb; b++)
            for (uint32_t q = 0; q < 4; q++) {
                const size_t c = b * BLOCK + lane_code[j] + step_code[q];
                base[(j * kl + 4 * b + q) * nt + u] = c < n ? l8_e4m3_lut[codes[c]] : 0.0f;
            }
}

/* Whether any of n codes is a NaN (0x7f or 0xff). */
static bool has_nan_code(const uint8_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((w[i] & 0x7f) == 0x7f)
            return true;
    return false;
}

#ifdef HAVE_AVX512_KERNEL
static void z_pack(const struct l8_fp8_tables *t, const uint8_t *codes, size_t n, void *packed);
#endif

void l8_fp8_pack(enum l8_fp8_kernel k, const struct l8_fp8_tables *t, const uint8_t *codes,
                 size_t n, void *packed)
{
#ifdef HAVE_AVX512_KERNEL
    if (k != L8_FP8_VEC) {
        z_pack(t, codes, n, packed);
        return;
    }
#endif
    (void)k;
    (void)t;
    uint32_t map[BLOCK];
    for (uint32_t p = 0; p < BLOCK; p++)
        map[p] = vec_pos_code(p);
    for (size_t b = 0; b < (n + BLOCK - 1) / BLOCK; b++)
        for (uint32_t p = 0; p < BLOCK; p++) {
            const size_t i = b * BLOCK + map[p];
            ((float *)packed)[b * BLOCK + p] = l8_e4m3_lut[i < n ? codes[i] : 0];
        }
}

/* ---- VEC ---------------------------------------------------------------------- */

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i32 __attribute__((vector_size(32)));
typedef uint8_t v32u8 __attribute__((vector_size(32)));

INLINE v8f load8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Lane l of a group takes code 16(l/4) + 8h + 2(l%4) + odd of a 32-byte
 * load into all its bytes (in-lane: one vpshufb with AVX2). */
#define SEL4(x) x, x, x, x
#define SEL(h, o) { SEL4(8*(h)+0+(o)), SEL4(8*(h)+2+(o)), SEL4(8*(h)+4+(o)), SEL4(8*(h)+6+(o)), \
                    SEL4(16+8*(h)+0+(o)), SEL4(16+8*(h)+2+(o)), SEL4(16+8*(h)+4+(o)), \
                    SEL4(16+8*(h)+6+(o)) }

/* E4M3 to f32: the magnitude to f32 bits 20..26, the sign to bit 31, then
 * an exact multiply by 2^120 (cpu_ops.c). NaN codes give +-480 here; the
 * caller makes such rows NaN. */
INLINE v8f vdec(v32u8 c, v32u8 sel)
{
    v8i32 s = (v8i32)__builtin_shuffle(c, sel);
    s = (s >> 4) & (int32_t)0x87F00000u;
    return (v8f)s * 0x1p120f;
}

/* One row of codes into the VEC packed order (nb blocks of 64 f32). */
INLINE void vec_decode_row(const uint8_t *w, uint32_t in, float *o)
{
    static const v32u8 s00 = SEL(0, 0), s01 = SEL(0, 1), s10 = SEL(1, 0), s11 = SEL(1, 1);
    for (uint32_t b0 = 0; b0 < in; b0 += BLOCK, o += BLOCK) {
        const uint8_t *src = w + b0;
        uint8_t tail[BLOCK];
        if (in - b0 < BLOCK) {
            memset(tail, 0, sizeof(tail));
            memcpy(tail, src, in - b0);
            src = tail;
        }
        v32u8 L, H;
        memcpy(&L, src, 32);
        memcpy(&H, src + 32, 32);
        const v8f f[8] = { vdec(L, s01), vdec(L, s00), vdec(H, s01), vdec(H, s00),
                           vdec(L, s11), vdec(L, s10), vdec(H, s11), vdec(H, s10) };
        memcpy(o, f, sizeof(f));
    }
}

/* r[i][t] lanes for nr (1, 2) packed weight rows and nt (1, 2) tokens:
 * lanes 0-7 take groups 0, 1, 4, 5 of a block, lanes 8-15 groups 2, 3, 6, 7. */
INLINE void vec_tile(const float *w0, const float *w1, int nr, const float *x0,
                     const float *x1, int nt, size_t nb, float r[2][2][16])
{
    v8f lo[2][2] = { { { 0 } } }, hi[2][2] = { { { 0 } } };
    const float *w[2] = { w0, w1 }, *x[2] = { x0, x1 };
    for (size_t b = 0; b < nb * BLOCK; b += BLOCK) {
#pragma GCC unroll 2
        for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
            for (int t = 0; t < nt; t++) {
                const float *wb = w[i] + b, *xb = x[t] + b;
                lo[i][t] += load8(wb) * load8(xb);
                lo[i][t] += load8(wb + 8) * load8(xb + 8);
                hi[i][t] += load8(wb + 16) * load8(xb + 16);
                hi[i][t] += load8(wb + 24) * load8(xb + 24);
                lo[i][t] += load8(wb + 32) * load8(xb + 32);
                lo[i][t] += load8(wb + 40) * load8(xb + 40);
                hi[i][t] += load8(wb + 48) * load8(xb + 48);
                hi[i][t] += load8(wb + 56) * load8(xb + 56);
            }
    }
    for (int i = 0; i < nr; i++)
        for (int t = 0; t < nt; t++) {
            memcpy(r[i][t], &lo[i][t], sizeof(v8f));
            memcpy(r[i][t] + 8, &hi[i][t], sizeof(v8f));
        }
}

L8_MULTIVERSION
static void vec_block(const uint8_t *w, uint32_t rows, uint32_t in, const float *scale,
                      const void *xp, size_t ld, const float *xs, uint32_t T,
                      float *const *out, size_t col0, void *scratch)
{
    const size_t nb = (in + BLOCK - 1) / BLOCK, pl = nb * BLOCK;
    float *panel = scratch;
    for (uint32_t r = 0; r < rows; r++)
        vec_decode_row(w + (size_t)r * in, in, panel + r * pl);
    float acc[2][2][16];
    for (uint32_t r = 0; r < rows; r += 2) {
        const int nr = r + 1 < rows ? 2 : 1;
        const bool nan[2] = { has_nan_code(w + (size_t)r * in, in),
                              nr > 1 && has_nan_code(w + (size_t)(r + 1) * in, in) };
        const float *w0 = panel + r * pl, *w1 = w0 + (nr > 1 ? pl : 0);
        for (uint32_t t = 0; t < T; t += 2) {
            const int nt = t + 1 < T ? 2 : 1;
            const float *x0 = (const float *)((const char *)xp + t * ld);
            const float *x1 = nt > 1 ? (const float *)((const char *)x0 + ld) : x0;
            if (nr == 2 && nt == 2)
                vec_tile(w0, w1, 2, x0, x1, 2, nb, acc);
            else if (nr == 2)
                vec_tile(w0, w1, 2, x0, x0, 1, nb, acc);
            else if (nt == 2)
                vec_tile(w0, w0, 1, x0, x1, 2, nb, acc);
            else
                vec_tile(w0, w0, 1, x0, x0, 1, nb, acc);
            for (int i = 0; i < nr; i++)
                for (int u = 0; u < nt; u++)
                    out[t + u][col0 + r + i] =
                        nan[i] ? NAN : finish(acc[i][u], scale[r + i], xs[t + u]);
        }
    }
}

/* ---- AVX-512 BF16 -------------------------------------------------------------- */

#ifdef HAVE_AVX512_KERNEL
struct ztabs { __m512i lo0, lo1, hi0, hi1, sign; };

AVX512_TARGET INLINE struct ztabs ztabs_load(const struct l8_fp8_tables *t)
{
    return (struct ztabs){ _mm512_loadu_si512(t->lo), _mm512_loadu_si512(t->lo + 64),
                           _mm512_loadu_si512(t->hi), _mm512_loadu_si512(t->hi + 64),
                           _mm512_set1_epi8((char)0x80) };
}

/* 64 codes to their BF16 words: A (codes 16q + 0..7 per lane q), B (+8..15). */
AVX512_TARGET INLINE void zdec(const struct ztabs *z, __m512i c, __m512i *A, __m512i *B)
{
    const __m512i lo = _mm512_permutex2var_epi8(z->lo0, c, z->lo1);
    __m512i hi = _mm512_permutex2var_epi8(z->hi0, c, z->hi1);
    hi = _mm512_ternarylogic_epi32(hi, c, z->sign, 0xF8);        /* hi | (c & 0x80) */
    *A = _mm512_unpacklo_epi8(lo, hi);
    *B = _mm512_unpackhi_epi8(lo, hi);
}

/* The codes of block b of a row (bytes past `in` read as code 0). */
AVX512_TARGET INLINE __m512i zcodes(const uint8_t *row, size_t b, uint32_t in)
{
    const size_t o = b * BLOCK;
    if (in - o >= BLOCK)
        return _mm512_loadu_si512(row + o);
    return _mm512_maskz_loadu_epi8(((__mmask64)1 << (in - o)) - 1, row + o);
}

AVX512_TARGET INLINE __m512 zdp(__m512 acc, __m512i a, __m512i b)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

AVX512_TARGET INLINE void zstore(float *o, __m512 v)
{
    _mm512_storeu_ps(o, v);
}

/* nr weight rows of codes (stride in) x nt packed tokens, decoded in
 * registers; the next tile's rows are prefetched a block at a time, into L2
 * (into L1 it halved the DRAM stream on Zen 4: 11 against 21 GB/s). */
AVX512_TARGET INLINE void ztile_codes(const struct ztabs *z, const uint8_t *w, uint32_t in,
                                      int nr, const uint8_t *next, const uint8_t *xp,
                                      size_t ld, int nt, float r[4][4][16])
{
    const size_t nb = (in + BLOCK - 1) / BLOCK;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m512i A[4], B[4];
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            if (next)
                _mm_prefetch((const char *)next + (size_t)i * in + b * BLOCK, _MM_HINT_T1);
            zdec(z, zcodes(w + (size_t)i * in, b, in), &A[i], &B[i]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint8_t *xt = xp + t * ld + b * 2 * BLOCK;
            const __m512i xa = _mm512_loadu_si512(xt), xb = _mm512_loadu_si512(xt + 64);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++)
                acc[i][t] = zdp(acc[i][t], A[i], xa);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++)
                acc[i][t] = zdp(acc[i][t], B[i], xb);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            zstore(r[i][t], acc[i][t]);
}

/* Up to L8_FP8_FUSED_MAX_T tokens, weights decoded in registers, tiles of
 * NR rows (4 or 2) where as many are left. */
AVX512_TARGET
static void z_fused(const struct l8_fp8_tables *tab, const uint8_t *w, uint32_t rows,
                    uint32_t in, const float *scale, const uint8_t *xp, size_t ld,
                    const float *xs, uint32_t T, float *const *out, size_t col0, uint32_t NR)
{
    const struct ztabs z = ztabs_load(tab);
    float acc[4][4][16];
    for (uint32_t r = 0; r < rows; ) {
        const uint32_t nr = rows - r >= NR ? NR : 1;
        const uint8_t *w0 = w + (size_t)r * in;
        const uint8_t *next = r + 2 * nr <= rows ? w0 + (size_t)nr * in : NULL;
        switch (nr * 8 + T) {
        case 4 * 8 + 1: ztile_codes(&z, w0, in, 4, next, xp, ld, 1, acc); break;
        case 4 * 8 + 2: ztile_codes(&z, w0, in, 4, next, xp, ld, 2, acc); break;
        case 4 * 8 + 3: ztile_codes(&z, w0, in, 4, next, xp, ld, 3, acc); break;
        case 4 * 8 + 4: ztile_codes(&z, w0, in, 4, next, xp, ld, 4, acc); break;
        case 2 * 8 + 2: ztile_codes(&z, w0, in, 2, next, xp, ld, 2, acc); break;
        case 2 * 8 + 3: ztile_codes(&z, w0, in, 2, next, xp, ld, 3, acc); break;
        case 2 * 8 + 4: ztile_codes(&z, w0, in, 2, next, xp, ld, 4, acc); break;
        case 1 * 8 + 1: ztile_codes(&z, w0, in, 1, next, xp, ld, 1, acc); break;
        case 1 * 8 + 2: ztile_codes(&z, w0, in, 1, next, xp, ld, 2, acc); break;
        case 1 * 8 + 3: ztile_codes(&z, w0, in, 1, next, xp, ld, 3, acc); break;
        default:        ztile_codes(&z, w0, in, 1, next, xp, ld, 4, acc); break;
        }
        for (uint32_t i = 0; i < nr; i++)
            for (uint32_t t = 0; t < T; t++)
                out[t][col0 + r + i] = finish(acc[i][t], scale[r + i], xs[t]);
        r += nr;
    }
}

/* Bytes of weight rows z_blocked keeps in L2 while every group of tokens
 * passes over them. */
#define DP_BLOCK_BYTES (128u * 1024u)

/* More tokens with vdpbf16ps (L8_FP8_AVX512_DP): z_fused over groups of 4
 * tokens, the rows in blocks of DP_BLOCK_BYTES. */
AVX512_TARGET
static void z_blocked(const struct l8_fp8_tables *tab, const uint8_t *w, uint32_t rows,
                      uint32_t in, const float *scale, const uint8_t *xp, size_t ld,
                      const float *xs, uint32_t T, float *const *out, size_t col0)
{
    uint32_t R = (DP_BLOCK_BYTES / (in ? in : 1)) & ~3u;
    if (R < 4)
        R = 4;
    for (uint32_t r0 = 0; r0 < rows; r0 += R) {
        const uint32_t n = rows - r0 < R ? rows - r0 : R;
        for (uint32_t t0 = 0; t0 < T; t0 += L8_FP8_FUSED_MAX_T)
            z_fused(tab, w + (size_t)r0 * in, n, in, scale + r0, xp + (size_t)t0 * ld, ld,
                    xs + t0, T - t0 < L8_FP8_FUSED_MAX_T ? T - t0 : L8_FP8_FUSED_MAX_T,
                    out + t0, col0 + r0, 4);
    }
}

/* One row of codes to f32 in code order, zero padded to nb blocks of 64
 * floats, block b at o + b * bstride. */
AVX512_TARGET INLINE void zt_decode_row(const struct l8_fp8_tables *tab, const uint8_t *w,
                                        uint32_t in, size_t nb, float *o, size_t bstride)
{
    const __m512i t0 = _mm512_loadu_si512(tab->bf16), t1 = _mm512_loadu_si512(tab->bf16 + 32);
    const __m512i t2 = _mm512_loadu_si512(tab->bf16 + 64), t3 = _mm512_loadu_si512(tab->bf16 + 96);
    for (size_t c0 = 0; c0 < nb * BLOCK; c0 += 32) {
        __m256i cb;
        if (c0 + 32 <= in)
            cb = _mm256_loadu_si256((const __m256i *)(w + c0));
        else
            cb = _mm256_maskz_loadu_epi8(c0 >= in ? 0 : ((__mmask32)1 << (in - c0)) - 1, w + c0);
        const __m512i c = _mm512_cvtepu8_epi16(cb);
        const __m512i lo = _mm512_permutex2var_epi16(t0, c, t1);   /* index bits 0-5 */
        const __m512i hi = _mm512_permutex2var_epi16(t2, c, t3);
        __m512i b = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, _mm512_set1_epi16(64)), lo, hi);
        b = _mm512_or_si512(b, _mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x80)), 8));
        const __m512i f0 = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b)), 16);
        const __m512i f1 = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b, 1)), 16);
        float *ob = o + (c0 >> 6) * bstride + (c0 & (BLOCK - 1));
        _mm512_store_si512(ob, f0);
        _mm512_store_si512(ob + 16, f1);
    }
}

/* Lane j's partial sums for MR rows x NV vectors of 16 tokens. The panel
 * holds each block of the MR rows together (row r of block b at p + (b *
 * MR + r) * 64, blocks bstride floats apart), so every weight broadcast is
 * one pointer plus a constant; xj is the lane's [4nb][nt] slice, mask the
 * last vector's tokens. */
AVX512_TARGET INLINE void zt_micro(const float *p, size_t bstride, int MR, const float *xj,
                                   uint32_t nt, int NV, __mmask16 mask, size_t nb, uint32_t j,
                                   float *lanes, size_t lstride)
{
    __m512 acc[12][4];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm512_setzero_ps();
    const float *pj = p + lane_code[j];
    for (size_t b = 0; b < nb; b++, pj += bstride) {
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++, xj += nt) {
            __m512 x[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                x[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(mask, xj + 16 * v)
                                   : _mm512_loadu_ps(xj + 16 * v);
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++) {
                const __m512 wv = _mm512_set1_ps(pj[r * BLOCK + step_code[q]]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    acc[r][v] = _mm512_fmadd_ps(x[v], wv, acc[r][v]);
            }
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_store_ps(lanes + (size_t)r * lstride + 16 * v, acc[r][v]);
}

#define ZT_MICRO(MR, NV) \
    zt_micro(p, bs, MR, xj, nt, NV, mask, nb, j, lanes + (r0 + r) * lstride + j * ljstride, \
             lstride)

/* The lane GEMMs and the lane tree for one group of nt <= TILE_T tokens
 * (xg, in the tiled format) against the decoded panel (groups of MR rows). */
AVX512_TARGET
static void zt_group(const float *panel, uint32_t rows, uint32_t MR, size_t nb,
                     const float *scale, const float *xg, const float *xs, uint32_t nt,
                     float *const *out, size_t col0, float *lanes)
{
    const size_t pl = nb * BLOCK, kl = 4 * nb;
    const int NV = (int)((nt + 15) / 16);
    const __mmask16 mask = (__mmask16)(nt % 16 ? (1u << (nt % 16)) - 1 : 0xffffu);
    const size_t ljstride = 16u * NV, lstride = 16 * ljstride;   /* lanes: [row][j][NV x 16] */
    for (uint32_t j = 0; j < 16; j++) {
        const float *xj = xg + j * kl * nt;
        for (uint32_t r0 = 0; r0 < rows; r0 += MR) {
            const uint32_t m = rows - r0 < MR ? rows - r0 : MR;
            const size_t bs = m * BLOCK;
            if (m == MR) {
                const float *p = panel + r0 * pl;
                const uint32_t r = 0;
                switch (MR * 8 + NV) {
                case 6 * 8 + 4: ZT_MICRO(6, 4); break;
                case 6 * 8 + 3: ZT_MICRO(6, 3); break;
                case 6 * 8 + 2: ZT_MICRO(6, 2); break;
                case 6 * 8 + 1: ZT_MICRO(6, 1); break;
                case 8 * 8 + 3: ZT_MICRO(8, 3); break;
                case 12 * 8 + 2: ZT_MICRO(12, 2); break;
                default: ZT_MICRO(12, 1); break;
                }
                continue;
            }
            for (uint32_t r = 0; r < m; r++) {
                const float *p = panel + r0 * pl + r * BLOCK;
                switch (NV) {
                case 4: ZT_MICRO(1, 4); break;
                case 3: ZT_MICRO(1, 3); break;
                case 2: ZT_MICRO(1, 2); break;
                default: ZT_MICRO(1, 1); break;
                }
            }
        }
    }
    /* finish() on 16 tokens at once. */
    for (uint32_t r = 0; r < rows; r++)
        for (int v = 0; v < NV; v++) {
            const float *l = lanes + r * lstride + 16 * v;
            __m512 a[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                a[j] = _mm512_add_ps(_mm512_load_ps(l + j * ljstride),
                                     _mm512_load_ps(l + (j + 8) * ljstride));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                a[j] = _mm512_add_ps(a[j], a[j + 4]);
            __m512 y = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
            const __mmask16 m = v == NV - 1 ? mask : 0xffff;
            y = _mm512_mul_ps(_mm512_mul_ps(y, _mm512_set1_ps(scale[r])),
                              _mm512_maskz_loadu_ps(m, xs + 16 * v));
            y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), _mm512_set1_ps(NAN));
            float o[16];
            _mm512_storeu_ps(o, y);
            for (uint32_t u = 0; u < 16 && 16 * v + u < nt; u++)
                out[16 * v + u][col0 + r] = o[u];
        }
}

/* More tokens: a block of rows decoded once, then each group of tokens
 * (xp: T tokens of the tiled format, ld bytes each, from a group's start). */
AVX512_TARGET
static void z_tiled(const struct l8_fp8_tables *tab, const uint8_t *w, uint32_t rows,
                    uint32_t in, const float *scale, const uint8_t *xp, size_t ld,
                    const float *xs, uint32_t T, float *const *out, size_t col0,
                    float *scratch)
{
    const size_t nb = (in + BLOCK - 1) / BLOCK, pl = nb * BLOCK;
    /* 24 accumulators per micro-tile: MR rows x NV vectors of 16 tokens
     * (the first group's NV; a shorter last group keeps its MR). */
    const uint32_t nv0 = (T < TILE_T ? T + 15 : TILE_T) / 16;
    const uint32_t MR = nv0 == 4 ? 6 : nv0 == 3 ? 8 : 12;
    float *panel = scratch, *lanes = scratch + rows * pl;
    for (uint32_t r0 = 0; r0 < rows; r0 += MR) {    /* each block's MR rows together */
        const uint32_t m = rows - r0 < MR ? rows - r0 : MR;
        for (uint32_t r = 0; r < m; r++)
            zt_decode_row(tab, w + (size_t)(r0 + r) * in, in, nb, panel + r0 * pl + r * BLOCK,
                          m * BLOCK);
    }
    for (uint32_t g0 = 0; g0 < T; g0 += TILE_T)
        zt_group(panel, rows, MR, nb, scale, (const float *)(xp + g0 * ld), xs + g0,
                 T - g0 < TILE_T ? T - g0 : TILE_T, out + g0, col0, lanes);
}
#endif

#ifdef HAVE_AVX512_KERNEL
/* l8_quantize_act_row, 16 elements at a time: max_ps(|x|, acc) is the
 * scalar loop's ternary (a NaN in its first operand yields the second),
 * the division is the same IEEE division, and l8_f32_to_e4m3's cases are
 * masks: round to 3 mantissa bits in the integer bits (normal), rint(a *
 * 512) (below 2^-6), saturation at 0x7e, NaN as 0x7f. */
AVX512_TARGET
static float z_quantize_row(const float *x, size_t n, uint8_t *q)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512 acc = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i));
        acc = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(u, abs_mask)), acc);
    }
    float amax = 0.0f, lanes[16];
    _mm512_storeu_ps(lanes, acc);
    for (int j = 0; j < 16; j++)
        amax = lanes[j] > amax ? lanes[j] : amax;
    const float scale = fmaxf(amax / L8_FP8_MAX, L8_FP8_MIN_ACT_SCALE);
    const __m512 vs = _mm512_set1_ps(scale);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        const __m512i u = _mm512_castps_si512(v), au = _mm512_and_si512(u, abs_mask);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(au, 20), _mm512_set1_epi32(1));
        const __m512i r = _mm512_add_epi32(au, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7ffff)));
        __m512i c = _mm512_min_epi32(_mm512_sub_epi32(_mm512_srli_epi32(r, 20),
                                                      _mm512_set1_epi32(120 << 3)),
                                     _mm512_set1_epi32(0x7e));
        const __m512 sub = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(au),
                                                              _mm512_set1_ps(512.0f)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        c = _mm512_mask_mov_epi32(c, _mm512_cmplt_epu32_mask(au, _mm512_set1_epi32(0x3c800000)),
                                  _mm512_cvttps_epi32(sub));
        c = _mm512_or_si512(c, _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
        c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7f));
        _mm512_mask_cvtepi32_storeu_epi8(q + i, m, c);
    }
    return scale;
}

/* l8_fp8_pack for the fused kernel: zdec's A and B are the packed order. */
AVX512_TARGET
static void z_pack(const struct l8_fp8_tables *t, const uint8_t *codes, size_t n, void *packed)
{
    const struct ztabs z = ztabs_load(t);
    for (size_t b = 0; b < (n + BLOCK - 1) / BLOCK; b++) {
        __m512i A, B;
        zdec(&z, zcodes(codes, b, (uint32_t)n), &A, &B);
        _mm512_storeu_si512((char *)packed + b * 2 * BLOCK, A);
        _mm512_storeu_si512((char *)packed + b * 2 * BLOCK + BLOCK, B);
    }
}
#endif

float l8_fp8_quantize_row(enum l8_fp8_kernel k, const float *x, size_t n, uint8_t *q)
{
#ifdef HAVE_AVX512_KERNEL
    if (k != L8_FP8_VEC)
        return z_quantize_row(x, n, q);
#endif
    (void)k;
    return l8_quantize_act_row(x, n, q);
}

void l8_fp8_block(enum l8_fp8_kernel k, const struct l8_fp8_tables *t, const uint8_t *w,
                  uint32_t rows, uint32_t in, const float *scale, const void *xp, size_t ld,
                  bool tiled, const float *xs, uint32_t T, float *const *out_rows, size_t col0,
                  void *scratch)
{
#ifdef HAVE_AVX512_KERNEL
    if (k != L8_FP8_VEC) {
        if (tiled)
            z_tiled(t, w, rows, in, scale, xp, ld, xs, T, out_rows, col0, scratch);
        else if (T > L8_FP8_FUSED_MAX_T)
            z_blocked(t, w, rows, in, scale, xp, ld, xs, T, out_rows, col0);
        else
            z_fused(t, w, rows, in, scale, xp, ld, xs, T, out_rows, col0, T == 1 ? 4 : 2);
        return;
    }
#endif
    (void)tiled;
    (void)t;
    vec_block(w, rows, in, scale, xp, ld, xs, T, out_rows, col0, scratch);
}
