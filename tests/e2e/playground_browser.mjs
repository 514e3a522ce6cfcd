// playground_browser.mjs URL KEY SCREENSHOT — drives the playground in
// headless chromium (test_playground_browser.sh). Env: PUPPETEER_MODULE (the
// puppeteer-core folder), CHROMIUM (the browser). Prints ok / FAIL lines;
// exits 1 when a check failed.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const puppeteer = require(process.env.PUPPETEER_MODULE);
const [url, key, shot] = process.argv.slice(2);
let fails = 0;
const check = (name, cond, detail) => {
  console.log((cond ? 'ok   - ' : 'FAIL - ') + name + (cond || detail === undefined ? '' : '  ' + String(detail).slice(0, 400)));
  if (!cond) fails++;
};

// What the page fetched: each POST's request body and the response's text, teed (the test's own
// script, put in by the DevTools protocol, which the page's CSP does not govern).
const TEE = `(() => {
  const orig = window.fetch;
  window.__posts = [];
  window.fetch = async (input, init) => {
    const r = await orig(input, init);
    if (!init || init.method !== 'POST' || !r.body) return r;
    const [a, b] = r.body.tee();
    const e = { url: String(input), body: init.body, text: '', done: false };
    window.__posts.push(e);
    (async () => {
      const rd = b.getReader(), d = new TextDecoder();
      for (;;) { const { value, done } = await rd.read(); if (done) break; e.text += d.decode(value, { stream: true }); }
      e.done = true;
    })();
    return new Response(a, { status: r.status, statusText: r.statusText, headers: r.headers });
  };
})();`;

// The provenance tokens of an SSE text, and the text of its deltas.
function parseSse(text) {
  const tokens = [];
  let content = '';
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const o = JSON.parse(line.slice(6));
    for (const c of o.choices || []) {
      content += (c.delta ? c.delta.content : c.text) || '';
      if (c.provenance) tokens.push(...c.provenance.tokens);
    }
  }
  return { tokens, content };
}

// The (text, source) runs the page should show for those tokens: their texts cut to the content.
function expectedSpans(tokens, content) {
  const out = [];
  let left = content.length;
  for (const t of tokens) {
    if (left <= 0) break;
    const piece = t.text.slice(0, left);
    left -= piece.length;
    if (piece) out.push([piece, t.source]);
  }
  return out;
}

async function api(path, body) {
  const r = await fetch(url + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key },
    body: JSON.stringify(body),
  });
  return r.json();
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const page = await browser.newPage();
await page.setViewport({ width: 1360, height: 900 });
const errors = [];
page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
// the page's first look at /v1/models gets the 401 that makes it ask for the key: the browser logs that
page.on('console', (m) => {
  if (m.type() === 'error' && !/status of 401/.test(m.text())) errors.push('console: ' + m.text());
});
await page.evaluateOnNewDocument(TEE);

const set = async (sel, value) => page.$eval(sel, (e, v) => { e.value = v; }, value);
const wait = (fn, arg) => page.waitForFunction(fn, { timeout: 120000, polling: 100 }, arg);

// Sends what the form holds and waits for the pane(s) to finish; returns what the page shows and got.
async function send(panes = ['pane-a']) {
  const before = await page.evaluate(() => window.__posts.length);
  await page.evaluate(() => { for (const id of ['pane-a', 'pane-b']) delete document.getElementById(id).dataset.done; });
  await page.click('#send');
  await wait((ids) => ids.every((id) => document.getElementById(id).dataset.done === '1') &&
    !document.getElementById('send').disabled, panes);
  await wait((n) => window.__posts.length >= n && window.__posts.every((p) => p.done), before + panes.length);
  return page.evaluate((before, panes) => panes.map((id, i) => {
    const pane = document.getElementById(id);
    return {
      text: pane.querySelector('.text').textContent,
      spans: [...pane.querySelectorAll('.text span.tok')].map((s) => [s.textContent, s.dataset.source]),
      bars: pane.querySelectorAll('.strip .bar').length,
      post: window.__posts[before + i],
    };
  }), before, panes);
}

function checkRun(name, got) {
  const sse = parseSse(got.post.text);
  check(name + ': the page shows the streamed text', got.text === sse.content && got.text.length > 0, JSON.stringify([got.text, sse.content]));
  const want = expectedSpans(sse.tokens, sse.content);
  check(name + ': the token colours are the provenance the page received',
    JSON.stringify(got.spans) === JSON.stringify(want), JSON.stringify([got.spans.slice(0, 6), want.slice(0, 6)]));
  check(name + ': a strip bar per step', got.bars > 0);
  return sse;
}

// The API's answer for the request the page sent (non-streamed): the same text.
async function sameAsApi(name, got) {
  const body = JSON.parse(got.post.body);
  delete body.stream;
  delete body.stream_options;
  const path = body.messages ? '/v1/chat/completions' : '/v1/completions';
  const j = await api(path, body);
  const c = j.choices && j.choices[0];
  const text = c ? (c.message ? c.message.content : c.text) : null;
  check(name + ': the text equals the API\'s for the same request', text === got.text, JSON.stringify([text, got.text]));
}

try {
  // --- the key ---------------------------------------------------------------
  await page.goto(url + '/', { waitUntil: 'networkidle0' });
  await wait(() => !document.getElementById('keyform').hidden);
  check('the page asks for the API key', true);
  await page.type('#apikey', key);
  await page.click('#keyform button');
  await wait(() => document.body.dataset.ready === '1');
  const models = await page.$$eval('#model option', (os) => os.map((o) => o.value));
  check('with the key, the server\'s models are listed', models.includes('tinycode-16m'), models);
  const stored = await page.evaluate(() => [localStorage.length, sessionStorage.length, document.cookie,
    document.documentElement.outerHTML.length]);
  const html = await page.content();
  check('the key is kept in memory only (no storage, no cookie, not in the page)',
    stored[0] === 0 && stored[1] === 0 && stored[2] === '' && !html.includes(key), stored);

  // --- completion, side by side, greedy ---------------------------------------
  await page.click('#tab-completion');
  await set('#prompt', 'def fibonacci(n):');
  await set('#max_tokens', '64');
  await set('#temperature', '0');
  // a fixed draft length: drafts are verified every step whatever the adaptive choice would make of a busy
  // machine (the page's num_draft setting)
  await set('#num_draft', '4');
  await page.$eval('#sbs', (e) => { e.checked = true; });
  let [a, b] = await send(['pane-a', 'pane-b']);
  check('num_draft is sent', JSON.parse(a.post.body).speculative.num_draft === 4, a.post.body);
  const sa = checkRun('completion (speculative)', a);
  checkRun('completion (plain)', b);
  // (whether the drafter's span or the verifier's n-gram fallback supplied a step's drafts depends on timing;
  // the labels themselves are checked exactly against the fake verifier in test_playground_http.sh)
  check('the speculative run has accepted-draft tokens', sa.tokens.some((t) => t.source !== 'verifier'),
    JSON.stringify(sa.tokens.map((t) => t.source)));
  check('side by side, greedy: identical texts', a.text === b.text, JSON.stringify([a.text, b.text]));
  check('side by side: the page says so', await page.evaluate(() => document.body.dataset.compared) === 'same');
  check('side by side: plain ran with speculation off', JSON.parse(b.post.body).speculative.enabled === false);
  await sameAsApi('completion', a);
  await page.screenshot({ path: shot, fullPage: true });

  // --- sampled, side by side: the same seed, verify "match" --------------------
  await set('#temperature', '0.8');
  await set('#seed', '7');
  [a, b] = await send(['pane-a', 'pane-b']);
  check('side by side, sampled with a seed: identical texts', a.text === b.text && a.text.length > 0, JSON.stringify([a.text, b.text]));
  check('side by side, sampled: verified with match', JSON.parse(a.post.body).speculative.verify === 'match');
  await sameAsApi('sampled completion', a);
  await set('#seed', '');
  await set('#temperature', '0');
  await page.$eval('#sbs', (e) => { e.checked = false; });

  // --- chat, two turns ----------------------------------------------------------
  await page.click('#tab-chat');
  await set('#prompt', 'Write a Python function that adds two numbers.');
  [a] = await send();
  checkRun('chat', a);
  await sameAsApi('chat', a);
  await set('#prompt', 'Now make it subtract.');
  const [a2] = await send();
  checkRun('chat, second turn', a2);
  const hist = JSON.parse(a2.post.body).messages;
  check('the second turn sends the conversation', hist.length === 3 && hist[1].role === 'assistant' && hist[1].content === a.text,
    JSON.stringify(hist));
  check('the first turn is in the history', await page.$$eval('#history .msg', (m) => m.length) === 2);
  await sameAsApi('chat, second turn', a2);

  // --- output that is HTML: text, nothing runs ----------------------------------
  const payload = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>';
  for (const bypass of [false, true]) {
    const how = bypass ? ' (CSP bypassed)' : '';
    await page.setBypassCSP(bypass);
    await page.goto(url + '/playground', { waitUntil: 'networkidle0' });
    await page.type('#apikey', key);
    await page.click('#keyform button');
    await wait(() => document.body.dataset.ready === '1');
    await page.click('#tab-completion');
    await set('#prompt', 'html = ');
    await set('#max_tokens', '64');
    await set('#temperature', '0');
    await page.$eval('details:nth-of-type(3)', (d) => { d.open = true; });
    await page.select('#sokind', 'choice');
    await set('#sotext', payload);
    [a] = await send();
    check('HTML output' + how + ': shown as its text', a.text === payload, JSON.stringify(a.text));
    const ran = await page.evaluate(() => [typeof window.__xss, document.querySelectorAll('#output img, #output script').length]);
    check('HTML output' + how + ': nothing ran, no element made', ran[0] === 'undefined' && ran[1] === 0, JSON.stringify(ran));
    checkRun('HTML output' + how, a);
  }
  check('no error in the console or the page', errors.length === 0, errors.join(' | '));
} catch (e) {
  check('the browser session ran through', false, e.stack || e);
} finally {
  await browser.close();
}
process.exit(fails ? 1 : 0);
