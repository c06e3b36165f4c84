/* constraint.c - see constraint.h. */
#include "constraint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "llama8.pb-c.h"
#include "llama8_tokenizer.h"
#include "log.h"

/* One compiled grammar, shared by the requests that sent its text. */
struct entry {
    int kind;
    char *text;
    size_t len;
    uint64_t hash;
    struct l8g_grammar *g;
    struct l8g_compiled *comp;
    uint32_t refs;          /* requests using it */
    uint64_t used;          /* the cache's clock when last asked for */
};

/* A request's constraint. */
struct req_constraint {
    struct entry *e;
    struct l8g_matcher *m;
};

struct l8d_constraints {
    struct l8g_vocab *vocab;    /* NULL: constraints are refused with why */
    char why[L8D_ERRLEN];
    struct entry **entries;
    uint32_t n, cap;            /* cap: kept when unused */
    uint64_t clock;
    struct l8_sched_slot *slots;
};

static uint64_t text_hash(int kind, const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The vocabulary from the tokenizer, or why not (in c->why). */
static int load_vocab(struct l8d_constraints *c, const char *path, uint32_t vocab,
                      const uint32_t *end_ids, uint32_t n_end)
{
    l8tok *tok = NULL;
    int rc = l8tok_load(path, &tok);
    if (rc < 0) {
        snprintf(c->why, sizeof c->why, "constraints need the model's tokenizer: %s: %s", path,
                 rc == -EINVAL ? "not a tokenizer.json" : strerror(-rc));
        return rc == -ENOMEM ? rc : 0;
    }
    uint32_t n_tok = l8tok_n_ids(tok);
    if (n_tok > vocab) {
        snprintf(c->why, sizeof c->why, "constraints need the model's tokenizer: %s has %u ids, "
                 "the model %u", path, n_tok, vocab);
        l8tok_free(tok);
        return 0;
    }
    uint8_t *bytes = NULL;
    uint32_t *off = NULL;
    bool *special = NULL;
    rc = l8tok_table(tok, vocab, &bytes, &off, &special);
    if (rc == -EINVAL) {
        snprintf(c->why, sizeof c->why, "constraints: %s: its tokens' bytes exceed 4 GiB", path);
        rc = 0;
    } else if (!rc) {
        rc = l8g_vocab_new(vocab, bytes, off, special, end_ids, n_end, &c->vocab);
        if (rc == -EINVAL) {
            snprintf(c->why, sizeof c->why, "constraints: %s: a token longer than 255 bytes",
                     path);
            rc = 0;
        }
    }
    free(off);
    free(special);
    free(bytes);
    l8tok_free(tok);
    return rc;
}

int l8d_constraints_new(const char *tokenizer_path, uint32_t vocab, const uint32_t *end_ids,
                        uint32_t n_end, uint32_t cache, struct l8d_constraints **out,
                        const char **why)
{
    struct l8d_constraints *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->cap = cache;
    int rc = 0;
    if (!tokenizer_path || !tokenizer_path[0])
        snprintf(c->why, sizeof c->why, "constraints are off (no tokenizer configured)");
    else
        rc = load_vocab(c, tokenizer_path, vocab, end_ids, n_end);
    if (rc < 0) {
        free(c);
        return rc;
    }
    *why = c->vocab ? NULL : c->why;
    *out = c;
    return 0;
}

static void entry_free(struct entry *e)
{
    l8g_compiled_free(e->comp);
    l8g_grammar_free(e->g);
    free(e->text);
    free(e);
}

void l8d_constraints_free(struct l8d_constraints *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n; i++)
        entry_free(c->entries[i]);
    free(c->entries);
    l8g_vocab_free(c->vocab);
    free(c);
}

/* The GBNF of a constraint, malloc'd or static (*owned says which). */
static int to_gbnf(int kind, const char *text, size_t len, const char **gbnf, size_t *glen,
                   char **owned, char err[L8G_ERRLEN])
{
    *owned = NULL;
    int rc = 0;
    switch (kind) {
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF:
        *gbnf = text;
        *glen = len;
        return 0;
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON:
        *gbnf = l8g_json_gbnf;
        *glen = strlen(l8g_json_gbnf);
        return 0;
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA:
        rc = l8g_schema_to_gbnf(text, len, owned, err);
        break;
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_REGEX:
        rc = l8g_regex_to_gbnf(text, len, owned, err);
        break;
    default:
        snprintf(err, L8G_ERRLEN, "unknown constraint kind %d", kind);
        return -EINVAL;
    }
    if (rc == 0) {
        *gbnf = *owned;
        *glen = strlen(*owned);
    }
    return rc;
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF: return "grammar";
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA: return "JSON Schema";
    case LLAMA8__CONSTRAINT_KIND__CONSTRAINT_REGEX: return "regex";
    default: return "constraint";
    }
}

/* The entry for (kind, text): found, or compiled and added (the least
 * recently used unused one past the cache's size dropped). NULL: err. */
static struct entry *get_entry(struct l8d_constraints *c, int kind, const char *text,
                               size_t len, char err[L8D_ERRLEN])
{
    const uint64_t h = text_hash(kind, text, len);
    for (uint32_t i = 0; i < c->n; i++) {
        struct entry *e = c->entries[i];
        if (e->hash == h && e->kind == kind && e->len == len && !memcmp(e->text, text, len)) {
            e->used = ++c->clock;
            return e;
        }
    }
    char gerr[L8G_ERRLEN] = "", *owned = NULL;
    const char *gbnf;
    size_t glen;
    struct entry *e = calloc(1, sizeof *e);
    if (!e || !(e->text = malloc(len ? len : 1))) {
        free(e);
        snprintf(err, L8D_ERRLEN, "out of memory");
        return NULL;
    }
    memcpy(e->text, text, len);
    e->len = len;
    e->kind = kind;
    e->hash = h;
    int rc = to_gbnf(kind, text, len, &gbnf, &glen, &owned, gerr);
    if (!rc)
        rc = l8g_grammar_parse(gbnf, glen, &e->g, gerr);
    if (!rc && (rc = l8g_compile(e->g, c->vocab, &e->comp)))
        snprintf(gerr, sizeof gerr, "out of memory");
    free(owned);
    if (rc) {
        /* a translation's own GBNF failing to parse is ours, not the client's */
        snprintf(err, L8D_ERRLEN, "%s%s: %s",
                 owned && kind != LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF ? "translated " : "",
                 kind_name(kind), gerr);
        entry_free(e);
        return NULL;
    }
    /* room: drop the least recently used entry nobody uses, past the size */
    if (c->n >= c->cap) {
        int32_t lru = -1;
        for (uint32_t i = 0; i < c->n; i++)
            if (!c->entries[i]->refs && (lru < 0 || c->entries[i]->used < c->entries[lru]->used))
                lru = (int32_t)i;
        if (lru >= 0) {
            entry_free(c->entries[lru]);
            c->entries[lru] = c->entries[--c->n];
        }
    }
    if (c->n % 16 == 0) {
        void *ne = realloc(c->entries, (c->n + 16) * sizeof *c->entries);
        if (!ne) {
            entry_free(e);
            snprintf(err, L8D_ERRLEN, "out of memory");
            return NULL;
        }
        c->entries = ne;
    }
    e->used = ++c->clock;
    c->entries[c->n++] = e;
    return e;
}

void *l8d_constraint_new(struct l8d_constraints *c, int kind, const char *text, size_t len,
                         char err[L8D_ERRLEN])
{
    if (!c->vocab) {
        snprintf(err, L8D_ERRLEN, "%s", c->why);
        return NULL;
    }
    struct entry *e = get_entry(c, kind, text, len, err);
    if (!e)
        return NULL;
    struct req_constraint *rc = calloc(1, sizeof *rc);
    if (!rc || l8g_matcher_new(e->comp, &rc->m)) {
        free(rc);
        snprintf(err, L8D_ERRLEN, "out of memory");
        return NULL;
    }
    rc->e = e;
    e->refs++;
    return rc;
}

void l8d_constraint_free(void *ctx, void *constraint)
{
    (void)ctx;  /* the scheduler's, the daemon */
    struct req_constraint *rc = constraint;
    if (!rc)
        return;
    l8g_matcher_free(rc->m);
    rc->e->refs--;
    free(rc);
}

void l8d_constraints_attach(struct l8d_constraints *c, struct l8_sched *sched)
{
    c->slots = l8_sched_step_slots(sched);
}

void l8d_constraints_masks(void *ud, struct l8_seq *seqs, uint32_t n)
{
    struct l8d_constraints *c = ud;
    const size_t W = l8g_mask_words(l8g_vocab_size(c->vocab));
    for (uint32_t i = 0; i < n; i++) {
        struct req_constraint *rc = c->slots[i].constraint;
        struct l8_seq *q = &seqs[i];
        if (!rc || !q->allowed)
            continue;
        /* Position j's mask is the state's after drafts 1..j, taken ahead
         * and given back: past a draft that the mask before it refuses (or
         * where nothing fits, or no memory) the sample cannot be kept, and
         * the engine is given every id to sample from. */
        uint32_t *mask = (uint32_t *)q->allowed;
        const uint32_t *drafts = q->tokens + q->n_tokens - q->n_draft;
        const struct l8g_mark at = l8g_matcher_mark(rc->m);
        uint32_t j = 0;
        for (;; j++) {
            uint32_t *w = mask + j * W;
            if (l8g_matcher_mask(rc->m, w) <= 0) {
                memset(w, 0xff, W * sizeof *w);
                break;
            }
            if (j == q->n_draft)
                break;
            const uint32_t d = drafts[j];
            if (!(w[d / 32] >> (d % 32) & 1) || l8g_matcher_accept(rc->m, d) < 0 ||
                l8g_matcher_done(rc->m))
                break;
        }
        for (uint32_t x = j + 1; x <= q->n_draft; x++)
            memset(mask + x * W, 0xff, W * sizeof *mask);
        l8g_matcher_rewind(rc->m, at);
    }
}

void l8d_constraints_after(void *ud, struct l8_seq *seqs, uint32_t n, int status)
{
    struct l8d_constraints *c = ud;
    if (status < 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        struct l8_sched_slot *sl = &c->slots[i];
        struct req_constraint *rc = sl->constraint;
        const struct l8_seq *q = &seqs[i];
        if (!rc || !q->allowed)
            continue;
        /* The samples the scheduler keeps (its rule: up to the first that
         * differs from the draft after it), taken in order. A sample the
         * constraint refuses can only come from a mask of every id: nothing
         * fitted there. */
        const uint32_t k = q->n_draft, *drafts = q->tokens + q->n_tokens - k;
        for (uint32_t j = 0;; j++) {
            const uint32_t tok = k ? q->verify_out[j].token : q->token_out;
            sl->constraint_at = j;
            if (l8g_matcher_accept(rc->m, tok) < 0) {
                sl->constraint_end = true;
                break;
            }
            if (l8g_matcher_done(rc->m)) {
                sl->constraint_done = true;     /* an end id: the reply is whole */
                break;
            }
            if (j == k || tok != drafts[j])
                break;
        }
    }
}

uint32_t l8d_constraints_cached(const struct l8d_constraints *c)
{
    return c->n;
}
