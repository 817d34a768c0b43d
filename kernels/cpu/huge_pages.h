// Memory in transparent huge pages where Linux gives them, for the KV caches, which a decoded
// token reads whole at every layer. Debian's and Ubuntu's kernels give huge pages only to
// memory advised with MADV_HUGEPAGE ("madvise" in /sys/kernel/mm/transparent_hugepage/
// enabled); in 4 KiB pages a stream takes a page walk every 4 KiB. A decoded token's attention
// over eight layers' BF16 caches of 8192 positions ran faster in 2 MiB pages in 8 of 10 pairs
// of runs, 70.5 GFLOP/s on average against 64.1 (Zen 3, two threads, docs/benchmarks.md "The
// KV caches in 2 MiB pages"); the packed weights, read the same way, gained nothing measurable
// (the same file, "weights in 2 MiB pages tried"). Where the kernel has no huge pages the
// advice is refused and the memory is ordinary.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace tandem::kernels {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Whether the buffers below take huge pages: not under AddressSanitizer, whose checks of
// overruns see only the heap's blocks.
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
#define TANDEM_ADDRESS_SANITIZER 1
#endif
#endif
#ifdef TANDEM_ADDRESS_SANITIZER
inline constexpr bool kHugePagesInUse = false;
#else
inline constexpr bool kHugePagesInUse = true;
#endif

// `bytes` of zero-filled memory starting on a huge page's boundary, advised for huge pages
// (mapped, so its pages are taken as they are first written); throws std::bad_alloc when there
// is no memory. Give it back with unmap_huge and the same `bytes`.
void* map_huge(std::size_t bytes);
void unmap_huge(void* p, std::size_t bytes);

// A std::vector's allocator that maps blocks of a huge page or more with map_huge (where
// kHugePagesInUse) and leaves smaller ones to operator new.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    if (kHugePagesInUse && n * sizeof(T) >= kHugePage)
      return static_cast<T*>(map_huge(n * sizeof(T)));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (kHugePagesInUse && n * sizeof(T) >= kHugePage) {
      unmap_huge(p, n * sizeof(T));
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace tandem::kernels
