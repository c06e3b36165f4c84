// The reference for the chat format with tools: Meta's Llama 3.1 chat template (the jinja
// in Llama-3.1-8B-Instruct's tokenizer_config.json) rendered by @huggingface/jinja, the text
// encoded by @huggingface/tokenizers (special tokens recognised, as transformers'
// apply_chat_template(tokenize=True) does).
// usage: node chat_tools_ref.mjs TEMPLATE TOKENIZER_JSON TOKENIZER_CONFIG_JSON CASES OUT
// TEMPLATE: a .jinja file or a tokenizer_config.json with a chat_template.
// JINJA_DIR / HF_TOKENIZERS_DIR: the packages' directories (scratch installs).
import fs from "fs";
import crypto from "crypto";

const [tmplPath, tokPath, cfgPath, casesPath, outPath] = process.argv.slice(2);
const jinja = await import(process.env.JINJA_DIR + "/dist/index.js");
const { Tokenizer } = await import(process.env.HF_TOKENIZERS_DIR + "/dist/tokenizers.mjs");
let source = fs.readFileSync(tmplPath, "utf8");
if (tmplPath.endsWith(".json")) source = JSON.parse(source).chat_template;
const template = new jinja.Template(source);
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, "utf8")), JSON.parse(fs.readFileSync(cfgPath, "utf8")));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = [];
for (const c of cases) {
  const messages = c.messages.map((m) =>
    m.tool_call ? { role: m.role, tool_calls: [{ type: "function", function: m.tool_call }] } : m);
  const data = { bos_token: "<|begin_of_text|>", messages, add_generation_prompt: c.add_generation_prompt ?? true };
  if (c.tools) data.tools = c.tools;
  if (c.date) data.date_string = c.date;
  if (c.tools_in_system) data.tools_in_user_message = false;
  const text = template.render(data);
  const ids = Array.from(tok.encode(text, { add_special_tokens: false }).ids);
  out.push({ ...c, text, ids });
}
const version = (p) => JSON.parse(fs.readFileSync(p + "/package.json", "utf8")).version;
fs.writeFileSync(outPath, JSON.stringify({
  reference: `@huggingface/jinja@${version(process.env.JINJA_DIR)} + @huggingface/tokenizers@${version(process.env.HF_TOKENIZERS_DIR)}`,
  template_sha256: crypto.createHash("sha256").update(source).digest("hex"),
  cases: out,
}, null, 1) + "\n");
console.log(`${out.length} conversations rendered`);
