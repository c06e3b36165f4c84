/* test_numerics.c - E4M3, BF16 and F16 codecs on every code point, the
 * two FP8 quantizers against their definitions in numerics.h, and the
 * load-time finders of NaN and infinity (every code point of each 8- and
 * 16-bit format, at every alignment, in awkward lengths). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "numerics.h"
#include "testutil.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* E4M3fn from its definition, in double, written independently of
 * numerics.c: sign, 4-bit exponent (bias 7), 3-bit mantissa, S.1111.111 NaN. */
static double e4m3_def(unsigned c)
{
    unsigned s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}

static bool e4m3_finite(unsigned c) { return (c & 0x7f) != 0x7f; }

static void test_e4m3(void)
{
    /* Decode: every code against the table and the definition. */
    for (unsigned c = 0; c < 256; c++) {
        double d = e4m3_def(c);
        float f = l8_e4m3_to_f32((uint8_t)c), t = l8_e4m3_lut[c];
        if (isnan(d)) {
            CHECK(isnan(f) && isnan(t));
            continue;
        }
        CHECK(bits(f) == bits((float)d));   /* bitwise: -0 keeps its sign */
        CHECK(bits(t) == bits((float)d));
    }
    CHECK(l8_e4m3_lut[0x7e] == 448.0f && l8_e4m3_lut[0x01] == 0x1p-9f &&
          l8_e4m3_lut[0x08] == 0x1p-6f && l8_e4m3_lut[0x38] == 1.0f);

    /* Round trip, every finite code including -0 and subnormals. */
    int rt_bad = 0;
    for (unsigned c = 0; c < 256; c++)
        if (e4m3_finite(c) && l8_f32_to_e4m3(l8_e4m3_to_f32((uint8_t)c)) != c)
            rt_bad++;
    CHECK(rt_bad == 0);
    CHECK(l8_f32_to_e4m3(-0.0f) == 0x80);
    CHECK(l8_f32_to_e4m3(0.0f) == 0x00);

    /* Midpoints between neighbours round to the even code; anything
     * strictly off the midpoint goes to the nearer code. */
    int mid_bad = 0;
    for (unsigned c = 0; c < 0x7e; c++) {
        for (unsigned sgn = 0; sgn < 2; sgn++) {
            unsigned a = c | sgn << 7, b = (c + 1) | sgn << 7;
            float va = l8_e4m3_lut[a], vb = l8_e4m3_lut[b];
            float mid = (float)(((double)va + (double)vb) / 2);   /* exact in f32 */
            unsigned even = (a & 1) ? b : a;
            if (l8_f32_to_e4m3(mid) != even)
                mid_bad++;
            float below = nextafterf(mid, va), above = nextafterf(mid, vb);
            if (l8_f32_to_e4m3(below) != a || l8_f32_to_e4m3(above) != b)
                mid_bad++;
        }
    }
    CHECK(mid_bad == 0);
    /* Examples by hand: 1.0625 lies between 1 (0x38) and 1.125 (0x39): even
     * is 0x38; 1.1875 between 1.125 (0x39) and 1.25 (0x3a): even is 0x3a. */
    CHECK(l8_f32_to_e4m3(1.0625f) == 0x38);
    CHECK(l8_f32_to_e4m3(1.1875f) == 0x3a);
    CHECK(l8_f32_to_e4m3(0x1p-10f) == 0x00);          /* half the smallest subnormal */
    CHECK(l8_f32_to_e4m3(nextafterf(0x1p-10f, 1)) == 0x01);
    CHECK(l8_f32_to_e4m3(3 * 0x1p-10f) == 0x02);      /* 1.5 * 2^-9: even is 2 */
    CHECK(l8_f32_to_e4m3(15 * 0x1p-10f) == 0x08);     /* 7.5 * 2^-9 rounds up to 2^-6 */

    /* Saturation: 448 is the largest finite value; beyond it and the
     * infinities clamp to +-448. */
    CHECK(l8_f32_to_e4m3(448.0f) == 0x7e);
    CHECK(l8_f32_to_e4m3(-448.0f) == 0xfe);
    CHECK(l8_f32_to_e4m3(449.0f) == 0x7e);
    CHECK(l8_f32_to_e4m3(464.0f) == 0x7e);   /* would round to 480 unclamped */
    CHECK(l8_f32_to_e4m3(500.0f) == 0x7e);
    CHECK(l8_f32_to_e4m3(1e30f) == 0x7e);
    CHECK(l8_f32_to_e4m3(-1e30f) == 0xfe);
    CHECK(l8_f32_to_e4m3(INFINITY) == 0x7e);
    CHECK(l8_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK(l8_f32_to_e4m3(FLT_MAX) == 0x7e);
    CHECK((l8_f32_to_e4m3(NAN) & 0x7f) == 0x7f);
    CHECK((l8_f32_to_e4m3(-NAN) & 0x7f) == 0x7f);
    CHECK(isnan(l8_e4m3_to_f32(l8_f32_to_e4m3(NAN))));
    /* Tiny values flush to signed zero. */
    CHECK(l8_f32_to_e4m3(1e-30f) == 0x00);
    CHECK(l8_f32_to_e4m3(-1e-30f) == 0x80);
}

static void test_bf16(void)
{
    int rt_bad = 0, mid_bad = 0, nan_bad = 0;
    for (uint32_t c = 0; c < 65536; c++) {
        float f = l8_bf16_to_f32((uint16_t)c);
        CHECK(bits(f) == c << 16);
        if (isnan(f)) {
            if (!isnan(l8_bf16_to_f32(l8_f32_to_bf16(f))))
                nan_bad++;
            continue;
        }
        if (l8_f32_to_bf16(f) != c)
            rt_bad++;
        /* f32 with the low half 0x8000 is the exact midpoint to the next
         * code up in magnitude; 0x7fff and 0x8001 are just off it. */
        if ((c & 0x7fff) >= 0x7f80)
            continue;   /* inf: no next code */
        uint16_t even = (c & 1) ? (uint16_t)(c + 1) : (uint16_t)c;
        if (l8_f32_to_bf16(from_bits(c << 16 | 0x8000)) != even)
            mid_bad++;
        if (l8_f32_to_bf16(from_bits(c << 16 | 0x7fff)) != c ||
            l8_f32_to_bf16(from_bits(c << 16 | 0x8001)) != c + 1)
            mid_bad++;
    }
    CHECK(rt_bad == 0);
    CHECK(mid_bad == 0);
    CHECK(nan_bad == 0);
    CHECK(l8_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(l8_f32_to_bf16(-2.0f) == 0xc000);
    CHECK(l8_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(l8_f32_to_bf16(FLT_MAX) == 0x7f80);  /* rounds up past the largest bf16 */
}

/* F16 from its definition in double. */
static double f16_def(unsigned h)
{
    unsigned s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
    return s ? -v : v;
}

static void test_f16(void)
{
    int dec_bad = 0, rt_bad = 0, mid_bad = 0;
    for (uint32_t c = 0; c < 65536; c++) {
        float f = l8_f16_to_f32((uint16_t)c);
        double d = f16_def(c);
        if (isnan(d)) {
            if (!isnan(f) || !isnan(l8_f16_to_f32(l8_f32_to_f16(f))))
                dec_bad++;
            continue;
        }
        if (bits(f) != bits((float)d))
            dec_bad++;
        if (l8_f32_to_f16(f) != c)
            rt_bad++;
        if ((c & 0x7fff) >= 0x7bff)
            continue;   /* the next code up is inf: checked below */
        float next = l8_f16_to_f32((uint16_t)(c + 1));
        float mid = (float)(((double)f + (double)next) / 2);
        uint16_t even = (c & 1) ? (uint16_t)(c + 1) : (uint16_t)c;
        if (l8_f32_to_f16(mid) != even)
            mid_bad++;
        if (l8_f32_to_f16(nextafterf(mid, f)) != c || l8_f32_to_f16(nextafterf(mid, next)) != c + 1)
            mid_bad++;
    }
    CHECK(dec_bad == 0);
    CHECK(rt_bad == 0);
    CHECK(mid_bad == 0);
    CHECK(l8_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(l8_f32_to_f16(65520.0f) == 0x7c00);             /* midpoint to inf: even */
    CHECK(l8_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7bff);
    CHECK(l8_f32_to_f16(-65520.0f) == 0xfc00);
    CHECK(l8_f32_to_f16(1e6f) == 0x7c00);
    CHECK(l8_f32_to_f16(-INFINITY) == 0xfc00);
}

static void test_act_quant(void)
{
    /* By hand: absmax 896 gives scale exactly 2. */
    float x[6] = { 0.0f, 896.0f, -896.0f, 1.0f, -0.75f, 3.0f };
    uint8_t q[6];
    float s = l8_quantize_act_row(x, 6, q);
    CHECK(s == 2.0f);
    CHECK(q[0] == 0x00 && q[1] == 0x7e && q[2] == 0xfe);
    CHECK(q[3] == 0x30);                 /* 0.5 = 2^-1: exponent 6 */
    CHECK(q[4] == 0xac);                 /* -0.375 = -1.5 * 2^-2: exp 5, man 4 */
    CHECK(q[5] == 0x3c);                 /* 1.5 */

    /* All zero: zeros and the minimum scale, never NaN or a division by 0. */
    float z[16] = { 0 };
    uint8_t qz[16];
    memset(qz, 0xaa, sizeof qz);
    float sz = l8_quantize_act_row(z, 16, qz);
    CHECK(sz == L8_FP8_MIN_ACT_SCALE && isfinite(sz) && sz > 0);
    for (int i = 0; i < 16; i++)
        CHECK(qz[i] == 0);

    /* Random rows against the definition: scale = max(absmax/448, min) in
     * f32; q = E4M3(x / scale). The absmax element maps to +-448. */
    uint64_t seed = 1;
    float r[777];
    uint8_t qr[777];
    for (int rep = 0; rep < 50; rep++) {
        float mag = ldexpf(1.0f, rep % 40 - 30);
        float amax = 0;
        size_t imax = 0;
        for (size_t i = 0; i < 777; i++) {
            r[i] = t_randf(&seed) * mag;
            if (fabsf(r[i]) > amax) {
                amax = fabsf(r[i]);
                imax = i;
            }
        }
        float want = fmaxf(amax / 448.0f, L8_FP8_MIN_ACT_SCALE);
        float got = l8_quantize_act_row(r, 777, qr);
        CHECK(bits(got) == bits(want));
        int bad = 0;
        for (size_t i = 0; i < 777; i++)
            if (qr[i] != l8_f32_to_e4m3(r[i] / want))
                bad++;
        CHECK(bad == 0);
        if (want > L8_FP8_MIN_ACT_SCALE)
            CHECK((qr[imax] & 0x7f) == 0x7e);
    }
}

static void test_weight_quant(void)
{
    /* By hand: absmax 1 -> s = BF16(1/448). 1/448 = 0x1.2492...p-9, BF16
     * keeps 7 mantissa bits: 0x1.24p-9 (0x3b12). */
    float w[4] = { 1.0f, -0.5f, 0.0f, 0.25f };
    uint8_t q[4];
    uint16_t s = l8_quantize_weight_row(w, 4, q);
    CHECK(s == 0x3b12);
    float sf = l8_bf16_to_f32(s);
    CHECK(sf == 0x1.24p-9f);
    /* 1 / 0x1.24p-9 = 448.9 > 448: saturates; BF16 rounding of the scale
     * downwards is why the recipe must clamp. */
    CHECK(q[0] == 0x7e);
    CHECK(q[1] == l8_f32_to_e4m3(-0.5f / sf) && q[1] == 0xf6);  /* -224.4 -> -224 */
    CHECK(q[2] == 0);
    CHECK(q[3] == 0x6e);                                        /* 112.2 -> 112 */

    /* All-zero row: scale clamps at FLT_EPSILON (in BF16), codes zero. */
    float z[8] = { 0 };
    uint8_t qz[8];
    memset(qz, 0x55, sizeof qz);
    uint16_t sz = l8_quantize_weight_row(z, 8, qz);
    CHECK(sz == 0x3400 && l8_bf16_to_f32(sz) == FLT_EPSILON);
    for (int i = 0; i < 8; i++)
        CHECK(qz[i] == 0);

    /* Random rows against the recipe. */
    uint64_t seed = 7;
    float r[300];
    uint8_t qr[300];
    for (int rep = 0; rep < 50; rep++) {
        float amax = 0;
        for (int i = 0; i < 300; i++) {
            r[i] = t_randf(&seed) * ldexpf(1.0f, rep % 20 - 12);
            amax = fmaxf(amax, fabsf(r[i]));
        }
        uint16_t want = l8_f32_to_bf16(fmaxf(amax / 448.0f, FLT_EPSILON));
        uint16_t got = l8_quantize_weight_row(r, 300, qr);
        CHECK(got == want);
        float g = l8_bf16_to_f32(got);
        int bad = 0;
        for (int i = 0; i < 300; i++) {
            if (qr[i] != l8_f32_to_e4m3(r[i] / g))
                bad++;
            /* and the dequantized value is within half an E4M3 step */
            double dq = (double)l8_e4m3_lut[qr[i]] * g, e = fabs(dq - r[i]);
            if (fabs(r[i] / g) < 448 && e > fabs(r[i]) / 16 * (1 + 1e-6) + ldexp(1, -10) * g)
                bad++;
        }
        CHECK(bad == 0);
    }
}

/* The finders, against the codecs' own decoding of each code. */
typedef size_t finder(const void *p, size_t n);

/* An n-element buffer of finite values, misaligned by off bytes, with code
 * at index pos: the finder must answer pos if code is special (NaN or
 * infinite), whatever follows. If code is not, a NaN put just after it
 * (when there is room) must be the answer, else n. 1 when it is wrong. */
static int find_case(finder *f, size_t es, uint32_t code, bool is_special, size_t n, size_t pos,
                     size_t off)
{
    static uint8_t buf[8 + 4 * 1100];
    const uint32_t nan_code = es == 1 ? 0x7f : es == 2 ? 0x7fc0 : 0x7fc00000;
    uint8_t *p = buf + off;
    memset(p, 0x11, n * es);    /* 0x11, 0x1111, 0x11111111: finite in every format */
    memcpy(p + pos * es, &code, es);
    size_t want = n;
    if (is_special)
        want = pos;
    if (pos + 1 < n) {
        memcpy(p + (pos + 1) * es, &nan_code, es);
        if (!is_special)
            want = pos + 1;
    }
    size_t got = f(p, n);
    if (got != want) {
        fprintf(stderr, "  %zu-byte code 0x%x, n %zu, pos %zu, off %zu: got %zu, want %zu\n",
                es, code, n, pos, off, got, want);
        return 1;
    }
    return 0;
}

static void test_find_nonfinite(void)
{
    static const size_t lens[] = { 1, 2, 7, 8, 9, 19, 31, 32, 33, 63, 64, 65, 111, 127, 128, 129,
                                   255, 256, 257, 989, 1100 };
    const size_t nl = sizeof lens / sizeof lens[0];
    int bad = 0;
    /* Every code of the 8- and 16-bit formats, at a position and an
     * alignment that change with the code. */
    for (uint32_t c = 0; c < 256; c++) {
        size_t n = lens[c % nl], pos = (c * 37u) % n;
        bad += find_case(l8_find_nonfinite_e4m3, 1, c, !e4m3_finite(c), n, pos, c % 8);
    }
    for (uint32_t c = 0; c < 65536; c++) {
        size_t n = lens[c % nl], pos = (c * 37u) % n, off = (c >> 4) % 8;
        bad += find_case(l8_find_nonfinite_bf16, 2, c, !isfinite(l8_bf16_to_f32((uint16_t)c)), n,
                         pos, off);
        bad += find_case(l8_find_nonfinite_f16, 2, c, !isfinite(l8_f16_to_f32((uint16_t)c)), n,
                         pos, off);
    }
    /* F32: the specials and their neighbours, then random bits. */
    const uint32_t f32s[] = { 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
                              0x7f7fffff, 0xff7fffff, 0x00000000, 0x80000000, 0x3f800000,
                              0x007fffff, 0x7effffff };
    uint64_t seed = 7;
    for (uint32_t k = 0; k < 4000; k++) {
        uint32_t c = k < 12 * nl ? f32s[k % 12] : (uint32_t)t_rand(&seed);
        size_t n = lens[(k / 12) % nl], pos = (k * 37u) % n;
        bad += find_case(l8_find_nonfinite_f32, 4, c, !isfinite(from_bits(c)), n, pos, k % 8);
    }
    /* Every position of a NaN code, at every alignment, in a length that
     * crosses the finders' blocks. */
    for (size_t off = 0; off < 8; off++)
        for (size_t pos = 0; pos < 600; pos++) {
            bad += find_case(l8_find_nonfinite_e4m3, 1, 0xff, true, 600, pos, off);
            bad += find_case(l8_find_nonfinite_bf16, 2, 0xff80, true, 600, pos, off);
        }
    CHECK(bad == 0, "%d finder cases wrong", bad);
    CHECK(l8_find_nonfinite_e4m3("", 0) == 0 && l8_find_nonfinite_f32("", 0) == 0);
}

int main(void)
{
    test_e4m3();
    test_bf16();
    test_f16();
    test_act_quant();
    test_weight_quant();
    test_find_nonfinite();
    return t_result("test_numerics");
}
