#include "engine/plan/quantization_choice.h"

namespace tandem::plan {

std::vector<QuantizationVerdict> choose_gguf_by_plan(const hw::HardwareReport& hardware,
                                                     ModelLookup& lookup, const PlanWishes& wishes,
                                                     Plan& chosen_plan) {
  std::vector<QuantizationVerdict> verdicts;
  std::string chosen;
  for (const hub::GgufQuantization& q : lookup.gguf_quantizations) {
    ModelLookup trial = lookup;
    choose_gguf_quantization(trial, q.name);
    const Plan p = make_plan(hardware, trial.shape, wishes);
    verdicts.push_back({q.name, q.bytes, p.verdict});
    // Smallest first: the last that fits is the largest.
    if (p.verdict == Verdict::Fits || chosen.empty()) chosen = q.name;
  }
  if (!chosen.empty()) {
    choose_gguf_quantization(lookup, chosen);
    chosen_plan = make_plan(hardware, lookup.shape, wishes);
  }
  return verdicts;
}

}  // namespace tandem::plan
