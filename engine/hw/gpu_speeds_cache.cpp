#include "engine/hw/gpu_speeds_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "engine/files/whole_file.h"
#include "engine/log/log.h"

namespace tandem::hw {
namespace {

namespace fs = std::filesystem;

std::string cache_key(const kernels::cuda::DeviceQuery& q, const kernels::cuda::DeviceInfo& d) {
  return d.name + "|" + d.pci_bus_id + "|" + std::to_string(d.total_bytes) + "|driver " +
         std::to_string(q.driver_version);
}

nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const std::exception& e) {
    log::warn("the GPU speeds cached in {} could not be read ({}); measuring again", path,
              e.what());
  }
  return nlohmann::json::object();
}

void write_cache(const std::string& path, const nlohmann::json& j) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string why = files::write_whole_file(path, j.dump(1) + "\n");
  if (!why.empty())
    log::warn("the GPU speeds could not be kept in {} ({}); they are measured again next time",
              path, why);
}

}  // namespace

std::string default_gpu_speeds_cache() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return (fs::path(xdg) / "tandem" / "gpu-speeds.json").string();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return (fs::path(home) / ".cache" / "tandem" / "gpu-speeds.json").string();
  return {};
}

void attach_gpu_speeds(kernels::cuda::DeviceQuery& gpus, const std::string& cache_path,
                       const MeasureGpuSpeeds& measure) {
  bool any = false;
  for (const auto& d : gpus.devices) any = any || d.usable;
  if (!any) return;
  nlohmann::json cache = cache_path.empty() ? nlohmann::json::object() : read_cache(cache_path);
  bool changed = false;
  for (auto& d : gpus.devices) {
    if (!d.usable) continue;
    const std::string key = cache_key(gpus, d);
    if (cache.contains(key) && cache[key].is_object()) {
      const auto& c = cache[key];
      d.host_to_device_bytes_per_s = c.value("host_to_device_bytes_per_s", 0.0);
      d.memory_bytes_per_s = c.value("memory_bytes_per_s", 0.0);
      d.bf16_flops_per_s = c.value("bf16_flops_per_s", 0.0);
      if (d.host_to_device_bytes_per_s > 0) continue;
    }
    kernels::cuda::GpuSpeeds s;
    std::string error;
    if (!measure(d.index, s, error)) {
      log::warn("the speeds of the {} could not be measured ({}); the planner assumes PCIe 4.0",
                d.name, error);
      continue;
    }
    d.host_to_device_bytes_per_s = s.host_to_device_bytes_per_s;
    d.memory_bytes_per_s = s.memory_bytes_per_s;
    d.bf16_flops_per_s = s.bf16_flops_per_s;
    log::info("{}: {:.1f} GB/s from the host, {:.0f} GB/s memory, {:.0f} TFLOP/s BF16 (measured)",
              d.name, s.host_to_device_bytes_per_s / 1e9, s.memory_bytes_per_s / 1e9,
              s.bf16_flops_per_s / 1e12);
    cache[key] = {{"host_to_device_bytes_per_s", s.host_to_device_bytes_per_s},
                  {"memory_bytes_per_s", s.memory_bytes_per_s},
                  {"bf16_flops_per_s", s.bf16_flops_per_s}};
    changed = true;
  }
  if (changed && !cache_path.empty()) write_cache(cache_path, cache);
}

}  // namespace tandem::hw
