/* history.c - each scope's recent sequences in an n-gram index. See history.h. */
#include "history.h"

#include <errno.h>
#include <stdlib.h>

#include "ngram.h"

struct scope {
    uint32_t id;
    uint64_t used;              /* h->clock at its last add; 0: free */
    struct l8_ngram *g;
};

struct l8_history {
    uint32_t n_scopes, cap;
    uint64_t clock;
    struct scope sc[];
};

int l8_history_new(uint32_t n_scopes, uint32_t cap, struct l8_history **out)
{
    if (!n_scopes || n_scopes > 1024 || cap < 2 || cap > L8_NGRAM_MAX_CAP)
        return -EINVAL;
    struct l8_history *h = calloc(1, sizeof(*h) + n_scopes * sizeof(struct scope));
    if (!h)
        return -ENOMEM;
    h->n_scopes = n_scopes;
    h->cap = cap;
    *out = h;
    return 0;
}

void l8_history_free(struct l8_history *h)
{
    if (!h)
        return;
    for (uint32_t i = 0; i < h->n_scopes; i++)
        l8_ngram_free(h->sc[i].g);
    free(h);
}

static struct scope *find(const struct l8_history *h, uint32_t id)
{
    for (uint32_t i = 0; i < h->n_scopes; i++)
        if (h->sc[i].used && h->sc[i].id == id)
            return (struct scope *)&h->sc[i];
    return NULL;
}

int l8_history_add(struct l8_history *h, uint32_t scope, const uint32_t *tokens, uint32_t n)
{
    if (n == 0)
        return 0;
    struct scope *s = find(h, scope);
    if (!s) {
        s = &h->sc[0];          /* a free one, else the least recently used */
        for (uint32_t i = 1; i < h->n_scopes && s->used; i++)
            if (h->sc[i].used < s->used)
                s = &h->sc[i];
        if (!s->g && l8_ngram_new(h->cap, &s->g) < 0)
            return -ENOMEM;
        l8_ngram_reset(s->g);
        s->id = scope;
    }
    s->used = ++h->clock;
    if (n > h->cap - 1) {
        tokens += n - (h->cap - 1);
        n = h->cap - 1;
    }
    const uint32_t brk = L8_NGRAM_BREAK;
    if (l8_ngram_len(s->g) + 1 + n > h->cap)
        l8_ngram_reset(s->g);
    /* fits: checked above */
    (void)l8_ngram_push(s->g, &brk, 1);
    (void)l8_ngram_push(s->g, tokens, n);
    return 0;
}

const struct l8_ngram *l8_history_index(const struct l8_history *h, uint32_t scope)
{
    const struct scope *s = find(h, scope);
    return s ? s->g : NULL;
}
