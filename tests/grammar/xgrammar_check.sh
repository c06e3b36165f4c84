#!/usr/bin/env bash
# llama8's token masks against xgrammar's, an implementation we did not write (its
# WebAssembly build, npm @mlc-ai/web-xgrammar, installed into a scratch directory outside
# the tree). For each grammar in tests/grammar/gbnf/: seeded random walks through xgrammar's
# masks give the cases (valid prefixes, a few invalid ones) and xgrammar's masks
# (xgrammar_masks.mjs), mask_dump gives llama8's for the same cases, xgrammar_compare.mjs
# reports every case that differs, with the ids and their bytes, and fails on any difference
# it cannot attribute to a known xgrammar bug.
#
#   tests/grammar/xgrammar_check.sh MASK_DUMP TOKENIZER.json [OUT_DIR]
# Env: XGR_WALKS (walks per grammar, default 12: ~2000 cases, about a minute on 2
# cores; 200 for a bench-size run), XGR_SEED (default 1), XGR_GRAMMARS (names, default all),
# L8_XGRAMMAR_DIR (the scratch directory, default /tmp/llama8-xgr).
# Exit 0 pass, 1 a difference not explained, 77 skipped (no node/npm, or the install failed).
set -euo pipefail
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node/npm not found" >&2
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
dump=${1:?usage: xgrammar_check.sh MASK_DUMP TOKENIZER.json [OUT_DIR]}
tok=${2:?usage: xgrammar_check.sh MASK_DUMP TOKENIZER.json [OUT_DIR]}
out=${3:-}
walks=${XGR_WALKS:-12}
seed=${XGR_SEED:-1}
version=0.1.27 # the quirks xgrammar_masks.mjs works around are this release's
scratch=${L8_XGRAMMAR_DIR:-/tmp/llama8-xgr}
pkg=$scratch/node_modules/@mlc-ai/web-xgrammar

if [ ! -f "$pkg/lib/index.js" ] || ! grep -q "\"version\": \"$version\"" "$pkg/package.json"; then
  mkdir -p "$scratch"
  if ! (cd "$scratch" && timeout 120 npm install --silent --no-save --no-package-lock \
          "@mlc-ai/web-xgrammar@$version" >/dev/null 2>&1) || [ ! -f "$pkg/lib/index.js" ]; then
    echo "SKIP: npm install @mlc-ai/web-xgrammar@$version failed (no network?)" >&2
    exit 77
  fi
fi
export XGRAMMAR_DIR=$pkg
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/llama8-xgr-check.XXXXXX")
mkdir -p "$out"

grammars=${XGR_GRAMMARS:-$(cd "$here/gbnf" && ls *.gbnf | sed 's/\.gbnf$//')}
fail=0
for g in $grammars; do
  gbnf=$here/gbnf/$g.gbnf
  node "$here/xgrammar_masks.mjs" "$gbnf" "$tok" --walk "$walks" --seed "$seed" \
    --masks-out "$out/$g.xgrammar.jsonl" >"$out/$g.cases.jsonl" 2>"$out/$g.xgrammar.log" ||
    { echo "FAIL $g: xgrammar_masks.mjs (see $out/$g.xgrammar.log)"; fail=1; continue; }
  "$dump" "$gbnf" "$tok" "$out/$g.cases.jsonl" --compact >"$out/$g.llama8.jsonl" ||
    { echo "FAIL $g: mask_dump"; fail=1; continue; }
  if node "$here/xgrammar_compare.mjs" "$gbnf" "$tok" "$out/$g.cases.jsonl" \
      "$out/$g.llama8.jsonl" "$out/$g.xgrammar.jsonl" >"$out/$g.compare.txt"; then
    tail -n 1 "$out/$g.compare.txt"
  else
    grep -A 6 UNEXPLAINED "$out/$g.compare.txt" | head -n 40
    tail -n 1 "$out/$g.compare.txt"
    fail=1
  fi
done
echo "details: $out/*.compare.txt"
exit $fail
