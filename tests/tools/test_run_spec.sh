#!/bin/sh
# llama8-run --speculate generates the tokens of a run without it.
# On a prompt of repeated blocks (so prompt lookup finds matches), greedy
# and seeded sampling with a repetition penalty (the verification sees the
# drafts as history), exact and fp8 numerics, each run plain and with:
#   ngram (adaptive, fixed K = 8, min n 2), ngram with the plain output as
#   --draft-source (drafts that hold), oracle of the plain output (every
#   draft accepted: fewer steps than tokens), oracle with every third token
#   wrong (accepted up to there), oracle of wrong tokens only (all
#   rejected), --batch 3 (each copy its own drafts), --warmup, a stop
#   token inside the accepted drafts; and --logits-out's file byte for
#   byte, oracle against plain. Then greedy for 100 tokens, where prompt
#   lookup in the sequence itself finds drafts that hold.
# usage: test_run_spec.sh LLAMA8_RUN MODEL_DIR
set -eu
RUN=$1 MODEL=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
A="1201,884,73,1999,402,17,650,1432,90,1010,333,1777"
B="55,1290,808,1,1600,212"
PROMPT="$A,$B,$A,$B,$A,1,1600"
NEW=40
fail() { echo "FAIL: $*"; exit 1; }
# json FIELD... of llama8-run --json on stdin, space-separated
field() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(*[j[k] for k in sys.argv[1:]])' "$@"; }

for sampling in "--temperature 0" "--temperature 0.8 --top-k 40 --repetition-penalty 1.3 --seed 7"; do
for num in exact fp8; do
    run() { "$RUN" --model "$MODEL" --tokens "$PROMPT" --max-new $NEW --ignore-eos --numerics $num \
            $sampling "$@" 2>/dev/null; }
    what="$num $sampling"
    plain=$(run)
    [ "$(echo "$plain" | tr ',' '\n' | wc -l)" = $NEW ] || fail "$what: plain run: '$plain'"
    echo "$plain" >"$tmp/plain"
    echo "$plain" | awk -F, '{for (i = 1; i <= NF; i++) printf "%s%d", (i > 1 ? "," : ""), i % 3 ? $i : ($i + 1) % 2048; print ""}' >"$tmp/third"
    echo "$plain" | awk -F, '{for (i = 1; i <= NF; i++) printf "%s%d", (i > 1 ? "," : ""), ($i + 1) % 2048; print ""}' >"$tmp/wrong"
    for spec in "ngram" "ngram --draft-fixed --draft-max 8" "ngram --draft-min-n 2" \
                "ngram --draft-source $tmp/plain" "oracle $tmp/plain" "oracle $tmp/plain --draft-max 8" \
                "oracle $tmp/third --draft-fixed" "oracle $tmp/wrong --draft-fixed"; do
        got=$(run --speculate $spec)
        [ "$got" = "$plain" ] || fail "$what, --speculate $spec:
  got  $got
  want $plain"
    done
    # what the counts say: the plain output drafts and the rest reject
    set -- $(run --speculate oracle "$tmp/plain" --json | field drafted accepted tokens_per_step)
    [ "$1" -gt 0 ] && [ "$1" = "$2" ] && python3 -c "import sys; sys.exit(not $3 > 1.5)" \
        || fail "$what: oracle of the plain output: drafted $1, accepted $2, $3 tokens a step"
    set -- $(run --speculate oracle "$tmp/wrong" --draft-fixed --json | field drafted accepted)
    [ "$1" -gt 0 ] && [ "$2" = 0 ] || fail "$what: wrong oracle: drafted $1, accepted $2"
    set -- $(run --speculate oracle "$tmp/third" --draft-fixed --json | field drafted accepted)
    [ "$2" -gt 0 ] && [ "$2" -lt "$1" ] || fail "$what: every third wrong: drafted $1, accepted $2"
    set -- $(run --speculate ngram --draft-source "$tmp/plain" --json | field accepted)
    [ "$1" -gt 0 ] || fail "$what: ngram with the output as source: accepted $1"
    echo "$what: same tokens with every draft source"

    # a stop token: the plain output's 11th, reached inside a run of drafts
    stop=$(cut -d, -f11 "$tmp/plain")
    want=$(run --stop "$stop")
    for spec in "oracle $tmp/plain" "ngram --draft-source $tmp/plain"; do
        got=$(run --stop "$stop" --speculate $spec)
        [ "$got" = "$want" ] || fail "$what: --stop $stop, --speculate $spec: '$got', want '$want'"
    done

    # copies with their own seeds, histories and drafts; and the warm-up
    want=$(run --batch 3)
    for spec in "ngram" "oracle $tmp/plain" "ngram --draft-source $tmp/plain"; do
        got=$(run --batch 3 --speculate $spec)
        [ "$got" = "$want" ] || fail "$what: --batch 3 --speculate $spec:
$got
want
$want"
        got=$(run --warmup --speculate $spec)
        [ "$got" = "$plain" ] || fail "$what: --warmup --speculate $spec"
    done
    echo "$what: same with --stop, --batch 3, --warmup"

    # the logits each token was sampled from, bitwise
    run --logits-out "$tmp/plain.st" >/dev/null
    run --logits-out "$tmp/oracle.st" --speculate oracle "$tmp/plain" >/dev/null
    cmp -s "$tmp/plain.st" "$tmp/oracle.st" || fail "$what: --logits-out differs with --speculate oracle"
done
done

# prompt lookup in the sequence itself with drafts accepted: the greedy
# tiny model repeats a few short runs of its own within 100 tokens
run() { "$RUN" --model "$MODEL" --tokens "$PROMPT" --max-new 100 --ignore-eos "$@" 2>/dev/null; }
want=$(run)
for spec in "ngram" "ngram --draft-fixed --draft-max 8"; do
    [ "$(run --speculate $spec)" = "$want" ] || fail "100 tokens, --speculate $spec"
    set -- $(run --speculate $spec --json | field drafted accepted)
    [ "$2" -gt 0 ] || fail "100 tokens, --speculate $spec: drafted $1, accepted $2"
    echo "100 tokens, --speculate $spec: same tokens, $2 of $1 drafts accepted"
done

# usage errors
for bad in "--speculate oracle" "--speculate bogus" "--draft-max 0" "--draft-max 65" \
           "--draft-min-n 9" "--draft-source $tmp/plain" "--speculate oracle /nonexistent"; do
    if "$RUN" --model "$MODEL" --tokens 1,2,3 $bad >/dev/null 2>&1; then
        fail "accepted: $bad"
    elif [ $? != 2 ]; then
        fail "$bad: exit status not 2"
    fi
done
echo ok
