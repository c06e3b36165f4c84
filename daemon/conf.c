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
#include "read_file.h"
#include "scheduler.h"

enum kind { K_STR, K_U32, K_U64, K_INT, K_NUMERICS, K_BACKEND, K_LEVEL, K_BOOL, K_PREFIX_CACHE, K_SPIN,
            K_GEMV, K_SPECULATE };

struct key {
    const char *name;
    enum kind kind;
    size_t off, size;
    const char *help;
    bool live;   /* a reload (SIGHUP) applies it to the running daemon */
};

/* LIVE: a reload applies the key to the running daemon; RESTART: it takes
 * effect at the next start (the model, the pool and the engine are built
 * once; per-client sizes are fixed at each client's handshake). */
#define LIVE true
#define RESTART false
#define F(field) offsetof(struct l8d_conf, field), sizeof(((struct l8d_conf *)0)->field)
static const struct key keys[] = {
    { "model", K_STR, F(model), "DIR checkpoint directory (config.json, safetensors)", RESTART },
    { "socket", K_STR, F(socket), "PATH listening socket (default $RUNTIME_DIRECTORY/llama8d.sock)", RESTART },
    { "kv_pages", K_U32, F(kv_pages), "N KV pool pages", RESTART },
    { "kv_mib", K_U64, F(kv_mib), "MIB KV pool size when kv_pages is 0 (0: cuda one full context, cpu 1 GiB)", RESTART },
    { "page_size", K_U32, F(page_size), "N positions per KV page", RESTART },
    { "max_batch", K_U32, F(max_batch), "N sequences per step", RESTART },
    { "max_step_tokens", K_U32, F(max_step_tokens), "N tokens per step (chunked prefill budget)", RESTART },
    { "max_ctx", K_U32, F(max_ctx), "N prompt + new tokens per request (0: the model's)", RESTART },
    { "max_new_tokens", K_U32, F(max_new_tokens), "N new tokens per request (0: max_ctx)", RESTART },
    { "max_clients", K_U32, F(max_clients), "N connected clients", LIVE },
    { "admin_clients", K_U32, F(admin_clients), "N more connections, beyond max_clients, for root and the daemon's user (a reload, a status)", LIVE },
    { "max_requests_per_client", K_U32, F(max_requests_per_client), "N requests in flight per client", RESTART },
    { "max_requests", K_U32, F(max_requests), "N live requests in all", RESTART },
    { "socket_mode", K_U32, F(socket_mode), "MODE permissions of a socket we create (octal, 0660)", RESTART },
    { "allowed_group", K_STR, F(allowed_group), "GROUP may connect (root always may)", RESTART },
    { "drain_timeout_ms", K_U32, F(drain_timeout_ms), "MS SIGTERM grace for running requests", LIVE },
    { "hello_timeout_ms", K_U32, F(hello_timeout_ms), "MS a new connection may take to say Hello before it is closed (0: forever)", LIVE },
    { "idle_exit_s", K_U32, F(idle_exit_s), "S with no client connected and no request, llama8d exits with status 0, giving its memory (the GPU's) back; under socket activation the next connection starts it again (0: never)", LIVE },
    { "step_stall_ms", K_U32, F(step_stall_ms), "MS an engine step may run (plus 8x its expected time) before the watchdog pings stop (0: never)", LIVE },
    { "eq_entries", K_U32, F(eq_entries), "N event ring entries per client (power of two)", RESTART },
    { "log_level", K_LEVEL, F(log_level), "LEVEL err|warning|notice|info|debug", LIVE },
    { "threads", K_INT, F(threads), "N engine threads (0: all cores)", RESTART },
    { "spin_us", K_SPIN, F(spin_us), "auto|US how long the event loop and the engine thread busy-wait for each other before sleeping (auto: 20000 on cuda with 4 or more cores, else 0)", LIVE },
    { "numerics", K_NUMERICS, F(numerics), "auto|exact|fp8 the arithmetic: exact f32, or FP8 products (auto: fp8 on cuda, exact on cpu)", RESTART },
    { "backend", K_BACKEND, F(backend), "auto|cpu|cuda (auto: cuda when it works here)", RESTART },
    { "tune_file", K_STR, F(tune_file), "PATH where the cuda engine keeps its measured GEMV/cuBLASLt crossover (default $CACHE_DIRECTORY/tune; empty: measured at every start)", RESTART },
    { "gemv_max_m", K_GEMV, F(gemv_max_m), "auto|N rows up to which every FP8 product runs through the cuda engine's GEMV, through cuBLASLt (its first algorithms) above (auto: each product's measured crossover, see tune_file; N is for measuring and leaves the tune file alone)", RESTART },
    { "cuda_graphs", K_BOOL, F(cuda_graphs), "BOOL run the cuda engine's decode steps as CUDA graphs (default true; false launches them eagerly, for measuring)", RESTART },
    { "cuda_pdl", K_BOOL, F(cuda_pdl), "BOOL programmatic dependent launch of the cuda engine's kernels on sm_90 and later (default true; false is for measuring)", RESTART },
    { "profile_file", K_STR, F(profile_file), "PATH the cuda engine's step profile: the GPU time of each phase, logged and written to PATH as JSON when the daemon exits; turns decode graphs off (default empty: no profile)", RESTART },
    { "tokenizer", K_STR, F(tokenizer), "PATH the tokenizer.json whose token bytes constrained decoding works with (default MODEL/tokenizer.json; without one, requests with a constraint are refused)", RESTART },
    { "grammar_cache", K_U32, F(grammar_cache), "N compiled constraints (grammars, schemas, regular expressions) kept for requests that send the same text again", RESTART },
    { "prefix_cache", K_PREFIX_CACHE, F(prefix_cache), "user|shared|off who shares cached prompt pages (user: requests of one uid, so no client learns what another sent)", RESTART },
    { "speculate", K_SPECULATE, F(speculate), "auto|ngram|off speculative decoding: each decode step also verifies drafts taken from the request's prompt and reply and the uid's recent requests (ngram), the tokens the same as without (auto: ngram where the warm-up measures a step verifying 4 drafts at most 2x a one-token step, as on a GPU, else off; a request may turn it off)", RESTART },
    { "draft_max", K_U32, F(draft_max), "N most drafted tokens a request verifies in one step (1-16)", RESTART },
    { "lm_head_fp8", K_BOOL, F(lm_head_fp8), "BOOL cpu engine: quantize lm_head to FP8 at load, per-row scales as the checkpoint's projections (default false; half the bytes of a small model's decoded token)", RESTART },
    { "no_warmup", K_BOOL, F(no_warmup), "BOOL skip the warm-up step", RESTART },
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

void l8d_conf_defaults(struct l8d_conf *c)
{
    memset(c, 0, sizeof(*c));
    const char *rt = getenv("RUNTIME_DIRECTORY");
    /* RUNTIME_DIRECTORY may list several, separated by ':'; take the first. */
    if (rt && *rt) {
        size_t n = strcspn(rt, ":");
        snprintf(c->socket, sizeof(c->socket), "%.*s/llama8d.sock", (int)n, rt);
    } else {
        snprintf(c->socket, sizeof(c->socket), "/run/llama8d/llama8d.sock");
    }
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
    c->drain_timeout_ms = 10000;
    c->hello_timeout_ms = 5000;
    c->step_stall_ms = 60000;
    c->eq_entries = 4096;
    c->numerics = L8_NUMERICS_EXACT;
    c->numerics_auto = true;
    c->backend = L8_BACKEND_CPU;
    c->backend_auto = true;
    c->spin_auto = true;
    c->gemv_max_m_auto = true;
    c->cuda_graphs = true;
    c->cuda_pdl = true;
    c->log_level = L8_LOG_INFO;
    c->speculate = L8D_SPECULATE_AUTO;
    c->draft_max = 8;
}

const char *l8d_speculate_name(enum l8d_speculate m)
{
    return m == L8D_SPECULATE_NGRAM ? "ngram" : m == L8D_SPECULATE_AUTO ? "auto" : "off";
}

const char *l8d_prefix_cache_name(enum l8d_prefix_cache m)
{
    return m == L8D_PREFIX_CACHE_USER ? "user" : m == L8D_PREFIX_CACHE_SHARED ? "shared" : "off";
}

static int parse_u64(const char *v, uint64_t max, uint64_t *out)
{
    char *end;
    if (*v < '0' || *v > '9')   /* strtoull would skip \f\v\r and take a sign */
        return -EINVAL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end || x > max)
        return -EINVAL;
    *out = x;
    return 0;
}

static const struct key *find_key(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
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
    switch (k->kind) {
    case K_STR:
        if (strlen(value) >= k->size) {
            snprintf(err, L8D_ERRLEN, "%s: value longer than %zu bytes", key, k->size - 1);
            return -EINVAL;
        }
        memcpy(p, value, strlen(value) + 1);
        return 0;
    case K_U32:
        if (parse_u64(value, UINT32_MAX, &u) < 0)
            goto bad;
        *(uint32_t *)p = (uint32_t)u;
        return 0;
    case K_U64:
        if (parse_u64(value, UINT64_MAX >> 20, &u) < 0)     /* MiB whose bytes fit */
            goto bad;
        *(uint64_t *)p = u;
        return 0;
    case K_INT:
        if (parse_u64(value, 4096, &u) < 0)
            goto bad;
        *(int *)p = (int)u;
        return 0;
    case K_BOOL:
        if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes"))
            *(bool *)p = true;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no"))
            *(bool *)p = false;
        else
            goto bad;
        return 0;
    case K_NUMERICS:
        c->numerics_auto = !strcmp(value, "auto");
        if (c->numerics_auto)
            return 0;
        if (!strcmp(value, "exact"))
            *(enum l8_numerics *)p = L8_NUMERICS_EXACT;
        else if (!strcmp(value, "fp8"))
            *(enum l8_numerics *)p = L8_NUMERICS_FP8;
        else
            goto bad;
        return 0;
    case K_BACKEND:
        c->backend_auto = false;
        if (!strcmp(value, "cpu"))
            *(enum l8_backend *)p = L8_BACKEND_CPU;
        else if (!strcmp(value, "cuda"))
            *(enum l8_backend *)p = L8_BACKEND_CUDA;
        else if (!strcmp(value, "auto"))
            c->backend_auto = true;
        else
            goto bad;
        return 0;
    case K_SPIN:
        c->spin_auto = !strcmp(value, "auto");
        if (c->spin_auto)
            return 0;
        if (parse_u64(value, L8D_SPIN_MAX_US, &u) < 0)
            goto bad;
        *(uint32_t *)p = (uint32_t)u;
        return 0;
    case K_GEMV:
        if (!strcmp(value, "auto")) {
            c->gemv_max_m_auto = true;
            return 0;
        }
        if (parse_u64(value, UINT32_MAX, &u) < 0)
            goto bad;
        *(uint32_t *)p = (uint32_t)u;
        c->gemv_max_m_auto = false;
        return 0;
    case K_PREFIX_CACHE:
        for (int m = L8D_PREFIX_CACHE_USER; m <= L8D_PREFIX_CACHE_OFF; m++)
            if (!strcmp(value, l8d_prefix_cache_name(m))) {
                *(enum l8d_prefix_cache *)p = m;
                return 0;
            }
        goto bad;
    case K_LEVEL:
        if (l8_log_parse_level(value, (enum l8_log_level *)p) < 0)
            goto bad;
        return 0;
    case K_SPECULATE:
        for (int m = L8D_SPECULATE_OFF; m <= L8D_SPECULATE_AUTO; m++)
            if (!strcmp(value, l8d_speculate_name(m))) {
                *(enum l8d_speculate *)p = m;
                return 0;
            }
        goto bad;
    }
bad:
    snprintf(err, L8D_ERRLEN, "%s: bad value '%s' (%s)", key, value, k->help);
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
        snprintf(buf, cap, k->off == offsetof(struct l8d_conf, socket_mode) ? "0%o" : "%u",
                 *(const uint32_t *)p);
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
        snprintf(buf, cap, "%s", c->numerics_auto ? "auto"
                 : *(const enum l8_numerics *)p == L8_NUMERICS_FP8 ? "fp8" : "exact");
        break;
    case K_BACKEND:
        snprintf(buf, cap, "%s", c->backend_auto ? "auto"
                 : *(const enum l8_backend *)p == L8_BACKEND_CUDA ? "cuda" : "cpu");
        break;
    case K_SPIN:
        if (c->spin_auto)
            snprintf(buf, cap, "auto");
        else
            snprintf(buf, cap, "%u", *(const uint32_t *)p);
        break;
    case K_GEMV:
        if (c->gemv_max_m_auto)
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
    dst->spin_auto = src->spin_auto;   /* spin_us's "auto" lives beside it */
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

int l8d_conf_parse_text(struct l8d_conf *c, const char *text, const char *path,
                        char err[L8D_ERRLEN])
{
    char *copy = strdup(text), msg[L8D_ERRLEN];
    int line = 0, rc = 0;
    if (!copy)
        return -ENOMEM;
    /* strtok_r would skip empty lines and lose the line count. */
    for (char *s = copy; s; ) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = 0;
        line++;
        char *l = trim(s);
        s = nl ? nl + 1 : NULL;
        if (!*l || *l == '#' || *l == ';')
            continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            snprintf(err, L8D_ERRLEN, "%s:%d: expected 'key = value'", path, line);
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

static int load_file(struct l8d_conf *c, const char *path, bool must, char err[L8D_ERRLEN])
{
    char *buf;
    int rc = l8_read_file(path, L8D_CONF_MAX, &buf, NULL, err, L8D_ERRLEN);
    if (rc == -ENOENT && !must)
        return 0;
    if (rc < 0)
        return rc == -ENOMEM ? rc : -EINVAL;
    rc = l8d_conf_parse_text(c, buf, path, err);
    free(buf);
    return rc;
}

void l8d_conf_usage(FILE *f)
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
        char both[96];
        snprintf(both, sizeof(both), "%s %.*s", flag, (int)w, h);
        h += w + (h[w] == ' ');
        if (strlen(both) >= 23)  /* 2 spaces at least, or a line of its own */
            fprintf(f, "  %s\n  %-23s %s\n", both, "", h);
        else
            fprintf(f, "  %-23s %s\n", both, h);
    }
    fprintf(f, "  --help, --version\n\n"
               "Every option is also a config-file key (kv_pages = 4096); flags win.\n"
               "SIGHUP (systemctl reload llama8d) reads the file and the flags again and\n"
               "applies");
    for (size_t i = 0, n = 0; i < N_KEYS; i++)
        if (keys[i].live)
            fprintf(f, "%s %s", n++ ? "," : "", keys[i].name);
    fprintf(f, ";\nthe other keys wait for a restart.\n");
}

int l8d_conf_from_args(struct l8d_conf *c, int argc, char **argv, char err[L8D_ERRLEN])
{
    const char *config = NULL;
    char key[64], msg[L8D_ERRLEN];
    int rc;
    l8d_conf_defaults(c);
    /* Pass 1: --config, --help, --version; pass 2 applies flags over the file. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            l8d_conf_usage(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("llama8d %s\n", L8_VERSION);
            return 1;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                snprintf(err, L8D_ERRLEN, "--config needs a value");
                return -EINVAL;
            }
            config = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config = argv[i] + 9;
        }
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
        if (strcmp(key, "config") && !find_key(key)) {
            snprintf(err, L8D_ERRLEN, "unknown option '%.*s' (see --help)",
                     (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
            return -EINVAL;
        }
        if (eq) {
            v = eq + 1;
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
    if (!c->model[0]) {
        snprintf(err, L8D_ERRLEN, "no model directory: give --model DIR or model = DIR in the config");
        return -EINVAL;
    }
    if (!(c->eq_entries && !(c->eq_entries & (c->eq_entries - 1))) || c->eq_entries < 64 || c->eq_entries > (1u << 20)) {
        snprintf(err, L8D_ERRLEN, "eq_entries must be a power of two in [64, 1048576]");
        return -EINVAL;
    }
    if (!c->page_size || !c->max_batch || !c->max_step_tokens || !c->max_clients ||
        !c->max_requests_per_client || c->max_step_tokens < c->max_batch) {
        snprintf(err, L8D_ERRLEN, "page_size, max_batch, max_step_tokens (>= max_batch), "
                                  "max_clients and max_requests_per_client must be positive");
        return -EINVAL;
    }
    if (c->max_batch > L8_SCHED_MAX_SEQS) {
        snprintf(err, L8D_ERRLEN, "max_batch must be at most %u", L8_SCHED_MAX_SEQS);
        return -EINVAL;
    }
    if (c->draft_max < 1 || c->draft_max > L8D_DRAFT_MAX) {
        snprintf(err, L8D_ERRLEN, "draft_max must be in [1, %u]", L8D_DRAFT_MAX);
        return -EINVAL;
    }
    if ((uint64_t)c->max_clients + c->admin_clients > L8D_MAX_CONNECTIONS) {
        snprintf(err, L8D_ERRLEN, "max_clients + admin_clients must be at most %u",
                 L8D_MAX_CONNECTIONS);
        return -EINVAL;
    }
    return 0;
}
