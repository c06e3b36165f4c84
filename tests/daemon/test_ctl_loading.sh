#!/usr/bin/env bash
# test_ctl_loading.sh - llama8ctl while llama8d is still loading, as a user
# meets it under socket activation: systemd-socket-activate starts llama8d
# when llama8ctl connects, so llama8ctl's Hello waits before the load
# begins. On a pipe, stderr says once that the daemon is loading and then
# that it is ready; on a terminal (script(1)'s pty) a progress bar is
# redrawn in place, and ends in "ready", and on the synthetic 1b it moves
# through several percentages. The reply is the same as from a daemon that
# was up already. Skipped without systemd-socket-activate or script.
#   test_ctl_loading.sh LLAMA8D LLAMA8CTL MKMODEL TOKENIZER
set -u
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4
sa=
for c in /usr/bin/systemd-socket-activate /lib/systemd/systemd-socket-activate \
         /usr/lib/systemd/systemd-socket-activate; do
    [ -x "$c" ] && sa=$c
done
[ -n "$sa" ] || { echo "SKIP: no systemd-socket-activate"; exit 77; }
command -v script >/dev/null || { echo "SKIP: no script(1)"; exit 77; }

t=$(mktemp -d "${TMPDIR:-/tmp}/l8-loading.XXXXXX")
apid=
trap '[ -n "$apid" ] && kill "$apid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
"$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" >"$t/mk.log" 2>&1 ||
    { echo "FAIL: llama8-mkmodel"; cat "$t/mk.log"; exit 1; }
sock=$t/llama8d.sock
fail=0

# One activation per run: systemd-socket-activate without --accept serves
# one connection's start, then llama8d keeps the socket until it exits.
activate()
{
    rm -f "$sock"
    "$sa" --seqpacket -l "$sock" "$daemon" --model "$t/model" --socket /nonexistent/x.sock \
        --config /dev/null --threads 1 --allowed-group "" 2>>"$t/daemon.log" &
    apid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
}
stop()
{
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    apid=
}

# The reference: the same request to a daemon that is up.
activate
"$ctl" generate --socket "$sock" --max-new 12 "Say hi" >"$t/want.txt" 2>/dev/null ||
    { echo "FAIL: the reference generate"; cat "$t/daemon.log"; exit 1; }
stop

# A pipe: one line while loading, one when ready.
activate
"$ctl" generate --socket "$sock" --max-new 12 "Say hi" >"$t/got.txt" 2>"$t/err.txt"
rc=$?
stop
if [ $rc -ne 0 ] || ! cmp -s "$t/want.txt" "$t/got.txt"; then
    echo "FAIL: generate during the load: status $rc, reply differs"; fail=1
fi
if ! grep -q "^llama8ctl: llama8d is loading model (" "$t/err.txt" ||
   ! grep -q "^llama8ctl: llama8d ready (waited [0-9.]* s)$" "$t/err.txt" ||
   [ "$(wc -l <"$t/err.txt")" -ne 2 ] || grep -q $'\r' "$t/err.txt"; then
    echo "FAIL: stderr on a pipe during the load:"; cat -A "$t/err.txt"; fail=1
fi

# A terminal: the bar, redrawn with \r, then ready; the reply on stdout.
activate
script -qec "'$ctl' generate --socket '$sock' --max-new 12 'Say hi' 2>&1" /dev/null \
    >"$t/tty.txt" </dev/null
rc=$?
stop
tr '\r' '\n' <"$t/tty.txt" >"$t/tty_lines.txt"
if [ $rc -ne 0 ] || ! grep -q "llama8d: loading model: " "$t/tty_lines.txt" ||
   ! grep -q "llama8d: ready (waited [0-9.]* s)" "$t/tty_lines.txt" ||
   ! grep -qF "$(head -n1 "$t/want.txt")" "$t/tty_lines.txt"; then
    echo "FAIL: on a terminal during the load (status $rc):"; cat -A "$t/tty.txt"; fail=1
fi
# The synthetic 1b (1.9 GB, 12 s to write here): a load long enough for the
# bar to move (several ticks while the weights are placed), as a user sees
# a real checkpoint load. Skipped where the disk has no room for it.
free_kb=$(df -Pk "$t" | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -gt 6000000 ]; then
    "$mkmodel" --preset 1b --seed 1 --out "$t/model1b" --tokenizer "$tokenizer" --quiet ||
        { echo "FAIL: llama8-mkmodel --preset 1b"; exit 1; }
    rm -f "$sock"
    "$sa" --seqpacket -l "$sock" "$daemon" --model "$t/model1b" --socket /nonexistent/x.sock \
        --config /dev/null --allowed-group "" 2>>"$t/daemon.log" &
    apid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    script -qec "'$ctl' generate --socket '$sock' --max-new 2 'Say hi' 2>&1" /dev/null \
        >"$t/tty1b.txt" </dev/null
    rc=$?
    stop
    rm -rf "$t/model1b"
    pcts=$(tr '\r' '\n' <"$t/tty1b.txt" | sed -n 's/.*\] *\([0-9]*\)% placing the weights.*/\1/p' |
           sort -un | tr '\n' ' ')
    if [ $rc -ne 0 ] || [ "$(wc -w <<<"$pcts")" -lt 2 ] ||
       ! tr '\r' '\n' <"$t/tty1b.txt" | grep -q "llama8d: ready (waited"; then
        echo "FAIL: the 1b load on a terminal (status $rc, percentages: $pcts):"
        tr '\r' '\n' <"$t/tty1b.txt" | cat -A | head -20; fail=1
    else
        echo "1b load on a terminal: the bar showed $pcts(percent placed)"
    fi
else
    echo "1b load: skipped (${free_kb:-?} KiB free in $t)"
fi
[ $fail -eq 0 ] && echo "ok: llama8ctl during the load: $(head -n1 "$t/err.txt")"
exit $fail
