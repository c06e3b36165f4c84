/* regex.c - a regular expression as GBNF text (grammar.h).
 *
 * The pattern is parsed into a small tree of character sets, sequences,
 * alternatives and repetitions, simplified as it is built, and printed as
 * one GBNF rule. The simplifications that matter:
 *   - no repeated item matches the empty string: (a?)* is printed as "a"*
 *     and (a|)+ as "a"*, so an engine never has to loop on an item that
 *     consumes nothing (llama.cpp's parser calls that left recursion);
 *   - single characters in an alternative become one class ((a|b|c) is
 *     [abc]), an empty alternative makes the rest optional;
 *   - a part that can match nothing ([^\s\S]) drops out of an alternative
 *     and empties a sequence.
 * Syntax and meanings are PCRE2's (10.42) with PCRE2_UTF and without
 * PCRE2_UCP: \d \w \s and the POSIX classes are ASCII, \h \v are Unicode's
 * horizontal and vertical spaces, . is any code point but \n. Beyond PCRE2:
 * \uHHHH and \u{H...} (JSON Schema patterns are ECMAScript's). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define RE_MAX_COUNT 10000           /* {m,n} bounds: the GBNF engine's limit */
#define RE_MAX_DEPTH 200             /* nested groups (the parser recurses) */
#define RE_MAX_NODES (1u << 20)      /* tree nodes, after simplification */
#define RE_MAX_OUT (1u << 20)        /* GBNF text: the engine's limit */
#define CP_MAX 0x10FFFFu
#define INF (-1)                     /* no upper bound in a repetition */

enum kind {
    K_NOTHING,   /* matches no string */
    K_EMPTY,     /* matches the empty string only */
    K_SET,       /* one code point of a set */
    K_CAT,       /* kids in sequence (>= 2, none EMPTY, CAT or NOTHING) */
    K_ALT,       /* any of the kids (>= 2, at most one SET, none ALT, EMPTY, NOTHING) */
    K_REP,       /* kid[0] (never nullable) min..max times */
};

struct range { uint32_t lo, hi; };

/* A set of code points: sorted, disjoint, not adjacent ranges. */
struct rset {
    struct range *r;
    size_t n, cap;
};

struct node {
    enum kind kind;
    int min, max;          /* K_REP: the counts, max INF for no bound */
    struct rset set;       /* K_SET */
    size_t n;              /* K_CAT, K_ALT: kids; K_REP: 1 */
    struct node **kid;
};

struct re {
    const uint8_t *s;      /* the pattern, len bytes, valid UTF-8 */
    size_t len, pos;       /* pos: the byte being parsed */
    int depth;             /* groups open */
    bool search;           /* unanchored: a branch without ^ or $ has .* there */
    struct node **all;     /* every node made (n_all), freed at the end */
    size_t n_all, cap_all;
    struct node nothing, empty;
    int rc;                /* the first error (0: none), its message in err */
    char *err;
};

/* ---- errors ---------------------------------------------------------------- */

/* Records the first error: "column C: what", C the 1-based byte of off. */
__attribute__((format(printf, 3, 4)))
static void *fail(struct re *re, size_t off, const char *fmt, ...)
{
    if (re->rc)
        return NULL;
    re->rc = -EINVAL;
    int k = snprintf(re->err, L8G_ERRLEN, "column %zu: ", off + 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(re->err + k, L8G_ERRLEN - (size_t)k, fmt, ap);
    va_end(ap);
    return NULL;
}

static void *fail_rc(struct re *re, int rc, const char *what)
{
    if (!re->rc) {
        re->rc = rc;
        snprintf(re->err, L8G_ERRLEN, "%s", what);
    }
    return NULL;
}

static void *oom(struct re *re) { return fail_rc(re, -ENOMEM, "out of memory"); }

/* ---- sets ------------------------------------------------------------------ */

static bool set_push(struct rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct range *r = realloc(s->r, cap * sizeof *r);
        if (!r)
            return false;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (struct range){ lo, hi };
    return true;
}

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges overlapping or adjacent ranges. */
static void set_norm(struct rset *s)
{
    if (s->n < 2)
        return;
    qsort(s->r, s->n, sizeof *s->r, range_cmp);
    size_t k = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi)
                s->r[k].hi = s->r[i].hi;
        } else {
            s->r[++k] = s->r[i];
        }
    }
    s->n = k + 1;
}

/* The complement in 0..CP_MAX of a normalised set, into out (empty). */
static bool set_complement(const struct rset *s, struct rset *out)
{
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && !set_push(out, next, s->r[i].lo - 1))
            return false;
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX && !set_push(out, next, CP_MAX))
        return false;
    return true;
}

static bool set_add_all(struct rset *d, const struct rset *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (!set_push(d, s->r[i].lo, s->r[i].hi))
            return false;
    return true;
}

static bool set_intersects(const struct rset *a, const struct rset *b)
{
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        if (a->r[i].hi < b->r[j].lo)
            i++;
        else if (b->r[j].hi < a->r[i].lo)
            j++;
        else
            return true;
    }
    return false;
}

/* Adds the ranges of a constant table (pairs lo, hi). */
static bool set_add_table(struct rset *s, const uint32_t *t, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        if (!set_push(s, t[i], t[i + 1]))
            return false;
    return true;
}

/* The escapes that stand for sets, PCRE2 without UCP. */
static const uint32_t T_DIGIT[] = { '0', '9' };
static const uint32_t T_WORD[] = { '0', '9', 'A', 'Z', '_', '_', 'a', 'z' };
static const uint32_t T_SPACE[] = { '\t', '\r', ' ', ' ' };   /* \t \n \v \f \r and space */
static const uint32_t T_HSPACE[] = { '\t', '\t', ' ', ' ', 0xA0, 0xA0, 0x1680, 0x1680,
                                     0x180E, 0x180E, 0x2000, 0x200A, 0x202F, 0x202F,
                                     0x205F, 0x205F, 0x3000, 0x3000 };
static const uint32_t T_VSPACE[] = { '\n', '\r', 0x85, 0x85, 0x2028, 0x2029 };

struct posix { const char *name; uint32_t t[8]; size_t n; };
static const struct posix POSIX[] = {
    { "alpha", { 'A', 'Z', 'a', 'z' }, 4 },
    { "digit", { '0', '9' }, 2 },
    { "alnum", { '0', '9', 'A', 'Z', 'a', 'z' }, 6 },
    { "upper", { 'A', 'Z' }, 2 },
    { "lower", { 'a', 'z' }, 2 },
    { "space", { '\t', '\r', ' ', ' ' }, 4 },
    { "blank", { '\t', '\t', ' ', ' ' }, 4 },
    { "punct", { '!', '/', ':', '@', '[', '`', '{', '~' }, 8 },
    { "xdigit", { '0', '9', 'A', 'F', 'a', 'f' }, 6 },
    { "word", { '0', '9', 'A', 'Z', '_', '_', 'a', 'z' }, 8 },
    { "cntrl", { 0, 0x1F, 0x7F, 0x7F }, 4 },
    { "graph", { '!', '~' }, 2 },
    { "print", { ' ', '~' }, 2 },
    { "ascii", { 0, 0x7F }, 2 },
};

/* ---- nodes ----------------------------------------------------------------- */

static struct node *mk(struct re *re, enum kind kind)
{
    if (re->n_all >= RE_MAX_NODES)
        return fail_rc(re, -E2BIG, "the pattern expands past 1048576 nodes");
    if (re->n_all == re->cap_all) {
        size_t cap = re->cap_all ? 2 * re->cap_all : 64;
        struct node **a = realloc(re->all, cap * sizeof *a);
        if (!a)
            return oom(re);
        re->all = a;
        re->cap_all = cap;
    }
    struct node *x = calloc(1, sizeof *x);
    if (!x)
        return oom(re);
    x->kind = kind;
    re->all[re->n_all++] = x;
    return x;
}

static bool nullable(const struct node *x)
{
    switch (x->kind) {
    case K_EMPTY: return true;
    case K_NOTHING: case K_SET: return false;
    case K_REP: return x->min == 0;   /* the kid never is */
    case K_CAT:
        for (size_t i = 0; i < x->n; i++)
            if (!nullable(x->kid[i]))
                return false;
        return true;
    case K_ALT:
        for (size_t i = 0; i < x->n; i++)
            if (nullable(x->kid[i]))
                return true;
        return false;
    }
    return false;
}

/* A set node taking s's ranges (s is left empty); NOTHING for no ranges. */
static struct node *mk_set(struct re *re, struct rset *s)
{
    set_norm(s);
    if (!s->n) {
        free(s->r);
        *s = (struct rset){ 0 };
        return &re->nothing;
    }
    struct node *x = mk(re, K_SET);
    if (!x) {
        free(s->r);
        *s = (struct rset){ 0 };
        return NULL;
    }
    x->set = *s;
    *s = (struct rset){ 0 };
    return x;
}

static struct node *mk_char(struct re *re, uint32_t c)
{
    struct rset s = { 0 };
    if (!set_push(&s, c, c))
        return oom(re);
    return mk_set(re, &s);
}

/* The sequence of n items (flattened, EMPTY dropped, NOTHING absorbing). */
static struct node *mk_cat(struct re *re, struct node *const *items, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i]->kind == K_NOTHING)
            return &re->nothing;
        total += items[i]->kind == K_CAT ? items[i]->n : items[i]->kind != K_EMPTY;
    }
    if (total == 0)
        return &re->empty;
    if (total == 1)
        for (size_t i = 0; i < n; i++)
            if (items[i]->kind != K_EMPTY)
                return items[i];
    struct node *x = mk(re, K_CAT);
    if (!x)
        return NULL;
    if (!(x->kid = malloc(total * sizeof *x->kid)))
        return oom(re);
    for (size_t i = 0; i < n; i++) {
        if (items[i]->kind == K_CAT) {
            memcpy(x->kid + x->n, items[i]->kid, items[i]->n * sizeof *x->kid);
            x->n += items[i]->n;
        } else if (items[i]->kind != K_EMPTY) {
            x->kid[x->n++] = items[i];
        }
    }
    return x;
}

static struct node *mk_rep(struct re *re, struct node *x, int min, int max);

/* Any of n items: flattened, NOTHING dropped, the sets merged into one, an
 * EMPTY making the rest optional. */
static struct node *mk_alt(struct re *re, struct node *const *items, size_t n)
{
    size_t total = 0;
    bool empty = false;
    for (size_t i = 0; i < n; i++)
        total += items[i]->kind == K_ALT ? items[i]->n : 1;
    struct node **k = malloc((total ? total : 1) * sizeof *k);
    if (!k)
        return oom(re);
    size_t m = 0, set_at = SIZE_MAX;
    struct rset u = { 0 };
    for (size_t i = 0; i < n; i++) {
        struct node *const *src = items[i]->kind == K_ALT ? items[i]->kid : &items[i];
        size_t ns = items[i]->kind == K_ALT ? items[i]->n : 1;
        for (size_t j = 0; j < ns; j++) {
            struct node *y = src[j];
            if (y->kind == K_NOTHING)
                continue;
            if (y->kind == K_EMPTY) {
                empty = true;
                continue;
            }
            if (y->kind == K_SET) {
                if (!set_add_all(&u, &y->set)) {
                    free(u.r);
                    free(k);
                    return oom(re);
                }
                if (set_at != SIZE_MAX)
                    continue;
                set_at = m;
            }
            k[m++] = y;
        }
    }
    struct node *x = NULL;
    if (set_at != SIZE_MAX && !(k[set_at] = mk_set(re, &u)))
        goto out;
    if (m == 0)
        x = empty ? &re->empty : &re->nothing;
    else if (m == 1)
        x = k[0];
    else if ((x = mk(re, K_ALT))) {
        x->kid = k;
        x->n = m;
        k = NULL;
    }
    if (x && empty && !nullable(x))
        x = mk_rep(re, x, 0, 1);
out:
    free(u.r);
    free(k);
    return x;
}

/* x less the empty string, for a nullable x. */
static struct node *nonnull(struct re *re, struct node *x)
{
    if (!nullable(x))
        return x;
    switch (x->kind) {
    case K_EMPTY:
        return &re->nothing;
    case K_REP:
        return mk_rep(re, x->kid[0], 1, x->max);
    case K_ALT: {
        struct node **k = malloc(x->n * sizeof *k);
        if (!k)
            return oom(re);
        struct node *r = NULL;
        for (size_t i = 0; i < x->n; i++)
            if (!(k[i] = nonnull(re, x->kid[i])))
                goto alt_out;
        r = mk_alt(re, k, x->n);
    alt_out:
        free(k);
        return r;
    }
    case K_CAT: {
        /* every kid nullable: (k0 k1 .. kn) - e = k0' k1 .. kn | k1' k2 .. kn | .. | kn' */
        struct node **alts = malloc(x->n * sizeof *alts);
        if (!alts)
            return oom(re);
        struct node *r = NULL;
        for (size_t i = 0; i < x->n; i++) {
            struct node *first = nonnull(re, x->kid[i]), *rest;
            if (!first)
                goto cat_out;
            rest = mk_cat(re, x->kid + i + 1, x->n - i - 1);
            if (!rest)
                goto cat_out;
            struct node *pair[2] = { first, rest };
            if (!(alts[i] = mk_cat(re, pair, 2)))
                goto cat_out;
        }
        r = mk_alt(re, alts, x->n);
    cat_out:
        free(alts);
        return r;
    }
    default:
        return x;
    }
}

/* x{min,max}, max INF for no bound, min <= max. */
static struct node *mk_rep(struct re *re, struct node *x, int min, int max)
{
    if (max == 0 || x->kind == K_EMPTY)
        return &re->empty;
    if (x->kind == K_NOTHING)
        return min == 0 ? &re->empty : &re->nothing;
    if (nullable(x)) {
        /* x{m,n} = x{0,n} = (x - e){0,n} */
        if (!(x = nonnull(re, x)))
            return NULL;
        if (x->kind == K_NOTHING)
            return &re->empty;
        min = 0;
    }
    if (min == 1 && max == 1)
        return x;
    if (x->kind == K_REP && x->min == 1 && x->max == INF && max == INF)
        return mk_rep(re, x->kid[0], min, INF);   /* (y+)* is y*, (y+){2,} is y{2,} */
    struct node *r = mk(re, K_REP);
    if (!r)
        return NULL;
    if (!(r->kid = malloc(sizeof *r->kid)))
        return oom(re);
    r->kid[0] = x;
    r->n = 1;
    r->min = min;
    r->max = max;
    return r;
}

/* The code points a string of x can start with, added to s. */
static bool first_set(const struct node *x, struct rset *s)
{
    switch (x->kind) {
    case K_SET: return set_add_all(s, &x->set);
    case K_REP: return first_set(x->kid[0], s);
    case K_ALT:
        for (size_t i = 0; i < x->n; i++)
            if (!first_set(x->kid[i], s))
                return false;
        return true;
    case K_CAT:
        for (size_t i = 0; i < x->n; i++) {
            if (!first_set(x->kid[i], s))
                return false;
            if (!nullable(x->kid[i]))
                break;
        }
        return true;
    default: return true;
    }
}

/* ---- the parser ------------------------------------------------------------ */

/* The code point at re->pos (the pattern is valid UTF-8), advancing. */
static uint32_t next_cp(struct re *re)
{
    const uint8_t *p = re->s + re->pos;
    uint32_t c = p[0];
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n > 1) {
        c &= 0x3F >> (n - 1);
        for (size_t i = 1; i < n; i++)
            c = c << 6 | (p[i] & 0x3F);
    }
    re->pos += n;
    return c;
}

static int peek(const struct re *re) { return re->pos < re->len ? re->s[re->pos] : -1; }
static int peek_at(const struct re *re, size_t k)
{
    return re->pos + k < re->len ? re->s[re->pos + k] : -1;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static int hex_val(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A quantifier at re->pos: * + ? {m} {m,} {m,n}. Without advancing unless
 * take. A { that does not open one of those is a literal (PCRE2 10.42). */
static bool quantifier(struct re *re, bool take, int *min, int *max)
{
    int c = peek(re);
    size_t off = re->pos;
    if (c == '*' || c == '+' || c == '?') {
        if (take) {
            *min = c == '+';
            *max = c == '?' ? 1 : INF;
            re->pos++;
        }
        return true;
    }
    if (c != '{')
        return false;
    size_t p = off + 1;
    long a = 0, b = -1;
    size_t d0 = p;
    while (p < re->len && is_digit(re->s[p]))
        a = a > 1000000 ? a : a * 10 + (re->s[p++] - '0');
    if (p == d0)
        return false;
    if (p < re->len && re->s[p] == ',') {
        size_t d1 = ++p;
        b = 0;
        while (p < re->len && is_digit(re->s[p]))
            b = b > 1000000 ? b : b * 10 + (re->s[p++] - '0');
        if (p == d1)
            b = INF;
    } else {
        b = a;
    }
    if (p >= re->len || re->s[p] != '}')
        return false;
    if (!take)
        return true;
    if (a > RE_MAX_COUNT || b > RE_MAX_COUNT) {
        fail(re, off, "repetition count over %d", RE_MAX_COUNT);
        return false;
    }
    if (b != INF && a > b) {
        fail(re, off, "repetition {%ld,%ld}: the minimum is over the maximum", a, b);
        return false;
    }
    *min = (int)a;
    *max = (int)b;
    re->pos = p + 1;
    return true;
}

enum esc { E_ERR, E_CHAR, E_SET };

static bool check_cp(struct re *re, size_t off, uint32_t c)
{
    if (c > CP_MAX) {
        fail(re, off, "code point over U+10FFFF");
        return false;
    }
    if (c >= 0xD800 && c <= 0xDFFF) {
        fail(re, off, "surrogate code point U+%04X", (unsigned)c);
        return false;
    }
    return true;
}

/* The escape at re->pos (a backslash): a character into *c, or a set added
 * to *s. in_class: inside [ ], where \b is a backspace. */
static enum esc escape(struct re *re, bool in_class, uint32_t *c, struct rset *s)
{
    size_t off = re->pos++;
    if (re->pos >= re->len) {
        fail(re, off, "the pattern ends in \\");
        return E_ERR;
    }
    int e = re->s[re->pos];
    if (e >= 0x80) {             /* an escaped non-ASCII character is itself */
        *c = next_cp(re);
        return E_CHAR;
    }
    re->pos++;
    const uint32_t *t = NULL;
    size_t tn = 0;
    bool neg = false;
    switch (e) {
    case 'd': case 'D': t = T_DIGIT; tn = 2; neg = e == 'D'; break;
    case 'w': case 'W': t = T_WORD; tn = 8; neg = e == 'W'; break;
    case 's': case 'S': t = T_SPACE; tn = 4; neg = e == 'S'; break;
    case 'h': case 'H': t = T_HSPACE; tn = sizeof T_HSPACE / sizeof *T_HSPACE; neg = e == 'H'; break;
    case 'v': case 'V': t = T_VSPACE; tn = sizeof T_VSPACE / sizeof *T_VSPACE; neg = e == 'V'; break;
    case 'n': *c = '\n'; return E_CHAR;
    case 'r': *c = '\r'; return E_CHAR;
    case 't': *c = '\t'; return E_CHAR;
    case 'f': *c = '\f'; return E_CHAR;
    case 'a': *c = 0x07; return E_CHAR;
    case 'e': *c = 0x1B; return E_CHAR;
    case '0': {                  /* \0 and up to two more octal digits */
        uint32_t v = 0;
        for (int i = 0; i < 2 && peek(re) >= '0' && peek(re) <= '7'; i++)
            v = v * 8 + (uint32_t)(re->s[re->pos++] - '0');
        *c = v;
        return E_CHAR;
    }
    case 'x': case 'u': {
        uint32_t v = 0;
        if (peek(re) == '{') {   /* \x{H...} \u{H...} */
            size_t p = re->pos + 1, d0 = p;
            for (; p < re->len && hex_val(re->s[p]) >= 0; p++)
                v = v > CP_MAX ? v : v * 16 + (uint32_t)hex_val(re->s[p]);
            if (p == d0 || p >= re->len || re->s[p] != '}') {
                fail(re, off, "\\%c{ needs hex digits and }", e);
                return E_ERR;
            }
            re->pos = p + 1;
        } else if (e == 'x') {   /* \x and up to two hex digits, as PCRE2 */
            for (int i = 0; i < 2 && hex_val(peek(re)) >= 0; i++)
                v = v * 16 + (uint32_t)hex_val(re->s[re->pos++]);
        } else {                 /* \uHHHH */
            for (int i = 0; i < 4; i++) {
                if (hex_val(peek(re)) < 0) {
                    fail(re, off, "\\u needs four hex digits");
                    return E_ERR;
                }
                v = v * 16 + (uint32_t)hex_val(re->s[re->pos++]);
            }
        }
        if (!check_cp(re, off, v))
            return E_ERR;
        *c = v;
        return E_CHAR;
    }
    case 'c': {                  /* \cX: control X */
        int x = peek(re);
        if (x < 0x20 || x > 0x7E) {
            fail(re, off, "\\c needs a printable ASCII character");
            return E_ERR;
        }
        re->pos++;
        if (x >= 'a' && x <= 'z')
            x -= 32;
        *c = (uint32_t)x ^ 0x40;
        return E_CHAR;
    }
    case 'b':
        if (in_class) {
            *c = 0x08;
            return E_CHAR;
        }
        fail(re, off, "word boundary \\b not supported");
        return E_ERR;
    case 'B':
        fail(re, off, "word boundary \\B not supported");
        return E_ERR;
    case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        fail(re, off, "backreference \\%c not supported", e);
        return E_ERR;
    case 'g': case 'k':
        fail(re, off, "backreference \\%c not supported", e);
        return E_ERR;
    case 'A': case 'z': case 'Z': case 'G':
        fail(re, off, "anchor \\%c not supported (^ and $ are, at the ends)", e);
        return E_ERR;
    case 'p': case 'P': case 'X':
        fail(re, off, "Unicode properties \\%c not supported", e);
        return E_ERR;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            fail(re, off, "escape \\%c not supported", e);
            return E_ERR;
        }
        *c = (uint32_t)e;        /* an escaped metacharacter or punctuation */
        return E_CHAR;
    }
    if (neg) {
        struct rset a = { 0 };
        if (!set_add_table(&a, t, tn) || (set_norm(&a), !set_complement(&a, s))) {
            free(a.r);
            oom(re);
            return E_ERR;
        }
        free(a.r);
    } else if (!set_add_table(s, t, tn)) {
        oom(re);
        return E_ERR;
    }
    return E_SET;
}

/* [:name:] or [:^name:] at re->pos (the [), inside a class: added to *s.
 * Returns 0 when there is none there (the [ is a literal), 1, or -1. */
static int posix_class(struct re *re, struct rset *s)
{
    size_t p = re->pos + 1, off = re->pos;
    if (p >= re->len || re->s[p] != ':')
        return 0;
    p++;
    bool neg = p < re->len && re->s[p] == '^';
    p += neg;
    size_t n0 = p;
    while (p < re->len && re->s[p] >= 'a' && re->s[p] <= 'z')
        p++;
    if (p + 1 >= re->len || re->s[p] != ':' || re->s[p + 1] != ']')
        return 0;
    size_t nl = p - n0;
    for (size_t i = 0; i < sizeof POSIX / sizeof *POSIX; i++) {
        if (strlen(POSIX[i].name) != nl || memcmp(POSIX[i].name, re->s + n0, nl))
            continue;
        struct rset a = { 0 };
        bool ok = set_add_table(&a, POSIX[i].t, POSIX[i].n);
        if (ok && neg) {
            set_norm(&a);
            ok = set_complement(&a, s);
        } else if (ok) {
            ok = set_add_all(s, &a);
        }
        free(a.r);
        if (!ok) {
            oom(re);
            return -1;
        }
        re->pos = p + 2;
        return 1;
    }
    fail(re, off, "unknown POSIX class [:%.*s:]", (int)nl, (const char *)re->s + n0);
    return -1;
}

/* One member of a class at re->pos: a character (E_CHAR, *c) or a set added
 * to *s (E_SET). */
static enum esc class_item(struct re *re, uint32_t *c, struct rset *s)
{
    int k = peek(re);
    if (k == '[') {
        int r = posix_class(re, s);
        if (r)
            return r > 0 ? E_SET : E_ERR;
    }
    if (k == '\\')
        return escape(re, true, c, s);
    *c = next_cp(re);
    return E_CHAR;
}

/* A class [...] at re->pos. */
static struct node *parse_class(struct re *re)
{
    size_t off = re->pos++;
    bool neg = false, first = true;
    struct rset s = { 0 };
    if (peek(re) == '^') {
        neg = true;
        re->pos++;
    }
    for (;;) {
        if (re->pos >= re->len) {
            free(s.r);
            return fail(re, off, "unterminated class (a ] right after [ or [^ is a literal, "
                                 "so [] is not an empty class)");
        }
        if (peek(re) == ']' && !first) {
            re->pos++;
            break;
        }
        first = false;
        size_t item = re->pos;
        uint32_t lo, hi;
        enum esc e = class_item(re, &lo, &s);
        if (e == E_ERR)
            goto err;
        bool range = peek(re) == '-' && peek_at(re, 1) != ']' && peek_at(re, 1) != -1;
        if (e == E_SET) {
            if (range) {
                fail(re, re->pos, "invalid range in a class: a set cannot be its end");
                goto err;
            }
            continue;
        }
        if (range) {
            re->pos++;
            size_t hoff = re->pos;
            e = class_item(re, &hi, &s);
            if (e == E_ERR)
                goto err;
            if (e == E_SET) {
                fail(re, hoff, "invalid range in a class: a set cannot be its end");
                goto err;
            }
            if (hi < lo) {
                fail(re, item, "range out of order in a class");
                goto err;
            }
        } else {
            hi = lo;
        }
        if (!set_push(&s, lo, hi)) {
            oom(re);
            goto err;
        }
    }
    if (neg) {
        struct rset c = { 0 };
        set_norm(&s);
        if (!set_complement(&s, &c)) {
            free(c.r);
            oom(re);
            goto err;
        }
        free(s.r);
        s = c;
    }
    return mk_set(re, &s);
err:
    free(s.r);
    return NULL;
}

static struct node *parse_alt(struct re *re, bool top);

static bool is_name_start(int c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z'); }
static bool is_name_char(int c) { return is_name_start(c) || is_digit(c); }

/* A group at re->pos (the parenthesis); *comment set for (?#...), which
 * is no item. */
static struct node *parse_group(struct re *re, bool *comment)
{
    size_t off = re->pos++;
    *comment = false;
    if (peek(re) == '*')
        return fail(re, off, "(* verbs not supported");
    if (peek(re) == '?') {
        re->pos++;
        int c = peek(re), d = peek_at(re, 1);
        if (c == ':' || c == '|') {          /* (?: ) and branch reset (?| ) */
            re->pos++;
        } else if (c == '#') {
            while (re->pos < re->len && re->s[re->pos] != ')')
                re->pos++;
            if (re->pos >= re->len)
                return fail(re, off, "missing ) of the comment");
            re->pos++;
            *comment = true;
            return &re->empty;
        } else if (c == '=' || c == '!') {
            return fail(re, off, "lookahead (?%c not supported", c);
        } else if (c == '<' && (d == '=' || d == '!')) {
            return fail(re, off, "lookbehind (?<%c not supported", d);
        } else if (c == '>') {
            return fail(re, off, "atomic group (?> not supported");
        } else if (c == '<' || c == '\'' || (c == 'P' && d == '<')) {   /* named: plain */
            re->pos += c == 'P' ? 2 : 1;
            int close = c == '\'' ? '\'' : '>';
            if (!is_name_start(peek(re)))
                return fail(re, off, "group name expected");
            while (is_name_char(peek(re)))
                re->pos++;
            if (peek(re) != close)
                return fail(re, off, "group name not terminated by %c", close);
            re->pos++;
        } else if (c == 'P' || c == 'R' || c == '&' || c == '+' || is_digit(c) ||
                   (c == '-' && is_digit(d))) {
            return fail(re, off, "recursion or named reference (?%c not supported", c);
        } else if (c == '(') {
            return fail(re, off, "conditional group (?( not supported");
        } else if (c == 'C') {
            return fail(re, off, "callout (?C not supported");
        } else {
            return fail(re, off, "inline option (?%c not supported", c > 0x20 && c < 0x7F ? c : '?');
        }
    }
    if (++re->depth > RE_MAX_DEPTH)
        return fail(re, off, "groups nested deeper than %d", RE_MAX_DEPTH);
    struct node *x = parse_alt(re, false);
    re->depth--;
    if (!x)
        return NULL;
    if (peek(re) != ')')
        return fail(re, off, "missing ) for this (");
    re->pos++;
    return x;
}

/* One item of a sequence, before its quantifier: a group, a class, ., an
 * escape, a literal. */
static struct node *parse_atom(struct re *re, bool *comment)
{
    *comment = false;
    int c = peek(re);
    if (c == '(')
        return parse_group(re, comment);
    if (c == '[')
        return parse_class(re);
    if (c == '.') {
        re->pos++;
        struct rset s = { 0 };
        if (!set_push(&s, 0, '\n' - 1) || !set_push(&s, '\n' + 1, CP_MAX)) {
            free(s.r);
            return oom(re);
        }
        return mk_set(re, &s);
    }
    if (c == '\\') {
        uint32_t ch;
        struct rset s = { 0 };
        enum esc e = escape(re, false, &ch, &s);
        if (e == E_SET)
            return mk_set(re, &s);
        free(s.r);
        return e == E_CHAR ? mk_char(re, ch) : NULL;
    }
    return mk_char(re, next_cp(re));
}

/* A possessive repetition is accepted where it provably matches what the
 * plain one does: a set repeated, and what follows it cannot start with a
 * member (nor end the pattern, unless this is a top-level branch). */
static bool possessive_ok(struct node *const *items, size_t n, size_t i, bool top)
{
    const struct node *x = items[i], *atom = x;
    if (x->kind == K_EMPTY)
        return true;
    if (x->kind == K_REP)
        atom = x->kid[0];
    if (atom->kind != K_SET)
        return false;
    if (x->kind != K_REP || x->min == x->max)
        return true;
    struct rset f = { 0 };
    bool ok = true, all_nullable = true;
    for (size_t j = i + 1; j < n && ok; j++) {
        ok = first_set(items[j], &f);
        if (!nullable(items[j])) {
            all_nullable = false;
            break;
        }
    }
    if (ok) {
        set_norm(&f);
        ok = !(all_nullable && !top) && !set_intersects(&f, &atom->set);
    }
    free(f.r);
    return ok;
}

/* A sequence up to | or ) or the end. top: a branch of the whole pattern,
 * where ^ may begin it and $ end it (*start, *end). */
static struct node *parse_cat(struct re *re, bool top, bool *start, bool *end)
{
    struct node **items = NULL, *x = NULL;
    struct poss { size_t item, off; } *poss = NULL;   /* the possessive items */
    size_t n = 0, cap = 0, n_poss = 0;
    *start = *end = false;
    if (top && peek(re) == '^') {
        *start = true;
        re->pos++;
    }
    for (;;) {
        int c = peek(re);
        if (c == -1 || c == '|' || c == ')')
            break;
        size_t off = re->pos;
        int min, max;
        if (c == '$') {
            if (top && (peek_at(re, 1) == -1 || peek_at(re, 1) == '|')) {
                *end = true;
                re->pos++;
                break;
            }
            fail(re, off, "$ is supported only at the end of the pattern or of a top-level "
                          "alternative");
            goto out;
        }
        if (c == '^') {
            fail(re, off, "^ is supported only at the start of the pattern or of a top-level "
                          "alternative");
            goto out;
        }
        if (quantifier(re, false, &min, &max)) {
            fail(re, off, "quantifier does not follow a repeatable item");
            goto out;
        }
        bool comment;
        struct node *a = parse_atom(re, &comment);
        if (!a)
            goto out;
        if (comment)
            continue;
        bool possessive = false;
        if (quantifier(re, true, &min, &max)) {
            if (peek(re) == '?') {           /* lazy: the same strings */
                re->pos++;
            } else if (peek(re) == '+') {    /* possessive: checked below */
                re->pos++;
                possessive = true;
            }
            size_t qoff = re->pos;
            if (quantifier(re, false, &min, &max)) {
                fail(re, qoff, "quantifier does not follow a repeatable item");
                goto out;
            }
            if (!(a = mk_rep(re, a, min, max)))
                goto out;
        } else if (re->rc) {
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            struct node **ni = realloc(items, cap * sizeof *ni);
            struct poss *np = ni ? realloc(poss, cap * sizeof *np) : NULL;
            if (ni)
                items = ni;
            if (!np) {
                oom(re);
                goto out;
            }
            poss = np;
        }
        if (possessive)
            poss[n_poss++] = (struct poss){ n, off };
        items[n++] = a;
    }
    for (size_t k = 0; k < n_poss; k++) {
        if (!possessive_ok(items, n, poss[k].item, top)) {
            fail(re, poss[k].off, "possessive quantifier not supported here (it would match fewer "
                          "strings than the plain one)");
            goto out;
        }
    }
    x = mk_cat(re, items, n);
out:
    free(items);
    free(poss);
    return x;
}

/* .* for the search mode: any code point, newlines included. */
static struct node *any_star(struct re *re)
{
    struct rset s = { 0 };
    if (!set_push(&s, 0, CP_MAX))
        return oom(re);
    struct node *a = mk_set(re, &s);
    return a ? mk_rep(re, a, 0, INF) : NULL;
}

/* In a search, the branches of the pattern by their anchors, bucket[start
 * + 2 * end] of them in one alternative: .* (a|b) .* rather than
 * .* a .* | .* b .*. An alternative that matches the empty string makes
 * the whole .* */
static struct node *search(struct re *re, struct node *const *bucket)
{
    struct node *br[4] = { NULL }, *any = any_star(re);
    if (!any)
        return NULL;
    for (int k = 0; k < 4; k++) {
        if (bucket[k]->kind == K_NOTHING) {
            br[k] = &re->nothing;
        } else if (nullable(bucket[k]) && k != 3) {
            br[k] = any;
        } else {
            struct node *three[3] = { k & 1 ? &re->empty : any, bucket[k],
                                      k & 2 ? &re->empty : any };
            if (!(br[k] = mk_cat(re, three, 3)))
                return NULL;
        }
    }
    return mk_alt(re, br, 4);
}

/* Alternatives up to ) or the end. */
static struct node *parse_alt(struct re *re, bool top)
{
    struct node **br = NULL, *x = NULL;
    size_t n = 0, cap = 0;
    char *where = NULL;   /* top: each branch's bucket (search) */
    for (;;) {
        bool start, end;
        struct node *b = parse_cat(re, top, &start, &end);
        if (!b)
            goto out;
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            struct node **nb = realloc(br, cap * sizeof *nb);
            char *nw = nb ? realloc(where, cap) : NULL;
            if (nb)
                br = nb;
            if (!nw) {
                oom(re);
                goto out;
            }
            where = nw;
        }
        where[n] = (char)(start + 2 * end);
        br[n++] = b;
        if (peek(re) != '|')
            break;
        re->pos++;
    }
    if (top && re->search) {
        struct node *bucket[4], **in = malloc(n * sizeof *in);
        if (!in) {
            oom(re);
            goto out;
        }
        for (int k = 0; k < 4; k++) {
            size_t m = 0;
            for (size_t i = 0; i < n; i++)
                if (where[i] == k)
                    in[m++] = br[i];
            if (!(bucket[k] = mk_alt(re, in, m)))
                break;
        }
        free(in);
        x = re->rc ? NULL : search(re, bucket);
    } else {
        x = mk_alt(re, br, n);
    }
out:
    free(br);
    free(where);
    return x;
}

/* ---- printing GBNF --------------------------------------------------------- */

struct out {
    char *b;
    size_t n, cap;
    int rc;          /* -ENOMEM, -E2BIG */
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->rc)
        return;
    if (o->n + n + 1 > RE_MAX_OUT) {
        o->rc = -E2BIG;
        return;
    }
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1)
            cap *= 2;
        char *b = realloc(o->b, cap);
        if (!b) {
            o->rc = -ENOMEM;
            return;
        }
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    o->b[o->n] = 0;
}

static void puts_(struct out *o, const char *s) { put(o, s, strlen(s)); }

/* A code point in a literal ("...") or a class ([...]): ASCII letters,
 * digits and harmless punctuation as themselves, the rest as \xHH,
 * \uHHHH or \UHHHHHHHH, so no character needs GBNF's escapes. */
static void put_cp(struct out *o, uint32_t c, bool in_class)
{
    char b[12];
    bool plain = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') ||
                 (c < 0x7F && strchr(in_class ? "!#$%&'()*+,./:;<=>?@_`{|}~"
                                              : " !#$%&'()*+,-./:;<=>?@[]^_`{|}~", (int)c) &&
                  c != 0);
    if (plain) {
        b[0] = (char)c;
        put(o, b, 1);
        return;
    }
    if (c < 0x80)
        snprintf(b, sizeof b, "\\x%02X", (unsigned)c);
    else if (c <= 0xFFFF)
        snprintf(b, sizeof b, "\\u%04X", (unsigned)c);
    else
        snprintf(b, sizeof b, "\\U%08X", (unsigned)c);
    puts_(o, b);
}

static bool is_char(const struct node *x)
{
    return x->kind == K_SET && x->set.n == 1 && x->set.r[0].lo == x->set.r[0].hi;
}

static void put_ranges(struct out *o, const struct rset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        put_cp(o, s->r[i].lo, true);
        if (s->r[i].hi == s->r[i].lo)
            continue;
        if (s->r[i].hi > s->r[i].lo + 1)
            puts_(o, "-");
        put_cp(o, s->r[i].hi, true);
    }
}

static void put_set(struct out *o, const struct rset *s)
{
    if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
        puts_(o, "\"");
        put_cp(o, s->r[0].lo, false);
        puts_(o, "\"");
        return;
    }
    struct rset c = { 0 };
    if (!set_complement(s, &c)) {
        free(c.r);
        o->rc = o->rc ? o->rc : -ENOMEM;
        return;
    }
    if (c.n == 0) {
        puts_(o, ".");
    } else if (c.n < s->n) {
        puts_(o, "[^");
        put_ranges(o, &c);
        puts_(o, "]");
    } else {
        puts_(o, "[");
        put_ranges(o, s);
        puts_(o, "]");
    }
    free(c.r);
}

/* x as GBNF. atom: it will be repeated or sit in a sequence, so an
 * alternative or a sequence goes in parentheses. */
static void emit(struct out *o, const struct node *x, bool atom)
{
    switch (x->kind) {
    case K_NOTHING:   /* only ever the whole pattern, refused before */
    case K_EMPTY:
        puts_(o, "\"\"");
        return;
    case K_SET:
        put_set(o, &x->set);
        return;
    case K_CAT:
        if (atom)
            puts_(o, "(");
        for (size_t i = 0; i < x->n; i++) {
            if (i)
                puts_(o, " ");
            if (is_char(x->kid[i])) {   /* a run of characters: one literal */
                puts_(o, "\"");
                for (; i < x->n && is_char(x->kid[i]); i++)
                    put_cp(o, x->kid[i]->set.r[0].lo, false);
                puts_(o, "\"");
                i--;
            } else {
                emit(o, x->kid[i], true);
            }
        }
        if (atom)
            puts_(o, ")");
        return;
    case K_ALT:
        if (atom)
            puts_(o, "(");
        for (size_t i = 0; i < x->n; i++) {
            if (i)
                puts_(o, " | ");
            emit(o, x->kid[i], false);
        }
        if (atom)
            puts_(o, ")");
        return;
    case K_REP: {
        const struct node *k = x->kid[0];
        if (k->kind == K_SET) {
            put_set(o, &k->set);
        } else {
            puts_(o, "(");
            emit(o, k, false);
            puts_(o, ")");
        }
        char q[32];
        if (x->min == 0 && x->max == 1)
            snprintf(q, sizeof q, "?");
        else if (x->min == 0 && x->max == INF)
            snprintf(q, sizeof q, "*");
        else if (x->min == 1 && x->max == INF)
            snprintf(q, sizeof q, "+");
        else if (x->max == INF)
            snprintf(q, sizeof q, "{%d,}", x->min);
        else if (x->min == x->max)
            snprintf(q, sizeof q, "{%d}", x->min);
        else
            snprintf(q, sizeof q, "{%d,%d}", x->min, x->max);
        puts_(o, q);
        return;
    }
    }
}

/* ---- the entry points ------------------------------------------------------ */

/* The offset of the first byte that is not valid UTF-8, or len. */
static size_t utf8_bad(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint8_t c = s[i];
        size_t n;
        uint32_t v, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2, v = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3, v = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4, v = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (len - i < n)
            return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            v = v << 6 | (s[i + k] & 0x3F);
        }
        if (v < min || v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF))
            return i;
        i += n;
    }
    return len;
}

int l8g_regex_to_gbnf_rules(const char *pattern, size_t len, const char *name, bool anchored,
                            char **rules, char err[L8G_ERRLEN])
{
    struct re re = { .s = (const uint8_t *)pattern, .len = len, .search = !anchored,
                     .err = err };
    struct out o = { 0 };
    re.nothing.kind = K_NOTHING;
    re.empty.kind = K_EMPTY;
    err[0] = 0;
    size_t nl = name ? strlen(name) : 0;
    if (!nl || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
               != nl || nl > 200) {
        snprintf(err, L8G_ERRLEN, "invalid rule name");
        return -EINVAL;
    }
    size_t bad = utf8_bad(re.s, len);
    struct node *x = NULL;
    if (bad < len) {
        fail(&re, bad, "invalid UTF-8");
        goto out;
    }
    x = parse_alt(&re, true);
    if (!x)
        goto out;
    if (re.pos < len) {   /* parse_alt stops at | or ) or the end: a ) here is stray */
        fail(&re, re.pos, "unmatched )");
        goto out;
    }
    if (x->kind == K_NOTHING) {
        fail(&re, 0, "the pattern matches no string");
        goto out;
    }
    put(&o, name, nl);
    puts_(&o, " ::= ");
    emit(&o, x, false);
    puts_(&o, "\n");
    if (o.rc)
        fail_rc(&re, o.rc, o.rc == -E2BIG ? "the grammar would be larger than 1 MiB"
                                          : "out of memory");
out:
    for (size_t i = 0; i < re.n_all; i++) {
        free(re.all[i]->set.r);
        free(re.all[i]->kid);
        free(re.all[i]);
    }
    free(re.all);
    if (re.rc) {
        free(o.b);
        return re.rc;
    }
    *rules = o.b;
    return 0;
}

int l8g_regex_to_gbnf(const char *pattern, size_t len, char **gbnf, char err[L8G_ERRLEN])
{
    return l8g_regex_to_gbnf_rules(pattern, len, "root", true, gbnf, err);
}
