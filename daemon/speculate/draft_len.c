/* draft_len.c - the adaptive draft length; the rule is in draft_len.h. */
#include "draft_len.h"

void l8_draft_len_init(struct l8_draft_len *c, uint32_t k_max)
{
    *c = (struct l8_draft_len){ .k = k_max, .k_max = k_max,
                                .backoff = L8_DRAFT_LEN_BACKOFF_MIN };
}

void l8_draft_len_update(struct l8_draft_len *c, uint32_t drafted, uint32_t accepted)
{
    if (c->k == 0) {
        if (c->k_max && --c->wait == 0)
            c->k = 1;
        return;
    }
    if (drafted == 0)
        return;
    if (accepted)
        c->backoff = L8_DRAFT_LEN_BACKOFF_MIN;
    if (accepted >= drafted) {
        c->k = 2 * c->k < c->k_max ? 2 * c->k : c->k_max;
        return;
    }
    c->k /= 2;
    if (accepted && c->k < accepted + 1)
        c->k = accepted + 1;
    if (c->k == 0) {
        c->wait = c->backoff;
        c->backoff = 2 * c->backoff < L8_DRAFT_LEN_BACKOFF_MAX ? 2 * c->backoff
                                                               : L8_DRAFT_LEN_BACKOFF_MAX;
    }
}
