// Free disk space where models will be stored.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::hw {

struct DiskSpace {
  std::string path;           // the path asked about
  std::string measured_path;  // the nearest existing folder, which statvfs measured
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;  // available to this (unprivileged) user
  std::string error;
};

// A path that does not exist yet is measured at its nearest existing parent folder.
DiskSpace probe_disk_space(const std::string& path);

}  // namespace tandem::hw
