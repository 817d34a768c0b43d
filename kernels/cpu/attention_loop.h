// What every attention kernel shares (internal to kernels/cpu): the softmax of a row of
// scores, or a part's maximum and weight sum, between a kernel's scoring and its weighing;
// and the passes over query heads in groups of up to kMaxQueries, each group's count a
// template argument so that its accumulators stay in registers. Included by each file that
// compiles kernels for its own instruction sets.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {

inline constexpr std::int64_t kMaxQueries = 8;  // query heads per pass

// The BF16 cache's weighing: pairs of positions per pass over a value row's slices (64 rows
// of up to 576 values stay in the first-level cache while every slice of them is taken), and
// how many pairs ahead rows are fetched from memory.
inline constexpr std::int64_t kBf16PairChunk = 32;
inline constexpr std::int64_t kBf16PairsAhead = 16;

// The VDPBF16PS kernels (attention_avx512bf16.cpp) over a BF16 cache; `q` already rounded to
// BF16. Arguments as attend_all's.
void attend_bf16_avx512(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                        std::int64_t end, float scale, float* scores, float* out,
                        const float* sinks, float* max, float* sum);

// The largest of x[0..n) and `start`, sixteen lanes at a time (std::max one by one is not
// vectorised: it orders NaNs, which scores never are).
inline __attribute__((always_inline)) float max_of(const float* x, std::int64_t n, float start) {
  std::int64_t i = 0;
  float mx = start;
  if (n >= 16) {
    Vec16 lanes = load16(x);
    for (i = 16; i + 16 <= n; i += 16) {
      const Vec16 v = load16(x + i);
      lanes = v > lanes ? v : lanes;
    }
    for (int j = 0; j < 16; ++j) mx = std::max(mx, lanes[j]);
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  return mx;
}

// x[i] = e^(x[i] - mx) for i < n; returns their sum (in double).
inline __attribute__((always_inline)) double exp_shifted(float* x, std::int64_t n, float mx) {
  // Summed in 16 float lanes over stretches of 256 values (16 terms of at most 1 in each
  // lane: exact enough), each stretch's total added in double, so long rows stay exact.
  constexpr std::int64_t kStretch = 256;
  double sum = 0.0;
  std::int64_t i = 0;
  while (i + 16 <= n) {
    Vec16 lanes = Vec16{};
    const std::int64_t stop = std::min(n - n % 16, i + kStretch);
    for (; i < stop; i += 16) {
      const Vec16 e = exp16(load16(x + i) - mx);
      store16(x + i, e);
      lanes += e;
    }
    float part = 0.0f;
    for (int j = 0; j < 16; ++j) part += lanes[j];
    sum += part;
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  return sum;
}

// x = softmax(x) over n values and the sink (whose share is dropped).
inline __attribute__((always_inline)) void softmax_row(float* x, std::int64_t n, float sink) {
  const float mx = max_of(x, n, sink);
  // exp(-inf - mx) is 0: no sink adds nothing.
  const double sum = std::exp(static_cast<double>(sink) - mx) + exp_shifted(x, n, mx);
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t k = 0; k < n; ++k) x[k] *= inv;
}

// NQ queries over [begin, end) through `kv`, a kernel with
//   template <int NQ> void score(const float* q, begin, end, scale, float* scores, stride)
//     scores[i * stride + s - begin] = scale * q_i . k_s
//   template <int NQ> void weigh(const float* p, p_stride, begin, end, float* out)
//     out[i] = sum over s in [begin, end) of p[i * p_stride + s - begin] * v_s
// and its key_dim and value_dim. With `max` null: the normalised attention (with the
// sinks); otherwise a part, unnormalised, with each query's max and weight sum.
template <int NQ, class Kv>
inline __attribute__((always_inline)) void attend_queries(const Kv& kv, const float* q,
                                                          std::int64_t begin, std::int64_t end,
                                                          float scale, float* scores, float* out,
                                                          const float* sinks, float* max,
                                                          float* sum) {
  const std::int64_t len = end - begin;
  kv.template score<NQ>(q, begin, end, scale, scores, len);
  for (int i = 0; i < NQ; ++i) {
    float* row = scores + i * len;
    if (max == nullptr) {
      softmax_row(row, len, sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity());
    } else {
      const float mx = max_of(row, len, -std::numeric_limits<float>::infinity());
      max[i] = mx;
      sum[i] = static_cast<float>(exp_shifted(row, len, mx));
    }
  }
  if (len == 0) {
    std::fill_n(out, NQ * kv.value_dim, 0.0f);
    return;
  }
  kv.template weigh<NQ>(scores, len, begin, end, out);
}

// `nq` queries (q: nq x key_dim) in groups of up to kMaxQueries through attend_queries.
template <class Kv>
inline __attribute__((always_inline)) void attend_all(const Kv& kv, const float* q, std::int64_t nq,
                                                      std::int64_t begin, std::int64_t end,
                                                      float scale, float* scores, float* out,
                                                      const float* sinks, float* max, float* sum) {
  const std::int64_t len = end - begin;
  for (std::int64_t i0 = 0; i0 < nq; i0 += kMaxQueries) {
    const std::int64_t n = std::min(kMaxQueries, nq - i0);
    const float* qi = q + i0 * kv.key_dim;
    float* si = scores + i0 * len;
    float* oi = out + i0 * kv.value_dim;
    const float* sk = sinks != nullptr ? sinks + i0 : nullptr;
    float* mi = max != nullptr ? max + i0 : nullptr;
    float* ui = sum != nullptr ? sum + i0 : nullptr;
    switch (n) {
#define TANDEM_QUERIES(N)                                             \
  case N:                                                             \
    attend_queries<N>(kv, qi, begin, end, scale, si, oi, sk, mi, ui); \
    break;
      TANDEM_QUERIES(1)
      TANDEM_QUERIES(2)
      TANDEM_QUERIES(3)
      TANDEM_QUERIES(4)
      TANDEM_QUERIES(5)
      TANDEM_QUERIES(6)
      TANDEM_QUERIES(7)
      TANDEM_QUERIES(8)
#undef TANDEM_QUERIES
      default:
        break;
    }
  }
}

}  // namespace tandem::kernels::attention_loop
