#include "engine/hw/memory_info.h"

#include <fstream>
#include <sstream>

namespace tandem::hw {

MemoryInfo parse_meminfo(const std::string& text) {
  MemoryInfo info;
  bool have_total = false, have_available = false;
  std::istringstream in(text);
  std::string key;
  std::uint64_t value = 0;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    if (!(row >> key >> value)) continue;
    unit.clear();
    row >> unit;
    const std::uint64_t bytes = unit == "kB" ? value * 1024 : value;
    if (key == "MemTotal:") {
      info.total_bytes = bytes;
      have_total = true;
    } else if (key == "MemAvailable:") {
      info.available_bytes = bytes;
      have_available = true;
    }
  }
  if (!have_total)
    info.error = "/proc/meminfo has no MemTotal line";
  else if (!have_available)
    info.available_bytes = 0,
    info.error = "/proc/meminfo has no MemAvailable line (Linux 3.14 or newer reports it)";
  return info;
}

MemoryInfo probe_memory() {
  std::ifstream file("/proc/meminfo");
  if (!file) {
    MemoryInfo info;
    info.error = "/proc/meminfo could not be read";
    return info;
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_meminfo(text.str());
}

}  // namespace tandem::hw
