#!/usr/bin/env python3
"""bench_adaptive_table.py — the table of scripts/bench_adaptive.sh.

  bench_adaptive_table.py RESULTS_DIR ROUNDS "THREAD_SETS" "PROPOSERS" "STATIC_KS" "CONCS" "TEMPS"

Reads RESULTS_DIR/CONFIG-thTH-cC-tT-rR.json (specd-bench) and the /metrics
scrapes before (.m0) and after (.m1) each cell; sums each cell over the
rounds. Prints one row per proposer x threads x concurrency x temperature:
plain, adaptive and static tok/s, adaptive / plain, adaptive / best static,
adaptive / plain in each round (the spread of this machine), the mean draft
length the scheduler chose and its step-time prediction error; then the
three aims of the benchmark, checked, and the verdict of the issue's "no cell
slower than plain beyond noise": a cell is slower beyond noise when the
one-sided 95% upper bound of the geometric mean of its rounds' ratios
(Student's t over the rounds, the configurations of a round run seconds
apart) is below 1; likewise below the best static K (chosen by the summed
rate) beyond noise when the bound of adaptive / that K is below 0.95. At 5%
a cell, about one cell in twenty is flagged by chance where adaptive and
plain are even: a flagged cell is confirmed by measuring it again in the
table's flow (docs/BENCHMARKS.md).
"""
import os
import math
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_metrics import cell_sums  # noqa: E402


def cell(outdir, rounds, cfg, th, c, t):
    sums = cell_sums(outdir, rounds, cfg, th, c, t)
    if sums is None:
        return None
    tok, dur, d = sums
    ks = {int(m.group(1)): v for k, v in d.items() if (m := re.match(r'specd_spec_draft_length_total\{k="(\d+)"\}', k))}
    n = sum(ks.values())
    pred = d.get("specd_spec_step_predicted_seconds_total", 0.0)
    meas = d.get("specd_spec_step_measured_seconds_total", 0.0)
    return {"tps": tok / dur, "mean_k": sum(k * v for k, v in ks.items()) / n if n else None,
            "pred_err": abs(pred - meas) / meas if meas > 0 else None}


def by_round(outdir, rounds, a, b, th, c, t):
    """Configuration a's tok/s over b's, round by round (None where a round is missing)."""
    out = []
    for r in range(1, rounds + 1):
        x, y = cell_sums(outdir, rounds, a, th, c, t, r), cell_sums(outdir, rounds, b, th, c, t, r)
        out.append(x[0] / x[1] / (y[0] / y[1]) if x and y else None)
    return out


# one-sided 95% quantiles of Student's t by degrees of freedom
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812}


def upper_bound(ratios):
    """(geometric mean, one-sided 95% upper bound) of per-round ratios; the bound None under 2 rounds."""
    xs = [math.log(x) for x in ratios if x]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return math.exp(m), None
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return math.exp(m), math.exp(m + T95.get(len(xs) - 1, 1.645) * sd / math.sqrt(len(xs)))


def main():
    outdir, rounds = sys.argv[1], int(sys.argv[2])
    threads, proposers, statics, concs, temps = (a.split() for a in sys.argv[3:8])
    alt = any(cell(outdir, rounds, f"{p}-adaptive-alt", th, c, t)
              for p in proposers for th in threads for c in concs for t in temps)
    hdr = "".join(f"K{k} | " for k in statics) + ("other build tok/s | adaptive / other build | " if alt else "")
    print(f"| proposer | threads | conc. | temp. | plain tok/s | adaptive tok/s | {hdr}adaptive / plain | "
          "by round | best static | **adaptive / best static** | mean K chosen | step-time prediction off by |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * (len(statics) + 2 * alt) + "---:|---:|---:|---:|---:|---:|")
    alt_ratios = []
    worst_plain = worst_static = None
    n_cells = n_below = n_every = 0
    slower, below_static = [], []
    c1t0 = {}
    for p in proposers:
        for th in threads:
            for c in concs:
                for t in temps:
                    pl = cell(outdir, rounds, "plain", th, c, t)
                    ad = cell(outdir, rounds, f"{p}-adaptive", th, c, t)
                    st = {k: cell(outdir, rounds, f"{p}-k{k}", th, c, t) for k in statics}
                    ot = cell(outdir, rounds, f"{p}-adaptive-alt", th, c, t) if alt else None
                    if not pl or not ad or not all(st.values()) or (alt and not ot):
                        print(f"| {p} | {th} | {c} | {t} | missing |")
                        continue
                    bk = max(statics, key=lambda k: st[k]["tps"]) if statics else None
                    rp = ad["tps"] / pl["tps"]
                    rs = ad["tps"] / st[bk]["tps"] if bk else None
                    worst_plain = min(worst_plain or rp, rp)
                    if rs is not None:
                        worst_static = min(worst_static or rs, rs)
                    if c == "1" and t == "0":
                        c1t0[(p, th)] = rp
                    rr = by_round(outdir, rounds, f"{p}-adaptive", "plain", th, c, t)
                    n_cells += 1
                    n_below += rp < 0.98
                    n_every += all(x is not None and x < 0.98 for x in rr)
                    name = f"{p} threads {th} C{c} T{t}"
                    g, ub = upper_bound(rr)
                    if ub is not None and ub < 1:
                        slower.append(f"{name} ({g:.2f}x, bound {ub:.2f})")
                    if bk:
                        g, ub = upper_bound(by_round(outdir, rounds, f"{p}-adaptive", f"{p}-k{bk}", th, c, t))
                        if ub is not None and ub < 0.95:
                            below_static.append(f"{name} ({g:.2f}x K{bk}, bound {ub:.2f})")
                    rounds_col = ", ".join("—" if x is None else f"{x:.2f}" for x in rr)
                    cols = "".join(f"{st[k]['tps']:.0f} | " for k in statics)
                    if alt:
                        alt_ratios.append(ad["tps"] / ot["tps"])
                        cols += f"{ot['tps']:.0f} | {alt_ratios[-1]:.2f}× | "
                    mk = "—" if ad["mean_k"] is None else f"{ad['mean_k']:.1f}"
                    pe = "—" if ad["pred_err"] is None else f"{100 * ad['pred_err']:.0f}%"
                    bs = f"K{bk} | **{rs:.2f}×**" if bk else "— | —"
                    print(f"| {p} | {th} | {c} | {t} | {pl['tps']:.0f} | {ad['tps']:.0f} | {cols}{rp:.2f}× | "
                          f"{rounds_col} | {bs} | {mk} | {pe} |")
    print()
    print("tok/s: output tokens / wall time of the measured phase, summed over the rounds. Static K: "
          "--spec-adaptive off --num-draft K. mean K chosen: drafts per decode step the scheduler chose "
          "(/metrics specd_spec_draft_length_total); prediction off by: |predicted - measured| / measured step time, "
          "summed over the cell. by round: adaptive / plain in each round.")
    print()
    if worst_plain is not None:
        ws = "—" if worst_static is None else f"{worst_static:.2f}x"
        print(f"Aims: adaptive >= 0.98x plain in every cell: worst {worst_plain:.2f}x; within 5% of (or above) the "
              f"best static K in every cell: worst {ws}; >= 2.3x plain at C = 1, T = 0: " +
              ", ".join(f"{p} threads {th}: {v:.2f}x" for (p, th), v in sorted(c1t0.items())))
        print(f"Cells below 0.98x plain: {n_below} of {n_cells}; below it in every round: {n_every}.")
        print(f"Slower than plain beyond noise (one-sided 95% bound of the rounds' geometric mean < 1): "
              f"{len(slower)} of {n_cells}" + (": " + "; ".join(slower) if slower else "") +
              f" (about {0.05 * n_cells:.1f} flagged by chance where every cell is even: confirm a flagged cell)")
        if statics:
            print(f"Below 0.95x the best static K beyond noise (bound < 0.95): {len(below_static)} of {n_cells}" +
                  (": " + "; ".join(below_static) if below_static else ""))
    if alt_ratios:
        g = math.exp(sum(math.log(x) for x in alt_ratios) / len(alt_ratios))
        print(f"Adaptive / the other build's adaptive (SD_BENCH_ALT_BIN): geometric mean over the cells {g:.3f}, "
              f"{sum(x >= 1 for x in alt_ratios)} of {len(alt_ratios)} cells at or above it.")


if __name__ == "__main__":
    main()
