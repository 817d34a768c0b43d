// The readable `tandem detect` output.
#pragma once

#include <string>

#include "engine/hw/hardware_report.h"

namespace tandem::hw {

std::string format_report_table(const HardwareReport& report);

}  // namespace tandem::hw
