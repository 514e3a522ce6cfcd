#!/usr/bin/env bash
# test_format.sh — the tree is formatted as .clang-format says (the house
# style), checked with Debian 12's clang-format (14): every C, header and
# CUDA file git tracks. First shown to catch a file that is not.
# Another clang-format major version formats some constructs otherwise:
# then the test skips (77) with a message. Environment: SD_ROOT.
set -u
ROOT="${SD_ROOT:?SD_ROOT not set}"
command -v clang-format >/dev/null || { echo "SKIP: clang-format not found (Debian: apt-get install clang-format)"; exit 77; }
ver=$(clang-format --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
[ "$ver" = "14" ] || { echo "SKIP: clang-format $ver, the house style is checked with Debian 12's clang-format 14"; exit 77; }
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$ROOT/.clang-format" "$tmp/"
printf 'int f(int x) {\n  return x+1; }\n' > "$tmp/bad.c"
if (cd "$tmp" && clang-format --dry-run -Werror bad.c) >/dev/null 2>&1; then
    echo "FAIL the check passes a file that is not formatted"; fails=$((fails + 1))
else
    echo "ok   the check catches a file that is not formatted"
fi
cd "$ROOT" || exit 1
if git rev-parse --git-dir >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
else
    mapfile -t files < <(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
bad=()
for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -eq 0 ]; then
    echo "ok   all ${#files[@]} C / CUDA files are formatted"
else
    echo "FAIL ${#bad[@]} files are not formatted (clang-format -i FILE fixes each):"
    printf '  %s\n' "${bad[@]}" | head -40
    fails=$((fails + 1))
fi
[ $fails -eq 0 ]
