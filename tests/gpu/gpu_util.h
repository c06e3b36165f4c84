/* gpu_util.h - helpers for the GPU tests: skip without a device, checked
 * CUDA calls, random data, the relative error ||out - ref|| / ||ref|| against
 * an f64 reference. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "../test.h"

/* A failed CUDA call is fatal to the test (T_EXIT_FAIL, never a skip). */
#define CU(call)                                                            \
    do {                                                                    \
        cudaError_t cu_ = (call);                                           \
        if (cu_ != cudaSuccess) {                                           \
            t_report("FATAL", __FILE__, __LINE__, #call, ": %s",            \
                     cudaGetErrorString(cu_));                              \
            exit(T_EXIT_FAIL);                                              \
        }                                                                   \
    } while (0)

/* A kernel entry point must return 0, and the device must be clean after it. */
#define KOK(call)                                                           \
    do {                                                                    \
        int k_ = (call);                                                    \
        if (k_ != 0) {                                                      \
            t_report("FATAL", __FILE__, __LINE__, #call, ": returned %d", k_); \
            exit(T_EXIT_FAIL);                                              \
        }                                                                   \
        CU(cudaStreamSynchronize(0));                                       \
        CU(cudaGetLastError());                                             \
    } while (0)

/* Exit T_EXIT_SKIP unless a CUDA device is usable. */
static inline void require_gpu(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: skipped\n");
        exit(T_EXIT_SKIP);
    }
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd_u32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
/* Uniform in [-1, 1). */
static inline float rnd_f(void) { return (float)((double)rnd_u32() / 2147483648.0 - 1.0); }
/* Roughly normal (sum of 4 uniforms), scale s. */
static inline float rnd_n(float s) { return s * (rnd_f() + rnd_f() + rnd_f() + rnd_f()) * 0.8660254f; }

/* A random finite E4M3 code (never NaN). */
static inline uint8_t rnd_fp8(void)
{
    for (;;) {
        uint8_t c = (uint8_t)rnd_u32();
        if ((c & 0x7f) != 0x7f)
            return c;
    }
}

/* cudaMemset on device memory, and cudaMemcpy from pageable memory, may
 * return before the device has written: they are ordered on the legacy
 * default stream, which a non-blocking stream does not wait for. So each
 * helper waits for its write, and a kernel on any stream sees it. */
static inline void poison(void *d, size_t bytes)
{
    CU(cudaMemset(d, 0xff, bytes));   /* NaN for f32/bf16 */
    CU(cudaStreamSynchronize(0));
}
static inline void *dalloc(size_t bytes)
{
    void *p = NULL;
    CU(cudaMalloc(&p, bytes ? bytes : 16));
    poison(p, bytes ? bytes : 16);
    return p;
}
static inline void *dup_to_dev(const void *h, size_t bytes)
{
    void *p = dalloc(bytes);
    CU(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    CU(cudaStreamSynchronize(0));
    return p;
}
static inline void to_host(void *h, const void *d, size_t bytes)
{
    CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* ||a - ref|| / ||ref|| in f64; NaN anywhere gives +inf (never passes). */
static inline double rel_err(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i]))
            return INFINITY;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}
