// The rotation (rotation.h) on AVX2: the signs and the butterflies of width 1, 2 and 4 inside
// each register of 8 columns, the wider ones between registers. Each value goes through the
// scalar reference's operations in its order, so both agree to the bit.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/packed/rotation.h"

namespace tandem::kernels {
namespace {

// rotation_sign for columns c0 to c0 + 7, as each lane's sign bit.
inline __m256i sign_bits(std::int64_t c0) {
  __m256i h = _mm256_add_epi32(_mm256_set1_epi32(static_cast<std::int32_t>(c0)),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<std::int32_t>(2654435761u)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<std::int32_t>(2246822519u)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  return _mm256_slli_epi32(h, 31);  // bit 0 into the sign
}

// One butterfly of width Len (1, 2 or 4) inside a register: lane i with bit Len clear takes
// x[i] + x[i + Len], the other x[i - Len] - x[i].
template <int Len>
inline __m256 butterfly_in_register(__m256 x) {
  __m256 partner;
  if constexpr (Len == 1) {
    partner = _mm256_permute_ps(x, 0xB1);  // lanes 1 0 3 2
  } else if constexpr (Len == 2) {
    partner = _mm256_permute_ps(x, 0x4E);  // lanes 2 3 0 1
  } else {
    partner = _mm256_permute2f128_ps(x, x, 0x01);  // the halves swapped
  }
  constexpr int upper = Len == 1 ? 0xAA : Len == 2 ? 0xCC : 0xF0;
  return _mm256_blend_ps(_mm256_add_ps(x, partner), _mm256_sub_ps(partner, x), upper);
}

}  // namespace

void rotate_avx2(float* v, std::int64_t n, std::int64_t block) {
  if (block < 16 || (block & (block - 1)) != 0 || n <= 0 || n % block != 0) {
    rotate_scalar(v, n, block);  // which throws with its sentence
    return;
  }
  for (std::int64_t c = 0; c < n; c += 8) {
    const __m256i bits =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c)), sign_bits(c));
    __m256 x = _mm256_castsi256_ps(bits);
    x = butterfly_in_register<1>(x);
    x = butterfly_in_register<2>(x);
    x = butterfly_in_register<4>(x);
    _mm256_storeu_ps(v + c, x);
  }
  const __m256 norm = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(block)));
  for (std::int64_t s0 = 0; s0 < n; s0 += block) {
    float* x = v + s0;
    for (std::int64_t len = 8; len < block; len *= 2) {
      for (std::int64_t i = 0; i < block; i += 2 * len) {
        for (std::int64_t j = i; j < i + len; j += 8) {
          const __m256 a = _mm256_loadu_ps(x + j), c = _mm256_loadu_ps(x + j + len);
          _mm256_storeu_ps(x + j, _mm256_add_ps(a, c));
          _mm256_storeu_ps(x + j + len, _mm256_sub_ps(a, c));
        }
      }
    }
    for (std::int64_t j = 0; j < block; j += 8)
      _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), norm));
  }
}

}  // namespace tandem::kernels
