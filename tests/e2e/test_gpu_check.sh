#!/usr/bin/env bash
# test_gpu_check.sh — the one-command GPU check (scripts/gpu_check.sh) stays runnable between GPU
# sessions: without a GPU `run` says so and exits 77; rehearsed on the CPU (SD_GPU_CHECK_DEVICE=cpu)
# every step passes — greedy speculative == plain on the demo prompts both ways, the decode
# benchmarks, specd serve plain / speculative through specd-bench, the random-weights pair through
# specd serve (the demo models' shapes standing in for 8B / 0.6B) — the transformers side-by-side
# passes or is noted (no PyTorch here), OUTDIR holds summary.txt and logs.tgz with every step's
# log; SD_GPU_CHECK_STEPS runs only the steps it names; the usage names each command.
set -euo pipefail
ROOT=${SD_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

if ! nvidia-smi > /dev/null 2>&1; then
  set +e
  "$ROOT/scripts/gpu_check.sh" run "$tmp/nogpu" > "$tmp/nogpu.txt" 2>&1
  rc=$?
  set -e
  [ $rc -eq 77 ] || fail "run without a GPU: exit $rc, want 77: $(cat "$tmp/nogpu.txt")"
  grep -q "no GPU here" "$tmp/nogpu/summary.txt" || fail "no-GPU summary: $(cat "$tmp/nogpu/summary.txt")"
fi

SD_GPU_CHECK_DEVICE=cpu "$ROOT/scripts/gpu_check.sh" run "$tmp/out" > "$tmp/run.txt" 2>&1 ||
  fail "CPU rehearsal: exit $?: $(cat "$tmp/run.txt")"
S=$tmp/out/summary.txt
for s in exact_invariant exact_fast decode_demo decode_demo_inv serve_demo serve_pair; do
  grep -q "^PASS $s " "$S" || fail "step $s did not pass: $(cat "$S")"
done
grep -q "cpu --batch-invariant: 6 of 6 prompts equal" "$S" || fail "exactness line missing: $(cat "$S")"
grep -q "0 step(s) failed" "$S" || fail "summary: $(cat "$S")"
grep -Eq "serve: c1 .*tok/s [0-9]+" "$S" || fail "no speculative serve figure: $(cat "$S")"
grep -Eq "pair: c1 .*tok/s [0-9]+" "$S" || fail "no figure of the random-weights pair: $(cat "$S")"
grep -Eq "^(PASS|NOTE) hf " "$S" || fail "no transformers step: $(cat "$S")"
tar -tzf "$tmp/out/logs.tgz" > "$tmp/list.txt" || fail "logs.tgz unreadable"
for f in summary.txt exact_invariant.log decode_demo.log serve_demo.log env.txt; do
  grep -q "/$f\$" "$tmp/list.txt" || fail "logs.tgz lacks $f"
done
[ "$(find "$tmp/out" -type f | wc -l)" -le 8 ] || fail "more than 8 files in OUTDIR (the device tool returns 8)"

SD_GPU_CHECK_STEPS="decode" SD_GPU_CHECK_DEVICE=cpu "$ROOT/scripts/gpu_check.sh" run "$tmp/some" > /dev/null 2>&1 ||
  fail "SD_GPU_CHECK_STEPS=decode: exit $?"
[ "$(grep -cE "^(PASS|FAIL|NOTE) " "$tmp/some/summary.txt")" = 2 ] && grep -q "^PASS decode_demo " "$tmp/some/summary.txt" ||
  fail "SD_GPU_CHECK_STEPS=decode ran other steps: $(cat "$tmp/some/summary.txt")"

set +e
"$ROOT/scripts/gpu_check.sh" > /dev/null 2> "$tmp/usage.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "gpu_check.sh shell" "$tmp/usage.txt" || fail "usage: exit $rc, $(cat "$tmp/usage.txt")"
echo "PASS test_gpu_check"
