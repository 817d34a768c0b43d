// The BF16 cache with fp32 multiply-adds, in vectors of 16 floats (the Portable variant, whose
// target clones lower them for each instruction set) or of 8 (the Avx2 variant, compiled for
// AVX2 in attention/avx2.cpp, where 16-float vectors would live in memory). Internal to
// kernels/cpu; read by attention_loop's passes (loop.h).
//
// The two widths take the same products in the same order for each output (a dimension
// pair's odd product added before its even one, as VDPBF16PS does); they differ in how many
// queries and columns a pass keeps in registers, and so in which columns fall to the scalar
// tail, whose multiply-adds are not fused.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {

// The values [d0, dim) past the last whole slice of Bf16KvLanes::weigh, one at a time:
// out[i][d] (+)= sum over the pairs of w[i][2j + 1] * v(2j + 1, d) + w[i][2j] * v(2j, d).
// Out of line and unvectorised (attention.cpp): GCC 12's vectoriser at -O3 got this loop wrong
// when inlined into the weighing (the first position's weight counted twice; tst_attention's
// bf16 tests caught it).
void weigh_bf16_tail(const float* w, std::int64_t w_stride, std::int64_t nq,
                     const std::uint16_t* values, std::int64_t value_row, std::int64_t pairs,
                     std::int64_t d0, std::int64_t dim, bool first, float* out);

// The two BF16 halves of a vector's worth of words as floats: the low halves (even elements)
// and the high.
template <class V>
inline __attribute__((always_inline)) void split_pairs(const std::uint16_t* p, V& even, V& odd) {
  typedef std::uint32_t Words __attribute__((vector_size(sizeof(V))));
  Words w;
  std::memcpy(&w, p, sizeof(w));
  const Words lo = w << 16, hi = w & 0xFFFF0000u;
  std::memcpy(&even, &lo, sizeof(even));
  std::memcpy(&odd, &hi, sizeof(odd));
}

template <class V, bool Fetch = true>
struct Bf16KvLanes : Bf16Kv {
  static constexpr int kLanes = LaneShape<V>::kLanes, kPerTile = LaneShape<V>::kPerTile,
                       kGroup = LaneShape<V>::kGroup;
  static constexpr std::int64_t kSlice = LaneShape<V>::kSlice;

  // As Fp32KvLanes::score, one dimension pair of a tile (a row of 16 words) at a time: the odd
  // dimension's products added before the even one's, as VDPBF16PS does. q is rounded to BF16.
  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
      score_group<n, Fetch && i0 == 0>(q + i0 * key_dim, begin, end, scale, scores + i0 * stride,
                                       stride);
    });
  }

  // out[i] = sum of round_bf16(p) * v over [begin, end), a pair of positions at a time (the
  // pair's other position, outside the range, weighs 0), in chunks whose value rows stay in
  // the first-level cache while every slice of them is taken.
  template <int NQ>
  __attribute__((always_inline)) void weigh(const float* p, std::int64_t p_stride,
                                            std::int64_t begin, std::int64_t end,
                                            float* out) const {
    const std::int64_t dim = value_dim;
    const std::int64_t j_begin = begin / 2, j_end = (end + 1) / 2;
    float w[NQ][2 * kBf16PairChunk];
    for (std::int64_t j0 = j_begin; j0 < j_end; j0 += kBf16PairChunk) {
      const std::int64_t j1 = std::min(j_end, j0 + kBf16PairChunk);
      const bool first = j0 == j_begin;
      const std::int64_t lo = std::max(begin, 2 * j0), hi = std::min(end, 2 * j1);
      for (int i = 0; i < NQ; ++i) {
        std::fill_n(w[i], 2 * (j1 - j0), 0.0f);
        for (std::int64_t s = lo; s < hi; ++s)
          w[i][s - 2 * j0] = bf16_to_f32(f32_to_bf16(p[i * p_stride + s - begin]));
      }
      std::int64_t d0 = 0;
      for (; d0 + kSlice <= dim; d0 += kSlice) {
        in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
          weigh_slice<NQ, i0, n>(w, j0, j1, d0, first, out);
        });
      }
      weigh_bf16_tail(w[0], 2 * kBf16PairChunk, NQ, values + j0 * 2 * value_row, value_row, j1 - j0,
                      d0, dim, first, out);
    }
  }

 private:
  // N queries' scores; the first pass over the keys (`fetch`) fetches the tiles ahead.
  template <int N, bool fetch>
  __attribute__((always_inline)) void score_group(const float* q, std::int64_t begin,
                                                  std::int64_t end, float scale, float* scores,
                                                  std::int64_t stride) const {
    const std::int64_t dim = key_dim, pairs = dim / 2;
    for (std::int64_t t0 = begin - begin % kKeyTile; t0 < end; t0 += kKeyTile) {
      const std::uint16_t* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
      const std::uint16_t* ahead = tile + kBf16KeyTilesAhead * dim * kKeyTile;
      V acc[N][kPerTile];
      for (int i = 0; i < N; ++i)
        for (int h = 0; h < kPerTile; ++h) acc[i][h] = V{};
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        if constexpr (fetch) __builtin_prefetch(ahead + dp * 2 * kKeyTile, 0, 2);
        V even[kPerTile], odd[kPerTile];
        for (int h = 0; h < kPerTile; ++h)
          split_pairs(tile + dp * 2 * kKeyTile + h * 2 * kLanes, even[h], odd[h]);
        for (int i = 0; i < N; ++i) {
          const float qo = q[i * dim + 2 * dp + 1], qe = q[i * dim + 2 * dp];
          for (int h = 0; h < kPerTile; ++h) {
            acc[i][h] += qo * odd[h];
            acc[i][h] += qe * even[h];
          }
        }
      }
      // Of the tile, [begin, end) is kept.
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      for (int i = 0; i < N; ++i) {
        if (lo == t0 && hi == t0 + kKeyTile) {
          for (int h = 0; h < kPerTile; ++h)
            store_lanes(scores + i * stride + (t0 - begin) + h * kLanes, acc[i][h] * scale);
          continue;
        }
        float part[kKeyTile];
        for (int h = 0; h < kPerTile; ++h) store_lanes(part + h * kLanes, acc[i][h] * scale);
        for (std::int64_t s = lo; s < hi; ++s) scores[i * stride + (s - begin)] = part[s - t0];
      }
    }
  }

  // Queries [I0, I0 + N)'s columns [d0, d0 + kSlice) over the chunk's pairs [j0, j1); the
  // first pass over the rows fetches its share of the next chunk's.
  template <int NQ, int I0, int N>
  __attribute__((always_inline)) void weigh_slice(const float (&w)[NQ][2 * kBf16PairChunk],
                                                  std::int64_t j0, std::int64_t j1, std::int64_t d0,
                                                  bool first, float* out) const {
    const std::int64_t dim = value_dim;
    V a0[N], a1[N];
    for (int i = 0; i < N; ++i) {
      float* o = out + (I0 + i) * dim + d0;
      a0[i] = first ? V{} : load_lanes<V>(o);
      a1[i] = first ? V{} : load_lanes<V>(o + kLanes);
    }
    for (std::int64_t j = j0; j < j1; ++j) {
      const std::uint16_t* row = values + j * 2 * value_row;
      if constexpr (Fetch && I0 == 0)
        fetch_row_share(row + kBf16PairChunk * 2 * value_row, 4 * dim, d0 / kSlice, dim / kSlice);
      V e0, o0, e1, o1;
      split_pairs(row + 2 * d0, e0, o0);
      split_pairs(row + 2 * d0 + 2 * kLanes, e1, o1);
      for (int i = 0; i < N; ++i) {
        const float we = w[I0 + i][2 * (j - j0)], wo = w[I0 + i][2 * (j - j0) + 1];
        a0[i] += wo * o0;
        a0[i] += we * e0;
        a1[i] += wo * o1;
        a1[i] += we * e1;
      }
    }
    for (int i = 0; i < N; ++i) {
      float* o = out + (I0 + i) * dim + d0;
      store_lanes(o, a0[i]);
      store_lanes(o + kLanes, a1[i]);
    }
  }
};

}  // namespace tandem::kernels::attention_loop
