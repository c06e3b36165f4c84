/* mono_clock.h - seconds on the monotonic clock, for the engine's own
 * timings (upload, step profile, crossover measurement). */
#pragma once
#include <time.h>

static inline double l8_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
