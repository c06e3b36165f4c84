/* gbnf.c - GBNF text to rules over bytes (grammar_internal.h), and the
 * reference matcher the token masks are tested against.
 *
 * Parsing builds each rule's elements in its own vector (groups, classes
 * and repetitions add rules as they are met), then checks the whole: every
 * rule defined, a root, which rules can match something (alternatives that
 * cannot are dropped; a root that cannot is an error), no left recursion
 * (the matcher expands a rule's alternatives before reading a byte: a rule
 * that reaches itself first would never stop). Then the rules go into one
 * array. */
#include "grammar_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT (1u << 20)
#define MAX_RULES 65536u
#define MAX_ELEMS (1u << 22)
#define MAX_REPEAT 10000u
#define REPEAT_INF UINT32_MAX

struct evec {
    struct g_elem *v;
    uint32_t n, cap;
};

struct prule {
    struct evec e;
    const char *name;       /* into the text; NULL for a rule made by the parser */
    uint32_t name_len;
    uint32_t owner;         /* the named rule whose text made it (itself if named) */
    size_t def_off, ref_off;    /* where defined, first referenced (SIZE_MAX: not) */
    bool defined;
};

struct parser {
    const char *s, *p, *end;
    struct prule *r;
    uint32_t n_r, cap_r;
    uint32_t *hash;         /* open addressing over named rules: id + 1, 0 empty */
    uint32_t hash_cap;
    size_t n_elems;
    uint32_t cur;           /* the named rule being parsed */
    char *err;
    int rc;
};

/* ---- errors --------------------------------------------------------------- */

static void line_col(const char *s, size_t off, unsigned *line, unsigned *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

__attribute__((format(printf, 4, 5)))
static int fail_at(struct parser *P, size_t off, int rc, const char *fmt, ...)
{
    if (P->rc)
        return P->rc;
    unsigned line, col;
    line_col(P->s, off, &line, &col);
    int n = snprintf(P->err, L8G_ERRLEN, "line %u, column %u: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && n < L8G_ERRLEN)
        vsnprintf(P->err + n, L8G_ERRLEN - (size_t)n, fmt, ap);
    va_end(ap);
    P->rc = rc;
    return rc;
}

#define FAIL(P, ...) fail_at((P), (size_t)((P)->p - (P)->s), -EINVAL, __VA_ARGS__)

/* ---- rules ---------------------------------------------------------------- */

static int push(struct parser *P, uint32_t id, struct g_elem e)
{
    struct evec *v = &P->r[id].e;
    if (++P->n_elems > MAX_ELEMS)
        return fail_at(P, (size_t)(P->p - P->s), -E2BIG, "the grammar is too large (over %u "
                       "elements once classes and repetitions are expanded)", MAX_ELEMS);
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 8;
        void *nv = realloc(v->v, cap * sizeof *v->v);
        if (!nv)
            return P->rc = -ENOMEM;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = e;
    return 0;
}

static int push_bytes(struct parser *P, uint32_t id, uint8_t lo, uint8_t hi)
{
    return push(P, id, (struct g_elem){ .type = G_BYTES, .lo = lo, .hi = hi });
}

static int push_type(struct parser *P, uint32_t id, enum g_type t, uint32_t rule)
{
    return push(P, id, (struct g_elem){ .type = (uint8_t)t, .rule = rule });
}

/* A new rule (name NULL: made by the parser for P->cur); its id, or -1. */
static int64_t new_rule(struct parser *P, const char *name, uint32_t len)
{
    if (P->n_r == MAX_RULES) {
        fail_at(P, (size_t)(P->p - P->s), -E2BIG, "more than %u rules", MAX_RULES);
        return -1;
    }
    if (P->n_r == P->cap_r) {
        uint32_t cap = P->cap_r ? 2 * P->cap_r : 64;
        void *nr = realloc(P->r, cap * sizeof *P->r);
        if (!nr) {
            P->rc = -ENOMEM;
            return -1;
        }
        P->r = nr;
        P->cap_r = cap;
    }
    uint32_t id = P->n_r++;
    P->r[id] = (struct prule){ .name = name, .name_len = len, .owner = name ? id : P->cur,
                               .def_off = SIZE_MAX, .ref_off = SIZE_MAX };
    return id;
}

static uint32_t name_hash(const char *s, uint32_t n)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The id of the named rule, made on first sight; -1 on failure. */
static int64_t named_rule(struct parser *P, const char *name, uint32_t len)
{
    if (P->hash_cap < 2 * (P->n_r + 1)) {
        uint32_t cap = P->hash_cap ? 2 * P->hash_cap : 256;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h) {
            P->rc = -ENOMEM;
            return -1;
        }
        for (uint32_t i = 0; i < P->hash_cap; i++) {
            if (!P->hash[i])
                continue;
            const struct prule *r = &P->r[P->hash[i] - 1];
            uint32_t j = name_hash(r->name, r->name_len) & (cap - 1);
            while (h[j])
                j = (j + 1) & (cap - 1);
            h[j] = P->hash[i];
        }
        free(P->hash);
        P->hash = h;
        P->hash_cap = cap;
    }
    uint32_t j = name_hash(name, len) & (P->hash_cap - 1);
    for (; P->hash[j]; j = (j + 1) & (P->hash_cap - 1)) {
        const struct prule *r = &P->r[P->hash[j] - 1];
        if (r->name_len == len && !memcmp(r->name, name, len))
            return P->hash[j] - 1;
    }
    int64_t id = new_rule(P, name, len);
    if (id >= 0)
        P->hash[j] = (uint32_t)id + 1;
    return id;
}

/* ---- lexing --------------------------------------------------------------- */

static void skip_space(struct parser *P)
{
    while (P->p < P->end) {
        char c = *P->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            P->p++;
        } else if (c == '#') {
            while (P->p < P->end && *P->p != '\n')
                P->p++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static const char *name_end(const char *p, const char *end)
{
    while (p < end && is_name_char(*p))
        p++;
    return p;
}

/* Whether a rule definition, `name ::=`, starts at p. */
static bool at_definition(struct parser *P, const char *p)
{
    const char *q = name_end(p, P->end);
    if (q == p)
        return false;
    while (q < P->end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
        q++;
    return P->end - q >= 3 && !memcmp(q, "::=", 3);
}

/* One UTF-8 character at P->p: its code point, or -1 (message set). */
static int32_t utf8_char(struct parser *P)
{
    const uint8_t *s = (const uint8_t *)P->p;
    size_t left = (size_t)(P->end - P->p);
    uint32_t c = s[0], n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                          : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!n || n > left) {
        FAIL(P, "invalid UTF-8");
        return -1;
    }
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (uint32_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            FAIL(P, "invalid UTF-8");
            return -1;
        }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        FAIL(P, "invalid UTF-8");
        return -1;
    }
    P->p += n;
    return (int32_t)cp;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A character of a literal or class, escapes read; -1 on failure. */
static int32_t parse_char(struct parser *P)
{
    if (P->p >= P->end) {
        FAIL(P, "unexpected end of the grammar");
        return -1;
    }
    if (*P->p != '\\')
        return utf8_char(P);
    const char *at = P->p++;
    if (P->p >= P->end) {
        FAIL(P, "unexpected end of the grammar after '\\'");
        return -1;
    }
    char c = *P->p++;
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        return c;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        P->p = at;
        FAIL(P, "unknown escape '\\%c'", c);
        return -1;
    }
    uint32_t cp = 0;
    for (int i = 0; i < digits; i++) {
        int h = P->p < P->end ? hexval(*P->p) : -1;
        if (h < 0) {
            FAIL(P, "'\\%c' needs %d hex digits", c, digits);
            return -1;
        }
        cp = cp << 4 | (uint32_t)h;
        P->p++;
    }
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        P->p = at;
        FAIL(P, "'\\%c' escape of U+%X, which is not a character", c, cp);
        return -1;
    }
    return (int32_t)cp;
}

/* ---- classes as UTF-8 byte sequences -------------------------------------- */

struct range { uint32_t lo, hi; };

static int utf8_encode(uint32_t cp, uint8_t *b)
{
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xc0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xe0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    b[0] = (uint8_t)(0xf0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
    b[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* The code points lo..hi (no surrogates) as alternatives of rule id, each a
 * sequence of byte ranges: split where the encoded length changes and where
 * a trailing byte does not span its whole 0x80..0xbf, until each piece is
 * one range per byte (as the regex crates' Utf8Sequences). */
static int emit_utf8(struct parser *P, uint32_t id, uint32_t lo, uint32_t hi, bool *first)
{
    static const uint32_t len_max[3] = { 0x7f, 0x7ff, 0xffff };
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i])
            return emit_utf8(P, id, lo, len_max[i], first) ||
                   emit_utf8(P, id, len_max[i] + 1, hi, first);
    if (hi >= 0x80) {
        for (int i = 1; i < 4; i++) {
            uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if (lo & m)
                    return emit_utf8(P, id, lo, lo | m, first) ||
                           emit_utf8(P, id, (lo | m) + 1, hi, first);
                if ((hi & m) != m)
                    return emit_utf8(P, id, lo, (hi & ~m) - 1, first) ||
                           emit_utf8(P, id, hi & ~m, hi, first);
            }
        }
    }
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, b);
    if (!*first && push_type(P, id, G_ALT, 0))
        return P->rc;
    *first = false;
    for (int i = 0; i < n; i++)
        if (push_bytes(P, id, a[i], b[i]))
            return P->rc;
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A rule matching one of the code points in r (n ranges, any order and
 * overlap; negate: those not in it); its id, or -1. */
static int64_t class_rule(struct parser *P, struct range *r, uint32_t n, bool negate)
{
    qsort(r, n, sizeof *r, cmp_range);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    /* The set's complement, then without the surrogates, into out. */
    struct range *out = malloc((2 * (size_t)m + 4) * sizeof *out);
    if (!out) {
        P->rc = -ENOMEM;
        return -1;
    }
    uint32_t k = 0;
    if (negate) {
        uint32_t next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (r[i].lo > next)
                out[k++] = (struct range){ next, r[i].lo - 1 };
            next = r[i].hi + 1;
        }
        if (next <= 0x10ffff)
            out[k++] = (struct range){ next, 0x10ffff };
    } else {
        memcpy(out, r, m * sizeof *r);
        k = m;
    }
    int64_t id = new_rule(P, NULL, 0);
    bool first = true;
    for (uint32_t i = 0; id >= 0 && i < k; i++) {
        struct range x = out[i];
        if (x.lo < 0xd800 && x.hi >= 0xd800) {
            if (emit_utf8(P, (uint32_t)id, x.lo, 0xd7ff, &first))
                id = -1;
            x.lo = 0xe000;
        } else if (x.lo >= 0xd800 && x.lo <= 0xdfff) {
            x.lo = 0xe000;
        }
        if (id >= 0 && x.lo <= x.hi && emit_utf8(P, (uint32_t)id, x.lo, x.hi, &first))
            id = -1;
    }
    free(out);
    /* No alternative at all: a class nothing matches ([^\x00-\U0010FFFF]);
     * the rule stays without elements and is found unproductive later. */
    if (id >= 0 && !first && push_type(P, (uint32_t)id, G_END, 0))
        id = -1;
    return id;
}

static int64_t parse_class(struct parser *P)
{
    const char *start = P->p++;  /* '[' */
    bool negate = P->p < P->end && *P->p == '^';
    if (negate)
        P->p++;
    struct range *r = NULL;
    uint32_t n = 0, cap = 0;
    int64_t id = -1;
    for (;;) {
        if (P->p >= P->end) {
            P->p = start;
            FAIL(P, "unterminated character class");
            goto out;
        }
        if (*P->p == ']')
            break;
        int32_t lo = parse_char(P);
        if (lo < 0)
            goto out;
        int32_t hi = lo;
        if (P->end - P->p >= 2 && P->p[0] == '-' && P->p[1] != ']') {
            P->p++;
            const char *at = P->p;
            if ((hi = parse_char(P)) < 0)
                goto out;
            if (hi < lo) {
                P->p = at;
                FAIL(P, "class range out of order (U+%X after U+%X)", (unsigned)hi, (unsigned)lo);
                goto out;
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            void *nr = realloc(r, cap * sizeof *r);
            if (!nr) {
                P->rc = -ENOMEM;
                goto out;
            }
            r = nr;
        }
        r[n++] = (struct range){ (uint32_t)lo, (uint32_t)hi };
    }
    P->p++;     /* ']' */
    if (!n && !negate) {
        P->p = start;
        FAIL(P, "empty character class");
        goto out;
    }
    id = class_rule(P, r, n, negate);
out:
    free(r);
    return id;
}

/* ---- sequences, alternatives, repetitions -------------------------------- */

static int parse_alternates(struct parser *P, uint32_t id, bool nested);

/* x{min,max} of elements [from, n) of rule id, in place: x min times, then
 * either R ::= x R | (max unbounded) or max - min nested optionals. */
static int repeat(struct parser *P, uint32_t id, uint32_t from, uint32_t min, uint32_t max)
{
    uint32_t len = P->r[id].e.n - from;
    struct g_elem sym;
    if (len == 1) {
        sym = P->r[id].e.v[from];
    } else {
        /* several elements (a literal): made one rule so that copies are one element */
        int64_t w = new_rule(P, NULL, 0);
        if (w < 0)
            return P->rc;
        for (uint32_t i = 0; i < len; i++)
            if (push(P, (uint32_t)w, P->r[id].e.v[from + i]))
                return P->rc;
        if (push_type(P, (uint32_t)w, G_END, 0))
            return P->rc;
        sym = (struct g_elem){ .type = G_RULE, .rule = (uint32_t)w };
    }
    P->r[id].e.n = from;
    P->n_elems -= len;
    for (uint32_t i = 0; i < min; i++)
        if (push(P, id, sym))
            return P->rc;
    if (max == REPEAT_INF) {
        int64_t rr = new_rule(P, NULL, 0);
        if (rr < 0 || push(P, (uint32_t)rr, sym) || push_type(P, (uint32_t)rr, G_RULE, (uint32_t)rr) ||
            push_type(P, (uint32_t)rr, G_ALT, 0) || push_type(P, (uint32_t)rr, G_END, 0))
            return P->rc;
        return push_type(P, id, G_RULE, (uint32_t)rr);
    }
    int64_t inner = -1;
    for (uint32_t i = min; i < max; i++) {
        int64_t rr = new_rule(P, NULL, 0);
        if (rr < 0 || push(P, (uint32_t)rr, sym) ||
            (inner >= 0 && push_type(P, (uint32_t)rr, G_RULE, (uint32_t)inner)) ||
            push_type(P, (uint32_t)rr, G_ALT, 0) || push_type(P, (uint32_t)rr, G_END, 0))
            return P->rc;
        inner = rr;
    }
    return inner >= 0 ? push_type(P, id, G_RULE, (uint32_t)inner) : 0;
}

static int parse_count(struct parser *P, uint32_t *v)
{
    if (P->p >= P->end || *P->p < '0' || *P->p > '9')
        return FAIL(P, "expected a number");
    uint64_t x = 0;
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
        x = x * 10 + (uint64_t)(*P->p++ - '0');
        if (x > MAX_REPEAT)
            return fail_at(P, (size_t)(P->p - P->s), -E2BIG, "repetition count over %u",
                           MAX_REPEAT);
    }
    *v = (uint32_t)x;
    return 0;
}

/* {m}, {m,}, {m,n}, {,n} at P->p into min, max. */
static int parse_braces(struct parser *P, uint32_t *min, uint32_t *max)
{
    const char *at = P->p++;
    skip_space(P);
    *min = 0;
    if (P->p < P->end && *P->p != ',' && parse_count(P, min))
        return P->rc;
    skip_space(P);
    *max = *min;
    if (P->p < P->end && *P->p == ',') {
        P->p++;
        skip_space(P);
        *max = REPEAT_INF;
        if (P->p < P->end && *P->p != '}' && parse_count(P, max))
            return P->rc;
        skip_space(P);
    }
    if (P->p >= P->end || *P->p != '}') {
        P->p = at;
        return FAIL(P, "unterminated repetition '{'");
    }
    P->p++;
    if (*max < *min) {
        P->p = at;
        return FAIL(P, "repetition {%u,%u}: the maximum is below the minimum", *min, *max);
    }
    return 0;
}

static int parse_sequence(struct parser *P, uint32_t id, bool nested)
{
    uint32_t last = UINT32_MAX;   /* where the last symbol's elements begin */
    for (;;) {
        skip_space(P);
        if (P->p >= P->end)
            return 0;
        char c = *P->p;
        uint32_t here = P->r[id].e.n;
        if (c == '"') {
            const char *start = P->p++;
            while (P->p < P->end && *P->p != '"') {
                int32_t cp = parse_char(P);
                if (cp < 0)
                    return P->rc;
                uint8_t b[4];
                int n = utf8_encode((uint32_t)cp, b);
                for (int i = 0; i < n; i++)
                    if (push_bytes(P, id, b[i], b[i]))
                        return P->rc;
            }
            if (P->p >= P->end) {
                P->p = start;
                return FAIL(P, "unterminated literal");
            }
            P->p++;
            last = here == P->r[id].e.n ? UINT32_MAX : here;   /* "" is no symbol */
        } else if (c == '[' || c == '.') {
            int64_t cr;
            if (c == '.') {
                P->p++;
                struct range all = { 0, 0x10ffff };
                cr = class_rule(P, &all, 1, false);
            } else {
                cr = parse_class(P);
            }
            if (cr < 0 || push_type(P, id, G_RULE, (uint32_t)cr))
                return P->rc;
            last = here;
        } else if (c == '(') {
            const char *start = P->p++;
            int64_t gr = new_rule(P, NULL, 0);
            if (gr < 0 || parse_alternates(P, (uint32_t)gr, true))
                return P->rc;
            if (P->p >= P->end || *P->p != ')') {
                P->p = start;
                return FAIL(P, "unbalanced '('");
            }
            P->p++;
            if (push_type(P, id, G_RULE, (uint32_t)gr))
                return P->rc;
            last = here;
        } else if (is_name_char(c)) {
            if (!nested && at_definition(P, P->p))
                return 0;
            const char *e = name_end(P->p, P->end);
            int64_t rr = named_rule(P, P->p, (uint32_t)(e - P->p));
            if (rr < 0)
                return P->rc;
            if (P->r[rr].ref_off == SIZE_MAX)
                P->r[rr].ref_off = (size_t)(P->p - P->s);
            P->p = e;
            if (push_type(P, id, G_RULE, (uint32_t)rr))
                return P->rc;
            last = here;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == UINT32_MAX)
                return FAIL(P, "'%c' with nothing to repeat", c);
            uint32_t min = c == '+', max = c == '?' ? 1 : REPEAT_INF;
            if (c == '{') {
                if (parse_braces(P, &min, &max))
                    return P->rc;
            } else {
                P->p++;
            }
            if (repeat(P, id, last, min, max))
                return P->rc;
            /* x{0} leaves nothing to repeat again */
            last = P->r[id].e.n > last ? last : UINT32_MAX;
        } else if (c == '|' || c == ')') {
            return 0;
        } else if (c == ':' && P->end - P->p >= 3 && !memcmp(P->p, "::=", 3)) {
            return FAIL(P, "'::=' without a rule name before it");
        } else {
            return FAIL(P, "unexpected '%c'", c);
        }
    }
}

static int parse_alternates(struct parser *P, uint32_t id, bool nested)
{
    for (;;) {
        if (parse_sequence(P, id, nested))
            return P->rc;
        skip_space(P);
        if (P->p < P->end && *P->p == '|') {
            P->p++;
            if (push_type(P, id, G_ALT, 0))
                return P->rc;
            continue;
        }
        return push_type(P, id, G_END, 0);
    }
}

/* ---- checks over the whole grammar ---------------------------------------- */

static bool alt_productive(const struct prule *r, uint32_t a, uint32_t b, const bool *prod)
{
    for (uint32_t i = a; i < b; i++)
        if (r->e.v[i].type == G_RULE && !prod[r->e.v[i].rule])
            return false;
    return true;
}

/* Marks the rules that match something; drops the alternatives that cannot. */
static void prune(struct parser *P, bool *prod)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < P->n_r; i++) {
            const struct prule *r = &P->r[i];
            if (prod[i] || !r->e.n)
                continue;
            for (uint32_t a = 0; a < r->e.n;) {
                uint32_t b = a;
                while (b < r->e.n && r->e.v[b].type != G_ALT && r->e.v[b].type != G_END)
                    b++;
                if (alt_productive(r, a, b, prod)) {
                    prod[i] = changed = true;
                    break;
                }
                a = b + 1;
            }
        }
    }
    for (uint32_t i = 0; i < P->n_r; i++) {
        struct prule *r = &P->r[i];
        uint32_t w = 0;
        bool kept = false;
        for (uint32_t a = 0; a < r->e.n;) {
            uint32_t b = a;
            while (b < r->e.n && r->e.v[b].type != G_ALT && r->e.v[b].type != G_END)
                b++;
            if (alt_productive(r, a, b, prod)) {
                if (kept)
                    r->e.v[w++] = (struct g_elem){ .type = G_ALT };
                kept = true;
                memmove(&r->e.v[w], &r->e.v[a], (b - a) * sizeof *r->e.v);
                w += b - a;
            }
            a = b + 1;
        }
        r->e.n = w;
        if (prod[i])
            r->e.v[r->e.n++] = (struct g_elem){ .type = G_END };   /* room: one G_END was there */
    }
}

static void find_nullable(const struct parser *P, bool *null)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < P->n_r; i++) {
            const struct prule *r = &P->r[i];
            if (null[i] || !r->e.n)
                continue;
            for (uint32_t a = 0; a < r->e.n; a++) {
                bool all = true;
                for (; r->e.v[a].type != G_ALT && r->e.v[a].type != G_END; a++)
                    all = all && r->e.v[a].type == G_RULE && null[r->e.v[a].rule];
                if (all) {
                    null[i] = changed = true;
                    break;
                }
                if (r->e.v[a].type == G_END)
                    break;
            }
        }
    }
}

/* Depth-first over "rule i can begin with rule j" edges: a cycle is left
 * recursion. state: 0 unseen, 1 on the path, 2 done. Returns a rule on a
 * cycle, or UINT32_MAX. */
static uint32_t left_cycle(const struct parser *P, const bool *null, uint8_t *state,
                           uint32_t *stack, uint32_t root)
{
    /* iterative: stack holds (rule, next element to look at) pairs */
    uint32_t sp = 0;
    stack[sp++] = root;
    stack[sp++] = 0;
    state[root] = 1;
    while (sp) {
        uint32_t i = stack[sp - 2], k = stack[sp - 1];
        const struct prule *r = &P->r[i];
        bool pushed = false;
        while (k < r->e.n && !pushed) {
            /* element k begins an alternative, or follows nullable ones */
            bool first = true;
            for (uint32_t j = k; j-- > 0;) {
                uint8_t t = r->e.v[j].type;
                if (t == G_ALT)
                    break;
                if (t == G_BYTES || !null[r->e.v[j].rule]) {
                    first = false;
                    break;
                }
            }
            const struct g_elem *e = &r->e.v[k++];
            if (!first || e->type != G_RULE)
                continue;
            if (state[e->rule] == 1)
                return e->rule;
            if (state[e->rule] == 0) {
                stack[sp - 1] = k;
                state[e->rule] = 1;
                stack[sp++] = e->rule;
                stack[sp++] = 0;
                pushed = true;
            }
        }
        if (!pushed) {
            state[i] = 2;
            sp -= 2;
        }
    }
    return UINT32_MAX;
}

static int check(struct parser *P, uint32_t root)
{
    for (uint32_t i = 0; i < P->n_r; i++) {
        const struct prule *r = &P->r[i];
        if (r->name && !r->defined)
            return fail_at(P, r->ref_off, -EINVAL, "rule '%.*s' is not defined",
                           (int)r->name_len, r->name);
    }
    bool *prod = calloc(P->n_r, sizeof *prod), *null = calloc(P->n_r, sizeof *null);
    uint8_t *state = calloc(P->n_r, 1);
    uint32_t *stack = malloc(2 * (size_t)P->n_r * sizeof *stack);
    if (!prod || !null || !state || !stack) {
        P->rc = -ENOMEM;
        goto out;
    }
    prune(P, prod);
    if (!prod[root]) {
        fail_at(P, P->r[root].def_off, -EINVAL, "the grammar matches nothing (rule 'root' "
                "cannot end)");
        goto out;
    }
    find_nullable(P, null);
    for (uint32_t i = 0; i < P->n_r && !P->rc; i++) {
        if (state[i])
            continue;
        uint32_t c = left_cycle(P, null, state, stack, i);
        if (c != UINT32_MAX) {
            const struct prule *o = &P->r[P->r[c].owner];
            fail_at(P, o->def_off, -EINVAL,
                    P->r[c].name ? "left recursion: rule '%.*s' can begin with itself"
                                 : "left recursion in rule '%.*s': a repetition of something "
                                   "that can be empty, or a rule that can begin with itself",
                    (int)o->name_len, o->name);
        }
    }
out:
    free(prod);
    free(null);
    free(state);
    free(stack);
    return P->rc;
}

/* ---- the whole ------------------------------------------------------------ */

static int flatten(struct parser *P, uint32_t root, struct l8g_grammar **out)
{
    struct l8g_grammar *g = calloc(1, sizeof *g);
    size_t n = 0;
    for (uint32_t i = 0; i < P->n_r; i++)
        n += P->r[i].e.n ? P->r[i].e.n : 1;
    if (!g || !(g->e = malloc(n * sizeof *g->e)) ||
        !(g->rule_start = malloc(P->n_r * sizeof *g->rule_start))) {
        l8g_grammar_free(g);
        return -ENOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < P->n_r; i++) {
        g->rule_start[i] = k;
        if (!P->r[i].e.n) {     /* unproductive: never referenced after prune */
            g->e[k++] = (struct g_elem){ .type = G_END };
            continue;
        }
        memcpy(&g->e[k], P->r[i].e.v, P->r[i].e.n * sizeof *g->e);
        k += P->r[i].e.n;
    }
    g->n_e = k;
    g->n_rules = P->n_r;
    g->root = root;
    *out = g;
    return 0;
}

int l8g_grammar_parse(const char *text, size_t len, struct l8g_grammar **out,
                      char err[L8G_ERRLEN])
{
    err[0] = 0;
    if (len > MAX_TEXT) {
        snprintf(err, L8G_ERRLEN, "the grammar is %zu bytes, over the %u-byte limit", len,
                 MAX_TEXT);
        return -E2BIG;
    }
    struct parser P = { .s = text, .p = text, .end = text + len, .err = err };
    for (;;) {
        skip_space(&P);
        if (P.p >= P.end)
            break;
        const char *name = P.p, *e = name_end(P.p, P.end);
        if (e == name || !at_definition(&P, name)) {
            FAIL(&P, "expected a rule: 'name ::= ...'");
            break;
        }
        int64_t id = named_rule(&P, name, (uint32_t)(e - name));
        if (id < 0)
            break;
        if (P.r[id].defined) {
            FAIL(&P, "rule '%.*s' is defined twice", (int)(e - name), name);
            break;
        }
        P.r[id].defined = true;
        P.r[id].def_off = (size_t)(name - text);
        P.cur = (uint32_t)id;
        P.p = e;
        skip_space(&P);
        P.p += 3;   /* ::= */
        if (parse_alternates(&P, (uint32_t)id, false))
            break;
        if (P.p < P.end && *P.p == ')') {
            FAIL(&P, "unbalanced ')'");
            break;
        }
    }
    int rc = P.rc;
    int64_t root = -1;
    if (!rc) {
        for (uint32_t i = 0; i < P.n_r; i++)
            if (P.r[i].name && P.r[i].name_len == 4 && !memcmp(P.r[i].name, "root", 4))
                root = i;
        if (root < 0 || !P.r[root].defined)
            rc = fail_at(&P, len, -EINVAL, "no rule 'root'");
    }
    if (!rc)
        rc = check(&P, (uint32_t)root);
    if (!rc)
        rc = flatten(&P, (uint32_t)root, out);
    if (rc == -ENOMEM && !err[0])
        snprintf(err, L8G_ERRLEN, "out of memory");
    for (uint32_t i = 0; i < P.n_r; i++)
        free(P.r[i].e.v);
    free(P.r);
    free(P.hash);
    return rc;
}

void l8g_grammar_free(struct l8g_grammar *g)
{
    if (!g)
        return;
    free(g->e);
    free(g->rule_start);
    free(g);
}

/* ---- the reference matcher ------------------------------------------------- */

/* A set of stacks of positions, each top a G_BYTES position (or empty: the
 * string so far is complete). Plain arrays, sorted and deduplicated: slow
 * and obviously right, the yardstick for matcher.c. */
struct stack {
    uint32_t *p;
    uint32_t n;
};

struct stackset {
    struct stack *s;
    size_t n, cap;
    bool oom;
};

static void set_add(struct stackset *S, const uint32_t *p, uint32_t n)
{
    for (size_t i = 0; i < S->n; i++)
        if (S->s[i].n == n && !memcmp(S->s[i].p, p, n * sizeof *p))
            return;
    if (S->n == S->cap) {
        size_t cap = S->cap ? 2 * S->cap : 16;
        void *ns = realloc(S->s, cap * sizeof *S->s);
        if (!ns) {
            S->oom = true;
            return;
        }
        S->s = ns;
        S->cap = cap;
    }
    uint32_t *c = malloc((n + 1) * sizeof *c);
    if (!c) {
        S->oom = true;
        return;
    }
    memcpy(c, p, n * sizeof *p);
    S->s[S->n++] = (struct stack){ c, n };
}

static void set_free(struct stackset *S)
{
    for (size_t i = 0; i < S->n; i++)
        free(S->s[i].p);
    free(S->s);
    memset(S, 0, sizeof *S);
}

/* Adds to S every stack reached from stack p[0..n) (top last) without
 * reading a byte. buf has room beyond n for the pushes. */
static void expand(const struct l8g_grammar *g, struct stackset *S, uint32_t *p, uint32_t n,
                   uint32_t cap)
{
    if (!n) {
        set_add(S, p, 0);
        return;
    }
    uint32_t top = p[n - 1];
    const struct g_elem *e = &g->e[top];
    if (e->type == G_END || e->type == G_ALT) {
        expand(g, S, p, n - 1, cap);
        return;
    }
    if (e->type == G_BYTES) {
        set_add(S, p, n);
        return;
    }
    if (n + 1 > cap) {
        S->oom = true;
        return;
    }
    /* After the rule, the caller goes on, unless the rule ends its
     * alternative: then it returns straight to the caller's caller (no
     * frame, so that x* over a long string stays flat, as in matcher.c). */
    const uint32_t saved = p[n - 1], m = g_alt_end(g, top + 1) ? n - 1 : n;
    p[n - 1] = top + 1;
    for (uint32_t a = g->rule_start[e->rule];;) {
        p[m] = a;
        expand(g, S, p, m + 1, cap);
        while (!g_alt_end(g, a))
            a++;
        if (g->e[a].type == G_END)
            break;
        a++;
    }
    p[n - 1] = saved;
}

bool l8g_grammar_accepts(const struct l8g_grammar *g, const uint8_t *s, size_t n, bool prefix)
{
    const uint32_t cap = 4096;     /* stack depth: nesting far beyond any test */
    uint32_t *buf = malloc(cap * sizeof *buf);
    struct stackset cur = { 0 }, next = { 0 };
    bool ok = false;
    if (!buf)
        return false;
    for (uint32_t a = g->rule_start[g->root];;) {   /* each alternative of root */
        buf[0] = a;
        expand(g, &cur, buf, 1, cap);
        while (!g_alt_end(g, a))
            a++;
        if (g->e[a].type == G_END)
            break;
        a++;
    }
    for (size_t i = 0; i < n && cur.n && !cur.oom; i++) {
        for (size_t k = 0; k < cur.n; k++) {
            struct stack *st = &cur.s[k];
            if (!st->n)
                continue;
            const struct g_elem *e = &g->e[st->p[st->n - 1]];
            if (s[i] < e->lo || s[i] > e->hi || st->n > cap)
                continue;
            memcpy(buf, st->p, st->n * sizeof *buf);
            buf[st->n - 1]++;
            expand(g, &next, buf, st->n, cap);
        }
        set_free(&cur);
        cur = next;
        memset(&next, 0, sizeof next);
    }
    if (!cur.oom) {
        if (prefix)
            ok = cur.n > 0;
        else
            for (size_t k = 0; k < cur.n; k++)
                ok = ok || cur.s[k].n == 0;
    }
    set_free(&cur);
    set_free(&next);
    free(buf);
    return ok;
}
