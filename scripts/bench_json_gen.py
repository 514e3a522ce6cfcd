#!/usr/bin/env python3
"""bench_json_gen.py — JSON or regex output in one process: plain against speculative decoding, interleaved.

    scripts/bench_json_gen.py ROUNDS (SCHEMA.json | object | regex=PATTERN) [BIN=DIR ...]

Runs `specd-generate --max-tokens 128 --threads 1 --json` on the demo target with `--json-schema @SCHEMA.json`
(or `--response-format json_object`, or `--regex PATTERN`) for three prompts, per round: plain (build/bin), then speculative
(`--draft models/tinycode-3m`) with build/bin and with each other build's binaries given as BIN=DIR.
Prints per configuration tokens / seconds summed over the rounds, the per-round ratio to plain (geometric
mean ± standard error) and the mean tokens a step; exits non-zero when a configuration wrote other tokens
than plain (greedy: speculation must not change the output). Run from the repository root, nothing else
running."""
import json
import math
import statistics
import subprocess
import sys

PROMPTS = ["config = ", "import json\ndata = ", "def f():\n    return "]
DRAFT = ["--draft", "models/tinycode-3m"]


def run(bindir, prompt, fmt, extra):
    out = subprocess.run([bindir + "/specd-generate", "--model", "models/tinycode-16m", "--prompt", prompt,
                          "--max-tokens", "128", "--threads", "1", "--json"] + fmt + extra,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rounds, what = int(sys.argv[1]), sys.argv[2]
    fmt = ["--response-format", "json_object"] if what == "object" else \
        ["--regex", what[6:]] if what.startswith("regex=") else ["--json-schema", "@" + what]
    cfgs = [("plain", "build/bin", [])] + [("speculative", "build/bin", DRAFT)] + \
           [("speculative " + a[4:], a[4:], DRAFT) for a in sys.argv[3:] if a.startswith("BIN=")]
    tot = {c[0]: [0, 0.0, []] for c in cfgs}
    logr = {c[0]: [] for c in cfgs}
    same = True
    for _ in range(rounds):
        rate, ref = {}, {}
        for name, bindir, extra in cfgs:
            toks, secs = 0, 0.0
            for p in PROMPTS:
                d = run(bindir, p, fmt, extra)
                if name == "plain":
                    ref[p] = d["tokens"]
                same &= d["tokens"] == ref[p]
                toks += d["completion_tokens"]
                secs += d["decode_seconds"] + d["prefill_seconds"]
                if extra:
                    tot[name][2].append(d["tokens_per_step"])
            rate[name] = toks / secs
            tot[name][0] += toks
            tot[name][1] += secs
        for name in rate:
            logr[name].append(math.log(rate[name] / rate["plain"]))
    for name, (t, s, steps) in tot.items():
        m = statistics.mean(logr[name])
        se = statistics.stdev(logr[name]) / math.sqrt(rounds) if rounds > 1 else 0.0
        print(f"{name}: {t} tokens, {t / s:.1f} tok/s; x plain per round {math.exp(m):.3f} +- {math.exp(m) * se:.3f}"
              + (f"; tokens a step {statistics.mean(steps):.2f}" if steps else ""))
    if not same:
        sys.exit("speculative output differs from plain")


if __name__ == "__main__":
    main()
