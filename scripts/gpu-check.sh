#!/usr/bin/env bash
# One short run on a machine with an NVIDIA GPU that answers whether Tandem's CUDA backend
# works and how fast the hybrid engine is there:
#   1. builds Tandem with CUDA for this GPU's architecture (build-gpu/, only what is needed);
#   2. runs the CUDA tests: every backend operation against the CPU (tst_backend_ops), the
#      hybrid engine on every fixture family against the CPU's greedy tokens
#      (tst_hybrid_engine), and the host side of the weight layout (tst_device_rows); and the
#      CPU kernels' tests, which check every variant this machine's CPU runs (AMX on the
#      Xeons these GPUs come in, which the development machines may lack);
#   3. benchmarks an 8-layer Qwen3-30B-A3B-shaped synthetic model (random BF16 weights):
#      all on the CPU (and, where the CPU has AMX, again with the AVX-512 variant, and the
#      matrix kernels and the prompt attention alone in both variants), then N experts per layer on the GPU for a few N,
#      then layerwise prefill of a 2048-token prompt;
#   4. writes every result as JSON, the logs, and a short table (summary.md) into one folder.
#
#   scripts/gpu-check.sh [OUT_DIR]        (default: gpu-check-out/)
#   scripts/gpu-check.sh --kernels [OUT_DIR]
#       only the CUDA kernels against their own references (tests/kernels/tst_cuda_ops.cu),
#       built with nvcc alone: for a machine with the CUDA toolkit but none of Tandem's
#       other build dependencies (no Qt, hwloc or oneDNN), in well under a minute.
#   scripts/gpu-check.sh --pack [BUNDLE]   (default: gpu-bundle.tar.xz)
#       on a machine with the build dependencies and nvcc but no GPU: builds the binaries of
#       steps 2 and 3 for TANDEM_CUDA_ARCH (default 90, Hopper) and packs them with every
#       shared library they load but the C library's own, and Qt's offscreen platform, into
#       one file (about 40 MB);
#   scripts/gpu-check.sh --bundle BUNDLE [OUT_DIR]
#       on the GPU machine, in a checkout of the same commit (for the test data): steps 2 to 4
#       with the packed binaries, nothing built or installed. The way to check a GPU machine
#       that has no package archive to install the build dependencies from.
#
# Needs the NVIDIA driver and the CUDA toolkit (nvcc) and Tandem's build dependencies
# (scripts/install-deps.sh installs them where the machine can reach Debian's archive; set
# TANDEM_SKIP_DEPS=1 where they are already there). Made to finish in under 8 minutes on
# 16 cores: each step has its own time limit, and a step that fails is recorded, not fatal.
set -uo pipefail
cd "$(dirname "$0")/.."
# The CPU kernels' tests: each runs every variant the CPU it runs on has.
cpu_tests=(tst_isa tst_packed_matmul tst_attention tst_gguf_matmul tst_dense_matmul
  tst_compute_peak)
kernels_only=0
bundle=""
if [ "${1:-}" = "--kernels" ]; then
  kernels_only=1
  shift
elif [ "${1:-}" = "--pack" ]; then
  pack=$(realpath -m "${2:-gpu-bundle.tar.xz}")
  build=${TANDEM_GPU_BUILD_DIR:-build-gpu}
  arch=${TANDEM_CUDA_ARCH:-90}
  targets=(tandem tst_cuda_ops tst_backend_ops tst_hybrid_engine tst_device_rows
    "${cpu_tests[@]}")
  configured=$(cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch") || exit 1
  if ! grep -q "CUDA kernels ON" <<<"$configured"; then
    echo "nvcc was not found: the binaries would have no CUDA kernels to check" >&2
    exit 1
  fi
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || exit 1
  stage=$(mktemp -d)
  mkdir -p "$stage/bundle/bin" "$stage/bundle/lib" "$stage/bundle/plugins/platforms"
  for t in "${targets[@]}"; do
    cp "$(find "$build" -name "$t" -type f -perm -u+x | head -1)" "$stage/bundle/bin/"
  done
  offscreen=$(find /usr/lib -path '*qt6/plugins/platforms/libqoffscreen.so' | head -1)
  cp "$offscreen" "$stage/bundle/plugins/platforms/"
  # Every library the binaries and the plugin load, but the C library's own (the GPU
  # machine's is used: the bundle needs one as new as the build machine's, glibc 2.36).
  ldd "$stage"/bundle/bin/* "$offscreen" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/bundle/lib/"; done
  strip --strip-unneeded "$stage"/bundle/bin/* "$stage"/bundle/lib/* \
    "$stage"/bundle/plugins/platforms/* 2>/dev/null
  # The tests read their fixtures where this checkout is; the GPU machine links it there.
  pwd >"$stage/bundle/source-dir"
  git rev-parse HEAD >"$stage/bundle/commit" 2>/dev/null || true
  tar -cf - -C "$stage" bundle | xz -9 -T0 >"$pack" || exit 1
  rm -rf "$stage"
  echo "packed $(du -h "$pack" | cut -f1) into $pack (binaries for sm_$arch)"
  exit 0
elif [ "${1:-}" = "--bundle" ]; then
  bundle=$(realpath -m "${2:?--bundle needs the file --pack wrote}")
  shift 2
fi
out=$(realpath -m "${1:-gpu-check-out}")
mkdir -p "$out"
build=${TANDEM_GPU_BUILD_DIR:-build-gpu}
jobs=$(nproc)
started=$(date +%s)
status=0
say() { echo "[gpu-check $(($(date +%s) - started)) s] $*" | tee -a "$out/steps.log"; }

nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version,compute_cap \
  --format=csv >"$out/gpus.csv" 2>&1 || true
say "GPUs: $(tail -n +2 "$out/gpus.csv" | tr '\n' ';')"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
arch=${TANDEM_CUDA_ARCH:-${cap:-90}}

if [ "$kernels_only" = 1 ]; then
  say "building the kernel test for sm_$arch with nvcc alone"
  if ! nvcc -std=c++17 -O2 -arch=sm_"$arch" -I. tests/kernels/tst_cuda_ops.cu kernels/cuda/*.cu \
    -o "$out/tst_cuda_ops" >"$out/build.log" 2>&1; then
    say "build failed (build.log)"
    exit 1
  fi
  "$out/tst_cuda_ops" | tee "$out/tst_cuda_ops.txt"
  status=${PIPESTATUS[0]}
  say "done (status $status)"
  exit "$status"
fi

if [ -n "$bundle" ]; then
  unpacked=$(mktemp -d)
  tar -xJf "$bundle" -C "$unpacked" || {
    say "cannot unpack $bundle"
    exit 1
  }
  B="$unpacked/bundle"
  say "packed binaries of $(cat "$B/commit" 2>/dev/null || echo "an unknown commit")"
  export LD_LIBRARY_PATH="$B/lib" QT_PLUGIN_PATH="$B/plugins"
  for exe in "$B"/bin/*; do
    ldd "$exe" | grep "not found" | sed "s|^|$(basename "$exe") needs|" | tee -a "$out/steps.log"
  done
  packed_at=$(cat "$B/source-dir")
  if [ "$packed_at" != "$(pwd)" ] && [ ! -e "$packed_at/tests/data" ]; then
    mkdir -p "$(dirname "$packed_at")" && ln -sfn "$(pwd)" "$packed_at" ||
      say "the tests look for their data in $packed_at, which cannot be made here"
  fi
  exe_of() { echo "$B/bin/$1"; }
else
  if [ "${TANDEM_SKIP_DEPS:-0}" != 1 ]; then
    ./scripts/install-deps.sh >"$out/deps.log" 2>&1 || say "install-deps failed (see deps.log)"
  fi

  say "configuring for sm_$arch"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$out/configure.log" 2>&1; then
    say "configure failed (configure.log)"
    exit 1
  fi
  say "building"
  if ! timeout 300 cmake --build "$build" -j"$jobs" --target tandem tst_cuda_ops \
    tst_backend_ops tst_hybrid_engine tst_device_rows "${cpu_tests[@]}" >"$out/build.log" 2>&1; then
    say "build failed (build.log)"
    exit 1
  fi
  grep -q "CUDA kernels ON" "$out/configure.log" || say "warning: this build has no CUDA kernels"
  exe_of() { find "$build" -name "$1" -type f -perm -u+x | head -1; }
fi

tandem=$(exe_of tandem)
"$tandem" detect --json >"$out/detect.json" 2>"$out/detect.log" || true

say "running tst_cuda_ops"
if timeout 120 "$(exe_of tst_cuda_ops)" >"$out/tst_cuda_ops.txt" 2>&1; then
  say "tst_cuda_ops passed"
else
  say "tst_cuda_ops FAILED (tst_cuda_ops.txt)"
  status=1
fi
for t in tst_device_rows tst_backend_ops tst_hybrid_engine "${cpu_tests[@]}"; do
  exe=$(exe_of "$t")
  say "running $t"
  if QT_QPA_PLATFORM=offscreen TANDEM_LOG_TO_FILE=0 timeout 240 "$exe" -o "$out/$t.txt,txt" \
    >/dev/null 2>&1; then
    say "$t passed"
  else
    say "$t FAILED ($t.txt)"
    status=1
  fi
done

model=${TANDEM_GPU_CHECK_MODEL:-$build/q30-8l}
if [ ! -f "$model/config.json" ]; then
  say "writing the 8-layer Qwen3-30B-A3B-shaped model"
  "$tandem" synth --like qwen3-30b-a3b --layers 8 --out "$model" >"$out/synth.log" 2>&1 ||
    say "synth failed (synth.log)"
fi

bench() {  # NAME ARGS...
  local name=$1
  shift
  say "bench $name: $*"
  if ! timeout 150 "$tandem" bench -m "$model" --json -r 2 "$@" >"$out/bench-$name.json" \
    2>"$out/bench-$name.log"; then
    say "bench $name failed (bench-$name.log)"
    status=1
  fi
}
bench cpu --accelerator none -p 512 -n 32
# AMX against AVX-512 on the same machine: end to end on every core, and kernel by kernel on
# 2 threads, as the AMX targets were stated.
if grep -q amx_int8 /proc/cpuinfo; then
  bench cpu-avx512 --accelerator none --cpu-variant avx512 -p 512 -n 32
  for variant in amx avx512; do
    say "kernels, $variant"
    timeout 150 "$tandem" bench --kernels --cpu-variant "$variant" --formats int8,int4 -t 2 \
      --tokens 16,512 -r 3 >"$out/kernels-$variant.txt" 2>&1 ||
      say "kernels $variant failed (kernels-$variant.txt)"
    say "prompt attention, $variant"
    timeout 120 "$tandem" bench --attention --cpu-variant "$variant" --tokens 512,2048 -d 0 -t 2 \
      -r 3 >"$out/attention-$variant.txt" 2>&1 ||
      say "attention $variant failed (attention-$variant.txt)"
  done
fi
for n in 0 16 64 128; do
  bench "gpu-$n" --accelerator cuda --num-gpu-experts "$n" -p 512 -n 32
done
bench layerwise-2048 --accelerator cuda --num-gpu-experts 16 --gpu-prefill-token-threshold 1024 \
  -p 2048 -n 0 -r 1

python3 - "$out" "$model" "${cpu_tests[@]}" <<'EOF' || say "summary failed"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("bench-*.json")):
    try:
        j = json.loads(f.read_text())
    except Exception as e:  # a failed run leaves no JSON
        rows.append(f"| {f.stem[6:]} | failed | | | | |")
        continue
    acc = j.get("accelerator") or {}
    p, d = j["prompt"], j["decode"]
    rows.append("| {} | {} | {} | {} | {:.1f} ± {:.1f} | {} |".format(
        f.stem[6:], acc.get("device", "CPU only")[:40], j.get("cpu_variant", "?"),
        acc.get("gpu_experts_per_layer", 0),
        p["mean"], p["stddev"],
        "{:.1f} ± {:.1f}".format(d["mean"], d["stddev"]) if d["tokens"] else "-"))
tests = []
for t in ["tst_cuda_ops", "tst_device_rows", "tst_backend_ops", "tst_hybrid_engine"] + sys.argv[3:]:
    f = out / f"{t}.txt"
    text = f.read_text() if f.exists() else ""
    totals = [l for l in text.splitlines() if l.startswith("Totals:") or l.endswith(" failed")]
    tests.append(f"- {t}: {totals[-1] if totals else 'no result'}")
try:  # the model benchmarked, as its config says
    config = json.loads((pathlib.Path(sys.argv[2]) / "config.json").read_text())
    shape = "{}-layer {}".format(config["num_hidden_layers"], config["architectures"][0])
except Exception:
    shape = sys.argv[2]
summary = "\n".join(["## Tests"] + tests + ["", f"## Hybrid benchmark ({shape}, tokens/s)",
    "| run | device | CPU variant | GPU experts/layer | prompt | decode |",
    "| --- | --- | --- | --- | --- | --- |"] + rows)
(out / "summary.md").write_text(summary + "\n")
json.dump({"tests": tests, "bench": [r for r in rows]}, open(out / "summary.json", "w"), indent=1)
print(summary)
EOF
say "done (status $status)"
exit $status
