#!/usr/bin/env bash
# bench_adaptive.sh — adaptive draft length vs static K vs plain decoding
# through `specd serve`, interleaved, in one run (docs/BENCHMARKS.md,
# "Adaptive speculation").
#
#   scripts/bench_adaptive.sh [RESULTS_DIR]   (default: build/bench-results/adapt-YYYYmmdd-HHMMSS)
#
# Builds nothing: needs build/bin. For each round, for each thread setting
# ("1": verifier and drafter a core each; "default": serve's own), it starts
#
#   specd serve --target models/tinycode-16m --no-spec                                   (plain)
# and for each proposer (--draft models/tinycode-3m, --ngram):
#   specd serve --target models/tinycode-16m PROPOSER                                    (adaptive, the default)
#   specd serve --target models/tinycode-16m PROPOSER --spec-adaptive off --num-draft K  (static K = 2, 4, 6, 8)
#
# all at once (each on its own port), and runs specd-bench at every
# concurrency x temperature (128 tokens, --ignore-eos, fixed seed; T = 1.5 is
# the hostile cell: drafts seldom match) against each server in turn — cell
# by cell, the configurations seconds apart, in an order rotated from cell to
# cell — scraping /metrics before and after each run. A slow spell of this
# shared machine (minutes) hits every configuration of a cell alike. The
# table sums each cell over the rounds.
#
# Env knobs (defaults in brackets):
#   SD_BENCH_ROUNDS [1]              rounds
#   SD_BENCH_THREAD_SETS ["1 default"]
#   SD_BENCH_PROPOSERS ["draft ngram"]
#   SD_BENCH_STATIC ["2 4 6 8"]      static K values
#   SD_BENCH_CONC ["1 4 16"], SD_BENCH_TEMPS ["0 0.8 1.5"]
#   SD_BENCH_N1 [16], SD_BENCH_N4 [32], SD_BENCH_N [64]   measured requests at C = 1, 4, above
#   SD_BENCH_TOKENS [128]
#   SD_BENCH_BIN [build/bin]
#   SD_BENCH_ALT_BIN                 another build's bin directory: its adaptive server runs beside
#                                    (CONFIG PROPOSER-adaptive-alt), e.g. a commit before a change
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SD_BENCH_BIN:-$ROOT/build/bin}
TARGET=$ROOT/models/tinycode-16m
DRAFT=$ROOT/models/tinycode-3m
OUTDIR=${1:-$ROOT/build/bench-results/adapt-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${SD_BENCH_ROUNDS:-1}
THREAD_SETS=${SD_BENCH_THREAD_SETS:-"1 default"}
PROPOSERS=${SD_BENCH_PROPOSERS:-"draft ngram"}
STATIC=${SD_BENCH_STATIC:-"2 4 6 8"}
CONCS=${SD_BENCH_CONC:-"1 4 16"}
TEMPS=${SD_BENCH_TEMPS:-"0 0.8 1.5"}
N1=${SD_BENCH_N1:-16}
N4=${SD_BENCH_N4:-32}
N=${SD_BENCH_N:-64}
TOKENS=${SD_BENCH_TOKENS:-128}

for need in specd specd-verifier specd-drafter specd-router specd-bench; do
  [ -x "$BIN/$need" ] || { echo "bench_adaptive: $BIN/$need is missing — build first" >&2; exit 1; }
done
command -v curl >/dev/null && command -v python3 >/dev/null || { echo "bench_adaptive: needs curl and python3" >&2; exit 1; }
mkdir -p "$OUTDIR/bin" || exit 1
for b in specd specd-verifier specd-drafter specd-router specd-bench; do cp -p "$BIN/$b" "$OUTDIR/bin/" || exit 1; done
BIN=$OUTDIR/bin
ALT_BIN=
if [ -n "${SD_BENCH_ALT_BIN:-}" ]; then
  mkdir -p "$OUTDIR/bin-alt" || exit 1
  for b in specd specd-verifier specd-drafter specd-router; do cp -p "$SD_BENCH_ALT_BIN/$b" "$OUTDIR/bin-alt/" || exit 1; done
  ALT_BIN=$OUTDIR/bin-alt
fi

# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_adaptive: interrupted" >&2; exit 130' INT TERM

proposer_args() { [ "$1" = draft ] && echo "--draft $DRAFT" || echo "--ngram"; }
CONFIGS="plain"
for p in $PROPOSERS; do
  CONFIGS="$CONFIGS $p-adaptive"
  [ -n "$ALT_BIN" ] && CONFIGS="$CONFIGS $p-adaptive-alt"
  for k in $STATIC; do CONFIGS="$CONFIGS $p-k$k"; done
done
config_args() {
  case $1 in
    plain) echo "--no-spec" ;;
    *-adaptive) proposer_args "${1%-adaptive}" ;;
    *-adaptive-alt) proposer_args "${1%-adaptive-alt}" ;;
    *-k*) echo "$(proposer_args "${1%-k*}") --spec-adaptive off --num-draft ${1##*-k}" ;;
  esac
}

config_bin() { case $1 in *-alt) echo "$ALT_BIN" ;; *) echo "$BIN" ;; esac; }
cell_requests() { case $1 in 1) echo "$N1" ;; 4) echo "$N4" ;; *) echo "$N" ;; esac; }
bench_header "specd adaptive bench"
bench_rounds bench_adaptive
echo
echo "## Adaptive speculation (specd serve + specd-bench, $TOKENS tokens), $ROUNDS interleaved round(s), $((T1 - T0)) s"
echo
python3 "$ROOT/scripts/bench_adaptive_table.py" "$OUTDIR" "$ROUNDS" "$THREAD_SETS" "$PROPOSERS" "$STATIC" "$CONCS" \
  "$TEMPS" | tee "$OUTDIR/table.md"
echo
echo "# results: $OUTDIR; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
