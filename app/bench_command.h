#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/engine_flags.h"

namespace tandem::app {

struct BenchCommandOptions {
  std::string model;
  // -p, -n and -d, each a value or a list (as llama-bench's): with one value each, one run
  // measures the prompt and the decode; with lists, each prompt length and each decode length
  // is a test of its own at each depth.
  std::vector<std::int64_t> prompt_tokens = {512};
  std::vector<std::int64_t> decode_tokens = {128};
  std::vector<std::int64_t> depth_tokens = {0};  // tokens in the KV cache before each test
  std::string trace_path;                        // --trace: the timeline of the counted runs
  int threads = 0;
  int pools = 0;  // 0: a converted folder's own count, else one per NUMA node
  int repetitions = 3;
  // Empty: as a .gguf file is stored (native), else int8.
  std::string cpu_format;
  int int4_group = 0;  // columns per scale of INT4 packed at load; 0: the default
  bool dense_bf16 = false;
  std::string dense = "auto";  // model::DenseBackend: auto, packed or onednn
  bool json = false;
  bool no_warmup = false;
  // The hybrid engine's CPU experts only after the accelerator's, to measure the overlap.
  bool serial = false;
  EngineFlags engine;
  // --kernels: our packed kernels against oneDNN on Qwen3-30B-A3B's matrix shapes instead
  // of a model.
  bool kernels = false;
  // --delta-rule: the CPU's gated DeltaNet layer at Qwen3-Next-80B's shapes, token by token
  // against chunked, at the --tokens counts (default 1, 64, 512).
  bool delta_rule = false;
  // --attention: a prompt's attention at Qwen3-30B-A3B's shapes, flash-style against per
  // token, at the --tokens lengths (default 512, 2048) after -d cached tokens (default 0 and
  // 8192).
  bool attention = false;
  // --attention's shape: query heads, KV heads and head width, "32/4/128" (Qwen3-30B-A3B's).
  std::string attention_shape = "32/4/128";
  // --gguf-products: with -m FILE.gguf, the products of each GGUF block format the file's
  // matrices use, on every SIMD variant this CPU runs (or the one --cpu-variant forces), at
  // the --tokens counts (default 1).
  bool gguf_products = false;
  bool tokens_given = false;
  bool depth_given = false;
  std::vector<std::int64_t> kernel_tokens = {1, 8, 64, 512};
  std::vector<std::string> kernel_formats = {"int8", "bf16"};  // --kernels: int8, int4, bf16, mxfp4
  std::int64_t head_rows = 151936;
  double sample_seconds = 0.2;  // --kernels: shortest time one sample repeats a product
  std::uint64_t working_set_mib = 256;
};

int run_bench(const BenchCommandOptions& options);

struct SynthCommandOptions {
  std::string like;
  std::int64_t layers = 0;
  std::int64_t experts = 0;
  std::string out;
  std::uint64_t seed = 1;
};

int run_synth(const SynthCommandOptions& options);

}  // namespace tandem::app
