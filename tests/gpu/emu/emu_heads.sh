#!/bin/sh
# emu_heads.sh MKMODEL TEST_EMU_ENGINE GOLDEN_DIR - the cuda engine (emulated)
# against the cpu engine on Llama 3.1 8B's attention shapes (32 heads, 8 KV
# heads, head_dim 128, hidden 4096; one layer, small MLP and vocabulary so it
# runs in about 30 s): the GQA and KV-head indexing that the golden model,
# with its one KV head, cannot show.
set -eu
dir=$(mktemp -d "${TMPDIR:-/tmp}/l8-emu-heads.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$1" --out "$dir" --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 --layers 1 \
    --inter 1024 --vocab 2048 --seed 7 --quiet
"$2" "$3" "$dir"
