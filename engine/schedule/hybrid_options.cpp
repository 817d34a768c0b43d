#include "engine/schedule/hybrid_options.h"

#include <algorithm>

namespace tandem::schedule {

std::string check_hybrid_options(const HybridOptions& o, const model::ModelSpec& spec) {
  const std::int64_t experts = spec.num_experts;
  const std::int64_t k = spec.experts_per_token;
  if (o.gpu_experts_per_layer < -1) {
    return "--num-gpu-experts must be 0 or more (the routed experts per layer on the "
           "accelerator)";
  }
  if (o.gpu_experts_per_layer > experts) {
    return "--num-gpu-experts " + std::to_string(o.gpu_experts_per_layer) + " is more than the " +
           std::to_string(experts) + " routed experts a layer of this model has; give at most " +
           std::to_string(experts);
  }
  if (o.max_deferred_per_token < 0) return "--max-deferred-experts-per-token must be 0 or more";
  if (o.max_deferred_per_token > 0 && o.max_deferred_per_token >= k) {
    return "--max-deferred-experts-per-token " + std::to_string(o.max_deferred_per_token) +
           " would defer every one of the " + std::to_string(k) +
           " experts a token of this model uses; give at most " + std::to_string(k - 1);
  }
  if (o.prefill_token_threshold < 0) {
    return "--gpu-prefill-token-threshold must be 0 (off) or a number of prompt tokens";
  }
  if (o.strategy == PlacementStrategy::Frequency) {
    if (!o.stats) {
      return "the frequency placement needs recorded routing statistics: record them with "
             "--record-expert-stats FILE during a run, then give that file with --expert-stats "
             "FILE (or choose another --expert-placement-strategy)";
    }
    const std::string why = o.stats->mismatch(spec);
    if (!why.empty()) return "the expert statistics do not fit this model: " + why;
  }
  if (o.dynamic_update && o.move_bytes_per_step == 0) {
    return "--dynamic-update-budget must be more than 0 bytes per step";
  }
  return {};
}

std::uint64_t staging_bytes(std::uint64_t expert_bytes, std::int64_t experts,
                            std::int64_t per_layer, PlacementStrategy strategy) {
  const std::int64_t others =
      strategy == PlacementStrategy::Uniform ? experts - per_layer : experts;
  return 2 * static_cast<std::uint64_t>(std::max<std::int64_t>(0, others)) * expert_bytes;
}

std::int64_t experts_that_fit(std::uint64_t free_bytes, std::uint64_t expert_bytes,
                              std::int64_t experts, std::int64_t moe_layers, bool layerwise,
                              PlacementStrategy strategy) {
  if (moe_layers <= 0 || experts <= 0) return 0;
  if (expert_bytes == 0) return experts;
  for (std::int64_t n = experts; n > 0; --n) {
    const std::uint64_t resident = static_cast<std::uint64_t>(n * moe_layers) * expert_bytes;
    const std::uint64_t staging = layerwise ? staging_bytes(expert_bytes, experts, n, strategy) : 0;
    if (resident + staging <= free_bytes) return n;
  }
  return 0;
}

}  // namespace tandem::schedule
