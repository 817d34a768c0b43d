// What measurements of the kernels share (the benchmarks, and the engine's measurement of
// where widening pays): uniform random values from a seed, and the seconds one call takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace tandem::kernels {

// Uniform values in [-1, 1): fast enough for the 311 million of Qwen3-30B-A3B's output head.
std::vector<float> random_values(std::size_t n, std::uint64_t seed);

// The seconds one call of `product` takes: called repeatedly for at least `min_seconds`
// (at least once), the time over the calls.
double seconds_per_product(const std::function<void()>& product, double min_seconds);

}  // namespace tandem::kernels
