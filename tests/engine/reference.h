/* reference.h - comparing logits against reference data, shared by the CPU
 * golden test (tests/engine) and the GPU engine test (tests/gpu). */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "engine.h"
#include "safetensors.h"

/* ||a - ref|| / ||ref|| in f64; a NaN anywhere in a never passes. */
static inline double ref_rel_l2(const float *a, const float *ref, uint32_t n)
{
    double num = 0, den = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (isnan(a[i]))
            return INFINITY;
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / den);
}

/* Index of the largest value, the lowest index on ties (the reference's rule). */
static inline uint32_t ref_argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* A tensor the reference file must hold; a test without it cannot go on. */
static inline const struct l8_tensor *ref_need(const struct l8_tensor_set *ts, const char *name)
{
    const struct l8_tensor *t = l8_st_find(ts, name);
    if (!t) {
        printf("FAIL: reference tensor %s missing\n", name);
        exit(1);
    }
    return t;
}

/* Feed tokens [0, S) to one sequence in chunks of `chunk`, the logits of
 * every position into out [S, V]. */
static inline int ref_prefill(struct l8_engine *e, const uint32_t *tok, uint32_t S,
                              const uint32_t *pages, uint32_t n_pages, uint32_t chunk,
                              float *out, uint32_t V)
{
    for (uint32_t p = 0; p < S; p += chunk) {
        uint32_t n = S - p < chunk ? S - p : chunk;
        struct l8_seq s = { .tokens = tok + p, .n_tokens = n, .pos = p, .pages = pages,
                            .n_pages = n_pages, .logits = L8_LOGITS_ALL,
                            .logits_out = out + (size_t)p * V };
        int r = l8_engine_step(e, &s, 1);
        if (r < 0)
            return r;
    }
    return 0;
}
