#!/bin/sh
# llama8-run's modes change no result.
# --warmup (the GPU benchmark's): the same tokens with and without it,
# prompt in chunks, sampled with a repetition penalty, for --max-new 0, 1,
# 2 (fewer decode steps than the warm-up's two) and 12.
# --batch 4: copy b gives the tokens of a single run with seed 7 + b (its
# own pages, its own history and generator), warm-up and all; and a stop
# token ends one copy while the others go on.
# --json: the memory the engine holds, its KV pool exactly the pages the run
# needs (23 positions: 2 pages of 16 a copy), no device on the cpu engine.
# A bad option value names that option.
# usage: test_run_modes.sh LLAMA8_RUN MODEL_DIR
set -eu
RUN=$1 MODEL=$2
run() { "$RUN" --model "$MODEL" --tokens 1,2,3,4,5,6,7,8,9,10,11 --chunk 4 --temperature 0.8 \
        --repetition-penalty 1.2 --numerics fp8 "$@" 2>/dev/null; }
for n in 0 1 2 12; do
    a=$(run --max-new "$n" --seed 7)
    b=$(run --max-new "$n" --seed 7 --warmup)
    if { [ "$n" != 0 ] && [ -z "$a" ]; } || [ "$a" != "$b" ]; then
        echo "FAIL: --max-new $n: without --warmup '$a', with '$b'"
        exit 1
    fi
    echo "max-new $n: $a (same with --warmup)"
done

single=""
for b in 0 1 2 3; do
    single="$single$(run --max-new 12 --seed $((7 + b)))
"
done
# copy 2's fifth token as a stop token: copy 2 stops there, the rest do not
# unless they generate it too (then they stop at it, as a single run would)
stop=$(echo "$single" | sed -n 3p | cut -d, -f5)
for extra in "" "--warmup"; do
    batch=$(run --max-new 12 --seed 7 --batch 4 $extra)
    if [ "$batch
" != "$single" ]; then
        echo "FAIL: --batch 4 $extra:"; echo "$batch"; echo "single runs:"; echo "$single"
        exit 1
    fi
    echo "batch 4 $extra: each copy equals its single run"
done
want=""
for b in 0 1 2 3; do
    want="$want$(run --max-new 12 --seed $((7 + b)) --stop "$stop")
"
done
got=$(run --max-new 12 --seed 7 --batch 4 --stop "$stop")
if [ "$got
" != "$want" ] || [ "$(echo "$got" | sed -n 3p | tr ',' '\n' | wc -l)" != 5 ]; then
    echo "FAIL: --batch 4 --stop $stop:"; echo "$got"; echo "single runs:"; echo "$want"
    exit 1
fi
echo "batch 4 --stop $stop: copy 2 stops at its fifth token, each copy equals its single run"

for b in 1 4; do
    j=$(run --max-new 12 --seed 7 --batch $b --json)
    if ! python3 - "$MODEL/config.json" "$b" "$j" <<'PY'
import json, sys
c, b, j = json.load(open(sys.argv[1])), int(sys.argv[2]), json.loads(sys.argv[3])
page = c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * 16 * (c["hidden_size"] // c["num_attention_heads"]) * 2
want = 2 * b * page / 1048576
ok = (abs(j["mem_kv_pool_mib"] - want) < 1e-9 and j["mem_weights_mib"] > 0 and j["mem_work_mib"] > 0
      and j["device_used_mib"] == 0)
print("--batch %d --json: KV pool %.4f MiB (want %.4f), weights %.2f MiB, work %.2f MiB, device %s"
      % (b, j["mem_kv_pool_mib"], want, j["mem_weights_mib"], j["mem_work_mib"], j["device_used_mib"]))
sys.exit(0 if ok else 1)
PY
    then
        echo "FAIL: --batch $b --json memory: $j"
        exit 1
    fi
done
# A bad value is reported under its own option's name (the names' table
# and the option numbers are in different orders).
for opt in backend numerics threads lm-head batch speculate draft-max; do
    e=$("$RUN" --model "$MODEL" --"$opt" bogus 2>&1 >/dev/null || true)
    case $e in
    *"bad value for --$opt: bogus"*) ;;
    *) echo "FAIL: --$opt bogus: $e"; exit 1 ;;
    esac
done
echo ok
