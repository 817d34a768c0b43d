// Pieces of the GGUF block layouts that the scalar dequantiser (gguf/blocks.cpp) and the
// block kernels' unpackers (gguf_matmul*.cpp) read alike.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"

namespace tandem::kernels::gguf_layout {

// IQ4_NL's and IQ4_XS's sixteen levels: a non-uniform 4-bit grid (the format's definition,
// as ggml's kvalues_iq4nl specifies it).
inline constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};
// The same plus 128: the unsigned codes the products and unpackers take them as.
inline constexpr std::array<std::uint8_t, 16> kIq4Codes = [] {
  std::array<std::uint8_t, 16> codes{};
  for (int i = 0; i < 16; ++i) codes[i] = static_cast<std::uint8_t>(kIq4Levels[i] + 128);
  return codes;
}();

// The 32-weight formats with nibbles, as the products that read them directly see them: weights
// j and j + 16 in the low and high nibble of byte j of 16 (Q5_0's and Q5_1's fifth bits in a
// 32-bit word before them, IQ4_NL's nibbles indexing kIq4Levels), one fp16 scale first and,
// for Q4_1 and Q5_1, an fp16 minimum after it (weight = d u + m).
struct NibbleFormat {
  int bytes;     // a block
  int codes;     // offset of the 16 bytes of nibbles
  int fifth;     // offset of the fifth bits, or -1
  bool minimum;  // an fp16 minimum at offset 2
  bool levels;   // nibbles index IQ4's levels
  int bias;      // the codes' bias (Q4_0 8, Q5_0 16; IQ4_NL's levels are signed: 0)
};
inline constexpr NibbleFormat kQ4_0{18, 2, -1, false, false, 8};
inline constexpr NibbleFormat kQ4_1{20, 4, -1, true, false, 0};
inline constexpr NibbleFormat kQ5_0{22, 6, 2, false, false, 16};
inline constexpr NibbleFormat kQ5_1{24, 8, 4, true, false, 0};
inline constexpr NibbleFormat kIq4Nl{18, 2, -1, false, true, 0};

// The functions below are compiled into the scalar, AVX2 and AVX-512 files alike: internal
// linkage, so each keeps its own copy and none built for AVX-512 can be linked into another's
// calls (as gguf/iq_groups.h).
namespace {

// IQ2_XXS's, IQ2_XS's and IQ3_XXS's sign patterns of 8 weights: 7 stored bits, the eighth making
// the count of minus signs even (bit i set: weight i negative).
// The parity by folding to 4 bits and a 16-bit table of their parities: __builtin_popcount is
// a library call where the build does not assume POPCNT, and took a fifth of the unpacking.
inline constexpr std::uint8_t even_signs(unsigned seven_bits) {
  const unsigned s = seven_bits & 0x7Fu;
  const unsigned parity = (0x6996u >> ((s ^ (s >> 4)) & 0xFu)) & 1u;
  return static_cast<std::uint8_t>(s | (parity << 7));
}

// An fp16 field of a block.
inline float half(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return f16_to_f32(v);
}

// Q4_K's and Q5_K's eight 6-bit scales and minimums in 12 bytes: sub-blocks 0..3 in the low
// six bits of bytes 0..3 (scale) and 4..7 (minimum); 4..7 in bytes 8..11's nibbles with their
// top two bits in the spare bits of bytes 0..7.
inline void k_scale_min(const std::uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K's 6-bit scale i of 16 in its 12 bytes: the low four bits in bytes 0..7 (two to a
// byte), the high two in bytes 8..11 (four to a byte); stored plus 32.
inline int q3_k_scale(const std::uint8_t* s, int i) {
  const int low = i < 8 ? s[i] & 0x0F : s[i - 8] >> 4;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// All sixteen of them at once, four to a 32-bit word (scale i in byte i % 4 of word i / 4),
// still plus 32: the SIMD kernels widen the bytes.
inline void q3_k_scales(const std::uint8_t* s, std::uint32_t* words) {
  std::uint32_t w[3];
  std::memcpy(w, s, 12);
  constexpr std::uint32_t kLow4 = 0x0F0F0F0Fu, kLow2 = 0x03030303u;
  words[0] = (w[0] & kLow4) | ((w[2] & kLow2) << 4);
  words[1] = (w[1] & kLow4) | (((w[2] >> 2) & kLow2) << 4);
  words[2] = ((w[0] >> 4) & kLow4) | (((w[2] >> 4) & kLow2) << 4);
  words[3] = ((w[1] >> 4) & kLow4) | (((w[2] >> 6) & kLow2) << 4);
}

// The IQ2 formats' weight scale from d and a 4-bit sub-block scale s: d (0.5 + s) / 4.
inline float iq2_scale(float d, unsigned s) {
  return d * (0.5f + static_cast<float>(s)) * 0.25f;
}

// IQ1_M's d: no field of its own, but the top nibbles of the four 16-bit scale words at
// `scales`, the first word's the lowest (its fp16 bits, then its value).
inline std::uint16_t iq1_m_d_bits(const std::uint8_t* scales) {
  std::uint16_t w[4];
  std::memcpy(w, scales, 8);
  return static_cast<std::uint16_t>((w[0] >> 12) | ((w[1] >> 8) & 0x00F0) | ((w[2] >> 4) & 0x0F00) |
                                    (w[3] & 0xF000));
}
inline float iq1_m_d(const std::uint8_t* scales) {
  return f16_to_f32(iq1_m_d_bits(scales));
}

}  // namespace
}  // namespace tandem::kernels::gguf_layout
