/* draft_len.h - the adaptive draft length of one request's speculation.
 *
 * Fed, after each step, how many tokens were drafted and how many of them
 * the verification accepted; gives the next step's draft length k in
 * 0..k_max. The rule (k starts at k_max):
 *   all drafts accepted (drafted > 0)   k = min(2k, k_max)
 *   some accepted (0 < accepted)        k = max(k / 2, accepted + 1)
 *   none accepted                       k = k / 2
 *   nothing drafted (no match found)    k unchanged
 * Any accepted draft resets the back-off to L8_DRAFT_LEN_BACKOFF_MIN. When
 * k falls to 0 the request stops drafting (and looking up) for `backoff`
 * steps, then retries at k = 1; each time k falls to 0 again the back-off
 * doubles, up to L8_DRAFT_LEN_BACKOFF_MAX steps. So a request whose drafts
 * keep failing costs one drafted row every few hundred steps, and one that
 * starts repeating later is picked up within that many. */
#pragma once
#include <stdint.h>

#define L8_DRAFT_LEN_BACKOFF_MIN 4u
#define L8_DRAFT_LEN_BACKOFF_MAX 256u

struct l8_draft_len {
    uint32_t k;         /* the next step's draft length, 0..k_max */
    uint32_t k_max;
    uint32_t wait;      /* at k = 0: steps left before the retry */
    uint32_t backoff;   /* the wait after the next fall to 0 */
};

void l8_draft_len_init(struct l8_draft_len *c, uint32_t k_max);
/* After every step, drafted or not: accepted <= drafted. */
void l8_draft_len_update(struct l8_draft_len *c, uint32_t drafted, uint32_t accepted);
