#include "engine/hw/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tandem::hw {

DiskSpace probe_disk_space(const std::string& path) {
  namespace fs = std::filesystem;
  DiskSpace d;
  d.path = path;
  std::error_code ec;
  fs::path p = fs::absolute(path.empty() ? fs::path(".") : fs::path(path), ec);
  while (!p.empty() && !fs::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  d.measured_path = p.string();
  struct statvfs s {};
  if (statvfs(d.measured_path.c_str(), &s) != 0) {
    d.error = "cannot measure free space at " + d.measured_path + ": " + std::strerror(errno);
    return d;
  }
  d.total_bytes = static_cast<std::uint64_t>(s.f_blocks) * s.f_frsize;
  d.free_bytes = static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
  return d;
}

}  // namespace tandem::hw
