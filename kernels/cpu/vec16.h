// Sixteen-float vectors in GCC's vector extension, for kernels compiled once per target with
// target_clones: each clone lowers them to its own instructions (one AVX-512 register, two
// AVX2 ones, or scalar code). Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tandem::kernels {

// 16 floats: one AVX-512 register, two AVX2 ones; the compiler lowers it for each target.
typedef float Vec16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline __attribute__((always_inline)) void store16(float* p, Vec16 v) {
  std::memcpy(p, &v, sizeof(v));
}

typedef std::int32_t Int16x __attribute__((vector_size(64)));

// e^x within 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial
// (Cephes' coefficients), times 2^n. Below -87 the result is flushed to 0 (e^-87 is under
// float's normal range); above 88 it is e^88. Where the file is compiled for AVX-512, 2^n and
// the flush come from VSCALEFPS with a zeroing mask (one instruction where building the
// exponent's bits, multiplying and blending took five; the results are the same bits).
inline __attribute__((always_inline)) Vec16 exp16(Vec16 x) {
  const Vec16 lowest = Vec16{} - 87.0f;
  const Vec16 highest = Vec16{} + 88.0f;
#if defined(__AVX512F__)
  // Not below -87 (NaN included, which stays NaN).
  const __mmask16 normal = _mm512_cmp_ps_mask(x, lowest, _CMP_NLT_UQ);
#else
  const auto underflow = x < lowest;
  x = underflow ? lowest : x;
#endif
  x = x > highest ? highest : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const Vec16 n = (x * 1.44269504088896341f + kRound) - kRound;
  const Vec16 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  Vec16 p = Vec16{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
#if defined(__AVX512F__)
  return reinterpret_cast<Vec16>(
      _mm512_maskz_scalef_ps(normal, reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n)));
#else
  const Int16x bits = (__builtin_convertvector(n, Int16x) + 127) << 23;
  Vec16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const Vec16 result = p * scale;
  return underflow ? Vec16{} : result;
#endif
}

}  // namespace tandem::kernels
