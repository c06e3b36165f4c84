#!/bin/bash
# run.sh - everything issue 5 needs from a lent H200, in one call:
#   device tool: run(command="bash tests/gpu/run.sh", carry=[".gpucarry"], timeout_s=560)
# (.gpucarry is optional: tests/gpu/prepare_carry.sh builds it here, a
# fallback for when the device image lacks the build's -dev packages.)
#
#  1. facts: nvidia-smi, nvcc, what is installed        (10 s)
#  2. build: meson -Dcuda=enabled -Dgpu_archs=90a, ninja -j16; on failure
#     the carried prebuilt binaries                      (<= 240 s)
#  3. gpu tests: test_gpu_kernels, test_gpu_engine tests/golden (<= 60 + 150 s)
#  4. llama8-mkmodel --preset llama-3.1-8b into /tmp   (<= 150 s)
#  5. tests/bench/bench_gpu.sh (kernels, single stream, serving)
# Each stage has its own timeout, so one hang does not lose the rest; the
# whole is planned for well under 8 minutes. Logs and JSON go to $OUT
# (at most 8 files come back: summary.txt, run.log, bench-gpu.json,
# kernels.json, test_kernels.log, test_engine.log, llama8d.log, build.log).
set -u
OUT=${OUT:-/tmp/l8out}
mkdir -p "$OUT"
W=/tmp/l8work; mkdir -p "$W"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
SUMMARY="$OUT/summary.txt"; : >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

stamp "1. facts"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$SUMMARY"
(command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>&1; /usr/local/cuda/bin/nvcc --version 2>&1 | tail -1
for p in json-c liburing libprotobuf-c libsystemd libpcre2-8; do
    printf '%s: %s\n' "$p" "$(pkg-config --modversion $p 2>/dev/null || echo missing)"
done
command -v meson ninja

stamp "2. build"
BIN=
if timeout 240 bash -c 'meson setup build-gpu -Dcuda=enabled -Dgpu_archs=90a --buildtype=release >"$0/build.log" 2>&1 && ninja -C build-gpu -j16 >>"$0/build.log" 2>&1' "$W"; then
    BIN=build-gpu
    say "build: native ok"
elif [ -x .gpucarry/bin/test_gpu_kernels ]; then
    BIN=.gpucarry/bin
    export LD_LIBRARY_PATH=$PWD/.gpucarry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    say "build: native FAILED (see build.log), using the carried prebuilt binaries"
else
    say "build: FAILED and nothing carried"
fi
tail -20 "$W/build.log"; cp "$W/build.log" "$OUT/build.log" 2>/dev/null
[ -z "$BIN" ] && exit 1
find_bin() { for d in "$BIN" "$BIN/tests/gpu" "$BIN/daemon/tools" "$BIN/daemon" "$BIN/client"; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; echo "$BIN/$1"; }
mkdir -p "$W/bin"
for b in test_gpu_kernels test_gpu_engine bench_gpu_kernels llama8-run llama8-mkmodel llama8d llama8ctl; do
    ln -sf "$PWD/$(find_bin $b)" "$W/bin/$b"
done

stamp "3. gpu tests"
timeout 90 "$W/bin/test_gpu_kernels" >"$OUT/test_kernels.log" 2>&1
say "test_gpu_kernels rc=$? $(tail -1 "$OUT/test_kernels.log")"
grep -E "FAIL|path|rel err" "$OUT/test_kernels.log" | head -40
timeout 180 "$W/bin/test_gpu_engine" tests/golden >"$OUT/test_engine.log" 2>&1
say "test_gpu_engine rc=$? $(tail -1 "$OUT/test_engine.log")"
cat "$OUT/test_engine.log" | head -60

stamp "4. synthetic 8B checkpoint"
MODEL=/tmp/llama31-8b-synth
timeout 150 "$W/bin/llama8-mkmodel" --preset llama-3.1-8b --out "$MODEL" --threads 16 --quiet
say "mkmodel rc=$? $(du -sh "$MODEL" 2>/dev/null | cut -f1)"

stamp "5. benchmarks"
if [ -f "$MODEL/config.json" ]; then
    timeout 420 bash tests/bench/bench_gpu.sh "$W/bin" "$MODEL" "$W/bench" 2>&1 | tee "$W/bench.log"
    cp "$W/bench/bench-gpu.json" "$W/bench/kernels.json" "$W/bench/llama8d.log" "$OUT/" 2>/dev/null
    grep -E "^llama8 " "$W/bench.log" >>"$SUMMARY"
else
    say "benchmarks skipped: no checkpoint"
fi
stamp "done"
echo "----- summary"; cat "$SUMMARY"
