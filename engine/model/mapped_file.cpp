#include "engine/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "engine/model/model_error.h"

namespace tandem::model {

namespace {

ModelError system_error(const std::string& path, const char* what) {
  return ModelError("Could not " + std::string(what) + " " + path + ": " + std::strerror(errno) +
                    ". Check that the path is right and readable.");
}

// The mappings alive, for the SIGBUS handler: a file cut short (or rewritten) while mapped
// makes a read beyond its new end raise SIGBUS. The handler names the file in a sentence
// and ends the process, instead of a crash. Fixed slots: the handler may not allocate.
struct MappingSlot {
  std::atomic<std::uintptr_t> begin{0};  // 0: free; 1: being filled
  std::atomic<std::uintptr_t> end{0};
  char path[480] = {};
};
constexpr int kSlots = 1024;
MappingSlot g_slots[kSlots];

void write_all(const char* text) {
  std::size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

extern "C" void on_mapping_fault(int signal, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (MappingSlot& slot : g_slots) {
    const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin <= 1 || address < begin || address >= slot.end.load(std::memory_order_acquire))
      continue;
    write_all("tandem: the file ");
    write_all(slot.path);
    write_all(
        " was cut short or rewritten while Tandem was reading it (another program changed "
        "it). Tandem stops here; load the model again once the file is whole.\n");
    ::_exit(kMappedFileChangedExit);
  }
  // Not one of ours: the fault it is.
  std::signal(signal, SIG_DFL);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_mapping_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

void register_mapping(const void* data, std::size_t size, const std::string& path) {
  for (MappingSlot& slot : g_slots) {
    std::uintptr_t expected = 0;
    if (!slot.begin.compare_exchange_strong(expected, 1)) continue;
    const std::size_t n = std::min(path.size(), sizeof slot.path - 1);
    std::memcpy(slot.path, path.data(), n);
    slot.path[n] = '\0';
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    slot.end.store(begin + size, std::memory_order_release);
    slot.begin.store(begin, std::memory_order_release);
    return;
  }
  // More than kSlots files mapped at once: the rest fault as before.
}

void unregister_mapping(const void* data) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  for (MappingSlot& slot : g_slots) {
    std::uintptr_t expected = begin;
    if (slot.begin.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  install_fault_handler();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error(path, "open");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    throw system_error(path, "inspect");
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw ModelError(path + " is not a regular file. Give the path of a model file.");
  }
  size_bytes_ = static_cast<std::size_t>(info.st_size);
  // mmap rejects a zero length; an empty file maps to an empty span and fails the
  // format's own size checks with a clearer sentence.
  if (size_bytes_ > 0) {
    void* address = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      throw system_error(path, "map");
    }
    data_ = static_cast<const std::byte*>(address);
    register_mapping(data_, size_bytes_, path);
  }
  ::close(fd);  // the mapping keeps the file referenced
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) {
    unregister_mapping(data_);
    ::munmap(const_cast<std::byte*>(data_), size_bytes_);
  }
  data_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace tandem::model
