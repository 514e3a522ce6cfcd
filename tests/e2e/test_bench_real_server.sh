#!/usr/bin/env bash
# test_bench_real_server.sh — specd-bench against the REAL server.
#
# Starts `specd serve --target tinycode-16m --draft tinycode-3m` on a free
# loopback port (tests/e2e/pipeline_lib.sh), runs specd-bench (streaming,
# --ignore-eos, warm-up, --json) and checks what it reports against what the
# server counted: the differences of the router's /metrics counters
# specd_request_duration_seconds_count (finished generations),
# specd_http_requests_total{code}, specd_generation_tokens_total and
# specd_spec_steps_total / specd_spec_accepted_tokens_total before and after
# the run; percentiles are ordered (p50 <= p90 <= p99) and TPOT p50 > 0. Then
# a refused connection (the server stopped) is reported as connect_refused,
# exit 1. The mock-based checks (bad URL, 5xx, ...) are in
# test_bench_client.sh. Env (set by CTest): SD_BIN, SD_MODELS.
. "$(dirname "$0")/pipeline_lib.sh"
BENCH=$BIN/specd-bench
[ -x "$BENCH" ] || { echo "FAIL - $BENCH not built"; exit 1; }

# snapshot: one GET /metrics -> "gen200 gen_tokens spec_steps spec_accepted non200 http200", where
# gen200 = specd_request_duration_seconds_count (finished generation requests)
# and http200 / non200 count every endpoint (/metrics, /v1/models included).
snapshot() {
  curl -s "$URL/metrics" | awk '
    $1 == "specd_request_duration_seconds_count" { n = $2 }
    $1 == "specd_generation_tokens_total" { g = $2 }
    $1 == "specd_spec_steps_total" { st = $2 }
    $1 == "specd_spec_accepted_tokens_total" { ac = $2 }
    $1 == "specd_http_requests_total{code=\"200\"}" { ok = $2 }
    $1 ~ /^specd_http_requests_total\{/ && $1 != "specd_http_requests_total{code=\"200\"}" { bad += $2 }
    END { printf "%d %d %d %d %d %d\n", n, g, st, ac, bad, ok }'
}

serve_start --draft "$DRAFT" || { fail "specd serve --draft did not start"; finish; }
ok "specd serve --draft up at $URL"

NP=12 CONC=4 MAXT=16 WARM=2
read -r r0 g0 s0 a0 e0 h0 <<<"$(snapshot)"
"$BENCH" --url "$URL" --num-prompts $NP --concurrency $CONC --max-tokens $MAXT --ignore-eos --warmup $WARM \
    --temperature 0 --seed 3 --goodput e2el:600000,ttft:600000 --quiet --json "$WORK/run.json" >"$WORK/run.out" 2>"$WORK/run.err"
rc=$?
sleep 0.3 # the router counts a request when its response has been written
read -r r1 g1 s1 a1 e1 h1 <<<"$(snapshot)"
check "specd-bench exit 0 (got $rc)" '[ "$rc" = 0 ]'
[ "$rc" = 0 ] || { sed 's/^/#   /' "$WORK/run.out" "$WORK/run.err" | tail -n 40; }

# The server saw the warm-up requests too: bench figures + warm-up = server deltas.
completed=$(jget "$WORK/run.json" 'j["summary"]["completed"]')
failed=$(jget "$WORK/run.json" 'j["summary"]["failed"] + j["summary"]["cancelled"]')
tokens=$(jget "$WORK/run.json" 'j["summary"]["total_output_tokens"]')
warm=$(jget "$WORK/run.json" 'j["summary"]["warmup_requests"] - j["summary"]["warmup_failed"]')
check "bench: $completed completed, $failed failed" '[ "$completed" = $NP ] && [ "$failed" = 0 ]'
check "bench: warm-up $warm requests" '[ "$warm" = $WARM ]'
check "server: finished generations delta $((r1 - r0)) = $completed + $warm warm-up" '[ $((r1 - r0)) = $((completed + warm)) ]'
check "server: HTTP 200 delta $((h1 - h0)) >= $((completed + warm)) (plus /v1/models, /metrics)" \
  '[ $((h1 - h0)) -ge $((completed + warm)) ] && [ $((h1 - h0)) -le $((completed + warm + 3)) ]'
check "server: no non-200 responses (delta $((e1 - e0)))" '[ $((e1 - e0)) = 0 ]'
check "bench: total output tokens $tokens = $NP x $MAXT (--ignore-eos)" '[ "$tokens" = $((NP * MAXT)) ]'
check "server: generation tokens delta $((g1 - g0)) = $tokens + warm-up $((warm * MAXT))" \
  '[ $((g1 - g0)) = $((tokens + warm * MAXT)) ]'
check "bench: input tokens from the server's usage, summed ($(jget "$WORK/run.json" 'j["summary"]["total_input_tokens"]'))" \
  '[ "$(jget "$WORK/run.json" "j[\"summary\"][\"total_input_tokens\"] == sum(r[\"input_tokens\"] for r in j[\"requests\"]) > 0 and all(r[\"input_tokens\"] > 0 for r in j[\"requests\"])")" = True ]'
check "bench: vLLM result keys beside its own (median_ttft_ms, p99_itl_ms, std_tpot_ms, total_token_throughput ...)" \
  '[ "$(jget "$WORK/run.json" "all(k in j for k in (\"median_ttft_ms\", \"p99_itl_ms\", \"std_tpot_ms\", \"mean_e2el_ms\", \"completed\", \"duration\", \"request_throughput\", \"output_throughput\", \"total_token_throughput\", \"total_input_tokens\")) and j[\"completed\"] == $NP and abs(j[\"total_token_throughput\"] * j[\"duration\"] - j[\"total_input_tokens\"] - j[\"total_output_tokens\"]) < 1 and j[\"median_ttft_ms\"] == j[\"summary\"][\"ttft_ms\"][\"p50\"]")" = True ]'
check "bench: --goodput with objectives every request meets: goodput = request throughput, all $NP good" \
  '[ "$(jget "$WORK/run.json" "j[\"request_goodput\"] == j[\"request_throughput\"] and j[\"summary\"][\"good_requests\"] == $NP and j[\"config\"][\"goodput\"] == {\"e2el\": 600000.0, \"ttft\": 600000.0}")" = True ]'
check "bench: a malformed --goodput is a usage error (exit 2)" \
  '"$BENCH" --url "$URL" --num-prompts 1 --goodput speed:5 >/dev/null 2>"$WORK/gp.err"; [ $? = 2 ] && grep -q "KEY:MS" "$WORK/gp.err"'
# A random dataset (as vLLM's): token-id prompts of 20 ± 50% ids, max_tokens 8 ± 50%.
"$BENCH" --url "$URL" --num-prompts 6 --concurrency 2 --random-input-len 20 --random-output-len 8 \
    --random-range-ratio 0.5 --ignore-eos --temperature 0 --seed 5 --quiet --json "$WORK/rand.json" >/dev/null 2>&1
check "bench: --random-input-len: 6 requests, prompts of 10-30 tokens, outputs of 4-12 (the server's counts)" \
  '[ "$(jget "$WORK/rand.json" "j[\"summary\"][\"completed\"] == 6 and all(10 <= r[\"input_tokens\"] <= 30 and 4 <= r[\"output_tokens\"] <= 12 for r in j[\"requests\"]) and len(set(r[\"input_tokens\"] for r in j[\"requests\"])) > 1")" = True ]'
check "text table agrees with JSON" \
  '[ "$(grep -m1 "^Successful requests:" "$WORK/run.out" | awk "{print \$NF}")" = "$completed" ] &&
   [ "$(grep -m1 "^Total output tokens:" "$WORK/run.out" | awk "{print \$NF}")" = "$tokens" ]'

# Speculation stats: per-request stats summed by the bench vs the server's counters.
bsteps=$(jget "$WORK/run.json" '(j["summary"]["speculative"] or {}).get("steps", -1)')
bacc=$(jget "$WORK/run.json" '(j["summary"]["speculative"] or {}).get("accepted_tokens", -1)')
sreq=$(jget "$WORK/run.json" '(j["summary"]["speculative"] or {}).get("requests", -1)')
check "bench: speculative stats on all $sreq requests" '[ "$sreq" = $NP ]'
check "bench: steps $bsteps > 0, accepted $bacc >= 0" '[ "${bsteps:--1}" -gt 0 ] && [ "${bacc:--1}" -ge 0 ]'
# The verifier's speculation counters reach the router with its periodic
# Stats (about once a second): wait (5 s) until they cover the run.
for _ in $(seq 50); do
  [ $((s1 - s0)) -ge "${bsteps:-0}" ] && [ $((a1 - a0)) -ge "${bacc:-0}" ] && break
  sleep 0.1
  read -r r1 g1 s1 a1 e1 h1 <<<"$(snapshot)"
done
check "server: spec steps delta $((s1 - s0)) >= bench steps $bsteps (warm-up adds some)" \
  '[ $((s1 - s0)) -ge "$bsteps" ]'
check "server: accepted delta $((a1 - a0)) >= bench accepted $bacc" '[ $((a1 - a0)) -ge "$bacc" ]'
# Each verify step commits accepted + 1 tokens; the first token of a request
# comes from the prefill: sum(steps) + sum(accepted) = tokens - requests.
check "bench: steps + accepted = tokens - requests ($bsteps + $bacc vs $((tokens - NP)))" \
  '[ $((bsteps + bacc)) = $((tokens - NP)) ]'

# Latency figures: ordered percentiles, TPOT > 0, per-request records.
if "$PY" - "$WORK/run.json" "$NP" "$MAXT" <<'PY'; then ok "percentiles ordered, TPOT p50 > 0, $NP records"; else fail "latency figures in --json"; fi
import json, sys
d = json.load(open(sys.argv[1])); n, m = int(sys.argv[2]), int(sys.argv[3])
s = d["summary"]
for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
    x = s[k]
    assert x["n"] > 0, k
    assert x["min"] <= x["p50"] <= x["p90"] <= x["p99"] <= x["max"], (k, x)
assert s["tpot_ms"]["p50"] > 0, s["tpot_ms"]
assert s["ttft_ms"]["p50"] <= s["e2e_ms"]["p50"]
r = d["requests"]
assert len(r) == n, len(r)
assert all(x["error"] is None and x["http_status"] == 200 and x["output_tokens"] == m for x in r)
assert all(0 < x["ttft"] <= x["e2e"] for x in r)
assert sum(x["output_tokens"] for x in r) == s["total_output_tokens"]
PY

# Refused connection against the real server's port once it is stopped.
dead=$URL
serve_stop
"$BENCH" --url "$dead" --num-prompts 3 --concurrency 2 --quiet >"$WORK/dead.out" 2>&1
rc=$?
check "stopped server: exit 1 (got $rc)" '[ "$rc" = 1 ]'
check "stopped server: 3 x connect_refused" \
  '[ "$(grep -m1 "^connect_refused" "$WORK/dead.out" | awk "{print \$NF}")" = 3 ]'
finish
