// The routed experts resident on the GPU as one grouped product, without the host learning
// which tokens went where: a kernel buckets the (token, slot) pairs per resident expert on the
// device, then every expert's gate and up products run over its bucket (blocks of experts
// with fewer tokens stop at once), the activation, the down product, and a last kernel adds
// each token's weighted results in slot order (so the sum does not depend on the buckets'
// order). Pairs are processed kExpertTokensPerPass tokens at a time, which bounds the scratch.
// The products launch blocks only for as many experts as can have tokens (at most one per
// pair): the bucketing kernel lists the experts that do, so a decoded token's eight experts
// do not pay for the scheduling of every resident expert's blocks.
#include "kernels/cuda/gemm_tiles.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

constexpr int kBucketThreads = 1024;
constexpr std::int64_t kGemvMaxPairs = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// The scratch of one pass, carved from one allocation.
struct PassScratch {
  std::int32_t* slot_of_pair;
  std::int32_t* counts;
  std::int32_t* offsets;
  std::int32_t* order;
  std::int32_t* active;  // the slots with tokens, then their count at active[slots]
  float* gate;           // [pairs x inner], the activation's result after glu_pairs
  float* up;             // [pairs x inner]
  float* down;           // [pairs x hidden]
};

PassScratch carve(void* base, std::int64_t pairs, std::int64_t hidden, std::int64_t inner,
                  std::int64_t slots) {
  auto* p = static_cast<char*>(base);
  PassScratch s;
  const auto take = [&p](std::size_t bytes) {
    void* at = p;
    p += aligned(bytes);
    return at;
  };
  s.slot_of_pair = static_cast<std::int32_t*>(take(pairs * sizeof(std::int32_t)));
  s.counts = static_cast<std::int32_t*>(take(slots * sizeof(std::int32_t)));
  s.offsets = static_cast<std::int32_t*>(take(slots * sizeof(std::int32_t)));
  s.order = static_cast<std::int32_t*>(take(pairs * sizeof(std::int32_t)));
  s.active = static_cast<std::int32_t*>(take((slots + 1) * sizeof(std::int32_t)));
  s.gate = static_cast<float*>(take(pairs * inner * sizeof(float)));
  s.up = static_cast<float*>(take(pairs * inner * sizeof(float)));
  s.down = static_cast<float*>(take(pairs * hidden * sizeof(float)));
  return s;
}

__global__ void bucket_kernel(const std::int32_t* ids, std::int64_t pairs,
                              const std::int32_t* slot_of_expert, std::int64_t expert_count,
                              std::int64_t slots, PassScratch s) {
  extern __shared__ int cursor[];
  for (std::int64_t i = threadIdx.x; i < slots; i += blockDim.x) cursor[i] = 0;
  __syncthreads();
  for (std::int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const std::int32_t e = ids[p];
    const std::int32_t slot = e >= 0 && e < expert_count ? slot_of_expert[e] : -1;
    s.slot_of_pair[p] = slot;
    if (slot >= 0) atomicAdd(&cursor[slot], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0, active = 0;
    for (std::int64_t i = 0; i < slots; ++i) {
      s.counts[i] = cursor[i];
      s.offsets[i] = run;
      cursor[i] = run;
      run += s.counts[i];
      if (s.counts[i] > 0) s.active[active++] = static_cast<std::int32_t>(i);
    }
    s.active[slots] = active;
  }
  __syncthreads();
  for (std::int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const std::int32_t slot = s.slot_of_pair[p];
    if (slot >= 0) s.order[atomicAdd(&cursor[slot], 1)] = static_cast<std::int32_t>(p);
  }
}

struct Pass {
  const float* x;
  std::int64_t k, hidden, inner, slots;
  const ExpertOnDevice* experts;
  PassScratch s;
};

// The product `which` (0 gate, 1 up, 2 down) of the expert in `slot` over its bucket.
__device__ GemmProblem expert_problem(const Pass& pass, std::int64_t slot, int which) {
  const ExpertOnDevice& e = pass.experts[slot];
  GemmProblem p;
  p.m = pass.s.counts[slot];
  p.a_rows = pass.s.order + pass.s.offsets[slot];
  p.c_rows = p.a_rows;
  p.type = WeightType::Bf16;
  if (which < 2) {
    p.x = pass.x;
    p.x_stride = pass.hidden;
    p.a_div = static_cast<std::int32_t>(pass.k);  // pair -> token
    p.w = which == 0 ? e.gate : e.up;
    p.rows = pass.inner;
    p.cols = pass.hidden;
    p.y = which == 0 ? pass.s.gate : pass.s.up;
    p.y_stride = pass.inner;
  } else {
    p.x = pass.s.gate;
    p.x_stride = pass.inner;
    p.a_div = 1;
    p.w = e.down;
    p.rows = pass.hidden;
    p.cols = pass.inner;
    p.y = pass.s.down;
    p.y_stride = pass.hidden;
  }
  return p;
}

// The slot of the expert that block column `z / products` takes, or -1 past the experts with
// tokens.
__device__ __forceinline__ std::int64_t active_slot(const Pass& pass, unsigned z, int products) {
  const std::int64_t i = z / products;
  return i < pass.s.active[pass.slots] ? pass.s.active[i] : -1;
}

// blockIdx.z = i * products + product for the i-th expert with tokens; `first` is the first
// product (0 gate, 2 down).
__global__ void grouped_gemv_kernel(Pass pass, int first, int products) {
  const std::int64_t slot = active_slot(pass, blockIdx.z, products);
  if (slot < 0) return;
  const int which = first + static_cast<int>(blockIdx.z % products);
  const GemmProblem p = expert_problem(pass, slot, which);
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (r < p.rows) gemv_warp_row(p, r);
}

__global__ void __launch_bounds__(kGemmThreads)
    grouped_gemm_kernel(Pass pass, int first, int products) {
  const std::int64_t slot = active_slot(pass, blockIdx.z, products);
  if (slot < 0) return;
  const int which = first + static_cast<int>(blockIdx.z % products);
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kTileM;
  if (m0 >= pass.s.counts[slot]) return;
  const GemmProblem p = expert_problem(pass, slot, which);
  gemm_tile(p, m0, static_cast<std::int64_t>(blockIdx.x) * kTileN);
}

__global__ void glu_pairs_kernel(Pass pass, std::int64_t pairs) {
  const std::int64_t total = pairs * pass.inner;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t pair = i / pass.inner, j = i % pass.inner;
    const std::int32_t slot = pass.s.slot_of_pair[pair];
    if (slot < 0) continue;
    const ExpertOnDevice& e = pass.experts[slot];
    float g = pass.s.gate[i], u = pass.s.up[i];
    if (e.gate_bias != nullptr) g += e.gate_bias[j];
    if (e.up_bias != nullptr) u += e.up_bias[j];
    pass.s.gate[i] = glu_value(e.glu, g, u);
  }
}

// Token blockIdx.x, columns from blockIdx.y * blockDim.x: each pair's slot, weight and bias
// are read once into shared memory (kCombinePairs at a time), then every thread adds its
// column over the pairs in slot order.
constexpr int kCombineThreads = 256;
constexpr int kCombinePairs = 32;

__global__ void combine_kernel(Pass pass, const float* weights, float* out) {
  __shared__ float pair_weight[kCombinePairs];
  __shared__ const float* pair_bias[kCombinePairs];
  __shared__ bool pair_used[kCombinePairs];
  const std::int64_t t = blockIdx.x;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (std::int64_t j0 = 0; j0 < pass.k; j0 += kCombinePairs) {
    const std::int64_t count = pass.k - j0 < kCombinePairs ? pass.k - j0 : kCombinePairs;
    __syncthreads();  // the previous group's values may still be read
    if (threadIdx.x < count) {
      const std::int64_t pair = t * pass.k + j0 + threadIdx.x;
      const std::int32_t slot = pass.s.slot_of_pair[pair];
      pair_used[threadIdx.x] = slot >= 0;
      pair_weight[threadIdx.x] = weights[pair];
      pair_bias[threadIdx.x] = slot >= 0 ? pass.experts[slot].down_bias : nullptr;
    }
    __syncthreads();
    if (c < pass.hidden) {
      for (std::int64_t j = 0; j < count; ++j) {
        if (!pair_used[j]) continue;
        const std::int64_t pair = t * pass.k + j0 + j;
        const float* bias = pair_bias[j];
        const float d = pass.s.down[pair * pass.hidden + c] + (bias != nullptr ? bias[c] : 0.0f);
        acc += pair_weight[j] * d;
      }
    }
  }
  if (c < pass.hidden) out[t * pass.hidden + c] += acc;
}

void launch_products(const Pass& pass, std::int64_t pairs, std::int64_t slots, int first,
                     int products, std::int64_t rows, cudaStream_t stream) {
  // No more experts than pairs can have tokens.
  if (pairs < slots) slots = pairs;
  if (pairs <= kGemvMaxPairs) {
    const dim3 grid(static_cast<unsigned>((rows + kGemvWarps - 1) / kGemvWarps), 1,
                    static_cast<unsigned>(slots * products));
    grouped_gemv_kernel<<<grid, kGemvWarps * 32, 0, stream>>>(pass, first, products);
  } else {
    const dim3 grid(static_cast<unsigned>((rows + kTileN - 1) / kTileN),
                    static_cast<unsigned>((pairs + kTileM - 1) / kTileM),
                    static_cast<unsigned>(slots * products));
    grouped_gemm_kernel<<<grid, kGemmThreads, 0, stream>>>(pass, first, products);
  }
  check(cudaGetLastError(), "multiplying by the GPU's experts");
}

}  // namespace

std::int64_t grouped_experts_scratch_bytes(std::int64_t n, std::int64_t k, std::int64_t hidden,
                                           std::int64_t inner, std::int64_t slots) {
  const std::int64_t tokens = n < kExpertTokensPerPass ? n : kExpertTokensPerPass;
  const std::int64_t pairs = tokens * k;
  return static_cast<std::int64_t>(
      2 * aligned(pairs * sizeof(std::int32_t)) + 2 * aligned(slots * sizeof(std::int32_t)) +
      aligned((slots + 1) * sizeof(std::int32_t)) + 2 * aligned(pairs * inner * sizeof(float)) +
      aligned(pairs * hidden * sizeof(float)));
}

void grouped_experts(const GroupedExpertsArgs& a, void* scratch, cudaStream_t stream) {
  if (a.n <= 0 || a.slots <= 0) return;
  for (std::int64_t t0 = 0; t0 < a.n; t0 += kExpertTokensPerPass) {
    const std::int64_t tokens = a.n - t0 < kExpertTokensPerPass ? a.n - t0 : kExpertTokensPerPass;
    const std::int64_t pairs = tokens * a.k;
    Pass pass;
    pass.x = a.x + t0 * a.hidden;
    pass.k = a.k;
    pass.hidden = a.hidden;
    pass.inner = a.inner;
    pass.slots = a.slots;
    pass.experts = a.experts;
    pass.s = carve(scratch, pairs, a.hidden, a.inner, a.slots);
    bucket_kernel<<<1, kBucketThreads, a.slots * sizeof(int), stream>>>(
        a.ids + t0 * a.k, pairs, a.slot_of_expert, a.expert_count, a.slots, pass.s);
    check(cudaGetLastError(), "sorting tokens by expert");
    launch_products(pass, pairs, a.slots, 0, 2, a.inner, stream);
    const std::int64_t values = pairs * a.inner;
    glu_pairs_kernel<<<static_cast<unsigned>((values + 255) / 256 > 65535 ? 65535
                                                                          : (values + 255) / 256),
                       256, 0, stream>>>(pass, pairs);
    check(cudaGetLastError(), "applying the experts' activation");
    launch_products(pass, pairs, a.slots, 2, 1, a.hidden, stream);
    const dim3 combine_grid(
        static_cast<unsigned>(tokens),
        static_cast<unsigned>((a.hidden + kCombineThreads - 1) / kCombineThreads));
    combine_kernel<<<combine_grid, kCombineThreads, 0, stream>>>(pass, a.weights + t0 * a.k,
                                                                 a.out + t0 * a.hidden);
    check(cudaGetLastError(), "adding the experts' results");
  }
}

}  // namespace tandem::kernels::cuda
