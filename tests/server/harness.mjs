// Shared pieces of the `dsv4 serve` end-to-end tests: start a server on a free loopback port (--port 0; the
// port is read from its "listening on" line), stop it with a signal and report its exit code, raw HTTP
// helpers, /metrics parsing and the server's resident memory from /proc.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import OpenAI from 'openai';

export const BIN = process.env.DSV4_BIN;
export const MODEL = process.env.DSV4_MODEL;
if (!BIN || !MODEL) throw new Error('set DSV4_BIN (the dsv4 binary) and DSV4_MODEL (a model GGUF)');

// Starts `dsv4 serve` and resolves once it listens. Its stderr is kept (and shown when a test fails). `env`: extra
// environment variables for the server.
export async function startServer(extraArgs = [], { startupMs = 90_000, env = {} } = {}) {
  const args = ['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', '0', '--threads', '2', ...extraArgs];
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const server = { child, stderr: '', stdout: '', base: null, exited: null };
  server.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  child.stderr.on('data', (d) => { server.stderr += d; });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in ${startupMs} ms:\n${server.stderr}`)), startupMs);
    child.stdout.on('data', (d) => {
      server.stdout += d;
      const m = /listening on (http:\/\/[^\s]+)/.exec(server.stdout);
      if (m && !server.base) {
        server.base = m[1];
        clearTimeout(timer);
        resolve();
      }
    });
    server.exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`server exited early (code ${code}, signal ${signal}):\n${server.stderr}`));
    });
  });
  return server;
}

// Sends `signal` and resolves with the exit status (rejects if the process hangs).
export async function stopServer(server, signal = 'SIGTERM', timeoutMs = 30_000) {
  server.child.kill(signal);
  let timer;
  const hung = new Promise((_, reject) => {
    timer = setTimeout(() => {
      server.child.kill('SIGKILL');
      reject(new Error(`server ignored ${signal} for ${timeoutMs} ms:\n${server.stderr}`));
    }, timeoutMs);
  });
  try {
    return await Promise.race([server.exited, hung]);
  } finally {
    clearTimeout(timer);
  }
}

export function client(server, apiKey = 'unused') {
  return new OpenAI({ baseURL: `${server.base}/v1`, apiKey, maxRetries: 0, timeout: 300_000 });
}

// Raw HTTP: resolves { status, headers, text, json } (json null when the body is not JSON).
export function request(server, method, path, { body, headers = {} } = {}) {
  const url = new URL(path, server.base);
  const payload = body === undefined ? undefined : (typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method,
      headers: { ...(payload !== undefined ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {}), ...headers },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    if (payload !== undefined) req.write(payload);
    req.end();
  });
}

// Parses Prometheus text into { 'name{labels}': value }.
export async function metrics(server) {
  const r = await request(server, 'GET', '/metrics');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  const out = {};
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export async function waitFor(predicate, { timeoutMs = 20_000, intervalMs = 100, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// Anonymous resident memory of a process in KiB (heap, stacks, anonymous maps): what a leak grows. VmRSS also
// counts the mapped model file's pages, which a server faults in as it first reads them (every new token id's
// embedding row, say), up to the file's size.
export function anonKiB(pid) {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no RssAnon for pid ${pid}`);
  return Number(m[1]);
}

// Parses an SSE body into its data payloads ('[DONE]' kept as a string).
export function sseEvents(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
    if (!data) continue;
    events.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return events;
}

export const DSML = '｜DSML｜';
