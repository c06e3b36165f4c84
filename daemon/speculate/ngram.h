/* ngram.h - draft tokens by prompt lookup: an n-gram index over one token
 * sequence (a request's prompt and what it has generated so far).
 *
 * The index holds, for each n in 1..L8_NGRAM_MAX_N, a hash table from an
 * n-gram to the end position of its most recent occurrence that has a
 * following token. A token is pushed in O(1) amortized time (one insert
 * per n; an occurrence is inserted when its follower arrives, so the
 * sequence's own last n-grams are never found, only earlier ones).
 *
 * A proposal takes a query (the last tokens of some sequence), finds the
 * longest suffix of it, n from L8_NGRAM_MAX_N down to min_n, that occurs
 * in the index, and drafts the tokens that followed its most recent
 * occurrence. When the copy runs into the end of the sequence and the
 * matched suffix is also the sequence's tail (always, when the query is
 * the index's own tail), it goes on copying what it drafted, as an
 * overlapping LZ77 copy: "a b a b" drafts "a b a b ...". A caller can ask
 * its own sequence's index first and another (history.h: recent requests
 * of the same user) with the same query next.
 *
 * Memory, fixed at creation for cap tokens: 4 bytes a token for the
 * sequence and, for each of the 8 tables, 4/3 slots of 4 bytes a token
 * (load factor at most 3/4): about 47 bytes a token (l8_ngram_bytes).
 * Nothing is allocated after l8_ngram_new. Lookups compare tokens exactly,
 * so a hash collision costs a probe, never a wrong draft. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define L8_NGRAM_MAX_N 8u              /* longest n-gram looked up */
#define L8_NGRAM_MAX_CAP (1u << 28)    /* most tokens one index holds */
/* A token that separates sequences in one index (history.h): no query
 * holds it, so no n-gram across it is found, and a draft stops before it. */
#define L8_NGRAM_BREAK UINT32_MAX

struct l8_ngram;

/* An empty index for up to cap tokens, 1 <= cap <= L8_NGRAM_MAX_CAP.
 * -EINVAL, -ENOMEM. */
int  l8_ngram_new(uint32_t cap, struct l8_ngram **out);
void l8_ngram_free(struct l8_ngram *g);
/* Bytes an index of cap tokens holds. */
size_t l8_ngram_bytes(uint32_t cap);
/* Empty again, for another sequence: O(cap). */
void l8_ngram_reset(struct l8_ngram *g);

/* Appends tokens to the sequence. -ENOSPC (nothing appended) when they do
 * not fit in cap. */
int  l8_ngram_push(struct l8_ngram *g, const uint32_t *tokens, uint32_t n);

/* The sequence so far: [l8_ngram_len] tokens, valid until the next push. */
const uint32_t *l8_ngram_tokens(const struct l8_ngram *g);
uint32_t l8_ngram_len(const struct l8_ngram *g);
/* Hash-table slots examined by pushes since creation or reset: the work of
 * growing the index, for tests. */
uint64_t l8_ngram_probes(const struct l8_ngram *g);

/* Up to k draft tokens into draft[k]: what followed the most recent
 * occurrence in g of the longest suffix of query[n_query] of length
 * min_n..L8_NGRAM_MAX_N (min_n 0 is taken as 1). Returns how many were
 * written: 0 when no suffix of length >= min_n occurs. n_match (NULL: not
 * wanted) gets the matched suffix's length, 0 for none: of two sources, the
 * longer match is the better evidence. Reads g only. */
uint32_t l8_ngram_propose(const struct l8_ngram *g, const uint32_t *query, uint32_t n_query,
                          uint32_t min_n, uint32_t k, uint32_t *draft, uint32_t *n_match);
