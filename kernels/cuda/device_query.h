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

// Turns a CUDA runtime error (its numeric code and name) met during discovery into a sentence
// a user understands. Exposed so the no-driver answers can be tested without a GPU.
std::string describe_discovery_error(int code, const std::string& name);

}  // namespace tandem::kernels::cuda
