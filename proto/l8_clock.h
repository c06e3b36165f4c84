/* l8_clock.h - the one clock: CLOCK_MONOTONIC, that of the protocol's
 * event t_ns (llama8_event.h), so the daemon's timings, the library's and
 * the tools' all compare. */
#pragma once
#include <stdint.h>
#include <time.h>

static inline uint64_t l8_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same in seconds, for measurements. */
static inline double l8_now_s(void)
{
    return (double)l8_now_ns() * 1e-9;
}
