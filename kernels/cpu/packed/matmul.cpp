#include "kernels/cpu/packed/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cpu/packed/rotation.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels {

std::size_t PackedMatrix::block_bytes() const {
  switch (format) {
    case PackedFormat::Int8:  // the steps, and a header per pair of groups
      return static_cast<std::size_t>((cols_padded / 4 + (groups() + 1) / 2) * kStepBytes);
    case PackedFormat::Int4:
      return static_cast<std::size_t>(kPackRows * cols_padded / 2 + groups() * kInt4StepBytes);
    case PackedFormat::Mxfp4:
      return static_cast<std::size_t>(kPackRows * cols_padded / 2);
    case PackedFormat::Bf16:
      return static_cast<std::size_t>(kPackRows * cols_padded) * 2;
  }
  return 0;
}

std::uint64_t packed_matrix_bytes(const PackedMatrix& m) {
  return static_cast<std::uint64_t>(m.blocks) * m.block_bytes() +
         m.group_scale.size() * sizeof(float);
}

namespace {

// Round to nearest (ties to even) for |v| < 2^22 without a libm call: adding 1.5 * 2^23
// pushes the fraction out of the mantissa.
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline int round_small(float v) {
  // Without -ffast-math the compiler keeps both operations, so the rounding happens.
  return static_cast<int>((v + kRoundMagic) - kRoundMagic);
}

typedef std::int8_t Int8x8 __attribute__((vector_size(8)));
typedef std::int8_t Int8x16 __attribute__((vector_size(16)));

// The quantisation's bytes at the width V (Vec16 or Vec8).
template <class V>
using ByteLanes = std::conditional_t<sizeof(V) == 32, Int8x8, Int8x16>;

// The largest of the lanes (NaNs ignored, as std::max over them would) and the sum of the
// integer lanes, by halves: a lane at a time cost as much as the 32 values a group quantises.
inline __attribute__((always_inline)) float max_lanes(Vec16 v) {
  Vec16 h = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v = h > v ? h : v;
  h = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
  v = h > v ? h : v;
  h = __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
  v = h > v ? h : v;
  return std::max(v[0], v[1]);
}
inline __attribute__((always_inline)) float max_lanes(Vec8 v) {
  Vec8 h = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  v = h > v ? h : v;
  h = __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1);
  v = h > v ? h : v;
  return std::max(v[0], v[1]);
}
inline __attribute__((always_inline)) std::int32_t sum_lanes(Int16x v) {
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
  return v[0] + v[1];
}
inline __attribute__((always_inline)) std::int32_t sum_lanes(Int8x v) {
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1);
  return v[0] + v[1];
}

template <class V>
inline __attribute__((always_inline)) V abs_lanes(V v) {
  IntLanesOf<V> bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits &= 0x7FFFFFFF;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
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
  p.group = format == PackedFormat::Int4    ? group
            : format == PackedFormat::Mxfp4 ? kMxfp4Group
            : format == PackedFormat::Int8  ? kInt8WeightGroup
                                            : 0;
  return p;
}

std::size_t packed_scale_count(const PackedMatrix& m) {
  switch (m.format) {
    case PackedFormat::Mxfp4:
      return static_cast<std::size_t>(m.groups() * m.blocks * kPackRows);
    case PackedFormat::Int8:  // in the blocks' headers
    case PackedFormat::Int4:
    case PackedFormat::Bf16:
      return 0;
  }
  return 0;
}

// A row's weights in fp32, one format's loop at a time: a matrix is widened row by row to
// place it on an accelerator (several GB of experts for a layerwise prompt), so the format is
// decided once a row and each step reads its bytes for several columns.
void unpack_row(const PackedMatrix& m, std::int64_t r, float* out) {
  const std::uint8_t* block = m.block(r / kPackRows);
  const std::int64_t lane = r % kPackRows;
  const std::int64_t cols = m.cols;
  switch (m.format) {
    case PackedFormat::Int8: {
      // Per group the lane's FP16 scale, then four columns a step (the lane's four at
      // lane * 4), the group's steps one after another.
      for (std::int64_t g0 = 0; g0 < cols; g0 += m.group) {
        const auto* header =
            reinterpret_cast<const std::uint16_t*>(block + m.int8_header_offset(g0 / m.group));
        const float scale = f16_to_f32(header[lane]);
        const std::uint8_t* step = block + m.int8_step_offset(g0 / 4) + lane * 4;
        const std::int64_t g_end = std::min(cols, g0 + m.group);
        for (std::int64_t c = g0; c < g_end; c += 4, step += PackedMatrix::kStepBytes) {
          const std::int64_t n = std::min<std::int64_t>(4, g_end - c);
          for (std::int64_t i = 0; i < n; ++i)
            out[c + i] = static_cast<float>(step[i] - 128) * scale;
        }
      }
      if (m.rotation > 0) unrotate(out, cols, m.rotation);
      return;
    }
    case PackedFormat::Int4: {
      // Per group a header (scales, then offsets, FP16 per lane), then steps of eight
      // columns: the lane's four bytes hold columns 0-3 in their low nibbles, 4-7 in the high.
      for (std::int64_t g0 = 0; g0 < cols; g0 += m.group) {
        const std::int64_t g = g0 / m.group;
        const auto* header =
            reinterpret_cast<const std::uint16_t*>(block + m.int4_header_offset(g));
        const float scale = f16_to_f32(header[lane]);
        const float offset = f16_to_f32(header[kPackRows + lane]);
        const std::uint8_t* step = block + m.int4_step_offset(g) + lane * 4;
        const std::int64_t g_end = std::min(cols, g0 + m.group);
        for (std::int64_t c = g0; c < g_end; c += 8, step += 64) {
          for (std::int64_t i = 0; i < 8 && c + i < g_end; ++i) {
            const std::uint8_t byte = step[i % 4];
            const int nibble = i < 4 ? byte & 0x0F : byte >> 4;
            out[c + i] = static_cast<float>(nibble) * scale + offset;
          }
        }
      }
      return;
    }
    case PackedFormat::Mxfp4: {
      // Eight columns a step as for INT4, a scale per row and group of kMxfp4Group.
      for (std::int64_t c = 0; c < cols; c += 8) {
        const std::uint8_t* step = block + (c / 8) * 64 + lane * 4;
        const float scale =
            m.group_scale[static_cast<std::size_t>((c / m.group) * m.blocks * kPackRows + r)];
        for (std::int64_t i = 0; i < 8 && c + i < cols; ++i) {
          const std::uint8_t byte = step[i % 4];
          const int nibble = i < 4 ? byte & 0x0F : byte >> 4;
          out[c + i] = static_cast<float>(kMxfp4Biased[nibble] - kMxfp4Bias) * scale;
        }
      }
      return;
    }
    case PackedFormat::Bf16: {
      // Two columns a step: 64 bytes a step, the lane's two values at lane * 2.
      const auto* step = reinterpret_cast<const std::uint16_t*>(block) + lane * 2;
      for (std::int64_t c = 0; c < cols; c += 2, step += 32) {
        out[c] = bf16_to_f32(step[0]);
        if (c + 1 < cols) out[c + 1] = bf16_to_f32(step[1]);
      }
      return;
    }
  }
}

namespace {

// The smallest FP16 at least v (v >= 0 and within FP16's range): a group's scale rounded up, so
// that its largest weight still fits in 127 steps.
std::uint16_t f16_at_least(float v) {
  std::uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;  // positive FP16 bits count up with the value
  return h;
}

// A Q8_0 block (FP16 scale d, then 32 signed bytes) as lane `lane` of an INT8 group: its
// scale |d| into the header, each integer (its sign turned where d is negative) plus 128 into
// the group's steps. False, with nothing written, for a block INT8 cannot hold as it is: an
// integer of -128 (whose opposite is past 127) or a scale that is not finite.
bool take_q8_0_block(const std::uint8_t* stored, std::uint8_t* header, std::uint8_t* steps,
                     std::int64_t lane) {
  std::uint16_t d;
  std::memcpy(&d, stored, 2);
  if ((d & 0x7C00) == 0x7C00) return false;  // infinite or NaN
  const auto* q = reinterpret_cast<const std::int8_t*>(stored + 2);
  for (int i = 0; i < 32; ++i)
    if (q[i] == -128) return false;
  const int sign = (d & 0x8000) != 0 ? -1 : 1;
  reinterpret_cast<std::uint16_t*>(header)[lane] = static_cast<std::uint16_t>(d & 0x7FFF);
  for (int i = 0; i < 32; ++i)
    steps[(i / 4) * PackedMatrix::kStepBytes + i % 4] =
        static_cast<std::uint8_t>(sign * q[i] + 128);
  return true;
}

}  // namespace

PackedMatrix pack_int8(const WeightMatrix& source) {
  PackedMatrix p = empty_packed(source, PackedFormat::Int8);
  // Padding rows and columns hold weight 0 (stored 128), so they add nothing; padding rows'
  // scales are 0.
  std::memset(p.bytes.data.get(), 128, p.bytes.size);
  for (std::int64_t b = 0; b < p.blocks; ++b) {
    for (std::int64_t g = 0; g < p.groups(); g += 2)
      std::memset(p.block(b) + p.int8_header_offset(g), 0, PackedMatrix::kStepBytes);
  }
  // GGUF's Q8_0 blocks are INT8 groups already (32 columns from the row's start, an FP16 scale
  // and integers): taken as they are, so that they stay exact whatever their largest integer.
  const bool q8_0 =
      source.dtype == DType::Q8_0 && source.block_scale == nullptr && source.cols % p.group == 0;
  constexpr std::int64_t kQ8_0Bytes = 2 + 32;
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    // The row in fp32, read where a group needs it (a Q8_0 row's blocks rarely do).
    bool row_read = false;
    std::uint8_t* block = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t c0 = 0; c0 < source.cols; c0 += p.group) {
      if (q8_0) {
        const auto* stored = static_cast<const std::uint8_t*>(source.data) +
                             (r * source.cols + c0) / p.group * kQ8_0Bytes;
        if (take_q8_0_block(stored, block + p.int8_header_offset(c0 / p.group),
                            block + p.int8_step_offset(c0 / 4) + lane * 4, lane))
          continue;
      }
      if (!row_read) {
        source.row_f32(r, row.data());
        row_read = true;
      }
      const std::int64_t c1 = std::min(source.cols, c0 + p.group);
      float max_abs = 0.0f;
      for (std::int64_t c = c0; c < c1; ++c) {
        const float v = std::abs(row[static_cast<std::size_t>(c)]);
        if (!(v <= 127.0f * 65504.0f)) {
          throw std::invalid_argument("a weight of " +
                                      std::to_string(row[static_cast<std::size_t>(c)]) +
                                      " is beyond what INT8's FP16 scales hold (127 x 65504); use "
                                      "BF16 for this model");
        }
        max_abs = std::max(max_abs, v);
      }
      const std::uint16_t half = f16_at_least(max_abs / 127.0f);
      reinterpret_cast<std::uint16_t*>(block + p.int8_header_offset(c0 / p.group))[lane] = half;
      const float scale = f16_to_f32(half);
      if (!(scale > 0.0f)) continue;  // every weight 0: stored 128 already
      const float inv_scale = 1.0f / scale;
      // A group's steps follow each other.
      std::uint8_t* steps = block + p.int8_step_offset(c0 / 4) + lane * 4;
      for (std::int64_t c = c0; c < c1; ++c) {
        const int q = round_small(row[static_cast<std::size_t>(c)] * inv_scale);
        steps[((c - c0) / 4) * PackedMatrix::kStepBytes + c % 4] =
            static_cast<std::uint8_t>(std::clamp(q, -127, 127) + 128);
      }
    }
  }
  return p;
}

PackedMatrix pack_int8_rotated(const WeightMatrix& source) {
  const std::int64_t block = int8_rotation_for(source.cols);
  if (block == 0) return pack_int8(source);
  PackedMatrix p = empty_packed(source, PackedFormat::Int8);
  p.rotation = block;
  // Padding rows hold weight 0 (stored 128) and scale 0; a rotated row has no padding columns
  // (its width is a multiple of the block).
  std::memset(p.bytes.data.get(), 128, p.bytes.size);
  for (std::int64_t b = 0; b < p.blocks; ++b) {
    for (std::int64_t g = 0; g < p.groups(); g += 2)
      std::memset(p.block(b) + p.int8_header_offset(g), 0, PackedMatrix::kStepBytes);
  }
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, row.data());
    rotate(row.data(), source.cols, block);
    std::uint8_t* block_bytes = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t c0 = 0; c0 < source.cols; c0 += block) {
      float max_abs = 0.0f;
      for (std::int64_t c = c0; c < c0 + block; ++c) {
        const float v = row[static_cast<std::size_t>(c)];
        if (!(std::abs(v) <= 127.0f * 65504.0f)) {
          throw std::invalid_argument("a rotated weight of " + std::to_string(v) +
                                      " is beyond what INT8's FP16 scales hold (127 x 65504); use "
                                      "BF16 for this model");
        }
        max_abs = std::max(max_abs, std::abs(v));
      }
      const std::uint16_t half = f16_at_least(max_abs / 127.0f);
      for (std::int64_t g = c0 / p.group; g < (c0 + block) / p.group; ++g)
        reinterpret_cast<std::uint16_t*>(block_bytes + p.int8_header_offset(g))[lane] = half;
      const float scale = f16_to_f32(half);
      if (!(scale > 0.0f)) continue;  // every weight 0: stored 128 already
      const float inv_scale = 1.0f / scale;
      for (std::int64_t c = c0; c < c0 + block; ++c) {
        const int q = round_small(row[static_cast<std::size_t>(c)] * inv_scale);
        block_bytes[p.int8_step_offset(c / 4) + lane * 4 + c % 4] =
            static_cast<std::uint8_t>(std::clamp(q, -127, 127) + 128);
      }
    }
  }
  return p;
}

namespace {

// One INT4 group's grid: weight = nibble * scale + offset, both as FP16 holds them.
struct Int4Grid {
  float scale = 0.0f, offset = 0.0f;
};

// The nibble nearest to v on a grid (rounded half to even), as a float; inv = 1 / scale, or 0
// for a flat grid (every weight the offset).
inline float int4_level(float v, float offset, float inv) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // MAXSS and MINSS (SSE, every x86-64): std::max and std::min became branches here, which
  // weights past the grid's ends mispredict.
  const __m128 t =
      _mm_min_ss(_mm_max_ss(_mm_set_ss((v - offset) * inv), _mm_setzero_ps()), _mm_set_ss(15.0f));
  return (_mm_cvtss_f32(t) + kMagic) - kMagic;
}

inline float inverse_step(const Int4Grid& g) {
  return g.scale > 0.0f ? 1.0f / g.scale : 0.0f;
}

Int4Grid as_f16(double scale, double offset) {
  return {f16_to_f32(f32_to_f16(static_cast<float>(scale))),
          f16_to_f32(f32_to_f16(static_cast<float>(offset)))};
}

float int4_error(const float* v, std::int64_t n, const Int4Grid& g) {
  const float inv = inverse_step(g);
  // Four sums, so that the additions do not wait on each other.
  float err[4] = {};
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const float d = v[i + j] - (int4_level(v[i + j], g.offset, inv) * g.scale + g.offset);
      err[j] += d * d;
    }
  }
  for (; i < n; ++i) {
    const float d = v[i] - (int4_level(v[i], g.offset, inv) * g.scale + g.offset);
    err[0] += d * d;
  }
  return (err[0] + err[1]) + (err[2] + err[3]);
}

// The least-squares scale and offset for the nibbles `g` gives the values (rounded to FP16).
Int4Grid int4_refit(const float* v, std::int64_t n, const Int4Grid& g) {
  const float inv = inverse_step(g);
  float sq = 0, sqq = 0, sv = 0, sqv = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float q = int4_level(v[i], g.offset, inv);
    sq += q;
    sqq += q * q;
    sv += v[i];
    sqv += q * v[i];
  }
  const double count = static_cast<double>(n);
  const double det = count * sqq - static_cast<double>(sq) * sq;
  if (det <= 0) return g;  // one nibble for all: nothing to refit
  const double scale = (count * sqv - static_cast<double>(sq) * sv) / det;
  return as_f16(scale, (sv - scale * sq) / count);
}

// The grid for one group: of the grid spanning the group's range in 15 steps, two that clip
// both ends a little (outliers then cost the rest less) and those spanning it in 14 to 8
// steps that hold every weight (a source quantised on a 4-bit grid, as GGUF's Q4_0, Q4_1 and
// Q4_K blocks, fits one of them), the one with the least squared error, then refit by least
// squares while that lowers the error (twice at most).
Int4Grid fit_int4_group(const float* v, std::int64_t n) {
  float lo = v[0], hi = v[0];
  for (std::int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  const Int4Grid flat = as_f16(0.0, lo);
  if (!(hi > lo)) return flat;
  const double range = static_cast<double>(hi) - lo;
  Int4Grid best = flat;
  float best_err = int4_error(v, n, flat);
  auto consider = [&](const Int4Grid& g) {
    if (!(g.scale > 0.0f)) return false;
    const float err = int4_error(v, n, g);
    if (!(err < best_err)) return false;
    best_err = err;
    best = g;
    return true;
  };
  consider(as_f16(range / 15, lo));
  for (double kept : {0.9, 0.8}) consider(as_f16(kept * range / 15, lo + (1 - kept) * range / 2));
  // A weight off a grid of fewer steps (the first, as a rule, for weights not quantised
  // before) rules it out before it costs a whole pass. "On" allows a 32nd of a step: Q4_K's
  // steps (an FP16 times a 6-bit integer) are not FP16 numbers, so its grids come out rounded.
  for (int steps = 14; steps >= 8 && best_err > 0.0f; --steps) {
    const Int4Grid g = as_f16(range / steps, lo);
    const float inv = inverse_step(g);
    const float near = g.scale / 32;
    bool on_grid = g.scale > 0.0f;
    for (std::int64_t i = 0; i < n && on_grid; ++i)
      on_grid = std::abs(v[i] - (int4_level(v[i], g.offset, inv) * g.scale + g.offset)) <= near;
    if (on_grid) consider(g);
  }
  for (int round = 0; round < 2 && best_err > 0.0f; ++round) {
    if (!consider(int4_refit(v, n, best))) break;
  }
  return best;
}

}  // namespace

PackedMatrix pack_int4(const WeightMatrix& source, std::int64_t group) {
  if (group <= 0 || group % 8 != 0)
    throw std::invalid_argument("the INT4 group size must be a positive multiple of 8");
  PackedMatrix p = packed_shape(source.rows, source.cols, PackedFormat::Int4, group);
  p.bytes = AlignedBytes::allocate(static_cast<std::size_t>(p.blocks) * p.block_bytes());
  // Padding rows have scale and offset 0 (weight 0); padding columns meet activations of 0.
  std::memset(p.bytes.data.get(), 0, p.bytes.size);
  const std::int64_t groups = p.groups();
  std::vector<float> row(static_cast<std::size_t>(source.cols));
  for (std::int64_t r = 0; r < source.rows; ++r) {
    source.row_f32(r, row.data());
    std::uint8_t* block = p.block(r / kPackRows);
    const std::int64_t lane = r % kPackRows;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * group;
      const std::int64_t c1 = std::min(source.cols, c0 + group);
      if (c1 <= c0) continue;
      const float* v = row.data() + c0;
      for (std::int64_t i = 0; i < c1 - c0; ++i) {
        if (!(std::abs(v[i]) <= 65504.0f)) {
          throw std::invalid_argument(
              "a weight of " + std::to_string(v[i]) +
              " is beyond what INT4's FP16 scales hold (65504); use INT8 or BF16 for this model");
        }
      }
      const Int4Grid grid = fit_int4_group(v, c1 - c0);
      auto* header = reinterpret_cast<std::uint16_t*>(block + p.int4_header_offset(g));
      header[lane] = f32_to_f16(grid.scale);
      header[kPackRows + lane] = f32_to_f16(grid.offset);
      std::uint8_t* steps = block + p.int4_step_offset(g);
      const float inv = inverse_step(grid);
      for (std::int64_t c = c0; c < c1; ++c) {
        const int q =
            static_cast<int>(int4_level(row[static_cast<std::size_t>(c)], grid.offset, inv));
        const std::int64_t local = c - c0;
        std::uint8_t& byte = steps[(local / 8) * 64 + lane * 4 + local % 4];
        byte = (local % 8) < 4 ? static_cast<std::uint8_t>((byte & 0xF0) | q)
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

CpuVariant packed_variant_for(PackedFormat format, CpuVariant variant) {
  if (format == PackedFormat::Bf16 && variant == CpuVariant::Avx512 &&
      !detect_isa().usable.avx512_bf16)
    return CpuVariant::Avx2;
  return variant;
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

// What a format's stored weights hold beyond the weight (INT8 w + 128, MXFP4 2w + 12), as
// the kernels' integer sums see them.
constexpr int weight_offset(PackedFormat f) {
  return f == PackedFormat::Int8 ? 128 : f == PackedFormat::Mxfp4 ? kMxfp4Bias : 0;
}

// Sizes `out` for `tokens` rows of `cols` activations in `format` (the padding zeroed).
void prepare_activations(std::int64_t tokens, std::int64_t cols, PackedFormat format,
                         PackedActivations& out, std::int64_t group, std::int64_t rotation) {
  if (rotation != 0 && (format != PackedFormat::Int8 || int8_rotation_for(cols) != rotation)) {
    throw std::invalid_argument(
        "only INT8 activations are rotated, in the blocks of their width (" +
        std::to_string(int8_rotation_for(cols)) + " for " + std::to_string(cols) +
        " columns), not " + std::to_string(rotation));
  }
  out.format = format;
  out.tokens = tokens;
  out.rotation = rotation;
  out.block_start.resize(rotation > 0 ? static_cast<std::size_t>(tokens * (cols / rotation)) : 0);
  out.cols_padded = padded_cols(cols, format);
  const std::size_t n = static_cast<std::size_t>(tokens * out.cols_padded);
  if (format == PackedFormat::Bf16) {
    out.group = 0;
    out.bf16_stride = out.cols_padded;
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
  // INT8's 32-bit sums add up to 255 * 127 a column (the stored bytes as they are).
  constexpr std::int64_t kMaxInt8Group = kMaxInt8SumCols;
  if (format == PackedFormat::Int8 && group > kMaxInt8Group) {
    throw std::invalid_argument("INT8 activations are summed in 32-bit integers: a group " +
                                std::to_string(group) + " columns wide could overflow them (" +
                                std::to_string(kMaxInt8Group) + " at most)");
  }
  out.group = group;
  out.q.assign(n, 0);
  out.scale.resize(static_cast<std::size_t>(tokens * out.groups()));
  out.group_sum.resize(static_cast<std::size_t>(tokens * out.groups()));
  out.scaled_sum.resize(
      format == PackedFormat::Int4 ? static_cast<std::size_t>(tokens * out.groups()) : 0);
  out.start.resize(format == PackedFormat::Int4 ? 0
                                                : static_cast<std::size_t>(tokens * out.groups()));
}

// Rows [t0, t1) of x into `out`, sized by prepare_activations, in vectors of V. Every width
// gives the same bytes: the largest magnitude and the integer sums do not depend on the order.
template <class V>
inline __attribute__((always_inline)) void quantize_rows_lanes(const float* x, std::int64_t cols,
                                                               PackedActivations& out,
                                                               std::int64_t t0, std::int64_t t1) {
  constexpr int L = kLanesOf<V>;
  if (out.format == PackedFormat::Bf16) {
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t c = 0; c < cols; ++c)
        out.bf16[static_cast<std::size_t>(t * out.bf16_stride + c)] = f32_to_bf16(x[t * cols + c]);
    }
    return;
  }
  const std::int64_t groups = out.groups();
  static thread_local std::vector<float> rotated;
  for (std::int64_t t = t0; t < t1; ++t) {
    const float* xt = x + t * cols;
    // Rotated: the row rotated, then one scale for each block (its largest magnitude).
    const std::int64_t blocks = out.rotation > 0 ? cols / out.rotation : 0;
    std::int32_t* block_start = out.rotation > 0 ? out.block_start.data() + t * blocks : nullptr;
    float block_max = 0.0f;
    if (out.rotation > 0) {
      rotated.assign(xt, xt + cols);
      rotate(rotated.data(), cols, out.rotation);
      xt = rotated.data();
      std::fill_n(block_start, blocks, 0);
    }
    std::int8_t* q = out.q.data() + t * out.cols_padded;
    for (std::int64_t g = 0; g < groups; ++g) {
      if (out.rotation > 0 && (g * out.group) % out.rotation == 0) {
        V lanes{};
        const std::int64_t b0 = g * out.group;
        for (std::int64_t c = b0; c < b0 + out.rotation; c += L) {  // blocks of >= 32
          const V a = abs_lanes(load_lanes<V>(xt + c));
          lanes = a > lanes ? a : lanes;
        }
        block_max = max_lanes(lanes);
      }
      // The padding past `cols` stays 0 and adds nothing to the group's sum.
      const std::int64_t c0 = g * out.group;
      const std::int64_t c1 = std::min(cols, c0 + out.group);
      // A vector at a time, then the rest one by one, each value through the same operations
      // either way (the largest magnitude and the integer sum do not depend on the order).
      const std::int64_t cv = c0 + (c1 - c0) / L * L;
      // Rotated, the group takes its block's scale.
      float max_abs = block_max;
      if (out.rotation == 0) {
        if (cv > c0) {
          V lanes{};
          for (std::int64_t c = c0; c < cv; c += L) {
            const V a = abs_lanes(load_lanes<V>(xt + c));
            lanes = a > lanes ? a : lanes;
          }
          max_abs = max_lanes(lanes);
        }
        for (std::int64_t c = cv; c < c1; ++c) max_abs = std::max(max_abs, std::abs(xt[c]));
      }
      const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
      const float inv = 1.0f / scale;
      std::int32_t sum = 0;
      if (cv > c0) {
        using I = IntLanesOf<V>;
        I sums{};
        for (std::int64_t c = c0; c < cv; c += L) {
          I v =
              __builtin_convertvector((load_lanes<V>(xt + c) * inv + kRoundMagic) - kRoundMagic, I);
          v = v < -127 ? I{} - 127 : v;
          v = v > 127 ? I{} + 127 : v;
          sums += v;
          const auto bytes = __builtin_convertvector(v, ByteLanes<V>);
          std::memcpy(q + c, &bytes, sizeof(bytes));
        }
        sum = sum_lanes(sums);
      }
      for (std::int64_t c = cv; c < c1; ++c) {
        const int v = std::clamp(round_small(xt[c] * inv), -127, 127);
        q[c] = static_cast<std::int8_t>(v);
        sum += v;
      }
      out.scale[static_cast<std::size_t>(t * groups + g)] = scale;
      out.group_sum[static_cast<std::size_t>(t * groups + g)] = sum;
      if (out.format == PackedFormat::Int4)
        out.scaled_sum[static_cast<std::size_t>(t * groups + g)] = scale * static_cast<float>(sum);
      else
        out.start[static_cast<std::size_t>(t * groups + g)] = -weight_offset(out.format) * sum;
      if (out.rotation > 0)
        block_start[g * out.group / out.rotation] += -weight_offset(out.format) * sum;
    }
  }
}

TANDEM_BY_WIDTH(void quantize_activation_rows(const float* x, std::int64_t cols,
                                              PackedActivations& out, std::int64_t t0,
                                              std::int64_t t1),
                quantize_rows_lanes<V>(x, cols, out, t0, t1))

// Where AMX widens INT8 and INT4 products in this process (amx_widen_tokens).
std::atomic<std::int64_t> widen_int8_tokens{kAmxWidenInt8Tokens};
std::atomic<std::int64_t> widen_int4_tokens{kAmxWidenInt4Tokens};

}  // namespace

std::int64_t amx_widen_tokens(PackedFormat format) {
  switch (format) {
    case PackedFormat::Int8:
      return widen_int8_tokens.load(std::memory_order_relaxed);
    case PackedFormat::Int4:
      return widen_int4_tokens.load(std::memory_order_relaxed);
    case PackedFormat::Bf16:
    case PackedFormat::Mxfp4:
      return 0;
  }
  return 0;
}

void set_amx_widen_tokens(PackedFormat format, std::int64_t tokens) {
  if (tokens < 0)
    throw std::invalid_argument("widened products start at a token count of 0 (never) or more");
  if (format == PackedFormat::Int8)
    widen_int8_tokens.store(tokens, std::memory_order_relaxed);
  else if (format == PackedFormat::Int4)
    widen_int4_tokens.store(tokens, std::memory_order_relaxed);
  else
    throw std::invalid_argument("only INT8 and INT4 products are widened, not " +
                                std::string(packed_format_name(format)));
}

std::int64_t activation_group(const PackedMatrix& w) {
  switch (w.format) {
    case PackedFormat::Int8:
    case PackedFormat::Int4:
    case PackedFormat::Mxfp4:
      return w.group;
    case PackedFormat::Bf16:
      return 0;
  }
  return 0;
}

void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group, std::int64_t rotation) {
  prepare_activations(tokens, cols, format, out, group, rotation);
  quantize_activation_rows(x, cols, out, 0, tokens);
}

void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group, const ParallelFor& parallel,
                      std::int64_t rotation) {
  prepare_activations(tokens, cols, format, out, group, rotation);
  if (tokens < kParallelPackTokens) {
    quantize_activation_rows(x, cols, out, 0, tokens);
    return;
  }
  parallel(tokens, [&](std::int64_t t0, std::int64_t t1) {
    quantize_activation_rows(x, cols, out, t0, t1);
  });
}

void pack_widened_activations(const PackedMatrix& w, const float* x, std::int64_t tokens,
                              PackedActivations& out, const ParallelFor* parallel) {
  // BF16's own padding is to 2 columns; a widened product reads the rows at the weights'.
  out.format = PackedFormat::Bf16;
  out.tokens = tokens;
  out.cols_padded = w.cols_padded;
  out.group = 0;
  out.rotation = 0;
  out.block_start.clear();
  if (w.rotation > 0)
    throw std::invalid_argument(
        "rotated INT8 weights are not widened: pack their activations "
        "with pack_activations_for");
  out.bf16_stride = widened_row_stride(w.cols_padded);
  out.bf16.assign(static_cast<std::size_t>(tokens * out.bf16_stride), 0);
  if (parallel == nullptr || tokens < kParallelPackTokens) {
    quantize_activation_rows(x, w.cols, out, 0, tokens);
    return;
  }
  (*parallel)(tokens, [&](std::int64_t t0, std::int64_t t1) {
    quantize_activation_rows(x, w.cols, out, t0, t1);
  });
}

void pack_activations_for(const PackedMatrix& w, const float* x, std::int64_t tokens,
                          PackedActivations& out, CpuVariant variant, const ParallelFor* parallel) {
  if (widened_product(w, tokens, variant)) {
    pack_widened_activations(w, x, tokens, out, parallel);
  } else if (parallel != nullptr) {
    pack_activations_for(w, x, tokens, out, *parallel);
  } else {
    pack_activations_for(w, x, tokens, out);
  }
}

void gather_activations(const PackedActivations& all, const std::int64_t* rows, std::int64_t n,
                        PackedActivations& out) {
  out.format = all.format;
  out.tokens = n;
  out.cols_padded = all.cols_padded;
  out.group = all.group;
  out.rotation = all.rotation;
  const auto width = static_cast<std::size_t>(all.cols_padded);
  const auto row_at = [&](std::int64_t i) {
    if (rows[i] < 0 || rows[i] >= all.tokens)
      throw std::invalid_argument("gather_activations: row " + std::to_string(rows[i]) + " of " +
                                  std::to_string(all.tokens));
    return static_cast<std::size_t>(rows[i]);
  };
  if (all.format == PackedFormat::Bf16) {
    const auto stride = static_cast<std::size_t>(all.bf16_stride);
    out.bf16_stride = all.bf16_stride;
    out.bf16.resize(static_cast<std::size_t>(n) * stride);
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(all.bf16.data() + row_at(i) * stride, stride, out.bf16.data() + i * stride);
    return;
  }
  const auto groups = static_cast<std::size_t>(all.groups());
  out.q.resize(static_cast<std::size_t>(n) * width);
  out.scale.resize(static_cast<std::size_t>(n) * groups);
  out.group_sum.resize(static_cast<std::size_t>(n) * groups);
  out.scaled_sum.resize(all.scaled_sum.empty() ? 0 : static_cast<std::size_t>(n) * groups);
  out.start.resize(all.start.empty() ? 0 : static_cast<std::size_t>(n) * groups);
  const auto blocks =
      static_cast<std::size_t>(all.rotation > 0 ? all.cols_padded / all.rotation : 0);
  out.block_start.resize(static_cast<std::size_t>(n) * blocks);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t r = row_at(i);
    std::copy_n(all.block_start.data() + r * blocks, blocks, out.block_start.data() + i * blocks);
    std::copy_n(all.q.data() + r * width, width, out.q.data() + i * width);
    std::copy_n(all.scale.data() + r * groups, groups, out.scale.data() + i * groups);
    std::copy_n(all.group_sum.data() + r * groups, groups, out.group_sum.data() + i * groups);
    if (!all.scaled_sum.empty()) {
      std::copy_n(all.scaled_sum.data() + r * groups, groups, out.scaled_sum.data() + i * groups);
    }
    if (!all.start.empty())
      std::copy_n(all.start.data() + r * groups, groups, out.start.data() + i * groups);
  }
}

namespace {

// Column c (of cols_padded) of row `lane` of an INT8 or INT4 block in fp32, as unpack_row
// gives it, with INT4's multiply-add fused as the widening kernels fuse it.
float widened_weight(const PackedMatrix& w, const std::uint8_t* block, std::int64_t lane,
                     std::int64_t c) {
  const std::int64_t g = c / w.group;
  if (w.format == PackedFormat::Int8) {
    const auto* header = reinterpret_cast<const std::uint16_t*>(block + w.int8_header_offset(g));
    const int stored = block[w.int8_step_offset(c / 4) + lane * 4 + c % 4];
    return static_cast<float>(stored - 128) * f16_to_f32(header[lane]);
  }
  const auto* header = reinterpret_cast<const std::uint16_t*>(block + w.int4_header_offset(g));
  const std::uint8_t* steps = block + w.int4_step_offset(g) - (g * w.group / 8) * 64;
  const std::uint8_t byte = steps[(c / 8) * 64 + lane * 4 + c % 4];
  const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
  return std::fma(static_cast<float>(nibble), f16_to_f32(header[lane]),
                  f16_to_f32(header[kPackRows + lane]));
}

}  // namespace

void packed_matmul_scalar(const PackedMatrix& w, const PackedActivations& x, float* y,
                          std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  const std::int64_t kp = w.cols_padded;
  for (std::int64_t b = block_begin; b < block_end; ++b) {
    const std::uint8_t* block = w.block(b);
    const std::int64_t rows = std::min(kPackRows, w.rows - b * kPackRows);
    for (std::int64_t t = 0; t < x.tokens; ++t) {
      for (std::int64_t lane = 0; lane < rows; ++lane) {
        const std::int64_t r = b * kPackRows + lane;
        if (widened_activations(w, x)) {
          // The weights as unpack_row gives them (INT4 fused), rounded to BF16; pairs of
          // products summed in fp32 as for BF16 weights.
          const std::uint16_t* xb = x.bf16.data() + t * x.bf16_stride;
          float acc = 0.0f;
          for (std::int64_t c = 0; c < kp; c += 2) {
            acc +=
                bf16_to_f32(f32_to_bf16(widened_weight(w, block, lane, c))) * bf16_to_f32(xb[c]) +
                bf16_to_f32(f32_to_bf16(widened_weight(w, block, lane, c + 1))) *
                    bf16_to_f32(xb[c + 1]);
          }
          y[t * y_stride + r] = acc;
        } else if (w.format != PackedFormat::Bf16) {
          // Exact integer sums per group (the weights' and the activations'), each combined
          // with one fused multiply-add in group order (INT4: a second for its offset): the
          // vector variants do the same, so all agree to the bit.
          const bool int8 = w.format == PackedFormat::Int8;
          const bool int4 = w.format == PackedFormat::Int4;
          const bool fp4 = w.format == PackedFormat::Mxfp4;
          const int bias = weight_offset(w.format);
          const std::int8_t* q = x.q.data() + t * kp;
          const std::int64_t groups = x.groups();
          float acc = 0.0f;
          // Rotated INT8: each rotation block's exact sum, converted once and scaled by the
          // row's scale for the block times the token's (each group's header holds its block's,
          // `scale` its block's), in block order.
          std::int32_t block_sum = 0;
          for (std::int64_t g = 0; g < groups; ++g) {
            std::int32_t sum = 0;
            const std::int64_t c0 = g * x.group;
            for (std::int64_t c = c0; c < std::min(kp, c0 + x.group); ++c) {
              int stored;
              if (int8) {
                stored = block[w.int8_step_offset(c / 4) + lane * 4 + c % 4];
              } else {
                const std::uint8_t* steps =
                    int4 ? block + w.int4_step_offset(g) - (c0 / 8) * 64 : block;
                const std::uint8_t byte = steps[(c / 8) * 64 + lane * 4 + c % 4];
                const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
                stored = fp4 ? kMxfp4Biased[nibble] : nibble;
              }
              sum += stored * q[c];
            }
            const std::size_t at = static_cast<std::size_t>(t * groups + g);
            sum -= bias * x.group_sum[at];
            const float x_scale = x.scale[at];
            if (w.rotation > 0) {
              block_sum += sum;
              if (((g + 1) * x.group) % w.rotation != 0) continue;  // within the block
              const auto* header =
                  reinterpret_cast<const std::uint16_t*>(block + w.int8_header_offset(g));
              acc =
                  std::fma(f16_to_f32(header[lane]) * x_scale, static_cast<float>(block_sum), acc);
              block_sum = 0;
            } else if (int8) {
              const auto* header =
                  reinterpret_cast<const std::uint16_t*>(block + w.int8_header_offset(g));
              acc = std::fma(f16_to_f32(header[lane]) * x_scale, static_cast<float>(sum), acc);
            } else if (fp4) {
              acc = std::fma(
                  w.group_scale[static_cast<std::size_t>(g * w.blocks * kPackRows + r)] * x_scale,
                  static_cast<float>(sum), acc);
            } else {
              const auto* header =
                  reinterpret_cast<const std::uint16_t*>(block + w.int4_header_offset(g));
              acc = std::fma(f16_to_f32(header[lane]) * x_scale, static_cast<float>(sum), acc);
              acc = std::fma(f16_to_f32(header[kPackRows + lane]),
                             x_scale * static_cast<float>(x.group_sum[at]), acc);
            }
          }
          y[t * y_stride + r] = acc;
        } else {
          const auto* wb = reinterpret_cast<const std::uint16_t*>(block);
          const std::uint16_t* xb = x.bf16.data() + t * x.bf16_stride;
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
  if (widened_activations(w, x)) {
    if ((w.format != PackedFormat::Int8 && w.format != PackedFormat::Int4) ||
        x.cols_padded != w.cols_padded || x.bf16_stride < x.cols_padded ||
        x.bf16.size() != static_cast<std::size_t>(x.tokens * x.bf16_stride)) {
      throw std::invalid_argument(
          "BF16 activations are taken by INT8 and INT4 weights only, at the weights' width");
    }
    return;
  }
  if (x.format != w.format || x.cols_padded != w.cols_padded || x.group != w.group) {
    throw std::invalid_argument("activations packed for another weight format, width or group");
  }
  if (x.rotation != w.rotation ||
      x.block_start.size() != static_cast<std::size_t>(x.tokens * w.rotation_blocks())) {
    throw std::invalid_argument(w.rotation > 0 ? "rotated INT8 weights need activations rotated "
                                                 "as they are (pack_activations_for)"
                                               : "rotated activations for weights that are not");
  }
  if (w.format == PackedFormat::Bf16 &&
      (x.bf16_stride < x.cols_padded ||
       x.bf16.size() != static_cast<std::size_t>(x.tokens * x.bf16_stride))) {
    throw std::invalid_argument("BF16 activations whose rows are not bf16_stride apart");
  }
  if (w.format == PackedFormat::Int4 &&
      x.scaled_sum.size() != static_cast<std::size_t>(x.tokens * x.groups())) {
    throw std::invalid_argument("INT4 activations without their scaled group sums");
  }
  if ((w.format == PackedFormat::Int8 || w.format == PackedFormat::Mxfp4) &&
      x.start.size() != static_cast<std::size_t>(x.tokens * x.groups())) {
    throw std::invalid_argument("INT8 or MXFP4 activations without their sums' starts");
  }
}

void packed_matmul(const PackedMatrix& w, const PackedActivations& x, float* y,
                   std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                   CpuVariant variant) {
  check_activations(w, x);
  if (widened_activations(w, x) && variant != CpuVariant::Amx) {
    throw std::invalid_argument(
        "BF16 activations for INT8 or INT4 weights are multiplied by the AMX variant only, not " +
        std::string(variant_name(variant)));
  }
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
