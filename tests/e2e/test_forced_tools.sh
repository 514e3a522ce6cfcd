#!/usr/bin/env bash
# test_forced_tools.sh — tool_choice "required" and a named function through
# `specd serve` with the demo pair and a chat template that lists the tools
# (--router-arg --chat-template=FILE): the verifier constrains the output to
# JSON by a schema of the tools, so the demo model — which knows nothing of
# tools — still answers with calls the tools accept:
#   - required (with parallel_tool_calls false: the tiny demo model would
#     repeat calls until max_tokens), greedy: one call, finish_reason
#     "tool_calls", naming a tool, its arguments satisfying that tool's
#     parameters (checked here in Python); streamed, the same call in one
#     delta.tool_calls chunk;
#   - a named function: its arguments, finish_reason "stop";
#   - speculative == not speculative (greedy, and sampled with verify
#     "match").
# Several calls in one answer are test_tool_calls.sh's (through the fake
# verifier) and test_http_api's (the schema accepts them).
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

# (the demo model writes code: the prompt ends as Python would before a list of calls)
cat >"$WORK/tools.jinja" <<'J'
{%- for m in messages %}# {{ m.role }}: {{ m.content }}
{% endfor %}{% if tools %}calls = {% endif %}
J
TOOLS='[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties":
  {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties":
  {"tz": {"enum": ["UTC", "CET", "PST"]}}, "required": ["tz"]}}}]'
# calls.py FILE: the answer as chat_answer.py gives it, after checking that every call names a tool and
# that its arguments satisfy the tool's parameters
cat >"$WORK/calls.py" <<'PY'
import json, subprocess, sys
out = subprocess.run([sys.executable, sys.argv[2], sys.argv[1]], capture_output=True, text=True, check=True).stdout
for _, name, args in json.loads(out)[1]:
    if name == "get_weather":
        assert set(args) <= {"city", "days"} and isinstance(args["city"], str) and len(args["city"]) <= 20, args
        assert "days" not in args or (isinstance(args["days"], int) and not isinstance(args["days"], bool)), args
    else:
        assert name == "get_time" and set(args) == {"tz"} and args["tz"] in ("UTC", "CET", "PST"), (name, args)
sys.stdout.write(out)
PY
calls() { "$PY" "$WORK/calls.py" "$1" "$(dirname "$0")/chat_answer.py"; }
# ask OUT TOOL_CHOICE [extra JSON members]: a chat request with the tools
ask() {
  local b; b=$("$PY" -c 'import json,sys
b={"messages":[{"role":"user","content":"What is the weather in Paris, and the time?"}],"max_tokens":160,
   "temperature":0,"tools":json.loads(sys.argv[1]),"tool_choice":json.loads(sys.argv[2]),"parallel_tool_calls":False}
b.update(json.loads(sys.argv[3])); print(json.dumps(b))' "$TOOLS" "$2" "${3:-{\}}")
  post /v1/chat/completions "$b" "$1"
}

if serve_start --draft "$DRAFT" --router-arg "--chat-template=$WORK/tools.jinja"; then
  st=$(ask "$WORK/req.json" '"required"')
  check "required, greedy: one call the tools accept, finish_reason tool_calls (status $st)" \
    '[ "$st" = 200 ] && calls "$WORK/req.json" >"$WORK/req.out" &&
     [ "$(jget "$WORK/req.json" "(j[\"choices\"][0][\"finish_reason\"], len(j[\"choices\"][0][\"message\"][\"tool_calls\"]))")" \
       = "('"'"'tool_calls'"'"', 1)" ]' ||
    echo "#   got: $(head -c 600 "$WORK/req.json")"
  echo "# calls: $(cat "$WORK/req.out")"
  st=$(ask "$WORK/req.nospec.json" '"required"' '{"speculative": {"enabled": false}}')
  check "... the same without speculation" \
    'calls "$WORK/req.nospec.json" | cmp -s - "$WORK/req.out"'
  ask "$WORK/req.sse" '"required"' '{"stream": true}' >/dev/null
  check "... streamed: the same calls, no content" \
    'calls "$WORK/req.sse" | cmp -s - "$WORK/req.out"'
  SPEC=('{"verify": "match"}' '{"verify": "match", "enabled": false}')
  for k in 0 1; do
    ask "$WORK/smp.$k.json" '"required"' "{\"temperature\": 0.8, \"seed\": 7, \"speculative\": ${SPEC[$k]}}" >/dev/null
    calls "$WORK/smp.$k.json" >"$WORK/smp.$k" ||
      echo "#   not calls: $(head -c 400 "$WORK/smp.$k.json")"
  done
  check "required, sampled (seed 7, verify match): speculative == not, a call the tools accept" \
    'cmp -s "$WORK/smp.0" "$WORK/smp.1" && grep -q "\"tool_calls\"\]$" "$WORK/smp.0"' ||
    echo "#   got: $(cat "$WORK"/smp.0 "$WORK"/smp.1)"
  st=$(ask "$WORK/named.json" '{"type": "function", "function": {"name": "get_time"}}')
  check "a named function: its arguments, finish_reason stop (status $st)" \
    '[ "$st" = 200 ] && calls "$WORK/named.json" >"$WORK/named.out" &&
     [ "$("$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); print(c[0], len(c[1]), c[1][0][1], c[2])" \
           "$WORK/named.out")" = "None 1 get_time stop" ]' ||
    echo "#   got: $(head -c 600 "$WORK/named.json")"
  serve_stop
else
  fail "specd serve came up"
fi
finish
