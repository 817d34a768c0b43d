#include "kernels/cpu/packed_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace tandem::kernels {

std::size_t PackedMatrix::block_bytes() const {
  switch (format) {
    case PackedFormat::Int8:
      return static_cast<std::size_t>(kPackRows * cols_padded);
    case PackedFormat::Int4:
    case PackedFormat::Mxfp4:
      return static_cast<std::size_t>(kPackRows * cols_padded / 2);
    case PackedFormat::Bf16:
      return static_cast<std::size_t>(kPackRows * cols_padded) * 2;
  }
  return 0;
}

std::uint64_t packed_matrix_bytes(const PackedMatrix& m) {
  return static_cast<std::uint64_t>(m.blocks) * m.block_bytes() +
         (m.row_scale.size() + m.group_scale.size()) * sizeof(float);
}

namespace {

// Round to nearest (ties to even) for |v| < 2^22 without a libm call: adding 1.5 * 2^23
// pushes the fraction out of the mantissa.
inline int round_small(float v) {
  constexpr float kMagic = 12582912.0f;
  // Without -ffast-math the compiler keeps both operations, so the rounding happens.
  return static_cast<int>((v + kMagic) - kMagic);
}

std::int64_t padded_cols(std::int64_t cols, PackedFormat f) {
  switch (f) {
    case PackedFormat::Int8:
      return (cols + 3) / 4 * 4;
    case PackedFormat::Int4:
    case PackedFormat::Mxfp4:
      return (cols + 7) / 8 * 8;
    case PackedFormat::Bf16:
      return (cols + 1) / 2 * 2;
  }
  return cols;
}

PackedMatrix empty_packed(const WeightMatrix& s, PackedFormat f) {
  PackedMatrix p = packed_shape(s.rows, s.cols, f);
  p.bytes = AlignedBytes::allocate(static_cast<std::size_t>(p.blocks) * p.block_bytes());
  return p;
}

}  // namespace

PackedMatrix packed_shape(std::int64_t rows, std::int64_t cols, PackedFormat format,
                          std::int64_t group) {
  PackedMatrix p;
  p.format = format;
  p.rows = rows;
  p.cols = cols;
  p.cols_padded = padded_cols(cols, format);
  p.blocks = (rows + kPackRows - 1) / kPackRows;
  p.group = format == PackedFormat::Int4 ? group : format == PackedFormat::Mxfp4 ? kMxfp4Group : 0;
  return p;
}

std::size_t packed_scale_count(const PackedMatrix& m) {
  switch (m.format) {
    case PackedFormat::Int8:
      return static_cast<std::size_t>(m.blocks * kPackRows);
    case PackedFormat::Int4:
    case PackedFormat::Mxfp4:
      return static_cast<std::size_t>(m.groups() * m.blocks * kPackRows);
    case PackedFormat::Bf16:
      return 0;
  }
  return 0;
}

void unpack_row(const PackedMatrix& m, std::int64_t r, float* out) {
  const std::uint8_t* block = m.block(r / kPackRows);
  const std::int64_t lane = r % kPackRows;
  for (std::int64_t c = 0; c < m.cols; ++c) {
    switch (m.format) {
      case PackedFormat::Int8:
        out[c] = static_cast<float>(block[(c / 4) * 64 + lane * 4 + c % 4] - 128) *
                 m.row_scale[static_cast<std::size_t>(r)];
        break;
      case PackedFormat::Int4:
      case PackedFormat::Mxfp4: {
        const std::uint8_t byte = block[(c / 8) * 64 + lane * 4 + c % 4];
        const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
        const int q =
            m.format == PackedFormat::Int4 ? nibble - 8 : kMxfp4Biased[nibble] - kMxfp4Bias;
        out[c] = static_cast<float>(q) *
                 m.group_scale[static_cast<std::size_t>((c / m.group) * m.blocks * kPackRows + r)];
        break;
      }
      case PackedFormat::Bf16:
        out[c] = bf16_to_f32(
            reinterpret_cast<const std::uint16_t*>(block)[(c / 2) * 32 + lane * 2 + c % 2]);
        break;
    }
  }
}

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
      block[(c / 4) * 64 + lane * 4 + c % 4] =
          static_cast<std::uint8_t>(std::clamp(q, -127, 127) + 128);
    }
  }
  return p;
}

PackedMatrix pack_int4(const WeightMatrix& source, std::int64_t group) {
  if (group <= 0 || group % 8 != 0)
    throw std::invalid_argument("the INT4 group size must be a positive multiple of 8");
  PackedMatrix p = empty_packed(source, PackedFormat::Int4);
  p.group = group;  // before groups() below
  // Padding holds weight 0 (nibbles 8) in both halves of each byte.
  std::memset(p.bytes.data.get(), 0x88, p.bytes.size);
  const std::int64_t rows_padded = p.blocks * kPackRows;
  const std::int64_t groups = p.groups();
  p.group_scale.assign(static_cast<std::size_t>(groups * rows_padded), 0.0f);
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, row.data());
    std::uint8_t* block = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * group;
      const std::int64_t c1 = std::min(source.cols, c0 + group);
      // 16 levels, -8..7: the weight of largest magnitude maps to -8 (the scale takes its
      // sign), so the step is max/8 rather than max/7. Clipping it a little lowers the error
      // of all the others: the scale is the one of max/8 * {1, 0.95, ..., 0.6} with the least
      // squared error over the group.
      float extreme = 0.0f;
      for (std::int64_t c = c0; c < c1; ++c) {
        if (std::abs(row[static_cast<std::size_t>(c)]) > std::abs(extreme))
          extreme = row[static_cast<std::size_t>(c)];
      }
      float scale = 1.0f;
      if (extreme != 0.0f) {
        float best = -1.0f;
        for (int step = 0; step <= 8; ++step) {
          const float candidate = -extreme / 8.0f * (1.0f - 0.05f * static_cast<float>(step));
          const float inv = 1.0f / candidate;
          float err = 0.0f;
          for (std::int64_t c = c0; c < c1; ++c) {
            const float v = row[static_cast<std::size_t>(c)];
            const float d =
                v - static_cast<float>(std::clamp(round_small(v * inv), -8, 7)) * candidate;
            err += d * d;
          }
          if (best < 0 || err < best) {
            best = err;
            scale = candidate;
          }
        }
      }
      p.group_scale[static_cast<std::size_t>(g * rows_padded + r)] = scale;
      const float inv_scale = 1.0f / scale;
      for (std::int64_t c = c0; c < c1; ++c) {
        const int q =
            std::clamp(round_small(row[static_cast<std::size_t>(c)] * inv_scale), -8, 7) + 8;
        std::uint8_t& byte = block[(c / 8) * 64 + lane * 4 + c % 4];
        byte = (c % 8) < 4 ? static_cast<std::uint8_t>((byte & 0xF0) | q)
                           : static_cast<std::uint8_t>((byte & 0x0F) | (q << 4));
      }
    }
  }
  return p;
}

PackedMatrix pack_mxfp4(const WeightMatrix& source) {
  if (source.dtype != DType::F4E2M1 || source.block_scale == nullptr || source.block_rows != 1 ||
      source.block_cols != kMxfp4Group || source.cols % 2 != 0) {
    throw std::invalid_argument(
        "MXFP4 packing keeps weights stored as MXFP4 (FP4 codes with a scale per row and 32 "
        "columns); these are stored otherwise");
  }
  PackedMatrix p = empty_packed(source, PackedFormat::Mxfp4);
  std::memset(p.bytes.data.get(), 0, p.bytes.size);  // code 0 is +0
  const std::int64_t rows_padded = p.blocks * kPackRows;
  const std::int64_t groups = p.groups();
  const std::int64_t scale_cols = (source.cols + kMxfp4Group - 1) / kMxfp4Group;
  p.group_scale.assign(static_cast<std::size_t>(groups * rows_padded), 0.0f);
  const auto* codes = static_cast<const std::uint8_t*>(source.data);
  for (std::int64_t r = 0; r < source.rows; ++r) {
    const std::uint8_t* row = codes + r * source.cols / 2;
    const float* scales = source.block_scale + (source.first_row + r) * scale_cols;
    std::uint8_t* block = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    // The codes stand for 2 * value in the kernels' sums: half the scale makes up for it.
    for (std::int64_t g = 0; g < groups; ++g)
      p.group_scale[static_cast<std::size_t>(g * rows_padded + r)] = 0.5f * scales[g];
    for (std::int64_t c = 0; c < source.cols; ++c) {
      const int code = c % 2 == 0 ? row[c / 2] & 0x0F : row[c / 2] >> 4;
      std::uint8_t& byte = block[(c / 8) * 64 + lane * 4 + c % 4];
      byte = (c % 8) < 4 ? static_cast<std::uint8_t>((byte & 0xF0) | code)
                         : static_cast<std::uint8_t>((byte & 0x0F) | (code << 4));
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

namespace {

// Sizes `out` for `tokens` rows of `cols` activations in `format` (the padding zeroed).
void prepare_activations(std::int64_t tokens, std::int64_t cols, PackedFormat format,
                         PackedActivations& out, std::int64_t group) {
  out.format = format;
  out.tokens = tokens;
  out.cols_padded = padded_cols(cols, format);
  const std::size_t n = static_cast<std::size_t>(tokens * out.cols_padded);
  if (format == PackedFormat::Bf16) {
    out.group = 0;
    out.bf16.assign(n, 0);
    return;
  }
  const std::int64_t multiple = format == PackedFormat::Int8 ? 4 : 8;
  if (format == PackedFormat::Int8 && group == kWholeRow) group = out.cols_padded;
  if (group <= 0 || group % multiple != 0) {
    throw std::invalid_argument("activations are quantised in groups of a positive multiple of " +
                                std::to_string(multiple) + " columns, not " +
                                std::to_string(group));
  }
  out.group = group;
  out.q.assign(n, 0);
  out.scale.resize(static_cast<std::size_t>(tokens * out.groups()));
  out.group_sum.resize(static_cast<std::size_t>(tokens * out.groups()));
}

// Rows [t0, t1) of x into `out`, sized by prepare_activations.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void
quantize_activation_rows(const float* x, std::int64_t cols, PackedActivations& out, std::int64_t t0,
                         std::int64_t t1) {
  if (out.format == PackedFormat::Bf16) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t c = 0; c < cols; ++c)
        out.bf16[static_cast<std::size_t>(t * out.cols_padded + c)] = f32_to_bf16(x[t * cols + c]);
    }
    return;
  }
  const std::int64_t groups = out.groups();
  for (std::int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * cols;
    std::int8_t* q = out.q.data() + t * out.cols_padded;
    for (std::int64_t g = 0; g < groups; ++g) {
      // The padding past `cols` stays 0 and adds nothing to the group's sum.
      const std::int64_t c0 = g * out.group;
      const std::int64_t c1 = std::min(cols, c0 + out.group);
      float max_abs = 0.0f;
      for (std::int64_t c = c0; c < c1; ++c) max_abs = std::max(max_abs, std::abs(xt[c]));
      const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
      const float inv = 1.0f / scale;
      std::int32_t sum = 0;
      for (std::int64_t c = c0; c < c1; ++c) {
        const int v = std::clamp(round_small(xt[c] * inv), -127, 127);
        q[c] = static_cast<std::int8_t>(v);
        sum += v;
      }
      out.scale[static_cast<std::size_t>(t * groups + g)] = scale;
      out.group_sum[static_cast<std::size_t>(t * groups + g)] = sum;
    }
  }
}

}  // namespace

std::int64_t activation_group(const PackedMatrix& w) {
  switch (w.format) {
    case PackedFormat::Int8:
      return kInt8ActivationGroup;
    case PackedFormat::Int4:
    case PackedFormat::Mxfp4:
      return w.group;
    case PackedFormat::Bf16:
      return 0;
  }
  return 0;
}

void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group) {
  prepare_activations(tokens, cols, format, out, group);
  quantize_activation_rows(x, cols, out, 0, tokens);
}

void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group, const ParallelFor& parallel) {
  prepare_activations(tokens, cols, format, out, group);
  if (tokens < kParallelPackTokens) {
    quantize_activation_rows(x, cols, out, 0, tokens);
    return;
  }
  parallel(tokens, [&](std::int64_t t0, std::int64_t t1) {
    quantize_activation_rows(x, cols, out, t0, t1);
  });
}

void packed_matmul_scalar(const PackedMatrix& w, const PackedActivations& x, float* y,
                          std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  const std::int64_t kp = w.cols_padded;
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    const std::uint8_t* block = w.block(b);
    const std::int64_t rows = std::min(kPackRows, w.rows - b * kPackRows);
    for (std::int64_t t = 0; t < x.tokens; ++t) {
      for (std::int64_t lane = 0; lane < rows; ++lane) {
        const std::int64_t r = b * kPackRows + lane;
        if (w.format != PackedFormat::Bf16) {
          // Exact integer sums per activation group (the weights' group for INT4 and
          // MXFP4), each combined with one fused multiply-add in group order: the vector
          // variants do the same, so all agree to the bit.
          const bool int8 = w.format == PackedFormat::Int8;
          const bool fp4 = w.format == PackedFormat::Mxfp4;
          const int bias = int8 ? 128 : fp4 ? kMxfp4Bias : 8;
          const std::int8_t* q = x.q.data() + t * kp;
          const std::int64_t groups = x.groups();
          float acc = 0.0f;
          for (std::int64_t g = 0; g < groups; ++g) {
            std::int32_t sum = 0;
            for (std::int64_t c = g * x.group; c < std::min(kp, (g + 1) * x.group); ++c) {
              int stored;
              if (int8) {
                stored = block[(c / 4) * 64 + lane * 4 + c % 4];
              } else {
                const std::uint8_t byte = block[(c / 8) * 64 + lane * 4 + c % 4];
                const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
                stored = fp4 ? kMxfp4Biased[nibble] : nibble;
              }
              sum += stored * q[c];
            }
            sum -= bias * x.group_sum[static_cast<std::size_t>(t * groups + g)];
            const float x_scale = x.scale[static_cast<std::size_t>(t * groups + g)];
            const float scale =
                int8 ? x_scale
                     : w.group_scale[static_cast<std::size_t>(g * w.blocks * kPackRows + r)] *
                           x_scale;
            acc = std::fma(scale, static_cast<float>(sum), acc);
          }
          y[t * y_stride + r] = int8 ? acc * w.row_scale[static_cast<std::size_t>(r)] : acc;
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

void check_activations(const PackedMatrix& w, const PackedActivations& x) {
  if (x.format != w.format || x.cols_padded != w.cols_padded ||
      (nibble_format(w.format) && x.group != w.group) ||
      (w.format == PackedFormat::Int8 && (x.group <= 0 || x.group % 4 != 0))) {
    throw std::invalid_argument("activations packed for another weight format, width or group");
  }
}

void packed_matmul(const PackedMatrix& w, const PackedActivations& x, float* y,
                   std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                   CpuVariant variant) {
  check_activations(w, x);
  switch (variant) {
    case CpuVariant::Amx:
      packed_matmul_amx(w, x, y, y_stride, block_begin, block_end);
      return;
    case CpuVariant::Avx512:
      packed_matmul_avx512(w, x, y, y_stride, block_begin, block_end);
      return;
    case CpuVariant::Avx2:
      packed_matmul_avx2(w, x, y, y_stride, block_begin, block_end);
      return;
    case CpuVariant::Scalar:
      packed_matmul_scalar(w, x, y, y_stride, block_begin, block_end);
      return;
  }
}

void packed_matmul_all(const PackedMatrix& w, const PackedActivations& x, float* y,
                       std::int64_t y_stride, CpuVariant variant, const ParallelFor& parallel) {
  // Four blocks per task: enough work per task, enough tasks to balance.
  constexpr std::int64_t kBlocksPerTask = 4;
  const std::int64_t tasks = (w.blocks + kBlocksPerTask - 1) / kBlocksPerTask;
  parallel(tasks, [&](std::int64_t t0, std::int64_t t1) {
    packed_matmul(w, x, y, y_stride, t0 * kBlocksPerTask, std::min(w.blocks, t1 * kBlocksPerTask),
                  variant);
  });
}

}  // namespace tandem::kernels
