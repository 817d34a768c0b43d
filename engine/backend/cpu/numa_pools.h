// The CPU's threads as one thread pool per NUMA node. Each node holds a slice of every
// routed expert in its own memory (see expert_slicing.h), and NumaPools runs the expert
// work on all pools at once, each pool on its own slice, so every core reads local memory.
// Work that is not split (attention, dense layers, the output head) runs on all threads of
// all pools together.
//
// Threads default to one per physical core, each worker pinned to one core. The thread
// that calls in (the command line's main thread, the desktop app's engine thread) is
// thread 0 of pool 0 and is never pinned: it belongs to the application and outlives the
// pools, so binding it would change it for good. Pool 0's workers leave the pool's first
// core to it, where the OS puts it as soon as the other cores are taken.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend/cpu/thread_pool.h"
#include "engine/hw/pool_placement.h"

namespace tandem::backend {

class NumaPools {
 public:
  using Body = ThreadPool::Body;
  using PoolBody = std::function<void(int pool, std::int64_t begin, std::int64_t end)>;

  // `threads` in all and `pools` pools (each at least 1), placed by hw::place_pools on this
  // machine; workers are pinned unless `pin` is false.
  explicit NumaPools(int threads, int pools = 1, bool pin = true);
  explicit NumaPools(const std::vector<hw::PoolPlacement>& placement, bool pin = true);
  ~NumaPools();
  NumaPools(const NumaPools&) = delete;
  NumaPools& operator=(const NumaPools&) = delete;

  int pools() const { return static_cast<int>(pools_.size()); }
  int threads() const;
  const std::vector<hw::PoolPlacement>& placement() const { return placement_; }
  ThreadPool& pool(int i) { return *pools_[static_cast<std::size_t>(i)]; }

  // Runs body(begin, end) over [0, n) on every thread of every pool, chunks taken from one
  // shared counter; returns when all are done. Not re-entrant.
  void parallel_for(std::int64_t n, const Body& body);
  void parallel_for(std::int64_t n, std::int64_t chunk, const Body& body);

  // Runs body(pool, begin, end) over [0, n) on every pool at once, each pool on its own
  // threads (its own slice of the work); returns when every pool is done. Not re-entrant.
  void parallel_for_each_pool(std::int64_t n, std::int64_t chunk, const PoolBody& body);

  // parallel_for in the form the kernels take.
  kernels::ParallelFor as_parallel_for();

 private:
  // Runs pool 0's part on the caller, then waits for the loops submitted to the others.
  void run_first_and_wait(const std::function<void()>& first_pool_part);

  std::vector<hw::PoolPlacement> placement_;
  std::vector<std::unique_ptr<ThreadPool>> pools_;
};

}  // namespace tandem::backend
