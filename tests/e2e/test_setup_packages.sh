#!/usr/bin/env bash
# test_setup_packages.sh — scripts/run.sh's set-up asks apt for the server's
# packages only, scripts/test.sh's for the test-only ones too, and the
# server's set-up builds the server's programs only. scripts/setup.sh runs
# against stubs: dpkg-query says every package is missing, apt-get and cmake
# record their arguments (nothing is installed or built).
# Environment (set by CTest): SD_ROOT.
set -u
ROOT="${SD_ROOT:?SD_ROOT not set}"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
printf '#!/bin/sh\nexit 1\n' > "$tmp/bin/dpkg-query"
printf '#!/bin/sh\necho "$*" >> "%s/apt.log"\n' "$tmp" > "$tmp/bin/apt-get"
printf '#!/bin/sh\necho "$*" >> "%s/cmake.log"\n' "$tmp" > "$tmp/bin/cmake"
printf '#!/bin/sh\nexec "$@"\n' > "$tmp/bin/sudo"
chmod +x "$tmp/bin/"*

TEST_ONLY="check python3-jinja2 gnuplot-nox buildah debootstrap systemd-container nodejs npm prometheus systemd chromium"
run_setup() { # $1: log suffix, $2...: setup.sh arguments
    local tag=$1; shift
    rm -f "$tmp/apt.log" "$tmp/cmake.log"
    PATH="$tmp/bin:$PATH" bash "$ROOT/scripts/setup.sh" "$@" > "$tmp/out.$tag" 2>&1
    install=$(grep -E '(^| )install ' "$tmp/apt.log" 2>/dev/null)
    configure=$(grep -- '-S . -B build' "$tmp/cmake.log" 2>/dev/null)
}

run_setup server
configure_server=$configure
bad=""
for p in $TEST_ONLY; do grep -qw -- "$p" <<<"$install" && bad="$bad $p"; done
if [ -n "$install" ] && grep -qw libzmq3-dev <<<"$install" && [ -z "$bad" ]; then
    echo "ok   the server's set-up (scripts/run.sh) installs no test-only package"
else
    echo "FAIL the server's set-up asked apt for:$bad (install line: $install)"; cat "$tmp/out.server"; fails=$((fails + 1))
fi
if grep -q -- '--target specd ' "$tmp/cmake.log" && ! grep -qE -- '--build build -j[0-9]+$' "$tmp/cmake.log"; then
    echo "ok   the server's set-up builds the server's programs only"
else
    echo "FAIL the server's set-up builds: $(cat "$tmp/cmake.log")"; fails=$((fails + 1))
fi

run_setup tests --tests
missing=""
for p in check python3-jinja2 gnuplot-nox buildah debootstrap systemd-container chromium libzmq3-dev; do
    grep -qw -- "$p" <<<"$install" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "ok   the tests' set-up (scripts/test.sh) installs the test-only packages too"
else
    echo "FAIL the tests' set-up did not ask for:$missing (install line: $install)"; fails=$((fails + 1))
fi
if grep -qE -- '--build build -j[0-9]+$' "$tmp/cmake.log"; then
    echo "ok   the tests' set-up builds everything"
else
    echo "FAIL the tests' set-up builds: $(cat "$tmp/cmake.log")"; fails=$((fails + 1))
fi
# the same configure line both ways: neither set-up makes the other rebuild
if [ -n "$configure" ] && [ "$configure" = "$configure_server" ]; then
    echo "ok   both configure build/ with the same arguments"
else
    echo "FAIL the two set-ups configure build/ differently: '$configure_server' / '$configure'"; fails=$((fails + 1))
fi
grep -q 'scripts/setup.sh$\|scripts/setup.sh >' "$ROOT/scripts/run.sh" && grep -q 'scripts/setup.sh --tests' "$ROOT/scripts/test.sh" ||
    { echo "FAIL run.sh / test.sh do not call setup.sh as this test assumes"; fails=$((fails + 1)); }
[ $fails -eq 0 ]
