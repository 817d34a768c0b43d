// The dynamic expert update: a routing histogram that forgets (each hit's weight halves
// every `half_life_tokens` tokens), and after each forward pass the moves that bring the
// hottest experts not on the accelerator there in place of the coldest that are, within a
// byte budget per step. Moves run on the copy queue (ExpertResidency), so a token never
// waits for one.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/schedule/expert_residency.h"

namespace tandem::schedule {

class RoutingHistogram {
 public:
  RoutingHistogram(std::int64_t layers, std::int64_t experts, double half_life_tokens);
  // Decays by `tokens` tokens, then adds `hits` ([layer x expert]).
  void add(const std::vector<std::uint64_t>& hits, std::uint64_t tokens);
  double heat(std::int64_t layer, std::int64_t expert) const {
    return heat_[static_cast<std::size_t>(layer * experts_ + expert)];
  }

 private:
  std::int64_t layers_, experts_;
  double half_life_;
  std::vector<double> heat_;
};

// Up to `max_moves` swaps, within a layer, of its hottest non-resident experts for its coldest
// resident ones (so every layer keeps the share of the accelerator its placement gave it),
// each only where the newcomer's heat exceeds the leaver's by the factor 1 + `margin` and by
// at least one hit, so experts do not move back and forth on noise; the largest gains first.
// Experts in flight are left alone.
std::vector<ExpertMove> plan_moves(const RoutingHistogram& histogram,
                                   const ExpertResidency& residency, std::int64_t max_moves,
                                   double margin = 0.25);

class DynamicPlacement {
 public:
  DynamicPlacement(ExpertResidency& residency, std::int64_t layers, std::int64_t experts,
                   double half_life_tokens, std::uint64_t bytes_per_step);

  struct Step {
    int arrived = 0;  // moves that completed
    int started = 0;
  };
  // After a forward pass of `tokens` tokens with these routing hits: enters arrived moves,
  // learns, and starts new moves within the step's budget (an unused budget carries over
  // up to one expert, so experts larger than a step's budget still move).
  Step step(const std::vector<std::uint64_t>& hits, std::uint64_t tokens);
  std::uint64_t moved_bytes() const { return moved_bytes_; }

 private:
  ExpertResidency& residency_;
  RoutingHistogram histogram_;
  std::uint64_t bytes_per_step_;
  std::uint64_t credit_ = 0;
  std::uint64_t moved_bytes_ = 0;
};

}  // namespace tandem::schedule
