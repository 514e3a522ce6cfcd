#!/usr/bin/env bash
# test_dns_exit_leak.sh — a router resolving its lanes from DNS
# (--verifier-dns) against a nameserver that never answers frees everything
# when it stops: libevent 2.1 leaves a pending lookup's reply allocated when
# the DNS base is freed under it, so the router cancels its lookups when it
# starts draining (router/discovery.h sd_disc_stop). Checked with valgrind's
# leak checker on SIGTERM; skips (77) without valgrind.
# Env: SD_BIN, SD_MODELS (set by CTest).
set -u
BIN=${SD_BIN:?SD_BIN not set}
MODELS=${SD_MODELS:?SD_MODELS not set}
command -v valgrind >/dev/null || { echo "SKIP: valgrind not found (Debian: apt-get install valgrind)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
tmp=$(mktemp -d)
trap 'kill $NS 2>/dev/null; rm -rf "$tmp"' EXIT
# a nameserver that reads every query and answers none
python3 - "$tmp/ns.port" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0))
open(sys.argv[1], "w").write(str(s.getsockname()[1])); s.settimeout(1)
t = time.time()
while time.time() - t < 60:
    try: s.recvfrom(4096)
    except OSError: pass
PY
NS=$!
for _ in $(seq 50); do [ -s "$tmp/ns.port" ] && break; sleep 0.1; done
HP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9 "$BIN/specd-router" \
  --verifier-dns specd-nowhere.invalid:5555 --dns-server "127.0.0.1:$(cat "$tmp/ns.port")" --dns-interval-s 1 \
  --tokenizer "$MODELS/tinycode-16m/tokenizer.json" --model-name x --port "$HP" >"$tmp/vg.log" 2>&1 &
R=$!
for _ in $(seq 200); do grep -q "serving x" "$tmp/vg.log" && break; sleep 0.1; done
sleep 2.5 # lookups sent, none answered
kill -TERM $R
wait $R
rc=$?
if [ $rc -eq 0 ] && grep -q "definitely lost: 0 bytes" "$tmp/vg.log"; then
  echo "ok   the router stopped with its DNS lookups pending and freed everything (valgrind)"
  exit 0
fi
echo "FAIL the router leaked at exit (valgrind exit $rc):"
grep -A12 "definitely lost in\|LEAK SUMMARY" "$tmp/vg.log" | head -30
exit 1
