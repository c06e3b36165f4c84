/* llama8-run - run the engine in-process on a token prompt, no daemon.
 *
 *   llama8-run --model DIR --tokens 1,2,3 [--max-new N] [--backend cpu|cuda]
 *              [--numerics exact|fp8] [sampling options] [--logits-out F]
 *              [--batch B] [--json] [--gemv-max-m N] [--no-graphs] [--no-pdl]
 *              [--profile-file F] [--speculate off|ngram|oracle FILE]
 *              [--draft-max K] [--draft-fixed] [--draft-min-n N] [--draft-source F]
 *
 * --speculate: each decode step feeds the last token and up to K drafted
 * ones, and the engine samples at every position as single steps would
 * (l8_seq.n_draft); the drafts up to the first that differs from its
 * position's sample are accepted, that sample is the next token. So the
 * tokens are those of a run without it; only the number of steps changes.
 * ngram drafts by prompt lookup (speculate/ngram.h) in the copy's own
 * sequence, and in --draft-source's when that matches a longer suffix;
 * oracle drafts the next tokens of a file of expected generated tokens
 * (a plain run's output: the engine's ceiling; wrong tokens: the cost of
 * rejections). The draft length adapts (speculate/draft_len.h) unless
 * --draft-fixed.
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

#include "draft_len.h"
#include "engine.h"
#include "proto/l8_clock.h"
#include "model.h"
#include "ngram.h"
#include "read_file.h"
#include "safetensors.h"
#include "l8_build.h"

#define DEFAULT_PAGE_SIZE 16u
#define MAX_STOP 64
#define MAX_BATCH 1024u
/* A whole context of ids as text is about 1 MB. */
#define RUN_TOKENS_FILE_MAX (64u << 20)
#define DEFAULT_DRAFT_MAX 4u
#define MAX_DRAFT 64u

enum speculate { SPEC_OFF, SPEC_NGRAM, SPEC_ORACLE };
static const char *const spec_name[] = { "off", "ngram", "oracle" };

struct opts {
    const char *model, *tokens, *tokens_file, *logits_out, *tune_file, *profile_file;
    const char *oracle_file, *draft_source;
    enum speculate spec;
    uint32_t draft_max, draft_min_n;
    bool draft_fixed;
    enum l8_backend backend;
    enum l8_numerics numerics;
    uint32_t max_new, chunk, page_size, batch, gemv_max_m;
    int threads;
    struct l8_sampling sp;
    uint32_t stop[MAX_STOP];
    uint32_t n_stop;
    bool stop_given, ignore_eos, json, warmup, gemv_fixed, no_graphs, no_pdl, lm_head_fp8;
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: llama8-run --model DIR (--tokens 1,2,3 | --tokens-file FILE) [options]\n"
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
"  --batch B                run B copies of the prompt, each with its own KV\n"
"                           pages, copy b sampled with seed S + b: prefilled one\n"
"                           after another, then decoded together, B rows a step\n"
"                           (default 1); prints a line for each copy, --json\n"
"                           the first copy's tokens\n"
"  --page-size N            KV page size in positions (default 16)\n"
"  --threads N              cpu threads (default 0 = all cores)\n"
"  --lm-head checkpoint|fp8 cpu: lm_head in its checkpoint dtype (default), or\n"
"                           quantized to FP8 at load with per-row scales\n"
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
"  --gemv-max-m N           cuda fp8: every product runs through the GEMV up to\n"
"                           N rows, through cuBLASLt (its first algorithms)\n"
"                           above, in place of the measured crossover (the tune\n"
"                           file is left alone)\n"
"  --no-graphs              cuda: decode steps launched eagerly, not as graphs\n"
"  --no-pdl                 cuda: no programmatic dependent launch\n"
"  --profile-file FILE      cuda: the step profile: the GPU time of each phase of\n"
"                           prefill and decode steps, on stderr and as JSON in\n"
"                           FILE (decode graphs off)\n"
"  --speculate MODE         speculative decoding, the same tokens in fewer steps:\n"
"                           off (default); ngram: drafts by prompt lookup in the\n"
"                           sequence so far; oracle FILE: drafts the next tokens\n"
"                           of FILE, ids of the expected generated tokens (e.g.\n"
"                           a plain run's output)\n"
"  --draft-max K            most drafted tokens a step (default 4, at most 64)\n"
"  --draft-fixed            draft K tokens every step (default: the length adapts\n"
"                           to how many were accepted)\n"
"  --draft-min-n N          ngram: shortest suffix looked up, 1..8 (default 1)\n"
"  --draft-source FILE      ngram: another sequence's ids (the document an edit\n"
"                           repeats), drafted from when it matches a longer\n"
"                           suffix than the sequence itself\n"
"  --json                   print one JSON object instead (tokens, stop_reason,\n"
"                           load_s, prefill_ms, decode_tokens_per_s,\n"
"                           step_weight_bytes, ...)\n"
"  --help                   this text\n"
"\n"
"Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
}

static double mib(uint64_t bytes) { return (double)bytes / 1048576.0; }

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

/* The ids of a token file (what) into *out; the count, or -1 after saying
 * why (a usage error). */
static long read_ids(const char *what, const char *path, uint32_t **out)
{
    char *txt, err[512];
    if (l8_read_file(path, RUN_TOKENS_FILE_MAX, &txt, NULL, err, sizeof err)) {
        fprintf(stderr, "llama8-run: %s %s\n", what, err);
        return -1;
    }
    long n = parse_ids(txt, out);
    free(txt);
    if (n <= 0) {
        fprintf(stderr, "llama8-run: %s %s: no valid token ids\n", what, path);
        if (n == 0)
            free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

/* 0, or -1 after naming the first id of ids[n] (what) not below V. */
static int check_ids(const char *what, const uint32_t *ids, long n, uint32_t V)
{
    for (long i = 0; i < n; i++)
        if (ids[i] >= V) {
            fprintf(stderr, "llama8-run: %s: token id %u at index %ld is not below the"
                    " vocabulary size %u\n", what, ids[i], i, V);
            return -1;
        }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    enum { O_MODEL = 256, O_TOKENS, O_TOKENS_FILE, O_MAX_NEW, O_BACKEND, O_NUMERICS,
           O_TEMP, O_TOPK, O_TOPP, O_MINP, O_REP, O_SEED, O_STOP, O_IGNORE_EOS, O_CHUNK,
           O_PAGE, O_THREADS, O_LOGITS, O_JSON, O_WARMUP, O_TUNE, O_BATCH, O_GEMV, O_NO_GRAPHS,
           O_NO_PDL, O_PROFILE, O_SPECULATE, O_DRAFT_MAX, O_DRAFT_FIXED, O_DRAFT_MIN_N,
           O_DRAFT_SOURCE, O_LM_HEAD, O_HELP };
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
        { "lm-head", required_argument, 0, O_LM_HEAD },
        { "logits-out", required_argument, 0, O_LOGITS },
        { "json", no_argument, 0, O_JSON },
        { "warmup", no_argument, 0, O_WARMUP },
        { "tune-file", required_argument, 0, O_TUNE },
        { "batch", required_argument, 0, O_BATCH },
        { "gemv-max-m", required_argument, 0, O_GEMV },
        { "no-graphs", no_argument, 0, O_NO_GRAPHS },
        { "no-pdl", no_argument, 0, O_NO_PDL },
        { "profile-file", required_argument, 0, O_PROFILE },
        { "speculate", required_argument, 0, O_SPECULATE },
        { "draft-max", required_argument, 0, O_DRAFT_MAX },
        { "draft-fixed", no_argument, 0, O_DRAFT_FIXED },
        { "draft-min-n", required_argument, 0, O_DRAFT_MIN_N },
        { "draft-source", required_argument, 0, O_DRAFT_SOURCE },
        { "help", no_argument, 0, O_HELP },
        { 0, 0, 0, 0 },
    };
    *o = (struct opts){ .backend = L8_BACKEND_CPU, .numerics = L8_NUMERICS_EXACT,
                        .max_new = 16, .page_size = DEFAULT_PAGE_SIZE, .batch = 1,
                        .draft_max = DEFAULT_DRAFT_MAX, .draft_min_n = 1,
                        .sp = { .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                                .min_p = 0.0f, .repetition_penalty = 1.0f, .seed = 0 } };
    int c, li = 0;
    uint32_t u;
    opterr = 0;
    /* "+": no permuting, so that --speculate oracle may take the next
     * argument as its file (there are no operands anyway) */
    while ((c = getopt_long(argc, argv, "+", lo, &li)) != -1) {
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
        case O_LM_HEAD:
            if (!strcmp(a, "fp8")) o->lm_head_fp8 = true;
            else if (!strcmp(a, "checkpoint")) o->lm_head_fp8 = false;
            else bad = 1;
            break;
        case O_LOGITS: o->logits_out = a; break;
        case O_JSON: o->json = true; break;
        case O_WARMUP: o->warmup = true; break;
        case O_TUNE: o->tune_file = a; break;
        case O_BATCH: bad = parse_u32(a, &o->batch) || o->batch == 0 || o->batch > MAX_BATCH; break;
        case O_GEMV: bad = parse_u32(a, &o->gemv_max_m); o->gemv_fixed = true; break;
        case O_NO_GRAPHS: o->no_graphs = true; break;
        case O_NO_PDL: o->no_pdl = true; break;
        case O_PROFILE: o->profile_file = a; break;
        case O_SPECULATE:
            if (!strcmp(a, "off")) o->spec = SPEC_OFF;
            else if (!strcmp(a, "ngram")) o->spec = SPEC_NGRAM;
            else if (!strcmp(a, "oracle") && optind < argc) {
                o->spec = SPEC_ORACLE;
                o->oracle_file = argv[optind++];
            } else bad = 1;
            break;
        case O_DRAFT_MAX:
            bad = parse_u32(a, &o->draft_max) || o->draft_max == 0 || o->draft_max > MAX_DRAFT;
            break;
        case O_DRAFT_FIXED: o->draft_fixed = true; break;
        case O_DRAFT_MIN_N:
            bad = parse_u32(a, &o->draft_min_n) || o->draft_min_n == 0
                  || o->draft_min_n > L8_NGRAM_MAX_N;
            break;
        case O_DRAFT_SOURCE: o->draft_source = a; break;
        case O_HELP: usage(stdout); exit(0);
        default:
            fprintf(stderr, "llama8-run: unknown or incomplete option %s\n", argv[optind - 1]);
            return -EINVAL;
        }
        if (bad) {
            fprintf(stderr, "llama8-run: bad value for --%s: %s\n", lo[li].name, a);
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
    if (o->draft_source && o->spec != SPEC_NGRAM) {
        fprintf(stderr, "llama8-run: --draft-source is for --speculate ngram\n");
        return -EINVAL;
    }
    if (o->logits_out && o->batch > 1) {
        fprintf(stderr, "llama8-run: --logits-out writes one sequence's logits: not with --batch\n");
        return -EINVAL;
    }
    return 0;
}

/* Weight bytes one decode step streams: every projection's codes and
 * scales, and lm_head as the engine holds it. */
static uint64_t step_weight_bytes(const struct l8_model *m, bool lm_head_fp8)
{
    uint64_t b = 0;
    for (uint32_t L = 0; L < m->cfg.n_layers; L++) {
        const struct l8_layer *y = &m->layers[L];
        const struct l8_qweight *w[7] = { &y->wq, &y->wk, &y->wv, &y->wo, &y->wgate, &y->wup,
                                          &y->wdown };
        for (int i = 0; i < 7; i++)
            b += (uint64_t)w[i]->out * w[i]->in + sizeof(float) * w[i]->out;
    }
    const struct l8_dense *h = &m->lm_head;
    return b + (lm_head_fp8 ? (uint64_t)h->rows * h->cols + sizeof(float) * h->rows
                            : (uint64_t)h->rows * h->cols * l8_dtype_size(h->dtype));
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

/* The sequences of a run: B copies of the prompt, each with its own pages
 * and its own tokens (the prompt, then what it generated). */
struct run {
    uint32_t B, S, total, n_pages, chunk, V;   /* n_pages: of each sequence */
    uint32_t *all;       /* [B][total] */
    uint32_t *pages;     /* [B][n_pages] */
    uint32_t *n_gen;     /* [B] tokens generated */
    bool *stopped;       /* [B] generated a stop token */
    struct l8_seq *seqs; /* [B] a decode step's sequences */
    uint32_t *who;       /* [B] the sequence of each of them */
    struct l8_sampling *sp; /* [B] the options, seed + b: copies diverge */
    /* speculation (--speculate; K = 0 without) */
    uint32_t K, rows;    /* most drafts a sequence, most rows a decode step */
    struct l8_sample_out *vout;  /* [B][K + 1] a verification's samples */
    struct l8_draft_len *dlen;   /* [B] the adaptive lengths; NULL: K each step */
    struct l8_ngram **idx;       /* [B] ngram: each copy's sequence so far */
    struct l8_ngram *source;     /* ngram: --draft-source's, or NULL */
    const uint32_t *oracle;      /* [n_oracle] oracle: the expected tokens */
    uint32_t n_oracle;
};

struct timing {
    double prefill_s, decode_s;
    uint32_t decode_steps;
    uint64_t decode_tokens;
    uint64_t seq_steps;          /* a sequence's part of a decode step */
    uint64_t drafted, accepted, draft_steps; /* draft_steps: seq_steps with drafts */
};

static void after_sample(const struct opts *o, struct run *r, uint32_t b, uint32_t tok)
{
    r->all[(size_t)b * r->total + r->S + r->n_gen[b]++] = tok;
    for (uint32_t i = 0; i < o->n_stop; i++)
        r->stopped[b] |= tok == o->stop[i];
}

/* Up to room drafts for copy b, written where they would go in its
 * sequence (after its n tokens so far); returns how many. */
static uint32_t draft(const struct opts *o, struct run *r, uint32_t b, uint32_t room)
{
    uint32_t *all = r->all + (size_t)b * r->total;
    const uint32_t n = r->S + r->n_gen[b];
    if (o->spec == SPEC_ORACLE) {
        const uint32_t g = r->n_gen[b], left = g < r->n_oracle ? r->n_oracle - g : 0;
        const uint32_t d = left < room ? left : room;
        memcpy(all + n, r->oracle + g, sizeof(uint32_t) * d);
        return d;
    }
    /* the index catches up with the tokens accepted since it last drafted
     * (cannot fail: it holds total tokens) */
    struct l8_ngram *own = r->idx[b];
    const uint32_t len = l8_ngram_len(own);
    l8_ngram_push(own, all + len, n - len);
    uint32_t m, d = l8_ngram_propose(own, all, n, o->draft_min_n, room, all + n, &m);
    if (r->source) {
        /* the other sequence only for a longer match: it writes the
         * drafts only when it has one */
        const uint32_t ds = l8_ngram_propose(r->source, all, n, m ? m + 1 : o->draft_min_n,
                                             room, all + n, NULL);
        if (ds)
            d = ds;
    }
    return d;
}

/* Every prompt in chunks, one sequence a step (the last chunk samples its
 * first token), then up to max_decode decode steps of every sequence still
 * generating, each with drafts when speculating. plog / glog (batch 1
 * only): the logits to keep, or NULL. */
static int generate(struct l8_engine *e, const struct opts *o, struct run *r,
                    uint32_t max_decode, float *plog, float *glog, struct timing *tm)
{
    const uint32_t S = r->S, V = r->V;
    *tm = (struct timing){ 0 };
    memset(r->n_gen, 0, sizeof(uint32_t) * r->B);
    memset(r->stopped, 0, sizeof(bool) * r->B);
    for (uint32_t b = 0; b < r->B; b++) {
        if (r->dlen)
            l8_draft_len_init(&r->dlen[b], r->K);
        if (r->idx)
            l8_ngram_reset(r->idx[b]);
    }
    double t0 = l8_now_s();
    for (uint32_t b = 0; b < r->B; b++) {
        uint32_t *all = r->all + (size_t)b * r->total;
        for (uint32_t p = 0; p < S; p += r->chunk) {
            uint32_t n = S - p < r->chunk ? S - p : r->chunk;
            bool last = p + n == S;
            struct l8_seq s = { .tokens = all + p, .n_tokens = n, .pos = p,
                                .pages = r->pages + (size_t)b * r->n_pages, .n_pages = r->n_pages,
                                .logits = plog ? L8_LOGITS_ALL : L8_LOGITS_NONE,
                                .logits_out = plog ? plog + (size_t)p * V : NULL,
                                .sample = last && o->max_new > 0, .sampling = &r->sp[b],
                                .history = all, .n_history = p + n, .sample_index = 0 };
            int rc = l8_engine_step(e, &s, 1);
            if (rc < 0) {
                fprintf(stderr, "llama8-run: prefill step at position %u of sequence %u failed: %s\n",
                        p, b, strerror(-rc));
                return rc;
            }
            if (s.sample) {
                after_sample(o, r, b, s.token_out);
                if (glog)
                    memcpy(glog, plog + (size_t)(S - 1) * V, sizeof(float) * V);
            }
        }
    }
    double t1 = l8_now_s();
    tm->prefill_s = t1 - t0;
    while (tm->decode_steps < max_decode) {
        uint32_t n = 0;
        for (uint32_t b = 0; b < r->B; b++)
            if (!r->stopped[b] && r->n_gen[b] && r->n_gen[b] < o->max_new)
                r->who[n++] = b;
        if (!n)
            break;
        /* the rows beyond one a sequence go to drafts, first come first
         * served; none past max_new */
        uint32_t extra = r->rows > n ? r->rows - n : 0;
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t b = r->who[i], *all = r->all + (size_t)b * r->total;
            const uint32_t p = S + r->n_gen[b] - 1, left = o->max_new - r->n_gen[b] - 1;
            uint32_t room = r->dlen ? r->dlen[b].k : r->K, nd = 0;
            room = room < left ? room : left;
            room = room < extra ? room : extra;
            if (room)
                nd = draft(o, r, b, room);
            extra -= nd;
            r->seqs[i] = (struct l8_seq){
                .tokens = all + p, .n_tokens = 1 + nd, .pos = p,
                .pages = r->pages + (size_t)b * r->n_pages, .n_pages = r->n_pages,
                .logits = !glog ? L8_LOGITS_NONE : nd ? L8_LOGITS_ALL : L8_LOGITS_LAST,
                .logits_out = glog ? glog + (size_t)r->n_gen[b] * V : NULL,
                .sample = true, .sampling = &r->sp[b], .history = all,
                .n_history = p + 1 + nd, .sample_index = r->n_gen[b],
                .n_draft = nd, .verify_out = nd ? r->vout + (size_t)b * (r->K + 1) : NULL };
        }
        int rc = l8_engine_step(e, r->seqs, n);
        if (rc < 0) {
            fprintf(stderr, "llama8-run: decode step at position %u failed: %s\n",
                    r->seqs[0].pos, strerror(-rc));
            return rc;
        }
        tm->decode_steps++;
        tm->seq_steps += n;
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t b = r->who[i], nd = r->seqs[i].n_draft, before = r->n_gen[b];
            uint32_t a = 0;   /* drafts accepted */
            if (!nd) {
                after_sample(o, r, b, r->seqs[i].token_out);
            } else {
                /* sample j follows draft j - 1: the drafts hold while each
                 * equals its position's sample, and the first sample that
                 * differs is the next token (it overwrites the draft) */
                const uint32_t *all = r->all + (size_t)b * r->total;
                const struct l8_sample_out *v = r->vout + (size_t)b * (r->K + 1);
                for (uint32_t j = 0; j <= nd && !r->stopped[b]; j++) {
                    const bool held = j < nd && v[j].token == all[S + r->n_gen[b]];
                    after_sample(o, r, b, v[j].token);
                    if (!held)
                        break;
                    a++;
                }
                tm->drafted += nd;
                tm->accepted += a;
                tm->draft_steps++;
            }
            if (r->dlen)
                l8_draft_len_update(&r->dlen[b], nd, a);
            tm->decode_tokens += r->n_gen[b] - before;
        }
    }
    tm->decode_s = l8_now_s() - t1;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_args(argc, argv, &o) < 0) {
        fprintf(stderr, "Try 'llama8-run --help'.\n");
        return 2;
    }
    uint32_t *prompt = NULL, *oracle = NULL, *source = NULL;
    long S, n_oracle = 0, n_source = 0;
    if (o.tokens_file) {
        S = read_ids("--tokens-file", o.tokens_file, &prompt);
    } else {
        S = parse_ids(o.tokens, &prompt);
        if (S <= 0) {
            fprintf(stderr, "llama8-run: --tokens: no valid token ids\n");
            if (S == 0)
                free(prompt);
        }
    }
    if (S <= 0)
        return 2;
    if ((o.oracle_file && (n_oracle = read_ids("--speculate oracle", o.oracle_file, &oracle)) < 0)
        || (o.draft_source && (n_source = read_ids("--draft-source", o.draft_source, &source)) < 0)) {
        free(prompt);
        free(oracle);
        return 2;
    }

    int rc = 1;
    char err[L8_ERRLEN];
    struct l8_model *m = NULL;
    struct l8_engine *e = NULL;
    struct run run = { 0 };
    float *plog = NULL, *glog = NULL;
    json_object *jo = NULL;

    double t0 = l8_now_s();
    int r = l8_model_load(o.model, o.threads, &m, err);
    if (r < 0) {
        fprintf(stderr, "llama8-run: %s\n", err);
        goto out;
    }
    const uint32_t V = m->cfg.vocab;
    if (check_ids("the prompt", prompt, S, V) || check_ids("--speculate oracle", oracle, n_oracle, V)
        || check_ids("--draft-source", source, n_source, V)) {
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
    const uint32_t B = o.batch;
    const uint32_t n_pages = (uint32_t)((total + o.page_size - 1) / o.page_size);
    const uint32_t K = o.spec == SPEC_OFF ? 0 : o.draft_max, decode_rows = B * (1 + K);
    struct l8_engine_opts eo = { .numerics = o.numerics, .page_size = o.page_size,
                                 .n_pages = n_pages * B,
                                 .max_step_tokens = chunk > decode_rows ? chunk : decode_rows,
                                 .max_seqs = B,
                                 .nthreads = o.threads, .tune_file = o.tune_file,
                                 .gemv_fixed = o.gemv_fixed, .gemv_max_m = o.gemv_max_m,
                                 .no_graphs = o.no_graphs, .no_pdl = o.no_pdl,
                                 .profile_file = o.profile_file,
                                 .lm_head_fp8 = o.lm_head_fp8 };
    r = l8_engine_create(m, o.backend, &eo, &e, err);
    if (r < 0) {
        fprintf(stderr, "llama8-run: %s engine: %s\n", l8_backend_name(o.backend), err);
        goto out;
    }
    const double load_s = l8_now_s() - t0;

    /* a verification's samples are those of single steps only up to
     * verify_rows rows a step */
    const uint32_t verify_rows = l8_engine_verify_rows(e);
    run = (struct run){ .B = B, .S = (uint32_t)S, .total = (uint32_t)total,
                        .n_pages = n_pages, .chunk = chunk, .V = V, .K = K,
                        .rows = decode_rows < verify_rows ? decode_rows : verify_rows,
                        .oracle = oracle, .n_oracle = (uint32_t)n_oracle };
    run.all = malloc(sizeof(uint32_t) * total * B);
    run.pages = malloc(sizeof(uint32_t) * n_pages * B);
    run.n_gen = calloc(B, sizeof(uint32_t));
    run.stopped = calloc(B, sizeof(bool));
    run.seqs = calloc(B, sizeof(struct l8_seq));
    run.who = calloc(B, sizeof(uint32_t));
    run.sp = calloc(B, sizeof(struct l8_sampling));
    if (!run.all || !run.pages || !run.n_gen || !run.stopped || !run.seqs || !run.who || !run.sp)
        goto oom;
    if (K) {
        if (!(run.vout = calloc((size_t)B * (K + 1), sizeof(struct l8_sample_out))))
            goto oom;
        if (!o.draft_fixed && !(run.dlen = calloc(B, sizeof(struct l8_draft_len))))
            goto oom;
    }
    if (o.spec == SPEC_NGRAM) {
        if (!(run.idx = calloc(B, sizeof(struct l8_ngram *))))
            goto oom;
        for (uint32_t b = 0; b < B; b++)
            if (l8_ngram_new((uint32_t)total, &run.idx[b]) < 0)
                goto oom;
        if (source && (l8_ngram_new((uint32_t)n_source, &run.source) < 0
                       || l8_ngram_push(run.source, source, (uint32_t)n_source) < 0))
            goto oom;
    }
    for (uint32_t b = 0; b < B; b++) {
        memcpy(run.all + (size_t)b * total, prompt, sizeof(uint32_t) * (size_t)S);
        run.sp[b] = o.sp;
        run.sp[b].seed = o.sp.seed + b;
    }
    for (uint32_t i = 0; i < n_pages * B; i++)
        run.pages[i] = i;
    if (o.logits_out) {
        plog = malloc(sizeof(float) * (size_t)S * V);
        glog = malloc(sizeof(float) * ((size_t)o.max_new ? o.max_new : 1) * V);
        if (!plog || !glog)
            goto oom;
    }

    /* Warm-up: the same steps as below, results dropped; the timed run
     * rewrites every KV position and generated token it reads. */
    double warmup_s = 0;
    struct timing tm;
    if (o.warmup) {
        double tw = l8_now_s();
        if (generate(e, &o, &run, 2, NULL, NULL, &tm) < 0)
            goto out;
        warmup_s = l8_now_s() - tw;
    }
    if (generate(e, &o, &run, UINT32_MAX, plog, glog, &tm) < 0)
        goto out;
    const uint32_t n_gen = run.n_gen[0], *all = run.all;
    const bool stopped = run.stopped[0];
    const double prefill_s = tm.prefill_s, decode_s = tm.decode_s;
    const uint32_t decode_steps = tm.decode_steps;
    const double dec_tps = tm.decode_tokens && decode_s > 0 ? tm.decode_tokens / decode_s : 0.0;
    /* accepted of drafted; accepted a sequence's step that drafted; tokens
     * a sequence's decode step (1 without speculation) */
    const double acc_rate = tm.drafted ? (double)tm.accepted / tm.drafted : 0.0;
    const double mean_acc = tm.draft_steps ? (double)tm.accepted / tm.draft_steps : 0.0;
    const double tok_step = tm.seq_steps ? (double)tm.decode_tokens / tm.seq_steps : 0.0;

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
        json_object_object_add(jo, "lm_head", json_object_new_string(
                                   o.lm_head_fp8 ? "fp8" : "checkpoint"));
        json_object_object_add(jo, "load_s", json_object_new_double(load_s));
        json_object_object_add(jo, "warmup_s", json_object_new_double(warmup_s));
        json_object_object_add(jo, "prefill_ms", json_object_new_double(prefill_s * 1e3));
        json_object_object_add(jo, "prefill_tokens_per_s",
                               json_object_new_double(prefill_s > 0 ? (double)B * S / prefill_s : 0.0));
        json_object_object_add(jo, "batch", json_object_new_int64(B));
        json_object_object_add(jo, "decode_steps", json_object_new_int64(decode_steps));
        json_object_object_add(jo, "decode_tokens_per_s", json_object_new_double(dec_tps));
        json_object_object_add(jo, "step_weight_bytes", json_object_new_int64(
                                   (int64_t)step_weight_bytes(m, o.lm_head_fp8)));
        json_object_object_add(jo, "speculate", json_object_new_string(spec_name[o.spec]));
        json_object_object_add(jo, "draft_max", json_object_new_int64(K));
        json_object_object_add(jo, "drafted", json_object_new_int64((int64_t)tm.drafted));
        json_object_object_add(jo, "accepted", json_object_new_int64((int64_t)tm.accepted));
        json_object_object_add(jo, "draft_steps", json_object_new_int64((int64_t)tm.draft_steps));
        json_object_object_add(jo, "acceptance_rate", json_object_new_double(acc_rate));
        json_object_object_add(jo, "mean_accepted", json_object_new_double(mean_acc));
        json_object_object_add(jo, "tokens_per_step", json_object_new_double(tok_step));
        const struct l8_engine_mem *mem = l8_engine_memory(e);
        json_object_object_add(jo, "mem_weights_mib", json_object_new_double(mib(mem->weights)));
        json_object_object_add(jo, "mem_kv_pool_mib", json_object_new_double(mib(mem->kv_pool)));
        json_object_object_add(jo, "mem_work_mib", json_object_new_double(mib(mem->work)));
        json_object_object_add(jo, "device_used_mib",
                               json_object_new_double(mib(mem->device_used)));
        printf("%s\n", json_object_to_json_string_ext(jo, JSON_C_TO_STRING_PLAIN));
    } else {
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t *ab = all + (size_t)b * total;
            for (uint32_t i = 0; i < run.n_gen[b]; i++)
                printf("%s%u", i ? "," : "", ab[S + i]);
            printf("\n");
        }
        fprintf(stderr, "load %.3f s, prefill %u x %ld tokens %.1f ms (%.1f tokens/s), "
                "decode %u steps %.1f tokens/s, stop: %s\n", load_s, B, S, prefill_s * 1e3,
                prefill_s > 0 ? (double)B * S / prefill_s : 0.0, decode_steps, dec_tps,
                stopped ? "stop token" : "length");
        if (K)
            fprintf(stderr, "speculate %s: %llu drafted in %llu steps, %llu accepted (%.1f%%),"
                    " %.2f accepted a step that drafted, %.2f tokens a step\n", spec_name[o.spec],
                    (unsigned long long)tm.drafted, (unsigned long long)tm.draft_steps,
                    (unsigned long long)tm.accepted, 100.0 * acc_rate, mean_acc, tok_step);
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
    free(run.all);
    free(run.pages);
    free(run.n_gen);
    free(run.stopped);
    free(run.seqs);
    free(run.who);
    free(run.sp);
    free(run.vout);
    free(run.dlen);
    for (uint32_t b = 0; run.idx && b < run.B; b++)
        l8_ngram_free(run.idx[b]);
    free(run.idx);
    l8_ngram_free(run.source);
    free(prompt);
    free(oracle);
    free(source);
    l8_engine_destroy(e);
    l8_model_free(m);
    return rc;
}
