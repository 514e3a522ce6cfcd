#!/usr/bin/env bash
# test_lane_discovery.sh — specd-router --verifier-dns: lanes from a DNS name
# (as a Kubernetes headless Service). A small DNS server (Python, UDP on
# loopback) answers A queries for lanes.specd.test from a file; two TEST-ONLY
# fake verifiers listen on 127.0.0.2 and 127.0.0.3. Checks: both addresses
# become lanes and take requests; an address dropped from the answer retires
# its lane (DOWN, no new requests) within a few re-resolutions; it comes back
# when the answer has it again; a second router on the same name sees the
# same lanes; when the DNS server stops answering the lanes stay.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"

DNSPORT=$(free_port); VPORT=$(free_port); HPORT=$(free_port); HPORT2=$(free_port)
printf '127.0.0.2\n127.0.0.3\n' >"$WORK/records"
cat >"$WORK/dns.py" <<'PY'
import socket, struct, sys
port, records = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
while True:
    q, addr = s.recvfrom(512)
    if len(q) < 17:
        continue
    qid, = struct.unpack(">H", q[:2])
    i = 12
    while q[i] != 0:
        i += 1 + q[i]
    qtype, = struct.unpack(">H", q[i + 1:i + 3])
    question = q[12:i + 5]
    ips = [l.strip() for l in open(records) if l.strip()] if qtype == 1 else []
    answers = b"".join(struct.pack(">HHHIH", 0xC00C, 1, 1, 0, 4) + socket.inet_aton(ip) for ip in ips)
    s.sendto(struct.pack(">HHHHHH", qid, 0x8180, 1, len(ips), 0, 0) + question + answers, addr)
PY
"$PY" "$WORK/dns.py" "$DNSPORT" "$WORK/records" >"$WORK/dns.log" 2>&1 &
DNS=$!; PIDS+=("$DNS")
for ip in 127.0.0.2 127.0.0.3; do
  "$BIN/specd-test-fake-verifier" --listen "tcp://$ip:$VPORT" --model tinycode-16m --max-context 512 \
    --delay-ms 5 >"$WORK/fv-$ip.log" 2>&1 &
  PIDS+=("$!")
done
router() { # router PORT
  "$BIN/specd-router" --host 127.0.0.1 --port "$1" --verifier-dns "lanes.specd.test:$VPORT" \
    --dns-server "127.0.0.1:$DNSPORT" --dns-interval-s 0.5 --health-interval-ms 200 --health-misses 3 \
    --tokenizer "$TOK" --model-name tinycode-16m >"$WORK/router-$1.log" 2>&1 &
  PIDS+=("$!")
}
router "$HPORT"
URL=http://127.0.0.1:$HPORT
# lane_up URL IP: specd_lane_up of the lane at IP ("" when there is none)
lane_up() { curl -s "$1/metrics" | awk -v ep="tcp://$2:$VPORT" '$1 == "specd_lane_up{lane=\"" ep "\"}" { print $2 }'; }
# wait_lane URL IP VALUE: up to 10 s
wait_lane() { local i; for i in $(seq 100); do [ "$(lane_up "$1" "$2")" = "$3" ] && return 0; sleep 0.1; done; return 1; }
submits() { grep -c "submit request" "$WORK/fv-$1.log"; }
complete() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions" -d '{"prompt":"ab","max_tokens":3}')" = 200 ]; }

check "both addresses of the name become lanes and come up" 'wait_lane "$URL" 127.0.0.2 1 && wait_lane "$URL" 127.0.0.3 1'
for i in $(seq 8); do # at once: the least-loaded lane takes each
  curl -s -o "$WORK/c$i" -w '%{http_code}' "$URL/v1/completions" -d '{"prompt":"ab","max_tokens":30}' >"$WORK/s$i" &
done
wait_all=true
for i in $(seq 8); do while [ ! -s "$WORK/s$i" ]; do sleep 0.1; done; [ "$(cat "$WORK/s$i")" = 200 ] || wait_all=false; done
check "8 concurrent requests complete" '$wait_all'
check "requests go to both lanes ($(submits 127.0.0.2) and $(submits 127.0.0.3))" '[ "$(submits 127.0.0.2)" -gt 0 ] && [ "$(submits 127.0.0.3)" -gt 0 ]'

router "$HPORT2"
check "a second router on the same name finds the same lanes" \
  'wait_lane "http://127.0.0.1:$HPORT2" 127.0.0.2 1 && wait_lane "http://127.0.0.1:$HPORT2" 127.0.0.3 1'

printf '127.0.0.3\n' >"$WORK/records"
check "an address gone from the answer retires its lane" 'wait_lane "$URL" 127.0.0.2 0'
before=$(submits 127.0.0.2)
for i in $(seq 6); do complete || fail "request $i after the retirement"; done
check "new requests go to the remaining lane only" '[ "$(submits 127.0.0.2)" = "$before" ]'
check "the router logs the retirement" 'grep -q "lane tcp://127.0.0.2:$VPORT retired" "$WORK/router-$HPORT.log"'

printf '127.0.0.2\n127.0.0.3\n' >"$WORK/records"
check "the address back in the answer brings its lane back" 'wait_lane "$URL" 127.0.0.2 1'

kill "$DNS"; wait "$DNS" 2>/dev/null
sleep 2
check "the DNS server gone: the lanes stay" '[ "$(lane_up "$URL" 127.0.0.2)" = 1 ] && [ "$(lane_up "$URL" 127.0.0.3)" = 1 ] && complete'

echo
[ "$FAILS" -eq 0 ] && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed"; exit 1
