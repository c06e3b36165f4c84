/* constraint.h - constrained decoding in llama8d (grammar.h does the
 * work): the vocabulary's bytes from the model's tokenizer.json, compiled
 * grammars cached by their text, and the matcher each constrained request
 * carries through the scheduler (scheduler.h, "Constraints").
 *
 * Threads: requests' constraints are made and freed on the loop; the
 * engine thread's hooks (engine_thread.h) fill each constrained sequence's
 * mask right before a step and take its token right after, so the loop
 * never computes a mask and a matcher is never used by both at once. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "engine/engine.h"
#include "scheduler.h"

struct l8d_constraints;

/* The constraints of a daemon whose model has vocab ids and stops at
 * end_ids: the tokenizer at tokenizer_path gives each id's bytes. A
 * tokenizer that cannot be used (missing, malformed, more ids than the
 * model) is no failure: every constraint is then refused with the reason,
 * which *why also says (NULL if none). cache: compiled grammars kept.
 * -ENOMEM only. */
int  l8d_constraints_new(const char *tokenizer_path, uint32_t vocab, const uint32_t *end_ids,
                         uint32_t n_end, uint32_t cache, struct l8d_constraints **out,
                         const char **why);
void l8d_constraints_free(struct l8d_constraints *c);

/* A request's constraint from its kind (llama8.proto's ConstraintKind) and
 * text (len bytes): the scheduler's l8_sched_req.constraint, or NULL with
 * what is wrong in err (BAD_GRAMMAR: "line 2, column 5: ...", the schema
 * keyword, no tokenizer). The same text again reuses the compiled grammar. */
void *l8d_constraint_new(struct l8d_constraints *c, int kind, const char *text, size_t len,
                         char err[L8D_ERRLEN]);
/* The scheduler's free_constraint (ctx unused). */
void l8d_constraint_free(void *ctx, void *constraint);

/* The engine thread's hooks (engine_thread.h), ud the l8d_constraints,
 * for the steps of sched: masks fills the masks of the sequences that have
 * a constraint (on the masks' thread, while the step runs), after takes
 * their tokens; a constraint that admits nothing
 * sets its slot's constraint_end, one whose end id was taken
 * constraint_done. */
void l8d_constraints_attach(struct l8d_constraints *c, struct l8_sched *sched);
void l8d_constraints_masks(void *ud, struct l8_seq *seqs, uint32_t n);
void l8d_constraints_after(void *ud, struct l8_seq *seqs, uint32_t n, int status);

/* Compiled grammars held, and constrained requests live (Status, logs). */
uint32_t l8d_constraints_cached(const struct l8d_constraints *c);
