#pragma once

#include <cstdint>
#include <string>

#include "engine/hw/hardware_report.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"
#include "engine/plan/quantization_choice.h"

namespace tandem::app {

struct RecommendOptions {
  std::string model;  // a model folder, a .gguf file, a catalog id or a Hugging Face repository
  std::int64_t context = 8192;
  bool context_given = false;  // -c was on the command line
  std::string quality = "balanced";
  std::string hardware;  // a recorded `tandem detect --json` file instead of this machine
  bool json = false;
  std::string save;  // write the profile here ("" : do not save)
  // Recorded routing statistics (default: the model folder's tandem-expert-stats.json).
  std::string expert_stats;
  // For a GGUF repository: the quantisation to plan for ("": the largest that fits).
  std::string quant;
};

int run_recommend(const RecommendOptions& options);

struct PlannedModel {
  plan::ModelLookup model;
  hw::HardwareReport hardware;
  plan::Plan plan;
  // A GGUF repository's quantisations with their verdicts here, smallest first.
  std::vector<plan::QuantizationVerdict> quantizations;
};
// The model looked up and planned for this machine (or the recorded one) as `tandem
// recommend` plans it. Throws std::runtime_error with a sentence.
PlannedModel plan_model(const RecommendOptions& options);

}  // namespace tandem::app
