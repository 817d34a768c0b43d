// INT8 and INT4 for CPUs with AVX-VNNI (the VEX form of VPDPBUSD) but no AVX-512: recent
// Intel client cores and E-core Xeons. Same packed layout and the same exact integer sums as
// the other variants: the unsigned stored weights (w + 128, or nibbles 0..15) times the signed
// activations, the offset taken back out per token (INT8) or per group (INT4). The AVX2
// variant hands INT8 and INT4 products here when the CPU has AVX-VNNI.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed_int4_ymm.h"
#include "kernels/cpu/packed_matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 4;

template <int T>
void int8_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t quads = w.cols_padded / 4;
  const std::uint8_t* wb = w.block(block);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  __m256i acc[2][T];  // [rows 0-7, 8-15][token]
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_si256();
  for (std::int64_t k = 0; k < quads; ++k) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k * 64));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k * 64 + 32));
    for (int t = 0; t < T; ++t) {
      std::int32_t quad;
      __builtin_memcpy(&quad, xq + t * x.cols_padded + k * 4, 4);
      const __m256i xv = _mm256_set1_epi32(quad);
      acc[0][t] = _mm256_dpbusd_avx_epi32(acc[0][t], w0, xv);
      acc[1][t] = _mm256_dpbusd_avx_epi32(acc[1][t], w1, xv);
    }
  }
  const std::int64_t r0 = block * kPackRows;
  const std::int64_t rows = std::min(kPackRows, w.rows - r0);
  for (int t = 0; t < T; ++t) {
    const std::int64_t tok = t0 + t;
    const __m256i offset = _mm256_set1_epi32(128 * x.q_sum[static_cast<std::size_t>(tok)]);
    alignas(32) std::int32_t sums[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums), _mm256_sub_epi32(acc[0][t], offset));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8), _mm256_sub_epi32(acc[1][t], offset));
    for (std::int64_t lane = 0; lane < rows; ++lane) {
      y[tok * y_stride + r0 + lane] = static_cast<float>(sums[lane]) *
                                      w.row_scale[static_cast<std::size_t>(r0 + lane)] *
                                      x.scale[static_cast<std::size_t>(tok)];
    }
  }
}

struct VnniDot {
  static __m256i add(__m256i acc, __m256i lo, __m256i hi, __m256i x0, __m256i x1) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, lo, x0), hi, x1);
  }
};

template <int T>
void int4_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, float* y, std::int64_t y_stride) {
  if (w.format == PackedFormat::Mxfp4)
    int4_block_ymm<VnniDot, T, true>(w, x, block, t0, y, y_stride);
  else
    int4_block_ymm<VnniDot, T, false>(w, x, block, t0, y, y_stride);
}
template <int T>
void run_block(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
               std::int64_t t0, float* y, std::int64_t y_stride) {
  if (w.format == PackedFormat::Int8) {
    int8_block<T>(w, x, block, t0, y, y_stride);
  } else {
    int4_block<T>(w, x, block, t0, y, y_stride);
  }
}

}  // namespace

void packed_matmul_avx_vnni(const PackedMatrix& w, const PackedActivations& x, float* y,
                            std::int64_t y_stride, std::int64_t block_begin,
                            std::int64_t block_end) {
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    std::int64_t t = 0;
    for (; t + kTokenTile <= x.tokens; t += kTokenTile)
      run_block<kTokenTile>(w, x, b, t, y, y_stride);
    switch (x.tokens - t) {
      case 1:
        run_block<1>(w, x, b, t, y, y_stride);
        break;
      case 2:
        run_block<2>(w, x, b, t, y, y_stride);
        break;
      case 3:
        run_block<3>(w, x, b, t, y, y_stride);
        break;
      default:
        break;
    }
  }
}

}  // namespace tandem::kernels
