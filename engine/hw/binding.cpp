#include "engine/hw/binding.h"

#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "engine/log/log.h"

namespace tandem::hw {
namespace {

// One topology for the whole process, loaded on first use and never destroyed: memory
// allocated through it must be freed through it, possibly during static destruction.
hwloc_topology_t system_topology() {
  static const hwloc_topology_t topology = [] {
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0) return hwloc_topology_t{nullptr};
    if (hwloc_topology_load(t) != 0) {
      hwloc_topology_destroy(t);
      return hwloc_topology_t{nullptr};
    }
    return t;
  }();
  return topology;
}

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap bitmap_of(const std::vector<int>& indices) {
  Bitmap b(hwloc_bitmap_alloc());
  if (b == nullptr) throw std::bad_alloc();
  for (int i : indices) hwloc_bitmap_set(b.get(), static_cast<unsigned>(i));
  return b;
}

std::vector<int> indices_of(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  unsigned i = 0;
  hwloc_bitmap_foreach_begin(i, set) {
    out.push_back(static_cast<int>(i));
  }
  hwloc_bitmap_foreach_end();
  return out;
}

std::string reason(int error) {
  return error != 0 ? std::strerror(error) : std::string("hwloc could not read the topology");
}

}  // namespace

bool bind_this_thread(const std::vector<int>& cpus) {
  static std::once_flag logged;
  hwloc_topology_t topology = system_topology();
  int error = 0;
  if (topology != nullptr && !cpus.empty()) {
    const Bitmap set = bitmap_of(cpus);
    if (hwloc_set_cpubind(topology, set.get(), HWLOC_CPUBIND_THREAD) == 0) return true;
    error = errno;
  }
  std::call_once(logged, [&] {
    log::info("threads cannot be pinned to cores here ({}); they run where the OS puts them",
              reason(error));
  });
  return false;
}

std::vector<int> this_thread_cpus() {
  hwloc_topology_t topology = system_topology();
  if (topology == nullptr) return {};
  const Bitmap set(hwloc_bitmap_alloc());
  if (set == nullptr || hwloc_get_cpubind(topology, set.get(), HWLOC_CPUBIND_THREAD) != 0)
    return {};
  return indices_of(set.get());
}

NodeMemory::NodeMemory(std::size_t bytes, const std::vector<int>& numa_nodes) {
  static std::once_flag logged;
  size_ = bytes;
  if (bytes == 0) return;
  hwloc_topology_t topology = system_topology();
  int error = 0;
  if (topology != nullptr) {
    const Bitmap nodes = bitmap_of(numa_nodes);
    void* p = hwloc_alloc_membind(topology, bytes, nodes.get(), HWLOC_MEMBIND_BIND,
                                  HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
    if (p != nullptr) {
      data_ = static_cast<std::uint8_t*>(p);
      bound_ = true;
      from_hwloc_ = true;
      return;
    }
    error = errno;
    if (error == ENOMEM) throw std::bad_alloc();
  }
  std::call_once(logged, [&] {
    log::info(
        "memory cannot be bound to NUMA nodes here ({}); the expert slices use ordinary memory",
        reason(error));
  });
  if (topology != nullptr) {
    data_ = static_cast<std::uint8_t*>(hwloc_alloc(topology, bytes));
    from_hwloc_ = true;
  } else {
    const std::size_t page = 4096;
    data_ = static_cast<std::uint8_t*>(std::aligned_alloc(page, (bytes + page - 1) / page * page));
  }
  if (data_ == nullptr) throw std::bad_alloc();
}

NodeMemory::~NodeMemory() {
  release();
}

NodeMemory::NodeMemory(NodeMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      bound_(std::exchange(other.bound_, false)),
      from_hwloc_(std::exchange(other.from_hwloc_, false)) {}

NodeMemory& NodeMemory::operator=(NodeMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    bound_ = std::exchange(other.bound_, false);
    from_hwloc_ = std::exchange(other.from_hwloc_, false);
  }
  return *this;
}

void NodeMemory::release() {
  if (data_ == nullptr) return;
  if (from_hwloc_)
    hwloc_free(system_topology(), data_, size_);
  else
    std::free(data_);
  data_ = nullptr;
}

std::vector<int> memory_nodes(const void* data, std::size_t bytes) {
  hwloc_topology_t topology = system_topology();
  if (topology == nullptr || data == nullptr || bytes == 0) return {};
  const Bitmap nodes(hwloc_bitmap_alloc());
  hwloc_membind_policy_t policy{};
  if (nodes == nullptr || hwloc_get_area_membind(topology, data, bytes, nodes.get(), &policy,
                                                 HWLOC_MEMBIND_BYNODESET) != 0)
    return {};
  return indices_of(nodes.get());
}

}  // namespace tandem::hw
