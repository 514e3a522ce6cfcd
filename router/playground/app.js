// app.js — the specd playground (served by specd-router at / and /playground).
//
// Plain JavaScript, no library, no build step. Model output is only ever put
// into the page as text (textContent, text nodes), never as HTML. The API
// key, when the server asks for one, lives in this script's memory only and
// goes out as a Bearer header; nothing is stored in the browser.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const state = {
    key: null, // the API key (memory only)
    mode: 'chat',
    history: [], // chat: the conversation so far ({role, content})
    abort: null, // the running request's AbortController
    lastTurn: null, // chat: the turn shown in the panes, not yet in the history
  };

  // ------------------------------------------------------------ helpers

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    if (state.key) h.Authorization = 'Bearer ' + state.key;
    return h;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function setStatus(text, bad) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('bad', !!bad);
  }

  function errorText(body, status) {
    const e = body && body.error;
    if (e && e.message) return e.message + (e.code ? ' (' + e.code + ')' : '');
    return 'HTTP ' + status;
  }

  function num(id) {
    const v = $(id).value.trim();
    return v === '' ? null : Number(v);
  }

  // ------------------------------------------------------------ the server

  async function loadModels() {
    let r;
    try {
      r = await fetch('/v1/models', { headers: headers(), cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      setStatus('The server is unreachable: ' + e.message, true);
      return;
    }
    const body = await r.json().catch(() => null);
    if (r.status === 401) {
      $('keyform').hidden = false;
      setStatus(state.key ? 'The API key was refused' : 'This server needs an API key', true);
      $('apikey').focus();
      return;
    }
    if (!r.ok || !body || !Array.isArray(body.data)) {
      setStatus(errorText(body, r.status), true);
      return;
    }
    $('keyform').hidden = true;
    const sel = $('model');
    sel.replaceChildren();
    for (const m of body.data) {
      const o = el('option', null, m.id);
      o.value = m.id;
      sel.append(o);
    }
    $('models').textContent = JSON.stringify(body, null, 2);
    setStatus(body.data.length + (body.data.length === 1 ? ' model' : ' models') + ' served');
    document.body.dataset.ready = '1';
  }

  // ------------------------------------------------------------ requests

  // The request body: speculation on or off, provenance always asked for.
  function buildBody(spec, seed, prompt) {
    const b = { model: $('model').value || undefined, stream: true, stream_options: { include_usage: true } };
    b.max_tokens = num('max_tokens') ?? 128;
    for (const k of ['temperature', 'top_p', 'top_k', 'min_p', 'repetition_penalty']) {
      const v = num(k);
      if (v !== null) b[k] = v;
    }
    if (seed !== null) b.seed = seed;
    const stop = $('stopseq').value.split('\n').filter((s) => s.length > 0);
    if (stop.length) b.stop = stop;
    b.speculative = { enabled: spec, provenance: true };
    const k = num('num_draft');
    if (k) b.speculative.num_draft = k;
    if ($('verify').value !== 'auto') b.speculative.verify = $('verify').value;
    const kind = $('sokind').value, text = $('sotext').value;
    if (kind === 'json_object') b.response_format = { type: 'json_object' };
    else if (kind === 'json_schema') b.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: JSON.parse(text) } };
    else if (kind === 'regex') b.structured_outputs = { regex: text };
    else if (kind === 'choice') b.structured_outputs = { choice: text.split('\n').filter((s) => s.length > 0) };
    if (state.mode === 'chat') {
      const msgs = [];
      if ($('system').value.trim()) msgs.push({ role: 'system', content: $('system').value });
      b.messages = msgs.concat(state.history, [{ role: 'user', content: prompt }]);
    } else {
      b.prompt = prompt;
    }
    return b;
  }

  // One streamed request into pane p; resolves to its result.
  async function run(body, p, signal) {
    const url = state.mode === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    const res = { text: '', tokens: [], steps: [], usage: null, spec: null, finish: null, t0: performance.now(), tFirst: 0, tLast: 0 };
    p.reset(body.speculative.enabled);
    const r = await fetch(url, { method: 'POST', headers: headers(), body: JSON.stringify(body), signal, cache: 'no-store', credentials: 'omit' });
    if (!r.ok) {
      const j = await r.json().catch(() => null);
      if (r.status === 401) $('keyform').hidden = false;
      throw new Error(errorText(j, r.status));
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of event.split('\n')) if (line.startsWith('data: ')) take(line.slice(6), res);
      }
      p.show(res);
    }
    res.tLast = res.tLast || performance.now();
    p.show(res, true);
    return res;
  }

  // One SSE data line into res.
  function take(data, res) {
    if (data === '[DONE]') return;
    const o = JSON.parse(data);
    if (o.error) throw new Error(errorText(o, 0));
    if (o.usage) res.usage = o.usage;
    if (o.speculative) res.spec = o.speculative;
    const c = o.choices && o.choices[0];
    if (!c) return;
    const t = c.delta ? c.delta.content : c.text;
    if (t) res.text += t;
    const pv = c.provenance;
    if (pv) {
      if (pv.tokens.length) {
        const now = performance.now();
        if (!res.tFirst) res.tFirst = now;
        res.tLast = now;
      }
      res.tokens.push(...pv.tokens);
      res.steps.push(...pv.steps);
    }
    if (c.finish_reason) res.finish = c.finish_reason;
  }

  // ------------------------------------------------------------ panes

  function pane(id) {
    const root = $(id);
    const stats = root.querySelector('.stats'), strip = root.querySelector('.strip'), text = root.querySelector('.text');
    let shownSteps = 0;
    return {
      root,
      reset(spec) {
        root.querySelector('h2').textContent = spec ? 'Speculative' : 'Plain';
        stats.replaceChildren();
        strip.replaceChildren();
        text.replaceChildren();
        shownSteps = 0;
      },
      // The text, coloured token by token: the tokens' texts (provenance) cut to the content received.
      show(res, final) {
        const frag = document.createDocumentFragment();
        let left = res.text.length;
        for (const t of res.tokens) {
          if (left <= 0) break;
          const piece = t.text.slice(0, left);
          left -= piece.length;
          if (!piece) continue;
          const s = el('span', 'tok src-' + t.source, piece);
          s.dataset.source = t.source;
          s.dataset.step = t.step;
          s.title = 'step ' + t.step + ': ' + t.source + ' (token ' + t.id + ')';
          frag.append(s);
        }
        if (left > 0) frag.append(document.createTextNode(res.text.slice(res.text.length - left)));
        text.replaceChildren(frag);
        for (; shownSteps < res.steps.length; shownSteps++) strip.append(stepBar(res.steps[shownSteps]));
        showStats(stats, res, final);
        if (final) root.dataset.done = '1';
      },
    };
  }

  function stepBar(st) {
    const bar = el('div', 'bar src-' + (st.drafted ? st.source : 'verifier'));
    bar.style.height = 4 + 6 * st.drafted + 'px';
    const acc = el('div', 'acc');
    acc.style.height = 4 + 6 * st.accepted + 'px';
    bar.append(acc);
    bar.title = 'step ' + st.step + ': ' + (st.drafted ? st.drafted + ' drafted (' + st.source + '), ' + st.accepted + ' accepted' : 'no drafts');
    return bar;
  }

  function figures(res) {
    const n = res.usage ? res.usage.completion_tokens : res.tokens.length;
    const decode = res.tLast - res.tFirst;
    const drafted = res.steps.reduce((a, s) => a + s.drafted, 0), accepted = res.steps.reduce((a, s) => a + s.accepted, 0);
    return {
      tokens: n,
      tps: n > 1 && decode > 0 ? ((n - 1) * 1000) / decode : 0,
      ttft: res.tFirst ? res.tFirst - res.t0 : 0,
      total: (res.tLast || performance.now()) - res.t0,
      acceptance: drafted ? accepted / drafted : null,
      perStep: res.steps.length ? res.tokens.length / res.steps.length : 0,
    };
  }

  function showStats(node, res, final) {
    const f = figures(res);
    const items = [
      ['tok/s', f.tps ? f.tps.toFixed(1) : '–'],
      ['TTFT', f.ttft ? f.ttft.toFixed(0) + ' ms' : '–'],
      ['tokens', String(f.tokens)],
      ['acceptance', f.acceptance === null ? '–' : (100 * f.acceptance).toFixed(0) + '%'],
      ['tokens/step', f.perStep ? f.perStep.toFixed(2) : '–'],
    ];
    if (final && res.finish) items.push(['finish', res.finish]);
    node.replaceChildren(...items.map(([k, v]) => {
      const s = el('span', 'stat');
      s.append(el('b', null, v), document.createTextNode(' ' + k));
      s.dataset.name = k;
      return s;
    }));
  }

  // ------------------------------------------------------------ actions

  async function send() {
    const prompt = $('prompt').value;
    if (!prompt.trim() || state.abort) return;
    const sbs = $('sbs').checked;
    let seed = num('seed');
    if (seed === null && (sbs || (num('temperature') ?? 0) > 0)) seed = Math.floor(Math.random() * 2 ** 31);
    const a = pane('pane-a'), b = pane('pane-b');
    archiveTurn();
    $('ask').textContent = state.mode === 'chat' ? prompt : '';
    $('ask').hidden = state.mode !== 'chat';
    $('pane-b').hidden = !sbs;
    $('verdict').textContent = '';
    $('verdict').className = '';
    delete $('pane-a').dataset.done;
    delete $('pane-b').dataset.done;
    delete document.body.dataset.compared;
    state.abort = new AbortController();
    $('send').disabled = true;
    $('stop').disabled = false;
    try {
      const first = buildBody(sbs ? true : $('spec').checked, seed, prompt);
      // sampled: the texts match token for token only when drafts are checked against the target's own
      // sample (verify "match"); rejection sampling is exact in distribution, not per seed
      const sampled = (first.temperature ?? 1) > 0;
      if (sbs && sampled && !first.speculative.verify) first.speculative.verify = 'match';
      const ra = await run(first, a, state.abort.signal);
      let rb = null;
      if (sbs) {
        const second = buildBody(false, seed, prompt);
        rb = await run(second, b, state.abort.signal);
        compare(ra, rb, sampled && $('verify').value === 'auto');
      }
      if (state.mode === 'chat') keepTurn(prompt, ra, a);
      setStatus('Done');
    } catch (e) {
      if (e.name === 'AbortError') setStatus('Stopped');
      else setStatus(e.message, true);
    } finally {
      state.abort = null;
      $('send').disabled = false;
      $('stop').disabled = true;
    }
  }

  function compare(ra, rb, forcedMatch) {
    const v = $('verdict');
    const fa = figures(ra), fb = figures(rb);
    const same = ra.text === rb.text;
    v.className = same ? 'same' : 'differ';
    const speed = fa.tps && fb.tps ? ' Speculative ' + fa.tps.toFixed(1) + ' tok/s, plain ' + fb.tps.toFixed(1) + ' tok/s: ' + (fa.tps / fb.tps).toFixed(2) + '×.' : '';
    v.textContent = (same ? 'Identical texts.' : 'The texts differ.') + speed + (forcedMatch ? ' (Sampled: verified with "match", which keeps the seed\'s text.)' : '');
    document.body.dataset.compared = same ? 'same' : 'differ';
  }

  // Chat: the finished turn joins the conversation; it moves into the history (its coloured text kept)
  // when the next one is sent.
  function keepTurn(prompt, res, p) {
    state.history.push({ role: 'user', content: prompt }, { role: 'assistant', content: res.text });
    state.lastTurn = { prompt, text: p.root.querySelector('.text').cloneNode(true) };
    $('prompt').value = '';
  }

  function archiveTurn() {
    const t = state.lastTurn;
    if (!t) return;
    state.lastTurn = null;
    const m = el('div', 'msg assistant');
    m.append(...t.text.childNodes);
    $('history').append(el('div', 'msg user', t.prompt), m);
  }

  function setMode(mode) {
    state.mode = mode;
    $('tab-chat').setAttribute('aria-selected', String(mode === 'chat'));
    $('tab-completion').setAttribute('aria-selected', String(mode !== 'chat'));
    $('system').hidden = mode !== 'chat';
    $('prompt').placeholder = mode === 'chat' ? 'Your message' : 'A prompt to complete';
    clear();
  }

  function clear() {
    state.history = [];
    state.lastTurn = null;
    $('history').replaceChildren();
    $('ask').hidden = true;
    pane('pane-a').reset($('spec').checked);
    pane('pane-b').reset(false);
    $('verdict').textContent = '';
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('send').addEventListener('click', send);
    $('stop').addEventListener('click', () => state.abort && state.abort.abort());
    $('clear').addEventListener('click', clear);
    $('tab-chat').addEventListener('click', () => setMode('chat'));
    $('tab-completion').addEventListener('click', () => setMode('completion'));
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) send();
    });
    $('keyform').addEventListener('submit', (e) => {
      e.preventDefault();
      state.key = $('apikey').value || null;
      $('apikey').value = ''; // the key stays in memory only, not in the page
      loadModels();
    });
    loadModels();
  });
})();
