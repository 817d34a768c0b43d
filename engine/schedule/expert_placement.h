// Which routed experts live on the accelerator. The count is N per MoE layer, N x (MoE
// layers) in all, as the seeds count --num-gpu-experts; the strategies choose which ones:
//   uniform        N in every MoE layer, the lowest ids (the hot ones are not known yet);
//   frequency      the (layer, expert) pairs routed to most often in recorded statistics,
//                  wherever they are;
//   front-loading  whole layers from the first MoE layer on, until the count is used;
//   random         that many (layer, expert) pairs drawn with a seed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/routing_stats.h"

namespace tandem::schedule {

enum class PlacementStrategy { Uniform, Frequency, FrontLoading, Random };
std::string_view strategy_name(PlacementStrategy s);  // "uniform", "frequency", ...
bool parse_strategy(std::string_view name, PlacementStrategy& out);
// "uniform, frequency, front-loading or random", for messages.
std::string strategy_names();

// resident[layer][expert]: on the accelerator. Dense layers have no entries.
struct ExpertPlacement {
  std::vector<std::vector<bool>> resident;

  std::int64_t count() const;
  std::int64_t count(std::int64_t layer) const;
  bool on_device(std::int64_t layer, std::int64_t expert) const {
    const auto& l = resident[static_cast<std::size_t>(layer)];
    return !l.empty() && l[static_cast<std::size_t>(expert)];
  }
};

// `per_layer` experts per MoE layer on average (clamped to the experts a layer has).
// `stats` is needed by Frequency only (std::invalid_argument with a sentence without it);
// `seed` by Random.
ExpertPlacement place_experts(PlacementStrategy strategy, const std::vector<bool>& layer_is_moe,
                              std::int64_t experts, std::int64_t per_layer,
                              const RoutingStatistics* stats, std::uint64_t seed);

}  // namespace tandem::schedule
