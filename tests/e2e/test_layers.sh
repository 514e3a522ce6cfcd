#!/usr/bin/env bash
# test_layers.sh — the layering rules (tests/tools/check_layers.py) hold on
# this tree and this build: includes go down the rooms (kernels <-
# common/base <- common/tokenizer, common/model <- common/constrain <-
# common/sample <- common/spec <- proto <- programs; kernels/cpu private),
# and no two object files depend on each other, directly or through a cycle.
# First the checker is shown to catch each kind of violation on a small
# synthetic tree, and the build's include paths to refuse an upward one.
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

# A tree that breaks every rule: common/base/k.c includes common/spec/c.h
# (upward), common/tokenizer/t.c includes common/model/m.h (sideways: rooms
# side by side), common/x.c lies outside every room, and common/base/a.c and
# common/base/b.c call each other (a two-way dependency).
mkdir -p "$tmp/src/common/base" "$tmp/src/common/spec" "$tmp/src/common/tokenizer" "$tmp/src/common/model" \
         "$tmp/build/CMakeFiles/t.dir/common/base"
printf '#include "c.h"\nint k(void) { return 0; }\n' > "$tmp/src/common/base/k.c"
printf 'int c(void);\n' > "$tmp/src/common/spec/c.h"
printf '#include "m.h"\nint t(void) { return 0; }\n' > "$tmp/src/common/tokenizer/t.c"
printf 'int m(void);\n' > "$tmp/src/common/model/m.h"
printf 'int x(void) { return 0; }\n' > "$tmp/src/common/x.c"
printf 'int b(int);\nint a(int n) { return n ? b(n - 1) : 0; }\n' > "$tmp/src/common/base/a.c"
printf 'int a(int);\nint b(int n) { return n ? a(n - 1) : 1; }\n' > "$tmp/src/common/base/b.c"
for f in a b; do cc -c "$tmp/src/common/base/$f.c" -o "$tmp/build/CMakeFiles/t.dir/common/base/$f.c.o"; done
out=$(python3 "$CHECK" "$tmp/src" "$tmp/build" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q 'common/base/k.c (common/base) includes common/spec/c.h (common/spec): upward' <<<"$out" &&
   grep -q 'common/tokenizer/t.c (common/tokenizer) includes common/model/m.h (common/model): upward or sideways' <<<"$out" &&
   grep -q 'common/x.c: outside every room' <<<"$out" &&
   grep -q 'files that depend on each other: common/base/a.c, common/base/b.c' <<<"$out"; then
    echo "ok   the checker catches upward and sideways includes, a file outside the rooms and a two-way dependency"
else
    echo "FAIL the checker missed a violation (rc $rc):"; echo "$out"; fails=$((fails + 1))
fi

# The build itself refuses an upward include: a room's library sees only the
# headers of the rooms below it (CMake), so a file of common/base that
# includes a header of common/spec does not compile there.
if [ -f "$BUILD/CMakeFiles/specd_base.dir/flags.make" ]; then
    flags=$(grep '^C_INCLUDES' "$BUILD/CMakeFiles/specd_base.dir/flags.make" | cut -d= -f2-)
    printf '#include "engine.h"\nint up(void) { return 0; }\n' > "$tmp/up.c"
    # shellcheck disable=SC2086
    if cc -fsyntax-only $flags "$tmp/up.c" 2>/dev/null; then
        echo "FAIL common/base's include path reaches common/spec's engine.h"; fails=$((fails + 1))
    else
        echo "ok   common/base's library cannot include common/spec's headers"
    fi
else
    echo "note: $BUILD/CMakeFiles/specd_base.dir/flags.make not found (not a Makefile build): build check skipped"
fi

out=$(python3 "$CHECK" "$ROOT" "$BUILD" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ]; then echo "ok   specd's tree and build keep the layers"; else echo "FAIL layers"; fails=$((fails + 1)); fi
[ $fails -eq 0 ]
