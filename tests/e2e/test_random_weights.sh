#!/usr/bin/env bash
# test_random_weights.sh — `specd serve --random-weights`: a target and a
# drafter made of random weights of their config.json's shapes (directories
# holding config.json and tokenizer.json only, as for a published model's
# shapes without its checkpoint: the GPU check serves Qwen3-8B / 0.6B shapes
# so). Both workers start with them and say so, completions of the asked
# length come back, the same request twice gives the same text (the weights
# are a function of the seed and each tensor's name), and without the flag a
# directory without weights is a start-up failure with the loader's message.
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

"$BIN/specd" serve --target "$WORK/t" --no-spec --port "$(free_port)" --threads 1 > "$WORK/noweights.log" 2>&1 &
pid=$!
for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill "$pid"; fail "without --random-weights a directory without weights was served"; } ||
  check "without --random-weights: a start-up failure naming the directory" \
    'grep -q "verifier error: cannot load $WORK/t" "$WORK/noweights.log"'
finish
