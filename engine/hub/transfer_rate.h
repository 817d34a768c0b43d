// Bytes per second over the last few seconds, from a counter sampled now and then.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>

namespace tandem::hub {

class TransferRate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TransferRate(std::chrono::milliseconds window = std::chrono::seconds(3))
      : window_(window) {}

  // Records the counter's value at `now` and returns the rate over the window.
  double add(Clock::time_point now, std::uint64_t counter) {
    samples_.emplace_back(now, counter);
    while (samples_.size() > 2 && now - samples_[1].first > window_) samples_.pop_front();
    const auto& [t0, c0] = samples_.front();
    const double seconds = std::chrono::duration<double>(now - t0).count();
    // Under a fifth of a second the rate is mostly noise.
    return seconds > 0.2 ? static_cast<double>(counter - c0) / seconds : 0.0;
  }

 private:
  std::chrono::milliseconds window_;
  std::deque<std::pair<Clock::time_point, std::uint64_t>> samples_;
};

}  // namespace tandem::hub
