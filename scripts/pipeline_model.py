#!/usr/bin/env python3
"""pipeline_model.py — what pipelined speculation gives over serial
speculation, from a handful of times (docs/BENCHMARKS.md, "Pipelined").

All times are in decode steps of the target (a plain one-token step = 1).

  V   verify step: one target pass over the K+1 positions of a span
  d   drafter time for one span (K drafts, plus the guess of the next token)
  o   one message exchange verifier -> drafter -> verifier (wake-ups included)
  h   pre-draft hit rate: steps whose span was drafted ahead for the outcome
      that really happened (measured by the verifier, /metrics)

Serial:    every step waits for its span:   S = V + d + o
Pipelined: a hit costs the verify step only; a miss waits for a span drafted
           from the real outcome (the verifier may decode one token plainly
           instead when that is cheaper, which the formula ignores: it only
           makes pipelining better):   P = V + (1 - h) * (d + o)
Both commit the same tokens per step on average (the spans are the drafter's
same greedy tokens), so the speedup is S / P, and the drafter must fit its
work ahead of time into the verify step: d * (1 + branches) <= V.

Run without arguments for the GPU-pair table the issue asks for, or give
V d o h to evaluate one point (e.g. the CPU figures of docs/BENCHMARKS.md).
"""
import sys


def speedup(V, d, o, h):
    serial = V + d + o
    pipelined = V + (1 - h) * (d + o)
    return serial / pipelined, 1 - (pipelined - V) / d


def main():
    if len(sys.argv) == 5:
        V, d, o, h = map(float, sys.argv[1:])
        s, hidden = speedup(V, d, o, h)
        print(f"V={V} d={d} o={o} h={h}: pipelined / serial = {s:.2f}x, draft time hidden {hidden:.2f}")
        return
    V, o = 1.1, 0.02
    print("GPU pair: verify V = 1.1 decode steps, a message exchange o = 0.02 steps")
    print("(e.g. ~0.2 ms of loopback ZeroMQ against a ~10 ms decode step of an 8B target)\n")
    print("| draft d (steps) | h = 0.57 (CPU, measured) | h = 0.7 | h = 0.9 | h = 1 (ceiling) |")
    print("|---:|---:|---:|---:|---:|")
    for d in (0.1, 0.2, 0.3, 0.5, 1.0):
        cells = []
        for h in (0.57, 0.7, 0.9, 1.0):
            s, hidden = speedup(V, d, o, h)
            cells.append(f"{s:.2f}x ({hidden:.0%} hidden)")
        print(f"| {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
