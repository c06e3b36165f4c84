/* tokenizer_internal.h: the loaded tokenizer's tables, shared by tokenizer.c (building them
 * from tokenizer.json, and every lookup) and tokenizer_cache.c (saving them to and loading
 * them from a cache file), and tokenizer.c's file helpers that chat.c uses too.  Not
 * installed; the tests include it to look inside the cache.
 *
 * The cache file is a byte image of these tables, so any change to a struct below, to the
 * table hashes in tokenizer.c (l8_mix64, hash_bytes, slot_tag, the probe sequences) or to what
 * the loader puts in the tables must bump L8TOK_CACHE_VERSION.
 */
#ifndef LLAMA8_TOKENIZER_INTERNAL_H
#define LLAMA8_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "llama8_tokenizer.h"
#include "proto/l8_hash.h"


#define NO_LEN UINT32_MAX /* tok_len of an id that is not a token */
#define MAX_ADDED_LENS 64 /* distinct added-token lengths */

/* A bytes -> id table slot.  The first 8 bytes of the key live in the slot, so a lookup
 * of a key of up to 8 bytes (most words) touches only the slot, not the pool. */
struct vocab_slot {
    uint64_t prefix;   /* the key's first min(len, 8) bytes, zero-padded */
    uint32_t tag;      /* hash bits 8..31 | min(len, 255) */
    uint32_t id_plus1; /* 0: empty */
};

struct merge_slot {
    uint64_t key; /* (left id << 32) | right id; UINT64_MAX: empty */
    uint32_t rank;
    uint32_t id; /* the merged token */
};

struct added_token {
    uint32_t id;
    uint32_t special; /* 0 or 1; 32 bits so that the struct has no padding (cache image) */
};

_Static_assert(sizeof(struct vocab_slot) == 16 && sizeof(struct merge_slot) == 16 &&
                   sizeof(struct added_token) == 8,
               "cache image structs have no padding");

enum { TOK_NONE, TOK_VOCAB, TOK_ADDED, TOK_SPECIAL };

struct word_cache;

struct l8tok {
    uint32_t n_ids;     /* largest id + 1 */
    uint32_t *tok_off;  /* (n_ids) byte offset of each token in pool */
    uint32_t *tok_len;  /* (n_ids) byte length, NO_LEN for a hole */
    uint8_t *tok_kind;  /* (n_ids) TOK_* */
    char *pool;         /* every token's raw bytes, back to back */
    size_t pool_len, pool_cap;

    struct vocab_slot *vocab; /* (vocab_mask + 1) model vocabulary: raw bytes -> id */
    uint32_t vocab_mask;
    struct merge_slot *merges; /* (merge_mask + 1) */
    uint32_t merge_mask;
    uint32_t byte_id[256]; /* the token of each single byte */
    bool ignore_merges;

    struct added_token *added; /* (n_added) */
    size_t n_added;
    struct vocab_slot *added_hash; /* (added_mask + 1) raw bytes -> index + 1 in added */
    uint32_t added_mask;
    bool added_first[256];               /* some added token starts with this byte */
    uint32_t added_lens[MAX_ADDED_LENS]; /* distinct added token lengths, longest first */
    size_t n_added_lens;

    /* Loaded from a cache file: the tables above (tok_off ... added_hash) point into this
     * one allocation, its image, instead of owning their own. */
    void *image;

    pcre2_code *re;
    bool re_jit;
    bool llama3_regex; /* the regex is LLAMA3_SPLIT_REGEX: fast_piece() applies */

    pthread_mutex_t cache_lock; /* guards cache; holders take it with trylock */
    struct word_cache *cache;
};

/* ---------------------------------------------------------------- files (tokenizer.c) */

struct json_object;

/* path itself, or path/name when path is a directory; malloc'd (NULL: out of memory). */
char *l8tok__resolve_path(const char *path, const char *name);

/* Parse a file with json-c; -EINVAL with nothing allocated if it is not JSON. */
int l8tok__json_load(const char *path, struct json_object **out);

/* ---------------------------------------------------------------- cache (tokenizer_cache.c) */

#define L8TOK_CACHE_VERSION 1u
/* A tokenizer.json smaller than this is parsed every time: json-c reads it faster than the
 * cache file is checked, and the tests' small variants do not litter the cache dir. */
#define L8TOK_CACHE_MIN_SOURCE (1u << 20)

/* The cache file: this header, then the payload (the sections of l8tok__cache_layout,
 * each starting 8-byte aligned, zero padding between). */
struct l8tok_cache_header {
    char magic[8];          /* L8TOK_CACHE_MAGIC */
    uint32_t version;       /* L8TOK_CACHE_VERSION */
    uint32_t header_size;   /* sizeof(struct l8tok_cache_header) */
    uint64_t byte_order;    /* L8TOK_CACHE_BYTE_ORDER as this machine stores it */
    uint64_t src_size;      /* the tokenizer.json's size in bytes */
    uint64_t src_hash;      /* l8tok__hash of its contents */
    uint64_t payload_size;  /* bytes after the header */
    uint64_t payload_hash;  /* l8tok__hash of them */
    uint32_t n_ids, pool_len, vocab_mask, merge_mask;
    uint32_t n_added, added_mask, n_added_lens, pattern_len; /* pattern: the Split regex */
    uint32_t ignore_merges, reserved;
};
#define L8TOK_CACHE_MAGIC "L8TOKC\n"
#define L8TOK_CACHE_BYTE_ORDER 0x0102030405060708ull

enum l8tok_cache_section {
    SEC_TOK_OFF, SEC_TOK_LEN, SEC_TOK_KIND, SEC_POOL, SEC_VOCAB, SEC_MERGES, SEC_ADDED,
    SEC_ADDED_HASH, SEC_BYTE_ID, SEC_ADDED_FIRST, SEC_ADDED_LENS, SEC_PATTERN, SEC_COUNT
};

/* Offset of each section from the start of the payload, and the payload size (off[SEC_COUNT]),
 * for the counts in h.  Every count is 32 bits, so none of this overflows. */
void l8tok__cache_layout(const struct l8tok_cache_header *h, uint64_t off[SEC_COUNT + 1]);

/* 64-bit hash of n bytes (not cryptographic: it tells a changed or damaged file). */
uint64_t l8tok__hash(const void *p, size_t n);

/* Size and hash of a file's contents, read in small chunks (no copy of the whole file):
 * 1, or 0 without reading it if it is smaller than L8TOK_CACHE_MIN_SOURCE; a negative errno
 * if it cannot be read. */
int l8tok__hash_file(const char *path, uint64_t *size, uint64_t *hash);

/* False when LLAMA8_TOKENIZER_CACHE is "off", "0" or empty. */
bool l8tok__cache_enabled(void);

/* The cache file for a tokenizer.json of this size and hash, malloc'd; -ENOENT when caching
 * is off (LLAMA8_TOKENIZER_CACHE=off, or no cache directory can be named). */
int l8tok__cache_path(uint64_t src_size, uint64_t src_hash, char **path);

/* Fill t's tables and *pattern (a malloc'd copy of the Split regex) from the cache file of
 * this tokenizer.json.  Any failure (no file, another version or source, short, damaged,
 * tables that do not hold together) returns a negative errno with t untouched; the caller
 * then parses the JSON.  Never trusts what it has not checked. */
int l8tok__cache_load(l8tok *t, uint64_t src_size, uint64_t src_hash, char **pattern);

/* Write t's tables to the cache file, atomically (temporary file + rename).  Best effort:
 * a directory that cannot be made or written is not an error for the caller. */
int l8tok__cache_store(const l8tok *t, uint64_t src_size, uint64_t src_hash, const char *pattern);

/* Whether t's tables came from the cache (for tests and benchmarks). */
bool l8tok__from_cache(const l8tok *t);

#endif /* LLAMA8_TOKENIZER_INTERNAL_H */
