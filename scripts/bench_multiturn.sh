#!/usr/bin/env bash
# bench_multiturn.sh — multi-turn chat through `specd serve`, the verifier's
# prefix cache on vs off (--no-prefix-cache), interleaved (on, off, on, off,
# …), a fresh server per configuration and round.
#
#   scripts/bench_multiturn.sh ROUNDS CONC [TURNS [SYSTEM_CHARS [MAX_TOKENS]]]
#
# CONC conversations run at once (specd-bench --concurrency, --in-order over
# a turn-major dataset: every conversation's turn 1, then every turn 2, …);
# each has TURNS turns (default 8) after one shared system prompt of
# SYSTEM_CHARS characters of C source (default 6000, ~1.5k tokens). Turn t's
# prompt is the system prompt, the t - 1 earlier user messages and answers,
# then user message t (the answers are fixed texts, so a turn's prompt
# starts with the previous turn's prompt: what the cache can reuse).
# Greedy, MAX_TOKENS per turn (default 64), the demo pair
# (SD_BENCH_ARGS, default "--draft models/tinycode-3m"), SD_BENCH_THREADS as
# --threads. Prints per configuration: output tok/s, TTFT p50 / p99 of turn
# 1 and of turns 2.., the share of prompt tokens taken from the cache, and
# the ratios off / on. Results in ${SD_BENCH_OUT:-/tmp/specd-multiturn}.
set -u
[ $# -ge 2 ] || { sed -n 2,20p "$0" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=$1 C=$2 TURNS=${3:-8} SYS=${4:-6000} MAXT=${5:-64}
BIN=${SD_BENCH_BIN:-$ROOT/build/bin}
TARGET=$ROOT/models/tinycode-16m
OUTDIR=${SD_BENCH_OUT:-/tmp/specd-multiturn}
mkdir -p "$OUTDIR" && rm -f "$OUTDIR"/*.json "$OUTDIR"/*.log
# shellcheck source=scripts/bench_lib.sh
. "$ROOT/scripts/bench_lib.sh"
trap on_exit EXIT
trap 'echo "bench_multiturn: interrupted" >&2; exit 130' INT TERM

python3 - "$ROOT" "$OUTDIR/dataset.jsonl" "$C" "$TURNS" "$SYS" <<'PY'
import json, sys
root, out, conv, turns, sys_chars = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
system = open(f"{root}/common/spec/engine.c").read()[:sys_chars]
asks = ["Explain what the function above does.", "Write a unit test for it.", "Make it faster.",
        "Add error handling.", "Document its arguments.", "Rewrite it in Python.", "List its edge cases.",
        "Summarize the changes so far."]
answer = "def helper(values):\n    total = 0\n    for v in values:\n        total += v\n    return total\n"
with open(out, "w") as f:
    for t in range(turns):
        for c in range(conv):
            text = system + f"\n/* conversation {c} */\n"
            for k in range(t + 1):
                text += f"\n# User: {asks[(k + c) % len(asks)]}\n# Assistant:\n"
                if k < t:
                    text += answer
            f.write(json.dumps({"prompt": text, "turn": t + 1, "conversation": c}) + "\n")
PY
N=$((C * TURNS))
for r in $(seq "$ROUNDS"); do
  for cfg in on off; do
    args=()
    [ "$cfg" = off ] && args+=(--no-prefix-cache)
    # shellcheck disable=SC2086
    serve_start "$cfg-r$r" ${SD_BENCH_ARGS:---draft $ROOT/models/tinycode-3m} "${args[@]}" || exit 1
    fg "$BIN/specd-bench" --url "$URL" --num-prompts "$N" --concurrency "$C" --max-tokens "$MAXT" --temperature 0 \
      --ignore-eos --dataset "$OUTDIR/dataset.jsonl" --in-order --quiet --json "$OUTDIR/$cfg-r$r.json" >/dev/null 2>&1 ||
      echo "bench_multiturn: specd-bench failed ($cfg, round $r)" >&2
    serve_stop
  done
done

python3 - "$OUTDIR" "$ROUNDS" "$C" "$TURNS" <<'PY'
import json, sys
out, rounds, conv, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
turn_of = [json.loads(l)["turn"] for l in open(f"{out}/dataset.jsonl")]
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] * 1e3 if v else float("nan")
res = {}
for cfg in ("on", "off"):
    first, later, tok, wall, inp, cached = [], [], 0, 0.0, 0, 0
    for r in range(1, rounds + 1):
        try:
            j = json.load(open(f"{out}/{cfg}-r{r}.json"))
        except (OSError, ValueError):
            continue
        for q in j["requests"]:
            if q.get("error") or q["ttft"] is None:
                continue
            (first if turn_of[q["prompt_index"]] == 1 else later).append(q["ttft"])
            inp += q["input_tokens"] or 0
            cached += q.get("cached_tokens") or 0
        tok += j["summary"]["total_output_tokens"]
        wall += j["summary"]["wall_s"]
    res[cfg] = dict(tps=tok / wall if wall else 0, t1=pct(first, .5), t1p99=pct(first, .99), tl=pct(later, .5),
                    tlp99=pct(later, .99), hit=cached / inp if inp else 0, n=len(first) + len(later))
    s = res[cfg]
    print(f"cache {cfg:3}: {s['n']} requests, output tok/s {s['tps']:.0f} | TTFT ms turn 1 p50 {s['t1']:.0f} p99 "
          f"{s['t1p99']:.0f} | turns 2-{turns} p50 {s['tl']:.0f} p99 {s['tlp99']:.0f} | prompt tokens cached {s['hit']:.1%}")
on, off = res["on"], res["off"]
if on["tl"] and on["tps"]:
    print(f"off / on: TTFT turns 2-{turns} p50 {off['tl'] / on['tl']:.2f}x, p99 {off['tlp99'] / on['tlp99']:.2f}x; "
          f"turn 1 p50 {off['t1'] / on['t1']:.2f}x; throughput on / off {on['tps'] / off['tps']:.2f}x")
PY
