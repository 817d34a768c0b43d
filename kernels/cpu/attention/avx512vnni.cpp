// Attention over the 8-bit KV cache with VPDPBUSD: each instruction adds four products a lane,
// four dimensions of 16 keys when scoring (the query's bytes broadcast) and four positions
// of 16 values when weighing (the weights' bytes broadcast), twice VDPBF16PS's multiply-adds
// per instruction. Compiled for AVX-512 with VNNI; run only where the CPU has them
// (attend_heads_int8 checks).
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention/loop.h"

namespace tandem::kernels::attention_loop {
namespace {

// acc += u . s per lane (unsigned bytes by signed bytes, four a lane), with the accumulator
// tied to its register (GCC 12 otherwise copies accumulators on every iteration); the signed
// bytes broadcast from the four at `s`.
inline __attribute__((always_inline)) __m512i dpbusd_broadcast(__m512i acc, __m512i u,
                                                               const std::int8_t* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(u), "m"(*reinterpret_cast<const std::int32_t*>(s)));
  return acc;
}
inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// The weighing's bytes of a chunk for each of `groups` value scale groups, as the Portable
// variant's chunk_weights (int8.cpp) makes them, in AVX-512: a chunk's positions are kRegs
// registers of 16, its positions outside [lo, hi) masked to 0.
inline __attribute__((always_inline)) void chunk_weights(
    const float* p, std::int64_t p_stride, std::int64_t begin, int nq, const float* value_scales,
    std::int64_t scale_stride, std::int64_t groups, std::int64_t c0, std::int64_t lo,
    std::int64_t hi, std::uint8_t* w, float* f) {
  constexpr std::int64_t kChunk = kInt8ValueChunk;
  constexpr int kRegs = kChunk / 16;
  static_assert(kChunk % 16 == 0 && kChunk <= 64, "whole registers of positions, one mask");
  const std::uint64_t in_range =
      (hi - c0 == 64 ? ~0ull : (1ull << (hi - c0)) - 1) & ~((1ull << (lo - c0)) - 1);
  __mmask16 m[kRegs];
  for (int r = 0; r < kRegs; ++r) m[r] = static_cast<__mmask16>(in_range >> (16 * r));
  alignas(64) float b[kInt8MaxDim / kInt8Group][kChunk];
  float largest[kInt8MaxDim / kInt8Group];
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* s = value_scales + g * scale_stride + c0;
    __m512 sr[kRegs];
    __m512 top = _mm512_setzero_ps();
    for (int r = 0; r < kRegs; ++r) {
      // The scales two chunks on: a stream of their own per group, apart from the values.
      _mm_prefetch(reinterpret_cast<const char*>(s + 2 * kChunk + 16 * r), _MM_HINT_T0);
      sr[r] = _mm512_maskz_loadu_ps(m[r], s + 16 * r);
      top = _mm512_max_ps(top, sr[r]);
    }
    const float mx = _mm512_reduce_max_ps(top);  // scales are >= 0
    largest[g] = mx;
    const __m512 vm = _mm512_set1_ps(mx);
    const __mmask16 any = mx > 0.0f ? 0xFFFF : 0;
    for (int r = 0; r < kRegs; ++r)
      _mm512_store_ps(b[g] + 16 * r, _mm512_maskz_div_ps(any, sr[r], vm));
  }
  for (int i = 0; i < nq; ++i) {
    // row[pos] for pos in [lo, hi); the masked loads touch nothing outside it.
    const float* row = p + i * p_stride + (c0 - begin);
    __m512 pr[kRegs];
    __m512 top = _mm512_setzero_ps();
    for (int r = 0; r < kRegs; ++r) {
      pr[r] = _mm512_maskz_loadu_ps(m[r], row + 16 * r);
      top = _mm512_max_ps(top, pr[r]);
    }
    const float mx = _mm512_reduce_max_ps(top);  // weights are >= 0
    const __m512 a = _mm512_set1_ps(mx > 0.0f ? 255.0f / mx : 0.0f);
    for (int r = 0; r < kRegs; ++r) pr[r] = _mm512_mul_ps(pr[r], a);
    for (std::int64_t g = 0; g < groups; ++g) {
      std::uint8_t* out = w + (g * nq + i) * kChunk;
      // Weights and scales are >= 0, so the products are 0 to 255 and a rounding over;
      // VPMOVUSDB caps them at 255 as it narrows.
      for (int r = 0; r < kRegs; ++r) {
        const __m512i x = _mm512_cvtps_epi32(_mm512_mul_ps(pr[r], _mm512_load_ps(b[g] + 16 * r)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * r), _mm512_cvtusepi32_epi8(x));
      }
      f[g * nq + i] = mx / 255.0f * largest[g];
    }
  }
}

struct Int8KvVnni : Int8Kv, WeighIntoRows<Int8KvVnni> {
  const Int8Queries* queries;

  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    const std::int64_t dim = key_dim, groups = dim / kInt8Group;
    const std::int64_t r0 = queries->row(q);
    const std::int8_t* q8 = queries->q8.data() + r0 * dim;
    const std::int32_t* corr = queries->correction.data() + r0 * groups;
    __m512 factor[NQ];
    for (int i = 0; i < NQ; ++i)
      factor[i] = _mm512_set1_ps(scale * queries->scale[static_cast<std::size_t>(r0 + i)]);
    for (std::int64_t t0 = begin - begin % kKeyTile; t0 < end; t0 += kKeyTile) {
      const std::uint8_t* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
      const std::uint8_t* ahead = tile + kInt8KeyTilesAhead * dim * kKeyTile;
      const float* ks = key_scales + (t0 / kKeyTile) * groups * kKeyTile;
      __m512 acc[NQ];
      for (int i = 0; i < NQ; ++i) acc[i] = _mm512_setzero_ps();
      for (std::int64_t g = 0; g < groups; ++g) {
        // Each sum starts at minus the correction for the keys' stored offset.
        __m512i dot[NQ];
        for (int i = 0; i < NQ; ++i) dot[i] = _mm512_set1_epi32(-corr[i * groups + g]);
        for (std::int64_t dq = g * kInt8Group / 4; dq < (g + 1) * kInt8Group / 4; ++dq) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + dq * 4 * kKeyTile), _MM_HINT_T1);
          const __m512i k = _mm512_loadu_si512(tile + dq * 4 * kKeyTile);
          for (int i = 0; i < NQ; ++i) dot[i] = dpbusd_broadcast(dot[i], k, q8 + i * dim + dq * 4);
        }
        const __m512 s = _mm512_loadu_ps(ks + g * kKeyTile);
        for (int i = 0; i < NQ; ++i) {
          acc[i] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot[i]), acc[i]);
        }
      }
      const std::int64_t lo = std::max(begin, t0), hi = std::min(end, t0 + kKeyTile);
      const auto lanes = static_cast<__mmask16>(((1u << (hi - t0)) - 1) & ~((1u << (lo - t0)) - 1));
      for (int i = 0; i < NQ; ++i)
        _mm512_mask_storeu_ps(scores + i * stride + (lo - begin) - (lo - t0), lanes,
                              _mm512_mul_ps(acc[i], factor[i]));
    }
  }

  // attend_prompt_rows' weighing (weigh, from WeighIntoRows, is attend_all's).
  template <int NQ>
  __attribute__((always_inline)) void weigh_rows(const float* p, std::int64_t p_stride,
                                                 std::int64_t begin, std::int64_t end,
                                                 float* const* rows, const float* corr) const {
    constexpr std::int64_t kChunk = kInt8ValueChunk;
    const std::int64_t dim = value_dim, groups = dim / kInt8Group;
    const std::int64_t per_scale = int8_value_group(dim) / kInt8Group;  // groups a scale covers
    alignas(64) std::uint8_t w[kInt8MaxDim / kInt8Group * NQ * kChunk];
    float f[kInt8MaxDim / kInt8Group * NQ];
    const std::int64_t c_begin = begin - begin % kChunk;
    for (std::int64_t c0 = c_begin; c0 < end; c0 += kChunk) {
      const std::int64_t lo = std::max(begin, c0), hi = std::min(end, c0 + kChunk);
      chunk_weights(p, p_stride, begin, NQ, value_scales, value_scale_stride, groups / per_scale,
                    c0, lo, hi, w, f);
      const std::int8_t* chunk = values + int8_value_index(c0, 0, dim);
      const std::int8_t* next = chunk + kChunk * dim;
      const std::int64_t j_lo = (lo - c0) / 4, j_hi = (hi - c0 + 3) / 4;
      for (std::int64_t g = 0; g < groups; ++g) {
        // The next chunk, a share of it in each group's pass over this one.
        fetch_row_share(next, kChunk * dim, g, groups);
        __m512i d0[NQ], d1[NQ];
        for (int i = 0; i < NQ; ++i) d0[i] = d1[i] = _mm512_setzero_si512();
        const std::int64_t vg = g / per_scale;
        const std::uint8_t* wg = w + vg * NQ * kChunk;
        for (std::int64_t j = j_lo; j < j_hi; ++j) {
          const std::int8_t* row = chunk + j * 4 * dim + g * kInt8Group * 4;
          const __m512i v0 = _mm512_loadu_si512(row);
          const __m512i v1 = _mm512_loadu_si512(row + 64);
          for (int i = 0; i < NQ; ++i) {
            std::int32_t four;
            __builtin_memcpy(&four, wg + i * kChunk + j * 4, 4);
            const __m512i wb = _mm512_set1_epi32(four);
            d0[i] = dpbusd(d0[i], wb, v0);
            d1[i] = dpbusd(d1[i], wb, v1);
          }
        }
        for (int i = 0; i < NQ; ++i) {
          float* o = rows[i] + g * kInt8Group;
          const __m512 fi = _mm512_set1_ps(f[vg * NQ + i]);
          const __m512 x0 = _mm512_cvtepi32_ps(d0[i]), x1 = _mm512_cvtepi32_ps(d1[i]);
          if (c0 == c_begin && corr != nullptr && corr[i] != 0.0f) {
            const __m512 ci = _mm512_set1_ps(corr[i]);
            _mm512_storeu_ps(o, _mm512_fmadd_ps(fi, x0, _mm512_mul_ps(ci, _mm512_loadu_ps(o))));
            _mm512_storeu_ps(o + 16,
                             _mm512_fmadd_ps(fi, x1, _mm512_mul_ps(ci, _mm512_loadu_ps(o + 16))));
          } else if (c0 == c_begin) {
            _mm512_storeu_ps(o, _mm512_mul_ps(fi, x0));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(fi, x1));
          } else {
            _mm512_storeu_ps(o, _mm512_fmadd_ps(fi, x0, _mm512_loadu_ps(o)));
            _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(fi, x1, _mm512_loadu_ps(o + 16)));
          }
        }
      }
    }
  }
};

}  // namespace

void attend_int8_avx512(const Int8Queries& queries, const float* q, std::int64_t nq,
                        const Int8Kv& kv, std::int64_t begin, std::int64_t end, float scale,
                        float* scores, float* out, const float* sinks, float* max, float* sum) {
  const Int8KvVnni k{kv, {}, &queries};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_prompt_int8_avx512(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                               std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                               std::int64_t pos0, std::int64_t window, float scale,
                               const float* sinks, float* out, std::int64_t out_stride) {
  const Int8KvVnni k{kv, {}, &queries};
  attend_prompt_rows(k, q, q_stride, nq, tokens, pos0, window, scale, sinks, out, out_stride);
}

}  // namespace tandem::kernels::attention_loop
