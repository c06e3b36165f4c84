/* json_schema.c - a JSON Schema as GBNF text (grammar.h, l8g_schema_to_gbnf).
 *
 * One recursive pass over the schema (parsed by json-c) writes an expression
 * per subschema; objects, arrays, unions and every $ref target get a rule of
 * their own, named after the path to them (root-items, root-tags-kv, a
 * $defs name), and the fixed pieces (ws, string, number, date, ...) are
 * appended once, after the schema's rules, when something used them.
 *
 * What the grammar accepts is a subset of what the schema validates, never
 * more: every value is written one way where JSON allows several (strings
 * as JSON text with their escapes, but a listed property name or a const
 * string only as json-c writes it; numbers as written, so an integer is
 * never 1.0 or 1e2; object members in the order of `properties`, extra
 * members after them), and the whitespace between tokens is bounded (ws).
 * Within that, it is exact: what it accepts, the schema validates.
 *
 * Keywords are checked one by one: the annotations are skipped, the
 * supported ones each constrain, anything else is an error naming its JSON
 * pointer. Limits: 1 MiB of schema text, 64 levels of nesting (of the text,
 * and of subschemas as the translation descends, through $ref), 4 MiB of
 * GBNF out. */
#include "grammar.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_MAX_TEXT (1u << 20)  /* bytes of schema */
#define SCHEMA_MAX_DEPTH 64         /* nesting of the text and of subschemas */
#define SCHEMA_MAX_GBNF (4u << 20)  /* bytes of GBNF out */
#define REP_MAX 10000               /* gbnf.c's cap on a repetition count */
#define KEY_MAX_EXCLUDED 1024       /* bytes of a property name the extra-key trie takes */

/* ---- text buffers ------------------------------------------------------------ */

/* Growing text; err is the first failure (-ENOMEM, -E2BIG past the GBNF
 * cap), after which appends do nothing. */
struct buf {
    char *p;
    size_t n, cap;
    int err;
};

static void b_put(struct buf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->n + n + 1 > SCHEMA_MAX_GBNF) {
        b->err = -E2BIG;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = -ENOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void b_puts(struct buf *b, const char *s) { b_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3)))
static void b_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->err = b->err ? b->err : -EINVAL;
        return;
    }
    b_put(b, tmp, (size_t)n);
}

/* One item of a sequence: a space before it unless it starts the text or
 * follows "(" or a space. */
static void b_item(struct buf *b, const char *s)
{
    if (b->n && b->p[b->n - 1] != ' ' && b->p[b->n - 1] != '(')
        b_put(b, " ", 1);
    b_puts(b, s);
}

/* A GBNF literal of n bytes: quotes, backslashes and control bytes escaped,
 * everything else (UTF-8 included) as it is. */
static void b_lit(struct buf *b, const char *s, size_t n)
{
    b_item(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            b_put(b, e, 2);
        } else if (ch == '\n') {
            b_puts(b, "\\n");
        } else if (ch == '\t') {
            b_puts(b, "\\t");
        } else if (ch == '\r') {
            b_puts(b, "\\r");
        } else if (ch < 0x20 || ch == 0x7f) {
            b_printf(b, "\\x%02X", ch);
        } else {
            b_put(b, (const char *)&ch, 1);
        }
    }
    b_put(b, "\"", 1);
}

/* ---- the fixed rules --------------------------------------------------------- */

/* Rules every schema may use, appended once after the schema's own when
 * used (deps: the ones each needs). Their names are reserved, so a property
 * called "string" gets a rule of another name. */
enum prim {
    P_WS, P_VALUE, P_OBJECT, P_MEMBER, P_ARRAY, P_STRING, P_CHAR, P_KEYCHAR, P_NUMBER,
    P_INTEGER, P_BOOLEAN, P_NULL, P_DATE, P_YEAR, P_LEAPYEAR, P_TIME, P_DATETIME, P_UUID,
    P_EMAIL, P_COUNT
};

static const struct {
    const char *name, *body;
    unsigned deps;
} prims[P_COUNT] = {
    [P_WS] = {"ws", "| \" \" | \"\\n\" [ \\t]{0,20}", 0},
    [P_VALUE] = {"value", "object | array | string | number | boolean | null",
                 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER |
                     1u << P_BOOLEAN | 1u << P_NULL},
    [P_OBJECT] = {"object", "\"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"",
                  1u << P_WS | 1u << P_MEMBER},
    [P_MEMBER] = {"member", "string ws \":\" ws value", 1u << P_STRING | 1u << P_VALUE},
    [P_ARRAY] = {"array", "\"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"",
                 1u << P_WS | 1u << P_VALUE},
    [P_STRING] = {"string", "\"\\\"\" char* \"\\\"\"", 1u << P_CHAR},
    /* One character of a JSON string: any code point but the quote, the
     * backslash and the controls, or an escape (RFC 8259 section 7). */
    [P_CHAR] = {"char",
                "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )", 0},
    /* A character of an extra member's name, unescaped (see key_not_in). */
    [P_KEYCHAR] = {"keychar", "[^\"\\\\\\x00-\\x1F]", 0},
    [P_NUMBER] = {"number", "integer ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?", 1u << P_INTEGER},
    [P_INTEGER] = {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]* )", 0},
    [P_BOOLEAN] = {"boolean", "\"true\" | \"false\"", 0},
    [P_NULL] = {"null", "\"null\"", 0},
    /* RFC 3339 full-date with the days of each month; Feb 29 only in leap
     * years (divisible by 4, and by 400 when by 100), as ajv-formats checks. */
    [P_DATE] = {"date",
                "year \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
                "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) "
                "| \"02\" \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | leapyear \"-02-29\"",
                1u << P_YEAR | 1u << P_LEAPYEAR},
    [P_YEAR] = {"year", "[0-9]{4}", 0},
    [P_LEAPYEAR] = {"leapyear",
                    "[0-9]{2} ( [02468] [48] | [2468] \"0\" | [13579] [26] ) | ( [02468] [048] | "
                    "[13579] [26] ) \"00\"",
                    0},
    /* RFC 3339 full-time: a time zone is required (Z or +-HH:MM); no leap
     * second (ajv-formats takes :60 only at 23:59 UTC). */
    [P_TIME] = {"time",
                "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )? "
                "( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
                0},
    [P_DATETIME] = {"date-time", "date [tT] time", 1u << P_DATE | 1u << P_TIME},
    [P_UUID] = {"uuid",
                "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
                "\"-\" [0-9a-fA-F]{12}",
                0},
    /* An address as ajv-formats' "email" (and HTML's input type=email)
     * takes it, not RFC 5322's addr-spec: dot-atoms of atext on the left,
     * no quoted local part, no comments or folding whitespace, and a domain
     * of two or more DNS labels (letters, digits, inner hyphens), no IP
     * literal, no length limits. The atext "/" is not taken as JSON's "\/". */
    [P_EMAIL] = {"email",
                 "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+ ( \".\" [A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+ )* "
                 "\"@\" ( [A-Za-z0-9] ( [A-Za-z0-9\\-]* [A-Za-z0-9] )? \".\" )+ [A-Za-z0-9] ( "
                 "[A-Za-z0-9\\-]* [A-Za-z0-9] )?",
                 0},
};

/* ---- the translation's state ------------------------------------------------- */

struct rule {
    char *name;
    char *body; /* NULL while it is being written (a $ref target may recur) */
    bool target; /* a $ref target's: others may refer to it */
};

/* A $ref target: the subschema, its rule, the pointer that named it first
 * (errors inside it are told from there), and how far it is written. */
enum ref_state { R_PENDING, R_ACTIVE, R_DONE };
struct ref {
    json_object *target;
    int rule;
    enum ref_state state;
    char *ptr;
};

struct ctx {
    json_object *root;
    struct rule *rules;
    int nrules, rcap;
    int *hash; /* open addressing over rule indices, -1 empty; hcap a power of two */
    size_t hcap, nhash;
    struct ref *refs;
    int nrefs, refcap;
    /* Rules being written, innermost last: the root or a queued target at
     * the bottom, then the targets each reached at the very start of the
     * one below (at its left edge). left_base == nstack once a token is
     * written in the innermost (gen_inner): a target reached there is only
     * queued (R_PENDING) and written later from the bottom, so every rule
     * on the stack is at the left edge of the one below, and reaching an
     * R_ACTIVE target at a left edge is left recursion: a cycle with no
     * content. */
    int nstack, left_base;
    struct buf path; /* JSON pointer of the subschema being translated */
    size_t total;    /* bytes of finished rules */
    unsigned used;   /* enum prim bits */
    int depth;
    char *err;
    bool failed;
};

__attribute__((format(printf, 4, 5)))
static int fail(struct ctx *c, int code, const char *keyword, const char *fmt, ...)
{
    if (c->failed)
        return code;
    c->failed = true;
    const char *p = c->path.p ? c->path.p : "";
    int k = 0;
    if (keyword)
        k = snprintf(c->err, L8G_ERRLEN, "%s/%s: ", p, keyword);
    else if (*p)
        k = snprintf(c->err, L8G_ERRLEN, "%s: ", p);
    else
        c->err[0] = 0; /* the root itself: the message alone */
    if (k >= 0 && k < L8G_ERRLEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, (size_t)(L8G_ERRLEN - k), fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A buffer's failure as the translation's. */
static int buf_fail(struct ctx *c, const struct buf *b)
{
    if (b->err == -E2BIG)
        return fail(c, -E2BIG, NULL, "the grammar is larger than %u bytes", SCHEMA_MAX_GBNF);
    if (b->err == -ENOMEM)
        return fail(c, -ENOMEM, NULL, "out of memory");
    return fail(c, b->err, NULL, "internal error %d", b->err);
}

/* Appends "/seg" (escaped as RFC 6901 says) to the path; returns the old
 * length for path_pop. */
static size_t path_push(struct ctx *c, const char *seg)
{
    size_t old = c->path.n;
    b_put(&c->path, "/", 1);
    for (const char *s = seg; *s; s++) {
        if (*s == '~')
            b_puts(&c->path, "~0");
        else if (*s == '/')
            b_puts(&c->path, "~1");
        else
            b_put(&c->path, s, 1);
    }
    return old;
}

static size_t path_push_idx(struct ctx *c, const char *seg, size_t i)
{
    char n[32];
    snprintf(n, sizeof n, "%zu", i);
    size_t old = path_push(c, seg);
    path_push(c, n);
    return old;
}

static void path_pop(struct ctx *c, size_t old)
{
    c->path.n = old;
    if (c->path.p)
        c->path.p[old] = 0;
}

/* ---- rule names -------------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int rule_find(const struct ctx *c, const char *name)
{
    if (!c->hcap)
        return -1;
    for (size_t i = hash_str(name) & (c->hcap - 1);; i = (i + 1) & (c->hcap - 1)) {
        int r = c->hash[i];
        if (r < 0 || !strcmp(c->rules[r].name, name))
            return r;
    }
}

static int hash_insert(struct ctx *c, int r)
{
    if ((c->nhash + 1) * 2 > c->hcap) {
        size_t cap = c->hcap ? c->hcap * 2 : 64;
        int *h = malloc(cap * sizeof *h);
        if (!h)
            return -ENOMEM;
        for (size_t i = 0; i < cap; i++)
            h[i] = -1;
        for (size_t j = 0; j < c->hcap; j++) {
            if (c->hash[j] < 0)
                continue;
            size_t i = hash_str(c->rules[c->hash[j]].name) & (cap - 1);
            while (h[i] >= 0)
                i = (i + 1) & (cap - 1);
            h[i] = c->hash[j];
        }
        free(c->hash);
        c->hash = h;
        c->hcap = cap;
    }
    size_t i = hash_str(c->rules[r].name) & (c->hcap - 1);
    while (c->hash[i] >= 0)
        i = (i + 1) & (c->hcap - 1);
    c->hash[i] = r;
    c->nhash++;
    return 0;
}

/* A new rule (body NULL) named after hint: [A-Za-z0-9_-]+, other bytes as
 * "-", made unique with "-2", "-3", ... Returns its index or -ENOMEM. */
static int rule_new(struct ctx *c, const char *hint)
{
    size_t n = strlen(hint);
    if (n > 200)
        n = 200; /* long property paths: the suffix keeps names unique */
    char *base = malloc(n + 1);
    if (!base)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char ch = hint[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        base[i] = ok ? ch : '-';
    }
    base[n] = 0;
    if (!n) {
        free(base);
        base = strdup("rule");
        if (!base)
            return -ENOMEM;
    }
    char *name = base;
    for (unsigned k = 2; rule_find(c, name) >= 0; k++) {
        if (name != base)
            free(name);
        if (asprintf(&name, "%s-%u", base, k) < 0) {
            free(base);
            return -ENOMEM;
        }
    }
    if (name != base)
        free(base);
    if (c->nrules == c->rcap) {
        int cap = c->rcap ? c->rcap * 2 : 32;
        struct rule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r) {
            free(name);
            return -ENOMEM;
        }
        c->rules = r;
        c->rcap = cap;
    }
    c->rules[c->nrules] = (struct rule){name, NULL, false};
    if (hash_insert(c, c->nrules) < 0) {
        free(name);
        return -ENOMEM;
    }
    return c->nrules++;
}

/* Gives rule r the text of body (taken over). */
static int rule_set(struct ctx *c, int r, struct buf *body)
{
    if (body->err)
        return buf_fail(c, body);
    if (!body->p)
        b_puts(body, "");
    if (body->err)
        return buf_fail(c, body);
    c->total += strlen(c->rules[r].name) + body->n + 6;
    c->rules[r].body = body->p;
    *body = (struct buf){0};
    if (c->total > SCHEMA_MAX_GBNF)
        return fail(c, -E2BIG, NULL, "the grammar is larger than %u bytes", SCHEMA_MAX_GBNF);
    return 0;
}

/* Sets rule r (a $ref target or the root) to body; when the body is just
 * the name of a rule made while writing it (its object, array or union),
 * that rule's text is taken instead and the other dropped, so the root
 * object is "root ::= "{" ...", not "root ::= root-2". */
static int rule_adopt(struct ctx *c, int r, struct buf *body)
{
    int t = body->p && !body->err ? rule_find(c, body->p) : -1;
    if (t > r && c->rules[t].body && !c->rules[t].target) {
        free(body->p);
        *body = (struct buf){0};
        c->rules[r].body = c->rules[t].body;
        c->rules[t].body = NULL; /* not written out; its name stays taken */
        return 0;
    }
    return rule_set(c, r, body);
}

/* A fixed rule as an item of out, marked used. */
static void use(struct ctx *c, struct buf *out, enum prim p)
{
    c->used |= 1u << p;
    b_item(out, prims[p].name);
}

/* ---- keywords ------------------------------------------------------------------ */

enum kw {
    K_ANNOTATION, K_DEFS, K_TYPE, K_ENUM, K_CONST, K_ANYOF, K_ONEOF, K_ALLOF, K_REF,
    K_PROPERTIES, K_REQUIRED, K_ADDPROPS, K_ITEMS, K_PREFIXITEMS, K_MINITEMS, K_MAXITEMS,
    K_MINLENGTH, K_MAXLENGTH, K_PATTERN, K_FORMAT, K_MINIMUM, K_MAXIMUM, K_EXMIN, K_EXMAX,
    K_UNKNOWN
};

static const struct {
    const char *name;
    enum kw kw;
} keywords[] = {
    {"title", K_ANNOTATION}, {"description", K_ANNOTATION}, {"$schema", K_ANNOTATION},
    {"$id", K_ANNOTATION}, {"$comment", K_ANNOTATION}, {"examples", K_ANNOTATION},
    {"default", K_ANNOTATION}, {"deprecated", K_ANNOTATION}, {"readOnly", K_ANNOTATION},
    {"writeOnly", K_ANNOTATION}, {"$defs", K_DEFS}, {"definitions", K_DEFS},
    {"type", K_TYPE}, {"enum", K_ENUM}, {"const", K_CONST}, {"anyOf", K_ANYOF},
    {"oneOf", K_ONEOF}, {"allOf", K_ALLOF}, {"$ref", K_REF}, {"properties", K_PROPERTIES},
    {"required", K_REQUIRED}, {"additionalProperties", K_ADDPROPS}, {"items", K_ITEMS},
    {"prefixItems", K_PREFIXITEMS}, {"minItems", K_MINITEMS}, {"maxItems", K_MAXITEMS},
    {"minLength", K_MINLENGTH}, {"maxLength", K_MAXLENGTH}, {"pattern", K_PATTERN},
    {"format", K_FORMAT}, {"minimum", K_MINIMUM}, {"maximum", K_MAXIMUM},
    {"exclusiveMinimum", K_EXMIN}, {"exclusiveMaximum", K_EXMAX},
};

static enum kw kw_of(const char *key)
{
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (!strcmp(keywords[i].name, key))
            return keywords[i].kw;
    return K_UNKNOWN;
}

/* The keywords that constrain one JSON type (the rest of a schema's
 * keywords do not look at values of that type). */
enum jt { T_NULL, T_BOOLEAN, T_OBJECT, T_ARRAY, T_STRING, T_INTEGER, T_NUMBER, T_COUNT };
static const char *const type_names[T_COUNT] = {"null", "boolean", "object", "array",
                                                "string", "integer", "number"};

static bool kw_for_type(enum kw k, enum jt t)
{
    switch (k) {
    case K_PROPERTIES: case K_REQUIRED: case K_ADDPROPS: return t == T_OBJECT;
    case K_ITEMS: case K_PREFIXITEMS: case K_MINITEMS: case K_MAXITEMS: return t == T_ARRAY;
    case K_MINLENGTH: case K_MAXLENGTH: case K_PATTERN: case K_FORMAT: return t == T_STRING;
    case K_MINIMUM: case K_MAXIMUM: case K_EXMIN: case K_EXMAX:
        return t == T_INTEGER || t == T_NUMBER;
    default: return false;
    }
}

static int gen(struct ctx *c, json_object *s, const char *hint, struct buf *out);

/* gen for a subschema after a token (inside an object or an array): a $ref
 * target reached from there again is recursion with content, not a cycle. */
static int gen_inner(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    int saved = c->left_base;
    c->left_base = c->nstack;
    int r = gen(c, s, hint, out);
    c->left_base = saved;
    return r;
}

static char *hint_join(const char *a, const char *b)
{
    char *s;
    return asprintf(&s, "%s-%s", a, b) < 0 ? NULL : s;
}

static char *hint_idx(const char *a, const char *b, size_t i)
{
    char *s;
    return asprintf(&s, "%s-%s%zu", a, b, i) < 0 ? NULL : s;
}

/* A non-negative integer keyword's value (minLength, maxItems, ...). */
static int get_count(struct ctx *c, json_object *v, const char *kw, uint64_t *out)
{
    if (json_object_is_type(v, json_type_int)) {
        int64_t x = json_object_get_int64(v);
        if (x >= 0) {
            *out = x == INT64_MAX ? json_object_get_uint64(v) : (uint64_t)x;
            return 0;
        }
    } else if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        if (d >= 0 && d < 1.8e19 && d == floor(d)) {
            *out = (uint64_t)d;
            return 0;
        }
    }
    return fail(c, -EINVAL, kw, "must be a non-negative integer");
}

/* atom{m,n} (n UINT64_MAX: no upper bound) as GBNF, with the counts over
 * gbnf.c's REP_MAX written as nested repetitions. */
static int rep(struct ctx *c, struct buf *out, const char *atom, uint64_t m, uint64_t n,
               const char *kw_min, const char *kw_max)
{
    bool inf = n == UINT64_MAX;
    if (m <= REP_MAX && (inf || n <= REP_MAX)) {
        if (inf)
            m == 0 ? b_printf(out, " %s*", atom)
                   : m == 1 ? b_printf(out, " %s+", atom) : b_printf(out, " %s{%llu,}", atom,
                                                                     (unsigned long long)m);
        else if (m == n)
            m == 1 ? b_printf(out, " %s", atom) : b_printf(out, " %s{%llu}", atom,
                                                           (unsigned long long)m);
        else if (m == 0 && n == 1)
            b_printf(out, " %s?", atom);
        else
            b_printf(out, " %s{%llu,%llu}", atom, (unsigned long long)m, (unsigned long long)n);
        return 0;
    }
    if (m / REP_MAX > REP_MAX || (!inf && n / REP_MAX > REP_MAX))
        return fail(c, -E2BIG, m / REP_MAX > REP_MAX ? kw_min : kw_max,
                    "a count over %llu is unsupported", (unsigned long long)REP_MAX * REP_MAX);
    /* m = q*REP_MAX + r exactly, then the optional part k = n - m:
     * 0 .. q2*REP_MAX - 1 or q2*REP_MAX .. q2*REP_MAX + r2. */
    if (m >= REP_MAX)
        b_printf(out, " ( %s{%d} ){%llu}", atom, REP_MAX, (unsigned long long)(m / REP_MAX));
    if (m % REP_MAX)
        b_printf(out, " %s{%llu}", atom, (unsigned long long)(m % REP_MAX));
    if (inf) {
        b_printf(out, " %s*", atom);
        return 0;
    }
    uint64_t k = n - m;
    if (k == 0)
        return 0;
    if (k <= REP_MAX) {
        b_printf(out, " %s{0,%llu}", atom, (unsigned long long)k);
        return 0;
    }
    uint64_t q = k / REP_MAX, r = k % REP_MAX;
    b_printf(out, " ( ( %s{%d} ){0,%llu} %s{0,%d} | ( %s{%d} ){%llu}", atom, REP_MAX,
             (unsigned long long)(q - 1), atom, REP_MAX - 1, atom, REP_MAX,
             (unsigned long long)q);
    if (r)
        b_printf(out, " %s{0,%llu}", atom, (unsigned long long)r);
    b_puts(out, " )");
    return 0;
}

/* ---- literals: const and enum -------------------------------------------------- */

/* v as GBNF: scalars as their compact JSON text, objects and arrays token by
 * token with ws between, members in v's order. */
static void gen_const(struct ctx *c, json_object *v, struct buf *out)
{
    if (json_object_is_type(v, json_type_object)) {
        b_item(out, "\"{\"");
        use(c, out, P_WS);
        bool first = true;
        json_object_object_foreach(v, k, x) {
            if (!first) {
                use(c, out, P_WS);
                b_item(out, "\",\"");
                use(c, out, P_WS);
            }
            first = false;
            json_object *ks = json_object_new_string(k);
            if (!ks) {
                out->err = -ENOMEM;
                return;
            }
            const char *kt = json_object_to_json_string_ext(ks, JSON_C_TO_STRING_PLAIN |
                                                                    JSON_C_TO_STRING_NOSLASHESCAPE);
            b_lit(out, kt, strlen(kt));
            json_object_put(ks);
            use(c, out, P_WS);
            b_item(out, "\":\"");
            use(c, out, P_WS);
            gen_const(c, x, out);
        }
        if (!first)
            use(c, out, P_WS);
        b_item(out, "\"}\"");
    } else if (json_object_is_type(v, json_type_array)) {
        size_t n = json_object_array_length(v);
        b_item(out, "\"[\"");
        use(c, out, P_WS);
        for (size_t i = 0; i < n; i++) {
            if (i) {
                use(c, out, P_WS);
                b_item(out, "\",\"");
                use(c, out, P_WS);
            }
            gen_const(c, json_object_array_get_idx(v, i), out);
        }
        if (n)
            use(c, out, P_WS);
        b_item(out, "\"]\"");
    } else {
        const char *t = v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE)
                          : "null";
        b_lit(out, t, strlen(t));
    }
}

static bool value_has_type(json_object *v, enum jt t)
{
    switch (t) {
    case T_NULL: return !v || json_object_is_type(v, json_type_null);
    case T_BOOLEAN: return json_object_is_type(v, json_type_boolean);
    case T_OBJECT: return json_object_is_type(v, json_type_object);
    case T_ARRAY: return json_object_is_type(v, json_type_array);
    case T_STRING: return json_object_is_type(v, json_type_string);
    case T_NUMBER:
        return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
    case T_INTEGER:
        if (json_object_is_type(v, json_type_int))
            return true;
        if (json_object_is_type(v, json_type_double)) {
            double d = json_object_get_double(v);
            return isfinite(d) && d == floor(d);
        }
        return false;
    default: return false;
    }
}

/* ---- integers ------------------------------------------------------------------ */

static bool all_is(const char *s, size_t n, char d)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != d)
            return false;
    return true;
}

static void any_digits(struct buf *b, size_t n)
{
    if (n == 1)
        b_item(b, "[0-9]");
    else if (n > 1)
        b_printf(b, " [0-9]{%zu}", n);
}

static void digit_class(struct buf *b, char lo, char hi)
{
    if (lo == hi)
        b_printf(b, " \"%c\"", lo);
    else
        b_printf(b, " [%c-%c]", lo, hi);
}

/* The n-digit strings >= s (n digits). */
static void digits_ge(struct buf *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (all_is(s, n, '0')) {
        any_digits(b, n);
        return;
    }
    b_item(b, "(");
    digit_class(b, s[0], s[0]);
    digits_ge(b, s + 1, n - 1);
    if (s[0] != '9') {
        b_puts(b, " |");
        digit_class(b, (char)(s[0] + 1), '9');
        any_digits(b, n - 1);
    }
    b_puts(b, " )");
}

/* The n-digit strings <= s. */
static void digits_le(struct buf *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (all_is(s, n, '9')) {
        any_digits(b, n);
        return;
    }
    b_item(b, "(");
    digit_class(b, s[0], s[0]);
    digits_le(b, s + 1, n - 1);
    if (s[0] != '0') {
        b_puts(b, " |");
        digit_class(b, '0', (char)(s[0] - 1));
        any_digits(b, n - 1);
    }
    b_puts(b, " )");
}

/* The n-digit strings from lo to hi (lo <= hi), as one item or a
 * sequence. */
static void digits_between(struct buf *b, const char *lo, const char *hi, size_t n)
{
    size_t i = 0;
    while (i < n && lo[i] == hi[i])
        i++;
    if (i)
        b_lit(b, lo, i);
    if (i == n)
        return;
    size_t rest = n - i - 1;
    bool lo_full = all_is(lo + i + 1, rest, '0'), hi_full = all_is(hi + i + 1, rest, '9');
    char from = (char)(lo_full ? lo[i] : lo[i] + 1), to = (char)(hi_full ? hi[i] : hi[i] - 1);
    if (lo_full && hi_full) {
        digit_class(b, from, to);
        any_digits(b, rest);
        return;
    }
    b_item(b, "(");
    bool alt = false;
    if (!lo_full) {
        digit_class(b, lo[i], lo[i]);
        digits_ge(b, lo + i + 1, rest);
        alt = true;
    }
    if (from <= to) {
        if (alt)
            b_puts(b, " |");
        digit_class(b, from, to);
        any_digits(b, rest);
        alt = true;
    }
    if (!hi_full) {
        if (alt)
            b_puts(b, " |");
        digit_class(b, hi[i], hi[i]);
        digits_le(b, hi + i + 1, rest);
    }
    b_puts(b, " )");
}

/* Alternatives (joined by " |") for the magnitudes a .. b without leading
 * zeros, b_inf: no upper bound. */
static void magnitudes(struct buf *b, uint64_t a, uint64_t bmax, bool b_inf)
{
    char as[24], bs[24], lo[24], hi[24];
    size_t la = (size_t)snprintf(as, sizeof as, "%llu", (unsigned long long)a);
    size_t lb = (size_t)snprintf(bs, sizeof bs, "%llu", (unsigned long long)bmax);
    size_t last = b_inf ? la : lb;
    bool alt = false;
    for (size_t len = la; len <= last; len++) {
        if (len > la && len < last) {
            /* every number of the lengths strictly between */
            size_t top = last - 1;
            b_printf(b, "%s [1-9]", alt ? " |" : "");
            if (top == len)
                any_digits(b, len - 1);
            else
                b_printf(b, " [0-9]{%zu,%zu}", len - 1, top - 1);
            alt = true;
            len = top;
            continue;
        }
        if (len == la) {
            memcpy(lo, as, la + 1);
        } else {
            lo[0] = '1';
            memset(lo + 1, '0', len - 1);
            lo[len] = 0;
        }
        if (!b_inf && len == lb) {
            memcpy(hi, bs, lb + 1);
        } else {
            memset(hi, '9', len);
            hi[len] = 0;
        }
        if (alt)
            b_puts(b, " |");
        digits_between(b, lo, hi, len);
        alt = true;
    }
    if (b_inf)
        b_printf(b, " | [1-9] [0-9]{%zu,}", la);
}

/* Integers lo .. hi (each bound optional) as one GBNF item. */
static void int_range(struct ctx *c, struct buf *b, bool has_lo, int64_t lo, bool has_hi,
                      int64_t hi)
{
    (void)c;
    /* magnitude of a negative x, exact for INT64_MIN */
#define NEG_MAG(x) ((uint64_t)(-((x) + 1)) + 1)
    b_item(b, "(");
    bool alt = false;
    if (!has_lo || lo < 0) {
        uint64_t from = has_hi && hi < -1 ? NEG_MAG(hi) : 1;
        b_item(b, "\"-\" (");
        magnitudes(b, from, has_lo ? NEG_MAG(lo) : 0, !has_lo);
        b_puts(b, " )");
        alt = true;
    }
    if (!has_hi || hi >= 0) {
        if (alt)
            b_puts(b, " |");
        magnitudes(b, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? (uint64_t)hi : 0, !has_hi);
    }
    b_puts(b, " )");
#undef NEG_MAG
}

/* A bound keyword as an integer: the least integer the bound admits from
 * below (lower) or the greatest from above. Returns 0, 1 when no integer can
 * pass it (exclusiveMaximum of INT64_MIN), or a negative errno. */
static int int_bound(struct ctx *c, json_object *v, const char *kw, bool lower, bool exclusive,
                     int64_t *out)
{
    if (json_object_is_type(v, json_type_boolean))
        return fail(c, -EINVAL, kw, "the boolean form (draft 4) is unsupported");
    if (json_object_is_type(v, json_type_int)) {
        int64_t x = json_object_get_int64(v);
        if (x == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX)
            return fail(c, -EINVAL, kw, "outside the 64-bit integer range");
        if (exclusive) {
            if (lower ? x == INT64_MAX : x == INT64_MIN)
                return 1;
            x += lower ? 1 : -1;
        }
        *out = x;
        return 0;
    }
    if (!json_object_is_type(v, json_type_double))
        return fail(c, -EINVAL, kw, "must be a number");
    double d = json_object_get_double(v);
    if (!isfinite(d) || d < -9.2e18 || d > 9.2e18)
        return fail(c, -EINVAL, kw, "outside the 64-bit integer range");
    double r = lower ? ceil(d) : floor(d);
    if (exclusive && r == d)
        r += lower ? 1 : -1;
    *out = (int64_t)r;
    return 0;
}

static int gen_integer(struct ctx *c, json_object *s, struct buf *out)
{
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    static const struct {
        const char *kw;
        bool lower, exclusive;
    } bounds[] = {{"minimum", true, false}, {"exclusiveMinimum", true, true},
                  {"maximum", false, false}, {"exclusiveMaximum", false, true}};
    for (size_t i = 0; i < 4; i++) {
        json_object *v;
        if (!json_object_object_get_ex(s, bounds[i].kw, &v))
            continue;
        int64_t x;
        int r = int_bound(c, v, bounds[i].kw, bounds[i].lower, bounds[i].exclusive, &x);
        if (r < 0)
            return r;
        if (r > 0)
            return fail(c, -EINVAL, bounds[i].kw, "no integer is in the range");
        if (bounds[i].lower) {
            lo = has_lo && lo > x ? lo : x;
            has_lo = true;
        } else {
            hi = has_hi && hi < x ? hi : x;
            has_hi = true;
        }
    }
    if (has_lo && has_hi && lo > hi)
        return fail(c, -EINVAL, json_object_object_get_ex(s, "minimum", NULL) ? "minimum"
                                                                               : "exclusiveMinimum",
                    "no integer is in the range");
    if (!has_lo && !has_hi)
        use(c, out, P_INTEGER);
    else
        int_range(c, out, has_lo, lo, has_hi, hi);
    return 0;
}

/* ---- numbers ------------------------------------------------------------------- */

/* Fraction digits: any ("." [0-9]+)?, zero-valued only, or with a nonzero
 * digit. */
enum frac { F_ANY, F_ZERO, F_NONZERO };

static void frac(struct buf *b, enum frac f)
{
    switch (f) {
    case F_ANY: b_item(b, "( \".\" [0-9]+ )?"); break;
    case F_ZERO: b_item(b, "( \".\" \"0\"+ )?"); break;
    case F_NONZERO: b_item(b, "\".\" [0-9]* [1-9] [0-9]*"); break;
    }
}

/* One alternative: an integer part of magnitude from .. to (to_inf: no
 * bound) followed by fraction f, for magnitudes m = I.F. */
static void mag_alt(struct buf *b, bool *alt, uint64_t from, uint64_t to, bool to_inf,
                    enum frac f)
{
    if (!to_inf && from > to)
        return;
    if (*alt)
        b_puts(b, " |");
    *alt = true;
    b_item(b, "(");
    magnitudes(b, from, to, to_inf);
    b_puts(b, " )");
    frac(b, f);
}

/* Magnitudes x = I.F (no exponent) with x > lo or x >= lo, and x < hi or x <= hi
 * (hi_inf: no upper bound), lo <= hi integers >= 0, as alternatives. A
 * magnitude's integer part is I, so x >= k is I >= k, x > k is I > k or
 * I = k with a nonzero fraction, x <= k is I < k or I = k with a zero
 * fraction, x < k is I < k. */
static void mag_range(struct buf *b, bool *alt, uint64_t lo, bool lo_ex, uint64_t hi, bool hi_inf,
                      bool hi_ex)
{
    if (hi_inf) {
        if (lo_ex) {
            mag_alt(b, alt, lo, lo, false, F_NONZERO);
            mag_alt(b, alt, lo + 1, 0, true, F_ANY);
        } else {
            mag_alt(b, alt, lo, 0, true, F_ANY);
        }
        return;
    }
    if (lo == hi) {
        if (!lo_ex && !hi_ex)
            mag_alt(b, alt, lo, lo, false, F_ZERO);
        return;
    }
    /* lo < hi: I = lo, lo < I < hi, I = hi */
    mag_alt(b, alt, lo, lo, false, lo_ex ? F_NONZERO : F_ANY);
    if (hi - lo > 1)
        mag_alt(b, alt, lo + 1, hi - 1, false, F_ANY);
    if (!hi_ex)
        mag_alt(b, alt, hi, hi, false, F_ZERO);
}

/* A bound of a number range: integral values in the int64 range only. */
static int num_bound(struct ctx *c, json_object *v, const char *kw, int64_t *out)
{
    if (json_object_is_type(v, json_type_boolean))
        return fail(c, -EINVAL, kw, "the boolean form (draft 4) is unsupported");
    if (json_object_is_type(v, json_type_int))
        return int_bound(c, v, kw, true, false, out);
    if (!json_object_is_type(v, json_type_double))
        return fail(c, -EINVAL, kw, "must be a number");
    double d = json_object_get_double(v);
    if (!isfinite(d) || d != floor(d))
        return fail(c, -EINVAL, kw,
                    "a \"number\" range with a bound that is not an integer is unsupported");
    return int_bound(c, v, kw, true, false, out);
}

/* "number" with minimum/maximum/exclusive*: exact for integral bounds, as
 * numbers written without an exponent (1.5, never 15e-1): the sign, then
 * the magnitude's integer part and fraction against each bound (mag_range).
 * Zero is written unsigned (-0 is not taken). A bound that is not an
 * integer is refused: its fraction digits would have to be compared too. */
static int gen_number(struct ctx *c, json_object *s, struct buf *out)
{
    bool has_lo = false, has_hi = false, lo_ex = false, hi_ex = false;
    int64_t lo = 0, hi = 0;
    static const struct {
        const char *kw;
        bool lower, exclusive;
    } bounds[] = {{"minimum", true, false}, {"exclusiveMinimum", true, true},
                  {"maximum", false, false}, {"exclusiveMaximum", false, true}};
    for (size_t i = 0; i < 4; i++) {
        json_object *v;
        if (!json_object_object_get_ex(s, bounds[i].kw, &v))
            continue;
        int64_t x;
        int r = num_bound(c, v, bounds[i].kw, &x);
        if (r < 0)
            return r;
        if (bounds[i].lower) {
            if (!has_lo || x > lo || (x == lo && bounds[i].exclusive)) {
                lo = x;
                lo_ex = bounds[i].exclusive;
            }
            has_lo = true;
        } else {
            if (!has_hi || x < hi || (x == hi && bounds[i].exclusive)) {
                hi = x;
                hi_ex = bounds[i].exclusive;
            }
            has_hi = true;
        }
    }
    if (!has_lo && !has_hi) {
        use(c, out, P_NUMBER);
        return 0;
    }
    if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_ex || hi_ex))))
        return fail(c, -EINVAL, NULL, "no number is in the range of minimum and maximum");
#define NEG_MAG(x) ((uint64_t)(-((x) + 1)) + 1)
    bool alt = false;
    b_item(out, "(");
    /* negatives: v = -x, x > 0; v >= lo is x <= -lo, v <= hi is x >= -hi */
    if (!has_lo || lo < 0) {
        struct buf neg = {0};
        bool nalt = false;
        uint64_t xlo = 0;
        bool xlo_ex = true; /* x > 0 */
        if (has_hi && hi < 0) {
            xlo = NEG_MAG(hi);
            xlo_ex = hi_ex;
        } else if (has_hi && hi == 0) {
            xlo_ex = true;
        }
        mag_range(&neg, &nalt, xlo, xlo_ex, has_lo ? NEG_MAG(lo) : 0, !has_lo, lo_ex);
        if (neg.err) {
            out->err = neg.err;
        } else if (nalt) {
            b_item(out, "\"-\" (");
            b_puts(out, neg.p);
            b_puts(out, " )");
            alt = true;
        }
        free(neg.p);
    }
    /* the rest: v = x >= 0 */
    if (!has_hi || hi > 0 || (hi == 0 && !hi_ex)) {
        uint64_t xlo = has_lo && lo > 0 ? (uint64_t)lo : 0;
        bool xlo_ex = has_lo && lo >= 0 && lo_ex;
        struct buf pos = {0};
        bool palt = false;
        mag_range(&pos, &palt, xlo, xlo_ex, has_hi ? (uint64_t)hi : 0, !has_hi, hi_ex);
        if (pos.err) {
            out->err = pos.err;
        } else if (palt) {
            if (alt)
                b_puts(out, " |");
            b_puts(out, " ");
            b_puts(out, pos.p);
        }
        free(pos.p);
    }
    b_puts(out, " )");
#undef NEG_MAG
    return 0;
}

/* ---- strings ------------------------------------------------------------------- */

static int gen_pattern(struct ctx *c, json_object *s, const char *hint, struct buf *out);

static int gen_string(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    json_object *v;
    uint64_t m = 0, n = UINT64_MAX;
    bool has_len = false;
    if (json_object_object_get_ex(s, "minLength", &v)) {
        if (get_count(c, v, "minLength", &m) < 0)
            return -EINVAL;
        has_len = true;
    }
    if (json_object_object_get_ex(s, "maxLength", &v)) {
        if (get_count(c, v, "maxLength", &n) < 0)
            return -EINVAL;
        has_len = true;
    }
    if (m > n)
        return fail(c, -EINVAL, "minLength", "is greater than maxLength: no string matches");
    json_object *fmt = NULL, *pat = NULL;
    json_object_object_get_ex(s, "format", &fmt);
    json_object_object_get_ex(s, "pattern", &pat);
    if ((fmt || pat) && has_len)
        return fail(c, -EINVAL, json_object_object_get_ex(s, "minLength", NULL) ? "minLength"
                                                                                 : "maxLength",
                    "unsupported together with %s", fmt ? "format" : "pattern");
    if (fmt && pat)
        return fail(c, -EINVAL, "pattern", "unsupported together with format");
    if (fmt) {
        if (!json_object_is_type(fmt, json_type_string))
            return fail(c, -EINVAL, "format", "must be a string");
        const char *f = json_object_get_string(fmt);
        static const struct {
            const char *name;
            enum prim p;
        } formats[] = {{"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME},
                       {"uuid", P_UUID}, {"email", P_EMAIL}};
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
            if (!strcmp(f, formats[i].name)) {
                b_item(out, "\"\\\"\"");
                use(c, out, formats[i].p);
                b_item(out, "\"\\\"\"");
                return 0;
            }
        }
        return fail(c, -EINVAL, "format", "unsupported format \"%s\"", f);
    }
    if (pat)
        return gen_pattern(c, pat, hint, out);
    if (!has_len) {
        use(c, out, P_STRING);
        return 0;
    }
    c->used |= 1u << P_CHAR;
    b_item(out, "\"\\\"\"");
    int r = rep(c, out, "char", m, n, "minLength", "maxLength");
    b_item(out, "\"\\\"\"");
    return r;
}

/* ---- patterns ------------------------------------------------------------------ */

/* The regex grammar's text is GBNF for the pattern's strings as characters;
 * inside a JSON string a character is written raw unless it is a quote, a
 * backslash or a control, which must be escaped. So the regex grammar is
 * copied with its rule names prefixed, and every terminal that can match
 * one of those 34 characters rewritten: a literal's such characters as
 * their escapes, a class as the class without them or their escapes, "."
 * as a JSON string char. */

/* The JSON escapes of code point cp (< 0x20, '"' or '\\') as GBNF: its
 * short form where it has one, and \u00XX with either case of hex digit. */
static void esc_lit(struct buf *b, unsigned cp)
{
    static const char hex[] = "0123456789abcdef";
    const char *short_form = cp == '"' ? "\"\\\\\\\"\"" : cp == '\\' ? "\"\\\\\\\\\""
                             : cp == '\b' ? "\"\\\\b\"" : cp == '\f' ? "\"\\\\f\""
                             : cp == '\n' ? "\"\\\\n\"" : cp == '\r' ? "\"\\\\r\""
                             : cp == '\t' ? "\"\\\\t\"" : NULL;
    char lo = hex[cp & 15], up = (char)(lo >= 'a' ? lo - 32 : lo);
    b_item(b, "(");
    if (short_form) {
        b_item(b, short_form);
        b_puts(b, " |");
    }
    if (lo == up)
        b_printf(b, " \"\\\\u00%c%c\"", hex[cp >> 4], lo);
    else
        b_printf(b, " \"\\\\u00%c\" [%c%c]", hex[cp >> 4], lo, up);
    b_puts(b, " )");
}

static bool needs_esc(unsigned cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

/* One character of GBNF literal or class text at *p (escapes decoded); 0
 * at a malformed escape (then *ok is false). */
static unsigned gbnf_char(const char **p, const char *end, bool *ok)
{
    const unsigned char *s = (const unsigned char *)*p;
    if (*s != '\\') {
        unsigned cp = *s, n = 0;
        if (cp >= 0xf0)
            cp &= 7, n = 3;
        else if (cp >= 0xe0)
            cp &= 15, n = 2;
        else if (cp >= 0xc0)
            cp &= 31, n = 1;
        s++;
        while (n-- && (const char *)s < end)
            cp = cp << 6 | (*s++ & 63);
        *p = (const char *)s;
        return cp;
    }
    s++;
    if ((const char *)s >= end) {
        *ok = false;
        return 0;
    }
    unsigned e = *s++, digits = 0;
    switch (e) {
    case 'n': *p = (const char *)s; return '\n';
    case 'r': *p = (const char *)s; return '\r';
    case 't': *p = (const char *)s; return '\t';
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: *p = (const char *)s; return e;
    }
    unsigned cp = 0;
    for (unsigned i = 0; i < digits; i++, s++) {
        if ((const char *)s >= end) {
            *ok = false;
            return 0;
        }
        unsigned h = *s;
        unsigned d = h >= '0' && h <= '9' ? h - '0'
                     : (h | 32) >= 'a' && (h | 32) <= 'f' ? (h | 32) - 'a' + 10 : 99;
        if (d > 15) {
            *ok = false;
            return 0;
        }
        cp = cp << 4 | d;
    }
    *p = (const char *)s;
    return cp;
}

/* A code point in a class, escaped. */
static void class_char(struct buf *b, unsigned cp)
{
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        b_printf(b, "%c", (char)cp);
    else if (cp < 0x80)
        b_printf(b, "\\x%02X", cp);
    else if (cp < 0x10000)
        b_printf(b, "\\u%04X", cp);
    else
        b_printf(b, "\\U%08X", cp);
}

/* Rewrites a class [..] or [^..] (text from p to its ']') for JSON string
 * content; returns the position after it, NULL when malformed. */
static const char *rewrite_class(struct ctx *c, const char *p, const char *end, struct buf *b)
{
    bool neg = false, ok = true;
    p++; /* '[' */
    if (p < end && *p == '^') {
        neg = true;
        p++;
    }
    struct range {
        unsigned lo, hi;
    } *r = NULL;
    size_t nr = 0, cap = 0;
    while (p < end && *p != ']') {
        unsigned lo = gbnf_char(&p, end, &ok), hi = lo;
        if (p + 1 < end && *p == '-' && p[1] != ']') {
            p++;
            hi = gbnf_char(&p, end, &ok);
        }
        if (!ok || hi < lo)
            break;
        if (nr == cap) {
            cap = cap ? cap * 2 : 8;
            struct range *t = realloc(r, cap * sizeof *r);
            if (!t) {
                free(r);
                b->err = -ENOMEM;
                return NULL;
            }
            r = t;
        }
        r[nr++] = (struct range){lo, hi};
    }
    if (!ok || p >= end) {
        free(r);
        return NULL;
    }
    p++; /* ']' */
    (void)c;
    /* which of the 34 escaped characters the class matches */
    bool esc[0x5d] = {false};
    for (unsigned cp = 0; cp < 0x5d; cp++) {
        if (!needs_esc(cp))
            continue;
        bool in = false;
        for (size_t i = 0; i < nr; i++)
            in |= cp >= r[i].lo && cp <= r[i].hi;
        esc[cp] = in != neg;
    }
    b_item(b, "(");
    if (neg) {
        /* add them to the negated set */
        b_puts(b, " [^\\x00-\\x1F\\x22\\x5C");
        for (size_t i = 0; i < nr; i++) {
            class_char(b, r[i].lo);
            if (r[i].hi != r[i].lo) {
                b_puts(b, "-");
                class_char(b, r[i].hi);
            }
        }
        b_puts(b, "]");
    } else {
        /* take them out of the ranges: the parts between them */
        static const struct range keep[] = {{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x10ffff}};
        bool any = false;
        struct buf cls = {0};
        for (size_t i = 0; i < nr; i++) {
            for (size_t k = 0; k < 3; k++) {
                unsigned lo = r[i].lo > keep[k].lo ? r[i].lo : keep[k].lo;
                unsigned hi = r[i].hi < keep[k].hi ? r[i].hi : keep[k].hi;
                if (lo > hi)
                    continue;
                class_char(&cls, lo);
                if (hi != lo) {
                    b_puts(&cls, "-");
                    class_char(&cls, hi);
                }
                any = true;
            }
        }
        if (any) {
            b_item(b, "[");
            b_puts(b, cls.p);
            b_puts(b, "]");
        }
        if (cls.err)
            b->err = cls.err;
        free(cls.p);
        if (!any) {
            bool some = false;
            for (unsigned cp = 0; cp < 0x5d; cp++)
                some |= esc[cp];
            if (!some)
                b_item(b, "[^\\x00-\\U0010FFFF]"); /* matches nothing, as the class did */
        }
    }
    bool first = !(neg || b->p[b->n - 1] == ']');
    for (unsigned cp = 0; cp < 0x5d; cp++) {
        if (!esc[cp])
            continue;
        if (!first)
            b_puts(b, " |");
        first = false;
        esc_lit(b, cp);
    }
    b_puts(b, " )");
    free(r);
    return p;
}

/* Copies the regex GBNF into rules of ours: names prefixed with pre, root
 * becoming pre itself; returns 0 or a negative errno. */
static int embed_regex(struct ctx *c, const char *g, int self)
{
    const char *pre = c->rules[self].name;
    size_t len = strlen(g);
    const char *p = g, *end = g + len;
    struct buf body = {0};
    int cur = -1, r = 0;
    char *rname = NULL;
#define IS_NAME(ch) (((ch) >= 'a' && (ch) <= 'z') || ((ch) >= 'A' && (ch) <= 'Z') || \
                     ((ch) >= '0' && (ch) <= '9') || (ch) == '_' || (ch) == '-')
    while (p < end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '#') {
            while (p < end && *p != '\n')
                p++;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            p++;
            continue;
        }
        if (IS_NAME(ch)) {
            const char *s = p;
            while (p < end && IS_NAME((unsigned char)*p))
                p++;
            size_t n = (size_t)(p - s);
            const char *q = p;
            while (q < end && (*q == ' ' || *q == '\t'))
                q++;
            bool def = q + 2 < end && q[0] == ':' && q[1] == ':' && q[2] == '=';
            free(rname);
            if (n == 4 && !memcmp(s, "root", 4))
                rname = strdup(pre);
            else if (asprintf(&rname, "%s-%.*s", pre, (int)n, s) < 0)
                rname = NULL;
            if (!rname) {
                r = -ENOMEM;
                break;
            }
            if (def) {
                if (cur >= 0 && (r = rule_set(c, cur, &body)) < 0)
                    break;
                /* the rule keeps exactly this name: reserve it */
                if (rule_find(c, rname) >= 0 && strcmp(rname, pre)) {
                    r = fail(c, -EINVAL, "pattern", "rule name clash in the regex grammar");
                    break;
                }
                cur = strcmp(rname, pre) ? rule_new(c, rname) : self;
                if (cur < 0) {
                    r = fail(c, cur, NULL, "out of memory");
                    break;
                }
                p = q + 3;
            } else {
                b_item(&body, rname);
            }
            continue;
        }
        if (ch == '"') {
            /* a literal: its characters one by one, escaped ones as escapes */
            bool ok = true, open = false;
            p++;
            struct buf lit = {0};
            b_item(&body, "(");
            while (p < end && *p != '"') {
                unsigned cp = gbnf_char(&p, end, &ok);
                if (!ok)
                    break;
                if (needs_esc(cp)) {
                    if (open)
                        b_put(&lit, "\"", 1);
                    open = false;
                    if (lit.p)
                        b_puts(&body, lit.p);
                    lit.n = 0;
                    esc_lit(&body, cp);
                    continue;
                }
                if (!open)
                    b_put(&lit, " \"", 2);
                open = true;
                class_char(&lit, cp); /* \x.. or \u.. escapes are literal escapes too */
            }
            if (open)
                b_put(&lit, "\"", 1);
            if (lit.n)
                b_puts(&body, lit.p);
            if (lit.err)
                body.err = lit.err;
            free(lit.p);
            b_puts(&body, " )");
            if (!ok || p >= end) {
                r = fail(c, -EINVAL, "pattern", "unreadable regex grammar");
                break;
            }
            p++;
            continue;
        }
        if (ch == '[') {
            p = rewrite_class(c, p, end, &body);
            if (!p) {
                r = body.err ? buf_fail(c, &body)
                             : fail(c, -EINVAL, "pattern", "unreadable regex grammar");
                break;
            }
            continue;
        }
        if (ch == '.') {
            c->used |= 1u << P_CHAR;
            b_item(&body, "char");
            p++;
            continue;
        }
        if (ch == '{') {
            /* a repetition count, as it is */
            const char *s = p;
            while (p < end && *p != '}')
                p++;
            if (p < end)
                p++;
            b_put(&body, s, (size_t)(p - s));
            continue;
        }
        if (ch == '(' || ch == ')' || ch == '|' || ch == '*' || ch == '+' || ch == '?') {
            if (ch == '(' || ch == '|')
                b_item(&body, ch == '(' ? "(" : "|");
            else
                b_put(&body, p, 1);
            p++;
            continue;
        }
        r = fail(c, -EINVAL, "pattern", "unreadable regex grammar at byte %zu",
                 (size_t)(p - g));
        break;
    }
#undef IS_NAME
    if (!r && cur >= 0)
        r = rule_set(c, cur, &body);
    else if (!r && cur < 0)
        r = fail(c, -EINVAL, "pattern", "empty regex grammar");
    free(body.p);
    free(rname);
    return r;
}

static int gen_pattern(struct ctx *c, json_object *pat, const char *hint, struct buf *out)
{
    if (!json_object_is_type(pat, json_type_string))
        return fail(c, -EINVAL, "pattern", "must be a string");
    const char *re = json_object_get_string(pat);
    size_t n = (size_t)json_object_get_string_len(pat);
    /* JSON Schema's pattern is a search, not a match of the whole string:
     * regex.c's search form (what is not anchored may have anything there,
     * each top-level alternative by its own anchors). */
    char *g = NULL, rerr[L8G_ERRLEN] = "";
    int r = l8g_regex_to_gbnf_rules(re, n, "root", 0, &g, rerr);
    if (r < 0)
        return fail(c, r, "pattern", "%s", rerr);
    char *h = hint_join(hint, "pattern");
    int rule = h ? rule_new(c, h) : -ENOMEM;
    if (rule < 0) {
        free(h);
        free(g);
        return fail(c, -ENOMEM, NULL, "out of memory");
    }
    r = embed_regex(c, g, rule);
    free(g);
    free(h);
    if (r < 0)
        return r;
    b_item(out, "\"\\\"\"");
    b_item(out, c->rules[rule].name);
    b_item(out, "\"\\\"\"");
    return 0;
}

/* ---- objects ------------------------------------------------------------------- */

/* Names of the listed properties as a trie over code points, for the names
 * an extra member may not have. */
struct trie {
    struct tnode {
        unsigned cp;
        int child, next; /* first child, next sibling: -1 none */
        bool end;
    } *n;
    int len, cap;
};

static int trie_add(struct trie *t, const char *s)
{
    if (!t->len) {
        t->n = malloc(16 * sizeof *t->n);
        if (!t->n)
            return -ENOMEM;
        t->cap = 16;
        t->n[0] = (struct tnode){0, -1, -1, false};
        t->len = 1;
    }
    int at = 0;
    const char *end = s + strlen(s);
    for (const char *p = s; p < end;) {
        bool ok = true;
        unsigned cp;
        if (*p == '\\') { /* gbnf_char reads escapes; a name's backslash is a character */
            cp = '\\';
            p++;
        } else {
            cp = gbnf_char(&p, end, &ok);
        }
        int k = t->n[at].child;
        while (k >= 0 && t->n[k].cp != cp)
            k = t->n[k].next;
        if (k < 0) {
            if (t->len == t->cap) {
                struct tnode *m = realloc(t->n, (size_t)t->cap * 2 * sizeof *m);
                if (!m)
                    return -ENOMEM;
                t->n = m;
                t->cap *= 2;
            }
            k = t->len++;
            t->n[k] = (struct tnode){cp, -1, t->n[at].child, false};
            t->n[at].child = k;
        }
        at = k;
    }
    t->n[at].end = true;
    return 0;
}

/* The rest of a name after trie node at that makes it none of the names:
 * a listed name's next character and the rest, or another character and
 * anything, or (where no name ends) nothing more. */
static void trie_not(struct ctx *c, const struct trie *t, int at, struct buf *b)
{
    b_item(b, "(");
    for (int k = t->n[at].child; k >= 0; k = t->n[k].next) {
        b_item(b, "[");
        class_char(b, t->n[k].cp);
        b_puts(b, "]");
        trie_not(c, t, k, b);
        b_puts(b, " |");
    }
    b_item(b, "[^\\x00-\\x1F\\x22\\x5C");
    for (int k = t->n[at].child; k >= 0; k = t->n[k].next)
        class_char(b, t->n[k].cp);
    b_puts(b, "]");
    use(c, b, P_KEYCHAR);
    b_puts(b, "* )");
    if (!t->n[at].end)
        b_puts(b, "?");
}

struct member {
    const char *name;
    json_object *schema;
    bool required;
    int kv; /* its rule */
};

static bool in_required(json_object *req, const char *name)
{
    size_t n = req ? json_object_array_length(req) : 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(req, i)), name))
            return true;
    return false;
}

/* An object: the listed members in order, each required one present, the
 * optional ones each present or not, then any extra members additional-
 * Properties allows, commas only between members present. With members
 * kv1 .. kvn, A(i) = the members from i on, each after a comma (required
 * ones always, optional ones "( , kv )?", extras "( , kv )*"); the content
 * is one of kv_i A(i+1) for i up to the first required member (no earlier
 * member present, so kv_i comes first), or the extras alone when none is
 * required. So no leading, trailing or doubled comma can appear. */
static int gen_object(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    json_object *props = NULL, *req = NULL, *ap = NULL;
    json_object_object_get_ex(s, "properties", &props);
    json_object_object_get_ex(s, "required", &req);
    json_object_object_get_ex(s, "additionalProperties", &ap);
    if (props && !json_object_is_type(props, json_type_object))
        return fail(c, -EINVAL, "properties", "must be an object");
    if (req) {
        if (!json_object_is_type(req, json_type_array))
            return fail(c, -EINVAL, "required", "must be an array of strings");
        for (size_t i = 0; i < json_object_array_length(req); i++)
            if (!json_object_is_type(json_object_array_get_idx(req, i), json_type_string))
                return fail(c, -EINVAL, "required", "must be an array of strings");
    }
    bool extra_ok = !ap || !json_object_is_type(ap, json_type_boolean) ||
                    json_object_get_boolean(ap);
    if (ap && !json_object_is_type(ap, json_type_boolean) &&
        !json_object_is_type(ap, json_type_object))
        return fail(c, -EINVAL, "additionalProperties", "must be a schema");
    size_t np = props ? (size_t)json_object_object_length(props) : 0;
    size_t nreq = req ? json_object_array_length(req) : 0;
    struct member *m = calloc(np + nreq + 1, sizeof *m);
    struct trie names = {0};
    struct buf body = {0};
    int rc = 0, self = -1;
    size_t n = 0;
    if (!m)
        return fail(c, -ENOMEM, NULL, "out of memory");
    bool escaped_name = false;
    if (props) {
        json_object_object_foreach(props, k, v) {
            if (strlen(k) > KEY_MAX_EXCLUDED && extra_ok) {
                rc = fail(c, -E2BIG, "properties", "a property name longer than %d bytes is "
                          "unsupported with additionalProperties", KEY_MAX_EXCLUDED);
                goto out;
            }
            bool needs = false;
            for (const char *q = k; *q; q++)
                needs |= needs_esc((unsigned char)*q);
            escaped_name |= needs;
            if (!needs && (rc = trie_add(&names, k)) < 0) {
                rc = fail(c, rc, NULL, "out of memory");
                goto out;
            }
            bool r = in_required(req, k);
            if (json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v)) {
                if (r) {
                    size_t old = path_push(c, "properties");
                    path_push(c, k);
                    rc = fail(c, -EINVAL, NULL, "schema false matches nothing, and \"%s\" is "
                              "required", k);
                    path_pop(c, old);
                    goto out;
                }
                continue; /* may not appear: listed, so no extra member has its name */
            }
            m[n++] = (struct member){k, v, r, -1};
        }
    }
    /* required names that properties does not list: extra members that
     * must be there */
    for (size_t i = 0; i < nreq; i++) {
        const char *k = json_object_get_string(json_object_array_get_idx(req, i));
        bool seen = props && json_object_object_get_ex(props, k, NULL);
        for (size_t j = 0; j < n && !seen; j++)
            seen = !strcmp(m[j].name, k);
        if (seen)
            continue;
        if (!extra_ok) {
            rc = fail(c, -EINVAL, "required", "\"%s\" is not in properties and "
                      "additionalProperties is false: no object matches", k);
            goto out;
        }
        bool needs = false;
        for (const char *q = k; *q; q++)
            needs |= needs_esc((unsigned char)*q);
        escaped_name |= needs;
        if (!needs && (rc = trie_add(&names, k)) < 0) {
            rc = fail(c, rc, NULL, "out of memory");
            goto out;
        }
        m[n++] = (struct member){k, ap ? ap : NULL, true, -1};
    }
    (void)escaped_name;
    self = rule_new(c, hint);
    if (self < 0) {
        rc = fail(c, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* one rule per member: "name" ws ":" ws value */
    for (size_t i = 0; i < n; i++) {
        char *h = hint_join(hint, m[i].name), *hk = h ? hint_join(h, "kv") : NULL;
        struct buf kv = {0};
        if (!hk || (m[i].kv = rule_new(c, hk)) < 0) {
            free(h);
            free(hk);
            rc = fail(c, -ENOMEM, NULL, "out of memory");
            goto out;
        }
        json_object *ks = json_object_new_string(m[i].name);
        const char *kt = ks ? json_object_to_json_string_ext(ks, JSON_C_TO_STRING_PLAIN |
                                                                     JSON_C_TO_STRING_NOSLASHESCAPE)
                            : NULL;
        if (!kt) {
            json_object_put(ks);
            free(h);
            free(hk);
            rc = fail(c, -ENOMEM, NULL, "out of memory");
            goto out;
        }
        b_lit(&kv, kt, strlen(kt));
        json_object_put(ks);
        use(c, &kv, P_WS);
        b_item(&kv, "\":\"");
        use(c, &kv, P_WS);
        bool listed = props && json_object_object_get_ex(props, m[i].name, NULL);
        size_t old = listed ? path_push(c, "properties") : path_push(c, "additionalProperties");
        if (listed)
            path_push(c, m[i].name);
        if (m[i].schema)
            rc = gen_inner(c, m[i].schema, h, &kv);
        else
            use(c, &kv, P_VALUE);
        path_pop(c, old);
        free(h);
        free(hk);
        if (rc >= 0)
            rc = rule_set(c, m[i].kv, &kv);
        free(kv.p);
        if (rc < 0)
            goto out;
    }
    /* the extra members' rule */
    int xkv = -1;
    if (extra_ok) {
        char *hk = hint_join(hint, "additional-kv");
        struct buf kv = {0};
        if (!hk || (xkv = rule_new(c, hk)) < 0) {
            free(hk);
            rc = fail(c, -ENOMEM, NULL, "out of memory");
            goto out;
        }
        if (names.len) {
            /* a name none of the listed ones, written without escapes
             * (an escape could spell a listed name) */
            b_item(&kv, "\"\\\"\"");
            trie_not(c, &names, 0, &kv);
            b_item(&kv, "\"\\\"\"");
        } else {
            use(c, &kv, P_STRING);
        }
        use(c, &kv, P_WS);
        b_item(&kv, "\":\"");
        use(c, &kv, P_WS);
        if (ap && !json_object_is_type(ap, json_type_boolean)) {
            size_t old = path_push(c, "additionalProperties");
            char *h = hint_join(hint, "additional");
            rc = h ? gen_inner(c, ap, h, &kv) : fail(c, -ENOMEM, NULL, "out of memory");
            free(h);
            path_pop(c, old);
        } else {
            use(c, &kv, P_VALUE);
        }
        free(hk);
        if (rc >= 0)
            rc = rule_set(c, xkv, &kv);
        free(kv.p);
        if (rc < 0)
            goto out;
    }
    size_t first_req = n;
    for (size_t i = 0; i < n && first_req == n; i++)
        if (m[i].required)
            first_req = i;
    b_item(&body, "\"{\"");
    use(c, &body, P_WS);
    if (n || xkv >= 0) {
        if (first_req == n)
            b_item(&body, "(");
        b_item(&body, "(");
        size_t last = first_req == n ? n : first_req + 1;
        for (size_t i = 0; i < last; i++) {
            if (i)
                b_puts(&body, " |");
            b_item(&body, c->rules[m[i].kv].name);
            for (size_t j = i + 1; j < n; j++) {
                if (!m[j].required)
                    b_item(&body, "(");
                use(c, &body, P_WS);
                b_item(&body, "\",\"");
                use(c, &body, P_WS);
                b_item(&body, c->rules[m[j].kv].name);
                if (!m[j].required)
                    b_puts(&body, " )?");
            }
            if (xkv >= 0) {
                b_item(&body, "(");
                use(c, &body, P_WS);
                b_item(&body, "\",\"");
                use(c, &body, P_WS);
                b_item(&body, c->rules[xkv].name);
                b_puts(&body, " )*");
            }
        }
        if (first_req == n && xkv >= 0) {
            if (n)
                b_puts(&body, " |");
            b_item(&body, c->rules[xkv].name);
            b_item(&body, "(");
            use(c, &body, P_WS);
            b_item(&body, "\",\"");
            use(c, &body, P_WS);
            b_item(&body, c->rules[xkv].name);
            b_puts(&body, " )*");
        }
        b_puts(&body, " )");
        use(c, &body, P_WS);
        if (first_req == n)
            b_puts(&body, " )?");
    }
    b_item(&body, "\"}\"");
    rc = rule_set(c, self, &body);
    if (rc >= 0)
        b_item(out, c->rules[self].name);
out:
    free(body.p);
    free(names.n);
    free(m);
    return rc;
}

/* ---- arrays -------------------------------------------------------------------- */

static int gen_array(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    json_object *items = NULL, *prefix = NULL, *v;
    json_object_object_get_ex(s, "items", &items);
    json_object_object_get_ex(s, "prefixItems", &prefix);
    if (items && json_object_is_type(items, json_type_array))
        return fail(c, -EINVAL, "items", "the array form (draft 2019 and before) is "
                    "unsupported: use prefixItems");
    if (prefix && !json_object_is_type(prefix, json_type_array))
        return fail(c, -EINVAL, "prefixItems", "must be an array of schemas");
    uint64_t lo = 0, hi = UINT64_MAX;
    if (json_object_object_get_ex(s, "minItems", &v) && get_count(c, v, "minItems", &lo) < 0)
        return -EINVAL;
    if (json_object_object_get_ex(s, "maxItems", &v) && get_count(c, v, "maxItems", &hi) < 0)
        return -EINVAL;
    size_t k = prefix ? json_object_array_length(prefix) : 0;
    bool no_more = items && json_object_is_type(items, json_type_boolean) &&
                   !json_object_get_boolean(items);
    if (no_more && hi > k)
        hi = k;
    if (lo > hi)
        return fail(c, -EINVAL, "minItems", no_more ? "is more than prefixItems allows with "
                    "items false: no array matches" : "is greater than maxItems: no array "
                    "matches");
    /* a prefix item false: arrays stop before it */
    for (size_t i = 0; i < k && i < hi; i++) {
        json_object *p = json_object_array_get_idx(prefix, i);
        if (json_object_is_type(p, json_type_boolean) && !json_object_get_boolean(p)) {
            hi = i;
            if (lo > hi) {
                size_t old = path_push_idx(c, "prefixItems", i);
                int r = fail(c, -EINVAL, NULL, "schema false matches nothing, and minItems "
                             "asks for item %zu", i);
                path_pop(c, old);
                return r;
            }
        }
    }
    int self = rule_new(c, hint);
    if (self < 0)
        return fail(c, -ENOMEM, NULL, "out of memory");
    struct buf body = {0};
    int rc = 0;
    char **elem = calloc(k + 1, sizeof *elem);
    if (!elem)
        return fail(c, -ENOMEM, NULL, "out of memory");
    size_t kk = k < hi ? k : (size_t)hi; /* prefix items that can appear */
    for (size_t i = 0; i < kk && rc >= 0; i++) {
        struct buf e = {0};
        size_t old = path_push_idx(c, "prefixItems", i);
        char *h = hint_idx(hint, "", i);
        rc = h ? gen_inner(c, json_object_array_get_idx(prefix, i), h, &e)
               : fail(c, -ENOMEM, NULL, "out of memory");
        free(h);
        path_pop(c, old);
        if (rc >= 0 && e.err)
            rc = buf_fail(c, &e);
        elem[i] = e.p;
    }
    bool tail = hi > k;
    if (rc >= 0 && tail) {
        struct buf e = {0};
        if (items && !json_object_is_type(items, json_type_boolean)) {
            size_t old = path_push(c, "items");
            char *h = hint_join(hint, "item");
            rc = h ? gen_inner(c, items, h, &e) : fail(c, -ENOMEM, NULL, "out of memory");
            free(h);
            path_pop(c, old);
        } else {
            use(c, &e, P_VALUE);
        }
        if (rc >= 0 && e.err)
            rc = buf_fail(c, &e);
        if (rc >= 0 && strchr(e.p, ' ')) {
            /* written twice below: a rule of its own */
            char *h = hint_join(hint, "item");
            int ir = h ? rule_new(c, h) : -ENOMEM;
            free(h);
            rc = ir < 0 ? fail(c, -ENOMEM, NULL, "out of memory") : rule_set(c, ir, &e);
            if (rc >= 0)
                b_puts(&e, c->rules[ir].name);
            if (rc >= 0 && e.err)
                rc = buf_fail(c, &e);
        }
        elem[k] = e.p;
    }
    if (rc < 0)
        goto out;
    b_item(&body, "\"[\"");
    use(c, &body, P_WS);
    if (hi > 0) {
        if (lo == 0)
            b_item(&body, "(");
        /* the prefix items, each one after the first optional beyond minItems */
        size_t open = 0;
        for (size_t i = 0; i < kk; i++) {
            if (i) {
                if (i >= lo) {
                    b_item(&body, "(");
                    open++;
                }
                use(c, &body, P_WS);
                b_item(&body, "\",\"");
                use(c, &body, P_WS);
            }
            b_item(&body, elem[i]);
        }
        if (tail) {
            /* the items after the prefix: (sep item){a,b}; with no prefix the
             * first has no comma */
            uint64_t a = lo > k ? lo - k : 0, b = hi == UINT64_MAX ? hi : hi - k;
            if (k == 0) {
                b_item(&body, elem[k]);
                a = a ? a - 1 : 0;
                b = b == UINT64_MAX ? b : b - 1;
            }
            if (b > 0) {
                struct buf grp = {0};
                b_puts(&grp, "(");
                use(c, &grp, P_WS);
                b_item(&grp, "\",\"");
                use(c, &grp, P_WS);
                b_item(&grp, elem[k]);
                b_puts(&grp, " )");
                if (grp.err)
                    body.err = grp.err;
                else
                    rc = rep(c, &body, grp.p, a, b, "minItems", "maxItems");
                free(grp.p);
            }
        }
        for (size_t i = 0; i < open; i++)
            b_puts(&body, " )?");
        use(c, &body, P_WS);
        if (lo == 0)
            b_puts(&body, " )?");
    }
    b_item(&body, "\"]\"");
    if (rc >= 0)
        rc = rule_set(c, self, &body);
    if (rc >= 0)
        b_item(out, c->rules[self].name);
out:
    for (size_t i = 0; i <= k; i++)
        free(elem[i]);
    free(elem);
    free(body.p);
    return rc;
}

/* ---- $ref ---------------------------------------------------------------------- */

/* The subschema a local reference names: "#", "#/$defs/NAME",
 * "#/definitions/NAME" (any JSON pointer into the document, in fact), with
 * ~0 ~1 and %XX unescaped. */
static int resolve(struct ctx *c, const char *ref, json_object **out)
{
    if (ref[0] != '#')
        return fail(c, -EINVAL, "$ref", "only references into this schema (\"#...\") are "
                    "supported, not \"%s\"", ref);
    json_object *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/')
        return fail(c, -EINVAL, "$ref", "unsupported reference \"%s\" (anchors are not "
                    "supported)", ref);
    while (*p) {
        p++; /* '/' */
        char seg[1024];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) {
                ch = p[1] == '0' ? '~' : '/';
                p++;
            } else if (ch == '%' && p[1] && p[2]) {
                char hx[3] = {p[1], p[2], 0}, *e;
                long v = strtol(hx, &e, 16);
                if (!*e) {
                    ch = (char)v;
                    p += 2;
                }
            }
            if (n + 1 >= sizeof seg)
                return fail(c, -EINVAL, "$ref", "reference \"%s\" is too long", ref);
            seg[n++] = ch;
        }
        seg[n] = 0;
        json_object *next = NULL;
        if (json_object_is_type(at, json_type_object)) {
            if (!json_object_object_get_ex(at, seg, &next))
                next = NULL;
        } else if (json_object_is_type(at, json_type_array)) {
            char *e;
            unsigned long i = strtoul(seg, &e, 10);
            if (*seg && !*e && i < json_object_array_length(at))
                next = json_object_array_get_idx(at, i);
        }
        if (!next)
            return fail(c, -EINVAL, "$ref", "\"%s\" names nothing in the schema", ref);
        at = next;
    }
    *out = at;
    return 0;
}

/* Writes the rule of target i: its subschema with the pointer as path. */
static int write_target(struct ctx *c, int i)
{
    if (c->nstack >= SCHEMA_MAX_DEPTH)
        return fail(c, -E2BIG, "$ref", "references nest deeper than %d", SCHEMA_MAX_DEPTH);
    c->refs[i].state = R_ACTIVE;
    c->nstack++;
    struct buf saved = c->path;
    c->path = (struct buf){0};
    b_puts(&c->path, c->refs[i].ptr + 1);
    struct buf body = {0};
    int rule = c->refs[i].rule;
    char *hint = strdup(c->rules[rule].name);
    int r = hint ? gen(c, c->refs[i].target, hint, &body)
                 : fail(c, -ENOMEM, NULL, "out of memory");
    free(hint);
    free(c->path.p);
    c->path = saved;
    c->nstack--;
    c->refs[i].state = R_DONE;
    if (r >= 0)
        r = rule_adopt(c, rule, &body);
    free(body.p);
    return r;
}

/* A $ref: the target's rule by name, written now when reached at the left
 * edge of the rule being written (so a cycle there is seen), else queued. A
 * rule per target, so a reference back to one is recursion in the grammar. */
static int gen_ref(struct ctx *c, json_object *s, struct buf *out)
{
    json_object *rv = NULL;
    json_object_object_get_ex(s, "$ref", &rv);
    if (!json_object_is_type(rv, json_type_string))
        return fail(c, -EINVAL, "$ref", "must be a string");
    const char *ref = json_object_get_string(rv);
    json_object *t;
    int r = resolve(c, ref, &t);
    if (r < 0)
        return r;
    bool left = c->left_base < c->nstack;
    int i = 0;
    while (i < c->nrefs && c->refs[i].target != t)
        i++;
    if (i == c->nrefs) {
        if (c->nrefs == c->refcap) {
            int cap = c->refcap ? c->refcap * 2 : 16;
            struct ref *nr = realloc(c->refs, (size_t)cap * sizeof *nr);
            if (!nr)
                return fail(c, -ENOMEM, NULL, "out of memory");
            c->refs = nr;
            c->refcap = cap;
        }
        /* the rule's name: the last segment of the pointer (a $defs name) */
        const char *slash = strrchr(ref, '/');
        int rule = rule_new(c, slash && slash[1] ? slash + 1 : "ref");
        char *ptr = strdup(ref);
        if (rule < 0 || !ptr) {
            free(ptr);
            return fail(c, -ENOMEM, NULL, "out of memory");
        }
        c->rules[rule].target = true;
        c->refs[c->nrefs++] = (struct ref){t, rule, R_PENDING, ptr};
    }
    if (left && c->refs[i].state == R_ACTIVE)
        return fail(c, -EINVAL, "$ref", "\"%s\" refers back to itself with nothing in "
                    "between (a cycle of references that matches nothing)", ref);
    if (left && c->refs[i].state == R_PENDING && (r = write_target(c, i)) < 0)
        return r;
    b_item(out, c->rules[c->refs[i].rule].name);
    return 0;
}

/* ---- combinations -------------------------------------------------------------- */

/* json-c objects made for merges: kept until the end (rules point into them
 * by name only, but their strings are read while generating). */
static json_object *merged_new(void) { return json_object_new_object(); }

static int put_copy(json_object *dst, const char *k, json_object *v)
{
    return json_object_object_add(dst, k, json_object_get(v)) < 0 ? -ENOMEM : 0;
}

/* A schema with the siblings of anyOf/oneOf (all but the combinator) and
 * one branch's keywords together: the branch and the siblings both hold
 * where no keyword is in both, and no keyword of one reads another's
 * (additionalProperties reads properties, items reads prefixItems). */
static int merge_branch(struct ctx *c, json_object *s, const char *comb, json_object *br,
                        json_object **out)
{
    if (json_object_is_type(br, json_type_boolean)) {
        if (!json_object_get_boolean(br))
            return 1; /* the branch matches nothing: drop it */
        br = NULL;
    } else if (!json_object_is_type(br, json_type_object)) {
        return fail(c, -EINVAL, NULL, "must be a schema");
    }
    json_object *m = merged_new();
    if (!m)
        return fail(c, -ENOMEM, NULL, "out of memory");
    json_object_object_foreach(s, k, v) {
        if (strcmp(k, comb) && put_copy(m, k, v) < 0)
            goto nomem;
    }
    if (br) {
        json_object_object_foreach(br, k2, v2) {
            json_object *old;
            enum kw kw = kw_of(k2);
            if (kw == K_ANNOTATION || kw == K_DEFS)
                continue;
            if (json_object_object_get_ex(m, k2, &old)) {
                if (json_object_equal(old, v2))
                    continue;
                bool arrays = json_object_is_type(old, json_type_array) &&
                              json_object_is_type(v2, json_type_array);
                bool objects = json_object_is_type(old, json_type_object) &&
                               json_object_is_type(v2, json_type_object);
                json_object *u = NULL;
                if (kw == K_REQUIRED && arrays) {
                    /* both lists required: their union */
                    u = json_object_new_array();
                    for (int side = 0; u && side < 2; side++) {
                        json_object *l = side ? v2 : old;
                        for (size_t i = 0; i < json_object_array_length(l); i++) {
                            json_object *x = json_object_array_get_idx(l, i);
                            bool have = false;
                            for (size_t j = 0; j < json_object_array_length(u) && !have; j++)
                                have = json_object_equal(json_object_array_get_idx(u, j), x);
                            if (!have)
                                json_object_array_add(u, json_object_get(x));
                        }
                    }
                } else if (kw == K_PROPERTIES && objects) {
                    /* both lists of properties: each name once, the same
                     * schema where both have it */
                    u = json_object_new_object();
                    for (int side = 0; u && side < 2; side++) {
                        json_object_object_foreach(side ? v2 : old, pk, pv) {
                            json_object *have;
                            if (!json_object_object_get_ex(u, pk, &have)) {
                                json_object_object_add(u, pk, json_object_get(pv));
                            } else if (!json_object_equal(have, pv)) {
                                json_object_put(u);
                                json_object_put(m);
                                return fail(c, -EINVAL, k2, "unsupported: \"%s\" is also "
                                            "beside %s, with another schema", pk, comb);
                            }
                        }
                    }
                } else {
                    json_object_put(m);
                    return fail(c, -EINVAL, k2, "unsupported: the keyword is also beside %s",
                                comb);
                }
                if (!u || json_object_object_add(m, k2, u) < 0) {
                    json_object_put(u);
                    goto nomem;
                }
                continue;
            }
            if (put_copy(m, k2, v2) < 0)
                goto nomem;
        }
        /* additionalProperties sees only its own side's properties: the
         * other side may list no name it does not */
        for (int side = 0; side < 2; side++) {
            json_object *a = side ? br : s, *b = side ? s : br, *ap, *ap_props = NULL, *b_props;
            if (!json_object_object_get_ex(a, "additionalProperties", &ap) ||
                (json_object_is_type(ap, json_type_boolean) && json_object_get_boolean(ap)) ||
                !json_object_object_get_ex(b, "properties", &b_props) ||
                !json_object_is_type(b_props, json_type_object))
                continue;
            json_object_object_get_ex(a, "properties", &ap_props);
            json_object_object_foreach(b_props, pk, pv) {
                (void)pv;
                if (!ap_props || !json_object_is_type(ap_props, json_type_object) ||
                    !json_object_object_get_ex(ap_props, pk, NULL)) {
                    json_object_put(m);
                    return fail(c, -EINVAL, "additionalProperties", "unsupported: on one side of "
                                "%s, and property \"%s\" only on the other", comb, pk);
                }
            }
        }
        /* so does items with prefixItems */
        if ((json_object_object_get_ex(s, "items", NULL) &&
             json_object_object_get_ex(br, "prefixItems", NULL) &&
             !json_object_object_get_ex(s, "prefixItems", NULL)) ||
            (json_object_object_get_ex(br, "items", NULL) &&
             json_object_object_get_ex(s, "prefixItems", NULL) &&
             !json_object_object_get_ex(br, "prefixItems", NULL))) {
            json_object_put(m);
            return fail(c, -EINVAL, "items", "unsupported: items and prefixItems on either side "
                        "of %s", comb);
        }
    }
    *out = m;
    return 0;
nomem:
    json_object_put(m);
    return fail(c, -ENOMEM, NULL, "out of memory");
}

/* anyOf / oneOf: the branches as alternatives. oneOf's "exactly one" cannot
 * be said in a context-free grammar (it is a difference of languages), so
 * oneOf is taken as anyOf: a value two branches match is accepted. */
static int gen_anyof(struct ctx *c, json_object *s, const char *comb, const char *hint,
                     struct buf *out)
{
    json_object *list;
    json_object_object_get_ex(s, comb, &list);
    if (!json_object_is_type(list, json_type_array) || !json_object_array_length(list))
        return fail(c, -EINVAL, comb, "must be a non-empty array of schemas");
    bool siblings = false;
    json_object_object_foreach(s, k, v) {
        (void)v;
        enum kw kw = kw_of(k);
        siblings |= strcmp(k, comb) && kw != K_ANNOTATION && kw != K_DEFS;
    }
    int self = rule_new(c, hint);
    if (self < 0)
        return fail(c, -ENOMEM, NULL, "out of memory");
    struct buf body = {0};
    int rc = 0;
    bool alt = false;
    size_t n = json_object_array_length(list);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        json_object *br = json_object_array_get_idx(list, i), *m = NULL;
        size_t old = path_push_idx(c, comb, i);
        if (siblings) {
            rc = merge_branch(c, s, comb, br, &m);
            if (rc == 1) {
                rc = 0;
                path_pop(c, old);
                continue;
            }
        } else if (json_object_is_type(br, json_type_boolean) && !json_object_get_boolean(br)) {
            path_pop(c, old);
            continue;
        }
        if (rc >= 0) {
            char *h = hint_idx(hint, "", i);
            if (alt)
                b_puts(&body, " |");
            alt = true;
            rc = h ? gen(c, m ? m : br, h, &body) : fail(c, -ENOMEM, NULL, "out of memory");
            free(h);
        }
        json_object_put(m);
        path_pop(c, old);
    }
    if (rc >= 0 && !alt)
        rc = fail(c, -EINVAL, comb, "every branch is false: no value matches");
    if (rc >= 0)
        rc = rule_set(c, self, &body);
    free(body.p);
    if (rc >= 0)
        b_item(out, c->rules[self].name);
    return rc;
}

/* allOf of object schemas: their properties (in order of appearance; one
 * listed in two branches must be the same schema, or both objects, merged
 * again) and required names joined into one schema with the keywords
 * beside allOf. additionalProperties other than true is refused there: it
 * would have to see only its own branch's properties. */
struct chain {
    json_object *s;
    const struct chain *up;
};

static int merge_allof(struct ctx *c, json_object *acc, json_object *s, int depth,
                       const struct chain *up)
{
    if (depth > SCHEMA_MAX_DEPTH)
        return fail(c, -E2BIG, NULL, "allOf nests deeper than %d", SCHEMA_MAX_DEPTH);
    for (const struct chain *u = up; u; u = u->up)
        if (u->s == s)
            return fail(c, -EINVAL, NULL, "allOf and $ref form a cycle with nothing in "
                        "between: no value matches");
    const struct chain here = {s, up};
    if (json_object_is_type(s, json_type_boolean)) {
        if (json_object_get_boolean(s))
            return 0;
        return fail(c, -EINVAL, NULL, "schema false in allOf: no value matches");
    }
    if (!json_object_is_type(s, json_type_object))
        return fail(c, -EINVAL, NULL, "an allOf branch must be a schema");
    json_object_object_foreach(s, k, v) {
        enum kw kw = kw_of(k);
        switch (kw) {
        case K_ANNOTATION: case K_DEFS: break;
        case K_REF: {
            if (!json_object_is_type(v, json_type_string))
                return fail(c, -EINVAL, k, "must be a string");
            json_object *t;
            int r = resolve(c, json_object_get_string(v), &t);
            if (r < 0)
                return r;
            if ((r = merge_allof(c, acc, t, depth + 1, &here)) < 0)
                return r;
            break;
        }
        case K_ALLOF: {
            if (!json_object_is_type(v, json_type_array))
                return fail(c, -EINVAL, k, "must be an array of schemas");
            for (size_t i = 0; i < json_object_array_length(v); i++) {
                int r = merge_allof(c, acc, json_object_array_get_idx(v, i), depth + 1, &here);
                if (r < 0)
                    return r;
            }
            break;
        }
        case K_TYPE: {
            const char *t = json_object_is_type(v, json_type_string) ? json_object_get_string(v)
                            : json_object_is_type(v, json_type_array) &&
                                      json_object_array_length(v) == 1
                                ? json_object_get_string(json_object_array_get_idx(v, 0))
                                : NULL;
            if (!t || strcmp(t, "object"))
                return fail(c, -EINVAL, k, "only object schemas are supported in allOf (type "
                            "%s)", json_object_to_json_string(v));
            json_object_object_add(acc, "type", json_object_new_string("object"));
            break;
        }
        case K_ADDPROPS:
            if (json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v))
                break;
            return fail(c, -EINVAL, k, "unsupported in or beside allOf (it would see only its "
                        "own branch's properties)");
        case K_REQUIRED: {
            if (!json_object_is_type(v, json_type_array))
                return fail(c, -EINVAL, k, "must be an array of strings");
            json_object *req;
            if (!json_object_object_get_ex(acc, "required", &req)) {
                req = json_object_new_array();
                if (!req || json_object_object_add(acc, "required", req) < 0)
                    return fail(c, -ENOMEM, NULL, "out of memory");
            }
            for (size_t i = 0; i < json_object_array_length(v); i++) {
                json_object *name = json_object_array_get_idx(v, i);
                bool have = false;
                for (size_t j = 0; j < json_object_array_length(req) && !have; j++)
                    have = json_object_equal(json_object_array_get_idx(req, j), name);
                if (!have)
                    json_object_array_add(req, json_object_get(name));
            }
            break;
        }
        case K_PROPERTIES: {
            if (!json_object_is_type(v, json_type_object))
                return fail(c, -EINVAL, k, "must be an object");
            json_object *props;
            if (!json_object_object_get_ex(acc, "properties", &props)) {
                props = json_object_new_object();
                if (!props || json_object_object_add(acc, "properties", props) < 0)
                    return fail(c, -ENOMEM, NULL, "out of memory");
            }
            json_object_object_foreach(v, pk, pv) {
                json_object *old;
                if (!json_object_object_get_ex(props, pk, &old)) {
                    json_object_object_add(props, pk, json_object_get(pv));
                } else if (!json_object_equal(old, pv)) {
                    /* the same property twice: both must hold */
                    json_object *both = json_object_new_object(), *list = json_object_new_array();
                    if (!both || !list) {
                        json_object_put(both);
                        json_object_put(list);
                        return fail(c, -ENOMEM, NULL, "out of memory");
                    }
                    json_object_array_add(list, json_object_get(old));
                    json_object_array_add(list, json_object_get(pv));
                    json_object_object_add(both, "allOf", list);
                    json_object_object_add(props, pk, both);
                }
            }
            break;
        }
        default:
            return fail(c, -EINVAL, k, kw == K_UNKNOWN ? "unsupported keyword \"%s\""
                                                      : "only object schemas (properties, required) "
                                                        "are supported in allOf, not \"%s\"", k);
        }
    }
    return 0;
}

static int gen_allof(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    json_object *list;
    json_object_object_get_ex(s, "allOf", &list);
    if (!json_object_is_type(list, json_type_array) || !json_object_array_length(list))
        return fail(c, -EINVAL, "allOf", "must be a non-empty array of schemas");
    json_object *acc = merged_new();
    if (!acc)
        return fail(c, -ENOMEM, NULL, "out of memory");
    int rc = 0;
    /* the keywords beside allOf are one more branch (they must be object
     * keywords too, or annotations) */
    json_object *self = json_object_new_object();
    if (!self) {
        json_object_put(acc);
        return fail(c, -ENOMEM, NULL, "out of memory");
    }
    json_object_object_foreach(s, k, v) {
        if (strcmp(k, "allOf") && strcmp(k, "$defs") && strcmp(k, "definitions"))
            json_object_object_add(self, k, json_object_get(v));
    }
    rc = merge_allof(c, acc, self, 0, NULL);
    for (size_t i = 0; rc >= 0 && i < json_object_array_length(list); i++) {
        size_t old = path_push_idx(c, "allOf", i);
        rc = merge_allof(c, acc, json_object_array_get_idx(list, i), 1, NULL);
        path_pop(c, old);
    }
    json_object_put(self);
    if (rc >= 0)
        rc = gen(c, acc, hint, out);
    json_object_put(acc);
    return rc;
}

/* ---- a schema ------------------------------------------------------------------ */

static int gen_literals(struct ctx *c, json_object *s, bool types[T_COUNT], bool typed,
                        struct buf *out)
{
    json_object *en = NULL, *cn = NULL;
    bool has_const = json_object_object_get_ex(s, "const", &cn);
    if (json_object_object_get_ex(s, "enum", &en) &&
        (!json_object_is_type(en, json_type_array) || !json_object_array_length(en)))
        return fail(c, -EINVAL, "enum", "must be a non-empty array");
    size_t n = en ? json_object_array_length(en) : 1;
    struct buf alts = {0};
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *v = en ? json_object_array_get_idx(en, i) : cn;
        if (en && has_const && !json_object_equal(v, cn))
            continue;
        bool ok = !typed;
        for (int t = 0; t < T_COUNT && !ok; t++)
            ok = types[t] && value_has_type(v, (enum jt)t);
        if (!ok)
            continue;
        if (kept++)
            b_puts(&alts, " |");
        gen_const(c, v, &alts);
    }
    if (alts.err) {
        int r = buf_fail(c, &alts);
        free(alts.p);
        return r;
    }
    if (!kept) {
        free(alts.p);
        return fail(c, -EINVAL, en ? "enum" : "const", "no value of it is of the schema's "
                    "type: no value matches");
    }
    if (kept > 1)
        b_item(out, "(");
    b_item(out, alts.p);
    if (kept > 1)
        b_puts(out, " )");
    free(alts.p);
    return 0;
}

static int parse_types(struct ctx *c, json_object *tv, bool types[T_COUNT])
{
    size_t n = json_object_is_type(tv, json_type_array) ? json_object_array_length(tv) : 1;
    if (!n)
        return fail(c, -EINVAL, "type", "an empty list of types matches nothing");
    for (size_t i = 0; i < n; i++) {
        json_object *t = json_object_is_type(tv, json_type_array) ? json_object_array_get_idx(tv, i)
                                                                  : tv;
        if (!json_object_is_type(t, json_type_string))
            return fail(c, -EINVAL, "type", "must be a type name or a list of them");
        int k = 0;
        while (k < T_COUNT && strcmp(type_names[k], json_object_get_string(t)))
            k++;
        if (k == T_COUNT)
            return fail(c, -EINVAL, "type", "unknown type \"%s\"", json_object_get_string(t));
        types[k] = true;
    }
    return 0;
}

static int gen_body(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    if (json_object_is_type(s, json_type_boolean)) {
        if (json_object_get_boolean(s)) {
            use(c, out, P_VALUE);
            return 0;
        }
        return fail(c, -EINVAL, NULL, "schema false matches nothing");
    }
    if (!json_object_is_type(s, json_type_object))
        return fail(c, -EINVAL, NULL, "a schema must be an object or a boolean");
    unsigned seen = 0; /* enum kw bits */
    bool constrains = false;
    json_object_object_foreach(s, key, val) {
        (void)val;
        enum kw kw = kw_of(key);
        if (kw == K_UNKNOWN)
            return fail(c, -EINVAL, key, "unsupported keyword \"%s\"", key);
        if ((kw == K_DEFS) && !json_object_is_type(val, json_type_object))
            return fail(c, -EINVAL, key, "must be an object of schemas");
        seen |= 1u << kw;
        constrains |= kw != K_ANNOTATION && kw != K_DEFS;
    }
    if (!constrains) {
        use(c, out, P_VALUE);
        return 0;
    }
    if (seen & 1u << K_REF) {
        json_object_object_foreach(s, k2, v2) {
            (void)v2;
            enum kw kw = kw_of(k2);
            if (kw != K_ANNOTATION && kw != K_DEFS && kw != K_REF)
                return fail(c, -EINVAL, k2, "unsupported beside $ref");
        }
        return gen_ref(c, s, out);
    }
    if (seen & 1u << K_ALLOF)
        return gen_allof(c, s, hint, out);
    if (seen & 1u << K_ANYOF) {
        if (seen & 1u << K_ONEOF)
            return fail(c, -EINVAL, "oneOf", "unsupported beside anyOf");
        return gen_anyof(c, s, "anyOf", hint, out);
    }
    if (seen & 1u << K_ONEOF)
        return gen_anyof(c, s, "oneOf", hint, out);
    bool types[T_COUNT] = {false}, typed = seen & 1u << K_TYPE;
    if (typed) {
        json_object *tv;
        json_object_object_get_ex(s, "type", &tv);
        if (parse_types(c, tv, types) < 0)
            return -EINVAL;
    }
    if (seen & (1u << K_ENUM | 1u << K_CONST)) {
        json_object_object_foreach(s, k3, v3) {
            (void)v3;
            enum kw kw = kw_of(k3);
            if (kw != K_ANNOTATION && kw != K_DEFS && kw != K_TYPE && kw != K_ENUM &&
                kw != K_CONST)
                return fail(c, -EINVAL, k3, "unsupported beside %s",
                            seen & 1u << K_ENUM ? "enum" : "const");
        }
        return gen_literals(c, s, types, typed, out);
    }
    if (!typed)
        for (int t = 0; t < T_COUNT; t++)
            types[t] = true;
    if (types[T_NUMBER])
        types[T_INTEGER] = false; /* number takes the integers */
    int ntypes = 0;
    for (int t = 0; t < T_COUNT; t++)
        ntypes += types[t];
    /* no keyword looks at objects or arrays: the generic rules do */
    bool obj_kw = false, arr_kw = false;
    json_object_object_foreach(s, k4, v4) {
        (void)v4;
        obj_kw |= kw_for_type(kw_of(k4), T_OBJECT);
        arr_kw |= kw_for_type(kw_of(k4), T_ARRAY);
    }
    struct buf alts = {0};
    int self = -1, rc = 0;
    if (ntypes > 1) {
        self = rule_new(c, hint);
        if (self < 0)
            return fail(c, -ENOMEM, NULL, "out of memory");
    }
    bool alt = false;
    for (int t = 0; t < T_COUNT && rc >= 0; t++) {
        if (!types[t])
            continue;
        if (alt)
            b_puts(&alts, " |");
        alt = true;
        char *h = ntypes > 1 ? hint_join(hint, type_names[t]) : strdup(hint);
        if (!h) {
            rc = fail(c, -ENOMEM, NULL, "out of memory");
            break;
        }
        switch ((enum jt)t) {
        case T_NULL: use(c, &alts, P_NULL); break;
        case T_BOOLEAN: use(c, &alts, P_BOOLEAN); break;
        case T_STRING: rc = gen_string(c, s, h, &alts); break;
        case T_INTEGER: rc = gen_integer(c, s, &alts); break;
        case T_NUMBER: rc = gen_number(c, s, &alts); break;
        case T_OBJECT:
            if (obj_kw)
                rc = gen_object(c, s, h, &alts);
            else
                use(c, &alts, P_OBJECT);
            break;
        case T_ARRAY:
            if (arr_kw)
                rc = gen_array(c, s, h, &alts);
            else
                use(c, &alts, P_ARRAY);
            break;
        default: break;
        }
        free(h);
    }
    if (rc >= 0 && alts.err)
        rc = buf_fail(c, &alts);
    if (rc >= 0) {
        if (self >= 0) {
            rc = rule_set(c, self, &alts);
            if (rc >= 0)
                b_item(out, c->rules[self].name);
        } else {
            b_item(out, alts.p);
        }
    }
    free(alts.p);
    return rc;
}

static int gen(struct ctx *c, json_object *s, const char *hint, struct buf *out)
{
    if (++c->depth > SCHEMA_MAX_DEPTH) {
        c->depth--;
        return fail(c, -E2BIG, NULL, "nesting deeper than %d", SCHEMA_MAX_DEPTH);
    }
    int r = gen_body(c, s, hint, out);
    c->depth--;
    if (r >= 0 && out->err)
        r = buf_fail(c, out);
    return r;
}

/* ---- the entry point ----------------------------------------------------------- */

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned ch = s[i];
        size_t k = ch < 0x80 ? 0 : (ch & 0xe0) == 0xc0 ? 1 : (ch & 0xf0) == 0xe0 ? 2
                                 : (ch & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || i + k >= n + (k ? 0 : 1))
            return false;
        unsigned cp = k == 0 ? ch : k == 1 ? ch & 31 : k == 2 ? ch & 15 : ch & 7;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 63);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

int l8g_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char err[L8G_ERRLEN])
{
    struct ctx c = {.err = err};
    err[0] = 0;
    if (len > SCHEMA_MAX_TEXT) {
        snprintf(err, L8G_ERRLEN, "the schema is larger than %u bytes", SCHEMA_MAX_TEXT);
        return -E2BIG;
    }
    if (!valid_utf8((const unsigned char *)schema, len)) {
        snprintf(err, L8G_ERRLEN, "the schema is not valid UTF-8");
        return -EINVAL;
    }
    /* the tokener's depth counts containers; one more than ours so the
     * over-deep case is told apart from other syntax errors */
    struct json_tokener *tok = json_tokener_new_ex(SCHEMA_MAX_DEPTH + 1);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, schema, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t off = json_tokener_get_parse_end(tok);
    if (je == json_tokener_continue) {
        /* a number at the very end needs its end said */
        if (!root) {
            root = json_tokener_parse_ex(tok, "", 1);
            je = json_tokener_get_error(tok);
            if (je == json_tokener_success)
                off = len;
        }
    }
    json_tokener_free(tok);
    int rc = 0;
    if (je == json_tokener_error_depth) {
        snprintf(err, L8G_ERRLEN, "the schema nests deeper than %d", SCHEMA_MAX_DEPTH);
        rc = -E2BIG;
        goto out;
    }
    if (je != json_tokener_success || !root) {
        snprintf(err, L8G_ERRLEN, "the schema is not valid JSON: %s at byte %zu",
                 je == json_tokener_continue ? "unexpected end of text"
                                             : json_tokener_error_desc(je),
                 off);
        rc = -EINVAL;
        goto out;
    }
    for (size_t i = off; i < len; i++) {
        if (schema[i] != ' ' && schema[i] != '\t' && schema[i] != '\n' && schema[i] != '\r') {
            snprintf(err, L8G_ERRLEN, "the schema is not valid JSON: text after the value at "
                     "byte %zu", i);
            rc = -EINVAL;
            goto out;
        }
    }
    c.root = root;
    for (int p = 0; p < P_COUNT && rc >= 0; p++) {
        int r = rule_new(&c, prims[p].name);
        rc = r < 0 ? r : 0;
    }
    if (rc < 0) {
        rc = -ENOMEM;
        goto out;
    }
    int top = rule_new(&c, "root");
    if (top < 0) {
        rc = -ENOMEM;
        goto out;
    }
    /* the root is "#": a $ref target like the others, written first; then
     * the targets queued while writing, until none is left */
    c.refs = malloc(16 * sizeof *c.refs);
    char *hash_ptr = strdup("#");
    if (!c.refs || !hash_ptr) {
        free(hash_ptr);
        rc = -ENOMEM;
        goto out;
    }
    c.refcap = 16;
    c.refs[0] = (struct ref){root, top, R_PENDING, hash_ptr};
    c.rules[top].target = true;
    c.nrefs = 1;
    for (int i = 0; i < c.nrefs && rc >= 0; i++)
        if (c.refs[i].state == R_PENDING)
            rc = write_target(&c, i);
    if (rc < 0)
        goto out;
    /* the fixed rules used, with what they use */
    for (bool grew = true; grew;) {
        grew = false;
        for (int p = 0; p < P_COUNT; p++)
            if (c.used & 1u << p && (c.used | prims[p].deps) != c.used) {
                c.used |= prims[p].deps;
                grew = true;
            }
    }
    struct buf o = {0};
    for (int r = P_COUNT; r < c.nrules; r++)
        if (c.rules[r].body)
            b_printf(&o, "%s ::= ", c.rules[r].name), b_puts(&o, c.rules[r].body),
                b_puts(&o, "\n");
    for (int p = 0; p < P_COUNT; p++)
        if (c.used & 1u << p)
            b_printf(&o, "%s ::= ", prims[p].name), b_puts(&o, prims[p].body), b_puts(&o, "\n");
    if (o.err) {
        rc = buf_fail(&c, &o);
        free(o.p);
        goto out;
    }
    *gbnf = o.p;
out:
    for (int r = 0; r < c.nrules; r++) {
        free(c.rules[r].name);
        free(c.rules[r].body);
    }
    free(c.rules);
    free(c.hash);
    for (int i = 0; i < c.nrefs; i++)
        free(c.refs[i].ptr);
    free(c.refs);
    free(c.path.p);
    json_object_put(root);
    return rc;
}
