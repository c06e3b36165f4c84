/* quantize.cu - per-token FP8 quantization, fused RMSNorm (+ residual add)
 * and SiLU*up, each ending in the output dtype the next product wants.
 *
 * One block per token row. Values are recomputed between passes rather
 * than kept in shared memory: rows are up to 28672 wide and the second read
 * hits L1/L2; recomputation is bitwise identical (same operations). Each
 * kernel, once its inputs are ready, lets the next one start (PDL): in
 * decode that is the GEMV, which streams weights until it must wait for
 * these rows. */
#include "common.cuh"

/* A decode row is one block on one SM, and each pass over it is a chain of
 * memory latencies, one per round of loads a thread makes: 1024 threads
 * make a 4096-wide pass one element deep (256 made it four). */
#define QUANT_THREADS 1024
/* And a thread's elements of a pass are taken ROW_BATCH at a time, every
 * value of a batch computed before the first is used: the loop as written
 * waited for each element's loads before issuing the next element's
 * (nvcc does not unroll it), so SiLU's 14 elements a thread at 14336 wide
 * were 14 round trips to L2; batched they are 2. The order each thread
 * uses its values in is unchanged, so every result is bitwise the same. */
#define ROW_BATCH 8

/* use(i, f(i)) for this thread's elements of [0, n), in order. */
template <typename F, typename U>
__device__ __forceinline__ void row_pass(uint32_t n, F f, U use)
{
    for (uint32_t i0 = threadIdx.x; i0 < n; i0 += ROW_BATCH * blockDim.x) {
        float v[ROW_BATCH];
        /* Past the end, a batch computes the last element again (and does
         * not use it): no branch between the loads, so all are issued
         * before the first returns. */
#pragma unroll
        for (int b = 0; b < ROW_BATCH; b++) {
            const uint32_t i = i0 + b * blockDim.x;
            v[b] = f(i < n ? i : n - 1);
        }
#pragma unroll
        for (int b = 0; b < ROW_BATCH; b++) {
            const uint32_t i = i0 + b * blockDim.x;
            if (i < n)
                use(i, v[b]);
        }
    }
}

/* Store the row's values (produced by f(i)) in out_dt. For FP8, amax is
 * found first, then the values are recomputed and quantized. */
template <typename F>
__device__ __forceinline__ void store_row(F f, uint32_t n, enum l8k_dtype out_dt, void *out_row,
                                          float *out_scale, float *red)
{
    if (out_dt == L8K_F32) {
        float *o = (float *)out_row;
        row_pass(n, f, [&](uint32_t i, float v) { o[i] = v; });
    } else if (out_dt == L8K_BF16) {
        uint16_t *o = (uint16_t *)out_row;
        row_pass(n, f, [&](uint32_t i, float v) { o[i] = l8k_float_to_bf16(v); });
    } else {
        float amax = 0.0f;
        row_pass(n, f, [&](uint32_t, float v) { amax = fmaxf(amax, fabsf(v)); });
        amax = l8k_block_max(amax, red);
        float scale = l8k_act_scale(amax);
        uint8_t *o = (uint8_t *)out_row;
        row_pass(n, f, [&](uint32_t i, float v) { o[i] = l8k_float_to_fp8(__fdiv_rn(v, scale)); });
        if (threadIdx.x == 0)
            *out_scale = scale;
    }
}

static __device__ __forceinline__ size_t row_bytes(enum l8k_dtype dt, uint32_t n)
{
    return dt == L8K_F32 ? 4u * n : dt == L8K_BF16 ? 2u * n : n;
}

static __global__ __launch_bounds__(QUANT_THREADS) void quantize_rows_kernel(
    const float *__restrict__ x, uint32_t K, uint8_t *__restrict__ q, float *__restrict__ scale)
{
    __shared__ float red[32];
    l8k_pdl_wait();
    l8k_pdl_allow();
    const float *xr = x + (size_t)blockIdx.x * K;
    store_row([&](uint32_t i) { return xr[i]; }, K, L8K_FP8, q + (size_t)blockIdx.x * K,
              scale + blockIdx.x, red);
}

static __global__ __launch_bounds__(QUANT_THREADS) void rmsnorm_kernel(
    float *__restrict__ x, const float *__restrict__ add, const float *__restrict__ w,
    float eps, uint32_t H, const int32_t *__restrict__ rows, enum l8k_dtype out_dt,
    void *__restrict__ out, float *__restrict__ out_scale)
{
    __shared__ float red[32];
    __shared__ double redd[32];
    l8k_pdl_wait();
    l8k_pdl_allow();
    uint32_t j = blockIdx.x;
    size_t r = rows ? (size_t)rows[j] : j;
    float *xr = x + r * H;
    /* Sum of squares in f64 and the factor rounded once, as l8_cpu_rmsnorm:
     * the two engines then agree to the last bit but for the sum's order.
     * Each thread re-reads only elements it wrote itself: no barrier needed
     * between the residual update and the later passes. */
    double ss = 0.0;
    row_pass(H, [&](uint32_t i) { return add ? xr[i] + add[r * H + i] : xr[i]; },
             [&](uint32_t i, float v) {
                 if (add)
                     xr[i] = v;
                 ss += (double)v * (double)v;
             });
    ss = l8k_block_sum_d(ss, redd);
    const float inv = (float)(1.0 / sqrt(ss / (double)H + (double)eps));
    store_row([&](uint32_t i) { return w[i] * (xr[i] * inv); }, H, out_dt,
              (char *)out + row_bytes(out_dt, H) * j, out_scale + j, red);
}

template <typename G>
static __global__ __launch_bounds__(QUANT_THREADS) void silu_mul_kernel(
    const G *__restrict__ gu, uint32_t I, enum l8k_dtype out_dt, void *__restrict__ out,
    float *__restrict__ out_scale)
{
    __shared__ float red[32];
    l8k_pdl_wait();
    l8k_pdl_allow();
    const G *g = gu + (size_t)blockIdx.x * 2 * I;
    const G *u = g + I;
    store_row([&](uint32_t i) {
                  float a = l8k_load(&g[i]);
                  return __fdiv_rn(a, 1.0f + expf(-a)) * l8k_load(&u[i]);
              },
              I, out_dt, (char *)out + row_bytes(out_dt, I) * blockIdx.x,
              out_scale + blockIdx.x, red);
}

extern "C" int l8k_quantize_rows(const float *x, uint32_t T, uint32_t K, uint8_t *q,
                                 float *scale, cudaStream_t st)
{
    if (!x || !q || !scale || K == 0)
        return -EINVAL;
    if (T == 0)
        return 0;
    return l8k_launch("quantize_rows_kernel", quantize_rows_kernel, dim3(T), dim3(QUANT_THREADS),
                      st, x, K, q, scale);
}

extern "C" int l8k_rmsnorm(float *x, const float *add, const float *w, float eps, uint32_t H,
                           const int32_t *rows, uint32_t n_out, enum l8k_dtype out_dt, void *out,
                           float *out_scale, cudaStream_t st)
{
    if (!x || !w || !out || H == 0 || (out_dt == L8K_FP8 && !out_scale) ||
        (out_dt != L8K_F32 && out_dt != L8K_BF16 && out_dt != L8K_FP8))
        return -EINVAL;
    if (n_out == 0)
        return 0;
    return l8k_launch("rmsnorm_kernel", rmsnorm_kernel, dim3(n_out), dim3(QUANT_THREADS), st, x,
                      add, w, eps, H, rows, out_dt, out, out_scale);
}

extern "C" int l8k_silu_mul(const void *gu, enum l8k_dtype gu_dt, uint32_t T, uint32_t I,
                            enum l8k_dtype out_dt, void *out, float *out_scale, cudaStream_t st)
{
    if (!gu || !out || I == 0 || (out_dt == L8K_FP8 && !out_scale) ||
        (gu_dt != L8K_F32 && gu_dt != L8K_BF16) ||
        (out_dt != L8K_F32 && out_dt != L8K_BF16 && out_dt != L8K_FP8))
        return -EINVAL;
    if (T == 0)
        return 0;
    if (gu_dt == L8K_BF16)
        return l8k_launch("silu_mul_kernel<bf16>", silu_mul_kernel<uint16_t>, dim3(T),
                          dim3(QUANT_THREADS), st, (const uint16_t *)gu, I, out_dt, out,
                          out_scale);
    return l8k_launch("silu_mul_kernel<f32>", silu_mul_kernel<float>, dim3(T),
                      dim3(QUANT_THREADS), st, (const float *)gu, I, out_dt, out, out_scale);
}
