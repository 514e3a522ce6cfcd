#!/usr/bin/env bash
# setup.sh — installs the Debian packages specd needs (only the missing ones,
# with apt-get as root or through sudo) and builds everything with CMake into
# build/ (binaries in build/bin/). Extra CMake flags: SD_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config xz-utils curl python3
      libjansson-dev libpcre2-dev libutf8proc-dev check
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libevent-dev
      libcurl4-openssl-dev gnuplot-nox
      python3-jinja2   # python3-jinja2: the reference renderer of tests/e2e/test_chat_templates.sh
      buildah debootstrap systemd-container)  # only for tests/e2e/test_image.sh and test_systemd_boot.sh (the image; the units under systemd)
# Node.js + npm: only for the end-to-end test that drives the official
# `openai` npm client against the server.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
# promtool + Prometheus: only for the test that checks /metrics with them
# (tests/e2e/test_prometheus.sh).
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || PKGS+=(prometheus)
# systemd-analyze: only for the test of the units in deploy/systemd (tests/e2e/test_deploy_units.sh).
command -v systemd-analyze >/dev/null 2>&1 || PKGS+=(systemd)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${SD_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
