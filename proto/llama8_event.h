/* llama8_event.h - what llama8d says back to a client: the 32-byte event
 * record the library hands out (l8c_poll_events, l8c_wait_events), the
 * codes its fields carry (event kinds, done reasons, error codes and the
 * fields they name, why a request waits), and the protocol constants a
 * client program may print or compare (version, default socket, the
 * longest constraint text).
 *
 * Public: installed beside llama8client.h, which includes it, and valid C
 * and C++ (no _Atomic, nothing C-only), so a C++ program can include the
 * library's headers as they are. The shared-memory rings these records
 * travel in are the daemon's and the library's business alone: l8_shm.h,
 * which includes this file, is not for library users.
 *
 * Versioning: L8_PROTO_VERSION changes whenever anything here, in
 * l8_shm.h or in llama8.proto changes incompatibly. */
#ifndef LLAMA8_EVENT_H
#define LLAMA8_EVENT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define L8_PROTO_VERSION 1u
#define L8_DEFAULT_SOCKET "/run/llama8d/llama8d.sock"
#define L8_SOCKET_ENV     "LLAMA8_SOCKET"
#define L8_MAX_CONSTRAINT (1u << 20)  /* longest constraint text (bytes) */
/* Sampling ranges, checked alike by l8c_check_request and the daemon
 * (BAD_PARAMS, the field named): temperature in [0, L8_TEMPERATURE_MAX]
 * (0: greedy), top_p in (0, 1], min_p in [0, 1], repetition_penalty in
 * (0, L8_PENALTY_MAX]; top_k any (0, or the vocabulary's size and above:
 * off). Past these a value says nothing more (a temperature of 100 is
 * already all but uniform). */
#define L8_TEMPERATURE_MAX 100.0f
#define L8_PENALTY_MAX     100.0f

/* Error codes: identical numbers to llama8.proto's ErrorCode (checked by a
 * _Static_assert in the daemon, which sees both). */
enum l8_err {
    L8_ERR_NONE = 0,
    L8_ERR_BAD_MESSAGE = 1,
    L8_ERR_BAD_TOKEN = 2,
    L8_ERR_PROMPT_TOO_LONG = 3,
    L8_ERR_BAD_PARAMS = 4,
    L8_ERR_UNKNOWN_REQUEST = 5,
    L8_ERR_TOO_MANY_REQUESTS = 6,
    L8_ERR_TOO_MANY_CLIENTS = 7,
    L8_ERR_PERMISSION_DENIED = 8,
    L8_ERR_SHUTTING_DOWN = 9,
    L8_ERR_INTERNAL = 10,
    L8_ERR_BAD_VERSION = 11,
    L8_ERR_RING_VIOLATION = 12,
    L8_ERR_DUPLICATE_REQUEST = 13,
    L8_ERR_EMPTY_PROMPT = 14,
    L8_ERR_BAD_GRAMMAR = 15,
    L8_ERR_KV_POOL_TOO_SMALL = 16,
    L8_ERR_MAX_ = 17,
};

/* Done reasons: identical to llama8.proto's DoneReason. */
enum l8_done {
    L8_DONE_NONE = 0,
    L8_DONE_EOS = 1,
    L8_DONE_STOP = 2,
    L8_DONE_LENGTH = 3,
    L8_DONE_CONTEXT = 4,
    L8_DONE_CANCELLED = 5,
    L8_DONE_GRAMMAR = 6,
};

/* Event kinds. */
enum l8_event_kind {
    L8_EV_TOKEN = 1,    /* token, index, logprob (NaN unless asked for) */
    L8_EV_DONE = 2,     /* reason; index = tokens generated */
    L8_EV_ERROR = 3,    /* code and what was wrong (below); the request is gone */
    L8_EV_STARTED = 4,  /* t_ns = the first prefill chunk entered a step;
                           index = prompt tokens served from the prefix cache,
                           token = prompt tokens */
    L8_EV_WAITING = 5,  /* the request is not started yet, and why: reason =
                           enum l8_wait; index = requests ahead of it (QUEUE,
                           SLOTS) or KV pages free (PAGES), token = KV pages
                           it needs (PAGES). Sent a second after submission
                           and every two while it waits; a client may ignore it */
};

/* Why a request waits (WAITING records). */
enum l8_wait {
    L8_WAIT_QUEUE = 1,  /* behind other requests that come first */
    L8_WAIT_PAGES = 2,  /* next, but the KV pool cannot hold it yet */
    L8_WAIT_SLOTS = 3,  /* every sequence slot of a step is taken */
};

/* What an ERROR record is about. The record says it in fields its kind
 * does not otherwise use: reason = the field of the request (0: none to
 * name), token = the value the request gave, index = the limit it broke,
 * logprob = the value of a float field (NaN for the others). */
enum l8_err_field {
    L8_EF_NONE = 0,
    L8_EF_PROMPT_TOKENS = 1,  /* prompt length; limit: max_prompt_tokens */
    L8_EF_PROMPT_ID = 2,      /* a prompt token id; limit: vocabulary size */
    L8_EF_STOP_ID = 3,        /* a stop id; limit: vocabulary size */
    L8_EF_STOP_IDS = 4,       /* number of stop ids; limit: max_stop_ids */
    L8_EF_MAX_NEW = 5,        /* max_new_tokens; limit: max_new_tokens */
    L8_EF_CONTEXT = 6,        /* prompt + max_new_tokens; limit: context_length */
    L8_EF_KV_PAGES = 7,       /* KV pages the request needs; limit: the pool's */
    L8_EF_TEMPERATURE = 8,    /* must be in [0, L8_TEMPERATURE_MAX] */
    L8_EF_TOP_P = 9,          /* must be in (0, 1] */
    L8_EF_MIN_P = 10,         /* must be in [0, 1] */
    L8_EF_REPETITION_PENALTY = 11, /* must be in (0, L8_PENALTY_MAX] */
    L8_EF_REQUESTS = 12,      /* requests in flight; limit: max_requests, or
                                 the daemon's queue when that is full */
    L8_EF_PROMPT_RANGE = 13,  /* prompt_offset; limit: arena_size (the prompt
                                 is not inside the arena, or not 4-aligned) */
    L8_EF_PRIORITY = 14,      /* priority; limit: Welcome.max_priority (above 0
                                 is for root and the daemon's user) */
    L8_EF_CONSTRAINT_RANGE = 15, /* constraint_offset; limit: arena_size (the
                                 constraint's text is not inside the arena) */
    L8_EF_CONSTRAINT_LEN = 16, /* constraint_len; limit: L8_MAX_CONSTRAINT */
    L8_EF_UID_REQUESTS = 17,  /* live requests of the client's uid; limit: its
                                 share of the daemon's queue now (half of what
                                 other uids leave, at most max_requests_per_uid) */
    L8_EF_MAX_ = 18,
};

/* One event record, produced by the daemon. t_ns is CLOCK_MONOTONIC in the
 * daemon, comparable with the client's own CLOCK_MONOTONIC on the same
 * machine: it is taken when the step that made the token completed (TOKEN,
 * DONE) or when the record was produced (ERROR). The layout is the ring's
 * slot (ABI): fixed-width fields only, no padding. */
struct l8_event {
    uint64_t request_id;  /* the client's id; 0 for errors not tied to a request */
    uint64_t t_ns;
    uint32_t token;
    uint32_t index;       /* 0-based index of this generated token */
    float logprob;
    uint8_t kind;         /* enum l8_event_kind */
    uint8_t reason;       /* enum l8_done, DONE records; l8_err_field, ERROR;
                             l8_wait, WAITING */
    uint16_t code;        /* enum l8_err, ERROR records */
};
#ifdef __cplusplus
static_assert(sizeof(struct l8_event) == 32, "event record is ABI");
#else
_Static_assert(sizeof(struct l8_event) == 32, "event record is ABI");
#endif

#ifdef __cplusplus
}
#endif

#endif /* LLAMA8_EVENT_H */
