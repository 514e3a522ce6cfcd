#!/usr/bin/env bash
# test_provenance.sh — "speculative": {"provenance": true} on the real
# pipeline (`specd serve`, the demo pair with a drafter and the n-gram
# fallback): asking for it changes no token (greedy, and sampled with a seed
# under verify "match"; completions and chat, streamed and not, n = 2, a stop
# string); each choice's token texts join to its text; each step's sources
# are as its drafted / accepted figures say (accepted drafts first, then the
# verifier's token); the steps' figures add up to the response's
# "speculative" totals; the drafter's tokens show up. Env: SD_BIN, SD_MODELS.
. "$(dirname "$0")/pipeline_lib.sh"

serve_start --draft "$DRAFT" || { fail "specd serve --draft came up"; finish; }
ok "specd serve --draft up at $URL"
if "$PY" "$(dirname "$0")/provenance_check.py" "$URL"; then ok "provenance checks"; else fail "provenance checks"; fi
serve_stop
finish
