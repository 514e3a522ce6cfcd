#!/usr/bin/env bash
# run.sh — sets up (packages + build) and runs the main job: the specd server
# on the demo pair (target tinycode-16m, drafter tinycode-3m), three processes
# (verifier, drafter, router) supervised by `specd serve`, at
# http://127.0.0.1:8000 (OpenAI-compatible). Ctrl-C stops all three.
# Extra arguments go to `specd serve` (e.g. --port 9000 --api-key secret).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec build/bin/specd serve --target models/tinycode-16m --draft models/tinycode-3m \
  --host 127.0.0.1 --port 8000 "$@"
