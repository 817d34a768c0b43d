// Float vectors in GCC's vector extension, of 16 lanes (one AVX-512 register) and of 8 (one
// AVX2 register), and the means to compile a kernel at the width each instruction set holds in
// registers: VecLanes for a file built for one instruction set, TANDEM_BY_WIDTH for a function
// built in versions for several. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tandem::kernels {

// 16 floats: one AVX-512 register. Compiled for anything less, GCC keeps it in memory (below).
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

// 8 floats: one AVX2 register. A file compiled for AVX2 without AVX-512 works in these: GCC
// keeps a 16-float vector there in memory (its mode does not exist without AVX-512) and
// splits every operation through the stack, which held the Portable attention's v3 clones
// at 7 GFLOP/s on a Zen 3 (docs/benchmarks.md, "Attention in AVX2's registers").
typedef float Vec8 __attribute__((vector_size(32)));
typedef std::int32_t Int8x __attribute__((vector_size(32)));

// The widest float vector the file's own instruction set holds in registers: 8 lanes in a
// file compiled for AVX2 without AVX-512, else 16 (one AVX-512 register, or target clones
// that lower it for each target).
#if defined(__AVX2__) && !defined(__AVX512F__)
using VecLanes = Vec8;
#else
using VecLanes = Vec16;
#endif
// A function defined three times for GCC's function multiversioning (the loader picks the best
// version the CPU has, as with target_clones), each version running `body` with V the width its
// registers hold: 16 floats for AVX-512, 8 for AVX2, 16 for baseline x86-64 (kept as the
// clones were). `signature` is the whole declarator; calls from other files must go through a
// plain function of this file (GCC 12 binds them to the baseline version otherwise).
#define TANDEM_BY_WIDTH(signature, body)                 \
  __attribute__((target("arch=x86-64-v4"))) signature {  \
    using V [[maybe_unused]] = ::tandem::kernels::Vec16; \
    body;                                                \
  }                                                      \
  __attribute__((target("arch=x86-64-v3"))) signature {  \
    using V [[maybe_unused]] = ::tandem::kernels::Vec8;  \
    body;                                                \
  }                                                      \
  __attribute__((target("default"))) signature {         \
    using V [[maybe_unused]] = ::tandem::kernels::Vec16; \
    body;                                                \
  }

template <class V>
inline constexpr int kLanesOf = static_cast<int>(sizeof(V) / sizeof(float));
// 32-bit integer lanes as many as V's floats (Vec8 or Vec16).
template <class V>
using IntLanesOf = std::conditional_t<sizeof(V) == 32, Int8x, Int16x>;

template <class V>
inline __attribute__((always_inline)) V load_lanes(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class V>
inline __attribute__((always_inline)) void store_lanes(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

// e^x within 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial
// (Cephes' coefficients), times 2^n. Below -87 the result is flushed to 0 (e^-87 is under
// float's normal range); above 88 it is e^88. Where the file is compiled for AVX-512, 2^n and
// the flush come from VSCALEFPS with a zeroing mask (one instruction where building the
// exponent's bits, multiplying and blending took five; the results are the same bits).
// exp_lanes takes vectors of 8 or 16 floats (V) with integer lanes of the same count (I).
template <class V, class I>
inline __attribute__((always_inline)) V exp_lanes(V x) {
  const V lowest = V{} - 87.0f;
  const V highest = V{} + 88.0f;
#if defined(__AVX512F__)
  constexpr bool kScalef = sizeof(V) == 64;
#else
  constexpr bool kScalef = false;
#endif
  auto underflow = x < lowest;
  if constexpr (!kScalef) x = underflow ? lowest : x;
  x = x > highest ? highest : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V n = (x * 1.44269504088896341f + kRound) - kRound;
  const V r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
#if defined(__AVX512F__)
  if constexpr (kScalef) {
    // Not below -87 (NaN included, which stays NaN): the flush as a zeroing mask.
    const __mmask16 normal = _mm512_cmp_ps_mask(reinterpret_cast<__m512>(x),
                                                reinterpret_cast<__m512>(lowest), _CMP_NLT_UQ);
    return reinterpret_cast<V>(
        _mm512_maskz_scalef_ps(normal, reinterpret_cast<__m512>(p), reinterpret_cast<__m512>(n)));
  }
#endif
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const V result = p * scale;
  return underflow ? V{} : result;
}
inline __attribute__((always_inline)) Vec16 exp16(Vec16 x) {
  return exp_lanes<Vec16, Int16x>(x);
}
inline __attribute__((always_inline)) Vec8 exp8(Vec8 x) {
  return exp_lanes<Vec8, Int8x>(x);
}
// Of 8 or 16 floats, as the argument's width.
template <class V>
inline __attribute__((always_inline)) V exp_of(V x) {
  if constexpr (sizeof(V) == 32)
    return exp8(x);
  else
    return exp16(x);
}

}  // namespace tandem::kernels
