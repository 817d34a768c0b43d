#pragma once

#include <cstdint>
#include <string>

namespace tandem::app {

struct PerplexityOptions {
  std::string model;
  std::string file;
  std::int64_t context = 0;  // 0: 512, or the model's positions if fewer
  std::string kl_base;       // a second model folder; empty: no KL divergence
  // Distributions saved by an earlier run's save_logits, instead of kl_base.
  std::string kl_base_logits;
  std::string save_logits;  // where to save this model's distributions; empty: nowhere
  // How each model's weights are held on the CPU ("native", "int8", ...); empty: the load's
  // default. Comparing formats of one model: -m X --cpu-format int8 --kl-base X
  // --kl-base-cpu-format bf16.
  std::string cpu_format, kl_base_cpu_format;
  // Where each model keeps keys and values: "bf16" or "f32"; the base's empty: the same.
  std::string kv_cache = "bf16", kl_base_kv_cache;
  int int4_group = 0;  // columns per scale of INT4 packed at load (both models); 0: the default
  // Who multiplies the scored model's dense INT8 matrices: "auto" or "packed" (our kernels),
  // or "onednn" (one activation scale per token), to measure what that costs.
  std::string dense = "auto";
  std::string amx_widen_from = "auto";  // --amx-widen-from (forward::parse_widen_from)
  int threads = 0;                      // 0: the recommended number
  int pools = 0;                        // 0: a converted folder's own count, else one per NUMA node
  bool json = false;
};

// `tandem perplexity`: how well a model predicts a text file, and with --kl-base how far
// its next-token distributions are from a base model's.
int run_perplexity(const PerplexityOptions& options);

}  // namespace tandem::app
