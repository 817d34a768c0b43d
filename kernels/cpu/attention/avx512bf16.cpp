// Attention over the BF16 KV cache with VDPBF16PS: each instruction adds two exact products
// a lane, a dimension pair of 16 keys when scoring and a pair of positions of 16 values
// when weighing, twice the multiply-adds of fp32 per instruction. A prompt's attention can
// also take its products in AMX tiles (TDPBF16PS, the same pairs 16 rows at a time). Compiled
// for AVX-512 with BF16 (the tile instructions are assembly); run only where
// attention_variant_supported says so.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/attention/loop.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/vec16.h"

namespace tandem::kernels::attention_loop {
namespace {

// acc += a . b per pair, with the accumulator tied to its register (GCC 12 otherwise copies
// accumulators on every iteration, as in packed/matmul_avx512.cpp).
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
      const std::uint16_t* ahead = tile + kBf16KeyTilesAhead * dim * kKeyTile;
      __m512 acc[NQ];
      for (int i = 0; i < NQ; ++i) acc[i] = _mm512_setzero_ps();
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + dp * 2 * kKeyTile), _MM_HINT_T1);
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
      const std::uint16_t* ahead = tile + kBf16KeyTilesAhead * dim * kKeyTile;
      __m512 a0[NQ], a1[NQ];
      for (int i = 0; i < NQ; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + dp * 2 * kKeyTile), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + (dim + dp * 2) * kKeyTile), _MM_HINT_T1);
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
          fetch_row_share(row + kBf16PairChunk * 2 * value_row, 4 * dim, d0 / 32, dim / 32);
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

// The first n (even) values of q, BF16-exact, as pairs: the top halves of two floats. In a
// buffer of this thread's, valid until its next call.
const std::uint32_t* bf16_pairs(const float* q, std::int64_t n) {
  thread_local std::vector<std::uint32_t> pairs;
  pairs.resize(static_cast<std::size_t>(n / 2));
  for (std::size_t j = 0; j < pairs.size(); ++j) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, q + 2 * j, sizeof(lo));
    std::memcpy(&hi, q + 2 * j + 1, sizeof(hi));
    pairs[j] = lo >> 16 | (hi & 0xFFFF0000u);
  }
  return pairs.data();
}

// ---- A prompt's attention, flash-style (attend_prompt_bf16). Rows are (token, head) pairs,
// row r = t * heads + h. For each block of kPromptKeyBlock positions, kRows rows at a time:
// their scores against the block's key tiles, four tiles at a time in kRows x 4
// accumulators; the online softmax of each row's block, its weights as BF16 pairs; then the
// rows' outputs, rescaled to the new maxima, plus the weights times the block's values, kRows
// x 4 accumulators of 16 values each. The block's keys and values (32 KiB each at 128
// dimensions) stay in the first- and second-level caches while every row group takes them,
// and the next block's are fetched meanwhile.

// 2^x for x <= 0, to 3e-6 relative (the weights it gives are rounded to BF16, 2^-9): 2^f of
// x's fraction f in [-1/2, 1/2] by a polynomial of degree four with 2^0 exactly 1 (a
// row whose maximum did not move keeps its sums as they are), times 2^n by VSCALEFPS.
// Below -126 it gives 2^-126, a normal number: a score that far below its row's maximum
// weighs nothing in fp32 sums either way.
inline __attribute__((always_inline)) __m512 exp2_weights(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));  // a NaN (no maximum yet) gives -126
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(9.582772850990295e-3f), f,
                             _mm512_set1_ps(5.590619146823883e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024099111557007e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931242346763611e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Lane i of the result: op over the 16 lanes of v[i] (v is overwritten). Pairs of rows
// within 128-bit lanes, then fours, then across the 128-bit lanes: 45 operations for 16
// rows, against four shuffles and four operations for each row alone.
template <class Op>
inline __attribute__((always_inline)) __m512 reduce16(__m512* v, Op op) {
  for (int i = 0; i < 8; ++i)  // [a0 b0 a1 b1] op [a2 b2 a3 b3] in each 128-bit lane
    v[i] =
        op(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // rows 4i to 4i + 3, each over its 128-bit lane's four
    v[i] = op(_mm512_shuffle_ps(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 2; ++i)  // 128-bit lanes 0 op 1 and 2 op 3, of two fours of rows
    v[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return op(_mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
            _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

constexpr int kRows = 6;                                          // rows per register block
constexpr std::int64_t kBlockTiles = kPromptKeyBlock / kKeyTile;  // 8
constexpr std::int64_t kBlockPairs = kPromptKeyBlock / 2;         // 64

// f(std::integral_constant<int, NT>()) for the NT key tiles that hold `positions` (1 to
// kPromptKeyBlock) positions of a block: the count a template argument, so that a row's
// scores of the block stay in registers.
template <class F>
__attribute__((always_inline)) inline void with_tiles(std::int64_t positions, F f) {
  with_count<kBlockTiles>((positions + kKeyTile - 1) / kKeyTile, f);
}

struct PromptBlocks {
  Bf16Kv kv;
  std::int64_t pairs = 0;            // key dimension pairs
  const std::uint32_t* q = nullptr;  // rows x pairs, BF16 pairs
  std::int64_t heads = 0, tokens = 0, pos0 = 0, window = 0;
  float scale = 0.0f;
  float* out = nullptr;
  std::int64_t out_stride = 0;
  std::vector<float> max, sum;   // per row: the running maximum and sum of weights
  std::vector<float*> rows_out;  // per row: its output (a division per row, once)
  // What of the next block is still to be fetched, and how many lines per row group.
  const char *next_keys = nullptr, *next_keys_end = nullptr;
  const char *next_values = nullptr, *next_values_end = nullptr;
  std::int64_t lines_per_group = 0;

  void prefetch_next() {
    for (std::int64_t i = 0; i < lines_per_group; ++i) {
      if (next_keys < next_keys_end) {
        _mm_prefetch(next_keys, _MM_HINT_T1);
        next_keys += 64;
      } else if (next_values < next_values_end) {
        _mm_prefetch(next_values, _MM_HINT_T1);
        next_values += 64;
      } else {
        return;
      }
    }
  }
  float* out_row(std::int64_t r) const { return rows_out[static_cast<std::size_t>(r)]; }
  // The first position token t sees.
  std::int64_t first(std::int64_t t) const { return first_visible(pos0 + t, window); }

  // Rows [r0, r0 + MR) against NT tiles of the block at k0 from its tile tile0:
  // s[i][(tile0 + x) * 16 + lane] = q_i . k (the scale comes with the softmax).
  template <int MR, int NT>
  __attribute__((always_inline)) void score(std::int64_t r0, std::int64_t k0, std::int64_t tile0,
                                            float (*s)[kPromptKeyBlock]) const {
    const std::uint16_t* tiles = kv.keys + (k0 / kKeyTile + tile0) * kv.key_dim * kKeyTile;
    const std::uint32_t* qr = q + r0 * pairs;
    __m512 acc[MR][NT];
    for (int i = 0; i < MR; ++i)
      for (int x = 0; x < NT; ++x) acc[i][x] = _mm512_setzero_ps();
    for (std::int64_t dp = 0; dp < pairs; ++dp) {
      __m512i k[NT];
      for (int x = 0; x < NT; ++x)
        k[x] = _mm512_loadu_si512(tiles + x * kv.key_dim * kKeyTile + dp * 2 * kKeyTile);
      for (int i = 0; i < MR; ++i) {
        const __m512i b = _mm512_set1_epi32(static_cast<int>(qr[i * pairs + dp]));
        for (int x = 0; x < NT; ++x) acc[i][x] = dpbf16(acc[i][x], k[x], b);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int x = 0; x < NT; ++x) _mm512_storeu_ps(s[i] + (tile0 + x) * kKeyTile, acc[i][x]);
  }

  // Row r's online softmax over its positions [lo, hi) of the block at k0 (scores s times
  // the scale, NT tiles): its maximum and sum carried on, its weights into w as BF16 pairs (0
  // outside [lo, hi)); returns the factor the row's output so far is to be scaled by.
  template <int NT>
  __attribute__((always_inline)) float softmax(std::int64_t r, std::int64_t k0, std::int64_t lo,
                                               std::int64_t hi, const float* s, std::uint32_t* w) {
    __mmask16 in[NT];
    __m512 x[NT];
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int t = 0; t < NT; ++t) {
      const std::int64_t a = std::clamp<std::int64_t>(lo - k0 - t * kKeyTile, 0, 16);
      const std::int64_t b = std::clamp<std::int64_t>(hi - k0 - t * kKeyTile, 0, 16);
      in[t] = static_cast<__mmask16>(((1u << b) - 1) & ~((1u << a) - 1));
      x[t] = _mm512_mul_ps(_mm512_loadu_ps(s + t * kKeyTile), vscale);
      mx = _mm512_mask_max_ps(mx, in[t], mx, x[t]);
    }
    const float m_old = max[r];
    const float m_new = std::max(m_old, _mm512_reduce_max_ps(mx));
    const float corr = std::exp(m_old - m_new);  // 0 for the row's first block
    const __m512 vm = _mm512_set1_ps(m_new);
    __m512 total = _mm512_setzero_ps();
    for (int t = 0; t < NT; ++t) {
      const Vec16 e = exp16(reinterpret_cast<Vec16>(_mm512_sub_ps(x[t], vm)));
      x[t] = _mm512_maskz_mov_ps(in[t], reinterpret_cast<__m512>(e));
      total = _mm512_add_ps(total, x[t]);
    }
    for (int t = 0; t < NT; t += 2) {
      const __m512 hi_half = t + 1 < NT ? x[t + 1] : _mm512_setzero_ps();
      _mm512_storeu_si512(w + t * 8, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi_half, x[t])));
    }
    max[r] = m_new;
    sum[r] = sum[r] * corr + _mm512_reduce_add_ps(total);
    return corr;
  }

  // Rows [r0, r0 + MR): out = out * corr + w . v over the block's first `np` pairs, for the
  // NC groups of 16 values from d0 (the last group's lanes past value_dim masked). Row i's
  // weights of pair j are w[i * RowStep + j * PairStep]: a row's pairs side by side
  // (rows_block), or a pair's rows (lanes_group).
  template <int MR, int NC, std::int64_t RowStep, std::int64_t PairStep>
  __attribute__((always_inline)) void weigh(std::int64_t r0, std::int64_t k0, std::int64_t np,
                                            std::int64_t d0, const float* corr,
                                            const std::uint32_t* w) const {
    const std::int64_t vd = kv.value_dim;
    __mmask16 lanes[NC];
    for (int c = 0; c < NC; ++c) {
      const std::int64_t n = std::clamp<std::int64_t>(vd - d0 - 16 * c, 0, 16);
      lanes[c] = static_cast<__mmask16>((1u << n) - 1);
    }
    __m512 acc[MR][NC];
    for (int i = 0; i < MR; ++i) {
      const __m512 f = _mm512_set1_ps(corr[i]);
      const float* o = out_row(r0 + i) + d0;
      for (int c = 0; c < NC; ++c)
        acc[i][c] = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(lanes[c], o + 16 * c));
    }
    const std::int64_t pair_row = 2 * kv.value_row;
    const std::uint16_t* row = kv.values + (k0 / 2) * pair_row + 2 * d0;
    for (std::int64_t j = 0; j < np; ++j, row += pair_row) {
      __m512i v[NC];
      for (int c = 0; c < NC; ++c) v[c] = _mm512_maskz_loadu_epi32(lanes[c], row + 32 * c);
      for (int i = 0; i < MR; ++i) {
        const __m512i b = _mm512_set1_epi32(static_cast<int>(w[i * RowStep + j * PairStep]));
        for (int c = 0; c < NC; ++c) acc[i][c] = dpbf16(acc[i][c], v[c], b);
      }
    }
    for (int i = 0; i < MR; ++i) {
      float* o = out_row(r0 + i) + d0;
      for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(o + 16 * c, lanes[c], acc[i][c]);
    }
  }

  // Rows [r0, r0 + MR) through the block at k0 whose positions before `end` any of them
  // sees: NT tiles of it.
  template <int MR, int NT>
  __attribute__((always_inline)) void rows_block(std::int64_t r0, std::int64_t k0,
                                                 std::int64_t end) {
    alignas(64) float s[MR][kPromptKeyBlock];
    alignas(64) std::uint32_t w[MR][kBlockPairs];
    float corr[MR];
    // Four tiles at a time: MR x 4 accumulators and the four tiles' pairs fill the registers.
    score<MR, (NT > 4 ? 4 : NT)>(r0, k0, 0, s);
    if constexpr (NT > 4) score<MR, NT - 4>(r0, k0, 4, s);
    for (int i = 0; i < MR; ++i) {
      const std::int64_t t = (r0 + i) / heads;
      const std::int64_t lo = std::max(k0, first(t));
      const std::int64_t hi = std::min(k0 + kPromptKeyBlock, pos0 + t + 1);
      if (lo >= hi) {  // a row of a token that sees none of it (in a group with one that does)
        corr[i] = 1.0f;
        std::fill_n(w[i], kBlockPairs, 0u);
        continue;
      }
      corr[i] = softmax<NT>(r0 + i, k0, lo, hi, s[i], w[i]);
    }
    const std::int64_t np = (end - k0 + 1) / 2;
    std::int64_t d0 = 0;
    for (; d0 + 64 <= kv.value_dim; d0 += 64)
      weigh<MR, 4, kBlockPairs, 1>(r0, k0, np, d0, corr, w[0]);
    for (; d0 < kv.value_dim; d0 += 16) weigh<MR, 1, kBlockPairs, 1>(r0, k0, np, d0, corr, w[0]);
  }

  template <int MR>
  __attribute__((always_inline)) void rows_block_tiles(std::int64_t r0, std::int64_t k0,
                                                       std::int64_t end) {
    with_tiles(end - k0, [&](auto nt) { rows_block<MR, decltype(nt)::value>(r0, k0, end); });
  }

  // The blocks of the job's cache, and in each the groups of up to G rows that see some of
  // it (from a multiple of G when `aligned`): group(r0, n, k0, end) for rows [r0, r0 + n),
  // with `end` past the last position of the block the group's last row sees.
  template <std::int64_t G, bool aligned, class Group>
  __attribute__((always_inline)) void blocks(Group group) {
    const std::int64_t last = pos0 + tokens;  // past the last token's position
    for (std::int64_t k0 = first(0) - first(0) % kPromptKeyBlock; k0 < last;
         k0 += kPromptKeyBlock) {
      const std::int64_t k1 = k0 + kPromptKeyBlock;
      // The tokens that see some of the block: from the first at or past it (causal) to the
      // last whose window starts before its end.
      const std::int64_t ta = std::max<std::int64_t>(0, k0 - pos0);
      const std::int64_t tb = window > 0 ? std::min(tokens, k1 - pos0 - 1 + window) : tokens;
      const std::int64_t ra = aligned ? ta * heads / G * G : ta * heads, rb = tb * heads;
      // The next block's keys and values on their way to the second-level cache while this
      // one is computed, spread over its row groups: a long context comes from memory, and
      // a block's first row group would otherwise wait for every line of it (measured: half
      // the speed at a depth of 8192 with two threads).
      if (k1 < last) {
        const std::int64_t n1 = std::min(last, k1 + kPromptKeyBlock) - k1;
        next_keys =
            reinterpret_cast<const char*>(kv.keys + (k1 / kKeyTile) * kv.key_dim * kKeyTile);
        next_keys_end = next_keys + (n1 + kKeyTile - 1) / kKeyTile * kv.key_dim * kKeyTile * 2;
        next_values = reinterpret_cast<const char*>(kv.values + (k1 / 2) * 2 * kv.value_row);
        next_values_end = next_values + (n1 + 1) / 2 * 4 * kv.value_row;
        const std::int64_t lines = (next_keys_end - next_keys + next_values_end - next_values) / 64;
        const std::int64_t groups = (rb - ra + G - 1) / G;
        lines_per_group = (lines + groups - 1) / groups;
      } else {
        next_keys = next_keys_end = next_values = next_values_end = nullptr;
      }
      for (std::int64_t r0 = ra; r0 < rb; r0 += G) {
        const std::int64_t n = std::min<std::int64_t>(G, rb - r0);
        prefetch_next();
        // The positions the group's last token sees, of this block.
        const std::int64_t end = std::min(k1, pos0 + (r0 + n - 1) / heads + 1);
        group(r0, n, k0, end);
      }
    }
  }

  void start(std::int64_t rows_padded) {
    max.assign(static_cast<std::size_t>(rows_padded), -std::numeric_limits<float>::infinity());
    sum.assign(static_cast<std::size_t>(rows_padded), 0.0f);
    rows_out.resize(static_cast<std::size_t>(rows_padded));
  }

  // Each row's output divided by its sum of weights (and sink), into `out`.
  void finish(const float* sinks) {
    for (std::int64_t r = 0; r < tokens * heads; ++r) {
      double denominator = sum[static_cast<std::size_t>(r)];
      if (sinks != nullptr)
        denominator +=
            std::exp(static_cast<double>(sinks[r % heads]) - max[static_cast<std::size_t>(r)]);
      const auto inv = static_cast<float>(1.0 / denominator);
      const float* o = out_row(r);
      float* dst = out + (r / heads) * out_stride + (r % heads) * kv.value_dim;
      for (std::int64_t d = 0; d < kv.value_dim; ++d) dst[d] = o[d] * inv;
    }
  }

  void run(const float* sinks) {
    const std::int64_t rows = tokens * heads;
    start(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      rows_out[static_cast<std::size_t>(r)] =
          out + (r / heads) * out_stride + (r % heads) * kv.value_dim;
      std::fill_n(out_row(r), kv.value_dim, 0.0f);
    }
    blocks<kRows, false>([this](std::int64_t r0, std::int64_t n, std::int64_t k0,
                                std::int64_t end) {
      with_count<kRows>(n, [&](auto mr) { rows_block_tiles<decltype(mr)::value>(r0, k0, end); });
    });
    finish(sinks);
  }

  // ---- The same with rows in lanes, for jobs of kLaneGroupRows rows and more. A group's
  // 48 rows are three registers of 16, one row a lane: its scores of 8 positions at a time are
  // 3 x 8 accumulators, each key pair broadcast once for 48 rows. The softmax is then the
  // same steps in every lane at once, without the row layout's sums and maxima across lanes
  // or its exponential per row and block (which cost a quarter of the kernel's time at 2048
  // tokens: `tandem bench --attention`, perf, Zen 5). The weights go out a pair of positions
  // per lane, as the weighing above broadcasts them.
  static constexpr int kLaneRegs = 3;
  static constexpr std::int64_t kLaneGroupRows = 16 * kLaneRegs;
  static constexpr std::int64_t kLanePositions = 8;  // positions scored at a time

  const std::uint32_t* q_lanes = nullptr;  // [group][pair][kLaneGroupRows], zero past the rows

  // Rows [r0, r0 + 16R) (r0 a multiple of kLaneGroupRows) through the block at k0, its
  // positions before `end`.
  template <int R>
  void lanes_group(std::int64_t r0, std::int64_t k0, std::int64_t end) {
    constexpr std::int64_t G = kLaneGroupRows, P = kLanePositions;
    alignas(64) float s[kPromptKeyBlock][G];
    alignas(64) std::uint32_t w[kBlockPairs][G];
    alignas(64) float corr[G];
    alignas(64) std::int32_t lo[G], hi[G];  // each row's visible positions [lo, hi)
    const std::int64_t rows = tokens * heads, chunks = (end - k0 + P - 1) / P;
    // Masks are needed where a row sees less than the positions scored.
    bool masked = k0 + chunks * P != end;
    for (std::int64_t i = 0; i < 16 * R; ++i) {
      const std::int64_t r = r0 + i, t = r / heads;
      lo[i] = hi[i] = 0;
      if (r < rows) {
        lo[i] = static_cast<std::int32_t>(std::max(k0, first(t)));
        hi[i] = static_cast<std::int32_t>(std::min(end, pos0 + t + 1));
      }
      masked = masked || lo[i] > k0 || hi[i] < end;
    }
    const std::int64_t kd = kv.key_dim;
    const std::uint32_t* qg = q_lanes + r0 * pairs;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 mx[R];
    for (int r = 0; r < R; ++r) mx[r] = neg_inf;
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t p0 = k0 + c * P;
      const std::uint16_t* tile = kv.keys + (p0 / kKeyTile) * kd * kKeyTile + (p0 % kKeyTile) * 2;
      __m512 acc[R][P];
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
      for (std::int64_t dp = 0; dp < pairs; ++dp) {
        __m512i qv[R];
        for (int r = 0; r < R; ++r) qv[r] = _mm512_loadu_si512(qg + dp * G + 16 * r);
        const std::uint16_t* kp = tile + dp * 2 * kKeyTile;
        for (int p = 0; p < P; ++p) {
          std::int32_t pair;
          std::memcpy(&pair, kp + 2 * p, sizeof(pair));
          const __m512i b = _mm512_set1_epi32(pair);
          for (int r = 0; r < R; ++r) acc[r][p] = dpbf16(acc[r][p], qv[r], b);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512i vlo = _mm512_load_si512(lo + 16 * r), vhi = _mm512_load_si512(hi + 16 * r);
        for (int p = 0; p < P; ++p) {
          __m512 v = acc[r][p];
          if (masked) {
            const __m512i at = _mm512_set1_epi32(static_cast<int>(p0 + p));
            const __mmask16 seen =
                _mm512_mask_cmplt_epi32_mask(_mm512_cmple_epi32_mask(vlo, at), at, vhi);
            v = _mm512_mask_mov_ps(neg_inf, seen, v);
          }
          mx[r] = _mm512_max_ps(mx[r], v);
          _mm512_store_ps(s[c * P + p] + 16 * r, v);
        }
      }
    }
    // Each lane's softmax of the block, in base 2: a score's weight is 2^(s * scale * log2(e)
    // - m * log2(e)) for the row's running maximum m of scaled scores.
    constexpr float kLog2e = 1.44269504088896341f;
    const __m512 vscale = _mm512_set1_ps(scale), c2 = _mm512_set1_ps(scale * kLog2e);
    const __m512 vlog2e = _mm512_set1_ps(kLog2e);
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const std::int64_t np = (end - k0 + 1) / 2;
    for (int r = 0; r < R; ++r) {
      float* row_max = max.data() + r0 + 16 * r;
      float* row_sum = sum.data() + r0 + 16 * r;
      const __m512 m_old = _mm512_loadu_ps(row_max);
      const __m512 m_new = _mm512_max_ps(m_old, _mm512_mul_ps(mx[r], vscale));
      // A row without a maximum yet has m_old - m_new NaN or -inf: its factor multiplies
      // zeros.
      const __m512 f = exp2_weights(_mm512_mul_ps(_mm512_sub_ps(m_old, m_new), vlog2e));
      const __m512 m2 = _mm512_mul_ps(m_new, vlog2e);
      __m512 total = _mm512_setzero_ps();
      for (std::int64_t j = 0; j < np; ++j) {
        __m512 e[2];
        for (int h = 0; h < 2; ++h) {
          const __m512 x = _mm512_load_ps(s[2 * j + h] + 16 * r);
          e[h] = exp2_weights(_mm512_fmsub_ps(x, c2, m2));
          if (masked) e[h] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_OQ), e[h]);
          total = _mm512_add_ps(total, e[h]);
        }
        const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e[1], e[0]));
        _mm512_store_si512(w[j] + 16 * r, _mm512_permutexvar_epi16(interleave, words));
      }
      _mm512_storeu_ps(row_max, m_new);
      _mm512_storeu_ps(row_sum, _mm512_fmadd_ps(_mm512_loadu_ps(row_sum), f, total));
      _mm512_store_ps(corr + 16 * r, f);
    }
    const std::int64_t n = std::min<std::int64_t>(16 * R, rows - r0);
    for (std::int64_t i = 0; i < n; i += kRows) {
      with_count<kRows>(n - i, [&](auto mr) {
        lanes_weigh<decltype(mr)::value>(r0 + i, k0, np, corr + i, w[0] + i);
      });
    }
  }

  template <int MR>
  __attribute__((always_inline)) void lanes_weigh(std::int64_t r0, std::int64_t k0, std::int64_t np,
                                                  const float* corr, const std::uint32_t* w) const {
    std::int64_t d0 = 0;
    for (; d0 + 64 <= kv.value_dim; d0 += 64)
      weigh<MR, 4, 1, kLaneGroupRows>(r0, k0, np, d0, corr, w);
    for (; d0 < kv.value_dim; d0 += 16) weigh<MR, 1, 1, kLaneGroupRows>(r0, k0, np, d0, corr, w);
  }

  // Query row r: token r / heads's head r % heads, `q_stride` floats a token.
  const float* query_row(const float* q, std::int64_t q_stride, std::int64_t r) const {
    return q + (r / heads) * q_stride + (r % heads) * kv.key_dim;
  }
  // The queries as BF16 pairs, row after row (the row layout and the tiles'), rounded to
  // nearest even: a buffer of this thread's, valid until its next call.
  const std::uint32_t* row_pairs(const float* q, std::int64_t q_stride) const {
    thread_local std::vector<std::uint32_t> qp;
    const std::int64_t rows = tokens * heads;
    qp.resize(static_cast<std::size_t>(rows * pairs));
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* src = query_row(q, q_stride, r);
      for (std::int64_t dp = 0; dp < pairs; ++dp)
        qp[static_cast<std::size_t>(r * pairs + dp)] = pair_of(src + 2 * dp);
    }
    return qp.data();
  }
  static std::uint32_t pair_of(const float* x) {
    return f32_to_bf16(x[0]) | static_cast<std::uint32_t>(f32_to_bf16(x[1])) << 16;
  }

  void run_lanes(const float* q, std::int64_t q_stride, const float* sinks) {
    const std::int64_t rows = tokens * heads;
    const std::int64_t padded = (rows + kLaneGroupRows - 1) / kLaneGroupRows * kLaneGroupRows;
    // The queries as BF16 pairs rounded to nearest even, a group's 48 rows side by side for
    // each pair.
    thread_local std::vector<std::uint32_t> ql;
    ql.assign(static_cast<std::size_t>(padded * pairs), 0u);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* src = query_row(q, q_stride, r);
      std::uint32_t* dst =
          ql.data() + (r / kLaneGroupRows) * kLaneGroupRows * pairs + r % kLaneGroupRows;
      for (std::int64_t dp = 0; dp < pairs; ++dp) dst[dp * kLaneGroupRows] = pair_of(src + 2 * dp);
    }
    q_lanes = ql.data();
    start(padded);
    for (std::int64_t r = 0; r < rows; ++r) {
      rows_out[static_cast<std::size_t>(r)] =
          out + (r / heads) * out_stride + (r % heads) * kv.value_dim;
      std::fill_n(out_row(r), kv.value_dim, 0.0f);
    }
    blocks<kLaneGroupRows, true>(
        [this](std::int64_t r0, std::int64_t n, std::int64_t k0, std::int64_t end) {
          if (n > 32) {
            lanes_group<3>(r0, k0, end);
          } else if (n > 16) {
            lanes_group<2>(r0, k0, end);
          } else {
            lanes_group<1>(r0, k0, end);
          }
        });
    finish(sinks);
  }

  // ---- The same with AMX tiles (TDPBF16PS), for key widths in whole 32s and value widths in
  // whole 16s. The BF16 cache is laid out as the tiles' second operand wants it: 32
  // dimensions of a key tile are 16 rows of 64 bytes (a dimension pair of its 16 positions
  // each), and 16 values of 16 position pairs are 16 rows of 64 bytes, a pair's row apart.
  // Rows go in groups of 16, one tile row each. Scores: the accumulators of four key tiles at
  // a time, over the key width 32 dimensions at a time, a tile of the group's queries against
  // each key tile. The softmax as above (AVX-512). Weighing: four 16-value slices of the
  // group's outputs at a time into the accumulators, plus a tile of weights (32 positions)
  // times each slice's values. The outputs accumulate in a buffer of uniform row stride (the
  // tiles' loads need one) and reach `out` in finish(). Tiles 0-3 accumulate, 4 holds queries
  // or weights, 5 and 6 keys or values (in turn, so that a load need not wait for the
  // product before it).
  static constexpr std::int64_t kGroupRows = amx::kTileRows;

  const std::uint32_t* q_padded = nullptr;  // the queries' pairs, rows padded to 16
  float* o_buffer = nullptr;                // padded rows x value_dim
  // The block's last chunk of value pairs when the block ends inside one, zero past its end
  // (16 pairs x 2 x value_dim), copied once for all the block's row groups; tail_k0 is the
  // block it holds.
  std::uint16_t* value_tail = nullptr;
  std::int64_t tail_k0 = -1;

  template <class Tiles>
  static __attribute__((always_inline)) void dot(int c) {
    switch (c) {
      case 0:
        Tiles::template dot_bf16<0, 4, 5>();
        break;
      case 1:
        Tiles::template dot_bf16<1, 4, 6>();
        break;
      case 2:
        Tiles::template dot_bf16<2, 4, 5>();
        break;
      default:
        Tiles::template dot_bf16<3, 4, 6>();
        break;
    }
  }
  // The second operand of accumulator c's next product.
  template <class Tiles>
  static __attribute__((always_inline)) void load_b(int c, const void* base, std::int64_t stride) {
    if (c % 2 == 0) {
      Tiles::template load<5>(base, stride);
    } else {
      Tiles::template load<6>(base, stride);
    }
  }
  // f(std::integral_constant<int, C>()) for accumulators C in [0, n) (n <= 4).
  template <class F>
  static __attribute__((always_inline)) void each_accumulator(int n, F f) {
    f(std::integral_constant<int, 0>());
    if (n > 1) f(std::integral_constant<int, 1>());
    if (n > 2) f(std::integral_constant<int, 2>());
    if (n > 3) f(std::integral_constant<int, 3>());
  }
  // Accumulators [0, n) to or from 16 rows `stride` bytes apart, 64 bytes after each other.
  template <class Tiles, bool Store>
  static __attribute__((always_inline)) void move_accumulators(int n, float* base,
                                                               std::int64_t stride) {
    each_accumulator(n, [&](auto c) {
      if constexpr (Store) {
        Tiles::template store<decltype(c)::value>(base + c * 16, stride);
      } else {
        Tiles::template load<decltype(c)::value>(base + c * 16, stride);
      }
    });
  }

  // s[i][x * 16 + lane] = q_(r0 + i) . k for the block's first nt key tiles.
  template <class Tiles>
  __attribute__((always_inline)) void tiles_score(std::int64_t r0, std::int64_t k0, std::int64_t nt,
                                                  float (*s)[kPromptKeyBlock]) const {
    const std::int64_t kd = kv.key_dim;
    const std::uint32_t* qr = q_padded + r0 * pairs;
    const std::uint16_t* tiles = kv.keys + (k0 / kKeyTile) * kd * kKeyTile;
    for (std::int64_t x0 = 0; x0 < nt; x0 += 4) {
      const int n = static_cast<int>(std::min<std::int64_t>(4, nt - x0));
      each_accumulator(n, [](auto c) { Tiles::template zero<decltype(c)::value>(); });
      for (std::int64_t dc = 0; dc < kd / 32; ++dc) {
        Tiles::template load<4>(qr + dc * 16, pairs * 4);
        for (int x = 0; x < n; ++x) {
          load_b<Tiles>(x, tiles + ((x0 + x) * kd + dc * 32) * kKeyTile, 64);
          dot<Tiles>(x);
        }
      }
      move_accumulators<Tiles, true>(n, s[0] + x0 * kKeyTile, sizeof(s[0]));
    }
  }

  // Rows [r0, r0 + 16): out = out * corr + w . v over the block's first `np` pairs.
  template <class Tiles>
  __attribute__((always_inline)) void tiles_weigh(std::int64_t r0, std::int64_t k0, std::int64_t np,
                                                  const float* corr,
                                                  const std::uint32_t (*w)[kBlockPairs]) {
    const std::int64_t vd = kv.value_dim, pair_row = 2 * kv.value_row;
    float* o = o_buffer + r0 * vd;
    for (std::int64_t i = 0; i < kGroupRows; ++i) {
      if (corr[i] == 1.0f) continue;
      const __m512 f = _mm512_set1_ps(corr[i]);
      for (std::int64_t d = 0; d < vd; d += 16)
        _mm512_storeu_ps(o + i * vd + d, _mm512_mul_ps(f, _mm512_loadu_ps(o + i * vd + d)));
    }
    const std::uint16_t* rows = kv.values + (k0 / 2) * pair_row;
    // A block that ends inside a chunk of 16 pairs has that chunk from a copy with the
    // missing pairs zero: the cache may end before the chunk would (and a product of 0 with
    // what lies there need not be 0). The block's pairs past this group's np weigh 0.
    const std::int64_t block_pairs = (std::min(k0 + kPromptKeyBlock, pos0 + tokens) - k0 + 1) / 2;
    const std::int64_t whole = block_pairs / 16, chunks = (np + 15) / 16;
    if (whole < chunks && tail_k0 != k0) {
      for (std::int64_t j = 0; j < 16; ++j) {
        std::uint16_t* dst = value_tail + j * 2 * vd;
        if (whole * 16 + j < block_pairs) {
          std::memcpy(dst, rows + (whole * 16 + j) * pair_row, 2 * vd * sizeof(std::uint16_t));
        } else {
          std::fill_n(dst, 2 * vd, std::uint16_t{0});
        }
      }
      tail_k0 = k0;
    }
    for (std::int64_t c0 = 0; c0 < vd / 16; c0 += 4) {
      const int n = static_cast<int>(std::min<std::int64_t>(4, vd / 16 - c0));
      move_accumulators<Tiles, false>(n, o + c0 * 16, vd * 4);
      for (std::int64_t pc = 0; pc < chunks; ++pc) {
        Tiles::template load<4>(w[0] + pc * 16, sizeof(w[0]));
        const bool copied = pc == whole;
        const std::uint16_t* base = copied ? value_tail : rows + pc * 16 * pair_row;
        const std::int64_t stride = (copied ? 2 * vd : pair_row) * 2;
        for (int c = 0; c < n; ++c) {
          load_b<Tiles>(c, base + (c0 + c) * 32, stride);
          dot<Tiles>(c);
        }
      }
      move_accumulators<Tiles, true>(n, o + c0 * 16, vd * 4);
    }
  }

  // The online softmax of 16 rows from r0 over NT key tiles of the block at k0, their scores
  // s a row each (as the tiles store them): the weights into w as BF16 pairs (0 where a row
  // sees nothing), the factors each row's output so far is to be scaled by into corr. As the
  // rows-in-lanes softmax (lanes_group), with no exponential or sum across lanes per row: the
  // rows' maxima and sums are each reduced 16 rows at once (reduce16), and a score's weight is
  // exp2_weights of it in base 2.
  template <int NT>
  __attribute__((always_inline)) void softmax16(std::int64_t r0, std::int64_t k0,
                                                float (*s)[kPromptKeyBlock],
                                                std::uint32_t (*w)[kBlockPairs], float* corr) {
    constexpr float kLog2e = 1.44269504088896341f;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    // Positions a row does not see score -inf.
    bool masked = false;
    for (std::int64_t i = 0; i < 16; ++i) {
      const std::int64_t t = (r0 + i) / heads;
      std::int64_t lo = 0, hi = 0;  // rows past the job's (padding) see nothing
      if (t < tokens) {
        lo = std::clamp<std::int64_t>(first(t) - k0, 0, NT * kKeyTile);
        hi = std::clamp<std::int64_t>(pos0 + t + 1 - k0, lo, NT * kKeyTile);
      }
      if (lo == 0 && hi == NT * kKeyTile) continue;
      masked = true;
      for (int x = 0; x < NT; ++x) {
        const std::int64_t a = std::clamp<std::int64_t>(lo - x * kKeyTile, 0, 16);
        const std::int64_t b = std::clamp<std::int64_t>(hi - x * kKeyTile, 0, 16);
        const auto seen = static_cast<__mmask16>(((1u << b) - 1) & ~((1u << a) - 1));
        float* at = s[i] + x * kKeyTile;
        _mm512_store_ps(at, _mm512_mask_mov_ps(neg_inf, seen, _mm512_load_ps(at)));
      }
    }
    __m512 part[16];
    for (int i = 0; i < 16; ++i) {
      part[i] = _mm512_load_ps(s[i]);
      for (int x = 1; x < NT; ++x) part[i] = _mm512_max_ps(part[i], _mm512_load_ps(s[i] + 16 * x));
    }
    const __m512 m_old = _mm512_loadu_ps(max.data() + r0);
    const __m512 m_new = _mm512_max_ps(
        m_old, _mm512_mul_ps(reduce16(part, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); }),
                             _mm512_set1_ps(scale)));
    const __m512 vlog2e = _mm512_set1_ps(kLog2e);
    // A row without a maximum yet has m_old - m_new NaN or -inf: its factor multiplies zeros.
    _mm512_store_ps(corr, exp2_weights(_mm512_mul_ps(_mm512_sub_ps(m_old, m_new), vlog2e)));
    _mm512_storeu_ps(max.data() + r0, m_new);
    alignas(64) float m2[16];
    _mm512_store_ps(m2, _mm512_mul_ps(m_new, vlog2e));
    const __m512 c2 = _mm512_set1_ps(scale * kLog2e);
    const auto weights = [&](auto with_masks) {
      for (int i = 0; i < 16; ++i) {
        const __m512 mi = _mm512_set1_ps(m2[i]);
        __m512 e[NT];
        part[i] = _mm512_setzero_ps();
        for (int x = 0; x < NT; ++x) {
          const __m512 v = _mm512_load_ps(s[i] + 16 * x);
          e[x] = exp2_weights(_mm512_fmsub_ps(v, c2, mi));
          if constexpr (decltype(with_masks)::value)
            e[x] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, neg_inf, _CMP_NEQ_OQ), e[x]);
          part[i] = _mm512_add_ps(part[i], e[x]);
        }
        for (int x = 0; x < NT; x += 2) {
          const __m512 second = x + 1 < NT ? e[x + 1] : _mm512_setzero_ps();
          _mm512_store_si512(w[i] + x * 8,
                             reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(second, e[x])));
        }
      }
    };
    if (masked) {
      weights(std::true_type());
    } else {
      weights(std::false_type());
    }
    const __m512 total = reduce16(part, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
    _mm512_storeu_ps(sum.data() + r0, _mm512_fmadd_ps(_mm512_loadu_ps(sum.data() + r0),
                                                      _mm512_load_ps(corr), total));
  }

  template <class Tiles, int NT>
  void tiles_group(std::int64_t r0, std::int64_t k0, std::int64_t end) {
    alignas(64) float s[kGroupRows][kPromptKeyBlock];
    alignas(64) std::uint32_t w[kGroupRows][kBlockPairs];
    alignas(64) float corr[kGroupRows];
    tiles_score<Tiles>(r0, k0, NT, s);
    softmax16<NT>(r0, k0, s, w, corr);
    tiles_weigh<Tiles>(r0, k0, (end - k0 + 1) / 2, corr, w);
  }

  template <class Tiles>
  void run_tiles(const float* sinks) {
    const std::int64_t rows = tokens * heads;
    const std::int64_t padded = (rows + kGroupRows - 1) / kGroupRows * kGroupRows;
    const std::int64_t vd = kv.value_dim;
    thread_local std::vector<std::uint32_t> qp;
    thread_local std::vector<float> ob;
    thread_local std::vector<std::uint16_t> vt;
    qp.resize(static_cast<std::size_t>(padded * pairs));
    std::fill(std::copy_n(q, rows * pairs, qp.data()), qp.data() + qp.size(), 0u);
    ob.assign(static_cast<std::size_t>(padded * vd), 0.0f);
    vt.resize(static_cast<std::size_t>(kGroupRows * 2 * vd));
    q_padded = qp.data();
    o_buffer = ob.data();
    value_tail = vt.data();
    tail_k0 = -1;
    start(padded);
    for (std::int64_t r = 0; r < padded; ++r)
      rows_out[static_cast<std::size_t>(r)] = ob.data() + r * vd;
    Tiles::configure(amx::full_tiles());
    blocks<kGroupRows, true>([this](std::int64_t r0, std::int64_t, std::int64_t k0,
                                    std::int64_t end) {
      with_tiles(end - k0, [&](auto nt) { tiles_group<Tiles, decltype(nt)::value>(r0, k0, end); });
    });
    Tiles::release();
    finish(sinks);
  }
};

}  // namespace

void attend_bf16_avx512(const float* q, std::int64_t nq, const Bf16Kv& kv, std::int64_t begin,
                        std::int64_t end, float scale, float* scores, float* out,
                        const float* sinks, float* max, float* sum) {
  const Bf16KvDot k{kv, q, bf16_pairs(q, nq * kv.key_dim)};
  attend_all(k, q, nq, begin, end, scale, scores, out, sinks, max, sum);
}

void attend_prompt_bf16_avx512(const float* q, std::int64_t q_stride, std::int64_t nq,
                               std::int64_t tokens, const Bf16Kv& kv, std::int64_t pos0,
                               std::int64_t window, float scale, const float* sinks, float* out,
                               std::int64_t out_stride, PromptTiles tiles) {
  PromptBlocks job;
  job.kv = kv;
  job.pairs = kv.key_dim / 2;
  job.heads = nq;
  job.tokens = tokens;
  job.pos0 = pos0;
  job.window = window;
  job.scale = scale;
  job.out = out;
  job.out_stride = out_stride;
  const bool whole_tiles = kv.key_dim % 32 == 0 && kv.value_dim % 16 == 0;
  if (tiles == PromptTiles::None || !whole_tiles) {
    if (tokens * nq >= PromptBlocks::kLaneGroupRows) {
      job.run_lanes(q, q_stride, sinks);
    } else {
      job.q = job.row_pairs(q, q_stride);
      job.run(sinks);
    }
    return;
  }
  job.q = job.row_pairs(q, q_stride);
  if (tiles == PromptTiles::Hardware) {
    job.run_tiles<amx::HardwareTiles>(sinks);
  } else {
    job.run_tiles<amx::EmulatedTiles>(sinks);
  }
}

}  // namespace tandem::kernels::attention_loop
