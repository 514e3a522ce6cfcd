#!/usr/bin/env bash
# test_playground_http.sh — the playground as HTTP sees it, and the
# provenance field's shape, with specd-router in front of the TEST-ONLY fake
# verifier (its steps: two tokens, one accepted draft, alternately the
# drafter's and the lookup's). The page at / and /playground and its files
# with their types, a strict Content-Security-Policy and the security
# headers on each, no inline script or handler in the page, ETag / 304, a
# JSON 404 for a file it lacks and a 405 for a POST, the page open while the
# API needs a key, --no-playground; provenance on completions and chat
# (streamed and not), absent unless asked, refused on /v1/responses and when
# not a boolean. Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"

VPORT=$(free_port); HPORT=$(free_port); HPORT2=$(free_port)
KEY=pg-key
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 512 \
  >"$WORK/fv.log" 2>&1 &
PIDS+=("$!")
"$BIN/specd-router" --host 127.0.0.1 --port "$HPORT" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --model-name tinycode-16m --api-key "$KEY" --health-interval-ms 200 >"$WORK/router.log" 2>&1 &
PIDS+=("$!")
"$BIN/specd-router" --host 127.0.0.1 --port "$HPORT2" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --model-name tinycode-16m --no-playground --health-interval-ms 200 >"$WORK/router2.log" 2>&1 &
PIDS+=("$!")
URL=http://127.0.0.1:$HPORT
AUTH=(-H "Authorization: Bearer $KEY")
wait_health "$URL" || { fail "router up"; exit 1; }
wait_health "http://127.0.0.1:$HPORT2" || { fail "second router up"; exit 1; }

# get PATH [curl args]: body to $WORK/out, headers to $WORK/hdr; prints the status.
get() { local p=$1; shift; curl -s -o "$WORK/out" -D "$WORK/hdr" -w '%{http_code}' "$@" "$URL$p"; }
hdr() { grep -i "^$1:" "$WORK/hdr" | head -n 1 | cut -d: -f2- | sed 's/^ //; s/\r$//'; }

# --- the page -----------------------------------------------------------------
check "GET / → 200 html, without the API key" '[ "$(get /)" = 200 ] && hdr Content-Type | grep -q "^text/html"'
cp "$WORK/out" "$WORK/index.html"
check "the CSP: nothing but this origin, no inline script, no framing" \
  'c=$(hdr Content-Security-Policy); for d in "default-src '"'"'none'"'"'" "script-src '"'"'self'"'"'" "style-src '"'"'self'"'"'" "connect-src '"'"'self'"'"'" "frame-ancestors '"'"'none'"'"'" "base-uri '"'"'none'"'"'"; do case "$c" in *"$d"*) ;; *) false ;; esac || exit 1; done; case "$c" in *unsafe*) false ;; esac'
check "security headers" '[ "$(hdr X-Content-Type-Options)" = nosniff ] && [ "$(hdr X-Frame-Options)" = DENY ] && [ "$(hdr Referrer-Policy)" = no-referrer ] && [ -n "$(hdr Cross-Origin-Opener-Policy)" ]'
check "the page has no inline script, handler or style attribute" \
  '! grep -Eiq "<script[^>]*>[^<]|<script>| on[a-z]+=| style=" "$WORK/index.html" && grep -q "<script src=\"/playground/app.js\"" "$WORK/index.html"'
check "GET /playground is the same page" '[ "$(get /playground)" = 200 ] && cmp -s "$WORK/out" "$WORK/index.html"'
check "app.js as JavaScript, with the CSP" '[ "$(get /playground/app.js)" = 200 ] && hdr Content-Type | grep -q "^text/javascript" && [ -n "$(hdr Content-Security-Policy)" ] && grep -q "textContent" "$WORK/out"'
check "the script never writes HTML" '! grep -Eq "innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function" "$WORK/out"'
check "app.css and icon.svg" '[ "$(get /playground/app.css)" = 200 ] && hdr Content-Type | grep -q "^text/css" && [ "$(get /playground/icon.svg)" = 200 ] && hdr Content-Type | grep -q "^image/svg+xml"'
get /playground/app.js >/dev/null; ETAG=$(hdr ETag)
check "ETag: a current copy gets a 304" '[ -n "$ETAG" ] && [ "$(get /playground/app.js -H "If-None-Match: $ETAG")" = 304 ]'
check "a file it lacks → JSON 404" '[ "$(get /playground/nope.js)" = 404 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = not_found ]'
check "POST / → JSON 405" '[ "$(get / -X POST -d x)" = 405 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = method_not_allowed ]'
check "the API still needs the key" '[ "$(get /v1/models)" = 401 ] && [ "$(get /v1/models "${AUTH[@]}")" = 200 ]'
check "--no-playground: / → JSON 404" '[ "$(curl -s -o "$WORK/out" -w "%{http_code}" "http://127.0.0.1:$HPORT2/")" = 404 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"code\"]")" = not_found ]'

# --- provenance ----------------------------------------------------------------
post() { local p=$1 b=$2; shift 2; curl -s -o "$WORK/out" -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' "$@" -d "$b" "$URL$p"; }
check "completion with provenance → 200" '[ "$(post /v1/completions "{\"prompt\":\"def f(x):\",\"max_tokens\":6,\"speculative\":{\"provenance\":true}}")" = 200 ]'
check "its tokens: the fake's steps (accepted draft, then the verifier's), texts join to the text" '"$PY" - "$WORK/out" <<PY
import json, sys
j = json.load(open(sys.argv[1]))
c = j["choices"][0]; pv = c["provenance"]
src = [t["source"] for t in pv["tokens"]]
assert src == ["drafter", "verifier", "ngram", "verifier", "drafter", "verifier"], src
assert [t["step"] for t in pv["tokens"]] == [1, 1, 2, 2, 3, 3]
assert "".join(t["text"] for t in pv["tokens"]) == c["text"], (pv, c["text"])
assert [(s["step"], s["drafted"], s["accepted"], s["source"]) for s in pv["steps"]] == \
    [(1, 4, 1, "drafter"), (2, 4, 1, "ngram"), (3, 4, 1, "drafter")], pv["steps"]
PY'
check "without it, no provenance" '[ "$(post /v1/completions "{\"prompt\":\"def f(x):\",\"max_tokens\":4}")" = 200 ] && [ "$(jget "$WORK/out" "\"provenance\" in j[\"choices\"][0]")" = False ]'
check "speculation off: the verifier's tokens, steps without drafts" '[ "$(post /v1/completions "{\"prompt\":\"ab\",\"max_tokens\":3,\"speculative\":{\"enabled\":false,\"provenance\":true}}")" = 200 ] && [ "$(jget "$WORK/out" "[(t[\"source\"], t[\"step\"]) for t in j[\"choices\"][0][\"provenance\"][\"tokens\"]] == [(\"verifier\", 1), (\"verifier\", 2), (\"verifier\", 3)] and all(s[\"source\"] == \"none\" and s[\"drafted\"] == 0 for s in j[\"choices\"][0][\"provenance\"][\"steps\"])")" = True ]'
curl -sN "${AUTH[@]}" "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi there"}],"max_tokens":5,"stream":true,"speculative":{"provenance":true}}' >"$WORK/sse"
check "streamed chat: each chunk's provenance, five tokens in all, matching the deltas" '"$PY" - "$WORK/sse" <<PY
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
toks = [t for e in ev for c in e["choices"] if "provenance" in c for t in c["provenance"]["tokens"]]
text = "".join(c["delta"].get("content") or "" for e in ev for c in e["choices"])
assert len(toks) == 5, toks
assert "".join(t["text"] for t in toks) == text, (toks, text)
assert all("provenance" in c for e in ev for c in e["choices"] if c["delta"].get("content"))
PY'
check "not a boolean → 400 naming speculative.provenance" '[ "$(post /v1/completions "{\"prompt\":\"x\",\"speculative\":{\"provenance\":1}}")" = 400 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"param\"]")" = speculative.provenance ]'
check "/v1/responses refuses it (400)" '[ "$(post /v1/responses "{\"input\":\"x\",\"speculative\":{\"provenance\":true}}")" = 400 ] && [ "$(jget "$WORK/out" "j[\"error\"][\"param\"]")" = speculative.provenance ]'

if [ "$FAILS" -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$FAILS check(s) failed"; exit 1
