#!/usr/bin/env bash
# test_generate_cli.sh — the specd-generate interface: --dump-logits writes
# the reference layout (float32 LE [n_tokens, vocab]) and matches the
# transformers logits; --json prints exactly one JSON object on one line with
# the documented fields and reproduces the reference greedy output; bad input
# gives a message and a non-zero exit; --quant int8 stays close to bf16 and
# speculation over it stays exact; --batch-invariant is accepted, speculation
# with it exact.
set -euo pipefail
BIN=${SD_BIN:-build/bin}
FIX=${SD_FIXTURES:-tests/fixtures}
MOD=${SD_MODELS:-models}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

ref=$FIX/models/qwen3-tiny
ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$ref/reference.json'))['input_ids'])))")
"$BIN/specd-generate" --model "$ref" --prompt-ids "$ids" --dump-logits "$tmp/l.f32"
python3 - "$tmp/l.f32" "$ref/ref_logits.f32" <<'PY' || fail "dumped logits differ from the reference"
import struct, sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
assert len(a) == len(b), (len(a), len(b))
n = len(a) // 4
x = struct.unpack('<%df' % n, a); y = struct.unpack('<%df' % n, b)
d = max(abs(p - q) for p, q in zip(x, y))
print("dump-logits max |diff| = %.3g" % d)
assert d <= 1e-4
PY

gp=$(python3 -c "import json;print(','.join(map(str,json.load(open('$ref/reference.json'))['greedy_prompt'])))")
go=$(python3 -c "import json;print(json.load(open('$ref/reference.json'))['greedy_output'])")
"$BIN/specd-generate" --model "$ref" --prompt-ids "$gp" --max-tokens 40 --ignore-eos --json > "$tmp/out.json"
[ "$(wc -l < "$tmp/out.json")" -eq 1 ] || fail "--json output is not one line"
python3 - "$tmp/out.json" "$go" <<'PY' || fail "--json object wrong"
import json, sys
o = json.loads(open(sys.argv[1]).read())
for k in ("prompt_tokens", "tokens", "text", "finish_reason", "tokens_per_second"):
    assert k in o, k
assert o["tokens"] == json.loads(sys.argv[2]), "greedy output differs from the reference"
assert o["finish_reason"] == "length"
PY

# speculative with a draft model: same text as plain, and the stats fields
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "def f(x):" --max-tokens 48 --json > "$tmp/plain.json"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --draft "$MOD/tinycode-3m" --prompt "def f(x):" --max-tokens 48 \
    --num-draft 6 --json > "$tmp/spec.json"
python3 - "$tmp/plain.json" "$tmp/spec.json" <<'PY' || fail "speculative JSON"
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert a["tokens"] == b["tokens"]
for k in ("steps", "draft_tokens", "accepted_tokens", "mean_accepted_per_step"):
    assert k in b, k
assert b["accepted_tokens"] > 0
PY

# the drafter options change the drafts, never the output
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --draft "$MOD/tinycode-3m" --prompt "def f(x):" --max-tokens 48 \
    --draft-quant none --draft-p-min 0 --num-draft 4 --json > "$tmp/spec2.json"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --draft "$MOD/tinycode-3m" --prompt "def f(x):" --max-tokens 48 \
    --draft-quant int8 --draft-p-min 0.9 --num-draft 6 --json > "$tmp/spec3.json"
python3 - "$tmp/plain.json" "$tmp/spec2.json" "$tmp/spec3.json" <<'PY' || fail "drafter options changed the output"
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
assert a["tokens"] == b["tokens"] == c["tokens"]
assert 4 * (b["steps"] - 3) <= b["draft_tokens"] <= 4 * b["steps"], (b["draft_tokens"], b["steps"])
assert c["draft_tokens"] < 6 * c["steps"], "p_min 0.9 never stopped drafting"
PY

# --num-draft auto: the adaptive choice every step (how many it takes depends on the costs
# measured), the same output; the draft model and the n-gram lookup, at most --spec-max-draft a step
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --draft "$MOD/tinycode-3m" --num-draft auto --prompt "def f(x):" \
    --max-tokens 48 --json > "$tmp/auto.json"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --ngram --num-draft auto --spec-max-draft 3 --prompt "def f(x):" \
    --max-tokens 48 --json > "$tmp/auto_ng.json"
python3 - "$tmp/plain.json" "$tmp/auto.json" "$tmp/auto_ng.json" <<'PY' || fail "--num-draft auto changed the output"
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
assert a["tokens"] == b["tokens"] == c["tokens"]
assert c["draft_tokens"] <= 3 * c["steps"], (c["draft_tokens"], c["steps"])
PY
if "$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt x --num-draft lots 2> "$tmp/nd.err"; then
  fail "--num-draft lots accepted"
fi
grep -q "num-draft" "$tmp/nd.err" || fail "--num-draft lots: no message naming the flag ($(cat "$tmp/nd.err"))"

# --quant int8 (the target's weights): its logits differ from bf16 by little
# (KL < 0.02 nats a position), and greedy speculation over the quantised
# target equals its own plain decoding bit for bit (batch-invariant int8 GEMM)
P='def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:'
P=$(printf '%b' "$P")
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$P" --dump-logits "$tmp/lb.f32"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$P" --quant int8 --dump-logits "$tmp/lq.f32"
python3 - "$tmp/lb.f32" "$tmp/lq.f32" <<'PY' || fail "--quant int8 logits"
import math, struct, sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
assert len(a) == len(b) and a != b, "int8 logits identical to bf16: not quantised"
V = 8192
x = struct.unpack('<%df' % (len(a) // 4), a); y = struct.unpack('<%df' % (len(b) // 4), b)
worst = 0.0
for r in range(len(x) // V):
    p, q = x[r * V:(r + 1) * V], y[r * V:(r + 1) * V]
    mp, mq = max(p), max(q)
    lp = math.log(sum(math.exp(v - mp) for v in p)); lq = math.log(sum(math.exp(v - mq) for v in q))
    kl = sum(math.exp(u - mp - lp) * ((u - mp - lp) - (v - mq - lq)) for u, v in zip(p, q))
    worst = max(worst, kl)
print("int8 vs bf16: worst KL over %d positions = %.4f" % (len(x) // V, worst))
assert worst < 0.02, worst
PY
for prompt in "$P" "import os" "class Stack:"; do
  "$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$prompt" --max-tokens 96 --ignore-eos --quant int8 --json >"$tmp/q8p.json"
  "$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$prompt" --max-tokens 96 --ignore-eos --quant int8 \
      --draft "$MOD/tinycode-3m" --json >"$tmp/q8s.json"
  python3 - "$tmp/q8p.json" "$tmp/q8s.json" <<'PY' || fail "--quant int8: speculative differs from plain ($prompt)"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 96, (a["tokens"], b["tokens"])
assert b["accepted_tokens"] > 0
PY
done

# --batch-invariant (the CPU backend always is batch-invariant; the flag selects a GPU's deterministic matmuls and,
# everywhere, the o and down sums in fixed chunks):
# accepted, and speculative == plain with it
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$P" --max-tokens 64 --ignore-eos --batch-invariant \
    --json >"$tmp/bip.json"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --prompt "$P" --max-tokens 64 --ignore-eos --batch-invariant \
    --draft "$MOD/tinycode-3m" --json >"$tmp/bis.json"
python3 - "$tmp/bip.json" "$tmp/bis.json" <<'PY' || fail "--batch-invariant: speculative differs from plain"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 64 and b["accepted_tokens"] > 0
PY

# errors: clear message, non-zero exit, no crash
set +e
"$BIN/specd-generate" --model "$ref" --prompt-ids 1,2 --quant int4 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q -- "--quant" "$tmp/err" || fail "bad --quant: rc=$rc"
"$BIN/specd-generate" --model "$tmp/nope" --prompt-ids 1,2 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "config.json" "$tmp/err" || fail "missing model: rc=$rc $(cat "$tmp/err")"
"$BIN/specd-generate" --model "$ref" --prompt-ids 1,x 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "prompt-ids" "$tmp/err" || fail "bad ids: rc=$rc"
"$BIN/specd-generate" --model "$ref" --prompt-ids 1,2 --draft "$ref" --draft-quant fp8 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "draft-quant" "$tmp/err" || fail "bad --draft-quant: rc=$rc"
"$BIN/specd-generate" --model "$ref" --prompt-ids 1,2 --draft "$ref" --draft-p-min 2 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "draft-p-min" "$tmp/err" || fail "bad --draft-p-min: rc=$rc"
"$BIN/specd-generate" --model "$ref" --prompt-ids 1,99999 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "out of range" "$tmp/err" || fail "out-of-range id: rc=$rc"
"$BIN/specd-generate" --model "$MOD/tinycode-16m" --draft "$ref" --prompt "x" 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -qi "tokenizer" "$tmp/err" || fail "drafter without the target's tokenizer accepted: rc=$rc"
"$BIN/specd-generate" --model "$ref" --prompt-ids 1 --temperature -1 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] || fail "bad temperature: rc=$rc"
set -e
echo "PASS"
