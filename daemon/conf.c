/* conf.c - see conf.h. One table describes every key; the file parser and
 * the flag parser both go through l8d_conf_set(), so a key means the same
 * thing in both places. */
#include "conf.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l8_build.h"
#include "proto/l8_shm.h"
#include "read_file.h"
#include "scheduler.h"

enum kind { K_STR, K_U32, K_U64, K_INT, K_MODE, K_NUMERICS, K_BACKEND, K_LEVEL, K_BOOL,
            K_PREFIX_CACHE, K_SPIN, K_GEMV, K_SPECULATE };

/* A number's rules beyond its range. */
enum { KF_ZERO = 1,    /* 0 (the default's meaning) is allowed below min */
       KF_POW2 = 2 };  /* a power of two */

struct key {
    const char *name;
    enum kind kind;
    size_t off, size;
    const char *help;
    bool live;   /* a reload (SIGHUP) applies it to the running daemon */
    uint64_t min, max;   /* a number's range (K_U32, K_U64, K_INT, K_MODE, K_SPIN, K_GEMV) */
    unsigned flags;      /* KF_* */
};

/* LIVE: a reload applies the key to the running daemon; RESTART: it takes
 * effect at the next start (the model, the pool and the engine are built
 * once; per-client sizes are fixed at each client's handshake). */
#define LIVE true
#define RESTART false
#define F(field) offsetof(struct l8d_conf, field), sizeof(((struct l8d_conf *)0)->field)
#define R(lo, hi) .min = (lo), .max = (hi)
#define NO_RANGE .max = 0   /* not a number */
static const struct key keys[] = {
    { "model", K_STR, F(model), "DIR checkpoint directory (config.json, safetensors)", RESTART, NO_RANGE },
    { "socket", K_STR, F(socket), "PATH listening socket, unless systemd passes one (default $RUNTIME_DIRECTORY/llama8d.sock under systemd, else " L8D_DEFAULT_SOCKET ")", RESTART, NO_RANGE },
    { "kv_pages", K_U32, F(kv_pages), "N KV pool pages", RESTART,
      R(0, L8D_MAX_KV_PAGES) },
    { "kv_mib", K_U64, F(kv_mib), "MIB KV pool size when kv_pages is 0 (0: cuda one full context, cpu 1 GiB)", RESTART,
      R(0, L8D_MAX_KV_MIB) },
    { "page_size", K_U32, F(page_size), "N positions per KV page", RESTART,
      R(1, L8D_MAX_PAGE_SIZE) },
    { "max_batch", K_U32, F(max_batch), "N sequences per step", RESTART,
      R(1, L8_SCHED_MAX_SEQS) },
    { "max_step_tokens", K_U32, F(max_step_tokens), "N tokens per step (chunked prefill budget)", RESTART,
      R(1, L8D_MAX_STEP_TOKENS) },
    { "max_ctx", K_U32, F(max_ctx), "N prompt + new tokens per request (0: the model's)", RESTART,
      R(L8D_MIN_CTX, L8D_MAX_CTX), .flags = KF_ZERO },
    { "max_new_tokens", K_U32, F(max_new_tokens), "N new tokens per request (0: max_ctx)", RESTART,
      R(0, L8D_MAX_CTX) },
    { "max_clients", K_U32, F(max_clients), "N connected clients", LIVE,
      R(1, L8D_MAX_CONNECTIONS) },
    { "admin_clients", K_U32, F(admin_clients), "N more connections, beyond max_clients, for root and the daemon's user (a reload, a status)", LIVE,
      R(0, L8D_MAX_CONNECTIONS) },
    { "max_requests_per_client", K_U32, F(max_requests_per_client), "N requests in flight per client", RESTART,
      R(1, L8D_MAX_REQUESTS_PER_CLIENT) },
    { "max_requests", K_U32, F(max_requests), "N live requests in all", RESTART,
      R(1, L8D_MAX_REQUESTS) },
    { "max_clients_per_uid", K_U32, F(max_clients_per_uid), "N connections one uid may hold (at most max_clients)", LIVE,
      R(1, L8D_MAX_CONNECTIONS) },
    { "max_requests_per_uid", K_U32, F(max_requests_per_uid), "N live requests of one uid in all (at most max_requests)", RESTART,
      R(1, L8D_MAX_REQUESTS) },
    { "socket_mode", K_MODE, F(socket_mode), "MODE permissions of a socket we create (octal, 0660)", RESTART,
      R(0, 07777) },
    { "allowed_group", K_STR, F(allowed_group), "GROUP may connect (root always may)", RESTART, NO_RANGE },
    { "drain_timeout_ms", K_U32, F(drain_timeout_ms), "MS SIGTERM grace for running requests", LIVE,
      R(0, L8D_MAX_TIMEOUT_MS) },
    { "hello_timeout_ms", K_U32, F(hello_timeout_ms), "MS a new connection may take to say Hello before it is closed (0: forever)", LIVE,
      R(0, L8D_MAX_TIMEOUT_MS) },
    { "idle_exit_s", K_U32, F(idle_exit_s), "S with no client connected and no request, llama8d exits with status 0, giving its memory (the GPU's) back; under socket activation the next connection starts it again (0: never)", LIVE,
      R(0, L8D_MAX_IDLE_EXIT_S) },
    { "step_stall_ms", K_U32, F(step_stall_ms), "MS an engine step may run (plus 8x its expected time) before the watchdog pings stop (0: never)", LIVE,
      R(0, L8D_MAX_TIMEOUT_MS) },
    { "eq_entries", K_U32, F(eq_entries), "N event ring entries per client (power of two)", RESTART,
      R(64, L8_MAX_RING_ENTRIES), .flags = KF_POW2 },
    { "log_level", K_LEVEL, F(log_level), "LEVEL err|warning|notice|info|debug", LIVE, NO_RANGE },
    { "threads", K_INT, F(threads), "N engine threads (0: all cores)", RESTART,
      R(0, L8D_MAX_THREADS) },
    { "spin_us", K_SPIN, F(spin_us), "auto|US how long the event loop and the engine thread busy-wait for each other before sleeping (auto: 20000 on cuda with 4 or more cores, else 0)", LIVE,
      R(0, L8D_SPIN_MAX_US) },
    { "numerics", K_NUMERICS, F(numerics), "auto|exact|fp8 the arithmetic: exact f32, or FP8 products (auto: fp8 on cuda, exact on cpu)", RESTART, NO_RANGE },
    { "backend", K_BACKEND, F(backend), "auto|cpu|cuda (auto: cuda when it works here)", RESTART, NO_RANGE },
    { "tune_file", K_STR, F(tune_file), "PATH where the cuda engine keeps its measured GEMV/cuBLASLt crossover (default $CACHE_DIRECTORY/tune; empty: measured at every start)", RESTART, NO_RANGE },
    { "gemv_max_m", K_GEMV, F(gemv_max_m), "auto|N rows up to which every FP8 product runs through the cuda engine's GEMV, through cuBLASLt (its first algorithms) above (auto: each product's measured crossover, see tune_file; N is for measuring and leaves the tune file alone)", RESTART,
      R(0, L8D_AUTO - 1) },
    { "cuda_graphs", K_BOOL, F(cuda_graphs), "BOOL run the cuda engine's decode steps as CUDA graphs (default true; false launches them eagerly, for measuring)", RESTART, NO_RANGE },
    { "cuda_pdl", K_BOOL, F(cuda_pdl), "BOOL programmatic dependent launch of the cuda engine's kernels on sm_90 and later (default true; false is for measuring)", RESTART, NO_RANGE },
    { "profile_file", K_STR, F(profile_file), "PATH the cuda engine's step profile: the GPU time of each phase, logged and written to PATH as JSON when the daemon exits; turns decode graphs off (default empty: no profile)", RESTART, NO_RANGE },
    { "tokenizer", K_STR, F(tokenizer), "PATH the tokenizer.json whose token bytes constrained decoding works with (default MODEL/tokenizer.json; without one, requests with a constraint are refused)", RESTART, NO_RANGE },
    { "grammar_cache", K_U32, F(grammar_cache), "N compiled constraints (grammars, schemas, regular expressions) kept for requests that send the same text again", RESTART,
      R(0, L8D_MAX_GRAMMAR_CACHE) },
    { "prefix_cache", K_PREFIX_CACHE, F(prefix_cache), "user|shared|off who shares cached prompt pages (user: requests of one uid, so no client learns what another sent)", RESTART, NO_RANGE },
    { "speculate", K_SPECULATE, F(speculate), "auto|ngram|off speculative decoding: each decode step also verifies drafts taken from the request's prompt and reply and the uid's recent requests (ngram), the tokens the same as without (auto: ngram where the warm-up measures a step verifying 4 drafts at most 2x a one-token step, as on a GPU, else off; a request may turn it off)", RESTART, NO_RANGE },
    { "draft_max", K_U32, F(draft_max), "N most drafted tokens a request verifies in one step", RESTART,
      R(1, L8D_DRAFT_MAX) },
    { "lm_head_fp8", K_BOOL, F(lm_head_fp8), "BOOL cpu engine: quantize lm_head to FP8 at load, per-row scales as the checkpoint's projections (default false; half the bytes of a small model's decoded token)", RESTART, NO_RANGE },
    { "no_warmup", K_BOOL, F(no_warmup), "BOOL skip the warm-up step", RESTART, NO_RANGE },
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(N_KEYS <= 64, "struct l8d_conf's given has a bit per key");

/* The socket when neither the file nor a flag names one: in systemd's
 * RuntimeDirectory= (its first, RUNTIME_DIRECTORY may list several,
 * separated by ':') under the service, else L8D_DEFAULT_SOCKET. Returns
 * whether RUNTIME_DIRECTORY chose it. */
static bool default_socket(char *buf, size_t cap)
{
    const char *rt = getenv("RUNTIME_DIRECTORY");
    if (rt && *rt) {
        snprintf(buf, cap, "%.*s/llama8d.sock", (int)strcspn(rt, ":"), rt);
        return true;
    }
    snprintf(buf, cap, "%s", L8D_DEFAULT_SOCKET);
    return false;
}

void l8d_conf_defaults(struct l8d_conf *c)
{
    memset(c, 0, sizeof(*c));
    default_socket(c->socket, sizeof(c->socket));
    /* systemd's CacheDirectory=: kept across restarts, rebuilt if lost. */
    const char *cache = getenv("CACHE_DIRECTORY");
    if (cache && *cache)
        snprintf(c->tune_file, sizeof(c->tune_file), "%.*s/tune", (int)strcspn(cache, ":"), cache);
    snprintf(c->allowed_group, sizeof(c->allowed_group), "llama8");
    c->grammar_cache = 64;
    c->socket_mode = 0660;
    c->page_size = 16;
    c->max_batch = 64;
    c->max_step_tokens = 512;
    c->max_clients = 256;
    c->admin_clients = 2;
    c->max_requests_per_client = 64;
    c->max_requests = 4096;
    c->max_clients_per_uid = 64;
    c->max_requests_per_uid = 1024;
    c->drain_timeout_ms = 10000;
    c->hello_timeout_ms = 5000;
    c->step_stall_ms = 60000;
    c->eq_entries = 4096;
    c->numerics = L8_NUMERICS_AUTO;
    c->backend = L8_BACKEND_AUTO;
    c->spin_us = L8D_AUTO;
    c->gemv_max_m = L8D_AUTO;
    c->cuda_graphs = true;
    c->cuda_pdl = true;
    c->log_level = L8_LOG_INFO;
    c->speculate = L8D_SPECULATE_AUTO;
    c->draft_max = 8;
}

/* numerics and backend as the file writes them, by enum value. */
static const char *const numerics_words[] = {
    [L8_NUMERICS_EXACT] = "exact", [L8_NUMERICS_FP8] = "fp8", [L8_NUMERICS_AUTO] = "auto",
};
static const char *const backend_words[] = {
    [L8_BACKEND_CPU] = "cpu", [L8_BACKEND_CUDA] = "cuda", [L8_BACKEND_AUTO] = "auto",
};

const char *l8d_speculate_name(enum l8d_speculate m)
{
    return m == L8D_SPECULATE_NGRAM ? "ngram" : m == L8D_SPECULATE_AUTO ? "auto" : "off";
}

const char *l8d_prefix_cache_name(enum l8d_prefix_cache m)
{
    return m == L8D_PREFIX_CACHE_USER ? "user" : m == L8D_PREFIX_CACHE_SHARED ? "shared" : "off";
}

/* A number's digits, nothing else: no sign, no space, no base prefix
 * (strtoull takes "0x10" and reads "010" as 8). base 10 or 8; past
 * UINT64_MAX is 1 (out of range), not a digit is -EINVAL. */
static int parse_digits(const char *v, unsigned base, uint64_t *out)
{
    uint64_t x = 0;
    bool over = false;
    if (!*v)
        return -EINVAL;
    for (; *v; v++) {
        unsigned d = (unsigned)(*v - '0');
        if (*v < '0' || d >= base)
            return -EINVAL;
        over |= x > (UINT64_MAX - d) / base;
        x = x * base + d;
    }
    *out = over ? UINT64_MAX : x;
    return over;
}

static const struct key *find_key(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* "in [1, 65536]", "0 or in [2, 16777216]", "in [0, 07777]" */
static void range_text(const struct key *k, char *buf, size_t cap)
{
    if (k->kind == K_MODE)
        snprintf(buf, cap, "in [0, 0%llo]", (unsigned long long)k->max);
    else
        snprintf(buf, cap, "%sin [%llu, %llu]", k->flags & KF_ZERO ? "0 or " : "",
                 (unsigned long long)k->min, (unsigned long long)k->max);
}

/* A number for k within its rules, or -EINVAL with the message. */
static int parse_number(const struct key *k, const char *v, uint64_t *out, char err[L8D_ERRLEN])
{
    char range[64];
    uint64_t x;
    const bool octal = k->kind == K_MODE;
    const char *or_auto = k->kind == K_SPIN || k->kind == K_GEMV ? "auto or " : "";
    range_text(k, range, sizeof range);
    int r = parse_digits(v, octal ? 8 : 10, &x);
    if (r < 0) {
        snprintf(err, L8D_ERRLEN, "%s: bad value '%.64s': must be %s%s%s%s", k->name, v, or_auto,
                 octal ? "an octal mode" : "a decimal number", k->flags & KF_ZERO ? ", " : " ",
                 range);
        return -EINVAL;
    }
    if (r > 0 || x > k->max || (x < k->min && !(x == 0 && k->flags & KF_ZERO))) {
        snprintf(err, L8D_ERRLEN, "%s = %.64s: must be %s%s", k->name, v, or_auto, range);
        return -EINVAL;
    }
    if (k->flags & KF_POW2 && (x & (x - 1))) {
        snprintf(err, L8D_ERRLEN, "%s = %.64s: must be a power of two %s", k->name, v, range);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

int l8d_conf_set(struct l8d_conf *c, const char *key, const char *value,
                 char err[L8D_ERRLEN])
{
    const struct key *k = find_key(key);
    uint64_t u;
    if (!k) {
        snprintf(err, L8D_ERRLEN, "unknown key '%s'", key);
        return -ENOENT;
    }
    char *p = (char *)c + k->off;
    size_t len;
    switch (k->kind) {
    case K_STR:
        if ((len = strlen(value)) >= k->size) {
            snprintf(err, L8D_ERRLEN, "%s: a value of %zu bytes is too long (at most %zu)", key,
                     len, k->size - 1);
            return -EINVAL;
        }
        memcpy(p, value, len + 1);
        break;
    case K_U32:
    case K_MODE:
        if (parse_number(k, value, &u, err) < 0)
            return -EINVAL;
        *(uint32_t *)p = (uint32_t)u;
        break;
    case K_U64:
        if (parse_number(k, value, &u, err) < 0)
            return -EINVAL;
        *(uint64_t *)p = u;
        break;
    case K_INT:
        if (parse_number(k, value, &u, err) < 0)
            return -EINVAL;
        *(int *)p = (int)u;
        break;
    case K_BOOL:
        if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes"))
            *(bool *)p = true;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no"))
            *(bool *)p = false;
        else
            goto bad;
        break;
    case K_NUMERICS:
    case K_BACKEND: {
        const char *const *w = k->kind == K_NUMERICS ? numerics_words : backend_words;
        for (int m = 0; m < 3; m++)
            if (!strcmp(value, w[m])) {
                if (k->kind == K_NUMERICS)
                    *(enum l8_numerics *)p = (enum l8_numerics)m;
                else
                    *(enum l8_backend *)p = (enum l8_backend)m;
                goto set;
            }
        goto bad;
    }
    case K_SPIN:
    case K_GEMV:
        if (!strcmp(value, "auto")) {
            *(uint32_t *)p = L8D_AUTO;
            break;
        }
        if (parse_number(k, value, &u, err) < 0)
            return -EINVAL;
        *(uint32_t *)p = (uint32_t)u;
        break;
    case K_PREFIX_CACHE:
        for (int m = L8D_PREFIX_CACHE_USER; m <= L8D_PREFIX_CACHE_OFF; m++)
            if (!strcmp(value, l8d_prefix_cache_name(m))) {
                *(enum l8d_prefix_cache *)p = m;
                goto set;
            }
        goto bad;
    case K_LEVEL:
        if (l8_log_parse_level(value, (enum l8_log_level *)p) < 0)
            goto bad;
        break;
    case K_SPECULATE:
        for (int m = L8D_SPECULATE_OFF; m <= L8D_SPECULATE_AUTO; m++)
            if (!strcmp(value, l8d_speculate_name(m))) {
                *(enum l8d_speculate *)p = m;
                goto set;
            }
        goto bad;
    }
set:
    c->given |= 1ull << (k - keys);
    return 0;
bad:
    snprintf(err, L8D_ERRLEN, "%s: bad value '%.64s' (%s)", key, value, k->help);
    return -EINVAL;
}

/* The value of key k in c as the configuration spells it. */
static void format_value(const struct l8d_conf *c, const struct key *k, char *buf, size_t cap)
{
    const char *p = (const char *)c + k->off;
    switch (k->kind) {
    case K_STR:
        snprintf(buf, cap, "%s", p);
        break;
    case K_U32:
        snprintf(buf, cap, "%u", *(const uint32_t *)p);
        break;
    case K_MODE:
        snprintf(buf, cap, "0%o", *(const uint32_t *)p);
        break;
    case K_U64:
        snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p);
        break;
    case K_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        break;
    case K_BOOL:
        snprintf(buf, cap, "%s", *(const bool *)p ? "true" : "false");
        break;
    case K_NUMERICS:
        snprintf(buf, cap, "%s", numerics_words[*(const enum l8_numerics *)p]);
        break;
    case K_BACKEND:
        snprintf(buf, cap, "%s", backend_words[*(const enum l8_backend *)p]);
        break;
    case K_SPIN:
    case K_GEMV:
        if (*(const uint32_t *)p == L8D_AUTO)
            snprintf(buf, cap, "auto");
        else
            snprintf(buf, cap, "%u", *(const uint32_t *)p);
        break;
    case K_PREFIX_CACHE:
        snprintf(buf, cap, "%s", l8d_prefix_cache_name(*(const enum l8d_prefix_cache *)p));
        break;
    case K_LEVEL:
        snprintf(buf, cap, "%s", l8_log_level_name(*(const enum l8_log_level *)p));
        break;
    case K_SPECULATE:
        snprintf(buf, cap, "%s", l8d_speculate_name(*(const enum l8d_speculate *)p));
        break;
    }
}

unsigned l8d_conf_compare(const struct l8d_conf *was, const struct l8d_conf *now,
                          l8d_conf_change_fn *fn, void *ctx)
{
    char a[4096], b[4096];
    unsigned n = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        format_value(was, &keys[i], a, sizeof(a));
        format_value(now, &keys[i], b, sizeof(b));
        if (strcmp(a, b) != 0) {
            n++;
            if (fn)
                fn(keys[i].name, a, b, keys[i].live, ctx);
        }
    }
    return n;
}

void l8d_conf_take_live(struct l8d_conf *dst, const struct l8d_conf *src)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].live)
            memcpy((char *)dst + keys[i].off, (const char *)src + keys[i].off, keys[i].size);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = 0;
    return s;
}

int l8d_conf_parse(struct l8d_conf *c, const char *text, size_t len, const char *path,
                   char err[L8D_ERRLEN])
{
    char *copy = malloc(len + 1), msg[L8D_ERRLEN];
    int line = 0, rc = 0;
    if (!copy)
        return -ENOMEM;
    memcpy(copy, text, len);
    copy[len] = 0;
    /* strtok_r would skip empty lines and lose the line count. */
    for (char *s = copy, *end = copy + len; s; ) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        const size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        line++;
        /* The string functions below would end the line, or the file, there. */
        if (memchr(s, 0, n)) {
            snprintf(err, L8D_ERRLEN, "%.200s:%d: NUL byte", path, line);
            rc = -EINVAL;
            break;
        }
        s[n] = 0;
        char *l = trim(s);
        s = nl ? nl + 1 : NULL;
        if (!*l || *l == '#' || *l == ';')
            continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            snprintf(err, L8D_ERRLEN, "%.200s:%d: expected 'key = value'", path, line);
            rc = -EINVAL;
            break;
        }
        *eq = 0;
        char *k = trim(l), *v = trim(eq + 1);
        if (l8d_conf_set(c, k, v, msg) < 0) {
            snprintf(err, L8D_ERRLEN, "%.200s:%d: %.280s", path, line, msg);
            rc = -EINVAL;
            break;
        }
    }
    free(copy);
    return rc;
}

int l8d_conf_parse_text(struct l8d_conf *c, const char *text, const char *path,
                        char err[L8D_ERRLEN])
{
    return l8d_conf_parse(c, text, strlen(text), path, err);
}

/* read_file.c refuses what is not a regular file (/dev/zero, a FIFO) and a
 * file over L8D_CONF_MAX unread; the length, not the NUL, ends the text. */
static int load_file(struct l8d_conf *c, const char *path, bool must, char err[L8D_ERRLEN])
{
    char *buf;
    size_t len;
    int rc = l8_read_file(path, L8D_CONF_MAX, &buf, &len, err, L8D_ERRLEN);
    if (rc == -ENOENT && !must)
        return 0;
    if (rc < 0)
        return rc == -ENOMEM ? rc : -EINVAL;
    rc = l8d_conf_parse(c, buf, len, path, err);
    free(buf);
    return rc;
}

/* The line under --socket in the help: where c would listen, and why. */
static void usage_socket(FILE *f, const struct l8d_conf *c, const char *from)
{
    char def[sizeof c->socket];
    const bool rt = default_socket(def, sizeof def);
    fprintf(f, "  %-23s now: %s (%s)\n", "", from ? c->socket : def,
            from ? from
            : rt ? "from $RUNTIME_DIRECTORY" : "$RUNTIME_DIRECTORY is not set: not under systemd");
}

void l8d_conf_usage(FILE *f, const struct l8d_conf *c, const char *socket_from)
{
    fprintf(f, "Usage: llama8d --model DIR [--socket PATH] [options]\n"
               "Serve a Llama checkpoint to local clients over shared memory.\n\n"
               "  --config FILE           configuration file (default %s if present)\n",
            L8D_DEFAULT_CONF);
    for (size_t i = 0; i < N_KEYS; i++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s", keys[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        /* The help's first word is the value's placeholder: N, DIR, ... or
         * the values themselves (auto|exact|fp8). */
        const char *h = keys[i].help;
        size_t w = strcspn(h, " ");
        char both[96], range[64] = "";
        snprintf(both, sizeof(both), "%s %.*s", flag, (int)w, h);
        h += w + (h[w] == ' ');
        if (keys[i].max && keys[i].max < L8D_AUTO - 1) {   /* gemv_max_m: any row count */
            range[0] = ',';
            range[1] = ' ';
            range_text(&keys[i], range + 2, sizeof(range) - 2);
        }
        if (strlen(both) >= 23)  /* 2 spaces at least, or a line of its own */
            fprintf(f, "  %s\n  %-23s %s%s\n", both, "", h, range);
        else
            fprintf(f, "  %-23s %s%s\n", both, h, range);
        if (c && !strcmp(keys[i].name, "socket"))
            usage_socket(f, c, socket_from);
    }
    fprintf(f, "  --help, --version\n\n"
               "Every option is also a config-file key (kv_pages = 4096); flags win.\n"
               "A flag's value follows it or an '=' (--kv-pages 4096, --kv-pages=4096); a BOOL\n"
               "option alone is true (--no-warmup, last or before another option), and a value\n"
               "of false turns it off (--no-warmup=false); BOOL: true|false, yes|no, 1|0.\n"
               "SIGHUP (systemctl reload llama8d) reads the file and the flags again and\n"
               "applies");
    for (size_t i = 0, n = 0; i < N_KEYS; i++)
        if (keys[i].live)
            fprintf(f, "%s %s", n++ ? "," : "", keys[i].name);
    fprintf(f, ";\nthe other keys wait for a restart.\n");
}

static bool given(const struct l8d_conf *c, const char *name)
{
    const struct key *k = find_key(name);
    return k && c->given >> (k - keys) & 1;
}

/* A per-uid share above its whole: refused when given, lowered to the
 * whole when it is the default (max_clients = 8 alone must not be an
 * error about max_clients_per_uid's 64). */
static int fit_share(struct l8d_conf *c, uint32_t *share, const char *share_key, uint32_t all,
                     const char *all_key, char err[L8D_ERRLEN])
{
    if (*share <= all)
        return 0;
    if (given(c, share_key)) {
        snprintf(err, L8D_ERRLEN, "%s = %u: must be at most %s (%u)", share_key, *share, all_key,
                 all);
        return -EINVAL;
    }
    *share = all;
    return 0;
}

/* The rules between keys; each key's own range was checked when it was set. */
static int check_keys(struct l8d_conf *c, char err[L8D_ERRLEN])
{
    if (!c->model[0]) {
        snprintf(err, L8D_ERRLEN, "no model directory: give --model DIR or model = DIR in the config");
        return -EINVAL;
    }
    if (c->max_step_tokens < c->max_batch) {
        snprintf(err, L8D_ERRLEN, "max_step_tokens = %u: must be at least max_batch (%u), a token "
                                  "for each sequence of a step", c->max_step_tokens, c->max_batch);
        return -EINVAL;
    }
    if ((uint64_t)c->max_clients + c->admin_clients > L8D_MAX_CONNECTIONS) {
        snprintf(err, L8D_ERRLEN, "max_clients + admin_clients must be at most %u (%u + %u)",
                 L8D_MAX_CONNECTIONS, c->max_clients, c->admin_clients);
        return -EINVAL;
    }
    int rc = fit_share(c, &c->max_clients_per_uid, "max_clients_per_uid", c->max_clients,
                       "max_clients", err);
    if (rc == 0)
        rc = fit_share(c, &c->max_requests_per_uid, "max_requests_per_uid", c->max_requests,
                       "max_requests", err);
    return rc;
}

int l8d_conf_derive(const struct l8d_conf *c, uint32_t model_max_pos, struct l8d_sizes *out,
                    char err[L8D_ERRLEN])
{
    struct l8d_sizes z = { 0 };
    if (model_max_pos && model_max_pos < L8D_MIN_CTX) {
        snprintf(err, L8D_ERRLEN, "the model's max_position_embeddings (%u) is less than the %u "
                                  "positions of a request of one prompt token and one new token",
                 model_max_pos, L8D_MIN_CTX);
        return -EINVAL;
    }
    /* Not read yet: a model of the largest context config.c takes. */
    const uint32_t pos = model_max_pos && model_max_pos < L8D_MAX_CTX ? model_max_pos
                                                                      : L8D_MAX_CTX;
    z.max_ctx = c->max_ctx && c->max_ctx < pos ? c->max_ctx : pos;
    if (z.max_ctx < L8D_MIN_CTX) {
        snprintf(err, L8D_ERRLEN, "max_ctx = %u: must be 0 or in [%u, %u]", c->max_ctx,
                 L8D_MIN_CTX, L8D_MAX_CTX);
        return -EINVAL;
    }
    z.max_prompt = z.max_ctx - 1;
    z.max_new = c->max_new_tokens && c->max_new_tokens < z.max_prompt ? c->max_new_tokens
                                                                       : z.max_prompt;
    if (!c->page_size || c->page_size > L8D_MAX_PAGE_SIZE) {
        snprintf(err, L8D_ERRLEN, "page_size = %u: must be in [1, %u]", c->page_size,
                 L8D_MAX_PAGE_SIZE);
        return -EINVAL;
    }
    z.ctx_pages = (uint32_t)(((uint64_t)z.max_ctx + c->page_size - 1) / c->page_size);
    /* The engines index a pool position with 31 bits (the cuda engine's
     * slot mapping is int32): kv_pages of page_size positions must fit. */
    if ((uint64_t)c->kv_pages * c->page_size > INT32_MAX) {
        snprintf(err, L8D_ERRLEN, "kv_pages = %u of page_size = %u: %llu positions, more than "
                                  "the %u a KV pool may have", c->kv_pages, c->page_size,
                 (unsigned long long)c->kv_pages * c->page_size, (unsigned)INT32_MAX);
        return -EINVAL;
    }

    /* Submission ring: room for each request's submission and its cancel.
     * The range keeps it within what a client accepts; checked here too,
     * for a configuration that did not come through l8d_conf_set. */
    _Static_assert(2ull * L8D_MAX_REQUESTS_PER_CLIENT <= L8_MAX_RING_ENTRIES,
                   "a client's submission ring");
    if (!c->max_requests_per_client || c->max_requests_per_client > L8D_MAX_REQUESTS_PER_CLIENT) {
        snprintf(err, L8D_ERRLEN, "max_requests_per_client = %u: must be in [1, %u]",
                 c->max_requests_per_client, L8D_MAX_REQUESTS_PER_CLIENT);
        return -EINVAL;
    }
    uint64_t sq = 64;
    while (sq < 2ull * c->max_requests_per_client)
        sq <<= 1;
    z.sq_entries = (uint32_t)sq;
    z.eq_entries = c->eq_entries;
    if (!l8_is_pow2(z.eq_entries) || z.eq_entries < 64 || z.eq_entries > L8_MAX_RING_ENTRIES) {
        snprintf(err, L8D_ERRLEN, "eq_entries = %u: must be a power of two in [64, %u]",
                 c->eq_entries, L8_MAX_RING_ENTRIES);
        return -EINVAL;
    }
    /* The arena, a byte ring (client.c): a longest prompt (4 bytes a token),
     * a longest constraint and two messages, twice over, so that the next
     * request fits while the daemon has yet to copy the last; 1 MiB at least. */
    const uint64_t one = l8_align_up((uint64_t)z.max_prompt * 4 + L8_MAX_CONSTRAINT +
                                     2 * L8_MAX_REQ_MSG + 4096, 4096);
    if (one > L8_MAX_ARENA) {
        snprintf(err, L8D_ERRLEN, "max_ctx = %u: a prompt of %u tokens does not fit the %u MiB "
                                  "of a client's arena", z.max_ctx, z.max_prompt,
                 L8_MAX_ARENA >> 20);
        return -EINVAL;
    }
    uint64_t arena = one * 2 < (1u << 20) ? (1u << 20) : one * 2;
    z.arena_size = (uint32_t)(arena < L8_MAX_ARENA ? arena : L8_MAX_ARENA);
    struct l8_shm_hdr h;
    z.shm_size = l8_shm_layout(z.sq_entries, z.eq_entries, z.arena_size, &h);
    if (!z.shm_size) {
        snprintf(err, L8D_ERRLEN, "a client's shared memory (%u submissions, %u events, a "
                                  "%u-byte arena) is outside what clients accept "
                                  "(max_requests_per_client, eq_entries, max_ctx)",
                 z.sq_entries, z.eq_entries, z.arena_size);
        return -EINVAL;
    }
    *out = z;
    return 0;
}

int l8d_conf_from_args(struct l8d_conf *c, int argc, char **argv, char err[L8D_ERRLEN])
{
    const char *config = NULL;
    char key[64], msg[L8D_ERRLEN];
    int rc;
    bool help = false;
    l8d_conf_defaults(c);
    /* Pass 1: --config, --help, --version; pass 2 applies flags over the file. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help = true;   /* after the --config of the line, if it names one */
            continue;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("llama8d %s\n", L8_VERSION);
            return 1;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                if (help)
                    break;
                snprintf(err, L8D_ERRLEN, "--config needs a value");
                return -EINVAL;
            }
            config = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config = argv[i] + 9;
        }
    }
    if (help) {
        /* The socket line says where this configuration would listen: the
         * file's socket =, if it has one (a file with an error: the defaults). */
        struct l8d_conf fc;
        char from[sizeof fc.model + 32];
        l8d_conf_defaults(&fc);
        if (load_file(&fc, config ? config : L8D_DEFAULT_CONF, false, msg) < 0)
            l8d_conf_defaults(&fc);
        snprintf(from, sizeof from, "socket = in %s", config ? config : L8D_DEFAULT_CONF);
        for (int i = 1; i < argc; i++)
            if ((!strcmp(argv[i], "--socket") && i + 1 < argc &&
                 l8d_conf_set(&fc, "socket", argv[i + 1], msg) == 0) ||
                (!strncmp(argv[i], "--socket=", 9) &&
                 l8d_conf_set(&fc, "socket", argv[i] + 9, msg) == 0))
                snprintf(from, sizeof from, "--socket");
        l8d_conf_usage(stdout, &fc, given(&fc, "socket") ? from : NULL);
        return 1;
    }
    if ((rc = load_file(c, config ? config : L8D_DEFAULT_CONF, config != NULL, err)) < 0)
        return rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, L8D_ERRLEN, "unexpected argument '%s' (see --help)", a);
            return -EINVAL;
        }
        const char *eq = strchr(a, '=');
        size_t kl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (kl >= sizeof(key)) {
            snprintf(err, L8D_ERRLEN, "unknown option '%s'", a);
            return -EINVAL;
        }
        memcpy(key, a + 2, kl);
        key[kl] = 0;
        for (char *p = key; *p; p++)
            if (*p == '-')
                *p = '_';
        const struct key *k = find_key(key);
        if (strcmp(key, "config") && !k) {
            snprintf(err, L8D_ERRLEN, "unknown option '%.*s' (see --help)",
                     (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
            return -EINVAL;
        }
        if (eq) {
            v = eq + 1;
        } else if (k && k->kind == K_BOOL && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            v = "true";   /* a bare --no-warmup: no value follows it */
        } else {
            if (i + 1 >= argc) {
                snprintf(err, L8D_ERRLEN, "option '%s' needs a value", a);
                return -EINVAL;
            }
            v = argv[++i];
        }
        if (!strcmp(key, "config"))
            continue;
        if ((rc = l8d_conf_set(c, key, v, msg)) < 0) {
            memcpy(err, msg, L8D_ERRLEN);
            return -EINVAL;
        }
    }
    return check_keys(c, err);
}
