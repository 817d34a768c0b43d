// The CPU format a model runs in when nothing chose one: what the plan recommends for it on
// this computer, as `tandem recommend` and the setup assistant would.
#pragma once

#include <optional>
#include <string>

#include "engine/hw/hardware_report.h"
#include "engine/model/loaded_model.h"

namespace tandem::plan {

struct PlannedFormat {
  model::CpuFormat format = model::CpuFormat::Native;
  // The plan's reason for it (the kt-method's), for a log or a window.
  std::string reason;
  // Whether the plan fits this computer's memory in it; where it does not even at 4 bits,
  // packing the weights could only run out of memory.
  bool fits = true;
};

// For a Hugging Face model folder not yet converted, the format of the plan made for it on
// `hardware` at `context` tokens (0: the plan's default), at balanced quality: INT8, rotated
// with AMX, or a smaller one where that does not fit. Nothing for a converted folder or a GGUF
// file, which run in their own formats. Throws std::runtime_error with a sentence where the
// model cannot be planned (a damaged config.json, an architecture Tandem does not run).
std::optional<PlannedFormat> planned_cpu_format(const hw::HardwareReport& hardware,
                                                const std::string& path, std::int64_t context = 0);

}  // namespace tandem::plan
