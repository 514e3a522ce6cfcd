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
# one after the other, and runs specd-bench against each at every
# concurrency x temperature (128 tokens, --ignore-eos, fixed seed; T = 1.5 is
# the hostile cell: drafts seldom match), scraping /metrics before and after
# each cell. A slow spell of this shared machine hits every configuration
# alike. The table sums each cell over the rounds.
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

# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_adaptive: interrupted" >&2; exit 130' INT TERM

proposer_args() { [ "$1" = draft ] && echo "--draft $DRAFT" || echo "--ngram"; }
CONFIGS="plain"
for p in $PROPOSERS; do
  CONFIGS="$CONFIGS $p-adaptive"
  for k in $STATIC; do CONFIGS="$CONFIGS $p-k$k"; done
done
config_args() {
  case $1 in
    plain) echo "--no-spec" ;;
    *-adaptive) proposer_args "${1%-adaptive}" ;;
    *-k*) echo "$(proposer_args "${1%-k*}") --spec-adaptive off --num-draft ${1##*-k}" ;;
  esac
}

{
  echo "# specd adaptive bench — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1) ($(grep -o -w 'avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')), git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUTDIR/header.txt"

failed=0
T0=$(date +%s)
for r in $(seq "$ROUNDS"); do
  for th in $THREAD_SETS; do
    if [ "$th" = default ]; then unset SD_BENCH_THREADS; else export SD_BENCH_THREADS=$th; fi
    for cfg in $CONFIGS; do
      args=$(config_args "$cfg")
      echo "== round $r, threads $th, $cfg: specd serve --target models/tinycode-16m $args" >&2
      # shellcheck disable=SC2086
      if ! serve_start "$cfg-t$th-r$r" $args; then failed=1; continue; fi
      for c in $CONCS; do
        n=$N; [ "$c" = 1 ] && n=$N1; [ "$c" = 4 ] && n=$N4
        for t in $TEMPS; do
          out=$OUTDIR/$cfg-th$th-c$c-t$t-r$r
          curl -s "$URL/metrics" >"$out.m0"
          cmd=("$BIN/specd-bench" --url "$URL" --num-prompts "$n" --concurrency "$c" --max-tokens "$TOKENS"
               --temperature "$t" --seed 1 --ignore-eos --warmup 2 --quiet --json "$out.json")
          echo "${cmd[*]}" >"$out.cmd"
          fg "${cmd[@]}" >"$out.txt" 2>"$out.err" || { echo "bench_adaptive: specd-bench failed, see $out.txt" >&2; failed=1; }
          sleep 1.1 # the router's next health check brings the verifier's figures
          curl -s "$URL/metrics" >"$out.m1"
        done
      done
      serve_stop
    done
  done
done
T1=$(date +%s)
echo
echo "## Adaptive speculation (specd serve + specd-bench, $TOKENS tokens), $ROUNDS interleaved round(s), $((T1 - T0)) s"
echo
python3 "$ROOT/scripts/bench_adaptive_table.py" "$OUTDIR" "$ROUNDS" "$THREAD_SETS" "$PROPOSERS" "$STATIC" "$CONCS" \
  "$TEMPS" | tee "$OUTDIR/table.md"
echo
echo "# results: $OUTDIR; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
