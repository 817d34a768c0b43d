#include "engine/model/expert_slicing.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/manifest.h"

namespace tandem::model {

SliceRange expert_slice(std::int64_t width, int pools, int pool) {
  const std::int64_t begin = width * pool / pools;
  return {begin, width * (pool + 1) / pools - begin};
}

bool can_slice_experts(std::int64_t width, int pools, std::int64_t int4_group) {
  if (pools == 1) return true;
  if (pools < 1 || width % (kernels::kPackRows * pools) != 0) return false;
  return int4_group <= 0 || (width / pools) % int4_group == 0;
}

std::vector<int> valid_pool_counts(std::int64_t width, std::int64_t int4_group, int up_to) {
  std::vector<int> out;
  for (int n = 1; n <= up_to; ++n) {
    if (can_slice_experts(width, n, int4_group)) out.push_back(n);
  }
  return out;
}

std::string expert_slicing_error(std::int64_t width, int pools, std::int64_t int4_group) {
  if (can_slice_experts(width, pools, int4_group)) return {};
  const std::vector<int> valid = valid_pool_counts(width, int4_group, std::max(8, pools));
  std::vector<std::string> numbers;
  for (int n : valid) numbers.push_back(std::to_string(n));
  const std::string counts =
      names_in_words(std::vector<std::string_view>(numbers.begin(), numbers.end()));
  const std::string units =
      int4_group > 0 ? fmt::format("whole 16-row blocks and scale groups of {} columns", int4_group)
                     : std::string("whole 16-row blocks");
  return fmt::format("the expert width {} cannot be split into {} pools of {}; use {} pool{}",
                     width, pools, units, counts, valid.size() == 1 ? "" : "s");
}

SliceSource::SliceSource(const kernels::WeightMatrix& matrix, SliceAxis axis, SliceRange range) {
  if (axis == SliceAxis::Rows) {
    matrix_ = matrix.slice_rows(range.begin, range.width);
    return;
  }
  if (matrix.dtype == kernels::DType::F4E2M1) {
    // MXFP4 columns stay codes: a slice of whole 32-column groups is whole bytes and whole
    // scales, so the packed slice holds exactly the stored weights.
    const std::int64_t group = kernels::kMxfp4Group;
    const std::int64_t scale_cols = (matrix.cols + group - 1) / group;
    const std::int64_t width_scales = (range.width + group - 1) / group;
    codes_.resize(static_cast<std::size_t>(matrix.rows * range.width / 2));
    scales_.resize(static_cast<std::size_t>(matrix.rows * width_scales));
    const auto* codes = static_cast<const std::uint8_t*>(matrix.data);
    for (std::int64_t r = 0; r < matrix.rows; ++r) {
      std::copy_n(codes + r * matrix.cols / 2 + range.begin / 2, range.width / 2,
                  codes_.begin() + r * range.width / 2);
      std::copy_n(matrix.block_scale + (matrix.first_row + r) * scale_cols + range.begin / group,
                  width_scales, scales_.begin() + r * width_scales);
    }
    matrix_ = matrix;
    matrix_.data = codes_.data();
    matrix_.cols = range.width;
    matrix_.block_scale = scales_.data();
    matrix_.first_row = 0;
    matrix_.packed = nullptr;
    matrix_.onednn = nullptr;
    return;
  }
  copy_.resize(static_cast<std::size_t>(matrix.rows * range.width));
  std::vector<float> row(static_cast<std::size_t>(matrix.cols));
  for (std::int64_t r = 0; r < matrix.rows; ++r) {
    matrix.row_f32(r, row.data());
    std::copy_n(row.begin() + range.begin, range.width, copy_.begin() + r * range.width);
  }
  matrix_.dtype = kernels::DType::F32;
  matrix_.data = copy_.data();
  matrix_.rows = matrix.rows;
  matrix_.cols = range.width;
}

kernels::PackedMatrix slice_shape(std::int64_t rows, std::int64_t cols, SliceAxis axis,
                                  SliceRange range, kernels::PackedFormat format,
                                  std::int64_t int4_group) {
  return axis == SliceAxis::Rows ? kernels::packed_shape(range.width, cols, format, int4_group)
                                 : kernels::packed_shape(rows, range.width, format, int4_group);
}

kernels::PackedMatrix pack_matrix(const kernels::WeightMatrix& matrix, kernels::PackedFormat format,
                                  std::int64_t int4_group, bool rotate_int8) {
  switch (format) {
    case kernels::PackedFormat::Int8:
      return rotate_int8 ? kernels::pack_int8_rotated(matrix) : kernels::pack_int8(matrix);
    case kernels::PackedFormat::Int4:
      return kernels::pack_int4(matrix, int4_group);
    case kernels::PackedFormat::Bf16:
      return kernels::pack_bf16(matrix);
    case kernels::PackedFormat::Mxfp4:
      return kernels::pack_mxfp4(matrix);
  }
  return {};
}

}  // namespace tandem::model
