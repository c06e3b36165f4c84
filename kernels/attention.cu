/* attention.cu - paged causal attention, decode and prefill.
 *
 * Every query row (a decoding sequence, or one token of a prefill chunk)
 * attends to positions [0, kv_len) of its sequence through the page table.
 * A block serves one (row, KV head, split): the G = nh / nkv query heads
 * that share the KV head are processed together, so each K/V element is
 * loaded once for all of them (GQA), and a long sequence is divided into
 * splits processed by separate blocks whose partial (max, sum, acc) are
 * combined afterwards (flash-decoding). Within a block, positions go in
 * chunks of D (one position per thread to score, one dimension per thread
 * to accumulate V), with the online softmax across chunks.
 *
 * Prefill rows use the same kernel (a row per token, kv_len = its position
 * + 1), which reads earlier pages for chunked prefill. It re-reads K/V per
 * query token from L2; a tensor-core tile kernel is the next step for long
 * prompts (see tests/gpu/NOTES.md).
 *
 * v1: scores and V accumulation in f32 on CUDA cores; K/V bf16 (fp8 mode) or
 *     f32 (exact mode). */
#include "common.cuh"

#define ATTN_MAX_G 8
#define ATTN_MIN_SPLIT 256   /* positions: below this a split is not worth a block */
#define ATTN_MAX_SPLITS 64

template <typename KV> struct kv_vec;
template <> struct kv_vec<float> { static constexpr int n = 4; };
template <> struct kv_vec<uint16_t> { static constexpr int n = 8; };

template <typename KV>
__device__ __forceinline__ void kv_decode16(uint4 a, float (&f)[kv_vec<KV>::n])
{
    if constexpr (sizeof(KV) == 4) {
        f[0] = __uint_as_float(a.x); f[1] = __uint_as_float(a.y);
        f[2] = __uint_as_float(a.z); f[3] = __uint_as_float(a.w);
    } else {
        uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            f[2 * q] = __uint_as_float(w[q] << 16);
            f[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
        }
    }
}

template <typename KV>
__device__ __forceinline__ float kv_load1(const KV *p)
{
    if constexpr (sizeof(KV) == 4)
        return *(const float *)p;
    else
        return l8k_bf16_to_float(*(const uint16_t *)p);
}

/* Grid (nkv, R, n_splits), block D threads. */
template <typename KV, int D>
static __global__ __launch_bounds__(D) void attn_kernel(
    const float *__restrict__ q, uint32_t ldq, const KV *__restrict__ kb,
    const KV *__restrict__ vb, uint32_t page_size, const int32_t *__restrict__ page_table,
    uint32_t pt_stride, const int32_t *__restrict__ row_seq, const int32_t *__restrict__ kv_len,
    uint32_t nh, uint32_t nkv, float softmax_scale, uint32_t max_kv_len, uint32_t span,
    float *__restrict__ work, float *__restrict__ out, uint32_t ldo)
{
    constexpr int CH = D;
    constexpr int VEC = kv_vec<KV>::n;
    __shared__ float q_s[ATTN_MAX_G][D];
    __shared__ float sc[ATTN_MAX_G][CH];
    __shared__ size_t off_s[CH];
    __shared__ float m_s[ATTN_MAX_G], l_s[ATTN_MAX_G], alpha_s[ATTN_MAX_G];

    const uint32_t h = blockIdx.x, r = blockIdx.y, split = blockIdx.z, nsplit = gridDim.z;
    const uint32_t G = nh / nkv, t = threadIdx.x;
    const uint32_t lane = t & 31, warp = t >> 5, nwarps = D / 32;
    uint32_t kvl = (uint32_t)max(kv_len[r], 0);
    if (kvl > max_kv_len)
        kvl = max_kv_len;
    const uint32_t start = split * span;
    const uint32_t end = min(start + span, kvl);
    const int32_t *pt = page_table + (size_t)max(row_seq[r], 0) * pt_stride;

    for (uint32_t g = 0; g < G; g++)
        q_s[g][t] = q[(size_t)r * ldq + (size_t)(h * G + g) * D + t] * softmax_scale;
    if (t < G) {
        m_s[t] = -INFINITY;
        l_s[t] = 0.0f;
    }
    float acc[ATTN_MAX_G];
#pragma unroll
    for (int g = 0; g < ATTN_MAX_G; g++)
        acc[g] = 0.0f;
    __syncthreads();

    for (uint32_t c0 = start; c0 < end; c0 += CH) {
        /* Phase 1: thread t scores position c0 + t for all G heads. */
        uint32_t p = c0 + t;
        float s[ATTN_MAX_G];
#pragma unroll
        for (int g = 0; g < ATTN_MAX_G; g++)
            s[g] = 0.0f;
        if (p < end) {
            uint32_t page = (uint32_t)pt[p / page_size];
            size_t off = (((size_t)page * nkv + h) * page_size + p % page_size) * D;
            off_s[t] = off;
            const uint4 *kr = (const uint4 *)(kb + off);
#pragma unroll 4
            for (int d0 = 0; d0 < D; d0 += VEC) {
                float k[VEC];
                kv_decode16<KV>(kr[d0 / VEC], k);
#pragma unroll
                for (int g = 0; g < ATTN_MAX_G; g++) {
                    if ((uint32_t)g < G) {
#pragma unroll
                        for (int e = 0; e < VEC; e++)
                            s[g] = fmaf(q_s[g][d0 + e], k[e], s[g]);
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < ATTN_MAX_G; g++)
            if ((uint32_t)g < G)
                sc[g][t] = p < end ? s[g] : -INFINITY;
        __syncthreads();

        /* Phase 2: a warp per head: chunk max, running max, weights, sum. */
        for (uint32_t g = warp; g < G; g += nwarps) {
            float mx = -INFINITY;
            for (uint32_t j = lane; j < CH; j += 32)
                mx = fmaxf(mx, sc[g][j]);
            mx = l8k_warp_max(mx);
            float m_old = m_s[g], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (uint32_t j = lane; j < CH; j += 32) {
                float e = expf(sc[g][j] - m_new);
                sc[g][j] = e;
                sum += e;
            }
            sum = l8k_warp_sum(sum);
            __syncwarp();
            if (lane == 0) {
                float a = expf(m_old - m_new);
                alpha_s[g] = a;
                l_s[g] = l_s[g] * a + sum;
                m_s[g] = m_new;
            }
        }
        __syncthreads();

        /* Phase 3: thread t accumulates dimension t of V. */
        uint32_t n = min((uint32_t)CH, end - c0);
#pragma unroll
        for (int g = 0; g < ATTN_MAX_G; g++)
            if ((uint32_t)g < G)
                acc[g] *= alpha_s[g];
#pragma unroll 4
        for (uint32_t j = 0; j < n; j++) {
            float v = kv_load1<KV>(vb + off_s[j] + t);
#pragma unroll
            for (int g = 0; g < ATTN_MAX_G; g++)
                if ((uint32_t)g < G)
                    acc[g] = fmaf(sc[g][j], v, acc[g]);
        }
        __syncthreads(); /* sc and off_s are rewritten by the next chunk */
    }

    /* Unrolled over the maximum with a guard: acc must stay in registers
     * (a run-time index would move it to local memory). */
    if (nsplit == 1) {
#pragma unroll
        for (uint32_t g = 0; g < ATTN_MAX_G; g++) {
            if (g >= G)
                break;
            float l = l_s[g];
            out[(size_t)r * ldo + (size_t)(h * G + g) * D + t] = l > 0.0f ? acc[g] / l : 0.0f;
        }
    } else {
#pragma unroll
        for (uint32_t g = 0; g < ATTN_MAX_G; g++) {
            if (g >= G)
                break;
            float *w = work + (((size_t)r * nh + h * G + g) * nsplit + split) * (D + 2);
            w[t] = acc[g];
            if (t == 0) {
                w[D] = m_s[g];
                w[D + 1] = l_s[g];
            }
        }
    }
}

/* Grid (nh, R), block D: combine the splits of one (row, head). */
template <int D>
static __global__ void attn_combine_kernel(const float *__restrict__ work, uint32_t nsplit,
                                           uint32_t nh, float *__restrict__ out, uint32_t ldo)
{
    const uint32_t hq = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
    const float *w = work + ((size_t)r * nh + hq) * nsplit * (D + 2);
    float M = -INFINITY;
    for (uint32_t s = 0; s < nsplit; s++)
        M = fmaxf(M, w[s * (D + 2) + D]);
    float num = 0.0f, den = 0.0f;
    if (M > -INFINITY) {
        for (uint32_t s = 0; s < nsplit; s++) {
            const float *ws = w + s * (D + 2);
            float l = ws[D + 1];
            if (l <= 0.0f)
                continue;
            float a = expf(ws[D] - M);
            num = fmaf(a, ws[t], num);
            den = fmaf(a, l, den);
        }
    }
    out[(size_t)r * ldo + (size_t)hq * D + t] = den > 0.0f ? num / den : 0.0f;
}

static uint32_t pick_splits(uint32_t R, uint32_t nkv, uint32_t max_kv_len)
{
    uint32_t base = R * nkv, target = 2u * (uint32_t)l8k_sm_count();
    uint32_t by_len = (max_kv_len + ATTN_MIN_SPLIT - 1) / ATTN_MIN_SPLIT;
    uint32_t n = base >= target ? 1 : (target + base - 1) / base;
    if (n > by_len)
        n = by_len;
    if (n > ATTN_MAX_SPLITS)
        n = ATTN_MAX_SPLITS;
    return n ? n : 1;
}

extern "C" size_t l8k_attention_work_floats(uint32_t R, uint32_t nh, uint32_t D,
                                            uint32_t max_kv_len)
{
    /* The worst case over nkv (nkv = nh gives the fewest splits, nkv = 1 the most). */
    uint32_t n = pick_splits(R, 1, max_kv_len);
    return n > 1 ? (size_t)R * nh * n * (D + 2) : 0;
}

template <typename KV, int D>
static int launch(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                  uint32_t page_size, const int32_t *page_table, uint32_t pt_stride,
                  const int32_t *row_seq, const int32_t *kv_len, uint32_t R, uint32_t nh,
                  uint32_t nkv, float scale, uint32_t max_kv_len, float *work, float *out,
                  uint32_t ldo, cudaStream_t st)
{
    uint32_t nsplit = pick_splits(R, nkv, max_kv_len);
    if (nsplit > 1 && !work)
        return -EINVAL;
    /* span: positions per split, a multiple of the chunk. */
    uint32_t per = (max_kv_len + nsplit - 1) / nsplit;
    uint32_t span = (per + D - 1) / D * D;
    if (span == 0)
        span = D;
    dim3 grid(nkv, R, nsplit);
    attn_kernel<KV, D><<<grid, D, 0, st>>>(q, ldq, (const KV *)k_base, (const KV *)v_base,
                                           page_size, page_table, pt_stride, row_seq, kv_len, nh,
                                           nkv, scale, max_kv_len, span, work, out, ldo);
    int rc = l8k_launch_status();
    if (rc || nsplit == 1)
        return rc;
    attn_combine_kernel<D><<<dim3(nh, R), D, 0, st>>>(work, nsplit, nh, out, ldo);
    return l8k_launch_status();
}

extern "C" int l8k_attention(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                             enum l8k_dtype kv_dt, uint32_t page_size, const int32_t *page_table,
                             uint32_t pt_stride, const int32_t *row_seq, const int32_t *kv_len,
                             uint32_t R, uint32_t nh, uint32_t nkv, uint32_t D, float softmax_scale,
                             uint32_t max_kv_len, float *work, float *out, uint32_t ldo,
                             cudaStream_t st)
{
    if (!q || !k_base || !v_base || !page_table || !row_seq || !kv_len || !out || nkv == 0 ||
        nh % nkv || nh / nkv > ATTN_MAX_G || page_size == 0 || ldq < nh * D || ldo < nh * D ||
        !l8k_aligned16(k_base) || !l8k_aligned16(v_base) || R > 65535u)
        return -EINVAL;
    if (R == 0)
        return 0;
    if (max_kv_len == 0) {
        /* Nothing to attend to: zeros, as a kv_len 0 row. */
        for (uint32_t r = 0; r < R; r++)
            if (cudaMemsetAsync(out + (size_t)r * ldo, 0, (size_t)nh * D * 4, st) != cudaSuccess)
                return -EIO;
        return 0;
    }
#define L8K_ATTN_ARGS q, ldq, k_base, v_base, page_size, page_table, pt_stride, row_seq, kv_len, \
                      R, nh, nkv, softmax_scale, max_kv_len, work, out, ldo, st
    if (kv_dt == L8K_BF16 && D == 128)
        return launch<uint16_t, 128>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_BF16 && D == 64)
        return launch<uint16_t, 64>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_F32 && D == 128)
        return launch<float, 128>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_F32 && D == 64)
        return launch<float, 64>(L8K_ATTN_ARGS);
#undef L8K_ATTN_ARGS
    return -EINVAL;
}
