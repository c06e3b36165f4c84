/* ngram.c - the n-gram index of prompt lookup. See ngram.h for the rules. */
#include "ngram.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/l8_hash.h"

#define EMPTY 0u   /* a slot holds an occurrence's end position + 1 */

struct l8_ngram {
    uint32_t cap, len;
    uint32_t *tok;                       /* [cap] the sequence */
    uint32_t n_slots;                    /* of each table: > 4/3 cap */
    uint32_t *slot[L8_NGRAM_MAX_N];      /* [n_slots] table of the (n+1)-grams */
    uint64_t seed;                       /* per-index hash seed: a prompt cannot
                                            be made to collide on purpose */
    uint64_t probes;
};

/* h[i] = hash of the (i+1)-gram ending at end[-1]: a chain from the last
 * token backwards, so one pass hashes every n. */
static void hash_suffixes(uint64_t seed, const uint32_t *end, uint32_t n_max, uint64_t *h)
{
    uint64_t x = seed;
    for (uint32_t i = 0; i < n_max; i++) {
        x = l8_mix64(x ^ (end[-1 - (int64_t)i] + L8_GOLDEN_GAMMA * (i + 1)));
        h[i] = x;
    }
}

/* The hash's high half scaled to [0, n_slots) (Lemire's reduction: any
 * table size, no power-of-two rounding of the memory). */
static uint32_t home(const struct l8_ngram *g, uint64_t h)
{
    return (uint32_t)(((h >> 32) * g->n_slots) >> 32);
}

static bool same(const uint32_t *a, const uint32_t *b, uint32_t n)
{
    return a[n - 1] == b[n - 1] && !memcmp(a, b, sizeof(uint32_t) * n);
}

size_t l8_ngram_bytes(uint32_t cap)
{
    size_t n_slots = (size_t)cap + cap / 3 + 1;
    return sizeof(struct l8_ngram) + sizeof(uint32_t) * (cap + L8_NGRAM_MAX_N * n_slots);
}

int l8_ngram_new(uint32_t cap, struct l8_ngram **out)
{
    if (cap == 0 || cap > L8_NGRAM_MAX_CAP)
        return -EINVAL;
    struct l8_ngram *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->cap = cap;
    /* at most cap - 1 distinct n-grams have a follower: load < 3/4, and a
     * probe always ends at an empty slot */
    g->n_slots = cap + cap / 3 + 1;
    g->tok = malloc(sizeof(uint32_t) * cap);
    g->slot[0] = malloc(sizeof(uint32_t) * L8_NGRAM_MAX_N * (size_t)g->n_slots);
    if (!g->tok || !g->slot[0]) {
        l8_ngram_free(g);
        return -ENOMEM;
    }
    for (uint32_t i = 1; i < L8_NGRAM_MAX_N; i++)
        g->slot[i] = g->slot[0] + (size_t)i * g->n_slots;
    g->seed = l8_mix64((uint64_t)(uintptr_t)g ^ 0x6e6772616dULL);
    l8_ngram_reset(g);
    *out = g;
    return 0;
}

void l8_ngram_free(struct l8_ngram *g)
{
    if (!g)
        return;
    free(g->tok);
    free(g->slot[0]);
    free(g);
}

void l8_ngram_reset(struct l8_ngram *g)
{
    memset(g->slot[0], 0, sizeof(uint32_t) * L8_NGRAM_MAX_N * (size_t)g->n_slots);
    g->len = 0;
    g->probes = 0;
}

const uint32_t *l8_ngram_tokens(const struct l8_ngram *g) { return g->tok; }
uint32_t l8_ngram_len(const struct l8_ngram *g) { return g->len; }
uint64_t l8_ngram_probes(const struct l8_ngram *g) { return g->probes; }

/* Records that the n-grams ending at tok[len - 1] (n = 1 .. min(8, len))
 * have a follower: each table's entry for its n-gram now points here, the
 * most recent occurrence. */
static void insert_tail(struct l8_ngram *g)
{
    const uint32_t end = g->len;   /* one past the n-grams' last token */
    const uint32_t n_max = end < L8_NGRAM_MAX_N ? end : L8_NGRAM_MAX_N;
    uint64_t h[L8_NGRAM_MAX_N];
    hash_suffixes(g->seed, g->tok + end, n_max, h);
    for (uint32_t i = 0; i < n_max; i++) {
        const uint32_t n = i + 1, *key = g->tok + end - n;
        uint32_t *t = g->slot[i];
        for (uint32_t s = home(g, h[i]);; s = s + 1 == g->n_slots ? 0 : s + 1) {
            g->probes++;
            if (t[s] == EMPTY || same(g->tok + t[s] - n, key, n)) {
                t[s] = end;   /* end position + 1 */
                break;
            }
        }
    }
}

int l8_ngram_push(struct l8_ngram *g, const uint32_t *tokens, uint32_t n)
{
    if (n > g->cap - g->len)
        return -ENOSPC;
    for (uint32_t i = 0; i < n; i++) {
        if (g->len)
            insert_tail(g);
        g->tok[g->len++] = tokens[i];
    }
    return 0;
}

uint32_t l8_ngram_propose(const struct l8_ngram *g, const uint32_t *query, uint32_t n_query,
                          uint32_t min_n, uint32_t k, uint32_t *draft, uint32_t *n_match)
{
    const uint32_t n_max = n_query < L8_NGRAM_MAX_N ? n_query : L8_NGRAM_MAX_N;
    if (n_match)
        *n_match = 0;
    if (min_n == 0)
        min_n = 1;
    if (k == 0 || n_max < min_n)
        return 0;
    uint64_t h[L8_NGRAM_MAX_N];
    hash_suffixes(g->seed, query + n_query, n_max, h);
    for (uint32_t n = n_max; n >= min_n; n--) {
        const uint32_t *key = query + n_query - n, *t = g->slot[n - 1];
        uint32_t s = home(g, h[n - 1]);
        while (t[s] != EMPTY && !same(g->tok + t[s] - n, key, n))
            s = s + 1 == g->n_slots ? 0 : s + 1;
        if (t[s] == EMPTY)
            continue;
        /* the occurrence ends at tok[t[s] - 1]: copy from tok[t[s]] on;
         * up to a break; past the sequence's end only when the query is its
         * own tail, then from the draft itself, one period (len - from >= 1)
         * back */
        const uint32_t from = t[s], period = g->len - from;
        uint32_t j = 0;
        for (; j < k && j < period && g->tok[from + j] != L8_NGRAM_BREAK; j++)
            draft[j] = g->tok[from + j];
        if (j == period && same(g->tok + g->len - n, key, n))
            for (; j < k; j++)
                draft[j] = draft[j - period];
        if (n_match)
            *n_match = n;
        return j;
    }
    return 0;
}
