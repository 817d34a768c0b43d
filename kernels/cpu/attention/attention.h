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

// The kernels' variants. Portable: fp32 multiply-adds in 16-float vectors (any x86-64; its
// clones run them in AVX-512 registers, or through memory elsewhere); Avx2: the same in
// 8-float vectors, for the 16 registers of AVX2 with FMA. Over a BF16 cache, Avx512Bf16:
// VDPBF16PS; AmxBf16: a prompt's attention in AMX tiles (TDPBF16PS, 16 rows of queries or
// weights at a time) where the key width is whole 32s and the value width whole 16s, the rest
// as Avx512Bf16. The fp32 cache takes every variant past Avx2 as Portable, the 8-bit cache
// every one past Avx2 as VPDPBUSD (below), and Avx2 there sums the bytes' products in 32-bit
// integers as VPDPBUSD does (VPMADDWD). All compute the same products and differ only in the
// order and fusing of fp32 sums.
enum class AttentionVariant { Portable, Avx2, Avx512Bf16, AmxBf16 };
// What a KV cache keeps its keys and values as.
enum class CacheElements { F32, Bf16, Int8 };
bool attention_variant_supported(AttentionVariant variant);
// The best the CPU has: AmxBf16 only when the kernel variant in use (--cpu-variant,
// TANDEM_CPU_VARIANT) is amx, Avx2 when it is avx2, Portable when it is scalar.
AttentionVariant active_attention_variant();
const char* attention_variant_name(AttentionVariant variant);

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
                        float* out, const float* sinks = nullptr,
                        AttentionVariant variant = active_attention_variant());

// The same with keys and values of one width.
void attend_heads(const float* q, std::int64_t nq, const float* keys, const float* values,
                  std::int64_t value_stride, std::int64_t begin, std::int64_t end, std::int64_t dim,
                  float scale, float* scores, float* out, const float* sinks = nullptr,
                  AttentionVariant variant = active_attention_variant());

// One part of a split attention (positions [begin, end) of a longer range, so that threads
// can share one head's long context): out[i] is the weighted sum with weights
// exp(score - max[i]), unnormalised, and sum[i] the sum of those weights.
// combine_attention_parts() turns the parts into the attention over their union.
void attend_heads_part(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                       const float* values, std::int64_t value_stride, std::int64_t value_dim,
                       std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                       float* max, float* sum,
                       AttentionVariant variant = active_attention_variant());
// `parts` results of attend_heads_part for the same queries (outs: parts x nq x value_dim,
// maxes and sums: parts x nq) into out (nq x value_dim), with the sinks as above.
void combine_attention_parts(std::int64_t parts, std::int64_t nq, std::int64_t value_dim,
                             const float* outs, const float* maxes, const float* sums,
                             const float* sinks, float* out);

// ---- The KV cache in BF16: half the bytes of fp32, so decoding at long contexts reads half
// as much, and prompts score and weigh with BF16 dot products (VDPBF16PS: two products a lane,
// twice fp32's rate) where the CPU has them. Keys in tiles of kKeyTile positions, each
// dimension pair one row of the tile's 16 positions x 2 ([dim / 2][16][2], 64 bytes: one
// register); values with pairs of positions interleaved ([pos / 2][row][2]). Queries and the
// softmax weights are rounded to BF16 for the products, which are exact, and summed in fp32,
// the same in every variant.

// Where key element (pos, d) of a head with `dim` (even) dimensions lies in its BF16 tiles.
inline std::size_t bf16_key_index(std::int64_t pos, std::int64_t d, std::int64_t dim) {
  return static_cast<std::size_t>((pos / kKeyTile) * dim * kKeyTile + (d / 2) * 2 * kKeyTile +
                                  (pos % kKeyTile) * 2 + d % 2);
}
// Where value element (pos, c) lies, for rows of `row` elements per position.
inline std::size_t bf16_value_index(std::int64_t pos, std::int64_t c, std::int64_t row) {
  return static_cast<std::size_t>((pos / 2) * 2 * row + c * 2 + pos % 2);
}
// Elements the values of `positions` positions need (whole pairs).
inline std::size_t bf16_value_elements(std::int64_t positions, std::int64_t row) {
  return static_cast<std::size_t>((positions + 1) / 2 * 2 * row);
}

// One key/value head's BF16 cache as the kernels read it: `keys` its tiles (position 0 at
// the start), `values` its first value element of position 0 (bf16_value_index(0, c0, row)
// for a head whose values start at column c0), `value_row` the elements of a whole position.
struct Bf16Kv {
  const std::uint16_t* keys = nullptr;
  std::int64_t key_dim = 0;  // even
  const std::uint16_t* values = nullptr;
  std::int64_t value_row = 0;
  std::int64_t value_dim = 0;
};

// As attend_heads_split over a BF16 cache (sinks may be null).
void attend_heads_bf16(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                       std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                       AttentionVariant variant);
// As attend_heads_part over a BF16 cache.
void attend_heads_part_bf16(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                            std::int64_t end, float scale, float* scores, float* out, float* max,
                            float* sum, AttentionVariant variant);

// ---- A prompt's attention, flash-style: `tokens` consecutive tokens, the first at position
// pos0, each with nq query heads that share one key/value head. Token t sees positions
// [first, pos0 + t + 1), first = max(0, pos0 + t + 1 - window) with a sliding window (window
// > 0), else 0. q: token t's queries at q + t * q_stride (nq x key_dim); out: its results at
// out + t * out_stride (nq x value_dim); sinks as above. The keys and values are taken a block
// at a time, each block once for every token that sees it (a per-token attention reads a long
// context's whole cache once per token), and the softmax is carried from block to block
// (online), so no row of scores longer than a block is kept. Blocks past a token's position
// are skipped. Tokens per job (prompt_job_tokens in the CPU backend): each job reads its
// head's keys and values once, so a longer context wants more tokens per job; with the
// next block fetched ahead, 32 ran at the speed of 64 at a depth of 8192 (16: 8% slower).
inline constexpr std::int64_t kPromptJobTokens = 32;
// Over the fp32 cache (keys and values as attend_heads_split's).
void attend_prompt(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                   const float* keys, std::int64_t key_dim, const float* values,
                   std::int64_t value_stride, std::int64_t value_dim, std::int64_t pos0,
                   std::int64_t window, float scale, const float* sinks, float* out,
                   std::int64_t out_stride, AttentionVariant variant = active_attention_variant());
// Over a BF16 cache.
void attend_prompt_bf16(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                        const Bf16Kv& kv, std::int64_t pos0, std::int64_t window, float scale,
                        const float* sinks, float* out, std::int64_t out_stride,
                        AttentionVariant variant);
// For tests on CPUs without AMX: attend_prompt_bf16's AmxBf16 variant with the tile unit
// emulated in software (the rest of it needs AVX-512 BF16).
void attend_prompt_bf16_amx_emulated(const float* q, std::int64_t q_stride, std::int64_t nq,
                                     std::int64_t tokens, const Bf16Kv& kv, std::int64_t pos0,
                                     std::int64_t window, float scale, const float* sinks,
                                     float* out, std::int64_t out_stride);

// ---- The KV cache in 8 bits: a little over half the bytes of BF16, so decoding at long
// contexts reads about half as much again, and the products are 8-bit integer dot products
// (VPDPBUSD: four products a lane, twice VDPBF16PS's rate) where the CPU has them. Every
// group of kInt8Group elements of a position's key keeps its own scale (the largest magnitude
// / 127), so a few large channels, which keys have, cost precision only in their own group;
// a value row keeps one scale per int8_value_group(dim) elements, the whole row of a head up
// to 128 wide. Keys in tiles of kKeyTile positions, each four dimensions one row of the tile's
// 16 positions x 4 bytes ([dim / 4][16][4], 64 bytes: one register), stored offset by 128
// (unsigned), with the tile's scales after it as [dim / 32][16] floats in a separate array;
// values with quads of positions interleaved ([pos / 4][dim][4], signed), their scales per
// group as [dim / int8_value_group(dim)][positions]. A query is quantised to 8 bits per head
// (one scale); the softmax weights, for each chunk of kInt8ValueChunk positions, per head and
// value group, to unsigned bytes scaled by the chunk's largest weight and value scale. Every
// variant takes the same bytes and differs from the others only in the order and rounding of
// fp32 sums.
inline constexpr std::int64_t kInt8Group = 32;
// The elements of a value row that share a scale: the widest multiple of kInt8Group, at most
// 128, that divides the row (a head of 64 or 128: the whole row; a latent of 512: 128). One
// scale a row instead of one per 32 makes the weighing's bytes once a chunk and row, not once
// per 32 values: a decoded token's 8-bit attention over 8192 positions 1.10-1.14x as fast
// (Qwen3-30B-A3B's heads, Zen 5), while SmolLM2-135M's mean KL from the fp32 cache stays
// where it was (0.002661 -> 0.002626 at 512 tokens, 0.002139 -> 0.002059 at 2048;
// docs/benchmarks.md, "One scale per value row"). Keys keep groups of 32: keys are where a
// few channels run far larger than the rest; values are not.
inline constexpr std::int64_t int8_value_group(std::int64_t dim) {
  std::int64_t g = kInt8Group;
  for (std::int64_t w = 2 * kInt8Group; w <= 128; w += kInt8Group)
    if (dim % w == 0) g = w;
  return g;
}
// Chunks of 64 positions, against 32: half the chunk ends (each row's sums converted and added
// to its output through memory, a largest weight and value scale found) for a decoded token
// 1.11-1.17x as fast at 8192 positions (`tandem bench --attention --tokens 1 -d 8192 -t 2
// --kv-cache int8`, Zen 5), and SmolLM2-135M's mean KL from the fp32 cache 0.0021 -> 0.0027 at
// 512 tokens and 0.0018 -> 0.0022 at 2048 (llama.cpp's q8_0 cache: 0.0045 at 512).
inline constexpr std::int64_t kInt8ValueChunk = 64;
// The widest key or value row an 8-bit cache takes (latent attention's 576 keys fit).
inline constexpr std::int64_t kInt8MaxDim = 1024;

// Where key byte (pos, d) of a head with `dim` (a multiple of kInt8Group) dimensions lies in
// its tiles, and where the scale of its group lies in the scales.
inline std::size_t int8_key_index(std::int64_t pos, std::int64_t d, std::int64_t dim) {
  return static_cast<std::size_t>((pos / kKeyTile) * dim * kKeyTile + (d / 4) * 4 * kKeyTile +
                                  (pos % kKeyTile) * 4 + d % 4);
}
inline std::size_t int8_key_scale_index(std::int64_t pos, std::int64_t group, std::int64_t dim) {
  return static_cast<std::size_t>((pos / kKeyTile) * (dim / kInt8Group) * kKeyTile +
                                  group * kKeyTile + pos % kKeyTile);
}
// Scales the keys of `positions` positions need (whole tiles); their bytes are
// tiled_key_floats(positions, dim).
inline std::size_t int8_key_scales(std::int64_t positions, std::int64_t dim) {
  return tiled_key_floats(positions, dim) / kInt8Group;
}
// Positions the values and the value scales of a cache of `positions` make room for: whole
// chunks, which the kernels read whole.
inline std::int64_t int8_value_scale_stride(std::int64_t positions) {
  return (positions + kInt8ValueChunk - 1) / kInt8ValueChunk * kInt8ValueChunk;
}
// Where value element (pos, c) lies, for rows of `dim` elements; and the elements the values
// of `positions` positions need.
inline std::size_t int8_value_index(std::int64_t pos, std::int64_t c, std::int64_t dim) {
  return static_cast<std::size_t>((pos / 4) * 4 * dim + c * 4 + pos % 4);
}
inline std::size_t int8_value_elements(std::int64_t positions, std::int64_t dim) {
  return static_cast<std::size_t>(int8_value_scale_stride(positions) * dim);
}

// The scales of a head's values of `dim` elements, for a cache whose scale stride
// (int8_value_scale_stride of its capacity) is `stride`; value element (pos, c)'s scale is
// at (c / int8_value_group(dim)) * stride + pos.
inline std::size_t int8_value_scales(std::int64_t stride, std::int64_t dim) {
  return static_cast<std::size_t>(dim / int8_value_group(dim) * stride);
}

// One position's key (dim floats) into a head's tiles and scales, and its value into a
// head's values and scales (scale_stride: int8_value_scale_stride of the capacity).
void int8_store_key(std::uint8_t* keys, float* scales, std::int64_t pos, std::int64_t dim,
                    const float* k);
void int8_store_value(std::int8_t* values, float* scales, std::int64_t scale_stride,
                      std::int64_t pos, std::int64_t dim, const float* v);

// One key/value head's 8-bit cache as the kernels read it (position 0 at the start of each).
struct Int8Kv {
  const std::uint8_t* keys = nullptr;
  const float* key_scales = nullptr;
  std::int64_t key_dim = 0;  // a multiple of kInt8Group, at most kInt8MaxDim
  const std::int8_t* values = nullptr;
  const float* value_scales = nullptr;
  std::int64_t value_scale_stride = 0;
  std::int64_t value_dim = 0;  // likewise
};
// Position `pos`'s key (key_dim floats) and value (value_dim) as an 8-bit cache keeps them:
// its bytes times their scales, what the kernels multiply.
void int8_load_key(const Int8Kv& kv, std::int64_t pos, float* k);
void int8_load_value(const Int8Kv& kv, std::int64_t pos, float* v);
// Whether `dim` is a row width an 8-bit cache takes.
inline bool int8_cache_takes(std::int64_t dim) {
  return dim > 0 && dim % kInt8Group == 0 && dim <= kInt8MaxDim;
}

// As attend_heads_split, attend_heads_part and attend_prompt over an 8-bit cache. Portable:
// the bytes widened to 16 fp32 lanes (any x86-64); Avx2: to 8; any other variant: VPDPBUSD
// (AVX-512 VNNI, which every CPU with AVX-512 BF16 has; throws without it).
void attend_heads_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                       std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                       AttentionVariant variant);
void attend_heads_part_int8(const float* q, std::int64_t nq, const Int8Kv& kv, std::int64_t begin,
                            std::int64_t end, float scale, float* scores, float* out, float* max,
                            float* sum, AttentionVariant variant);
void attend_prompt_int8(const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
                        const Int8Kv& kv, std::int64_t pos0, std::int64_t window, float scale,
                        const float* sinks, float* out, std::int64_t out_stride,
                        AttentionVariant variant);
// A query row quantised as the 8-bit kernels do: q8[d] = q[d] * 127 / max|q| rounded to the
// nearest (ties to even), and the scale (max|q| / 127) returned; zeros and 0 for a row of zeros.
float int8_quantize_query(const float* q, std::int64_t dim, std::int8_t* q8);

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
