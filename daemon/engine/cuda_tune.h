/* cuda_tune.h - the crossover from the weight-streaming GEMV to cuBLASLt,
 * chosen by measurement, and the file that keeps it per machine.
 *
 * A product with M token rows reads its weights once either way; the GEMV
 * (gemv_fp8.cu) reads them at close to bandwidth but streams them again
 * for every 8 rows, cuBLASLt pays a fixed cost and then scales. Where they
 * cross depends on the GPU (sm_80 decodes the weights to bf16 for every
 * cuBLASLt product), on the shape and on the library, so the engine times
 * both, for each product of the model, at M = 1, 2, 4, ... up to 64, and
 * keeps the largest M below which the GEMV never lost.
 *
 * Timings are noise near a tie, and the path changes the arithmetic: a
 * choice made afresh at every start could change which path a prompt
 * length takes, and with it the tokens a seed gives. So the choice is kept
 * in a text file, one line per (device, libraries, model shape):
 *     KEY <TAB> qkv 8 o 8 gate_up 4 down 8 lm_head 16 | algos at 512: qkv 0 o 2 gate_up 0 down 1 | ...
 * and measured only when the file has no line for the key.
 *
 * The part after "|" is the same idea for cuBLASLt itself: its heuristic
 * offers several algorithms for a shape, best guess first; at the step's
 * largest row count (a full prefill chunk: the prompt steps of the
 * single stream and of serving) the engine times the candidates of each FP8
 * product and keeps the fastest (l8k_gemm_fp8_pin), by its rank among the
 * candidates (the heuristic is deterministic for a device and library; the
 * key names both). A line keeps the choices of up to 4 row counts (a
 * llama8-run with a short prompt has a smaller step than llama8d), and the
 * engine pins all of them up to its step's rows: llama8d then runs a prompt
 * of llama8-run's length as llama8-run did. A line without a choice for the
 * engine's step keeps its crossover, and that row count's is measured and
 * added (the oldest dropped past 4). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

enum l8_tune_product { L8_TP_QKV, L8_TP_O, L8_TP_GATE_UP, L8_TP_DOWN, L8_TP_LM_HEAD, L8_TP_N };

#define L8_TUNE_MAX_M 64u          /* largest row count measured */
#define L8_TUNE_KEY_MAX 512
#define L8_TUNE_ALGOS 8u           /* cuBLASLt candidates timed a product, at most */
#define L8_TUNE_FP8 L8_TP_LM_HEAD  /* the FP8 products: qkv, o, gate_up, down */
#define L8_TUNE_ALGO_SETS 4u

/* Each FP8 product's cuBLASLt algorithm at m rows: its rank among the
 * heuristic's candidates (0: the heuristic's first). */
struct l8_algo_set {
    uint32_t m, rank[L8_TUNE_FP8];
};

struct l8_tune {
    uint32_t gemv_max_m[L8_TP_N];  /* rows <= this: GEMV; more: cuBLASLt */
    uint32_t n_sets;               /* oldest first */
    struct l8_algo_set set[L8_TUNE_ALGO_SETS];
};

/* Enqueue product p at M rows on the stream, over every layer of the
 * model (so the weights come from memory, as in a step): through cuBLASLt
 * when gemm, else the GEMV. Nonzero: this path cannot run it. */
typedef int (*l8_tune_run_fn)(void *ctx, enum l8_tune_product p, uint32_t M, bool gemm);

/* Time both paths at M = 1, 2, 4, ... L8_TUNE_MAX_M, the fastest of 3 runs
 * after a warm-up each, and stop at the first M where cuBLASLt wins (or at
 * the first the GEMV cannot run). report gets one line per product: its
 * choice and every M's two times; then the measurement's own time. */
int l8_tune_measure(cudaStream_t st, l8_tune_run_fn run, void *ctx, struct l8_tune *t,
                    char *report, size_t report_len);

/* Enqueue FP8 product p at M rows over every layer through cuBLASLt with
 * its heuristic's candidate `rank`: -ENOENT when there are fewer, another
 * nonzero value when this one cannot run. */
typedef int (*l8_tune_algo_fn)(void *ctx, enum l8_tune_product p, uint32_t M, uint32_t rank);

/* Time each FP8 product's candidates at M rows (fastest of 3 after a
 * warm-up) and put in s the fastest, unless it is within 3 % of the first
 * (noise must not move a product off the default); s->m = M. */
int l8_tune_measure_algos(cudaStream_t st, l8_tune_algo_fn run, void *ctx, uint32_t M,
                          struct l8_algo_set *s, char *report, size_t report_len);
/* t's choice at M rows, or NULL. */
const struct l8_algo_set *l8_tune_algos(const struct l8_tune *t, uint32_t M);
/* Adds s to t, in place of the set at the same row count if there is one,
 * else as the newest (dropping the oldest when there are 4). */
void l8_tune_add_algos(struct l8_tune *t, const struct l8_algo_set *s);

/* The line for key in path: 0, -ENOENT (no file, or no line for the key),
 * or -EINVAL with err saying which line is malformed. */
int l8_tune_load(const char *path, const char *key, struct l8_tune *t, char *err,
                 size_t err_len);
/* Writes path with key's line replaced or added (the other lines kept),
 * through a temporary file renamed over it. 0 or a negative errno. */
int l8_tune_save(const char *path, const char *key, const struct l8_tune *t);

extern const char *const l8_tune_product_name[L8_TP_N];
