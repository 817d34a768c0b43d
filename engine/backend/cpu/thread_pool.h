// A fixed set of worker threads for data-parallel loops. parallel_for's caller takes part,
// so a pool of N threads starts N - 1 workers. submit() starts a loop on the workers alone
// and returns, so the caller can start loops on other pools before it waits (NumaPools).
// Between loops, workers spin briefly (a decode step issues hundreds of short loops) and
// then sleep. Workers may be pinned to cores; the caller is never touched.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend {

// Hands out the [begin, end) ranges of a loop over [0, n) to the threads that run it. Fixed
// chunks take `chunk` items a claim. Guided chunks (chunk 0) take 1/(2 * threads) of what is
// left, at least one item: long ranges first, single items at the end, so the threads end
// together without a claim per item (with a fixed quarter of each thread's share, the
// threads of a decode step's attention projections sat idle for a tenth of each product,
// waiting for the one with the last range). The ranges depend only on n, chunk and threads,
// not on which thread claims them.
class LoopCounter {
 public:
  void reset(std::int64_t n, std::int64_t chunk, int threads) {
    n_ = n;
    chunk_ = std::max<std::int64_t>(0, chunk);
    share_ = 2 * std::max(1, threads);
    next_.store(0);
  }
  // The next range, or false when the loop is handed out.
  bool claim(std::int64_t& begin, std::int64_t& end) {
    if (chunk_ > 0) {
      begin = next_.fetch_add(chunk_);
      end = std::min(n_, begin + chunk_);
      return begin < n_;
    }
    begin = next_.load(std::memory_order_relaxed);
    do {
      if (begin >= n_) return false;
      end = begin + std::max<std::int64_t>(1, (n_ - begin) / share_);
    } while (!next_.compare_exchange_weak(begin, end));
    return true;
  }

 private:
  std::atomic<std::int64_t> next_{0};
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 0;
  std::int64_t share_ = 2;
};

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

  // Runs body(begin, end) over [0, n) in guided chunks taken from a shared counter (see
  // LoopCounter); returns when every chunk is done. Not re-entrant: a body must not call
  // parallel_for.
  void parallel_for(std::int64_t n, const Body& body);
  // The same with `chunk` items per task (0: guided).
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
  LoopCounter counter_;
  // submit(): the loop is running on the workers, or (without workers) waits for wait().
  bool submitted_ = false;
  const Body* deferred_ = nullptr;
  std::int64_t deferred_n_ = 0;
};

}  // namespace tandem::backend
