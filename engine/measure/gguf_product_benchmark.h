// How fast this CPU multiplies by each GGUF block format a model file uses, as decode does:
// one token (or a few) times the file's own matrices of that format, on every SIMD variant
// of the kernels the CPU runs. It shows which formats of a model are slow on a machine, and
// what a variant gains, without loading the model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/measure/kernel_benchmark.h"

namespace tandem::measure {

struct GgufProductBenchOptions {
  std::string path;  // a .gguf file (any part of a split set: its own matrices)
  std::vector<std::int64_t> tokens = {1};
  int threads = 1;
  int repetitions = 3;
  double min_sample_seconds = 0.2;
  // A pass multiplies by the format's matrices in file order until they reach this many
  // bytes (at least one), so that in a real model they come from memory as in decode.
  std::uint64_t working_set_bytes = std::uint64_t{256} << 20;
  std::uint64_t seed = 1;
};

struct GgufProductRow {
  std::string format;         // "Q4_K"
  std::string first;          // the first matrix of the pass, e.g. "blk.0.ffn_gate_exps.weight"
  std::int64_t matrices = 0;  // in a pass (an expert tensor counts each expert)
  std::int64_t matrices_in_file = 0;
  std::uint64_t pass_bytes = 0;
  std::int64_t tokens = 1;
  std::string variant;             // "avx2", "avx512" (or "scalar" where the CPU has neither)
  std::uint64_t pass_weights = 0;  // multiply-adds a token in a pass
  RateSamples weight_gb_per_s;     // bytes of the pass over seconds per pass
  RateSamples gflops;              // 2 tokens pass_weights over seconds per pass
};

struct GgufProductReport {
  std::string cpu;
  std::string file;
  int threads = 1;
  std::vector<GgufProductRow> rows;  // by format in file order, then tokens, then variant
  // Formats of the file's matrices that the block kernels do not take (F16, BF16, F32 ...).
  std::vector<std::string> other_formats;
};

// Throws std::runtime_error with a sentence when the file cannot be read or has no matrix
// in a GGUF block format.
GgufProductReport run_gguf_product_benchmark(
    const GgufProductBenchOptions& options,
    const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
