// The AVX2 dot kernel of kernels/cpu/gguf_matmul.h: a 16-weight group a step, codes less
// their bias and activations widened to 16 bits and multiplied in pairs (VPMADDWD, which
// cannot saturate), the eight sums scaled by the group's weight and activation scales.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gguf_block_layout.h"
#include "kernels/cpu/gguf_iq_groups.h"
#include "kernels/cpu/gguf_matmul.h"
#include "kernels/cpu/gguf_simd_pieces.h"

namespace tandem::kernels {

void gguf_dot_rows_avx2(const GgufUnpackedRows& w, const GgufQuantizedActivations& a,
                        std::int64_t m, float* y, std::int64_t y_stride) {
  constexpr int kMaxRows = 4;
  const std::int64_t k = w.cols, groups = k / 16;
  const int rows = w.rows;
  for (std::int64_t i = 0; i < m; ++i) {
    const std::int8_t* q = a.values.data() + i * k;
    const float* as = a.scale.data() + i * groups;
    const float* asum = a.scaled_sum.data() + i * groups;
    const __m256i bias = _mm256_set1_epi16(static_cast<std::int16_t>(w.bias));
    __m256 acc[kMaxRows];
    for (int r = 0; r < kMaxRows; ++r) acc[r] = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < groups; ++g) {
      const __m256i qa =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * g)));
      for (int r = 0; r < rows; ++r) {
        const __m256i u = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.codes.data() + r * k + 16 * g))),
            bias);
        const __m256 scale =
            _mm256_set1_ps(w.scale[static_cast<std::size_t>(r * groups + g)] * as[g]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(u, qa)), scale, acc[r]);
      }
    }
    for (int r = 0; r < rows; ++r) {
      const float* wo = w.offset.data() + r * groups;
      float off = 0.0f;
      for (std::int64_t g = 0; g < groups; ++g) off += wo[g] * asum[g];
      const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
      const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
      y[i * y_stride + r] = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1))) + off;
    }
  }
}

}  // namespace tandem::kernels

namespace tandem::kernels {
namespace {

using gguf_simd::half;

void pair(float* s, float* o, float scale, float offset) {
  s[0] = s[1] = scale;
  o[0] = o[1] = offset;
}

__m256i load32(const std::uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
void store32(std::uint8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
__m128i load16(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Bytes' high nibbles, low nibbles: AVX2 has no byte shifts, so 16-bit ones and a mask.
__m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
__m256i low_nibbles(__m256i v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

void q8_0_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t i = 0; i < blocks; ++i, b += 34, u += 32, s += 2, o += 2) {
    store32(u, _mm256_xor_si256(load32(b + 2), flip));
    pair(s, o, half(b), 0.0f);
  }
}

void q4_0_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  for (std::int64_t i = 0; i < blocks; ++i, b += 18, u += 32, s += 2, o += 2) {
    const __m128i q = load16(b + 2);
    const __m128i mask = _mm_set1_epi8(0x0F);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u), _mm_and_si128(q, mask));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 16), _mm_and_si128(_mm_srli_epi16(q, 4), mask));
    pair(s, o, half(b), 0.0f);
  }
}

using gguf_layout::k_scale_min;

void q45_k_row(const std::uint8_t* b, std::int64_t blocks, bool five, std::uint8_t* u, float* s,
               float* o) {
  const std::int64_t size = five ? 176 : 144;
  for (std::int64_t i = 0; i < blocks; ++i, b += size, u += 256, s += 16, o += 16) {
    const float d = half(b), dmin = half(b + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      k_scale_min(b + 4, j, &sc, &mn);
      pair(s + 2 * j, o + 2 * j, d * static_cast<float>(sc), -dmin * static_cast<float>(mn));
    }
    const std::uint8_t* qs = b + (five ? 48 : 16);
    const __m256i qh = five ? load32(b + 16) : _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load32(qs + 32 * p);
      __m256i lo = low_nibbles(q), hi = high_nibbles(q);
      if (five) {
        gguf_simd::q5_k_fifth_bits(qh, p, lo, hi);
      }
      store32(u + 64 * p, lo);
      store32(u + 64 * p + 32, hi);
    }
  }
}

void q6_k_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i three = _mm256_set1_epi8(3);
  for (std::int64_t i = 0; i < blocks; ++i, b += 210, u += 256, s += 16, o += 16) {
    const float d = half(b + 208);
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
    for (int g = 0; g < 16; ++g) {
      s[g] = d * static_cast<float>(scales[g]);
      o[g] = 0.0f;
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32);
      const __m256i hb = load32(b + 128 + 32 * h);
      // ((hb >> shift) & 3) << 4, kept within each byte.
      auto top = [&](int shift) {
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, shift), three), 4);
      };
      std::uint8_t* out = u + 128 * h;
      store32(out, _mm256_or_si256(low_nibbles(l0), top(0)));
      store32(out + 32, _mm256_or_si256(low_nibbles(l1), top(2)));
      store32(out + 64, _mm256_or_si256(high_nibbles(l0), top(4)));
      store32(out + 96, _mm256_or_si256(high_nibbles(l1), top(6)));
    }
  }
}

}  // namespace

// The IQ1 ... IQ3 formats (gguf_iq_groups.h), 32 codes a step from four groups: the grid
// magnitudes plus the format's bias, less twice them where the sign bit is set; IQ1's 8 (g + 1)
// plus 2 in the groups shifted by +1/8. The scalar unpackers' codes, scales and offsets.
template <class F>
void iq_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  for (std::int64_t i = 0; i < blocks; ++i, b += F::kBytes, u += 256, s += 16, o += 16) {
    F::scales(b, s);
    for (int g = 0; g < 16; ++g) o[g] = 0.0f;
    for (int step = 0; step < 8; ++step) {
      __m256i mask;
      const __m256i m = gguf_iq::step_magnitudes<F>(b, step, &mask);
      __m256i codes;
      if constexpr (F::kIq1) {  // 8 (g + 1), plus 2 where the shift is +1/8
        codes = _mm256_add_epi8(_mm256_add_epi8(gguf_iq::times8(m), _mm256_set1_epi8(8)),
                                _mm256_and_si256(mask, _mm256_set1_epi8(2)));
      } else {
        const __m256i biased = _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(F::kBias)), m);
        codes = _mm256_sub_epi8(biased, _mm256_and_si256(_mm256_add_epi8(m, m), mask));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * step), codes);
    }
  }
}

bool gguf_unpack_row_avx2(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot) {
  const DTypeBlock block = dtype_block(w.dtype);
  const auto* b = static_cast<const std::uint8_t*>(w.data) + dtype_bytes(w.dtype, r * w.cols);
  std::uint8_t* u = out.codes.data() + slot * w.cols;
  float* s = out.scale.data() + slot * w.cols / 16;
  float* o = out.offset.data() + slot * w.cols / 16;
  const std::int64_t blocks = w.cols / block.elements;
  switch (w.dtype) {
    case DType::Q8_0:
      q8_0_row(b, blocks, u, s, o);
      return true;
    case DType::Q4_0:
      q4_0_row(b, blocks, u, s, o);
      return true;
    case DType::Q4_K:
      q45_k_row(b, blocks, false, u, s, o);
      return true;
    case DType::Q5_K:
      q45_k_row(b, blocks, true, u, s, o);
      return true;
    case DType::Q6_K:
      q6_k_row(b, blocks, u, s, o);
      return true;
    case DType::IQ2_XXS:
      iq_row<gguf_iq::Iq2xxs>(b, blocks, u, s, o);
      return true;
    case DType::IQ2_XS:
      iq_row<gguf_iq::Iq2xs>(b, blocks, u, s, o);
      return true;
    case DType::IQ2_S:
      iq_row<gguf_iq::Iq2s>(b, blocks, u, s, o);
      return true;
    case DType::IQ3_XXS:
      iq_row<gguf_iq::Iq3xxs>(b, blocks, u, s, o);
      return true;
    case DType::IQ3_S:
      iq_row<gguf_iq::Iq3s>(b, blocks, u, s, o);
      return true;
    case DType::IQ1_S:
      iq_row<gguf_iq::Iq1s>(b, blocks, u, s, o);
      return true;
    case DType::IQ1_M:
      iq_row<gguf_iq::Iq1m>(b, blocks, u, s, o);
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::kernels
