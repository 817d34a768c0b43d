// Element types of stored weights and their conversions to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tandem::kernels {

// F4E2M1: OCP FP4 codes, two per byte (the first element in the low nibble), as MXFP4
// weights store them; never a safetensors dtype (checkpoints store the bytes as U8).
// Q4_0 ... IQ1_M: the block formats of GGUF files (kernels/cpu/gguf/blocks.h has their
// layouts), each a run of blocks of 32 or 256 weights; a row is whole blocks.
enum class DType {
  F32,
  F16,
  BF16,
  F8E4M3,
  I32,
  I64,
  U8,
  I8,
  F4E2M1,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_NL,
  IQ4_XS,
  IQ2_XXS,
  IQ2_XS,
  IQ2_S,
  IQ3_XXS,
  IQ3_S,
  IQ1_S,
  IQ1_M,
};

// Bytes per element; 0 for F4E2M1 (half a byte) and the GGUF block formats: use dtype_bytes.
std::size_t dtype_size(DType t);
// How many elements share how many bytes: {1, dtype_size} for plain types, {2, 1} for
// F4E2M1, a whole block for the GGUF formats.
struct DTypeBlock {
  std::uint32_t elements = 1;
  std::uint32_t bytes = 0;
};
DTypeBlock dtype_block(DType t);
// Bytes of `n` elements (F4E2M1: two per byte; a GGUF format: n whole blocks' worth).
inline std::uint64_t dtype_bytes(DType t, std::int64_t n);
// Safetensors spelling ("F32", "BF16", "F8_E4M3"); ggml's for the GGUF formats ("Q4_K").
std::string_view dtype_name(DType t);
bool parse_safetensors_dtype(std::string_view name, DType& out);
// The GGUF block formats (Q4_0 ... IQ1_M).
bool is_gguf_block(DType t);
// The DType of a ggml type number (0 F32, 1 F16, 30 BF16 and the block formats above);
// false for any other.
bool dtype_from_ggml_type(std::uint32_t ggml_type, DType& out);
// The ggml type number of F32, F16, BF16 or a block format; -1 for the others.
std::int32_t ggml_type_of(DType t);

// The inline conversions below are compiled into files built for AVX2, AVX-512 and AMX as
// well as into portable ones: always inlined, so that no file leaves a copy built for its
// instruction set that the linker could hand to code running on a CPU without it.
inline __attribute__((always_inline)) float bf16_to_f32(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline __attribute__((always_inline)) std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float f16_to_f32(std::uint16_t v);
// Round to nearest even; beyond FP16's largest (65504) to infinity, tiny values to
// subnormals; NaN stays NaN.
std::uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 ("e4m3fn"): no infinities, 0x7f/0xff are NaN, max 448.
float f8e4m3_to_f32(std::uint8_t v);

// The 16 FP4 E2M1 values by code: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline constexpr float kFp4E2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                             4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                             -2.0f, -3.0f, -4.0f, -6.0f};
// An E8M0 scale (MXFP4's shared exponent): 2^(v - 127); 0xff is NaN.
float e8m0_to_f32(std::uint8_t v);

// Converts `n` elements of type `t` at `src` to fp32 (F4E2M1: from the start of a byte; a
// GGUF format: from the start of a block, n whole blocks).
void convert_to_f32(DType t, const void* src, float* dst, std::size_t n);

inline __attribute__((always_inline)) std::uint64_t dtype_bytes(DType t, std::int64_t n) {
  const auto count = static_cast<std::uint64_t>(n);
  if (t == DType::F4E2M1) return (count + 1) / 2;
  const DTypeBlock b = dtype_block(t);
  return b.elements == 1 ? count * b.bytes : count / b.elements * b.bytes;
}

}  // namespace tandem::kernels
