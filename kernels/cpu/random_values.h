// Uniform values in [-1, 1) from a seed, for benchmarks and measurements of the kernels:
// fast enough for the 311 million of Qwen3-30B-A3B's output head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::kernels {

std::vector<float> random_values(std::size_t n, std::uint64_t seed);

}  // namespace tandem::kernels
