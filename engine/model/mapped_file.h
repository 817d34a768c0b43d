// A read-only memory mapping of a whole file. Model files are tens to hundreds of GiB, so
// they are mapped and paged in on demand, never read into memory.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace tandem::model {

// The exit status of a process whose mapped file was cut short under it: a read past the
// file's new end (SIGBUS) ends Tandem with a sentence naming the file, not a crash.
inline constexpr int kMappedFileChangedExit = 74;

class MappedFile {
 public:
  // Throws std::runtime_error naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_bytes_}; }
  std::size_t size_bytes() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_bytes_ = 0;
};

}  // namespace tandem::model
