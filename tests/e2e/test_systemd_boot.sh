#!/usr/bin/env bash
# test_systemd_boot.sh — the units of deploy/systemd run under a real systemd.
# A Debian 12 root (debootstrap, with systemd and the runtime libraries; made
# once and kept in $SPECD_NSPAWN_BASE, default /var/tmp/specd-nspawn-bookworm)
# is copied, this build's binaries, the models and the units are installed in
# it as deploy/README.md ("systemd") says — the curve.conf drop-in, the keys
# readable through the group specd-keys — and it is booted with systemd-nspawn
# (private network: loopback only). Then:
#   - specd-verifier@lane0, specd-drafter@lane0 and specd-router start
#     (CURVE on their tcp:// sockets), each as a dynamic user (not root),
#     and a greedy completion through them uses drafts and equals this
#     build's plain decoding; a request without the API key gets 401;
#   - the same with specd.service (`specd serve`) after they are stopped.
# Skipped (77) when not root, without systemd-nspawn or debootstrap, when the
# Debian mirror is unreachable (and no base is kept), or when systemd cannot
# boot in a container here. Env: SD_BIN, SD_MODELS (set by CTest).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${SD_BIN:-$ROOT/build/bin}" && pwd)
MODELS=$(cd "${SD_MODELS:-$ROOT/models}" && pwd)
BASE=${SPECD_NSPAWN_BASE:-/var/tmp/specd-nspawn-bookworm}
MIRROR=${SPECD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
skip() { echo "SKIP - $1"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn not found (Debian: apt-get install systemd-container)"
PY=$(python3 -c 'import sys; print(sys.executable)')
WORK=$(mktemp -d /var/tmp/specd-boot.XXXXXX)
NSPAWN="" SERVE=""
cleanup() {
  [ -n "$NSPAWN" ] && kill "$NSPAWN" 2>/dev/null && sleep 1 && kill -9 "$NSPAWN" 2>/dev/null
  [ -n "$SERVE" ] && kill "$SERVE" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
[ -n "${SD_KEEP_WORK:-}" ] && trap - EXIT
FAILS=0
ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- the base root, made once -------------------------------------------------------
if [ ! -x "$BASE/lib/systemd/systemd" ]; then
  command -v debootstrap >/dev/null || skip "debootstrap not found (Debian: apt-get install debootstrap)"
  curl -s -o /dev/null --max-time 10 "$MIRROR/dists/bookworm/Release" || skip "the Debian mirror is unreachable ($MIRROR)"
  rm -rf "$BASE.tmp"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,libjansson4,libpcre2-8-0,libutf8proc2,libzmq5,libprotobuf-c1,libevent-2.1-7,libcurl4,curl,ca-certificates \
    bookworm "$BASE.tmp" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || { tail -n 20 "$WORK/debootstrap.log"; skip "debootstrap failed"; }
  rm -rf "$BASE.tmp"/var/cache/apt/archives/*.deb "$BASE.tmp"/var/lib/apt/lists/*
  mv "$BASE.tmp" "$BASE"
fi
R=$WORK/root
cp -a "$BASE" "$R"

# ---- install as deploy/README.md says -------------------------------------------------
install -d "$R/opt/specd/bin" "$R/opt/specd/models" "$R/etc/specd"
install -m 0755 "$BIN"/specd "$BIN"/specd-router "$BIN"/specd-verifier "$BIN"/specd-drafter "$R/opt/specd/bin/"
cp -r "$MODELS/tinycode-16m" "$MODELS/tinycode-3m" "$R/opt/specd/models/"
chmod -R a+rX "$R/opt/specd/models"
install -m 0644 "$ROOT"/deploy/systemd/*.service "$R/etc/systemd/system/"
for u in specd.service specd-router.service specd-verifier@.service specd-drafter@.service; do
  install -d "$R/etc/systemd/system/$u.d" && install -m 0644 "$ROOT/deploy/systemd/curve.conf" "$R/etc/systemd/system/$u.d/"
done
"$BIN/specd" keygen "$R/etc/specd/curve" >"$WORK/keygen.log" 2>&1 || fail "specd keygen"
chroot "$R" groupadd --system specd-keys
chroot "$R" chgrp -R specd-keys /etc/specd/curve && chmod -R g+rX "$R/etc/specd/curve"
KEY=boot-test-key
M=/opt/specd/models
cat >"$R/etc/specd/verifier-lane0.env" <<EOF
SPECD_VERIFIER_ARGS=--model $M/tinycode-16m --listen tcp://127.0.0.1:5555 --drafter tcp://127.0.0.1:5556 --curve-keys /etc/specd/curve --threads 1
EOF
cat >"$R/etc/specd/drafter-lane0.env" <<EOF
SPECD_DRAFTER_ARGS=--model $M/tinycode-3m --listen tcp://127.0.0.1:5556 --curve-keys /etc/specd/curve --threads 1
EOF
cat >"$R/etc/specd/router.env" <<EOF
SPECD_ROUTER_ARGS=--host 127.0.0.1 --port 8000 --tokenizer $M/tinycode-16m/tokenizer.json --model-name tinycode-16m --verifier tcp://127.0.0.1:5555 --curve-keys /etc/specd/curve
SPECD_API_KEY=$KEY
EOF
cat >"$R/etc/specd/serve.env" <<EOF
SPECD_SERVE_ARGS=--target $M/tinycode-16m --draft $M/tinycode-3m --host 127.0.0.1 --port 8001 --threads 1
SPECD_API_KEY=$KEY
EOF
chmod 0600 "$R"/etc/specd/*.env

# ---- boot --------------------------------------------------------------------------------
# libraries of this build that the Debian root has not (a CUDA build's
# /usr/local/cuda/lib): bound read-only at the same place
BINDS=()
for d in $(ldd "$BIN"/specd-verifier "$BIN"/specd-drafter "$BIN"/specd-router "$BIN"/specd 2>/dev/null |
           awk '$3 ~ /^\// { print $3 }' | xargs -r -n1 dirname | sort -u); do
  case $d in /lib* | /usr/lib*) ;; *) BINDS+=("--bind-ro=$d") ;; esac
done
systemd-nspawn -D "$R" "${BINDS[@]}" --register=no --keep-unit --private-network -b --console=pipe -q >"$WORK/boot.log" 2>&1 &
NSPAWN=$!
INIT=""
for _ in $(seq 200); do
  INIT=$(pgrep -P "$NSPAWN" -x systemd)
  [ -n "$INIT" ] && break
  kill -0 "$NSPAWN" 2>/dev/null || break
  sleep 0.1
done
[ -n "$INIT" ] || { sed 's/^/#   /' "$WORK/boot.log" | tail -n 20; skip "systemd did not boot in systemd-nspawn here"; }
ct() { nsenter -t "$INIT" -a "$@"; }
state=""
for _ in $(seq 300); do
  state=$(ct systemctl is-system-running 2>/dev/null)
  case $state in running | degraded) break ;; esac
  sleep 0.1
done
case $state in running | degraded) ok "systemd booted the root in systemd-nspawn ($state)" ;;
  *) skip "systemd did not reach a running state in systemd-nspawn here ($state)" ;; esac

# the reference: this build's plain decoding
HPORT=$(free_port)
"$BIN/specd" serve --target "$MODELS/tinycode-16m" --no-spec --host 127.0.0.1 --port "$HPORT" --threads 1 >"$WORK/host.log" 2>&1 &
SERVE=$!
req='{"prompt":"def fibonacci(n):","max_tokens":64,"temperature":0,"ignore_eos":true'
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$HPORT/health" && break; sleep 0.1; done
curl -s -H 'Content-Type: application/json' -d "$req}" "http://127.0.0.1:$HPORT/v1/completions" >"$WORK/ref.json"

# served PORT NAME: a greedy completion through the container's port equals the reference, with drafts
served() {
  local port=$1 name=$2 st=""
  for _ in $(seq 300); do
    st=$(ct curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" 2>/dev/null)
    [ "$st" = 200 ] && break
    sleep 0.2
  done
  [ "$st" = 200 ] || { fail "[$name] /health 200 (last $st)"; return 1; }
  ct curl -s -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "$req"',"speculative":{"num_draft":4}}' "http://127.0.0.1:$port/v1/completions" >"$WORK/$name.json"
  if "$PY" - "$WORK/$name.json" "$WORK/ref.json" <<'PY'; then
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["usage"]["completion_tokens"] == 64 and a["choices"][0]["text"] == b["choices"][0]["text"], (a, b)
assert a["speculative"]["accepted_tokens"] > 0, a["speculative"]
PY
    ok "[$name] a greedy completion through the units uses drafts and equals this build's plain decoding"
  else
    fail "[$name] a greedy completion through the units equals plain decoding"
  fi
  st=$(ct curl -s -o /dev/null -w '%{http_code}' -d "$req}" "http://127.0.0.1:$port/v1/completions")
  [ "$st" = 401 ] && ok "[$name] without the API key: 401" || fail "[$name] without the API key: 401 (got $st)"
}
# not_root NAME UNIT...: each unit active, its main process not running as root
not_root() {
  local name=$1 u pid uid bad=""; shift
  for u in "$@"; do
    pid=$(ct systemctl show -p MainPID --value "$u")
    uid=$(ct stat -c %u "/proc/$pid" 2>/dev/null)
    [ "$(ct systemctl is-active "$u")" = active ] && [ -n "$uid" ] && [ "$uid" != 0 ] || bad="$bad $u(uid ${uid:-?})"
  done
  [ -z "$bad" ] && ok "[$name] $* active, each as a dynamic user (not root)" || fail "[$name] units not active as a non-root user:$bad"
}
logs() { ct journalctl --no-pager -n 30 -u "$1" | sed 's/^/#   /'; }

ct systemctl enable --now specd-verifier@lane0 specd-drafter@lane0 specd-router >"$WORK/enable.log" 2>&1 ||
  fail "[roles] systemctl enable --now: $(tr '\n' ' ' <"$WORK/enable.log")"
if served 8000 roles; then not_root roles specd-verifier@lane0 specd-drafter@lane0 specd-router
else for u in specd-verifier@lane0 specd-drafter@lane0 specd-router; do logs "$u"; done; fi
ct systemctl disable --now specd-verifier@lane0 specd-drafter@lane0 specd-router >/dev/null 2>&1

ct systemctl enable --now specd >"$WORK/enable2.log" 2>&1 || fail "[serve] systemctl enable --now specd"
if served 8001 serve; then not_root serve specd; else logs specd; fi
ct systemctl stop specd
[ "$(ct systemctl is-active specd)" = inactive ] && ok "[serve] specd stops cleanly" || fail "[serve] specd stops cleanly"

if [ "$FAILS" -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$FAILS check(s) failed"
exit 1
