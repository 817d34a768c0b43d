// Attention over the BF16 KV cache with VDPBF16PS: each instruction adds two exact products
// a lane, a dimension pair of 16 keys when scoring and a pair of positions of 16 values
// when weighing, twice the multiply-adds of fp32 per instruction. Compiled for AVX-512 with
// BF16; run only where attention_variant_supported says so.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_loop.h"
#include "kernels/cpu/dtype.h"

namespace tandem::kernels::attention_loop {
namespace {

// acc += a . b per pair, with the accumulator tied to its register (GCC 12 otherwise copies
// accumulators on every iteration, as in packed_matmul_avx512.cpp).
inline __attribute__((always_inline)) __m512 dpbf16(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

struct Bf16KvDot : Bf16Kv {
  const float* q_base;           // the rounded queries attend_all passes slices of
  const std::uint32_t* q_pairs;  // the same as BF16 pairs, [query][dim / 2]

  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    const std::int64_t dim = key_dim, pairs = dim / 2;
    const std::uint32_t* qp = q_pairs + (q - q_base) / 2;
    const __m512 vscale = _mm512_set1_ps(scale);
    // One query's scores of the tile at t0, of which [begin, end) is kept (by value: an
    // accumulator array whose address is taken lives in memory, not in registers).
    const auto keep = [&](std::int64_t t0, int i, __m512 acc) {
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      float* row = scores + i * stride + (lo - begin);
      const __mmask16 lanes =
          static_cast<__mmask16>(((1u << (hi - t0)) - 1) & ~((1u << (lo - t0)) - 1));
      _mm512_mask_storeu_ps(row - (lo - t0), lanes, _mm512_mul_ps(acc, vscale));
    };
    const auto tile_at = [&](std::int64_t t0) { return keys + (t0 / kKeyTile) * dim * kKeyTile; };
    const auto one_tile = [&](std::int64_t t0) {
      const std::uint16_t* tile = tile_at(t0);
      const std::uint16_t* ahead = tile + 2 * dim * kKeyTile;
      __m512 acc[NQ];
      for (int i = 0; i < NQ; ++i) acc[i] = _mm512_setzero_ps();
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + dp * 2 * kKeyTile), _MM_HINT_T0);
        const __m512i k = _mm512_loadu_si512(tile + dp * 2 * kKeyTile);
        for (int i = 0; i < NQ; ++i)
          acc[i] = dpbf16(acc[i], k, _mm512_set1_epi32(static_cast<int>(qp[i * pairs + dp])));
      }
      for (int i = 0; i < NQ; ++i) keep(t0, i, acc[i]);
    };
    std::int64_t t0 = begin - begin % kKeyTile;
    if (t0 != begin) {
      one_tile(t0);
      t0 += kKeyTile;
    }
    // Two whole tiles at a time: each query pair broadcast once serves 32 positions.
    for (; t0 + 2 * kKeyTile <= end; t0 += 2 * kKeyTile) {
      const std::uint16_t* tile = tile_at(t0);
      const std::uint16_t* next = tile + dim * kKeyTile;
      const std::uint16_t* ahead = tile + 2 * dim * kKeyTile;
      __m512 a0[NQ], a1[NQ];
      for (int i = 0; i < NQ; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + dp * 2 * kKeyTile), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + (dim + dp * 2) * kKeyTile), _MM_HINT_T0);
        const __m512i k0 = _mm512_loadu_si512(tile + dp * 2 * kKeyTile);
        const __m512i k1 = _mm512_loadu_si512(next + dp * 2 * kKeyTile);
        for (int i = 0; i < NQ; ++i) {
          const __m512i qv = _mm512_set1_epi32(static_cast<int>(qp[i * pairs + dp]));
          a0[i] = dpbf16(a0[i], k0, qv);
          a1[i] = dpbf16(a1[i], k1, qv);
        }
      }
      for (int i = 0; i < NQ; ++i) {
        keep(t0, i, a0[i]);
        keep(t0 + kKeyTile, i, a1[i]);
      }
    }
    for (; t0 < end; t0 += kKeyTile) one_tile(t0);
  }

  // out[i] = sum of BF16(p) * v over [begin, end), a pair of positions per VDPBF16PS (the
  // pair's other position, outside the range, weighs 0).
  template <int NQ>
  __attribute__((always_inline)) void weigh(const float* p, std::int64_t p_stride,
                                            std::int64_t begin, std::int64_t end,
                                            float* out) const {
    const std::int64_t dim = value_dim;
    const std::int64_t j_begin = begin / 2, j_end = (end + 1) / 2;
    // Each query's weights of a chunk as BF16 pairs (position 2j low, 2j + 1 high).
    alignas(64) std::uint32_t w[NQ][kBf16PairChunk];
    for (std::int64_t j0 = j_begin; j0 < j_end; j0 += kBf16PairChunk) {
      const std::int64_t j1 = std::min(j_end, j0 + kBf16PairChunk);
      const bool first = j0 == j_begin;
      // 32 positions at a time: loaded where in [begin, end) (masked loads touch nothing
      // outside), rounded to BF16 in order, which pairs them as the values are.
      const auto lanes = [&](std::int64_t s0) {
        const std::int64_t lo = std::clamp<std::int64_t>(begin - s0, 0, 16);
        const std::int64_t hi = std::clamp<std::int64_t>(std::min(end, 2 * j1) - s0, 0, 16);
        return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
      };
      for (std::int64_t h = 0; h < 2 * (j1 - j0); h += 32) {
        const std::int64_t s0 = 2 * j0 + h;
        const __mmask16 m0 = lanes(s0), m1 = lanes(s0 + 16);
        for (int i = 0; i < NQ; ++i) {
          const float* row = p + i * p_stride - begin;
          const __m512 lo = _mm512_maskz_loadu_ps(m0, row + s0);
          const __m512 hi = _mm512_maskz_loadu_ps(m1, row + s0 + 16);
          _mm512_store_si512(&w[i][h / 2], reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
        }
      }
      std::int64_t d0 = 0;
      for (; d0 + 32 <= dim; d0 += 32) {
        __m512 a0[NQ], a1[NQ];
        for (int i = 0; i < NQ; ++i) {
          a0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + i * dim + d0);
          a1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + i * dim + d0 + 16);
        }
        for (std::int64_t j = j0; j < j1; ++j) {
          const std::uint16_t* row = values + j * 2 * value_row;
          if (d0 == 0) {
            const std::uint16_t* ahead = row + kBf16PairsAhead * 2 * value_row;
            for (std::int64_t b = 0; b < 2 * dim; b += 32)
              _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
          }
          const __m512i v0 = _mm512_loadu_si512(row + 2 * d0);
          const __m512i v1 = _mm512_loadu_si512(row + 2 * d0 + 32);
          for (int i = 0; i < NQ; ++i) {
            const __m512i wv = _mm512_set1_epi32(static_cast<int>(w[i][j - j0]));
            a0[i] = dpbf16(a0[i], v0, wv);
            a1[i] = dpbf16(a1[i], v1, wv);
          }
        }
        for (int i = 0; i < NQ; ++i) {
          _mm512_storeu_ps(out + i * dim + d0, a0[i]);
          _mm512_storeu_ps(out + i * dim + d0 + 16, a1[i]);
        }
      }
      for (std::int64_t d = d0; d < dim; ++d) {
        for (int i = 0; i < NQ; ++i) {
          float acc = first ? 0.0f : out[i * dim + d];
          for (std::int64_t j = j0; j < j1; ++j) {
            const std::uint16_t* v = values + j * 2 * value_row + 2 * d;
            const std::uint32_t pair = w[i][j - j0];
            acc += bf16_to_f32(static_cast<std::uint16_t>(pair >> 16)) * bf16_to_f32(v[1]);
            acc += bf16_to_f32(static_cast<std::uint16_t>(pair)) * bf16_to_f32(v[0]);
          }
          out[i * dim + d] = acc;
        }
      }
    }
  }
};

}  // namespace

void attend_bf16_avx512(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                        std::int64_t end, float scale, float* scores, float* out,
                        const float* sinks, float* max, float* sum) {
  // q is already BF16-exact: its pairs are the top halves of two floats.
  thread_local std::vector<std::uint32_t> pairs;
  pairs.resize(static_cast<std::size_t>(nq * kv.key_dim / 2));
  for (std::size_t j = 0; j < pairs.size(); ++j) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, q + 2 * j, sizeof(lo));
    std::memcpy(&hi, q + 2 * j + 1, sizeof(hi));
    pairs[j] = lo >> 16 | (hi & 0xFFFF0000u);
  }
  const Bf16KvDot k{kv, q, pairs.data()};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

}  // namespace tandem::kernels::attention_loop
