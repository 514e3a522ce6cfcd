#!/usr/bin/env bash
# run.sh — sets up (packages + build) and runs the main job: speculative
# generation with the demo pair (target tinycode-16m, drafter tinycode-3m).
# Extra arguments go to specd-generate (e.g. --prompt "import os").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec build/bin/specd-generate --model models/tinycode-16m --draft models/tinycode-3m \
  --prompt "def quicksort(arr):" --max-tokens 200 --temperature 0.8 --top-p 0.95 \
  --repetition-penalty 1.1 --seed 1 "$@"
