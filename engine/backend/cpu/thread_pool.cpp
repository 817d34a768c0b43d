#include "engine/backend/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <string>
#include <utility>

#include "engine/hw/binding.h"
#include "engine/measure/trace.h"

namespace tandem::backend {
namespace {

// How long an idle worker keeps polling for the next loop before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads)
    : ThreadPool(
          std::vector<std::vector<int>>(static_cast<std::size_t>(std::max(1, threads) - 1))) {}

ThreadPool::ThreadPool(const std::vector<std::vector<int>>& worker_cpus) {
  for (const std::vector<int>& cpus : worker_cpus)
    workers_.emplace_back([this, cpus] { worker_loop(cpus); });
}

ThreadPool::~ThreadPool() {
  wait();
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  // This thread's share of the loop, under the operation that started it, in a trace.
  const trace::Span span(trace::current_operation());
  std::int64_t begin = 0, end = 0;
  while (counter_.claim(begin, end)) (*body_)(begin, end);
}

void ThreadPool::worker_loop(const std::vector<int>& cpus) {
  // A worker that cannot be pinned still works; bind_this_thread logs the first failure.
  if (!cpus.empty()) hw::bind_this_thread(cpus);
  static std::atomic<int> workers{0};
  trace::name_thread("worker " + std::to_string(workers.fetch_add(1) + 1));
  std::uint64_t seen = 0;
  for (;;) {
    // Spin first: the next loop usually follows within microseconds. The clock is read
    // only every 64 pauses; reading it every time costs more than the wait.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1; generation_.load(std::memory_order_acquire) == seen; ++i) {
      _mm_pause();
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mutex_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    // Sequentially consistent with the waiter's caller_sleeping_ store and active_ load, so
    // one of the two always sees the other: the waiter never sleeps through the last one.
    if (active_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::start_workers(std::int64_t n, std::int64_t chunk, const Body& body) {
  body_ = &body;
  counter_.reset(n, chunk, threads());
  active_.store(static_cast<int>(workers_.size()));
  {
    // The lock orders the generation change with a worker that is about to sleep.
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleeping_.load() > 0) wake_.notify_all();
}

void ThreadPool::wait_for_workers() {
  // Spin a little for the workers' last chunks, then sleep: on a busy machine a worker may
  // not be running, and spinning would only take its core.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(30);
  for (int i = 1; active_.load(std::memory_order_acquire) > 0; ++i) {
    _mm_pause();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  if (active_.load() > 0) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [&] { return active_.load() == 0; });
    caller_sleeping_.store(false);
  }
  body_ = nullptr;
}

void ThreadPool::parallel_for(std::int64_t n, const Body& body) {
  parallel_for(n, 0, body);
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t chunk, const Body& body) {
  assert(!submitted_ && "parallel_for while a submitted loop runs");
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    body(0, n);
    return;
  }
  start_workers(n, chunk, body);
  run_chunks();
  wait_for_workers();
}

void ThreadPool::submit(std::int64_t n, std::int64_t chunk, const Body& body) {
  assert(!submitted_ && "submit before the previous loop was waited for");
  if (n <= 0) return;
  submitted_ = true;
  if (workers_.empty()) {
    deferred_ = &body;
    deferred_n_ = n;
    return;
  }
  start_workers(n, chunk, body);
}

void ThreadPool::wait() {
  if (!submitted_) return;
  submitted_ = false;
  if (deferred_ != nullptr) {
    const Body* body = std::exchange(deferred_, nullptr);
    (*body)(0, deferred_n_);
    return;
  }
  wait_for_workers();
}

kernels::ParallelFor ThreadPool::as_parallel_for() {
  return [this](std::int64_t n, const Body& body) { parallel_for(n, body); };
}

}  // namespace tandem::backend
