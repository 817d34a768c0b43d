// The rotation (rotation.h) on AVX-512: the signs and the butterflies of width 1 to 8 inside
// each register of 16 columns, the wider ones between registers. Each value goes through the
// scalar reference's operations in its order, so both agree to the bit.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/packed/rotation.h"

namespace tandem::kernels {
namespace {

// rotation_sign for columns c0 to c0 + 15, as a mask.
inline __mmask16 sign_mask(std::int64_t c0) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i h = _mm512_add_epi32(_mm512_set1_epi32(static_cast<std::int32_t>(c0)), lanes);
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<std::int32_t>(2654435761u)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<std::int32_t>(2246822519u)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
  return _mm512_test_epi32_mask(h, _mm512_set1_epi32(1));
}

// One butterfly of width `len` (1, 2, 4 or 8) inside a register: lane i with bit `len` clear
// takes x[i] + x[i + len], the other x[i - len] - x[i].
template <int Len>
inline __m512 butterfly_in_register(__m512 x) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 partner = _mm512_permutexvar_ps(_mm512_xor_si512(lanes, _mm512_set1_epi32(Len)), x);
  const __mmask16 upper = _mm512_test_epi32_mask(lanes, _mm512_set1_epi32(Len));
  return _mm512_mask_blend_ps(upper, _mm512_add_ps(x, partner), _mm512_sub_ps(partner, x));
}

}  // namespace

void rotate_avx512(float* v, std::int64_t n, std::int64_t block) {
  if (block < 16 || (block & (block - 1)) != 0 || n <= 0 || n % block != 0) {
    rotate_scalar(v, n, block);  // which throws with its sentence
    return;
  }
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<std::int32_t>(0x80000000u));
  for (std::int64_t c = 0; c < n; c += 16) {
    __m512i bits = _mm512_loadu_si512(v + c);
    bits = _mm512_mask_xor_epi32(bits, sign_mask(c), bits, sign_bit);
    __m512 x = _mm512_castsi512_ps(bits);
    x = butterfly_in_register<1>(x);
    x = butterfly_in_register<2>(x);
    x = butterfly_in_register<4>(x);
    x = butterfly_in_register<8>(x);
    _mm512_storeu_ps(v + c, x);
  }
  const __m512 norm = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(block)));
  for (std::int64_t s0 = 0; s0 < n; s0 += block) {
    float* x = v + s0;
    for (std::int64_t len = 16; len < block; len *= 2) {
      for (std::int64_t i = 0; i < block; i += 2 * len) {
        for (std::int64_t j = i; j < i + len; j += 16) {
          const __m512 a = _mm512_loadu_ps(x + j), c = _mm512_loadu_ps(x + j + len);
          _mm512_storeu_ps(x + j, _mm512_add_ps(a, c));
          _mm512_storeu_ps(x + j + len, _mm512_sub_ps(a, c));
        }
      }
    }
    for (std::int64_t j = 0; j < block; j += 16)
      _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), norm));
  }
}

}  // namespace tandem::kernels
