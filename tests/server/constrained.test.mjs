// Constrained decoding through `dsv4 serve` on the random-weight tiny model with the real DeepSeek vocabulary:
// every response_format json_object / json_schema answer ends with "stop" within max_tokens and parses and
// matches its schema (streamed or not, requests with different schemas decoding side by side); every forced
// tool call (OpenAI required / named, Anthropic any / tool) parses into calls whose arguments match the tool's
// schema and never shows markup in a stream; an unsupported schema is a 400 naming the keyword and the field,
// and a max_tokens below the shortest answer the grammar allows a 400 naming max_tokens and the minimum.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { DSML, client, request, startServer, stopServer } from './harness.mjs';

let server;
let openai;
let anthropic;
let model;

before(async () => {
  server = await startServer(['--ctx', '1024', '--parallel', '4']);
  openai = client(server);
  anthropic = new Anthropic({ baseURL: server.base, apiKey: 'unused', maxRetries: 0, timeout: 300_000 });
  model = (await openai.models.list()).data[0].id;
});

after(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) await stopServer(server);
});

const user = (content) => [{ role: 'user', content }];

const recordSchema = {
  type: 'object',
  properties: { ok: { type: 'boolean' }, n: { type: 'integer' }, color: { enum: ['red', 'green', 'blue'] } },
  required: ['ok', 'n', 'color'],
  additionalProperties: false,
};
const listSchema = { type: 'array', items: { type: ['integer', 'null'] }, maxItems: 3 };

function checkRecord(v) {
  assert.deepEqual(Object.keys(v), ['ok', 'n', 'color']);
  assert.equal(typeof v.ok, 'boolean');
  assert.ok(Number.isInteger(v.n));
  assert.ok(['red', 'green', 'blue'].includes(v.color));
}
function checkList(v) {
  assert.ok(Array.isArray(v) && v.length <= 3);
  for (const x of v) assert.ok(x === null || Number.isInteger(x));
}

const weather = [{
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: { days: { type: 'integer' }, unit: { enum: ['c', 'f'] }, hourly: { type: 'boolean' } },
      required: ['days', 'unit'],
    },
  },
}];
function checkWeatherArgs(args) {
  assert.ok(Number.isInteger(args.days));
  assert.ok(['c', 'f'].includes(args.unit));
  if ('hourly' in args) assert.equal(typeof args.hourly, 'boolean');
}

async function streamed(params) {
  const stream = await openai.chat.completions.create({ model, stream: true, ...params });
  let content = '';
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? '';
    for (const t of c.delta.tool_calls ?? []) calls.push(t);
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, finish, calls };
}

test('response_format: json_schema and json_object answers parse and validate, side by side', async () => {
  const jobs = [];
  for (let seed = 0; seed < 8; ++seed) {
    const schema = seed % 2 ? listSchema : recordSchema;
    jobs.push(openai.chat.completions.create({
      model, messages: user('Answer in JSON.'), max_tokens: 96, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } },
    }).then((r) => ({ seed, r })));
  }
  for (const { seed, r } of await Promise.all(jobs)) {
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop');
    (seed % 2 ? checkList : checkRecord)(JSON.parse(c.message.content));
  }

  // json_object: random weights rarely close a free-form string by themselves, but the mask keeps room for the
  // rest of the object and EOS within max_tokens, so every answer ends as an object.
  for (let seed = 0; seed < 4; ++seed) {
    const s = await streamed({ messages: user('JSON please.'), max_tokens: 32, seed, response_format: { type: 'json_object' } });
    assert.equal(s.finish, 'stop', JSON.stringify(s.content));
    const v = JSON.parse(s.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
  }
});

test('tools: forced calls parse into validating arguments and streams show no markup', async () => {
  let calls = 0;
  for (let seed = 0; seed < 6; ++seed) {
    const tool_choice = seed % 2 ? 'required' : { type: 'function', function: { name: 'get_weather' } };
    const r = await openai.chat.completions.create({ model, messages: user('Weather?'), tools: weather, tool_choice, max_tokens: 128, seed });
    const c = r.choices[0];
    assert.ok(!(c.message.content ?? '').includes(DSML));
    assert.equal(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) {
      assert.equal(call.function.name, 'get_weather');
      checkWeatherArgs(JSON.parse(call.function.arguments));
    }
    ++calls;
  }
  assert.equal(calls, 6);

  const s = await streamed({ messages: user('Weather?'), tools: weather, tool_choice: 'required', max_tokens: 128, seed: 1 });
  assert.equal(s.content, '');
  assert.equal(s.finish, 'tool_calls');
  checkWeatherArgs(JSON.parse(s.calls[0].function.arguments));

  // Anthropic tool_choice any: a tool_use block whose input matches the schema.
  const m = await anthropic.messages.create({
    model, max_tokens: 128, messages: user('Weather?'), tool_choice: { type: 'any' },
    tools: [{ name: 'get_weather', input_schema: weather[0].function.parameters }],
  });
  assert.equal(m.stop_reason, 'tool_use');
  checkWeatherArgs(m.content.find((b) => b.type === 'tool_use').input);
  for (const b of m.content) if (b.type === 'text') assert.ok(!b.text.includes(DSML));
});

test('an unsupported schema is a 400 naming the keyword and the field', async () => {
  const r = await request(server, 'POST', '/v1/chat/completions', {
    body: {
      model, messages: user('x'), max_tokens: 4,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'number', multipleOf: 3 } } },
    },
  });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'response_format.json_schema.schema');
  assert.equal(r.json.error.code, 'unsupported_schema');
  assert.match(r.json.error.message, /'multipleOf' is not supported/);
  const t = await request(server, 'POST', '/v1/chat/completions', {
    body: {
      model, messages: user('x'), max_tokens: 4, tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'integer', multipleOf: 2 } } } } }],
    },
  });
  assert.equal(t.status, 400);
  assert.equal(t.json.error.param, 'tools[0].function.parameters');
  assert.match(t.json.error.message, /'multipleOf'/);
  assert.equal((await request(server, 'GET', '/health')).status, 200);
});

test('a max_tokens below the shortest constrained answer is a 400 naming max_tokens and the minimum', async () => {
  const r = await request(server, 'POST', '/v1/chat/completions', {
    body: { model, messages: user('Weather?'), tools: weather, tool_choice: 'required', max_tokens: 4 },
  });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'max_tokens');
  assert.match(r.json.error.message, /max_tokens is 4, but the shortest answer the forced tool call allows needs at least (\d+) tokens/);
  const need = Number(r.json.error.message.match(/at least (\d+) tokens/)[1]);
  // At the minimum the call is made, and ends parsed.
  const ok = await openai.chat.completions.create({ model, messages: user('Weather?'), tools: weather, tool_choice: 'required', max_tokens: need, seed: 3 });
  assert.equal(ok.choices[0].finish_reason, 'tool_calls');
  checkWeatherArgs(JSON.parse(ok.choices[0].message.tool_calls[0].function.arguments));
  const j = await request(server, 'POST', '/v1/chat/completions', {
    body: { model, messages: user('x'), max_tokens: 3, response_format: { type: 'json_schema', json_schema: { name: 'r', schema: recordSchema } } },
  });
  assert.equal(j.status, 400);
  assert.match(j.json.error.message, /the shortest answer the response format allows needs at least \d+ tokens/);
});
