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

# shellcheck source=tiny_daemon.sh
source "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon py "$daemon" "$mkmodel" "$tokenizer"
export LLAMA8_SOCKET=$sock LLAMA8CTL=$ctl LLAMA8_CLIENT_LIB=$lib
export LLAMA8_TEST_MODEL=$t/model PYTHONPATH=$pydir PYTHONDONTWRITEBYTECODE=1
"$py" -m pytest -q -p no:cacheprovider "$tests"
