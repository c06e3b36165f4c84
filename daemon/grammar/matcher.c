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

/* ---- stacks: hash-consed (position, parent) nodes ------------------------- */

enum { S_EMPTY = 0, S_CONTEXT = 1 };   /* the bottom; "the rest of the stack" in a window */

struct snode {
    uint32_t pos, parent;
};

struct arena {
    struct snode *n;
    uint32_t len, cap;
    uint32_t *tab;          /* open addressing: node index, 0 empty (nodes 0, 1 are never keys) */
    uint32_t tab_cap;
    uint32_t *mark;         /* [cap]: the set generation that last added the node */
    uint32_t gen;
    bool oom;
};

static int arena_init(struct arena *A)
{
    memset(A, 0, sizeof *A);
    A->cap = 1024;
    A->tab_cap = 2048;
    A->n = malloc(A->cap * sizeof *A->n);
    A->mark = calloc(A->cap, sizeof *A->mark);
    A->tab = calloc(A->tab_cap, sizeof *A->tab);
    if (!A->n || !A->mark || !A->tab)
        return -ENOMEM;
    A->n[S_EMPTY] = (struct snode){ UINT32_MAX, UINT32_MAX };
    A->n[S_CONTEXT] = (struct snode){ UINT32_MAX, UINT32_MAX };
    A->len = 2;
    return 0;
}

static void arena_free(struct arena *A)
{
    free(A->n);
    free(A->mark);
    free(A->tab);
    memset(A, 0, sizeof *A);
}

static inline uint32_t node_hash(uint32_t pos, uint32_t parent)
{
    uint64_t h = ((uint64_t)pos << 32 | parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static bool arena_grow(struct arena *A)
{
    uint32_t cap = 2 * A->cap;
    struct snode *n = realloc(A->n, cap * sizeof *n);
    if (!n)
        return false;
    A->n = n;
    uint32_t *mark = realloc(A->mark, cap * sizeof *mark);
    if (!mark)
        return false;
    memset(mark + A->cap, 0, (cap - A->cap) * sizeof *mark);
    A->mark = mark;
    A->cap = cap;
    uint32_t tcap = 2 * cap;
    uint32_t *tab = calloc(tcap, sizeof *tab);
    if (!tab)
        return false;
    for (uint32_t i = 2; i < A->len; i++) {
        uint32_t j = node_hash(A->n[i].pos, A->n[i].parent) & (tcap - 1);
        while (tab[j])
            j = (j + 1) & (tcap - 1);
        tab[j] = i;
    }
    free(A->tab);
    A->tab = tab;
    A->tab_cap = tcap;
    return true;
}

/* The node for (pos, parent); S_EMPTY with A->oom set if out of memory. */
static uint32_t intern(struct arena *A, uint32_t pos, uint32_t parent)
{
    uint32_t j = node_hash(pos, parent) & (A->tab_cap - 1);
    for (; A->tab[j]; j = (j + 1) & (A->tab_cap - 1)) {
        const struct snode *s = &A->n[A->tab[j]];
        if (s->pos == pos && s->parent == parent)
            return A->tab[j];
    }
    if (A->len == A->cap) {
        if (!arena_grow(A)) {
            A->oom = true;
            return S_EMPTY;
        }
        return intern(A, pos, parent);
    }
    uint32_t i = A->len++;
    A->n[i] = (struct snode){ pos, parent };
    A->tab[j] = i;
    return i;
}

/* A set of stack nodes, tops at byte ranges (or S_EMPTY: complete; S_CONTEXT:
 * the window was left). Deduplicated with the arena's marks. */
struct set {
    uint32_t *v;
    uint32_t n, cap;
};

static void set_add(struct arena *A, struct set *S, uint32_t node)
{
    if (A->mark[node] == A->gen)
        return;
    A->mark[node] = A->gen;
    if (S->n == S->cap) {
        uint32_t cap = S->cap ? 2 * S->cap : 16;
        uint32_t *v = realloc(S->v, cap * sizeof *v);
        if (!v) {
            A->oom = true;
            return;
        }
        S->v = v;
        S->cap = cap;
    }
    S->v[S->n++] = node;
}

/* A new set is being built: marks of earlier sets no longer count. */
static void set_begin(struct arena *A, struct set *S)
{
    S->n = 0;
    if (++A->gen == 0) {
        memset(A->mark, 0, A->cap * sizeof *A->mark);
        A->gen = 1;
    }
}

/* Adds to S the stacks reached from node without reading a byte. */
static void expand(const struct l8g_grammar *g, struct arena *A, struct set *S, uint32_t node)
{
    while (node > S_CONTEXT) {
        const struct snode s = A->n[node];
        const struct g_elem *e = &g->e[s.pos];
        if (e->type == G_BYTES) {
            set_add(A, S, node);
            return;
        }
        if (e->type != G_RULE) {    /* the end of an alternative: back to the caller */
            node = s.parent;
            continue;
        }
        uint32_t cont = intern(A, s.pos + 1, s.parent);
        for (uint32_t a = g->rule_start[e->rule];;) {
            expand(g, A, S, intern(A, a, cont));
            while (!g_alt_end(g, a))
                a++;
            if (g->e[a].type == G_END)
                break;
            a++;
        }
        return;
    }
    set_add(A, S, node);
}

/* out = the stacks of in after reading byte c. */
static void advance(const struct l8g_grammar *g, struct arena *A, const struct set *in,
                    struct set *out, uint8_t c)
{
    set_begin(A, out);
    for (uint32_t i = 0; i < in->n; i++) {
        uint32_t node = in->v[i];
        if (node <= S_CONTEXT)
            continue;
        const struct snode s = A->n[node];
        const struct g_elem *e = &g->e[s.pos];
        if (c >= e->lo && c <= e->hi)
            expand(g, A, out, intern(A, s.pos + 1, s.parent));
    }
}

/* ---- the walk over the trie ---------------------------------------------- */

/* One state per depth of the trie, reused across walks. */
struct walk {
    struct set *at;     /* [max_len + 1] */
    uint32_t depth;
};

static int walk_init(struct walk *W, uint32_t max_len)
{
    W->depth = max_len + 1;
    W->at = calloc(W->depth, sizeof *W->at);
    return W->at ? 0 : -ENOMEM;
}

static void walk_free(struct walk *W)
{
    for (uint32_t i = 0; W->at && i < W->depth; i++)
        free(W->at[i].v);
    free(W->at);
    W->at = NULL;
}

static inline void bit_set(uint32_t *w, uint32_t id)
{
    w[id >> 5] |= 1u << (id & 31);
}

static inline bool has(const struct set *S, uint32_t node)
{
    for (uint32_t i = 0; i < S->n; i++)
        if (S->v[i] == node)
            return true;
    return false;
}

/* Walks the subtree of trie node root (its children and below) from the
 * stacks in W->at[0]: each token whose bytes some stack reads whole goes
 * into words. With on_exit (window walks): a node where a stack left the
 * window (S_CONTEXT) is passed to it, with the tokens ending there accepted
 * and the ones below decided later from the real stack. */
typedef void (*exit_fn)(void *ctx, uint32_t node);

static void walk(const struct l8g_grammar *g, const struct l8g_vocab *v, struct arena *A,
                 struct walk *W, uint32_t root, uint32_t *words, exit_fn on_exit, void *ctx)
{
    const uint32_t base = v->t[root].depth;
    for (uint32_t i = root + 1; i < v->t[root].end && !A->oom;) {
        const struct trie_node *t = &v->t[i];
        const uint32_t d = t->depth - base;
        advance(g, A, &W->at[d - 1], &W->at[d], t->byte);
        struct set *S = &W->at[d];
        if (!S->n) {
            i = t->end;
            continue;
        }
        for (uint32_t k = 0; k < t->n_tok; k++)
            bit_set(words, v->node_tok[t->tok + k]);
        if (on_exit && has(S, S_CONTEXT)) {
            on_exit(ctx, i);
            /* the other stacks go on: their verdicts are certain */
        }
        i++;
    }
}

/* ---- cache entries: what a window of the stack decides ------------------- */

struct entry {
    uint32_t key[WINDOW];   /* positions, top first */
    uint32_t n_key;         /* frames in the window */
    bool whole;             /* the window is the whole stack (no exits) */
    uint32_t *accepted;     /* a bitset of the vocabulary */
    uint32_t *exits;        /* trie nodes whose subtrees the real stack decides */
    uint32_t n_exits, cap_exits;
    bool oom;
    struct entry *next;     /* hash chain */
};

struct l8g_compiled {
    const struct l8g_grammar *g;
    const struct l8g_vocab *v;
    pthread_mutex_t lock;   /* the entries */
    struct entry **tab;
    uint32_t tab_cap, n_entries;
    struct arena scratch;   /* window walks' stacks (under lock) */
    struct walk w;
    size_t words;
};

static void add_exit(void *ctx, uint32_t node)
{
    struct entry *e = ctx;
    if (e->n_exits && e->exits[e->n_exits - 1] == node)
        return;
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

static uint32_t key_hash(const uint32_t *key, uint32_t n)
{
    uint64_t h = n;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ key[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ h >> 29);
}

/* The window of stack node in arena A: its top positions, and whether the
 * whole stack fits. Returns the node below the window (S_EMPTY if none). */
static uint32_t window_of(const struct arena *A, uint32_t node, uint32_t *key, uint32_t *n)
{
    *n = 0;
    while (node > S_CONTEXT && *n < WINDOW) {
        key[(*n)++] = A->n[node].pos;
        node = A->n[node].parent;
    }
    return node;
}

/* The entry for a window (made on first use). NULL: out of memory. Called
 * with c->lock held. */
static struct entry *entry_for(struct l8g_compiled *c, const uint32_t *key, uint32_t n,
                               bool whole)
{
    uint32_t h = key_hash(key, n) ^ (whole ? 0x5bd1e995u : 0);
    for (struct entry *e = c->tab[h & (c->tab_cap - 1)]; e; e = e->next)
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
    /* The window as a stack of its own over S_CONTEXT (or S_EMPTY: whole). */
    struct arena *A = &c->scratch;
    uint32_t node = whole ? S_EMPTY : S_CONTEXT;
    for (uint32_t i = n; i-- > 0;)
        node = intern(A, key[i], node);
    set_begin(A, &c->w.at[0]);
    set_add(A, &c->w.at[0], node);
    walk(c->g, c->v, A, &c->w, 0, e->accepted, whole ? NULL : add_exit, e);
    if (A->oom || e->oom) {
        free(e->accepted);
        free(e->exits);
        free(e);
        return NULL;
    }
    /* Scratch stacks are only needed during the walk: drop them when many. */
    if (A->len > (1u << 20)) {
        arena_free(A);
        if (arena_init(A))
            A->oom = true;
    }
    uint32_t b = h & (c->tab_cap - 1);
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
    if (!(c->tab = calloc(c->tab_cap, sizeof *c->tab)) || arena_init(&c->scratch) ||
        walk_init(&c->w, v->max_len)) {
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
            free(e->exits);
            free(e);
        }
    }
    free(c->tab);
    arena_free(&c->scratch);
    walk_free(&c->w);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- matchers -------------------------------------------------------------- */

struct cached_mask {
    uint32_t *state;    /* the sorted stack nodes of the state */
    uint32_t n;
    uint32_t *words;
    long allowed;
    uint64_t used;
};

struct l8g_matcher {
    struct l8g_compiled *c;
    struct arena A;
    struct set cur, tmp, tmp2;
    struct walk w;
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
    if (arena_init(&m->A) || walk_init(&m->w, c->v->max_len)) {
        l8g_matcher_free(m);
        return -ENOMEM;
    }
    const struct l8g_grammar *g = c->g;
    set_begin(&m->A, &m->cur);
    for (uint32_t a = g->rule_start[g->root];;) {
        expand(g, &m->A, &m->cur, intern(&m->A, a, S_EMPTY));
        while (!g_alt_end(g, a))
            a++;
        if (g->e[a].type == G_END)
            break;
        a++;
    }
    if (m->A.oom) {
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
    free(m->cur.v);
    free(m->tmp.v);
    free(m->tmp2.v);
    walk_free(&m->w);
    for (int i = 0; i < STATE_CACHE; i++) {
        free(m->cache[i].state);
        free(m->cache[i].words);
    }
    free(m);
}

bool l8g_matcher_can_end(const struct l8g_matcher *m)
{
    return !m->done && has(&m->cur, S_EMPTY);
}

bool l8g_matcher_done(const struct l8g_matcher *m)
{
    return m->done;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static long popcount_words(const uint32_t *w, size_t n)
{
    long k = 0;
    for (size_t i = 0; i < n; i++)
        k += __builtin_popcount(w[i]);
    return k;
}

/* The mask of the current state, computed: per stack, its window's entry
 * (accepted tokens, and exits walked from the stack below the window). */
static int compute_mask(struct l8g_matcher *m, uint32_t *words)
{
    struct l8g_compiled *c = m->c;
    const struct l8g_vocab *v = c->v;
    memset(words, 0, c->words * sizeof *words);
    for (uint32_t i = 0; i < m->cur.n; i++) {
        uint32_t node = m->cur.v[i];
        if (node <= S_CONTEXT)
            continue;
        uint32_t key[WINDOW], n;
        uint32_t below = window_of(&m->A, node, key, &n);
        bool whole = below == S_EMPTY;
        pthread_mutex_lock(&c->lock);
        struct entry *e = entry_for(c, key, n, whole);
        if (!e) {
            pthread_mutex_unlock(&c->lock);
            return -ENOMEM;
        }
        for (size_t k = 0; k < c->words; k++)
            words[k] |= e->accepted[k];
        pthread_mutex_unlock(&c->lock);
        /* Entries are never freed while c lives, and never change once made:
         * their exits can be read without the lock. */
        if (!e->n_exits)
            continue;
        /* The tokens below an exit node read their remaining bytes from the
         * stack below the window. */
        set_begin(&m->A, &m->w.at[0]);
        expand(c->g, &m->A, &m->w.at[0], below);
        for (uint32_t x = 0; x < e->n_exits && m->w.at[0].n; x++)
            walk(c->g, v, &m->A, &m->w, e->exits[x], words, NULL, NULL);
    }
    if (m->A.oom)
        return -ENOMEM;
    if (has(&m->cur, S_EMPTY))
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
    /* the state, sorted, as the cache's key */
    uint32_t *state = malloc((m->cur.n ? m->cur.n : 1) * sizeof *state);
    if (!state)
        return -ENOMEM;
    memcpy(state, m->cur.v, m->cur.n * sizeof *state);
    qsort(state, m->cur.n, sizeof *state, cmp_u32);
    m->clock++;
    struct cached_mask *slot = &m->cache[0];
    for (int i = 0; i < STATE_CACHE; i++) {
        struct cached_mask *cm = &m->cache[i];
        if (cm->words && cm->n == m->cur.n && !memcmp(cm->state, state, cm->n * sizeof *state)) {
            memcpy(words, cm->words, nw * sizeof *words);
            cm->used = m->clock;
            free(state);
            return cm->allowed;
        }
        if (cm->used < slot->used)
            slot = cm;
    }
    int rc = compute_mask(m, words);
    if (rc < 0) {
        free(state);
        return rc;
    }
    long allowed = popcount_words(words, nw);
    if (!slot->words && !(slot->words = malloc(nw * sizeof *words))) {
        free(state);
        return allowed;     /* uncached, still right */
    }
    free(slot->state);
    slot->state = state;
    slot->n = m->cur.n;
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
            if (!has(&m->cur, S_EMPTY))
                return -EINVAL;
            m->done = true;
            return 0;
        }
    }
    const uint8_t *b = v->bytes + v->off[id];
    uint32_t len = v->off[id + 1] - v->off[id];
    if (!len || v->special[id])
        return -EINVAL;     /* a special token, or one without bytes */
    /* Read into tmp and tmp2 by turns, so that a refused token leaves cur as
     * it was; the last one read becomes cur. */
    const struct set *in = &m->cur;
    struct set *out = &m->tmp;
    for (uint32_t i = 0; i < len; i++) {
        advance(m->c->g, &m->A, in, out, b[i]);
        if (m->A.oom)
            return -ENOMEM;
        if (!out->n)
            return -EINVAL;
        in = out;
        out = out == &m->tmp ? &m->tmp2 : &m->tmp;
    }
    struct set *res = in == &m->tmp ? &m->tmp : &m->tmp2, t = m->cur;
    m->cur = *res;
    *res = t;
    return 0;
}
