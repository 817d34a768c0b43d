// System memory from /proc/meminfo (hwloc under-reports it on some virtual machines).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::hw {

struct MemoryInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
  std::string error;  // set when /proc/meminfo could not be read
};

MemoryInfo probe_memory();
// Parses the text of /proc/meminfo; exposed for tests.
MemoryInfo parse_meminfo(const std::string& text);

}  // namespace tandem::hw
