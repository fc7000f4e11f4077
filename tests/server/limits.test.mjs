// `dsv4 serve` limits on a deliberately small server (one slot, a queue of one, an API key): bearer-token
// auth (401 JSON), a full queue answered with 429 while accepted requests still finish, and a graceful
// SIGINT shutdown in the middle of a stream (the stream ends, the process exits 0).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { client, request, startServer, stopServer } from './harness.mjs';

const KEY = 'sk-test-secret';
let server;

before(async () => {
  server = await startServer(['--ctx', '512', '--parallel', '1', '--max-queue', '1', '--api-key', KEY, '--alias', 'x']);
});

after(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) await stopServer(server);
});

const body = (extra = {}) => ({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });

test('bearer-token auth', async () => {
  const missing = await request(server, 'POST', '/v1/chat/completions', { body: body() });
  assert.equal(missing.status, 401);
  assert.equal(missing.json.error.code, 'invalid_api_key');
  const wrong = await request(server, 'GET', '/v1/models', { headers: { Authorization: 'Bearer nope' } });
  assert.equal(wrong.status, 401);
  assert.equal(typeof wrong.json.error.message, 'string');
  await assert.rejects(client(server, 'wrong-key').models.list(), (e) => e.status === 401);
  // The right key works through the SDK; /health and /metrics stay open for probes.
  // The scheme name is case-insensitive (RFC 9110): curl users and some SDKs send it in lower case.
  const lower = await request(server, 'GET', '/v1/models', { headers: { Authorization: `bearer ${KEY}` } });
  assert.equal(lower.status, 200, lower.text);
  assert.deepEqual(lower.json.data.map((m) => m.id), ['x']);
  const r = await client(server, KEY).chat.completions.create(body());
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal((await request(server, 'GET', '/health')).status, 200);
  assert.equal((await request(server, 'GET', '/metrics')).status, 200);
});

test('a full queue answers 429 and the accepted requests still finish', async () => {
  const auth = { Authorization: `Bearer ${KEY}` };
  // One runs, one waits, the rest find the queue full. Long enough generations keep the slot busy.
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) =>
    request(server, 'POST', '/v1/chat/completions', { body: body({ max_tokens: 48, seed: i }), headers: auth })));
  const statuses = results.map((r) => r.status).sort();
  assert.ok(statuses.filter((s) => s === 429).length >= 1, `statuses ${statuses}`);
  assert.ok(statuses.filter((s) => s === 200).length >= 2, `statuses ${statuses}`);
  assert.ok(statuses.every((s) => s === 200 || s === 429), `statuses ${statuses}`);
  for (const r of results) {
    if (r.status === 429) {
      assert.equal(r.json.error.type, 'rate_limit_error');
      assert.equal(r.json.error.code, 'queue_full');
    } else {
      assert.equal(r.json.object, 'chat.completion');
    }
  }
  const after = await client(server, KEY).chat.completions.create(body());
  assert.equal(after.object, 'chat.completion');
});

test('SIGINT mid-stream: the stream ends and the server exits 0', async () => {
  const payload = JSON.stringify(body({ max_tokens: 400, stream: true }));
  const streamEnded = new Promise((resolve) => {
    const req = http.request(new URL('/v1/chat/completions', server.base), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload), Authorization: `Bearer ${KEY}` },
    }, (res) => {
      let seen = '';
      let signalled = false;
      res.on('data', (d) => {
        seen += d;
        if (!signalled && (seen.match(/^data: /gm) ?? []).length >= 2) {
          signalled = true;
          server.child.kill('SIGINT');
        }
      });
      res.on('end', () => resolve(seen));
      res.on('error', () => resolve(seen));
    });
    req.on('error', () => resolve(''));
    req.end(payload);
  });
  const seen = await streamEnded;
  const status = await server.exited;
  assert.deepEqual(status, { code: 0, signal: null }, server.stderr);
  // The client was told: the stream ends with an error event (cancelled by the shutdown) and [DONE].
  assert.match(seen, /shutting down/, seen.slice(-300));
  assert.ok(seen.endsWith('data: [DONE]\n\n'), seen.slice(-300));
});
