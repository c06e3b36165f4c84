/* cuemu.h - run the kernels of kernels/ on the CPU, for tests only.
 *
 * Most sessions of this project have no GPU, so the kernels would go
 * unexecuted between the rare device runs. This header, force-included when
 * a kernel file is compiled as C++ by the host compiler (its launches all go
 * through l8k_launch, which calls cuemu::launch_named below), gives the
 * device-side names a CPU meaning: every CUDA thread of a block
 * is a fiber, blocks run one after another, __syncthreads and warp shuffles
 * are barriers among those fibers, __shared__ variables are statics (one
 * block at a time). cuemu.cc also implements the part of the CUDA runtime
 * API that kernels/ and tests/gpu/test_kernels.c call, with device memory
 * that ends at a guard page and launches checked as the hardware checks them.
 *
 * What it finds: indexing, bounds, barrier and launch-configuration mistakes
 * (cp.async's in both directions: run with CUEMU_CP_ASYNC=early too),
 * breaches of the programmatic-dependent-launch contract (a thread touching,
 * before l8k_pdl_wait(), what the kernel before it writes; cuemu.cc), host
 * code that does not wait for a stream before it uses what the stream
 * reads or writes (run with CUEMU_STREAMS=lazy; cuemu.cc), and numerical
 * errors in the algorithm. What it cannot: timing, memory-model
 * races (fibers switch only at barriers), device math's last-ulp differences
 * (host libm here; nvcc's FMA contraction), cuBLASLt. */
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#define __forceinline__ inline
#define CUEMU 1   /* kernels/common.cuh: the tensor-core MMA comes from here */

namespace cuemu {

struct Thread {
    dim3 tid;
    unsigned linear, lane, warp;
};

extern Thread *cur;   /* the fiber running now */
extern dim3 block_idx, block_dim, grid_dim;

void sync_block();
void sync_warp();
uint64_t shfl_xor(uint64_t v, unsigned lane_mask, unsigned width);
uint64_t shfl_idx(uint64_t v, unsigned src_lane, unsigned width);
/* l8k_pdl_wait(): the calling thread may now use what the kernel before
 * wrote. A thread of a PDL launch that ends without it is reported. */
void pdl_wait();
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for the calling
 * lane (layouts in kernels/common.cuh); a barrier of the whole warp. */
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

/* cp.async (sm_80): the calling thread's copy of n <= 16 bytes from device
 * memory to shared, the rest of the 16 zeroed. The device lands it some
 * time between the issue and the wait that covers its group; here it lands
 * at that wait (a read of the destination before it sees the old
 * contents), or with CUEMU_CP_ASYNC=early at the issue (a thread that has
 * yet to read the old contents sees the new). */
void cp_async16(void *dst, const void *src, unsigned n);
void cp_async_commit();
/* Completes all but the newest n committed groups of the calling thread. */
void cp_async_wait(unsigned n);

struct Cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *name;   /* the kernel, as the launch spelled it */
    bool pdl;           /* launched with programmatic stream serialization */
};

/* false (and cudaGetLastError says why) for a configuration the hardware refuses. */
bool check_launch(const Cfg &cfg, const char *name);
/* Runs op now (later with CUEMU_STREAMS=lazy), or, while the stream is
 * being captured, adds it to the graph. */
void submit(cudaStream_t st, std::function<void()> op);
/* body() as every thread of every block of cfg. */
void run_grid(const Cfg &cfg, const char *name, const std::function<void()> &body);
/* Whether [p, p + bytes) lies inside one device allocation. */
bool device_range(const void *p, size_t bytes);
/* The emulated device's compute capability, major * 10 + minor: 90 (an
 * H100/H200), or CUEMU_SM (80: an A100, no FP8 tensor cores; 89: Ada). */
int sm();
/* Aborts, naming the kernel and the argument, if p is not in device memory. */
void check_device_ptr(const char *kernel, int arg, const void *p);

template <class... A> struct Bound {
    Cfg cfg;
    std::tuple<A...> args;
};

struct CfgArgs {
    Cfg cfg;
    CfgArgs named(const char *n) const
    {
        CfgArgs c = *this;
        c.cfg.name = n;
        return c;
    }
    CfgArgs pdl(bool on) const
    {
        CfgArgs c = *this;
        c.cfg.pdl = on;
        return c;
    }
    template <class... A> Bound<std::decay_t<A>...> operator()(A &&...a) const
    {
        return { cfg, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...) };
    }
};

inline CfgArgs cfg(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t st = 0)
{
    return { { grid, block, smem, st, "kernel", false } };
}

template <class Tup, size_t... I> void check_ptrs(const char *k, const Tup &t, std::index_sequence<I...>)
{
    (
        [&] {
            using T = std::tuple_element_t<I, Tup>;
            if constexpr (std::is_pointer_v<T>)
                check_device_ptr(k, (int)I, (const void *)std::get<I>(t));
        }(),
        ...);
}

}  // namespace cuemu

/* A launch: k % cuemu::cfg(grid, block, smem, stream).named("k")(args). */
template <class... P, class... A> void operator%(void (*f)(P...), cuemu::Bound<A...> &&b)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    const char *name = b.cfg.name;
    if (!cuemu::check_launch(b.cfg, name))
        return;
    cuemu::check_ptrs(name, b.args, std::index_sequence_for<A...>{});
    cuemu::Cfg c = b.cfg;
    cuemu::submit(c.stream, [f, c, name, args = std::move(b.args)]() {
        cuemu::run_grid(c, name, [&]() { std::apply([&](const auto &...a) { f(a...); }, args); });
    });
}

namespace cuemu {
/* cudaLaunchKernelEx as k<<<>>> (name: the kernel, for messages).
 * Programmatic stream serialization is the one attribute the kernels use;
 * blocks run in stream order here, so it changes no result, but the launch
 * is marked and each of its threads must reach l8k_pdl_wait(). */
template <class... P, class... A>
cudaError_t launch_named(const char *name, const cudaLaunchConfig_t *c, void (*k)(P...),
                         A &&...a)
{
    bool pdl = false;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        if (c->attrs[i].id != cudaLaunchAttributeProgrammaticStreamSerialization)
            return cudaErrorNotSupported;
        pdl |= c->attrs[i].val.programmaticStreamSerializationAllowed != 0;
    }
    k % cuemu::cfg(c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream)
            .named(name)
            .pdl(pdl)(std::forward<A>(a)...);
    return cudaSuccess;
}
template <class... P, class... A>
cudaError_t launch_ex(const cudaLaunchConfig_t *c, void (*k)(P...), A &&...a)
{
    return launch_named("cudaLaunchKernelEx", c, k, std::forward<A>(a)...);
}
}  // namespace cuemu
#define cudaLaunchKernelEx cuemu::launch_ex

#define threadIdx (cuemu::cur->tid)
#define blockIdx (cuemu::block_idx)
#define blockDim (cuemu::block_dim)
#define gridDim (cuemu::grid_dim)

inline void __syncthreads() { cuemu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; cuemu::sync_warp(); }

namespace cuemu {
/* A shuffle of any value up to 8 bytes through one of the uint64_t ones. */
template <class T, class F> inline T shfl_value(T v, F shfl)
{
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = shfl(u);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
}

template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    (void)mask;
    return cuemu::shfl_value(v, [&](uint64_t u) {
        return cuemu::shfl_xor(u, (unsigned)lane_mask, (unsigned)width);
    });
}

template <class T> inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32)
{
    (void)mask;
    return cuemu::shfl_value(v, [&](uint64_t u) {
        return cuemu::shfl_idx(u, (unsigned)src_lane, (unsigned)width);
    });
}

/* Fibers switch only at barriers, so a read-modify-write is atomic. */
template <class T> inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}

inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline int32_t __float_as_int(float f) { int32_t u; memcpy(&u, &f, 4); return u; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldg(const T *p) { return *p; }
/* CUDA's integer and float min/max overloads (mixed signedness: unsigned). */
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b)
{
    using T = std::common_type_t<A, B>;
    return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b)
{
    using T = std::common_type_t<A, B>;
    return (T)a > (T)b ? (T)a : (T)b;
}
