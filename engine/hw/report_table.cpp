#include "engine/hw/report_table.h"

#include <fmt/format.h>

namespace tandem::hw {
namespace {

std::string cpu_list(const std::vector<int>& cpus) {
  // Compress runs: 0-15,32-47.
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string cuda_version(int v) {
  return v <= 0 ? "none" : fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

void row(std::string& out, std::string_view key, std::string_view value) {
  out += fmt::format("  {:<18} {}\n", key, value);
}

}  // namespace

std::string format_report_table(const HardwareReport& r) {
  std::string out;
  out += "CPU\n";
  row(out, "Model", r.isa.identity.brand.empty() ? "unknown" : r.isa.identity.brand);
  row(out, "Vendor",
      fmt::format("{} (family {}, model {}, stepping {})", r.isa.identity.vendor,
                  r.isa.identity.family, r.isa.identity.model, r.isa.identity.stepping));
  std::string have, lack;
  for (const auto& info : kernels::kIsaFeatureTable) {
    std::string& list = r.isa.usable.*(info.member) ? have : lack;
    if (!list.empty()) list += " ";
    list += info.name;
  }
  row(out, "Instructions", have.empty() ? "none of the listed" : have);
  row(out, "Missing", lack.empty() ? "none" : lack);
  row(out, "AMX", r.isa.usable.amx_int8 ? "usable (permission granted)" : r.isa.amx_detail);

  out += "\nTopology\n";
  row(out, "Packages", fmt::format("{}", r.topology.packages));
  row(out, "Physical cores", fmt::format("{}", r.topology.physical_cores));
  row(out, "Hardware threads", fmt::format("{}", r.topology.hardware_threads));
  row(out, "L2 cache",
      fmt::format("{} x {}", r.topology.l2_caches, format_bytes(r.topology.l2_cache_bytes)));
  row(out, "L3 cache",
      fmt::format("{} x {}", r.topology.l3_caches, format_bytes(r.topology.l3_cache_bytes)));
  for (const NumaNode& n : r.topology.numa_nodes) {
    row(out, fmt::format("NUMA node {}", n.os_index),
        fmt::format("CPUs {}, {} cores, {}", cpu_list(n.cpus), n.physical_cores,
                    format_bytes(n.memory_bytes)));
  }
  if (!r.topology.error.empty()) row(out, "Note", r.topology.error);

  out += "\nMemory\n";
  if (r.memory.error.empty()) {
    row(out, "Total", format_bytes(r.memory.total_bytes));
    row(out, "Available", format_bytes(r.memory.available_bytes));
  } else {
    row(out, "Error", r.memory.error);
  }

  out += "\nGPUs\n";
  row(out, "CUDA runtime", r.gpus.compiled ? cuda_version(r.gpus.runtime_version) : "not built in");
  row(out, "Driver", cuda_version(r.gpus.driver_version));
  if (r.gpus.devices.empty()) row(out, "Devices", "none: " + r.gpus.reason);
  for (const GpuDevice& d : r.gpus.devices) {
    row(out, fmt::format("GPU {}", d.index),
        fmt::format("{} (compute {}.{}), {} free of {}{}", d.name, d.compute_major, d.compute_minor,
                    format_bytes(d.free_bytes), format_bytes(d.total_bytes),
                    d.usable ? "" : ", not usable: " + d.not_usable));
    if (d.host_to_device_bytes_per_s > 0) {
      row(out, "",
          fmt::format("measured: {:.1f} GB/s from the host, {:.0f} GB/s memory, {:.0f} TFLOP/s "
                      "BF16",
                      d.host_to_device_bytes_per_s / 1e9, d.memory_bytes_per_s / 1e9,
                      d.bf16_flops_per_s / 1e12));
    }
  }

  out += "\nDisk\n";
  if (r.disk.error.empty()) {
    row(out, "Free",
        fmt::format("{} of {} at {}", format_bytes(r.disk.free_bytes),
                    format_bytes(r.disk.total_bytes), r.disk.measured_path));
  } else {
    row(out, "Error", r.disk.error);
  }

  const Recommendation& rec = r.recommendation;
  out += "\nRecommended\n";
  row(out, "CPU backend",
      fmt::format("{}: {}", backend_label(rec.cpu_backend.value), rec.cpu_backend.reason));
  row(out, "CPU threads", fmt::format("{}: {}", rec.cpu_threads.value, rec.cpu_threads.reason));
  row(out, "Thread pools", fmt::format("{}: {}", rec.thread_pools.value, rec.thread_pools.reason));

  out += "\nWhat this means\n";
  for (const Finding& f : r.findings) {
    const char* mark = f.level == FindingLevel::Good      ? "+"
                       : f.level == FindingLevel::Warning ? "!"
                                                          : "-";
    out += fmt::format("  {} {}\n", mark, f.headline);
  }
  return out;
}

}  // namespace tandem::hw
