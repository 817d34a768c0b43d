// A fixed set of worker threads for data-parallel loops. The calling thread takes part, so
// a pool of N threads starts N - 1 workers. Between loops, workers spin briefly (a decode
// step issues hundreds of short loops) and then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::runtime {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(begin, end) over [0, n) in chunks taken from a shared counter; returns when
  // every chunk is done. Not re-entrant: a body must not call parallel_for.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body);
  // The same with `chunk` items per task.
  void parallel_for(std::int64_t n, std::int64_t chunk,
                    const std::function<void(std::int64_t, std::int64_t)>& body);

  // The same, in the form the kernels take.
  kernels::ParallelFor as_parallel_for();

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_{0};
  std::atomic<int> sleeping_{0};

  const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
};

}  // namespace tandem::runtime
