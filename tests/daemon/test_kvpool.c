/* test_kvpool: page refcounts, the free list, prefix-cache chains, LRU
 * reclaim, and that a chain never matches across a reclaimed parent. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../test.h"

#include "kvpool.h"

#define PS 4

static void stats_are(const struct l8_kvpool *p, uint32_t fr, uint32_t used, uint32_t cached,
                      uint32_t shared, uint32_t reg, int line)
{
    struct l8_kvpool_stats st;
    l8_kvpool_get_stats(p, &st);
    if (st.free != fr || st.used != used || st.cached != cached || st.shared != shared ||
        st.registered != reg || st.total != st.free + st.used + st.cached) {
        fprintf(stderr, "line %d: stats free %u used %u cached %u shared %u reg %u total %u,"
                " expected %u %u %u %u %u\n", line, st.free, st.used, st.cached, st.shared,
                st.registered, st.total, fr, used, cached, shared, reg);
        t_failures++;
    }
    if (l8_kvpool_check(p) != 0) {
        fprintf(stderr, "line %d: l8_kvpool_check failed\n", line);
        t_failures++;
    }
}
#define STATS(p, f, u, c, sh, r) stats_are(p, f, u, c, sh, r, __LINE__)

static void test_refcounts(void)
{
    struct l8_kvpool *p;
    CHECK_EQ(l8_kvpool_new(0, PS, &p), -EINVAL);
    CHECK_EQ(l8_kvpool_new(4, 0, &p), -EINVAL);
    CHECK_EQ(l8_kvpool_new(4, PS, &p), 0);
    STATS(p, 4, 0, 0, 0, 0);
    uint32_t a, b, c, d, e;
    CHECK_EQ(l8_kvpool_alloc(p, &a), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &b), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &c), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &d), 0);
    /* low ids first, all distinct */
    CHECK_EQ(a, 0); CHECK_EQ(b, 1); CHECK_EQ(c, 2); CHECK_EQ(d, 3);
    CHECK_EQ(l8_kvpool_alloc(p, &e), -ENOSPC);
    STATS(p, 0, 4, 0, 0, 0);
    l8_kvpool_ref(p, b);
    CHECK_EQ(l8_kvpool_refcount(p, b), 2);
    STATS(p, 0, 4, 0, 1, 0);
    l8_kvpool_unref(p, b);
    CHECK_EQ(l8_kvpool_refcount(p, b), 1);
    l8_kvpool_unref(p, b);
    CHECK_EQ(l8_kvpool_refcount(p, b), 0);
    STATS(p, 1, 3, 0, 0, 0);
    /* the freed page is the one handed out next */
    CHECK_EQ(l8_kvpool_alloc(p, &e), 0);
    CHECK_EQ(e, b);
    /* unref of a free page and ref of a free, unregistered page are no-ops */
    l8_kvpool_unref(p, a);
    l8_kvpool_unref(p, a);
    CHECK_EQ(l8_kvpool_refcount(p, a), 0);
    l8_kvpool_ref(p, a);
    CHECK_EQ(l8_kvpool_refcount(p, a), 0);
    STATS(p, 1, 3, 0, 0, 0);
    CHECK_EQ(l8_kvpool_available(p), 1);
    l8_kvpool_free(p);
    l8_kvpool_free(NULL);
}

static void test_prefix_chain(void)
{
    struct l8_kvpool *p;
    CHECK_EQ(l8_kvpool_new(8, PS, &p), 0);
    const uint32_t t0[PS] = {1, 2, 3, 4}, t1[PS] = {5, 6, 7, 8}, t1b[PS] = {5, 6, 7, 9};
    uint32_t a, b, x;
    CHECK_EQ(l8_kvpool_alloc(p, &a), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &b), 0);
    /* parent must be registered first */
    CHECK_EQ(l8_kvpool_register(p, b, 0, a, t1), -EINVAL);
    CHECK_EQ(l8_kvpool_register(p, a, 0, L8_KVPOOL_ROOT, t0), 0);
    CHECK_EQ(l8_kvpool_register(p, a, 0, L8_KVPOOL_ROOT, t0), -EINVAL); /* twice */
    CHECK_EQ(l8_kvpool_register(p, b, 0, a, t1), 0);
    STATS(p, 6, 2, 0, 0, 2);
    /* an equal page under the same parent is refused: it stays private */
    uint32_t dup;
    CHECK_EQ(l8_kvpool_alloc(p, &dup), 0);
    CHECK_EQ(l8_kvpool_register(p, dup, 0, L8_KVPOOL_ROOT, t0), -EEXIST);
    l8_kvpool_unref(p, dup);
    STATS(p, 6, 2, 0, 0, 2);

    /* lookups: exact chain only */
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t0, &x), 0);
    CHECK_EQ(x, a);
    CHECK_EQ(l8_kvpool_refcount(p, a), 2);
    CHECK_EQ(l8_kvpool_lookup(p, 0, a, t1b, &x), -ENOENT);
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t1, &x), -ENOENT); /* wrong parent */
    CHECK_EQ(l8_kvpool_lookup(p, 0, a, t1, &x), 0);
    CHECK_EQ(x, b);
    STATS(p, 6, 2, 0, 2, 2);
    l8_kvpool_unref(p, b);
    l8_kvpool_unref(p, a);
    /* releasing the last holder, tail first: both stay cached */
    l8_kvpool_unref(p, b);
    l8_kvpool_unref(p, a);
    STATS(p, 6, 0, 2, 0, 2);
    CHECK_EQ(l8_kvpool_available(p), 8);  /* free 6 + cached 2 */
    /* a cached page comes back with a lookup */
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t0, &x), 0);
    CHECK_EQ(x, a);
    CHECK_EQ(l8_kvpool_refcount(p, a), 1);
    STATS(p, 6, 1, 1, 0, 2);
    l8_kvpool_unref(p, a);
    l8_kvpool_drop_cache(p);
    STATS(p, 8, 0, 0, 0, 0);
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t0, &x), -ENOENT);
    l8_kvpool_free(p);
}

static void test_lru_reclaim(void)
{
    struct l8_kvpool *p;
    CHECK_EQ(l8_kvpool_new(3, PS, &p), 0);
    const uint32_t t[3][PS] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}};
    uint32_t pg[3], x;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(l8_kvpool_alloc(p, &pg[i]), 0);
        CHECK_EQ(l8_kvpool_register(p, pg[i], 0, L8_KVPOOL_ROOT, t[i]), 0);
    }
    /* release order sets recency: 1, then 0, then 2 (most recent) */
    l8_kvpool_unref(p, pg[1]);
    l8_kvpool_unref(p, pg[0]);
    l8_kvpool_unref(p, pg[2]);
    STATS(p, 0, 0, 3, 0, 3);
    /* touch 1 again: now the order is 0, 2, 1 */
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t[1], &x), 0);
    l8_kvpool_unref(p, x);
    /* the free list is empty: allocation reclaims the least recent (0) */
    CHECK_EQ(l8_kvpool_alloc(p, &x), 0);
    CHECK_EQ(x, pg[0]);
    CHECK(!l8_kvpool_is_registered(p, pg[0]));
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t[0], &x), -ENOENT);
    STATS(p, 0, 1, 2, 0, 2);
    CHECK_EQ(l8_kvpool_alloc(p, &x), 0);
    CHECK_EQ(x, pg[2]);
    CHECK_EQ(l8_kvpool_alloc(p, &x), 0);
    CHECK_EQ(x, pg[1]);
    CHECK_EQ(l8_kvpool_alloc(p, &x), -ENOSPC);
    STATS(p, 0, 3, 0, 0, 0);
    l8_kvpool_free(p);
}

/* A child registered under a parent that was later reclaimed and reused
 * for other tokens must never match through the new parent. */
static void test_stale_child(void)
{
    struct l8_kvpool *p;
    CHECK_EQ(l8_kvpool_new(2, PS, &p), 0);
    const uint32_t ta[PS] = {10, 11, 12, 13}, tb[PS] = {20, 21, 22, 23},
                   tc[PS] = {30, 31, 32, 33};
    uint32_t par, kid, x;
    CHECK_EQ(l8_kvpool_alloc(p, &par), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &kid), 0);
    CHECK_EQ(l8_kvpool_register(p, par, 0, L8_KVPOOL_ROOT, ta), 0);
    CHECK_EQ(l8_kvpool_register(p, kid, 0, par, tb), 0);
    /* release head first so the parent is the least recent */
    l8_kvpool_unref(p, par);
    l8_kvpool_unref(p, kid);
    CHECK_EQ(l8_kvpool_alloc(p, &x), 0);
    CHECK_EQ(x, par);
    /* same page id, new contents, registered at the root again */
    CHECK_EQ(l8_kvpool_register(p, x, 0, L8_KVPOOL_ROOT, tc), 0);
    CHECK_EQ(l8_kvpool_lookup(p, 0, x, tb, &x), -ENOENT);
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, ta, &x), -ENOENT);
    STATS(p, 0, 1, 1, 0, 2);
    l8_kvpool_free(p);
}

/* Scopes: the same tokens under two scopes are two chains. A first page
 * matches only in its own scope, and a later page only below its own
 * parent, whatever scope the lookup names. */
static void test_scopes(void)
{
    struct l8_kvpool *p;
    CHECK_EQ(l8_kvpool_new(4, PS, &p), 0);
    const uint32_t t0[PS] = {1, 2, 3, 4}, t1[PS] = {5, 6, 7, 8};
    uint32_t a, b, c, x;
    CHECK_EQ(l8_kvpool_alloc(p, &a), 0);
    CHECK_EQ(l8_kvpool_alloc(p, &b), 0);
    CHECK_EQ(l8_kvpool_register(p, a, 1000, L8_KVPOOL_ROOT, t0), 0);
    CHECK_EQ(l8_kvpool_register(p, b, 1000, a, t1), 0);
    CHECK_EQ(l8_kvpool_lookup(p, 1001, L8_KVPOOL_ROOT, t0, &x), -ENOENT);
    CHECK_EQ(l8_kvpool_lookup(p, 0, L8_KVPOOL_ROOT, t0, &x), -ENOENT);
    /* Scope 1001 caches the same tokens: no -EEXIST, a chain of its own. */
    CHECK_EQ(l8_kvpool_alloc(p, &c), 0);
    CHECK_EQ(l8_kvpool_register(p, c, 1001, L8_KVPOOL_ROOT, t0), 0);
    CHECK_EQ(l8_kvpool_lookup(p, 1001, L8_KVPOOL_ROOT, t0, &x), 0);
    CHECK_EQ(x, c);
    l8_kvpool_unref(p, x);
    CHECK_EQ(l8_kvpool_lookup(p, 1001, c, t1, &x), -ENOENT);
    CHECK_EQ(l8_kvpool_lookup(p, 1000, L8_KVPOOL_ROOT, t0, &x), 0);
    CHECK_EQ(x, a);
    l8_kvpool_unref(p, x);
    /* Below a, the lookup's scope does not matter. */
    CHECK_EQ(l8_kvpool_lookup(p, 1001, a, t1, &x), 0);
    CHECK_EQ(x, b);
    l8_kvpool_unref(p, x);
    STATS(p, 1, 3, 0, 0, 3);
    l8_kvpool_free(p);
}

int main(void)
{
    test_refcounts();
    test_prefix_chain();
    test_lru_reclaim();
    test_stale_child();
    test_scopes();
    if (t_failures) {
        fprintf(stderr, "test_kvpool: %d failures\n", t_failures);
        return 1;
    }
    printf("test_kvpool: ok\n");
    return 0;
}
