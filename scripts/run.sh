#!/usr/bin/env bash
# Installs everything, builds, and starts Tandem. Arguments are passed to tandem
# (for example: ./scripts/run.sh detect).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec "${TANDEM_BUILD_DIR:-build}/app/tandem" "$@"
