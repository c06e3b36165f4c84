/* conf.h - llama8d's configuration: /etc/llama8d/llama8d.conf (key = value
 * lines, '#' comments) overridden by command-line flags of the same names
 * (--kv-pages for kv_pages). */
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include "engine/engine.h"
#include "log.h"

#define L8D_DEFAULT_CONF "/etc/llama8d/llama8d.conf"
/* The socket outside systemd (RUNTIME_DIRECTORY unset) unless one is named. */
#define L8D_DEFAULT_SOCKET "/run/llama8d/llama8d.sock"
#define L8D_ERRLEN 512
/* llama8d.conf is a few hundred bytes; anything past this is not one. */
#define L8D_CONF_MAX (1u << 20)
#define L8D_SPIN_MAX_US 1000000u
/* max_clients + admin_clients: the session slots are an array. */
#define L8D_MAX_CONNECTIONS (1u << 20)
/* The settings' ranges (conf.c's key table), from what the daemon can
 * serve. A context: config.c's bound on max_position_embeddings; at least
 * a prompt token and a new token. */
#define L8D_MAX_CTX (1u << 24)
#define L8D_MIN_CTX 2u
/* Each client's requests: an array per client, and a submission ring of
 * twice as many entries that must stay within L8_MAX_RING_ENTRIES. */
#define L8D_MAX_REQUESTS_PER_CLIENT 65536u
/* Live requests in the daemon: the scheduler's id table, 2 buckets a request. */
#define L8D_MAX_REQUESTS (1u << 20)
/* The KV pool: kvpool.c keeps some 40 bytes a page and 4 a position on the
 * host; 16 TiB. The pool's positions must also fit 31 bits (l8d_conf_derive). */
#define L8D_MAX_KV_PAGES (1u << 24)
#define L8D_MAX_KV_MIB (1u << 24)
#define L8D_MAX_PAGE_SIZE 4096u
/* Tokens in one step: the engines' activations are sized by it. */
#define L8D_MAX_STEP_TOKENS (1u << 20)
#define L8D_MAX_THREADS 4096u
#define L8D_MAX_GRAMMAR_CACHE 65536u
/* The timeouts (ms): a day; idle_exit_s: a year. */
#define L8D_MAX_TIMEOUT_MS 86400000u
#define L8D_MAX_IDLE_EXIT_S 31536000u
/* spin_us = auto on the cuda engine: a decode step at any batch, or a
 * 512-token prefill chunk, ends inside it on the 8B model. */
#define L8D_SPIN_AUTO_US 20000u
/* spin_us and gemv_max_m given as "auto" (above every range). The file's
 * configuration keeps "auto" as read; what it came to lives in struct l8d. */
#define L8D_AUTO UINT32_MAX

/* Who shares prefix-cache pages. */
enum l8d_prefix_cache {
    L8D_PREFIX_CACHE_USER,     /* requests of one uid (the default) */
    L8D_PREFIX_CACHE_SHARED,   /* every client */
    L8D_PREFIX_CACHE_OFF,      /* nobody: every prompt is computed whole */
};

/* Speculative decoding (scheduler.h). */
enum l8d_speculate {
    L8D_SPECULATE_OFF,
    L8D_SPECULATE_NGRAM,       /* drafts from the request's tokens and the
                                  uid's recent requests */
    L8D_SPECULATE_AUTO,        /* ngram where a verification step costs little
                                  (measured at the warm-up), else off: the default */
};
/* draft_max's bound: a verification row is at most this many drafts + 1. */
#define L8D_DRAFT_MAX 16u

struct l8d_conf {
    char model[4096];          /* checkpoint directory (required) */
    char socket[108];          /* listening socket path (unless socket-activated) */
    char tune_file[4096];      /* where the cuda engine keeps its measured GEMV /
                                  cuBLASLt crossover ("" = nowhere) */
    char profile_file[4096];   /* the cuda engine's step profile, as JSON at exit
                                  ("" = no profile) */
    char tokenizer[4096];      /* constrained decoding's token bytes ("": the
                                  model directory's tokenizer.json) */
    uint32_t grammar_cache;    /* compiled constraints kept */
    char allowed_group[64];    /* group whose members may connect ("" = only root
                                  and the daemon's own uid) */
    uint32_t socket_mode;      /* permissions of a socket we create ourselves */
    uint32_t kv_pages;         /* pool pages (0 = from kv_mib) */
    uint64_t kv_mib;           /* pool size when kv_pages == 0 (0 = engine default) */
    uint32_t page_size;        /* positions per page */
    uint32_t max_batch;        /* sequences per step */
    uint32_t max_step_tokens;  /* token budget per step (chunked prefill) */
    uint32_t max_ctx;          /* prompt + new tokens per request (0 = model's) */
    uint32_t max_new_tokens;   /* per request cap (0 = max_ctx) */
    uint32_t max_clients;
    uint32_t admin_clients;    /* connections beyond max_clients that only root
                                  and the daemon's own uid may take */
    uint32_t max_requests_per_client;
    uint32_t max_requests;     /* live requests in the whole daemon */
    uint32_t max_clients_per_uid;  /* connections one uid may hold (<= max_clients) */
    uint32_t max_requests_per_uid; /* live requests of one uid in the daemon (<= max_requests) */
    uint32_t drain_timeout_ms; /* SIGTERM: how long running requests may finish */
    uint32_t hello_timeout_ms; /* no Hello this long after accept: closed (0: never) */
    uint32_t idle_exit_s;      /* no client and no request this long: exit 0 (0: never) */
    uint32_t step_stall_ms;    /* a step running this long plus its size allowance
                                  counts as hung: watchdog pings stop (0: never) */
    uint32_t eq_entries;       /* event ring size per client (power of two) */
    int threads;               /* engine threads (0 = all cores) */
    uint32_t spin_us;          /* the loop and the engine thread wait for each
                                  other this long without sleeping (µs);
                                  L8D_AUTO: L8D_SPIN_AUTO_US on cuda with cores
                                  to spare, else 0 (l8d_resolve_spin) */
    enum l8_numerics numerics; /* AUTO: fp8 on cuda (its fast path), exact on cpu */
    enum l8_backend backend;   /* AUTO: cuda if it works here, else cpu */
    uint32_t gemv_max_m;       /* cuda fp8: the GEMV up to this many rows for every
                                  product, cuBLASLt above (measuring); L8D_AUTO:
                                  each product's measured crossover (the default) */
    bool cuda_graphs;          /* decode steps as CUDA graphs (false: eager) */
    bool cuda_pdl;             /* programmatic dependent launch on sm_90+ */
    bool lm_head_fp8;          /* cpu engine: lm_head quantized to FP8 at load */
    enum l8d_prefix_cache prefix_cache;
    enum l8d_speculate speculate;
    uint32_t draft_max;        /* drafted tokens a request verifies per step */
    enum l8_log_level log_level;
    bool no_warmup;            /* skip the warm-up step (tests) */
    uint64_t given;            /* bit i: key i was set by the file or a flag; a
                                  default may be lowered to fit another key,
                                  a given value is refused */
};

void l8d_conf_defaults(struct l8d_conf *c);
/* "user", "shared" or "off": the configuration's spelling. */
const char *l8d_prefix_cache_name(enum l8d_prefix_cache m);
/* "off", "ngram" or "auto". */
const char *l8d_speculate_name(enum l8d_speculate m);
/* Apply a configuration file's len bytes. path only names it in messages.
 * -EINVAL with "path:line: ..." in err for an unknown key, a bad value or
 * a NUL byte. */
int l8d_conf_parse(struct l8d_conf *c, const char *text, size_t len, const char *path,
                   char err[L8D_ERRLEN]);
/* The same for a NUL-terminated text. */
int l8d_conf_parse_text(struct l8d_conf *c, const char *text, const char *path,
                        char err[L8D_ERRLEN]);
/* Set one key (config-file spelling) to a value: a number is decimal
 * (socket_mode octal) and within the key's range. -EINVAL/-ENOENT. */
int l8d_conf_set(struct l8d_conf *c, const char *key, const char *value,
                 char err[L8D_ERRLEN]);
/* Defaults, then the config file (--config FILE, or L8D_DEFAULT_CONF when it
 * exists), then the flags, then the checks between keys. "--key value" and
 * "--key=value" set a key; a K_BOOL key's flag with no value after it (the
 * last argument, or one starting "--" next) sets it true. Returns 0, 1 when
 * --help/--version was printed (exit 0), or -EINVAL with err set. */
int l8d_conf_from_args(struct l8d_conf *c, int argc, char **argv, char err[L8D_ERRLEN]);

/* What the daemon derives from the configuration and the model's context
 * length: the limits every client is told and the geometry of its shared
 * memory, each checked against what the client accepts (l8_shm.h). */
struct l8d_sizes {
    uint32_t max_ctx;          /* prompt + new tokens of a request */
    uint32_t max_prompt;       /* max_ctx - 1: a request has a new token */
    uint32_t max_new;          /* new tokens of a request */
    uint32_t ctx_pages;        /* KV pages of a whole context: a request's page table */
    uint32_t sq_entries;       /* a client's submission ring (power of two) */
    uint32_t eq_entries;       /* its event ring (power of two) */
    uint32_t arena_size;       /* its arena, bytes: a longest prompt, a constraint and
                                  messages, twice over */
    uint64_t shm_size;         /* its shared memory: both rings and the arena */
};
/* Derive them for a model of model_max_pos positions (max_position_embeddings;
 * 0: not known yet, checked as L8D_MAX_CTX). 0, or -EINVAL with err naming
 * the setting whose value no client could be served with. */
int l8d_conf_derive(const struct l8d_conf *c, uint32_t model_max_pos, struct l8d_sizes *out,
                    char err[L8D_ERRLEN]);
/* The --help text. c (may be NULL): the configuration as read so far, whose
 * socket the help names as the one it would use now; socket_from says where
 * c->socket came from ("--socket", "socket = in FILE"), NULL for the default
 * (then $RUNTIME_DIRECTORY says which). */
void l8d_conf_usage(FILE *f, const struct l8d_conf *c, const char *socket_from);

/* A reload (SIGHUP) reads the configuration again, file and flags, and
 * applies the keys that can change under a running daemon (log_level,
 * spin_us, max_clients, max_clients_per_uid and the timeouts: "live"); the
 * others take effect at the next start. */
typedef void l8d_conf_change_fn(const char *key, const char *was, const char *now, bool live,
                                void *ctx);
/* Calls fn (if not NULL) for each key whose value differs between was and
 * now, with both values as the configuration spells them; returns how
 * many differ. */
unsigned l8d_conf_compare(const struct l8d_conf *was, const struct l8d_conf *now,
                          l8d_conf_change_fn *fn, void *ctx);
/* Copies the live keys of src into dst. */
void l8d_conf_take_live(struct l8d_conf *dst, const struct l8d_conf *src);
