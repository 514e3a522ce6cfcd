"""bench_metrics.py — what the bench scripts read back from a run: the
speculation counters of a /metrics scrape (scripts/bench_lib.sh writes one
before, .m0, and after, .m1, each cell), and a cell summed over its rounds."""

import json
import os


def metrics(path):
    """specd_spec_* samples of a Prometheus text scrape, by series; {} when unreadable."""
    m = {}
    try:
        for line in open(path):
            if line.startswith("specd_spec_"):
                k, v = line.split()[:2]
                m[k] = float(v)
    except OSError:
        pass
    return m


def cpu_ms(path):
    """CPU ms by process name of a cpu_snapshot (scripts/bench_lib.sh); {} when unreadable."""
    c = {}
    try:
        for line in open(path):
            k, v = line.split()
            c[k] = c.get(k, 0.0) + float(v)
    except (OSError, ValueError):
        pass
    return c


def cell_sums(outdir, rounds, cfg, th, c, t, only=None):
    """A cell over its rounds (or round `only`): (output tokens, wall seconds, {series: counter
    increase}); None when no round has a usable specd-bench summary. Files:
    OUTDIR/CFG-thTH-cC-tT-rR.{json,m0,m1}."""
    tok = dur = 0.0
    d = {}
    for r in [only] if only else range(1, rounds + 1):
        base = os.path.join(outdir, f"{cfg}-th{th}-c{c}-t{t}-r{r}")
        try:
            s = json.load(open(base + ".json"))["summary"]
        except (OSError, ValueError, KeyError):
            continue
        if s.get("failed"):
            continue
        tok += s["total_output_tokens"]
        dur += s["wall_s"]
        m0, m1 = metrics(base + ".m0"), metrics(base + ".m1")
        for k in m1:
            d[k] = d.get(k, 0.0) + m1[k] - m0.get(k, 0.0)
    return (tok, dur, d) if dur > 0 else None
