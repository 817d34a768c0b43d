// The AVX-512 (VNNI) kernel of kernels/cpu/gguf/matmul.h. Sixteen weight rows are unpacked
// and interleaved four codes by four, so that one 64-byte load holds the same four columns
// of every row: VPDPBUSD against four activations broadcast gives sixteen rows' partial dot
// products, one per lane. Four such steps make a 16-weight group (eight a 32-weight one, for
// the formats whose scale covers 32 weights), whose sums start from the activations' bias
// term, are converted once, scaled by the sixteen rows' group scales times the activation's
// scale, and added; up to twelve tokens share each loaded weight vector.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gguf/matmul.h"

namespace tandem::kernels {
namespace {

constexpr int kTile = 16;

// A tile's codes, and its scales and offsets per `group` weights (gguf_scale_weights: 32 where
// the format's 16-weight groups come in equal pairs, which halves the float work per token).
struct Tile {
  int group = 16;
  std::vector<std::uint8_t> codes;  // [cols / 4][16 rows][4]
  std::vector<float> scale;         // [cols / group][16 rows]
  std::vector<float> offset;        // [cols / group][16 rows]
};

// T tokens' activations interleaved per group of 16 or 32 values, [groups][T][group] values
// and [groups][T] scales, sums and bias terms: the kernel walks one pointer for all T tokens
// (twelve tokens' own pointers would not fit the registers).
struct TokenBlock {
  std::int64_t first = 0, count = 0, offset = 0;  // tokens first .. first + count - 1
};
struct InterleavedTokens {
  std::uint64_t stamp = 0;  // of the activations they hold
  std::int64_t m = 0;
  int group = 0;
  std::vector<TokenBlock> blocks;
  std::vector<std::int8_t> q;
  std::vector<float> scale, scaled_sum;
  std::vector<std::int32_t> bias;
};

// Up to twelve tokens a block: 12, 8, 4, 3, 2 or 1. A group of 32 takes its two 16-value
// halves' sums and bias terms added (their scale is the 32-block's).
void interleave(const GgufQuantizedActivations& a, std::int64_t m, int group,
                InterleavedTokens& out) {
  // An expert's tasks each take a few tiles of its gate and up products: one copy for all.
  if (out.stamp == a.stamp && out.m == m && out.group == group) return;
  out.stamp = a.stamp;
  out.m = m;
  out.group = group;
  const std::int64_t k = a.cols, groups = k / group, halves = group / 16;
  out.blocks.clear();
  out.q.resize(static_cast<std::size_t>(m * k));
  out.scale.resize(static_cast<std::size_t>(m * groups));
  out.scaled_sum.resize(out.scale.size());
  out.bias.resize(out.scale.size());
  for (std::int64_t i = 0; i < m;) {
    const std::int64_t n = m - i >= 12 ? 12 : m - i >= 8 ? 8 : std::min<std::int64_t>(4, m - i);
    const std::int64_t at = i * groups;  // in groups
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int8_t* values = a.values.data() + (i + t) * k;
      const std::size_t row = static_cast<std::size_t>((i + t) * (k / 16));
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::size_t from = row + static_cast<std::size_t>(g * halves);
        const auto to = static_cast<std::size_t>(at + g * n + t);
        // 16 bytes at a time: a copy of a size known only at run time is a call to memmove.
        for (std::int64_t h = 0; h < halves; ++h)
          std::memcpy(out.q.data() + group * to + 16 * h, values + g * group + 16 * h, 16);
        out.scale[to] = a.scale[from];
        float sum = a.scaled_sum[from];
        std::int32_t bias = a.group_bias[from];
        if (halves == 2) {
          sum += a.scaled_sum[from + 1];
          bias += a.group_bias[from + 1];
        }
        out.scaled_sum[to] = sum;
        out.bias[to] = bias;
      }
    }
    out.blocks.push_back({i, n, at});
    i += n;
  }
}

// The next tile's blocks, fetched towards L2 a slice per group while this tile computes, so
// that its unpacking does not wait on memory.
struct Prefetch {
  const char* next = nullptr;
  std::int64_t bytes_per_group = 0;
};

// acc += VPDPBUSD of `codes` with the four activations at `four` broadcast, the broadcast
// read by the instruction itself and the accumulator tied to its register: GCC 12 otherwise
// broadcasts into a register of its own and, with twelve tokens' sums live, copies every
// sum once per step (a third of the kernel's instructions were such moves).
inline __attribute__((always_inline)) __m512i dpbusd_broadcast(__m512i acc, __m512i codes,
                                                               const std::int8_t* four) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(codes), "m"(*reinterpret_cast<const std::int32_t*>(four)));
  return acc;
}

template <int T, int G>
void tokens(const Tile& tile, bool has_offset, std::int64_t groups, const InterleavedTokens& in,
            std::int64_t at, Prefetch ahead, float* out) {
  constexpr int kSteps = G / 4;  // four-code steps per group
  const std::int8_t* q = in.q.data() + G * at;
  const float* as = in.scale.data() + at;
  const float* asum = in.scaled_sum.data() + at;
  const std::int32_t* bias = in.bias.data() + at;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const std::uint8_t* codes = tile.codes.data();
  const char* fetch = ahead.next;
  for (std::int64_t g = 0; g < groups; ++g, q += G * T, as += T, asum += T, bias += T) {
    if (fetch != nullptr) {
      for (const char* end = ahead.next + (g + 1) * ahead.bytes_per_group; fetch < end; fetch += 64)
        _mm_prefetch(fetch, _MM_HINT_T1);
    }
    __m512i sums[T];
    for (int t = 0; t < T; ++t) sums[t] = _mm512_set1_epi32(bias[t]);
#pragma GCC unroll 8
    for (int s = 0; s < kSteps; ++s) {
      const __m512i wv = _mm512_loadu_si512(codes + (kSteps * g + s) * 64);
      for (int t = 0; t < T; ++t) sums[t] = dpbusd_broadcast(sums[t], wv, q + G * t + 4 * s);
    }
    const __m512 sv = _mm512_loadu_ps(tile.scale.data() + 16 * g);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[t]),
                               _mm512_mul_ps(sv, _mm512_set1_ps(as[t])), acc[t]);
    if (has_offset) {
      const __m512 ov = _mm512_loadu_ps(tile.offset.data() + 16 * g);
      for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(ov, _mm512_set1_ps(asum[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

template <int G>
void token_block(const Tile& tile, bool has_offset, std::int64_t groups,
                 const InterleavedTokens& in, const TokenBlock& b, Prefetch ahead, float* out) {
  switch (b.count) {
    case 12:
      tokens<12, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
    case 8:
      tokens<8, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
    case 4:
      tokens<4, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
    case 3:
      tokens<3, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
    case 2:
      tokens<2, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
    default:
      tokens<1, G>(tile, has_offset, groups, in, b.offset, ahead, out);
      break;
  }
}

// Transposes 16 rows of 16 32-bit values (row r at src + r * stride bytes) into 16 columns
// of 16 values, column c at dst + c * 64 bytes.
void transpose16(const std::uint8_t* src, std::int64_t stride, std::uint8_t* dst) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * stride);
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: pairs of rows interleaved
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  __m512i u[4][4];  // u[R][j]: lane l holds rows 4R..4R+3 of column 4l + j
  for (int R = 0; R < 4; ++R) {
    const __m512i* q = t + 4 * R;
    u[R][0] = _mm512_unpacklo_epi64(q[0], q[2]);
    u[R][1] = _mm512_unpackhi_epi64(q[0], q[2]);
    u[R][2] = _mm512_unpacklo_epi64(q[1], q[3]);
    u[R][3] = _mm512_unpackhi_epi64(q[1], q[3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[0][j], u[1][j], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(u[0][j], u[1][j], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[2][j], u[3][j], 0x44);
    const __m512i d = _mm512_shuffle_i32x4(u[2][j], u[3][j], 0xEE);
    _mm512_storeu_si512(dst + (0 + j) * 64, _mm512_shuffle_i32x4(a, c, 0x88));
    _mm512_storeu_si512(dst + (4 + j) * 64, _mm512_shuffle_i32x4(a, c, 0xDD));
    _mm512_storeu_si512(dst + (8 + j) * 64, _mm512_shuffle_i32x4(b, d, 0x88));
    _mm512_storeu_si512(dst + (12 + j) * 64, _mm512_shuffle_i32x4(b, d, 0xDD));
  }
}

// [16 rows][n] floats into [n][16 rows].
void transpose_floats(const float* src, std::int64_t n, float* dst) {
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    transpose16(reinterpret_cast<const std::uint8_t*>(src + c), n * 4,
                reinterpret_cast<std::uint8_t*>(dst + c * 16));
  for (; c < n; ++c)
    for (int r = 0; r < 16; ++r) dst[c * 16 + r] = src[r * n + c];
}

// [16 rows][2 n] floats, equal in pairs, into [n][16 rows]: the first of each pair.
void transpose_float_pairs(const float* src, std::int64_t n, float* dst) {
  const __m512i firsts =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  alignas(64) float rows[16 * 16];
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int r = 0; r < 16; ++r) {
      const float* from = src + r * 2 * n + 2 * c;
      _mm512_store_ps(rows + 16 * r, _mm512_permutex2var_ps(_mm512_loadu_ps(from), firsts,
                                                            _mm512_loadu_ps(from + 16)));
    }
    transpose16(reinterpret_cast<const std::uint8_t*>(rows), 64,
                reinterpret_cast<std::uint8_t*>(dst + c * 16));
  }
  for (; c < n; ++c)
    for (int r = 0; r < 16; ++r) dst[c * 16 + r] = src[r * 2 * n + 2 * c];
}

void tile_product(const WeightMatrix& w, std::int64_t first_row, const InterleavedTokens& in,
                  Prefetch ahead, float* y, std::int64_t y_stride) {
  const std::int64_t k = w.cols;
  const int bias = gguf_code_bias(w.dtype);
  thread_local GgufUnpackedRows unpacked;
  thread_local Tile tile;
  const int rows = gguf_unpack_tile(w, first_row, kTile, unpacked, CpuVariant::Avx512);
  tile.group = in.group;
  const std::int64_t groups = k / tile.group;
  tile.codes.resize(static_cast<std::size_t>(kTile * k));
  tile.scale.resize(static_cast<std::size_t>(kTile * groups));
  tile.offset.resize(static_cast<std::size_t>(kTile * groups));
  // Four codes of each row side by side: 64 columns (16 four-code units) of the 16 rows
  // transposed at a time; k is a multiple of 32, so a last half unit of 32 goes alone.
  std::int64_t c = 0;
  for (; c + 64 <= k; c += 64)
    transpose16(unpacked.codes.data() + c, k, tile.codes.data() + c * 16);
  for (; c < k; c += 4)
    for (int r = 0; r < kTile; ++r)
      std::memcpy(tile.codes.data() + c * 16 + 4 * r, unpacked.codes.data() + r * k + c, 4);
  const bool has_offset = bias == 0;
  const auto floats = tile.group == 32 ? transpose_float_pairs : transpose_floats;
  floats(unpacked.scale.data(), groups, tile.scale.data());
  if (has_offset) floats(unpacked.offset.data(), groups, tile.offset.data());

  alignas(64) float out[12 * kTile];
  for (const TokenBlock& b : in.blocks) {
    if (tile.group == 32)
      token_block<32>(tile, has_offset, groups, in, b, ahead, out);
    else
      token_block<16>(tile, has_offset, groups, in, b, ahead, out);
    ahead = {};  // the first block fetches it all
    for (std::int64_t t = 0; t < b.count; ++t)
      std::memcpy(y + (b.first + t) * y_stride + first_row, out + 16 * t,
                  static_cast<std::size_t>(rows) * 4);
  }
}

}  // namespace

void gguf_matmul_tiles_avx512(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                              const GgufQuantizedActivations& a, std::int64_t m, float* y,
                              std::int64_t y_stride, GgufRowsAhead ahead) {
  thread_local InterleavedTokens in;
  interleave(a, m, gguf_scale_weights(w.dtype), in);
  const std::int64_t groups = w.cols / in.group;
  // The next tile's bytes, spread over this tile's groups.
  auto fetch = [groups](const WeightMatrix& next, std::int64_t row, std::int64_t row_end) {
    const std::int64_t rows = std::min<std::int64_t>(kTile, row_end - row);
    return Prefetch{
        static_cast<const char*>(next.data) + dtype_bytes(next.dtype, row * next.cols),
        static_cast<std::int64_t>(dtype_bytes(next.dtype, rows * next.cols)) / groups + 1};
  };
  for (std::int64_t first = row_begin; first < row_end; first += kTile) {
    Prefetch next;
    if (first + kTile < row_end)
      next = fetch(w, first + kTile, row_end);
    else if (ahead.w != nullptr && ahead.row < ahead.w->rows)
      next = fetch(*ahead.w, ahead.row, ahead.w->rows);
    tile_product(w, first, in, next, y, y_stride);
  }
}

}  // namespace tandem::kernels
