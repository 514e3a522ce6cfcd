#!/usr/bin/env bash
# test_layers.sh — the layering rules (tests/tools/check_layers.py) hold on
# this tree and this build: includes go down (kernels <- common <- proto <-
# programs; kernels/cpu private), and no two object files depend on each
# other, directly or through a cycle. First the checker is shown to catch
# both kinds of violation on a small synthetic tree.
# Environment (set by CTest): SD_ROOT, SD_BIN.
set -u
ROOT="${SD_ROOT:?SD_ROOT not set}"
BUILD="$(dirname "${SD_BIN:?SD_BIN not set}")"
CHECK="$ROOT/tests/tools/check_layers.py"
for tool in python3 nm cc; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not found"; exit 77; }
done
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tree that breaks both rules: kernels/k.c includes common/c.h (upward),
# and common/a.c and common/b.c call each other (a two-way dependency).
mkdir -p "$tmp/src/kernels" "$tmp/src/common" "$tmp/build/CMakeFiles/t.dir/common"
printf '#include "c.h"\nint k(void) { return 0; }\n' > "$tmp/src/kernels/k.c"
printf 'int c(void);\n' > "$tmp/src/common/c.h"
printf 'int b(int);\nint a(int n) { return n ? b(n - 1) : 0; }\n' > "$tmp/src/common/a.c"
printf 'int a(int);\nint b(int n) { return n ? a(n - 1) : 1; }\n' > "$tmp/src/common/b.c"
for f in a b; do cc -c "$tmp/src/common/$f.c" -o "$tmp/build/CMakeFiles/t.dir/common/$f.c.o"; done
out=$(python3 "$CHECK" "$tmp/src" "$tmp/build" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q 'kernels/k.c (layer 0) includes common/c.h (layer 1): upward' <<<"$out" &&
   grep -q 'files that depend on each other: common/a.c, common/b.c' <<<"$out"; then
    echo "ok   the checker catches an upward include and a two-way dependency"
else
    echo "FAIL the checker missed a violation (rc $rc):"; echo "$out"; fails=$((fails + 1))
fi

out=$(python3 "$CHECK" "$ROOT" "$BUILD" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ]; then echo "ok   specd's tree and build keep the layers"; else echo "FAIL layers"; fails=$((fails + 1)); fi
[ $fails -eq 0 ]
