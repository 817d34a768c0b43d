// The INT4 product on 256-bit registers, shared by the AVX2 and AVX-VNNI kernels, which
// differ only in how they add four byte products into each 32-bit sum. Internal to
// kernels/cpu: include it from a file compiled for AVX2 (and AVX-VNNI where Dot needs it).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed_matmul.h"

namespace tandem::kernels {

// Dot::add(acc, lo, hi, x0, x1) adds lo . x0 + hi . x1 (unsigned nibbles 0..15 by signed
// activation bytes, four per 32-bit lane) to acc exactly. Exact sums per group, then one
// fused multiply-add per group, in group order, as the scalar reference. Fp4: MXFP4, whose
// codes a table lookup turns into the unsigned bytes 2 * value + 12 first.
template <class Dot, int T, bool Fp4>
inline void int4_block_ymm(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                           std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t octets = w.cols_padded / 8;
  const std::int64_t octets_per_group = w.group / 8;
  const std::int64_t groups = w.groups();
  const std::int64_t rows_padded = w.blocks * kPackRows;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const __m256i fp4_table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Biased)));
  constexpr int bias = Fp4 ? kMxfp4Bias : 8;
  __m256 result[2][T];  // [rows 0-7, 8-15][token]
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) result[h][t] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i acc[2][T];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_si256();
    const std::int64_t k1 = std::min(octets, (g + 1) * octets_per_group);
    for (std::int64_t k = g * octets_per_group; k < k1; ++k) {
      __m256i x0[T], x1[T];
      for (int t = 0; t < T; ++t) {
        std::int32_t quads[2];
        __builtin_memcpy(quads, xq + t * x.cols_padded + k * 8, 8);
        x0[t] = _mm256_set1_epi32(quads[0]);
        x1[t] = _mm256_set1_epi32(quads[1]);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i raw =
            _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k * 64 + h * 32));
        __m256i lo = _mm256_and_si256(raw, low_nibbles);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibbles);
        if constexpr (Fp4) {
          lo = _mm256_shuffle_epi8(fp4_table, lo);
          hi = _mm256_shuffle_epi8(fp4_table, hi);
        }
        for (int t = 0; t < T; ++t) acc[h][t] = Dot::add(acc[h][t], lo, hi, x0[t], x1[t]);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 scale =
          _mm256_loadu_ps(w.group_scale.data() + g * rows_padded + block * kPackRows + h * 8);
      for (int t = 0; t < T; ++t) {
        const __m256i exact = _mm256_sub_epi32(
            acc[h][t],
            _mm256_set1_epi32(bias * x.group_sum[static_cast<std::size_t>((t0 + t) * groups + g)]));
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

}  // namespace tandem::kernels
