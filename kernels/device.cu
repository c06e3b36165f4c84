/* device.cu - facts about the current device: those launches depend on
 * (each looked up once per process), and the key under which the engine
 * keeps what it measured on it (cuda_tune.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

extern "C" bool l8k_pdl_enabled(void)
{
    static int cached = -1; /* benign race, as above */
    if (cached < 0) {
        int dev = 0, major = 0;
        const char *env = getenv("L8_PDL");
        cached = !(env && strcmp(env, "0") == 0) && cudaGetDevice(&dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                     cudaSuccess &&
                 major >= 9;
    }
    return cached;
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
