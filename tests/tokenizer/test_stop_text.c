/* test_stop_text: l8tok_stop, stop strings over streamed text.
 *  - fixed cases: a stop string split across pieces, a false start that
 *    turns out not to be one, overlapping stop strings, UTF-8, flush, reset,
 *    bad arguments;
 *  - 20,000 random texts over a 3-letter alphabet, random stop strings and
 *    random cuts into pieces, against a direct reference: after every push
 *    the text released so far is exactly the longest prefix of the text
 *    so far in which no stop string can still begin, and the match is
 *    reported at the first push that completes the earliest stop string. */
#include "tok_test.h"

/* Push the pieces, concatenate what comes out, and the flush unless a
 * stop string was found. Returns push's last result. */
static int feed(l8tok_stop *s, const char *const *pieces, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    int rc = 0;
    const char *t;
    size_t tl;
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        rc = l8tok_stop_push(s, pieces[i], strlen(pieces[i]), &t, &tl);
        if (rc < 0)
            return rc;
        if (o + tl < cap) {
            memcpy(out + o, t, tl);
            o += tl;
            out[o] = 0;
        }
    }
    if (rc == 0 && l8tok_stop_flush(s, &t, &tl) == 0 && o + tl < cap) {
        memcpy(out + o, t, tl);
        out[o + tl] = 0;
    }
    return rc;
}

static void test_fixed(void)
{
    l8tok_stop *s;
    char out[256];
    const char *t;
    size_t tl;
    const char *stops[] = { "\n\n", "```", "User:" };
    CHECK(l8tok_stop_new(stops, 3, &s) == 0, "new");

    /* Split across pieces; held back until the second newline comes. */
    CHECK(l8tok_stop_push(s, "Hello\n", 6, &t, &tl) == 0 && tl == 5 && !strcmp(t, "Hello"),
          "held newline: %zu '%s'", tl, t);
    CHECK(l8tok_stop_push(s, "\nmore", 5, &t, &tl) == 1 && tl == 0, "stop: %zu", tl);
    CHECK(l8tok_stop_done(s), "done");
    CHECK(l8tok_stop_push(s, "x", 1, &t, &tl) == 1 && tl == 0, "after the stop");
    CHECK(l8tok_stop_flush(s, &t, &tl) == 0 && tl == 0, "flush after the stop: %zu", tl);

    /* A false start is released once it cannot be one. */
    l8tok_stop_reset(s);
    CHECK(!l8tok_stop_done(s), "reset");
    CHECK(l8tok_stop_push(s, "a `` b", 6, &t, &tl) == 0 && !strcmp(t, "a `` b"), "'%s'", t);
    CHECK(l8tok_stop_push(s, "Us", 2, &t, &tl) == 0 && tl == 0, "Us held: %zu", tl);
    CHECK(l8tok_stop_push(s, "e", 1, &t, &tl) == 0 && tl == 0, "Use held: %zu", tl);
    CHECK(l8tok_stop_push(s, "d", 1, &t, &tl) == 0 && !strcmp(t, "Used"), "'%s'", t);
    CHECK(l8tok_stop_push(s, " ``", 3, &t, &tl) == 0 && !strcmp(t, " "), "'%s'", t);
    CHECK(l8tok_stop_flush(s, &t, &tl) == 0 && !strcmp(t, "``"), "flush '%s'", t);

    /* The earliest stop string wins; within one piece too. */
    l8tok_stop_reset(s);
    const char *p1[] = { "x User: y\n\n" };
    CHECK(feed(s, p1, 1, out, sizeof out) == 1 && !strcmp(out, "x "), "'%s'", out);
    l8tok_stop_reset(s);
    const char *p2[] = { "x\n", "\nUser:" };
    CHECK(feed(s, p2, 2, out, sizeof out) == 1 && !strcmp(out, "x"), "'%s'", out);
    l8tok_stop_free(s);

    /* Overlaps: "aab" in "aaab"; a stop string that is another's prefix. */
    const char *st2[] = { "aab", "ab" };
    CHECK(l8tok_stop_new(st2, 1, &s) == 0, "new");
    const char *p3[] = { "a", "a", "a", "b", "c" };
    CHECK(feed(s, p3, 5, out, sizeof out) == 1 && !strcmp(out, "a"), "aaab: '%s'", out);
    l8tok_stop_free(s);
    CHECK(l8tok_stop_new(st2, 2, &s) == 0, "new");
    const char *p4[] = { "xa", "ab" };
    CHECK(feed(s, p4, 2, out, sizeof out) == 1 && !strcmp(out, "x"), "xaab: '%s'", out);
    l8tok_stop_free(s);

    /* UTF-8: held bytes are whole characters when the stop string starts
     * with a character. */
    const char *st3[] = { "\xc3\xa9t\xc3\xa9" };   /* "été" */
    CHECK(l8tok_stop_new(st3, 1, &s) == 0, "new");
    CHECK(l8tok_stop_push(s, "caf\xc3\xa9", 5, &t, &tl) == 0 && !strcmp(t, "caf"), "'%s'", t);
    CHECK(l8tok_stop_push(s, "!", 1, &t, &tl) == 0 && !strcmp(t, "\xc3\xa9!"), "'%s'", t);
    const char *p5[] = { "\xc3\xa9t", "\xc3\xa9" };
    l8tok_stop_reset(s);
    CHECK(feed(s, p5, 2, out, sizeof out) == 1 && !out[0], "'%s'", out);
    l8tok_stop_free(s);

    /* Nothing pushed yet: an empty piece and a flush hand back nothing. */
    const char *st4[] = { "END" };
    CHECK(l8tok_stop_new(st4, 1, &s) == 0, "new");
    CHECK(l8tok_stop_push(s, "", 0, &t, &tl) == 0 && tl == 0 && !t[0], "empty push");
    CHECK(l8tok_stop_flush(s, &t, &tl) == 0 && tl == 0 && !t[0], "empty flush");
    l8tok_stop_free(s);

    /* No stop strings: everything passes at once. Bad arguments. */
    CHECK(l8tok_stop_new(NULL, 0, &s) == 0, "none");
    CHECK(l8tok_stop_push(s, "abc", 3, &t, &tl) == 0 && tl == 3, "passed: %zu", tl);
    l8tok_stop_free(s);
    const char *bad[] = { "ok", "" };
    s = NULL;
    CHECK(l8tok_stop_new(bad, 2, &s) == -EINVAL && !s, "empty stop string");
    l8tok_stop_free(NULL);
}

/* The reference: in text[0, n), the first position a stop string starts
 * at (SIZE_MAX: none), and the length that may be released. */
static size_t ref_match(const char *text, size_t n, char stops[][8], size_t ns)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < ns; k++) {
            size_t l = strlen(stops[k]);
            if (i + l <= n && !memcmp(text + i, stops[k], l))
                return i;
        }
    return SIZE_MAX;
}

static size_t ref_safe(const char *text, size_t n, char stops[][8], size_t ns)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < ns; k++)
            if (strlen(stops[k]) > n - i && !memcmp(text + i, stops[k], n - i))
                return i;
    return n;
}

static void test_random(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
#define RND(m) ((rng = rng * 6364136223846793005ull + 1442695040888963407ull), \
                (uint32_t)(rng >> 33) % (m))
    int bad = 0;
    for (int it = 0; it < 20000 && bad < 5; it++) {
        char stops[3][8];
        const char *sp[3];
        size_t ns = 1 + RND(3);
        for (size_t k = 0; k < ns; k++) {
            size_t l = 1 + RND(5);
            for (size_t j = 0; j < l; j++)
                stops[k][j] = (char)('a' + RND(3));
            stops[k][l] = 0;
            sp[k] = stops[k];
        }
        char text[64];
        size_t n = RND(40);
        for (size_t j = 0; j < n; j++)
            text[j] = (char)('a' + RND(3));
        l8tok_stop *s;
        if (l8tok_stop_new(sp, ns, &s) < 0) {
            CHECK(0, "new");
            return;
        }
        size_t fed = 0, released = 0, match = ref_match(text, n, stops, ns);
        char out[64];
        while (fed < n) {
            size_t piece = 1 + RND(4);
            if (piece > n - fed)
                piece = n - fed;
            const char *t;
            size_t tl;
            int rc = l8tok_stop_push(s, text + fed, piece, &t, &tl);
            fed += piece;
            memcpy(out + released, t, tl);
            released += tl;
            size_t m = ref_match(text, fed, stops, ns);
            bool want_done = m != SIZE_MAX;
            size_t want_len = want_done ? m : ref_safe(text, fed, stops, ns);
            if (rc != (int)want_done || released != want_len ||
                memcmp(out, text, released)) {
                fprintf(stderr, "  stops");
                for (size_t k = 0; k < ns; k++)
                    fprintf(stderr, " '%s'", stops[k]);
                fprintf(stderr, ", text '%.*s' fed %zu: rc %d released %zu '%.*s', want %d %zu\n",
                        (int)n, text, fed, rc, released, (int)released, out, want_done,
                        want_len);
                bad++;
                break;
            }
            if (rc == 1)
                break;
        }
        if (match == SIZE_MAX && !bad) {
            const char *t;
            size_t tl;
            CHECK(l8tok_stop_flush(s, &t, &tl) == 0 && released + tl == n &&
                      !memcmp(t, text + released, tl), "flush");
        }
        l8tok_stop_free(s);
    }
    CHECK(bad == 0, "%d random cases differ from the reference", bad);
}

int main(void)
{
    test_fixed();
    test_random();
    if (t_failures)
        return 1;
    printf("test_stop_text: ok\n");
    return 0;
}
