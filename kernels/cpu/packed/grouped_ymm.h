// The INT8, INT4 and MXFP4 products on 256-bit registers, shared by the AVX2 and AVX-VNNI
// kernels, which differ only in how they add four byte products into each 32-bit sum.
// Internal to kernels/cpu: include it from a file compiled for AVX2 (and AVX-VNNI where Dot
// needs it).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {

enum class YmmKind { Int8, Int4, Fp4 };

// Dot, the way four byte products are added into each 32-bit lane, exactly:
//   Dot::add(acc, lo, hi, x0, x1): lo . x0 + hi . x1 (unsigned nibbles or MXFP4 bytes by
//     signed activation bytes) added to acc;
//   Dot::Int8Weights Dot::int8_weights(raw): 32 stored INT8 bytes made ready once for all
//     tokens; Dot::add_int8(acc, weights, xv): their products with xv added to acc;
//   Dot::kInt8Offset: what each stored INT8 byte holds beyond the weight, as the sums see
//     it (128 when the unsigned bytes are multiplied as stored, 0 when made signed first).
// Exact sums per group, then one fused multiply-add per group, in group order, as the scalar
// reference: by the group's activation scale times the weights' (INT4 a second for its offset).
// `ahead`, when set, is the block to fetch into the caches meanwhile, a line per step: the
// next one, which the first tile over it would otherwise wait on memory for.
template <class Dot, int T, YmmKind K>
inline void grouped_block_ymm(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                              std::int64_t t0, float* y, std::int64_t y_stride,
                              const std::uint8_t* ahead) {
  constexpr std::int64_t kStepCols = K == YmmKind::Int8 ? 4 : 8;
  // What each sum starts from, times the group's activation sum: the weights' offset taken
  // away where the products see it (INT8's stored w + 128, MXFP4's 2w + 12).
  constexpr int start_factor = K == YmmKind::Int8  ? -Dot::kInt8Offset
                               : K == YmmKind::Fp4 ? -kMxfp4Bias
                                                   : 0;
  const std::int64_t steps = w.cols_padded / kStepCols;
  const std::int64_t steps_per_group = x.group / kStepCols;
  const std::int64_t groups = x.groups();
  const std::int64_t rows_padded = w.blocks * kPackRows;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const __m256i fp4_table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Biased)));
  __m256 result[2][T];  // [rows 0-7, 8-15][token]
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) result[h][t] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i acc[2][T];
    for (int t = 0; t < T; ++t) {
      const std::size_t at = static_cast<std::size_t>((t0 + t) * groups + g);
      // x.start is minus the stored weights' offset times the group's sum.
      const __m256i start =
          start_factor == 0 ? _mm256_setzero_si256() : _mm256_set1_epi32(x.start[at]);
      for (int h = 0; h < 2; ++h) acc[h][t] = start;
    }
    const std::int64_t k1 = std::min(steps, (g + 1) * steps_per_group);
    // INT4's steps of the group follow the group's header, INT8's a header per pair of groups.
    const std::int64_t step_base =
        K == YmmKind::Int4   ? w.int4_step_offset(g) - g * steps_per_group * 64
        : K == YmmKind::Int8 ? w.int8_step_offset(g * steps_per_group) - g * steps_per_group * 64
                             : 0;
    const std::uint8_t* gw = wb + step_base;
    if (K == YmmKind::Int4 && ahead != nullptr)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w.int4_header_offset(g)), _MM_HINT_T0);
    if (K == YmmKind::Int8 && ahead != nullptr && g % 2 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w.int8_header_offset(g)), _MM_HINT_T0);
    for (std::int64_t k = g * steps_per_group; k < k1; ++k) {
      if (ahead != nullptr)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + step_base + k * 64), _MM_HINT_T0);
      if constexpr (K == YmmKind::Int8) {
        __m256i xv[T];
        for (int t = 0; t < T; ++t) {
          std::int32_t quad;
          __builtin_memcpy(&quad, xq + t * x.cols_padded + k * 4, 4);
          xv[t] = _mm256_set1_epi32(quad);
        }
        for (int h = 0; h < 2; ++h) {
          const typename Dot::Int8Weights ready = Dot::int8_weights(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(gw + k * 64 + h * 32)));
          for (int t = 0; t < T; ++t) acc[h][t] = Dot::add_int8(acc[h][t], ready, xv[t]);
        }
      } else {
        __m256i x0[T], x1[T];
        for (int t = 0; t < T; ++t) {
          std::int32_t quads[2];
          __builtin_memcpy(quads, xq + t * x.cols_padded + k * 8, 8);
          x0[t] = _mm256_set1_epi32(quads[0]);
          x1[t] = _mm256_set1_epi32(quads[1]);
        }
        for (int h = 0; h < 2; ++h) {
          const __m256i raw =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gw + k * 64 + h * 32));
          __m256i lo = _mm256_and_si256(raw, low_nibbles);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibbles);
          if constexpr (K == YmmKind::Fp4) {
            lo = _mm256_shuffle_epi8(fp4_table, lo);
            hi = _mm256_shuffle_epi8(fp4_table, hi);
          }
          for (int t = 0; t < T; ++t) acc[h][t] = Dot::add(acc[h][t], lo, hi, x0[t], x1[t]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      __m256 w_scale = _mm256_setzero_ps(), w_offset = _mm256_setzero_ps();
      if constexpr (K == YmmKind::Fp4)
        w_scale =
            _mm256_loadu_ps(w.group_scale.data() + g * rows_padded + block * kPackRows + h * 8);
      if constexpr (K == YmmKind::Int8) {
        w_scale = _mm256_cvtph_ps(_mm_load_si128(
            reinterpret_cast<const __m128i*>(wb + w.int8_header_offset(g) + h * 16)));
      }
      if constexpr (K == YmmKind::Int4) {
        const std::uint8_t* header = wb + w.int4_header_offset(g) + h * 16;
        w_scale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(header)));
        w_offset = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(header + 32)));
      }
      for (int t = 0; t < T; ++t) {
        const std::size_t at = static_cast<std::size_t>((t0 + t) * groups + g);
        const __m256 scale = _mm256_mul_ps(w_scale, _mm256_set1_ps(x.scale[at]));
        result[h][t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(acc[h][t]), result[h][t]);
        if constexpr (K == YmmKind::Int4) {
          result[h][t] = _mm256_fmadd_ps(w_offset, _mm256_set1_ps(x.scaled_sum[at]), result[h][t]);
        }
      }
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    alignas(32) float out[16];
    for (int h = 0; h < 2; ++h) _mm256_store_ps(out + 8 * h, result[h][t]);
    std::copy_n(out, rows, y + (t0 + t) * y_stride + r0);
  }
}

// The product of block `block` for tokens [t0, t0 + T) in w's format (not BF16), fetching
// `ahead` (or nothing) meanwhile.
template <class Dot, int T>
inline void integer_block_ymm(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                              std::int64_t t0, float* y, std::int64_t y_stride,
                              const std::uint8_t* ahead) {
  switch (w.format) {
    case PackedFormat::Int8:
      grouped_block_ymm<Dot, T, YmmKind::Int8>(w, x, block, t0, y, y_stride, ahead);
      break;
    case PackedFormat::Int4:
      grouped_block_ymm<Dot, T, YmmKind::Int4>(w, x, block, t0, y, y_stride, ahead);
      break;
    case PackedFormat::Mxfp4:
      grouped_block_ymm<Dot, T, YmmKind::Fp4>(w, x, block, t0, y, y_stride, ahead);
      break;
    case PackedFormat::Bf16:
      break;
  }
}

// The block the last tile over `block` fetches ahead: the next one in [.., block_end), if any.
// (With one tile, that tile reads its own block from memory as it fetches the next; with more,
// the later tiles find theirs in the caches and the last one has memory to spare.)
inline const std::uint8_t* block_ahead(const PackedMatrix& w, std::int64_t block,
                                       std::int64_t block_end) {
  return block + 1 < block_end ? w.block(block + 1) : nullptr;
}

}  // namespace tandem::kernels
