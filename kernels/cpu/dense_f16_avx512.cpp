// FP16 weight rows read in place for matmul_xwt, compiled for AVX-512: each 16 values widened
// by one VCVTPH2PS. Converted to fp32 rows first (with F16C, eight values an instruction), an
// FP16 model used as stored still read its weights at a quarter of its memory's speed.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include "kernels/cpu/dense_f16.h"
#include "kernels/cpu/row_dots.h"

namespace tandem::kernels {
namespace row_dots {

// An FP16 weight's bits (std::uint16_t is BF16 in row_dots.h).
struct F16Bits {
  std::uint16_t bits;
};

inline __attribute__((always_inline)) Vec16 load16w(const F16Bits* p) {
  const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  Vec16 out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
inline __attribute__((always_inline)) float weight_value(F16Bits v) {
  return f16_to_f32(v.bits);
}

}  // namespace row_dots

void dot_rows_f16_avx512(const float* x, std::int64_t m, std::int64_t k,
                         const std::uint16_t* const* w, std::int64_t count, float* y,
                         std::int64_t y_stride) {
  row_dots::dot_rows_of(x, m, k, reinterpret_cast<const row_dots::F16Bits* const*>(w), count, y,
                        y_stride);
}

}  // namespace tandem::kernels
