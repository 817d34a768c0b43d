// INT8 and INT4 for CPUs with AVX-VNNI (the VEX form of VPDPBUSD) but no AVX-512: recent
// Intel client cores and E-core Xeons. Same packed layout and the same exact integer sums as
// the other variants: the unsigned stored weights (w + 128, or nibbles 0..15) times the signed
// activations, the offset taken back out per activation group. The AVX2
// variant hands INT8 and INT4 products here when the CPU has AVX-VNNI.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed/grouped_ymm.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 4;

struct VnniDot {
  static constexpr int kInt8Offset = 128;  // the stored bytes are multiplied as they are
  using Int8Weights = __m256i;
  static Int8Weights int8_weights(__m256i raw) { return raw; }
  static __m256i add_int8(__m256i acc, __m256i w, __m256i x) {
    return _mm256_dpbusd_avx_epi32(acc, w, x);
  }
  static __m256i add(__m256i acc, __m256i lo, __m256i hi, __m256i x0, __m256i x1) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, lo, x0), hi, x1);
  }
};

}  // namespace

void packed_matmul_avx_vnni(const PackedMatrix& w, const PackedActivations& x, float* y,
                            std::int64_t y_stride, std::int64_t block_begin,
                            std::int64_t block_end) {
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    const std::uint8_t* ahead = block_ahead(w, b, block_end);
    std::int64_t t = 0;
    for (; t + kTokenTile <= x.tokens; t += kTokenTile) {
      integer_block_ymm<VnniDot, kTokenTile>(w, x, b, t, y, y_stride,
                                             t + kTokenTile == x.tokens ? ahead : nullptr);
    }
    switch (x.tokens - t) {
      case 1:
        integer_block_ymm<VnniDot, 1>(w, x, b, t, y, y_stride, ahead);
        break;
      case 2:
        integer_block_ymm<VnniDot, 2>(w, x, b, t, y, y_stride, ahead);
        break;
      case 3:
        integer_block_ymm<VnniDot, 3>(w, x, b, t, y, y_stride, ahead);
        break;
      default:
        break;
    }
  }
}

}  // namespace tandem::kernels
