// What a host weight matrix becomes in a CUDA GPU's memory, computed on the host: plain fp32
// matrices stay fp32 (routers and small tensors, where rounding could tip a choice), every
// other format (BF16, F16, FP8 with block scales, GGUF blocks, MXFP4, Tandem's packed INT8,
// INT4 and BF16) becomes the BF16 rounding of the fp32 weights the CPU multiplies with. A
// routed expert packed in slices per thread pool is joined back into whole matrices.
//
// No CUDA here: this is the part of the CUDA backend every machine can test.
#pragma once

#include <cstdint>

#include "engine/model/model_weights.h"
#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend {

enum class DeviceRowType { Bf16, F32 };
DeviceRowType device_row_type(const kernels::WeightMatrix& m);
std::uint64_t device_matrix_bytes(const kernels::WeightMatrix& m);

// Rows [r0, r1) of `m` as the fp32 weights the CPU multiplies with (stored rows through their
// dtype and block scales, or the packed form).
void matrix_rows_f32(const kernels::WeightMatrix& m, std::int64_t r0, std::int64_t r1, float* out);
// Rows [r0, r1) in the device's row type (device_row_type), into `out`.
void device_rows(const kernels::WeightMatrix& m, std::int64_t r0, std::int64_t r1, void* out);

// A routed expert's three products on the device, always BF16: gate and up [inner x hidden],
// down [hidden x inner].
enum class ExpertPart { Gate = 0, Up = 1, Down = 2 };
struct ExpertShape {
  std::int64_t inner = 0, hidden = 0;
};
ExpertShape expert_shape(const model::FeedForwardWeights& e);
std::int64_t expert_part_rows(const ExpertShape& s, ExpertPart part);
std::int64_t expert_part_cols(const ExpertShape& s, ExpertPart part);
// Bytes of the three BF16 matrices and the biases (gpt-oss), each 256-byte aligned.
std::uint64_t device_expert_bytes(const model::FeedForwardWeights& e);
// Rows [r0, r1) of one product as BF16, slices joined.
void expert_rows_bf16(const model::FeedForwardWeights& e, ExpertPart part, std::int64_t r0,
                      std::int64_t r1, std::uint16_t* out);

}  // namespace tandem::backend
