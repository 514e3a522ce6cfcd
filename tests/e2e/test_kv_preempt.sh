#!/usr/bin/env bash
# test_kv_preempt.sh — KV over-commit loses nothing (docs/RELIABILITY.md).
# A verifier with a small KV pool (--kv-blocks 48: 768 positions; 40 with a
# draft model) gets 6
# concurrent requests of ~40 prompt tokens + 300 output tokens each (~2000
# positions in all): admission lets them all in on their prompts, and as
# they grow the pool runs short. The requests admitted last give their KV
# back and prefill again later (preemption) instead of failing: every
# request completes, greedy and seeded sampled outputs equal specd-generate
# on the target alone (also with a draft model speculating), and /metrics
# counts the preemptions.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

PROMPTS=("def fibonacci(n):" "import os
import sys

def main():" "class Stack:
    def __init__(self):" "def quicksort(arr):" "for i in range(10):" "def read_file(path):")
for i in "${!PROMPTS[@]}"; do
  if [ $((i % 2)) = 0 ]; then
    reference "${PROMPTS[$i]}" "$WORK/ref.$i" --max-tokens 300 --ignore-eos || fail "reference $i"
  else
    reference "${PROMPTS[$i]}" "$WORK/ref.$i" --max-tokens 300 --ignore-eos --temperature 0.8 --seed 7 || fail "reference $i"
  fi
done

run_mode() {
  local mode=$1 blocks=$2; shift 2
  serve_start "$@" --kv-blocks "$blocks" || { fail "[$mode] specd serve came up"; return; }
  ok "[$mode] specd serve came up on port $PORT ($blocks KV blocks)"
  local clients=() i extra good=0
  for i in "${!PROMPTS[@]}"; do
    extra=
    [ $((i % 2)) = 1 ] && extra=',"temperature":0.8,"seed":7,"top_p":1,"top_k":0,"speculative":{"verify":"match"}'
    post /v1/completions "$(body "${PROMPTS[$i]}" 300 0 "{${extra#,}}")" "$WORK/$mode.$i.json" >"$WORK/$mode.$i.code" &
    clients+=("$!")
  done
  wait "${clients[@]}"
  for i in "${!PROMPTS[@]}"; do
    if [ "$(cat "$WORK/$mode.$i.code")" = 200 ] && text_of "$WORK/$mode.$i.json" "$WORK/$mode.$i.txt" &&
      cmp -s "$WORK/$mode.$i.txt" "$WORK/ref.$i"; then
      good=$((good + 1))
    else
      echo "#   request $i: status $(cat "$WORK/$mode.$i.code"): $(head -c 200 "$WORK/$mode.$i.json")"
    fi
  done
  check "[$mode] all ${#PROMPTS[@]} requests complete, each equal to specd-generate ($good)" '[ "$good" = "${#PROMPTS[@]}" ]'
  local n k # the next health checks carry the verifier's figures (wait up to 10 s: a loaded machine)
  for k in $(seq 50); do n=$(metric specd_preemptions_total); [ -n "$n" ] && [ "$n" -gt 0 ] && break; sleep 0.2; done
  check "[$mode] the pool ran short and requests were preempted (specd_preemptions_total $n)" '[ -n "$n" ] && [ "$n" -gt 0 ]'
  kv_settled
  check "[$mode] every KV block is free again" '[ "$(metric specd_kv_blocks_free)" = "$(metric specd_kv_blocks)" ]'
  serve_stop
}

run_mode plain 48 --no-spec
# speculation commits several tokens a step and finishes sooner, so its requests overlap less: a smaller
# pool keeps the shortage certain
run_mode draft 40 --draft "$DRAFT"
finish
