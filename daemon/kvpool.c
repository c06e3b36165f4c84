/* kvpool.c - page ids, reference counts, free list, LRU prefix cache.
 * See kvpool.h for the states and the prefix-cache key. */
#include "kvpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/l8_hash.h"

#define NIL UINT32_MAX

struct l8_kvpool {
    uint32_t n_pages, page_size;
    uint32_t *refcnt;      /* [n_pages] */
    uint32_t *gen;         /* [n_pages] bumped when a page leaves the cache */
    /* free list: a stack of page ids */
    uint32_t *free_stack;  /* [n_pages] */
    uint32_t n_free;
    /* LRU of cached (refcount 0, registered) pages; head = least recent */
    uint32_t *lru_prev, *lru_next; /* [n_pages] */
    uint32_t lru_head, lru_tail, n_lru;
    /* prefix cache: chained hash table over registered pages */
    bool *reg;             /* [n_pages] */
    uint64_t *key;         /* [n_pages] hash of (parent, parent gen, tokens) */
    uint32_t *parent;      /* [n_pages] parent page or L8_KVPOOL_ROOT */
    uint32_t *parent_gen;  /* [n_pages] the parent's generation, or the scope
                              of a first page */
    uint32_t *tokens;      /* [n_pages, page_size] the page's token ids */
    uint32_t *hnext;       /* [n_pages] next page in the bucket */
    uint32_t *bucket;      /* [n_buckets] first page or NIL */
    uint32_t n_buckets;    /* power of two */
    uint32_t n_reg, n_used, n_shared;
    uint64_t seed;         /* per-pool hash seed: chains an attacker cannot
                              precompute (lookups compare exactly anyway) */
};

static uint64_t page_key(const struct l8_kvpool *p, uint32_t parent,
                         uint32_t pgen, const uint32_t *tokens)
{
    uint64_t h = l8_mix64(p->seed ^ (((uint64_t)parent << 32) | pgen));
    for (uint32_t i = 0; i < p->page_size; i++)
        h = l8_mix64(h ^ (tokens[i] + L8_GOLDEN_GAMMA * (i + 1)));
    return h;
}

int l8_kvpool_new(uint32_t n_pages, uint32_t page_size, struct l8_kvpool **out)
{
    if (n_pages == 0 || page_size == 0 || n_pages == NIL)
        return -EINVAL;
    struct l8_kvpool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->n_pages = n_pages;
    p->page_size = page_size;
    p->n_buckets = 1;
    while (p->n_buckets < 2 * (uint64_t)n_pages && p->n_buckets < (1u << 30))
        p->n_buckets <<= 1;
    p->refcnt = calloc(n_pages, sizeof(uint32_t));
    p->gen = calloc(n_pages, sizeof(uint32_t));
    p->free_stack = malloc(n_pages * sizeof(uint32_t));
    p->lru_prev = malloc(n_pages * sizeof(uint32_t));
    p->lru_next = malloc(n_pages * sizeof(uint32_t));
    p->reg = calloc(n_pages, sizeof(bool));
    p->key = calloc(n_pages, sizeof(uint64_t));
    p->parent = malloc(n_pages * sizeof(uint32_t));
    p->parent_gen = calloc(n_pages, sizeof(uint32_t));
    p->tokens = malloc((size_t)n_pages * page_size * sizeof(uint32_t));
    p->hnext = malloc(n_pages * sizeof(uint32_t));
    p->bucket = malloc(p->n_buckets * sizeof(uint32_t));
    if (!p->refcnt || !p->gen || !p->free_stack || !p->lru_prev || !p->lru_next ||
        !p->reg || !p->key || !p->parent || !p->parent_gen || !p->tokens ||
        !p->hnext || !p->bucket)
        goto err;
    /* Hand out low page ids first: pop from the end of the stack. */
    for (uint32_t i = 0; i < n_pages; i++) {
        p->free_stack[i] = n_pages - 1 - i;
        p->lru_prev[i] = p->lru_next[i] = NIL;
        p->parent[i] = L8_KVPOOL_ROOT;
        p->hnext[i] = NIL;
    }
    p->n_free = n_pages;
    for (uint32_t b = 0; b < p->n_buckets; b++)
        p->bucket[b] = NIL;
    p->lru_head = p->lru_tail = NIL;
    p->seed = l8_mix64((uint64_t)(uintptr_t)p ^ 0x6c6c616d6138ULL);
    *out = p;
    return 0;
err:
    l8_kvpool_free(p);
    return -ENOMEM;
}

void l8_kvpool_free(struct l8_kvpool *p)
{
    if (!p)
        return;
    free(p->refcnt); free(p->gen); free(p->free_stack);
    free(p->lru_prev); free(p->lru_next); free(p->reg); free(p->key);
    free(p->parent); free(p->parent_gen); free(p->tokens); free(p->hnext);
    free(p->bucket);
    free(p);
}

uint32_t l8_kvpool_page_size(const struct l8_kvpool *p) { return p->page_size; }
uint32_t l8_kvpool_n_pages(const struct l8_kvpool *p) { return p->n_pages; }
uint32_t l8_kvpool_available(const struct l8_kvpool *p) { return p->n_free + p->n_lru; }
uint32_t l8_kvpool_refcount(const struct l8_kvpool *p, uint32_t page)
{
    return page < p->n_pages ? p->refcnt[page] : 0;
}
bool l8_kvpool_is_registered(const struct l8_kvpool *p, uint32_t page)
{
    return page < p->n_pages && p->reg[page];
}

static void lru_remove(struct l8_kvpool *p, uint32_t pg)
{
    uint32_t a = p->lru_prev[pg], b = p->lru_next[pg];
    if (a != NIL) p->lru_next[a] = b; else p->lru_head = b;
    if (b != NIL) p->lru_prev[b] = a; else p->lru_tail = a;
    p->lru_prev[pg] = p->lru_next[pg] = NIL;
    p->n_lru--;
}

static void lru_push_tail(struct l8_kvpool *p, uint32_t pg)
{
    p->lru_prev[pg] = p->lru_tail;
    p->lru_next[pg] = NIL;
    if (p->lru_tail != NIL) p->lru_next[p->lru_tail] = pg; else p->lru_head = pg;
    p->lru_tail = pg;
    p->n_lru++;
}

static void unregister(struct l8_kvpool *p, uint32_t pg)
{
    uint32_t *link = &p->bucket[p->key[pg] & (p->n_buckets - 1)];
    while (*link != pg)
        link = &p->hnext[*link];
    *link = p->hnext[pg];
    p->hnext[pg] = NIL;
    p->reg[pg] = false;
    p->n_reg--;
    /* Children keyed on (pg, old gen) can never match again. */
    p->gen[pg]++;
}

/* The second half of a parent's identity: its generation, or for the root
 * the scope. */
static uint32_t pgen_of(const struct l8_kvpool *p, uint32_t scope, uint32_t parent)
{
    return parent == L8_KVPOOL_ROOT ? scope : p->gen[parent];
}

static uint32_t find(const struct l8_kvpool *p, uint32_t scope, uint32_t parent,
                     const uint32_t *tokens)
{
    uint32_t pgen = pgen_of(p, scope, parent);
    uint64_t k = page_key(p, parent, pgen, tokens);
    for (uint32_t pg = p->bucket[k & (p->n_buckets - 1)]; pg != NIL; pg = p->hnext[pg])
        if (p->key[pg] == k && p->parent[pg] == parent && p->parent_gen[pg] == pgen &&
            !memcmp(&p->tokens[(size_t)pg * p->page_size], tokens,
                    p->page_size * sizeof(uint32_t)))
            return pg;
    return NIL;
}

int l8_kvpool_alloc(struct l8_kvpool *p, uint32_t *page)
{
    uint32_t pg;
    if (p->n_free > 0) {
        pg = p->free_stack[--p->n_free];
    } else if (p->n_lru > 0) {
        pg = p->lru_head;
        lru_remove(p, pg);
        unregister(p, pg);
    } else {
        return -ENOSPC;
    }
    p->refcnt[pg] = 1;
    p->n_used++;
    *page = pg;
    return 0;
}

void l8_kvpool_ref(struct l8_kvpool *p, uint32_t page)
{
    if (page >= p->n_pages)
        return;
    if (p->refcnt[page] == 0) {
        /* Only a cached page can come back from refcount 0 this way. */
        if (!p->reg[page])
            return;
        lru_remove(p, page);
        p->n_used++;
    } else if (p->refcnt[page] == 1) {
        p->n_shared++;
    }
    p->refcnt[page]++;
}

void l8_kvpool_unref(struct l8_kvpool *p, uint32_t page)
{
    if (page >= p->n_pages || p->refcnt[page] == 0)
        return;
    if (--p->refcnt[page] == 1)
        p->n_shared--;
    if (p->refcnt[page] > 0)
        return;
    p->n_used--;
    if (p->reg[page])
        lru_push_tail(p, page);
    else
        p->free_stack[p->n_free++] = page;
}

int l8_kvpool_lookup(struct l8_kvpool *p, uint32_t scope, uint32_t parent,
                     const uint32_t *tokens, uint32_t *page)
{
    if (parent != L8_KVPOOL_ROOT && (parent >= p->n_pages || !p->reg[parent]))
        return -ENOENT;
    uint32_t pg = find(p, scope, parent, tokens);
    if (pg == NIL)
        return -ENOENT;
    l8_kvpool_ref(p, pg);
    *page = pg;
    return 0;
}

int l8_kvpool_register(struct l8_kvpool *p, uint32_t page, uint32_t scope, uint32_t parent,
                       const uint32_t *tokens)
{
    if (page >= p->n_pages || p->refcnt[page] == 0 || p->reg[page] || page == parent)
        return -EINVAL;
    if (parent != L8_KVPOOL_ROOT && (parent >= p->n_pages || !p->reg[parent]))
        return -EINVAL;
    if (find(p, scope, parent, tokens) != NIL)
        return -EEXIST;
    uint32_t pgen = pgen_of(p, scope, parent);
    p->key[page] = page_key(p, parent, pgen, tokens);
    p->parent[page] = parent;
    p->parent_gen[page] = pgen;
    memcpy(&p->tokens[(size_t)page * p->page_size], tokens,
           p->page_size * sizeof(uint32_t));
    uint32_t b = p->key[page] & (p->n_buckets - 1);
    p->hnext[page] = p->bucket[b];
    p->bucket[b] = page;
    p->reg[page] = true;
    p->n_reg++;
    return 0;
}

void l8_kvpool_drop_cache(struct l8_kvpool *p)
{
    while (p->lru_head != NIL) {
        uint32_t pg = p->lru_head;
        lru_remove(p, pg);
        unregister(p, pg);
        p->free_stack[p->n_free++] = pg;
    }
}

void l8_kvpool_get_stats(const struct l8_kvpool *p, struct l8_kvpool_stats *out)
{
    out->total = p->n_pages;
    out->free = p->n_free;
    out->used = p->n_used;
    out->cached = p->n_lru;
    out->shared = p->n_shared;
    out->registered = p->n_reg;
}

int l8_kvpool_check(const struct l8_kvpool *p)
{
    uint32_t used = 0, shared = 0, reg = 0, lru = 0;
    uint8_t *seen = calloc(p->n_pages, 1);
    int rc = -EFAULT;
    if (!seen)
        return -ENOMEM;
    for (uint32_t i = 0; i < p->n_pages; i++) {
        used += p->refcnt[i] > 0;
        shared += p->refcnt[i] > 1;
        reg += p->reg[i];
    }
    for (uint32_t i = 0; i < p->n_free; i++) {
        uint32_t pg = p->free_stack[i];
        if (pg >= p->n_pages || seen[pg] || p->refcnt[pg] || p->reg[pg])
            goto out;
        seen[pg] = 1;
    }
    for (uint32_t pg = p->lru_head, prev = NIL; pg != NIL; prev = pg, pg = p->lru_next[pg]) {
        if (pg >= p->n_pages || seen[pg] || p->refcnt[pg] || !p->reg[pg] ||
            p->lru_prev[pg] != prev)
            goto out;
        seen[pg] = 2;
        lru++;
    }
    for (uint32_t b = 0; b < p->n_buckets; b++)
        for (uint32_t pg = p->bucket[b]; pg != NIL; pg = p->hnext[pg])
            if (!p->reg[pg] || (p->key[pg] & (p->n_buckets - 1)) != b)
                goto out;
    if (used != p->n_used || shared != p->n_shared || reg != p->n_reg ||
        lru != p->n_lru || p->n_free + p->n_used + p->n_lru != p->n_pages)
        goto out;
    rc = 0;
out:
    free(seen);
    return rc;
}
