/* engine.h - the inference engine interface, one contract for cpu and cuda.
 *
 * The scheduler hands the engine a step: a batch of sequences, each with
 * the tokens to feed this step (a prefill chunk, or one token to decode),
 * the position of the first of them, and its page table into the paged KV
 * pool. The engine appends the new K/V to the pool, computes logits where
 * asked, and samples where asked. Steps run synchronously in the caller's
 * thread; the daemon runs them on an engine thread and turns completion
 * into an event on its loop.
 *
 * KV pool layout (identical for both engines; dtype f32 on the cpu engine
 * in exact numerics, bf16 otherwise):
 *   pool[layer][kv][page][kv_head][slot][head_dim]     kv = 0 for K, 1 for V
 * Position p of a sequence lives in page pages[p / page_size], slot
 * p % page_size. K is stored after RoPE. See l8_kv_offset(). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../model/model.h"

/* AUTO values are a caller's choice still to make (llama8d: cuda where it
 * works; the backend's fast path); l8_engine_create takes neither. */
enum l8_backend  { L8_BACKEND_CPU = 0, L8_BACKEND_CUDA = 1, L8_BACKEND_AUTO = 2 };
enum l8_numerics {
    L8_NUMERICS_EXACT = 0, /* f32 activations, FP8 weights decoded exactly */
    L8_NUMERICS_FP8   = 1, /* activations quantized per token to E4M3 before
                              each projection, as the GPU's fast path does */
    L8_NUMERICS_AUTO  = 2, /* the backend's fast path: fp8 on cuda, exact on cpu */
};
enum l8_logits { L8_LOGITS_NONE = 0, L8_LOGITS_LAST = 1, L8_LOGITS_ALL = 2 };

/* Where an engine's messages go, as ggml_log_set's callback: level is
 * syslog's (LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG of <syslog.h>), msg
 * one message without a trailing newline ("cuda: ..." from the cuda
 * engine); a report (the crossover's timings, the step profile's table) is
 * one message of several lines joined by '\n'. Called on the thread that
 * creates, steps or destroys the engine. */
typedef void l8_engine_log_fn(void *ud, int level, const char *msg);
/* The default: "llama8 " msg on stderr, every level. */
void l8_engine_log_stderr(void *ud, int level, const char *msg);

/* Bytes of weights the engine copies into its own memory at creation (cpu:
 * its huge-page arena; cuda: the device), and of those the ones copied so
 * far: total is set before the first copy, done grows to it. */
struct l8_progress {
    _Atomic uint64_t total, done;
};

struct l8_engine_opts {
    enum l8_numerics numerics;
    uint32_t page_size;      /* positions per KV page (e.g. 16) */
    uint32_t n_pages;        /* pages in the pool; 0 = size from kv_bytes */
    uint64_t kv_bytes;       /* pool size when n_pages == 0; 0 = engine default */
    uint32_t max_step_tokens;/* most tokens (all sequences) in one step */
    uint32_t max_seqs;       /* most sequences in one step */
    int nthreads;            /* cpu: worker threads (0 = all cores) */
    bool kv_f32;             /* cpu only: keep the KV pool f32 in fp8 numerics
                                too, isolating activation rounding (tests);
                                other backends reject it */
    bool lm_head_fp8;        /* cpu only: lm_head quantized to FP8 at creation
                                with the checkpoint's own recipe (per-row
                                scales, l8_quantize_weight_row): half the bytes
                                a decoded token reads on small models, for a
                                rounding inside the fp8 band (README) */
    const char *tune_file;   /* cuda: the file that keeps the measured GEMV /
                                cuBLASLt crossover (cuda_tune.h); NULL: it is
                                measured at every creation and kept nowhere */
    /* cuda, for measuring the engine (llama8d(8): its keys gemv_max_m,
     * cuda_graphs, cuda_pdl and profile_file, llama8-run's flags); zero is
     * the engine as it serves. */
    bool gemv_fixed;         /* fp8: every product runs through the GEMV up to
                                gemv_max_m rows and through cuBLASLt, with its
                                first algorithms, above: in place of the
                                measured crossover (tune_file then neither
                                read nor written) */
    uint32_t gemv_max_m;
    bool no_graphs;          /* decode steps launched eagerly, not as CUDA graphs */
    bool no_pdl;             /* no programmatic dependent launch; a switch of the
                                process's kernels (l8k_set_pdl): the engine
                                created last sets it */
    const char *profile_file;/* the step profile (cuda_profile.h): the GPU time
                                of each phase, as a table to log and JSON to this
                                file when the engine is destroyed; it turns
                                decode graphs off. NULL or "": none */
    struct l8_progress *progress; /* how far placing the weights is, for another
                                thread to show while the engine is created;
                                NULL: not counted */
    l8_engine_log_fn *log;   /* the engine's messages; NULL: l8_engine_log_stderr */
    void *log_ud;            /* log's first argument */
};

/* Sampling parameters of one request. temperature <= 0 means greedy
 * (argmax, lowest id on ties). top_k 0 = off, top_p 1 = off, min_p 0 = off,
 * repetition_penalty 1 = off. */
struct l8_sampling {
    float temperature;
    uint32_t top_k;
    float top_p;
    float min_p;
    float repetition_penalty;
    uint64_t seed;
};

/* One sample of a verification (l8_seq.n_draft). */
struct l8_sample_out {
    uint32_t token;
    float logprob;
};

/* One sequence's part of a step. */
struct l8_seq {
    const uint32_t *tokens;  /* [n_tokens] ids to feed, each < vocab */
    uint32_t n_tokens;       /* >= 1 */
    uint32_t pos;            /* position of tokens[0]; positions [0, pos) are
                                already in the pages */
    const uint32_t *pages;   /* page table, covering [0, pos + n_tokens) */
    uint32_t n_pages;
    enum l8_logits logits;   /* which logits to write to logits_out */
    float *logits_out;       /* [1 or n_tokens, vocab] f32, host memory */
    /* Sampling from the last position's logits (after this step). */
    bool sample;
    const struct l8_sampling *sampling;
    const uint32_t *history; /* tokens seen so far (for repetition penalty) */
    uint32_t n_history;
    uint64_t sample_index;   /* which generated token this is: the RNG counter */
    const uint32_t *allowed; /* NULL, or the ids that may be sampled: bit i of
                                allowed[i / 32], vocab / 32 words rounded up
                                (constrained decoding's mask for this step) */
    /* Speculative verification: the last n_draft of tokens are drafted
     * (0: none, n_draft < n_tokens). With sample, the engine samples at each
     * of the last n_draft + 1 positions exactly as n_draft + 1 decode steps
     * feeding one token each would: sample j (0 .. n_draft) from the logits
     * of tokens[n_tokens - 1 - n_draft + j], seeing history[0, n_history -
     * n_draft + j), Philox counter sample_index + j, and the mask at
     * allowed + j * (vocab / 32 words rounded up) when allowed; into
     * verify_out[j] (token_out and logprob_out are not written). Whoever
     * drafted compares: the drafts up to the first that differs from its
     * sample are accepted, that sample is the next token, and the K/V the
     * rejected positions wrote is overwritten when those positions are fed
     * again. The logits at each position are bitwise those of the single
     * steps (l8_engine_verify_rows: how many rows a step may have for that). */
    uint32_t n_draft;
    struct l8_sample_out *verify_out;
    /* Results. */
    uint32_t token_out;      /* sampled id */
    float logprob_out;       /* log-softmax of token_out (temperature 1, after
                                repetition penalty) */
};

struct l8_engine;

/* The model must outlive the engine. err names what failed. */
int  l8_engine_create(const struct l8_model *m, enum l8_backend backend,
                      const struct l8_engine_opts *opts, struct l8_engine **out,
                      char err[L8_ERRLEN]);
void l8_engine_destroy(struct l8_engine *e);
/* Run one step. Returns 0 or a negative errno (-EINVAL: a sequence breaks
 * the limits above; -EIO: device failure; -EDOM: the logits a sequence
 * samples from hold a NaN or an infinity, so the step samples nothing
 * (weights that pass the load's checks can still overflow: a huge scale or
 * norm); the token_out, logprob_out and verify_out of the step's sequences
 * are then unspecified). On error no KV page of a sequence that was not in
 * the step has been written. */
int  l8_engine_step(struct l8_engine *e, struct l8_seq *seqs, uint32_t n_seqs);
/* What a step's error means, for logs: -EDOM in words, else strerror. */
const char *l8_engine_strerror(int rc);
/* Masks written while the step runs: in a step where a sequence samples
 * with a mask (sample and allowed), the engine calls fn(ud) on the
 * stepping thread once, after it has started the forward pass (cuda: its
 * kernels enqueued; cpu: the logits computed) and before it reads any
 * mask; the masks may be written until fn returns (llama8d computes them
 * on another thread meanwhile). NULL (the default): the masks are ready
 * when the step is called. Set between steps. */
typedef void l8_masks_wait_fn(void *ud);
void l8_engine_set_masks_wait(struct l8_engine *e, l8_masks_wait_fn *fn, void *ud);
/* The most rows (tokens, all sequences) a step may have for a sequence's
 * logits to be bitwise what they would be in a step of fewer rows, so that
 * a verification step gives the samples of the decode steps it stands for
 * (cpu: every step; cuda: 16, the rows up to which attention splits each
 * row as it would alone; in fp8 no more than the GEMV's rows, under the
 * measured crossover to cuBLASLt; a power of two with decode graphs, which
 * pad their batch). UINT32_MAX: any step. */
uint32_t l8_engine_verify_rows(const struct l8_engine *e);
/* Facts about the pool the engine allocated. */
uint32_t l8_engine_n_pages(const struct l8_engine *e);
uint32_t l8_engine_page_size(const struct l8_engine *e);

/* What an engine holds, in bytes, as it stood when created (an engine
 * allocates nothing per step). Kept, not queried: the daemon's loop reads
 * it while the engine thread may be capturing a CUDA graph, and a CUDA
 * call from another thread could invalidate the capture. */
struct l8_engine_mem {
    uint64_t weights;       /* cuda: on the GPU; cpu: the model's weights it
                               computes from (mapped or converted, host) */
    uint64_t kv_pool;
    uint64_t work;          /* activations, scratch and workspaces */
    uint64_t device_used;   /* cuda: the GPU's memory in use after creation
                               (every process's, the CUDA context included);
                               0 on cpu */
    uint64_t device_total;  /* cuda: the GPU's memory; 0 on cpu */
};
const struct l8_engine_mem *l8_engine_memory(const struct l8_engine *e);
const char *l8_backend_name(enum l8_backend b);

/* Element offset of (layer, kv, page, kv_head, slot, 0) in the pool. */
static inline size_t l8_kv_offset(const struct l8_config *c, uint32_t n_pages,
                                  uint32_t page_size, uint32_t layer, uint32_t kv,
                                  uint32_t page, uint32_t kv_head, uint32_t slot)
{
    return ((((size_t)layer * 2 + kv) * n_pages + page) * c->n_kv_heads + kv_head)
               * page_size * c->head_dim
           + (size_t)slot * c->head_dim;
}

/* Backend implementations (engine_cpu.c, engine_cuda.c). */
struct l8_engine_ops {
    const char *name;
    int  (*create)(const struct l8_model *m, const struct l8_engine_opts *o,
                   void **impl, uint32_t *n_pages, struct l8_engine_mem *mem,
                   char err[L8_ERRLEN]);
    void (*destroy)(void *impl);
    /* wait: l8_engine_set_masks_wait's, or NULL */
    int  (*step)(void *impl, struct l8_seq *seqs, uint32_t n_seqs,
                 l8_masks_wait_fn *wait, void *wait_ud);
    uint32_t (*verify_rows)(const void *impl);   /* NULL: UINT32_MAX */
};
extern const struct l8_engine_ops l8_engine_cpu_ops;
/* For the backends: a message (printf's format) to fn(ud, level, ...);
 * l8_engine_create has resolved opts->log, so fn is never NULL there. */
void l8_engine_logf(l8_engine_log_fn *fn, void *ud, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
extern const struct l8_engine_ops l8_engine_cuda_ops; /* only when L8_HAVE_CUDA */
