// What the engine is doing, for the live charts: routing hits per (layer, expert), which
// experts are on the accelerator, and where the time of the forward passes goes. Written by
// the engine thread with relaxed atomics and read by the UI at any time without locks.
//
// Time comes in two lanes, each summing to the forward passes' wall time. The host lane is
// the thread that drives the model: its CPU experts, its waits for the accelerator, and the
// rest (other). The device lane is where the forward pass computes: attention, the experts
// resident there, dense work (norms, routers, shared experts, dense layers, the output head)
// and transfers on its compute queue (bus); what is left is idle. Without an accelerator the
// CPU is both, and other is what the three parts leave of the wall time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::measure {

struct MetricsSnapshot {
  std::int64_t layers = 0;
  std::int64_t experts = 0;
  std::vector<std::uint64_t> hits;     // [layer x expert], since the model was loaded
  std::vector<std::uint8_t> resident;  // [layer x expert]: 1 where on the accelerator now
  bool accelerator = false;
  std::uint64_t tokens = 0;  // tokens through the forward pass
  double forward_seconds = 0;
  double attention_seconds = 0;
  double cpu_expert_seconds = 0;
  double gpu_expert_seconds = 0;
  double dense_seconds = 0;
  double bus_seconds = 0;
  double copy_seconds = 0;  // the accelerator's copy queue (moves, staging), beside compute
  double waiting_seconds = 0;
  double other_seconds = 0;
  std::uint64_t bus_bytes = 0;
  std::uint64_t moves = 0;  // dynamic-update moves that completed
  std::uint64_t moved_bytes = 0;
  std::uint64_t device_memory_used = 0;  // the accelerator's
  std::uint64_t device_memory_budget = 0;

  double device_idle_seconds() const;
};

class Metrics {
 public:
  Metrics(std::int64_t layers, std::int64_t experts);

  void add_hit(std::int64_t layer, std::int64_t expert) {
    hits_[cell(layer, expert)].fetch_add(1, std::memory_order_relaxed);
  }
  void set_resident(std::int64_t layer, std::int64_t expert, bool on_accelerator) {
    resident_[cell(layer, expert)].store(on_accelerator ? 1 : 0, std::memory_order_relaxed);
  }
  void set_accelerator(bool present) { accelerator_.store(present, std::memory_order_relaxed); }
  void add_tokens(std::uint64_t n) { tokens_.fetch_add(n, std::memory_order_relaxed); }
  void add_forward_ns(std::uint64_t ns) { add(forward_ns_, ns); }
  void add_attention_ns(std::uint64_t ns) { add(attention_ns_, ns); }
  void add_cpu_expert_ns(std::uint64_t ns) { add(cpu_expert_ns_, ns); }
  void add_gpu_expert_ns(std::uint64_t ns) { add(gpu_expert_ns_, ns); }
  void add_dense_ns(std::uint64_t ns) { add(dense_ns_, ns); }
  void add_bus_ns(std::uint64_t ns) { add(bus_ns_, ns); }
  void add_copy_ns(std::uint64_t ns) { add(copy_ns_, ns); }
  void add_waiting_ns(std::uint64_t ns) { add(waiting_ns_, ns); }
  void add_other_ns(std::uint64_t ns) { add(other_ns_, ns); }
  void add_bus_bytes(std::uint64_t bytes) { add(bus_bytes_, bytes); }
  void set_device_memory(std::uint64_t used, std::uint64_t budget) {
    device_memory_used_.store(used, std::memory_order_relaxed);
    device_memory_budget_.store(budget, std::memory_order_relaxed);
  }
  void add_moves(std::uint64_t moves, std::uint64_t bytes) {
    add(moves_, moves);
    add(moved_bytes_, bytes);
  }

  MetricsSnapshot snapshot() const;

 private:
  std::size_t cell(std::int64_t layer, std::int64_t expert) const {
    return static_cast<std::size_t>(layer * experts_ + expert);
  }
  static void add(std::atomic<std::uint64_t>& a, std::uint64_t v) {
    a.fetch_add(v, std::memory_order_relaxed);
  }

  std::int64_t layers_;
  std::int64_t experts_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> hits_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> resident_;
  std::atomic<bool> accelerator_{false};
  std::atomic<std::uint64_t> tokens_{0};
  std::atomic<std::uint64_t> forward_ns_{0}, attention_ns_{0}, cpu_expert_ns_{0}, gpu_expert_ns_{0},
      dense_ns_{0}, bus_ns_{0}, copy_ns_{0}, waiting_ns_{0}, other_ns_{0};
  std::atomic<std::uint64_t> bus_bytes_{0}, moves_{0}, moved_bytes_{0};
  std::atomic<std::uint64_t> device_memory_used_{0}, device_memory_budget_{0};
};

// Resident memory of this process, from /proc/self/statm; 0 when unknown.
std::uint64_t process_resident_bytes();

}  // namespace tandem::measure
