/* The tokenizer's table cache (client/tokenizer_cache.c): a tokenizer loaded from the cache
 * has exactly the tables of one built from the JSON and gives the golden ids; a cache file
 * that is missing, short, damaged, of another version, or checksummed but inconsistent is
 * never used (the load still succeeds, from the JSON) and is rewritten; a changed
 * tokenizer.json (same path, same size, same mtime) does not get the old tables; an
 * unusable cache directory is no error; LLAMA8_TOKENIZER_CACHE=off writes nothing.
 * argv[1]: the real tokenizer.json; argv[2]: the golden cases; argv[3]: a scratch directory. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "tok_test.h"
#include "tokenizer_internal.h"

static const char *tok_json;
static json_object *golden_cases;

static bool spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Remove the regular files in dir (earlier runs' caches). */
static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char *p = t_path(dir, e->d_name);
        unlink(p);
        free(p);
    }
    closedir(d);
}

static size_t count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static l8tok *load(const char *path, bool want_cached, const char *what)
{
    l8tok *t = NULL;
    int rc = l8tok_load(path, &t);
    CHECK(rc == 0, "%s: load rc %d", what, rc);
    if (rc < 0)
        exit(t_result("test_cache"));
    CHECK(l8tok__from_cache(t) == want_cached, "%s: from cache %d, expected %d", what,
          l8tok__from_cache(t), want_cached);
    return t;
}

/* The golden cases give their ids. */
static void check_golden(const l8tok *t, const char *what)
{
    size_t n_cases = json_object_array_length(golden_cases), bad = 0;
    for (size_t c = 0; c < n_cases; c++) {
        json_object *cs = json_object_array_get_idx(golden_cases, c), *jt, *jids;
        json_object_object_get_ex(cs, "text", &jt);
        json_object_object_get_ex(cs, "ids", &jids);
        size_t n = json_object_array_length(jids);
        uint32_t *want = malloc((n ? n : 1) * sizeof(*want));
        for (size_t i = 0; i < n; i++)
            want[i] = (uint32_t)json_object_get_int64(json_object_array_get_idx(jids, i));
        l8tok_ids got = {0};
        int rc = l8tok_encode(t, json_object_get_string(jt), (size_t)json_object_get_string_len(jt),
                              L8TOK_ENCODE_DEFAULT, &got);
        if (rc < 0 || !tt_ids_eq(&got, want, n))
            bad++;
        l8tok_ids_free(&got);
        free(want);
    }
    CHECK(n_cases == 43 && bad == 0, "%s: %zu of %zu golden cases differ", what, bad, n_cases);
}

#define SAME_ARRAY(a, b, field, n) (memcmp((a)->field, (b)->field, (n) * sizeof(*(a)->field)) == 0)

/* b has exactly a's tables, and answers every lookup as a does. */
static void check_same_tables(const l8tok *a, const l8tok *b, const char *what)
{
    CHECK(a->n_ids == b->n_ids && a->pool_len == b->pool_len && a->vocab_mask == b->vocab_mask &&
              a->merge_mask == b->merge_mask && a->n_added == b->n_added &&
              a->added_mask == b->added_mask && a->n_added_lens == b->n_added_lens &&
              a->ignore_merges == b->ignore_merges && a->llama3_regex == b->llama3_regex,
          "%s: table sizes differ", what);
    if (a->n_ids != b->n_ids || a->vocab_mask != b->vocab_mask || a->merge_mask != b->merge_mask ||
        a->n_added != b->n_added || a->added_mask != b->added_mask || a->pool_len != b->pool_len)
        return;
    CHECK(SAME_ARRAY(a, b, tok_off, a->n_ids) && SAME_ARRAY(a, b, tok_len, a->n_ids) &&
              SAME_ARRAY(a, b, tok_kind, a->n_ids) && SAME_ARRAY(a, b, pool, a->pool_len),
          "%s: token arrays differ", what);
    CHECK(SAME_ARRAY(a, b, vocab, a->vocab_mask + 1) && SAME_ARRAY(a, b, merges, a->merge_mask + 1) &&
              SAME_ARRAY(a, b, added, a->n_added) && SAME_ARRAY(a, b, added_hash, a->added_mask + 1),
          "%s: hash tables differ", what);
    CHECK(memcmp(a->byte_id, b->byte_id, sizeof(a->byte_id)) == 0 &&
              memcmp(a->added_first, b->added_first, sizeof(a->added_first)) == 0 &&
              memcmp(a->added_lens, b->added_lens, sizeof(a->added_lens)) == 0,
          "%s: byte and added-token tables differ", what);
    /* and through the API: every id's bytes, kind, and the id its bytes look up */
    size_t bad = 0;
    for (uint32_t id = 0; id < l8tok_n_ids(a); id++) {
        const char *ba, *bb;
        size_t la, lb;
        int ra = l8tok_token_bytes(a, id, &ba, &la), rb = l8tok_token_bytes(b, id, &bb, &lb);
        if (ra != rb || l8tok_is_special(a, id) != l8tok_is_special(b, id)) {
            bad++;
            continue;
        }
        if (ra < 0)
            continue;
        uint32_t ia = 0, ib = 0;
        if (la != lb || memcmp(ba, bb, la) != 0 ||
            l8tok_token_id(a, ba, la, &ia) != l8tok_token_id(b, bb, lb, &ib) || ia != ib)
            bad++;
    }
    CHECK(bad == 0, "%s: %zu ids answer differently", what, bad);
}

/* A long mixed text encodes to the same ids with a and b (the merges at work). */
static void check_same_encode(const l8tok *a, const l8tok *b, const char *what)
{
    static const char *const parts[] = {
        "The quick brown fox jumps over the lazy dog. ", "Größenwahn und Übermut! ",
        "日本語のテキストを分割します。", "Ελληνικά κείμενα ", "def f(x):\n    return x ** 2\n",
        "  \t\n\n", "1234567890 ", "<|eot_id|>", "Привет, мир! ", "🙂🚀 emoji ", "don't, we'll, I'M ",
    };
    char text[64 * 1024];
    size_t len = 0;
    uint64_t r = 0x1234567ull;
    while (len + 64 < sizeof(text)) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = parts[(r >> 33) % (sizeof(parts) / sizeof(parts[0]))];
        size_t n = strlen(p);
        memcpy(text + len, p, n);
        len += n;
    }
    l8tok_ids ia = {0}, ib = {0};
    CHECK(l8tok_encode(a, text, len, 0, &ia) == 0 && l8tok_encode(b, text, len, 0, &ib) == 0,
          "%s: encode failed", what);
    CHECK(ia.n > 1000 && tt_ids_eq(&ib, ia.ids, ia.n), "%s: a %zu-byte text encodes differently",
          what, len);
    l8tok_ids_free(&ia);
    l8tok_ids_free(&ib);
}

static char *cache_file_of(const char *json)
{
    uint64_t size = 0, hash = 0;
    char *p = NULL;
    if (l8tok__hash_file(json, &size, &hash) != 1 || l8tok__cache_path(size, hash, &p) < 0) {
        fprintf(stderr, "no cache path for %s\n", json);
        exit(1);
    }
    return p;
}

/* Write a damaged copy of good over the cache file; a load must not use it, must still give
 * the reference's tables, and must leave the good file again. */
static void check_rejected(const l8tok *ref, const char *cache, const uint8_t *good, size_t good_len,
                           const uint8_t *bad, size_t bad_len, const char *what)
{
    CHECK(spit(cache, bad, bad_len), "%s: cannot write %s", what, cache);
    l8tok *t = load(tok_json, false, what);
    check_same_tables(ref, t, what);
    check_golden(t, what);
    l8tok_free(t);
    size_t n = 0;
    uint8_t *now = t_read(cache, &n);
    CHECK(now && n == good_len && memcmp(now, good, n) == 0, "%s: cache not rebuilt", what);
    free(now);
}

/* good with the payload hash made to match again after an edit. */
static void rehash(uint8_t *img, size_t len)
{
    struct l8tok_cache_header h;
    memcpy(&h, img, sizeof(h));
    h.payload_hash = l8tok__hash(img + sizeof(h), len - sizeof(h));
    memcpy(img, &h, sizeof(h));
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON GOLDEN_JSON SCRATCH_DIR\n", argv[0]);
        return 1;
    }
    tok_json = argv[1];
    json_object *root = json_object_from_file(argv[2]);
    if (!root || !json_object_object_get_ex(root, "cases", &golden_cases)) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    const char *dir = tt_scratch(argv[3]);
    char *cdir = t_path(dir, "test_cache");
    tt_scratch(cdir);
    empty_dir(cdir);

    /* Off: built from the JSON, nothing written. */
    setenv("LLAMA8_TOKENIZER_CACHE", "off", 1);
    l8tok *ref = load(tok_json, false, "cache off");
    check_golden(ref, "cache off");
    setenv("LLAMA8_TOKENIZER_CACHE", cdir, 1);
    CHECK(count_files(cdir) == 0, "cache off wrote a file");

    /* First load builds and writes the cache, the second reads it. */
    l8tok *t = load(tok_json, false, "first load");
    l8tok_free(t);
    char *cache = cache_file_of(tok_json);
    size_t good_len = 0;
    uint8_t *good = t_read(cache, &good_len);
    CHECK(good && good_len > sizeof(struct l8tok_cache_header), "no cache file %s", cache);
    if (!good)
        return t_result("test_cache");
    CHECK(count_files(cdir) == 1, "%zu files in the cache dir, expected 1 (no temporary left)",
          count_files(cdir));
    t = load(tok_json, true, "second load");
    check_same_tables(ref, t, "from cache");
    check_same_encode(ref, t, "from cache");
    check_golden(t, "from cache");
    l8tok_free(t);

    /* Damaged files: short, empty, flipped bytes, another version. */
    struct l8tok_cache_header h;
    memcpy(&h, good, sizeof(h));
    uint64_t off[SEC_COUNT + 1];
    l8tok__cache_layout(&h, off);
    CHECK(sizeof(h) + off[SEC_COUNT] == good_len, "layout does not match the file size");
    uint8_t *bad = malloc(good_len);
    check_rejected(ref, cache, good, good_len, good, good_len / 2, "truncated to half");
    check_rejected(ref, cache, good, good_len, good, good_len - 1, "one byte short");
    check_rejected(ref, cache, good, good_len, good, sizeof(h), "header only");
    check_rejected(ref, cache, good, good_len, good, 10, "10 bytes");
    check_rejected(ref, cache, good, good_len, good, 0, "empty");

    /* The pool bytes of " the": trusted, they would decode and encode wrongly. */
    uint32_t the_id = 0;
    CHECK(l8tok_token_id(ref, " the", 4, &the_id) == 0, "no token \" the\"");
    const uint32_t *tok_off = (const uint32_t *)(good + sizeof(h) + off[SEC_TOK_OFF]);
    size_t pool_at = sizeof(h) + off[SEC_POOL] + tok_off[the_id];
    memcpy(bad, good, good_len);
    bad[pool_at + 1] ^= 0x20;
    check_rejected(ref, cache, good, good_len, bad, good_len, "a flipped pool byte");

    memcpy(bad, good, good_len);
    bad[good_len - 1] ^= 1; /* in the pattern's padding or NUL */
    check_rejected(ref, cache, good, good_len, bad, good_len, "a flipped last byte");

    memcpy(bad, good, good_len);
    ((struct l8tok_cache_header *)bad)->version++;
    check_rejected(ref, cache, good, good_len, bad, good_len, "another version");

    memcpy(bad, good, good_len);
    ((struct l8tok_cache_header *)bad)->src_hash ^= 1;
    check_rejected(ref, cache, good, good_len, bad, good_len, "another source hash");

    /* Checksummed but inconsistent (as a bug or a hand-made file would be): an offset past
     * the pool, an id past the vocabulary, a full merge table, a bool that is not 0/1. */
    memcpy(bad, good, good_len);
    ((uint32_t *)(bad + sizeof(h) + off[SEC_TOK_OFF]))[the_id] = UINT32_MAX - 2;
    rehash(bad, good_len);
    check_rejected(ref, cache, good, good_len, bad, good_len, "token offset out of range");

    memcpy(bad, good, good_len);
    struct vocab_slot *vs = (struct vocab_slot *)(bad + sizeof(h) + off[SEC_VOCAB]);
    for (uint32_t i = 0; i <= h.vocab_mask; i++)
        if (vs[i].id_plus1) {
            vs[i].id_plus1 = h.n_ids + 7;
            break;
        }
    rehash(bad, good_len);
    check_rejected(ref, cache, good, good_len, bad, good_len, "vocabulary id out of range");

    memcpy(bad, good, good_len);
    struct merge_slot *ms = (struct merge_slot *)(bad + sizeof(h) + off[SEC_MERGES]);
    for (uint32_t i = 0; i <= h.merge_mask; i++)
        if (ms[i].key == UINT64_MAX)
            ms[i] = (struct merge_slot){.key = 0, .rank = 0, .id = 0};
    rehash(bad, good_len);
    check_rejected(ref, cache, good, good_len, bad, good_len, "merge table without an empty slot");

    memcpy(bad, good, good_len);
    bad[sizeof(h) + off[SEC_ADDED_FIRST] + 'a'] = 2;
    rehash(bad, good_len);
    check_rejected(ref, cache, good, good_len, bad, good_len, "a bool that is 2");

    t = load(tok_json, true, "after the rebuilds");
    check_golden(t, "after the rebuilds");
    l8tok_free(t);

    /* A changed tokenizer.json at the same path, same size and same mtime: the change is
     * seen (the key is the contents), and each version has its own file. */
    char *json2dir = t_path(dir, "test_cache_json");
    tt_scratch(json2dir);
    char *json2 = t_path(json2dir, "tokenizer.json");
    size_t jl = 0;
    uint8_t *j = t_read(tok_json, &jl);
    CHECK(j && spit(json2, j, jl), "cannot copy the tokenizer.json");
    static const char old_tok[] = "<|reserved_special_token_0|>", new_tok[] = "<|reserved_special_token_Z|>";
    uint32_t rid = 0;
    CHECK(l8tok_token_id(ref, old_tok, strlen(old_tok), &rid) == 0, "no %s", old_tok);
    t = load(json2dir, true, "a copy of the same tokenizer.json"); /* same contents, same file */
    l8tok_free(t);
    uint8_t *at = j ? memmem(j, jl, old_tok, strlen(old_tok)) : NULL;
    CHECK(at, "%s not in the file", old_tok);
    struct stat st0;
    CHECK(stat(json2, &st0) == 0, "stat %s", json2);
    if (at) {
        memcpy(at, new_tok, strlen(new_tok));
        CHECK(spit(json2, j, jl), "cannot rewrite %s", json2);
        struct timespec times[2] = {st0.st_atim, st0.st_mtim};
        CHECK(utimensat(AT_FDCWD, json2, times, 0) == 0, "cannot restore the mtime");
        struct stat st1;
        CHECK(stat(json2, &st1) == 0 && st1.st_size == st0.st_size &&
                  st1.st_mtim.tv_sec == st0.st_mtim.tv_sec && st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec,
              "the edit changed size or mtime");
        for (int pass = 0; pass < 2; pass++) {
            t = load(json2dir, pass == 1, pass ? "changed json, second load" : "changed json");
            const char *b;
            size_t bl;
            CHECK(l8tok_token_bytes(t, rid, &b, &bl) == 0 && bl == strlen(new_tok) &&
                      memcmp(b, new_tok, bl) == 0,
                  "pass %d: token %u is not the edited %s", pass, rid, new_tok);
            uint32_t id = 0;
            CHECK(l8tok_token_id(t, old_tok, strlen(old_tok), &id) == -ENOENT,
                  "pass %d: the old token text is still a token", pass);
            l8tok_ids ids = {0};
            CHECK(l8tok_encode(t, new_tok, strlen(new_tok), 0, &ids) == 0 && ids.n == 1 &&
                      ids.ids[0] == rid,
                  "pass %d: the edited special token does not encode to %u", pass, rid);
            l8tok_ids_free(&ids);
            l8tok_free(t);
        }
        CHECK(count_files(cdir) == 2, "%zu cache files, expected 2 (one per contents)",
              count_files(cdir));
        t = load(tok_json, true, "the original again");
        check_same_tables(ref, t, "the original again");
        l8tok_free(t);
    }
    free(j);

    /* Unused for 30 days: deleted when a new file is written; a load keeps its own fresh. */
    {
        struct timespec old[2] = { { .tv_sec = time(NULL) - 40 * 86400 },
                                   { .tv_sec = time(NULL) - 40 * 86400 } };
        char *stale = t_path(cdir, "tokenizer-00000000000000aa-1.bin");
        char *stale_tmp = t_path(cdir, "tokenizer-00000000000000bb-1.bin.Xy12Zw");
        char *fresh = t_path(cdir, "tokenizer-00000000000000cc-1.bin");
        char *other = t_path(cdir, "notes.txt");
        CHECK(spit(stale, "x", 1) && spit(stale_tmp, "x", 1) && spit(fresh, "x", 1) &&
              spit(other, "x", 1), "cannot write into %s", cdir);
        utimensat(AT_FDCWD, stale, old, 0);
        utimensat(AT_FDCWD, stale_tmp, old, 0);
        utimensat(AT_FDCWD, other, old, 0);
        utimensat(AT_FDCWD, cache, old, 0);
        t = load(tok_json, true, "a cache file not used for 40 days");
        l8tok_free(t);
        struct stat st;
        CHECK(stat(cache, &st) == 0 && time(NULL) - st.st_mtime < 86400,
              "a load did not refresh its cache file's mtime");
        unlink(cache);   /* the next load writes a new file, and prunes */
        t = load(tok_json, false, "rewrite after unlink");
        l8tok_free(t);
        CHECK(access(stale, F_OK) != 0, "a cache file unused for 40 days was kept");
        CHECK(access(stale_tmp, F_OK) != 0, "a temporary 40 days old was kept");
        CHECK(access(fresh, F_OK) == 0, "a recently used cache file was deleted");
        CHECK(access(other, F_OK) == 0, "a file that is not ours was deleted");
        CHECK(access(cache, F_OK) == 0, "the new cache file is missing");
        unlink(fresh);
        unlink(other);
        free(stale);
        free(stale_tmp);
        free(fresh);
        free(other);
    }

    /* A cache directory that cannot be made: loads from the JSON, no error. */
    char *blocker = t_path(dir, "test_cache_file");
    CHECK(spit(blocker, "x", 1), "cannot write %s", blocker);
    char *blocked = t_path(blocker, "sub");
    setenv("LLAMA8_TOKENIZER_CACHE", blocked, 1);
    t = load(tok_json, false, "unusable cache dir");
    check_golden(t, "unusable cache dir");
    l8tok_free(t);

    free(bad);
    free(good);
    free(cache);
    free(cdir);
    free(json2dir);
    free(json2);
    free(blocker);
    free(blocked);
    l8tok_free(ref);
    json_object_put(root);
    return t_result("test_cache");
}
