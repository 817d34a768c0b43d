// The routers' top-k, one warp per token: softmax (Qwen3, Mixtral, gpt-oss; DeepSeek-V2 with
// groups) or grouped sigmoid with the correction bias (DeepSeek-V3, Kimi-K2, GLM-4.5), with
// the CPU's rules
// (engine/backend/cpu/routing.cpp): ties go to the lower index, experts of groups that are
// not kept compete with a choice value of 0.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

constexpr int kTokensPerBlock = 4;

struct Best {
  float value;
  int index;
};

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The largest of values[0, n) (lowest index on ties), over the warp.
__device__ Best warp_argmax(const float* values, int n) {
  const int lane = threadIdx.x % 32;
  Best b{-INFINITY, 0x7fffffff};
  for (int i = lane; i < n; i += 32)
    if (better(values[i], i, b.value, b.index)) b = {values[i], i};
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, b.index, offset);
    if (better(v, i, b.value, b.index)) b = {v, i};
  }
  return b;
}

__global__ void route_kernel(const float* logits, std::int64_t n, RoutingArgs a, std::int32_t* ids,
                             float* weights) {
  extern __shared__ float shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kTokensPerBlock + warp;
  const int experts = static_cast<int>(a.experts);
  const int groups = static_cast<int>(a.groups);
  float* score = shared + warp * (2 * experts + groups);
  float* choice = score + experts;
  float* group_score = choice + experts;
  if (t >= n) return;
  const float* row = logits + t * a.experts;
  const int k = static_cast<int>(a.k);

  if (!a.sigmoid) {
    float top = -INFINITY;
    for (int e = lane; e < experts; e += 32) top = fmaxf(top, row[e]);
    for (int offset = 16; offset > 0; offset >>= 1)
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    float sum = 0.0f;
    for (int e = lane; e < experts; e += 32) {
      score[e] = expf(row[e] - top);
      sum += score[e];
    }
    sum = warp_sum(sum);
    for (int e = lane; e < experts; e += 32) {
      score[e] /= sum;
      choice[e] = score[e];
    }
  } else {
    for (int e = lane; e < experts; e += 32) {
      score[e] = 1.0f / (1.0f + expf(-row[e]));
      choice[e] = score[e] + (a.bias != nullptr ? a.bias[e] : 0.0f);
    }
  }
  __syncwarp();
  if (groups > 1) {
    // A group's score is the sum of its two best choices (sigmoid) or its best score
    // (softmax, DeepSeek-V2); only the best groups stay.
    const int per_group = experts / groups;
    for (int g = lane; g < groups; g += 32) {
      const float* gs = choice + g * per_group;
      float first = -INFINITY, second = -INFINITY;
      for (int i = 0; i < per_group; ++i) {
        if (gs[i] > first) {
          second = first;
          first = gs[i];
        } else if (gs[i] > second) {
          second = gs[i];
        }
      }
      group_score[g] = a.sigmoid && per_group >= 2 ? first + second : first;
    }
    __syncwarp();
    // Kept groups are marked NaN, then every expert of another group is given 0.
    for (int j = 0; j < a.top_groups; ++j) {
      const Best b = warp_argmax(group_score, groups);
      if (lane == 0) group_score[b.index] = NAN;  // kept (NaN never wins a comparison)
      __syncwarp();
    }
    for (int e = lane; e < experts; e += 32)
      if (!isnan(group_score[e / per_group])) choice[e] = 0.0f;
  }
  __syncwarp();
  float chosen_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    const Best b = warp_argmax(choice, experts);
    if (lane == 0) {
      ids[t * k + j] = b.index;
      weights[t * k + j] = score[b.index];
      choice[b.index] = -INFINITY;
    }
    chosen_sum += score[b.index];
    __syncwarp();
  }
  if (lane == 0) {
    for (int j = 0; j < k; ++j) {
      float w = weights[t * k + j];
      if (a.sigmoid) {
        if (a.normalize) w /= (chosen_sum + 1e-20f);
      } else if (a.normalize) {
        w /= chosen_sum;
      }
      w *= a.scaling;
      weights[t * k + j] = w;
    }
  }
}

}  // namespace

void route(const float* logits, std::int64_t n, const RoutingArgs& a, std::int32_t* ids,
           float* weights, cudaStream_t stream) {
  if (n <= 0) return;
  if (a.experts > kMaxRoutedExperts || a.k > a.experts || a.groups < 1 ||
      a.experts % a.groups != 0 || a.top_groups > a.groups) {
    throw std::invalid_argument(
        "routing " + std::to_string(a.k) + " of " + std::to_string(a.experts) + " experts in " +
        std::to_string(a.groups) + " groups is not a routing the CUDA kernels take");
  }
  const auto blocks = static_cast<unsigned>((n + kTokensPerBlock - 1) / kTokensPerBlock);
  const std::size_t shared = kTokensPerBlock * (2 * a.experts + a.groups) * sizeof(float);
  route_kernel<<<blocks, kTokensPerBlock * 32, shared, stream>>>(logits, n, a, ids, weights);
  check(cudaGetLastError(), "routing tokens to experts");
}

}  // namespace tandem::kernels::cuda
