#!/bin/bash
# test_python.sh LLAMA8D LLAMA8CTL LIBLLAMA8CLIENT MKMODEL TOKENIZER PYDIR TESTFILE -
# the llama8 Python package (PYDIR) under pytest against a real daemon
# (synthetic tiny model, real tokenizer). Skipped (77) without a python3
# that has pytest (Debian: python3-pytest).
set -uo pipefail
daemon=$1 ctl=$(realpath "$2") lib=$(realpath "$3") mkmodel=$4 tokenizer=$5 pydir=$(realpath "$6")
tests=$(realpath "$7")
py=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import pytest' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || { echo "no python3 with pytest: skipped"; exit 77; }

t=$(mktemp -d "${TMPDIR:-/tmp}/l8-py.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$t"' EXIT
"$mkmodel" --preset tiny --seed 1 --out "$t/model" --tokenizer "$tokenizer" >"$t/mk.log" 2>&1 ||
    { echo "FAIL: llama8-mkmodel"; cat "$t/mk.log"; exit 1; }
export LLAMA8_SOCKET=$t/llama8d.sock LLAMA8CTL=$ctl LLAMA8_CLIENT_LIB=$lib
export LLAMA8_TEST_MODEL=$t/model PYTHONPATH=$pydir PYTHONDONTWRITEBYTECODE=1
"$daemon" --model "$t/model" --socket "$LLAMA8_SOCKET" 2>"$t/daemon.log" &
pid=$!
for _ in $(seq 600); do [ -S "$LLAMA8_SOCKET" ] && break; sleep 0.05; done
[ -S "$LLAMA8_SOCKET" ] || { echo "FAIL: llama8d did not start"; cat "$t/daemon.log"; exit 1; }
"$py" -m pytest -q -p no:cacheprovider "$tests"
