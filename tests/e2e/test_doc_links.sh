#!/usr/bin/env bash
# test_doc_links.sh — every relative link of specd's Markdown resolves
# (tests/tools/check_links.py): to an existing file or folder, and every
# #anchor to a heading of its file by GitHub's slug rules. First the checker
# is shown to catch a missing file and a missing anchor on a small synthetic
# tree (and to leave code, external links and good anchors alone).
# Environment (set by CTest): SD_ROOT.
set -u
ROOT="${SD_ROOT:?SD_ROOT not set}"
CHECK="$ROOT/tests/tools/check_links.py"
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tree with good links of every kind (ok.md) and two broken ones (bad.md):
# a file that does not exist and an anchor that is no heading.
mkdir -p "$tmp/tree/sub"
cat > "$tmp/tree/ok.md" <<'EOF'
# Title

## A `code` heading — with, punctuation!

## Dup

## Dup

Links: [a](#a-code-heading--with-punctuation), [b](#dup-1), [c](sub/other.md#target), [d](sub/),
[e](https://example.com/missing.md), [f](mailto:someone@example.com), `[g](missing-in-code.md)`.

```sh
[h](missing-in-a-code-block.md)
```
EOF
printf '# Other\n\n## Target\n' > "$tmp/tree/sub/other.md"
printf '# Bad\n\nA [file](nope.md) and\nan [anchor](sub/other.md#nowhere).\n' > "$tmp/tree/bad.md"
out=$(python3 "$CHECK" "$tmp/tree" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q '^bad.md:3: nope.md — no such file or folder$' <<<"$out" &&
   grep -q '^bad.md:4: sub/other.md#nowhere — no heading #nowhere in sub/other.md$' <<<"$out" &&
   ! grep -q '^ok.md' <<<"$out"; then
    echo "ok   the checker catches a missing file and a missing anchor, and passes the good links"
else
    echo "FAIL the checker missed a broken link or flagged a good one (rc $rc):"; echo "$out"; fails=$((fails + 1))
fi
rm "$tmp/tree/bad.md"
out=$(python3 "$CHECK" "$tmp/tree" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
    echo "ok   a tree without broken links passes ($out)"
else
    echo "FAIL a tree without broken links (rc $rc):"; echo "$out"; fails=$((fails + 1))
fi

out=$(python3 "$CHECK" "$ROOT" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ]; then echo "ok   specd's Markdown links resolve"; else echo "FAIL broken links"; fails=$((fails + 1)); fi
[ $fails -eq 0 ]
