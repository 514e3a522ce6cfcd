#!/usr/bin/env bash
# test_pipeline_exact.sh — speculative decoding through the whole pipeline
# (`specd serve`: router + verifier + drafter) is lossless.
#
# For a draft-model drafter (tinycode-3m drafting for tinycode-16m), for the
# verifier's own n-gram lookup (--ngram, the default without --draft; also with
# a static length of 4: greedy accepts some) and for the n-gram drafter
# (--ngram-drafter), for the draft model inside the verifier (--draft-in-verifier:
# serial, no drafter process), and three code prompts:
#   - greedy (temperature 0, 64 tokens, ignore_eos), non-streamed and
#     streamed (SSE text concatenated), equals `specd-generate` on the target
#     alone, byte for byte (the CPU backend is batch-invariant);
#   - sampled (temperature 0.8, seed 42, top_p 1, top_k 0, verify "match")
#     equals `specd-generate --temperature 0.8 --seed 42` (match verification
#     reproduces plain sampling);
#   - responses carry usage and speculative stats;
# in pipelined mode (the default where the drafter has cores of its own: the drafter drafts ahead, spans are used
# only when their base is the committed sequence; with a static length the
# responses' drafting stats show spans used), in serial mode
# (--spec-pipeline off), with a core for each worker (--threads 1: auto's
# pipelining test alternates blocks of both protocols, mid-request), with the
# draft length chosen per step (the default: responses and /metrics carry
# the lengths chosen and the acceptance estimates) and with a static one
# (--spec-adaptive off --num-draft 4). Serial and static: 4 drafts asked for
# at every step and greedy accepts some (deterministic; an adaptive choice
# or a pipelined span's length depends on the machine's timing, so there
# only the figures' presence and range are checked).
# And with --quant int8 (serial, 4 drafts a step): greedy equals
# specd-generate --quant int8.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

PROMPTS=("def fibonacci(n):" "import os
import sys

def main():" "class Stack:
    def __init__(self):")

# References first (target alone, no server running).
for i in "${!PROMPTS[@]}"; do
  reference "${PROMPTS[$i]}" "$WORK/ref.greedy.$i" --max-tokens 64 --ignore-eos ||
    { fail "specd-generate greedy reference $i"; cat "$WORK/ref.greedy.$i.err"; }
  reference "${PROMPTS[$i]}" "$WORK/ref.sampled.$i" --max-tokens 64 --ignore-eos --temperature 0.8 --seed 42 ||
    { fail "specd-generate sampled reference $i"; cat "$WORK/ref.sampled.$i.err"; }
done

run_mode() {
  local mode=$1; shift
  if ! serve_start "$@"; then fail "[$mode] specd serve came up"; return; fi
  ok "[$mode] specd serve came up on port $PORT"
  local i accepted=0
  for i in "${!PROMPTS[@]}"; do
    local p=${PROMPTS[$i]} f=$WORK/$mode.$i
    local st; st=$(post /v1/completions "$(body "$p" 64 0)" "$f.json")
    if [ "$st" = 200 ] && text_of "$f.json" "$f.txt" && cmp -s "$f.txt" "$WORK/ref.greedy.$i"; then
      ok "[$mode] prompt $i greedy == specd-generate"
    else
      fail "[$mode] prompt $i greedy == specd-generate (status $st)"
      echo "#   got:  $(head -c 300 "$f.json")"; echo "#   want: $(head -c 300 "$WORK/ref.greedy.$i")"
    fi
    check "[$mode] prompt $i usage + finish_reason" \
      '[ "$(jget "$f.json" "(j[\"usage\"][\"completion_tokens\"], j[\"usage\"][\"total_tokens\"] > 64, j[\"choices\"][0][\"finish_reason\"])")" = "(64, True, '"'"'length'"'"')" ]'
    check "[$mode] prompt $i speculative stats present" \
      '[ "$(jget "$f.json" "j[\"speculative\"][\"steps\"] > 0 and \"accepted_tokens\" in j[\"speculative\"]")" = True ]'
    accepted=$((accepted + $(jget "$f.json" 'j["speculative"]["accepted_tokens"]' || echo 0)))
    curl -sN -H 'Content-Type: application/json' -d "$(body "$p" 64 1)" "$URL/v1/completions" >"$f.sse"
    if sse_text "$f.sse" "$f.stxt" && cmp -s "$f.stxt" "$WORK/ref.greedy.$i"; then
      ok "[$mode] prompt $i greedy streamed == specd-generate"
    else
      fail "[$mode] prompt $i greedy streamed == specd-generate"; head -c 400 "$f.sse" | sed 's/^/#   /'
    fi
    st=$(post /v1/completions "$(body "$p" 64 0 '{"temperature":0.8,"seed":42,"speculative":{"verify":"match"}}')" "$f.s.json")
    if [ "$st" = 200 ] && text_of "$f.s.json" "$f.s.txt" && cmp -s "$f.s.txt" "$WORK/ref.sampled.$i"; then
      ok "[$mode] prompt $i sampled (match, seed 42) == specd-generate"
    else
      fail "[$mode] prompt $i sampled (match, seed 42) == specd-generate (status $st)"
      echo "#   got:  $(head -c 300 "$f.s.json")"; echo "#   want: $(head -c 300 "$WORK/ref.sampled.$i")"
    fi
  done
  if [ "$mode" = draft-serial-static ] || [ "$mode" = ngram-static ] || [ "$mode" = draft-in-verifier-static ]; then
    check "[$mode] greedy runs accepted draft tokens (total $accepted)" '[ "$accepted" -gt 0 ]'
    sleep 1.2 # the router's next health check carries the verifier's figures
    check "[$mode] /metrics: acceptance estimates (drafts verified at every step)" \
      '[ -n "$(metric specd_spec_acceptance_estimate)" ]'
  fi
  if [ "$mode" = draft ]; then
    # adaptive: how much it drafts depends on the machine's timing (a slow machine may draft nothing),
    # so only the figures' presence and range are checked
    check "[$mode] adaptive: draft lengths chosen per step, within range" \
      '[ "$(jget "$WORK/$mode.0.json" "(lambda d: d[\"decode_steps\"] > 0 and 0 <= d[\"mean\"] <= 12 and isinstance(d[\"acceptance_estimate\"], list))(j[\"speculative\"][\"draft_length\"])")" = True ]'
    sleep 1.2 # the router's next health check carries the verifier's figures
    check "[$mode] /metrics: draft length histogram, predicted and measured step time" \
      '[ -n "$(metric specd_spec_draft_length_total)" ] && [ "$(metric specd_spec_step_measured_seconds_total)" != 0.000000 ] && [ -n "$(metric specd_spec_step_predicted_seconds_total)" ]'
    check "[$mode] /metrics: the regime test's plain steps and rates" \
      '[ -n "$(metric specd_spec_regime_plain_steps_total)" ] && [ -n "$(metric specd_spec_regime_rate)" ]'
  fi
  if [ "$mode" = draft-threads-1 ]; then
    # a core each (2 CPUs or more): auto measures pipelined blocks against serial ones, switching
    # protocols mid-request (the exactness checks above ran across the switches)
    sleep 1.2 # the router's next health check carries the verifier's figures
    check "[$mode] the pipelining test ran: logged, serial steps and both rates in /metrics" \
      'grep -q "measuring pipelined against serial" "$SERVE_LOG" && [ "$(metric specd_spec_pipeline_serial_steps_total)" -gt 0 ] && [ -n "$(metric specd_spec_pipeline_rate)" ]' ||
      { echo "#   $(grep "pipelined speculation" "$SERVE_LOG" | head -2)"; metric specd_spec_pipeline_serial_steps_total | sed 's/^/#   /'; }
  fi
  if [ "$mode" = draft-static ]; then
    check "[$mode] pipelined: spans used" \
      '[ "$(jget "$WORK/$mode.0.json" "j[\"speculative\"][\"drafting\"][\"spans_used\"] > 0")" = True ]'
  fi
  case $mode in *-static)
    # serial: 4 at every step (fewer only where fewer tokens are left);
    # pipelined: at most 4, fewer where a span came shorter
    local want='d["steps_without_drafts"] == 0 and 3.5 < d["mean"] <= 4'
    [ "$mode" = draft-static ] && want='d["decode_steps"] > 0 and 0 <= d["mean"] <= 4'
    # the verifier's own lookup: at most 4, fewer (or none) where its match offers fewer
    [ "$mode" = ngram-static ] && want='d["decode_steps"] > 0 and 0 < d["mean"] <= 4'
    check "[$mode] a static length of 4 ($want)" \
      '[ "$(jget "$WORK/$mode.0.json" "(lambda d: $want)(j[\"speculative\"][\"draft_length\"])")" = True ]' ||
      echo "#   draft_length: $(jget "$WORK/$mode.0.json" 'j["speculative"]["draft_length"]')"
  esac
  serve_stop
}

run_mode draft --draft "$DRAFT"
run_mode draft-serial --draft "$DRAFT" --spec-pipeline off
if [ "$(nproc)" -ge 2 ]; then
  run_mode draft-threads-1 --draft "$DRAFT" --threads 1
else
  echo "# skip [draft-threads-1]: the pipelining test needs a core for each worker (nproc $(nproc))"
fi
run_mode draft-static --draft "$DRAFT" --spec-adaptive off --num-draft 4
run_mode draft-serial-static --draft "$DRAFT" --spec-pipeline off --spec-adaptive off --num-draft 4
run_mode ngram --ngram
run_mode ngram-static --ngram --spec-adaptive off --num-draft 4
run_mode ngram-drafter --ngram-drafter
run_mode draft-in-verifier --draft "$DRAFT" --draft-in-verifier
check "[draft-in-verifier] the verifier drafts with the model itself, no drafter process" \
  'grep -q "drafts: the draft model in this process" "$SERVE_LOG" && ! grep -q "drafter info" "$SERVE_LOG"'
run_mode draft-in-verifier-static --draft "$DRAFT" --draft-in-verifier --spec-adaptive off --num-draft 4
# usage: --draft-in-verifier needs --draft and takes no drafter-process option; a bad draft model stops the verifier
"$BIN/specd" serve --target "$TARGET" --draft-in-verifier >"$WORK/div.out" 2>&1
check "[draft-in-verifier] without --draft: exit 2 with a message" \
  '[ $? = 2 ] && grep -q -- "--draft-in-verifier takes --draft DIR" "$WORK/div.out"'
"$BIN/specd" serve --target "$TARGET" --draft "$DRAFT" --draft-in-verifier --draft-device cpu >"$WORK/div.out" 2>&1
check "[draft-in-verifier] with --draft-device: exit 2" '[ $? = 2 ]'
"$BIN/specd-verifier" --model "$TARGET" --draft-model "$WORK/nonexistent" --listen "ipc://$WORK/v.sock" \
  >"$WORK/dm.out" 2>&1
check "[draft-in-verifier] a draft model that cannot load: the verifier says which and exits 1" \
  '[ $? = 1 ] && grep -q -- "--draft-model $WORK/nonexistent" "$WORK/dm.out"'

# --quant int8: the int8 target's greedy output through the pipeline (4 drafts
# a step, serial) equals specd-generate on the int8 target alone
for i in "${!PROMPTS[@]}"; do
  reference "${PROMPTS[$i]}" "$WORK/ref.q8.$i" --max-tokens 64 --ignore-eos --quant int8 ||
    { fail "specd-generate --quant int8 reference $i"; cat "$WORK/ref.q8.$i.err"; }
done
if serve_start --draft "$DRAFT" --quant int8 --spec-pipeline off --spec-adaptive off --num-draft 4; then
  acc=0
  for i in "${!PROMPTS[@]}"; do
    f=$WORK/q8.$i
    st=$(post /v1/completions "$(body "${PROMPTS[$i]}" 64 0)" "$f.json")
    check "[int8] prompt $i greedy == specd-generate --quant int8 (status $st)" \
      '[ "$st" = 200 ] && text_of "$f.json" "$f.txt" && cmp -s "$f.txt" "$WORK/ref.q8.$i"'
    acc=$((acc + $(jget "$f.json" 'j["speculative"]["accepted_tokens"]' || echo 0)))
  done
  check "[int8] drafts were accepted (total $acc)" '[ "$acc" -gt 0 ]'
  check "[int8] the verifier runs the int8 weights (its log says so)" 'grep -q -- "--quant int8: matmul weights" "$SERVE_LOG"'
  serve_stop
else
  fail "[int8] specd serve --quant int8 came up"
fi
finish
