#include "engine/schedule/routing_stats.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "engine/files/whole_file.h"

namespace tandem::schedule {
namespace {

constexpr const char* kFormat = "tandem-expert-stats";
constexpr int kVersion = 1;

std::runtime_error bad(const std::string& path, const std::string& what) {
  return std::runtime_error(path + " is not a usable expert statistics file: " + what +
                            ". Record one with --record-expert-stats FILE.");
}

}  // namespace

RoutingStatistics RoutingStatistics::empty_for(const model::ModelSpec& spec) {
  RoutingStatistics s;
  s.architecture = spec.architecture;
  s.layers = spec.num_layers;
  s.experts = spec.num_experts;
  s.experts_per_token = spec.experts_per_token;
  s.counts.assign(static_cast<std::size_t>(s.layers),
                  std::vector<std::uint64_t>(static_cast<std::size_t>(s.experts), 0));
  return s;
}

std::string RoutingStatistics::mismatch(const model::ModelSpec& spec) const {
  if (layers != spec.num_layers || experts != spec.num_experts) {
    return "they were recorded for a model of " + std::to_string(layers) + " layers with " +
           std::to_string(experts) + " experts, but this one has " +
           std::to_string(spec.num_layers) + " layers with " + std::to_string(spec.num_experts);
  }
  if (!architecture.empty() && architecture != spec.architecture) {
    return "they were recorded for " + architecture + ", but this model is " + spec.architecture;
  }
  return {};
}

RoutingStatistics read_routing_statistics(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot read the expert statistics file " + path +
                             "; check the path.");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw bad(path, std::string("it is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    throw bad(path, "it has no \"format\": \"tandem-expert-stats\"");
  if (j.value("version", 0) != kVersion)
    throw bad(path, "its version is not " + std::to_string(kVersion));
  RoutingStatistics s;
  try {
    const auto& m = j.at("model");
    s.architecture = m.value("architecture", "");
    s.layers = m.at("layers").get<std::int64_t>();
    s.experts = m.at("experts").get<std::int64_t>();
    s.experts_per_token = m.value("experts_per_token", std::int64_t{0});
    s.tokens = j.at("tokens").get<std::uint64_t>();
    s.counts = j.at("counts").get<std::vector<std::vector<std::uint64_t>>>();
  } catch (const nlohmann::json::exception& e) {
    throw bad(path, std::string("a field is missing or of the wrong type (") + e.what() + ")");
  }
  if (s.layers <= 0 || s.experts <= 0 || static_cast<std::int64_t>(s.counts.size()) != s.layers)
    throw bad(path, "\"counts\" does not have one row per layer");
  for (const auto& row : s.counts) {
    if (static_cast<std::int64_t>(row.size()) != s.experts)
      throw bad(path, "a row of \"counts\" does not have one count per expert");
  }
  return s;
}

void write_routing_statistics(const std::string& path, const RoutingStatistics& s) {
  const nlohmann::json j = {{"format", kFormat},
                            {"version", kVersion},
                            {"model",
                             {{"architecture", s.architecture},
                              {"layers", s.layers},
                              {"experts", s.experts},
                              {"experts_per_token", s.experts_per_token}}},
                            {"tokens", s.tokens},
                            {"counts", s.counts}};
  const std::string why = files::write_whole_file(path, j.dump() + '\n');
  if (!why.empty())
    throw std::runtime_error("cannot write the expert statistics to " + path + ": " + why + ".");
}

void record_routing_statistics(const std::string& path, const model::ModelSpec& spec,
                               const std::vector<std::uint64_t>& hits, std::uint64_t tokens) {
  RoutingStatistics s = std::filesystem::exists(path) ? read_routing_statistics(path)
                                                      : RoutingStatistics::empty_for(spec);
  const std::string why = s.mismatch(spec);
  if (!why.empty()) {
    throw std::runtime_error("the expert statistics in " + path + " are of another model: " + why +
                             ". Record into another file.");
  }
  for (std::int64_t l = 0; l < s.layers; ++l) {
    for (std::int64_t e = 0; e < s.experts; ++e) {
      const auto i = static_cast<std::size_t>(l * s.experts + e);
      if (i < hits.size())
        s.counts[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)] += hits[i];
    }
  }
  s.tokens += tokens;
  if (s.architecture.empty()) s.architecture = spec.architecture;
  write_routing_statistics(path, s);
}

}  // namespace tandem::schedule
