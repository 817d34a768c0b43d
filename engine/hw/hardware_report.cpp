#include "engine/hw/hardware_report.h"

#include "engine/hw/gpu_speeds_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/log/log.h"

namespace tandem::hw {

std::string_view backend_id(CpuBackend backend) {
  switch (backend) {
    case CpuBackend::AmxInt8:
      return "amx_int8";
    case CpuBackend::Avx512Vnni:
      return "avx512_vnni";
    case CpuBackend::Avx2:
      return "avx2";
    case CpuBackend::Scalar:
      return "scalar";
  }
  return "scalar";
}

std::string_view backend_label(CpuBackend backend) {
  switch (backend) {
    case CpuBackend::AmxInt8:
      return "AMX INT8";
    case CpuBackend::Avx512Vnni:
      return "AVX-512 VNNI";
    case CpuBackend::Avx2:
      return "AVX2";
    case CpuBackend::Scalar:
      return "Scalar";
  }
  return "Scalar";
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

Recommendation recommend(const kernels::IsaReport& isa, const Topology& topo) {
  using kernels::CpuVariant;
  Recommendation r;
  switch (kernels::best_variant(isa.usable)) {
    case CpuVariant::Amx:
      r.cpu_backend = {CpuBackend::AmxInt8,
                       "AMX tile units are present and enabled: they multiply INT8 and BF16 "
                       "matrices several times faster than AVX-512"};
      break;
    case CpuVariant::Avx512:
      r.cpu_backend = {CpuBackend::Avx512Vnni,
                       isa.cpuid.amx_tile
                           ? "AMX is present but not usable (" + isa.amx_detail +
                                 "), so AVX-512 VNNI is the fastest backend"
                           : "AVX-512 with VNNI is the fastest instruction set this CPU has "
                             "(no AMX units)"};
      break;
    case CpuVariant::Avx2:
      r.cpu_backend = {CpuBackend::Avx2,
                       "AVX2 with FMA is the fastest instruction set this CPU has (no AVX-512 "
                       "VNNI)"};
      break;
    case CpuVariant::Scalar:
      r.cpu_backend = {CpuBackend::Scalar,
                       "this CPU lacks AVX2, FMA or F16C, so only the slow portable kernels "
                       "run"};
      break;
  }

  const int cores = std::max(1, topo.physical_cores);
  if (topo.hardware_threads > cores) {
    r.cpu_threads = {cores, fmt::format("one thread per physical core ({} cores); the {} extra "
                                        "hardware threads share execution units and memory "
                                        "bandwidth, so they would not help",
                                        cores, topo.hardware_threads - cores)};
  } else {
    r.cpu_threads = {cores, fmt::format("one thread per physical core ({} {})", cores,
                                        cores == 1 ? "core" : "cores")};
  }

  int nodes_with_cores = 0;
  for (const NumaNode& n : topo.numa_nodes) nodes_with_cores += n.physical_cores > 0 ? 1 : 0;
  nodes_with_cores = std::max(1, nodes_with_cores);
  if (nodes_with_cores == 1) {
    r.thread_pools = {1,
                      "all memory is equally close to every core, so a single pool of workers "
                      "shares it"};
  } else {
    r.thread_pools = {nodes_with_cores,
                      fmt::format("{} NUMA nodes: one thread pool per node, each working on "
                                  "expert weights stored in its own node's memory",
                                  nodes_with_cores)};
  }
  return r;
}

std::vector<Finding> explain(const HardwareReport& report) {
  std::vector<Finding> out;
  const auto& isa = report.isa;
  const auto& u = isa.usable;

  const std::string cpu_name =
      isa.identity.brand.empty() ? isa.identity.vendor : isa.identity.brand;
  out.push_back({"cpu", FindingLevel::Info,
                 fmt::format("{}: {} cores, {} threads", cpu_name, report.topology.physical_cores,
                             report.topology.hardware_threads),
                 fmt::format("{} package{}, L2 {} per core, L3 {}", report.topology.packages,
                             report.topology.packages == 1 ? "" : "s",
                             format_bytes(report.topology.l2_cache_bytes),
                             format_bytes(report.topology.l3_cache_bytes))});

  if (u.amx_int8) {
    out.push_back({"amx", FindingLevel::Good, "AMX found: the fastest CPU backend is available",
                   "Cold experts run on the AMX tile units in INT8 or BF16."});
  } else if (isa.cpuid.amx_tile) {
    out.push_back({"amx", FindingLevel::Warning, "AMX present but not usable", isa.amx_detail});
  } else if (u.avx512_vnni) {
    out.push_back({"amx", FindingLevel::Good,
                   "AVX-512 VNNI found: fast INT8 expert kernels are available",
                   "This CPU has no AMX units; AVX-512 VNNI is the next fastest backend." +
                       std::string(u.avx512_bf16 ? " BF16 instructions are available too." : "")});
  } else if (u.avx2) {
    out.push_back({"amx", FindingLevel::Info, "AVX2 found: the portable fast backend is used",
                   "Without AVX-512 or AMX, CPU experts run at roughly half the speed a "
                   "server CPU reaches."});
  } else {
    out.push_back({"amx", FindingLevel::Warning, "No AVX2: only slow CPU kernels can run",
                   "Large models will be very slow on this CPU."});
  }

  const auto& rec = report.recommendation;
  out.push_back({"numa", FindingLevel::Info,
                 rec.thread_pools.value == 1
                     ? "1 NUMA node: one thread pool"
                     : fmt::format("{} NUMA nodes: {} thread pools", rec.thread_pools.value,
                                   rec.thread_pools.value),
                 rec.thread_pools.reason});
  out.push_back({"threads", FindingLevel::Info,
                 fmt::format("{} CPU threads recommended", rec.cpu_threads.value),
                 rec.cpu_threads.reason});

  const auto& g = report.gpus;
  const auto usable_gpus = std::count_if(g.devices.begin(), g.devices.end(),
                                         [](const GpuDevice& d) { return d.usable; });
  if (report.memory.error.empty()) {
    out.push_back({"memory", FindingLevel::Info,
                   fmt::format("{} of RAM, {} available", format_bytes(report.memory.total_bytes),
                               format_bytes(report.memory.available_bytes)),
                   usable_gpus > 0 ? "Experts that do not fit on the GPU are kept in RAM; the "
                                     "planner sizes models against the available amount."
                                   : "Without a GPU the whole model is kept in RAM; the planner "
                                     "sizes models against the available amount."});
  } else {
    out.push_back(
        {"memory", FindingLevel::Warning, "RAM could not be measured", report.memory.error});
  }

  if (usable_gpus > 0) {
    for (const GpuDevice& d : g.devices) {
      if (!d.usable) continue;
      out.push_back({"gpu", FindingLevel::Good,
                     fmt::format("GPU found: {}, {} free of {}", d.name, format_bytes(d.free_bytes),
                                 format_bytes(d.total_bytes)),
                     "Attention, dense layers, shared experts and the hot experts run on the "
                     "GPU."});
    }
  } else if (!g.devices.empty()) {
    for (const GpuDevice& d : g.devices) {
      out.push_back({"gpu", FindingLevel::Warning, fmt::format("GPU {} cannot be used", d.name),
                     d.not_usable + "; everything runs on the CPU."});
    }
  } else {
    out.push_back({"gpu", FindingLevel::Info, "No GPU: everything runs on the CPU",
                   "Tandem works without a GPU (" + g.reason + ")."});
  }

  if (report.disk.error.empty()) {
    out.push_back({"disk", FindingLevel::Info,
                   fmt::format("{} free on disk", format_bytes(report.disk.free_bytes)),
                   fmt::format("Measured at {}; large models need 20 GB to over 600 GB.",
                               report.disk.measured_path)});
  } else {
    out.push_back({"disk", FindingLevel::Warning, "Free disk space unknown", report.disk.error});
  }
  return out;
}

HardwareReport probe_hardware(const ProbeOptions& options) {
  HardwareReport r;
  r.isa = kernels::detect_isa();
  r.topology = probe_topology();
  if (!r.topology.error.empty()) log::warn("hardware probe: {}", r.topology.error);
  r.memory = probe_memory();
  // hwloc reads node memory from firmware tables, which some virtual machines fill in wrong;
  // with a single node all of the RAM that Linux reports is that node's.
  if (r.topology.numa_nodes.size() == 1 && r.memory.error.empty() &&
      r.topology.numa_nodes[0].memory_bytes < r.memory.total_bytes) {
    r.topology.numa_nodes[0].memory_bytes = r.memory.total_bytes;
  }
  if (options.query_gpus) {
    r.gpus = kernels::cuda::query_devices();
    // Measured once per GPU and driver (about a second), then read from the cache.
    attach_gpu_speeds(r.gpus, default_gpu_speeds_cache());
  } else {
    r.gpus.compiled = TANDEM_HAVE_CUDA != 0;
    r.gpus.reason = "the GPU query was skipped";
  }
  r.disk = probe_disk_space(options.disk_path.empty() ? "." : options.disk_path);
  r.recommendation = recommend(r.isa, r.topology);
  r.findings = explain(r);
  log::info("hardware probe: {}, {} cores, {} NUMA node(s), {} GPU(s), backend {}",
            r.isa.identity.brand, r.topology.physical_cores, r.topology.numa_nodes.size(),
            r.gpus.devices.size(), backend_id(r.recommendation.cpu_backend.value));
  return r;
}

}  // namespace tandem::hw
