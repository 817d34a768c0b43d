// `tandem bench --delta-rule`: the CPU's gated DeltaNet layer (Qwen3-Next's linear
// attention: convolution, delta rule, gated norm) at Qwen3-Next-80B-A3B's shapes, token by
// token against a chunk at a time, for a few prompt lengths and thread counts. Random
// inputs: speed does not depend on the values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/measure/kernel_benchmark.h"

namespace tandem::measure {

struct DeltaRuleBenchOptions {
  // Tokens per call; 1 is measured as consecutive decode steps.
  std::vector<std::int64_t> tokens = {1, 64, 512};
  std::vector<int> threads = {2, 1};
  int repetitions = 5;
  double min_sample_seconds = 0.2;
};

struct DeltaRuleBenchRow {
  std::string form;  // "token by token", "chunks of 32"
  int threads = 1;
  std::int64_t tokens = 1;
  RateSamples microseconds_per_token;
};

struct DeltaRuleBenchReport {
  std::string cpu;
  std::string shape;  // in words
  std::vector<DeltaRuleBenchRow> rows;
};

DeltaRuleBenchReport run_delta_rule_benchmark(
    const DeltaRuleBenchOptions& options,
    const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
