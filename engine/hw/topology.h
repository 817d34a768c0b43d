// CPU topology through hwloc: packages, NUMA nodes, physical cores, hardware threads, caches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::hw {

struct NumaNode {
  int os_index = 0;
  std::vector<int> cpus;  // OS indices of the hardware threads in this node
  int physical_cores = 0;
  // Per physical core of this node, in hwloc's order: the OS indices of its hardware
  // threads (what a worker pinned to that core is bound to).
  std::vector<std::vector<int>> cores;
  std::uint64_t memory_bytes = 0;  // local memory as hwloc reports it
};

struct Topology {
  int packages = 0;
  int physical_cores = 0;
  int hardware_threads = 0;
  std::vector<NumaNode> numa_nodes;
  std::uint64_t l2_cache_bytes = 0;  // size of one L2 cache
  int l2_caches = 0;
  std::uint64_t l3_cache_bytes = 0;  // size of one L3 cache
  int l3_caches = 0;
  std::string error;  // set when hwloc could not load the topology; the counts then come
                      // from sysconf and NUMA is taken as one node
};

Topology probe_topology();

}  // namespace tandem::hw
