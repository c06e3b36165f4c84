#!/usr/bin/env bash
# What a person meets running llama8 by hand the first time (issue 36):
#  - llama8d --help names the socket it would use now and why
#    ($RUNTIME_DIRECTORY under systemd, else /run/llama8d/llama8d.sock, or
#    the file's socket =, or --socket); llama8ctl --help (and chat's,
#    status's) the one it connects to ($LLAMA8_SOCKET, else the default);
#  - a boolean key as a bare flag is true: --no-warmup last, or before
#    another option; --no-warmup=false and --no-warmup false turn it off; a
#    bad value is refused;
#  - a model directory without tokenizer.json (the golden tiny-llama31-fp8)
#    starts with a warning that names it and what will not work, and
#    llama8ctl status says so (text and --json);
#  - quickstart.sh prints the next steps (chat on its socket, the service,
#    the real model), and with --keep leaves llama8d running and says how to
#    stop it (its main job, sourced: nothing installed, built or downloaded).
#   test_first_run.sh LLAMA8D LLAMA8CTL LLAMA8_MKMODEL TOKENIZER_JSON GOLDEN_MODEL QUICKSTART
set -uo pipefail
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4 golden=$5 quickstart=$6
t=$(mktemp -d "${TMPDIR:-/tmp}/l8-firstrun.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$t"
}
trap cleanup EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
# has WHAT FILE TEXT: FILE holds TEXT (fixed string).
has() { grep -qF -- "$3" "$2" || bad "$1: no '$3' in: $(cat "$2")"; }
hasnt() { ! grep -qF -- "$3" "$2" || bad "$1: '$3' in: $(cat "$2")"; }

# ---------------------------------------------------------------- the socket in --help
env -u RUNTIME_DIRECTORY "$daemon" --config /dev/null --help >"$t/h1" 2>&1 || bad "llama8d --help: exit $?"
has "llama8d --help by hand" "$t/h1" \
    "now: /run/llama8d/llama8d.sock (\$RUNTIME_DIRECTORY is not set: not under systemd)"
has "llama8d --help" "$t/h1" \
    "default \$RUNTIME_DIRECTORY/llama8d.sock under systemd, else /run/llama8d/llama8d.sock"
RUNTIME_DIRECTORY="$t/rt:$t/other" "$daemon" --config /dev/null --help >"$t/h2" 2>&1
has "llama8d --help under systemd" "$t/h2" "now: $t/rt/llama8d.sock (from \$RUNTIME_DIRECTORY)"
printf 'socket = %s/conf.sock\n' "$t" >"$t/c.conf"
RUNTIME_DIRECTORY=$t/rt "$daemon" --help --config "$t/c.conf" >"$t/h3" 2>&1
has "llama8d --help --config" "$t/h3" "now: $t/conf.sock (socket = in $t/c.conf)"
"$daemon" --config "$t/c.conf" --socket "$t/flag.sock" --help >"$t/h4" 2>&1
has "llama8d --socket --help" "$t/h4" "now: $t/flag.sock (--socket)"
has "llama8d --help, booleans" "$t/h1" "option alone is true (--no-warmup, last or before another option)"

for cmd in "" chat status; do
    # shellcheck disable=SC2086
    env -u LLAMA8_SOCKET "$ctl" $cmd --help >"$t/c1" 2>&1 || bad "llama8ctl $cmd --help: exit $?"
    has "llama8ctl $cmd --help" "$t/c1" \
        "socket: /run/llama8d/llama8d.sock (the default, as \$LLAMA8_SOCKET is not set)"
    # shellcheck disable=SC2086
    LLAMA8_SOCKET=$t/mine.sock "$ctl" $cmd --help >"$t/c2" 2>&1
    has "LLAMA8_SOCKET=... llama8ctl $cmd --help" "$t/c2" \
        "socket: $t/mine.sock (from \$LLAMA8_SOCKET; --socket PATH overrides it)"
done

# ---------------------------------------------------------------- boolean flags
if "$daemon" --config /dev/null --no-warmup maybe --model "$golden" >"$t/o" 2>&1; then
    bad "--no-warmup maybe: accepted"
fi
has "--no-warmup maybe" "$t/o" "no_warmup: bad value 'maybe'"
if "$daemon" --config /dev/null --model "$golden" --socket >"$t/o" 2>&1; then
    bad "--socket without a value: accepted"
fi
has "--socket without a value" "$t/o" "option '--socket' needs a value"

# start NAME ARGS...: llama8d on the golden model at $t/NAME.sock, its log
# $t/NAME.log, ready (status answers) or a failure said.
start() {
    local name=$1
    shift
    "$daemon" --config /dev/null --socket "$t/$name.sock" --threads 1 --allowed-group "" \
        "$@" 2>"$t/$name.log" &
    pids+=($!)
    for _ in $(seq 600); do [ -S "$t/$name.sock" ] && break; sleep 0.05; done
    "$ctl" status --socket "$t/$name.sock" --wait=60 >"$t/$name.status" 2>&1 ||
        bad "llama8d $*: not ready: $(tail -5 "$t/$name.log")"
}
stop() { kill "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null; }

# Bare, last: the person's command line. Its warning and status are below.
start last --model "$golden" --no-warmup
has "--no-warmup last" "$t/last.log" "no warm-up to measure"
hasnt "--no-warmup last" "$t/last.log" "warm-up step:"
has "no tokenizer.json: the warning" "$t/last.log" \
    "warning: $(cd "$golden" && pwd -P) has no tokenizer.json: clients find none there"
has "no tokenizer.json: what fails" "$t/last.log" "llama8ctl's text prompts need --tokenizer FILE"
has "no tokenizer.json: what fails" "$t/last.log" "constrained decoding"
has "status without tokenizer.json" "$t/last.status" \
    "tokenizer: NONE: the model directory has no tokenizer.json: llama8ctl's text prompts"
"$ctl" status --socket "$t/last.sock" --json >"$t/j" 2>&1
python3 - "$t/j" <<'EOF' || bad "status --json without tokenizer.json: $(cat "$t/j")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tokenizer"] is None and "no tokenizer.json" in j["tokenizer_error"], j
EOF
stop
# Bare, before another option.
start before --no-warmup --model "$golden"
has "--no-warmup before --model" "$t/before.log" "no warm-up to measure"
stop
for off in --no-warmup=false "--no-warmup false"; do
    # shellcheck disable=SC2086
    start off --model "$golden" $off
    has "$off" "$t/off.log" "warm-up step:"
    stop
done

# A model with its tokenizer.json: no warning, status names it.
"$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" --quiet
start tok --model "$t/model" --no-warmup
hasnt "with tokenizer.json" "$t/tok.log" "tokenizer.json:"
has "status with tokenizer.json" "$t/tok.status" "tokenizer: $(cd "$t/model" && pwd -P)/tokenizer.json"
stop

# ---------------------------------------------------------------- quickstart's next steps
# $BUILD as quickstart.sh knows it, the programs under test in it.
mkdir -p "$t/build/daemon" "$t/build/client"
printf '#!/bin/sh\nexec %q "$@"\n' "$daemon" >"$t/build/daemon/llama8d"
printf '#!/bin/sh\nexec %q "$@"\n' "$ctl" >"$t/build/client/llama8ctl"
chmod +x "$t/build/daemon/llama8d" "$t/build/client/llama8ctl"
qsock=$t/llama8d-quickstart.sock
# quick ARGS...: quickstart.sh's main job, sourced, in a subshell (its EXIT
# trap runs as it ends), output to $t/q.
quick() {
    (export BUILD=$t/build MODEL=$t/model XDG_RUNTIME_DIR=$t
     # shellcheck disable=SC1090
     . "$quickstart" && main_job "$@") </dev/null >"$t/q" 2>&1
}
quick || bad "quickstart main_job: exit $?: $(cat "$t/q")"
has "quickstart" "$t/q" "== next steps"
has "quickstart: chat" "$t/q" "--keep"
has "quickstart: chat" "$t/q" "LLAMA8_SOCKET=$qsock $t/build/client/llama8ctl chat"
has "quickstart: the service" "$t/q" "sudo meson install -C $t/build"
has "quickstart: the service" "$t/q" "sudo systemctl enable --now llama8d.socket"
has "quickstart: the real model" "$t/q" "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic"
has "quickstart: the real model" "$t/q" "MODEL=/path/to/Meta-Llama-3.1-8B-Instruct-FP8-dynamic ./quickstart.sh"
[ -S "$qsock" ] && bad "quickstart without --keep: llama8d still listens on $qsock"

quick --keep || bad "quickstart --keep: exit $?: $(cat "$t/q")"
has "quickstart --keep" "$t/q" "1. chat with the model llama8d keeps serving"
kpid=$(sed -n 's/.*llama8d keeps running (pid \([0-9]*\),.*stop it with: kill \([0-9]*\)$/\1 \2/p' "$t/q")
read -r p1 p2 <<<"$kpid"
if [ -z "${p1:-}" ] || [ "$p1" != "${p2:-}" ]; then
    bad "quickstart --keep: no 'keeps running (pid N ...) kill N' line: $(cat "$t/q")"
else
    pids+=("$p1")
    "$ctl" status --socket "$qsock" >/dev/null 2>&1 || bad "quickstart --keep: llama8d gone after it"
    # A second run finds it instead of starting another.
    quick && bad "quickstart with a kept llama8d: exit 0"
    has "quickstart with a kept llama8d" "$t/q" "already listens on $qsock (pid $p1"
    kill "$p1"    # as printed
    for _ in $(seq 100); do kill -0 "$p1" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$p1" 2>/dev/null && bad "quickstart --keep: kill $p1 did not stop llama8d"
fi
BUILD=$t/build XDG_RUNTIME_DIR=$t "$quickstart" next >"$t/n" 2>&1 || bad "quickstart.sh next: exit $?"
has "quickstart.sh next" "$t/n" "LLAMA8_SOCKET=$qsock $t/build/client/llama8ctl chat"

[ "$fails" -eq 0 ] || exit 1
echo "ok: first run (help, booleans, no tokenizer.json, quickstart)"
