# pipeline_lib.sh — shared helpers for the full-pipeline e2e tests
# (test_pipeline_*.sh, test_openai_client.sh): start / stop `specd serve`
# (verifier + drafter + router) on a free loopback port, send completions
# (plain and SSE) with curl, extract texts, and compute reference outputs
# with specd-generate. Sourced, not run. Env: SD_BIN, SD_MODELS (set by CTest).
# Every process started here is stopped by the EXIT trap (serve_stop_all).
set -u
BIN=${SD_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../build/bin" && pwd)}
MODELS=${SD_MODELS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../models" && pwd)}
TARGET=$MODELS/tinycode-16m
DRAFT=$MODELS/tinycode-3m
WORK=$(mktemp -d)
FAILS=0
SERVE_PIDS=()
SERVE_PID=""
SERVE_LOG=/dev/null
PORT=""
URL=""

for need in "$BIN/specd" "$BIN/specd-verifier" "$BIN/specd-drafter" "$BIN/specd-router" "$BIN/specd-generate" \
            "$TARGET/config.json" "$DRAFT/config.json"; do
  [ -e "$need" ] || { echo "FAIL - missing $need (build the project first)"; exit 1; }
done
command -v curl >/dev/null || { echo "FAIL - curl is required"; exit 1; }
command -v python3 >/dev/null || { echo "FAIL - python3 is required"; exit 1; }
PY=$(python3 -c 'import sys; print(sys.executable)')

ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }
check() { if eval "$2"; then ok "$1"; else fail "$1"; return 1; fi; }
# jget FILE EXPR: a Python expression over the JSON in FILE as j.
jget() { "$PY" -c "import json,sys; j=json.load(open('$1')); print($2)" 2>/dev/null; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# serve_start ARGS...: starts `specd serve --target $TARGET ARGS --port P
# --threads 1` and waits (60 s) for /health 200; retries on another port
# when the supervisor dies early (port taken). Sets SERVE_PID, PORT, URL.
# Logs go to $WORK/serve.N.log. Returns 1 when the server never came up.
serve_start() {
  local try
  for try in 1 2 3; do
    PORT=$(free_port)
    URL=http://127.0.0.1:$PORT
    local log=$WORK/serve.${#SERVE_PIDS[@]}.log
    "$BIN/specd" serve --target "$TARGET" "$@" --port "$PORT" --threads 1 >"$log" 2>&1 &
    SERVE_PID=$!
    SERVE_PIDS+=("$SERVE_PID")
    local i
    for i in $(seq 600); do
      if ! kill -0 "$SERVE_PID" 2>/dev/null; then break; fi
      if [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then
        SERVE_LOG=$log
        case " $* " in
          *" --no-spec "*) return 0 ;;
          *" --draft-in-verifier "*) sleep 1.5; return 0 ;; # the draft model runs in the verifier
          *" --draft "* | *" --ngram-drafter "*) ;;
          *) sleep 1.5; return 0 ;; # no drafter process: the router's next health check has the figures
        esac
        wait_drafter 1 && return 0
        echo "# the drafter did not start in 60 s; log:"; sed 's/^/#   /' "$log" | tail -n 30
        return 1
      fi
      sleep 0.1
    done
    if kill -0 "$SERVE_PID" 2>/dev/null; then
      echo "# server did not become healthy in 60 s; log:"; sed 's/^/#   /' "$log" | tail -n 30
      serve_stop
      return 1
    fi
    echo "# specd serve exited early (try $try); log:"; sed 's/^/#   /' "$log" | tail -n 20
  done
  return 1
}

# wait_drafter N: waits (60 s) until the current server's log shows the
# drafter's N-th start ("drafting with"), then 1.5 s more so that the
# verifier's link (probing every 500 ms while the drafter is down) sees it.
wait_drafter() {
  local i
  for i in $(seq 600); do
    if [ "$(grep -c 'drafter info: drafting with' "$SERVE_LOG" 2>/dev/null)" -ge "$1" ]; then sleep 1.5; return 0; fi
    sleep 0.1
  done
  return 1
}

# wait_log PATTERN N: waits (60 s) until the current server's log has N
# lines matching PATTERN (grep -E); a worker's health is answered before it
# logs that it serves (the step-cost calibration runs in between).
wait_log() {
  local i
  for i in $(seq 600); do
    [ "$(grep -cE -- "$1" "$SERVE_LOG" 2>/dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# serve_stop: SIGTERM to the supervisor (it stops its children), then
# SIGKILL to whatever is left after 15 s.
serve_stop() {
  [ -n "$SERVE_PID" ] || return 0
  local kids
  kids=$(pgrep -P "$SERVE_PID" 2>/dev/null | tr '\n' ' ')
  kill -TERM "$SERVE_PID" 2>/dev/null
  local i
  for i in $(seq 150); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SERVE_PID" 2>/dev/null; then kill -KILL "$SERVE_PID" 2>/dev/null; fi
  for k in $kids; do kill -KILL "$k" 2>/dev/null; done
  wait "$SERVE_PID" 2>/dev/null
  SERVE_PID=""
}

serve_stop_all() {
  serve_stop
  local p
  for p in "${SERVE_PIDS[@]}"; do
    local kids; kids=$(pgrep -P "$p" 2>/dev/null | tr '\n' ' ')
    kill -KILL "$p" $kids 2>/dev/null
  done
  jobs -p | xargs -r kill 2>/dev/null
  wait 2>/dev/null
  [ -n "${SD_KEEP_WORK:-}" ] && echo "# kept $WORK" || rm -rf "$WORK"
}
trap serve_stop_all EXIT

# post PATH BODY OUT [curl args]: POSTs JSON, body to OUT, prints the status.
post() {
  local p=$1 b=$2 out=$3; shift 3
  curl -s -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' "$@" -d "$b" "$URL$p"
}

# text_of JSON OUT: writes choices[0].text of a completion to OUT (raw bytes).
text_of() { "$PY" -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))['choices'][0]['text'])" "$1" >"$2"; }

# sse_text SSE OUT: concatenates choices[0].text of every SSE chunk into OUT;
# exits non-zero when the stream has no [DONE] or carries an error.
sse_text() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
lines = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("data: ")]
if not lines or lines[-1] != "[DONE]":
    sys.exit(1)
text = ""
for l in lines[:-1]:
    j = json.loads(l)
    if "error" in j:
        sys.exit(2)
    for c in j.get("choices", []):
        text += c.get("text") or ""
open(sys.argv[2], "w", encoding="utf-8").write(text)
PY
}

# expect_400s PROMPT MAX_TOKENS 'EXTRA|PARAM|MESSAGE'...: each greedy completion of PROMPT with EXTRA's
# members is a 400 in the OpenAI shape naming PARAM, MESSAGE in its message.
expect_400s() {
  local prompt=$1 max=$2 c extra param msg st got want; shift 2
  want="('invalid_request_error', '"
  for c in "$@"; do
    IFS='|' read -r extra param msg <<<"$c"
    st=$(post /v1/completions "$(body "$prompt" "$max" 0 "$extra")" "$WORK/bad.json")
    got=$(jget "$WORK/bad.json" "(j[\"error\"][\"type\"], j[\"error\"][\"param\"],
      \"$msg\" in j[\"error\"][\"message\"])")
    check "$extra: 400 naming $param" '[ "$st" = 400 ] && [ "$got" = "$want$param'"'"', True)" ]' ||
      echo "#   got: $(head -c 300 "$WORK/bad.json")"
  done
}

# reference PROMPT OUT [specd-generate args]: the target's plain output text.
reference() {
  local p=$1 out=$2; shift 2
  "$BIN/specd-generate" --model "$TARGET" --prompt "$p" --threads 1 --json "$@" >"$out.json" 2>"$out.err" &&
    "$PY" -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))['text'])" "$out.json" >"$out"
}

# body PROMPT MAX_TOKENS STREAM [extra JSON members]: a greedy completion body.
body() {
  "$PY" -c 'import json,sys
b={"prompt":sys.argv[1],"max_tokens":int(sys.argv[2]),"temperature":0,"top_p":1,"top_k":0,"ignore_eos":True,
   "stream":sys.argv[3]=="1"}
if len(sys.argv) > 4: b.update(json.loads(sys.argv[4]))
print(json.dumps(b))' "$@"
}

# metric NAME: the first value of a Prometheus metric on /metrics.
metric() { curl -s "$URL/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { print $2; exit }'; }

# kv_settled: waits up to 10 s for specd_kv_blocks_free == _total (> 0).
kv_settled() {
  local i f t
  for i in $(seq 50); do
    f=$(metric specd_kv_blocks_free); t=$(metric specd_kv_blocks)
    if [ -n "$t" ] && [ -n "$f" ] && [ "$t" != 0 ] && [ "$f" = "$t" ]; then return 0; fi
    sleep 0.2
  done
  echo "# kv free=$f total=$t"
  return 1
}

finish() {
  if [ "$FAILS" -eq 0 ]; then echo "PASS"; exit 0; fi
  echo "$FAILS check(s) failed"
  exit 1
}
