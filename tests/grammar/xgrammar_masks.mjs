// xgrammar_masks.mjs - token masks from an implementation llama8 did not write: xgrammar's
// WebAssembly build (npm @mlc-ai/web-xgrammar), the reference tests/grammar/mask_dump.c
// (llama8's matcher.c) is compared against by xgrammar_check.sh.
//
//   node xgrammar_masks.mjs GRAMMAR.gbnf TOKENIZER.json CASES.jsonl [--compact] [--specials-as-text]
//       one JSON line per case (a line `[ids...]` of CASES: a prefix of accepted ids):
//       {"case": i, "ok": bool, "n_allowed": k, "allowed": [sorted ids], "can_end": bool}
//       ok: whether every id was accepted; the mask is the one after the ids accepted before
//       the first refused one (llama8's accept leaves the matcher unchanged on a refusal).
//       --compact: when more than half the vocabulary is allowed, "not_allowed" (the sorted
//       complement) is printed instead of "allowed" (a JSON string's mask is ~125k ids).
//   node xgrammar_masks.mjs GRAMMAR.gbnf TOKENIZER.json --walk N --seed S [--depth D] [--invalid K]
//       prints a cases file: N seeded random walks through xgrammar's own masks (so every
//       prefix is valid), each prefix of each walk up to D (30) tokens, deduplicated, then K
//       (N / 4) invalid prefixes (a valid one followed by a refused id), the empty prefix first.
//       Only tokens that keep the output well-formed UTF-8 are walked (see walk).
//       --masks-out FILE: also the masks of those cases, as the first form with --compact
//       prints them (from the walk's own masks: one pass instead of two).
//   node xgrammar_masks.mjs --convert GRAMMAR.gbnf
//       prints the grammar as given to xgrammar (see toXgrammarEbnf).
//
// The package is found at $XGRAMMAR_DIR (default /tmp/llama8-xgr/node_modules/@mlc-ai/web-xgrammar).
// Its lib/index.js is a UMD bundle with the wasm inlined as base64, but package.json says
// "type": "module", so neither import nor require takes it as CommonJS: it is compiled here
// as a CommonJS module with node:module's Module#_compile.
//
// Special tokens. xgrammar's TokenizerInfo (cpp/tokenizer_info.cc) knows only two kinds:
// stop tokens (stopTokenIds, or by default any whose text is one of a fixed list, which for
// Llama 3 finds <|end_of_text|> and <|eot_id|> but not <|eom_id|>) and "special" tokens,
// which are exactly those whose decoded text is the empty string. Every other added token
// (<|begin_of_text|>, <|start_header_id|>, <|reserved_special_token_N|>, ...) is text: its
// ByteLevel-decoded bytes are its literal name, so xgrammar allows <|python_tag|> wherever
// the grammar allows the bytes "<|python_tag|>" (inside any JSON string, say). llama8 never
// allows a special token. So by default this script gives xgrammar the empty string for the
// special tokens that are not stop tokens (which makes them xgrammar-special: never in a mask,
// refused by acceptToken); --specials-as-text gives xgrammar their text instead, xgrammar's
// behaviour with a vocabulary taken from Hugging Face as is. Stop tokens: the three end ids
// are passed as stopTokenIds; xgrammar then sets them in the mask exactly when the grammar
// can end (SetTokenBitmask's can_reach_end), which is llama8's rule; "can_end" here is
// whether <|eot_id|> is in xgrammar's mask (the web API has no isCompleted()).
import Module from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// <|eot_id|> <|eom_id|> <|end_of_text|>: Llama 3.1's generation_config.json eos_token_id, by
// number (the committed tokenizer.json has Llama 3.0's names: 128008 is
// <|reserved_special_token_4|> there); mask_dump.c uses the same three.
const END_IDS = [128009, 128008, 128001];

function die(msg) {
  process.stderr.write(`xgrammar_masks: ${msg}\n`);
  process.exit(2);
}

function loadXgrammar() {
  const dir = process.env.XGRAMMAR_DIR || '/tmp/llama8-xgr/node_modules/@mlc-ai/web-xgrammar';
  const file = path.join(dir, 'lib', 'index.js');
  if (!fs.existsSync(file)) die(`no ${file} (npm install @mlc-ai/web-xgrammar; set XGRAMMAR_DIR)`);
  const m = new Module(file);
  m.filename = file;
  m.paths = Module._nodeModulePaths(dir);
  m._compile(fs.readFileSync(file, 'utf8'), file);
  return m.exports;
}

// ---- GBNF (grammar.h's dialect) -> xgrammar EBNF ------------------------------------------
// Differences handled (cpp/grammar_parser.cc, cpp/support/encoding.h):
//  - an empty alternative (`ws ::= | " "`, `( | x)`) is an error in xgrammar ("Expect
//    element"): it gets an explicit "".
//  - string escapes: xgrammar has no \[ \] \- in strings; its \x takes any number of hex
//    digits (GBNF: exactly two). Every literal and class is re-emitted with its characters
//    decoded: printable ASCII as is (less \ and " in strings, \ ] - ^ [ in classes), the
//    rest as \uXXXX / \UXXXXXXXX.
//  - `.` (any character) does not exist in xgrammar: it becomes [^] (which xgrammar reads as
//    every character).
//  - x{,n} does not exist (the lower bound is required): it becomes x{0,n}.
// Names, ::=, | ( ) * + ? {m} {m,} {m,n}, comments and "" are the same. xgrammar also wants
// each rule name at the start of a line, as GBNF files have them.
function parseEscape(s, i) {
  // s[i] == '\\'; returns [codepoint, next index]
  const c = s[i + 1];
  const simple = { n: 10, r: 13, t: 9, '\\': 92, '"': 34, "'": 39, '[': 91, ']': 93, '-': 45 };
  if (c in simple) return [simple[c], i + 2];
  const hex = { x: 2, u: 4, U: 8 }[c];
  if (hex) {
    const h = s.slice(i + 2, i + 2 + hex);
    if (h.length !== hex || !/^[0-9A-Fa-f]+$/.test(h)) throw new Error(`bad escape at offset ${i}`);
    return [parseInt(h, 16), i + 2 + hex];
  }
  throw new Error(`unknown escape \\${c} at offset ${i}`);
}
function emitChar(cp, inClass) {
  const ch = String.fromCodePoint(cp);
  if (cp >= 0x20 && cp < 0x7f && !(inClass ? '\\]-^[' : '\\"').includes(ch)) return ch;
  if (cp <= 0xffff) return '\\u' + cp.toString(16).toUpperCase().padStart(4, '0');
  return '\\U' + cp.toString(16).toUpperCase().padStart(8, '0');
}
// Non-ASCII in classes: @mlc-ai/web-xgrammar 0.1.27 (the only release on npm; built from the
// tree of about 2025-12-15, cpp/grammar_functor.cc GrammarFSMBuilderImpl::CharacterClass and
// BuildNegativeCharacterClass) casts each class bound to uint8_t:
//  - a positive class with a member above U+007F matches the low bytes of its code points as
//    single bytes ([α-ω] = bytes B1..C9); fixed upstream in xgrammar#491 (2026-01-03), not
//    released to npm. Worked around here: such a class becomes an alternation of its ASCII
//    part and each non-ASCII character as a literal (literals are right), up to
//    MAX_EXPANDED characters (xgrammar takes ~23 s to compile 21k alternatives).
//  - a negated class excludes only those members whose bounds, cast to a byte, are <= 127
//    (the cast, not the code point: [^\u2028] excludes '(' 0x28) and never a non-ASCII one
//    ([^»] allows »). Still so on master. No workaround (EBNF cannot subtract): the class is
//    kept, and negQuirks records what xgrammar gets wrong so the comparison can name it.
const MAX_EXPANDED = 4096;
function emitClass(neg, ranges, opts, quirks) {
  const emitRanges = (rs) =>
    rs.map(([a, b]) => (a === b ? emitChar(a, true) : emitChar(a, true) + '-' + emitChar(b, true))).join('');
  const raw = '[' + (neg ? '^' : '') + emitRanges(ranges) + ']';
  if (ranges.every(([, b]) => b <= 0x7f) || opts.raw) return raw;
  if (neg) {
    // xgrammar's set: ASCII minus the byte-cast bounds, plus every non-ASCII character
    const inClass = (cp) => ranges.some(([a, b]) => cp >= a && cp <= b);
    const xgExcl = new Set();
    for (const [a, b] of ranges) {
      const lo = a & 0xff;
      const hi = (b & 0xff) > 128 ? 127 : b & 0xff;
      for (let j = lo; j <= hi; j++) xgExcl.add(j);
    }
    for (const j of xgExcl) if (!inClass(j)) quirks.refused.add(j);
    for (const [a, b] of ranges) {
      for (let cp = Math.max(a, 0x80); cp <= b && quirks.allowed.size < 65536; cp++) quirks.allowed.add(cp);
    }
    return raw;
  }
  const ascii = [];
  const lits = [];
  for (const [a, b] of ranges) {
    if (a <= 0x7f) ascii.push([a, Math.min(b, 0x7f)]);
    for (let cp = Math.max(a, 0x80); cp <= b; cp++) {
      if (lits.length >= MAX_EXPANDED) {
        throw new Error(`class ${raw} has over ${MAX_EXPANDED} non-ASCII characters, which ` +
                        'xgrammar 0.1.27 cannot match as a class (see emitClass)');
      }
      lits.push('"' + emitChar(cp, false) + '"');
    }
  }
  if (ascii.length) lits.unshift('[' + emitRanges(ascii) + ']');
  return '(' + lits.join(' | ') + ')';
}
// GBNF text -> tokens {k: kind, t: text as xgrammar takes it}; kinds: ws (whitespace and
// comments, kept), elem (a literal, class, `.` or rule reference), name (a rule reference
// that is followed by ::=, fixed afterwards), assign, op (| ( ) * + ? {..}).
function lexGbnf(s, opts, quirks) {
  const toks = [];
  let i = 0;
  const nextChar = () => {
    let cp;
    if (s[i] === '\\') [cp, i] = parseEscape(s, i);
    else { cp = s.codePointAt(i); i += cp > 0xffff ? 2 : 1; }
    return cp;
  };
  while (i < s.length) {
    const c = s[i];
    const j0 = i;
    if (c === '#') {
      const j = s.indexOf('\n', i);
      i = j < 0 ? s.length : j;
      toks.push({ k: 'ws', t: s.slice(j0, i) });
    } else if (/\s/.test(c)) {
      while (i < s.length && /\s/.test(s[i])) i++;
      toks.push({ k: 'ws', t: s.slice(j0, i) });
    } else if (c === '"') {
      let lit = '"';
      i++;
      while (s[i] !== '"') {
        if (i >= s.length) throw new Error('unterminated string');
        lit += emitChar(nextChar(), false);
      }
      i++;
      toks.push({ k: 'elem', t: lit + '"' });
    } else if (c === '[') {
      i++;
      const neg = s[i] === '^';
      if (neg) i++;
      const ranges = [];
      while (s[i] !== ']') {
        if (i >= s.length) throw new Error('unterminated class');
        const a = nextChar();
        if (s[i] === '-' && s[i + 1] !== ']') {
          i++;
          ranges.push([a, nextChar()]);
        } else ranges.push([a, a]);
      }
      i++;
      toks.push({ k: 'elem', t: emitClass(neg, ranges, opts, quirks) });
    } else if (c === '.') {
      i++;
      toks.push({ k: 'elem', t: '[^]' }); // xgrammar's empty negated class: any character
    } else if (s.startsWith('::=', i)) {
      i += 3;
      toks.push({ k: 'assign', t: '::=' });
    } else if (/[A-Za-z0-9_-]/.test(c)) {
      while (i < s.length && /[A-Za-z0-9_-]/.test(s[i])) i++;
      toks.push({ k: 'elem', t: s.slice(j0, i) });
    } else if (c === '{') {
      const j = s.indexOf('}', i);
      if (j < 0) throw new Error('unterminated {');
      let rep = s.slice(i, j + 1).replace(/\s+/g, '');
      if (rep.startsWith('{,')) rep = '{0' + rep.slice(1);
      i = j + 1;
      toks.push({ k: 'op', t: rep });
    } else if ('|()*+?'.includes(c)) {
      i++;
      toks.push({ k: 'op', t: c });
    } else throw new Error(`unexpected ${JSON.stringify(c)} at offset ${i}`);
  }
  // a name followed by ::= starts a rule
  for (let a = 0; a < toks.length; a++) {
    if (toks[a].k !== 'assign') continue;
    let b = a - 1;
    while (b >= 0 && toks[b].k === 'ws') b--;
    if (b >= 0) toks[b].k = 'name';
  }
  return toks;
}
// quirks (out): {allowed, refused}: Sets of the code points xgrammar wrongly allows or
// refuses in this grammar's negated classes (see emitClass).
export function toXgrammarEbnf(s, opts = {}, quirks = { allowed: new Set(), refused: new Set() }) {
  const toks = lexGbnf(s, opts, quirks);
  let out = '';
  let open = false; // after ::= | ( : an alternative has begun and has no element yet
  for (const tk of toks) {
    if (tk.k === 'ws') { out += tk.t; continue; }
    const ends = tk.k === 'name' || tk.t === '|' || tk.t === ')';
    if (open && ends) out += '"" ';
    out += tk.t;
    open = tk.k === 'assign' || tk.t === '|' || tk.t === '(';
  }
  if (open) out += ' ""';
  return out;
}

// ---- the vocabulary -----------------------------------------------------------------------
// GPT-2's bytes_to_unicode, inverted: a byte-level token string back to its bytes.
const U2B = (() => {
  const bs = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = bs.slice();
  let k = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + k++); }
  const m = new Map();
  bs.forEach((b, i) => m.set(cs[i], b));
  return m;
})();
export function byteLevelBytes(s) {
  return Buffer.from([...s].map((c) => U2B.get(c.codePointAt(0))));
}

// Whether b is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF) up to a character its end may cut. Every string of a GBNF grammar's language is
// well-formed, so a token that makes the output not so is never right; xgrammar's negated
// classes allow some (see xgrammar_compare.mjs).
export function utf8PrefixOk(b) {
  for (let i = 0; i < b.length;) {
    const c = b[i];
    let n;
    let lo = 0x80;
    let hi = 0xbf;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c >= 0xe0 && c <= 0xef) { n = 2; if (c === 0xe0) lo = 0xa0; if (c === 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 3; if (c === 0xf0) lo = 0x90; if (c === 0xf4) hi = 0x8f; }
    else return false;
    for (let j = 1; j <= n; j++) {
      if (i + j >= b.length) return true; // cut at the end
      const d = b[i + j];
      if (j === 1 ? d < lo || d > hi : d < 0x80 || d > 0xbf) return false;
    }
    i += n + 1;
  }
  return true;
}

function loadVocab(tokPath, specialsAsText) {
  const t = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
  if (t.model?.type !== 'BPE') die('not a BPE tokenizer.json');
  const enc = [];
  const special = [];
  for (const [s, id] of Object.entries(t.model.vocab)) enc[id] = s;
  for (const a of t.added_tokens || []) {
    // The added tokens' content is raw text, not the byte-level alphabet; Llama 3's are all
    // printable ASCII, which ByteLevel maps to itself, so the content is its encoded form.
    enc[a.id] = a.content;
    if (a.special) special[a.id] = true;
  }
  const n = enc.length;
  for (let i = 0; i < n; i++) {
    if (enc[i] === undefined) enc[i] = ''; // an unused id: xgrammar-special, never allowed
    if (special[i] && !specialsAsText && !END_IDS.includes(i)) enc[i] = '';
  }
  return { enc, n };
}

// ---- the matcher --------------------------------------------------------------------------
async function setup(gbnfPath, tokPath, specialsAsText) {
  const xg = loadXgrammar();
  const { enc, n } = loadVocab(tokPath, specialsAsText);
  const info = await xg.TokenizerInfo.createTokenizerInfo(enc, 'byte_level', false, n, END_IDS);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  const ebnf = toXgrammarEbnf(fs.readFileSync(gbnfPath, 'utf8'));
  const compiled = await compiler.compileGrammar(ebnf, 'root');
  const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled, END_IDS);
  return { matcher, n, enc };
}

function maskIds(words, n) {
  const ids = [];
  for (let w = 0; w < words.length; w++) {
    let x = words[w] >>> 0;
    while (x) {
      const b = 31 - Math.clz32(x & -x);
      const id = w * 32 + b;
      if (id < n) ids.push(id);
      x &= x - 1;
    }
  }
  return ids; // sorted
}

// Accept ids from a reset matcher; stops at the first refused one (then rebuilds the state
// of the accepted prefix: xgrammar's AcceptToken is not documented to leave it unchanged).
function acceptPrefix(m, ids) {
  m.reset();
  let k = 0;
  for (; k < ids.length; k++) if (!m.acceptToken(ids[k])) break;
  if (k < ids.length) {
    m.reset();
    for (let j = 0; j < k; j++) m.acceptToken(ids[j]);
  }
  return k === ids.length;
}

async function stateOf(m, n, ids) {
  const ok = acceptPrefix(m, ids);
  if (m.isTerminated()) return { ok, allowed: [], canEnd: false }; // an end id was taken
  const allowed = maskIds(await m.getNextTokenBitmask(), n);
  const canEnd = allowed.includes(END_IDS[0]);
  return { ok, allowed, canEnd };
}

function formatCase(i, st, n, compact) {
  return `{"case":${i},` + formatState(st, n, compact);
}
function formatState(st, n, compact) {
  const k = st.allowed.length;
  let list;
  if (compact && 2 * k > n) {
    const not = [];
    let j = 0;
    for (let id = 0; id < n; id++) {
      if (j < k && st.allowed[j] === id) j++;
      else not.push(id);
    }
    list = `"not_allowed":[${not.join(',')}]`;
  } else list = `"allowed":[${st.allowed.join(',')}]`;
  return `"ok":${st.ok},"n_allowed":${k},${list},"can_end":${st.canEnd}}\n`;
}

// ---- the walk -----------------------------------------------------------------------------
function rng(seed) {
  // mulberry32: small, seeded, the same sequence on every Node
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The cases; with withMasks, also each case's line of output (--compact), from the masks the
// walk computed anyway, so that the check needs no second pass.
async function walk(m, n, enc, nWalks, seed, depth, nInvalid, withMasks) {
  const rand = rng(seed);
  const bytes = enc.map((s) => byteLevelBytes(s));
  const oneByte = [];
  for (let id = 0; id < n; id++) if (bytes[id].length === 1) oneByte.push(id);
  const bit = (w, id) => ((w[id >> 5] >>> (id & 31)) & 1) === 1;
  const lines = new Map(); // prefix key -> formatState line
  // The bytes of the output's last character if it is incomplete: all utf8PrefixOk needs
  // (the output before it is well-formed).
  const openTail = (b) => {
    for (let j = b.length - 1; j >= 0 && j >= b.length - 3; j--) {
      const c = b[j];
      if (c < 0x80) return b.subarray(b.length);
      if (c >= 0xc0) {
        const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        return b.length - j < need ? b.subarray(j) : b.subarray(b.length);
      }
    }
    return b.subarray(b.length);
  };
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const seen = new Set();
  const cases = [];
  const add = (ids) => {
    const key = ids.join(',');
    if (!seen.has(key)) { seen.add(key); cases.push(ids); }
  };
  add([]);
  const valid = [[]];
  for (let w = 0; w < nWalks; w++) {
    m.reset();
    const ids = [];
    let out = Buffer.alloc(0); // the output's bytes
    for (let d = 0; d < depth; d++) {
      const words = await m.getNextTokenBitmask();
      const mask = maskIds(words, n);
      const key = ids.join(',');
      if (withMasks && !lines.has(key)) {
        lines.set(key, formatState({ ok: true, allowed: mask, canEnd: mask.includes(END_IDS[0]) }, n, true));
      }
      // Not the end ids (a done matcher has no mask), and not a token that would make the
      // output ill-formed UTF-8 (xgrammar allows some, llama8 none: the walk would leave
      // the states both agree on).
      const tail = openTail(out);
      const fits = (id) => !END_IDS.includes(id) &&
        utf8PrefixOk(tail.length ? Buffer.concat([tail, bytes[id]]) : bytes[id]);
      // Half the steps pick among the one-byte tokens (the structure: quotes, brackets,
      // commas, digits), or most walks would stay inside the first string for ever. A
      // random pick that does not fit is drawn again (a mask can be 125k ids: filtering
      // it whole at every step was most of the time), then the whole mask is filtered.
      const inMask = new Set(mask.length < 4096 ? mask : []);
      const has = (id) => (mask.length < 4096 ? inMask.has(id) : bit(words, id));
      const short = oneByte.filter((id) => has(id) && fits(id));
      let id;
      if (short.length && rand() < 0.5) id = pick(short);
      for (let t = 0; t < 64 && id === undefined; t++) {
        const c = pick(mask);
        if (c !== undefined && fits(c)) id = c;
      }
      if (id === undefined) {
        const allowed = mask.filter(fits);
        if (allowed.length === 0) break;
        id = pick(allowed);
      }
      if (!m.acceptToken(id)) die(`xgrammar refused id ${id} its own mask allowed`);
      ids.push(id);
      out = Buffer.concat([out, bytes[id]]);
      add(ids.slice());
      valid.push(ids.slice());
    }
  }
  // Invalid prefixes: a valid one, then an id its mask refuses (an end id where the grammar
  // cannot end, a special token, or a text token), sometimes followed by one more id.
  const specials = [128000, 128006, 128010, 128255];
  for (let k = 0; k < nInvalid; k++) {
    const pre = pick(valid);
    acceptPrefix(m, pre);
    const allowed = new Set(maskIds(await m.getNextTokenBitmask(), n));
    let bad;
    const r = rand();
    if (r < 0.2) bad = END_IDS.find((id) => !allowed.has(id)) ?? pick(specials);
    else if (r < 0.35) bad = pick(specials);
    else {
      for (let t = 0; t < 1000 && bad === undefined; t++) {
        const id = Math.floor(rand() * 128000);
        if (!allowed.has(id)) bad = id;
      }
      if (bad === undefined) bad = pick(specials);
    }
    const ids = [...pre, bad];
    if (rand() < 0.3) ids.push(Math.floor(rand() * 128000));
    add(ids);
  }
  if (!withMasks) return { cases };
  const out = [];
  for (let i = 0; i < cases.length; i++) {
    let line = lines.get(cases[i].join(','));
    if (line === undefined) line = formatState(await stateOf(m, n, cases[i]), n, true);
    out.push(`{"case":${i},` + line);
  }
  return { cases, lines: out };
}

// ---- main ---------------------------------------------------------------------------------
async function main() {
  // The wasm's printf (xgrammar's [WARNING] lines) goes to console.log: keep stdout for data.
  console.log = (...a) => process.stderr.write(a.join(' ') + '\n');
  const argv = process.argv.slice(2);
  const flag = (name) => {
    const i = argv.indexOf(name);
    if (i < 0) return undefined;
    const v = argv[i + 1];
    argv.splice(i, 2);
    return v;
  };
  const bool = (name) => {
    const i = argv.indexOf(name);
    if (i < 0) return false;
    argv.splice(i, 1);
    return true;
  };
  const convert = flag('--convert');
  if (convert !== undefined) {
    process.stdout.write(toXgrammarEbnf(fs.readFileSync(convert, 'utf8')));
    return;
  }
  const nWalks = flag('--walk');
  const seed = Number(flag('--seed') ?? 1);
  const depth = Number(flag('--depth') ?? 30);
  const nInvalid = flag('--invalid');
  const masksOut = flag('--masks-out');
  const compact = bool('--compact');
  const specialsAsText = bool('--specials-as-text');
  if (argv.length !== (nWalks !== undefined ? 2 : 3)) {
    die('usage: GRAMMAR.gbnf TOKENIZER.json (CASES.jsonl [--compact] | --walk N --seed S ' +
        '[--depth D] [--invalid K] [--masks-out FILE]) [--specials-as-text] | --convert GRAMMAR.gbnf');
  }
  const { matcher, n, enc } = await setup(argv[0], argv[1], specialsAsText);
  const out = [];
  const flush = () => { process.stdout.write(out.join('')); out.length = 0; };
  if (nWalks !== undefined) {
    const nw = Number(nWalks);
    const r = await walk(matcher, n, enc, nw, seed, depth,
                         nInvalid !== undefined ? Number(nInvalid) : Math.ceil(nw / 4),
                         masksOut !== undefined);
    for (const c of r.cases) out.push(JSON.stringify(c) + '\n');
    flush();
    if (masksOut !== undefined) fs.writeFileSync(masksOut, r.lines.join(''));
    return;
  }
  const lines = fs.readFileSync(argv[2], 'utf8').split('\n').filter((l) => l.trim() !== '');
  for (let i = 0; i < lines.length; i++) {
    const ids = JSON.parse(lines[i]);
    if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x) && x >= 0)) {
      die(`${argv[2]}:${i + 1}: not an array of ids`);
    }
    out.push(formatCase(i, await stateOf(matcher, n, ids), n, compact));
    if (out.length >= 64) flush();
  }
  flush();
}

// run as a program, not when xgrammar_compare.mjs imports toXgrammarEbnf
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((e) => die(e?.stack || String(e)));
}
