#pragma once

#include <cstdint>
#include <string>

namespace tandem::app {

struct PerplexityOptions {
  std::string model;
  std::string file;
  std::int64_t context = 0;  // 0: 512, or the model's positions if fewer
  std::string kl_base;       // a second model folder; empty: no KL divergence
  int threads = 0;           // 0: the recommended number
  int pools = 0;             // 0: a converted folder's own count, else one per NUMA node
  bool json = false;
};

// `tandem perplexity`: how well a model predicts a text file, and with --kl-base how far
// its next-token distributions are from a base model's.
int run_perplexity(const PerplexityOptions& options);

}  // namespace tandem::app
