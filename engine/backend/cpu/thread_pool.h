// A fixed set of worker threads for data-parallel loops. parallel_for's caller takes part,
// so a pool of N threads starts N - 1 workers. submit() starts a loop on the workers alone
// and returns, so the caller can start loops on other pools before it waits (NumaPools).
// Between loops, workers spin briefly (a decode step issues hundreds of short loops) and
// then sleep. Workers may be pinned to cores; the caller is never touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend {

class ThreadPool {
 public:
  using Body = std::function<void(std::int64_t, std::int64_t)>;

  // `threads` counts parallel_for's caller: threads - 1 workers start, unpinned.
  explicit ThreadPool(int threads);
  // One worker per entry, pinned to those hardware threads (OS indices; an empty entry, or
  // a system that cannot pin, leaves the worker unpinned).
  explicit ThreadPool(const std::vector<std::vector<int>>& worker_cpus);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int workers() const { return static_cast<int>(workers_.size()); }
  // The workers and parallel_for's caller.
  int threads() const { return workers() + 1; }

  // Runs body(begin, end) over [0, n) in chunks taken from a shared counter; returns when
  // every chunk is done. Not re-entrant: a body must not call parallel_for.
  void parallel_for(std::int64_t n, const Body& body);
  // The same with `chunk` items per task.
  void parallel_for(std::int64_t n, std::int64_t chunk, const Body& body);

  // Starts the same loop on the workers alone and returns at once; `body` must live until
  // wait() returns, and nothing else may run on the pool before. A pool without workers
  // runs the loop inside wait(), on the caller.
  void submit(std::int64_t n, std::int64_t chunk, const Body& body);
  // Returns when the submitted loop is done (at once when none is).
  void wait();

  // parallel_for in the form the kernels take.
  kernels::ParallelFor as_parallel_for();

 private:
  void start_workers(std::int64_t n, std::int64_t chunk, const Body& body);
  void wait_for_workers();
  void worker_loop(const std::vector<int>& cpus);
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

  const Body* body_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
  // submit(): the loop is running on the workers, or (without workers) waits for wait().
  bool submitted_ = false;
  const Body* deferred_ = nullptr;
  std::int64_t deferred_n_ = 0;
};

}  // namespace tandem::backend
