#!/usr/bin/env bash
# CPU engine benchmark: prefill and decode tokens/s of llama8-run, in-process,
# on the golden tiny checkpoint and on synthetic checkpoints written by
# llama8-mkmodel (the "1b" preset: Llama 3.2 1B shapes), in both numerics,
# with every core. Optionally (--with-8b) times llama8-mkmodel --preset
# llama-3.1-8b (needs ~8.5 GB of disk under the work dir).
#
#   tests/bench/bench_cpu.sh [--with-8b] [BUILD_DIR] [WORK_DIR]
# Prints a table; writes WORK_DIR/bench-cpu.json (rows: method, kind,
# metrics, notes, error — the shape of shared/reference/bench-h100-linnet.json).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
with8b=0
[ "${1:-}" = --with-8b ] && { with8b=1; shift; }
build=${1:-$src/build}
work=${2:-$build/bench-cpu}
run=$build/daemon/tools/llama8-run
mk=$build/daemon/tools/llama8-mkmodel
[ -x "$run" ] && [ -x "$mk" ] || { echo "build first: ninja -C $build" >&2; exit 1; }
mkdir -p "$work"
PROMPT=${PROMPT:-128}
NEW=${NEW:-64}
now() { date +%s.%N; }
elapsed() { python3 -c "print(round($2 - $1, 2))"; }

rows=()
declare -A models=([golden-tiny]="$src/tests/golden/tiny-llama31-fp8")
for preset in tiny 1b; do
    dir=$work/model-$preset
    if [ ! -f "$dir/config.json" ]; then
        t0=$(now); "$mk" --preset "$preset" --seed 1 --out "$dir" --quiet; t1=$(now)
        echo "mkmodel --preset $preset: $(elapsed "$t0" "$t1") s"
    fi
    models[$preset]=$dir
done

# Prompt ids: deterministic, inside every model's vocabulary (>= 2048).
ids=$(seq 4 $((PROMPT + 3)) | awk '{printf "%s%d", (NR>1?",":""), 1 + ($1 * 7919) % 2000}')

printf '%-12s %-6s %12s %12s %10s\n' model numerics prefill_tok/s decode_tok/s load_s
for name in golden-tiny tiny 1b; do
    for num in exact fp8; do
        j=$("$run" --model "${models[$name]}" --tokens "$ids" --max-new "$NEW" \
                --ignore-eos --numerics "$num" --json 2>/dev/null) || j=""
        if [ -z "$j" ]; then
            rows+=("{\"method\":\"llama8-run cpu $name $num\",\"kind\":\"llama8\",\"metrics\":{},\"notes\":\"\",\"error\":\"llama8-run failed\"}")
            continue
        fi
        read -r pf dc ld < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j["load_s"])' "$j")
        printf '%-12s %-6s %12.1f %12.1f %10.3f\n' "$name" "$num" "$pf" "$dc" "$ld"
        rows+=("{\"method\":\"llama8-run cpu $name $num\",\"kind\":\"llama8\",\"metrics\":{\"prefill_tok_s\":$pf,\"decode_tok_s\":$dc,\"load_s\":$ld},\"notes\":\"prompt $PROMPT, new $NEW, threads $(nproc)\",\"error\":null}")
    done
done

if [ $with8b = 1 ]; then
    rm -rf "$work/model-8b"
    t0=$(now); "$mk" --preset llama-3.1-8b --seed 1 --out "$work/model-8b" --quiet; t1=$(now)
    s=$(elapsed "$t0" "$t1")
    printf 'llama8-mkmodel --preset llama-3.1-8b: %.1f s (%s)\n' "$s" "$(du -sh "$work/model-8b" | cut -f1)"
    rows+=("{\"method\":\"llama8-mkmodel llama-3.1-8b\",\"kind\":\"llama8\",\"metrics\":{\"seconds\":$s},\"notes\":\"threads $(nproc)\",\"error\":null}")
    rm -rf "$work/model-8b"
fi

{ echo '{"bench":"cpu","date":"'"$(date -u +%FT%TZ)"'","commit":"'"$(git -C "$src" rev-parse --short HEAD 2>/dev/null)"'","cores":'"$(nproc)"',"methods":['
  (IFS=,; echo "${rows[*]}"); echo ']}'; } | python3 -m json.tool >"$work/bench-cpu.json"
echo "wrote $work/bench-cpu.json"
