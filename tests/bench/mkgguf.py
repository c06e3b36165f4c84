#!/usr/bin/env python3
"""mkgguf.py - a llama.cpp GGUF with a llama8 model's shapes, for the
side-by-side speed comparison in bench_cpu.sh.

    PYTHONPATH=/path/to/llama.cpp/gguf-py tests/bench/mkgguf.py MODEL_DIR OUT.gguf [q8_0|f16]

Reads MODEL_DIR/config.json (the shapes only) and writes a Llama GGUF of
the same shapes with seeded random weights: every projection, the
embedding and the lm_head in Q8_0 (or F16), the norms in F32, and a
placeholder vocabulary of the same size (llama-bench feeds token ids, it
never tokenizes). The weights' values do not change llama.cpp's speed, so
the tokens/s compare like for like with llama8 on MODEL_DIR. Uses
llama.cpp's own gguf-py (numpy), which is not part of this repository.
"""
import json
import sys

import numpy as np
import gguf


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().split("\n\n")[1])
    model, out = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) == 4 else "q8_0"
    qtype, ftype = {
        "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
        "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    }[kind]
    with open(f"{model}/config.json") as f:
        c = json.load(f)
    d, L, ff = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    nh, nkv, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    hd = c.get("head_dim") or d // nh
    rng = np.random.default_rng(1)

    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(min(c.get("max_position_embeddings", 8192), 131072))
    w.add_embedding_length(d)
    w.add_block_count(L)
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(c.get("rope_theta", 500000.0)))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_file_type(ftype)
    w.add_vocab_size(V)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([gguf.TokenType.NORMAL] * V)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def mat(name, rows, cols):
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", V, d)
    for i in range(L):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", nh * hd, d)
        mat(p + "attn_k.weight", nkv * hd, d)
        mat(p + "attn_v.weight", nkv * hd, d)
        mat(p + "attn_output.weight", d, nh * hd)
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    norm("output_norm.weight", d)
    if not c.get("tie_word_embeddings", False):
        mat("output.weight", V, d)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
