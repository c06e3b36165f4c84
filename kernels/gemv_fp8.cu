/* gemv_fp8.cu - weight-streaming products for small M (decode).
 *
 * Memory-bound: at batch 1 every weight byte is used once per token, so the
 * kernel is built to read W near HBM bandwidth: each lane loads 16 bytes of
 * a row per step (FP8: 16 weights), a warp owns ROWS rows over the full K,
 * and GEMV_UNROLL steps of loads are issued before the first is used.
 * Weights are decoded in registers (E4M3 -> f16 pairs in hardware on sm_89+,
 * exact), multiplied in f32 with up to MT token rows, reduced across the
 * warp once, and the per-row weight scale (and the per-token activation
 * scale) applied once at the end.
 *
 * v1: warp per 2 rows, 4 steps in flight, x read through L1 (it is reused by
 *     every warp of the block and by every block).  Compute per weight byte
 *     grows with MT; past MT ~ 4-8 the cuBLASLt path wins (measured by
 *     tests/gpu/bench_kernels).
 * v1.2: programmatic dependent launch on sm_90 (l8k_launch): the first
 *     group of weight loads is issued before waiting for the kernel before
 *     (the RMSNorm, quantize or SiLU that writes x).
 * v1.3: each load slot is refilled as soon as it is decoded, so the loads
 *     stay in flight through the products (v1 issued a group, used it, then
 *     issued the next: nothing in flight while it computed).
 * v1.5: the qkv product can end in RoPE and the KV append (rope.cu's
 *     arithmetic, bitwise): a warp then owns a rotation pair of rows (i and
 *     i + D/2 of one head), so lane 0 holds both after the reduction; the
 *     sine and cosine are computed while the first weights are in flight.
 *     A decode step loses a kernel a layer (rope_kv), and with it one wait
 *     for the kernel before. */
#include <type_traits>
#include "common.cuh"

#define GEMV_THREADS 256
#define GEMV_WARPS (GEMV_THREADS / 32)
#define GEMV_ROWS 2
#define GEMV_UNROLL 4
#define GEMV_MAX_MT 8

template <int DT> struct dt_bytes;
template <> struct dt_bytes<L8K_FP8> { static constexpr int v = 1; };
template <> struct dt_bytes<L8K_BF16> { static constexpr int v = 2; };
template <> struct dt_bytes<L8K_F32> { static constexpr int v = 4; };

/* n consecutive elements (n = 16 / weight bytes) of dtype DT at p -> f32. */
template <int DT, int N>
__device__ __forceinline__ void load_decode(const void *p, float (&f)[N])
{
    if constexpr (DT == L8K_F32) {
        const float4 *v = (const float4 *)p;
#pragma unroll
        for (int j = 0; j < N / 4; j++) {
            float4 a = v[j];
            f[4 * j] = a.x; f[4 * j + 1] = a.y; f[4 * j + 2] = a.z; f[4 * j + 3] = a.w;
        }
    } else if constexpr (DT == L8K_BF16) {
        const uint4 *v = (const uint4 *)p;
#pragma unroll
        for (int j = 0; j < N / 8; j++) {
            uint4 a = v[j];
            uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                f[8 * j + 2 * q] = __uint_as_float(w[q] << 16);
                f[8 * j + 2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
            }
        }
    } else {
        const uint4 *v = (const uint4 *)p;
#pragma unroll
        for (int j = 0; j < N / 16; j++) {
            uint4 a = v[j];
            uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float2 lo = l8k_fp8x2_to_float2((uint16_t)(w[q] & 0xffff));
                float2 hi = l8k_fp8x2_to_float2((uint16_t)(w[q] >> 16));
                f[16 * j + 4 * q] = lo.x; f[16 * j + 4 * q + 1] = lo.y;
                f[16 * j + 4 * q + 2] = hi.x; f[16 * j + 4 * q + 3] = hi.y;
            }
        }
    }
}

/* 16 raw bytes -> EPL floats of dtype DT (EPL = 16 / bytes(DT)). */
template <int DT, int EPL>
__device__ __forceinline__ void decode16(uint4 a, float (&f)[EPL])
{
    load_decode<DT, EPL>(&a, f);
}

/* The RoPE epilogue's arguments (l8k_gemv_qkv_rope), by value. */
struct rope_args {
    const int32_t *pos, *slot_map;   /* [Mv] of this launch */
    const float *inv_freq;           /* [D / 2] */
    uint32_t nh, nkv, D, page_size;
    void *kb, *vb;
};

/* KVT: -1 a plain product; L8K_F32 / L8K_BF16: the qkv product with RoPE
 * and the append to a pool of that dtype. */
template <int WT, int XT, int MT, int KVT>
static __global__ __launch_bounds__(GEMV_THREADS) void gemv_kernel(
    const uint8_t *__restrict__ W, const float *__restrict__ ws, const uint8_t *__restrict__ X,
    const float *__restrict__ xs, uint32_t Mv, uint32_t N, uint32_t K, float *__restrict__ Y,
    uint32_t ldy, rope_args ra)
{
    constexpr bool ROPE = KVT >= 0;
    static_assert(!ROPE || GEMV_ROWS == 2, "a rotation pair is two rows");
    constexpr int WB = dt_bytes<WT>::v, XB = dt_bytes<XT>::v;
    constexpr int EPL = 16 / WB;           /* weights per lane per step */
    constexpr uint32_t STEP = 32 * EPL;    /* weights per warp per step */
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t gw = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    /* The warp's rows: 2 consecutive, or with RoPE the pair (i, i + D/2)
     * of head h (q heads, then k, then v). */
    uint32_t rows[GEMV_ROWS], head = 0, pair = 0;
    if constexpr (ROPE) {
        head = gw / (ra.D / 2);
        pair = gw % (ra.D / 2);
        rows[0] = head * ra.D + pair;
        rows[1] = rows[0] + ra.D / 2;
    } else {
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            rows[r] = gw * GEMV_ROWS + r;
    }
    const bool rotate = ROPE && head < ra.nh + ra.nkv;

    float acc[MT][GEMV_ROWS];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            acc[m][r] = 0.0f;

    const size_t wrow = (size_t)K * WB, xrow = (size_t)K * XB;
    /* Groups of GEMV_UNROLL steps: all loads of a group first (GEMV_UNROLL x
     * ROWS x 16 bytes in flight per lane), then their products. Weights are
     * streamed (evict-first): they are not re-read within a step. */
    uint4 wv[GEMV_UNROLL][GEMV_ROWS] = {};   /* rows past N stay 0 */
    auto load = [&](int u, int r, uint32_t k) {
        if (k < K && rows[r] < N)
            wv[u][r] = __ldcs((const uint4 *)(W + rows[r] * wrow + (size_t)k * WB));
    };
    uint32_t k0 = lane * EPL;
    /* The first group of weights does not depend on the kernel before this
     * one: with PDL it is in flight while that kernel finishes. X, xs and Y
     * do depend on it. */
    if (rows[0] < N) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++)
                load(u, r, k0 + u * STEP);
    }
    /* With RoPE, lane m's token's slot and the angle's cosine and sine as
     * rope_kv_kernel has them (f64, rounded to f32), before the wait:
     * positions and slots are step metadata, copied in before the step and
     * never written by a kernel, and the sincos runs while the weights
     * load. */
    float cos_l = 0.0f, sin_l = 0.0f;
    int32_t slot_l = -1;
    if (rotate && lane < Mv) {
        double sn, cs;
        sincos((double)ra.pos[lane] * (double)ra.inv_freq[pair], &sn, &cs);
        cos_l = (float)cs;
        sin_l = (float)sn;
    }
    if (ROPE && head >= ra.nh && lane < Mv)
        slot_l = ra.slot_map[lane];
    l8k_pdl_wait();
    if (rows[0] >= N)
        return;
    while (k0 < K) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            uint32_t k = k0 + u * STEP;
            if (k >= K)
                break;
            /* Each slot is refilled with the next group's step as soon as
             * it is decoded, so GEMV_UNROLL steps stay in flight (rather
             * than none while a group's products are computed). */
            float wf[GEMV_ROWS][EPL];
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++) {
                decode16<WT, EPL>(wv[u][r], wf[r]);
                load(u, r, k + GEMV_UNROLL * STEP);
            }
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if ((uint32_t)m >= Mv)
                    break;
                float xf[EPL];
                load_decode<XT, EPL>(X + m * xrow + (size_t)k * XB, xf);
#pragma unroll
                for (int r = 0; r < GEMV_ROWS; r++)
#pragma unroll
                    for (int e = 0; e < EPL; e++)
                        acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
            }
        }
        k0 += STEP * GEMV_UNROLL;
    }
    l8k_pdl_allow();   /* every load issued: the next kernel may be scheduled */

    /* The epilogue's scales, loaded now (a lane each) so the warp's
     * reduction below hides their latency; loaded before the loop they
     * would hold registers through it (64 -> 68: 3 blocks an SM, not 4). */
    float wsr[GEMV_ROWS], xs_l = 0.0f;
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
        wsr[r] = ws && rows[r] < N ? ws[rows[r]] : 1.0f;
    if (XT == L8K_FP8 && lane < Mv)
        xs_l = xs[lane];

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            acc[m][r] = l8k_warp_sum(acc[m][r]);
    float cs[MT], sn[MT], xsm[MT];
    int32_t slot[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if (XT == L8K_FP8)
            xsm[m] = __shfl_sync(0xffffffffu, xs_l, m);
        if constexpr (ROPE) {
            cs[m] = __shfl_sync(0xffffffffu, cos_l, m);
            sn[m] = __shfl_sync(0xffffffffu, sin_l, m);
            slot[m] = __shfl_sync(0xffffffffu, slot_l, m);
        }
    }
    if (lane != 0)
        return;
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if ((uint32_t)m >= Mv)
            break;
        float v[GEMV_ROWS];
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            v[r] = acc[m][r];
            if (ws)
                v[r] *= wsr[r];
            if (XT == L8K_FP8)
                v[r] *= xsm[m];
        }
        if constexpr (ROPE) {
            /* rope_kv_kernel's rotation and store (common.cuh). */
            if (rotate)
                l8k_rope_rotate(v[0], v[1], cs[m], sn[m]);
            const int32_t sm = slot[m];
            if (head >= ra.nh && sm >= 0) {
                const bool is_k = head < ra.nh + ra.nkv;
                const uint32_t hk = head - ra.nh - (is_k ? 0 : ra.nkv);
                using KV = typename std::conditional<KVT == L8K_F32, float, uint16_t>::type;
                KV *p = (KV *)(is_k ? ra.kb : ra.vb) +
                        l8k_kv_row((uint32_t)sm / ra.page_size, ra.nkv, hk, ra.page_size,
                                   (uint32_t)sm % ra.page_size, ra.D) + pair;
                l8k_store(p, v[0]);
                l8k_store(p + ra.D / 2, v[1]);
            }
        }
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            if (rows[r] < N)
                Y[(size_t)m * ldy + rows[r]] = v[r];
    }
}

template <int WT, int XT, int KVT = -1>
static int launch_mt(const void *w, const float *ws, const void *x, const float *xs, uint32_t M,
                     uint32_t N, uint32_t K, float *y, uint32_t ldy, rope_args ra,
                     cudaStream_t st)
{
    const uint32_t rows_per_block = GEMV_WARPS * GEMV_ROWS;
    dim3 grid((N + rows_per_block - 1) / rows_per_block);
    const size_t xrow = (size_t)K * dt_bytes<XT>::v;
    for (uint32_t m0 = 0; m0 < M; m0 += GEMV_MAX_MT) {
        uint32_t mv = M - m0 < GEMV_MAX_MT ? M - m0 : GEMV_MAX_MT;
        const uint8_t *xp = (const uint8_t *)x + m0 * xrow;
        const float *xsp = xs ? xs + m0 : NULL;
        float *yp = y + (size_t)m0 * ldy;
        const uint8_t *wp = (const uint8_t *)w;
        rope_args rm = ra;
        if (KVT >= 0) {
            rm.pos += m0;
            rm.slot_map += m0;
        }
        void (*k)(const uint8_t *, const float *, const uint8_t *, const float *, uint32_t,
                  uint32_t, uint32_t, float *, uint32_t, rope_args) =
            mv == 1 ? gemv_kernel<WT, XT, 1, KVT> : mv == 2 ? gemv_kernel<WT, XT, 2, KVT>
                                                  : mv <= 4 ? gemv_kernel<WT, XT, 4, KVT>
                                                            : gemv_kernel<WT, XT, 8, KVT>;
        int rc = l8k_launch(KVT >= 0 ? "gemv_rope_kernel" : "gemv_kernel", k, grid,
                            dim3(GEMV_THREADS), st, wp, ws, xp, xsp, mv, N, K, yp, ldy, rm);
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int l8k_gemv(const void *w, enum l8k_dtype w_dt, const float *w_scale, const void *x,
                        enum l8k_dtype x_dt, const float *x_scale, uint32_t M, uint32_t N,
                        uint32_t K, float *y, uint32_t ldy, cudaStream_t st)
{
    if (!w || !x || !y || N == 0 || K == 0 || ldy < N || K % 16 || !l8k_aligned16(w) ||
        !l8k_aligned16(x))
        return -EINVAL;
    if ((w_dt == L8K_FP8) != (w_scale != NULL) || (x_dt == L8K_FP8) != (x_scale != NULL))
        return -EINVAL;
    if (M == 0)
        return 0;
    if (w_dt == L8K_FP8) {
        if (x_dt == L8K_F32)
            return launch_mt<L8K_FP8, L8K_F32>(w, w_scale, x, NULL, M, N, K, y, ldy, {}, st);
        if (x_dt == L8K_BF16)
            return launch_mt<L8K_FP8, L8K_BF16>(w, w_scale, x, NULL, M, N, K, y, ldy, {}, st);
        if (x_dt == L8K_FP8)
            return launch_mt<L8K_FP8, L8K_FP8>(w, w_scale, x, x_scale, M, N, K, y, ldy, {}, st);
    } else if (w_dt == L8K_BF16 && x_dt == L8K_F32) {
        return launch_mt<L8K_BF16, L8K_F32>(w, NULL, x, NULL, M, N, K, y, ldy, {}, st);
    } else if (w_dt == L8K_F32 && x_dt == L8K_F32) {
        return launch_mt<L8K_F32, L8K_F32>(w, NULL, x, NULL, M, N, K, y, ldy, {}, st);
    }
    return -EINVAL;
}

extern "C" int l8k_gemv_qkv_rope(const uint8_t *w, const float *w_scale, const void *x,
                                 enum l8k_dtype x_dt, const float *x_scale, uint32_t M,
                                 uint32_t K, float *y, uint32_t ldy, const int32_t *pos,
                                 const float *inv_freq, uint32_t nh, uint32_t nkv, uint32_t D,
                                 void *k_base, void *v_base, enum l8k_dtype kv_dt,
                                 uint32_t page_size, const int32_t *slot_map, cudaStream_t st)
{
    const uint32_t N = (nh + 2 * nkv) * D;
    if (!w || !w_scale || !x || !y || !pos || !inv_freq || !k_base || !v_base || !slot_map ||
        K == 0 || K % 16 || nh == 0 || nkv == 0 || D == 0 || D % 2 || page_size == 0 ||
        ldy < N || !l8k_aligned16(w) || !l8k_aligned16(x) ||
        (x_dt == L8K_FP8) != (x_scale != NULL) || (x_dt != L8K_FP8 && x_dt != L8K_F32) ||
        (kv_dt != L8K_F32 && kv_dt != L8K_BF16))
        return -EINVAL;
    if (M == 0)
        return 0;
    const rope_args ra = { pos, slot_map, inv_freq, nh, nkv, D, page_size, k_base, v_base };
    if (x_dt == L8K_FP8)
        return kv_dt == L8K_F32
                   ? launch_mt<L8K_FP8, L8K_FP8, L8K_F32>(w, w_scale, x, x_scale, M, N, K, y, ldy, ra, st)
                   : launch_mt<L8K_FP8, L8K_FP8, L8K_BF16>(w, w_scale, x, x_scale, M, N, K, y, ldy, ra, st);
    return kv_dt == L8K_F32
               ? launch_mt<L8K_FP8, L8K_F32, L8K_F32>(w, w_scale, x, NULL, M, N, K, y, ldy, ra, st)
               : launch_mt<L8K_FP8, L8K_F32, L8K_BF16>(w, w_scale, x, NULL, M, N, K, y, ldy, ra, st);
}
