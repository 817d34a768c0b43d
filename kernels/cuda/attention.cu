// Attention over the KV cache in device memory, for grouped-query and (absorbed) latent
// attention alike: one block per (token, query head), its warps taking every fourth position
// with an online softmax each, combined in shared memory. A decoded token has only as many
// blocks as heads, too few for the GPU: then each head's context is split into parts that
// blocks take apart (split-K, "flash decoding"), combined by a second kernel.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr std::int64_t kMinPart = 256;  // positions a part takes at the least

struct Range {
  std::int64_t first, end;
};

__device__ __forceinline__ Range visible(const AttentionArgs& a, std::int64_t t) {
  const std::int64_t end = a.pos0 + t + 1;
  const std::int64_t first = a.window > 0 && end > a.window ? end - a.window : 0;
  return {first, end};
}

// Adds the sink logit (gpt-oss) to a softmax whose running max is m and sum l; returns the
// factor the unnormalised sums take to become the output.
__device__ __forceinline__ float output_factor(const AttentionArgs& a, std::int64_t h, float m,
                                               float l) {
  if (a.sinks == nullptr) return 1.0f / l;
  const float sink = a.sinks[h];
  const float top = fmaxf(m, sink);
  const float rescale = expf(m - top);
  return rescale / (l * rescale + expf(sink - top));
}

template <int KPL, int VPL>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(AttentionArgs a, int parts, float* part_acc, float* part_ml) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t job = blockIdx.x;
  const int part = blockIdx.y;
  const std::int64_t t = job / a.heads, h = job % a.heads;
  const std::int64_t g = h / a.group;
  const Range r = visible(a, t);
  const std::int64_t len = r.end - r.first;
  const std::int64_t p_begin = r.first + len * part / parts;
  const std::int64_t p_end = r.first + len * (part + 1) / parts;

  const float* qv = a.q + t * a.q_token_stride + h * a.q_head_stride;
  float q[KPL];
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const std::int64_t d = lane + 32 * i;
    q[i] = d < a.key_dim ? qv[d] : 0.0f;
  }
  const float* keys = a.keys + g * a.k_head_stride;
  const float* values = a.values + g * a.v_head_stride;
  float m = -INFINITY, l = 0.0f;
  float acc[VPL];
#pragma unroll
  for (int i = 0; i < VPL; ++i) acc[i] = 0.0f;
  for (std::int64_t p = p_begin + warp; p < p_end; p += kWarps) {
    const float* kr = keys + p * a.k_pos_stride;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const std::int64_t d = lane + 32 * i;
      if (d < a.key_dim) s += q[i] * kr[d];
    }
    s = warp_sum(s) * a.scale;
    const float top = fmaxf(m, s);
    const float rescale = expf(m - top);  // 0 for the first position (m = -inf)
    const float e = expf(s - top);
    l = l * rescale + e;
    const float* vr = values + p * a.v_pos_stride;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const std::int64_t d = lane + 32 * i;
      if (d < a.value_dim) acc[i] = acc[i] * rescale + e * vr[d];
    }
    m = top;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][VPL * 32];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < VPL; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kWarps; ++w) top = fmaxf(top, warp_m[w]);
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    if (warp_m[w] > -INFINITY) sum += warp_l[w] * expf(warp_m[w] - top);
  const std::int64_t slot = job * parts + part;
  const float factor = parts == 1 && sum > 0.0f ? output_factor(a, h, top, sum) : 1.0f;
  float* out = a.out + t * a.out_token_stride + h * a.out_head_stride;
  for (std::int64_t d = threadIdx.x; d < a.value_dim; d += kWarps * 32) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warp_m[w] > -INFINITY) v += warp_acc[w][d] * expf(warp_m[w] - top);
    if (parts == 1)
      out[d] = v * factor;
    else
      part_acc[slot * a.value_dim + d] = v;
  }
  if (parts > 1 && threadIdx.x == 0) {
    part_ml[2 * slot] = top;
    part_ml[2 * slot + 1] = sum;
  }
}

__global__ void combine_parts_kernel(AttentionArgs a, int parts, const float* part_acc,
                                     const float* part_ml) {
  const std::int64_t job = blockIdx.x;
  const std::int64_t t = job / a.heads, h = job % a.heads;
  float top = -INFINITY;
  for (int p = 0; p < parts; ++p) top = fmaxf(top, part_ml[2 * (job * parts + p)]);
  float sum = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const float mp = part_ml[2 * (job * parts + p)];
    if (mp > -INFINITY) sum += part_ml[2 * (job * parts + p) + 1] * expf(mp - top);
  }
  const float factor = sum > 0.0f ? output_factor(a, h, top, sum) : 0.0f;
  float* out = a.out + t * a.out_token_stride + h * a.out_head_stride;
  for (std::int64_t d = threadIdx.x; d < a.value_dim; d += blockDim.x) {
    float v = 0.0f;
    for (int p = 0; p < parts; ++p) {
      const float mp = part_ml[2 * (job * parts + p)];
      if (mp > -INFINITY) v += part_acc[(job * parts + p) * a.value_dim + d] * expf(mp - top);
    }
    out[d] = v * factor;
  }
}

std::int64_t parts_for(const AttentionArgs& a, int multiprocessors) {
  const std::int64_t jobs = a.n * a.heads;
  const std::int64_t end = a.pos0 + a.n;
  const std::int64_t longest = a.window > 0 && end > a.window ? a.window : end;
  const std::int64_t wanted = 2 * static_cast<std::int64_t>(multiprocessors);
  if (jobs >= wanted || longest < 2 * kMinPart) return 1;
  std::int64_t parts = (wanted + jobs - 1) / jobs;
  if (parts > longest / kMinPart) parts = longest / kMinPart;
  return parts > 65535 ? 65535 : parts;
}

template <int KPL, int VPL>
void launch(const AttentionArgs& a, std::int64_t parts, float* scratch, cudaStream_t stream) {
  const std::int64_t jobs = a.n * a.heads;
  float* part_acc = scratch;
  float* part_ml = scratch + jobs * parts * a.value_dim;
  const dim3 grid(static_cast<unsigned>(jobs), static_cast<unsigned>(parts));
  attention_kernel<KPL, VPL>
      <<<grid, kWarps * 32, 0, stream>>>(a, static_cast<int>(parts), part_acc, part_ml);
  check(cudaGetLastError(), "computing attention");
  if (parts > 1) {
    combine_parts_kernel<<<static_cast<unsigned>(jobs), 128, 0, stream>>>(
        a, static_cast<int>(parts), part_acc, part_ml);
    check(cudaGetLastError(), "combining attention parts");
  }
}

constexpr int kMaxNope = 512;

__global__ void absorb_kernel(const float* q, std::int64_t heads, std::int64_t nope,
                              std::int64_t rope, std::int64_t vd, DeviceWeights kv_b,
                              float* q_keys) {
  const std::int64_t job = blockIdx.x;  // t * heads + h
  const std::int64_t h = job % heads;
  const std::int64_t lora = kv_b.cols;
  const float* qn = q + job * (nope + rope);
  __shared__ float q_nope[kMaxNope];
  for (std::int64_t r = threadIdx.x; r < nope; r += blockDim.x) q_nope[r] = qn[r];
  __syncthreads();
  float* out = q_keys + job * (lora + rope);
  const std::int64_t row0 = h * (nope + vd);
  for (std::int64_t c = threadIdx.x; c < lora; c += blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t r = 0; r < nope; ++r)
      acc += q_nope[r] * load_weight(kv_b.data, kv_b.type, (row0 + r) * lora + c);
    out[c] = acc;
  }
  for (std::int64_t r = threadIdx.x; r < rope; r += blockDim.x) out[lora + r] = qn[nope + r];
}

__global__ void expand_kernel(const float* o_latent, std::int64_t heads, std::int64_t nope,
                              std::int64_t vd, DeviceWeights kv_b, float* out) {
  const std::int64_t job = blockIdx.x;
  const std::int64_t h = job % heads;
  const std::int64_t lora = kv_b.cols;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* o = o_latent + job * lora;
  for (std::int64_t j = warp; j < vd; j += warps) {
    const std::int64_t row = h * (nope + vd) + nope + j;
    float acc = 0.0f;
    for (std::int64_t c = lane; c < lora; c += 32)
      acc += o[c] * load_weight(kv_b.data, kv_b.type, row * lora + c);
    acc = warp_sum(acc);
    if (lane == 0) out[job * vd + j] = acc;
  }
}

}  // namespace

std::int64_t attention_scratch_floats(const AttentionArgs& a, int multiprocessors) {
  const std::int64_t parts = parts_for(a, multiprocessors);
  if (parts == 1) return 0;
  return a.n * a.heads * parts * (a.value_dim + 2);
}

void attention(const AttentionArgs& a, float* scratch, int multiprocessors, cudaStream_t stream) {
  if (a.n <= 0 || a.heads <= 0) return;
  if (a.key_dim > kMaxAttentionKeyDim || a.value_dim > kMaxAttentionValueDim) {
    throw std::invalid_argument("attention heads of " + std::to_string(a.key_dim) + " key and " +
                                std::to_string(a.value_dim) +
                                " value dimensions are wider than the CUDA kernels take");
  }
  const std::int64_t parts = parts_for(a, multiprocessors);
  if (a.key_dim <= 128 && a.value_dim <= 128)
    launch<4, 4>(a, parts, scratch, stream);
  else if (a.key_dim <= 256 && a.value_dim <= 256)
    launch<8, 8>(a, parts, scratch, stream);
  else
    launch<18, 16>(a, parts, scratch, stream);
}

void absorb_latent_queries(const float* q, std::int64_t n, std::int64_t heads, std::int64_t nope,
                           std::int64_t rope, std::int64_t vd, const DeviceWeights& kv_b,
                           float* q_keys, cudaStream_t stream) {
  if (n <= 0) return;
  if (nope > kMaxNope) {
    throw std::invalid_argument("latent attention with " + std::to_string(nope) +
                                " non-rotary query dimensions is wider than the CUDA kernels take");
  }
  absorb_kernel<<<static_cast<unsigned>(n * heads), 256, 0, stream>>>(q, heads, nope, rope, vd,
                                                                      kv_b, q_keys);
  check(cudaGetLastError(), "mapping queries into the latent space");
}

void expand_latent_values(const float* o_latent, std::int64_t n, std::int64_t heads,
                          std::int64_t nope, std::int64_t vd, const DeviceWeights& kv_b, float* out,
                          cudaStream_t stream) {
  if (n <= 0) return;
  expand_kernel<<<static_cast<unsigned>(n * heads), 256, 0, stream>>>(o_latent, heads, nope, vd,
                                                                      kv_b, out);
  check(cudaGetLastError(), "expanding latent attention's values");
}

}  // namespace tandem::kernels::cuda
