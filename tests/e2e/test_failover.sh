#!/usr/bin/env bash
# test_failover.sh — a lane that dies loses no request (docs/RELIABILITY.md).
# Two real verifiers behind one router (--health-interval-ms 200). Two
# requests run on lane A — a greedy stream and a non-streamed seeded sampled
# one, 1500 tokens each — when A is killed with -9: the router resumes both
# on lane B from the tokens already produced (Submit.resume_ids). The client
# sees no break: the stream ends with [DONE] and no error, and both outputs
# equal specd-generate on the target alone; /metrics counts the failovers.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

P="def main():"
reference "$P" "$WORK/ref.greedy" --max-tokens 1500 --ignore-eos || fail "greedy reference"
reference "$P" "$WORK/ref.sampled" --max-tokens 1500 --ignore-eos --temperature 0.8 --seed 11 || fail "sampled reference"

PA=$(free_port); PB=$(free_port); HP=$(free_port)
verifier() { "$BIN/specd-verifier" --model "$TARGET" --listen "tcp://127.0.0.1:$1" --threads 1 >"$WORK/verifier.$1.log" 2>&1 & }
verifier "$PA"; VA=$!; SERVE_PIDS+=("$VA")
"$BIN/specd-router" --host 127.0.0.1 --port "$HP" --verifier "tcp://127.0.0.1:$PA" --verifier "tcp://127.0.0.1:$PB" \
  --tokenizer "$TARGET/tokenizer.json" --model-name tinycode-16m --health-interval-ms 200 >"$WORK/router.log" 2>&1 &
SERVE_PIDS+=("$!")
URL=http://127.0.0.1:$HP
lane_up() { curl -s "$URL/health" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['lanes'][$1]['state'])" 2>/dev/null; }
for _ in $(seq 300); do [ "$(lane_up 0)" = up ] && break; sleep 0.1; done
check "lane A is up (B not started yet)" '[ "$(lane_up 0)" = up ] && [ "$(lane_up 1)" != up ]'

curl -sN -H 'Content-Type: application/json' -d "$(body "$P" 1500 1)" "$URL/v1/completions" >"$WORK/stream.sse" &
C1=$!
post /v1/completions "$(body "$P" 1500 0 '{"temperature":0.8,"seed":11}')" "$WORK/sampled.json" >"$WORK/sampled.code" &
C2=$!
verifier "$PB"; VB=$!; SERVE_PIDS+=("$VB")
for _ in $(seq 300); do [ "$(lane_up 1)" = up ] && break; sleep 0.1; done
check "lane B came up while the requests run on A" '[ "$(lane_up 1)" = up ]'
kill -KILL "$VA"
wait "$C1" "$C2"

if sse_text "$WORK/stream.sse" "$WORK/stream.txt" && cmp -s "$WORK/stream.txt" "$WORK/ref.greedy"; then
  ok "the greedy stream went on without a break ([DONE], no error) and equals specd-generate"
else
  fail "the greedy stream went on without a break and equals specd-generate"; tail -c 300 "$WORK/stream.sse" | sed 's/^/#   /'
fi
if [ "$(cat "$WORK/sampled.code")" = 200 ] && text_of "$WORK/sampled.json" "$WORK/sampled.txt" &&
  cmp -s "$WORK/sampled.txt" "$WORK/ref.sampled"; then
  ok "the seeded sampled request completed and equals specd-generate"
else
  fail "the seeded sampled request completed and equals specd-generate (status $(cat "$WORK/sampled.code"))"
  head -c 300 "$WORK/sampled.json" | sed 's/^/#   /'
fi
n=$(metric specd_failovers_total)
check "the router resumed them on lane B (specd_failovers_total $n) and logged it" \
  '[ "${n:-0}" -ge 2 ] && grep -q "resuming on" "$WORK/router.log"'
finish
