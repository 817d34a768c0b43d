#include "kernels/cpu/gguf/blocks.h"

#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_grids.h"

namespace tandem::kernels {
namespace {

using gguf_layout::even_signs;
using gguf_layout::half;
using gguf_layout::iq2_scale;
using gguf_layout::k_scale_min;
using gguf_layout::kIq1sGrid;
using gguf_layout::kIq2sGrid;
using gguf_layout::kIq2xsGrid;
using gguf_layout::kIq2xxsGrid;
using gguf_layout::kIq3sGrid;
using gguf_layout::kIq3xxsGrid;
using gguf_layout::kIq4Levels;

// Q4_0, Q4_1 (with a minimum): low nibbles are weights 0..15, high nibbles 16..31.
void q4(const std::uint8_t* b, bool with_min, float* y) {
  const float d = half(b);
  const float m = with_min ? half(b + 2) : 0.0f;
  const std::uint8_t* qs = b + (with_min ? 4 : 2);
  const int offset = with_min ? 0 : 8;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - offset) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - offset) * d + m;
  }
}

// Q5_0, Q5_1: as Q4 with the fifth bit of weight j in bit j of a 32-bit field.
void q5(const std::uint8_t* b, bool with_min, float* y) {
  const float d = half(b);
  const float m = with_min ? half(b + 2) : 0.0f;
  std::uint32_t qh;
  std::memcpy(&qh, b + (with_min ? 4 : 2), 4);
  const std::uint8_t* qs = b + (with_min ? 8 : 6);
  const int offset = with_min ? 0 : 16;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - offset) * d + m;
    y[j + 16] = static_cast<float>(hi - offset) * d + m;
  }
}

void q8_0(const std::uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

void iq4_nl(const std::uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4Levels[b[2 + j] & 0x0F];
    y[j + 16] = d * kIq4Levels[b[2 + j] >> 4];
  }
}

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale and 4-bit minimum; 2-bit weights, four
// to a byte, the byte's pairs of bits serving four sub-blocks 32 weights apart.
void q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  int sub = 0;
  for (int half_block = 0; half_block < 2; ++half_block) {
    const std::uint8_t* q = qs + 32 * half_block;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {
        const std::uint8_t sc = scales[sub++];
        const float dl = d * static_cast<float>(sc & 0x0F);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16; 2 low bits of each weight as in Q2_K, the third in a 32-byte
// mask (bit k of byte l for weight 32k + l); a clear bit subtracts 4.
void q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  int scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = gguf_layout::q3_k_scale(b + 96, i);
  const float d = half(b + 108);
  int sub = 0;
  std::uint8_t bit = 1;
  for (int half_block = 0; half_block < 2; ++half_block) {
    const std::uint8_t* q = qs + 32 * half_block;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scales[sub++]);
        for (int l = 0; l < 16; ++l) {
          const int low = (q[16 * part + l] >> shift) & 3;
          const int high = (hmask[16 * part + l] & bit) != 0 ? 0 : 4;
          *y++ = dl * static_cast<float>(low - high);
        }
      }
      bit = static_cast<std::uint8_t>(bit << 1);
    }
  }
}

// Q4_K, Q5_K: 8 sub-blocks of 32, weight = scale * q - min; each 32 bytes of nibbles hold two
// sub-blocks (low nibbles the first). Q5_K adds a fifth bit: bit 2k (first) and 2k + 1
// (second sub-block) of byte l for the k-th pair.
void q45_k(const std::uint8_t* b, bool five, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = five ? b + 16 : nullptr;
  const std::uint8_t* qs = b + (five ? 48 : 16);
  for (int pair = 0; pair < 4; ++pair) {
    int sc0, m0, sc1, m1;
    k_scale_min(scales, 2 * pair, &sc0, &m0);
    k_scale_min(scales, 2 * pair + 1, &sc1, &m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    const std::uint8_t* q = qs + 32 * pair;
    for (int l = 0; l < 32; ++l) {
      const int high = five && (qh[l] >> (2 * pair)) & 1 ? 16 : 0;
      y[l] = d0 * static_cast<float>((q[l] & 0x0F) + high) - min0;
    }
    for (int l = 0; l < 32; ++l) {
      const int high = five && (qh[l] >> (2 * pair + 1)) & 1 ? 16 : 0;
      y[32 + l] = d1 * static_cast<float>((q[l] >> 4) + high) - min1;
    }
    y += 64;
  }
}

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; 4 low bits in 128 bytes of nibbles and
// 2 high bits in 64 bytes, weights stored minus 32. Each half (128 weights) takes 64 low
// bytes and 32 high bytes: weight l, l + 32, l + 64, l + 96 from the low nibbles of bytes l
// and l + 32, then their high nibbles, with high bits 0-1, 2-3, 4-5, 6-7 of byte l.
void q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int half_block = 0; half_block < 2; ++half_block) {
    const std::uint8_t* lo = ql + 64 * half_block;
    const std::uint8_t* hi = qh + 32 * half_block;
    const std::int8_t* sc = scales + 8 * half_block;
    for (int l = 0; l < 32; ++l) {
      const int s = l / 16;
      const int q1 = ((lo[l] & 0x0F) | (((hi[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((lo[l + 32] & 0x0F) | (((hi[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((lo[l] >> 4) | (((hi[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((lo[l + 32] >> 4) | (((hi[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[s] * q1);
      y[l + 32] = d * static_cast<float>(sc[s + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[s + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[s + 6] * q4);
    }
    y += 128;
  }
}

// IQ4_XS: 8 sub-blocks of 32 on IQ4_NL's levels, each with a 6-bit scale (stored plus 32):
// low four bits two to a byte in 4 bytes, high two bits in a 16-bit field.
void iq4_xs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  std::uint16_t scales_high;
  std::memcpy(&scales_high, b + 2, 2);
  const std::uint8_t* scales_low = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int sub = 0; sub < 8; ++sub) {
    const int low = (scales_low[sub / 2] >> (4 * (sub % 2))) & 0x0F;
    const int high = (scales_high >> (2 * sub)) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    const std::uint8_t* q = qs + 16 * sub;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4Levels[q[j] & 0x0F];
      y[j + 16] = dl * kIq4Levels[q[j] >> 4];
    }
    y += 32;
  }
}

// The IQ2 formats: per 8 weights a grid index (magnitudes 8, 25, 43) and a sign pattern; per
// 16 or 32 weights a 4-bit scale s, the weights' scale d (0.5 + s) / 4 (iq2_scale). The IQ3
// formats likewise, 4 weights an index. Weight j of n is negative where bit j of `signs` is set.
void signed_grid(const std::uint8_t* grid, int n, std::uint8_t signs, float dl, float* y) {
  for (int j = 0; j < n; ++j) {
    const float v = static_cast<float>(grid[j]);
    y[j] = dl * ((signs >> j) & 1 ? -v : v);
  }
}

// IQ2_XXS: 8 sub-blocks of 32 in 8 bytes each: four 8-bit grid indices, then a 32-bit word of
// four 7-bit sign patterns (even_signs) with the sub-block's scale in its top four bits.
void iq2_xxs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  for (int sub = 0; sub < 8; ++sub, y += 32) {
    const std::uint8_t* q = b + 2 + 8 * sub;
    std::uint32_t word;
    std::memcpy(&word, q + 4, 4);
    const float dl = iq2_scale(d, word >> 28);
    for (int k = 0; k < 4; ++k)
      signed_grid(kIq2xxsGrid[q[k]], 8, even_signs(word >> (7 * k)), dl, y + 8 * k);
  }
}

// IQ2_XS: 32 16-bit words, each a 9-bit grid index and a 7-bit sign pattern of 8 weights;
// then a 4-bit scale per 16 weights, two to a byte.
void iq2_xs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* scales = b + 66;
  for (int k = 0; k < 32; ++k) {
    std::uint16_t word;
    std::memcpy(&word, b + 2 + 2 * k, 2);
    const float dl = iq2_scale(d, (scales[k / 4] >> (4 * (k / 2 % 2))) & 0x0F);
    signed_grid(kIq2xsGrid[word & 511], 8, even_signs(word >> 9), dl, y + 8 * k);
  }
}

// IQ2_S: 10-bit grid indices of 8 weights (low 8 bits in 32 bytes, the high two four to a
// byte in 8 bytes), 8 explicit sign bits each in 32 bytes, and a 4-bit scale per 16 weights.
void iq2_s(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  const std::uint8_t* signs = b + 34;
  const std::uint8_t* qh = b + 66;
  const std::uint8_t* scales = b + 74;
  for (int k = 0; k < 32; ++k) {
    const int index = qs[k] | (((qh[k / 4] >> (2 * (k % 4))) & 3) << 8);
    const float dl = iq2_scale(d, (scales[k / 4] >> (4 * (k / 2 % 2))) & 0x0F);
    signed_grid(kIq2sGrid[index], 8, signs[k], dl, y + 8 * k);
  }
}

// IQ3_XXS: 64 8-bit grid indices of 4 weights (magnitudes 4 ... 62), then per sub-block of 32
// a 32-bit word as IQ2_XXS's: four sign patterns of 8 weights and a 4-bit scale s on top,
// the weights' scale d (0.5 + s) / 2.
void iq3_xxs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int sub = 0; sub < 8; ++sub, y += 32) {
    std::uint32_t word;
    std::memcpy(&word, b + 66 + 4 * sub, 4);
    const float dl = d * (0.5f + static_cast<float>(word >> 28)) * 0.5f;
    for (int k = 0; k < 4; ++k) {
      const std::uint8_t signs = even_signs(word >> (7 * k));
      signed_grid(kIq3xxsGrid[qs[8 * sub + 2 * k]], 4, signs, dl, y + 8 * k);
      signed_grid(kIq3xxsGrid[qs[8 * sub + 2 * k + 1]], 4, signs >> 4, dl, y + 8 * k + 4);
    }
  }
}

// IQ3_S: 9-bit grid indices of 4 weights (odd magnitudes 1 ... 15; low 8 bits in 64 bytes,
// the ninth eight to a byte in 8 bytes), a sign bit per weight in 32 bytes, and per 32
// weights a 4-bit scale s, the weights' scale d (1 + 2 s).
void iq3_s(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  const std::uint8_t* qh = b + 66;
  const std::uint8_t* signs = b + 74;
  const std::uint8_t* scales = b + 106;
  for (int k = 0; k < 64; ++k) {
    const int index = qs[k] | (((qh[k / 8] >> (k % 8)) & 1) << 8);
    const int s = (scales[k / 16] >> (4 * (k / 8 % 2))) & 0x0F;
    const float dl = d * static_cast<float>(1 + 2 * s);
    signed_grid(kIq3sGrid[index], 4, signs[k / 2] >> (4 * (k % 2)), dl, y + 4 * k);
  }
}

// The IQ1 formats: per 8 weights an 11-bit index into a grid of -1, 0, 1, shifted by a delta
// of +1/8 or -1/8; per 16 or 32 weights a 3-bit scale s, the weights' scale d (2 s + 1).
void iq1_grid(int index, bool negative_delta, float dl, float* y) {
  const float delta = negative_delta ? -0.125f : 0.125f;
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(kIq1sGrid[index][j]) + delta);
}

// IQ1_S: the indices' low 8 bits in 32 bytes; per sub-block of 32 a 16-bit word of the four
// indices' high 3 bits, then the scale, then the delta's sign in bit 15.
void iq1_s(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int sub = 0; sub < 8; ++sub, y += 32) {
    std::uint16_t word;
    std::memcpy(&word, b + 34 + 2 * sub, 2);
    const float dl = d * static_cast<float>(2 * ((word >> 12) & 7) + 1);
    for (int k = 0; k < 4; ++k) {
      const int index = qs[4 * sub + k] | (((word >> (3 * k)) & 7) << 8);
      iq1_grid(index, (word & 0x8000) != 0, dl, y + 8 * k);
    }
  }
}

// IQ1_M: the indices' low 8 bits in 32 bytes; a nibble per index in 16 bytes (high 3 bits,
// then the delta's sign); four 16-bit words of four 3-bit scales per 16 weights each, their
// top nibbles d (gguf_layout::iq1_m_d).
void iq1_m(const std::uint8_t* b, float* y) {
  const std::uint8_t* qs = b;
  const std::uint8_t* qh = b + 32;
  const std::uint8_t* scales = b + 48;
  const float d = gguf_layout::iq1_m_d(scales);
  for (int k = 0; k < 32; ++k) {
    const int nibble = (qh[k / 2] >> (4 * (k % 2))) & 0x0F;
    std::uint16_t word;
    std::memcpy(&word, scales + 2 * (k / 8), 2);
    const float dl = d * static_cast<float>(2 * ((word >> (3 * (k / 2 % 4))) & 7) + 1);
    iq1_grid(qs[k] | ((nibble & 7) << 8), (nibble & 8) != 0, dl, y + 8 * k);
  }
}

void f32(const std::uint8_t* b, float* y) {
  std::memcpy(y, b, 4);
}
void f16(const std::uint8_t* b, float* y) {
  *y = half(b);
}
void bf16(const std::uint8_t* b, float* y) {
  std::uint16_t v;
  std::memcpy(&v, b, 2);
  *y = bf16_to_f32(v);
}

// One block of each type: its ggml number, weights and bytes, and the function that turns
// it into fp32.
struct Format {
  std::uint32_t type;
  int weights, bytes;
  void (*block)(const std::uint8_t*, float*);
};
constexpr Format kFormats[] = {
    {0, 1, 4, f32},
    {1, 1, 2, f16},
    {30, 1, 2, bf16},
    {2, 32, 18, [](const std::uint8_t* b, float* y) { q4(b, false, y); }},
    {3, 32, 20, [](const std::uint8_t* b, float* y) { q4(b, true, y); }},
    {6, 32, 22, [](const std::uint8_t* b, float* y) { q5(b, false, y); }},
    {7, 32, 24, [](const std::uint8_t* b, float* y) { q5(b, true, y); }},
    {8, 32, 34, q8_0},
    {20, 32, 18, iq4_nl},
    {10, 256, 84, q2_k},
    {11, 256, 110, q3_k},
    {12, 256, 144, [](const std::uint8_t* b, float* y) { q45_k(b, false, y); }},
    {13, 256, 176, [](const std::uint8_t* b, float* y) { q45_k(b, true, y); }},
    {14, 256, 210, q6_k},
    {23, 256, 136, iq4_xs},
    {16, 256, 66, iq2_xxs},
    {17, 256, 74, iq2_xs},
    {22, 256, 82, iq2_s},
    {18, 256, 98, iq3_xxs},
    {21, 256, 110, iq3_s},
    {19, 256, 50, iq1_s},
    {29, 256, 56, iq1_m},
};

const Format* format_of(std::uint32_t type) {
  for (const Format& f : kFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

}  // namespace

bool gguf_block_type_known(std::uint32_t ggml_type) {
  return format_of(ggml_type) != nullptr;
}

bool dequantize_gguf_row(std::uint32_t ggml_type, const void* blocks, std::int64_t n, float* out) {
  const Format* f = format_of(ggml_type);
  if (f == nullptr) return false;
  const auto* b = static_cast<const std::uint8_t*>(blocks);
  for (std::int64_t i = 0; i < n; i += f->weights, b += f->bytes) f->block(b, out + i);
  return true;
}

}  // namespace tandem::kernels
