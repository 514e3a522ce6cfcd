#!/usr/bin/env bash
# test_multihost.sh — the multi-host deployment of deploy/README.md on this
# machine: a router, two verifiers and one drafter, each in its own network
# namespace, joined by veth pairs to a bridge that lives in a namespace of
# its own (10.77.0.0/24; the host's network is not touched), the worker
# protocol under CURVE (specd keygen). Checks: requests succeed with output
# equal to the target's plain decoding (specd-generate); with the drafter's
# link down for a while, outputs stay exact (the verifiers decode without
# drafts); with one verifier's link down its lane goes down and new requests
# run on the other lane, exact too. Skipped (77) unless root with `ip netns`.
# Bounded: every wait has a limit; the namespaces are always removed.
# Env: SD_BIN, SD_MODELS (set by CTest).
. "$(dirname "$0")/pipeline_lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP - needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || { echo "SKIP - 'ip netns' is not available"; exit 77; }
P=sd$$                       # namespace / interface prefix, unique per run
NS=(r v1 v2 d)               # router, verifiers, drafter
declare -A IP=([r]=10.77.0.1 [v1]=10.77.0.2 [v2]=10.77.0.3 [d]=10.77.0.4)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  for n in "${NS[@]}" br; do ip netns del "$P-$n" 2>/dev/null; done
  serve_stop_all
}
trap cleanup EXIT

ip netns add "$P-br" && ip -n "$P-br" link add br0 type bridge && ip -n "$P-br" link set br0 up || {
  echo "SKIP - cannot create a bridge in a network namespace"; exit 77; }
for n in "${NS[@]}"; do
  ip netns add "$P-$n"
  ip link add "$P$n" type veth peer name "$P${n}b"
  ip link set "$P$n" netns "$P-$n"
  ip link set "$P${n}b" netns "$P-br"
  ip -n "$P-br" link set "$P${n}b" master br0 up
  ip -n "$P-$n" addr add "${IP[$n]}/24" dev "$P$n"
  ip -n "$P-$n" link set "$P$n" up
  ip -n "$P-$n" link set lo up
done
in_ns() { local n=$1; shift; ip netns exec "$P-$n" "$@"; }
# spawn NS LOG CMD...: CMD in the background in namespace NS; its pid (ip execs CMD) in PIDS — a
# backgrounded in_ns would leave the pid of a subshell, whose child outlives the cleanup's kill
spawn() { local n=$1 log=$2; shift 2; ip netns exec "$P-$n" "$@" >"$log" 2>&1 & PIDS+=("$!"); }
link() { ip -n "$P-$1" link set "$P$1" "$2"; } # link NS up|down

"$BIN/specd" keygen "$WORK/keys" >/dev/null
spawn d "$WORK/drafter.log" "$BIN/specd-drafter" --model "$DRAFT" --listen "tcp://${IP[d]}:5556" --threads 1 \
  --curve-keys "$WORK/keys"
for v in v1 v2; do
  spawn "$v" "$WORK/$v.log" "$BIN/specd-verifier" --model "$TARGET" --listen "tcp://${IP[$v]}:5555" \
    --drafter "tcp://${IP[d]}:5556" --threads 1 --curve-keys "$WORK/keys"
done
spawn r "$WORK/router.log" "$BIN/specd-router" --host "${IP[r]}" --port 8000 --verifier "tcp://${IP[v1]}:5555" \
  --verifier "tcp://${IP[v2]}:5555" --tokenizer "$TARGET/tokenizer.json" --model-name tinycode-16m \
  --curve-keys "$WORK/keys" --health-interval-ms 300 --health-misses 3
R=http://${IP[r]}:8000
rcurl() { in_ns r curl -s -m 60 "$@"; }
lane_up() { rcurl "$R/metrics" | awk -v ep="tcp://$1:5555" '$1 == "specd_lane_up{lane=\"" ep "\"}" { print $2 }'; }
up=false
for i in $(seq 300); do
  [ "$(lane_up "${IP[v1]}")" = 1 ] && [ "$(lane_up "${IP[v2]}")" = 1 ] && { up=true; break; }
  sleep 0.1
done
# the drafter warms up before it listens: wait for both verifiers to hear it, so that the first request drafts
for i in $(seq 300); do
  grep -q "drafter is answering" "$WORK/v1.log" && grep -q "drafter is answering" "$WORK/v2.log" && break
  sleep 0.1
done
check "router, 2 verifiers and the drafter came up across namespaces (CURVE)" \
  '$up && grep -q "drafter is answering" "$WORK/v1.log" && grep -q "drafter is answering" "$WORK/v2.log"'

PROMPTS=("def fibonacci(n):" "import json\ndef load(path):" "class Queue:\n    def __init__(self):")
for k in 0 1 2; do reference "$(printf "${PROMPTS[$k]}")" "$WORK/ref$k" --max-tokens 96 --ignore-eos; done
# exact K [EXTRA]: prompt K greedily through the router (EXTRA: more request fields) equals its reference
exact() {
  rcurl "$R/v1/completions" -o "$WORK/out$1.json" -d "$(body "$(printf "${PROMPTS[$1]}")" 96 0 ${2:+"$2"})" &&
    text_of "$WORK/out$1.json" "$WORK/text$1" && cmp -s "$WORK/text$1" "$WORK/ref$1"
}
# prompt 0 asks for its drafts (the adaptive scheduler may find none worth it on a loaded machine: once
# in CI, 0 accepted), so that the drafter's link across the namespaces is what the next check sees
check "requests across the namespaces equal plain decoding" \
  'exact 0 "{\"speculative\": {\"num_draft\": 4}}" && exact 1 && exact 2'
acc=$(jget "$WORK/out0.json" 'j["speculative"]["accepted_tokens"]')
check "the drafter's drafts were used (accepted $acc)" '[ "${acc:-0}" -gt 0 ]'

link d down
check "drafter link down: outputs stay exact" 'exact 0 && exact 1'
link d up
sleep 2
check "drafter link back: outputs exact" 'exact 2'

link v1 down
down=false
for i in $(seq 100); do [ "$(lane_up "${IP[v1]}")" = 0 ] && { down=true; break; }; sleep 0.1; done
check "a verifier's link down: its lane goes down" '$down'
check "new requests run on the other lane, exact" 'exact 0 && exact 1 && exact 2'
check "the lane up is the other one" '[ "$(lane_up "${IP[v2]}")" = 1 ]'
link v1 up
back=false
for i in $(seq 100); do [ "$(lane_up "${IP[v1]}")" = 1 ] && { back=true; break; }; sleep 0.1; done
check "the link back: the lane comes back up" '$back'
finish
