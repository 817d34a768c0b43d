#!/usr/bin/env bash
# The fuzzing campaign: builds the fuzz targets (fuzz/) with clang, libFuzzer, ASan and
# UBSan in build-fuzz/, then runs each for SECONDS (default 60) on a corpus seeded from
# fuzz/corpus, the test fixtures and the committed findings. An input may not make Tandem
# allocate more than 1 GiB (-malloc_limit_mb), use over 2 GiB, or take over 10 s. Findings
# land in build-fuzz/findings/TARGET/; copy each into fuzz/regressions/TARGET/ once fixed,
# where the normal suite replays it. Prints a table: target, executions, coverage, findings.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
./scripts/install-deps.sh --fuzz
build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTANDEM_FUZZ=ON -DTANDEM_WITH_CUDA=OFF > /dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(safetensors gguf gguf_split gguf_model tokenizer_json jinja model_config manifest
    hub_json openai_request saved_distributions)
fi
cmake --build "$build" -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")

declare -A seeds=(
  [safetensors]="fuzz/corpus/safetensors"
  [gguf]="fuzz/corpus/gguf tests/data/tokenizer/pre-tokenizers"
  [gguf_split]="fuzz/corpus/gguf_split"
  [gguf_model]="fuzz/corpus/gguf_model tests/data/models-gguf"
  [tokenizer_json]="fuzz/corpus/tokenizer_json tests/data/models/qwen3-moe/tokenizer.json tests/data/models/gpt-oss/tokenizer.json"
  [jinja]="fuzz/corpus/jinja tests/data/chat-templates/templates"
  [model_config]="fuzz/corpus/model_config $(ls tests/data/models/*/config.json | tr '\n' ' ')"
  [manifest]="fuzz/corpus/manifest"
  [hub_json]="fuzz/corpus/hub_json tests/data/hub"
  [openai_request]="fuzz/corpus/openai_request"
  [saved_distributions]="fuzz/corpus/saved_distributions"
)
printf '%-16s %12s %10s %9s\n' target executions coverage findings
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  for s in ${seeds[$t]}; do
    if [ -d "$s" ]; then cp -n "$s"/* "$corpus"/ 2>/dev/null || true; else cp -n "$s" "$corpus"/; fi
  done
  [ -d "fuzz/regressions/$t" ] && cp -n "fuzz/regressions/$t"/* "$corpus"/ 2>/dev/null || true
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  log="$build/findings/$t.log"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$t" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$findings/" > "$log" 2>&1 || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(find "$findings" -type f | wc -l)
  printf '%-16s %12s %10s %9s\n' "$t" "${execs:-?}" "${cov:-?}" "$found"
done
echo "Logs and findings: $build/findings/"
