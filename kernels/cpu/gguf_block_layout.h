// Pieces of the GGUF block layouts that the scalar dequantiser (gguf_blocks.cpp) and the
// block kernels' unpackers (gguf_matmul*.cpp) read alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dtype.h"

namespace tandem::kernels::gguf_layout {

// IQ4_NL's and IQ4_XS's sixteen levels: a non-uniform 4-bit grid (the format's definition,
// as ggml's kvalues_iq4nl specifies it).
inline constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

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

}  // namespace tandem::kernels::gguf_layout
