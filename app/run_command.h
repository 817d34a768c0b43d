#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/engine_flags.h"

namespace tandem::app {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::int64_t max_tokens = 128;
  bool greedy = false;
  std::uint64_t seed = 0;
  bool seed_given = false;
  int threads = 0;  // 0: the recommended number
  int pools = 0;    // 0: a converted folder's own count, else one per NUMA node
  float temperature = 0.7f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  std::vector<std::string> stop;
  std::int64_t context = 0;  // 0: the model's, at most 4096
  std::string dump_logits;
  std::string cpu_format;  // empty: not given (native, or the profile's)
  int int4_group = 0;      // columns per scale of INT4 packed at load; 0: the default
  bool dense_bf16 = false;
  EngineFlags engine;
};

int run_generate(const RunOptions& options);

}  // namespace tandem::app
