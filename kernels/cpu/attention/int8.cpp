// Attention over the 8-bit KV cache (attention.h): storing a position, quantising queries and
// weights, and the Portable variant, whose integer loops the compiler vectorises for each
// instruction set. The VPDPBUSD variant is attention/avx512vnni.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention/attention.h"
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

typedef std::uint8_t Bytes16 __attribute__((vector_size(16)));

// The largest of 16 lanes.
inline __attribute__((always_inline)) float max16(Vec16 v) {
  v = v > __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)
          ? v
          : __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  float m = v[0];
  for (int k = 1; k < 8; ++k) m = std::max(m, v[k]);
  return m;
}

// The weighing's bytes of one chunk of kInt8ValueChunk positions from c0, of which [lo, hi)
// are weighed (p[i * p_stride + s - begin] for s there; the others weigh 0), for each of the
// value rows' `groups` scale groups (int8_value_group):
// w[(g * nq + i) * kInt8ValueChunk + s - c0] = round(p x 255 / (the chunk's largest p) x
// (the value's group scale / the chunk's largest)), and f[g * nq + i] what a sum of w x value
// byte is multiplied by. The same bytes as the VPDPBUSD variant's (avx512vnni.cpp).
inline __attribute__((always_inline)) void chunk_weights(
    const float* p, std::int64_t p_stride, std::int64_t begin, int nq, const float* value_scales,
    std::int64_t scale_stride, std::int64_t groups, std::int64_t c0, std::int64_t lo,
    std::int64_t hi, std::uint8_t* w, float* f) {
  constexpr int kVecs = kInt8ValueChunk / 16;
  static_assert(kInt8ValueChunk % 16 == 0, "whole vectors of positions");
  const Vec16 first = Vec16{} + static_cast<float>(lo - c0);
  const Vec16 last = Vec16{} + static_cast<float>(hi - c0);
  const Vec16 k0 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  // Each group's value scales over the chunk, as a share of the largest.
  Vec16 b[kInt8MaxDim / kInt8Group][kVecs];
  float largest[kInt8MaxDim / kInt8Group];
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* s = value_scales + g * scale_stride + c0;  // whole chunks are there
    Vec16 sv[kVecs];
    Vec16 top = Vec16{};
    for (int r = 0; r < kVecs; ++r) {
      const Vec16 k = k0 + static_cast<float>(16 * r);
      sv[r] = k >= first && k < last ? load16(s + 16 * r) : Vec16{};
      top = sv[r] > top ? sv[r] : top;
    }
    const float m = max16(top);
    largest[g] = m;
    for (int r = 0; r < kVecs; ++r) b[g][r] = m > 0.0f ? sv[r] / m : Vec16{};
  }
  for (int i = 0; i < nq; ++i) {
    // The row's weights over the chunk: loaded whole where the chunk lies inside [lo, hi),
    // else one by one (the scores' row holds [begin, end) only).
    Vec16 pv[kVecs];
    const float* row = p + i * p_stride - begin;
    if (lo == c0 && hi == c0 + kInt8ValueChunk) {
      for (int r = 0; r < kVecs; ++r) pv[r] = load16(row + c0 + 16 * r);
    } else {
      float part[kInt8ValueChunk] = {};
      for (std::int64_t k = lo; k < hi; ++k) part[k - c0] = row[k];
      for (int r = 0; r < kVecs; ++r) pv[r] = load16(part + 16 * r);
    }
    Vec16 top = Vec16{};
    for (int r = 0; r < kVecs; ++r) top = pv[r] > top ? pv[r] : top;
    const float m = max16(top);
    const float a = m > 0.0f ? 255.0f / m : 0.0f;
    for (int r = 0; r < kVecs; ++r) pv[r] *= a;
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t* out = w + (g * nq + i) * kInt8ValueChunk;
      for (int r = 0; r < kVecs; ++r) {
        constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
        Vec16 x = (pv[r] * b[g][r] + kRound) - kRound;
        x = x > 255.0f ? Vec16{} + 255.0f : x;
        const Bytes16 wb = __builtin_convertvector(__builtin_convertvector(x, Int16x), Bytes16);
        std::memcpy(out + 16 * r, &wb, 16);
      }
      f[g * nq + i] = m / 255.0f * largest[g];
    }
  }
}

// The 8-bit cache in 16-lane float vectors (the Portable variant), which GCC lowers well
// for each target where byte-wide integer loops did not (18 GFLOP/s against VPDPBUSD's 470
// on Zen 5 with AVX2). The bytes are the VPDPBUSD variant's: each key byte times its group's
// scale, each weight byte times its chunk's factor, the rest multiply-adds in fp32.
struct Int8KvPortable : Int8Kv, attention_loop::WeighIntoRows<Int8KvPortable> {
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
      const std::uint8_t* ahead = tile + kInt8KeyTilesAhead * dim * kKeyTile;
      const float* ks = key_scales + (t0 / kKeyTile) * groups * kKeyTile;
      Vec16 acc[NQ];
      for (int i = 0; i < NQ; ++i) acc[i] = Vec16{};
      for (std::int64_t g = 0; g < groups; ++g) {
        const Vec16 s = load16(ks + g * kKeyTile);
        // The stored offset of 128, taken away once a group: scale x 128 x the query's bytes.
        for (int i = 0; i < NQ; ++i) acc[i] -= s * static_cast<float>(corr[i * groups + g]);
        for (std::int64_t dq = g * kInt8Group / 4; dq < (g + 1) * kInt8Group / 4; ++dq) {
          __builtin_prefetch(ahead + dq * 4 * kKeyTile, 0, 2);
          Int16x k;  // lane s: position s's four bytes of dimensions 4 dq .. 4 dq + 3
          std::memcpy(&k, tile + dq * 4 * kKeyTile, sizeof(k));
          for (int j = 0; j < 4; ++j) {
            const Vec16 kj = __builtin_convertvector((k >> (8 * j)) & 0xFF, Vec16) * s;
            for (int i = 0; i < NQ; ++i)
              acc[i] += static_cast<float>(q8[i * dim + dq * 4 + j]) * kj;
          }
        }
      }
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      for (int i = 0; i < NQ; ++i) {
        float row[kKeyTile];
        store16(row, acc[i] * (scale * queries->scale[static_cast<std::size_t>(r0 + i)]));
        for (std::int64_t p = lo; p < hi; ++p) scores[i * stride + (p - begin)] = row[p - t0];
      }
    }
  }

  // attend_prompt_rows' weighing (weigh, from WeighIntoRows, is attend_all's).
  template <int NQ>
  __attribute__((always_inline)) void weigh_rows(const float* p, std::int64_t p_stride,
                                                 std::int64_t begin, std::int64_t end,
                                                 float* const* rows, const float* corr) const {
    constexpr std::int64_t kChunk = kInt8ValueChunk;
    const std::int64_t dim = value_dim, groups = dim / kInt8Group;
    const std::int64_t per_scale = int8_value_group(dim) / kInt8Group;  // groups a scale covers
    std::uint8_t w[kInt8MaxDim / kInt8Group * NQ * kChunk];
    float f[kInt8MaxDim / kInt8Group * NQ];
    float wf[NQ][kChunk];
    const std::int64_t c_begin = begin - begin % kChunk;
    for (std::int64_t c0 = c_begin; c0 < end; c0 += kChunk) {
      const std::int64_t lo = std::max(begin, c0), hi = std::min(end, c0 + kChunk);
      chunk_weights(p, p_stride, begin, NQ, value_scales, value_scale_stride, groups / per_scale,
                    c0, lo, hi, w, f);
      const std::int64_t j_lo = (lo - c0) / 4, j_hi = (hi - c0 + 3) / 4;
      const std::int8_t* next = values + int8_value_index(c0 + kChunk, 0, dim);
      for (std::int64_t g = 0; g < groups; ++g) {
        // The next chunk, a share of it in each group's pass over this one.
        attention_loop::fetch_row_share(next, kChunk * dim, g, groups);
        // The group's 32 values of each row: two vectors, from its output after the first
        // chunk (and in the first, that output scaled, with `corr`).
        Vec16 a0[NQ], a1[NQ];
        for (int i = 0; i < NQ; ++i) {
          const float* o = rows[i] + g * kInt8Group;
          const bool first = c0 == c_begin;
          const float c = !first ? 1.0f : corr != nullptr ? corr[i] : 0.0f;
          a0[i] = c == 0.0f ? Vec16{} : c * load16(o);
          a1[i] = c == 0.0f ? Vec16{} : c * load16(o + 16);
        }
        // Each weight byte times its chunk's factor, w[i][k] f[i], once a scale group.
        if (g % per_scale == 0) {
          const std::int64_t vg = g / per_scale;
          for (int i = 0; i < NQ; ++i) {
            const std::uint8_t* wi = w + (vg * NQ + i) * kChunk;
            for (std::int64_t k = 0; k < kChunk; ++k)
              wf[i][k] = static_cast<float>(wi[k]) * f[vg * NQ + i];
          }
        }
        for (std::int64_t jq = j_lo; jq < j_hi; ++jq) {
          const std::int8_t* row = values + int8_value_index(c0 + 4 * jq, g * kInt8Group, dim);
          Int16x v0, v1;  // lane d: the quad's four bytes of value d (and of d + 16)
          std::memcpy(&v0, row, sizeof(v0));
          std::memcpy(&v1, row + 64, sizeof(v1));
          for (int j = 0; j < 4; ++j) {
            // Byte j of each lane, sign-extended.
            const Vec16 x0 = __builtin_convertvector((v0 << (24 - 8 * j)) >> 24, Vec16);
            const Vec16 x1 = __builtin_convertvector((v1 << (24 - 8 * j)) >> 24, Vec16);
            for (int i = 0; i < NQ; ++i) {
              const float wij = wf[i][4 * jq + j];
              a0[i] += wij * x0;
              a1[i] += wij * x1;
            }
          }
        }
        for (int i = 0; i < NQ; ++i) {
          store16(rows[i] + g * kInt8Group, a0[i]);
          store16(rows[i] + g * kInt8Group + 16, a1[i]);
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
  // Avx2 (for the BF16 cache) takes this cache as Portable.
  if (variant == AttentionVariant::Portable || variant == AttentionVariant::Avx2) return false;
  const IsaFeatures& u = detect_isa().usable;
  if (!(u.avx512f && u.avx512bw && u.avx512vl && u.avx512_vnni))
    throw std::invalid_argument("the 8-bit attention kernel needs AVX-512 VNNI");
  return true;
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
