#include "kernels/cpu/attention.h"

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tandem::kernels {
namespace {

constexpr std::int64_t kMaxQueries = 8;  // query heads per pass: accumulators in registers
// Positions weighed per pass over a value row's slices: 64 rows of up to 576 floats stay in
// the first-level cache while every slice of them is taken.
constexpr std::int64_t kValueChunk = 64;
// How far ahead value rows are fetched (about a memory latency of weighing at one row per
// few nanoseconds).
constexpr std::int64_t kValueAhead = 32;

// Scores of NQ queries against positions [begin, end), scores[i * stride + s - begin]: each
// tile's 16 keys of one dimension are loaded once and multiplied by every query's value for
// that dimension. Whole tiles are read (the cache holds whole tiles); only [begin, end) kept.
template <int NQ>
inline __attribute__((always_inline)) void score_queries(const float* q, std::int64_t dim,
                                                         const float* keys, std::int64_t begin,
                                                         std::int64_t end, float scale,
                                                         float* scores, std::int64_t stride) {
  // One tile, of which [begin, end) is kept.
  const auto one_tile = [&](std::int64_t t0) {
    const float* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
    Vec16 acc[NQ];
    for (int i = 0; i < NQ; ++i) acc[i] = Vec16{};
    // The tile after next on its way from memory while this one is scored: a long
    // context's keys come from memory, and one stream per thread does not keep it busy.
    const float* ahead = tile + 2 * dim * kKeyTile;
    for (std::int64_t d = 0; d < dim; ++d) {
      __builtin_prefetch(ahead + d * kKeyTile);
      const Vec16 k = load16(tile + d * kKeyTile);
      for (int i = 0; i < NQ; ++i) acc[i] += q[i * dim + d] * k;
    }
    const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
    if (lo == t0 && hi == t0 + kKeyTile) {
      for (int i = 0; i < NQ; ++i) store16(scores + i * stride + (t0 - begin), acc[i] * scale);
    } else {
      for (int i = 0; i < NQ; ++i) {
        float part[kKeyTile];
        store16(part, acc[i] * scale);
        for (std::int64_t s = lo; s < hi; ++s) scores[i * stride + (s - begin)] = part[s - t0];
      }
    }
  };
  std::int64_t t0 = begin - begin % kKeyTile;
  if (t0 != begin) {  // a range that starts inside a tile (a window, a part of a split)
    one_tile(t0);
    t0 += kKeyTile;
  }
  // Then two whole tiles at a time where they fit: each query's value for a dimension,
  // loaded once, serves 32 positions (two loads of keys and NQ of queries for 2 NQ
  // multiply-adds).
  for (; t0 + 2 * kKeyTile <= end; t0 += 2 * kKeyTile) {
    const float* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
    const float* next = tile + dim * kKeyTile;
    Vec16 a0[NQ], a1[NQ];
    for (int i = 0; i < NQ; ++i) a0[i] = a1[i] = Vec16{};
    const float* ahead = tile + 2 * dim * kKeyTile;
    for (std::int64_t d = 0; d < dim; ++d) {
      __builtin_prefetch(ahead + d * kKeyTile);
      __builtin_prefetch(ahead + (dim + d) * kKeyTile);
      const Vec16 k0 = load16(tile + d * kKeyTile);
      const Vec16 k1 = load16(next + d * kKeyTile);
      for (int i = 0; i < NQ; ++i) {
        const float qd = q[i * dim + d];
        a0[i] += qd * k0;
        a1[i] += qd * k1;
      }
    }
    for (int i = 0; i < NQ; ++i) {
      store16(scores + i * stride + (t0 - begin), a0[i] * scale);
      store16(scores + i * stride + (t0 - begin) + kKeyTile, a1[i] * scale);
    }
  }
  for (; t0 < end; t0 += kKeyTile) one_tile(t0);
}

// out[i] = sum_s p[i][s] * v_s over s < len for NQ queries, in chunks of kValueChunk
// positions: each 32-dimension slice of a value row is loaded once for every query.
template <int NQ>
inline __attribute__((always_inline)) void weigh_values(const float* p, std::int64_t p_stride,
                                                        const float* values,
                                                        std::int64_t value_stride, std::int64_t len,
                                                        std::int64_t dim, float* out) {
  for (std::int64_t s0 = 0; s0 < len; s0 += kValueChunk) {
    const std::int64_t s1 = std::min(len, s0 + kValueChunk);
    const bool first = s0 == 0;
    std::int64_t d0 = 0;
    for (; d0 + 32 <= dim; d0 += 32) {
      Vec16 a0[NQ], a1[NQ];
      for (int i = 0; i < NQ; ++i) {
        a0[i] = first ? Vec16{} : load16(out + i * dim + d0);
        a1[i] = first ? Vec16{} : load16(out + i * dim + d0 + 16);
      }
      for (std::int64_t s = s0; s < s1; ++s) {
        if (d0 == 0) {
          // The whole row kValueAhead positions on, on its way from memory while the slices
          // of this chunk are weighed: each slice reads one cache line of a row, so without it
          // every slice after the first would wait for its lines.
          const float* ahead = values + (s + kValueAhead) * value_stride;
          for (std::int64_t b = 0; b < dim; b += 16) __builtin_prefetch(ahead + b);
        }
        const Vec16 v0 = load16(values + s * value_stride + d0);
        const Vec16 v1 = load16(values + s * value_stride + d0 + 16);
        for (int i = 0; i < NQ; ++i) {
          const float w = p[i * p_stride + s];
          a0[i] += w * v0;
          a1[i] += w * v1;
        }
      }
      for (int i = 0; i < NQ; ++i) {
        store16(out + i * dim + d0, a0[i]);
        store16(out + i * dim + d0 + 16, a1[i]);
      }
    }
    for (std::int64_t d = d0; d < dim; ++d) {
      float acc[NQ];
      for (int i = 0; i < NQ; ++i) acc[i] = first ? 0.0f : out[i * dim + d];
      for (std::int64_t s = s0; s < s1; ++s) {
        const float v = values[s * value_stride + d];
        for (int i = 0; i < NQ; ++i) acc[i] += p[i * p_stride + s] * v;
      }
      for (int i = 0; i < NQ; ++i) out[i * dim + d] = acc[i];
    }
  }
}

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

// NQ queries over [begin, end). With `max` null: the normalised attention (with the sinks);
// otherwise a part, unnormalised, with each query's max and weight sum (see attention.h).
template <int NQ>
inline __attribute__((always_inline)) void attend_queries(
    const float* q, const float* keys, std::int64_t key_dim, const float* values,
    std::int64_t value_stride, std::int64_t value_dim, std::int64_t begin, std::int64_t end,
    float scale, float* scores, float* out, const float* sinks, float* max, float* sum) {
  const std::int64_t len = end - begin;
  score_queries<NQ>(q, key_dim, keys, begin, end, scale, scores, len);
  for (int i = 0; i < NQ; ++i) {
    float* row = scores + i * len;
    if (max == nullptr) {
      softmax_inplace(row, len,
                      sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity());
    } else {
      const float mx = max_of(row, len, -std::numeric_limits<float>::infinity());
      max[i] = mx;
      sum[i] = static_cast<float>(exp_shifted(row, len, mx));
    }
  }
  if (len == 0) {
    std::fill_n(out, NQ * value_dim, 0.0f);
    return;
  }
  weigh_values<NQ>(scores, len, values + begin * value_stride, value_stride, len, value_dim, out);
}

// Dispatches groups of up to kMaxQueries queries to attend_queries<N>.
inline __attribute__((always_inline)) void attend_all(
    const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim, const float* values,
    std::int64_t value_stride, std::int64_t value_dim, std::int64_t begin, std::int64_t end,
    float scale, float* scores, float* out, const float* sinks, float* max, float* sum) {
  const std::int64_t len = end - begin;
  for (std::int64_t i0 = 0; i0 < nq; i0 += kMaxQueries) {
    const std::int64_t n = std::min(kMaxQueries, nq - i0);
    const float* qi = q + i0 * key_dim;
    float* si = scores + i0 * len;
    float* oi = out + i0 * value_dim;
    const float* sk = sinks != nullptr ? sinks + i0 : nullptr;
    float* mi = max != nullptr ? max + i0 : nullptr;
    float* ui = sum != nullptr ? sum + i0 : nullptr;
    switch (n) {
#define TANDEM_QUERIES(N)                                                                        \
  case N:                                                                                        \
    attend_queries<N>(qi, keys, key_dim, values, value_stride, value_dim, begin, end, scale, si, \
                      oi, sk, mi, ui);                                                           \
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

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_heads_split(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                   const float* values, std::int64_t value_stride, std::int64_t value_dim,
                   std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                   const float* sinks) {
  attend_all(q, nq, keys, key_dim, values, value_stride, value_dim, begin, end, scale, scores, out,
             sinks, nullptr, nullptr);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_heads_part(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                  const float* values, std::int64_t value_stride, std::int64_t value_dim,
                  std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                  float* max, float* sum) {
  attend_all(q, nq, keys, key_dim, values, value_stride, value_dim, begin, end, scale, scores, out,
             nullptr, max, sum);
}

void attend_heads(const float* q, std::int64_t nq, const float* keys, const float* values,
                  std::int64_t value_stride, std::int64_t begin, std::int64_t end, std::int64_t dim,
                  float scale, float* scores, float* out, const float* sinks) {
  attend_heads_split(q, nq, keys, dim, values, value_stride, dim, begin, end, scale, scores, out,
                     sinks);
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
  const float mx = max_of(x, n, sink);
  // exp(-inf - mx) is 0: no sink adds nothing.
  const double sum = std::exp(static_cast<double>(sink) - mx) + exp_shifted(x, n, mx);
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t k = 0; k < n; ++k) x[k] *= inv;
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
