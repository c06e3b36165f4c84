/* rope.cu - RoPE on q and k (rotate_half, llama3-scaled inv_freq from the
 * host) and the append of k and v to the paged KV pool, fused: one block
 * per token; the angle and its sine and cosine in f64 (so positions past
 * 8192 keep full f32 accuracy), the rotation in f32 as the CPU engine does.
 * The D/2 sines and cosines of a token are computed once into shared
 * memory and serve all its heads: f64 sincos is slow, and with one token
 * (decode) the block's time was 40 heads' worth of them in series. */
#include "common.cuh"

#define ROPE_THREADS 256
#define ROPE_MAX_HALF 256   /* head_dim <= 512 */

template <typename KV>
static __global__ __launch_bounds__(ROPE_THREADS) void rope_kv_kernel(float *__restrict__ qkv, uint32_t ldq,
                                      const int32_t *__restrict__ pos,
                                      const float *__restrict__ inv_freq, uint32_t nh,
                                      uint32_t nkv, uint32_t D, KV *__restrict__ kb,
                                      KV *__restrict__ vb, uint32_t page_size,
                                      const int32_t *__restrict__ slot_map)
{
    __shared__ float cos_s[ROPE_MAX_HALF], sin_s[ROPE_MAX_HALF];
    l8k_pdl_wait();
    l8k_pdl_allow();
    uint32_t t = blockIdx.x, half = D / 2;
    float *row = qkv + (size_t)t * ldq;
    double p = (double)pos[t];
    /* The CPU engine's arithmetic (l8_cpu_rope_table / _apply): the angle's
     * cosine and sine rounded to f32, the rotation in f32 without
     * contraction, so both engines store the same K. */
    for (uint32_t i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(p * (double)inv_freq[i], &s, &c);
        cos_s[i] = (float)c;
        sin_s[i] = (float)s;
    }
    __syncthreads();
    /* Rotate q and k heads: (nh + nkv) heads x half pairs. */
    for (uint32_t e = threadIdx.x; e < (nh + nkv) * half; e += blockDim.x) {
        uint32_t h = e / half, i = e % half;
        const float cf = cos_s[i], sf = sin_s[i];
        float *x = row + (size_t)h * D;
        l8k_rope_rotate(x[i], x[i + half], cf, sf);
    }
    int32_t sm = slot_map[t];
    if (sm < 0)
        return;
    __syncthreads(); /* k was rotated by other threads */
    uint32_t page = (uint32_t)sm / page_size, slot = (uint32_t)sm % page_size;
    const float *k = row + (size_t)nh * D, *v = k + (size_t)nkv * D;
    for (uint32_t e = threadIdx.x; e < nkv * D; e += blockDim.x) {
        uint32_t h = e / D, d = e % D;
        size_t off = l8k_kv_row(page, nkv, h, page_size, slot, D) + d;
        l8k_store(kb + off, k[e]);
        l8k_store(vb + off, v[e]);
    }
}

extern "C" int l8k_rope_kv(float *qkv, uint32_t ldq, const int32_t *pos, const float *inv_freq,
                           uint32_t T, uint32_t nh, uint32_t nkv, uint32_t D, void *k_base,
                           void *v_base, enum l8k_dtype kv_dt, uint32_t page_size,
                           const int32_t *slot_map, cudaStream_t st)
{
    if (!qkv || !pos || !inv_freq || !k_base || !v_base || !slot_map || D == 0 || D % 2 ||
        D / 2 > ROPE_MAX_HALF || nh == 0 || nkv == 0 || page_size == 0 ||
        ldq < (nh + 2 * nkv) * D)
        return -EINVAL;
    if (T == 0)
        return 0;
    if (kv_dt == L8K_F32)
        return l8k_launch("rope_kv_kernel", rope_kv_kernel<float>, dim3(T), dim3(ROPE_THREADS),
                          st, qkv, ldq, pos, inv_freq, nh, nkv, D, (float *)k_base,
                          (float *)v_base, page_size, slot_map);
    if (kv_dt == L8K_BF16)
        return l8k_launch("rope_kv_kernel", rope_kv_kernel<uint16_t>, dim3(T),
                          dim3(ROPE_THREADS), st, qkv, ldq, pos, inv_freq, nh, nkv, D,
                          (uint16_t *)k_base, (uint16_t *)v_base, page_size, slot_map);
    return -EINVAL;
}
