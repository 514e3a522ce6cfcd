"""bench_metrics.py — what the bench scripts read back from a run: the
speculation counters of a /metrics scrape (scripts/bench_lib.sh writes one
before, .m0, and after, .m1, each cell)."""


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
