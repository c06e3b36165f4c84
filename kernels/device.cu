/* device.cu - facts about the current device that launches depend on,
 * each looked up once per process. */
#include <stdlib.h>
#include <string.h>

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
