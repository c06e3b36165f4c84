/* kvpool.h - bookkeeping of the paged KV pool: which page belongs to whom.
 *
 * Pure logic, no I/O and no KV data: the engine owns the memory, this
 * file owns the page ids [0, n_pages). A page holds page_size positions.
 *
 * Every page is in exactly one of three states:
 *   free    refcount 0, not cached, on the free list;
 *   used    refcount > 0 (held by one or more requests' page tables);
 *   cached  refcount 0 but registered in the prefix cache, on an LRU list:
 *           its K/V is still valid and a later request with the same
 *           prefix may take it back; reclaimed (oldest first) when the free
 *           list is empty.
 *
 * Prefix cache. A page is registered only when it is full and its K/V is
 * written. Its key is a hash chain: hash(parent identity, the page's
 * page_size token ids), where the parent is the page holding the previous
 * page_size positions (L8_KVPOOL_ROOT for the first page). The parent's
 * identity is (page id, generation), or for a first page (L8_KVPOOL_ROOT,
 * scope): a scope is a cache domain (llama8d's is the client's uid), and
 * since every later page's key names its parent, chains of different
 * scopes never meet. A lookup compares the stored tokens and parent
 * identity exactly, so a match means the whole prefix
 * is equal: a hash collision can never hand one client's K/V to a
 * different prompt. A page's generation changes when it is reclaimed, so
 * children of a reclaimed page become unreachable (and are reclaimed in
 * turn). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define L8_KVPOOL_ROOT UINT32_MAX   /* parent of a prompt's first page */

struct l8_kvpool;

struct l8_kvpool_stats {
    uint32_t total;    /* n_pages = free + used + cached */
    uint32_t free;     /* on the free list */
    uint32_t used;     /* refcount > 0 */
    uint32_t cached;   /* refcount 0, kept for the prefix cache (reclaimable) */
    uint32_t shared;   /* refcount > 1 */
    uint32_t registered; /* in the prefix cache, used or not */
};

/* n_pages >= 1, page_size >= 1. -EINVAL, -ENOMEM. */
int  l8_kvpool_new(uint32_t n_pages, uint32_t page_size, struct l8_kvpool **out);
void l8_kvpool_free(struct l8_kvpool *p);

uint32_t l8_kvpool_page_size(const struct l8_kvpool *p);
uint32_t l8_kvpool_n_pages(const struct l8_kvpool *p);
/* Pages an allocation could get now: free + cached. */
uint32_t l8_kvpool_available(const struct l8_kvpool *p);

/* A page with refcount 1: from the free list, else the least recently
 * used cached page (dropped from the prefix cache). -ENOSPC when every
 * page is in use. */
int  l8_kvpool_alloc(struct l8_kvpool *p, uint32_t *page);
/* Another holder of a used page. */
void l8_kvpool_ref(struct l8_kvpool *p, uint32_t page);
/* Drop one reference; at 0 the page goes to the LRU (most recent end) if
 * registered, else to the free list. Callers releasing a page table
 * should unref from the last page to the first, so a prefix's tail is
 * reclaimed before its head (a head without its tail is still useful;
 * the reverse is not). */
void l8_kvpool_unref(struct l8_kvpool *p, uint32_t page);
uint32_t l8_kvpool_refcount(const struct l8_kvpool *p, uint32_t page);
bool l8_kvpool_is_registered(const struct l8_kvpool *p, uint32_t page);

/* Find the cached page that follows parent (L8_KVPOOL_ROOT in scope, or
 * a registered page: scope is then ignored) and holds tokens[page_size].
 * On a hit, takes a reference (a cached page leaves the LRU) and returns
 * 0; -ENOENT otherwise. */
int  l8_kvpool_lookup(struct l8_kvpool *p, uint32_t scope, uint32_t parent,
                      const uint32_t *tokens, uint32_t *page);
/* Put a used, full, written page into the prefix cache as the child of
 * parent (L8_KVPOOL_ROOT in scope, or a registered page) holding
 * tokens[page_size]. -EEXIST: an equal page is already cached (this one
 * stays private and is freed normally); -EINVAL: page not used, already
 * registered, or parent not registered. */
int  l8_kvpool_register(struct l8_kvpool *p, uint32_t page, uint32_t scope, uint32_t parent,
                        const uint32_t *tokens);
/* Drop every cached (unreferenced) page to the free list. */
void l8_kvpool_drop_cache(struct l8_kvpool *p);

void l8_kvpool_get_stats(const struct l8_kvpool *p, struct l8_kvpool_stats *out);
/* Internal consistency check (lists, counts, hash table); 0 or -EFAULT.
 * For tests and debug builds. */
int  l8_kvpool_check(const struct l8_kvpool *p);
