// xgrammar_compare.mjs - llama8's masks (mask_dump) against xgrammar's (xgrammar_masks.mjs),
// case by case: ok, can_end, and the ids allowed by one side only, with their bytes.
//
//   node xgrammar_compare.mjs GRAMMAR.gbnf TOKENIZER.json CASES.jsonl LLAMA8.jsonl XGRAMMAR.jsonl [--max-show N]
//
// A difference is "explained" when it is one xgrammar is known to get wrong in this grammar:
// a negated class with a non-ASCII member (xgrammar_masks.mjs, emitClass), i.e. an id only
// llama8 allows whose bytes hold a character xgrammar's class wrongly refuses, an id only
// xgrammar allows whose bytes hold one it wrongly allows, or any difference in a case whose
// prefix holds such a character (the walk followed xgrammar there). Everything else is
// And an id only xgrammar allows that makes the output ill-formed UTF-8 (a GBNF language has
// only well-formed strings): xgrammar's negated classes take C0 C1 F5-F7 as leads, ED A0-BF
// (surrogates) and other overlong or out-of-range sequences; or any difference in a case
// whose prefix is already ill-formed. Everything else is
// unexplained: printed, and the exit status is 1. Exit 0 when every difference is explained.
import fs from 'node:fs';
import { toXgrammarEbnf, utf8PrefixOk } from './xgrammar_masks.mjs';

const argv = process.argv.slice(2);
let maxShow = 8;
const mi = argv.indexOf('--max-show');
if (mi >= 0) { maxShow = Number(argv[mi + 1]); argv.splice(mi, 2); }
if (argv.length !== 5) {
  process.stderr.write('usage: GRAMMAR.gbnf TOKENIZER.json CASES.jsonl LLAMA8.jsonl XGRAMMAR.jsonl [--max-show N]\n');
  process.exit(2);
}
const [gbnfPath, tokPath, casesPath, l8Path, xgPath] = argv;

// the tokens' bytes: byte-level alphabet (GPT-2's bytes_to_unicode) back to bytes
const tj = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
const u2b = new Map();
{
  const bs = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = bs.slice();
  let k = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + k++); }
  bs.forEach((b, i) => u2b.set(cs[i], b));
}
const tokBytes = [];
const isSpecial = [];
for (const [s, id] of Object.entries(tj.model.vocab)) tokBytes[id] = Buffer.from([...s].map((c) => u2b.get(c.codePointAt(0))));
for (const a of tj.added_tokens || []) { tokBytes[a.id] = Buffer.from(a.content, 'utf8'); isSpecial[a.id] = a.special; }
const esc = (b) => {
  let s = '';
  for (const x of b) s += x >= 0x20 && x < 0x7f && x !== 0x5c && x !== 0x22 ? String.fromCharCode(x) : '\\x' + x.toString(16).padStart(2, '0');
  return '"' + s + '"';
};
const show = (id) => (tokBytes[id] ? `${id}:${esc(tokBytes[id])}${isSpecial[id] ? '(special)' : ''}` : `${id}:(unused)`);

const quirks = { allowed: new Set(), refused: new Set() };
toXgrammarEbnf(fs.readFileSync(gbnfPath, 'utf8'), {}, quirks);
const hasChar = (buf, set) => {
  if (!set.size) return false;
  const s = buf.toString('utf8');
  for (const ch of s) if (ch !== '\ufffd' && set.has(ch.codePointAt(0))) return true;
  return false;
};
const anyQuirk = new Set([...quirks.allowed, ...quirks.refused]);

const readLines = (p) => fs.readFileSync(p, 'utf8').split('\n').filter((l) => l.trim() !== '');
const cases = readLines(casesPath).map((l) => JSON.parse(l));
const l8 = readLines(l8Path).map((l) => JSON.parse(l));
const xg = readLines(xgPath).map((l) => JSON.parse(l));
if (l8.length !== cases.length || xg.length !== cases.length) {
  console.log(`line counts differ: ${cases.length} cases, llama8 ${l8.length}, xgrammar ${xg.length}`);
  process.exit(1);
}
const N = tokBytes.length;
// the sorted allowed ids of a line, from "allowed" or its complement "not_allowed"
const allowedOf = (r) => {
  if (r.allowed) return r.allowed;
  const out = [];
  const not = r.not_allowed;
  for (let id = 0, j = 0; id < N; id++) {
    if (j < not.length && not[j] === id) j++;
    else out.push(id);
  }
  return out;
};
// x \ y for sorted arrays
const minus = (x, y) => {
  const out = [];
  let j = 0;
  for (const v of x) {
    while (j < y.length && y[j] < v) j++;
    if (j >= y.length || y[j] !== v) out.push(v);
  }
  return out;
};

const sum = { cases: cases.length, same: 0, explained: 0, unexplained: 0, okDiff: 0, endDiff: 0,
              onlyL8: 0, onlyXg: 0, xgBadUtf8: 0, invalid: 0 };
for (let i = 0; i < cases.length; i++) {
  const a = l8[i];
  const b = xg[i];
  if (!b.ok) sum.invalid++;
  const prefix = Buffer.concat(cases[i].map((id) => tokBytes[id] || Buffer.alloc(0)));
  const badUtf8 = !utf8PrefixOk(prefix);
  const shadow = badUtf8 || hasChar(prefix, anyQuirk);
  const probs = [];
  let unexplained = 0;
  if (a.ok !== b.ok) { sum.okDiff++; probs.push(`ok: llama8 ${a.ok}, xgrammar ${b.ok}`); if (!shadow) unexplained++; }
  if (a.can_end !== b.can_end) { sum.endDiff++; probs.push(`can_end: llama8 ${a.can_end}, xgrammar ${b.can_end}`); if (!shadow) unexplained++; }
  let onlyA = [];
  let onlyB = [];
  if (a.n_allowed !== b.n_allowed || JSON.stringify(a.allowed ?? a.not_allowed) !== JSON.stringify(b.allowed ?? b.not_allowed)) {
    if (a.not_allowed && b.not_allowed) {
      onlyA = minus(b.not_allowed, a.not_allowed);
      onlyB = minus(a.not_allowed, b.not_allowed);
    } else {
      const A = allowedOf(a);
      const B = allowedOf(b);
      onlyA = minus(A, B);
      onlyB = minus(B, A);
    }
  }
  sum.onlyL8 += onlyA.length;
  sum.onlyXg += onlyB.length;
  for (const id of onlyB) {
    if (!utf8PrefixOk(Buffer.concat([prefix, tokBytes[id] || Buffer.alloc(0)]))) sum.xgBadUtf8++;
  }
  const unA = shadow ? [] : onlyA.filter((id) => !hasChar(tokBytes[id], quirks.refused));
  const unB = shadow ? [] : onlyB.filter((id) => !hasChar(tokBytes[id], quirks.allowed) &&
    utf8PrefixOk(Buffer.concat([prefix, tokBytes[id] || Buffer.alloc(0)])));
  unexplained += unA.length + unB.length;
  if (!probs.length && !onlyA.length && !onlyB.length) { sum.same++; continue; }
  if (unexplained) sum.unexplained++;
  else sum.explained++;
  const tag = unexplained ? 'UNEXPLAINED'
    : badUtf8 ? 'explained (the prefix is ill-formed UTF-8, which xgrammar allowed)'
    : shadow ? 'explained (the prefix went through an xgrammar negated-class bug)'
    : 'explained (xgrammar negated-class bug, or ill-formed UTF-8 xgrammar allows)';
  console.log(`case ${i} ${JSON.stringify(cases[i])}: ${tag}`);
  console.log(`  prefix bytes ${esc(prefix)}`);
  for (const p of probs) console.log(`  ${p}`);
  if (onlyA.length) console.log(`  only llama8 allows ${onlyA.length} (${unA.length} unexplained): ${(unA.length ? unA : onlyA).slice(0, maxShow).map(show).join(' ')}`);
  if (onlyB.length) console.log(`  only xgrammar allows ${onlyB.length} (${unB.length} unexplained): ${(unB.length ? unB : onlyB).slice(0, maxShow).map(show).join(' ')}`);
}
const q = [...quirks.refused].map((c) => 'U+' + c.toString(16).toUpperCase().padStart(4, '0'));
const qa = [...quirks.allowed].map((c) => 'U+' + c.toString(16).toUpperCase().padStart(4, '0'));
console.log(`SUMMARY ${gbnfPath}: ${sum.cases} cases (${sum.invalid} invalid prefixes), ${sum.same} identical, ` +
            `${sum.explained} differ explained, ${sum.unexplained} differ unexplained; ok differs in ${sum.okDiff}, ` +
            `can_end in ${sum.endDiff}; ids only llama8 allows ${sum.onlyL8}, only xgrammar ${sum.onlyXg} ` +
            `(${sum.xgBadUtf8} of them making the output ill-formed UTF-8)` +
            (q.length || qa.length ? `; xgrammar negated-class bug: wrongly refuses ${q.join(' ') || 'nothing'}, wrongly allows ${qa.slice(0, 8).join(' ')}` : ''));
process.exit(sum.unexplained ? 1 : 0);
