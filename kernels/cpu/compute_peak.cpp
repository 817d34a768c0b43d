#include "kernels/cpu/compute_peak.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <stdexcept>
#include <string>

#include "kernels/cpu/amx_tiles.h"

namespace tandem::kernels {
namespace {

// Zeroes the operands (zeros keep the floating-point units off any slow path) with `zero`,
// then runs `passes` passes of the loop, in which each of twelve registers takes one `step`
// (`i` its number in the step), independent of the others (twelve chains cover a latency of
// up to six cycles at two a cycle). Only registers 0 to 15 are named, so the file needs no
// AVX-512 compiler flags; the assembler takes every instruction whatever the flags.
#define TANDEM_CHAINS_LOOP(zero, step)                                                           \
  asm volatile(zero                                                                              \
               "1:\n\t"                                                                          \
               ".irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t" step                                       \
               ".endr\n\t"                                                                       \
               "dec %0\n\t"                                                                      \
               "jnz 1b\n\t"                                                                      \
               "vzeroupper\n\t"                                                                  \
               : "+r"(passes)                                                                    \
               :                                                                                 \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc")

// One instruction a chain: register i += (register 14 op register 15), in registers r.
#define TANDEM_PEAK_LOOP(zero, op, r)                                                    \
  TANDEM_CHAINS_LOOP(zero " %%" r "14, %%" r "14, %%" r "14\n\t" zero " %%" r "15, %%" r \
                          "15, %%" r "15\n\t",                                           \
                     op " %%" r "14, %%" r "15, %%" r "\\i\n\t")

// AVX2's byte-product sequences: `body` is one chain's step, adding into register i from the
// zeros in ymm14 and ymm15, through ymm12 and ymm13 as scratch (which the CPU renames apart
// from chain to chain, so the chains stay independent).
#define TANDEM_SEQUENCE_PEAK_LOOP(body) \
  TANDEM_CHAINS_LOOP("vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15\n\t", body)

constexpr int kChains = 12;
constexpr std::int64_t kPassesPerTask = 1 << 16;  // 786,432 instructions, about 0.2-0.5 ms

// The tiles' loop: four independent accumulators, as the AMX matrix kernels keep, each the
// product of one of tiles 4-5 by one of 6-7, all zero; the tiles are released after.
constexpr int kTileChains = 4;
#define TANDEM_TILE_PEAK_LOOP(op)                                                            \
  asm volatile("1:\n\t" op " %%tmm6, %%tmm4, %%tmm0\n\t" op " %%tmm7, %%tmm4, %%tmm1\n\t" op \
               " %%tmm6, %%tmm5, %%tmm2\n\t" op                                              \
               " %%tmm7, %%tmm5, %%tmm3\n\t"                                                 \
               "dec %0\n\t"                                                                  \
               "jnz 1b\n\t"                                                                  \
               : "+r"(passes)                                                                \
               :                                                                             \
               : "cc")

void run_tile_passes(ProductInstruction instruction, std::int64_t passes) {
  using Tiles = amx::HardwareTiles;
  Tiles::configure(amx::full_tiles());
  Tiles::zero<0>();
  Tiles::zero<1>();
  Tiles::zero<2>();
  Tiles::zero<3>();
  Tiles::zero<4>();
  Tiles::zero<5>();
  Tiles::zero<6>();
  Tiles::zero<7>();
  if (instruction == ProductInstruction::Int8Tile) {
    TANDEM_TILE_PEAK_LOOP("tdpbsud");
  } else {
    TANDEM_TILE_PEAK_LOOP("tdpbf16ps");
  }
  Tiles::release();
}

#undef TANDEM_TILE_PEAK_LOOP

void run_passes(ProductInstruction instruction, std::int64_t passes) {
  switch (instruction) {
    case ProductInstruction::Fma256:
      TANDEM_PEAK_LOOP("vpxor", "vfmadd231ps", "ymm");
      return;
    case ProductInstruction::Fma512:
      TANDEM_PEAK_LOOP("vpxord", "vfmadd231ps", "zmm");
      return;
    case ProductInstruction::Int8Dot256:
      TANDEM_PEAK_LOOP("vpxor", "%{vex%} vpdpbusd", "ymm");
      return;
    case ProductInstruction::Int8Dot512:
      TANDEM_PEAK_LOOP("vpxord", "vpdpbusd", "zmm");
      return;
    case ProductInstruction::Bf16Dot512:
      TANDEM_PEAK_LOOP("vpxord", "vdpbf16ps", "zmm");
      return;
    case ProductInstruction::Int8Tile:
    case ProductInstruction::Bf16Tile:
      run_tile_passes(instruction, passes);
      return;
    case ProductInstruction::Int8Maddubs256:
      TANDEM_SEQUENCE_PEAK_LOOP(
          "vpsignb %%ymm15, %%ymm14, %%ymm13\n\tvpmaddubsw %%ymm13, %%ymm14, %%ymm13\n\t"
          "vpmaddwd %%ymm15, %%ymm13, %%ymm13\n\tvpaddd %%ymm13, %%ymm\\i, %%ymm\\i\n\t");
      return;
    case ProductInstruction::NibbleMaddubs256:
      TANDEM_SEQUENCE_PEAK_LOOP(
          "vpmaddubsw %%ymm15, %%ymm14, %%ymm13\n\tvpmaddubsw %%ymm14, %%ymm15, %%ymm12\n\t"
          "vpaddw %%ymm12, %%ymm13, %%ymm13\n\tvpmaddwd %%ymm14, %%ymm13, %%ymm13\n\t"
          "vpaddd %%ymm13, %%ymm\\i, %%ymm\\i\n\t");
      return;
  }
}

#undef TANDEM_PEAK_LOOP
#undef TANDEM_SEQUENCE_PEAK_LOOP
#undef TANDEM_CHAINS_LOOP

// Per instruction, in the enum's order: its name in reports, its multiply-adds, how many of
// it a pass of the probe's loop runs and the passes of a task (a pass of four tile products
// is many times a pass of twelve vector ones: a sixteenth of the passes keeps tasks short).
struct InstructionInfo {
  std::string_view name;
  int multiply_adds;
  int per_pass;
  std::int64_t passes;
};
constexpr std::int64_t kTilePasses = kPassesPerTask / 16;
constexpr InstructionInfo kInstructions[] = {
    {"VFMADD231PS ymm", 8, kChains, kPassesPerTask},        // Fma256
    {"VFMADD231PS zmm", 16, kChains, kPassesPerTask},       // Fma512
    {"VPDPBUSD ymm", 32, kChains, kPassesPerTask},          // Int8Dot256
    {"VPDPBUSD zmm", 64, kChains, kPassesPerTask},          // Int8Dot512
    {"VDPBF16PS zmm", 32, kChains, kPassesPerTask},         // Bf16Dot512
    {"TDPBSUD", 16 * 16 * 64, kTileChains, kTilePasses},    // Int8Tile
    {"TDPBF16PS", 16 * 16 * 32, kTileChains, kTilePasses},  // Bf16Tile
    // A pass of twelve sequences of four or five instructions: a quarter of the passes.
    {"VPSIGNB+VPMADDUBSW+VPMADDWD ymm", 32, kChains, kPassesPerTask / 4},  // Int8Maddubs256
    {"2 VPMADDUBSW+VPMADDWD ymm", 64, kChains, kPassesPerTask / 4},        // NibbleMaddubs256
};
static_assert(std::size(kInstructions) ==
              static_cast<std::size_t>(ProductInstruction::NibbleMaddubs256) + 1);

bool avx512_base(const IsaFeatures& u) {
  return u.avx512f && u.avx512bw && u.avx512vl && u.avx512dq;
}

}  // namespace

std::string_view product_instruction_name(ProductInstruction instruction) {
  return kInstructions[static_cast<std::size_t>(instruction)].name;
}

int multiply_adds_per_instruction(ProductInstruction instruction) {
  return kInstructions[static_cast<std::size_t>(instruction)].multiply_adds;
}

bool product_instruction_usable(ProductInstruction instruction, const IsaFeatures& usable) {
  switch (instruction) {
    case ProductInstruction::Fma256:
      return usable.avx2 && usable.fma;
    case ProductInstruction::Fma512:
      return usable.avx512f;
    case ProductInstruction::Int8Dot256:
      return usable.avx_vnni;
    case ProductInstruction::Int8Dot512:
      return usable.avx512f && usable.avx512_vnni;
    case ProductInstruction::Bf16Dot512:
      return usable.avx512f && usable.avx512_bf16;
    case ProductInstruction::Int8Tile:
      return usable.amx_tile && usable.amx_int8;
    case ProductInstruction::Bf16Tile:
      return usable.amx_tile && usable.amx_bf16;
    case ProductInstruction::Int8Maddubs256:
    case ProductInstruction::NibbleMaddubs256:
      return usable.avx2;
  }
  return false;
}

std::optional<ProductInstruction> packed_product_instruction(PackedFormat format,
                                                             CpuVariant variant,
                                                             const IsaFeatures& usable,
                                                             std::int64_t tokens, bool rotated) {
  const bool bf16 = format == PackedFormat::Bf16;
  switch (variant) {
    case CpuVariant::Scalar:
      return std::nullopt;
    case CpuVariant::Amx:
      if (!usable.amx_bf16) return std::nullopt;
      // Rotated INT8 in integer tiles (packed_matmul_amx).
      if (rotated && format == PackedFormat::Int8 && tokens >= kAmxMinRotatedTokens)
        return usable.amx_int8 ? std::optional(ProductInstruction::Int8Tile) : std::nullopt;
      if ((bf16 && tokens >= kAmxMinTokens) || widened_product(format, tokens, variant))
        return ProductInstruction::Bf16Tile;
      return bf16 ? ProductInstruction::Bf16Dot512 : ProductInstruction::Int8Dot512;
    case CpuVariant::Avx512:
      // As LoadedModel: BF16 without AVX512_BF16 falls back to the AVX2 kernel's FMAs.
      if (bf16)
        return usable.avx512_bf16 ? ProductInstruction::Bf16Dot512 : ProductInstruction::Fma256;
      return ProductInstruction::Int8Dot512;
    case CpuVariant::Avx2:
      if (bf16) return ProductInstruction::Fma256;
      if (usable.avx_vnni) return ProductInstruction::Int8Dot256;
      return format == PackedFormat::Int8 ? ProductInstruction::Int8Maddubs256
                                          : ProductInstruction::NibbleMaddubs256;
  }
  return std::nullopt;
}

std::optional<ProductInstruction> widest_fma(const IsaFeatures& usable) {
  if (avx512_base(usable)) return ProductInstruction::Fma512;
  if (usable.avx2 && usable.fma) return ProductInstruction::Fma256;
  return std::nullopt;
}

std::optional<ProductInstruction> attention_product_instruction(AttentionVariant variant,
                                                                CacheElements elements,
                                                                const IsaFeatures& usable) {
  // Avx2 over a BF16 or 8-bit cache: ymm FMAs, whatever else the CPU has.
  if (variant == AttentionVariant::Avx2 && elements != CacheElements::F32)
    return usable.avx2 && usable.fma ? std::optional(ProductInstruction::Fma256) : std::nullopt;
  if (elements == CacheElements::Int8 && variant != AttentionVariant::Portable) {
    return product_instruction_usable(ProductInstruction::Int8Dot512, usable)
               ? std::optional(ProductInstruction::Int8Dot512)
               : std::nullopt;
  }
  const bool bf16_cache = elements == CacheElements::Bf16;
  if (bf16_cache && variant == AttentionVariant::Avx512Bf16) return ProductInstruction::Bf16Dot512;
  if (bf16_cache && variant == AttentionVariant::AmxBf16)
    return usable.amx_bf16 ? std::optional(ProductInstruction::Bf16Tile) : std::nullopt;
  return widest_fma(usable);
}

double measure_peak_multiply_adds(ProductInstruction instruction, const ParallelFor& parallel,
                                  std::int64_t tasks, int repeats) {
  if (!product_instruction_usable(instruction, detect_isa().usable)) {
    throw std::invalid_argument(std::string("this CPU cannot run ") +
                                std::string(product_instruction_name(instruction)));
  }
  tasks = std::max<std::int64_t>(1, tasks);
  const InstructionInfo& info = kInstructions[static_cast<std::size_t>(instruction)];
  const double multiply_adds =
      static_cast<double>(tasks) * info.passes * info.per_pass * info.multiply_adds;
  parallel(tasks, [&](std::int64_t, std::int64_t) {});  // workers awake
  double best = 0.0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel(tasks, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) run_passes(instruction, info.passes);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, multiply_adds / seconds);
  }
  return best;
}

}  // namespace tandem::kernels
