// Checks before a download starts: is there room on the disk, and (once the planner can
// say) will the model fit this machine's memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "engine/hub/download_plan.h"

namespace tandem::hub {

struct SpaceVerdict {
  bool enough = false;
  std::uint64_t needed_bytes = 0;  // still to fetch
  std::uint64_t free_bytes = 0;
  std::string measured_path;
  std::string message;  // a sentence with the numbers; for a refusal, what to do
};

// Free space where the files go against what is still to fetch, plus `reserve_bytes`.
SpaceVerdict check_free_space(const DownloadPlan& plan, std::uint64_t reserve_bytes = 0);

// What the planner will say about running the model here. Filled in by whoever knows the
// machine and the model (the planner, later); a download without one only checks the disk.
struct MemoryVerdict {
  bool fits = true;
  std::string message;
};
using MemoryVerdictSource = std::function<std::optional<MemoryVerdict>(const DownloadPlan& plan)>;

struct Preflight {
  SpaceVerdict space;
  std::optional<MemoryVerdict> memory;

  // The disk decides; a memory verdict that does not fit is a warning the user may override.
  bool may_start() const { return space.enough; }
};

Preflight run_preflight(const DownloadPlan& plan, const MemoryVerdictSource& memory = {});

}  // namespace tandem::hub
