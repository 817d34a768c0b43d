#!/usr/bin/env bash
# Builds Tandem-VERSION-x86_64.AppImage, offline, from Debian's packages: a Release build,
# an AppDir with every shared library it needs that is not part of the base system (found
# by walking ELF DT_NEEDED from the binary and the Qt plugins it loads; the base system is
# packaging/appimage-excludelist.txt), RPATHs set with patchelf, qt.conf, the desktop entry,
# icon, AppStream metadata (validated) and the demo model; then a squashfs of it behind
# Tandem's own runtime (packaging/runtime/runtime.c, on Debian's squashfuse and libfuse3).
# Usage: scripts/appimage.sh [OUT_DIR]   (default: the build folder)
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh --packaging
./scripts/build.sh
build=${TANDEM_BUILD_DIR:-build}
out=${1:-$build}
version=$("$build/app/tandem" --version)
work="$build/appimage"
appdir="$work/Tandem.AppDir"
multiarch=$(gcc -print-multiarch)
qt_plugins=$(qtpaths6 --query QT_INSTALL_PLUGINS 2>/dev/null || echo "/usr/lib/$multiarch/qt6/plugins")

rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$appdir/usr" > /dev/null

# The Qt plugins Tandem loads: windows on X11 and Wayland (and offscreen for --screenshot),
# images and SVG icons, TLS for the Hub, SQLite for conversations.
plugin_dirs=(platforms xcbglintegrations wayland-shell-integration wayland-decoration-client
             wayland-graphics-integration-client imageformats iconengines
             tls sqldrivers platforminputcontexts)
for d in "${plugin_dirs[@]}"; do
  [ -d "$qt_plugins/$d" ] || { echo "appimage: Qt's $d plugins are missing ($qt_plugins/$d)" >&2; exit 1; }
  mkdir -p "$appdir/usr/plugins/$d"
  cp "$qt_plugins/$d"/*.so "$appdir/usr/plugins/$d/"
done
# Plugins that would drag in a second toolkit or a server stay out.
rm -f "$appdir/usr/plugins/platforms/"{libqvnc.so,libqlinuxfb.so,libqvkkhrdisplay.so,libqeglfs.so,libqminimalegl.so}

mapfile -t exclude < <(grep -v '^#' packaging/appimage-excludelist.txt | grep -v '^$')
excluded() {
  local name=$1 e
  for e in "${exclude[@]}"; do [ "$name" = "$e" ] && return 0; done
  return 1
}
# sonames -> paths, as the dynamic linker would find them on this system
declare -A where
while read -r name path; do
  [ -n "${where[$name]:-}" ] || where[$name]=$path
done < <(ldconfig -p | sed -n 's/^\t\([^ ]*\) (libc6,x86-64[^)]*) => \(.*\)$/\1 \2/p')

declare -A bundled
queue=("$appdir/usr/bin/tandem")
while IFS= read -r -d '' f; do queue+=("$f"); done < <(find "$appdir/usr/plugins" -name '*.so' -print0)
mkdir -p "$appdir/usr/lib"
while [ ${#queue[@]} -gt 0 ]; do
  elf=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r need; do
    [ -n "$need" ] || continue
    excluded "$need" && continue
    [ -n "${bundled[$need]:-}" ] && continue
    path=${where[$need]:-}
    if [ -z "$path" ]; then
      echo "appimage: $elf needs $need, which this system does not have" >&2
      exit 1
    fi
    bundled[$need]=$path
    cp -L "$path" "$appdir/usr/lib/$need"
    queue+=("$appdir/usr/lib/$need")
  done < <(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

# Each finds its libraries beside it: the binary in ../lib, the libraries in their own
# folder, a plugin two levels up.
patchelf --set-rpath '$ORIGIN/../lib' "$appdir/usr/bin/tandem"
for lib in "$appdir/usr/lib"/*.so*; do patchelf --set-rpath '$ORIGIN' "$lib"; done
find "$appdir/usr/plugins" -name '*.so' -exec patchelf --set-rpath '$ORIGIN/../../lib' {} \;
strip --strip-unneeded "$appdir/usr/bin/tandem" "$appdir/usr/lib"/*.so* 2>/dev/null || true
find "$appdir/usr/plugins" -name '*.so' -exec strip --strip-unneeded {} \; 2>/dev/null || true

cat > "$appdir/usr/bin/qt.conf" <<'CONF'
[Paths]
Prefix = ..
Plugins = plugins
CONF

# Desktop integration: the entry and icon at the top (as AppImage tools expect them), and
# the AppStream metadata, checked.
cp resources/tandem.desktop "$appdir/tandem.desktop"
cp resources/icons/tandem.svg "$appdir/tandem.svg"
ln -sf tandem.svg "$appdir/.DirIcon"
mkdir -p "$appdir/usr/share/metainfo"
sed -e "s/@VERSION@/$version/" -e "s/@DATE@/$(date -u +%F)/" packaging/tandem.appdata.xml \
  > "$appdir/usr/share/metainfo/app.tandem.Tandem.appdata.xml"
appstreamcli validate --no-net --explain "$appdir/usr/share/metainfo/app.tandem.Tandem.appdata.xml"
desktop-file-validate "$appdir/tandem.desktop" 2>/dev/null || true

cat > "$appdir/AppRun" <<'RUN'
#!/bin/sh
# Tandem from its AppImage: the binary finds its libraries and plugins by RPATH and qt.conf.
here=$(dirname "$(readlink -f "$0")")
export TANDEM_APPIMAGE=1
exec "$here/usr/bin/tandem" "$@"
RUN
chmod +x "$appdir/AppRun"

# The runtime (built with Tandem, packaging/CMakeLists.txt): only the C library needed.
strip -o "$work/runtime" "$build/packaging/tandem-appimage-runtime"

mksquashfs "$appdir" "$work/image.squashfs" -root-owned -noappend -comp zstd -Xcompression-level 19 \
  -quiet > /dev/null
mkdir -p "$out"
image="$out/Tandem-$version-x86_64.AppImage"
cat "$work/runtime" "$work/image.squashfs" > "$image.part"
chmod +x "$image.part"
mv "$image.part" "$image"
echo "Built $image ($(du -h "$image" | cut -f1)); libraries bundled: ${#bundled[@]}"
