// Measures how fast the CPU reads memory: the bound on decoding, which streams every
// active weight once per token.
#pragma once

#include <cstdint>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::kernels {

// Reads a `bytes`-sized buffer several times across `parallel`'s workers and returns the
// best rate in bytes per second.
double measure_read_bandwidth(std::uint64_t bytes, const ParallelFor& parallel, int repeats = 5);

}  // namespace tandem::kernels
