/* common.cuh - helpers shared by the kernel files (not exported). */
#pragma once
#include <errno.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "l8_kernels.h"

#define L8K_FP8_MAX 448.0f
#define L8K_FP8_MIN_ACT_SCALE (1.0f / (448.0f * 512.0f))
#define L8K_WARP 32

/* The launch just issued: a configuration error is ours (-EINVAL would hide
 * a bug, so it is -EIO like any device failure). */
static inline int l8k_launch_status(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

__device__ __forceinline__ float l8k_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float l8k_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide reductions; red has >= 32 floats of shared memory. All threads
 * get the result. blockDim.x must be a multiple of 32 (full-warp shuffles).
 * Starts with a barrier, so red can be reused by the next reduction (every
 * thread's read of it precedes that barrier). */
__device__ __forceinline__ float l8k_block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = l8k_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = lane < nw ? red[lane] : 0.0f;
    r = l8k_warp_sum(r);
    return r;
}

/* l8k_block_sum in f64 (red: >= 32 doubles of shared memory). */
__device__ __forceinline__ double l8k_block_sum_d(double v, double *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    double r = lane < nw ? red[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}

__device__ __forceinline__ float l8k_block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = l8k_warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = lane < nw ? red[lane] : -INFINITY;
    r = l8k_warp_max(r);
    return r;
}

/* E4M3 (fn) code -> f32, exact. Through f16 where the hardware converts
 * (sm_89+); cuda_fp8.h emulates it elsewhere. */
__device__ __forceinline__ float2 l8k_fp8x2_to_float2(uint16_t two)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(__half2(h));
}

__device__ __forceinline__ float l8k_fp8_to_float(uint8_t c)
{
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
    return __half2float(__half(h));
}

/* f32 -> E4M3, nearest even, saturating to +-448 (NaN -> 0x7f): the rounding
 * of l8_f32_to_e4m3(). */
__device__ __forceinline__ uint8_t l8k_float_to_fp8(float f)
{
    return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float l8k_bf16_to_float(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

/* Nearest even, as l8_f32_to_bf16() (NaN stays NaN). */
__device__ __forceinline__ uint16_t l8k_float_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}

/* The KV pool's layout (the CPU engine's): [page][KV head][position in
 * page][head_dim]. The offset of head h's row at position `slot` of `page`. */
__device__ __forceinline__ size_t l8k_kv_row(uint32_t page, uint32_t nkv, uint32_t h,
                                             uint32_t page_size, uint32_t slot, uint32_t D)
{
    return (((size_t)page * nkv + h) * page_size + slot) * D;
}

/* An element of type T, f32 (float) or bf16 (uint16_t bits: stored nearest
 * even), as f32: the K/V pool's element, and the products' outputs. */
template <typename T> __device__ __forceinline__ void l8k_store(T *p, float v);
template <> __device__ __forceinline__ void l8k_store<float>(float *p, float v) { *p = v; }
template <> __device__ __forceinline__ void l8k_store<uint16_t>(uint16_t *p, float v)
{
    *p = l8k_float_to_bf16(v);
}
__device__ __forceinline__ float l8k_load(const float *p) { return *p; }
__device__ __forceinline__ float l8k_load(const uint16_t *p) { return l8k_bf16_to_float(*p); }

/* RoPE's rotation of the pair (a, b) = (x[i], x[i + D/2]) by the angle of
 * cosine c and sine s, as l8_cpu_rope_apply: f32, no contraction. */
__device__ __forceinline__ void l8k_rope_rotate(float &a, float &b, float c, float s)
{
    const float x0 = a, x1 = b;
    a = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    b = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

/* Two floats as the bf16 pair of one 32-bit register (lo: the lower
 * column), nearest even: the operand format of the bf16 tensor-core MMA. */
__device__ __forceinline__ uint32_t l8k_pack_bf16x2(float lo, float hi)
{
    return (uint32_t)l8k_float_to_bf16(lo) | (uint32_t)l8k_float_to_bf16(hi) << 16;
}

/* d += a b on the tensor cores, one warp: mma.sync m16n8k16, bf16 inputs,
 * f32 accumulators, with the PTX ISA's fragment layouts (lane = 4 g + t):
 *   a (16x16, row): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
 *                   a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 *   b (16x8, col):  b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
 *   d (16x8):       d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1].
 * sm_80 and later; cuemu.h implements the same layouts on the CPU. */
__device__ __forceinline__ void l8k_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2])
{
#if defined(CUEMU)
    cuemu::mma_m16n8k16_bf16(d, a, b);
#elif defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* cp.async (sm_80+): copy n bytes (16, or 0 for none) from global memory to
 * shared, zero-filling the rest of the 16, without passing through
 * registers: a thread issues all its copies before any lands. They join the
 * thread's open group; l8k_cp_async_commit() closes it, and
 * l8k_cp_async_wait<N>() returns once all but the newest N committed groups
 * have landed (for this thread: a barrier must follow before other threads
 * read them). Both addresses 16-byte aligned; with n = 0, src is not read
 * but must still be an address. */
__device__ __forceinline__ void l8k_cp_async16(void *dst, const void *src, uint32_t n)
{
#if defined(CUEMU)
    cuemu::cp_async16(dst, src, n);
#elif defined(__CUDA_ARCH__)
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
#endif
}

__device__ __forceinline__ void l8k_cp_async_commit(void)
{
#if defined(CUEMU)
    cuemu::cp_async_commit();
#elif defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void l8k_cp_async_wait(void)
{
#if defined(CUEMU)
    cuemu::cp_async_wait(N);
#elif defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* Programmatic dependent launch (sm_90+, l8k_pdl_enabled()): a kernel
 * launched with it may start while the kernel before it in the stream is
 * still running, and must call l8k_pdl_wait() before it reads anything
 * that kernel wrote or writes anything; a kernel that calls l8k_pdl_allow()
 * lets its successor's blocks be scheduled from then on (else when it
 * ends). Both are no-ops on older devices and in launches without the
 * attribute; under the emulation (blocks run in stream order) the wait marks
 * the end of the part of the thread that cuemu.cc checks against the kernel
 * before. */
__device__ __forceinline__ void l8k_pdl_wait(void)
{
#if defined(CUEMU)
    cuemu::pdl_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void l8k_pdl_allow(void)
{
#if !defined(CUEMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* k over grid x block on st, with programmatic stream serialization when
 * l8k_pdl_enabled(): every thread of k must call l8k_pdl_wait() before it
 * reads what an earlier kernel wrote or writes anything (the emulation
 * checks that each thread calls it, and what it touches before). name: k's, for the emulation's
 * messages. 0, or -EIO for a launch the runtime refused. */
template <class... P, class... A>
static int l8k_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, cudaStream_t st,
                      A... args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    /* grid, block, dynamic shared memory, stream, attributes */
    const cudaLaunchConfig_t cfg = { grid, block, 0, st, attr, l8k_pdl_enabled() ? 1u : 0u };
#if defined(CUEMU)
    cudaError_t e = cuemu::launch_named(name, &cfg, k, args...);
#else
    (void)name;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, args...);
#endif
    if (e != cudaSuccess) {
        cudaGetLastError();
        return -EIO;
    }
    return l8k_launch_status();
}

/* The per-token scale of l8_quantize_act_row(), IEEE division. */
__device__ __forceinline__ float l8k_act_scale(float amax)
{
    return fmaxf(__fdiv_rn(amax, L8K_FP8_MAX), L8K_FP8_MIN_ACT_SCALE);
}

__host__ __device__ static inline bool l8k_aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}
