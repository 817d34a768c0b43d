// Attention over the 8-bit KV cache (attention.h): storing a position, quantising queries and
// weights, and the Portable variant, whose integer loops the compiler vectorises for each
// instruction set. The VPDPBUSD variant is attention/avx512vnni.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels {
namespace {

// x rounded to the nearest integer, ties to even, for |x| < 2^22 (as the AVX-512 conversion
// rounds): vectorised where std::nearbyint is a library call.
inline __attribute__((always_inline)) float round_even(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  return (x + kRound) - kRound;
}

// x[0..n) (n a multiple of 16) to signed bytes with one scale, the largest magnitude / 127,
// at out[j * out_step] (plus Offset); returns the scale. x * 127 / max never rounds past 127.
template <class Out, int Offset>
inline __attribute__((always_inline)) float quantize_group(const float* x, std::int64_t n, Out* out,
                                                           std::int64_t out_step) {
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
    for (int k = 0; k < 16; ++k) out[(j + k) * out_step] = static_cast<Out>(q[k]);
  }
  return a / 127.0f;
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void int8_store_key(
    std::uint8_t* keys, float* scales, std::int64_t pos, std::int64_t dim, const float* k) {
  for (std::int64_t g = 0; g < dim / kInt8Group; ++g) {
    std::uint8_t row[kInt8Group];
    scales[int8_key_scale_index(pos, g, dim)] =
        quantize_group<std::uint8_t, 128>(k + g * kInt8Group, kInt8Group, row, 1);
    for (std::int64_t j = 0; j < kInt8Group; ++j)
      keys[int8_key_index(pos, g * kInt8Group + j, dim)] = row[j];
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void int8_store_value(
    std::int8_t* values, float* scales, std::int64_t scale_stride, std::int64_t pos,
    std::int64_t dim, const float* v) {
  for (std::int64_t g = 0; g < dim / kInt8Group; ++g) {
    std::int8_t* first = values + int8_value_index(pos, g * kInt8Group, dim);
    scales[g * scale_stride + pos] =
        quantize_group<std::int8_t, 0>(v + g * kInt8Group, kInt8Group, first, 4);
  }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) float
int8_quantize_query(const float* q, std::int64_t dim, std::int8_t* q8) {
  return quantize_group<std::int8_t, 0>(q, dim, q8, 1);
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

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
int8_chunk_weights(const float* p, std::int64_t p_stride, std::int64_t begin, int nq,
                   const float* value_scales, std::int64_t scale_stride, std::int64_t groups,
                   std::int64_t c0, std::int64_t lo, std::int64_t hi, std::uint8_t* w, float* f) {
  constexpr std::int64_t kChunk = kInt8ValueChunk;
  // Each group's value scales over the chunk, as a share of the largest: b = scale / M.
  float b[kInt8MaxDim / kInt8Group][kChunk];
  float largest[kInt8MaxDim / kInt8Group];
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* s = value_scales + g * scale_stride;
    float m = 0.0f;
    for (std::int64_t k = lo; k < hi; ++k) m = std::max(m, s[k]);
    largest[g] = m;
    for (std::int64_t k = 0; k < kChunk; ++k) {
      const std::int64_t pos = c0 + k;
      b[g][k] = m > 0.0f && pos >= lo && pos < hi ? s[pos] / m : 0.0f;
    }
  }
  for (int i = 0; i < nq; ++i) {
    const float* row = p + i * p_stride - begin;  // row[pos] for pos in [lo, hi)
    float m = 0.0f;
    for (std::int64_t k = lo; k < hi; ++k) m = std::max(m, row[k]);
    const float a = m > 0.0f ? 255.0f / m : 0.0f;
    float pa[kChunk];
    for (std::int64_t k = 0; k < kChunk; ++k) {
      const std::int64_t pos = c0 + k;
      pa[k] = pos >= lo && pos < hi ? row[pos] * a : 0.0f;
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t* out = w + (g * nq + i) * kChunk;
      for (std::int64_t k = 0; k < kChunk; ++k)
        out[k] = static_cast<std::uint8_t>(std::min(255.0f, round_even(pa[k] * b[g][k])));
      f[g * nq + i] = m / 255.0f * largest[g];
    }
  }
}

}  // namespace attention_loop

namespace {

using attention_loop::Int8Queries;

// The 8-bit cache in plain integer loops (the Portable variant).
struct Int8KvPortable : Int8Kv {
  const Int8Queries* queries;

  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    const std::int64_t dim = key_dim, groups = dim / kInt8Group;
    const std::int64_t r0 = queries->row(q);
    const std::int8_t* q8 = queries->q8.data() + r0 * dim;
    const std::int32_t* corr = queries->correction.data() + r0 * groups;
    for (std::int64_t t0 = begin - begin % kKeyTile; t0 < end; t0 += kKeyTile) {
      const std::uint8_t* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
      const float* ks = key_scales + (t0 / kKeyTile) * groups * kKeyTile;
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      for (int i = 0; i < NQ; ++i) {
        float acc[kKeyTile] = {};
        for (std::int64_t g = 0; g < groups; ++g) {
          std::int32_t dot[kKeyTile] = {};
          for (std::int64_t dq = g * kInt8Group / 4; dq < (g + 1) * kInt8Group / 4; ++dq) {
            const std::uint8_t* k = tile + dq * 4 * kKeyTile;
            const std::int8_t* qd = q8 + i * dim + dq * 4;
            for (std::int64_t s = 0; s < kKeyTile; ++s)
              for (int j = 0; j < 4; ++j) dot[s] += qd[j] * k[s * 4 + j];
          }
          for (std::int64_t s = 0; s < kKeyTile; ++s)
            acc[s] += ks[g * kKeyTile + s] * static_cast<float>(dot[s] - corr[i * groups + g]);
        }
        const float f = scale * queries->scale[static_cast<std::size_t>(r0 + i)];
        for (std::int64_t s = lo; s < hi; ++s) scores[i * stride + (s - begin)] = acc[s - t0] * f;
      }
    }
  }

  template <int NQ>
  __attribute__((always_inline)) void weigh(const float* p, std::int64_t p_stride,
                                            std::int64_t begin, std::int64_t end,
                                            float* out) const {
    constexpr std::int64_t kChunk = kInt8ValueChunk;
    const std::int64_t dim = value_dim, groups = dim / kInt8Group;
    std::uint8_t w[kInt8MaxDim / kInt8Group * NQ * kChunk];
    float f[kInt8MaxDim / kInt8Group * NQ];
    const std::int64_t c_begin = begin - begin % kChunk;
    for (std::int64_t c0 = c_begin; c0 < end; c0 += kChunk) {
      const std::int64_t lo = std::max(begin, c0), hi = std::min(end, c0 + kChunk);
      attention_loop::int8_chunk_weights(p, p_stride, begin, NQ, value_scales, value_scale_stride,
                                         groups, c0, lo, hi, w, f);
      for (std::int64_t g = 0; g < groups; ++g) {
        for (int i = 0; i < NQ; ++i) {
          const std::uint8_t* wi = w + (g * NQ + i) * kChunk;
          std::int32_t dot[kInt8Group] = {};
          for (std::int64_t k = 0; k < kChunk; ++k) {
            const std::int8_t* v = values + int8_value_index(c0 + k, g * kInt8Group, dim);
            for (std::int64_t d = 0; d < kInt8Group; ++d) dot[d] += wi[k] * v[d * 4];
          }
          float* o = out + i * dim + g * kInt8Group;
          const float fi = f[g * NQ + i];
          for (std::int64_t d = 0; d < kInt8Group; ++d)
            o[d] = c0 == c_begin ? fi * static_cast<float>(dot[d])
                                 : o[d] + fi * static_cast<float>(dot[d]);
        }
      }
    }
  }
};

void check_int8(const Int8Kv& kv) {
  if (!int8_cache_takes(kv.key_dim) || !int8_cache_takes(kv.value_dim)) {
    throw std::invalid_argument(
        "an 8-bit KV cache takes rows of whole " + std::to_string(kInt8Group) + "s up to " +
        std::to_string(kInt8MaxDim) + " wide, not " + std::to_string(kv.key_dim) + " and " +
        std::to_string(kv.value_dim));
  }
}

bool vectorised(AttentionVariant variant) {
  if (variant == AttentionVariant::Portable) return false;
  const IsaFeatures& u = detect_isa().usable;
  if (!(u.avx512f && u.avx512bw && u.avx512vl && u.avx512_vnni))
    throw std::invalid_argument("the 8-bit attention kernel needs AVX-512 VNNI");
  return true;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_int8_portable(const Int8Queries& queries, const float* q, std::int64_t nq, const Int8Kv& kv,
                     std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                     const float* sinks, float* max, float* sum) {
  const Int8KvPortable k{kv, &queries};
  attention_loop::attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_prompt_int8_portable(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                            std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                            std::int64_t pos0, std::int64_t window, float scale, const float* sinks,
                            float* out, std::int64_t out_stride) {
  const Int8KvPortable k{kv, &queries};
  attention_loop::attend_prompt_blocks(k, q, q_stride, nq, tokens, pos0, window, scale, sinks, out,
                                       out_stride);
}

void attend_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                 std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                 float* max, float* sum, AttentionVariant variant) {
  check_int8(kv);
  thread_local Int8Queries queries;
  queries.prepare(q, nq * kv.key_dim, 1, nq, kv.key_dim);
  if (vectorised(variant)) {
    attention_loop::attend_int8_avx512(queries, q, nq, kv, begin, end, scale, scores, out, sinks,
                                       max, sum);
  } else {
    attend_int8_portable(queries, q, nq, kv, begin, end, scale, scores, out, sinks, max, sum);
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
  if (vectorised(variant)) {
    attention_loop::attend_prompt_int8_avx512(queries, q, q_stride, nq, tokens, kv, pos0, window,
                                              scale, sinks, out, out_stride);
  } else {
    attend_prompt_int8_portable(queries, q, q_stride, nq, tokens, kv, pos0, window, scale, sinks,
                                out, out_stride);
  }
}

}  // namespace tandem::kernels
