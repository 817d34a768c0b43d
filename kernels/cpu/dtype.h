// Element types of stored weights and their conversions to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tandem::kernels {

enum class DType { F32, F16, BF16, F8E4M3, I32, I64, U8, I8 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", "F8_E4M3"
bool parse_safetensors_dtype(std::string_view name, DType& out);

inline float bf16_to_f32(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float f16_to_f32(std::uint16_t v);
// OCP FP8 E4M3 ("e4m3fn"): no infinities, 0x7f/0xff are NaN, max 448.
float f8e4m3_to_f32(std::uint8_t v);

// Converts `n` elements of type `t` at `src` to fp32.
void convert_to_f32(DType t, const void* src, float* dst, std::size_t n);

}  // namespace tandem::kernels
