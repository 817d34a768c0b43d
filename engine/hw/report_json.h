// The `tandem detect --json` document. Its schema is docs/detect.schema.json; a change that
// removes or renames a field raises kDetectSchemaVersion.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/hw/hardware_report.h"

namespace tandem::hw {

inline constexpr int kDetectSchemaVersion = 1;

nlohmann::json to_json(const HardwareReport& report);

}  // namespace tandem::hw
