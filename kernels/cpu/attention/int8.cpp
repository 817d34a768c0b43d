// Attention over the 8-bit KV cache (attention.h): storing a position, quantising queries, and
// the Portable variant (attention/int8_lanes.h in 16-float vectors, lowered for each
// instruction set). The Avx2 variant is attention/avx2_int8.cpp (VPMADDWD), the VPDPBUSD one
// avx512vnni.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/int8_lanes.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels {
namespace {

// x[0..n) (n a multiple of 16) to signed bytes with one scale, the largest magnitude / 127,
// at out[j * Step] (plus Offset); returns the scale. x * 127 / max never rounds past 127.
template <class Out, int Offset, int Step>
inline __attribute__((always_inline)) float quantize_group(const float* x, std::int64_t n,
                                                           Out* out) {
  Vec16 largest = Vec16{};
  for (std::int64_t j = 0; j < n; j += 16) {
    const Vec16 v = load16(x + j);
    const Vec16 a = v < 0.0f ? -v : v;
    largest = a > largest ? a : largest;
  }
  float a = 0.0f;
  for (int k = 0; k < 16; ++k) a = std::max(a, largest[k]);
  const float r = a > 0.0f ? 127.0f / a : 0.0f;
  for (std::int64_t j = 0; j < n; j += 16) {
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const Vec16 y = (load16(x + j) * r + kRound) - kRound;
    const Int16x q = __builtin_convertvector(y, Int16x) + Offset;
    if constexpr (Step == 1) {  // 16 bytes a store (a query's row is quantised every layer)
      typedef Out Bytes __attribute__((vector_size(16)));
      const Bytes b = __builtin_convertvector(q, Bytes);
      std::memcpy(out + j, &b, sizeof(b));
    } else {
      for (int k = 0; k < 16; ++k) out[(j + k) * Step] = static_cast<Out>(q[k]);
    }
  }
  return a / 127.0f;
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void int8_store_key(
    std::uint8_t* keys, float* scales, std::int64_t pos, std::int64_t dim, const float* k) {
  for (std::int64_t g = 0; g < dim / kInt8Group; ++g) {
    std::uint8_t row[kInt8Group];
    scales[int8_key_scale_index(pos, g, dim)] =
        quantize_group<std::uint8_t, 128, 1>(k + g * kInt8Group, kInt8Group, row);
    for (std::int64_t j = 0; j < kInt8Group; ++j)
      keys[int8_key_index(pos, g * kInt8Group + j, dim)] = row[j];
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void int8_store_value(
    std::int8_t* values, float* scales, std::int64_t scale_stride, std::int64_t pos,
    std::int64_t dim, const float* v) {
  const std::int64_t width = int8_value_group(dim);
  for (std::int64_t g = 0; g < dim / width; ++g) {
    std::int8_t* first = values + int8_value_index(pos, g * width, dim);
    scales[g * scale_stride + pos] = quantize_group<std::int8_t, 0, 4>(v + g * width, width, first);
  }
}

void int8_load_key(const Int8Kv& kv, std::int64_t pos, float* k) {
  const std::int64_t dim = kv.key_dim;
  for (std::int64_t d = 0; d < dim; ++d) {
    const float scale = kv.key_scales[int8_key_scale_index(pos, d / kInt8Group, dim)];
    k[d] = static_cast<float>(static_cast<int>(kv.keys[int8_key_index(pos, d, dim)]) - 128) * scale;
  }
}

void int8_load_value(const Int8Kv& kv, std::int64_t pos, float* v) {
  const std::int64_t dim = kv.value_dim, width = int8_value_group(dim);
  for (std::int64_t c = 0; c < dim; ++c) {
    const float scale = kv.value_scales[(c / width) * kv.value_scale_stride + pos];
    v[c] = static_cast<float>(kv.values[int8_value_index(pos, c, dim)]) * scale;
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) float
int8_quantize_query(const float* q, std::int64_t dim, std::int8_t* q8) {
  return quantize_group<std::int8_t, 0, 1>(q, dim, q8);
}

namespace attention_loop {

void Int8Queries::prepare(const float* q, std::int64_t stride, std::int64_t tokens,
                          std::int64_t heads, std::int64_t dim) {
  q0 = q;
  q_stride = stride;
  nq = heads;
  key_dim = dim;
  groups = dim / kInt8Group;
  const std::int64_t rows = tokens * heads;
  q8.resize(static_cast<std::size_t>(rows * dim));
  scale.resize(static_cast<std::size_t>(rows));
  correction.resize(static_cast<std::size_t>(rows * groups));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < heads; ++i) {
      const std::int64_t r = t * heads + i;
      std::int8_t* row = q8.data() + r * dim;
      scale[static_cast<std::size_t>(r)] = int8_quantize_query(q + t * stride + i * dim, dim, row);
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int32_t sum = 0;
        for (std::int64_t j = 0; j < kInt8Group; ++j) sum += row[g * kInt8Group + j];
        correction[static_cast<std::size_t>(r * groups + g)] = 128 * sum;
      }
    }
  }
}

}  // namespace attention_loop

namespace {

using attention_loop::Int8Queries;
using attention_loop::kInt8KeyTilesAhead;

// The Portable variant: the 8-bit cache in 16-float vectors (attention/int8_lanes.h).
using Int8KvPortable = attention_loop::Int8KvLanes<Vec16>;

void check_int8(const Int8Kv& kv) {
  if (!int8_cache_takes(kv.key_dim) || !int8_cache_takes(kv.value_dim)) {
    throw std::invalid_argument(
        "an 8-bit KV cache takes rows of whole " + std::to_string(kInt8Group) + "s up to " +
        std::to_string(kInt8MaxDim) + " wide, not " + std::to_string(kv.key_dim) + " and " +
        std::to_string(kv.value_dim));
  }
}

// Which kernel takes `variant`: Portable its own fp32 one, Avx2 its VPMADDWD one; any other
// VPDPBUSD.
AttentionVariant int8_kernel(AttentionVariant variant) {
  if (variant == AttentionVariant::Portable || variant == AttentionVariant::Avx2) return variant;
  const IsaFeatures& u = detect_isa().usable;
  if (!(u.avx512f && u.avx512bw && u.avx512vl && u.avx512_vnni))
    throw std::invalid_argument("the 8-bit attention kernel needs AVX-512 VNNI");
  return AttentionVariant::Avx512Bf16;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_int8_portable(const Int8Queries& queries, const float* q, std::int64_t nq, const Int8Kv& kv,
                     std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                     const float* sinks, float* max, float* sum) {
  const Int8KvPortable k{kv, {}, &queries};
  attention_loop::attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_prompt_int8_portable(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                            std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                            std::int64_t pos0, std::int64_t window, float scale, const float* sinks,
                            float* out, std::int64_t out_stride) {
  const Int8KvPortable k{kv, {}, &queries};
  attention_loop::attend_prompt_rows(k, q, q_stride, nq, tokens, pos0, window, scale, sinks, out,
                                     out_stride);
}

void attend_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                 std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                 float* max, float* sum, AttentionVariant variant) {
  check_int8(kv);
  thread_local Int8Queries queries;
  queries.prepare(q, nq * kv.key_dim, 1, nq, kv.key_dim);
  switch (int8_kernel(variant)) {
    case AttentionVariant::Portable:
      attend_int8_portable(queries, q, nq, kv, begin, end, scale, scores, out, sinks, max, sum);
      return;
    case AttentionVariant::Avx2:
      attention_loop::attend_int8_avx2(queries, q, nq, kv, begin, end, scale, scores, out, sinks,
                                       max, sum);
      return;
    default:
      attention_loop::attend_int8_avx512(queries, q, nq, kv, begin, end, scale, scores, out, sinks,
                                         max, sum);
  }
}

}  // namespace

void attend_heads_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                       std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                       AttentionVariant variant) {
  attend_int8(q, nq, kv, begin, end, scale, scores, out, sinks, nullptr, nullptr, variant);
}

void attend_heads_part_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                            std::int64_t end, float scale, float* scores, float* out, float* max,
                            float* sum, AttentionVariant variant) {
  attend_int8(q, nq, kv, begin, end, scale, scores, out, nullptr, max, sum, variant);
}

void attend_prompt_int8(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                        const Int8Kv& kv, std::int64_t pos0, std::int64_t window, float scale,
                        const float* sinks, float* out, std::int64_t out_stride,
                        AttentionVariant variant) {
  check_int8(kv);
  thread_local Int8Queries queries;
  queries.prepare(q, q_stride, tokens, nq, kv.key_dim);
  switch (int8_kernel(variant)) {
    case AttentionVariant::Portable:
      attend_prompt_int8_portable(queries, q, q_stride, nq, tokens, kv, pos0, window, scale, sinks,
                                  out, out_stride);
      return;
    case AttentionVariant::Avx2:
      attention_loop::attend_prompt_int8_avx2(queries, q, q_stride, nq, tokens, kv, pos0, window,
                                              scale, sinks, out, out_stride);
      return;
    default:
      attention_loop::attend_prompt_int8_avx512(queries, q, q_stride, nq, tokens, kv, pos0, window,
                                                scale, sinks, out, out_stride);
  }
}

}  // namespace tandem::kernels
