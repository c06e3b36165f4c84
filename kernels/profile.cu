/* profile.cu - what the engine's step profile (L8_PROFILE) needs on the
 * device: a kernel that keeps a stream busy while the host queues a step
 * behind it, so the step's kernels then run back to back and the events
 * between them time the kernels, not the host's launches. */
#include "common.cuh"

__global__ void hold_kernel(uint64_t ns)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
#if !defined(CUEMU) && defined(__CUDA_ARCH__)
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
#else
    (void)ns;   /* the emulation runs each launch when it is submitted */
#endif
}

extern "C" int l8k_hold_stream(uint32_t us, cudaStream_t st)
{
    return l8k_launch("hold_kernel", hold_kernel, dim3(1), dim3(1), st, (uint64_t)us * 1000u);
}
