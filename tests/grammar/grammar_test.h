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
    uint32_t *off = malloc(((size_t)n + 1) * sizeof *off);
    bool *special = calloc(n, 1);
    size_t cap = 1 << 20, len = 0;
    uint8_t *bytes = malloc(cap);
    REQUIRE(off && special && bytes);
    for (uint32_t i = 0; i < n; i++) {
        const char *b = NULL;
        size_t bl = 0;
        off[i] = (uint32_t)len;
        if (l8tok_token_bytes(tok, i, &b, &bl) < 0) {
            special[i] = true;     /* an unused id */
            continue;
        }
        special[i] = l8tok_is_special(tok, i);
        while (len + bl > cap)
            REQUIRE((bytes = realloc(bytes, cap *= 2)));
        memcpy(bytes + len, b, bl);
        len += bl;
    }
    off[n] = (uint32_t)len;
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
