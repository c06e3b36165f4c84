// ajv_cases.mjs - the schema corpus's labels checked by an implementation we did not write.
//
//   AJV_DIR=/tmp/llama8-ajv node tests/grammar/ajv_cases.mjs tests/grammar/schemas
//
// For every NAME.schema.json beside a NAME.cases.json, ajv (draft 2020-12, with
// ajv-formats) must find each "valid" value valid and each "invalid" one invalid;
// each "valid_text" must parse and be valid, each "invalid_text" must fail to parse
// or be invalid, and each "subset_text" (what the schema allows but our grammar
// deliberately does not: other member orders, unbounded whitespace, 1.0 for an
// integer, escapes in member names) must parse and be valid. test_schema checks the
// same files against the grammars l8g_schema_to_gbnf writes. Exit 0 all agree, 1 not.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const dir = process.argv[2];
const require = createRequire(path.join(process.env.AJV_DIR || process.cwd(), "node_modules", "x.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

let failures = 0, checked = 0, schemas = 0;
const fail = (name, what) => { failures++; console.error(`FAIL ${name}: ${what}`); };

for (const file of fs.readdirSync(dir).sort()) {
  if (!file.endsWith(".schema.json")) continue;
  const name = file.slice(0, -".schema.json".length);
  const casesFile = path.join(dir, name + ".cases.json");
  if (!fs.existsSync(casesFile)) continue;
  const schema = JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"));
  // $schema is an annotation to us; a draft-07 one would make Ajv2020 look for that
  // meta-schema. The draft-07 keywords in the corpus mean the same in 2020-12.
  if (schema && typeof schema === "object") delete schema.$schema;
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  addFormats(ajv);
  let validate;
  try {
    validate = ajv.compile(schema);
  } catch (e) {
    fail(name, `ajv cannot compile the schema: ${e.message}`);
    continue;
  }
  schemas++;
  const cases = JSON.parse(fs.readFileSync(casesFile, "utf8"));
  const show = (v) => JSON.stringify(v).slice(0, 120);
  for (const v of cases.valid || []) {
    checked++;
    if (!validate(v)) fail(name, `valid ${show(v)} rejected: ${ajv.errorsText(validate.errors)}`);
  }
  for (const v of cases.invalid || []) {
    checked++;
    if (validate(v)) fail(name, `invalid ${show(v)} accepted`);
  }
  const parse = (t) => { try { return { ok: true, v: JSON.parse(t) }; } catch { return { ok: false }; } };
  for (const key of ["valid_text", "subset_text"]) {
    for (const t of cases[key] || []) {
      checked++;
      const p = parse(t);
      if (!p.ok) fail(name, `${key} ${show(t)} is not JSON`);
      else if (!validate(p.v)) fail(name, `${key} ${show(t)} rejected: ${ajv.errorsText(validate.errors)}`);
    }
  }
  for (const t of cases.invalid_text || []) {
    checked++;
    const p = parse(t);
    if (p.ok && validate(p.v)) fail(name, `invalid_text ${show(t)} accepted`);
  }
}
console.log(`ajv_cases: ${schemas} schemas, ${checked} instances, ${failures} disagreements`);
process.exit(failures || !schemas ? 1 : 0);
