#include "kernels/cpu/gguf/matmul.h"

#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_grids.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

namespace tandem::kernels {
namespace {

using gguf_layout::even_signs;
using gguf_layout::half;
using gguf_layout::iq2_scale;
using gguf_layout::k_scale_min;
using gguf_layout::kIq4Codes;

// Each unpacker turns one block into codes u, and per 16 weights a scale s and offset o:
// weight = s * (u - bias) + o, the bias its format's (Unpacker::bias).
using Unpack = void (*)(const std::uint8_t* block, std::uint8_t* u, float* s, float* o);

void pair(float* s, float* o, float scale, float offset) {
  s[0] = s[1] = scale;
  o[0] = o[1] = offset;
}

void q4_0(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    u[j] = b[2 + j] & 0x0F;
    u[j + 16] = b[2 + j] >> 4;
  }
  pair(s, o, d, 0.0f);
}

void q4_1(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  for (int j = 0; j < 16; ++j) {
    u[j] = b[4 + j] & 0x0F;
    u[j + 16] = b[4 + j] >> 4;
  }
  pair(s, o, half(b), half(b + 2));
}

void q5(const std::uint8_t* b, bool with_min, std::uint8_t* u, float* s, float* o) {
  std::uint32_t qh;
  std::memcpy(&qh, b + (with_min ? 4 : 2), 4);
  const std::uint8_t* qs = b + (with_min ? 8 : 6);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<std::uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    u[j + 16] = static_cast<std::uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
  const float d = half(b);
  pair(s, o, d, with_min ? half(b + 2) : 0.0f);
}
void q5_0(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  q5(b, false, u, s, o);
}
void q5_1(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  q5(b, true, u, s, o);
}

void q8_0(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  for (int j = 0; j < 32; ++j) u[j] = b[2 + j] ^ 0x80;  // int8 q + 128
  pair(s, o, half(b), 0.0f);
}

void iq4_nl(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  for (int j = 0; j < 16; ++j) {
    u[j] = kIq4Codes[b[2 + j] & 0x0F];
    u[j + 16] = kIq4Codes[b[2 + j] >> 4];
  }
  pair(s, o, half(b), 0.0f);
}

void q2_k(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  int sub = 0;
  for (int half_block = 0; half_block < 2; ++half_block) {
    const std::uint8_t* q = qs + 32 * half_block;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sub) {
        s[sub] = d * static_cast<float>(scales[sub] & 0x0F);
        o[sub] = -dmin * static_cast<float>(scales[sub] >> 4);
        for (int l = 0; l < 16; ++l) *u++ = (q[16 * part + l] >> shift) & 3;
      }
    }
  }
}

void q3_k(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const std::uint8_t* packed = b + 96;
  const float d = half(b + 108);
  int sub = 0;
  std::uint8_t bit = 1;
  for (int half_block = 0; half_block < 2; ++half_block) {
    const std::uint8_t* q = qs + 32 * half_block;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sub) {
        s[sub] = d * static_cast<float>(gguf_layout::q3_k_scale(packed, sub));
        o[sub] = 0.0f;
        for (int l = 0; l < 16; ++l) {
          const int code =
              ((q[16 * part + l] >> shift) & 3) | ((hmask[16 * part + l] & bit) ? 4 : 0);
          *u++ = static_cast<std::uint8_t>(code);
        }
      }
      bit = static_cast<std::uint8_t>(bit << 1);
    }
  }
}

void q45_k(const std::uint8_t* b, bool five, std::uint8_t* u, float* s, float* o) {
  const float d = half(b), dmin = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = b + (five ? 48 : 16);
  for (int p = 0; p < 4; ++p) {
    for (int second = 0; second < 2; ++second) {
      int sc, mn;
      k_scale_min(scales, 2 * p + second, &sc, &mn);
      pair(s + 2 * (2 * p + second), o + 2 * (2 * p + second), d * static_cast<float>(sc),
           -dmin * static_cast<float>(mn));
    }
    const std::uint8_t* q = qs + 32 * p;
    for (int l = 0; l < 32; ++l) {
      std::uint8_t lo = q[l] & 0x0F, hi = q[l] >> 4;
      if (five) {
        lo = static_cast<std::uint8_t>(lo | (((qh[l] >> (2 * p)) & 1) << 4));
        hi = static_cast<std::uint8_t>(hi | (((qh[l] >> (2 * p + 1)) & 1) << 4));
      }
      u[64 * p + l] = lo;
      u[64 * p + 32 + l] = hi;
    }
  }
}
void q4_k(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  q45_k(b, false, u, s, o);
}
void q5_k(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  q45_k(b, true, u, s, o);
}

void q6_k(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int g = 0; g < 16; ++g) {
    s[g] = d * static_cast<float>(scales[g]);
    o[g] = 0.0f;
  }
  for (int h = 0; h < 2; ++h) {
    const std::uint8_t* lo = ql + 64 * h;
    const std::uint8_t* hi = qh + 32 * h;
    std::uint8_t* out = u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<std::uint8_t>((lo[l] & 0x0F) | (((hi[l] >> 0) & 3) << 4));
      out[l + 32] = static_cast<std::uint8_t>((lo[l + 32] & 0x0F) | (((hi[l] >> 2) & 3) << 4));
      out[l + 64] = static_cast<std::uint8_t>((lo[l] >> 4) | (((hi[l] >> 4) & 3) << 4));
      out[l + 96] = static_cast<std::uint8_t>((lo[l + 32] >> 4) | (((hi[l] >> 6) & 3) << 4));
    }
  }
}

void iq4_xs(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  std::uint16_t scales_high;
  std::memcpy(&scales_high, b + 2, 2);
  const std::uint8_t* scales_low = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int sub = 0; sub < 8; ++sub) {
    const int low = (scales_low[sub / 2] >> (4 * (sub % 2))) & 0x0F;
    const int high = (scales_high >> (2 * sub)) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    pair(s + 2 * sub, o + 2 * sub, dl, 0.0f);
    const std::uint8_t* q = qs + 16 * sub;
    for (int j = 0; j < 16; ++j) {
      u[32 * sub + j] = kIq4Codes[q[j] & 0x0F];
      u[32 * sub + j + 16] = kIq4Codes[q[j] >> 4];
    }
  }
}

constexpr std::uint64_t kEveryByte = 0x0101010101010101ull;

// 0xFF in byte j where bit j of the low 8 bits of `bits` is set, else 0.
std::uint64_t byte_mask(unsigned bits) {
  std::uint64_t x = ((bits & 0xFFu) * kEveryByte) & 0x8040201008040201ull;  // bit j in byte j
  x = ((x + 0x7F7F7F7F7F7F7F7Full) | x) & 0x8080808080808080ull;            // its top bit
  return (x >> 7) * 0xFF;
}

// The IQ formats' signed grid values plus their format's bias (the largest magnitude: codes
// 0 ... 2 * bias), n <= 8 weights with sign bit j of `signs` for weight j. Eight bytes at once
// in a 64-bit word (a branch per weight on random signs cost most of the unpacking): bias + g,
// less 2 g where the sign is set; no byte carries or borrows, as g <= bias < 64.
void grid_codes(const std::uint8_t* grid, int n, unsigned signs, int bias, std::uint8_t* u) {
  std::uint64_t g = 0;
  std::memcpy(&g, grid, static_cast<std::size_t>(n));
  const std::uint64_t codes =
      static_cast<std::uint64_t>(bias) * kEveryByte + g - ((g << 1) & byte_mask(signs));
  std::memcpy(u, &codes, static_cast<std::size_t>(n));
}

using gguf_layout::kIq1Bias;
using gguf_layout::kIq2Bias;
using gguf_layout::kIq3sBias;
using gguf_layout::kIq3xxsBias;

void iq2_xxs(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  for (int sub = 0; sub < 8; ++sub) {
    const std::uint8_t* q = b + 2 + 8 * sub;
    std::uint32_t word;
    std::memcpy(&word, q + 4, 4);
    pair(s + 2 * sub, o + 2 * sub, iq2_scale(d, word >> 28), 0.0f);
    for (int k = 0; k < 4; ++k)
      grid_codes(gguf_layout::kIq2xxsGrid[q[k]], 8, even_signs(word >> (7 * k)), kIq2Bias,
                 u + 32 * sub + 8 * k);
  }
}

void iq2_xs(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  const std::uint8_t* scales = b + 66;
  for (int g = 0; g < 16; ++g) {
    s[g] = iq2_scale(d, (scales[g / 2] >> (4 * (g % 2))) & 0x0F);
    o[g] = 0.0f;
  }
  for (int k = 0; k < 32; ++k) {
    std::uint16_t word;
    std::memcpy(&word, b + 2 + 2 * k, 2);
    grid_codes(gguf_layout::kIq2xsGrid[word & 511], 8, even_signs(word >> 9), kIq2Bias, u + 8 * k);
  }
}

void iq2_s(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  const std::uint8_t* signs = b + 34;
  const std::uint8_t* qh = b + 66;
  const std::uint8_t* scales = b + 74;
  for (int g = 0; g < 16; ++g) {
    s[g] = iq2_scale(d, (scales[g / 2] >> (4 * (g % 2))) & 0x0F);
    o[g] = 0.0f;
  }
  for (int k = 0; k < 32; ++k) {
    const int index = qs[k] | (((qh[k / 4] >> (2 * (k % 4))) & 3) << 8);
    grid_codes(gguf_layout::kIq2sGrid[index], 8, signs[k], kIq2Bias, u + 8 * k);
  }
}

void iq3_xxs(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int sub = 0; sub < 8; ++sub) {
    std::uint32_t word;
    std::memcpy(&word, b + 66 + 4 * sub, 4);
    pair(s + 2 * sub, o + 2 * sub, d * (0.5f + static_cast<float>(word >> 28)) * 0.5f, 0.0f);
    for (int k = 0; k < 4; ++k) {
      const unsigned signs = even_signs(word >> (7 * k));
      std::uint8_t* out = u + 32 * sub + 8 * k;
      grid_codes(gguf_layout::kIq3xxsGrid[qs[8 * sub + 2 * k]], 4, signs, kIq3xxsBias, out);
      grid_codes(gguf_layout::kIq3xxsGrid[qs[8 * sub + 2 * k + 1]], 4, signs >> 4, kIq3xxsBias,
                 out + 4);
    }
  }
}

void iq3_s(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  const std::uint8_t* qh = b + 66;
  const std::uint8_t* signs = b + 74;
  const std::uint8_t* scales = b + 106;
  for (int sub = 0; sub < 8; ++sub) {
    const int sc = (scales[sub / 2] >> (4 * (sub % 2))) & 0x0F;
    pair(s + 2 * sub, o + 2 * sub, d * static_cast<float>(1 + 2 * sc), 0.0f);
  }
  for (int k = 0; k < 64; ++k) {
    const int index = qs[k] | (((qh[k / 8] >> (k % 8)) & 1) << 8);
    grid_codes(gguf_layout::kIq3sGrid[index], 4, signs[k / 2] >> (4 * (k % 2)), kIq3sBias,
               u + 4 * k);
  }
}

// IQ1: weight = dl (g + delta), g in -1, 0, 1 and delta +-1/8, as (dl / 8) (8 g +- 1): exact,
// dl / 8 being a power-of-two step from dl. Codes 9 + 8 g +- 1: 0 ... 18.
void iq1_codes(int index, bool negative_delta, std::uint8_t* u) {
  // g + 1 in each byte (0, 1, 2; the top bits added apart so that -1's byte carries into no
  // other), times 8: 9 + 8 g -+ 1 = 8 (g + 1) + 0 or 2.
  std::uint64_t g;
  std::memcpy(&g, gguf_layout::kIq1sGrid[index], 8);
  const std::uint64_t top = 0x8080808080808080ull;
  const std::uint64_t g1 = ((g & ~top) + kEveryByte) ^ (g & top);
  const std::uint64_t codes = 8 * g1 + (negative_delta ? 0 : 2) * kEveryByte;
  std::memcpy(u, &codes, 8);
}

void iq1_s(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int sub = 0; sub < 8; ++sub) {
    std::uint16_t word;
    std::memcpy(&word, b + 34 + 2 * sub, 2);
    const float dl = d * static_cast<float>(2 * ((word >> 12) & 7) + 1);
    pair(s + 2 * sub, o + 2 * sub, dl * 0.125f, 0.0f);
    for (int k = 0; k < 4; ++k) {
      const int index = qs[4 * sub + k] | (((word >> (3 * k)) & 7) << 8);
      iq1_codes(index, (word & 0x8000) != 0, u + 32 * sub + 8 * k);
    }
  }
}

void iq1_m(const std::uint8_t* b, std::uint8_t* u, float* s, float* o) {
  const std::uint8_t* qs = b;
  const std::uint8_t* qh = b + 32;
  std::uint16_t words[4];
  std::memcpy(words, b + 48, 8);
  const float d = gguf_layout::iq1_m_d(b + 48);
  for (int g = 0; g < 16; ++g) {
    s[g] = d * static_cast<float>(2 * ((words[g / 4] >> (3 * (g % 4))) & 7) + 1) * 0.125f;
    o[g] = 0.0f;
  }
  for (int k = 0; k < 32; ++k) {
    const int nibble = (qh[k / 2] >> (4 * (k % 2))) & 0x0F;
    iq1_codes(qs[k] | ((nibble & 7) << 8), (nibble & 8) != 0, u + 8 * k);
  }
}

// The symmetric formats' codes are stored plus a bias (Q8_0's int8 plus 128, Q4_0's nibble
// holds q + 8, ...), taken off in the integer sums; the formats with a minimum have none. The
// IQ formats' signed grid values are stored plus their largest magnitude (IQ1's 8 g +- 1: 9).
// `scale_weights` is 32 for the formats whose 16-weight groups come in pairs of one scale
// and one offset (their scale per 32 weights, or per block of 32): tiles sum those in 32s.
// `max_code` bounds the codes (the IQ formats': twice the bias).
struct Unpacker {
  DType type;
  Unpack unpack;
  int bias;
  int scale_weights;
  int max_code;
};
constexpr Unpacker kUnpackers[] = {
    {DType::Q4_0, q4_0, 8, 32, 15},
    {DType::Q4_1, q4_1, 0, 32, 15},
    {DType::Q5_0, q5_0, 16, 32, 31},
    {DType::Q5_1, q5_1, 0, 32, 31},
    {DType::Q8_0, q8_0, 128, 32, 255},
    {DType::IQ4_NL, iq4_nl, 128, 32, 255},
    {DType::Q2_K, q2_k, 0, 16, 3},
    {DType::Q3_K, q3_k, 4, 16, 7},
    {DType::Q4_K, q4_k, 0, 32, 15},
    {DType::Q5_K, q5_k, 0, 32, 31},
    {DType::Q6_K, q6_k, 32, 16, 63},
    {DType::IQ4_XS, iq4_xs, 128, 32, 255},
    {DType::IQ2_XXS, iq2_xxs, kIq2Bias, 32, 2 * kIq2Bias},
    {DType::IQ2_XS, iq2_xs, kIq2Bias, 16, 2 * kIq2Bias},
    {DType::IQ2_S, iq2_s, kIq2Bias, 16, 2 * kIq2Bias},
    {DType::IQ3_XXS, iq3_xxs, kIq3xxsBias, 32, 2 * kIq3xxsBias},
    {DType::IQ3_S, iq3_s, kIq3sBias, 32, 2 * kIq3sBias},
    {DType::IQ1_S, iq1_s, kIq1Bias, 32, 2 * kIq1Bias},
    {DType::IQ1_M, iq1_m, kIq1Bias, 16, 2 * kIq1Bias},
};

const Unpacker* unpacker_of(DType t) {
  for (const Unpacker& u : kUnpackers) {
    if (u.type == t) return &u;
  }
  return nullptr;
}

}  // namespace

void GgufUnpackedRows::resize(int r, std::int64_t c, int code_bias) {
  rows = r;
  bias = code_bias;
  cols = c;
  codes.resize(static_cast<std::size_t>(r * c));
  scale.resize(static_cast<std::size_t>(r * c / 16));
  offset.resize(static_cast<std::size_t>(r * c / 16));
}

void GgufQuantizedActivations::resize(std::int64_t r, std::int64_t c, int code_bias) {
  static std::atomic<std::uint64_t> stamps{0};
  stamp = ++stamps;
  bias = code_bias;
  rows = r;
  cols = c;
  values.resize(static_cast<std::size_t>(r * c));
  scale.resize(static_cast<std::size_t>(r * c / 16));
  scaled_sum.resize(static_cast<std::size_t>(r * c / 16));
  group_bias.resize(static_cast<std::size_t>(r * c / 16));
}

bool gguf_matmul_supports(DType t) {
  return unpacker_of(t) != nullptr;
}

int gguf_code_bias(DType t) {
  return unpacker_of(t)->bias;
}

int gguf_scale_weights(DType t) {
  return unpacker_of(t)->scale_weights;
}

int gguf_max_code(DType t) {
  return unpacker_of(t)->max_code;
}

void gguf_unpack_row(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot) {
  const Unpack unpack = unpacker_of(w.dtype)->unpack;
  const DTypeBlock block = dtype_block(w.dtype);
  const auto* b = static_cast<const std::uint8_t*>(w.data) + dtype_bytes(w.dtype, r * w.cols);
  std::uint8_t* u = out.codes.data() + slot * w.cols;
  float* s = out.scale.data() + slot * w.cols / 16;
  float* o = out.offset.data() + slot * w.cols / 16;
  const std::int64_t groups = block.elements / 16;
  for (std::int64_t i = 0; i < w.cols; i += block.elements) {
    unpack(b, u + i, s, o);
    b += block.bytes;
    s += groups;
    o += groups;
  }
}

namespace {

// The scalar variant's row, which gguf_quantize_row_avx2 matches to the bit.
void quantize_activation_row(const float* x, std::int64_t k, int bias, std::int8_t* q, float* scale,
                             float* scaled_sum, std::int32_t* group_bias) {
  for (std::int64_t b = 0; b < k; b += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[b + i]));
    const float d = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(x[b + i] * inverse));
      q[b + i] = static_cast<std::int8_t>(v);
      sums[i / 16] += v;
    }
    for (int h = 0; h < 2; ++h) {
      scale[b / 16 + h] = d;
      scaled_sum[b / 16 + h] = d * static_cast<float>(sums[h]);
    }
    for (int h = 0; h < 2; ++h) group_bias[b / 16 + h] = -bias * sums[h];
  }
}

}  // namespace

int gguf_unpack_tile(const WeightMatrix& w, std::int64_t first_row, int n, GgufUnpackedRows& out,
                     CpuVariant variant) {
  const std::int64_t groups16 = w.cols / 16;
  const int rows = static_cast<int>(std::min<std::int64_t>(n, w.rows - first_row));
  out.resize(n, w.cols, gguf_code_bias(w.dtype));
  const bool avx512 = variant == CpuVariant::Avx512 || variant == CpuVariant::Amx;
  for (int r = 0; r < rows; ++r) {
    if (avx512 && gguf_unpack_row_avx512(w, first_row + r, out, r)) continue;
    if (!gguf_unpack_row_avx2(w, first_row + r, out, r)) gguf_unpack_row(w, first_row + r, out, r);
  }
  std::fill(out.scale.begin() + rows * groups16, out.scale.end(), 0.0f);
  std::fill(out.offset.begin() + rows * groups16, out.offset.end(), 0.0f);
  return rows;
}

void gguf_quantize_activations(const float* x, std::int64_t m, std::int64_t k, int bias,
                               GgufQuantizedActivations& out, const ParallelFor& parallel) {
  out.resize(m, k, bias);
  // A few tokens quantise faster on this thread than a hand-off to others takes.
  const bool here = m * k <= 32768;
  const CpuVariant v = active_variant();
  const auto row = v == CpuVariant::Scalar ? quantize_activation_row : gguf_quantize_row_avx2;
  (here ? ParallelFor(serial_for) : parallel)(m, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      row(x + i * k, k, bias, out.values.data() + i * k, out.scale.data() + i * k / 16,
          out.scaled_sum.data() + i * k / 16, out.group_bias.data() + i * k / 16);
    }
  });
}

void gguf_dot_rows_scalar(const GgufUnpackedRows& w, const GgufQuantizedActivations& a,
                          std::int64_t m, float* y, std::int64_t y_stride) {
  const std::int64_t k = w.cols, groups = k / 16;
  for (std::int64_t i = 0; i < m; ++i) {
    const std::int8_t* q = a.values.data() + i * k;
    const float* as = a.scale.data() + i * groups;
    const float* asum = a.scaled_sum.data() + i * groups;
    for (int r = 0; r < w.rows; ++r) {
      const std::uint8_t* u = w.codes.data() + r * k;
      const float* ws = w.scale.data() + r * groups;
      const float* wo = w.offset.data() + r * groups;
      float sum = 0.0f;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int32_t dot = 0;
        for (int j = 0; j < 16; ++j) dot += (u[16 * g + j] - w.bias) * q[16 * g + j];
        sum += ws[g] * as[g] * static_cast<float>(dot) + wo[g] * asum[g];
      }
      y[i * y_stride + r] = sum;
    }
  }
}

std::int64_t gguf_direct_max_tokens(DType t, CpuVariant variant) {
  switch (variant) {
    case CpuVariant::Scalar:
      return 0;
    case CpuVariant::Avx512:
    case CpuVariant::Amx:
      switch (t) {
        case DType::Q8_0:
          return kGgufQ8_0LaneMaxTokens;
        case DType::Q4_0:
        case DType::IQ4_NL:
        case DType::Q2_K:
        case DType::Q3_K:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::IQ4_XS:
          return kGgufLaneMaxTokens;
        default:
          return kGgufDirectMaxTokens;
      }
    default:
      return kGgufDirectMaxTokens;
  }
}

std::int64_t gguf_rows_per_task(CpuVariant variant, std::int64_t m) {
  if (variant == CpuVariant::Scalar || m < kGgufTileMinTokens) return 4;
  return variant == CpuVariant::Avx512 || variant == CpuVariant::Amx ? 16 : 8;
}

void gguf_matmul_rows(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                      std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride,
                      CpuVariant variant, GgufRowsAhead ahead) {
  const std::int64_t k = w.cols;
  const bool avx512 = variant == CpuVariant::Avx512 || variant == CpuVariant::Amx;
  if (variant != CpuVariant::Scalar && m > gguf_direct_max_tokens(w.dtype, variant)) {
    // Tiles of 16 rows (AVX-512) or 8 (AVX2); the last may be partial only at the matrix's end.
    if (avx512)
      gguf_matmul_tiles_avx512(w, row_begin, row_end, a, m, y, y_stride, ahead);
    else
      gguf_matmul_tiles_avx2(w, row_begin, row_end, a, m, y, y_stride);
    return;
  }
  if (variant != CpuVariant::Scalar) {
    const bool fused = avx512 ? gguf_block_dot_avx512(a, m, w, row_begin, row_end, y, y_stride)
                              : gguf_block_dot_avx2(a, m, w, row_begin, row_end, y, y_stride);
    if (fused) return;
  }
  // The scalar kernel (every format has direct products and tiles in the SIMD variants).
  thread_local GgufUnpackedRows rows;
  for (std::int64_t first = row_begin; first < row_end; first += 4) {
    const int count = static_cast<int>(std::min<std::int64_t>(4, row_end - first));
    rows.resize(count, k, a.bias);
    for (int r = 0; r < count; ++r) gguf_unpack_row(w, first + r, rows, r);
    gguf_dot_rows_scalar(rows, a, m, y + first, y_stride);
  }
}

void gguf_matmul_xwt(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
                     std::int64_t y_stride, const ParallelFor& parallel, CpuVariant variant) {
  thread_local GgufQuantizedActivations activations;
  gguf_quantize_activations(x, m, w.cols, gguf_code_bias(w.dtype), activations, parallel);
  const GgufQuantizedActivations& a = activations;
  const std::int64_t per_task = gguf_rows_per_task(variant, m);
  parallel((w.rows + per_task - 1) / per_task, [&](std::int64_t begin, std::int64_t end) {
    gguf_matmul_rows(a, m, w, begin * per_task, std::min(w.rows, end * per_task), y, y_stride,
                     variant);
  });
}

}  // namespace tandem::kernels
