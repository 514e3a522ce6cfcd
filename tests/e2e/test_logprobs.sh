#!/usr/bin/env bash
# test_logprobs.sh — log-probabilities through `specd serve` with the demo
# pair: completions ("logprobs": N) and chat ("logprobs": true,
# "top_logprobs": N), non-streamed and streamed, with and without
# speculation (the values must be identical: they come from the verify pass),
# echo with the prompt's log-probabilities, and the refusals.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

if ! serve_start; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"
P='def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'

# Completions, greedy, 3 alternatives: speculation on vs off.
post /v1/completions "$(body "$P" 48 0 '{"logprobs": 3, "speculative": {"num_draft": 4}}')" "$WORK/spec.json" >/dev/null
post /v1/completions "$(body "$P" 48 0 '{"logprobs": 3, "speculative": {"enabled": false}}')" "$WORK/plain.json" >/dev/null
"$PY" - "$WORK/spec.json" "$WORK/plain.json" <<'PY' && ok "completions: logprobs shape, identical with and without speculation" || fail "completions logprobs"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
la, lb = a["choices"][0]["logprobs"], b["choices"][0]["logprobs"]
n = a["usage"]["completion_tokens"]
assert a["speculative"]["accepted_tokens"] > 0, "no drafts accepted"
assert len(la["tokens"]) == n == len(la["token_logprobs"]) == len(la["top_logprobs"]) == len(la["text_offset"]), la
assert "".join(la["tokens"]) == a["choices"][0]["text"], (la["tokens"], a["choices"][0]["text"])
assert la["tokens"] == lb["tokens"] and la["token_logprobs"] == lb["token_logprobs"], "values differ"
assert la["top_logprobs"] == lb["top_logprobs"]
for tok, lp, top in zip(la["tokens"], la["token_logprobs"], la["top_logprobs"]):
    assert lp <= 0 and tok in top and 3 <= len(top) <= 4, (tok, lp, top)
    assert abs(max(top.values()) - lp) < 1e-6, "greedy picks the likeliest"
off = la["text_offset"]
assert off[0] == 0 and all(off[i + 1] == off[i] + len(la["tokens"][i]) for i in range(n - 1))
PY

# Streamed completions: the chunks' entries join to the same lists.
post /v1/completions "$(body "$P" 48 1 '{"logprobs": 3}')" "$WORK/spec.sse" >/dev/null
"$PY" - "$WORK/spec.sse" "$WORK/spec.json" <<'PY' && ok "completions stream: chunks carry the same logprobs" || fail "completions stream logprobs"
import json, sys
lines = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines[-1] == "[DONE]"
toks, lps, offs = [], [], []
for l in lines[:-1]:
    for c in json.loads(l)["choices"]:
        if c["logprobs"]:
            toks += c["logprobs"]["tokens"]; lps += c["logprobs"]["token_logprobs"]; offs += c["logprobs"]["text_offset"]
ref = json.load(open(sys.argv[2]))["choices"][0]["logprobs"]
assert toks == ref["tokens"] and lps == ref["token_logprobs"] and offs == ref["text_offset"], (toks, ref["tokens"])
PY

# Chat, sampled with a seed (match verification: the same tokens as plain
# sampling), 2 alternatives: non-streamed vs streamed vs no speculation.
CHAT='{"messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
       "max_tokens": 40, "temperature": 0.8, "seed": 7, "logprobs": true, "top_logprobs": 2,
       "speculative": {"verify": "match"}}'
post /v1/chat/completions "$CHAT" "$WORK/chat.json" >/dev/null
post /v1/chat/completions "$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b["stream"]=True; print(json.dumps(b))' "$CHAT")" "$WORK/chat.sse" >/dev/null
post /v1/chat/completions "$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b["speculative"]={"enabled": False}; print(json.dumps(b))' "$CHAT")" "$WORK/chat_plain.json" >/dev/null
"$PY" - "$WORK/chat.json" "$WORK/chat.sse" "$WORK/chat_plain.json" <<'PY' && ok "chat: content entries with bytes and top_logprobs; stream and no-speculation identical" || fail "chat logprobs"
import json, sys
a = json.load(open(sys.argv[1]))
c = a["choices"][0]["logprobs"]["content"]
assert len(c) == a["usage"]["completion_tokens"], (len(c), a["usage"])
assert "".join(e["token"] for e in c) == a["choices"][0]["message"]["content"]
for e in c:
    assert bytes(e["bytes"]).decode("utf-8") == e["token"] and e["logprob"] <= 0
    assert len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
    assert all(set(t) == {"token", "logprob", "bytes"} for t in e["top_logprobs"])
lines = [l[6:] for l in open(sys.argv[2]).read().split("\n") if l.startswith("data: ")]
s = []
for l in lines[:-1]:
    for ch in json.loads(l)["choices"]:
        if ch.get("logprobs"): s += ch["logprobs"]["content"]
assert s == c, "stream differs"
assert json.load(open(sys.argv[3]))["choices"][0]["logprobs"]["content"] == c, "no-speculation differs"
PY

# echo + logprobs: the prompt's tokens first, the first without a value.
post /v1/completions "$(body "$P" 8 0 '{"logprobs": 1, "echo": true}')" "$WORK/echo.json" >/dev/null
"$PY" - "$WORK/echo.json" "$WORK/spec.json" <<'PY' && ok "echo: prompt log-probabilities first (first null), then the output's" || fail "echo logprobs"
import json, sys
a = json.load(open(sys.argv[1])); ref = json.load(open(sys.argv[2]))["choices"][0]["logprobs"]
l, u = a["choices"][0]["logprobs"], a["usage"]
assert len(l["tokens"]) == u["prompt_tokens"] + u["completion_tokens"], (len(l["tokens"]), u)
assert l["token_logprobs"][0] is None and l["top_logprobs"][0] is None
assert all(x <= 0 for x in l["token_logprobs"][1:])
n = u["prompt_tokens"]
assert l["tokens"][n:] == ref["tokens"][:8] and l["token_logprobs"][n:] == ref["token_logprobs"][:8]
assert a["choices"][0]["text"].endswith("".join(l["tokens"][n:]))
PY

# Refusals name the parameter.
code=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21}' "$WORK/e1.json")
check "top_logprobs 21: 400 naming it" '[ "$code" = 400 ] && [ "$(jget "$WORK/e1.json" "j[\"error\"][\"param\"]")" = top_logprobs ]'
code=$(post /v1/completions '{"prompt": "a", "logprobs": true}' "$WORK/e2.json")
check "completions logprobs true: 400 naming it" '[ "$code" = 400 ] && [ "$(jget "$WORK/e2.json" "j[\"error\"][\"param\"]")" = logprobs ]'
serve_stop
finish
