// ai_sdk_client.mjs — drives `specd serve` with the Vercel AI SDK (npm `ai`
// 6 + `@ai-sdk/openai`) through its default provider path, `openai(id)`,
// which speaks OpenAI's Responses API (/v1/responses): generateText and
// streamText, and a required tool through it and through chat completions. Usage: node ai_sdk_client.mjs BASE_URL API_KEY MODEL
// (AI_SDK_DIR: the node_modules folder holding both packages). Prints one
// "ok"/"FAIL" line per check; exit status 0 only when every check passed.
import { createRequire } from "node:module";
const [baseURL, apiKey, model] = process.argv.slice(2);
const require = createRequire(process.env.AI_SDK_DIR + "/");
const { generateText, streamText, tool, jsonSchema } = await import(require.resolve("ai"));
const { createOpenAI } = await import(require.resolve("@ai-sdk/openai"));
const openai = createOpenAI({ baseURL, apiKey });
let fails = 0;
const check = (name, cond, detail) => {
  console.log(`${cond ? "ok  " : "FAIL"} - ${name}${cond || detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  if (!cond) fails++;
};

try {
  const r = await generateText({ model: openai(model), system: "You write Python.",
    prompt: "Write a function that adds two numbers.", maxOutputTokens: 24, temperature: 0 });
  check("ai generateText (Responses API): text", typeof r.text === "string" && r.text.length > 0, r.text);
  check("ai generateText: usage", r.usage.inputTokens > 0 && r.usage.outputTokens > 0, r.usage);
  check("ai generateText: finishReason", ["stop", "length"].includes(r.finishReason), r.finishReason);
} catch (e) { check("ai generateText", false, String(e)); }

try {
  const r = streamText({ model: openai(model), prompt: "Sort a list in Python.", maxOutputTokens: 24, temperature: 0 });
  let text = "", parts = 0;
  for await (const t of r.textStream) { text += t; parts++; }
  check(`ai streamText: ${parts} parts`, parts > 1 && text.length > 0, text);
  check("ai streamText: text equals the final text", text === await r.text, { text });
} catch (e) { check("ai streamText", false, String(e)); }

try {
  const r = await generateText({ model: openai.chat(model), prompt: "import numpy", maxOutputTokens: 12, temperature: 0 });
  check("ai generateText via chat completions: text", r.text.length > 0, r.text);
} catch (e) { check("ai chat provider", false, String(e)); }

// a required tool: the server constrains the answer to a call of it (tool_choice "required"), through the
// Responses API and chat completions
const weather = tool({ description: "The weather in a city", inputSchema: jsonSchema({ type: "object",
  properties: { city: { type: "string", maxLength: 20 } }, required: ["city"], additionalProperties: false }) });
for (const [api, m] of [["Responses API", openai(model)], ["chat completions", openai.chat(model)]]) {
  try {
    const r = await generateText({ model: m, prompt: "What is the weather in Paris?", tools: { get_weather: weather },
      toolChoice: "required", maxOutputTokens: 96, temperature: 0,
      providerOptions: { openai: { parallelToolCalls: false } } });
    const c = r.toolCalls[0];
    check(`ai generateText, a required tool (${api}): one call of it, its input as the schema says`,
      r.toolCalls.length === 1 && c.toolName === "get_weather" && typeof c.input.city === "string" &&
      c.input.city.length <= 20 && Object.keys(c.input).length === 1, { calls: r.toolCalls, text: r.text });
    check(`ai generateText, a required tool (${api}): finishReason tool-calls`, r.finishReason === "tool-calls",
      r.finishReason);
  } catch (e) { check(`ai tools (${api})`, false, String(e)); }
}

process.exit(fails ? 1 : 0);
