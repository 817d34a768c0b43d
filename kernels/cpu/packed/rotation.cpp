#include "kernels/cpu/packed/rotation.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.h"

namespace tandem::kernels {
namespace {

void check_shape(std::int64_t n, std::int64_t block) {
  if (block < 16 || (block & (block - 1)) != 0 || n <= 0 || n % block != 0) {
    throw std::invalid_argument(
        "a rotation takes blocks of a power of two of at least 16 columns "
        "that divide the row, not " +
        std::to_string(block) + " of " + std::to_string(n));
  }
}

// The normalised Walsh-Hadamard transform of each block: butterflies of width 1, 2, 4, ... in
// that order, then the scaling.
void hadamard_scalar(float* v, std::int64_t n, std::int64_t block) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (std::int64_t s0 = 0; s0 < n; s0 += block) {
    float* x = v + s0;
    for (std::int64_t len = 1; len < block; len *= 2) {
      for (std::int64_t i = 0; i < block; i += 2 * len) {
        for (std::int64_t j = i; j < i + len; ++j) {
          const float a = x[j], c = x[j + len];
          x[j] = a + c;
          x[j + len] = a - c;
        }
      }
    }
    for (std::int64_t j = 0; j < block; ++j) x[j] *= norm;
  }
}

void turn_signs(float* v, std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c)
    if (rotation_sign(c)) v[c] = -v[c];
}

}  // namespace

bool rotation_sign(std::int64_t c) {
  std::uint32_t h = static_cast<std::uint32_t>(c) * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (h & 1u) != 0;
}

void rotate_scalar(float* v, std::int64_t n, std::int64_t block) {
  check_shape(n, block);
  turn_signs(v, n);
  hadamard_scalar(v, n, block);
}

void rotate(float* v, std::int64_t n, std::int64_t block) {
  static const bool avx512 = variant_supported(CpuVariant::Avx512, detect_isa().usable);
  static const bool avx2 = detect_isa().usable.avx2;
  if (avx512) {
    rotate_avx512(v, n, block);
  } else if (avx2) {
    rotate_avx2(v, n, block);
  } else {
    rotate_scalar(v, n, block);
  }
}

void unrotate(float* v, std::int64_t n, std::int64_t block) {
  // R = H D with H the normalised transform (symmetric, its own inverse) and D the signs.
  check_shape(n, block);
  hadamard_scalar(v, n, block);
  turn_signs(v, n);
}

}  // namespace tandem::kernels
