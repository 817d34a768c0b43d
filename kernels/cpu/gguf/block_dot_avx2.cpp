// The AVX2 products of kernels/cpu/gguf/matmul.h that read the blocks directly, for one or
// two tokens. AVX2 has no VNNI: VPMADDUBSW multiplies unsigned codes by the int8 activations
// in pairs and VPMADDWD adds the pairs to 32 bits. A pair saturates above 32767, so the
// codes must stay below 129: Q8_0's and Q6_K's signed weights go in as their magnitudes,
// their signs moved onto the activations (VPSIGNB), which gives the same integer sums as
// the codes less their bias. Q3_K's codes are small, but take their bias off the same way.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <cstring>
#include <iterator>

#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_groups.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/gguf/simd_pieces.h"

namespace tandem::kernels {
namespace {

using gguf_simd::half;

__m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

struct Token {
  const std::int8_t* q;
  const float* scale;
  const float* scaled_sum;
};

// 32 unsigned codes times 32 activations: eight 32-bit sums, lanes 0..3 the first 16.
__m256i dot_unsigned(__m256i u, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}
// The same for 32 signed weights (magnitudes at most 128).
__m256i dot_signed(__m256i w, __m256i q) {
  return dot_unsigned(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

float reduce(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// A 256-weight block's sixteen 16-weight group scales times each token's activation scales,
// groups 8h .. 8h + 7 in scale[h][t]; the formats' steps of 32 weights take two groups each.
template <int T>
struct GroupScales {
  __m256 scale[2][T];
  // `weights`: the sixteen groups' weight scales, 8 a register; `c` the block's first column.
  GroupScales(const __m256* weights, const Token* tok, std::int64_t c) {
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t)
        scale[h][t] = _mm256_mul_ps(weights[h], _mm256_loadu_ps(tok[t].scale + c / 16 + 8 * h));
  }
  // Lanes 0..3 group 2 step's scale, 4..7 group 2 step + 1's (step 0 .. 7 of the block).
  __m256 step(int t, int step) const {
    const int j = 2 * (step % 4);
    return _mm256_permutevar8x32_ps(scale[step / 4][t],
                                    _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1));
  }
};

// Sixteen bytes' values as floats times d, 8 a register.
inline void widen_scales(__m128i bytes, bool is_signed, float d, __m256* out) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m128i high = _mm_srli_si128(bytes, 8);
  out[0] = _mm256_mul_ps(
      _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes)),
      dv);
  out[1] = _mm256_mul_ps(
      _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(high) : _mm256_cvtepu8_epi32(high)), dv);
}

template <int T>
void q8_0_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 32, b += 34) {
    const __m256i w = load32(b + 2);
    const float d = half(b);
    for (int t = 0; t < T; ++t) {
      const __m256i dp = dot_signed(w, load32(tok[t].q + c));
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), _mm256_set1_ps(d * tok[t].scale[c / 16]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * y_stride] = reduce(acc[t]);
}

// The 32-weight formats with nibbles (gguf_layout::NibbleFormat). The formats with a bias go in
// as signed weights (the codes less the bias: Q4_0 -8..7, Q5_0 -16..15; IQ4_NL's levels as
// they are), those with a minimum as their codes, the minimum times the activations' scaled
// sums added apart.
using gguf_layout::kIq4Nl;
using gguf_layout::kQ4_0;
using gguf_layout::kQ4_1;
using gguf_layout::kQ5_0;
using gguf_layout::kQ5_1;
using gguf_layout::NibbleFormat;

// The 32 codes of 16 nibble bytes: the low nibbles, then the high.
__m256i nibble_codes(const std::uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

using gguf_simd::byte_mask;

// 16 where bit j of `bits` is set, byte j of 32.
__m256i fifth_bits(std::uint32_t bits) {
  return _mm256_and_si256(byte_mask(bits), _mm256_set1_epi8(16));
}

// IQ4's 16 levels in both 128-bit lanes.
__m256i iq4_levels() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf_layout::kIq4Levels)));
}

template <int T, NibbleFormat F>
void nibble_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                std::int64_t y_stride) {
  const __m256i levels = iq4_levels();
  __m256 acc[T];
  float off[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    off[t] = 0.0f;
  }
  for (std::int64_t c = 0; c < k; c += 32, b += F.bytes) {
    __m256i u = nibble_codes(b + F.codes);
    if constexpr (F.fifth >= 0) {
      std::uint32_t bits;
      std::memcpy(&bits, b + F.fifth, 4);
      u = _mm256_or_si256(u, fifth_bits(bits));
    }
    if constexpr (F.levels) u = _mm256_shuffle_epi8(levels, u);
    if constexpr (F.bias != 0) u = _mm256_sub_epi8(u, _mm256_set1_epi8(F.bias));
    const float d = half(b), m = F.minimum ? half(b + 2) : 0.0f;
    for (int t = 0; t < T; ++t) {
      const __m256i q = load32(tok[t].q + c);
      const __m256i dp = F.minimum ? dot_unsigned(u, q) : dot_signed(u, q);
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), _mm256_set1_ps(d * tok[t].scale[c / 16]), acc[t]);
      if constexpr (F.minimum)
        off[t] += m * (tok[t].scaled_sum[c / 16] + tok[t].scaled_sum[c / 16 + 1]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * y_stride] = reduce(acc[t]) + off[t];
}

// IQ4_XS: 256 weights a block of eight IQ4_NL-like sub-blocks, each with a 6-bit scale less
// 32 (low 4 bits in a nibble of bytes 4..7, high 2 in the word at 2).
template <int T>
void iq4_xs_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
                std::int64_t y_stride) {
  const __m256i levels = iq4_levels();
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 136) {
    const float d = half(b);
    std::uint16_t high;
    std::memcpy(&high, b + 2, 2);
    for (int sub = 0; sub < 8; ++sub) {
      const int low = (b[4 + sub / 2] >> (4 * (sub % 2))) & 0x0F;
      const float dl = d * static_cast<float>((low | (((high >> (2 * sub)) & 3) << 4)) - 32);
      const __m256i w = _mm256_shuffle_epi8(levels, nibble_codes(b + 8 + 16 * sub));
      for (int t = 0; t < T; ++t) {
        const std::int64_t at = c + 32 * sub;
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_signed(w, load32(tok[t].q + at))),
                                 _mm256_set1_ps(dl * tok[t].scale[at / 16]), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) y[t * y_stride] = reduce(acc[t]);
}

using gguf_simd::k_scales;
using gguf_simd::KScales;

template <int T, bool five>
void q45_k_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
               std::int64_t y_stride) {
  constexpr std::int64_t kBytes = five ? 176 : 144;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2][T], off[T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = off[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += kBytes) {
    const KScales ks = k_scales(b + 4);
    const float d = half(b), dmin = half(b + 2);
    // The minimums, each for its two groups, times the groups' scaled activation sums.
    const std::uint64_t mn64 = ks.mins;
    const __m128i m2 = _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(mn64)),
                                         _mm_cvtsi64_si128(static_cast<long long>(mn64)));
    const __m256 dm = _mm256_set1_ps(dmin);
    const __m256 mlo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m2)), dm);
    const __m256 mhi =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(m2, 8))), dm);
    for (int t = 0; t < T; ++t) {
      off[t] = _mm256_fmadd_ps(mlo, _mm256_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
      off[t] = _mm256_fmadd_ps(mhi, _mm256_loadu_ps(tok[t].scaled_sum + c / 16 + 8), off[t]);
    }
    // Sub-block j's scale times its activations' scale in lane j (the activations' scales
    // come per 16 weights, equal in pairs: the even ones).
    const std::uint64_t sc64 = ks.scales;
    const __m256 sub_scales = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc64)))),
        _mm256_set1_ps(d));
    __m256 s[T];
    for (int t = 0; t < T; ++t) {
      const float* as = tok[t].scale + c / 16;
      // Scales 0, 2, 8, 10 | 4, 6, 12, 14, then their middle pairs swapped.
      const __m256 evens = _mm256_shuffle_ps(_mm256_loadu_ps(as), _mm256_loadu_ps(as + 8), 0x88);
      s[t] = _mm256_mul_ps(sub_scales,
                           _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(evens), 0xD8)));
    }
    const std::uint8_t* qs = b + (five ? 48 : 16);
    const __m256i qh = five ? load32(b + 16) : _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load32(qs + 32 * p);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if (five) {
        gguf_simd::q5_k_fifth_bits(qh, p, lo, hi);
      }
      for (int t = 0; t < T; ++t) {
        const std::int8_t* a = tok[t].q + c + 64 * p;
        acc[0][t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_unsigned(lo, load32(a))),
                            _mm256_permutevar8x32_ps(s[t], _mm256_set1_epi32(2 * p)), acc[0][t]);
        acc[1][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_unsigned(hi, load32(a + 32))),
                                    _mm256_permutevar8x32_ps(s[t], _mm256_set1_epi32(2 * p + 1)),
                                    acc[1][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = reduce(_mm256_add_ps(acc[0][t], acc[1][t])) - reduce(off[t]);
}

// Q6_K: the 6-bit codes go in unsigned (0..63, so VPMADDUBSW's pairs cannot saturate), and
// the bias of 32 comes off as 32 times each group's weight scale times its scaled activation
// sum, summed apart: no sign moves or subtraction per step.
template <int T>
void q6_k_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
  __m256 acc[2][T], off[T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = off[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 210) {
    __m256 weight_scales[2];
    widen_scales(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)), true, half(b + 208),
                 weight_scales);
    const GroupScales<T> scales(weight_scales, tok, c);
    for (int t = 0; t < T; ++t) {
      off[t] =
          _mm256_fmadd_ps(weight_scales[0], _mm256_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
      off[t] = _mm256_fmadd_ps(weight_scales[1], _mm256_loadu_ps(tok[t].scaled_sum + c / 16 + 8),
                               off[t]);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32);
      const __m256i qh = load32(b + 128 + 32 * h);
      // Codes of weights 0..31, 32..63, 64..95, 96..127 of the half.
      const __m256i u[4] = {_mm256_or_si256(_mm256_and_si256(l0, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)),
                            _mm256_or_si256(_mm256_and_si256(l1, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                            _mm256_and_si256(qh, top2)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2))};
      for (int j = 0; j < 4; ++j) {
        const int step = 4 * h + j;
        for (int t = 0; t < T; ++t) {
          const __m256i dp = dot_unsigned(u[j], load32(tok[t].q + c + 32 * step));
          acc[j % 2][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), scales.step(t, step), acc[j % 2][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = reduce(_mm256_add_ps(acc[0][t], acc[1][t])) - 32.0f * reduce(off[t]);
}

// Q2_K: 256 weights a block in two halves of 128, each 32 bytes whose bits 2j, 2j + 1 hold
// weights 32j .. 32j + 31 of the half; a 4-bit scale (low nibble) and minimum (high nibble)
// per 16 weights: weight = d scale u - dmin min, the minimums' part summed apart.
template <int T>
void q2_k_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  const __m256i low2 = _mm256_set1_epi8(3);
  __m256 acc[2][T], off[T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = off[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 84) {
    const float d = half(b + 80);
    const __m128i mn =
        _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 4),
                      _mm_set1_epi8(0x0F));
    const __m256 dm = _mm256_set1_ps(half(b + 82));
    const __m256 mlo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)), dm);
    const __m256 mhi =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mn, 8))), dm);
    for (int t = 0; t < T; ++t) {
      off[t] = _mm256_fmadd_ps(mlo, _mm256_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
      off[t] = _mm256_fmadd_ps(mhi, _mm256_loadu_ps(tok[t].scaled_sum + c / 16 + 8), off[t]);
    }
    __m256 weight_scales[2];
    widen_scales(
        _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), _mm_set1_epi8(0x0F)),
        false, d, weight_scales);
    const GroupScales<T> scales(weight_scales, tok, c);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(b + 16 + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), low2);
        const int step = 4 * h + j;
        for (int t = 0; t < T; ++t) {
          const __m256i dp = dot_unsigned(u, load32(tok[t].q + c + 32 * step));
          acc[j % 2][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), scales.step(t, step), acc[j % 2][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = reduce(_mm256_add_ps(acc[0][t], acc[1][t])) - reduce(off[t]);
}

// Q3_K: Q2_K's 2-bit fields plus a third bit each from 32 bytes (bit i of byte j for weight
// 32i + j of the block), codes 0 .. 7 less 4, a signed 6-bit scale per 16 weights. The codes
// go in unsigned and the bias of 4 comes off apart, as Q6_K's.
template <int T>
void q3_k_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  const __m256i low2 = _mm256_set1_epi8(3);
  __m256 acc[2][T], off[T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = off[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += 110) {
    const float d = half(b + 108);
    std::uint32_t words[4];
    gguf_layout::q3_k_scales(b + 96, words);
    __m256 weight_scales[2];  // the 6-bit scales less 32
    // From registers: a 16-byte load of the four words just stored waits for them to land.
    const __m128i packed = _mm_setr_epi32(static_cast<int>(words[0]), static_cast<int>(words[1]),
                                          static_cast<int>(words[2]), static_cast<int>(words[3]));
    widen_scales(_mm_sub_epi8(packed, _mm_set1_epi8(32)), true, d, weight_scales);
    const GroupScales<T> scales(weight_scales, tok, c);
    for (int t = 0; t < T; ++t) {
      off[t] =
          _mm256_fmadd_ps(weight_scales[0], _mm256_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
      off[t] = _mm256_fmadd_ps(weight_scales[1], _mm256_loadu_ps(tok[t].scaled_sum + c / 16 + 8),
                               off[t]);
    }
    const __m256i hmask = load32(b);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(b + 32 + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const int step = 4 * h + j;
        const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), low2),
                                          gguf_simd::move_bit(hmask, step, 2));
        for (int t = 0; t < T; ++t) {
          const __m256i dp = dot_unsigned(u, load32(tok[t].q + c + 32 * step));
          acc[j % 2][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), scales.step(t, step), acc[j % 2][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    y[t * y_stride] = reduce(_mm256_add_ps(acc[0][t], acc[1][t])) - 4.0f * reduce(off[t]);
}

// The IQ1 ... IQ3 formats (kernels/cpu/gguf/iq_groups.h), 32 weights a step. IQ2 and IQ3:
// the grid magnitudes, their signs put on the activations. IQ1: the codes 8 (g + 1), plus 2
// in the groups shifted by +1/8, unsigned (0 .. 18), whose bias of 9 comes off as the groups'
// weight scales times their scaled activation sums, summed apart (as Q6_K's).
template <int T, class F>
void grid_row(const std::uint8_t* b, std::int64_t k, const Token* tok, float* y,
              std::int64_t y_stride) {
  __m256 acc[2][T], off[T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = off[t] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k; c += 256, b += F::kBytes) {
    float sc[16];
    F::scales(b, sc);
    const __m256 weight_scales[2] = {_mm256_loadu_ps(sc), _mm256_loadu_ps(sc + 8)};
    const GroupScales<T> scales(weight_scales, tok, c);
    if constexpr (F::kIq1) {
      for (int t = 0; t < T; ++t) {
        off[t] =
            _mm256_fmadd_ps(weight_scales[0], _mm256_loadu_ps(tok[t].scaled_sum + c / 16), off[t]);
        off[t] = _mm256_fmadd_ps(weight_scales[1], _mm256_loadu_ps(tok[t].scaled_sum + c / 16 + 8),
                                 off[t]);
      }
    }
    // Unrolled, so each step's fields and scales sit at fixed places; even and odd steps
    // into their own sums, as the K-quants.
#pragma GCC unroll 8
    for (int step = 0; step < 8; ++step) {
      __m256i mask;
      const __m256i m = gguf_iq::step_magnitudes<F>(b, step, &mask);
      __m256i u, signs = _mm256_setzero_si256();
      if constexpr (F::kIq1) {  // g + 1 is at most 2: eight times it stays within its byte
        u = _mm256_add_epi8(_mm256_slli_epi16(_mm256_add_epi8(m, _mm256_set1_epi8(1)), 3),
                            _mm256_and_si256(mask, _mm256_set1_epi8(2)));
      } else {
        u = m;
        signs = _mm256_or_si256(mask, _mm256_set1_epi8(1));
      }
      for (int t = 0; t < T; ++t) {
        __m256i q = load32(tok[t].q + c + 32 * step);
        if constexpr (!F::kIq1) q = _mm256_sign_epi8(q, signs);
        acc[step % 2][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_unsigned(u, q)),
                                           scales.step(t, step), acc[step % 2][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    y[t * y_stride] = reduce(_mm256_add_ps(acc[0][t], acc[1][t])) -
                      static_cast<float>(F::kBias) * (F::kIq1 ? reduce(off[t]) : 0.0f);
  }
}

using RowProduct = void (*)(const std::uint8_t*, std::int64_t, const Token*, float*, std::int64_t);

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
    case DType::IQ4_XS:
      return iq4_xs_row<T>;
    case DType::IQ2_XXS:
      return grid_row<T, gguf_iq::Iq2xxs>;
    case DType::IQ2_XS:
      return grid_row<T, gguf_iq::Iq2xs>;
    case DType::IQ2_S:
      return grid_row<T, gguf_iq::Iq2s>;
    case DType::IQ3_XXS:
      return grid_row<T, gguf_iq::Iq3xxs>;
    case DType::IQ3_S:
      return grid_row<T, gguf_iq::Iq3s>;
    case DType::IQ1_S:
      return grid_row<T, gguf_iq::Iq1s>;
    case DType::IQ1_M:
      return grid_row<T, gguf_iq::Iq1m>;
    case DType::Q2_K:
      return q2_k_row<T>;
    case DType::Q3_K:
      return q3_k_row<T>;
    case DType::Q4_K:
      return q45_k_row<T, false>;
    case DType::Q5_K:
      return q45_k_row<T, true>;
    case DType::Q6_K:
      return q6_k_row<T>;
    default:
      return nullptr;
  }
}

}  // namespace

bool gguf_block_dot_avx2(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                         std::int64_t row_begin, std::int64_t row_end, float* y,
                         std::int64_t y_stride) {
  if (m < 1 || m > kGgufDirectMaxTokens) return false;
  using Pick = RowProduct (*)(DType);
  static constexpr Pick kPick[] = {row_product<1>, row_product<2>, row_product<3>, row_product<4>,
                                   row_product<5>};
  static_assert(std::size(kPick) == kGgufDirectMaxTokens);
  const RowProduct row = kPick[m - 1](w.dtype);
  if (row == nullptr) return false;
  const std::int64_t k = a.cols, groups = k / 16;
  Token tok[kGgufDirectMaxTokens];
  for (std::int64_t t = 0; t < m; ++t)
    tok[t] = {a.values.data() + t * k, a.scale.data() + t * groups,
              a.scaled_sum.data() + t * groups};
  const std::size_t row_bytes = dtype_bytes(w.dtype, w.cols);
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  for (std::int64_t r = row_begin; r < row_end; ++r)
    row(base + r * row_bytes, w.cols, tok, y + r, y_stride);
  return true;
}

}  // namespace tandem::kernels
