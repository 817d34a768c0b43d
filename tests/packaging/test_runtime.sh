#!/usr/bin/env bash
# The AppImage runtime on a small image made here: where the image starts, extraction (all,
# and one path), extract-and-run (arguments, exit status, APPIMAGE/APPDIR, nothing left
# behind), and, where this machine allows FUSE mounts, the mount itself (else it says so).
# Usage: test_runtime.sh RUNTIME
set -euo pipefail
runtime=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/AppDir/usr/share/deep/er"
cat > "$work/AppDir/AppRun" <<'RUN'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
echo "args:$*"
echo "appimage:$APPIMAGE"
echo "appdir-matches:$([ "$APPDIR" = "$here" ] && echo yes || echo no)"
cat "$here/usr/share/deep/er/data.txt"
exit 7
RUN
chmod +x "$work/AppDir/AppRun"
head -c 300000 /dev/urandom | base64 > "$work/AppDir/usr/share/deep/er/data.txt"
ln -s usr/share/deep "$work/AppDir/link"
mksquashfs "$work/AppDir" "$work/image.squashfs" -root-owned -noappend -comp zstd -quiet > /dev/null
cat "$runtime" "$work/image.squashfs" > "$work/Test.AppImage"
chmod +x "$work/Test.AppImage"

offset=$("$work/Test.AppImage" --appimage-offset)
[ "$offset" = "$(stat -c %s "$runtime")" ] || fail "offset $offset is not the runtime's size"
echo "ok   --appimage-offset ($offset)"

(cd "$work" && ./Test.AppImage --appimage-extract > /dev/null)
cmp "$work/squashfs-root/usr/share/deep/er/data.txt" "$work/AppDir/usr/share/deep/er/data.txt" ||
  fail "extracted data differs"
[ -x "$work/squashfs-root/AppRun" ] || fail "AppRun lost its mode"
[ "$(readlink "$work/squashfs-root/link")" = "usr/share/deep" ] || fail "the symlink was not kept"
rm -rf "$work/squashfs-root"
(cd "$work" && ./Test.AppImage --appimage-extract usr/share > /dev/null)
[ -f "$work/squashfs-root/usr/share/deep/er/data.txt" ] && [ ! -e "$work/squashfs-root/AppRun" ] ||
  fail "extracting one path extracted more or less"
echo "ok   --appimage-extract (all, and one path)"

export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
status=0
"$work/Test.AppImage" --appimage-extract-and-run one "two words" > "$work/run.out" || status=$?
[ $status -eq 7 ] || fail "extract-and-run returned $status, not AppRun's 7"
grep -qx "args:one two words" "$work/run.out" || fail "the arguments did not reach AppRun"
grep -qx "appimage:$work/Test.AppImage" "$work/run.out" || fail "APPIMAGE is not the image"
grep -qx "appdir-matches:yes" "$work/run.out" || fail "APPDIR is not where AppRun runs"
grep -q "$(head -c 40 "$work/AppDir/usr/share/deep/er/data.txt")" "$work/run.out" || fail "data unread"
[ -z "$(ls -A "$TMPDIR")" ] || fail "the temporary extraction was left behind"
echo "ok   --appimage-extract-and-run (arguments, status, environment, cleanup)"

printf 'not an image' > "$work/Broken.AppImage"
cat "$runtime" >> "$work/Broken.AppImage.tmp"
printf 'garbage after the runtime' >> "$work/Broken.AppImage.tmp"
mv "$work/Broken.AppImage.tmp" "$work/Broken.AppImage"
chmod +x "$work/Broken.AppImage"
if "$work/Broken.AppImage" --appimage-extract-and-run 2> "$work/broken.err"; then
  fail "a damaged image ran"
fi
grep -q "download it again" "$work/broken.err" || fail "a damaged image was not said so: $(cat "$work/broken.err")"
echo "ok   a damaged image is refused with a sentence"

if [ -e /dev/fuse ] && { command -v fusermount3 > /dev/null || [ "$(id -u)" -eq 0 ]; }; then
  status=0
  "$work/Test.AppImage" mounted > "$work/mount.out" 2> "$work/mount.err" || status=$?
  if grep -q "could not be mounted" "$work/mount.err"; then
    echo "note FUSE mounting is not allowed here; the runtime fell back to extraction, as it should"
  fi
  [ $status -eq 7 ] && grep -qx "args:mounted" "$work/mount.out" || fail "the mounted run failed"
  ! grep -q "$work/tmp/.mount_" /proc/mounts || fail "the image stayed mounted"
  echo "ok   mounted with FUSE, run, unmounted"
else
  echo "note no /dev/fuse (or no fusermount3) here: the FUSE mount is not tested on this machine"
fi
