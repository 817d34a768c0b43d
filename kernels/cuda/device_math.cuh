// Device-side pieces the CUDA kernels share: BF16 rounding and loads, warp and block sums,
// and the FFN activations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {

// Round to nearest even, NaN kept, bit for bit as kernels::f32_to_bf16 on the host.
__device__ __forceinline__ std::uint16_t round_to_bf16(float f) {
  std::uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

__device__ __forceinline__ float bf16_bits_to_float(std::uint16_t v) {
  return __uint_as_float(static_cast<std::uint32_t>(v) << 16);
}

__device__ __forceinline__ float load_weight(const void* data, WeightType type, std::int64_t i) {
  return type == WeightType::F32 ? static_cast<const float*>(data)[i]
                                 : bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum over the whole block (at most 1024 threads), returned to every thread.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `partial` may still be read by an earlier call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  T total = lane < warps ? partial[lane] : T(0);
  return warp_sum(total);
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float glu_value(const GluParams& g, float gate, float up) {
  if (g.kind == 1) {
    const float gc = fminf(gate, g.limit);
    const float uc = fminf(fmaxf(up, -g.limit), g.limit);
    return gc / (1.0f + expf(-g.alpha * gc)) * (uc + 1.0f);
  }
  return silu(gate) * up;
}

}  // namespace tandem::kernels::cuda
