#!/usr/bin/env bash
# test_deploy_units.sh — the systemd units of deploy/systemd: every unit
# (the templates as instance lane0) passes `systemd-analyze verify` with the
# binaries of this build in place of /opt/specd/bin, with and without the
# cuda.conf / curve.conf drop-ins, and `systemd-analyze security --offline`
# rates each "OK" or better (exposure <= 4.9: --threshold fails above it).
# Skipped (77) without systemd-analyze. Env: SD_BIN (set by CTest).
set -u
BIN=$(cd "${SD_BIN:-$(dirname "$0")/../../build/bin}" && pwd)
SRC=$(cd "$(dirname "$0")/../../deploy/systemd" && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP - systemd-analyze not found (Debian: systemd)"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILS=0
ok() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }

for variant in plain dropins; do
  D=$WORK/$variant
  mkdir -p "$D"
  cp "$SRC"/*.service "$D"/
  sed -i "s|/opt/specd/bin|$BIN|" "$D"/*.service
  for u in "$D"/*.service; do
    name=$(basename "$u")
    if [ "$variant" = dropins ]; then
      mkdir -p "$D/$name.d"
      cp "$SRC/cuda.conf" "$SRC/curve.conf" "$D/$name.d/"
    fi
    inst=${name/@./@lane0.}
    if out=$(systemd-analyze verify "$D/$inst" 2>&1); then ok "$variant: systemd-analyze verify $inst"
    else fail "$variant: systemd-analyze verify $inst: $out"; fi
    sec=$(systemd-analyze security --offline=true --threshold=49 "$u" 2>&1)
    rc=$?
    level=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p')
    if [ $rc = 0 ] && [ -n "$level" ]; then ok "$variant: $name exposure $level"
    else fail "$variant: $name exposure ${level:-?} (rc $rc)"; fi
  done
done
for f in serve.env router.env verifier-lane0.env drafter-lane0.env; do
  grep -q '^SPECD_[A-Z]*_ARGS=' "$SRC/$f" || fail "$f sets no SPECD_*_ARGS"
done
ok "example environment files"

[ "$FAILS" -eq 0 ] && { echo "all checks passed"; exit 0; }
echo "$FAILS check(s) failed"; exit 1
