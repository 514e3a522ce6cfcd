#!/usr/bin/env bash
# test_prometheus.sh — /metrics through Prometheus's own tools, against
# `specd serve` with the demo pair:
#  - `promtool check metrics` finds no problem in the exposition, other than
#    the ':' that vLLM's own names carry (vllm:*; promtool's lint flags
#    vLLM's server the same way);
#  - a real Prometheus scrapes the router, and every query of the Grafana
#    dashboard (deploy/grafana/specd-dashboard.json, vLLM's queries) returns
#    a finite value after some traffic.
# Needs promtool and prometheus (Debian package `prometheus`, installed by
# scripts/setup.sh); skips (77) with a message without them.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "SKIP - promtool / prometheus not installed (Debian package prometheus)"; exit 77
fi
DASH=$(cd "$(dirname "$0")/../.." && pwd)/deploy/grafana/specd-dashboard.json

if ! serve_start; then fail "specd serve came up"; finish; fi
ok "specd serve came up on port $PORT"
post /v1/completions "$(body 'def add(a, b):' 24 0)" "$WORK/warm.json" >/dev/null
post /v1/completions '{"prompt": 5}' "$WORK/bad.json" >/dev/null   # a 400 in the status counters
curl -s "$URL/metrics" >"$WORK/metrics.txt"
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1
grep -v "metric names should not contain ':'" "$WORK/promtool.txt" >"$WORK/problems.txt"
if [ -s "$WORK/problems.txt" ]; then fail "promtool check metrics: $(head -n 5 "$WORK/problems.txt" | tr '\n' ';')"
else ok "promtool check metrics: no problem beyond vLLM's ':' names ($(grep -c . "$WORK/promtool.txt") of those)"; fi

PPORT=$(free_port)
cat >"$WORK/prom.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: specd
    static_configs: [{targets: ["127.0.0.1:$PORT"]}]
YML
prometheus --config.file="$WORK/prom.yml" --storage.tsdb.path="$WORK/tsdb" --web.listen-address="127.0.0.1:$PPORT" \
  >"$WORK/prometheus.log" 2>&1 &
PROM=$!
PROMQ=http://127.0.0.1:$PPORT/api/v1/query
up=""
for i in $(seq 150); do
  up=$(curl -s "$PROMQ" --data-urlencode 'query=up{job="specd"}' | "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null)
  [ "$up" = 1 ] && break
  sleep 0.2
done
check "prometheus scrapes the router" '[ "$up" = 1 ]' || { tail -n 20 "$WORK/prometheus.log"; kill "$PROM"; finish; }
for i in 1 2 3 4 5 6; do
  post /v1/completions "$(body "def f$i(x):" 32 0 '{"speculative": {"num_draft": 4}}')" "$WORK/r$i.json" >/dev/null
  post /v1/chat/completions '{"messages": [{"role": "user", "content": "Sort a list in Python."}], "max_tokens": 24, "temperature": 0.7, "stream": true}' "$WORK/c$i.sse" >/dev/null
done
"$PY" - "$DASH" "$PROMQ" tinycode-16m <<'PY' && ok "every dashboard query returns a finite value" || fail "dashboard queries"
import json, math, sys, time, urllib.parse, urllib.request
dash, url, model = sys.argv[1:4]
def run(show):
    bad = 0
    for p in json.load(open(dash))["panels"]:
        for t in p["targets"]:
            e = t["expr"].replace("$model_name", model).replace("$__rate_interval", "30s")
            r = json.load(urllib.request.urlopen(url + "?" + urllib.parse.urlencode({"query": e})))
            vals = [float(s["value"][1]) for s in r["data"]["result"]]
            if show: print(f"#   {p['title']} / {t['legendFormat']}: {', '.join(f'{v:.4g}' for v in vals) or 'no series'}")
            bad += not any(math.isfinite(v) for v in vals)
    return bad
for attempt in range(20):  # until the scrapes after the traffic are in (1 s interval)
    time.sleep(1)
    if run(False) == 0: break
sys.exit(1 if run(True) else 0)
PY
kill "$PROM" 2>/dev/null; wait "$PROM" 2>/dev/null
serve_stop
finish
