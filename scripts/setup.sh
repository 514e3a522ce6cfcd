#!/usr/bin/env bash
# setup.sh — installs the Debian packages specd needs (only the missing ones,
# with apt-get as root or through sudo) and builds with CMake into build/
# (binaries in build/bin/).
#   scripts/setup.sh            what the server needs, and builds the server's programs (scripts/run.sh)
#   scripts/setup.sh --tests    also the packages only the tests use, and builds everything (scripts/test.sh)
# Both configure build/ the same way, so neither rebuilds what the other
# built: --tests after the server's setup builds only the rest. Extra CMake
# flags: SD_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
[ "${1:-}" = "--tests" ] && tests=1

# The build and the server: compiler, CMake, the libraries specd links.
PKGS=(build-essential cmake pkg-config xz-utils
      libjansson-dev libpcre2-dev libutf8proc-dev
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libevent-dev
      libcurl4-openssl-dev)  # libcurl: specd-bench, the load-test client
if [ $tests -eq 1 ]; then
  PKGS+=(check python3 curl   # Check: the unit suites; python3 and curl: the end-to-end scripts
         clang-format         # tests/e2e/test_format.sh: the tree keeps the house style
         valgrind             # tests/e2e/test_dns_exit_leak.sh: nothing leaks at exit
         gnuplot-nox          # specd-bench's plots (tests/e2e/test_bench_client.sh)
         python3-jinja2       # the reference renderer of tests/e2e/test_chat_templates.sh
         buildah debootstrap systemd-container)  # tests/e2e/test_image.sh and test_systemd_boot.sh
  # Node.js + npm: the tests that drive the official `openai` npm client and the AI SDK.
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
  # headless Chromium (and a font for its screenshots): tests/e2e/test_playground_browser.sh.
  PKGS+=(chromium fonts-dejavu-core)
  # promtool + Prometheus: tests/e2e/test_prometheus.sh.
  command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || PKGS+=(prometheus)
  # systemd-analyze: tests/e2e/test_deploy_units.sh.
  command -v systemd-analyze >/dev/null 2>&1 || PKGS+=(systemd)
fi
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
if [ $tests -eq 1 ]; then
  cmake --build build -j"$(nproc)"
else
  cmake --build build -j"$(nproc)" --target specd specd-router specd-verifier specd-drafter specd-generate \
    specd-tokenize specd-bench
fi
