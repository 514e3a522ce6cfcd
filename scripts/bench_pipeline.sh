#!/usr/bin/env bash
# bench_pipeline.sh — plain vs serial vs pipelined speculation through
# `specd serve`, interleaved, in one run (docs/BENCHMARKS.md, "Pipelined").
#
#   scripts/bench_pipeline.sh [RESULTS_DIR]   (default: build/bench-results/pipe-YYYYmmdd-HHMMSS)
#
# Builds nothing: needs build/bin. For each round, for each thread setting,
# for each configuration it starts
#
#   specd serve --target models/tinycode-16m --no-spec                                 (plain)
#   specd serve --target models/tinycode-16m --draft models/tinycode-3m --spec-pipeline off  (serial)
#   specd serve --target models/tinycode-16m --draft models/tinycode-3m   (pipelined: --spec-pipeline auto,
#                                                  which runs serially where the drafter shares the verifier's cores)
#   ... --draft-branches 0   (pipelined without drafts for other outcomes)
#
# (plus --threads N unless the setting is "default"), and runs specd-bench at
# each concurrency x temperature (128 tokens, --ignore-eos, fixed seed),
# scraping /metrics before and after each cell for the drafting figures —
# every configuration's server up at once, run cell by cell, the
# configurations seconds apart (A, B, C, then B, C, A ...): a slow spell of
# this shared machine hits every configuration of a cell alike. The table sums each cell over the rounds: output
# tok/s, accepted tokens per step, and for speculation the pre-draft hit
# rate (steps whose span was there when the step began) and the fraction
# of drafting time hidden behind verification, 1 - (step - verify) / draft.
#
# Env knobs (defaults in brackets):
#   SD_BENCH_ROUNDS [3]          rounds
#   SD_BENCH_THREAD_SETS ["1 default"]  --threads per process ("default": serve's own)
#   SD_BENCH_CONC ["1 4"], SD_BENCH_TEMPS ["0 0.8"]
#   SD_BENCH_N1 [24], SD_BENCH_N [48]   measured requests at concurrency 1 / above
#   SD_BENCH_TOKENS [128]
#   SD_BENCH_BIN [build/bin]
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SD_BENCH_BIN:-$ROOT/build/bin}
TARGET=$ROOT/models/tinycode-16m
DRAFT=$ROOT/models/tinycode-3m
OUTDIR=${1:-$ROOT/build/bench-results/pipe-$(date +%Y%m%d-%H%M%S)}
ROUNDS=${SD_BENCH_ROUNDS:-3}
THREAD_SETS=${SD_BENCH_THREAD_SETS:-"1 default"}
CONCS=${SD_BENCH_CONC:-"1 4"}
TEMPS=${SD_BENCH_TEMPS:-"0 0.8"}
N1=${SD_BENCH_N1:-24}
N=${SD_BENCH_N:-48}
TOKENS=${SD_BENCH_TOKENS:-128}
CONFIGS="plain serial pipelined nobranch"

for need in specd specd-verifier specd-drafter specd-router specd-bench; do
  [ -x "$BIN/$need" ] || { echo "bench_pipeline: $BIN/$need is missing — build first" >&2; exit 1; }
done
command -v curl >/dev/null && command -v python3 >/dev/null || { echo "bench_pipeline: needs curl and python3" >&2; exit 1; }
mkdir -p "$OUTDIR/bin" || exit 1
for b in specd specd-verifier specd-drafter specd-router specd-bench; do cp -p "$BIN/$b" "$OUTDIR/bin/" || exit 1; done
BIN=$OUTDIR/bin

# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_pipeline: interrupted" >&2; exit 130' INT TERM

config_args() {
  case $1 in
    plain) echo "--no-spec" ;;
    serial) echo "--draft $DRAFT --spec-pipeline off" ;;
    pipelined) echo "--draft $DRAFT" ;;
    nobranch) echo "--draft $DRAFT --draft-branches 0" ;;
  esac
}

cell_requests() { if [ "$1" = 1 ]; then echo "$N1"; else echo "$N"; fi; }
bench_header "specd pipeline bench"
bench_rounds bench_pipeline
echo
echo "## Pipelined speculation (specd serve + specd-bench, $TOKENS tokens), $ROUNDS interleaved rounds, $((T1 - T0)) s"
echo
python3 "$ROOT/scripts/bench_pipeline_table.py" "$OUTDIR" "$ROUNDS" "$THREAD_SETS" "$CONCS" "$TEMPS" "$CONFIGS" |
  tee "$OUTDIR/table.md"
echo
echo "# results: $OUTDIR; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
