#!/usr/bin/env bash
# Speculative decoding on the CPU engine: decode tokens/s of llama8-run,
# batch 1, on a synthetic "1b" checkpoint (llama8-mkmodel --preset 1b),
# plain and with drafts, every ratio against the plain run of the same
# invocation. Random weights do not repeat anything by themselves, so the
# workloads are built from the plain run's output G:
#   oracle K        --speculate oracle G: every draft holds (the ceiling)
#   ngram           prompt lookup in the sequence itself (what a prompt
#                   with no repeats gets: mostly nothing to draft)
#   ngram edit      prompt lookup with G as --draft-source (a document the
#                   output repeats, as the daemon's cache of the user's
#                   earlier request would hold it), exact, and with every
#                   16th token of G changed (an edited copy)
#   rejected K      --speculate oracle G+1: every draft wrong, --draft-fixed
#                   (the cost of verifying K rejected drafts a step) and
#                   adaptive (what the draft length controller leaves of it)
# Each run's tokens are compared with the plain run's ("same" column).
# Every case runs REPEAT times (default 2), the passes interleaved; the
# table has each case's best decode rate.
#
#   tests/bench/bench_spec.sh [BUILD_DIR] [WORK_DIR]
# Prints a table; writes WORK_DIR/bench-spec.json (rows: method, kind,
# metrics, notes, error, as bench-cpu.json), the load average before and
# after in it.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
work=${2:-$build/bench-spec}
run=$build/daemon/tools/llama8-run
mk=$build/daemon/tools/llama8-mkmodel
[ -x "$run" ] && [ -x "$mk" ] || { echo "build first: ninja -C $build" >&2; exit 1; }
mkdir -p "$work"
PROMPT=${PROMPT:-32}
NEW=${NEW:-40}
REPEAT=${REPEAT:-2}
NUMERICS=${NUMERICS:-exact}
load() { cut -d' ' -f1-3 /proc/loadavg; }
load0=$(load)

model=$work/model-1b
if [ ! -f "$model/config.json" ]; then
    t0=$(date +%s.%N); "$mk" --preset 1b --seed 1 --out "$model" --quiet; t1=$(date +%s.%N)
    echo "mkmodel --preset 1b: $(python3 -c "print(round($t1 - $t0, 1))") s"
fi
# Prompt ids: deterministic, inside the vocabulary (as bench_cpu.sh's).
ids=$(seq 4 $((PROMPT + 3)) | awk '{printf "%s%d", (NR>1?",":""), 1 + ($1 * 7919) % 2000}')
lr() { "$run" --model "$model" --tokens "$ids" --max-new "$NEW" --ignore-eos --numerics "$NUMERICS" \
          --json "$@" 2>/dev/null; }
# tokens, decode tokens/s, acceptance, mean accepted, tokens a step of a --json line
fields() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(",".join(map(str, j["tokens"])), j["decode_tokens_per_s"], j["acceptance_rate"], j["mean_accepted"], j["tokens_per_step"], j["drafted"])' "$1"
}

echo "load average before: $load0 ($(nproc) cores); 1b, $NUMERICS, prompt $PROMPT, new $NEW, batch 1, best of $REPEAT"
# G: the tokens every run must give, and what the drafts are made from
j=$(lr) || { echo "plain run failed" >&2; exit 1; }
read -r G _ <<<"$(fields "$j")"
echo "$G" >"$work/out.txt"
echo "$G" | tr ',' '\n' | awk '{print (NR % 16 == 8) ? ($1 + 1) % 2000 : $1}' | paste -sd, >"$work/edited.txt"
echo "$G" | tr ',' '\n' | awk '{print ($1 + 1) % 2000}' | paste -sd, >"$work/wrong.txt"

# name|K|notes|llama8-run options; the plain run first: the baseline
cases=("plain|-|no speculation: the baseline of every ratio|"
       "oracle|2|drafts: the plain output|--speculate oracle $work/out.txt --draft-max 2"
       "oracle|4|drafts: the plain output|--speculate oracle $work/out.txt --draft-max 4"
       "oracle|8|drafts: the plain output|--speculate oracle $work/out.txt --draft-max 8"
       "ngram|4|own sequence only|--speculate ngram"
       "ngram edit|4|source: the plain output|--speculate ngram --draft-source $work/out.txt"
       "ngram edit 1/16 changed|4|source: the plain output, every 16th token changed|--speculate ngram --draft-source $work/edited.txt"
       "rejected, fixed|2|drafts all wrong, K every step|--speculate oracle $work/wrong.txt --draft-max 2 --draft-fixed"
       "rejected, fixed|4|drafts all wrong, K every step|--speculate oracle $work/wrong.txt --draft-max 4 --draft-fixed"
       "rejected, fixed|8|drafts all wrong, K every step|--speculate oracle $work/wrong.txt --draft-max 8 --draft-fixed"
       "rejected, adaptive|4|drafts all wrong, the adaptive draft length|--speculate oracle $work/wrong.txt --draft-max 4")
# REPEAT passes over every case, interleaved (the machine's load drifts
# alike for all); each case's best decode rate counts
declare -A best rest
for ((pass = 1; pass <= REPEAT; pass++)); do
    for i in "${!cases[@]}"; do
        IFS='|' read -r _ _ _ opts <<<"${cases[$i]}"
        # shellcheck disable=SC2086  # opts: words by design
        jj=$(lr $opts) || { best[$i]=failed; continue; }
        read -r toks tps others <<<"$(fields "$jj")"
        [ "${best[$i]:-}" = failed ] && continue
        if [ -z "${best[$i]:-}" ] || python3 -c "import sys; sys.exit(not $tps > ${best[$i]})"; then
            best[$i]=$tps
        fi
        same=yes
        [ "$toks" = "$G" ] || same=NO
        case "${rest[$i]:-}" in *NO) same=NO ;; esac
        rest[$i]="$others $same"
    done
done
base=${best[0]}
rows=()
printf '%-24s %3s %10s %6s %7s %8s %8s %4s\n' case K decode_t/s ratio accept mean_acc tok/step same
for i in "${!cases[@]}"; do
    IFS='|' read -r name k notes _ <<<"${cases[$i]}"
    if [ "${best[$i]}" = failed ] || [ "$base" = failed ]; then
        printf '%-24s %3s failed\n' "$name" "$k"
        rows+=("{\"method\":\"llama8-run cpu 1b $name K $k\",\"kind\":\"llama8\",\"metrics\":{},\"notes\":\"$notes\",\"error\":\"llama8-run failed\"}")
        continue
    fi
    tps=${best[$i]}
    read -r acc mean tstep drafted same <<<"${rest[$i]}"
    ratio=$(python3 -c "print('%.2f' % ($tps / $base))")
    printf '%-24s %3s %10.2f %6s %6.1f%% %8.2f %8.2f %4s\n' "$name" "$k" "$tps" "$ratio" \
        "$(python3 -c "print($acc * 100)")" "$mean" "$tstep" "$same"
    rows+=("{\"method\":\"llama8-run cpu 1b $name K $k\",\"kind\":\"llama8\",\"metrics\":{\"decode_tok_s\":$tps,\"ratio_vs_plain\":$ratio,\"acceptance_rate\":$acc,\"mean_accepted\":$mean,\"tokens_per_step\":$tstep,\"drafted\":$drafted,\"same_tokens\":$([ "$same" = yes ] && echo true || echo false)},\"notes\":\"$notes, best of $REPEAT\",\"error\":null}")
done
load1=$(load)
echo "load average after: $load1"

{ echo '{"bench":"spec","date":"'"$(date -u +%FT%TZ)"'","commit":"'"$(git -C "$src" rev-parse --short HEAD 2>/dev/null)"'","cores":'"$(nproc)"','
  echo '"load_before":"'"$load0"'","load_after":"'"$load1"'","prompt":'"$PROMPT"',"new":'"$NEW"',"repeat":'"$REPEAT"',"numerics":"'"$NUMERICS"'","methods":['
  (IFS=,; echo "${rows[*]}"); echo ']}'; } | python3 -m json.tool >"$work/bench-spec.json"
echo "wrote $work/bench-spec.json"
