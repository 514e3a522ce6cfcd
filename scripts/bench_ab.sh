#!/usr/bin/env bash
# bench_ab.sh — A/B of `specd serve` configurations at one cell, interleaved
# (A, B, C, A, B, C, ...), each configuration a fresh server per round.
#
#   scripts/bench_ab.sh ROUNDS CONC TEMP N CONFIG...
#
# A CONFIG is "[BIN=DIR] [NAME=VALUE ...] [extra serve args]" — e.g.
# "BIN=/tmp/old/build/bin" (another build's binaries), "SD_CPU_ISA=avx2" (an
# environment variable for that server), "--spec-pipeline off", or "" (the defaults);
# SD_BENCH_ARGS are passed to every server (e.g. "--draft models/tinycode-3m"),
# SD_BENCH_THREADS as --threads, SD_BENCH_TARGET as --target (default the demo target),
# SD_BENCH_CLIENT_ARGS to specd-bench (e.g.
# "--random-input-len 512 --extra-body {\"n\":4}"). Per configuration it prints output tok/s
# summed over the rounds (and the ratio to the first), and from the
# verifier's counters (/metrics, scraped before and after each run): the
# pre-draft hit rate, accepted drafts per step, per decode step the step,
# verify, wait and drafter times (ms), the fraction of drafting hidden,
# the steps that verified the drafter's drafts and accepted drafts per such step, and the same for
# the verifier's n-gram fallback (--spec-fallback).
# specd-bench runs N requests of 128 tokens (--ignore-eos --seed 1 --warmup 2; SD_BENCH_IGNORE_EOS=""
# lets requests end at EOS: for JSON output, whose mask leaves only EOS once the value is complete).
# Results (json, metrics, logs) in ${SD_BENCH_OUT:-/tmp/specd-ab}.
set -u
[ $# -ge 5 ] || { sed -n 2,20p "$0" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=$1 C=$2 T=$3 N=$4
shift 4
DEFAULT_BIN=${SD_BENCH_BIN:-$ROOT/build/bin}
TARGET=${SD_BENCH_TARGET:-$ROOT/models/tinycode-16m}
OUTDIR=${SD_BENCH_OUT:-/tmp/specd-ab}
mkdir -p "$OUTDIR" && rm -f "$OUTDIR"/c*-r*.*
# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_ab: interrupted" >&2; exit 130' INT TERM

for r in $(seq "$ROUNDS"); do
  i=0
  for cfg in "$@"; do
    BIN=$DEFAULT_BIN
    args=() envs=()
    for w in $cfg; do
      case $w in BIN=*) BIN=${w#BIN=} ;; [A-Z]*=*) envs+=("${w%%=*}"); export "${w?}" ;; *) args+=("$w") ;; esac
    done
    # shellcheck disable=SC2086
    serve_start "c$i-r$r" ${SD_BENCH_ARGS:-} "${args[@]}" || exit 1
    for v in "${envs[@]}"; do unset "$v"; done
    base=$OUTDIR/c$i-r$r
    curl -s "$URL/metrics" >"$base.m0"
    cpu_snapshot >"$base.cpu0"
    fg "$BIN/specd-bench" --url "$URL" --num-prompts "$N" --concurrency "$C" --max-tokens 128 --temperature "$T" \
      --seed 1 ${SD_BENCH_IGNORE_EOS---ignore-eos} --warmup 2 --quiet --json "$base.json" ${SD_BENCH_CLIENT_ARGS:-} >/dev/null 2>&1 || echo "bench_ab: specd-bench failed ($cfg)" >&2
    curl -s "$URL/metrics" >"$base.m1"
    cpu_snapshot >"$base.cpu1"
    serve_stop
    i=$((i + 1))
  done
done

python3 - "$ROOT/scripts" "$OUTDIR" "$ROUNDS" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from bench_metrics import cpu_ms, metrics
out, rounds, cfgs = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
base = None
for i, cfg in enumerate(cfgs):
    tok = dur = 0.0
    d, cpu = {}, {}
    for r in range(1, rounds + 1):
        try:
            s = json.load(open(f"{out}/c{i}-r{r}.json"))["summary"]
        except (OSError, ValueError, KeyError):
            continue
        tok += s["total_output_tokens"]
        dur += s["wall_s"]
        m0, m1 = metrics(f"{out}/c{i}-r{r}.m0"), metrics(f"{out}/c{i}-r{r}.m1")
        for k in m1:
            d[k] = d.get(k, 0.0) + m1[k] - m0.get(k, 0.0)
        c0, c1 = cpu_ms(f"{out}/c{i}-r{r}.cpu0"), cpu_ms(f"{out}/c{i}-r{r}.cpu1")
        for k in c1:
            cpu[k] = cpu.get(k, 0.0) + c1[k] - c0.get(k, 0.0)
    if dur <= 0:
        print(f"c{i} [{cfg}]: no result")
        continue
    g = lambda k: d.get("specd_spec_" + k, 0.0)
    tps = tok / dur
    base = base or tps
    ds = g("decode_steps_total") or 1
    used = g("spans_used_total")
    fb, fba = g("fallback_used_total"), g("fallback_accepted_total")
    # draft time hidden as the router reports it: 1 - wait / draft, clamped to [0, 1]
    hid = min(1, max(0, 1 - g("wait_seconds_total") / g("draft_seconds_total"))) if g("draft_seconds_total") else 0
    print(f"c{i} [{cfg or 'defaults'}] tok/s {tps:.0f} ({tps / base:.3f}) hit {g('spans_ready_total') / ds:.2f} "
          f"acc/step {g('accepted_tokens_total') / max(1, g('steps_total')):.2f} | per decode step ms: "
          f"step {g('step_seconds_total') / ds * 1e3:.3f} verify {g('verify_seconds_total') / ds * 1e3:.3f} "
          f"wait {g('wait_seconds_total') / ds * 1e3:.3f} draft {g('draft_seconds_total') / ds * 1e3:.3f} | "
          f"hidden {hid:.2f} used {used / ds:.2f} acc/used {(g('accepted_tokens_total') - fba) / max(1, used):.2f} | "
          f"fallback {fb / ds:.2f} acc/fallback {fba / max(1, fb):.2f} | cpu ms/100 tok: "
          + " ".join(f"{k.removeprefix('specd-')} {v / tok * 100:.1f}" for k, v in sorted(cpu.items())))
PY
