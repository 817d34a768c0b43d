#include "kernels/cpu/dtype.h"

#include <immintrin.h>

#include <array>
#include <cmath>
#include <limits>

#include "kernels/cpu/gguf/blocks.h"
#include "kernels/cpu/isa.h"

namespace tandem::kernels {
namespace {

// The GGUF block formats: ggml's number and name, and the weights and bytes of one block.
struct GgufFormat {
  DType dtype;
  std::uint32_t ggml_type;
  std::string_view name;
  DTypeBlock block;
};
constexpr GgufFormat kGgufFormats[] = {
    {DType::Q4_0, 2, "Q4_0", {32, 18}},         {DType::Q4_1, 3, "Q4_1", {32, 20}},
    {DType::Q5_0, 6, "Q5_0", {32, 22}},         {DType::Q5_1, 7, "Q5_1", {32, 24}},
    {DType::Q8_0, 8, "Q8_0", {32, 34}},         {DType::Q2_K, 10, "Q2_K", {256, 84}},
    {DType::Q3_K, 11, "Q3_K", {256, 110}},      {DType::Q4_K, 12, "Q4_K", {256, 144}},
    {DType::Q5_K, 13, "Q5_K", {256, 176}},      {DType::Q6_K, 14, "Q6_K", {256, 210}},
    {DType::IQ4_NL, 20, "IQ4_NL", {32, 18}},    {DType::IQ4_XS, 23, "IQ4_XS", {256, 136}},
    {DType::IQ2_XXS, 16, "IQ2_XXS", {256, 66}}, {DType::IQ2_XS, 17, "IQ2_XS", {256, 74}},
    {DType::IQ2_S, 22, "IQ2_S", {256, 82}},     {DType::IQ3_XXS, 18, "IQ3_XXS", {256, 98}},
    {DType::IQ3_S, 21, "IQ3_S", {256, 110}},    {DType::IQ1_S, 19, "IQ1_S", {256, 50}},
    {DType::IQ1_M, 29, "IQ1_M", {256, 56}},
};

const GgufFormat* gguf_format(DType t) {
  for (const GgufFormat& f : kGgufFormats) {
    if (f.dtype == t) return &f;
  }
  return nullptr;
}

}  // namespace

DTypeBlock dtype_block(DType t) {
  if (const GgufFormat* f = gguf_format(t)) return f->block;
  if (t == DType::F4E2M1) return {2, 1};
  return {1, static_cast<std::uint32_t>(dtype_size(t))};
}

bool is_gguf_block(DType t) {
  return gguf_format(t) != nullptr;
}

bool dtype_from_ggml_type(std::uint32_t ggml_type, DType& out) {
  switch (ggml_type) {
    case 0:
      out = DType::F32;
      return true;
    case 1:
      out = DType::F16;
      return true;
    case 30:
      out = DType::BF16;
      return true;
    default:
      break;
  }
  for (const GgufFormat& f : kGgufFormats) {
    if (f.ggml_type == ggml_type) {
      out = f.dtype;
      return true;
    }
  }
  return false;
}

std::int32_t ggml_type_of(DType t) {
  if (t == DType::F32) return 0;
  if (t == DType::F16) return 1;
  if (t == DType::BF16) return 30;
  const GgufFormat* f = gguf_format(t);
  return f != nullptr ? static_cast<std::int32_t>(f->ggml_type) : -1;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F8E4M3:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::I8:
      return 1;
    case DType::F4E2M1:
      return 0;
    default:  // the GGUF block formats
      return 0;
  }
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F8E4M3:
      return "F8_E4M3";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
    case DType::I8:
      return "I8";
    case DType::F4E2M1:
      return "MXFP4";
    default:
      break;
  }
  const GgufFormat* f = gguf_format(t);
  return f != nullptr ? f->name : "?";
}

bool parse_safetensors_dtype(std::string_view name, DType& out) {
  static constexpr std::array<std::pair<std::string_view, DType>, 8> kNames = {{
      {"F32", DType::F32},
      {"F16", DType::F16},
      {"BF16", DType::BF16},
      {"F8_E4M3", DType::F8E4M3},
      {"I32", DType::I32},
      {"I64", DType::I64},
      {"U8", DType::U8},
      {"I8", DType::I8},
  }};
  for (const auto& [n, t] : kNames) {
    if (n == name) {
      out = t;
      return true;
    }
  }
  return false;
}

float f16_to_f32(std::uint16_t h) {
  // Rebuilt bit by bit (no ldexp: GGUF's blocks convert one scale per 32 weights or fewer).
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24, exact in float
      float value = static_cast<float>(mant) * 5.9604644775390625e-08f;
      std::memcpy(&bits, &value, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // infinity, or NaN keeping its payload
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: quiet, with what fits of the payload
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // 65520 (half way from 65504 to the next step, 65536) and above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, in steps of 2^-24
    float v;
    std::memcpy(&v, &magnitude, 4);
    // v * 2^24 is exact and below 1024; nearbyint rounds half to even (the default mode).
    // 1024 itself comes out as 0x400, the smallest normal, as it should.
    return static_cast<std::uint16_t>(sign |
                                      static_cast<std::uint16_t>(std::nearbyint(v * 16777216.0f)));
  }
  // Normal: round the 23-bit mantissa to 10 bits, half to even; a carry moves the exponent.
  const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
}

float f8e4m3_to_f32(std::uint8_t v) {
  const std::uint32_t sign = (v >> 7) & 1u;
  const std::uint32_t exp = (v >> 3) & 0xfu;
  const std::uint32_t mant = v & 0x7u;
  float value;
  if (exp == 0xf && mant == 0x7) {
    value = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    value = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  } else {
    value = std::ldexp(static_cast<float>(mant | 0x8u), static_cast<int>(exp) - 10);
  }
  return sign ? -value : value;
}

float e8m0_to_f32(std::uint8_t v) {
  if (v == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

namespace {

// FP16 to fp32 eight values an instruction (F16C). The conversion is exact either way; runs of
// eight holding an infinity or NaN take f16_to_f32, which keeps a NaN's payload as it is where
// the instruction would quiet it.
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const std::uint16_t* s, float* dst,
                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(s + i + 512), _MM_HINT_T0);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i top = _mm_and_si128(h, _mm_set1_epi16(0x7c00));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(top, _mm_set1_epi16(0x7c00))) != 0) {
      for (std::size_t j = i; j < i + 8; ++j) dst[j] = f16_to_f32(s[j]);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

}  // namespace

void convert_to_f32(DType t, const void* src, float* dst, std::size_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      // Value by value, FP16 models used as stored ran a tenth of their memory's speed
      // (SmolLM2-135M in F16 decoded 12 tokens/s on two Zen 5 cores).
      static const bool f16c = detect_isa().usable.f16c;
      if (f16c) {
        f16_to_f32_f16c(s, dst, n);
        return;
      }
      for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F8E4M3: {
      // A 256-entry table: every fp8 value decoded once.
      static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int i = 0; i < 256; ++i) t[i] = f8e4m3_to_f32(static_cast<std::uint8_t>(i));
        return t;
      }();
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
      return;
    }
    case DType::I32: {
      const auto* s = static_cast<const std::int32_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::I64: {
      const auto* s = static_cast<const std::int64_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::U8: {
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::I8: {
      const auto* s = static_cast<const std::int8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::F4E2M1: {
      const auto* s = static_cast<const std::uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = kFp4E2M1Values[i % 2 == 0 ? s[i / 2] & 0x0F : s[i / 2] >> 4];
      return;
    }
    default:  // the GGUF block formats, from their scalar reference
      dequantize_gguf_row(static_cast<std::uint32_t>(ggml_type_of(t)), src,
                          static_cast<std::int64_t>(n), dst);
      return;
  }
}

}  // namespace tandem::kernels
