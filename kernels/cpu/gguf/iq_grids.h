// The lattice grids of GGUF's IQ1 ... IQ3 block formats: each block stores indices into one,
// an index naming 8 (IQ1, IQ2) or 4 (IQ3) weights' magnitudes at once. They are the formats'
// definition, generated into gguf/iq_grids.cpp by tests/tools/make_iq_grids.py.
#pragma once

#include <cstdint>

namespace tandem::kernels::gguf_layout {

// IQ2_XXS, IQ2_XS, IQ2_S: magnitudes 8, 25 or 43.
extern const std::uint8_t kIq2xxsGrid[256][8];
extern const std::uint8_t kIq2xsGrid[512][8];
extern const std::uint8_t kIq2sGrid[1024][8];
// IQ3_XXS: 4, 12, ..., 52 and 62; IQ3_S: the odd numbers 1 ... 15.
extern const std::uint8_t kIq3xxsGrid[256][4];
extern const std::uint8_t kIq3sGrid[512][4];
// IQ1_S and IQ1_M: -1, 0 or 1.
extern const std::int8_t kIq1sGrid[2048][8];

// The codes built from a grid are its signed values plus its largest magnitude (codes 0 ... 2
// x it); IQ1's 8 g +- 1 plus 9.
inline constexpr int kIq2Bias = 43, kIq3xxsBias = 62, kIq3sBias = 15, kIq1Bias = 9;

}  // namespace tandem::kernels::gguf_layout
