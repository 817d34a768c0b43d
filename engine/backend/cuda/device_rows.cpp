#include "engine/backend/cuda/device_rows.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::backend {
namespace {

std::uint64_t aligned(std::uint64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

void to_bf16(const float* in, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = kernels::f32_to_bf16(in[i]);
}

}  // namespace

DeviceRowType device_row_type(const kernels::WeightMatrix& m) {
  return m.dtype == kernels::DType::F32 && m.block_scale == nullptr && m.packed == nullptr
             ? DeviceRowType::F32
             : DeviceRowType::Bf16;
}

std::uint64_t device_matrix_bytes(const kernels::WeightMatrix& m) {
  const std::uint64_t element = device_row_type(m) == DeviceRowType::F32 ? 4 : 2;
  return static_cast<std::uint64_t>(m.rows) * static_cast<std::uint64_t>(m.cols) * element;
}

void matrix_rows_f32(const kernels::WeightMatrix& m, std::int64_t r0, std::int64_t r1, float* out) {
  for (std::int64_t r = r0; r < r1; ++r) {
    float* row = out + (r - r0) * m.cols;
    if (m.packed != nullptr)
      kernels::unpack_row(*m.packed, r, row);
    else
      m.row_f32(r, row);
  }
}

void device_rows(const kernels::WeightMatrix& m, std::int64_t r0, std::int64_t r1, void* out) {
  if (device_row_type(m) == DeviceRowType::F32) {
    matrix_rows_f32(m, r0, r1, static_cast<float*>(out));
    return;
  }
  std::vector<float> row(static_cast<std::size_t>(m.cols));
  auto* target = static_cast<std::uint16_t*>(out);
  for (std::int64_t r = r0; r < r1; ++r) {
    matrix_rows_f32(m, r, r + 1, row.data());
    to_bf16(row.data(), m.cols, target + (r - r0) * m.cols);
  }
}

ExpertShape expert_shape(const model::FeedForwardWeights& e) {
  ExpertShape s;
  if (!e.slices.empty()) {
    for (const model::ExpertSlice& slice : e.slices) s.inner += slice.width;
    s.hidden = e.slices.front().gate->cols;
    return s;
  }
  s.inner = e.gate.rows;
  s.hidden = e.gate.cols;
  return s;
}

std::int64_t expert_part_rows(const ExpertShape& s, ExpertPart part) {
  return part == ExpertPart::Down ? s.hidden : s.inner;
}

std::int64_t expert_part_cols(const ExpertShape& s, ExpertPart part) {
  return part == ExpertPart::Down ? s.inner : s.hidden;
}

std::uint64_t device_expert_bytes(const model::FeedForwardWeights& e) {
  const ExpertShape s = expert_shape(e);
  const auto matrix = aligned(static_cast<std::uint64_t>(s.inner * s.hidden) * 2);
  std::uint64_t bytes = 3 * matrix;
  for (const std::vector<float>* bias : {&e.gate_bias, &e.up_bias, &e.down_bias})
    bytes += aligned(bias->size() * sizeof(float));
  return bytes;
}

void expert_rows_bf16(const model::FeedForwardWeights& e, ExpertPart part, std::int64_t r0,
                      std::int64_t r1, std::uint16_t* out) {
  const ExpertShape s = expert_shape(e);
  const std::int64_t cols = expert_part_cols(s, part);
  if (e.slices.empty()) {
    const kernels::WeightMatrix& m = part == ExpertPart::Gate ? e.gate
                                     : part == ExpertPart::Up ? e.up
                                                              : e.down;
    if (device_row_type(m) == DeviceRowType::Bf16) {
      device_rows(m, r0, r1, out);
      return;
    }
    // An fp32 expert (a small checkpoint) is still BF16 on the device.
    std::vector<float> rows(static_cast<std::size_t>((r1 - r0) * cols));
    matrix_rows_f32(m, r0, r1, rows.data());
    to_bf16(rows.data(), (r1 - r0) * cols, out);
    return;
  }
  // Slices split the inner dimension: gate and up rows, down columns.
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (std::int64_t r = r0; r < r1; ++r) {
    if (part == ExpertPart::Down) {
      for (const model::ExpertSlice& slice : e.slices) {
        std::vector<float> piece(static_cast<std::size_t>(slice.width));
        kernels::unpack_row(*slice.down, r, piece.data());
        std::copy(piece.begin(), piece.end(), row.begin() + slice.begin);
      }
    } else {
      bool found = false;
      for (const model::ExpertSlice& slice : e.slices) {
        if (r >= slice.begin && r < slice.begin + slice.width) {
          kernels::unpack_row(part == ExpertPart::Gate ? *slice.gate : *slice.up, r - slice.begin,
                              row.data());
          found = true;
          break;
        }
      }
      if (!found) {
        throw std::logic_error("expert row " + std::to_string(r) + " is in no slice");
      }
    }
    to_bf16(row.data(), cols, out + (r - r0) * cols);
  }
}

}  // namespace tandem::backend
