#!/usr/bin/env bash
# test_image.sh — the container image of deploy/Containerfile, built and run.
# deploy/build-image.sh --local-base builds it with buildah on a Debian 12
# base made here by debootstrap (no registry, no daemon); then the image runs
# `specd serve` (target + draft model, mounted read-only at /models) as its
# user 10001, and a greedy completion through it must equal the same request
# to this build's `specd serve --no-spec`.
# Skipped (77) when not root, without buildah or debootstrap, when buildah
# cannot make a container here, or when the Debian mirror is unreachable.
# Leaves the base image (localhost/specd-base:bookworm) for the next run;
# removes the test image and buildah's dangling build-stage layers.
# Env: SD_BIN, SD_MODELS (set by CTest).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${SD_BIN:-$ROOT/build/bin}" && pwd)
MODELS=$(cd "${SD_MODELS:-$ROOT/models}" && pwd)
TAG=localhost/specd:e2e-test
skip() { echo "SKIP - $1"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (buildah's storage and chroot)"
command -v buildah >/dev/null || skip "buildah not found (Debian: apt-get install buildah)"
command -v debootstrap >/dev/null || skip "debootstrap not found (Debian: apt-get install debootstrap)"
probe=$(buildah from scratch 2>/dev/null) && buildah mount "$probe" >/dev/null 2>&1 ||
  { [ -n "${probe:-}" ] && buildah rm "$probe" >/dev/null 2>&1; skip "buildah cannot make a container here"; }
buildah rm "$probe" >/dev/null
PY=$(python3 -c 'import sys; print(sys.executable)')
WORK=$(mktemp -d)
CTR="" SERVE=""
cleanup() {
  [ -n "$SERVE" ] && kill "$SERVE" 2>/dev/null
  pkill -f "specd serve --target /models/" 2>/dev/null
  wait 2>/dev/null
  [ -n "$CTR" ] && buildah rm "$CTR" >/dev/null 2>&1
  buildah rmi "$TAG" >/dev/null 2>&1
  buildah rmi --prune >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
FAILS=0
ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() { for _ in $(seq 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ] && return 0; sleep 0.2; done; return 1; }

if ! buildah inspect --type image localhost/specd-base:bookworm >/dev/null 2>&1 &&
   ! curl -s -o /dev/null --max-time 10 "${SPECD_DEBIAN_MIRROR:-http://deb.debian.org/debian}/dists/bookworm/Release"; then
  skip "the Debian mirror is unreachable (SPECD_DEBIAN_MIRROR)"
fi
t0=$SECONDS
if bash "$ROOT/deploy/build-image.sh" --local-base "$TAG" >"$WORK/build.log" 2>&1; then
  ok "deploy/build-image.sh --local-base built $TAG in $((SECONDS - t0)) s"
else
  fail "deploy/build-image.sh --local-base"; tail -n 30 "$WORK/build.log" | sed 's/^/#   /'
  exit 1
fi
echo "# image size: $(buildah images --format '{{.Size}}' "$TAG" 2>/dev/null | head -n 1)"

CTR=$(buildah from -q "$TAG")
user=$(buildah run --isolation chroot "$CTR" -- id -u 2>&1)
[ "$user" = 10001 ] && ok "the image runs as uid 10001" || fail "the image runs as uid 10001 (got $user)"
bad=""
for b in specd specd-router specd-verifier specd-drafter specd-bench; do
  # a second try: once in a CI run `buildah run` returned no output at all for one binary whose
  # --help works (a run of the container, not the binary, failed)
  for try in 1 2; do
    buildah run --isolation chroot "$CTR" -- "$b" --help >"$WORK/help.$b" 2>&1
    rc=$?
    grep -qi "usage" "$WORK/help.$b" && break
    echo "# $b --help in the image: exit $rc, $(wc -c <"$WORK/help.$b") bytes of output (try $try)"
  done
  grep -qi "usage" "$WORK/help.$b" || { bad="$bad $b"; sed 's/^/#   /' "$WORK/help.$b" | head; }
done
[ -z "$bad" ] && ok "every binary of the image starts (its --help)" || fail "binaries that do not start in the image:$bad"

PORT=$(free_port)
buildah run --isolation chroot -v "$MODELS:/models:ro" "$CTR" -- specd serve --target /models/tinycode-16m \
  --draft /models/tinycode-3m --host 127.0.0.1 --port "$PORT" >"$WORK/image-serve.log" 2>&1 &
if wait_health "http://127.0.0.1:$PORT"; then ok "specd serve in the image came up (target + draft model from /models)"
else fail "specd serve in the image came up"; tail -n 20 "$WORK/image-serve.log" | sed 's/^/#   /'; exit 1; fi
HPORT=$(free_port)
"$BIN/specd" serve --target "$MODELS/tinycode-16m" --no-spec --host 127.0.0.1 --port "$HPORT" >"$WORK/host-serve.log" 2>&1 &
SERVE=$!
wait_health "http://127.0.0.1:$HPORT" || fail "this build's specd serve came up"
req='{"prompt":"def fibonacci(n):","max_tokens":64,"temperature":0,"ignore_eos":true}'
curl -s -H 'Content-Type: application/json' -d "${req%\}}"',"speculative":{"num_draft":4}}' \
  "http://127.0.0.1:$PORT/v1/completions" >"$WORK/image.json"
curl -s -H 'Content-Type: application/json' -d "$req" "http://127.0.0.1:$HPORT/v1/completions" >"$WORK/host.json"
if "$PY" - "$WORK/image.json" "$WORK/host.json" <<'PY'; then
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ta, tb = a["choices"][0]["text"], b["choices"][0]["text"]
assert a["usage"]["completion_tokens"] == 64 and ta == tb, (ta, tb)
assert a["speculative"]["draft_tokens"] > 0, a["speculative"]
print("# drafts in the image: %d offered, %d accepted" % (a["speculative"]["draft_tokens"], a["speculative"]["accepted_tokens"]))
PY
  ok "a greedy completion through the image (with drafts) equals this build's plain decoding"
else
  fail "a greedy completion through the image equals this build's plain decoding"
fi
if [ "$FAILS" -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$FAILS check(s) failed"
exit 1
