// AVX-512 kernels: VNNI (VPDPBUSD) for INT8, INT4 and MXFP4, AVX512_BF16 (VDPBF16PS) for
// BF16. Tile: 32 output rows (two 16-row blocks, one register each) x up to 8 tokens (INT8 and
// INT4 6 when there are more than 8), so each weight register loaded is used for every token of the
// tile and each activation broadcast twice.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTokenTile = 8;

// acc += u8 x s8 dot products, as _mm512_dpbusd_epi32 but with the accumulator tied to its
// register: GCC 12 otherwise copies every accumulator on each iteration of the tile loops
// (about two moves per product), which cost a third of the kernel's speed.
inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}
// Four bytes at p in every lane, each broadcast from memory (an INT4 step's two halves copied
// out as one 8-byte value were broadcast from a general register, two operations each and a
// shift between).
inline __attribute__((always_inline)) __m512i broadcast32(const std::int8_t* p) {
  std::int32_t quad;
  __builtin_memcpy(&quad, p, 4);
  return _mm512_set1_epi32(quad);
}
inline __attribute__((always_inline)) __m512 dpbf16(__m512 acc, __m512bh a, __m512bh b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

void store_rows(float* dst, __m512 v, std::int64_t rows) {
  if (rows >= kPackRows) {
    _mm512_storeu_ps(dst, v);
  } else {
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << rows) - 1), v);
  }
}

// The formats with integer sums: INT8 (one register of weights per 4 columns), INT4 and
// MXFP4 (one register per 8 columns, a nibble half each; MXFP4's codes go through one table
// lookup to the unsigned bytes INT4's nibbles are). Int8Row is rotated INT8: INT8's layout, one
// sum per row, token and rotation block over all the block's groups, converted and scaled once
// at the block's end.
enum class Kind { Int8, Int8Row, Int4, Fp4 };
constexpr bool int8_kind(Kind k) {
  return k == Kind::Int8 || k == Kind::Int8Row;
}

// Blocks a tile fetches into the caches while it computes, a line per block and step: the next
// blocks of its row range, which the first tile over them would otherwise wait for.
struct Ahead {
  const std::uint8_t* block[4] = {nullptr, nullptr, nullptr, nullptr};
  int count = 0;
};

// Per group, exact integer sums (VPDPBUSD of the unsigned stored bytes by the signed
// activations; INT8's and MXFP4's start from minus their offset times the group's activation
// sum), then one fused multiply-add per group into the float result, by the group's activation
// scale times the weights' (INT4 a second for its offset). Eight tokens by two blocks: the float
// results spill to L1 and are touched once per group, which costs less than a smaller tile's extra
// weight loads and unpacking (INT4, measured: 398 -> 438 GMAC/s, one thread, 768 x 2048 at 32
// tokens).
template <int T, int B, Kind K>
void grouped_tile(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                  std::int64_t t0, float* y, std::int64_t y_stride, Ahead ahead = {}) {
  constexpr std::int64_t kStepCols = int8_kind(K) ? 4 : 8;  // columns per weight register
  constexpr int bias = K == Kind::Fp4 ? kMxfp4Bias : int8_kind(K) ? 128 : 0;
  const std::int64_t steps = w.cols_padded / kStepCols;
  const std::int64_t steps_per_group = x.group / kStepCols;
  const std::int64_t groups = x.groups();
  const std::int64_t rows_padded = w.blocks * kPackRows;
  const std::uint8_t* wb[B];
  for (int b = 0; b < B; ++b) wb[b] = w.block(block + b);
  const std::int8_t* xq = x.q.data() + t0 * x.cols_padded;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  const __m512i fp4_table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Biased)));
  __m512 result[B][T];
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) result[b][t] = _mm512_setzero_ps();
  // Rotated INT8: groups a rotation block, and the blocks a row.
  const std::int64_t block_groups = K == Kind::Int8Row ? w.rotation / x.group : 1;
  const std::int64_t row_blocks = K == Kind::Int8Row ? w.rotation_blocks() : 0;
  __m512i acc[B][T];
  for (std::int64_t g = 0; g < groups; ++g) {
    // INT8's stored weights are w + 128, MXFP4's 2w + 12: each sum starts at minus that offset
    // times the group's activation sum, so the group's end only converts and scales. A rotation
    // block's sum starts once, from all its groups' starts.
    if constexpr (K == Kind::Int8Row) {
      if (g % block_groups == 0) {
        for (int t = 0; t < T; ++t) {
          const __m512i start = _mm512_set1_epi32(
              x.block_start[static_cast<std::size_t>((t0 + t) * row_blocks + g / block_groups)]);
          for (int b = 0; b < B; ++b) acc[b][t] = start;
        }
      }
    } else {
      for (int t = 0; t < T; ++t) {
        const std::size_t at = static_cast<std::size_t>((t0 + t) * groups + g);
        const __m512i start = bias == 0 ? _mm512_setzero_si512() : _mm512_set1_epi32(x.start[at]);
        for (int b = 0; b < B; ++b) acc[b][t] = start;
      }
    }
    const std::int64_t k1 = std::min(steps, (g + 1) * steps_per_group);
    // INT4's steps of the group follow the group's header, INT8's a header per pair of groups.
    const std::int64_t step_base =
        K == Kind::Int4 ? w.int4_step_offset(g) - g * steps_per_group * 64
        : int8_kind(K)  ? w.int8_step_offset(g * steps_per_group) - g * steps_per_group * 64
                        : 0;
    const std::uint8_t* gw[B];
    for (int b = 0; b < B; ++b) gw[b] = wb[b] + step_base;
    if constexpr (K == Kind::Int4 || int8_kind(K)) {
      const std::int64_t header = K == Kind::Int4 ? w.int4_header_offset(g)
                                  : g % 2 == 0    ? w.int8_header_offset(g)
                                                  : -1;
      for (int a = 0; a < ahead.count && header >= 0; ++a)
        _mm_prefetch(reinterpret_cast<const char*>(ahead.block[a] + header), _MM_HINT_T0);
    }
    for (std::int64_t k = g * steps_per_group; k < k1; ++k) {
      for (int a = 0; a < ahead.count; ++a) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead.block[a] + step_base + k * 64),
                     _MM_HINT_T0);
      }
      if constexpr (int8_kind(K)) {
        __m512i wv[B];
        for (int b = 0; b < B; ++b) wv[b] = _mm512_load_si512(gw[b] + k * 64);
        for (int t = 0; t < T; ++t) {
          std::int32_t quad;
          __builtin_memcpy(&quad, xq + t * x.cols_padded + k * 4, 4);
          const __m512i xv = _mm512_set1_epi32(quad);
          for (int b = 0; b < B; ++b) acc[b][t] = dpbusd(acc[b][t], wv[b], xv);
        }
      } else {
        __m512i lo[B], hi[B];
        for (int b = 0; b < B; ++b) {
          const __m512i raw = _mm512_loadu_si512(gw[b] + k * 64);
          lo[b] = _mm512_and_si512(raw, low_nibbles);
          hi[b] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibbles);
          if constexpr (K == Kind::Fp4) {
            lo[b] = _mm512_shuffle_epi8(fp4_table, lo[b]);
            hi[b] = _mm512_shuffle_epi8(fp4_table, hi[b]);
          }
        }
        for (int t = 0; t < T; ++t) {
          const __m512i x0 = broadcast32(xq + t * x.cols_padded + k * 8);
          const __m512i x1 = broadcast32(xq + t * x.cols_padded + k * 8 + 4);
          for (int b = 0; b < B; ++b) {
            acc[b][t] = dpbusd(acc[b][t], lo[b], x0);
            acc[b][t] = dpbusd(acc[b][t], hi[b], x1);
          }
        }
      }
    }
    if constexpr (K == Kind::Int8Row) {
      if ((g + 1) % block_groups != 0) continue;  // the sums go on over the block's next group
    }
    for (int b = 0; b < B; ++b) {
      __m512 w_scale = _mm512_setzero_ps(), w_offset = _mm512_setzero_ps();
      if constexpr (K == Kind::Fp4)
        w_scale = _mm512_loadu_ps(w.group_scale.data() + g * rows_padded + (block + b) * kPackRows);
      if constexpr (int8_kind(K)) {
        w_scale = _mm512_cvtph_ps(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(wb[b] + w.int8_header_offset(g))));
      }
      if constexpr (K == Kind::Int4) {
        const std::uint8_t* header = wb[b] + w.int4_header_offset(g);
        w_scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header)));
        w_offset =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + 32)));
      }
      for (int t = 0; t < T; ++t) {
        const std::size_t at = static_cast<std::size_t>((t0 + t) * groups + g);
        // INT4 adds its own offset times the group's activation sum, scaled.
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x.scale[at]));
        result[b][t] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(acc[b][t]), result[b][t]);
        if constexpr (K == Kind::Int4) {
          result[b][t] = _mm512_fmadd_ps(w_offset, _mm512_set1_ps(x.scaled_sum[at]), result[b][t]);
        }
      }
    }
  }
  for (int b = 0; b < B; ++b) {
    const std::int64_t r0 = (block + b) * kPackRows;
    const std::int64_t rows = std::min(kPackRows, w.rows - r0);
    for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * y_stride + r0, result[b][t], rows);
  }
}

// Tokens a tile takes. INT8 and INT4 from 9 tokens on take 6: their group ends multiply by
// the weights' scales, and at 8 tokens most of the 16 results live in memory (2 threads, Zen 5,
// `tandem bench --kernels --formats int8` / `int4`, 512 tokens: INT8's attention and head
// shapes 4-10% faster with 6, its experts' within the run-to-run noise; INT4's experts 3-5%,
// its prompts end to end 1-5%). Up to 8 tokens one tile of as many takes them all, each weight
// read once. MXFP4 keeps 8.
constexpr int kGroupedTokenTile = 8;
constexpr int kFewerTokenTile = 6;
// Products of at most this many tokens take four blocks at a time (grouped_blocks): INT8's
// 4 x 6 accumulators, four weight registers and a broadcast fit the 32 registers; INT4 and
// MXFP4 need two weight registers a block. (INT8 at 7 tokens spilled and lost to two blocks.)
template <Kind K>
constexpr int kFewTokens = int8_kind(K) ? 6 : 4;

// The first tile over a pair of blocks reads them from memory at four times the rate the
// later tiles compute (about 28 GB/s a thread at the VPDPBUSD peak, above what one core
// streams), so the later tiles fetch the pair after it: block j of it in tile 1 + j % (tiles
// - 1). With one or two tiles (up to 16 tokens) no tile has memory to spare and the pair after
// would wait as this one did, so each fetches one block of it (the single tile both): one
// thread, weights from memory, Zen 5, `tandem bench --kernels --formats int8,int4`, INT8 at 8
// tokens 180-270 -> 370-450 GFLOP/s, 12 tokens 250-350 -> 500-550, INT4 at 8 tokens 240-290 ->
// 480-580. INT4 too, from three tiles on as INT8: INT4 at 32 tokens 380-450 -> 570-590 (one
// thread), 800-850 -> 920-1030 (two). Not MXFP4, whose scales are a stream of their own apart
// from the blocks: fetching ahead made it slower (one thread, 8 tokens 190-230 -> 110-180
// GFLOP/s, 32 tokens 380-430 -> 300-355).
template <int Tile, int B, Kind K>
void run_tiles_grouped(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                       std::int64_t block_end, std::int64_t t_begin, std::int64_t t_end, float* y,
                       std::int64_t y_stride) {
  const std::int64_t full_tiles = (t_end - t_begin) / Tile;
  const int tail = static_cast<int>((t_end - t_begin) % Tile);
  const std::int64_t tiles = full_tiles + (tail > 0 ? 1 : 0);
  const auto ahead_of = [&](std::int64_t tile) {
    Ahead ahead;
    if (K == Kind::Fp4) return ahead;
    for (int j = 0; j < B; ++j) {
      const bool mine = tiles <= 2 ? j % tiles == tile : tile > 0 && 1 + j % (tiles - 1) == tile;
      if (mine && block + B + j < block_end) ahead.block[ahead.count++] = w.block(block + B + j);
    }
    return ahead;
  };
  std::int64_t t = t_begin;
  std::int64_t tile = 0;
  for (; t + Tile <= t_end; t += Tile, ++tile)
    grouped_tile<Tile, B, K>(w, x, block, t, y, y_stride, ahead_of(tile));
  switch (tail) {
#define TANDEM_GROUPED_TAIL(n)                                          \
  case n:                                                               \
    grouped_tile<n, B, K>(w, x, block, t, y, y_stride, ahead_of(tile)); \
    break;
    TANDEM_GROUPED_TAIL(1)
    TANDEM_GROUPED_TAIL(2)
    TANDEM_GROUPED_TAIL(3)
    TANDEM_GROUPED_TAIL(4)
    TANDEM_GROUPED_TAIL(5)
    TANDEM_GROUPED_TAIL(6)
    TANDEM_GROUPED_TAIL(7)
#undef TANDEM_GROUPED_TAIL
    default:
      break;
  }
}

template <int B, Kind K>
void run_tokens_grouped(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                        std::int64_t block_end, std::int64_t t_begin, std::int64_t t_end, float* y,
                        std::int64_t y_stride) {
  if (K != Kind::Fp4 && t_end - t_begin > kGroupedTokenTile) {
    run_tiles_grouped<kFewerTokenTile, B, K>(w, x, block, block_end, t_begin, t_end, y, y_stride);
  } else {
    run_tiles_grouped<kGroupedTokenTile, B, K>(w, x, block, block_end, t_begin, t_end, y, y_stride);
  }
}

template <int T, int B>
void bf16_tile(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
               std::int64_t t0, float* y, std::int64_t y_stride) {
  const std::int64_t pairs = w.cols_padded / 2;
  const std::uint8_t* wb[B];
  for (int b = 0; b < B; ++b) wb[b] = w.block(block + b);
  const std::uint16_t* xb = x.bf16.data() + t0 * x.bf16_stride;
  __m512 acc[B][T];
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) acc[b][t] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < pairs; ++k) {
    __m512bh wv[B];
    for (int b = 0; b < B; ++b) wv[b] = (__m512bh)_mm512_load_si512(wb[b] + k * 64);
    for (int t = 0; t < T; ++t) {
      std::int32_t pair;
      __builtin_memcpy(&pair, xb + t * x.bf16_stride + k * 2, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      for (int b = 0; b < B; ++b) acc[b][t] = dpbf16(acc[b][t], wv[b], xv);
    }
  }
  for (int b = 0; b < B; ++b) {
    const std::int64_t r0 = (block + b) * kPackRows;
    const std::int64_t rows = std::min(kPackRows, w.rows - r0);
    for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * y_stride + r0, acc[b][t], rows);
  }
}

template <int B>
void run_tokens_bf16(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                     std::int64_t t_begin, std::int64_t t_end, float* y, std::int64_t y_stride) {
  std::int64_t t = t_begin;
  for (; t + kTokenTile <= t_end; t += kTokenTile)
    bf16_tile<kTokenTile, B>(w, x, block, t, y, y_stride);
  switch (t_end - t) {
#define TANDEM_TAIL(n)                            \
  case n:                                         \
    bf16_tile<n, B>(w, x, block, t, y, y_stride); \
    break;
    TANDEM_TAIL(1)
    TANDEM_TAIL(2)
    TANDEM_TAIL(3)
    TANDEM_TAIL(4)
    TANDEM_TAIL(5)
    TANDEM_TAIL(6)
    TANDEM_TAIL(7)
#undef TANDEM_TAIL
    default:
      break;
  }
}

// The products of t_end - t_begin (1 to T) tokens over the whole groups of four blocks from
// `block`; returns the first block left.
template <Kind K, int T = kFewTokens<K>>
std::int64_t four_blocks_few_tokens(const PackedMatrix& w, const PackedActivations& x,
                                    std::int64_t block, std::int64_t block_end,
                                    std::int64_t t_begin, std::int64_t t_end, float* y,
                                    std::int64_t y_stride) {
  if constexpr (T > 1) {
    if (t_end - t_begin < T)
      return four_blocks_few_tokens<K, T - 1>(w, x, block, block_end, t_begin, t_end, y, y_stride);
  }
  // Each group of four fetches the next four (one thread, Zen 5: INT4 at 1-4 tokens 20-80%
  // faster, INT8 at 2-6 tokens 10-45%; on two threads, where memory is the limit, 0-15%).
  for (; block + 4 <= block_end; block += 4) {
    Ahead ahead;
    for (std::int64_t next = block + 4; next < std::min(block + 8, block_end); ++next)
      ahead.block[ahead.count++] = w.block(next);
    grouped_tile<T, 4, K>(w, x, block, t_begin, y, y_stride, ahead);
  }
  return block;
}

// The products of t_end - t_begin (1 to T) tokens block after block from `block`, each block
// fetching the next into the caches meanwhile; returns block_end.
template <Kind K, int T>
std::int64_t one_block_few_tokens(const PackedMatrix& w, const PackedActivations& x,
                                  std::int64_t block, std::int64_t block_end, std::int64_t t_begin,
                                  std::int64_t t_end, float* y, std::int64_t y_stride) {
  if constexpr (T > 1) {
    if (t_end - t_begin < T)
      return one_block_few_tokens<K, T - 1>(w, x, block, block_end, t_begin, t_end, y, y_stride);
  }
  for (; block < block_end; ++block) {
    Ahead ahead;
    if (block + 1 < block_end) ahead.block[ahead.count++] = w.block(block + 1);
    grouped_tile<T, 1, K>(w, x, block, t_begin, y, y_stride, ahead);
  }
  return block;
}

// Up to this many tokens, INT8 and INT4 products read their blocks one after another.
template <Kind K>
constexpr int kOneBlockTokens = int8_kind(K)      ? kFewTokens<K>
                                : K == Kind::Int4 ? 2
                                                  : 0;

template <Kind K>
void grouped_blocks(const PackedMatrix& w, const PackedActivations& x, float* y,
                    std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                    std::int64_t t_begin, std::int64_t t_end) {
  std::int64_t b = block_begin;
  // A decoded token's products, and INT8's of up to six tokens (an expert's share of a short
  // prompt), read their blocks one after another, each fetching the next into the caches: one
  // stream, as the prefetchers like it. Four blocks at a time (four streams, each fetching its
  // successor four blocks on) were slower there (2 threads, Zen 5, `tandem bench --kernels
  // --formats int8,int4 --tokens 1,2,4,6 -t 2`, rounds alternated): at one token the head
  // read 77-80 -> 87-97 GB/s in INT8 and 71-79 -> 90-99 in INT4, the expert down 62-64 -> 71-73
  // and 54-56 -> 63-65 (only the 1 MiB k and v products lost, INT8 67-69 -> 62-63); INT8 at
  // 6 tokens the head 818-837 -> 938-968 GFLOP/s, o 598-624 -> 733-764, q at 4 tokens 468-491
  // -> 552-562. INT4 from 3 tokens on keeps four blocks (q at 4 tokens 791-794 against
  // 740-772 one at a time), and MXFP4 always: its scales are a stream of their own, and one
  // block at a time read it 20-30% slower at one token.
  if (t_end - t_begin <= kOneBlockTokens<K>) {
    one_block_few_tokens<K, std::max(1, kOneBlockTokens<K>)>(w, x, b, block_end, t_begin, t_end, y,
                                                             y_stride);
    return;
  }
  // Past those, an expert given a few of a prompt's tokens (INT4's 3-4, MXFP4's 1-8) reads
  // each weight for so few products that memory sets the pace: four blocks at a time keep
  // four memory streams in flight (and 4 x tokens independent accumulators).
  if (t_end - t_begin <= kFewTokens<K>)
    b = four_blocks_few_tokens<K>(w, x, block_begin, block_end, t_begin, t_end, y, y_stride);
  for (; b + 2 <= block_end; b += 2)
    run_tokens_grouped<2, K>(w, x, b, block_end, t_begin, t_end, y, y_stride);
  if (b < block_end) run_tokens_grouped<1, K>(w, x, b, block_end, t_begin, t_end, y, y_stride);
}

}  // namespace

void packed_matmul_avx512_tokens(const PackedMatrix& w, const PackedActivations& x, float* y,
                                 std::int64_t y_stride, std::int64_t block_begin,
                                 std::int64_t block_end, std::int64_t t_begin, std::int64_t t_end) {
  if (t_end <= t_begin) return;
  switch (w.format) {
    case PackedFormat::Int8:
      if (w.rotation > 0) {
        grouped_blocks<Kind::Int8Row>(w, x, y, y_stride, block_begin, block_end, t_begin, t_end);
      } else {
        grouped_blocks<Kind::Int8>(w, x, y, y_stride, block_begin, block_end, t_begin, t_end);
      }
      return;
    case PackedFormat::Int4:
      grouped_blocks<Kind::Int4>(w, x, y, y_stride, block_begin, block_end, t_begin, t_end);
      return;
    case PackedFormat::Mxfp4:
      grouped_blocks<Kind::Fp4>(w, x, y, y_stride, block_begin, block_end, t_begin, t_end);
      return;
    case PackedFormat::Bf16:
      break;
  }
  std::int64_t b = block_begin;
  for (; b + 2 <= block_end; b += 2) run_tokens_bf16<2>(w, x, b, t_begin, t_end, y, y_stride);
  if (b < block_end) run_tokens_bf16<1>(w, x, b, t_begin, t_end, y, y_stride);
}

void packed_matmul_avx512(const PackedMatrix& w, const PackedActivations& x, float* y,
                          std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  packed_matmul_avx512_tokens(w, x, y, y_stride, block_begin, block_end, 0, x.tokens);
}

}  // namespace tandem::kernels
