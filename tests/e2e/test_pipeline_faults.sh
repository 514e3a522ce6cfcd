#!/usr/bin/env bash
# test_pipeline_faults.sh — the pipeline survives faults without wrong output
# or leaked KV blocks.
#   (a) SIGKILL of the drafter mid-stream: 4 concurrent greedy streams
#       (128 tokens, ignore_eos) all finish with exactly the single-request
#       text, and the `specd serve` supervisor restarts the drafter;
#   (b) a client that disconnects mid-stream (curl --max-time 1 on a
#       2000-token request): afterwards specd_kv_blocks_free == _total;
#   (c) bad input against the real pipeline: malformed JSON → 400, prompt +
#       max_tokens beyond the context → 400 naming max_tokens/prompt,
#       temperature -1 → 400 naming temperature, wrong API key → 401, and a
#       good request still succeeds afterwards;
#   (d) the drafter stopped (SIGSTOP) mid-pipeline while 4 streams of 384
#       tokens run: every stream finishes with the exact single-request
#       text (the verifier stops waiting for spans, marks the drafter down
#       and verifies its own n-gram fallback's drafts: specd_spec_fallback_
#       used_total > 0); after SIGCONT the drafter re-syncs and
#       drafts again; then its KV mirrors are all free and it holds no
#       request (specd_drafter_kv_blocks_free == _total, specd_drafter_requests 0).
# The draft length is static (4): the checks that drafting resumes must not
# depend on the adaptive scheduler finding it worth it on a slow machine.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

KEY=e2e-key
AUTH=(-H "Authorization: Bearer $KEY")
PROMPTS=("def quicksort(arr):" "for i in range(10):" "# read a file line by line
with open(" "struct node {")

# a static draft length: "drafts again" must not depend on the adaptive choice (a slow machine,
# or a sanitizer build, can make drafting not pay)
if ! serve_start --draft "$DRAFT" --api-key "$KEY" --spec-adaptive off --num-draft 4; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"

# singles NAME N: each prompt alone (N tokens, greedy) → $WORK/NAME.i, the reference texts
singles() {
  local i st
  for i in "${!PROMPTS[@]}"; do
    st=$(post /v1/completions "$(body "${PROMPTS[$i]}" "$2" 0)" "$WORK/$1.$i.json" "${AUTH[@]}")
    [ "$st" = 200 ] && text_of "$WORK/$1.$i.json" "$WORK/$1.$i" || fail "single request $1.$i (status $st)"
  done
}
# streams_start NAME N: all prompts streaming at once (N tokens) into $WORK/NAME.i.sse;
# returns once they produce (8 data events), the curl pids in CURLS
streams_start() {
  local i
  CURLS=()
  for i in "${!PROMPTS[@]}"; do
    curl -sN "${AUTH[@]}" -H 'Content-Type: application/json' -d "$(body "${PROMPTS[$i]}" "$2" 1)" \
      "$URL/v1/completions" >"$WORK/$1.$i.sse" &
    CURLS+=("$!")
  done
  for _ in $(seq 100); do
    [ "$(cat "$WORK"/"$1".*.sse 2>/dev/null | grep -c '^data: ')" -ge 8 ] && break
    sleep 0.05
  done
}
# streams_done NAME: how many of the streams have finished
streams_done() { cat "$WORK"/"$1".*.sse 2>/dev/null | grep -c '^data: \[DONE\]'; }
# streams_check NAME REF WHAT: wait for the streams; each text must equal REF.i
streams_check() {
  local p i
  for p in "${CURLS[@]}"; do wait "$p"; done
  for i in "${!PROMPTS[@]}"; do
    if sse_text "$WORK/$1.$i.sse" "$WORK/$1.$i" && cmp -s "$WORK/$1.$i" "$WORK/$2.$i"; then
      ok "$3: stream $i completed with the exact text"
    else
      fail "$3: stream $i completed with the exact text"
      tail -c 300 "$WORK/$1.$i.sse" | sed 's/^/#   /'
    fi
  done
}

# ---- (a) drafter killed mid-stream ------------------------------------------
singles single 128
DRAFTER=$(pgrep -P "$SERVE_PID" -f specd-drafter | head -n 1)
check "the drafter runs under the supervisor (pid ${DRAFTER:-none})" '[ -n "$DRAFTER" ]'
streams_start stream 128
[ -n "$DRAFTER" ] && kill -KILL "$DRAFTER"
DONE_AT_KILL=$(streams_done stream)
check "(a) the drafter died mid-stream ($DONE_AT_KILL of 4 streams done at the kill)" '[ "$DONE_AT_KILL" -lt 4 ]'
streams_check stream single "(a) despite the drafter's death"
NEW=""
for _ in $(seq 100); do
  NEW=$(pgrep -P "$SERVE_PID" -f specd-drafter | head -n 1)
  [ -n "$NEW" ] && [ "$NEW" != "$DRAFTER" ] && break
  sleep 0.1
done
check "(a) the supervisor restarted the drafter (old $DRAFTER, new ${NEW:-none})" '[ -n "$NEW" ] && [ "$NEW" != "$DRAFTER" ]'
check "(a) the restarted drafter started" 'wait_drafter 2'
st=$(post /v1/completions "$(body "${PROMPTS[0]}" 128 0)" "$WORK/after.json" "${AUTH[@]}")
check "(a) after the restart the output is still exact" \
  '[ "$st" = 200 ] && text_of "$WORK/after.json" "$WORK/after" && cmp -s "$WORK/after" "$WORK/single.0"'
check "(a) the restarted drafter drafts again (accepted_tokens > 0)" \
  '[ "$(jget "$WORK/after.json" "j[\"speculative\"][\"accepted_tokens\"] > 0")" = True ]'
check "(a) KV pool back to full" kv_settled

# ---- (b) client disconnect ----------------------------------------------------
curl -sN --max-time 1 "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d "$(body "def long_function():" 2000 1)" "$URL/v1/completions" >"$WORK/cut.sse" 2>/dev/null
check "(b) the cut stream had started" 'grep -q "^data: {" "$WORK/cut.sse"'
check "(b) KV free == total after the client went away" kv_settled

# ---- (c) bad inputs -------------------------------------------------------------
st=$(post /v1/completions '{"prompt": "x", "max_tokens": ' "$WORK/bad1.json" "${AUTH[@]}")
check "(c) malformed JSON → 400" '[ "$st" = 400 ]'
st=$(post /v1/completions "$(body "def f():" 1000000 0)" "$WORK/bad2.json" "${AUTH[@]}")
check "(c) prompt + max_tokens beyond context → 400 naming max_tokens/prompt ($(head -c 200 "$WORK/bad2.json"))" \
  '[ "$st" = 400 ] && grep -Eq "max_tokens|prompt" "$WORK/bad2.json"'
st=$(post /v1/completions "$(body "def f():" 8 0 '{"temperature":-1}')" "$WORK/bad3.json" "${AUTH[@]}")
check "(c) temperature -1 → 400 naming temperature" \
  '[ "$st" = 400 ] && [ "$(jget "$WORK/bad3.json" "j[\"error\"][\"param\"]")" = temperature ]'
st=$(post /v1/completions "$(body "def f():" 8 0)" "$WORK/bad4.json" -H "Authorization: Bearer wrong")
check "(c) wrong API key → 401" '[ "$st" = 401 ]'
st=$(post /v1/completions "$(body "def f():" 8 0)" "$WORK/bad5.json")
check "(c) missing API key → 401" '[ "$st" = 401 ]'
st=$(post /v1/completions "$(body "${PROMPTS[1]}" 128 0)" "$WORK/good.json" "${AUTH[@]}")
check "(c) a good request still succeeds, exact text" \
  '[ "$st" = 200 ] && text_of "$WORK/good.json" "$WORK/good" && cmp -s "$WORK/good" "$WORK/single.1"'
check "(c) KV free == total at the end" kv_settled

# ---- (d) drafter stopped mid-pipeline -----------------------------------------------
singles long 384
DRAFTER=$(pgrep -P "$SERVE_PID" -f specd-drafter | head -n 1)
streams_start stopped 384
[ -n "$DRAFTER" ] && kill -STOP "$DRAFTER"
DONE_AT_STOP=$(streams_done stopped)
check "(d) the drafter stopped mid-stream ($DONE_AT_STOP of 4 streams done at the stop)" '[ "$DONE_AT_STOP" -lt 4 ]'
streams_check stopped long "(d) while the drafter was stopped"
sleep 1.2 # the router's next health check carries the verifier's figures
FB=$(metric specd_spec_fallback_used_total)
check "(d) meanwhile the verifier verified its n-gram fallback's drafts ($FB steps)" '[ "${FB:-0}" -gt 0 ]'
[ -n "$DRAFTER" ] && kill -CONT "$DRAFTER"
drafts_again() { # the drafter's own spans, not the fallback's
  local st
  st=$(post /v1/completions "$(body "${PROMPTS[2]}" 128 0)" "$WORK/resumed.json" "${AUTH[@]}")
  [ "$st" = 200 ] && [ "$(jget "$WORK/resumed.json" "j[\"speculative\"][\"drafting\"][\"spans_used\"] > 0")" = True ]
}
resumed=0
for _ in $(seq 40); do drafts_again && { resumed=1; break; }; sleep 0.25; done
check "(d) after SIGCONT the drafter re-synced and drafts again" '[ "$resumed" = 1 ]'
check "(d) ... and the output is exact" 'text_of "$WORK/resumed.json" "$WORK/resumed" && cmp -s "$WORK/resumed" "$WORK/single.2"'
drafter_idle() {
  local i f t r
  for i in $(seq 50); do
    f=$(metric specd_drafter_kv_blocks_free); t=$(metric specd_drafter_kv_blocks); r=$(metric specd_drafter_requests)
    if [ -n "$t" ] && [ "$t" != 0 ] && [ "$f" = "$t" ] && [ "$r" = 0 ]; then return 0; fi
    sleep 0.2
  done
  echo "# drafter kv free=$f total=$t requests=$r"
  return 1
}
check "(d) the drafter's KV mirrors are all free again and it holds no request" drafter_idle
check "(d) KV free == total at the end" kv_settled
serve_stop
finish
