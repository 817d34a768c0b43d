// Attention of one query head over the cached positions, in fp32. Keys are stored
// transposed (one row per dimension, positions contiguous), so scoring 16 positions at once
// is one fused multiply-add per dimension with no horizontal sums.
#pragma once

#include <cstdint>
#include <limits>

namespace tandem::kernels {

// out[0..dim) = sum_s softmax(scale * q · k_s)[s] * v_s over s < len, where
// k_s[d] = keys_t[d * key_stride + s] and v_s[d] = values[s * value_stride + d].
// `scores` needs room for `len` floats.
void attend_head(const float* q, const float* keys_t, std::int64_t key_stride, const float* values,
                 std::int64_t value_stride, std::int64_t len, std::int64_t dim, float scale,
                 float* scores, float* out);

// The same for `nq` query heads that share one key/value head (grouped-query attention, or
// every head of a latent attention): each key and value row is read once for all of them.
// q: nq x dim (row stride dim); out: nq x dim; `scores` needs room for nq * len floats.
// `sinks` (gpt-oss; null for none): one logit per query head that joins the softmax's
// denominator but weighs no value, so a head may attend to little.
void attend_heads(const float* q, std::int64_t nq, const float* keys_t, std::int64_t key_stride,
                  const float* values, std::int64_t value_stride, std::int64_t len,
                  std::int64_t dim, float scale, float* scores, float* out,
                  const float* sinks = nullptr);

// The same with keys of key_dim and values of value_dim (multi-head latent attention scores
// against the latent and the rotary key, 576 values, and weighs the latent alone, 512).
// q: nq x key_dim; out: nq x value_dim.
void attend_heads_split(const float* q, std::int64_t nq, const float* keys_t,
                        std::int64_t key_stride, std::int64_t key_dim, const float* values,
                        std::int64_t value_stride, std::int64_t value_dim, std::int64_t len,
                        float scale, float* scores, float* out, const float* sinks = nullptr);

// x = softmax(x) over n values, in place (the sum in double, so long rows stay exact). With
// a `sink`, the softmax is over the n values and the sink, and the sink's share is dropped.
void softmax_inplace(float* x, std::int64_t n,
                     float sink = -std::numeric_limits<float>::infinity());

// The straightforward version, for tests.
void attend_head_reference(const float* q, const float* keys_t, std::int64_t key_stride,
                           const float* values, std::int64_t value_stride, std::int64_t len,
                           std::int64_t dim, float scale, float* scores, float* out,
                           float sink = -std::numeric_limits<float>::infinity());

}  // namespace tandem::kernels
