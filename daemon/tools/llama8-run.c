/* llama8-run - run the engine in-process on a token prompt, no daemon.
 *
 *   llama8-run --model DIR --tokens 1,2,3 [--max-new N] [--backend cpu|cuda]
 *              [--numerics exact|fp8] [sampling options] [--logits-out F]
 *              [--json]
 *
 * --logits-out FILE.safetensors writes (all little-endian, row-major):
 *   "prompt_logits"  F32 [S, vocab]  logits after every prompt position
 *   "gen_logits"     F32 [N, vocab]  gen_logits[k] = the logits generated
 *                                    token k was sampled from (so
 *                                    gen_logits[0] == prompt_logits[S-1])
 *   "tokens"         I32 [S + N]     the prompt followed by the N
 *                                    generated tokens (a stop token that
 *                                    ended generation included)
 * and __metadata__ {"backend", "numerics", "model"}.
 *
 * Exit status: 0 ok, 1 runtime failure, 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "model.h"
#include "safetensors.h"
#include "l8_build.h"

#define DEFAULT_PAGE_SIZE 16u
#define MAX_STOP 64

struct opts {
    const char *model, *tokens, *tokens_file, *logits_out, *tune_file;
    enum l8_backend backend;
    enum l8_numerics numerics;
    uint32_t max_new, chunk, page_size;
    int threads;
    struct l8_sampling sp;
    uint32_t stop[MAX_STOP];
    uint32_t n_stop;
    bool stop_given, ignore_eos, json, warmup;
};

static void usage(FILE *f)
{
    fprintf(f,
"usage: llama8-run --model DIR (--tokens 1,2,3 | --tokens-file FILE) [options]\n"
"\n"
"Runs the model in-process on a prompt of token ids and prints the generated\n"
"ids (one line on stdout; timings on stderr).\n"
"\n"
"  --model DIR              Hugging Face checkpoint directory\n"
"  --tokens LIST            prompt ids separated by commas or spaces\n"
"  --tokens-file FILE       prompt ids from a file (commas / whitespace)\n"
"  --max-new N              tokens to generate (default 16)\n"
"  --backend cpu|cuda       engine (default cpu)\n"
"  --numerics exact|fp8     exact: f32 activations; fp8: activations quantized\n"
"                           per token to E4M3 (default exact)\n"
"  --temperature T          0 = greedy (default 0)\n"
"  --top-k K                0 = off (default 0)\n"
"  --top-p P                1 = off (default 1)\n"
"  --min-p P                0 = off (default 0)\n"
"  --repetition-penalty R   1 = off (default 1)\n"
"  --seed S                 sampling seed (default 0)\n"
"  --stop ID                stop after generating ID (repeatable; default: the\n"
"                           config's eos ids, none with --ignore-eos)\n"
"  --ignore-eos             do not stop at eos\n"
"  --chunk N                prefill chunk size (default: whole prompt)\n"
"  --page-size N            KV page size in positions (default 16)\n"
"  --threads N              cpu threads (default 0 = all cores)\n"
"  --logits-out FILE        write f32 logits as safetensors: \"prompt_logits\"\n"
"                           [S, vocab] for every prompt position, \"gen_logits\"\n"
"                           [N, vocab] the logits each generated token was\n"
"                           sampled from, \"tokens\" I32 [S+N] prompt+generated\n"
"  --warmup                 run the prompt and two decode steps once, untimed,\n"
"                           before the timed run: first-use costs (cuBLASLt's\n"
"                           heuristics, decode graph capture) out of the figures\n"
"  --tune-file FILE         cuda fp8: keep the measured GEMV / cuBLASLt crossover\n"
"                           in FILE and take it from there next time (default:\n"
"                           measured every run)\n"
"  --json                   print one JSON object instead (tokens, stop_reason,\n"
"                           load_s, prefill_ms, decode_tokens_per_s, ...)\n"
"  --help                   this text\n"
"\n"
"Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-')
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int parse_f(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Ids separated by commas and/or whitespace. Returns the count or -EINVAL. */
static long parse_ids(const char *s, uint32_t **out)
{
    size_t cap = 64, n = 0;
    uint32_t *v = malloc(cap * sizeof(uint32_t));
    if (!v)
        return -ENOMEM;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        unsigned long x = strtoul(p, &end, 10);
        if (errno || end == p || x > UINT32_MAX || *p == '-'
            || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'
                && *end != '\r')) {
            free(v);
            return -EINVAL;
        }
        if (n == cap) {
            uint32_t *nv = realloc(v, 2 * cap * sizeof(uint32_t));
            if (!nv) {
                free(v);
                return -ENOMEM;
            }
            v = nv;
            cap *= 2;
        }
        v[n++] = (uint32_t)x;
        p = end;
    }
    *out = v;
    return (long)n;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n - 1, f);
        n += r;
        if (n < cap - 1)
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (b)
        b[n] = 0;
    if (ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    enum { O_MODEL = 256, O_TOKENS, O_TOKENS_FILE, O_MAX_NEW, O_BACKEND, O_NUMERICS,
           O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REP, O_SEED, O_STOP, O_IGNORE_EOS, O_CHUNK,
           O_PAGE, O_THREADS, O_LOGITS, O_JSON, O_WARMUP, O_TUNE, O_HELP };
    static const struct option lo[] = {
        { "model", required_argument, 0, O_MODEL },
        { "tokens", required_argument, 0, O_TOKENS },
        { "tokens-file", required_argument, 0, O_TOKENS_FILE },
        { "max-new", required_argument, 0, O_MAX_NEW },
        { "backend", required_argument, 0, O_BACKEND },
        { "numerics", required_argument, 0, O_NUMERICS },
        { "temperature", required_argument, 0, O_TEMP },
        { "top-k", required_argument, 0, O_TOPK },
        { "top-p", required_argument, 0, O_TOPP },
        { "min-p", required_argument, 0, O_MINP },
        { "repetition-penalty", required_argument, 0, O_REP },
        { "seed", required_argument, 0, O_SEED },
        { "stop", required_argument, 0, O_STOP },
        { "ignore-eos", no_argument, 0, O_IGNORE_EOS },
        { "chunk", required_argument, 0, O_CHUNK },
        { "page-size", required_argument, 0, O_PAGE },
        { "threads", required_argument, 0, O_THREADS },
        { "logits-out", required_argument, 0, O_LOGITS },
        { "json", no_argument, 0, O_JSON },
        { "warmup", no_argument, 0, O_WARMUP },
        { "tune-file", required_argument, 0, O_TUNE },
        { "help", no_argument, 0, O_HELP },
        { 0, 0, 0, 0 },
    };
    *o = (struct opts){ .backend = L8_BACKEND_CPU, .numerics = L8_NUMERICS_EXACT,
                        .max_new = 16, .page_size = DEFAULT_PAGE_SIZE,
                        .sp = { .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                                .min_p = 0.0f, .repetition_penalty = 1.0f, .seed = 0 } };
    int c;
    uint32_t u;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        const char *a = optarg;
        int bad = 0;
        switch (c) {
        case O_MODEL: o->model = a; break;
        case O_TOKENS: o->tokens = a; break;
        case O_TOKENS_FILE: o->tokens_file = a; break;
        case O_MAX_NEW: bad = parse_u32(a, &o->max_new); break;
        case O_BACKEND:
            if (!strcmp(a, "cpu")) o->backend = L8_BACKEND_CPU;
            else if (!strcmp(a, "cuda")) o->backend = L8_BACKEND_CUDA;
            else bad = 1;
            break;
        case O_NUMERICS:
            if (!strcmp(a, "exact")) o->numerics = L8_NUMERICS_EXACT;
            else if (!strcmp(a, "fp8")) o->numerics = L8_NUMERICS_FP8;
            else bad = 1;
            break;
        case O_TEMP: bad = parse_f(a, &o->sp.temperature); break;
        case O_TOPK: bad = parse_u32(a, &o->sp.top_k); break;
        case O_TOPP:
            bad = parse_f(a, &o->sp.top_p) || !(o->sp.top_p > 0.0f && o->sp.top_p <= 1.0f);
            break;
        case O_MINP:
            bad = parse_f(a, &o->sp.min_p) || !(o->sp.min_p >= 0.0f && o->sp.min_p <= 1.0f);
            break;
        case O_REP:
            bad = parse_f(a, &o->sp.repetition_penalty) || !(o->sp.repetition_penalty > 0.0f);
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            o->sp.seed = strtoull(a, &end, 0);
            bad = errno || end == a || *end || a[0] == '-';
            break;
        }
        case O_STOP:
            if (o->n_stop == MAX_STOP || parse_u32(a, &u)) {
                bad = 1;
                break;
            }
            o->stop[o->n_stop++] = u;
            o->stop_given = true;
            break;
        case O_IGNORE_EOS: o->ignore_eos = true; break;
        case O_CHUNK: bad = parse_u32(a, &o->chunk) || o->chunk == 0; break;
        case O_PAGE: bad = parse_u32(a, &o->page_size) || o->page_size == 0; break;
        case O_THREADS: bad = parse_u32(a, &u) || u > 4096; o->threads = (int)u; break;
        case O_LOGITS: o->logits_out = a; break;
        case O_JSON: o->json = true; break;
        case O_WARMUP: o->warmup = true; break;
        case O_TUNE: o->tune_file = a; break;
        case O_HELP: usage(stdout); exit(0);
        default:
            fprintf(stderr, "llama8-run: unknown or incomplete option %s\n", argv[optind - 1]);
            return -EINVAL;
        }
        if (bad) {
            fprintf(stderr, "llama8-run: bad value for --%s: %s\n", lo[c - O_MODEL].name, a);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "llama8-run: unexpected argument %s\n", argv[optind]);
        return -EINVAL;
    }
    if (!o->model) {
        fprintf(stderr, "llama8-run: --model is required\n");
        return -EINVAL;
    }
    if (!o->tokens == !o->tokens_file) {
        fprintf(stderr, "llama8-run: give exactly one of --tokens and --tokens-file\n");
        return -EINVAL;
    }
    return 0;
}

static int write_logits(const char *path, const struct opts *o, const struct l8_model *m,
                        const float *prompt_logits, uint32_t S, const float *gen_logits,
                        uint32_t N, const uint32_t *all_tokens)
{
    char err[L8_ERRLEN];
    const uint64_t V = m->cfg.vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (S + N));
    if (!tok)
        return -ENOMEM;
    for (uint32_t i = 0; i < S + N; i++)
        tok[i] = (int32_t)all_tokens[i];
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "backend", json_object_new_string(l8_backend_name(o->backend)));
    json_object_object_add(meta, "numerics", json_object_new_string(
                               o->numerics == L8_NUMERICS_FP8 ? "fp8" : "exact"));
    json_object_object_add(meta, "model", json_object_new_string(o->model));
    struct l8_st_writer *w;
    int r = l8_st_writer_open(path, &w, err);
    if (r == 0) {
        const uint64_t sp[2] = { S, V }, sg[2] = { N, V }, st[1] = { S + N };
        if ((r = l8_st_writer_add(w, "prompt_logits", L8_F32, 2, sp, prompt_logits)) == 0
            && (r = l8_st_writer_add(w, "gen_logits", L8_F32, 2, sg, gen_logits)) == 0
            && (r = l8_st_writer_add(w, "tokens", L8_I32, 1, st, tok)) == 0)
            r = l8_st_writer_finish(w, json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN),
                                    err);
        else
            snprintf(err, sizeof(err), "adding tensors failed (%d)", r);
    }
    if (r < 0)
        fprintf(stderr, "llama8-run: --logits-out %s: %s\n", path, err);
    json_object_put(meta);
    free(tok);
    return r;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_args(argc, argv, &o) < 0) {
        fprintf(stderr, "Try 'llama8-run --help'.\n");
        return 2;
    }
    uint32_t *prompt = NULL;
    long S;
    if (o.tokens_file) {
        char *txt = read_file(o.tokens_file);
        if (!txt) {
            fprintf(stderr, "llama8-run: cannot read %s: %s\n", o.tokens_file, strerror(errno));
            return 2;
        }
        S = parse_ids(txt, &prompt);
        free(txt);
    } else {
        S = parse_ids(o.tokens, &prompt);
    }
    if (S <= 0) {
        fprintf(stderr, "llama8-run: %s: no valid token ids\n",
                o.tokens_file ? o.tokens_file : "--tokens");
        if (S == 0)
            free(prompt);
        return 2;
    }

    int rc = 1;
    char err[L8_ERRLEN];
    struct l8_model *m = NULL;
    struct l8_engine *e = NULL;
    uint32_t *all = NULL, *pages = NULL;
    float *plog = NULL, *glog = NULL;
    json_object *jo = NULL;

    double t0 = now_s();
    int r = l8_model_load(o.model, o.threads, &m, err);
    if (r < 0) {
        fprintf(stderr, "llama8-run: %s\n", err);
        goto out;
    }
    const uint32_t V = m->cfg.vocab;
    for (long i = 0; i < S; i++)
        if (prompt[i] >= V) {
            fprintf(stderr, "llama8-run: token id %u at index %ld is not below the vocabulary"
                    " size %u\n", prompt[i], i, V);
            rc = 2;
            goto out;
        }
    const uint64_t total = (uint64_t)S + o.max_new;
    if (total > m->cfg.max_pos) {
        fprintf(stderr, "llama8-run: %ld prompt + %u new tokens exceed the model's %u positions\n",
                S, o.max_new, m->cfg.max_pos);
        rc = 2;
        goto out;
    }
    if (!o.stop_given && !o.ignore_eos)
        for (uint32_t i = 0; i < m->cfg.n_eos && o.n_stop < MAX_STOP; i++)
            if (m->cfg.eos[i] >= 0)
                o.stop[o.n_stop++] = (uint32_t)m->cfg.eos[i];

    const uint32_t chunk = o.chunk && o.chunk < (uint32_t)S ? o.chunk : (uint32_t)S;
    const uint32_t n_pages = (uint32_t)((total + o.page_size - 1) / o.page_size);
    struct l8_engine_opts eo = { .numerics = o.numerics, .page_size = o.page_size,
                                 .n_pages = n_pages, .max_step_tokens = chunk, .max_seqs = 1,
                                 .nthreads = o.threads, .tune_file = o.tune_file };
    r = l8_engine_create(m, o.backend, &eo, &e, err);
    if (r < 0) {
        fprintf(stderr, "llama8-run: %s engine: %s\n", l8_backend_name(o.backend), err);
        goto out;
    }
    const double load_s = now_s() - t0;

    all = malloc(sizeof(uint32_t) * total);
    pages = malloc(sizeof(uint32_t) * n_pages);
    if (!all || !pages)
        goto oom;
    memcpy(all, prompt, sizeof(uint32_t) * (size_t)S);
    for (uint32_t i = 0; i < n_pages; i++)
        pages[i] = i;
    if (o.logits_out) {
        plog = malloc(sizeof(float) * (size_t)S * V);
        glog = malloc(sizeof(float) * ((size_t)o.max_new ? o.max_new : 1) * V);
        if (!plog || !glog)
            goto oom;
    }

    /* Warm-up: the same steps as below, results dropped; the timed run
     * rewrites every KV position and generated token it reads. */
    double warmup_s = 0;
    if (o.warmup) {
        double tw = now_s();
        const uint32_t wdec = o.max_new < 2 ? 0 : o.max_new == 2 ? 1 : 2;
        for (uint32_t p = 0, n; p < (uint32_t)S + wdec; p += n) {
            const bool pre = p < (uint32_t)S;
            n = !pre ? 1 : (uint32_t)S - p < chunk ? (uint32_t)S - p : chunk;
            struct l8_seq s = { .tokens = all + p, .n_tokens = n, .pos = p,
                                .pages = pages, .n_pages = n_pages,
                                .logits = L8_LOGITS_NONE, .sample = !pre || (p + n == (uint32_t)S && o.max_new > 0),
                                .sampling = &o.sp, .history = all,
                                .n_history = p + n, .sample_index = pre ? 0 : p + 1 - S };
            r = l8_engine_step(e, &s, 1);
            if (r < 0) {
                fprintf(stderr, "llama8-run: warm-up step at position %u failed: %s\n", p,
                        strerror(-r));
                goto out;
            }
            if (s.sample)
                all[p + n] = s.token_out;
        }
        warmup_s = now_s() - tw;
    }

    /* Prefill; the last chunk samples the first new token. */
    uint32_t n_gen = 0;
    bool stopped = false;
    double tp0 = now_s();
    for (uint32_t p = 0; p < (uint32_t)S; p += chunk) {
        uint32_t n = (uint32_t)S - p < chunk ? (uint32_t)S - p : chunk;
        bool last = p + n == (uint32_t)S;
        struct l8_seq s = { .tokens = all + p, .n_tokens = n, .pos = p, .pages = pages,
                            .n_pages = n_pages,
                            .logits = plog ? L8_LOGITS_ALL : L8_LOGITS_NONE,
                            .logits_out = plog ? plog + (size_t)p * V : NULL,
                            .sample = last && o.max_new > 0, .sampling = &o.sp,
                            .history = all, .n_history = p + n, .sample_index = 0 };
        r = l8_engine_step(e, &s, 1);
        if (r < 0) {
            fprintf(stderr, "llama8-run: prefill step at position %u failed: %s\n", p, strerror(-r));
            goto out;
        }
        if (s.sample) {
            all[S + n_gen++] = s.token_out;
            if (glog)
                memcpy(glog, plog + (size_t)(S - 1) * V, sizeof(float) * V);
        }
    }
    const double prefill_s = now_s() - tp0;
    for (uint32_t i = 0; i < o.n_stop && n_gen; i++)
        stopped |= all[S] == o.stop[i];

    double td0 = now_s();
    uint32_t decode_steps = 0;
    while (!stopped && n_gen < o.max_new) {
        uint32_t p = (uint32_t)S + n_gen - 1;
        struct l8_seq s = { .tokens = all + p, .n_tokens = 1, .pos = p, .pages = pages,
                            .n_pages = n_pages,
                            .logits = glog ? L8_LOGITS_LAST : L8_LOGITS_NONE,
                            .logits_out = glog ? glog + (size_t)n_gen * V : NULL,
                            .sample = true, .sampling = &o.sp, .history = all,
                            .n_history = p + 1, .sample_index = n_gen };
        r = l8_engine_step(e, &s, 1);
        if (r < 0) {
            fprintf(stderr, "llama8-run: decode step at position %u failed: %s\n", p, strerror(-r));
            goto out;
        }
        decode_steps++;
        all[S + n_gen++] = s.token_out;
        for (uint32_t i = 0; i < o.n_stop; i++)
            stopped |= s.token_out == o.stop[i];
    }
    const double decode_s = now_s() - td0;
    const double dec_tps = decode_steps && decode_s > 0 ? decode_steps / decode_s : 0.0;

    if (o.logits_out && write_logits(o.logits_out, &o, m, plog, (uint32_t)S, glog, n_gen, all) < 0)
        goto out;

    if (o.json) {
        jo = json_object_new_object();
        json_object *jt = json_object_new_array();
        for (uint32_t i = 0; i < n_gen; i++)
            json_object_array_add(jt, json_object_new_int64(all[S + i]));
        json_object_object_add(jo, "tokens", jt);
        json_object_object_add(jo, "n_prompt", json_object_new_int64(S));
        json_object_object_add(jo, "n_generated", json_object_new_int64(n_gen));
        json_object_object_add(jo, "stop_reason", json_object_new_string(
                                   stopped ? "stop" : "length"));
        json_object_object_add(jo, "backend", json_object_new_string(l8_backend_name(o.backend)));
        json_object_object_add(jo, "numerics", json_object_new_string(
                                   o.numerics == L8_NUMERICS_FP8 ? "fp8" : "exact"));
        json_object_object_add(jo, "load_s", json_object_new_double(load_s));
        json_object_object_add(jo, "warmup_s", json_object_new_double(warmup_s));
        json_object_object_add(jo, "prefill_ms", json_object_new_double(prefill_s * 1e3));
        json_object_object_add(jo, "prefill_tokens_per_s",
                               json_object_new_double(prefill_s > 0 ? S / prefill_s : 0.0));
        json_object_object_add(jo, "decode_steps", json_object_new_int64(decode_steps));
        json_object_object_add(jo, "decode_tokens_per_s", json_object_new_double(dec_tps));
        printf("%s\n", json_object_to_json_string_ext(jo, JSON_C_TO_STRING_PLAIN));
    } else {
        for (uint32_t i = 0; i < n_gen; i++)
            printf("%s%u", i ? "," : "", all[S + i]);
        printf("\n");
        fprintf(stderr, "load %.3f s, prefill %ld tokens %.1f ms (%.1f tokens/s), "
                "decode %u steps %.1f tokens/s, stop: %s\n", load_s, S, prefill_s * 1e3,
                prefill_s > 0 ? S / prefill_s : 0.0, decode_steps, dec_tps,
                stopped ? "stop token" : "length");
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "llama8-run: writing output: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "llama8-run: out of memory\n");
out:
    json_object_put(jo);
    free(plog);
    free(glog);
    free(all);
    free(pages);
    free(prompt);
    l8_engine_destroy(e);
    l8_model_free(m);
    return rc;
}
