#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tandem::kernels {

void AlignedBytes::Free::operator()(std::uint8_t* p) const { std::free(p); }

AlignedBytes AlignedBytes::allocate(std::size_t bytes) {
  AlignedBytes a;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, std::max<std::size_t>(rounded, 64));
  if (p == nullptr) throw std::bad_alloc();
  a.data.reset(static_cast<std::uint8_t*>(p));
  a.size = rounded;
  return a;
}

std::size_t PackedMatrix::block_bytes() const {
  const std::size_t elem = format == PackedFormat::Int8 ? 1 : 2;
  return static_cast<std::size_t>(kPackRows * cols_padded) * elem;
}

namespace {

// Round to nearest (ties to even) for |v| < 2^22 without a libm call: adding 1.5 * 2^23
// pushes the fraction out of the mantissa.
inline int round_small(float v) {
  constexpr float kMagic = 12582912.0f;
  // Without -ffast-math the compiler keeps both operations, so the rounding happens.
  return static_cast<int>((v + kMagic) - kMagic);
}

PackedMatrix empty_packed(const WeightMatrix& s, PackedFormat f) {
  PackedMatrix p;
  p.format = f;
  p.rows = s.rows;
  p.cols = s.cols;
  p.cols_padded = f == PackedFormat::Int8 ? (s.cols + 3) / 4 * 4 : (s.cols + 1) / 2 * 2;
  p.blocks = (s.rows + kPackRows - 1) / kPackRows;
  p.bytes = AlignedBytes::allocate(static_cast<std::size_t>(p.blocks) * p.block_bytes());
  return p;
}

}  // namespace

PackedMatrix pack_int8(const WeightMatrix& source) {
  PackedMatrix p = empty_packed(source, PackedFormat::Int8);
  // Padding rows and columns hold weight 0 (stored 128), so they add nothing.
  std::memset(p.bytes.data.get(), 128, p.bytes.size);
  p.row_scale.assign(static_cast<std::size_t>(p.blocks * kPackRows), 0.0f);
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, row.data());
    float max_abs = 0.0f;
    for (float v : row) max_abs = std::max(max_abs, std::abs(v));
    const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
    p.row_scale[static_cast<std::size_t>(r)] = scale;
    const float inv_scale = 1.0f / scale;
    std::uint8_t* block = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t c = 0; c < source.cols; ++c) {
      const int q = round_small(row[static_cast<std::size_t>(c)] * inv_scale);
      block[(c / 4) * 64 + lane * 4 + c % 4] = static_cast<std::uint8_t>(std::clamp(q, -127, 127) + 128);
    }
  }
  return p;
}

PackedMatrix pack_bf16(const WeightMatrix& source) {
  PackedMatrix p = empty_packed(source, PackedFormat::Bf16);
  std::memset(p.bytes.data.get(), 0, p.bytes.size);
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, row.data());
    auto* block = reinterpret_cast<std::uint16_t*>(p.block(r / kPackRows));
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t c = 0; c < source.cols; ++c) {
      block[(c / 2) * 32 + lane * 2 + c % 2] = f32_to_bf16(row[static_cast<std::size_t>(c)]);
    }
  }
  return p;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out) {
  out.format = format;
  out.tokens = tokens;
  out.cols_padded = format == PackedFormat::Int8 ? (cols + 3) / 4 * 4 : (cols + 1) / 2 * 2;
  const std::size_t n = static_cast<std::size_t>(tokens * out.cols_padded);
  if (format == PackedFormat::Int8) {
    out.q.assign(n, 0);
    out.scale.resize(static_cast<std::size_t>(tokens));
    out.q_sum.resize(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) {
      const float* xt = x + t * cols;
      float max_abs = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::abs(xt[c]));
      const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
      const float inv = 1.0f / scale;
      std::int8_t* q = out.q.data() + t * out.cols_padded;
      std::int32_t sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const int v = round_small(xt[c] * inv);
        q[c] = static_cast<std::int8_t>(std::clamp(v, -127, 127));
        sum += q[c];
      }
      out.scale[static_cast<std::size_t>(t)] = scale;
      out.q_sum[static_cast<std::size_t>(t)] = sum;
    }
  } else {
    out.bf16.assign(n, 0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t c = 0; c < cols; ++c) out.bf16[static_cast<std::size_t>(t * out.cols_padded + c)] = f32_to_bf16(x[t * cols + c]);
    }
  }
}

void packed_matmul_scalar(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                          std::int64_t block_begin, std::int64_t block_end) {
  const std::int64_t kp = w.cols_padded;
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    const std::uint8_t* block = w.block(b);
    const std::int64_t rows = std::min(kPackRows, w.rows - b * kPackRows);
    for (std::int64_t t = 0; t < x.tokens; ++t) {
      for (std::int64_t lane = 0; lane < rows; ++lane) {
        const std::int64_t r = b * kPackRows + lane;
        if (w.format == PackedFormat::Int8) {
          const std::int8_t* q = x.q.data() + t * kp;
          std::int32_t acc = 0;
          for (std::int64_t c = 0; c < kp; ++c) acc += static_cast<std::int32_t>(block[(c / 4) * 64 + lane * 4 + c % 4]) * q[c];
          acc -= 128 * x.q_sum[static_cast<std::size_t>(t)];
          y[t * y_stride + r] = static_cast<float>(acc) * w.row_scale[static_cast<std::size_t>(r)] * x.scale[static_cast<std::size_t>(t)];
        } else {
          const auto* wb = reinterpret_cast<const std::uint16_t*>(block);
          const std::uint16_t* xb = x.bf16.data() + t * kp;
          float acc = 0.0f;
          for (std::int64_t c = 0; c < kp; c += 2) {
            acc += bf16_to_f32(wb[(c / 2) * 32 + lane * 2]) * bf16_to_f32(xb[c]) +
                   bf16_to_f32(wb[(c / 2) * 32 + lane * 2 + 1]) * bf16_to_f32(xb[c + 1]);
          }
          y[t * y_stride + r] = acc;
        }
      }
    }
  }
}

void packed_matmul(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                   std::int64_t block_begin, std::int64_t block_end, CpuVariant variant) {
  switch (variant) {
    case CpuVariant::Amx:  // AMX kernels are not written yet; AVX-512 runs on every AMX CPU.
    case CpuVariant::Avx512: packed_matmul_avx512(w, x, y, y_stride, block_begin, block_end); return;
    case CpuVariant::Avx2: packed_matmul_avx2(w, x, y, y_stride, block_begin, block_end); return;
    case CpuVariant::Scalar: packed_matmul_scalar(w, x, y, y_stride, block_begin, block_end); return;
  }
}

void packed_matmul_all(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                       CpuVariant variant, const ParallelFor& parallel) {
  // Four blocks per task: enough work per task, enough tasks to balance.
  constexpr std::int64_t kBlocksPerTask = 4;
  const std::int64_t tasks = (w.blocks + kBlocksPerTask - 1) / kBlocksPerTask;
  parallel(tasks, [&](std::int64_t t0, std::int64_t t1) {
    packed_matmul(w, x, y, y_stride, t0 * kBlocksPerTask, std::min(w.blocks, t1 * kBlocksPerTask), variant);
  });
}

}  // namespace tandem::kernels
