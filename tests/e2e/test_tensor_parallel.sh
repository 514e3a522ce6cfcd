#!/usr/bin/env bash
# test_tensor_parallel.sh — the target split over ranks (--tensor-parallel-size,
# model.h), here CPU ranks (threads of the verifier, each a backend of its own,
# exchanging through the host communicator):
#   - specd-generate at TP = 2 gives the tokens of TP = 1 on three code prompts;
#     with --batch-invariant the same bits at TP = 1 and 2 (fixed chunks);
#     speculative (the draft model) == plain at TP = 2;
#   - specd serve -tp 2 (draft model, speculation) answers like a TP = 1 server,
#     and /metrics names the ranks;
#   - a rank that dies under load (SD_FAULT_TP_RANK_LOST) takes its lane down
#     cleanly: the verifier logs it and exits, the router resumes the requests
#     in flight on another TP = 2 lane, and they end as if nothing happened.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

PROMPTS=("def fib(n):" "import numpy as np" "class Stack:")
gen() { # gen OUT ARGS...: specd-generate's tokens (greedy, 96, EOS ignored)
  local out=$1; shift
  "$BIN/specd-generate" --model "$TARGET" --max-tokens 96 --ignore-eos --threads 2 --json "$@" >"$out.json" 2>"$out.err" &&
    jget "$out.json" 'j["tokens"]' >"$out"
}
i=0
for p in "${PROMPTS[@]}"; do
  gen "$WORK/g1.$i" --prompt "$p"
  gen "$WORK/g2.$i" --prompt "$p" -tp 2
  gen "$WORK/b1.$i" --prompt "$p" --batch-invariant
  gen "$WORK/b2.$i" --prompt "$p" --batch-invariant --tensor-parallel-size 2
  gen "$WORK/s2.$i" --prompt "$p" -tp 2 --draft "$DRAFT"
  check "'$p': TP 2 gives TP 1's greedy tokens" 'cmp -s "$WORK/g1.$i" "$WORK/g2.$i" && [ -s "$WORK/g1.$i" ]' ||
    sed 's/^/#   /' "$WORK/g2.$i.err"
  check "'$p': --batch-invariant, TP 2 == TP 1" 'cmp -s "$WORK/b1.$i" "$WORK/b2.$i" && [ -s "$WORK/b1.$i" ]'
  check "'$p': speculative == plain at TP 2 ($(jget "$WORK/s2.$i.json" 'j["accepted_tokens"]') drafts accepted)" \
    'cmp -s "$WORK/g2.$i" "$WORK/s2.$i" && [ "$(jget "$WORK/s2.$i.json" "j[\"accepted_tokens\"] > 0")" = True ]'
  i=$((i + 1))
done
"$BIN/specd-generate" --model "$TARGET" --prompt-ids 1,2 -tp 4 >/dev/null 2>"$WORK/tp4.err"
check "TP 4 of a model whose heads do not divide by 4: a clear error" 'grep -q "must each divide by it" "$WORK/tp4.err"'

# the server at TP 2 against TP 1, the same greedy completions
serve_start --draft "$DRAFT" || { fail "specd serve (TP 1) came up"; finish; }
i=0
for p in "${PROMPTS[@]}"; do post /v1/completions "$(body "$p" 64 0)" "$WORK/s1.$i.json" >/dev/null; i=$((i + 1)); done
serve_stop
serve_start --draft "$DRAFT" -tp 2 || { fail "specd serve -tp 2 came up"; finish; }
i=0
for p in "${PROMPTS[@]}"; do
  post /v1/completions "$(body "$p" 64 0)" "$WORK/s2.$i.json" >/dev/null
  text_of "$WORK/s1.$i.json" "$WORK/t1.$i"; text_of "$WORK/s2.$i.json" "$WORK/t2.$i"
  check "serve -tp 2: '$p' completes as at TP 1" 'cmp -s "$WORK/t1.$i" "$WORK/t2.$i" && [ -s "$WORK/t1.$i" ]'
  i=$((i + 1))
done
check "/metrics: the lane's tensor-parallel size and its ranks" \
  '[ "$(metric specd_lane_tensor_parallel_size)" = 2 ] && [ "$(curl -s "$URL/metrics" | grep -c "^specd_lane_rank_info{")" = 2 ]'
check "the verifier logged its ranks" 'grep -q "tensor parallel over 2 ranks" "$SERVE_LOG"'
serve_stop

# a rank dies under load: lane A's rank 1 fails its 60th pass
P="def main():"
"$BIN/specd-generate" --model "$TARGET" --prompt "$P" --max-tokens 400 --ignore-eos --threads 2 -tp 2 --json \
  >"$WORK/ref.json" 2>/dev/null
"$PY" -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))['text'])" "$WORK/ref.json" >"$WORK/ref.txt"
PA=$(free_port); PB=$(free_port); HP=$(free_port)
SD_FAULT_TP_RANK_LOST=1:60 "$BIN/specd-verifier" --model "$TARGET" --listen "tcp://127.0.0.1:$PA" -tp 2 --threads 2 \
  >"$WORK/verifier.a.log" 2>&1 &
VA=$!; SERVE_PIDS+=("$VA")
"$BIN/specd-verifier" --model "$TARGET" --listen "tcp://127.0.0.1:$PB" -tp 2 --threads 2 >"$WORK/verifier.b.log" 2>&1 &
SERVE_PIDS+=("$!")
"$BIN/specd-router" --host 127.0.0.1 --port "$HP" --verifier "tcp://127.0.0.1:$PA" --verifier "tcp://127.0.0.1:$PB" \
  --tokenizer "$TARGET/tokenizer.json" --model-name tinycode-16m --health-interval-ms 200 --lane-capacity 8 \
  >"$WORK/router.log" 2>&1 &
SERVE_PIDS+=("$!")
URL=http://127.0.0.1:$HP
lanes_up() { curl -s "$URL/health" | "$PY" -c "import json,sys; print(sum(l['state'] == 'up' for l in json.load(sys.stdin)['lanes']))" 2>/dev/null; }
for _ in $(seq 300); do [ "$(lanes_up)" = 2 ] && break; sleep 0.1; done
check "two TP 2 lanes are up" '[ "$(lanes_up)" = 2 ]'
pids=()
for k in 0 1 2 3; do
  post /v1/completions "$(body "$P" 400 0)" "$WORK/load.$k.json" >"$WORK/load.$k.code" &
  pids+=("$!")
done
wait "${pids[@]}"
good=0
for k in 0 1 2 3; do
  [ "$(cat "$WORK/load.$k.code")" = 200 ] && text_of "$WORK/load.$k.json" "$WORK/load.$k" &&
    cmp -s "$WORK/load.$k" "$WORK/ref.txt" && good=$((good + 1))
done
check "4 of 4 requests under load completed with TP 2's output ($good)" '[ "$good" = 4 ]'
check "lane A's verifier said its rank failed and exited" \
  'grep -q "rank 1" "$WORK/verifier.a.log" && grep -q "exiting" "$WORK/verifier.a.log" && ! kill -0 "$VA" 2>/dev/null'
n=$(metric specd_failovers_total)
check "the router resumed lane A's requests on lane B (specd_failovers_total ${n:-0})" '[ "${n:-0}" -ge 1 ]'
finish
