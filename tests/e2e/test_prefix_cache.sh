#!/usr/bin/env bash
# test_prefix_cache.sh — the verifier's prefix cache through `specd serve`
# with the demo pair: a prompt sent again reuses its KV after the first
# request ended (usage.prompt_tokens_details.cached_tokens), the next turn of
# a conversation reuses the previous turn's prompt and answer, outputs equal
# the target's plain output (specd-generate) with the cache on, in a small
# KV pool where cached blocks are evicted (--kv-blocks 48), and with
# --no-prefix-cache nothing is cached. Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

if ! serve_start --draft "$DRAFT" --kv-blocks 48; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT (48 KV blocks of 16 positions)"
P1='import os\nimport sys\n\ndef read_config(path):\n    """Read a key=value file into a dict, skipping comments."""\n'
TEXT1=$(printf "$P1")

# cached PROMPT MAX OUT: a greedy completion of PROMPT; prints cached_tokens.
cached() {
  post /v1/completions "$(body "$1" "$2" 0)" "$3" >/dev/null
  jget "$3" 'j["usage"]["prompt_tokens_details"]["cached_tokens"]'
}
c1=$(cached "$TEXT1" 48 "$WORK/t1.json")
c2=$(cached "$TEXT1" 48 "$WORK/t1b.json")
n1=$(jget "$WORK/t1.json" 'j["usage"]["prompt_tokens"]')
check "the same prompt again: $c2 of $n1 prompt tokens from the cache (first time: $c1)" \
  '[ "$c1" = 0 ] && [ "$c2" = $(( (n1 - 1) / 16 * 16 )) ] && [ "$c2" -gt 0 ]'
text_of "$WORK/t1.json" "$WORK/o1"; text_of "$WORK/t1b.json" "$WORK/o1b"
reference "$TEXT1" "$WORK/ref1" --max-tokens 48 --ignore-eos
check "both equal the target's plain output" 'cmp -s "$WORK/o1" "$WORK/ref1" && cmp -s "$WORK/o1b" "$WORK/ref1"'

# The next turn: the previous prompt, its answer, then more.
TEXT2="$TEXT1$(cat "$WORK/o1")
# now write the tests
def test_read_config():"
c3=$(cached "$TEXT2" 48 "$WORK/t2.json")
n2=$(jget "$WORK/t2.json" 'j["usage"]["prompt_tokens"]')
text_of "$WORK/t2.json" "$WORK/o2"
reference "$TEXT2" "$WORK/ref2" --max-tokens 48 --ignore-eos
check "the next turn: $c3 of $n2 prompt tokens from the cache (more than the first prompt's)" '[ "$c3" -gt "$c2" ]'
check "the next turn equals the target's plain output" 'cmp -s "$WORK/o2" "$WORK/ref2"'

# Pressure: 6 different prompts of ~150 tokens + 160 tokens each, 4 at a time,
# in a 768-position pool: cached blocks are evicted; every output stays exact.
for i in 1 2 3 4 5 6; do
  printf 'def function_%d(values):\n    """Compute statistic number %d of the values."""\n    total = 0\n' "$i" "$i" >"$WORK/p$i"
  for k in $(seq 6); do printf '    # step %d of %d: accumulate the values in order\n' "$k" "$i" >>"$WORK/p$i"; done
done
pids=()
for i in 1 2 3 4 5 6; do
  post /v1/completions "$(body "$(cat "$WORK/p$i")" 160 0)" "$WORK/q$i.json" >/dev/null &
  pids+=($!)
  [ $i = 4 ] && wait "${pids[0]}"
done
wait "${pids[@]}"
ev=$(metric specd_prefix_evictions_total)
for i in $(seq 30); do [ "${ev:-0}" -gt 0 ] && break; sleep 0.2; ev=$(metric specd_prefix_evictions_total); done
check "cached blocks were evicted under pressure (specd_prefix_evictions_total $ev)" '[ "${ev:-0}" -gt 0 ]'
same=true
for i in 1 2 3 4 5 6; do
  text_of "$WORK/q$i.json" "$WORK/qo$i"
  reference "$(cat "$WORK/p$i")" "$WORK/qr$i" --max-tokens 160 --ignore-eos
  cmp -s "$WORK/qo$i" "$WORK/qr$i" || { same=false; echo "# prompt $i differs"; }
done
check "under eviction every output equals the target's plain output" '$same'
c4=$(cached "$TEXT1" 48 "$WORK/t1c.json")
text_of "$WORK/t1c.json" "$WORK/o1c"
check "the first prompt after the pressure ($c4 cached) is still exact" 'cmp -s "$WORK/o1c" "$WORK/ref1"'
check "the KV pool is whole again (cached blocks count as free)" 'kv_settled'
check "/metrics: vllm:prefix_cache_hits_total and specd_prefix_cached_blocks" \
  '[ "$(metric vllm:prefix_cache_hits_total)" != "" ] && [ "$(metric specd_prefix_cached_blocks)" -gt 0 ]'
serve_stop

if ! serve_start --draft "$DRAFT" --no-prefix-cache; then fail "specd serve --no-prefix-cache came up"; finish; fi
cached "$TEXT1" 16 "$WORK/n1.json" >/dev/null
c5=$(cached "$TEXT1" 16 "$WORK/n2.json")
check "--no-prefix-cache: nothing from a cache ($c5), nothing cached" \
  '[ "$c5" = 0 ] && [ "$(metric specd_prefix_cached_blocks)" = 0 ]'

finish
