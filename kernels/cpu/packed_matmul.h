// Matrix products with weights pre-packed for the CPU kernels: INT8 (one scale per output
// row) and BF16. Every variant (scalar, AVX2, AVX-512) reads the same packed layout and, for
// INT8, computes exactly the same integer sums; the scalar code is the reference.
//
// Layout: rows in blocks of 16. INT8 stores, per block and per group of 4 columns, 16 rows x
// 4 bytes (64 bytes, one AVX-512 register), each byte the weight plus 128 (unsigned), so
// VNNI's unsigned-by-signed dot product can take the activations as the signed side. BF16
// stores, per block and per pair of columns, 16 rows x 2 values, as VDPBF16PS wants.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/isa.h"

namespace tandem::kernels {

enum class PackedFormat { Int8, Bf16 };

inline constexpr std::int64_t kPackRows = 16;

// 64-byte aligned storage, so each block starts on a cache line.
struct AlignedBytes {
  struct Free {
    void operator()(std::uint8_t* p) const;
  };
  std::unique_ptr<std::uint8_t, Free> data;
  std::size_t size = 0;
  static AlignedBytes allocate(std::size_t bytes);
};

struct PackedMatrix {
  PackedFormat format = PackedFormat::Int8;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t cols_padded = 0;  // a multiple of 4 (INT8) or 2 (BF16)
  std::int64_t blocks = 0;       // ceil(rows / 16)
  AlignedBytes bytes;
  std::vector<float> row_scale;  // INT8: weight = (stored - 128) * row_scale[row]

  std::size_t block_bytes() const;
  const std::uint8_t* block(std::int64_t b) const { return bytes.data.get() + b * static_cast<std::int64_t>(block_bytes()); }
  std::uint8_t* block(std::int64_t b) { return bytes.data.get() + b * static_cast<std::int64_t>(block_bytes()); }
};

// Packs a stored matrix (any dtype, with its fp8 block scales) row by row. INT8 uses a
// symmetric scale per row: max |w| / 127.
PackedMatrix pack_int8(const WeightMatrix& source);
PackedMatrix pack_bf16(const WeightMatrix& source);

// Activations in the form the kernels read: INT8 quantised per token (symmetric, max |x| /
// 127, with the sum of the quantised values for the +128 compensation), or BF16.
struct PackedActivations {
  PackedFormat format = PackedFormat::Int8;
  std::int64_t tokens = 0;
  std::int64_t cols_padded = 0;
  std::vector<std::int8_t> q;        // INT8: [tokens x cols_padded]
  std::vector<float> scale;          // INT8: per token
  std::vector<std::int32_t> q_sum;   // INT8: per token
  std::vector<std::uint16_t> bf16;   // BF16: [tokens x cols_padded]
};

void pack_activations(const float* x, std::int64_t tokens, std::int64_t cols, PackedFormat format,
                      PackedActivations& out);

// y[t * y_stride + r] = sum_k x[t, k] * W[r, k] for rows r of blocks [block_begin, block_end).
void packed_matmul(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                   std::int64_t block_begin, std::int64_t block_end, CpuVariant variant);

// The variants, for tests and benchmarks (packed_matmul dispatches to them).
void packed_matmul_scalar(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                          std::int64_t block_begin, std::int64_t block_end);
void packed_matmul_avx2(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                        std::int64_t block_begin, std::int64_t block_end);
void packed_matmul_avx512(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                          std::int64_t block_begin, std::int64_t block_end);

// Whole product, parallel over row blocks.
void packed_matmul_all(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t y_stride,
                       CpuVariant variant, const ParallelFor& parallel);

}  // namespace tandem::kernels
