#include "engine/backend/cpu/numa_pools.h"

#include <algorithm>
#include <atomic>

namespace tandem::backend {
NumaPools::NumaPools(int threads, int pools, bool pin)
    : NumaPools(hw::place_pools(hw::probe_topology(), threads, pools), pin) {}

NumaPools::NumaPools(const std::vector<hw::PoolPlacement>& placement, bool pin)
    : placement_(placement) {
  if (placement_.empty()) placement_.resize(1);
  if (placement_[0].thread_cpus.empty()) placement_[0].thread_cpus.resize(1);  // the caller
  if (!pin) {
    for (hw::PoolPlacement& p : placement_) {
      for (std::vector<int>& cpus : p.thread_cpus) cpus.clear();
    }
  }
  for (std::size_t p = 0; p < placement_.size(); ++p) {
    const std::vector<std::vector<int>>& cpus = placement_[p].thread_cpus;
    // Pool 0's first thread is the caller; every thread of the other pools is a worker.
    pools_.push_back(std::make_unique<ThreadPool>(
        p == 0 ? std::vector<std::vector<int>>(cpus.begin() + 1, cpus.end()) : cpus));
  }
}

NumaPools::~NumaPools() = default;

int NumaPools::threads() const {
  int n = 0;
  for (const hw::PoolPlacement& p : placement_) n += static_cast<int>(p.thread_cpus.size());
  return n;
}

void NumaPools::parallel_for(std::int64_t n, const Body& body) {
  parallel_for(n, 0, body);
}

void NumaPools::parallel_for(std::int64_t n, std::int64_t chunk, const Body& body) {
  if (pools_.size() == 1) {
    pools_[0]->parallel_for(n, chunk, body);
    return;
  }
  if (n <= 0) return;
  if (n == 1) {
    body(0, 1);
    return;
  }
  // Every thread of every pool drains one shared counter.
  LoopCounter counter;
  counter.reset(n, chunk, threads());
  const Body drain = [&](std::int64_t, std::int64_t) {
    std::int64_t begin = 0, end = 0;
    while (counter.claim(begin, end)) body(begin, end);
  };
  for (std::size_t p = 1; p < pools_.size(); ++p)
    pools_[p]->submit(std::max(1, pools_[p]->workers()), 1, drain);
  run_first_and_wait([&] { pools_[0]->parallel_for(pools_[0]->threads(), 1, drain); });
}

void NumaPools::parallel_for_each_pool(std::int64_t n, std::int64_t chunk, const PoolBody& body) {
  if (n <= 0) return;
  std::vector<Body> bodies;
  bodies.reserve(pools_.size());
  for (std::size_t p = 0; p < pools_.size(); ++p) {
    bodies.emplace_back([&body, p](std::int64_t begin, std::int64_t end) {
      body(static_cast<int>(p), begin, end);
    });
  }
  for (std::size_t p = 1; p < pools_.size(); ++p) pools_[p]->submit(n, chunk, bodies[p]);
  run_first_and_wait([&] { pools_[0]->parallel_for(n, chunk, bodies[0]); });
}

void NumaPools::run_first_and_wait(const std::function<void()>& first_pool_part) {
  // The other pools read the caller's state until they are done, so they are waited for
  // also when pool 0's part throws.
  try {
    first_pool_part();
  } catch (...) {
    for (std::size_t p = 1; p < pools_.size(); ++p) pools_[p]->wait();
    throw;
  }
  for (std::size_t p = 1; p < pools_.size(); ++p) pools_[p]->wait();
}

kernels::ParallelFor NumaPools::as_parallel_for() {
  return [this](std::int64_t n, const Body& body) { parallel_for(n, body); };
}

}  // namespace tandem::backend
