#include "engine/measure/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace tandem::measure {

double MetricsSnapshot::device_idle_seconds() const {
  return std::max(
      0.0, forward_seconds - attention_seconds - gpu_expert_seconds - dense_seconds - bus_seconds);
}

Metrics::Metrics(std::int64_t layers, std::int64_t experts) : layers_(layers), experts_(experts) {
  const auto cells = static_cast<std::size_t>(std::max<std::int64_t>(1, layers * experts));
  hits_.reset(new std::atomic<std::uint64_t>[cells]);
  resident_.reset(new std::atomic<std::uint8_t>[cells]);
  for (std::size_t i = 0; i < cells; ++i) {
    hits_[i].store(0);
    resident_[i].store(0);
  }
}

MetricsSnapshot Metrics::snapshot() const {
  const auto seconds = [](const std::atomic<std::uint64_t>& ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
  };
  MetricsSnapshot s;
  s.layers = layers_;
  s.experts = experts_;
  s.hits.resize(static_cast<std::size_t>(layers_ * experts_));
  s.resident.resize(s.hits.size());
  for (std::size_t i = 0; i < s.hits.size(); ++i) {
    s.hits[i] = hits_[i].load(std::memory_order_relaxed);
    s.resident[i] = resident_[i].load(std::memory_order_relaxed);
  }
  s.accelerator = accelerator_.load(std::memory_order_relaxed);
  s.tokens = tokens_.load(std::memory_order_relaxed);
  s.forward_seconds = seconds(forward_ns_);
  s.attention_seconds = seconds(attention_ns_);
  s.cpu_expert_seconds = seconds(cpu_expert_ns_);
  s.gpu_expert_seconds = seconds(gpu_expert_ns_);
  s.dense_seconds = seconds(dense_ns_);
  s.bus_seconds = seconds(bus_ns_);
  s.copy_seconds = seconds(copy_ns_);
  s.waiting_seconds = seconds(waiting_ns_);
  s.other_seconds = seconds(other_ns_);
  s.bus_bytes = bus_bytes_.load(std::memory_order_relaxed);
  s.moves = moves_.load(std::memory_order_relaxed);
  s.moved_bytes = moved_bytes_.load(std::memory_order_relaxed);
  s.device_memory_used = device_memory_used_.load(std::memory_order_relaxed);
  s.device_memory_budget = device_memory_budget_.load(std::memory_order_relaxed);
  return s;
}

std::uint64_t process_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace tandem::measure
