// The Node reference on the bench corpus: @huggingface/tokenizers (pure JS), single thread.
// usage: node bench_tokenizer_node.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON CORPUS IDS_OUT ROW_OUT [REPS]
// Writes the ids (JSON array) for the exactness comparison and one bench row.
import fs from "fs";
import { createRequire } from "module";

const [tokPath, cfgPath, corpusPath, idsOut, rowOut, repsArg] = process.argv.slice(2);
const reps = Number(repsArg || 3);
let Tokenizer, version;
try {
  // Resolved from NODE_PATH-style scratch installs: the caller passes the package dir.
  const pkgDir = process.env.HF_TOKENIZERS_DIR;
  const require = createRequire(import.meta.url);
  const mod = pkgDir ? await import(pkgDir + "/dist/tokenizers.mjs") : await import("@huggingface/tokenizers");
  Tokenizer = mod.Tokenizer;
  version = JSON.parse(fs.readFileSync((pkgDir || require.resolve("@huggingface/tokenizers/package.json").replace(/\/package\.json$/, "")) + "/package.json")).version;
} catch (e) {
  fs.writeFileSync(rowOut, JSON.stringify({ method: "@huggingface/tokenizers (Node)", kind: "encode", metrics: {}, notes: "", error: "cannot load the package: " + e.message }));
  process.exit(1);
}
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, "utf8")), JSON.parse(fs.readFileSync(cfgPath, "utf8")));
const buf = fs.readFileSync(corpusPath);
const text = buf.toString("utf8");
const encode = () => tok.encode(text, { add_special_tokens: false }).ids;
let t0 = process.hrtime.bigint();
let ids = encode();
const cold = Number(process.hrtime.bigint() - t0) / 1e9;
const times = [];
for (let r = 0; r < reps; r++) {
  t0 = process.hrtime.bigint();
  ids = encode();
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
const warm = times[Math.floor(times.length / 2)];
fs.writeFileSync(idsOut, JSON.stringify(Array.from(ids)));
const row = {
  method: `@huggingface/tokenizers@${version} (Node ${process.version})`,
  kind: "encode",
  metrics: { mb_s: buf.length / warm / 1e6, seconds: warm, bytes: buf.length, tokens: ids.length, cold_mb_s: buf.length / cold / 1e6 },
  notes: `median of ${reps} passes after a first (cold ${(buf.length / cold / 1e6).toFixed(2)} MB/s)`,
  error: null,
};
// The reference may scale badly with one 600 KB string: also time it on the corpus cut
// into paragraphs (the same bytes, ~2 KB a call), timing only.
const paras = text.split(/(?<=\n\n)/);
const ptimes = [];
let pt = 0;
for (let r = 0; r <= reps; r++) {
  t0 = process.hrtime.bigint();
  pt = 0;
  for (const p of paras) pt += tok.encode(p, { add_special_tokens: false }).ids.length;
  if (r > 0) ptimes.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
ptimes.sort((a, b) => a - b);
const pwarm = ptimes[Math.floor(ptimes.length / 2)];
row.metrics.mb_s_paragraphs = buf.length / pwarm / 1e6;
row.notes += `; in ${paras.length} paragraph calls: ${(buf.length / pwarm / 1e6).toFixed(2)} MB/s (${pt} tokens)`;
fs.writeFileSync(rowOut, JSON.stringify(row));
console.log(`node reference: ${row.metrics.mb_s.toFixed(2)} MB/s warm whole corpus, ${row.metrics.mb_s_paragraphs.toFixed(2)} MB/s by paragraph, ${ids.length} tokens`);
