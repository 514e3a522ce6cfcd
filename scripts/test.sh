#!/usr/bin/env bash
# test.sh — sets up (packages, the test-only ones too, + build) and runs every test: the Check unit
# suites and the end-to-end tests that start real processes on loopback.
# GPU tests carry the label "gpu" and skip themselves without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
