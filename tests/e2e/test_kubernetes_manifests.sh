#!/usr/bin/env bash
# test_kubernetes_manifests.sh — deploy/kubernetes against the Kubernetes API
# schemas: every object of the kustomize base and the example overlay is
# validated by the npm package kubernetes-models (ServiceMonitor by
# @kubernetes-models/prometheus-operator), the kustomizations' references
# resolve (tests/e2e/k8s_validate.mjs), and the router / verifier / drafter
# arguments in the manifests are options the binaries know. Skipped (77)
# without npm or when the registry is unreachable. Env: SD_BIN (CTest).
set -u
BIN=$(cd "${SD_BIN:-$(dirname "$0")/../../build/bin}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
K8S=$(cd "$HERE/../../deploy/kubernetes" && pwd)
command -v npm >/dev/null && command -v node >/dev/null || { echo "SKIP - node / npm not found"; exit 77; }
NODE_DIR=${SD_NODE_DIR:-${HOME:-/tmp}/.cache/specd-e2e-node}
mkdir -p "$NODE_DIR" 2>/dev/null && [ -w "$NODE_DIR" ] || NODE_DIR=${TMPDIR:-/tmp}/specd-e2e-node
KD=$NODE_DIR/k8s
if [ ! -d "$KD/node_modules/kubernetes-models" ]; then
  mkdir -p "$KD"
  if ! npm install --no-save --no-audit --no-fund --prefix "$KD" kubernetes-models@5 \
       @kubernetes-models/prometheus-operator yaml@2 >"$KD/npm.log" 2>&1; then
    echo "SKIP - npm install kubernetes-models failed (npm registry unreachable?):"; tail -n 5 "$KD/npm.log"; exit 77
  fi
fi
FAILS=0
cp "$HERE/k8s_validate.mjs" "$KD/" # ESM resolves packages from the script's folder
ARGS=$(mktemp)
trap 'rm -f "$ARGS"' EXIT
(cd "$KD" && SPECD_ARGS_OUT=$ARGS node k8s_validate.mjs "$K8S"/base/*.yaml "$K8S"/overlays/*/*.yaml) || FAILS=$((FAILS + 1))

# Every --option a container passes is one its binary accepts (its usage names it).
n=0
while read -r bin opt; do
  [ -n "$bin" ] || continue
  n=$((n + 1))
  "$BIN/$bin" --help 2>&1 | grep -q -- "$opt" || { echo "FAIL - $bin does not know $opt"; FAILS=$((FAILS + 1)); }
done <"$ARGS"
[ "$n" -gt 10 ] && echo "ok   - the $n options the containers pass are their binaries' own" ||
  { echo "FAIL - only $n container options found"; FAILS=$((FAILS + 1)); }

[ "$FAILS" -eq 0 ] && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed"; exit 1
