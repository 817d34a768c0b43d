// Reproducible test inputs: values drawn from the standard normal distribution.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tandem::test {

inline std::vector<float> normal_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace tandem::test
