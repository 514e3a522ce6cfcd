#!/usr/bin/env bash
# test_curve.sh — the worker protocol authenticated and encrypted (ZeroMQ
# CURVE, proto/curve.h; docs/RELIABILITY.md):
#   - `specd keygen DIR` writes the deployment's two key pairs (secret files
#     0600) and will not overwrite them;
#   - a verifier on tcp:// with --curve-keys serves a router that has the
#     keys (/health 200, completions);
#   - a router without keys, and one with a client key of its own (the right
#     server key, a forged client pair), never get the lane up: the verifier
#     refuses their handshakes and says so;
#   - `specd serve --curve-keys` runs verifier, drafter and router with the
#     keys: drafts flow over the authenticated drafter link.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

K=$WORK/keys
"$BIN/specd" keygen "$K" >"$WORK/keygen.out" 2>&1
check "specd keygen writes two key pairs, secrets 0600" \
  '[ "$(stat -c %a "$K/server.secret")" = 600 ] && [ "$(stat -c %a "$K/client.secret")" = 600 ] && [ "$(wc -c <"$K/server.public")" = 41 ]'
"$BIN/specd" keygen "$K" >"$WORK/keygen2.out" 2>&1
check "specd keygen will not overwrite keys" '! "$BIN/specd" keygen "$K" >/dev/null 2>&1 && grep -q "exists" "$WORK/keygen2.out"'

VPORT=$(free_port)
"$BIN/specd-verifier" --model "$TARGET" --listen "tcp://127.0.0.1:$VPORT" --threads 1 --curve-keys "$K" \
  >"$WORK/verifier.log" 2>&1 &
VPID=$!; SERVE_PIDS+=("$VPID")
# router NAME KEYDIR|"": starts a router on a free port; sets RURL
router() {
  local name=$1 keys=$2 port; port=$(free_port)
  local ka=(); [ -n "$keys" ] && ka=(--curve-keys "$keys")
  "$BIN/specd-router" --host 127.0.0.1 --port "$port" --verifier "tcp://127.0.0.1:$VPORT" \
    --tokenizer "$TARGET/tokenizer.json" --model-name tinycode-16m --health-interval-ms 200 "${ka[@]}" \
    >"$WORK/router.$name.log" 2>&1 &
  SERVE_PIDS+=("$!")
  RURL=http://127.0.0.1:$port
}
health_of() { # URL SECONDS: waits for /health 200; prints the last status
  local i st=000
  for i in $(seq $(($2 * 10))); do
    st=$(curl -s -o /dev/null -w '%{http_code}' "$1/health")
    [ "$st" = 200 ] && break
    sleep 0.1
  done
  echo "$st"
}
router good "$K"; GOOD=$RURL
check "a router with the keys gets the lane up" '[ "$(health_of "$GOOD" 60)" = 200 ]'
st=$(curl -s -o "$WORK/good.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"prompt":"def main():","max_tokens":8}' "$GOOD/v1/completions")
check "... and completions through it" '[ "$st" = 200 ] && [ "$(jget "$WORK/good.json" "j[\"usage\"][\"completion_tokens\"]")" = 8 ]'
router nokeys ""; NOKEYS=$RURL
mkdir -p "$WORK/forged"
"$BIN/specd" keygen "$WORK/forged" >/dev/null 2>&1
cp "$K/server.public" "$WORK/forged/server.public.right" && mv "$WORK/forged/server.public.right" "$WORK/forged/server.public"
router forged "$WORK/forged"; FORGED=$RURL
check "a router without keys never gets the lane up" '[ "$(health_of "$NOKEYS" 3)" = 503 ]'
check "a router with a forged client key never gets the lane up" '[ "$(health_of "$FORGED" 3)" = 503 ]'
check "the verifier refused the forged key and says so" 'grep -q "refused a peer without the deployment'"'"'s client key" "$WORK/verifier.log"'
check "the verifier still serves the router with the keys" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$GOOD/health")" = 200 ]'
kill "$VPID"

if ! serve_start --draft "$DRAFT" --curve-keys "$K" --spec-adaptive off --num-draft 4 --spec-pipeline off; then
  fail "specd serve --curve-keys came up"
else
  ok "specd serve --curve-keys came up (verifier, drafter, router with the keys)"
  st=$(post /v1/completions "$(body "def fibonacci(n):" 48 0)" "$WORK/serve.json")
  check "drafts flow over the authenticated drafter link (accepted_tokens > 0)" \
    '[ "$st" = 200 ] && [ "$(jget "$WORK/serve.json" "j[\"speculative\"][\"accepted_tokens\"] > 0")" = True ]'
  serve_stop
fi
finish
