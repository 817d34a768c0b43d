#include "kernels/cpu/attention/attention.h"

#include "kernels/cpu/attention/bf16_lanes.h"
#include "kernels/cpu/attention/fp32_lanes.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::kernels {
namespace {

using attention_loop::attend_all;
using attention_loop::fetch_row_share;
using attention_loop::kBf16KeyTilesAhead;
using attention_loop::kBf16PairChunk;
using attention_loop::softmax_row;
// The fp32 cache in 16-float vectors (attention/fp32_lanes.h), the Portable variant's.
using Fp32KvPortable = attention_loop::Fp32KvLanes<Vec16>;

// ---- The BF16 cache with fp32 multiply-adds: the Portable variant in 16-float vectors
// (attention/bf16_lanes.h), the Avx2 variant in 8 (attention/avx2.cpp).

inline __attribute__((always_inline)) float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

using Bf16KvPortable = attention_loop::Bf16KvLanes<Vec16>;

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_bf16_portable(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                     std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                     float* max, float* sum) {
  const Bf16KvPortable k{kv};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_bf16(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                 std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                 float* max, float* sum, AttentionVariant variant) {
  if (kv.key_dim % 2 != 0) throw std::invalid_argument("a BF16 KV cache needs an even key width");
  // The queries rounded once for every position (the products are then exact in fp32).
  thread_local std::vector<float> rounded;
  rounded.resize(static_cast<std::size_t>(nq * kv.key_dim));
  for (std::size_t j = 0; j < rounded.size(); ++j) rounded[j] = round_bf16(q[j]);
  // Decoding has too few rows for tiles: AmxBf16 decodes as Avx512Bf16.
  switch (variant) {
    case AttentionVariant::Portable:
      attend_bf16_portable(rounded.data(), nq, kv, begin, end, scale, scores, out, sinks, max, sum);
      return;
    case AttentionVariant::Avx2:
      attention_loop::attend_bf16_avx2(rounded.data(), nq, kv, begin, end, scale, scores, out,
                                       sinks, max, sum);
      return;
    case AttentionVariant::Avx512Bf16:
    case AttentionVariant::AmxBf16:
      break;
  }
  attention_loop::attend_bf16_avx512(rounded.data(), nq, kv, begin, end, scale, scores, out, sinks,
                                     max, sum);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_prompt_bf16_portable(const float* q, std::int64_t nq, std::int64_t tokens, const Bf16Kv& kv,
                            std::int64_t pos0, std::int64_t window, float scale, const float* sinks,
                            float* out, std::int64_t out_stride) {
  const Bf16KvPortable k{kv};
  attention_loop::attend_prompt_blocks(k, q, nq * kv.key_dim, nq, tokens, pos0, window, scale,
                                       sinks, out, out_stride);
}

}  // namespace

namespace attention_loop {

__attribute__((noinline, optimize("no-tree-vectorize"))) void weigh_bf16_tail(
    const float* w, std::int64_t w_stride, std::int64_t nq, const std::uint16_t* values,
    std::int64_t value_row, std::int64_t pairs, std::int64_t d0, std::int64_t dim, bool first,
    float* out) {
  for (std::int64_t d = d0; d < dim; ++d) {
    for (std::int64_t i = 0; i < nq; ++i) {
      float acc = first ? 0.0f : out[i * dim + d];
      for (std::int64_t j = 0; j < pairs; ++j) {
        const std::uint16_t* v = values + j * 2 * value_row + 2 * d;
        acc += w[i * w_stride + 2 * j + 1] * bf16_to_f32(v[1]);
        acc += w[i * w_stride + 2 * j] * bf16_to_f32(v[0]);
      }
      out[i * dim + d] = acc;
    }
  }
}

PromptScratch& prompt_scratch(std::int64_t nq, std::int64_t value_dim, std::int64_t tokens) {
  thread_local PromptScratch s;
  const auto at_least = [](std::vector<float>& v, std::int64_t n) {
    if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
  };
  at_least(s.scores, nq * std::max(kPromptKeyBlock, kInt8PromptKeyBlock));
  at_least(s.part, nq * value_dim);
  at_least(s.part_max, nq);
  at_least(s.part_sum, nq);
  at_least(s.max, tokens * nq);
  at_least(s.sum, tokens * nq);
  return s;
}

}  // namespace attention_loop

namespace {

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_prompt_portable(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                       const float* keys, std::int64_t key_dim, const float* values,
                       std::int64_t value_stride, std::int64_t value_dim, std::int64_t pos0,
                       std::int64_t window, float scale, const float* sinks, float* out,
                       std::int64_t out_stride) {
  const Fp32KvPortable kv{keys, key_dim, values, value_stride, value_dim};
  attention_loop::attend_prompt_blocks(kv, q, q_stride, nq, tokens, pos0, window, scale, sinks, out,
                                       out_stride);
}

// attend_heads_split and attend_heads_part (max null or not) over the fp32 cache.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_fp32_portable(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                     const float* values, std::int64_t value_stride, std::int64_t value_dim,
                     std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                     const float* sinks, float* max, float* sum) {
  const Fp32KvPortable kv{keys, key_dim, values, value_stride, value_dim};
  attend_all(kv, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_fp32(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                 const float* values, std::int64_t value_stride, std::int64_t value_dim,
                 std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                 const float* sinks, float* max, float* sum, AttentionVariant variant) {
  if (variant == AttentionVariant::Avx2) {
    attention_loop::attend_fp32_avx2(q, nq, keys, key_dim, values, value_stride, value_dim, begin,
                                     end, scale, scores, out, sinks, max, sum);
  } else {
    attend_fp32_portable(q, nq, keys, key_dim, values, value_stride, value_dim, begin, end, scale,
                         scores, out, sinks, max, sum);
  }
}

}  // namespace

void attend_prompt(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                   const float* keys, std::int64_t key_dim, const float* values,
                   std::int64_t value_stride, std::int64_t value_dim, std::int64_t pos0,
                   std::int64_t window, float scale, const float* sinks, float* out,
                   std::int64_t out_stride, AttentionVariant variant) {
  if (variant == AttentionVariant::Avx2) {
    attention_loop::attend_prompt_fp32_avx2(q, q_stride, nq, tokens, keys, key_dim, values,
                                            value_stride, value_dim, pos0, window, scale, sinks,
                                            out, out_stride);
  } else {
    attend_prompt_portable(q, q_stride, nq, tokens, keys, key_dim, values, value_stride, value_dim,
                           pos0, window, scale, sinks, out, out_stride);
  }
}

namespace {

// attend_prompt_bf16 by the variant, or with the AMX tiles emulated (`emulated`).
void prompt_bf16(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                 const Bf16Kv& kv, std::int64_t pos0, std::int64_t window, float scale,
                 const float* sinks, float* out, std::int64_t out_stride, AttentionVariant variant,
                 bool emulated) {
  if (kv.key_dim % 2 != 0) throw std::invalid_argument("a BF16 KV cache needs an even key width");
  if (variant == AttentionVariant::Portable || variant == AttentionVariant::Avx2) {
    // Every token's queries rounded once, side by side.
    thread_local std::vector<float> rounded;
    const std::int64_t row = nq * kv.key_dim;
    rounded.resize(static_cast<std::size_t>(tokens * row));
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t j = 0; j < row; ++j) rounded[t * row + j] = round_bf16(q[t * q_stride + j]);
    if (variant == AttentionVariant::Avx2) {
      attention_loop::attend_prompt_bf16_avx2(rounded.data(), nq, tokens, kv, pos0, window, scale,
                                              sinks, out, out_stride);
    } else {
      attend_prompt_bf16_portable(rounded.data(), nq, tokens, kv, pos0, window, scale, sinks, out,
                                  out_stride);
    }
    return;
  }
  // The AVX-512 kernels round the queries as they copy them into their own layouts.
  using attention_loop::PromptTiles;
  const PromptTiles tiles = emulated                               ? PromptTiles::Emulated
                            : variant == AttentionVariant::AmxBf16 ? PromptTiles::Hardware
                                                                   : PromptTiles::None;
  attention_loop::attend_prompt_bf16_avx512(q, q_stride, nq, tokens, kv, pos0, window, scale, sinks,
                                            out, out_stride, tiles);
}

}  // namespace

void attend_prompt_bf16(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                        const Bf16Kv& kv, std::int64_t pos0, std::int64_t window, float scale,
                        const float* sinks, float* out, std::int64_t out_stride,
                        AttentionVariant variant) {
  prompt_bf16(q, q_stride, nq, tokens, kv, pos0, window, scale, sinks, out, out_stride, variant,
              false);
}

void attend_prompt_bf16_amx_emulated(const float* q, std::int64_t q_stride, std::int64_t nq,
                                     std::int64_t tokens, const Bf16Kv& kv, std::int64_t pos0,
                                     std::int64_t window, float scale, const float* sinks,
                                     float* out, std::int64_t out_stride) {
  if (!attention_variant_supported(AttentionVariant::Avx512Bf16))
    throw std::invalid_argument("the emulated AMX attention needs AVX-512 BF16 for the rest of it");
  prompt_bf16(q, q_stride, nq, tokens, kv, pos0, window, scale, sinks, out, out_stride,
              AttentionVariant::Avx512Bf16, true);
}

void attend_heads_split(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                        const float* values, std::int64_t value_stride, std::int64_t value_dim,
                        std::int64_t begin, std::int64_t end, float scale, float* scores,
                        float* out, const float* sinks, AttentionVariant variant) {
  attend_fp32(q, nq, keys, key_dim, values, value_stride, value_dim, begin, end, scale, scores, out,
              sinks, nullptr, nullptr, variant);
}

void attend_heads_part(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                       const float* values, std::int64_t value_stride, std::int64_t value_dim,
                       std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                       float* max, float* sum, AttentionVariant variant) {
  attend_fp32(q, nq, keys, key_dim, values, value_stride, value_dim, begin, end, scale, scores, out,
              nullptr, max, sum, variant);
}

void attend_heads(const float* q, std::int64_t nq, const float* keys, const float* values,
                  std::int64_t value_stride, std::int64_t begin, std::int64_t end, std::int64_t dim,
                  float scale, float* scores, float* out, const float* sinks,
                  AttentionVariant variant) {
  attend_heads_split(q, nq, keys, dim, values, value_stride, dim, begin, end, scale, scores, out,
                     sinks, variant);
}

void combine_attention_parts(std::int64_t parts, std::int64_t nq, std::int64_t value_dim,
                             const float* outs, const float* maxes, const float* sums,
                             const float* sinks, float* out) {
  for (std::int64_t i = 0; i < nq; ++i) {
    float mx = sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity();
    for (std::int64_t p = 0; p < parts; ++p) mx = std::max(mx, maxes[p * nq + i]);
    double denominator = sinks != nullptr ? std::exp(static_cast<double>(sinks[i]) - mx) : 0.0;
    float* o = out + i * value_dim;
    std::fill_n(o, value_dim, 0.0f);
    for (std::int64_t p = 0; p < parts; ++p) {
      if (sums[p * nq + i] == 0.0f) continue;  // an empty part
      const double w = std::exp(static_cast<double>(maxes[p * nq + i]) - mx);
      denominator += w * sums[p * nq + i];
      axpy_f32(static_cast<float>(w), outs + (p * nq + i) * value_dim, o, value_dim);
    }
    const auto inv = static_cast<float>(1.0 / denominator);
    for (std::int64_t d = 0; d < value_dim; ++d) o[d] *= inv;
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void softmax_inplace(
    float* x, std::int64_t n, float sink) {
  softmax_row(x, n, sink);
}

bool attention_variant_supported(AttentionVariant variant) {
  if (variant == AttentionVariant::Portable) return true;
  const IsaFeatures& u = detect_isa().usable;
  if (variant == AttentionVariant::Avx2) return u.avx2 && u.fma;
  const bool avx512_bf16 = u.avx512f && u.avx512bw && u.avx512vl && u.avx512_bf16;
  if (variant == AttentionVariant::Avx512Bf16) return avx512_bf16;
  return avx512_bf16 && u.amx_tile && u.amx_bf16;
}

AttentionVariant active_attention_variant() {
  static const AttentionVariant chosen = [] {
    const CpuVariant cpu = active_variant();
    if (cpu >= CpuVariant::Amx && attention_variant_supported(AttentionVariant::AmxBf16))
      return AttentionVariant::AmxBf16;
    if (cpu >= CpuVariant::Avx512 && attention_variant_supported(AttentionVariant::Avx512Bf16))
      return AttentionVariant::Avx512Bf16;
    // An AVX-512 CPU without BF16 keeps Portable, whose clone runs in AVX-512 registers.
    if (cpu == CpuVariant::Avx2 && attention_variant_supported(AttentionVariant::Avx2))
      return AttentionVariant::Avx2;
    return AttentionVariant::Portable;
  }();
  return chosen;
}

const char* attention_variant_name(AttentionVariant variant) {
  switch (variant) {
    case AttentionVariant::Avx2:
      return "avx2";
    case AttentionVariant::Avx512Bf16:
      return "avx512-bf16";
    case AttentionVariant::AmxBf16:
      return "amx-bf16";
    case AttentionVariant::Portable:
      break;
  }
  return "portable";
}

void attend_heads_bf16(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                       std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                       AttentionVariant variant) {
  attend_bf16(q, nq, kv, begin, end, scale, scores, out, sinks, nullptr, nullptr, variant);
}

void attend_heads_part_bf16(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                            std::int64_t end, float scale, float* scores, float* out, float* max,
                            float* sum, AttentionVariant variant) {
  attend_bf16(q, nq, kv, begin, end, scale, scores, out, nullptr, max, sum, variant);
}

void attend_head_reference(const float* q, const float* keys, const float* values,
                           std::int64_t value_stride, std::int64_t len, std::int64_t dim,
                           float scale, float* scores, float* out, float sink) {
  for (std::int64_t s = 0; s < len; ++s) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < dim; ++d)
      dot += static_cast<double>(q[d]) * keys[tiled_key_index(s, d, dim)];
    scores[s] = static_cast<float>(dot) * scale;
  }
  // Written out here rather than through softmax_inplace, so the kernels' softmax is checked
  // against an independent one.
  double mx = sink;
  for (std::int64_t s = 0; s < len; ++s) mx = std::max(mx, static_cast<double>(scores[s]));
  double sum = std::exp(static_cast<double>(sink) - mx);
  for (std::int64_t s = 0; s < len; ++s) sum += std::exp(scores[s] - mx);
  for (std::int64_t s = 0; s < len; ++s)
    scores[s] = static_cast<float>(std::exp(scores[s] - mx) / sum);
  for (std::int64_t d = 0; d < dim; ++d) {
    double sum = 0.0;
    for (std::int64_t s = 0; s < len; ++s)
      sum += static_cast<double>(scores[s]) * values[s * value_stride + d];
    out[d] = static_cast<float>(sum);
  }
}

}  // namespace tandem::kernels
