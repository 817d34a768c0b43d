// Dense matrix products of fp32 activations with stored weights of any supported type.
// This is the reference path: weights are converted row by row to fp32 (fp8 with its block
// scales applied) and every product accumulates in fp32.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa.h"

namespace tandem::kernels {

struct PackedMatrix;
class OnednnMatmul;

// A row-major weight matrix [rows x cols] in place (usually memory-mapped), optionally with
// DeepSeek-V3-style block scales: value = stored * scale[row / block_rows][col / block_cols].
struct WeightMatrix {
  DType dtype = DType::F32;
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  const float* block_scale = nullptr;  // [ceil(total_rows / block_rows), ceil(cols / block_cols)]
  std::int64_t block_rows = 128;
  std::int64_t block_cols = 128;
  std::int64_t first_row = 0;  // offset of row 0 within the stored tensor (for block scales)
  // When set, products use these pre-packed weights (INT8 or BF16) with the given kernel
  // variant instead of converting the stored rows. Slices never carry it.
  const PackedMatrix* packed = nullptr;
  CpuVariant packed_variant = CpuVariant::Scalar;
  // When set, products of at least `onednn_min_tokens` tokens go through oneDNN
  // (kernels/cpu/onednn_matmul.h) instead. Slices never carry it.
  const OnednnMatmul* onednn = nullptr;
  std::int64_t onednn_min_tokens = 1;

  // Rows [begin, begin + count) as a matrix of their own.
  WeightMatrix slice_rows(std::int64_t begin, std::int64_t count) const;
  // Writes row `r` (0 <= r < rows) as fp32 into `out` (cols elements).
  void row_f32(std::int64_t r, float* out) const;
};

// Runs body(begin, end) over [0, n) split into chunks, possibly on several threads.
using ParallelFor = std::function<void(
    std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body)>;

// Runs everything on the calling thread.
void serial_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body);

// y[m, n] = sum_k x[m, k] * W[n, k]   (x: [M x W.cols], y: [M x W.rows], both row-major;
// y rows are `y_stride` floats apart).
void matmul_xwt(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
                std::int64_t y_stride, const ParallelFor& parallel);

// y[m, c] = sum_r x[m, r] * W[r, c]   (x: [M x W.rows], y: [M x W.cols]).
void matmul_xw(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
               const ParallelFor& parallel);

// The fp32 dot product every path uses (several accumulators, so it vectorises).
float dot_f32(const float* a, const float* b, std::int64_t n);
// y = x / sqrt(mean(x^2) + eps) * weight over n values (RMSNorm), the squares summed as
// exactly as in double.
void rms_norm_f32(const float* x, const float* weight, std::int64_t n, double eps, float* y);
// y += a * x over n values.
void axpy_f32(float a, const float* x, float* y, std::int64_t n);
// gate[i] = SiLU(gate[i]) * up[i] over n values (the gated FFN's activation), SiLU(x) =
// x / (1 + e^-x) with a vectorised e^x within 2 ulp.
void silu_mul(float* gate, const float* up, std::int64_t n);
// x[i] = SiLU(x[i]) over n values, as silu_mul.
void silu(float* x, std::int64_t n);
// One row of a decaying outer-product update, read and written once: s = decay s + k u,
// then o += q s, over n values (the delta rule's state row, see gated_delta_net.cpp).
void decay_update_row(float* s, float decay, float k, const float* u, float q, float* o,
                      std::int64_t n);

// A gated FFN's activation. Silu: SiLU(gate) * up. ClampedSwiglu (gpt-oss): gate clamped
// from above and up on both sides at `limit`, then gate * sigmoid(alpha * gate) * (up + 1).
struct Glu {
  enum class Kind { Silu, ClampedSwiglu };
  Kind kind = Kind::Silu;
  float alpha = 0.0f;
  float limit = 0.0f;
};
// gate[i] = the activation of gate[i] and up[i], over n values.
void glu(const Glu& g, float* gate, const float* up, std::int64_t n);

}  // namespace tandem::kernels
