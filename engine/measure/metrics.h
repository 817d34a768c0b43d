// What the engine is doing, for the live charts: routing hits per (layer, expert) and where
// the time of each forward pass goes. Written by the engine thread with relaxed atomics and
// read by the UI at any time without locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::measure {

struct MetricsSnapshot {
  std::int64_t layers = 0;
  std::int64_t experts = 0;
  std::vector<std::uint64_t> hits;  // [layer x expert], since the model was loaded
  std::uint64_t tokens = 0;         // tokens through the forward pass
  double attention_seconds = 0;
  double cpu_expert_seconds = 0;
  double gpu_expert_seconds = 0;
  double waiting_seconds = 0;
  double other_seconds = 0;
};

class Metrics {
 public:
  Metrics(std::int64_t layers, std::int64_t experts);

  void add_hit(std::int64_t layer, std::int64_t expert) {
    hits_[static_cast<std::size_t>(layer * experts_ + expert)].fetch_add(1,
                                                                         std::memory_order_relaxed);
  }
  void add_tokens(std::uint64_t n) { tokens_.fetch_add(n, std::memory_order_relaxed); }
  void add_attention_ns(std::uint64_t ns) {
    attention_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  void add_cpu_expert_ns(std::uint64_t ns) {
    cpu_expert_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  void add_other_ns(std::uint64_t ns) { other_ns_.fetch_add(ns, std::memory_order_relaxed); }

  MetricsSnapshot snapshot() const;

 private:
  std::int64_t layers_;
  std::int64_t experts_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> hits_;
  std::atomic<std::uint64_t> tokens_{0};
  std::atomic<std::uint64_t> attention_ns_{0};
  std::atomic<std::uint64_t> cpu_expert_ns_{0};
  std::atomic<std::uint64_t> other_ns_{0};
};

// Resident memory of this process, from /proc/self/statm; 0 when unknown.
std::uint64_t process_resident_bytes();

}  // namespace tandem::measure
