// Attention of query heads over the cached positions, in fp32. Keys are stored in tiles of
// kKeyTile positions, each tile one row of kKeyTile floats per dimension ([dim][16]), so that
// scoring a tile is one fused multiply-add per dimension with no horizontal sums, and its
// keys are dim * 64 contiguous bytes (long contexts stream them, where a whole-cache
// transposition made every dimension a stream of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace tandem::kernels {

inline constexpr std::int64_t kKeyTile = 16;

// Where key element (pos, d) of a head with `dim` dimensions lies in its tiled keys.
inline std::size_t tiled_key_index(std::int64_t pos, std::int64_t d, std::int64_t dim) {
  return static_cast<std::size_t>((pos / kKeyTile) * dim * kKeyTile + d * kKeyTile +
                                  pos % kKeyTile);
}
// Floats the tiled keys of one head need for `positions` positions (whole tiles).
inline std::size_t tiled_key_floats(std::int64_t positions, std::int64_t dim) {
  return static_cast<std::size_t>((positions + kKeyTile - 1) / kKeyTile * kKeyTile * dim);
}

// For `nq` query heads that share one key/value head (grouped-query attention, or every head
// of a latent attention), over positions [begin, end): out[i] = sum_s softmax(scale * q_i ·
// k_s)[s] * v_s, each key and value row read once for all of them. Keys of key_dim and
// values of value_dim (latent attention scores against the latent and the rotary key, 576
// values, and weighs the latent alone, 512). `keys` is the head's tiled keys (position 0 at
// its start); v_s = values[s * value_stride ...]. q: nq x key_dim; out: nq x value_dim;
// `scores` needs room for nq * (end - begin) floats. `sinks` (gpt-oss; null for none): one
// logit per query head that joins the softmax's denominator but weighs no value.
void attend_heads_split(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                        const float* values, std::int64_t value_stride, std::int64_t value_dim,
                        std::int64_t begin, std::int64_t end, float scale, float* scores,
                        float* out, const float* sinks = nullptr);

// The same with keys and values of one width.
void attend_heads(const float* q, std::int64_t nq, const float* keys, const float* values,
                  std::int64_t value_stride, std::int64_t begin, std::int64_t end, std::int64_t dim,
                  float scale, float* scores, float* out, const float* sinks = nullptr);

// One part of a split attention (positions [begin, end) of a longer range, so that threads
// can share one head's long context): out[i] is the weighted sum with weights
// exp(score - max[i]), unnormalised, and sum[i] the sum of those weights.
// combine_attention_parts() turns the parts into the attention over their union.
void attend_heads_part(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                       const float* values, std::int64_t value_stride, std::int64_t value_dim,
                       std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                       float* max, float* sum);
// `parts` results of attend_heads_part for the same queries (outs: parts x nq x value_dim,
// maxes and sums: parts x nq) into out (nq x value_dim), with the sinks as above.
void combine_attention_parts(std::int64_t parts, std::int64_t nq, std::int64_t value_dim,
                             const float* outs, const float* maxes, const float* sums,
                             const float* sinks, float* out);

// x = softmax(x) over n values, in place (the sum in double, so long rows stay exact). With
// a `sink`, the softmax is over the n values and the sink, and the sink's share is dropped.
void softmax_inplace(float* x, std::int64_t n,
                     float sink = -std::numeric_limits<float>::infinity());

// The straightforward version for one query, in double precision, for tests: positions
// [0, len) of tiled keys.
void attend_head_reference(const float* q, const float* keys, const float* values,
                           std::int64_t value_stride, std::int64_t len, std::int64_t dim,
                           float scale, float* scores, float* out,
                           float sink = -std::numeric_limits<float>::infinity());

}  // namespace tandem::kernels
