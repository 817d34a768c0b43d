#include "kernels/cpu/attention.h"

#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tandem::kernels {
namespace {

constexpr std::int64_t kPositions = 64;  // scored per pass: four AVX-512 registers
constexpr std::int64_t kDims = 64;       // output dimensions kept in registers per pass

constexpr std::int64_t kMaxQueries = 8;  // query heads per pass: accumulators in registers

// Scores of NQ queries against positions [0, len): each 16-position slice of a key row is
// loaded once and multiplied by every query's value for that dimension.
template <int NQ>
inline __attribute__((always_inline)) void score_queries(const float* q, std::int64_t dim,
                                                         const float* keys_t,
                                                         std::int64_t key_stride, std::int64_t len,
                                                         float scale, float* scores,
                                                         std::int64_t scores_stride) {
  std::int64_t s0 = 0;
  for (; s0 + 16 <= len; s0 += 16) {
    Vec16 acc[NQ];
    for (int i = 0; i < NQ; ++i) acc[i] = Vec16{};
    for (std::int64_t d = 0; d < dim; ++d) {
      const Vec16 k = load16(keys_t + d * key_stride + s0);
      for (int i = 0; i < NQ; ++i) acc[i] += q[i * dim + d] * k;
    }
    for (int i = 0; i < NQ; ++i) store16(scores + i * scores_stride + s0, acc[i] * scale);
  }
  for (std::int64_t s = s0; s < len; ++s) {
    float acc[NQ] = {};
    for (std::int64_t d = 0; d < dim; ++d) {
      const float k = keys_t[d * key_stride + s];
      for (int i = 0; i < NQ; ++i) acc[i] += q[i * dim + d] * k;
    }
    for (int i = 0; i < NQ; ++i) scores[i * scores_stride + s] = acc[i] * scale;
  }
}

// out[i] = sum_s p[i][s] * v_s for NQ queries: each 32-dimension slice of a value row is
// loaded once for every query.
template <int NQ>
inline __attribute__((always_inline)) void weigh_values(const float* p, std::int64_t p_stride,
                                                        const float* values,
                                                        std::int64_t value_stride, std::int64_t len,
                                                        std::int64_t dim, float* out) {
  std::int64_t d0 = 0;
  for (; d0 + 32 <= dim; d0 += 32) {
    Vec16 a0[NQ], a1[NQ];
    for (int i = 0; i < NQ; ++i) a0[i] = a1[i] = Vec16{};
    for (std::int64_t s = 0; s < len; ++s) {
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
    float acc[NQ] = {};
    for (std::int64_t s = 0; s < len; ++s) {
      const float v = values[s * value_stride + d];
      for (int i = 0; i < NQ; ++i) acc[i] += p[i * p_stride + s] * v;
    }
    for (int i = 0; i < NQ; ++i) out[i * dim + d] = acc[i];
  }
}

template <int NQ>
inline __attribute__((always_inline)) void attend_queries(
    const float* q, const float* keys_t, std::int64_t key_stride, std::int64_t key_dim,
    const float* values, std::int64_t value_stride, std::int64_t value_dim, std::int64_t len,
    float scale, float* scores, float* out, const float* sinks) {
  score_queries<NQ>(q, key_dim, keys_t, key_stride, len, scale, scores, len);
  for (int i = 0; i < NQ; ++i) {
    softmax_inplace(scores + i * len, len,
                    sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity());
  }
  weigh_values<NQ>(scores, len, values, value_stride, len, value_dim, out);
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
attend_heads_split(const float* q, std::int64_t nq, const float* keys_t, std::int64_t key_stride,
                   std::int64_t key_dim, const float* values, std::int64_t value_stride,
                   std::int64_t value_dim, std::int64_t len, float scale, float* scores, float* out,
                   const float* sinks) {
  for (std::int64_t i0 = 0; i0 < nq; i0 += kMaxQueries) {
    const std::int64_t n = std::min(kMaxQueries, nq - i0);
    const float* qi = q + i0 * key_dim;
    float* si = scores + i0 * len;
    float* oi = out + i0 * value_dim;
    const float* sk = sinks != nullptr ? sinks + i0 : nullptr;
    switch (n) {
#define TANDEM_QUERIES(N)                                                                    \
  case N:                                                                                    \
    attend_queries<N>(qi, keys_t, key_stride, key_dim, values, value_stride, value_dim, len, \
                      scale, si, oi, sk);                                                    \
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

void attend_heads(const float* q, std::int64_t nq, const float* keys_t, std::int64_t key_stride,
                  const float* values, std::int64_t value_stride, std::int64_t len,
                  std::int64_t dim, float scale, float* scores, float* out, const float* sinks) {
  attend_heads_split(q, nq, keys_t, key_stride, dim, values, value_stride, dim, len, scale, scores,
                     out, sinks);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void softmax_inplace(
    float* x, std::int64_t n, float sink) {
  float mx = sink;
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  // exp(-inf - mx) is 0: no sink adds nothing.
  double sum = std::exp(static_cast<double>(sink) - mx);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Vec16 e = exp16(load16(x + i) - mx);
    store16(x + i, e);
    float part = 0.0f;  // 16 terms of at most 1 each: exact enough before the double sum
    for (int j = 0; j < 16; ++j) part += e[j];
    sum += part;
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t k = 0; k < n; ++k) x[k] *= inv;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void attend_head(
    const float* q, const float* keys_t, std::int64_t key_stride, const float* values,
    std::int64_t value_stride, std::int64_t len, std::int64_t dim, float scale, float* scores,
    float* out) {
  for (std::int64_t s0 = 0; s0 < len; s0 += kPositions) {
    const std::int64_t n = std::min(kPositions, len - s0);
    float acc[kPositions] = {};
    if (n == kPositions) {
      for (std::int64_t d = 0; d < dim; ++d) {
        const float qd = q[d];
        const float* row = keys_t + d * key_stride + s0;
        for (std::int64_t i = 0; i < kPositions; ++i) acc[i] += qd * row[i];
      }
    } else {
      for (std::int64_t d = 0; d < dim; ++d) {
        const float qd = q[d];
        const float* row = keys_t + d * key_stride + s0;
        for (std::int64_t i = 0; i < n; ++i) acc[i] += qd * row[i];
      }
    }
    for (std::int64_t i = 0; i < n; ++i) scores[s0 + i] = acc[i] * scale;
  }
  softmax_inplace(scores, len);
  for (std::int64_t d0 = 0; d0 < dim; d0 += kDims) {
    const std::int64_t n = std::min(kDims, dim - d0);
    float acc[kDims] = {};
    if (n == kDims) {
      for (std::int64_t s = 0; s < len; ++s) {
        const float p = scores[s];
        const float* v = values + s * value_stride + d0;
        for (std::int64_t i = 0; i < kDims; ++i) acc[i] += p * v[i];
      }
    } else {
      for (std::int64_t s = 0; s < len; ++s) {
        const float p = scores[s];
        const float* v = values + s * value_stride + d0;
        for (std::int64_t i = 0; i < n; ++i) acc[i] += p * v[i];
      }
    }
    std::copy_n(acc, n, out + d0);
  }
}

void attend_head_reference(const float* q, const float* keys_t, std::int64_t key_stride,
                           const float* values, std::int64_t value_stride, std::int64_t len,
                           std::int64_t dim, float scale, float* scores, float* out, float sink) {
  for (std::int64_t s = 0; s < len; ++s) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < dim; ++d)
      dot += static_cast<double>(q[d]) * keys_t[d * key_stride + s];
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
