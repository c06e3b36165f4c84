#!/usr/bin/env bash
# emu_daemon.sh LLAMA8D_EMU LLAMA8D LLAMA8CTL LLAMA8_MKMODEL TOKENIZER_JSON
# llama8d with the cuda backend (on the CPU emulation, tests/gpu/emu) and
# llama8d with the cpu backend serve the same three concurrent requests
# (greedy, and sampled with seeds) on a synthetic model with the real
# tokenizer, exact numerics: the replies must be byte-identical. This runs
# the daemon's engine thread, batching, decode graphs and warm-up with the
# cuda engine end to end.
set -euo pipefail
emu=$1 cpu=$2 ctl=$3 mkmodel=$4 tokenizer=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/l8-emu-daemon.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
export LLAMA8_TOKENIZER_CACHE=$tmp/cache

"$mkmodel" --preset tiny --seed 11 --out "$tmp/model" --tokenizer "$tokenizer" --quiet

start() {   # NAME BINARY BACKEND
    "$2" --model "$tmp/model" --socket "$tmp/$1.sock" --backend "$3" --numerics exact \
        --threads 1 --kv-pages 128 --max-ctx 512 --max-batch 4 --max-step-tokens 64 \
        2>"$tmp/$1.log" &
    pids+=($!)
}
start cuda "$emu" cuda
start cpu "$cpu" cpu
for name in cuda cpu; do
    for _ in $(seq 1200); do [ -S "$tmp/$name.sock" ] && break; sleep 0.1; done
    [ -S "$tmp/$name.sock" ] || { echo "FAIL: llama8d ($name) did not start"; cat "$tmp/$name.log"; exit 1; }
done

backend=$(LLAMA8_SOCKET=$tmp/cuda.sock "$ctl" status --json | grep -o '"backend": *"[a-z]*"')
case $backend in *cuda*) ;; *) echo "FAIL: the emulated daemon reports $backend"; exit 1 ;; esac

ask() {   # NAME
    export LLAMA8_SOCKET=$tmp/$1.sock
    "$ctl" generate --max-new 12 "Why is the sky blue?" >"$tmp/$1.a" &
    local a=$!
    "$ctl" generate --max-new 12 --temperature 0.8 --seed 5 "Write a haiku about rust." >"$tmp/$1.b" &
    local b=$!
    "$ctl" generate --max-new 12 --temperature 0.7 --top-p 0.9 --seed 9 \
        "List three prime numbers." >"$tmp/$1.c"
    wait "$a" "$b"
}
ask cuda &
q=$!
ask cpu
wait "$q"

fail=0
for r in a b c; do
    if ! cmp -s "$tmp/cuda.$r" "$tmp/cpu.$r"; then
        echo "FAIL: request $r differs"
        echo "  cuda: $(cat "$tmp/cuda.$r")"
        echo "  cpu:  $(cat "$tmp/cpu.$r")"
        fail=1
    fi
    [ -s "$tmp/cpu.$r" ] || { echo "FAIL: request $r: empty reply"; fail=1; }
done
grep -h "^llama8d: cuda:" "$tmp/cuda.log" || true
# the cuda backend's warm-up: graphs at batch 1, 2, 4, then a full step's prefill
grep -h "^llama8d: \(warm-up\|decode graphs\)" "$tmp/cuda.log"
grep -q "warm-up prefill of 64 tokens" "$tmp/cuda.log" ||
    { echo "FAIL: no warm-up prefill of a full step (64 tokens) in the cuda daemon's log"; fail=1; }
[ "$fail" = 0 ] && echo "ok: 3 concurrent replies, cuda (emulated) == cpu, byte for byte"
exit "$fail"
