#!/usr/bin/env python3
"""stdlib_prompts.py — a held-out prompt set for specd-bench (--dataset): 300
characters of Python source from the middle `def` of 24 modules of the
standard library of the Python that runs it (not the code the demo models
were tuned on). One {"prompt": ...} per line.

    python3 scripts/stdlib_prompts.py /tmp/stdlib.jsonl
"""
import json
import os
import sys
import sysconfig

MODULES = ["argparse", "csv", "difflib", "fractions", "heapq", "inspect", "json/decoder", "logging/__init__",
           "pathlib", "pprint", "queue", "random", "shutil", "statistics", "string", "tarfile", "textwrap",
           "threading", "typing", "uuid", "zipfile", "calendar", "configparser", "dataclasses"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lib = sysconfig.get_paths()["stdlib"]
    n = 0
    with open(sys.argv[1], "w") as out:
        for m in MODULES:
            try:
                src = open(os.path.join(lib, m + ".py"), encoding="utf-8").read()
            except OSError:
                continue
            defs = [i for i in range(len(src)) if src.startswith("\n    def ", i) or src.startswith("\ndef ", i)]
            if not defs:
                continue
            i = defs[len(defs) // 2] + 1
            out.write(json.dumps({"prompt": src[i:i + 300]}) + "\n")
            n += 1
    print(f"{n} prompts from {lib} -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
