#!/usr/bin/env bash
# test_random_weights.sh — `specd serve --random-weights`: a target and a
# drafter made of random weights of their config.json's shapes (directories
# holding config.json and tokenizer.json only, as for a published model's
# shapes without its checkpoint: the GPU check serves Qwen3-8B / 0.6B shapes
# so). Both workers start with them and say so, completions of the asked
# length come back, the same request twice gives the same text (the weights
# are a function of the seed and each tensor's name), and without the flag a
# directory without weights is a start-up failure with the loader's message.
# --max-model-len caps the context the verifier serves: the router answers
# a request beyond it with the OpenAI context_length_exceeded error, one
# within it is served; a cap above the model's is a start-up failure.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

mkdir -p "$WORK/t" "$WORK/d"
cp "$MODELS/tinycode-16m/config.json" "$MODELS/tinycode-16m/tokenizer.json" "$WORK/t/"
cp "$MODELS/tinycode-3m/config.json" "$MODELS/tinycode-3m/tokenizer.json" "$WORK/d/"
TARGET=$WORK/t
if ! serve_start --draft "$WORK/d" --random-weights; then
  fail "specd serve --random-weights came up"; finish
fi
check "the verifier says its weights are random" 'grep -q "verifier warn: --random-weights" "$SERVE_LOG"'
check "the drafter was given --random-weights" \
  'pgrep -a -P "$SERVE_PID" -f specd-drafter | grep -q -- --random-weights'
code=$(post /v1/completions "$(body 'def f(x):' 24 0)" "$WORK/a.json")
check "a completion of 24 tokens (200)" '[ "$code" = 200 ] && [ "$(jget "$WORK/a.json" "j[\"usage\"][\"completion_tokens\"]")" = 24 ]'
post /v1/completions "$(body 'def f(x):' 24 0)" "$WORK/b.json" >/dev/null
text_of "$WORK/a.json" "$WORK/a"; text_of "$WORK/b.json" "$WORK/b"
check "the same request twice: the same text" 'cmp -s "$WORK/a" "$WORK/b"'
serve_stop

if serve_start --no-spec --random-weights --max-model-len 64; then
  code=$(post /v1/completions '{"prompt":"def f(x):","max_tokens":100}' "$WORK/long.json")
  check "--max-model-len 64: 100 tokens asked is a 400 context_length_exceeded naming 64" \
    '[ "$code" = 400 ] && [ "$(jget "$WORK/long.json" "j[\"error\"][\"code\"]")" = context_length_exceeded ] &&
     grep -q "maximum context length is 64 tokens" "$WORK/long.json"'
  code=$(post /v1/completions "$(body 'def f(x):' 24 0)" "$WORK/short.json")
  check "--max-model-len 64: 24 tokens are served" '[ "$code" = 200 ]'
  serve_stop
else
  fail "specd serve --max-model-len 64 came up"
fi
"$BIN/specd-verifier" --model "$WORK/t" --random-weights --max-model-len 100000 --listen "ipc://$WORK/v.sock" \
  > "$WORK/toolong.log" 2>&1
check "--max-model-len above the model's: exit 1 with the model's context" \
  '[ $? = 1 ] && grep -q "the model.s is 4096" "$WORK/toolong.log"'

"$BIN/specd" serve --target "$WORK/t" --no-spec --port "$(free_port)" --threads 1 > "$WORK/noweights.log" 2>&1 &
pid=$!
for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill "$pid"; fail "without --random-weights a directory without weights was served"; } ||
  check "without --random-weights: a start-up failure naming the directory" \
    'grep -q "verifier error: cannot load $WORK/t" "$WORK/noweights.log"'
finish
