// AVX2 kernels for CPUs without AVX-512. Every sum equals the scalar reference's exactly:
// INT8 and INT4 go through VPMADDUBSW in ways that cannot saturate (see int8_block and
// int4_block). Each 32-byte half of a packed quad holds 8 rows x 4 columns.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed_int4_ymm.h"
#include "kernels/cpu/packed_matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 2;
constexpr int kInt8TokenTile = 4;

// INT8 with VPMADDUBSW, which multiplies unsigned by signed bytes and adds pairs into 16 bits
// with saturation. The stored weights (w + 128) become signed again (w, never -128), and
// |w| times x * sign(w) is w * x: each pair sums to at most 2 * 127 * 127 = 32258, so nothing
// saturates and the 32-bit sums equal the scalar reference's exactly.
template <int T>
void int8_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t quads = w.cols_padded / 4;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[2][T];  // [rows 0-7, 8-15][token]: one 32-bit sum per row
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_si256();
  for (std::int64_t k = 0; k < quads; ++k) {
    __m256i xv[T];
    for (int t = 0; t < T; ++t) {
      std::int32_t quad;
      __builtin_memcpy(&quad, xq + t * x.cols_padded + k * 4, 4);
      xv[t] = _mm256_set1_epi32(quad);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i ws = _mm256_xor_si256(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k * 64 + h * 32)), bias);
      const __m256i magnitude = _mm256_sign_epi8(ws, ws);
      for (int t = 0; t < T; ++t) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xv[t], ws));
        acc[h][t] = _mm256_add_epi32(acc[h][t], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    const std::int64_t tok = t0 + t;
    alignas(32) std::int32_t sums[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums), acc[0][t]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8), acc[1][t]);
    for (std::int64_t lane = 0; lane < rows; ++lane) {
      y[tok * y_stride + r0 + lane] = static_cast<float>(sums[lane]) *
                                      w.row_scale[static_cast<std::size_t>(r0 + lane)] *
                                      x.scale[static_cast<std::size_t>(tok)];
    }
  }
}

// INT4: the nibbles are unsigned (0..15), so VPMADDUBSW takes them as they are: a pair sums
// to at most 2 * 15 * 127, far from saturating. (In an anonymous namespace, as VnniDot, so
// each file's instance of int4_block_ymm stays its own.)
struct MaddubsDot {
  static __m256i add(__m256i acc, __m256i lo, __m256i hi, __m256i x0, __m256i x1) {
    const __m256i pairs =
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

template <int T>
void int4_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  if (w.format == PackedFormat::Mxfp4)
    int4_block_ymm<MaddubsDot, T, true>(w, x, block, t0, y, y_stride);
  else
    int4_block_ymm<MaddubsDot, T, false>(w, x, block, t0, y, y_stride);
}
template <int T>
void bf16_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t pairs = w.cols_padded / 2;
  const std::uint8_t* wb = w.block(block);
  const std::uint16_t* xb = x.bf16.data() + t0 * x.cols_padded;
  __m256 acc[4][T];
  for (int g = 0; g < 4; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < pairs; ++k) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) {
      std::int32_t pair;
      __builtin_memcpy(&pair, xb + t * x.cols_padded + k * 2, 4);
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
      std::int64_t t = 0;
      for (; t + kTokenTile <= x.tokens; t += kTokenTile)
        int4_block<kTokenTile>(w, x, b, t, y, y_stride);
      if (t < x.tokens) int4_block<1>(w, x, b, t, y, y_stride);
    }
    return;
  }
  if (w.format == PackedFormat::Int8) {
    for (std::int64_t b = block_begin; b < block_end; ++b) {
      std::int64_t t = 0;
      for (; t + kInt8TokenTile <= x.tokens; t += kInt8TokenTile)
        int8_block<kInt8TokenTile>(w, x, b, t, y, y_stride);
      switch (x.tokens - t) {
        case 1:
          int8_block<1>(w, x, b, t, y, y_stride);
          break;
        case 2:
          int8_block<2>(w, x, b, t, y, y_stride);
          break;
        case 3:
          int8_block<3>(w, x, b, t, y, y_stride);
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
