#!/usr/bin/env bash
# test_pipeline_load.sh — 16 concurrent streaming clients through
# `specd serve` (draft-model drafter): every stream completes, each text
# equals the same prompt's output when it runs alone (continuous batching
# and speculation are batch-invariant on CPU), and the verifier's KV pool is
# whole again afterwards (specd_kv_blocks_free == specd_kv_blocks).
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

N=16
PROMPTS=()
SUBJECTS=(sort parse merge reverse count split flatten search encode decode hash render load save retry cache)
for i in $(seq 0 $((N - 1))); do PROMPTS+=("def ${SUBJECTS[$i]}_items(items):"); done

if ! serve_start --draft "$DRAFT"; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"

for i in "${!PROMPTS[@]}"; do
  st=$(post /v1/completions "$(body "${PROMPTS[$i]}" 48 0)" "$WORK/single.$i.json")
  [ "$st" = 200 ] && text_of "$WORK/single.$i.json" "$WORK/single.$i" || fail "single request $i (status $st)"
done
ok "ran $N prompts alone"

CURLS=()
for i in "${!PROMPTS[@]}"; do
  curl -sN --max-time 170 -H 'Content-Type: application/json' -d "$(body "${PROMPTS[$i]}" 48 1)" \
    "$URL/v1/completions" >"$WORK/stream.$i.sse" &
  CURLS+=("$!")
done
for p in "${CURLS[@]}"; do wait "$p"; done
good=0
for i in "${!PROMPTS[@]}"; do
  if sse_text "$WORK/stream.$i.sse" "$WORK/stream.$i" && cmp -s "$WORK/stream.$i" "$WORK/single.$i"; then
    good=$((good + 1))
  else
    fail "concurrent stream $i equals its single-request output"
    tail -c 300 "$WORK/stream.$i.sse" | sed 's/^/#   /'
  fi
done
check "all $N concurrent streams completed with the single-request text ($good/$N)" '[ "$good" = "$N" ]'
check "KV free == total after the load" kv_settled
check "speculation accepted tokens under load" '[ "$(metric specd_spec_accepted_tokens_total | cut -d. -f1)" -gt 0 ]'
serve_stop
finish
