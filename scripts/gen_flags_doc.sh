#!/usr/bin/env bash
# gen_flags_doc.sh — writes docs/FLAGS.md, the flags reference, from the
# --help of each program (their flag tables: common/base/flags.h), so the
# reference is what the programs accept. e2e_test_flags_doc checks that the
# committed file equals this script's output.
#   scripts/gen_flags_doc.sh [BIN_DIR] > docs/FLAGS.md     (default BIN_DIR: build/bin)
set -euo pipefail
BIN="${1:-$(dirname "$0")/../build/bin}"
cat <<'HEAD'
# Flags reference

Every flag of `specd serve` and of each program, as its `--help` prints it (this page is generated from
those by `scripts/gen_flags_doc.sh`; the suite's `e2e_test_flags_doc` keeps the two equal). Durations are
in seconds unless a flag's name says otherwise (`-ms`); sizes in bytes, tokens or positions as stated.

- [specd serve](#specd-serve) — the whole service in one command: verifier, drafter and router, supervised
- [specd-router](#specd-router) — the HTTP gateway
- [specd-verifier](#specd-verifier) — the target model, KV pool and scheduler
- [specd-drafter](#specd-drafter) — the drafter
- [specd-generate](#specd-generate) — generation in one process, without a server
HEAD
section() {
    printf '\n## %s\n\n```text\n' "$1"
    shift
    "$@" --help
    printf '```\n'
}
section "specd serve" "$BIN/specd" serve
section "specd-router" "$BIN/specd-router"
section "specd-verifier" "$BIN/specd-verifier"
section "specd-drafter" "$BIN/specd-drafter"
section "specd-generate" "$BIN/specd-generate"
