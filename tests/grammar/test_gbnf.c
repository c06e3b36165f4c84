/* test_gbnf.c - the GBNF parser and the reference matcher.
 *
 * - Every construct of the notation, with strings it must and must not
 *   match, whole and as a prefix.
 * - Classes against code points: random classes (ranges, negation, across
 *   the UTF-8 length boundaries and the surrogates) and every code point of
 *   a sample: matched exactly when in the class, with its UTF-8 bytes; a
 *   prefix of a character's bytes is a prefix.
 * - Errors: each with its line, column and words. */
#include <errno.h>

#include "grammar_test.h"

static struct l8g_grammar *parse(const char *text)
{
    char err[L8G_ERRLEN];
    struct l8g_grammar *g = NULL;
    int rc = l8g_grammar_parse(text, strlen(text), &g, err);
    CHECK(rc == 0, "'%s': %d %s", text, rc, err);
    return g;
}

static void expect(const char *text, const char *const *yes, const char *const *no,
                   const char *const *pre)
{
    struct l8g_grammar *g = parse(text);
    if (!g)
        return;
    for (; yes && *yes; yes++)
        CHECK(l8g_grammar_accepts(g, (const uint8_t *)*yes, strlen(*yes), false) &&
              l8g_grammar_accepts(g, (const uint8_t *)*yes, strlen(*yes), true),
              "'%s' should match '%s'", text, *yes);
    for (; no && *no; no++)
        CHECK(!l8g_grammar_accepts(g, (const uint8_t *)*no, strlen(*no), false),
              "'%s' should not match '%s'", text, *no);
    for (; pre && *pre; pre++)
        CHECK(l8g_grammar_accepts(g, (const uint8_t *)*pre, strlen(*pre), true) &&
              !l8g_grammar_accepts(g, (const uint8_t *)*pre, strlen(*pre), false),
              "'%s': '%s' should be a prefix only", text, *pre);
    l8g_grammar_free(g);
}

#define L(...) (const char *const[]){ __VA_ARGS__, NULL }

static void test_constructs(void)
{
    expect("root ::= \"ab\" \"c\"", L("abc"), L("", "ab", "abcd", "abd"), L("", "a", "ab"));
    expect("root ::= \"a\" | \"b\" | \"\"", L("a", "b", ""), L("ab", "c"), NULL);
    expect("root ::= (\"a\" | \"bc\")* \"!\"", L("!", "a!", "bca!", "aabcbc!"), L("b!", "a", "!!"),
           L("a", "b", "abc"));
    expect("root ::= [a-c]+", L("a", "cab"), L("", "d", "ad"), L(""));
    expect("root ::= [^a-c]?", L("", "d", "é", "\n"), L("a", "dd"), NULL);
    expect("root ::= \"x\"{3}", L("xxx"), L("xx", "xxxx"), L("xx"));
    expect("root ::= \"x\"{2,}", L("xx", "xxxxxx"), L("x"), L("x"));
    expect("root ::= \"ab\"{1,3}", L("ab", "abab", "ababab"), L("", "a", "abababab"), L("aba"));
    expect("root ::= \"x\"{,2} \"y\"", L("y", "xy", "xxy"), L("xxxy"), NULL);
    expect("root ::= \"x\"{0} \"y\"", L("y"), L("xy"), NULL);
    expect("root ::= .", L("a", "é", "😀", "\n"), L("", "ab"), L("\xf0\x9f"));
    expect("root ::= \"\\x41\\u00e9\\U0001F600\\n\\t\\\\\\\"\"", L("Aé😀\n\t\\\""), L("A"), NULL);
    expect("root ::= [\\]\\[\\-\\\\^]+", L("]", "[", "-", "\\", "^", "]-["), L("a"), NULL);
    expect("root ::= [-a]+ [b-]", L("-b", "a-", "aab"), L("c"), NULL);
    /* names, comments, whitespace and newlines anywhere, rules in any order */
    expect("# a comment\nroot ::= a  # trailing\n  b\n\na ::= \"x\" |\n \"y\"\nb-2_x ::= \"z\"\n"
           "b ::= b-2_x", L("xz", "yz"), L("x", "zz"), NULL);
    expect("root ::= ( \"[\" ( root ( \",\" root )* )? \"]\" )", L("[]", "[[],[[]]]"),
           L("[", "[,]", "[[]"), L("[[", "[[],"));
    /* a rule that cannot end is dropped where an alternative can */
    expect("root ::= \"a\" | loop\nloop ::= \"b\" loop", L("a"), L("b", "bb"), NULL);
    /* long repetitions stay flat: 100,000 characters of a string */
    {
        struct l8g_grammar *g = parse("root ::= \"\\\"\" [^\"]* \"\\\"\"");
        size_t n = 100002;
        uint8_t *s = malloc(n);
        memset(s, 'a', n);
        s[0] = s[n - 1] = '"';
        CHECK(g && l8g_grammar_accepts(g, s, n, false), "a 100,000-character string");
        free(s);
        l8g_grammar_free(g);
    }
    /* the literal of a repetition is one unit */
    expect("root ::= \"ab\"*", L("", "ab", "abab"), L("a", "aba", "b"), NULL);
}

/* Random classes against code points: the class in GBNF, the same set here. */
static void test_classes(void)
{
    uint64_t seed = 42;
    static const uint32_t edges[] = { 0, 1, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfffd,
                                      0xffff, 0x10000, 0x3ffff, 0x40000, 0x10ffff };
    const int n_edges = sizeof edges / sizeof edges[0];
    int checked = 0;
    for (int round = 0; round < 60; round++) {
        uint32_t lo[4], hi[4];
        int nr = 1 + (int)(gt_rand(&seed) % 4);
        bool neg = gt_rand(&seed) % 2;
        char text[512];
        int len = snprintf(text, sizeof text, "root ::= [%s", neg ? "^" : "");
        for (int i = 0; i < nr; i++) {
            uint32_t a = gt_rand(&seed) % 2 ? edges[gt_rand(&seed) % n_edges]
                                            : (uint32_t)(gt_rand(&seed) % 0x110000);
            uint32_t b = gt_rand(&seed) % 3 ? edges[gt_rand(&seed) % n_edges]
                                            : (uint32_t)(gt_rand(&seed) % 0x110000);
            if (a > b) {
                uint32_t t = a;
                a = b;
                b = t;
            }
            lo[i] = a;
            hi[i] = b;
            len += snprintf(text + len, sizeof text - (size_t)len, "\\U%08X-\\U%08X", a, b);
        }
        snprintf(text + len, sizeof text - (size_t)len, "]");
        char err[L8G_ERRLEN];
        struct l8g_grammar *g = NULL;
        int rc = l8g_grammar_parse(text, strlen(text), &g, err);
        /* a range of surrogates alone is refused as an escape of a non-character */
        bool sur = false;
        for (int i = 0; i < nr; i++)
            sur = sur || (lo[i] >= 0xd800 && lo[i] <= 0xdfff) || (hi[i] >= 0xd800 && hi[i] <= 0xdfff);
        if (sur) {
            CHECK(rc == -EINVAL && strstr(err, "not a character"), "%s: %d %s", text, rc, err);
            continue;
        }
        if (rc) {   /* nothing left (a negation of everything) */
            CHECK(rc == -EINVAL && strstr(err, "matches nothing"), "%s: %d %s", text, rc, err);
            continue;
        }
        for (int k = 0; k < 3000; k++) {
            uint32_t cp = k < n_edges ? edges[k] : k < 2 * n_edges ? edges[k - n_edges] + 1
                        : (uint32_t)(gt_rand(&seed) % 0x110000);
            for (int i = 0; i < nr && k >= n_edges && k < 2 * n_edges * 2; i++)
                cp = k % 2 ? lo[i] : hi[i];
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                continue;
            bool in = false;
            for (int i = 0; i < nr; i++)
                in = in || (cp >= lo[i] && cp <= hi[i]);
            in = in != neg;
            uint8_t b[4];
            int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (n == 1) {
                b[0] = (uint8_t)cp;
            } else {
                for (int j = n - 1; j > 0; j--)
                    b[j] = (uint8_t)(0x80 | ((cp >> (6 * (n - 1 - j))) & 0x3f));
                b[0] = (uint8_t)((0xf00 >> n) | (cp >> (6 * (n - 1))));
            }
            bool got = l8g_grammar_accepts(g, b, (size_t)n, false);
            CHECK(got == in, "%s: U+%04X %s", text, cp, in ? "not matched" : "matched");
            /* its first bytes are a prefix exactly when it is in the class */
            if (n > 1)
                CHECK(l8g_grammar_accepts(g, b, (size_t)n - 1, true) || !in,
                      "%s: U+%04X's first bytes not a prefix", text, cp);
            checked++;
        }
        l8g_grammar_free(g);
    }
    printf("classes: %d code points checked\n", checked);
}

static void expect_error(const char *text, int rc0, const char *msg)
{
    char err[L8G_ERRLEN] = "";
    struct l8g_grammar *g = NULL;
    int rc = l8g_grammar_parse(text, strlen(text), &g, err);
    CHECK(rc == rc0 && strstr(err, msg), "'%s': %d '%s', expected %d '%s'", text, rc, err, rc0,
          msg);
    if (!rc)
        l8g_grammar_free(g);
}

static void test_errors(void)
{
    expect_error("", -EINVAL, "no rule 'root'");
    expect_error("a ::= \"x\"", -EINVAL, "no rule 'root'");
    expect_error("root ::= a", -EINVAL, "line 1, column 10: rule 'a' is not defined");
    expect_error("root ::= \"x\"\nroot ::= \"y\"", -EINVAL, "line 2, column 1: rule 'root' is "
                 "defined twice");
    expect_error("root ::= \"abc", -EINVAL, "line 1, column 10: unterminated literal");
    expect_error("root ::= [abc", -EINVAL, "line 1, column 10: unterminated character class");
    expect_error("root ::= []", -EINVAL, "empty character class");
    expect_error("root ::= [z-a]", -EINVAL, "line 1, column 13: class range out of order");
    expect_error("root ::= (\"a\"", -EINVAL, "line 1, column 10: unbalanced '('");
    expect_error("root ::= \"a\")", -EINVAL, "line 1, column 13: unbalanced ')'");
    expect_error("root ::= * \"a\"", -EINVAL, "line 1, column 10: '*' with nothing to repeat");
    expect_error("root ::= \"a\"{3,2}", -EINVAL, "the maximum is below the minimum");
    expect_error("root ::= \"a\"{2", -EINVAL, "unterminated repetition");
    expect_error("root ::= \"a\"{10001}", -E2BIG, "repetition count over 10000");
    expect_error("root ::= \"\\q\"", -EINVAL, "line 1, column 11: unknown escape '\\q'");
    expect_error("root ::= \"\\x4\"", -EINVAL, "'\\x' needs 2 hex digits");
    expect_error("root ::= \"\\uD800\"", -EINVAL, "U+D800, which is not a character");
    expect_error("root ::= \"\\U00110000\"", -EINVAL, "not a character");
    expect_error("root ::= \"\xff\"", -EINVAL, "line 1, column 11: invalid UTF-8");
    expect_error("root ::= \"\xc0\x80\"", -EINVAL, "invalid UTF-8");
    expect_error("root ::= @", -EINVAL, "line 1, column 10: unexpected '@'");
    expect_error("root ::= \"a\"\n::= \"b\"", -EINVAL, "line 2, column 1: '::=' without a rule "
                 "name");
    expect_error("root ::= x\nx ::= x \"a\" | \"b\"", -EINVAL, "line 2, column 1: left "
                 "recursion: rule 'x' can begin with itself");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= \"\" | a", -EINVAL, "left recursion");
    expect_error("root ::= (\"a\"?)*", -EINVAL, "a repetition of something that can be empty");
    expect_error("root ::= \"a\" loop\nloop ::= \"b\" loop", -EINVAL, "the grammar matches "
                 "nothing");
    expect_error("root ::= [^\\x00-\\U0010FFFF]", -EINVAL, "matches nothing");
    /* sizes */
    size_t big = (1u << 20) + 1;
    char *t = malloc(big + 1);
    memset(t, ' ', big);
    memcpy(t, "root ::= \"a\"", 12);
    t[big] = 0;
    expect_error(t, -E2BIG, "over the 1048576-byte limit");
    free(t);
    /* 430 x 10000 elements: over 2^22 once expanded (a repeated group stays one element) */
    t = malloc(430 * 12 + 16);
    strcpy(t, "root ::=");
    for (int i = 0; i < 430; i++)
        strcat(t, " \"a\"{10000}");
    expect_error(t, -E2BIG, "the grammar is too large");
    free(t);
    expect(("root ::= (((\"a\"{10}){10}){10})"), NULL, L("a"), L("aaaaaaaaaaa"));
}

int main(void)
{
    test_constructs();
    test_classes();
    test_errors();
    return t_result("test_gbnf");
}
