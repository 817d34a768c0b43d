// The AMX tile unit as the CPU kernels use it (internal to kernels/cpu): the LDTILECFG operand,
// the instructions written as assembly (GCC's intrinsics need literal tile numbers, and the
// files that use them are not compiled for AMX), and the same unit in software.
//
// A kernel takes the unit as a template parameter: HardwareTiles issues the instructions;
// EmulatedTiles, used by the tests on CPUs without AMX, performs them after the pseudocode of
// the instruction set reference (including its shape checks), so the layout, the tails and
// the bookkeeping of the AMX kernels are tested everywhere.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/dtype.h"

namespace tandem::kernels::amx {

inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 64;  // bytes per tile row

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

struct HardwareTiles {
  static void configure(const TileConfig& c) { asm volatile("ldtilecfg %0" ::"m"(c)); }
  static void release() { asm volatile("tilerelease" ::); }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* base, std::int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* base, std::int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  // C += A (signed bytes) . B (unsigned bytes), int32 sums.
  template <int C, int A, int B>
  static void dot_s8u8() {
    asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  // C += A (bf16 pairs) . B (bf16 pairs), fp32 sums.
  template <int C, int A, int B>
  static void dot_bf16() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

// The tile unit in software, per thread, after the pseudocode of the instruction set
// reference: loads fill the configured rows and bytes and zero the rest; a product whose
// shapes do not fit (where the hardware raises #UD) throws.
struct EmulatedTiles {
  struct State {
    TileConfig config;
    bool configured = false;
    alignas(64) std::uint8_t tile[8][kTileRows][kTileBytes];
    // The rows the latest load of each tile read from memory, for the tests: a tile
    // configured taller than the tokens it holds reads past them.
    int rows_loaded[8] = {};
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
  static void configure(const TileConfig& c) {
    State& s = state();
    s.config = c;
    s.configured = true;
    std::memset(s.tile, 0, sizeof(s.tile));
  }
  static void release() { state().configured = false; }
  static void check(bool ok) {
    if (!ok) throw std::logic_error("AMX emulation: instruction with an invalid tile shape");
  }
  template <int T>
  static void zero() {
    check(state().configured);
    std::memset(state().tile[T], 0, sizeof(state().tile[T]));
  }
  template <int T>
  static void load(const void* base, std::int64_t stride) {
    State& s = state();
    check(s.configured);
    std::memset(s.tile[T], 0, sizeof(s.tile[T]));
    s.rows_loaded[T] = s.config.rows[T];
    for (int r = 0; r < s.config.rows[T]; ++r)
      std::memcpy(s.tile[T][r], static_cast<const std::uint8_t*>(base) + r * stride,
                  s.config.colsb[T]);
  }
  template <int T>
  static void store(void* base, std::int64_t stride) {
    State& s = state();
    check(s.configured);
    for (int r = 0; r < s.config.rows[T]; ++r)
      std::memcpy(static_cast<std::uint8_t*>(base) + r * stride, s.tile[T][r], s.config.colsb[T]);
  }
  template <int C, int A, int B>
  static void check_shapes() {
    const TileConfig& c = state().config;
    check(state().configured && c.rows[C] == c.rows[A] && c.colsb[A] == 4 * c.rows[B] &&
          c.colsb[C] == c.colsb[B] && c.colsb[C] % 4 == 0);
  }
  template <int C, int A, int B>
  static void dot_s8u8() {
    check_shapes<C, A, B>();
    State& s = state();
    for (int m = 0; m < s.config.rows[C]; ++m) {
      for (int n = 0; n < s.config.colsb[C] / 4; ++n) {
        std::int32_t acc;
        std::memcpy(&acc, &s.tile[C][m][4 * n], 4);
        for (int k = 0; k < s.config.colsb[A] / 4; ++k) {
          for (int j = 0; j < 4; ++j)
            acc += static_cast<std::int32_t>(static_cast<std::int8_t>(s.tile[A][m][4 * k + j])) *
                   static_cast<std::int32_t>(s.tile[B][k][4 * n + j]);
        }
        std::memcpy(&s.tile[C][m][4 * n], &acc, 4);
      }
    }
  }
  template <int C, int A, int B>
  static void dot_bf16() {
    check_shapes<C, A, B>();
    State& s = state();
    auto bf16_at = [&](int t, int r, int byte) {
      std::uint16_t v;
      std::memcpy(&v, &s.tile[t][r][byte], 2);
      return bf16_to_f32(v);
    };
    for (int m = 0; m < s.config.rows[C]; ++m) {
      for (int n = 0; n < s.config.colsb[C] / 4; ++n) {
        float acc;
        std::memcpy(&acc, &s.tile[C][m][4 * n], 4);
        for (int k = 0; k < s.config.colsb[A] / 4; ++k) {
          acc += bf16_at(A, m, 4 * k) * bf16_at(B, k, 4 * n) +
                 bf16_at(A, m, 4 * k + 2) * bf16_at(B, k, 4 * n + 2);
        }
        std::memcpy(&s.tile[C][m][4 * n], &acc, 4);
      }
    }
  }
};

// Every tile 16 rows of 64 bytes: 16 x 16 fp32 accumulators, and BF16 operands of 16 rows x
// 16 pairs.
inline TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = kTileBytes;
  }
  return c;
}

}  // namespace tandem::kernels::amx
