#!/bin/bash
# test_openai.sh LLAMA8D LLAMA8CTL LLAMA8_OPENAI MKMODEL TOKENIZER TESTJS NPMDIR UNITDIR -
# llama8-openai against a real llama8d (synthetic tiny model, real
# tokenizer), driven as users drive it: curl (replies, SSE streams, every
# error status), then the official openai npm client (test_openai.js),
# installed into NPMDIR (under the build directory) on first use. The
# systemd units as built in UNITDIR are checked with systemd-analyze where
# it is installed. Skipped (77) without curl, or when npm cannot install
# the client (after the curl checks ran).
set -uo pipefail
daemon=$1 ctl=$(realpath "$2") oai=$(realpath "$3") mkmodel=$4 tokenizer=$5
testjs=$(realpath "$6") npmdir=$7 unitdir=$8
command -v curl >/dev/null || { echo "no curl: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "no python3 to read the replies: skipped"; exit 77; }

# shellcheck source=tiny_daemon.sh
source "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon openai "$daemon" "$mkmodel" "$tokenizer"
bridges=()
trap 'kill "${bridges[@]}" $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

key=k-$RANDOM$RANDOM
echo "$key" >"$t/key"

# bridge NAME ARGS...: start llama8-openai, wait for its "listening on"
# line; $url is its base URL (for a TCP listener), $bpid its pid.
bridge()
{
    local name=$1
    shift
    "$oai" "$@" 2>"$t/$name.log" &
    bpid=$!
    bridges+=("$bpid")
    for _ in $(seq 600); do grep -q 'listening on' "$t/$name.log" && break; sleep 0.05; done
    local at
    at=$(sed -n 's/^llama8-openai: listening on //p' "$t/$name.log")
    [ -n "$at" ] || { echo "FAIL: llama8-openai $name did not start"; cat "$t/$name.log"; exit 1; }
    url=http://$at
}

# stop_bridge NAME PID: SIGTERM ends it with status 0 (and, under the
# sanitizers, no leak).
stop_bridge()
{
    kill -TERM "$2"
    wait "$2"
    local rc=$?
    [ $rc -eq 0 ] || { bad "llama8-openai $1 exited $rc on SIGTERM"; cat "$t/$1.log"; }
}

# req METHOD PATH [BODY [CURL ARGS...]]: the reply body to $t/out, the
# HTTP status on stdout; the header $auth sends the key.
auth="Authorization: Bearer $key"
req()
{
    local method=$1 path=$2 body=${3-}
    shift $(($# < 3 ? $# : 3))
    curl -s -o "$t/out" -w '%{http_code}' -X "$method" -H "$auth" "$@" \
        -H 'Content-Type: application/json' ${body:+--data-binary "$body"} "$url$path"
}

# py EXPR: EXPR about d, the JSON of $t/out, printed.
py() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
         "$t/out" "$1"; }

bridge main --listen 127.0.0.1:0 --socket "$sock" --api-key-file "$t/key" --max-body 64K
main_pid=$bpid
base=$url

# ---- /v1/models: the daemon's model
code=$(req GET /v1/models)
[ "$code" = 200 ] && [ "$(py 'd["data"][0]["id"]')" = model ] ||
    bad "GET /v1/models: $code $(cat "$t/out")"

# ---- a greedy chat reply is llama8ctl generate's, byte for byte
msgs='[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hi"}]'
"$ctl" generate --socket "$sock" --max-new 24 --messages <<<"$msgs" >"$t/want.txt" ||
    { echo "FAIL: llama8ctl generate"; exit 1; }
body='{"model":"llama8","messages":'$msgs',"temperature":0,"max_tokens":24}'
code=$(req POST /v1/chat/completions "$body")
[ "$code" = 200 ] || bad "chat: $code $(cat "$t/out")"
python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"] + "\n")' \
    "$t/out" >"$t/got.txt"
cmp -s "$t/want.txt" "$t/got.txt" || bad "chat reply differs from llama8ctl's: $(cat "$t/got.txt") | $(cat "$t/want.txt")"
ntok=$("$ctl" tokenize --chat --messages --json --tokenizer "$t/model" <<<"$msgs" |
       python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$(py 'd["usage"]["prompt_tokens"]')" = "$ntok" ] || bad "usage.prompt_tokens is not $ntok: $(cat "$t/out")"
[ "$(py 'd["object"], d["choices"][0]["finish_reason"] in ("stop", "length")')" = "('chat.completion', True)" ] ||
    bad "chat shape: $(cat "$t/out")"

# ---- the same streamed: SSE events that each parse, the same text, [DONE] last
code=$(req POST /v1/chat/completions "${body%\}},\"stream\":true,\"stream_options\":{\"include_usage\":true}}" -N)
cp "$t/out" "$t/sse"
[ "$code" = 200 ] || bad "stream: $code $(cat "$t/sse")"
python3 - "$t/sse" "$t/want.txt" <<'EOF' || bad "the SSE stream: $(head -c 2000 "$t/sse")"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
want = open(sys.argv[2], encoding="utf-8").read()[:-1]
events = raw.split("\n\n")
assert events[-1] == "", "the stream ends with a blank line"
events = events[:-1]
assert all(e.startswith("data: ") for e in events), "every event is data: ..."
assert events[-1] == "data: [DONE]", "the last event is [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
assert text == want, (text, want)
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert len(finish) == 1 and finish[0] in ("stop", "length"), finish
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
EOF

# ---- errors: OpenAI's shape, the status, the field named
# check_error STATUS PARAM WORDS CODE WHAT: $t/out is an OpenAI error
# naming PARAM (None: null) whose message has WORDS, and CODE is STATUS.
check_error()
{
    local want=$1 param=$2 words=$3 code=$4 what=$5 got
    [ "$code" = "$want" ] || { bad "$what: status $code, not $want: $(cat "$t/out")"; return; }
    got=$(py 'd["error"]["param"], sorted(d["error"].keys())') ||
        { bad "$what: not JSON: $(cat "$t/out")"; return; }
    [ "$param" = None ] || param="'$param'"
    [ "$got" = "($param, ['code', 'message', 'param', 'type'])" ] ||
        bad "$what: not an error naming $param: $(cat "$t/out")"
    got=$(py 'd["error"]["message"]')
    [[ $got == *"$words"* ]] || bad "$what: the message lacks '$words': $got"
}
m='"messages":[{"role":"user","content":"x"}]'
check_error 400 None 'line 2, column 17' "$(req POST /v1/chat/completions "{\"model\":\"x\",
 \"messages\": [1,]}")" "bad JSON"
check_error 400 temperature 'temperature: a number from 0 to 2, not a string' \
    "$(req POST /v1/chat/completions "{$m,\"temperature\":\"hot\"}")" "a string temperature"
check_error 400 max_tokens 'max_tokens: an integer, not an object' \
    "$(req POST /v1/chat/completions "{$m,\"max_tokens\":{}}")" "an object max_tokens"
check_error 400 messages 'messages: missing' "$(req POST /v1/chat/completions '{"model":"x"}')" \
    "no messages"
check_error 400 'messages[0].role' 'messages[0].role: "robot"' \
    "$(req POST /v1/chat/completions '{"messages":[{"role":"robot","content":"x"}]}')" "a bad role"
check_error 400 frobnicate 'unrecognized request argument "frobnicate"' \
    "$(req POST /v1/chat/completions "{$m,\"frobnicate\":1}")" "an unknown field"
check_error 400 n 'n: 1 only' "$(req POST /v1/chat/completions "{$m,\"n\":2}")" "n 2"
check_error 400 top_logprobs 'top_logprobs: 0 only' \
    "$(req POST /v1/chat/completions "{$m,\"logprobs\":true,\"top_logprobs\":2}")" "top_logprobs"
check_error 400 presence_penalty 'repetition_penalty' \
    "$(req POST /v1/chat/completions "{$m,\"presence_penalty\":0.5}")" "presence_penalty"
check_error 400 response_format 'names nothing in the schema' \
    "$(req POST /v1/chat/completions "{$m,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"properties\":{\"a\":{\"\$ref\":\"#/no\"}}}}}}")" \
    "a schema llama8d cannot compile"
check_error 400 prompt 'one prompt a request' \
    "$(req POST /v1/completions '{"prompt":["a","b"]}')" "two prompts"
check_error 400 prompt 'is not a token id' "$(req POST /v1/completions '{"prompt":[1,-2]}')" \
    "a negative token id"
check_error 400 None 'token' "$(req POST /v1/completions '{"prompt":[1,99999999],"max_tokens":2}')" \
    "a token past the vocabulary"
check_error 400 messages 'is a field of /v1/chat/completions' \
    "$(req POST /v1/completions "{$m}")" "messages to /v1/completions"
check_error 401 None 'no API key' "$(auth='X-No: key' req GET /v1/models)" "no key"
check_error 401 None 'incorrect API key' "$(auth='Authorization: Bearer nope' req GET /v1/models)" \
    "a wrong key"
check_error 404 None 'no such path: GET /v1/nothing' "$(req GET /v1/nothing)" "an unknown path"
check_error 405 None '/v1/chat/completions takes POST' "$(req GET /v1/chat/completions)" "GET chat"
head -c 70000 /dev/zero | tr '\0' ' ' >"$t/big"
check_error 413 None 'at most 65536' "$(req POST /v1/chat/completions "" --data-binary @"$t/big")" \
    "a body over --max-body"
check_error 413 None 'over 65536' "$(req POST /v1/chat/completions "" --data-binary @"$t/big" \
    -H 'Transfer-Encoding: chunked')" "a chunked body over --max-body"
req POST /v1/chat/completions "{$m,\"max_tokens\":2}" >/dev/null
grep -q '"finish_reason"' "$t/out" || bad "a request after the errors: $(cat "$t/out")"

# ---- no daemon at the socket: 503
bridge nodaemon --listen 127.0.0.1:0 --socket "$t/none.sock"
check_error 503 None 'llama8d is not running' \
    "$(req POST /v1/chat/completions "{$m,\"max_tokens\":2}")" "no daemon"
stop_bridge nodaemon "$bpid"

# ---- a Unix socket listener; SIGTERM removes it
bridge unix --listen "unix:$t/oai.sock" --socket "$sock"
code=$(curl -s -o "$t/out" -w '%{http_code}' --unix-socket "$t/oai.sock" http://x/v1/models)
[ "$code" = 200 ] || bad "GET /v1/models on unix:$t/oai.sock: $code $(cat "$t/out")"
stop_bridge unix "$bpid"
[ -e "$t/oai.sock" ] && bad "the unix socket is left after SIGTERM"

# ---- socket activation: the listening socket systemd passes (LISTEN_FDS)
if command -v systemd-socket-activate >/dev/null; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    systemd-socket-activate -l "127.0.0.1:$port" "$oai" --socket "$sock" 2>"$t/activated.log" &
    apid=$!
    bridges+=("$apid")
    url=http://127.0.0.1:$port
    for _ in $(seq 100); do code=$(req GET /v1/models) && [ "$code" = 200 ] && break; sleep 0.05; done
    [ "$code" = 200 ] || bad "socket-activated GET /v1/models: $code $(cat "$t/activated.log")"
    grep -q "^llama8-openai: listening on 127.0.0.1:$port$" "$t/activated.log" ||
        bad "not on the passed socket: $(cat "$t/activated.log")"
    stop_bridge activated "$apid"
else
    echo "no systemd-socket-activate: socket activation is not checked"
fi

# ---- the systemd units as built
if command -v systemd-analyze >/dev/null; then
    mkdir "$t/units"
    cp "$unitdir/llama8-openai.service" "$unitdir/llama8-openai.socket" "$unitdir/llama8d.socket" \
        "$t/units/"
    sed -i "s#^ExecStart=[^ ]*#ExecStart=$oai#" "$t/units/llama8-openai.service"
    out=$(systemd-analyze verify "$t/units/llama8-openai.socket" "$t/units/llama8-openai.service" 2>&1) ||
        bad "systemd-analyze verify: $out"
    [ -z "$out" ] || bad "systemd-analyze verify said: $out"
    grep -qx 'ListenStream=127.0.0.1:8408' "$unitdir/llama8-openai.socket" ||
        bad "llama8-openai.socket does not listen on 127.0.0.1:8408"
else
    echo "no systemd-analyze: the units are not checked"
fi

# ---- the openai npm client
url=$base
node=$(command -v node) || { echo "no node: the openai npm client is not tested: skipped"; exit 77; }
if [ ! -f "$npmdir/node_modules/openai/package.json" ]; then
    mkdir -p "$npmdir"
    npm_config_cache=$npmdir/.npm npm install --prefix "$npmdir" --no-audit --no-fund \
        --no-package-lock openai@6 >"$t/npm.log" 2>&1 ||
        { echo "npm install openai failed (no registry?): skipped"; tail -5 "$t/npm.log"; exit 77; }
fi
OAI_URL=$base/v1 OAI_KEY=$key OPENAI_MODULE=$(realpath "$npmdir/node_modules/openai") \
    LLAMA8CTL=$ctl LLAMA8_SOCKET=$sock LLAMA8_MODEL=$t/model "$node" "$testjs" || fail=1

# ---- the daemon goes away under a running bridge: 503, then back
kill "$pid"
wait "$pid" 2>/dev/null
pid=
check_error 503 None 'llama8d is not running' \
    "$(req POST /v1/chat/completions "{$m,\"max_tokens\":2}")" "the daemon stopped"
stop_bridge main "$main_pid"
[ $fail -eq 0 ] && echo "llama8-openai: all checks passed"
exit $fail
