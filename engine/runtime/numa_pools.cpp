#include "engine/runtime/numa_pools.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

namespace tandem::runtime {
namespace {

// The cores a pool computes on and the nodes its memory lies on.
struct PoolCores {
  std::vector<int> numa_nodes;
  std::vector<std::vector<int>> cores;  // per core, its hardware threads
};

std::vector<const hw::NumaNode*> nodes_with_cores(const hw::Topology& topology) {
  std::vector<const hw::NumaNode*> out;
  for (const hw::NumaNode& node : topology.numa_nodes) {
    if (!node.cores.empty()) out.push_back(&node);
  }
  return out;
}

std::vector<PoolCores> split_cores(const hw::Topology& topology, int pools) {
  const std::vector<const hw::NumaNode*> nodes = nodes_with_cores(topology);
  std::vector<PoolCores> out(static_cast<std::size_t>(pools));
  if (nodes.empty()) {
    for (PoolCores& p : out) p.numa_nodes = {0};
    return out;
  }
  const auto n = static_cast<std::size_t>(pools);
  if (n <= nodes.size()) {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = i * nodes.size() / n; k < (i + 1) * nodes.size() / n; ++k) {
        out[i].numa_nodes.push_back(nodes[k]->os_index);
        out[i].cores.insert(out[i].cores.end(), nodes[k]->cores.begin(), nodes[k]->cores.end());
      }
    }
    return out;
  }
  // More pools than nodes: the cores in node order, cut evenly.
  std::vector<std::pair<int, const std::vector<int>*>> cores;  // (node, core)
  for (const hw::NumaNode* node : nodes) {
    for (const std::vector<int>& core : node->cores) cores.emplace_back(node->os_index, &core);
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::set<int> pool_nodes;
    for (std::size_t c = i * cores.size() / n; c < (i + 1) * cores.size() / n; ++c) {
      pool_nodes.insert(cores[c].first);
      out[i].cores.push_back(*cores[c].second);
    }
    // With fewer cores than pools, a coreless pool keeps the memory of its neighbour's node.
    if (pool_nodes.empty())
      pool_nodes.insert(cores[std::min(cores.size() - 1, i * cores.size() / n)].first);
    out[i].numa_nodes.assign(pool_nodes.begin(), pool_nodes.end());
  }
  return out;
}

// Threads per pool: one each first while they last, the rest in proportion to the cores.
std::vector<int> divide_threads(const std::vector<PoolCores>& pools, int threads) {
  const auto n = static_cast<int>(pools.size());
  std::vector<int> out(pools.size(), 0);
  for (int i = 0; i < std::min(n, threads); ++i) out[static_cast<std::size_t>(i)] = 1;
  std::int64_t total_cores = 0;
  for (const PoolCores& p : pools) total_cores += static_cast<std::int64_t>(p.cores.size());
  for (int left = threads - std::min(n, threads); left > 0; --left) {
    // The pool furthest below its share of the cores takes the next thread.
    std::size_t best = 0;
    double best_gap = -1e300;
    for (std::size_t i = 0; i < pools.size(); ++i) {
      const double share = total_cores > 0 ? static_cast<double>(threads) *
                                                 static_cast<double>(pools[i].cores.size()) /
                                                 static_cast<double>(total_cores)
                                           : static_cast<double>(threads) / n;
      const double gap = share - out[i];
      if (gap > best_gap) {
        best_gap = gap;
        best = i;
      }
    }
    ++out[best];
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> pool_numa_nodes(const hw::Topology& topology, int pools) {
  std::vector<std::vector<int>> out;
  for (PoolCores& p : split_cores(topology, std::max(1, pools)))
    out.push_back(std::move(p.numa_nodes));
  return out;
}

int default_pool_count(const hw::Topology& topology) {
  return std::max(1, static_cast<int>(nodes_with_cores(topology).size()));
}

std::vector<PoolPlacement> place_pools(const hw::Topology& topology, int threads, int pools) {
  threads = std::max(1, threads);
  const std::vector<PoolCores> split = split_cores(topology, std::max(1, pools));
  const std::vector<int> counts = divide_threads(split, threads);
  std::vector<PoolPlacement> out(split.size());
  for (std::size_t p = 0; p < split.size(); ++p) {
    const PoolCores& pool = split[p];
    const auto count = static_cast<std::size_t>(counts[p]);
    PoolPlacement& placed = out[p];
    placed.numa_nodes = pool.numa_nodes;
    std::vector<int> all_cpus;
    for (const std::vector<int>& core : pool.cores)
      all_cpus.insert(all_cpus.end(), core.begin(), core.end());
    for (std::size_t t = 0; t < count; ++t) {
      if (count <= pool.cores.size())
        placed.thread_cpus.push_back(pool.cores[t]);
      else
        placed.thread_cpus.push_back(all_cpus);
    }
    if (p == 0 && !placed.thread_cpus.empty()) placed.thread_cpus[0].clear();  // the caller
  }
  return out;
}

NumaPools::NumaPools(int threads, int pools, bool pin)
    : NumaPools(place_pools(hw::probe_topology(), threads, pools), pin) {}

NumaPools::NumaPools(const std::vector<PoolPlacement>& placement, bool pin)
    : placement_(placement) {
  if (placement_.empty()) placement_.resize(1);
  if (placement_[0].thread_cpus.empty()) placement_[0].thread_cpus.resize(1);  // the caller
  if (!pin) {
    for (PoolPlacement& p : placement_) {
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
  for (const PoolPlacement& p : placement_) n += static_cast<int>(p.thread_cpus.size());
  return n;
}

void NumaPools::parallel_for(std::int64_t n, const Body& body) {
  if (pools_.size() == 1) {
    pools_[0]->parallel_for(n, body);
    return;
  }
  parallel_for(n, std::max<std::int64_t>(1, n / (static_cast<std::int64_t>(threads()) * 4)), body);
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
  chunk = std::max<std::int64_t>(1, chunk);
  // Every thread of every pool drains one shared counter.
  std::atomic<std::int64_t> next{0};
  const Body drain = [&](std::int64_t, std::int64_t) {
    for (std::int64_t begin = next.fetch_add(chunk); begin < n; begin = next.fetch_add(chunk))
      body(begin, std::min(n, begin + chunk));
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

}  // namespace tandem::runtime
