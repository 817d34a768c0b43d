// The AVX2 kernels of kernels/cpu/gguf/matmul.h for prompts: eight weight rows a tile,
// unpacked once and interleaved four codes by four, so that one 32-byte load holds the same four
// columns of every row; VPMADDUBSW against four activations broadcast, then VPMADDWD, gives the
// eight rows' partial dot products, one per lane, for up to six tokens per loaded vector. The
// sums run over gguf_scale_weights(w.dtype) weights, start from the activations' bias terms, and
// are converted once and scaled by the rows' group scales times the token's. Codes above 127
// (Q8_0's, IQ4_NL's and IQ4_XS's, whose bias is 128) would saturate VPMADDUBSW's pairs: those go
// in as the weights' magnitudes, their signs moved onto the activations (VPSIGNB). Also the AVX2
// unpackers the tiles start from.
#include "kernels/cpu/baseline_std.h"  // first: see there

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gguf/block_layout.h"
#include "kernels/cpu/gguf/iq_groups.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/gguf/simd_pieces.h"

namespace tandem::kernels {
namespace {

constexpr int kRows = 8;    // a tile's rows: one 32-bit lane each
constexpr int kTokens = 6;  // tokens a loaded vector serves: 2 x 6 sums and results, 16 registers

// A tile: [cols / 4][8 rows][4] codes (signed weights where `is_signed`), and per `group`
// weights [cols / group][8 rows] scales and offsets.
struct Tile8 {
  int group = 16;
  bool is_signed = false;
  std::vector<std::uint8_t> codes;
  std::vector<float> scale, offset;
};

// 8 rows of 8 32-bit values (row r at src + r * stride bytes) into 8 columns of 8, column c
// at dst + 32 c.
void transpose8(const std::uint8_t* src, std::int64_t stride, std::uint8_t* dst) {
  __m256i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * stride));
  for (int i = 0; i < 8; i += 2) {  // per 128-bit lane: pairs of rows interleaved
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // u[i + j]: rows i .. i + 3 of columns j and j + 4
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * j),
                        _mm256_permute2x128_si256(u[j], u[4 + j], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * (j + 4)),
                        _mm256_permute2x128_si256(u[j], u[4 + j], 0x31));
  }
}

// T tokens from t0 times a tile, groups of G weights: out[t * 8 + r]. VPMADDUBSW's 16-bit
// pair sums of kAdd16 steps are added before VPMADDWD widens them: codes of at most 31 keep
// four steps' sums within 16 bits (4 x 2 x 31 x 127), of at most 63 two.
template <int T, int G, bool kSigned, int kAdd16>
void tokens8(const Tile8& tile, bool has_offset, const GgufQuantizedActivations& a, std::int64_t t0,
             float* out) {
  constexpr int kSteps = G / 4, kHalves = G / 16;
  const std::int64_t k = a.cols, groups16 = k / 16, groups = k / G;
  const std::int8_t* q[T];
  const float* as[T];
  const float* asum[T];
  const std::int32_t* bias[T];
  for (int t = 0; t < T; ++t) {
    q[t] = a.values.data() + (t0 + t) * k;
    as[t] = a.scale.data() + (t0 + t) * groups16;
    asum[t] = a.scaled_sum.data() + (t0 + t) * groups16;
    bias[t] = a.group_bias.data() + (t0 + t) * groups16;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const std::uint8_t* codes = tile.codes.data();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i sums[T];
    for (int t = 0; t < T; ++t) {
      // Signed weights need no bias term; the codes' is the activations' group term.
      std::int32_t start = 0;
      if constexpr (!kSigned)
        for (int h = 0; h < kHalves; ++h) start += bias[t][g * kHalves + h];
      sums[t] = _mm256_set1_epi32(start);
    }
    for (int s = 0; s < kSteps; s += kAdd16) {
      const std::int64_t col = g * kSteps + s;
      __m256i w[kAdd16], u[kAdd16];
      for (int j = 0; j < kAdd16; ++j) {
        w[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * (col + j)));
        u[j] = kSigned ? _mm256_abs_epi8(w[j]) : w[j];
      }
      for (int t = 0; t < T; ++t) {
        __m256i pairs = _mm256_setzero_si256();
        for (int j = 0; j < kAdd16; ++j) {
          std::int32_t four;
          std::memcpy(&four, q[t] + 4 * (col + j), 4);
          __m256i x = _mm256_set1_epi32(four);
          if constexpr (kSigned) x = _mm256_sign_epi8(x, w[j]);
          const __m256i p = _mm256_maddubs_epi16(u[j], x);
          pairs = j == 0 ? p : _mm256_add_epi16(pairs, p);
        }
        sums[t] = _mm256_add_epi32(sums[t], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 ws = _mm256_loadu_ps(tile.scale.data() + kRows * g);
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t]),
                               _mm256_mul_ps(ws, _mm256_set1_ps(as[t][g * kHalves])), acc[t]);
    }
    if (has_offset) {
      const __m256 wo = _mm256_loadu_ps(tile.offset.data() + kRows * g);
      for (int t = 0; t < T; ++t) {
        float sum = 0.0f;
        for (int h = 0; h < kHalves; ++h) sum += asum[t][g * kHalves + h];
        acc[t] = _mm256_fmadd_ps(wo, _mm256_set1_ps(sum), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(out + kRows * t, acc[t]);
}

template <int G, bool kSigned, int kAdd16>
void all_tokens(const Tile8& tile, bool has_offset, const GgufQuantizedActivations& a,
                std::int64_t m, int rows, std::int64_t first_row, float* y, std::int64_t y_stride) {
  alignas(32) float out[kTokens * kRows];
  for (std::int64_t t0 = 0; t0 < m; t0 += kTokens) {
    const std::int64_t n = std::min<std::int64_t>(kTokens, m - t0);
    switch (n) {
#define TANDEM_TOKENS8(c)                                         \
  case c:                                                         \
    tokens8<c, G, kSigned, kAdd16>(tile, has_offset, a, t0, out); \
    break;
      TANDEM_TOKENS8(1)
      TANDEM_TOKENS8(2)
      TANDEM_TOKENS8(3)
      TANDEM_TOKENS8(4)
      TANDEM_TOKENS8(5)
      TANDEM_TOKENS8(6)
#undef TANDEM_TOKENS8
      default:
        break;
    }
    for (std::int64_t t = 0; t < n; ++t)
      std::memcpy(y + (t0 + t) * y_stride + first_row, out + kRows * t,
                  static_cast<std::size_t>(rows) * 4);
  }
}

void tile_product8(const WeightMatrix& w, std::int64_t first_row, const GgufQuantizedActivations& a,
                   std::int64_t m, float* y, std::int64_t y_stride) {
  const std::int64_t k = w.cols, groups16 = k / 16;
  const int bias = gguf_code_bias(w.dtype);
  thread_local GgufUnpackedRows unpacked;
  thread_local Tile8 tile;
  const int rows = gguf_unpack_tile(w, first_row, kRows, unpacked, CpuVariant::Avx2);
  tile.is_signed = bias >= 128;
  if (tile.is_signed) {  // the weights themselves: codes less 128, a sign flip
    for (auto& c : unpacked.codes) c = static_cast<std::uint8_t>(c ^ 0x80);
  }
  tile.group = gguf_scale_weights(w.dtype);
  const std::int64_t groups = k / tile.group, halves = tile.group / 16;
  tile.codes.resize(static_cast<std::size_t>(kRows * k));
  tile.scale.resize(static_cast<std::size_t>(kRows * groups));
  tile.offset.resize(static_cast<std::size_t>(kRows * groups));
  // k is a multiple of 32: 32 columns (8 four-code units) of the 8 rows at a time.
  for (std::int64_t c = 0; c < k; c += 32)
    transpose8(unpacked.codes.data() + c, k, tile.codes.data() + c * kRows);
  const bool has_offset = bias == 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    for (int r = 0; r < kRows; ++r) {
      const std::size_t from = static_cast<std::size_t>(r * groups16 + g * halves);
      tile.scale[static_cast<std::size_t>(kRows * g + r)] = unpacked.scale[from];
      tile.offset[static_cast<std::size_t>(kRows * g + r)] = unpacked.offset[from];
    }
  }
  // Steps whose 16-bit sums add up before widening (see tokens8).
  const int max_code = gguf_max_code(w.dtype);
  const int add16 = tile.is_signed ? 1 : max_code <= 31 ? 4 : max_code <= 63 ? 2 : 1;
  const auto run = [&]<int G>() {
    if (tile.is_signed)
      all_tokens<G, true, 1>(tile, has_offset, a, m, rows, first_row, y, y_stride);
    else if (add16 == 4)
      all_tokens<G, false, 4>(tile, has_offset, a, m, rows, first_row, y, y_stride);
    else if (add16 == 2)
      all_tokens<G, false, 2>(tile, has_offset, a, m, rows, first_row, y, y_stride);
    else
      all_tokens<G, false, 1>(tile, has_offset, a, m, rows, first_row, y, y_stride);
  };
  if (tile.group == 32)
    run.template operator()<32>();
  else
    run.template operator()<16>();
}

}  // namespace

void gguf_matmul_tiles_avx2(const WeightMatrix& w, std::int64_t row_begin, std::int64_t row_end,
                            const GgufQuantizedActivations& a, std::int64_t m, float* y,
                            std::int64_t y_stride) {
  for (std::int64_t first = row_begin; first < row_end; first += kRows)
    tile_product8(w, first, a, m, y, y_stride);
}

void gguf_quantize_row_avx2(const float* x, std::int64_t k, int bias, std::int8_t* q, float* scale,
                            float* scaled_sum, std::int32_t* group_bias) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // VPACKSSDW and VPACKSSWB interleave their two sources per 128-bit lane: this puts the 32
  // values back in order (each 32-bit unit holds four consecutive ones after the packs).
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const auto sum8 = [](__m256i v) {
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1)));
  };
  for (std::int64_t b = 0; b < k; b += 32) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b + 8 * i);
    __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    // Rounded to nearest even, as nearbyint in the default rounding mode.
    __m256i r[4];
    for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse));
    const __m256i words = _mm256_packs_epi32(r[0], r[1]), words2 = _mm256_packs_epi32(r[2], r[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b), bytes);
    const int s0 = sum8(_mm256_add_epi32(r[0], r[1])), s1 = sum8(_mm256_add_epi32(r[2], r[3]));
    scale[b / 16] = scale[b / 16 + 1] = d;
    scaled_sum[b / 16] = d * static_cast<float>(s0);
    scaled_sum[b / 16 + 1] = d * static_cast<float>(s1);
    group_bias[b / 16] = -bias * s0;
    group_bias[b / 16 + 1] = -bias * s1;
  }
}

}  // namespace tandem::kernels

namespace tandem::kernels {
namespace {

using gguf_simd::half;

void pair(float* s, float* o, float scale, float offset) {
  s[0] = s[1] = scale;
  o[0] = o[1] = offset;
}

__m256i load32(const std::uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
void store32(std::uint8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
__m128i load16(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Bytes' high nibbles, low nibbles: AVX2 has no byte shifts, so 16-bit ones and a mask.
__m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
__m256i low_nibbles(__m256i v) {
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

void q8_0_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t i = 0; i < blocks; ++i, b += 34, u += 32, s += 2, o += 2) {
    store32(u, _mm256_xor_si256(load32(b + 2), flip));
    pair(s, o, half(b), 0.0f);
  }
}

void q4_0_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  for (std::int64_t i = 0; i < blocks; ++i, b += 18, u += 32, s += 2, o += 2) {
    const __m128i q = load16(b + 2);
    const __m128i mask = _mm_set1_epi8(0x0F);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u), _mm_and_si128(q, mask));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 16), _mm_and_si128(_mm_srli_epi16(q, 4), mask));
    pair(s, o, half(b), 0.0f);
  }
}

using gguf_layout::k_scale_min;

void q45_k_row(const std::uint8_t* b, std::int64_t blocks, bool five, std::uint8_t* u, float* s,
               float* o) {
  const std::int64_t size = five ? 176 : 144;
  for (std::int64_t i = 0; i < blocks; ++i, b += size, u += 256, s += 16, o += 16) {
    const float d = half(b), dmin = half(b + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      k_scale_min(b + 4, j, &sc, &mn);
      pair(s + 2 * j, o + 2 * j, d * static_cast<float>(sc), -dmin * static_cast<float>(mn));
    }
    const std::uint8_t* qs = b + (five ? 48 : 16);
    const __m256i qh = five ? load32(b + 16) : _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load32(qs + 32 * p);
      __m256i lo = low_nibbles(q), hi = high_nibbles(q);
      if (five) {
        gguf_simd::q5_k_fifth_bits(qh, p, lo, hi);
      }
      store32(u + 64 * p, lo);
      store32(u + 64 * p + 32, hi);
    }
  }
}

// IQ4_NL's and IQ4_XS's levels plus 128.
__m128i iq4_codes() {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf_layout::kIq4Codes.data()));
}

// Q4_1, Q5_0, Q5_1 and IQ4_NL: a block's 16 bytes of nibbles are weights j (low) and j + 16
// (high); Q5's fifth bits (bit j of a 32-bit word for weight j) add 16, IQ4_NL's nibbles
// index its levels plus 128.
template <gguf_layout::NibbleFormat F>
void nibble_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i levels = iq4_codes();
  for (std::int64_t i = 0; i < blocks; ++i, b += F.bytes, u += 32, s += 2, o += 2) {
    const __m128i q = load16(b + F.codes);
    __m128i lo = _mm_and_si128(q, low4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), low4);
    if (F.levels) {
      lo = _mm_shuffle_epi8(levels, lo);
      hi = _mm_shuffle_epi8(levels, hi);
    }
    __m256i codes = _mm256_set_m128i(hi, lo);
    if (F.fifth >= 0) {
      std::uint32_t qh;
      std::memcpy(&qh, b + F.fifth, 4);
      codes = _mm256_or_si256(codes,
                              _mm256_and_si256(gguf_simd::byte_mask(qh), _mm256_set1_epi8(0x10)));
    }
    store32(u, codes);
    pair(s, o, half(b), F.minimum ? half(b + 2) : 0.0f);
  }
}

// Q2_K: each 32 bytes of a half block hold four runs of 32 weights, two bits each; a 4-bit
// scale (times d) and minimum (times -dmin) per 16 weights.
void q2_k_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i three = _mm256_set1_epi8(3);
  for (std::int64_t i = 0; i < blocks; ++i, b += 84, u += 256, s += 16, o += 16) {
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(b + 16 + 32 * h);
      for (int j = 0; j < 4; ++j)
        store32(u + 128 * h + 32 * j, _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three));
    }
    const __m128i packed = load16(b);
    const __m256 d = _mm256_set1_ps(half(b + 80)), minus_dmin = _mm256_set1_ps(-half(b + 82));
    for (int e = 0; e < 2; ++e) {
      const __m256i v = _mm256_cvtepu8_epi32(e == 0 ? packed : _mm_srli_si128(packed, 8));
      _mm256_storeu_ps(
          s + 8 * e,
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x0F))), d));
      _mm256_storeu_ps(o + 8 * e,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), minus_dmin));
    }
  }
}

// Q3_K: Q2_K's two low bits, the third from bit 4 h + j of the 32 mask bytes for run j of
// half h (codes 0..7, bias 4); a signed 6-bit scale (times d) per 16 weights.
void q3_k_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i three = _mm256_set1_epi8(3);
  for (std::int64_t i = 0; i < blocks; ++i, b += 110, u += 256, s += 16, o += 16) {
    const __m256i mask = load32(b);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load32(b + 32 + 32 * h);
      for (int j = 0; j < 4; ++j)
        store32(u + 128 * h + 32 * j,
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three),
                                gguf_simd::move_bit(mask, 4 * h + j, 2)));
    }
    std::uint32_t words[4];
    gguf_layout::q3_k_scales(b + 96, words);
    const __m128i scales =
        _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words)), _mm_set1_epi8(32));
    const __m256 d = _mm256_set1_ps(half(b + 108));
    for (int e = 0; e < 2; ++e) {
      const __m256i v = _mm256_cvtepi8_epi32(e == 0 ? scales : _mm_srli_si128(scales, 8));
      _mm256_storeu_ps(s + 8 * e, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
      _mm256_storeu_ps(o + 8 * e, _mm256_setzero_ps());
    }
  }
}

// IQ4_XS: eight sub-blocks of 32, their nibbles as IQ4_NL's; a 6-bit scale each, its low four
// bits in bytes 4..7 and high two in the 16-bit word at 2, less 32, times d.
void iq4_xs_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i levels = _mm256_broadcastsi128_si256(iq4_codes());
  for (std::int64_t i = 0; i < blocks; ++i, b += 136, u += 256, s += 16, o += 16) {
    const float d = half(b);
    std::uint16_t high;
    std::memcpy(&high, b + 2, 2);
    for (int sub = 0; sub < 8; ++sub) {
      const int low = (b[4 + sub / 2] >> (4 * (sub % 2))) & 0x0F;
      pair(s + 2 * sub, o + 2 * sub,
           d * static_cast<float>((low | (((high >> (2 * sub)) & 3) << 4)) - 32), 0.0f);
    }
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low 128 bits) and 2p + 1 (high)
      const __m256i q = load32(b + 8 + 32 * p);
      const __m256i lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(q, low4));
      const __m256i hi = _mm256_shuffle_epi8(levels, high_nibbles(q));
      store32(u + 64 * p, _mm256_permute2x128_si256(lo, hi, 0x20));
      store32(u + 64 * p + 32, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

void q6_k_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  const __m256i three = _mm256_set1_epi8(3);
  for (std::int64_t i = 0; i < blocks; ++i, b += 210, u += 256, s += 16, o += 16) {
    const float d = half(b + 208);
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
    for (int g = 0; g < 16; ++g) {
      s[g] = d * static_cast<float>(scales[g]);
      o[g] = 0.0f;
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32);
      const __m256i hb = load32(b + 128 + 32 * h);
      // ((hb >> shift) & 3) << 4, kept within each byte.
      auto top = [&](int shift) {
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, shift), three), 4);
      };
      std::uint8_t* out = u + 128 * h;
      store32(out, _mm256_or_si256(low_nibbles(l0), top(0)));
      store32(out + 32, _mm256_or_si256(low_nibbles(l1), top(2)));
      store32(out + 64, _mm256_or_si256(high_nibbles(l0), top(4)));
      store32(out + 96, _mm256_or_si256(high_nibbles(l1), top(6)));
    }
  }
}

}  // namespace

// The IQ1 ... IQ3 formats (gguf/iq_groups.h), 32 codes a step from four groups: the grid
// magnitudes plus the format's bias, less twice them where the sign bit is set; IQ1's 8 (g + 1)
// plus 2 in the groups shifted by +1/8. The scalar unpackers' codes, scales and offsets.
template <class F>
void iq_row(const std::uint8_t* b, std::int64_t blocks, std::uint8_t* u, float* s, float* o) {
  gguf_iq::BlockSteps<F> steps;
  for (std::int64_t i = 0; i < blocks; ++i, b += F::kBytes, u += 256, s += 16, o += 16) {
    F::scales(b, s);
    for (int g = 0; g < 16; ++g) o[g] = 0.0f;
    steps.block(b);
    for (int step = 0; step < 8; ++step) {
      __m256i mask;
      const __m256i m = steps.magnitudes(step, &mask);
      __m256i codes;
      if constexpr (F::kIq1) {  // 8 (g + 1), plus 2 where the shift is +1/8
        codes = _mm256_add_epi8(_mm256_add_epi8(gguf_iq::times8(m), _mm256_set1_epi8(8)),
                                _mm256_and_si256(mask, _mm256_set1_epi8(2)));
      } else {
        const __m256i biased = _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(F::kBias)), m);
        codes = _mm256_sub_epi8(biased, _mm256_and_si256(_mm256_add_epi8(m, m), mask));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * step), codes);
    }
  }
}

bool gguf_unpack_row_avx2(const WeightMatrix& w, std::int64_t r, GgufUnpackedRows& out, int slot) {
  const DTypeBlock block = dtype_block(w.dtype);
  const auto* b = static_cast<const std::uint8_t*>(w.data) + dtype_bytes(w.dtype, r * w.cols);
  std::uint8_t* u = out.codes.data() + slot * w.cols;
  float* s = out.scale.data() + slot * w.cols / 16;
  float* o = out.offset.data() + slot * w.cols / 16;
  const std::int64_t blocks = w.cols / block.elements;
  switch (w.dtype) {
    case DType::Q8_0:
      q8_0_row(b, blocks, u, s, o);
      return true;
    case DType::Q4_0:
      q4_0_row(b, blocks, u, s, o);
      return true;
    case DType::Q4_1:
      nibble_row<gguf_layout::kQ4_1>(b, blocks, u, s, o);
      return true;
    case DType::Q5_0:
      nibble_row<gguf_layout::kQ5_0>(b, blocks, u, s, o);
      return true;
    case DType::Q5_1:
      nibble_row<gguf_layout::kQ5_1>(b, blocks, u, s, o);
      return true;
    case DType::IQ4_NL:
      nibble_row<gguf_layout::kIq4Nl>(b, blocks, u, s, o);
      return true;
    case DType::IQ4_XS:
      iq4_xs_row(b, blocks, u, s, o);
      return true;
    case DType::Q2_K:
      q2_k_row(b, blocks, u, s, o);
      return true;
    case DType::Q3_K:
      q3_k_row(b, blocks, u, s, o);
      return true;
    case DType::Q4_K:
      q45_k_row(b, blocks, false, u, s, o);
      return true;
    case DType::Q5_K:
      q45_k_row(b, blocks, true, u, s, o);
      return true;
    case DType::Q6_K:
      q6_k_row(b, blocks, u, s, o);
      return true;
    case DType::IQ2_XXS:
      iq_row<gguf_iq::Iq2xxs>(b, blocks, u, s, o);
      return true;
    case DType::IQ2_XS:
      iq_row<gguf_iq::Iq2xs>(b, blocks, u, s, o);
      return true;
    case DType::IQ2_S:
      iq_row<gguf_iq::Iq2s>(b, blocks, u, s, o);
      return true;
    case DType::IQ3_XXS:
      iq_row<gguf_iq::Iq3xxs>(b, blocks, u, s, o);
      return true;
    case DType::IQ3_S:
      iq_row<gguf_iq::Iq3s>(b, blocks, u, s, o);
      return true;
    case DType::IQ1_S:
      iq_row<gguf_iq::Iq1s>(b, blocks, u, s, o);
      return true;
    case DType::IQ1_M:
      iq_row<gguf_iq::Iq1m>(b, blocks, u, s, o);
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::kernels
