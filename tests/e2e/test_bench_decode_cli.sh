#!/usr/bin/env bash
# test_bench_decode_cli.sh — specd-bench-decode on random weights of a
# config's shapes (--random-weights CONFIG.json, sd_model_random): it runs
# without a checkpoint, reports the same weight bytes per token as the
# checkpoint of that config, names its weights "random", prints the span
# table; a config that cannot be read gives a message and exit 1, an
# unknown --device exit 2, --graphs on the CPU exit 2; --batch-invariant says
# the CPU is; --context and --kv-dtype are reported (bf16 by default for the
# bf16 demo model), a bad --kv-dtype is exit 2.
set -euo pipefail
BIN=${SD_BIN:-build/bin}
MOD=${SD_MODELS:-models}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cp "$MOD/tinycode-16m/config.json" "$tmp/shapes.json" # a config alone, away from its checkpoint
"$BIN/specd-bench-decode" --random-weights "$tmp/shapes.json" --threads 1 --tokens 8 --runs 1 > "$tmp/r.txt" ||
  fail "random weights: exit $?"
"$BIN/specd-bench-decode" --model "$MOD/tinycode-16m" --threads 1 --tokens 8 --runs 1 > "$tmp/c.txt" ||
  fail "checkpoint: exit $?"
grep -q "random weights" "$tmp/r.txt" || fail "the weights are not named random: $(head -1 "$tmp/r.txt")"
wb() { sed -n 's/^weight bytes per token *//p' "$1"; }
[ -n "$(wb "$tmp/r.txt")" ] && [ "$(wb "$tmp/r.txt")" = "$(wb "$tmp/c.txt")" ] ||
  fail "weight bytes per token: random '$(wb "$tmp/r.txt")', checkpoint '$(wb "$tmp/c.txt")'"
grep -Eq '^ +6 +[0-9.]+ +[0-9.]+$' "$tmp/r.txt" || fail "no span table: $(cat "$tmp/r.txt")"

set +e
"$BIN/specd-bench-decode" --random-weights "$tmp/none.json" --tokens 8 --runs 1 > /dev/null 2> "$tmp/e.txt"
rc=$?
set -e
[ $rc -eq 1 ] || fail "missing config: exit $rc, want 1"
grep -q "none.json" "$tmp/e.txt" || fail "missing config: the message does not name the file: $(cat "$tmp/e.txt")"
set +e
"$BIN/specd-bench-decode" --device tpu > /dev/null 2> "$tmp/e.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "unknown device 'tpu'" "$tmp/e.txt" || fail "bad --device: exit $rc, $(cat "$tmp/e.txt")"
# --graphs and --fuse are CUDA's (exit 2 with a message elsewhere; both as ab at once is a usage error);
# --batch-invariant says what it got
for flag in "--graphs ab" "--fuse off"; do
  set +e
  # shellcheck disable=SC2086 # the flag and its value
  "$BIN/specd-bench-decode" --model "$MOD/tinycode-16m" $flag --tokens 8 --runs 1 > /dev/null 2> "$tmp/e.txt"
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q "graphs and --fuse apply to a CUDA device" "$tmp/e.txt" ||
    fail "$flag on the CPU: exit $rc, $(cat "$tmp/e.txt")"
done
set +e
"$BIN/specd-bench-decode" --graphs ab --fuse ab > /dev/null 2> "$tmp/e.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "^usage:" "$tmp/e.txt" || fail "--graphs ab --fuse ab: exit $rc, $(cat "$tmp/e.txt")"
"$BIN/specd-bench-decode" --model "$MOD/tinycode-16m" --batch-invariant --threads 1 --tokens 8 --runs 1 \
  > "$tmp/i.txt" || fail "--batch-invariant: exit $?"
grep -q "^batch-invariant *yes" "$tmp/i.txt" || fail "--batch-invariant: $(head -3 "$tmp/i.txt")"
grep -q "^context, KV cache *32 tokens .*, BF16" "$tmp/c.txt" || fail "default context / KV: $(cat "$tmp/c.txt")"
"$BIN/specd-bench-decode" --model "$MOD/tinycode-16m" --threads 1 --tokens 8 --runs 1 --context 600 --kv-dtype f32 \
  > "$tmp/k.txt" || fail "--context 600 --kv-dtype f32: exit $?"
grep -q "^context, KV cache *600 tokens .*, F32" "$tmp/k.txt" || fail "--context / --kv-dtype: $(cat "$tmp/k.txt")"
set +e
"$BIN/specd-bench-decode" --model "$MOD/tinycode-16m" --kv-dtype fp8 > /dev/null 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "--kv-dtype fp8: exit $rc, want 2"
echo "PASS test_bench_decode_cli"
