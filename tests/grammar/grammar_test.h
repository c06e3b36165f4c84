/* grammar_test.h - shared by the grammar tests and benchmarks, on top of
 * ../test.h: the real vocabulary as an l8g_vocab, and a seeded generator. */
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "grammar.h"
#include "llama8_tokenizer.h"

/* The Llama 3 end-of-reply tokens, as the daemon's stop ids. */
static const char *const gt_end_names[] = { "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>" };

/* tok's vocabulary: each id's bytes, specials marked; aborts on failure. */
static inline struct l8g_vocab *gt_vocab(const l8tok *tok)
{
    uint32_t n = l8tok_n_ids(tok);
    uint8_t *bytes;
    uint32_t *off;
    bool *special;
    REQUIRE(l8tok_table(tok, n, &bytes, &off, &special) == 0);
    uint32_t ends[3], n_end = 0;
    for (int i = 0; i < 3; i++)
        if (l8tok_token_id(tok, gt_end_names[i], strlen(gt_end_names[i]), &ends[n_end]) == 0)
            n_end++;
    struct l8g_vocab *v = NULL;
    REQUIRE(l8g_vocab_new(n, bytes, off, special, ends, n_end, &v) == 0);
    free(off);
    free(special);
    free(bytes);
    return v;
}

/* xorshift64*: the same sequence for the same seed everywhere. */
static inline uint64_t gt_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static inline bool gt_bit(const uint32_t *w, uint32_t id)
{
    return w[id >> 5] >> (id & 31) & 1;
}
