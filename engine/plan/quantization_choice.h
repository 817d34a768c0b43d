// Which quantisation of a GGUF repository to download: the largest whose plan fits this
// computer (the least rounding that still fits), or the smallest when none fits.
#pragma once

#include <string>
#include <vector>

#include "engine/hw/hardware_report.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"

namespace tandem::plan {

struct QuantizationVerdict {
  std::string name;
  std::uint64_t bytes = 0;
  Verdict verdict = Verdict::DoesNotFit;
};

// Plans every quantisation of `lookup` (a GGUF repository), chooses one into it as above,
// and returns the verdicts, smallest first, with the chosen one's plan in `chosen_plan`.
std::vector<QuantizationVerdict> choose_gguf_by_plan(const hw::HardwareReport& hardware,
                                                     ModelLookup& lookup, const PlanWishes& wishes,
                                                     Plan& chosen_plan);

}  // namespace tandem::plan
