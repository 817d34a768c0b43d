#include "engine/hub/preflight.h"

#include <fmt/format.h>

#include "engine/hw/disk_space.h"
#include "engine/hw/hardware_report.h"

namespace tandem::hub {

SpaceVerdict check_free_space(const DownloadPlan& plan, std::uint64_t reserve_bytes) {
  const hw::DiskSpace disk = hw::probe_disk_space(plan.destination);
  SpaceVerdict v;
  v.needed_bytes = plan.bytes_to_fetch() + reserve_bytes;
  v.free_bytes = disk.free_bytes;
  v.measured_path = disk.measured_path;
  if (!disk.error.empty()) {
    v.enough = false;
    v.message = fmt::format(
        "Could not measure the free space for {}: {}. Choose a folder that exists "
        "or can be created.",
        plan.destination, disk.error);
    return v;
  }
  v.enough = v.free_bytes >= v.needed_bytes;
  if (v.enough) {
    v.message = fmt::format("{} to download, {} free on {}.", hw::format_bytes(v.needed_bytes),
                            hw::format_bytes(v.free_bytes), v.measured_path);
  } else {
    v.message = fmt::format(
        "Not enough disk space: {} needs {} more but only {} is free on {}. Free "
        "{} or choose another folder.",
        plan.repo, hw::format_bytes(v.needed_bytes), hw::format_bytes(v.free_bytes),
        v.measured_path, hw::format_bytes(v.needed_bytes - v.free_bytes));
  }
  return v;
}

Preflight run_preflight(const DownloadPlan& plan, const MemoryVerdictSource& memory) {
  Preflight p;
  p.space = check_free_space(plan);
  if (memory) p.memory = memory(plan);
  return p;
}

}  // namespace tandem::hub
