// Products with weights in a GGUF block format, computed on the blocks as stored: no
// dequantised copy of the model exists. As llama.cpp does, the activations are quantised to
// 8 bits with one scale per 32 values; each weight row's blocks are unpacked, a few rows at
// a time, into unsigned 8-bit codes with a scale and an offset per 16 weights
// (weight = scale * (code - bias) + offset, which every format can be written as: the bias
// is the symmetric formats' own, Q8_0's 128, Q4_0's 8, ..., the offset the minimum of
// the formats that have one), and the integer products of codes and activations are scaled
// and summed:
//
//   y[n] = sum over groups g of 16:  s[n, g] a[g] sum_i (u[n, i] - bias) q[i]  +  o[n, g] a[g]
//   sum_i q[i]
//
// where a[g] is the activation scale of g's 32-value block. The bias comes off in the
// integer sums, so no float sum cancels. The scalar reference, and
// AVX2 and AVX-512 (VNNI) variants of the integer part, all compute this sum; they differ
// only in the order of the float additions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::kernels {

// Weight rows unpacked for the dot kernels: `rows` rows of `cols` codes, and per 16-weight
// group a scale and an offset.
struct GgufUnpackedRows {
  std::int64_t cols = 0;
  int rows = 0;
  int bias = 0;
  std::vector<std::uint8_t> codes;  // [rows][cols]
  std::vector<float> scale;         // [rows][cols / 16]
  std::vector<float> offset;        // [rows][cols / 16]
  void resize(int r, std::int64_t c, int code_bias);
};

// Activations quantised for the dot kernels: per row, `cols` int8 values; per 16-value group
// its 32-block's scale and that scale times the group's sum of values; and per 4 values
// minus the weights' code bias times their sum (VNNI's products start from it).
struct GgufQuantizedActivations {
  std::int64_t cols = 0;
  std::int64_t rows = 0;
  int bias = 0;                          // the code bias of the weights they were quantised for
  std::vector<std::int8_t> values;       // [rows][cols]
  std::vector<float> scale;              // [rows][cols / 16]
  std::vector<float> scaled_sum;         // [rows][cols / 16]
  std::vector<std::int32_t> group_bias;  // [rows][cols / 16]
  // New (unique in the process) at each resize, which each quantisation starts with: kernels
  // that rearrange the activations reuse their copy while it is unchanged.
  std::uint64_t stamp = 0;
  void resize(std::int64_t r, std::int64_t c, int code_bias);
};

// Whether products with `t` take the block kernels (every GGUF block format does).
bool gguf_matmul_supports(DType t);
// The code bias of format `t` (one gguf_matmul_supports takes).
int gguf_code_bias(DType t);
// How many weights of format `t` share one scale and offset: 32 where the unpacked 16-weight
// groups come in equal pairs (Q8_0, Q4_0, Q4_K, Q5_K, ...), else 16 (Q6_K, Q3_K, Q2_K, ...).
int gguf_scale_weights(DType t);
// The largest code gguf_unpack_row writes for format `t`.
int gguf_max_code(DType t);

// Unpacks row `r` of `w` (a GGUF block format) into slot `slot` of `out`. The decoded
// weights scale * (code - bias) + offset equal dequantize_gguf_row's to float rounding.
void gguf_unpack_row(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot);
// Rows first_row .. first_row + n - 1 of `w` into slots 0 .. n - 1 of `out` (resized for
// them; the SIMD unpackers of `variant` where they apply, so for tiles of the SIMD variants
// only); slots past the matrix get zero scales and offsets, so that their stale codes add
// nothing. Returns the rows inside the matrix.
int gguf_unpack_tile(const WeightMatrix& w, std::int64_t first_row, int n, GgufUnpackedRows& out,
                     CpuVariant variant);
// The same with AVX2 for the formats most files use (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and the IQ
// grid formats, bit for bit; false, writing nothing, for the others. The AVX-512 variant uses
// it too, where gguf_unpack_row_avx512 does not apply.
bool gguf_unpack_row_avx2(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot);
// The same with AVX-512 and BMI2 for the IQ grid formats but IQ1_S; false, writing nothing,
// for the others.
bool gguf_unpack_row_avx512(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot);
// Quantises `m` rows of `k` values (k a multiple of 32) for weights of code bias `bias`: per
// 32 values, scale max|x| / 127 and values rounded to nearest.
void gguf_quantize_activations(const float* x, std::int64_t m, std::int64_t k, int bias,
                               GgufQuantizedActivations& out, const ParallelFor& parallel);

// One row of gguf_quantize_activations with AVX2, bit for bit; the AVX-512 variant uses it
// too (16.5 GB/s against 14.2 for the same with AVX-512's reductions, on Zen 5).
void gguf_quantize_row_avx2(const float* x, std::int64_t k, int bias, std::int8_t* q, float* scale,
                            float* scaled_sum, std::int32_t* group_bias);

// y[i * y_stride + r] = the sum above for unpacked row r < w.rows and activation row i < m.
void gguf_dot_rows_scalar(const GgufUnpackedRows& w, const GgufQuantizedActivations& a,
                          std::int64_t m, float* y, std::int64_t y_stride);
// For more tokens (past gguf_direct_max_tokens) AVX-512 (VNNI) takes 16 rows at a time, each
// tile unpacked and interleaved four codes by four, times all `m` activation rows: the tiles
// of rows [row_begin, row_end) (row_begin a multiple of 16), the activations rearranged once
// for all of them. The integer sums run over gguf_scale_weights(w.dtype) weights, and each
// tile's blocks are fetched while the tile before it computes.
//
// `ahead` names the rows the caller multiplies next (another product's, such as an expert's
// up rows after its gate rows): their first tile is fetched while the last tile here computes.
struct GgufRowsAhead {
  const WeightMatrix* w = nullptr;
  std::int64_t row = 0;
};
void gguf_matmul_tiles_avx512(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                              const GgufQuantizedActivations& a, std::int64_t m, float* y,
                              std::int64_t y_stride, GgufRowsAhead ahead = {});

// The same on AVX2, 8 rows at a time (row_begin a multiple of 8), VPMADDUBSW and VPMADDWD
// for VNNI, up to six tokens per loaded vector.
void gguf_matmul_tiles_avx2(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                            const GgufQuantizedActivations& a, std::int64_t m, float* y,
                            std::int64_t y_stride);

// Up to this many tokens the products read the blocks directly (gguf_block_dot_avx2 and
// _avx512), each row's codes built once in registers for all its tokens; from
// kGgufTileMinTokens on, tiles of unpacked rows. Measured on Zen 5 (`tandem bench
// --gguf-products --tokens 3,4,5`, 2 threads, Q8_0, Q4_K and Q6_K of the eight-layer synthetic):
// at 3 to 5 tokens the direct products ran 1.3-2.3x the tiles, at 4 tokens Q8_0's on AVX-512
// as fast; at 6, the Q4_K direct products of then (two sub-blocks a register) fell behind.
inline constexpr std::int64_t kGgufDirectMaxTokens = 5;
inline constexpr std::int64_t kGgufTileMinTokens = kGgufDirectMaxTokens + 1;
// AVX-512's direct products whose registers hold a whole scale's weights in each lane, so
// that a token's VPDPBUSD of a block or group add into one register converted and scaled once
// (a conversion, a multiply and a fused multiply-add a token per four or eight VPDPBUSD):
// Q4_K and Q5_K (a sub-block of 32 a lane), Q2_K, Q3_K and IQ4_XS (a group of 16 a lane), Q4_0
// and IQ4_NL (a block of 32 a lane, sixteen blocks a group). They take up to this many tokens.
// Measured on Zen 5 (`tandem bench --gguf-products --tokens 1,...,12 -t 1`, the eight-layer
// synthetic's files): Q4_K at 6 tokens ran 130 GFLOP/s in the tiles against 160-185 directly,
// at 8 about alike (160-180), at 9 and 12 faster in the tiles (200-245 against 185); at 8
// tokens Q2_K ran 241 directly against the tiles' 202, Q3_K 224 against 164, IQ4_XS 225
// against 221 and Q4_0 304 against 237, at 9 199 against 204, 170 against 176, 195 against
// 231 and 237 against 253.
inline constexpr std::int64_t kGgufLaneMaxTokens = 8;
// Q8_0's lane product, from two tokens, takes up to this many: 9 tokens ran 293 GFLOP/s against
// the tiles' 249-257, 10 ran 256-264 against 271-281 (as above, the synthetic's Q8_0).
inline constexpr std::int64_t kGgufQ8_0LaneMaxTokens = 9;
// The most tokens `variant`'s products of format `t` read the blocks directly for; more take
// the tiles. 0 for the scalar variant, which only unpacks rows.
std::int64_t gguf_direct_max_tokens(DType t, CpuVariant variant);

// Rows [row_begin, row_end) of w times up to gguf_direct_max_tokens(w.dtype, the variant)
// tokens' activations, read straight from the blocks (no unpacked row): the sum above,
// integer sums per 16 or 32 weights. Every format gguf_matmul_supports takes; false, writing
// nothing, for more tokens or another format.
bool gguf_block_dot_avx2(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                         std::int64_t row_begin, std::int64_t row_end, float* y,
                         std::int64_t y_stride);
bool gguf_block_dot_avx512(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                           std::int64_t row_begin, std::int64_t row_end, float* y,
                           std::int64_t y_stride);

// Rows [row_begin, row_end) of the product of `m` quantised activation rows (quantised for
// w's code bias) with `w`, on the calling thread; row_begin a multiple of
// gguf_rows_per_task(variant, m), as a parallel split over tasks of that many rows gives.
// `ahead` as gguf_matmul_tiles_avx512 takes it.
void gguf_matmul_rows(const GgufQuantizedActivations& a, std::int64_t m, const WeightMatrix& w,
                      std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride,
                      CpuVariant variant, GgufRowsAhead ahead = {});
std::int64_t gguf_rows_per_task(CpuVariant variant, std::int64_t m);

// y[m, n] = sum_k x[m, k] * W[n, k] for W in a GGUF block format, on `variant`'s kernel (AMX
// takes the AVX-512 one). W.cols must be a multiple of 32.
void gguf_matmul_xwt(const float* x, std::int64_t m, const WeightMatrix& w, float* y,
                     std::int64_t y_stride, const ParallelFor& parallel, CpuVariant variant);

}  // namespace tandem::kernels
