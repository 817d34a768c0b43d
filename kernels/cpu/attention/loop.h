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
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {

inline constexpr std::int64_t kMaxQueries = 8;  // query heads per pass

// The BF16 cache's weighing: pairs of positions per pass over a value row's slices (64 rows
// of up to 576 values stay in the first-level cache while every slice of them is taken).
inline constexpr std::int64_t kBf16PairChunk = 32;
// How a long BF16 cache comes from memory while it is computed on: scoring fetches the key
// tiles this many ahead, weighing the next chunk's value rows, a share in each pass over the
// chunk's (the first pass alone would leave the memory idle for the others), both into the
// second-level cache. Measured against 2 tiles and 16 pairs ahead into the first-level cache
// (`tandem bench --attention --tokens 1 -d 8192 -t 2`, a decoded token over eight layers'
// caches from memory, Zen 5): 115-127 -> 197-216 GFLOP/s.
inline constexpr std::int64_t kBf16KeyTilesAhead = 4;
// The 8-bit cache's key tiles fetched ahead the same way: 16 KiB at 128 dimensions, as the
// BF16 kernels' four tiles of twice the bytes (4 and 16 measured within the noise of 8).
inline constexpr std::int64_t kInt8KeyTilesAhead = 8;

// The lane kernels (bf16_lanes.h, fp32_lanes.h, int8_lanes.h) take `Fetch`: whether they
// fetch ahead as above. A decoded token needs it, its long cache coming from memory (a token
// after 8192 or 32768 positions lost 10-25% without it on Zen 3); a prompt's blocks do not,
// since every token after the first that sees a block finds it in the caches, so the Avx2
// prompt kernels leave it out. Measured on Zen 3, one thread, 8 query heads over one KV head
// of 128, old and new alternated: fp32 at 2048 tokens 61-62 -> 67-69 GFLOP/s, BF16 62-63 ->
// 62-66; `tandem bench --attention -t 2 --tokens 512,2048 -d 0,8192`: BF16 91-125 -> 92-138,
// the 8-bit cache 58-84 -> 68-85.

// Pass `pass` of `passes` over a chunk's value rows fetches its share of the lines of the
// row `next` (the same row of the next chunk; `bytes` of it are read).
inline __attribute__((always_inline)) void fetch_row_share(const void* next, std::int64_t bytes,
                                                           std::int64_t pass, std::int64_t passes) {
  const std::int64_t lines = (bytes + 63) / 64, share = (lines + passes - 1) / passes;
  const char* base = static_cast<const char*>(next);
  for (std::int64_t l = pass * share; l < std::min(lines, (pass + 1) * share); ++l)
    __builtin_prefetch(base + 64 * l, 0, 2);  // to the second-level cache
}

// f(std::integral_constant<int, C>()) for C = n, or Max where n is more (nothing for n below
// 1): a count known only at run time made a template argument, so that arrays of that many
// accumulators stay in registers.
//
// No lambda here or in what calls it may be left out of line: inside a target_clones function
// (the Portable variant's, and the fp32 cache's) a lambda's own body is compiled for the
// default target, SSE2, whatever clone calls it. Every lambda of these loops is therefore
// always_inline, and with_count takes its sequence as a function's argument rather than a
// lambda's (the Portable prompt attention ran at 10 GFLOP/s on two threads of a Xeon with
// AVX-512, 285 on the Zen 5 before; tests/kernels/CMakeLists.txt checks the library for such
// lambdas).
template <int Max, class F, int... C>
inline __attribute__((always_inline)) void with_count_of(std::int64_t n, F& f,
                                                         std::integer_sequence<int, C...>) {
  (void)((n == C + 1 || (C + 1 == Max && n > Max) ? (f(std::integral_constant<int, C + 1>()), true)
                                                  : false) ||
         ...);
}
template <int Max, class F>
inline __attribute__((always_inline)) void with_count(std::int64_t n, F f) {
  with_count_of<Max>(n, f, std::make_integer_sequence<int, Max>());
}

// The first position a token at `pos` sees: pos + 1 - window with a sliding window (0 at
// least), else 0.
inline std::int64_t first_visible(std::int64_t pos, std::int64_t window) {
  return window > 0 ? std::max<std::int64_t>(0, pos + 1 - window) : 0;
}

// The shape of the lane kernels (attention/fp32_lanes.h, bf16_lanes.h, int8_lanes.h) over
// vectors V of 16 floats or 8: a key tile's row of 16 positions in kPerTile vectors; kGroup
// query rows a pass keeps accumulators for (with 16 lanes, 32 AVX-512 registers, all
// kMaxQueries; with 8, AVX2's 16 registers, 4 rows x 2 vectors of accumulators and the key or
// value vectors); two vectors of columns (kSlice) a weighing pass.
template <class V>
struct LaneShape {
  static constexpr int kLanes = kLanesOf<V>;
  static constexpr int kPerTile = static_cast<int>(kKeyTile) / kLanes;
  static constexpr int kGroup = kLanes == 16 ? static_cast<int>(kMaxQueries) : 4;
  static constexpr std::int64_t kSlice = 2 * kLanes;
};

// f(I0, N) (std::integral_constant<int, ...> both) for rows [0, NQ) in consecutive passes of
// at most G rows each: the lane kernels' register-sized groups of queries. f must be
// always_inline, as with_count's.
template <int NQ, int G, int I0 = 0, class F>
inline __attribute__((always_inline)) void in_passes(F f) {
  constexpr int N = std::min(G, NQ - I0);
  f(std::integral_constant<int, I0>(), std::integral_constant<int, N>());
  if constexpr (I0 + N < NQ) in_passes<NQ, G, I0 + N>(f);
}

// Keys per block of a prompt's attention (attend_prompt_blocks, and the VDPBF16PS kernel's):
// a block's BF16 keys and values of 128 dimensions are 32 KiB each, in the first- and
// second-level caches while every row of a job takes them; each row's softmax costs about
// as much per block whatever its length, so blocks of 64 lost a fifth of the speed.
inline constexpr std::int64_t kPromptKeyBlock = 128;
// Keys per block of the 8-bit cache's prompt attention (attend_prompt_rows). It weighs into
// the rows' outputs in memory and reloads them once a block (a job's 32 tokens' rows are
// 128 KiB at 32 heads of 128, past the first-level cache), and each row's running maximum
// and rescaling come once a block too; a block's keys and values of 128 dimensions (256 KiB)
// stay in the second-level cache. Measured (`tandem bench --attention --tokens 512,2048
// -d 0,8192 -t 2 --kv-cache int8`, Zen 5): 455-615 -> 487-704 GFLOP/s at depth 0 and
// 680-700 -> 800-820 at 8192 against blocks of 128; 512 was 2-4% short of 1024.
inline constexpr std::int64_t kInt8PromptKeyBlock = 1024;

// How the AVX-512 prompt kernel multiplies: VDPBF16PS, or AMX tiles (TDPBF16PS) where the
// key width is whole 32s and the value width whole 16s, from the CPU or emulated in software
// (tests on CPUs without AMX).
enum class PromptTiles { None, Hardware, Emulated };

// The VDPBF16PS kernel's prompt attention over a BF16 cache (its own row groups and blocks,
// attention/avx512bf16.cpp); `q` as attend_prompt_bf16 takes it (rounded to BF16 there, in
// the kernel's own copy).
void attend_prompt_bf16_avx512(const float* q, std::int64_t q_stride, std::int64_t nq,
                               std::int64_t tokens, const Bf16Kv& kv, std::int64_t pos0,
                               std::int64_t window, float scale, const float* sinks, float* out,
                               std::int64_t out_stride, PromptTiles tiles);

// The Avx2 variant over a BF16 cache (attention/avx2.cpp): decoding as attend_all, a prompt
// as attend_prompt_blocks; `q` rounded to BF16, a prompt's tokens' rows side by side.
void attend_bf16_avx2(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                      std::int64_t end, float scale, float* scores, float* out, const float* sinks,
                      float* max, float* sum);
void attend_prompt_bf16_avx2(const float* q, std::int64_t nq, std::int64_t tokens, const Bf16Kv& kv,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride);

// The Avx2 variant over the fp32 cache (attention/avx2.cpp): as attend_all (sinks, or a
// part's max and sum) and as attend_prompt_blocks.
void attend_fp32_avx2(const float* q, std::int64_t nq, const float* keys, std::int64_t key_dim,
                      const float* values, std::int64_t value_stride, std::int64_t value_dim,
                      std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                      const float* sinks, float* max, float* sum);
void attend_prompt_fp32_avx2(const float* q, std::int64_t q_stride, std::int64_t nq,
                             std::int64_t tokens, const float* keys, std::int64_t key_dim,
                             const float* values, std::int64_t value_stride, std::int64_t value_dim,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride);

// The VDPBF16PS kernels (attention/avx512bf16.cpp) over a BF16 cache; `q` already rounded to
// BF16. Arguments as attend_all's.
void attend_bf16_avx512(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                        std::int64_t end, float scale, float* scores, float* out,
                        const float* sinks, float* max, float* sum);

// Every query row of a call on an 8-bit cache, quantised once (int8_quantize_query) for all
// the positions and blocks the kernels take it through: row r = t * nq + i is token t's
// head i, found from the pointer attend_all passes (q0 + t * q_stride + i * key_dim).
// `correction` is 128 times the sum of each group of a row's bytes: the keys are stored
// offset by 128, and VPDPBUSD multiplies them as unsigned.
struct Int8Queries {
  const float* q0 = nullptr;
  std::int64_t q_stride = 0, nq = 0, key_dim = 0, groups = 0;
  std::vector<std::int8_t> q8;           // [row][key_dim]
  std::vector<float> scale;              // [row]
  std::vector<std::int32_t> correction;  // [row][groups]

  void prepare(const float* q, std::int64_t stride, std::int64_t tokens, std::int64_t heads,
               std::int64_t dim);
  std::int64_t row(const float* q) const {
    const std::int64_t off = q - q0;
    return off / q_stride * nq + off % q_stride / key_dim;
  }
};

// The VPDPBUSD kernels (attention/avx512vnni.cpp) over an 8-bit cache, the queries prepared;
// arguments as attend_all's and attend_prompt_blocks'.
void attend_int8_avx512(const Int8Queries& queries, const float* q, std::int64_t nq,
                        const Int8Kv& kv, std::int64_t begin, std::int64_t end, float scale,
                        float* scores, float* out, const float* sinks, float* max, float* sum);
void attend_prompt_int8_avx512(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                               std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                               std::int64_t pos0, std::int64_t window, float scale,
                               const float* sinks, float* out, std::int64_t out_stride);
// The Avx2 variant over an 8-bit cache (attention/avx2.cpp), arguments as above.
void attend_int8_avx2(const Int8Queries& queries, const float* q, std::int64_t nq, const Int8Kv& kv,
                      std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                      const float* sinks, float* max, float* sum);
void attend_prompt_int8_avx2(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                             std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride);

// The helpers below work in the file's own vector width (VecLanes: 8 floats in a file built
// for AVX2 alone, else 16), a template argument so that each width is its own function.

// The largest of x[0..n) and `start`, a vector of lanes at a time (std::max one by one is
// not vectorised: it orders NaNs, which scores never are).
template <class V = VecLanes>
inline __attribute__((always_inline)) float max_of(const float* x, std::int64_t n, float start) {
  constexpr int L = kLanesOf<V>;
  std::int64_t i = 0;
  float mx = start;
  if (n >= L) {
    V lanes = load_lanes<V>(x);
    for (i = L; i + L <= n; i += L) {
      const V v = load_lanes<V>(x + i);
      lanes = v > lanes ? v : lanes;
    }
    for (int j = 0; j < L; ++j) mx = std::max(mx, lanes[j]);
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  return mx;
}

// x[i] = e^(x[i] - mx) for i < n; returns their sum (in double).
template <class V = VecLanes>
inline __attribute__((always_inline)) double exp_shifted(float* x, std::int64_t n, float mx) {
  // Summed in float lanes over stretches of 256 values (at most 32 terms of at most 1 in
  // each lane: exact enough), each stretch's total added in double, so long rows stay exact.
  constexpr int L = kLanesOf<V>;
  constexpr std::int64_t kStretch = 256;
  double sum = 0.0;
  std::int64_t i = 0;
  while (i + L <= n) {
    V lanes = V{};
    const std::int64_t stop = std::min(n - n % L, i + kStretch);
    for (; i < stop; i += L) {
      const V e = exp_of(load_lanes<V>(x + i) - mx);
      store_lanes(x + i, e);
      lanes += e;
    }
    float part = 0.0f;
    for (int j = 0; j < L; ++j) part += lanes[j];
    sum += part;
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  return sum;
}

// x = softmax(x) over n values and the sink (whose share is dropped).
template <class V = VecLanes>
inline __attribute__((always_inline)) void softmax_row(float* x, std::int64_t n, float sink) {
  const float mx = max_of<V>(x, n, sink);
  // exp(-inf - mx) is 0: no sink adds nothing.
  const double sum = std::exp(static_cast<double>(sink) - mx) + exp_shifted<V>(x, n, mx);
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t k = 0; k < n; ++k) x[k] *= inv;
}

// NQ queries over [begin, end) through `kv`, a kernel with
//   template <int NQ> void score(const float* q, begin, end, scale, float* scores, stride)
//     scores[i * stride + s - begin] = scale * q_i . k_s
//   template <int NQ> void weigh(const float* p, p_stride, begin, end, float* out)
//     out[i] = sum over s in [begin, end) of p[i * p_stride + s - begin] * v_s
// and its key_dim and value_dim. With `max` null: the normalised attention (with the
// sinks); otherwise a part, unnormalised, with each query's max and weight sum. Either way
// the weights are weighed as e^(s - max), and a whole attention's rows are divided by their
// sum afterwards (value_dim values a row, not len weights).
template <int NQ, class Kv>
inline __attribute__((always_inline)) void attend_queries(const Kv& kv, const float* q,
                                                          std::int64_t begin, std::int64_t end,
                                                          float scale, float* scores, float* out,
                                                          const float* sinks, float* max,
                                                          float* sum) {
  const std::int64_t len = end - begin;
  kv.template score<NQ>(q, begin, end, scale, scores, len);
  // No positions: no values (and no division, by a sum that may be 0).
  if (len == 0) {
    if (max != nullptr) {
      std::fill_n(max, NQ, -std::numeric_limits<float>::infinity());
      std::fill_n(sum, NQ, 0.0f);
    }
    std::fill_n(out, NQ * kv.value_dim, 0.0f);
    return;
  }
  if (max != nullptr) {  // a part
    for (int i = 0; i < NQ; ++i) {
      float* row = scores + i * len;
      const float mx = max_of(row, len, -std::numeric_limits<float>::infinity());
      max[i] = mx;
      sum[i] = static_cast<float>(exp_shifted(row, len, mx));
    }
    kv.template weigh<NQ>(scores, len, begin, end, out);
    return;
  }
  float inv[NQ];
  for (int i = 0; i < NQ; ++i) {
    float* row = scores + i * len;
    // exp(-inf - mx) is 0: no sink adds nothing.
    const float sink = sinks != nullptr ? sinks[i] : -std::numeric_limits<float>::infinity();
    const float mx = max_of(row, len, sink);
    inv[i] = static_cast<float>(
        1.0 / (std::exp(static_cast<double>(sink) - mx) + exp_shifted(row, len, mx)));
  }
  kv.template weigh<NQ>(scores, len, begin, end, out);
  for (int i = 0; i < NQ; ++i) {
    float* o = out + i * kv.value_dim;
    for (std::int64_t d = 0; d < kv.value_dim; ++d) o[d] *= inv[i];
  }
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
    with_count<kMaxQueries>(
        n, [&](auto nq_) __attribute__((always_inline)) {
          attend_queries<decltype(nq_)::value>(kv, qi, begin, end, scale, si, oi, sk, mi, ui);
        });
  }
}

// attend_all's weigh for kernels that weigh into rows of their own (attend_prompt_rows'
// weigh_rows): its rows one after another in `out`, nothing there before.
template <class Kernel>
struct WeighIntoRows {
  template <int NQ>
  __attribute__((always_inline)) void weigh(const float* p, std::int64_t p_stride,
                                            std::int64_t begin, std::int64_t end,
                                            float* out) const {
    const auto& kernel = static_cast<const Kernel&>(*this);
    float* rows[NQ];
    for (int i = 0; i < NQ; ++i) rows[i] = out + i * kernel.value_dim;
    kernel.template weigh_rows<NQ>(p, p_stride, begin, end, rows, nullptr);
  }
};

// What attend_prompt_blocks works in, one per thread: `scores` nq x kPromptKeyBlock, `part`
// nq x value_dim, `part_max` and `part_sum` nq, `max` and `sum` tokens x nq.
struct PromptScratch {
  std::vector<float> scores, part, part_max, part_sum, max, sum;
};
// This thread's scratch, sized for nq queries of value_dim values over `tokens` tokens.
PromptScratch& prompt_scratch(std::int64_t nq, std::int64_t value_dim, std::int64_t tokens);

// The end of a prompt's attention (attend_prompt_blocks, attend_prompt_rows): each row, token
// t's head i at out + t * out_stride + i * vd, divided by its sum of weights (and its sink's
// share, against its maximum), row t * nq + i of `max` and `sum`.
inline __attribute__((always_inline)) void divide_prompt_rows(float* out, std::int64_t out_stride,
                                                              std::int64_t tokens, std::int64_t nq,
                                                              std::int64_t vd, const float* max,
                                                              const float* sum,
                                                              const float* sinks) {
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t i = 0; i < nq; ++i) {
      const std::int64_t r = t * nq + i;
      double denominator = sum[r];
      if (sinks != nullptr) denominator += std::exp(static_cast<double>(sinks[i]) - max[r]);
      const auto inv = static_cast<float>(1.0 / denominator);
      float* o = out + t * out_stride + i * vd;
      for (std::int64_t d = 0; d < vd; ++d) o[d] *= inv;
    }
  }
}

// A prompt's attention, flash-style (as attend_prompt declares it): the key range is taken
// in blocks of kPromptKeyBlock positions at multiples of it, and each block goes through
// every token that sees it while it is in the first- and second-level caches, each token's
// part folded into its running result by the online softmax: out holds the running sums
// scaled to the running maximum, scratch's `max` and `sum` that maximum and the sum of the
// weights. q and out: token t's nq rows at t * q_stride and t * out_stride.
template <class Kv>
inline __attribute__((always_inline)) void attend_prompt_blocks(
    const Kv& kv, const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
    std::int64_t pos0, std::int64_t window, float scale, const float* sinks, float* out,
    std::int64_t out_stride) {
  const std::int64_t vd = kv.value_dim;
  PromptScratch& scratch = prompt_scratch(nq, vd, tokens);
  float* scores = scratch.scores.data();
  float* part = scratch.part.data();
  float* part_max = scratch.part_max.data();
  float* part_sum = scratch.part_sum.data();
  float* max = scratch.max.data();
  float* sum = scratch.sum.data();
  const auto first = [&](std::int64_t t) __attribute__((always_inline)) {
    return first_visible(pos0 + t, window);
  };
  std::fill_n(max, tokens * nq, -std::numeric_limits<float>::infinity());
  std::fill_n(sum, tokens * nq, 0.0f);
  const std::int64_t end = pos0 + tokens;
  for (std::int64_t k0 = first(0) - first(0) % kPromptKeyBlock; k0 < end; k0 += kPromptKeyBlock) {
    const std::int64_t k1 = k0 + kPromptKeyBlock;
    // Tokens before k0 - pos0 see none of this block (causal); with a window, tokens whose
    // window starts past it neither.
    for (std::int64_t t = std::max<std::int64_t>(0, k0 - pos0); t < tokens; ++t) {
      const std::int64_t lo = std::max(k0, first(t)), hi = std::min(k1, pos0 + t + 1);
      if (lo >= hi) continue;
      attend_all(kv, q + t * q_stride, nq, lo, hi, scale, scores, part, nullptr, part_max,
                 part_sum);
      for (std::int64_t i = 0; i < nq; ++i) {
        float* o = out + t * out_stride + i * vd;
        const float* po = part + i * vd;
        float& m = max[t * nq + i];
        float& l = sum[t * nq + i];
        if (m == -std::numeric_limits<float>::infinity()) {  // the token's first block
          std::copy_n(po, vd, o);
          m = part_max[i];
          l = part_sum[i];
          continue;
        }
        const float mx = std::max(m, part_max[i]);
        const float a = std::exp(m - mx), b = std::exp(part_max[i] - mx);
        constexpr int L = kLanesOf<VecLanes>;
        std::int64_t d = 0;
        for (; d + L <= vd; d += L)
          store_lanes(o + d, a * load_lanes<VecLanes>(o + d) + b * load_lanes<VecLanes>(po + d));
        for (; d < vd; ++d) o[d] = a * o[d] + b * po[d];
        l = a * l + b * part_sum[i];
        m = mx;
      }
    }
  }
  divide_prompt_rows(out, out_stride, tokens, nq, vd, max, sum, sinks);
}

// A prompt's attention, flash-style as attend_prompt_blocks', for kernels whose query rows run
// on across tokens (row r = t * nq + i, as Int8Queries holds them: score and weigh find rows
// from the pointer to their first): each block goes through groups of kMaxQueries rows of
// consecutive tokens, so a group of few heads (3 query heads a KV head, as SmolLM2's) takes
// the block's keys and values with as many rows as a group of 8. A group is scored and
// weighed over the positions any of its rows sees; each row's positions outside its own
// (causal, window) get no weight. Each row's weights are taken against its running maximum
// directly, so a block costs one exponential pass a row, and the kernel weighs straight into
// the rows' outputs, rescaling them as it goes, through
//   template <int NQ> void weigh_rows(p, p_stride, begin, end, float* const* rows, corr)
//     rows[i] = corr[i] * rows[i] + sum over s of p[i * p_stride + s - begin] * v_s
//     (corr[i] 0: rows[i] not read).
template <class Kv>
inline __attribute__((always_inline)) void attend_prompt_rows(
    const Kv& kv, const float* q, std::int64_t q_stride, std::int64_t nq, std::int64_t tokens,
    std::int64_t pos0, std::int64_t window, float scale, const float* sinks, float* out,
    std::int64_t out_stride) {
  const std::int64_t vd = kv.value_dim;
  PromptScratch& scratch = prompt_scratch(kMaxQueries, vd, tokens);
  float* scores = scratch.scores.data();
  float* max = scratch.max.data();
  float* sum = scratch.sum.data();
  const auto first = [&](std::int64_t t) __attribute__((always_inline)) {
    return first_visible(pos0 + t, window);
  };
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  std::fill_n(max, tokens * nq, kNone);
  std::fill_n(sum, tokens * nq, 0.0f);
  // Rows [r0, r0 + N) over [lo, hi) of the block ending at k1. Inlined, so that it is compiled
  // for the caller's target (a lambda's own body is compiled for the default one inside a
  // target_clones function: the Portable variant ran at 18 GFLOP/s instead of 215).
  const auto group = [&](auto rows, std::int64_t r0, std::int64_t lo, std::int64_t hi,
                         std::int64_t k1) __attribute__((always_inline)) {
    constexpr int N = decltype(rows)::value;
    const std::int64_t len = hi - lo;
    // Each row's token and output (a division a group rather than one a row).
    std::int64_t token[N];
    float* dst[N];
    for (std::int64_t i = 0, t = r0 / nq, h = r0 % nq; i < N; ++i) {
      token[i] = t;
      dst[i] = out + t * out_stride + h * vd;
      if (++h == nq) h = 0, ++t;
    }
    kv.template score<N>(q + token[0] * q_stride + r0 % nq * kv.key_dim, lo, hi, scale, scores,
                         len);
    float corr[N];  // the row's output so far is scaled by it; below 0: the row has no weight here
    for (int i = 0; i < N; ++i) {
      const std::int64_t r = r0 + i, t = token[i];
      float* row = scores + i * len;
      const std::int64_t a = std::max(lo, first(t)) - lo;
      const std::int64_t b = std::min(k1, pos0 + t + 1) - lo;
      if (a >= b) {  // none of the block's positions is the row's
        std::fill_n(row, len, 0.0f);
        corr[i] = -1.0f;
        continue;
      }
      std::fill_n(row, a, 0.0f);
      std::fill(row + b, row + len, 0.0f);
      const float m_old = max[r];
      const float m_new = std::max(m_old, max_of(row + a, b - a, kNone));
      corr[i] = m_old == kNone ? 0.0f : std::exp(m_old - m_new);
      sum[r] = sum[r] * corr[i] + static_cast<float>(exp_shifted(row + a, b - a, m_new));
      max[r] = m_new;
    }
    // Rows with no weight here keep their output (scaled by 1, their weights all 0), or
    // have none yet (0).
    for (int i = 0; i < N; ++i)
      if (corr[i] < 0.0f) corr[i] = max[r0 + i] == kNone ? 0.0f : 1.0f;
    kv.template weigh_rows<N>(scores, len, lo, hi, dst, corr);
  };
  const std::int64_t last = pos0 + tokens;
  constexpr std::int64_t kBlock = kInt8PromptKeyBlock;
  for (std::int64_t k0 = first(0) - first(0) % kBlock; k0 < last; k0 += kBlock) {
    const std::int64_t k1 = k0 + kBlock;
    // The tokens that see some of the block: from the first at or past it (causal) to the last
    // whose window starts before its end.
    const std::int64_t ta = std::max<std::int64_t>(0, k0 - pos0);
    const std::int64_t tb = window > 0 ? std::min(tokens, k1 - pos0 - 1 + window) : tokens;
    for (std::int64_t r0 = ta * nq; r0 < tb * nq; r0 += kMaxQueries) {
      const std::int64_t n = std::min(kMaxQueries, tb * nq - r0);
      const std::int64_t lo = std::max(k0, first(r0 / nq));
      const std::int64_t hi = std::min(k1, pos0 + (r0 + n - 1) / nq + 1);
      with_count<kMaxQueries>(
          n, [&](auto rows) __attribute__((always_inline)) { group(rows, r0, lo, hi, k1); });
    }
  }
  divide_prompt_rows(out, out_stride, tokens, nq, vd, max, sum, sinks);
}

}  // namespace tandem::kernels::attention_loop
