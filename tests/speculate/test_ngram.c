/* test_ngram: prompt lookup's proposals on hand-made sequences (repeats,
 * overlaps, no match, the longest suffix preferred, the most recent
 * occurrence, another index as the source), against a brute-force search
 * on random sequences, and the work of growing the index: hash-table
 * probes a token bounded by a constant, whatever the sequence. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "ngram.h"

#define MAXK 16

static struct l8_ngram *index_of(const uint32_t *t, uint32_t n, uint32_t cap)
{
    struct l8_ngram *g;
    REQUIRE(l8_ngram_new(cap, &g) == 0);
    REQUIRE(l8_ngram_push(g, t, n) == 0);
    return g;
}

/* g's proposal for its own tail equals want[n_want], from a match of
 * length match. */
static void own_is(const struct l8_ngram *g, uint32_t min_n, uint32_t k, uint32_t match,
                   const uint32_t *want, uint32_t n_want, int line)
{
    uint32_t d[MAXK], m = 99;
    memset(d, 0xff, sizeof d);
    uint32_t n = l8_ngram_propose(g, l8_ngram_tokens(g), l8_ngram_len(g), min_n, k, d, &m);
    bool ok = n == n_want && m == match && !memcmp(d, want, sizeof(uint32_t) * n);
    for (uint32_t i = n; i < MAXK; i++)
        ok &= d[i] == UINT32_MAX;   /* nothing written past the count */
    if (!ok) {
        fprintf(stderr, "line %d: match %u (expected %u), drafted %u:", line, m, match, n);
        for (uint32_t i = 0; i < n; i++)
            fprintf(stderr, " %u", d[i]);
        fprintf(stderr, ", expected %u:", n_want);
        for (uint32_t i = 0; i < n_want; i++)
            fprintf(stderr, " %u", want[i]);
        fprintf(stderr, "\n");
        t_failures++;
    }
}
#define OWN(g, min_n, k, match, ...)                                            \
    do {                                                                        \
        const uint32_t w_[] = { __VA_ARGS__ };                                  \
        own_is(g, min_n, k, match, w_ + 1, sizeof w_ / sizeof w_[0] - 1, __LINE__); \
    } while (0)
/* OWN's expected list starts with a dummy so that it may be empty. */
#define X 0

static void test_limits(void)
{
    struct l8_ngram *g;
    CHECK_EQ(l8_ngram_new(0, &g), -EINVAL);
    CHECK_EQ(l8_ngram_new(L8_NGRAM_MAX_CAP + 1, &g), -EINVAL);
    REQUIRE(l8_ngram_new(4, &g) == 0);
    OWN(g, 1, 4, 0, X);                          /* empty */
    const uint32_t t[] = { 1, 1, 1, 1, 1 };
    CHECK_EQ(l8_ngram_push(g, t, 5), -ENOSPC);
    CHECK_EQ(l8_ngram_len(g), 0);             /* nothing appended */
    CHECK_EQ(l8_ngram_push(g, t, 1), 0);
    OWN(g, 1, 4, 0, X);                          /* one token: nothing earlier */
    CHECK_EQ(l8_ngram_push(g, t, 3), 0);
    CHECK_EQ(l8_ngram_push(g, t, 1), -ENOSPC);
    CHECK_EQ(l8_ngram_len(g), 4);
    OWN(g, 1, 0, 0, X);                          /* k = 0 */
    OWN(g, 1, 3, 3, X, 1, 1, 1);
    l8_ngram_reset(g);
    CHECK_EQ(l8_ngram_len(g), 0);
    CHECK_EQ(l8_ngram_probes(g), 0);
    OWN(g, 1, 4, 0, X);
    CHECK(l8_ngram_bytes(1000) >= 4 * 1000 + 8 * 4 * 1000 * 4 / 3);
    CHECK(l8_ngram_bytes(1000) <= 48 * 1000);
    l8_ngram_free(g);
    l8_ngram_free(NULL);
}

static void test_hand_made(void)
{
    /* no match: distinct tokens */
    const uint32_t distinct[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    struct l8_ngram *g = index_of(distinct, 10, 64);
    OWN(g, 1, 4, 0, X);
    l8_ngram_free(g);

    /* a repeated block: what followed its first copy, then (the copy
     * reaching the end) its own continuation, one period back */
    const uint32_t rep[] = { 1, 2, 3, 4, 5, 9, 1, 2, 3 };
    g = index_of(rep, 9, 64);
    OWN(g, 1, 4, 3, X, 4, 5, 9, 1);
    OWN(g, 1, 10, 3, X, 4, 5, 9, 1, 2, 3, 4, 5, 9, 1);
    l8_ngram_free(g);

    /* overlapping occurrences */
    const uint32_t same[] = { 7, 7, 7, 7 };
    g = index_of(same, 4, 64);
    OWN(g, 1, 5, 3, X, 7, 7, 7, 7, 7);
    l8_ngram_free(g);
    const uint32_t alt[] = { 1, 2, 1, 2, 1 };
    g = index_of(alt, 5, 64);
    OWN(g, 1, 4, 3, X, 2, 1, 2, 1);
    l8_ngram_free(g);

    /* longest suffix preferred: "7 1 2" was followed by 3, the more recent
     * "2" by 4; min_n above the longest match drafts nothing */
    const uint32_t longest[] = { 7, 1, 2, 3, 0, 0, 5, 2, 4, 0, 7, 1, 2 };
    g = index_of(longest, 13, 64);
    OWN(g, 1, 1, 3, X, 3);
    OWN(g, 3, 1, 3, X, 3);
    OWN(g, 4, 1, 0, X);
    l8_ngram_free(g);
    const uint32_t shorter[] = { 8, 1, 2, 3, 0, 0, 5, 2, 4, 0, 7, 1, 2 };
    g = index_of(shorter, 13, 64);
    OWN(g, 1, 1, 2, X, 3);     /* "1 2" beats the more recent "2" */
    OWN(g, 3, 1, 0, X);
    l8_ngram_free(g);

    /* most recent occurrence of the same n-gram */
    const uint32_t recent[] = { 5, 6, 1, 5, 6, 2, 5, 6 };
    g = index_of(recent, 8, 64);
    OWN(g, 1, 3, 2, X, 2, 5, 6);
    l8_ngram_free(g);

    /* a suffix longer than 8 matches as its last 8 tokens */
    uint32_t long_rep[40];
    for (uint32_t i = 0; i < 20; i++)
        long_rep[i] = long_rep[20 + i] = 100 + i;
    long_rep[19] = 99;   /* the first copy ends differently */
    g = index_of(long_rep, 39, 64);
    OWN(g, 1, 3, 8, X, 99, 100, 101);
    l8_ngram_free(g);
}

/* A second source: another sequence's index (say, a previous prompt),
 * queried with this sequence's tail. */
static void test_other_index(void)
{
    const uint32_t prompt[] = { 10, 11, 12, 13, 14, 15 };
    struct l8_ngram *other = index_of(prompt, 6, 64);
    const uint32_t mine[] = { 3, 4, 11, 12 };
    struct l8_ngram *own = index_of(mine, 4, 64);
    uint32_t d[MAXK], m;
    CHECK_EQ(l8_ngram_propose(own, mine, 4, 1, 5, d, &m), 0);
    CHECK_EQ(m, 0);
    /* the copy stops at the other sequence's end: its tail is not ours */
    CHECK_EQ(l8_ngram_propose(other, mine, 4, 1, 5, d, &m), 3);
    CHECK(d[0] == 13 && d[1] == 14 && d[2] == 15);
    CHECK_EQ(m, 2);
    CHECK_EQ(l8_ngram_propose(other, mine, 4, 3, 5, d, NULL), 0);
    /* the other's last token has no follower there */
    const uint32_t at_end[] = { 15 };
    CHECK_EQ(l8_ngram_propose(other, at_end, 1, 1, 5, d, NULL), 0);
    l8_ngram_free(own);
    l8_ngram_free(other);
}

/* The rule by brute force: the longest suffix (n <= 8, >= min_n) of t[len]
 * that ends again at some e < len - 1, the latest such e; the draft is the
 * copy of t from e + 1 on, extended with itself past len. */
static uint32_t brute(const uint32_t *t, uint32_t len, uint32_t min_n, uint32_t k, uint32_t *d,
                      uint32_t *match)
{
    *match = 0;
    for (uint32_t n = len < 8 ? len : 8; n >= min_n; n--)
        for (int64_t e = (int64_t)len - 2; e >= (int64_t)n - 1; e--) {
            if (memcmp(t + e + 1 - n, t + len - n, sizeof(uint32_t) * n))
                continue;
            uint32_t ext[64 + MAXK];
            memcpy(ext, t, sizeof(uint32_t) * len);
            for (uint32_t j = 0; j < k; j++)
                ext[len + j] = d[j] = ext[e + 1 + j];
            *match = n;
            return k;
        }
    return 0;
}

static void test_against_brute_force(void)
{
    uint64_t x = 12345;
    uint32_t t[64], d[MAXK], w[MAXK], m, mw;
    struct l8_ngram *g;
    REQUIRE(l8_ngram_new(64, &g) == 0);
    int checked = 0, matched = 0;
    for (int trial = 0; trial < 400; trial++) {
        const uint32_t vocab = 2 + trial % 5, min_n = 1 + trial % 3, k = 1 + trial % MAXK;
        l8_ngram_reset(g);
        for (uint32_t len = 1; len <= 64; len++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            t[len - 1] = (uint32_t)(x >> 33) % vocab;
            REQUIRE(l8_ngram_push(g, t + len - 1, 1) == 0);
            uint32_t n = l8_ngram_propose(g, t, len, min_n, k, d, &m);
            uint32_t nw = brute(t, len, min_n, k, w, &mw);
            checked++;
            matched += nw > 0;
            if (n != nw || m != mw || memcmp(d, w, sizeof(uint32_t) * n)) {
                fprintf(stderr, "trial %d len %u: drafted %u from a match of %u, brute force"
                        " %u from %u\n", trial, len, n, m, nw, mw);
                t_failures++;
                break;
            }
        }
    }
    printf("brute force: %d proposals compared, %d with a draft\n", checked, matched);
    CHECK(matched > checked / 2);
    l8_ngram_free(g);
}

/* Probes a pushed token, for sequences that stress different parts: one
 * token repeated (every n-gram the same), random over 3 ids (every n-gram
 * seen many times), random over 2^20 ids (every n-gram new, the tables
 * filling up), a period of 1000 (old n-grams found again). The bound holds
 * at every size: no work grows with the sequence. */
static void test_growth_work(void)
{
    enum { N = 1 << 18 };
    uint32_t *t = malloc(sizeof(uint32_t) * N);
    REQUIRE(t);
    const char *names[] = { "constant", "random/3", "random/2^20", "period 1000" };
    for (int kind = 0; kind < 4; kind++) {
        uint64_t x = 99;
        for (uint32_t i = 0; i < N; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            t[i] = kind == 0 ? 5 : kind == 1 ? (uint32_t)(x >> 33) % 3
                 : kind == 2 ? (uint32_t)(x >> 33) % (1u << 20) : (i % 1000) * 7;
        }
        for (uint32_t n = 1 << 10; n <= N; n <<= 4) {
            struct l8_ngram *g;
            REQUIRE(l8_ngram_new(n, &g) == 0);
            REQUIRE(l8_ngram_push(g, t, n) == 0);
            double per = (double)l8_ngram_probes(g) / n;
            printf("growth %-12s %7u tokens: %.2f probes a token\n", names[kind], n, per);
            /* 8 inserts, each at most a few probes at load <= 3/4 */
            CHECK(per <= 8 * 4.0, "%s, %u tokens: %.2f probes a token", names[kind], n, per);
            l8_ngram_free(g);
        }
    }
    free(t);
}

int main(void)
{
    test_limits();
    test_hand_made();
    test_other_index();
    test_against_brute_force();
    test_growth_work();
    return t_result("ngram");
}
