#!/usr/bin/env bash
# CPU engine benchmark: llama8-run in-process on the golden tiny checkpoint
# and on the "1b" preset of llama8-mkmodel (Llama 3.2 1B shapes), at 1 thread
# and at every core, in exact numerics, fp8 numerics, and fp8 with the
# opt-in FP8 lm_head. For each: prefill tokens/s (PROMPT and LONG prompts),
# decode tokens/s, the weight bytes a decoded token reads, and the GB/s
# that makes against this machine's read bandwidth (bench_membw, measured
# in the same run at the same thread count). With LLAMA_BENCH=path/to/
# llama-bench (llama.cpp built outside this repository), llama.cpp runs
# the same prompts and thread counts on Q8_0 GGUFs of both models' shapes,
# made by tests/bench/mkgguf.py with llama.cpp's gguf-py (GGUF_PY, default
# beside llama-bench's build; PYTHON with numpy), and the ratios are printed.
#
#   tests/bench/bench_cpu.sh [--with-8b] [BUILD_DIR] [WORK_DIR]
#   env: PROMPT (128), LONG (512; 0 skips), NEW (64), THREADS ("1 $(nproc)"),
#        REPS (3: each llama8 figure is the median of REPS runs; llama-bench
#        averages as many), LLAMA_BENCH, GGUF_PY, PYTHON
# Prints a table; writes WORK_DIR/bench-cpu.json (rows: method, kind,
# metrics, notes, error). --with-8b also times llama8-mkmodel --preset
# llama-3.1-8b (needs ~8.5 GB of disk under the work dir).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
with8b=0
[ "${1:-}" = --with-8b ] && { with8b=1; shift; }
build=${1:-$src/build}
work=${2:-$build/bench-cpu}
run=$build/daemon/tools/llama8-run
mk=$build/daemon/tools/llama8-mkmodel
membw=$build/tests/engine/bench_membw
[ -x "$run" ] && [ -x "$mk" ] && [ -x "$membw" ] || { echo "build first: ninja -C $build" >&2; exit 1; }
mkdir -p "$work"
PROMPT=${PROMPT:-128}
LONG=${LONG:-512}
NEW=${NEW:-64}
THREADS=${THREADS:-"1 $(nproc)"}
REPS=${REPS:-3}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "cpu: ${cpu:-unknown}, $(nproc) cores"
now() { date +%s.%N; }
elapsed() { python3 -c "print(round($2 - $1, 2))"; }
# Prompt ids: deterministic, inside every model's vocabulary (>= 2048).
ids() { seq 4 $(($1 + 3)) | awk '{printf "%s%d", (NR>1?",":""), 1 + ($1 * 7919) % 2000}'; }
field() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j[sys.argv[2]])' "$1" "$2"; }

rows=()
declare -A models=([golden-tiny]="$src/tests/golden/tiny-llama31-fp8" [1b]="$work/model-1b")
if [ ! -f "$work/model-1b/config.json" ]; then
    t0=$(now); "$mk" --preset 1b --seed 1 --out "$work/model-1b" --quiet; t1=$(now)
    echo "mkmodel --preset 1b: $(elapsed "$t0" "$t1") s"
fi

declare -A bw
for t in $THREADS; do
    bw[$t]=$("$membw" "$t")
    echo "read bandwidth, $t thread(s): ${bw[$t]} GB/s"
    rows+=("{\"method\":\"bench_membw $t\",\"kind\":\"machine\",\"metrics\":{\"read_gb_s\":${bw[$t]}},\"notes\":\"1 GiB, best of 5\",\"error\":null}")
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

# REPS llama8-runs: prints one JSON with the median of each figure, or
# nothing when a run fails.
run_json() {
    local js=() j
    for _ in $(seq "$REPS"); do
        j=$("$run" --model "$1" --numerics "$2" --lm-head "$3" --threads "$4" \
            --tokens "$(ids "$5")" --max-new "$6" --ignore-eos --warmup --json 2>/dev/null) || return 0
        js+=("$j")
    done
    python3 -c '
import json, statistics, sys
r = [json.loads(a) for a in sys.argv[1:]]
m = dict(r[0])
for k in ("prefill_tokens_per_s", "decode_tokens_per_s"):
    m[k] = statistics.median(x[k] for x in r)
print(json.dumps(m))' "${js[@]}"
}

declare -A l8dec l8pf l8long
printf '%-11s %-6s %-10s %3s %9s %9s %9s %9s %7s %5s\n' model numerics lm_head thr \
    "pf$PROMPT/s" "pf$LONG/s" decode/s MB/token GB/s "%bw"
for name in golden-tiny 1b; do
    for cfg in "exact checkpoint" "fp8 checkpoint" "fp8 fp8"; do
        read -r num lm <<<"$cfg"
        for t in $THREADS; do
            method="llama8-run cpu $name $num lm_head=$lm threads=$t"
            j=$(run_json "${models[$name]}" "$num" "$lm" "$t" "$PROMPT" "$NEW")
            if [ -z "$j" ]; then
                rows+=("{\"method\":\"$method\",\"kind\":\"llama8\",\"metrics\":{},\"notes\":\"\",\"error\":\"llama8-run failed\"}")
                echo "$method: llama8-run failed"
                continue
            fi
            pf=$(field "$j" prefill_tokens_per_s); dc=$(field "$j" decode_tokens_per_s)
            wb=$(field "$j" step_weight_bytes)
            pl=0
            if [ "$LONG" -gt 0 ]; then
                jl=$(run_json "${models[$name]}" "$num" "$lm" "$t" "$LONG" 1)
                [ -n "$jl" ] && pl=$(field "$jl" prefill_tokens_per_s)
            fi
            read -r mb gbs pct < <(python3 -c "d=$dc; b=$wb; print(round(b/1e6,1), round(d*b/1e9,2), round(100*d*b/1e9/${bw[$t]}))")
            printf '%-11s %-6s %-10s %3s %9.1f %9.1f %9.2f %9.1f %7.2f %4s%%\n' "$name" "$num" "$lm" \
                "$t" "$pf" "$pl" "$dc" "$mb" "$gbs" "$pct"
            rows+=("{\"method\":\"$method\",\"kind\":\"llama8\",\"metrics\":{\"prefill_tok_s\":$pf,\"prefill_long_tok_s\":$pl,\"decode_tok_s\":$dc,\"step_weight_bytes\":$wb,\"decode_gb_s\":$gbs,\"decode_pct_of_read_bw\":$pct},\"notes\":\"prompt $PROMPT and $LONG, new $NEW, --warmup, median of $REPS\",\"error\":null}")
            l8dec[$name,$num,$lm,$t]=$dc; l8pf[$name,$num,$lm,$t]=$pf; l8long[$name,$num,$lm,$t]=$pl
        done
    done
done

# llama.cpp on the same shapes, thread counts and prompts: a Q8_0 GGUF of
# each model's shapes (tests/bench/mkgguf.py, with llama.cpp's gguf-py).
if [ -n "${LLAMA_BENCH:-}" ]; then
    gpy=${GGUF_PY:-$(dirname "$LLAMA_BENCH")/../../gguf-py}
    py=${PYTHON:-python3}
    echo "llama-bench $LLAMA_BENCH: ratios are llama8 fp8 with the FP8 lm_head / llama.cpp Q8_0"
    for name in golden-tiny 1b; do
        gguf=$work/gguf/$name-q8_0.gguf
        if [ ! -f "$gguf" ]; then
            mkdir -p "$work/gguf"
            PYTHONPATH=$gpy "$py" "$src/tests/bench/mkgguf.py" "${models[$name]}" "$gguf.tmp" q8_0 \
                && mv "$gguf.tmp" "$gguf" || { echo "mkgguf $name failed (GGUF_PY=$gpy)"; continue; }
        fi
        for t in $THREADS; do
            p="$PROMPT"; [ "$LONG" -gt 0 ] && p="$PROMPT,$LONG"
            lj=$("$LLAMA_BENCH" -m "$gguf" -t "$t" -p "$p" -n "$NEW" -r "$REPS" -o json 2>/dev/null) || lj=""
            if [ -z "$lj" ]; then
                echo "llama-bench failed on $name at $t threads"
                continue
            fi
            read -r lpf llong ldc < <(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); p, l = int(sys.argv[2]), int(sys.argv[3])
ts = lambda np_, ng: next((x["avg_ts"] for x in r if x["n_prompt"] == np_ and x["n_gen"] == ng), 0)
print(ts(p, 0), ts(l, 0) if l else 0, ts(0, int(sys.argv[4])))' "$lj" "$PROMPT" "$LONG" "$NEW")
            k="$name,fp8,fp8,$t"
            python3 -c "
a, b, c, x, y, z = ${l8pf[$k]:-0}, ${l8long[$k]:-0}, ${l8dec[$k]:-0}, $lpf, $llong, $ldc
f = lambda u, v: round(u / v, 2) if v else 0
print('%-11s llama.cpp %s threads: prefill %.1f / %.1f, decode %.2f tok/s; llama8 ratio %s / %s / %s'
      % ('$name', '$t', x, y, z, f(a, x), f(b, y), f(c, z)))"
            rows+=("{\"method\":\"llama-bench $name q8_0 threads=$t\",\"kind\":\"llama.cpp\",\"metrics\":{\"prefill_tok_s\":$lpf,\"prefill_long_tok_s\":$llong,\"decode_tok_s\":$ldc},\"notes\":\"$(basename "$gguf"), -r $REPS\",\"error\":null}")
        done
    done
fi

if [ $with8b = 1 ]; then
    rm -rf "$work/model-8b"
    t0=$(now); "$mk" --preset llama-3.1-8b --seed 1 --out "$work/model-8b" --quiet; t1=$(now)
    s=$(elapsed "$t0" "$t1")
    printf 'llama8-mkmodel --preset llama-3.1-8b: %.1f s (%s)\n' "$s" "$(du -sh "$work/model-8b" | cut -f1)"
    rows+=("{\"method\":\"llama8-mkmodel llama-3.1-8b\",\"kind\":\"llama8\",\"metrics\":{\"seconds\":$s},\"notes\":\"threads $(nproc)\",\"error\":null}")
    rm -rf "$work/model-8b"
fi

{ echo '{"bench":"cpu","date":"'"$(date -u +%FT%TZ)"'","commit":"'"$(git -C "$src" rev-parse --short HEAD 2>/dev/null)"'","cpu":"'"$cpu"'","cores":'"$(nproc)"',"load":"'"$(cut -d' ' -f1-3 /proc/loadavg)"'","methods":['
  (IFS=,; echo "${rows[*]}"); echo ']}'; } | python3 -m json.tool >"$work/bench-cpu.json"
echo "wrote $work/bench-cpu.json"
