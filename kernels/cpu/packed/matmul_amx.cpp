// AMX kernels (AMX-TILE, AMX-INT8, AMX-BF16) for the packed formats: prompt processing and
// the experts several tokens chose. Whole tiles take 16 tokens; the tokens after the last
// whole tile, and products of fewer than 16, take one tile of as many rows where they are at
// least kAmxMinTokens (a tile product costs at most a whole tile's time), else the AVX-512
// kernels, which every AMX CPU has and which compute the same integer sums, so every variant
// agrees to the bit.
//
// The packed layout is already the one AMX wants for its second operand: per block of 16
// rows, 16 consecutive column quads (INT8) or column pairs (BF16) are one 16 x 64-byte tile,
// 1 KiB contiguous (INT8's groups of 32 columns are half tiles, 512 bytes after their pair's
// header of scales). The activations are the first operand, 16 tokens x 64 bytes read with the
// row stride of the activation matrix. TDPBSUD multiplies signed activations by the unsigned
// stored weights (w + 128, as for VPDPBUSD); TDPBF16PS takes BF16 pairs. INT4 weights are
// widened to bytes (0..15) one pair of blocks at a time into a per-thread buffer, then go
// the INT8 way. The integer sums are flushed once per activation group, as the other
// variants do; groups of 32 columns take half-tile products (16 x 32-byte activation tiles).
//
// Eight tiles: four accumulators (2 token tiles x 2 row blocks), two activation tiles and two
// weight tiles, so each loaded tile feeds two products. The columns that do not fill a last
// 64-byte tile are added with AVX-512 before the sums are scaled.
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

// Tiles 0-3: accumulators C[token tile][row block]; 4-5: activations; 6-7: weights. Each
// product takes `chunk_bytes` bytes of every activation row: 64 (a whole tile), or 32 where
// the activation groups are 32 columns (activation tiles 16 x 32 bytes, weight tiles 8 quads).
// `token_rows`: the tokens a token tile holds, 16, or fewer for one partial tile (its
// accumulators and activations then have as many rows).
TileConfig kernel_config(int chunk_bytes, int token_rows) {
  TileConfig c = amx::full_tiles();
  for (int t : {0, 1, 2, 3, 4, 5}) c.rows[t] = static_cast<std::uint8_t>(token_rows);
  for (int t : {4, 5}) c.colsb[t] = static_cast<std::uint16_t>(chunk_bytes);
  for (int t : {6, 7}) c.rows[t] = static_cast<std::uint8_t>(chunk_bytes / 4);
  return c;
}

// Per-thread scratch: INT4 blocks widened to bytes, and the accumulators read back.
struct Scratch {
  AlignedBytes widened;
  alignas(64) std::int32_t sums[2][2][kTileRows][kTileRows];  // [token tile][block][token][row]
  alignas(64) float results[2][2][kTileRows][kTileRows];
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// Accumulator tile for token tile TT and row block BB.
template <int TT, int BB>
constexpr int acc_tile() {
  return TT * 2 + BB;
}

// One pass of AMX products over `chunks` column chunks of `chunk_bytes` activation bytes
// each (as configured), for TT token tiles and BB row blocks, starting at chunk `chunk0`.
// a_base/a_stride: the activations of the first token tile (the second follows 16 rows
// later); b_base[b]: the first weight tile of block b (chunk_bytes / 4 rows of 64 bytes).
template <class Tiles, int TT, int BB>
void tile_products(const std::uint8_t* a_base, std::int64_t a_stride,
                   const std::uint8_t* const* b_base, std::int64_t chunk0, std::int64_t chunks,
                   bool int8, std::int64_t chunk_bytes) {
  const std::int64_t b_step = chunk_bytes / 4 * kTileBytes;
  for (std::int64_t k = chunk0; k < chunk0 + chunks; ++k) {
    Tiles::template load<4>(a_base + k * chunk_bytes, a_stride);
    if constexpr (TT == 2)
      Tiles::template load<5>(a_base + 16 * a_stride + k * chunk_bytes, a_stride);
    Tiles::template load<6>(b_base[0] + k * b_step, kTileBytes);
    if constexpr (BB == 2) Tiles::template load<7>(b_base[1] + k * b_step, kTileBytes);
    if (int8) {
      Tiles::template dot_s8u8<0, 4, 6>();
      if constexpr (BB == 2) Tiles::template dot_s8u8<1, 4, 7>();
      if constexpr (TT == 2) Tiles::template dot_s8u8<2, 5, 6>();
      if constexpr (TT == 2 && BB == 2) Tiles::template dot_s8u8<3, 5, 7>();
    } else {
      Tiles::template dot_bf16<0, 4, 6>();
      if constexpr (BB == 2) Tiles::template dot_bf16<1, 4, 7>();
      if constexpr (TT == 2) Tiles::template dot_bf16<2, 5, 6>();
      if constexpr (TT == 2 && BB == 2) Tiles::template dot_bf16<3, 5, 7>();
    }
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

// The integer sums of quads [q0, q1) that do not fill a tile, with VPDPBUSD over the
// INT8-layout block `wb` (unsigned bytes): sums[t][row] += sum over the quads, t < tokens.
void add_tail_quads(const std::uint8_t* wb, const std::int8_t* xq, std::int64_t x_stride,
                    std::int64_t q0, std::int64_t q1, int tokens, std::int32_t (*sums)[kTileRows]) {
  if (q0 >= q1) return;
  for (int t = 0; t < tokens; ++t) {
    __m512i acc = _mm512_load_si512(sums[t]);
    for (std::int64_t k = q0; k < q1; ++k) {
      std::int32_t quad;
      std::memcpy(&quad, xq + t * x_stride + k * 4, 4);
      acc = _mm512_dpbusd_epi32(acc, _mm512_load_si512(wb + k * 64), _mm512_set1_epi32(quad));
    }
    _mm512_store_si512(sums[t], acc);
  }
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

// INT4 block -> INT8 layout with unsigned bytes 0..15, without the groups' headers: octet
// k's low nibbles are quad 2k, its high nibbles quad 2k + 1.
void widen_int4_block(const PackedMatrix& w, std::int64_t block, std::uint8_t* out) {
  const std::uint8_t* src = w.block(block);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const std::int64_t octets = w.cols_padded / 8, per_group = w.group / 8;
  for (std::int64_t g = 0, k = 0; k < octets; ++g) {
    const std::uint8_t* steps = src + w.int4_step_offset(g);  // past the group's header
    for (std::int64_t j = 0; j < per_group && k < octets; ++j, ++k) {
      const __m512i raw = _mm512_loadu_si512(steps + j * 64);
      _mm512_store_si512(out + (2 * k) * 64, _mm512_and_si512(raw, low));
      _mm512_store_si512(out + (2 * k + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low));
    }
  }
}

// Activation bytes per tile product: a whole tile row, or half of one where the activation
// groups are 32 columns (INT8's groups, INT4's of 32), so that no product crosses a group.
std::int64_t chunk_bytes_for(const PackedActivations& x) {
  if (x.format == PackedFormat::Bf16 || x.group % kTileBytes == 0 || x.group >= x.cols_padded)
    return kTileBytes;
  return kTileBytes / 2;
}

// INT8 and INT4 per group (x.group columns, whole or half tiles): the tile products of the
// group's chunks, the columns short of a tile with AVX-512, and one fused multiply-add per group
// into the float results by the activations' scale times the weights' (INT4 a second for its
// offset), as the other variants.
// `wbytes`: the first of the BB blocks in the INT8 layout, the next block after it (INT8: the
// packed blocks, with their headers; INT4: the blocks widened to bytes, without). `rows`: tokens
// per token tile, as configured (16, or fewer in one partial tile).
template <class Tiles, int TT, int BB>
void grouped_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                   const std::uint8_t* wbytes, std::int64_t t0, int rows, float* y,
                   std::int64_t y_stride) {
  Scratch& s = scratch();
  const bool int8 = w.format == PackedFormat::Int8;
  const std::int64_t quads = w.cols_padded / 4;
  const std::int64_t block_stride =
      int8 ? static_cast<std::int64_t>(w.block_bytes()) : w.cols_padded * kPackRows;
  const std::uint8_t* wb[2] = {wbytes, wbytes + block_stride};
  // Where quad q0 (the first of a group) starts in a block; the group's quads follow it.
  const auto quad_at = [&](std::int64_t q0) { return int8 ? w.int8_step_offset(q0) : q0 * 64; };
  const auto* xq = reinterpret_cast<const std::uint8_t*>(x.q.data() + t0 * x.cols_padded);
  const std::int64_t groups = x.groups();
  const std::int64_t quads_per_group = x.group / 4;
  const std::int64_t chunk_quads = chunk_bytes_for(x) / 4;
  for (int tt = 0; tt < TT; ++tt)
    for (int b = 0; b < BB; ++b)
      for (int t = 0; t < rows; ++t) _mm512_store_ps(s.results[tt][b][t], _mm512_setzero_ps());
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t q0 = g * quads_per_group;
    const std::int64_t q1 = std::min(quads, q0 + quads_per_group);
    const std::int64_t full = (q1 - q0) / chunk_quads;
    // The group's weights as if its quads started at quad 0: gw[b] + q * 64 is quad q.
    const std::uint8_t* gw[2] = {wb[0] + quad_at(q0) - q0 * 64, wb[1] + quad_at(q0) - q0 * 64};
    const std::uint8_t* first[2] = {gw[0] + q0 * 64, gw[1] + q0 * 64};
    zero_accumulators<Tiles, TT, BB>();
    tile_products<Tiles, TT, BB>(xq + q0 * 4, x.cols_padded, first, 0, full, true, chunk_quads * 4);
    store_accumulators<Tiles, TT, BB>(s.sums);
    for (int tt = 0; tt < TT; ++tt) {
      for (int b = 0; b < BB; ++b) {
        add_tail_quads(gw[b], x.q.data() + (t0 + tt * kTileRows) * x.cols_padded, x.cols_padded,
                       q0 + full * chunk_quads, q1, rows, s.sums[tt][b]);
        __m512 w_scale = _mm512_setzero_ps(), w_offset = _mm512_setzero_ps();
        if (int8) {
          w_scale = _mm512_cvtph_ps(_mm256_load_si256(
              reinterpret_cast<const __m256i*>(w.block(block + b) + w.int8_header_offset(g))));
        } else {
          const std::uint8_t* header = w.block(block + b) + w.int4_header_offset(g);
          w_scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header)));
          w_offset =
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(header + 32)));
        }
        for (int t = 0; t < rows; ++t) {
          const std::size_t at = static_cast<std::size_t>((t0 + tt * kTileRows + t) * groups + g);
          const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x.scale[at]));
          __m512i sums = _mm512_load_si512(s.sums[tt][b][t]);
          // INT8's stored bytes are w + 128: their offset times the activations' sum comes out.
          if (int8) sums = _mm512_add_epi32(sums, _mm512_set1_epi32(x.start[at]));
          __m512 result =
              _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sums), _mm512_load_ps(s.results[tt][b][t]));
          if (!int8) {
            result = _mm512_fmadd_ps(w_offset, _mm512_set1_ps(x.scaled_sum[at]), result);
          }
          _mm512_store_ps(s.results[tt][b][t], result);
        }
      }
    }
  }
  for (int tt = 0; tt < TT; ++tt) {
    for (int b = 0; b < BB; ++b) {
      const std::int64_t r0 = (block + b) * kPackRows;
      const std::int64_t out_rows = std::min(kPackRows, w.rows - r0);
      for (int t = 0; t < rows; ++t) {
        store_rows(y + (t0 + tt * kTileRows + t) * y_stride + r0,
                   _mm512_load_ps(s.results[tt][b][t]), out_rows);
      }
    }
  }
}

template <class Tiles, int TT, int BB>
void bf16_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                std::int64_t t0, int rows, float* y, std::int64_t y_stride) {
  Scratch& s = scratch();
  const std::int64_t pairs = w.cols_padded / 2;
  const std::int64_t chunks = pairs / kPairsPerTile;
  const std::uint8_t* wb[2] = {w.block(block), BB == 2 ? w.block(block + 1) : nullptr};
  const auto* xb = reinterpret_cast<const std::uint8_t*>(x.bf16.data() + t0 * x.cols_padded);
  zero_accumulators<Tiles, TT, BB>();
  tile_products<Tiles, TT, BB>(xb, x.cols_padded * 2, wb, 0, chunks, false, kTileBytes);
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

// TT token tiles of `rows` tokens from token t0 for the format of `w`.
template <class Tiles, int TT, int BB>
void format_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                  const std::uint8_t* widened, std::int64_t t0, int rows, float* y,
                  std::int64_t y_stride) {
  switch (w.format) {
    case PackedFormat::Int8:
      grouped_tiles<Tiles, TT, BB>(w, x, block, w.block(block), t0, rows, y, y_stride);
      break;
    case PackedFormat::Int4:
      grouped_tiles<Tiles, TT, BB>(w, x, block, widened, t0, rows, y, y_stride);
      break;
    case PackedFormat::Bf16:
      bf16_tiles<Tiles, TT, BB>(w, x, block, t0, rows, y, y_stride);
      break;
    case PackedFormat::Mxfp4:  // never tiled (tiles_apply)
      break;
  }
}

// `count` token tiles of `rows` tokens each from token t0 over the blocks from `block`, two
// tiles at a time.
template <class Tiles, int BB>
void token_tiles(const PackedMatrix& w, const PackedActivations& x, std::int64_t block,
                 const std::uint8_t* widened, std::int64_t t0, std::int64_t count, int rows,
                 float* y, std::int64_t y_stride) {
  std::int64_t tt = 0;
  for (; tt + 2 <= count; tt += 2)
    format_tiles<Tiles, 2, BB>(w, x, block, widened, t0 + tt * kTileRows, rows, y, y_stride);
  if (tt < count)
    format_tiles<Tiles, 1, BB>(w, x, block, widened, t0 + tt * kTileRows, rows, y, y_stride);
}

// The token tiles over blocks [block_begin, block_end), a pair of blocks at a time, under the
// tile configuration loaded for `rows`.
template <class Tiles>
void tiles_over_blocks(const PackedMatrix& w, const PackedActivations& x, std::int64_t block_begin,
                       std::int64_t block_end, std::int64_t t0, std::int64_t count, int rows,
                       float* y, std::int64_t y_stride) {
  Scratch& s = scratch();
  const bool int4 = w.format == PackedFormat::Int4;
  const std::size_t widened_bytes = static_cast<std::size_t>(2 * w.cols_padded * kPackRows);
  if (int4 && s.widened.size < widened_bytes) s.widened = AlignedBytes::allocate(widened_bytes);
  std::int64_t b = block_begin;
  for (; b + 2 <= block_end; b += 2) {
    if (int4) {
      widen_int4_block(w, b, s.widened.data.get());
      widen_int4_block(w, b + 1, s.widened.data.get() + widened_bytes / 2);
    }
    token_tiles<Tiles, 2>(w, x, b, s.widened.data.get(), t0, count, rows, y, y_stride);
  }
  if (b < block_end) {
    if (int4) widen_int4_block(w, b, s.widened.data.get());
    token_tiles<Tiles, 1>(w, x, b, s.widened.data.get(), t0, count, rows, y, y_stride);
  }
}

// INT8 and INT4 go through the tiles when their activation groups are whole or half tiles
// of columns (or one group holds the whole row), and the product has at least `min_tokens`.
bool tiles_apply(const PackedMatrix& w, const PackedActivations& x, std::int64_t min_tokens) {
  if (x.tokens < std::clamp<std::int64_t>(min_tokens, 1, kTileRows)) return false;
  // MXFP4 keeps its codes in nibbles that only the AVX-512 kernels read.
  if (w.format == PackedFormat::Mxfp4) return false;
  return w.format == PackedFormat::Bf16 || x.group % (kTileBytes / 2) == 0 ||
         x.group >= x.cols_padded;
}

// Whole tiles of 16 tokens, then the tokens after them in one partial tile where they are at
// least `min_tokens` (a second pass over the blocks under a configuration of that many rows:
// switching the configuration per pair of blocks would clear the tiles each time), else with
// AVX-512.
template <class Tiles>
void packed_matmul_tiles(const PackedMatrix& w, const PackedActivations& x, float* y,
                         std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end,
                         std::int64_t min_tokens) {
  if (!tiles_apply(w, x, min_tokens)) {
    packed_matmul_avx512(w, x, y, y_stride, block_begin, block_end);
    return;
  }
  const std::int64_t whole = x.tokens / kTileRows;
  const int rest = static_cast<int>(x.tokens % kTileRows);
  const bool partial = rest > 0 && rest >= min_tokens;
  const int chunk_bytes = static_cast<int>(chunk_bytes_for(x));
  if (whole > 0) {
    Tiles::configure(kernel_config(chunk_bytes, kTileRows));
    tiles_over_blocks<Tiles>(w, x, block_begin, block_end, 0, whole, kTileRows, y, y_stride);
  }
  if (partial) {
    Tiles::configure(kernel_config(chunk_bytes, rest));
    tiles_over_blocks<Tiles>(w, x, block_begin, block_end, whole * kTileRows, 1, rest, y, y_stride);
  }
  Tiles::release();
  if (!partial) {
    packed_matmul_avx512_tokens(w, x, y, y_stride, block_begin, block_end, whole * kTileRows,
                                x.tokens);
  }
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
