// The GPU's speeds that the planner sizes its choices by, measured rather than assumed: the
// bus from page-locked host memory, the GPU's memory, and BF16 products on the tensor cores
// (the kernel the backend's prompts run through).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/device_query.h"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

// Frees what it holds however the measurement ends.
struct Held {
  void* device_a = nullptr;
  void* device_b = nullptr;
  void* host = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  cudaStream_t stream = nullptr;
  ~Held() {
    if (device_a != nullptr) cudaFree(device_a);
    if (device_b != nullptr) cudaFree(device_b);
    if (host != nullptr) cudaFreeHost(host);
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The best of three runs of `work`, in seconds.
template <class Work>
double best_seconds(Held& h, const Work& work) {
  float best_ms = 1e30f;
  work();  // warm-up: module load, first touch of the memory
  for (int i = 0; i < 3; ++i) {
    check(cudaEventRecord(h.begin, h.stream), "timing the GPU");
    work();
    check(cudaEventRecord(h.end, h.stream), "timing the GPU");
    check(cudaEventSynchronize(h.end), "timing the GPU");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, h.begin, h.end), "timing the GPU");
    best_ms = std::min(best_ms, ms);
  }
  return std::max(best_ms, 1e-3f) * 1e-3;
}

}  // namespace

bool measure_gpu_speeds(int device, GpuSpeeds& speeds, std::string& error) {
  try {
    check(cudaSetDevice(device), "selecting the GPU");
    Held h;
    check(cudaStreamCreate(&h.stream), "creating a stream");
    check(cudaEventCreate(&h.begin), "creating an event");
    check(cudaEventCreate(&h.end), "creating an event");
    constexpr std::size_t kUpload = 256ull << 20, kCopy = 1ull << 30;
    check(cudaHostAlloc(&h.host, kUpload, cudaHostAllocDefault), "locking host memory");
    check(cudaMalloc(&h.device_a, kCopy), "allocating GPU memory");
    check(cudaMalloc(&h.device_b, kCopy), "allocating GPU memory");
    check(cudaMemsetAsync(h.device_a, 0, kCopy, h.stream), "clearing GPU memory");
    check(cudaMemsetAsync(h.device_b, 0, kCopy, h.stream), "clearing GPU memory");

    const double up = best_seconds(h, [&] {
      check(cudaMemcpyAsync(h.device_a, h.host, kUpload, cudaMemcpyHostToDevice, h.stream),
            "copying to the GPU");
    });
    speeds.host_to_device_bytes_per_s = static_cast<double>(kUpload) / up;
    const double copy = best_seconds(h, [&] {
      check(cudaMemcpyAsync(h.device_b, h.device_a, kCopy, cudaMemcpyDeviceToDevice, h.stream),
            "copying within the GPU");
    });
    speeds.memory_bytes_per_s = 2.0 * static_cast<double>(kCopy) / copy;

    // x: 4096 x 4096 fp32 (64 MiB) in device_a, W: 4096 x 4096 BF16 (32 MiB) in device_b past
    // y: 4096 x 4096 fp32, all zeros (the speed does not depend on the values here).
    constexpr std::int64_t n = 4096;
    auto* x = static_cast<float*>(h.device_a);
    auto* y = static_cast<float*>(h.device_b);
    DeviceWeights w;
    w.data = static_cast<char*>(h.device_b) + n * n * sizeof(float);
    w.type = WeightType::Bf16;
    w.rows = n;
    w.cols = n;
    const double product = best_seconds(h, [&] { matmul(x, n, w, y, n, h.stream); });
    speeds.bf16_flops_per_s = 2.0 * static_cast<double>(n) * n * n / product;
    return true;
  } catch (const CudaError& e) {
    error = e.what();
    return false;
  }
}

}  // namespace tandem::kernels::cuda
