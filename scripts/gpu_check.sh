#!/usr/bin/env bash
# gpu_check.sh — the whole GPU check in one command (issue "GPU bring-up").
#
#   scripts/gpu_check.sh pack            # here, after a build with CUDA: binaries + the non-CUDA
#                                        # shared libraries they need into .devcarry/ (git-ignored)
#   scripts/gpu_check.sh run [OUTDIR]    # on the GPU machine, from the repository root
#
# `pack` copies the programs the check runs (build/bin, build/tests/test_cuda_backend) and
# every shared library they link that is neither glibc, the C++ runtime nor CUDA's (a GPU
# machine brings those; it may lack ZeroMQ, protobuf-c, jansson, Check ...) into
# .devcarry/{bin,lib}, and prints its size: the working tree plus it must stay under the
# device tool's 64 MiB. With the device tool: run `pack` here, then one call
#
#   run(command="scripts/gpu_check.sh run $OUT", carry=[".devcarry"])
#
# `run` (without a GPU it says so and exits 77, "skipped") writes to OUTDIR (default
# ${OUT:-/tmp/gpu-check}): gpu.txt (nvidia-smi), one log per step and summary.txt —
#   1. the GPU-labelled tests (test_cuda_backend: every kernel against the CPU backend);
#   2. specd-bench-decode on the GPU: the demo target, and Qwen3-8B's shapes with random
#      weights (bench/configs/qwen3-8b.json): decode tok/s, weight read bandwidth (compare
#      with the device's), span cost in decode steps;
#   3. exactness on the GPU: specd-generate greedy, plain against speculative (draft model on
#      the GPU too), over the demo prompts, with --batch-invariant (must be equal: a failed
#      step) and without (the fast default: prompts that differ, at near-ties, are counted);
#   4. the same specd-generate runs on the CPU (always batch-invariant) for comparison.
# A step that fails is recorded and the others still run; the exit status is the number of
# failed steps (0: all passed).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK=$ROOT/.devcarry
PROGS="specd-bench-decode specd-generate specd-bench-spec specd-verifier specd-drafter specd-router specd"

pack() {
  local b=$ROOT/build
  [ -x "$b/tests/test_cuda_backend" ] || { echo "gpu_check: build/tests/test_cuda_backend is missing (a build with CUDA and Check)" >&2; exit 1; }
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" || exit 1
  cp -p "$b/tests/test_cuda_backend" "$PACK/bin/" || exit 1
  for p in $PROGS; do cp -p "$b/bin/$p" "$PACK/bin/" || exit 1; done
  ldd "$PACK"/bin/* 2>/dev/null | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;  # glibc
      libgcc_s.so.*|libstdc++.so.*) ;;                                                      # the C++ runtime
      libcuda*|libcublas*|libnccl*|libnvrtc*) ;;                                            # CUDA's own
      *) cp -pL "$lib" "$PACK/lib/" ;;
    esac
  done
  echo "gpu_check: packed $(ls "$PACK/bin" | wc -l) programs, $(ls "$PACK/lib" | wc -l) libraries, $(du -sh "$PACK" | cut -f1) in $PACK"
}

FAILED=0
# step NAME CMD...: runs CMD with its output in OUTDIR/NAME.log, records pass/fail in the summary
# (with OPTIONAL=1 a failure is a NOTE, not counted).
step() {
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" > "$OUTDIR/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$OUTDIR/summary.txt"
  else
    local rc=$?
    echo "$([ -n "${OPTIONAL:-}" ] && echo NOTE || echo FAIL) $name (exit $rc, $((SECONDS - t0)) s): tail of $name.log:" |
      tee -a "$OUTDIR/summary.txt"
    tail -n 15 "$OUTDIR/$name.log" | sed 's/^/    /' | tee -a "$OUTDIR/summary.txt"
    [ -n "${OPTIONAL:-}" ] || FAILED=$((FAILED + 1))
  fi
}

# exactness DEVICE [ARGS...]: greedy plain vs speculative on the demo prompts (ARGS to both),
# every prompt equal.
exactness() {
  local dev=$1 n=0 same=0
  shift
  while IFS= read -r prompt; do
    n=$((n + 1))
    "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --device "$dev" --prompt "$prompt" --max-tokens 64 \
      --ignore-eos --json "$@" > "$OUTDIR/plain-$dev-$n.json" || return 1
    "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --draft "$ROOT/models/tinycode-3m" --device "$dev" \
      --prompt "$prompt" --max-tokens 64 --ignore-eos --json "$@" > "$OUTDIR/spec-$dev-$n.json" || return 1
    if python3 - "$OUTDIR/plain-$dev-$n.json" "$OUTDIR/spec-$dev-$n.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("prompt tokens/s plain %.1f speculative %.1f, accepted %s of %s drafts"
      % (a["tokens_per_second"], b["tokens_per_second"], b.get("accepted_tokens"), b.get("draft_tokens")))
sys.exit(0 if a["text"] == b["text"] else 1)
PY
    then same=$((same + 1)); else echo "prompt $n: speculative output differs from plain"; fi
  done < <(printf '%s\n' 'def fibonacci(n):' 'class Stack:' 'import os' 'def binary_search(a, x):' \
                         'def merge_sort(xs):' 'for i in range(10):')
  echo "$dev $*: $same of $n prompts equal"
  [ "$same" = "$n" ]
}

run() {
  OUTDIR=${1:-${OUT:-/tmp/gpu-check}}
  mkdir -p "$OUTDIR" || exit 1
  : > "$OUTDIR/summary.txt"
  if ! nvidia-smi > "$OUTDIR/gpu.txt" 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi failed): skipped" | tee -a "$OUTDIR/summary.txt"
    exit 77
  fi
  [ -d "$PACK/bin" ] && BIN=$PACK/bin || BIN=$ROOT/build/bin
  export LD_LIBRARY_PATH=$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export SD_FIXTURES=$ROOT/tests/fixtures SD_MODELS=$ROOT/models SD_BIN=$BIN CK_DEFAULT_TIMEOUT=600
  local tcb=$BIN/test_cuda_backend
  [ -x "$tcb" ] || tcb=$ROOT/build/tests/test_cuda_backend
  echo "gpu_check: $(head -n 12 "$OUTDIR/gpu.txt" | grep -m1 -E 'H100|H200|NVIDIA' | sed 's/  */ /g')" | tee -a "$OUTDIR/summary.txt"
  step gpu_tests "$tcb"
  step decode_demo "$BIN/specd-bench-decode" --device cuda:0 --model "$ROOT/models/tinycode-16m" --runs 3
  step decode_qwen3_8b "$BIN/specd-bench-decode" --device cuda:0 --random-weights "$ROOT/bench/configs/qwen3-8b.json" \
    --tokens 64 --runs 3
  step exact_gpu_invariant exactness cuda:0 --batch-invariant
  OPTIONAL=1 step exact_gpu_fast exactness cuda:0 # the fast default: differences counted, not failed
  step exact_cpu exactness cpu
  for f in decode_demo decode_qwen3_8b; do
    grep -E "decode tokens/s|weight read bandwidth|^ +(2|6|8|16) " "$OUTDIR/$f.log" | sed "s/^/    $f: /" >> "$OUTDIR/summary.txt"
  done
  grep -h "equal" "$OUTDIR"/exact_*.log | sed 's/^/    /' >> "$OUTDIR/summary.txt"
  echo "gpu_check: $FAILED step(s) failed; summary in $OUTDIR/summary.txt" | tee -a "$OUTDIR/summary.txt"
  exit "$FAILED"
}

case ${1:-} in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) sed -n 2,27p "$0" >&2; exit 2 ;;
esac
