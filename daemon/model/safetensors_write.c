/* safetensors_write.c - the writer half of safetensors.h.
 *
 * File layout: u64 little-endian N, N bytes of JSON header padded with
 * spaces to a multiple of 8 (so the data starts 8-byte aligned, as the
 * reference implementation does), then each tensor's bytes back to back in
 * the order added. The header is built with json-c; json-c keeps insertion
 * order, so "__metadata__" comes first and tensors follow in file order.
 *
 * The file is written as PATH.partial and renamed at the end, so a reader
 * never sees a half-written checkpoint under the final name. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

/* One write(2) moves at most this much (Linux caps a single write near
 * 2 GiB anyway); the loop handles short writes. */
#define ST_WRITE_CHUNK (1ull << 30)
#define ST_HEADER_ALIGN 8u
/* Sanity cap on a header (the reference reader refuses above 100 MB). */
#define ST_MAX_HEADER (100ull << 20)

static const char *const st_dtype_names[L8_DTYPE_COUNT] = {
    [L8_F32] = "F32", [L8_F16] = "F16", [L8_BF16] = "BF16", [L8_F8_E4M3] = "F8_E4M3",
    [L8_I32] = "I32", [L8_I64] = "I64", [L8_U8] = "U8",
};
static const uint8_t st_dtype_sizes[L8_DTYPE_COUNT] = {
    [L8_F32] = 4, [L8_F16] = 2, [L8_BF16] = 2, [L8_F8_E4M3] = 1,
    [L8_I32] = 4, [L8_I64] = 8, [L8_U8] = 1,
};

struct st_wtensor {
    char *name;
    enum l8_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[L8_MAX_DIMS];
    uint64_t nbytes;
    const void *data;       /* borrowed; NULL when fill is set */
    l8_st_fill_fn fill;
    void *fill_ctx;
};

struct l8_st_writer {
    char *path;             /* final name */
    char *tmp_path;         /* PATH.partial, renamed on success */
    int fd;
    struct st_wtensor *t;   /* [n] in file order */
    uint32_t n, cap;
    uint64_t data_size;     /* sum of t[].nbytes */
};

static void seterr(char err[L8_ERRLEN], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(char err[L8_ERRLEN], const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, L8_ERRLEN, fmt, ap);
    va_end(ap);
}

/* Write all of buf at off; pwrite so the order of calls does not matter. */
static int write_all(int fd, const void *buf, uint64_t len, uint64_t off)
{
    const char *p = buf;
    while (len) {
        size_t n = len > ST_WRITE_CHUNK ? ST_WRITE_CHUNK : (size_t)len;
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return 0;
}

int l8_st_writer_open(const char *path, struct l8_st_writer **out, char err[L8_ERRLEN])
{
    struct l8_st_writer *w = calloc(1, sizeof(*w));
    int rc;

    if (!w) {
        seterr(err, "%s: out of memory", path);
        return -ENOMEM;
    }
    w->fd = -1;
    w->path = strdup(path);
    if (!w->path || asprintf(&w->tmp_path, "%s.partial", path) < 0) {
        w->tmp_path = NULL;
        rc = -ENOMEM;
        seterr(err, "%s: out of memory", path);
        goto err;
    }
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = -errno;
        seterr(err, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        goto err;
    }
    *out = w;
    return 0;
err:
    free(w->tmp_path);
    free(w->path);
    free(w);
    return rc;
}

static int add_common(struct l8_st_writer *w, const char *name, enum l8_dtype dt,
                      uint32_t n_dims, const uint64_t *shape, const void *data,
                      l8_st_fill_fn fill, void *ctx)
{
    if (!w || !name || !*name || (unsigned)dt >= L8_DTYPE_COUNT || n_dims > L8_MAX_DIMS ||
        (n_dims && !shape) || strcmp(name, "__metadata__") == 0)
        return -EINVAL;
    for (uint32_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return -EEXIST;

    uint64_t nbytes = st_dtype_sizes[dt];
    for (uint32_t d = 0; d < n_dims; d++) {
        if (shape[d] && nbytes > UINT64_MAX / 2 / shape[d])
            return -EOVERFLOW;
        nbytes *= shape[d];
    }
    if (nbytes && !data && !fill)
        return -EINVAL;
    if (w->data_size > INT64_MAX - nbytes)   /* offsets are JSON int64 */
        return -EOVERFLOW;

    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        struct st_wtensor *t = realloc(w->t, cap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        w->t = t;
        w->cap = cap;
    }
    struct st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return -ENOMEM;
    t->dtype = dt;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++)
        t->shape[d] = shape[d];
    t->nbytes = nbytes;
    t->data = data;
    t->fill = fill;
    t->fill_ctx = ctx;
    w->n++;
    w->data_size += nbytes;
    return 0;
}

int l8_st_writer_add(struct l8_st_writer *w, const char *name, enum l8_dtype dt,
                     uint32_t n_dims, const uint64_t *shape, const void *data)
{
    return add_common(w, name, dt, n_dims, shape, data, NULL, NULL);
}

int l8_st_writer_add_fill(struct l8_st_writer *w, const char *name, enum l8_dtype dt,
                          uint32_t n_dims, const uint64_t *shape,
                          l8_st_fill_fn fill, void *ctx)
{
    if (!fill)
        return -EINVAL;
    return add_common(w, name, dt, n_dims, shape, NULL, fill, ctx);
}

uint64_t l8_st_writer_data_size(const struct l8_st_writer *w)
{
    return w ? w->data_size : 0;
}

static void writer_free(struct l8_st_writer *w, bool unlink_tmp)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (unlink_tmp && w->tmp_path)
        unlink(w->tmp_path);
    for (uint32_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->tmp_path);
    free(w->path);
    free(w);
}

void l8_st_writer_abort(struct l8_st_writer *w)
{
    writer_free(w, true);
}

/* Build the padded header text. Returns 0 and a malloc'd buffer of
 * *len bytes (a multiple of ST_HEADER_ALIGN), or -errno. */
static int build_header(const struct l8_st_writer *w, const char *metadata_json,
                        char **text, uint64_t *len, char err[L8_ERRLEN])
{
    json_object *root = json_object_new_object(), *meta = NULL;
    int rc = -ENOMEM;
    uint64_t off = 0;

    if (!root)
        goto err;
    if (metadata_json) {
        meta = json_tokener_parse(metadata_json);
        if (!meta || !json_object_is_type(meta, json_type_object)) {
            rc = -EINVAL;
            seterr(err, "%s: __metadata__ is not a JSON object: %s", w->path, metadata_json);
            goto err;
        }
        /* The format allows only string values in __metadata__. */
        json_object_object_foreach(meta, k, v) {
            if (!json_object_is_type(v, json_type_string)) {
                rc = -EINVAL;
                seterr(err, "%s: __metadata__ value of \"%s\" is not a string", w->path, k);
                goto err;
            }
        }
    } else {
        meta = json_object_new_object();
        if (!meta)
            goto err;
    }
    json_object_object_add(root, "__metadata__", meta);
    meta = NULL;

    for (uint32_t i = 0; i < w->n; i++) {
        const struct st_wtensor *t = &w->t[i];
        json_object *o = json_object_new_object();
        json_object *shape = json_object_new_array();
        json_object *offs = json_object_new_array();
        if (!o || !shape || !offs) {
            json_object_put(o);
            json_object_put(shape);
            json_object_put(offs);
            goto err;
        }
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_object_array_add(shape, json_object_new_int64((int64_t)t->shape[d]));
        json_object_array_add(offs, json_object_new_int64((int64_t)off));
        json_object_array_add(offs, json_object_new_int64((int64_t)(off + t->nbytes)));
        json_object_object_add(o, "dtype", json_object_new_string(st_dtype_names[t->dtype]));
        json_object_object_add(o, "shape", shape);
        json_object_object_add(o, "data_offsets", offs);
        json_object_object_add(root, t->name, o);
        off += t->nbytes;
    }

    size_t slen;
    const char *s = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &slen);
    if (!s)
        goto err;
    uint64_t padded = (slen + ST_HEADER_ALIGN - 1) / ST_HEADER_ALIGN * ST_HEADER_ALIGN;
    if (padded > ST_MAX_HEADER) {
        rc = -E2BIG;
        seterr(err, "%s: header of %zu bytes is too large", w->path, slen);
        goto err;
    }
    char *buf = malloc(padded);
    if (!buf)
        goto err;
    memcpy(buf, s, slen);
    memset(buf + slen, ' ', padded - slen);
    json_object_put(root);
    *text = buf;
    *len = padded;
    return 0;
err:
    if (rc == -ENOMEM)
        seterr(err, "%s: out of memory building the header", w->path);
    json_object_put(meta);
    json_object_put(root);
    return rc;
}

/* Background write of one tensor while the next one is being filled. */
struct st_bgwrite {
    pthread_t th;
    bool running;
    int fd;
    const void *buf;
    uint64_t len, off;
    int rc;
};

static void *bgwrite_main(void *arg)
{
    struct st_bgwrite *b = arg;
    b->rc = write_all(b->fd, b->buf, b->len, b->off);
    return NULL;
}

/* Wait for the write in flight, if any; returns its result. */
static int bgwrite_join(struct st_bgwrite *b)
{
    if (!b->running)
        return 0;
    pthread_join(b->th, NULL);
    b->running = false;
    return b->rc;
}

static int bgwrite_start(struct st_bgwrite *b, int fd, const void *buf, uint64_t len, uint64_t off)
{
    b->fd = fd;
    b->buf = buf;
    b->len = len;
    b->off = off;
    b->rc = 0;
    if (pthread_create(&b->th, NULL, bgwrite_main, b) != 0)
        return write_all(fd, buf, len, off);   /* no thread: write in line */
    b->running = true;
    return 0;
}

int l8_st_writer_finish(struct l8_st_writer *w, const char *metadata_json, char err[L8_ERRLEN])
{
    char *header = NULL;
    uint64_t hlen = 0, max_fill = 0;
    void *bufs[2] = { NULL, NULL };
    struct st_bgwrite bg = { .running = false };
    int rc;

    if (!w)
        return -EINVAL;
    rc = build_header(w, metadata_json, &header, &hlen, err);
    if (rc < 0)
        goto err;

    uint8_t lenbytes[8];
    for (int i = 0; i < 8; i++)
        lenbytes[i] = (uint8_t)(hlen >> (8 * i));
    rc = write_all(w->fd, lenbytes, sizeof(lenbytes), 0);
    if (rc == 0)
        rc = write_all(w->fd, header, hlen, sizeof(lenbytes));
    if (rc < 0) {
        seterr(err, "%s: write failed: %s", w->tmp_path, strerror(-rc));
        goto err;
    }

    for (uint32_t i = 0; i < w->n; i++)
        if (w->t[i].fill && w->t[i].nbytes > max_fill)
            max_fill = w->t[i].nbytes;
    if (max_fill) {
        bufs[0] = malloc(max_fill);
        bufs[1] = malloc(max_fill);
        if (!bufs[0] || !bufs[1]) {
            rc = -ENOMEM;
            seterr(err, "%s: out of memory for a %llu-byte tensor buffer", w->path,
                   (unsigned long long)max_fill);
            goto err;
        }
    }

    /* Fill tensor i into one buffer while tensor i-1 is written from the
     * other: generation and I/O overlap; at most one write is in flight,
     * so a buffer is never refilled while it is still being written. */
    uint64_t off = sizeof(lenbytes) + hlen;
    unsigned cur = 0;
    for (uint32_t i = 0; i < w->n; i++) {
        const struct st_wtensor *t = &w->t[i];
        const void *src = t->data;
        if (t->nbytes == 0)
            continue;
        if (t->fill) {
            rc = t->fill(t->fill_ctx, bufs[cur], t->nbytes);
            if (rc < 0) {
                seterr(err, "%s: producing tensor %s failed: %s", w->path, t->name,
                       strerror(-rc));
                goto err;
            }
            src = bufs[cur];
            cur ^= 1;
        }
        rc = bgwrite_join(&bg);
        if (rc == 0)
            rc = bgwrite_start(&bg, w->fd, src, t->nbytes, off);
        if (rc < 0) {
            seterr(err, "%s: write failed: %s", w->tmp_path, strerror(-rc));
            goto err;
        }
        off += t->nbytes;
    }
    rc = bgwrite_join(&bg);
    if (rc < 0) {
        seterr(err, "%s: write failed: %s", w->tmp_path, strerror(-rc));
        goto err;
    }
    if (close(w->fd) < 0) {
        w->fd = -1;
        rc = -errno;
        seterr(err, "%s: close failed: %s", w->tmp_path, strerror(errno));
        goto err;
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) < 0) {
        rc = -errno;
        seterr(err, "%s: cannot rename to %s: %s", w->tmp_path, w->path, strerror(errno));
        goto err;
    }
    free(bufs[0]);
    free(bufs[1]);
    free(header);
    writer_free(w, false);
    return 0;
err:
    bgwrite_join(&bg);
    free(bufs[0]);
    free(bufs[1]);
    free(header);
    writer_free(w, true);
    return rc;
}
