// The Avx2 variant over the 8-bit KV cache: the VPDPBUSD kernels' integer sums (avx512vnni.cpp)
// with VPMADDWD. The bytes are widened to 16 bits, once a load for every query row that takes
// them, and each VPMADDWD adds two exact products a 32-bit lane, so the sums are the VPDPBUSD
// kernels' to the last bit before they are scaled. A lane holds two dimensions of a position
// (scoring) or two positions of a dimension (weighing); the pairs are added once a scale group
// or a chunk. Sixteen multiply-adds take a VPMADDWD and a VPADDD, as many instructions as two
// 8-float FMAs, but no widening of the bytes to floats and no multiplying by their scales
// (the fp32 kernel this replaced, int8_lanes.h in 8 floats, spent as much on those as on its
// FMAs). VPMADDUBSW, which would take the bytes as they are, saturates its 16-bit pair sums
// (255 x 127 x 2). Compiled for AVX2 with FMA; run only where attention_variant_supported says
// so.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention/loop.h"

static_assert(sizeof(tandem::kernels::VecLanes) == 32,
              "attention/avx2_int8.cpp is compiled for AVX2 without AVX-512");

namespace tandem::kernels::attention_loop {
namespace {

// Query rows a scoring pass and a weighing pass keep accumulators for: 4 rows x 2 registers
// of pair sums, with the 2 widened registers of keys or values, in AVX2's 16.
constexpr int kRowsPerPass = 4;

// Pair sums to sums: lo and hi hold [x0 x0' x1 x1' | x2 x2' x3 x3'] and the same of x4..x7;
// the result is x0 + x0', ..., x7 + x7' in order.
inline __attribute__((always_inline)) __m256i add_pairs(__m256i lo, __m256i hi) {
  // VPHADDD works within each 128-bit half: [x0 x1 x4 x5 | x2 x3 x6 x7].
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
}

// acc += the pair products of a and b (VPMADDWD, then VPADDD), with the accumulator tied to
// its register: GCC 12 otherwise copied every accumulator on every iteration and kept one in
// memory, a chain through a store and a load (the kernel ran at half the rate).
inline __attribute__((always_inline)) __m256i madd(__m256i acc, __m256i a, __m256i b) {
  __m256i products;
  asm("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(products) : "x"(a), "x"(b));
  return acc;
}

// Four 16-bit values at `p`, repeated over a register.
inline __attribute__((always_inline)) __m256i broadcast4(const std::int16_t* p) {
  std::int64_t four;
  std::memcpy(&four, p, sizeof(four));
  return _mm256_set1_epi64x(four);
}

// Lanes [lo - p0, hi - p0) of 8 set (all bits), the others clear.
inline __attribute__((always_inline)) __m256i lanes_between(std::int64_t p0, std::int64_t lo,
                                                            std::int64_t hi) {
  const __m256i k = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(p0)),
                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge = _mm256_cmpgt_epi32(k, _mm256_set1_epi32(static_cast<int>(lo) - 1));
  const __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), k);
  return _mm256_and_si256(ge, lt);
}

// The weighing's weights of a chunk for each of `groups` value scale groups, as the Portable
// variant's chunk_weights (int8_lanes.h) makes its bytes, in 16 bits: w[(g * nq + i) *
// kInt8ValueChunk + s - c0], and f[g * nq + i] what their sums are multiplied by. The weights
// of positions outside [lo, hi) are 0, and nothing of p outside them is read.
inline __attribute__((always_inline)) void chunk_weights16(
    const float* p, std::int64_t p_stride, std::int64_t begin, int nq, const float* value_scales,
    std::int64_t scale_stride, std::int64_t groups, std::int64_t c0, std::int64_t lo,
    std::int64_t hi, std::int16_t* w, float* f) {
  constexpr std::int64_t kChunk = kInt8ValueChunk;
  constexpr int kRegs = kChunk / 8;
  static_assert(kChunk % 16 == 0, "whole pairs of registers of positions");
  __m256i in[kRegs];
  for (int r = 0; r < kRegs; ++r) in[r] = lanes_between(c0 + 8 * r, lo, hi);
  const auto largest_of = [](__m256 v) __attribute__((always_inline)) {
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0x4E));
    return _mm256_cvtss_f32(_mm256_max_ps(v, _mm256_permute_ps(v, 0xB1)));
  };
  alignas(32) float b[kInt8MaxDim / kInt8Group][kChunk];
  float largest[kInt8MaxDim / kInt8Group];
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* s = value_scales + g * scale_stride + c0;  // whole chunks are there
    __m256 sr[kRegs];
    __m256 top = _mm256_setzero_ps();
    for (int r = 0; r < kRegs; ++r) {
      sr[r] = _mm256_and_ps(_mm256_loadu_ps(s + 8 * r), _mm256_castsi256_ps(in[r]));
      top = _mm256_max_ps(top, sr[r]);
    }
    const float mx = largest_of(top);  // scales are >= 0
    largest[g] = mx;
    const __m256 vm = _mm256_set1_ps(mx);
    for (int r = 0; r < kRegs; ++r)
      _mm256_store_ps(b[g] + 8 * r, mx > 0.0f ? _mm256_div_ps(sr[r], vm) : _mm256_setzero_ps());
  }
  for (int i = 0; i < nq; ++i) {
    // row[pos] for pos in [lo, hi); the masked loads touch nothing outside it.
    const float* row = p + i * p_stride + (c0 - begin);
    __m256 pr[kRegs];
    __m256 top = _mm256_setzero_ps();
    for (int r = 0; r < kRegs; ++r) {
      pr[r] = _mm256_maskload_ps(row + 8 * r, in[r]);
      top = _mm256_max_ps(top, pr[r]);
    }
    const float mx = largest_of(top);  // weights are >= 0
    const __m256 a = _mm256_set1_ps(mx > 0.0f ? 255.0f / mx : 0.0f);
    for (int r = 0; r < kRegs; ++r) pr[r] = _mm256_mul_ps(pr[r], a);
    const __m256i cap = _mm256_set1_epi32(255);
    for (std::int64_t g = 0; g < groups; ++g) {
      std::int16_t* out = w + (g * nq + i) * kChunk;
      // Weights and scales are >= 0, so the products are 0 to 255 and a rounding over.
      for (int r = 0; r < kRegs; r += 2) {
        const __m256i x0 = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(pr[r], _mm256_load_ps(b[g] + 8 * r))), cap);
        const __m256i x1 = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(pr[r + 1], _mm256_load_ps(b[g] + 8 * r + 8))), cap);
        // VPACKSSDW interleaves the halves: [x0 0-3, x1 0-3 | x0 4-7, x1 4-7].
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * r),
                           _mm256_permute4x64_epi64(_mm256_packs_epi32(x0, x1), 0xD8));
      }
      f[g * nq + i] = mx / 255.0f * largest[g];
    }
  }
}

template <bool Fetch>
struct Int8KvMadd : Int8Kv, WeighIntoRows<Int8KvMadd<Fetch>> {
  const Int8Queries* queries;

  template <int NQ>
  __attribute__((always_inline)) void score(const float* q, std::int64_t begin, std::int64_t end,
                                            float scale, float* scores, std::int64_t stride) const {
    const std::int64_t dim = key_dim;
    const std::int64_t r0 = queries->row(q);
    // The rows' bytes widened to 16 bits (dim is a multiple of 32).
    alignas(32) std::int16_t q16[NQ * kInt8MaxDim];
    const std::int8_t* q8 = queries->q8.data() + r0 * dim;
    for (std::int64_t k = 0; k < NQ * dim; k += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q8 + k));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q16 + k), _mm256_cvtepi8_epi16(b));
    }
    // What each row's sums are multiplied by: the attention's scale and the row's own.
    float factor[NQ];
    for (int i = 0; i < NQ; ++i)
      factor[i] = scale * queries->scale[static_cast<std::size_t>(r0 + i)];
    for (std::int64_t t0 = begin - begin % kKeyTile; t0 < end; t0 += kKeyTile) {
      for (int half = 0; half < 2; ++half) {
        const std::int64_t p0 = t0 + 8 * half;
        if (p0 + 8 <= begin || p0 >= end) continue;
        in_passes<NQ, kRowsPerPass>([&](auto i0, auto n) __attribute__((always_inline)) {
          score_rows<i0, n>(q16, factor, r0, t0, half, Fetch && half == 0 && i0 == 0, begin, end,
                            scores, stride);
        });
      }
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
    alignas(32) std::int16_t w[kInt8MaxDim / kInt8Group * NQ * kChunk];
    float f[kInt8MaxDim / kInt8Group * NQ];
    const std::int64_t c_begin = begin - begin % kChunk;
    for (std::int64_t c0 = c_begin; c0 < end; c0 += kChunk) {
      const std::int64_t lo = std::max(begin, c0), hi = std::min(end, c0 + kChunk);
      chunk_weights16(p, p_stride, begin, NQ, value_scales, value_scale_stride, groups / per_scale,
                      c0, lo, hi, w, f);
      const std::int8_t* chunk = values + int8_value_index(c0, 0, dim);
      const std::int8_t* next = chunk + kChunk * dim;
      const std::int64_t j_lo = (lo - c0) / 4, j_hi = (hi - c0 + 3) / 4;
      for (std::int64_t g = 0; g < groups; ++g) {
        // The next chunk, a share of it in each group's pass over this one.
        if constexpr (Fetch) fetch_row_share(next, kChunk * dim, g, groups);
        const std::int64_t vg = g / per_scale;
        // A group's 32 values in slices of 8 (two registers of four values' quads).
        for (std::int64_t d0 = g * kInt8Group; d0 < (g + 1) * kInt8Group; d0 += 8) {
          in_passes<NQ, kRowsPerPass>([&](auto i0, auto n) __attribute__((always_inline)) {
            weigh_slice<NQ, i0, n>(w + vg * NQ * kChunk, f + vg * NQ, chunk, j_lo, j_hi, d0,
                                   c0 == c_begin, corr, rows);
          });
        }
      }
    }
  }

 private:
  // Rows [I0, I0 + N) of q16 (row r0 + I0 on) over the half tile of 8 positions from
  // t0 + 8 half, each row's sums times its factor; `fetch`: fetch the tile kInt8KeyTilesAhead
  // on.
  template <int I0, int N>
  __attribute__((always_inline)) void score_rows(const std::int16_t* q16, const float* factor,
                                                 std::int64_t r0, std::int64_t t0, int half,
                                                 bool fetch, std::int64_t begin, std::int64_t end,
                                                 float* scores, std::int64_t stride) const {
    const std::int64_t dim = key_dim, groups = dim / kInt8Group;
    const std::uint8_t* tile = keys + (t0 / kKeyTile) * dim * kKeyTile;
    const std::uint8_t* ahead = tile + kInt8KeyTilesAhead * dim * kKeyTile;
    const float* ks = key_scales + (t0 / kKeyTile) * groups * kKeyTile + 8 * half;
    const std::int32_t* corr = queries->correction.data() + r0 * groups;
    __m256 acc[N];
    for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < groups; ++g) {
      __m256i lo[N], hi[N];  // positions 0-3 and 4-7 of the half, two dimensions a lane
      for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_si256();
      for (std::int64_t dq = g * kInt8Group / 4; dq < (g + 1) * kInt8Group / 4; ++dq) {
        if (fetch)
          _mm_prefetch(reinterpret_cast<const char*>(ahead + dq * 4 * kKeyTile), _MM_HINT_T1);
        // Positions' four bytes of dimensions 4 dq .. 4 dq + 3, four positions a register.
        const std::uint8_t* row = tile + dq * 4 * kKeyTile + 32 * half;
        const __m256i k0 =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
        const __m256i k1 =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16)));
        for (int i = 0; i < N; ++i) {
          const __m256i qb = broadcast4(q16 + (I0 + i) * dim + dq * 4);
          lo[i] = madd(lo[i], k0, qb);
          hi[i] = madd(hi[i], k1, qb);
        }
      }
      const __m256 s = _mm256_loadu_ps(ks + g * kKeyTile);
      for (int i = 0; i < N; ++i) {
        // Less the stored offset of 128: 128 x the group's query bytes.
        const __m256i dot = _mm256_sub_epi32(add_pairs(lo[i], hi[i]),
                                             _mm256_set1_epi32(corr[(I0 + i) * groups + g]));
        acc[i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot), acc[i]);
      }
    }
    // Lane k is position p0 + k, at scores + (I0 + i) * stride + p0 + k - begin; positions
    // outside [begin, end) are not written. (VMASKMOVPS stores are slow on AMD's cores.)
    const std::int64_t p0 = t0 + 8 * half;
    const bool whole = p0 >= begin && p0 + 8 <= end;
    for (int i = 0; i < N; ++i) {
      const __m256 x = _mm256_mul_ps(acc[i], _mm256_set1_ps(factor[I0 + i]));
      float* row = scores + (I0 + i) * stride - begin;
      if (whole) {
        _mm256_storeu_ps(row + p0, x);
      } else {
        alignas(32) float part[8];
        _mm256_store_ps(part, x);
        for (std::int64_t p = std::max(begin, p0); p < std::min(end, p0 + 8); ++p)
          row[p] = part[p - p0];
      }
    }
  }

  // Rows [I0, I0 + N)'s values [d0, d0 + 8) over the chunk's quads [j_lo, j_hi): into each
  // row's output after the first chunk (and in the first, that output scaled by `corr`, or
  // nothing where corr is null or 0).
  template <int NQ, int I0, int N>
  __attribute__((always_inline)) void weigh_slice(const std::int16_t* w16, const float* f,
                                                  const std::int8_t* chunk, std::int64_t j_lo,
                                                  std::int64_t j_hi, std::int64_t d0, bool first,
                                                  const float* corr, float* const* rows) const {
    constexpr std::int64_t kChunk = kInt8ValueChunk;
    const std::int64_t dim = value_dim;
    __m256i lo[N], hi[N];  // values d0-d0+3 and d0+4-d0+7, two positions a lane
    for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_si256();
    for (std::int64_t j = j_lo; j < j_hi; ++j) {
      // A quad's four positions of values d0 .. d0 + 7, four values a register.
      const std::int8_t* row = chunk + j * 4 * dim + d0 * 4;
      const __m256i v0 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
      const __m256i v1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16)));
      for (int i = 0; i < N; ++i) {
        const __m256i wb = broadcast4(w16 + (I0 + i) * kChunk + 4 * j);
        lo[i] = madd(lo[i], v0, wb);
        hi[i] = madd(hi[i], v1, wb);
      }
    }
    for (int i = 0; i < N; ++i) {
      float* o = rows[I0 + i] + d0;
      const __m256 x =
          _mm256_mul_ps(_mm256_set1_ps(f[I0 + i]), _mm256_cvtepi32_ps(add_pairs(lo[i], hi[i])));
      if (!first) {
        _mm256_storeu_ps(o, _mm256_add_ps(x, _mm256_loadu_ps(o)));
      } else if (corr != nullptr && corr[I0 + i] != 0.0f) {
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(corr[I0 + i]), _mm256_loadu_ps(o), x));
      } else {
        _mm256_storeu_ps(o, x);
      }
    }
  }
};

}  // namespace

void attend_int8_avx2(const Int8Queries& queries, const float* q, std::int64_t nq, const Int8Kv& kv,
                      std::int64_t begin, std::int64_t end, float scale, float* scores, float* out,
                      const float* sinks, float* max, float* sum) {
  const Int8KvMadd</*Fetch=*/true> k{kv, {}, &queries};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_prompt_int8_avx2(const Int8Queries& queries, const float* q, std::int64_t q_stride,
                             std::int64_t nq, std::int64_t tokens, const Int8Kv& kv,
                             std::int64_t pos0, std::int64_t window, float scale,
                             const float* sinks, float* out, std::int64_t out_stride) {
  const Int8KvMadd</*Fetch=*/false> k{kv, {}, &queries};  // a prompt's blocks are in the caches
  attend_prompt_rows(k, q, q_stride, nq, tokens, pos0, window, scale, sinks, out, out_stride);
}

}  // namespace tandem::kernels::attention_loop
