#!/usr/bin/env bash
# test_bad_weights.sh - llama8d on a checkpoint with bad numbers, as an
# administrator meets it: copies of the golden tiny model, one tensor
# changed each.
#  - an E4M3 NaN code in a projection, a NaN in the embedding, a zero
#    weight_scale: llama8d refuses to start (exit 1), naming the tensor and
#    the element, and never says READY;
#  - the final norm at 3e38 (finite, so it loads): the logits overflow. The
#    warm-up step sees it and llama8d refuses to start, saying why; with no
#    warm-up a request ends with INTERNAL, the log saying why; never a
#    stream of tokens.
#   test_bad_weights.sh LLAMA8D LLAMA8CTL GOLDEN_TINY_DIR
set -u
daemon=$1 ctl=$2 golden=$3
t=$(mktemp -d "${TMPDIR:-/tmp}/l8-badw.XXXXXX")
dpid=
trap '[ -n "$dpid" ] && kill "$dpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
fail=0

# patch DIR TENSOR HOW: rewrite one tensor of DIR's safetensors in place.
# HOW: e4m3nan (element 5 = 0x7f), bf16nan (element 7 = NaN), scale0 (every
# element 0.0), norm3e38 (every element the BF16 nearest 3e38).
patch()
{
    python3 - "$1" "$2" "$3" <<'EOF'
import glob, json, struct, sys
d, name, how = sys.argv[1:]
for path in glob.glob(d + "/*.safetensors"):
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        if name not in h:
            continue
        e = h[name]
        b, end = e["data_offsets"]
        base = 8 + n + b
        if how == "e4m3nan":
            f.seek(base + 5); f.write(b"\x7f")
        elif how == "bf16nan":
            f.seek(base + 2 * 7); f.write(struct.pack("<H", 0x7fc0))
        elif how == "scale0":
            f.seek(base); f.write(bytes(end - b))
        elif how == "norm3e38":
            v = struct.unpack("<I", struct.pack("<f", 3e38))[0] >> 16
            f.seek(base); f.write(struct.pack("<H", v) * ((end - b) // 2))
        sys.exit(0)
sys.exit("no tensor " + name)
EOF
}

start()   # start MODEL_DIR LOG [FLAGS]: llama8d in the background
{
    rm -f "$t/d.sock"
    "$daemon" --model "$1" --socket "$t/d.sock" --config /dev/null --threads 1 \
        --allowed-group "" "${@:3}" 2>"$2" &
    dpid=$!
}

refused()   # refused HOW TENSOR WANT: the daemon exits 1 saying WANT
{
    rm -rf "$t/m"
    cp -r "$golden" "$t/m"
    patch "$t/m" "$2" "$1" || { echo "FAIL: patching $2"; fail=1; return; }
    start "$t/m" "$t/$1.log"
    local rc=0
    for _ in $(seq 200); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.05; done
    wait "$dpid"; rc=$?; dpid=
    if [ $rc -ne 1 ] || ! grep -q -- "$3" "$t/$1.log" || grep -q "ready" "$t/$1.log"; then
        echo "FAIL: $1 in $2: exit $rc, the log:"; cat "$t/$1.log"; fail=1
    fi
}

refused e4m3nan model.layers.0.mlp.down_proj.weight \
    "model.layers.0.mlp.down_proj.weight: element 5 .*E4M3 NaN code (0x7f)"
refused bf16nan model.embed_tokens.weight "model.embed_tokens.weight: element 7 "
refused scale0 model.layers.1.self_attn.q_proj.weight_scale \
    "model.layers.1.self_attn.q_proj.weight_scale: element 0 "

# Loads, then every sample would be garbage: the warm-up says so; without
# it, a request ends with INTERNAL, and the log says why.
rm -rf "$t/m"
cp -r "$golden" "$t/m"
patch "$t/m" model.norm.weight norm3e38
start "$t/m" "$t/warm.log"
wait "$dpid"; rc=$?; dpid=
if [ $rc -ne 1 ] || ! grep -q "warm-up step failed: the logits are not finite" "$t/warm.log"; then
    echo "FAIL: the warm-up on overflowing logits: exit $rc"; cat "$t/warm.log"; fail=1
fi
start "$t/m" "$t/norm.log" --no-warmup=true
"$ctl" status --socket "$t/d.sock" --wait=60 >/dev/null 2>&1 ||
    { echo "FAIL: the 3e38 norm did not load"; cat "$t/norm.log"; exit 1; }
"$ctl" generate --socket "$t/d.sock" --ids "1 2 3" --max-new 4 >"$t/out.txt" 2>"$t/err.txt" \
    </dev/null
rc=$?
if [ $rc -ne 1 ] || ! grep -q "request failed: INTERNAL" "$t/err.txt" ||
        [ -n "$(tr -d ' \n' <"$t/out.txt")" ]; then
    echo "FAIL: a request on overflowing logits: exit $rc"; cat "$t/out.txt" "$t/err.txt"; fail=1
fi
if ! grep -q "the logits are not finite" "$t/norm.log"; then
    echo "FAIL: the log does not say the logits were not finite"; cat "$t/norm.log"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: bad weights refused by name; overflowing logits end with INTERNAL"
exit $fail
