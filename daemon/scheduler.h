/* scheduler.h - the request scheduler: continuous batching over the paged KV pool.
 *
 * Pure logic, no I/O, no clocks, no threads: the event loop owns it and
 * calls it from one thread. The loop's cycle is
 *
 *     l8_sched_submit() / l8_sched_cancel() / l8_sched_cancel_owner()
 *         whenever clients ask (also while a step is in flight);
 *     l8_sched_build_step(s, &seqs, &n)     when no step is in flight;
 *     l8_engine_step(engine, seqs, n)       on the engine thread;
 *     l8_sched_step_done(s, seqs, n, rc)    back on the loop: events are
 *                                           delivered through opts.on_event.
 *
 * A step holds, in this order: one decode row for every running request
 * that has finished its prompt (one token each), then prefill chunks of
 * running requests still in their prompt, then the first chunks of newly
 * admitted requests, all within max_step_tokens tokens (chunked prefill)
 * and max_seqs sequences. Waiting requests are admitted in order of
 * priority (higher first), then the owner with the fewest running
 * requests, then arrival (FIFO); the one that order picks is never
 * overtaken by a later one that fits, so a large request is not starved by
 * small ones. A request is admitted only when the pool can give pages for
 * its whole remaining prompt plus one page of headroom per running request
 * (so it is not preempted right back out at their next page boundary), and
 * at most max_seqs requests run at once, so every running request decodes in
 * every step. Each l8_seq samples only on the chunk that reaches the last
 * known token; its history is every token before pos + n_tokens (prompt
 * and generated), sample_index the count generated so far.
 *
 * Prefix cache: the full pages of a request's tokens are registered in the
 * pool's prefix cache as soon as their K/V is written (prompt and
 * generated tokens alike, so a chat that re-sends its history reuses it).
 * A new request whose first k full pages are cached starts at position
 * k * page_size (at least one prompt token is always computed, for the
 * logits of the first sample). Pages are shared only between requests of
 * one cache_scope (llama8d: one uid), so a request's start, and its
 * cached count, says nothing of other scopes' prompts.
 *
 * Fair share: the owners (clients) share the step's max_seqs slots. When
 * they are all taken and the request admission would pick belongs to an
 * owner running at least two fewer than another, that other owner's
 * youngest request of no higher priority is preempted for it (a held
 * request of no higher priority before any other), one a step:
 * a client with one request is not kept waiting for a whole generation by
 * a batch job that filled the slots, and two busy clients even out at
 * equal shares (to within one). Where shares differ by one (more owners
 * with work than slots), the owners take turns: every L8_SCHED_QUANTUM
 * steps, the request that has held its slot longest (that many steps at
 * least) gives it to the waiting owner's. A request that gave its slot up
 * so waits behind the others of owners running as few as its own. Within
 * one owner, requests run first come, first served.
 *
 * Between uids (one user's many clients are one party there): the queue
 * and the pool. A uid may hold half (rounded up) of the max_requests
 * places that other uids leave, and at most max_requests_per_uid: a uid
 * alone takes half of the queue, and whoever comes next finds half of
 * what is left, so no uid exhausts it. A request that admission picks
 * but the pool cannot hold preempts, for pages, requests of the uid that
 * holds the most pages, if that is more than its own uid would hold with
 * it: held requests first (a client that reads no events pins pages that
 * do nothing; they are recomputed when it reads again), then the youngest,
 * of no higher priority. Strictly more, so two uids never swap pages back
 * and forth. A running request that needs a page and finds none takes a
 * held request's first, then the youngest's (below).
 *
 * Preemption: when a running request needs a new page and the pool has
 * none (free or reclaimable), a held running request, else the youngest
 * running request (lowest priority, latest arrival), is preempted: its pages are released and it
 * goes back to the waiting queue, in its original place, with prompt +
 * generated-so-far as the tokens to recompute. Nothing is re-emitted and
 * its sample_index continues, so seeded sampling gives the same tokens as
 * an uninterrupted run. The client never sees a preemption. A request is
 * refused at submit only if it could not fit in the pool alone.
 *
 * Constraints (constrained decoding): a request may carry an opaque
 * constraint, which the scheduler owns from a successful submit on and
 * hands back to opts.free_constraint when the request is freed. Each step
 * that samples for it points l8_seq.allowed at the request's mask buffer
 * and its slot at the constraint; whoever runs the step (llama8d's engine
 * thread) fills the mask before and takes the token after, and sets
 * slot.constraint_end when the constraint admits no token, constraint_done
 * when the token was its end (and constraint_at, at which sample): the
 * request then ends with DONE_GRAMMAR, that token not delivered (unless,
 * done, it is one of the request's stop ids: then it ends as at any stop
 * id).
 *
 * Speculative decoding (opts.draft_max, a request's speculate): a decode
 * row may carry drafted tokens after its last one, taken from the longest
 * earlier repeat of the request's latest tokens (speculate/ngram.h) in its
 * own, or, where longer, in the recent requests of its cache_scope that
 * have ended (speculate/history.h; none with no_prefix_cache), as many as
 * its recent acceptance says. The engine samples at every position
 * as plain decoding would (l8_seq.n_draft); the drafts are accepted up to
 * the first that differs from the sample before it, and that sample
 * follows them: the same tokens, and TOKEN events, as without speculation,
 * several a step. Drafts take no page the running requests' headroom
 * needs, at most a quarter of max_step_tokens and what is left of
 * opts.verify_rows after the decode rows. A constrained request's mask
 * buffer then holds a mask for each position (the j-th at l8_seq.allowed + j * vocab / 32):
 * the step's runner fills them following the drafts, and says at which
 * sample the constraint ended (slot.constraint_at).
 *
 * Memory: a request's token array, page table and mask are allocated once
 * at submit, sized for prompt + max_new_tokens; a speculating request's
 * draft index (~47 bytes a token, at most L8_SCHED_NGRAM_CAP tokens) when
 * it first decodes, given back when it is preempted; nothing per token.
 * Speculating, the history: L8_SCHED_HISTORY_CAP tokens' index for each of
 * up to L8_SCHED_HISTORY_SCOPES scopes, made as each first ends a request. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "engine/engine.h"

struct l8_kvpool;
struct l8_sched;
struct l8_sched_event;

#define L8_SCHED_MAX_STOP      16      /* stop ids per request */
#define L8_SCHED_MAX_SEQS      65536u  /* sequences in one step */
#define L8_SCHED_QUANTUM       128     /* steps a request keeps its slot before it
                                          takes turns with another owner's */
#define L8_SCHED_NO_TOKEN      UINT32_MAX
#define L8_SCHED_DEFAULT_MAX_REQUESTS 4096
#define L8_SCHED_DRAFT_MAX     16      /* drafts one decode row verifies at most */
#define L8_SCHED_NGRAM_CAP     32768u  /* tokens a request's draft index holds (~1.5 MB;
                                          a longer request drafts no more past them) */
#define L8_SCHED_HISTORY_SCOPES 8u     /* cache scopes whose recent requests are kept */
#define L8_SCHED_HISTORY_CAP   32768u  /* tokens kept of each (~1.5 MB) */

/* Submit refusals: negative values outside the errno range, so one int
 * carries either. The ipc layer maps each to a protocol error code. */
enum l8_sched_err {
    L8_SCHED_E_EMPTY_PROMPT = -5001, /* n_prompt == 0 */
    L8_SCHED_E_TOKEN_RANGE  = -5002, /* a prompt id >= vocab */
    L8_SCHED_E_TOO_LONG     = -5003, /* n_prompt + max_new_tokens > max_ctx */
    L8_SCHED_E_MAX_NEW_ZERO = -5004, /* max_new_tokens == 0 */
    L8_SCHED_E_POOL_TOO_SMALL = -5005, /* needs more pages than the pool has */
    L8_SCHED_E_TOO_MANY_STOPS = -5006, /* n_stop > L8_SCHED_MAX_STOP */
    L8_SCHED_E_DUPLICATE_ID = -5008, /* (owner, id) already live */
    L8_SCHED_E_QUEUE_FULL   = -5009, /* max_requests live requests */
    L8_SCHED_E_STOP_RANGE   = -5010, /* a stop id >= vocab */
    /* sampling: the ranges of llama8_event.h */
    L8_SCHED_E_TEMPERATURE  = -5011, /* not in [0, L8_TEMPERATURE_MAX] */
    L8_SCHED_E_TOP_P        = -5012, /* not in (0, 1] */
    L8_SCHED_E_MIN_P        = -5013, /* not in [0, 1] */
    L8_SCHED_E_PENALTY      = -5014, /* repetition_penalty not in (0, L8_PENALTY_MAX] */
    L8_SCHED_E_UID_QUEUE_FULL = -5015, /* the uid's share of the queue is taken */
};
/* The numbers behind a refusal, for the client's error record: what the
 * request asked and the limit it broke (0 where there is none), and the
 * value of a float parameter (NaN for the others). */
struct l8_sched_refusal {
    uint32_t value;
    uint32_t limit;
    float fvalue;
};
/* Why a waiting request waits (l8_sched_waiting). */
enum l8_sched_wait_why {
    L8_SCHED_WAIT_QUEUE = 1,  /* behind `ahead` requests that come first */
    L8_SCHED_WAIT_PAGES = 2,  /* next, but the pool cannot give its `need`
                                 pages (with the running ones' headroom):
                                 `have` are free or reclaimable */
    L8_SCHED_WAIT_SLOTS = 3,  /* every sequence slot (max_seqs) is taken */
};
struct l8_sched_wait {
    uint64_t owner, id;
    void *user;
    enum l8_sched_wait_why why;
    uint32_t ahead;           /* waiting requests, not held, before it */
    uint32_t need, have;      /* PAGES */
};

/* Text for an l8_sched_err or a negative errno. */
const char *l8_sched_strerror(int err);

struct l8_sched_opts {
    uint32_t n_pages;         /* = l8_engine_n_pages() */
    uint32_t page_size;       /* = l8_engine_page_size() */
    uint32_t max_step_tokens; /* token budget of one step; >= max_seqs */
    uint32_t max_seqs;        /* sequences in one step = running requests */
    uint32_t max_ctx;         /* prompt + new tokens of one request */
    uint32_t vocab;
    uint32_t max_requests;    /* live (waiting + running); 0 = default */
    uint32_t max_requests_per_uid; /* live of one uid; 0 = max_requests */
    /* Receives every event, from l8_sched_step_done() only. */
    void (*on_event)(void *ctx, const struct l8_sched_event *ev);
    /* Optional: true when a request (its `user`) must wait out the next
     * step: its client takes no events now (llama8d never blocks on a
     * client, and does not keep generating for one that does not read).
     * A held request keeps its pages and its place; a held waiting one is
     * passed over for admission, the others keep their order. */
    bool (*held)(void *ctx, void *user);
    /* Frees a request's constraint (required if any request has one); ctx
     * is the one below. */
    void (*free_constraint)(void *ctx, void *constraint);
    void *ctx;
    bool no_prefix_cache;     /* never register or look up pages */
    /* Speculative decoding: drafts a decode row verifies at most (0: off,
     * up to L8_SCHED_DRAFT_MAX), and the most rows a step with drafts may
     * have (= l8_engine_verify_rows()). */
    uint32_t draft_max;
    uint32_t verify_rows;
};

/* A request as submitted. Everything is copied; pointers need not live
 * past the call. */
struct l8_sched_req {
    uint64_t owner;          /* client id; the loop's choice */
    uint64_t id;             /* request id, unique per owner while live */
    void *user;              /* returned in events and slots, not touched */
    const uint32_t *prompt;  /* [n_prompt] token ids */
    uint32_t n_prompt;
    struct l8_sampling sampling;
    uint32_t max_new_tokens;
    const uint32_t *stop_ids;/* [n_stop] */
    uint32_t n_stop;
    int32_t priority;        /* higher runs first; FIFO within a priority */
    uint32_t cache_scope;    /* prefix-cache domain: pages are shared only
                                with requests of the same scope */
    uint32_t uid;            /* whose: the queue and the pool are shared
                                fairly between uids (llama8d: the peer's) */
    bool logprobs;           /* fill event logprobs */
    void *constraint;        /* NULL, or the request's constraint: the
                                scheduler's once the submit succeeds */
    bool speculate;          /* may draft (opts.draft_max): the tokens are
                                the same */
};

enum l8_sched_ev_kind {
    L8_SCHED_EV_TOKEN = 1,   /* a generated token */
    L8_SCHED_EV_DONE  = 2,   /* the request ended normally; nothing follows */
    L8_SCHED_EV_ERROR = 3,   /* the request failed (engine error); nothing follows */
};
enum l8_sched_done_reason {
    L8_SCHED_DONE_NONE   = 0,
    L8_SCHED_DONE_STOP   = 1, /* sampled a stop id (it was sent as a TOKEN) */
    L8_SCHED_DONE_LENGTH = 2, /* max_new_tokens generated */
    L8_SCHED_DONE_GRAMMAR = 3, /* the constraint admits no further token */
};

/* Every sampled token is one TOKEN event (the stop token included), in
 * index order; then one DONE. Cancelled requests get no events at all:
 * the loop answers a cancel itself. */
struct l8_sched_event {
    enum l8_sched_ev_kind kind;
    uint64_t owner, id;
    void *user;
    uint32_t token;          /* TOKEN: the id; DONE: the last token */
    uint32_t index;          /* TOKEN: 0-based index of the generated token;
                                DONE/ERROR: tokens generated in all */
    float logprob;           /* TOKEN with logprobs: log p(token); else 0 */
    bool has_logprob;
    enum l8_sched_done_reason reason; /* DONE */
    int error;               /* ERROR: the engine's negative errno */
    uint32_t drafted, accepted; /* the request's drafted tokens so far, and of
                                   them accepted (speculative decoding) */
    uint64_t t_ns;           /* what the caller gave l8_sched_step_done (the
                                scheduler reads no clock) */
};

/* Per sequence of the last built step, parallel to its l8_seq array. */
struct l8_sched_slot {
    uint64_t owner, id;
    void *user;
    bool first;              /* first time this request is in a step (its
                                prefill starts now): submit -> start latency */
    bool prefill;            /* the chunk is (re)computing known tokens */
    uint32_t cached_tokens;  /* on first: prompt positions taken from the
                                prefix cache */
    void *constraint;        /* the request's, when the sequence samples
                                (its l8_seq.allowed is then its mask) */
    bool constraint_end;     /* set by the step's runner: nothing fits */
    bool constraint_done;    /* set by the step's runner: the token ended the
                                constraint's language (an end id) */
    uint32_t constraint_at;  /* set with either: at which of the sequence's
                                samples (0 .. n_draft; 0 without drafts) */
};

struct l8_sched_stats {
    uint32_t running, waiting;
    uint64_t preemptions;       /* since start */
    uint32_t pages_total, pages_free, pages_used, pages_cached;
    uint64_t tokens_generated;  /* sampled tokens delivered, since start */
    uint64_t prompt_tokens;     /* prompt positions computed (incl. recompute) */
    uint64_t cached_tokens;     /* prompt positions taken from the prefix cache */
    uint64_t steps;
    uint64_t drafted, accepted; /* draft tokens verified, and of them accepted */
    bool step_in_flight;
};

struct l8_sched_owner_stats {
    uint32_t requests;       /* live: waiting + running */
    uint32_t running;        /* of them, running (holding a sequence slot) */
    uint32_t pages;          /* page-table entries held (a shared page counts
                                once per request holding it) */
};

/* -EINVAL (a zero size, max_step_tokens < max_seqs, max_seqs above
 * L8_SCHED_MAX_SEQS, no on_event), -ENOMEM. */
int  l8_sched_new(const struct l8_sched_opts *o, struct l8_sched **out);
/* Frees every request; must not be called with a step in flight. */
void l8_sched_free(struct l8_sched *s);

/* 0 or an l8_sched_err (its numbers in *why, if why is not NULL) or
 * -ENOMEM. Allowed while a step is in flight. */
int  l8_sched_submit(struct l8_sched *s, const struct l8_sched_req *r,
                     struct l8_sched_refusal *why);
/* Ends a live request without events. -ENOENT if (owner, id) is unknown
 * or already finished. Its pages are released now, or at step_done if
 * the request is in the step in flight. */
int  l8_sched_cancel(struct l8_sched *s, uint64_t owner, uint64_t id);
/* Cancels every request of the owner (a client went away); returns how
 * many. */
uint32_t l8_sched_cancel_owner(struct l8_sched *s, uint64_t owner);

/* Builds the next step in an array owned by the scheduler (valid until
 * step_done); *n == 0 when there is nothing to run. -EBUSY while a step
 * is in flight. A step with n > 0 is in flight until step_done. */
int  l8_sched_build_step(struct l8_sched *s, struct l8_seq **seqs, uint32_t *n);
/* The slots of the step in flight, [n]: the step's runner may set their
 * constraint_end (the array stays where it is for the scheduler's life). */
struct l8_sched_slot *l8_sched_step_slots(struct l8_sched *s);
/* The engine finished the step at t_ns (the caller's clock, carried by the
 * events): status is l8_engine_step()'s return.
 * On 0: for each sequence that sampled, append the token and emit TOKEN
 * (and DONE when finished); finished requests release their pages. On
 * error: every request in the step gets an ERROR event and is released.
 * -EINVAL if seqs/n are not the step in flight. */
int  l8_sched_step_done(struct l8_sched *s, struct l8_seq *seqs, uint32_t n,
                        int status, uint64_t t_ns);

void l8_sched_get_stats(const struct l8_sched *s, struct l8_sched_stats *out);
void l8_sched_owner_stats(const struct l8_sched *s, uint64_t owner,
                          struct l8_sched_owner_stats *out);
/* Calls fn for each waiting request that is not held, in queue order,
 * saying why it waits as of the last step built. */
void l8_sched_waiting(struct l8_sched *s,
                      void (*fn)(void *ctx, const struct l8_sched_wait *w), void *ctx);
/* Nothing waiting, running or in flight (drain finished). */
bool l8_sched_idle(const struct l8_sched *s);
/* The pool, read-only (tests, status). */
const struct l8_kvpool *l8_sched_pool(const struct l8_sched *s);
