/* testutil.h - helpers for the model tests (and the tools' tests of the
 * same files) on top of ../test.h: error returns whose message must name
 * the fault, copies of the golden checkpoint, and safetensors files
 * written or patched byte by byte (independently of the project's writer,
 * so the reader is never checked only against its own twin). */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"

/* An error return with a message that must mention every given fragment. */
#define CHECK_ERR(r, want_r, err, ...)                                           \
    do {                                                                         \
        const char *frags_[] = { __VA_ARGS__, NULL };                            \
        if (getenv("L8_TEST_VERBOSE"))                                           \
            fprintf(stderr, "  [%d] %s\n", (r), (err));                          \
        if ((r) != (want_r)) {                                                   \
            t_report("FAIL", __FILE__, __LINE__, #r, ": %d, expected %d (err: %s)", \
                     (r), (want_r), (err));                                      \
            t_failures++;                                                        \
        }                                                                        \
        for (int i_ = 0; frags_[i_]; i_++)                                       \
            if (!strstr((err), frags_[i_])) {                                    \
                t_report("FAIL", __FILE__, __LINE__, #err, ": \"%s\" lacks \"%s\"", \
                         (err), frags_[i_]);                                     \
                t_failures++;                                                    \
            }                                                                    \
    } while (0)

/* Copy the checkpoint files of a golden directory into a fresh temp dir. */
static inline char *t_copy_ckpt(const char *golden)
{
    static const char *const files[] = {
        "config.json", "generation_config.json", "model.safetensors.index.json",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", NULL };
    char *dir = t_mkdtemp();
    for (int i = 0; files[i]; i++) {
        char *s = t_path(golden, files[i]), *d = t_path(dir, files[i]);
        t_copy(s, d);
        free(s);
        free(d);
    }
    return dir;
}

/* A safetensors file: JSON header (spaces pad it to 8 bytes as the
 * reference writer does) and the data section. */
static inline void t_write_st(const char *path, struct json_object *hdr, const void *data,
                              size_t dlen)
{
    const char *h = json_object_to_json_string_ext(hdr, JSON_C_TO_STRING_PLAIN);
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8;
    size_t total = 8 + hl + pad + dlen;
    uint8_t *b = malloc(total);
    uint64_t n = hl + pad;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, h, hl);
    memset(b + 8 + hl, ' ', pad);
    if (dlen)
        memcpy(b + 8 + hl + pad, data, dlen);
    t_write(path, b, total);
    free(b);
}

/* Parse a safetensors file's header and return it with its data section. */
static inline struct json_object *t_read_st(const char *path, uint8_t **data, size_t *dlen)
{
    size_t n;
    uint8_t *b = t_read(path, &n);
    if (!b || n < 8)
        abort();
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | b[i];
    char *h = strndup((char *)b + 8, hl);
    struct json_object *o = json_tokener_parse(h);
    free(h);
    if (!o)
        abort();
    *dlen = n - 8 - hl;
    *data = malloc(*dlen + 1);
    memcpy(*data, b + 8 + hl, *dlen);
    free(b);
    return o;
}

/* Rewrite a safetensors file after fn edits its header (data unchanged). */
static inline void t_patch_st(const char *path, void (*fn)(struct json_object *hdr, void *arg),
                              void *arg)
{
    uint8_t *data;
    size_t dlen;
    struct json_object *h = t_read_st(path, &data, &dlen);
    fn(h, arg);
    t_write_st(path, h, data, dlen);
    json_object_put(h);
    free(data);
}

/* Rewrite a JSON file after fn edits it. */
static inline void t_patch_json(const char *path, void (*fn)(struct json_object *o, void *arg),
                                void *arg)
{
    struct json_object *o = json_object_from_file(path);
    if (!o)
        abort();
    fn(o, arg);
    t_write_text(path, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
    json_object_put(o);
}

static inline struct json_object *t_jarr_u64(int n, const uint64_t *v)
{
    struct json_object *a = json_object_new_array();
    for (int i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_int64((int64_t)v[i]));
    return a;
}

/* Header entry {dtype, shape, data_offsets}. */
static inline void t_hdr_add(struct json_object *hdr, const char *name, const char *dtype,
                             int nd, const uint64_t *shape, uint64_t begin, uint64_t end)
{
    struct json_object *e = json_object_new_object();
    uint64_t off[2] = { begin, end };
    json_object_object_add(e, "dtype", json_object_new_string(dtype));
    json_object_object_add(e, "shape", t_jarr_u64(nd, shape));
    json_object_object_add(e, "data_offsets", t_jarr_u64(2, off));
    json_object_object_add(hdr, name, e);
}

/* Deterministic pseudo-random numbers (splitmix64): no hard-coded data,
 * same values on every machine. */
static inline uint64_t t_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float t_randf(uint64_t *s)
{
    return (float)((double)(t_rand(s) >> 11) * 0x1p-52 - 1.0);
}
