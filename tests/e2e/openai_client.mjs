// openai_client.mjs — drives `specd serve` with the official OpenAI Node
// client (npm package `openai`, v4): completions.create, chat.completions.create
// and a streamed chat completion. Usage: node openai_client.mjs BASE_URL API_KEY MODEL
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
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await bad.completions.create({ model, prompt: "x", max_tokens: 2 });
  check("wrong key raises AuthenticationError", false, "no error");
} catch (e) { check("wrong key raises AuthenticationError (401)", e.status === 401, String(e)); }

process.exit(fails ? 1 : 0);
