#include "kernels/cpu/dense_matmul.h"

#include "kernels/cpu/dense_f16.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed/matmul.h"
#include "kernels/cpu/row_dots.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::kernels {

using row_dots::dot_lanes;
using row_dots::dot_rows_of;
using row_dots::load16w;

WeightMatrix WeightMatrix::slice_rows(std::int64_t begin, std::int64_t count) const {
  WeightMatrix s = *this;
  s.data = static_cast<const char*>(data) + dtype_bytes(dtype, begin * cols);
  s.rows = count;
  s.first_row = first_row + begin;
  s.packed = nullptr;
  s.onednn = nullptr;
  return s;
}

void WeightMatrix::row_f32(std::int64_t r, float* out) const {
  const auto* src = static_cast<const char*>(data) + dtype_bytes(dtype, r * cols);
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

namespace {

// The GLUs' gating, in V's lanes: gate = gate / (1 + e^-gate) * up.
template <class V>
inline __attribute__((always_inline)) void silu_mul_lanes(float* gate, const float* up,
                                                          std::int64_t n) {
  constexpr int L = kLanesOf<V>;
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V g = load_lanes<V>(gate + i);
    store_lanes(gate + i, g * load_lanes<V>(up + i) / (1.0f + exp_of(-g)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

template <class V>
inline __attribute__((always_inline)) void silu_lanes(float* x, std::int64_t n) {
  constexpr int L = kLanesOf<V>;
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V v = load_lanes<V>(x + i);
    store_lanes(x + i, v / (1.0f + exp_of(-v)));
  }
  for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

template <class V>
inline __attribute__((always_inline)) void clamped_swiglu_lanes(float* gate, const float* up,
                                                                std::int64_t n, float alpha,
                                                                float limit) {
  constexpr int L = kLanesOf<V>;
  std::int64_t i = 0;
  const V top = V{} + limit, bottom = V{} - limit;
  for (; i + L <= n; i += L) {
    V g = load_lanes<V>(gate + i);
    g = g > top ? top : g;
    V u = load_lanes<V>(up + i);
    u = u > top ? top : u;
    u = u < bottom ? bottom : u;
    store_lanes(gate + i, g / (1.0f + exp_of(-(alpha * g))) * (u + 1.0f));
  }
  for (; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

TANDEM_BY_WIDTH(float dot_f32_at_width(const float* a, const float* b, std::int64_t n),
                return dot_lanes<V>(a, b, n))
TANDEM_BY_WIDTH(void silu_mul_at_width(float* gate, const float* up, std::int64_t n),
                silu_mul_lanes<V>(gate, up, n))
TANDEM_BY_WIDTH(void silu_at_width(float* x, std::int64_t n), silu_lanes<V>(x, n))
TANDEM_BY_WIDTH(void clamped_swiglu_at_width(float* gate, const float* up, std::int64_t n,
                                             float alpha, float limit),
                clamped_swiglu_lanes<V>(gate, up, n, alpha, limit))

}  // namespace

float dot_f32(const float* a, const float* b, std::int64_t n) {
  return dot_f32_at_width(a, b, n);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void rms_norm_f32(
    const float* x, const float* weight, std::int64_t n, double eps, float* y) {
  // Squares summed in 16 float lanes over stretches of up to 256 values, each stretch's total
  // added in double: vectorised, and as exact as the double loop it replaced to well below
  // float's rounding of the result. A row shorter than a stretch (a head's 64 or 128 values,
  // normed per head) is one short stretch, not a serial double loop (Qwen3's query heads at
  // 512 tokens: 1.3 ms of a 128 ms layer).
  constexpr int kLanes = 16;
  constexpr std::int64_t kStretch = 256;
  double ss = 0.0;
  std::int64_t i = 0;
  while (i + kLanes <= n) {
    const std::int64_t end = i + std::min(kStretch, (n - i) / kLanes * kLanes);
    float acc[kLanes] = {};
    for (std::int64_t j = i; j < end; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * x[j + l];
    }
    float stretch = 0.0f;
    for (int l = 0; l < kLanes; ++l) stretch += acc[l];
    ss += stretch;
    i = end;
  }
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (std::int64_t k = 0; k < n; ++k) y[k] = x[k] * scale * weight[k];
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void axpy_f32(
    float a, const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void silu_mul(float* gate, const float* up, std::int64_t n) {
  silu_mul_at_width(gate, up, n);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void decay_update_row(
    float* s, float decay, float k, const float* u, float q, float* o, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = decay * s[i] + k * u[i];
    s[i] = v;
    o[i] += q * v;
  }
}

void silu(float* x, std::int64_t n) {
  silu_at_width(x, n);
}

void clamped_swiglu(float* gate, const float* up, std::int64_t n, float alpha, float limit) {
  clamped_swiglu_at_width(gate, up, n, alpha, limit);
}

void glu(const Glu& g, float* gate, const float* up, std::int64_t n) {
  if (g.kind == Glu::Kind::ClampedSwiglu)
    clamped_swiglu(gate, up, n, g.alpha, g.limit);
  else
    silu_mul(gate, up, n);
}

namespace {

TANDEM_BY_WIDTH(void dot_rows(const float* x, std::int64_t m, std::int64_t k, const float* const* w,
                              std::int64_t count, float* y, std::int64_t y_stride),
                dot_rows_of<V>(x, m, k, w, count, y, y_stride))

// The same over BF16 rows read in place: a router's few rows are read once a token, and
// converting them to fp32 first cost three times the reading (Qwen3-30B-A3B's 128 x 2048:
// 34 us a layer against 11).
TANDEM_BY_WIDTH(void dot_rows_bf16(const float* x, std::int64_t m, std::int64_t k,
                                   const std::uint16_t* const* w, std::int64_t count, float* y,
                                   std::int64_t y_stride),
                dot_rows_of<V>(x, m, k, w, count, y, y_stride))

}  // namespace

void matmul_xwt(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
                std::int64_t y_stride, const ParallelFor& parallel) {
  if (w.onednn != nullptr && m >= w.onednn_min_tokens) {
    w.onednn->run(x, m, y, y_stride, parallel);
    return;
  }
  if (w.packed != nullptr) {
    // One buffer per calling thread: activations are packed once per product.
    thread_local PackedActivations activations;
    pack_activations_for(*w.packed, x, m, activations, w.packed_variant, &parallel);
    packed_matmul_all(*w.packed, activations, y, y_stride, w.packed_variant, parallel);
    return;
  }
  if (gguf_matmul_supports(w.dtype)) {
    gguf_matmul_xwt(x, m, w, y, y_stride, parallel, active_variant());
    return;
  }
  const std::int64_t k = w.cols;
  const bool direct = w.dtype == DType::F32 && w.block_scale == nullptr;
  // 16-bit rows read where they lie: BF16 always, FP16 with the AVX-512 kernels
  // (`--cpu-variant avx2` and CPUs without AVX-512 convert FP16 rows first).
  using HalfRows = void (*)(const float*, std::int64_t, std::int64_t, const std::uint16_t* const*,
                            std::int64_t, float*, std::int64_t);
  HalfRows half_rows = nullptr;
  if (w.block_scale == nullptr && w.dtype == DType::BF16) half_rows = dot_rows_bf16;
  if (w.block_scale == nullptr && w.dtype == DType::F16 && active_variant() >= CpuVariant::Avx512 &&
      detect_isa().usable.f16c)
    half_rows = dot_rows_f16_avx512;
  // Sixteen weight rows at a time, each token's activations read once for all of them: row
  // by row, a prompt's activations (megabytes) would stream from memory once per row.
  constexpr std::int64_t kRowBlock = 16;
  // Rows read in place (fp32 or 16-bit), for a prompt: a thread takes a task of 32 tokens
  // through the rows, 16 at a time, its activations and the rows it reads (a router's few)
  // staying in the second-level cache. Split by rows alone, every thread read the whole prompt's
  // activations from beyond that cache once per 16 rows: Qwen3-30B-A3B's router (128 x 2048 BF16)
  // at 512 tokens took 3.4-3.8 ms a layer on two threads of a Xeon, 3.9-4.4 on one; split by
  // tokens 2.1-2.2 (docs/benchmarks.md, "The router's product and the experts' sums split by
  // token").
  const auto rows_of = [&](std::int64_t t0, std::int64_t t1, std::int64_t begin, std::int64_t end) {
    for (std::int64_t first = begin; first < end; first += kRowBlock) {
      const std::int64_t count = std::min(kRowBlock, end - first);
      if (half_rows != nullptr) {
        const std::uint16_t* wr[kRowBlock];
        for (std::int64_t r = 0; r < count; ++r)
          wr[r] = static_cast<const std::uint16_t*>(w.data) + (first + r) * k;
        half_rows(x + t0 * k, t1 - t0, k, wr, count, y + t0 * y_stride + first, y_stride);
      } else {  // fp32 rows (`direct`)
        const float* wr[kRowBlock];
        for (std::int64_t r = 0; r < count; ++r)
          wr[r] = static_cast<const float*>(w.data) + (first + r) * k;
        dot_rows(x + t0 * k, t1 - t0, k, wr, count, y + t0 * y_stride + first, y_stride);
      }
    }
  };
  // Tasks of 32 tokens by 16 rows, the rows of one token task after each other, so that a
  // thread's range of them takes a token task's rows in turn and a many-core machine still has
  // a task for every thread.
  constexpr std::int64_t kTokenTask = 32;
  if ((direct || half_rows != nullptr) && m >= 2 * kTokenTask) {
    const std::int64_t row_blocks = (w.rows + kRowBlock - 1) / kRowBlock;
    parallel((m + kTokenTask - 1) / kTokenTask * row_blocks,
             [&](std::int64_t begin, std::int64_t end) {
               for (std::int64_t task = begin; task < end; ++task) {
                 const std::int64_t t0 = task / row_blocks * kTokenTask;
                 const std::int64_t r0 = task % row_blocks * kRowBlock;
                 rows_of(t0, std::min(m, t0 + kTokenTask), r0, std::min(w.rows, r0 + kRowBlock));
               }
             });
    return;
  }
  parallel(w.rows, [&](std::int64_t begin, std::int64_t end) {
    if (direct || half_rows != nullptr) {
      rows_of(0, m, begin, end);
      return;
    }
    // Converted rows in a buffer per thread, grown once: a task's own would be allocated and
    // zeroed (16 rows: 448 KB at DeepSeek-V3's 7168 columns) for every task of every product.
    thread_local std::vector<float> rows;
    if (rows.size() < static_cast<std::size_t>(kRowBlock * k))
      rows.resize(static_cast<std::size_t>(kRowBlock * k));
    const float* wr[kRowBlock];
    for (std::int64_t first = begin; first < end; first += kRowBlock) {
      const std::int64_t count = std::min(kRowBlock, end - first);
      for (std::int64_t r = 0; r < count; ++r) {
        w.row_f32(first + r, rows.data() + r * k);
        wr[r] = rows.data() + r * k;
      }
      dot_rows(x, m, k, wr, count, y + first, y_stride);
    }
  });
}

namespace {

constexpr std::int64_t kColumnBlock = 64;

// y[i, c0 + c] = sum_r x[i, r] * wb[r, c] for c < width, where wb's `rows` rows lie
// w_stride values apart and hold 64 columns each (zero past width). Four tokens at a time keep
// 16 vectors of sums in registers: each loaded weight vector serves four tokens. Sums run over
// r in order, as a plain loop would, whatever the weights' type.
template <int T, typename W>
inline __attribute__((always_inline)) void xw_tokens(const float* x, std::int64_t rows, const W* wb,
                                                     std::int64_t w_stride, std::int64_t width,
                                                     float* y, std::int64_t y_stride) {
  Vec16 acc[T][4];
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = Vec16{};
  for (std::int64_t r = 0; r < rows; ++r) {
    const W* row = wb + r * w_stride;
    const Vec16 w0 = load16w(row), w1 = load16w(row + 16), w2 = load16w(row + 32),
                w3 = load16w(row + 48);
    for (int t = 0; t < T; ++t) {
      const float xv = x[t * rows + r];
      acc[t][0] += xv * w0;
      acc[t][1] += xv * w1;
      acc[t][2] += xv * w2;
      acc[t][3] += xv * w3;
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(64) float out[kColumnBlock];
    for (int j = 0; j < 4; ++j) store16(out + 16 * j, acc[t][j]);
    std::copy_n(out, width, y + t * y_stride);
  }
}

template <typename W>
inline __attribute__((always_inline)) void xw_block_of(const float* x, std::int64_t m,
                                                       std::int64_t rows, const W* wb,
                                                       std::int64_t w_stride, std::int64_t width,
                                                       float* y, std::int64_t y_stride) {
  std::int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    xw_tokens<4>(x + i * rows, rows, wb, w_stride, width, y + i * y_stride, y_stride);
  for (; i < m; ++i)
    xw_tokens<1>(x + i * rows, rows, wb, w_stride, width, y + i * y_stride, y_stride);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void xw_block(
    const float* x, std::int64_t m, std::int64_t rows, const float* wb, std::int64_t w_stride,
    std::int64_t width, float* y, std::int64_t y_stride) {
  xw_block_of(x, m, rows, wb, w_stride, width, y, y_stride);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void xw_block_bf16(
    const float* x, std::int64_t m, std::int64_t rows, const std::uint16_t* wb,
    std::int64_t w_stride, std::int64_t width, float* y, std::int64_t y_stride) {
  xw_block_of(x, m, rows, wb, w_stride, width, y, y_stride);
}

}  // namespace

void matmul_xw(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
               const ParallelFor& parallel) {
  const std::int64_t rows = w.rows;
  const std::int64_t cols = w.cols;
  const bool scaled = w.block_scale != nullptr;
  // Blocks of 64 output columns, so threads never write the same element. FP32 and BF16 rows
  // are read where they lie; other formats are converted once per task, whole rows at a time.
  // (Converting every row whole for each block cost latent attention's absorbed key product,
  // 128 heads of 128 x 512 BF16, 4.5 ms a decoded token and layer on one Zen 5 core.)
  const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  parallel(blocks, [&](std::int64_t b0, std::int64_t b1) {
    const float* f32 = nullptr;
    const std::uint16_t* bf16 = nullptr;
    std::vector<float> converted;
    if (!scaled && w.dtype == DType::F32) {
      f32 = static_cast<const float*>(w.data);
    } else if (!scaled && w.dtype == DType::BF16) {
      bf16 = static_cast<const std::uint16_t*>(w.data);
    } else {
      converted.resize(static_cast<std::size_t>(rows * cols));
      for (std::int64_t r = 0; r < rows; ++r) w.row_f32(r, converted.data() + r * cols);
      f32 = converted.data();
    }
    std::vector<float> narrow;  // a last block narrower than 64 columns, zero past its width
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t c0 = b * kColumnBlock;
      const std::int64_t width = std::min(kColumnBlock, cols - c0);
      if (width == kColumnBlock) {
        if (bf16 != nullptr)
          xw_block_bf16(x, m, rows, bf16 + c0, cols, width, y + c0, cols);
        else
          xw_block(x, m, rows, f32 + c0, cols, width, y + c0, cols);
        continue;
      }
      narrow.assign(static_cast<std::size_t>(rows * kColumnBlock), 0.0f);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < width; ++c)
          narrow[static_cast<std::size_t>(r * kColumnBlock + c)] =
              bf16 != nullptr ? bf16_to_f32(bf16[r * cols + c0 + c]) : f32[r * cols + c0 + c];
      xw_block(x, m, rows, narrow.data(), kColumnBlock, width, y + c0, cols);
    }
  });
}

}  // namespace tandem::kernels
