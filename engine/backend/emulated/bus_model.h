// The link between the host and the emulated accelerator, as PCIe behaves: a transfer takes
// latency + bytes / rate; transfers in one direction queue behind each other on the link,
// the two directions are independent (full duplex). The data is really copied; the thread
// that copies then waits until the modelled time has passed (when the copy itself takes
// longer, as it may above the host's own copy speed, the copy's time is what it costs).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>

namespace tandem::backend {

class BusModel {
 public:
  enum class Direction { ToDevice, ToHost };

  BusModel(double bytes_per_s, double latency_s);

  double bytes_per_s() const { return bytes_per_s_; }
  double latency_s() const { return latency_s_; }
  // Runs `copy` (of `bytes`) as a transfer in `direction`; returns when it has arrived.
  void transfer(Direction direction, std::size_t bytes, const std::function<void()>& copy);

 private:
  using Clock = std::chrono::steady_clock;
  double bytes_per_s_;
  double latency_s_;
  std::mutex mutex_;
  Clock::time_point free_at_[2];  // per direction: when the link is next free
};

}  // namespace tandem::backend
