#include "engine/backend/emulated/bus_model.h"

#include <immintrin.h>

#include <algorithm>
#include <thread>

namespace tandem::backend {

BusModel::BusModel(double bytes_per_s, double latency_s)
    : bytes_per_s_(bytes_per_s), latency_s_(latency_s) {
  free_at_[0] = free_at_[1] = Clock::now();
}

void BusModel::transfer(Direction direction, std::size_t bytes, const std::function<void()>& copy) {
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(latency_s_ + static_cast<double>(bytes) / bytes_per_s_));
  Clock::time_point arrival;
  {
    const std::lock_guard lock(mutex_);
    Clock::time_point& free_at = free_at_[direction == Direction::ToDevice ? 0 : 1];
    arrival = std::max(Clock::now(), free_at) + duration;
    free_at = arrival;
  }
  copy();
  // Sleeping is coarse (tens of microseconds late); the last stretch is spun.
  constexpr auto kSpin = std::chrono::microseconds(150);
  if (Clock::now() + kSpin < arrival) std::this_thread::sleep_until(arrival - kSpin);
  while (Clock::now() < arrival) _mm_pause();
}

}  // namespace tandem::backend
