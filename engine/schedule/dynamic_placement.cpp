#include "engine/schedule/dynamic_placement.h"

#include <algorithm>
#include <cmath>

namespace tandem::schedule {

RoutingHistogram::RoutingHistogram(std::int64_t layers, std::int64_t experts,
                                   double half_life_tokens)
    : layers_(layers),
      experts_(experts),
      half_life_(half_life_tokens),
      heat_(static_cast<std::size_t>(layers * experts), 0.0) {}

void RoutingHistogram::add(const std::vector<std::uint64_t>& hits, std::uint64_t tokens) {
  const double decay = std::pow(0.5, static_cast<double>(tokens) / half_life_);
  for (std::size_t i = 0; i < heat_.size(); ++i) {
    heat_[i] = heat_[i] * decay + (i < hits.size() ? static_cast<double>(hits[i]) : 0.0);
  }
}

std::vector<ExpertMove> plan_moves(const RoutingHistogram& histogram,
                                   const ExpertResidency& residency, std::int64_t max_moves,
                                   double margin) {
  struct Cell {
    std::int64_t expert;
    double heat;
  };
  struct Candidate {
    ExpertMove move;
    double gain;
  };
  std::vector<Candidate> candidates;
  const ExpertPlacement placement = residency.placement();
  for (std::size_t l = 0; l < placement.resident.size(); ++l) {
    const auto layer = static_cast<std::int64_t>(l);
    std::vector<Cell> outside, inside;
    for (std::size_t e = 0; e < placement.resident[l].size(); ++e) {
      const auto expert = static_cast<std::int64_t>(e);
      if (residency.in_flight(layer, expert)) continue;
      (placement.resident[l][e] ? inside : outside)
          .push_back({expert, histogram.heat(layer, expert)});
    }
    std::stable_sort(outside.begin(), outside.end(),
                     [](const Cell& a, const Cell& b) { return a.heat > b.heat; });
    std::stable_sort(inside.begin(), inside.end(),
                     [](const Cell& a, const Cell& b) { return a.heat < b.heat; });
    for (std::size_t i = 0; i < std::min(outside.size(), inside.size()); ++i) {
      const Cell& in = outside[i];
      const Cell& out = inside[i];
      if (in.heat < out.heat * (1.0 + margin) || in.heat < out.heat + 1.0) break;
      candidates.push_back({{layer, out.expert, layer, in.expert}, in.heat - out.heat});
    }
  }
  // The largest gains first, wherever they are.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.gain > b.gain; });
  std::vector<ExpertMove> moves;
  for (const Candidate& c : candidates) {
    if (static_cast<std::int64_t>(moves.size()) >= max_moves) break;
    moves.push_back(c.move);
  }
  return moves;
}

DynamicPlacement::DynamicPlacement(ExpertResidency& residency, std::int64_t layers,
                                   std::int64_t experts, double half_life_tokens,
                                   std::uint64_t bytes_per_step)
    : residency_(residency),
      histogram_(layers, experts, half_life_tokens),
      bytes_per_step_(bytes_per_step) {}

DynamicPlacement::Step DynamicPlacement::step(const std::vector<std::uint64_t>& hits,
                                              std::uint64_t tokens) {
  Step s;
  s.arrived = residency_.complete_arrived();
  histogram_.add(hits, tokens);
  const std::uint64_t expert = std::max<std::uint64_t>(1, residency_.expert_bytes());
  credit_ = std::min(credit_ + bytes_per_step_, std::max(bytes_per_step_, expert));
  const auto affordable = static_cast<std::int64_t>(credit_ / expert);
  if (affordable == 0 || residency_.slot_count() == 0) return s;
  for (const ExpertMove& m : plan_moves(histogram_, residency_, affordable)) {
    residency_.start(m);
    credit_ -= expert;
    moved_bytes_ += expert;
    ++s.started;
  }
  return s;
}

}  // namespace tandem::schedule
