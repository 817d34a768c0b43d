#pragma once

#include <cstdint>
#include <string>

namespace tandem::app {

struct BenchCommandOptions {
  std::string model;
  std::int64_t prompt_tokens = 512;
  std::int64_t decode_tokens = 128;
  int threads = 0;
  int pools = 0;  // 0: a converted folder's own count, else one per NUMA node
  int repetitions = 3;
  std::string cpu_format = "int8";
  bool json = false;
  bool no_warmup = false;
};

int run_bench(const BenchCommandOptions& options);

struct SynthCommandOptions {
  std::string like;
  std::int64_t layers = 0;
  std::string out;
  std::uint64_t seed = 1;
};

int run_synth(const SynthCommandOptions& options);

}  // namespace tandem::app
