#include "engine/runtime/thread_pool.h"

#include <algorithm>

namespace tandem::runtime {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const std::int64_t begin = next_.fetch_add(chunk_);
    if (begin >= n_) return;
    (*body_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    body(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    // Several chunks per thread balance uneven work without much counter traffic.
    chunk_ = std::max<std::int64_t>(1, n / (static_cast<std::int64_t>(threads()) * 4));
    next_.store(0);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  body_ = nullptr;
}

kernels::ParallelFor ThreadPool::as_parallel_for() {
  return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) { parallel_for(n, body); };
}

}  // namespace tandem::runtime
