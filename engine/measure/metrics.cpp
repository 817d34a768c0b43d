#include "engine/measure/metrics.h"

#include <unistd.h>

#include <fstream>

namespace tandem::measure {

Metrics::Metrics(std::int64_t layers, std::int64_t experts)
    : layers_(layers),
      experts_(experts),
      hits_(new std::atomic<std::uint64_t>[static_cast<std::size_t>(
          std::max<std::int64_t>(1, layers * experts))]) {
  for (std::int64_t i = 0; i < std::max<std::int64_t>(1, layers * experts); ++i)
    hits_[static_cast<std::size_t>(i)].store(0);
}

MetricsSnapshot Metrics::snapshot() const {
  MetricsSnapshot s;
  s.layers = layers_;
  s.experts = experts_;
  s.hits.resize(static_cast<std::size_t>(layers_ * experts_));
  for (std::size_t i = 0; i < s.hits.size(); ++i)
    s.hits[i] = hits_[i].load(std::memory_order_relaxed);
  s.tokens = tokens_.load(std::memory_order_relaxed);
  s.attention_seconds = static_cast<double>(attention_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.cpu_expert_seconds = static_cast<double>(cpu_expert_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.other_seconds = static_cast<double>(other_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

std::uint64_t process_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace tandem::measure
