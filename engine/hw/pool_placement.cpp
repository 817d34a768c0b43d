#include "engine/hw/pool_placement.h"

#include <algorithm>
#include <set>
#include <utility>

namespace tandem::hw {
namespace {

// The cores a pool computes on and the nodes its memory lies on.
struct PoolCores {
  std::vector<int> numa_nodes;
  std::vector<std::vector<int>> cores;  // per core, its hardware threads
};

std::vector<const NumaNode*> nodes_with_cores(const Topology& topology) {
  std::vector<const NumaNode*> out;
  for (const NumaNode& node : topology.numa_nodes) {
    if (!node.cores.empty()) out.push_back(&node);
  }
  return out;
}

std::vector<PoolCores> split_cores(const Topology& topology, int pools) {
  const std::vector<const NumaNode*> nodes = nodes_with_cores(topology);
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
  for (const NumaNode* node : nodes) {
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

std::vector<std::vector<int>> pool_numa_nodes(const Topology& topology, int pools) {
  std::vector<std::vector<int>> out;
  for (PoolCores& p : split_cores(topology, std::max(1, pools)))
    out.push_back(std::move(p.numa_nodes));
  return out;
}

int default_pool_count(const Topology& topology) {
  return std::max(1, static_cast<int>(nodes_with_cores(topology).size()));
}

std::vector<PoolPlacement> place_pools(const Topology& topology, int threads, int pools) {
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

}  // namespace tandem::hw
