// AVX2 kernels for CPUs without AVX-512. Every sum equals the scalar reference's exactly:
// INT8 and INT4 go through VPMADDUBSW in ways that cannot saturate (see MaddubsDot). Each 32-byte
// half of a packed quad holds 8 rows x 4 columns.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed/grouped_ymm.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 2;
constexpr int kInt8TokenTile = 4;

// VPMADDUBSW multiplies unsigned by signed bytes and adds pairs into 16 bits with
// saturation; these uses cannot saturate, so the 32-bit sums equal the scalar reference's.
// INT8: the stored weights (w + 128) become signed again (w, never -128), and |w| times
// x * sign(w) is w * x: each pair sums to at most 2 * 127 * 127 = 32258. INT4: the nibbles
// are unsigned (0..15) as they are, a pair at most 2 * 15 * 127. (In an anonymous namespace,
// as VnniDot, so each file's instance of grouped_block_ymm stays its own.)
struct MaddubsDot {
  static constexpr int kInt8Offset = 0;  // the sums see w itself
  struct Int8Weights {
    __m256i magnitude, signs;
  };
  static Int8Weights int8_weights(__m256i raw) {
    const __m256i signs = _mm256_xor_si256(raw, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_sign_epi8(signs, signs), signs};
  }
  static __m256i add_int8(__m256i acc, const Int8Weights& w, __m256i x) {
    const __m256i pairs = _mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x, w.signs));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static __m256i add(__m256i acc, __m256i lo, __m256i hi, __m256i x0, __m256i x1) {
    const __m256i pairs =
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

template <int T>
void bf16_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t pairs = w.cols_padded / 2;
  const std::uint8_t* wb = w.block(block);
  const std::uint16_t* xb = x.bf16.data() + t0 * x.bf16_stride;
  __m256 acc[4][T];
  for (int g = 0; g < 4; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < pairs; ++k) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) {
      std::int32_t pair;
      __builtin_memcpy(&pair, xb + t * x.bf16_stride + k * 2, 4);
      // bf16 -> fp32 is a 16-bit shift: (lo << 16) and (hi & 0xffff0000).
      const __m256i p = _mm256_set1_epi32(pair);
      const __m256i lo = _mm256_slli_epi32(p, 16);
      const __m256i hi = _mm256_and_si256(p, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
      xv[t] = _mm256_castsi256_ps(_mm256_blend_epi32(lo, hi, 0xaa));
    }
    for (int g = 0; g < 4; ++g) {
      const __m256i raw = _mm256_cvtepu16_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(wb + k * 64 + g * 16)));
      const __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      for (int t = 0; t < T; ++t) acc[g][t] = _mm256_fmadd_ps(wv, xv[t], acc[g][t]);
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    alignas(32) float part[8];
    for (int g = 0; g < 4; ++g) {
      _mm256_store_ps(part, acc[g][t]);
      for (int i = 0; i < 4; ++i) {
        const std::int64_t lane = g * 4 + i;
        if (lane >= rows) break;
        y[(t0 + t) * y_stride + r0 + lane] = part[2 * i] + part[2 * i + 1];
      }
    }
  }
}

}  // namespace

void packed_matmul_avx2(const PackedMatrix& w, const PackedActivations& x, float* y,
                        std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  static const bool vnni = detect_isa().usable.avx_vnni;
  if (vnni && w.format != PackedFormat::Bf16) {
    packed_matmul_avx_vnni(w, x, y, y_stride, block_begin, block_end);
  } else {
    packed_matmul_avx2_plain(w, x, y, y_stride, block_begin, block_end);
  }
}

void packed_matmul_avx2_plain(const PackedMatrix& w, const PackedActivations& x, float* y,
                              std::int64_t y_stride, std::int64_t block_begin,
                              std::int64_t block_end) {
  if (nibble_format(w.format)) {
    for (std::int64_t b = block_begin; b < block_end; ++b) {
      const std::uint8_t* ahead = block_ahead(w, b, block_end);
      std::int64_t t = 0;
      for (; t + kTokenTile <= x.tokens; t += kTokenTile) {
        integer_block_ymm<MaddubsDot, kTokenTile>(w, x, b, t, y, y_stride,
                                                  t + kTokenTile == x.tokens ? ahead : nullptr);
      }
      if (t < x.tokens) integer_block_ymm<MaddubsDot, 1>(w, x, b, t, y, y_stride, ahead);
    }
    return;
  }
  if (w.format == PackedFormat::Int8) {
    for (std::int64_t b = block_begin; b < block_end; ++b) {
      const std::uint8_t* ahead = block_ahead(w, b, block_end);
      std::int64_t t = 0;
      for (; t + kInt8TokenTile <= x.tokens; t += kInt8TokenTile) {
        integer_block_ymm<MaddubsDot, kInt8TokenTile>(
            w, x, b, t, y, y_stride, t + kInt8TokenTile == x.tokens ? ahead : nullptr);
      }
      switch (x.tokens - t) {
        case 1:
          integer_block_ymm<MaddubsDot, 1>(w, x, b, t, y, y_stride, ahead);
          break;
        case 2:
          integer_block_ymm<MaddubsDot, 2>(w, x, b, t, y, y_stride, ahead);
          break;
        case 3:
          integer_block_ymm<MaddubsDot, 3>(w, x, b, t, y, y_stride, ahead);
          break;
        default:
          break;
      }
    }
    return;
  }
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    std::int64_t t = 0;
    for (; t + kTokenTile <= x.tokens; t += kTokenTile)
      bf16_block<kTokenTile>(w, x, b, t, y, y_stride);
    if (t < x.tokens) bf16_block<1>(w, x, b, t, y, y_stride);
  }
}

}  // namespace tandem::kernels
