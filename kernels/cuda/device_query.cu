#include "kernels/cuda/device_query.h"

#include <cuda_runtime.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace tandem::kernels::cuda {
namespace {

// A tiny kernel that proves the device can run code from this build: a GPU whose
// architecture this build has no image for fails here with a clear error.
__global__ void scale_add_kernel(const float* x, float* y, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

std::string run_self_test(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return "cannot select the device";
  constexpr int n = 1000;
  float host_x[n];
  float host_y[n];
  for (int i = 0; i < n; ++i) {
    host_x[i] = static_cast<float>(i);
    host_y[i] = 1.0f;
  }
  float* dx = nullptr;
  float* dy = nullptr;
  std::string failure;
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && failure.empty()) {
      failure = std::string(what) + ": " + cudaGetErrorString(e);
    }
    return e == cudaSuccess;
  };
  if (check(cudaMalloc(&dx, n * sizeof(float)), "allocating memory") &&
      check(cudaMalloc(&dy, n * sizeof(float)), "allocating memory") &&
      check(cudaMemcpy(dx, host_x, n * sizeof(float), cudaMemcpyHostToDevice), "copying") &&
      check(cudaMemcpy(dy, host_y, n * sizeof(float), cudaMemcpyHostToDevice), "copying")) {
    scale_add_kernel<<<(n + 255) / 256, 256>>>(dx, dy, 2.0f, n);
    if (check(cudaGetLastError(), "launching a test kernel") &&
        check(cudaMemcpy(host_y, dy, n * sizeof(float), cudaMemcpyDeviceToHost), "copying")) {
      for (int i = 0; i < n; ++i) {
        if (std::fabs(host_y[i] - (2.0f * i + 1.0f)) > 1e-3f) {
          failure = "a test kernel computed a wrong result";
          break;
        }
      }
    }
  }
  cudaFree(dx);
  cudaFree(dy);
  return failure;
}

// Whether the PCI bus has an NVIDIA display or 3D controller (vendor 0x10de, class 0x03),
// read from sysfs: without a driver the CUDA runtime cannot tell "no GPU" from "no driver".
bool nvidia_gpu_on_the_bus() {
  std::error_code ec;
  for (const auto& dev : std::filesystem::directory_iterator("/sys/bus/pci/devices", ec)) {
    std::ifstream vendor(dev.path() / "vendor"), klass(dev.path() / "class");
    std::string v, c;
    if (!(vendor >> v) || !(klass >> c)) continue;
    if (v == "0x10de" && c.rfind("0x03", 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string describe_discovery_error(int code, const std::string& name) {
  switch (code) {
    case cudaErrorInsufficientDriver:
      return "the NVIDIA driver is missing or older than this build of Tandem needs "
             "(CUDA runtime " +
             std::to_string(CUDART_VERSION / 1000) + "." +
             std::to_string(CUDART_VERSION % 1000 / 10) +
             "); install or update the NVIDIA driver to use the GPU";
    case cudaErrorNoDevice:
      return "no NVIDIA GPU was found";
    case cudaErrorNotPermitted:
    case cudaErrorDevicesUnavailable:
      return "the NVIDIA GPU is busy or not accessible to this user (check permissions on "
             "/dev/nvidia*)";
    case cudaErrorSystemDriverMismatch:
      return "the NVIDIA kernel module and driver library have different versions; reboot "
             "or reinstall the driver";
    default:
      return "the CUDA runtime could not list GPUs (" + name + ", code " + std::to_string(code) +
             ")";
  }
}

DeviceQuery query_devices() {
  DeviceQuery q;
  q.compiled = true;
  cudaRuntimeGetVersion(&q.runtime_version);
  cudaDriverGetVersion(&q.driver_version);  // 0 when no driver is installed

  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    const bool no_gpu =
        (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) && !nvidia_gpu_on_the_bus();
    q.reason = no_gpu ? "no NVIDIA GPU was found"
                      : describe_discovery_error(static_cast<int>(e), cudaGetErrorName(e));
    cudaGetLastError();  // clear the sticky error state
    return q;
  }
  if (count == 0) {
    q.reason = "no NVIDIA GPU was found";
    return q;
  }
  for (int i = 0; i < count; ++i) {
    DeviceInfo d;
    d.index = i;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      d.name = "unknown";
      d.not_usable = "its properties could not be read";
      q.devices.push_back(d);
      continue;
    }
    d.name = prop.name;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.total_bytes = prop.totalGlobalMem;
    d.multiprocessors = prop.multiProcessorCount;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    if (prop.major < 8) {
      d.not_usable = "compute capability " + std::to_string(prop.major) + "." +
                     std::to_string(prop.minor) +
                     " is older than this build supports (8.0, Ampere, or newer)";
    } else if (cudaSetDevice(i) == cudaSuccess) {
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        d.free_bytes = free_b;
        d.total_bytes = total_b;
      }
      d.not_usable = run_self_test(i);
    } else {
      d.not_usable = "the device could not be opened";
    }
    d.usable = d.not_usable.empty();
    cudaGetLastError();
    q.devices.push_back(d);
  }
  return q;
}

}  // namespace tandem::kernels::cuda
