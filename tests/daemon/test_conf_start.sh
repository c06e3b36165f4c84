#!/usr/bin/env bash
# llama8d's settings checked at start and at a reload, on the real binary
# and the synthetic tiny checkpoint:
#  - each bad value (flag or file line) refused at once with its range,
#    exit 1, no READY: max_requests_per_client 600000 and 2^30 among them,
#    which once spun forever or said READY and then failed every Hello;
#  - numbers are decimal ("010" is 10, "0x10" refused; socket_mode octal);
#  - the file: a NUL byte named with its line, /dev/zero, a FIFO and a file
#    over the bound refused at once;
#  - max_ctx, or the model's max_position_embeddings, too small to serve a
#    request (fewer than 2 positions) refused;
#  - a reload with a bad value refused, the running settings kept; a good
#    one applied.
#   test_conf_start.sh LLAMA8D LLAMA8CTL LLAMA8_MKMODEL TOKENIZER_JSON
set -euo pipefail
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4
t=$(mktemp -d "${TMPDIR:-/tmp}/l8-confstart.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" --quiet
sock=$t/d.sock

# refused WANT ARGS...: llama8d exits 1 within 5 s (a refusal comes before
# the model is even read), saying WANT, and never READY.
refused()
{
    local want=$1 t0 t1 rc=0
    shift
    t0=$(date +%s%N)
    timeout 20 "$daemon" --model "$t/model" --socket "$sock" --threads 1 --no-warmup true \
        "$@" >"$t/out" 2>&1 || rc=$?
    t1=$(date +%s%N)
    if [ "$rc" != 1 ]; then
        bad "llama8d $*: exit $rc, not 1: $(tail -3 "$t/out")"
    elif ! grep -qF -- "$want" "$t/out"; then
        bad "llama8d $*: no '$want' in: $(cat "$t/out")"
    elif grep -q "ready:" "$t/out"; then
        bad "llama8d $*: said ready before refusing"
    elif [ $(((t1 - t0) / 1000000)) -gt 5000 ]; then
        bad "llama8d $*: refused after $(((t1 - t0) / 1000000)) ms"
    fi
}

# Each numeric key past each end of its range, as a flag and as a line of
# the file: "KEY VALUE MESSAGE".
while read -r key val msg; do
    [ -z "$key" ] && continue
    refused "$key = $val: $msg" "--${key//_/-}" "$val"
    printf 'max_batch = 8\n%s = %s\n' "$key" "$val" >"$t/bad.conf"
    refused "$t/bad.conf:2: $key = $val: $msg" --config "$t/bad.conf"
done <<'EOF'
max_requests_per_client 600000 must be in [1, 65536]
max_requests_per_client 1073741824 must be in [1, 65536]
max_requests_per_client 0 must be in [1, 65536]
max_requests_per_client 18446744073709551616 must be in [1, 65536]
max_ctx 1 must be 0 or in [2, 16777216]
max_ctx 16777217 must be 0 or in [2, 16777216]
max_new_tokens 16777217 must be in [0, 16777216]
max_batch 0 must be in [1, 65536]
max_batch 65537 must be in [1, 65536]
max_step_tokens 1048577 must be in [1, 1048576]
page_size 0 must be in [1, 4096]
page_size 4097 must be in [1, 4096]
kv_pages 16777217 must be in [0, 16777216]
kv_mib 16777217 must be in [0, 16777216]
max_clients 0 must be in [1, 1048576]
admin_clients 1048577 must be in [0, 1048576]
max_requests 0 must be in [1, 1048576]
max_requests 1048577 must be in [1, 1048576]
max_clients_per_uid 0 must be in [1, 1048576]
max_requests_per_uid 1048577 must be in [1, 1048576]
eq_entries 32 must be in [64, 1048576]
eq_entries 2097152 must be in [64, 1048576]
eq_entries 100 must be a power of two in [64, 1048576]
drain_timeout_ms 86400001 must be in [0, 86400000]
hello_timeout_ms 86400001 must be in [0, 86400000]
step_stall_ms 86400001 must be in [0, 86400000]
idle_exit_s 31536001 must be in [0, 31536000]
threads 4097 must be in [0, 4096]
grammar_cache 65537 must be in [0, 65536]
draft_max 0 must be in [1, 16]
draft_max 17 must be in [1, 16]
spin_us 1000001 must be auto or in [0, 1000000]
socket_mode 10000 must be in [0, 07777]
EOF

# Not decimal: no base prefix, sign or exponent; socket_mode is octal.
refused "max_batch: bad value '0x10': must be a decimal number in [1, 65536]" --max-batch 0x10
refused "max_clients: bad value '-1': must be a decimal number in [1, 1048576]" --max-clients -1
refused "max_ctx: bad value '1e3': must be a decimal number, 0 or in [2, 16777216]" --max-ctx 1e3
refused "socket_mode: bad value '0x1ff': must be an octal mode in [0, 07777]" --socket-mode 0x1ff
refused "socket_mode: bad value '0668': must be an octal mode in [0, 07777]" --socket-mode 0668
# Between keys: a given per-uid share above its whole.
refused "max_clients_per_uid = 9: must be at most max_clients (8)" \
    --max-clients 8 --max-clients-per-uid 9
refused "max_requests_per_uid = 11: must be at most max_requests (10)" \
    --max-requests 10 --max-requests-per-uid 11
refused "max_step_tokens = 8: must be at least max_batch (16)" --max-batch 16 --max-step-tokens 8
refused "socket: a value of 108 bytes is too long (at most 107)" --socket "/$(printf 'a%.0s' $(seq 107))"

# The file: a NUL byte is an error on its line (everything after it was
# once ignored); what is not a regular file, or is too big, is not read.
printf 'max_batch = 8\n# a comment\nmax_ctx = 64\0\nmax_ctx = 1\n' >"$t/nul.conf"
refused "$t/nul.conf:3: NUL byte" --config "$t/nul.conf"
printf 'max_batch = 8\n\0' >"$t/nul_end.conf"
refused "$t/nul_end.conf:2: NUL byte" --config "$t/nul_end.conf"
refused "/dev/zero: is a character device, not a regular file" --config /dev/zero
mkfifo "$t/fifo.conf"
refused "$t/fifo.conf: is a FIFO, not a regular file" --config "$t/fifo.conf"
head -c 1048577 /dev/zero | tr '\0' '#' >"$t/big.conf"
refused "$t/big.conf: is larger than 1048576 bytes" --config "$t/big.conf"

# A model whose context cannot hold a prompt token and a new token.
"$mkmodel" --preset tiny --seed 1 --vocab 512 --max-pos 1 --out "$t/model1" --quiet
refused "the model's max_position_embeddings (1) is less than the 2 positions" --model "$t/model1"

# The sample configuration with every default uncommented is accepted (it
# fails at the model directory, after the configuration's checks).
sed -E 's/^#([a-z_0-9]+ = )/\1/' "$(dirname "$0")/../../systemd/llama8d.conf.example" \
    >"$t/example.conf"
grep -q '^max_clients_per_uid = 64$' "$t/example.conf" || bad "the example has no max_clients_per_uid"
rc=0
timeout 20 "$daemon" --config "$t/example.conf" --model "$t/nonexistent" --socket "$sock" \
    >"$t/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "model directory $t/nonexistent" "$t/out" ||
    bad "the example's defaults: exit $rc: $(cat "$t/out")"

# Decimal, leading zeros and all: max_clients 010 is 10, max_ctx 0064 is 64;
# socket_mode 0600 is octal still. Then reloads.
cat >"$t/good.conf" <<'EOF'
max_clients = 010
max_ctx = 0064
socket_mode = 0600
log_level = info
EOF
"$daemon" --config "$t/good.conf" --model "$t/model" --socket "$sock" --threads 1 \
    --no-warmup true 2>"$t/daemon.log" &
pid=$!
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
# status FIELD: one field of llama8ctl status --json (waiting for the load).
status()
{
    "$ctl" status --socket "$sock" --wait=30 --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
[ "$(status max_clients)" = 10 ] || bad "max_clients = 010 is $(status max_clients), not 10"
[ "$(status context_length)" = 64 ] || bad "max_ctx = 0064 is $(status context_length), not 64"
[ "$(stat -c %a "$sock")" = 600 ] || bad "socket_mode = 0600 gave mode $(stat -c %a "$sock")"

# A reload with a bad value: refused, named, nothing applied (max_clients
# and log_level are live keys, and stay).
reload_refused()
{
    local want=$1 out rc=0
    out=$("$ctl" reload --socket "$sock" 2>&1) || rc=$?
    [ "$rc" = 1 ] || bad "reload of a bad file: exit $rc: $out"
    [[ $(status config_error) == *"$want"* ]] ||
        bad "reload: config_error '$(status config_error)', not '$want'"
    [ "$(status max_clients)" = 10 ] && [ "$(status log_level)" = info ] &&
        [ "$(status config_reloads)" = 0 ] ||
        bad "a refused reload changed the settings: max_clients $(status max_clients)," \
            "log_level $(status log_level), $(status config_reloads) reloads"
}
printf 'max_clients = 20\nlog_level = debug\nmax_requests_per_client = 600000\n' >"$t/good.conf"
reload_refused "good.conf:3: max_requests_per_client = 600000: must be in [1, 65536]"
printf 'max_clients = 20\nlog_level = debug\nmax_clients_per_uid = 21\n' >"$t/good.conf"
reload_refused "max_clients_per_uid = 21: must be at most max_clients (20)"
printf 'max_clients = 20\nlog_level = debug\nmax_ctx = 0x40\n' >"$t/good.conf"
reload_refused "good.conf:3: max_ctx: bad value '0x40': must be a decimal number"
printf 'max_clients = 20\nlog_level = debug\0\n' >"$t/good.conf"
reload_refused "good.conf:2: NUL byte"
# A good one applies its live keys (a per-uid share within the new whole).
printf 'max_clients = 20\nmax_clients_per_uid = 20\nlog_level = debug\nmax_ctx = 64\n' \
    >"$t/good.conf"
"$ctl" reload --socket "$sock" >/dev/null 2>&1 || bad "a good reload refused: $(status config_error)"
[ "$(status max_clients)" = 20 ] && [ "$(status log_level)" = debug ] &&
    [ "$(status config_reloads)" = 1 ] && [ -z "$(status config_error)" ] ||
    bad "a good reload: max_clients $(status max_clients), log_level $(status log_level)," \
        "$(status config_reloads) reloads, error '$(status config_error)'"
kill "$pid"
wait "$pid" || bad "llama8d exited $? after SIGTERM"
pid=

if [ "$fails" -gt 0 ]; then
    echo "$fails failures; the daemon's log:"
    cat "$t/daemon.log"
    exit 1
fi
echo "ok"
