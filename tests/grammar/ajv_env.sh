# ajv_env.sh - sourced by the scripts that validate with ajv (ajv_cases.sh,
# e2e_schemas.sh): ajv and ajv-formats installed into a scratch directory,
# never the tree (as tests/bench/bench_tokenizer.sh installs its Node
# reference), AJV_DIR exported; exits 77 (meson: skipped) without node/npm or
# when the install fails.
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found: skipped"; exit 77; }
AJV_DIR=${L8_AJV_DIR:-/tmp/llama8-ajv}
if [ ! -d "$AJV_DIR/node_modules/ajv" ] || [ ! -d "$AJV_DIR/node_modules/ajv-formats" ]; then
  mkdir -p "$AJV_DIR"
  (cd "$AJV_DIR" && npm install --silent --no-save --no-package-lock ajv@8 ajv-formats@3 >/dev/null 2>&1) ||
    { echo "npm install of ajv failed (offline?): skipped"; exit 77; }
fi
export AJV_DIR
