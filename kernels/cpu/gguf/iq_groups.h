// The IQ1 ... IQ3 block formats read by groups of 8 weights, for the SIMD code that builds their
// codes in registers (the direct products of gguf/block_dot_avx2.cpp and _avx512.cpp, the AVX2
// unpacker of gguf/matmul_avx2.cpp): group j (weights
// 8j .. 8j + 7 of a 256-weight block) has 8 magnitudes from its format's grid (IQ3: two
// entries of 4) and 8 sign bits (bit i: weight i negative); IQ1's grid values are -1, 0 or 1
// and its bit says the group's shift is +1/8 (set) or -1/8. The 16 scales, one per 16 weights,
// are the unpackers' (kernels/cpu/gguf/matmul.cpp). Included only by files compiled for AVX2
// or more: internal linkage, so each keeps its own copy (as gguf/simd_pieces.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_grids.h"
#include "kernels/cpu/gguf/simd_pieces.h"

namespace tandem::kernels::gguf_iq {
namespace {

namespace layout = gguf_layout;

struct Group {
  std::uint64_t magnitudes;  // byte i: weight i's (IQ1: its grid value, -1 .. 1)
  unsigned bits;             // signs, or IQ1's shift
};

inline std::uint32_t word32(const std::uint8_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline std::uint16_t word16(const std::uint8_t* p) {
  std::uint16_t w;
  std::memcpy(&w, p, 2);
  return w;
}
inline std::uint64_t entry8(const std::uint8_t* p) {
  std::uint64_t e;
  std::memcpy(&e, p, 8);
  return e;
}
inline std::uint64_t entries4(const std::uint8_t* low, const std::uint8_t* high) {
  return word32(low) | static_cast<std::uint64_t>(word32(high)) << 32;
}

// even_signs of every 7-bit field, looked up.
constexpr auto kEvenSigns = [] {
  struct Table {
    std::uint8_t v[128];
  } t{};
  for (unsigned i = 0; i < 128; ++i) t.v[i] = layout::even_signs(i);
  return t;
}();

// The sign bytes of a whole block of the formats with 7-bit sign fields (IQ2_XXS, IQ2_XS,
// IQ3_XXS), in vector registers for the block at once. The AVX-512 products (block_dot_avx512)
// and the AVX2 unpacker take them so: the unpacker's tiles of 16 and 32 tokens ran 3-17% faster
// on Zen 5 than with the fields looked up one by one in kEvenSigns. The AVX2 one-token
// products, whose vector registers and ports the dot products fill, ran 5-20% slower so and
// keep the table. Each byte of `x` holds a field in its low 7 bits; the bit that gives it an
// even count of ones (layout::even_signs) is found by three folds and put in bit 7.
inline __m256i even_sign_bytes(__m256i x) {
  __m256i parity = _mm256_xor_si256(x, _mm256_srli_epi32(x, 4));
  parity = _mm256_xor_si256(parity, _mm256_srli_epi32(parity, 2));
  parity = _mm256_xor_si256(parity, _mm256_srli_epi32(parity, 1));  // bit 0: the byte's parity
  return _mm256_or_si256(
      x, _mm256_and_si256(_mm256_slli_epi32(parity, 7), _mm256_set1_epi8(static_cast<char>(0x80))));
}

// IQ2_XXS's and IQ3_XXS's eight sign words (sub-block i's in lane i: four 7-bit fields in bits
// 0..27, the scale above) to the block's 32 sign bytes, sub-block i's in lane i.
inline __m256i xxs_sign_bytes(__m256i words) {
  const __m256i field = _mm256_set1_epi32(0x7F);
  __m256i x = _mm256_and_si256(words, field);
  for (int j = 1; j < 4; ++j) {
    x = _mm256_or_si256(x, _mm256_and_si256(_mm256_sll_epi32(words, _mm_cvtsi32_si128(j)),
                                            _mm256_slli_epi32(field, 8 * j)));
  }
  return even_sign_bytes(x);
}

// Eight values s (as 32-bit integers) to floats (a + s) * k, stored at `out`. The IQ scales
// are written so, two 8-float stores a block, which the products' 8-float loads take straight
// from the stores (scalar stores, or GCC's vectorising of scalar loops through byte stores,
// leave wider loads waiting for them to reach the cache).
inline void affine8(__m256i s, float a, float k, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(a)),
                                      _mm256_set1_ps(k)));
}

// IQ2_XS's and IQ2_S's sixteen 4-bit scales, nibble g of 8 bytes: iq2_scale's d (0.5 + s) / 4,
// as (0.5 + s) (d / 4), the same bits.
inline void iq2_nibble_scales(const std::uint8_t* scales, float d, float* sc) {
  const __m128i s =
      gguf_simd::nibbles_in_order(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
  affine8(_mm256_cvtepu8_epi32(s), 0.5f, d * 0.25f, sc);
  affine8(_mm256_cvtepu8_epi32(_mm_srli_si128(s, 8)), 0.5f, d * 0.25f, sc + 8);
}

struct Iq2xxs {
  static constexpr int kBytes = 66, kBias = layout::kIq2Bias;
  static constexpr bool kIq1 = false;
  // iq2_scale's d (0.5 + s) / 4 as (0.5 + s) (d / 4), the same bits: each sub-block's 4-bit
  // scale is the top of the second word of its 8 bytes, lanes 1, 3, 5, 7 of a 32-byte load.
  static void scales(const std::uint8_t* b, float* sc) {
    const float quarter_d = gguf_simd::half(b) * 0.25f;
    for (int h = 0; h < 2; ++h) {
      const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2 + 32 * h));
      affine8(_mm256_shuffle_epi32(_mm256_srli_epi32(words, 28), 0xF5), 0.5f, quarter_d,
              sc + 8 * h);
    }
  }
  static Group group(const std::uint8_t* b, int j) {
    const std::uint8_t* q = b + 2 + 8 * (j / 4);
    return {entry8(layout::kIq2xxsGrid[q[j % 4]]),
            kEvenSigns.v[(word32(q + 4) >> (7 * (j % 4))) & 127]};
  }
  // Sub-block i's 8 bytes at 2 + 8 i: four index bytes, then its sign word (odd 32-bit lanes).
  static __m256i block_signs(const std::uint8_t* b) {
    const __m256 low = _mm256_loadu_ps(reinterpret_cast<const float*>(b + 2));
    const __m256 high = _mm256_loadu_ps(reinterpret_cast<const float*>(b + 34));
    // Sub-blocks 0, 1, 4, 5 | 2, 3, 6, 7, then in order.
    const __m256i words = _mm256_permute4x64_epi64(
        _mm256_castps_si256(_mm256_shuffle_ps(low, high, _MM_SHUFFLE(3, 1, 3, 1))),
        _MM_SHUFFLE(3, 1, 2, 0));
    return xxs_sign_bytes(words);
  }
};

struct Iq2xs {
  static constexpr int kBytes = 74, kBias = layout::kIq2Bias;
  static constexpr bool kIq1 = false;
  static void scales(const std::uint8_t* b, float* sc) {
    iq2_nibble_scales(b + 66, gguf_simd::half(b), sc);
  }
  static Group group(const std::uint8_t* b, int j) {
    const std::uint16_t w = word16(b + 2 + 2 * j);
    return {entry8(layout::kIq2xsGrid[w & 511]), kEvenSigns.v[w >> 9]};
  }
  // The 32 words' top 7 bits, packed to bytes in order.
  static __m256i block_signs(const std::uint8_t* b) {
    const __m256i low =
        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 9);
    const __m256i high =
        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 34)), 9);
    const __m256i fields =
        _mm256_permute4x64_epi64(_mm256_packus_epi16(low, high), _MM_SHUFFLE(3, 1, 2, 0));
    return even_sign_bytes(fields);
  }
};

struct Iq2s {
  static constexpr int kBytes = 82, kBias = layout::kIq2Bias;
  static constexpr bool kIq1 = false;
  static void scales(const std::uint8_t* b, float* sc) {
    iq2_nibble_scales(b + 74, gguf_simd::half(b), sc);
  }
  static Group group(const std::uint8_t* b, int j) {
    const int index = b[2 + j] | (((b[66 + j / 4] >> (2 * (j % 4))) & 3) << 8);
    return {entry8(layout::kIq2sGrid[index]), b[34 + j]};
  }
};

struct Iq3xxs {
  static constexpr int kBytes = 98, kBias = layout::kIq3xxsBias;
  static constexpr bool kIq1 = false;
  // d (0.5 + s) / 2 as (0.5 + s) (d / 2), the same bits; s the top 4 bits of word 66 + 4 sub.
  static void scales(const std::uint8_t* b, float* sc) {
    const __m256i s =
        _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 66)), 28);
    const float half_d = gguf_simd::half(b) * 0.5f;
    affine8(_mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)), 0.5f, half_d,
            sc);
    affine8(_mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)), 0.5f, half_d,
            sc + 8);
  }
  static Group group(const std::uint8_t* b, int j) {
    const std::uint8_t* q = b + 2 + 2 * j;
    return {entries4(layout::kIq3xxsGrid[q[0]], layout::kIq3xxsGrid[q[1]]),
            kEvenSigns.v[(word32(b + 66 + 4 * (j / 4)) >> (7 * (j % 4))) & 127]};
  }
  // The eight sign words at 66 + 4 i.
  static __m256i block_signs(const std::uint8_t* b) {
    return xxs_sign_bytes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 66)));
  }
};

struct Iq3s {
  static constexpr int kBytes = 110, kBias = layout::kIq3sBias;
  static constexpr bool kIq1 = false;
  // d (1 + 2 s), each sub-block's 4-bit s a nibble of bytes 106 .. 109, low first.
  static void scales(const std::uint8_t* b, float* sc) {
    const __m128i s =
        gguf_simd::nibbles_in_order(_mm_cvtsi32_si128(static_cast<int>(word32(b + 106))));
    const __m128i pairs = _mm_unpacklo_epi8(s, s);  // s0 s0 s1 s1 ... s7 s7
    const float d = gguf_simd::half(b);
    // The byte shift's count must be an immediate, also where nothing is optimised (-O0, -O1).
    const __m128i halves[2] = {pairs, _mm_srli_si128(pairs, 8)};
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_cvtepu8_epi32(halves[h]);
      affine8(_mm256_add_epi32(_mm256_add_epi32(v, v), _mm256_set1_epi32(1)), 0.0f, d, sc + 8 * h);
    }
  }
  static Group group(const std::uint8_t* b, int j) {
    const unsigned high = b[66 + j / 4] >> (2 * (j % 4));  // the two indices' ninth bits
    const int i0 = b[2 + 2 * j] | static_cast<int>((high & 1) << 8);
    const int i1 = b[3 + 2 * j] | static_cast<int>((high & 2) << 7);
    return {entries4(layout::kIq3sGrid[i0], layout::kIq3sGrid[i1]), b[74 + j]};
  }
};

struct Iq1s {
  static constexpr int kBytes = 50, kBias = layout::kIq1Bias;
  static constexpr bool kIq1 = true;
  // d (2 s + 1) / 8 as (2 s + 1) (d / 8), the same bits; s bits 12 .. 14 of word 34 + 2 sub.
  static void scales(const std::uint8_t* b, float* sc) {
    const __m128i s =
        _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 34)), 12),
                      _mm_set1_epi16(7));
    const float eighth_d = gguf_simd::half(b) * 0.125f;
    const __m128i odd = _mm_add_epi16(_mm_add_epi16(s, s), _mm_set1_epi16(1));
    affine8(_mm256_cvtepu16_epi32(_mm_unpacklo_epi16(odd, odd)), 0.0f, eighth_d, sc);
    affine8(_mm256_cvtepu16_epi32(_mm_unpackhi_epi16(odd, odd)), 0.0f, eighth_d, sc + 8);
  }
  static Group group(const std::uint8_t* b, int j) {
    const int sub = j / 4, k = j % 4;
    const std::uint16_t w = word16(b + 34 + 2 * sub);
    const int index = b[2 + 4 * sub + k] | (((w >> (3 * k)) & 7) << 8);
    return {entry8(reinterpret_cast<const std::uint8_t*>(layout::kIq1sGrid[index])),
            (w & 0x8000) != 0 ? 0u : 1u};
  }
  // A whole step (sub-block `step`) at once: one word holds its four indices' high bits and
  // its shift, so the mask is all or nothing.
  static __m256i step_magnitudes(const std::uint8_t* b, int step, __m256i* mask) {
    const std::uint16_t w = word16(b + 34 + 2 * step);
    std::uint64_t e[4];
    for (int k = 0; k < 4; ++k) {
      const int index = b[2 + 4 * step + k] | (((w >> (3 * k)) & 7) << 8);
      e[k] = entry8(reinterpret_cast<const std::uint8_t*>(layout::kIq1sGrid[index]));
    }
    *mask = _mm256_set1_epi8(static_cast<char>((w & 0x8000) != 0 ? 0 : -1));
    return _mm256_set_epi64x(static_cast<long long>(e[3]), static_cast<long long>(e[2]),
                             static_cast<long long>(e[1]), static_cast<long long>(e[0]));
  }
};

struct Iq1m {
  static constexpr int kBytes = 56, kBias = layout::kIq1Bias;
  static constexpr bool kIq1 = true;
  // d (2 s + 1) / 8 as (2 s + 1) (d / 8), the same bits; group g's s is bits 3 (g % 4) ..
  // 3 (g % 4) + 2 of word 48 + 2 (g / 4).
  static void scales(const std::uint8_t* b, float* sc) {
    const __m256i words = _mm256_castsi128_si256(
        _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 48))));
    const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
    const float eighth_d = _cvtsh_ss(layout::iq1_m_d_bits(b + 48)) * 0.125f;
    for (int h = 0; h < 2; ++h) {
      const __m256i w = _mm256_permutevar8x32_epi32(
          words, _mm256_setr_epi32(2 * h, 2 * h, 2 * h, 2 * h, 2 * h + 1, 2 * h + 1, 2 * h + 1,
                                   2 * h + 1));
      const __m256i s = _mm256_and_si256(_mm256_srlv_epi32(w, shifts), _mm256_set1_epi32(7));
      affine8(_mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1)), 0.0f, eighth_d,
              sc + 8 * h);
    }
  }
  static Group group(const std::uint8_t* b, int j) {
    const unsigned nibble = (b[32 + j / 2] >> (4 * (j % 2))) & 0x0F;
    const int index = b[j] | static_cast<int>((nibble & 7) << 8);
    return {entry8(reinterpret_cast<const std::uint8_t*>(layout::kIq1sGrid[index])),
            (nibble & 8) != 0 ? 0u : 1u};
  }
  // A whole step at once: its four groups' nibbles are one 16-bit word; each nibble's bit 3,
  // set where the shift is -1/8, is tested in the four 16-bit lanes of its group's 8 bytes.
  static __m256i step_magnitudes(const std::uint8_t* b, int step, __m256i* mask) {
    const std::uint32_t w = word16(b + 32 + 2 * step);
    std::uint64_t e[4];
    for (int k = 0; k < 4; ++k) {
      const int index = b[4 * step + k] | static_cast<int>(((w >> (4 * k)) & 7) << 8);
      e[k] = entry8(reinterpret_cast<const std::uint8_t*>(layout::kIq1sGrid[index]));
    }
    const __m256i bit3 = _mm256_setr_epi16(0x8, 0x8, 0x8, 0x8, 0x80, 0x80, 0x80, 0x80, 0x800, 0x800,
                                           0x800, 0x800, -0x8000, -0x8000, -0x8000, -0x8000);
    *mask = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<short>(w)), bit3),
                               _mm256_setzero_si256());
    return _mm256_set_epi64x(static_cast<long long>(e[3]), static_cast<long long>(e[2]),
                             static_cast<long long>(e[1]), static_cast<long long>(e[0]));
  }
};

// Four groups of F, weights 32 step .. 32 step + 31: their magnitudes (IQ1: grid values) in a
// register and their bits spread to bytes in `mask` (0xFF: a negative weight; IQ1: a group
// shifted by +1/8).
template <class F>
inline __attribute__((always_inline)) __m256i step_magnitudes(const std::uint8_t* b, int step,
                                                              __m256i* mask) {
  if constexpr (requires { F::step_magnitudes(b, step, mask); }) {
    return F::step_magnitudes(b, step, mask);  // the format's own, faster than group by group
  } else {
    std::uint64_t e[4];
    std::uint32_t bits = 0;
    for (int j = 0; j < 4; ++j) {
      const Group g = F::group(b, 4 * step + j);
      e[j] = g.magnitudes;
      bits |= F::kIq1 ? (g.bits != 0 ? 0xFFu : 0u) << (8 * j) : g.bits << (8 * j);
    }
    *mask = gguf_simd::byte_mask(bits);
    return _mm256_set_epi64x(static_cast<long long>(e[3]), static_cast<long long>(e[2]),
                             static_cast<long long>(e[1]), static_cast<long long>(e[0]));
  }
}

// A row's blocks, a 32-weight step at a time (step_magnitudes), with the sign bits found for
// the whole block at once (F::block_signs) where the format has 7-bit sign fields.
template <class F>
struct BlockSteps {
  static constexpr bool kBlockSigns = requires(const std::uint8_t* b) { F::block_signs(b); };
  const std::uint8_t* b = nullptr;
  __m256i signs;  // step s's sign bits in 32-bit lane s
  void block(const std::uint8_t* at) {
    b = at;
    if constexpr (kBlockSigns) signs = F::block_signs(b);
  }
  __m256i magnitudes(int step, __m256i* mask) const {
    if constexpr (kBlockSigns) {
      std::uint64_t e[4];
      for (int j = 0; j < 4; ++j) e[j] = F::group(b, 4 * step + j).magnitudes;
      // Lane `step` to every lane, then its byte j to bytes 8j .. 8j + 7, each tested for its bit.
      const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                               2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
      const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
      const __m256i spread = _mm256_and_si256(
          _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(signs, _mm256_set1_epi32(step)), byte_of),
          bit);
      *mask = _mm256_cmpeq_epi8(spread, bit);
      return _mm256_set_epi64x(static_cast<long long>(e[3]), static_cast<long long>(e[2]),
                               static_cast<long long>(e[1]), static_cast<long long>(e[0]));
    } else {
      return step_magnitudes<F>(b, step, mask);
    }
  }
};

// 8 g in each byte of g in -1 .. 1 (three doublings: no byte spills into the next).
inline __m256i times8(__m256i g) {
  g = _mm256_add_epi8(g, g);
  g = _mm256_add_epi8(g, g);
  return _mm256_add_epi8(g, g);
}

}  // namespace
}  // namespace tandem::kernels::gguf_iq
