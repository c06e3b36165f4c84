/* test_history: each scope's recent sequences as a draft source. A draft
 * comes from the scope's own earlier sequences only, never runs from one
 * into the next (the break), and a full index or a new scope past the
 * bound forgets the oldest; checked against what a search of the kept
 * sequences says. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../test.h"

#include "history.h"
#include "ngram.h"

/* History h's proposal for query q[n], up to k, into d; returns the count. */
static uint32_t ask(const struct l8_history *h, uint32_t scope, const uint32_t *q, uint32_t n,
                    uint32_t k, uint32_t *d, uint32_t *match)
{
    const struct l8_ngram *g = l8_history_index(h, scope);
    *match = 0;
    return g ? l8_ngram_propose(g, q, n, 1, k, d, match) : 0;
}

static void test_scopes_and_breaks(void)
{
    struct l8_history *h;
    CHECK_EQ(l8_history_new(0, 100, &h), -EINVAL);
    CHECK_EQ(l8_history_new(2, 1, &h), -EINVAL);
    CHECK_EQ(l8_history_new(2, 100, &h), 0);
    CHECK(l8_history_index(h, 7) == NULL);

    const uint32_t a[] = { 1, 2, 3, 4, 5, 6 }, b[] = { 10, 11, 12 };
    CHECK_EQ(l8_history_add(h, 7, a, 6), 0);
    CHECK_EQ(l8_history_add(h, 7, b, 3), 0);
    uint32_t d[8], m, n;
    /* "2 3" follows in a: "4 5 6", and the copy stops at b's break */
    const uint32_t q1[] = { 9, 2, 3 };
    n = ask(h, 7, q1, 3, 8, d, &m);
    CHECK_EQ(n, 3);
    CHECK_EQ(m, 2);
    CHECK(d[0] == 4 && d[1] == 5 && d[2] == 6);
    /* a's end then b's start is no n-gram: "6 10" is not found as 2 */
    const uint32_t q2[] = { 6, 10 };
    n = ask(h, 7, q2, 2, 8, d, &m);
    CHECK_EQ(m, 1);             /* "10" alone, then 11 12 */
    CHECK(n == 2 && d[0] == 11 && d[1] == 12);
    /* another scope sees nothing */
    n = ask(h, 8, q1, 3, 8, d, &m);
    CHECK_EQ(n, 0);
    /* two scopes held; a third takes the least recently used (8 is added
     * after 7, so 7 goes) */
    CHECK_EQ(l8_history_add(h, 8, b, 3), 0);
    CHECK_EQ(l8_history_add(h, 9, a, 6), 0);
    CHECK(l8_history_index(h, 7) == NULL);
    CHECK(l8_history_index(h, 8) != NULL);
    n = ask(h, 9, q1, 3, 8, d, &m);
    CHECK_EQ(n, 3);
    l8_history_free(h);
}

/* A full index starts over with the sequence added; one longer than the
 * index keeps its tail. */
static void test_full(void)
{
    struct l8_history *h;
    CHECK_EQ(l8_history_new(1, 16, &h), 0);
    uint32_t a[10], b[10], big[40], d[8], m, n;
    for (uint32_t i = 0; i < 10; i++)
        a[i] = 100 + i, b[i] = 200 + i;
    for (uint32_t i = 0; i < 40; i++)
        big[i] = 300 + i;
    CHECK_EQ(l8_history_add(h, 1, a, 10), 0);     /* 11 of 16 */
    const uint32_t qa[] = { 101 }, qb[] = { 201 }, qbig[] = { 330 }, qold[] = { 310 };
    CHECK_EQ(ask(h, 1, qa, 1, 2, d, &m), 2);
    CHECK_EQ(l8_history_add(h, 1, b, 10), 0);     /* would be 22: a goes */
    CHECK_EQ(ask(h, 1, qa, 1, 2, d, &m), 0);
    n = ask(h, 1, qb, 1, 2, d, &m);
    CHECK(n == 2 && d[0] == 202 && d[1] == 203);
    CHECK_EQ(l8_history_add(h, 1, big, 40), 0);   /* its last 15 */
    CHECK_EQ(l8_ngram_len(l8_history_index(h, 1)), 16);
    n = ask(h, 1, qbig, 1, 2, d, &m);
    CHECK(n == 2 && d[0] == 331 && d[1] == 332);
    CHECK_EQ(ask(h, 1, qold, 1, 2, d, &m), 0);
    CHECK_EQ(ask(h, 1, qb, 1, 2, d, &m), 0);
    l8_history_free(h);
}

int main(void)
{
    test_scopes_and_breaks();
    test_full();
    if (t_failures) {
        fprintf(stderr, "test_history: %d failures\n", t_failures);
        return 1;
    }
    printf("test_history: ok\n");
    return 0;
}
