/* test_schema.c - l8g_schema_to_gbnf (daemon/grammar/json_schema.c), checked by
 * running its grammars: every grammar it writes is parsed by gbnf.c and asked
 * about instances with l8g_grammar_accepts.
 *
 *   test_schema CORPUS_DIR      (tests/grammar/schemas)
 *
 * The corpus: NAME.schema.json beside NAME.cases.json = {"valid": [values],
 * "invalid": [values], "valid_text": [JSON texts], "invalid_text": [...],
 * "subset_text": [...]}. Each value is tried as json-c writes it compact,
 * spaced and pretty (tabs); texts as they are. subset_text holds what the
 * schema validates but the grammar deliberately does not take (another
 * member order, whitespace beyond ws, 1.0 for an integer): rejected here,
 * valid for ajv (ajv_cases.mjs checks every label of the corpus with ajv).
 *
 * Then, without the corpus: whitespace bounds, integer ranges against
 * arithmetic (int64 extremes, one- and two-sided, exclusive), number ranges,
 * long strings (repetition counts past gbnf.c's 10000), the exact error of
 * each unsupported keyword with its JSON pointer, malformed schemas, the
 * limits, and $ref cycles. */
#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "grammar.h"

/* The schema's grammar, parsed; NULL (a failed check) when either step fails. */
static struct l8g_grammar *grammar_of(const char *schema, const char *what)
{
    char *gbnf = NULL, err[L8G_ERRLEN];
    int rc = l8g_schema_to_gbnf(schema, strlen(schema), &gbnf, err);
    CHECK(rc == 0, "%s: l8g_schema_to_gbnf %d: %s", what, rc, err);
    if (rc)
        return NULL;
    struct l8g_grammar *g = NULL;
    rc = l8g_grammar_parse(gbnf, strlen(gbnf), &g, err);
    CHECK(rc == 0, "%s: l8g_grammar_parse %d: %s\n%s", what, rc, err, gbnf);
    free(gbnf);
    return rc ? NULL : g;
}

static bool accepts(const struct l8g_grammar *g, const char *s)
{
    return l8g_grammar_accepts(g, (const uint8_t *)s, strlen(s), false);
}

/* ---- the corpus ----------------------------------------------------------- */

static int n_instances;

static void check_value(const char *name, const struct l8g_grammar *g, json_object *v, bool valid)
{
    static const int forms[] = {
        JSON_C_TO_STRING_PLAIN, JSON_C_TO_STRING_SPACED,
        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_PRETTY_TAB | JSON_C_TO_STRING_SPACED};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        const char *t = json_object_to_json_string_ext(v, forms[i] |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
        bool a = accepts(g, t);
        CHECK(a == valid, "%s: %s instance %s was %s", name, valid ? "valid" : "invalid", t,
              a ? "accepted" : "rejected");
        n_instances++;
    }
}

static void check_texts(const char *name, const struct l8g_grammar *g, json_object *cases,
                        const char *key, bool valid)
{
    json_object *list;
    if (!json_object_object_get_ex(cases, key, &list))
        return;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const char *t = json_object_get_string(json_object_array_get_idx(list, i));
        bool a = accepts(g, t);
        CHECK(a == valid, "%s: %s \"%s\" was %s", name, key, t, a ? "accepted" : "rejected");
        n_instances++;
    }
}

static int is_schema(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return n > 12 && !strcmp(d->d_name + n - 12, ".schema.json");
}

static void test_corpus(const char *dir)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, is_schema, alphasort);
    REQUIRE(n > 0, "no schemas in %s", dir);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(ents[i]->d_name) - 12), ents[i]->d_name);
        char *sp = t_path(dir, ents[i]->d_name), cf[300];
        snprintf(cf, sizeof cf, "%s.cases.json", name);
        char *cp = t_path(dir, cf);
        size_t len;
        char *schema = (char *)t_read(sp, &len);
        json_object *cases = json_object_from_file(cp);
        REQUIRE(schema && cases, "%s: cannot read the schema or its cases", name);
        char *gbnf = NULL, err[L8G_ERRLEN];
        int rc = l8g_schema_to_gbnf(schema, len, &gbnf, err);
        {
            CHECK(rc == 0, "%s: %d %s", name, rc, err);
            struct l8g_grammar *g = NULL;
            if (rc == 0) {
                rc = l8g_grammar_parse(gbnf, strlen(gbnf), &g, err);
                CHECK(rc == 0, "%s: the grammar does not parse: %s\n%s", name, err, gbnf);
            }
            if (g) {
                json_object *list;
                static const char *const kinds[] = {"valid", "invalid"};
                for (int k = 0; k < 2; k++)
                    if (json_object_object_get_ex(cases, kinds[k], &list))
                        for (size_t j = 0; j < json_object_array_length(list); j++)
                            check_value(name, g, json_object_array_get_idx(list, j), k == 0);
                check_texts(name, g, cases, "valid_text", true);
                check_texts(name, g, cases, "invalid_text", false);
                check_texts(name, g, cases, "subset_text", false);
                checked++;
            }
            l8g_grammar_free(g);
        }
        free(gbnf);
        json_object_put(cases);
        free(schema);
        free(sp);
        free(cp);
        free(ents[i]);
    }
    free(ents);
    printf("corpus: %d schemas checked, %d instances\n", checked, n_instances);
    CHECK(checked >= 50, "only %d schemas", checked);
}

/* ---- whitespace ------------------------------------------------------------- */

static void test_whitespace(void)
{
    struct l8g_grammar *g = grammar_of("{\"type\":\"array\",\"items\":{\"type\":\"object\"}}",
                                       "ws");
    if (!g)
        return;
    char buf[128];
    CHECK(accepts(g, "[{},{}]"));
    CHECK(accepts(g, "[ { } , { \"a\" : [ 1 ] } ]"));
    snprintf(buf, sizeof buf, "[\n%20s{}]", "");
    CHECK(accepts(g, buf), "a newline and 20 spaces");
    snprintf(buf, sizeof buf, "[\n%21s{}]", "");
    CHECK(!accepts(g, buf), "21 spaces");
    CHECK(accepts(g, "[\n\t\t{}\n]"));
    CHECK(!accepts(g, "[  {}]"), "two spaces");
    CHECK(!accepts(g, "[ \n{}]"), "a space then a newline");
    CHECK(!accepts(g, "[\r\n{}]"), "CR");
    CHECK(!accepts(g, " [{}]"), "before the value");
    CHECK(!accepts(g, "[{}] "), "after the value");
    CHECK(!accepts(g, "[{}]\n"), "a newline after the value");
    l8g_grammar_free(g);
}

/* ---- integer ranges ---------------------------------------------------------- */

static void i128_str(__int128 v, char *out)
{
    char tmp[64];
    int n = 0;
    bool neg = v < 0;
    unsigned __int128 u = neg ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    int k = 0;
    if (neg)
        out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    out[k] = 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

/* The integers around lo and hi, the powers of ten between, random ones and
 * ones past int64, each accepted exactly when lo <= x <= hi. */
static void check_int_range(bool has_lo, int64_t lo, bool has_hi, int64_t hi)
{
    char schema[256], a[64], b[64];
    int k = snprintf(schema, sizeof schema, "{\"type\":\"integer\"");
    i128_str(lo, a);
    i128_str(hi, b);
    if (has_lo)
        k += snprintf(schema + k, sizeof schema - (size_t)k, ",\"minimum\":%s", a);
    if (has_hi)
        k += snprintf(schema + k, sizeof schema - (size_t)k, ",\"maximum\":%s", b);
    snprintf(schema + k, sizeof schema - (size_t)k, "}");
    const char *what = schema;
    struct l8g_grammar *g = grammar_of(schema, what);
    if (!g)
        return;
    __int128 cand[600];
    int n = 0;
    __int128 centers[4] = {has_lo ? lo : -1000, has_hi ? hi : 1000, 0, -1};
    for (int c = 0; c < 4; c++)
        for (int d = -12; d <= 12; d++)
            cand[n++] = centers[c] + d;
    for (__int128 p = 1; p < ((__int128)1 << 66); p *= 10) {
        cand[n++] = p;
        cand[n++] = p - 1;
        cand[n++] = -p;
        cand[n++] = -p + 1;
    }
    while (n < 560) {
        __int128 x = (int64_t)next_rand() >> (next_rand() % 63);
        if (has_lo && has_hi && next_rand() % 2)
            x = lo + (__int128)(next_rand() % ((uint64_t)((__int128)hi - lo) + 1));
        cand[n++] = x;
    }
    for (int i = 0; i < n; i++) {
        char s[64];
        i128_str(cand[i], s);
        bool want = (!has_lo || cand[i] >= lo) && (!has_hi || cand[i] <= hi);
        bool got = accepts(g, s);
        CHECK(got == want, "%s: %s %s", what, s, got ? "accepted" : "rejected");
    }
    /* not integers, and -0 / leading zeros never */
    CHECK(!accepts(g, "01"), "%s: 01", what);
    CHECK(!accepts(g, "1.0"), "%s: 1.0", what);
    CHECK(!accepts(g, ""), "%s: empty", what);
    l8g_grammar_free(g);
}

static void test_int_ranges(void)
{
    static const int64_t pts[] = {INT64_MIN, INT64_MIN + 1, -9999999999, -1000, -999, -101, -100,
                                  -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000,
                                  1234, 56789, 9007199254740993, INT64_MAX - 1, INT64_MAX};
    size_t np = sizeof pts / sizeof pts[0];
    for (size_t i = 0; i < np; i++) {
        check_int_range(true, pts[i], false, 0);
        check_int_range(false, 0, true, pts[i]);
    }
    for (size_t i = 0; i < np; i += 3)
        for (size_t j = i; j < np; j += 2)
            check_int_range(true, pts[i], true, pts[j]);
    for (int r = 0; r < 20; r++) {
        int64_t x = (int64_t)next_rand() >> (next_rand() % 60);
        int64_t y = (int64_t)next_rand() >> (next_rand() % 60);
        check_int_range(true, x < y ? x : y, true, x < y ? y : x);
    }
    /* exclusive bounds and fractional ones are the integers inside */
    struct l8g_grammar *g = grammar_of("{\"type\":\"integer\",\"exclusiveMinimum\":-3,"
                                       "\"exclusiveMaximum\":2.5,\"minimum\":-2.5}", "exclusive");
    if (g) {
        static const char *const in[] = {"-2", "-1", "0", "1", "2"};
        static const char *const out[] = {"-3", "3", "-4", "2.5"};
        for (size_t i = 0; i < 5; i++)
            CHECK(accepts(g, in[i]), "%s", in[i]);
        for (size_t i = 0; i < 4; i++)
            CHECK(!accepts(g, out[i]), "%s", out[i]);
        l8g_grammar_free(g);
    }
}

/* ---- number ranges ------------------------------------------------------------- */

static void check_num_range(const char *schema, long double lo, bool lo_ex, long double hi,
                            bool hi_ex)
{
    struct l8g_grammar *g = grammar_of(schema, schema);
    if (!g)
        return;
    for (int i = 0; i < 3000; i++) {
        char s[64];
        long long ip = (long long)(next_rand() % 400) - 200;
        long double near = i % 2 ? lo : hi;
        if (i % 3 == 0 && isfinite(near))
            ip = (long long)near + (long long)(next_rand() % 3) - 1;
        int fd = (int)(next_rand() % 4);
        if (fd == 0) {
            snprintf(s, sizeof s, "%lld", ip);
        } else {
            char fr[8];
            for (int d = 0; d < fd; d++)
                fr[d] = next_rand() % 3 ? (char)('0' + next_rand() % 10) : '0';
            fr[fd] = 0;
            snprintf(s, sizeof s, "%s%lld.%s", ip == 0 && next_rand() % 2 ? "-" : "", ip, fr);
        }
        long double v = strtold(s, NULL);
        bool want = (lo_ex ? v > lo : v >= lo) && (hi_ex ? v < hi : v <= hi);
        if (v == 0 && s[0] == '-')
            want = false; /* -0 is not written */
        bool got = accepts(g, s);
        CHECK(got == want, "%s: %s %s", schema, s, got ? "accepted" : "rejected");
    }
    l8g_grammar_free(g);
}

static void test_number_ranges(void)
{
    check_num_range("{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}", -90, false, 90, false);
    check_num_range("{\"type\":\"number\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":7}", -5,
                    true, 7, true);
    check_num_range("{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":1}", 0, false, 1, true);
    check_num_range("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100}", 0, true, 100,
                    false);
    check_num_range("{\"type\":\"number\",\"minimum\":3}", 3, false, INFINITY, false);
    check_num_range("{\"type\":\"number\",\"exclusiveMaximum\":-3}", -INFINITY, false, -3, true);
    check_num_range("{\"type\":\"number\",\"minimum\":-10,\"maximum\":-2}", -10, false, -2, false);
    check_num_range("{\"type\":\"number\",\"minimum\":5,\"maximum\":5}", 5, false, 5, false);
    check_num_range("{\"type\":\"number\",\"exclusiveMinimum\":-1,\"exclusiveMaximum\":0}", -1,
                    true, 0, true);
}

static void check_error(const char *schema, size_t len, int want_rc, const char *want);

/* ---- long strings ---------------------------------------------------------------- */

static void check_len(const struct l8g_grammar *g, size_t n, bool want, const char *what)
{
    char *s = malloc(n + 3);
    REQUIRE(s);
    s[0] = '"';
    memset(s + 1, 'x', n);
    s[n + 1] = '"';
    s[n + 2] = 0;
    CHECK(accepts(g, s) == want, "%s: a string of %zu", what, n);
    free(s);
}

static void test_long_strings(void)
{
    /* counts past gbnf.c's 10000 become nested repetitions. (gbnf.c's
     * reference matcher nests a frame per optional or starred item matched,
     * up to 4096, so the long strings here go through the fixed counts) */
    struct l8g_grammar *g = grammar_of("{\"type\":\"string\",\"minLength\":25000,"
                                       "\"maxLength\":25000}", "exact");
    if (g) {
        check_len(g, 24999, false, "exact");
        check_len(g, 25000, true, "exact");
        check_len(g, 25001, false, "exact");
        l8g_grammar_free(g);
    }
    g = grammar_of("{\"type\":\"string\",\"minLength\":20001,\"maxLength\":21000}", "long");
    if (g) {
        check_len(g, 20000, false, "long");
        check_len(g, 20001, true, "long");
        check_len(g, 21000, true, "long");
        check_len(g, 21001, false, "long");
        l8g_grammar_free(g);
    }
    g = grammar_of("{\"type\":\"string\",\"maxLength\":20003}", "max");
    if (g) {
        check_len(g, 0, true, "max");
        check_len(g, 3000, true, "max");
        l8g_grammar_free(g);
    }
    char *gbnf = NULL, err[L8G_ERRLEN];
    const char *sc = "{\"type\":\"string\",\"maxLength\":20003}";
    REQUIRE(l8g_schema_to_gbnf(sc, strlen(sc), &gbnf, err) == 0);
    CHECK(strstr(gbnf, "root ::= \"\\\"\" ( ( char{10000} ){0,1} char{0,9999} | ( char{10000} ){2} "
                 "char{0,3} ) \"\\\"\"\n"), "%s", gbnf);
    free(gbnf);
    sc = "{\"type\":\"string\",\"minLength\":100010000}";
    check_error(sc, strlen(sc), -E2BIG, "/minLength: a count over 100000000 is unsupported");
    sc = "{\"type\":\"string\",\"maxLength\":100010000}";
    check_error(sc, strlen(sc), -E2BIG, "/maxLength: a count over 100000000 is unsupported");
}

/* ---- errors ------------------------------------------------------------------------ */

struct err_case {
    const char *schema;
    int rc;
    const char *msg;
};

static const struct err_case err_cases[] = {
    /* every unsupported keyword, with its pointer */
    {"{\"not\":{\"type\":\"null\"}}", -EINVAL, "/not: unsupported keyword \"not\""},
    {"{\"if\":{},\"then\":{}}", -EINVAL, "/if: unsupported keyword \"if\""},
    {"{\"then\":{}}", -EINVAL, "/then: unsupported keyword \"then\""},
    {"{\"else\":{}}", -EINVAL, "/else: unsupported keyword \"else\""},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", -EINVAL,
     "/patternProperties: unsupported keyword \"patternProperties\""},
    {"{\"type\":\"object\",\"dependentRequired\":{\"a\":[\"b\"]}}", -EINVAL,
     "/dependentRequired: unsupported keyword \"dependentRequired\""},
    {"{\"type\":\"object\",\"dependentSchemas\":{}}", -EINVAL,
     "/dependentSchemas: unsupported keyword \"dependentSchemas\""},
    {"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"uniqueItems\":true}}}",
     -EINVAL, "/properties/tags/uniqueItems: unsupported keyword \"uniqueItems\""},
    {"{\"type\":\"array\",\"contains\":{\"type\":\"null\"}}", -EINVAL,
     "/contains: unsupported keyword \"contains\""},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"multipleOf\":5}}", -EINVAL,
     "/items/multipleOf: unsupported keyword \"multipleOf\""},
    {"{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", -EINVAL,
     "/propertyNames: unsupported keyword \"propertyNames\""},
    {"{\"type\":\"object\",\"unevaluatedProperties\":false}", -EINVAL,
     "/unevaluatedProperties: unsupported keyword \"unevaluatedProperties\""},
    {"{\"unevaluatedItems\":false}", -EINVAL,
     "/unevaluatedItems: unsupported keyword \"unevaluatedItems\""},
    {"{\"type\":\"object\",\"minProperties\":1}", -EINVAL,
     "/minProperties: unsupported keyword \"minProperties\""},
    {"{\"type\":\"object\",\"maxProperties\":1}", -EINVAL,
     "/maxProperties: unsupported keyword \"maxProperties\""},
    {"{\"additionalItems\":false}", -EINVAL, "/additionalItems: unsupported keyword \"additionalItems\""},
    {"{\"minContains\":1}", -EINVAL, "/minContains: unsupported keyword \"minContains\""},
    {"{\"$anchor\":\"a\"}", -EINVAL, "/$anchor: unsupported keyword \"$anchor\""},
    {"{\"$dynamicRef\":\"#a\"}", -EINVAL, "/$dynamicRef: unsupported keyword \"$dynamicRef\""},
    {"{\"nullable\":true,\"type\":\"string\"}", -EINVAL, "/nullable: unsupported keyword \"nullable\""},
    {"{\"contentEncoding\":\"base64\"}", -EINVAL,
     "/contentEncoding: unsupported keyword \"contentEncoding\""},
    /* deeper pointers: escapes, anyOf, prefixItems, $defs via $ref, additionalProperties */
    {"{\"properties\":{\"a/b~c\":{\"not\":{}}}}", -EINVAL,
     "/properties/a~1b~0c/not: unsupported keyword \"not\""},
    {"{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"contentMediaType\":\"x\"}]}", -EINVAL,
     "/anyOf/1/contentMediaType: unsupported keyword \"contentMediaType\""},
    {"{\"prefixItems\":[{},{\"contains\":{}}]}", -EINVAL,
     "/prefixItems/1/contains: unsupported keyword \"contains\""},
    {"{\"$defs\":{\"x\":{\"type\":\"integer\",\"multipleOf\":2}},\"items\":{\"$ref\":\"#/$defs/x\"}}",
     -EINVAL, "/$defs/x/multipleOf: unsupported keyword \"multipleOf\""},
    {"{\"additionalProperties\":{\"uniqueItems\":true}}", -EINVAL,
     "/additionalProperties/uniqueItems: unsupported keyword \"uniqueItems\""},
    {"{\"allOf\":[{\"properties\":{}},{\"not\":{}}]}", -EINVAL,
     "/allOf/1/not: unsupported keyword \"not\""},
    {"{\"oneOf\":[{\"if\":{}}]}", -EINVAL, "/oneOf/0/if: unsupported keyword \"if\""},
    /* values the keywords cannot have, or that match nothing */
    {"{\"type\":\"string\",\"format\":\"uri\"}", -EINVAL, "/format: unsupported format \"uri\""},
    {"{\"type\":\"strin\"}", -EINVAL, "/type: unknown type \"strin\""},
    {"{\"type\":[]}", -EINVAL, "/type: an empty list of types matches nothing"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", -EINVAL,
     "/minimum: no integer is in the range"},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", -EINVAL,
     "/exclusiveMinimum: the boolean form (draft 4) is unsupported"},
    {"{\"type\":\"integer\",\"minimum\":1e30}", -EINVAL,
     "/minimum: outside the 64-bit integer range"},
    {"{\"type\":\"integer\",\"maximum\":9223372036854775808}", -EINVAL,
     "/maximum: outside the 64-bit integer range"},
    {"{\"type\":\"number\",\"minimum\":0.5}", -EINVAL,
     "/minimum: a \"number\" range with a bound that is not an integer is unsupported"},
    {"{\"type\":\"number\",\"minimum\":2,\"exclusiveMaximum\":2}", -EINVAL,
     "no number is in the range of minimum and maximum"},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", -EINVAL,
     "/minLength: is greater than maxLength: no string matches"},
    {"{\"type\":\"string\",\"minLength\":-1}", -EINVAL, "/minLength: must be a non-negative integer"},
    {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":4}", -EINVAL,
     "/maxLength: unsupported together with format"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", -EINVAL,
     "/minItems: is greater than maxItems: no array matches"},
    {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", -EINVAL,
     "/minItems: is more than prefixItems allows with items false: no array matches"},
    {"{\"items\":[{}]}", -EINVAL,
     "/items: the array form (draft 2019 and before) is unsupported: use prefixItems"},
    {"{\"enum\":[]}", -EINVAL, "/enum: must be a non-empty array"},
    {"{\"type\":\"string\",\"enum\":[1,2]}", -EINVAL,
     "/enum: no value of it is of the schema's type: no value matches"},
    {"{\"enum\":[1],\"minimum\":0}", -EINVAL, "/minimum: unsupported beside enum"},
    {"false", -EINVAL, "schema false matches nothing"},
    {"{\"properties\":{\"a\":false},\"required\":[\"a\"]}", -EINVAL,
     "/properties/a: schema false matches nothing, and \"a\" is required"},
    {"{\"properties\":{},\"required\":[\"a\"],\"additionalProperties\":false}", -EINVAL,
     "/required: \"a\" is not in properties and additionalProperties is false: no object matches"},
    {"{\"anyOf\":[false,false]}", -EINVAL, "/anyOf: every branch is false: no value matches"},
    {"{\"anyOf\":[]}", -EINVAL, "/anyOf: must be a non-empty array of schemas"},
    {"[1]", -EINVAL, "a schema must be an object or a boolean"},
    {"{\"properties\":{\"a\":3}}", -EINVAL, "/properties/a: a schema must be an object or a boolean"},
    {"{\"allOf\":[{\"type\":\"string\"}]}", -EINVAL,
     "/allOf/0/type: only object schemas are supported in allOf (type \"string\")"},
    {"{\"allOf\":[{\"minLength\":1}]}", -EINVAL,
     "/allOf/0/minLength: only object schemas (properties, required) are supported in allOf, "
     "not \"minLength\""},
    {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false}]}", -EINVAL,
     "/allOf/0/additionalProperties: unsupported in or beside allOf (it would see only its own "
     "branch's properties)"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"anyOf\":[{\"additionalProperties\":false}]}",
     -EINVAL, "/anyOf/0/additionalProperties: unsupported: on one side of anyOf, and property "
              "\"a\" only on the other"},
    {"{\"type\":\"array\",\"items\":{},\"oneOf\":[{\"prefixItems\":[{}]}]}", -EINVAL,
     "/oneOf/0/items: unsupported: items and prefixItems on either side of oneOf"},
    {"{\"properties\":{\"a\":{}},\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"null\"}}}]}",
     -EINVAL, "/anyOf/0/properties: unsupported: \"a\" is also beside anyOf, with another schema"},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"object\"}", -EINVAL, "/type: unsupported beside $ref"},
    /* $ref */
    {"{\"$ref\":\"#/$defs/missing\",\"$defs\":{}}", -EINVAL,
     "/$ref: \"#/$defs/missing\" names nothing in the schema"},
    {"{\"properties\":{\"a\":{\"$ref\":\"#/definitions/nope\"}}}", -EINVAL,
     "/properties/a/$ref: \"#/definitions/nope\" names nothing in the schema"},
    {"{\"$ref\":\"https://example.com/s.json\"}", -EINVAL,
     "/$ref: only references into this schema (\"#...\") are supported, not "
     "\"https://example.com/s.json\""},
    {"{\"$ref\":\"#foo\"}", -EINVAL, "/$ref: unsupported reference \"#foo\" (anchors are not "
                                     "supported)"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
     "\"$ref\":\"#/$defs/a\"}",
     -EINVAL, "/$defs/b/$ref: \"#/$defs/a\" refers back to itself with nothing in between (a "
              "cycle of references that matches nothing)"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", -EINVAL,
     "/$defs/a/$ref: \"#/$defs/a\" refers back to itself with nothing in between (a cycle of "
     "references that matches nothing)"},
    {"{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#\"}]}", -EINVAL,
     "/anyOf/1/$ref: \"#\" refers back to itself with nothing in between (a cycle of references "
     "that matches nothing)"},
    {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/b\"},{\"type\":\"null\"}]},"
     "\"b\":{\"oneOf\":[{\"type\":\"string\"},{\"$ref\":\"#/$defs/c\"}]},\"c\":{\"$ref\":\"#/$defs/a\"}},"
     "\"$ref\":\"#/$defs/a\"}",
     -EINVAL, "/$defs/c/$ref: \"#/$defs/a\" refers back to itself with nothing in between (a "
              "cycle of references that matches nothing)"},
    {"{\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}", -EINVAL,
     "/$defs/a/allOf/0: allOf and $ref form a cycle with nothing in between: no value matches"},
    /* not JSON */
    {"{\"type\":", -EINVAL, "the schema is not valid JSON: unexpected end of data at byte 8"},
    {"{\"type\":\"string\"} x", -EINVAL,
     "the schema is not valid JSON: unexpected character at byte 18"},
    {"{\"type\":'string'}", -EINVAL, "the schema is not valid JSON: unexpected character at byte 8"},
    {"", -EINVAL, "the schema is not valid JSON: unexpected end of data at byte 0"},
    {"{\"type\":\"\xff\"}", -EINVAL, "the schema is not valid UTF-8"},
    {"{\"type\":\"string\",}", -EINVAL,
     "the schema is not valid JSON: unexpected character at byte 17"},
};

static void check_error(const char *schema, size_t len, int want_rc, const char *want)
{
    char *gbnf = (char *)"untouched", err[L8G_ERRLEN];
    int rc = l8g_schema_to_gbnf(schema, len, &gbnf, err);
    CHECK(rc == want_rc, "%.100s: rc %d (%s), expected %d", schema, rc, rc ? err : gbnf,
          want_rc);
    if (rc == 0)
        free(gbnf);
    else
        CHECK(!strcmp(err, want), "%.100s:\n  got      %s\n  expected %s", schema, err, want);
}

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof err_cases / sizeof err_cases[0]; i++)
        check_error(err_cases[i].schema, strlen(err_cases[i].schema), err_cases[i].rc,
                    err_cases[i].msg);
}

/* ---- limits --------------------------------------------------------------------------- */

/* depth nested {"items": ...} around {} */
static char *nested(int depth)
{
    size_t cap = (size_t)depth * 12 + 8;
    char *s = malloc(cap);
    REQUIRE(s);
    size_t n = 0;
    for (int i = 0; i < depth - 1; i++)
        n += (size_t)snprintf(s + n, cap - n, "{\"items\":");
    n += (size_t)snprintf(s + n, cap - n, "{}");
    for (int i = 0; i < depth - 1; i++)
        s[n++] = '}';
    s[n] = 0;
    return s;
}

static void test_limits(void)
{
    /* 1 MiB of text: a valid schema padded with spaces, at the limit and past it */
    size_t big = 1u << 20;
    char *s = malloc(big + 2);
    REQUIRE(s);
    memset(s, ' ', big + 1);
    memcpy(s, "{\"type\":\"null\"}", 15);
    char *g = NULL, err[L8G_ERRLEN];
    CHECK(l8g_schema_to_gbnf(s, big, &g, err) == 0, "%s", err);
    free(g);
    check_error(s, big + 1, -E2BIG, "the schema is larger than 1048576 bytes");
    free(s);

    /* nesting: 64 levels are fine, 65 are not (our count), nor 100 (json-c's) */
    s = nested(64);
    CHECK(l8g_schema_to_gbnf(s, strlen(s), &g, err) == 0, "64 levels: %s", err);
    free(g);
    free(s);
    s = nested(65);
    char want[1024] = "";
    for (int i = 0; i < 64; i++)
        strcat(want, "/items");
    strcat(want, ": nesting deeper than 64");
    check_error(s, strlen(s), -E2BIG, want);
    free(s);
    s = nested(100);
    check_error(s, strlen(s), -E2BIG, "the schema nests deeper than 64");
    free(s);

    /* a chain of 70 definitions, each in the items of the one before: each
     * is written from the queue, not nested in the one before */
    size_t cap = 1 << 16, n = 0;
    s = malloc(cap);
    REQUIRE(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 70; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"d%d\":{\"type\":\"array\",\"items\":{\"$ref\":"
                              "\"#/$defs/d%d\"}}", i ? "," : "", i, i + 1);
    n += (size_t)snprintf(s + n, cap - n, ",\"d70\":{\"type\":\"null\"}}}");
    struct l8g_grammar *chain = grammar_of(s, "ref chain");
    if (chain) {
        char deep[256] = "";
        for (int i = 0; i < 70; i++)
            strcat(deep, "[");
        strcat(deep, "null");
        for (int i = 0; i < 70; i++)
            strcat(deep, "]");
        CHECK(accepts(chain, deep));
        CHECK(!accepts(chain, "[[null]]"));
    }
    l8g_grammar_free(chain);
    free(s);
    /* but a chain at the left edge (d_i is anyOf [d_i+1, ...]) is nesting */
    n = 0;
    s = malloc(cap);
    REQUIRE(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 70; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"d%d\":{\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},"
                              "{\"const\":%d}]}", i ? "," : "", i, i + 1, i);
    n += (size_t)snprintf(s + n, cap - n, ",\"d70\":{\"type\":\"null\"}}}");
    int rc = l8g_schema_to_gbnf(s, n, &g, err);
    CHECK(rc == -E2BIG && strstr(err, "deeper than 64"), "left chain: %d %s", rc, err);
    free(s);

    /* a $ref bomb: each definition uses the next twice, 40 deep. A rule per
     * definition keeps it linear */
    cap = 1 << 16;
    n = 0;
    s = malloc(cap);
    REQUIRE(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"$ref\":\"#/$defs/b0\",\"$defs\":{");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"b%d\":{\"type\":\"array\",\"prefixItems\":["
                              "{\"$ref\":\"#/$defs/b%d\"},{\"$ref\":\"#/$defs/b%d\"}]}",
                              i ? "," : "", i, i + 1, i + 1);
    n += (size_t)snprintf(s + n, cap - n, ",\"b40\":{\"type\":\"integer\"}}}");
    uint64_t t0 = t_now_ms();
    rc = l8g_schema_to_gbnf(s, n, &g, err);
    CHECK(rc == 0, "bomb: %s", err);
    if (rc == 0) {
        CHECK(strlen(g) < 20000, "bomb: %zu bytes of grammar", strlen(g));
        struct l8g_grammar *gr = NULL;
        CHECK(l8g_grammar_parse(g, strlen(g), &gr, err) == 0, "bomb: %s", err);
        if (gr) {
            CHECK(accepts(gr, "[]"));
            CHECK(accepts(gr, "[[],[[]]]"));
            CHECK(accepts(gr, "[[],[],5]"));
            CHECK(!accepts(gr, "[1]"));
            CHECK(!accepts(gr, "[[],[1]]"));
        }
        l8g_grammar_free(gr);
        free(g);
    }
    CHECK(t_now_ms() - t0 < 2000, "bomb took %llu ms", (unsigned long long)(t_now_ms() - t0));
    free(s);

    /* more than 4 MiB of grammar: many optional members (each may come first) */
    cap = 1 << 20;
    n = 0;
    s = malloc(cap);
    REQUIRE(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 3000; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"p%d\":{}", i ? "," : "", i);
    n += (size_t)snprintf(s + n, cap - n, "}}");
    check_error(s, n, -E2BIG, "the grammar is larger than 4194304 bytes");
    free(s);
}

/* A required member that recurs for ever: the schema matches no finite
 * value; the grammar written is refused by gbnf.c as matching nothing. */
static void test_unproductive(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},"
                    "\"required\":[\"x\"]}";
    char *g = NULL, err[L8G_ERRLEN];
    int rc = l8g_schema_to_gbnf(s, strlen(s), &g, err);
    CHECK(rc == 0, "%s", err);
    if (!rc) {
        struct l8g_grammar *gr = NULL;
        CHECK(l8g_grammar_parse(g, strlen(g), &gr, err) == -EINVAL, "parsed:\n%s", g);
        l8g_grammar_free(gr);
        free(g);
    }
}

/* The text itself for one small schema: readable, one rule a line, the
 * root object named root, members in order. */
static void test_text(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                    "\"age\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"name\"],"
                    "\"additionalProperties\":false}";
    char *g = NULL, err[L8G_ERRLEN];
    REQUIRE(l8g_schema_to_gbnf(s, strlen(s), &g, err) == 0, "%s", err);
    const char *want =
        "root ::= \"{\" ws (root-name-kv (ws \",\" ws root-age-kv )? ) ws \"}\"\n"
        "root-name-kv ::= \"\\\"name\\\"\" ws \":\" ws string\n"
        "root-age-kv ::= \"\\\"age\\\"\" ws \":\" ws ( [0-9] | [1-9] [0-9]{1,} )\n"
        "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
        "string ::= \"\\\"\" char* \"\\\"\"\n"
        "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n";
    CHECK(!strcmp(g, want), "got:\n%s\nexpected:\n%s", g, want);
    free(g);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2, "usage: test_schema CORPUS_DIR");
    test_text();
    test_corpus(argv[1]);
    test_whitespace();
    test_int_ranges();
    test_number_ranges();
    test_long_strings();
    test_errors();
    test_limits();
    test_unproductive();
    return t_result("test_schema");
}
