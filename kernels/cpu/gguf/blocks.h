// The block formats GGUF files store weights in (ggml's quantisation types), as the scalar
// reference the block kernels are held to: one row of blocks turned into fp32. Layouts, by
// ggml type number (engine/model/ggml_type.h names them):
//   Q4_0 (2), Q4_1 (3), Q5_0 (6), Q5_1 (7), Q8_0 (8), IQ4_NL (20): 32 weights a block, one
//     fp16 scale (and for _1 an fp16 minimum), 4, 5 or 8 bits a weight.
//   Q2_K (10), Q3_K (11), Q4_K (12), Q5_K (13), Q6_K (14), IQ4_XS (23): 256-weight super-
//     blocks of 16 or 32-weight sub-blocks, each sub-block's scale (and minimum) quantised
//     against the super-block's fp16 ones.
//   IQ2_XXS (16), IQ2_XS (17), IQ2_S (22), IQ3_XXS (18), IQ3_S (21), IQ1_S (19), IQ1_M (29):
//     256-weight super-blocks of indices into lattice grids of 8 or 4 weights
//     (gguf/iq_grids.h) with sign bits and small sub-block scales of one fp16 d.
//   F32 (0), F16 (1), BF16 (30): one value each.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// True for the ggml types dequantize_gguf_row knows.
bool gguf_block_type_known(std::uint32_t ggml_type);
// The `n` weights of one row stored as `ggml_type` blocks at `blocks` (n a multiple of the
// type's block size) into out[0..n). False, writing nothing, for a type it does not know.
bool dequantize_gguf_row(std::uint32_t ggml_type, const void* blocks, std::int64_t n, float* out);

}  // namespace tandem::kernels
