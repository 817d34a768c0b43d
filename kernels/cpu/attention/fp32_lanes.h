// The fp32 cache's kernel (keys tiled, values in rows), in vectors of 16 floats (the Portable
// variant, attention.cpp, whose target clones lower them for each instruction set) or of 8
// (the Avx2 variant, attention/avx2.cpp, where 16-float vectors would live in memory), as
// attention_loop's passes read it. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {

// Positions weighed per pass over a value row's slices: 64 rows of up to 576 floats stay in
// the first-level cache while every slice of them is taken.
inline constexpr std::int64_t kFp32ValueChunk = 64;
// Key tiles fetched ahead into the second-level cache: 16 KiB, as the BF16 cache's
// kBf16KeyTilesAhead. With each weighing pass fetching its share of the next chunk's value
// rows (fetch_row_share), a decoded token over eight layers' fp32 caches of 8192 positions
// went from 48-50 to 85-89 GFLOP/s on two Zen 5 threads.
inline constexpr std::int64_t kFp32KeyTilesAhead = 2;

template <class V, bool Fetch = true>
struct Fp32KvLanes {
  const float* keys;
  std::int64_t key_dim;
  const float* values;
  std::int64_t value_stride;
  std::int64_t value_dim;

  static constexpr int kLanes = LaneShape<V>::kLanes, kPerTile = LaneShape<V>::kPerTile,
                       kGroup = LaneShape<V>::kGroup;
  static constexpr std::int64_t kSlice = LaneShape<V>::kSlice;
  // Whole tiles a scoring pass takes: with 16 lanes two (each query's value for a dimension,
  // loaded once, serves 32 positions), with 8 one.
  static constexpr int kTiles = kLanes == 16 ? 2 : 1;

  // scores[i * stride + s - begin] = scale * q_i . k_s for s in [begin, end): each tile's
  // keys of one dimension are loaded once and multiplied by every query's value for it.
  // Whole tiles are read (the cache holds whole tiles); only [begin, end) is kept.
  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
      score_group<n, Fetch && i0 == 0>(q + i0 * key_dim, begin, end, scale, scores + i0 * stride,
                                       stride);
    });
  }

  // out[i] = sum over [begin, end) of p[i][s - begin] * v_s, in chunks of kFp32ValueChunk
  // positions: each slice of a value row is loaded once for the queries of a pass.
  template <int NQ>
  __attribute__((always_inline)) void weigh(const float* p, std::int64_t p_stride,
                                            std::int64_t begin, std::int64_t end,
                                            float* out) const {
    const float* v = values + begin * value_stride;
    const std::int64_t len = end - begin, dim = value_dim;
    for (std::int64_t s0 = 0; s0 < len; s0 += kFp32ValueChunk) {
      const std::int64_t s1 = std::min(len, s0 + kFp32ValueChunk);
      const bool first = s0 == 0;
      std::int64_t d0 = 0;
      for (; d0 + kSlice <= dim; d0 += kSlice) {
        in_passes<NQ, kGroup>([&](auto i0, auto n) __attribute__((always_inline)) {
          weigh_slice<i0, n>(p, p_stride, v, s0, s1, d0, first, out);
        });
      }
      for (std::int64_t d = d0; d < dim; ++d) {
        float acc[NQ];
        for (int i = 0; i < NQ; ++i) acc[i] = first ? 0.0f : out[i * dim + d];
        for (std::int64_t s = s0; s < s1; ++s) {
          const float x = v[s * value_stride + d];
          for (int i = 0; i < NQ; ++i) acc[i] += p[i * p_stride + s] * x;
        }
        for (int i = 0; i < NQ; ++i) out[i * dim + d] = acc[i];
      }
    }
  }

 private:
  // N queries over [begin, end): a first tile the range starts inside, then kTiles whole
  // tiles at a time where they fit, then one at a time. The first pass over the keys
  // (`fetch`) fetches the tiles ahead: a long context's keys come from memory, and one
  // stream per thread does not keep it busy.
  template <int N, bool fetch>
  __attribute__((always_inline)) void score_group(const float* q, std::int64_t begin,
                                                  std::int64_t end, float scale, float* scores,
                                                  std::int64_t stride) const {
    std::int64_t t0 = begin - begin % kKeyTile;
    if (t0 != begin) {  // a range that starts inside a tile (a window, a part of a split)
      score_tiles<N, 1, fetch>(q, t0, begin, end, scale, scores, stride);
      t0 += kKeyTile;
    }
    if constexpr (kTiles > 1)
      for (; t0 + kTiles * kKeyTile <= end; t0 += kTiles * kKeyTile)
        score_tiles<N, kTiles, fetch>(q, t0, begin, end, scale, scores, stride);
    for (; t0 < end; t0 += kKeyTile)
      score_tiles<N, 1, fetch>(q, t0, begin, end, scale, scores, stride);
  }

  // T tiles from t0, of whose positions [begin, end) are kept.
  template <int N, int T, bool fetch>
  __attribute__((always_inline)) void score_tiles(const float* q, std::int64_t t0,
                                                  std::int64_t begin, std::int64_t end, float scale,
                                                  float* scores, std::int64_t stride) const {
    constexpr int kVecs = T * kPerTile;
    const std::int64_t dim = key_dim;
    const float* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
    const float* ahead = tile + kFp32KeyTilesAhead * dim * kKeyTile;
    V acc[N][kVecs];
    for (int i = 0; i < N; ++i)
      for (int h = 0; h < kVecs; ++h) acc[i][h] = V{};
    for (std::int64_t d = 0; d < dim; ++d) {
      if constexpr (fetch)
        for (int t = 0; t < T; ++t) __builtin_prefetch(ahead + (t * dim + d) * kKeyTile, 0, 2);
      V k[kVecs];
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < kPerTile; ++h)
          k[t * kPerTile + h] = load_lanes<V>(tile + (t * dim + d) * kKeyTile + h * kLanes);
      for (int i = 0; i < N; ++i) {
        const float qd = q[i * dim + d];
        for (int h = 0; h < kVecs; ++h) acc[i][h] += qd * k[h];
      }
    }
    const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + T * kKeyTile);
    for (int i = 0; i < N; ++i) {
      if (lo == t0 && hi == t0 + T * kKeyTile) {
        for (int h = 0; h < kVecs; ++h)
          store_lanes(scores + i * stride + (t0 - begin) + h * kLanes, acc[i][h] * scale);
        continue;
      }
      float part[T * kKeyTile];
      for (int h = 0; h < kVecs; ++h) store_lanes(part + h * kLanes, acc[i][h] * scale);
      for (std::int64_t s = lo; s < hi; ++s) scores[i * stride + (s - begin)] = part[s - t0];
    }
  }

  // Queries [I0, I0 + N)'s columns [d0, d0 + kSlice) over positions [s0, s1) of `v`; the first
  // pass over the rows fetches its share of the same rows of the next chunk.
  template <int I0, int N>
  __attribute__((always_inline)) void weigh_slice(const float* p, std::int64_t p_stride,
                                                  const float* v, std::int64_t s0, std::int64_t s1,
                                                  std::int64_t d0, bool first, float* out) const {
    const std::int64_t dim = value_dim;
    V a0[N], a1[N];
    for (int i = 0; i < N; ++i) {
      const float* o = out + (I0 + i) * dim + d0;
      a0[i] = first ? V{} : load_lanes<V>(o);
      a1[i] = first ? V{} : load_lanes<V>(o + kLanes);
    }
    for (std::int64_t s = s0; s < s1; ++s) {
      if constexpr (Fetch && I0 == 0)
        fetch_row_share(v + (s + kFp32ValueChunk) * value_stride, 4 * dim, d0 / kSlice,
                        dim / kSlice);
      const V v0 = load_lanes<V>(v + s * value_stride + d0);
      const V v1 = load_lanes<V>(v + s * value_stride + d0 + kLanes);
      for (int i = 0; i < N; ++i) {
        const float w = p[(I0 + i) * p_stride + s];
        a0[i] += w * v0;
        a1[i] += w * v1;
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
