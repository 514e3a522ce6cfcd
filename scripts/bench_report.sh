#!/usr/bin/env bash
# bench_report.sh — regenerates the figures of docs/BENCHMARKS.md in one go.
#
#   scripts/bench_report.sh [RESULTS_DIR]      (default: build/bench-results/YYYYmmdd-HHMMSS)
#
# Builds nothing: needs build/bin (scripts/setup.sh or scripts/run.sh builds it).
# For each server configuration — `--no-spec`, `--draft models/tinycode-3m`,
# `--ngram` — it starts `build/bin/specd serve --target models/tinycode-16m ...`
# on a free loopback port, waits for /health and (speculative configurations)
# for the drafter's "drafting with" log line, runs specd-bench at concurrency
# 1, 4, 16 x temperature 0 and 0.8 (built-in prompts, fixed seed, --ignore-eos,
# so every request generates --max-tokens tokens), stops the server, then runs
# the in-process benchmarks (specd-bench-decode, specd-bench-spec) and prints
# a Markdown table of the load-test results (aggregated from the --json files).
#
# Env knobs (defaults in brackets):
#   SD_BENCH_N1 [32]       measured requests at concurrency 1
#   SD_BENCH_N [64]        measured requests at concurrency 4 and 16
#   SD_BENCH_TOKENS [128]  --max-tokens
#   SD_BENCH_CONC ["1 4 16"], SD_BENCH_TEMPS ["0 0.8"]
#   SD_BENCH_CONFIGS ["nospec draft ngram"]
#   SD_BENCH_THREADS [unset: specd serve's default] passed as --threads
#   SD_BENCH_INPROC [1]    0 skips specd-bench-decode / specd-bench-spec
#   SD_BENCH_BIN [build/bin]  directory of the specd binaries to measure
# Every process started here is stopped on exit (EXIT/INT/TERM trap).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SD_BENCH_BIN:-$ROOT/build/bin}
MODELS=$ROOT/models
TARGET=$MODELS/tinycode-16m
DRAFT=$MODELS/tinycode-3m
OUTDIR=${1:-$ROOT/build/bench-results/$(date +%Y%m%d-%H%M%S)}
N1=${SD_BENCH_N1:-32}
N=${SD_BENCH_N:-64}
TOKENS=${SD_BENCH_TOKENS:-128}
CONCS=${SD_BENCH_CONC:-"1 4 16"}
TEMPS=${SD_BENCH_TEMPS:-"0 0.8"}
CONFIGS=${SD_BENCH_CONFIGS:-"nospec draft ngram"}
SEED=1

for need in specd specd-verifier specd-drafter specd-router specd-bench specd-bench-decode specd-bench-spec; do
  if [ ! -x "$BIN/$need" ]; then
    echo "bench_report: $BIN/$need is missing — build first (scripts/setup.sh, or cmake --build build -j)" >&2
    exit 1
  fi
done
for need in "$TARGET/config.json" "$DRAFT/config.json"; do
  [ -e "$need" ] || { echo "bench_report: missing $need" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "bench_report: curl is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench_report: python3 is required" >&2; exit 1; }
mkdir -p "$OUTDIR/bin" || exit 1
# Measure a snapshot of the binaries, so that a rebuild of build/ during the
# run cannot swap them between configurations (specd serve finds its
# children next to itself).
for b in specd specd-verifier specd-drafter specd-router specd-bench specd-bench-decode specd-bench-spec; do
  cp -p "$BIN/$b" "$OUTDIR/bin/" || exit 1
done
BIN=$OUTDIR/bin

# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_report: interrupted" >&2; exit 130' INT TERM

config_args() {
  case $1 in
    nospec) echo "--no-spec" ;;
    draft) echo "--draft $DRAFT" ;;
    ngram) echo "--ngram" ;;
    *) echo "bench_report: unknown config $1" >&2; return 1 ;;
  esac
}

load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 1.0) }'; then
  echo "bench_report: warning: load average $load before the run — other work will skew the figures" >&2
fi
T0=$(date +%s)
{
  echo "# specd bench report — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1), $(free -g | awk '/^Mem:/ {print $2 " GiB"}') RAM; git $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'), binaries built $(date -r "$BIN/specd-verifier" '+%Y-%m-%d %H:%M')"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUTDIR/header.txt"

failed=0
for cfg in $CONFIGS; do
  # shellcheck disable=SC2046
  args=$(config_args "$cfg") || exit 1
  echo "== $cfg: specd serve --target models/tinycode-16m $args" >&2
  # shellcheck disable=SC2086
  if ! serve_start "$cfg" $args; then
    echo "bench_report: could not start the server for $cfg" >&2
    failed=1; continue
  fi
  for c in $CONCS; do
    n=$N; [ "$c" = 1 ] && n=$N1
    for t in $TEMPS; do
      out=$OUTDIR/$cfg-c$c-t$t
      cmd=("$BIN/specd-bench" --url "$URL" --num-prompts "$n" --concurrency "$c" --max-tokens "$TOKENS"
           --temperature "$t" --seed "$SEED" --ignore-eos --warmup 2 --quiet --json "$out.json")
      echo "   c=$c T=$t: specd-bench ${cmd[*]:1}" >&2
      echo "${cmd[*]}" >"$out.cmd"
      fg "${cmd[@]}" >"$out.txt" 2>"$out.err" || { echo "bench_report: specd-bench failed ($cfg c=$c T=$t), see $out.txt" >&2; failed=1; }
    done
  done
  serve_stop
done
T1=$(date +%s)

echo
echo "## Load test (specd serve + specd-bench), $(date -u '+%Y-%m-%d'), $((T1 - T0)) s"
echo
python3 - "$OUTDIR" "$CONFIGS" "$CONCS" "$TEMPS" <<'PY' | tee "$OUTDIR/table.md"
import json, os, sys
outdir, configs, concs, temps = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
label = {"nospec": "--no-spec", "draft": "--draft tinycode-3m", "ngram": "--ngram"}
def load(cfg, c, t):
    p = os.path.join(outdir, f"{cfg}-c{c}-t{t}.json")
    try:
        return json.load(open(p))["summary"]
    except Exception:
        return None
def f(x, fmt):
    return "n/a" if x is None else format(x, fmt)
print("| server | conc. | temp. | ok/failed | req/s | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | accepted/step | speedup vs --no-spec |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for cfg in configs:
    for c in concs:
        for t in temps:
            s = load(cfg, c, t)
            if s is None:
                print(f"| {label.get(cfg, cfg)} | {c} | {t} | run failed | | | | | | |")
                continue
            base = load("nospec", c, t)
            sp = None
            if cfg != "nospec" and base and base.get("output_throughput"):
                sp = s["output_throughput"] / base["output_throughput"]
            spec = s.get("speculative")
            acc = spec["accepted_per_step"] if spec and spec.get("steps") else None
            tt, tp = s.get("ttft_ms") or {}, s.get("tpot_ms") or {}
            print(f"| {label.get(cfg, cfg)} | {c} | {t} | {s['completed']}/{s['failed'] + s['cancelled']} "
                  f"| {f(s['request_throughput'], '.2f')} | {f(s['output_throughput'], '.1f')} "
                  f"| {f(tt.get('p50'), '.1f')} / {f(tt.get('p99'), '.1f')} "
                  f"| {f(tp.get('p50'), '.2f')} / {f(tp.get('p99'), '.2f')} "
                  f"| {f(acc, '.2f')} | {'—' if cfg == 'nospec' else f(sp, '.2f') + '×' if sp else 'n/a'} |")
PY
echo
echo "accepted/step = accepted draft tokens per verify step (committed tokens per step = accepted + 1);"
echo "speedup = output tok/s / output tok/s of --no-spec at the same concurrency and temperature."

if [ "${SD_BENCH_INPROC:-1}" != 0 ]; then
  echo
  echo "## In-process benchmarks"
  echo
  echo '```'
  echo "\$ build/bin/specd-bench-decode"
  fg "$BIN/specd-bench-decode" >"$OUTDIR/bench-decode.txt" 2>&1 || failed=1
  cat "$OUTDIR/bench-decode.txt"
  echo
  echo "\$ build/bin/specd-bench-spec"
  fg "$BIN/specd-bench-spec" >"$OUTDIR/bench-spec.txt" 2>&1 || failed=1
  cat "$OUTDIR/bench-spec.txt"
  echo '```'
fi
echo
echo "# results: $OUTDIR; total $(($(date +%s) - T0)) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
