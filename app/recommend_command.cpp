#include "app/recommend_command.h"

#include <fmt/format.h>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/hub/hub_config.h"
#include "engine/hw/hardware_report.h"
#include "engine/log/log.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"
#include "engine/plan/run_profile.h"
#include "engine/schedule/routing_stats.h"

namespace tandem::app {

PlannedModel plan_model(const RecommendOptions& o) {
  namespace fs = std::filesystem;
  // HF_ENDPOINT and HF_TOKEN as for tandem download; only a repository outside the catalog
  // is asked of the Hub, for its config.json and file list.
  PlannedModel out;
  const hub::HubConfig hub = hub::hub_config_from("", "");
  out.model = plan::lookup_model(hub, o.model);
  const plan::ModelLookup& model = out.model;
  const plan::ModelShape& shape = model.shape;
  std::string stats_file = o.expert_stats;
  // Statistics recorded into the model folder under the conventional name.
  if (model.origin == plan::ModelOrigin::Folder && o.expert_stats.empty() &&
      fs::exists(fs::path(model.path) / schedule::kExpertStatsName))
    stats_file = (fs::path(model.path) / schedule::kExpertStatsName).string();

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
  wishes.context_asked = o.context_given;
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
  if (!out.model.gguf_quantizations.empty()) {
    if (!o.quant.empty()) plan::choose_gguf_quantization(out.model, o.quant);
    // Every quantisation's verdict; without --quant the largest that fits is planned.
    plan::Plan chosen;
    out.quantizations = plan::choose_gguf_by_plan(hardware, out.model, wishes, chosen);
    if (!o.quant.empty()) plan::choose_gguf_quantization(out.model, o.quant);
    // The quantisation planned for, sized from its files' headers (ranged requests, no
    // weights): a mixture keeps some parts in more bits than its average. Sized so, another
    // may fit better, whose headers are read in turn.
    for (int round = 0; round < 3 && out.model.origin == plan::ModelOrigin::Hub &&
                        !plan::gguf_sizes_read(out.model);
         ++round) {
      try {
        plan::read_gguf_sizes(hub, out.model);
      } catch (const std::exception& e) {
        log::info("{}: {}; its parts are sized by the files' bytes per parameter",
                  out.model.gguf_quantization, e.what());
        break;
      }
      if (!o.quant.empty()) break;
      out.quantizations = plan::choose_gguf_by_plan(hardware, out.model, wishes, chosen);
    }
    out.plan = plan::make_plan(hardware, out.model.shape, wishes);
  } else {
    if (!o.quant.empty())
      throw std::runtime_error("--quant chooses among a GGUF repository's quantisations; " +
                               o.model + " is not a GGUF repository.");
    out.plan = plan::make_plan(hardware, shape, wishes);
  }
  out.hardware = std::move(hardware);
  return out;
}

int run_recommend(const RecommendOptions& o) {
  namespace fs = std::filesystem;
  try {
    const PlannedModel planned = plan_model(o);
    const plan::ModelLookup& model = planned.model;
    const plan::ModelShape& shape = model.shape;
    const plan::Plan& p = planned.plan;

    nlohmann::json doc = plan::to_json(p);
    doc["model"] = o.model;
    doc["source"] = plan::to_json(model);
    doc["architecture"] = shape.architecture;
    doc["total_params"] = shape.total_params();
    doc["active_params_per_token"] = shape.active_params_per_token();
    if (!planned.quantizations.empty()) {
      nlohmann::json qs = nlohmann::json::array();
      for (const auto& q : planned.quantizations)
        qs.push_back({{"name", q.name},
                      {"bytes", q.bytes},
                      {"verdict", std::string(plan::verdict_name(q.verdict))}});
      doc["quantization_verdicts"] = qs;
    }
    if (!o.save.empty()) plan::write_run_profile(o.save, doc);
    if (o.json) {
      std::cout << doc.dump(2) << "\n";
    } else {
      std::cout << plan::describe_lookup(model) << "\n";
      if (!planned.quantizations.empty()) {
        std::string fits;
        for (const auto& q : planned.quantizations)
          if (q.verdict == plan::Verdict::Fits) fits += (fits.empty() ? "" : ", ") + q.name;
        std::cout << (fits.empty() ? std::string("None fits this computer as it is.")
                                   : "Fits this computer: " + fits + ".")
                  << " Download the one planned with: tandem download " << model.repo;
        for (const std::string& f : model.chosen_gguf()->files)
          std::cout << " --include \"" << f << "\"";
        std::cout << "\n";
      }
      if (!model.cannot_run.empty())
        std::cout << "Tandem cannot run it yet; this is what it would need. " << model.cannot_run
                  << "\n";
      // As people read them: "30.5 B", "5.7 M".
      const auto count = [](std::int64_t n) {
        const double v = static_cast<double>(n);
        return v >= 1e9   ? fmt::format("{:.1f} B", v / 1e9)
               : v >= 1e6 ? fmt::format("{:.1f} M", v / 1e6)
                          : fmt::format("{}", n);
      };
      std::cout << shape.architecture << ": " << count(shape.total_params()) << " parameters, "
                << count(shape.active_params_per_token()) << " active per token\n\n"
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
