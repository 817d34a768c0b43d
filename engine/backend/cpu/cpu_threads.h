// The threads a CPU operation runs on: the model's NumaPools on the CPU backend, the emulated
// accelerator's own worker pool there. Routed experts split into one slice per NUMA pool run
// each slice on its own pool where the threads are so grouped; otherwise the slices share
// the threads.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend {

class NumaPools;
class ThreadPool;

class CpuThreads {
 public:
  using Body = std::function<void(std::int64_t, std::int64_t)>;
  using SliceBody = std::function<void(int slice, std::int64_t begin, std::int64_t end)>;

  explicit CpuThreads(NumaPools& pools);
  explicit CpuThreads(ThreadPool& pool);

  int count() const { return count_; }
  // Runs body(begin, end) over [0, n) in chunks of `chunk` (0: guided, see LoopCounter), on
  // every thread.
  void parallel_for(std::int64_t n, std::int64_t chunk, const Body& body) const;
  // In the form the kernels take (chunks of their choosing).
  const kernels::ParallelFor& kernels_for() const { return kernels_for_; }
  // Runs body(slice, begin, end) over [0, n) for every slice in [0, slices): on the pool of
  // each slice when the threads are grouped in `slices` pools, else all on the same threads.
  void for_each_slice(int slices, std::int64_t n, const SliceBody& body) const;

 private:
  NumaPools* pools_ = nullptr;
  ThreadPool* pool_ = nullptr;
  int count_ = 1;
  kernels::ParallelFor kernels_for_;
};

}  // namespace tandem::backend
