/* cuda_profile.h - the CUDA engine's step profile (its options'
 * profile_file: llama8d's profile_file key, llama8-run's --profile-file).
 *
 * Each step starts behind l8k_hold_stream(), so the host has queued the
 * whole step before the GPU runs it; an event after every operation then
 * times the operations back to back. Per kind of step (prefill: any
 * sequence with more than one token; decode) the GPU time of each phase is
 * summed; at the end a table goes to the engine's log and JSON to the
 * file. A step whose queueing outlasted the hold is counted as host-bound
 * (its gaps would be in the figures). Profiling turns decode graphs off
 * and breaks programmatic dependent launch between the timed kernels: it
 * says where a step's GPU time goes, not how fast the unprofiled step is.
 *
 * Every function accepts NULL (profiling off) and then does nothing. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "engine.h"

enum l8_phase {
    L8_PH_START,       /* the mark after the hold: no time of its own */
    L8_PH_UPLOAD,      /* the step's metadata and history to the device */
    L8_PH_EMBED,
    L8_PH_ATTN_NORM,   /* residual add + RMSNorm (+ quantize) */
    L8_PH_QKV,
    L8_PH_ROPE_KV,     /* RoPE on q and k, k and v into the pool */
    L8_PH_ATTENTION,
    L8_PH_QUANTIZE,    /* attention output to FP8 */
    L8_PH_O,
    L8_PH_MLP_NORM,
    L8_PH_GATE_UP,
    L8_PH_SILU,        /* SiLU(gate) * up (+ quantize) */
    L8_PH_DOWN,
    L8_PH_LOGITS,      /* last residual add, final norm, lm_head */
    L8_PH_SAMPLE,      /* sampling and the copies back */
    L8_PH_N
};

struct l8_cuda_prof;

/* A profile whose JSON goes to path; NULL when path is NULL or empty (or
 * on failure, said to log). log(log_ud, ...) also gets the table. */
struct l8_cuda_prof *l8_prof_create(cudaStream_t st, const char *path, l8_engine_log_fn *log,
                                    void *log_ud);
/* A phase that is one product with an [n, k] weight of elt_bytes a value:
 * the table gives the GB/s of its weights and, when it has a row for every
 * token of the step (the projections), its TFLOP/s. */
void l8_prof_product(struct l8_cuda_prof *p, enum l8_phase ph, uint64_t n, uint64_t k,
                     uint32_t elt_bytes, bool per_token);
/* Before the step's first operation on the stream; tokens: the step's. */
void l8_prof_begin(struct l8_cuda_prof *p, bool prefill, uint32_t tokens);
/* After each operation: the time since the last mark belongs to ph. */
void l8_prof_mark(struct l8_cuda_prof *p, enum l8_phase ph);
/* After the step's last synchronization; ok false drops the step. */
void l8_prof_end(struct l8_cuda_prof *p, bool ok);
/* Writes the table and FILE, frees p. */
void l8_prof_finish(struct l8_cuda_prof *p);
