/* tokenizer.c: Hugging Face byte-level BPE (tokenizer.json) for Llama 3.x.
 *
 * Everything is kept in raw bytes: at load time each vocabulary string is mapped back from
 * GPT-2's byte-level alphabet (bytes_to_unicode) to the bytes it stands for, so encoding
 * looks pre-tokens up without mapping them and decoding is a table copy.
 *
 * encode = UTF-8 check -> split on added tokens (leftmost-longest) -> Split regex (PCRE2,
 * UTF + UCP, JIT) with "Isolated" behaviour -> per pre-token: whole-word vocabulary hit
 * ("ignore_merges"), else the word cache, else BPE by merge rank.  The BPE is Hugging
 * Face's Word::merge_all: a min-heap of (rank, position) candidates over a linked list of
 * symbols, stale candidates skipped, so ties between equal ranks go left to right exactly
 * as in the reference.
 */
#include "tokenizer_internal.h"
#include "daemon/model/read_file.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

/* GPT-2's byte-level alphabet: 188 printable bytes map to their own code point, the other
 * 68 to 256..323. */
#define BYTE_LEVEL_CPS 324
/* Word cache: entries, and bytes of keys and ids it may hold before it is cleared.  Words
 * longer than WORD_CACHE_MAX_LEN bytes are not cached (as the reference's 256). */
#define WORD_CACHE_SLOTS (1u << 16)
#define WORD_CACHE_MAX_ENTRIES (WORD_CACHE_SLOTS / 2)
#define WORD_CACHE_ARENA (4u << 20)
#define WORD_CACHE_MAX_LEN 256
/* BPE scratch on the stack up to this many bytes per word; longer words allocate. */
#define BPE_STACK_SYMS 128

/* The Llama 3 pre-tokenizer regex, as tokenizer.json has it; the ASCII fast path
 * (fast_piece) is this regex and is used only when the file's regex is exactly this. */
static const char LLAMA3_SPLIT_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct cache_slot {
    uint32_t tag;     /* high half of the key's hash, | 1; 0: empty */
    uint32_t key_off; /* into key_arena */
    uint32_t ids_off; /* into ids_arena */
    uint16_t key_len; /* <= WORD_CACHE_MAX_LEN */
    uint16_t n_ids;   /* <= key_len */
};
_Static_assert(sizeof(struct cache_slot) == 16, "four slots a cache line");
_Static_assert(WORD_CACHE_MAX_LEN <= UINT16_MAX, "key_len and n_ids are 16 bits");

struct word_cache {
    struct cache_slot *slots; /* (WORD_CACHE_SLOTS) */
    uint32_t n_entries;
    uint8_t *key_arena; /* (WORD_CACHE_ARENA) */
    uint32_t key_used;
    uint32_t *ids_arena; /* (WORD_CACHE_ARENA / 4) */
    uint32_t ids_used;
};

/* ---------------------------------------------------------------- small helpers */

/* l8_mix64 (proto/l8_hash.h), hash_bytes and slot_tag place the entries of the tables
 * that the cache file holds as an image: changing them needs a new L8TOK_CACHE_VERSION. */

/* The first min(n, 8) bytes of p, zero-padded; never reads past p + n. */
static inline uint64_t load_prefix(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    if (n >= 8) {
        memcpy(&v, p, 8);
        return v;
    }
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Hash of (p, n) given its prefix (load_prefix(p, n)). */
static inline uint64_t hash_bytes_pre(const uint8_t *p, size_t n, uint64_t prefix)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    if (n <= 8)
        return l8_mix64(h ^ prefix);
    h = (h ^ prefix) * 0xff51afd7ed558ccdull;
    p += 8;
    n -= 8;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h ^= h >> 32;
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        p += 8;
        n -= 8;
    }
    return l8_mix64(h ^ load_prefix(p, n));
}

static inline uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    return hash_bytes_pre(p, n, load_prefix(p, n));
}

static uint32_t pow2_at_least(size_t n)
{
    uint32_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

int l8tok_ids_push(l8tok_ids *v, uint32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        uint32_t *ids = realloc(v->ids, cap * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

static int ids_reserve(l8tok_ids *v, size_t more)
{
    if (v->cap - v->n >= more)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap - v->n < more)
        cap *= 2;
    uint32_t *ids = realloc(v->ids, cap * sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    v->ids = ids;
    v->cap = cap;
    return 0;
}

void l8tok_ids_free(l8tok_ids *v)
{
    if (!v)
        return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the well-formed UTF-8 sequence at s[0..n), 0 if ill-formed or truncated; for
 * an ill-formed one *bad is how many bytes make its maximal ill-formed subpart and
 * *truncated says whether it merely ran out of input. */
static size_t utf8_seq(const uint8_t *s, size_t n, size_t *bad, bool *truncated)
{
    uint8_t c = s[0];
    *truncated = false;
    if (c < 0x80)
        return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        if (k >= n) {
            *bad = k;
            *truncated = true;
            return 0;
        }
        if (s[k] < lo || s[k] > hi) {
            *bad = k;
            return 0;
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return need + 1;
}

int l8tok_utf8_check(const char *str, size_t len, size_t *bad_offset)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        /* Most text is ASCII: skip it eight bytes at a time. */
        while (i + 8 <= len) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= len)
            break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        bool truncated;
        size_t k = utf8_seq(s + i, len - i, &bad, &truncated);
        if (!k) {
            if (bad_offset)
                *bad_offset = i;
            return -EILSEQ;
        }
        i += k;
    }
    return 0;
}

/* Appends the lossy decoding of in[0..n) to out (which has room for 3 * n bytes): valid
 * characters copied, each maximal ill-formed subpart as U+FFFD.  Unless final, a
 * truncated character at the end is not consumed; returns how many bytes were. */
static size_t utf8_lossy(const uint8_t *in, size_t n, bool final, char *out, size_t *out_len)
{
    static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};
    size_t i = 0, o = *out_len;
    while (i < n) {
        size_t bad;
        bool truncated;
        size_t k = utf8_seq(in + i, n - i, &bad, &truncated);
        if (k) {
            memcpy(out + o, in + i, k);
            o += k;
            i += k;
            continue;
        }
        if (truncated && !final)
            break;
        memcpy(out + o, fffd, 3);
        o += 3;
        i += bad;
    }
    *out_len = o;
    return i;
}

/* ---------------------------------------------------------------- tables */

static int pool_add(l8tok *t, const void *bytes, size_t len, uint32_t *off)
{
    if (len > UINT32_MAX / 2 || t->pool_len + len > UINT32_MAX)
        return -EINVAL;
    if (t->pool_len + len > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : (1u << 20);
        while (cap < t->pool_len + len)
            cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p)
            return -ENOMEM;
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, bytes, len);
    *off = (uint32_t)t->pool_len;
    t->pool_len += len;
    return 0;
}

static inline const uint8_t *tok_bytes(const l8tok *t, uint32_t id)
{
    return (const uint8_t *)t->pool + t->tok_off[id];
}

static inline uint32_t slot_tag(uint64_t h, size_t n)
{
    return ((uint32_t)h & ~0xffu) | (uint32_t)(n < 255 ? n : 255);
}

/* Find (s, n) in a bytes -> id table; the value (id + 1, or index + 1 into added for
 * added_hash), 0 if absent.  pre = load_prefix(s, n), h = its hash. */
static inline uint32_t bytes_find_pre(const l8tok *t, const struct vocab_slot *tab, uint32_t mask,
                                      const uint8_t *s, size_t n, uint64_t pre, uint64_t h)
{
    uint32_t tag = slot_tag(h, n);
    for (uint32_t i = (uint32_t)(h >> 32) & mask;; i = (i + 1) & mask) {
        const struct vocab_slot *sl = &tab[i];
        if (!sl->id_plus1)
            return 0;
        if (sl->tag != tag || sl->prefix != pre)
            continue;
        if (n <= 8)
            return sl->id_plus1;
        uint32_t id = sl->id_plus1 - 1;
        if (tab == t->added_hash)
            id = t->added[id].id;
        if (t->tok_len[id] == n && memcmp(tok_bytes(t, id) + 8, s + 8, n - 8) == 0)
            return sl->id_plus1;
    }
}

static inline uint32_t bytes_find(const l8tok *t, const struct vocab_slot *tab, uint32_t mask,
                                  const uint8_t *s, size_t n)
{
    uint64_t pre = load_prefix(s, n);
    return bytes_find_pre(t, tab, mask, s, n, pre, hash_bytes_pre(s, n, pre));
}

static inline bool vocab_find(const l8tok *t, const uint8_t *s, size_t n, uint32_t *id)
{
    uint32_t v = bytes_find(t, t->vocab, t->vocab_mask, s, n);
    if (!v)
        return false;
    *id = v - 1;
    return true;
}

/* Insert id (already in the pool) into a bytes table; false if the bytes are there. */
static bool bytes_insert(l8tok *t, struct vocab_slot *tab, uint32_t mask, uint32_t value_plus1,
                         uint32_t id)
{
    const uint8_t *s = tok_bytes(t, id);
    size_t n = t->tok_len[id];
    uint64_t pre = load_prefix(s, n);
    uint64_t h = hash_bytes_pre(s, n, pre);
    if (bytes_find_pre(t, tab, mask, s, n, pre, h))
        return false;
    uint32_t i = (uint32_t)(h >> 32) & mask;
    while (tab[i].id_plus1)
        i = (i + 1) & mask;
    tab[i] = (struct vocab_slot){.prefix = pre, .tag = slot_tag(h, n), .id_plus1 = value_plus1};
    return true;
}

static inline uint64_t merge_key(uint32_t a, uint32_t b)
{
    return ((uint64_t)a << 32) | b;
}

static inline const struct merge_slot *merge_find(const l8tok *t, uint32_t a, uint32_t b)
{
    uint64_t key = merge_key(a, b);
    for (uint32_t i = (uint32_t)l8_mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct merge_slot *sl = &t->merges[i];
        if (sl->key == key)
            return sl;
        if (sl->key == UINT64_MAX)
            return NULL;
    }
}

/* A later duplicate of a merge replaces the earlier one, as the reference's HashMap
 * collect does. */
static void merge_insert(l8tok *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
    uint64_t key = merge_key(a, b);
    uint32_t i = (uint32_t)l8_mix64(key) & t->merge_mask;
    while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key)
        i = (i + 1) & t->merge_mask;
    t->merges[i] = (struct merge_slot){.key = key, .rank = rank, .id = id};
}

/* ---------------------------------------------------------------- loading */

static bool byte_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

static void byte_level_inverse(int16_t cp_to_byte[BYTE_LEVEL_CPS])
{
    for (int i = 0; i < BYTE_LEVEL_CPS; i++)
        cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        if (byte_printable(b))
            cp_to_byte[b] = (int16_t)b;
        else
            cp_to_byte[256 + extra++] = (int16_t)b;
    }
}

/* Byte-level string (UTF-8, NUL-terminated) -> raw bytes in out (room for strlen bytes). */
static int byte_level_decode(const int16_t cp_to_byte[BYTE_LEVEL_CPS], const char *str,
                             uint8_t *out, size_t *out_len)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t n = strlen(str), i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i++];
        } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < n) {
            cp = ((uint32_t)(s[i] & 0x1f) << 6) | (s[i + 1] & 0x3f);
            i += 2;
        } else {
            return -EINVAL; /* the alphabet is all below U+0800 */
        }
        if (cp >= BYTE_LEVEL_CPS || cp_to_byte[cp] < 0)
            return -EINVAL;
        out[o++] = (uint8_t)cp_to_byte[cp];
    }
    *out_len = o;
    return 0;
}

static int read_file(const char *path, char **buf, size_t *len)
{
    return l8_read_file(path, L8TOK_MAX_FILE, buf, len, NULL, 0);
}

char *l8tok__resolve_path(const char *path, const char *name)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *p;
        if (asprintf(&p, "%s/%s", path, name) < 0)
            return NULL;
        return p;
    }
    return strdup(path);
}

/* Parse len bytes of buf (buf[len] == 0) with json-c; -EINVAL if they are not one JSON
 * value. */
static int json_parse_buf(const char *buf, size_t len, json_object **out)
{
    if (len > INT_MAX)
        return -EINVAL;
    json_tokener *jt = json_tokener_new();
    if (!jt)
        return -ENOMEM;
    json_object *root = json_tokener_parse_ex(jt, buf, (int)len);
    bool ok = root && json_tokener_get_error(jt) == json_tokener_success &&
              (size_t)json_tokener_get_parse_end(jt) == len;
    json_tokener_free(jt);
    if (!ok) {
        json_object_put(root);
        return -EINVAL;
    }
    *out = root;
    return 0;
}

int l8tok__json_load(const char *path, json_object **out)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc < 0)
        return rc;
    rc = json_parse_buf(buf, len, out);
    free(buf);
    return rc;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object) ||
        !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

static bool is_null_or_false(json_object *v)
{
    return !v || json_object_is_type(v, json_type_null) ||
           (json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v));
}

static bool str_is(json_object *v, const char *s)
{
    return v && json_object_is_type(v, json_type_string) &&
           strcmp(json_object_get_string(v), s) == 0;
}

/* The Split regex of the Llama 3 pre-tokenizer: Sequence[Split(Regex, Isolated, not
 * inverted), ByteLevel(no prefix space, no regex of its own)].  NULL if the shape is
 * anything else. */
static const char *pretok_regex(json_object *pre)
{
    if (!str_is(get(pre, "type"), "Sequence"))
        return NULL;
    json_object *list = get(pre, "pretokenizers");
    if (!list || !json_object_is_type(list, json_type_array) ||
        json_object_array_length(list) != 2)
        return NULL;
    json_object *split = json_object_array_get_idx(list, 0);
    json_object *bl = json_object_array_get_idx(list, 1);
    if (!str_is(get(split, "type"), "Split") || !str_is(get(split, "behavior"), "Isolated") ||
        !is_null_or_false(get(split, "invert")))
        return NULL;
    if (!str_is(get(bl, "type"), "ByteLevel") || !is_null_or_false(get(bl, "add_prefix_space")) ||
        !is_null_or_false(get(bl, "use_regex")))
        return NULL;
    json_object *re = get(get(split, "pattern"), "Regex");
    if (!re || !json_object_is_type(re, json_type_string))
        return NULL;
    return json_object_get_string(re);
}

static int json_id(json_object *v, uint32_t *id)
{
    if (!v || !json_object_is_type(v, json_type_int))
        return -EINVAL;
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x >= (int64_t)(UINT32_MAX / 2))
        return -EINVAL;
    *id = (uint32_t)x;
    return 0;
}

static int load_vocab(l8tok *t, json_object *vocab, const int16_t *cp_to_byte)
{
    size_t n = (size_t)json_object_object_length(vocab);
    uint8_t tmp[1024];
    t->vocab_mask = pow2_at_least(n * 2) - 1;
    t->vocab = calloc((size_t)t->vocab_mask + 1, sizeof(*t->vocab));
    if (!t->vocab)
        return -ENOMEM;
    json_object_object_foreach(vocab, key, val) {
        uint32_t id;
        size_t len;
        if (json_id(val, &id) < 0 || id >= t->n_ids || strlen(key) > sizeof(tmp) ||
            byte_level_decode(cp_to_byte, key, tmp, &len) < 0)
            return -EINVAL;
        if (t->tok_len[id] != NO_LEN)
            return -EINVAL; /* two strings for one id */
        int rc = pool_add(t, tmp, len, &t->tok_off[id]);
        if (rc < 0)
            return rc;
        t->tok_len[id] = (uint32_t)len;
        t->tok_kind[id] = TOK_VOCAB;
        if (!bytes_insert(t, t->vocab, t->vocab_mask, id + 1, id))
            return -EINVAL; /* two ids for one string */
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (!vocab_find(t, &c, 1, &t->byte_id[b]))
            return -ENOTSUP; /* every byte must be a token: no byte fallback, no unk */
    }
    return 0;
}

static int merge_side(l8tok *t, const int16_t *cp_to_byte, const char *s, size_t n,
                      uint8_t *raw, size_t *raw_len, uint32_t *id)
{
    char tmp[1024];
    if (n >= sizeof(tmp))
        return -EINVAL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    if (byte_level_decode(cp_to_byte, tmp, raw, raw_len) < 0 ||
        !vocab_find(t, raw, *raw_len, id))
        return -EINVAL;
    return 0;
}

static int load_merges(l8tok *t, json_object *merges, const int16_t *cp_to_byte)
{
    size_t n = json_object_array_length(merges);
    t->merge_mask = pow2_at_least(n + n / 2 + 1) - 1;
    t->merges = malloc(((size_t)t->merge_mask + 1) * sizeof(*t->merges));
    if (!t->merges)
        return -ENOMEM;
    for (size_t i = 0; i <= t->merge_mask; i++)
        t->merges[i].key = UINT64_MAX;
    uint8_t raw[2048];
    for (size_t r = 0; r < n; r++) {
        json_object *m = json_object_array_get_idx(merges, r);
        const char *a, *b;
        size_t alen, blen;
        if (json_object_is_type(m, json_type_string)) {
            /* "a b": the byte-level alphabet has no space, so exactly one separates. */
            a = json_object_get_string(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return -EINVAL;
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
            json_object *ja = json_object_array_get_idx(m, 0);
            json_object *jb = json_object_array_get_idx(m, 1);
            if (!json_object_is_type(ja, json_type_string) ||
                !json_object_is_type(jb, json_type_string))
                return -EINVAL;
            a = json_object_get_string(ja);
            alen = (size_t)json_object_get_string_len(ja);
            b = json_object_get_string(jb);
            blen = (size_t)json_object_get_string_len(jb);
        } else {
            return -EINVAL;
        }
        size_t la, lb;
        uint32_t ida, idb, idm;
        if (merge_side(t, cp_to_byte, a, alen, raw, &la, &ida) < 0 ||
            merge_side(t, cp_to_byte, b, blen, raw + 1024, &lb, &idb) < 0)
            return -EINVAL;
        memmove(raw + la, raw + 1024, lb);
        if (!vocab_find(t, raw, la + lb, &idm))
            return -EINVAL; /* the merged token must be in the vocabulary */
        merge_insert(t, ida, idb, (uint32_t)r, idm);
    }
    return 0;
}

static int load_added(l8tok *t, json_object *added)
{
    size_t n = added ? json_object_array_length(added) : 0;
    t->added = calloc(n ? n : 1, sizeof(*t->added));
    t->added_mask = pow2_at_least(n * 2) - 1;
    t->added_hash = calloc((size_t)t->added_mask + 1, sizeof(*t->added_hash));
    if (!t->added || !t->added_hash)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(added, i);
        json_object *content = get(a, "content");
        uint32_t id;
        if (json_id(get(a, "id"), &id) < 0 || id >= t->n_ids || !content ||
            !json_object_is_type(content, json_type_string))
            return -EINVAL;
        if (!is_null_or_false(get(a, "lstrip")) || !is_null_or_false(get(a, "rstrip")) ||
            !is_null_or_false(get(a, "single_word")))
            return -ENOTSUP;
        const char *s = json_object_get_string(content);
        size_t len = (size_t)json_object_get_string_len(content);
        if (!len || l8tok_utf8_check(s, len, NULL) < 0)
            return -EINVAL;
        bool special = !is_null_or_false(get(a, "special"));
        if (t->tok_len[id] != NO_LEN) {
            /* An added token that is also a vocabulary entry must say the same thing. */
            if (t->tok_len[id] != len || memcmp(tok_bytes(t, id), s, len) != 0)
                return -EINVAL;
        } else {
            int rc = pool_add(t, s, len, &t->tok_off[id]);
            if (rc < 0)
                return rc;
            t->tok_len[id] = (uint32_t)len;
        }
        t->tok_kind[id] = special ? TOK_SPECIAL : TOK_ADDED;
        t->added[t->n_added] = (struct added_token){.id = id, .special = special};
        if (!bytes_insert(t, t->added_hash, t->added_mask, (uint32_t)t->n_added + 1, id))
            return -EINVAL;
        t->n_added++;
        t->added_first[(uint8_t)s[0]] = true;
        size_t k = 0;
        while (k < t->n_added_lens && t->added_lens[k] != len)
            k++;
        if (k == t->n_added_lens) {
            if (t->n_added_lens == sizeof(t->added_lens) / sizeof(t->added_lens[0]))
                return -ENOTSUP;
            /* keep longest first: leftmost-longest matching tries them in this order */
            size_t j = t->n_added_lens++;
            while (j > 0 && t->added_lens[j - 1] < len) {
                t->added_lens[j] = t->added_lens[j - 1];
                j--;
            }
            t->added_lens[j] = (uint32_t)len;
        }
    }
    return 0;
}

/* Largest id in the vocabulary and the added tokens, + 1. */
static int count_ids(json_object *vocab, json_object *added, uint32_t *n_ids)
{
    uint32_t max = 0;
    bool any = false;
    json_object_object_foreach(vocab, key, val) {
        (void)key;
        uint32_t id;
        if (json_id(val, &id) < 0)
            return -EINVAL;
        if (!any || id > max)
            max = id;
        any = true;
    }
    for (size_t i = 0; added && i < json_object_array_length(added); i++) {
        uint32_t id;
        if (json_id(get(json_object_array_get_idx(added, i), "id"), &id) < 0)
            return -EINVAL;
        if (!any || id > max)
            max = id;
        any = true;
    }
    if (!any)
        return -EINVAL;
    *n_ids = max + 1;
    return 0;
}

static int compile_regex(l8tok *t, const char *pattern)
{
    int errcode;
    PCRE2_SIZE erroff;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &errcode, &erroff, NULL);
    if (!t->re)
        return -EINVAL;
    /* Without JIT (a PCRE2 built without it) matching is slower but the same. */
    t->re_jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    t->llama3_regex = strcmp(pattern, LLAMA3_SPLIT_REGEX) == 0;
    return 0;
}

static int cache_new(struct word_cache **out)
{
    struct word_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->slots = calloc(WORD_CACHE_SLOTS, sizeof(*c->slots));
    c->key_arena = malloc(WORD_CACHE_ARENA);
    c->ids_arena = malloc(WORD_CACHE_ARENA);
    if (!c->slots || !c->key_arena || !c->ids_arena) {
        free(c->slots);
        free(c->key_arena);
        free(c->ids_arena);
        free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

static void cache_free(struct word_cache *c)
{
    if (!c)
        return;
    free(c->slots);
    free(c->key_arena);
    free(c->ids_arena);
    free(c);
}

void l8tok_free(l8tok *t)
{
    if (!t)
        return;
    if (t->image) {
        free(t->image);
    } else {
        free(t->tok_off);
        free(t->tok_len);
        free(t->tok_kind);
        free(t->pool);
        free(t->vocab);
        free(t->merges);
        free(t->added);
        free(t->added_hash);
    }
    pcre2_code_free(t->re);
    cache_free(t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

/* Build t's tables from a parsed tokenizer.json; *pattern (the Split regex) is borrowed
 * from root. */
static int load_json(l8tok *t, json_object *root, const char **pattern)
{
    json_object *model = get(root, "model");
    json_object *vocab = get(model, "vocab");
    json_object *merges = get(model, "merges");
    json_object *added = get(root, "added_tokens");
    if (!vocab || !json_object_is_type(vocab, json_type_object) || !merges ||
        !json_object_is_type(merges, json_type_array) ||
        (added && !json_object_is_type(added, json_type_null) &&
         !json_object_is_type(added, json_type_array)))
        return -EINVAL;
    if (added && json_object_is_type(added, json_type_null))
        added = NULL;
    json_object *mtype = get(model, "type");
    json_object *cont = get(model, "continuing_subword_prefix");
    json_object *suffix = get(model, "end_of_word_suffix");
    if ((mtype && !str_is(mtype, "BPE")) || !is_null_or_false(get(model, "dropout")) ||
        !is_null_or_false(get(model, "byte_fallback")) ||
        !(is_null_or_false(cont) || str_is(cont, "")) ||
        !(is_null_or_false(suffix) || str_is(suffix, "")) ||
        !is_null_or_false(get(root, "normalizer")))
        return -ENOTSUP;
    t->ignore_merges = !is_null_or_false(get(model, "ignore_merges"));
    *pattern = pretok_regex(get(root, "pre_tokenizer"));
    if (!*pattern)
        return -ENOTSUP;

    int rc = count_ids(vocab, added, &t->n_ids);
    if (rc < 0)
        return rc;
    t->tok_off = calloc(t->n_ids, sizeof(*t->tok_off));
    t->tok_len = malloc(t->n_ids * sizeof(*t->tok_len));
    t->tok_kind = calloc(t->n_ids, 1);
    if (!t->tok_off || !t->tok_len || !t->tok_kind)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->n_ids; i++)
        t->tok_len[i] = NO_LEN;

    int16_t cp_to_byte[BYTE_LEVEL_CPS];
    byte_level_inverse(cp_to_byte);
    if ((rc = load_vocab(t, vocab, cp_to_byte)) < 0 ||
        (rc = load_merges(t, merges, cp_to_byte)) < 0 || (rc = load_added(t, added)) < 0)
        return rc;
    return 0;
}

/* Parsing the real tokenizer.json with json-c and building the tables takes about half a
 * second, most of a short command's run; so the built tables are kept in a cache file
 * keyed by the tokenizer.json's contents (tokenizer_cache.c), and a later load reads that
 * instead (milliseconds).  The file is still read and hashed every time, so an edited
 * tokenizer.json is never answered from an old cache. */
int l8tok_load(const char *path, l8tok **out)
{
    char *file = l8tok__resolve_path(path, "tokenizer.json");
    if (!file)
        return -ENOMEM;
    char *buf = NULL;
    json_object *root = NULL;
    char *cached_pattern = NULL;
    const char *pattern = NULL;
    int rc;
    l8tok *t = calloc(1, sizeof(*t));
    if (!t) {
        rc = -ENOMEM;
        goto err;
    }
    pthread_mutex_init(&t->cache_lock, NULL);

    uint64_t src_size, src_hash;
    bool cached = l8tok__cache_enabled() && l8tok__hash_file(file, &src_size, &src_hash) == 1 &&
                  l8tok__cache_load(t, src_size, src_hash, &cached_pattern) == 0;
    bool store = false;
    if (cached) {
        pattern = cached_pattern;
    } else {
        size_t len = 0;
        if ((rc = read_file(file, &buf, &len)) < 0 || (rc = json_parse_buf(buf, len, &root)) < 0 ||
            (rc = load_json(t, root, &pattern)) < 0)
            goto err;
        /* Keyed by what was parsed, not by the hash above: the file may have changed
         * between the two reads. */
        store = len >= L8TOK_CACHE_MIN_SOURCE && l8tok__cache_enabled();
        if (store) {
            src_size = len;
            src_hash = l8tok__hash(buf, len);
        }
        free(buf);
        buf = NULL;
    }
    if ((rc = compile_regex(t, pattern)) < 0 || (rc = cache_new(&t->cache)) < 0)
        goto err;
    /* Only a tokenizer that loaded completely is cached; failing to cache is not an error. */
    if (store)
        l8tok__cache_store(t, src_size, src_hash, pattern);
    json_object_put(root);
    free(cached_pattern);
    free(file);
    *out = t;
    return 0;
err:
    free(buf);
    json_object_put(root);
    free(cached_pattern);
    free(file);
    l8tok_free(t);
    return rc;
}

bool l8tok__from_cache(const l8tok *t)
{
    return t->image != NULL;
}

/* ---------------------------------------------------------------- lookups */

uint32_t l8tok_n_ids(const l8tok *t)
{
    return t->n_ids;
}

int l8tok_token_bytes(const l8tok *t, uint32_t id, const char **bytes, size_t *len)
{
    if (id >= t->n_ids || t->tok_len[id] == NO_LEN)
        return -EINVAL;
    *bytes = t->pool + t->tok_off[id];
    *len = t->tok_len[id];
    return 0;
}

int l8tok_table(const l8tok *t, uint32_t n, uint8_t **bytes, uint32_t **off, bool **special)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n && i < t->n_ids; i++)
        total += t->tok_len[i] == NO_LEN ? 0 : t->tok_len[i];
    if (total > UINT32_MAX)
        return -EINVAL;
    uint8_t *b = malloc(total ? (size_t)total : 1);
    uint32_t *o = malloc(((size_t)n + 1) * sizeof *o);
    bool *sp = malloc(n ? n : 1);
    if (!b || !o || !sp) {
        free(b);
        free(o);
        free(sp);
        return -ENOMEM;
    }
    uint32_t len = 0;
    for (uint32_t i = 0; i < n; i++) {
        o[i] = len;
        const bool has = i < t->n_ids && t->tok_len[i] != NO_LEN;
        sp[i] = !has || l8tok_is_special(t, i);
        if (has) {
            memcpy(b + len, t->pool + t->tok_off[i], t->tok_len[i]);
            len += t->tok_len[i];
        }
    }
    o[n] = len;
    *bytes = b;
    *off = o;
    *special = sp;
    return 0;
}

int l8tok_token_id(const l8tok *t, const char *text, size_t len, uint32_t *id)
{
    const uint8_t *s = (const uint8_t *)text;
    uint32_t v = bytes_find(t, t->added_hash, t->added_mask, s, len);
    if (v) {
        *id = t->added[v - 1].id;
        return 0;
    }
    v = bytes_find(t, t->vocab, t->vocab_mask, s, len);
    if (!v)
        return -ENOENT;
    *id = v - 1;
    return 0;
}

bool l8tok_is_special(const l8tok *t, uint32_t id)
{
    return id < t->n_ids && t->tok_kind[id] == TOK_SPECIAL;
}

/* ---------------------------------------------------------------- word cache */

static bool cache_get(const struct word_cache *c, const uint8_t *s, size_t n, uint64_t h,
                      const uint32_t **ids, uint32_t *n_ids)
{
    uint32_t tag = (uint32_t)(h >> 32) | 1;
    for (uint32_t i = (uint32_t)h & (WORD_CACHE_SLOTS - 1);; i = (i + 1) & (WORD_CACHE_SLOTS - 1)) {
        const struct cache_slot *sl = &c->slots[i];
        if (!sl->tag)
            return false;
        if (sl->tag == tag && sl->key_len == n && memcmp(c->key_arena + sl->key_off, s, n) == 0) {
            *ids = c->ids_arena + sl->ids_off;
            *n_ids = sl->n_ids;
            return true;
        }
    }
}

static void cache_put(struct word_cache *c, const uint8_t *s, size_t n, uint64_t h,
                      const uint32_t *ids, size_t n_ids)
{
    if (n > WORD_CACHE_MAX_LEN)
        return;
    /* Full: start over.  Simple, and a working set larger than the cache is rare. */
    if (c->n_entries >= WORD_CACHE_MAX_ENTRIES || c->key_used + n > WORD_CACHE_ARENA ||
        (c->ids_used + n_ids) * sizeof(uint32_t) > WORD_CACHE_ARENA) {
        memset(c->slots, 0, WORD_CACHE_SLOTS * sizeof(*c->slots));
        c->n_entries = c->key_used = c->ids_used = 0;
    }
    uint32_t i = (uint32_t)h & (WORD_CACHE_SLOTS - 1);
    while (c->slots[i].tag)
        i = (i + 1) & (WORD_CACHE_SLOTS - 1);
    memcpy(c->key_arena + c->key_used, s, n);
    memcpy(c->ids_arena + c->ids_used, ids, n_ids * sizeof(uint32_t));
    c->slots[i] = (struct cache_slot){.tag = (uint32_t)(h >> 32) | 1, .key_off = c->key_used,
                                      .ids_off = c->ids_used, .key_len = (uint16_t)n,
                                      .n_ids = (uint16_t)n_ids};
    c->key_used += (uint32_t)n;
    c->ids_used += (uint32_t)n_ids;
    c->n_entries++;
}

/* ---------------------------------------------------------------- BPE */

struct bpe_sym {
    uint32_t id;
    int32_t prev, next; /* -1: none */
    bool gone;          /* merged into its left neighbour */
};

struct bpe_cand {
    uint32_t rank;
    uint32_t pos;         /* the left symbol */
    uint32_t left, right; /* the pair's ids when pushed */
    uint32_t id;          /* the token the merge makes */
};

static inline bool cand_less(const struct bpe_cand *a, const struct bpe_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct bpe_cand *h, size_t *n, struct bpe_cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct bpe_cand heap_pop(struct bpe_cand *h, size_t *n)
{
    struct bpe_cand top = h[0];
    struct bpe_cand last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= *n)
            break;
        size_t m = (l + 1 < *n && cand_less(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!cand_less(&h[m], &last))
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

static inline void push_pair(const l8tok *t, struct bpe_sym *sym, struct bpe_cand *heap,
                             size_t *nh, uint32_t pos)
{
    int32_t nx = sym[pos].next;
    if (nx < 0)
        return;
    const struct merge_slot *m = merge_find(t, sym[pos].id, sym[nx].id);
    if (m)
        heap_push(heap, nh, (struct bpe_cand){.rank = m->rank, .pos = pos, .left = sym[pos].id,
                                              .right = sym[nx].id, .id = m->id});
}

/* BPE of one pre-token of n >= 2 bytes; appends its ids to out. */
static int bpe_word(const l8tok *t, const uint8_t *w, size_t n, l8tok_ids *out)
{
    struct bpe_sym sym_stack[BPE_STACK_SYMS];
    struct bpe_cand heap_stack[BPE_STACK_SYMS * 2];
    struct bpe_sym *sym = sym_stack;
    struct bpe_cand *heap = heap_stack;
    if (n > BPE_STACK_SYMS) {
        if (n > INT32_MAX / 4)
            return -ENOMEM;
        sym = malloc(n * sizeof(*sym));
        /* each merge pushes at most two candidates after the first n - 1 */
        heap = malloc(3 * n * sizeof(*heap));
        if (!sym || !heap) {
            if (sym != sym_stack)
                free(sym);
            if (heap != heap_stack)
                free(heap);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++)
        sym[i] = (struct bpe_sym){.id = t->byte_id[w[i]], .prev = (int32_t)i - 1,
                                  .next = i + 1 < n ? (int32_t)i + 1 : -1};
    /* The merge table is larger than the caches and each lookup a likely miss: start
     * fetching every initial pair's slot before the dependent lookups. */
    for (size_t i = 0; i + 1 < n; i++)
        __builtin_prefetch(&t->merges[(uint32_t)l8_mix64(merge_key(sym[i].id, sym[i + 1].id)) &
                                      t->merge_mask]);
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, sym, heap, &nh, (uint32_t)i);

    while (nh) {
        struct bpe_cand c = heap_pop(heap, &nh);
        struct bpe_sym *l = &sym[c.pos];
        /* Stale if either side changed since it was pushed.  The reference instead checks
         * that the pair at pos still merges into the same token: the same test, since
         * symbols only grow, so a changed pair spans more bytes and makes another token. */
        if (l->gone || l->next < 0 || l->id != c.left || sym[l->next].id != c.right)
            continue;
        struct bpe_sym *r = &sym[l->next];
        l->id = c.id;
        r->gone = true;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = (int32_t)c.pos;
        if (l->prev >= 0)
            push_pair(t, sym, heap, &nh, (uint32_t)l->prev);
        push_pair(t, sym, heap, &nh, c.pos);
    }

    int rc = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if ((rc = l8tok_ids_push(out, sym[i].id)) < 0)
            break;
    if (sym != sym_stack)
        free(sym);
    if (heap != heap_stack)
        free(heap);
    return rc;
}

/* ---------------------------------------------------------------- encode */

struct enc {
    const l8tok *t;
    pcre2_match_data *md;
    struct word_cache *cache; /* NULL when another thread holds it */
    l8tok_ids *out;
    bool fast; /* use fast_piece() */
};

static int encode_word(struct enc *e, const uint8_t *w, size_t n)
{
    const l8tok *t = e->t;
    if (n == 1)
        return l8tok_ids_push(e->out, t->byte_id[w[0]]);
    uint64_t pre = load_prefix(w, n);
    uint64_t h = hash_bytes_pre(w, n, pre);
    if (t->ignore_merges) {
        uint32_t v = bytes_find_pre(t, t->vocab, t->vocab_mask, w, n, pre, h);
        if (v)
            return l8tok_ids_push(e->out, v - 1);
    }
    uint64_t ch = h;
    if (e->cache) {
        const uint32_t *ids;
        uint32_t k;
        if (cache_get(e->cache, w, n, ch, &ids, &k)) {
            int rc = ids_reserve(e->out, k);
            if (rc < 0)
                return rc;
            memcpy(e->out->ids + e->out->n, ids, k * sizeof(*ids));
            e->out->n += k;
            return 0;
        }
    }
    size_t start = e->out->n;
    int rc = bpe_word(t, w, n, e->out);
    if (rc < 0)
        return rc;
    if (e->cache)
        cache_put(e->cache, w, n, ch, e->out->ids + start, e->out->n - start);
    return 0;
}

/* ASCII fast path of the Llama 3 Split regex.
 *
 * Matching the regex with PCRE2 costs about 100 ns a piece, most of the time of an
 * encode.  For a piece that starts with an ASCII character, the regex's alternatives reduce
 * to a few loops over an ASCII class table; this does that, and gives up (returns false,
 * PCRE2 decides) whenever the answer would depend on a non-ASCII character, whose Unicode
 * class or case folding only PCRE2 knows (a letter run that ends at a non-ASCII byte may
 * go on, "'" + "ſ" matches (?i:'s), U+00A0 is whitespace...).  It is used only when the
 * tokenizer's regex is exactly LLAMA3_SPLIT_REGEX, and a test compares it with PCRE2 on
 * random text (L8TOK_ENCODE_REGEX_ONLY).  The regex is LLAMA3_SPLIT_REGEX (top of file). */

enum ascii_class { AC_PUNCT, AC_LETTER, AC_DIGIT, AC_SPACE, AC_NEWLINE };

/* Class of each ASCII byte, the way \p{L}, \p{N} and \s see it; PUNCT is the rest,
 * controls included.  Bytes >= 0x80 are never looked up. */
static const uint8_t ascii_class[128] = {
    ['\t'] = AC_SPACE, ['\v'] = AC_SPACE, ['\f'] = AC_SPACE, [' '] = AC_SPACE,
    ['\n'] = AC_NEWLINE, ['\r'] = AC_NEWLINE,
    ['0' ... '9'] = AC_DIGIT,
    ['A' ... 'Z'] = AC_LETTER, ['a' ... 'z'] = AC_LETTER,
};

static inline int acls(uint8_t c)
{
    return ascii_class[c];
}

/* End of the run of ASCII letters from p; false if it stops at a non-ASCII byte. */
static inline bool letter_run(const uint8_t *s, size_t len, size_t p, size_t *end)
{
    while (p < len && s[p] < 0x80 && acls(s[p]) == AC_LETTER)
        p++;
    if (p < len && s[p] >= 0x80)
        return false;
    *end = p;
    return true;
}

/* The regex's match at p (s[p] < 0x80), tried alternative by alternative as PCRE2 does;
 * false: PCRE2 must decide. */
static bool fast_piece(const uint8_t *s, size_t len, size_t p, size_t *end)
{
    uint8_t c = s[p];
    int cls = acls(c);
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c == '\'' && p + 1 < len) {
        uint8_t d = s[p + 1];
        if (d >= 0x80)
            return false;
        d |= 0x20;
        if (d == 's' || d == 't' || d == 'm' || d == 'd') {
            *end = p + 2;
            return true;
        }
        if ((d == 'r' || d == 'v' || d == 'l') && p + 2 < len) {
            uint8_t e = s[p + 2];
            if (e >= 0x80)
                return false;
            if ((e | 0x20) == (d == 'l' ? 'l' : 'e')) {
                *end = p + 3;
                return true;
            }
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls == AC_LETTER)
        return letter_run(s, len, p, end);
    if (cls == AC_PUNCT || cls == AC_SPACE) {
        if (p + 1 < len) {
            uint8_t d = s[p + 1];
            if (d >= 0x80)
                return false;
            if (acls(d) == AC_LETTER)
                return letter_run(s, len, p + 1, end);
        }
    }
    /* \p{N}{1,3} */
    if (cls == AC_DIGIT) {
        size_t q = p + 1;
        while (q < len && q < p + 3 && s[q] < 0x80 && acls(s[q]) == AC_DIGIT)
            q++;
        if (q < p + 3 && q < len && s[q] >= 0x80)
            return false;
        *end = q;
        return true;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t q = c == ' ' ? p + 1 : p;
    if (q < len && s[q] < 0x80 && acls(s[q]) == AC_PUNCT) {
        while (q < len && s[q] < 0x80 && acls(s[q]) == AC_PUNCT)
            q++;
        if (q < len && s[q] >= 0x80)
            return false;
        while (q < len && (s[q] == '\r' || s[q] == '\n'))
            q++;
        *end = q;
        return true;
    }
    if (q < len && s[q] >= 0x80)
        return false;
    if (cls != AC_SPACE && cls != AC_NEWLINE)
        return false; /* not reached: every ASCII class is handled above */
    /* \s*[\r\n]+ | \s+(?!\S) | \s+ over the whitespace run [p, q) */
    size_t last_nl = SIZE_MAX;
    for (q = p; q < len && s[q] < 0x80 && (acls(s[q]) == AC_SPACE || acls(s[q]) == AC_NEWLINE); q++)
        if (acls(s[q]) == AC_NEWLINE)
            last_nl = q;
    if (q < len && s[q] >= 0x80)
        return false; /* the run may go on in Unicode whitespace */
    if (last_nl != SIZE_MAX)
        *end = last_nl + 1;
    else if (q == len || q - p == 1)
        *end = q;
    else
        *end = q - 1; /* leave the last space to the word after it */
    return true;
}

/* Pre-tokenize one stretch of text between added tokens and encode each piece.  The
 * pieces are the regex matches and the gaps between them ("Isolated"). */
static int encode_segment(struct enc *e, const uint8_t *s, size_t len)
{
    const l8tok *t = e->t;
    size_t gap = 0, from = 0;
    int rc;
    while (from < len) {
        size_t fe;
        if (e->fast && s[from] < 0x80 && fast_piece(s, len, from, &fe)) {
            if (from > gap && (rc = encode_word(e, s + gap, from - gap)) < 0)
                return rc;
            if ((rc = encode_word(e, s + from, fe - from)) < 0)
                return rc;
            gap = from = fe;
            continue;
        }
        /* The whole input was checked as UTF-8 once, so PCRE2 need not redo it. */
        int m = t->re_jit ? pcre2_jit_match(t->re, s, len, from, 0, e->md, NULL)
                          : pcre2_match(t->re, s, len, from, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0)
            return m == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EIO;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* An empty match splits nothing: search on from the next character. */
            size_t bad;
            bool truncated;
            size_t k = ms < len ? utf8_seq(s + ms, len - ms, &bad, &truncated) : 1;
            from = ms + (k ? k : 1);
            continue;
        }
        if (ms > gap && (rc = encode_word(e, s + gap, ms - gap)) < 0)
            return rc;
        if ((rc = encode_word(e, s + ms, me - ms)) < 0)
            return rc;
        gap = from = me;
    }
    if (gap < len && (rc = encode_word(e, s + gap, len - gap)) < 0)
        return rc;
    return 0;
}

/* The leftmost added token at or after from (the longest there); len if none. */
static size_t find_added(const l8tok *t, const uint8_t *s, size_t len, size_t from,
                         bool allow_special, size_t *mlen, uint32_t *id)
{
    for (size_t i = from; i < len; i++) {
        if (!t->added_first[s[i]])
            continue;
        for (size_t k = 0; k < t->n_added_lens; k++) {
            size_t l = t->added_lens[k];
            if (l > len - i)
                continue;
            uint32_t v = bytes_find(t, t->added_hash, t->added_mask, s + i, l);
            if (v && (allow_special || !t->added[v - 1].special)) {
                *mlen = l;
                *id = t->added[v - 1].id;
                return i;
            }
        }
    }
    return len;
}

int l8tok_encode(const l8tok *t, const char *text, size_t len, unsigned flags, l8tok_ids *out)
{
    if (flags & ~(unsigned)(L8TOK_SPECIAL_AS_TEXT | L8TOK_ENCODE_REGEX_ONLY))
        return -EINVAL;
    if (!len)
        return 0;
    int rc = l8tok_utf8_check(text, len, NULL);
    if (rc < 0)
        return rc;
    const uint8_t *s = (const uint8_t *)text;
    size_t n0 = out->n;
    struct enc e = {.t = t, .out = out,
                    .fast = t->llama3_regex && !(flags & L8TOK_ENCODE_REGEX_ONLY)};
    e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!e.md)
        return -ENOMEM;
    /* The cache is the only mutable part of an l8tok (logically const, like a memo): a
     * thread that cannot take it at once encodes without it rather than wait. */
    l8tok *mt = (l8tok *)t;
    bool locked = pthread_mutex_trylock(&mt->cache_lock) == 0;
    if (locked)
        e.cache = mt->cache;
    bool allow_special = !(flags & L8TOK_SPECIAL_AS_TEXT);
    size_t pos = 0;
    while (pos < len) {
        size_t mlen = 0;
        uint32_t id = 0;
        size_t m = t->n_added ? find_added(t, s, len, pos, allow_special, &mlen, &id) : len;
        if (m > pos && (rc = encode_segment(&e, s + pos, m - pos)) < 0)
            goto err;
        if (m == len)
            break;
        if ((rc = l8tok_ids_push(out, id)) < 0)
            goto err;
        pos = m + mlen;
    }
    rc = 0;
err:
    if (locked)
        pthread_mutex_unlock(&mt->cache_lock);
    pcre2_match_data_free(e.md);
    if (rc < 0)
        out->n = n0;
    return rc;
}

/* ---------------------------------------------------------------- decode */

int l8tok_decode(const l8tok *t, const uint32_t *ids, size_t n, char **text, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->n_ids || t->tok_len[ids[i]] == NO_LEN)
            return -EINVAL;
        total += t->tok_len[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + o, tok_bytes(t, ids[i]), t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
    }
    buf[o] = 0;
    *text = buf;
    *len = o;
    return 0;
}

struct l8tok_stream {
    const l8tok *tok;
    uint8_t held[4]; /* bytes of an incomplete character (at most 3) */
    size_t n_held;
    uint8_t *in;  /* (in_cap) held bytes + the new token's */
    size_t in_cap;
    char *out;    /* (out_cap) text handed out by the last call */
    size_t out_cap;
};

int l8tok_stream_new(const l8tok *tok, l8tok_stream **out)
{
    l8tok_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->tok = tok;
    *out = s;
    return 0;
}

void l8tok_stream_free(l8tok_stream *s)
{
    if (!s)
        return;
    free(s->in);
    free(s->out);
    free(s);
}

void l8tok_stream_reset(l8tok_stream *s)
{
    s->n_held = 0;
}

static int grow(void *pp, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *p = realloc(*(void **)pp, c);
    if (!p)
        return -ENOMEM;
    *(void **)pp = p;
    *cap = c;
    return 0;
}

static int stream_run(l8tok_stream *s, const uint8_t *bytes, size_t n, bool final,
                      const char **text, size_t *len)
{
    size_t total = s->n_held + n;
    /* every input byte can become a 3-byte U+FFFD */
    if (grow(&s->in, &s->in_cap, total + 1) < 0 || grow(&s->out, &s->out_cap, 3 * total + 1) < 0)
        return -ENOMEM;
    memcpy(s->in, s->held, s->n_held);
    if (n) /* flush passes no bytes (NULL) */
        memcpy(s->in + s->n_held, bytes, n);
    size_t o = 0;
    size_t used = utf8_lossy(s->in, total, final, s->out, &o);
    s->n_held = total - used; /* < 4: only a truncated character is left */
    memcpy(s->held, s->in + used, s->n_held);
    s->out[o] = 0;
    *text = s->out;
    *len = o;
    return 0;
}

int l8tok_stream_push(l8tok_stream *s, uint32_t id, const char **text, size_t *len)
{
    const char *b;
    size_t n;
    if (l8tok_token_bytes(s->tok, id, &b, &n) < 0)
        return -EINVAL;
    return stream_run(s, (const uint8_t *)b, n, false, text, len);
}

int l8tok_stream_flush(l8tok_stream *s, const char **text, size_t *len)
{
    return stream_run(s, NULL, 0, true, text, len);
}
