#!/usr/bin/env bash
# test_regex_output.sh — output by a regular expression or a list of choices
# (vLLM's guided_regex / guided_choice and structured_outputs regex / choice)
# through `specd serve` with a draft model, pipelined and serial:
#   - greedy and sampled (match, seed 42) output equals `specd-generate
#     --regex` / `--choice` on the target alone (the verifier masks every row
#     it verifies, the drafter drafts under the same mask);
#   - output that stopped by itself is matched whole by the expression
#     (Python's re.fullmatch), a choice is one of the choices; at least one
#     reference stops by itself;
#   - streamed == not streamed; chat with guided_choice answers one choice;
#   - a pattern that does not compile, one with a back-reference, a grammar,
#     two formats at once: 400s in the OpenAI shape naming the field.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

PROMPTS=("def fibonacci(n):" $'def quicksort(arr):\n    if len(arr) <= 1:'
         $'class Config(object):\n    def __init__(self):\n')
R1=$'\\n    (return|raise|yield) [a-z_]{1,16}(\\([a-z_, ]{0,24}\\))?\\n'
R2='( {4}[a-z_]{1,12} = [a-z0-9_.()+*, -]{1,30}\n){1,3}'
CHOICES=("True" "False" "None" "x + y" "n.a.")
CHOICES_JSON=$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${CHOICES[@]}")
# the formats: specd-generate's options, the request's member, the files' tag
GEN_CHOICE=()
for c in "${CHOICES[@]}"; do GEN_CHOICE+=(--choice "$c"); done
TAGS=(r1 r2 choice)
api_member() {
  case $1 in
    r1) "$PY" -c 'import json,sys; print(json.dumps({"guided_regex": sys.argv[1]}))' "$R1" ;;
    r2) "$PY" -c 'import json,sys; print(json.dumps({"structured_outputs": {"regex": sys.argv[1]}}))' "$R2" ;;
    choice) echo "{\"guided_choice\": $CHOICES_JSON}" ;;
  esac
}
gen_opts() {
  case $1 in
    r1) GEN=(--regex "$R1") ;;
    r2) GEN=(--regex "$R2") ;;
    choice) GEN=("${GEN_CHOICE[@]}") ;;
  esac
}
# rxcheck.py TAG FILE...: each answer that stopped by itself is matched whole
cat >"$WORK/rxcheck.py" <<'PY'
import json, re, sys
tag, pats = sys.argv[1], {"r1": sys.argv[2], "r2": sys.argv[3]}
choices = json.loads(sys.argv[4])
for path in sys.argv[5:]:
    j = json.load(open(path, encoding="utf-8"))
    if "choices" in j:
        c = j["choices"][0]
        t, done = c["message"]["content"] if "message" in c else c["text"], c["finish_reason"] == "stop"
    else:
        t, done = j["text"], j["finish_reason"] == "stop"
    if done:
        ok = t in choices if tag == "choice" else re.fullmatch(pats[tag], t) is not None
        assert ok, (path, t)
PY
rxcheck() { "$PY" "$WORK/rxcheck.py" "$1" "$R1" "$R2" "$CHOICES_JSON" "${@:2}"; }

for tag in "${TAGS[@]}"; do
  gen_opts "$tag"
  for i in "${!PROMPTS[@]}"; do
    reference "${PROMPTS[$i]}" "$WORK/ref.$tag.$i" --max-tokens 40 "${GEN[@]}" ||
      { fail "specd-generate $tag reference $i"; cat "$WORK/ref.$tag.$i.err"; }
    reference "${PROMPTS[$i]}" "$WORK/ref.${tag}s.$i" --max-tokens 40 --temperature 0.8 --seed 42 "${GEN[@]}" ||
      fail "specd-generate $tag sampled reference $i"
  done
  check "references ($tag): those that stopped are matched whole (one at least)" \
    'rxcheck $tag "$WORK"/ref.$tag.?.json "$WORK"/ref.${tag}s.?.json &&
     [ "$(cat "$WORK"/ref.$tag.?.json "$WORK"/ref.${tag}s.?.json | grep -c "\"finish_reason\":\"stop\"")" -ge 1 ]'
done

run_mode() {
  local mode=$1; shift
  if ! serve_start --draft "$DRAFT" "$@"; then fail "[$mode] specd serve came up"; return; fi
  local f=$WORK/$mode st tag i m
  for tag in "${TAGS[@]}"; do
    m=$(api_member "$tag")
    for i in "${!PROMPTS[@]}"; do
      st=$(post /v1/completions "$(body "${PROMPTS[$i]}" 40 0 "$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1])
b.update(ignore_eos=False); print(json.dumps(b))' "$m")")" "$f.$tag$i.json")
      check "[$mode] $tag, prompt $i, greedy == specd-generate (status $st)" \
        '[ "$st" = 200 ] && text_of "$f.$tag$i.json" "$f.$tag$i.txt" && cmp -s "$f.$tag$i.txt" "$WORK/ref.$tag.$i"' ||
        { echo "#   got:  $(head -c 300 "$f.$tag$i.json")"; echo "#   want: $(head -c 300 "$WORK/ref.$tag.$i")"; }
      st=$(post /v1/completions "$(body "${PROMPTS[$i]}" 40 0 "$("$PY" -c 'import json,sys; b=json.loads(sys.argv[1])
b.update(ignore_eos=False, temperature=0.8, seed=42, speculative={"verify": "match"}); print(json.dumps(b))' "$m")")" \
        "$f.${tag}s$i.json")
      check "[$mode] $tag, prompt $i, sampled (match) == specd-generate (status $st)" \
        '[ "$st" = 200 ] && text_of "$f.${tag}s$i.json" "$f.${tag}s$i.txt" &&
         cmp -s "$f.${tag}s$i.txt" "$WORK/ref.${tag}s.$i"'
    done
  done
  serve_stop
}

run_mode pipelined
run_mode serial-static --spec-pipeline off --spec-adaptive off --num-draft 4

if serve_start --draft "$DRAFT"; then
  m=$("$PY" -c 'import json,sys; print(json.dumps({"guided_regex": sys.argv[1], "ignore_eos": False}))' "$R2")
  curl -sN -H 'Content-Type: application/json' -d "$(body "${PROMPTS[2]}" 40 1 "$m")" "$URL/v1/completions" \
    >"$WORK/stream.sse"
  check "streamed == not streamed" 'sse_text "$WORK/stream.sse" "$WORK/stream.txt" &&
    cmp -s "$WORK/stream.txt" "$WORK/ref.r2.2"'
  st=$(post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Is 2 + 2 = 4?\"}],
    \"max_tokens\": 8, \"temperature\": 0.7, \"seed\": 1, \"guided_choice\": $CHOICES_JSON}" "$WORK/chat.json")
  check "chat with guided_choice: one of the choices, finish_reason stop (status $st)" \
    '[ "$st" = 200 ] && rxcheck choice "$WORK/chat.json" &&
     [ "$(jget "$WORK/chat.json" "j[\"choices\"][0][\"finish_reason\"]")" = stop ]' ||
    echo "#   got: $(head -c 300 "$WORK/chat.json")"
  expect_400s "${PROMPTS[0]}" 16 '{"guided_regex": "(a"}|guided_regex|does not compile: missing closing parenthesis' \
    '{"structured_outputs": {"regex": "(a)\\1"}}|structured_outputs|back-references' \
    '{"structured_outputs": {"regex": "(?=ab)a."}}|structured_outputs|lookaround assertions' \
    '{"structured_outputs": {"grammar": "root ::= x"}}|structured_outputs|grammar' \
    '{"guided_choice": "yes"}|guided_choice|array of 1 to' \
    '{"guided_regex": "a", "response_format": {"type": "json_object"}}|response_format|give one of'
  serve_stop
else
  fail "specd serve came up"
fi
finish
