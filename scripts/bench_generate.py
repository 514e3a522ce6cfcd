#!/usr/bin/env python3
"""bench_generate.py — in-process speculation (specd-generate) against plain decoding, interleaved.

  scripts/bench_generate.py [--rounds 3] [--prompts 8] [--threads 1] [--max-tokens 128] [--bin build/bin]
                            [--config NAME=ARGS ...]

Runs every configuration on every held-out prompt (scripts/stdlib_prompts.py: Python standard-library
source the demo models were not tuned on), round after round, the configurations interleaved (A, B, C, A,
B, C, ...) so that a slow spell of a shared machine falls on all of them. Greedy, --ignore-eos. Prints each
configuration's decode rate (tokens_per_second of --json: the decode phase, after the first token) as the
median over prompts of each round, and its ratio to the first configuration of its --quant: the median of
the per-prompt ratios, with the lowest and highest round. Checks that every configuration's tokens equal
the plain configuration's for the same --quant (exit 1 if not)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = [
    "bf16 plain=",
    "bf16 draft auto=--draft models/tinycode-3m --num-draft auto",
    "bf16 draft K6=--draft models/tinycode-3m --num-draft 6",
    "int8 plain=--quant int8",
    "int8 draft auto=--quant int8 --draft models/tinycode-3m --num-draft auto",
    "int8 draft K6=--quant int8 --draft models/tinycode-3m --num-draft 6",
]


def prompts(n):
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as f:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "stdlib_prompts.py"), f.name], check=True,
                       stdout=subprocess.DEVNULL)
        return [json.loads(l)["prompt"] for l in open(f.name)][:n]


def run(a, extra, prompt):
    cmd = [os.path.join(a.bin, "specd-generate"), "--model", os.path.join(ROOT, "models", "tinycode-16m"),
           "--threads", str(a.threads), "--max-tokens", str(a.max_tokens), "--ignore-eos", "--json",
           "--prompt", prompt] + extra.split()
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--config", action="append", help="NAME=ARGS (repeatable; default: bf16 and int8, plain, "
                    "auto and K6)")
    a = ap.parse_args()
    cfgs = [c.split("=", 1) for c in (a.config or DEFAULT)]
    ps = prompts(a.prompts)
    rate = {name: [[] for _ in range(a.rounds)] for name, _ in cfgs}
    ratio = {name: [[] for _ in range(a.rounds)] for name, _ in cfgs}
    toks = {}
    bad = 0
    for r in range(a.rounds):
        for i, p in enumerate(ps):
            base = {}
            for name, extra in cfgs:
                d = run(a, extra, p)
                quant = "int8" if "--quant int8" in extra else "bf16"
                if quant not in base:
                    base[quant] = d["tokens_per_second"]
                    toks.setdefault((quant, i), d["tokens"])
                elif d["tokens"] != toks[(quant, i)]:
                    print("MISMATCH: %s, prompt %d" % (name, i), file=sys.stderr)
                    bad += 1
                rate[name][r].append(d["tokens_per_second"])
                ratio[name][r].append(d["tokens_per_second"] / base[quant])
    print("| configuration | decode tok/s (median of prompts, per round) | vs plain of its weights: median "
          "[lowest round, highest round] |")
    print("|---|---|---|")
    for name, _ in cfgs:
        per_round = [statistics.median(x) for x in ratio[name]]
        allr = [v for x in ratio[name] for v in x]
        print("| %s | %s | %.2f× [%.2f, %.2f] |" % (name, ", ".join("%.0f" % statistics.median(x) for x in
                                                                     rate[name]), statistics.median(allr),
                                                    min(per_round), max(per_round)))
    print("%d prompts × %d rounds, %d threads, %d tokens, greedy; outputs equal plain: %s" %
          (len(ps), a.rounds, a.threads, a.max_tokens, "yes" if not bad else "NO (%d)" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
