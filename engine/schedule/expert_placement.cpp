#include "engine/schedule/expert_placement.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>

namespace tandem::schedule {

std::string_view strategy_name(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::Uniform:
      return "uniform";
    case PlacementStrategy::Frequency:
      return "frequency";
    case PlacementStrategy::FrontLoading:
      return "front-loading";
    case PlacementStrategy::Random:
      return "random";
  }
  return "uniform";
}

bool parse_strategy(std::string_view name, PlacementStrategy& out) {
  for (PlacementStrategy s : {PlacementStrategy::Uniform, PlacementStrategy::Frequency,
                              PlacementStrategy::FrontLoading, PlacementStrategy::Random}) {
    if (name == strategy_name(s)) {
      out = s;
      return true;
    }
  }
  return false;
}

std::string strategy_names() {
  return "uniform, frequency, front-loading or random";
}

std::int64_t ExpertPlacement::count() const {
  std::int64_t n = 0;
  for (std::size_t l = 0; l < resident.size(); ++l) n += count(static_cast<std::int64_t>(l));
  return n;
}

std::int64_t ExpertPlacement::count(std::int64_t layer) const {
  const auto& l = resident[static_cast<std::size_t>(layer)];
  return std::count(l.begin(), l.end(), true);
}

ExpertPlacement place_experts(PlacementStrategy strategy, const std::vector<bool>& layer_is_moe,
                              std::int64_t experts, std::int64_t per_layer,
                              const RoutingStatistics* stats, std::uint64_t seed) {
  ExpertPlacement p;
  p.resident.resize(layer_is_moe.size());
  std::vector<std::int64_t> moe_layers;
  for (std::size_t l = 0; l < layer_is_moe.size(); ++l) {
    if (!layer_is_moe[l]) continue;
    p.resident[l].assign(static_cast<std::size_t>(experts), false);
    moe_layers.push_back(static_cast<std::int64_t>(l));
  }
  per_layer = std::clamp<std::int64_t>(per_layer, 0, experts);
  std::int64_t total = per_layer * static_cast<std::int64_t>(moe_layers.size());
  if (total == 0) return p;
  // Every (MoE layer, expert) pair, for the strategies that choose across layers.
  std::vector<std::pair<std::int64_t, std::int64_t>> cells;
  for (std::int64_t l : moe_layers)
    for (std::int64_t e = 0; e < experts; ++e) cells.emplace_back(l, e);
  const auto take = [&](std::pair<std::int64_t, std::int64_t> c) {
    p.resident[static_cast<std::size_t>(c.first)][static_cast<std::size_t>(c.second)] = true;
  };
  switch (strategy) {
    case PlacementStrategy::Uniform:
      for (std::int64_t l : moe_layers)
        for (std::int64_t e = 0; e < per_layer; ++e) take({l, e});
      break;
    case PlacementStrategy::FrontLoading:
      for (std::int64_t i = 0; i < total; ++i) take(cells[static_cast<std::size_t>(i)]);
      break;
    case PlacementStrategy::Random: {
      std::mt19937_64 rng(seed);
      std::shuffle(cells.begin(), cells.end(), rng);
      for (std::int64_t i = 0; i < total; ++i) take(cells[static_cast<std::size_t>(i)]);
      break;
    }
    case PlacementStrategy::Frequency: {
      if (stats == nullptr) {
        throw std::invalid_argument(
            "the frequency placement needs recorded routing statistics: record them with "
            "--record-expert-stats FILE during a run, then give that file with --expert-stats "
            "FILE (or choose another placement strategy)");
      }
      const auto count = [&](const std::pair<std::int64_t, std::int64_t>& c) {
        return stats->counts[static_cast<std::size_t>(c.first)][static_cast<std::size_t>(c.second)];
      };
      // Most routed first; ties to the earlier layer and lower id, so the choice is stable.
      std::stable_sort(cells.begin(), cells.end(),
                       [&](const auto& a, const auto& b) { return count(a) > count(b); });
      for (std::int64_t i = 0; i < total; ++i) take(cells[static_cast<std::size_t>(i)]);
      break;
    }
  }
  return p;
}

}  // namespace tandem::schedule
