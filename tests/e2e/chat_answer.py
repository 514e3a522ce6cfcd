"""chat_answer.py FILE: a chat completion's first choice, streamed (SSE) or not, summarised as JSON
[content or null, [[index, name, arguments (parsed)], ...], finish_reason] — for the e2e tests of tool calls
(test_tool_calls.sh, test_forced_tools.sh)."""
import json
import sys

raw = open(sys.argv[1], encoding="utf-8").read()
if raw.startswith("data: "):
    content, calls, finish = "", [], None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line.strip() == "data: [DONE]":
            continue
        for c in json.loads(line[6:]).get("choices", []):
            d = c.get("delta", {})
            content += d.get("content") or ""
            calls += d.get("tool_calls") or []
            finish = c.get("finish_reason") or finish
else:
    c = json.loads(raw)["choices"][0]
    content, calls, finish = c["message"]["content"], c["message"].get("tool_calls", []), c["finish_reason"]
print(json.dumps([content or None, [[t.get("index", i), t["function"]["name"], json.loads(t["function"]["arguments"])]
                                    for i, t in enumerate(calls)], finish]))
