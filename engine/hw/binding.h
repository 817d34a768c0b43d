// Binding threads to cores and memory to NUMA nodes, through hwloc. Both fail harmlessly:
// where the system cannot bind (no permission, no support, a container's restrictions) the
// thread runs where the OS puts it and the memory is ordinary memory; the first failure of
// each kind is logged once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem::hw {

// Binds the calling thread to the hardware threads `cpus` (OS indices). Returns false, and
// leaves the thread as it was, when it cannot be bound.
bool bind_this_thread(const std::vector<int>& cpus);

// The hardware threads (OS indices) the calling thread is allowed to run on.
std::vector<int> this_thread_cpus();

// Page-aligned memory whose pages come from the given NUMA nodes (OS indices) only
// (HWLOC_MEMBIND_BIND). Pages are placed when first written, so whoever fills the memory
// does not decide where it lies.
class NodeMemory {
 public:
  NodeMemory() = default;
  // Throws std::bad_alloc when no memory can be had, bound or not.
  NodeMemory(std::size_t bytes, const std::vector<int>& numa_nodes);
  ~NodeMemory();
  NodeMemory(NodeMemory&& other) noexcept;
  NodeMemory& operator=(NodeMemory&& other) noexcept;
  NodeMemory(const NodeMemory&) = delete;
  NodeMemory& operator=(const NodeMemory&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  // False when the system could not bind it: then it is ordinary memory.
  bool bound() const { return bound_; }

 private:
  void release();

  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool bound_ = false;
  bool from_hwloc_ = false;
};

// The NUMA nodes (OS indices) the memory policy of [data, data + bytes) names; empty when
// the system cannot say.
std::vector<int> memory_nodes(const void* data, std::size_t bytes);

}  // namespace tandem::hw
