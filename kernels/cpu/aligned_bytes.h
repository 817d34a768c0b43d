// 64-byte aligned storage (owned, or a view of memory owned elsewhere), for packed weights
// and the buffers the kernels and the model loader share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tandem::kernels {

// 64-byte aligned, so each block of packed weights starts on a cache line.
struct AlignedBytes {
  struct Free {
    // A constructor, not a member initializer: the deleter must be default-constructible
    // while AlignedBytes is still incomplete.
    Free() noexcept : owned(true) {}
    explicit Free(bool owns) noexcept : owned(owns) {}
    bool owned;  // false: a view of memory owned elsewhere
    void operator()(std::uint8_t* p) const;
  };
  std::unique_ptr<std::uint8_t, Free> data;
  std::size_t size = 0;
  static AlignedBytes allocate(std::size_t bytes);
  // `bytes` at `p` (64-byte aligned) in memory that someone else owns and keeps alive as
  // long as the view (e.g. memory bound to a NUMA node, shared by many matrices).
  static AlignedBytes view(std::uint8_t* p, std::size_t bytes);
};

}  // namespace tandem::kernels
