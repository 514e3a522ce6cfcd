#!/usr/bin/env bash
# test_choices.sh — several choices per request through `specd serve` with the
# demo pair: `n` on completions and chat (non-streamed and streamed), choice i
# equal to a single request with seed + i, greedy choices equal to the greedy
# output, `best_of` returning the likeliest of its generations (by the
# summed log-probabilities the server reports), the choices sharing the
# prompt's KV on the verifier (prefix-cache counters), a client that hangs up
# cancelling every choice, and the refusals.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

if ! serve_start; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"
# long enough for several KV blocks (16 positions each)
P='import os\nimport sys\n\ndef read_config(path):\n    """Read a key=value file into a dict, skipping comments."""\n    result = {}\n'
# sampled PROMPT MAX SEED [extra JSON]: a seeded sampled completion body; "match"
# verification, whose output is the plain sampler's for the seed whatever the
# drafts (rejection sampling is exact in distribution, not per seed)
sampled() {
  "$PY" -c 'import json,sys
b={"prompt":sys.argv[1],"max_tokens":int(sys.argv[2]),"temperature":0.9,"seed":int(sys.argv[3]),"ignore_eos":True,
   "speculative":{"verify":"match"}}
if len(sys.argv) > 4: b.update(json.loads(sys.argv[4]))
print(json.dumps(b))' "$@"
}

# n = 3, seeded: choice i is what a single request with seed + i gives.
q0=$(metric vllm:prefix_cache_queries_total); h0=$(metric vllm:prefix_cache_hits_total)
st=$(post /v1/completions "$(sampled "$P" 32 40 '{"n": 3}')" "$WORK/n3.json")
for i in 0 1 2; do post /v1/completions "$(sampled "$P" 32 $((40 + i)))" "$WORK/one$i.json" >/dev/null; done
"$PY" - "$WORK/n3.json" "$WORK/one0.json" "$WORK/one1.json" "$WORK/one2.json" <<'PY' && ok "n=3 seeded: 3 choices, choice i = the single request with seed + i, usage summed" || fail "n=3 seeded (status $st)"
import json, sys
a = json.load(open(sys.argv[1]))
ones = [json.load(open(f)) for f in sys.argv[2:5]]
cs = a["choices"]
assert [c["index"] for c in cs] == [0, 1, 2], cs
for c, o in zip(cs, ones):
    assert c["text"] == o["choices"][0]["text"], (c["text"], o["choices"][0]["text"])
    assert c["finish_reason"] == "length"
assert len({c["text"] for c in cs}) > 1, "the choices are all the same"
assert a["usage"]["completion_tokens"] == 96 and a["usage"]["prompt_tokens"] == ones[0]["usage"]["prompt_tokens"], a["usage"]
assert a["speculative"]["steps"] > 0
PY
for i in $(seq 30); do # the counters come with the verifier's next health report
  q1=$(metric vllm:prefix_cache_queries_total); h1=$(metric vllm:prefix_cache_hits_total)
  [ "$("$PY" -c "print($h1 - $h0 >= 32)")" = True ] && break
  sleep 0.2
done
check "the choices shared the prompt's KV (prefix hits $h0 → $h1 of queries $q0 → $q1)" \
  '[ "$("$PY" -c "print($h1 - $h0 >= 32 and $q1 > $q0)")" = True ]'

# Greedy: every choice is the greedy output.
post /v1/completions "$(body "$P" 40 0 '{"n": 2}')" "$WORK/g2.json" >/dev/null
post /v1/completions "$(body "$P" 40 0)" "$WORK/g1.json" >/dev/null
check "n=2 greedy: both choices are the greedy output" \
  '[ "$("$PY" -c "import json; a=json.load(open(\"$WORK/g2.json\")); b=json.load(open(\"$WORK/g1.json\")); t=b[\"choices\"][0][\"text\"]; print(len(a[\"choices\"]) == 2 and all(c[\"text\"] == t for c in a[\"choices\"]) and len(t) > 0)")" = True ]'

# Chat, streamed: per-index deltas join to the non-streamed choices; a role
# chunk and a finish chunk per choice; usage (include_usage) summed; one [DONE].
CHAT='{"messages": [{"role": "user", "content": "Write a Python function that reverses a string."}],
       "max_tokens": 24, "temperature": 0.9, "seed": 3, "n": 3, "speculative": {"verify": "match"}}'
post /v1/chat/completions "$CHAT" "$WORK/chat.json" >/dev/null
post /v1/chat/completions "$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b["stream"]=True; b["stream_options"]={"include_usage": True}; print(json.dumps(b))' "$CHAT")" "$WORK/chat.sse" >/dev/null
"$PY" - "$WORK/chat.json" "$WORK/chat.sse" <<'PY' && ok "chat n=3 streamed: per-index deltas equal the non-streamed choices; role and finish per choice; usage summed" || fail "chat n=3 stream"
import json, sys
a = json.load(open(sys.argv[1]))
lines = [l[6:] for l in open(sys.argv[2]).read().split("\n") if l.startswith("data: ")]
assert lines[-1] == "[DONE]" and lines.count("[DONE]") == 1
text, roles, fins, usage = {}, {}, {}, None
for l in lines[:-1]:
    j = json.loads(l)
    assert "error" not in j, j
    if j.get("usage"):
        usage = j["usage"]
    for c in j["choices"]:
        i = c["index"]
        d = c["delta"]
        if d.get("role"):
            roles[i] = roles.get(i, 0) + 1
        text[i] = text.get(i, "") + (d.get("content") or "")
        if c["finish_reason"]:
            fins[i] = fins.get(i, 0) + 1
assert roles == {0: 1, 1: 1, 2: 1} and fins == {0: 1, 1: 1, 2: 1}, (roles, fins)
for c in a["choices"]:
    assert text[c["index"]] == c["message"]["content"], (c["index"], text[c["index"]], c["message"]["content"])
assert usage and usage["completion_tokens"] == a["usage"]["completion_tokens"], (usage, a["usage"])
PY

# best_of: the returned choices are the likeliest generations, likeliest first.
post /v1/completions "$(sampled "$P" 16 70 '{"n": 2, "best_of": 4, "logprobs": 0}')" "$WORK/best.json" >/dev/null
for i in 0 1 2 3; do post /v1/completions "$(sampled "$P" 16 $((70 + i)) '{"logprobs": 0}')" "$WORK/b$i.json" >/dev/null; done
"$PY" - "$WORK/best.json" "$WORK"/b[0-3].json <<'PY' && ok "best_of=4, n=2: the two likeliest of the 4 generations (seeds s..s+3), likeliest first; usage counts all 4" || fail "best_of"
import json, sys
a = json.load(open(sys.argv[1]))
gens = []
for f in sys.argv[2:6]:
    c = json.load(open(f))["choices"][0]
    gens.append((sum(c["logprobs"]["token_logprobs"]), c["text"]))
want = [t for _, t in sorted(gens, key=lambda g: -g[0])[:2]]
got = [c["text"] for c in a["choices"]]
assert got == want, (got, want, gens)
assert [c["index"] for c in a["choices"]] == [0, 1]
assert a["usage"]["completion_tokens"] == 64, a["usage"]
PY
post /v1/completions "$(sampled "$P" 8 5 '{"best_of": 3}')" "$WORK/best1.json" >/dev/null
check "best_of without logprobs: one choice, no logprobs object" \
  '[ "$(jget "$WORK/best1.json" "len(j[\"choices\"]) == 1 and j[\"choices\"][0][\"logprobs\"] is None")" = True ]'

# Refusals.
for c in '{"n": 0}|n' '{"n": 2, "best_of": 1}|best_of' '{"best_of": 2, "stream": true}|best_of'; do
  st=$(post /v1/completions "$(sampled "$P" 4 1 "${c%|*}")" "$WORK/bad.json")
  check "refused: ${c%|*} → 400 naming ${c#*|}" '[ "$st" = 400 ] && [ "$(jget "$WORK/bad.json" "j[\"error\"][\"param\"]")" = "${c#*|}" ]'
done

# A client hanging up on a streamed n=3 request cancels every choice.
curl -sN -m 1 -H 'Content-Type: application/json' \
  -d "$(sampled "$P" 400 9 '{"n": 3, "stream": true}')" "$URL/v1/completions" >/dev/null 2>&1
gone=false
for i in $(seq 50); do
  [ "$(metric specd_requests_active)" = 0 ] && [ "$(metric specd_lane_inflight)" = 0 ] && { gone=true; break; }
  sleep 0.2
done
check "a client hanging up cancels all its choices (no request left active)" '$gone'
check "the KV pool is whole again" 'kv_settled'

finish
