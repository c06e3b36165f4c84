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
 *     KEY <TAB> qkv 8 o 8 gate_up 4 down 8 lm_head 16
 * and measured only when the file has no line for the key. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

enum l8_tune_product { L8_TP_QKV, L8_TP_O, L8_TP_GATE_UP, L8_TP_DOWN, L8_TP_LM_HEAD, L8_TP_N };

#define L8_TUNE_MAX_M 64u          /* largest row count measured */
#define L8_TUNE_KEY_MAX 512

struct l8_tune {
    uint32_t gemv_max_m[L8_TP_N];  /* rows <= this: GEMV; more: cuBLASLt */
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

/* The line for key in path: 0, -ENOENT (no file, or no line for the key),
 * or -EINVAL with err saying which line is malformed. */
int l8_tune_load(const char *path, const char *key, struct l8_tune *t, char *err,
                 size_t err_len);
/* Writes path with key's line replaced or added (the other lines kept),
 * through a temporary file renamed over it. 0 or a negative errno. */
int l8_tune_save(const char *path, const char *key, const struct l8_tune *t);

extern const char *const l8_tune_product_name[L8_TP_N];
