// How the hybrid engine splits a model between the accelerator and the CPU, with the seeds'
// parameter names: --num-gpu-experts, --expert-placement-strategy,
// --max-deferred-experts-per-token, --gpu-prefill-token-threshold,
// --enable-dynamic-expert-update.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/model/model_spec.h"
#include "engine/schedule/expert_placement.h"
#include "engine/schedule/prefill_chunk.h"
#include "engine/schedule/routing_stats.h"

namespace tandem::schedule {

inline constexpr std::uint64_t kDefaultMoveBytesPerStep = 64ull << 20;

struct HybridOptions {
  // Routed experts per MoE layer on the accelerator; -1: as many as fit (experts_that_fit).
  std::int64_t gpu_experts_per_layer = -1;
  PlacementStrategy strategy = PlacementStrategy::Uniform;
  std::optional<RoutingStatistics> stats;  // what Frequency places by
  std::uint64_t random_seed = 42;
  // Each token's lowest-weighted CPU experts of a layer, up to this many, are added to the
  // residual one layer later, so the CPU computes them while the accelerator runs the next
  // layer's attention.
  std::int64_t max_deferred_per_token = 0;
  // Prompts of at least this many tokens run every MoE layer wholly on the accelerator,
  // uploading each layer's CPU-resident experts while the layer before computes; 0: never.
  std::int64_t prefill_token_threshold = 0;
  // Re-place experts from a decayed routing histogram as the model runs.
  bool dynamic_update = false;
  std::uint64_t move_bytes_per_step = kDefaultMoveBytesPerStep;
  double histogram_half_life_tokens = 256;
  // false: the CPU's experts start only when the accelerator's are done (the serial order,
  // for measuring what overlap gains).
  bool overlap = true;
  // What the accelerator keeps room for beside the weights.
  std::int64_t context_tokens = 4096;
  // Tokens a prompt's forward pass takes, there or on the CPU alone; 0: where it runs
  // decides (prefill_chunk_tokens).
  std::int64_t chunk_tokens = 0;
};

// Empty when `options` make sense for `spec`; otherwise a sentence naming the flag.
std::string check_hybrid_options(const HybridOptions& options, const model::ModelSpec& spec);

// The experts per MoE layer that fit in `free_bytes` of accelerator memory, each expert
// `expert_bytes`: N x moe_layers experts, plus, with layerwise prefill, two layers of the
// others for staging (every expert of a layer where the strategy may leave a layer with
// none). The planner sizes its plan with this, the hybrid engine its placement.
std::int64_t experts_that_fit(std::uint64_t free_bytes, std::uint64_t expert_bytes,
                              std::int64_t experts, std::int64_t moe_layers, bool layerwise,
                              PlacementStrategy strategy);
// The staging layerwise prefill needs with `per_layer` experts resident per layer.
std::uint64_t staging_bytes(std::uint64_t expert_bytes, std::int64_t experts,
                            std::int64_t per_layer, PlacementStrategy strategy);

}  // namespace tandem::schedule
