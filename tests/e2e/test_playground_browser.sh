#!/usr/bin/env bash
# test_playground_browser.sh — the playground in a real browser: Debian's
# chromium, headless, driven over the DevTools protocol by puppeteer-core
# (npm; it downloads no browser), against `specd serve` on the demo pair
# with a drafter and an API key (tests/e2e/playground_browser.mjs): the key
# asked for and kept out of storage, completion and chat streamed, the text
# equal to the API's for the same request, the token colours equal to the
# provenance the page received, side by side (greedy and sampled) identical,
# output with <script> and <img onerror> shown as text with nothing run
# (with the CSP, and with it bypassed: the page alone keeps it text), no
# error in the console; a screenshot. Skips (77) without chromium, node or
# npm, or when npm cannot fetch puppeteer-core. Env: SD_BIN, SD_MODELS.
. "$(dirname "$0")/pipeline_lib.sh"

CHROME=${SD_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROME" ] || { echo "SKIP - chromium is required for this test and was not found (apt-get install chromium)"; exit 77; }
command -v node >/dev/null || { echo "SKIP - node (>= 18) is required for this test and was not found"; exit 77; }
command -v npm >/dev/null || { echo "SKIP - npm is required for this test and was not found"; exit 77; }
NODE_DIR=${SD_NODE_DIR:-${HOME:-/tmp}/.cache/specd-e2e-node}
mkdir -p "$NODE_DIR" 2>/dev/null && [ -w "$NODE_DIR" ] || NODE_DIR=${TMPDIR:-/tmp}/specd-e2e-node
PUP=$NODE_DIR/puppeteer/node_modules/puppeteer-core
if [ ! -f "$PUP/package.json" ]; then
  mkdir -p "$NODE_DIR/puppeteer"
  if ! PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-save --no-audit --no-fund --prefix "$NODE_DIR/puppeteer" \
      puppeteer-core@23 >"$WORK/npm.log" 2>&1; then
    echo "SKIP - npm install puppeteer-core failed (npm registry unreachable?):"; tail -n 20 "$WORK/npm.log"; exit 77
  fi
fi
ok "puppeteer-core $(node -p "require('$PUP/package.json').version"), $("$CHROME" --version 2>/dev/null | head -n 1)"

KEY=pg-browser-key
serve_start --draft "$DRAFT" --api-key "$KEY" || { fail "specd serve --draft came up"; finish; }
ok "specd serve --draft --api-key up at $URL"
SHOT=${SD_PLAYGROUND_SHOT:-$WORK/playground.png}
if PUPPETEER_MODULE=$PUP CHROMIUM=$CHROME node "$(dirname "$0")/playground_browser.mjs" "$URL" "$KEY" "$SHOT"; then
  ok "browser checks"
else
  fail "browser checks"
fi
check "a screenshot was taken" '[ -s "$SHOT" ]'
serve_stop
finish
