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
# scraping /metrics before and after each cell for the drafting figures. So
# A, B, C, A, B, C... : a slow spell of this shared machine hits every
# configuration alike. The table sums each cell over the rounds: output
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

{
  echo "# specd pipeline bench — $(date -u '+%Y-%m-%d %H:%M UTC')"
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
        n=$N; [ "$c" = 1 ] && n=$N1
        for t in $TEMPS; do
          out=$OUTDIR/$cfg-th$th-c$c-t$t-r$r
          curl -s "$URL/metrics" >"$out.m0"
          cmd=("$BIN/specd-bench" --url "$URL" --num-prompts "$n" --concurrency "$c" --max-tokens "$TOKENS"
               --temperature "$t" --seed 1 --ignore-eos --warmup 2 --quiet --json "$out.json")
          echo "${cmd[*]}" >"$out.cmd"
          fg "${cmd[@]}" >"$out.txt" 2>"$out.err" || { echo "bench_pipeline: specd-bench failed, see $out.txt" >&2; failed=1; }
          curl -s "$URL/metrics" >"$out.m1"
        done
      done
      serve_stop
    done
  done
done
T1=$(date +%s)
echo
echo "## Pipelined speculation (specd serve + specd-bench, $TOKENS tokens), $ROUNDS interleaved rounds, $((T1 - T0)) s"
echo
python3 - "$OUTDIR" "$ROUNDS" "$THREAD_SETS" "$CONCS" "$TEMPS" "$CONFIGS" <<'PY' | tee "$OUTDIR/table.md"
import json, os, sys
outdir, rounds = sys.argv[1], int(sys.argv[2])
threads, concs, temps, configs = (a.split() for a in sys.argv[3:7])

def metrics(path):
    m = {}
    try:
        for line in open(path):
            if line.startswith("specd_spec_") and not line.startswith("#"):
                k, v = line.split()[:2]
                m[k] = float(v)
    except OSError:
        pass
    return m

def cell(cfg, th, c, t):
    tok = dur = 0.0
    acc = steps = 0.0
    d = {}
    for r in range(1, rounds + 1):
        base = os.path.join(outdir, f"{cfg}-th{th}-c{c}-t{t}-r{r}")
        try:
            s = json.load(open(base + ".json"))["summary"]
        except Exception:
            continue
        tok += s["total_output_tokens"]
        dur += s["wall_s"]
        m0, m1 = metrics(base + ".m0"), metrics(base + ".m1")
        for k in m1:
            if k.endswith("_total"):
                d[k] = d.get(k, 0.0) + m1[k] - m0.get(k, 0.0)
    if dur == 0:
        return None
    g = lambda k: d.get("specd_spec_" + k + "_total", 0.0)
    out = {"tps": tok / dur}
    out["acc"] = g("accepted_tokens") / g("steps") if g("steps") else None
    out["hit"] = g("spans_ready") / g("decode_steps") if g("decode_steps") else None
    out["hidden"] = 1 - (g("step_seconds") - g("verify_seconds")) / g("draft_seconds") if g("draft_seconds") else None
    return out

f = lambda x, fmt: "—" if x is None else format(x, fmt)
print("| threads | conc. | temp. | plain tok/s | serial tok/s | pipelined tok/s | serial / plain | pipelined / plain | **pipelined / serial** | accepted/step serial, pipelined | pre-draft hit rate | draft time hidden serial, pipelined | no branches: / serial, hit rate |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for th in threads:
    for c in concs:
        for t in temps:
            p, s, q, nb = (cell(x, th, c, t) for x in ("plain", "serial", "pipelined", "nobranch"))
            if not (p and s and q and nb):
                print(f"| {th} | {c} | {t} | missing |")
                continue
            print(f"| {th} | {c} | {t} | {p['tps']:.0f} | {s['tps']:.0f} | {q['tps']:.0f} | {s['tps']/p['tps']:.2f}× | "
                  f"{q['tps']/p['tps']:.2f}× | **{q['tps']/s['tps']:.2f}×** | {f(s['acc'], '.2f')}, {f(q['acc'], '.2f')} | "
                  f"{f(q['hit'], '.2f')} | {f(s['hidden'], '.2f')}, {f(q['hidden'], '.2f')} | "
                  f"{nb['tps']/s['tps']:.2f}×, {f(nb['hit'], '.2f')} |")
print()
print("tok/s: output tokens / wall time of the measured phase, summed over the rounds; accepted/step: accepted drafts per verify step;")
print("pre-draft hit rate: decode steps whose span was there when the step began; draft time hidden: 1 - (step - verify) / draft,")
print("from the verifier's counters (/metrics) over the cell (serial: negative, as the step pays the whole draft and the messages).")
PY
echo
echo "# results: $OUTDIR; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
