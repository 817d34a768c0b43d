// The element-wise steps of a layer: embedding rows, RMSNorm, the rotary embedding, residual
// and bias adds, the FFN activations and the sigmoid gates.
#include <cuda_bf16.h>

#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const int code = static_cast<int>(e);
  const std::string words = cudaGetErrorString(e);
  // A launch error is sticky only for some codes; clearing keeps later queries honest.
  cudaGetLastError();
  throw CudaError(std::string("CUDA failed while ") + what + ": " + words, code);
}

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n, int per_block = kThreads) {
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

__global__ void f32_to_bf16_kernel(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = round_to_bf16(x[i]);
}

__global__ void embed_kernel(const void* table, WeightType type, std::int64_t vocab,
                             std::int64_t cols, const std::int32_t* ids, float* out) {
  const std::int64_t t = blockIdx.x;
  const std::int32_t id = ids[t];
  // An id outside the vocabulary yields zeros rather than reading past the table; the host
  // checks ids before they reach the device.
  const bool valid = id >= 0 && id < vocab;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out[t * cols + c] = valid ? load_weight(table, type, id * cols + c) : 0.0f;
  }
}

__global__ void rms_norm_kernel(const float* x, std::int64_t x_stride, const float* weight,
                                std::int64_t cols, double eps, float* y, std::int64_t y_stride) {
  const std::int64_t r = blockIdx.x;
  const float* row = x + r * x_stride;
  double sum = 0.0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double v = row[c];
    sum += v * v;
  }
  sum = block_sum(sum);
  const float inv = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(cols) + eps));
  float* out = y + r * y_stride;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[c] = row[c] * inv * (weight != nullptr ? weight[c] : 1.0f);
}

__global__ void rope_kernel(RopeTable table, float* x, std::int64_t n, std::int64_t token_stride,
                            std::int64_t heads, std::int64_t head_stride, std::int64_t pos0) {
  const std::int64_t half = table.dim / 2;
  const std::int64_t total = n * heads * half;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t k = i % half;
    const std::int64_t h = (i / half) % heads;
    const std::int64_t t = i / (half * heads);
    // The angle in double, as the CPU computes it, so long positions keep their precision.
    const double angle = static_cast<double>(pos0 + t) * table.inv_freq[k];
    double s, c;
    sincos(angle, &s, &c);
    const float cf = static_cast<float>(c * table.attention_factor);
    const float sf = static_cast<float>(s * table.attention_factor);
    float* v = x + t * token_stride + h * head_stride;
    const std::int64_t a = table.interleaved ? 2 * k : k;
    const std::int64_t b = table.interleaved ? 2 * k + 1 : k + half;
    const float x1 = v[a];
    const float x2 = v[b];
    v[a] = x1 * cf - x2 * sf;
    v[b] = x2 * cf + x1 * sf;
  }
}

__global__ void add_scaled_kernel(float* y, const float* x, float a, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] += a * x[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

__global__ void glu_kernel(GluParams g, float* gate, const float* up, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    gate[i] = glu_value(g, gate[i], up[i]);
}

__global__ void sigmoid_gate_kernel(float* y, const float* gate, std::int64_t rows,
                                    std::int64_t cols, std::int64_t gate_cols) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    const float g = gate[r * gate_cols + (gate_cols == 1 ? 0 : c)];
    y[i] *= 1.0f / (1.0f + expf(-g));
  }
}

}  // namespace

void f32_to_bf16(const float* x, std::uint16_t* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  check(cudaGetLastError(), "rounding activations to BF16");
}

void embed(const DeviceWeights& table, const std::int32_t* ids, std::int64_t n, float* out,
           cudaStream_t stream) {
  if (n <= 0) return;
  embed_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(table.data, table.type,
                                                                  table.rows, table.cols, ids, out);
  check(cudaGetLastError(), "looking up token embeddings");
}

void rms_norm(const float* x, std::int64_t x_stride, const float* weight, std::int64_t rows,
              std::int64_t cols, double eps, float* y, std::int64_t y_stride, cudaStream_t stream) {
  if (rows <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, x_stride, weight, cols,
                                                                        eps, y, y_stride);
  check(cudaGetLastError(), "normalising activations (RMSNorm)");
}

void rope(const RopeTable& table, float* x, std::int64_t n, std::int64_t token_stride,
          std::int64_t heads, std::int64_t head_stride, std::int64_t pos0, cudaStream_t stream) {
  const std::int64_t total = n * heads * (table.dim / 2);
  if (total <= 0) return;
  rope_kernel<<<blocks_for(total), kThreads, 0, stream>>>(table, x, n, token_stride, heads,
                                                          head_stride, pos0);
  check(cudaGetLastError(), "applying the rotary embedding");
}

void add_scaled(float* y, const float* x, float a, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_scaled_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, a, n);
  check(cudaGetLastError(), "adding activations");
}

void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
              cudaStream_t stream) {
  if (rows * cols <= 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  check(cudaGetLastError(), "adding a bias");
}

void glu(const GluParams& g, float* gate, const float* up, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  glu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, gate, up, n);
  check(cudaGetLastError(), "applying the FFN activation");
}

void sigmoid_gate(float* y, const float* gate, std::int64_t rows, std::int64_t cols,
                  std::int64_t gate_cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  sigmoid_gate_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, gate, rows, cols,
                                                                        gate_cols);
  check(cudaGetLastError(), "applying a sigmoid gate");
}

}  // namespace tandem::kernels::cuda
