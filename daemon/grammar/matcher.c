/* matcher.c - token masks: which tokens keep the output a prefix of the
 * grammar's language, step by step.
 *
 * A parse state is a set of stacks of positions (grammar_internal.h), each
 * topped by a byte range, as llama.cpp's. Stacks are hash-consed nodes
 * (position, parent), so a stack is one number, equal stacks are the same
 * number, and a push shares the stack below it.
 *
 * The vocabulary is a byte trie laid out in depth-first order; a mask walks
 * it from the state, reading each node's byte once for all the tokens that
 * share the prefix, and skips a subtree as soon as no stack survives.
 *
 * Most of that walk does not depend on the whole stack, only on its top
 * few frames (inside a string, the string's rules): what a token does within
 * the top WINDOW frames is computed once per such window (a cache entry in
 * the compiled grammar, shared by every request): the tokens it accepts
 * there, and the trie subtrees whose tokens leave the window partway, left
 * to the walk from the real stack below the window at run time (xgrammar's
 * context-independent / context-dependent split). On top of that, each
 * matcher keeps the masks of its recent states: a reply that stays inside
 * one string meets the same state again and again. */
#include "grammar_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Frames of a stack that key a cache entry: more splits fewer tokens off
 * to run time, fewer shares an entry between more contexts. */
#define WINDOW 8
/* A matcher's recent states and their masks. */
#define STATE_CACHE 8

/* ---- the vocabulary ------------------------------------------------------ */

struct trie_node {
    uint32_t end;       /* preorder index just past this node's subtree */
    uint32_t tok;       /* first of this node's tokens in vocab->node_tok */
    uint16_t n_tok;     /* tokens whose bytes end here (ids with equal bytes) */
    uint8_t byte;
    uint8_t depth;      /* 1 for a token's first byte */
};

struct l8g_vocab {
    uint32_t n;
    uint8_t *bytes;
    uint32_t *off;
    uint32_t *end_ids, n_end;
    uint8_t *special;       /* [n]: never produced by the grammar */
    struct trie_node *t;    /* [n_t]: node 0 is the root (no byte) */
    uint32_t n_t;
    uint32_t *node_tok;     /* token ids by node */
    uint32_t max_len;
};

struct sort_ctx {
    const uint8_t *bytes;
    const uint32_t *off;
};
static struct sort_ctx sort_ctx;    /* qsort has no context argument; vocab_new only */

static int cmp_tok(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t lx = sort_ctx.off[x + 1] - sort_ctx.off[x], ly = sort_ctx.off[y + 1] - sort_ctx.off[y];
    int c = memcmp(sort_ctx.bytes + sort_ctx.off[x], sort_ctx.bytes + sort_ctx.off[y],
                   lx < ly ? lx : ly);
    if (c)
        return c;
    return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : 1);
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

int l8g_vocab_new(uint32_t n, const uint8_t *bytes, const uint32_t *off, const bool *special,
                  const uint32_t *end_ids, uint32_t n_end, struct l8g_vocab **out)
{
    struct l8g_vocab *v = calloc(1, sizeof *v);
    uint32_t *ids = NULL;
    if (!v)
        return -ENOMEM;
    v->n = n;
    size_t nb = off[n];
    v->bytes = malloc(nb ? nb : 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->end_ids = malloc((n_end ? n_end : 1) * sizeof *v->end_ids);
    ids = malloc((n ? n : 1) * sizeof *ids);
    v->special = malloc(n ? n : 1);
    if (!v->bytes || !v->off || !v->end_ids || !ids || !v->special)
        goto oom;
    for (uint32_t i = 0; i < n; i++)
        v->special[i] = special[i];
    memcpy(v->bytes, bytes, nb);
    memcpy(v->off, off, ((size_t)n + 1) * sizeof *off);
    for (uint32_t i = 0; i < n_end; i++) {
        if (end_ids[i] >= n) {
            free(ids);
            l8g_vocab_free(v);
            return -EINVAL;
        }
        v->end_ids[i] = end_ids[i];
    }
    v->n_end = n_end;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = off[i + 1] - off[i];
        if (off[i + 1] < off[i] || len > 255) {
            free(ids);
            l8g_vocab_free(v);
            return -EINVAL;
        }
        if (!special[i] && len)
            ids[m++] = i;
    }
    pthread_mutex_lock(&sort_lock);
    sort_ctx = (struct sort_ctx){ v->bytes, v->off };
    qsort(ids, m, sizeof *ids, cmp_tok);
    pthread_mutex_unlock(&sort_lock);

    /* The trie in preorder: token k adds a node for each of its bytes past
     * its common prefix with token k - 1. */
    size_t cap = 1;
    for (uint32_t k = 0; k < m; k++)
        cap += off[ids[k] + 1] - off[ids[k]];
    v->t = malloc(cap * sizeof *v->t);
    v->node_tok = malloc((m ? m : 1) * sizeof *v->node_tok);
    if (!v->t || !v->node_tok)
        goto oom;
    uint32_t path[256];     /* node at each depth of the previous token */
    v->t[0] = (struct trie_node){ 0 };
    path[0] = 0;
    v->n_t = 1;
    uint32_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (uint32_t k = 0; k < m; k++) {
        const uint8_t *b = v->bytes + off[ids[k]];
        uint32_t len = off[ids[k] + 1] - off[ids[k]], common = 0;
        while (prev && common < len && common < prev_len && b[common] == prev[common])
            common++;
        /* close the previous token's nodes deeper than the common prefix */
        for (uint32_t d = prev_len; d > common; d--)
            v->t[path[d]].end = v->n_t;
        for (uint32_t d = common + 1; d <= len; d++) {
            path[d] = v->n_t;
            v->t[v->n_t++] = (struct trie_node){ .byte = b[d - 1], .depth = (uint8_t)d,
                                                .tok = k };
        }
        struct trie_node *leaf = &v->t[path[len]];
        if (!leaf->n_tok)
            leaf->tok = k;
        leaf->n_tok++;
        v->node_tok[k] = ids[k];
        if (len > v->max_len)
            v->max_len = len;
        prev = b;
        prev_len = len;
    }
    for (uint32_t d = prev_len; d > 0; d--)
        v->t[path[d]].end = v->n_t;
    v->t[0].end = v->n_t;
    free(ids);
    *out = v;
    return 0;
oom:
    free(ids);
    l8g_vocab_free(v);
    return -ENOMEM;
}

void l8g_vocab_free(struct l8g_vocab *v)
{
    if (!v)
        return;
    free(v->bytes);
    free(v->off);
    free(v->end_ids);
    free(v->special);
    free(v->t);
    free(v->node_tok);
    free(v);
}

uint32_t l8g_vocab_size(const struct l8g_vocab *v)
{
    return v->n;
}

/* ---- stacks and states ----------------------------------------------------
 *
 * A stack is a node (position, parent), hash-consed: equal stacks are the
 * same number. A state, a set of stacks, is interned too (its sorted nodes),
 * and the state after reading a byte is memoized per (state, byte): the
 * walks meet the same few states at every depth (inside a string, after each
 * character), so most of a walk is one table lookup per trie node. Each
 * arena (a matcher's, the compiled grammar's for the window walks) owns its
 * nodes, states and transitions. */

enum { S_EMPTY = 0, S_CONTEXT = 1 };   /* the bottom; "the rest of the stack" in a window */
enum { F_COMPLETE = 1, F_CONTEXT = 2 }; /* a state holds S_EMPTY / S_CONTEXT */
#define DEAD 0u                         /* the state without stacks */

struct snode {
    uint32_t pos, parent;
};

struct sstate {
    uint32_t off, n;        /* its nodes: pool[off .. off + n), sorted */
    uint32_t hash;
    uint8_t flags;
};

/* An open-addressing map from 64-bit keys to 32-bit values (UINT64_MAX: empty). */
struct map {
    uint64_t *k;
    uint32_t *v;
    uint32_t cap, len;
};

struct arena {
    struct snode *n;
    uint32_t n_len, n_cap;
    struct map nodes;       /* (pos << 32 | parent) -> node */
    struct sstate *s;
    uint32_t s_len, s_cap;
    uint32_t *stab;         /* states by hash: id, 0 empty (state 0, DEAD, is never looked up) */
    uint32_t stab_cap;
    uint32_t *pool;
    size_t pool_len, pool_cap;
    struct map trans;       /* (state << 8 | byte) -> state */
    uint32_t *tmp;          /* the nodes of a state being made */
    uint32_t tmp_n, tmp_cap;
    bool oom;
};

static int map_init(struct map *M, uint32_t cap)
{
    M->cap = cap;
    M->len = 0;
    M->k = malloc(cap * sizeof *M->k);
    M->v = malloc(cap * sizeof *M->v);
    if (!M->k || !M->v)
        return -ENOMEM;
    memset(M->k, 0xff, cap * sizeof *M->k);
    return 0;
}

static void map_free(struct map *M)
{
    free(M->k);
    free(M->v);
}

static inline uint32_t hash64(uint64_t k)
{
    k *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(k >> 32);
}

/* The slot of k: its own, or the empty one where it would go. */
static inline uint32_t map_slot(const struct map *M, uint64_t k)
{
    uint32_t j = hash64(k) & (M->cap - 1);
    while (M->k[j] != k && M->k[j] != UINT64_MAX)
        j = (j + 1) & (M->cap - 1);
    return j;
}

static bool map_put(struct map *M, uint64_t k, uint32_t v)
{
    if (2 * (M->len + 1) > M->cap) {
        struct map N;
        if (map_init(&N, 2 * M->cap))
            return false;
        for (uint32_t i = 0; i < M->cap; i++) {
            if (M->k[i] == UINT64_MAX)
                continue;
            uint32_t j = map_slot(&N, M->k[i]);
            N.k[j] = M->k[i];
            N.v[j] = M->v[i];
        }
        N.len = M->len;
        map_free(M);
        *M = N;
    }
    uint32_t j = map_slot(M, k);
    if (M->k[j] == UINT64_MAX)
        M->len++;
    M->k[j] = k;
    M->v[j] = v;
    return true;
}

static int arena_init(struct arena *A)
{
    memset(A, 0, sizeof *A);
    A->n_cap = 1024;
    A->s_cap = 256;
    A->stab_cap = 512;
    A->pool_cap = 4096;
    A->tmp_cap = 64;
    A->n = malloc(A->n_cap * sizeof *A->n);
    A->s = malloc(A->s_cap * sizeof *A->s);
    A->stab = calloc(A->stab_cap, sizeof *A->stab);
    A->pool = malloc(A->pool_cap * sizeof *A->pool);
    A->tmp = malloc(A->tmp_cap * sizeof *A->tmp);
    if (!A->n || !A->s || !A->stab || !A->pool || !A->tmp || map_init(&A->nodes, 2048) ||
        map_init(&A->trans, 4096))
        return -ENOMEM;
    A->n[S_EMPTY] = A->n[S_CONTEXT] = (struct snode){ UINT32_MAX, UINT32_MAX };
    A->n_len = 2;
    A->s[DEAD] = (struct sstate){ 0 };
    A->s_len = 1;
    return 0;
}

static void arena_free(struct arena *A)
{
    free(A->n);
    free(A->s);
    free(A->stab);
    free(A->pool);
    free(A->tmp);
    map_free(&A->nodes);
    map_free(&A->trans);
    memset(A, 0, sizeof *A);
}

/* The node for (pos, parent); S_EMPTY with A->oom set if out of memory. */
static uint32_t intern(struct arena *A, uint32_t pos, uint32_t parent)
{
    const uint64_t k = (uint64_t)pos << 32 | parent;
    uint32_t j = map_slot(&A->nodes, k);
    if (A->nodes.k[j] == k)
        return A->nodes.v[j];
    if (A->n_len == A->n_cap) {
        struct snode *n = realloc(A->n, 2 * A->n_cap * sizeof *n);
        if (!n) {
            A->oom = true;
            return S_EMPTY;
        }
        A->n = n;
        A->n_cap *= 2;
    }
    uint32_t i = A->n_len++;
    A->n[i] = (struct snode){ pos, parent };
    if (!map_put(&A->nodes, k, i))
        A->oom = true;
    return i;
}

static void tmp_add(struct arena *A, uint32_t node)
{
    if (A->tmp_n == A->tmp_cap) {
        uint32_t *t = realloc(A->tmp, 2 * A->tmp_cap * sizeof *t);
        if (!t) {
            A->oom = true;
            return;
        }
        A->tmp = t;
        A->tmp_cap *= 2;
    }
    A->tmp[A->tmp_n++] = node;
}

/* Adds to tmp the stacks reached from node without reading a byte. */
static void expand(const struct l8g_grammar *g, struct arena *A, uint32_t node)
{
    while (node > S_CONTEXT) {
        const struct snode s = A->n[node];
        const struct g_elem *e = &g->e[s.pos];
        if (e->type == G_BYTES) {
            tmp_add(A, node);
            return;
        }
        if (e->type != G_RULE) {    /* the end of an alternative: back to the caller */
            node = s.parent;
            continue;
        }
        /* A rule last in its alternative returns straight to the caller: no
         * frame for it, so that x* and other right recursion stay flat. */
        uint32_t cont = g_alt_end(g, s.pos + 1) ? s.parent : intern(A, s.pos + 1, s.parent);
        for (uint32_t a = g->rule_start[e->rule];;) {
            expand(g, A, intern(A, a, cont));
            while (!g_alt_end(g, a))
                a++;
            if (g->e[a].type == G_END)
                break;
            a++;
        }
        return;
    }
    tmp_add(A, node);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of the nodes in tmp (sorted and deduplicated here). */
static uint32_t state_of_tmp(struct arena *A)
{
    uint32_t n = A->tmp_n, *t = A->tmp;
    A->tmp_n = 0;
    if (!n || A->oom)
        return DEAD;
    if (n > 1) {
        qsort(t, n, sizeof *t, cmp_u32);
        uint32_t w = 1;
        for (uint32_t i = 1; i < n; i++)
            if (t[i] != t[w - 1])
                t[w++] = t[i];
        n = w;
    }
    uint32_t h = (uint32_t)n;
    for (uint32_t i = 0; i < n; i++)
        h = hash64((uint64_t)h << 32 | t[i]);
    if (!h)
        h = 1;
    uint32_t j = h & (A->stab_cap - 1);
    for (; A->stab[j]; j = (j + 1) & (A->stab_cap - 1)) {
        const struct sstate *s = &A->s[A->stab[j]];
        if (s->hash == h && s->n == n && !memcmp(A->pool + s->off, t, n * sizeof *t))
            return A->stab[j];
    }
    if (A->s_len == A->s_cap || A->pool_len + n > A->pool_cap ||
        2 * (A->s_len + 1) > A->stab_cap) {
        if (A->s_len == A->s_cap) {
            struct sstate *ns = realloc(A->s, 2 * A->s_cap * sizeof *ns);
            if (!ns)
                goto oom;
            A->s = ns;
            A->s_cap *= 2;
        }
        while (A->pool_len + n > A->pool_cap) {
            uint32_t *np = realloc(A->pool, 2 * A->pool_cap * sizeof *np);
            if (!np)
                goto oom;
            A->pool = np;
            A->pool_cap *= 2;
        }
        if (2 * (A->s_len + 1) > A->stab_cap) {
            uint32_t cap = 2 * A->stab_cap, *nt = calloc(cap, sizeof *nt);
            if (!nt)
                goto oom;
            for (uint32_t i = 1; i < A->s_len; i++) {
                uint32_t k = A->s[i].hash & (cap - 1);
                while (nt[k])
                    k = (k + 1) & (cap - 1);
                nt[k] = i;
            }
            free(A->stab);
            A->stab = nt;
            A->stab_cap = cap;
        }
        j = h & (A->stab_cap - 1);
        while (A->stab[j])
            j = (j + 1) & (A->stab_cap - 1);
    }
    uint8_t flags = 0;
    for (uint32_t i = 0; i < n && t[i] <= S_CONTEXT; i++)
        flags |= t[i] == S_EMPTY ? F_COMPLETE : F_CONTEXT;
    uint32_t id = A->s_len++;
    A->s[id] = (struct sstate){ .off = (uint32_t)A->pool_len, .n = n, .hash = h, .flags = flags };
    memcpy(A->pool + A->pool_len, t, n * sizeof *t);
    A->pool_len += n;
    A->stab[j] = id;
    return id;
oom:
    A->oom = true;
    return DEAD;
}

/* The state reached from node without reading a byte. */
static uint32_t state_at(const struct l8g_grammar *g, struct arena *A, uint32_t node)
{
    A->tmp_n = 0;
    expand(g, A, node);
    return state_of_tmp(A);
}

/* The state after reading byte c in state s (DEAD: no stack reads it). */
static uint32_t step(const struct l8g_grammar *g, struct arena *A, uint32_t s, uint8_t c)
{
    const uint64_t k = (uint64_t)s << 8 | c;
    uint32_t j = map_slot(&A->trans, k);
    if (A->trans.k[j] == k)
        return A->trans.v[j];
    A->tmp_n = 0;
    for (uint32_t i = 0; i < A->s[s].n; i++) {
        const uint32_t node = A->pool[A->s[s].off + i];     /* pool may move: index anew */
        if (node <= S_CONTEXT)
            continue;
        const struct snode sn = A->n[node];
        const struct g_elem *e = &g->e[sn.pos];
        if (c >= e->lo && c <= e->hi) {
            /* expand() appends to tmp; a nested state_of_tmp would clobber it */
            expand(g, A, intern(A, sn.pos + 1, sn.parent));
        }
    }
    uint32_t r = state_of_tmp(A);
    if (!A->oom && !map_put(&A->trans, k, r))
        A->oom = true;
    return r;
}

/* ---- the walk over the trie ---------------------------------------------- */

static inline void bit_set(uint32_t *w, uint32_t id)
{
    w[id >> 5] |= 1u << (id & 31);
}

/* Walks the subtree of trie node root (its children and below) from state
 * s0: each token whose bytes some stack reads whole goes into words. With
 * on_exit (window walks): a node where a stack left the window (S_CONTEXT)
 * is passed to it; the tokens ending there are accepted, the ones below are
 * decided later from the real stack. */
typedef void (*exit_fn)(void *ctx, uint32_t node);

static void walk(const struct l8g_grammar *g, const struct l8g_vocab *v, struct arena *A,
                 uint32_t s0, uint32_t root, uint32_t *words, exit_fn on_exit, void *ctx)
{
    uint32_t at[257];
    const uint32_t base = v->t[root].depth;
    at[0] = s0;
    for (uint32_t i = root + 1; i < v->t[root].end && !A->oom;) {
        const struct trie_node *t = &v->t[i];
        const uint32_t d = t->depth - base;
        const uint32_t s = at[d] = step(g, A, at[d - 1], t->byte);
        if (s == DEAD) {
            i = t->end;
            continue;
        }
        for (uint32_t k = 0; k < t->n_tok; k++)
            bit_set(words, v->node_tok[t->tok + k]);
        if (on_exit && (A->s[s].flags & F_CONTEXT))
            on_exit(ctx, i);    /* the other stacks go on: their verdicts are certain */
        i++;
    }
}

/* Bits set in w[0 .. n): with the POPCNT instruction where the CPU has one
 * (the build's baseline, x86-64, has none: a library call per word). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt")))
static long popcount_hw(const uint32_t *w, size_t n)
{
    long k = 0;
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {    /* two words a POPCNT */
        uint64_t d;
        memcpy(&d, w + i, sizeof d);
        k += __builtin_popcountll(d);
    }
    for (; i < n; i++)
        k += __builtin_popcount(w[i]);
    return k;
}
#endif

/* dst |= src over n words, 32 bytes at a time: the mask's hot loop (a
 * state of a regex's counted repetition ORs about ten dense entries of
 * 16 KB each), which -O2 leaves scalar: 2.5x faster written so. */
typedef uint32_t v8u __attribute__((vector_size(32)));
static void or_words(uint32_t *restrict dst, const uint32_t *restrict src, size_t n)
{
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v8u a, b;
        memcpy(&a, dst + k, sizeof a);
        memcpy(&b, src + k, sizeof b);
        a |= b;
        memcpy(dst + k, &a, sizeof a);
    }
    for (; k < n; k++)
        dst[k] |= src[k];
}

static long popcount_words(const uint32_t *w, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("popcnt"))
        return popcount_hw(w, n);
#endif
    long k = 0;
    for (size_t i = 0; i < n; i++)
        k += __builtin_popcount(w[i]);
    return k;
}

/* ---- cache entries: what a window of the stack decides ------------------- */

/* An entry accepting at most this many tokens keeps their ids, not a bitset. */
#define SPARSE 512

struct entry {
    uint32_t key[WINDOW];   /* positions, top first */
    uint32_t n_key;         /* frames in the window */
    bool whole;             /* the window is the whole stack (no exits) */
    bool oom;
    uint32_t *accepted;     /* a bitset of the vocabulary, or NULL: */
    uint32_t *ids, n_ids;   /* the few tokens accepted (a literal's positions) */
    uint32_t *exits;        /* trie nodes whose subtrees the real stack decides */
    uint32_t n_exits, cap_exits;
    struct entry *next;     /* hash chain */
};

struct l8g_compiled {
    const struct l8g_grammar *g;
    const struct l8g_vocab *v;
    pthread_mutex_t lock;   /* the entries and the scratch arena */
    struct entry **tab;
    uint32_t tab_cap, n_entries;
    struct arena scratch;   /* the window walks' stacks */
    size_t words;
};

static void add_exit(void *ctx, uint32_t node)
{
    struct entry *e = ctx;
    if (e->n_exits == e->cap_exits) {
        uint32_t cap = e->cap_exits ? 2 * e->cap_exits : 16;
        uint32_t *x = realloc(e->exits, cap * sizeof *x);
        if (!x) {
            e->oom = true;  /* a dropped exit would lose tokens: the entry is not kept */
            return;
        }
        e->exits = x;
        e->cap_exits = cap;
    }
    e->exits[e->n_exits++] = node;
}

static uint32_t key_hash(const uint32_t *key, uint32_t n, bool whole)
{
    uint64_t h = n * 2u + whole;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ key[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ h >> 29);
}

/* The window of stack node: its top positions (at most WINDOW). Returns the
 * node below the window (S_EMPTY: the window is the whole stack). */
static uint32_t window_of(const struct arena *A, uint32_t node, uint32_t *key, uint32_t *n)
{
    *n = 0;
    while (node > S_CONTEXT && *n < WINDOW) {
        key[(*n)++] = A->n[node].pos;
        node = A->n[node].parent;
    }
    return node;
}

/* The entry for a window (made on first use); NULL: out of memory. Called
 * with c->lock held. */
static struct entry *entry_for(struct l8g_compiled *c, const uint32_t *key, uint32_t n,
                               bool whole)
{
    uint32_t b = key_hash(key, n, whole) & (c->tab_cap - 1);
    for (struct entry *e = c->tab[b]; e; e = e->next)
        if (e->n_key == n && e->whole == whole && !memcmp(e->key, key, n * sizeof *key))
            return e;
    struct entry *e = calloc(1, sizeof *e);
    if (!e || !(e->accepted = calloc(c->words, sizeof *e->accepted))) {
        free(e);
        return NULL;
    }
    memcpy(e->key, key, n * sizeof *key);
    e->n_key = n;
    e->whole = whole;
    /* The scratch stacks only serve walks: start afresh when they are many. */
    struct arena *A = &c->scratch;
    if (A->n_len > (1u << 20) || A->s_len > (1u << 18)) {
        arena_free(A);
        if (arena_init(A))
            A->oom = true;
    }
    /* The window as a stack of its own over S_CONTEXT (S_EMPTY: whole). */
    uint32_t node = whole ? S_EMPTY : S_CONTEXT;
    for (uint32_t i = n; i-- > 0;)
        node = intern(A, key[i], node);
    walk(c->g, c->v, A, state_at(c->g, A, node), 0, e->accepted, whole ? NULL : add_exit, e);
    long n_acc = A->oom || e->oom ? 0 : popcount_words(e->accepted, c->words);
    if (n_acc <= SPARSE && !A->oom && !e->oom) {
        /* sparse: the ids instead of 16 KB to OR in */
        if ((e->ids = malloc((n_acc ? (size_t)n_acc : 1) * sizeof *e->ids))) {
            for (size_t k = 0; k < c->words; k++)
                for (uint32_t w = e->accepted[k]; w; w &= w - 1)
                    e->ids[e->n_ids++] = (uint32_t)(k * 32 + (uint32_t)__builtin_ctz(w));
            free(e->accepted);
            e->accepted = NULL;
        }
    }
    if (A->oom || e->oom) {
        free(e->accepted);
        free(e->exits);
        free(e);
        arena_free(A);
        if (arena_init(A))
            A->oom = true;
        return NULL;
    }
    e->next = c->tab[b];
    c->tab[b] = e;
    c->n_entries++;
    return e;
}

int l8g_compile(const struct l8g_grammar *g, const struct l8g_vocab *v, struct l8g_compiled **out)
{
    struct l8g_compiled *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->g = g;
    c->v = v;
    c->words = l8g_mask_words(v->n);
    c->tab_cap = 1024;
    pthread_mutex_init(&c->lock, NULL);
    if (!(c->tab = calloc(c->tab_cap, sizeof *c->tab)) || arena_init(&c->scratch)) {
        l8g_compiled_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

void l8g_compiled_free(struct l8g_compiled *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; c->tab && i < c->tab_cap; i++) {
        for (struct entry *e = c->tab[i], *next; e; e = next) {
            next = e->next;
            free(e->accepted);
            free(e->ids);
            free(e->exits);
            free(e);
        }
    }
    free(c->tab);
    arena_free(&c->scratch);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- matchers -------------------------------------------------------------- */

struct cached_mask {
    uint32_t state;     /* 0 (DEAD): the slot is free */
    long allowed;
    uint64_t used;
    uint32_t *words;
};

struct l8g_matcher {
    struct l8g_compiled *c;
    struct arena A;
    uint32_t cur;       /* the state after the tokens taken */
    struct cached_mask cache[STATE_CACHE];
    uint64_t clock;
    bool done;
};

int l8g_matcher_new(struct l8g_compiled *c, struct l8g_matcher **out)
{
    struct l8g_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->c = c;
    if (arena_init(&m->A)) {
        l8g_matcher_free(m);
        return -ENOMEM;
    }
    const struct l8g_grammar *g = c->g;
    for (uint32_t a = g->rule_start[g->root];;) {   /* each alternative of root */
        expand(g, &m->A, intern(&m->A, a, S_EMPTY));
        while (!g_alt_end(g, a))
            a++;
        if (g->e[a].type == G_END)
            break;
        a++;
    }
    m->cur = state_of_tmp(&m->A);
    if (m->A.oom || m->cur == DEAD) {
        l8g_matcher_free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

void l8g_matcher_free(struct l8g_matcher *m)
{
    if (!m)
        return;
    arena_free(&m->A);
    for (int i = 0; i < STATE_CACHE; i++)
        free(m->cache[i].words);
    free(m);
}

struct l8g_mark l8g_matcher_mark(const struct l8g_matcher *m)
{
    return (struct l8g_mark){ m->cur, m->done };
}

void l8g_matcher_rewind(struct l8g_matcher *m, struct l8g_mark mark)
{
    m->cur = mark.state;
    m->done = mark.done;
}

bool l8g_matcher_can_end(const struct l8g_matcher *m)
{
    return !m->done && (m->A.s[m->cur].flags & F_COMPLETE);
}

bool l8g_matcher_done(const struct l8g_matcher *m)
{
    return m->done;
}


/* The mask of the current state, computed: per stack, its window's entry
 * (accepted tokens, and exits walked from the stack below the window). */
static int compute_mask(struct l8g_matcher *m, uint32_t *words)
{
    struct l8g_compiled *c = m->c;
    const struct l8g_vocab *v = c->v;
    struct arena *A = &m->A;
    memset(words, 0, c->words * sizeof *words);
    for (uint32_t i = 0; i < A->s[m->cur].n; i++) {
        uint32_t node = A->pool[A->s[m->cur].off + i];
        if (node <= S_CONTEXT)
            continue;
        uint32_t key[WINDOW], n;
        uint32_t below = window_of(A, node, key, &n);
        pthread_mutex_lock(&c->lock);
        struct entry *e = entry_for(c, key, n, below == S_EMPTY);
        if (!e) {
            pthread_mutex_unlock(&c->lock);
            return -ENOMEM;
        }
        if (e->accepted)
            or_words(words, e->accepted, c->words);
        else
            for (uint32_t k = 0; k < e->n_ids; k++)
                bit_set(words, e->ids[k]);
        pthread_mutex_unlock(&c->lock);
        /* An entry never changes once made and lives as long as c: its exits
         * are read without the lock. Their tokens read their remaining bytes
         * from the stack below the window. */
        if (!e->n_exits)
            continue;
        uint32_t s0 = state_at(c->g, A, below);
        for (uint32_t x = 0; x < e->n_exits && s0 != DEAD; x++)
            walk(c->g, v, A, s0, e->exits[x], words, NULL, NULL);
    }
    if (A->oom)
        return -ENOMEM;
    if (A->s[m->cur].flags & F_COMPLETE)
        for (uint32_t k = 0; k < v->n_end; k++)
            bit_set(words, v->end_ids[k]);
    return 0;
}

long l8g_matcher_mask(struct l8g_matcher *m, uint32_t *words)
{
    const size_t nw = m->c->words;
    if (m->done) {
        memset(words, 0, nw * sizeof *words);
        return 0;
    }
    m->clock++;
    struct cached_mask *slot = &m->cache[0];
    for (int i = 0; i < STATE_CACHE; i++) {
        struct cached_mask *cm = &m->cache[i];
        if (cm->state == m->cur) {
            memcpy(words, cm->words, nw * sizeof *words);
            cm->used = m->clock;
            return cm->allowed;
        }
        if (cm->used < slot->used)
            slot = cm;
    }
    int rc = compute_mask(m, words);
    if (rc < 0)
        return rc;
    long allowed = popcount_words(words, nw);
    if (!slot->words && !(slot->words = malloc(nw * sizeof *words)))
        return allowed;     /* uncached, still right */
    slot->state = m->cur;
    memcpy(slot->words, words, nw * sizeof *words);
    slot->allowed = allowed;
    slot->used = m->clock;
    return allowed;
}

int l8g_matcher_accept(struct l8g_matcher *m, uint32_t id)
{
    const struct l8g_vocab *v = m->c->v;
    if (m->done || id >= v->n)
        return -EINVAL;
    for (uint32_t k = 0; k < v->n_end; k++) {
        if (v->end_ids[k] == id) {
            if (!(m->A.s[m->cur].flags & F_COMPLETE))
                return -EINVAL;
            m->done = true;
            return 0;
        }
    }
    const uint8_t *b = v->bytes + v->off[id];
    uint32_t len = v->off[id + 1] - v->off[id];
    if (!len || v->special[id])
        return -EINVAL;     /* a special token, or one without bytes */
    uint32_t s = m->cur;
    for (uint32_t i = 0; i < len && s != DEAD; i++)
        s = step(m->c->g, &m->A, s, b[i]);
    if (m->A.oom)
        return -ENOMEM;
    if (s == DEAD)
        return -EINVAL;     /* cur stays as it was */
    m->cur = s;
    return 0;
}
