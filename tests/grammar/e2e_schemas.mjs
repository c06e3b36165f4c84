// e2e_schemas.mjs - constrained replies through the real llama8d, checked by ajv.
//
// For every schema of the corpus (tests/grammar/schemas/*.schema.json): K
// requests constrained by it (one greedy, the others sampled at temperature
// 0.9 with their own seeds) and one unconstrained, all on one `llama8ctl
// pipe` so that they share the daemon's batches. Every reply that ended
// whole (eos, or the schema admitting nothing more) must parse as JSON and
// validate against its schema by ajv (and ajv-formats), an implementation we
// did not write; replies cut by max_new are counted, not judged.
//
//   AJV_DIR=... node e2e_schemas.mjs LLAMA8CTL SOCKET SCHEMAS_DIR K MAX_NEW [JSON_OUT]
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [ctl, socket, dir, kArg, maxNewArg, jsonOut] = process.argv.slice(2);
const K = Number(kArg), maxNew = Number(maxNewArg);
const require = createRequire(path.join(process.env.AJV_DIR, 'node_modules', 'x.js'));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;

// The corpus: the schemas with cases (as ajv_cases.mjs reads it).
const schemas = fs.readdirSync(dir).filter(f => f.endsWith('.schema.json') &&
  fs.existsSync(path.join(dir, f.replace(/\.schema\.json$/, '.cases.json')))).sort();
const reqs = new Map();   // id -> { schema, validate, text, reason }
const lines = [];
for (const f of schemas) {
  const name = f.replace(/\.schema\.json$/, '');
  const schema = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
  // $schema is an annotation to llama8; ajv would look a draft-07 one up (as ajv_cases.mjs)
  const copy = JSON.parse(JSON.stringify(schema));
  if (copy && typeof copy === 'object') delete copy.$schema;
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  addFormats(ajv);
  const validate = ajv.compile(copy);
  validate.ajv = ajv;
  for (let k = 0; k < K; k++) {
    const id = `${name}#${k}`;
    reqs.set(id, { name, validate, text: '', reason: null });
    // an object as itself, a boolean schema (true) as its JSON text
    const js = schema && typeof schema === 'object' ? schema : JSON.stringify(schema);
    lines.push(JSON.stringify({ id, text: `Reply with JSON for ${name}.`, json_schema: js,
                                max_new: maxNew, temperature: k ? 0.9 : 0, seed: 100 + k }));
  }
  const id = `${name}#plain`;
  reqs.set(id, { name, validate: null, text: '', reason: null });
  lines.push(JSON.stringify({ id, text: `Say something about ${name}.`, max_new: 16 }));
}

const t0 = Date.now();
const p = spawn(ctl, ['pipe', '--socket', socket], { stdio: ['pipe', 'pipe', 'inherit'] });
p.stdin.end(lines.join('\n') + '\n');
let buf = '';
p.stdout.on('data', d => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (!line) continue;
    const e = JSON.parse(line);
    const r = reqs.get(e.id);
    if (!r) continue;
    if (e.event === 'token' && e.text) r.text += e.text;
    else if (e.event === 'done') { if (e.text) r.text += e.text; r.reason = e.reason; }
    else if (e.event === 'error') r.reason = 'error: ' + e.error + ' ' + (e.message || '');
  }
});
p.on('close', code => {
  const secs = (Date.now() - t0) / 1000;
  let whole = 0, valid = 0, cut = 0, bad = 0, plain = 0, other = 0;
  const failures = [];
  for (const [id, r] of reqs) {
    if (!r.validate) { plain += r.reason ? 1 : 0; continue; }
    if (r.reason === 'length') { cut++; continue; }
    if (r.reason !== 'eos' && r.reason !== 'grammar') {
      other++;
      failures.push(`${id}: ended ${r.reason}`);
      continue;
    }
    whole++;
    let v;
    try { v = JSON.parse(r.text); } catch (err) {
      bad++;
      failures.push(`${id}: not JSON: ${JSON.stringify(r.text).slice(0, 200)}`);
      continue;
    }
    if (r.validate(v)) valid++;
    else {
      bad++;
      failures.push(`${id}: ajv: ${r.validate.ajv.errorsText(r.validate.errors)}: ` +
                    JSON.stringify(r.text).slice(0, 200));
    }
  }
  const constrained = schemas.length * K;
  const summary = { schemas: schemas.length, constrained, whole, valid, invalid: bad,
                    cut_by_max_new: cut, other_endings: other, unconstrained_done: plain,
                    seconds: secs, max_new: maxNew };
  console.log(`e2e_schemas: ${schemas.length} schemas, ${constrained} constrained requests ` +
              `(+${schemas.length} unconstrained beside them) in ${secs.toFixed(1)} s: ` +
              `${whole} whole, ${valid} valid by ajv, ${bad} invalid; ${cut} cut at ` +
              `max_new ${maxNew}; ${other} ended otherwise`);
  for (const f of failures.slice(0, 20)) console.log('  FAIL ' + f);
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(summary, null, 1) + '\n');
  const ok = code === 0 && bad === 0 && other === 0 && whole > 0 && plain === schemas.length;
  process.exit(ok ? 0 : 1);
});
