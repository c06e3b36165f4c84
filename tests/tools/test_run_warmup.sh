#!/bin/sh
# llama8-run --warmup changes no result: the same tokens with and without
# it, prompt in chunks, sampled with a repetition penalty, for --max-new
# 0, 1, 2 (fewer decode steps than the warm-up's two) and 12.
# usage: test_run_warmup.sh LLAMA8_RUN MODEL_DIR
set -eu
RUN=$1 MODEL=$2
for n in 0 1 2 12; do
    set -- --model "$MODEL" --tokens 1,2,3,4,5,6,7,8,9,10,11 --chunk 4 --max-new "$n" \
        --temperature 0.8 --seed 7 --repetition-penalty 1.2 --numerics fp8
    a=$("$RUN" "$@" 2>/dev/null)
    b=$("$RUN" "$@" --warmup 2>/dev/null)
    if { [ "$n" != 0 ] && [ -z "$a" ]; } || [ "$a" != "$b" ]; then
        echo "FAIL: --max-new $n: without --warmup '$a', with '$b'"
        exit 1
    fi
    echo "max-new $n: $a (same with --warmup)"
done
echo ok
