/* test_draft_len: the adaptive draft length's rule (draft_len.h): halving
 * on rejection, doubling on acceptance, the back-off at 0 and its cap,
 * what a request whose drafts always fail costs, and how soon one that
 * starts repeating later is drafting at k_max again. */
#include <stdio.h>

#include "../test.h"

#include "draft_len.h"

/* One step: draft min(k, avail) tokens, of which the first `good` hold. */
static void step(struct l8_draft_len *c, uint32_t avail, uint32_t good, uint64_t *drafted)
{
    uint32_t d = c->k < avail ? c->k : avail, a = good < d ? good : d;
    *drafted += d;
    l8_draft_len_update(c, d, a);
}

static void test_rule(void)
{
    struct l8_draft_len c;
    uint64_t drafted = 0;
    l8_draft_len_init(&c, 8);
    CHECK_EQ(c.k, 8);
    step(&c, 8, 5, &drafted);          /* 5 of 8: max(4, 6) */
    CHECK_EQ(c.k, 6);
    step(&c, 8, 1, &drafted);          /* 1 of 6: max(3, 2) */
    CHECK_EQ(c.k, 3);
    step(&c, 0, 0, &drafted);          /* nothing found to draft: unchanged */
    CHECK_EQ(c.k, 3);
    step(&c, 8, 8, &drafted);          /* all: doubled, up to k_max */
    CHECK_EQ(c.k, 6);
    step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 8);
    step(&c, 2, 2, &drafted);          /* all of a short draft: still grows */
    CHECK_EQ(c.k, 8);
    /* none accepted: halved down to 0 */
    const uint32_t down[] = { 4, 2, 1, 0 };
    for (int i = 0; i < 4; i++) {
        step(&c, 8, 0, &drafted);
        CHECK_EQ(c.k, down[i]);
    }
    /* at 0 for the back-off, then a retry at 1 */
    for (uint32_t i = 1; i < L8_DRAFT_LEN_BACKOFF_MIN; i++) {
        step(&c, 8, 8, &drafted);
        CHECK_EQ(c.k, 0);
    }
    step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 1);
    /* rejected again: twice the wait */
    step(&c, 8, 0, &drafted);
    CHECK_EQ(c.k, 0);
    for (uint32_t i = 1; i < 2 * L8_DRAFT_LEN_BACKOFF_MIN; i++)
        step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 0);
    step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 1);
    /* accepted: growing, and the back-off is back to its least */
    const uint32_t up[] = { 2, 4, 8, 8 };
    for (int i = 0; i < 4; i++) {
        step(&c, 8, 8, &drafted);
        CHECK_EQ(c.k, up[i]);
    }
    CHECK_EQ(c.backoff, L8_DRAFT_LEN_BACKOFF_MIN);
    /* k_max 0: never drafts */
    l8_draft_len_init(&c, 0);
    for (int i = 0; i < 1000; i++)
        step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 0);
    /* k_max 1 */
    l8_draft_len_init(&c, 1);
    step(&c, 8, 8, &drafted);
    CHECK_EQ(c.k, 1);
    step(&c, 8, 0, &drafted);
    CHECK_EQ(c.k, 0);
}

/* Drafts that always fail: the back-off doubles to its cap, so over many
 * steps a request drafts about one token every L8_DRAFT_LEN_BACKOFF_MAX
 * steps. Then it starts repeating: drafting at k_max again within a
 * back-off and log2(k_max) steps. */
static void test_costs(void)
{
    enum { STEPS = 100000, KMAX = 8 };
    struct l8_draft_len c;
    l8_draft_len_init(&c, KMAX);
    uint64_t drafted = 0;
    for (int i = 0; i < STEPS; i++)
        step(&c, KMAX, 0, &drafted);
    CHECK_EQ(c.backoff, L8_DRAFT_LEN_BACKOFF_MAX);
    /* 8 + 4 + 2 + 1 at first, the retries with waits 4, 8, ..., 256, then
     * one every 256 */
    uint64_t bound = 15 + 7 + STEPS / L8_DRAFT_LEN_BACKOFF_MAX + 1;
    printf("always rejected: %llu tokens drafted in %d steps (bound %llu)\n",
           (unsigned long long)drafted, STEPS, (unsigned long long)bound);
    CHECK(drafted <= bound);
    int steps = 0;
    while (c.k < KMAX && steps < 1000) {
        step(&c, KMAX, KMAX, &drafted);
        steps++;
    }
    printf("repeating again: k = %u after %d steps\n", c.k, steps);
    CHECK(c.k == KMAX && steps <= (int)L8_DRAFT_LEN_BACKOFF_MAX + 3);
}

int main(void)
{
    test_rule();
    test_costs();
    return t_result("draft_len");
}
