#!/usr/bin/env bash
# test_long_prompts.sh — long prompts arriving together do not take the lane
# down (docs/RELIABILITY.md). Eight concurrent requests with 2000-token
# prompts through `specd serve` (one thread each): a step prefills at most
# --prefill-budget prompt tokens over all requests (512 by default), so no
# step outlasts the router's health checks and a short request sent
# alongside streams to its end. Every request completes (200, all its
# tokens); the router never marks the lane down; the largest step
# (specd_step_rows_max) stays within the budget plus a row per request. With
# the budget lifted (SD_LONG_BUDGET=1000000, the former behaviour) steps take
# a whole chunk of every prompt at once and the last check fails — or, on a
# slow enough machine, the lane goes down as it used to.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

N=${SD_LONG_N:-8}
LEN=${SD_LONG_LEN:-2000}
budget=()
[ -n "${SD_LONG_BUDGET:-}" ] && budget=(--prefill-budget "$SD_LONG_BUDGET")
serve_start --no-spec "${budget[@]}" || { fail "specd serve came up"; finish; }
ok "specd serve came up on port $PORT"

for i in $(seq "$N"); do
  "$PY" -c "import json,sys; i=int(sys.argv[1]); n=int(sys.argv[2]); print(json.dumps({'prompt': [100 + (j * 7 + i) % 900 for j in range(n)], 'max_tokens': 8, 'ignore_eos': True}))" "$i" "$LEN" >"$WORK/long.$i.json"
done
t0=$(date +%s%N)
clients=()
for i in $(seq "$N"); do
  curl -s -o "$WORK/long.$i.out" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$WORK/long.$i.json" "$URL/v1/completions" >"$WORK/long.$i.code" &
  clients+=("$!")
done
sleep 0.5
curl -sN -H 'Content-Type: application/json' -d '{"prompt":"def add(a, b):","max_tokens":16,"stream":true,"ignore_eos":true}' \
  "$URL/v1/completions" >"$WORK/short.sse" &
clients+=("$!")
wait "${clients[@]}"
t1=$(date +%s%N)
good=0
for i in $(seq "$N"); do
  [ "$(cat "$WORK/long.$i.code")" = 200 ] && [ "$(jget "$WORK/long.$i.out" 'j["usage"]["completion_tokens"]')" = 8 ] &&
    [ "$(jget "$WORK/long.$i.out" 'j["usage"]["prompt_tokens"]')" = "$LEN" ] && good=$((good + 1))
done
check "$N concurrent $LEN-token prompts all complete ($good of $N, $(( (t1 - t0) / 1000000 )) ms)" \
  '[ "$good" = "$N" ]' || head -c 300 "$WORK/long.1.out"
check "a short streamed request sent alongside ends with [DONE]" 'grep -q "data: \[DONE\]" "$WORK/short.sse"'
check "the router never marked the lane down" '! grep -q "is down" "$SERVE_LOG"' || grep "is down" "$SERVE_LOG" | head -3
sleep 1.2 # the next health check carries the verifier's figures
rows=$(metric specd_step_rows_max)
want=$((512 + N + 1)) # the default budget
check "no step had more than the budget's prompt tokens plus a row per request ($rows rows, at most $want)" \
  '[ -n "$rows" ] && [ "$rows" -le "$want" ] && [ "$rows" -ge 256 ]'
serve_stop
finish
