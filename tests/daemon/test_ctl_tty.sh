#!/usr/bin/env bash
# test_ctl_tty.sh - what llama8ctl generate tells a person on a terminal
# (script(1)'s pty) and not a pipe:
#  - a reply cut by max_new says so ("cut at 3 tokens");
#  - why the reply does not start: a client of the same user holds the KV
#    pool (a `llama8ctl pipe` whose output nobody reads), so the request
#    waits, and stderr says "waiting for KV pages" until the holder goes;
#    then the reply comes.
# Skipped without script(1).
#   test_ctl_tty.sh LLAMA8D LLAMA8CTL MKMODEL TOKENIZER
set -u
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4
command -v script >/dev/null || { echo "SKIP: no script(1)"; exit 77; }
t=$(mktemp -d "${TMPDIR:-/tmp}/l8-tty.XXXXXX")
dpid= hpid=
trap 'kill -- -$hpid 2>/dev/null; kill $dpid 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
"$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" >"$t/mk.log" 2>&1 ||
    { echo "FAIL: llama8-mkmodel"; cat "$t/mk.log"; exit 1; }
sock=$t/d.sock
"$daemon" --model "$t/model" --socket "$sock" --config /dev/null --threads 1 \
    --allowed-group "" --kv-pages 24 --page-size 16 --eq-entries 64 2>"$t/daemon.log" &
dpid=$!
for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
"$ctl" status --socket "$sock" --wait=60 >/dev/null 2>&1 || { echo "FAIL: no daemon"; exit 1; }
fail=0

# A reply cut by max_new: said on a terminal, not on a pipe.
TERM=dumb script -qfec "$ctl generate --socket $sock --max-new 3 --ignore-eos Hello" \
    "$t/cut.txt" >/dev/null 2>&1
if ! grep -q "llama8ctl: the reply was cut at 3 tokens (--max-new N for more)" "$t/cut.txt"; then
    echo "FAIL: a cut reply on a terminal; it showed:"; cat "$t/cut.txt"; fail=1
fi
"$ctl" generate --socket "$sock" --max-new 3 --ignore-eos Hello >/dev/null 2>"$t/err.txt" </dev/null
if grep -q "cut at" "$t/err.txt"; then
    echo "FAIL: a cut reply on a pipe is said"; cat "$t/err.txt"; fail=1
fi

# The holder: three 96-token prompts (18 of the 24 pages), long replies,
# its stdout a pipe that sleep(1) never reads: once that pipe is full, the
# event ring fills and its requests are held with their pages.
prompt=$(seq -s, 10 105)
export ctl sock prompt
setsid bash -c '{
    for i in 1 2 3; do
        printf "{\"id\": %d, \"ids\": [%s], \"max_new\": 250, \"ignore_eos\": true}\n" \
            "$i" "$prompt"
    done
    sleep 60
} | "$ctl" pipe --socket "$sock" | sleep 60' &
hpid=$!
for _ in $(seq 100); do
    "$ctl" clients --socket "$sock" 2>/dev/null | grep -q "held" && break
    sleep 0.2
done

# A terminal: the wait is said, then (the holder gone) the reply comes.
TERM=dumb script -qfec "$ctl generate --socket $sock --max-new 4 Hello" "$t/tty.txt" \
    >/dev/null 2>&1 &
spid=$!
for _ in $(seq 50); do grep -q "waiting" "$t/tty.txt" 2>/dev/null && break; sleep 0.2; done
kill -- -"$hpid" 2>/dev/null
wait "$spid"
rc=$?
if [ $rc -ne 0 ] || ! grep -q "llama8ctl: waiting for KV pages: needs [0-9]*, [0-9]* free" \
        "$t/tty.txt"; then
    echo "FAIL: generate on a terminal while the pool is held: status $rc; it showed:"
    cat "$t/tty.txt"; fail=1
fi

# A pipe: the same wait says nothing on stderr.
"$ctl" generate --socket "$sock" --max-new 4 Hello >"$t/out.txt" 2>"$t/err.txt" </dev/null
if [ $? -ne 0 ] || grep -q "waiting\|cut at" "$t/err.txt"; then
    echo "FAIL: generate on a pipe"; cat "$t/err.txt"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: a cut reply and the wait for KV pages are shown on a terminal"
exit $fail
