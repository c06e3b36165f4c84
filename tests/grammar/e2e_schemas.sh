#!/usr/bin/env bash
# Constrained decoding end to end: llama8d on a synthetic checkpoint with the
# real vocabulary (llama8-mkmodel --preset tiny: random weights, the hard case
# for a grammar), the corpus's schemas through `llama8ctl pipe`, every whole
# reply validated by ajv (e2e_schemas.mjs), as ajv_env.sh installs it (exit
# 77, skipped, without it).
#   tests/grammar/e2e_schemas.sh LLAMA8D LLAMA8CTL LLAMA8_MKMODEL TOKENIZER_JSON SCHEMAS_DIR
# E2E_K requests per schema (default 2: one greedy, one sampled), E2E_MAX_NEW
# their max_new (default 96), E2E_JSON a file for the summary.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
daemon=$1 ctl=$2 mk=$3 tok=$4 corpus=$5
. "$here/ajv_env.sh"
work=$(mktemp -d /tmp/l8e2e-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$mk" --preset tiny --seed 5 --out "$work/model" --tokenizer "$tok" >/dev/null || exit 1
LLAMA8_TOKENIZER_CACHE="$work/cache" "$daemon" --model "$work/model" --socket "$work/d.sock" \
  --config /dev/null --allowed-group "" --max-batch 16 --threads 2 --log-level warning &
pid=$!
for _ in $(seq 600); do
  [ -S "$work/d.sock" ] && "$ctl" status --socket "$work/d.sock" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "llama8d exited"; exit 1; }
  sleep 0.2
done
LLAMA8_TOKENIZER_CACHE="$work/cache" node "$here/e2e_schemas.mjs" "$ctl" \
  "$work/d.sock" "$corpus" "${E2E_K:-2}" "${E2E_MAX_NEW:-96}" "${E2E_JSON:-}"
