#include "kernels/cpu/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace tandem::kernels {

namespace {

// Whole 4 KiB pages: a mapping's last part short of a huge page takes small ones, so that no
// huge page is filled past what was asked for.
std::size_t whole_pages(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  return (bytes + kPage - 1) / kPage * kPage;
}

}  // namespace

void* map_huge(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  const std::size_t size = whole_pages(bytes);
  // One huge page more than asked, so that a boundary falls inside; the rest is given back.
  void* mapped =
      ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto at = reinterpret_cast<std::uintptr_t>(mapped);
  const std::uintptr_t aligned = (at + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > at) ::munmap(mapped, aligned - at);
  const std::uintptr_t end = at + size + kHugePage;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  void* p = reinterpret_cast<void*>(aligned);
  // Refused (EINVAL) by a kernel without transparent huge pages: ordinary pages then.
  (void)::madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void unmap_huge(void* p, std::size_t bytes) {
  if (p != nullptr) ::munmap(p, whole_pages(bytes == 0 ? 1 : bytes));
}

}  // namespace tandem::kernels
