/* The streaming decoder: characters split across tokens are held back and come out whole;
 * ill-formed bytes become U+FFFD; the concatenated output equals the text.
 * argv[1]: the real tokenizer.json. */
#include "tok_test.h"

#define FFFD "\xef\xbf\xbd"
#define RANDOM_ITERS 2000

static const l8tok *tok;

static uint32_t byte_token(unsigned char b)
{
    uint32_t id;
    char c = (char)b;
    if (l8tok_token_id(tok, &c, 1, &id) != 0) {
        fprintf(stderr, "no token for byte %02x\n", b);
        exit(1);
    }
    return id;
}

/* Push ids; the pieces concatenated (and the flush when flush is set). */
static char *run(l8tok_stream *s, const uint32_t *ids, size_t n, bool flush, size_t *len,
                 size_t *held_back)
{
    char *all = malloc(1);
    size_t al = 0;
    *held_back = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t pl;
        int rc;
        if (i < n) {
            rc = l8tok_stream_push(s, ids[i], &p, &pl);
            const char *tb;
            size_t tl;
            l8tok_token_bytes(tok, ids[i], &tb, &tl);
            if (rc == 0 && pl < tl)
                (*held_back)++;
        } else if (flush) {
            rc = l8tok_stream_flush(s, &p, &pl);
        } else {
            break;
        }
        CHECK(rc == 0, "push/flush rc %d", rc);
        CHECK(l8tok_utf8_check(p, pl, NULL) == 0, "piece %zu is not whole UTF-8", i);
        CHECK(p[pl] == 0, "piece is NUL-terminated");
        all = realloc(all, al + pl + 1);
        memcpy(all + al, p, pl);
        al += pl;
    }
    all[al] = 0;
    *len = al;
    return all;
}

static void expect(l8tok_stream *s, const uint32_t *ids, size_t n, bool flush, const char *want,
                   const char *what)
{
    size_t len, held;
    char *got = run(s, ids, n, flush, &len, &held);
    CHECK(len == strlen(want) && !memcmp(got, want, len), "%s: got '%s', want '%s'", what, got, want);
    free(got);
}

static void test_split_characters(l8tok_stream *s)
{
    /* 😀 = F0 9F 98 80, one byte token at a time: nothing until the last byte. */
    uint32_t emoji[4] = {byte_token(0xf0), byte_token(0x9f), byte_token(0x98), byte_token(0x80)};
    for (int i = 0; i < 4; i++) {
        const char *p;
        size_t pl;
        CHECK(l8tok_stream_push(s, emoji[i], &p, &pl) == 0, "push");
        if (i < 3)
            CHECK(pl == 0, "byte %d of the emoji must be held back, got %zu bytes", i, pl);
        else
            CHECK(pl == 4 && !memcmp(p, "\xf0\x9f\x98\x80", 4), "the emoji whole");
    }
    /* "é" split: "caf" + C3 | A9 + "!" */
    uint32_t cafe[4];
    CHECK(l8tok_token_id(tok, "caf", 3, &cafe[0]) == 0, "caf");
    cafe[1] = byte_token(0xc3);
    cafe[2] = byte_token(0xa9);
    CHECK(l8tok_token_id(tok, "!", 1, &cafe[3]) == 0, "!");
    expect(s, cafe, 4, false, "caf\xc3\xa9!", "café split");

    /* The golden emoji case: the reference's ids split several characters across tokens. */
    static const uint32_t golden[] = {93831, 25, 91416, 76460, 225, 76460, 226, 62904, 235, 9468,
                                      237, 121, 62904, 101, 102470, 9468, 239, 102, 102470, 9468,
                                      239, 100, 102470, 9468, 239, 99, 11410, 229, 104, 9468, 229,
                                      115, 71570, 31643};
    static const char text[] = "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️";
    size_t len, held;
    char *got = run(s, golden, sizeof(golden) / 4, true, &len, &held);
    CHECK(len == strlen(text) && !memcmp(got, text, len), "golden emoji text back");
    CHECK(held >= 10, "only %zu tokens had bytes held back", held);
    free(got);
}

static void test_ill_formed(l8tok_stream *s)
{
    uint32_t ff[] = {byte_token(0xff)};
    expect(s, ff, 1, false, FFFD, "FF at once");
    uint32_t cut[] = {byte_token(0xf0), byte_token(0x9f), byte_token('A')};
    expect(s, cut, 3, false, FFFD "A", "F0 9F then A: one U+FFFD");
    uint32_t tail[] = {byte_token('x'), byte_token(0xe2), byte_token(0x82)};
    expect(s, tail, 3, false, "x", "truncated tail held");
    expect(s, NULL, 0, true, FFFD, "flush of a truncated tail");
    expect(s, NULL, 0, true, "", "flush again: nothing");
    uint32_t sur[] = {byte_token(0xed), byte_token(0xa0), byte_token(0x80), byte_token('z')};
    expect(s, sur, 4, false, FFFD FFFD FFFD "z", "surrogate: three U+FFFD");
    uint32_t cont[] = {byte_token(0x80), byte_token(0x80)};
    expect(s, cont, 2, false, FFFD FFFD, "stray continuation bytes");
    /* reset drops held bytes */
    uint32_t lead[] = {byte_token(0xe2)};
    expect(s, lead, 1, false, "", "lead held");
    l8tok_stream_reset(s);
    expect(s, NULL, 0, true, "", "reset dropped it");
    /* a bad id changes nothing */
    expect(s, lead, 1, false, "", "lead held again");
    const char *p = "x";
    size_t pl = 99;
    CHECK(l8tok_stream_push(s, 128256, &p, &pl) == -EINVAL && pl == 99, "bad id");
    uint32_t rest[] = {byte_token(0x82), byte_token(0xac)};
    expect(s, rest, 2, false, "\xe2\x82\xac", "euro after the bad id");
}

static uint32_t rnd_state = 12345;

static uint32_t rnd(uint32_t n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 8) % n;
}

static void test_random(l8tok_stream *s)
{
    static const uint32_t cps[] = {'a', ' ', 'Z', 0xe9, 0x416, 0x4e2d, 0x3042, 0xd55c, 0x1f600,
                                   0x1f44d, 0x1f3fd, 0x200d, 0x5d0, 0x627, 0x915, 0x94d, 0x10348};
    size_t bad = 0, held_total = 0;
    for (int it = 0; it < RANDOM_ITERS; it++) {
        char text[4 * 40 + 1];
        size_t n = 0, k = 1 + rnd(40);
        for (size_t i = 0; i < k; i++) {
            uint32_t cp = cps[rnd(sizeof(cps) / 4)];
            if (cp < 0x80) {
                text[n++] = (char)cp;
            } else if (cp < 0x800) {
                text[n++] = (char)(0xc0 | (cp >> 6));
                text[n++] = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                text[n++] = (char)(0xe0 | (cp >> 12));
                text[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                text[n++] = (char)(0x80 | (cp & 0x3f));
            } else {
                text[n++] = (char)(0xf0 | (cp >> 18));
                text[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
                text[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
                text[n++] = (char)(0x80 | (cp & 0x3f));
            }
        }
        l8tok_ids ids = {0};
        l8tok_encode(tok, text, n, 0, &ids);
        size_t len, held;
        char *got = run(s, ids.ids, ids.n, true, &len, &held);
        held_total += held;
        bad += len != n || memcmp(got, text, n) != 0;
        free(got);
        l8tok_ids_free(&ids);
    }
    CHECK(bad == 0, "%zu random texts do not stream back", bad);
    CHECK(held_total > 100, "random texts held back bytes only %zu times", held_total);
}

int main(int argc, char **argv)
{
    l8tok *t = tt_load(argc, argv);
    tok = t;
    l8tok_stream *s = NULL;
    if (l8tok_stream_new(tok, &s) != 0)
        return 1;
    test_split_characters(s);
    test_ill_formed(s);
    test_random(s);
    l8tok_stream_free(s);
    l8tok_stream_free(NULL);
    l8tok_free(t);
    return t_result("test_stream");
}
