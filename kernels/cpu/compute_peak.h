// Measures how many multiply-adds a second the CPU's product instructions sustain: the bound
// on prompts, whose products take each weight from the caches for many tokens, as
// memory_bandwidth.h's read rate bounds decoding, which reads each weight once a token.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {

// The instructions our kernels multiply with, or on AVX2 without VNNI the short sequence
// that adds byte products into 32-bit sums (the kernels' inner step, counted as one).
enum class ProductInstruction {
  Fma256,      // VFMADD231PS ymm (AVX2 and FMA): 8 fp32 multiply-adds
  Fma512,      // VFMADD231PS zmm (AVX-512): 16
  Int8Dot256,  // VPDPBUSD ymm (AVX-VNNI): 32 unsigned by signed bytes
  Int8Dot512,  // VPDPBUSD zmm (AVX512-VNNI): 64
  Bf16Dot512,  // VDPBF16PS zmm (AVX512-BF16): 32 BF16 pairs
  Int8Tile,    // TDPBSUD (AMX-INT8), 16 x 64 by 64 x 16 bytes: 16384
  Bf16Tile,    // TDPBF16PS (AMX-BF16), 16 x 32 by 32 x 16 BF16 values: 8192
  // AVX2 INT8: VPSIGNB (the activations take the weights' signs), VPMADDUBSW (|w| by them,
  // pairs into 16 bits), VPMADDWD (by ones, into 32), VPADDD: 32 byte products.
  Int8Maddubs256,
  // AVX2 INT4 and MXFP4: two VPMADDUBSW (unsigned nibbles or table bytes by activations),
  // VPADDW, VPMADDWD, VPADDD: 64.
  NibbleMaddubs256,
};

std::string_view product_instruction_name(ProductInstruction instruction);  // "VPDPBUSD zmm"
int multiply_adds_per_instruction(ProductInstruction instruction);
bool product_instruction_usable(ProductInstruction instruction, const IsaFeatures& usable);

// The instruction that carries the packed kernels' products of `tokens` tokens on `format` in
// `variant`; none for the scalar variant. AMX's tiles (TDPBF16PS) take BF16 from
// kAmxMinTokens tokens and INT8 and INT4 widened from amx_widen_tokens; the rest goes through
// its AVX-512 kernels (a tile product's tokens past the last whole tile of 16 are counted at
// the tiles' rate too).
std::optional<ProductInstruction> packed_product_instruction(PackedFormat format,
                                                             CpuVariant variant,
                                                             const IsaFeatures& usable,
                                                             std::int64_t tokens,
                                                             bool rotated = false);

// The instruction attention's fp32 multiply-adds run as (its portable kernels are cloned per
// instruction set): the widest FMA the CPU has, none below AVX2.
std::optional<ProductInstruction> widest_fma(const IsaFeatures& usable);

// The instruction attention multiplies with in `variant` over a cache of `elements`:
// VDPBF16PS for the Avx512Bf16 kernels over BF16, TDPBF16PS for AmxBf16's (a prompt's; its
// decoding takes VDPBF16PS), VPDPBUSD zmm for any variant past Portable over 8 bits (none
// where the CPU lacks AVX-512 VNNI), otherwise widest_fma.
std::optional<ProductInstruction> attention_product_instruction(AttentionVariant variant,
                                                                CacheElements elements,
                                                                const IsaFeatures& usable);

// Repetitions a peak is the best of: on the development VM a core is now and then taken for
// a moment (one bench --attention run of about fifteen measured half the peak, best of 3).
inline constexpr int kPeakRepeats = 5;

// Runs independent chains of `instruction` (twelve registers, or four tiles) in `tasks` tasks
// across `parallel`'s workers and returns the multiply-adds a second all of them sustained
// together, the best of `repeats`. Throws std::invalid_argument when the CPU cannot run the
// instruction.
double measure_peak_multiply_adds(ProductInstruction instruction, const ParallelFor& parallel,
                                  std::int64_t tasks = 256, int repeats = kPeakRepeats);

}  // namespace tandem::kernels
