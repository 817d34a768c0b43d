// `tandem bench`: prompt processing and decoding speed as llama-bench measures them (mean
// and standard deviation over repetitions), with the memory bandwidth and the decode
// roofline it implies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/loaded_model.h"

namespace tandem::measure {

struct BenchOptions {
  std::int64_t prompt_tokens = 512;
  std::int64_t decode_tokens = 128;
  int threads = 1;  // in all pools; the pool count is the model's
  int repetitions = 3;
  // One uncounted prompt and decode first, as llama-bench does: the first pass pays for
  // page faults in fresh buffers and the KV cache.
  bool warmup = true;
  std::uint64_t seed = 1;
};

// Mean and sample standard deviation (n - 1) of repeated measurements; 0 when too few.
double sample_mean(const std::vector<double>& values);
double sample_stddev(const std::vector<double>& values);

struct Measurement {
  std::vector<double> tokens_per_s;  // one per repetition
  double mean() const;
  double stddev() const;
};

struct BenchResult {
  Measurement prompt;
  Measurement decode;
  double read_bandwidth_bytes_per_s = 0;
  std::uint64_t active_bytes_per_token = 0;
  double roofline_tokens_per_s() const;
  double roofline_fraction() const;  // decode mean / roofline
};

// Runs on random token ids (no tokenizer needed). `progress` gets a line per step.
BenchResult run_benchmark(const model::LoadedModel& model, const BenchOptions& options,
                          const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
