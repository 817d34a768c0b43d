#include "app/recommend_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/hw/hardware_report.h"
#include "engine/model/gguf_file.h"
#include "engine/plan/catalog.h"
#include "engine/plan/gguf_shape.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/run_profile.h"
#include "engine/schedule/routing_stats.h"

namespace tandem::app {

int run_recommend(const RecommendOptions& o) {
  namespace fs = std::filesystem;
  try {
    nlohmann::json config;
    std::string source;
    std::string stats_file = o.expert_stats;
    std::optional<plan::ModelShape> gguf_shape;
    if (fs::is_regular_file(o.model) && fs::path(o.model).extension() == ".gguf") {
      gguf_shape = plan::model_shape_from_gguf(model::GgufFile(o.model));
    } else if (fs::is_directory(o.model)) {
      source = (fs::path(o.model) / "config.json").string();
      std::ifstream in(source);
      if (!in)
        throw std::runtime_error(source + " is missing; give a model folder or a catalog id.");
      config = nlohmann::json::parse(in);
      // Statistics recorded into the model folder under the conventional name.
      if (o.expert_stats.empty() && fs::exists(fs::path(o.model) / schedule::kExpertStatsName))
        stats_file = (fs::path(o.model) / schedule::kExpertStatsName).string();
    } else if (const plan::CatalogEntry* e = plan::find_catalog_entry(o.model);
               e != nullptr && !e->config.is_null()) {
      source = "catalog entry " + e->id;
      config = e->config;
    } else {
      std::string ids;
      for (const auto& e : plan::catalog()) {
        if (!e.config.is_null()) ids += (ids.empty() ? "" : ", ") + e.id;
      }
      throw std::runtime_error(
          "\"" + o.model +
          "\" is neither a model folder, a .gguf file nor a catalog model. Catalog models: " + ids +
          ".");
    }
    const plan::ModelShape shape =
        gguf_shape ? *gguf_shape : plan::model_shape_from_config(config, source);

    hw::HardwareReport hardware;
    if (!o.hardware.empty()) {
      std::ifstream in(o.hardware);
      if (!in)
        throw std::runtime_error("cannot read " + o.hardware +
                                 "; give a file written by tandem detect --json.");
      hardware = plan::hardware_from_json(nlohmann::json::parse(in));
    } else {
      hardware = hw::probe_hardware({});
    }
    plan::PlanWishes wishes;
    wishes.context_tokens = o.context;
    if (!stats_file.empty()) {
      const schedule::RoutingStatistics s = schedule::read_routing_statistics(stats_file);
      if (s.experts != shape.experts || s.layers != shape.layers)
        throw std::runtime_error(stats_file + " holds the routing of a model with " +
                                 std::to_string(s.layers) + " layers of " +
                                 std::to_string(s.experts) +
                                 " experts, not this one; give this model's statistics.");
      wishes.expert_stats = stats_file;
    }
    if (!plan::parse_quality(o.quality, wishes.quality))
      throw std::runtime_error("--quality must be quality, balanced or speed.");
    const plan::Plan p = plan::make_plan(hardware, shape, wishes);

    nlohmann::json doc = plan::to_json(p);
    doc["model"] = o.model;
    doc["architecture"] = shape.architecture;
    doc["total_params"] = shape.total_params();
    doc["active_params_per_token"] = shape.active_params_per_token();
    if (!o.save.empty()) plan::write_run_profile(o.save, doc);
    if (o.json) {
      std::cout << doc.dump(2) << "\n";
    } else {
      std::cout << shape.architecture << ": " << shape.total_params() / 1000000000.0
                << "B parameters, " << shape.active_params_per_token() / 1000000000.0
                << "B active per token\n\n"
                << plan::format_plan(p);
      if (!o.save.empty()) std::cout << "\nProfile saved to " << o.save << "\n";
    }
    return p.verdict == plan::Verdict::DoesNotFit ? 3 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
}

}  // namespace tandem::app
