// AVX2 kernels for CPUs without AVX-512. INT8 widens to 16 bits and uses VPMADDWD, which
// cannot saturate (unlike VPMADDUBSW), so the sums equal the scalar reference exactly.
// Each 16-byte piece of a packed group holds 4 rows x 4 columns.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed_matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 2;

template <int T>
void int8_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t quads = w.cols_padded / 4;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  __m256i acc[4][T];  // [group of 4 rows][token]: pairs of partial sums per row
  for (int g = 0; g < 4; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm256_setzero_si256();
  for (std::int64_t k = 0; k < quads; ++k) {
    __m256i xv[T];
    for (int t = 0; t < T; ++t) {
      const std::int8_t* q = xq + t * x.cols_padded + k * 4;
      const std::int64_t four =
          static_cast<std::uint16_t>(q[0]) |
          (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[1])) << 16) |
          (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[2])) << 32) |
          (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[3])) << 48);
      xv[t] = _mm256_set1_epi64x(four);
    }
    for (int g = 0; g < 4; ++g) {
      const __m256i wv = _mm256_cvtepu8_epi16(
          _mm_load_si128(reinterpret_cast<const __m128i*>(wb + k * 64 + g * 16)));
      for (int t = 0; t < T; ++t)
        acc[g][t] = _mm256_add_epi32(acc[g][t], _mm256_madd_epi16(wv, xv[t]));
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    const std::int64_t tok = t0 + t;
    alignas(32) std::int32_t part[8];
    for (int g = 0; g < 4; ++g) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(part), acc[g][t]);
      for (int i = 0; i < 4; ++i) {
        const std::int64_t lane = g * 4 + i;
        if (lane >= rows) break;
        const std::int32_t exact =
            part[2 * i] + part[2 * i + 1] - 128 * x.q_sum[static_cast<std::size_t>(tok)];
        y[tok * y_stride + r0 + lane] = static_cast<float>(exact) *
                                        w.row_scale[static_cast<std::size_t>(r0 + lane)] *
                                        x.scale[static_cast<std::size_t>(tok)];
      }
    }
  }
}

// The four 32-bit pairs of partial sums per row (rows 4g..4g+3 in acc[g]) folded into the
// exact sums of rows 8h..8h+7, in row order.
inline __m256i row_sums(__m256i a, __m256i b) {
  // hadd gives rows [0, 1, 4, 5, 2, 3, 6, 7] of the eight rows held by a and b.
  return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(a, b),
                                     _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

template <int T>
void int4_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t octets = w.cols_padded / 8;
  const std::int64_t octets_per_group = w.group / 8;
  const std::int64_t groups = w.groups();
  const std::int64_t rows_padded = w.blocks * kPackRows;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  const __m128i low_nibbles = _mm_set1_epi8(0x0F);
  auto broadcast_quad = [](const std::int8_t* q) {
    const std::int64_t four = static_cast<std::uint16_t>(q[0]) |
                              (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[1])) << 16) |
                              (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[2])) << 32) |
                              (static_cast<std::int64_t>(static_cast<std::uint16_t>(q[3])) << 48);
    return _mm256_set1_epi64x(four);
  };
  __m256 result[2][T];  // [rows 0-7, 8-15][token]
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) result[h][t] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i acc[4][T];
    for (int q = 0; q < 4; ++q)
      for (int t = 0; t < T; ++t) acc[q][t] = _mm256_setzero_si256();
    const std::int64_t k1 = std::min(octets, (g + 1) * octets_per_group);
    for (std::int64_t k = g * octets_per_group; k < k1; ++k) {
      __m256i x0[T], x1[T];
      for (int t = 0; t < T; ++t) {
        x0[t] = broadcast_quad(xq + t * x.cols_padded + k * 8);
        x1[t] = broadcast_quad(xq + t * x.cols_padded + k * 8 + 4);
      }
      for (int q = 0; q < 4; ++q) {
        const __m128i raw = _mm_load_si128(reinterpret_cast<const __m128i*>(wb + k * 64 + q * 16));
        const __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(raw, low_nibbles));
        const __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low_nibbles));
        for (int t = 0; t < T; ++t) {
          acc[q][t] = _mm256_add_epi32(acc[q][t], _mm256_add_epi32(_mm256_madd_epi16(lo, x0[t]),
                                                                   _mm256_madd_epi16(hi, x1[t])));
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 scale =
          _mm256_loadu_ps(w.group_scale.data() + g * rows_padded + block * kPackRows + h * 8);
      for (int t = 0; t < T; ++t) {
        const __m256i exact = _mm256_sub_epi32(
            row_sums(acc[2 * h][t], acc[2 * h + 1][t]),
            _mm256_set1_epi32(8 * x.group_sum[static_cast<std::size_t>((t0 + t) * groups + g)]));
        result[h][t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(exact), result[h][t]);
      }
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    const std::int64_t tok = t0 + t;
    alignas(32) float out[16];
    const __m256 token_scale = _mm256_set1_ps(x.scale[static_cast<std::size_t>(tok)]);
    _mm256_store_ps(out, _mm256_mul_ps(result[0][t], token_scale));
    _mm256_store_ps(out + 8, _mm256_mul_ps(result[1][t], token_scale));
    std::copy_n(out, rows, y + tok * y_stride + r0);
  }
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
  if (w.format == PackedFormat::Int4) {
    for (std::int64_t b = block_begin; b < block_end; ++b) {
      std::int64_t t = 0;
      for (; t + kTokenTile <= x.tokens; t += kTokenTile)
        int4_block<kTokenTile>(w, x, b, t, y, y_stride);
      if (t < x.tokens) int4_block<1>(w, x, b, t, y, y_stride);
    }
    return;
  }
  const bool int8 = w.format == PackedFormat::Int8;
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    std::int64_t t = 0;
    for (; t + kTokenTile <= x.tokens; t += kTokenTile) {
      int8 ? int8_block<kTokenTile>(w, x, b, t, y, y_stride)
           : bf16_block<kTokenTile>(w, x, b, t, y, y_stride);
    }
    if (t < x.tokens)
      int8 ? int8_block<1>(w, x, b, t, y, y_stride) : bf16_block<1>(w, x, b, t, y, y_stride);
  }
}

}  // namespace tandem::kernels
