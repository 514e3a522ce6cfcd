#!/usr/bin/env bash
# test_logits_processors.sh — logit_bias (OpenAI), allowed_token_ids and
# min_tokens (vLLM) through `specd serve` with a draft model:
#   - greedy (non-streamed and streamed) and sampled (match, seed 42) output
#     with all three equals `specd-generate` on the target alone with the same
#     settings (the verifier applies them to every row it verifies; the
#     drafter drafts without them), pipelined and serial with 4 drafts a step;
#   - a bias of 100 forces a token (completions and chat);
#   - min_tokens holds back stop_token_ids (and EOS) and stop strings: a stop
#     id ends a request at its first occurrence, with min_tokens 20 not
#     before 20 tokens; a stop string is looked for after the first
#     min_tokens;
#   - ids outside the vocabulary, bad biases and min_tokens > max_tokens are
#     400s in the OpenAI shape naming the field;
#   - JSON output (response_format json_object and json_schema, the same
#     machinery): greedy and sampled (match) equal `specd-generate
#     --response-format json_object` / `--json-schema`, pipelined and serial;
#     output that stopped by itself is one JSON object (Python's json reads
#     it; chat, the references) and, by a schema, one the schema accepts
#     (checked here in Python), what ran out of tokens starts one; the
#     Responses API's text.format json_object / json_schema too (the schema
#     bounds an integer and a number); structured_outputs with
#     disable_any_whitespace: no whitespace outside strings, == specd-generate
#     --disable-any-whitespace; a schema outside the subset is a 400 naming
#     the keyword.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

PROMPT="def fibonacci(n):"
# jsoncheck.py KIND FILE...: each answer (KIND gen: specd-generate --json, chat, resp; KIND+schema: by
# SCHEMA below) holds a JSON object when it stopped by itself (by SCHEMA: one it accepts); one that ran out
# of tokens starts one (that it is a prefix of one is the unit tests' part: test_json_mask, test_spec)
SCHEMA='{"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "version": {"type":
 "integer", "minimum": 2, "maximum": 40}, "score": {"type": "number", "minimum": 0, "maximum": 1}, "tags":
 {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["name", "version"]}'
echo "$SCHEMA" >"$WORK/schema.json"
cat >"$WORK/jsoncheck.py" <<'PY'
import json, sys
kind, by_schema = sys.argv[1].split("+")[0], sys.argv[1].endswith("+schema")
def schema_ok(o):
    assert set(o) <= {"name", "version", "score", "tags"} and {"name", "version"} <= set(o), o
    assert "score" not in o or (isinstance(o["score"], (int, float)) and 0 <= o["score"] <= 1), o
    assert isinstance(o["name"], str) and len(o["name"]) <= 16, o
    assert isinstance(o["version"], int) and not isinstance(o["version"], bool) and 2 <= o["version"] <= 40, o
    assert "tags" not in o or (len(o["tags"]) <= 3 and set(o["tags"]) <= {"a", "b", "c"}), o
for path in sys.argv[2:]:
    j = json.load(open(path, encoding="utf-8"))
    if kind == "gen":
        t, done = j["text"], j["finish_reason"] == "stop"
    elif kind == "chat":
        t, done = j["choices"][0]["message"]["content"], j["choices"][0]["finish_reason"] == "stop"
    else:
        t, done = j["output"][0]["content"][0]["text"], j["status"] == "completed"
    assert t.startswith("{"), (path, t)
    if done:
        assert isinstance(json.loads(t), dict), (path, t)
        if by_schema:
            schema_ok(json.loads(t))
PY
# nows.py FILE: no whitespace outside the JSON strings of FILE
cat >"$WORK/nows.py" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
outside = re.sub(r'"(\\.|[^"\\])*"', "", text)
sys.exit(1 if re.search(r"\s", outside) else 0)
PY
# the target's greedy tokens: the lists below name tokens it really produces
"$BIN/specd-generate" --model "$TARGET" --prompt "$PROMPT" --threads 1 --json --max-tokens 64 --ignore-eos \
  >"$WORK/plain.json" 2>"$WORK/plain.err" || { fail "specd-generate plain"; cat "$WORK/plain.err"; }
T=($(jget "$WORK/plain.json" '" ".join(str(t) for t in j["tokens"])'))
[ "${#T[@]}" = 64 ] || { fail "64 reference tokens (got ${#T[@]})"; finish; }
ALLOWED=$("$PY" -c 'import sys; t=[int(x) for x in sys.argv[1:]]; print(",".join(str(x) for x in sorted(set(t) - {t[7]} | {13})))' "${T[@]}")
BIAS="${T[0]}=-100,${T[5]}=-3,13=2"
GEN_OPTS=(--logit-bias "$BIAS" --allowed-token-ids "$ALLOWED" --min-tokens 20)
JSON_OPTS=$("$PY" -c 'import json,sys
ids=[int(x) for x in sys.argv[2].split(",")]
bias={k: float(v) for k, v in (kv.split("=") for kv in sys.argv[1].split(","))}
print(json.dumps({"logit_bias": bias, "allowed_token_ids": ids, "min_tokens": 20}))' "$BIAS" "$ALLOWED")

JSON_PROMPTS=("import json" "config = " "def f():")
# the two formats: specd-generate's options, the API's response_format, the files' tag
FMT_GEN=("--response-format json_object" "--json-schema @$WORK/schema.json")
FMT_API=('{"type": "json_object"}' "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"cfg\", \"schema\": $SCHEMA}}")
FMT_TAG=(json schema)
for k in 0 1; do
  tag=${FMT_TAG[$k]}
  for i in "${!JSON_PROMPTS[@]}"; do
    # shellcheck disable=SC2086 # the options split into words
    reference "${JSON_PROMPTS[$i]}" "$WORK/ref.$tag.$i" --max-tokens 48 ${FMT_GEN[$k]} ||
      { fail "specd-generate ${FMT_GEN[$k]} reference $i"; cat "$WORK/ref.$tag.$i.err"; }
    # shellcheck disable=SC2086
    reference "${JSON_PROMPTS[$i]}" "$WORK/ref.${tag}s.$i" --max-tokens 48 ${FMT_GEN[$k]} \
      --temperature 0.8 --seed 42 || fail "specd-generate ${FMT_GEN[$k]} sampled reference $i"
  done
  kind=gen
  [ "$tag" = schema ] && kind=gen+schema
  check "JSON references ($tag): the objects that ended parse (one at least), the others start one" \
    '"$PY" "$WORK/jsoncheck.py" $kind "$WORK"/ref.$tag.?.json "$WORK"/ref.${tag}s.?.json &&
     [ "$(cat "$WORK"/ref.$tag.?.json "$WORK"/ref.${tag}s.?.json | grep -c "\"finish_reason\":\"stop\"")" -ge 1 ]'
done
reference "$PROMPT" "$WORK/ref.greedy" --max-tokens 64 --ignore-eos "${GEN_OPTS[@]}" ||
  { fail "specd-generate greedy reference"; cat "$WORK/ref.greedy.err"; }
reference "$PROMPT" "$WORK/ref.sampled" --max-tokens 64 --ignore-eos --temperature 0.8 --seed 42 "${GEN_OPTS[@]}" ||
  { fail "specd-generate sampled reference"; cat "$WORK/ref.sampled.err"; }
check "the settings change the target's output" '! cmp -s "$WORK/ref.greedy" <(jget "$WORK/plain.json" "j[\"text\"]" | head -c -1)'
check "the reference keeps to the lists (no ${T[0]}, no ${T[7]})" \
  '[ "$(jget "$WORK/ref.greedy.json" "any(t in ('"${T[0]}, ${T[7]}"') for t in j[\"tokens\"])")" = False ]'

run_mode() {
  local mode=$1; shift
  if ! serve_start --draft "$DRAFT" "$@"; then fail "[$mode] specd serve came up"; return; fi
  local f=$WORK/$mode st
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "$JSON_OPTS")" "$f.json")
  check "[$mode] greedy with logit_bias, allowed_token_ids, min_tokens == specd-generate (status $st)" \
    '[ "$st" = 200 ] && text_of "$f.json" "$f.txt" && cmp -s "$f.txt" "$WORK/ref.greedy"' ||
    { echo "#   got:  $(head -c 300 "$f.json")"; echo "#   want: $(head -c 300 "$WORK/ref.greedy")"; }
  curl -sN -H 'Content-Type: application/json' -d "$(body "$PROMPT" 64 1 "$JSON_OPTS")" "$URL/v1/completions" >"$f.sse"
  check "[$mode] the same streamed" 'sse_text "$f.sse" "$f.stxt" && cmp -s "$f.stxt" "$WORK/ref.greedy"'
  local sj; sj=$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1]); b.update(temperature=0.8, seed=42,
speculative={"verify": "match"}); print(json.dumps(b))' "$JSON_OPTS")
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "$sj")" "$f.s.json")
  check "[$mode] sampled (match, seed 42) == specd-generate (status $st)" \
    '[ "$st" = 200 ] && text_of "$f.s.json" "$f.s.txt" && cmp -s "$f.s.txt" "$WORK/ref.sampled"' ||
    { echo "#   got:  $(head -c 300 "$f.s.json")"; echo "#   want: $(head -c 300 "$WORK/ref.sampled")"; }
  check "[$mode] speculative stats present" '[ "$(jget "$f.json" "j[\"speculative\"][\"steps\"] > 0")" = True ]'
  local i k tag
  for k in 0 1; do
    tag=${FMT_TAG[$k]}
    for i in "${!JSON_PROMPTS[@]}"; do
      st=$(post /v1/completions "$(body "${JSON_PROMPTS[$i]}" 48 0 "{\"response_format\": ${FMT_API[$k]},
        \"ignore_eos\": false}")" "$f.$tag$i.json")
      check "[$mode] JSON output ($tag), prompt $i, greedy == specd-generate (status $st)" \
        '[ "$st" = 200 ] && text_of "$f.$tag$i.json" "$f.$tag$i.txt" && cmp -s "$f.$tag$i.txt" "$WORK/ref.$tag.$i"' ||
        { echo "#   got:  $(head -c 300 "$f.$tag$i.json")"; echo "#   want: $(head -c 300 "$WORK/ref.$tag.$i")"; }
      st=$(post /v1/completions "$(body "${JSON_PROMPTS[$i]}" 48 0 "{\"response_format\": ${FMT_API[$k]},
        \"ignore_eos\": false, \"temperature\": 0.8, \"seed\": 42, \"speculative\": {\"verify\": \"match\"}}")" \
        "$f.${tag}s$i.json")
      check "[$mode] JSON output ($tag), prompt $i, sampled (match) == specd-generate (status $st)" \
        '[ "$st" = 200 ] && text_of "$f.${tag}s$i.json" "$f.${tag}s$i.txt" &&
         cmp -s "$f.${tag}s$i.txt" "$WORK/ref.${tag}s.$i"'
    done
  done
  serve_stop
}

run_mode pipelined
run_mode serial-static --spec-pipeline off --spec-adaptive off --num-draft 4

if serve_start --draft "$DRAFT"; then
  st=$(post /v1/completions "$(body "$PROMPT" 5 0 '{"logit_bias": {"13": 100}}')" "$WORK/force.json")
  check "a bias of 100 forces token 13 (\"-\") five times (status $st)" \
    '[ "$st" = 200 ] && [ "$(jget "$WORK/force.json" "j[\"choices\"][0][\"text\"]")" = "-----" ]'
  st=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0,
    "logit_bias": {"13": 100}}' "$WORK/chat.json")
  check "... on chat too (status $st)" \
    '[ "$st" = 200 ] && [ "$(jget "$WORK/chat.json" "j[\"choices\"][0][\"message\"][\"content\"]")" = "-----" ]'
  first=$("$PY" -c 'import sys; print(sys.argv[2:].index(sys.argv[1]) + 1)' "${T[2]}" "${T[@]}")
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "{\"stop_token_ids\": [${T[2]}]}")" "$WORK/stopid.json")
  check "stop id ${T[2]} ends the request after $first token(s) (status $st)" \
    '[ "$(jget "$WORK/stopid.json" "(j[\"usage\"][\"completion_tokens\"], j[\"choices\"][0][\"finish_reason\"])")" = "($first, '"'"'stop'"'"')" ]'
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "{\"stop_token_ids\": [${T[2]}], \"min_tokens\": 20}")" "$WORK/minstop.json")
  check "with min_tokens 20, not before 20 tokens (status $st)" \
    '[ "$st" = 200 ] && [ "$(jget "$WORK/minstop.json" "j[\"usage\"][\"completion_tokens\"] >= 20")" = True ]'
  STOP_TEXT=$(jget "$WORK/plain.json" 'j["text"].split()[1]')
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "{\"stop\": [\"$STOP_TEXT\"]}")" "$WORK/stopstr.json")
  n1=$(jget "$WORK/stopstr.json" 'j["usage"]["completion_tokens"]')
  st=$(post /v1/completions "$(body "$PROMPT" 64 0 "{\"stop\": [\"$STOP_TEXT\"], \"min_tokens\": 20}")" "$WORK/minstr.json")
  n2=$(jget "$WORK/minstr.json" 'j["usage"]["completion_tokens"]')
  check "a stop string ('$STOP_TEXT') ends the request at $n1 tokens, with min_tokens 20 after 20 ($n2)" \
    '[ "$n1" -lt 20 ] && [ "$n2" -gt 20 ]'
  st=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "a config file"}], "max_tokens": 64,
    "temperature": 0.7, "seed": 3, "response_format": {"type": "json_object"}}' "$WORK/chatjson.json")
  check "chat with response_format json_object: a JSON object, or the start of one (status $st)" \
    '[ "$st" = 200 ] && "$PY" "$WORK/jsoncheck.py" chat "$WORK/chatjson.json"' ||
    echo "#   got: $(head -c 300 "$WORK/chatjson.json")"
  st=$(post /v1/responses \
    '{"input": "settings", "max_output_tokens": 40, "text": {"format": {"type": "json_object"}}}' \
    "$WORK/resp.json")
  check "Responses API, text.format json_object: the same, the format echoed (status $st)" \
    '[ "$st" = 200 ] && "$PY" "$WORK/jsoncheck.py" resp "$WORK/resp.json" &&
     [ "$(jget "$WORK/resp.json" "j[\"text\"][\"format\"][\"type\"]")" = json_object ]'
  st=$(post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"a package\"}], \"max_tokens\": 64,
    \"temperature\": 0.7, \"seed\": 5, \"response_format\": ${FMT_API[1]}}" "$WORK/chatschema.json")
  check "chat with response_format json_schema: an object the schema accepts, or the start of one (status $st)" \
    '[ "$st" = 200 ] && "$PY" "$WORK/jsoncheck.py" chat+schema "$WORK/chatschema.json"' ||
    echo "#   got: $(head -c 300 "$WORK/chatschema.json")"
  st=$(post /v1/responses "{\"input\": \"settings\", \"max_output_tokens\": 40, \"text\": {\"format\": {\"type\":
    \"json_schema\", \"name\": \"cfg\", \"strict\": true, \"schema\": $SCHEMA}}}" "$WORK/respschema.json")
  check "Responses API, text.format json_schema: the same, the format echoed (status $st)" \
    '[ "$st" = 200 ] && "$PY" "$WORK/jsoncheck.py" resp+schema "$WORK/respschema.json" &&
     [ "$(jget "$WORK/respschema.json" "j[\"text\"][\"format\"][\"type\"]")" = json_schema ]'
  reference "${JSON_PROMPTS[1]}" "$WORK/ref.compact" --max-tokens 48 --json-schema "@$WORK/schema.json" \
    --disable-any-whitespace || fail "specd-generate --disable-any-whitespace reference"
  st=$(post /v1/completions "$(body "${JSON_PROMPTS[1]}" 48 0 "{\"structured_outputs\": {\"json\": $SCHEMA,
    \"disable_any_whitespace\": true}, \"ignore_eos\": false}")" "$WORK/compact.json")
  check "disable_any_whitespace == specd-generate, no whitespace outside strings (some without it)" \
    '[ "$st" = 200 ] && text_of "$WORK/compact.json" "$WORK/compact.txt" &&
     cmp -s "$WORK/compact.txt" "$WORK/ref.compact" && "$PY" "$WORK/nows.py" "$WORK/compact.txt" &&
     ! "$PY" "$WORK/nows.py" "$WORK/ref.schema.1"' ||
    echo "#   got: $(head -c 300 "$WORK/compact.json")"
  BADSCHEMA='{"response_format": {"type": "json_schema", "json_schema": {"schema": {"pattern": "[a-z]+"}}}}'
  expect_400s "$PROMPT" 64 "$BADSCHEMA|response_format|'pattern' is not supported" \
    '{"structured_outputs": {"grammar": "root ::= x"}}|structured_outputs|not supported' \
    '{"logit_bias": {"8192": 1}}|logit_bias|out of range' \
    '{"logit_bias": {"5": -101}}|logit_bias|between -100 and 100' \
    '{"logit_bias": {"x": 1}}|logit_bias|token ids' \
    '{"allowed_token_ids": [1, 99999]}|allowed_token_ids|out of range' \
    '{"allowed_token_ids": []}|allowed_token_ids|non-empty' \
    '{"min_tokens": 65}|min_tokens|must not exceed'
  serve_stop
else
  fail "specd serve came up"
fi
finish
