#!/usr/bin/env bash
# Runs Tandem's AppImage on a clean system: a minimal Debian root made once with debootstrap
# (the base system of a desktop: the C and C++ runtimes, OpenGL/EGL, X11's and Wayland's
# client libraries, fontconfig, FreeType, a font; no Qt, no hwloc, no oneDNN, no curl, no
# -dev package), cached in ~/.cache/tandem/appimage-root. Inside it, with
# --appimage-extract-and-run (no FUSE there): tandem --version, tandem detect --json, tandem
# run on the demo model, and a screenshot of the chat window, written to OUT_DIR to look at.
# A library the image lacks fails the test with its name.
# Usage: scripts/appimage-test.sh [APPIMAGE] [OUT_DIR]   (needs root, for debootstrap and chroot)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --appimage-test

image=${1:-}
if [ -z "$image" ]; then
  ./scripts/appimage.sh > /dev/null
  image=$(ls -t "${TANDEM_BUILD_DIR:-build}"/Tandem-*-x86_64.AppImage | head -1)
fi
image=$(readlink -f "$image")
out=${2:-${TANDEM_BUILD_DIR:-build}/appimage-test}
mkdir -p "$out"
out=$(readlink -f "$out")
if [ "$(id -u)" -ne 0 ]; then
  echo "appimage-test: debootstrap and chroot need root; run it with sudo." >&2
  exit 2
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/tandem
root="$cache/appimage-root"
base=(libstdc++6 libgcc-s1 libgl1 libegl1 libopengl0 libx11-6 libx11-xcb1 libxcb1 libfontconfig1
      libfreetype6 zlib1g libexpat1 libdbus-1-3 libwayland-client0 libwayland-cursor0
      libwayland-egl1 fonts-dejavu-core)
if [ ! -x "$root/bin/sh" ]; then
  echo "appimage-test: making the clean root (once) in $root"
  rm -rf "$root.tmp"
  mkdir -p "$cache"
  debootstrap --variant=minbase --include="$(IFS=,; echo "${base[*]}")" bookworm "$root.tmp" \
    http://deb.debian.org/debian > "$cache/debootstrap.log"
  mv "$root.tmp" "$root"
fi
# A root made before the list grew gets what it lacks.
missing=()
for p in "${base[@]}"; do
  chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  chroot "$root" apt-get update -qq > /dev/null
  chroot "$root" apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
# Clean means clean: none of what Tandem brings may be installed there.
if chroot "$root" dpkg-query -W -f='${Package}\n' 2>/dev/null |
   grep -E '^(libqt6|qt6-|libhwloc|libdnnl|libcurl|libspdlog|libfmt|libutf8proc|libpcre2-16|.*-dev$)'; then
  echo "appimage-test: the clean root has packages Tandem bundles (above); delete $root" >&2
  exit 1
fi

xvfb_pid=
cleanup() {
  [ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null || true
  umount "$root/tmp/.X11-unix" 2>/dev/null || true
  umount "$root/sys" 2>/dev/null || true
  umount "$root/proc" 2>/dev/null || true
  umount "$root/dev" 2>/dev/null || true
  rm -rf "$root/tmp/tandem-test"
}
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
mkdir -p "$root/tmp/tandem-test/home"
cp "$image" "$root/tmp/tandem-test/Tandem.AppImage"

failed=0
# Runs the AppImage in the root; its output in $out/NAME.out and .err.
in_root() {
  local name=$1
  shift
  local status=0
  chroot "$root" /usr/bin/env -i HOME=/tmp/tandem-test/home PATH=/usr/bin:/bin \
    QT_QPA_PLATFORM="${platform:-offscreen}" ${display:+DISPLAY=$display} \
    TANDEM_LOG_TO_FILE=0 LANG=C.UTF-8 \
    /tmp/tandem-test/Tandem.AppImage --appimage-extract-and-run "$@" \
    > "$out/$name.out" 2> "$out/$name.err" || status=$?
  if grep -q "error while loading shared libraries" "$out/$name.err"; then
    echo "FAIL $name: the image lacks $(sed -n 's/.*shared libraries: \([^:]*\):.*/\1/p' "$out/$name.err" | head -1)"
    failed=1
  elif [ $status -ne 0 ]; then
    echo "FAIL $name: exit status $status"
    sed 's/^/    /' "$out/$name.err" | tail -5
    failed=1
  else
    echo "ok   $name"
  fi
  return 0
}

in_root version --version
expected=$("$image" --appimage-extract-and-run --version)
[ "$(cat "$out/version.out")" = "$expected" ] || { echo "FAIL version: $(cat "$out/version.out") is not $expected"; failed=1; }
in_root detect detect --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["schema"]=="tandem.detect"' \
  "$out/detect.out" || { echo "FAIL detect: not the detect document"; failed=1; }
in_root run run -p "And the LORD said unto Moses," -n 16 --seed 1
[ -s "$out/run.out" ] || { echo "FAIL run: the demo model wrote nothing"; failed=1; }
in_root screenshot --screenshot /tmp/tandem-test/chat.png --page chat --size 1024x640
if [ -s "$root/tmp/tandem-test/chat.png" ]; then
  cp "$root/tmp/tandem-test/chat.png" "$out/chat.png"
else
  echo "FAIL screenshot: no picture"
  failed=1
fi
# A real X11 window where the host has Xvfb: the xcb plugin and what it needs, in the root.
if command -v Xvfb > /dev/null; then
  Xvfb :91 -screen 0 1280x800x24 > "$out/xvfb.log" 2>&1 &
  xvfb_pid=$!
  sleep 1
  mkdir -p "$root/tmp/.X11-unix"
  mount --bind /tmp/.X11-unix "$root/tmp/.X11-unix"
  platform=xcb display=:91 in_root screenshot-x11 --screenshot /tmp/tandem-test/chat-x11.png --page chat --size 1024x640
  if [ -s "$root/tmp/tandem-test/chat-x11.png" ]; then
    cp "$root/tmp/tandem-test/chat-x11.png" "$out/chat-x11.png"
  else
    echo "FAIL screenshot-x11: no picture"
    failed=1
  fi
else
  echo "note no Xvfb on this machine (apt install xvfb): the X11 window is not tried"
fi
# Nothing of the extraction is left behind.
if ls -a "$root/tmp" | grep -q '^\.tandem-appimage-'; then
  echo "FAIL cleanup: a temporary extraction was left in the root's /tmp"
  failed=1
fi
echo "AppImage: $image ($(du -h "$image" | cut -f1)); outputs and chat.png in $out"
exit $failed
