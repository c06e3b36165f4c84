/* attention.cu - paged causal attention, decode and prefill.
 *
 * Every query row (a decoding sequence, or one token of a prefill chunk)
 * attends to positions [0, kv_len) of its sequence through the page table.
 * A block serves one (row, KV head, split): the G = nh / nkv query heads
 * that share the KV head are processed together, so each K/V element is
 * loaded once for all of them (GQA), and a long sequence is divided into
 * splits processed by separate blocks whose partial (max, sum, acc) are
 * combined afterwards (flash-decoding). Up to L8K_ATTN_ROW_PLANS rows each
 * row is split from its own length as it would be alone (its bits then do
 * not depend on the batch: a verification row equals its decode step's);
 * more rows share one plan. Within a block, positions go in
 * chunks of D, with the online softmax across chunks: one position per
 * thread to score; for V, D / (16 bytes) threads share a position's row,
 * one 16-byte load each, so the block's threads form groups that take
 * every PG-th position of the chunk, and the groups' sums are added at the
 * end.
 *
 * The row kernel: scores and V accumulation in f32 on CUDA cores; K/V bf16
 * (fp8 mode) or f32 (exact mode). It serves decode rows, and every row in
 * exact mode. Prefill chunks with bf16 K/V go to the tile kernel below
 * (tensor cores, K/V loads shared by a tile of tokens). */
#include "common.cuh"

#define ATTN_MAX_G 8
/* Positions: below this a split is not worth a block. One chunk of the 8B's
 * head_dim: a block's time is a chain of dependent loads per chunk, and at
 * batch 1 most SMs are idle, so more splits of one chunk each finish
 * sooner (v1.1 had 256: 24 blocks for a 640-token context; now 40). */
#define ATTN_MIN_SPLIT 128
#define ATTN_MAX_SPLITS 64

/* Row r's positions: kv_len[r], bounded by max_kv_len. */
__device__ __forceinline__ uint32_t row_kv(const int32_t *kv_len, uint32_t r,
                                           uint32_t max_kv_len)
{
    return min((uint32_t)max(kv_len[r], 0), max_kv_len);
}

/* A row's own split count (launch_rows' row_cap): splits of at least
 * ATTN_MIN_SPLIT positions, at most row_cap of them. */
__device__ __forceinline__ uint32_t row_splits(uint32_t kvl, uint32_t row_cap)
{
    const uint32_t by_len = (kvl + ATTN_MIN_SPLIT - 1) / ATTN_MIN_SPLIT;
    return by_len < 1 ? 1 : by_len < row_cap ? by_len : row_cap;
}

/* Positions per split of n over len: a multiple of the chunk the kernel
 * steps by. */
__host__ __device__ __forceinline__ uint32_t split_span(uint32_t len, uint32_t n,
                                                        uint32_t chunk)
{
    const uint32_t per = (len + n - 1) / n, span = (per + chunk - 1) / chunk * chunk;
    return span ? span : chunk;
}

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

/* Grid (nkv, R, n_splits), block D threads. v1.3: V in 16-byte loads, a
 * position's row over VT threads and positions over PG groups (bf16,
 * D = 128: 16 threads a row, 8 groups, each thread 16 positions of a
 * chunk, one load deep); v1 had one thread per dimension and 2-byte loads,
 * 128 positions in series (8 round trips of 16 loads). v1.4: row_cap > 0
 * (few rows): a row takes row_splits of its own length, each split_span of
 * it long, in place of n_splits and span; blocks past them return. */
template <typename KV, int D>
static __global__ __launch_bounds__(D) void attn_kernel(
    const float *__restrict__ q, uint32_t ldq, const KV *__restrict__ kb,
    const KV *__restrict__ vb, uint32_t page_size, const int32_t *__restrict__ page_table,
    uint32_t pt_stride, const int32_t *__restrict__ row_seq, const int32_t *__restrict__ kv_len,
    const int32_t *__restrict__ rows, uint32_t nh, uint32_t nkv, float softmax_scale,
    uint32_t max_kv_len, uint32_t span, uint32_t row_cap, float *__restrict__ work,
    float *__restrict__ out, uint32_t ldo)
{
    constexpr int CH = D;
    constexpr int VEC = kv_vec<KV>::n;
    constexpr int VT = D / VEC;   /* threads a V row */
    constexpr int PG = D / VT;    /* position groups */
    __shared__ float q_s[ATTN_MAX_G][D];
    __shared__ float sc[ATTN_MAX_G][CH];
    __shared__ size_t off_s[CH];
    __shared__ float red[PG][D];
    __shared__ float m_s[ATTN_MAX_G], l_s[ATTN_MAX_G], alpha_s[ATTN_MAX_G];

    l8k_pdl_wait();
    l8k_pdl_allow();
    const uint32_t h = blockIdx.x, r = rows ? (uint32_t)rows[blockIdx.y] : blockIdx.y;
    const uint32_t split = blockIdx.z;
    const uint32_t G = nh / nkv, t = threadIdx.x;
    const uint32_t lane = t & 31, warp = t >> 5, nwarps = D / 32;
    const uint32_t vd = (t % VT) * VEC, pg = t / VT;  /* V: dimensions vd.., group pg */
    const uint32_t kvl = row_kv(kv_len, r, max_kv_len);
    const uint32_t nsplit = row_cap ? row_splits(kvl, row_cap) : gridDim.z;
    if (row_cap) {
        if (split >= nsplit)   /* past this row's own splits (the whole block) */
            return;
        span = split_span(kvl, nsplit, CH);
    }
    const uint32_t start = split * span;
    const uint32_t end = min(start + span, kvl);
    const int32_t *pt = page_table + (size_t)max(row_seq[r], 0) * pt_stride;

    for (uint32_t g = 0; g < G; g++)
        q_s[g][t] = q[(size_t)r * ldq + (size_t)(h * G + g) * D + t] * softmax_scale;
    if (t < G) {
        m_s[t] = -INFINITY;
        l_s[t] = 0.0f;
    }
    float acc[ATTN_MAX_G][VEC];
#pragma unroll
    for (int g = 0; g < ATTN_MAX_G; g++)
#pragma unroll
        for (int e = 0; e < VEC; e++)
            acc[g][e] = 0.0f;
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
            size_t off = l8k_kv_row(page, nkv, h, page_size, p % page_size, D);
            off_s[t] = off;
            const uint4 *kr = (const uint4 *)(kb + off);
            /* bf16: the whole row (16 loads) in flight; f32 (exact) 8, no spill */
#pragma unroll(sizeof(KV) == 4 ? 8 : 16)
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

        /* Phase 3: thread t accumulates dimensions vd.. of V over positions
         * pg, pg + PG, ... of the chunk: at most CH / PG independent 16-byte
         * loads, all in flight at once (at batch 1 this loop's time is
         * memory latency, not bytes). */
        uint32_t n = min((uint32_t)CH, end - c0);
#pragma unroll
        for (int g = 0; g < ATTN_MAX_G; g++)
            if ((uint32_t)g < G)
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    acc[g][e] *= alpha_s[g];
#pragma unroll 16
        for (uint32_t j = pg; j < n; j += PG) {
            float v[VEC];
            kv_decode16<KV>(*(const uint4 *)(vb + off_s[j] + vd), v);
#pragma unroll
            for (int g = 0; g < ATTN_MAX_G; g++)
                if ((uint32_t)g < G) {
                    const float w = sc[g][j];
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        acc[g][e] = fmaf(w, v[e], acc[g][e]);
                }
        }
        __syncthreads(); /* sc and off_s are rewritten by the next chunk */
    }

    /* Per head: the groups' sums added in group order, thread t then
     * holding dimension t. Unrolled over the maximum with a guard: acc must
     * stay in registers (a run-time index would move it to local memory). */
#pragma unroll
    for (uint32_t g = 0; g < ATTN_MAX_G; g++) {
        if (g >= G)
            break;
#pragma unroll
        for (int e = 0; e < VEC; e++)
            red[pg][vd + e] = acc[g][e];
        __syncthreads();
        float a = 0.0f;
#pragma unroll
        for (int p = 0; p < PG; p++)
            a += red[p][t];
        __syncthreads(); /* red is rewritten for the next head */
        if (nsplit == 1) {
            const float l = l_s[g];
            out[(size_t)r * ldo + (size_t)(h * G + g) * D + t] = l > 0.0f ? a / l : 0.0f;
        } else {
            float *w = work + (((size_t)blockIdx.y * nh + h * G + g) * gridDim.z + split) * (D + 2);
            w[t] = a;
            if (t == 0) {
                w[D] = m_s[g];
                w[D + 1] = l_s[g];
            }
        }
    }
}

/* The combined output, dimension t, of nsplit partials at w (each: acc[D],
 * max, sum; a split that saw no position has sum 0). Maxima in natural
 * units (row kernel) or log2 units (tile kernel). */
template <int D, bool LOG2>
__device__ __forceinline__ float combine_splits(const float *w, uint32_t nsplit, uint32_t t)
{
    float M = -INFINITY;
    for (uint32_t s = 0; s < nsplit; s++)
        M = fmaxf(M, w[s * (D + 2) + D]);
    float num = 0.0f, den = 0.0f;
    if (M > -INFINITY) {
        /* No branch in the loop, so the splits' loads are issued together
         * (skipping an empty split made a round trip per split): an empty
         * split (sum 0) adds 0 x 0, whatever its acc holds, which leaves
         * num and den as they were (but a -0 turning +0). */
        for (uint32_t s = 0; s < nsplit; s++) {
            const float *ws = w + s * (D + 2);
            const float l = ws[D + 1], mx = ws[D], x = ws[t];
            const float e = LOG2 ? exp2f(mx - M) : expf(mx - M);
            const bool used = l > 0.0f;
            num = fmaf(used ? e : 0.0f, used ? x : 0.0f, num);
            den = fmaf(used ? e : 0.0f, used ? l : 0.0f, den);
        }
    }
    return den > 0.0f ? num / den : 0.0f;
}

/* Grid (nh, R), block D: combine the splits of one (row, head); nsplit
 * each (row, head) has room for, row_cap as attn_kernel's. */
template <int D>
static __global__ void attn_combine_kernel(const float *__restrict__ work, uint32_t nsplit,
                                           const int32_t *__restrict__ rows,
                                           const int32_t *__restrict__ kv_len,
                                           uint32_t max_kv_len, uint32_t row_cap, uint32_t nh,
                                           float *__restrict__ out, uint32_t ldo)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    const uint32_t hq = blockIdx.x, t = threadIdx.x;
    const uint32_t r = rows ? (uint32_t)rows[blockIdx.y] : blockIdx.y;
    const uint32_t n = row_cap ? row_splits(row_kv(kv_len, r, max_kv_len), row_cap) : nsplit;
    if (n == 1)   /* a row of one split wrote its output itself */
        return;
    const float *w = work + ((size_t)blockIdx.y * nh + hq) * nsplit * (D + 2);
    out[(size_t)r * ldo + (size_t)hq * D + t] = combine_splits<D, false>(w, n, t);
}

/* ---- prefill: tiles of a chunk's tokens on the tensor cores -------------
 *
 * A block serves one (KV head, tile, split): a tile is up to 64 / G
 * consecutive tokens of one prefill chunk, and with their G query heads they
 * make the block's 64 query rows (m = token * G + head), 16 per warp. K and
 * V go through shared memory 64 positions at a time, so each element read
 * from the pool serves 64 query rows instead of G. Flash-attention 2: S =
 * Q K^T and O += P V on bf16 MMAs with f32 accumulators; each thread holds
 * two rows (g and g + 8 of its warp's 16) of S and O, so the online softmax
 * needs only the 4 threads of a row (shuffles), and the S accumulators are
 * P's A operand without leaving registers. Q is scaled by softmax_scale *
 * log2(e) before its rounding to bf16, so the exponentials are exp2f. A
 * long context with few tiles is split across blocks as the decode rows are,
 * with its own combine (the partial maxima are in log2 units). */
#define TILE_M 64          /* query rows (token, head) per block, 16 per warp */
#define TILE_N 64          /* positions per K/V tile */
#define TILE_THREADS 128
#define TILE_MIN_SPLIT 512 /* positions: below this a split is not worth a block */

/* This thread's share of the copies of K or V rows [k0, k0 + TILE_N) of KV
 * head h into the tile buffer buf (rows of LDS halves), as one cp.async
 * group; rows from end on are zeros (0 * P must stay 0, never NaN). Every
 * copy is issued before any lands: one round trip a tile, where loads
 * through registers made one per row a thread copies (8). */
template <int D, int LDS>
__device__ __forceinline__ void tile_fetch(uint16_t *buf, const uint16_t *__restrict__ pool,
                                           uint32_t k0, uint32_t end,
                                           const int32_t *__restrict__ pt, uint32_t nkv,
                                           uint32_t h, uint32_t page_size)
{
    constexpr uint32_t CH = D / 8, ROWS = TILE_THREADS / CH;   /* 16-byte chunks a row */
    static_assert(TILE_THREADS % CH == 0 && TILE_N % ROWS == 0, "tile_fetch: D");
    const uint32_t c = threadIdx.x % CH * 8;
#pragma unroll
    for (uint32_t b = 0; b < TILE_N / ROWS; b++) {
        const uint32_t j = threadIdx.x / CH + b * ROWS, p = k0 + j;
        const uint32_t pc = p < end ? p : end - 1;   /* an address in the pool; not read */
        const size_t off = l8k_kv_row((uint32_t)pt[pc / page_size], nkv, h, page_size,
                                      pc % page_size, D) + c;
        l8k_cp_async16(buf + j * LDS + c, pool + off, p < end ? 16u : 0u);
    }
    l8k_cp_async_commit();
}

template <int D>
static __global__ __launch_bounds__(TILE_THREADS) void attn_tile_kernel(
    const float *__restrict__ q, uint32_t ldq, const uint16_t *__restrict__ kb,
    const uint16_t *__restrict__ vb, uint32_t page_size, const int32_t *__restrict__ page_table,
    uint32_t pt_stride, const int32_t *__restrict__ tiles, uint32_t nh, uint32_t nkv,
    float q_scale, uint32_t max_kv_len, uint32_t span, float *__restrict__ work,
    float *__restrict__ out, uint32_t ldo)
{
    /* +8 halves per row: the fragment loads of a warp fall on distinct banks. */
    constexpr int LDS = D + 8;
    __shared__ __align__(16) uint16_t k_s[TILE_N * LDS];
    __shared__ __align__(16) uint16_t v_s[TILE_N * LDS];

    l8k_pdl_wait();
    l8k_pdl_allow();
    const uint32_t h = blockIdx.x, tile = blockIdx.y, split = blockIdx.z, nsplit = gridDim.z;
    const uint32_t G = nh / nkv, tq = TILE_M / G;
    const int32_t *td = tiles + 4 * (size_t)tile;
    const uint32_t row0 = (uint32_t)td[0], ntok = min((uint32_t)max(td[1], 0), tq),
                   pos0 = (uint32_t)max(td[2], 0), seq = (uint32_t)max(td[3], 0);
    const uint32_t kv_end = min(pos0 + ntok, max_kv_len);
    const uint32_t start = split * span, end = min(start + span, kv_end);
    const int32_t *pt = page_table + (size_t)seq * pt_stride;
    const uint32_t tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
    /* A software pipeline over the K/V tiles with the one buffer each: the
     * next tile's K is fetched once S is computed (during the softmax and
     * P V), its V once P V is done (during the next S). Groups in flight,
     * oldest first: K(t), V(t) at the top of the loop; V(t), K(t + 1) after
     * S. The first tile's copies go out before q is read. */
    if (start < end) {
        tile_fetch<D, LDS>(k_s, kb, start, end, pt, nkv, h, page_size);
        tile_fetch<D, LDS>(v_s, vb, start, end, pt, nkv, h, page_size);
    }

    /* This thread's rows: i = 0 is row g of the warp's 16, i = 1 row g + 8. */
    uint32_t qpos[2], m_row[2];
    bool valid[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        m_row[i] = warp * 16 + g + 8 * i;
        valid[i] = m_row[i] / G < ntok;
        qpos[i] = pos0 + m_row[i] / G;
    }
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = r & 1, col = kk * 16 + 2 * t + 8 * (r >> 1);
            float2 x = make_float2(0.0f, 0.0f);
            if (valid[i]) {
                const uint32_t m = m_row[i];
                x = *(const float2 *)(q + (size_t)(row0 + m / G) * ldq +
                                      (size_t)(h * G + m % G) * D + col);
            }
            qa[kk][r] = l8k_pack_bf16x2(x.x * q_scale, x.y * q_scale);
        }

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = { -INFINITY, -INFINITY }, l_run[2] = { 0.0f, 0.0f };

    for (uint32_t k0 = start; k0 < end; k0 += TILE_N) {
        const bool more = k0 + TILE_N < end;   /* the same in every thread */
        l8k_cp_async_wait<1>();   /* K(t) */
        __syncthreads();          /* ... every thread's part of it */

        /* S = Q K^T for the tile's 64 positions, 8 at a time. */
        float s[TILE_N / 8][4];
#pragma unroll
        for (int n = 0; n < TILE_N / 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const uint16_t *kr = k_s + (n * 8 + g) * LDS + 2 * t;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t b[2] = { *(const uint32_t *)(kr + kk * 16),
                                        *(const uint32_t *)(kr + kk * 16 + 8) };
                l8k_mma_bf16_16816(s[n], qa[kk], b);
            }
        }
        __syncthreads();   /* every warp is done with k_s */
        if (more)
            tile_fetch<D, LDS>(k_s, kb, k0 + TILE_N, end, pt, nkv, h, page_size);
        /* Causal mask (and the split's end), then the rows' maxima over the
         * 4 threads that share them. */
        float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
        for (int n = 0; n < TILE_N / 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = r >> 1;
                const uint32_t p = k0 + n * 8 + 2 * t + (r & 1);
                if (p > qpos[i] || p >= end)
                    s[n][r] = -INFINITY;
                mx[i] = fmaxf(mx[i], s[n][r]);
            }
        float m_use[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            const float m_new = fmaxf(m_run[i], mx[i]);
            m_use[i] = m_new == -INFINITY ? 0.0f : m_new;   /* no row seen yet: no NaN */
            alpha[i] = exp2f(m_run[i] - m_use[i]);
            m_run[i] = m_new;
        }
        /* P = 2^(S - m) rounded to bf16, as the P V product takes it; the row
         * sums add the rounded weights, so numerator and denominator agree. */
        uint32_t pa[TILE_N / 16][4];
        float sum[2] = { 0.0f, 0.0f };
#pragma unroll
        for (int n = 0; n < TILE_N / 8; n++) {
            const uint32_t lo = l8k_pack_bf16x2(exp2f(s[n][0] - m_use[0]),
                                                exp2f(s[n][1] - m_use[0]));
            const uint32_t hi = l8k_pack_bf16x2(exp2f(s[n][2] - m_use[1]),
                                                exp2f(s[n][3] - m_use[1]));
            sum[0] += __uint_as_float(lo << 16) + __uint_as_float(lo & 0xffff0000u);
            sum[1] += __uint_as_float(hi << 16) + __uint_as_float(hi & 0xffff0000u);
            /* Columns 0-7 of a 16-position step are a[0], a[1]; 8-15 are a[2], a[3]. */
            pa[n / 2][(n & 1) * 2] = lo;
            pa[n / 2][(n & 1) * 2 + 1] = hi;
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
            l_run[i] = l_run[i] * alpha[i] + sum[i];   /* this thread's share of the row */
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
        if (more)
            l8k_cp_async_wait<1>();   /* V(t); K(t + 1) may still be in flight */
        else
            l8k_cp_async_wait<0>();
        __syncthreads();
        /* O += P V: B[k][n] = V[position k][dimension n]. */
#pragma unroll
        for (int j = 0; j < TILE_N / 16; j++) {
            const uint16_t *vr = v_s + (j * 16 + 2 * t) * LDS + g;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                const uint16_t *v0 = vr + n * 8;
                const uint32_t b[2] = { (uint32_t)v0[0] | (uint32_t)v0[LDS] << 16,
                                        (uint32_t)v0[8 * LDS] | (uint32_t)v0[9 * LDS] << 16 };
                l8k_mma_bf16_16816(o[n], pa[j], b);
            }
        }
        __syncthreads();   /* every warp is done with v_s */
        if (more)
            tile_fetch<D, LDS>(v_s, vb, k0 + TILE_N, end, pt, nkv, h, page_size);
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!valid[i])
            continue;
        const uint32_t m = m_row[i];
        if (nsplit == 1) {
            const float inv = l_run[i] > 0.0f ? 1.0f / l_run[i] : 0.0f;
            float *orow = out + (size_t)(row0 + m / G) * ldo + (size_t)(h * G + m % G) * D + 2 * t;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *(float2 *)(orow + n * 8) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
        } else {
            float *w = work + ((((size_t)tile * gridDim.x + h) * TILE_M + m) * nsplit + split) *
                              (D + 2);
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *(float2 *)(w + n * 8 + 2 * t) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
            if (t == 0) {
                w[D] = m_run[i];
                w[D + 1] = l_run[i];
            }
        }
    }
}

/* Grid (TILE_M, nkv, n_tiles), block D: combine the splits of one query row
 * of a tile (maxima in log2 units). */
template <int D>
static __global__ void attn_tile_combine_kernel(const float *__restrict__ work, uint32_t nsplit,
                                                const int32_t *__restrict__ tiles, uint32_t nh,
                                                float *__restrict__ out, uint32_t ldo)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    const uint32_t m = blockIdx.x, h = blockIdx.y, tile = blockIdx.z, t = threadIdx.x;
    const uint32_t G = nh / gridDim.y;
    const int32_t *td = tiles + 4 * (size_t)tile;
    if (m / G >= min((uint32_t)max(td[1], 0), TILE_M / G))
        return;   /* no token: the tile kernel wrote nothing for this row */
    const float *w = work + (((size_t)tile * gridDim.y + h) * TILE_M + m) * nsplit * (D + 2);
    out[(size_t)((uint32_t)td[0] + m / G) * ldo + (size_t)(h * G + m % G) * D + t] =
        combine_splits<D, true>(w, nsplit, t);
}

/* ---- launches ------------------------------------------------------------ */

/* Blocks per split plan: enough for 2 blocks per SM, not more than the
 * length makes worth it. */
static uint32_t split_cap(uint32_t base)
{
    uint32_t target = 2u * (uint32_t)l8k_sm_count();
    uint32_t n = base >= target ? 1 : (target + base - 1) / base;
    return n < ATTN_MAX_SPLITS ? n : ATTN_MAX_SPLITS;
}

static uint32_t pick_splits(uint32_t base, uint32_t max_kv_len, uint32_t min_split)
{
    uint32_t by_len = (max_kv_len + min_split - 1) / min_split;
    uint32_t n = split_cap(base);
    if (n > by_len)
        n = by_len;
    return n ? n : 1;
}

/* Tokens per tile: 64 / G, 0 for a head layout the tile kernel does not take. */
static uint32_t tile_tokens(uint32_t nh, uint32_t nkv)
{
    return nkv && nh % nkv == 0 && nh / nkv <= ATTN_MAX_G ? TILE_M / (nh / nkv) : 0;
}

extern "C" uint32_t l8k_attention_tiles(uint32_t nh, uint32_t nkv, uint32_t row0, uint32_t n_tok,
                                        uint32_t pos0, uint32_t seq, int32_t *tiles)
{
    const uint32_t tq = tile_tokens(nh, nkv);
    uint32_t n = 0;
    for (uint32_t i = 0; tq && i < n_tok; i += tq, n++) {
        if (!tiles)
            continue;
        int32_t *t = tiles + 4 * (size_t)n;
        t[0] = (int32_t)(row0 + i);
        t[1] = (int32_t)(n_tok - i < tq ? n_tok - i : tq);
        t[2] = (int32_t)(pos0 + i);
        t[3] = (int32_t)seq;
    }
    return n;
}

extern "C" size_t l8k_attention_work_floats(uint32_t R, uint32_t nh, uint32_t D,
                                            uint32_t max_kv_len)
{
    /* Rows: the worst case over nkv (nkv = 1 gives the most splits); up to
     * L8K_ATTN_ROW_PLANS rows, each row's plan is that of a row alone. */
    uint32_t n = pick_splits(R <= L8K_ATTN_ROW_PLANS ? 1 : R, max_kv_len, ATTN_MIN_SPLIT);
    size_t rows = n > 1 ? (size_t)R * nh * n * (D + 2) : 0;
    /* Tiles: splits only while tiles x nkv < target, and then tiles x nkv x
     * splits < 2 target. */
    size_t tiles = max_kv_len > TILE_MIN_SPLIT
                       ? (size_t)4 * l8k_sm_count() * TILE_M * (D + 2) : 0;
    return rows > tiles ? rows : tiles;
}

template <typename KV, int D>
static int launch_rows(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                       uint32_t page_size, const int32_t *page_table, uint32_t pt_stride,
                       const int32_t *row_seq, const int32_t *kv_len, const int32_t *rows,
                       uint32_t R, uint32_t nh, uint32_t nkv, float scale, uint32_t max_kv_len,
                       float *work, float *out, uint32_t ldo, cudaStream_t st)
{
    /* Few rows: each row splits as it would alone (row_cap: a lone row's
     * most splits), so its result is its own whatever the other rows and
     * max_kv_len (l8_kernels.h); the grid has room for the longest's. More
     * rows share one plan: fewer, longer splits as the rows fill the GPU. */
    const uint32_t row_cap = R <= L8K_ATTN_ROW_PLANS ? split_cap(nkv) : 0;
    uint32_t nsplit = pick_splits(row_cap ? nkv : R * nkv, max_kv_len, ATTN_MIN_SPLIT);
    if (nsplit > 1 && !work)
        return -EINVAL;
    uint32_t span = split_span(max_kv_len, nsplit, D);
    int rc = l8k_launch("attn_kernel", attn_kernel<KV, D>, dim3(nkv, R, nsplit), dim3(D), st, q,
                        ldq, (const KV *)k_base, (const KV *)v_base, page_size, page_table,
                        pt_stride, row_seq, kv_len, rows, nh, nkv, scale, max_kv_len, span,
                        row_cap, work, out, ldo);
    if (rc || nsplit == 1)
        return rc;
    return l8k_launch("attn_combine_kernel", attn_combine_kernel<D>, dim3(nh, R), dim3(D), st,
                      (const float *)work, nsplit, rows, kv_len, max_kv_len, row_cap, nh, out,
                      ldo);
}

extern "C" int l8k_attention(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                             enum l8k_dtype kv_dt, uint32_t page_size, const int32_t *page_table,
                             uint32_t pt_stride, const int32_t *row_seq, const int32_t *kv_len,
                             const int32_t *rows, uint32_t R, uint32_t nh, uint32_t nkv,
                             uint32_t D, float softmax_scale, uint32_t max_kv_len, float *work,
                             float *out, uint32_t ldo, cudaStream_t st)
{
    if (!q || !k_base || !v_base || !page_table || !row_seq || !kv_len || !out || nkv == 0 ||
        nh % nkv || nh / nkv > ATTN_MAX_G || page_size == 0 || ldq < nh * D || ldo < nh * D ||
        !l8k_aligned16(k_base) || !l8k_aligned16(v_base) || R > 65535u)
        return -EINVAL;
    if (R == 0)
        return 0;
#define L8K_ATTN_ARGS q, ldq, k_base, v_base, page_size, page_table, pt_stride, row_seq, kv_len, \
                      rows, R, nh, nkv, softmax_scale, max_kv_len, work, out, ldo, st
    if (kv_dt == L8K_BF16 && D == 128)
        return launch_rows<uint16_t, 128>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_BF16 && D == 64)
        return launch_rows<uint16_t, 64>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_F32 && D == 128)
        return launch_rows<float, 128>(L8K_ATTN_ARGS);
    if (kv_dt == L8K_F32 && D == 64)
        return launch_rows<float, 64>(L8K_ATTN_ARGS);
#undef L8K_ATTN_ARGS
    return -EINVAL;
}

template <int D>
static int launch_tiles(const float *q, uint32_t ldq, const void *k_base, const void *v_base,
                        uint32_t page_size, const int32_t *page_table, uint32_t pt_stride,
                        const int32_t *tiles, uint32_t n_tiles, uint32_t nh, uint32_t nkv,
                        float scale, uint32_t max_kv_len, float *work, float *out, uint32_t ldo,
                        cudaStream_t st)
{
    uint32_t nsplit = pick_splits(n_tiles * nkv, max_kv_len, TILE_MIN_SPLIT);
    if (nsplit > 1 && !work)
        return -EINVAL;
    uint32_t span = split_span(max_kv_len, nsplit, TILE_N);
    const float q_scale = scale * 1.44269504088896341f;   /* log2(e): exp2f in the kernel */
    int rc = l8k_launch("attn_tile_kernel", attn_tile_kernel<D>, dim3(nkv, n_tiles, nsplit),
                        dim3(TILE_THREADS), st, q, ldq, (const uint16_t *)k_base,
                        (const uint16_t *)v_base, page_size, page_table, pt_stride, tiles, nh, nkv,
                        q_scale, max_kv_len, span, work, out, ldo);
    if (rc || nsplit == 1)
        return rc;
    return l8k_launch("attn_tile_combine_kernel", attn_tile_combine_kernel<D>,
                      dim3(TILE_M, nkv, n_tiles), dim3(D), st, (const float *)work, nsplit, tiles,
                      nh, out, ldo);
}

extern "C" int l8k_attention_prefill(const float *q, uint32_t ldq, const void *k_base,
                                     const void *v_base, uint32_t page_size,
                                     const int32_t *page_table, uint32_t pt_stride,
                                     const int32_t *tiles, uint32_t n_tiles, uint32_t nh,
                                     uint32_t nkv, uint32_t D, float softmax_scale,
                                     uint32_t max_kv_len, float *work, float *out, uint32_t ldo,
                                     cudaStream_t st)
{
    if (!q || !k_base || !v_base || !page_table || !tiles || !out ||
        !tile_tokens(nh, nkv) || page_size == 0 || ldq < nh * D ||
        ldo < nh * D || ldq % 2 || ldo % 2 || !l8k_aligned16(k_base) || !l8k_aligned16(v_base) ||
        n_tiles > 65535u)
        return -EINVAL;
    if (n_tiles == 0)
        return 0;
#define L8K_TILE_ARGS q, ldq, k_base, v_base, page_size, page_table, pt_stride, tiles, n_tiles, \
                      nh, nkv, softmax_scale, max_kv_len, work, out, ldo, st
    if (D == 128)
        return launch_tiles<128>(L8K_TILE_ARGS);
    if (D == 64)
        return launch_tiles<64>(L8K_TILE_ARGS);
#undef L8K_TILE_ARGS
    return -EINVAL;
}
