# tiny_daemon.sh - sourced by the tests that drive a client against a real
# daemon (test_vim.sh, test_nvim.sh, test_shell.sh, test_python.sh):
#   tiny_daemon NAME DAEMON MKMODEL TOKENIZER
# makes $t (a temporary directory, removed at exit), writes the synthetic
# tiny model to $t/model with the real tokenizer, starts llama8d on it at
# $sock (= $t/llama8d.sock; $pid, killed at exit) and waits for the socket.
#   editor_references CTL
# writes what the editor plugins' replies must equal: llama8ctl generate's
# reply to "Say hi" in 24 tokens ($t/want.txt, more than one line) and in
# 200 ($t/want_long.txt).
tiny_daemon()
{
    local name=$1 daemon=$2 mkmodel=$3 tokenizer=$4
    t=$(mktemp -d "${TMPDIR:-/tmp}/l8-$name.XXXXXX")
    pid=
    trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
    "$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" >"$t/mk.log" 2>&1 ||
        { echo "FAIL: llama8-mkmodel"; cat "$t/mk.log"; exit 1; }
    sock=$t/llama8d.sock
    "$daemon" --model "$t/model" --socket "$sock" 2>"$t/daemon.log" &
    pid=$!
    # Up to 30 s: a loaded CI machine, a sanitizer build.
    for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || { echo "FAIL: llama8d did not start"; cat "$t/daemon.log"; exit 1; }
}

editor_references()
{
    local ctl=$1
    # generate prints the reply and one newline.
    "$ctl" generate --socket "$sock" --max-new 24 "Say hi" >"$t/want.txt" ||
        { echo "FAIL: llama8ctl generate"; exit 1; }
    # A reply with no newline in it would not check the line splitting.
    [ "$(wc -l <"$t/want.txt")" -ge 2 ] || { echo "FAIL: the reference reply has one line"; exit 1; }
    "$ctl" generate --socket "$sock" --max-new 200 "Say hi" >"$t/want_long.txt" ||
        { echo "FAIL: llama8ctl generate --max-new 200"; exit 1; }
}
