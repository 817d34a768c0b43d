#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::kernels {
namespace {

constexpr std::int64_t kPositions = 64;  // scored per pass: four AVX-512 registers
constexpr std::int64_t kDims = 64;       // output dimensions kept in registers per pass

}  // namespace

void softmax_inplace(float* x, std::int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t i = 0; i < n; ++i) x[i] *= inv;
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
                           std::int64_t dim, float scale, float* scores, float* out) {
  for (std::int64_t s = 0; s < len; ++s) {
    double dot = 0.0;
    for (std::int64_t d = 0; d < dim; ++d)
      dot += static_cast<double>(q[d]) * keys_t[d * key_stride + s];
    scores[s] = static_cast<float>(dot) * scale;
  }
  softmax_inplace(scores, len);
  for (std::int64_t d = 0; d < dim; ++d) {
    double sum = 0.0;
    for (std::int64_t s = 0; s < len; ++s)
      sum += static_cast<double>(scores[s]) * values[s * value_stride + d];
    out[d] = static_cast<float>(sum);
  }
}

}  // namespace tandem::kernels
