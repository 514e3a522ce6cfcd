#!/usr/bin/env bash
# test_connection_flood.sh — no client can starve the others by opening
# sockets (router/conncap.h). A router with --max-connections 64 and
# --max-connections-per-client 16, in front of the fake verifier (a token every
# 20 ms): while a streamed request from 127.0.0.1 runs, 128 sockets (twice the
# cap) are opened from 127.0.0.2 and never send a byte. Checked:
#   - requests from 127.0.0.1 are all answered, each within a second;
#   - the stream in flight is not cut (its every token, [DONE]);
#   - the flood's connections are closed (per client, and silent ones after
#     --first-byte-timeout), and /metrics counts them by reason;
#   - a request whose body stalls (Content-Length 100, 10 bytes sent) gets a
#     JSON 408 after --body-timeout;
#   - an idle keep-alive connection is closed after --keepalive-timeout.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"

VPORT=$(free_port); HPORT=$(free_port)
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 4096 \
  --vocab 8192 --delay-ms 20 >"$WORK/fake.log" 2>&1 &
PIDS+=("$!")
"$BIN/specd-router" --host 0.0.0.0 --port "$HPORT" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --model-name tinycode-16m --health-interval-ms 200 --max-connections 64 --max-connections-per-client 16 \
  --first-byte-timeout 3 --body-timeout 2 --keepalive-timeout 2 >"$WORK/router.log" 2>&1 &
RT=$!
PIDS+=("$RT")
URL=http://127.0.0.1:$HPORT
wait_health "$URL" || { echo "FAIL - the router came up"; exit 1; }

"$PY" - "$HPORT" >"$WORK/flood.out" 2>&1 <<'PY'
import json, socket, sys, threading, time
port = int(sys.argv[1])

def stream(result):
    body = json.dumps({"prompt": "def f():", "max_tokens": 150, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    s.settimeout(30)
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        b = s.recv(65536)
        if not b:
            break
        data += b
    result["chunks"] = data.count(b"data: {")
    result["done"] = b"data: [DONE]" in data and b'"finish_reason":"length"' in data

res = {}
t = threading.Thread(target=stream, args=(res,))
t.start()
time.sleep(0.3)  # the stream is in flight
flood = []
for _ in range(128):  # twice the cap, from another address; never a byte
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.2", port))
    except BlockingIOError:
        pass
    flood.append(s)
time.sleep(0.3)
worst, ok = 0.0, 0
for i in range(20):  # the others are still served, each within a second
    t0 = time.time()
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        ok += c.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        pass
    worst = max(worst, time.time() - t0)
    c.close()
    time.sleep(0.05)
print("answered %d of 20, the slowest in %.3f s" % (ok, worst))
t.join()
print("stream chunks %d done %s" % (res.get("chunks", 0), res.get("done")))
time.sleep(3.5)  # past --first-byte-timeout
open_left = 0
for s in flood:
    try:
        s.setblocking(True)
        s.settimeout(0.05)
        open_left += s.recv(1) != b""
    except socket.timeout:
        open_left += 1
    except OSError:
        pass
print("flood connections still open after the first-byte timeout:", open_left)
# a body that stalls: 10 of 100 bytes
b = socket.create_connection(("127.0.0.1", port))
b.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
          b'{"prompt":')
b.settimeout(6)
t0 = time.time()
reply = b""
try:
    while True:
        d = b.recv(4096)
        if not d:
            break
        reply += d
except OSError:
    pass
head, _, body = reply.partition(b"\r\n\r\n")
try:
    err = json.loads(body)["error"]
    shape = all(k in err for k in ("message", "type", "param", "code")) and err["code"] == "request_timeout"
except ValueError:
    shape = False
print("stalled body: %s after %.1f s, json error %s" % (head.split(b"\r\n")[0].decode(), time.time() - t0, shape))
# an idle keep-alive connection is closed after --keepalive-timeout
k = socket.create_connection(("127.0.0.1", port))
k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
k.settimeout(1)
k.recv(4096)
k.settimeout(5)
t0 = time.time()
try:
    while k.recv(4096):
        pass
except OSError:
    pass
print("keep-alive closed after %.1f s" % (time.time() - t0))
PY
cat "$WORK/flood.out" | sed 's/^/#   /'
check "20 of 20 requests from another client answered, each within a second" \
  '"$PY" -c "import re,sys; m=re.search(r\"answered (\d+) of 20, the slowest in ([0-9.]+)\", open(\"$WORK/flood.out\").read()); sys.exit(0 if m and m.group(1) == \"20\" and float(m.group(2)) < 1 else 1)"'
check "the stream in flight was not cut (to its max_tokens, finish_reason length, [DONE])" \
  'grep -Eq "stream chunks [0-9]+ done True" "$WORK/flood.out"'
check "the flood's connections were closed" 'grep -q "still open after the first-byte timeout: 0" "$WORK/flood.out"'
check "a stalled body got a JSON 408" 'grep -q "stalled body: HTTP/1.1 408 Request Timeout after [12]\.[0-9] s, json error True" "$WORK/flood.out"'
check "an idle keep-alive connection was closed after --keepalive-timeout 2" \
  '"$PY" -c "import re,sys; t=float(re.search(r\"keep-alive closed after ([0-9.]+)\", open(\"$WORK/flood.out\").read()).group(1)); sys.exit(0 if 1.5 < t < 4 else 1)"'
curl -s "$URL/metrics" >"$WORK/metrics"
grep "^specd_http_connections_closed_total" "$WORK/metrics" | sed 's/^/#   /'
check "/metrics counts the closes by reason (per_client, silent, timeout, keepalive)" \
  'grep -Eq "reason=\"per_client\"\} [1-9]" "$WORK/metrics" && grep -Eq "reason=\"silent\"\} [1-9]" "$WORK/metrics" &&
   grep -Eq "reason=\"timeout\"\} [1-9]" "$WORK/metrics" && grep -Eq "reason=\"keepalive\"\} [1-9]" "$WORK/metrics"'
check "the router logged the flood, a few lines a second at most" \
  '[ "$(grep -c "closed: per_client" "$WORK/router.log")" -ge 1 ] && [ "$(grep -c "closed: per_client" "$WORK/router.log")" -le 20 ]'
check "the router is alive" 'kill -0 $RT'
echo "$FAILS check(s) failed"
[ "$FAILS" = 0 ] || { tail -n 20 "$WORK/router.log"; exit 1; }
