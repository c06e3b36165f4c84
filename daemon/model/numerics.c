/* numerics.c - E4M3 / BF16 / F16 conversions. See numerics.h. */
#include "numerics.h"

#include <float.h>
#include <math.h>
#include <string.h>

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float l8_e4m3_to_f32(uint8_t v)
{
    uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
    float r;
    if (exp == 0xf && man == 0x7)
        return NAN;
    if (exp == 0)
        r = ldexpf((float)man, -9);           /* subnormal: man/8 * 2^-6 */
    else
        r = ldexpf((float)(8 + man), (int)exp - 10); /* (1 + man/8) * 2^(exp-7) */
    return sign ? -r : r;
}

/* Generated from the definition above: v = (-1)^s * 2^(e-7) * (1 + m/8),
 * subnormals 2^-6 * m/8, 0x7f/0xff NaN. tests/model/test_numerics.c checks
 * every entry against l8_e4m3_to_f32(). */
const float l8_e4m3_lut[256] = {
    0x0p+0f, 0x1.0000000000000p-9f, 0x1.0000000000000p-8f, 0x1.8000000000000p-8f,
    0x1.0000000000000p-7f, 0x1.4000000000000p-7f, 0x1.8000000000000p-7f, 0x1.c000000000000p-7f,
    0x1.0000000000000p-6f, 0x1.2000000000000p-6f, 0x1.4000000000000p-6f, 0x1.6000000000000p-6f,
    0x1.8000000000000p-6f, 0x1.a000000000000p-6f, 0x1.c000000000000p-6f, 0x1.e000000000000p-6f,
    0x1.0000000000000p-5f, 0x1.2000000000000p-5f, 0x1.4000000000000p-5f, 0x1.6000000000000p-5f,
    0x1.8000000000000p-5f, 0x1.a000000000000p-5f, 0x1.c000000000000p-5f, 0x1.e000000000000p-5f,
    0x1.0000000000000p-4f, 0x1.2000000000000p-4f, 0x1.4000000000000p-4f, 0x1.6000000000000p-4f,
    0x1.8000000000000p-4f, 0x1.a000000000000p-4f, 0x1.c000000000000p-4f, 0x1.e000000000000p-4f,
    0x1.0000000000000p-3f, 0x1.2000000000000p-3f, 0x1.4000000000000p-3f, 0x1.6000000000000p-3f,
    0x1.8000000000000p-3f, 0x1.a000000000000p-3f, 0x1.c000000000000p-3f, 0x1.e000000000000p-3f,
    0x1.0000000000000p-2f, 0x1.2000000000000p-2f, 0x1.4000000000000p-2f, 0x1.6000000000000p-2f,
    0x1.8000000000000p-2f, 0x1.a000000000000p-2f, 0x1.c000000000000p-2f, 0x1.e000000000000p-2f,
    0x1.0000000000000p-1f, 0x1.2000000000000p-1f, 0x1.4000000000000p-1f, 0x1.6000000000000p-1f,
    0x1.8000000000000p-1f, 0x1.a000000000000p-1f, 0x1.c000000000000p-1f, 0x1.e000000000000p-1f,
    0x1.0000000000000p+0f, 0x1.2000000000000p+0f, 0x1.4000000000000p+0f, 0x1.6000000000000p+0f,
    0x1.8000000000000p+0f, 0x1.a000000000000p+0f, 0x1.c000000000000p+0f, 0x1.e000000000000p+0f,
    0x1.0000000000000p+1f, 0x1.2000000000000p+1f, 0x1.4000000000000p+1f, 0x1.6000000000000p+1f,
    0x1.8000000000000p+1f, 0x1.a000000000000p+1f, 0x1.c000000000000p+1f, 0x1.e000000000000p+1f,
    0x1.0000000000000p+2f, 0x1.2000000000000p+2f, 0x1.4000000000000p+2f, 0x1.6000000000000p+2f,
    0x1.8000000000000p+2f, 0x1.a000000000000p+2f, 0x1.c000000000000p+2f, 0x1.e000000000000p+2f,
    0x1.0000000000000p+3f, 0x1.2000000000000p+3f, 0x1.4000000000000p+3f, 0x1.6000000000000p+3f,
    0x1.8000000000000p+3f, 0x1.a000000000000p+3f, 0x1.c000000000000p+3f, 0x1.e000000000000p+3f,
    0x1.0000000000000p+4f, 0x1.2000000000000p+4f, 0x1.4000000000000p+4f, 0x1.6000000000000p+4f,
    0x1.8000000000000p+4f, 0x1.a000000000000p+4f, 0x1.c000000000000p+4f, 0x1.e000000000000p+4f,
    0x1.0000000000000p+5f, 0x1.2000000000000p+5f, 0x1.4000000000000p+5f, 0x1.6000000000000p+5f,
    0x1.8000000000000p+5f, 0x1.a000000000000p+5f, 0x1.c000000000000p+5f, 0x1.e000000000000p+5f,
    0x1.0000000000000p+6f, 0x1.2000000000000p+6f, 0x1.4000000000000p+6f, 0x1.6000000000000p+6f,
    0x1.8000000000000p+6f, 0x1.a000000000000p+6f, 0x1.c000000000000p+6f, 0x1.e000000000000p+6f,
    0x1.0000000000000p+7f, 0x1.2000000000000p+7f, 0x1.4000000000000p+7f, 0x1.6000000000000p+7f,
    0x1.8000000000000p+7f, 0x1.a000000000000p+7f, 0x1.c000000000000p+7f, 0x1.e000000000000p+7f,
    0x1.0000000000000p+8f, 0x1.2000000000000p+8f, 0x1.4000000000000p+8f, 0x1.6000000000000p+8f,
    0x1.8000000000000p+8f, 0x1.a000000000000p+8f, 0x1.c000000000000p+8f, NAN,
    -0x0p+0f, -0x1.0000000000000p-9f, -0x1.0000000000000p-8f, -0x1.8000000000000p-8f,
    -0x1.0000000000000p-7f, -0x1.4000000000000p-7f, -0x1.8000000000000p-7f, -0x1.c000000000000p-7f,
    -0x1.0000000000000p-6f, -0x1.2000000000000p-6f, -0x1.4000000000000p-6f, -0x1.6000000000000p-6f,
    -0x1.8000000000000p-6f, -0x1.a000000000000p-6f, -0x1.c000000000000p-6f, -0x1.e000000000000p-6f,
    -0x1.0000000000000p-5f, -0x1.2000000000000p-5f, -0x1.4000000000000p-5f, -0x1.6000000000000p-5f,
    -0x1.8000000000000p-5f, -0x1.a000000000000p-5f, -0x1.c000000000000p-5f, -0x1.e000000000000p-5f,
    -0x1.0000000000000p-4f, -0x1.2000000000000p-4f, -0x1.4000000000000p-4f, -0x1.6000000000000p-4f,
    -0x1.8000000000000p-4f, -0x1.a000000000000p-4f, -0x1.c000000000000p-4f, -0x1.e000000000000p-4f,
    -0x1.0000000000000p-3f, -0x1.2000000000000p-3f, -0x1.4000000000000p-3f, -0x1.6000000000000p-3f,
    -0x1.8000000000000p-3f, -0x1.a000000000000p-3f, -0x1.c000000000000p-3f, -0x1.e000000000000p-3f,
    -0x1.0000000000000p-2f, -0x1.2000000000000p-2f, -0x1.4000000000000p-2f, -0x1.6000000000000p-2f,
    -0x1.8000000000000p-2f, -0x1.a000000000000p-2f, -0x1.c000000000000p-2f, -0x1.e000000000000p-2f,
    -0x1.0000000000000p-1f, -0x1.2000000000000p-1f, -0x1.4000000000000p-1f, -0x1.6000000000000p-1f,
    -0x1.8000000000000p-1f, -0x1.a000000000000p-1f, -0x1.c000000000000p-1f, -0x1.e000000000000p-1f,
    -0x1.0000000000000p+0f, -0x1.2000000000000p+0f, -0x1.4000000000000p+0f, -0x1.6000000000000p+0f,
    -0x1.8000000000000p+0f, -0x1.a000000000000p+0f, -0x1.c000000000000p+0f, -0x1.e000000000000p+0f,
    -0x1.0000000000000p+1f, -0x1.2000000000000p+1f, -0x1.4000000000000p+1f, -0x1.6000000000000p+1f,
    -0x1.8000000000000p+1f, -0x1.a000000000000p+1f, -0x1.c000000000000p+1f, -0x1.e000000000000p+1f,
    -0x1.0000000000000p+2f, -0x1.2000000000000p+2f, -0x1.4000000000000p+2f, -0x1.6000000000000p+2f,
    -0x1.8000000000000p+2f, -0x1.a000000000000p+2f, -0x1.c000000000000p+2f, -0x1.e000000000000p+2f,
    -0x1.0000000000000p+3f, -0x1.2000000000000p+3f, -0x1.4000000000000p+3f, -0x1.6000000000000p+3f,
    -0x1.8000000000000p+3f, -0x1.a000000000000p+3f, -0x1.c000000000000p+3f, -0x1.e000000000000p+3f,
    -0x1.0000000000000p+4f, -0x1.2000000000000p+4f, -0x1.4000000000000p+4f, -0x1.6000000000000p+4f,
    -0x1.8000000000000p+4f, -0x1.a000000000000p+4f, -0x1.c000000000000p+4f, -0x1.e000000000000p+4f,
    -0x1.0000000000000p+5f, -0x1.2000000000000p+5f, -0x1.4000000000000p+5f, -0x1.6000000000000p+5f,
    -0x1.8000000000000p+5f, -0x1.a000000000000p+5f, -0x1.c000000000000p+5f, -0x1.e000000000000p+5f,
    -0x1.0000000000000p+6f, -0x1.2000000000000p+6f, -0x1.4000000000000p+6f, -0x1.6000000000000p+6f,
    -0x1.8000000000000p+6f, -0x1.a000000000000p+6f, -0x1.c000000000000p+6f, -0x1.e000000000000p+6f,
    -0x1.0000000000000p+7f, -0x1.2000000000000p+7f, -0x1.4000000000000p+7f, -0x1.6000000000000p+7f,
    -0x1.8000000000000p+7f, -0x1.a000000000000p+7f, -0x1.c000000000000p+7f, -0x1.e000000000000p+7f,
    -0x1.0000000000000p+8f, -0x1.2000000000000p+8f, -0x1.4000000000000p+8f, -0x1.6000000000000p+8f,
    -0x1.8000000000000p+8f, -0x1.a000000000000p+8f, -0x1.c000000000000p+8f, NAN,
};

uint8_t l8_f32_to_e4m3(float f)
{
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    float a = fabsf(f);

    if (isnan(f))
        return 0x7f;
    if (a >= L8_FP8_MAX)                      /* saturate, infinities too */
        return sign | 0x7e;
    if (a < ldexpf(1.0f, -6)) {
        /* Subnormal range: a multiple of 2^-9. rintf rounds to nearest even
         * in the default rounding mode; the product is exact. */
        float m = rintf(a * 512.0f);          /* 0..8; 8 becomes the min normal */
        return sign | (uint8_t)m;
    }
    /* Normal: keep 3 of f32's 23 mantissa bits, round to nearest even. */
    uint32_t au = f32_bits(a);
    uint32_t lsb = (au >> 20) & 1;
    au += 0x7ffff + lsb;
    int exp = (int)(au >> 23) - 127 + 7;
    uint32_t man = (au >> 20) & 7;
    if (exp > 15 || (exp == 15 && man == 7))  /* rounded past 448 */
        return sign | 0x7e;
    return sign | (uint8_t)(exp << 3) | (uint8_t)man;
}

uint16_t l8_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float l8_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        float r = ldexpf((float)man, -24);
        return sign ? -r : r;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000 | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t l8_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (isnan(f))
        return sign | 0x7e00;
    if (a >= 65520.0f)                        /* rounds to infinity */
        return sign | 0x7c00;
    if (a < ldexpf(1.0f, -14))                /* subnormal: multiple of 2^-24 */
        return sign | (uint16_t)rintf(a * 16777216.0f);
    uint32_t au = f32_bits(a);
    au += 0xfff + ((au >> 13) & 1);
    return sign | (uint16_t)(((au >> 23) - 112) << 10 | ((au >> 13) & 0x3ff));
}

float l8_quantize_act_row(const float *x, size_t n, uint8_t *q)
{
    /* The ternary is fmaxf here (a NaN element compares false and is
     * skipped, as fmaxf skips it; amax itself is never NaN) without the
     * libm call, so the loop vectorizes to maxps. */
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float scale = fmaxf(amax / L8_FP8_MAX, L8_FP8_MIN_ACT_SCALE);
    for (size_t i = 0; i < n; i++)
        q[i] = l8_f32_to_e4m3(x[i] / scale);
    return scale;
}

uint16_t l8_quantize_weight_row(const float *w, size_t n, uint8_t *q)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(w[i]);
        amax = a > amax ? a : amax;      /* fmaxf without libm: see above */
    }
    /* compressed-tensors clamps the scale at f32 epsilon, then stores it
     * in the checkpoint's dtype (BF16); the weights divide by the stored
     * value so that dequantization (q * s) is consistent. */
    uint16_t s = l8_f32_to_bf16(fmaxf(amax / L8_FP8_MAX, FLT_EPSILON));
    float sf = l8_bf16_to_f32(s);
    for (size_t i = 0; i < n; i++)
        q[i] = l8_f32_to_e4m3(w[i] / sf);
    return s;
}

/* Bytes the finders OR together before they look at a hit: small enough to
 * stay in L1, large enough that the test-and-branch costs nothing. */
#define SCAN_BLOCK 256

/* 16 bytes a step (one SSE2 or NEON register): the vectorizer leaves the
 * plain 64-bit loop scalar at -O2, at half the memory's speed. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));

/* A number of es bytes is NaN or infinite when its bits under m (the
 * exponent; E4M3: exponent and mantissa) are all ones. For a 64-bit word of
 * such lanes, (w & M) + LOW sets a lane's top bit exactly when that lane's
 * bits under m are all ones, and never carries into the next lane (m leaves
 * the top bit clear), so one add and two ands test eight bytes. A block
 * with a hit is searched number by number for the first. Inlined into each
 * finder, so the masks are constants. */
static inline __attribute__((always_inline)) size_t
find_all_ones(const uint8_t *p, size_t n, size_t es, uint32_t m)
{
    uint64_t M = 0, LOW = 0, TOP = 0;
    for (size_t k = 0; k < 8; k += es) {
        M |= (uint64_t)m << (8 * k);
        LOW |= (uint64_t)(m & -m) << (8 * k);
        TOP |= (uint64_t)1 << (8 * (k + es) - 1);
    }
    const u64x2 M2 = { M, M }, LOW2 = { LOW, LOW }, TOP2 = { TOP, TOP };
    const size_t bytes = n * es;
    size_t b = 0;
    for (; b + SCAN_BLOCK <= bytes; b += SCAN_BLOCK) {
        u64x2 hit = { 0, 0 };
        for (size_t k = 0; k < SCAN_BLOCK; k += sizeof hit) {
            u64x2 w;
            memcpy(&w, p + b + k, sizeof w);
            hit |= ((w & M2) + LOW2) & TOP2;
        }
        if (hit[0] | hit[1])
            break;
    }
    for (size_t i = b / es; i < n; i++) {
        uint32_t v = 0;
        memcpy(&v, p + i * es, es);     /* little-endian host, as the reader */
        if ((v & m) == m)
            return i;
    }
    return n;
}

size_t l8_find_nonfinite_e4m3(const void *p, size_t n) { return find_all_ones(p, n, 1, 0x7f); }
size_t l8_find_nonfinite_bf16(const void *p, size_t n) { return find_all_ones(p, n, 2, 0x7f80); }
size_t l8_find_nonfinite_f16(const void *p, size_t n) { return find_all_ones(p, n, 2, 0x7c00); }
size_t l8_find_nonfinite_f32(const void *p, size_t n)
{
    return find_all_ones(p, n, 4, 0x7f800000u);
}
