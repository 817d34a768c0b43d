// The rotation of a product's inner dimension that rotated INT8 weights are packed in
// (matmul.h, pack_int8_rotated): x . w = (R x) . (R w) for an orthogonal R, so a product of
// rotated weights by rotated activations is the product of the originals. R turns the sign of
// some columns (a fixed pseudo-random choice per column), then takes each block of `block`
// consecutive columns through the Walsh-Hadamard transform scaled by 1 / sqrt(block). That
// spreads a few large values (outlier channels) over the whole block, so that one INT8 scale
// per block of a weight row and one of an activation row keep what a scale per 32 columns
// keeps unrotated (docs/benchmarks.md, "INT8 rotated, built").
//
// Every variant takes the same butterflies in the same order, so all agree to the bit.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// Blocks narrower than this spread outliers too little (SmolLM2-135M, blocks of at most 32,
// 16 and 8 columns: mean KL 0.0097, 0.0116, 0.0141 against 0.0080 at full width).
inline constexpr std::int64_t kMinRotationBlock = 32;

// The block a matrix `cols` wide is rotated in: the largest power of two that divides `cols`,
// or 0 where that is below kMinRotationBlock (such a matrix is not rotated). (Inline: the
// manifest's parsers, built for fuzzing without the kernels, check rotations with it.)
inline std::int64_t rotation_block(std::int64_t cols) {
  if (cols <= 0) return 0;
  const std::int64_t block = cols & -cols;
  return block >= kMinRotationBlock ? block : 0;
}

// Whether R turns the sign of column c: bit 0 of a hash of c. Part of the stored format:
// changing it changes what rotated matrices mean.
bool rotation_sign(std::int64_t c);

// v[0..n) into R v, in place; n a positive multiple of `block`, a power of two of at least 16.
// Anything else throws std::invalid_argument. Dispatches to the best variant the CPU has.
void rotate(float* v, std::int64_t n, std::int64_t block);
// The inverse, R^T v (the transform, then the signs): for turning packed rows back.
void unrotate(float* v, std::int64_t n, std::int64_t block);

// The variants, for tests: the scalar reference, AVX2 (needs AVX2) and AVX-512 (needs
// AVX512F).
void rotate_scalar(float* v, std::int64_t n, std::int64_t block);
void rotate_avx2(float* v, std::int64_t n, std::int64_t block);
void rotate_avx512(float* v, std::int64_t n, std::int64_t block);

}  // namespace tandem::kernels
