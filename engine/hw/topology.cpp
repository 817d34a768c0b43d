#include "engine/hw/topology.h"

#include <hwloc.h>
#include <unistd.h>

#include <memory>

namespace tandem::hw {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyDeleter>;

void read_cache(hwloc_topology_t topo, hwloc_obj_type_t type, std::uint64_t& bytes, int& count) {
  count = hwloc_get_nbobjs_by_type(topo, type);
  if (count > 0) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, 0);
    bytes = obj->attr ? obj->attr->cache.size : 0;
  }
}

std::vector<int> pu_indices(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  unsigned pu = 0;
  hwloc_bitmap_foreach_begin(pu, set) {
    out.push_back(static_cast<int>(pu));
  }
  hwloc_bitmap_foreach_end();
  return out;
}

Topology fallback(const std::string& why) {
  Topology t;
  t.error = why;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  t.packages = 1;
  t.hardware_threads = online > 0 ? static_cast<int>(online) : 1;
  t.physical_cores = t.hardware_threads;
  NumaNode node;
  for (int i = 0; i < t.hardware_threads; ++i) {
    node.cpus.push_back(i);
    node.cores.push_back({i});  // without hwloc, each hardware thread is taken as a core
  }
  node.physical_cores = t.physical_cores;
  node.memory_bytes = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  t.numa_nodes.push_back(node);
  return t;
}

}  // namespace

Topology probe_topology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return fallback("hwloc could not be initialised");
  TopologyHandle topo(raw);
  if (hwloc_topology_load(raw) != 0) return fallback("hwloc could not read the topology");

  Topology t;
  t.packages = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PACKAGE);
  if (t.packages <= 0) t.packages = 1;
  t.physical_cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  t.hardware_threads = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU);
  if (t.physical_cores <= 0) t.physical_cores = t.hardware_threads;
  read_cache(raw, HWLOC_OBJ_L2CACHE, t.l2_cache_bytes, t.l2_caches);
  read_cache(raw, HWLOC_OBJ_L3CACHE, t.l3_cache_bytes, t.l3_caches);

  const int nodes = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  for (int n = 0; n < nodes; ++n) {
    hwloc_obj_t node_obj = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, n);
    NumaNode node;
    node.os_index = static_cast<int>(node_obj->os_index);
    node.memory_bytes = node_obj->attr ? node_obj->attr->numanode.local_memory : 0;
    node.cpus = pu_indices(node_obj->cpuset);
    for (int c = 0; c < t.physical_cores; ++c) {
      hwloc_obj_t core = hwloc_get_obj_by_type(raw, HWLOC_OBJ_CORE, c);
      if (core == nullptr || !hwloc_bitmap_intersects(core->cpuset, node_obj->cpuset)) continue;
      ++node.physical_cores;
      node.cores.push_back(pu_indices(core->cpuset));
    }
    // Memory-only nodes (CXL, HBM without cores) take no thread pool; keep them listed.
    t.numa_nodes.push_back(std::move(node));
  }
  if (t.numa_nodes.empty()) {
    NumaNode node;
    for (int i = 0; i < t.hardware_threads; ++i) node.cpus.push_back(i);
    for (int c = 0; c < t.physical_cores; ++c) {
      hwloc_obj_t core = hwloc_get_obj_by_type(raw, HWLOC_OBJ_CORE, c);
      if (core != nullptr) node.cores.push_back(pu_indices(core->cpuset));
    }
    if (node.cores.empty()) {
      for (int cpu : node.cpus) node.cores.push_back({cpu});
    }
    node.physical_cores = static_cast<int>(node.cores.size());
    t.numa_nodes.push_back(node);
  }
  return t;
}

}  // namespace tandem::hw
