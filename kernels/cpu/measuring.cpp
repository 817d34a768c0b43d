#include "kernels/cpu/measuring.h"

#include <chrono>

namespace tandem::kernels {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
  return v;
}

double seconds_per_product(const std::function<void()>& product, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int calls = 0;
  double elapsed = 0;
  do {
    product();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds);
  return elapsed / calls;
}

}  // namespace tandem::kernels
