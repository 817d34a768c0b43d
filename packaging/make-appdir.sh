#!/usr/bin/env bash
# Lays out an AppDir (the folder an AppImage is made from) from a Release build:
# the tandem binary, its desktop entry and icon, and the AppRun launcher.
# Usage: packaging/make-appdir.sh [BUILD_DIR] [APPDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
appdir=${2:-$build_dir/Tandem.AppDir}

if [ ! -x "$build_dir/app/tandem" ]; then
  echo "No build found in $build_dir: run ./scripts/build.sh first." >&2
  exit 1
fi
rm -rf "$appdir.tmp"
cmake --install "$build_dir" --prefix "$appdir.tmp/usr"
cp resources/tandem.desktop "$appdir.tmp/tandem.desktop"
cp resources/icons/tandem.svg "$appdir.tmp/tandem.svg"
cat > "$appdir.tmp/AppRun" <<'RUN'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
export LD_LIBRARY_PATH="$here/usr/lib:${LD_LIBRARY_PATH:-}"
exec "$here/usr/bin/tandem" "$@"
RUN
chmod +x "$appdir.tmp/AppRun"
rm -rf "$appdir"
mv "$appdir.tmp" "$appdir"
echo "AppDir ready: $appdir"
if command -v appimagetool >/dev/null 2>&1; then
  appimagetool "$appdir" "$build_dir/Tandem-x86_64.AppImage"
else
  echo "appimagetool is not installed, so no .AppImage was made from it."
fi
