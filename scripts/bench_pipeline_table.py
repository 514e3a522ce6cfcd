#!/usr/bin/env python3
"""bench_pipeline_table.py — the table of scripts/bench_pipeline.sh.

  bench_pipeline_table.py RESULTS_DIR ROUNDS "THREAD_SETS" "CONCS" "TEMPS" "CONFIGS"
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_metrics import cell_sums  # noqa: E402

outdir, rounds = sys.argv[1], int(sys.argv[2])
threads, concs, temps, configs = (a.split() for a in sys.argv[3:7])

def cell(cfg, th, c, t):
    sums = cell_sums(outdir, rounds, cfg, th, c, t)
    if sums is None:
        return None
    tok, dur, d = sums
    g = lambda k: d.get("specd_spec_" + k + "_total", 0.0)
    out = {"tps": tok / dur}
    out["acc"] = g("accepted_tokens") / g("steps") if g("steps") else None
    out["hit"] = g("spans_ready") / g("decode_steps") if g("decode_steps") else None
    out["hidden"] = min(1, max(0, 1 - g("wait_seconds") / g("draft_seconds"))) if g("draft_seconds") else None
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
print("pre-draft hit rate: decode steps whose span was there when the step began; draft time hidden: 1 - wait / draft in [0, 1],")
print("from the verifier's counters (/metrics) over the cell (serial: 0, as the step waits for the whole draft).")
