/* sampler.h - token sampling, shared by both engines.
 *
 * The definition (the GPU sampler implements the same one):
 *  1. repetition penalty: each distinct id in the history has its logit l
 *     replaced by l / p when l > 0, l * p otherwise;
 *  1b. a token mask (constrained decoding): the logit of each id outside it
 *     is -inf, so the steps below see only the allowed ids;
 *  2. logprob_out = log-softmax of the chosen id over these logits;
 *  3. temperature <= 0: argmax (lowest id on ties). Otherwise divide by the
 *     temperature, order candidates by logit descending (lower id first on
 *     ties), keep the top_k (0 = all), softmax, keep the shortest prefix whose
 *     probability sum reaches top_p (at least one), drop those below
 *     min_p * p(top), and pick with u = l8_philox_uniform(seed, index):
 *     the first candidate whose running sum of probabilities exceeds
 *     u * (sum of the kept probabilities).
 * The same seed and index give the same u everywhere, so the same seed
 * gives the same tokens on the CPU and the GPU (up to logits that differ). */
#pragma once
#include <stdint.h>
#include "engine.h"

/* Philox4x32-10 (Salmon et al., SC'11) keyed by the seed, counter = index:
 * a uniform float in [0, 1) from the first output word's top 24 bits. */
float l8_philox_uniform(uint64_t seed, uint64_t index);
void  l8_philox4x32_10(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);

struct l8_sampler;  /* scratch space sized for one vocabulary */
struct l8_sampler *l8_sampler_new(uint32_t vocab);
void l8_sampler_free(struct l8_sampler *s);
/* logits [vocab] are not modified. allowed: NULL, or the mask of the ids
 * that may be chosen (bit i of allowed[i / 32]; l8_seq.allowed). */
uint32_t l8_sample(struct l8_sampler *s, const float *logits,
                   const struct l8_sampling *p, const uint32_t *history,
                   uint32_t n_history, const uint32_t *allowed, uint64_t index,
                   float *logprob);
