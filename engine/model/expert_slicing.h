// Routed experts split across NUMA pools. With N pools, each expert's intermediate dimension
// (moe_intermediate_size, I) is cut into N contiguous slices: pool i holds gate and up rows
// [i*I/N, (i+1)*I/N) and the down projection's columns of the same range, computes SiLU(gate)
// * up and a partial down output for its slice, and the pools' partial outputs are summed.
// Gate and up slices are exactly the rows of the whole matrices; a down slice is quantized
// on its own (its activations: a scale per token and group of the slice), so the sum differs
// from one pool's result by quantization noise only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::model {

struct SliceRange {
  std::int64_t begin = 0, width = 0;
};

// Pool `pool`'s range of an expert `width` wide split for `pools` pools.
SliceRange expert_slice(std::int64_t width, int pools, int pool);

// Whether `pools` pools cut `width` into whole 16-row blocks of the packed layout and, with
// `int4_group` > 0 (INT4 experts), into whole groups of down's columns. One pool always can.
bool can_slice_experts(std::int64_t width, int pools, std::int64_t int4_group);
// The pool counts up to `up_to` that can, ascending.
std::vector<int> valid_pool_counts(std::int64_t width, std::int64_t int4_group, int up_to);
// Empty when `pools` can; otherwise a sentence for the user that names the counts that can,
// e.g. "the expert width 768 cannot be split into 5 pools of whole 16-row blocks; use 1, 2,
// 3, 4, 6 or 8 pools".
std::string expert_slicing_error(std::int64_t width, int pools, std::int64_t int4_group);

// Gate and up are cut by rows (their outputs), down by columns (its inputs).
enum class SliceAxis { Rows, Columns };

// A slice of a stored matrix as a matrix of its own: a view for rows; for columns a copy in
// fp32 (stored rows cannot be cut by column; fp32 holds every stored type exactly, so
// packing the copy packs the same values).
class SliceSource {
 public:
  SliceSource(const kernels::WeightMatrix& matrix, SliceAxis axis, SliceRange range);
  SliceSource(const SliceSource&) = delete;  // matrix() may point into copy_
  SliceSource& operator=(const SliceSource&) = delete;
  const kernels::WeightMatrix& matrix() const { return matrix_; }

 private:
  std::vector<float> copy_;
  std::vector<std::uint8_t> codes_;  // an MXFP4 column slice
  std::vector<float> scales_;
  kernels::WeightMatrix matrix_;
};

// The packed shape (no data) of a slice of a rows x cols matrix.
kernels::PackedMatrix slice_shape(std::int64_t rows, std::int64_t cols, SliceAxis axis,
                                  SliceRange range, kernels::PackedFormat format,
                                  std::int64_t int4_group);

// The columns per scale a format's slices must keep whole: INT4's group, MXFP4's 32; 0 for
// BF16 and INT8 (a slice's INT8 groups start at its first column: INT8 rounds finely enough
// that where its groups fall hardly matters, and more pool counts stay possible, as 8 for
// GLM-4.5's 1408-wide experts).
inline std::int64_t scale_group(kernels::PackedFormat format, std::int64_t int4_group) {
  return format == kernels::PackedFormat::Int4    ? int4_group
         : format == kernels::PackedFormat::Mxfp4 ? kernels::kMxfp4Group
                                                  : 0;
}

// Packs a matrix in a packed format (INT4 with `int4_group` columns per scale; INT8 rotated
// where `rotate_int8`, kernels::pack_int8_rotated).
kernels::PackedMatrix pack_matrix(const kernels::WeightMatrix& matrix, kernels::PackedFormat format,
                                  std::int64_t int4_group, bool rotate_int8 = false);

}  // namespace tandem::model
