// The AVX-512 (VNNI) products of kernels/cpu/gguf/matmul.h that read the blocks directly, for
// one or two tokens: each 64-weight step's codes are built in a register from the block's
// bytes and go straight into VPDPBUSD with the int8 activations, no unpacked row in between.
// Lane j of a step sums columns 4j .. 4j + 3, so lanes 4g .. 4g + 3 belong to the step's
// 16-weight group g: their sums start from the group's bias term (formats with a bias), are
// converted once and scaled by the group's weight scale times its activation scale.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <array>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_groups.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/gguf/simd_pieces.h"

namespace tandem::kernels {
namespace {

using gguf_simd::half;

// The activations of token t that a row's products read.
struct Token {
  const std::int8_t* q;
  const float* scale;
  const float* scaled_sum;
  const std::int32_t* bias;
};

void tokens_of(const GgufQuantizedActivations& a, std::int64_t m, Token* tok) {
  const std::int64_t k = a.cols, groups = k / 16;
  for (std::int64_t t = 0; t < m; ++t)
    tok[t] = {a.values.data() + t * k, a.scale.data() + t * groups,
              a.scaled_sum.data() + t * groups, a.group_bias.data() + t * groups};
}

// Group g's bias term in lane 4 (g - first) of the `groups` groups from `first` (4, or 2 for
// a last odd 32-weight block), the other lanes 0: the terms widened twice. VPEXPANDD from
// memory, which does it in one instruction, took a third of Q8_0's and Q6_K's time (Zen 5).
__m512i bias_lanes(const std::int32_t* bias, std::int64_t first, int groups = 4) {
  const __m128i terms = groups == 4
                            ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bias + first))
                            : _mm_maskz_loadu_epi32(0x3, bias + first);
  return _mm512_cvtepu32_epi64(_mm256_cvtepu32_epi64(terms));
}

// The lines of a block some way ahead: each thread streams its rows once, and the hardware
// prefetchers alone leave the loads of a block's first line waiting on memory.
template <int kBytes>
void prefetch_ahead(const std::uint8_t* b) {
  constexpr int kAheadBytes = 1024;
  for (int line = 0; line < kBytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(b + kAheadBytes + line), _MM_HINT_T0);
}

// Lanes 0..7 one float, 8..15 another.
__m512 two_halves(float low, float high) {
  return _mm512_insertf32x8(_mm512_set1_ps(low), _mm256_set1_ps(high), 1);
}

// Q8_0: two 34-byte blocks a step, int8 codes plus 128 (a sign flip).
template <int T>
void q8_0_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  std::int64_t c = 0;
  for (; c + 64 <= k; c += 64, b += 68) {
    prefetch_ahead<68>(b);
    const __m512i u = _mm512_xor_si512(
        _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 36)), 1),
        flip);
    const float d0 = half(b), d1 = half(b + 34);
    for (int t = 0; t < T; ++t) {
      const __m512i dp =
          _mm512_dpbusd_epi32(bias_lanes(tok[t].bias, c / 16), u, _mm512_loadu_si512(tok[t].q + c));
      const __m512 s = two_halves(d0 * tok[t].scale[c / 16], d1 * tok[t].scale[c / 16 + 2]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[t]);
    }
  }
  if (c < k) {  // a last single block
    const __m512i u = _mm512_xor_si512(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2))), flip);
    const float d0 = half(b);
    for (int t = 0; t < T; ++t) {
      const __m512i dp = _mm512_dpbusd_epi32(bias_lanes(tok[t].bias, c / 16, 2), u,
                                             _mm512_maskz_loadu_epi8(0xFFFFFFFFull, tok[t].q + c));
      const __m512 s = two_halves(d0 * tok[t].scale[c / 16], 0.0f);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

// Q8_0 (and Q4_0 and IQ4_NL, NibbleLanes) for several tokens, one block in each lane: sixteen
// blocks (512 weights, 544 bytes of Q8_0) make a group, and lane l of step s (s = 0..7) holds
// codes 4s .. 4s + 3 of block kQ8LaneBlock[l]. A token's eight VPDPBUSD of a group add into
// one register of whole block sums, converted and scaled once a group: one conversion, one
// multiply and one fused multiply-add a token per eight VPDPBUSD, where q8_0_row takes a
// conversion, a fused multiply-add and the scale's broadcasts for each. The codes are moved
// into that order once for all the tokens, by a transpose of their 4-byte words; the
// activations are stored in the same order (q8_lane_order).
constexpr int kQ8LaneBlock[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
constexpr std::int64_t kQ8GroupBlocks = 16, kQ8GroupBytes = 16 * 34;

// The activations of a product in the order block_lane_row reads them: group by group, each
// token's 512 values in lane order, then its 16 lanes' scales and bias terms (a block's two
// 16-value terms added).
struct Q8LaneActivations {
  const std::int8_t* values;  // [group][row][512]
  const float* scale;         // [group][row][16]
  const std::int32_t* bias;   // [group][row][16]
  std::int64_t rows;          // rows a group holds
};

// The lanes whose blocks are among a group's first `blocks`.
constexpr std::array<std::uint16_t, 17> kLaneBlocksMask = [] {
  std::array<std::uint16_t, 17> masks{};
  for (int blocks = 0; blocks <= 16; ++blocks)
    for (int l = 0; l < 16; ++l)
      if (kQ8LaneBlock[l] < blocks) masks[blocks] |= static_cast<std::uint16_t>(1u << l);
  return masks;
}();
inline __mmask16 lane_blocks_mask(std::int64_t blocks) {
  return static_cast<__mmask16>(kLaneBlocksMask[static_cast<std::size_t>(blocks)]);
}

// Sixteen runs of 32 bytes, run j at p + stride j (the first `runs` of them, the others
// zero), in lane order: lane l of out[w] is 4-byte word w of run kQ8LaneBlock[l].
template <int kStride, bool kWhole>
inline __attribute__((always_inline)) void lane_words(const std::uint8_t* p, std::int64_t runs,
                                                      __m512i (&out)[8]) {
  const auto run = [&](int j) {
    const auto* at = reinterpret_cast<const __m256i*>(p + kStride * j);
    return kWhole ? _mm256_loadu_si256(at) : _mm256_maskz_loadu_epi8(j < runs ? ~0u : 0u, at);
  };
  // z[i]: run i's eight words in the low half, run i + 8's in the high half.
  __m512i z[8];
  for (int i = 0; i < 8; ++i)
    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(run(i)), run(i + 8), 1);
  // An 8-by-8 transpose of words in each half: after the two unpacks, 128-bit lane j of v[w]
  // holds word w + 4 (j % 2) of runs 4 (j / 2) + (0..3) (of z[0..3] for w < 4, z[4..7] for
  // v[w + 4]); the shuffles gather a word's lanes from both.
  __m512i t[8], v[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    v[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
    v[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
    v[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
    v[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
  }
  for (int w = 0; w < 4; ++w) {
    out[w] = _mm512_shuffle_i64x2(v[w], v[w + 4], _MM_SHUFFLE(2, 0, 2, 0));
    out[w + 4] = _mm512_shuffle_i64x2(v[w], v[w + 4], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// A group's codes in lane order, plus 128 (a sign flip), and its weight scales by lane; the
// first `blocks` blocks of the group (16 but in a row's last group), the others zero.
struct Q8GroupCodes {
  __m512i u[8];
  __m512 scale;
};

template <bool kWhole>
inline __attribute__((always_inline)) void q8_group_codes(const std::uint8_t* b,
                                                          std::int64_t blocks, Q8GroupCodes& out) {
  lane_words<34, kWhole>(b + 2, blocks, out.u);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (__m512i& u : out.u) u = _mm512_xor_si512(u, flip);
  // The fp16 scales in lane order: the low half of the 32-bit word at each block's start.
  const __m512i at =
      _mm512_setr_epi32(0, 34, 68, 102, 272, 306, 340, 374, 136, 170, 204, 238, 408, 442, 476, 510);
  const __m512i words = kWhole ? _mm512_i32gather_epi32(at, b, 1)
                               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                                                             lane_blocks_mask(blocks), at, b, 1);
  out.scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
}

// T tokens' sums over one group of `a` (in lane order) added into acc.
template <int T>
inline __attribute__((always_inline)) void q8_group_tokens(const Q8GroupCodes& w,
                                                           const std::int8_t* values,
                                                           const float* scale,
                                                           const std::int32_t* bias, __m512* acc) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const std::int8_t* q = values + 512 * t;
    // Two chains of four: one token's group does not wait on eight in a row.
    __m512i d0 = _mm512_loadu_si512(bias + 16 * t), d1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      d0 = _mm512_dpbusd_epi32(d0, w.u[s], _mm512_loadu_si512(q + 64 * s));
      d1 = _mm512_dpbusd_epi32(d1, w.u[s + 4], _mm512_loadu_si512(q + 256 + 64 * s));
    }
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)),
                             _mm512_mul_ps(w.scale, _mm512_loadu_ps(scale + 16 * t)), acc[t]);
  }
}

// Q8_0's codes of a group in lane order (q8_group_codes).
struct Q8Lanes {
  static constexpr std::int64_t kGroupBytes = kQ8GroupBytes;
  template <bool kWhole>
  static void codes(const std::uint8_t* b, std::int64_t blocks, Q8GroupCodes& out) {
    q8_group_codes<kWhole>(b, blocks, out);
  }
};

// One row of a 32-weight format (Codes: its group's codes in lane order) times T tokens of
// `a` (in lane order, q8_lane_order).
template <int T, class Codes>
void block_lane_row(const std::uint8_t* b, std::int64_t k, const Q8LaneActivations& a, float* y,
                    std::int64_t y_stride) {
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const std::int8_t* values = a.values;
  const float* scale = a.scale;
  const std::int32_t* bias = a.bias;
  const std::int64_t blocks = k / 32;
  std::int64_t g = 0;
  for (; g + kQ8GroupBlocks <= blocks; g += kQ8GroupBlocks, b += Codes::kGroupBytes,
                                       values += 512 * a.rows, scale += 16 * a.rows,
                                       bias += 16 * a.rows) {
    prefetch_ahead<Codes::kGroupBytes>(b);
    Q8GroupCodes w;
    Codes::template codes<true>(b, 16, w);
    q8_group_tokens<T>(w, values, scale, bias, acc);
  }
  if (g < blocks) {  // a row's last group of fewer blocks
    Q8GroupCodes w;
    Codes::template codes<false>(b, blocks - g, w);
    q8_group_tokens<T>(w, values, scale, bias, acc);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

// The 32-weight formats with nibbles (gguf_layout::NibbleFormat); IQ4_NL's levels go in plus
// 128, its bias here, as the activations' group terms take it off.
using gguf_layout::kIq4Nl;
using gguf_layout::kQ4_0;
using gguf_layout::kQ4_1;
using gguf_layout::kQ5_0;
using gguf_layout::kQ5_1;
using gguf_layout::NibbleFormat;

// The 64 codes of two runs of 16 nibble bytes, a and b: the 128-bit lanes hold a's low
// nibbles, a's high, b's low, b's high, i.e. weights 0..31 of a's block, then b's.
__m512i nibble_codes(const std::uint8_t* a, const std::uint8_t* b) {
  const __m512i both = _mm512_castsi256_si512(_mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
  const __m512i raw = _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(1, 1, 0, 0));
  return _mm512_and_si512(
      _mm512_mask_blend_epi8(0xFFFF0000FFFF0000ull, raw, _mm512_srli_epi16(raw, 4)),
      _mm512_set1_epi8(0x0F));
}

// IQ4_NL's and IQ4_XS's levels plus 128, in every 128-bit lane.
__m512i iq4_level_table() {
  return _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf_layout::kIq4Codes.data())));
}

// Q4_0's and IQ4_NL's codes of a group in Q8_0's lane order: lane l of step s holds weights
// 4s .. 4s + 3 of block kQ8LaneBlock[l], the low nibbles of the block's word s for s < 4 and
// the high nibbles of word s - 4 after (weights j and j + 16 share byte j). Register i takes
// the 16 bytes of blocks i, 8 + i, 4 + i and 12 + i in its 128-bit lanes; a 4-by-4 transpose
// of words in each lane then gives lane 4j + i word w of the j-th of those blocks.
template <NibbleFormat F>
struct NibbleLanes {
  static constexpr std::int64_t kGroupBytes = 16 * F.bytes;
  template <bool kWhole>
  static void codes(const std::uint8_t* b, std::int64_t blocks, Q8GroupCodes& out) {
    const auto run = [&](int j) {
      const auto* at = reinterpret_cast<const __m128i*>(b + F.bytes * j + F.codes);
      return kWhole ? _mm_loadu_si128(at)
                    : _mm_maskz_loadu_epi8(static_cast<__mmask16>(j < blocks ? 0xFFFF : 0), at);
    };
    __m512i r[4];
    for (int i = 0; i < 4; ++i) {
      __m512i v = _mm512_castsi128_si512(run(i));
      v = _mm512_inserti32x4(v, run(8 + i), 1);
      v = _mm512_inserti32x4(v, run(4 + i), 2);
      r[i] = _mm512_inserti32x4(v, run(12 + i), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]),
                  t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    const __m512i words[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                              _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int w = 0; w < 4; ++w) {
      out.u[w] = _mm512_and_si512(words[w], low4);
      out.u[w + 4] = _mm512_and_si512(_mm512_srli_epi16(words[w], 4), low4);
    }
    if (F.levels) {
      const __m512i table = iq4_level_table();
      for (__m512i& u : out.u) u = _mm512_shuffle_epi8(table, u);
    }
    // The fp16 scales in lane order, from each block's first word.
    const __m512i at =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15),
                           _mm512_set1_epi32(F.bytes));
    const __m512i scale_words =
        kWhole ? _mm512_i32gather_epi32(at, b, 1)
               : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lane_blocks_mask(blocks), at,
                                             b, 1);
    out.scale = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(scale_words));
  }
};

// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: two blocks a step (the second of a last odd block masked
// off); the minimums' part summed apart, per token, from the activations' scaled sums.
template <int T, NibbleFormat F>
void nibble_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                std::int64_t y_stride) {
  const __m512i table = F.levels ? iq4_level_table() : _mm512_setzero_si512();
  __m512 acc[T];
  __m128 off[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    off[t] = _mm_setzero_ps();
  }
  for (std::int64_t c = 0; c < k; c += 64, b += 2 * F.bytes) {
    prefetch_ahead<2 * F.bytes>(b);
    const bool two = c + 64 <= k;
    const std::uint8_t* b1 = two ? b + F.bytes : b;  // a last odd block reads itself twice
    __m512i u = nibble_codes(b + F.codes, b1 + F.codes);
    if constexpr (F.fifth >= 0) {
      std::uint32_t h0, h1;
      std::memcpy(&h0, b + F.fifth, 4);
      std::memcpy(&h1, b1 + F.fifth, 4);
      const __mmask64 fifth = h0 | static_cast<std::uint64_t>(h1) << 32;
      u = _mm512_mask_add_epi8(u, fifth, u, _mm512_set1_epi8(16));
    }
    if constexpr (F.levels) u = _mm512_shuffle_epi8(table, u);
    const float d0 = half(b), d1 = two ? half(b1) : 0.0f;
    const __mmask64 columns = two ? ~0ull : 0xFFFFFFFFull;
    // The minimums, each for its block's two groups (read once for all tokens).
    __m128 minimums = _mm_setzero_ps();
    if constexpr (F.minimum) {
      const float m0 = half(b + 2), m1 = two ? half(b1 + 2) : 0.0f;
      minimums = _mm_set_ps(m1, m1, m0, m0);
    }
    for (int t = 0; t < T; ++t) {
      const __m512i start = F.bias != 0 || F.levels ? bias_lanes(tok[t].bias, c / 16, two ? 4 : 2)
                                                    : _mm512_setzero_si512();
      const __m512i dp =
          _mm512_dpbusd_epi32(start, u, _mm512_maskz_loadu_epi8(columns, tok[t].q + c));
      const __m512 s =
          two_halves(d0 * tok[t].scale[c / 16], two ? d1 * tok[t].scale[c / 16 + 2] : 0.0f);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[t]);
      if constexpr (F.minimum)
        off[t] = _mm_fmadd_ps(_mm_maskz_loadu_ps(two ? 0xF : 0x3, tok[t].scaled_sum + c / 16),
                              minimums, off[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    const __m128 o = _mm_add_ps(off[t], _mm_movehl_ps(off[t], off[t]));
    y[t * y_stride] =
        _mm512_reduce_add_ps(acc[t]) + _mm_cvtss_f32(_mm_add_ss(o, _mm_shuffle_ps(o, o, 1)));
  }
}

// An IQ4_XS block's eight sub-block scales times d in lanes 2 sub and 2 sub + 1 (its two
// 16-weight groups): the 6-bit scales less 32, their low nibbles in order from bytes 4..7 and
// high parts from the word at 2.
__m512 iq4_xs_group_scales(const std::uint8_t* b) {
  const __m128i low =
      gguf_simd::nibbles_in_order(_mm_cvtsi32_si128(static_cast<int>(gguf_iq::word32(b + 4))));
  const __m512i pair = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512i high = _mm512_and_si512(
      _mm512_srlv_epi32(_mm512_set1_epi32(gguf_iq::word16(b + 2)), _mm512_add_epi32(pair, pair)),
      _mm512_set1_epi32(3));
  const __m512i six = _mm512_or_si512(_mm512_permutexvar_epi32(pair, _mm512_cvtepu8_epi32(low)),
                                      _mm512_slli_epi32(high, 4));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(six, _mm512_set1_epi32(32))),
                       _mm512_set1_ps(half(b)));
}

// Lanes 4j .. 4j + 3 take group 4s + j: step s's four groups.
__m512i four_groups(int s) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_add_epi32(_mm512_srli_epi32(lane, 2), _mm512_set1_epi32(4 * s));
}

// Q4_K (five = false) and Q5_K: 256 weights a block, sub-blocks 2p and 2p + 1 in the low and
// high nibbles of 32 bytes (Q5_K's fifth bits in bits 2p and 2p + 1 of 32 more); weight =
// d scale u - dmin min. Each lane of the registers below keeps one sub-block for the whole
// block (kKLaneSub), so a token's four VPDPBUSD of a block add into one register whose lanes
// are whole sub-block sums, scaled once a block: one conversion, one multiply and two fused
// multiply-adds a token and block, where a register of two sub-blocks' columns took one each
// VPDPBUSD. The block's codes are moved into that order once for all the tokens: each step
// pair takes four bytes from each of the four 32-byte runs (a VPERMT2D), splits their
// nibbles, and lays the low ones (even sub-blocks) before the high ones (odd).
//
// Lane l of step pair s (s = 0..3) holds columns 4 (2s + (l % 8) / 4) .. + 3 of sub-block
// kKLaneSub[l]; the activations are stored in that order (k_lane_order).
constexpr int kKLaneSub[16] = {0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7};

// The block's eight 6-bit scales and minimums (12 bytes) in lane order, as floats.
void k_lane_scales(const std::uint8_t* s, __m512* scale, __m512* min) {
  const gguf_simd::KScales k = gguf_simd::k_scales(s);
  // Bytes 0..7 the scales of sub-blocks 0..7, 8..15 their minimums.
  const __m128i v =
      _mm_set_epi64x(static_cast<long long>(k.mins), static_cast<long long>(k.scales));
  const __m128i scales = _mm_setr_epi8(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
  const __m128i mins = _mm_add_epi8(scales, _mm_set1_epi8(8));
  *scale = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(v, scales)));
  *min = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(v, mins)));
}

// The activations of a product in the order q45_k_row reads them (k_lane_order): block by
// block, each token's 256 values in lane order, then its 16 lanes' scales and scaled sums.
struct KLaneActivations {
  const std::int8_t* values;  // [block][row][256]
  const float* scale;         // [block][row][16]
  const float* scaled_sum;    // [block][row][16]
  std::int64_t rows;          // rows a block holds
};

// One block's codes in lane order (four step pairs), and its scales and minimums by lane
// times d and dmin.
struct KBlockCodes {
  __m512i u[4];
  __m512 scale, min;
};

template <bool five>
inline __attribute__((always_inline)) void k_block_codes(const std::uint8_t* b, KBlockCodes& out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // Steps 4h .. 4h + 3 of the four 32-byte runs: lane 4i + p takes run p's word 4h + i.
  const __m512i runs[2] = {
      _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27),
      _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31)};
  k_lane_scales(b + 4, &out.scale, &out.min);
  out.scale = _mm512_mul_ps(out.scale, _mm512_set1_ps(half(b)));
  out.min = _mm512_mul_ps(out.min, _mm512_set1_ps(half(b + 2)));
  const std::uint8_t* qs = b + (five ? 48 : 16);
  const __m512i z0 = _mm512_loadu_si512(qs), z1 = _mm512_loadu_si512(qs + 64);
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_permutex2var_epi32(z0, runs[h], z1);
    const __m512i lo = _mm512_and_si512(q, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
    out.u[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    out.u[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  }
  if (five) {
    // Lane l's fifth bits: bit kKLaneSub[l] of the qh bytes of its columns, word 2s + (l %
    // 8) / 4 of the 32 bytes.
    const __m512i qh =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
    const __m512i bit =
        _mm512_setr_epi32(0x01010101, 0x04040404, 0x10101010, 0x40404040, 0x01010101, 0x04040404,
                          0x10101010, 0x40404040, 0x02020202, 0x08080808, 0x20202020, 0x80808080,
                          0x02020202, 0x08080808, 0x20202020, 0x80808080);
    for (int s = 0; s < 4; ++s) {
      const __m512i word =
          _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                           _mm512_set1_epi32(2 * s));
      out.u[s] = _mm512_mask_add_epi8(
          out.u[s], _mm512_test_epi8_mask(_mm512_permutexvar_epi32(word, qh), bit), out.u[s],
          _mm512_set1_epi8(16));
    }
  }
}

// One row times T tokens of `a` (in lane order, k_lane_order).
template <int T, bool five>
void q45_k_row(const std::uint8_t* b, std::int64_t k, const KLaneActivations& a, float* y,
               std::int64_t y_stride) {
  constexpr int kBytes = five ? 176 : 144;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const std::int8_t* values = a.values;
  const float *scale = a.scale, *scaled_sum = a.scaled_sum;
  for (std::int64_t c = 0; c < k; c += 256, b += kBytes, values += 256 * a.rows,
                    scale += 16 * a.rows, scaled_sum += 16 * a.rows) {
    prefetch_ahead<kBytes>(b);
    KBlockCodes w;
    k_block_codes<five>(b, w);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const std::int8_t* q = values + 256 * t;
      // Two chains of two: one token's block does not wait on four in a row.
      const __m512i d0 = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u[0], _mm512_loadu_si512(q)), w.u[1],
          _mm512_loadu_si512(q + 64));
      const __m512i d1 = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u[2], _mm512_loadu_si512(q + 128)), w.u[3],
          _mm512_loadu_si512(q + 192));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)),
                               _mm512_mul_ps(w.scale, _mm512_loadu_ps(scale + 16 * t)), acc[t]);
      acc[t] = _mm512_fnmadd_ps(w.min, _mm512_loadu_ps(scaled_sum + 16 * t), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

// Q6_K: 256 weights a block in two halves of 128, each the low and high nibbles of 64 bytes
// with two more bits each from 32; codes 0 .. 63 less 32, a signed scale per 16 weights.
template <int T>
void q6_k_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  // Bits 2j, 2j + 1 of the high bytes go to bits 4, 5: for weights 0..31 of a half shifted
  // left by 4, 32..63 by 2, 64..95 not at all, 96..127 right by 2.
  const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 210) {
    prefetch_ahead<210>(b);
    const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                        reinterpret_cast<const __m128i*>(b + 192)))),
                                    _mm512_set1_ps(half(b + 208)));
    __m512 s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm512_mul_ps(sc, _mm512_loadu_ps(tok[t].scale + c / 16));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
      const __m512i u[2] = {_mm512_or_si512(_mm512_and_si512(ql, low4),
                                            _mm512_and_si512(_mm512_sllv_epi16(qh, left), top2)),
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                            _mm512_and_si512(_mm512_srlv_epi16(qh, right), top2))};
      for (int step = 0; step < 2; ++step) {
        const int st = 2 * h + step;
        const __m512i groups = four_groups(st);
        for (int t = 0; t < T; ++t) {
          const __m512i dp = _mm512_dpbusd_epi32(bias_lanes(tok[t].bias, c / 16 + 4 * st), u[step],
                                                 _mm512_loadu_si512(tok[t].q + c + 64 * st));
          acc[t] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_permutexvar_ps(groups, s[t]), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

// The IQ1 ... IQ3 formats (kernels/cpu/gguf/iq_groups.h: sizes, biases, scales). Each
// 64-weight step's codes are built in a register: the grid magnitudes (IQ1, IQ2: eight 8-byte
// entries set from as many loads; IQ3: sixteen 4-byte ones looked up in registers, WordGrid),
// plus the format's bias, with the negative ones' magnitudes subtracted from it instead (a
// byte mask of the sign bits, found for a whole block at once where they are 7-bit fields);
// IQ1's are 8 (g + 1) plus 2 in the groups shifted by +1/8. Reading the step's fields at once
// runs 1.5-2.7x the group-by-group reading the AVX2 products use. The indices whose bits lie
// in several fields are put together by BMI2's PDEP in two 64-bit registers, four 16-bit
// indices each: on Zen 5 that ran IQ1_M 1.6x, IQ2_S 1.2x and IQ1_S 1.3x as fast as computing
// them in a vector register or by shifts.
namespace iq = gguf_iq;

// Four bytes to the low bytes of four 16-bit fields.
std::uint64_t byte_fields(std::uint32_t bytes) {
  return _pdep_u64(bytes, 0x00FF00FF00FF00FFull);
}

// Four 128-bit lanes as one register, lane j from q[j].
__m512i from_lanes(__m128i q0, __m128i q1, __m128i q2, __m128i q3) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(q1, q0)),
                            _mm256_set_m128i(q3, q2), 1);
}

// Eight 8-byte values, value j in bytes 8j .. 8j + 7. Built lane by lane, GCC loads each
// value straight into a vector register (VMOVQ, VPINSRQ from memory); from _mm512_set_epi64 it
// loaded them into general registers first and moved each across, and the IQ products ran
// 5-15% slower (Zen 5).
__m512i from_entries(const std::uint64_t* e) {
  const auto lane = [e](int j) {
    return _mm_set_epi64x(static_cast<long long>(e[2 * j + 1]), static_cast<long long>(e[2 * j]));
  };
  return from_lanes(lane(0), lane(1), lane(2), lane(3));
}

// Eight 8-byte grid entries, entry j in bytes 8j .. 8j + 7, its index in bits 16 (j % 4) ..
// 16 (j % 4) + 15 of `first` (j < 4) or `last`, masked by `Mask`.
template <unsigned Mask = 0xFFFF, class Entry>
__m512i grid_entries(const Entry* grid, std::uint64_t first, std::uint64_t last) {
  std::uint64_t e[8];
  for (int j = 0; j < 4; ++j) {
    std::memcpy(&e[j], grid[(first >> (16 * j)) & Mask], 8);
    std::memcpy(&e[j + 4], grid[(last >> (16 * j)) & Mask], 8);
  }
  return from_entries(e);
}

__m512i signed_codes(__m512i magnitude, std::uint64_t negative, int bias) {
  const __m512i b = _mm512_set1_epi8(static_cast<char>(bias));
  return _mm512_mask_sub_epi8(_mm512_add_epi8(b, magnitude), negative, b, magnitude);
}

// The sign masks of a whole block (its four steps, 64 bits each) of the formats with 7-bit
// sign fields, found for the block at once in vector registers by the same code as the AVX2
// unpacker's (gguf_iq's block_signs): step by step in general registers (PDEP, three folds),
// the fields took about half of IQ2_XXS's one-token instructions.
inline __attribute__((always_inline)) void store_signs(__m256i sign_bytes,
                                                       std::uint64_t (&negative)[4]) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(negative), sign_bytes);
}

// Eight 8-byte grid entries from eight index bytes (index[0..3], then index[k..k + 3]).
template <int kSecond, class Entry>
__m512i grid_bytes(const Entry* grid, const std::uint8_t* index) {
  std::uint64_t e[8];
  for (int j = 0; j < 4; ++j) {
    std::memcpy(&e[j], grid[index[j]], 8);
    std::memcpy(&e[j + 4], grid[index[kSecond + j]], 8);
  }
  return from_entries(e);
}

struct Iq2xxs : iq::Iq2xxs {
  // Sub-block i's 8 bytes at 2 + 8 i: four index bytes, then its sign word, whose top 4 bits
  // are the sub-block's scale s: d (0.5 + s) / 4 for both of its 16-weight groups, as
  // iq::Iq2xxs::scales, in one register.
  static __m512 block_scales(const std::uint8_t* b) {
    const __m512i s = _mm512_castsi256_si512(
        _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_loadu_si512(b + 2), 60)));
    const __m512i pairs = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), s);
    return _mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(pairs), _mm512_set1_ps(0.5f)),
                         _mm512_set1_ps(half(b) * 0.25f));
  }
  static __m512i codes(const std::uint8_t* b, int p, std::uint64_t negative) {
    return signed_codes(grid_bytes<8>(gguf_layout::kIq2xxsGrid, b + 2 + 16 * p), negative, kBias);
  }
};

struct Iq2xs : iq::Iq2xs {
  // Thirty-two 16-bit words: a 9-bit index, then a 7-bit sign field.
  static __m512i codes(const std::uint8_t* b, int p, std::uint64_t negative) {
    const std::uint8_t* w = b + 2 + 16 * p;
    std::uint64_t e[8];
    for (int j = 0; j < 8; ++j)
      std::memcpy(&e[j], gguf_layout::kIq2xsGrid[iq::word16(w + 2 * j) & 511], 8);
    return signed_codes(from_entries(e), negative, kBias);
  }
};

struct Iq2s : iq::Iq2s {
  static __m512i codes(const std::uint8_t* b, int p) {
    const std::uint8_t* qs = b + 2 + 8 * p;
    const std::uint32_t high = iq::word16(b + 66 + 2 * p);  // 2 bits per index
    constexpr std::uint64_t kHigh = 0x0300030003000300ull;
    const std::uint64_t first = byte_fields(iq::word32(qs)) | _pdep_u64(high, kHigh);
    const std::uint64_t last = byte_fields(iq::word32(qs + 4)) | _pdep_u64(high >> 8, kHigh);
    std::uint64_t negative;
    std::memcpy(&negative, b + 34 + 8 * p, 8);
    return signed_codes(grid_entries(gguf_layout::kIq2sGrid, first, last), negative, kBias);
  }
};

// The IQ3 grids in registers. Each entry's four magnitudes as level numbers (IQ3_XXS's 4, 12,
// ..., 52 as 0 .. 6 and 62 as 7; IQ3_S's 1, 3, ..., 15 as 0 .. 7), weight j in bits 3j .. 3j + 2
// of a 16-bit word: 512 bytes (IQ3_XXS) or 1 KiB (IQ3_S), which a row's products hold in
// registers. A block's 64 entries are looked up 32 at once by VPERMT2W over pairs of them and
// blends by the indices' top bits, and each 64-weight step spreads its 16 words to bytes and
// maps the level numbers to magnitudes with a byte shuffle: one by one from memory, the
// lookups took most of the IQ3 products' instructions.
template <int kEntries>
struct WordGrid {
  static constexpr int kParts = kEntries / 32;
  __m512i part[kParts];  // entries 32 r .. 32 r + 31 in part[r]
  explicit WordGrid(const std::uint16_t* words) {
    for (int r = 0; r < kParts; ++r) part[r] = _mm512_loadu_si512(words + 32 * r);
  }
  // The words of 32 16-bit indices: bits 0..5 pick one of 64 in a pair of registers, the
  // bits above the pair.
  inline __attribute__((always_inline)) __m512i lookup(__m512i index) const {
    __m512i pick[kParts / 2];
#pragma GCC unroll 8
    for (int r = 0; r < kParts / 2; ++r)
      pick[r] = _mm512_permutex2var_epi16(part[2 * r], index, part[2 * r + 1]);
#pragma GCC unroll 4
    for (int width = 1, bit = 64; width < kParts / 2; width *= 2, bit *= 2) {
      const __mmask32 high =
          _mm512_test_epi16_mask(index, _mm512_set1_epi16(static_cast<short>(bit)));
#pragma GCC unroll 4
      for (int r = 0; r < kParts / 2; r += 2 * width)
        pick[r] = _mm512_mask_blend_epi16(high, pick[r], pick[r + width]);
    }
    return pick[0];
  }
};

// A grid of 4-weight entries as level words (above), from its magnitudes; level(m) names m.
template <int kEntries, class Level>
std::array<std::uint16_t, kEntries> level_words(const std::uint8_t (*grid)[4], Level level) {
  std::array<std::uint16_t, kEntries> words{};
  for (int i = 0; i < kEntries; ++i)
    for (int j = 0; j < 4; ++j)
      words[static_cast<std::size_t>(i)] |=
          static_cast<std::uint16_t>(level(grid[i][j]) << (3 * j));
  return words;
}

// Step p's 64 codes from the block's entry words (steps 0-1 in entries[0], 2-3 in entries[1]):
// entry e's word to both words of 4-byte lane e, the second shifted right by 6, so that each
// word's two bytes take two weights' level numbers, then the magnitudes (`levels`, by level
// number) with their signs.
inline __attribute__((always_inline)) __m512i iq3_step_codes(const __m512i (&entries)[2], int p,
                                                             __m128i levels, std::uint64_t negative,
                                                             int bias) {
  const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                        16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i which =
      _mm512_add_epi16(_mm512_srli_epi16(lane, 1), _mm512_set1_epi16(16 * (p % 2)));
  const __m512i shift =
      _mm512_mullo_epi16(_mm512_and_si512(lane, _mm512_set1_epi16(1)), _mm512_set1_epi16(6));
  const __m512i w = _mm512_srlv_epi16(_mm512_permutexvar_epi16(which, entries[p / 2]), shift);
  // (w & 7) | (w << 5 & 0x700): the two fields in the low bits of each byte.
  const __m512i level =
      _mm512_ternarylogic_epi64(_mm512_and_si512(w, _mm512_set1_epi16(7)), _mm512_slli_epi16(w, 5),
                                _mm512_set1_epi16(0x700), 0xF8);
  return signed_codes(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(levels), level), negative, bias);
}

struct Iq3xxs : iq::Iq3xxs {
  struct Decoder {
    WordGrid<256> grid;
    __m512i entries[2];
    std::uint64_t negative[4];
    Decoder() : grid(words().data()) {}
    static const std::array<std::uint16_t, 256>& words() {
      static const auto w = level_words<256>(gguf_layout::kIq3xxsGrid,
                                             [](int m) { return m == 62 ? 7 : (m - 4) / 8; });
      return w;
    }
    // The 64 index bytes at 2; the eight sign words at 66 + 4 i.
    void block(const std::uint8_t* b) {
      store_signs(block_signs(b), negative);
      const __m512i index = _mm512_loadu_si512(b + 2);
      entries[0] = grid.lookup(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(index)));
      entries[1] = grid.lookup(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(index, 1)));
    }
    __m512i codes(int p) const {
      return iq3_step_codes(entries, p,
                            _mm_setr_epi8(4, 12, 20, 28, 36, 44, 52, 62, 0, 0, 0, 0, 0, 0, 0, 0),
                            negative[p], kBias);
    }
  };
};

struct Iq3s : iq::Iq3s {
  struct Decoder {
    WordGrid<512> grid;
    __m512i entries[2];
    const std::uint8_t* b = nullptr;
    Decoder() : grid(words().data()) {}
    static const std::array<std::uint16_t, 512>& words() {
      static const auto w =
          level_words<512>(gguf_layout::kIq3sGrid, [](int m) { return (m - 1) / 2; });
      return w;
    }
    // The indices' low bytes at 2, their ninth bits at 66 (bit i of the 32-bit word at 66 + 4 h
    // for index 32 h + i); the sign bytes at 74.
    void block(const std::uint8_t* at) {
      b = at;
      const __m512i low = _mm512_loadu_si512(b + 2);
      for (int h = 0; h < 2; ++h) {
        const __m512i index = _mm512_cvtepu8_epi16(h == 0 ? _mm512_castsi512_si256(low)
                                                          : _mm512_extracti64x4_epi64(low, 1));
        const __mmask32 ninth = _cvtu32_mask32(iq::word32(b + 66 + 4 * h));
        entries[h] =
            grid.lookup(_mm512_mask_add_epi16(index, ninth, index, _mm512_set1_epi16(256)));
      }
    }
    __m512i codes(int p) const {
      std::uint64_t negative;
      std::memcpy(&negative, b + 74 + 8 * p, 8);
      return iq3_step_codes(entries, p,
                            _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0),
                            negative, kBias);
    }
  };
};

// IQ1: grid values g in -1, 0, 1 as 8 (g + 1), plus 2 in the groups of 8 weights whose shift
// is +1/8 (bit j of `positive` for bytes 8j .. 8j + 7), 0 where it is -1/8.
__m512i iq1_codes(__m512i g, __mmask8 positive) {
  const __m512i eight = _mm512_slli_epi16(_mm512_add_epi8(g, _mm512_set1_epi8(1)), 3);  // <= 16
  return _mm512_mask_add_epi64(eight, positive, eight, _mm512_set1_epi8(2));
}

struct Iq1s : iq::Iq1s {
  // Two sub-blocks a step, each with four low bytes and a word of four 3-bit high parts, a
  // 3-bit scale and its shift's sign (bit 15 set: -1/8).
  static __m512i codes(const std::uint8_t* b, int p) {
    const std::uint16_t w0 = iq::word16(b + 34 + 4 * p), w1 = iq::word16(b + 36 + 4 * p);
    constexpr std::uint64_t kHigh = 0x0700070007000700ull;
    const std::uint64_t first = byte_fields(iq::word32(b + 2 + 8 * p)) | _pdep_u64(w0, kHigh);
    const std::uint64_t last = byte_fields(iq::word32(b + 6 + 8 * p)) | _pdep_u64(w1, kHigh);
    const unsigned positive = ((w0 & 0x8000) != 0 ? 0u : 0x0Fu) | ((w1 & 0x8000) != 0 ? 0u : 0xF0u);
    return iq1_codes(grid_entries(gguf_layout::kIq1sGrid, first, last),
                     static_cast<__mmask8>(positive));
  }
};

struct Iq1m : iq::Iq1m {
  // A step's eight low bytes, and a nibble per group of 8 weights: its low 3 bits the
  // index's high part, bit 3 set where the shift is -1/8.
  static __m512i codes(const std::uint8_t* b, int p) {
    const std::uint32_t nibbles = iq::word32(b + 32 + 4 * p);
    constexpr std::uint64_t kHigh = 0x0F000F000F000F00ull;  // each nibble's bit 3 cleared first
    const std::uint64_t first =
        byte_fields(iq::word32(b + 8 * p)) | _pdep_u64(nibbles & 0x7777u, kHigh);
    const std::uint64_t last =
        byte_fields(iq::word32(b + 8 * p + 4)) | _pdep_u64((nibbles >> 16) & 0x7777u, kHigh);
    const auto positive = static_cast<__mmask8>(_pext_u32(~nibbles, 0x88888888u));
    return iq1_codes(grid_entries(gguf_layout::kIq1sGrid, first, last), positive);
  }
};

// How a row's blocks are decoded: block(b) once a block, then codes(p) for each 64-weight
// step, from the step's bytes, with the sign masks the format finds for the whole block at
// once (F::block_signs) where it does.
template <class F>
struct BlockDecoder {
  static constexpr bool kBlockSigns = requires(const std::uint8_t* b) { F::block_signs(b); };
  const std::uint8_t* b = nullptr;
  std::uint64_t negative[4];
  void block(const std::uint8_t* at) {
    b = at;
    if constexpr (kBlockSigns) store_signs(F::block_signs(b), negative);
  }
  __m512i codes(int p) const {
    if constexpr (kBlockSigns)
      return F::codes(b, p, negative[p]);
    else
      return F::codes(b, p);
  }
};

template <class F>
struct DecoderOf {
  using type = BlockDecoder<F>;
};
template <class F>
requires requires {
  typename F::Decoder;
}
struct DecoderOf<F> {
  using type = typename F::Decoder;
};

template <int T, class F>
void grid_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  __m512 acc[2][T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  typename DecoderOf<F>::type decoder;
  for (std::int64_t c = 0; c < k; c += 256, b += F::kBytes) {
    prefetch_ahead<F::kBytes>(b);
    __m512 block_scales;
    if constexpr (requires { F::block_scales(b); }) {
      block_scales = F::block_scales(b);  // built in a register
    } else {
      float sc[16];
      F::scales(b, sc);
      // Two 8-float loads: one load over several stores waits for them to reach the cache.
      block_scales = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(sc)),
                                        _mm256_loadu_ps(sc + 8), 1);
    }
    __m512 s[T];
    for (int t = 0; t < T; ++t) {
      s[t] = _mm512_mul_ps(block_scales, _mm512_loadu_ps(tok[t].scale + c / 16));
      // The bias terms of the block's 16 groups, converted and scaled together.
      acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(tok[t].bias + c / 16)),
                                  s[t], acc[1][t]);
    }
    decoder.block(b);
    // Unrolled, into two sums (even and odd steps), as the AVX2 products.
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i u = decoder.codes(p);
      const __m512i groups = four_groups(p);
      for (int t = 0; t < T; ++t) {
        const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                               _mm512_loadu_si512(tok[t].q + c + 64 * p));
        acc[p % 2][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_permutexvar_ps(groups, s[t]),
                                        acc[p % 2][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
}

// A row of an IQ grid format unpacked for the tiles (gguf_unpack_row's codes, scales and zero
// offsets) from the direct products' codes, 64 weights a step. Tiles of 16 and 32 tokens ran
// 5-40% faster so on Zen 5 than through the AVX2 unpackers, but IQ1_S 5-10% slower: its AVX2
// steps, whose shifts are all or nothing, take it.
template <class F>
void iq_unpack_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s,
                   float* o) {
  typename DecoderOf<F>::type decoder;
  for (std::int64_t i = 0; i < blocks; ++i, b += F::kBytes, u += 256, s += 16, o += 16) {
    F::scales(b, s);
    _mm512_storeu_ps(o, _mm512_setzero_ps());
    decoder.block(b);
    for (int p = 0; p < 4; ++p) _mm512_storeu_si512(u + 64 * p, decoder.codes(p));
  }
}

// The formats whose scales and bias terms go by 16-weight group, in lanes of their groups:
// lane g of a block's step s (s = 0..3) holds columns 16 g + 4 s .. + 3, so that a token's four
// VPDPBUSD of a block add into one register of whole group sums, started from the groups' bias
// terms and scaled by the groups' scales, both in their own order: one conversion, one
// multiply and one fused multiply-add a block and token. The activations' values are copied
// into that order once per quantisation on each thread (g16_lane_order).

// T tokens' sums over one block of group lanes added into acc: four VPDPBUSD in two chains,
// started from the groups' bias terms (kBias), then converted and scaled by the groups'
// weight scales times the token's.
template <int T, bool kBias>
inline __attribute__((always_inline)) void g16_tokens(const __m512i (&u)[4], __m512 scales,
                                                      const Token* tok, std::int64_t c,
                                                      __m512* acc) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const std::int8_t* q = tok[t].q + c;
    const __m512i start = kBias ? _mm512_loadu_si512(tok[t].bias + c / 16) : _mm512_setzero_si512();
    const __m512i d0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, u[0], _mm512_loadu_si512(q)),
                                           u[1], _mm512_loadu_si512(q + 64));
    const __m512i d1 = _mm512_dpbusd_epi32(
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[2], _mm512_loadu_si512(q + 128)), u[3],
        _mm512_loadu_si512(q + 192));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)),
                             _mm512_mul_ps(scales, _mm512_loadu_ps(tok[t].scale + c / 16)), acc[t]);
  }
}

// Q2_K and Q3_K in group lanes: group g's two low bits at step s are bits 2 j .. 2 j + 1 of
// word 8 h + 4 p + s of the block's 64 bytes, for its half h = g / 8, run j = (g % 8) / 2 and
// part p = g % 2 (blocks.cpp lays the fields out); Q3_K's third bit is bit 4 h + j of word
// 4 p + s of its 32 mask bytes.
struct G16Words {
  alignas(64) std::int32_t word[4][16];       // the low bits' word per step and lane
  alignas(64) std::int32_t shift[16];         // and their shift per lane
  alignas(64) std::int32_t mask_word[4][16];  // Q3_K's third bit: its word per step and lane
  alignas(64) std::int32_t mask_shift[16];    // and its shift per lane
};
constexpr G16Words kG16Words = [] {
  G16Words w{};
  for (int g = 0; g < 16; ++g) {
    const int h = g / 8, j = (g % 8) / 2, p = g % 2;
    for (int st = 0; st < 4; ++st) {
      w.word[st][g] = 8 * h + 4 * p + st;
      w.mask_word[st][g] = 4 * p + st;
    }
    w.shift[g] = 2 * j;
    w.mask_shift[g] = 4 * h + j;
  }
  return w;
}();

// Step st's two low bits of a block's 64 bytes `qs` in group lanes, not yet masked to them.
inline __m512i two_bit_lanes(__m512i qs, int st) {
  return _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_load_si512(kG16Words.word[st]), qs),
                           _mm512_load_si512(kG16Words.shift));
}

template <int T>
void q2_k_lane_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                   std::int64_t y_stride) {
  const __m512i three = _mm512_set1_epi8(3);
  __m512 acc[T], off[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = off[t] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 84) {
    prefetch_ahead<84>(b);
    const __m512i packed =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m512 sc =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(packed, _mm512_set1_epi32(0x0F))),
                      _mm512_set1_ps(half(b + 80)));
    const __m512 mn = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(packed, 4)),
                                    _mm512_set1_ps(half(b + 82)));
    const __m512i qs = _mm512_loadu_si512(b + 16);
    __m512i u[4];
    for (int st = 0; st < 4; ++st) u[st] = _mm512_and_si512(two_bit_lanes(qs, st), three);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      off[t] = _mm512_fmadd_ps(mn, _mm512_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
    g16_tokens<T, false>(u, sc, tok, c, acc);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = _mm512_reduce_add_ps(acc[t]) - _mm512_reduce_add_ps(off[t]);
}

template <int T>
void q3_k_lane_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                   std::int64_t y_stride) {
  const __m512i three = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 110) {
    prefetch_ahead<110>(b);
    std::uint32_t words[4];
    gguf_layout::q3_k_scales(b + 96, words);
    const __m512i packed =
        _mm512_cvtepu8_epi32(_mm_set_epi32(static_cast<int>(words[3]), static_cast<int>(words[2]),
                                           static_cast<int>(words[1]), static_cast<int>(words[0])));
    const __m512 sc =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(packed, _mm512_set1_epi32(32))),
                      _mm512_set1_ps(half(b + 108)));
    const __m512i qs = _mm512_loadu_si512(b + 32);
    const __m512i mask =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    __m512i u[4];
    for (int st = 0; st < 4; ++st) {
      const __m512i high = _mm512_slli_epi32(
          _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(
                                                 _mm512_load_si512(kG16Words.mask_word[st]), mask),
                                             _mm512_load_si512(kG16Words.mask_shift)),
                           one),
          2);
      // (low bits & three) | high
      u[st] = _mm512_ternarylogic_epi32(two_bit_lanes(qs, st), three, high, 0xEA);
    }
    g16_tokens<T, true>(u, sc, tok, c, acc);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

// IQ4_XS in group lanes: lane g takes word 4 (g / 2) + s of the block's 128 bytes of nibbles
// at step s, its low nibbles for even g and high ones for odd g (sub-block g / 2's first and
// second 16 weights).
template <int T>
void iq4_xs_lane_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                     std::int64_t y_stride) {
  const __m512i table = iq4_level_table(), low4 = _mm512_set1_epi8(0x0F);
  const __m512i half_shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const __m512i word = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 136) {
    prefetch_ahead<136>(b);
    const __m512 scales = iq4_xs_group_scales(b);
    const __m512i q0 = _mm512_loadu_si512(b + 8), q1 = _mm512_loadu_si512(b + 72);
    __m512i u[4];
    for (int st = 0; st < 4; ++st) {
      const __m512i words =
          _mm512_permutex2var_epi32(q0, _mm512_add_epi32(word, _mm512_set1_epi32(st)), q1);
      u[st] =
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi32(words, half_shift), low4));
    }
    g16_tokens<T, true>(u, scales, tok, c, acc);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * y_stride] = _mm512_reduce_add_ps(acc[t]);
}

using RowProduct = void (*)(const std::uint8_t*, std::int64_t, const Token*, float*, std::int64_t);
using Q8RowProduct = void (*)(const std::uint8_t*, std::int64_t, const Q8LaneActivations&, float*,
                              std::int64_t);

// The activations in the order q45_k_row reads them (KLaneActivations): per block and row,
// the values of each step pair's lanes (kKLaneSub), then per lane the scale of its sub-block
// and the scaled sum of its 16 values (the sub-block's first 16 in lanes l % 8 < 4, its
// second 16 in the others, so that a sub-block's two lanes add up to its sum). Made once per
// quantisation on each thread (the stamp names it), so a product's tasks of a few rows share
// one copy.
struct KLaneOrder {
  std::uint64_t stamp = 0;
  std::vector<std::int8_t> values;
  std::vector<float> scale, scaled_sum;
};

KLaneActivations k_lane_order(const GgufQuantizedActivations& a) {
  thread_local KLaneOrder o;
  const std::int64_t k = a.cols, groups = k / 16, rows = a.rows;
  if (o.stamp != a.stamp || o.values.size() != a.values.size() ||
      o.scale.size() != a.scale.size()) {
    o.stamp = a.stamp;
    o.values.resize(a.values.size());
    o.scale.resize(a.scale.size());
    o.scaled_sum.resize(a.scaled_sum.size());
    for (std::int64_t blk = 0; blk < k / 256; ++blk) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int8_t* from = a.values.data() + i * k + 256 * blk;
        std::int8_t* to = o.values.data() + (blk * rows + i) * 256;
        const std::int64_t g = i * groups + 16 * blk;
        const std::size_t lanes = static_cast<std::size_t>((blk * rows + i) * 16);
        for (int l = 0; l < 16; ++l) {
          const int sub = kKLaneSub[l], half = (l % 8) / 4;
          for (int s = 0; s < 4; ++s)
            std::memcpy(to + 64 * s + 4 * l, from + 32 * sub + 4 * (2 * s + half), 4);
          o.scale[lanes + l] = a.scale[static_cast<std::size_t>(g + 2 * sub)];
          o.scaled_sum[lanes + l] = a.scaled_sum[static_cast<std::size_t>(g + 2 * sub + half)];
        }
      }
    }
  }
  return {o.values.data(), o.scale.data(), o.scaled_sum.data(), rows};
}

// The activations in the order block_lane_row reads them (Q8LaneActivations), made once per
// quantisation on each thread, as KLaneOrder. Lanes of blocks past a row's end (in its last
// group) get zero values, scales and bias terms.
struct Q8LaneOrder {
  std::uint64_t stamp = 0;
  std::int64_t cols = -1, rows = -1;
  std::vector<std::int8_t> values;
  std::vector<float> scale;
  std::vector<std::int32_t> bias;
};

Q8LaneActivations q8_lane_order(const GgufQuantizedActivations& a) {
  thread_local Q8LaneOrder o;
  const std::int64_t k = a.cols, groups16 = k / 16, rows = a.rows;
  const std::int64_t blocks = k / 32, lane_groups = (blocks + kQ8GroupBlocks - 1) / kQ8GroupBlocks;
  if (o.stamp != a.stamp || o.cols != k || o.rows != rows) {
    o.stamp = a.stamp;
    o.cols = k;
    o.rows = rows;
    o.values.resize(static_cast<std::size_t>(lane_groups * rows * 512));
    o.scale.assign(static_cast<std::size_t>(lane_groups * rows * 16), 0.0f);
    o.bias.assign(static_cast<std::size_t>(lane_groups * rows * 16), 0);
    for (std::int64_t g = 0; g < lane_groups; ++g) {
      const std::int64_t first = g * kQ8GroupBlocks,
                         count = std::min(kQ8GroupBlocks, blocks - first);
      for (std::int64_t i = 0; i < rows; ++i) {
        const auto* from =
            reinterpret_cast<const std::uint8_t*>(a.values.data() + i * k + 32 * first);
        __m512i words[8];
        if (count == kQ8GroupBlocks)
          lane_words<32, true>(from, count, words);
        else
          lane_words<32, false>(from, count, words);
        std::int8_t* to = o.values.data() + (g * rows + i) * 512;
        for (int s = 0; s < 8; ++s) _mm512_storeu_si512(to + 64 * s, words[s]);
        const std::size_t lanes = static_cast<std::size_t>((g * rows + i) * 16);
        for (int l = 0; l < 16; ++l) {
          const std::int64_t blk = first + kQ8LaneBlock[l];
          if (blk >= blocks) continue;
          const auto g16 = static_cast<std::size_t>(i * groups16 + 2 * blk);
          o.scale[lanes + l] = a.scale[g16];
          o.bias[lanes + l] = a.group_bias[g16] + a.group_bias[g16 + 1];
        }
      }
    }
  }
  return {o.values.data(), o.scale.data(), o.bias.data(), rows};
}

template <int T>
RowProduct group_lane_product(DType t) {
  switch (t) {
    case DType::Q2_K:
      return q2_k_lane_row<T>;
    case DType::Q3_K:
      return q3_k_lane_row<T>;
    case DType::IQ4_XS:
      return iq4_xs_lane_row<T>;
    default:
      return nullptr;
  }
}
using Pick = RowProduct (*)(DType);
template <std::size_t... I>
constexpr std::array<Pick, sizeof...(I)> group_lane_picks(std::index_sequence<I...>) {
  return {group_lane_product<static_cast<int>(I) + 1>...};
}

template <int T>
Q8RowProduct block_lane_product(DType t) {
  switch (t) {
    case DType::Q8_0:
      return block_lane_row<T, Q8Lanes>;
    case DType::Q4_0:
      return block_lane_row<T, NibbleLanes<kQ4_0>>;
    case DType::IQ4_NL:
      return block_lane_row<T, NibbleLanes<kIq4Nl>>;
    default:
      return nullptr;
  }
}
using Q8Pick = Q8RowProduct (*)(DType);
template <std::size_t... I>
constexpr std::array<Q8Pick, sizeof...(I)> block_lane_picks(std::index_sequence<I...>) {
  return {block_lane_product<static_cast<int>(I) + 1>...};
}

// The activations' values in 16-weight-group lanes (see g16_tokens), made once per
// quantisation on each thread: per token and 256 columns, step s's 64 bytes hold in lane g
// columns 16 g + 4 s .. + 3.
struct G16LaneOrder {
  std::uint64_t stamp = 0;
  std::vector<std::int8_t> values;
};

const std::int8_t* g16_lane_order(const GgufQuantizedActivations& a) {
  thread_local G16LaneOrder o;
  if (o.stamp != a.stamp || o.values.size() != a.values.size()) {
    o.stamp = a.stamp;
    o.values.resize(a.values.size());
    // Lane g of step s: word 4 (g % 4) + s of the 64 bytes (four groups) that hold group g,
    // lanes 0..7 from the block's first 128 bytes and 8..15 from its last.
    const __m512i within =
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    for (std::size_t at = 0; at < a.values.size(); at += 256) {
      const std::int8_t* from = a.values.data() + at;
      const __m512i z0 = _mm512_loadu_si512(from), z1 = _mm512_loadu_si512(from + 64),
                    z2 = _mm512_loadu_si512(from + 128), z3 = _mm512_loadu_si512(from + 192);
      for (int st = 0; st < 4; ++st) {
        const __m512i idx = _mm512_add_epi32(within, _mm512_set1_epi32(st));
        _mm512_storeu_si512(o.values.data() + at + 64 * st,
                            _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(z0, idx, z1),
                                                    _mm512_permutex2var_epi32(z2, idx, z3)));
      }
    }
  }
  return o.values.data();
}

template <int T>
RowProduct row_product(DType t) {
  switch (t) {
    case DType::Q8_0:
      return q8_0_row<T>;
    case DType::Q4_0:
      return nibble_row<T, kQ4_0>;
    case DType::Q4_1:
      return nibble_row<T, kQ4_1>;
    case DType::Q5_0:
      return nibble_row<T, kQ5_0>;
    case DType::Q5_1:
      return nibble_row<T, kQ5_1>;
    case DType::IQ4_NL:
      return nibble_row<T, kIq4Nl>;
    case DType::IQ2_XXS:
      return grid_row<T, Iq2xxs>;
    case DType::IQ2_XS:
      return grid_row<T, Iq2xs>;
    case DType::IQ2_S:
      return grid_row<T, Iq2s>;
    case DType::IQ3_XXS:
      return grid_row<T, Iq3xxs>;
    case DType::IQ3_S:
      return grid_row<T, Iq3s>;
    case DType::IQ1_S:
      return grid_row<T, Iq1s>;
    case DType::IQ1_M:
      return grid_row<T, Iq1m>;
    case DType::Q6_K:
      return q6_k_row<T>;
    default:
      return nullptr;
  }
}

using KRowProduct = void (*)(const std::uint8_t*, std::int64_t, const KLaneActivations&, float*,
                             std::int64_t);

template <std::size_t... I>
constexpr std::array<std::array<KRowProduct, 2>, sizeof...(I)> k_row_products(
    std::index_sequence<I...>) {
  return {std::array<KRowProduct, 2>{q45_k_row<static_cast<int>(I) + 1, false>,
                                     q45_k_row<static_cast<int>(I) + 1, true>}...};
}

}  // namespace

bool gguf_block_dot_avx512(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                           std::int64_t row_begin, std::int64_t row_end, float* y,
                           std::int64_t y_stride) {
  if (m < 1 || m > gguf_direct_max_tokens(w.dtype, CpuVariant::Avx512)) return false;
  const std::size_t row_bytes = dtype_bytes(w.dtype, w.cols);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  if (w.dtype == DType::Q4_K || w.dtype == DType::Q5_K) {
    static constexpr auto kPick =
        k_row_products(std::make_index_sequence<static_cast<std::size_t>(kGgufLaneMaxTokens)>());
    const KRowProduct row = kPick[static_cast<std::size_t>(m - 1)][w.dtype == DType::Q5_K];
    const KLaneActivations ordered = k_lane_order(a);
    for (std::int64_t r = row_begin; r < row_end; ++r)
      row(base + r * row_bytes, w.cols, ordered, y + r, y_stride);
    return true;
  }
  // One token of Q8_0 keeps q8_0_row: from memory it streamed 4-7% faster than the lane
  // product (scratch harness, one thread, Zen 5), though slower in cache; Q4_0's and
  // IQ4_NL's lane products were faster at one token too (107 and 97 GFLOP/s against 85 and
  // 82 from memory).
  if ((w.dtype == DType::Q8_0 && m >= 2) || w.dtype == DType::Q4_0 || w.dtype == DType::IQ4_NL) {
    static constexpr auto kPick = block_lane_picks(
        std::make_index_sequence<static_cast<std::size_t>(kGgufQ8_0LaneMaxTokens)>());
    const Q8RowProduct row = kPick[static_cast<std::size_t>(m - 1)](w.dtype);
    const Q8LaneActivations ordered = q8_lane_order(a);
    for (std::int64_t r = row_begin; r < row_end; ++r)
      row(base + r * row_bytes, w.cols, ordered, y + r, y_stride);
    return true;
  }
  if (w.dtype == DType::IQ4_XS || w.dtype == DType::Q2_K || w.dtype == DType::Q3_K) {
    static constexpr auto kPick =
        group_lane_picks(std::make_index_sequence<static_cast<std::size_t>(kGgufLaneMaxTokens)>());
    const RowProduct row = kPick[static_cast<std::size_t>(m - 1)](w.dtype);
    const std::int8_t* values = g16_lane_order(a);
    Token tok[kGgufLaneMaxTokens];
    tokens_of(a, m, tok);
    for (std::int64_t t = 0; t < m; ++t) tok[t].q = values + t * w.cols;
    for (std::int64_t r = row_begin; r < row_end; ++r)
      row(base + r * row_bytes, w.cols, tok, y + r, y_stride);
    return true;
  }
  static constexpr Pick kPick[] = {row_product<1>, row_product<2>, row_product<3>, row_product<4>,
                                   row_product<5>};
  static_assert(std::size(kPick) == kGgufDirectMaxTokens);
  const RowProduct row = kPick[m - 1](w.dtype);
  if (row == nullptr) return false;
  Token tok[kGgufDirectMaxTokens];
  tokens_of(a, m, tok);
  for (std::int64_t r = row_begin; r < row_end; ++r)
    row(base + r * row_bytes, w.cols, tok, y + r, y_stride);
  return true;
}

bool gguf_unpack_row_avx512(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out,
                            int slot) {
  using Unpack = void (*)(const std::uint8_t*, std::int64_t, std::uint8_t*, float*, float*);
  Unpack unpack = nullptr;
  switch (w.dtype) {
    case DType::IQ2_XXS:
      unpack = iq_unpack_row<Iq2xxs>;
      break;
    case DType::IQ2_XS:
      unpack = iq_unpack_row<Iq2xs>;
      break;
    case DType::IQ2_S:
      unpack = iq_unpack_row<Iq2s>;
      break;
    case DType::IQ3_XXS:
      unpack = iq_unpack_row<Iq3xxs>;
      break;
    case DType::IQ3_S:
      unpack = iq_unpack_row<Iq3s>;
      break;
    case DType::IQ1_M:
      unpack = iq_unpack_row<Iq1m>;
      break;
    default:
      return false;
  }
  const auto* b = static_cast<const std::uint8_t*>(w.data) + dtype_bytes(w.dtype, r * w.cols);
  unpack(b, w.cols / 256, out.codes.data() + slot * w.cols, out.scale.data() + slot * w.cols / 16,
         out.offset.data() + slot * w.cols / 16);
  return true;
}

}  // namespace tandem::kernels
