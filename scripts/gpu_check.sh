#!/usr/bin/env bash
# gpu_check.sh — the whole GPU check in one command (issue "GPU bring-up").
#
#   scripts/gpu_check.sh pack            # here, after a build with CUDA
#   scripts/gpu_check.sh run [OUTDIR]    # on the GPU machine, from the repository root
#   scripts/gpu_check.sh shell 'CMD'     # there: CMD with the carried programs ($BIN) and libraries
#
# `pack` copies the programs the check runs (build/bin, build/tests/test_cuda_backend) and
# every shared library they link that is neither glibc, the C++ runtime nor CUDA's (a GPU
# machine brings those; it may lack ZeroMQ, protobuf-c, jansson, Check ...) into
# .devcarry/carry.txz (git-ignored; compressed, since the tracked tree with the demo models is
# ~48 MB and the device tool takes 64 MiB). With the device tool: `pack` here, then one call
#
#   run(command="scripts/gpu_check.sh run $OUT", carry=[".devcarry"])
#
# `run` (without a GPU it says so and exits 77, "skipped") writes OUTDIR (default
# ${OUT:-/tmp/gpu-check}): summary.txt and logs.tgz (every step's log, refreshed after each
# step, so a call stopped at its limit still returns what finished). Each step has its own
# time limit:
#   1. the GPU-labelled tests (test_cuda_backend: every kernel against the CPU backend, model
#      logits, batch invariance, graphs and fused matmuls against the eager ops);
#   2. exactness: specd-generate greedy, plain against speculative (draft model on the GPU
#      too), over the demo prompts, with --batch-invariant (must be equal: a failed step) and
#      without (the fast default: prompts that differ, at near-ties, are counted);
#   3. specd-bench-decode on the GPU: (decode) the demo target; (decode8b) Qwen3-8B's shapes
#      with random weights (bench/configs/qwen3-8b.json), CUDA graphs on and off
#      interleaved, the default mode's fusions on and off interleaved (--fuse ab), with
#      --batch-invariant (tensor cores): decode tok/s, weight read bandwidth against the
#      device's own (roofline), span cost in decode steps; (context) the 8B shapes after 1k-
#      and 8k-token contexts (prefill tokens/s too) and, optional, after 32k (one run).
#      SD_GPU_CHECK_EXTRA=1 adds what earlier sessions measured and set aside: the default
#      mode's passes of up to 8 rows on the GEMV kernel (SD_CUDA_GEMV=1), the 8k context
#      with the prefill rows' attention not tiled (SD_CUDA_ATTN_TILE=0) and with 128 blocks
#      a row in the split attention (SD_CUDA_ATTN_SPLITS=128);
#   3b. (sampler) specd-bench-sampler on the GPU: a sampled row of 151,936 tokens copied to
#      the host and drawn there against drawn on the device (draw_rows, 1 and 8 rows a call),
#      at T = 0.8 and at T = 3 (a flat row: the draw walks far), the tokens checked;
#   4. specd serve through specd-bench (C = 1, 4 and 16): plain, the drafter on the GPU, the
#      drafter on the CPU, the drafter on the GPU without lookup first (--spec-fallback missing),
#      the draft model inside the verifier on the GPU (--draft-in-verifier);
#   5. a per-kernel profile of a decode step (scripts/gpu_profile.sh, Nsight Compute);
#   6. (pair) an 8B/0.6B-shaped pair — Qwen3-8B and Qwen3-0.6B shapes, random weights
#      (--random-weights), the Qwen3 tokenizer — through specd serve at C = 1, 4, 16: plain,
#      the drafter on the same GPU and inside the verifier (the memory split and adaptive speculation where
#      drafts are worthless: random models agree on nothing);
#   7. (hf) Hugging Face transformers on the same GPU (scripts/hf_decode.py): greedy decode of
#      the demo target (batch 1, 16; assisted generation with the demo drafter) and of
#      Qwen3-8B's shapes, beside specd's figures of steps 3 and 6.
#   8. (tp) tensor parallelism: the demo target at TP 2 with both ranks on this GPU (greedy and
#      --batch-invariant against TP 1), and with two GPUs the 8B shapes at TP 1 and TP 2 (NCCL).
# SD_GPU_CHECK_STEPS="NAME ..." runs only the steps named (gpu_tests exact decode sampler serve
# decode8b context profile pair hf tp; default all), e.g. 'gpu_tests exact decode serve
# decode8b' in a first call and 'context pair profile hf' in a second. SD_GPU_CHECK_DEVICE=cpu
# rehearses steps 2-4 and 6 (with the demo models' shapes) on the CPU (no GPU needed). A step
# that fails is recorded and the others still run; the exit status is the number of failed
# steps.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK=$ROOT/.devcarry
PROGS="specd-bench specd-bench-decode specd-generate specd-bench-spec specd-verifier specd-drafter specd-router specd"

pack() {
  local b=$ROOT/build
  if [ ! -x "$b/tests/test_cuda_backend" ]; then
    echo "gpu_check: build/tests/test_cuda_backend is missing (a build with CUDA and Check)" >&2
    exit 1
  fi
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" || exit 1
  trap 'rm -rf "$PACK/bin" "$PACK/lib"' EXIT
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
  # compressed: the tracked tree (the demo models, ~48 MB) plus this must stay under 64 MiB
  tar -C "$PACK" -cJf "$PACK/carry.txz" bin lib || exit 1
  echo "gpu_check: packed $(ls "$PACK/bin" | wc -l) programs, $(ls "$PACK/lib" | wc -l) libraries:" \
    "$(du -h "$PACK/carry.txz" | cut -f1) in $PACK/carry.txz"
}

FAILED=0
# step NAME SECONDS CMD...: runs CMD (killed after SECONDS) with its output in WORK/NAME.log,
# records pass/fail in the summary (with OPTIONAL=1 a failure is a NOTE, not counted), then
# refreshes OUTDIR/logs.tgz, so that a run stopped at the device tool's limit still returns
# every finished step.
step() {
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS rc=0
  # through bash -c, so that CMD may be a function of this script (exported in run)
  timeout -k 5 "$secs" bash -c '"$@"' "$name" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$SUMMARY"
  else
    local why="exit $rc"
    [ "$rc" = 124 ] && why="timed out after $secs s"
    echo "$([ -n "${OPTIONAL:-}" ] && echo NOTE || echo FAIL) $name ($why, $((SECONDS - t0)) s): tail of $name.log:" |
      tee -a "$SUMMARY"
    tail -n 25 "$WORK/$name.log" | cut -c1-300 | sed 's/^/    /' | tee -a "$SUMMARY"
    [ -n "${OPTIONAL:-}" ] || FAILED=$((FAILED + 1))
  fi
  cp "$SUMMARY" "$WORK/summary.txt"
  tar -czf "$OUTDIR/logs.tgz" -C "$WORK" . 2>/dev/null
}

# exactness DEVICE [ARGS...]: greedy plain vs speculative on the demo prompts (ARGS to both),
# every prompt equal.
# tp_one_gpu: specd-generate on the demo target at TP 2, both ranks on cuda:0, against TP 1 on the
# same GPU — greedy (the fast default: differences at near-ties counted) and --batch-invariant
# (chunked sums: must be equal).
tp_one_gpu() {
  local p i=0 diff=0
  for p in "def fib(n):" "import numpy as np" "class Stack:"; do
    for mode in "" --batch-invariant; do
      "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --prompt "$p" --max-tokens 128 --ignore-eos --json \
        --device cuda:0 $mode >"$WORK/tp1.$i.json" || return 1
      "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --prompt "$p" --max-tokens 128 --ignore-eos --json \
        --device cuda:0,cuda:0 -tp 2 $mode >"$WORK/tp2.$i.json" || return 1
      if ! cmp -s <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'])" "$WORK/tp1.$i.json") \
                  <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'])" "$WORK/tp2.$i.json"); then
        echo "differs: '$p' ${mode:-default}"
        [ -n "$mode" ] && return 1
        diff=$((diff + 1))
      fi
      i=$((i + 1))
    done
  done
  echo "tp_one_gpu: TP 2 (both ranks on cuda:0) == TP 1 with --batch-invariant; $diff of 3 prompts differ without"
}

exactness() {
  local dev=$1 n=0 same=0 tag
  shift
  tag=$(echo "$dev$*" | tr -c 'a-zA-Z0-9\n' '_')
  while IFS= read -r prompt; do
    n=$((n + 1))
    "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --device "$dev" --prompt "$prompt" --max-tokens 64 \
      --ignore-eos --json "$@" > "$WORK/plain-$tag-$n.json" || return 1
    "$BIN/specd-generate" --model "$ROOT/models/tinycode-16m" --draft "$ROOT/models/tinycode-3m" --device "$dev" \
      --prompt "$prompt" --max-tokens 64 --ignore-eos --json "$@" > "$WORK/spec-$tag-$n.json" || return 1
    if python3 -c 'import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("prompt tokens/s plain %.1f speculative %.1f, accepted %s of %s drafts"
      % (a["tokens_per_second"], b["tokens_per_second"], b.get("accepted_tokens"), b.get("draft_tokens")))
sys.exit(0 if a["text"] == b["text"] else 1)' "$WORK/plain-$tag-$n.json" "$WORK/spec-$tag-$n.json"
    then same=$((same + 1)); else echo "prompt $n: speculative output differs from plain"; fi
  done < <(printf '%s\n' 'def fibonacci(n):' 'class Stack:' 'import os' 'def binary_search(a, x):' \
                         'def merge_sort(xs):' 'for i in range(10):')
  echo "$dev $*: $same of $n prompts equal"
  [ "$same" = "$n" ]
}

# serve_bench DEVICE: specd serve with the verifier on DEVICE through specd-bench, one round
# each, C = 1, 4 and 16 (scripts/bench_ab.sh): plain, speculative with the drafter on DEVICE too,
# speculative with the drafter on the CPU, the first again without lookup first (a serial
# protocol's steps verifying the verifier's own n-gram drafts instead of asking the drafter), and
# the draft model inside the verifier on DEVICE (--draft-in-verifier: no drafter process).
serve_bench() {
  local dev=$1 c
  for c in 1 4 16; do
    echo "== C = $c"
    SD_BENCH_BIN=$BIN SD_BENCH_OUT=$WORK/serve-c$c "$ROOT/scripts/bench_ab.sh" 1 "$c" 0 16 \
      "--device $dev --no-spec" "--device $dev --draft-device $dev --draft $ROOT/models/tinycode-3m" \
      "--device $dev --draft-device cpu --draft $ROOT/models/tinycode-3m" \
      "--device $dev --draft-device $dev --draft $ROOT/models/tinycode-3m --spec-fallback missing" \
      "--device $dev --draft $ROOT/models/tinycode-3m --draft-in-verifier" || return 1
  done
}

# pair_dirs DIR TARGET_CONFIG DRAFT_CONFIG TOKENIZER: DIR/target and DIR/draft holding a
# config.json and tokenizer.json each (TOKENIZER may be .xz), for --random-weights.
pair_dirs() {
  local d=$1 tok=$4 w
  for w in target draft; do mkdir -p "$d/$w" || return 1; done
  cp "$2" "$d/target/config.json" && cp "$3" "$d/draft/config.json" || return 1
  python3 -c 'import lzma, sys
p = sys.argv[1]
data = lzma.open(p).read() if p.endswith(".xz") else open(p, "rb").read()
for o in sys.argv[2:]: open(o, "wb").write(data)' "$tok" "$d/target/tokenizer.json" "$d/draft/tokenizer.json"
}

# serve_pair DEVICE: the 8B/0.6B-shaped pair with random weights through specd serve
# (scripts/bench_ab.sh, one round each), C = 1, 4, 16: plain, the drafter on the same
# device, and the draft model inside the verifier. On the CPU (a rehearsal) the demo models'
# shapes stand in.
serve_pair() {
  local dev=$1 c n
  if [ "$dev" = cpu ]; then
    pair_dirs "$WORK/pair" "$ROOT/models/tinycode-16m/config.json" "$ROOT/models/tinycode-3m/config.json" \
      "$ROOT/models/tinycode-16m/tokenizer.json" || return 1
  else
    pair_dirs "$WORK/pair" "$ROOT/bench/configs/qwen3-8b.json" "$ROOT/bench/configs/qwen3-0.6b.json" \
      "$ROOT/tests/fixtures/tokenizers/qwen3/tokenizer.json.xz" || return 1
  fi
  for c in 1 4 16; do
    n=$((c * 4))
    [ "$n" -lt 8 ] && n=8
    echo "== C = $c"
    SD_BENCH_TARGET=$WORK/pair/target SD_BENCH_ARGS=--random-weights SD_BENCH_BIN=$BIN SD_BENCH_OUT=$WORK/pair-c$c \
      "$ROOT/scripts/bench_ab.sh" 1 "$c" 0 "$n" "--device $dev --no-spec" \
      "--device $dev --draft-device $dev --draft $WORK/pair/draft" \
      "--device $dev --draft $WORK/pair/draft --draft-in-verifier" || return 1
  done
}

# hf_side DEVICE: transformers on the demo pair and on Qwen3-8B's shapes (scripts/hf_decode.py).
hf_side() {
  local dev=${1/cuda:*/cuda}
  python3 "$ROOT/scripts/hf_decode.py" --device "$dev" --model "$ROOT/models/tinycode-16m" \
    --draft "$ROOT/models/tinycode-3m" --batch 1 16 || return
  [ "$dev" = cpu ] || python3 "$ROOT/scripts/hf_decode.py" --device "$dev" \
    --config "$ROOT/bench/configs/qwen3-8b.json" --batch 1 16 --tokens 64
}

# want NAME: true when SD_GPU_CHECK_STEPS is unset or names NAME.
want() { [ -z "${SD_GPU_CHECK_STEPS:-}" ] || [[ " $SD_GPU_CHECK_STEPS " == *" $1 "* ]]; }

# A curl stand-in (python3) for a machine without curl: the benchmark scripts' two uses.
curl_shim() {
  mkdir -p "$1"
  cat > "$1/curl" <<'PY'
#!/usr/bin/env python3
import sys, urllib.request, urllib.error
a = sys.argv[1:]; url = [x for x in a if x.startswith("http")][-1]
out = a[a.index("-o") + 1] if "-o" in a else None
try:
    r = urllib.request.urlopen(url, timeout=5); code, body = r.status, r.read()
except urllib.error.HTTPError as e:
    code, body = e.code, e.read()
except Exception:
    code, body = 0, b""
if out != "/dev/null": sys.stdout.buffer.write(body)
if "-w" in a: sys.stdout.write(str(code))
PY
  chmod +x "$1/curl"
  PATH=$1:$PATH
}

# run [OUTDIR]: the check on a GPU. SD_GPU_CHECK_DEVICE=cpu rehearses the steps that need no
# GPU on the CPU (no GPU test, no 8B model), to try this script without a device.
# setup: the carried programs unpacked, BIN and LD_LIBRARY_PATH set (CUDA's libraries found).
# A CPU rehearsal takes the programs of this build (SD_BIN, default build/bin).
setup() {
  if [ "${SD_GPU_CHECK_DEVICE:-}" = cpu ]; then
    BIN=${SD_BIN:-$ROOT/build/bin}
  else
    [ -f "$PACK/carry.txz" ] && [ ! -d "$PACK/bin" ] && tar -C "$PACK" -xJf "$PACK/carry.txz"
    [ -d "$PACK/bin" ] && BIN=$PACK/bin || BIN=$ROOT/build/bin
  fi
  local d libs=$PACK/lib
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && libs=$libs:$d
  done
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd "$BIN/specd-generate" | grep -q "not found"; then # CUDA's libraries elsewhere (the Python wheels)
    for d in $(find / -xdev -name 'libcublas.so.*' -printf '%h\n' 2>/dev/null | sort -u); do
      LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
    done
  fi
  curl --version > /dev/null 2>&1 || curl_shim "$PACK/shim" # none, or one the carried libraries break
  export BIN ROOT PATH
}

run() {
  OUTDIR=${1:-${OUT:-/tmp/gpu-check}}
  mkdir -p "$OUTDIR" || exit 1
  WORK=$(mktemp -d) || exit 1
  SUMMARY=$OUTDIR/summary.txt
  : > "$SUMMARY"
  local dev=${SD_GPU_CHECK_DEVICE:-cuda:0}
  if [ "$dev" != cpu ] && ! nvidia-smi > "$WORK/gpu.txt" 2>&1; then
    echo "gpu_check: no GPU here (nvidia-smi failed): skipped" | tee -a "$SUMMARY"
    exit 77
  fi
  setup
  { echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldd "$BIN/specd-generate"; nproc; free -g; } > "$WORK/env.txt" 2>&1
  export -f exactness serve_bench serve_pair pair_dirs hf_side
  export WORK
  export SD_FIXTURES=$ROOT/tests/fixtures SD_MODELS=$ROOT/models SD_BIN=$BIN
  export CK_DEFAULT_TIMEOUT=600
  local tcb=$BIN/test_cuda_backend
  [ -x "$tcb" ] || tcb=$ROOT/build/tests/test_cuda_backend
  local gpu=$dev
  [ "$dev" = cpu ] || gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
  echo "gpu_check: $gpu, git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" | tee -a "$SUMMARY"
  [ "$dev" != cpu ] && want gpu_tests && step gpu_tests 200 "$tcb"
  if want exact; then
    step exact_invariant 120 exactness "$dev" --batch-invariant
    OPTIONAL=1 step exact_fast 90 exactness "$dev" # the fast default: differences counted, not failed
  fi
  local ab=(--graphs ab)
  [ "$dev" = cpu ] && ab=()
  if want decode; then
    step decode_demo 90 "$BIN/specd-bench-decode" --device "$dev" --model "$ROOT/models/tinycode-16m" --runs 3 \
      "${ab[@]}"
    step decode_demo_inv 90 "$BIN/specd-bench-decode" --device "$dev" --model "$ROOT/models/tinycode-16m" \
      --runs 3 --batch-invariant
  fi
  if want sampler; then # on the CPU (a rehearsal) a smaller vocabulary: the CPU's draw_rows is the reference
    local sv=()
    [ "$dev" = cpu ] && sv=(--vocab 32000)
    step sampler_device 90 "$BIN/specd-bench-sampler" --device "$dev" --draws 100 --rounds 5 "${sv[@]}"
    if [ "$dev" != cpu ]; then
      step sampler_device_flat 90 "$BIN/specd-bench-sampler" --device "$dev" --draws 20 --rounds 3 --temperature 3
    fi
  fi
  want serve && step serve_demo 260 serve_bench "$dev"
  local q8=(--random-weights "$ROOT/bench/configs/qwen3-8b.json" --tokens 64 --runs 2)
  if [ "$dev" != cpu ] && want decode8b; then
    step decode_qwen3_8b 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" "${ab[@]}"
    step decode_qwen3_8b_fuse 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" --fuse ab
    step decode_qwen3_8b_inv 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" --batch-invariant
    # the default mode's decode and verify passes on the GEMV kernel instead of cuBLAS
    [ -n "${SD_GPU_CHECK_EXTRA:-}" ] && OPTIONAL=1 step decode_qwen3_8b_gemv 180 env SD_CUDA_GEMV=1 \
      "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}"
  fi
  if [ "$dev" != cpu ] && want context; then
    step decode_qwen3_8b_ctx1k 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" --context 1024
    step decode_qwen3_8b_ctx 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" --context 8192
    if [ -n "${SD_GPU_CHECK_EXTRA:-}" ]; then
      step decode_qwen3_8b_ctx_untiled 180 env SD_CUDA_ATTN_TILE=0 "$BIN/specd-bench-decode" --device "$dev" \
        "${q8[@]}" --context 8192
      OPTIONAL=1 step decode_qwen3_8b_ctx_s128 180 env SD_CUDA_ATTN_SPLITS=128 "$BIN/specd-bench-decode" \
        --device "$dev" "${q8[@]}" --context 8192
    fi
    OPTIONAL=1 step decode_qwen3_8b_ctx32k 180 "$BIN/specd-bench-decode" --device "$dev" "${q8[@]}" --context 32768 \
      --runs 1
  fi
  if [ "$dev" != cpu ] && want tp; then
    # tensor parallelism: two ranks on this one GPU (host exchanges: NCCL takes one rank a device), the demo
    # target, greedy against TP 1 (the GPU tests compare the logits); and where there are two GPUs, the 8B
    # shapes at TP 1 and 2 over NCCL
    step tp_one_gpu 120 tp_one_gpu
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
      step decode_qwen3_8b_tp1 180 "$BIN/specd-bench-decode" --device cuda:0 "${q8[@]}"
      step decode_qwen3_8b_tp2 180 "$BIN/specd-bench-decode" --device cuda:0,cuda:1 --tensor-parallel-size 2 "${q8[@]}"
    fi
  fi
  [ "$dev" != cpu ] && want profile && OPTIONAL=1 step profile 120 "$ROOT/scripts/gpu_profile.sh" "" "$WORK/profile"
  want pair && step serve_pair 360 serve_pair "$dev"
  want hf && OPTIONAL=1 step hf 300 hf_side "$dev"
  {
    for f in decode_demo decode_demo_inv decode_qwen3_8b decode_qwen3_8b_fuse decode_qwen3_8b_inv decode_qwen3_8b_gemv \
      decode_qwen3_8b_ctx1k decode_qwen3_8b_ctx decode_qwen3_8b_ctx_untiled \
      decode_qwen3_8b_ctx_s128 decode_qwen3_8b_ctx32k; do
      [ -f "$WORK/$f.log" ] &&
        grep -E "tokens/s|bandwidth|roofline|^ +(1|2|4|6|8|16) " "$WORK/$f.log" | sed "s/^/    $f: /"
    done
    grep -h "equal" "$WORK"/exact_*.log | sed 's/^/    /'
    grep -hE "^== C|^c[0-9] \[" "$WORK/serve_demo.log" 2>/dev/null | cut -c1-160 | sed 's/^/    serve: /'
    grep -hE "^== C|^c[0-9] \[" "$WORK/serve_pair.log" 2>/dev/null | cut -c1-160 | sed 's/^/    pair: /'
    grep -h "^hf " "$WORK/hf.log" 2>/dev/null | sed 's/^/    /'
    echo "gpu_check: $FAILED step(s) failed; logs of every step in $OUTDIR/logs.tgz"
  } | tee -a "$SUMMARY"
  cp "$SUMMARY" "$WORK/summary.txt"
  tar -czf "$OUTDIR/logs.tgz" -C "$WORK" . 2>/dev/null
  exit "$FAILED"
}

case ${1:-} in
  pack) pack ;;
  shell) shift; setup; bash -c "$*" ;; # any command with the carried programs ($BIN) and libraries
  run) shift; run "$@" ;;
  *) sed -n "2,/^set -u/p" "$0" | grep "^#" >&2; exit 2 ;;
esac
