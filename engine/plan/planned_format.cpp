#include "engine/plan/planned_format.h"

#include <filesystem>

#include "engine/hub/hub_config.h"
#include "engine/model/gguf/model.h"
#include "engine/model/manifest.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"

namespace tandem::plan {

std::optional<PlannedFormat> planned_cpu_format(const hw::HardwareReport& hardware,
                                                const std::string& path, std::int64_t context) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (model::is_gguf_path(path) || !fs::is_directory(path, ec) ||
      fs::exists(fs::path(path) / model::kManifestName, ec) ||
      !fs::exists(fs::path(path) / "config.json", ec))
    return std::nullopt;
  // A folder on this computer: the Hub is not asked.
  const ModelLookup lookup = lookup_model(hub::hub_config_from("", ""), path);
  PlanWishes wishes;
  if (context > 0) {
    wishes.context_tokens = context;
    wishes.context_asked = true;
  }
  const Plan plan = make_plan(hardware, lookup.shape, wishes);
  PlannedFormat out;
  if (!model::parse_cpu_format(format_name(plan.cpu_format), out.format))
    throw std::runtime_error("the plan chose the CPU format " +
                             std::string(format_name(plan.cpu_format)) +
                             ", which the engine does not load");
  for (const Parameter& p : plan.parameters)
    if (p.name == "kt-method") out.reason = p.value + ": " + p.reason;
  out.fits = plan.verdict != Verdict::DoesNotFit;
  if (!out.fits) out.reason = plan.verdict_reason;
  return out;
}

}  // namespace tandem::plan
