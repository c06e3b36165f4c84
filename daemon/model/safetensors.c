/* safetensors.c - the reading half of safetensors.h: mmap, validate, look up.
 *
 * The files are mapped read-only and never copied: FP8 weights are used in
 * place by the engines. Because everything after open trusts the header,
 * open checks all of it (see the list in safetensors.h) and names the file
 * and the tensor in every rejection. The writer lives in safetensors_write.c. */
#include "safetensors.h"
#include "fail.h"
#include "read_file.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB; a real one is
 * tens of KiB (291 tensors for Llama 3.1 8B). */
#define L8_ST_MAX_HEADER   (100u << 20)
#define L8_ST_MAX_TENSORS  (1u << 20)
#define L8_ST_MAX_SHARDS   4096u
#define L8_ST_MAX_INDEX    (64u << 20)
#define L8_ST_INDEX_NAME   "model.safetensors.index.json"
#define L8_ST_SINGLE_NAME  "model.safetensors"

struct st_file {
    char *path;
    void *map;          /* PROT_READ mapping of the whole file */
    size_t size;
};

struct l8_tensor_set {
    uint32_t n_files, cap_files;
    struct st_file *files;
    uint32_t n, cap;
    struct l8_tensor *t;    /* [n], sorted by name once open returns */
};

static const struct {
    const char *name;
    size_t size;
} dtypes[L8_DTYPE_COUNT] = {
    [L8_F32]     = { "F32", 4 },
    [L8_F16]     = { "F16", 2 },
    [L8_BF16]    = { "BF16", 2 },
    [L8_F8_E4M3] = { "F8_E4M3", 1 },
    [L8_I32]     = { "I32", 4 },
    [L8_I64]     = { "I64", 8 },
    [L8_U8]      = { "U8", 1 },
};

const char *l8_dtype_name(enum l8_dtype t)
{
    return (unsigned)t < L8_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t l8_dtype_size(enum l8_dtype t)
{
    return (unsigned)t < L8_DTYPE_COUNT ? dtypes[t].size : 0;
}


static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct l8_tensor *)a)->name, ((const struct l8_tensor *)b)->name);
}

void l8_st_close(struct l8_tensor_set *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n; i++)
        free((char *)s->t[i].name);
    for (uint32_t i = 0; i < s->n_files; i++) {
        if (s->files[i].map)
            munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->t);
    free(s->files);
    free(s);
}

/* Parse len bytes of JSON text that must hold one object (and whitespace). */
static int parse_json(const char *text, size_t len, const char *path,
                      struct json_object **out, char err[L8_ERRLEN])
{
    if (len > INT32_MAX)
        return l8_fail(err, "%s: JSON too large", path);
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    int r = 0;
    if (!o || je != json_tokener_success) {
        r = l8_fail(err, "%s: malformed JSON at byte %zu: %s", path, end,
                 je == json_tokener_continue ? "unexpected end of input"
                                             : json_tokener_error_desc(je));
        goto out;
    }
    for (size_t i = end; i < len; i++)
        if (!memchr(" \t\r\n", text[i], 4)) {
            r = l8_fail(err, "%s: malformed JSON: unexpected data at byte %zu", path, i);
            goto out;
        }
    if (!json_object_is_type(o, json_type_object)) {
        r = l8_fail(err, "%s: malformed JSON: top level is not an object", path);
        goto out;
    }
    *out = o;
    o = NULL;
out:
    json_object_put(o);
    json_tokener_free(tok);
    return r;
}

static int get_u64(struct json_object *v, uint64_t *out)
{
    if (!v || !json_object_is_type(v, json_type_int))
        return -1;
    /* json-c stores non-negative integers up to 2^64-1 as uint64. */
    int64_t x = json_object_get_int64(v);
    if (x < 0)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

struct span { uint64_t begin, end; uint32_t idx; };

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Map one file and append its tensors to s (unsorted). */
static int add_file(struct l8_tensor_set *s, const char *path, char err[L8_ERRLEN])
{
    int r = 0;
    struct json_object *hdr = NULL;
    struct span *spans = NULL;

    if (s->n_files == s->cap_files) {
        uint32_t cap = s->cap_files ? 2 * s->cap_files : 4;
        void *p = realloc(s->files, cap * sizeof *s->files);
        if (!p)
            return l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
        s->files = p;
        s->cap_files = cap;
    }
    struct st_file *f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path)))
        return l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
    s->n_files++;   /* from here on l8_st_close frees it */

    /* No size bound: a shard is mapped, not read, and its header is checked below. */
    uint64_t size;
    int fd = l8_open_regular(path, UINT64_MAX, &size, err, L8_ERRLEN);
    if (fd < 0)
        return fd;
    if (size < 8) {
        close(fd);
        return l8_fail(err, "%s: truncated file: %llu bytes, too short for the 8-byte header"
                    " length", path, (unsigned long long)size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);  /* the mapping keeps the file */
    if (map == MAP_FAILED)
        return l8_fail_code(err, -e, "%s: mmap: %s", path, strerror(e));
    f->map = map;
    f->size = size;

    const uint8_t *b = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];   /* little-endian on every host */
    if (hlen > size - 8)
        return l8_fail(err, "%s: header length %llu is longer than the file (%llu bytes):"
                    " truncated or corrupt", path, (unsigned long long)hlen,
                    (unsigned long long)size);
    if (hlen > L8_ST_MAX_HEADER)
        return l8_fail(err, "%s: header length %llu exceeds the %u-byte limit", path,
                    (unsigned long long)hlen, L8_ST_MAX_HEADER);
    if (hlen < 2 || b[8] != '{')
        return l8_fail(err, "%s: malformed JSON header: does not start with '{'", path);
    if ((r = parse_json((const char *)b + 8, hlen, path, &hdr, err)))
        return r;

    const uint8_t *data = b + 8 + hlen;
    uint64_t dsize = size - 8 - hlen;
    int nt = json_object_object_length(hdr);
    if (nt > (int)L8_ST_MAX_TENSORS) {
        r = l8_fail(err, "%s: %d tensors exceed the limit of %u", path, nt, L8_ST_MAX_TENSORS);
        goto out;
    }
    if (s->n + (uint32_t)nt > s->cap) {
        uint32_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + (uint32_t)nt)
            cap *= 2;
        void *p = realloc(s->t, cap * sizeof *s->t);
        if (!p) {
            r = l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
            goto out;
        }
        s->t = p;
        s->cap = cap;
    }
    if (!(spans = calloc((size_t)nt + 1, sizeof *spans))) {
        r = l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
        goto out;
    }

    uint32_t ns = 0;
    json_object_object_foreach(hdr, name, v) {
        if (strcmp(name, "__metadata__") == 0) {
            if (v && !json_object_is_type(v, json_type_object)) {
                r = l8_fail(err, "%s: \"__metadata__\" must be an object", path);
                goto out;
            }
            continue;
        }
        if (!v || !json_object_is_type(v, json_type_object)) {
            r = l8_fail(err, "%s: %s: header entry is not an object", path, name);
            goto out;
        }
        struct l8_tensor t = { .file = f->path };
        struct json_object *dt = NULL, *shape = NULL, *offs = NULL;
        json_object_object_get_ex(v, "dtype", &dt);
        json_object_object_get_ex(v, "shape", &shape);
        json_object_object_get_ex(v, "data_offsets", &offs);
        if (!dt || !json_object_is_type(dt, json_type_string)) {
            r = l8_fail(err, "%s: %s: missing or non-string \"dtype\"", path, name);
            goto out;
        }
        int k;
        for (k = 0; k < L8_DTYPE_COUNT; k++)
            if (strcmp(json_object_get_string(dt), dtypes[k].name) == 0)
                break;
        if (k == L8_DTYPE_COUNT) {
            r = l8_fail(err, "%s: %s: unknown or unsupported dtype \"%s\"", path, name,
                     json_object_get_string(dt));
            goto out;
        }
        t.dtype = (enum l8_dtype)k;
        if (!shape || !json_object_is_type(shape, json_type_array) ||
            json_object_array_length(shape) > L8_MAX_DIMS) {
            r = l8_fail(err, "%s: %s: \"shape\" must be a list of at most %d sizes", path, name,
                     L8_MAX_DIMS);
            goto out;
        }
        t.n_dims = (uint32_t)json_object_array_length(shape);
        /* prod(shape) * dtype size, refusing overflow: a shape is only
         * plausible if its bytes fit in the file anyway. */
        uint64_t want = dtypes[k].size;
        for (uint32_t d = 0; d < t.n_dims; d++) {
            if (get_u64(json_object_array_get_idx(shape, d), &t.shape[d])) {
                r = l8_fail(err, "%s: %s: shape[%u] is not a non-negative integer", path, name, d);
                goto out;
            }
            if (t.shape[d] && want > UINT64_MAX / t.shape[d]) {
                r = l8_fail(err, "%s: %s: shape overflows", path, name);
                goto out;
            }
            want *= t.shape[d];
        }
        uint64_t o0, o1;
        if (!offs || !json_object_is_type(offs, json_type_array) ||
            json_object_array_length(offs) != 2 ||
            get_u64(json_object_array_get_idx(offs, 0), &o0) ||
            get_u64(json_object_array_get_idx(offs, 1), &o1)) {
            r = l8_fail(err, "%s: %s: \"data_offsets\" must be [begin, end]", path, name);
            goto out;
        }
        if (o1 < o0) {
            r = l8_fail(err, "%s: %s: data_offsets [%llu, %llu] end before begin", path, name,
                     (unsigned long long)o0, (unsigned long long)o1);
            goto out;
        }
        if (o1 > dsize) {
            r = l8_fail(err, "%s: %s: data_offsets [%llu, %llu] out of range: the data section"
                     " has %llu bytes (truncated file?)", path, name, (unsigned long long)o0,
                     (unsigned long long)o1, (unsigned long long)dsize);
            goto out;
        }
        if (o1 - o0 != want) {
            r = l8_fail(err, "%s: %s: %llu bytes in data_offsets, but shape and dtype %s need"
                     " %llu", path, name, (unsigned long long)(o1 - o0), dtypes[k].name,
                     (unsigned long long)want);
            goto out;
        }
        t.data = data + o0;
        t.nbytes = want;
        if (!(t.name = strdup(name))) {
            r = l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
            goto out;
        }
        spans[ns++] = (struct span){ o0, o1, s->n };
        s->t[s->n++] = t;
    }

    /* Overlap check: sorted by begin, each tensor must start at or after
     * the end of the one before it. Empty tensors cannot overlap. */
    qsort(spans, ns, sizeof *spans, cmp_span);
    uint32_t prev = UINT32_MAX;
    for (uint32_t i = 0; i < ns; i++) {
        if (spans[i].begin == spans[i].end)
            continue;
        if (prev != UINT32_MAX && spans[i].begin < spans[prev].end) {
            r = l8_fail(err, "%s: %s: data_offsets [%llu, %llu] overlap %s [%llu, %llu]", path,
                     s->t[spans[i].idx].name, (unsigned long long)spans[i].begin,
                     (unsigned long long)spans[i].end, s->t[spans[prev].idx].name,
                     (unsigned long long)spans[prev].begin,
                     (unsigned long long)spans[prev].end);
            goto out;
        }
        prev = i;
    }
out:
    free(spans);
    json_object_put(hdr);
    return r;
}

/* Sort by name and refuse a name that appears twice (in two shards; json-c
 * keeps the last of two equal keys within one header, like serde does). */
static int finish(struct l8_tensor_set *s, char err[L8_ERRLEN])
{
    if (s->n)
        qsort(s->t, s->n, sizeof *s->t, cmp_name);
    for (uint32_t i = 1; i < s->n; i++)
        if (strcmp(s->t[i].name, s->t[i - 1].name) == 0)
            return l8_fail(err, "%s: %s: duplicate tensor name (also in %s)", s->t[i].file,
                        s->t[i].name, s->t[i - 1].file);
    return 0;
}

static struct l8_tensor_set *new_set(void)
{
    return calloc(1, sizeof(struct l8_tensor_set));
}

int l8_st_open_file(const char *path, struct l8_tensor_set **out, char err[L8_ERRLEN])
{
    struct l8_tensor_set *s = new_set();
    if (!s)
        return l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
    int r = add_file(s, path, err);
    if (!r)
        r = finish(s, err);
    if (r) {
        l8_st_close(s);
        return r;
    }
    *out = s;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int open_sharded(const char *dir, const char *ipath, struct l8_tensor_set *s,
                        char err[L8_ERRLEN])
{
    char *text = NULL;
    struct json_object *idx = NULL, *wm = NULL;
    const char **shards = NULL;
    int r;

    if ((r = l8_read_file(ipath, L8_ST_MAX_INDEX, &text, NULL, err, L8_ERRLEN)))
        return r;
    if ((r = parse_json(text, strlen(text), ipath, &idx, err)))
        goto out;
    if (!json_object_object_get_ex(idx, "weight_map", &wm) || !wm ||
        !json_object_is_type(wm, json_type_object)) {
        r = l8_fail(err, "%s: missing or non-object \"weight_map\"", ipath);
        goto out;
    }
    int n = json_object_object_length(wm);
    if (n == 0 || n > (int)L8_ST_MAX_TENSORS) {
        r = l8_fail(err, "%s: \"weight_map\" has %d entries", ipath, n);
        goto out;
    }
    if (!(shards = calloc((size_t)n, sizeof *shards))) {
        r = l8_fail_code(err, -ENOMEM, "%s: out of memory", ipath);
        goto out;
    }
    int ns = 0;
    json_object_object_foreach(wm, name, v) {
        if (!v || !json_object_is_type(v, json_type_string)) {
            r = l8_fail(err, "%s: weight_map: %s: shard name must be a string", ipath, name);
            goto out;
        }
        const char *f = json_object_get_string(v);
        /* Shards live in the checkpoint directory; a name with a slash
         * (or "..") would read files elsewhere. */
        if (!*f || strchr(f, '/') || strcmp(f, "..") == 0 || strcmp(f, ".") == 0) {
            r = l8_fail(err, "%s: weight_map: %s: bad shard file name \"%s\"", ipath, name, f);
            goto out;
        }
        shards[ns++] = f;
    }
    qsort(shards, (size_t)ns, sizeof *shards, cmp_str);
    int nu = 0;
    for (int i = 0; i < ns; i++)
        if (i == 0 || strcmp(shards[i], shards[nu - 1]) != 0)
            shards[nu++] = shards[i];
    if (nu > (int)L8_ST_MAX_SHARDS) {
        r = l8_fail(err, "%s: %d shards exceed the limit of %u", ipath, nu, L8_ST_MAX_SHARDS);
        goto out;
    }
    for (int i = 0; i < nu; i++) {
        char path[4200];
        int len = snprintf(path, sizeof path, "%s/%s", dir, shards[i]);
        if (len < 0 || (size_t)len >= sizeof path) {
            r = l8_fail_code(err, -ENAMETOOLONG, "%s: shard path too long", ipath);
            goto out;
        }
        if ((r = add_file(s, path, err))) {
            if (r == -ENOENT)
                l8_fail_code(err, r, "%s: missing shard file (listed in %s)", path,
                          L8_ST_INDEX_NAME);
            goto out;
        }
    }
    if ((r = finish(s, err)))
        goto out;

    /* Every index entry must be in the shard it names, and nothing may be
     * in a shard that the index does not list. */
    json_object_object_foreach(wm, name2, v2) {
        const struct l8_tensor *t = l8_st_find(s, name2);
        const char *want = json_object_get_string(v2);
        if (!t) {
            r = l8_fail(err, "%s/%s: %s: tensor listed in %s is not in that shard", dir, want,
                     name2, L8_ST_INDEX_NAME);
            goto out;
        }
        if (strcmp(base_name(t->file), want) != 0) {
            r = l8_fail(err, "%s: %s: tensor is here, but %s says it is in %s", t->file, name2,
                     L8_ST_INDEX_NAME, want);
            goto out;
        }
    }
    if (s->n != (uint32_t)n)
        for (uint32_t i = 0; i < s->n; i++)
            if (!json_object_object_get_ex(wm, s->t[i].name, NULL)) {
                r = l8_fail(err, "%s: %s: tensor is not listed in %s", s->t[i].file,
                         s->t[i].name, L8_ST_INDEX_NAME);
                goto out;
            }
out:
    free(shards);
    json_object_put(idx);
    free(text);
    return r;
}

int l8_st_open_dir(const char *dir, struct l8_tensor_set **out, char err[L8_ERRLEN])
{
    char path[4200];
    struct l8_tensor_set *s = new_set();
    int r;
    if (!s)
        return l8_fail_code(err, -ENOMEM, "%s: out of memory", dir);
    snprintf(path, sizeof path, "%s/%s", dir, L8_ST_INDEX_NAME);
    if (access(path, F_OK) == 0) {
        r = open_sharded(dir, path, s, err);
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, L8_ST_SINGLE_NAME);
        if (access(path, F_OK) != 0)
            r = l8_fail_code(err, -ENOENT, "%s: no %s and no %s", dir, L8_ST_INDEX_NAME,
                          L8_ST_SINGLE_NAME);
        else if (!(r = add_file(s, path, err)))
            r = finish(s, err);
    }
    if (r) {
        l8_st_close(s);
        return r;
    }
    *out = s;
    return 0;
}

const struct l8_tensor *l8_st_find(const struct l8_tensor_set *s, const char *name)
{
    struct l8_tensor key = { .name = name };
    if (!s || !s->n)
        return NULL;
    return bsearch(&key, s->t, s->n, sizeof *s->t, cmp_name);
}

uint32_t l8_st_count(const struct l8_tensor_set *s)
{
    return s ? s->n : 0;
}

const struct l8_tensor *l8_st_at(const struct l8_tensor_set *s, uint32_t i)
{
    return s && i < s->n ? &s->t[i] : NULL;
}
