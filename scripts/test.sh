#!/usr/bin/env bash
# Installs everything, builds, and runs the whole test suite; then its sanitizer pass: the
# parsers of everything Tandem reads from outside (files, templates, requests) and their
# tests, with the fuzz findings' replays, and the CPU kernels' tests, under AddressSanitizer
# and UBSan in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir "${TANDEM_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"

asan=${TANDEM_ASAN_BUILD_DIR:-build-asan}
if [ ! -f "$asan/build.ninja" ]; then
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_SANITIZE=ON \
    -DTANDEM_WITH_CUDA=OFF > /dev/null
fi
cmake --build "$asan" -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$asan" --output-on-failure -j"$(nproc)"
