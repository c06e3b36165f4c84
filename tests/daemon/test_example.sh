#!/usr/bin/env bash
# The README's library example (client/example.c) against a real llama8d:
# its streamed reply must equal llama8ctl generate's for the same question
# (both greedy, 64 new tokens, chat format), and the daemon logs each.
#   test_example.sh LLAMA8D LLAMA8CTL LLAMA8_EXAMPLE LLAMA8_MKMODEL TOKENIZER_JSON
set -euo pipefail
llama8d=$1 ctl=$2 example=$3 mkmodel=$4 tokenizer=$5
tmp=$(mktemp -d /tmp/l8example-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

"$mkmodel" --preset tiny --seed 7 --out "$tmp/model" --tokenizer "$tokenizer" --quiet
export LLAMA8_SOCKET=$tmp/d.sock
"$llama8d" --model "$tmp/model" --socket "$LLAMA8_SOCKET" --threads 1 2>"$tmp/llama8d.log" &
pid=$!
for _ in $(seq 200); do [ -S "$LLAMA8_SOCKET" ] && break; sleep 0.05; done

q="Why is the sky blue?"
"$example" "$q" >"$tmp/example.out"
"$ctl" generate --max-new 64 "$q" >"$tmp/ctl.out"
if ! cmp -s "$tmp/example.out" "$tmp/ctl.out"; then
    echo "FAIL: example and llama8ctl generate differ"
    diff <(od -c "$tmp/example.out") <(od -c "$tmp/ctl.out") | head -20
    exit 1
fi
[ -s "$tmp/example.out" ] || { echo "FAIL: empty reply"; exit 1; }
# The daemon's log has a line for each request; the second one's prompt came
# from the prefix cache (the same question, the same uid).
re='request 1 done \((eos|length)\): ([0-9]+) prompt tokens \(([0-9]+) from the prefix cache\), ([0-9]+) generated; first token after [0-9.]+ ms'
lines=$(grep -E "client [12] $re" "$tmp/llama8d.log" || true)
[ "$(grep -c . <<<"$lines")" = 2 ] || { echo "FAIL: no request lines in the log:"; cat "$tmp/llama8d.log"; exit 1; }
[[ $(tail -1 <<<"$lines") =~ $re ]] && [ "${BASH_REMATCH[3]}" -gt 0 ] ||
    { echo "FAIL: the second request took nothing from the prefix cache: $lines"; exit 1; }
echo "ok: example == llama8ctl generate ($(wc -c <"$tmp/example.out") bytes)"
