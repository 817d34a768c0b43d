// GPU discovery through the CUDA runtime (statically linked). A machine without an NVIDIA
// driver is a normal answer here, not an error: the device list is empty and `reason` says
// why in words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
  bool usable = false;     // this build has kernels for it and a test kernel ran correctly
  std::string not_usable;  // why not, in words; empty when usable
  // Measured by measure_gpu_speeds (0: not measured): page-locked host memory to the GPU,
  // the GPU's own memory (bytes read plus written), and its BF16 tensor-core products.
  double host_to_device_bytes_per_s = 0.0;
  double memory_bytes_per_s = 0.0;
  double bf16_flops_per_s = 0.0;
};

struct DeviceQuery {
  bool compiled = false;    // this build contains the CUDA kernels
  int driver_version = 0;   // e.g. 12040 for 12.4; 0 when no driver
  int runtime_version = 0;  // the runtime this build links
  std::vector<DeviceInfo> devices;
  std::string reason;  // why the list is empty, in words; empty otherwise
};

// Safe to call on any machine; never throws.
DeviceQuery query_devices();

// Measures the three speeds of DeviceInfo on GPU `device` in about a second (a 256 MiB
// upload, a 1 GiB device copy and a 4096-cube BF16 product, each the best of three). False
// with `error` said when it cannot (no CUDA in this build, the GPU refused the memory).
struct GpuSpeeds {
  double host_to_device_bytes_per_s = 0.0;
  double memory_bytes_per_s = 0.0;
  double bf16_flops_per_s = 0.0;
};
bool measure_gpu_speeds(int device, GpuSpeeds& speeds, std::string& error);

// Turns a CUDA runtime error (its numeric code and name) met during discovery into a sentence
// a user understands. Exposed so the no-driver answers can be tested without a GPU.
std::string describe_discovery_error(int code, const std::string& name);

}  // namespace tandem::kernels::cuda
