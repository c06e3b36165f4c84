/* config.h - a Hugging Face Llama config.json, checked and normalized.
 *
 * Everything about the model's shape comes from here; nothing about
 * Llama 3.1 8B is hard-coded elsewhere. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define L8_MAX_EOS 8
#define L8_MAX_IGNORE 16
#define L8_ERRLEN 512

enum l8_rope_type {
    L8_ROPE_DEFAULT = 0,   /* rope_scaling null: plain RoPE with rope_theta */
    L8_ROPE_LLAMA3  = 1,   /* rope_scaling.rope_type (or .type) == "llama3" */
};

enum l8_quant {
    L8_QUANT_NONE = 0,      /* plain BF16/F16/F32 checkpoint: quantized at load */
    L8_QUANT_FP8_DYNAMIC,   /* compressed-tensors float-quantized, W8 per channel,
                               A8 dynamic per token */
};

struct l8_config {
    uint32_t hidden;        /* hidden_size */
    uint32_t inter;         /* intermediate_size */
    uint32_t n_layers;      /* num_hidden_layers */
    uint32_t n_heads;       /* num_attention_heads */
    uint32_t n_kv_heads;    /* num_key_value_heads (n_heads % n_kv_heads == 0) */
    bool kv_heads_absent;   /* ... not in config.json: n_heads, as Hugging Face reads it */
    uint32_t head_dim;      /* head_dim, or hidden / n_heads when absent */
    uint32_t vocab;         /* vocab_size */
    uint32_t max_pos;       /* max_position_embeddings */
    float rms_eps;          /* rms_norm_eps */
    float rope_theta;       /* rope_theta */
    bool rope_theta_absent; /* ... not in config.json: Hugging Face's default, 10000 */
    enum l8_rope_type rope_type;
    float rope_factor;          /* llama3: factor */
    float rope_low_freq_factor; /* llama3: low_freq_factor */
    float rope_high_freq_factor;/* llama3: high_freq_factor */
    uint32_t rope_orig_max_pos; /* llama3: original_max_position_embeddings */
    bool tie_embeddings;    /* tie_word_embeddings: lm_head = embed_tokens */
    int32_t bos;            /* bos_token_id, -1 when absent */
    uint32_t n_eos;
    int32_t eos[L8_MAX_EOS];/* eos_token_id: an int or a list */
    enum l8_quant quant;
    uint32_t n_ignore;      /* quantization_config.ignore: module names */
    char ignore[L8_MAX_IGNORE][96];
};

/* Parse config.json text. path is only used in messages. Returns 0, or
 * -EINVAL with a message naming the file and the key in err. */
int l8_config_parse(const char *json, const char *path, struct l8_config *out,
                    char err[L8_ERRLEN]);
/* Read and parse DIR/config.json. -errno for I/O errors, -EINVAL for bad
 * contents; err says which. */
int l8_config_load(const char *dir, struct l8_config *out, char err[L8_ERRLEN]);
/* Inverse frequencies for RoPE, head_dim/2 entries, with llama3 scaling
 * applied as Hugging Face's _compute_llama3_parameters does. Computed in
 * f64, stored f32. */
void l8_rope_inv_freq(const struct l8_config *c, float *inv_freq);
/* Does quantization_config.ignore cover this module (e.g. "lm_head")? */
bool l8_config_ignores(const struct l8_config *c, const char *module);
