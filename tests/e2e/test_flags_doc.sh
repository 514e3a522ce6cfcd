#!/usr/bin/env bash
# test_flags_doc.sh — docs/FLAGS.md is what the programs' --help print
# (scripts/gen_flags_doc.sh), and each --help lists every flag the program
# accepts: each long option named in its help is accepted (a run with it is
# not "unrecognized"), and an option that is not listed is refused.
# Environment (set by CTest): SD_ROOT, SD_BIN.
set -u
ROOT="${SD_ROOT:?SD_ROOT not set}"
BIN="${SD_BIN:?SD_BIN not set}"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if bash "$ROOT/scripts/gen_flags_doc.sh" "$BIN" > "$tmp/FLAGS.md" && diff -u "$ROOT/docs/FLAGS.md" "$tmp/FLAGS.md" > "$tmp/diff"; then
    echo "ok   docs/FLAGS.md equals the programs' --help"
else
    echo "FAIL docs/FLAGS.md differs from the programs' --help (regenerate: scripts/gen_flags_doc.sh > docs/FLAGS.md):"
    head -40 "$tmp/diff"
    fails=$((fails + 1))
fi

# Every flag the help lists is one getopt knows: getopt_long reports an
# unknown option as "unrecognized option"; a known one fails later, if at all,
# for another reason. Each program is run with the flag (and a value where it
# takes one) and a deliberately bad extra argument, so nothing starts.
check_prog() {
    local name="$1"; shift
    local help n=0 bad=0
    help=$("$@" --help 2>&1)
    while read -r flag arg; do
        [ "$flag" = "--help" ] && continue
        n=$((n + 1))
        if [ -n "$arg" ]; then out=$(timeout 10 "$@" "$flag" x --no-such-flag-here 2>&1 </dev/null)
        else out=$(timeout 10 "$@" "$flag" --no-such-flag-here 2>&1 </dev/null); fi
        if grep -q "unrecognized option '$flag" <<<"$out"; then
            echo "FAIL $name: --help lists $flag but it is not accepted"; bad=$((bad + 1))
        fi
    done < <(grep -oE '^  --[a-z0-9-]+( [^ ]+)?' <<<"$help" | sed 's/^  //')
    out=$(timeout 10 "$@" --no-such-flag-here 2>&1 </dev/null)
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "--help lists every flag" <<<"$out"; then
        echo "FAIL $name: an unknown flag gave exit $rc: $out"; bad=$((bad + 1))
    fi
    if [ $bad -eq 0 ] && [ $n -gt 5 ]; then echo "ok   $name: the $n flags of its --help are accepted, an unknown one refused"
    else fails=$((fails + 1)); fi
}
check_prog "specd serve" "$BIN/specd" serve
check_prog "specd-router" "$BIN/specd-router"
check_prog "specd-verifier" "$BIN/specd-verifier"
check_prog "specd-drafter" "$BIN/specd-drafter"
check_prog "specd-generate" "$BIN/specd-generate"
[ $fails -eq 0 ]
