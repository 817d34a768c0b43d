#include "engine/hw/report_json.h"

#include "engine/version.h"

namespace tandem::hw {
namespace {

using nlohmann::json;

json features_json(const kernels::IsaFeatures& f) {
  json j = json::object();
  for (const auto& info : kernels::kIsaFeatureTable) j[std::string(info.name)] = f.*(info.member);
  return j;
}

std::string_view permission_name(kernels::AmxPermission p) {
  switch (p) {
    case kernels::AmxPermission::Granted:
      return "granted";
    case kernels::AmxPermission::Denied:
      return "denied";
    case kernels::AmxPermission::NotSupported:
      return "not_supported";
  }
  return "not_supported";
}

json cuda_version(int v) {
  if (v <= 0) return nullptr;
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

json nullable(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

std::string_view level_name(FindingLevel l) {
  switch (l) {
    case FindingLevel::Good:
      return "good";
    case FindingLevel::Info:
      return "info";
    case FindingLevel::Warning:
      return "warning";
  }
  return "info";
}

}  // namespace

json to_json(const HardwareReport& r) {
  json cpu = {
      {"vendor", r.isa.identity.vendor},
      {"brand", r.isa.identity.brand},
      {"family", r.isa.identity.family},
      {"model", r.isa.identity.model},
      {"stepping", r.isa.identity.stepping},
      {"features", features_json(r.isa.usable)},
      {"cpuid_features", features_json(r.isa.cpuid)},
      {"os_support", {{"avx", r.isa.os_avx}, {"avx512", r.isa.os_avx512}, {"amx", r.isa.os_amx}}},
      {"amx_permission", permission_name(r.isa.amx_permission)},
      {"amx_detail", nullable(r.isa.amx_detail)},
  };

  json nodes = json::array();
  for (const NumaNode& n : r.topology.numa_nodes) {
    nodes.push_back({{"os_index", n.os_index},
                     {"cpus", n.cpus},
                     {"physical_cores", n.physical_cores},
                     {"memory_bytes", n.memory_bytes}});
  }
  json topology = {
      {"packages", r.topology.packages},
      {"physical_cores", r.topology.physical_cores},
      {"hardware_threads", r.topology.hardware_threads},
      {"l2_cache_bytes", r.topology.l2_cache_bytes},
      {"l2_caches", r.topology.l2_caches},
      {"l3_cache_bytes", r.topology.l3_cache_bytes},
      {"l3_caches", r.topology.l3_caches},
      {"numa_nodes", nodes},
      {"error", nullable(r.topology.error)},
  };

  json devices = json::array();
  for (const GpuDevice& d : r.gpus.devices) {
    devices.push_back(
        {{"index", d.index},
         {"name", d.name},
         {"compute_capability",
          std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
         {"total_bytes", d.total_bytes},
         {"free_bytes", d.free_bytes},
         {"multiprocessors", d.multiprocessors},
         {"pci_bus_id", nullable(d.pci_bus_id)},
         {"usable", d.usable},
         {"not_usable_reason", nullable(d.not_usable)},
         {"measured", d.host_to_device_bytes_per_s > 0
                          ? json{{"host_to_device_bytes_per_s", d.host_to_device_bytes_per_s},
                                 {"memory_bytes_per_s", d.memory_bytes_per_s},
                                 {"bf16_flops_per_s", d.bf16_flops_per_s}}
                          : json(nullptr)}});
  }
  json gpus = {
      {"cuda_compiled", r.gpus.compiled},
      {"driver_version", cuda_version(r.gpus.driver_version)},
      {"runtime_version", cuda_version(r.gpus.runtime_version)},
      {"devices", devices},
      {"reason", nullable(r.gpus.reason)},
  };

  const Recommendation& rec = r.recommendation;
  json recommendation = {
      {"cpu_backend",
       {{"value", backend_id(rec.cpu_backend.value)}, {"reason", rec.cpu_backend.reason}}},
      {"cpu_threads", {{"value", rec.cpu_threads.value}, {"reason", rec.cpu_threads.reason}}},
      {"thread_pools", {{"value", rec.thread_pools.value}, {"reason", rec.thread_pools.reason}}},
  };

  json findings = json::array();
  for (const Finding& f : r.findings) {
    findings.push_back({{"topic", f.topic},
                        {"level", level_name(f.level)},
                        {"headline", f.headline},
                        {"detail", f.detail}});
  }

  return {
      {"schema", "tandem.detect"},
      {"schema_version", kDetectSchemaVersion},
      {"tandem_version", kTandemVersion},
      {"cpu", cpu},
      {"topology", topology},
      {"memory",
       {{"total_bytes", r.memory.total_bytes},
        {"available_bytes", r.memory.available_bytes},
        {"error", nullable(r.memory.error)}}},
      {"gpus", gpus},
      {"disk",
       {{"path", r.disk.path},
        {"measured_path", r.disk.measured_path},
        {"total_bytes", r.disk.total_bytes},
        {"free_bytes", r.disk.free_bytes},
        {"error", nullable(r.disk.error)}}},
      {"recommendation", recommendation},
      {"findings", findings},
  };
}

}  // namespace tandem::hw
