#!/usr/bin/env bash
# test_draw_rows.sh — sampled rows drawn on the backend (the draw_rows op,
# which keeps a GPU's logits on the device) give the host sampler's tokens:
# specd-generate with SD_DRAW_ROWS=1 (the CPU backend's draw, the CUDA
# kernel's reference) against SD_DRAW_ROWS=0 (the host sampler), plain and
# speculative (rejection and match rules, the drafter and n-gram drafts),
# with top-k, top-p, min-p, penalties, logit_bias, min_tokens,
# allowed_token_ids and output restricted by a regular expression or to JSON
# (the device's masks and edits of the logits; one whose mask leaves no
# token), at two temperatures and seeds; the log shows which path ran. Then two specd serve instances, one each way, on
# the same sampled requests (n = 3, penalties, streamed) with the match rule.
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
    "bias|$D --logit-bias 10=5,11=-3,12=100 --min-tokens 40" "allowed|$D --allowed-token-ids 10,11,12,40,41,300,301,302" \
    "topp|$D --top-p 0.9" "topk|$D --top-k 20 --top-p 0.8 --min-p 0.02" "topk1|--top-k 1" \
    "regex|$D --regex [a-z_]+(=[0-9]+)*" "json|$D --response-format json_object --repetition-penalty 1.1" \
    "empty|$D --response-format json_object --allowed-token-ids 1,2,3,4,5"; do
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

# greedy rows are argmax rows, never draws
gen 1 greedy $D
! grep -q "$MSG" "$tmp/greedy.1.err" || fail "greedy rows drawn"
echo "ok   - greedy rows are not drawn"
# through specd serve (the verifier's engine, batched, pipelined): two servers, the host's draws and the
# backend's, the same sampled requests with the match rule (its output is plain sampling's, whatever the
# drafts: comparable across servers) — n = 3, penalties and logit_bias, min-p, streamed
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for v in 0 1; do
    P[$v]=$(port)
    SD_DRAW_ROWS=$v "$BIN/specd" serve --target "$MOD/tinycode-16m" --draft "$MOD/tinycode-3m" --host 127.0.0.1 \
        --port "${P[$v]}" > "$tmp/serve.$v.log" 2>&1 &
    PIDS+=($!)
done
for v in 0 1; do
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:${P[$v]}/health" > /dev/null && break; sleep 0.5; done
done
M='"speculative":{"verify":"match"}'
bodies=("{\"prompt\":\"def add(a, b):\",\"max_tokens\":80,\"temperature\":0.9,\"seed\":5,\"n\":3,$M}"
    "{\"prompt\":\"import os\\n\",\"max_tokens\":60,\"temperature\":1.2,\"seed\":9,\"presence_penalty\":0.5,\"frequency_penalty\":0.3,\"logit_bias\":{\"10\":4},$M}"
    "{\"prompt\":\"class Stack:\",\"max_tokens\":60,\"temperature\":0.7,\"seed\":2,\"min_p\":0.1,\"stream\":true,$M}"
    "{\"prompt\":\"def main():\",\"max_tokens\":60,\"temperature\":1.0,\"seed\":8,\"top_p\":0.9,\"top_k\":30,$M}")
for i in "${!bodies[@]}"; do
    for v in 0 1; do
        curl -sf "http://127.0.0.1:${P[$v]}/v1/completions" -H 'content-type: application/json' \
            -d "${bodies[$i]}" > "$tmp/r$i.$v" || fail "request $i to the SD_DRAW_ROWS=$v server"
    done
    python3 - "$tmp/r$i.0" "$tmp/r$i.1" <<'PY' || fail "request $i: the servers' texts differ"
import json, sys
def texts(path):
    raw = open(path).read()
    if raw.startswith("data:"):
        ev = [json.loads(l[5:]) for l in raw.splitlines() if l.startswith("data:") and "[DONE]" not in l]
        return ["".join(c["text"] for e in ev for c in e["choices"])]
    return [c["text"] for c in json.loads(raw)["choices"]]
a, b = texts(sys.argv[1]), texts(sys.argv[2])
assert a == b and all(a), (a, b)
PY
done
grep -q "$MSG" "$tmp/serve.1.log" || fail "the SD_DRAW_ROWS=1 server did not draw on the backend"
! grep -q "$MSG" "$tmp/serve.0.log" || fail "the SD_DRAW_ROWS=0 server drew on the backend"
echo "ok   - specd serve: ${#bodies[@]} sampled requests, the same texts both ways"
echo PASS
