#!/usr/bin/env bash
# The corpus's labels checked with ajv (ajv_cases.mjs), installed into a scratch
# directory, never the tree (as tests/bench/bench_tokenizer.sh installs its Node
# reference). Exits 77 (meson: skipped) without node/npm or when the install fails.
#   tests/grammar/ajv_cases.sh CORPUS_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=${1:-$here/schemas}
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found: skipped"; exit 77; }
scratch=${L8_AJV_DIR:-/tmp/llama8-ajv}
if [ ! -d "$scratch/node_modules/ajv" ] || [ ! -d "$scratch/node_modules/ajv-formats" ]; then
  mkdir -p "$scratch"
  (cd "$scratch" && npm install --silent --no-save --no-package-lock ajv@8 ajv-formats@3 >/dev/null 2>&1) ||
    { echo "npm install of ajv failed (offline?): skipped"; exit 77; }
fi
AJV_DIR=$scratch exec node "$here/ajv_cases.mjs" "$corpus"
