// Dot products of fp32 activations with weight rows of several types read where they lie, for
// matmul_xwt (kernels/cpu/dense_matmul.cpp, compiled as target clones, and
// dense_f16_avx512.cpp). Every path sums a row as dot_lanes does, so each type and token count
// gives dot_f32's result for the same values. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::row_dots {
// Each file that includes this compiles its own copies (for its own instruction set): none
// may stand in for another's at link time.
namespace {

// A weight row's 16 values from `p` as floats: fp32 as they are, BF16 widened (exactly).
inline __attribute__((always_inline)) Vec16 load16w(const float* p) {
  return load16(p);
}
inline __attribute__((always_inline)) Vec16 load16w(const std::uint16_t* p) {
  typedef std::uint16_t Half16 __attribute__((vector_size(32)));
  Half16 h;
  std::memcpy(&h, p, sizeof(h));
  const Int16x bits = __builtin_convertvector(h, Int16x) << 16;
  Vec16 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
// And 8 of them.
inline __attribute__((always_inline)) Vec8 load8w(const float* p) {
  return load_lanes<Vec8>(p);
}
inline __attribute__((always_inline)) Vec8 load8w(const std::uint16_t* p) {
  typedef std::uint16_t Half8 __attribute__((vector_size(16)));
  Half8 h;
  std::memcpy(&h, p, sizeof(h));
  const Int8x bits = __builtin_convertvector(h, Int8x) << 16;
  Vec8 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
// A vector of V's width (Vec16 or Vec8) of them.
template <class V, typename W>
inline __attribute__((always_inline)) V load_w(const W* p) {
  if constexpr (sizeof(V) == 64)
    return load16w(p);
  else
    return load8w(p);
}
inline __attribute__((always_inline)) float weight_value(float v) {
  return v;
}
inline __attribute__((always_inline)) float weight_value(std::uint16_t v) {
  return bf16_to_f32(v);
}

// The n values (fewer than a vector's) at p as floats, zeros after them: a row's values past
// its last whole vector go through the same vector multiply-add as the rest. Summed apart in
// scalar code, the compiler fused some of their multiply-adds and not others, differently in
// each caller.
template <class V, typename W>
inline __attribute__((always_inline)) V tail_w(const W* p, std::int64_t n) {
  alignas(64) float v[kLanesOf<V>] = {};
  for (std::int64_t j = 0; j < n; ++j) v[j] = weight_value(p[j]);
  return load_lanes<V>(v);
}

// sum_i a[i] * b[i] in V's lanes (16, or 8 where the file's version is compiled for AVX2
// alone), each lane's products added in order, the values past the last whole vector as one
// more vector, then the lanes totalled in order. Every product of rows below gives each result
// as this gives it at the same width, whatever the weights' type (a BF16 row read in place
// gives what its fp32 conversion gives).
template <class V = Vec16, typename W>
inline __attribute__((always_inline)) float dot_lanes(const float* a, const W* b, std::int64_t n) {
  constexpr int kLanes = kLanesOf<V>;
  V acc{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += load_lanes<V>(a + i) * load_w<V>(b + i);
  if (i < n) acc += tail_w<V>(a + i, n - i) * tail_w<V>(b + i, n - i);
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}

// T tokens by R rows of y[i][r] = dot_lanes<V>(x_i, w_r): each weight vector loaded serves T
// tokens and each activation vector R rows, and the T x R sums are chains of their own
// (one row's dot alone waits on each fused multiply-add before the next). The sums are
// dot_lanes', so each result is the one dot_lanes gives.
template <class V, int T, int R, typename W>
inline __attribute__((always_inline)) void dots(const float* const* x, const W* const* w,
                                                std::int64_t k, float* y, std::int64_t y_stride) {
  constexpr int kLanes = kLanesOf<V>;
  V acc[T][R];
  for (auto& row : acc)
    for (V& a : row) a = V{};
  std::int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    V wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_w<V>(w[r] + i);
    for (int t = 0; t < T; ++t) {
      const V xv = load_lanes<V>(x[t] + i);
      for (int r = 0; r < R; ++r) acc[t][r] += xv * wv[r];
    }
  }
  if (i < k) {
    V wv[R];
    for (int r = 0; r < R; ++r) wv[r] = tail_w<V>(w[r] + i, k - i);
    for (int t = 0; t < T; ++t) {
      const V xv = tail_w<V>(x[t] + i, k - i);
      for (int r = 0; r < R; ++r) acc[t][r] += xv * wv[r];
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += acc[t][r][l];
      y[t * y_stride + r] = sum;
    }
  }
}

// y[i * y_stride + r] = dot_lanes<V>(x_i, w_r) for m tokens of k values and `count` rows: four
// tokens by four rows at a time, the tokens past the last four by eight rows; with 8 lanes
// (16 registers) four tokens by two rows and one by four.
template <class V = Vec16, typename W>
inline __attribute__((always_inline)) void dot_rows_of(const float* x, std::int64_t m,
                                                       std::int64_t k, const W* const* w,
                                                       std::int64_t count, float* y,
                                                       std::int64_t y_stride) {
  constexpr int kRows = sizeof(V) == 64 ? 4 : 2, kSingleRows = 2 * kRows;
  std::int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* xs[4] = {x + i * k, x + (i + 1) * k, x + (i + 2) * k, x + (i + 3) * k};
    std::int64_t r = 0;
    for (; r + kRows <= count; r += kRows)
      dots<V, 4, kRows>(xs, w + r, k, y + i * y_stride + r, y_stride);
    for (; r < count; ++r)
      for (int t = 0; t < 4; ++t) y[(i + t) * y_stride + r] = dot_lanes<V>(xs[t], w[r], k);
  }
  for (; i < m; ++i) {
    const float* xs[1] = {x + i * k};
    std::int64_t r = 0;
    for (; r + kSingleRows <= count; r += kSingleRows)
      dots<V, 1, kSingleRows>(xs, w + r, k, y + i * y_stride + r, y_stride);
    for (; r < count; ++r) y[i * y_stride + r] = dot_lanes<V>(xs[0], w[r], k);
  }
}

}  // namespace
}  // namespace tandem::kernels::row_dots
