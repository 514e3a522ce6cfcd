// openai_client.mjs — drives `specd serve` with the official OpenAI Node
// client (npm package `openai`, v4): completions.create, chat.completions.create,
// a streamed chat completion, logprobs (chat; completions with echo), n > 1
// (chat, plain and streamed; completions with best_of),
// responses.create (plain and streamed), models.retrieve, and the errors of
// a wrong key and a wrong model. Usage: node openai_client.mjs BASE_URL API_KEY MODEL
// (OPENAI_MODULE: path of the installed package's directory). Prints one
// "ok"/"FAIL" line per check; exit status 0 only when every check passed.
const [baseURL, apiKey, model] = process.argv.slice(2);
const mod = await import(process.env.OPENAI_MODULE || "openai");
const OpenAI = mod.default || mod.OpenAI;
const client = new OpenAI({ baseURL, apiKey, timeout: 120000, maxRetries: 0 });
let fails = 0;
const check = (name, cond, detail) => {
  console.log(`${cond ? "ok  " : "FAIL"} - ${name}${cond || detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  if (!cond) fails++;
};
const usageOk = (u) => u && u.prompt_tokens > 0 && u.completion_tokens > 0 &&
  u.total_tokens === u.prompt_tokens + u.completion_tokens;

try {
  const c = await client.completions.create({ model, prompt: "def add(a, b):", max_tokens: 24, temperature: 0 });
  check("completions.create: text", typeof c.choices[0].text === "string" && c.choices[0].text.length > 0, c);
  check("completions.create: finish_reason", ["stop", "length"].includes(c.choices[0].finish_reason), c);
  check("completions.create: usage", usageOk(c.usage), c.usage);
  check("completions.create: object", c.object === "text_completion", c.object);
} catch (e) { check("completions.create", false, String(e)); }

const messages = [{ role: "system", content: "You write Python." },
                  { role: "user", content: "Write a function that reverses a string." }];
try {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 32, temperature: 0 });
  const m = r.choices[0].message;
  check("chat.completions.create: assistant message", m.role === "assistant" && typeof m.content === "string" &&
        m.content.length > 0, r);
  check("chat.completions.create: finish_reason", ["stop", "length"].includes(r.choices[0].finish_reason), r);
  check("chat.completions.create: usage", usageOk(r.usage), r.usage);
} catch (e) { check("chat.completions.create", false, String(e)); }

try {
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 32, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices || []) {
      if (ch.delta && ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(`chat stream: ${chunks} chunks, non-empty text`, chunks > 1 && text.length > 0, text);
  check("chat stream: finish_reason", ["stop", "length"].includes(finish), finish);
  check("chat stream: usage chunk", usageOk(usage), usage);
} catch (e) { check("chat stream", false, String(e)); }

try {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, logprobs: true,
    top_logprobs: 2 });
  const c = r.choices[0].logprobs && r.choices[0].logprobs.content;
  check("chat logprobs: one entry per token, 2 alternatives each", Array.isArray(c) &&
        c.length === r.usage.completion_tokens && c.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 &&
        Array.isArray(e.bytes)), r.choices[0].logprobs);
  check("chat logprobs: the tokens spell the message", c && c.map((e) => e.token).join("") ===
        r.choices[0].message.content, c && c.map((e) => e.token));
} catch (e) { check("chat logprobs", false, String(e)); }

try {
  const r = await client.completions.create({ model, prompt: "import os", max_tokens: 8, temperature: 0, logprobs: 1,
    echo: true });
  const l = r.choices[0].logprobs;
  check("completions logprobs + echo: prompt and output entries", l && l.tokens.length ===
        r.usage.prompt_tokens + r.usage.completion_tokens && l.token_logprobs[0] === null, l);
} catch (e) { check("completions logprobs", false, String(e)); }

try {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0.9, seed: 5, n: 3 });
  check("chat n=3: three choices, indexed 0..2", r.choices.length === 3 && r.choices.every((c, i) => c.index === i &&
        typeof c.message.content === "string"), r.choices);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0.9, seed: 5,
    n: 3, stream: true });
  const text = ["", "", ""], done = [0, 0, 0];
  for await (const ch of stream)
    for (const c of ch.choices) {
      text[c.index] += c.delta.content || "";
      if (c.finish_reason) done[c.index]++;
    }
  check("chat n=3 stream: every choice finishes once", done.every((d) => d === 1), done);
  const b = await client.completions.create({ model, prompt: "def add(a, b):", max_tokens: 8, temperature: 0.9,
    n: 2, best_of: 3 });
  check("completions n=2 best_of=3: two choices", b.choices.length === 2 && b.usage.completion_tokens === 24, b);
} catch (e) { check("n > 1", false, String(e)); }

try {
  const r = await client.responses.create({ model, input: "Write a function that adds two numbers.",
    instructions: "You write Python.", max_output_tokens: 24, temperature: 0 });
  check("responses.create: output_text", typeof r.output_text === "string" && r.output_text.length > 0, r);
  check("responses.create: status and usage", ["completed", "incomplete"].includes(r.status) &&
        r.usage.input_tokens > 0 && r.usage.output_tokens > 0, r);
  const stream = await client.responses.create({ model, input: [{ role: "user", content: "Sort a list." }],
    max_output_tokens: 24, temperature: 0, stream: true });
  let text = "", done = null, last = null, seq = -1, ordered = true;
  for await (const ev of stream) {
    if (ev.sequence_number !== seq + 1) ordered = false;
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.output_text.done") done = ev.text;
    last = ev;
  }
  check("responses stream: deltas join to the done text", text.length > 0 && text === done, { text, done });
  check("responses stream: ends with response.completed / .incomplete, numbered in order", ordered && last &&
        ["response.completed", "response.incomplete"].includes(last.type) && last.response.output[0].content[0].text === text,
        last && last.type);
} catch (e) { check("responses", false, String(e)); }

try {
  const m = await client.models.retrieve(model);
  check("models.retrieve", m.id === model, m);
  await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 2 });
  check("wrong model raises NotFoundError", false, "no error");
} catch (e) { check("wrong model raises NotFoundError (404 model_not_found)", e.status === 404 &&
                    e.code === "model_not_found", String(e)); }

try {
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await bad.completions.create({ model, prompt: "x", max_tokens: 2 });
  check("wrong key raises AuthenticationError", false, "no error");
} catch (e) { check("wrong key raises AuthenticationError (401)", e.status === 401, String(e)); }

process.exit(fails ? 1 : 0);
