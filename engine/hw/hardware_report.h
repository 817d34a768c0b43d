// Everything Tandem knows about the machine, and what it means for running a model.
#pragma once

#include <string>
#include <vector>

#include "engine/hw/disk_space.h"
#include "engine/hw/memory_info.h"
#include "engine/hw/topology.h"
#include "kernels/cpu/isa.h"
#include "kernels/cuda/device_query.h"

namespace tandem::hw {

using GpuReport = kernels::cuda::DeviceQuery;
using GpuDevice = kernels::cuda::DeviceInfo;

// The CPU backends, best first: the order in which the expert kernels prefer them.
enum class CpuBackend { AmxInt8, Avx512Vnni, Avx2, Scalar };
std::string_view backend_id(CpuBackend backend);     // "amx_int8", "avx512_vnni", ...
std::string_view backend_label(CpuBackend backend);  // "AMX INT8", "AVX-512 VNNI", ...

template <typename T>
struct Recommended {
  T value{};
  std::string reason;  // one line a user understands
};

struct Recommendation {
  Recommended<CpuBackend> cpu_backend;
  Recommended<int> cpu_threads;
  Recommended<int> thread_pools;
};

enum class FindingLevel { Good, Info, Warning };

// One plain-language statement about the machine, shown by `tandem detect` and the UI.
struct Finding {
  std::string topic;  // "cpu", "amx", "numa", "memory", "gpu", "disk"
  FindingLevel level = FindingLevel::Info;
  std::string headline;  // "AMX found: the fastest CPU backend is available"
  std::string detail;    // a sentence or two of explanation
};

struct HardwareReport {
  kernels::IsaReport isa;
  Topology topology;
  MemoryInfo memory;
  GpuReport gpus;
  DiskSpace disk;
  Recommendation recommendation;
  std::vector<Finding> findings;
};

struct ProbeOptions {
  std::string disk_path;  // where models go; empty means the current folder
  bool query_gpus = true;
};

// Runs every probe; takes from milliseconds up to a second or two (CUDA start-up). Never
// throws: a probe that fails says so in its `error`/`reason` field.
HardwareReport probe_hardware(const ProbeOptions& options);

// The interpretation, separated from probing so recorded descriptions can be judged too.
Recommendation recommend(const kernels::IsaReport& isa, const Topology& topology);
std::vector<Finding> explain(const HardwareReport& report);

std::string format_bytes(std::uint64_t bytes);  // "23.4 GiB"

}  // namespace tandem::hw
