/* llama8client.h - talk to llama8d: connect, submit token prompts, stream
 * generated tokens back, cancel, ask for status.
 *
 * Two layers. Text in, text out (at the end of this file):
 *   l8c_connect(NULL, "my-tool", &c, err);
 *   l8c_generate_text(c, "Why is the sky blue?", NULL, print_piece, NULL, &reply);
 * and underneath, the calls that layer is made of: l8c_submit a prompt of
 * token ids (l8chat_encode with l8c_tokenizer(c)), l8c_wait_events for its
 * TOKEN events, l8tok_stream_push each into text, until DONE.
 *
 * The library speaks the protocol of proto/llama8.proto and the shared
 * memory ABI of proto/l8_shm.h: the handshake and status travel on a
 * SOCK_SEQPACKET Unix socket, requests and tokens on a per-client
 * shared-memory ring pair, with eventfd doorbells rung only when the other
 * side sleeps. The event records and their codes (struct l8_event, enum
 * l8_err, ...) are in llama8_event.h, the rings' layout is not part of
 * this API. Text <-> tokens and the chat format live in
 * llama8_tokenizer.h; both are included here.
 *
 * C and C++: the installed headers are C17 and C++ (11 and later) alike,
 * their declarations extern "C".
 *
 * Threading: one struct l8c_client is used by one thread at a time (no
 * internal locks). Separate clients are independent.
 *
 * Errors: functions return 0 (or a count) on success and a negative errno
 * on failure; l8c_last_error() then has a human-readable message and, when
 * the daemon said why, the protocol error code.
 *   -ECONNREFUSED / -ENOENT  no daemon at the socket path
 *   -EPERM                   the daemon refused us (PERMISSION_DENIED)
 *   -EUSERS                  the daemon has too many clients
 *   -EPROTO                  the daemon broke the protocol or a version mismatch
 *   -ECONNRESET              the daemon went away or disconnected us
 *   -EAGAIN                  rings full: consume events, then retry
 *   -EINVAL                  bad arguments (checked before anything is sent) */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "llama8_event.h"
#include "llama8_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define L8C_MAX_EOS 8
#define L8C_ERRLEN 256

struct l8c_client;

/* What the daemon told us in its Welcome. Strings are owned by the client
 * and live until l8c_close(). */
struct l8c_info {
    uint64_t client_id;
    uint32_t protocol_version;
    const char *daemon_version;
    const char *model_name;
    const char *model_dir;     /* absolute path; tokenizer.json is there */
    const char *backend;       /* "cpu" or "cuda" */
    uint32_t vocab_size;
    uint32_t context_length;
    int32_t bos_id;            /* -1 if none */
    uint32_t n_eos;
    uint32_t eos_ids[L8C_MAX_EOS];
    uint32_t max_requests;     /* in flight at once for this client */
    uint32_t max_prompt_tokens;
    uint32_t max_new_tokens;
    uint32_t max_stop_ids;
    int32_t max_priority;      /* the highest priority it may ask for: 0, or
                                  INT32_MAX for root and the daemon's user */
    uint32_t sq_entries, eq_entries, arena_size;
};

/* What a request's reply must be (constrained decoding): the numbers of
 * llama8.proto's ConstraintKind. The daemon masks each step's tokens to
 * those that keep the reply a prefix of the constraint's language, and ends
 * the reply (DONE with reason L8_DONE_GRAMMAR, l8c_done_name "grammar")
 * when the constraint admits no further token; the model's eos ids end it
 * only where the reply is whole. */
enum l8c_constraint {
    L8C_CONSTRAINT_NONE = 0,        /* no constraint (l8c_params_init) */
    L8C_CONSTRAINT_GBNF = 1,        /* a grammar in llama.cpp's GBNF notation */
    L8C_CONSTRAINT_JSON_SCHEMA = 2, /* a JSON Schema, as JSON text */
    L8C_CONSTRAINT_REGEX = 3,       /* a regular expression the whole reply matches */
    L8C_CONSTRAINT_JSON = 4,        /* any JSON value; no text */
};

/* Per-request parameters. Start from l8c_params_init(). */
struct l8c_params {
    float temperature;          /* 0: greedy; at most L8_TEMPERATURE_MAX (100) */
    uint32_t top_k;             /* 0: off */
    float top_p;                /* (0, 1]; 1: off */
    float min_p;                /* [0, 1]; 0: off */
    float repetition_penalty;   /* (0, L8_PENALTY_MAX]; 1: off */
    uint64_t seed;
    uint32_t max_new_tokens;    /* >= 1 */
    const uint32_t *stop_ids;   /* extra stop ids, not copied past submit */
    uint32_t n_stop_ids;
    bool logprobs;
    bool ignore_eos;
    bool no_speculate;          /* no speculative decoding: the same tokens, the
                                   speed of one token a step */
    int32_t priority;           /* higher first among waiting requests; above 0
                                   only for root and the daemon's user */
    /* The constraint (enum l8c_constraint) and its UTF-8 text, at most
     * L8_MAX_CONSTRAINT bytes (llama8_event.h: 1 MiB), not NUL-terminated, not
     * copied past submit. GBNF, JSON_SCHEMA and REGEX take a text; NONE and
     * JSON none (constraint_len 0). The daemon compiles it when the request
     * arrives: a text it cannot compile ends the request with an ERROR
     * event of code L8_ERR_BAD_GRAMMAR, and l8c_request_error says why. */
    int constraint;
    const char *constraint_text;
    size_t constraint_len;
};

/* Greedy, 256 new tokens, no stop ids beyond the model's eos, no
 * constraint. */
void l8c_params_init(struct l8c_params *p);
/* The most new tokens a request with a prompt of n_prompt tokens can ask
 * for: the daemon's max_new_tokens or the context left after the prompt,
 * whichever is less, and at most cap (0: no cap); at least 1 (a prompt
 * that fills the context is refused for itself). */
uint32_t l8c_max_new_fitting(const struct l8c_info *in, size_t n_prompt, uint32_t cap);

/* The socket path used when none is given: $LLAMA8_SOCKET, else
 * /run/llama8d/llama8d.sock. */
const char *l8c_default_socket(void);

/* Connect to the daemon at path (NULL: l8c_default_socket()), handshake,
 * map the rings; a daemon still loading its model is waited for.
 * name appears in the daemon's logs (may be NULL).
 * On failure *out is untouched and, if err is not NULL, it says why. */
int l8c_connect(const char *path, const char *name, struct l8c_client **out,
                char err[L8C_ERRLEN]);
/* How far a daemon that is still loading its model is, as it says while
 * it loads (about every quarter second until the Welcome). The strings
 * live until the callback returns. */
struct l8c_loading {
    const char *model_name;
    const char *stage;          /* "reading the checkpoint", "placing the weights",
                                   "warming up", "reading the tokenizer" */
    uint64_t weight_bytes;      /* what the engine places; 0: not known yet */
    uint64_t placed_bytes;      /* placed so far, <= weight_bytes */
    double elapsed_s;           /* since the daemon started */
};

struct l8c_connect_opts {
    const char *name;           /* as l8c_connect's */
    /* Most ms to wait for a daemon that is still loading; 0: while it
     * keeps saying how far it is (and 2 min without a word). */
    int wait_ms;
    /* Called from inside l8c_connect_with for each Loading message (NULL:
     * none); arg is its first argument. */
    void (*on_loading)(void *arg, const struct l8c_loading *l);
    void *arg;
};

/* l8c_connect with options: how long to wait for a daemon that is still
 * loading, and a callback that hears how far it is. l8c_connect waits as
 * wait_ms 0 does, silently. */
int l8c_connect_with(const char *path, const struct l8c_connect_opts *opts,
                     struct l8c_client **out, char err[L8C_ERRLEN]);
/* Close the connection; the daemon cancels what is still running.
 * l8c_close(NULL) is a no-op. */
void l8c_close(struct l8c_client *c);

const struct l8c_info *l8c_info(const struct l8c_client *c);
/* The last error's message ("" if none) and protocol code (enum l8_err). */
const char *l8c_last_error(const struct l8c_client *c, int *code);

/* Submit a generation request for prompt[n] (token ids < vocab_size).
 * The request id (chosen by the library, unique per client) goes to *id.
 * The prompt, the constraint's text and the request are written to the
 * shared arena in one chunk, free again once the daemon has read the
 * request (it copies everything out first).
 * Returns 0, -EINVAL (bad arguments: nothing sent; among them a constraint
 * kind the enum does not have, a text over L8_MAX_CONSTRAINT bytes or with
 * NONE or JSON, a NULL text with a length, and a prompt and text that would
 * not fit the arena even empty: l8c_info()->arena_size), -EAGAIN
 * (submission ring or arena full now: consume events, then retry), or
 * -ECONNRESET. Validation against the model's limits happens in the
 * daemon, which answers with an ERROR event. */
int l8c_submit(struct l8c_client *c, const uint32_t *prompt, uint32_t n,
               const struct l8c_params *p, uint64_t *id);
/* Whether the daemon behind c takes p with prompt[n]: 0, or the code the
 * daemon would answer in an ERROR event (L8_ERR_EMPTY_PROMPT,
 * L8_ERR_PROMPT_TOO_LONG, L8_ERR_BAD_TOKEN, L8_ERR_BAD_PARAMS,
 * L8_ERR_BAD_GRAMMAR), with why in l8c_error_text's words for that event
 * (which limit of l8c_info, and the value given; a constraint's text over
 * L8_MAX_CONSTRAINT bytes is BAD_GRAMMAR with field L8_EF_CONSTRAINT_LEN,
 * a kind outside enum l8c_constraint BAD_GRAMMAR too). What only the daemon knows
 * (its KV pool, the requests in flight, whether the constraint compiles)
 * is not checked. Nothing is sent;
 * l8c_submit does not call it (the daemon checks again). */
int l8c_check_request(const struct l8c_client *c, const uint32_t *prompt, uint32_t n,
                      const struct l8c_params *p, char why[L8C_ERRLEN]);
/* Submit with a caller-chosen id (for tests of the daemon's checks). */
int l8c_submit_id(struct l8c_client *c, uint64_t id, const uint32_t *prompt,
                  uint32_t n, const struct l8c_params *p);
/* Ask the daemon to cancel a request; a DONE event with reason CANCELLED
 * (or an ERROR UNKNOWN_REQUEST) follows. */
int l8c_cancel(struct l8c_client *c, uint64_t id);

/* Why the daemon refused request id with an ERROR event of code
 * L8_ERR_BAD_GRAMMAR: its message ("line 3, column 7: ..." for a GBNF or
 * regex text, the schema keyword's JSON pointer for a JSON Schema), or NULL
 * if it sent none for id. The daemon sends it on the control socket just
 * before the event; this reads what waits there first, without waiting.
 * l8c_error_text cannot give it (it sees only the event): call this for a
 * BAD_GRAMMAR event. The library keeps the messages of the last
 * L8C_REQUEST_ERRORS such refusals (a later one for the same id replaces
 * it); the string lives until that many more arrived or l8c_close(). Such
 * a message does not end the connection; any other Error the daemon sends
 * does (see l8c_poll_events). */
#define L8C_REQUEST_ERRORS 8
const char *l8c_request_error(struct l8c_client *c, uint64_t id);

/* Take up to max events without waiting. When the ring is empty it also
 * reads the control socket (no wait). Returns the number taken, or, once
 * the ring is empty and the daemon hung up or sent an Error there, a
 * negative errno (-ECONNRESET, or the Error's, as listed above). An Error
 * about one request (BAD_GRAMMAR with its request id) is kept for
 * l8c_request_error instead and the connection stays. */
int l8c_poll_events(struct l8c_client *c, struct l8_event *ev, int max);
/* Wait up to timeout_ms (-1: forever) for events, then take up to max.
 * Sleeps on the event doorbell (a plain poll + read), telling the daemon
 * to ring it. Returns the number taken (0 on timeout) or a negative errno. */
int l8c_wait_events(struct l8c_client *c, struct l8_event *ev, int max,
                    int timeout_ms);

/* For the caller's own event loop: a descriptor that becomes readable when
 * events arrive, once l8c_prepare_wait() returned 0. Call
 * l8c_prepare_wait() right before sleeping on it: it returns 1 if events
 * are already waiting (do not sleep, poll them). After the descriptor
 * fires, call l8c_poll_events(), which clears it. The control socket
 * (l8c_ctl_fd) becoming readable or hung up means the daemon has something
 * to say or went away: call l8c_poll_events() too. */
int l8c_event_fd(const struct l8c_client *c);
int l8c_ctl_fd(const struct l8c_client *c);
int l8c_prepare_wait(struct l8c_client *c);

/* Status (one round trip on the control socket). */
struct l8c_status {
    char model_name[128];
    char backend[16];
    uint32_t pages_total, pages_used, pages_cached, page_size;
    uint32_t clients, requests_running, requests_waiting, context_length;
    double tokens_per_s, uptime_s;
    uint64_t tokens_generated, requests_done, prompt_tokens, prompt_tokens_cached;
    bool draining;
    double step_running_s;  /* the engine step in flight, 0 when idle */
    bool step_stalled;      /* it ran past its bound (a hung engine): watchdog pings stopped */
    /* Engine steps done and their total time in the engine; gap_steps of
     * them started while runnable requests were left from the step before
     * (not held for a client that does not read its events), and
     * gap_time_s is their total wait from that step's end: what the daemon
     * itself adds between steps under load. */
    uint64_t steps, gap_steps;
    double step_time_s, gap_time_s;
    /* Of those steps, the decode-only ones (no prompt tokens): their count,
     * time and sequences (mean batch = decode_rows / decode_steps); the
     * tokens fed in all steps (prompt chunks included); requests preempted
     * for KV pages. */
    uint64_t decode_steps, decode_rows, fed_tokens, preemptions;
    double decode_time_s;
    /* Bytes the engine holds, fixed at start: the weights, the KV pool, and
     * its activations and scratch; on the GPU (backend "cuda"), the device's
     * memory in use after the engine started (every process's, the CUDA
     * context included) and its total; both 0 on the cpu backend. */
    uint64_t mem_weights, mem_kv_pool, mem_work, device_used, device_total;
    /* Who shares the prefix cache's pages: "user" (requests of one uid),
     * "shared" (every client) or "off". */
    char prefix_cache[8];
    /* Speculative decoding: "ngram" or "off" (config speculate), and the
     * tokens drafted since start and of them accepted (0 for a user other
     * than root and the daemon's: they would tell what others send). */
    char speculate[8];
    uint64_t draft_tokens, draft_accepted;
    /* Errors the daemon sent to clients since it started (ERROR events and
     * Error datagrams, every client's), by code (enum l8_err); codes this
     * library does not know are not counted. */
    uint64_t errors[32];
    /* How long the daemon's loop and engine thread busy-wait for each other
     * before sleeping, in µs (0: they sleep at once; config spin_us). With
     * it a step's tokens reach the rings without a wake-up in between. */
    uint32_t spin_us;
    /* The configuration: its log level ("err" ... "debug"); the reloads
     * (SIGHUP: systemctl reload llama8d) that applied since start; why the
     * last one was refused ("" if it applied); the keys changed since start
     * that take effect at the next start, ", "-separated ("" if none). */
    char log_level[8];
    uint64_t config_reloads;
    char config_error[512];
    char config_restart[512];
    /* Clients connected at most (max_clients), and how many more root and
     * the daemon's own user may connect beyond them (admin_clients). */
    uint32_t max_clients, admin_clients;
    /* false: the daemon's figures (root and the daemon's user asked).
     * true: a user other than those asked, and requests_done,
     * tokens_generated, prompt_tokens, prompt_tokens_cached and errors are
     * that uid's own, since the daemon started; steps ... decode_rows,
     * fed_tokens and preemptions are 0 (they would tell when other users
     * send and how long their prompts are). */
    bool own_uid;
};
int l8c_status(struct l8c_client *c, struct l8c_status *out, int timeout_ms);
/* Has the daemon read its configuration again, as SIGHUP (systemctl reload)
 * does, and fills out with its status after it. 0: applied (out says which
 * changed keys wait for a restart); -EINVAL: the file was refused and the
 * running configuration kept (out->config_error and l8c_last_error say
 * why); -EPERM: only root and the daemon's own user may (the daemon then
 * closes the connection); -ESHUTDOWN or other errors as l8c_status. */
int l8c_reload(struct l8c_client *c, struct l8c_status *out, int timeout_ms);

/* One connected client as the daemon sees it (l8c_clients). */
struct l8c_client_info {
    uint64_t id;               /* its l8c_info()->client_id */
    char name[65];             /* the name it gave l8c_connect, as the daemon logs it */
    int32_t pid;               /* from its socket's credentials at connect */
    uint32_t uid;
    double connected_s;        /* since it connected */
    uint32_t requests;         /* in flight now (running or waiting) */
    uint32_t running;          /* of them, running (one of the step's max_batch slots) */
    uint32_t kv_pages;         /* KV pages they hold (a page two share counts twice) */
    uint64_t requests_done;    /* ended in any way since it connected */
    uint64_t prompt_tokens;    /* of the requests it submitted */
    uint64_t tokens_generated; /* delivered to it */
    bool held;                 /* its event ring is full: its requests wait for it to read */
};
/* The clients connected to the daemon that this connection may see (root
 * and the daemon's own user: all; anyone else: those of their own uid), in
 * connection order, this one included: the first cap into out, and in *n
 * how many there are (more than cap: ask again with room for them). The
 * daemon answers a page at a time, so a client that connects or leaves
 * meanwhile may be missing or listed. timeout_ms bounds the whole call.
 * 0, or errors as l8c_status. */
int l8c_clients(struct l8c_client *c, struct l8c_client_info *out, size_t cap, size_t *n,
                int timeout_ms);

/* Names for codes, for messages. */
const char *l8c_err_name(int code);
/* What an ERROR record says was wrong, in words, into buf (returned):
 * the field, the value the request gave and the daemon's limit when the
 * record names them (llama8_event.h enum l8_err_field), else what the code
 * means. Without the code's name: print l8c_err_name(e->code) beside it.
 * For L8_ERR_BAD_GRAMMAR the record has no room for where the text went
 * wrong: l8c_request_error(c, e->request_id) says it (NULL: use this). */
const char *l8c_error_text(const struct l8_event *e, char buf[L8C_ERRLEN]);
const char *l8c_done_name(int reason);
/* What a WAITING record says, in words, into buf (returned): "behind 3
 * requests", "for KV pages: needs 12, 4 free", "for a free sequence
 * slot (2 requests ahead)". */
const char *l8c_wait_text(const struct l8_event *e, char buf[L8C_ERRLEN]);
/* enum l8_wait as a word: "queue", "pages", "slots" ("?" otherwise). */
const char *l8c_wait_name(int reason);

/* CLOCK_MONOTONIC in ns, the clock of event t_ns fields. */
uint64_t l8c_now_ns(void);

/* ---------------------------------------------------------------- text in, text out
 * The one-call layer over the calls above (client_text.c): the served
 * model's tokenizer (found from the Welcome), the chat format, the stream
 * decoder and the special tokens are taken care of. A call runs one
 * request to its end and reads c's events meanwhile: events of other
 * requests on c are dropped, so give it a client of its own (or make the
 * requests with the calls above). */

/* The served model's tokenizer, loaded from l8c_info(c)->model_dir on
 * first use and kept until l8c_close; NULL when it cannot be loaded
 * (l8c_last_error says why). */
const l8tok *l8c_tokenizer(struct l8c_client *c);

/* How a reply ended. */
struct l8c_reply {
    int reason;                 /* enum l8_done (l8c_done_name); 0 after an error */
    uint32_t prompt_tokens;
    uint32_t cached_tokens;     /* of those, from the prefix cache */
    uint32_t tokens;            /* generated */
    int error;                  /* the daemon's code (enum l8_err, l8c_err_name), 0: none */
    char message[L8C_ERRLEN];   /* what went wrong, when the call failed */
};

/* Called with each piece of the reply's text as it arrives (whole UTF-8
 * characters, special tokens left out); a nonzero return cancels the
 * request (the reply then ends with reason "cancelled"). */
typedef int l8c_text_fn(void *arg, const char *text, size_t len);

/* Send msgs[n] in the Llama 3.1 chat format and stream the reply's text to
 * fn(arg, ...). p: the request's parameters (NULL: l8c_params_init's, with
 * max_new_tokens lowered to what the context holds after the prompt). out
 * (may be NULL) says how it ended. 0 when the reply ended (any reason);
 * otherwise a negative errno with out->message saying why: -EIO for a
 * request the daemon refused (out->error its code), -ENOENT without a
 * tokenizer, -EILSEQ for a message that is not UTF-8, or l8c_submit's and
 * l8c_wait_events' errors. */
int l8c_chat_stream(struct l8c_client *c, const struct l8chat_msg *msgs, size_t n,
                    const struct l8c_params *p, l8c_text_fn *fn, void *arg,
                    struct l8c_reply *out);
/* l8c_chat_stream of one user message, text (NUL-terminated). */
int l8c_generate_text(struct l8c_client *c, const char *text, const struct l8c_params *p,
                      l8c_text_fn *fn, void *arg, struct l8c_reply *out);

#ifdef __cplusplus
}
#endif
