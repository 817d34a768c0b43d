#!/usr/bin/env bash
# Installs everything, builds, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir "${TANDEM_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"
