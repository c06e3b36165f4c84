#!/usr/bin/env bash
# The corpus's labels checked with ajv (ajv_cases.mjs); ajv as ajv_env.sh
# installs it (exit 77 without it).
#   tests/grammar/ajv_cases.sh CORPUS_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=${1:-$here/schemas}
. "$here/ajv_env.sh"
exec node "$here/ajv_cases.mjs" "$corpus"
