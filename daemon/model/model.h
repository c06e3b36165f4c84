/* model.h - a Llama checkpoint loaded for inference.
 *
 * The loader maps the safetensors files and exposes every weight in one
 * canonical form, whatever the checkpoint's dtype:
 *   - projections as FP8 E4M3 codes + one f32 scale per output row
 *     (FP8-dynamic checkpoints are used as stored; BF16/F16/F32 ones are
 *     quantized at load exactly as the FP8-dynamic recipe does, see
 *     l8_quantize_weight_row);
 *   - embedding and lm_head as dense rows of their stored dtype
 *     (BF16, F16 or F32), decoded on use;
 *   - norm weights as f32.
 * Tensor names are Hugging Face's (model.layers.N.self_attn.q_proj.weight
 * and its .weight_scale, ...). */
#pragma once
#include <stdint.h>
#include "config.h"
#include "safetensors.h"

/* An FP8 projection y = x W^T, W [out, in]. Dequantized W[o][i] is
 * l8_e4m3_lut[w[o*in + i]] * scale[o]. */
struct l8_qweight {
    const uint8_t *w;       /* [out, in] E4M3 codes, row-major */
    const float *scale;     /* [out] f32 per-output-row scale */
    uint32_t out, in;
};

/* A dense matrix kept in its checkpoint dtype. */
struct l8_dense {
    enum l8_dtype dtype;    /* L8_BF16, L8_F16 or L8_F32 */
    const void *data;       /* [rows, cols] row-major */
    uint32_t rows, cols;
};

struct l8_layer {
    const float *attn_norm; /* [hidden] input_layernorm.weight */
    const float *mlp_norm;  /* [hidden] post_attention_layernorm.weight */
    struct l8_qweight wq;   /* [n_heads*head_dim, hidden] */
    struct l8_qweight wk;   /* [n_kv_heads*head_dim, hidden] */
    struct l8_qweight wv;   /* [n_kv_heads*head_dim, hidden] */
    struct l8_qweight wo;   /* [hidden, n_heads*head_dim] */
    struct l8_qweight wgate;/* [inter, hidden] */
    struct l8_qweight wup;  /* [inter, hidden] */
    struct l8_qweight wdown;/* [hidden, inter] */
};

struct l8_model {
    struct l8_config cfg;
    char dir[4096];
    struct l8_dense embed;      /* [vocab, hidden] model.embed_tokens.weight */
    struct l8_dense lm_head;    /* [vocab, hidden] lm_head.weight, or embed when tied */
    const float *final_norm;    /* [hidden] model.norm.weight */
    struct l8_layer *layers;    /* [n_layers] */
    float *rope_inv_freq;       /* [head_dim/2], llama3 scaling applied */
    uint64_t weight_bytes;      /* bytes of all weights as the engines use them */
    struct l8_tensor_set *ts;   /* the mapped files */
    void *owned;                /* arena for converted data (scales, norms, quantized weights) */
};

/* Load DIR. nthreads threads (0: one a core) quantize dense projections
 * and check the values: a weight_scale that is not finite and > 0, an
 * E4M3 NaN code, a NaN or an infinity anywhere else is refused (-EINVAL),
 * with the tensor and the first bad element named. Returns 0, or a
 * negative errno with err naming the file and tensor at fault. */
int l8_model_load(const char *dir, int nthreads, struct l8_model **out, char err[L8_ERRLEN]);
void l8_model_free(struct l8_model *m);

/* Decode row r of a dense matrix to f32. */
void l8_dense_row(const struct l8_dense *d, uint32_t r, float *out);
