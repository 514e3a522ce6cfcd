#!/usr/bin/env bash
# gpu_profile.sh — where a decode step's GPU time goes, per kernel (Nsight Compute).
#
#   scripts/gpu_profile.sh [CONFIG.json] [OUTDIR]    # on the GPU machine, after `gpu_check.sh pack` here
#
# Runs specd-bench-decode (graphs off, so every kernel is its own launch) on a model of
# CONFIG's shapes (default bench/configs/qwen3-8b.json) cut to 4 layers (same per-layer
# kernels, loads in seconds), under `ncu --clock-control none` (the device's own clocks),
# skipping the prompt and warm-up passes, and prints per kernel and launch shape: launches,
# mean and total time, DRAM bytes read and the bandwidth they imply. The whole table goes to
# OUTDIR/profile.txt (default ${OUT:-/tmp/gpu-profile}). With the device tool:
#   run(command="scripts/gpu_profile.sh '' $OUT", carry=[".devcarry"])
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CFG=${1:-}
[ -n "$CFG" ] || CFG=$ROOT/bench/configs/qwen3-8b.json
OUTDIR=${2:-${OUT:-/tmp/gpu-profile}}
mkdir -p "$OUTDIR" || exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "gpu_profile: no ncu (Nsight Compute) here" >&2; exit 77; }
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 4
json.dump(c, open(sys.argv[2], "w"))' "$CFG" "$OUTDIR/cfg4.json" || exit 1
"$ROOT/scripts/gpu_check.sh" shell "\"$NCU\" --clock-control none --csv --launch-skip 400 --launch-count 300 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum \"\$BIN/specd-bench-decode\" --device cuda:0 \
  --random-weights \"$OUTDIR/cfg4.json\" --tokens 24 --runs 1 --graphs off" > "$OUTDIR/ncu.csv" 2> "$OUTDIR/ncu.log" ||
  { tail -n 20 "$OUTDIR/ncu.log" >&2; exit 1; }
python3 - "$OUTDIR/ncu.csv" <<'PY' | tee "$OUTDIR/profile.txt"
import csv, sys
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
agg = {}
for r in csv.DictReader(rows):
    key = (r["Kernel Name"][:70], r["Grid Size"], r["Block Size"])
    a = agg.setdefault(key, {"n": set(), "ns": 0.0, "bytes": 0.0})
    a["n"].add(r["ID"])
    v = float(r["Metric Value"].replace(",", "") or 0)
    unit = r["Metric Unit"]
    if r["Metric Name"] == "gpu__time_duration.sum":
        a["ns"] += v * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}.get(unit, 1)
    else:
        a["bytes"] += v * {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1)
total = sum(a["ns"] for a in agg.values())
print(f"{'kernel':70} {'grid':>16} {'block':>12} {'n':>4} {'mean us':>8} {'share':>6} {'MB/launch':>9} {'GB/s':>7}")
for (k, g, b), a in sorted(agg.items(), key=lambda kv: -kv[1]["ns"]):
    n = len(a["n"])
    bw = a["bytes"] / a["ns"] if a["ns"] else 0
    print(f"{k:70} {g:>16} {b:>12} {n:4d} {a['ns'] / n / 1e3:8.1f} {a['ns'] / total:6.1%} {a['bytes'] / n / 1e6:9.2f} {bw:7.0f}")
print(f"total {total / 1e3:.0f} us over {sum(len(a['n']) for a in agg.values())} launches")
PY
