// The chat page at GET / in a real headless browser (Debian's chromium, driven by playwright-core): it loads,
// lists the model, streams an answer, shows reasoning apart from the answer, and the stop button ends a long
// answer and frees the server's slot; the page's own requests pass the Host and Origin checks. Skipped, saying
// why, only when no chromium is installed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { metrics, request, startServer, stopServer, waitFor } from './harness.mjs';

const CHROMIUM = process.env.DSV4_CHROMIUM || '/usr/bin/chromium';
const skip = existsSync(CHROMIUM) ? false : `no chromium at ${CHROMIUM} (scripts/setup.sh installs Debian's chromium)`;
const CTX = 4096;
let server;
let browser;
let profile;

before(async () => {
  if (skip) return;
  server = await startServer(['--ctx', String(CTX), '--parallel', '1']);
  profile = mkdtempSync(join(tmpdir(), 'dsv4-chat-page-'));
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 60_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (server && server.child.exitCode === null && server.child.signalCode === null) await stopServer(server);
});

const last = (page) => page.locator('.msg.assistant').last();

async function send(page, text) {
  await page.fill('#input', text);
  await page.click('#send');
}

test('the page is served as HTML', { skip }, async () => {
  const r = await request(server, 'GET', '/');
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /text\/html/);
  assert.match(r.text, /<title>dsv4 chat<\/title>/);
});

test('chat page: load, send, streamed answer, reasoning, stop', { skip, timeout: 240_000 }, async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(server.base + '/');
  assert.equal(await page.title(), 'dsv4 chat');
  // The model list comes from the server's /v1/models.
  await page.locator('#model option').first().waitFor({ state: 'attached', timeout: 30_000 });
  const models = (await request(server, 'GET', '/v1/models')).json.data.map((m) => m.id);
  assert.deepEqual(await page.locator('#model option').allTextContents(), models);

  // A short answer streams in and finishes.
  await page.fill('#max_tokens', '6');
  await send(page, 'Hello!');
  await page.locator('.msg.assistant[data-state="done"]').first().waitFor({ timeout: 60_000 });
  assert.ok((await last(page).locator('.content').textContent()).length > 0, 'no answer text');
  assert.match(await last(page).locator('.status').textContent(), /finished: (length|stop)/);
  assert.equal(await page.locator('.msg.user').count(), 1);

  // Thinking mode: the reasoning shows in its own collapsible block, apart from the answer.
  await page.check('#thinking');
  await send(page, 'Think about it.');
  await page.locator('.msg.assistant[data-state="done"]').nth(1).waitFor({ timeout: 60_000 });
  const reasoning = last(page).locator('details.reasoning');
  assert.equal(await reasoning.count(), 1);
  assert.ok((await reasoning.locator('.text').textContent()).length > 0, 'no reasoning text');

  // A long answer: stop it while it streams; the page says so and the server frees the slot.
  await page.click('#clear');
  await page.uncheck('#thinking');
  await page.fill('#max_tokens', String(CTX - 64));
  await send(page, 'Write a very long story.');
  const streaming = page.locator('.msg.assistant[data-state="streaming"] .content');
  await streaming.waitFor({ timeout: 60_000 });
  await waitFor(async () => ((await streaming.textContent()) ?? '').length > 0, { timeoutMs: 60_000, what: 'streamed text' });
  assert.equal(await page.isDisabled('#stop'), false);
  await page.click('#stop');
  await page.locator('.msg.assistant[data-state="stopped"]').waitFor({ timeout: 30_000 });
  assert.equal(await last(page).locator('.status').textContent(), 'stopped');
  assert.equal(await page.isDisabled('#stop'), true);
  await waitFor(async () => (await metrics(server)).dsv4_requests_running === 0,
    { timeoutMs: 30_000, what: 'the stopped request to leave the engine' });
  assert.deepEqual(errors, []);
  await page.close();
});

test('the page\'s own requests pass the Host and Origin checks; a text/plain POST from it does not', { skip, timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  try {
    await page.goto(server.base + '/');
    // Same-origin fetches as the page makes them (Origin: this server, Content-Type: application/json), on
    // each chat API, and the simple text/plain POST another site's page could send without a preflight.
    const statuses = await page.evaluate(async () => {
      const post = async (path, body, type = 'application/json') =>
        (await fetch(path, { method: 'POST', headers: { 'Content-Type': type }, body: JSON.stringify(body) })).status;
      const messages = [{ role: 'user', content: 'hi' }];
      return [
        await post('/v1/chat/completions', { messages, max_tokens: 2 }),
        await post('/v1/messages', { messages, max_tokens: 2 }),
        await post('/v1/responses', { input: 'hi', max_output_tokens: 2 }),
        await post('/v1/chat/completions', { messages, max_tokens: 2 }, 'text/plain'),
      ];
    });
    assert.deepEqual(statuses, [200, 200, 200, 415]);
  } finally {
    await page.close();
  }
});
