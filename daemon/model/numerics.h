/* numerics.h - the number formats of the checkpoint: E4M3, BF16, F16.
 *
 * One definition of every conversion, shared by the loader, the synthetic
 * checkpoint writer, the CPU engine and the GPU tests, so the two engines
 * and the tools can never disagree on a rounding.
 *
 * E4M3 here is the "fn" variant used by compressed-tensors and torch
 * (float8_e4m3fn): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
 * no infinities, 0x7f/0xff are NaN, largest finite value 448. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define L8_FP8_MAX 448.0f
/* Smallest per-token activation scale: keeps an all-zero (or nearly zero)
 * row from dividing by zero. Same value vLLM uses (1 / (448 * 512)). */
#define L8_FP8_MIN_ACT_SCALE (1.0f / (448.0f * 512.0f))

/* Decode table for all 256 E4M3 codes (NaN codes decode to NaN). */
extern const float l8_e4m3_lut[256];

float    l8_e4m3_to_f32(uint8_t v);
/* Round to nearest, ties to even; saturates at +-448; NaN -> 0x7f. */
uint8_t  l8_f32_to_e4m3(float f);

static inline float l8_bf16_to_f32(uint16_t v)
{
    union { uint32_t u; float f; } x = { .u = (uint32_t)v << 16 };
    return x.f;
}
/* Round to nearest, ties to even; NaN stays NaN (quiet). */
uint16_t l8_f32_to_bf16(float f);

float    l8_f16_to_f32(uint16_t v);
uint16_t l8_f32_to_f16(float f);

/* Per-token dynamic activation quantization (the GPU's fused quantize
 * kernel implements the same definition):
 *   scale = max(absmax(x) / 448, L8_FP8_MIN_ACT_SCALE), computed in f32
 *   q[i]  = E4M3(x[i] / scale), round to nearest even, saturating.
 * Returns the scale. */
float l8_quantize_act_row(const float *x, size_t n, uint8_t *q);

/* Per-output-row weight quantization, as the FP8-dynamic recipe
 * (compressed-tensors, channel strategy) does it:
 *   s     = BF16(max(absmax(w) / 448, FLT_EPSILON))   (nearest even)
 *   q[i]  = E4M3(w[i] / float(s))                      (nearest even, saturating)
 * Returns s as BF16 bits. */
uint16_t l8_quantize_weight_row(const float *w, size_t n, uint8_t *q);

/* The index of the first of the n stored numbers at p (little-endian, any
 * alignment) that is NaN or infinite, or n when there is none. One pass,
 * eight bytes at a time, so the loader can check every weight at load for
 * about the cost of reading it. E4M3 (fn) has no infinities: its finder
 * looks for the NaN codes 0x7f and 0xff. */
size_t l8_find_nonfinite_e4m3(const void *p, size_t n);
size_t l8_find_nonfinite_bf16(const void *p, size_t n);
size_t l8_find_nonfinite_f16(const void *p, size_t n);
size_t l8_find_nonfinite_f32(const void *p, size_t n);
