#include "app/detect_command.h"

#include <cstdio>
#include <iostream>

#include "engine/hw/hardware_report.h"
#include "engine/hw/report_json.h"
#include "engine/hw/report_table.h"

namespace tandem::app {

int run_detect(const DetectOptions& options) {
  hw::ProbeOptions probe;
  probe.disk_path = options.disk_path;
  const hw::HardwareReport report = hw::probe_hardware(probe);
  if (options.json) {
    std::cout << hw::to_json(report).dump(2) << "\n";
  } else {
    std::cout << hw::format_report_table(report);
  }
  return std::cout.good() ? 0 : 1;
}

}  // namespace tandem::app
