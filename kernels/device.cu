/* device.cu - facts about the current device: those launches depend on
 * (each looked up once per process), the engine's switch for programmatic
 * dependent launch, and the key under which the engine keeps what it
 * measured on it (cuda_tune.h). */
#include <stdio.h>
#include <cublasLt.h>

#include "common.cuh"

extern "C" int l8k_sm_count(void)
{
    static int cached = 0; /* a benign race: every writer stores the same value */
    if (cached == 0) {
        int dev = 0, n = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return 1;
        cached = n;
    }
    return cached;
}

static int pdl_allowed = 1; /* l8k_set_pdl's; read at every launch */

extern "C" void l8k_set_pdl(bool allowed)
{
    __atomic_store_n(&pdl_allowed, allowed ? 1 : 0, __ATOMIC_RELAXED);
}

extern "C" bool l8k_pdl_enabled(void)
{
    static int capable = -1; /* benign race, as above */
    if (capable < 0) {
        int dev = 0, major = 0;
        capable = cudaGetDevice(&dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                      cudaSuccess &&
                  major >= 9;
    }
    return capable && __atomic_load_n(&pdl_allowed, __ATOMIC_RELAXED);
}

extern "C" int l8k_device_key(char *buf, size_t n)
{
    cudaDeviceProp pr;
    int dev = 0, rt = 0, drv = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&pr, dev) != cudaSuccess ||
        cudaRuntimeGetVersion(&rt) != cudaSuccess || cudaDriverGetVersion(&drv) != cudaSuccess) {
        cudaGetLastError();
        return -EIO;
    }
    for (char *c = pr.name; *c && c < pr.name + sizeof pr.name; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r')
            *c = ' ';
    int w = snprintf(buf, n, "%.*s sm_%d%d %d SMs %zu MiB, driver %d, CUDA runtime %d, "
                     "cuBLASLt %zu", (int)sizeof pr.name, pr.name, pr.major, pr.minor,
                     pr.multiProcessorCount, pr.totalGlobalMem >> 20, drv, rt,
                     cublasLtGetVersion());
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}
