#include "engine/hw/gpu_speeds_cache.h"

#include <nlohmann/json.hpp>

#include "engine/files/user_cache.h"
#include "engine/log/log.h"

namespace tandem::hw {
namespace {

std::string cache_key(const kernels::cuda::DeviceQuery& q, const kernels::cuda::DeviceInfo& d) {
  return d.name + "|" + d.pci_bus_id + "|" + std::to_string(d.total_bytes) + "|driver " +
         std::to_string(q.driver_version);
}

}  // namespace

std::string default_gpu_speeds_cache() {
  return files::user_cache_file("gpu-speeds.json");
}

void attach_gpu_speeds(kernels::cuda::DeviceQuery& gpus, const std::string& cache_path,
                       const MeasureGpuSpeeds& measure) {
  bool any = false;
  for (const auto& d : gpus.devices) any = any || d.usable;
  if (!any) return;
  nlohmann::json cache = cache_path.empty()
                             ? nlohmann::json::object()
                             : files::read_cache_object(cache_path, "the GPU speeds");
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
  if (changed && !cache_path.empty())
    files::write_cache_object(cache_path, cache, "the GPU speeds");
}

}  // namespace tandem::hw
