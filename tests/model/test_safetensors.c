/* test_safetensors.c - the reader: files written byte by byte here, the
 * golden sharded checkpoint, and one broken file per defect, each of which
 * must be refused with a message naming the file and the tensor. */
#include "safetensors.h"
#include "testutil.h"

static const char *golden;
static const char *const SHARD1 = "model-00001-of-00002.safetensors";
static const char *const SHARD2 = "model-00002-of-00002.safetensors";

static void test_dtypes(void)
{
    static const struct { enum l8_dtype t; const char *n; size_t s; } want[] = {
        { L8_F32, "F32", 4 }, { L8_F16, "F16", 2 }, { L8_BF16, "BF16", 2 },
        { L8_F8_E4M3, "F8_E4M3", 1 }, { L8_I32, "I32", 4 }, { L8_I64, "I64", 8 },
        { L8_U8, "U8", 1 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(strcmp(l8_dtype_name(want[i].t), want[i].n) == 0);
        CHECK(l8_dtype_size(want[i].t) == want[i].s);
    }
    CHECK(l8_dtype_size(L8_DTYPE_COUNT) == 0);
}

/* A single file with every dtype, an empty tensor and metadata. */
static void test_handmade(const char *dir)
{
    struct json_object *h = json_object_new_object();
    struct json_object *meta = json_object_new_object();
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    json_object_object_add(h, "__metadata__", meta);
    uint8_t data[128];
    for (int i = 0; i < 128; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    /* deliberately not in name or offset order */
    t_hdr_add(h, "w.f16", "F16", 3, (uint64_t[]){ 1, 1, 2 }, 100, 104);
    t_hdr_add(h, "a.f32", "F32", 2, (uint64_t[]){ 2, 3 }, 0, 24);
    t_hdr_add(h, "b.bf16", "BF16", 1, (uint64_t[]){ 4 }, 24, 32);
    t_hdr_add(h, "c.fp8", "F8_E4M3", 1, (uint64_t[]){ 5 }, 32, 37);
    t_hdr_add(h, "d.i64", "I64", 1, (uint64_t[]){ 1 }, 40, 48);
    t_hdr_add(h, "e.empty", "U8", 1, (uint64_t[]){ 0 }, 48, 48);
    t_hdr_add(h, "g.i32", "I32", 1, (uint64_t[]){ 3 }, 48, 60);
    t_hdr_add(h, "s.scalar", "F32", 0, NULL, 60, 64);
    char *p = t_path(dir, "hand.safetensors");
    t_write_st(p, h, data, sizeof data);
    json_object_put(h);

    struct l8_tensor_set *s = NULL;
    char err[L8_ERRLEN] = "";
    int r = l8_st_open_file(p, &s, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s\n", err);
        free(p);
        return;
    }
    CHECK(l8_st_count(s) == 8);
    static const char *const sorted[] = { "a.f32", "b.bf16", "c.fp8", "d.i64", "e.empty",
                                          "g.i32", "s.scalar", "w.f16" };
    for (uint32_t i = 0; i < 8; i++)
        CHECK(l8_st_at(s, i) && strcmp(l8_st_at(s, i)->name, sorted[i]) == 0);
    CHECK(l8_st_at(s, 8) == NULL);
    CHECK(l8_st_find(s, "zz") == NULL && l8_st_find(s, "") == NULL);
    CHECK(l8_st_find(s, "__metadata__") == NULL);

    const struct l8_tensor *t = l8_st_find(s, "a.f32");
    CHECK(t && t->dtype == L8_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
          t->nbytes == 24 && memcmp(t->data, data, 24) == 0 && strcmp(t->file, p) == 0);
    t = l8_st_find(s, "w.f16");
    CHECK(t && t->dtype == L8_F16 && t->n_dims == 3 && t->shape[2] == 2 && t->nbytes == 4 &&
          memcmp(t->data, data + 100, 4) == 0);
    t = l8_st_find(s, "c.fp8");
    CHECK(t && t->dtype == L8_F8_E4M3 && t->nbytes == 5 && memcmp(t->data, data + 32, 5) == 0);
    t = l8_st_find(s, "d.i64");
    CHECK(t && t->dtype == L8_I64 && memcmp(t->data, data + 40, 8) == 0);
    t = l8_st_find(s, "e.empty");
    CHECK(t && t->nbytes == 0 && t->shape[0] == 0);
    t = l8_st_find(s, "s.scalar");
    CHECK(t && t->n_dims == 0 && t->nbytes == 4);
    t = l8_st_find(s, "b.bf16");
    CHECK(t && t->dtype == L8_BF16 && memcmp(t->data, data + 24, 8) == 0);
    l8_st_close(s);
    l8_st_close(NULL);
    free(p);
}

/* A small file with one header defect; expect -EINVAL naming the file and
 * the fragments. */
static void expect_bad_file(const char *dir, const char *fname, struct json_object *h,
                            size_t dlen, const char *frag1, const char *frag2)
{
    uint8_t data[64] = { 0 };
    char *p = t_path(dir, fname);
    t_write_st(p, h, data, dlen);
    json_object_put(h);
    struct l8_tensor_set *s = (void *)0x1;
    char err[L8_ERRLEN] = "";
    int r = l8_st_open_file(p, &s, err);
    CHECK_ERR(r, -EINVAL, err, fname, frag1, frag2);
    CHECK(s == (void *)0x1);   /* untouched on failure */
    free(p);
}

static struct json_object *one(const char *name, const char *dtype, int nd, const uint64_t *shape,
                               uint64_t b, uint64_t e)
{
    struct json_object *h = json_object_new_object();
    t_hdr_add(h, name, dtype, nd, shape, b, e);
    return h;
}

static void test_bad_files(const char *dir)
{
    char err[L8_ERRLEN];
    struct l8_tensor_set *s;
    int r;

    /* Shorter than the length field. */
    char *p = t_path(dir, "short.safetensors");
    t_write(p, "abc", 3);
    r = l8_st_open_file(p, &s, err);
    CHECK_ERR(r, -EINVAL, err, "short.safetensors", "truncated");
    free(p);

    /* Header length longer than the file. */
    p = t_path(dir, "longhdr.safetensors");
    uint8_t b[24] = { 0xe8, 0x03 };   /* 1000 */
    memcpy(b + 8, "{\"a\":{}}        ", 16);
    t_write(p, b, sizeof b);
    r = l8_st_open_file(p, &s, err);
    CHECK_ERR(r, -EINVAL, err, "longhdr.safetensors", "header length 1000", "longer than the file");
    /* and an absurd one (2^63) */
    b[0] = 0;
    b[1] = 0;
    b[7] = 0x80;
    t_write(p, b, sizeof b);
    r = l8_st_open_file(p, &s, err);
    CHECK_ERR(r, -EINVAL, err, "longhdr.safetensors", "header length");
    free(p);

    /* Malformed JSON headers. */
    static const char *const bad_json[] = {
        "{\"a\": {\"dtype\": ", "{\"a\": 1,,}      ", "[1, 2]  ", "{} junk ", "        ",
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        p = t_path(dir, "json.safetensors");
        size_t n = strlen(bad_json[i]);
        uint8_t *f = calloc(1, 8 + n + 8);
        f[0] = (uint8_t)n;
        memcpy(f + 8, bad_json[i], n);
        t_write(p, f, 8 + n + 8);
        free(f);
        r = l8_st_open_file(p, &s, err);
        CHECK_ERR(r, -EINVAL, err, "json.safetensors", "JSON");
        free(p);
    }

    uint64_t sh3[1] = { 3 }, sh2[1] = { 2 }, sh5[5] = { 1, 1, 1, 1, 3 };
    expect_bad_file(dir, "dtype.safetensors", one("x.weight", "Q4", 1, sh3, 0, 3), 16,
                    "x.weight", "dtype \"Q4\"");
    expect_bad_file(dir, "size.safetensors", one("x.weight", "F32", 1, sh3, 0, 8), 16,
                    "x.weight", "need 12");
    expect_bad_file(dir, "order.safetensors", one("x.weight", "F32", 1, sh3, 12, 0), 16,
                    "x.weight", "end before begin");
    expect_bad_file(dir, "range.safetensors", one("x.weight", "F32", 1, sh3, 52, 64), 16,
                    "x.weight", "out of range");
    expect_bad_file(dir, "dims.safetensors", one("x.weight", "U8", 5, sh5, 0, 3), 16,
                    "x.weight", "shape");
    expect_bad_file(dir, "neg.safetensors",
                    json_tokener_parse("{\"x.weight\": {\"dtype\": \"U8\", \"shape\": [2],"
                                       " \"data_offsets\": [-2, 0]}}"),
                    16, "x.weight", "data_offsets");
    expect_bad_file(dir, "noofs.safetensors",
                    json_tokener_parse("{\"x.weight\": {\"dtype\": \"U8\", \"shape\": [2]}}"),
                    16, "x.weight", "data_offsets");
    expect_bad_file(dir, "negshape.safetensors",
                    json_tokener_parse("{\"x.weight\": {\"dtype\": \"U8\", \"shape\": [-2],"
                                       " \"data_offsets\": [0, 2]}}"),
                    16, "x.weight", "shape");
    expect_bad_file(dir, "entry.safetensors", json_tokener_parse("{\"x.weight\": [1, 2]}"), 16,
                    "x.weight", "not an object");
    struct json_object *h = one("a.weight", "F32", 1, sh2, 0, 8);
    t_hdr_add(h, "b.weight", "F32", 1, sh2, 4, 12);
    expect_bad_file(dir, "overlap.safetensors", h, 16, "b.weight", "overlap");
    h = one("a.weight", "F32", 1, sh2, 0, 8);
    t_hdr_add(h, "b.weight", "U8", 1, sh2, 8, 10);
    t_hdr_add(h, "c.weight", "U8", 1, (uint64_t[]){ 16 }, 0, 16);  /* covers both */
    expect_bad_file(dir, "overlap2.safetensors", h, 16, "overlap", ".weight");

    /* Not a file at all. */
    r = l8_st_open_file(dir, &s, err);
    CHECK(r < 0);
    p = t_path(dir, "absent.safetensors");
    r = l8_st_open_file(p, &s, err);
    CHECK_ERR(r, -ENOENT, err, "absent.safetensors");
    free(p);
}

static void test_golden(void)
{
    struct l8_tensor_set *s;
    char err[L8_ERRLEN] = "";
    int r = l8_st_open_dir(golden, &s, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(l8_st_count(s) == 35);
    /* Every index entry found, in the shard the index names, with the
     * bytes the file holds at its offsets (read here independently). */
    char *ip = t_path(golden, "model.safetensors.index.json");
    struct json_object *idx = json_object_from_file(ip), *wm = NULL;
    free(ip);
    CHECK(idx && json_object_object_get_ex(idx, "weight_map", &wm));
    const char *files[2] = { SHARD1, SHARD2 };
    for (int f = 0; f < 2; f++) {
        char *sp = t_path(golden, files[f]);
        uint8_t *data;
        size_t dlen;
        struct json_object *h = t_read_st(sp, &data, &dlen);
        json_object_object_foreach(h, name, v) {
            if (!strcmp(name, "__metadata__"))
                continue;
            const struct l8_tensor *t = l8_st_find(s, name);
            struct json_object *offs, *dt, *where;
            json_object_object_get_ex(v, "data_offsets", &offs);
            json_object_object_get_ex(v, "dtype", &dt);
            uint64_t b = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 0));
            uint64_t e = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 1));
            CHECK(t && t->nbytes == e - b && memcmp(t->data, data + b, e - b) == 0);
            CHECK(t && strcmp(l8_dtype_name(t->dtype), json_object_get_string(dt)) == 0);
            CHECK(t && strstr(t->file, files[f]));
            CHECK(json_object_object_get_ex(wm, name, &where) &&
                  strcmp(json_object_get_string(where), files[f]) == 0);
        }
        json_object_put(h);
        free(data);
        free(sp);
    }
    json_object_put(idx);
    const struct l8_tensor *q = l8_st_find(s, "model.layers.1.self_attn.q_proj.weight");
    CHECK(q && q->dtype == L8_F8_E4M3 && q->n_dims == 2 && q->shape[0] == 512 &&
          q->shape[1] == 512);
    l8_st_close(s);
}

/* ---- broken copies of the golden checkpoint ---- */

static void set_offsets(struct json_object *hdr, void *arg)
{
    const uint64_t *o = arg;   /* {begin, end} for model.norm.weight */
    struct json_object *e;
    json_object_object_get_ex(hdr, "model.norm.weight", &e);
    json_object_object_add(e, "data_offsets", t_jarr_u64(2, o));
}

static void add_dup(struct json_object *hdr, void *arg)
{
    (void)arg;
    t_hdr_add(hdr, "model.embed_tokens.weight", "BF16", 1, (uint64_t[]){ 0 }, 0, 0);
}

static void index_set(struct json_object *o, void *arg)
{
    const char *const *kv = arg;   /* {tensor, shard or NULL to delete} */
    struct json_object *wm;
    json_object_object_get_ex(o, "weight_map", &wm);
    if (kv[1])
        json_object_object_add(wm, kv[0], json_object_new_string(kv[1]));
    else
        json_object_object_del(wm, kv[0]);
}

static void index_drop_map(struct json_object *o, void *arg)
{
    (void)arg;
    json_object_object_del(o, "weight_map");
}

/* Open a broken copy; expect code r0 and a message with the fragments. */
#define EXPECT_DIR(dir, r0, ...)                                 \
    do {                                                         \
        struct l8_tensor_set *s_ = NULL;                         \
        char err_[L8_ERRLEN] = "";                               \
        int r_ = l8_st_open_dir((dir), &s_, err_);               \
        CHECK_ERR(r_, (r0), err_, __VA_ARGS__);                  \
        if (!r_)                                                 \
            l8_st_close(s_);                                     \
    } while (0)

static void test_broken_golden(void)
{
    char *d, *p;

    /* Truncated shard: the last tensor runs past the end. */
    d = t_copy_ckpt(golden);
    p = t_path(d, SHARD2);
    struct stat st;
    stat(p, &st);
    CHECK(truncate(p, st.st_size - 100) == 0);
    EXPECT_DIR(d, -EINVAL, SHARD2, "model.norm.weight", "out of range");
    /* Truncated into the header. */
    CHECK(truncate(p, 1000) == 0);
    EXPECT_DIR(d, -EINVAL, SHARD2, "header length", "longer than the file");
    free(p);
    t_rm_rf(d);

    /* Header length field larger than the file. */
    d = t_copy_ckpt(golden);
    p = t_path(d, SHARD1);
    size_t n;
    uint8_t *b = t_read(p, &n);
    uint64_t big = n;   /* > n - 8 */
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(big >> (8 * i));
    t_write(p, b, n);
    EXPECT_DIR(d, -EINVAL, SHARD1, "header length");
    /* Malformed JSON inside a real header: break the first key's quote. */
    for (int i = 0; i < 8; i++)
        b[i] = 0;
    uint64_t hl = 1984;
    b[0] = (uint8_t)(hl & 0xff);
    b[1] = (uint8_t)(hl >> 8);
    CHECK(b[8] == '{' && b[9] == '"');
    b[9] = '#';
    t_write(p, b, n);
    EXPECT_DIR(d, -EINVAL, SHARD1, "malformed JSON");
    free(b);
    free(p);
    t_rm_rf(d);

    /* Overlapping offsets: model.norm.weight onto layer 1's input norm. */
    d = t_copy_ckpt(golden);
    p = t_path(d, SHARD2);
    t_patch_st(p, set_offsets, (uint64_t[]){ 0, 1024 });
    EXPECT_DIR(d, -EINVAL, SHARD2, "overlap", "model.layers.1.input_layernorm.weight");
    /* Out of range. */
    t_patch_st(p, set_offsets, (uint64_t[]){ 2238976 + 4096, 2238976 + 4096 + 1024 });
    EXPECT_DIR(d, -EINVAL, SHARD2, "model.norm.weight", "out of range");
    /* end < begin */
    t_patch_st(p, set_offsets, (uint64_t[]){ 2238976 + 1024, 2238976 });
    EXPECT_DIR(d, -EINVAL, SHARD2, "model.norm.weight", "end before begin");
    free(p);
    t_rm_rf(d);

    /* Missing shard. */
    d = t_copy_ckpt(golden);
    p = t_path(d, SHARD2);
    unlink(p);
    EXPECT_DIR(d, -ENOENT, SHARD2, "missing shard");
    free(p);
    t_rm_rf(d);

    /* Index: malformed JSON, no weight_map, wrong shard, absent tensor,
     * unlisted tensor, path outside the directory. */
    d = t_copy_ckpt(golden);
    p = t_path(d, "model.safetensors.index.json");
    uint8_t *text = t_read(p, &n);
    t_write(p, text, n / 2);
    EXPECT_DIR(d, -EINVAL, "model.safetensors.index.json", "malformed JSON");
    t_write(p, text, n);
    t_patch_json(p, index_drop_map, NULL);
    EXPECT_DIR(d, -EINVAL, "model.safetensors.index.json", "weight_map");
    t_write(p, text, n);
    t_patch_json(p, index_set, (const char *[]){ "model.norm.weight", SHARD1 });
    EXPECT_DIR(d, -EINVAL, "model.norm.weight", SHARD1, SHARD2);
    t_write(p, text, n);
    t_patch_json(p, index_set, (const char *[]){ "model.layers.9.mlp.up_proj.weight", SHARD2 });
    EXPECT_DIR(d, -EINVAL, "model.layers.9.mlp.up_proj.weight", SHARD2, "not in that shard");
    t_write(p, text, n);
    t_patch_json(p, index_set, (const char *[]){ "model.norm.weight", NULL });
    EXPECT_DIR(d, -EINVAL, "model.norm.weight", SHARD2, "not listed");
    t_write(p, text, n);
    t_patch_json(p, index_set, (const char *[]){ "model.norm.weight", "../x.safetensors" });
    EXPECT_DIR(d, -EINVAL, "model.norm.weight", "../x.safetensors");
    t_write(p, text, n);
    /* A name in two shards. */
    char *p2 = t_path(d, SHARD2);
    t_patch_st(p2, add_dup, NULL);
    EXPECT_DIR(d, -EINVAL, "model.embed_tokens.weight", "duplicate", SHARD1, SHARD2);
    free(p2);
    free(text);
    free(p);
    t_rm_rf(d);

    /* Neither an index nor model.safetensors. */
    d = t_mkdtemp();
    EXPECT_DIR(d, -ENOENT, "model.safetensors");
    /* A single-file checkpoint works through open_dir too. */
    p = t_path(d, "model.safetensors");
    struct json_object *h = one("x.weight", "U8", 1, (uint64_t[]){ 3 }, 0, 3);
    t_write_st(p, h, "abc", 3);
    json_object_put(h);
    struct l8_tensor_set *s;
    char err[L8_ERRLEN];
    CHECK(l8_st_open_dir(d, &s, err) == 0);
    if (s && l8_st_count(s) == 1) {
        CHECK(memcmp(l8_st_find(s, "x.weight")->data, "abc", 3) == 0);
        l8_st_close(s);
    }
    free(p);
    t_rm_rf(d);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_CHECKPOINT_DIR\n", argv[0]);
        return 1;
    }
    golden = argv[1];
    char *dir = t_mkdtemp();
    test_dtypes();
    test_handmade(dir);
    test_bad_files(dir);
    test_golden();
    test_broken_golden();
    t_rm_rf(dir);
    return t_result("test_safetensors");
}
