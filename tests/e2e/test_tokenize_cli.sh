#!/usr/bin/env bash
# test_tokenize_cli.sh — end-to-end check of specd-tokenize: encode and decode
# through the real binary against ids from tests/fixtures/tokenizer_cases.json
# (HF tokenizers output, copied here so the test needs no JSON tool), and the
# error path (missing file → exit 1 with a message).
# Environment (set by CTest): SD_BIN, SD_FIXTURES_BIN, SD_MODELS.
set -u
BIN="${SD_BIN:?SD_BIN not set}/specd-tokenize"
TK="${SD_FIXTURES_BIN:?SD_FIXTURES_BIN not set}/tokenizers"
fails=0

check() { # name, expected, actual
    if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected [$2] got [$3]"; fails=$((fails + 1)); fi
}
squash() { tr -d ' \n'; }

got=$(printf '%s' 'Hello, world!' | "$BIN" --tokenizer "$TK/qwen3/tokenizer.json" | squash)
check "qwen3 encode" "[9707,11,1879,0]" "$got"

got=$(printf '%s' 'Hello, world!' | "$BIN" --tokenizer "$TK/llama2/tokenizer.json" --add-special | squash)
check "llama2 encode --add-special" "[1,22557,28725,1526,28808]" "$got"

got=$(printf '%s' 'I'"'"'m sure you'"'"'ll see they'"'"'ve done it; it'"'"'s John'"'"'s.' |
      "$BIN" --tokenizer "$TK/llama3/tokenizer.json" | squash)
check "llama3 encode" "[40,2846,2771,499,3358,1518,814,3077,2884,433,26,433,596,3842,596,13]" "$got"

chat='[151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]'
got=$(printf '%s' "$chat" | "$BIN" --tokenizer "$TK/qwen3/tokenizer.json" --decode; echo x)
check "qwen3 decode" "$(printf '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\nx')" "$got"
got=$(printf '%s' "$chat" | "$BIN" --tokenizer "$TK/qwen3/tokenizer.json" --decode --skip-special; echo x)
check "qwen3 decode --skip-special" "$(printf 'user\nWhat is 2+2?\nassistant\nx')" "$got"

if [ -n "${SD_MODELS:-}" ]; then
    text=$(printf 'def f(x):\n    return "caf\xc3\xa9 \xe4\xb8\xad"\n')
    ids=$(printf '%s' "$text" | "$BIN" --tokenizer "$SD_MODELS/tinycode-16m/tokenizer.json")
    got=$(printf '%s' "$ids" | "$BIN" --tokenizer "$SD_MODELS/tinycode-16m/tokenizer.json" --decode)
    check "tinycode round trip" "$text" "$got"
fi

err=$(printf 'x' | "$BIN" --tokenizer /nonexistent/tokenizer.json 2>&1 >/dev/null)
rc=$?
check "missing file exit code" "1" "$rc"
case "$err" in *nonexistent*) echo "ok   missing file message: $err" ;; *) echo "FAIL no message: [$err]"; fails=$((fails + 1)) ;; esac

printf '[1, 99999999]' | "$BIN" --tokenizer "$TK/llama2/tokenizer.json" --decode >/dev/null 2>&1
check "out-of-range id exit code" "1" "$?"
printf 'not json' | "$BIN" --tokenizer "$TK/llama2/tokenizer.json" --decode >/dev/null 2>&1
check "malformed ids exit code" "1" "$?"

[ "$fails" -eq 0 ] && echo "all specd-tokenize checks passed"
exit $((fails > 0))
