// The 8-bit cache's fp32 kernel, in vectors of 16 floats (the Portable variant, int8.cpp,
// whose target clones lower them for each instruction set). The bytes are the VPDPBUSD
// variant's (avx512vnni.cpp): each key byte times its group's scale, each weight byte times
// its chunk's factor, the rest multiply-adds in fp32. (The Avx2 variant sums the bytes'
// products in integers, attention/avx2_int8.cpp.) Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {

// Bytes as many as V's floats (8 or 16).
typedef std::uint8_t Bytes8 __attribute__((vector_size(8)));
typedef std::uint8_t Bytes16 __attribute__((vector_size(16)));
template <class V>
using ByteLanesOf = std::conditional_t<sizeof(V) == 32, Bytes8, Bytes16>;

// The largest of a vector's lanes.
template <class V>
inline __attribute__((always_inline)) float max_lanes(V v) {
  float m = v[0];
  for (int k = 1; k < kLanesOf<V>; ++k) m = std::max(m, v[k]);
  return m;
}

// The weighing's bytes of one chunk of kInt8ValueChunk positions from c0, of which [lo, hi)
// are weighed (p[i * p_stride + s - begin] for s there; the others weigh 0), for each of the
// value rows' `groups` scale groups (int8_value_group):
// w[(g * nq + i) * kInt8ValueChunk + s - c0] = round(p x 255 / (the chunk's largest p) x
// (the value's group scale / the chunk's largest)), and f[g * nq + i] what a sum of w x value
// byte is multiplied by. The same bytes as the VPDPBUSD variant's (avx512vnni.cpp).
template <class V>
inline __attribute__((always_inline)) void chunk_weights(
    const float* p, std::int64_t p_stride, std::int64_t begin, int nq, const float* value_scales,
    std::int64_t scale_stride, std::int64_t groups, std::int64_t c0, std::int64_t lo,
    std::int64_t hi, std::uint8_t* w, float* f) {
  using I = IntLanesOf<V>;
  using Bytes = ByteLanesOf<V>;
  constexpr int L = kLanesOf<V>;
  constexpr int kVecs = kInt8ValueChunk / L;
  static_assert(kInt8ValueChunk % L == 0, "whole vectors of positions");
  const V first = V{} + static_cast<float>(lo - c0);
  const V last = V{} + static_cast<float>(hi - c0);
  V k0;
  for (int k = 0; k < L; ++k) k0[k] = static_cast<float>(k);
  // Each group's value scales over the chunk, as a share of the largest.
  V b[kInt8MaxDim / kInt8Group][kVecs];
  float largest[kInt8MaxDim / kInt8Group];
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* s = value_scales + g * scale_stride + c0;  // whole chunks are there
    V sv[kVecs];
    V top = V{};
    for (int r = 0; r < kVecs; ++r) {
      const V k = k0 + static_cast<float>(L * r);
      sv[r] = k >= first && k < last ? load_lanes<V>(s + L * r) : V{};
      top = sv[r] > top ? sv[r] : top;
    }
    const float m = max_lanes(top);
    largest[g] = m;
    for (int r = 0; r < kVecs; ++r) b[g][r] = m > 0.0f ? sv[r] / m : V{};
  }
  for (int i = 0; i < nq; ++i) {
    // The row's weights over the chunk: loaded whole where the chunk lies inside [lo, hi),
    // else one by one (the scores' row holds [begin, end) only).
    V pv[kVecs];
    const float* row = p + i * p_stride - begin;
    if (lo == c0 && hi == c0 + kInt8ValueChunk) {
      for (int r = 0; r < kVecs; ++r) pv[r] = load_lanes<V>(row + c0 + L * r);
    } else {
      float part[kInt8ValueChunk] = {};
      for (std::int64_t k = lo; k < hi; ++k) part[k - c0] = row[k];
      for (int r = 0; r < kVecs; ++r) pv[r] = load_lanes<V>(part + L * r);
    }
    V top = V{};
    for (int r = 0; r < kVecs; ++r) top = pv[r] > top ? pv[r] : top;
    const float m = max_lanes(top);
    const float a = m > 0.0f ? 255.0f / m : 0.0f;
    for (int r = 0; r < kVecs; ++r) pv[r] *= a;
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t* out = w + (g * nq + i) * kInt8ValueChunk;
      for (int r = 0; r < kVecs; ++r) {
        constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
        V x = (pv[r] * b[g][r] + kRound) - kRound;
        x = x > 255.0f ? V{} + 255.0f : x;
        const Bytes wb = __builtin_convertvector(__builtin_convertvector(x, I), Bytes);
        std::memcpy(out + L * r, &wb, L);
      }
      f[g * nq + i] = m / 255.0f * largest[g];
    }
  }
}

template <class V, bool Fetch = true>
struct Int8KvLanes : Int8Kv, WeighIntoRows<Int8KvLanes<V, Fetch>> {
  const Int8Queries* queries;

  static constexpr int kLanes = LaneShape<V>::kLanes, kPerTile = LaneShape<V>::kPerTile,
                       kGroup = LaneShape<V>::kGroup;
  // Of a value group's 32 columns, a weighing pass takes two vectors.
  static constexpr int kSlices = static_cast<int>(kInt8Group / LaneShape<V>::kSlice);

  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    const std::int64_t r0 = queries->row(q);
    in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
      score_group<n, Fetch && i0 == 0>(r0 + i0, begin, end, scale, scores + i0 * stride, stride);
    });
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
      chunk_weights<V>(p, p_stride, begin, NQ, value_scales, value_scale_stride, groups / per_scale,
                       c0, lo, hi, w, f);
      const std::int64_t j_lo = (lo - c0) / 4, j_hi = (hi - c0 + 3) / 4;
      const std::int8_t* next = values + int8_value_index(c0 + kChunk, 0, dim);
      for (std::int64_t g = 0; g < groups; ++g) {
        // The next chunk, a share of it in each group's pass over this one.
        if constexpr (Fetch) fetch_row_share(next, kChunk * dim, g, groups);
        // Each weight byte times its chunk's factor, w[i][k] f[i], once a scale group.
        if (g % per_scale == 0) {
          const std::int64_t vg = g / per_scale;
          for (int i = 0; i < NQ; ++i) {
            const std::uint8_t* wi = w + (vg * NQ + i) * kChunk;
            for (std::int64_t k = 0; k < kChunk; ++k)
              wf[i][k] = static_cast<float>(wi[k]) * f[vg * NQ + i];
          }
        }
        for (int s = 0; s < kSlices; ++s) {
          const std::int64_t d0 = g * kInt8Group + s * 2 * kLanes;
          in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
            weigh_group<NQ, i0, n>(wf, c0, j_lo, j_hi, d0, c0 == c_begin, corr, rows);
          });
        }
      }
    }
  }

 private:
  // Rows [r0, r0 + N)'s scores; the first pass over the keys (`fetch`) fetches the tiles ahead.
  template <int N, bool fetch>
  __attribute__((always_inline)) void score_group(std::int64_t r0, std::int64_t begin,
                                                  std::int64_t end, float scale, float* scores,
                                                  std::int64_t stride) const {
    using I = IntLanesOf<V>;
    const std::int64_t dim = key_dim, groups = dim / kInt8Group;
    const std::int8_t* q8 = queries->q8.data() + r0 * dim;
    const std::int32_t* corr = queries->correction.data() + r0 * groups;
    for (std::int64_t t0 = begin - begin % kKeyTile; t0 < end; t0 += kKeyTile) {
      const std::uint8_t* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
      const std::uint8_t* ahead = tile + kInt8KeyTilesAhead * dim * kKeyTile;
      const float* ks = key_scales + (t0 / kKeyTile) * groups * kKeyTile;
      V acc[N][kPerTile];
      for (int i = 0; i < N; ++i)
        for (int h = 0; h < kPerTile; ++h) acc[i][h] = V{};
      for (std::int64_t g = 0; g < groups; ++g) {
        V s[kPerTile];
        for (int h = 0; h < kPerTile; ++h) s[h] = load_lanes<V>(ks + g * kKeyTile + h * kLanes);
        // The stored offset of 128, taken away once a group: scale x 128 x the query's bytes.
        for (int i = 0; i < N; ++i) {
          const float c = static_cast<float>(corr[i * groups + g]);
          for (int h = 0; h < kPerTile; ++h) acc[i][h] -= s[h] * c;
        }
        for (std::int64_t dq = g * kInt8Group / 4; dq < (g + 1) * kInt8Group / 4; ++dq) {
          if constexpr (fetch) __builtin_prefetch(ahead + dq * 4 * kKeyTile, 0, 2);
          // Lane s: position s's four bytes of dimensions 4 dq .. 4 dq + 3.
          I k[kPerTile];
          for (int h = 0; h < kPerTile; ++h)
            std::memcpy(&k[h], tile + dq * 4 * kKeyTile + h * 4 * kLanes, sizeof(I));
          for (int j = 0; j < 4; ++j) {
            V kj[kPerTile];
            for (int h = 0; h < kPerTile; ++h)
              kj[h] = __builtin_convertvector((k[h] >> (8 * j)) & 0xFF, V) * s[h];
            for (int i = 0; i < N; ++i) {
              const float qd = static_cast<float>(q8[i * dim + dq * 4 + j]);
              for (int h = 0; h < kPerTile; ++h) acc[i][h] += qd * kj[h];
            }
          }
        }
      }
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      for (int i = 0; i < N; ++i) {
        const float factor = scale * queries->scale[static_cast<std::size_t>(r0 + i)];
        float row[kKeyTile];
        for (int h = 0; h < kPerTile; ++h) store_lanes(row + h * kLanes, acc[i][h] * factor);
        for (std::int64_t s = lo; s < hi; ++s) scores[i * stride + (s - begin)] = row[s - t0];
      }
    }
  }

  // Rows [I0, I0 + N)'s columns [d0, d0 + 2 kLanes) over the chunk at c0's quads [j_lo, j_hi):
  // from each row's output after the first chunk (and in the first, that output scaled by
  // `corr`, or nothing where corr is null or 0).
  template <int NQ, int I0, int N>
  __attribute__((always_inline)) void weigh_group(const float (&wf)[NQ][kInt8ValueChunk],
                                                  std::int64_t c0, std::int64_t j_lo,
                                                  std::int64_t j_hi, std::int64_t d0, bool first,
                                                  const float* corr, float* const* rows) const {
    using I = IntLanesOf<V>;
    const std::int64_t dim = value_dim;
    V a0[N], a1[N];
    for (int i = 0; i < N; ++i) {
      const float* o = rows[I0 + i] + d0;
      const float c = !first ? 1.0f : corr != nullptr ? corr[I0 + i] : 0.0f;
      a0[i] = c == 0.0f ? V{} : c * load_lanes<V>(o);
      a1[i] = c == 0.0f ? V{} : c * load_lanes<V>(o + kLanes);
    }
    for (std::int64_t jq = j_lo; jq < j_hi; ++jq) {
      const std::int8_t* row = values + int8_value_index(c0 + 4 * jq, d0, dim);
      I v0, v1;  // lane d: the quad's four bytes of value d (and of d + kLanes)
      std::memcpy(&v0, row, sizeof(v0));
      std::memcpy(&v1, row + 4 * kLanes, sizeof(v1));
      for (int j = 0; j < 4; ++j) {
        // Byte j of each lane, sign-extended.
        const V x0 = __builtin_convertvector((v0 << (24 - 8 * j)) >> 24, V);
        const V x1 = __builtin_convertvector((v1 << (24 - 8 * j)) >> 24, V);
        for (int i = 0; i < N; ++i) {
          const float wij = wf[I0 + i][4 * jq + j];
          a0[i] += wij * x0;
          a1[i] += wij * x1;
        }
      }
    }
    for (int i = 0; i < N; ++i) {
      store_lanes(rows[I0 + i] + d0, a0[i]);
      store_lanes(rows[I0 + i] + d0 + kLanes, a1[i]);
    }
  }
};

}  // namespace tandem::kernels::attention_loop
