// test_openai.js - llama8-openai through the official openai npm client, as
// a Node program would use it, against a real llama8d (tiny synthetic
// model, real tokenizer). Run by test_openai.sh with:
//   OAI_URL (http://127.0.0.1:PORT/v1), OAI_KEY, OPENAI_MODULE (the
//   installed package's directory), LLAMA8CTL, LLAMA8_SOCKET.
// Every check that fails is printed; the exit status is the count (0: pass).
'use strict';
const { execFileSync } = require('child_process');
const OpenAI = require(process.env.OPENAI_MODULE);

const ctl = process.env.LLAMA8CTL;
const sock = process.env.LLAMA8_SOCKET;
const client = new OpenAI({ baseURL: process.env.OAI_URL, apiKey: process.env.OAI_KEY,
                            maxRetries: 0 });
let failed = 0;
function check(ok, what, ...detail) {
  if (!ok) {
    failed++;
    console.log('FAIL:', what, ...detail.map((d) => JSON.stringify(d)));
  }
}

const msgs = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hi' }];

// llama8ctl generate's reply to the same conversation: the reference (it
// prints the reply and one newline).
function ctlReply(messages, maxNew, extra = []) {
  const out = execFileSync(ctl, ['generate', '--socket', sock, '--max-new', String(maxNew),
                                 '--messages', ...extra], { input: JSON.stringify(messages) });
  return out.toString('utf8').replace(/\n$/, '');
}
function ctlRaw(text, maxNew) {
  return execFileSync(ctl, ['generate', '--socket', sock, '--max-new', String(maxNew), '--raw',
                            text]).toString('utf8').replace(/\n$/, '');
}
function ctlStatus() {
  return JSON.parse(execFileSync(ctl, ['status', '--socket', sock, '--json']).toString());
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true,
                                                         stream_options: { include_usage: true } });
  const r = { text: '', finish: null, usage: null, chunks: 0, calls: {} };
  for await (const c of stream) {
    r.chunks++;
    if (c.usage)
      r.usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.content)
        r.text += ch.delta.content;
      for (const tc of ch.delta.tool_calls || []) {
        const k = r.calls[tc.index] || (r.calls[tc.index] = { name: '', arguments: '' });
        if (tc.function.name)
          k.name += tc.function.name;
        if (tc.function.arguments)
          k.arguments += tc.function.arguments;
      }
      if (ch.finish_reason)
        r.finish = ch.finish_reason;
    }
  }
  return r;
}

async function testModels() {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  check(ids.length === 1 && ids[0] === ctlStatus().model, 'models.list is the daemon model',
        ids);
}

async function testChatEqualsCtl() {
  const want = ctlReply(msgs, 24);
  const r = await client.chat.completions.create({ model: 'llama8', messages: msgs,
                                                   temperature: 0, max_tokens: 24 });
  const c = r.choices[0];
  check(c.message.content === want, 'greedy chat equals llama8ctl generate', c.message.content,
        want);
  check(r.object === 'chat.completion' && c.message.role === 'assistant', 'chat shape', r);
  // The random model ends by eos only by chance: 24 tokens, or fewer and stop.
  check((c.finish_reason === 'length' && r.usage.completion_tokens === 24) ||
        (c.finish_reason === 'stop' && r.usage.completion_tokens < 24), 'finish and usage',
        c.finish_reason, r.usage);
  const s = await streamChat({ model: 'llama8', messages: msgs, temperature: 0, max_tokens: 24 });
  check(s.text === want, 'streamed chat equals llama8ctl generate', s.text, want);
  check(s.finish === c.finish_reason && s.chunks > 3, 'stream finish and chunks', s.finish,
        s.chunks);
  check(s.usage && s.usage.completion_tokens === r.usage.completion_tokens &&
        s.usage.prompt_tokens === r.usage.prompt_tokens, 'stream usage', s.usage, r.usage);
}

async function testCompletions() {
  const want = ctlRaw('Once upon a time', 16);
  const r = await client.completions.create({ model: 'llama8', prompt: 'Once upon a time',
                                              temperature: 0, max_tokens: 16 });
  check(r.choices[0].text === want, 'completion equals llama8ctl generate --raw',
        r.choices[0].text, want);
  check(r.object === 'text_completion', 'completion shape', r.object);
  const stream = await client.completions.create({ model: 'llama8', prompt: 'Once upon a time',
                                                   temperature: 0, max_tokens: 16, stream: true });
  let text = '';
  for await (const c of stream)
    text += c.choices.length ? c.choices[0].text : '';
  check(text === want, 'streamed completion equals llama8ctl', text, want);
}

async function testSeed() {
  const ask = (seed) => client.chat.completions.create({ model: 'llama8', messages: msgs,
      temperature: 1, seed, max_tokens: 24 }).then((r) => r.choices[0].message.content);
  const a = await ask(7), b = await ask(7), c = await ask(8);
  check(a === b, 'the same seed gives the same text', a, b);
  check(a !== c, 'another seed another text', a, c);
}

async function testStopAndLength() {
  const full = ctlReply(msgs, 40);
  // A stop string from the middle of the greedy reply: the reply ends
  // before its first occurrence.
  const stop = [...full].slice(12, 15).join('');
  const want = full.slice(0, full.indexOf(stop));
  const r = await client.chat.completions.create({ model: 'llama8', messages: msgs,
                                                   temperature: 0, max_tokens: 40, stop: [stop] });
  check(r.choices[0].message.content === want && r.choices[0].finish_reason === 'stop',
        'stop string', stop, r.choices[0], want);
  const s = await streamChat({ model: 'llama8', messages: msgs, temperature: 0, max_tokens: 40,
                               stop });
  check(s.text === want && s.finish === 'stop', 'streamed stop string', s.text, want);
  const l = await client.chat.completions.create({ model: 'llama8', messages: msgs,
                                                   temperature: 0, max_tokens: 3, logprobs: true });
  const tok = JSON.parse(execFileSync(ctl, ['tokenize', '--chat', '--messages', '--json',
                                            '--tokenizer', process.env.LLAMA8_MODEL],
                                      { input: JSON.stringify(msgs) }).toString());
  check(l.choices[0].finish_reason === 'length' && l.usage.completion_tokens === 3 &&
        l.usage.prompt_tokens === tok.length &&
        l.usage.total_tokens === tok.length + 3, 'max_tokens: length and usage', l.usage,
        tok.length);
  const lp = l.choices[0].logprobs && l.choices[0].logprobs.content;
  check(lp && lp.length === 3 && lp.every((e) => e.logprob <= 0 && Array.isArray(e.bytes)),
        'logprobs of each token', lp);
}

async function testJsonSchema() {
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
                   additionalProperties: false };
  let whole = 0;
  for (const seed of [undefined, 1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'llama8', messages: [{ role: 'user', content: 'Is it ok?' }], max_tokens: 64,
      temperature: seed === undefined ? 0 : 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } } });
    const c = r.choices[0];
    if (c.finish_reason !== 'stop')
      continue;   // whitespace the grammar allows ran past max_tokens
    whole++;
    let v = null;
    try { v = JSON.parse(c.message.content); } catch (e) { v = e.message; }
    check(v && typeof v === 'object' && Object.keys(v).length === 1 && typeof v.ok === 'boolean',
          'json_schema reply validates', c.message.content);
  }
  check(whole > 0, 'some json_schema reply ended within max_tokens');
  console.log(`json_schema: ${whole} of 4 replies ended within max_tokens, each valid`);
}

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather',
    parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] },
                                                celsius: { type: 'boolean' } },
                  required: ['city', 'celsius'], additionalProperties: false } } },
  { type: 'function', function: { name: 'lights', parameters: { type: 'object',
    properties: { on: { type: 'boolean' } }, required: ['on'], additionalProperties: false } } },
];
function validCall(name, args) {
  if (name === 'get_weather')
    return Object.keys(args).length === 2 && ['Paris', 'Rome'].includes(args.city) &&
           typeof args.celsius === 'boolean';
  return name === 'lights' && Object.keys(args).length === 1 && typeof args.on === 'boolean';
}

async function testTools() {
  const ask = { model: 'llama8', messages: [{ role: 'user', content: 'Weather in Paris?' }],
                tools, tool_choice: 'required', max_tokens: 160, temperature: 1 };
  let calls = 0, streamed = null;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const r = await client.chat.completions.create({ ...ask, seed });
    const c = r.choices[0];
    if (c.finish_reason === 'length')
      continue;
    check(c.finish_reason === 'tool_calls' && c.message.content === null &&
          c.message.tool_calls.length === 1, 'a tool_calls reply', c);
    const tc = c.message.tool_calls[0];
    let args = null;
    try { args = JSON.parse(tc.function.arguments); } catch (e) { args = null; }
    check(args && validCall(tc.function.name, args) && tc.type === 'function' &&
          /^call_/.test(tc.id), 'its arguments parse and fit the tool', tc);
    calls++;
    if (!streamed) {
      const s = await streamChat({ ...ask, seed });
      streamed = true;
      check(s.finish === 'tool_calls' && s.calls[0] && s.calls[0].name === tc.function.name &&
            s.calls[0].arguments === tc.function.arguments, 'streamed tool call', s, tc);
      // The call and its result as the next turns: a reply follows.
      const next = await client.chat.completions.create({ model: 'llama8', max_tokens: 8,
        temperature: 0, tools, messages: [...ask.messages, c.message,
          { role: 'tool', tool_call_id: tc.id, content: '{"temperature": 21}' }] });
      check(['stop', 'length', 'tool_calls'].includes(next.choices[0].finish_reason),
            'a reply after the tool result', next.choices[0]);
    }
  }
  check(calls > 0, 'some tool call ended within max_tokens');
  console.log(`tools: ${calls} of 6 seeds made a whole call, each valid`);
}

async function testErrors() {
  const cases = [
    [{ n: 2 }, 400, 'n'], [{ frequency_penalty: 1 }, 400, 'frequency_penalty'],
    [{ top_logprobs: 3, logprobs: true }, 400, 'top_logprobs'], [{ temperature: 'x' }, 400, 'temperature'],
  ];
  for (const [extra, status, param] of cases) {
    try {
      await client.chat.completions.create({ model: 'llama8', messages: msgs, ...extra });
      check(false, 'refused', extra);
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.status === status && e.param === param &&
            e.message.includes(param), 'the error names the field', extra, e.status, e.param,
            e.message);
    }
  }
  const wrong = new OpenAI({ baseURL: process.env.OAI_URL, apiKey: 'wrong', maxRetries: 0 });
  try {
    await wrong.models.list();
    check(false, 'a wrong key is refused');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'wrong key: 401', e.status);
  }
}

// A client that goes away mid-stream cancels its request: the daemon runs
// nothing after, well before 2000 tokens could have been made.
async function testDisconnect() {
  const before = ctlStatus();
  const stream = await client.chat.completions.create({ model: 'llama8', messages: msgs,
    temperature: 1, seed: 3, max_tokens: 2000, stream: true });
  let n = 0, running = 0;
  for await (const c of stream) {
    if (++n === 3)
      running = ctlStatus().requests_running;
    if (n === 6)
      break;   // ends the iteration: the client aborts the HTTP request
  }
  let st = null;
  for (let i = 0; i < 100; i++) {
    st = ctlStatus();
    if (st.requests_running === 0 && st.requests_waiting === 0)
      break;
    await sleep(50);
  }
  check(running === 1, 'the stream ran on the daemon', running);
  check(st.requests_running === 0 && st.requests_waiting === 0, 'no request left after the '
        + 'client went away', st.requests_running, st.requests_waiting);
  check(st.tokens_generated - before.tokens_generated < 2000, 'cancelled early',
        st.tokens_generated - before.tokens_generated);
}

(async () => {
  for (const t of [testModels, testChatEqualsCtl, testCompletions, testSeed, testStopAndLength,
                   testJsonSchema, testTools, testErrors, testDisconnect]) {
    try {
      await t();
    } catch (e) {
      check(false, t.name + ' threw', String(e && e.stack));
    }
  }
  console.log(failed ? `openai npm client: ${failed} checks failed` : 'openai npm client: all passed');
  process.exit(failed ? 1 : 0);
})();
