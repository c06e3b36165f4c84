/* sample.cu - token sampling on the GPU, the definition of sampler.h.
 *
 * One block per request. No sort: every filter of the definition keeps a
 * prefix of the candidates ordered by (logit descending, id ascending), so
 * each is found by a radix select over the 64-bit key
 *     key(v) = ordered_bits(logit_v / T) << 32 | (0xffffffff - v)
 * (distinct keys; larger key = earlier candidate). Masses are summed in
 * 2^-40 fixed point with integer atomics, so the result does not depend on
 * the order threads add in: same inputs, same token, run to run.
 *
 * The logits are read where they are unless a repetition penalty applies
 * (then from a penalized copy in scratch), NaN read as -inf; a row with a
 * NaN or an infinity is flagged (L8K_SAMPLE_NONFINITE) in the pass that
 * first reads it, the copy or the max; the passes that
 * only read them (max, log-sum-exp) use 16-byte loads, four in flight a
 * thread, since at batch 1 the one block's time is memory latency.
 *
 * The uniform u comes from the host (l8_philox_uniform), so CPU and GPU
 * draw the identical number; the device Philox below is checked against
 * the CPU's in tests/gpu. */
#include "common.cuh"

#define SAMPLE_THREADS 1024
#define MASS_ONE 1099511627776.0   /* 2^40: fixed-point unit of probability mass */

typedef unsigned long long u64;

struct sel_shared {
    u64 hist[256];
    uint32_t cnt[256];
    u64 prefix, mask;
    u64 target;
    int done;
    u64 result;
    u64 total;
    float fred[32];
    u64 kred[32];
};

__device__ __forceinline__ uint32_t ordered_bits(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float unordered_bits(uint32_t o)
{
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/* A logit as the sampler reads it: NaN counts as -inf. */
__device__ __forceinline__ float logit_value(float l)
{
    return isnan(l) ? -INFINITY : l;
}

__device__ __forceinline__ float logit_at(const float *src, uint32_t v)
{
    return logit_value(src[v]);
}

/* f(v, logit) for this thread's share of src[0, V): 16-byte loads when src
 * is 16-byte aligned (4 in flight), else one at a time. */
template <class F>
__device__ __forceinline__ void for_each_logit(const float *src, uint32_t V, F f)
{
    uint32_t v0 = 0;
    if (l8k_aligned16(src)) {
        const float4 *s4 = (const float4 *)src;
        const uint32_t n4 = V / 4;
#pragma unroll 4
        for (uint32_t i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 x = s4[i];
            f(4 * i, logit_value(x.x));
            f(4 * i + 1, logit_value(x.y));
            f(4 * i + 2, logit_value(x.z));
            f(4 * i + 3, logit_value(x.w));
        }
        v0 = 4 * n4;
    }
    for (uint32_t v = v0 + threadIdx.x; v < V; v += blockDim.x)
        f(v, logit_at(src, v));
}

struct cand {
    const float *src;   /* the (penalized) logits [V] */
    float temp;
    float M;            /* max of logit / T */
    u64 lo;             /* set: key >= lo ... */
    float min_p;        /* ... and (min_p <= 0 or e >= min_p or key == top) */
    u64 top;

    __device__ __forceinline__ float s(uint32_t v) const
    {
        return __fdiv_rn(logit_at(src, v), temp);
    }
    __device__ __forceinline__ u64 key(uint32_t v, float sv) const
    {
        return ((u64)ordered_bits(sv) << 32) | (u64)(0xffffffffu - v);
    }
    __device__ __forceinline__ float e(float sv) const { return expf(sv - M); }
    __device__ __forceinline__ bool in(u64 k, float ev) const
    {
        return k >= lo && (min_p <= 0.0f || ev >= min_p || k == top);
    }
};

__device__ __forceinline__ u64 fixed_mass(float ev)
{
    return (u64)((double)ev * MASS_ONE);
}

/* Sum of the weights of the set (count when by_count, else fixed mass). */
__device__ u64 set_total(const cand &c, uint32_t V, bool by_count, sel_shared &sh)
{
    if (threadIdx.x == 0)
        sh.total = 0;
    __syncthreads();
    u64 local = 0;
    for (uint32_t v = threadIdx.x; v < V; v += blockDim.x) {
        float sv = c.s(v), ev = c.e(sv);
        if (c.in(c.key(v, sv), ev))
            local += by_count ? 1 : fixed_mass(ev);
    }
    atomicAdd(&sh.total, local);
    __syncthreads();
    u64 t = sh.total;
    __syncthreads();
    return t;
}

/* The key of the first candidate of the set (in key-descending order) whose
 * running weight reaches target (gt: exceeds it). When rounding leaves the
 * target above the total, the last candidate. */
__device__ u64 radix_select(const cand &c, uint32_t V, bool by_count, u64 target, bool gt,
                            sel_shared &sh)
{
    if (threadIdx.x == 0) {
        sh.prefix = 0;
        sh.mask = 0;
        sh.target = target;
        sh.done = 0;
    }
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (uint32_t b = threadIdx.x; b < 256; b += blockDim.x) {
            sh.hist[b] = 0;
            sh.cnt[b] = 0;
        }
        __syncthreads();
        const u64 prefix = sh.prefix, mask = sh.mask;
        for (uint32_t v = threadIdx.x; v < V; v += blockDim.x) {
            float sv = c.s(v), ev = c.e(sv);
            u64 k = c.key(v, sv);
            if ((k & mask) != prefix || !c.in(k, ev))
                continue;
            uint32_t bin = (uint32_t)(k >> shift) & 0xff;
            atomicAdd(&sh.hist[bin], by_count ? 1ull : fixed_mass(ev));
            atomicAdd(&sh.cnt[bin], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 run = 0, tgt = sh.target;
            int chosen = -1, last = -1;
            u64 run_before_last = 0;
            for (int b = 255; b >= 0; b--) {
                if (sh.cnt[b] == 0)
                    continue;
                u64 next = run + sh.hist[b];
                if (gt ? next > tgt : next >= tgt) {
                    chosen = b;
                    break;
                }
                last = b;
                run_before_last = run;
                run = next;
            }
            if (chosen < 0) {          /* target past the total: the last one */
                chosen = last;
                run = run_before_last;
            }
            sh.target = tgt - (run < tgt ? run : tgt);
            sh.prefix |= (u64)chosen << shift;
            sh.mask |= (u64)0xff << shift;
            sh.done = sh.cnt[chosen] == 1 ? 1 : 0;
            if (shift == 0) {
                sh.result = sh.prefix;
                sh.done = 2;
            }
        }
        __syncthreads();
        if (sh.done)
            break;
    }
    if (sh.done == 1) {
        /* One candidate left under the prefix: find its full key. */
        const u64 prefix = sh.prefix, mask = sh.mask;
        for (uint32_t v = threadIdx.x; v < V; v += blockDim.x) {
            float sv = c.s(v), ev = c.e(sv);
            u64 k = c.key(v, sv);
            if ((k & mask) == prefix && c.in(k, ev))
                sh.result = k;
        }
    }
    __syncthreads();
    u64 r = sh.result;
    __syncthreads();
    return r;
}

static __global__ __launch_bounds__(SAMPLE_THREADS, 1) void sample_kernel(
    const float *__restrict__ logits, uint32_t V, const struct l8k_sample_req *__restrict__ reqs,
    const int32_t *__restrict__ history, const uint32_t *__restrict__ masks,
    float *__restrict__ scratch, int32_t *__restrict__ tok, float *__restrict__ logprob)
{
    __shared__ sel_shared sh;
    l8k_pdl_wait();
    l8k_pdl_allow();
    const struct l8k_sample_req rq = reqs[blockIdx.x];
    const float *row = logits + (size_t)rq.logits_row * V;
    float *scr = scratch + (size_t)blockIdx.x * V;
    const uint32_t t = threadIdx.x;

    /* 1. Repetition penalty, into a copy, from the original logits so that
     * an id that occurs several times in the history is penalized once.
     * sampler.c applies it only when it is positive (and not 1): a penalty
     * <= 0 means off there, so it must here too. */
    const bool pen = rq.rep_penalty != 1.0f && rq.rep_penalty > 0.0f && rq.n_hist > 0;
    const bool masked = masks && rq.mask_row >= 0;
    const float *src = pen || masked ? scr : row;
    /* A NaN or an infinity among this thread's logits (of row, not of the
     * copy, whose masked ids are -inf on purpose). */
    bool nonfinite = false;
    if (pen || masked) {
        for (uint32_t v = t; v < V; v += blockDim.x) {
            const float l = row[v];
            nonfinite |= !isfinite(l);
            scr[v] = l;
        }
        __syncthreads();
    }
    if (pen) {
        for (int32_t j = (int32_t)t; j < rq.n_hist; j += (int32_t)blockDim.x) {
            int32_t id = history[rq.hist_off + j];
            if (id < 0 || (uint32_t)id >= V)
                continue;
            float l = row[id];
            if (isnan(l))
                continue;
            scr[id] = l > 0.0f ? __fdiv_rn(l, rq.rep_penalty) : l * rq.rep_penalty;
        }
        __syncthreads();
    }
    /* 1b. The mask (constrained decoding): ids outside it at -inf. */
    if (masked) {
        const uint32_t *mk = masks + (size_t)rq.mask_row * ((V + 31) / 32);
        for (uint32_t v = t; v < V; v += blockDim.x)
            if (!(mk[v >> 5] >> (v & 31) & 1u))
                scr[v] = -INFINITY;
        __syncthreads();
    }

    /* 2. Max, argmax (lowest id on ties), log-sum-exp of the penalized logits. */
    float bv = -INFINITY;
    uint32_t bi = 0xffffffffu;
    const bool check = src == row;   /* else the copy above checked */
    for_each_logit(src, V, [&](uint32_t v, float l) {
        nonfinite |= check && isinf(l);   /* NaN arrives as -inf */
        if (l > bv || (l == bv && v < bi)) {
            bv = l;
            bi = v;
        }
    });
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        uint32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
        nonfinite |= __shfl_xor_sync(0xffffffffu, (int)nonfinite, o) != 0;
    }
    __shared__ float wv[32];
    __shared__ uint32_t wi[32];
    __shared__ int wbad[32];
    __shared__ uint32_t best_s;
    if ((t & 31) == 0) {
        wv[t >> 5] = bv;
        wi[t >> 5] = bi;
        wbad[t >> 5] = nonfinite;
    }
    __syncthreads();
    if (t == 0) {
        float b = -INFINITY;
        uint32_t i = 0xffffffffu;
        for (uint32_t w = 0; w < blockDim.x / 32; w++) {
            if (wv[w] > b || (wv[w] == b && wi[w] < i)) {
                b = wv[w];
                i = wi[w];
            }
            nonfinite |= wbad[w] != 0;   /* thread 0 alone uses it, below */
        }
        best_s = i == 0xffffffffu ? 0 : i;
    }
    __syncthreads();
    const uint32_t amax = best_s;
    const float M1 = logit_at(src, amax);
    float z = 0.0f;
    for_each_logit(src, V, [&](uint32_t, float l) { z += expf(l - M1); });
    const float Z1 = l8k_block_sum(z, sh.fred);

    uint32_t chosen = amax;
    if (rq.temperature > 0.0f) {
        cand c;
        c.src = src;
        c.temp = rq.temperature;
        c.lo = 0;
        c.min_p = 0.0f;
        /* The top key: max over all keys (division by T can tie logits). */
        u64 kb = 0;
        for (uint32_t v = t; v < V; v += blockDim.x) {
            u64 k = c.key(v, c.s(v));
            kb = k > kb ? k : kb;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            u64 ok = __shfl_xor_sync(0xffffffffu, kb, o);
            kb = ok > kb ? ok : kb;
        }
        if ((t & 31) == 0)
            sh.kred[t >> 5] = kb;
        __syncthreads();
        if (t == 0) {
            u64 m = 0;
            for (uint32_t w = 0; w < blockDim.x / 32; w++)
                m = sh.kred[w] > m ? sh.kred[w] : m;
            sh.result = m;
        }
        __syncthreads();
        c.top = sh.result;
        c.M = unordered_bits((uint32_t)(c.top >> 32));
        __syncthreads();

        /* 3a. top-k: the set becomes keys >= the k-th largest. */
        if (rq.top_k > 0 && rq.top_k < V)
            c.lo = radix_select(c, V, true, rq.top_k, false, sh);
        /* 3b. top-p over the softmax of that set: the shortest prefix whose
         * mass reaches top_p (at least the top one). */
        if (rq.top_p < 1.0f) {
            u64 Z = set_total(c, V, false, sh);
            double tp = rq.top_p > 0.0f ? (double)rq.top_p : 0.0;
            u64 target = (u64)ceil(tp * (double)Z);
            c.lo = radix_select(c, V, false, target ? target : 1, false, sh);
        }
        /* 3c. min-p: p < min_p * p(top)  <=>  e < min_p  (e(top) = 1). */
        c.min_p = rq.min_p;
        /* 4. The pick: first candidate whose running mass exceeds u * kept. */
        u64 S = set_total(c, V, false, sh);
        double u = rq.u < 0.0f ? 0.0 : rq.u >= 1.0f ? 0.99999994 : (double)rq.u;
        u64 target = (u64)floor(u * (double)S);
        u64 k = radix_select(c, V, false, target, true, sh);
        chosen = 0xffffffffu - (uint32_t)(k & 0xffffffffu);
        if (chosen >= V)
            chosen = amax;
    }
    if (t == 0) {
        tok[blockIdx.x] = nonfinite ? L8K_SAMPLE_NONFINITE : (int32_t)chosen;
        logprob[blockIdx.x] = logit_at(src, chosen) - M1 - logf(Z1);
    }
}

extern "C" int l8k_sample(const float *logits, uint32_t V, const struct l8k_sample_req *req,
                          uint32_t S, const int32_t *history, const uint32_t *masks,
                          float *scratch, int32_t *tok, float *logprob, cudaStream_t st)
{
    if (!logits || V == 0 || !req || !scratch || !tok || !logprob)
        return -EINVAL;
    if (S == 0)
        return 0;
    return l8k_launch("sample_kernel", sample_kernel, dim3(S), dim3(SAMPLE_THREADS), st, logits, V,
                      req, history, masks, scratch, tok, logprob);
}

/* Philox4x32-10 (Salmon et al., SC'11): key = seed, counter = index. */
__device__ __forceinline__ void philox4x32_10(uint32_t k0, uint32_t k1, uint32_t c[4])
{
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
    for (int i = 0; i < 10; i++) {
        uint32_t hi0 = __umulhi(M0, c[0]), lo0 = M0 * c[0];
        uint32_t hi1 = __umulhi(M1, c[2]), lo1 = M1 * c[2];
        uint32_t n0 = hi1 ^ c[1] ^ k0, n1 = lo1, n2 = hi0 ^ c[3] ^ k1, n3 = lo0;
        c[0] = n0; c[1] = n1; c[2] = n2; c[3] = n3;
        k0 += W0;
        k1 += W1;
    }
}

static __global__ void philox_kernel(uint64_t seed, uint64_t index0, uint32_t n, float *out)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint64_t idx = index0 + i;
    uint32_t c[4] = {(uint32_t)idx, (uint32_t)(idx >> 32), 0, 0};
    philox4x32_10((uint32_t)seed, (uint32_t)(seed >> 32), c);
    out[i] = (float)(c[0] >> 8) * (1.0f / 16777216.0f);
}

extern "C" int l8k_philox_uniform(uint64_t seed, uint64_t index0, uint32_t n, float *out,
                                  cudaStream_t st)
{
    if (!out)
        return -EINVAL;
    if (n == 0)
        return 0;
    return l8k_launch("philox_kernel", philox_kernel, dim3((n + 255) / 256), dim3(256), st, seed,
                      index0, n, out);
}
