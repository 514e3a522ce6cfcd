#!/usr/bin/env bash
# test_stop_restart.sh — stops and deaths lose nothing silently
# (docs/RELIABILITY.md).
# `specd serve` (one thread per worker) with two requests in flight, one
# streamed, one not, gets SIGTERM:
#   - with a drain long enough for them (--drain-timeout 120: a sanitizer
#     build needs ~40 s for the two) both finish whole (every token, a
#     finish_reason, the stream's [DONE]); a new connection meanwhile is
#     refused; serve exits 0 once they are done;
#   - with --drain-timeout 1 and requests longer than that, the stream ends
#     with an error event and [DONE], the other request with a JSON 503 —
#     never a cut without a word;
#   - kill -9 of the verifier with a greedy stream and a seeded sampled
#     request (1200 tokens each) in flight: the supervisor restarts it
#     (backoff from 0.5 s), the router resumes both on the new verifier from
#     the tokens already produced (--resume-wait; the new process is told
#     apart by HealthReply.instance even when it answers before the lane is
#     taken for down): both complete, equal to the same requests run
#     undisturbed before; /health is 200 again, serve runs on;
#   - kill -9 of the router mid-stream: the client sees the transfer broken
#     (no [DONE], curl exit 18), the supervisor restarts the router, the
#     verifier cancels the dead router's request (ZMQ_ROUTER_MANDATORY: its
#     next event is undeliverable) and its KV is free again;
#   - the socket directory a supervisor killed with -9 left behind is
#     removed by the next one.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

# run_case NAME MAX_TOKENS SERVE_ARGS...: two requests, SIGTERM 0.4 s in.
run_case() {
  local name=$1 max=$2; shift 2
  serve_start --no-spec "$@" || { fail "[$name] specd serve came up"; return 1; }
  local body='{"prompt":"def main():","max_tokens":'"$max"',"ignore_eos":true,"temperature":0'
  curl -sN -H 'Content-Type: application/json' \
    -d "$body"',"stream":true,"stream_options":{"include_usage":true}}' "$URL/v1/completions" >"$WORK/$name.sse" &
  local c1=$!
  curl -s -o "$WORK/$name.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body}" \
    "$URL/v1/completions" >"$WORK/$name.code" &
  local c2=$!
  sleep 0.4
  kill -TERM "$SERVE_PID"
  sleep 0.3
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health" >"$WORK/$name.late" 2>/dev/null
  echo " exit $?" >>"$WORK/$name.late"
  wait "$c1" "$c2"
  local t0=$SECONDS
  wait "$SERVE_PID"
  echo "$? $((SECONDS - t0))" >"$WORK/$name.exit"
}

# ---- the drain completes ------------------------------------------------------------
run_case drained 1500 --drain-timeout 120
sse_check() { # FILE EXPECT(whole|error): the stream's events, checked
  "$PY" - "$@" <<'PY'
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert ev and ev[-1] == "[DONE]", ev[-3:]
js = [json.loads(e) for e in ev[:-1]]
errs = [j["error"] for j in js if "error" in j]
if sys.argv[2] == "whole":
    assert not errs, errs
    assert any(c.get("finish_reason") == "length" for j in js for c in j.get("choices", []))
    assert js[-1]["usage"]["completion_tokens"] == int(sys.argv[3]), js[-1]
else:
    assert errs and errs[0]["code"] == "shutdown", errs
PY
}
check "[drained] the stream finished whole: 1500 tokens, finish_reason, [DONE]" 'sse_check "$WORK/drained.sse" whole 1500'
check "[drained] the other request finished whole: 200, 1500 tokens" \
  '[ "$(cat "$WORK/drained.code")" = 200 ] && [ "$(jget "$WORK/drained.json" "j[\"usage\"][\"completion_tokens\"]")" = 1500 ]'
check "[drained] a new connection during the drain is refused ($(cat "$WORK/drained.late"))" \
  'grep -q "exit 7" "$WORK/drained.late"'
check "[drained] specd serve exited 0 once they were done" '[ "$(cut -d" " -f1 "$WORK/drained.exit")" = 0 ]'
grep -q "draining" "$SERVE_LOG" && grep -q "drained: every request finished" "$SERVE_LOG" ||
  fail "[drained] the router logged its drain"

# ---- the drain times out --------------------------------------------------------------
run_case cut 3500 --drain-timeout 1
check "[timeout] the stream ended with an error event and [DONE]" 'sse_check "$WORK/cut.sse" error'
check "[timeout] the other request got a JSON 503" \
  '[ "$(cat "$WORK/cut.code")" = 503 ] && [ "$(jget "$WORK/cut.json" "j[\"error\"][\"code\"]")" = shutdown ]'
check "[timeout] specd serve exited 0 ($(cat "$WORK/cut.exit"))" '[ "$(cut -d" " -f1 "$WORK/cut.exit")" = 0 ]'

# ---- the verifier dies ------------------------------------------------------------------
sleep 0 & dead=$!; wait "$dead" # a pid that is gone: its supervisor was killed with -9
mkdir -p "/tmp/specd-$dead-stale" && touch "/tmp/specd-$dead-stale/verifier.sock"
serve_start --no-spec || fail "[restart] specd serve came up"
check "[restart] a dead supervisor's socket directory is removed at start-up" '[ ! -e "/tmp/specd-$dead-stale" ]'
for _ in $(seq 50); do grep -q "specd: serving" "$SERVE_LOG" && break; sleep 0.1; done # the supervisor saw it up
greedy='{"prompt":"def main():","max_tokens":1200,"ignore_eos":true,"temperature":0'
sampled='{"prompt":"import os","max_tokens":1200,"ignore_eos":true,"temperature":0.8,"seed":5}'
post() { curl -s -H 'Content-Type: application/json' -d "$1" "$URL/v1/completions"; }
post "$greedy}" >"$WORK/ref_g.json"
post "$sampled" >"$WORK/ref_s.json"
steps() { curl -s "$URL/metrics" | awk '$1 == "specd_spec_steps_total" { print $2 }'; }
sleep 1.2 # a health reply after the requests
steps0=$(steps)
curl -sN -H 'Content-Type: application/json' -d "$greedy"',"stream":true}' "$URL/v1/completions" >"$WORK/kill_g.sse" &
cg=$!
post "$sampled" >"$WORK/kill_s.json" &
cs=$!
sleep 0.4
vpid=$(pgrep -P "$SERVE_PID" -f specd-verifier)
kill -KILL "$vpid"
wait "$cg" "$cs"
same_text() { # SSE-or-JSON REFERENCE.json: the same completion text, whole, without an error
  "$PY" - "$@" <<'PY'
import json, sys
ref = json.load(open(sys.argv[2]))["choices"][0]["text"]
raw = open(sys.argv[1]).read()
if raw.startswith("data: "):
    ev = [l[6:] for l in raw.split("\n") if l.startswith("data: ")]
    assert ev[-1] == "[DONE]", ev[-2:]
    js = [json.loads(e) for e in ev[:-1]]
    assert not any("error" in j for j in js), [j for j in js if "error" in j]
    got = "".join(c["text"] for j in js for c in j.get("choices", []))
else:
    got = json.loads(raw)["choices"][0]["text"]
assert len(ref) > 1000 and got == ref, (len(got), len(ref))
PY
}
check "[restart] a greedy stream in flight when the verifier was killed completed on the restarted one, equal to the undisturbed run" \
  'same_text "$WORK/kill_g.sse" "$WORK/ref_g.json"'
check "[restart] a seeded sampled request in flight then completed too, equal to the undisturbed run" \
  'same_text "$WORK/kill_s.json" "$WORK/ref_s.json"'
check "[restart] the router resumed them" 'grep -q "resuming on" "$SERVE_LOG"'
back=0 st=
for _ in $(seq 150); do
  sleep 0.1
  nv=$(pgrep -P "$SERVE_PID" -f specd-verifier)
  [ -n "$nv" ] && [ "$nv" != "$vpid" ] || continue
  st=$(curl -s -o "$WORK/after.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt":"def main():","max_tokens":8}' "$URL/v1/completions")
  [ "$st" = 200 ] && { back=1; break; }
done
check "[restart] the verifier killed with -9 is restarted and requests complete again (last status $st)" \
  '[ "$back" = 1 ] && [ "$(jget "$WORK/after.json" "j[\"usage\"][\"completion_tokens\"]")" = 8 ]'
sleep 1.2
steps1=$(steps)
check "[restart] the lane's counters go on from where the killed verifier left them ($steps0 → $steps1 steps)" \
  '[ "${steps0:-0}" -gt 2000 ] && [ "${steps1:-0}" -gt "$steps0" ]'
check "[restart] /health is 200 again" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$URL/health")" = 200 ]'
check "[restart] specd serve runs on" 'kill -0 "$SERVE_PID" && grep -q "restarting the verifier" "$SERVE_LOG"'

# ---- the router dies ------------------------------------------------------------------
kvfree() { curl -s "$URL/metrics" | awk '$1 ~ /^specd_kv_blocks_free/ { print $2 }'; }
free0=$(kvfree)
{ curl -sN -H 'Content-Type: application/json' -d '{"prompt":"def main():","max_tokens":4000,"ignore_eos":true,"stream":true}' \
  "$URL/v1/completions" >"$WORK/kr.sse"; echo $? >"$WORK/kr.exit"; } &
ck=$!
for _ in $(seq 500); do grep -q "^data: {" "$WORK/kr.sse" 2>/dev/null && break; sleep 0.01; done # streaming (~0.5 s in all)
rpid=$(pgrep -P "$SERVE_PID" -f specd-router)
kill -KILL "$rpid"
wait "$ck"
check "[router] kill -9 of the router: its client sees the stream broken, not ended (curl exit $(cat "$WORK/kr.exit"): 18, no [DONE])" \
  '[ "$(cat "$WORK/kr.exit")" = 18 ] && grep -q "^data: {" "$WORK/kr.sse" && ! grep -q "\[DONE\]" "$WORK/kr.sse"'
back=0 st=
for _ in $(seq 100); do
  sleep 0.1
  st=$(curl -s -o "$WORK/after.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt":"def main():","max_tokens":8}' "$URL/v1/completions" 2>/dev/null)
  [ "$st" = 200 ] && { back=1; break; }
done
check "[router] the supervisor restarts the router and requests complete again (last status $st)" \
  '[ "$back" = 1 ] && grep -q "restarting the router" "$SERVE_LOG"'
check "[router] the verifier cancels the dead router's request at its next event (nothing computed for nobody)" \
  'grep -q "its router is gone; cancelling" "$SERVE_LOG"'
sleep 1.2 # a health reply after the cancel
check "[router] the verifier's KV is all free again ($free0 → $(kvfree) free blocks)" '[ -n "$free0" ] && [ "$(kvfree)" = "$free0" ]'
serve_stop
finish
