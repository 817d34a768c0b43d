#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {

ReadBandwidthProbe::ReadBandwidthProbe(std::uint64_t bytes)
    : buffer_(AlignedBytes::allocate(bytes / sizeof(std::uint64_t) * sizeof(std::uint64_t))),
      words_(bytes / sizeof(std::uint64_t)) {
  auto* data = reinterpret_cast<std::uint64_t*>(buffer_.data.get());
  for (std::uint64_t i = 0; i < words_; ++i) data[i] = i;  // touch every page first
}

double ReadBandwidthProbe::measure(const ParallelFor& parallel, int repeats) const {
  const std::uint64_t words = words_;
  const auto* data = reinterpret_cast<const std::uint64_t*>(buffer_.data.get());
  constexpr std::int64_t kChunkWords = 1 << 16;  // 512 KiB per task
  const std::int64_t chunks = static_cast<std::int64_t>((words + kChunkWords - 1) / kChunkWords);
  std::atomic<std::uint64_t> sink{0};
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel(chunks, [&](std::int64_t c0, std::int64_t c1) {
      // Eight independent sums let the loads run in parallel; the compiler vectorises them.
      std::uint64_t acc[8] = {};
      const std::uint64_t end =
          std::min<std::uint64_t>(words, static_cast<std::uint64_t>(c1 * kChunkWords));
      for (std::uint64_t i = static_cast<std::uint64_t>(c0 * kChunkWords); i + 8 <= end; i += 8) {
        for (int l = 0; l < 8; ++l) acc[l] ^= data[i + l];
      }
      std::uint64_t x = 0;
      for (std::uint64_t a : acc) x ^= a;
      sink.fetch_xor(x, std::memory_order_relaxed);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(words * sizeof(std::uint64_t)) / seconds);
  }
  if (sink.load() == 0x5eed) best += 0.0;  // keeps the reads from being optimised away
  return best;
}

}  // namespace tandem::kernels
