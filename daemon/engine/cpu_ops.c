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

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_AVX512 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif

/* Whether the 16-wide (AVX-512) forms of the exact kernels run here: the
 * same operations element by element as the 8-wide ones (the build is ISO
 * C, so nothing is contracted into an FMA), twice as many per instruction. */
static bool cpu_wide(void)
{
#ifdef HAVE_AVX512
    static int has = -1;        /* a benign race: every thread writes the same */
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl");
    }
    return has;
#else
    return false;
#endif
}

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));
typedef int32_t v8i32 __attribute__((vector_size(32)));

/* Not under ThreadSanitizer: the clones' ifunc resolvers run at relocation,
 * before its runtime is up, and crash the program. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
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

/* Rows of an fp8 panel the scratch holds at least: a multiple of every
 * micro-tile height of the tiled kernel (6, 8, 12). */
#define FP8_PANEL_ROWS 24u

int l8_cpu_ws_init(struct l8_cpu_ws *ws, int nthreads, size_t max_in)
{
    memset(ws, 0, sizeof(*ws));
    ws->nthreads = nthreads;
    ws->fp8 = l8_fp8_best();
    ws->wide = cpu_wide();
    ws->floats = L8_CPU_MM_BUDGET_FLOATS;
    /* At least FP8_PANEL_ROWS rows of the fp8 panel at the widest input. */
    const size_t panel = FP8_PANEL_ROWS * l8_fp8_panel_row_bytes(ws->fp8, max_in) / sizeof(float);
    if (ws->floats < panel)
        ws->floats = panel;
    l8_fp8_tables_init(&ws->tab);
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

/* ---- weight decoding ------------------------------------------------------
 * E4M3 without a table: the code's 7 magnitude bits go to f32 bits 20..26
 * (exponent field 0..15, top 3 mantissa bits) and its sign to bit 31. That
 * f32 is the E4M3 value times 2^-120 (E4M3 subnormals land on f32
 * subnormals, where the same holds), so one exact multiply by 2^120 gives
 * the value: 5 vector operations per 8 codes. Codes 0x7f/0xff (NaN) come
 * out as +-480 instead; every caller scans for them (has_nan_code) and
 * takes the table for such rows, so results equal l8_e4m3_lut's always.
 * BF16 is a shift. All of it is exact, so which path decodes a weight
 * never changes a result. */
typedef uint8_t v32u8 __attribute__((vector_size(32)));
typedef uint64_t v4u64 __attribute__((vector_size(32)));

#define E4M3_BITS_MASK 0x87F00000u     /* sign, 4 exponent and 3 mantissa bits */
#define E4M3_REBIAS 0x1p120f           /* 2^(127 - 7) */
#define PREFETCH_LINE 64

/* The byte moves are written as broadcasts and in-lane byte shuffles
 * (one vpbroadcast + one vpshufb with AVX2): GCC 12 turns
 * __builtin_convertvector from 8 narrow elements into scalar inserts. */
static inline __attribute__((always_inline)) v8f dec8_e4m3(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    /* Code k replicated into every byte of lane k (lanes 4..7 read the
     * upper copy's bytes 4..7, so no shuffle crosses 128 bits). */
    v8i32 s = (v8i32)__builtin_shuffle((v32u8)(v4u64){ w, w, w, w },
                                       (v32u8){ 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                20, 20, 20, 20, 21, 21, 21, 21,
                                                22, 22, 22, 22, 23, 23, 23, 23 });
    /* Arithmetic shift: the code's sign lands on bit 31 (and 27), its 7
     * magnitude bits on 20..26; the mask drops the copies below. */
    s = (s >> 4) & (int32_t)E4M3_BITS_MASK;
    return (v8f)s * E4M3_REBIAS;
}

/* 8 BF16 values: element k's two bytes into the top half of lane k. */
static inline __attribute__((always_inline)) v8f dec8_bf16(const uint16_t *p)
{
    uint64_t w[2];
    memcpy(w, p, sizeof(w));
    v8u32 s = (v8u32)__builtin_shuffle((v32u8)(v4u64){ w[0], w[1], w[0], w[1] },
                                       (v32u8){ 0, 0, 0, 1, 2, 2, 2, 3, 4, 4, 4, 5, 6, 6, 6, 7,
                                                24, 24, 24, 25, 26, 26, 26, 27,
                                                28, 28, 28, 29, 30, 30, 30, 31 });
    return (v8f)(s & 0xFFFF0000u);
}

/* Whether any of n codes is a NaN (0x7f or 0xff). */
static inline __attribute__((always_inline)) bool has_nan_code(const uint8_t *w, size_t n)
{
    v32u8 acc = { 0 };
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        v32u8 c;
        memcpy(&c, w + i, sizeof(c));
        acc |= (v32u8)((c & 0x7f) == 0x7f);
    }
    v4u64 a = (v4u64)acc;
    bool any = (a[0] | a[1] | a[2] | a[3]) != 0;
    for (; i < n; i++)
        any |= (w[i] & 0x7f) == 0x7f;
    return any;
}

static void decode_e4m3_table(const uint8_t *w, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = l8_e4m3_lut[w[i]];
}

L8_MULTIVERSION
static void decode_e4m3(const uint8_t *w, size_t n, float *out)
{
    if (has_nan_code(w, n)) {
        decode_e4m3_table(w, n, out);
        return;
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f f = dec8_e4m3(w + i);
        memcpy(out + i, &f, sizeof(f));
    }
    decode_e4m3_table(w + i, n - i, out + i);
}

L8_MULTIVERSION
static void decode_bf16(const uint16_t *h, size_t n, float *out)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f f = dec8_bf16(h + i);
        memcpy(out + i, &f, sizeof(f));
    }
    for (; i < n; i++)
        out[i] = l8_bf16_to_f32(h[i]);
}

void l8_cpu_decode_e4m3(const uint8_t *w, size_t n, float *out) { decode_e4m3(w, n, out); }

/* ---- fused decode-and-dot (few tokens) -------------------------------------
 * With one to four tokens a weight is used once or twice after decoding,
 * so it is decoded in registers and never stored. Each output is still
 * summed in exactly l8_cpu_dot's order (two 8-wide accumulators over
 * 16-element steps, an 8-wide tail into the first, the lane tree, the
 * scalar tail), so this path and the decode-once path below give the same
 * bits, and the step's token count never changes a result. */
enum wkind { WK_E4M3, WK_BF16, WK_F32 };

static inline __attribute__((always_inline)) v8f wload8(enum wkind k, const void *w, size_t i)
{
    switch (k) {
    case WK_E4M3: return dec8_e4m3((const uint8_t *)w + i);
    case WK_BF16: return dec8_bf16((const uint16_t *)w + i);
    default:      return load8((const float *)w + i);
    }
}

static inline __attribute__((always_inline)) float wload1(enum wkind k, const void *w, size_t i)
{
    switch (k) {
    case WK_E4M3: return l8_e4m3_lut[((const uint8_t *)w)[i]];
    case WK_BF16: return l8_bf16_to_f32(((const uint16_t *)w)[i]);
    default:      return ((const float *)w)[i];
    }
}

/* The scalar tail of fused_tile's dots, elements [i, n). */
static inline __attribute__((always_inline))
void scalar_tail(enum wkind k, const void *w0, const void *w1, int nr, const float *x0,
                 const float *x1, int nt, size_t i, size_t n, float t[2][2])
{
    t[0][0] = t[0][1] = t[1][0] = t[1][1] = 0.0f;
    for (; i < n; i++) {
        float a0 = wload1(k, w0, i);
        t[0][0] += x0[i] * a0;
        if (nt > 1)
            t[0][1] += x1[i] * a0;
        if (nr > 1) {
            float a1 = wload1(k, w1, i);
            t[1][0] += x0[i] * a1;
            if (nt > 1)
                t[1][1] += x1[i] * a1;
        }
    }
}

/* r[a][b] = dot(x_b, w_a) for nr (1, 2) weight rows and nt (1, 2) tokens;
 * nr and nt are constants after inlining. */
static inline __attribute__((always_inline))
void fused_tile(enum wkind k, const void *w0, const void *w1, int nr,
                const float *x0, const float *x1, int nt, size_t n, float r[2][2])
{
    v8f p00 = { 0 }, q00 = { 0 }, p01 = { 0 }, q01 = { 0 };
    v8f p10 = { 0 }, q10 = { 0 }, p11 = { 0 }, q11 = { 0 };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v8f a0 = wload8(k, w0, i), b0 = wload8(k, w0, i + 8);
        v8f xa = load8(x0 + i), xb = load8(x0 + i + 8);
        p00 += xa * a0; q00 += xb * b0;
        if (nr > 1) {
            v8f a1 = wload8(k, w1, i), b1 = wload8(k, w1, i + 8);
            p10 += xa * a1; q10 += xb * b1;
            if (nt > 1) {
                v8f ya = load8(x1 + i), yb = load8(x1 + i + 8);
                p01 += ya * a0; q01 += yb * b0;
                p11 += ya * a1; q11 += yb * b1;
            }
        } else if (nt > 1) {
            p01 += load8(x1 + i) * a0; q01 += load8(x1 + i + 8) * b0;
        }
    }
    if (i + 8 <= n) {
        v8f a0 = wload8(k, w0, i), xa = load8(x0 + i);
        p00 += xa * a0;
        if (nt > 1)
            p01 += load8(x1 + i) * a0;
        if (nr > 1) {
            v8f a1 = wload8(k, w1, i);
            p10 += xa * a1;
            if (nt > 1)
                p11 += load8(x1 + i) * a1;
        }
        i += 8;
    }
    float t[2][2];
    scalar_tail(k, w0, w1, nr, x0, x1, nt, i, n, t);
    r[0][0] = hsum8(p00 + q00) + t[0][0];
    if (nt > 1)
        r[0][1] = hsum8(p01 + q01) + t[0][1];
    if (nr > 1) {
        r[1][0] = hsum8(p10 + q10) + t[1][0];
        if (nt > 1)
            r[1][1] = hsum8(p11 + q11) + t[1][1];
    }
}

/* y[t][col0 + r] = dot(x_t, w_r) * scale[r] (scale may be NULL = 1) for
 * `rows` rows of w (row stride `in` elements), T tokens: NAME, built on
 * TILE (the 8- or the 16-wide tile). */
#define DEFINE_FUSED_BLOCK(NAME, TILE, ...) \
__VA_ARGS__ static inline __attribute__((always_inline)) \
void NAME(enum wkind k, const void *w, uint32_t rows, uint32_t in, \
                 const float *x, uint32_t T, float *const *out_rows, size_t col0, \
                 const float *scale, float *scratch) \
{ \
    const size_t esz = k == WK_E4M3 ? 1 : k == WK_BF16 ? 2 : 4; \
    for (uint32_t r = 0; r < rows; ) { \
        const uint8_t *w0 = (const uint8_t *)w + (size_t)r * in * esz; \
        int nr = r + 1 < rows ? 2 : 1; \
        const uint8_t *w1 = nr > 1 ? w0 + (size_t)in * esz : w0; \
        float d[2][2]; \
        /* Rows of a few KB are about one page each, and the hardware \
         * prefetchers stop at page boundaries: ask for the next pair \
         * (while this one computes), or each pair starts with DRAM latency; \
         * into L2, as z_fused does (into L1 it starved the stream on Zen 4). */ \
        if (r + 2 < rows) { \
            const uint8_t *nx = w0 + 2 * (size_t)in * esz; \
            const size_t nb = (size_t)(rows - r - 2 < 2 ? rows - r - 2 : 2) * in * esz; \
            for (size_t off = 0; off < nb; off += PREFETCH_LINE) \
                __builtin_prefetch(nx + off, 0, 2); \
        } \
        if (k == WK_E4M3 && has_nan_code(w0, (size_t)nr * in)) { \
            /* A NaN code: this row through the table, in the same order. */ \
            nr = 1; \
            decode_e4m3_table(w0, in, scratch); \
            for (uint32_t t = 0; t < T; t++) { \
                float v = dot_body(x + (size_t)t * in, scratch, in); \
                out_rows[t][col0 + r] = scale ? v * scale[r] : v; \
            } \
            r += 1; \
            continue; \
        } \
        for (uint32_t t = 0; t < T; t += 2) { \
            const float *x0 = x + (size_t)t * in; \
            const int nt = t + 1 < T ? 2 : 1; \
            if (nr == 2 && nt == 2) \
                TILE(k, w0, w1, 2, x0, x0 + in, 2, in, d); \
            else if (nr == 2) \
                TILE(k, w0, w1, 2, x0, x0, 1, in, d); \
            else if (nt == 2) \
                TILE(k, w0, w0, 1, x0, x0 + in, 2, in, d); \
            else \
                TILE(k, w0, w0, 1, x0, x0, 1, in, d); \
            for (int a = 0; a < nr; a++) \
                for (int b = 0; b < nt; b++) { \
                    out_rows[t + b][col0 + r + a] = scale ? d[a][b] * scale[r + a] : d[a][b]; \
                } \
        } \
        r += (uint32_t)nr; \
    } \
} \

DEFINE_FUSED_BLOCK(fused_block, fused_tile)

#ifdef HAVE_AVX512
/* fused_tile in 16-wide vectors: lanes 0-7 are the p accumulators, 8-15
 * the q ones, the 8-wide tail goes into lanes 0-7 only. */
AVX512 static inline __attribute__((always_inline)) __m512 wload16(enum wkind k, const void *w,
                                                                   size_t i)
{
    switch (k) {
    case WK_E4M3: {
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + i)));
        const __m512i b = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24),
                                          _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), 20));
        return _mm512_mul_ps(_mm512_castsi512_ps(b), _mm512_set1_ps(E4M3_REBIAS));
    }
    case WK_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i))), 16));
    default:
        return _mm512_loadu_ps((const float *)w + i);
    }
}

/* hsum8(p + q) of a 16-wide accumulator. */
AVX512 static inline __attribute__((always_inline)) float zsum(__m512 z)
{
    float v[16];
    _mm512_storeu_ps(v, z);
    v8f s;
    for (int l = 0; l < 8; l++)
        s[l] = v[l] + v[l + 8];
    return hsum8(s);
}

AVX512 static inline __attribute__((always_inline))
void fused_tile_z(enum wkind k, const void *w0, const void *w1, int nr,
                  const float *x0, const float *x1, int nt, size_t n, float r[2][2])
{
    __m512 z00 = _mm512_setzero_ps(), z01 = z00, z10 = z00, z11 = z00;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 a0 = wload16(k, w0, i), xa = _mm512_loadu_ps(x0 + i);
        z00 = _mm512_add_ps(z00, _mm512_mul_ps(xa, a0));
        if (nr > 1) {
            const __m512 a1 = wload16(k, w1, i);
            z10 = _mm512_add_ps(z10, _mm512_mul_ps(xa, a1));
            if (nt > 1) {
                const __m512 ya = _mm512_loadu_ps(x1 + i);
                z01 = _mm512_add_ps(z01, _mm512_mul_ps(ya, a0));
                z11 = _mm512_add_ps(z11, _mm512_mul_ps(ya, a1));
            }
        } else if (nt > 1) {
            z01 = _mm512_add_ps(z01, _mm512_mul_ps(_mm512_loadu_ps(x1 + i), a0));
        }
    }
    if (i + 8 <= n) {
        const __m512 a0 = _mm512_castps256_ps512((__m256)wload8(k, w0, i));
        const __m512 xa = _mm512_castps256_ps512((__m256)load8(x0 + i));
        z00 = _mm512_mask_add_ps(z00, 0xff, z00, _mm512_mul_ps(xa, a0));
        if (nt > 1)
            z01 = _mm512_mask_add_ps(z01, 0xff, z01, _mm512_mul_ps(
                      _mm512_castps256_ps512((__m256)load8(x1 + i)), a0));
        if (nr > 1) {
            const __m512 a1 = _mm512_castps256_ps512((__m256)wload8(k, w1, i));
            z10 = _mm512_mask_add_ps(z10, 0xff, z10, _mm512_mul_ps(xa, a1));
            if (nt > 1)
                z11 = _mm512_mask_add_ps(z11, 0xff, z11, _mm512_mul_ps(
                          _mm512_castps256_ps512((__m256)load8(x1 + i)), a1));
        }
        i += 8;
    }
    float t[2][2];
    scalar_tail(k, w0, w1, nr, x0, x1, nt, i, n, t);
    r[0][0] = zsum(z00) + t[0][0];
    if (nt > 1)
        r[0][1] = zsum(z01) + t[0][1];
    if (nr > 1) {
        r[1][0] = zsum(z10) + t[1][0];
        if (nt > 1)
            r[1][1] = zsum(z11) + t[1][1];
    }
}
DEFINE_FUSED_BLOCK(fused_block_z, fused_tile_z, AVX512)

AVX512 static void fused_block_wide(enum wkind k, const void *w, uint32_t rows, uint32_t in,
                                    const float *x, uint32_t T, float *const *out_rows,
                                    size_t col0, const float *scale, float *scratch)
{
    switch (k) {
    case WK_E4M3: fused_block_z(WK_E4M3, w, rows, in, x, T, out_rows, col0, scale, scratch); break;
    case WK_BF16: fused_block_z(WK_BF16, w, rows, in, x, T, out_rows, col0, scale, scratch); break;
    default:      fused_block_z(WK_F32, w, rows, in, x, T, out_rows, col0, scale, scratch); break;
    }
}
#endif

L8_MULTIVERSION
static void fused_block_e4m3(const void *w, uint32_t rows, uint32_t in, const float *x,
                             uint32_t T, float *const *out_rows, size_t col0,
                             const float *scale, float *scratch)
{
    fused_block(WK_E4M3, w, rows, in, x, T, out_rows, col0, scale, scratch);
}

L8_MULTIVERSION
static void fused_block_bf16(const void *w, uint32_t rows, uint32_t in, const float *x,
                             uint32_t T, float *const *out_rows, size_t col0,
                             const float *scale, float *scratch)
{
    fused_block(WK_BF16, w, rows, in, x, T, out_rows, col0, scale, scratch);
}

L8_MULTIVERSION
static void fused_block_f32(const void *w, uint32_t rows, uint32_t in, const float *x,
                            uint32_t T, float *const *out_rows, size_t col0,
                            const float *scale, float *scratch)
{
    fused_block(WK_F32, w, rows, in, x, T, out_rows, col0, scale, scratch);
}

/* ---- decode once, dot many (prefill) ---------------------------------------- */

/* Dots of T input rows against a decoded block of rows. */
static void block_dots(const float *wd, uint32_t rows, uint32_t in, const float *x,
                       uint32_t T, float *const *out_rows, size_t out_col0,
                       const float *scale)
{
    for (uint32_t t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * in;
        float *yt = out_rows[t] + out_col0;
        uint32_t r = 0;
        float d[4];
        for (; r + 4 <= rows; r += 4) {
            dot4(xt, wd + (size_t)r * in, in, in, d);
            for (int j = 0; j < 4; j++) {
                yt[r + j] = scale ? d[j] * scale[r + j] : d[j];
            }
        }
        for (; r < rows; r++) {
            const float v = l8_cpu_dot(xt, wd + (size_t)r * in, in);
            yt[r] = scale ? v * scale[r] : v;
        }
    }
}

/* ---- the matmul job: blocks of rows of up to MM_MAX_PARTS weights ------------ */

/* Up to this many tokens the weights are decoded in registers. */
#define L8_CPU_FUSED_MAX_T 4u
/* Blocks per thread in the fused path: enough that dynamic claiming evens
 * out a slow thread, few enough that claims stay cheap. */
#define FUSED_BLOCKS_PER_THREAD 8u
/* ... and no block under this many multiply-adds. */
#define FUSED_MIN_BLOCK_MACS (16u * 1024u)
#define MM_MAX_PARTS 3
#define L8_CPU_MAX_ROWPTR 256
_Static_assert(L8_CPU_MAX_ROWPTR % L8_FP8_TILE_T == 0, "jobs start at a tiled format's group");
/* Below this many multiply-adds a matmul runs on the calling thread:
 * handing half of it to another thread would cost more than it saves. */
#define L8_CPU_INLINE_MACS (64u * 1024u)

struct mm_part {
    const struct l8_qweight *W;     /* FP8 weight, or */
    const struct l8_dense *D;       /* a dense one */
    float *const *out;              /* [T] destination rows */
    uint32_t rb;                    /* rows per block */
    uint32_t blk0;                  /* the part's first block */
};

struct mm_job {
    const struct l8_cpu_ws *ws;
    struct mm_part part[MM_MAX_PARTS];
    uint32_t n_parts;
    const float *x;                 /* exact: [T, in] f32, or */
    const uint8_t *xp;              /* fp8: T packed tokens of xld bytes */
    size_t xld;
    const float *xs;                /* fp8: [T] token scales */
    bool tiled;                     /* fp8: xp is one group of the tiled format */
    uint32_t T;
    bool fused;
};

static void mm_chunk(void *ctx, size_t b, size_t e, int tid)
{
    const struct mm_job *j = ctx;
    float *wd = j->ws->buf[tid];
    for (size_t blk = b; blk < e; blk++) {
        uint32_t p = 0;
        while (p + 1 < j->n_parts && blk >= j->part[p + 1].blk0)
            p++;
        const struct mm_part *P = &j->part[p];
        const uint32_t in = P->W ? P->W->in : P->D->cols;
        const uint32_t out = P->W ? P->W->out : P->D->rows;
        const uint32_t o0 = (uint32_t)(blk - P->blk0) * P->rb;
        const uint32_t rows = out - o0 < P->rb ? out - o0 : P->rb;
        const float *scale = P->W ? P->W->scale + o0 : NULL;
        if (j->xp) {
            l8_fp8_block(j->ws->fp8, &j->ws->tab, P->W->w + (size_t)o0 * in, rows, in, scale,
                         j->xp, j->xld, j->tiled, j->xs, j->T, P->out, o0, wd);
            continue;
        }
        if (j->fused) {
#ifdef HAVE_AVX512
            if (j->ws->wide) {
                if (P->W)
                    fused_block_wide(WK_E4M3, P->W->w + (size_t)o0 * in, rows, in, j->x, j->T,
                                     P->out, o0, scale, wd);
                else
                    fused_block_wide(P->D->dtype == L8_BF16 ? WK_BF16 : WK_F32,
                                     (const uint8_t *)P->D->data
                                         + (size_t)o0 * in * (P->D->dtype == L8_BF16 ? 2 : 4),
                                     rows, in, j->x, j->T, P->out, o0, NULL, wd);
                continue;
            }
#endif
            if (P->W)
                fused_block_e4m3(P->W->w + (size_t)o0 * in, rows, in, j->x, j->T, P->out, o0,
                                 scale, wd);
            else if (P->D->dtype == L8_BF16)
                fused_block_bf16((const uint16_t *)P->D->data + (size_t)o0 * in, rows, in,
                                 j->x, j->T, P->out, o0, NULL, wd);
            else
                fused_block_f32((const float *)P->D->data + (size_t)o0 * in, rows, in,
                                j->x, j->T, P->out, o0, NULL, wd);
            continue;
        }
        if (P->W) {
            decode_e4m3(P->W->w + (size_t)o0 * in, (size_t)rows * in, wd);
        } else if (P->D->dtype == L8_BF16) {
            decode_bf16((const uint16_t *)P->D->data + (size_t)o0 * in, (size_t)rows * in, wd);
        } else {
            for (uint32_t r = 0; r < rows; r++)
                l8_dense_row(P->D, o0 + r, wd + (size_t)r * in);
        }
        block_dots(wd, rows, in, j->x, j->T, P->out, o0, scale);
    }
}

/* Rows per block. Decode-once: as many as fit the per-thread budget, but
 * few enough that every thread gets a few blocks; a multiple of 4 for
 * dot4. Fused: FUSED_BLOCKS_PER_THREAD blocks per thread of at least
 * FUSED_MIN_BLOCK_MACS; even, for the row pairs. The choice changes only
 * the work split, never a result. */
static uint32_t rows_per_block(const struct l8_cpu_ws *ws, uint32_t out, uint32_t in,
                               uint32_t T, bool fused, bool fp8, int nthreads)
{
    if (in == 0)
        in = 1;
    size_t rb;
    if (fused) {
        rb = ((size_t)out + FUSED_BLOCKS_PER_THREAD * (size_t)nthreads - 1)
             / (FUSED_BLOCKS_PER_THREAD * (size_t)nthreads);
        size_t min_rows = (FUSED_MIN_BLOCK_MACS + (size_t)in * T - 1) / ((size_t)in * T);
        if (rb < min_rows)
            rb = min_rows;
        rb = (rb + 3) & ~(size_t)3;
    } else {
        rb = fp8 ? ws->floats * sizeof(float) / l8_fp8_panel_row_bytes(ws->fp8, in)
                 : L8_CPU_MM_BUDGET_FLOATS / in;
        size_t fair = ((size_t)out + 4u * (size_t)nthreads - 1) / (4u * (size_t)nthreads);
        if (rb > fair)
            rb = fair;
        rb -= rb >= FP8_PANEL_ROWS && fp8 ? rb % FP8_PANEL_ROWS : rb % 4;
        if (rb < 4)
            rb = 4;
    }
    if (rb > out)
        rb = out ? out : 1;
    return (uint32_t)rb;
}

/* Runs the parts (all with the same input width) over T tokens (T <=
 * L8_CPU_MAX_ROWPTR) as one parallel-for. */
static void mm_run(struct l8_tp *tp, struct mm_job *j)
{
    const int nt = l8_tp_nthreads(tp);
    bool fused = j->xp ? j->ws->fp8 != L8_FP8_VEC && !j->tiled : j->T <= L8_CPU_FUSED_MAX_T;
    for (uint32_t p = 0; p < j->n_parts; p++)
        if (j->part[p].D && j->part[p].D->dtype != L8_BF16 && j->part[p].D->dtype != L8_F32)
            fused = false;      /* F16 goes through l8_dense_row */
    j->fused = fused;
    uint32_t nblk = 0;
    uint64_t macs = 0;
    for (uint32_t p = 0; p < j->n_parts; p++) {
        struct mm_part *P = &j->part[p];
        const uint32_t in = P->W ? P->W->in : P->D->cols;
        const uint32_t out = P->W ? P->W->out : P->D->rows;
        P->rb = rows_per_block(j->ws, out, in, j->T, fused, j->xp != NULL, nt);
        P->blk0 = nblk;
        nblk += (out + P->rb - 1) / P->rb;
        macs += (uint64_t)j->T * out * in;
    }
    l8_tp_for(tp, nblk, macs < L8_CPU_INLINE_MACS ? nblk : 1, mm_chunk, j);
}

void l8_cpu_qmatmul_to_rows(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                            const struct l8_qweight *const *W, uint32_t n_w,
                            const struct l8_cpu_x *x, uint32_t T, float *const *const *out)
{
    for (uint32_t w0 = 0; w0 < n_w; w0 += MM_MAX_PARTS) {
        const uint32_t np = n_w - w0 < MM_MAX_PARTS ? n_w - w0 : MM_MAX_PARTS;
        for (uint32_t t0 = 0; t0 < T; t0 += L8_CPU_MAX_ROWPTR) {
            const uint32_t n = T - t0 < L8_CPU_MAX_ROWPTR ? T - t0 : L8_CPU_MAX_ROWPTR;
            struct mm_job j = { .ws = ws, .n_parts = np, .T = n };
            if (x->fp8) {
                j.xp = (const uint8_t *)x->fp8 + (size_t)t0 * x->ld;
                j.xld = x->ld;
                j.tiled = x->tiled;
                j.xs = x->scale + t0;
            } else {
                j.x = x->f32 + (size_t)t0 * W[0]->in;
            }
            for (uint32_t p = 0; p < np; p++) {
                j.part[p].W = W[w0 + p];
                j.part[p].out = out[w0 + p] + t0;
            }
            mm_run(tp, &j);
        }
    }
}

void l8_cpu_qmatmul_multi(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                          const struct l8_qweight *const *W, uint32_t n_w,
                          const struct l8_cpu_x *x, uint32_t T,
                          float *const *y, const size_t *ldy)
{
    /* Row pointers into y, in bounded groups of tokens to stay off the heap. */
    float *rows[MM_MAX_PARTS][L8_CPU_MAX_ROWPTR];
    float *const *out[MM_MAX_PARTS];
    for (uint32_t w0 = 0; w0 < n_w; w0 += MM_MAX_PARTS) {
        const uint32_t np = n_w - w0 < MM_MAX_PARTS ? n_w - w0 : MM_MAX_PARTS;
        for (uint32_t t0 = 0; t0 < T; t0 += L8_CPU_MAX_ROWPTR) {
            const uint32_t n = T - t0 < L8_CPU_MAX_ROWPTR ? T - t0 : L8_CPU_MAX_ROWPTR;
            struct l8_cpu_x xt = *x;
            if (xt.fp8) {
                xt.fp8 = (const uint8_t *)xt.fp8 + (size_t)t0 * xt.ld;
                xt.scale += t0;
            } else {
                xt.f32 += (size_t)t0 * W[0]->in;
            }
            for (uint32_t p = 0; p < np; p++) {
                for (uint32_t t = 0; t < n; t++)
                    rows[p][t] = y[w0 + p] + (size_t)(t0 + t) * ldy[w0 + p];
                out[p] = rows[p];
            }
            l8_cpu_qmatmul_to_rows(tp, ws, W + w0, np, &xt, n, out);
        }
    }
}

void l8_cpu_qmatmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                    const struct l8_qweight *W, const struct l8_cpu_x *x,
                    uint32_t T, float *y, size_t ldy)
{
    l8_cpu_qmatmul_multi(tp, ws, &W, 1, x, T, &y, &ldy);
}

void l8_cpu_dense_matmul(struct l8_tp *tp, const struct l8_cpu_ws *ws,
                         const struct l8_dense *D, const float *x, uint32_t R,
                         float *const *out)
{
    for (uint32_t r0 = 0; r0 < R; r0 += L8_CPU_MAX_ROWPTR) {
        uint32_t n = R - r0 < L8_CPU_MAX_ROWPTR ? R - r0 : L8_CPU_MAX_ROWPTR;
        struct mm_job j = { .ws = ws, .n_parts = 1, .x = x + (size_t)r0 * D->cols, .T = n };
        j.part[0].D = D;
        j.part[0].out = out + r0;
        mm_run(tp, &j);
    }
}

struct quant_job {
    const struct l8_cpu_ws *ws;
    const float *x;
    size_t n, ld;
    uint8_t *q, *packed;
    float *xs;
    uint32_t T;
    bool tiled;
};

static void quant_chunk(void *ctx, size_t b, size_t e, int tid)
{
    const struct quant_job *j = ctx;
    (void)tid;
    for (size_t t = b; t < e; t++) {
        uint8_t *qt = j->q + t * j->n;
        j->xs[t] = l8_fp8_quantize_row(j->ws->fp8, j->x + t * j->n, j->n, qt);
        if (j->tiled)
            l8_fp8_pack_tiled(qt, j->n, (uint32_t)t, j->T, j->packed);
        else
            l8_fp8_pack(j->ws->fp8, &j->ws->tab, qt, j->n, j->packed + t * j->ld);
    }
}

size_t l8_cpu_quantize_ld(const struct l8_cpu_ws *ws, size_t n)
{
    return l8_fp8_packed_bytes(ws->fp8, n);
}

void l8_cpu_quantize_rows(struct l8_tp *tp, const struct l8_cpu_ws *ws, const float *x,
                          uint32_t T, size_t n, uint8_t *q, void *packed, float *xs,
                          struct l8_cpu_x *out)
{
    struct quant_job j = { .ws = ws, .x = x, .n = n, .ld = l8_cpu_quantize_ld(ws, n), .q = q,
                           .packed = packed, .xs = xs, .T = T,
                           .tiled = l8_fp8_tiled(ws->fp8, T) };
    l8_tp_for(tp, T, 0, quant_chunk, &j);
    *out = (struct l8_cpu_x){ .fp8 = packed, .ld = j.ld, .scale = xs, .tiled = j.tiled };
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
    return dec8_bf16((const uint16_t *)row + i);
}

/* a[g][u] += w[g][j] * V[j][d + 8u .. d + 8u + 8) for j in [j0, je), rows
 * g < ng of w (row stride ld), ascending j for every element: the one
 * summation order of the P·V product, used by the tile and the split path
 * alike. With ng == 4 the 16 accumulators are spelled out so they stay in
 * registers. */
#ifdef HAVE_AVX512
/* pv_accumulate for ng == 4 in 16-wide vectors: the same multiplies and
 * adds element by element (no contraction: the build is ISO C), twice
 * the width of the AVX2 clone. */
AVX512
static void pv4_avx512(v8f a[4][4], const float *w, size_t ld, const void *const *vrow,
                       uint32_t j0, uint32_t je, size_t d, bool kv_bf16)
{
    __m512 z[4][2];
    for (int g = 0; g < 4; g++)
        for (int u = 0; u < 2; u++)
            z[g][u] = _mm512_loadu_ps((const float *)&a[g][2 * u]);
    for (uint32_t j = j0; j < je; j++) {
        __m512 v0, v1;
        if (kv_bf16) {
            const uint16_t *r = (const uint16_t *)vrow[j] + d;
            v0 = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)r)), 16));
            v1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r + 16))), 16));
        } else {
            v0 = _mm512_loadu_ps((const float *)vrow[j] + d);
            v1 = _mm512_loadu_ps((const float *)vrow[j] + d + 16);
        }
        for (int g = 0; g < 4; g++) {
            const __m512 wj = _mm512_set1_ps(w[(size_t)g * ld + j]);
            z[g][0] = _mm512_add_ps(z[g][0], _mm512_mul_ps(wj, v0));
            z[g][1] = _mm512_add_ps(z[g][1], _mm512_mul_ps(wj, v1));
        }
    }
    for (int g = 0; g < 4; g++)
        for (int u = 0; u < 2; u++)
            _mm512_storeu_ps((float *)&a[g][2 * u], z[g][u]);
}

#else
#define pv4_avx512(...) (void)0
#endif

static inline void pv_accumulate(v8f a[4][4], const float *w, size_t ld, uint32_t ng,
                                 const void *const *vrow, uint32_t j0, uint32_t je,
                                 size_t d, bool kv_bf16)
{
    if (ng == 4 && cpu_wide()) {
        pv4_avx512(a, w, ld, vrow, j0, je, d, kv_bf16);
        return;
    }
    if (ng == 4) {
        const float *w0 = w, *w1 = w0 + ld, *w2 = w1 + ld, *w3 = w2 + ld;
        for (uint32_t j = j0; j < je; j++) {
            v8f v0 = load_kv8(vrow[j], d, kv_bf16);
            v8f v1 = load_kv8(vrow[j], d + 8, kv_bf16);
            v8f v2 = load_kv8(vrow[j], d + 16, kv_bf16);
            v8f v3 = load_kv8(vrow[j], d + 24, kv_bf16);
            a[0][0] += w0[j] * v0; a[0][1] += w0[j] * v1;
            a[0][2] += w0[j] * v2; a[0][3] += w0[j] * v3;
            a[1][0] += w1[j] * v0; a[1][1] += w1[j] * v1;
            a[1][2] += w1[j] * v2; a[1][3] += w1[j] * v3;
            a[2][0] += w2[j] * v0; a[2][1] += w2[j] * v1;
            a[2][2] += w2[j] * v2; a[2][3] += w2[j] * v3;
            a[3][0] += w3[j] * v0; a[3][1] += w3[j] * v1;
            a[3][2] += w3[j] * v2; a[3][3] += w3[j] * v3;
        }
        return;
    }
    for (uint32_t j = j0; j < je; j++)
        for (uint32_t g = 0; g < ng; g++) {
            const float wj = w[(size_t)g * ld + j];
            for (int u = 0; u < 4; u++)
                a[g][u] += wj * load_kv8(vrow[j], d + 8 * u, kv_bf16);
        }
}

static inline float load_kv1(const void *row, size_t i, bool bf16)
{
    return bf16 ? l8_bf16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

/* Key row as f32: itself, or widened from bf16 into buf. */
static inline const float *key_row(const void *row, bool bf16, uint32_t hd, float *buf)
{
    if (!bf16)
        return row;
    for (uint32_t d = 0; d < hd; d++)
        buf[d] = load_kv1(row, d, true);
    return buf;
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
        const float *k = key_row(krow[j], kv_bf16, hd, kbuf);
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
                        pv_accumulate(a, scores + (size_t)q0 * ctx, ctx, ng, vrow, j0, je, d0,
                                      kv_bf16);
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

/* ---- decode attention split over threads -------------------------------------
 * The same arithmetic as l8_cpu_attention_tile for one query token, cut
 * into pieces that threads can share; see cpu_ops.h. */

L8_MULTIVERSION
void l8_cpu_attn_split_scores(const float *q, uint32_t gqa, uint32_t hd,
                              const void *const *krow, bool kv_bf16, uint32_t j0, uint32_t j1,
                              float scale, float *scores, size_t ld, float *kbuf, float *cmax)
{
    for (uint32_t h = 0; h < gqa; h++)
        cmax[h] = -INFINITY;
    for (uint32_t j = j0; j < j1; j++) {
        const float *k = key_row(krow[j], kv_bf16, hd, kbuf);
        /* As the tile: dot4 of the key against 4 heads, dot_body for the rest. */
        uint32_t h = 0;
        float r[4];
        for (; h + 4 <= gqa; h += 4) {
            dot4(k, q + (size_t)h * hd, hd, hd, r);
            for (int u = 0; u < 4; u++)
                scores[(size_t)(h + u) * ld + j] = r[u] * scale;
        }
        for (; h < gqa; h++)
            scores[(size_t)h * ld + j] = dot_body(q + (size_t)h * hd, k, hd) * scale;
        for (h = 0; h < gqa; h++) {
            const float s = scores[(size_t)h * ld + j];
            cmax[h] = s > cmax[h] ? s : cmax[h];
        }
    }
}

void l8_cpu_attn_split_max(const float *cmax, uint32_t n_chunks, uint32_t gqa,
                           const float *scores, size_t ld, float *mx)
{
    for (uint32_t h = 0; h < gqa; h++) {
        float m = -INFINITY;
        for (uint32_t c = 0; c < n_chunks; c++) {
            const float v = cmax[(size_t)c * gqa + h];
            m = v > m ? v : m;
        }
        /* The tile starts its running max at key 0, so a NaN there sticks;
         * anywhere else a NaN is skipped, as here. */
        mx[h] = isnan(scores[(size_t)h * ld]) ? scores[(size_t)h * ld] : m;
    }
}

void l8_cpu_attn_split_exp(float *scores, size_t ld, uint32_t gqa, uint32_t j0, uint32_t j1,
                           const float *mx)
{
    for (uint32_t h = 0; h < gqa; h++) {
        float *s = scores + (size_t)h * ld;
        for (uint32_t j = j0; j < j1; j++)
            s[j] = expf(s[j] - mx[h]);
    }
}

void l8_cpu_attn_split_sum(const float *w, size_t ld, uint32_t gqa, uint32_t n, double *sums)
{
    for (uint32_t h = 0; h < gqa; h++) {
        double sm = 0.0;
        for (uint32_t j = 0; j < n; j++)
            sm += (double)w[(size_t)h * ld + j];
        sums[h] = sm;
    }
}

L8_MULTIVERSION
void l8_cpu_attn_split_pv(const float *w, size_t ld, uint32_t gqa, uint32_t n,
                          const void *const *vrow, bool kv_bf16, uint32_t hd,
                          uint32_t d0, uint32_t d1, float *acc)
{
    for (uint32_t h = 0; h < gqa; h++)
        memset(acc + (size_t)h * hd + d0, 0, sizeof(float) * (d1 - d0));
    if ((d1 - d0) % PV_DIM_BLOCK != 0 || d0 % 8 != 0) {
        for (uint32_t h = 0; h < gqa; h++) {
            float *a = acc + (size_t)h * hd;
            for (uint32_t j = 0; j < n; j++) {
                const float wj = w[(size_t)h * ld + j];
                for (uint32_t d = d0; d < d1; d++)
                    a[d] += wj * load_kv1(vrow[j], d, kv_bf16);
            }
        }
        return;
    }
    /* Every acc element sums in ascending j, as in the tile. */
    for (uint32_t dd = d0; dd < d1; dd += PV_DIM_BLOCK) {
        for (uint32_t h0 = 0; h0 < gqa; h0 += 4) {
            const uint32_t ng = gqa - h0 < 4 ? gqa - h0 : 4;
            v8f a[4][4] = { { { 0 } } };
            pv_accumulate(a, w + (size_t)h0 * ld, ld, ng, vrow, 0, n, dd, kv_bf16);
            for (uint32_t g = 0; g < ng; g++)
                for (int u = 0; u < 4; u++)
                    memcpy(acc + (size_t)(h0 + g) * hd + dd + 8 * u, &a[g][u], sizeof(v8f));
        }
    }
}
