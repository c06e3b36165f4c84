/* checksum.cu - the weight upload's check (l8k_checksum): every byte copied
 * to the GPU is summed there and compared with the sum the host took while
 * it copied the same bytes into its staging buffers. */
#include "common.cuh"

#define CHECKSUM_THREADS 256

/* Word i of p[0, n): 8 bytes little-endian, zero past n. */
__device__ __forceinline__ uint64_t word_at(const uint8_t *p, size_t n, size_t i, bool aligned)
{
    if (aligned && 8 * i + 8 <= n)
        return ((const uint64_t *)p)[i];
    uint64_t w = 0;
    for (size_t b = 0; b < 8 && 8 * i + b < n; b++)
        w |= (uint64_t)p[8 * i + b] << (8 * b);
    return w;
}

__global__ __launch_bounds__(CHECKSUM_THREADS) void checksum_kernel(const uint8_t *p, size_t n,
                                                                     unsigned long long *acc)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    const bool aligned = ((uintptr_t)p & 7) == 0;
    const size_t nw = (n + 7) / 8, stride = (size_t)gridDim.x * blockDim.x;
    uint64_t s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nw; i += stride)
        s += word_at(p, n, i, aligned) ^ (i * L8K_CHECKSUM_K);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0 && s)
        atomicAdd(acc, (unsigned long long)s);
}

extern "C" int l8k_checksum(const void *p, size_t n, uint64_t *acc, cudaStream_t st)
{
    if (!p || !acc || ((uintptr_t)acc & 7))
        return -EINVAL;
    if (n == 0)
        return 0;
    const size_t nw = (n + 7) / 8;
    size_t blocks = (nw + CHECKSUM_THREADS - 1) / CHECKSUM_THREADS;
    const size_t cap = 4 * (size_t)l8k_sm_count();
    if (blocks > cap)
        blocks = cap;
    return l8k_launch("checksum_kernel", checksum_kernel, dim3((unsigned)blocks),
                      dim3(CHECKSUM_THREADS), st, (const uint8_t *)p, n,
                      (unsigned long long *)acc);
}
