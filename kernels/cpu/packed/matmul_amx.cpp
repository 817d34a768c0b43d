// AMX kernels (AMX-TILE, AMX-BF16, AMX-INT8) for the packed formats: prompt processing and the
// experts several tokens chose. BF16 weights go into tiles from kAmxMinTokens tokens; INT8 and
// INT4 weights go into tiles widened to BF16 where their activations are BF16 (widened
// products, matmul.h), at every token count; rotated INT8 (in rotation blocks of 64 columns or
// more) into integer tiles at every token count. Whole tiles take 16 tokens; the tokens after
// the last whole tile, and products of fewer than 16, take one tile of as many rows. Everything
// else (fewer tokens, quantised activations, MXFP4) takes the AVX-512 kernels, which every AMX CPU
// has.
//
// The BF16 layout is already the one AMX wants for its second operand: per block of 16 rows,
// 16 consecutive column pairs are one 16 x 64-byte tile, 1 KiB contiguous. Widened products
// write runs of up to 8 INT8 or INT4 blocks in that layout into a per-thread buffer first. The
// activations are the first operand, 16 tokens x 64 bytes read with the row stride of the
// activation matrix; TDPBF16PS takes BF16 pairs and sums in fp32.
//
// Eight tiles: four accumulators (2 token tiles x 2 row blocks), two activation tiles and two
// weight tiles, so each loaded tile feeds two products. The column pairs that do not fill a
// last 64-byte tile are added with AVX-512.
//
// Integer tiles (TDPBSUD) take rotated INT8 only (int8_row_tiles), whose sums run over whole
// rows: plain INT8's activations, quantised per 32 columns, would make them flush their sums
// to AVX-512 at every group, which held them below the AVX-512 kernel (matmul.h).
//
// The tile unit is a template parameter (amx_tiles.h): the instructions, or the same in
// software for the tests on CPUs without AMX.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {
namespace {

using amx::EmulatedTiles;
using amx::HardwareTiles;
using amx::kTileBytes;
using amx::kTileRows;
using amx::TileConfig;
constexpr std::int64_t kPairsPerTile = kTileBytes / 4;  // BF16 column pairs per tile: 16

// Tiles 0-3: accumulators C[token tile][row block]; 4-5: activations; 6-7: weights, each
// product over 32 columns (64 bytes of every row). `token_rows`: the tokens a token tile
// holds, 16, or fewer for one partial tile (its accumulators and activations then have as
// many rows).
TileConfig kernel_config(int token_rows) {
  TileConfig c = amx::full_tiles();
  for (int t : {0, 1, 2, 3, 4, 5}) c.rows[t] = static_cast<std::uint8_t>(token_rows);
  return c;
}

// Per-thread scratch: INT8 and INT4 blocks widened to BF16, and the accumulators read back.
struct Scratch {
  AlignedBytes widened;
  alignas(64) float results[2][2][kTileRows][kTileRows];  // [token tile][block][token][row]
  alignas(64) float sums[2][2][kTileRows][kTileRows];     // rotated INT8's, over its blocks
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// Bytes to bring into the caches while the tiles work: the blocks a widened product widens
// next, which its widening would otherwise wait for from memory (a 32-token INT8
// product on two threads, its weights from memory: about 0.75x the AVX-512 kernel without,
// on a par with it with; docs/benchmarks.md).
struct Prefetch {
  const std::uint8_t* bytes = nullptr;
  std::int64_t lines = 0;  // of 64 bytes
};

// C += A . B in BF16 pairs (fp32 sums), or in signed activation bytes by unsigned weight
// bytes (INT8: 32-bit sums).
template <class Tiles, bool Int8, int C, int A, int B>
void dot() {
  if constexpr (Int8) {
    Tiles::template dot_s8u8<C, A, B>();
  } else {
    Tiles::template dot_bf16<C, A, B>();
  }
}

// AMX products over `chunks` column chunks of 64 bytes (32 BF16 columns, or 64 INT8 ones), for
// TT token tiles and BB row blocks. a_base/a_stride: the activations of the first token tile
// (the second follows 16 rows later); b_base[b]: the first weight tile of block b (16 rows of
// 64 bytes a chunk), the next chunk's `b_chunk_stride` bytes on. `next`'s lines are prefetched
// spread over the chunks.
template <class Tiles, int TT, int BB, bool Int8 = false>
void tile_products(const std::uint8_t* a_base, std::int64_t a_stride,
                   const std::uint8_t* const* b_base, std::int64_t chunks, Prefetch next = {},
                   std::int64_t b_chunk_stride = kTileRows * kTileBytes) {
  const std::int64_t lines_per_chunk = chunks > 0 ? (next.lines + chunks - 1) / chunks : 0;
  for (std::int64_t k = 0; k < chunks; ++k) {
    for (std::int64_t l = k * lines_per_chunk, end = std::min(next.lines, l + lines_per_chunk);
         l < end; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(next.bytes + l * 64), _MM_HINT_T1);
    Tiles::template load<4>(a_base + k * kTileBytes, a_stride);
    if constexpr (TT == 2)
      Tiles::template load<5>(a_base + 16 * a_stride + k * kTileBytes, a_stride);
    Tiles::template load<6>(b_base[0] + k * b_chunk_stride, kTileBytes);
    if constexpr (BB == 2) Tiles::template load<7>(b_base[1] + k * b_chunk_stride, kTileBytes);
    dot<Tiles, Int8, 0, 4, 6>();
    if constexpr (BB == 2) dot<Tiles, Int8, 1, 4, 7>();
    if constexpr (TT == 2) dot<Tiles, Int8, 2, 5, 6>();
    if constexpr (TT == 2 && BB == 2) dot<Tiles, Int8, 3, 5, 7>();
  }
}

template <class Tiles, int TT, int BB>
void zero_accumulators() {
  Tiles::template zero<0>();
  if constexpr (BB == 2) Tiles::template zero<1>();
  if constexpr (TT == 2) Tiles::template zero<2>();
  if constexpr (TT == 2 && BB == 2) Tiles::template zero<3>();
}

template <class Tiles, int TT, int BB>
void store_accumulators(void* out) {  // out: [2][2][16][16] of 4-byte values
  auto* base = static_cast<std::uint8_t*>(out);
  constexpr std::int64_t kTile = kTileRows * kTileRows * 4;
  Tiles::template store<0>(base, kTileBytes);
  if constexpr (BB == 2) Tiles::template store<1>(base + kTile, kTileBytes);
  if constexpr (TT == 2) Tiles::template store<2>(base + 2 * kTile, kTileBytes);
  if constexpr (TT == 2 && BB == 2) Tiles::template store<3>(base + 3 * kTile, kTileBytes);
}

void add_tail_pairs(const std::uint8_t* wb, const std::uint16_t* xb, std::int64_t x_stride,
                    std::int64_t p0, std::int64_t p1, int tokens, float (*sums)[kTileRows]) {
  if (p0 >= p1) return;
  for (int t = 0; t < tokens; ++t) {
    __m512 acc = _mm512_load_ps(sums[t]);
    for (std::int64_t k = p0; k < p1; ++k) {
      std::int32_t pair;
      std::memcpy(&pair, xb + t * x_stride + k * 2, 4);
      acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_load_si512(wb + k * 64),
                             (__m512bh)_mm512_set1_epi32(pair));
    }
    _mm512_store_ps(sums[t], acc);
  }
}

void store_rows(float* dst, __m512 v, std::int64_t rows) {
  if (rows >= kPackRows) {
    _mm512_storeu_ps(dst, v);
  } else {
    _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << rows) - 1), v);
  }
}

// BF16 weights, or INT8 and INT4 ones widened to BF16: `wbytes` the first of the BB blocks in
// the BF16 layout, the next `block_stride` bytes after it.
template <class Tiles, int TT, int BB>
void bf16_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                const std::uint8_t* wbytes, std::int64_t block_stride, std::int64_t t0, int rows,
                float* y, std::int64_t y_stride, Prefetch next = {}) {
  Scratch& s = scratch();
  const std::int64_t pairs = w.cols_padded / 2;
  const std::int64_t chunks = pairs / kPairsPerTile;
  const std::uint8_t* wb[2] = {wbytes, BB == 2 ? wbytes + block_stride : nullptr};
  const auto* xb = reinterpret_cast<const std::uint8_t*>(x.bf16.data() + t0 * x.bf16_stride);
  zero_accumulators<Tiles, TT, BB>();
  tile_products<Tiles, TT, BB>(xb, x.bf16_stride * 2, wb, chunks, next);
  store_accumulators<Tiles, TT, BB>(s.results);
  for (int tt = 0; tt < TT; ++tt) {
    for (int b = 0; b < BB; ++b) {
      add_tail_pairs(wb[b], x.bf16.data() + (t0 + tt * kTileRows) * x.bf16_stride, x.bf16_stride,
                     chunks * kPairsPerTile, pairs, rows, s.results[tt][b]);
      const std::int64_t r0 = (block + b) * kPackRows;
      const std::int64_t out_rows = std::min(kPackRows, w.rows - r0);
      for (int t = 0; t < rows; ++t) {
        store_rows(y + (t0 + tt * kTileRows + t) * y_stride + r0,
                   _mm512_load_ps(s.results[tt][b][t]), out_rows);
      }
    }
  }
}

// `count` token tiles of `rows` tokens each from token t0 over BF16 blocks from `block`, two
// tiles at a time.
template <class Tiles, int BB>
void token_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                 std::int64_t t0, std::int64_t count, int rows, float* y, std::int64_t y_stride) {
  const auto stride = static_cast<std::int64_t>(w.block_bytes());
  std::int64_t tt = 0;
  for (; tt + 2 <= count; tt += 2)
    bf16_tiles<Tiles, 2, BB>(w, x, block, w.block(block), stride, t0 + tt * kTileRows, rows, y,
                             y_stride);
  if (tt < count)
    bf16_tiles<Tiles, 1, BB>(w, x, block, w.block(block), stride, t0 + tt * kTileRows, rows, y,
                             y_stride);
}

// The token tiles over BF16 blocks [block_begin, block_end), a pair of blocks at a time,
// under the tile configuration loaded for `rows`.
template <class Tiles>
void tiles_over_blocks(const PackedMatrix& w, const PackedActivations& x, std::int64_t block_begin,
                       std::int64_t block_end, std::int64_t t0, std::int64_t count, int rows,
                       float* y, std::int64_t y_stride) {
  std::int64_t b = block_begin;
  for (; b + 2 <= block_end; b += 2) token_tiles<Tiles, 2>(w, x, b, t0, count, rows, y, y_stride);
  if (b < block_end) token_tiles<Tiles, 1>(w, x, b, t0, count, rows, y, y_stride);
}

// Widened products (matmul.h): INT8 and INT4 blocks into the BF16 layout, 16 rows x 2
// columns (64 bytes) per pair of columns, each weight as unpack_row gives it (INT4's
// multiply-add fused) rounded to nearest even. Four columns (16 rows each) at a time: one
// register of INT8 steps, or the low or high nibbles of one INT4 step.

// 16 rows x 4 columns (four fp32 registers, column-major) into two BF16 pairs of columns.
inline void store_bf16_pairs(const __m512 (&col)[4], std::uint8_t* out) {
  // cvtne2ps_pbh(b, a): a's 16 values in the low words, b's in the high; interleaved so that
  // each row's two columns share a 32-bit lane.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < 2; ++p) {
    const __m512i two = (__m512i)_mm512_cvtne2ps_pbh(col[2 * p + 1], col[2 * p]);
    _mm512_store_si512(out + p * 64, _mm512_permutexvar_epi16(interleave, two));
  }
}

// Byte `i` of each 32-bit lane as 16 floats.
template <int I>
inline __m512 byte_lane(__m512i v) {
  if constexpr (I == 3) {
    return _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 24));
  } else {
    const __m512i mask = _mm512_set1_epi32(0xFF);
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * I), mask));
  }
}

void int8_block_to_bf16(const PackedMatrix& w, std::int64_t block, std::uint8_t* out) {
  const std::uint8_t* src = w.block(block);
  const std::int64_t quads = w.cols_padded / 4;
  constexpr std::int64_t kQuadsPerGroup = kInt8WeightGroup / 4;
  __m512 scale = _mm512_setzero_ps(), scale128 = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < quads; ++k) {
    if (k % kQuadsPerGroup == 0) {
      scale = _mm512_cvtph_ps(_mm256_load_si256(
          reinterpret_cast<const __m256i*>(src + w.int8_header_offset(k / kQuadsPerGroup))));
      scale128 = _mm512_mul_ps(scale, _mm512_set1_ps(128.0f));  // exact
    }
    const __m512i v = _mm512_load_si512(src + w.int8_step_offset(k));
    // (stored - 128) * scale with one rounding: stored * scale - 128 * scale, fused.
    const __m512 col[4] = {_mm512_fmsub_ps(byte_lane<0>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<1>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<2>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<3>(v), scale, scale128)};
    store_bf16_pairs(col, out + k * 128);
  }
}

void int4_block_to_bf16(const PackedMatrix& w, std::int64_t block, std::uint8_t* out) {
  const std::uint8_t* src = w.block(block);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const std::int64_t octets = w.cols_padded / 8, per_group = w.group / 8;
  for (std::int64_t g = 0, k = 0; k < octets; ++g) {
    const std::uint8_t* header = src + w.int4_header_offset(g);
    const __m512 scale =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header)));
    const __m512 offset =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + 32)));
    const std::uint8_t* steps = header + PackedMatrix::kInt4StepBytes;
    for (std::int64_t j = 0; j < per_group && k < octets; ++j, ++k) {
      const __m512i raw = _mm512_loadu_si512(steps + j * 64);
      // Low nibbles: columns 8k to 8k + 3; high: 8k + 4 to 8k + 7.
      for (int half = 0; half < 2; ++half) {
        const __m512i v = half == 0 ? _mm512_and_si512(raw, low)
                                    : _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        const __m512 col[4] = {_mm512_fmadd_ps(byte_lane<0>(v), scale, offset),
                               _mm512_fmadd_ps(byte_lane<1>(v), scale, offset),
                               _mm512_fmadd_ps(byte_lane<2>(v), scale, offset),
                               _mm512_fmadd_ps(byte_lane<3>(v), scale, offset)};
        store_bf16_pairs(col, out + (2 * k + half) * 128);
      }
    }
  }
}

void block_to_bf16(const PackedMatrix& w, std::int64_t block, std::uint8_t* out) {
  if (w.format == PackedFormat::Int8)
    int8_block_to_bf16(w, block, out);
  else
    int4_block_to_bf16(w, block, out);
}

// Widened products: a run of blocks widened at once, then the tokens in panels of
// kPanelTokens, each panel's token tiles over every pair of the run, so that a panel's
// activations stay in the second-level cache while the run's pairs take turns with them.
// One pass of all the tokens over each pair instead (the loop before) read every token's
// activations again from the third level or memory for every pair: at 2048 tokens 8 MiB a pair
// on Qwen3-30B-A3B's q projection. Partial tiles (the tokens after the last whole tile) run
// after the run's whole ones, under their own configuration.
//
// A q projection 4096 x 2048 in INT8 on two threads, the loop before and panels alternated in
// one process (docs/benchmarks.md, "Widened products in token panels"): 638 and 609 against 733
// and 694 GFLOP/s at 512 tokens, 521 and 494 against 594 and 567 at 2048; alike at 64 and 128.
constexpr std::int64_t kPanelTokens = 32;
// The widened run: up to 8 blocks and 1 MiB (the second-level cache holds it, a panel of
// activations and the next run's weights coming in), an even count so that pairs tile it.
std::int64_t widened_run_blocks(std::int64_t block_stride) {
  constexpr std::int64_t kRunBytes = std::int64_t{1} << 20, kMostBlocks = 8;
  return std::clamp<std::int64_t>(kRunBytes / block_stride / 2 * 2, 2, kMostBlocks);
}

template <class Tiles>
void widened_tiles(const PackedMatrix& w, const PackedActivations& x, float* y,
                   std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  Scratch& s = scratch();
  const std::int64_t block_stride = w.cols_padded * kPackRows * 2;  // BF16's block bytes
  const std::int64_t run_blocks = widened_run_blocks(block_stride);
  const auto buffer_bytes = static_cast<std::size_t>(run_blocks * block_stride);
  if (s.widened.size < buffer_bytes) s.widened = AlignedBytes::allocate(buffer_bytes);
  std::uint8_t* wide = s.widened.data.get();
  const std::int64_t whole = x.tokens / kTileRows;
  const int rest = static_cast<int>(x.tokens % kTileRows);
  const TileConfig whole_config = kernel_config(kTileRows);
  const TileConfig rest_config = kernel_config(rest > 0 ? rest : kTileRows);
  // The configuration loaded last: each load clears the tiles, so it is loaded on a change.
  int configured = 0;
  const auto configure = [&](int rows) {
    if (configured == rows) return;
    Tiles::configure(rows == kTileRows ? whole_config : rest_config);
    configured = rows;
  };
  constexpr std::int64_t kPanelTiles = kPanelTokens / kTileRows;
  for (std::int64_t r0 = block_begin; r0 < block_end; r0 += run_blocks) {
    const std::int64_t r1 = std::min(block_end, r0 + run_blocks);
    for (std::int64_t b = r0; b < r1; ++b) block_to_bf16(w, b, wide + (b - r0) * block_stride);
    // The last pass over the run (the partial tile's, else the last panel's) brings the next
    // run's weights in, each pair the blocks as many places on.
    const auto next_of = [&](std::int64_t b, std::int64_t count) {
      const std::int64_t first = b + (r1 - r0);
      const std::int64_t blocks = std::min(count, block_end - first);
      if (blocks <= 0) return Prefetch{};
      return Prefetch{w.block(first), blocks * static_cast<std::int64_t>(w.block_bytes()) / 64};
    };
    // Token tiles [t0, t1) of `rows` tokens over each pair of the run.
    const auto pass = [&](std::int64_t t0, std::int64_t t1, int rows, bool last) {
      configure(rows);
      const auto tiles = [&]<int BB>(std::int64_t b) {
        const std::uint8_t* wb = wide + (b - r0) * block_stride;
        Prefetch next = last ? next_of(b, BB) : Prefetch{};
        std::int64_t tt = t0;
        for (; tt + 2 <= t1; tt += 2, next = {})
          bf16_tiles<Tiles, 2, BB>(w, x, b, wb, block_stride, tt * kTileRows, rows, y, y_stride,
                                   next);
        if (tt < t1)
          bf16_tiles<Tiles, 1, BB>(w, x, b, wb, block_stride, tt * kTileRows, rows, y, y_stride,
                                   next);
      };
      std::int64_t b = r0;
      for (; b + 2 <= r1; b += 2) tiles.template operator()<2>(b);
      if (b < r1) tiles.template operator()<1>(b);
    };
    for (std::int64_t p = 0; p < whole; p += kPanelTiles) {
      const std::int64_t p1 = std::min(whole, p + kPanelTiles);
      pass(p, p1, kTileRows, rest == 0 && p1 == whole);
    }
    if (rest > 0) pass(whole, whole + 1, rest, true);
  }
  Tiles::release();
}

// Rotated INT8 (matmul.h, pack_int8_rotated) in integer tiles, for rotation blocks of 64
// columns or more. Its sums run over whole rotation blocks (the whole row for most widths), so
// a tile accumulates every 64 columns of a block with no group end between: TDPBSUD of the
// signed activations by the stored bytes (weight + 128), where the 16 steps after each pair
// of groups' header are one 16 x 64-byte tile of weights as AMX takes its second operand. At
// each block's end the sums are read back, and each gets its start (minus 128 times the
// token's sum over the block), one conversion, and one fused multiply-add by the row's scale
// for the block times the token's, in block order. Integer sums are exact, so this agrees with
// the other variants to the bit.
constexpr std::int64_t kInt8ChunkStride =
    (PackedMatrix::kInt8PairSteps + 1) * PackedMatrix::kStepBytes;

template <class Tiles, int TT, int BB>
void int8_row_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                    std::int64_t t0, int rows, float* y, std::int64_t y_stride, Prefetch next) {
  Scratch& s = scratch();
  const std::int64_t block_chunks = w.rotation / 64, blocks = w.rotation_blocks();
  const std::int64_t groups = x.groups(), block_groups = w.rotation / x.group;
  const std::uint8_t* wb[2] = {
      w.block(block) + PackedMatrix::int8_step_offset(0),
      BB == 2 ? w.block(block + 1) + PackedMatrix::int8_step_offset(0) : nullptr};
  const auto* xb = reinterpret_cast<const std::uint8_t*>(x.q.data() + t0 * x.cols_padded);
  for (std::int64_t k = 0; k < blocks; ++k) {
    const std::uint8_t* wk[2] = {wb[0] + k * block_chunks * kInt8ChunkStride,
                                 BB == 2 ? wb[1] + k * block_chunks * kInt8ChunkStride : nullptr};
    zero_accumulators<Tiles, TT, BB>();
    tile_products<Tiles, TT, BB, true>(xb + k * w.rotation, x.cols_padded, wk, block_chunks,
                                       k == 0 ? next : Prefetch{}, kInt8ChunkStride);
    store_accumulators<Tiles, TT, BB>(s.results);
    const std::int64_t g = (k + 1) * block_groups - 1;  // the block's last group
    for (int tt = 0; tt < TT; ++tt) {
      for (int b = 0; b < BB; ++b) {
        // Each group's header holds the row's scale for its block.
        const __m512 w_scale = _mm512_cvtph_ps(_mm256_load_si256(
            reinterpret_cast<const __m256i*>(w.block(block + b) + w.int8_header_offset(g))));
        for (int t = 0; t < rows; ++t) {
          const std::int64_t token = t0 + tt * kTileRows + t;
          const __m512i sum = _mm512_add_epi32(
              _mm512_load_si512(s.results[tt][b][t]),
              _mm512_set1_epi32(x.block_start[static_cast<std::size_t>(token * blocks + k)]));
          const __m512 scale = _mm512_mul_ps(
              w_scale, _mm512_set1_ps(x.scale[static_cast<std::size_t>(token * groups + g)]));
          const __m512 before = k == 0 ? _mm512_setzero_ps() : _mm512_load_ps(s.sums[tt][b][t]);
          _mm512_store_ps(s.sums[tt][b][t],
                          _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum), before));
        }
      }
    }
  }
  for (int tt = 0; tt < TT; ++tt) {
    for (int b = 0; b < BB; ++b) {
      const std::int64_t r0 = (block + b) * kPackRows;
      const std::int64_t out_rows = std::min(kPackRows, w.rows - r0);
      for (int t = 0; t < rows; ++t) {
        store_rows(y + (t0 + tt * kTileRows + t) * y_stride + r0, _mm512_load_ps(s.sums[tt][b][t]),
                   out_rows);
      }
    }
  }
}

// Rotated INT8 over blocks [block_begin, block_end), a pair of blocks at a time: every token's
// tiles over the pair while it is in the caches (whole tiles of 16, then one partial tile under
// its own configuration), the first of them bringing in the pair after.
template <class Tiles>
void int8_row_products(const PackedMatrix& w, const PackedActivations& x, float* y,
                       std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  const std::int64_t whole = x.tokens / kTileRows;
  const int rest = static_cast<int>(x.tokens % kTileRows);
  const TileConfig whole_config = kernel_config(kTileRows);
  const TileConfig rest_config = kernel_config(rest > 0 ? rest : kTileRows);
  int configured = 0;  // each load clears the tiles, so it is loaded on a change
  const auto configure = [&](int rows) {
    if (configured == rows) return;
    Tiles::configure(rows == kTileRows ? whole_config : rest_config);
    configured = rows;
  };
  const auto pair = [&]<int BB>(std::int64_t b) {
    const std::int64_t ahead = std::min<std::int64_t>(BB, block_end - (b + BB));
    Prefetch next = ahead > 0 ? Prefetch{w.block(b + BB),
                                         ahead * static_cast<std::int64_t>(w.block_bytes()) / 64}
                              : Prefetch{};
    if (whole > 0) {
      configure(kTileRows);
      std::int64_t tt = 0;
      for (; tt + 2 <= whole; tt += 2, next = {})
        int8_row_tiles<Tiles, 2, BB>(w, x, b, tt * kTileRows, kTileRows, y, y_stride, next);
      if (tt < whole) {
        int8_row_tiles<Tiles, 1, BB>(w, x, b, tt * kTileRows, kTileRows, y, y_stride, next);
        next = {};
      }
    }
    if (rest > 0) {
      configure(rest);
      int8_row_tiles<Tiles, 1, BB>(w, x, b, whole * kTileRows, rest, y, y_stride, next);
    }
  };
  std::int64_t b = block_begin;
  for (; b + 2 <= block_end; b += 2) pair.template operator()<2>(b);
  if (b < block_end) pair.template operator()<1>(b);
  Tiles::release();
}

// Widened products through widened_tiles; BF16 from `min_tokens` tokens in whole tiles of 16,
// then the tokens after them in one partial tile (a second pass over the blocks under a
// configuration of that many rows: switching the configuration per pair of blocks would clear
// the tiles each time); everything else with AVX-512.
template <class Tiles>
void packed_matmul_tiles(const PackedMatrix& w, const PackedActivations& x, float* y,
                         std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                         std::int64_t min_tokens) {
  if (widened_activations(w, x)) {
    widened_tiles<Tiles>(w, x, y, y_stride, block_begin, block_end);
    return;
  }
  if (w.rotation >= 64 && x.tokens >= kAmxMinRotatedTokens) {
    int8_row_products<Tiles>(w, x, y, y_stride, block_begin, block_end);
    return;
  }
  if (w.format != PackedFormat::Bf16 ||
      x.tokens < std::clamp<std::int64_t>(min_tokens, 1, kTileRows)) {
    packed_matmul_avx512(w, x, y, y_stride, block_begin, block_end);
    return;
  }
  const std::int64_t whole = x.tokens / kTileRows;
  const int rest = static_cast<int>(x.tokens % kTileRows);
  if (whole > 0) {
    Tiles::configure(kernel_config(kTileRows));
    tiles_over_blocks<Tiles>(w, x, block_begin, block_end, 0, whole, kTileRows, y, y_stride);
  }
  if (rest > 0) {
    Tiles::configure(kernel_config(rest));
    tiles_over_blocks<Tiles>(w, x, block_begin, block_end, whole * kTileRows, 1, rest, y, y_stride);
  }
  Tiles::release();
}

}  // namespace

void packed_matmul_amx(const PackedMatrix& w, const PackedActivations& x, float* y,
                       std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                       std::int64_t min_tokens) {
  packed_matmul_tiles<HardwareTiles>(w, x, y, y_stride, block_begin, block_end, min_tokens);
}

void packed_matmul_amx_emulated(const PackedMatrix& w, const PackedActivations& x, float* y,
                                std::int64_t y_stride, std::int64_t block_begin,
                                std::int64_t block_end, std::int64_t min_tokens) {
  packed_matmul_tiles<EmulatedTiles>(w, x, y, y_stride, block_begin, block_end, min_tokens);
}

}  // namespace tandem::kernels
