/* cpu_relax.h - the pause a spin-wait runs between its loads: it tells the
 * core this is a wait (a hyper-thread sibling gets the pipeline, the loop
 * leaves the memory order machine alone). */
#pragma once

static inline void l8_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
