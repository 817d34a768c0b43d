// Qwen3-Next's gated DeltaNet on the GPU: the causal depthwise convolution (one thread per
// channel, token after token, continuing the cached inputs), then the gated delta rule (one
// block per value head, a thread per value dimension holding its column of the state in
// registers, token after token), then the RMSNorm gated by SiLU(z). The same steps and
// constants as the CPU's recurrent form (engine/backend/cpu/gated_delta_net.cpp).
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

constexpr int kMaxConvKernel = 8;
constexpr int kMaxStateRows = 128;  // key dimensions a thread keeps in registers

__global__ void conv_kernel(DeltaNetArgs a) {
  const std::int64_t channels = 2 * a.key_heads * a.key_dim + a.value_heads * a.value_dim;
  const std::int64_t row = channels + a.value_heads * a.value_dim;
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const int kernel = static_cast<int>(a.conv_kernel);
  const int history = kernel - 1;
  float taps[kMaxConvKernel];
  float window[kMaxConvKernel];  // the last `history` inputs, oldest first
  for (int j = 0; j < kernel; ++j) taps[j] = a.conv[c * kernel + j];
  for (int j = 0; j < history; ++j) window[j] = a.pos0 == 0 ? 0.0f : a.conv_state[j * channels + c];
  for (std::int64_t t = 0; t < a.n; ++t) {
    const float x = a.qkvz[t * row + c];
    float y = taps[kernel - 1] * x;
    for (int j = 0; j < history; ++j) y += taps[j] * window[j];
    for (int j = 0; j + 1 < history; ++j) window[j] = window[j + 1];
    if (history > 0) window[history - 1] = x;
    a.mixed[t * channels + c] = silu(y);
  }
  for (int j = 0; j < history; ++j) a.conv_state[j * channels + c] = window[j];
}

__global__ void delta_rule_kernel(DeltaNetArgs a) {
  extern __shared__ float qk[];  // q then k of the current token, normalised
  const std::int64_t h = blockIdx.x;
  // The block is rounded up to whole warps for the sums; threads past the value width only
  // take part in them.
  const std::int64_t j = threadIdx.x;
  const bool active = j < a.value_dim;
  const std::int64_t nk = a.key_heads, nv = a.value_heads, dk = a.key_dim, dv = a.value_dim;
  const std::int64_t channels = 2 * nk * dk + nv * dv;
  const std::int64_t row = channels + nv * dv;
  const std::int64_t kh = h / (nv / nk);
  float* qn = qk;
  float* kn = qk + dk;
  float* state = a.recurrent + h * dk * dv;
  float s[kMaxStateRows];
#pragma unroll
  for (int i = 0; i < kMaxStateRows; ++i)
    s[i] = i < dk && active && a.pos0 != 0 ? state[i * dv + j] : 0.0f;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  const float rate = -expf(a.a_log[h]);
  for (std::int64_t t = 0; t < a.n; ++t) {
    const float* m = a.mixed + t * channels;
    float qq = 0.0f, kk = 0.0f;
    for (std::int64_t i = j; i < dk; i += blockDim.x) {
      const float qv = m[kh * dk + i], kv = m[nk * dk + kh * dk + i];
      qq += qv * qv;
      kk += kv * kv;
    }
    qq = block_sum(qq);
    kk = block_sum(kk);
    const float q_inv = q_scale / sqrtf(qq + 1e-6f), k_inv = 1.0f / sqrtf(kk + 1e-6f);
    for (std::int64_t i = j; i < dk; i += blockDim.x) {
      qn[i] = m[kh * dk + i] * q_inv;
      kn[i] = m[nk * dk + kh * dk + i] * k_inv;
    }
    __syncthreads();
    const float* bat = a.ba + t * 2 * nv;
    const float beta = 1.0f / (1.0f + expf(-bat[h]));
    const float x = bat[nv + h] + a.dt_bias[h];
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    const float decay = expf(rate * softplus);
    float sk = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxStateRows; ++i)
      if (i < dk) sk += s[i] * kn[i];
    const float v = active ? m[2 * nk * dk + h * dv + j] : 0.0f;
    const float u = beta * (v - decay * sk);
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxStateRows; ++i) {
      if (i < dk) {
        s[i] = decay * s[i] + kn[i] * u;
        o += qn[i] * s[i];
      }
    }
    const double sq = block_sum(active ? static_cast<double>(o) * o : 0.0);
    const auto inv = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(dv) + a.eps));
    if (active) {
      const float z = a.qkvz[t * row + channels + h * dv + j];
      a.out[t * nv * dv + h * dv + j] = silu(z) * (o * inv * a.norm[j]);
    }
    __syncthreads();  // qn and kn are rewritten for the next token
  }
#pragma unroll
  for (int i = 0; i < kMaxStateRows; ++i)
    if (i < dk && active) state[i * dv + j] = s[i];
}

}  // namespace

void gated_delta_net(const DeltaNetArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return;
  if (a.key_dim > kMaxStateRows || a.value_dim > 1024 || a.conv_kernel > kMaxConvKernel ||
      a.conv_kernel < 1 || a.key_heads <= 0 || a.value_heads % a.key_heads != 0) {
    throw std::invalid_argument(
        "a gated DeltaNet layer of " + std::to_string(a.key_dim) + " key and " +
        std::to_string(a.value_dim) + " value dimensions and a convolution of " +
        std::to_string(a.conv_kernel) + " is not a shape the CUDA kernels take");
  }
  const std::int64_t channels = 2 * a.key_heads * a.key_dim + a.value_heads * a.value_dim;
  conv_kernel<<<static_cast<unsigned>((channels + 255) / 256), 256, 0, stream>>>(a);
  check(cudaGetLastError(), "running the gated DeltaNet's convolution");
  const auto threads = static_cast<unsigned>((a.value_dim + 31) / 32 * 32);
  delta_rule_kernel<<<static_cast<unsigned>(a.value_heads), threads, 2 * a.key_dim * sizeof(float),
                      stream>>>(a);
  check(cudaGetLastError(), "running the gated delta rule");
}

}  // namespace tandem::kernels::cuda
