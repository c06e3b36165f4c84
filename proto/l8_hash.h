/* l8_hash.h - the one 64-bit mix the daemon, the library and the tools
 * hash with: splitmix64 (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", 2014), its finalizer and its
 * generator. */
#pragma once
#include <stdint.h>

#define L8_GOLDEN_GAMMA 0x9e3779b97f4a7c15ull   /* splitmix64's increment */

/* splitmix64's finalizer: a bijective mix of all 64 bits. */
static inline uint64_t l8_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* splitmix64's generator: the next of the sequence *state seeds. */
static inline uint64_t l8_splitmix64(uint64_t *state)
{
    return l8_mix64(*state += L8_GOLDEN_GAMMA);
}
