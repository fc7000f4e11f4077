// The APIs coding agents speak, end to end against `dsv4 serve` on the random-weight tiny model with the real
// DeepSeek vocabulary: the Anthropic Messages API through the official @anthropic-ai/sdk (create, stream,
// tools, thinking round trip, stop_sequences, count_tokens, x-api-key, errors) and the OpenAI Responses API
// through the official openai client (create, stream, input items, tools, reasoning); malformed bodies for
// each endpoint get a 4xx in that API's error shape and the server stays healthy. Generations stay short.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { DSML, client, request, startServer, stopServer } from './harness.mjs';

const CTX = 1024;
const KEY = 'test-key-34';
let server;
let anthropic;
let openai;

before(async () => {
  // Served as `dsv4`: every request's `model` must name a served id (the SDK calls below send it).
  server = await startServer(['--ctx', String(CTX), '--parallel', '2', '--api-key', KEY, '--alias', 'dsv4']);
  anthropic = new Anthropic({ baseURL: server.base, apiKey: KEY, maxRetries: 0, timeout: 300_000 });
  openai = client(server, KEY);
});

after(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) await stopServer(server);
});

const auth = { Authorization: `Bearer ${KEY}` };
const user = (content) => [{ role: 'user', content }];
const tools = [{
  name: 'get_weather',
  description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];

function noMarkup(text, what) {
  assert.ok(!String(text).includes(DSML), `DSML markup leaked into ${what}: ${JSON.stringify(text)}`);
}

function checkMessage(m, maxTokens) {
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), m.stop_reason);
  assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 0);
  assert.ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= maxTokens, `output_tokens ${m.usage.output_tokens}`);
  for (const b of m.content) {
    assert.ok(['text', 'thinking', 'tool_use'].includes(b.type), b.type);
    if (b.type === 'text') noMarkup(b.text, 'text');
    if (b.type === 'thinking') noMarkup(b.thinking, 'thinking');
    if (b.type === 'tool_use') {
      assert.match(b.id, /^toolu_/);
      assert.equal(typeof b.input, 'object');
      noMarkup(JSON.stringify(b.input), 'tool input');
    }
  }
}

// Streams through the SDK's helper; returns the raw events and the message it assembled.
async function streamMessage(params) {
  const stream = anthropic.messages.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  return { events, message: await stream.finalMessage() };
}

// The Anthropic event grammar: message_start, (block start, deltas, stop)*, message_delta, message_stop, with
// pings anywhere; deltas match their block's type.
function checkEventSequence(events) {
  const types = events.map((e) => e.type).filter((t) => t !== 'ping');
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  let open = null;
  let next = 0;
  const deltaType = { text: 'text_delta', thinking: 'thinking_delta', tool_use: 'input_json_delta' };
  for (const e of events) {
    if (e.type === 'content_block_start') {
      assert.equal(open, null, 'a block opened inside another');
      assert.equal(e.index, next++);
      open = e.content_block.type;
    } else if (e.type === 'content_block_delta') {
      assert.notEqual(open, null);
      assert.equal(e.delta.type, deltaType[open]);
    } else if (e.type === 'content_block_stop') {
      assert.notEqual(open, null);
      open = null;
    }
  }
  assert.equal(open, null, 'a block was left open');
}

test('messages: create', async () => {
  const m = await anthropic.messages.create({
    model: 'dsv4', max_tokens: 8, system: 'You are terse.', messages: user('Hello there!'),
    metadata: { user_id: 'u1' }, temperature: 0.7, top_p: 0.9, top_k: 40,
  });
  checkMessage(m, 8);
  assert.equal(m.model, 'dsv4');
  assert.equal(m.stop_reason, m.usage.output_tokens === 8 ? 'max_tokens' : 'end_turn');
  assert.equal(m.stop_sequence, null);
  // The same prompt again: its prefix comes from the prefix cache and is reported as such.
  const again = await anthropic.messages.create({ model: 'dsv4', max_tokens: 2, system: 'You are terse.', messages: user('Hello there!') });
  assert.equal(again.usage.input_tokens + again.usage.cache_read_input_tokens,
    m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('messages: stream', async () => {
  const { events, message } = await streamMessage({ model: 'dsv4', max_tokens: 6, messages: user('Count to three.') });
  checkEventSequence(events);
  checkMessage(message, 6);
  const text = events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text ?? '').join('');
  assert.equal(text, message.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
  const start = events.find((e) => e.type === 'message_start');
  assert.equal(start.message.id, message.id);
  assert.ok(start.message.usage.input_tokens > 0);
});

test('messages: thinking round trip', async () => {
  const params = { model: 'dsv4', max_tokens: 8, thinking: { type: 'enabled', budget_tokens: 4 } };
  const { events, message } = await streamMessage({ ...params, messages: user('Think, then answer: 2+2?') });
  checkEventSequence(events);
  checkMessage(message, 8);
  // Thinking mode: the answer opens inside the reasoning.
  assert.equal(message.content[0]?.type, 'thinking');
  assert.ok(message.content[0].thinking.length > 0);
  // The thinking blocks go back in the next turn, as agents send them.
  const next = await anthropic.messages.create({
    ...params,
    messages: [...user('Think, then answer: 2+2?'), { role: 'assistant', content: message.content }, ...user('And 3+3?')],
  });
  checkMessage(next, 8);
  // Disabled thinking: no thinking block.
  const plain = await anthropic.messages.create({ model: 'dsv4', max_tokens: 4, thinking: { type: 'disabled' }, messages: user('Hi') });
  assert.ok(plain.content.every((b) => b.type !== 'thinking'));
});

test('messages: tools, every tool_choice, and a tool_use / tool_result conversation', async () => {
  // 64 tokens: room for a forced call's shortest form (a max_tokens below it is a 400).
  for (const tool_choice of [undefined, { type: 'auto' }, { type: 'any' }, { type: 'tool', name: 'get_weather' }, { type: 'none' }]) {
    const m = await anthropic.messages.create({ model: 'dsv4', max_tokens: 64, tools, tool_choice, messages: user('Weather in Paris?') });
    checkMessage(m, 64);
    if (m.content.some((b) => b.type === 'tool_use')) assert.equal(m.stop_reason, 'tool_use');
    const s = await streamMessage({ model: 'dsv4', max_tokens: 64, tools, tool_choice, messages: user('Weather in Rome?') });
    checkEventSequence(s.events);
    checkMessage(s.message, 64);
  }
  const conversation = [
    ...user('Weather in Paris and Rome?'),
    { role: 'assistant', content: [
      { type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Rome' } },
    ] },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temp": 21}' },
      { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'unavailable' }], is_error: true },
      { type: 'text', text: 'Summarise.' },
    ] },
  ];
  const m = await anthropic.messages.create({ model: 'dsv4', max_tokens: 6, tools, messages: conversation });
  checkMessage(m, 6);
  // tool_choice none leaves the tools out of the prompt; any forces the call's opening into it.
  const count = async (extra) => (await anthropic.messages.countTokens({ model: 'dsv4', messages: user('x'), ...extra })).input_tokens;
  const bare = await count({});
  const withTools = await count({ tools });
  assert.ok(withTools > bare, `tools did not reach the prompt (${withTools} vs ${bare})`);
  assert.equal(await count({ tools, tool_choice: { type: 'none' } }), bare);
});

test('messages: stop_sequences end the answer with stop_reason stop_sequence', async () => {
  // Greedy decoding gives the same text twice; a stop string taken from it then ends the second run there.
  const params = { model: 'dsv4', max_tokens: 12, temperature: 0, messages: user('Tell me a story.') };
  const first = await anthropic.messages.create(params);
  const text = first.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  // The last visible character of the first answer (whole code points: no half of a surrogate pair).
  const stop = Array.from(text).filter((ch) => ch.trim().length > 0).at(-1);
  assert.ok(stop, `no usable stop string in ${JSON.stringify(text)}`);
  const second = await anthropic.messages.create({ ...params, stop_sequences: [stop, 'never-appears-zz'] });
  assert.equal(second.stop_reason, 'stop_sequence');
  assert.equal(second.stop_sequence, stop);
  const streamed = await streamMessage({ ...params, stop_sequences: [stop] });
  assert.equal(streamed.message.stop_reason, 'stop_sequence');
  assert.equal(streamed.message.stop_sequence, stop);
});

test('messages: count_tokens matches the prompt create reports', async () => {
  const params = { model: 'dsv4', system: [{ type: 'text', text: 'Be brief.' }], messages: user('How many tokens is this?') };
  const c = await anthropic.messages.countTokens(params);
  assert.ok(c.input_tokens > 0);
  const m = await anthropic.messages.create({ ...params, max_tokens: 2 });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.input_tokens);
});

test('messages: the key is honoured as x-api-key and as a bearer token', async () => {
  const wrong = new Anthropic({ baseURL: server.base, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model: 'dsv4', max_tokens: 2, messages: user('hi') }), (e) => {
    assert.equal(e.status, 401);
    assert.equal(e.error?.type, 'error');
    assert.equal(e.error?.error?.type, 'authentication_error');
    return true;
  });
  const none = await request(server, 'POST', '/v1/messages', { body: { max_tokens: 2, messages: user('hi') } });
  assert.equal(none.status, 401);
  assert.equal(none.json.error.type, 'authentication_error');
  const bearer = await request(server, 'POST', '/v1/messages', { body: { max_tokens: 2, messages: user('hi') }, headers: auth });
  assert.equal(bearer.status, 200);
  const xkey = await request(server, 'POST', '/v1/chat/completions', {
    body: { messages: user('hi'), max_tokens: 2 }, headers: { 'x-api-key': KEY },
  });
  assert.equal(xkey.status, 200);
  // The scheme name is case-insensitive on every API; a wrong key in either header is refused in the
  // endpoint's own error shape.
  const lower = await request(server, 'POST', '/v1/messages', {
    body: { max_tokens: 2, messages: user('hi') }, headers: { Authorization: `bearer ${KEY}` },
  });
  assert.equal(lower.status, 200, lower.text);
  const wrongCount = await request(server, 'POST', '/v1/messages/count_tokens', {
    body: { messages: user('hi') }, headers: { 'x-api-key': 'wrong' },
  });
  assert.equal(wrongCount.status, 401);
  assert.equal(wrongCount.json.type, 'error');
  assert.equal(wrongCount.json.error.type, 'authentication_error');
  const wrongResponses = await request(server, 'POST', '/v1/responses', {
    body: { input: 'hi', max_output_tokens: 2 }, headers: { 'x-api-key': 'wrong' },
  });
  assert.equal(wrongResponses.status, 401);
  assert.equal(wrongResponses.json.error.code, 'invalid_api_key');
  const keyResponses = await request(server, 'POST', '/v1/responses', {
    body: { input: 'hi', max_output_tokens: 2 }, headers: { 'x-api-key': KEY },
  });
  assert.equal(keyResponses.status, 200, keyResponses.text);
});

test('messages: SDK errors carry Anthropic error types', async () => {
  await assert.rejects(anthropic.messages.create({ model: 'dsv4', messages: user('hi') }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  await assert.rejects(anthropic.messages.create({ model: 'dsv4', max_tokens: CTX * 4, messages: user('hi') }), (e) => e.status === 400);
});

function checkResponse(r, maxTokens) {
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens >= 1 && r.usage.output_tokens <= maxTokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  for (const item of r.output) {
    assert.ok(['message', 'reasoning', 'function_call'].includes(item.type), item.type);
    if (item.type === 'message') for (const p of item.content) noMarkup(p.text, 'output_text');
    if (item.type === 'reasoning') for (const p of item.content) noMarkup(p.text, 'reasoning');
    if (item.type === 'function_call') {
      JSON.parse(item.arguments);
      noMarkup(item.arguments, 'function arguments');
    }
  }
}

const fnTools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: tools[0].input_schema }];

test('responses: create', async () => {
  const r = await openai.responses.create({ model: 'dsv4', input: 'Hello there!', instructions: 'Be brief.', max_output_tokens: 8 });
  checkResponse(r, 8);
  assert.equal(r.model, 'dsv4');
  assert.equal(r.instructions, 'Be brief.');
  const text = r.output.filter((i) => i.type === 'message').flatMap((i) => i.content).map((p) => p.text).join('');
  assert.equal(r.output_text, text);
});

test('responses: stream (raw events and the SDK stream helper)', async () => {
  const stream = await openai.responses.create({ model: 'dsv4', input: 'Count to three.', max_output_tokens: 6, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  assert.equal(events[0].type, 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type), events.at(-1).type);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const final = events.at(-1).response;
  checkResponse(final, 6);
  const delta = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const text = final.output.filter((i) => i.type === 'message').flatMap((i) => i.content).map((p) => p.text).join('');
  assert.equal(delta, text);
  // The SDK's helper rebuilds the response from the events and checks that each event fits.
  const helper = openai.responses.stream({ model: 'dsv4', input: 'Think first.', max_output_tokens: 6, reasoning: { effort: 'high' } });
  const types = new Set();
  let reasoning = '';
  let last;
  for await (const ev of helper) {
    types.add(ev.type);
    if (ev.type === 'response.reasoning_text.delta') reasoning += ev.delta;
    last = ev;
  }
  // (The helper takes its final object only from response.completed; a cut answer ends in response.incomplete.)
  const built = last.type === 'response.completed' ? await helper.finalResponse() : last.response;
  checkResponse(built, 6);
  assert.equal(built.output[0]?.type, 'reasoning');
  assert.equal(built.output[0].content[0].text, reasoning);
  assert.ok(types.has('response.reasoning_text.delta'), [...types].join(' '));
});

test('responses: input items, function tools and every tool_choice', async () => {
  const input = [
    { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
    { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'I should call the tool.' }] },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp": 21}' },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'It is 21 degrees.' }] },
    { role: 'user', content: 'And tomorrow?' },
  ];
  // 64 tokens: room for a forced call's shortest form (a max_output_tokens below it is a 400).
  for (const tool_choice of [undefined, 'auto', 'required', 'none', { type: 'function', name: 'get_weather' }]) {
    const r = await openai.responses.create({ model: 'dsv4', input, tools: fnTools, tool_choice, max_output_tokens: 64 });
    checkResponse(r, 64);
    const s = await openai.responses.create({ model: 'dsv4', input, tools: fnTools, tool_choice, max_output_tokens: 64, stream: true });
    let last;
    for await (const ev of s) last = ev;
    checkResponse(last.response, 64);
  }
});

test('malformed bodies get 4xx in each API\'s error shape and the server stays healthy', async () => {
  const ok = { model: 'dsv4', max_tokens: 4, messages: user('hi') };
  const anthropicCases = [
    ['invalid JSON', '/v1/messages', '{"model": "dsv4", "messages": [', 400],
    ['array body', '/v1/messages', '[1]', 400],
    ['no max_tokens', '/v1/messages', { model: 'dsv4', messages: user('hi') }, 400],
    ['no messages', '/v1/messages', { model: 'dsv4', max_tokens: 4 }, 400],
    ['empty messages', '/v1/messages', { ...ok, messages: [] }, 400],
    ['bad role', '/v1/messages', { ...ok, messages: [{ role: 'system', content: 'x' }] }, 400],
    ['image block', '/v1/messages', { ...ok, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 400],
    ['tool_result without id', '/v1/messages', { ...ok, messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] }, 400],
    ['tool without schema', '/v1/messages', { ...ok, tools: [{ name: 'f' }] }, 400],
    ['server tool', '/v1/messages', { ...ok, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 400],
    ['tool_choice unknown tool', '/v1/messages', { ...ok, tools, tool_choice: { type: 'tool', name: 'nope' } }, 400],
    ['tool_choice bad type', '/v1/messages', { ...ok, tool_choice: { type: 'sometimes' } }, 400],
    ['thinking without budget', '/v1/messages', { ...ok, thinking: { type: 'enabled' } }, 400],
    ['thinking budget >= max_tokens', '/v1/messages', { ...ok, thinking: { type: 'enabled', budget_tokens: 4 } }, 400],
    ['temperature above 1', '/v1/messages', { ...ok, temperature: 1.5 }, 400],
    ['stop_sequences a string', '/v1/messages', { ...ok, stop_sequences: 'x' }, 400],
    ['metadata a string', '/v1/messages', { ...ok, metadata: 'x' }, 400],
    ['assistant prefill', '/v1/messages', { ...ok, messages: [...user('hi'), { role: 'assistant', content: 'Sure' }] }, 400],
    ['count_tokens no messages', '/v1/messages/count_tokens', { model: 'dsv4' }, 400],
    ['count_tokens invalid JSON', '/v1/messages/count_tokens', '{', 400],
    ['GET on messages', '/v1/messages', undefined, 405, 'GET'],
  ];
  for (const [name, path, body, status, method = 'POST'] of anthropicCases) {
    const r = await request(server, method, path, { body, headers: auth });
    assert.equal(r.status, status, `${name}: status ${r.status} ${r.text.slice(0, 200)}`);
    assert.equal(r.json?.type, 'error', `${name}: ${r.text.slice(0, 200)}`);
    assert.equal(typeof r.json.error?.type, 'string', name);
    assert.ok(r.json.error.message.length > 0, name);
  }
  const rok = { model: 'dsv4', input: 'hi', max_output_tokens: 4 };
  const responsesCases = [
    ['invalid JSON', '{"input": ', 400],
    ['no input', { model: 'dsv4' }, 400, 'input'],
    ['input a number', { model: 'dsv4', input: 3 }, 400, 'input'],
    ['empty input', { model: 'dsv4', input: [] }, 400, 'input'],
    ['unknown item', { model: 'dsv4', input: [{ type: 'computer_call' }] }, 400, 'input[0].type'],
    ['image part', { model: 'dsv4', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 400],
    ['function_call without call_id', { model: 'dsv4', input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 400],
    ['function_call_output without output', { model: 'dsv4', input: [{ type: 'function_call_output', call_id: 'c' }] }, 400],
    ['built-in tool', { ...rok, tools: [{ type: 'web_search' }] }, 400, 'tools[0].type'],
    ['bad tool_choice', { ...rok, tools: fnTools, tool_choice: { type: 'function' } }, 400],
    ['previous_response_id', { ...rok, previous_response_id: 'resp_1' }, 400, 'previous_response_id'],
    ['bad temperature', { ...rok, temperature: 9 }, 400, 'temperature'],
    ['bad max_output_tokens', { ...rok, max_output_tokens: 0 }, 400],
    ['bad reasoning', { ...rok, reasoning: 'high' }, 400, 'reasoning'],
  ];
  for (const [name, body, status, param] of responsesCases) {
    const r = await request(server, 'POST', '/v1/responses', { body, headers: auth });
    assert.equal(r.status, status, `${name}: status ${r.status} ${r.text.slice(0, 200)}`);
    const e = r.json?.error;
    assert.ok(e, `${name}: no error object in ${r.text.slice(0, 200)}`);
    assert.equal(typeof e.message, 'string', name);
    assert.ok('param' in e && 'code' in e && 'type' in e, name);
    if (param) assert.equal(e.param, param, `${name}: param ${e.param}`);
  }
  await assert.rejects(openai.responses.create({ model: 'dsv4', input: [] }), (e) => e.status === 400);
  const h = await request(server, 'GET', '/health');
  assert.equal(h.status, 200);
  const after = await openai.responses.create({ model: 'dsv4', input: 'still there?', max_output_tokens: 2 });
  checkResponse(after, 2);
});
