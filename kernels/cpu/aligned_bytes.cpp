#include "kernels/cpu/aligned_bytes.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace tandem::kernels {

void AlignedBytes::Free::operator()(std::uint8_t* p) const {
  if (owned) std::free(p);
}

AlignedBytes AlignedBytes::view(std::uint8_t* p, std::size_t bytes) {
  AlignedBytes a;
  a.data = std::unique_ptr<std::uint8_t, Free>(p, Free{false});
  a.size = bytes;
  return a;
}

AlignedBytes AlignedBytes::allocate(std::size_t bytes) {
  AlignedBytes a;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, std::max<std::size_t>(rounded, 64));
  if (p == nullptr) throw std::bad_alloc();
  a.data.reset(static_cast<std::uint8_t*>(p));
  a.size = rounded;
  return a;
}

}  // namespace tandem::kernels
