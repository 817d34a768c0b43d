// FP16 weight rows multiplied where they lie (kernels/cpu/dense_f16_avx512.cpp). Internal to
// kernels/cpu: matmul_xwt calls it where the CPU has AVX-512; elsewhere FP16 rows are
// converted to fp32 first.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// y[i * y_stride + r] = dot_f32(x_i, w_r) for m tokens of k values and `count` FP16 rows.
void dot_rows_f16_avx512(const float* x, std::int64_t m, std::int64_t k,
                         const std::uint16_t* const* w, std::int64_t count, float* y,
                         std::int64_t y_stride);

}  // namespace tandem::kernels
