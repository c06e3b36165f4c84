/* tokenizer_cache.c: the built tokenizer tables, saved to and loaded from a cache file.
 *
 * Loading the real tokenizer.json costs about 0.5 s (json-c's object tree of 128k vocabulary
 * entries and 280k merges, then our tables); that is most of what a `llama8ctl tokenize`
 * takes.  The tables themselves are flat arrays and open-addressing hash tables with no
 * pointers inside, so they are written once as one image and read back with one read().
 *
 * Where: $LLAMA8_TOKENIZER_CACHE (a directory; "off" or "0" or empty: no cache), else
 * $XDG_CACHE_HOME/llama8, else $HOME/.cache/llama8.  One file per tokenizer.json contents:
 * tokenizer-<hash>-<size>.bin, so the model directories that hold the same tokenizer share
 * it and an edited tokenizer.json gets a file of its own.
 *
 * Trust: nothing in the file is believed before it is checked.  The header must match this
 * build (magic, version, byte order, header size) and the source (size and hash of the
 * tokenizer.json just read); the file size must be exactly what the counts say; the payload
 * hash must match; and the tables must hold together (every offset, id and index in range,
 * every hash table with an empty slot so that probing ends) before any pointer is handed to
 * the tokenizer.  Anything else and the caller parses the JSON and writes a fresh file.
 * Files are written to a temporary name and renamed over, so a reader sees an old whole
 * file or a new whole file, never half of one; a crash that leaves a damaged file behind is
 * caught by the checks.  A load refreshes its file's mtime, and writing a new file deletes
 * the ones unused for 30 days.
 */
#include "tokenizer_internal.h"
#include "daemon/model/read_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Larger than any cache of a tokenizer.json within L8TOK_MAX_FILE; a bigger file is
 * not ours. */
#define MAX_CACHE_FILE (1ull << 30)
#define CACHE_DIR_MODE 0700

_Static_assert(sizeof(struct l8tok_cache_header) == 96, "the header has no padding");
_Static_assert(sizeof(bool) == 1, "added_first is stored as bytes");

/* ---------------------------------------------------------------- hash */

#define HASH_K1 0x9e3779b97f4a7c15ull
#define HASH_K2 0xff51afd7ed558ccdull

/* One step of a lane: a bijection of v for a fixed w and of w for a fixed v, so a single
 * changed word always changes the lane. */
static inline uint64_t hash_step(uint64_t v, uint64_t w)
{
    v = (v ^ w) * HASH_K2;
    return v ^ (v >> 29);
}

/* Four independent lanes over 32-byte blocks: the source (9 MB) and the cache image
 * (15 MB) are hashed on every load, and one lane's multiply chain would be the bottleneck.
 * Incremental, so that the source can be hashed as it is read, in a buffer that stays in
 * the CPU caches. */
struct hash_state {
    uint64_t v[4];
    uint64_t n; /* bytes so far */
};

static void hash_init(struct hash_state *s)
{
    *s = (struct hash_state){.v = {HASH_K1, HASH_K1 * 3, HASH_K1 * 5, HASH_K1 * 7}};
}

/* n must be a multiple of HASH_BLOCK except in the last call before hash_end. */
#define HASH_BLOCK 32
static void hash_update(struct hash_state *s, const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + HASH_BLOCK <= n; i += HASH_BLOCK) {
        uint64_t w[4];
        memcpy(w, p + i, sizeof(w));
        s->v[0] = hash_step(s->v[0], w[0]);
        s->v[1] = hash_step(s->v[1], w[1]);
        s->v[2] = hash_step(s->v[2], w[2]);
        s->v[3] = hash_step(s->v[3], w[3]);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof(w));
        s->v[0] = hash_step(s->v[0], w);
    }
    if (i < n) {
        uint64_t w = 0; /* zero-padded; the length, mixed in at the end, tells "a" from "a\0" */
        memcpy(&w, p + i, n - i);
        s->v[1] = hash_step(s->v[1], w);
    }
    s->n += n;
}

static uint64_t hash_end(const struct hash_state *s)
{
    uint64_t h = s->n * HASH_K1;
    for (int k = 0; k < 4; k++)
        h = l8_mix64(h ^ s->v[k]);
    return h;
}

uint64_t l8tok__hash(const void *data, size_t n)
{
    struct hash_state s;
    hash_init(&s);
    hash_update(&s, data, n);
    return hash_end(&s);
}

/* Read size in chunks this big (a multiple of HASH_BLOCK). */
#define HASH_FILE_CHUNK (256u << 10)
_Static_assert(HASH_FILE_CHUNK % HASH_BLOCK == 0, "chunks are whole hash blocks");

int l8tok__hash_file(const char *path, uint64_t *size, uint64_t *hash)
{
    uint64_t fsize;
    int fd = l8_open_regular(path, L8TOK_MAX_FILE, &fsize, NULL, 0);
    if (fd < 0)
        return fd;
    uint8_t *buf = NULL;
    int rc;
    if (fsize < L8TOK_CACHE_MIN_SOURCE) {
        rc = 0;
        goto out;
    }
    buf = malloc(HASH_FILE_CHUNK);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    struct hash_state s;
    hash_init(&s);
    for (;;) {
        /* fill the chunk completely (or to EOF): hash_update wants whole blocks */
        size_t got = 0;
        while (got < HASH_FILE_CHUNK) {
            ssize_t r = read(fd, buf + got, HASH_FILE_CHUNK - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = -errno;
                goto out;
            }
            if (r == 0)
                break;
            got += (size_t)r;
        }
        hash_update(&s, buf, got);
        if (got < HASH_FILE_CHUNK)
            break;
    }
    *size = s.n;
    *hash = hash_end(&s);
    rc = 1;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- file layout */

void l8tok__cache_layout(const struct l8tok_cache_header *h, uint64_t off[SEC_COUNT + 1])
{
    const uint64_t size[SEC_COUNT] = {
        [SEC_TOK_OFF] = (uint64_t)h->n_ids * sizeof(uint32_t),
        [SEC_TOK_LEN] = (uint64_t)h->n_ids * sizeof(uint32_t),
        [SEC_TOK_KIND] = h->n_ids,
        [SEC_POOL] = h->pool_len,
        [SEC_VOCAB] = ((uint64_t)h->vocab_mask + 1) * sizeof(struct vocab_slot),
        [SEC_MERGES] = ((uint64_t)h->merge_mask + 1) * sizeof(struct merge_slot),
        [SEC_ADDED] = (uint64_t)h->n_added * sizeof(struct added_token),
        [SEC_ADDED_HASH] = ((uint64_t)h->added_mask + 1) * sizeof(struct vocab_slot),
        [SEC_BYTE_ID] = 256 * sizeof(uint32_t),
        [SEC_ADDED_FIRST] = 256 * sizeof(bool),
        [SEC_ADDED_LENS] = MAX_ADDED_LENS * sizeof(uint32_t),
        [SEC_PATTERN] = (uint64_t)h->pattern_len + 1,
    };
    uint64_t o = 0;
    for (int k = 0; k < SEC_COUNT; k++) {
        off[k] = o;
        o += (size[k] + 7) & ~7ull; /* every section 8-aligned: the slots hold uint64_t */
    }
    off[SEC_COUNT] = o;
}

/* ---------------------------------------------------------------- where */

bool l8tok__cache_enabled(void)
{
    const char *env = secure_getenv("LLAMA8_TOKENIZER_CACHE");
    return !env || (*env && strcmp(env, "off") != 0 && strcmp(env, "0") != 0);
}

static int cache_dir(char **out)
{
    const char *env = secure_getenv("LLAMA8_TOKENIZER_CACHE");
    char *dir = NULL;
    if (!l8tok__cache_enabled())
        return -ENOENT;
    if (env) {
        dir = strdup(env);
    } else {
        /* XDG: a relative XDG_CACHE_HOME is invalid and ignored. */
        const char *xdg = secure_getenv("XDG_CACHE_HOME");
        const char *home = secure_getenv("HOME");
        if (xdg && xdg[0] == '/') {
            if (asprintf(&dir, "%s/llama8", xdg) < 0)
                dir = NULL;
        } else if (home && home[0] == '/') {
            if (asprintf(&dir, "%s/.cache/llama8", home) < 0)
                dir = NULL;
        } else {
            return -ENOENT;
        }
    }
    if (!dir)
        return -ENOMEM;
    *out = dir;
    return 0;
}

int l8tok__cache_path(uint64_t src_size, uint64_t src_hash, char **path)
{
    char *dir;
    int rc = cache_dir(&dir);
    if (rc < 0)
        return rc;
    char *p;
    rc = asprintf(&p, "%s/tokenizer-%016" PRIx64 "-%" PRIx64 ".bin", dir, src_hash, src_size);
    free(dir);
    if (rc < 0)
        return -ENOMEM;
    *path = p;
    return 0;
}

/* mkdir -p, each new component CACHE_DIR_MODE. */
static int make_dirs(char *dir)
{
    for (char *s = dir + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        int rc = mkdir(dir, CACHE_DIR_MODE) < 0 && errno != EEXIST ? -errno : 0;
        *s = c;
        if (rc < 0)
            return rc;
        if (!c)
            return 0;
    }
}

/* ---------------------------------------------------------------- load */

/* The tables of v (pointing into a checked image) hold together: every lookup, decode and
 * BPE step stays inside the arrays and every probe sequence ends. */
static bool tables_valid(const l8tok *v, const struct l8tok_cache_header *h, const char *pattern)
{
    if (v->n_ids == 0 || v->n_ids > UINT32_MAX / 2 || (v->vocab_mask & (v->vocab_mask + 1)) ||
        (v->merge_mask & (v->merge_mask + 1)) || (v->added_mask & (v->added_mask + 1)) ||
        v->n_added > v->added_mask || v->n_added_lens > MAX_ADDED_LENS || h->ignore_merges > 1 ||
        h->reserved || strlen(pattern) != h->pattern_len)
        return false;
    for (uint32_t id = 0; id < v->n_ids; id++) {
        if (v->tok_kind[id] > TOK_SPECIAL)
            return false;
        if (v->tok_len[id] == NO_LEN) {
            if (v->tok_kind[id] != TOK_NONE)
                return false;
        } else if ((uint64_t)v->tok_off[id] + v->tok_len[id] > v->pool_len) {
            return false;
        }
    }
    /* A value in a bytes table is (id or added index) + 1; its key's bytes are the token's. */
    bool empty = false;
    for (uint32_t i = 0; i <= v->vocab_mask; i++) {
        uint32_t x = v->vocab[i].id_plus1;
        if (!x)
            empty = true;
        else if (x > v->n_ids || v->tok_len[x - 1] == NO_LEN)
            return false;
    }
    if (!empty)
        return false;
    for (uint32_t i = 0; i < v->n_added; i++)
        if (v->added[i].id >= v->n_ids || v->tok_len[v->added[i].id] == NO_LEN ||
            v->added[i].special > 1)
            return false;
    empty = false;
    for (uint32_t i = 0; i <= v->added_mask; i++) {
        uint32_t x = v->added_hash[i].id_plus1;
        if (!x)
            empty = true;
        else if (x > v->n_added)
            return false;
    }
    if (!empty)
        return false;
    empty = false;
    for (uint32_t i = 0; i <= v->merge_mask; i++) {
        const struct merge_slot *m = &v->merges[i];
        if (m->key == UINT64_MAX)
            empty = true;
        else if ((m->key >> 32) >= v->n_ids || (uint32_t)m->key >= v->n_ids || m->id >= v->n_ids)
            return false;
    }
    if (!empty)
        return false;
    for (int b = 0; b < 256; b++)
        if (v->byte_id[b] >= v->n_ids || v->tok_len[v->byte_id[b]] != 1)
            return false;
    for (size_t k = 0; k < v->n_added_lens; k++)
        if (v->added_lens[k] == 0)
            return false;
    return true;
}

/* The buffer a cache image is read into.  Faulting in 15 MB of fresh 4 KB pages (about
 * 3700 faults, each zeroing a page) was a third of a warm `llama8ctl tokenize` run; in 2 MB
 * pages where the kernel allows them (transparent hugepages "madvise" or "always") it is a
 * few dozen faults: 39 -> 25 ms a run here.  Without hugepages it is an ordinary
 * allocation.  Released with free(). */
#define IMAGE_ALIGN (2u << 20)
static void *image_alloc(size_t size)
{
    size_t len = (size + IMAGE_ALIGN - 1) & ~(size_t)(IMAGE_ALIGN - 1);
    void *p = aligned_alloc(IMAGE_ALIGN, len);
    if (p)
        (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: failure changes nothing */
    return p;
}

static int read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        got += (size_t)r;
    }
    return 0;
}

int l8tok__cache_load(l8tok *t, uint64_t src_size, uint64_t src_hash, char **pattern)
{
    char *path = NULL;
    int rc = l8tok__cache_path(src_size, src_hash, &path);
    if (rc < 0)
        return rc;
    uint64_t fsize;
    int fd = l8_open_regular(path, MAX_CACHE_FILE, &fsize, NULL, 0);
    free(path);
    if (fd < 0)
        return fd;
    uint8_t *image = NULL;
    if (fsize < sizeof(struct l8tok_cache_header)) {
        rc = -EINVAL;
        goto err;
    }
    size_t size = (size_t)fsize;
    /* The buffer's alignment, the header's 96 bytes and the 8-byte section alignment keep
     * every table aligned for its type. */
    image = image_alloc(size);
    if (!image) {
        rc = -ENOMEM;
        goto err;
    }
    if ((rc = read_all(fd, image, size)) < 0)
        goto err;
    /* Used now: the mtime is what prune_stale() goes by (atime is not kept everywhere). */
    futimens(fd, NULL);
    close(fd);
    fd = -1;

    struct l8tok_cache_header h;
    memcpy(&h, image, sizeof(h));
    const uint8_t *pay = image + sizeof(h);
    uint64_t off[SEC_COUNT + 1];
    rc = -EINVAL;
    if (memcmp(h.magic, L8TOK_CACHE_MAGIC, sizeof(h.magic)) != 0 ||
        h.version != L8TOK_CACHE_VERSION || h.header_size != sizeof(h) ||
        h.byte_order != L8TOK_CACHE_BYTE_ORDER || h.src_size != src_size ||
        h.src_hash != src_hash || h.payload_size != size - sizeof(h))
        goto err;
    l8tok__cache_layout(&h, off);
    if (off[SEC_COUNT] != h.payload_size || l8tok__hash(pay, h.payload_size) != h.payload_hash)
        goto err;
    const char *pat = (const char *)pay + off[SEC_PATTERN];
    if (pat[h.pattern_len] != 0)
        goto err;

    /* A view of the image; copied into t only once it is known to be sound. */
    l8tok v = {
        .n_ids = h.n_ids,
        .tok_off = (uint32_t *)(pay + off[SEC_TOK_OFF]),
        .tok_len = (uint32_t *)(pay + off[SEC_TOK_LEN]),
        .tok_kind = (uint8_t *)(pay + off[SEC_TOK_KIND]),
        .pool = (char *)(pay + off[SEC_POOL]),
        .pool_len = h.pool_len,
        .pool_cap = h.pool_len,
        .vocab = (struct vocab_slot *)(pay + off[SEC_VOCAB]),
        .vocab_mask = h.vocab_mask,
        .merges = (struct merge_slot *)(pay + off[SEC_MERGES]),
        .merge_mask = h.merge_mask,
        .ignore_merges = h.ignore_merges != 0,
        .added = (struct added_token *)(pay + off[SEC_ADDED]),
        .n_added = h.n_added,
        .added_hash = (struct vocab_slot *)(pay + off[SEC_ADDED_HASH]),
        .added_mask = h.added_mask,
        .n_added_lens = h.n_added_lens,
    };
    memcpy(v.byte_id, pay + off[SEC_BYTE_ID], sizeof(v.byte_id));
    /* bools: any byte other than 0 or 1 would be undefined behaviour once read as one */
    for (int b = 0; b < 256; b++)
        if (pay[off[SEC_ADDED_FIRST] + b] > 1)
            goto err;
    memcpy(v.added_first, pay + off[SEC_ADDED_FIRST], sizeof(v.added_first));
    memcpy(v.added_lens, pay + off[SEC_ADDED_LENS], sizeof(v.added_lens));
    if (!tables_valid(&v, &h, pat))
        goto err;
    char *p = strdup(pat);
    if (!p) {
        rc = -ENOMEM;
        goto err;
    }

    t->n_ids = v.n_ids;
    t->tok_off = v.tok_off;
    t->tok_len = v.tok_len;
    t->tok_kind = v.tok_kind;
    t->pool = v.pool;
    t->pool_len = v.pool_len;
    t->pool_cap = v.pool_cap;
    t->vocab = v.vocab;
    t->vocab_mask = v.vocab_mask;
    t->merges = v.merges;
    t->merge_mask = v.merge_mask;
    memcpy(t->byte_id, v.byte_id, sizeof(t->byte_id));
    t->ignore_merges = v.ignore_merges;
    t->added = v.added;
    t->n_added = v.n_added;
    t->added_hash = v.added_hash;
    t->added_mask = v.added_mask;
    memcpy(t->added_first, v.added_first, sizeof(t->added_first));
    memcpy(t->added_lens, v.added_lens, sizeof(t->added_lens));
    t->n_added_lens = v.n_added_lens;
    t->image = image;
    *pattern = p;
    return 0;
err:
    free(image);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---------------------------------------------------------------- store */

/* Cache files not used for CACHE_KEEP_DAYS (a tokenizer no model uses any more, ~15 MB
 * each) and temporaries that old (a writer that died) are deleted when a new file is
 * written, the only time the directory grows. */
#define CACHE_KEEP_DAYS 30

static void prune_stale(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    const char *keep_name = strrchr(keep, '/') ? strrchr(keep, '/') + 1 : keep;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (strncmp(e->d_name, "tokenizer-", 10) || !strstr(e->d_name, ".bin") ||
            !strcmp(e->d_name, keep_name))
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > (time_t)CACHE_KEEP_DAYS * 86400)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

static int write_all(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

int l8tok__cache_store(const l8tok *t, uint64_t src_size, uint64_t src_hash, const char *pattern)
{
    size_t pattern_len = strlen(pattern);
    if (t->pool_len > UINT32_MAX || t->n_added > UINT32_MAX || pattern_len >= UINT32_MAX)
        return -EOVERFLOW;
    char *path = NULL, *tmp = NULL;
    uint8_t *image = NULL;
    int fd = -1;
    int rc = l8tok__cache_path(src_size, src_hash, &path);
    if (rc < 0)
        return rc;
    char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        *slash = 0;
        rc = make_dirs(path);
        *slash = '/';
        if (rc < 0)
            goto err;
    }
    if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
        tmp = NULL;
        rc = -ENOMEM;
        goto err;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        free(tmp);
        tmp = NULL; /* nothing was created */
        goto err;
    }

    struct l8tok_cache_header h = {
        .version = L8TOK_CACHE_VERSION,
        .header_size = sizeof(h),
        .byte_order = L8TOK_CACHE_BYTE_ORDER,
        .src_size = src_size,
        .src_hash = src_hash,
        .n_ids = t->n_ids,
        .pool_len = (uint32_t)t->pool_len,
        .vocab_mask = t->vocab_mask,
        .merge_mask = t->merge_mask,
        .n_added = (uint32_t)t->n_added,
        .added_mask = t->added_mask,
        .n_added_lens = (uint32_t)t->n_added_lens,
        .pattern_len = (uint32_t)pattern_len,
        .ignore_merges = t->ignore_merges,
    };
    memcpy(h.magic, L8TOK_CACHE_MAGIC, sizeof(h.magic));
    uint64_t off[SEC_COUNT + 1];
    l8tok__cache_layout(&h, off);
    h.payload_size = off[SEC_COUNT];
    /* calloc: the padding between sections is zero, so the same tables give the same file */
    image = calloc(1, sizeof(h) + h.payload_size);
    if (!image) {
        rc = -ENOMEM;
        goto err;
    }
    uint8_t *pay = image + sizeof(h);
    memcpy(pay + off[SEC_TOK_OFF], t->tok_off, (size_t)t->n_ids * sizeof(uint32_t));
    memcpy(pay + off[SEC_TOK_LEN], t->tok_len, (size_t)t->n_ids * sizeof(uint32_t));
    memcpy(pay + off[SEC_TOK_KIND], t->tok_kind, t->n_ids);
    if (t->pool_len)
        memcpy(pay + off[SEC_POOL], t->pool, t->pool_len);
    memcpy(pay + off[SEC_VOCAB], t->vocab, ((size_t)t->vocab_mask + 1) * sizeof(*t->vocab));
    memcpy(pay + off[SEC_MERGES], t->merges, ((size_t)t->merge_mask + 1) * sizeof(*t->merges));
    if (t->n_added)
        memcpy(pay + off[SEC_ADDED], t->added, t->n_added * sizeof(*t->added));
    memcpy(pay + off[SEC_ADDED_HASH], t->added_hash,
           ((size_t)t->added_mask + 1) * sizeof(*t->added_hash));
    memcpy(pay + off[SEC_BYTE_ID], t->byte_id, sizeof(t->byte_id));
    memcpy(pay + off[SEC_ADDED_FIRST], t->added_first, sizeof(t->added_first));
    memcpy(pay + off[SEC_ADDED_LENS], t->added_lens, sizeof(t->added_lens));
    memcpy(pay + off[SEC_PATTERN], pattern, pattern_len + 1);
    h.payload_hash = l8tok__hash(pay, h.payload_size);
    memcpy(image, &h, sizeof(h));

    if ((rc = write_all(fd, image, sizeof(h) + h.payload_size)) < 0)
        goto err;
    int cfd = fd;
    fd = -1;
    if (close(cfd) < 0 || rename(tmp, path) < 0) {
        rc = -errno;
        goto err;
    }
    char *dir = NULL;
    if (cache_dir(&dir) == 0)
        prune_stale(dir, path);
    free(dir);
    free(tmp);
    free(path);
    free(image);
    return 0;
err:
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    free(path);
    free(image);
    return rc;
}
