/* reference.h - comparing logits against reference data, shared by the CPU
 * golden test (tests/engine) and the GPU engine test (tests/gpu). */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
