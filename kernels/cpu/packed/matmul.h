// Matrix products with weights pre-packed for the CPU kernels: INT8 and INT4 (a scale per row
// and group of columns; INT4 an offset too) and BF16; INT8 and INT4 multiply activations
// quantised to INT8 per token and group of columns. Every variant (scalar, AVX2, AVX-512, AMX)
// reads the same packed layout and, for INT8 and INT4, computes exactly the same integer sums
// and combines them in the same order; the scalar code is the reference.
//
// Layout: rows in blocks of 16. A step is 64 bytes, one AVX-512 register: INT8 stores per step
// 4 columns of the 16 rows (4 bytes a row), each byte the weight plus 128 (unsigned), so
// VNNI's unsigned-by-signed dot product can take the activations as the signed side. INT8's
// groups are kInt8WeightGroup columns (8 steps), and each pair of groups starts with a 64-byte
// header of 32 FP16 scales (the 16 rows' of the first group, then of the second), so a block is one
// stream with its scales beside their weights and every step stays aligned: weight = (stored -
// 128) * scale. BF16 stores, per block and per pair of columns, 16 rows x 2 values, as
// VDPBF16PS wants.
//
// INT4 stores, per block and per group of columns, a 64-byte header (16 FP16 scales, then 16
// FP16 offsets, one of each per row), then per 8 columns of the group 64 bytes in the INT8
// layout of the first 4 columns, each byte holding column c in its low nibble and column c + 4
// in its high one (0..15). A weight is nibble * scale + offset: an asymmetric grid, which
// keeps a group whose weights lean to one side (and every Q4_1 block of 32) at full
// resolution. Two AND/shift steps turn 64 nibble bytes into two INT8-layout registers of
// unsigned bytes for VPDPBUSD; the offset comes in per group as offset * (activation scale *
// sum of the token's quantised activations over the group). Scales beside their weights: one
// stream per block, as GGUF's blocks.
//
// MXFP4 (gpt-oss's experts, kept as the checkpoint stores them) has INT4's nibble layout
// without the headers, groups of 32 columns, each nibble an FP4 E2M1 code, and its scales
// apart (group_scale). The kernels turn codes into the unsigned bytes 2 * value + 12 (0..24)
// with one table lookup (VPSHUFB) where INT4 takes the nibble as it is, and take 12 * (group
// sum) back out; the group's scale is its E8M0 exponent 2^(e - 127) halved. Every MXFP4
// weight is kept exactly.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/cpu/aligned_bytes.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/rotation.h"

namespace tandem::kernels {

enum class PackedFormat { Int8, Int4, Bf16, Mxfp4 };

// "int8", "int4", "bf16", "mxfp4": as manifests and benchmarks name them. (Inline: the
// manifest's parsers are built for fuzzing without the kernels.)
inline std::string_view packed_format_name(PackedFormat f) {
  switch (f) {
    case PackedFormat::Int8:
      return "int8";
    case PackedFormat::Int4:
      return "int4";
    case PackedFormat::Bf16:
      return "bf16";
    case PackedFormat::Mxfp4:
      return "mxfp4";
  }
  return "int8";
}

inline constexpr std::int64_t kMxfp4Group = 32;
// 2 * value + 12 for each FP4 E2M1 code: what the kernels multiply MXFP4 weights as.
inline constexpr std::uint8_t kMxfp4Biased[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                  12, 11, 10, 9,  8,  6,  4,  0};
inline constexpr int kMxfp4Bias = 12;
// Formats whose bytes hold two columns each (INT4's layout).
inline bool nibble_format(PackedFormat f) {
  return f == PackedFormat::Int4 || f == PackedFormat::Mxfp4;
}

inline constexpr std::int64_t kPackRows = 16;

// INT8's columns per scale. One scale per row let a row's largest weights set the step for all
// its others: on SmolLM2-135M (docs/benchmarks.md, "INT8 with a scale per 32 columns"), mean KL
// from BF16 went from 0.0107 to 0.0069 with its weights taken off the 4-bit grid, and from
// 0.0094 to 0.0058 on the file as shipped, for a sixteenth more bytes. 32 is also the
// activations' group, so both scales meet at the same group end, and GGUF's Q8_0 blocks (an
// FP16 scale per 32) are kept exactly.
inline constexpr std::int64_t kInt8WeightGroup = 32;
// Bits an INT8 weight takes with its share of the group's FP16 scale: 8.5.
inline constexpr double int8_bits_per_weight() {
  return 8.0 + 16.0 / static_cast<double>(kInt8WeightGroup);
}

struct PackedMatrix {
  PackedFormat format = PackedFormat::Int8;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t cols_padded = 0;  // a multiple of 4 (INT8), 8 (INT4, MXFP4) or 2 (BF16)
  std::int64_t blocks = 0;       // ceil(rows / 16)
  // Columns per scale: INT8 kInt8WeightGroup; INT4 a multiple of 8; MXFP4 32; BF16 0.
  std::int64_t group = 0;
  // Rotated INT8 (pack_int8_rotated): the block of the rotation its rows were packed in
  // (rotation.h), with one scale a row and block, repeated in each of its groups' headers; 0 for
  // the rest.
  std::int64_t rotation = 0;
  std::int64_t rotation_blocks() const { return rotation > 0 ? cols_padded / rotation : 0; }
  AlignedBytes bytes;
  // MXFP4: weight = (kMxfp4Biased[code] - 12) * group_scale[g * blocks * 16 + row],
  // group-major so that a block's 16 scales of one group are one vector load. (INT4 keeps
  // its scales in the blocks' headers.)
  std::vector<float> group_scale;

  std::int64_t groups() const { return group > 0 ? (cols_padded + group - 1) / group : 0; }

  std::size_t block_bytes() const;
  // Bytes of a step: 16 rows' weights of 4 columns (INT8), 8 (INT4, MXFP4) or 2 (BF16), one
  // AVX-512 register; INT4's and INT8's headers are a step or half of one.
  static constexpr std::int64_t kStepBytes = 64;
  // INT4: the header of group g in a block (16 FP16 scales, 16 FP16 offsets) and the first of
  // its 64-byte steps of nibbles, from the block's start.
  std::int64_t int4_header_offset(std::int64_t g) const {
    return (g * (group / 8) + g) * kInt4StepBytes;
  }
  std::int64_t int4_step_offset(std::int64_t g) const {
    return int4_header_offset(g) + kInt4StepBytes;
  }
  static constexpr std::int64_t kInt4StepBytes = kStepBytes;
  // INT8: the 16 FP16 scales of group g in a block, and the step of columns 4k to 4k + 3
  // (kInt8WeightGroup / 4 steps a group, a header before each pair of groups), from the block's
  // start. Constants, so that the kernels shift where a division by the group would cost them.
  static constexpr std::int64_t int8_header_offset(std::int64_t g) {
    return (g / 2) * (kInt8PairSteps + 1) * kStepBytes + (g % 2) * (kStepBytes / 2);
  }
  static constexpr std::int64_t int8_step_offset(std::int64_t k) {
    return (k + k / kInt8PairSteps + 1) * kStepBytes;
  }
  static constexpr std::int64_t kInt8PairSteps = 2 * kInt8WeightGroup / 4;
  const std::uint8_t* block(std::int64_t b) const {
    return bytes.data.get() + b * static_cast<std::int64_t>(block_bytes());
  }
  std::uint8_t* block(std::int64_t b) {
    return bytes.data.get() + b * static_cast<std::int64_t>(block_bytes());
  }
};

// Packs a stored matrix (any dtype, with its fp8 block scales) row by row. INT8 uses a
// symmetric scale per row and group of kInt8WeightGroup columns: max |w| / 127, rounded up to FP16
// (so no weight clips) and the weights rounded on that FP16 step. Weights whose scale would pass
// FP16's range (|w| > 127 * 65504) throw std::invalid_argument.
PackedMatrix pack_int8(const WeightMatrix& source);
// Rotated INT8: each row rotated (rotation.h, blocks of rotation_block(cols): the whole row
// where its width is a power of two, else the largest power of two that divides it), then
// quantised with one scale per rotation block (max |w| / 127, rounded up to FP16) written into
// the header of each of the block's groups, so the layout is INT8's and each variant reads it
// as it reads INT8. Its activations are rotated too, with one scale per token and block
// (pack_activations with the matrix's rotation); the kernels sum each block whole before one
// conversion, so there are no group ends inside a block, and AMX takes integer tiles. A scale
// per block rather than per row: a large value spreads over its own block only, and one scale
// a row let it take the other blocks' resolution (SmolLM2-135M, whose rows are 9 blocks of 64
// or 3 of 512: mean KL from BF16 0.0080 with one scale a row, 0.0046 per block, against
// INT8's 0.0070 on AVX-512 and 0.0029 on AMX, widened; docs/benchmarks.md, "INT8 rotated,
// built"). A matrix whose width no power of two of at least
// kMinRotationBlock divides, or too wide for a block's 32-bit sum, is packed as plain INT8
// (rotation 0), which every kernel takes.
PackedMatrix pack_int8_rotated(const WeightMatrix& source);
// The widest run of columns whose INT8 sum (stored bytes up to 255 times activations up to 127
// in magnitude) fits in 32 bits: the limit of an INT8 group, and of a rotation block.
inline constexpr std::int64_t kMaxInt8SumCols =
    std::numeric_limits<std::int32_t>::max() / (255 * 127) / 4 * 4;
// The rotation block pack_int8_rotated takes for a matrix `cols` wide (0: packed as INT8).
inline std::int64_t int8_rotation_for(std::int64_t cols) {
  const std::int64_t block = rotation_block(cols);
  return block > kMaxInt8SumCols ? 0 : block;
}
PackedMatrix pack_bf16(const WeightMatrix& source);
// The kernel variant that multiplies `format` where the CPU runs `variant`: the AVX-512 BF16
// kernel needs AVX512_BF16, and without it the AVX2 one takes BF16.
CpuVariant packed_variant_for(PackedFormat format, CpuVariant variant);
// INT4: per (row, group of `group` columns along k) a scale and an offset (FP16), nibbles
// 0..15, weight = nibble * scale + offset: of the grid spanning the group's range in 15
// steps, two clipping its ends a little and those of 14 to 8 steps that hold every weight
// exactly, the one with the least squared error, then refit by least squares. `group` must be a
// positive multiple of 8 (the last group may be shorter). Weights beyond FP16's range (65504) throw
// std::invalid_argument.
PackedMatrix pack_int4(const WeightMatrix& source, std::int64_t group);
// Groups of 32 (5 bits a weight, as GGUF's Q4_1): measured on SmolLM2-135M (Q4_1 as
// shipped; docs/benchmarks.md, "INT4 accuracy"), mean KL from BF16 0.0073 at 32 and 0.162 at
// 64 (a Q4_1 block of 32 fits one group exactly, two of them in one group do not).
inline constexpr std::int64_t kDefaultInt4Group = 32;
// Bits an INT4 weight takes with its share of the group's FP16 scale and offset.
inline constexpr double int4_bits_per_weight(std::int64_t group) {
  return 4.0 + 32.0 / static_cast<double>(group);
}
// MXFP4, exactly: `source` must hold FP4 codes (DType::F4E2M1) with one E8M0-derived scale
// per row and 32 columns (block_rows 1, block_cols 32), as gpt-oss's experts do; anything
// else throws std::invalid_argument (MXFP4 is read, not made).
PackedMatrix pack_mxfp4(const WeightMatrix& source);

// Bytes a packed matrix holds (weights and scales), e.g. for memory estimates.
std::uint64_t packed_matrix_bytes(const PackedMatrix& m);

// The shape of a packed matrix without its data: sizes for writers that declare files up
// front. `bytes` stays empty; blocks * block_bytes() and the scale counts are final.
PackedMatrix packed_shape(std::int64_t rows, std::int64_t cols, PackedFormat format,
                          std::int64_t group = 0);
std::size_t packed_scale_count(const PackedMatrix& m);  // group_scale entries (MXFP4)

// Row `r` as the fp32 weights the kernels multiply with (for verification); a rotated row
// turned back, so the original row's approximation.
void unpack_row(const PackedMatrix& m, std::int64_t r, float* out);

// Activations in the form the kernels read: INT8 quantised per token and group of columns
// (symmetric, max |x| / 127 over the group), with each group's sum of quantised values for
// the stored weights' offset (INT8 +128, MXFP4 +12, INT4's offset per group); or BF16. The
// kernels add exact integer sums per group and combine the groups with one fused multiply-add
// each (INT4: two, the second for its offset), in group order, so every variant agrees to the
// bit. The weights' groups are the activations' groups (kInt8ActivationGroup for INT8).
// INT8's and MXFP4's sums start from minus their offset (128, 12) times the group's sum of
// activations, so the group's end only converts and scales.
struct PackedActivations {
  PackedFormat format = PackedFormat::Int8;
  std::int64_t tokens = 0;
  std::int64_t cols_padded = 0;
  std::int64_t group = 0;               // INT8, INT4, MXFP4: columns per scale (last may be short)
  std::vector<std::int8_t> q;           // INT8, INT4, MXFP4: [tokens x cols_padded]
  std::vector<float> scale;             // INT8, INT4, MXFP4: [tokens x groups]
  std::vector<std::int32_t> group_sum;  // INT8, INT4, MXFP4: [tokens x groups]
  // INT8, MXFP4: [tokens x groups], what each group's integer sum of stored weights times
  // activations starts from, minus the weights' offset (128, 12) times group_sum: once here
  // rather than at every block's group start (AVX-512 INT8 products 5-10% faster, Zen 5).
  std::vector<std::int32_t> start;
  // INT4: [tokens x groups], scale times group_sum, which each group's weight offsets multiply:
  // once here rather than at every block's group end (INT4 products 10-15% faster).
  std::vector<float> scaled_sum;
  // BF16: [tokens x bf16_stride], each row's values past cols_padded zero. The stride is
  // cols_padded, or more for widened products (widened_row_stride).
  std::vector<std::uint16_t> bf16;
  std::int64_t bf16_stride = 0;
  // Rotated INT8 (pack_int8_rotated): the weights' rotation; each token's row rotated before it
  // was quantised with one scale per rotation block (repeated per group in `scale`, so that
  // grouped kernels read it as INT8); and [tokens x cols_padded / rotation] the sum of `start`
  // over each block's groups, where a block's sum starts.
  std::int64_t rotation = 0;
  std::vector<std::int32_t> block_start;

  std::int64_t groups() const { return group > 0 ? (cols_padded + group - 1) / group : 0; }
};

// Columns per activation scale for INT8 weights. One scale per token lets a few large
// activations (outlier channels) take the resolution from all the others. Measured on
// SmolLM2-135M (docs/benchmarks.md, "INT8 accuracy"; weights then with one scale per row),
// mean KL from BF16: one scale per token 0.052, groups of 128 0.018, of 64 0.012, of 32 0.0094
// (4: 0.0062, the weights' own share). 32, as llama.cpp's Q8 activation blocks and INT8's weight
// groups; the AMX kernels take half tiles for it.
inline constexpr std::int64_t kInt8ActivationGroup = kInt8WeightGroup;
// Activation group 0 for INT8: one scale for the whole row (as oneDNN's INT8 products take; the
// packed kernels take kInt8ActivationGroup only).
inline constexpr std::int64_t kWholeRow = 0;

// `group`: columns per scale, a positive multiple of 4 (INT8; or kWholeRow) or of 8 (INT4,
// MXFP4: the weights' group); ignored for BF16. `rotation` (INT8 only, the weights' rotation
// block, 0 for none): each row rotated first, then quantised with one scale per block.
// Anything else throws std::invalid_argument.
void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group, std::int64_t rotation = 0);
// The same with the tokens spread over `parallel`'s threads, from kParallelPackTokens on
// (fewer are quicker on the calling thread). Every row is packed as above, to the bit.
inline constexpr std::int64_t kParallelPackTokens = 32;
void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out, std::int64_t group, const ParallelFor& parallel,
                      std::int64_t rotation = 0);
// The activation group the kernels for `w` take.
std::int64_t activation_group(const PackedMatrix& w);
// Activations in the form the kernels for `w` read.
inline void pack_activations_for(const PackedMatrix& w, const float* x, std::int64_t tokens,
                                 PackedActivations& out) {
  pack_activations(x, tokens, w.cols, w.format, out, activation_group(w), w.rotation);
}
inline void pack_activations_for(const PackedMatrix& w, const float* x, std::int64_t tokens,
                                 PackedActivations& out, const ParallelFor& parallel) {
  pack_activations(x, tokens, w.cols, w.format, out, activation_group(w), parallel, w.rotation);
}

// Widened products (AMX only): from amx_widen_tokens(format) tokens on, the AMX variant
// multiplies INT8 and INT4 weights by activations in BF16 rather than quantised, through
// TDPBF16PS, each run of up to 8 weight blocks first widened to BF16 (the weight as unpack_row
// gives it, rounded to nearest even) in a per-thread buffer and then taken by every token's
// tiles, the tokens in panels of 32.
// Integer tiles would have to flush their sums at every group of 32 columns (a conversion
// and a scaling per token and row through AVX-512): on a 2-core Xeon with AMX they ran at
// 0.82-0.87x the AVX-512 kernel on the expert and projection shapes at every token count, so
// quantised activations take the AVX-512 kernel there. Widening a weight costs a fixed third
// of a vector instruction, paid once per block however many tokens share it: widened
// products beat AVX-512 from about 64 tokens for INT8 (1.06-1.23x at 64, 1.2-1.6x at 128)
// and 32 for INT4 (1.01-1.14x at 32, 1.08-1.38x at 64), measured interleaved by `tandem bench
// --kernels`; end to end, INT4 experts of 32 tokens each (a 512-token prompt of the
// Qwen3-30B-A3B-shaped synthetic) took 2.09 ms a token widened against 1.73 on AVX-512, so
// both widen from 64 unless measured (docs/benchmarks.md, "INT8 and INT4 widened to BF16 on
// AMX"). Activations in BF16 are also closer to the fp32 product than INT8 per 32 columns.
// Every variant that takes them sums in fp32 in its own order (as BF16 weights do), so the
// variants agree to rounding, not to the bit.
inline constexpr std::int64_t kAmxWidenInt8Tokens = 64;
inline constexpr std::int64_t kAmxWidenInt4Tokens = 64;
// The tokens from which AMX widens `format` in this process (0: never, as for BF16 and
// MXFP4): the defaults above until set_amx_widen_tokens changes them, as the engine does with
// what it measures on the machine (widen_crossover.h), since where widening starts to pay
// depends on how the CPU overlaps its tile unit with its vector units.
std::int64_t amx_widen_tokens(PackedFormat format);
// Sets where AMX widens INT8 or INT4 products (0: never); any other format, or a negative
// count, throws std::invalid_argument. Set it between products, not during one.
void set_amx_widen_tokens(PackedFormat format, std::int64_t tokens);
// Whether the kernels for `format` on `variant` take a product of `tokens` tokens widened.
inline bool widened_product(PackedFormat format, std::int64_t tokens, CpuVariant variant) {
  const std::int64_t from = amx_widen_tokens(format);
  return variant == CpuVariant::Amx && from > 0 && tokens >= from;
}
// The same for the matrix `w`: rotated INT8 is never widened (AMX sums it in integer tiles).
inline bool widened_product(const PackedMatrix& w, std::int64_t tokens, CpuVariant variant) {
  return w.rotation == 0 && widened_product(w.format, tokens, variant);
}
// Values from one token's row to the next in widened activations: the weights' padded width,
// and 32 more (64 bytes) where rows would lie a multiple of 1 KiB apart. Sixteen rows 4 KiB
// apart (Qwen3-30B-A3B's 2048 columns) fall in one set of a 12-way first-level cache, and a
// tile load reads sixteen. Padded so, the q and o projections and the experts' gate and up
// (INT8, INT4), at 64 to 512 tokens on two threads, ran 1.01-1.17x as fast, once 0.95x, in 24
// pairs alternated in one process (docs/benchmarks.md, "Widened products in token panels").
inline std::int64_t widened_row_stride(std::int64_t cols_padded) {
  return (cols_padded * 2) % 1024 == 0 ? cols_padded + 32 : cols_padded;
}
// Activations for `w` in BF16, as a widened product reads them (cols_padded as w's, rows
// widened_row_stride apart).
void pack_widened_activations(const PackedMatrix& w, const float* x, std::int64_t tokens,
                              PackedActivations& out, const ParallelFor* parallel = nullptr);
// Activations in the form the kernels for `w` on `variant` read for `tokens` tokens: BF16
// where the product is widened, else as pack_activations_for above.
void pack_activations_for(const PackedMatrix& w, const float* x, std::int64_t tokens,
                          PackedActivations& out, CpuVariant variant,
                          const ParallelFor* parallel = nullptr);
// Whether `x` holds BF16 activations for INT8 or INT4 weights `w` (a widened product).
inline bool widened_activations(const PackedMatrix& w, const PackedActivations& x) {
  return x.format == PackedFormat::Bf16 && w.format != PackedFormat::Bf16;
}

// Rows rows[0..n) of `all` into `out`, in that order: the same, bit for bit, as packing those
// rows' values (each row is quantised on its own). MoE layers pack a prompt's tokens once and
// gather each expert's, instead of quantising every token once per expert it goes to.
void gather_activations(const PackedActivations& all, const std::int64_t* rows, std::int64_t n,
                        PackedActivations& out);

// Throws std::invalid_argument unless `x` was packed for `w` (format, width, group).
void check_activations(const PackedMatrix& w, const PackedActivations& x);

// y[t * y_stride + r] = sum_k x[t, k] * W[r, k] for rows r of blocks [block_begin, block_end).
// Widened activations (BF16 for INT8 or INT4 weights) take the AMX variant only: any other
// throws std::invalid_argument (pack with pack_activations_for(w, ..., variant)).
void packed_matmul(const PackedMatrix& w, const PackedActivations& x, float* y,
                   std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                   CpuVariant variant);

// The variants, for tests and benchmarks (packed_matmul dispatches to them). The scalar one
// is the reference for widened products too: each weight as unpack_row gives it (INT4's
// nibble * scale + offset fused) rounded to BF16, times the BF16 activation, summed in fp32.
void packed_matmul_scalar(const PackedMatrix& w, const PackedActivations& x, float* y,
                          std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end);
// AVX2: INT8 and INT4 through AVX-VNNI where the CPU has it, else VPMADDUBSW (the _plain
// kernels, which tests also run on AVX-VNNI machines).
void packed_matmul_avx2(const PackedMatrix& w, const PackedActivations& x, float* y,
                        std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end);
void packed_matmul_avx2_plain(const PackedMatrix& w, const PackedActivations& x, float* y,
                              std::int64_t y_stride, std::int64_t block_begin,
                              std::int64_t block_end);
// INT8 and INT4 only; needs AVX-VNNI.
void packed_matmul_avx_vnni(const PackedMatrix& w, const PackedActivations& x, float* y,
                            std::int64_t y_stride, std::int64_t block_begin,
                            std::int64_t block_end);
void packed_matmul_avx512(const PackedMatrix& w, const PackedActivations& x, float* y,
                          std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end);
// Tokens from which AMX takes a BF16 product, or the tokens after its last whole tile of 16,
// in one tile of fewer rows. On a 2-core Xeon with AMX (`tandem bench --kernels`, tiles and
// AVX-512 interleaved) BF16 tiles ran 1.01-1.09x the AVX-512 kernel at one token (within the
// noise), 1.26-1.37x at 4 and 2.4-3x at 13-16, on every Qwen3-30B-A3B shape.
inline constexpr std::int64_t kAmxMinTokens = 4;
// Tokens from which AMX takes rotated INT8 (in blocks of 64 or more) into integer tiles: all.
// A decoded token's products in one-row tiles read the weights faster than the AVX-512 kernel
// (`tandem bench --kernels --formats int8-rotated`, 2 threads: q 42.5 against 36.7 GFLOP/s,
// the head 47.3 against 39.8, expert up 37.7 against 34.2, expert down 33.3 against 35.8), and
// decoding the Qwen3-30B-A3B-shaped synthetic, `tandem bench -p 0 -n 64 -t 2 -r 3`, six pairs
// alternated, ran at 23.9-29.4 tokens/s against 19.3-27.4 (ahead in five).
inline constexpr std::int64_t kAmxMinRotatedTokens = 1;
// BF16 weights through tiles from `min_tokens` tokens on (see above), fewer through the
// AVX-512 kernel; widened activations through tiles at every token count (partial tiles
// below 16); rotated INT8 in blocks of 64 or more through integer tiles at every token count
// (kAmxMinRotatedTokens; a 32-token expert product of Qwen3-30B-A3B's shapes, weights from
// memory, two threads: 512-543 GFLOP/s against 371-397 on AVX-512 and 309-327 for plain INT8,
// in a harness that started a thread per product; `tandem bench --kernels`: 611-1041 against
// 368-507); INT8, INT4 and MXFP4 with quantised activations through the AVX-512 kernels (every AMX
// CPU has them). Integer sums are exact, so all agree with the AVX-512 variant to the bit.
void packed_matmul_amx(const PackedMatrix& w, const PackedActivations& x, float* y,
                       std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                       std::int64_t min_tokens = kAmxMinTokens);
// The AMX kernels with the tile unit performed in software, after the instruction set
// reference: for tests on CPUs without AMX (needs AVX-512 VNNI and BF16). Slow.
void packed_matmul_amx_emulated(const PackedMatrix& w, const PackedActivations& x, float* y,
                                std::int64_t y_stride, std::int64_t block_begin,
                                std::int64_t block_end, std::int64_t min_tokens = kAmxMinTokens);
// The AVX-512 kernels for tokens [t_begin, t_end) only.
void packed_matmul_avx512_tokens(const PackedMatrix& w, const PackedActivations& x, float* y,
                                 std::int64_t y_stride, std::int64_t block_begin,
                                 std::int64_t block_end, std::int64_t t_begin, std::int64_t t_end);

// Whole product, parallel over row blocks.
void packed_matmul_all(const PackedMatrix& w, const PackedActivations& x, float* y,
                       std::int64_t y_stride, CpuVariant variant, const ParallelFor& parallel);

}  // namespace tandem::kernels
