/* test_st_writer - the safetensors writer: exact file layout (checked from
 * the raw bytes with json-c, not through our reader), a round trip through
 * the reader for every dtype, the streaming fill form, and its errors. */
#include "../model/testutil.h"

#include "numerics.h"
#include "safetensors.h"

#define N_DT L8_DTYPE_COUNT

static const char *const dt_names[N_DT] = {
    [L8_F32] = "F32", [L8_F16] = "F16", [L8_BF16] = "BF16", [L8_F8_E4M3] = "F8_E4M3",
    [L8_I32] = "I32", [L8_I64] = "I64", [L8_U8] = "U8",
};
static const size_t dt_sizes[N_DT] = { 4, 2, 2, 1, 4, 8, 1 };

/* Deterministic bytes that differ per tensor. */
static void pattern(uint8_t *p, size_t n, unsigned salt)
{
    uint32_t x = 0x12345u + salt * 7919u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
}

struct fill_ctx {
    unsigned salt;
    int calls;
    int fail;          /* negative errno to return */
};

static int fill_pattern(void *ctx, void *dst, uint64_t nbytes)
{
    struct fill_ctx *c = ctx;
    c->calls++;
    if (c->fail)
        return c->fail;
    pattern(dst, (size_t)nbytes, c->salt);
    return 0;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

/* A file with one tensor of every dtype (every other one through fill), a
 * scalar, an empty tensor and a 4-d one; check the raw layout and the
 * reader's view. */
static void test_roundtrip(const char *dir)
{
    char err[L8_ERRLEN] = "";
    char *path = t_path(dir, "all.safetensors");
    char *partial = t_path(dir, "all.safetensors.partial");
    struct l8_st_writer *w = NULL;
    uint8_t *bufs[N_DT];
    struct fill_ctx fc[N_DT];
    uint64_t shapes[N_DT][2];
    char names[N_DT][32];

    CHECK(l8_st_writer_open(path, &w, err) == 0);
    if (!w)
        return;
    CHECK(exists(partial) && !exists(path));  /* only the partial name meanwhile */
    for (int d = 0; d < N_DT; d++) {
        shapes[d][0] = 3 + (uint64_t)d;
        shapes[d][1] = 5;     /* 5 * size: odd byte counts for 1-byte types */
        size_t n = (size_t)(shapes[d][0] * shapes[d][1]) * dt_sizes[d];
        bufs[d] = malloc(n);
        pattern(bufs[d], n, (unsigned)d);
        snprintf(names[d], sizeof(names[d]), "t.%s", dt_names[d]);
        fc[d] = (struct fill_ctx){ .salt = (unsigned)d };
        if (d % 2)
            CHECK(l8_st_writer_add_fill(w, names[d], (enum l8_dtype)d, 2, shapes[d],
                                        fill_pattern, &fc[d]) == 0);
        else
            CHECK(l8_st_writer_add(w, names[d], (enum l8_dtype)d, 2, shapes[d], bufs[d]) == 0);
    }
    float scalar = 2.5f;
    uint64_t empty_shape[2] = { 0, 7 }, four[4] = { 2, 1, 3, 2 };
    uint8_t four_data[12];
    pattern(four_data, sizeof(four_data), 99);
    CHECK(l8_st_writer_add(w, "scalar", L8_F32, 0, NULL, &scalar) == 0);
    CHECK(l8_st_writer_add(w, "empty", L8_BF16, 2, empty_shape, NULL) == 0);
    CHECK(l8_st_writer_add(w, "four.d", L8_U8, 4, four, four_data) == 0);

    uint64_t want_total = 4 + 0 + 12;
    for (int d = 0; d < N_DT; d++)
        want_total += shapes[d][0] * shapes[d][1] * dt_sizes[d];
    CHECK(l8_st_writer_data_size(w) == want_total);

    /* Errors on add leave the writer usable. */
    CHECK(l8_st_writer_add(w, "scalar", L8_F32, 0, NULL, &scalar) == -EEXIST);
    CHECK(l8_st_writer_add(w, "__metadata__", L8_F32, 0, NULL, &scalar) == -EINVAL);
    CHECK(l8_st_writer_add(w, "", L8_F32, 0, NULL, &scalar) == -EINVAL);
    CHECK(l8_st_writer_add(w, "bad.dtype", L8_DTYPE_COUNT, 0, NULL, &scalar) == -EINVAL);
    uint64_t five[5] = { 1, 1, 1, 1, 1 };
    CHECK(l8_st_writer_add(w, "five.d", L8_U8, 5, five, four_data) == -EINVAL);
    CHECK(l8_st_writer_add(w, "no.data", L8_U8, 1, five, NULL) == -EINVAL);
    CHECK(l8_st_writer_add_fill(w, "no.fill", L8_U8, 1, five, NULL, NULL) == -EINVAL);
    uint64_t huge[3] = { 1ull << 32, 1ull << 32, 1ull << 8 };
    CHECK(l8_st_writer_add(w, "huge", L8_U8, 3, huge, four_data) == -EOVERFLOW);
    CHECK(l8_st_writer_data_size(w) == want_total);

    CHECK(l8_st_writer_finish(w, "{\"format\": \"pt\", \"note\": \"a/b\"}", err) == 0);
    CHECK(exists(path) && !exists(partial));
    for (int d = 0; d < N_DT; d++)
        CHECK(fc[d].calls == (d % 2 ? 1 : 0));

    /* Raw layout. */
    size_t flen = 0;
    uint8_t *raw = t_read(path, &flen);
    CHECK(raw != NULL);
    if (!raw)
        goto out;
    uint64_t hlen = le64(raw);
    CHECK(hlen % 8 == 0);
    CHECK(8 + hlen + want_total == flen);
    char *hdr = strndup((const char *)raw + 8, (size_t)hlen);
    size_t tl = strlen(hdr);
    CHECK(tl == hlen);                       /* no NUL inside */
    CHECK(hdr[0] == '{');
    while (tl && hdr[tl - 1] == ' ')         /* padding is spaces only */
        tl--;
    CHECK(tl > 0 && hdr[tl - 1] == '}');
    CHECK(hlen - tl < 8);
    CHECK(strncmp(hdr, "{\"__metadata__\":", 16) == 0);   /* metadata first */
    CHECK(strstr(hdr, "a/b") != NULL);       /* slashes not escaped */
    json_object *j = json_tokener_parse(hdr);
    CHECK(j != NULL);
    if (j) {
        json_object *meta, *v;
        CHECK(json_object_object_get_ex(j, "__metadata__", &meta));
        CHECK(json_object_object_get_ex(meta, "format", &v) &&
              strcmp(json_object_get_string(v), "pt") == 0);
        /* Tensors in the order added, offsets back to back. */
        const char *order[N_DT + 3];
        for (int d = 0; d < N_DT; d++)
            order[d] = names[d];
        order[N_DT] = "scalar";
        order[N_DT + 1] = "empty";
        order[N_DT + 2] = "four.d";
        int k = 0;
        uint64_t off = 0;
        json_object_object_foreach(j, key, val) {
            if (strcmp(key, "__metadata__") == 0) {
                CHECK(k == 0);
                continue;
            }
            CHECK(k < N_DT + 3 && strcmp(key, order[k]) == 0);
            json_object *dt, *shape, *offs;
            CHECK(json_object_object_get_ex(val, "dtype", &dt));
            CHECK(json_object_object_get_ex(val, "shape", &shape));
            CHECK(json_object_object_get_ex(val, "data_offsets", &offs));
            CHECK(json_object_array_length(offs) == 2);
            uint64_t b = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 0));
            uint64_t e = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 1));
            CHECK(b == off);
            uint64_t nbytes;
            if (k < N_DT) {
                CHECK(strcmp(json_object_get_string(dt), dt_names[k]) == 0);
                CHECK(json_object_array_length(shape) == 2);
                CHECK((uint64_t)json_object_get_int64(json_object_array_get_idx(shape, 0)) ==
                      shapes[k][0]);
                nbytes = shapes[k][0] * shapes[k][1] * dt_sizes[k];
                CHECK(memcmp(raw + 8 + hlen + b, bufs[k], (size_t)nbytes) == 0);
            } else if (k == N_DT) {
                CHECK(json_object_array_length(shape) == 0);
                nbytes = 4;
                CHECK(memcmp(raw + 8 + hlen + b, &scalar, 4) == 0);
            } else if (k == N_DT + 1) {
                nbytes = 0;
            } else {
                CHECK(json_object_array_length(shape) == 4);
                nbytes = 12;
                CHECK(memcmp(raw + 8 + hlen + b, four_data, 12) == 0);
            }
            CHECK(e == b + nbytes);
            off = e;
            k++;
        }
        CHECK(k == N_DT + 3);
        json_object_put(j);
    }
    free(hdr);
    free(raw);

    /* Through the reader. */
    struct l8_tensor_set *ts = NULL;
    int rc = l8_st_open_file(path, &ts, err);
    CHECK(rc == 0);
    if (rc == 0) {
        CHECK(l8_st_count(ts) == N_DT + 3);
        for (int d = 0; d < N_DT; d++) {
            const struct l8_tensor *t = l8_st_find(ts, names[d]);
            CHECK(t != NULL);
            if (!t)
                continue;
            CHECK(t->dtype == (enum l8_dtype)d);
            CHECK(t->n_dims == 2 && t->shape[0] == shapes[d][0] && t->shape[1] == shapes[d][1]);
            CHECK(t->nbytes == shapes[d][0] * shapes[d][1] * dt_sizes[d]);
            CHECK(memcmp(t->data, bufs[d], (size_t)t->nbytes) == 0);
        }
        const struct l8_tensor *s = l8_st_find(ts, "scalar");
        CHECK(s && s->n_dims == 0 && s->nbytes == 4 && memcmp(s->data, &scalar, 4) == 0);
        const struct l8_tensor *f = l8_st_find(ts, "four.d");
        CHECK(f && f->n_dims == 4 && f->shape[2] == 3 && memcmp(f->data, four_data, 12) == 0);
        l8_st_close(ts);
    } else {
        fprintf(stderr, "reader: %s\n", err);
    }
out:
    for (int d = 0; d < N_DT; d++)
        free(bufs[d]);
    free(path);
    free(partial);
}

/* Failures leave no file behind, under either name, and say why. */
static void test_errors(const char *dir)
{
    char err[L8_ERRLEN] = "";
    struct l8_st_writer *w = NULL;
    char *path = t_path(dir, "bad.safetensors");
    char *partial = t_path(dir, "bad.safetensors.partial");
    uint8_t data[16] = { 0 };
    uint64_t shape[1] = { 16 };
    int rc;

    /* Not a directory we can write into. */
    char *nodir = t_path(dir, "missing/x.safetensors");
    err[0] = 0;
    rc = l8_st_writer_open(nodir, &w, err);
    CHECK_ERR(rc, -ENOENT, err, "missing/x.safetensors");
    free(nodir);

    /* Metadata that is not an object of strings. */
    const char *bad_meta[] = { "[1]", "{\"format\": 1}", "{not json", "\"pt\"" };
    for (size_t i = 0; i < sizeof(bad_meta) / sizeof(bad_meta[0]); i++) {
        w = NULL;
        CHECK(l8_st_writer_open(path, &w, err) == 0);
        CHECK(l8_st_writer_add(w, "x", L8_U8, 1, shape, data) == 0);
        err[0] = 0;
        rc = l8_st_writer_finish(w, bad_meta[i], err);
        CHECK_ERR(rc, -EINVAL, err, "__metadata__", "bad.safetensors");
        CHECK(!exists(path) && !exists(partial));
    }

    /* A fill that fails aborts the file; fills after it are not called. */
    struct fill_ctx ok = { .salt = 1 }, bad = { .fail = -EIO }, after = { .salt = 2 };
    CHECK(l8_st_writer_open(path, &w, err) == 0);
    CHECK(l8_st_writer_add_fill(w, "first", L8_U8, 1, shape, fill_pattern, &ok) == 0);
    CHECK(l8_st_writer_add_fill(w, "broken", L8_U8, 1, shape, fill_pattern, &bad) == 0);
    CHECK(l8_st_writer_add_fill(w, "after", L8_U8, 1, shape, fill_pattern, &after) == 0);
    err[0] = 0;
    rc = l8_st_writer_finish(w, NULL, err);
    CHECK_ERR(rc, -EIO, err, "broken");
    CHECK(ok.calls == 1 && bad.calls == 1 && after.calls == 0);
    CHECK(!exists(path) && !exists(partial));

    /* Abort discards; NULL is a no-op. */
    CHECK(l8_st_writer_open(path, &w, err) == 0);
    CHECK(l8_st_writer_add(w, "x", L8_U8, 1, shape, data) == 0);
    l8_st_writer_abort(w);
    l8_st_writer_abort(NULL);
    CHECK(!exists(path) && !exists(partial));

    /* Metadata NULL gives "{}"; an empty file of tensors is valid. */
    CHECK(l8_st_writer_open(path, &w, err) == 0);
    CHECK(l8_st_writer_finish(w, NULL, err) == 0);
    size_t n = 0;
    uint8_t *raw = t_read(path, &n);
    CHECK(raw && n == 8 + le64(raw) && le64(raw) % 8 == 0);
    CHECK(raw && strncmp((const char *)raw + 8, "{\"__metadata__\":{}}", 19) == 0);
    free(raw);
    struct l8_tensor_set *ts = NULL;
    CHECK(l8_st_open_file(path, &ts, err) == 0);
    CHECK(ts && l8_st_count(ts) == 0);
    l8_st_close(ts);

    free(path);
    free(partial);
}

/* Every header length modulo 8 gets padded: names of growing length. */
static void test_padding(const char *dir)
{
    char err[L8_ERRLEN];
    char *path = t_path(dir, "pad.safetensors");
    uint8_t v = 7;
    uint64_t shape[1] = { 1 };
    for (int len = 1; len <= 9; len++) {
        struct l8_st_writer *w = NULL;
        char name[16];
        memset(name, 'n', (size_t)len);
        name[len] = 0;
        CHECK(l8_st_writer_open(path, &w, err) == 0);
        CHECK(l8_st_writer_add(w, name, L8_U8, 1, shape, &v) == 0);
        CHECK(l8_st_writer_finish(w, NULL, err) == 0);
        size_t n = 0;
        uint8_t *raw = t_read(path, &n);
        CHECK(raw && le64(raw) % 8 == 0 && n == 8 + le64(raw) + 1 && raw[n - 1] == 7);
        free(raw);
    }
    free(path);
}

int main(void)
{
    char *dir = t_mkdtemp();
    test_roundtrip(dir);
    test_errors(dir);
    test_padding(dir);
    t_rm_rf(dir);
    return t_result("st_writer");
}
