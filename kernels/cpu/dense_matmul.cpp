#include "kernels/cpu/dense_matmul.h"

#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::kernels {

WeightMatrix WeightMatrix::slice_rows(std::int64_t begin, std::int64_t count) const {
  WeightMatrix s = *this;
  s.data =
      static_cast<const char*>(data) + begin * cols * static_cast<std::int64_t>(dtype_size(dtype));
  s.rows = count;
  s.first_row = first_row + begin;
  s.packed = nullptr;
  s.onednn = nullptr;
  return s;
}

void WeightMatrix::row_f32(std::int64_t r, float* out) const {
  const auto* src =
      static_cast<const char*>(data) + r * cols * static_cast<std::int64_t>(dtype_size(dtype));
  convert_to_f32(dtype, src, out, static_cast<std::size_t>(cols));
  if (block_scale != nullptr) {
    const std::int64_t scale_cols = (cols + block_cols - 1) / block_cols;
    const float* scales = block_scale + ((first_row + r) / block_rows) * scale_cols;
    for (std::int64_t c = 0; c < cols; ++c) out[c] *= scales[c / block_cols];
  }
}

void serial_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n > 0) body(0, n);
}

// Compiled for AVX-512, AVX2 and baseline x86-64; the loader picks the best the CPU has.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) float dot_f32(
    const float* a, const float* b, std::int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum + tail;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void axpy_f32(
    float a, const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void silu_mul(
    float* gate, const float* up, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Vec16 g = load16(gate + i);
    store16(gate + i, g * load16(up + i) / (1.0f + exp16(-g)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void matmul_xwt(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
                std::int64_t y_stride, const ParallelFor& parallel) {
  if (w.onednn != nullptr && m >= w.onednn_min_tokens) {
    w.onednn->run(x, m, y, y_stride, parallel);
    return;
  }
  if (w.packed != nullptr) {
    // One buffer per calling thread: activations are packed once per product.
    thread_local PackedActivations activations;
    pack_activations_for(*w.packed, x, m, activations);
    packed_matmul_all(*w.packed, activations, y, y_stride, w.packed_variant, parallel);
    return;
  }
  const std::int64_t k = w.cols;
  const bool direct = w.dtype == DType::F32 && w.block_scale == nullptr;
  parallel(w.rows, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> row(direct ? 0 : static_cast<std::size_t>(k));
    for (std::int64_t n = begin; n < end; ++n) {
      const float* wr;
      if (direct) {
        wr = static_cast<const float*>(w.data) + n * k;
      } else {
        w.row_f32(n, row.data());
        wr = row.data();
      }
      for (std::int64_t i = 0; i < m; ++i) y[i * y_stride + n] = dot_f32(x + i * k, wr, k);
    }
  });
}

void matmul_xw(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
               const ParallelFor& parallel) {
  const std::int64_t rows = w.rows;
  const std::int64_t cols = w.cols;
  // Split the output columns so threads never write the same element; each converts the
  // rows it needs.
  constexpr std::int64_t kColumnBlock = 64;
  const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  parallel(blocks, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t c0 = b0 * kColumnBlock;
    const std::int64_t c1 = std::min(cols, b1 * kColumnBlock);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t i = 0; i < m; ++i) std::fill(y + i * cols + c0, y + i * cols + c1, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      w.row_f32(r, row.data());
      for (std::int64_t i = 0; i < m; ++i) {
        const float xr = x[i * rows + r];
        float* yi = y + i * cols;
        for (std::int64_t c = c0; c < c1; ++c) yi[c] += xr * row[c];
      }
    }
  });
}

}  // namespace tandem::kernels
