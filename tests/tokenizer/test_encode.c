/* Encoder behaviour beyond the golden cases: the ASCII fast path against PCRE2 on random
 * text, round trips of random valid UTF-8, invalid UTF-8 (exact offsets, nothing appended,
 * no read past the buffer), special tokens as text (ids from the Node reference), lookups,
 * load errors, both merge formats, and concurrent encodes.
 * argv[1]: the real tokenizer.json; argv[2]: a scratch directory. */
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "tok_test.h"

#define FAST_ITERS 20000
#define ROUNDTRIP_ITERS 4000
#define THREAD_ITERS 200

static uint64_t rng = 0x5eedf00dull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static size_t put_cp(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Text made to stress the regex: every ASCII class, contractions, and the non-ASCII
 * characters whose class decides a piece (Unicode letters, digits, spaces, case folds). */
static size_t tricky_text(char *o, size_t max_chars)
{
    static const char *const frags[] = {
        "'s", "'S", "'t", "'re", "'RE", "'rE", "'ve", "'m", "'ll", "'lL", "'d", "'", "''", "'x",
        " ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", " \n ", "\n\n", "a", "Zq", "hello",
        "0", "12", "1234", ".", ",", "!?", "(", "{}", "#", "\"", "-", "_", "\x01", "\x1c", "\x7f",
        "<|", "|>", "<|eot_id|>", "<|eot_id", "<|begin_of_text|>",
    };
    static const uint32_t cps[] = {
        0xe9, 0x17f /* ſ folds to s */, 0x212a /* Kelvin sign folds to k */, 0xa0, 0x85,
        0x2028, 0x3000, 0x1680, 0x663 /* Arabic-Indic three */, 0xbd /* ½ */, 0x2167,
        0x4e2d, 0x3042, 0x1f600, 0x301 /* combining acute */, 0x200d, 0xfeff, 0xab /* « */,
        0x2014, 0x3001, 0x5d0, 0xe01, 0x10000, 0x1d518,
    };
    size_t n = 0, k = rnd((uint32_t)max_chars + 1);
    for (size_t i = 0; i < k; i++) {
        if (rnd(3)) {
            const char *f = frags[rnd(sizeof(frags) / sizeof(frags[0]))];
            memcpy(o + n, f, strlen(f));
            n += strlen(f);
        } else {
            n += put_cp(o + n, cps[rnd(sizeof(cps) / sizeof(cps[0]))]);
        }
    }
    return n;
}

static uint32_t random_cp(void)
{
    for (;;) {
        uint32_t cp;
        switch (rnd(5)) {
        case 0: cp = 0x20 + rnd(0x5f); break;
        case 1: cp = rnd(0x80); break;
        case 2: cp = 0x80 + rnd(0x780); break;
        case 3: cp = 0x800 + rnd(0x10000 - 0x800); break;
        default: cp = 0x10000 + rnd(0x110000 - 0x10000); break;
        }
        if (cp < 0xd800 || cp > 0xdfff)
            return cp;
    }
}

static void test_fast_path(const l8tok *tok)
{
    char buf[1024];
    size_t differ = 0;
    for (int it = 0; it < FAST_ITERS; it++) {
        size_t n = tricky_text(buf, 24);
        l8tok_ids a = {0}, b = {0};
        int ra = l8tok_encode(tok, buf, n, 0, &a);
        int rb = l8tok_encode(tok, buf, n, L8TOK_ENCODE_REGEX_ONLY, &b);
        if (ra != 0 || rb != 0 || a.n != b.n || (a.n && memcmp(a.ids, b.ids, a.n * 4))) {
            if (differ++ < 3) {
                CHECK(0, "fast path and PCRE2 differ (rc %d/%d) on:", ra, rb);
                for (size_t i = 0; i < n; i++)
                    fprintf(stderr, "%02x", (unsigned char)buf[i]);
                fputc('\n', stderr);
                tt_print_ids("fast ", a.ids, a.n);
                tt_print_ids("pcre2", b.ids, b.n);
            }
        }
        l8tok_ids_free(&a);
        l8tok_ids_free(&b);
    }
    CHECK(differ == 0, "%zu of %d random texts differ", differ, FAST_ITERS);
}

static void test_roundtrip(const l8tok *tok)
{
    char buf[4 * 64 + 1];
    size_t bad = 0;
    for (int it = 0; it < ROUNDTRIP_ITERS; it++) {
        size_t n = 0, k = rnd(64);
        for (size_t i = 0; i < k; i++)
            n += put_cp(buf + n, random_cp());
        l8tok_ids ids = {0};
        char *dec = NULL;
        size_t dl = 0;
        int rc = l8tok_encode(tok, buf, n, L8TOK_SPECIAL_AS_TEXT, &ids);
        if (rc == 0)
            rc = l8tok_decode(tok, ids.ids, ids.n, &dec, &dl);
        if (rc != 0 || dl != n || memcmp(dec, buf, n) != 0)
            bad++;
        free(dec);
        l8tok_ids_free(&ids);
    }
    CHECK(bad == 0, "%zu of %d random valid UTF-8 strings do not round-trip", bad, ROUNDTRIP_ITERS);
}

/* Copies (s, n) to the very end of a readable page followed by an unreadable one, so a
 * read past the buffer faults. */
static char *guarded(const char *s, size_t n, void **map, size_t *map_len)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t pages = (n + (size_t)pg - 1) / (size_t)pg + 1;
    *map_len = (pages + 1) * (size_t)pg;
    char *m = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    mprotect(m + pages * (size_t)pg, (size_t)pg, PROT_NONE);
    *map = m;
    char *p = m + pages * (size_t)pg - n;
    memcpy(p, s, n);
    return p;
}

static void test_invalid_utf8(const l8tok *tok)
{
    static const struct {
        const char *s;
        size_t len, bad;
    } cases[] = {
        {"\x80", 1, 0},                    /* lone continuation byte */
        {"ab\xc0\xaf", 4, 2},              /* overlong '/' */
        {"abc\xe0\x80\xaf", 6, 3},         /* overlong, 3 bytes */
        {"x\xed\xa0\x80y", 5, 1},          /* UTF-16 surrogate */
        {"\xf4\x90\x80\x80", 4, 0},        /* above U+10FFFF */
        {"ok\xff", 3, 2},                  /* never valid */
        {"\xc3\xa9\xe2\x82", 4, 2},        /* truncated at the end */
        {"Hello \xe2\x28\xa1 world", 15, 6},
        {"\xf0\x9f\x98", 3, 0},            /* emoji cut short */
        {"<|eot_id|>\xfe", 11, 10},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t off = 999;
        CHECK(l8tok_utf8_check(cases[i].s, cases[i].len, &off) == -EILSEQ && off == cases[i].bad,
              "case %zu: utf8_check offset %zu, want %zu", i, off, cases[i].bad);
        void *map;
        size_t map_len;
        char *p = guarded(cases[i].s, cases[i].len, &map, &map_len);
        l8tok_ids ids = {0};
        l8tok_ids_push(&ids, 7); /* earlier content must survive a failed encode */
        int rc = l8tok_encode(tok, p, cases[i].len, 0, &ids);
        CHECK(rc == -EILSEQ && ids.n == 1 && ids.ids[0] == 7, "case %zu: rc %d, n %zu", i, rc, ids.n);
        l8tok_ids_free(&ids);
        munmap(map, map_len);
    }
    /* Valid text ending exactly at an unreadable page: the regex, the fast path's
     * lookahead and the added-token matcher must stop at the end. */
    static const char *const edge[] = {"Hello world  ", "it'", "x 12", "abc\n\n", "<|eot_id|",
                                       "<|eot_id|>", "caf\xc3\xa9", " \xe3\x80\x80", "'\xc5\xbf"};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        void *map;
        size_t map_len, n = strlen(edge[i]);
        char *p = guarded(edge[i], n, &map, &map_len);
        l8tok_ids a = {0}, b = {0};
        CHECK(l8tok_encode(tok, p, n, 0, &a) == 0, "edge %zu", i);
        CHECK(l8tok_encode(tok, p, n, L8TOK_ENCODE_REGEX_ONLY, &b) == 0 && a.n == b.n &&
                  !memcmp(a.ids, b.ids, a.n * 4), "edge %zu: fast path differs", i);
        l8tok_ids_free(&a);
        l8tok_ids_free(&b);
        munmap(map, map_len);
    }
    size_t off = 5;
    CHECK(l8tok_utf8_check("", 0, &off) == 0 && off == 5, "empty text is valid, offset untouched");
    l8tok_ids ids = {0};
    CHECK(l8tok_encode(tok, "a\0b", 3, 0, &ids) == 0 && ids.n == 3, "NUL is a character: %zu ids", ids.n);
    l8tok_ids_free(&ids);
    CHECK(l8tok_encode(tok, "a", 1, 1u << 7, &ids) == -EINVAL, "unknown flag");
}

static void test_specials(const l8tok *tok)
{
    /* Ids from @huggingface/tokenizers@0.2.0 given the same tokenizer.json without its
     * added tokens (so the specials are plain text), and with them. */
    static const char t1[] = "<|eot_id|>";
    static const uint32_t t1_text[] = {27, 91, 68, 354, 851, 91, 29};
    static const char t2[] = "Say <|begin_of_text|> now<|eot_id|>\n";
    static const uint32_t t2_text[] = {46864, 83739, 7413, 3659, 4424, 91, 29, 1457, 27, 91, 68, 354, 851, 91, 397};
    static const uint32_t t2_special[] = {46864, 220, 128000, 1457, 128009, 198};
    l8tok_ids ids = {0};
    CHECK(l8tok_encode(tok, t1, strlen(t1), L8TOK_SPECIAL_AS_TEXT, &ids) == 0 &&
              tt_ids_eq(&ids, t1_text, 7), "<|eot_id|> as text");
    ids.n = 0;
    CHECK(l8tok_encode(tok, t1, strlen(t1), 0, &ids) == 0 && ids.n == 1 && ids.ids[0] == 128009,
          "<|eot_id|> as special");
    ids.n = 0;
    CHECK(l8tok_encode(tok, t2, strlen(t2), L8TOK_SPECIAL_AS_TEXT, &ids) == 0 &&
              tt_ids_eq(&ids, t2_text, 15), "sentence with specials as text");
    ids.n = 0;
    CHECK(l8tok_encode(tok, t2, strlen(t2), 0, &ids) == 0 && tt_ids_eq(&ids, t2_special, 6),
          "sentence with specials");
    /* Every added token is recognised (all 256), and longest-first where one is a
     * prefix of a longer candidate. */
    size_t n_special = 0;
    for (uint32_t id = 128000; id < l8tok_n_ids(tok); id++) {
        const char *b;
        size_t bl;
        if (l8tok_token_bytes(tok, id, &b, &bl) < 0)
            continue;
        n_special += l8tok_is_special(tok, id);
        ids.n = 0;
        CHECK(l8tok_encode(tok, b, bl, 0, &ids) == 0 && ids.n == 1 && ids.ids[0] == id,
              "added token %u not recognised", id);
    }
    CHECK(n_special == 256, "%zu special tokens, want 256", n_special);
    CHECK(l8tok_n_ids(tok) == 128256, "n_ids %u", l8tok_n_ids(tok));
    l8tok_ids_free(&ids);
}

/* Characters where regex engines disagree about \\s or case folding (U+0085 NEL,
 * U+FEFF, U+001C, U+017F): ids from @huggingface/tokenizers@0.2.0 on the same file. */
static void test_unicode_edges(const l8tok *tok)
{
    static const struct {
        const char *text;
        uint32_t ids[8];
        size_t n;
    } cases[] = {
        {"a\xc2\x85" "b", {64, 116360, 65}, 3},
        {"a \xc2\x85 b", {64, 2188, 227, 293}, 4},
        {"a\xef\xbb\xbf b", {64, 3305, 293}, 3},
        {"a \xef\xbb\xbf\xef\xbb\xbf b", {64, 76880, 3305, 293}, 4},
        {"it'\xc5\xbf", {275, 6, 129, 123}, 4},
        {"x\x1c y", {87, 216, 379}, 3},
        {"x \x1c\x1c y", {87, 220, 216, 216, 379}, 5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (unsigned flags = 0; flags <= L8TOK_ENCODE_REGEX_ONLY; flags += L8TOK_ENCODE_REGEX_ONLY) {
            l8tok_ids ids = {0};
            int rc = l8tok_encode(tok, cases[i].text, strlen(cases[i].text), flags, &ids);
            CHECK(rc == 0 && tt_ids_eq(&ids, cases[i].ids, cases[i].n), "edge case %zu (flags %u)", i, flags);
            l8tok_ids_free(&ids);
        }
    }
}

/* l8tok_table: every id's bytes as l8tok_token_bytes gives them, specials
 * marked, the ids past the tokenizer's empty and marked. */
static void test_table(const l8tok *tok)
{
    const uint32_t n = l8tok_n_ids(tok), m = n + 40;
    uint8_t *bytes;
    uint32_t *off;
    bool *special;
    REQUIRE(l8tok_table(tok, m, &bytes, &off, &special) == 0);
    int bad = 0;
    for (uint32_t i = 0; i < m; i++) {
        const char *b;
        size_t bl;
        bool has = l8tok_token_bytes(tok, i, &b, &bl) == 0;
        uint32_t len = off[i + 1] - off[i];
        if (has ? len != bl || memcmp(bytes + off[i], b, bl) || special[i] != l8tok_is_special(tok, i)
                : len != 0 || !special[i])
            bad++;
    }
    CHECK(bad == 0, "l8tok_table: %d of %u ids differ", bad, m);
    CHECK(special[128009] && !special[9906], "specials");
    free(bytes);
    free(off);
    free(special);
}

static void test_lookups(const l8tok *tok)
{
    uint32_t id = 0;
    const char *b;
    size_t bl;
    CHECK(l8tok_token_id(tok, "<|eot_id|>", 10, &id) == 0 && id == 128009, "eot id %u", id);
    CHECK(l8tok_token_id(tok, " world", 6, &id) == 0 && id == 1917, "' world' id %u", id);
    CHECK(l8tok_token_id(tok, "\xf0", 1, &id) == 0 && l8tok_token_bytes(tok, id, &b, &bl) == 0 &&
              bl == 1 && (unsigned char)b[0] == 0xf0, "byte token 0xf0");
    id = 42;
    CHECK(l8tok_token_id(tok, "no such token at all", 20, &id) == -ENOENT && id == 42, "missing");
    CHECK(l8tok_token_bytes(tok, 128256, &b, &bl) == -EINVAL, "id past the end");
    CHECK(l8tok_token_bytes(tok, 9906, &b, &bl) == 0 && bl == 5 && !memcmp(b, "Hello", 5), "9906");
    CHECK(!l8tok_is_special(tok, 9906) && l8tok_is_special(tok, 128000) &&
              !l8tok_is_special(tok, 1u << 30), "is_special");
    uint32_t bad[] = {9906, 128256};
    char *t = (char *)"untouched";
    size_t tl = 3;
    CHECK(l8tok_decode(tok, bad, 2, &t, &tl) == -EINVAL && tl == 3, "decode of a bad id");
    CHECK(l8tok_decode(tok, bad, 0, &t, &tl) == 0 && tl == 0 && t[0] == 0, "decode of nothing");
    free(t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* A toy byte-level BPE: the 256 byte tokens (GPT-2 alphabet), a few merges. */
static void write_toy(const char *path, bool pairs, bool ignore_merges)
{
    json_object *root = json_object_new_object(), *model = json_object_new_object();
    json_object *vocab = json_object_new_object(), *merges = json_object_new_array();
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        uint32_t cp = printable ? (uint32_t)b : 256u + (uint32_t)extra++;
        char u[5] = {0};
        put_cp(u, cp);
        json_object_object_add(vocab, u, json_object_new_int(b));
    }
    /* "ab" and "bc" compete in "abc": rank decides (ab first); "abc" by ab + c;
     * "cab" is a vocabulary word that no merge makes (ignore_merges picks it). */
    static const char *const m[][2] = {{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"Ġ", "x"}};
    static const char *const made[] = {"ab", "bc", "abc", "Ġx"};
    for (int i = 0; i < 4; i++) {
        json_object_object_add(vocab, made[i], json_object_new_int(256 + i));
        if (pairs) {
            json_object *p = json_object_new_array();
            json_object_array_add(p, json_object_new_string(m[i][0]));
            json_object_array_add(p, json_object_new_string(m[i][1]));
            json_object_array_add(merges, p);
        } else {
            char s[16];
            snprintf(s, sizeof(s), "%s %s", m[i][0], m[i][1]);
            json_object_array_add(merges, json_object_new_string(s));
        }
    }
    json_object_object_add(vocab, "cab", json_object_new_int(260));
    json_object_object_add(model, "type", json_object_new_string("BPE"));
    json_object_object_add(model, "ignore_merges", json_object_new_boolean(ignore_merges));
    json_object_object_add(model, "vocab", vocab);
    json_object_object_add(model, "merges", merges);
    json_object_object_add(root, "model", model);
    json_object *pre = json_tokener_parse(
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"\\\\s?\\\\p{L}+|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}");
    json_object_object_add(root, "pre_tokenizer", pre);
    json_object_object_add(root, "added_tokens", json_tokener_parse(
        "[{\"id\":300,\"content\":\"<s>\",\"special\":true}]"));
    if (json_object_to_file(path, root) < 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    json_object_put(root);
}

static void test_toy_and_errors(const char *dir)
{
    char path[4096];
    l8tok *tok = NULL;
    for (int v = 0; v < 3; v++) {
        snprintf(path, sizeof(path), "%s/toy%d.json", dir, v);
        write_toy(path, v == 1, v != 2);
        CHECK(l8tok_load(path, &tok) == 0, "toy %d loads", v);
        if (!tok)
            continue;
        l8tok_ids ids = {0};
        /* pieces: "abc", " x", "<s>", "cab", " bcb" */
        CHECK(l8tok_encode(tok, "abc x<s>cab bcb", 15, 0, &ids) == 0, "toy encode");
        uint32_t want_ignore[] = {258, 259, 300, 260, ' ', 257, 'b'};
        uint32_t want_merge[] = {258, 259, 300, 'c', 256, ' ', 257, 'b'};
        bool ok = v == 2 ? tt_ids_eq(&ids, want_merge, 8) : tt_ids_eq(&ids, want_ignore, 7);
        CHECK(ok, "toy %d (%s merges, ignore_merges %d)", v, v == 1 ? "pair" : "string", v != 2);
        if (!ok)
            tt_print_ids("got", ids.ids, ids.n);
        l8tok_ids_free(&ids);
        l8tok_free(tok);
        tok = NULL;
    }
    tok = (l8tok *)&tok; /* must stay untouched on failure */
    l8tok *const sentinel = tok;
    snprintf(path, sizeof(path), "%s/does-not-exist.json", dir);
    CHECK(l8tok_load(path, &tok) == -ENOENT && tok == sentinel, "missing file");
    CHECK(l8tok_load(dir, &tok) == -ENOENT, "directory without tokenizer.json");
    snprintf(path, sizeof(path), "%s/bad.json", dir);
    write_file(path, "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [");
    CHECK(l8tok_load(path, &tok) == -EINVAL, "truncated JSON");
    write_file(path, "[1, 2, 3]");
    CHECK(l8tok_load(path, &tok) == -EINVAL, "not an object");
    snprintf(path, sizeof(path), "%s/toy0.json", dir);
    json_object *toy = json_object_from_file(path);
    json_object_object_add(toy, "normalizer", json_tokener_parse("{\"type\":\"NFC\"}"));
    snprintf(path, sizeof(path), "%s/nfc.json", dir);
    json_object_to_file(path, toy);
    CHECK(l8tok_load(path, &tok) == -ENOTSUP, "normalizer is not supported");
    json_object_object_add(toy, "normalizer", NULL);
    json_object *model, *merges;
    json_object_object_get_ex(toy, "model", &model);
    json_object_object_get_ex(model, "merges", &merges);
    json_object_array_add(merges, json_object_new_string("a zz"));
    json_object_to_file(path, toy);
    CHECK(l8tok_load(path, &tok) == -EINVAL, "a merge of an unknown token");
    json_object_put(toy);
    /* Not a regular file: refused at once, never read (a FIFO's open would wait for a
     * writer, /dev/zero never ends); one over L8TOK_MAX_FILE refused from its size. */
    snprintf(path, sizeof(path), "%s/fifo.json", dir);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    CHECK(l8tok_load(path, &tok) == -EINVAL, "a FIFO");
    unlink(path);
    CHECK(l8tok_load("/dev/zero", &tok) == -EINVAL, "/dev/zero");
    snprintf(path, sizeof(path), "%s/huge.json", dir);
    write_file(path, "");
    CHECK(truncate(path, (off_t)L8TOK_MAX_FILE + 1) == 0, "truncate %s", path);
    CHECK(l8tok_load(path, &tok) == -EFBIG, "over L8TOK_MAX_FILE");
    unlink(path);
    CHECK(tok == sentinel, "out untouched on failure");
    l8tok_free(NULL);
    l8tok_ids_free(NULL);
}

struct thread_arg {
    const l8tok *tok;
    const char *text;
    size_t len;
    const l8tok_ids *want;
    int bad;
};

static void *encoder(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < THREAD_ITERS; i++) {
        l8tok_ids ids = {0};
        if (l8tok_encode(a->tok, a->text, a->len, 0, &ids) != 0 || ids.n != a->want->n ||
            memcmp(ids.ids, a->want->ids, ids.n * 4))
            a->bad++;
        l8tok_ids_free(&ids);
    }
    return NULL;
}

static void test_threads(const l8tok *tok)
{
    char text[4096];
    size_t n = 0;
    while (n < sizeof(text) - 200)
        n += tricky_text(text + n, 16);
    l8tok_ids want = {0};
    CHECK(l8tok_encode(tok, text, n, L8TOK_ENCODE_REGEX_ONLY, &want) == 0, "reference encode");
    struct thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){tok, text, n, &want, 0};
        pthread_create(&th[i], NULL, encoder, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0, "thread %d: %d encodes differ", i, args[i].bad);
    }
    l8tok_ids_free(&want);
}

int main(int argc, char **argv)
{
    alarm(240);  /* a load that hangs (on a FIFO) fails instead */
    l8tok *tok = tt_load(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON SCRATCH_DIR\n", argv[0]);
        return 1;
    }
    test_fast_path(tok);
    test_roundtrip(tok);
    test_invalid_utf8(tok);
    test_specials(tok);
    test_unicode_edges(tok);
    test_lookups(tok);
    test_table(tok);
    test_toy_and_errors(tt_scratch(argv[2]));
    test_threads(tok);
    l8tok_free(tok);
    return t_result("test_encode");
}
