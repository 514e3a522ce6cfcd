#!/usr/bin/env bash
# test_device_lost.sh — a verifier whose device is lost (a sticky GPU error:
# sd_backend_lost) exits with a clear log line instead of failing every
# request while it answers health checks; `specd serve` starts a new one and
# the router resumes the request in flight on it, so the client loses
# nothing. Without a GPU the loss is injected: SD_FAULT_DEVICE_LOST_AFTER=N
# makes the CPU backend fail every attention call after the first N and
# report the device lost — here every verifier loses it ~50 forward passes in,
# so a 128-token request outlives two of them.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"

P='def fibonacci(n):'
reference "$P" "$WORK/r" --max-tokens 128 --ignore-eos
# the target has 8 layers: 400 attention calls are ~50 forward passes
export SD_FAULT_DEVICE_LOST_AFTER=400
if ! serve_start --no-spec; then fail "specd serve came up"; finish; fi
# the supervisor counts a death before it announced the service as a start-up failure (nothing restarted)
for i in $(seq 100); do grep -q "specd: serving" "$SERVE_LOG" && break; sleep 0.1; done
code=$(post /v1/completions "$(body "$P" 128 0)" "$WORK/a.json")
check "the request completes across the lost devices ($code)" '[ "$code" = 200 ]'
[ "$code" = 200 ] && text_of "$WORK/a.json" "$WORK/a"
check "its output equals plain decoding" 'cmp -s "$WORK/a" "$WORK/r"'
check "each verifier logged why it exits" '[ "$(grep -c "the device is lost" "$SERVE_LOG")" -ge 2 ]'
check "the supervisor started new verifiers" '[ "$(grep -c "restarting the verifier" "$SERVE_LOG")" -ge 2 ]'
check "the router resumed the request on them" 'grep -q "resuming on" "$SERVE_LOG"'
finish
