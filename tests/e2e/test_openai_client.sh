#!/usr/bin/env bash
# test_openai_client.sh — the official OpenAI Node client (`openai@4` from
# npm) against `specd serve` (n-gram drafter) with an API key: completions,
# chat, streamed chat (tests/e2e/openai_client.mjs). node and npm are
# required (the test FAILS, it does not skip, without them). The package is
# installed once into ${SD_NODE_DIR:-$HOME/.cache/specd-e2e-node} (or
# $TMPDIR/specd-e2e-node when that is not writable), outside the repository. Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

command -v node >/dev/null || { echo "FAIL - node (>= 18) is required for this test and was not found"; exit 1; }
command -v npm >/dev/null || { echo "FAIL - npm is required for this test and was not found"; exit 1; }
NODE_DIR=${SD_NODE_DIR:-${HOME:-/tmp}/.cache/specd-e2e-node}
mkdir -p "$NODE_DIR" 2>/dev/null && [ -w "$NODE_DIR" ] || NODE_DIR=${TMPDIR:-/tmp}/specd-e2e-node
PKG=$NODE_DIR/node_modules/openai
if [ ! -f "$PKG/package.json" ]; then
  mkdir -p "$NODE_DIR"
  if ! npm install --no-save --no-audit --no-fund --prefix "$NODE_DIR" openai@4 >"$WORK/npm.log" 2>&1; then
    echo "FAIL - npm install openai@4 failed:"; tail -n 20 "$WORK/npm.log"; exit 1
  fi
fi
ok "openai $(node -p "require('$PKG/package.json').version")"

KEY=e2e-openai-key
if ! serve_start --ngram --api-key "$KEY"; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"
if OPENAI_MODULE=$PKG/index.mjs node "$(dirname "$0")/openai_client.mjs" "$URL/v1" "$KEY" tinycode-16m; then
  ok "openai client checks"
else
  fail "openai client checks"
fi
serve_stop
finish
