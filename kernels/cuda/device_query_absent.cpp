// Built when nvcc was not found: the same interface, answering that this build has no GPU
// support, so callers need no conditional code.
#include "kernels/cuda/device_query.h"

namespace tandem::kernels::cuda {

std::string describe_discovery_error(int code, const std::string& name) {
  return "the CUDA runtime could not list GPUs (" + name + ", code " + std::to_string(code) + ")";
}

DeviceQuery query_devices() {
  DeviceQuery q;
  q.reason =
      "this build of Tandem has no GPU support (the CUDA compiler was not found when it was "
      "built); rebuild on a machine with the CUDA toolkit to use an NVIDIA GPU";
  return q;
}

bool measure_gpu_speeds(int, GpuSpeeds&, std::string& error) {
  error = "this build of Tandem has no GPU support";
  return false;
}

}  // namespace tandem::kernels::cuda
