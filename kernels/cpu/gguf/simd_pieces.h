// Pieces the GGUF kernels built for AVX2 and for AVX-512 share: included only by files
// compiled with AVX2 and F16C or more. Each function has internal linkage, so every file
// keeps a copy compiled for its own instruction set (one shared definition could be the
// AVX-512 file's, run on an AVX2 machine).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tandem::kernels::gguf_simd {
namespace {

// An fp16 field of a block, by F16C.
inline float half(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

// Q4_K's and Q5_K's eight 6-bit scales and minimums (12 bytes: sub-blocks 0..3 in the low six
// bits of bytes 0..3 and 4..7, 4..7 in the nibbles of bytes 8..11 with their top two bits in
// the spare bits of bytes 0..7), sub-block j's in byte j of a 64-bit value (in registers:
// bytes stored and loaded back wait for the stores to land).
struct KScales {
  std::uint64_t scales, mins;
};
inline KScales k_scales(const std::uint8_t* s) {
  std::uint32_t w[3];
  std::memcpy(w, s, 12);
  const std::uint64_t v[4] = {
      w[0] & 0x3F3F3F3Fu, (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u), w[1] & 0x3F3F3F3Fu,
      ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u)};
  return {v[0] | (v[1] << 32), v[2] | (v[3] << 32)};
}

// 0xFF in byte j of 32 where bit j of `bits` is set, else 0.
inline __m256i byte_mask(std::uint32_t bits) {
  const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i spread = _mm256_and_si256(
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of), bit);
  return _mm256_cmpeq_epi8(spread, bit);
}

// The nibbles of the bytes of `raw` as bytes in order: byte k's low nibble at 2k, its high
// one at 2k + 1 (for the low 8 bytes of raw).
inline __m128i nibbles_in_order(__m128i raw) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm_unpacklo_epi8(_mm_and_si128(raw, low4), _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
}

// Bit `from` of each byte of v moved to bit `to`, the other bits 0 (16-bit shifts: each byte
// keeps its own bits).
inline __m256i move_bit(__m256i v, int from, int to) {
  const __m256i moved =
      from >= to ? _mm256_srli_epi16(v, from - to) : _mm256_slli_epi16(v, to - from);
  return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(1 << to)));
}

// Q5_K's fifth bits for 32-weight pair p (0..3) of a block: bit 2p of each qh byte is the
// first sub-block's, 2p + 1 the second's; ORed into the low and high nibbles as 16.
inline void q5_k_fifth_bits(__m256i qh, int p, __m256i& lo, __m256i& hi) {
  lo = _mm256_or_si256(lo, move_bit(qh, 2 * p, 4));
  hi = _mm256_or_si256(hi, move_bit(qh, 2 * p + 1, 4));
}

}  // namespace
}  // namespace tandem::kernels::gguf_simd
