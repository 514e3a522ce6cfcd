#!/usr/bin/env bash
# test_serve_lanes.sh — `specd serve --lanes 2`: two verifier + drafter pairs
# under one supervisor, the router given both (and a setting through
# --router-arg): both lanes come up, concurrent requests use both, outputs
# equal the target's plain decoding, and a lane's verifier killed with -9 is
# restarted while the other lane serves; --draft-device reaches each lane's
# drafter (cpu: the one device here), --batch-invariant each verifier,
# --kv-dtype both workers (f32 caches for the bf16 demo pair: the same
# outputs), --draft-gpu-memory-fraction each drafter and --spec-fallback off
# each verifier. Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

if ! serve_start --lanes 2 --draft "$DRAFT" --draft-device cpu,cpu --batch-invariant --kv-dtype f32 \
    --spec-fallback off --draft-gpu-memory-fraction 0.2 --router-arg --lane-capacity=1 --router-arg --health-interval-ms=300; then
  fail "specd serve --lanes 2 came up"; finish
fi
lanes_up() { curl -s "$URL/metrics" | awk '$1 ~ /^specd_lane_up\{/ && $2 == 1' | wc -l; }
up=false
for i in $(seq 100); do [ "$(lanes_up)" = 2 ] && { up=true; break; }; sleep 0.1; done
check "two lanes up behind the router" '$up'
# the start-up lines checked below: the workers log them after their health is first answered
wait_log "verifier info: serving " 2; wait_log "drafter info: drafting with" 2
check "the supervisor started 2 verifiers and 2 drafters" \
  '[ "$(pgrep -P "$SERVE_PID" -f specd-verifier | wc -l)" = 2 ] && [ "$(pgrep -P "$SERVE_PID" -f specd-drafter | wc -l)" = 2 ]'
check "--batch-invariant reached both verifiers" '[ "$(grep -c "verifier info: batch-invariant" "$SERVE_LOG")" = 2 ]'
check "each drafter was given --draft-device's entry" \
  '[ "$(pgrep -a -P "$SERVE_PID" -f specd-drafter | grep -c -- "--device cpu")" = 2 ]'
check "--kv-dtype f32 reached both verifiers (their start-up logs)" \
  '[ "$(grep -c "verifier info: model .* KV blocks of 16, F32" "$SERVE_LOG")" = 2 ]'
check "--kv-dtype and --draft-gpu-memory-fraction reached both drafters" \
  '[ "$(pgrep -a -P "$SERVE_PID" -f specd-drafter | grep -- "--kv-dtype f32" | grep -c -- "--gpu-memory-fraction 0.2")" = 2 ] &&
   [ "$(grep -c "drafter info: KV mirrors: .*, F32" "$SERVE_LOG")" = 2 ]'
check "--spec-fallback off reached both verifiers (their start-up logs)" \
  '[ "$(grep -c "verifier info: serving .*n-gram fallback off)" "$SERVE_LOG")" = 2 ]'
check "no --gpu-memory-fraction for verifiers on the CPU" \
  '! pgrep -a -P "$SERVE_PID" -f specd-verifier | grep -q -- --gpu-memory-fraction'

P1='def fibonacci(n):'
P2='class Stack:'
# --batch-invariant: the sums in fixed chunks (the same at any --tensor-parallel-size): the reference too
reference "$P1" "$WORK/r1" --max-tokens 64 --ignore-eos --batch-invariant
reference "$P2" "$WORK/r2" --max-tokens 64 --ignore-eos --batch-invariant
post /v1/completions "$(body "$P1" 64 0)" "$WORK/a.json" >/dev/null &
pa=$!
post /v1/completions "$(body "$P2" 64 0)" "$WORK/b.json" >/dev/null &
pb=$!
wait "$pa" "$pb"
text_of "$WORK/a.json" "$WORK/a"; text_of "$WORK/b.json" "$WORK/b"
check "concurrent requests on the two lanes equal plain decoding" 'cmp -s "$WORK/a" "$WORK/r1" && cmp -s "$WORK/b" "$WORK/r2"'
busy=$(curl -s "$URL/metrics" | awk '$1 ~ /^specd_kv_blocks\{/' | wc -l)
check "both lanes report to the router (--lane-capacity=1 spread the two requests)" '[ "$busy" = 2 ]'

victim=$(pgrep -P "$SERVE_PID" -f "specd-verifier.*verifier-0.sock")
kill -9 "$victim"
post /v1/completions "$(body "$P1" 64 0)" "$WORK/c.json" >/dev/null
text_of "$WORK/c.json" "$WORK/c"
check "with lane 0's verifier killed, requests are served (and exact)" 'cmp -s "$WORK/c" "$WORK/r1"'
back=false
for i in $(seq 200); do
  [ "$(pgrep -P "$SERVE_PID" -f "specd-verifier.*verifier-0.sock" | wc -l)" = 1 ] && [ "$(lanes_up)" = 2 ] && { back=true; break; }
  sleep 0.1
done
check "the supervisor restarted it; both lanes up again" '$back'
finish
