/* test_regex.c - regex.c against PCRE2: the grammar a regular expression
 * becomes accepts exactly the strings PCRE2 matches whole, and its prefixes
 * exactly those PCRE2 calls partial matches.
 *
 * For each pattern of a list of real ones, and of random ones made from a
 * small grammar of regex syntax (seeded): strings made by a random walk that
 * PCRE2's partial matching keeps inside the language (so most match),
 * mutations of them, and random strings over the pattern's alphabet; each
 * is checked whole (PCRE2: (?:re)\z anchored) and as a prefix
 * (PCRE2_PARTIAL_HARD, where \z at the end of the subject is a partial
 * match: a full or partial match means a prefix), the whole string and a
 * cut of it at a character boundary. The unanchored form
 * (l8g_regex_to_gbnf_rules, anchored false) against PCRE2's search with
 * PCRE2_DOLLAR_ENDONLY, embedded in a larger grammar; the JSON string form
 * (L8G_RE_JSON_STRING, whole and search) on each string written as JSON
 * does, in quotes. Then the exact text of a few translations and every
 * refused construct with its message. Exits 0, or 1 with each difference
 * on stderr; TEST_REGEX_VERBOSE=1 names each pattern as it starts. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar/grammar.h"
#include "tests/test.h"

/* ---- random numbers (splitmix64: seeded, the same on every machine) ------ */

static uint64_t rng_s;
static uint64_t rnd(void)
{
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

static size_t put_utf8(uint8_t *b, uint32_t c)
{
    if (c < 0x80) {
        b[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (uint8_t)(0xC0 | c >> 6);
        b[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (uint8_t)(0xE0 | c >> 12);
        b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | c >> 18);
    b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Decodes valid UTF-8 (the patterns of this file). */
static size_t get_utf8(const uint8_t *s, size_t n, uint32_t *c)
{
    uint32_t v = s[0];
    size_t k = v < 0x80 ? 1 : v < 0xE0 ? 2 : v < 0xF0 ? 3 : 4;
    if (k > n)
        k = n;
    if (k > 1) {
        v &= 0x3Fu >> (k - 1);
        for (size_t i = 1; i < k; i++)
            v = v << 6 | (s[i] & 0x3F);
    }
    *c = v;
    return k;
}

/* A string of code points and its UTF-8. */
#define MAX_CPS 64
struct str {
    uint32_t cp[MAX_CPS];
    size_t n;
};

static size_t encode(const struct str *s, size_t upto, uint8_t *b)
{
    size_t k = 0;
    for (size_t i = 0; i < upto; i++)
        k += put_utf8(b + k, s->cp[i]);
    return k;
}

/* ---- PCRE2, the reference -------------------------------------------------- */

struct ref {
    pcre2_code *whole;       /* (?:re)\z, compiled anchored */
    pcre2_code *search;      /* re, unanchored */
    pcre2_match_data *md;
    pcre2_match_context *mc; /* a match limit: nested repetitions backtrack for ever */
};

static long n_unknown;   /* strings PCRE2 could not decide (both matchers gave up) */

/* re with \uHHHH and \u{H..} (ours, not PCRE2's) as \x{..}, NUL-terminated. */
static char *pcre_syntax(const char *re, size_t len, size_t *out_len)
{
    char *o = malloc(2 * len + 16);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (re[i] == '\\' && i + 1 < len && re[i + 1] == 'u') {
            k += (size_t)sprintf(o + k, "\\x{");
            i += 2;
            if (i < len && re[i] == '{') {
                for (i++; i < len && re[i] != '}'; i++)
                    o[k++] = re[i];
            } else {
                for (int d = 0; d < 4 && i < len; d++, i++)
                    o[k++] = re[i];
                i--;
            }
            o[k++] = '}';
        } else if (re[i] == '\\' && i + 1 < len) {
            o[k++] = re[i++];
            o[k++] = re[i];
        } else {
            o[k++] = re[i];
        }
    }
    o[k] = 0;
    *out_len = k;
    return o;
}

/* $ is the end of the subject only (DOLLAR_ENDONLY), as in regex.c. */
static bool ref_open(struct ref *r, const char *re, size_t len)
{
    size_t pl;
    char *p = pcre_syntax(re, len, &pl), *w = malloc(pl + 16);
    memcpy(w, "(?:", 3);
    memcpy(w + 3, p, pl);
    memcpy(w + 3 + pl, ")\\z", 3);
    int ec;
    PCRE2_SIZE eo;
    const uint32_t opt = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY;
    r->whole = pcre2_compile((PCRE2_SPTR)w, pl + 6, opt | PCRE2_ANCHORED, &ec, &eo, NULL);
    r->search = pcre2_compile((PCRE2_SPTR)p, pl, opt, &ec, &eo, NULL);
    free(p);
    free(w);
    if (!r->whole || !r->search) {
        pcre2_code_free(r->whole);
        pcre2_code_free(r->search);
        return false;
    }
    r->md = pcre2_match_data_create(64, NULL);
    r->mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(r->mc, 200000);
    return true;
}

static void ref_close(struct ref *r)
{
    pcre2_match_context_free(r->mc);
    pcre2_match_data_free(r->md);
    pcre2_code_free(r->whole);
    pcre2_code_free(r->search);
}

/* pcre2_match, or where it backtracks past the limit the DFA matcher
 * (which does not backtrack); -100 where both give up. */
static int ref_match(struct ref *r, pcre2_code *c, const uint8_t *s, size_t n, uint32_t opt)
{
    int rc = pcre2_match(c, s, n, 0, opt, r->md, r->mc);
    if (rc != PCRE2_ERROR_MATCHLIMIT)
        return rc;
    static int ws[20000];
    rc = pcre2_dfa_match(c, s, n, 0, opt, r->md, NULL, ws, sizeof ws / sizeof *ws);
    if (rc == 0)   /* a match, the ovector too small for all of them */
        rc = 1;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_PARTIAL)
        rc = -100;
    return rc;
}

/* 1 yes, 0 no, -1 unknown. */
static int ref_whole(struct ref *r, const uint8_t *s, size_t n)
{
    int rc = ref_match(r, r->whole, s, n, 0);
    return rc == -100 ? -1 : rc >= 0;
}

/* Whether s is a prefix of a string in the language. PCRE2 reports no
 * partial match for the empty subject: every pattern here matches
 * something, so the empty string is a prefix. */
static int ref_prefix(struct ref *r, const uint8_t *s, size_t n)
{
    if (n == 0)
        return 1;
    int rc = ref_match(r, r->whole, s, n, PCRE2_PARTIAL_HARD);
    return rc == -100 ? -1 : rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

static int ref_search(struct ref *r, const uint8_t *s, size_t n)
{
    int rc = ref_match(r, r->search, s, n, 0);
    return rc == -100 ? -1 : rc >= 0;
}

/* ---- the alphabet of a pattern --------------------------------------------- */

#define MAX_ALPHA 96
struct alpha {
    uint32_t c[MAX_ALPHA];
    size_t n;
};

static void alpha_add(struct alpha *a, uint32_t c)
{
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return;
    for (size_t i = 0; i < a->n; i++)
        if (a->c[i] == c)
            return;
    if (a->n < MAX_ALPHA)
        a->c[a->n++] = c;
}

/* The pattern's characters (what \x{..} and \uHHHH name included), the
 * middle and the neighbours of each range a-b, and characters any pattern
 * may treat specially: newlines, spaces, digits, letters, non-ASCII. */
static void alphabet(const char *re, size_t len, struct alpha *a)
{
    static const uint32_t extra[] = { 'a', 'z', 'A', 'Z', '0', '5', '9', '_', ' ', '-', '.',
                                      '\t', '\n', '\r', 0x0B, '/', '@', '"', '\\', 0xE9, 0x3B1,
                                      0x3C9, 0x4E2D, 0x7F, 0x85, 0xA0, 0x2028, 0x1F600, 0 };
    uint32_t prev = 0, cps[512];
    size_t n = 0;
    for (size_t i = 0; i < len && n < 512;) {
        uint32_t c;
        i += get_utf8((const uint8_t *)re + i, len - i, &c);
        if (c == '\\' && i < len && (re[i] == 'x' || re[i] == 'u')) {
            size_t j = i + 1;
            uint32_t v = 0;
            bool brace = j < len && re[j] == '{';
            j += brace;
            for (int d = 0; j < len && (brace || d < (re[i] == 'u' ? 4 : 2)) &&
                            strchr("0123456789abcdefABCDEF", re[j]) && re[j]; d++, j++)
                v = v * 16 + (uint32_t)(re[j] <= '9' ? re[j] - '0' : (re[j] | 32) - 'a' + 10);
            c = v;
            i = j + (brace && j < len);
        }
        cps[n++] = c;
    }
    for (size_t i = 0; i < n; i++) {
        alpha_add(a, cps[i]);
        if (i >= 1 && i + 1 < n && cps[i] == '-' && cps[i - 1] < cps[i + 1]) {
            prev = cps[i - 1];
            alpha_add(a, prev + (cps[i + 1] - prev) / 2);
            alpha_add(a, prev + 1);
            alpha_add(a, cps[i + 1] - 1);
            alpha_add(a, cps[i + 1] + 1);
            if (prev)
                alpha_add(a, prev - 1);
        }
    }
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        alpha_add(a, extra[i]);
}

/* ---- strings to try ---------------------------------------------------------- */

/* A random walk: each step appends a character that keeps the string a
 * prefix (per PCRE2); it stops at random where the string matches. */
static size_t max_walk = MAX_CPS;   /* 24 for the random patterns, more ambiguous */

static void walk(struct ref *r, const struct alpha *a, struct str *s)
{
    uint8_t b[MAX_CPS * 4 + 4];
    s->n = 0;
    size_t max = 1 + rn((uint32_t)max_walk - 1);
    while (s->n < max) {
        size_t bl = encode(s, s->n, b);
        if (ref_whole(r, b, bl) == 1 && rn(4) == 0)
            return;
        bool grown = false;
        for (int t = 0; t < 12 && !grown; t++) {
            uint32_t c = a->c[rn((uint32_t)a->n)];
            size_t cl = put_utf8(b + bl, c);
            if (ref_prefix(r, b, bl + cl) == 1) {
                s->cp[s->n++] = c;
                grown = true;
            }
        }
        if (!grown)
            return;
    }
}

static void mutate(const struct alpha *a, struct str *s)
{
    for (uint32_t m = 1 + rn(3); m--;) {
        uint32_t op = rn(5), i = rn((uint32_t)s->n + 1);
        if (op == 0 && s->n < MAX_CPS) {          /* insert */
            memmove(s->cp + i + 1, s->cp + i, (s->n - i) * sizeof *s->cp);
            s->cp[i] = a->c[rn((uint32_t)a->n)];
            s->n++;
        } else if (op == 1 && i < s->n) {          /* delete */
            memmove(s->cp + i, s->cp + i + 1, (s->n - i - 1) * sizeof *s->cp);
            s->n--;
        } else if (op == 2 && i < s->n) {          /* replace */
            s->cp[i] = a->c[rn((uint32_t)a->n)];
        } else if (op == 3 && i + 1 < s->n) {      /* swap */
            uint32_t t = s->cp[i];
            s->cp[i] = s->cp[i + 1];
            s->cp[i + 1] = t;
        } else if (op == 4 && s->n) {              /* repeat a piece */
            uint32_t at = rn((uint32_t)s->n), k = 1 + rn(4);
            for (uint32_t j = 0; j < k && s->n < MAX_CPS && at + j < s->n; j++)
                s->cp[s->n++] = s->cp[at + j];
        }
    }
}

static void random_str(const struct alpha *a, struct str *s)
{
    s->n = rn(13);
    for (size_t i = 0; i < s->n; i++)
        s->cp[i] = a->c[rn((uint32_t)a->n)];
}

/* The letter of JSON's short escape of c (\" \\ \b \f \n \r \t), or 0. */
static char json_short(uint32_t c)
{
    switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case 0x08: return 'b';
    case 0x0C: return 'f';
    case '\n': return 'n';
    case '\r': return 'r';
    case '\t': return 't';
    default: return 0;
    }
}

/* ---- one pattern ---------------------------------------------------------------- */

struct totals {
    long patterns, strings, checks, matched, differ;
};
static struct totals tot;

static void show(const char *what, const char *re, size_t len, const uint8_t *s, size_t n,
                 int want, const char *gbnf)
{
    fflush(stdout);
    fprintf(stderr, "FAIL %s: /%.*s/ on \"", what, (int)len, re);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, s[i] >= 0x20 && s[i] < 0x7F && s[i] != '"' ? "%c" : "\\x%02x", s[i]);
    fprintf(stderr, "\": pcre2 %s, grammar %s\n  %s", want ? "yes" : "no", want ? "no" : "yes",
            gbnf);
}

/* Compares the grammars of re (len bytes) with PCRE2 on n_walk walks (and
 * three mutations of each) and n_rand random strings. Returns whether the
 * pattern was translated and compared. */
static bool compare(const char *re, size_t len, int n_walk, int n_rand)
{
    struct ref r;
    char err[L8G_ERRLEN], *text = NULL, *rules = NULL;
    struct l8g_grammar *g = NULL, *gs = NULL, *gj[2] = { NULL, NULL };
    int fails = 0;
    if (!ref_open(&r, re, len)) {
        CHECK(false, "PCRE2 refuses /%.*s/", (int)len, re);
        return false;
    }
    rng_s = hash(re, len);
    if (getenv("TEST_REGEX_VERBOSE"))
        fprintf(stderr, "/%.*s/\n", (int)len, re);
    int rc = l8g_regex_to_gbnf(re, len, &text, err);
    CHECK(rc == 0, "/%.*s/: %d %s", (int)len, re, rc, err);
    if (rc)
        goto out;
    rc = l8g_grammar_parse(text, strlen(text), &g, err);
    CHECK(rc == 0, "/%.*s/: the engine refuses %s: %s", (int)len, re, text, err);
    if (rc)
        goto out;
    /* the search form, embedded: root ::= "<" x ">" */
    rc = l8g_regex_to_gbnf_rules(re, len, "x-re", false, &rules, err);
    CHECK(rc == 0, "/%.*s/ unanchored: %d %s", (int)len, re, rc, err);
    if (rc)
        goto out;
    size_t rl = strlen(rules);
    char *embed = malloc(rl + 64);
    int el = sprintf(embed, "root ::= \"<\" x-re \">\"\n%s", rules);
    rc = l8g_grammar_parse(embed, (size_t)el, &gs, err);
    CHECK(rc == 0, "/%.*s/: the engine refuses %s: %s", (int)len, re, embed, err);
    free(embed);
    if (rc)
        goto out;
    /* the JSON string forms, whole and search: root ::= "\"" x-js "\"" */
    for (int j = 0; j < 2; j++) {
        char *jr = NULL;
        rc = l8g_regex_to_gbnf_rules(re, len, "x-js", L8G_RE_JSON_STRING | (j ? 0 : L8G_RE_ANCHORED),
                                     &jr, err);
        CHECK(rc == 0, "/%.*s/ json: %d %s", (int)len, re, rc, err);
        if (rc)
            goto out;
        char *embed_j = malloc(strlen(jr) + 64);
        el = sprintf(embed_j, "root ::= \"\\\"\" x-js \"\\\"\"\n%s", jr);
        rc = l8g_grammar_parse(embed_j, (size_t)el, &gj[j], err);
        CHECK(rc == 0, "/%.*s/: the engine refuses %s: %s", (int)len, re, embed_j, err);
        free(embed_j);
        free(jr);
        if (rc)
            goto out;
    }

    struct alpha a = { .n = 0 };
    alphabet(re, len, &a);
    tot.patterns++;
    uint8_t b[2 * MAX_CPS * 4 + 8];
    for (int k = 0; k < n_walk * 4 + n_rand && fails < 3; k++) {
        struct str s;
        static struct str base;
        if (k < n_walk * 4) {
            if (k % 4 == 0) {
                walk(&r, &a, &base);
                s = base;
            } else {
                s = base;
                mutate(&a, &s);
            }
        } else {
            random_str(&a, &s);
        }
        size_t n = encode(&s, s.n, b);
        tot.strings++;
        int want = ref_whole(&r, b, n);
        tot.matched += want == 1;
        n_unknown += want < 0;
        if (want >= 0) {
            tot.checks++;
            if (want != l8g_grammar_accepts(g, b, n, false)) {
                show("whole", re, len, b, n, want, text);
                fails++;
            }
        }
        size_t cut = encode(&s, rn((uint32_t)s.n + 1), b + n + 1);
        const uint8_t *pre[2] = { b, b + n + 1 };
        size_t pn[2] = { n, cut };
        for (int j = 0; j < 2; j++) {
            want = ref_prefix(&r, pre[j], pn[j]);
            n_unknown += want < 0;
            if (want < 0)
                continue;
            tot.checks++;
            if (want != l8g_grammar_accepts(g, pre[j], pn[j], true)) {
                show("prefix", re, len, pre[j], pn[j], want, text);
                fails++;
            }
        }
        if (k % 3 != 0) {   /* as a JSON string, whole (1) or searched (2) */
            uint8_t e[MAX_CPS * 6 + 8];
            size_t m = 0;
            e[m++] = '"';
            for (size_t i = 0; i < s.n; i++) {
                uint32_t c = s.cp[i];
                char sh = json_short(c);
                if (sh) {
                    e[m++] = '\\';
                    e[m++] = (uint8_t)sh;
                } else if (c < 0x20) {
                    m += (size_t)sprintf((char *)e + m, rn(2) ? "\\u%04x" : "\\u%04X", c);
                } else {
                    m += put_utf8(e + m, c);
                }
            }
            e[m++] = '"';
            want = k % 3 == 1 ? ref_whole(&r, b, n) : ref_search(&r, b, n);
            n_unknown += want < 0;
            if (want >= 0) {
                tot.checks++;
                if (want != l8g_grammar_accepts(gj[k % 3 - 1], e, m, false)) {
                    show(k % 3 == 1 ? "json" : "json search", re, len, e, m, want, text);
                    fails++;
                }
            }
        }
        if (k % 3 == 0) {   /* the search, inside "<" ">" */
            uint8_t e[MAX_CPS * 4 + 8];
            e[0] = '<';
            n = encode(&s, s.n, e + 1);
            e[n + 1] = '>';
            want = ref_search(&r, e + 1, n);
            n_unknown += want < 0;
            if (want >= 0) {
                tot.checks++;
                if (want != l8g_grammar_accepts(gs, e, n + 2, false)) {
                    show("search", re, len, e + 1, n, want, rules);
                    fails++;
                }
            }
        }
    }
    t_failures += fails;
out:
    l8g_grammar_free(g);
    l8g_grammar_free(gs);
    l8g_grammar_free(gj[0]);
    l8g_grammar_free(gj[1]);
    free(text);
    free(rules);
    ref_close(&r);
    return rc == 0;
}

/* ---- the patterns ----------------------------------------------------------------- */

static const char *const PATTERNS[] = {
    /* identifiers, numbers, versions, dates */
    "[a-zA-Z_][a-zA-Z0-9_]*",
    "[A-Za-z_$][A-Za-z0-9_$]*",
    "(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?"
    "(\\+[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?",
    "v?\\d+(\\.\\d+){0,2}",
    "\\d{4}-\\d{2}-\\d{2}",
    "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])",
    "\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?(Z|[+-]\\d{2}:\\d{2})",
    "([01]\\d|2[0-3]):[0-5]\\d",
    "-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?",
    "[0-9]{1,3}(,[0-9]{3})*(\\.[0-9]+)?",
    "(\\d+(\\.\\d*)?|\\.\\d+)",
    "[01]{8}",
    "(0|1(01*0)*1)*",
    "0x[0-9a-fA-F]+|0b[01]+|0o?[0-7]+",
    /* addresses */
    "[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}",
    "[\\w.+-]+@[\\w-]+(\\.[\\w-]+)+",
    "https?://[a-z0-9.-]+(:\\d{1,5})?(/[^\\s]*)?",
    "(https?|ftp)://[^\\s/$.?#].[^\\s]*",
    "(25[0-5]|2[0-4]\\d|1?\\d?\\d)(\\.(25[0-5]|2[0-4]\\d|1?\\d?\\d)){3}",
    "[[:xdigit:]]{2}(:[[:xdigit:]]{2}){5}",
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "\\+?1?[ -]?\\(?\\d{3}\\)?[ -]?\\d{3}[ -]?\\d{4}",
    "\\(\\d{3}\\) \\d{3}-\\d{4}",
    "[A-Z]{2}\\d{2}[A-Z0-9]{1,30}",
    "#[0-9a-fA-F]{6}",
    "#([0-9a-fA-F]{3}){1,2}",
    "(/[\\w.-]+)+/?",
    /* shell commands */
    "(ls|cat|grep) [a-z./ -]+",
    "(ls|cat|head|tail)( -[a-z]+)*( [\\w./-]+)+",
    "git (status|log( --oneline)?|diff|commit -m \"[^\"]*\")",
    "(cd [\\w/.-]+ && )?make( -j\\d+)?",
    /* text shapes */
    "(true|false|null)",
    "yes|no|maybe",
    "\"([^\"\\\\]|\\\\.)*\"",
    "(\\w+)\\s*=\\s*(\"[^\"]*\"|\\d+)",
    "(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \\d{2} (Jan|Feb|Mar) \\d{4}",
    "/\\*([^*]|\\*+[^*/])*\\*+/",
    "//.*",
    "\\$[A-Z_]+",
    "[!-~]{4,8}",
    "[\\w-]+(\\.[\\w-]+)*",
    "(?:\\r\\n|\\n)+",
    /* structure: nesting, alternation, empty branches, counts */
    "(a|b)*abb",
    "((a|b)(c|d))+",
    "(x(y(z)?)?)*",
    "((((((a))))))",
    "(a|b|c|d|e|f|g)(h|i)",
    "a|ab|abc",
    "(ab|a)(bc|c)",
    "(a|)+b",
    "(|a|bc)*d?",
    "(a*)*",
    "(a*)+b",
    "(a?){3}",
    "(a|b?)+",
    "(a?b?)*c",
    "((a?b?)?c?)+d",
    "()",
    "(|)",
    "x|",
    "|x",
    "a{3}",
    "a{2,4}b{0,2}",
    "(ab){1,3}c{2,}",
    "a{0}b",
    "a{0,0}b",
    "(a{2}){2}",
    "(a{1,2}){2,3}",
    "(a|bc){2,5}",
    "a*?b+?c??",
    "a{2,3}?",
    "[a-z]++[0-9]",
    "\\d*+\\.\\d+",
    "[ab]?+c",
    "x[a-c]{1,3}+",
    "(?:ab|cd)+",
    "(?<word>\\w+) (?P<num>\\d+)",
    "(?|a|b)c",
    "a(?#comment)b",
    /* anchors */
    "^abc$",
    "^(foo|bar)+$",
    "^a|b$",
    "^a|b|c$|^d$",
    /* literal braces */
    "{",
    "a{",
    "x{1,2",
    "{}",
    "a}",
    "a{,3}",
    /* characters and classes */
    "[α-ω]+",
    "[А-Яа-яЁё]+",
    "[\\x{4e00}-\\x{9fff}]{1,4}",
    "é+",
    "(é|e)\\x{301}?",
    "\\x{1F600}+",
    "[\\x{1F600}-\\x{1F64F}]",
    "\\x{10FFFF}",
    ".",
    ".*",
    "a.c",
    ".+\\n?",
    "[^\\n]*\\n",
    "[^abc]+",
    "[^α]",
    "\\s*\\S+\\s*",
    "\\w+\\W\\w+",
    "\\D\\d\\D",
    "\\h+\\v?",
    "\\H\\V",
    "[\\s\\S]",
    "[\\d\\s]+",
    "[^\\d\\s]+",
    "[\\W\\d]",
    "[[:alpha:]][[:alnum:]_]*",
    "[[:upper:]][[:lower:]]+",
    "[[:punct:][:space:]]+",
    "[[:^digit:]]+",
    "[[:cntrl:][:graph:]]",
    "[[:print:]]*",
    "[-a]",
    "[a-]",
    "[]a]",
    "[^]a]",
    "[.-]",
    "[\\-\\]\\\\]",
    "[--/]",
    "[\\b]",
    "\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$",
    "a\\tb\\n\\r\\f\\x41\\x{e9}\\0\\x",
    "\\012\\07",
    "\\cA\\ca\\c[",
    "\\e\\a",
    "[\\t\\n ]*",
    "[\\x00-\\x1f]",
    "\\u00e9\\u{1F600}",
    "[\\u0391-\\u03a9]+",
    "[^\\s\\S]x|y",
};

/* ---- random patterns ----------------------------------------------------------------- */

struct buf {
    char b[512];
    size_t n;
};

static void bput(struct buf *b, const char *s)
{
    size_t k = strlen(s);
    if (b->n + k < sizeof b->b) {
        memcpy(b->b + b->n, s, k);
        b->n += k;
    }
}

static void gen_alt(struct buf *b, int depth);

static void gen_atom(struct buf *b, int depth)
{
    static const char *const lit[] = { "a", "b", "c", "-", "\\.", "α", "\\n", " ", "1", "é" };
    static const char *const cls[] = { "[ab]", "[^a]", "[a-c]", "[α-ω]", "[\\d_]", "[^\\n]",
                                       "\\d", "\\w", "\\s", "\\W", ".", "[ -.]" };
    uint32_t r = rn(depth > 3 ? 8 : 11);
    if (r < 5)
        bput(b, lit[rn(sizeof lit / sizeof *lit)]);
    else if (r < 8)
        bput(b, cls[rn(sizeof cls / sizeof *cls)]);
    else {
        bput(b, rn(2) ? "(" : "(?:");
        gen_alt(b, depth + 1);
        bput(b, ")");
    }
}

static void gen_cat(struct buf *b, int depth)
{
    for (uint32_t n = rn(4) + (depth == 0); n--;) {
        gen_atom(b, depth);
        static const char *const q[] = { "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}", "*?",
                                         "+?", "{0}" };
        if (rn(3) == 0) {
            bput(b, q[rn(sizeof q / sizeof *q)]);
        }
    }
}

static void gen_alt(struct buf *b, int depth)
{
    for (uint32_t n = 1 + rn(depth ? 3 : 2), i = 0; i < n; i++) {
        if (i)
            bput(b, "|");
        gen_cat(b, depth);
    }
}

/* ---- exact translations and refusals ------------------------------------------------ */

struct text_case {
    const char *re;
    unsigned flags;
    const char *gbnf;
};

static const struct text_case TEXTS[] = {
    { "abc", L8G_RE_ANCHORED, "root ::= \"abc\"\n" },
    { "a|b|c", L8G_RE_ANCHORED, "root ::= [a-c]\n" },
    { "(a|)", L8G_RE_ANCHORED, "root ::= \"a\"?\n" },
    { "(a?)*", L8G_RE_ANCHORED, "root ::= \"a\"*\n" },
    { "(a*b?)+", L8G_RE_ANCHORED, "root ::= (\"a\"+ \"b\"? | \"b\")*\n" },
    { "[α-ω]+", L8G_RE_ANCHORED, "root ::= [\\u03B1-\\u03C9]+\n" },
    { ".", L8G_RE_ANCHORED, "root ::= [^\\x0A]\n" },
    { "[^a]", L8G_RE_ANCHORED, "root ::= [^a]\n" },
    { "\\d{3}-\\d{4}", L8G_RE_ANCHORED, "root ::= [0-9]{3} \"-\" [0-9]{4}\n" },
    { "^(ls|cat) [a-z./ -]+$", L8G_RE_ANCHORED, "root ::= (\"ls\" | \"cat\") \" \" [\\x20\\x2D-/a-z]+\n" },
    { "(ab){2,5}", L8G_RE_ANCHORED, "root ::= (\"ab\"){2,5}\n" },
    { "[]a]", L8G_RE_ANCHORED, "root ::= [\\x5Da]\n" },
    { "\\x{1F600}\\u00e9\"\\\\", L8G_RE_ANCHORED, "root ::= \"\\U0001F600\\u00E9\\x22\\x5C\"\n" },
    { "", L8G_RE_ANCHORED, "root ::= \"\"\n" },
    { "a|[^\\s\\S]", L8G_RE_ANCHORED, "root ::= \"a\"\n" },
    { "x{,3}", L8G_RE_ANCHORED, "root ::= \"x{,3}\"\n" },
    { "a++b", L8G_RE_ANCHORED, "root ::= \"a\"+ \"b\"\n" },
    { "abc", 0, "root ::= .* \"abc\" .*\n" },
    { "^a|b$|^c$|d|^e", 0, "root ::= .* \"d\" .* | [ae] .* | .* \"b\" | \"c\"\n" },
    { "^ab$", 0, "root ::= \"ab\"\n" },
    { "a?", 0, "root ::= .*\n" },
    { "a\"\\\\\n\\x01\\x1f", L8G_RE_ANCHORED | L8G_RE_JSON_STRING,
      "root ::= \"a\\x5C\\x22\\x5C\\x5C\\x5Cn\" \"\\\\u000\" [1] \"\\\\u001\" [fF]\n" },
    { "[^a]", L8G_RE_ANCHORED | L8G_RE_JSON_STRING,
      "root ::= [\\x20!#-\\x5B\\x5D-`b-\\U0010FFFF] | \"\\\\\" [btnfr\\x22\\x5C] | \"\\\\u000\" "
      "[01234567bBeEfF] | \"\\\\u001\" [0123456789aAbBcCdDeEfF]\n" },
    { "a", L8G_RE_JSON_STRING,
      "root ::= root-char* \"a\" root-char*\n"
      "root-char ::= [\\x20!#-\\x5B\\x5D-\\U0010FFFF] | \"\\\\\" [btnfr\\x22\\x5C] | \"\\\\u000\" "
      "[01234567bBeEfF] | \"\\\\u001\" [0123456789aAbBcCdDeEfF]\n" },
};

struct err_case {
    const char *re;
    int rc;
    const char *err;
};

static const struct err_case ERRS[] = {
    { "(a)\\1", -EINVAL, "column 4: backreference \\1 not supported" },
    { "(?<n>a)\\k<n>", -EINVAL, "column 8: backreference \\k not supported" },
    { "a(?=b)", -EINVAL, "column 2: lookahead (?= not supported" },
    { "a(?!b)", -EINVAL, "column 2: lookahead (?! not supported" },
    { "(?<=a)b", -EINVAL, "column 1: lookbehind (?<= not supported" },
    { "(?<!a)b", -EINVAL, "column 1: lookbehind (?<! not supported" },
    { "\\bword\\b", -EINVAL, "column 1: word boundary \\b not supported" },
    { "a\\B", -EINVAL, "column 2: word boundary \\B not supported" },
    { "(?>a+)b", -EINVAL, "column 1: atomic group (?> not supported" },
    { "(?i)abc", -EINVAL, "column 1: inline option (?i not supported" },
    { "a(?s:.)", -EINVAL, "column 2: inline option (?s not supported" },
    { "(?1)", -EINVAL, "column 1: recursion or named reference (?1 not supported" },
    { "(?R)", -EINVAL, "column 1: recursion or named reference (?R not supported" },
    { "(?(1)a|b)", -EINVAL, "column 1: conditional group (?( not supported" },
    { "(*UTF)a", -EINVAL, "column 1: (* verbs not supported" },
    { "(a", -EINVAL, "column 1: missing ) for this (" },
    { "((a)", -EINVAL, "column 1: missing ) for this (" },
    { "a)", -EINVAL, "column 2: unmatched )" },
    { "(a))", -EINVAL, "column 4: unmatched )" },
    { "[abc", -EINVAL, "column 1: unterminated class (a ] right after [ or [^ is a literal, "
                       "so [] is not an empty class)" },
    { "x[]", -EINVAL, "column 2: unterminated class (a ] right after [ or [^ is a literal, "
                      "so [] is not an empty class)" },
    { "[^]", -EINVAL, "column 1: unterminated class (a ] right after [ or [^ is a literal, "
                      "so [] is not an empty class)" },
    { "*a", -EINVAL, "column 1: quantifier does not follow a repeatable item" },
    { "a|+", -EINVAL, "column 3: quantifier does not follow a repeatable item" },
    { "(?:{2})", -EINVAL, "column 4: quantifier does not follow a repeatable item" },
    { "a**", -EINVAL, "column 3: quantifier does not follow a repeatable item" },
    { "a{2}{3}", -EINVAL, "column 5: quantifier does not follow a repeatable item" },
    { "a*?+", -EINVAL, "column 4: quantifier does not follow a repeatable item" },
    { "^*", -EINVAL, "column 2: quantifier does not follow a repeatable item" },
    { "a(?#c)*", -EINVAL, "column 7: quantifier does not follow a repeatable item" },
    { "a{3,2}", -EINVAL, "column 2: repetition {3,2}: the minimum is over the maximum" },
    { "a{10001}", -EINVAL, "column 2: repetition count over 10000" },
    { "a{1,10001}", -EINVAL, "column 2: repetition count over 10000" },
    { "a{99999999999}", -EINVAL, "column 2: repetition count over 10000" },
    { "a^b", -EINVAL, "column 2: ^ is supported only at the start of the pattern or of a "
                      "top-level alternative" },
    { "(^a)", -EINVAL, "column 2: ^ is supported only at the start of the pattern or of a "
                       "top-level alternative" },
    { "a$b", -EINVAL, "column 2: $ is supported only at the end of the pattern or of a "
                      "top-level alternative" },
    { "(a$)", -EINVAL, "column 3: $ is supported only at the end of the pattern or of a "
                       "top-level alternative" },
    { "\xff", -EINVAL, "column 1: invalid UTF-8" },
    { "ab\xc3", -EINVAL, "column 3: invalid UTF-8" },
    { "a\xc0\x80", -EINVAL, "column 2: invalid UTF-8" },
    { "\xed\xa0\x80", -EINVAL, "column 1: invalid UTF-8" },
    { "\xf4\x90\x80\x80", -EINVAL, "column 1: invalid UTF-8" },
    { "[z-a]", -EINVAL, "column 2: range out of order in a class" },
    { "[\\d-z]", -EINVAL, "column 4: invalid range in a class: a set cannot be its end" },
    { "[a-\\d]", -EINVAL, "column 4: invalid range in a class: a set cannot be its end" },
    { "[a-[:digit:]]", -EINVAL, "column 4: invalid range in a class: a set cannot be its end" },
    { "[[:foo:]]", -EINVAL, "column 2: unknown POSIX class [:foo:]" },
    { "\\x{110000}", -EINVAL, "column 1: code point over U+10FFFF" },
    { "a\\x{d800}", -EINVAL, "column 2: surrogate code point U+D800" },
    { "\\x{}", -EINVAL, "column 1: \\x{ needs hex digits and }" },
    { "\\u12", -EINVAL, "column 1: \\u needs four hex digits" },
    { "a\\", -EINVAL, "column 2: the pattern ends in \\" },
    { "\\p{L}", -EINVAL, "column 1: Unicode properties \\p not supported" },
    { "\\Aa", -EINVAL, "column 1: anchor \\A not supported (^ and $ are, at the ends)" },
    { "a\\z", -EINVAL, "column 2: anchor \\z not supported (^ and $ are, at the ends)" },
    { "\\q", -EINVAL, "column 1: escape \\q not supported" },
    { "\\Qa\\E", -EINVAL, "column 1: escape \\Q not supported" },
    { "\\c", -EINVAL, "column 1: \\c needs a printable ASCII character" },
    { "a++a", -EINVAL, "column 1: possessive quantifier not supported here (it would match "
                       "fewer strings than the plain one)" },
    { "(a|ab)*+", -EINVAL, "column 1: possessive quantifier not supported here (it would "
                           "match fewer strings than the plain one)" },
    { "(x[a-c]?+)", -EINVAL, "column 3: possessive quantifier not supported here (it would "
                             "match fewer strings than the plain one)" },
    { "[^\\s\\S]", -EINVAL, "column 1: the pattern matches no string" },
    { "(?<1a>x)", -EINVAL, "column 1: group name expected" },
};

static void test_texts(void)
{
    for (size_t i = 0; i < sizeof TEXTS / sizeof *TEXTS; i++) {
        const struct text_case *t = &TEXTS[i];
        char err[L8G_ERRLEN], *g = NULL;
        int rc = l8g_regex_to_gbnf_rules(t->re, strlen(t->re), "root", t->flags, &g, err);
        CHECK(rc == 0 && !strcmp(g, t->gbnf), "/%s/: %d %s, expected %s", t->re, rc,
              rc ? err : g, t->gbnf);
        free(g);
    }
}

static void test_errors(void)
{
    char err[L8G_ERRLEN], *g = (char *)"untouched";
    for (size_t i = 0; i < sizeof ERRS / sizeof *ERRS; i++) {
        const struct err_case *e = &ERRS[i];
        int rc = l8g_regex_to_gbnf(e->re, strlen(e->re), &g, err);
        CHECK(rc == e->rc && !strcmp(err, e->err), "/%s/: %d \"%s\", expected %d \"%s\"",
              e->re, rc, err, e->rc, e->err);
        CHECK(!strcmp(g, "untouched"));
    }
    /* nested too deep */
    char deep[1024];
    size_t n = 0;
    for (int i = 0; i < 201; i++)
        deep[n++] = '(';
    deep[n++] = 'a';
    for (int i = 0; i < 201; i++)
        deep[n++] = ')';
    int rc = l8g_regex_to_gbnf(deep, n, &g, err);
    CHECK(rc == -EINVAL && !strcmp(err, "column 201: groups nested deeper than 200"), "%d %s",
          rc, err);
    /* 200 is fine */
    rc = l8g_regex_to_gbnf(deep + 1, n - 2, &g, err);
    CHECK(rc == 0, "%d %s", rc, err);
    if (!rc)
        free(g);
    /* (a?a?...)* : every optional item in turn first, past 1 MiB of text */
    char *big = malloc(2 * 3000 + 8);
    n = 0;
    big[n++] = '(';
    for (int i = 0; i < 3000; i++) {
        big[n++] = 'a';
        big[n++] = '?';
    }
    big[n++] = ')';
    big[n++] = '*';
    g = (char *)"untouched";
    rc = l8g_regex_to_gbnf(big, n, &g, err);
    CHECK(rc == -E2BIG && !strcmp(err, "the grammar would be larger than 1 MiB"), "%d %s", rc,
          err);
    CHECK(!strcmp(g, "untouched"));
    free(big);
    /* a NUL in the pattern is a character */
    rc = l8g_regex_to_gbnf("a\0b", 3, &g, err);
    CHECK(rc == 0 && !strcmp(g, "root ::= \"a\\x00b\"\n"), "%d %s", rc, rc ? err : g);
    if (!rc)
        free(g);
    /* rule names */
    rc = l8g_regex_to_gbnf_rules("a", 1, "bad name", false, &g, err);
    CHECK(rc == -EINVAL && !strcmp(err, "invalid rule name"), "%d %s", rc, err);
    rc = l8g_regex_to_gbnf_rules("a", 1, "", false, &g, err);
    CHECK(rc == -EINVAL);
}

int main(int argc, char **argv)
{
    /* argv[1]: the walks per pattern (default 100, random strings as many;
     * a tenth of that for the random patterns). 300 takes minutes. */
    int n_walk = argc > 1 ? atoi(argv[1]) : 100;
    test_texts();
    test_errors();
    size_t n_pat = sizeof PATTERNS / sizeof *PATTERNS;
    for (size_t i = 0; i < n_pat; i++)
        compare(PATTERNS[i], strlen(PATTERNS[i]), n_walk, n_walk);
    long fixed = tot.patterns;
    max_walk = 24;
    uint64_t master = 27;   /* the patterns' seeds: compare() reseeds rng_s */
    int n_random = 1000, compared = 0;
    for (int i = 0; i < n_random; i++) {
        struct buf b = { .n = 0 };
        rng_s = master;
        master = rnd();
        rng_s = master;
        /* at most 60 bytes: the longer ones are ambiguous enough that the
         * reference matcher takes seconds a string */
        do {
            b.n = 0;
            if (rn(4) == 0)
                bput(&b, "^");
            gen_alt(&b, 0);
            if (rn(4) == 0)
                bput(&b, "$");
        } while (b.n > 60);
        b.b[b.n] = 0;
        compared += compare(b.b, b.n, n_walk / 10 + 1, n_walk / 10 + 1);
    }
    printf("%zu patterns (%ld compared), %d random ones (%d compared), %zu text cases, %zu "
           "errors; %ld strings (%ld matched), %ld checks (%ld undecided by PCRE2 skipped)\n",
           n_pat, fixed, n_random, compared, sizeof TEXTS / sizeof *TEXTS,
           sizeof ERRS / sizeof *ERRS, tot.strings, tot.matched, tot.checks, n_unknown);
    return t_result("test_regex");
}
