#!/usr/bin/env bash
# test_router_api.sh — end-to-end test of specd-router's HTTP API.
#
# Starts the TEST-ONLY fake verifier (specd-test-fake-verifier: echoes prompt
# ids cyclically, see tests/tools/fake_verifier.c) and specd-router on free
# loopback ports with the tinycode-16m tokenizer, then checks with curl:
# completions and chat (plain and SSE), /v1/models, /health, /metrics, stop
# strings, every bad-input status (400 naming the field, 401, 404, 413, 429
# with Retry-After), that the server keeps serving, that a client disconnect
# cancels on the verifier while a half-close does not, and that killing the verifier marks the lane down
# (503 with Retry-After). Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"

VPORT=$(free_port); HPORT=$(free_port); HPORT2=$(free_port)
KEY=sekret
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 512 \
  --delay-ms 5 >"$WORK/fv.log" 2>&1 &
FV=$!; PIDS+=("$FV")
"$BIN/specd-router" --host 127.0.0.1 --port "$HPORT" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --model-name tinycode-16m --api-key "$KEY" --max-body 4096 --health-interval-ms 200 --health-misses 3 \
  --resume-wait 1 --served-model-name tc16,tiny >"$WORK/router.log" 2>&1 &
PIDS+=("$!")
URL=http://127.0.0.1:$HPORT
AUTH=(-H "Authorization: Bearer $KEY")

wait_health "$URL"
# post PATH BODY [curl args]: writes body to $WORK/out, prints the status.
post() { local p=$1 b=$2; shift 2; curl -s -o "$WORK/out" -D "$WORK/hdr" -w '%{http_code}' "${AUTH[@]}" \
  -H 'Content-Type: application/json' "$@" -d "$b" "$URL$p"; }

# --- health, models, auth ---------------------------------------------------
check "/health is 200 once the lane is up" '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "$URL/health")" = 200 ]'
check "/v1/models lists the model" '[ "$(curl -s "${AUTH[@]}" "$URL/v1/models" -o "$WORK/m" -w "%{http_code}")" = 200 ] && [ "$(jget "$WORK/m" "j[\"data\"][0][\"id\"]")" = tinycode-16m ]'
check "no API key → 401" '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "$URL/v1/models")" = 401 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = invalid_api_key ]'
check "wrong API key → 401" '[ "$(curl -s -o /dev/null -w "%{http_code}" -H "Authorization: Bearer nope" "$URL/v1/completions" -d "{}")" = 401 ]'
check "unknown path → 404" '[ "$(curl -s -o /dev/null -w "%{http_code}" "${AUTH[@]}" "$URL/v1/nothing")" = 404 ]'

# --- completions --------------------------------------------------------------
st=$(post /v1/completions '{"model":"tinycode-16m","prompt":"def f(x):","max_tokens":10,"temperature":0}')
check "completion → 200" '[ "$st" = 200 ]'
check "completion text echoes the prompt ids" '[ "$(jget "$WORK/out" "j[\"choices\"][0][\"text\"]")" = "def f(x):def f(x):" ]'
check "completion usage + finish_reason length" '[ "$(jget "$WORK/out" "(j[\"usage\"][\"completion_tokens\"], j[\"choices\"][0][\"finish_reason\"], j[\"object\"])")" = "(10, '"'"'length'"'"', '"'"'text_completion'"'"')" ]'
check "completion carries speculative stats" '[ "$(jget "$WORK/out" "j[\"speculative\"][\"steps\"] > 0 and \"acceptance_rate\" in j[\"speculative\"]")" = True ]'

st=$(post /v1/completions '{"prompt":[100,200,300],"max_tokens":4,"speculative":{"enabled":false}}')
check "token-id prompt → 200, 4 tokens" '[ "$st" = 200 ] && [ "$(jget "$WORK/out" "j[\"usage\"]")" = "{'"'"'prompt_tokens'"'"': 3, '"'"'completion_tokens'"'"': 4, '"'"'total_tokens'"'"': 7, '"'"'prompt_tokens_details'"'"': {'"'"'cached_tokens'"'"': 0}}" ]'

st=$(post /v1/completions '{"prompt":"hello world","max_tokens":50,"stop":["world"]}')
check "stop string cuts the text, finish stop" '[ "$st" = 200 ] && [ "$(jget "$WORK/out" "repr(j[\"choices\"][0][\"text\"]) + j[\"choices\"][0][\"finish_reason\"]")" = "'"'"'hello '"'"'stop" ]'

curl -sN "${AUTH[@]}" "$URL/v1/completions" -d '{"prompt":"abc abc","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}' >"$WORK/sse"
check "SSE completion ends with [DONE]" '[ "$(tail -n 2 "$WORK/sse" | head -n 1)" = "data: [DONE]" ]'
check "SSE completion text and usage chunk" '"$PY" - "$WORK/sse" <<PY
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
js = [json.loads(e) for e in ev]
text = "".join(c["choices"][0]["text"] for c in js if c["choices"])
assert text == "abc abcabc abc"[:len(text)] and len(text) > 0, text
assert js[-1]["choices"] == [] and js[-1]["usage"]["completion_tokens"] == 6
assert any(c["choices"] and c["choices"][0]["finish_reason"] == "length" for c in js)
assert all(c["object"] == "text_completion" for c in js)
PY'

U8='naïve café — ü€𝄞 x'
st=$(post /v1/completions "{\"prompt\":\"$U8\",\"max_tokens\":1}")
N=$(jget "$WORK/out" "j['usage']['prompt_tokens']")
curl -sN "${AUTH[@]}" "$URL/v1/completions" -d "{\"prompt\":\"$U8\",\"max_tokens\":$N,\"stream\":true}" >"$WORK/sse"
check "SSE detokenisation is UTF-8 safe (echo of a multi-byte prompt)" '"$PY" - "$WORK/sse" "$U8" <<PY
import json, sys
ev = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
text = "".join(json.loads(e)["choices"][0]["text"] for e in ev)
assert text == sys.argv[2], (text, sys.argv[2])
PY'

# --- chat ---------------------------------------------------------------------
st=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"s"},{"role":"user","content":"print(1)"}],"max_tokens":4}')
check "chat → 200 with assistant message" '[ "$st" = 200 ] && [ "$(jget "$WORK/out" "j[\"object\"] + j[\"choices\"][0][\"message\"][\"role\"]")" = chat.completionassistant ]'
curl -sN "${AUTH[@]}" "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x = 1"}],"max_tokens":5,"stream":true}' >"$WORK/sse"
check "SSE chat: role first, content deltas, [DONE]" '"$PY" - "$WORK/sse" <<PY
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert ev[-1] == "[DONE]"
js = [json.loads(e) for e in ev[:-1]]
assert js[0]["choices"][0]["delta"]["role"] == "assistant"
assert all(c["object"] == "chat.completion.chunk" for c in js)
assert "".join(c["choices"][0]["delta"].get("content", "") for c in js).startswith("x = 1")
assert js[-1]["choices"][0]["finish_reason"] == "length" and "speculative" in js[-1]
PY'

# --- bad inputs -----------------------------------------------------------------
# bad NAME BODY STATUS PARAM [PATH]
bad() {
  local st; st=$(post "${5:-/v1/completions}" "$2")
  local got; got=$(jget "$WORK/out" "j[\"error\"][\"param\"]")
  if [ "$st" = "$3" ] && [ "$got" = "$4" ] && [ -n "$(jget "$WORK/out" "j[\"error\"][\"message\"]")" ]; then ok "$1 → $3 ($4)"
  else fail "$1: got $st param=$got, want $3 $4: $(cat "$WORK/out")"; fi
}
bad "malformed JSON" '{"prompt": "x"' 400 None
bad "prompt of wrong type" '{"prompt": 5}' 400 prompt
bad "missing messages" '{}' 400 messages /v1/chat/completions
bad "unknown model" '{"model":"gpt-4","prompt":"x"}' 404 model
bad "tools without a function name" '{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]}' 400 tools /v1/chat/completions
bad "tool_choice required without tools" '{"messages":[{"role":"user","content":"a"}],"tool_choice":"required"}' 400 tool_choice /v1/chat/completions
bad "response_format json_schema outside the subset" '{"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"number","minimum":0.5}}}}' 400 response_format /v1/chat/completions
bad "max_tokens 0" '{"prompt":"x","max_tokens":0}' 400 max_tokens
bad "prompt + max_tokens beyond the context" '{"prompt":"x","max_tokens":600}' 400 max_tokens
bad "temperature -1" '{"prompt":"x","temperature":-1}' 400 temperature
bad "top_p 0" '{"prompt":"x","top_p":0}' 400 top_p
bad "n = 0" '{"prompt":"x","n":0}' 400 n
bad "best_of < n" '{"prompt":"x","n":3,"best_of":2}' 400 best_of
bad "token id beyond the vocab" '{"prompt":[1, 99999]}' 400 prompt
bad "stop of wrong type" '{"prompt":"x","stop":7}' 400 stop
bad "speculative.num_draft too big" '{"prompt":"x","speculative":{"num_draft":1000}}' 400 speculative.num_draft
check "unknown model → 404 model_not_found" '[ "$(post /v1/completions "{\"model\":\"gpt-4\",\"prompt\":\"x\"}")" = 404 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = model_not_found ]'
check "tools: [] and tool_choice none are accepted (a client offering no tools)" \
  '[ "$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[],\"tool_choice\":\"none\",\"max_tokens\":2}")" = 200 ]'
check "echo: the completion's text starts with the prompt (usage counts the generated tokens only)" \
  '[ "$(post /v1/completions "{\"prompt\":\"def main():\",\"max_tokens\":3,\"ignore_eos\":true,\"echo\":true}")" = 200 ] &&
   [ "$(jget "$WORK/out" "j[\"choices\"][0][\"text\"].startswith(\"def main():\") and len(j[\"choices\"][0][\"text\"]) > len(\"def main():\") and j[\"usage\"][\"completion_tokens\"] == 3")" = True ]'
check "echo, streamed: the first text is the prompt" \
  'curl -sN "${AUTH[@]}" -d "{\"prompt\":\"def main():\",\"max_tokens\":3,\"ignore_eos\":true,\"echo\":true,\"stream\":true}" "$URL/v1/completions" >"$WORK/echo.sse" &&
   [ "$("$PY" -c "import json; ev=[json.loads(l[6:]) for l in open(\"$WORK/echo.sse\") if l.startswith(\"data: {\")]; print(\"\".join(c[\"text\"] for e in ev for c in e[\"choices\"]).startswith(\"def main():\"))")" = True ]'
check "n = 3: three choices (index 0..2), usage summed, each submitted to the verifier" \
  '[ "$(post /v1/completions "{\"prompt\":\"ab\",\"n\":3,\"max_tokens\":4,\"ignore_eos\":true}")" = 200 ] &&
   [ "$(jget "$WORK/out" "[c[\"index\"] for c in j[\"choices\"]] == [0, 1, 2] and all(c[\"text\"] == \"abababab\" for c in j[\"choices\"]) and j[\"usage\"][\"completion_tokens\"] == 12")" = True ]'
check "max_completion_tokens on /v1/completions" \
  '[ "$(post /v1/completions "{\"prompt\":\"x\",\"max_completion_tokens\":3,\"ignore_eos\":true}")" = 200 ] && [ "$(jget "$WORK/out" "j[\"usage\"][\"completion_tokens\"]")" = 3 ]'
check "GET /v1/models/tinycode-16m → the model" \
  '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "${AUTH[@]}" "$URL/v1/models/tinycode-16m")" = 200 ] && [ "$(jget "$WORK/out" "j[\"id\"]")" = tinycode-16m ]'
check "--served-model-name: /v1/models lists the model and its aliases" \
  '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "${AUTH[@]}" "$URL/v1/models")" = 200 ] && [ "$(jget "$WORK/out" "\",\".join(m[\"id\"] for m in j[\"data\"])")" = tinycode-16m,tc16,tiny ]'
check "--served-model-name: a request naming an alias is served and answered under that name" \
  '[ "$(post /v1/completions "{\"model\":\"tiny\",\"prompt\":\"x\",\"max_tokens\":2}")" = 200 ] && [ "$(jget "$WORK/out" "j[\"model\"]")" = tiny ] &&
   [ "$(curl -s -o "$WORK/out" -w "%{http_code}" "${AUTH[@]}" "$URL/v1/models/tc16")" = 200 ] && [ "$(jget "$WORK/out" "j[\"root\"]")" = tinycode-16m ]'
check "GET /v1/models/gpt-4 → 404 model_not_found" \
  '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "${AUTH[@]}" "$URL/v1/models/gpt-4")" = 404 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = model_not_found ]'
check "POST /tokenize: the prompt's token ids, as many as a completion's prompt_tokens" \
  '[ "$(post /tokenize "{\"prompt\":\"def main():\"}")" = 200 ] && cp "$WORK/out" "$WORK/tok.json" &&
   [ "$(post /v1/completions "{\"prompt\":\"def main():\",\"max_tokens\":1}")" = 200 ] &&
   [ "$(jget "$WORK/tok.json" "j[\"count\"]")" = "$(jget "$WORK/out" "j[\"usage\"][\"prompt_tokens\"]")" ] &&
   [ "$(jget "$WORK/tok.json" "len(j[\"tokens\"]) == j[\"count\"] > 0")" = True ]'
check "POST /tokenize with messages: as many as the chat completion's prompt_tokens (its template applied)" \
  '[ "$(post /tokenize "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]}")" = 200 ] &&
   cp "$WORK/out" "$WORK/tokc.json" &&
   [ "$(post /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}")" = 200 ] &&
   [ "$(jget "$WORK/tokc.json" "j[\"count\"]")" = "$(jget "$WORK/out" "j[\"usage\"][\"prompt_tokens\"]")" ]'
check "POST /detokenize gives the text back" \
  '[ "$(post /detokenize "{\"tokens\":$(jget "$WORK/tok.json" "json.dumps(j[\"tokens\"])")}")" = 200 ] && [ "$(jget "$WORK/out" "\"def main():\" in j[\"prompt\"]")" = True ]'
check "POST /detokenize with an id beyond the vocabulary → 400 naming tokens" \
  '[ "$(post /detokenize "{\"tokens\":[1,99999999]}")" = 400 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"param\"]")" = tokens ]'
check "/tokenize needs the API key" '[ "$(curl -s -o /dev/null -w "%{http_code}" -d "{\"prompt\":\"x\"}" "$URL/tokenize")" = 401 ]'
check "GET /version" '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "$URL/version")" = 200 ] && [ -n "$(jget "$WORK/out" "j[\"version\"]")" ]'
"$PY" -c 'import json; print(json.dumps({"prompt": "x" * 8000}))' >"$WORK/big.json"
check "body over --max-body → 413" '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "${AUTH[@]}" --data-binary @"$WORK/big.json" "$URL/v1/completions")" = 413 ] && [ -n "$(jget "$WORK/out" "j[\"error\"][\"message\"]")" ]'
st=$(post /v1/completions '{"prompt":"still here","max_tokens":3}')
check "server keeps serving after bad inputs" '[ "$st" = 200 ]'

# --- client disconnect cancels -------------------------------------------------------
curl -sN --max-time 0.4 "${AUTH[@]}" "$URL/v1/completions" -d '{"prompt":"loop","max_tokens":400,"stream":true}' >/dev/null
curl -s --max-time 0.4 "${AUTH[@]}" "$URL/v1/completions" -d '{"prompt":"loop","max_tokens":400}' >/dev/null
sleep 0.5
check "client disconnects → Cancel reaches the verifier (stream and not)" '[ "$(grep -c "cancel request" "$WORK/fv.log")" -ge 3 ]'

# --- half-close: a client that shuts down its sending side still gets its answer --------
# rawreq MODE STREAM MAX_TOKENS: sends a completion request on a raw socket, then
# "half" shuts down writing (shutdown(SHUT_WR)) and prints all it receives,
# or "close" closes the socket.
rawreq() { "$PY" - "$HPORT" "$KEY" "$@" <<'PY'
import json, socket, sys, time
port, key, mode, stream, mt = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
body = json.dumps({"prompt": "loop", "max_tokens": mt, "stream": stream}).encode()
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nAuthorization: Bearer "
          + key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
time.sleep(0.05)
if mode == "close":
    s.close()
    sys.exit(0)
s.shutdown(socket.SHUT_WR)
s.settimeout(30)
data = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    data += d
sys.stdout.write(data.decode("utf-8", "replace"))
PY
}
rawreq half 0 60 >"$WORK/hc1"
check "half-close, not streamed: 100 Continue, then 200 with all 60 tokens" \
  'head -1 "$WORK/hc1" | grep -q "^HTTP/1.1 100 Continue" && grep -q "^HTTP/1.1 200 OK" "$WORK/hc1" &&
   [ "$("$PY" -c "import json,sys; t=open(sys.argv[1]).read(); print(json.loads(t[t.index(\"{\"):])[\"usage\"][\"completion_tokens\"])" "$WORK/hc1")" = 60 ]'
rawreq half 1 60 >"$WORK/hc2"
check "half-close, streamed: the whole stream (60 tokens), [DONE] last" \
  'grep -q "^HTTP/1.1 200 OK" "$WORK/hc2" && grep -q "data: \[DONE\]" "$WORK/hc2" &&
   [ "$("$PY" -c "import json,sys; print(sum(json.loads(l[6:])[\"choices\"][0][\"text\"].count(\"loop\") for l in open(sys.argv[1]) if l.startswith(\"data: {\")))" "$WORK/hc2")" = 60 ]'
before=$(grep -c "cancel request" "$WORK/fv.log")
rawreq close 0 400
sleep 0.5
check "a client that closes (not half-closes) a non-streamed request is still cancelled within 0.5 s" \
  '[ "$(grep -c "cancel request" "$WORK/fv.log")" -gt "$before" ] && grep -q "client hung up" "$WORK/router.log"'

# --- metrics ---------------------------------------------------------------------
curl -s "$URL/metrics" >"$WORK/metrics"
for m in specd_http_requests_total specd_spec_steps_total specd_spec_draft_tokens_total \
         specd_spec_accepted_tokens_total 'specd_spec_accepted_per_position_total{pos="1"}' specd_kv_blocks \
         specd_kv_blocks_free specd_requests_active specd_requests_queued specd_generation_tokens_total; do
  check "/metrics has $m" 'grep -qF "$m" "$WORK/metrics"'
done
check "/metrics has vLLM's series with model_name: TTFT / TPOT / e2e histograms, finish reasons, KV usage, spec decode" \
  '"$PY" - "$WORK/metrics" <<'"'"'PY'"'"'
import re, sys
t = open(sys.argv[1]).read()
def val(pat):
    m = re.search("^" + re.escape(pat) + r" ([0-9.e+-]+)$", t, re.M)
    return float(m.group(1)) if m else None
mn = "model_name=\"tinycode-16m\""
assert val("vllm:time_to_first_token_seconds_count{%s}" % mn) > 0
assert val("vllm:time_per_output_token_seconds_count{%s}" % mn) > 0
assert val("vllm:e2e_request_latency_seconds_count{%s}" % mn) == val("specd_request_duration_seconds_count")
assert val("vllm:request_success_total{%s,finished_reason=\"length\"}" % mn) > 0
assert val("vllm:generation_tokens_total{%s}" % mn) == val("specd_generation_tokens_total")
assert 0 <= val("vllm:kv_cache_usage_perc{%s}" % mn) <= 1
assert val("vllm:spec_decode_num_draft_tokens_total{%s}" % mn) == val("specd_spec_draft_tokens_total")
assert "# TYPE vllm:request_prompt_tokens histogram" in t
PY'
check "/metrics counted a 400" 'grep -q "specd_http_requests_total{code=\"400\"}" "$WORK/metrics"'

# --- overload: a router with no queue and one slot per lane -------------------------------
"$BIN/specd-router" --port "$HPORT2" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" --model-name tinycode-16m \
  --max-queue 0 --lane-capacity 1 --health-interval-ms 200 >"$WORK/router2.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 50); do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT2/health")" = 200 ] && break; sleep 0.1; done
curl -sN --max-time 5 "http://127.0.0.1:$HPORT2/v1/completions" -d '{"prompt":"slow","max_tokens":300,"stream":true}' >/dev/null &
SLOW=$!
sleep 0.3
st=$(curl -s -o "$WORK/out" -D "$WORK/hdr" -w '%{http_code}' "http://127.0.0.1:$HPORT2/v1/completions" -d '{"prompt":"x","max_tokens":2}')
check "queue full → 429 with Retry-After" '[ "$st" = 429 ] && grep -qi "^Retry-After:" "$WORK/hdr" && [ -n "$(jget "$WORK/out" "j[\"error\"][\"message\"]")" ]'
wait $SLOW
st=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT2/v1/completions" -d '{"prompt":"x","max_tokens":2}')
check "served again once the slot is free" '[ "$st" = 200 ]'

# --- verifier dies → lane down → 503 --------------------------------------------------
curl -sN --max-time 10 "${AUTH[@]}" "$URL/v1/completions" -d '{"prompt":"long","max_tokens":500,"stream":true,"speculative":{"enabled":false}}' >"$WORK/cut" &
CUT=$!
sleep 0.3
kill "$FV"; wait "$FV" 2>/dev/null
sleep 1.5
wait $CUT
check "in-flight stream, no lane back within --resume-wait 1: fails with lane_down, then [DONE]" \
  'grep -q "lane_down" "$WORK/cut" && [ "$(tail -n 2 "$WORK/cut" | head -n 1)" = "data: [DONE]" ]'
check "router logged the wait for a lane to resume on" 'grep -q "waiting up to 1 s for a lane" "$WORK/router.log"'
check "/health → 503 after the verifier died" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$URL/health")" = 503 ]'
st=$(post /v1/completions '{"prompt":"x","max_tokens":2}')
check "completion → 503 with Retry-After when every lane is down" '[ "$st" = 503 ] && grep -qi "^Retry-After:" "$WORK/hdr"'
check "router logged the lane down" 'grep -q "is down" "$WORK/router.log"'

# --- `specd serve` supervisor (with shims: the fake verifier stands in for
# specd-verifier, and a drafter that crashes after a second tests restarts) ---
if [ -x "$BIN/specd" ]; then
  SB=$WORK/sbin; mkdir -p "$SB"
  cp "$BIN/specd" "$BIN/specd-router" "$BIN/specd-test-fake-verifier" "$SB/"
  cat >"$SB/specd-verifier" <<SH
#!/usr/bin/env bash
echo "verifier started \$*" >&2
while [ \$# -gt 0 ]; do case \$1 in --listen) L=\$2; shift;; esac; shift; done
exec "$SB/specd-test-fake-verifier" --listen "\$L"
SH
  printf '#!/usr/bin/env bash\necho "drafter started $*" >&2; sleep 1; exit 3\n' >"$SB/specd-drafter"
  chmod +x "$SB/specd-verifier" "$SB/specd-drafter"
  SPORT=$(free_port)
  "$SB/specd" serve --target "$MODELS/tinycode-16m" --port "$SPORT" --ngram-drafter \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
  SP=$!
  for _ in $(seq 60); do grep -q "serving" "$WORK/serve.out" && break; sleep 0.1; done
  check "specd serve prints the URL" 'grep -q "specd: serving tinycode-16m at http://127.0.0.1:$SPORT" "$WORK/serve.out"'
  st=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SPORT/v1/completions" -d '{"prompt":"x","max_tokens":2}')
  check "specd serve answers completions" '[ "$st" = 200 ]'
  sleep 2
  check "specd serve restarts a crashed drafter" '[ "$(grep -c "drafter started" "$WORK/serve.err")" -ge 2 ]'
  kill -TERM "$SP"; wait "$SP"; rc=$?
  check "specd serve stops cleanly on SIGTERM (exit 0)" '[ "$rc" = 0 ]'
  # the default without --draft: the verifier's own n-gram lookup (--ngram), no drafter process
  "$SB/specd" serve --target "$MODELS/tinycode-16m" --port "$SPORT" >"$WORK/serve.out" 2>"$WORK/serve.err" &
  SP=$!
  for _ in $(seq 60); do grep -q "serving" "$WORK/serve.out" && break; sleep 0.1; done
  check "specd serve without --draft: the verifier drafts (--ngram), no drafter runs" \
    'grep -q "verifier started .* --ngram" "$WORK/serve.err" && ! grep -q "drafter started" "$WORK/serve.err"'
  old=$(pgrep -P "$SP" -f specd-test-fake-verifier)
  kill -TERM "$old"
  new=
  for _ in $(seq 50); do
    sleep 0.1
    new=$(pgrep -P "$SP" -f specd-test-fake-verifier)
    [ -n "$new" ] && [ "$new" != "$old" ] && break
  done
  check "specd serve restarts a verifier that died (old $old, new ${new:-none})" \
    '[ -n "$new" ] && [ "$new" != "$old" ] && grep -q "restarting the verifier" "$WORK/serve.err"'
  kill -TERM "$SP"; wait "$SP"; rc=$?
  check "... and still stops cleanly on SIGTERM (exit 0)" '[ "$rc" = 0 ]'
  # a verifier that cannot start (here: exits at once) is a start-up failure, not restarted
  printf '#!/usr/bin/env bash\necho "verifier: cannot load the model" >&2; exit 1\n' >"$SB/specd-verifier"
  timeout 30 "$SB/specd" serve --target "$MODELS/tinycode-16m" --port "$SPORT" --no-spec >"$WORK/serve.out" 2>"$WORK/serve.err"
  rc=$?
  check "specd serve exits 1 when the verifier cannot start (rc $rc)" '[ "$rc" = 1 ] && grep -q "verifier exited with status 1" "$WORK/serve.err"'
fi

if [ "$FAILS" -ne 0 ]; then
  echo "--- router log"; tail -n 30 "$WORK/router.log"; echo "--- fake verifier log"; tail -n 30 "$WORK/fv.log"
  echo "$FAILS check(s) failed"; exit 1
fi
echo "all router API checks passed"
