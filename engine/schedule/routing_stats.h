// How often each (layer, expert) was routed to: what the frequency placement reads and what
// `--record-expert-stats FILE` writes. The file (docs/expert-stats.md) is JSON:
//   {"format": "tandem-expert-stats", "version": 1,
//    "model": {"architecture": "Qwen3MoeForCausalLM", "layers": 48, "experts": 128,
//              "experts_per_token": 8},
//    "tokens": 12345, "counts": [[...one count per expert...], ...one row per layer...]}
// Dense layers have rows of zeros. Recording into an existing file of the same model adds to
// its counts, so several runs build one profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"

namespace tandem::schedule {

// What statistics kept in a model's folder are called: the planner and the setup assistant
// find them there.
inline constexpr const char* kExpertStatsName = "tandem-expert-stats.json";

struct RoutingStatistics {
  std::string architecture;
  std::int64_t layers = 0;
  std::int64_t experts = 0;
  std::int64_t experts_per_token = 0;
  std::uint64_t tokens = 0;
  std::vector<std::vector<std::uint64_t>> counts;  // [layer][expert]

  static RoutingStatistics empty_for(const model::ModelSpec& spec);
  // Empty when the statistics describe `spec`'s experts; otherwise a sentence saying what
  // differs.
  std::string mismatch(const model::ModelSpec& spec) const;
};

// Throws std::runtime_error with a sentence naming the file for anything wrong with it.
RoutingStatistics read_routing_statistics(const std::string& path);
// Writes under a temporary name and renames into place.
void write_routing_statistics(const std::string& path, const RoutingStatistics& stats);
// Adds `hits` ([layer x expert], as measure::Metrics counts them) over `tokens` tokens to the
// statistics in `path` (created when missing) and writes them back. Throws with a sentence
// when the file holds another model's statistics.
void record_routing_statistics(const std::string& path, const model::ModelSpec& spec,
                               const std::vector<std::uint64_t>& hits, std::uint64_t tokens);

}  // namespace tandem::schedule
