/* history.h - the recent sequences of each scope, for drafts that repeat
 * an earlier request of the same user (a reply asked for again, a fix
 * re-sent after a cancel, the previous answer edited).
 *
 * One n-gram index (ngram.h) per scope, holding the scope's finished
 * sequences one after another, each after an L8_NGRAM_BREAK, so no n-gram
 * spans two and no draft runs from one into the next. An index that is
 * full starts over with the sequence being added (of a longer one, its last
 * cap - 1 tokens): "recent" is since then. At most n_scopes are held; a new
 * scope takes the least recently used one's index. Memory: n_scopes
 * indexes of cap tokens (l8_ngram_bytes), allocated as scopes first add. */
#pragma once
#include <stdint.h>

struct l8_ngram;
struct l8_history;

/* -EINVAL (a bound 0, or cap over L8_NGRAM_MAX_CAP), -ENOMEM. */
int  l8_history_new(uint32_t n_scopes, uint32_t cap, struct l8_history **out);
void l8_history_free(struct l8_history *h);
/* Adds a sequence (n >= 1) to scope's. -ENOMEM (nothing added). */
int  l8_history_add(struct l8_history *h, uint32_t scope, const uint32_t *tokens, uint32_t n);
/* scope's index, NULL if it holds nothing; valid until the next add. */
const struct l8_ngram *l8_history_index(const struct l8_history *h, uint32_t scope);
