#!/usr/bin/env bash
# test_tool_calls.sh — tool calling through specd-router (Hermes format):
# the TEST-ONLY fake verifier echoes the prompt's tokens, and the router
# renders prompts with a test chat template that writes the last message and
# then, when the request has tools, a <tool_call> block naming the first
# tool — so the "model output" is known and shows that the tools reached the
# template. Checked with curl: a tool call comes back as message.tool_calls
# (content before it kept, arguments JSON text, finish_reason "tool_calls"),
# streamed as delta.tool_calls after the content chunks; without tools, or
# with tool_choice "none", the same text is plain content; a malformed block
# is content; messages with tool_calls and tool results are accepted; a
# built-in chat format refuses tools with a 400; tool_choice "required" and
# a named function read the (JSON) answer as the calls, streamed or not; the
# Responses API's function tools and function_call items, streamed or not;
# --tool-call-parser llama3_json (the answer as JSON calls, else content).
# Env: SD_BIN, SD_MODELS.
. "$(dirname "$0")/router_lib.sh"

cat >"$WORK/tmpl.jinja" <<'J'
{%- for m in messages %}{% if loop.last %}{{ m.content }}{% endif %}{% endfor -%}
{%- if tools %}<tool_call>
{"name": "{{ tools[0].function.name }}", "arguments": {"city": "Paris", "days": 2}}
</tool_call>{% endif -%}
J
start_router() { # start_router PORT CHAT_TEMPLATE [more router options]
  local port=$1 tmpl=$2; shift 2
  "$BIN/specd-router" --host 127.0.0.1 --port "$port" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
    --model-name tinycode-16m --chat-template "$tmpl" --health-interval-ms 200 "$@" >>"$WORK/router.log" 2>&1 &
  PIDS+=("$!")
}
VPORT=$(free_port); HPORT=$(free_port); HPORT2=$(free_port)
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 512 \
  >"$WORK/fv.log" 2>&1 &
PIDS+=("$!")
start_router "$HPORT" "$WORK/tmpl.jinja"
start_router "$HPORT2" chatml
URL=http://127.0.0.1:$HPORT
wait_health "$URL" || fail "router up"
wait_health "http://127.0.0.1:$HPORT2" || fail "second router up"

TOOLS='[{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'
# req STREAM EXTRA: a chat body asking "Sure." with max_tokens = its prompt's length (the echo is the prompt)
req() {
  local b; b=$("$PY" -c 'import json,sys
b={"messages":[{"role":"user","content":"Sure."}],"temperature":0,"stream":sys.argv[1]=="1"}
b.update(json.loads(sys.argv[2])); print(json.dumps(b))' "$1" "$2")
  local n; n=$(curl -s "$URL/tokenize" -H 'Content-Type: application/json' -d "$b" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["count"])')
  "$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b["max_tokens"]=int(sys.argv[2]); print(json.dumps(b))' \
    "$b" "$n"
}
post() { curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions"; }

st=$(post "$(req 0 "{\"tools\": $TOOLS}")" "$WORK/a.json")
check "a tool call: 200, finish_reason tool_calls (status $st)" \
  '[ "$st" = 200 ] && [ "$(jget "$WORK/a.json" "j[\"choices\"][0][\"finish_reason\"]")" = tool_calls ]'
"$PY" - "$WORK/a.json" >"$WORK/a.out" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
t = m["tool_calls"][0]
print(json.dumps([m["content"], t["type"], t["function"]["name"], json.loads(t["function"]["arguments"]),
                  t["id"].startswith("call_")]))
PY
check "... message.content is the text before it, tool_calls[0] names the tool with JSON-text arguments" \
  '[ "$(cat "$WORK/a.out")" = '"'"'["Sure.", "function", "get_weather", {"city": "Paris", "days": 2}, true]'"'"' ]' ||
  echo "#   got: $(head -c 400 "$WORK/a.json")"

curl -sN -H 'Content-Type: application/json' -d "$(req 1 "{\"tools\": $TOOLS}")" "$URL/v1/chat/completions" >"$WORK/s.sse"
"$PY" "$(dirname "$0")/chat_answer.py" "$WORK/s.sse" >"$WORK/s.out"
check "streamed: content \"Sure.\", then one delta.tool_calls, finish_reason tool_calls" \
  '[ "$(cat "$WORK/s.out")" = '"'"'["Sure.", [[0, "get_weather", {"city": "Paris", "days": 2}]], "tool_calls"]'"'"' ]' ||
  { echo "#   got: $(cat "$WORK/s.out")"; head -c 600 "$WORK/s.sse" | sed 's/^/#   /'; }

st=$(post "$(req 0 "{\"tools\": $TOOLS, \"tool_choice\": \"none\"}")" "$WORK/none.json")
check "tool_choice none: the tools stay out of the prompt, the answer is content (status $st)" \
  '[ "$st" = 200 ] && [ "$(jget "$WORK/none.json" "(j[\"choices\"][0][\"message\"][\"content\"], \"tool_calls\" in j[\"choices\"][0][\"message\"])")" = "('"'"'Sure.'"'"', False)" ]'

# a block that is not a call (the user's text itself): content, not a call
BADB='{"messages":[{"role":"user","content":"<tool_call>{\"name\": 5}</tool_call>"}],"tools":[{"type":"function","function":{"name":"f"}}],"temperature":0,"max_tokens":12}'
st=$(post "$BADB" "$WORK/bad.json")
check "a malformed block stays content (status $st)" \
  '[ "$st" = 200 ] && [ "$(jget "$WORK/bad.json" "(j[\"choices\"][0][\"message\"][\"content\"].startswith(\"<tool_call>\"), \"tool_calls\" in j[\"choices\"][0][\"message\"], j[\"choices\"][0][\"finish_reason\"])")" = "(True, False, '"'"'length'"'"')" ]' ||
  echo "#   got: $(head -c 400 "$WORK/bad.json")"

HIST='{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"Sunny."}],"temperature":0,"max_tokens":4}'
st=$(post "$HIST" "$WORK/hist.json")
check "a conversation with a tool call and its result: 200, the last message answered (status $st)" \
  '[ "$st" = 200 ] && [ "$(jget "$WORK/hist.json" "j[\"choices\"][0][\"message\"][\"content\"]")" = Sunny. ]'

st=$(curl -s -o "$WORK/fam.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":$TOOLS}" "http://127.0.0.1:$HPORT2/v1/chat/completions")
check "a built-in chat format (chatml) refuses tools: 400 naming messages (status $st)" \
  '[ "$st" = 400 ] && [ "$(jget "$WORK/fam.json" "\"chat template\" in j[\"error\"][\"message\"]")" = True ]'

# forced tool choice (required / a named function): the verifier constrains the output to JSON by a schema
# of the tools (the fake one does not: it echoes), and the router reads that JSON as the calls. A third
# router whose template writes the last message only: the answer is the user's text.
cat >"$WORK/echo.jinja" <<'J'
{%- for m in messages %}{% if loop.last %}{{ m.content }}{% endif %}{% endfor -%}
J
HPORT3=$(free_port)
start_router "$HPORT3" "$WORK/echo.jinja"
U3=http://127.0.0.1:$HPORT3
wait_health "$U3" || fail "third router up"
# forced STREAM CONTENT TOOL_CHOICE OUT: the answer to CONTENT with TOOLS and TOOL_CHOICE, summarised in OUT as
# [content, [[index, name, arguments]...], finish_reason] (streamed or not)
forced() {
  local b; b=$("$PY" -c 'import json,sys
b={"messages":[{"role":"user","content":sys.argv[2]}],"temperature":0,"stream":sys.argv[1]=="1",
   "tools":json.loads(sys.argv[4]),"tool_choice":json.loads(sys.argv[3])}
print(json.dumps(b))' "$1" "$2" "$3" "$TOOLS")
  local n; n=$(curl -s "$U3/tokenize" -H 'Content-Type: application/json' -d "$b" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["count"])')
  b=$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b["max_tokens"]=int(sys.argv[2]); print(json.dumps(b))' "$b" "$n")
  curl -sN -H 'Content-Type: application/json' -d "$b" "$U3/v1/chat/completions" >"$4.raw"
  "$PY" "$(dirname "$0")/chat_answer.py" "$4.raw" >"$4"
}
CALLS='[{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "get_weather", "parameters": {}}]'
for sm in 0 1; do
  forced "$sm" "$CALLS" '"required"' "$WORK/req$sm.out"
  check "tool_choice required (stream $sm): the JSON answer is the calls, no content, finish_reason tool_calls" \
    '[ "$(cat "$WORK/req$sm.out")" = '"'"'[null, [[0, "get_weather", {"city": "Oslo"}], [1, "get_weather", {}]], "tool_calls"]'"'"' ]' ||
    { echo "#   got: $(cat "$WORK/req$sm.out")"; head -c 400 "$WORK/req$sm.out.raw" | sed 's/^/#   /'; }
  forced "$sm" '{"city": "Rome", "days": 3}' '{"type": "function", "function": {"name": "get_weather"}}' \
    "$WORK/named$sm.out"
  check "a named function (stream $sm): the answer is its arguments, finish_reason stop (as OpenAI)" \
    '[ "$(cat "$WORK/named$sm.out")" = '"'"'[null, [[0, "get_weather", {"city": "Rome", "days": 3}]], "stop"]'"'"' ]' ||
    { echo "#   got: $(cat "$WORK/named$sm.out")"; head -c 400 "$WORK/named$sm.out.raw" | sed 's/^/#   /'; }
done
forced 0 'no JSON here' '"required"' "$WORK/nojson.out"
check "an answer that is no call (the fake verifier does not constrain) comes back as content" \
  '[ "$(cat "$WORK/nojson.out")" = '"'"'["no JSON here", [], "length"]'"'"' ]' || echo "#   got: $(cat "$WORK/nojson.out")"

# /v1/responses: function tools (Responses' shape) go the same way; calls come back as function_call output
# items, streamed as output_item.added / function_call_arguments.delta / .done / output_item.done events
# resp BASE STREAM INPUT TOOL_CHOICE OUT: a Responses request with TOOLS in Responses' shape, max_output_tokens the
# prompt's length (the fake verifier echoes it)
resp() {
  local t; t=$("$PY" -c 'import json,sys; print(json.dumps([dict(type="function", **t["function"]) for t in json.loads(sys.argv[1])]))' "$TOOLS")
  local n; n=$(curl -s "$1/tokenize" -H 'Content-Type: application/json' -d "$("$PY" -c 'import json,sys
print(json.dumps({"messages":[{"role":"user","content":sys.argv[1]}],"tools":json.loads(sys.argv[2])}))' "$3" "$TOOLS")" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["count"])')
  curl -sN -H 'Content-Type: application/json' -d "$("$PY" -c 'import json,sys
print(json.dumps({"input":sys.argv[1],"tools":json.loads(sys.argv[2]),"tool_choice":json.loads(sys.argv[3]),
"stream":sys.argv[4]=="1","max_output_tokens":int(sys.argv[5]),"temperature":0}))' "$3" "$t" "$4" "$2" "$n")" \
    "$1/v1/responses" >"$5"
}
# the response's [message text or null, [[name, arguments]...], status] (streamed: from the events, and the
# final response.completed must agree)
cat >"$WORK/resp.py" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
def summary(o):
    text = [c["text"] for it in o["output"] if it["type"] == "message" for c in it["content"]]
    calls = [[it["name"], json.loads(it["arguments"])] for it in o["output"] if it["type"] == "function_call"]
    return [("".join(text) or None), calls, o["status"]]
if raw.startswith("event: "):
    ev = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ")]
    done = [e for e in ev if e["type"] == "response.function_call_arguments.done"]
    added = [e["item"]["name"] for e in ev if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    final = summary([e for e in ev if e["type"] == "response.completed"][0]["response"])
    assert [c[0] for c in final[1]] == added and [json.loads(e["arguments"]) for e in done] == [c[1] for c in final[1]], ev
    print(json.dumps(final))
else:
    print(json.dumps(summary(json.loads(raw))))
PY
for sm in 0 1; do
  resp "$URL" "$sm" "Sure." '"auto"' "$WORK/r$sm.raw"
  check "Responses API with function tools (stream $sm): the text, then a function_call item" \
    '[ "$("$PY" "$WORK/resp.py" "$WORK/r$sm.raw")" = '"'"'["Sure.", [["get_weather", {"city": "Paris", "days": 2}]], "completed"]'"'"' ]' ||
    { echo "#   got: $("$PY" "$WORK/resp.py" "$WORK/r$sm.raw")"; head -c 600 "$WORK/r$sm.raw" | sed 's/^/#   /'; }
done
resp "$U3" 0 "$CALLS" '"required"' "$WORK/rq.raw"
check "Responses API, tool_choice required: function_call items only" \
  '[ "$("$PY" "$WORK/resp.py" "$WORK/rq.raw")" = '"'"'[null, [["get_weather", {"city": "Oslo"}], ["get_weather", {}]], "completed"]'"'"' ]' ||
  { echo "#   got: $(head -c 600 "$WORK/rq.raw")"; }
HISTR='{"input": [{"role": "user", "content": "weather?"}, {"type": "function_call", "call_id": "c1", "name": "get_weather",
  "arguments": "{\"city\": \"Paris\"}"}, {"type": "function_call_output", "call_id": "c1", "output": "Sunny."}],
  "max_output_tokens": 4, "temperature": 0}'
st=$(curl -s -o "$WORK/rh.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "$HISTR" "$URL/v1/responses")
check "Responses API, a function call and its output in the input: the last item answered, up to max_output_tokens (status $st)" \
  '[ "$st" = 200 ] && [ "$("$PY" "$WORK/resp.py" "$WORK/rh.json")" = '"'"'["Sunny.", [], "incomplete"]'"'"' ]' ||
  echo "#   got: $(head -c 400 "$WORK/rh.json")"

# --tool-call-parser llama3_json (mistral reads the same): the whole answer is JSON calls, else content
HPORT4=$(free_port)
start_router "$HPORT4" "$WORK/echo.jinja" --tool-call-parser llama3_json
U4=http://127.0.0.1:$HPORT4
wait_health "$U4" || fail "fourth router up"
jsonfmt() { # jsonfmt STREAM CONTENT OUT: tool_choice auto through the fourth router
  local save=$U3; U3=$U4; forced "$1" "$2" '"auto"' "$3"; U3=$save
}
for sm in 0 1; do
  jsonfmt "$sm" '{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_weather", "parameters": {}}' \
    "$WORK/l$sm.out"
  check "llama3_json (stream $sm): objects with parameters are the calls, finish_reason tool_calls" \
    '[ "$(cat "$WORK/l$sm.out")" = '"'"'[null, [[0, "get_weather", {"city": "Oslo"}], [1, "get_weather", {}]], "tool_calls"]'"'"' ]' ||
    echo "#   got: $(cat "$WORK/l$sm.out")"
  jsonfmt "$sm" '[{"name": "get_weather", "arguments": {"city": "Rome"}}]' "$WORK/m$sm.out"
  check "... an array of calls with arguments (Mistral's) too (stream $sm)" \
    '[ "$(cat "$WORK/m$sm.out")" = '"'"'[null, [[0, "get_weather", {"city": "Rome"}]], "tool_calls"]'"'"' ]' ||
    echo "#   got: $(cat "$WORK/m$sm.out")"
  jsonfmt "$sm" 'It is sunny.' "$WORK/p$sm.out"
  check "... other text is content (stream $sm)" \
    '[ "$(cat "$WORK/p$sm.out")" = '"'"'["It is sunny.", [], "length"]'"'"' ]' || echo "#   got: $(cat "$WORK/p$sm.out")"
done

if [ "$FAILS" -ne 0 ]; then
  echo "--- router log"; tail -n 30 "$WORK/router.log"; echo "$FAILS check(s) failed"; exit 1
fi
echo "all tool-call checks passed"
