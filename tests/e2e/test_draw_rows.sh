#!/usr/bin/env bash
# test_draw_rows.sh — sampled rows drawn on the backend (the draw_rows op,
# which keeps a GPU's logits on the device) give the host sampler's tokens:
# specd-generate with SD_DRAW_ROWS=1 (the CPU backend's draw, the CUDA
# kernel's reference) against SD_DRAW_ROWS=0 (the host sampler), plain and
# speculative (rejection and match rules, the drafter and n-gram drafts),
# with min-p, penalties, logit_bias, min_tokens and allowed_token_ids (the
# device's edits of the logits), at two temperatures and seeds; the log
# shows which path ran. Rows with top-k, top-p or an output restriction stay
# on the host: checked too.
set -euo pipefail
set -f # the options below hold brackets, not globs
BIN=${SD_BIN:-build/bin}
MOD=${SD_MODELS:-models}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
MSG="sampled rows are drawn on the backend"

gen() { # env-value name args...
    local v=$1 name=$2
    shift 2
    SD_DRAW_ROWS=$v "$BIN/specd-generate" --model "$MOD/tinycode-16m" --max-tokens 96 --ignore-eos --json \
        --prompt "def merge_sort(items):" "$@" > "$tmp/$name.$v.json" 2> "$tmp/$name.$v.err" ||
        fail "$name (SD_DRAW_ROWS=$v): $(tail -2 "$tmp/$name.$v.err")"
}
tokens() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['tokens'])" "$1"; }

D="--draft $MOD/tinycode-3m"
n=0
for cfg in "plain|" "draft|$D" "match|$D --verify match" "ngram|--ngram" "minp|$D --min-p 0.1" \
    "rep|$D --repetition-penalty 1.3" "pf|$D --presence-penalty 0.8 --frequency-penalty 0.5" \
    "bias|$D --logit-bias 10=5,11=-3,12=100 --min-tokens 40" "allowed|$D --allowed-token-ids 10,11,12,40,41,300,301,302"; do
    name=${cfg%%|*}
    args=${cfg#*|}
    for ts in "0.8 11" "1.3 5"; do
        set -- $ts
        # shellcheck disable=SC2086
        gen 0 "$name-$1" --temperature "$1" --seed "$2" $args
        # shellcheck disable=SC2086
        gen 1 "$name-$1" --temperature "$1" --seed "$2" $args
        a=$(tokens "$tmp/$name-$1.0.json")
        b=$(tokens "$tmp/$name-$1.1.json")
        [ "$a" = "$b" ] || fail "$name T=$1: drawn on the backend differs from the host sampler"
        grep -q "$MSG" "$tmp/$name-$1.1.err" || fail "$name T=$1: SD_DRAW_ROWS=1 did not draw on the backend"
        ! grep -q "$MSG" "$tmp/$name-$1.0.err" || fail "$name T=$1: SD_DRAW_ROWS=0 drew on the backend"
        n=$((n + 1))
    done
done
echo "ok   - $n sampled runs: the backend's draws are the host sampler's tokens"

# settings the draw does not cover stay on the host, with the same tokens
for extra in "--top-p 0.9" "--top-k 20" "--regex [a-z_]+(=[0-9]+)*"; do
    # shellcheck disable=SC2086
    gen 1 host --temperature 0.8 --seed 3 $D $extra
    # shellcheck disable=SC2086
    gen 0 host --temperature 0.8 --seed 3 $D $extra
    ! grep -q "$MSG" "$tmp/host.1.err" || fail "$extra: drawn on the backend"
    [ "$(tokens "$tmp/host.0.json")" = "$(tokens "$tmp/host.1.json")" ] || fail "$extra: tokens differ"
done
echo "ok   - top-p, top-k and a regular expression stay on the host"

# greedy rows are argmax rows, never draws
gen 1 greedy $D
! grep -q "$MSG" "$tmp/greedy.1.err" || fail "greedy rows drawn"
echo "ok   - greedy rows are not drawn"
echo PASS
