#!/usr/bin/env python3
"""check_layers.py — the layering rules of specd, checked on the tree and
on the built objects.

  check_layers.py SOURCE_DIR BUILD_DIR

1. Includes go down, never up. The rooms, each of which may include its own
   headers and those of the rooms listed under it (ROOMS below):
     kernels  <-  common/base  <-  common/tokenizer, common/model (side by
     side: neither includes the other)  <-  common/constrain  <-
     common/sample  <-  common/spec  <-  proto  <-  the programs (router,
     verifier, drafter, tools, bench, bench/client, router/supervisor);
     router/jinja is a library on common/base that only the router uses;
     router/playground (the embedded page's table) includes nothing and
     only the router uses it.
   A program includes no other program's headers; kernels/cpu/*.h and
   kernels/cuda/*.h(.cuh) private headers stay in their folder. Tests are on
   top and exempt.
2. No two object files depend on each other, directly or through a cycle:
   file A depends on file B when A uses a global symbol B defines (nm).
Prints every violation and exits 1, or prints a summary and exits 0."""
import collections
import os
import re
import subprocess
import sys

# room -> the rooms below it (what it may include besides itself).
_COMMON = ["common/base", "common/tokenizer", "common/model", "common/constrain", "common/sample", "common/spec"]
ROOMS = {
    "kernels": [],
    "common/base": ["kernels"],
    "common/tokenizer": ["kernels", "common/base"],
    "common/model": ["kernels", "common/base"],
    "common/constrain": ["kernels", "common/base", "common/tokenizer", "common/model"],
    "common/sample": ["kernels", "common/base", "common/tokenizer", "common/model", "common/constrain"],
    "common/spec": ["kernels"] + _COMMON[:5],
    "proto": ["kernels"] + _COMMON,
    "router/jinja": ["kernels", "common/base"],
    "router/playground": [],
}
PROGRAM_BASE = ["kernels"] + _COMMON + ["proto"]
PROGRAMS = ["router", "router/supervisor", "verifier", "drafter", "tools", "bench", "bench/client"]
for _p in PROGRAMS:
    ROOMS[_p] = PROGRAM_BASE + (["router/jinja", "router/playground"] if _p == "router" else [])
PRIVATE = {"kernels/cpu": "kernels/cpu", "kernels/cuda/cuda_kernels.h": "kernels/cuda",
           "kernels/cuda/cuda_common.cuh": "kernels/cuda"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def is_test(rel):
    parts = rel.split("/")
    return "tests" in parts or os.path.basename(rel).startswith("test_")


def room_of(rel):
    """The longest room that holds rel (kernels/cpu is in kernels); None for
    a file outside every room (scripts, tests: not checked)."""
    best = None
    for r in ROOMS:
        if (rel == r or rel.startswith(r + "/")) and (best is None or len(r) > len(best)):
            best = r
    return best


def sources(src):
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "node_modules", "models")]
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                out.append(os.path.relpath(os.path.join(root, f), src))
    return sorted(out)


def check_includes(src):
    files = sources(src)
    headers = collections.defaultdict(list)
    for rel in files:
        if rel.endswith((".h", ".cuh")):
            headers[os.path.basename(rel)].append(rel)
    headers["specd.pb-c.h"].append("proto/specd.pb-c.h")  # generated into the build tree
    bad = []
    checked = 0
    for rel in files:
        if is_test(rel):
            continue
        if rel.startswith(("common/", "kernels/", "proto/")) and room_of(rel) is None:
            bad.append(f"{rel}: outside every room (ROOMS)")
        elif rel.startswith("common/") and os.path.dirname(rel) == "common":
            bad.append(f"{rel}: outside every room (common/ holds rooms only)")
        text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
        here = os.path.dirname(rel)
        for name in INCLUDE.findall(text):
            checked += 1
            direct = os.path.normpath(os.path.join(here, name))
            if os.path.exists(os.path.join(src, direct)):
                cands = [direct]
            else:
                cands = headers.get(os.path.basename(name), [])
            if len(cands) != 1:
                bad.append(f"{rel}: #include \"{name}\": {'no such header' if not cands else 'ambiguous: ' + ', '.join(cands)}")
                continue
            h = cands[0]
            for priv, owner in PRIVATE.items():
                if (h == priv or h.startswith(priv + "/")) and not here.startswith(owner):
                    bad.append(f"{rel}: includes {h}, private to {owner}/")
            rf, rh = room_of(rel), room_of(h)
            if rf is None or rh is None or rf == rh:
                continue
            if rh in ROOMS[rf]:
                continue
            if rf in PROGRAMS and rh in PROGRAMS:
                bad.append(f"{rel} includes {h}: another program's header ({rh})")
            else:
                bad.append(f"{rel} ({rf}) includes {h} ({rh}): upward or sideways")
    return bad, checked


def nm_symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defs, uses = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            uses.add(f[1])
        elif len(f) == 3 and f[1] in "TDBRVWGS":
            defs.add(f[2])
    return defs, uses


def source_of(obj, build):
    """CMakeFiles/<target>.dir/<path relative to the source dir>.o -> path."""
    rel = os.path.relpath(obj, build)
    m = re.search(r"CMakeFiles/[^/]+\.dir/(.+)\.o$", rel)
    if not m:
        return None
    path = m.group(1)
    while path.startswith("__/"):
        path = path[3:]
    sub = rel.split("/CMakeFiles/")[0] if "/CMakeFiles/" in rel else ""
    return os.path.normpath(os.path.join(sub, path)) if sub and not m.group(1).startswith("__/") else path


def object_files(build):
    """The objects the build links now: read from each target's link.txt
    (Makefile generators; stale objects of renamed targets are ignored), or
    every .o under build when there is none."""
    objs = set()
    for root, _, files in os.walk(build):
        if "link.txt" in files and root.endswith(".dir"):
            bindir = os.path.dirname(os.path.dirname(root))  # <bindir>/CMakeFiles/<t>.dir
            for tok in open(os.path.join(root, "link.txt")).read().split():
                tok = tok.strip('"')
                if tok.endswith(".o"):
                    objs.add(os.path.normpath(os.path.join(bindir, tok)))
    if not objs:
        for root, _, files in os.walk(build):
            objs.update(os.path.join(root, f) for f in files if f.endswith(".o"))
    return sorted(o for o in objs if os.path.exists(o))


def check_objects(build):
    objs = object_files(build)
    owner, uses, names = collections.defaultdict(set), {}, {}
    for o in objs:
        src = source_of(o, build)
        if not src or is_test(src) or "pb-c" in src or src.startswith(("generated", "tests/")):
            continue
        if src in names.values():  # the same source built into two targets
            continue
        d, u = nm_symbols(o)
        names[o] = src
        uses[o] = u
        for s in d:
            if s != "main":
                owner[s].add(o)
    edges = {o: set() for o in uses}
    for o, u in uses.items():
        for s in u:
            for p in owner.get(s, ()):
                if p != o:
                    edges[o].add(p)
    # strongly connected components (Tarjan): any with two or more files is a cycle
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    bad = []
    for comp in comps:
        files = sorted(names[o] for o in comp)
        pairs = [f"{names[a]} -> {names[b]}" for a in comp for b in sorted(edges[a]) if b in comp]
        bad.append("files that depend on each other: " + ", ".join(files) + " (" + "; ".join(sorted(pairs)) + ")")
    return bad, len(uses)


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    src, build = sys.argv[1], sys.argv[2]
    bad_inc, n_inc = check_includes(src)
    bad_obj, n_obj = check_objects(build)
    for b in bad_inc + bad_obj:
        print("layers:", b)
    if bad_inc or bad_obj:
        return 1
    if n_obj == 0:
        print("layers: no object files under", build, file=sys.stderr)
        return 1
    print(f"layers: ok ({n_inc} includes, {n_obj} object files, no upward include, no dependency cycle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
