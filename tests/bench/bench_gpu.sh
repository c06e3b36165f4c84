#!/bin/bash
# bench_gpu.sh BIN_DIR MODEL_DIR OUT_DIR - the GPU benchmarks of issue 5.
#
#   kernels:   bench_gpu_kernels (copy and FP8 GEMM ceilings, decode
#              projections' fraction of copy bandwidth, GEMV/cuBLASLt
#              crossover, prefill FP8 products' fraction of the FP8 ceiling,
#              attention)
#   single:    llama8-run, cuda fp8, 512-token prompt, 128 new, batch 1
#              (TTFT = prefill step incl. the first token, decode tok/s, load
#              time; peak GPU memory sampled by nvidia-smi every 50 ms): run 1
#              cold (the checkpoint just written; the engine's first steps,
#              with cuBLASLt's heuristics and the graph capture, timed), runs
#              2-5 with --warmup (the prompt and two decode steps once,
#              untimed): run 2 with decode graphs, run 3 with
#              --no-graphs (eager decode, for the graphs' gain), run 4
#              with --no-pdl (no programmatic dependent launch)
#   profile:   llama8-run as above with 32 new tokens and --profile-file: the
#              GPU time of each phase of a prefill and a decode step
#              (daemon/engine/cuda_profile.h), eager, kernels back to back
#   daemon single stream: the single stream through llama8d + llama8ctl
#              bench (4 requests one at a time, 512-token prompts, 128 new):
#              TTFT and decode rate as a client of the ring sees them, against
#              llama8-run's in-process figures of run 2
#   serving:   llama8d (cuda fp8) + llama8ctl bench: 256 requests, prompts
#              128-512, 128 new, 64 in flight (its output splits the engine's
#              steps: decode-only ones, their batch and time, and those with
#              prompt tokens)
#   delivery:  on that daemon, 16 short requests one at a time, the client
#              asleep on its doorbell, then spinning on its ring (--poll);
#              last, the same on a daemon with --spin-us 0 (the baseline)
#   speculation: the single stream with oracle drafts of 2 / 4 / 8 and
#              all drafts wrong (llama8-run --speculate oracle)
#   batch 64:  llama8-run --batch 64 (64 copies of the 512-token prompt,
#              decoded together): run 6 with graphs, decode tokens/s at the
#              serving batch with nothing else in the steps; run 7 its step
#              profile (what limits a decode step at batch 64)
# Every engine keeps its GEMV / cuBLASLt crossover in OUT_DIR/tune: run 1
# measures it (inside its load_s), the others take it from there, so all
# take the same paths.
# Each stage has its own timeout, cut to what is left before L8_BENCH_END
# (epoch seconds, from run.sh; 10 s kept for writing the JSON); a failed or
# cut stage becomes a row with "error", and the JSON is written on any exit.
# Writes OUT_DIR/bench-gpu.json shaped like ../shared/reference/bench-h100-linnet.json.
# Module loading stays the driver's default (lazy), as under systemd: eager
# loading would put every cuBLASLt kernel in GPU memory and inflate the peak.
# The warm runs load what they use in their untimed warm-up.
set -u
BIN=$1 MODEL=$2 OUT=$3
mkdir -p "$OUT"

peak_start() {   # sample used GPU memory (MiB) into $1 until peak_stop
    ( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null; sleep 0.05; done ) >"$1" &
    PEAK_PID=$!
}
peak_stop() {    # prints the max of the samples
    kill "$PEAK_PID" 2>/dev/null; wait "$PEAK_PID" 2>/dev/null
    sort -n "$1" | tail -1
}
TUNE=$OUT/tune
END=${L8_BENCH_END:-$(( $(date +%s) + 100000 ))}
lim() {   # seconds for a stage: at most $1, and what is left before END - 10
    local l=$(( END - $(date +%s) - 10 ))
    [ "$l" -gt "$1" ] && l=$1
    [ "$l" -lt 1 ] && l=1
    echo "$l"
}
daemon_start() {   # SOCK LOG ARGS...: llama8d (cuda fp8) in the background, DPID; waits for its socket
    local sock=$1 log=$2 i; shift 2
    "$BIN/llama8d" --model "$MODEL" --socket "$sock" --backend cuda --numerics fp8 \
        --tune_file "$TUNE" --log_level notice "$@" >"$log" 2>&1 &
    DPID=$!
    for i in $(seq 1 $(( $(lim 60) * 2 ))); do
        [ -S "$sock" ] && return
        kill -0 "$DPID" 2>/dev/null || { echo "llama8d $* exited before listening"; return; }
        sleep 0.5
    done
}
daemon_stop() {
    kill -TERM "$DPID" 2>/dev/null; sleep 2; kill -KILL "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null
}
delivery_runs() {  # SOCK NAME: 16 short requests one at a time, doorbell then --poll -> NAME_MODE.json
    local flag mode
    for mode in doorbell poll; do
        flag=; [ $mode = poll ] && flag=--poll
        timeout "$(lim 30)" "$BIN/llama8ctl" bench --socket "$1" -n 16 -c 1 --prompt-min 16 \
            --prompt-max 32 --new 32 --seed 3 --json $flag >"$OUT/$2_$mode.json" 2>"$OUT/$2_$mode.log"
        echo "$2 $mode rc=$? $(cat "$OUT/$2_$mode.json")"
    done
}
BASE_MIB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)

# Assemble the rows (python's json module: no hand-made JSON), whatever ran.
assemble() {
kill "${PEAK_PID:-}" 2>/dev/null; kill -KILL "${DPID:-}" 2>/dev/null
python3 - "$OUT" "${BASE_MIB:-0}" <<'PY'
import json, os, sys, subprocess, datetime
out, base = sys.argv[1], float(sys.argv[2] or 0)
def load(p):
    try:
        with open(os.path.join(out, p)) as f: return json.load(f)
    except Exception as e: return None
def peak(p):
    try: return float(open(os.path.join(out, p)).read().strip()) - base
    except Exception: return None
rows = []
k = load("kernels.json")
rows.append({"method": "llama8 kernels (bench_gpu_kernels)", "kind": "llama8",
             "metrics": {x: k.get(x) for x in ("copy_gbs", "decode_projection_us", "decode_bw_frac", "crossover_m", "fp8_gemm_path", "fp8_gemm_path_bf16", "fp8_gemm_tflops", "prefill_products_us", "prefill_tc_frac", "gate_up_silu_f32_us", "gate_up_silu_bf16_us", "prefill_products_first_algo_us", "prefill_products_best_algo_us")} if k else {},
             "notes": "decode_bw_frac: bytes of one token's projections / their time / measured D2D copy rate; prefill_tc_frac: FLOP/s of one layer's 512-token FP8 products / the same cuBLASLt path's FLOP/s on 8192^3",
             "error": None if k else "bench_gpu_kernels failed (see kernels.log)"})
s = load("single2.json") or load("single1.json")
s1 = load("single1.json")
m = {}
if s:
    m = {"ttft_ms": s.get("prefill_ms"), "decode_tok_s": s.get("decode_tokens_per_s"),
         "load_s": (s1 or s).get("load_s"), "load_s_warm": s.get("load_s"),
         "ttft_cold_ms": s1.get("prefill_ms") if s1 else None,
         "decode_tok_s_cold": s1.get("decode_tokens_per_s") if s1 else None,
         "peak_vram_mib": peak("peak_single2.txt") or peak("peak_single1.txt"),
         "engine_weights_mib": s.get("mem_weights_mib"), "engine_kv_pool_mib": s.get("mem_kv_pool_mib"),
         "engine_work_mib": s.get("mem_work_mib"),
         "device_used_after_load_mib": s.get("device_used_mib") - base if s.get("device_used_mib") else None}
    try:   # the tune file's line: "KEY\tqkv 8 o 8 gate_up 4 down 8 lm_head 16"
        line = [l for l in open(os.path.join(out, "tune")) if "\t" in l][-1].split("\t")[1].split()
        m["gemv_max_m"] = {line[i]: int(line[i + 1]) for i in range(0, len(line), 2)}
    except Exception: pass
rows.append({"method": "llama8 cuda fp8 (llama8-run, in-process)", "kind": "llama8", "metrics": m,
             "notes": "512-token prompt, 128 new, batch 1, decode graphs on, after an untimed warm-up run (llama8-run --warmup); ttft = prefill step incl. first token; *_cold: run 1, the process's first steps (cuBLASLt heuristics, graph capture); load_s: run 1 (with measuring the GEMV/cuBLASLt crossover), load_s_warm: run 2 (page cache warm, crossover read from the tune file); gemv_max_m: the most rows each product runs through the GEMV (measured); peak = nvidia-smi used minus idle; engine_*: what the engine allocated (weights, KV pool sized to the run, activations); device_used_after_load: the driver's used memory once the engine was made, minus idle (the rest is the CUDA context, cuBLASLt's workspace and graphs)",
             "error": None if s else "llama8-run failed (see single*.log)"})
s3 = load("single3.json")
rows.append({"method": "llama8 cuda fp8 eager decode (llama8-run --no-graphs)", "kind": "llama8",
             "metrics": {"ttft_ms": s3.get("prefill_ms"), "decode_tok_s": s3.get("decode_tokens_per_s"),
                         "peak_vram_mib": peak("peak_single3.txt")} if s3 else {},
             "notes": "as above without CUDA graphs: the graphs' share of decode speed",
             "error": None if s3 else "llama8-run failed (see single3.log)"})
s4 = load("single4.json")
rows.append({"method": "llama8 cuda fp8 without PDL (llama8-run --no-pdl)", "kind": "llama8",
             "metrics": {"ttft_ms": s4.get("prefill_ms"), "decode_tok_s": s4.get("decode_tokens_per_s")} if s4 else {},
             "notes": "as the graphs run, kernels launched without programmatic dependent launch: its share of decode speed",
             "error": None if s4 else "llama8-run failed (see single4.log)"})
def profile(p):
    return {k["kind"]: {"gpu_us_per_step": k["gpu_us_per_step"], "steps": k["steps"],
                        "host_bound_steps": k["host_bound_steps"],
                        "phases": {r["phase"]: {x: r[x] for x in ("us_per_step", "share", "weight_gbs", "tflops")} for r in k["phases"]}}
            for k in p["kinds"]} if p else {}
p = load("profile.json")
rows.append({"method": "llama8 cuda fp8 step profile (llama8-run --profile-file)", "kind": "llama8",
             "metrics": profile(p),
             "notes": "GPU time of each phase, the step queued behind a hold kernel so the kernels run back to back (eager, no PDL between the timed kernels); 512-token prompt, 32 decode steps",
             "error": None if p else "the profiled run failed (see single5.log)"})
v1 = load("serve_single.json")
m1 = {}
if isinstance(v1, dict) and v1.get("tpot_p50_us"):
    m1 = {"ttft_ms": v1["ttft_p50_us"] / 1e3, "decode_tok_s": 1e6 / v1["tpot_p50_us"],
          "itl_p99_us": v1.get("itl_p99_us"), "delivery_p50_us": v1.get("delivery_p50_us"),
          "submit_to_start_p50_us": v1.get("submit_to_start_p50_us")}
    if s and s.get("prefill_ms") and s.get("decode_tokens_per_s"):
        m1["ttft_vs_in_process"] = m1["ttft_ms"] / s["prefill_ms"]
        m1["decode_vs_in_process"] = m1["decode_tok_s"] / s["decode_tokens_per_s"]
rows.append({"method": "llama8 cuda fp8 single stream (llama8d + llama8ctl bench)", "kind": "llama8",
             "metrics": m1,
             "notes": "4 requests one at a time, 512-token random prompts, 128 new (ignore eos), greedy; ttft: p50 submit -> first token received; decode_tok_s: 1 / the median request's mean gap between its tokens (daemon timestamps); *_vs_in_process: against llama8-run run 2 (graphs, warm) in the same run",
             "error": None if m1 else "daemon single stream failed (see serve_single.log, llama8d.log)"})
mi = {}
for pre, f in (("", "ipc_%s.json"), ("nospin_", "ipc0_%s.json")):
    for m in ("doorbell", "poll"):
        v = load(f % m)
        if isinstance(v, dict) and v.get("delivery_p50_us") is not None:
            for k in ("delivery_p50_us", "delivery_p99_us", "wake_floor_p50_us",
                      "submit_to_start_p50_us", "engine_gap_us_mean"):
                mi["%s%s_%s" % (pre, m, k)] = v.get(k)
            if not pre:
                mi["daemon_spin_us"] = v.get("daemon_spin_us")
rows.append({"method": "llama8 cuda fp8 token delivery (llama8d + llama8ctl bench, doorbell and --poll)", "kind": "llama8",
             "metrics": mi,
             "notes": "16 requests one at a time, 16-32 prompt tokens, 32 new, on the daemon of the serving run (spin_us auto), then nospin_*: the same on a daemon with --spin-us 0 (max_batch 4), the baseline; delivery: the step's end (daemon timestamp) to the client's receive; wake_floor: the same hand-offs between threads of one process at the same pace; engine_gap: a step's end to the next one's start; DESIGN: 10 us median / 50 us p99 asleep on the doorbell, 2 us polling",
             "error": None if len(mi) > 1 else "the delivery runs failed (see ipc_*.log)"})
v = load("serve.json")
ready = None
try:   # llama8d's "ready: ... (X s since start)": load, upload, warm-up steps and graph captures
    import re
    ready = float(re.findall(r"ready: .*\(([0-9.]+) s since start\)", open(os.path.join(out, "llama8d.log")).read())[0])
except Exception: pass
rows.append({"method": "llama8 cuda fp8 (llama8d + llama8ctl bench)", "kind": "llama8",
             "metrics": dict(v, peak_vram_mib=peak("peak_serve.txt"), ready_s=ready) if isinstance(v, dict) else {"ready_s": ready},
             "notes": "256 requests, prompts 128-512, 128 new, 64 in flight; ready_s: llama8d's start to READY (checkpoint in page cache, crossover from the tune file; includes the warm-up decode steps at each batch bucket, which capture the graphs, and the warm-up prefill of a full 2048-token step); engine_*: the run's steps split into decode-only ones and ones with prompt tokens",
             "error": None if v else "serving benchmark failed (see serve.log, llama8d.log)"})
s6 = load("single6.json")
rows.append({"method": "llama8 cuda fp8 batch 64 (llama8-run --batch 64)", "kind": "llama8",
             "metrics": {"decode_tok_s": s6.get("decode_tokens_per_s"),
                         "decode_step_ms": 64e3 / s6["decode_tokens_per_s"] if s6.get("decode_tokens_per_s") else None,
                         "prefill_tok_s": s6.get("prefill_tokens_per_s")} if s6 else {},
             "notes": "64 copies of the 512-token prompt (each its own pages, seeds differ, greedy), prefilled one per step, then 63 decode steps of all 64 with graphs: decode at the serving batch with nothing else in the steps, against which serving's decode-only steps compare",
             "error": None if s6 else "llama8-run --batch 64 failed (see single6.log)"})
base_tps = s.get("decode_tokens_per_s") if s else None
for k, kind in ((2, "oracle"), (4, "oracle"), (8, "oracle"), (4, "wrong")):
    r = load("spec_%s_%d.json" % (kind, k))
    rows.append({"method": "llama8 cuda fp8 speculation, %s drafts K %d (llama8-run --speculate oracle)" % (kind, k),
                 "kind": "llama8",
                 "metrics": {"decode_tok_s": r.get("decode_tokens_per_s"),
                             "ratio_vs_plain": r["decode_tokens_per_s"] / base_tps if base_tps and r.get("decode_tokens_per_s") else None,
                             "acceptance_rate": r.get("acceptance_rate"), "tokens_per_step": r.get("tokens_per_step"),
                             "same_tokens": r.get("tokens") == s.get("tokens") if s else None} if r else {},
                 "notes": "the single stream (512-token prompt, 128 new, batch 1, graphs on) with drafts of the plain run's own tokens (oracle: every draft holds) or all of them wrong (the adaptive draft length); ratio against that plain run",
                 "error": None if r else "llama8-run --speculate failed (see spec_%s_%d.log)" % (kind, k)})
p64 = load("profile64.json")
rows.append({"method": "llama8 cuda fp8 step profile, batch 64 (llama8-run --batch 64 --profile-file)", "kind": "llama8",
             "metrics": profile(p64),
             "notes": "as the step profile above; decode steps of 64 rows (kv 512-528 each), prefill steps of one 512-token prompt",
             "error": None if p64 else "the profiled batch run failed (see single7.log)"})
try: gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except Exception: gpu = None
try: commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
except Exception: commit = None
doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
       "environment": {"gpu": gpu, "commit": commit},
       "workload": {"device": "cuda", "prompt_tokens": 512, "new_tokens": 128, "batch": 1,
                    "serve_requests": 256, "serve_concurrency": 64, "serve_prompt_min": 128,
                    "serve_prompt_max": 512, "serve_new": 128},
       "methods": rows}
json.dump(doc, open(os.path.join(out, "bench-gpu.json"), "w"), indent=1)
for r in rows: print(r["method"], json.dumps(r["metrics"]), r["error"] or "")
PY
}
trap assemble EXIT

echo "== kernels"
timeout "$(lim 180)" "$BIN/bench_gpu_kernels" >"$OUT/kernels.json" 2>"$OUT/kernels.log"
echo "kernels rc=$?"; cat "$OUT/kernels.log"

echo "== single stream"
python3 -c 'import random; r=random.Random(0); print(",".join(["128000"]+[str(r.randrange(1000,120000)) for _ in range(511)]))' >"$OUT/prompt512.txt"
for run in 1 2 3 4; do
    peak_start "$OUT/mem_single$run.txt"
    graphs=1 pdl=1 switch=
    [ $run = 3 ] && graphs=0 switch=--no-graphs
    [ $run = 4 ] && pdl=0 switch=--no-pdl
    warm=--warmup
    [ $run = 1 ] && warm=
    timeout "$(lim 180)" "$BIN/llama8-run" --model "$MODEL" --backend cuda --numerics fp8 \
        --tokens-file "$OUT/prompt512.txt" --max-new 128 --ignore-eos --json $warm $switch \
        --tune-file "$TUNE" >"$OUT/single$run.json" 2>"$OUT/single$run.log"
    echo "single run $run (graphs $graphs, pdl $pdl) rc=$? $(cat "$OUT/single$run.json")"
    echo "$(peak_stop "$OUT/mem_single$run.txt")" >"$OUT/peak_single$run.txt"
    tail -3 "$OUT/single$run.log"
done

echo "== step profile"
timeout "$(lim 120)" "$BIN/llama8-run" --model "$MODEL" --backend cuda \
    --numerics fp8 --tokens-file "$OUT/prompt512.txt" --max-new 32 --ignore-eos --json --warmup \
    --tune-file "$TUNE" --profile-file "$OUT/profile.json" \
    >"$OUT/single5.json" 2>"$OUT/single5.log"
echo "profile rc=$?"
grep -A16 "cuda profile" "$OUT/single5.log"

echo "== serving"
SOCK=$(mktemp -d)/llama8d.sock
peak_start "$OUT/mem_serve.txt"
daemon_start "$SOCK" "$OUT/llama8d.log" --kv_mib 12288 --max_batch 64 --max_step_tokens 2048 \
    --max_requests 256 --max_requests_per_client 256
# Ready means the socket answers; llama8ctl status waits for the model.
timeout "$(lim 60)" "$BIN/llama8ctl" status --socket "$SOCK" >"$OUT/status.txt" 2>&1
# The single stream first (nothing else in flight): the first request also
# meets the 512-row products' first cuBLASLt calls, so the p50 of 4 is warm.
# Its own prompt seed: the serving run's prompts must not find these in the
# prefix cache.
timeout "$(lim 60)" "$BIN/llama8ctl" bench --socket "$SOCK" -n 4 -c 1 --prompt-min 512 \
    --prompt-max 512 --new 128 --seed 2 --json >"$OUT/serve_single.json" 2>"$OUT/serve_single.log"
echo "daemon single stream rc=$? $(cat "$OUT/serve_single.json")"
timeout "$(lim 300)" "$BIN/llama8ctl" bench --socket "$SOCK" -n 256 -c 64 --prompt-min 128 \
    --prompt-max 512 --new 128 --json >"$OUT/serve.json" 2>"$OUT/serve.log"
echo "serving rc=$? $(cat "$OUT/serve.json")"
# Token delivery on the 8B's ~2 ms decode steps, the daemon spinning
# (spin_us auto: 16 cores): a client asleep on its doorbell, then one
# spinning on its ring (DESIGN: 10 us median / 50 us p99; 2 us polling).
delivery_runs "$SOCK" ipc
timeout "$(lim 30)" "$BIN/llama8ctl" status --socket "$SOCK" >"$OUT/status_after.txt" 2>&1
daemon_stop
echo "$(peak_stop "$OUT/mem_serve.txt")" >"$OUT/peak_serve.txt"
tail -5 "$OUT/llama8d.log"

echo "== batch 64"
timeout "$(lim 120)" "$BIN/llama8-run" --model "$MODEL" --backend cuda --numerics fp8 \
    --tokens-file "$OUT/prompt512.txt" --max-new 64 --ignore-eos --json --warmup --batch 64 \
    --tune-file "$TUNE" >"$OUT/single6.json" 2>"$OUT/single6.log"
echo "batch 64 rc=$? $(cat "$OUT/single6.json")"
timeout "$(lim 120)" "$BIN/llama8-run" --model "$MODEL" --backend cuda \
    --numerics fp8 --tokens-file "$OUT/prompt512.txt" --max-new 16 --ignore-eos --json --warmup \
    --batch 64 --tune-file "$TUNE" --profile-file "$OUT/profile64.json" \
    >"$OUT/single7.json" 2>"$OUT/single7.log"
echo "batch 64 profile rc=$?"
grep -A16 "cuda profile" "$OUT/single7.log"

echo "== speculation"
# Verification steps on the GPU, where a decode step is bound by reading the
# weights: llama8-run's single stream with oracle drafts (the plain run's
# own tokens) of 2, 4 and 8, and all drafts wrong (adaptive): the ceiling
# and the cost of rejection, the tokens the plain run's (same_tokens).
python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' \
    "$OUT/single2.json" >"$OUT/spec_oracle.txt" 2>/dev/null &&
python3 -c 'import sys; print(",".join(str((int(t) + 1) % 128000) for t in open(sys.argv[1]).read().strip().split(",")))' \
    "$OUT/spec_oracle.txt" >"$OUT/spec_wrong.txt"
for c in "2 oracle" "4 oracle" "8 oracle" "4 wrong"; do
    set -- $c
    timeout "$(lim 60)" "$BIN/llama8-run" --model "$MODEL" --backend cuda --numerics fp8 \
        --tokens-file "$OUT/prompt512.txt" --max-new 128 --ignore-eos --json --warmup \
        --tune-file "$TUNE" --speculate oracle "$OUT/spec_$2.txt" --draft-max "$1" \
        >"$OUT/spec_$2_$1.json" 2>"$OUT/spec_$2_$1.log"
    echo "speculation $2 K $1 rc=$?"
done

echo "== delivery without spin_us"
# The same two delivery runs on a daemon whose loop and engine thread sleep
# between steps (--spin-us 0): the spin's baseline in the same run. Last,
# so that a short budget cuts only this; a small batch, so few graphs to
# capture before READY.
SOCK0=$(mktemp -d)/llama8d.sock
daemon_start "$SOCK0" "$OUT/llama8d_nospin.log" --kv_mib 2048 --max_batch 4 --max_step_tokens 512 \
    --spin_us 0
delivery_runs "$SOCK0" ipc0
daemon_stop
