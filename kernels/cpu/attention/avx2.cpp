// The Avx2 attention variant: the fp32 multiply-adds of the fp32 cache (attention/fp32_lanes.h)
// and the BF16 one (attention/bf16_lanes.h) in 8-float vectors, with the softmax and the passes
// of loop.h at the same width; prompts without fetching ahead (loop.h says why). The 8-bit
// cache's are attention/avx2_int8.cpp. Compiled for AVX2 with FMA; run only where
// attention_variant_supported says so.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include "kernels/cpu/attention/bf16_lanes.h"
#include "kernels/cpu/attention/fp32_lanes.h"
#include "kernels/cpu/attention/loop.h"

static_assert(sizeof(tandem::kernels::VecLanes) == 32,
              "attention/avx2.cpp is compiled for AVX2 without AVX-512");

namespace tandem::kernels::attention_loop {

void attend_bf16_avx2(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                      std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                      float* max, float* sum) {
  const Bf16KvLanes<Vec8> k{kv};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_prompt_bf16_avx2(const float* q, std::int64_t nq, std::int64_t tokens, const Bf16Kv& kv,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride) {
  const Bf16KvLanes<Vec8, /*Fetch=*/false> k{kv};  // a prompt's blocks are in the caches
  attend_prompt_blocks(k, q, nq * kv.key_dim, nq, tokens, pos0, window, scale, sinks, out,
                       out_stride);
}

void attend_fp32_avx2(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                      const float* values, std::int64_t value_stride, std::int64_t value_dim,
                      std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                      const float* sinks, float* max, float* sum) {
  const Fp32KvLanes<Vec8> kv{keys, key_dim, values, value_stride, value_dim};
  attend_all(kv, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_prompt_fp32_avx2(const float* q, std::int64_t q_stride, std::int64_t nq,
                             std::int64_t tokens, const float* keys, std::int64_t key_dim,
                             const float* values, std::int64_t value_stride, std::int64_t value_dim,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride) {
  const Fp32KvLanes<Vec8, /*Fetch=*/false> kv{keys, key_dim, values, value_stride, value_dim};
  attend_prompt_blocks(kv, q, q_stride, nq, tokens, pos0, window, scale, sinks, out, out_stride);
}

}  // namespace tandem::kernels::attention_loop
