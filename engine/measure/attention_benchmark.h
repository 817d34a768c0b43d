// `tandem bench --attention`: a prompt's attention on the CPU at Qwen3-30B-A3B's shapes (32
// query heads over 4 KV heads of 128) over a BF16 KV cache, after a number of tokens already
// cached: the engine's flash-style path (cpu_ops::attention) against the per-token kernel the
// prompts took before, on the same threads. Random inputs: speed does not depend on the
// values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/measure/kernel_benchmark.h"

namespace tandem::measure {

struct AttentionBenchOptions {
  std::vector<std::int64_t> tokens = {512, 2048};  // prompt lengths
  std::vector<std::int64_t> depths = {0, 8192};    // tokens cached before each prompt
  std::vector<int> threads = {2, 1};
  int repetitions = 3;
  double min_sample_seconds = 0.2;
  backend::KvCacheFormat cache = backend::KvCacheFormat::Bf16;  // bf16 or int8
  // The attention layers' shape: Qwen3-30B-A3B's by default (SmolLM2-135M's is 9 over 3 of 64).
  std::int64_t heads = 32, kv_heads = 4, head_dim = 128;
};

struct AttentionBenchRow {
  std::string form;  // "flash-style", "per token"
  int threads = 1;
  std::int64_t tokens = 0, depth = 0;
  RateSamples gflops;      // 4 x query heads x head_dim per (token, position it sees)
  double peak_gflops = 0;  // the kernel's product instruction's peak on these threads, or 0
  double peak_fraction() const;
};

struct AttentionBenchReport {
  std::string cpu;
  std::string shape;   // in words
  std::string kernel;  // the BF16 attention variant in use
  std::vector<AttentionBenchRow> rows;
  std::vector<InstructionPeak> peaks;
};

AttentionBenchReport run_attention_benchmark(
    const AttentionBenchOptions& options,
    const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
