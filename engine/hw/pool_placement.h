// How the CPU's threads are grouped into one pool per NUMA node and pinned to cores: the
// placement NumaPools (engine/backend/cpu) runs with, and the nodes whose memory holds each
// pool's slices of the routed experts (engine/model/expert_slicing.h).
#pragma once

#include <vector>

#include "engine/hw/topology.h"

namespace tandem::hw {

struct PoolPlacement {
  // The NUMA nodes (OS indices) whose memory holds this pool's expert slices.
  std::vector<int> numa_nodes;
  // Per thread, the hardware threads (OS indices) it is pinned to; empty: not pinned. In
  // pool 0 the first thread is the caller.
  std::vector<std::vector<int>> thread_cpus;
};

// How `threads` threads in `pools` pools map onto the machine. With at most as many pools
// as NUMA nodes that have cores, each pool takes whole nodes (neighbouring ones when there
// are more nodes than pools); with more pools than nodes (2 pools on a one-node machine,
// say) the cores are split evenly in order, and pools share a node's memory. Threads are
// divided among the pools in proportion to their cores, one each first while they last; a
// pool's threads are pinned one per core, or each to all the pool's cores when it has more
// threads than cores. A pool may get no thread (fewer threads than pools): its work then
// runs on the caller.
std::vector<PoolPlacement> place_pools(const Topology& topology, int threads, int pools);

// The NUMA nodes (OS indices) of each of `pools` pools, as place_pools assigns them.
std::vector<std::vector<int>> pool_numa_nodes(const Topology& topology, int pools);

// The default pool count: the NUMA nodes that have cores (at least 1).
int default_pool_count(const Topology& topology);

}  // namespace tandem::hw
