#!/usr/bin/env bash
# test_openai_client.sh — the official OpenAI Node client (`openai@4` from
# npm) against `specd serve` (n-gram drafter) with an API key: completions,
# chat, streamed chat, logprobs, the Responses API, models, errors
# (tests/e2e/openai_client.mjs); then the Vercel AI SDK (`ai@6` +
# `@ai-sdk/openai`): its default provider over /v1/responses, and its chat
# provider, each also calling a required tool (the server's chat template is
# a test one that takes tools) (tests/e2e/ai_sdk_client.mjs). Without node / npm, or when npm
# cannot fetch the packages, it skips (77) with a message saying so. The package is
# installed once (the AI SDK in its ai-sdk/ subfolder) into ${SD_NODE_DIR:-$HOME/.cache/specd-e2e-node} (or
# $TMPDIR/specd-e2e-node when that is not writable), outside the repository. Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

command -v node >/dev/null || { echo "SKIP - node (>= 18) is required for this test and was not found"; exit 77; }
command -v npm >/dev/null || { echo "SKIP - npm is required for this test and was not found"; exit 77; }
NODE_DIR=${SD_NODE_DIR:-${HOME:-/tmp}/.cache/specd-e2e-node}
mkdir -p "$NODE_DIR" 2>/dev/null && [ -w "$NODE_DIR" ] || NODE_DIR=${TMPDIR:-/tmp}/specd-e2e-node
PKG=$NODE_DIR/node_modules/openai
if [ ! -f "$PKG/package.json" ]; then
  mkdir -p "$NODE_DIR"
  if ! npm install --no-save --no-audit --no-fund --prefix "$NODE_DIR" openai@4 >"$WORK/npm.log" 2>&1; then
    echo "SKIP - npm install openai@4 failed (npm registry unreachable?):"; tail -n 20 "$WORK/npm.log"; exit 77
  fi
fi
ok "openai $(node -p "require('$PKG/package.json').version")"
AI_DIR=$NODE_DIR/ai-sdk
if [ ! -f "$AI_DIR/node_modules/@ai-sdk/openai/package.json" ] || [ ! -f "$AI_DIR/node_modules/ai/package.json" ]; then
  mkdir -p "$AI_DIR"
  if ! npm install --no-save --no-audit --no-fund --prefix "$AI_DIR" ai@6 @ai-sdk/openai >"$WORK/npm-ai.log" 2>&1; then
    echo "SKIP - npm install ai@6 @ai-sdk/openai failed (npm registry unreachable?):"; tail -n 20 "$WORK/npm-ai.log"; exit 77
  fi
fi
ok "ai $(node -p "require('$AI_DIR/node_modules/ai/package.json').version"), @ai-sdk/openai $(node -p "require('$AI_DIR/node_modules/@ai-sdk/openai/package.json').version")"

KEY=e2e-openai-key
# a chat template that takes tools (the demo checkpoint has none; the built-in formats refuse tools): the
# conversation as comments, then, with tools, the start of a Python list of calls
cat >"$WORK/tools.jinja" <<'J'
{%- for m in messages %}# {{ m.role }}: {{ m.content }}
{% endfor %}{% if tools %}calls = {% endif %}
J
if ! serve_start --ngram --api-key "$KEY" --router-arg "--chat-template=$WORK/tools.jinja"; then
  fail "specd serve came up"; finish
fi
ok "specd serve came up on port $PORT"
if OPENAI_MODULE=$PKG/index.mjs node "$(dirname "$0")/openai_client.mjs" "$URL/v1" "$KEY" tinycode-16m; then
  ok "openai client checks"
else
  fail "openai client checks"
fi
if AI_SDK_DIR=$AI_DIR/node_modules node "$(dirname "$0")/ai_sdk_client.mjs" "$URL/v1" "$KEY" tinycode-16m; then
  ok "AI SDK checks"
else
  fail "AI SDK checks"
fi
serve_stop
finish
