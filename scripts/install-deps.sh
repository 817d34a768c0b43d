#!/usr/bin/env bash
# Installs every system package Tandem needs to build, run and test, from Debian 12.
# Idempotent: packages already present are skipped, so a second run is quick.
# --packaging adds what scripts/appimage.sh needs; --appimage-test, what its clean-root test
# needs as well; --fuzz, clang and libFuzzer for scripts/fuzz.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev libqt6opengl6-dev
  qt6-httpserver-dev qt6-websockets-dev libqt6sql6-sqlite qt6-qpa-plugins libqt6svg6
  libhwloc-dev libdnnl-dev ocl-icd-opencl-dev
  libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libfmt-dev libspdlog-dev libcli11-dev libsecret-1-dev
  libgl-dev libxkbcommon-dev fonts-dejavu-core
  python3 curl openssl
  dbus-daemon gnome-keyring libsecret-tools
  squashfs-tools libsquashfuse-dev libfuse3-dev zlib1g-dev liblzma-dev libzstd-dev liblz4-dev
  liblzo2-dev
)
for arg in "$@"; do
  case "$arg" in
    --packaging | --appimage-test)
      packages+=(patchelf appstream desktop-file-utils qt6-wayland)
      ;;&
    --appimage-test) packages+=(debootstrap) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    --packaging) ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
