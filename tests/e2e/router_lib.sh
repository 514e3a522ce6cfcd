# router_lib.sh — shared set-up of the e2e tests that run specd-router in
# front of the TEST-ONLY fake verifier (test_router_api.sh,
# test_router_hardening.sh): paths, a work directory and processes cleaned
# up on exit, the tools needed, and the check helpers.
# Sets BIN, MODELS, TOK, WORK, PIDS (kill on exit), FAILS, PY.
set -u
BIN=${SD_BIN:-$(dirname "$0")/../../build/bin}
MODELS=${SD_MODELS:-$(dirname "$0")/../../models}
TOK=$MODELS/tinycode-16m/tokenizer.json
WORK=$(mktemp -d)
PIDS=()
FAILS=0
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

for need in "$BIN/specd-router" "$BIN/specd-test-fake-verifier" "$TOK"; do
  [ -e "$need" ] || { echo "missing $need"; exit 1; }
done
command -v curl >/dev/null || { echo "curl is required"; exit 1; }
command -v python3 >/dev/null || { echo "python3 is required"; exit 1; }
PY=$(python3 -c 'import sys; print(sys.executable)')  # skip slow version-manager shims

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }
check() { if eval "$2"; then ok "$1"; else fail "$1"; return 1; fi; }
# jget FILE EXPR: evaluates a Python expression over the JSON in FILE as j.
jget() { "$PY" -c "import json,sys; j=json.load(open('$1')); print($2)" 2>/dev/null; }
# wait_health URL: up to 10 s for GET URL/health to answer 200.
wait_health() {
  local i
  for i in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}
