/* reference.h - comparing logits against reference data, and the decode
 * loop of the golden greedy check, shared by the CPU golden test
 * (tests/engine) and the GPU engine test (tests/gpu), so the two cannot
 * check different things. */
#pragma once
#include <math.h>
#include <stdbool.h>
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

/* Decode on one sequence after a prefill of tok[0, S): `first` is the
 * token the prefill gave (sampled, or the argmax of its last logits); each
 * step feeds the newest token at the next position with tok (the prompt
 * and the tokens so far) as the history, and samples the next with sp,
 * sample_index k + 1 at the k-th step (as the daemon counts). out[0, n)
 * gets first and the n - 1 tokens after it, tok[S, S + n - 1) the tokens
 * fed, so tok needs room for S + n - 1. Returns how many tokens out holds:
 * n, or fewer where a step failed. */
static inline uint32_t ref_decode(struct l8_engine *e, uint32_t *tok, uint32_t S, uint32_t first,
                                  const uint32_t *pages, uint32_t n_pages,
                                  const struct l8_sampling *sp, uint32_t n, uint32_t *out)
{
    uint32_t next = first;
    for (uint32_t k = 0; k < n; k++) {
        out[k] = next;
        if (k + 1 == n)
            break;
        tok[S + k] = next;
        struct l8_seq s = { .tokens = &tok[S + k], .n_tokens = 1, .pos = S + k,
                            .pages = pages, .n_pages = n_pages, .sample = true,
                            .sampling = sp, .history = tok, .n_history = S + k + 1,
                            .sample_index = k + 1 };
        if (l8_engine_step(e, &s, 1) < 0)
            return k + 1;
        next = s.token_out;
    }
    return n;
}

/* The golden greedy check: from the prefill of tok[0, S) (last: its last
 * position's logits [V]), n tokens of greedy decode through the engine's
 * sampler (temperature 0), against the reference continuation want[n].
 * *match gets how many leading tokens equal want's. Returns false where a
 * step failed (*match then counts among the tokens decoded before it). */
static inline bool ref_greedy(struct l8_engine *e, uint32_t *tok, uint32_t S, const float *last,
                              uint32_t V, const uint32_t *pages, uint32_t n_pages,
                              const int32_t *want, uint32_t n, uint32_t *match)
{
    const struct l8_sampling greedy = { .temperature = 0.0f, .top_p = 1.0f,
                                        .repetition_penalty = 1.0f };
    uint32_t *got = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (!got) {
        *match = 0;
        return false;
    }
    uint32_t n_got = ref_decode(e, tok, S, ref_argmax(last, V), pages, n_pages, &greedy, n, got);
    uint32_t m = 0;
    while (m < n_got && got[m] == (uint32_t)want[m])
        m++;
    *match = m;
    free(got);
    return n_got == n;
}
