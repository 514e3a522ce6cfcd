#!/usr/bin/env bash
# test_bench_client.sh — end-to-end test of specd-bench (bench/client).
#
# Drives build/bin/specd-bench against specd-mock-openai, a tiny mock
# OpenAI-compatible server that is TEST TOOLING ONLY (bench/client/mock_server.c),
# and checks: counts reported by the bench equal what the mock logged,
# latency figures are plausible for a known per-token delay (loose bounds),
# --json parses with the right number of records, connection refused and
# HTTP 500 are reported by kind, a run without a bound is refused, --duration
# bounds the run, --plot works or degrades to a warning.
# Env (set by CTest): SD_BIN (build/bin), SD_ROOT (repo root).
set -u
SD_BIN=${SD_BIN:-build/bin}
BENCH="$SD_BIN/specd-bench"
MOCK="$SD_BIN/specd-mock-openai"
for b in "$BENCH" "$MOCK"; do
    [ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }
done

TMP=$(mktemp -d /tmp/sd_bench_e2e.XXXXXX)
PIDS=()
FAILS=0
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
# ge A B: A >= B (floating point)
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

# start_mock NAME [mock options...]: starts a mock on an ephemeral port
# (the mock binds port 0 and writes the port it got, so no port can clash)
# and sets PORT. Its log is $TMP/NAME.log.
start_mock() {
    local name=$1
    shift
    rm -f "$TMP/$name.port"
    "$MOCK" --port 0 --port-file "$TMP/$name.port" --log "$TMP/$name.log" "$@" 2>"$TMP/$name.err" &
    PIDS+=($!)
    for _ in $(seq 1 50); do
        [ -s "$TMP/$name.port" ] && break
        sleep 0.1
    done
    PORT=$(cat "$TMP/$name.port" 2>/dev/null) || { echo "FAIL: mock $name did not start"; exit 1; }
    : >>"$TMP/$name.log"
}

# field FILE LABEL: last word of the summary line starting with LABEL.
field() { grep -m1 "^$2" "$1" | awk '{print $NF}'; }
# lat FILE METRIC COL: latency table column (3 mean, 4 p50, 5 p90, 6 p99), ms.
lat() { grep -m1 "^$2 " "$1" | awk -v c="$3" '{print $c}'; }
served() { grep -c "status=$2 " "$TMP/$1.log"; }
served_tokens() { awk -v s="status=$2" '$0 ~ s" " { sub("tokens=", "", $NF); t += $NF } END { print t + 0 }' "$TMP/$1.log"; }

# --- 1. streaming completions: counts, latencies, JSON, speculation ----------
start_mock a --delay-ms 20
OUT=$TMP/a.out
"$BENCH" --url "http://127.0.0.1:$PORT" --num-prompts 24 --concurrency 4 --max-tokens 12 --seed 1 \
    --quiet --json "$TMP/a.json" >"$OUT" 2>"$TMP/a.stderr"
rc=$?
[ "$rc" = 0 ] || fail "stream run exit $rc"
[ "$(field "$OUT" 'Successful requests:')" = 24 ] || fail "successful != 24"
[ "$(served a 200)" = 24 ] || fail "mock served $(served a 200) != 24"
[ "$(field "$OUT" 'Total output tokens:')" = "$(served_tokens a 200)" ] \
    || fail "tokens $(field "$OUT" 'Total output tokens:') != mock $(served_tokens a 200)"
[ "$(served_tokens a 200)" = 288 ] || fail "mock tokens $(served_tokens a 200) != 24*12"
tpot=$(lat "$OUT" TPOT 4); e2e=$(lat "$OUT" E2E 4); itl=$(lat "$OUT" ITL 4); ttft=$(lat "$OUT" TTFT 4)
ge "$tpot" 18 && ge 2000 "$tpot" || fail "TPOT p50 $tpot ms not in [18, 2000] for a 20 ms delay"
ge "$itl" 15 || fail "ITL p50 $itl ms < 15"
ge "$ttft" 15 || fail "TTFT p50 $ttft ms < 15"
ge "$e2e" 200 && ge 20000 "$e2e" || fail "E2E p50 $e2e ms not in [200, 20000] for 12 x 20 ms"
grep -q '^Accepted tokens per step: *[0-9]' "$OUT" || fail "no speculation stats"
grep -q 'specd_spec_accepted_per_position_total{pos="1"}' "$OUT" || fail "no specd_spec_ metrics"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$TMP/a.json" <<'PY' || fail "--json content"
import json, sys
d = json.load(open(sys.argv[1]))
r = d["requests"]
assert len(r) == 24, len(r)
assert d["summary"]["completed"] == 24
assert d["summary"]["total_output_tokens"] == 288
assert all(x["error"] is None and x["output_tokens"] == 12 and len(x["itl"]) == 11 for x in r)
assert all(x["ttft"] > 0 and x["e2e"] >= x["ttft"] for x in r)
assert d["config"]["seed"] == 1 and d["summary"]["speculative"]["requests"] == 24
PY
else
    [ "$(grep -c '"prompt_len_chars"' "$TMP/a.json")" = 24 ] || fail "--json record count"
fi
ok "streaming completions"

# --- 2. chat, stream with warm-up, then non-stream ----------------------------
start_mock b --delay-ms 5
OUT=$TMP/b.out
"$BENCH" --url "http://127.0.0.1:$PORT/v1" --endpoint chat --warmup 2 --num-prompts 10 --concurrency 3 \
    --max-tokens 8 --quiet >"$OUT" 2>&1 || fail "chat stream exit $?"
[ "$(field "$OUT" 'Successful requests:')" = 10 ] || fail "chat: successful != 10"
[ "$(served b 200)" = 12 ] || fail "chat: mock served $(served b 200) != 10 + 2 warm-up"
[ "$(field "$OUT" 'Total output tokens:')" = 80 ] || fail "chat: tokens != 80"
"$BENCH" --url "http://127.0.0.1:$PORT" --endpoint chat --no-stream --num-prompts 6 --concurrency 2 \
    --max-tokens 5 --quiet >"$OUT" 2>&1 || fail "chat no-stream exit $?"
[ "$(field "$OUT" 'Successful requests:')" = 6 ] || fail "no-stream: successful != 6"
[ "$(field "$OUT" 'Total output tokens:')" = 30 ] || fail "no-stream: tokens != 30"
[ "$(grep -c 'endpoint=chat stream=0 status=200 tokens=5' "$TMP/b.log")" = 6 ] || fail "no-stream: mock log"
ok "chat stream/no-stream, warm-up excluded"

# --- 3. server errors: every 3rd request -> HTTP 500 --------------------------
start_mock c --fail-every 3
OUT=$TMP/c.out
"$BENCH" --url "http://127.0.0.1:$PORT" --num-prompts 9 --max-tokens 4 --quiet >"$OUT" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "partial failure should exit 0, got $rc"
[ "$(field "$OUT" 'Successful requests:')" = 6 ] || fail "500s: successful != 6"
[ "$(field "$OUT" 'Failed requests:')" = 3 ] || fail "500s: failed != 3"
[ "$(field "$OUT" 'http_5xx')" = 3 ] || fail "500s: http_5xx != 3"
[ "$(served c 500)" = 3 ] || fail "500s: mock logged $(served c 500)"
ok "HTTP 500 counted as http_5xx"

# --- 4. refused connection: a port that was just closed ----------------------
start_mock d
dead=$PORT
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null
OUT=$TMP/d.out
"$BENCH" --url "http://127.0.0.1:$dead" --num-prompts 4 --concurrency 2 --quiet >"$OUT" 2>"$TMP/d.stderr"
rc=$?
[ "$rc" = 1 ] || fail "all-failed run should exit 1, got $rc"
[ "$(field "$OUT" 'connect_refused')" = 4 ] || fail "connect_refused != 4"
ok "connection refused reported, exit 1"

# --- 5. no bound -> refused, exit 2 -------------------------------------------
"$BENCH" --url "http://127.0.0.1:$dead" >"$TMP/e.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "unbounded run should exit 2, got $rc"
grep -q 'refusing to run without a bound' "$TMP/e.out" || fail "no refusal message"
"$BENCH" --url "http://127.0.0.1:$dead" --num-prompts 2 --extra-body '[1]' >"$TMP/e.out" 2>&1
[ $? = 2 ] || fail "bad --extra-body should exit 2"
ok "usage errors exit 2"

# --- 6. --duration bounds the run; Poisson arrivals; dataset; plot -----------
start_mock f --delay-ms 50
OUT=$TMP/f.out
t0=$(date +%s)
"$BENCH" --url "http://127.0.0.1:$PORT" --duration 1 --grace 0.5 --concurrency 2 --max-tokens 1000 \
    --quiet >"$OUT" 2>&1
rc=$?
t1=$(date +%s)
[ $((t1 - t0)) -le 6 ] || fail "--duration 1 run took $((t1 - t0)) s"
[ "$rc" = 1 ] || fail "all-cancelled run should exit 1, got $rc"
[ "$(field "$OUT" 'Cancelled requests:')" = 2 ] || fail "cancelled != 2"
printf '{"prompt": "def add(a, b):"}\nnot json\n{"messages": [{"role": "user", "content": "hi"}]}\n' >"$TMP/ds.jsonl"
"$BENCH" --url "http://127.0.0.1:$PORT" --duration 1 --request-rate 20 --seed 7 --max-tokens 2 \
    --dataset "$TMP/ds.jsonl" --plot "$TMP/p.png" --quiet >"$OUT" 2>"$TMP/f.stderr"
rc=$?
[ "$rc" = 0 ] || fail "rate run exit $rc"
ge "$(field "$OUT" 'Successful requests:')" 5 || fail "rate run: too few requests"
grep -q 'ds.jsonl:2:' "$TMP/f.stderr" || fail "bad dataset line not reported with its number"
if command -v gnuplot >/dev/null 2>&1; then
    [ -s "$TMP/p.png" ] || fail "--plot wrote no PNG"
else
    grep -q 'gnuplot is not installed' "$TMP/f.stderr" || fail "no warning without gnuplot"
fi
ok "duration, Poisson rate, dataset, plot"

# --- 7. --in-order: the dataset's order; cached input tokens reported ----------
for i in 0 1 2 3 4; do printf '{"prompt": "turn %d of a conversation with a long enough prompt"}\n' "$i"; done >"$TMP/mt.jsonl"
"$BENCH" --url "http://127.0.0.1:$PORT" --num-prompts 5 --max-tokens 2 --dataset "$TMP/mt.jsonl" --in-order \
    --json "$TMP/mt.json" >"$OUT" 2>&1 || fail "--in-order run failed"
python3 - "$TMP/mt.json" <<'PY' || fail "--in-order: prompts not in the dataset's order, or no cached tokens"
import json, sys
j = json.load(open(sys.argv[1]))
assert [r["prompt_index"] for r in sorted(j["requests"], key=lambda r: r["id"])] == [0, 1, 2, 3, 4], j["requests"]
assert all(r["cached_tokens"] > 0 for r in j["requests"]) and j["summary"]["total_cached_tokens"] > 0
PY
grep -q 'Cached input tokens (prefix cache):' "$OUT" || fail "no cached input tokens line"
ok "--in-order, cached input tokens"

if [ "$FAILS" -ne 0 ]; then
    echo "test_bench_client: $FAILS failure(s)"
    exit 1
fi
echo "test_bench_client: all passed"
