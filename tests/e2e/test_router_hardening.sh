#!/usr/bin/env bash
# test_router_hardening.sh — specd-router against an operator's mistakes and
# an attacker's requests (docs/RELIABILITY.md), with the TEST-ONLY fake
# verifier behind it:
#   - the API key: an empty one (SPECD_API_KEY="") and two sources at once
#     are refused at start-up; one from a file (blanks trimmed) works;
#     --metrics-auth puts /metrics behind it; wrong keys are logged a few
#     lines a second at most, counted in /metrics, and beyond 20 a second
#     answered 429 — the right key still goes through;
#   - /health names no endpoints;
#   - wrong methods on known paths get a JSON 405, unknown paths a JSON 404;
#   - a 1 MiB header block is refused (--max-headers) without the router's
#     memory growing by it, and a client that never finishes its headers is
#     cut after --header-timeout; the router keeps serving;
#   - an unparsable request and headers over the limit, which libevent
#     answers itself, get the OpenAI-shaped JSON error (router/errpage.h);
#   - --max-connections 4: with 4 idle keep-alive connections open a 5th is
#     served at once, the oldest idle one closed for it, and /metrics counts
#     the eviction.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"
peak_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

VPORT=$(free_port); HPORT=$(free_port)
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 512 \
  >"$WORK/fv.log" 2>&1 &
PIDS+=("$!")
ROUTER=("$BIN/specd-router" --host 127.0.0.1 --port "$HPORT" --verifier "tcp://127.0.0.1:$VPORT"
  --tokenizer "$TOK" --model-name tinycode-16m --health-interval-ms 200)
router() { "${ROUTER[@]}" "$@"; }

# --- start-up refusals ----------------------------------------------------------
SPECD_API_KEY= router >"$WORK/empty.log" 2>&1; rc=$?
check "an empty SPECD_API_KEY is refused (exit 2, says why)" '[ $rc = 2 ] && grep -q "empty" "$WORK/empty.log"'
printf 'k1\n' >"$WORK/key1"
router --api-key x --api-key-file "$WORK/key1" >"$WORK/both.log" 2>&1; rc=$?
check "a key given two ways is refused (exit 2)" '[ $rc = 2 ] && grep -q "one way" "$WORK/both.log"'
: >"$WORK/emptyfile"
router --api-key-file "$WORK/emptyfile" >"$WORK/ef.log" 2>&1; rc=$?
check "an empty key file is refused (exit 2)" '[ $rc = 2 ] && grep -q "empty" "$WORK/ef.log"'

# --- the hardened router ------------------------------------------------------------
KEY=s3cret-key
printf '  %s  \nsecond line ignored\n' "$KEY" >"$WORK/key"
chmod 600 "$WORK/key"
"${ROUTER[@]}" --api-key-file "$WORK/key" --metrics-auth --max-headers 8192 --header-timeout 1 >"$WORK/router.log" 2>&1 &
RT=$!; PIDS+=("$RT")
URL=http://127.0.0.1:$HPORT
AUTH=(-H "Authorization: Bearer $KEY")
wait_health "$URL"
code() { curl -s -o "$WORK/out" -w '%{http_code}' "$@"; }

check "the key from the file (blanks trimmed) is accepted" '[ "$(code "${AUTH[@]}" "$URL/v1/models")" = 200 ]'
check "the key is not on the router's command line" '! tr "\0" " " </proc/$RT/cmdline | grep -q "$KEY"'
check "--metrics-auth: /metrics without the key → JSON 401" \
  '[ "$(code "$URL/metrics")" = 401 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = invalid_api_key ]'
check "--metrics-auth: /metrics with the key → 200" '[ "$(code "${AUTH[@]}" "$URL/metrics")" = 200 ]'
check "/health stays open and names no endpoints" \
  '[ "$(code "$URL/health")" = 200 ] && [ "$(jget "$WORK/out" "all(\"endpoint\" not in l and \"lane\" in l for l in j[\"lanes\"])")" = True ] && ! grep -q "tcp://" "$WORK/out"'

# --- methods and paths ---------------------------------------------------------------
for m in PUT DELETE PATCH; do
  check "$m /v1/completions → JSON 405" \
    '[ "$(code -X '$m' "${AUTH[@]}" "$URL/v1/completions")" = 405 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = method_not_allowed ]'
done
check "POST /health → JSON 405" '[ "$(code -X POST "$URL/health")" = 405 ] && [ -n "$(jget "$WORK/out" "j[\"error\"][\"message\"]")" ]'
check "DELETE /nowhere → JSON 404" '[ "$(code -X DELETE "$URL/nowhere")" = 404 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = not_found ]'

# --- wrong keys ---------------------------------------------------------------------
# one curl for the whole burst: a curl process each took ~60 ms on a loaded 2-core machine, under 20 a second
mapfile -t urls < <(for i in $(seq 60); do echo "$URL/v1/models"; done)
curl -s -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer guess" "${urls[@]}" >"$WORK/guess.codes"
check "60 wrong keys in a burst: 401s, then 429s beyond 20 a second" \
  'grep -q 401 "$WORK/guess.codes" && grep -q 429 "$WORK/guess.codes"'
check "the right key still goes through during the burst" '[ "$(code "${AUTH[@]}" "$URL/v1/models")" = 200 ]'
check "failed attempts counted in /metrics" \
  '[ "$(curl -s "${AUTH[@]}" "$URL/metrics" | awk "\$1 == \"specd_auth_failures_total\" { print \$2 }")" -ge 60 ]'
n=$(grep -c "unauthorized request" "$WORK/router.log")
check "failed attempts logged, a few lines a second at most ($n lines)" '[ "$n" -ge 1 ] && [ "$n" -le 20 ]'

# --- header flood, slow headers ------------------------------------------------------
before=$(peak_kib "$RT")
"$PY" - "$HPORT" >"$WORK/flood.out" 2>&1 <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(5)
t0 = time.time()
sent = 0
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    chunk = b"X-Flood: " + b"a" * 1000 + b"\r\n"
    while sent < (1 << 20):
        s.sendall(chunk)
        sent += len(chunk)
    s.sendall(b"\r\n")
    reply = s.recv(200)
except (ConnectionResetError, BrokenPipeError, socket.timeout) as e:
    reply = repr(e).encode()
print("refused after %d bytes in %.2f s: %r" % (sent, time.time() - t0, reply[:60]))
PY
after=$(peak_kib "$RT")
check "a 1 MiB header block is refused ($(cat "$WORK/flood.out"))" \
  'grep -Eq "HTTP/1.1 4[0-9][0-9]|ConnectionReset|BrokenPipe" "$WORK/flood.out" && ! grep -q "HTTP/1.1 200" "$WORK/flood.out"'
check "the router's peak memory grew by less than 4 MiB ($before → $after KiB)" '[ $((after - before)) -lt 4096 ]'
"$PY" - "$HPORT" >"$WORK/slow.out" 2>&1 <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(6)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
t0 = time.time()
try:
    data = s.recv(100)
except (ConnectionResetError, socket.timeout) as e:
    data = repr(e).encode()
print("closed after %.1f s: %r" % (time.time() - t0, data[:40]))
PY
check "unfinished headers cut after --header-timeout 1 ($(cat "$WORK/slow.out"))" \
  '"$PY" -c "import re,sys; t=float(re.search(r\"after ([0-9.]+) s\", open(\"$WORK/slow.out\").read()).group(1)); sys.exit(0 if t < 4 else 1)"'
check "the router keeps serving" '[ "$(code "${AUTH[@]}" "$URL/v1/models")" = 200 ] && kill -0 $RT'

# --- what libevent refuses itself gets the JSON error too --------------------------------
"$PY" - "$HPORT" >"$WORK/raw.out" 2>&1 <<'PY'
import json, socket, sys, time
port = int(sys.argv[1])
def raw(data):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    head, _, body = out.partition(b"\r\n\r\n")
    status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "none"
    ctype = [l.split(b":", 1)[1].strip().decode() for l in head.split(b"\r\n") if l.lower().startswith(b"content-type:")]
    try:
        err = json.loads(body)["error"]
        shape = all(k in err for k in ("message", "type", "param", "code"))
    except ValueError:
        shape = False
    return "%s %s json-error=%s" % (status, ctype[0] if ctype else "-", shape)
print("garbage:", raw(b"GARBAGE\r\n\r\n"))
print("headers:", raw(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n"))
PY
check "an unparsable request line → a JSON 400 ($(grep garbage "$WORK/raw.out"))" \
  'grep -q "garbage: 400 application/json json-error=True" "$WORK/raw.out"'
check "headers over --max-headers → a JSON 4xx ($(grep headers: "$WORK/raw.out"))" \
  'grep -Eq "headers: 4[0-9][0-9] application/json json-error=True" "$WORK/raw.out"'

# --- the connection cap -----------------------------------------------------------------
CPORT=$(free_port)
"$BIN/specd-router" --host 127.0.0.1 --port "$CPORT" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --model-name tinycode-16m --health-interval-ms 200 --max-connections 4 >"$WORK/cap.log" 2>&1 &
PIDS+=("$!")
wait_health "http://127.0.0.1:$CPORT"
"$PY" - "$CPORT" >"$WORK/cap.out" 2>&1 <<'PY'
import socket, sys, time
port = int(sys.argv[1])
REQ = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
def served(s, wait):
    s.settimeout(wait)
    try:
        return s.recv(200).startswith(b"HTTP/1.1 ")
    except socket.timeout:
        return False
held = []
for _ in range(4):  # keep-alive: each stays open after its answer
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(REQ)
    held.append(served(s, 5) and s)
print("held", sum(1 for s in held if s))
time.sleep(0.2)
fifth = socket.create_connection(("127.0.0.1", port))
t0 = time.time()
fifth.sendall(REQ)
print("fifth served while 4 idle were open:", served(fifth, 2.0), "in %.2f s" % (time.time() - t0))
held[0].settimeout(2)
try:
    gone = held[0].recv(10) == b""  # the oldest idle one was closed for it
except (ConnectionResetError, socket.timeout) as e:
    gone = isinstance(e, ConnectionResetError)
print("the oldest idle one closed:", gone)
PY
check "--max-connections 4: 4 connections served and held ($(tr '\n' ' ' <"$WORK/cap.out"))" 'grep -q "held 4" "$WORK/cap.out"'
check "--max-connections 4: a 5th is served at once, the oldest idle connection closed for it" \
  'grep -q "fifth served while 4 idle were open: True" "$WORK/cap.out" && grep -q "the oldest idle one closed: True" "$WORK/cap.out"'
curl -s "http://127.0.0.1:$CPORT/metrics" >"$WORK/cap.metrics"
check "/metrics counts the eviction and the open connections" \
  'grep -Eq "^specd_http_connections_closed_total\{reason=\"evicted\"\} [1-9]" "$WORK/cap.metrics" && grep -Eq "^specd_http_connections [0-9]+" "$WORK/cap.metrics"'

echo "$FAILS check(s) failed"
[ "$FAILS" = 0 ] || { tail -n 20 "$WORK/router.log"; exit 1; }
