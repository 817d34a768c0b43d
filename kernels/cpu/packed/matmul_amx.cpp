// AMX kernels (AMX-TILE, AMX-BF16) for the packed formats: prompt processing and the experts
// several tokens chose. BF16 weights go into tiles from kAmxMinTokens tokens; INT8 and INT4
// weights go into tiles widened to BF16 where their activations are BF16 (widened products,
// matmul.h), at every token count. Everything else (fewer BF16 tokens, quantised activations,
// MXFP4) takes the AVX-512 kernels, which every AMX CPU has.
//
// The BF16 layout is already the one AMX wants for its second operand: per block of 16 rows,
// 16 consecutive column pairs are one 16 x 64-byte tile, 1 KiB contiguous. TDPBF16PS takes
// BF16 pairs and sums in fp32. Eight tiles: four accumulators (2 token tiles x 2 row blocks),
// two activation tiles and two weight tiles, so each loaded tile feeds two products.
//
// BF16 weights: whole tiles take 16 tokens; the tokens after the last whole tile, and products
// of fewer than 16, take one tile of as many rows. The activations are read in place, 16
// tokens x 64 bytes with the row stride of the activation matrix; the column pairs that do not
// fill a last 64-byte tile are added with AVX-512.
//
// Widened products go through the row in slabs (widened_tiles below): activations copied into
// tiles laid end to end, weights widened into a per-thread buffer a pair of blocks and a slab
// at a time, the sums kept in memory between slabs.
//
// Integer tiles (TDPBSUD) are not used: activations quantised per 32 columns make them flush
// their sums to AVX-512 at every group, which held them below the AVX-512 kernel (matmul.h).
//
// The tile unit is a template parameter (amx_tiles.h): the instructions, or the same in
// software for the tests on CPUs without AMX.
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

// Per-thread scratch: the accumulators read back.
struct Scratch {
  alignas(64) float results[2][2][kTileRows][kTileRows];  // [token tile][block][token][row]
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// AMX products over `chunks` column chunks of 32 columns, for TT token tiles and BB row
// blocks. a_base/a_stride: the activations of the first token tile (the second follows 16
// rows later); b_base[b]: the first weight tile of block b (16 rows of 64 bytes a chunk).
template <class Tiles, int TT, int BB>
void tile_products(const std::uint8_t* a_base, std::int64_t a_stride,
                   const std::uint8_t* const* b_base, std::int64_t chunks) {
  for (std::int64_t k = 0; k < chunks; ++k) {
    Tiles::template load<4>(a_base + k * kTileBytes, a_stride);
    if constexpr (TT == 2)
      Tiles::template load<5>(a_base + 16 * a_stride + k * kTileBytes, a_stride);
    Tiles::template load<6>(b_base[0] + k * kTileRows * kTileBytes, kTileBytes);
    if constexpr (BB == 2)
      Tiles::template load<7>(b_base[1] + k * kTileRows * kTileBytes, kTileBytes);
    Tiles::template dot_bf16<0, 4, 6>();
    if constexpr (BB == 2) Tiles::template dot_bf16<1, 4, 7>();
    if constexpr (TT == 2) Tiles::template dot_bf16<2, 5, 6>();
    if constexpr (TT == 2 && BB == 2) Tiles::template dot_bf16<3, 5, 7>();
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

// BF16 weights: `wbytes` the first of the BB blocks, the next `block_stride` bytes after it.
template <class Tiles, int TT, int BB>
void bf16_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                const std::uint8_t* wbytes, std::int64_t block_stride, std::int64_t t0, int rows,
                float* y, std::int64_t y_stride) {
  Scratch& s = scratch();
  const std::int64_t pairs = w.cols_padded / 2;
  const std::int64_t chunks = pairs / kPairsPerTile;
  const std::uint8_t* wb[2] = {wbytes, BB == 2 ? wbytes + block_stride : nullptr};
  const auto* xb = reinterpret_cast<const std::uint8_t*>(x.bf16.data() + t0 * x.cols_padded);
  zero_accumulators<Tiles, TT, BB>();
  tile_products<Tiles, TT, BB>(xb, x.cols_padded * 2, wb, chunks);
  store_accumulators<Tiles, TT, BB>(s.results);
  for (int tt = 0; tt < TT; ++tt) {
    for (int b = 0; b < BB; ++b) {
      add_tail_pairs(wb[b], x.bf16.data() + (t0 + tt * kTileRows) * x.cols_padded, x.cols_padded,
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

// Widened products (matmul.h): INT8 and INT4 weights into the BF16 layout, 16 rows x 2
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

// INT8 steps [k0, k1) of `block` (4 columns each) into out, 128 bytes a step.
void int8_steps_to_bf16(const PackedMatrix& w, std::int64_t block, std::int64_t k0, std::int64_t k1,
                        std::uint8_t* out) {
  const std::uint8_t* src = w.block(block);
  constexpr std::int64_t kStepsPerGroup = kInt8WeightGroup / 4;
  __m512 scale = _mm512_setzero_ps(), scale128 = _mm512_setzero_ps();
  for (std::int64_t k = k0; k < k1; ++k) {
    if (k == k0 || k % kStepsPerGroup == 0) {
      scale = _mm512_cvtph_ps(_mm256_load_si256(
          reinterpret_cast<const __m256i*>(src + w.int8_header_offset(k / kStepsPerGroup))));
      scale128 = _mm512_mul_ps(scale, _mm512_set1_ps(128.0f));  // exact
    }
    const __m512i v = _mm512_load_si512(src + w.int8_step_offset(k));
    // (stored - 128) * scale with one rounding: stored * scale - 128 * scale, fused.
    const __m512 col[4] = {_mm512_fmsub_ps(byte_lane<0>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<1>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<2>(v), scale, scale128),
                           _mm512_fmsub_ps(byte_lane<3>(v), scale, scale128)};
    store_bf16_pairs(col, out + (k - k0) * 128);
  }
}

// INT4 steps [k0, k1) of `block` (8 columns each) into out, 256 bytes a step.
void int4_steps_to_bf16(const PackedMatrix& w, std::int64_t block, std::int64_t k0, std::int64_t k1,
                        std::uint8_t* out) {
  const std::uint8_t* src = w.block(block);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const std::int64_t per_group = w.group / 8;
  // The group and the step in it, carried along (a division per step cost more than the
  // step's widening).
  std::int64_t g = k0 / per_group, j = k0 % per_group;
  const std::uint8_t* header = src + w.int4_header_offset(g);
  __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header)));
  __m512 offset =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + 32)));
  for (std::int64_t k = k0; k < k1; ++k, ++j) {
    if (j == per_group) {
      j = 0;
      header = src + w.int4_header_offset(++g);
      scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header)));
      offset = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + 32)));
    }
    const __m512i raw = _mm512_loadu_si512(header + PackedMatrix::kInt4StepBytes + j * 64);
    // Low nibbles: columns 8k to 8k + 3; high: 8k + 4 to 8k + 7.
    for (int half = 0; half < 2; ++half) {
      const __m512i v =
          half == 0 ? _mm512_and_si512(raw, low) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
      const __m512 col[4] = {_mm512_fmadd_ps(byte_lane<0>(v), scale, offset),
                             _mm512_fmadd_ps(byte_lane<1>(v), scale, offset),
                             _mm512_fmadd_ps(byte_lane<2>(v), scale, offset),
                             _mm512_fmadd_ps(byte_lane<3>(v), scale, offset)};
      store_bf16_pairs(col, out + ((k - k0) * 2 + half) * 128);
    }
  }
}

// Widened products go through the weights in slabs of kSlabChunks chunks of 32 columns (a
// tile's depth, 1 KiB of BF16 per block of 16 rows and per 16 tokens). Per slab the
// activations of a group of tokens (up to kGroupTokens) are copied into tiles laid end to
// end (1 KiB each, so no tile load strides across lines 4 KiB apart that share an L1 set),
// and per pair of blocks the weights are widened into 2 x 16 KiB that stay in L1 while every
// pair of token tiles takes them; the sums wait between slabs in a buffer of whole tiles.
// Widening the whole row once, as before, left 128 KiB of widened weights per pair of blocks
// in L2 and every token tile reading its activations a row 4 KiB apart, a KiB from L2 or
// beyond for each product: on a 2-core Xeon with AMX, one thread, interleaved (768 x 2048
// INT8), 1.05-1.1x at 64 tokens, 1.2-1.3x at 128 and 1.3-1.5x at 512 (docs/benchmarks.md,
// "Widened products in slabs").
constexpr std::int64_t kChunkBytes = kTileRows * kTileBytes;
constexpr std::int64_t kSlabChunks = 16;
// The sums of a row group (token tiles x blocks, 1 KiB each) are kept to about L2's share of
// them; more blocks than fit make a second group, which copies the activations again.
constexpr std::int64_t kSumBytes = std::int64_t{1} << 20;
constexpr std::int64_t kGroupTokens = 512;

// Chunks [c0, c0 + n) of `block` widened into out, 1 KiB a chunk; the columns past the
// weights' zero.
void widen_chunks(const PackedMatrix& w, std::int64_t block, std::int64_t c0, std::int64_t n,
                  std::uint8_t* out) {
  const std::int64_t col0 = c0 * 32, col1 = std::min(w.cols_padded, (c0 + n) * 32);
  if (w.format == PackedFormat::Int8)
    int8_steps_to_bf16(w, block, col0 / 4, col1 / 4, out);
  else
    int4_steps_to_bf16(w, block, col0 / 8, col1 / 8, out);
  const std::int64_t written = (col1 - col0) / 2 * kTileBytes;
  if (written < n * kChunkBytes)
    std::memset(out + written, 0, static_cast<std::size_t>(n * kChunkBytes - written));
}

// The activations of tokens [t_begin, t_end) over chunks [c0, c0 + n) into out, token tile
// i's chunk c at (i * n + c) KiB: 16 tokens x 64 bytes, tokens and columns past the end zero.
void copy_activation_tiles(const PackedActivations& x, std::int64_t t_begin, std::int64_t t_end,
                           std::int64_t c0, std::int64_t n, std::uint8_t* out) {
  const std::int64_t cols = x.cols_padded;
  const std::int64_t tiles = (t_end - t_begin + kTileRows - 1) / kTileRows;
  for (std::int64_t i = 0; i < tiles; ++i) {
    for (int r = 0; r < kTileRows; ++r) {
      const std::int64_t t = t_begin + i * kTileRows + r;
      std::uint8_t* row = out + i * n * kChunkBytes + r * kTileBytes;
      for (std::int64_t c = 0; c < n; ++c) {
        const std::int64_t col = (c0 + c) * 32;
        const std::int64_t have = t < t_end ? std::clamp<std::int64_t>(cols - col, 0, 32) : 0;
        __m512i v = _mm512_setzero_si512();
        if (have > 0) {
          const std::uint16_t* src = x.bf16.data() + t * cols + col;
          v = have == 32
                  ? _mm512_loadu_si512(src)
                  : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << have) - 1), src);
        }
        _mm512_store_si512(row + c * kChunkBytes, v);
      }
    }
  }
}

// Products over n chunks for TT token tiles and BB blocks: a, the first token tile's chunks
// (the second's n KiB after); b, the first block's (the second's n KiB after); c, the sums,
// tile [tt][bb] at (tt * c_stride + bb) KiB, zeroed first on the slab that starts them.
template <class Tiles, int TT, int BB>
void slab_products(const std::uint8_t* a, const std::uint8_t* b, std::int64_t n, std::uint8_t* c,
                   std::int64_t c_stride, bool first) {
  const std::int64_t next = n * kChunkBytes;
  std::uint8_t* const sums[4] = {c, c + kChunkBytes, c + c_stride * kChunkBytes,
                                 c + (c_stride + 1) * kChunkBytes};
  if (first) {
    zero_accumulators<Tiles, TT, BB>();
  } else {
    Tiles::template load<0>(sums[0], kTileBytes);
    if constexpr (BB == 2) Tiles::template load<1>(sums[1], kTileBytes);
    if constexpr (TT == 2) Tiles::template load<2>(sums[2], kTileBytes);
    if constexpr (TT == 2 && BB == 2) Tiles::template load<3>(sums[3], kTileBytes);
  }
  for (std::int64_t k = 0; k < n; ++k) {
    Tiles::template load<4>(a + k * kChunkBytes, kTileBytes);
    if constexpr (TT == 2) Tiles::template load<5>(a + next + k * kChunkBytes, kTileBytes);
    Tiles::template load<6>(b + k * kChunkBytes, kTileBytes);
    if constexpr (BB == 2) Tiles::template load<7>(b + next + k * kChunkBytes, kTileBytes);
    Tiles::template dot_bf16<0, 4, 6>();
    if constexpr (BB == 2) Tiles::template dot_bf16<1, 4, 7>();
    if constexpr (TT == 2) Tiles::template dot_bf16<2, 5, 6>();
    if constexpr (TT == 2 && BB == 2) Tiles::template dot_bf16<3, 5, 7>();
  }
  Tiles::template store<0>(sums[0], kTileBytes);
  if constexpr (BB == 2) Tiles::template store<1>(sums[1], kTileBytes);
  if constexpr (TT == 2) Tiles::template store<2>(sums[2], kTileBytes);
  if constexpr (TT == 2 && BB == 2) Tiles::template store<3>(sums[3], kTileBytes);
}

template <class Tiles, int BB>
void slab_token_tiles(const std::uint8_t* a, const std::uint8_t* b, std::int64_t n,
                      std::int64_t tiles, std::uint8_t* c, std::int64_t c_stride, bool first) {
  std::int64_t i = 0;
  for (; i + 2 <= tiles; i += 2)
    slab_products<Tiles, 2, BB>(a + i * n * kChunkBytes, b, n, c + i * c_stride * kChunkBytes,
                                c_stride, first);
  if (i < tiles)
    slab_products<Tiles, 1, BB>(a + i * n * kChunkBytes, b, n, c + i * c_stride * kChunkBytes,
                                c_stride, first);
}

struct WidenedScratch {
  AlignedBytes activations, weights, sums;
};
WidenedScratch& widened_scratch() {
  static thread_local WidenedScratch s;
  return s;
}
void ensure_bytes(AlignedBytes& buffer, std::int64_t bytes) {
  if (buffer.size < static_cast<std::size_t>(bytes))
    buffer = AlignedBytes::allocate(static_cast<std::size_t>(bytes));
}

// Widened products over blocks [block_begin, block_end) for tokens [t_begin, t_end), in whole
// tiles of 16 tokens (the last padded with zero tokens, so one tile configuration serves all).
template <class Tiles>
void widened_token_group(const PackedMatrix& w, const PackedActivations& x, std::int64_t t_begin,
                         std::int64_t t_end, float* y, std::int64_t y_stride,
                         std::int64_t block_begin, std::int64_t block_end) {
  WidenedScratch& s = widened_scratch();
  const std::int64_t tiles = (t_end - t_begin + kTileRows - 1) / kTileRows;
  const std::int64_t chunks = (w.cols_padded + 31) / 32;
  const std::int64_t slab = std::min(kSlabChunks, chunks);
  const std::int64_t group = std::min(block_end - block_begin,
                                      std::max<std::int64_t>(2, kSumBytes / (tiles * kChunkBytes)));
  ensure_bytes(s.activations, tiles * slab * kChunkBytes);
  ensure_bytes(s.weights, 2 * slab * kChunkBytes);
  ensure_bytes(s.sums, tiles * group * kChunkBytes);
  std::uint8_t* const a = s.activations.data.get();
  std::uint8_t* const b = s.weights.data.get();
  std::uint8_t* const c = s.sums.data.get();
  for (std::int64_t g0 = block_begin; g0 < block_end; g0 += group) {
    const std::int64_t blocks = std::min(group, block_end - g0);
    for (std::int64_t c0 = 0; c0 < chunks; c0 += slab) {
      const std::int64_t n = std::min(slab, chunks - c0);
      copy_activation_tiles(x, t_begin, t_end, c0, n, a);
      for (std::int64_t p = 0; p < blocks; p += 2) {
        widen_chunks(w, g0 + p, c0, n, b);
        if (p + 1 < blocks) {
          widen_chunks(w, g0 + p + 1, c0, n, b + n * kChunkBytes);
          slab_token_tiles<Tiles, 2>(a, b, n, tiles, c + p * kChunkBytes, blocks, c0 == 0);
        } else {
          slab_token_tiles<Tiles, 1>(a, b, n, tiles, c + p * kChunkBytes, blocks, c0 == 0);
        }
      }
    }
    // Tile (i, j) row t: token t_begin + 16 i + t, rows 16 (g0 + j) on.
    for (std::int64_t i = 0; i < tiles; ++i) {
      const std::int64_t t0 = t_begin + i * kTileRows;
      const std::int64_t rows = std::min<std::int64_t>(kTileRows, t_end - t0);
      for (std::int64_t j = 0; j < blocks; ++j) {
        const std::int64_t r0 = (g0 + j) * kPackRows;
        const auto* sum = reinterpret_cast<const float*>(c + (i * blocks + j) * kChunkBytes);
        for (std::int64_t t = 0; t < rows; ++t)
          store_rows(y + (t0 + t) * y_stride + r0, _mm512_load_ps(sum + t * kTileRows),
                     std::min(kPackRows, w.rows - r0));
      }
    }
  }
}

// Widened products in groups of kGroupTokens tokens: each group widens the weights again,
// which at 512 tokens costs little beside the products, while the activations and sums of
// one group stay in L2 (more tokens made the groups of blocks small and copied the
// activations from L3 for each: 0.66x the whole-row kernel at 2048 tokens, one thread).
template <class Tiles>
void widened_tiles(const PackedMatrix& w, const PackedActivations& x, float* y,
                   std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
  Tiles::configure(kernel_config(kTileRows));
  for (std::int64_t t0 = 0; t0 < x.tokens; t0 += kGroupTokens)
    widened_token_group<Tiles>(w, x, t0, std::min(x.tokens, t0 + kGroupTokens), y, y_stride,
                               block_begin, block_end);
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
